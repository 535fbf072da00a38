//! The HTTP API against a server on a tiny model and a free loopback port: every endpoint,
//! streaming and not, and the errors.

use crate::common;

use std::io::{Read, Write};

use common::{chat_body, config, streamed_texts, TestServer};
use serde_json::{json, Value};

#[test]
fn health_models_props_slots_page_and_tokenizer() {
    let mut c = config(2);
    c.alias = Some("tiny".into());
    let s = TestServer::start(c);
    let h = s.get("/health");
    assert_eq!((h.status, h.body["status"].as_str()), (200, Some("ok")));
    let m = s.get("/v1/models");
    assert_eq!(m.status, 200);
    assert_eq!(m.body["data"][0]["id"], "tiny");
    assert_eq!(m.body["data"][0]["aliases"], json!(["tiny"]));
    assert_eq!(m.body["data"][0]["tags"], json!([]));
    assert_eq!(m.body["data"][0]["meta"]["n_vocab"], 32000);
    let p = s.get("/props");
    assert_eq!(p.body["total_slots"], 2);
    assert_eq!(p.body["default_generation_settings"]["n_ctx"], 512);
    assert_eq!(p.body["chat_template"], "chatml");
    let sl = s.get("/slots");
    let sl = sl.body.as_array().expect("slots");
    assert_eq!(sl.len(), 2);
    assert!(sl.iter().all(|x| x["is_processing"] == false));
    let page = s.get("/");
    assert_eq!(page.status, 200);
    assert!(page.body.as_str().expect("html").contains("<html"));

    let t = s.post(
        "/tokenize",
        &json!({"content": "Hello world", "add_special": true, "with_pieces": true}),
    );
    assert_eq!(t.status, 200);
    let toks = t.body["tokens"].as_array().expect("tokens");
    assert_eq!(toks[0]["id"], 1, "BOS first with add_special");
    let ids: Vec<Value> = toks.iter().map(|x| x["id"].clone()).collect();
    let pieces: String = toks[1..]
        .iter()
        .map(|x| x["piece"].as_str().expect("piece"))
        .collect();
    assert_eq!(pieces.replace('▁', " ").trim(), "Hello world");
    let plain = s.post("/tokenize", &json!({"content": "Hello world"}));
    assert_eq!(plain.body["tokens"].as_array().unwrap()[..], ids[1..]);
    let d = s.post("/detokenize", &json!({"tokens": ids[1..]}));
    assert_eq!(
        d.body["content"].as_str().map(str::trim),
        Some("Hello world")
    );
    let bad = s.post("/detokenize", &json!({"tokens": [99999999]}));
    assert_eq!(bad.status, 400);
}

