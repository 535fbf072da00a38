//! Speculative decoding in the server: a request with `"speculative": false` and the same
//! request with it on give the same tokens and log-probabilities, and `/metrics` counts
//! drafts only for the latter.

use crate::common;

use common::{config, TestServer};
use ggrs_llama::speculative::SpecParams;
use serde_json::{json, Value};

#[test]
fn speculative_false_keeps_the_output_and_drafts_nothing() {
    let mut c = config(1);
    c.engine.spec = Some(SpecParams {
        draft_max: 8,
        draft_min: 1,
        // Always draft what the n-gram drafter finds, so that the test sees drafts.
        adaptive: false,
    });
    let s = TestServer::start(c);
    // The tiny model has random weights: a logit bias keeps its output among four words,
    // whose repeats the n-gram drafter proposes (both requests carry the same bias).
    let words = s.post("/tokenize", &json!({"content": " one two three four"}));
    let ids: Vec<u64> = words.body["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().expect("a token id"))
        .collect();
    let bias: serde_json::Map<String, Value> =
        ids.iter().map(|id| (id.to_string(), json!(100))).collect();
    let body = |spec: bool| {
        json!({"prompt": "one two three four one two three four one two three four one two",
               "n_predict": 48, "temperature": 0, "logprobs": 1, "speculative": spec,
               "cache_prompt": false, "logit_bias": bias})
    };
    let run = |spec: bool| -> Value {
        let a = s.post("/v1/completions", &body(spec));
        assert_eq!(a.status, 200, "{:?}", a.body);
        a.body
    };
    let drafts = |s: &TestServer| s.metric("ggrs_draft_tokens_total");
    let before = drafts(&s);
    let off = run(false);
    assert_eq!(
        drafts(&s),
        before,
        "a request with \"speculative\": false drafted"
    );
    let on = run(true);
    assert!(
        drafts(&s) > before,
        "the speculative request drafted nothing: the test proves nothing"
    );
    let text = |v: &Value| v["choices"][0]["text"].clone();
    let lps = |v: &Value| v["choices"][0]["logprobs"].clone();
    assert_eq!(text(&on), text(&off));
    assert!(lps(&off)["tokens"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
    // Same tokens, same log-probabilities (compared as the JSON numbers the server wrote,
    // which print every f32 bit).
    assert_eq!(lps(&on), lps(&off));
}
