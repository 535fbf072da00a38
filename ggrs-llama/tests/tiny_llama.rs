//! The tiny random-weight LLaMA (GQA, 3 layers, f16) against llama.cpp's outputs.

mod common;

use std::sync::Arc;

use ggrs_llama::Model;

#[test]
fn tiny_llama_matches_llama_cpp() {
    let dir = common::reference_dir().join("tiny");
    let model = Arc::new(Model::load(dir.join("tiny-llama-f16.gguf")).expect("load tiny llama"));
    let refs = common::read_jsonl(&dir.join("tiny-llama-f16.public.jsonl"));
    for nth in [1, 2] {
        let rep = common::compare(&model, &refs, 0.01, nth, 16);
        eprintln!("tiny-llama, {nth} threads: {rep:?}");
        assert_eq!(rep.over_tol, 0, "logits beyond 0.01: {rep:?}");
        assert_eq!(rep.argmax_equal, rep.argmax_checked, "{rep:?}");
        assert!(rep.greedy_failures.is_empty(), "{:?}", rep.greedy_failures);
    }
}
