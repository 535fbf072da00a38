#!/usr/bin/env python3
"""Soak test of `ggrs serve` (not run in CI): many clients for a long time, mixing every
endpoint, random disconnects, oversized and malformed requests, on loopback only.

It starts the server itself (on 127.0.0.1, a free port, with --embeddings and a 5 s
--body-timeout), runs CLIENTS threads until the time is up, and reports: requests by kind and
status, errors (5xx answers, broken answers, failures to connect), the latency of /health
(median, p99, max; polled by a thread of its own), the server's RSS and the host's load
average over time, and leaked slots (slots or queue entries still busy once the clients have
stopped). Exit status 1 if there were errors or leaks.

    scripts/soak-serve.py --minutes 30 --clients 32            # the default model
    scripts/soak-serve.py --model tiny.gguf --minutes 1         # a quick try

Only the standard library; the server runs under `nice -n 19`.
"""

import argparse
import http.client
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "ggrs"))
    p.add_argument("--model", default=os.path.expanduser(
        "~/.cache/ggrs/models/derived/qwen05b-q4_0.gguf"))
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="also write the report to this file")
    p.add_argument("--sample-every", type=float, default=10.0,
                   help="seconds between RSS and load-average samples")
    return p.parse_args()


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}      # (kind, status) -> n
        self.errors = []      # (time, kind, what)
        self.health = []      # seconds
        self.rss = []         # (s since start, RSS MiB, anonymous MiB, host load avg 1 min)

    def count(self, kind, status):
        with self.lock:
            self.counts[(kind, status)] = self.counts.get((kind, status), 0) + 1

    def error(self, kind, what):
        with self.lock:
            if len(self.errors) < 1000:
                self.errors.append((time.time(), kind, str(what)[:300]))


LAST = threading.local()  # the last answer's body on this thread (for error reports)


def request(port, method, path, body=None, headers=None, timeout=120):
    """One request on a fresh connection: (status, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        LAST.body = data[:240]
        return r.status, data
    finally:
        c.close()


WORDS = ("the quick brown fox jumps over a lazy dog while rust compiles the "
         "server answers every client in time").split()


def text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def chat_body(rng, stream=False):
    return {"messages": [{"role": "system", "content": "Answer briefly."},
                         {"role": "user", "content": text(rng, rng.randint(3, 40))}],
            "max_tokens": rng.randint(1, 24), "temperature": rng.choice([0, 0.7, 1e-40]),
            "seed": rng.randint(0, 1000), "stream": stream}


# Kinds of work: name -> (weight, function(rng, port) -> (status, expected statuses)).
def k_chat(rng, port):
    s, b = request(port, "POST", "/v1/chat/completions", chat_body(rng))
    if s == 200:
        v = json.loads(b)
        assert v["choices"][0]["message"]["content"] is not None
    return s, {200}


def k_chat_stream(rng, port, disconnect=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps(chat_body(rng, True)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            LAST.body = r.read()[:240]
            return r.status, {200}
        if disconnect:
            r.read(rng.randint(1, 200))  # a little, then leave
            c.sock.shutdown(socket.SHUT_RDWR)
            return r.status, {200}
        data = r.read().decode()
        assert data.rstrip().endswith("data: [DONE]"), data[-200:]
        return r.status, {200}
    finally:
        c.close()


def k_completions(rng, port):
    body = {"prompt": text(rng, rng.randint(1, 60)), "max_tokens": rng.randint(1, 16),
            "n": rng.choice([1, 1, 2]), "logprobs": rng.choice([None, 2])}
    s, _ = request(port, "POST", "/v1/completions", body)
    return s, {200}


def k_tokenize(rng, port):
    s, b = request(port, "POST", "/tokenize",
                   {"content": text(rng, rng.randint(1, 500)), "with_pieces": rng.random() < 0.5})
    if s == 200:
        assert "tokens" in json.loads(b)
    return s, {200}


def k_detokenize(rng, port):
    s, _ = request(port, "POST", "/detokenize",
                   {"tokens": [rng.randint(0, 150000) for _ in range(rng.randint(0, 50))]})
    return s, {200}


def k_get(rng, port):
    path = rng.choice(["/props", "/slots", "/v1/models", "/metrics", "/", "/nope"])
    s, _ = request(port, "GET", path)
    return s, {404} if path == "/nope" else {200}


def k_oversized(rng, port):
    # More text than --max-text-bytes (1 MiB): 400; more body than 16 MiB: 413.
    if rng.random() < 0.7:
        s, _ = request(port, "POST", "/tokenize",
                       {"content": "a" * (2 << 20), "with_pieces": True})
        return s, {400}
    body = b'{"prompt": "' + b"x" * (17 << 20) + b'"}'
    try:
        s, _ = request(port, "POST", "/v1/completions", body)
    except (BrokenPipeError, ConnectionResetError):
        return 413, {413}  # the server refused and closed before the whole body was sent
    return s, {413}


MALFORMED = [
    b"{not json", b"[1, 2]", b'{"messages": "hi"}', b'{"messages": []}',
    b'{"prompt": [1, 2, -3]}', b'{"prompt": "x", "max_tokens": -5}',
    b'{"prompt": "x", "n": 1000}', b'{"prompt": "x", "temperature": "hot"}',
    b'{"prompt": "x", "max_tokens": 2, "n_predict": "ten"}', b'{"prompt": "x", "top_p": 7}',
    b'{"prompt": "x", "logit_bias": {"99999999": 1}}', b'{"messages": [{"role": 3}]}',
]


def k_malformed(rng, port):
    # (The completion endpoints: most of these bodies are valid for /tokenize, which
    # ignores fields it does not read.)
    path = rng.choice(["/v1/completions", "/v1/chat/completions"])
    s, _ = request(port, "POST", path, rng.choice(MALFORMED))
    return s, {400}


def k_raw_disconnect(rng, port):
    """A partial request line, or a whole request's headers and part of its body, then gone."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        if rng.random() < 0.5:
            sock.sendall(b"POST /v1/chat/comp")
        else:
            body = json.dumps(chat_body(rng)).encode()
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                         % len(body) + body[: rng.randint(0, len(body))])
        time.sleep(rng.random() * 0.5)
    return 0, {0}