/// `--alias a,b` and `--tags`, as llama-server reads and lists them: trimmed, sorted, each
/// once; the first alias is the model's id, on `/v1/models` and `/models`, and in answers.
#[test]
fn several_aliases_and_tags_are_listed() {
    let mut c = config(1);
    c.alias = Some("tinyllama-2, fim,code,,fim".into());
    c.tags = Some("chat,fim,small".into());
    let s = TestServer::start(c);
    for path in ["/v1/models", "/models"] {
        let m = s.get(path);
        assert_eq!(m.status, 200);
        let model = &m.body["data"][0];
        assert_eq!(
            model["aliases"],
            json!(["code", "fim", "tinyllama-2"]),
            "{path}"
        );
        assert_eq!(model["tags"], json!(["chat", "fim", "small"]), "{path}");
        assert_eq!(model["id"], "code", "{path}");
    }
    let r = s.post(
        "/v1/completions",
        &json!({"prompt": "Hello", "max_tokens": 1, "temperature": 0}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body["model"], "code");
}

#[test]
fn metrics_and_slots_only_with_their_flags_and_page_only_without_no_webui() {
    let mut c = config(1);
    c.metrics = false;
    c.webui = false;
    c.slots_endpoint = false;
    let s = TestServer::start(c);
    let m = s.get("/metrics");
    assert_eq!(m.status, 501);
    assert!(m.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--metrics"));
    // --no-slots: llama-server's 501 with an error body.
    let sl = s.get("/slots");
    assert_eq!(sl.status, 501);
    assert!(sl.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--no-slots"));
    assert_eq!(s.get("/").status, 404);
    assert_eq!(s.get("/nowhere").status, 404);
}

#[test]
fn chat_and_completions_streaming_and_not() {
    let s = TestServer::start(config(2));
    let msgs = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story"}]);
    let a = s.post("/v1/chat/completions", &chat_body(msgs.clone(), 12));
    assert_eq!(a.status, 200, "{:?}", a.body);
    let b = &a.body;
    assert_eq!(b["object"], "chat.completion");
    assert_eq!(b["choices"][0]["message"]["role"], "assistant");
    let text = b["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!text.is_empty());
    let fin = b["choices"][0]["finish_reason"].as_str().unwrap();
    assert!(fin == "length" || fin == "stop");
    let u = &b["usage"];
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap())
    );
    if fin == "length" {
        assert_eq!(u["completion_tokens"], 12);
    }
    assert!(b["timings"]["predicted_n"].as_u64().is_some());

    // The same request streamed: the same text, chunk by chunk, then usage and [DONE].
    let mut body = chat_body(msgs, 12);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (events, done) = s.stream_all("/v1/chat/completions", &body);
    assert!(done, "the stream ends with [DONE]");
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(events
        .iter()
        .all(|e| e["object"] == "chat.completion.chunk"));
    assert_eq!(streamed_texts(&events, 1)[0], text);
    let last_choice = &events[events.len() - 2]["choices"][0];
    assert_eq!(last_choice["finish_reason"], fin);
    let usage = &events.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], u["completion_tokens"]);
    assert_eq!(events.last().unwrap()["choices"], json!([]));

    // Completions: a text prompt and the same prompt as token ids give the same text.
    let ids = s.post(
        "/tokenize",
        &json!({"content": "Once upon a time", "add_special": true}),
    );
    let ids = ids.body["tokens"].clone();
    let c1 = s.post(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0}),
    );
    let c2 = s.post(
        "/v1/completions",
        &json!({"prompt": ids, "max_tokens": 10, "temperature": 0, "cache_prompt": false}),
    );
    assert_eq!(c1.status, 200, "{:?}", c1.body);
    assert_eq!(c1.body["object"], "text_completion");
    let t1 = c1.body["choices"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(c2.body["choices"][0]["text"].as_str().unwrap(), t1);
    // Streamed, without usage: no usage chunk.
    let (events, done) = s.stream_all(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0,
                "stream": true, "cache_prompt": false}),
    );
    assert!(done);
    assert_eq!(streamed_texts(&events, 1)[0], t1);
    assert!(events.iter().all(|e| e.get("usage").is_none()));
    // A list of prompts: one choice each.
    let two = s.post(
        "/v1/completions",
        &json!({"prompt": ["Once upon a time", "The sky"], "max_tokens": 4, "temperature": 0,
                "cache_prompt": false}),
    );
    assert_eq!(two.body["choices"].as_array().unwrap().len(), 2);
    assert_eq!(two.body["choices"][1]["index"], 1);
}

#[test]
fn a_model_without_a_chat_format_refuses_chat_but_completes() {
    let mut c = config(1);
    c.chat_template = None;
    let s = TestServer::start(c);
    let a = s.post(
        "/v1/chat/completions",
        &chat_body(json!([{"role": "user", "content": "hi"}]), 4),
    );
    assert_eq!(a.status, 400);
    assert!(a.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--chat-template"));
    let b = s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 2}));
    assert_eq!(b.status, 200);
}

/// Asserts an OpenAI-style error with `status` naming `param`.
fn assert_error(a: &common::Answer, status: u16, param: Option<&str>) {
    assert_eq!(a.status, status, "{:?}", a.body);
    let e = &a.body["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{e}");
    assert!(e["type"].is_string(), "{e}");
    assert_eq!(e["code"], status, "{e}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{e}");
    }
}

