#!/usr/bin/env bash
# Fetches llama.cpp's tokenizer test vectors for ggrs-llama/tests/tokenizer.rs.
#
# llama.cpp keeps vocabulary-only GGUF files with test strings and the token ids it makes
# of them in models/ggml-vocab-<name>.gguf{,.inp,.out}. The PyPI source distribution
# llama-cpp-python==0.3.36 carries them under vendor/llama.cpp/models/; this script
# downloads that sdist (76,589,250 bytes; its URL comes from PyPI's simple index), checks
# its sha256, and extracts only models/ggml-vocab-* (about 80 MB) into one directory.
#
# Usage:  DIR=$(scripts/fetch-vocab-vectors.sh)
#
# The files go to ${GGRS_VOCAB_DIR:-$HOME/.cache/ggrs/vocab}. Only that path is printed on
# stdout; progress goes to stderr. The directory counts as complete once it holds the
# marker `.complete` (written last, with the sdist's sha256); then nothing is downloaded.
#
# Environment:
#   GGRS_VOCAB_DIR               where to store the files (default ~/.cache/ggrs/vocab)
#   LLAMA_CPP_PYTHON_SDIST       a local copy of the sdist to use instead of downloading
#                                (checked against the same sha256)
#   PYTHON                       the Python interpreter used to extract (default python3)
set -euo pipefail

readonly PROJECT="llama-cpp-python"
readonly FILE="llama_cpp_python-0.3.36.tar.gz"
readonly SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
readonly INDEX="https://pypi.org/simple/$PROJECT/"

PYTHON="${PYTHON:-python3}"
DIR="${GGRS_VOCAB_DIR:-$HOME/.cache/ggrs/vocab}"
MARKER="$DIR/.complete"

log() { printf 'fetch-vocab-vectors: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# sha256_of FILE
# shellcheck source=lib/sha256.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/sha256.sh"

# Downloads URL $1 to file $2 (curl, or wget).
download() {
    if command -v curl >/dev/null 2>&1; then
        curl --fail --location --silent --show-error --retry 3 -o "$2" "$1"
    elif command -v wget >/dev/null 2>&1; then
        wget --quiet --tries=3 -O "$2" "$1"
    else
        die "neither curl nor wget is installed"
    fi
}

if [[ -f "$MARKER" && "$(cat "$MARKER")" == "$SHA256" ]]; then
    log "already present in $DIR"
    printf '%s\n' "$DIR"
    exit 0
fi

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set PYTHON=...)"
mkdir -p "$DIR"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/ggrs-fetch-vocab.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

if [[ -n "${LLAMA_CPP_PYTHON_SDIST:-}" ]]; then
    SDIST="$LLAMA_CPP_PYTHON_SDIST"
    [[ -f "$SDIST" ]] || die "LLAMA_CPP_PYTHON_SDIST=$SDIST is not a file"
    log "using the local copy $SDIST"
else
    log "looking up $FILE in $INDEX"
    download "$INDEX" "$TMP/index.html" || die "could not read $INDEX"
    # The index links each file as href="URL#sha256=HEX".
    url="$(grep -o "href=\"[^\"]*/$FILE#sha256=[0-9a-f]*\"" "$TMP/index.html" | head -n 1 |
        sed -e 's/^href="//' -e 's/"$//')"
    [[ -n "$url" ]] || die "$FILE is not listed in $INDEX"
    [[ "${url##*#sha256=}" == "$SHA256" ]] ||
        die "PyPI lists $FILE with sha256 ${url##*#sha256=}, expected $SHA256"
    SDIST="$TMP/$FILE"
    log "downloading ${url%%#*}"
    download "${url%%#*}" "$SDIST" || die "download of $FILE failed"
fi

log "verifying sha256"
got="$(sha256_of "$SDIST")"
[[ "$got" == "$SHA256" ]] || die "sha256 mismatch for $SDIST: got $got, expected $SHA256"

log "extracting models/ggml-vocab-*"
mkdir -p "$TMP/out"
"$PYTHON" -c '
import os, shutil, sys, tarfile
src, dst = sys.argv[1], sys.argv[2]
n = 0
with tarfile.open(src, "r:gz") as tar:
    for m in tar:
        base = os.path.basename(m.name)
        if m.isfile() and "/vendor/llama.cpp/models/" in m.name and base.startswith("ggml-vocab-"):
            with tar.extractfile(m) as f, open(os.path.join(dst, base), "wb") as out:
                shutil.copyfileobj(f, out, 1 << 20)
            n += 1
if n == 0:
    sys.exit("no models/ggml-vocab-* files in " + src)
print(n)' "$SDIST" "$TMP/out" >"$TMP/count" || die "could not extract the vocabulary files"

rm -f "$MARKER"
mv -f "$TMP/out"/ggml-vocab-* "$DIR"/
printf '%s\n' "$SHA256" >"$MARKER"
log "stored $(cat "$TMP/count") files in $DIR"
printf '%s\n' "$DIR"
