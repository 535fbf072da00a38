"""Constrained output from Python, as llama-cpp-python takes it: `grammar=` (GBNF text or a
LlamaGrammar) and `response_format=` (json_object, with or without a schema, and
json_schema) on the tiny random-weight model. Random weights would not write JSON by
themselves: every output below is valid only because the constraint masks the tokens."""

import json

import pytest

import ggrs

MSGS = [{"role": "user", "content": "Answer."}]
SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"enum": ["yes", "no"]},
        "score": {"type": "integer", "minimum": 0, "maximum": 9},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2},
    },
    "required": ["answer", "score", "tags"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def model(tiny_llama_path):
    with ggrs.Model(tiny_llama_path, n_ctx=512, n_threads=2, chat_format="chatml") as m:
        yield m


def check(doc):
    assert set(doc) == {"answer", "score", "tags"}, doc
    assert doc["answer"] in ("yes", "no")
    assert 0 <= doc["score"] <= 9
    assert len(doc["tags"]) <= 2 and all(len(t) <= 6 for t in doc["tags"])


def test_gbnf_grammar_in_chat_and_completion(model):
    g = 'root ::= ("yes" | "no") "!"'
    r = model.create_chat_completion(MSGS, grammar=g, max_tokens=10, temperature=0)
    assert r["choices"][0]["message"]["content"] in ("yes!", "no!")
    assert r["choices"][0]["finish_reason"] == "stop"
    # Sampled too, and through create_completion.
    for seed in range(3):
        r = model.create_completion("Q: ", grammar=g, max_tokens=10, temperature=1.0, seed=seed)
        assert r["choices"][0]["text"] in ("yes!", "no!")


def test_llama_cpp_python_grammar_object(model):
    class LlamaGrammar:  # llama-cpp-python's keeps the GBNF text in `_grammar`
        _grammar = 'root ::= "ok"'

    r = model.create_chat_completion(MSGS, grammar=LlamaGrammar(), max_tokens=5, temperature=0)
    assert r["choices"][0]["message"]["content"] == "ok"


@pytest.mark.parametrize("fmt", [
    {"type": "json_object", "schema": SCHEMA},
    {"type": "json_schema", "json_schema": {"name": "a", "strict": True, "schema": SCHEMA}},
])
def test_response_format_schema(model, fmt):
    r = model.create_chat_completion(MSGS, response_format=fmt, max_tokens=80, temperature=0)
    assert r["choices"][0]["finish_reason"] == "stop"
    text = r["choices"][0]["message"]["content"]
    check(json.loads(text))
    # Streamed, the same text; sampled, still valid.
    chunks = model.create_chat_completion(
        MSGS, response_format=fmt, max_tokens=80, temperature=0, stream=True)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == text
    r = model.create_chat_completion(
        MSGS, response_format=fmt, max_tokens=80, temperature=0.9, seed=7)
    check(json.loads(r["choices"][0]["message"]["content"]))


def test_json_object_without_schema(model):
    r = model.create_chat_completion(
        MSGS, response_format={"type": "json_object"}, max_tokens=40, temperature=0)
    text = r["choices"][0]["message"]["content"]
    assert text.startswith("{")
    if r["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict)
    # {"type": "text"} constrains nothing.
    r = model.create_chat_completion(
        MSGS, response_format={"type": "text"}, max_tokens=3, temperature=0)
    assert r["choices"][0]["message"]["content"] is not None


def test_generate_takes_a_schema_directly(model):
    g = model.generate("x", json_schema={"enum": ["alpha", "beta"]}, max_tokens=8, temperature=0)
    assert json.loads(g.text) in ("alpha", "beta")
    g = model.generate("x", json_schema='{"const": 42}', max_tokens=8, temperature=0)
    assert g.text == "42"


def test_bad_constraints_are_refused_with_the_reason(model):
    with pytest.raises(ggrs.BadArgumentError, match="grammar"):
        model.create_chat_completion(MSGS, grammar="root ::= this is (not valid GBNF")
    with pytest.raises(ggrs.BadArgumentError, match="schema"):
        model.create_chat_completion(
            MSGS, response_format={"type": "json_object", "schema": {"type": "hiccup"}})
    with pytest.raises(ggrs.BadArgumentError, match="not both"):
        model.create_chat_completion(
            MSGS, grammar='root ::= "a"', response_format={"type": "json_object"})
    with pytest.raises(ggrs.BadArgumentError, match="response_format"):
        model.create_chat_completion(MSGS, response_format={"type": "sound"})
    with pytest.raises(ggrs.BadArgumentError, match="JSON"):
        model.generate("x", json_schema="{not json")
