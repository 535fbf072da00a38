//! Tool calling, reasoning and the Anthropic and Responses endpoints over HTTP: on the tiny
//! random-weight model (whose calls are valid only because the grammar forces them) with a
//! Hermes-style template and with ChatML (the generic JSON format), and one call by the real
//! Qwen2.5-Coder-0.5B through its own template.

use crate::common;

use common::{config, TestServer};
use serde_json::{json, Value};

/// A Hermes-style template (as Qwen2.5's writes tools, calls and results).
const HERMES: &str = r#"{%- if tools %}<|im_start|>system
# Tools
<tools>{% for t in tools %}
{{ t | tojson }}{% endfor %}
</tools>
Call a function as <tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
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
{% endif %}"#;

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather",
         "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12},
                           "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "add",
         "parameters": {"type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"], "additionalProperties": false}}}
    ])
}

/// The arguments validate against the function's schema (checked by hand: the schemas
/// above are small).
fn check_call(call: &Value) -> String {
    assert_eq!(call["type"], "function", "{call}");
    assert!(
        call["id"].as_str().is_some_and(|id| !id.is_empty()),
        "{call}"
    );
    let name = call["function"]["name"].as_str().unwrap().to_string();
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{call}: {e}"));
    let o = args.as_object().unwrap();
    match name.as_str() {
        "get_weather" => {
            assert_eq!(o.len(), 2, "{args}");
            assert!(o["city"].as_str().unwrap().chars().count() <= 12, "{args}");
            assert!(["celsius", "fahrenheit"].contains(&o["unit"].as_str().unwrap()));
        }
        "add" => {
            assert_eq!(o.len(), 2, "{args}");
            // JSON Schema's integers: numbers without a fraction (the grammar may write
            // one with an exponent).
            let int = |v: &Value| v.as_f64().is_some_and(|x| x.fract() == 0.0);
            assert!(int(&o["a"]) && int(&o["b"]), "{args}");
        }
        n => panic!("unknown function {n}"),
    }
    name
}

/// The one call of a streamed chat answer, checked piece by piece as OpenAI streams it:
/// the first delta carries the index, id, type, name and empty arguments, the next ones
/// only argument pieces (more than one); the call never leaks into the content and the
/// answer ends with `tool_calls`. Gives `{"name", "arguments"}` with the pieces joined.
fn streamed_call(events: &[Value]) -> Value {
    let mut first: Option<Value> = None;
    let mut pieces = Vec::new();
    let mut finish = None;
    for e in events {
        let c = &e["choices"][0];
        if let Some(tc) = c["delta"]["tool_calls"].as_array() {
            assert_eq!(tc.len(), 1, "{e}");
            assert_eq!(tc[0]["index"], 0, "one call: {e}");
            if first.is_none() {
                assert!(tc[0]["id"].as_str().is_some_and(|id| !id.is_empty()), "{e}");
                assert_eq!(tc[0]["type"], "function", "{e}");
                assert_eq!(tc[0]["function"]["arguments"], "", "{e}");
                first = Some(tc[0].clone());
            } else {
                assert!(tc[0].get("id").is_none() && tc[0]["function"].get("name").is_none());
                pieces.push(tc[0]["function"]["arguments"].as_str().unwrap().to_string());
            }
        }
        let content = c["delta"]["content"].as_str().unwrap_or("");
        assert!(!content.contains('{'), "the call leaked into content: {e}");
        if c["finish_reason"].is_string() {
            finish = Some(c["finish_reason"].clone());
        }
    }
    assert_eq!(finish, Some(json!("tool_calls")));
    assert!(pieces.len() > 1, "arguments in pieces: {pieces:?}");
    let first = first.expect("a streamed call");
    json!({"name": first["function"]["name"], "arguments": pieces.concat()})
}

fn ask(extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": "Weather in Paris?"}],
                       "tools": tools(), "max_tokens": 120, "seed": 1});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn tiny_server(template: &str) -> TestServer {
    let mut c = config(1);
    c.chat_template = Some(template.into());
    // The generic format describes the tools' schemas in the prompt.
    c.engine.n_ctx = 2048;
    TestServer::start(c)
}

