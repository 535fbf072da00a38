#!/usr/bin/env python3
"""Speculative decoding benchmark (issue 36): ggrs with and without `--spec ngram`, and
llama-server with and without its n-gram speculation, on the same prompts, in one run.

Prompts: scripts/bench-spec/prompts.jsonl ("edit": a function and an instruction to rename,
document or reformat it; "free": free-form writing). Greedy, the same token limit for both.
Per set it prints generated tokens per second (total tokens / total generation seconds),
the drafts accepted, and the ratios; ggrs's speculative tokens are checked against its plain
ones (they must be identical).

usage: scripts/bench-spec.py [--model GGUF] [--threads 2] [--n 128] [--repeat R] [--sets edit,free]
  env: GGRS (the ggrs binary; default target/release/ggrs, else target/debug/ggrs),
       LLAMA_SERVER (default: the llama.cpp build in /work/llamacpp),
       LLAMA_SPEC (llama-server --spec-type settings to try, ';'-separated, each a list of
       arguments; default: ngram-simple with its defaults, ngram-simple with 3-token keys,
       ngram-mod).
Timings on a shared machine are noisy: compare the ratios measured in the same run. With
--repeat R every configuration runs each prompt R times (ggrs's plain and speculative runs
alternate); the figures are medians over the R repeats of each set's rate, and the load
average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LLAMA_BIN = Path(
    "/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server"
)
DEFAULT_SPEC = (
    "--spec-type ngram-simple;"
    "--spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 16;"
    "--spec-type ngram-mod"
)


def ggrs_bin() -> str:
    if os.environ.get("GGRS"):
        return os.environ["GGRS"]
    for p in ("target/release/ggrs", "target/debug/ggrs"):
        if (REPO / p).is_file():
            return str(REPO / p)
    sys.exit("no ggrs binary: cargo build --release -p ggrs-cli (or set GGRS)")


def run_ggrs(binary: str, model: str, threads: int, n: int, prompt: str, spec: bool) -> dict:
    args = [binary, "run", "-m", model, "-t", str(threads), "-n", str(n), "--temp", "0",
            "--json", "-p", prompt]
    if spec:
        args += ["--spec", "ngram"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    t = d["timings"]
    return {"tokens": d["tokens"], "n": t["predicted_n"], "ms": t["predicted_ms"],
            "draft": t.get("draft_n", 0), "accepted": t.get("draft_n_accepted", 0)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def llama_runs(model: str, threads: int, n: int, prompts: list, extra: list,
               repeat: int = 1) -> list:
    """Each repeat on a fresh llama-server: its `ngram-mod` drafter keeps a server-wide table
    of the n-grams it has seen, so a second pass over the same prompts would draft the first
    pass's outputs from memory (measured: 143.6, then 259.6 and 312.1 t/s on the edit set)."""
    out = []
    for rep in range(repeat):
        out += llama_pass(model, threads, n, prompts, extra, rep)
    return out


def llama_pass(model: str, threads: int, n: int, prompts: list, extra: list, rep: int) -> list:
    port = free_port()
    args = [os.environ.get("LLAMA_SERVER", str(LLAMA_BIN)), "-m", model, "-t", str(threads),
            "-c", "4096", "-np", "1", "--port", str(port), "--host", "127.0.0.1"] + extra
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError(f"llama-server did not start: {shlex.join(args)}")
        out = []
        for p in prompts:
            d = post(port, "/completion", {"prompt": p["prompt"], "n_predict": n,
                                           "temperature": 0, "cache_prompt": False})
            t = d["timings"]
            out.append({"n": t["predicted_n"], "ms": t["predicted_ms"], "rep": rep,
                        "set": p["set"], "draft": t.get("draft_n", 0),
                        "accepted": t.get("draft_n_accepted", 0)})
        return out
    finally:
        proc.terminate()
        proc.wait()


