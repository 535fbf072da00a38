#!/usr/bin/env bash
# Runs llama.cpp's own server tests (tools/server/tests) against llama-server and against
# `ggrs serve`, on the same local model files, and prints the pass counts side by side:
#
#   scripts/run-llama-server-tests.sh                       # the default files, both servers
#   SERVERS=ggrs scripts/run-llama-server-tests.sh unit/test_tool_call.py
#   PYTEST_ARGS="-k anthropic_tool" scripts/run-llama-server-tests.sh unit/test_compat_anthropic.py
#
# llama.cpp's code is not part of this repository: the harness is copied from LLAMA_CPP (a
# llama.cpp checkout with a built llama-server) into a temporary directory, and two things are
# changed there, never in llama.cpp:
#  - its conftest no longer downloads every preset model from Hugging Face at start-up (no
#    network here);
#  - the server it starts is scripts/lib/llama-server-local.sh, which replaces `--hf-repo`
#    (and `--hf-file`) by a local file (the table is in that script: the stories260K preset
#    becomes the tiny random-weight llama of shared/reference/tiny, tinygemma3 the tiny gemma3,
#    Qwen2.5 repos the default model, the split stories15M that tiny llama in three parts) and
#    then starts llama-server or
#    scripts/ggrs-as-llama-server.sh.
# Tests marked `slow` (they need multi-GB models from Hugging Face) are deselected.
#
# Environment:
#   LLAMA_CPP           llama.cpp checkout (default: the one built from llama-cpp-python's sdist)
#   GGRS_BIN            the ggrs binary (default target/release/ggrs)
#   GGRS_REFERENCE_DIR  shared/reference (default: found above the checkout)
#   VENV                Python venv with the harness's packages (created when missing)
#   SERVERS             "llama ggrs" (default), "llama" or "ggrs"
#   PYTEST_ARGS         extra pytest arguments
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
LLAMA_CPP=${LLAMA_CPP:-/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp}
VENV=${VENV:-$HOME/.cache/ggrs/llama-server-tests-venv}
SERVERS=${SERVERS:-llama ggrs}
if [[ -z ${GGRS_REFERENCE_DIR:-} ]]; then
    dir=$repo
    while [[ $dir != / && ! -d $dir/shared/reference ]]; do dir=$(dirname "$dir"); done
    GGRS_REFERENCE_DIR=$dir/shared/reference
fi
export GGRS_REFERENCE_DIR
export GGRS_BIN=${GGRS_BIN:-$repo/target/release/ggrs}
export LLAMA_SERVER_REAL=${LLAMA_SERVER_REAL:-$LLAMA_CPP/build/bin/llama-server}
files=("$@")
if ((${#files[@]} == 0)); then
    files=(unit/test_tool_call.py unit/test_compat_anthropic.py unit/test_compat_oai_responses.py
        "unit/test_chat_completion.py -k response_format or json_schema or grammar"
        "unit/test_completion.py -k grammar or json_schema or response_format")
fi

src=$LLAMA_CPP/tools/server/tests
[[ -f $src/utils.py ]] || { echo "no llama.cpp server tests in $src (set LLAMA_CPP)" >&2; exit 1; }
for s in $SERVERS; do
    case $s in
        llama) [[ -x $LLAMA_SERVER_REAL ]] || { echo "no llama-server at $LLAMA_SERVER_REAL" >&2; exit 1; } ;;
        ggrs) [[ -x $GGRS_BIN ]] || { echo "no ggrs binary at $GGRS_BIN (cargo build --release -p ggrs-cli)" >&2; exit 1; } ;;
        *) echo "unknown server '$s' in SERVERS (llama, ggrs)" >&2; exit 1 ;;
    esac
done

if [[ ! -x $VENV/bin/python ]]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -c 'import openai, pytest, requests, wget, filelock, aiohttp' 2>/dev/null ||
    "$VENV/bin/pip" install --quiet --disable-pip-version-check aiohttp pytest filelock numpy \
        "openai~=2.14.0" prometheus-client requests wget

# The harness at <root>/tools/server/tests finds templates at ../../../models/templates.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tools/server"
cp -r "$src" "$work/tools/server/tests"
ln -s "$LLAMA_CPP/models" "$work/models"
"$VENV/bin/python" - "$work/tools/server/tests/conftest.py" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
# No model downloads: every model is a local file (see llama-server-local.sh).
s = s.replace("        ServerPreset.load_all()", "        pass")
open(p, "w").write(s)
EOF

declare -A summary
for s in $SERVERS; do
    for f in "${files[@]}"; do
        read -r -a spec <<<"$f"
        file=${spec[0]}
        sel=()
        if ((${#spec[@]} > 2)) && [[ ${spec[1]} == -k ]]; then
            sel=(-k "${spec[*]:2}")
        fi
        log=$work/$s-$(basename "$file" .py).log
        (
            cd "$work/tools/server/tests"
            LLAMA_SERVER_BIN_PATH=$here/lib/llama-server-local.sh LOCAL_SERVER=$s \
                "$VENV/bin/python" -m pytest -q -m "not slow" -p no:cacheprovider "$file" \
                "${sel[@]}" ${PYTEST_ARGS:-} >"$log" 2>&1
        ) || true
        line=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected)|no tests ran' "$log" | tail -1)
        summary["$s $f"]=$(echo "$line" | sed 's/=//g; s/ in [0-9.]*s.*//; s/^ *//')
        echo "[$s] $f: ${summary["$s $f"]}"
        if [[ -n ${KEEP_LOGS:-} ]]; then
            mkdir -p "$KEEP_LOGS"
            cp "$log" "$KEEP_LOGS/"
        fi
    done
done

echo
printf '%-70s' "file"
for s in $SERVERS; do printf ' | %-40s' "$s"; done
echo
for f in "${files[@]}"; do
    printf '%-70s' "$f"
    for s in $SERVERS; do printf ' | %-40s' "${summary["$s $f"]}"; done
    echo
done
