#!/usr/bin/env python3
"""Python overhead of the ggrs package against the `ggrs` command line, measured in one run.

1. Per generated token: in one Python process, `Model.generate` (plain and streamed) of N
   tokens; the wall time Python sees minus the time the Rust side measured for the same call
   is the Python overhead of that call, divided by the tokens. It is compared with the CLI's
   time per generated token, from `ggrs run --json` on the same model, prompt and length,
   run in between (rounds alternate).
2. Start-up: wall time of `ggrs run -n 1` against `python -c "import ggrs; Model(...);
   generate(max_tokens=1)"`, alternating, R rounds each.

Prints medians and the raw samples as JSON on the last line.

Usage: bench-python.py [--model Q4_0.gguf] [--ggrs target/release/ggrs] [-n 128] [-r 5]
(run it with the Python that has the ggrs package installed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import ggrs

PROMPT = "Write a Rust function that reverses a string."


def cli_run(ggrs_bin: str, model: str, n: int, threads: int) -> dict:
    out = subprocess.run(
        [ggrs_bin, "run", "-m", model, "-p", PROMPT, "-n", str(n), "--temp", "0",
         "--ignore-eos", "-t", str(threads), "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out[out.index("{"):])


def wall(cmd: list) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF file (default: the default model)")
    ap.add_argument("--ggrs", default="target/release/ggrs", help="the ggrs binary")
    ap.add_argument("-n", type=int, default=128, help="tokens to generate")
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    model_path = a.model or ggrs.default_model()

    model = ggrs.Model(model_path, n_ctx=1024, n_threads=a.threads, cache_prompt=False)
    model.generate(PROMPT, max_tokens=8, temperature=0)  # warm up
    samples = {"cli_ms_per_token": [], "plain_overhead_ms_per_token": [],
               "stream_overhead_ms_per_token": [], "plain_ms_per_token": [],
               "stream_ms_per_token": [], "cli_start_s": [], "py_start_s": []}
    for _ in range(a.rounds):
        cli = cli_run(a.ggrs, model_path, a.n, a.threads)["timings"]
        samples["cli_ms_per_token"].append(cli["predicted_ms"] / cli["predicted_n"])
        for kind in ("plain", "stream"):
            t0 = time.perf_counter()
            if kind == "plain":
                g = model.generate(PROMPT, max_tokens=a.n, temperature=0, ignore_eos=True)
            else:
                s = model.generate(PROMPT, max_tokens=a.n, temperature=0, ignore_eos=True, stream=True)
                for _piece in s:
                    pass
                g = s.result
            py = time.perf_counter() - t0
            t = g.timings
            rust = t["prompt_seconds"] + t["generation_seconds"]
            n = t["generated_tokens"]
            samples[f"{kind}_overhead_ms_per_token"].append((py - rust) * 1e3 / n)
            samples[f"{kind}_ms_per_token"].append(t["generation_seconds"] * 1e3 / n)
    del model

    py_cmd = [sys.executable, "-c",
              "import sys, ggrs; m = ggrs.Model(sys.argv[1], n_threads=int(sys.argv[2]));"
              "m.generate('Hi', max_tokens=1, temperature=0)", model_path, str(a.threads)]
    cli_cmd = [a.ggrs, "run", "-m", model_path, "-p", "Hi", "-n", "1", "--temp", "0",
               "-t", str(a.threads)]
    for _ in range(a.rounds):
        samples["cli_start_s"].append(wall(cli_cmd))
        samples["py_start_s"].append(wall(py_cmd))

    med = {k: statistics.median(v) for k, v in samples.items()}
    cli = med["cli_ms_per_token"]
    print(f"model {model_path}, {a.n} tokens, {a.threads} threads, {a.rounds} rounds (medians)")
    print(f"CLI time per generated token:        {cli:.3f} ms")
    for kind in ("plain", "stream"):
        o = med[f"{kind}_overhead_ms_per_token"]
        print(f"Python {kind:6} overhead per token:    {o * 1e3:.1f} µs = {100 * o / cli:.2f}% of the CLI's "
              f"(Rust side {med[f'{kind}_ms_per_token']:.3f} ms/token)")
    ratio = med["py_start_s"] / med["cli_start_s"]
    print(f"start-up (load + 1 token): ggrs run {med['cli_start_s']:.3f} s, Python {med['py_start_s']:.3f} s "
          f"= {ratio:.3f}×")
    print(json.dumps({"medians": med, "samples": samples}))


if __name__ == "__main__":
    main()
