//! The tiny random-weight Gemma 2 (3 layers, sliding window 8 on layers 0 and 2, soft-capped
//! attention and logits, f16) against llama.cpp's outputs, and its sliding window in the
//! batched multi-sequence path and across the steps of a chunked prompt.

use crate::common;

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
/// The logits are the same bits: flash attention visits a query's unmasked keys in cell
/// order and skips the others, so other sequences' cells change nothing, and every step has
/// at least 2 tokens per sequence, so every `mul_mat` runs the kernel it runs alone (a single
/// column takes the one-column F16 dot product, whose summation order differs).
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

        assert_eq!(rows.len(), order.len() * nv);
        let mut worst = 0.0f32;
        for (r, &(seq, i)) in order.iter().enumerate() {
            let ours = &rows[r * nv..(r + 1) * nv];
            let want = if seq == 0 { &la } else { &lb };
            worst = worst.max(max_diff(ours, &want[i * nv..(i + 1) * nv]));
        }
        eprintln!("batched (interleaved: {interleave}) vs alone: max |Δlogit| = {worst:e}");
        assert_eq!(worst, 0.0, "batched logits differ by {worst}");
    }
}

/// A long prompt evaluated in chunks (the window reaching back across chunk boundaries,
/// into what earlier steps cached) gives the logits of one evaluation, bit for bit (every
/// chunk has 2 to 63 tokens, so each step runs the kernels one evaluation runs).
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
    assert_eq!(d_chunks, 0.0, "chunked logits differ by {d_chunks}");
    assert_eq!(d_split, 0.0, "split logits differ by {d_split}");
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

/// A cache of another type than f16 takes attention without flash attention (`K·q`,
/// soft-capped by `tanh`, softmax, values), from keys and values not rounded to f16: the
/// reference logits (llama.cpp, f16 cache) within 0.02 (twice the flash-attention test's
/// tolerance: the keys and values are not rounded to f16 as the reference's were; ≈0.01
/// measured), the same argmax.
#[test]
fn an_f32_cache_gives_the_reference_logits_within_rounding() {
    let _one = common::serial();
    let model = load();
    let nv = model.hparams.n_vocab;
    let dir = common::reference_dir().join("tiny");
    let refs = common::read_jsonl(&dir.join("tiny-gemma2-f16.public.jsonl"));
    let params = SessionParams {
        n_ctx: 64,
        n_threads: 2,
        logits_all: true,
        kv_type: ggrs_core::DType::F32,
        ..Default::default()
    };
    let mut s = Session::new(model.clone(), params).expect("session");
    let (mut worst, mut checked) = (0.0f32, 0);
    for r in &refs {
        s.clear();
        s.eval(&r.tokens, true).expect("prompt");
        let all = s.all_logits();
        for (i, top) in r.prompt_topk.iter().enumerate() {
            let row = &all[i * nv..(i + 1) * nv];
            for &(id, l) in top {
                worst = worst.max((row[id as usize] - l).abs());
            }
            if top[0].1 - top[1].1 > 0.1 {
                assert_eq!(
                    common::argmax(row),
                    top[0].0,
                    "prompt {:?} position {i}",
                    r.prompt
                );
                checked += 1;
            }
        }
    }
    eprintln!("f32 cache vs llama.cpp: max |Δlogit| = {worst:e}, {checked} argmax checked");
    assert!(checked > 50);
    assert!(worst < 0.02, "an f32 cache moves the logits by {worst}");
}

/// Gemma 2's own keys out of range are typed errors naming the key.
#[test]
fn bad_gemma2_keys_are_typed_errors() {
    use ggrs_core::gguf::{GgufFile, Value};
    use ggrs_llama::LlamaError;

    let path = common::reference_dir().join("tiny/tiny-gemma2-f16.gguf");
    let load = |key: &str, value: Value| {
        let bytes = common::gguf_with_key(&path, key, value);
        Model::from_gguf(GgufFile::from_bytes(Arc::new(bytes)).expect("parse"))
    };
    for (key, value) in [
        ("gemma2.attn_logit_softcapping", Value::F32(0.0)),
        ("gemma2.final_logit_softcapping", Value::F32(f32::NAN)),
        (
            "gemma2.final_logit_softcapping",
            Value::String("ten".into()),
        ),
        ("gemma2.attention.sliding_window", Value::U32(0)),
        ("gemma2.attention.value_length", Value::U32(32)),
    ] {
        match load(key, value.clone()) {
            Err(LlamaError::BadKey { key: k, detail }) => {
                assert_eq!(k, key, "{detail}");
            }
            other => panic!("{key} = {value:?}: {other:?}"),
        }
    }
    // The file's own values load.
    assert!(load("gemma2.attention.sliding_window", Value::U32(8)).is_ok());
}
