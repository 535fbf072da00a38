"""The Python API on the tiny LLaMA: tokens, generation and streaming, OpenAI-shaped
responses, NumPy logits, perplexity, exceptions, threads and Ctrl-C."""

from __future__ import annotations

import json
import math
import re
import subprocess
import threading

import numpy as np
import pytest

import ggrs

from conftest import assert_logits_equal_cli


@pytest.fixture(scope="module")
def model(tiny_llama_path):
    with ggrs.Model(tiny_llama_path, n_ctx=256, n_threads=2, chat_format="chatml") as m:
        yield m


def test_metadata_and_sizes(model):
    assert model.arch == "llama"
    assert model.n_vocab == 32000
    assert model.n_ctx == 256
    assert model.metadata["general.architecture"] == "llama"
    assert isinstance(model.n_ctx_train, int) and model.n_ctx_train > 0
    assert model.token_bos() == 1
    assert "ggrs.Model(" in repr(model)


def test_tokenize_round_trip(model):
    ids = model.tokenize("Hello world, héllo!")
    assert ids[0] == model.token_bos()
    assert model.tokenize(b"Hello world, h\xc3\xa9llo!") == ids
    assert model.tokenize("Hello", add_bos=False)[0] != model.token_bos()
    assert model.detokenize(ids[1:]) == "Hello world, héllo!"
    assert b"".join(model.token_to_piece(t) for t in ids[1:]).decode() == " Hello world, héllo!"


# Greedy and seeded sampling with every sampler: speculation must not change either.
SPEC_KWARGS = (
    dict(max_tokens=24, temperature=0, logprobs=2, ignore_eos=True),
    dict(max_tokens=24, temperature=0.9, top_k=40, top_p=0.9, min_p=0.02,
         repeat_penalty=1.1, seed=7, logprobs=2, ignore_eos=True),
)


def test_speculative_ngram_keeps_the_output(tiny_llama_path):
    """Prompt-lookup speculation gives the tokens and log-probabilities of plain decoding,
    greedy and seeded."""
    prompt = "def add(a, b):\n    return a + b\n\n" * 6
    for kw in SPEC_KWARGS:
        with ggrs.Model(tiny_llama_path, n_ctx=512, n_threads=1) as plain:
            a = plain.generate(prompt, **kw)
        with ggrs.Model(tiny_llama_path, n_ctx=512, n_threads=1, speculative="ngram",
                        draft_max=8) as fast:
            b = fast.generate(prompt, **kw)
        assert a.tokens == b.tokens
        assert a.logprobs == b.logprobs and a.top_logprobs == b.top_logprobs
        assert a.timings["draft_tokens"] == 0
        assert b.timings["draft_accepted"] <= b.timings["draft_tokens"]
    with pytest.raises(ggrs.BadArgumentError):
        ggrs.Model(tiny_llama_path, speculative="medusa")


def test_draft_model_keeps_the_output(tiny_llama_path, ref_dir):
    """A draft model (the target itself, and another tiny model with its vocabulary) gives
    the tokens and log-probabilities of plain decoding, greedy and seeded, and drafts."""
    prompt = "Once upon a time there was a little"
    other = str(ref_dir / "tiny" / "tiny-llama-yarn-f16.gguf")
    for kw in SPEC_KWARGS:
        with ggrs.Model(tiny_llama_path, n_ctx=256, n_threads=1) as plain:
            a = plain.generate(prompt, **kw)
        for draft in (tiny_llama_path, other):
            # Random weights are never confident: draft whatever the draft model likes best.
            with ggrs.Model(tiny_llama_path, n_ctx=256, n_threads=1, draft_model=draft,
                            draft_max=4, draft_p_min=0.0) as fast:
                b = fast.generate(prompt, **kw)
            assert a.tokens == b.tokens, draft
            assert a.logprobs == b.logprobs and a.top_logprobs == b.top_logprobs, draft
            assert b.timings["draft_tokens"] > 0, draft
            assert b.timings["draft_accepted"] <= b.timings["draft_tokens"]
            if draft == tiny_llama_path and kw["temperature"] == 0:
                # The target drafting for itself, greedy: its drafts are its own tokens.
                assert b.timings["draft_accepted"] > 0
    with pytest.raises(ggrs.BadArgumentError):
        ggrs.Model(tiny_llama_path, speculative="draft")
    with pytest.raises(ggrs.BadArgumentError, match="vocabulary"):
        ggrs.Model(tiny_llama_path, draft_model=str(ref_dir / "tiny" / "tiny-qwen3-f16.gguf"))


