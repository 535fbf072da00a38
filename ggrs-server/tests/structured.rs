//! Structured outputs over HTTP on the tiny model: `grammar`, `json_schema` and
//! `response_format` constrain what comes out, streamed or not, on both endpoints.

use crate::common;

use common::{config, TestServer};
use serde_json::{json, Value};

fn chat(s: &TestServer, extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": "Answer."}], "max_tokens": 40,
                       "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    let a = s.post("/v1/chat/completions", &b);
    assert_eq!(a.status, 200, "{}", a.body);
    a.body
}

#[test]
fn outputs_follow_the_grammar_or_schema() {
    let s = TestServer::start(config(2));
    // A GBNF grammar.
    let a = chat(&s, json!({"grammar": "root ::= \"id-\" [0-9]{3}"}));
    let text = a["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        text.len() == 6 && text.starts_with("id-") && text[3..].bytes().all(|b| b.is_ascii_digit()),
        "{text:?}"
    );
    assert_eq!(a["choices"][0]["finish_reason"], "stop");
    // A schema, as llama-server and OpenAI take it.
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"},
        "n": {"enum": [1, 2, 3]}}, "required": ["ok", "n"], "additionalProperties": false});
    for extra in [
        json!({"json_schema": schema}),
        json!({"response_format": {"type": "json_schema",
               "json_schema": {"name": "r", "strict": true, "schema": schema}}}),
    ] {
        let a = chat(&s, extra);
        let text = a["choices"][0]["message"]["content"].as_str().unwrap();
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(
            v["ok"].is_boolean() && [1, 2, 3].contains(&v["n"].as_i64().unwrap()),
            "{v}"
        );
        assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
    }
    // Streamed, on the completions endpoint: the pieces make a valid output.
    let (events, done) = s.stream_all(
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 20, "stream": true, "seed": 3,
                "grammar": "root ::= (\"yes\" | \"no\") \"!\""}),
    );
    assert!(done);
    let text = &common::streamed_texts(&events, 1)[0];
    assert!(text == "yes!" || text == "no!", "{text:?}");
}