#[test]
fn forced_calls_parse_and_validate_in_both_formats() {
    for template in [HERMES, "chatml"] {
        let s = tiny_server(template);
        for choice in [
            json!("required"),
            json!({"type": "function", "function": {"name": "add"}}),
        ] {
            let a = s.post("/v1/chat/completions", &ask(json!({"tool_choice": choice})));
            assert_eq!(a.status, 200, "{}", a.body);
            let ch = &a.body["choices"][0];
            assert_eq!(ch["finish_reason"], "tool_calls", "{template:.10}: {ch}");
            let calls = ch["message"]["tool_calls"].as_array().unwrap();
            assert_eq!(calls.len(), 1, "{ch}");
            let name = check_call(&calls[0]);
            if choice.is_object() {
                assert_eq!(name, "add");
            }
            // Streamed (same seed): the call comes as `delta.tool_calls`, never as content,
            // its arguments in pieces that join to the whole reply's.
            let b = ask(json!({"tool_choice": choice, "stream": true}));
            let (events, done) = s.stream_all("/v1/chat/completions", &b);
            assert!(done);
            let streamed = streamed_call(&events);
            assert_eq!(streamed, calls[0]["function"], "{template:.10}");
        }
        // The conversation goes on: the call and its result render through the template.
        let mut b = ask(json!({"tool_choice": "auto", "max_tokens": 8}));
        b["messages"] = json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
              "type": "function", "function": {"name": "get_weather",
              "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees"}
        ]);
        let a = s.post("/v1/chat/completions", &b);
        assert_eq!(a.status, 200, "{}", a.body);
        // tool_choice none: no call, the format's text stays text.
        let a = s.post(
            "/v1/chat/completions",
            &ask(json!({"tool_choice": "none", "max_tokens": 8})),
        );
        assert_eq!(a.status, 200, "{}", a.body);
        assert!(a.body["choices"][0]["message"]["tool_calls"].is_null());
        // Errors name the field.
        for (extra, field) in [
            (json!({"tool_choice": "sometimes"}), "tool_choice"),
            (
                json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                "tool_choice",
            ),
            (
                json!({"tool_choice": "required", "response_format": {"type": "json_object"}}),
                "response_format",
            ),
        ] {
            let a = s.post("/v1/chat/completions", &ask(extra.clone()));
            assert_eq!(a.status, 400, "{extra}: {}", a.body);
            assert_eq!(a.body["error"]["param"], field, "{extra}");
        }
    }
}

