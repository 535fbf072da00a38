#!/usr/bin/env bash
# Serving benchmark: `ggrs serve` against llama.cpp's `llama-server`, same model, same client,
# same run. Usage:
#   LLAMA_SERVER=/path/to/llama-server scripts/bench-serve.sh MODEL.gguf
# Both servers get -np $NP slots, -t $THREADS threads and the same total context (-c $CTX).
# Each round runs, against each server in turn, 1 stream alone ($SINGLE_REQUESTS requests one
# after the other) and $NP concurrent streams ($NP requests), all of $MAX_TOKENS tokens.
# Prints every result, then the medians over the rounds and the ratios
# (concurrent aggregate / 1 stream, ggrs / llama-server).
# Environment: ROUNDS (3), NP (8), THREADS (2), CTX (NP*1024), MAX_TOKENS (128),
# SINGLE_REQUESTS (2), GGRS (target/release/ggrs; built when it is the default), LLAMA_SERVER
# (path of llama-server; required unless SKIP_LLAMA=1), SKIP_GGRS=1 / SKIP_LLAMA=1 to run one
# server only, PYTHON (python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MODEL=${1:?usage: scripts/bench-serve.sh MODEL.gguf}
[[ -f $MODEL ]] || { echo "no model file $MODEL" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
NP=${NP:-8}
THREADS=${THREADS:-2}
CTX=${CTX:-$((NP * 1024))}
MAX_TOKENS=${MAX_TOKENS:-128}
SINGLE_REQUESTS=${SINGLE_REQUESTS:-2}
PYTHON=${PYTHON:-python3}
SKIP_GGRS=${SKIP_GGRS:-0}
SKIP_LLAMA=${SKIP_LLAMA:-0}

servers=()
if [[ $SKIP_GGRS != 1 ]]; then
    if [[ -z ${GGRS:-} ]]; then
        GGRS=target/release/ggrs
        cargo build --release -p ggrs-cli
    fi
    servers+=(ggrs)
fi
if [[ $SKIP_LLAMA != 1 ]]; then
    LLAMA_SERVER=${LLAMA_SERVER:?set LLAMA_SERVER to the path of llama-server (or SKIP_LLAMA=1)}
    servers+=(llama)
fi
(( ${#servers[@]} )) || { echo "both servers skipped: nothing to do" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_healthy() { # name url pid
    local i
    for ((i = 0; i < 600; i++)); do
        if ! kill -0 "$3" 2>/dev/null; then
            echo "$1 exited before it was ready; its log:" >&2
            cat "$work/$1.log" >&2
            exit 1
        fi
        if [[ $(curl -s -o /dev/null -w '%{http_code}' "$2/health") == 200 ]]; then return 0; fi
        sleep 0.2
    done
    echo "$1 not healthy after 120 s" >&2
    exit 1
}

declare -A url
for name in "${servers[@]}"; do
    port=$(free_port)
    url[$name]=http://127.0.0.1:$port
    if [[ $name == ggrs ]]; then
        cmd=("$GGRS" serve -m "$MODEL" --port "$port" -np "$NP" -t "$THREADS" -c "$CTX")
    else
        cmd=("$LLAMA_SERVER" -m "$MODEL" --port "$port" -np "$NP" -t "$THREADS" -c "$CTX" --no-webui)
    fi
    echo "starting: ${cmd[*]}"
    "${cmd[@]}" >"$work/$name.log" 2>&1 &
    pids+=($!)
    wait_healthy "$name" "${url[$name]}" "$!"
done

results=$work/results.jsonl
for ((round = 1; round <= ROUNDS; round++)); do
    for name in "${servers[@]}"; do
        for conc in 1 "$NP"; do
            if [[ $conc == 1 ]]; then n=$SINGLE_REQUESTS; else n=$NP; fi
            out=$("$PYTHON" scripts/bench-serve.py --url "${url[$name]}" --concurrency "$conc" \
                --requests "$n" --max-tokens "$MAX_TOKENS" --label "round$round $name x$conc")
            grep -v '^JSON ' <<<"$out"
            grep '^JSON ' <<<"$out" | sed 's/^JSON //' >>"$results"
        done
    done
done

"$PYTHON" - "$results" "$NP" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
np_ = int(sys.argv[2])
med = {}
for name in ("ggrs", "llama"):
    for conc in (1, np_):
        xs = [r["aggregate_tps"] for r in rows if r["label"].split()[1] == name and r["concurrency"] == conc]
        if xs:
            med[(name, conc)] = statistics.median(xs)
            print(f"{name:6s} x{conc}: median aggregate {med[(name, conc)]:.2f} tokens/s over {len(xs)} rounds {['%.2f' % x for x in xs]}")
for name in ("ggrs", "llama"):
    if (name, 1) in med and (name, np_) in med:
        print(f"{name:6s}: {np_} streams / 1 stream = {med[(name, np_)] / med[(name, 1)]:.2f}x")
for conc in (1, np_):
    if ("ggrs", conc) in med and ("llama", conc) in med:
        print(f"x{conc}: ggrs / llama-server = {med[('ggrs', conc)] / med[('llama', conc)]:.2f}x")
EOF
