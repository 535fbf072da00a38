#!/usr/bin/env bash
# Starts `ggrs serve` with the arguments llama.cpp's server tests pass to `llama-server`
# (tools/server/tests/utils.py), so that those tests can run against ggrs:
#
#   LLAMA_SERVER_BIN_PATH=$PWD/scripts/ggrs-as-llama-server.sh pytest unit/test_tool_call.py
#
# Models: `--model FILE` is served; `--hf-repo`/`--hf-file` cannot be downloaded here (no
# network) and are replaced by GGRS_TEST_MODEL (default: the default model,
# `scripts/default-model.sh`). scripts/run-llama-server-tests.sh maps the harness's Hugging Face
# ids to local files and gives the same file to llama-server for a comparison. Flags ggrs does not have and that change nothing it does
# (`--no-slots`, `--jinja`, `--cont-batching`, `-fa`, …) are dropped; `--temp` and `--seed`
# (server-wide sampling defaults) are dropped too. `-ctk`/`-ctv` (KV cache types) are passed on.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${GGRS_BIN:-$here/../target/release/ggrs}
model=
args=(serve)
while (($#)); do
    a=$1
    shift
    case $a in
        --port | --host | --ctx-size | -c | --parallel | -np | --n-predict | -n | --batch-size | -b | \
            --threads | -t | --alias | --tags | --api-key | --pooling | --reasoning-format | --reasoning | -rea | \
            --keep | -ctk | --cache-type-k | -ctv | --cache-type-v | --temp | --seed | -s | \
            --top-k | --top-p | --min-p | --repeat-penalty | --repeat-last-n | \
            --presence-penalty | --frequency-penalty)
            args+=("$a" "$1")
            shift
            ;;
        --chat-template | --chat-template-file)
            args+=(--chat-template "$1")
            shift
            ;;
        --model | -m)
            model=$1
            shift
            ;;
        --hf-repo | -hf | --hf-file | -hff | --model-url | \
            --ubatch-size | -ub | --n-gpu-layers | -ngl | -fa | --pooling-type | \
            --cache-ram | --sleep-idle-seconds | --grp-attn-n | \
            --grp-attn-w | --media-path | --reasoning-budget)
            shift
            ;;
        --cors-origins)
            args+=(--cors "$1")
            shift
            ;;
        --embedding | --embeddings) args+=(--embeddings) ;;
        --reranking | --rerank) args+=(--reranking) ;;
        --metrics) args+=(--metrics) ;;
        --slots | --no-slots) args+=("$a") ;;
        --context-shift | --no-context-shift) args+=("$a") ;;
        --no-ui | --no-webui) args+=(--no-webui) ;;
        *) ;; # --jinja, --no-jinja, --slots, --no-slots, --cont-batching, --offline, …
    esac
done
[[ -n $model ]] || model=${GGRS_TEST_MODEL:-$("$here/default-model.sh")}
exec "$bin" "${args[@]}" -m "$model"
