#!/usr/bin/env python3
"""CPU time the HTTP side of `ggrs serve` spends per streamed token.

Starts `ggrs serve` on MODEL (a tiny model makes the engine's share small and the HTTP
side's easy to see), sends --requests streaming completions of --max-tokens tokens each
(--concurrency at a time, `ignore_eos`), counts the SSE chunks received, and reads the CPU
time (user + system, from /proc/PID/task/TID/stat) of the server's threads by name before and
after: the tokio workers and the HTTP main thread (`ggrs-http*`) against the engine thread
(`ggrs-engine`) and the compute pool. Prints microseconds of HTTP-thread CPU per streamed
token, per round, and their median; a final `JSON {...}` line holds the raw figures.

Linux only (reads /proc). Standard library only. Example:
    scripts/serve-overhead.py --ggrs target/release/ggrs \\
        --model ../shared/reference/tiny/tiny-llama-f16.gguf --requests 32 --max-tokens 500
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def thread_times(pid):
    """{thread name: CPU seconds} summed over the threads of each name."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
        # comm is in parentheses and may contain spaces: split after the last ')'.
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        utime, stime = int(fields[11]), int(fields[12])
        out[name] = out.get(name, 0.0) + (utime + stime) / CLK_TCK
    return out


def wait_ready(port, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("serve-overhead: the server did not become ready")


def stream_one(port, max_tokens, counts, lock):
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens,
                       "temperature": 0, "stream": True, "ignore_eos": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        sys.exit(f"serve-overhead: HTTP {r.status}: {r.read()[:200]!r}")
    n = 0
    for line in r:
        if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
            n += 1
    with lock:
        counts.append(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ggrs", default="target/release/ggrs")
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    port = free_port()
    np_ = max(a.concurrency, 1)
    srv = subprocess.Popen(
        [a.ggrs, "serve", "-m", a.model, "--port", str(port), "-np", str(np_),
         "-c", str(np_ * (a.max_tokens + 64)), "-t", str(a.threads)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rounds = []
    try:
        wait_ready(port)
        for rnd in range(a.rounds):
            before = thread_times(srv.pid)
            counts, lock = [], threading.Lock()
            t0 = time.time()
            pending = list(range(a.requests))
            def worker():
                while True:
                    with lock:
                        if not pending:
                            return
                        pending.pop()
                    stream_one(port, a.max_tokens, counts, lock)
            ts = [threading.Thread(target=worker) for _ in range(a.concurrency)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            wall = time.time() - t0
            after = thread_times(srv.pid)
            delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            http_cpu = sum(v for k, v in delta.items() if k.startswith("ggrs-http"))
            chunks = sum(counts)
            per = http_cpu / max(chunks, 1) * 1e6
            rounds.append({"chunks": chunks, "wall_s": wall, "http_cpu_s": http_cpu,
                           "us_per_token": per, "threads": delta})
            print(f"round {rnd + 1}: {chunks} streamed tokens in {wall:.2f} s; HTTP threads "
                  f"{http_cpu:.3f} s CPU = {per:.1f} µs per token; all threads: "
                  + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(delta.items()) if v > 0))
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    med = statistics.median(r["us_per_token"] for r in rounds)
    print(f"median: {med:.1f} µs of HTTP-thread CPU per streamed token")
    print("JSON " + json.dumps({"median_us_per_token": med, "rounds": rounds}))


if __name__ == "__main__":
    main()