def summary(runs: list) -> tuple:
    """The median over the repeats of the runs' rate (tokens / seconds), and the drafts."""
    rates = []
    for rep in sorted({r.get("rep", 0) for r in runs}):
        mine = [r for r in runs if r.get("rep", 0) == rep]
        ms = sum(r["ms"] for r in mine)
        rates.append(sum(r["n"] for r in mine) / (ms / 1e3) if ms else 0.0)
    draft = sum(r["draft"] for r in runs)
    acc = sum(r["accepted"] for r in runs)
    return statistics.median(rates), draft, acc, rates


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default=str(Path.home() / ".cache/ggrs/models/derived/qwen05b-q4_0.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--prompts", default=str(REPO / "scripts/bench-spec/prompts.jsonl"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--sets", default="edit,free", help="the prompt sets to run")
    ap.add_argument("--no-llama", action="store_true", help="ggrs only")
    a = ap.parse_args()
    sets = a.sets.split(",")
    prompts = [json.loads(l) for l in open(a.prompts, encoding="utf-8") if l.strip()]
    prompts = [p for p in prompts if p["set"] in sets]
    binary = ggrs_bin()
    print(f"ggrs: {binary}\nmodel: {a.model}, {a.threads} threads, {a.n} tokens, greedy, "
          f"{a.repeat} repeat(s)\nstart: {load()}")
    results: dict = {}
    plain, spec = [], []
    for rep in range(a.repeat):
        for p in prompts:
            x = run_ggrs(binary, a.model, a.threads, a.n, p["prompt"], False)
            y = run_ggrs(binary, a.model, a.threads, a.n, p["prompt"], True)
            same = x["tokens"] == y["tokens"]
            print(f"  ggrs {p['set']:4} {p['name']:18} plain {x['n'] / x['ms'] * 1e3:6.1f} t/s  "
                  f"spec {y['n'] / y['ms'] * 1e3:6.1f} t/s  accepted {y['accepted']}/{y['draft']}"
                  f"  {'identical' if same else 'DIFFERENT TOKENS'}", flush=True)
            if not same:
                sys.exit(f"speculative output differs from plain on {p['name']}")
            plain.append(x | {"set": p["set"], "rep": rep})
            spec.append(y | {"set": p["set"], "rep": rep})
    results["ggrs plain"] = plain
    results["ggrs --spec ngram"] = spec
    settings = [] if a.no_llama else [""] + os.environ.get("LLAMA_SPEC", DEFAULT_SPEC).split(";")
    for setting in settings:
        runs = llama_runs(a.model, a.threads, a.n, prompts, shlex.split(setting), a.repeat)
        name = "llama.cpp " + (setting or "plain")
        results[name] = runs
        print(f"  {name}: done", flush=True)
    print(f"end: {load()}")
    for s in ("edit", "free"):
        if not any(p["set"] == s for p in prompts):
            continue
        print(f"\n{s} prompts: generated tokens/s (all prompts' tokens / their seconds; "
              f"median of {a.repeat} repeat(s), each repeat's rate in brackets)")
        rates = {}
        for name, runs in results.items():
            tps, draft, acc, each = summary([r for r in runs if r["set"] == s])
            rates[name] = tps
            rate = f"{acc}/{draft} accepted ({100 * acc / draft:.0f}%)" if draft else ""
            each = ", ".join(f"{v:.1f}" for v in each)
            print(f"  {name:70} {tps:7.2f} [{each}]  {rate}")
        g, gp = rates["ggrs --spec ngram"], rates["ggrs plain"]
        line = f"  ggrs spec / ggrs plain: {g / gp:.2f}x"
        spec_rates = [(v, k) for k, v in rates.items() if k.startswith("llama.cpp --spec")]
        if spec_rates:
            best = max(spec_rates)
            line += (f"; ggrs spec / llama.cpp best ({best[1]}): {g / best[0]:.2f}x; "
                     f"llama.cpp best / llama.cpp plain: "
                     f"{best[0] / rates['llama.cpp plain']:.2f}x")
        print(line)


if __name__ == "__main__":
    main()
