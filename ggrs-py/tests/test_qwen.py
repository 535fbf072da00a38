"""The real model (Qwen2.5-Coder-0.5B-Instruct q4_0) from Python against the `ggrs` command
line: the same greedy text, the same log-probabilities, its chat template."""

from __future__ import annotations

import signal
import threading
import time
import _thread

import pytest

import ggrs

from conftest import assert_logits_equal_cli, cli_run

PROMPT = "fn fibonacci(n: u64) -> u64 {"


@pytest.fixture(scope="module")
def qwen(qwen_path):
    with ggrs.Model(qwen_path, n_ctx=1024, n_threads=2) as m:
        yield m


def test_generate_equals_ggrs_run(qwen, qwen_path, ggrs_bin):
    cli = cli_run(ggrs_bin, qwen_path, PROMPT, 32)
    out = qwen.generate(PROMPT, max_tokens=32, temperature=0)
    assert out.prompt_tokens == cli["prompt_tokens"]
    assert out.tokens == cli["tokens"]
    assert out.text == cli["text"]


def test_stream_equals_generate(qwen):
    kw = dict(max_tokens=32, temperature=0.8, seed=11, logprobs=2)
    qwen.reset()
    whole = qwen.generate(PROMPT, **kw)
    qwen.reset()
    stream = qwen.generate(PROMPT, stream=True, **kw)
    pieces = list(stream)
    assert "".join(p.text for p in pieces) == whole.text
    assert [p.token for p in pieces if p.token is not None] == [
        t for t in whole.tokens if t not in (151643, 151645)]
    assert stream.result.logprobs == whole.logprobs


def test_numpy_logits_equal_the_cli(qwen_path, ggrs_bin):
    assert_logits_equal_cli(qwen_path, ggrs_bin, "The capital of France is")


def test_chat_uses_the_model_template(qwen):
    messages = [{"role": "user", "content": "What is 2 + 2? Answer with a number."}]
    text = qwen.apply_chat_template(messages)
    assert text == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n<|im_start|>user\nWhat is 2 + 2? Answer with a number."
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    r = qwen.create_chat_completion(messages, temperature=0, max_tokens=16)
    assert "4" in r["choices"][0]["message"]["content"]
    assert r["choices"][0]["finish_reason"] == "stop"
    # A second turn reuses the cached first one.
    messages += [r["choices"][0]["message"], {"role": "user", "content": "And 3 + 3?"}]
    r2 = qwen.create_chat_completion(messages, temperature=0, max_tokens=16)
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] > r["usage"]["prompt_tokens"]
    assert "6" in r2["choices"][0]["message"]["content"]


def test_ctrl_c_stops_a_long_generation(qwen):
    # A generation of up to 1000 tokens (about 6 s here), interrupted 0.5 s in. A process
    # started in the background by a non-interactive shell ignores SIGINT, and then
    # `interrupt_main` does nothing: give this test Python's own handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            qwen.generate(PROMPT, max_tokens=1000, temperature=0, ignore_eos=True)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    elapsed = time.monotonic() - t0
    assert elapsed < 2.0, f"KeyboardInterrupt came {elapsed:.2f} s after the start"
    # The session is free again and works.
    assert len(qwen.generate(PROMPT, max_tokens=4, temperature=0, ignore_eos=True).tokens) == 4
