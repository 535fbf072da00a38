//! Qwen2.5-Coder-0.5B (f16, q8_0, q4_0 made by our quantizer) against llama.cpp's outputs.
//! Needs the fetched source model (scripts/fetch-model.sh); see `common::qwen05b`.

mod common;

use std::sync::Arc;

use ggrs_llama::Model;

fn check(kind: &str, tol: f32) {
    let _one_at_a_time = common::serial();
    let Some(path) = common::qwen05b(kind) else {
        return;
    };
    let model = Arc::new(Model::load(&path).expect("load qwen05b"));
    let refs =
        common::read_jsonl(&common::reference_dir().join(format!("qwen05b/{kind}.public.jsonl")));
    let rep = common::compare(&model, &refs, tol, 2, 8);
    eprintln!("qwen05b {kind}: {rep:?}");
    assert_eq!(
        rep.over_tol, 0,
        "reference top-10 logits beyond {tol}: {rep:?}"
    );
    let share = rep.argmax_equal as f64 / rep.argmax_checked.max(1) as f64;
    assert!(share >= 0.98, "argmax agreement {share:.4} < 0.98: {rep:?}");
    assert!(
        rep.greedy_prefix_ok >= 5,
        "first 8 greedy tokens equal on {} of 6 prompts",
        rep.greedy_prefix_ok
    );
}

#[test]
fn qwen05b_f16_matches_llama_cpp() {
    check("f16", 0.05);
}

#[test]
fn qwen05b_q8_0_matches_llama_cpp() {
    check("q8_0", 0.1);
}

#[test]
fn qwen05b_q4_0_matches_llama_cpp() {
    check("q4_0", 0.25);
}