def test_stream_equals_generate(model):
    kw = dict(max_tokens=24, temperature=0.9, seed=42, logprobs=3, ignore_eos=True)
    whole = model.generate("Once upon a time", **kw)
    stream = model.generate("Once upon a time", stream=True, **kw)
    pieces = list(stream)
    result = stream.result
    assert result is not None
    assert "".join(p.text for p in pieces) == whole.text == result.text
    assert [p.token for p in pieces if p.token is not None] == whole.tokens == result.tokens
    assert [p.logprob for p in pieces if p.token is not None] == whole.logprobs
    assert [p.top_logprobs for p in pieces if p.token is not None] == whole.top_logprobs
    assert len(whole.tokens) == 24 and whole.stop_reason == "length"
    assert whole.finish_reason == "length"
    assert all(len(t) == 3 for t in whole.top_logprobs)
    assert whole.timings["generated_tokens"] == 24
    # The same seed gives the same text; another seed (almost surely) another.
    assert model.generate("Once upon a time", **kw).tokens == whole.tokens
    other = model.generate("Once upon a time", **{**kw, "seed": 7})
    assert other.tokens != whole.tokens


def test_prompt_cache_reuses_the_shared_prefix(model):
    model.reset()
    first = model.generate("The capital of France is", max_tokens=4, temperature=0)
    assert first.cached_tokens == 0
    again = model.generate("The capital of France is", max_tokens=4, temperature=0)
    assert again.cached_tokens == len(again.prompt_tokens) - 1
    assert again.tokens == first.tokens
    fresh = ggrs.Model(model.model_path, n_ctx=256, n_threads=2, cache_prompt=False)
    assert fresh.generate("The capital of France is", max_tokens=4, temperature=0).tokens == first.tokens
    assert fresh.generate("The capital of France is", max_tokens=4, temperature=0).cached_tokens == 0


