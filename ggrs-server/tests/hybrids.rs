//! The recurrent hybrids (Qwen3.5, LFM2, Granite 4.0-H) served over HTTP with several
//! slots, on their tiny random-weight models: each request gives llama.cpp's 16 greedy
//! tokens (the reference `ggrs run` also matches, `ggrs-llama/tests/tiny_hybrids.rs`),
//! alone and with the others at once; the second turn of a chat resumes from a
//! recurrent-state checkpoint (`/metrics` counts it) and answers as without the cache.

use std::sync::Mutex;

use crate::common;

use common::{config, TestServer};
use serde_json::{json, Value};

/// The reference prompts of a tiny model (`.public.jsonl`): token ids and llama.cpp's
/// greedy continuation.
fn references(model: &str) -> Vec<(Vec<u64>, Vec<u64>)> {
    let path = common::tiny(model).with_extension("public.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let ids = |v: &Value| -> Vec<u64> {
        v.as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("json line");
            (ids(&v["tokens"]), ids(&v["greedy"]))
        })
        .collect()
}

/// The tokens a greedy `/completion` of `prompt` (ids) generates.
fn greedy(s: &TestServer, prompt: &[u64]) -> Vec<u64> {
    let a = s.post(
        "/completion",
        &json!({"prompt": prompt, "n_predict": 16, "temperature": 0, "return_tokens": true}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    a.body["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn hybrids_serve_batched_and_resume_chats_from_checkpoints() {
    for model in [
        "tiny-qwen35-f16.gguf",
        "tiny-lfm2-f16.gguf",
        "tiny-granite-hybrid-f16.gguf",
    ] {
        let mut c = config(3);
        c.model_path = common::tiny(model);
        let s = TestServer::start(c);
        let refs = references(model);
        let refs = &refs[..refs.len().min(4)];
        // Alone: llama.cpp's greedy tokens.
        for (prompt, want) in refs {
            assert_eq!(&greedy(&s, prompt), want, "{model}: alone");
        }
        // All at once, twice over (six requests on three slots): the same tokens.
        let got = Mutex::new(Vec::new());
        std::thread::scope(|sc| {
            for (i, (prompt, _)) in refs.iter().chain(refs).enumerate() {
                let (s, got) = (&s, &got);
                sc.spawn(move || {
                    let t = greedy(s, prompt);
                    got.lock().unwrap().push((i % refs.len(), t));
                });
            }
        });
        for (i, t) in got.into_inner().unwrap() {
            assert_eq!(t, refs[i].1, "{model}: prompt {i} batched");
        }

        // A chat's second turn shares the first turn's prompt but not the reply the slot
        // generated (the client sends the answer it kept, as a template that rewrites
        // earlier replies does): the recurrent state cannot rewind, so the slot resumes
        // from a checkpoint of it.
        let turn = |messages: &Value, cache: bool| {
            let b = json!({"messages": messages, "max_tokens": 8, "temperature": 0,
                           "cache_prompt": cache});
            let a = s.post("/v1/chat/completions", &b);
            assert_eq!(a.status, 200, "{}", a.body);
            a.body["choices"][0]["message"]["content"]
                .as_str()
                .expect("content")
                .to_string()
        };
        let first =
            json!([{"role": "user", "content": "Tell me a story about a dragon and a knight."}]);
        let reply = turn(&first, true);
        assert!(!reply.is_empty(), "{model}");
        let hits0 = s.metric("ggrs_checkpoint_hits_total");
        let cached0 = s.metric("ggrs_cached_prompt_tokens_total");
        let second = json!([
            {"role": "user", "content": "Tell me a story about a dragon and a knight."},
            {"role": "assistant", "content": "Once upon a time, a dragon met a knight."},
            {"role": "user", "content": "And then?"}
        ]);
        let cached = turn(&second, true);
        assert_eq!(
            s.metric("ggrs_checkpoint_hits_total"),
            hits0 + 1.0,
            "{model}: the second turn resumed from a checkpoint"
        );
        assert!(
            s.metric("ggrs_cached_prompt_tokens_total") > cached0,
            "{model}: the shared prompt came from the cache"
        );
        assert_eq!(
            turn(&second, false),
            cached,
            "{model}: as without the cache"
        );
    }
}
