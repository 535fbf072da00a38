"""Agent clients against a running server (GGRS_SERVER_URL): tool calls, structured outputs
and the Anthropic Messages and OpenAI Responses APIs, through the official `openai` and
`anthropic` packages.

The test server runs the tiny random-weight model with the ChatML format, which knows no
tools: tool calls use the generic JSON format, always under a grammar, so even this model
writes calls that parse and validate. Random weights say nothing about *which* answer is
right; the tests check what a client relies on: shapes, ids, JSON that validates.
"""

import json
from typing import Literal

import anthropic
import openai
import pydantic
import pytest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]

# The prompt of a request with tools is long on the tiny model's llama-spm vocabulary (two
# tools in the generic format: ~500 tokens), so the test server gives each slot 2048 tokens
# (scripts/test-python.sh): with 512 a forced call was cut by the full context.


@pytest.fixture(scope="module")
def client(base_url, api_key):
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key or "no-key", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def claude(base_url, api_key):
    return anthropic.Anthropic(base_url=base_url, api_key=api_key or "no-key", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def check_weather_args(arguments):
    args = json.loads(arguments)
    assert set(args) == {"city", "unit"}, args
    assert isinstance(args["city"], str) and len(args["city"]) <= 20
    assert args["unit"] in ("celsius", "fahrenheit")


def test_tool_choice_required(client, model):
    res = client.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER, ADD], tool_choice="required",
        max_tokens=120, temperature=0,
    )
    choice = res.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls and len(calls) == 1
    call = calls[0]
    assert call.type == "function" and call.id
    assert call.function.name in ("get_weather", "add")
    if call.function.name == "get_weather":
        check_weather_args(call.function.arguments)
    else:
        assert set(json.loads(call.function.arguments)) == {"a", "b"}


def test_named_tool_choice_streamed(client, model):
    stream = client.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER, ADD], stream=True, max_tokens=120, seed=5,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    calls = {}
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        for tc in c.delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = entry["id"] or tc.id
            entry["name"] += tc.function.name or ""
            entry["arguments"] += tc.function.arguments or ""
        finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert list(calls) == [0]
    assert calls[0]["name"] == "get_weather" and calls[0]["id"]
    check_weather_args(calls[0]["arguments"])


def test_tool_results_go_back_to_the_model(client, model):
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    ]
    res = client.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER], tool_choice="auto", max_tokens=60,
        temperature=0,
    )
    choice = res.choices[0]
    # Either a reply or another call; both must come out whole.
    if choice.finish_reason == "tool_calls":
        check_weather_args(choice.message.tool_calls[0].function.arguments)
    else:
        assert choice.message.tool_calls is None
        assert isinstance(choice.message.content, str)


def test_parse_with_pydantic(client, model):
    class Answer(pydantic.BaseModel):
        city: str = pydantic.Field(max_length=12)
        sunny: bool
        unit: Literal["celsius", "fahrenheit"]

    res = client.beta.chat.completions.parse(
        model=model, messages=ASK, response_format=Answer, max_tokens=80, temperature=0,
    )
    msg = res.choices[0].message
    # The schema is strict (pydantic's): within its tokens, the output parses.
    assert res.choices[0].finish_reason == "stop", msg.content
    assert isinstance(msg.parsed, Answer)


def test_anthropic_messages_and_tools(claude, model):
    # anthropic 2.x's Messages.create has no sampling arguments (temperature, top_p, top_k
    # are gone from its signature); the API field still exists and goes in extra_body.
    msg = claude.messages.create(
        model=model, max_tokens=40, system="Be brief.", extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "Hello"}],
    )
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.content[0].type == "text"
    assert msg.usage.input_tokens > 0 and 0 < msg.usage.output_tokens <= 40
    tool = {"name": "get_weather", "description": "Weather",
            "input_schema": WEATHER["function"]["parameters"]}
    msg = claude.messages.create(
        model=model, max_tokens=120, tools=[tool], tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
    )
    assert msg.stop_reason == "tool_use"
    use = [b for b in msg.content if b.type == "tool_use"]
    assert len(use) == 1 and use[0].name == "get_weather" and use[0].id
    check_weather_args(json.dumps(use[0].input))
    # The result goes back as a tool_result block.
    follow = claude.messages.create(
        model=model, max_tokens=20, tools=[tool],
        messages=[{"role": "user", "content": "Weather in Oslo?"},
                  {"role": "assistant", "content": msg.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use[0].id,
                                                "content": "12 degrees"}]}],
    )
    assert follow.content
    count = claude.messages.count_tokens(
        model=model, messages=[{"role": "user", "content": "Hello there"}])
    assert count.input_tokens > 0


def test_anthropic_stream(claude, model):
    text = ""
    with claude.messages.stream(
        model=model, max_tokens=16, messages=[{"role": "user", "content": "Hi"}],
        stop_sequences=["zzzz"],
    ) as stream:
        for t in stream.text_stream:
            text += t
        final = stream.get_final_message()
    assert final.content[0].text == text
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0


def test_responses_api(client, model):
    res = client.responses.create(model=model, input="Say hi", instructions="Be brief.",
                                  max_output_tokens=16, temperature=0)
    assert res.object == "response"
    assert res.status in ("completed", "incomplete")
    assert isinstance(res.output_text, str)
    tool = {"type": "function", "name": "get_weather",
            "parameters": WEATHER["function"]["parameters"]}
    res = client.responses.create(model=model, input="Weather in Rome?", tools=[tool],
                                  tool_choice="required", max_output_tokens=120)
    calls = [o for o in res.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    check_weather_args(calls[0].arguments)
    # A stream cut by max_output_tokens ends as OpenAI's does: `response.incomplete` (status
    # "incomplete", reason max_output_tokens) with the output so far, not `response.completed`
    # (the SDK's get_final_response() wants `response.completed` and raises on it, against
    # OpenAI too: openai-python PR #3538).
    text = ""
    events = []
    with client.responses.stream(model=model, input="Hello", max_output_tokens=12) as stream:
        for ev in stream:
            events.append(ev)
            if ev.type == "response.output_text.delta":
                text += ev.delta
    kinds = [ev.type for ev in events]
    assert kinds[0] == "response.created" and "response.output_text.delta" in kinds
    last = events[-1]
    assert last.type == "response.incomplete", kinds
    assert last.response.status == "incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.output_text == text
    assert last.response.usage.output_tokens == 12
    # A stream that ends by itself (a schema the grammar closes) completes, and the SDK's
    # helper returns the final response, parsed.
    fmt = {"type": "json_schema", "name": "answer", "strict": True,
           "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}},
                      "required": ["ok"], "additionalProperties": False}}
    text = ""
    with client.responses.stream(model=model, input="Is it ok?", max_output_tokens=40,
                                 text={"format": fmt}) as stream:
        for ev in stream:
            if ev.type == "response.output_text.delta":
                text += ev.delta
        final = stream.get_final_response()
    assert final.status == "completed"
    assert final.output_text == text
    assert json.loads(text)["ok"] in (True, False)
