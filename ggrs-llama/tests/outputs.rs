//! Asking for fewer outputs (the last token only) gives the same logits as asking for all.

use crate::common;

use std::sync::Arc;

use ggrs_llama::{Batch, Model, Session, SessionParams};

#[test]
fn last_token_logits_equal_all_logits_row() {
    let model =
        Arc::new(Model::load(common::reference_dir().join("tiny/tiny-llama-f16.gguf")).unwrap());
    let refs =
        common::read_jsonl(&common::reference_dir().join("tiny/tiny-llama-f16.public.jsonl"));
    let nv = model.hparams.n_vocab;
    let mk = |all: bool| {
        Session::new(
            model.clone(),
            SessionParams {
                n_ctx: 128,
                n_threads: 2,
                logits_all: all,
                ..SessionParams::default()
            },
        )
        .unwrap()
    };
    let (mut a, mut b) = (mk(true), mk(false));
    for r in &refs {
        a.clear();
        b.clear();
        a.eval(&r.tokens, true).unwrap();
        b.eval(&r.tokens, false).unwrap();
        let n = r.tokens.len();
        let want = &a.all_logits()[(n - 1) * nv..n * nv];
        let got = b.logits();
        let diff = want
            .iter()
            .zip(got)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        // The output projection of one row sums as ggml's `vec_dot` does and that of several
        // rows as its tinyBLAS does (llama.cpp's own split, which ggrs reproduces bit for bit),
        // so with F16 weights the two may differ in the last bits; anything beyond a few
        // roundings of a logit (|logit| < 20 here) is a real difference.
        assert!(
            diff <= 1e-5,
            "prompt {:?}: last-token logits differ by {diff}",
            r.prompt
        );
        // Some outputs in the middle of a batch, with logits_all.
        let mut batch = Batch::from_tokens(&r.tokens, 0, 0, false);
        batch.logits[0] = true;
        batch.logits[n / 2] = true;
        a.clear();
        a.decode(&batch).unwrap();
        let mut full = mk(true);
        full.eval(&r.tokens, true).unwrap();
        let all = full.all_logits();
        for (k, &i) in [0, n / 2].iter().enumerate() {
            assert_eq!(
                &a.all_logits()[k * nv..(k + 1) * nv],
                &all[i * nv..(i + 1) * nv],
                "row {i}"
            );
        }
    }
}

#[test]
fn greedy_generate_follows_the_reference() {
    let model =
        Arc::new(Model::load(common::reference_dir().join("tiny/tiny-llama-f16.gguf")).unwrap());
    let refs =
        common::read_jsonl(&common::reference_dir().join("tiny/tiny-llama-f16.public.jsonl"));
    let mut s = Session::new(
        model.clone(),
        SessionParams {
            n_ctx: 128,
            n_threads: 2,
            ..SessionParams::default()
        },
    )
    .unwrap();
    for r in &refs {
        s.clear();
        let params = ggrs_llama::GenerateParams {
            max_tokens: 4,
            sampling: ggrs_llama::SamplingParams::greedy(),
            ignore_eos: true,
            ..Default::default()
        };
        let g = s
            .generate_tokens(&r.tokens, &params, |_| std::ops::ControlFlow::Continue(()))
            .unwrap();
        assert_eq!(g.tokens, r.greedy[..4], "prompt {:?}", r.prompt);
        // Through the tokenizer: the reference prompts tokenize to the reference tokens.
        s.clear();
        let g2 = s
            .generate(&r.prompt.replace("\\n", "\n"), &params, |_| {
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(g2.prompt_tokens, r.tokens, "prompt {:?}", r.prompt);
        assert_eq!(g2.tokens, r.greedy[..4], "prompt {:?}", r.prompt);
    }
}
