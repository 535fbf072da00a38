#!/usr/bin/env python3
"""The cost of constrained decoding per generated token, `ggrs serve` against llama-server.

Started by scripts/bench-grammar.sh (which starts the servers); can be pointed at running
servers by hand:

    python3 scripts/bench-grammar.py --server ggrs=http://127.0.0.1:8181 \\
        --server llama.cpp=http://127.0.0.1:8182 --gbnf .../grammars/json.gbnf

Each server streams the same greedy chat completions (one prompt, `--tokens` tokens at most)
three ways: unconstrained, under a JSON schema (nested objects, arrays, enums, strings) and
under a GBNF grammar (llama.cpp's grammars/json.gbnf). The client timestamps every streamed
chunk; the time per token is the interval between consecutive chunks after the first (the
first waits for the prompt). Modes and servers alternate, `--rounds` times, so that noise
from other work on the machine falls on all of them alike. Reported per server and mode:
the median and p99 time per token, and the added time against the same server's
unconstrained decoding (median vs median, p99 vs p99).
"""

import argparse
import http.client
import json
import statistics
import sys
import time
import urllib.parse

SCHEMA = {
    "type": "object",
    "properties": {
        "team": {"type": "string"},
        "members": {
            "type": "array",
            "minItems": 6,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "role": {"enum": ["engineer", "designer", "manager", "tester"]},
                    "address": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string"},
                            "country": {"type": "string"},
                        },
                        "required": ["city", "country"],
                    },
                    "skills": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                },
                "required": ["name", "role", "address", "skills"],
            },
        },
    },
    "required": ["team", "members"],
}

PROMPT = ("Describe a software team of eight people as JSON: the team's name, then each "
          "member's name, role, address (city and country) and skills.")


def stream(url, body, timeout=600):
    """Chunk arrival times (seconds) and the usage of one streamed chat completion."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"{url}: HTTP {res.status}: {res.read()[:500]!r}")
    times, text, usage = [], [], None
    while True:
        line = res.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        now = time.perf_counter()
        v = json.loads(data)
        if v.get("usage"):
            usage = v["usage"]
        for c in v.get("choices", []):
            piece = (c.get("delta") or {}).get("content")
            if piece:
                times.append(now)
                text.append(piece)
    conn.close()
    return times, "".join(text), usage


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append", required=True, help="NAME=URL (repeatable)")
    ap.add_argument("--gbnf", required=True, help="a GBNF file (llama.cpp's grammars/json.gbnf)")
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the figures to this file too")
    a = ap.parse_args()
    servers = [s.split("=", 1) for s in a.server]
    gbnf = open(a.gbnf).read()
    base = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": a.tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    modes = {
        "unconstrained": {},
        "json-schema": {"response_format": {"type": "json_schema",
                                            "json_schema": {"name": "team", "schema": SCHEMA}}},
        "json.gbnf": {"grammar": gbnf},
    }
    gaps = {(s, m): [] for s, _ in servers for m in modes}
    tokens = {(s, m): 0 for s, _ in servers for m in modes}
    for r in range(a.rounds):
        for name, url in servers:
            for mode, extra in modes.items():
                times, text, usage = stream(url, {**base, **extra})
                gaps[(name, mode)] += [b - a_ for a_, b in zip(times[1:], times[2:])]
                tokens[(name, mode)] += len(times)
                if mode != "unconstrained" and r == 0:
                    try:
                        json.loads(text)
                        ok = "valid JSON"
                    except ValueError:
                        n = (usage or {}).get("completion_tokens", len(times))
                        ok = "cut by max_tokens" if n >= a.tokens else "NOT JSON"
                    print(f"  {name:9} {mode:13} {len(times):4} chunks, {ok}: {text[:70]!r}…",
                          file=sys.stderr)
    rows = []
    print(f"{'server':10} {'mode':14} {'chunks':>6} {'median ms':>10} {'p99 ms':>8} "
          f"{'added median':>13} {'added p99':>10}")
    for name, _ in servers:
        m0, p0 = statistics.median(gaps[(name, "unconstrained")]), pct(gaps[(name, "unconstrained")], 99)
        for mode in modes:
            g = gaps[(name, mode)]
            med, p99 = statistics.median(g), pct(g, 99)
            row = {"server": name, "mode": mode, "chunks": tokens[(name, mode)],
                   "median_ms": med * 1e3, "p99_ms": p99 * 1e3,
                   "added_median_pct": (med / m0 - 1) * 100, "added_p99_pct": (p99 / p0 - 1) * 100}
            rows.append(row)
            print(f"{name:10} {mode:14} {row['chunks']:6} {row['median_ms']:10.2f} "
                  f"{row['p99_ms']:8.2f} {row['added_median_pct']:+12.1f}% "
                  f"{row['added_p99_pct']:+9.1f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
