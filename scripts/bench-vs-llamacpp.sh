#!/usr/bin/env bash
# Side-by-side speed of ggrs and llama.cpp on the same models, same machine, same run
# (issue 6's protocol): for each model, llama.cpp's llama-bench and then `ggrs bench`, both
# at the given threads, prompt test pp$P and generation test tg$N, $R repetitions after a
# warm-up; prints both tools' medians and the ratio ggrs / llama.cpp.
#
# usage: scripts/bench-vs-llamacpp.sh LLAMA_BENCH MODEL.gguf [MODEL.gguf …]
#   env: THREADS (2), P (512), N (128), R (5), GGRS (target/release/ggrs), OUT (raw output dir)
# llama.cpp is not part of this repository: build it elsewhere (see ../shared/DESIGN.md).
set -euo pipefail
llama_bench=${1:?usage: $0 LLAMA_BENCH MODEL.gguf [MODEL.gguf ...]}
shift
[ $# -ge 1 ] || { echo "give at least one model" >&2; exit 2; }
THREADS=${THREADS:-2} P=${P:-512} N=${N:-128} R=${R:-5}
GGRS=${GGRS:-target/release/ggrs}
OUT=${OUT:-$(mktemp -d)}
[ -x "$GGRS" ] || { echo "build ggrs first: cargo build --release -p ggrs-cli" >&2; exit 2; }
mkdir -p "$OUT"
echo "raw output in $OUT; load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for m in "$@"; do
    base=$(basename "$m" .gguf)
    "$llama_bench" -m "$m" -t "$THREADS" -p "$P" -n "$N" -r "$R" -o json >"$OUT/$base.llamacpp.json"
    "$GGRS" bench -m "$m" --threads-list "$THREADS" -p "$P" -n "$N" -r "$R" --json >"$OUT/$base.ggrs.json"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$OUT" "$@" <<'PY'
import json, statistics, sys, os
out, models = sys.argv[1], sys.argv[2:]
print("| model | test | llama.cpp median t/s | ggrs median t/s | ggrs / llama.cpp |")
print("|---|---|---|---|---|")
for m in models:
    base = os.path.basename(m)[:-5]
    lc = json.load(open(f"{out}/{base}.llamacpp.json"))
    gg = [json.loads(l) for l in open(f"{out}/{base}.ggrs.json") if l.strip().startswith("{")]
    for test, key in (("pp", "n_prompt"), ("tg", "n_gen")):
        l = [r for r in lc if r[key] > 0 and r[("n_gen" if key == "n_prompt" else "n_prompt")] == 0]
        g = [r for r in gg if r["test"].startswith(test)]
        if not l or not g:
            continue
        lm = statistics.median(l[0]["samples_ts"])
        gm = g[0]["tps_median"]
        name = g[0]["test"]
        print(f"| {base} | {name} | {lm:.1f} | {gm:.1f} | {gm / lm:.2f}× |")
PY