#[test]
fn errors_are_openai_error_objects() {
    let s = TestServer::start(config(1));
    let user = json!([{"role": "user", "content": "hi"}]);
    assert_error(&s.post_raw("/v1/chat/completions", b"{not json"), 400, None);
    assert_error(&s.post_raw("/v1/completions", b"[1, 2]"), 400, None);
    for (field, value) in [
        ("temperature", json!("hot")),
        ("max_tokens", json!("ten")),
        ("stop", json!(5)),
        ("n", json!(0)),
        ("stream", json!("yes")),
        ("logit_bias", json!({"999999": 1})),
        ("top_logprobs", json!(100)),
    ] {
        let mut b = chat_body(user.clone(), 2);
        b[field] = value;
        assert_error(&s.post("/v1/chat/completions", &b), 400, Some(field));
    }
    for (field, value) in [
        // The legacy function-calling field (tools replaced it; a bad `tool_choice` with
        // tools is tested in ggrs-server/src/tools.rs).
        ("functions", json!([{"name": "f"}])),
        // Structured outputs that cannot be compiled or are malformed.
        ("response_format", json!({"type": "json_schema"})),
        ("response_format", json!({"type": "yaml"})),
        (
            "response_format",
            json!({"type": "json_schema", "json_schema": {"schema": {"$ref": "#/$defs/nope"}}}),
        ),
        ("grammar", json!("root ::= undefined-rule")),
        (
            "json_schema",
            json!({"type": "object", "minProperties": 3, "maxProperties": 1}),
        ),
        ("mirostat", json!(2)),
    ] {
        let mut b = chat_body(user.clone(), 2);
        b[field] = value;
        let a = s.post("/v1/chat/completions", &b);
        assert_error(&a, 400, Some(field));
        let m = a.body["error"]["message"].as_str().unwrap();
        assert!(m.contains(field), "{m}");
    }
    // Harmless fields OpenAI clients send are accepted.
    let mut b = chat_body(user.clone(), 2);
    b["user"] = json!("someone");
    b["model"] = json!("gpt-4o");
    b["response_format"] = json!({"type": "text"});
    assert_eq!(s.post("/v1/chat/completions", &b).status, 200);
    // Messages: a tool role, an image.
    let a = s.post(
        "/v1/chat/completions",
        &chat_body(json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), 2),
    );
    assert_error(&a, 400, Some("messages[0].content"));
    assert_error(
        &s.post("/v1/completions", &json!({"max_tokens": 2})),
        400,
        Some("prompt"),
    );
    // Too long a prompt: the numbers.
    let long = vec![450; 600];
    let a = s.post("/v1/completions", &json!({"prompt": long, "max_tokens": 2}));
    assert_error(&a, 400, None);
    let msg = a.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("600") && msg.contains("512"), "{msg}");
    // Too large a body: 413 before it is read.
    let mut tcp = std::net::TcpStream::connect(s.server.local_addr()).unwrap();
    write!(
        tcp,
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: 100000000\r\n\r\n{{\"prompt\": \""
    )
    .unwrap();
    let mut buf = [0u8; 4096];
    let n = tcp.read(&mut buf).unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.contains("\"code\":413"), "{head}");
}

#[test]
fn api_key_is_required_except_for_health_models_and_page() {
    let mut c = config(1);
    c.api_keys = vec!["sesame".into()];
    let mut s = TestServer::start(c);
    let req = json!({"prompt": "hi", "max_tokens": 2});
    assert_eq!(s.post("/v1/completions", &req).status, 200);
    assert_eq!(s.get("/slots").status, 200);
    s.key = Some("wrong".into());
    assert_error(&s.post("/v1/completions", &req), 401, None);
    assert_error(&s.get("/metrics"), 401, None);
    s.key = None;
    // Refusals keep the keep-alive connection usable: many in a row on one client.
    for _ in 0..20 {
        assert_error(&s.post("/v1/completions", &req), 401, None);
        assert_error(&s.post("/tokenize", &json!({"content": "a"})), 401, None);
    }
    assert_eq!(s.get("/health").status, 200);
    assert_eq!(s.get("/v1/models").status, 200);
    assert_eq!(s.get("/").status, 200);
}

