"""Tool calling from Python, as llama-cpp-python takes it: `tools=` and `tool_choice=` in
`create_chat_completion`, on the tiny random-weight model with a Hermes-style template
(`<tool_call>` blocks, as Qwen2.5's) and with ChatML (no tools in the template: the
generic JSON format). Random weights call no tool by themselves: every call below parses
only because `required` or a named function forces it with a grammar."""

import json

import pytest

import ggrs

HERMES = """{%- if tools %}<|im_start|>system
<tools>{% for t in tools %}
{{ t | tojson }}{% endfor %}
</tools><|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == "assistant" and m.tool_calls %}<|im_start|>assistant
{%- for c in m.tool_calls %}
<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif m.role == "tool" %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Adds two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "echo",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "maxLength": 8}},
                "required": ["text"],
                "additionalProperties": False,
            },
        },
    },
]
MSGS = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module", params=["hermes", "chatml"])
def model(request, tiny_llama_path):
    fmt = HERMES if request.param == "hermes" else "chatml"
    with ggrs.Model(tiny_llama_path, n_ctx=2048, n_threads=2, chat_format=fmt) as m:
        yield m


def check_call(call):
    assert call["type"] == "function"
    assert call["id"]
    args = json.loads(call["function"]["arguments"])
    if call["function"]["name"] == "add":
        assert set(args) == {"a", "b"} and all(isinstance(args[k], int) for k in "ab"), args
        # Integers are bounded as llama.cpp bounds them (16 digits).
        assert all(abs(args[k]) < 2**53 for k in "ab")
    else:
        assert call["function"]["name"] == "echo"
        assert set(args) == {"text"} and len(args["text"]) <= 8, args
    return call["function"]["name"]


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "echo"}}]
)
def test_forced_calls_whole_and_streamed(model, choice):
    r = model.create_chat_completion(
        MSGS, tools=TOOLS, tool_choice=choice, max_tokens=200, temperature=0.8, seed=3
    )
    ch = r["choices"][0]
    assert ch["finish_reason"] == "tool_calls", ch
    msg = ch["message"]
    assert msg["content"] is None
    (call,) = msg["tool_calls"]
    name = check_call(call)
    if isinstance(choice, dict):
        assert name == "echo"
    # Streamed with the same seed: the first delta names the call (empty arguments), the
    # next ones carry the arguments in pieces; joined, they are the whole reply's.
    chunks = list(
        model.create_chat_completion(
            MSGS, tools=TOOLS, tool_choice=choice, max_tokens=200, temperature=0.8, seed=3,
            stream=True,
        )
    )
    deltas = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"] and c["choices"][0]["delta"].get("tool_calls")
    ]
    first, rest = deltas[0], deltas[1:]
    assert first["index"] == 0 and first["type"] == "function"
    assert first["function"] == {"name": call["function"]["name"], "arguments": ""}
    assert rest and all("id" not in d and set(d["function"]) == {"arguments"} for d in rest)
    assert "".join(d["function"]["arguments"] for d in rest) == call["function"]["arguments"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    for c in chunks:
        content = c["choices"][0]["delta"].get("content") if c["choices"] else None
        assert not content or "{" not in content, c


def test_history_with_calls_and_results_renders(model):
    msgs = MSGS + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]
    prompt = model.apply_chat_template(msgs, tools=TOOLS)
    # The call (its arguments) and the result are in the prompt, in either format.
    assert '"a":' in prompt.replace('"a": ', '"a":') and "tool_response" in prompt
    r = model.create_chat_completion(msgs, tools=TOOLS, tool_choice="none", max_tokens=4)
    assert r["choices"][0]["message"].get("tool_calls") is None


def test_bad_tool_arguments_are_refused(model):
    for kwargs in (
        {"tools": TOOLS, "tool_choice": "sometimes"},
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        {"tools": [{"type": "function", "function": {"description": "no name"}}]},
        {"tools": {"not": "a list"}},
        {"functions": [{"name": "f"}]},
    ):
        with pytest.raises(ggrs.errors.BadArgumentError):
            model.create_chat_completion(MSGS, max_tokens=2, **kwargs)
