//! The tiny random-weight LLaMA (GQA, 3 layers, f16) against llama.cpp's outputs.

use crate::common;

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

/// `ModelOptions::copy_weights` off keeps the F16 weights (which no panel kernel repacks) in
/// the file's map (settled on huge pages), on it copies them; the logits of a prompt and of
/// the steps after it are the same bits either way.
#[test]
fn copying_weights_changes_where_they_are_read_not_the_logits() {
    use ggrs_llama::{ModelOptions, Session, SessionParams};
    let path = common::reference_dir().join("tiny/tiny-llama-f16.gguf");
    let load = |copy_weights: bool| {
        let opts = ModelOptions {
            pack_weights: true,
            copy_weights,
            huge_pages: true,
        };
        Arc::new(Model::load_with(&path, opts).expect("load tiny llama"))
    };
    let (copied, mapped) = (load(true), load(false));
    assert_eq!(
        mapped.packed_bytes(),
        0,
        "no weight of an F16 model is repacked"
    );
    // The weights left in the map are settled there instead.
    assert!(
        mapped.huge_pages().is_some(),
        "the mapped weights were not settled"
    );
    if cfg!(target_arch = "x86_64") {
        assert!(copied.packed_bytes() > 0, "the F16 weights were not copied");
        assert!(
            copied.huge_pages().is_none(),
            "every matrix weight was copied"
        );
        // The copies are part of the weights' data in a session's context: every 2-D matrix
        // `mul_mat` reads carries one (a plain copy of its bytes here), the norms and the
        // token embedding (read by `get_rows`; this model has its own output matrix) none.
        let mut ctx = ggrs_core::Context::with_mem_size(1 << 20);
        let mut carrying = 0;
        for w in copied.weights() {
            let t = copied.import(&mut ctx, w).expect("import");
            let matrix = w.ne[1] > 1 && w.ne[2] == 1 && w.name != "token_embd.weight";
            match ctx.packed(t) {
                Some(p) => {
                    assert!(matrix, "{} is not a matrix", w.name);
                    assert_eq!(p.bytes(), w.size(), "{}", w.name);
                    carrying += 1;
                }
                None => assert!(!matrix, "{} carries no copy", w.name),
            }
        }
        assert!(carrying > 0);
        let mut ctx = ggrs_core::Context::with_mem_size(1 << 20);
        for w in mapped.weights() {
            let t = mapped.import(&mut ctx, w).expect("import");
            assert!(ctx.packed(t).is_none(), "{}", w.name);
        }
    }
    let run = |model: Arc<Model>| {
        let params = SessionParams {
            n_ctx: 64,
            n_threads: 2,
            ..SessionParams::default()
        };
        let mut s = Session::new(model, params).expect("session");
        let mut out = Vec::new();
        s.eval(&[1, 15, 27, 3, 99], false).expect("prompt");
        out.extend_from_slice(s.logits());
        for t in [7u32, 42, 5] {
            s.eval(&[t], false).expect("step");
            out.extend_from_slice(s.logits());
        }
        out
    };
    let (a, b) = (run(copied), run(mapped));
    assert!(!a.is_empty());
    let differ = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count();
    assert_eq!(differ, 0, "{differ} of {} logits differ", a.len());
}