#[test]
fn n_choices_are_indexed_and_seeded() {
    let s = TestServer::start(config(3));
    let base = json!({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0,
                      "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 42, "cache_prompt": false});
    let mut three = base.clone();
    three["n"] = json!(3);
    let a = s.post("/v1/completions", &three);
    assert_eq!(a.status, 200, "{:?}", a.body);
    let ch = a.body["choices"].as_array().unwrap();
    assert_eq!(ch.len(), 3);
    let texts: Vec<&str> = ch.iter().map(|c| c["text"].as_str().unwrap()).collect();
    for (i, c) in ch.iter().enumerate() {
        assert_eq!(c["index"], i);
        // Choice i is the single request with seed 42 + i.
        let mut one = base.clone();
        one["seed"] = json!(42 + i);
        let single = s.post("/v1/completions", &one);
        assert_eq!(
            single.body["choices"][0]["text"].as_str().unwrap(),
            texts[i]
        );
        // The prompt is counted once, as OpenAI counts it; every choice's tokens.
        assert_eq!(
            a.body["usage"]["prompt_tokens"],
            single.body["usage"]["prompt_tokens"]
        );
    }

    assert!(
        texts[0] != texts[1] || texts[1] != texts[2],
        "three seeds gave one text: {texts:?}"
    );
    // Streamed: chunks of both choices, each choice's text as when not streamed.
    let mut two = three.clone();
    two["n"] = json!(2);
    two["stream"] = json!(true);
    let (events, done) = s.stream_all("/v1/completions", &two);
    assert!(done);
    let streamed = streamed_texts(&events, 2);
    assert_eq!(streamed, vec![texts[0].to_string(), texts[1].to_string()]);
    let finishes = events
        .iter()
        .filter(|e| !e["choices"][0]["finish_reason"].is_null())
        .count();
    assert_eq!(finishes, 2);
}

#[test]
fn logprobs_and_logit_bias() {
    let s = TestServer::start(config(1));
    let msgs = json!([{"role": "user", "content": "Tell me a story"}]);
    let mut b = chat_body(msgs.clone(), 6);
    b["logprobs"] = json!(true);
    b["top_logprobs"] = json!(3);
    b["cache_prompt"] = json!(false);
    let a = s.post("/v1/chat/completions", &b);
    let content = a.body["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!content.is_empty());
    for e in &content {
        let lp = e["logprob"].as_f64().unwrap();
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        // Greedy: the chosen token is the most likely one.
        assert_eq!(top[0]["token"], e["token"]);
        assert!((top[0]["logprob"].as_f64().unwrap() - lp).abs() < 1e-6 && lp <= 0.0);
        assert!(e["bytes"].is_array());
    }
    // The pieces make up the text.
    let joined: String = content
        .iter()
        .map(|e| e["token"].as_str().unwrap())
        .collect();
    let text = a.body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        joined.replace('▁', " ").contains(text.trim()),
        "{joined:?} vs {text:?}"
    );

    // Banning the first token: the runner-up is chosen, and its reported log-probability
    // is the model's (as in the unbiased answer's alternatives), not a renormalised one.
    let first = content[0]["id"].as_u64().unwrap();
    let mut biased = b.clone();
    biased["logit_bias"] = json!({ first.to_string(): false });
    let c = s.post("/v1/chat/completions", &biased);
    assert_eq!(c.status, 200, "{:?}", c.body);
    let got = &c.body["choices"][0]["logprobs"]["content"][0];
    let second = &content[0]["top_logprobs"][1];
    assert_eq!(got["token"], second["token"]);
    assert_eq!(got["logprob"], second["logprob"]);

    // The completions form.
    let d = s.post(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "logprobs": 2}),
    );
    let lp = &d.body["choices"][0]["logprobs"];
    let n = lp["tokens"].as_array().unwrap().len();
    assert!(n > 0);
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), n);
    assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 2);
    assert_eq!(lp["text_offset"][0], 0);
    // Streamed chat logprobs: one entry per token chunk, the same values.
    let mut st = b.clone();
    st["stream"] = json!(true);
    let (events, _) = s.stream_all("/v1/chat/completions", &st);
    let streamed: Vec<Value> = events
        .iter()
        .filter_map(|e| e["choices"][0]["logprobs"]["content"].as_array())
        .flatten()
        .cloned()
        .collect();
    assert_eq!(streamed, content);
}

#[test]
fn stop_strings_across_token_boundaries() {
    let s = TestServer::start(config(1));
    let req = |stop: Option<&str>, stream: bool| {
        let mut b = json!({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0,
                           "logprobs": 0, "cache_prompt": false});
        if let Some(st) = stop {
            b["stop"] = json!([st]);
        }
        if stream {
            b["stream"] = json!(true);
            let (events, _) = s.stream_all("/v1/completions", &b);
            let fin = events.iter().find_map(|e| {
                e["choices"][0]["finish_reason"]
                    .as_str()
                    .map(str::to_string)
            });
            (
                streamed_texts(&events, 1).remove(0),
                fin.unwrap_or_default(),
            )
        } else {
            let a = s.post("/v1/completions", &b);
            let c = &a.body["choices"][0];
            (
                c["text"].as_str().unwrap().to_string(),
                c["finish_reason"].as_str().unwrap().to_string(),
            )
        }
    };
    let full = s.post(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "logprobs": 1,
                "cache_prompt": false}),
    );
    let c = &full.body["choices"][0];
    let text = c["text"].as_str().unwrap();
    let offsets: Vec<usize> = c["logprobs"]["text_offset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_u64().unwrap() as usize)
        .collect();
    // A string of two characters each side of a token boundary, found nowhere earlier.
    let stop = offsets
        .iter()
        .filter_map(|&o| {
            let before = text.get(..o)?.chars().rev().take(2).collect::<Vec<_>>();
            let after = text.get(o..)?.chars().take(2).collect::<String>();
            if before.len() < 2 || after.chars().count() < 2 {
                return None;
            }
            let before: String = before.into_iter().rev().collect();
            let s = before.clone() + &after;
            (text.find(&s) == Some(o - before.len())).then_some(s)
        })
        .find(|s| !s.trim().is_empty())
        .expect("a string across a token boundary");
    let cut = &text[..text.find(&stop).unwrap()];
    for stream in [false, true] {
        let (t, fin) = req(Some(&stop), stream);
        assert_eq!(t, cut, "stop {stop:?}, stream {stream}");
        assert_eq!(fin, "stop");
    }
    assert_eq!(req(None, true).0, text);
}