def k_slow_body(rng, port):
    """Headers, then a body trickled a byte per 0.5 s that never ends: the server's
    --body-timeout (5 s here) must answer 408 and close."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                     b'{"content": "')
        sock.settimeout(0.5)
        answer = b""
        t_end = time.time() + 30
        while time.time() < t_end:
            try:
                sock.sendall(b"a")
            except OSError:
                pass  # closed by the server: read what it said
            try:
                chunk = sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
        m = re.match(rb"HTTP/1\.1 (\d+)", answer)
        return (int(m.group(1)) if m else 0), {408}


def k_embeddings(rng, port):
    inp = text(rng, rng.randint(1, 40))
    if rng.random() < 0.3:
        inp = [inp, text(rng, rng.randint(1, 20))]
    s, b = request(port, "POST", "/v1/embeddings", {"input": inp})
    if s == 200:
        assert len(json.loads(b)["data"]) == (len(inp) if isinstance(inp, list) else 1)
    return s, {200}


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def k_chat_tools(rng, port):
    body = chat_body(rng, rng.random() < 0.3)
    body["messages"][-1]["content"] = "What is the weather in %s?" % rng.choice(["Paris", "Oslo"])
    body["tools"] = TOOLS
    body["tool_choice"] = rng.choice(["auto", "required", "none",
                                      {"type": "function", "function": {"name": "get_weather"}}])
    if rng.random() < 0.3:
        body.pop("tools")
        body.pop("tool_choice")
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "n", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}}
    s, b = request(port, "POST", "/v1/chat/completions", body)
    if s == 200 and not body["stream"]:
        assert json.loads(b)["choices"][0]["message"] is not None
    return s, {200}


def k_messages(rng, port):
    """Anthropic's Messages API (and now and then count_tokens)."""
    body = {"model": "m", "max_tokens": rng.randint(1, 24), "system": "Answer briefly.",
            "messages": [{"role": "user", "content": text(rng, rng.randint(3, 30))}],
            "stream": rng.random() < 0.3}
    if rng.random() < 0.2:
        s, b = request(port, "POST", "/v1/messages/count_tokens", body)
        if s == 200:
            assert json.loads(b)["input_tokens"] > 0
        return s, {200}
    if rng.random() < 0.3:
        body["tools"] = [{"name": "get_weather", "description": "w",
                          "input_schema": TOOLS[0]["function"]["parameters"]}]
    s, b = request(port, "POST", "/v1/messages", body, headers={"anthropic-version": "2023-06-01"})
    if s == 200 and not body["stream"]:
        assert json.loads(b)["type"] == "message"
    return s, {200}


