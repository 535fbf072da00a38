//! `ggrs serve --context-shift`: a request that generates past its slot's context gives
//! llama-server's tokens (the engine's reference, `ggrs-llama/tests/data/
//! engine-context-shift-tiny-llama.llama-server.json`) with llama-server's `n_keep` and
//! `n_discard` fields, and says `"truncated": true`; `"truncate": true` cuts a prompt that
//! does not fit, which is refused without it.

use crate::common;

use common::{config, TestServer};
use serde_json::{json, Value};

#[test]
fn requests_shift_their_slot_and_cut_long_prompts_on_request() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../ggrs-llama/tests/data/engine-context-shift-tiny-llama.llama-server.json"
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut c = config(2);
    c.engine.n_ctx = 512;
    c.engine.n_threads = 2;
    c.engine.context_shift = true;
    let s = TestServer::start(c);
    let post = |run: &Value, extra: Value| {
        let mut body = json!({"prompt": run["prompt"], "n_predict": run["n_predict"],
            "temperature": 0, "return_tokens": true, "cache_prompt": false,
            "ignore_eos": true, "n_keep": run["n_keep"]});
        if let Some(d) = run.get("n_discard") {
            body["n_discard"] = d.clone();
        }
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        s.post("/completion", &body)
    };
    // The run with n_discard (llama-server's own field).
    let run = &r["runs"][2];
    assert!(run.get("n_discard").is_some());
    let a = post(run, json!({}));
    assert_eq!(a.status, 200, "{:?}", a.body);
    assert_eq!(a.body["tokens"], run["tokens"]);
    assert_eq!(a.body["truncated"], json!(true));

    let t = &r["truncation"];
    let refused = post(t, json!({}));
    assert_eq!(refused.status, 400, "{:?}", refused.body);
    assert!(
        refused.body.to_string().contains("truncate"),
        "{:?}",
        refused.body
    );
    let a = post(t, json!({"truncate": true}));
    assert_eq!(a.status, 200, "{:?}", a.body);
    // Up to llama-server's first near tie (see the engine's test): the cut prompt is long
    // enough for the last bits of the arithmetic to decide it.
    let tie = t["top2_margin"]
        .as_array()
        .unwrap()
        .iter()
        .position(|m| m.as_f64().unwrap() < 0.005)
        .unwrap();
    let got = a.body["tokens"].as_array().unwrap();
    assert_eq!(got.len(), t["tokens"].as_array().unwrap().len());
    assert_eq!(got[..tie], t["tokens"].as_array().unwrap()[..tie]);
    assert_eq!(a.body["tokens_evaluated"], t["prompt_tokens"]);
    assert_eq!(a.body["truncated"], json!(true));
}
