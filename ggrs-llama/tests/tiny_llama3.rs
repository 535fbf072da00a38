//! The tiny random-weight Llama 3.1 (arch `llama`, rotary scaling by `rope_freqs.weight`,
//! GQA, 3 layers, f16) against llama.cpp's outputs.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ggrs_llama::arch::llama::LlamaModel;
use ggrs_llama::{Batch, LlamaError, Model, Session, SessionParams};

fn tiny_path() -> PathBuf {
    common::reference_dir().join("tiny/tiny-llama3-f16.gguf")
}

fn load() -> Arc<Model> {
    Arc::new(Model::load(tiny_path()).expect("load tiny llama3"))
}

fn tmp(name: &str) -> common::ScratchFile {
    common::ScratchFile::new("tiny-llama3", name)
}

/// A copy of the tiny model whose `rope_freqs.weight` has the shape `ne` (None: dropped).
fn with_rope_freqs(out: &Path, ne: Option<Vec<usize>>) {
    common::rewrite_gguf(
        &tiny_path(),
        out,
        |_, v| Some(v.clone()),
        |n, shape| match n {
            "rope_freqs.weight" => ne.clone(),
            _ => Some(shape.to_vec()),
        },
    );
}

#[test]
fn rope_freqs_are_loaded() {
    let m = load();
    let hp = &m.hparams;
    assert_eq!((hp.arch.as_str(), m.arch_name()), ("llama", "llama"));
    assert_eq!(
        (hp.n_embd, hp.n_layer, hp.head_dim, hp.n_rot),
        (128, 3, 32, 32)
    );
    assert_eq!(hp.rope_freq_base, 500_000.0);
    // The scaling is carried by the tensor only: no linear scale from the metadata.
    assert_eq!(hp.rope_freq_scale, 1.0);
    let id = m
        .arch_weights::<LlamaModel>()
        .expect("a llama model")
        .head
        .rope_freqs
        .expect("rope_freqs.weight read");
    let w = m.weight(id).expect("a weight of this model");
    assert_eq!(
        (w.name.as_str(), w.ne),
        ("rope_freqs.weight", [16, 1, 1, 1])
    );
}

#[test]
fn tiny_llama3_matches_llama_cpp() {
    let model = load();
    let refs = common::read_jsonl(&tiny_path().with_extension("public.jsonl"));
    common::assert_matches_reference("tiny-llama3", &model, &refs, 0.01);
}

/// The factors matter: the same file without `rope_freqs.weight` (plain rotary) misses the
/// reference.
#[test]
fn without_the_factors_the_logits_differ() {
    let p = tmp("no-rope-freqs.gguf");
    with_rope_freqs(&p, None);
    let model = Arc::new(Model::load(&p).expect("load the copy"));
    assert!(model
        .arch_weights::<LlamaModel>()
        .expect("a llama model")
        .head
        .rope_freqs
        .is_none());
    let refs = common::read_jsonl(&tiny_path().with_extension("public.jsonl"));
    let rep = common::compare(&model, &refs, 0.01, 2, 16);
    eprintln!(
        "tiny-llama3 without rope_freqs: max |Δlogit| {:.2e}",
        rep.max_abs_diff
    );
    assert!(rep.over_tol > 0, "{rep:?}");
}

/// A factor table that is not one value per rotary pair is a typed error naming it.
#[test]
fn misshapen_rope_freqs_is_named() {
    let p = tmp("bad-rope-freqs.gguf");
    with_rope_freqs(&p, Some(vec![15]));
    match Model::load(&p).expect_err("15 factors for 16 pairs") {
        LlamaError::BadShape {
            name,
            got,
            expected,
        } => {
            assert_eq!(name, "rope_freqs.weight");
            assert_eq!((got[0], expected), (15, vec![16]));
        }
        other => panic!("expected BadShape, got {other}"),
    }
}

/// Two prompts interleaved in one batch as sequences 0 and 1 give each token the logits it
/// gets when its prompt runs alone (the scaled rotary reads each token's own position).
#[test]
fn two_sequences_in_one_batch_match_each_alone() {
    let model = load();
    let refs = common::read_jsonl(&tiny_path().with_extension("public.jsonl"));
    let (a, b) = (&refs[1].tokens, &refs[2].tokens);
    let nv = model.hparams.n_vocab;
    let params = SessionParams {
        n_ctx: 256,
        n_batch: 256,
        n_threads: 2,
        logits_all: true,
        ..Default::default()
    };
    let mut s = Session::new(model.clone(), params).expect("session");
    let mut alone = Vec::new();
    for p in [a, b] {
        s.clear();
        s.eval(p, true).expect("eval");
        alone.push(s.all_logits().to_vec());
    }
    // Interleaved: a0 b0 a1 b1 …, the longer prompt's tail at the end.
    s.clear();
    let mut batch = Batch::new();
    let mut order = Vec::new();
    for i in 0..a.len().max(b.len()) {
        for (seq, p) in [a, b].into_iter().enumerate() {
            if let Some(&t) = p.get(i) {
                batch.push(t, i as i32, seq as u32, true);
                order.push((seq, i));
            }
        }
    }
    s.decode(&batch).expect("decode both");
    let both = s.all_logits();
    let mut max_diff = 0f32;
    for (row, &(seq, i)) in order.iter().enumerate() {
        let got = &both[row * nv..(row + 1) * nv];
        let want = &alone[seq][i * nv..(i + 1) * nv];
        for (x, y) in got.iter().zip(want) {
            max_diff = max_diff.max((x - y).abs());
        }
        assert_eq!(
            common::argmax(got),
            common::argmax(want),
            "seq {seq} token {i}"
        );
    }
    eprintln!("tiny-llama3, two sequences batched vs alone: max |Δlogit| {max_diff:.2e}");
    assert!(max_diff < 1e-3, "max |Δlogit| {max_diff}");
}
