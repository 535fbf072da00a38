#!/usr/bin/env bash
# Constrained decoding's cost per generated token: `ggrs serve` and llama-server on the same
# model, in the same run (scripts/bench-grammar.py measures; see its docstring). Usage:
#   scripts/bench-grammar.sh [MODEL.gguf]          # default: scripts/default-model.sh
# Environment: LLAMA_CPP (a llama.cpp checkout with build/bin/llama-server; SKIP_LLAMA=1 to
# run ggrs alone), GGRS (default target/release/ggrs, built when missing), THREADS (2),
# TOKENS (160), ROUNDS (3), PYTHON (python3), JSON_OUT (a file for the figures).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MODEL=${1:-$(scripts/default-model.sh)}
[[ -f $MODEL ]] || { echo "no model file $MODEL" >&2; exit 2; }
LLAMA_CPP=${LLAMA_CPP:-/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp}
THREADS=${THREADS:-2}
PYTHON=${PYTHON:-python3}
GBNF=${GBNF:-$LLAMA_CPP/grammars/json.gbnf}
[[ -f $GBNF ]] || { echo "no grammar $GBNF (set GBNF or LLAMA_CPP)" >&2; exit 2; }
if [[ -z ${GGRS:-} ]]; then
    GGRS=target/release/ggrs
    [[ -x $GGRS ]] || cargo build --release -p ggrs-cli
fi

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
wait_up() {
    for _ in $(seq 600); do
        if "$PYTHON" -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('$1/health').status != 200)" 2>/dev/null; then
            return 0
        fi
        sleep 0.2
    done
    echo "server at $1 did not start" >&2
    exit 1
}

args=()
p=$(free_port)
"$GGRS" serve -m "$MODEL" --port "$p" -t "$THREADS" -np 1 -c 2048 >/tmp/bench-grammar-ggrs.log 2>&1 &
pids+=($!)
wait_up "http://127.0.0.1:$p"
args+=(--server "ggrs=http://127.0.0.1:$p")
if [[ ${SKIP_LLAMA:-0} != 1 ]]; then
    p=$(free_port)
    "$LLAMA_CPP/build/bin/llama-server" -m "$MODEL" --port "$p" -t "$THREADS" -np 1 -c 2048 \
        --jinja --no-webui >/tmp/bench-grammar-llama.log 2>&1 &
    pids+=($!)
    wait_up "http://127.0.0.1:$p"
    args+=(--server "llama.cpp=http://127.0.0.1:$p")
fi
"$PYTHON" scripts/bench-grammar.py "${args[@]}" --gbnf "$GBNF" --tokens "${TOKENS:-160}" \
    --rounds "${ROUNDS:-3}" ${JSON_OUT:+--json "$JSON_OUT"}