#[test]
fn anthropic_messages() {
    let s = tiny_server(HERMES);
    let tool = json!({"name": "add", "description": "Adds",
        "input_schema": tools()[1]["function"]["parameters"]});
    let a = s.post(
        "/v1/messages",
        &json!({"model": "x", "max_tokens": 100, "tools": [tool],
                "tool_choice": {"type": "any"}, "system": "Be brief.",
                "messages": [{"role": "user", "content": "1 + 2?"}]}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let m = &a.body;
    assert_eq!(
        (m["type"].as_str(), m["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    assert_eq!(m["stop_reason"], "tool_use", "{m}");
    let use_ = m["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .expect("a tool_use block");
    assert_eq!(use_["name"], "add");
    assert!(use_["input"]["a"].is_number() && use_["input"]["b"].is_number());
    assert!(m["usage"]["input_tokens"].as_u64().unwrap() > 0);
    // The call and its result go back in.
    let a = s.post(
        "/v1/messages",
        &json!({"max_tokens": 5, "tools": [tool], "messages": [
            {"role": "user", "content": "1 + 2?"},
            {"role": "assistant", "content": [use_]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use_["id"],
                                          "content": "3"}]}]}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["stop_reason"], "max_tokens");
    // A stop sequence.
    let a = s.post(
        "/v1/messages",
        &json!({"max_tokens": 30, "temperature": 0,
                "messages": [{"role": "user", "content": "Hi"}]}),
    );
    let text = a.body["content"][0]["text"].as_str().unwrap().to_string();
    let cut = text.char_indices().nth(3).map_or(text.len(), |(i, _)| i);
    if let Some(stop) = text
        .get(cut..)
        .and_then(|t| t.chars().next())
        .map(String::from)
    {
        let a = s.post(
            "/v1/messages",
            &json!({"max_tokens": 30, "stop_sequences": [stop], "temperature": 0,
                    "messages": [{"role": "user", "content": "Hi"}]}),
        );
        assert_eq!(a.body["stop_reason"], "stop_sequence", "{}", a.body);
        assert_eq!(a.body["stop_sequence"], stop);
    }
    // Token counting: the rendered conversation.
    let a = s.post(
        "/v1/messages/count_tokens",
        &json!({"messages": [{"role": "user", "content": "Hi there"}]}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body["input_tokens"].as_u64().unwrap() > 2);
    // Errors in Anthropic's shape.
    let a = s.post("/v1/messages", &json!({"max_tokens": 5}));
    assert_eq!(a.status, 400);
    assert_eq!(a.body["type"], "error");
    assert_eq!(a.body["error"]["type"], "invalid_request_error");
}

/// Earlier reasoning goes back to the template: Anthropic `thinking` blocks and OpenAI
/// `reasoning_content` in the history reach the template as `reasoning_content`
/// (interleaved thinking, as Claude Code sends it).
#[test]
fn earlier_reasoning_reaches_the_template() {
    let s = tiny_server(
        "{% for m in messages %}{{ m.role }}: {% if m.reasoning_content is defined %}<think>\
         {{ m.reasoning_content }}</think>{% endif %}{{ m.content }}\n{% endfor %}",
    );
    let history = |thinking: bool| {
        let mut blocks = vec![json!({"type": "text", "text": "Let me look."})];
        if thinking {
            blocks.insert(
                0,
                json!({"type": "thinking", "signature": "",
                "thinking": "I should check the project structure first."}),
            );
        }
        json!({"messages": [{"role": "user", "content": "Fix the bug"},
                            {"role": "assistant", "content": blocks},
                            {"role": "user", "content": "Go on"}]})
    };
    let count = |body: &Value| {
        let a = s.post("/v1/messages/count_tokens", body);
        assert_eq!(a.status, 200, "{}", a.body);
        a.body["input_tokens"].as_u64().unwrap()
    };
    let (with, without) = (count(&history(true)), count(&history(false)));
    assert!(with > without + 5, "{with} vs {without}");
    // The same through /v1/chat/completions' `reasoning_content`; a wrong type is a 400.
    let msgs = |r: Value| {
        json!({"max_tokens": 1, "messages": [{"role": "user", "content": "Fix the bug"},
            {"role": "assistant", "content": "Let me look.", "reasoning_content": r},
            {"role": "user", "content": "Go on"}]})
    };
    let a = s.post("/v1/chat/completions", &msgs(json!("check the structure")));
    assert_eq!(a.status, 200, "{}", a.body);
    let b = s.post("/v1/chat/completions", &msgs(Value::Null));
    let prompt = |v: &Value| v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt(&a.body) > prompt(&b.body));
    let a = s.post("/v1/chat/completions", &msgs(json!(5)));
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.body["error"]["param"], "messages[1].reasoning_content");
}

/// Reads an Anthropic or Responses stream: (event name, data) pairs.
fn named_events(s: &TestServer, path: &str, body: &Value) -> Vec<(String, Value)> {
    let r = common::agent()
        .post(&s.url(path))
        .header("Content-Type", "application/json")
        .send(body.to_string().as_bytes())
        .expect("POST");
    assert_eq!(r.status().as_u16(), 200);
    let text = r.into_body().read_to_string().expect("read the stream");
    let mut out = Vec::new();
    let mut name = String::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            out.push((name.clone(), serde_json::from_str(d).expect("event JSON")));
        }
    }
    out
}

#[test]
fn anthropic_and_responses_streams() {
    let s = tiny_server(HERMES);
    let ev = named_events(
        &s,
        "/v1/messages",
        &json!({"max_tokens": 6, "stream": true, "messages": [{"role": "user", "content": "Hi"}]}),
    );
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    assert!(names.contains(&"content_block_start") && names.contains(&"message_delta"));
    for (n, d) in &ev {
        assert_eq!(d["type"], n.as_str());
    }
    let delta = &ev[ev.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
    assert_eq!(delta["usage"]["output_tokens"], 6);
    // A forced tool call, streamed as a tool_use block.
    let ev = named_events(
        &s,
        "/v1/messages",
        &json!({"max_tokens": 100, "stream": true, "tool_choice": {"type": "any"},
                "tools": [{"name": "add", "input_schema": tools()[1]["function"]["parameters"]}],
                "messages": [{"role": "user", "content": "1 + 2?"}]}),
    );
    let start = ev
        .iter()
        .find(|(n, d)| n == "content_block_start" && d["content_block"]["type"] == "tool_use")
        .expect("a tool_use block");
    assert_eq!(start.1["content_block"]["name"], "add");
    // Its input in pieces, joined to the whole JSON.
    let pieces: Vec<&str> = ev
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta" && d["index"] == start.1["index"])
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert!(pieces.len() > 1, "{pieces:?}");
    let input: Value = serde_json::from_str(&pieces.concat()).unwrap();
    assert!(input["a"].is_number());

    // Responses: plain, then a forced call, then streamed.
    let a = s.post(
        "/v1/responses",
        &json!({"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 5}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["object"], "response");
    // Ids as OpenAI writes them (clients check the prefix).
    assert!(
        a.body["id"].as_str().unwrap().starts_with("resp_"),
        "{}",
        a.body
    );
    assert_eq!(a.body["status"], "incomplete");
    assert_eq!(a.body["output"][0]["type"], "message");
    assert_eq!(a.body["usage"]["output_tokens"], 5);
    let a = s.post(
        "/v1/responses",
        &json!({"input": [{"role": "user", "content": "1+2?"}], "max_output_tokens": 100,
                "tools": [{"type": "function", "name": "add",
                           "parameters": tools()[1]["function"]["parameters"]}],
                "tool_choice": "required"}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let call = a.body["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["type"] == "function_call")
        .unwrap_or_else(|| panic!("a function call in {}", a.body))
        .clone();
    assert_eq!(call["name"], "add");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["b"].is_number());
    // The same call streamed: `function_call_arguments.delta` pieces join to the `.done`
    // arguments.
    let ev = named_events(
        &s,
        "/v1/responses",
        &json!({"input": [{"role": "user", "content": "1+2?"}], "max_output_tokens": 100,
                "tools": [{"type": "function", "name": "add",
                           "parameters": tools()[1]["function"]["parameters"]}],
                "tool_choice": "required", "stream": true}),
    );
    let deltas: Vec<&str> = ev
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    let done = ev
        .iter()
        .find(|(n, _)| n == "response.function_call_arguments.done")
        .expect("arguments done");
    assert!(deltas.len() > 1, "{deltas:?}");
    assert_eq!(done.1["arguments"], deltas.concat());
    let item = ev
        .iter()
        .find(|(n, d)| n == "response.output_item.done" && d["item"]["type"] == "function_call")
        .expect("the call item");
    assert_eq!(item.1["item"]["arguments"], deltas.concat());
    assert_eq!(item.1["item"]["name"], "add");
    let ev = named_events(
        &s,
        "/v1/responses",
        &json!({"input": "Hi", "max_output_tokens": 6, "stream": true}),
    );
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[0], "response.created");
    assert!(names.contains(&"response.output_text.delta"));
    let (last, data) = ev.last().unwrap();
    assert_eq!(last, "response.incomplete");
    let deltas: String = ev
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(data["response"]["output"][0]["content"][0]["text"], deltas);
    let seq: Vec<u64> = ev
        .iter()
        .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(seq.windows(2).all(|w| w[1] == w[0] + 1));
}

/// Qwen2.5-Coder-0.5B through its own template (Hermes `<tool_call>`): a forced call
/// parses and validates; with `auto` and a question the tool answers, the model calls it.
#[test]
fn qwen_calls_tools_through_its_template() {
    let Some(path) = common::llama::qwen05b("q4_0") else {
        return;
    };
    let mut c = ggrs_server::ServerConfig::new(path);
    c.port = 0;
    c.engine.n_slots = 1;
    c.engine.n_ctx = 2048;
    c.engine.n_threads = 2;
    let s = TestServer::start(c);
    let t0 = std::time::Instant::now();
    for choice in [json!("required"), json!("auto")] {
        let a = s.post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "What is the weather in Paris, in celsius?"}],
                    "tools": tools(), "tool_choice": choice, "max_tokens": 60, "temperature": 0}),
        );
        assert_eq!(a.status, 200, "{}", a.body);
        let ch = &a.body["choices"][0];
        assert_eq!(ch["finish_reason"], "tool_calls", "{choice}: {ch}");
        let calls = ch["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(check_call(&calls[0]), "get_weather", "{ch}");
        let args: Value =
            serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args["city"], "Paris", "{ch}");
    }
    eprintln!("two Qwen tool calls in {:.1} s", t0.elapsed().as_secs_f64());
}

/// A harmony template (GPT-OSS's layout, written small): messages as
/// `<|start|>ROLE<|message|>…<|end|>`, an assistant call in the commentary channel, the
/// reply opened with `<|start|>assistant`.
const HARMONY: &str = r#"{%- if tools %}<|start|>developer<|message|># Tools
namespace functions {
{% for t in tools %}type {{ t.function.name }} = (_: {{ t.function.parameters | tojson }}) => any;
{% endfor %}}<|end|>{% endif %}
{%- for m in messages %}
{%- if m.role == "assistant" and m.tool_calls %}<|start|>assistant<|channel|>commentary to=functions.{{ m.tool_calls[0].function.name }} <|constrain|>json<|message|>{{ m.tool_calls[0].function.arguments | tojson }}<|call|>
{%- elif m.role == "tool" %}<|start|>functions.{{ m.name }} to=assistant<|channel|>commentary<|message|>{{ m.content }}<|end|>
{%- else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start|>assistant{% endif %}"#;

/// A Gemma 4 template, written small: calls as `<|tool_call>call:NAME{…}<tool_call|>`.
const GEMMA4: &str = r#"{%- for m in messages %}<|turn>{{ m.role }}
{% if m.tool_calls %}{% for c in m.tool_calls %}{{ '<|tool_call>call:' }}{{ c.function.name }}{}<tool_call|>{% endfor %}{% else %}{{ m.content }}{% endif %}<turn|>
{% endfor %}
{%- if add_generation_prompt %}<|turn>model
{% endif %}"#;

/// GPT-OSS's harmony calls on the tiny gpt-oss (its file has no template: one is given,
/// as Jinja or as the built-in `gpt-oss` format, which declares the tools too), and Gemma
/// 4's on the tiny LLaMA: forced calls parse, whole and streamed in pieces;
/// `/apply-template` gives the prompt without generating.
#[test]
fn harmony_and_gemma4_calls() {
    for template in [HARMONY, "gpt-oss"] {
        let mut c = config(1);
        c.model_path = common::tiny("tiny-gpt-oss-f16.gguf");
        c.chat_template = Some(template.into());
        c.engine.n_ctx = 2048;
        let s = TestServer::start(c);
        let a = s.post("/apply-template", &ask(json!({})));
        assert_eq!(a.status, 200, "{}", a.body);
        let prompt = a.body["prompt"].as_str().unwrap();
        assert!(
            prompt.contains("type get_weather") && prompt.ends_with("<|start|>assistant"),
            "{prompt}"
        );
        let a = s.post(
            "/apply-template",
            &ask(json!({"add_generation_prompt": false})),
        );
        assert!(!a.body["prompt"]
            .as_str()
            .unwrap()
            .ends_with("<|start|>assistant"));
        let b = ask(json!({"tool_choice": {"type": "function", "function": {"name": "add"}}}));
        let a = s.post("/v1/chat/completions", &b);
        assert_eq!(a.status, 200, "{}", a.body);
        let ch = &a.body["choices"][0];
        assert_eq!(ch["finish_reason"], "tool_calls", "{ch}");
        let call = &ch["message"]["tool_calls"][0];
        assert_eq!(check_call(call), "add");
        let mut sb = b.clone();
        sb["stream"] = json!(true);
        let (events, done) = s.stream_all("/v1/chat/completions", &sb);
        assert!(done);
        assert_eq!(streamed_call(&events), call["function"]);
        // The call and its result go back through the template (the result found by its
        // call's id when it has no name).
        let mut h = ask(json!({"tool_choice": "none", "max_tokens": 4}));
        h["messages"] = json!([
            {"role": "user", "content": "1 + 2?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
              "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "name": "add", "content": "3"}
        ]);
        if template == "gpt-oss" {
            h["messages"][2].as_object_mut().unwrap().remove("name");
        }
        let a = s.post("/apply-template", &h);
        let p = a.body["prompt"].as_str().unwrap();
        assert!(
            p.contains("to=functions.add") && p.contains("functions.add to=assistant"),
            "{p}"
        );
        drop(s);
    }

    let s = tiny_server(GEMMA4);
    for choice in [
        json!("required"),
        json!({"type": "function", "function": {"name": "add"}}),
    ] {
        let a = s.post("/v1/chat/completions", &ask(json!({"tool_choice": choice})));
        assert_eq!(a.status, 200, "{}", a.body);
        let ch = &a.body["choices"][0];
        assert_eq!(ch["finish_reason"], "tool_calls", "{ch}");
        let call = &ch["message"]["tool_calls"][0];
        // Gemma 4's calls are not checked against the schema (as llama.cpp's): the
        // arguments are a JSON object.
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert!(args.is_object(), "{call}");
        if choice.is_object() {
            assert_eq!(call["function"]["name"], "add");
        }
    }
}

/// A QwQ-style template (as llama.cpp's copy of it): the generation prompt opens
/// `<think>\n`, and closes it at once when `enable_thinking` is false.
const THINKING: &str =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n\
{% if not enable_thinking %}</think>{% endif %}{% endif %}";

/// `--reasoning off` (`ServerConfig::reasoning`): every prompt is rendered with
/// `enable_thinking = false`, so the thinking block is closed and the reply has no
/// reasoning to split off; a request's `chat_template_kwargs.enable_thinking` wins, and
/// `reasoning_effort: "none"` turns thinking off under the default (`auto`).
#[test]
fn reasoning_flag_sets_enable_thinking() {
    let question = |extra: Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "What is today?"}],
                           "max_tokens": 6, "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let prompt = |s: &TestServer, extra: Value| {
        let a = s.post("/apply-template", &question(extra));
        assert_eq!(a.status, 200, "{}", a.body);
        a.body["prompt"].as_str().unwrap().to_string()
    };
    let reply = |s: &TestServer| {
        let a = s.post("/v1/chat/completions", &question(json!({})));
        assert_eq!(a.status, 200, "{}", a.body);
        a.body["choices"][0]["message"].clone()
    };
    let (open, closed) = ("<|im_start|>assistant\n<think>\n", "<think>\n</think>");

    let s = tiny_server(THINKING);
    assert!(prompt(&s, json!({})).ends_with(open));
    let off = json!({"chat_template_kwargs": {"enable_thinking": false}});
    assert!(prompt(&s, off).ends_with(closed));
    assert!(prompt(&s, json!({"reasoning_effort": "none"})).ends_with(closed));
    assert!(prompt(&s, json!({"reasoning_effort": "high"})).ends_with(open));
    // `nothink` (ggrs's; llama-server 0c1e570 refuses it) leaves the reasoning in the
    // content and turns thinking off; another unknown name is a 400 listing the names.
    assert!(prompt(&s, json!({"reasoning_format": "nothink"})).ends_with(closed));
    let a = s.post(
        "/apply-template",
        &question(json!({"reasoning_format": "deepseek-v9"})),
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("deepseek-legacy"));
    // `/props` says it as llama-server does (and whether prompts think).
    let p = s.get("/props").body;
    assert_eq!(
        p["default_generation_settings"]["params"]["reasoning_format"],
        "deepseek"
    );
    assert_eq!(p["enable_thinking"], true, "{p}");
    // Thinking forced open: the whole reply is reasoning.
    let m = reply(&s);
    assert!(m["reasoning_content"].is_string(), "{m}");
    drop(s);

    // A template that cannot think (as llama-server judges it: `enable_thinking` does not
    // switch a block at the end of the prompt) is rendered with thinking off under
    // `--reasoning auto`, and `<think>` in its reply is left in the content.
    let mid = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}\
               {% if enable_thinking %} [T]{% endif %}<|im_end|>\n{% endfor %}\
               {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    let mut c = config(1);
    c.chat_template = Some(mid.into());
    c.reasoning_format = ggrs_llama::chat::reply::ReasoningFormat::Auto;
    let s = TestServer::start(c);
    assert!(!prompt(&s, json!({})).contains("[T]"));
    let p = s.get("/props").body;
    assert_eq!(p["enable_thinking"], false, "{p}");
    assert_eq!(
        p["default_generation_settings"]["params"]["reasoning_format"],
        "auto"
    );
    drop(s);

    let mut c = config(1);
    c.chat_template = Some(THINKING.into());
    c.reasoning = ggrs_llama::chat::reply::Reasoning::Off;
    let s = TestServer::start(c);
    assert!(prompt(&s, json!({})).ends_with(closed));
    let on = json!({"chat_template_kwargs": {"enable_thinking": true}});
    assert!(prompt(&s, on).ends_with(open));
    let m = reply(&s);
    assert!(m.get("reasoning_content").is_none_or(Value::is_null), "{m}");
    assert!(m["content"].is_string(), "{m}");
}

/// A call cut off by `max_tokens`: whole and streamed alike, the call as far as it went
/// (name, the arguments so far) with `finish_reason: "length"` (as OpenAI and
/// llama-server say it), and none of its text in the content; Anthropic's `stop_reason`
/// is `max_tokens`.
#[test]
fn a_call_cut_by_max_tokens_is_the_same_streamed_and_whole() {
    let s = tiny_server(HERMES);
    let mut seen = 0;
    for max_tokens in [16, 24, 32] {
        let b = ask(
            json!({"tool_choice": {"type": "function", "function": {"name": "add"}},
                           "max_tokens": max_tokens, "temperature": 0}),
        );
        let a = s.post("/v1/chat/completions", &b);
        assert_eq!(a.status, 200, "{}", a.body);
        let ch = &a.body["choices"][0];
        if ch["finish_reason"] != "length" {
            continue;
        }
        let m = &ch["message"];
        assert!(
            m["content"]
                .as_str()
                .is_none_or(|c| !c.contains("<tool_call>")),
            "{m}"
        );
        let mut sb = b.clone();
        sb["stream"] = json!(true);
        let (events, done) = s.stream_all("/v1/chat/completions", &sb);
        assert!(done);
        let (mut name, mut args, mut content, mut finish) =
            (None, String::new(), String::new(), None);
        for e in &events {
            let c = &e["choices"][0];
            for tc in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
                if let Some(n) = tc["function"]["name"].as_str() {
                    name = Some(n.to_string());
                }
                args += tc["function"]["arguments"].as_str().unwrap_or("");
            }
            content += c["delta"]["content"].as_str().unwrap_or("");
            if c["finish_reason"].is_string() {
                finish = Some(c["finish_reason"].clone());
            }
        }
        assert_eq!(finish, Some(json!("length")));
        assert_eq!(content, m["content"].as_str().unwrap_or(""));
        match m["tool_calls"].as_array() {
            Some(calls) => {
                seen += 1;
                assert_eq!(calls.len(), 1, "{m}");
                assert_eq!(name.as_deref(), Some("add"));
                assert_eq!(calls[0]["function"]["arguments"], args.as_str(), "{m}");
                assert!(
                    serde_json::from_str::<Value>(&args).is_err(),
                    "not cut: {args}"
                );
            }
            None => assert!(name.is_none(), "{m}"),
        }
        let ab = json!({"model": "x", "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"name": "add", "input_schema": tools()[1]["function"]["parameters"]}],
            "tool_choice": {"type": "tool", "name": "add"}});
        let a = s.post("/v1/messages", &ab);
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.body["stop_reason"], "max_tokens", "{}", a.body);
    }
    assert!(seen > 0, "no reply was cut inside the call");
}

