#!/usr/bin/env python3
"""`ggrs serve` with and without speculation on the prompts of scripts/bench-spec/prompts.jsonl
("free": free-form writing, "edit": code edits): two servers of one slot each, the same
prompts sent to each in turn (alternating which goes first), greedy, `n_predict` tokens.
Prints each set's generated tokens per second (total tokens / total generation seconds of the
server's own timings), drafted and accepted tokens, the medians over the repeats and their
ratio, and whether the tokens were identical (they must be).

usage: scripts/bench-spec-serve.py GGRS MODEL [REPEAT=2] [N_PREDICT=96] [SPEC=auto]
  SPEC: the speculative server's --spec value (`ngram` for builds before `--spec auto`,
  whose plain server then gets no --spec flag).
Timings on a shared machine are noisy: the load average is printed before and after.
"""
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

GGRS, MODEL = sys.argv[1], sys.argv[2]
REPEAT = int(sys.argv[3]) if len(sys.argv) > 3 else 2
N = int(sys.argv[4]) if len(sys.argv) > 4 else 96
SPEC = sys.argv[5] if len(sys.argv) > 5 else "auto"
PROMPTS = Path(__file__).resolve().parent / "bench-spec" / "prompts.jsonl"
prompts = [json.loads(line) for line in open(PROMPTS) if line.strip()]


def post(port, body):
    r = urllib.request.Request(f"http://127.0.0.1:{port}/completion",
                               data=json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(r, timeout=900).read())


def start(port, extra):
    p = subprocess.Popen([GGRS, "serve", "-m", MODEL, "-np", "1", "-t", "2", "-c", "4096",
                          "--port", str(port)] + extra,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return p
        except Exception:
            time.sleep(0.2)
    sys.exit("the server did not start")


cfg = {"plain": (18771, [] if SPEC == "ngram" else ["--spec", "none"]),
       "spec": (18772, ["--spec", SPEC])}
procs = {k: start(*v) for k, v in cfg.items()}
print("load before", os.getloadavg())
rates, toks = {}, {}
try:
    for rep in range(REPEAT):
        for s in ("free", "edit"):
            for k in (("plain", "spec") if rep % 2 == 0 else ("spec", "plain")):
                n, secs, drafted, acc = 0, 0.0, 0, 0
                for p in prompts:
                    if p["set"] != s:
                        continue
                    r = post(cfg[k][0], {"prompt": p["prompt"], "n_predict": N,
                                         "temperature": 0, "cache_prompt": False,
                                         "return_tokens": True})
                    t = r["timings"]
                    n += t["predicted_n"]
                    secs += t["predicted_ms"] / 1000
                    drafted += t.get("draft_n", 0)
                    acc += t.get("draft_n_accepted", 0)
                    toks.setdefault((s, p["name"]), {})[k] = r["tokens"]
                rates.setdefault((s, k), []).append(n / secs)
                print(rep, s, k, round(n / secs, 2), "tok/s, drafted", drafted,
                      "accepted", acc, flush=True)
finally:
    for p in procs.values():
        p.terminate()
        p.wait()
print("load after", os.getloadavg())
for s in ("free", "edit"):
    a = statistics.median(rates[(s, "plain")])
    b = statistics.median(rates[(s, "spec")])
    print(s, "median plain", round(a, 2), "spec", round(b, 2), "ratio", round(b / a, 3))
print("identical tokens:", all(v["plain"] == v["spec"] for v in toks.values()))