def test_stop_strings(model):
    whole = model.generate("Once upon a time", max_tokens=24, temperature=0, ignore_eos=True)
    # A stop string from the middle of the greedy text cuts it there.
    stop = whole.text[len(whole.text) // 2:][:3]
    cut = model.generate("Once upon a time", max_tokens=24, temperature=0, ignore_eos=True, stop=stop)
    assert cut.stop_reason == "stop" and cut.stop_string == stop
    assert cut.text == whole.text[: whole.text.index(stop)]
    assert cut.finish_reason == "stop"


def test_logits_are_numpy_and_follow_eval(model):
    model.reset()
    ids = model.tokenize("The capital of France is")
    model.eval(ids)
    assert model.n_tokens == len(ids)
    a = model.logits()
    assert a.shape == (model.n_vocab,) and a.dtype == np.float32
    nxt = int(np.argmax(a))
    model.eval([nxt])
    b = model.logits()
    assert model.n_tokens == len(ids) + 1
    assert not np.array_equal(a, b)
    # The array is the caller's: the next step does not change it.
    before = a.copy()
    model.eval([int(np.argmax(b))])
    assert np.array_equal(a, before)
    # A greedy loop by hand equals generate's greedy run.
    model.reset()
    model.eval(ids)
    by_hand = []
    for _ in range(8):
        t = int(np.argmax(model.logits()))
        by_hand.append(t)
        model.eval([t])
    out = ggrs.Model(model.model_path, n_ctx=256, n_threads=2).generate(
        ids, max_tokens=8, temperature=0, ignore_eos=True)
    assert out.tokens == by_hand


def test_logits_all_needs_the_option(model, tiny_llama_path):
    with pytest.raises(ggrs.BadArgumentError, match="logits_all"):
        model.eval([1, 2, 3], all_logits=True)
    m = ggrs.Model(tiny_llama_path, n_ctx=64, n_threads=1, logits_all=True)
    m.eval([1, 450, 7483], all_logits=True)
    assert m.logits(all=True).shape == (3, m.n_vocab)


def test_numpy_logits_equal_the_cli_top_logprobs(tiny_llama_path, ggrs_bin):
    assert_logits_equal_cli(tiny_llama_path, ggrs_bin, "The capital of France is")


def test_create_completion_shape(model):
    r = model.create_completion("Once upon a time", max_tokens=8, temperature=0, logprobs=2)
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-")
    choice = r["choices"][0]
    assert choice["finish_reason"] in ("stop", "length")
    assert r["usage"]["completion_tokens"] <= 8
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert "".join(lp["tokens"]).startswith(choice["text"][:1])
    chunks = list(model.create_completion("Once upon a time", max_tokens=8, temperature=0, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == choice["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == choice["finish_reason"]
    assert model("Once upon a time", max_tokens=8, temperature=0)["choices"][0]["text"] == choice["text"]


def test_create_chat_completion_shape(model):
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Say hi."}]},
    ]
    r = model.create_chat_completion(messages, max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
    assert r["object"] == "chat.completion"
    msg = r["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str)
    content = r["choices"][0]["logprobs"]["content"]
    assert all(len(c["top_logprobs"]) == 2 for c in content)
    text = model.apply_chat_template(messages)
    assert text.startswith("<|im_start|>system\nYou are terse.<|im_end|>")
    assert text.endswith("<|im_start|>assistant\n")
    chunks = list(model.create_chat_completion(
        messages, max_tokens=8, temperature=0, stream=True, stream_options={"include_usage": True}))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert streamed == msg["content"]
    assert chunks[-1]["usage"]["completion_tokens"] == r["usage"]["completion_tokens"]
    assert chunks[-2]["choices"][0]["finish_reason"] == r["choices"][0]["finish_reason"]


def test_unsupported_fields_are_refused_by_name(model):
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(ggrs.BadArgumentError, match="tools"):
        model.create_chat_completion(msgs, tools=[{"type": "function"}])
    with pytest.raises(ggrs.BadArgumentError, match="response_format"):
        model.create_chat_completion(msgs, response_format={"type": "json_schema"})
    with pytest.raises(TypeError, match="no_such_field"):
        model.create_completion("hi", no_such_field=1)
    with pytest.raises(ggrs.BadArgumentError, match="image_url"):
        model.create_chat_completion([{"role": "user", "content": [{"type": "image_url"}]}])


def test_errors_are_exceptions(model, tmp_path):
    with pytest.raises(ggrs.FileError) as e:
        ggrs.Model(tmp_path / "missing.gguf")
    assert isinstance(e.value, OSError) and "missing.gguf" in str(e.value)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 40)
    with pytest.raises(ggrs.FileError):
        ggrs.Model(bad)
    with pytest.raises(ggrs.BadArgumentError, match="out of range"):
        model.generate([1, 99999], max_tokens=2)
    with pytest.raises(ggrs.BadArgumentError, match="out of range"):
        model.detokenize([-1])
    with pytest.raises(ggrs.BadArgumentError):
        model.generate("hi", top_p=3.0)
    with pytest.raises(ggrs.BadArgumentError, match="empty"):
        model.generate([])
    with pytest.raises(ggrs.ContextFullError) as e:
        model.generate([1] + [450] * 300, max_tokens=2)
    assert isinstance(e.value, ValueError) and "256" in str(e.value)
    with pytest.raises(ggrs.BadArgumentError, match="kv_type"):
        ggrs.Model(model.model_path, kv_type="q9")
    with pytest.raises(ggrs.BadArgumentError, match="iq4_nl"):
        ggrs.Model(model.model_path, type_k="q4_K")
    with pytest.raises(ggrs.BadArgumentError, match="both f32"):
        ggrs.Model(model.model_path, type_k="f32", type_v=8)
    quant = ggrs.Model(model.model_path, n_ctx=256, type_k="q8_0", type_v=2)  # 2: ggml's q4_0
    assert len(quant.generate("Once", max_tokens=3, temperature=0, ignore_eos=True).tokens) == 3
    with pytest.raises(ggrs.BadArgumentError, match="n_ctx"):
        ggrs.Model(model.model_path, n_ctx=-1)
    with pytest.raises(TypeError):
        ggrs.Model()
    # After every error the model still works.
    assert len(model.generate("Once", max_tokens=3, temperature=0, ignore_eos=True).tokens) == 3
    assert all(issubclass(c, ggrs.GgrsError) for c in (
        ggrs.FileError, ggrs.ModelError, ggrs.ContextFullError, ggrs.BadArgumentError))


def test_closed_model_raises(tiny_llama_path):
    with ggrs.Model(tiny_llama_path, n_ctx=64) as m:
        pass
    with pytest.raises(ggrs.GgrsError, match="closed"):
        m.generate("hi")


def test_threads_share_a_model(model):
    kw = dict(max_tokens=16, temperature=0.7, seed=3, ignore_eos=True)
    prompts = ["Once upon a time", "The capital of France is", "def main():", "1, 2, 3,"]
    model.cache_prompt = False
    try:
        alone = [model.generate(p, **kw).tokens for p in prompts]
        results = {}

        def work(i, p):
            results[i] = model.generate(p, **kw).tokens

        threads = [threading.Thread(target=work, args=(i, p)) for i, p in enumerate(prompts * 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        model.cache_prompt = True
    assert [results[i] for i in range(len(prompts) * 2)] == alone * 2


def test_closing_a_stream_stops_it(model):
    stream = model.generate("Once upon a time", max_tokens=200, temperature=0, ignore_eos=True, stream=True)
    first = [next(stream) for _ in range(3)]
    assert all(p.token is not None for p in first)
    stream.close()
    out = model.generate("Once upon a time", max_tokens=4, temperature=0, ignore_eos=True)
    assert len(out.tokens) == 4


def test_perplexity_equals_the_cli(tiny_llama_path, ggrs_bin, tmp_path):
    text = " ".join(f"The number {i} comes after {i - 1} and before {i + 1}." for i in range(1, 60))
    f = tmp_path / "text.txt"
    f.write_text(text)
    out = subprocess.run(
        [ggrs_bin, "perplexity", "-m", tiny_llama_path, "-f", str(f), "--chunk", "64", "-t", "2"],
        check=True, capture_output=True, text=True,
    ).stdout
    cli = float(re.search(r"PPL = ([0-9.]+)", out).group(1))
    m = ggrs.Model(tiny_llama_path, n_threads=2)
    p = m.perplexity(text, chunk=64)
    assert p.chunks >= 2 and p.tokens_scored > 0
    assert f"{p.value:.4f}" == f"{cli:.4f}"
    assert float(p) == p.value and math.isfinite(p.error)
    with pytest.raises(ggrs.BadArgumentError):
        m.perplexity("too short", chunk=64)
