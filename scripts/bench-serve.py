#!/usr/bin/env python3
"""Load client for an OpenAI-compatible server (ggrs serve, llama-server): bounded concurrent
streaming requests to POST /v1/completions, each asked for exactly --max-tokens tokens
(`ignore_eos: true`; `--min-tokens` also sends `min_tokens`, which vLLM reads).

Prints the aggregate generated tokens/s (all tokens of all requests over the wall time from the
first request sent to the last one finished), time to first token and inter-token latency
(p50/p95 over all requests), the tokens of each request, and one line
`JSON {...}` with the summary and the raw samples, for scripts.

Standard library only.  Example:
    scripts/bench-serve.py --url http://127.0.0.1:8080 --concurrency 8 --requests 8 --max-tokens 128
"""

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

# Fixed prompts of mixed lengths (about 10 to 300 tokens); request i uses PROMPTS[i % 8].
_STORY = (
    "The lighthouse keeper had lived alone on the island for eleven years. Every evening he "
    "climbed the spiral stairs, polished the great lens, and watched the ships pass along the "
    "dark coast. One winter night a small boat appeared in the beam, drifting without oars, and "
    "in it sat a girl holding a lantern that had long since gone out. "
)
PROMPTS = [
    "Write a story about a dragon who is afraid of fire.",
    "Explain how a hash table works, step by step, with an example in Python.",
    "List the planets of the solar system and describe each one in two sentences.",
    _STORY + "Continue the story.",
    "Summarise the following text and then continue it.\n\n" + _STORY * 2,
    "Translate to French and explain the grammar: The cat sat on the mat while the dog slept.",
    "You are a helpful assistant. " + _STORY * 3 + "What happens next? Write three paragraphs.",
    "Q: What is the capital of France?\nA:",
]


def percentile(values, q):
    """The q-th percentile (0..100) by linear interpolation; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def one_request(url, index, args):
    """Sends one streaming completion; returns its timing samples."""
    body = {
        "prompt": PROMPTS[index % len(PROMPTS)],
        "max_tokens": args.max_tokens,
        "ignore_eos": True,
        "temperature": args.temperature,
        "seed": index,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if args.model:
        body["model"] = args.model
    if args.min_tokens:
        body["min_tokens"] = args.max_tokens
    if args.no_cache_prompt:
        body["cache_prompt"] = False
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    conn_cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(url.hostname, url.port or (443 if url.scheme == "https" else 80), timeout=args.timeout)
    path = url.path.rstrip("/") + "/v1/completions"

    t0 = time.perf_counter()
    conn.request("POST", path, body=json.dumps(body), headers=headers)
    res = conn.getresponse()
    if res.status != 200:
        text = res.read().decode("utf-8", "replace")
        conn.close()
        raise RuntimeError(f"request {index}: HTTP {res.status}: {text[:300]}")
    arrivals = []  # time of each chunk that carried text
    usage = None
    finish = None
    for raw in res:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            raise RuntimeError(f"request {index}: error in stream: {chunk['error']}")
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if choice.get("text"):
                arrivals.append(time.perf_counter())
            finish = choice.get("finish_reason") or finish
    t_end = time.perf_counter()
    conn.close()
    tokens = usage["completion_tokens"] if usage else len(arrivals)
    return {
        "index": index,
        "start": t0,
        "end": t_end,
        "tokens": tokens,
        "chunks": len(arrivals),
        "prompt_tokens": usage.get("prompt_tokens") if usage else None,
        "finish_reason": finish,
        "ttft": (arrivals[0] - t0) if arrivals else None,
        "itl": [b - a for a, b in zip(arrivals, arrivals[1:])],
    }


def run(args):
    """Runs the benchmark; returns the summary dict (samples included)."""
    url = urllib.parse.urlparse(args.url)
    lock = threading.Lock()
    results, errors = [], []

    def job(i):
        try:
            r = one_request(url, i, args)
            with lock:
                results.append(r)
        except Exception as err:  # reported below, the other requests go on
            with lock:
                errors.append(str(err))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        list(pool.map(job, range(args.requests)))
    wall = time.perf_counter() - t0

    results.sort(key=lambda r: r["index"])
    total = sum(r["tokens"] for r in results)
    ttft = [r["ttft"] for r in results if r["ttft"] is not None]
    itl = [x for r in results for x in r["itl"]]
    return {
        "url": args.url,
        "concurrency": args.concurrency,
        "requests": args.requests,
        "max_tokens": args.max_tokens,
        "ok": len(results),
        "errors": errors,
        "wall_s": wall,
        "generated_tokens": total,
        "aggregate_tps": total / wall if wall > 0 else 0.0,
        "ttft_p50_ms": ms(percentile(ttft, 50)),
        "ttft_p95_ms": ms(percentile(ttft, 95)),
        "itl_p50_ms": ms(percentile(itl, 50)),
        "itl_p95_ms": ms(percentile(itl, 95)),
        "per_request_tokens": [r["tokens"] for r in results],
        "short_requests": [r["index"] for r in results if r["tokens"] != args.max_tokens],
        "samples": {
            "ttft_s": [r["ttft"] for r in results],
            "request_s": [r["end"] - r["start"] for r in results],
            "prompt_tokens": [r["prompt_tokens"] for r in results],
            "itl_s": [r["itl"] for r in results],
        },
    }


def ms(seconds):
    return None if seconds is None else seconds * 1000.0


def fmt(x, unit=""):
    return "n/a" if x is None else f"{x:.2f}{unit}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080", help="server base URL (without /v1)")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight at once")
    p.add_argument("--requests", type=int, default=8, help="requests in all")
    p.add_argument("--max-tokens", type=int, default=128, help="tokens generated by each request")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--model", default=None, help="the `model` field (optional)")
    p.add_argument("--api-key", default=None, help="sent as Bearer token")
    p.add_argument("--min-tokens", action="store_true", help="also send min_tokens = --max-tokens")
    p.add_argument("--no-cache-prompt", action="store_true", help="send cache_prompt: false")
    p.add_argument("--timeout", type=float, default=600.0, help="socket timeout in seconds")
    p.add_argument("--label", default="", help="name printed with the results")
    args = p.parse_args()
    if args.concurrency < 1 or args.requests < 1 or args.max_tokens < 1:
        p.error("--concurrency, --requests and --max-tokens must be at least 1")

    s = run(args)
    label = f"[{args.label}] " if args.label else ""
    print(
        f"{label}{s['ok']}/{s['requests']} requests, concurrency {s['concurrency']}, "
        f"{s['generated_tokens']} tokens in {s['wall_s']:.2f} s: "
        f"aggregate {s['aggregate_tps']:.2f} tokens/s"
    )
    print(
        f"{label}time to first token p50 {fmt(s['ttft_p50_ms'], ' ms')}, p95 {fmt(s['ttft_p95_ms'], ' ms')}; "
        f"inter-token p50 {fmt(s['itl_p50_ms'], ' ms')}, p95 {fmt(s['itl_p95_ms'], ' ms')}"
    )
    print(f"{label}tokens per request: {s['per_request_tokens']}")
    for err in s["errors"]:
        print(f"{label}error: {err}", file=sys.stderr)
    if s["short_requests"]:
        print(
            f"{label}warning: requests {s['short_requests']} did not make {args.max_tokens} tokens "
            "(does the server honour ignore_eos / min_tokens?)",
            file=sys.stderr,
        )
    print("JSON " + json.dumps({"label": args.label, **s}))
    return 1 if s["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