#[test]
fn cached_prompt_tokens_on_the_next_turn() {
    let s = TestServer::start(config(1));
    let turn1 = json!([{"role": "user", "content": "Tell me a story about a dragon"}]);
    let a = s.post("/v1/chat/completions", &chat_body(turn1.clone(), 8));
    assert_eq!(
        a.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "{:?}",
        a.body
    );
    let reply = a.body["choices"][0]["message"]["content"].as_str().unwrap();
    let mut turn2 = turn1.as_array().unwrap().clone();
    turn2.push(json!({"role": "assistant", "content": reply}));
    turn2.push(json!({"role": "user", "content": "And then?"}));
    let b = s.post("/v1/chat/completions", &chat_body(Value::Array(turn2), 8));
    let u = &b.body["usage"];
    let cached = u["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached > 0 && cached < u["prompt_tokens"].as_u64().unwrap(),
        "{u}"
    );
    assert!(s.metric("ggrs_cache_hits_total") >= 1.0);
    assert!(s.metric("ggrs_cached_prompt_tokens_total") >= cached as f64);
}

/// The official templates of the 2026 families, each served on its tiny model
/// (`--chat-template`): `/apply-template` gives llama-server's rendering of the same
/// conversation (`ggrs-llama/tests/data/templates/llama-server-renderings.json`, with and
/// without the generation prompt), and a chat completion's `prompt_tokens` count that
/// rendering's tokens. (Granite 3.3's template writes today's date: Granite 4.0's is served.)
#[test]
fn the_2026_families_official_templates_render_as_llama_server() {
    let data = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ggrs-llama/tests/data/templates");
    let renderings: Value = serde_json::from_str(
        &std::fs::read_to_string(data.join("llama-server-renderings.json")).expect("renderings"),
    )
    .expect("json");
    let messages = json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "2+2?"}
    ]);
    for (model, template) in [
        ("tiny-gemma3-f16.gguf", "google-gemma-3-it.jinja"),
        ("tiny-gemma4-f16.gguf", "google-gemma-4-31B-it.jinja"),
        ("tiny-smollm3-f16.gguf", "HuggingFaceTB-SmolLM3-3B.jinja"),
        ("tiny-granite-f16.gguf", "ibm-granite-granite-4.0.jinja"),
        (
            "tiny-mistral3-f16.gguf",
            "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
        ),
        (
            "tiny-phi3-longrope-f16.gguf",
            "microsoft-Phi-4-mini-instruct.jinja",
        ),
    ] {
        let mut c = config(1);
        c.model_path = common::tiny(model);
        c.chat_template = Some(std::fs::read_to_string(data.join(template)).expect("template"));
        let s = TestServer::start(c);
        for agp in [true, false] {
            let a = s.post(
                "/apply-template",
                &json!({"messages": messages, "add_generation_prompt": agp}),
            );
            assert_eq!(a.status, 200, "{model}: {}", a.body);
            let key = format!("basic/{}", if agp { "True" } else { "False" });
            assert_eq!(
                a.body["prompt"],
                renderings["renderings"][template][key.as_str()],
                "{model} with {template}, {key}"
            );
        }
        let want = renderings["renderings"][template]["basic/True"]
            .as_str()
            .expect("rendering");
        let tok = ggrs_llama::Tokenizer::open(common::tiny(model)).expect("tokenizer");
        let n = tok.encode(want, true, true).expect("encode").len();
        let a = s.post("/v1/chat/completions", &chat_body(messages.clone(), 2));
        assert_eq!(a.status, 200, "{model}: {}", a.body);
        assert_eq!(a.body["usage"]["prompt_tokens"], n, "{model}");
    }
}

