#!/usr/bin/env bash
# Side-by-side speed of ggrs and llama.cpp on the same models, same machine, same run
# (issue 6's protocol): for each model, llama.cpp's llama-bench and then `ggrs bench`, both
# at the given threads, prompt test pp$P and generation test tg$N, $R repetitions after a
# warm-up; prints both tools' medians and the ratio ggrs / llama.cpp.
#
# With ROUNDS > 1 the pair (llama.cpp, then ggrs) runs ROUNDS times over the models, so that
# a drift of the machine's memory bandwidth during the run hits both tools alike; the
# medians are then taken over all rounds' samples, each round's own ratio is listed too, and
# their median is the paired figure (each ratio compares runs a few seconds apart).
# P=0 or N=0 skips that test: e.g. P=0 N=64 R=3 ROUNDS=10 alternates short generation runs,
# which resolves a host whose bandwidth moves within minutes better than a few long rounds.
#
# usage: scripts/bench-vs-llamacpp.sh LLAMA_BENCH MODEL.gguf [MODEL.gguf …]
#   env: THREADS (2), P (512), N (128), R (5), ROUNDS (1), GGRS (target/release/ggrs),
#        OUT (raw output dir), LLAMA_ARGS (more llama-bench arguments, e.g. "--poll 0": its
#        threads then sleep at barriers instead of spinning, which a machine with more busy
#        threads than cores needs), GGRS_ARGS (more `ggrs bench` arguments, e.g. "-d 4096";
#        give llama-bench the same with LLAMA_ARGS)
# llama.cpp is not part of this repository: build it elsewhere (see ../shared/DESIGN.md).
set -euo pipefail
llama_bench=${1:?usage: $0 LLAMA_BENCH MODEL.gguf [MODEL.gguf ...]}
shift
[ $# -ge 1 ] || { echo "give at least one model" >&2; exit 2; }
THREADS=${THREADS:-2} P=${P:-512} N=${N:-128} R=${R:-5} ROUNDS=${ROUNDS:-1}
GGRS=${GGRS:-target/release/ggrs}
OUT=${OUT:-$(mktemp -d)}
[ -x "$GGRS" ] || { echo "build ggrs first: cargo build --release -p ggrs-cli" >&2; exit 2; }
mkdir -p "$OUT"
echo "raw output in $OUT; load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq "$ROUNDS"); do
    for m in "$@"; do
        base=$(basename "$m" .gguf)
        # shellcheck disable=SC2086 # the extra arguments are meant to split
        "$llama_bench" -m "$m" -t "$THREADS" -p "$P" -n "$N" -r "$R" ${LLAMA_ARGS:-} -o json \
            >"$OUT/$base.r$round.llamacpp.json"
        # shellcheck disable=SC2086
        "$GGRS" bench -m "$m" --threads-list "$THREADS" -p "$P" -n "$N" -r "$R" ${GGRS_ARGS:-} --json \
            >"$OUT/$base.r$round.ggrs.json"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$OUT" "$ROUNDS" "$@" <<'PY'
import json, statistics, sys, os
out, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| model | test | llama.cpp median t/s | ggrs median t/s | ggrs / llama.cpp "
      "| per round | median of rounds |")
print("|---|---|---|---|---|---|---|")
for m in models:
    base = os.path.basename(m)[:-5]
    for test, key in (("pp", "n_prompt"), ("tg", "n_gen")):
        other = "n_gen" if key == "n_prompt" else "n_prompt"
        ls, gs, ratios, name = [], [], [], None
        for r in range(1, rounds + 1):
            lc = json.load(open(f"{out}/{base}.r{r}.llamacpp.json"))
            gg = [json.loads(x) for x in open(f"{out}/{base}.r{r}.ggrs.json")
                  if x.strip().startswith("{")]
            l = [x for x in lc if x[key] > 0 and x[other] == 0]
            g = [x for x in gg if x["test"].startswith(test)]
            if not l or not g:
                continue
            name = g[0]["test"]
            ls += l[0]["samples_ts"]
            gs += g[0]["samples"]
            ratios.append(statistics.median(g[0]["samples"]) / statistics.median(l[0]["samples_ts"]))
        if not ls:
            continue
        lm, gm = statistics.median(ls), statistics.median(gs)
        per = ", ".join(f"{x:.2f}" for x in ratios)
        paired = statistics.median(ratios)
        print(f"| {base} | {name} | {lm:.1f} | {gm:.1f} | {gm / lm:.2f}× | {per} | {paired:.2f}× |")
PY
