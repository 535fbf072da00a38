//! The tiny random-weight Gemma 2 (3 layers, sliding window 8 on layers 0 and 2, soft-capped
//! attention and logits, f16) against llama.cpp's outputs, and its sliding window in the
//! batched multi-sequence path and across the steps of a chunked prompt.

mod common;

use std::sync::Arc;

use ggrs_llama::{Batch, Model, Session, SessionParams};

fn load() -> Arc<Model> {
    let path = common::reference_dir().join("tiny/tiny-gemma2-f16.gguf");
    Arc::new(Model::load(path).expect("load tiny gemma2"))
}

#[test]
fn tiny_gemma2_matches_llama_cpp() {
    let _one = common::serial();
    let dir = common::reference_dir().join("tiny");
    let model = load();
    let refs = common::read_jsonl(&dir.join("tiny-gemma2-f16.public.jsonl"));
    assert!(
        refs.iter().any(|r| r.tokens.len() > 8),
        "no prompt is longer than the window"
    );
    for nth in [1, 2] {
        let rep = common::compare(&model, &refs, 0.01, nth, 16);
        eprintln!("tiny-gemma2, {nth} threads: {rep:?}");
        assert_eq!(rep.over_tol, 0, "logits beyond 0.01: {rep:?}");
        assert_eq!(rep.argmax_equal, rep.argmax_checked, "{rep:?}");
        assert!(rep.greedy_failures.is_empty(), "{:?}", rep.greedy_failures);
    }
}

/// The tokens of the reference prompts, one after the other, as a long input.
fn long_input(n: usize) -> Vec<u32> {
    let dir = common::reference_dir().join("tiny");
    let refs = common::read_jsonl(&dir.join("tiny-gemma2-f16.public.jsonl"));
    let all: Vec<u32> = refs.iter().flat_map(|r| r.tokens.clone()).collect();
    assert!(all.len() >= n, "the prompts hold only {} tokens", all.len());
    all[..n].to_vec()
}

fn session(model: &Arc<Model>, n_batch: usize) -> Session {
    let params = SessionParams {
        n_ctx: 256,
        n_batch,
        n_threads: 2,
        logits_all: true,
        ..Default::default()
    };
    Session::new(model.clone(), params).expect("session")
}

/// Largest difference between two logit sets of the same length.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Two sequences longer than the window, of different lengths, in one batch (then two more
/// tokens each, again in one batch) give each the logits it gets alone: each token's window
/// is its own sequence's last 8 positions.
///
/// Bits can differ only through summation order: attention sums over cache cells, and a
/// sequence placed in other cells than when alone puts its keys in other SIMD lanes (the
/// masked cells add exact zeros). Every step has at least 2 tokens per sequence, so every
/// `mul_mat` runs the same kernel as alone (a single column takes the one-column F16 dot
/// product, whose order differs). The first sequence, placed first, occupies the cells it
/// occupies alone, so its prompt logits are the same bits.
#[test]
fn batched_sequences_match_each_alone() {
    let _one = common::serial();
    let model = load();
    let nv = model.hparams.n_vocab;
    let toks = long_input(38);
    let (a, b) = (&toks[..13], &toks[13..34]);
    let (next_a, next_b) = (&toks[34..36], &toks[36..38]);

    // Each alone: its prompt, then its next two tokens.
    let alone = |prompt: &[u32], next: &[u32]| {
        let mut s = session(&model, 256);
        s.eval(prompt, true).expect("prompt");
        let mut out = s.all_logits().to_vec();
        s.eval(next, true).expect("step");
        out.extend_from_slice(s.all_logits());
        out
    };
    let (la, lb) = (alone(a, next_a), alone(b, next_b));

    for interleave in [false, true] {
        let mut s = session(&model, 256);
        let mut batch = Batch::new();
        let mut order = Vec::new(); // (sequence, position) of each output row
        let mut push = |batch: &mut Batch, seq: u32, i: usize, t: u32| {
            batch.push(t, i as i32, seq, true);
            order.push((seq, i));
        };
        if interleave {
            for i in 0..b.len() {
                for (seq, p) in [(0u32, a), (1, b)] {
                    if let Some(&t) = p.get(i) {
                        push(&mut batch, seq, i, t);
                    }
                }
            }
        } else {
            for (seq, p) in [(0u32, a), (1, b)] {
                for (i, &t) in p.iter().enumerate() {
                    push(&mut batch, seq, i, t);
                }
            }
        }
        s.decode(&batch).expect("batched prompts");
        let mut rows = s.all_logits().to_vec();
        // The step: the second sequence's tokens first, then the first's, interleaved.
        let mut step = Batch::new();
        for k in 0..2 {
            step.push(next_b[k], (b.len() + k) as i32, 1, true);
            order.push((1, b.len() + k));
            step.push(next_a[k], (a.len() + k) as i32, 0, true);
            order.push((0, a.len() + k));
        }
        s.decode(&step).expect("batched step");
        rows.extend_from_slice(s.all_logits());

        let (mut worst, mut first_prompt) = (0.0f32, 0.0f32);
        for (r, &(seq, i)) in order.iter().enumerate() {
            let ours = &rows[r * nv..(r + 1) * nv];
            let want = if seq == 0 { &la } else { &lb };
            let d = max_diff(ours, &want[i * nv..(i + 1) * nv]);
            worst = worst.max(d);
            if seq == 0 && i < a.len() {
                first_prompt = first_prompt.max(d);
            }
        }
        eprintln!(
            "batched (interleaved: {interleave}) vs alone: max |Δlogit| = {worst:e} \
             (first sequence's prompt: {first_prompt:e})"
        );
        if !interleave {
            assert_eq!(first_prompt, 0.0, "same cells, other bits");
        }
        assert!(worst <= 1e-4, "batched logits differ by {worst}");
    }
}

