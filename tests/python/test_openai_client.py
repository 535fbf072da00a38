"""The official `openai` Python client against a running server (GGRS_SERVER_URL).

Greedy requests (temperature 0) send `cache_prompt: false` so that two requests with the same
prompt compute the same logits: on F16 weights a reused prompt prefix may change the last bits.
"""

import math

import openai
import pytest

PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Tell me a short story about a robot."},
]
NO_CACHE = {"cache_prompt": False}


@pytest.fixture(scope="module")
def client(base_url, api_key):
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key or "no-key", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client):
    models = client.models.list().data
    assert models, "GET /v1/models lists no model"
    return models[0].id


def check_usage(usage, max_tokens):
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert 0 < usage.completion_tokens <= max_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def greedy_chat(client, model, **kw):
    args = dict(model=model, messages=MESSAGES, max_tokens=24, temperature=0, extra_body=NO_CACHE)
    args.update(kw)
    return client.chat.completions.create(**args)


def greedy_completion(client, model, **kw):
    args = dict(model=model, prompt=PROMPT, max_tokens=24, temperature=0, extra_body=NO_CACHE)
    args.update(kw)
    return client.completions.create(**args)


def test_models_list(client, model):
    assert isinstance(model, str) and model


def test_chat(client, model):
    res = greedy_chat(client, model)
    assert res.object == "chat.completion"
    assert len(res.choices) == 1
    choice = res.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    check_usage(res.usage, 24)
    if choice.finish_reason == "length":
        assert res.usage.completion_tokens == 24


def test_completion(client, model):
    res = greedy_completion(client, model)
    assert res.object == "text_completion"
    assert len(res.choices) == 1
    assert isinstance(res.choices[0].text, str) and res.choices[0].text
    assert res.choices[0].finish_reason in ("stop", "length")
    check_usage(res.usage, 24)


def test_greedy_is_deterministic(client, model):
    a = greedy_completion(client, model).choices[0].text
    b = greedy_completion(client, model).choices[0].text
    assert a == b


def test_chat_stream_equals_non_stream(client, model):
    full = greedy_chat(client, model)
    stream = greedy_chat(client, model, stream=True, stream_options={"include_usage": True})
    pieces, finish, usage, chunks = [], None, None, 0
    for chunk in stream:
        chunks += 1
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    assert chunks > 2, "the reply came in one piece: not streamed"
    assert "".join(pieces) == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage is not None, "stream_options.include_usage sent no usage chunk"
    assert usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens


def test_completion_stream_equals_non_stream(client, model):
    full = greedy_completion(client, model)
    stream = greedy_completion(client, model, stream=True, stream_options={"include_usage": True})
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.text or "")
            if choice.finish_reason:
                finish = choice.finish_reason
    assert "".join(pieces) == full.choices[0].text
    assert finish == full.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == full.usage.completion_tokens


def test_chat_logprobs(client, model):
    res = greedy_chat(client, model, logprobs=True, top_logprobs=3)
    choice = res.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    entries = choice.logprobs.content
    assert len(entries) == res.usage.completion_tokens
    for entry in entries:
        assert isinstance(entry.token, str)
        assert entry.logprob <= 0 and math.isfinite(entry.logprob)
        assert len(entry.top_logprobs) == 3
        tops = [t.logprob for t in entry.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        # Greedy: the chosen token is the most likely one.
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-5)
    # The tokens' bytes spell the reply.
    if all(e.bytes is not None for e in entries):
        text = b"".join(bytes(e.bytes) for e in entries)
        assert text.decode("utf-8", errors="replace") == choice.message.content


def test_completion_logprobs(client, model):
    res = greedy_completion(client, model, logprobs=3)
    lp = res.choices[0].logprobs
    assert lp is not None
    n = res.usage.completion_tokens
    if lp.tokens is not None:
        # OpenAI's legacy format: parallel lists, top_logprobs as {token: logprob}.
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
        rows = [(t, lp_, top) for t, lp_, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)]
    else:
        # llama-server answers /v1/completions with the chat format: logprobs.content[].
        content = (lp.model_extra or {}).get("content")
        assert content is not None, f"logprobs in neither OpenAI nor llama-server format: {lp}"
        assert len(content) == n
        rows = [(e["token"], e["logprob"], {t["token"]: t["logprob"] for t in e["top_logprobs"]}) for e in content]
    for token, logprob, top in rows:
        assert logprob <= 0 and math.isfinite(logprob)
        assert len(top) == 3
        assert max(top.values()) == pytest.approx(logprob, abs=1e-5)
        assert top[token] == pytest.approx(logprob, abs=1e-5)
    assert "".join(t for t, _, _ in rows) == res.choices[0].text


def test_n_2(client, model):
    res = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=16, temperature=1.0, seed=7, n=2
    )
    assert sorted(c.index for c in res.choices) == [0, 1]
    for choice in res.choices:
        assert isinstance(choice.message.content, str)
        assert choice.finish_reason in ("stop", "length")
    assert 0 < res.usage.completion_tokens <= 32


def test_n_2_completions_greedy_agree(client, model):
    res = greedy_completion(client, model, n=2)
    assert sorted(c.index for c in res.choices) == [0, 1]
    assert res.choices[0].text == res.choices[1].text == greedy_completion(client, model).choices[0].text


def stop_string_from(text):
    """A short substring from the middle of `text` and the text before its first occurrence."""
    middle = len(text) // 2
    stop = text[middle : middle + 3]
    assert stop, f"reply too short to pick a stop string: {text!r}"
    return stop, text[: text.index(stop)]


def test_stop_string(client, model):
    full = greedy_completion(client, model, max_tokens=32)
    stop, expected = stop_string_from(full.choices[0].text)
    res = greedy_completion(client, model, max_tokens=32, stop=[stop])
    assert res.choices[0].text == expected
    assert res.choices[0].finish_reason == "stop"


def test_stop_string_streamed(client, model):
    full = greedy_chat(client, model, max_tokens=32)
    stop, expected = stop_string_from(full.choices[0].message.content)
    stream = greedy_chat(client, model, max_tokens=32, stop=stop, stream=True)
    pieces, finish = [], None
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            finish = choice.finish_reason or finish
    assert "".join(pieces) == expected
    assert finish == "stop"


def test_cached_tokens_reported(client, model):
    messages = [{"role": "user", "content": "Count from one to twenty: one, two, three, four, five, six"}]
    first = client.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0)
    second = client.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0)
    for res in (first, second):
        details = res.usage.prompt_tokens_details
        assert details is not None and isinstance(details.cached_tokens, int)
        assert 0 <= details.cached_tokens <= res.usage.prompt_tokens
    assert second.usage.prompt_tokens_details.cached_tokens > 0


@pytest.mark.ggrs_only
def test_unsupported_field_is_bad_request(client, model):
    # The legacy `functions` field (tools replaced it) is refused by name, not ignored.
    functions = [{"name": "f", "parameters": {"type": "object"}}]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=4, extra_body={"functions": functions}
        )
    assert "functions" in str(err.value)
