#!/usr/bin/env bash
# ggrs against llama.cpp on every architecture of the tiny reference models, scaled up to a
# realistic width (issue 21): generates, once, a random-weight q4_0 model per architecture
# with `ggrs-llama/examples/gen_model.rs` (from shared/reference/tiny) and
# `ggrs quantize … q4_0`, then runs scripts/bench-vs-llamacpp.sh on them.
#
# usage: scripts/bench-archs.sh LLAMA_BENCH [MODEL_DIR]
#   MODEL_DIR: where the generated models are kept (default
#              ${XDG_CACHE_HOME:-$HOME/.cache}/ggrs/models/gen); a model already there is reused.
#   env: ARCHS ("llama qwen2 qwen3 gemma2 phi3 qwen3moe chatglm lfm2 granitehybrid
#        qwen35 qwen35moe gemma3 gemma4 gpt-oss mistral3 smollm3 granite phi3-longrope"),
#        WIDTH (1024), LAYERS (8),
#        SEED (1), GEN_ONLY (1: generate the models, print their paths and stop);
#        THREADS, P, N, R, ROUNDS, GGRS, OUT are bench-vs-llamacpp.sh's and passed through.
#   The tiny models are found through GGRS_REFERENCE_DIR or shared/reference above the
#   repository.
set -euo pipefail
llama_bench=${1:?usage: $0 LLAMA_BENCH [MODEL_DIR]}
dir=${2:-${XDG_CACHE_HOME:-$HOME/.cache}/ggrs/models/gen}
ARCHS=${ARCHS:-llama qwen2 qwen3 gemma2 phi3 qwen3moe chatglm lfm2 granitehybrid qwen35 qwen35moe gemma3 gemma4 gpt-oss mistral3 smollm3 granite phi3-longrope}
WIDTH=${WIDTH:-1024} LAYERS=${LAYERS:-8} SEED=${SEED:-1}
# Paths given relative to the caller's directory stay valid after the cd below (a bare
# command name is left to PATH).
abs() { case $1 in /*) echo "$1" ;; */*) echo "$PWD/$1" ;; *) echo "$1" ;; esac; }
llama_bench=$(abs "$llama_bench")
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
[ -z "${GGRS:-}" ] || GGRS=$(abs "$GGRS")
[ -z "${OUT:-}" ] || export OUT="$(abs "$OUT")"
cd "$(dirname "$0")/.."
GGRS=${GGRS:-target/release/ggrs}
export GGRS

if [ ! -x "$GGRS" ]; then
    cargo build --release -p ggrs-cli
fi
gen=target/release/examples/gen_model
cargo build --release -p ggrs-llama --example gen_model
mkdir -p "$dir"

models=()
for arch in $ARCHS; do
    name="$arch-w$WIDTH-l$LAYERS-s$SEED"
    q4="$dir/$name-q4_0.gguf"
    if [ ! -s "$q4" ]; then
        f16="$dir/$name-f16.tmp.gguf"
        echo "generating $q4" >&2
        "$gen" --arch "$arch" --out "$f16" --width "$WIDTH" --layers "$LAYERS" --seed "$SEED" >&2
        # `ggrs quantize` writes a temporary file and renames it when complete.
        "$GGRS" quantize "$f16" "$q4" q4_0 >&2
        rm -f "$f16"
    fi
    models+=("$q4")
done

if [ "${GEN_ONLY:-0}" = 1 ]; then
    printf '%s\n' "${models[@]}"
    exit 0
fi
exec scripts/bench-vs-llamacpp.sh "$llama_bench" "${models[@]}"