/// A long prompt evaluated in chunks (the window reaching back across chunk boundaries,
/// into what earlier steps cached) gives the logits of one evaluation.
#[test]
fn chunked_prompt_matches_one_evaluation() {
    let _one = common::serial();
    let model = load();
    let toks = long_input(40);

    let mut whole = session(&model, 256);
    whole.eval(&toks, true).expect("whole prompt");
    let want = whole.all_logits().to_vec();

    // By hand, in uneven chunks, each shorter or longer than the window.
    let mut s = session(&model, 256);
    let mut got = Vec::new();
    let mut start = 0;
    for len in [5, 9, 3, 12, 11] {
        s.eval(&toks[start..start + len], true).expect("chunk");
        got.extend_from_slice(s.all_logits());
        start += len;
    }
    assert_eq!(start, toks.len());
    let d_chunks = max_diff(&got, &want);

    // And split by the session itself (n_batch 7).
    let mut split = session(&model, 7);
    split.eval(&toks, true).expect("split prompt");
    let d_split = max_diff(split.all_logits(), &want);

    eprintln!("chunked vs whole: max |Δlogit| = {d_chunks:e}; n_batch 7: {d_split:e}");
    assert!(d_chunks <= 1e-5, "chunked logits differ by {d_chunks}");
    assert!(d_split <= 1e-5, "split logits differ by {d_split}");
}

/// The sliding window matters: positions past it see fewer keys than a causal mask would
/// give them, so the same model with a window wider than the prompt (every layer global)
/// predicts differently there, while the first 8 positions (inside the window) are the same.
#[test]
fn the_window_changes_what_late_positions_see() {
    use ggrs_llama::arch::gemma2::{Gemma2, Gemma2Model};
    use ggrs_llama::architecture::{ArchModel, Architecture};
    use ggrs_llama::hparams::HParams;
    use ggrs_llama::loader::WeightLoader;

    /// Gemma 2 with its window widened past any position.
    struct NoWindow;
    impl Architecture for NoWindow {
        fn name(&self) -> &'static str {
            "gemma2"
        }
        fn load(
            &self,
            hp: &HParams,
            l: &mut WeightLoader<'_>,
        ) -> ggrs_llama::Result<Box<dyn ArchModel>> {
            let any: Box<dyn std::any::Any> = Gemma2.load(hp, l)?;
            let mut m = any.downcast::<Gemma2Model>().expect("a Gemma2Model");
            m.consts.window = u32::MAX;
            Ok(m)
        }
    }

    let _one = common::serial();
    let model = load();
    let path = common::reference_dir().join("tiny/tiny-gemma2-f16.gguf");
    let wide = Arc::new(Model::load_arch(path, &NoWindow, Default::default()).expect("load"));
    let nv = model.hparams.n_vocab;
    let toks = long_input(20);
    let run = |m: &Arc<Model>| {
        let mut s = session(m, 256);
        s.eval(&toks, true).expect("prompt");
        s.all_logits().to_vec()
    };
    let (windowed, global) = (run(&model), run(&wide));
    let early = max_diff(&windowed[..8 * nv], &global[..8 * nv]);
    let late = max_diff(&windowed[8 * nv..], &global[8 * nv..]);
    eprintln!("window vs none: first 8 positions {early:e}, later {late:e}");
    assert_eq!(early, 0.0, "positions inside the window changed");
    assert!(late > 1e-3, "the window changed nothing ({late})");
}