def k_responses(rng, port):
    body = {"model": "m", "instructions": "Answer briefly.", "input": text(rng, rng.randint(3, 30)),
            "max_output_tokens": rng.randint(1, 24), "stream": rng.random() < 0.3}
    s, b = request(port, "POST", "/v1/responses", body)
    if s == 200 and not body["stream"]:
        assert json.loads(b)["object"] == "response"
    return s, {200}


def k_embedding_rerank(rng, port):
    """llama-server's /embedding (served: --embeddings) and /rerank (not: 501)."""
    if rng.random() < 0.3:
        s, _ = request(port, "POST", "/rerank", {"query": "q", "documents": ["a", "b"]})
        return s, {501}
    s, b = request(port, "POST", "/embedding", {"content": text(rng, rng.randint(1, 30))})
    if s == 200:
        assert len(json.loads(b)) == 1
    return s, {200}


def k_stream_stall(rng, port):
    """A stream whose client reads nothing for a while, then leaves."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        body = json.dumps(chat_body(rng, True)).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                     % len(body) + body)
        time.sleep(rng.uniform(1, 8))
    return 0, {0}


def k_cross_origin(rng, port):
    s, _ = request(port, "GET", "/health", headers={"Origin": "https://evil.example"})
    return s, {403}


KINDS = {
    "chat": (6, k_chat),
    "chat_stream": (4, lambda r, p: k_chat_stream(r, p, False)),
    "stream_disconnect": (3, lambda r, p: k_chat_stream(r, p, True)),
    "completions": (4, k_completions),
    "tokenize": (4, k_tokenize),
    "detokenize": (2, k_detokenize),
    "get": (4, k_get),
    "oversized": (1, k_oversized),
    "malformed": (3, k_malformed),
    "raw_disconnect": (2, k_raw_disconnect),
    "cross_origin": (1, k_cross_origin),
    "slow_body": (1, k_slow_body),
    "embeddings": (2, k_embeddings),
    "chat_tools": (3, k_chat_tools),
    "messages": (3, k_messages),
    "responses": (3, k_responses),
    "embedding_rerank": (1, k_embedding_rerank),
    "stream_stall": (1, k_stream_stall),
}


def client(i, port, stop_at, stats, seed):
    rng = random.Random(seed * 1000 + i)
    names = list(KINDS)
    weights = [KINDS[n][0] for n in names]
    while time.time() < stop_at:
        kind = rng.choices(names, weights)[0]
        try:
            LAST.body = b""
            status, ok = KINDS[kind][1](rng, port)
            stats.count(kind, status)
            if status == 503:
                continue  # the queue is full: a fair answer under this load
            if status not in ok:
                stats.error(kind, "status %d %s" % (status, LAST.body.decode(errors="replace")))
        except Exception as e:  # noqa: BLE001 — every failure is a finding
            stats.count(kind, type(e).__name__)
            stats.error(kind, repr(e))


def health_poller(port, stop_at, stats):
    while time.time() < stop_at:
        t0 = time.perf_counter()
        try:
            s, _ = request(port, "GET", "/health", timeout=30)
            if s != 200:
                stats.error("health", "status %d" % s)
        except Exception as e:  # noqa: BLE001
            stats.error("health", repr(e))
        with stats.lock:
            stats.health.append(time.perf_counter() - t0)
        time.sleep(0.2)


def rss_mib(pid, field="VmRSS"):
    """The process's resident memory in MiB: VmRSS (all), or RssAnon (heap and other
    anonymous memory; the mapped model file's pages, which the kernel may drop and read
    again, are RssFile)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def rss_poller(pid, t0, stop_at, stats, every):
    while time.time() < stop_at + 60:
        try:
            stats.rss.append((round(time.time() - t0), round(rss_mib(pid), 1),
                              round(rss_mib(pid, "RssAnon"), 1), round(os.getloadavg()[0], 2)))
        except OSError:
            return
        time.sleep(every)