/// A function whose parameters refer to their own definitions (`$defs`, as pydantic writes
/// nested models) compiles in the Hermes and the generic format, and the call follows them
/// (llama.cpp resolves each function's references within its parameters).
#[test]
fn tool_parameters_with_definitions() {
    let params = json!({"$defs": {"City": {"type": "object",
            "properties": {"name": {"type": "string", "maxLength": 6}},
            "required": ["name"], "additionalProperties": false}},
        "type": "object", "properties": {"city": {"$ref": "#/$defs/City"}},
        "required": ["city"], "additionalProperties": false});
    for template in [HERMES, "chatml"] {
        let s = tiny_server(template);
        let b = json!({"messages": [{"role": "user", "content": "Weather?"}],
            "max_tokens": 120, "seed": 1, "tool_choice": "required",
            "tools": [{"type": "function", "function": {"name": "weather", "parameters": params}}]});
        let a = s.post("/v1/chat/completions", &b);
        assert_eq!(a.status, 200, "{}", a.body);
        let ch = &a.body["choices"][0];
        assert_eq!(ch["finish_reason"], "tool_calls", "{ch}");
        let args = ch["message"]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap();
        let args: Value = serde_json::from_str(args).unwrap();
        assert!(args["city"]["name"].is_string(), "{args}");
    }
}

