#!/usr/bin/env bash
# Python tests of `ggrs serve`: the official `openai` client (tests/python/test_openai_client.py)
# and the chat page in headless Chromium (tests/python/test_chat_page.py).
#
# Creates (once) a venv with pinned openai, pytest and playwright, installs the Debian package
# `chromium` with apt-get when it is missing (the page test is skipped, with a message, when that
# fails), builds `ggrs` in release, starts `ggrs serve` on the tiny model on a free loopback
# port, waits for /health, runs pytest and stops the server.
#
# Environment:
#   GGRS_VENV             venv directory (default ~/.cache/ggrs/venv)
#   GGRS_REFERENCE_DIR    reference files (default: shared/reference in a parent directory)
#   GGRS_BIN              the ggrs binary to serve with (default: build target/release/ggrs)
#   GGRS_TEST_SERVER_CMD  run another server instead of `target/release/ggrs serve` (for example
#                         the path of llama.cpp's llama-server, which takes the same flags; the
#                         ggrs-only tests are then skipped and nothing is built)
#   PYTEST_ARGS           extra pytest arguments (e.g. "-k openai")
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=${GGRS_VENV:-$HOME/.cache/ggrs/venv}
# The reference files: GGRS_REFERENCE_DIR, else the first shared/reference above the checkout
# (as in ggrs-llama/tests/common/mod.rs).
REF=${GGRS_REFERENCE_DIR:-}
if [[ -z $REF ]]; then
    dir=$PWD
    while [[ $dir != / && ! -d $dir/shared/reference ]]; do dir=$(dirname "$dir"); done
    REF=$dir/shared/reference
fi
MODEL=$REF/tiny/tiny-llama-f16.gguf
PINS=(openai==3.57.0 anthropic==2.10.0 pytest==9.2.0 playwright==1.65.2)

[[ -f $MODEL ]] || { echo "test-python: no tiny model at $MODEL (set GGRS_REFERENCE_DIR)" >&2; exit 1; }

# --- the venv, reused between runs; reinstalled when the pins change ---
if [[ ! -x $VENV/bin/python ]]; then
    python3 -m venv "$VENV"
fi
if [[ $(cat "$VENV/.ggrs-pins" 2>/dev/null) != "${PINS[*]}" ]]; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PINS[@]}"
    echo "${PINS[*]}" >"$VENV/.ggrs-pins"
fi

# --- Chromium for the page test ---
if ! command -v chromium >/dev/null; then
    echo "test-python: installing chromium with apt-get"
    if [[ $(id -u) == 0 ]]; then sudo=(); else sudo=(sudo -n); fi
    if ! { "${sudo[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq chromium; } >/dev/null 2>&1; then
        echo "test-python: WARNING: could not install chromium; the chat page test will be SKIPPED" >&2
    fi
fi

# --- the server ---
if [[ -n ${GGRS_TEST_SERVER_CMD:-} ]]; then
    read -r -a server <<<"$GGRS_TEST_SERVER_CMD"
    export GGRS_SERVER_KIND=${GGRS_SERVER_KIND:-other}
elif [[ -n ${GGRS_BIN:-} ]]; then
    # A ggrs binary already built (`cargo test` passes its own: ggrs-cli/tests/python_clients.rs).
    server=("$GGRS_BIN" serve)
    export GGRS_SERVER_KIND=ggrs
else
    cargo build --release -p ggrs-cli
    server=(target/release/ggrs serve)
    export GGRS_SERVER_KIND=ggrs
fi
# Starts `server` on MODEL with ARGS on a free loopback port, waits for /health; sets $url.
pids=()
logs=()
stop_servers() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -f "${logs[@]}"
}
trap stop_servers EXIT
start_server() {
    local model=$1 port log pid code
    shift
    port=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    log=$(mktemp)
    "${server[@]}" -m "$model" --host 127.0.0.1 --port "$port" "$@" >"$log" 2>&1 &
    pid=$!
    pids+=("$pid")
    logs+=("$log")
    url=http://127.0.0.1:$port
    for ((i = 0; i < 300; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "test-python: the server on $model exited before it was ready; its log:" >&2
            cat "$log" >&2
            exit 1
        fi
        code=$("$VENV/bin/python" -c 'import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1] + "/health", timeout=2).status)
except Exception as e:
    print(getattr(e, "code", 0))' "$url")
        if [[ $code == 200 ]]; then return; fi
        sleep 0.2
    done
    echo "test-python: $url/health not 200 after 60 s; server log:" >&2
    cat "$log" >&2
    exit 1
}

# The tiny model has no chat template: ChatML, as llama-server falls back to.
start_server "$MODEL" -np 2 -c 4096 --chat-template chatml
export GGRS_SERVER_URL=$url
log=${logs[0]}
# The tiny BERT for the embeddings tests (tests/python/test_embeddings.py).
start_server "$REF/tiny/tiny-bert-f16.gguf" --embeddings
export GGRS_EMBED_SERVER_URL=$url
export GGRS_REFERENCE_DIR=$REF

echo "test-python: ${server[*]} on $GGRS_SERVER_URL ($GGRS_SERVER_KIND)"
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words
if ! "$VENV/bin/python" -m pytest -q -rs tests/python ${PYTEST_ARGS:-}; then
    echo "test-python: FAILED; server log:" >&2
    tail -n 50 "$log" >&2
    exit 1
fi