def metric(port, name):
    _, b = request(port, "GET", "/metrics")
    m = re.search(r"^%s (\S+)$" % re.escape(name), b.decode(), re.M)
    return float(m.group(1)) if m else None


def error_summary(errors):
    """Errors counted by kind and the start of what the server answered (its status and
    error message), so that unexpected answers can be told apart."""
    out = {}
    for _, kind, what in errors:
        m = re.search(r'"message":\s*"([^"]{0,90})', what)
        key = "%s: %s" % (kind, (what[:11] + " " + m.group(1)) if m else what[:100])
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def main():
    a = parse_args()
    if not os.path.isfile(a.model):
        sys.exit("no model at %s: run scripts/fetch-model.sh or pass --model" % a.model)
    cmd = ["nice", "-n", "19", a.bin, "serve", "-m", a.model, "--host", "127.0.0.1",
           "--port", "0", "--metrics", "--parallel", str(a.parallel), "-t", str(a.threads),
           "--queue", "64", "-n", "32", "--timeout", "120", "--body-timeout", "5",
           "--write-timeout", "10",
           "--embeddings", "--pooling", "last"]
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    for line in server.stderr:
        sys.stderr.write(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "model loaded" in line:
            break
    if port is None:
        server.kill()
        sys.exit("the server did not start")
    threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
    stats = Stats()
    t0 = time.time()
    stop_at = t0 + a.minutes * 60
    threads = [threading.Thread(target=client, args=(i, port, stop_at, stats, a.seed))
               for i in range(a.clients)]
    threads.append(threading.Thread(target=health_poller, args=(port, stop_at, stats)))
    rss_thread = threading.Thread(target=rss_poller, args=(server.pid, t0, stop_at, stats, a.sample_every),
                                  daemon=True)
    rss_thread.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Leaked slots: busy slots or queued requests once every client has gone (after the
    # engine has had time to notice the last disconnects).
    leaked = None
    for _ in range(60):
        busy, queued = metric(port, "ggrs_busy_slots"), metric(port, "ggrs_queue_length")
        leaked = int((busy or 0) + (queued or 0))
        if leaked == 0:
            break
        time.sleep(1)
    _, slots = request(port, "GET", "/slots")
    busy_slots = [s["id"] for s in json.loads(slots) if s["is_processing"]]
    final_rss = (rss_mib(server.pid), rss_mib(server.pid, "RssAnon"))
    kv_cells = metric(port, "ggrs_kv_cells_used")
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
    h = sorted(stats.health)
    q = lambda p: h[min(len(h) - 1, int(p * len(h)))] * 1000 if h else None  # noqa: E731
    report = {
        "minutes": a.minutes, "clients": a.clients, "model": a.model,
        "requests": sum(v for (k, s), v in stats.counts.items() if k != "health"),
        "by_kind_status": {"%s %s" % k: v for k, v in sorted(stats.counts.items(), key=str)},
        "errors": len(stats.errors), "first_errors": stats.errors[:20],
        "errors_by_kind_and_answer": error_summary(stats.errors),
        "health_polls": len(h), "health_ms_median": q(0.5), "health_ms_p99": q(0.99),
        "health_ms_max": h[-1] * 1000 if h else None,
        "rss_anon_mib_load_over_time": stats.rss + [
            (round(time.time() - t0), round(final_rss[0], 1), round(final_rss[1], 1),
             round(os.getloadavg()[0], 2))],
        "leaked_slots": leaked, "busy_slots_at_end": busy_slots,
        "kv_cells_used_at_end": kv_cells,
    }
    out = json.dumps(report, indent=1)
    print(out)
    if a.json:
        with open(a.json, "w") as f:
            f.write(out)
    sys.exit(1 if stats.errors or leaked else 0)


if __name__ == "__main__":
    main()