/// The hybrids' official templates on their tiny models: Qwen3.5's (Qwen3-Coder's XML
/// calls), LFM2's (Python-style call lists) and Granite 4.0-H's (Hermes) force valid
/// calls, and a stream sends the same call (its name first, then its arguments).
#[test]
fn hybrid_templates_force_calls() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../ggrs-llama/tests/data/templates/"
    );
    for (model, file) in [
        ("tiny-qwen35-f16.gguf", "Qwen-Qwen3.5-4B.jinja"),
        ("tiny-lfm2-f16.gguf", "LiquidAI-LFM2-8B-A1B.jinja"),
        (
            "tiny-granite-hybrid-f16.gguf",
            "ibm-granite-granite-4.0.jinja",
        ),
    ] {
        let mut c = config(1);
        c.model_path = common::tiny(model);
        c.chat_template = Some(std::fs::read_to_string(format!("{dir}{file}")).unwrap());
        c.engine.n_ctx = 2048;
        let s = TestServer::start(c);
        for choice in [
            json!("required"),
            json!({"type": "function", "function": {"name": "add"}}),
        ] {
            let b = ask(json!({"tool_choice": choice, "max_tokens": 200}));
            let a = s.post("/v1/chat/completions", &b);
            assert_eq!(a.status, 200, "{}", a.body);
            let ch = &a.body["choices"][0];
            assert_eq!(ch["finish_reason"], "tool_calls", "{file}: {ch}");
            let call = &ch["message"]["tool_calls"][0];
            let name = check_call(call);
            if choice.is_object() {
                assert_eq!(name, "add");
            }
            let mut sb = b.clone();
            sb["stream"] = json!(true);
            let (events, done) = s.stream_all("/v1/chat/completions", &sb);
            assert!(done);
            let mut streamed_name = None;
            let mut args = String::new();
            for e in &events {
                for tc in e["choices"][0]["delta"]["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if let Some(n) = tc["function"]["name"].as_str() {
                        streamed_name = Some(n.to_string());
                    }
                    args += tc["function"]["arguments"].as_str().unwrap_or("");
                }
            }
            assert_eq!(streamed_name.as_deref(), Some(name.as_str()), "{file}");
            assert_eq!(
                args,
                call["function"]["arguments"].as_str().unwrap(),
                "{file}"
            );
        }
    }
}
