#!/usr/bin/env python3
"""Embedding servers' throughput and latency with one client: `ggrs serve --embeddings` against
llama.cpp's `llama-server --embeddings` (and, with --st-python, sentence-transformers on
PyTorch's CPU) on the same model, sentences and threads, in alternating rounds of one run.

    scripts/bench-embed-serve.py --ggrs target/release/ggrs --llama-server PATH \\
        --model MODEL.gguf --sentences FILE [--rounds 5] [--threads 2] [--batch 64] \\
        [--st-python PYTHON --st-model HF_DIR]

Each round starts each server on a free loopback port, waits for /health, sends one warm-up
request, then (one client, one request at a time):
- throughput: every sentence of FILE through POST /v1/embeddings, --batch inputs per request;
  embeddings per second = sentences / wall time of those requests;
- latency: 20 requests of one short query; their median.
The server is stopped after its round. Printed: medians over the rounds, the ratios, and the
largest |difference| and smallest cosine between the servers' vectors (both L2-normalised, as
/v1/embeddings answers). Standard library only.
"""

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

QUERY = "What is the capital of France?"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def wait_health(url, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"bench-embed-serve: the server exited ({proc.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.1)
    sys.exit("bench-embed-serve: /health not 200 after 60 s")


def run_server(cmd, sentences, batch):
    port = free_port()
    proc = subprocess.Popen(cmd + ["--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_health(url, proc)
        post(url + "/v1/embeddings", {"input": sentences[:batch]})  # warm-up
        t0 = time.perf_counter()
        vecs = []
        for i in range(0, len(sentences), batch):
            res = post(url + "/v1/embeddings", {"input": sentences[i:i + batch], "encoding_format": "float"})
            vecs += [d["embedding"] for d in sorted(res["data"], key=lambda d: d["index"])]
        dt = time.perf_counter() - t0
        lat = []
        for _ in range(20):
            t = time.perf_counter()
            post(url + "/v1/embeddings", {"input": QUERY})
            lat.append(time.perf_counter() - t)
        return len(sentences) / dt, statistics.median(lat) * 1000, vecs
    finally:
        proc.terminate()
        proc.wait()


ST_SNIPPET = r"""
import json, sys, time
import torch
torch.set_num_threads(int(sys.argv[2]))
from sentence_transformers import SentenceTransformer
m = SentenceTransformer(sys.argv[1], device="cpu")
sentences = [l.rstrip("\n") for l in open(sys.argv[3], encoding="utf-8")]
batch = int(sys.argv[4])
m.encode(sentences[:batch])
t0 = time.perf_counter()
v = m.encode(sentences, batch_size=batch, normalize_embeddings=True)
dt = time.perf_counter() - t0
lat = []
for _ in range(20):
    t = time.perf_counter(); m.encode([sys.argv[5]]); lat.append(time.perf_counter() - t)
lat.sort()
print(json.dumps({"eps": len(sentences) / dt, "lat_ms": lat[10] * 1000, "vecs": v.tolist()}))
"""


def run_st(python, model_dir, threads, path, batch):
    out = subprocess.run([python, "-c", ST_SNIPPET, model_dir, str(threads), path, str(batch), QUERY],
                         capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["eps"], r["lat_ms"], r["vecs"]


def compare(a, b):
    dmax = max(max(abs(x - y) for x, y in zip(u, v)) for u, v in zip(a, b))

    def cos(u, v):
        return sum(x * y for x, y in zip(u, v)) / math.sqrt(sum(x * x for x in u) * sum(y * y for y in v))

    return dmax, min(cos(u, v) for u, v in zip(a, b))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ggrs", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--sentences", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--st-python", help="a Python with sentence-transformers and torch")
    ap.add_argument("--st-model", help="the Hugging Face directory of the same model")
    a = ap.parse_args()
    with open(a.sentences, encoding="utf-8") as f:
        sentences = [l.rstrip("\n") for l in f if l.strip()]
    t = str(a.threads)
    runs = {
        "ggrs serve": [a.ggrs, "serve", "-m", a.model, "--embeddings", "-t", t],
        # Slots share the context; the physical batch holds whole inputs (non-causal models).
        "llama-server": [a.llama_server, "-m", a.model, "--embeddings", "-t", t, "-tb", t, "-c", "8192",
                         "-np", "16", "-b", "2048", "-ub", "2048", "--no-warmup"],
    }
    res = {k: [] for k in runs}
    if a.st_python:
        res["sentence-transformers"] = []
    last = {}
    for r in range(a.rounds):
        for name, cmd in runs.items():
            eps, lat, vecs = run_server(cmd, sentences, a.batch)
            res[name].append((eps, lat))
            last[name] = vecs
            print(f"  round {r + 1} {name}: {eps:.1f} embeddings/s, one query {lat:.2f} ms", file=sys.stderr)
        if a.st_python:
            eps, lat, vecs = run_st(a.st_python, a.st_model, a.threads, a.sentences, a.batch)
            res["sentence-transformers"].append((eps, lat))
            last["sentence-transformers"] = vecs
            print(f"  round {r + 1} sentence-transformers: {eps:.1f} embeddings/s, one query {lat:.2f} ms",
                  file=sys.stderr)
    print(f"{os.path.basename(a.model)}: {len(sentences)} sentences, {a.threads} threads, one client, "
          f"{a.batch} inputs per request, median of {a.rounds} rounds; load average {os.getloadavg()[0]:.2f}")
    med = {}
    for name, v in res.items():
        eps = statistics.median(x[0] for x in v)
        lat = statistics.median(x[1] for x in v)
        med[name] = (eps, lat)
        print(f"  {name:22s} {eps:8.1f} embeddings/s   one query {lat:7.2f} ms")
    g = med["ggrs serve"]
    for name in med:
        if name != "ggrs serve":
            print(f"  ggrs / {name}: throughput {g[0] / med[name][0]:.2f}x, latency {med[name][1] / g[1]:.2f}x")
            d, c = compare(last["ggrs serve"], last[name])
            print(f"  vectors vs {name}: max |diff| {d:.2e}, min cosine {c:.9f}")


if __name__ == "__main__":
    main()
