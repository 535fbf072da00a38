#!/usr/bin/env bash
# The server llama.cpp's test harness starts (LLAMA_SERVER_BIN_PATH), for
# scripts/run-llama-server-tests.sh: the Hugging Face model ids of the harness's presets are
# replaced by local files, then llama-server (LOCAL_SERVER=llama) or `ggrs serve` through
# scripts/ggrs-as-llama-server.sh (LOCAL_SERVER=ggrs) starts with the same arguments.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tiny=${GGRS_REFERENCE_DIR:?set GGRS_REFERENCE_DIR}/tiny

# all-MiniLM-L6-v2 (the embedding tests' BERT, in place of bge-small: same layout, 384
# wide), converted once with `ggrs convert` from the checkpoint scripts/fetch-embed-model.sh
# fetches, and cached beside the other derived models.
minilm() {
    local out=${XDG_CACHE_HOME:-$HOME/.cache}/ggrs/models/derived/all-minilm-l6-v2-f16.gguf
    if [[ ! -f $out ]]; then
        mkdir -p "$(dirname "$out")"
        "${GGRS_BIN:?}" convert "$("$here/fetch-embed-model.sh")" "$out.part" --outtype f16 >&2
        mv "$out.part" "$out"
    fi
    echo "$out"
}

# The tiny random-weight llama in three parts, as llama-gguf-split cuts it (12 tensors a
# part; `ggrs split` where llama.cpp's tool is not built, which writes the same bytes), made
# once beside the other derived models: the first part's path. Stands in for the harness's
# split stories15M (tinyllamas/split/stories15M-q8_0-00001-of-00003.gguf).
split_tiny() {
    local dir=${XDG_CACHE_HOME:-$HOME/.cache}/ggrs/models/derived/split
    local first=$dir/tiny-llama-f16-00001-of-00003.gguf
    if [[ ! -f $dir/tiny-llama-f16-00003-of-00003.gguf ]]; then
        local tmp
        mkdir -p "$dir"
        tmp=$(mktemp -d "$dir/.make.XXXXXX")
        local tool
        tool=$(dirname "${LLAMA_SERVER_REAL:-/nonexistent/x}")/llama-gguf-split
        if [[ -x $tool ]]; then
            "$tool" --split-max-tensors 12 "$tiny/tiny-llama-f16.gguf" "$tmp/tiny-llama-f16" >&2
        else
            "${GGRS_BIN:?}" split --split-max-tensors 12 "$tiny/tiny-llama-f16.gguf" \
                "$tmp/tiny-llama-f16" >&2
        fi
        mv "$tmp"/tiny-llama-f16-0000?-of-00003.gguf "$dir/"
        rmdir "$tmp"
    fi
    echo "$first"
}

# An HF repo (with its optional :QUANT) and --hf-file -> a local GGUF file.
local_model() {
    case $1:${2:-} in
        ggml-org/models:bert-bge-small/*)
            minilm
            return
            ;;
        ggml-org/models:tinyllamas/split/*-00001-of-00003.gguf)
            split_tiny
            return
            ;;
        ggml-org/models:?*)
            echo "llama-server-local: no local file for '$2' of ggml-org/models" >&2
            return 1
            ;;
    esac
    case $1 in
        ggml-org/test-model-stories260K* | ggml-org/models) echo "$tiny/tiny-llama-f16.gguf" ;;
        ggml-org/tinygemma3-GGUF*) echo "$tiny/tiny-gemma3-f16.gguf" ;;
        *Qwen2.5*) "$here/default-model.sh" ;;
        *)
            echo "llama-server-local: no local file for the Hugging Face model '$1'" >&2
            return 1
            ;;
    esac
}

args=()
repo=
file=
template=
while (($#)); do
    case $1 in
        --chat-template | --chat-template-file) template=1; args+=("$1"); shift ;;
        --hf-repo | -hf) repo=$2; shift 2 ;;
        --hf-file | -hff) file=$2; shift 2 ;;
        --offline) shift ;;
        *) args+=("$1"); shift ;;
    esac
done
if [[ -n $repo ]]; then
    model=$(local_model "$repo" "$file")
    args+=(--model "$model")
    # The tiny models have no chat template: llama-server falls back to ChatML by itself,
    # `ggrs serve` refuses chat requests without a format (400 naming --chat-template), so
    # both get ChatML explicitly.
    if [[ $model == "$tiny"/* && -z $template ]]; then
        args+=(--chat-template chatml)
    fi
fi
case ${LOCAL_SERVER:-llama} in
    llama) exec "${LLAMA_SERVER_REAL:?}" "${args[@]}" ;;
    ggrs) exec "$here/ggrs-as-llama-server.sh" "${args[@]}" ;;
    *) echo "llama-server-local: LOCAL_SERVER is llama or ggrs" >&2; exit 1 ;;
esac