/// llama-server's own `POST /completion`: the same text as `/v1/completions` for the same
/// request, llama-server's fields (stop type, counts, settings, token ids, probabilities),
/// the stream's pieces adding up to the answer and ending with `stop: true`, a list of
/// prompts answered by a list, and a bad request a 400.
#[test]
fn llama_server_completion_endpoint() {
    let s = TestServer::start(config(2));
    let ask = json!({"prompt": "Once upon a time", "n_predict": 6, "temperature": 0,
                     "n_probs": 3, "return_tokens": true});
    let a = s.post("/completion", &ask);
    assert_eq!(a.status, 200, "{}", a.body);
    let v = &a.body;
    let oai = s.post("/v1/completions", &ask);
    assert_eq!(v["content"], oai.body["choices"][0]["text"]);
    assert_eq!(
        (v["stop"].clone(), v["stop_type"].clone()),
        (json!(true), json!("limit"))
    );
    assert_eq!(v["tokens_predicted"], 6);
    assert_eq!(v["tokens"].as_array().map(Vec::len), Some(6));
    assert_eq!(v["tokens_evaluated"], oai.body["usage"]["prompt_tokens"]);
    assert_eq!(v["generation_settings"]["n_predict"], 6);
    assert_eq!(v["timings"]["predicted_n"], 6);
    let probs = v["completion_probabilities"]
        .as_array()
        .expect("probabilities");
    assert_eq!(probs.len(), 6);
    for (p, id) in probs.iter().zip(v["tokens"].as_array().unwrap()) {
        assert_eq!(&p["id"], id);
        assert!(p["logprob"].as_f64().unwrap() <= 0.0);
        assert_eq!(p["top_logprobs"].as_array().map(Vec::len), Some(3));
    }

    let mut stream = ask.clone();
    stream["stream"] = json!(true);
    let (events, done) = s.stream_all("/completion", &stream);
    assert!(!done, "llama-server's stream has no [DONE]");
    let (last, pieces) = events.split_last().expect("events");
    assert_eq!(last["stop"], true);
    assert_eq!(last["stop_type"], "limit");
    let mut text = String::new();
    for e in pieces {
        assert_eq!(e["stop"], false);
        assert_eq!(e["tokens"].as_array().map(Vec::len), Some(1));
        text.push_str(e["content"].as_str().unwrap());
    }
    text.push_str(last["content"].as_str().unwrap());
    assert_eq!(json!(text), v["content"]);

    let both = s.post(
        "/completion",
        &json!({"prompt": ["Once upon a time", "The sky"], "n_predict": 2, "temperature": 0}),
    );
    assert_eq!(both.status, 200, "{}", both.body);
    let list = both.body.as_array().expect("a list for a list of prompts");
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["content"], {
        let one = json!({"prompt": "Once upon a time", "n_predict": 2, "temperature": 0});
        s.post("/completion", &one).body["content"].clone()
    });
    assert_eq!(s.post("/completion", &json!({"n_predict": 2})).status, 400);
    // `/completions` is llama-server's own format too (`/v1/completions` is OpenAI's).
    assert_eq!(s.post("/completions", &ask).body["content"], v["content"]);
}

/// `--host 127.0.0.1,::1` (llama-server's list form): both addresses serve, on one port;
/// skipped where the machine has no IPv6 loopback.
#[test]
fn several_host_addresses_serve_on_one_port() {
    if std::net::TcpListener::bind(("::1", 0)).is_err() {
        eprintln!("no IPv6 loopback: skipped");
        return;
    }
    let mut c = config(1);
    c.host = "127.0.0.1, [::1]".into();
    let s = TestServer::start(c);
    let addrs = s.server.local_addrs().to_vec();
    assert_eq!(addrs.len(), 2, "{addrs:?}");
    assert!(addrs[0].is_ipv4() && addrs[1].is_ipv6(), "{addrs:?}");
    assert_eq!(addrs[0].port(), addrs[1].port());
    assert_eq!(s.server.local_addr(), addrs[0]);
    let agent = common::agent();
    for a in &addrs {
        let url = format!("http://{a}/completion");
        let r = agent
            .post(&url)
            .send_json(json!({"prompt": "Once upon a time", "n_predict": 2}))
            .expect("an answer");
        assert_eq!(r.status().as_u16(), 200, "{a}");
    }
    // An address that cannot be bound is an error naming it.
    let mut bad = config(1);
    bad.host = "127.0.0.1,192.0.2.1".into();
    let e = ggrs_server::start(bad).err().expect("not bound");
    assert!(e.to_string().contains("192.0.2.1"), "{e}");
}
