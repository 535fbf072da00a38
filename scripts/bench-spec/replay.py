#!/usr/bin/env python3
"""Replays real greedy outputs through speculative-decoding policies with a cost model,
without the model: how fast could speculation be next to plain decoding, if a step of
`n` columns (the token just sampled and `n - 1` drafted ones) costs `cost(n)` one-token
steps? Speculation never changes the output, so the replayed tokens are the real ones.

usage:
  scripts/bench-spec/replay.py --dump DUMP.json [--model GGUF] [--n 128] [--sets edit]
      runs `ggrs run --json` (plain, greedy, 2 threads) on the prompts of
      scripts/bench-spec/prompts.jsonl and writes their prompt and output tokens;
  scripts/bench-spec/replay.py DUMP.json [--cost 0.25] [--curve 1:1,2:1.25,...]
      replays them: `--cost c` is the linear model cost(n) = 1 + c·(n − 1), `--curve` a
      measured table (`cargo run --release -p ggrs-llama --example spec_step_cost --
      MODEL DEPTH THREADS REPS 1,2,...,17` prints one; widths past the table cost the
      last entry plus its last step per column).

Policies (speedups are generated tokens per unit of time against one token per step):
  current       ggrs-llama's NgramDrafter + DraftControl (the geometric acceptance model and
                the measured cost of each step width), mirrored here;
  oracle length the same lookup, drafting exactly the tokens that will be accepted (an
                upper bound for any draft-length control with this drafter);
  oracle tokens a drafter that knows the output and drafts 16 tokens every step (an upper
                bound for any drafter at this cost).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def lookup(h, max_n, resume=None, single=False, min_match=2, max_match=64):
    """NgramDrafter::lookup_from: where the proposal for the history `h` starts, or None:
    the longest (then latest) earlier match of the history's suffix (at least `min_match`
    tokens); else, with `resume` (where the last copy had reached), the first single-token
    match whose continuation starts at or after it; else, with `single`, the latest
    single-token match."""
    n = len(h)
    if n < 2 or max_n == 0:
        return None
    last = h[-1]
    best, best_len, near = None, 0, None
    for i in range(n - 2, -1, -1):
        if h[i] != last:
            continue
        if resume is not None and i + 1 >= resume:
            near = i + 1
        cap = min(max_match, i + 1)
        ln = 0
        while ln < cap and h[i - ln] == h[n - 1 - ln]:
            ln += 1
        if ln > best_len:
            best, best_len = i, ln
            if ln >= max_match:
                break
    if best is not None and best_len >= max(min_match, 1):
        return best + 1
    if near is not None:
        return near
    if best is not None and single:
        return best + 1
    return None


class Drafter:
    """NgramDrafter::draft: the lookup, resuming the last copy where no pair matches."""

    def __init__(self):
        self.copy = None

    def draft(self, h, max_n):
        resume = None
        if self.copy is not None and len(h) >= self.copy[1]:
            resume = self.copy[0] + (len(h) - self.copy[1])
        at = lookup(h, max_n, resume, True)
        if at is None:
            return []
        self.copy = (at, len(h))
        return h[at:at + max_n]


class Control:
    """DraftControl (ggrs-llama/src/speculative/drafting.rs): the geometric acceptance model
    and the measured cost of each step width (here: the cost model's)."""

    PRIOR, COST_PRIOR, RATE, WIDTH_RATE, GROW = 0.75, 0.1, 0.15, 0.3, 4

    def __init__(self):
        self.accept, self.column_cost, self.width = self.PRIOR, self.COST_PRIOR, {}
        self.timed = False  # whether a one-token step has been timed (step_secs > 0)

    def cost(self, w):
        if w == 1:
            return 1.0
        if w in self.width:
            return self.width[w]
        lo = max([v for v in self.width if v < w], default=1)
        lo_cost = self.width.get(lo, 1.0)
        hi = min([v for v in self.width if v > w], default=None)
        if hi is not None:
            return lo_cost + (self.width[hi] - lo_cost) * (w - lo) / (hi - lo)
        return lo_cost + max(self.column_cost, 0.01) * (w - lo)

    def limit(self, cap):
        if not self.timed:
            return 0
        cap = min(cap, max(self.width, default=1) - 1 + self.GROW)
        best, best_rate, gain, p = 0, 1.0, 1.0, 1.0
        for k in range(1, cap + 1):
            p *= self.accept
            gain += p
            if gain / self.cost(k + 1) > best_rate:
                best, best_rate = k, gain / self.cost(k + 1)
        return best

    def plain_step(self):
        self.timed = True
        self.accept += 0.05 * max(self.PRIOR - self.accept, 0.0)
        self.column_cost += 0.02 * min(self.COST_PRIOR - self.column_cost, 0.0)
        for w in self.width:
            self.width[w] += 0.02 * min(1.0 + self.COST_PRIOR * (w - 1) - self.width[w], 0.0)

    def spec_step(self, drafted, kept, step_cost):
        for i in range(min(drafted, kept + 1)):
            self.accept += self.RATE * ((1.0 if i < kept else 0.0) - self.accept)
        rel = min(max(step_cost, 1.0), 1.0 + 2.0 * drafted)
        self.column_cost += self.RATE * ((rel - 1.0) / drafted - self.column_cost)
        w = drafted + 1
        self.width[w] = rel if w not in self.width else self.width[w] + self.WIDTH_RATE * (rel - self.width[w])


def replay(prompt, out, cost, policy, draft_max=16):
    """One output under `policy`: (time in one-token steps, drafted, accepted)."""
    hist, pos = list(prompt) + [out[0]], 1
    ctl, drafter = Control(), Drafter()
    t = drafted = accepted = 0
    while pos < len(out):
        cap = min(draft_max, len(out) - pos - 1)
        if policy == "oracle tokens":
            d = out[pos:pos + cap]
        elif policy == "current":
            k = ctl.limit(cap) if cap > 0 else 0
            d = drafter.draft(hist, k) if k > 0 else []
        else:  # oracle length
            d = drafter.draft(hist, cap) if cap > 0 else []
            j = 0
            while j < len(d) and d[j] == out[pos + j]:
                j += 1
            d = d[:j]
        if not d:
            t += 1.0
            ctl.plain_step()
            hist.append(out[pos])
            pos += 1
            continue
        step = cost(len(d) + 1)
        t += step
        j = 0
        while j < len(d) and d[j] == out[pos + j]:
            j += 1
        drafted, accepted = drafted + len(d), accepted + j
        ctl.spec_step(len(d), j, step)
        n_new = min(j + 1, len(out) - pos)
        hist.extend(out[pos:pos + n_new])
        pos += n_new
    return t, drafted, accepted


def make_dump(a) -> None:
    binary = str(REPO / "target/release/ggrs")
    prompts = [json.loads(l) for l in open(REPO / "scripts/bench-spec/prompts.jsonl")]
    runs = []
    for p in prompts:
        if p["set"] not in a.sets.split(","):
            continue
        out = subprocess.run([binary, "run", "-m", a.model, "-t", "2", "-n", str(a.n),
                              "--temp", "0", "--json", "-p", p["prompt"]],
                             capture_output=True, text=True, check=True).stdout
        d = json.loads(out)
        runs.append({"name": p["name"], "set": p["set"], "prompt_tokens": d["prompt_tokens"],
                     "tokens": d["tokens"]})
        print(p["name"], len(d["tokens"]), "tokens", file=sys.stderr)
    with open(a.dump, "w") as f:
        json.dump(runs, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("dump")
    ap.add_argument("--dump", dest="make", action="store_true", help="make DUMP.json")
    ap.add_argument("--model", default=str(Path.home() / ".cache/ggrs/models/derived/qwen05b-q4_0.gguf"))
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--sets", default="edit")
    ap.add_argument("--cost", default="0.15,0.2,0.25,0.3", help="linear column costs")
    ap.add_argument("--curve", help="measured step costs n:cost(n),... (cost(1) = 1)")
    a = ap.parse_args()
    if a.make:
        make_dump(a)
        return
    with open(a.dump) as f:
        runs = json.load(f)
    models = []
    if a.curve:
        table = {int(k): float(v) for k, v in (e.split(":") for e in a.curve.split(","))}
        top = max(table)
        slope = table[top] - table.get(top - 1, 1.0)
        models.append(("curve", lambda n: table.get(n, table[top] + slope * (n - top))))
    else:
        for c in [float(x) for x in a.cost.split(",")]:
            models.append((f"linear c={c}", lambda n, c=c: 1.0 + c * (n - 1)))
    n = sum(len(r["tokens"]) - 1 for r in runs)
    print(f"{len(runs)} outputs, {n} tokens after the first")
    for name, cost in models:
        print(f"{name}:")
        for policy in ("current", "oracle length", "oracle tokens"):
            t = dr = ac = 0
            for r in runs:
                x, y, z = replay(r["prompt_tokens"], r["tokens"], cost, policy)
                t, dr, ac = t + x, dr + y, ac + z
            print(f"  {policy:14} {n / t:5.2f}x plain decoding  ({ac}/{dr} drafts accepted)")


if __name__ == "__main__":
    main()
