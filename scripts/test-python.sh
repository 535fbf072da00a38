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
port=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
# The tiny model has no chat template: ChatML, as llama-server falls back to.
"${server[@]}" -m "$MODEL" --host 127.0.0.1 --port "$port" -np 2 -c 4096 --chat-template chatml >"$log" 2>&1 &
server_pid=$!
stop_server() {
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    rm -f "$log"
}
trap stop_server EXIT

export GGRS_SERVER_URL=http://127.0.0.1:$port
ready=0
for ((i = 0; i < 300; i++)); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "test-python: the server exited before it was ready; its log:" >&2
        cat "$log" >&2
        exit 1
    fi
    code=$("$VENV/bin/python" -c 'import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1] + "/health", timeout=2).status)
except Exception as e:
    print(getattr(e, "code", 0))' "$GGRS_SERVER_URL")
    if [[ $code == 200 ]]; then ready=1; break; fi
    sleep 0.2
done
if [[ $ready != 1 ]]; then
    echo "test-python: $GGRS_SERVER_URL/health not 200 after 60 s; server log:" >&2
    cat "$log" >&2
    exit 1
fi

echo "test-python: ${server[*]} on $GGRS_SERVER_URL ($GGRS_SERVER_KIND)"
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words
if ! "$VENV/bin/python" -m pytest -q -rs tests/python ${PYTEST_ARGS:-}; then
    echo "test-python: FAILED; server log:" >&2
    tail -n 50 "$log" >&2
    exit 1
fi
