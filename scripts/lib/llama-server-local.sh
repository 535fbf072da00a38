#!/usr/bin/env bash
# The server llama.cpp's test harness starts (LLAMA_SERVER_BIN_PATH), for
# scripts/run-llama-server-tests.sh: the Hugging Face model ids of the harness's presets are
# replaced by local files, then llama-server (LOCAL_SERVER=llama) or `ggrs serve` through
# scripts/ggrs-as-llama-server.sh (LOCAL_SERVER=ggrs) starts with the same arguments.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tiny=${GGRS_REFERENCE_DIR:?set GGRS_REFERENCE_DIR}/tiny

# An HF repo (with its optional :QUANT and --hf-file) -> a local GGUF file.
local_model() {
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
template=
while (($#)); do
    case $1 in
        --chat-template | --chat-template-file) template=1; args+=("$1"); shift ;;
        --hf-repo | -hf) repo=$2; shift 2 ;;
        --hf-file | -hff) shift 2 ;;
        --offline) shift ;;
        *) args+=("$1"); shift ;;
    esac
done
if [[ -n $repo ]]; then
    model=$(local_model "$repo")
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
