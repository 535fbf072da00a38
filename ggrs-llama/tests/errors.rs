//! Bad input gets typed errors that name the problem: unknown architecture, missing or
//! misshapen tensors, prompts longer than the context, out-of-range token ids, empty prompts.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ggrs_core::gguf::Value;
use ggrs_llama::{Batch, GenerateParams, LlamaError, Model, Session, SessionParams};

fn tiny_path() -> PathBuf {
    common::reference_dir().join("tiny/tiny-llama-f16.gguf")
}

/// A copy of the tiny model rewritten by [`common::rewrite_gguf`].
fn rewrite(
    out: &Path,
    edit_kv: impl Fn(&str, &Value) -> Option<Value>,
    keep: impl Fn(&str, &[usize]) -> Option<Vec<usize>>,
) {
    common::rewrite_gguf(&tiny_path(), out, edit_kv, keep)
}

fn tmp(name: &str) -> common::ScratchFile {
    common::ScratchFile::new("errors", name)
}

#[test]
fn unknown_architecture_is_named() {
    let p = tmp("arch.gguf");
    rewrite(
        &p,
        |k, v| {
            Some(if k == "general.architecture" {
                Value::String("gptj".into())
            } else {
                v.clone()
            })
        },
        |_, ne| Some(ne.to_vec()),
    );
    let e = Model::load(&p).unwrap_err();
    assert!(
        matches!(&e, LlamaError::UnsupportedArch { name, .. } if name == "gptj"),
        "{e}"
    );
    assert!(
        e.to_string().contains("gptj") && e.to_string().contains("llama"),
        "{e}"
    );
}

#[test]
fn missing_tensor_is_named() {
    let p = tmp("missing.gguf");
    rewrite(
        &p,
        |_, v| Some(v.clone()),
        |n, ne| (n != "blk.1.ffn_up.weight").then(|| ne.to_vec()),
    );
    let e = Model::load(&p).unwrap_err();
    assert!(
        matches!(&e, LlamaError::MissingTensor(n) if n == "blk.1.ffn_up.weight"),
        "{e}"
    );
}

#[test]
fn wrong_shape_is_named() {
    let p = tmp("shape.gguf");
    rewrite(
        &p,
        |_, v| Some(v.clone()),
        |n, ne| {
            Some(if n == "blk.2.attn_k.weight" {
                vec![ne[0], ne[1] * 2]
            } else {
                ne.to_vec()
            })
        },
    );
    let e = Model::load(&p).unwrap_err();
    match &e {
        LlamaError::BadShape {
            name,
            got,
            expected,
        } => {
            assert_eq!(name, "blk.2.attn_k.weight");
            assert_eq!(got[1], 128);
            assert_eq!(expected, &vec![128, 64]);
        }
        other => panic!("expected BadShape, got {other}"),
    }
}

#[test]
fn missing_hyperparameter_is_named() {
    let p = tmp("key.gguf");
    rewrite(
        &p,
        |k, v| (k != "llama.block_count").then(|| v.clone()),
        |_, ne| Some(ne.to_vec()),
    );
    let e = Model::load(&p).unwrap_err();
    assert!(
        matches!(&e, LlamaError::MissingKey(k) if k == "llama.block_count"),
        "{e}"
    );
}

#[test]
fn session_rejects_bad_prompts() {
    let model = Arc::new(Model::load(tiny_path()).unwrap());
    let mut s = Session::new(
        model.clone(),
        SessionParams {
            n_ctx: 16,
            n_batch: 8,
            n_threads: 2,
            ..SessionParams::default()
        },
    )
    .unwrap();
    // Longer than the context.
    let long: Vec<u32> = (0..20).map(|i| 100 + i).collect();
    let e = s.eval(&long, false).unwrap_err();
    assert!(
        matches!(
            e,
            LlamaError::ContextFull {
                n_tokens: 20,
                n_ctx: 16,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        s.kv_cache().used(),
        0,
        "a rejected prompt leaves the cache empty"
    );
    // Out-of-range token id.
    let e = s.eval(&[1, 32000], false).unwrap_err();
    assert!(
        matches!(
            e,
            LlamaError::TokenOutOfRange {
                id: 32000,
                n_vocab: 32000
            }
        ),
        "{e}"
    );
    // Empty prompts.
    assert!(matches!(
        s.eval(&[], false).unwrap_err(),
        LlamaError::EmptyPrompt
    ));
    let e = s
        .generate_tokens(&[], &GenerateParams::default(), |_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap_err();
    assert!(matches!(e, LlamaError::EmptyPrompt), "{e}");
    // Filling the cache across steps: 10 fit, 10 more do not.
    s.eval(&long[..10], false).unwrap();
    let e = s.eval(&long[..10], false).unwrap_err();
    assert!(
        matches!(e, LlamaError::ContextFull { n_past: 10, .. }),
        "{e}"
    );
    // A bad batch: mismatched field lengths, negative position.
    let mut b = Batch::from_tokens(&[5, 6], 0, 0, false);
    b.pos.pop();
    assert!(matches!(
        s.decode(&b).unwrap_err(),
        LlamaError::InvalidArgument(_)
    ));
    // More than one output without logits_all.
    let b = Batch::from_tokens(&[5, 6], 11, 0, true);
    assert!(matches!(
        s.decode(&b).unwrap_err(),
        LlamaError::InvalidArgument(_)
    ));
}

#[test]
fn greedy_generation_is_reproducible_and_stops() {
    let model = Arc::new(Model::load(tiny_path()).unwrap());
    let mut s = Session::new(
        model.clone(),
        SessionParams {
            n_ctx: 64,
            n_threads: 2,
            ..SessionParams::default()
        },
    )
    .unwrap();
    let params = GenerateParams {
        max_tokens: 12,
        sampling: ggrs_llama::SamplingParams {
            temperature: 0.9,
            seed: 42,
            ..Default::default()
        },
        ..GenerateParams::default()
    };
    let a = s
        .generate("Once upon a time", &params, |_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    s.clear();
    let mut streamed = String::new();
    let b = s
        .generate("Once upon a time", &params, |ev| {
            streamed.push_str(&ev.text);
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(a.tokens, b.tokens, "same seed, same tokens");
    assert_eq!(streamed, b.text, "streamed pieces add up to the text");
    assert!(a.tokens.len() <= 12);
    // A callback can stop the generation.
    s.clear();
    let c = s
        .generate("Once upon a time", &params, |_| {
            std::ops::ControlFlow::Break(())
        })
        .unwrap();
    assert_eq!(c.tokens.len(), 1);
    assert_eq!(c.stop, ggrs_llama::StopReason::Callback);
}

/// A norm epsilon that is NaN or negative, and a model of 0 blocks, are refused at load
/// (they loaded and computed NaN, or nothing, without a word).
#[test]
fn bad_norm_epsilon_and_zero_blocks_are_refused() {
    for (key, value, words) in [
        (
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(f32::NAN),
            "NaN",
        ),
        (
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(-1e-5),
            "-0.00001",
        ),
        ("llama.block_count", Value::U32(0), "0 layers"),
    ] {
        let p = tmp("hparam.gguf");
        rewrite(
            &p,
            |k, v| Some(if k == key { value.clone() } else { v.clone() }),
            |_, ne| Some(ne.to_vec()),
        );
        let e = Model::load(&p).unwrap_err();
        assert!(
            matches!(&e, LlamaError::BadKey { key: k, .. } if k == key),
            "{key}: {e}"
        );
        assert!(e.to_string().contains(words), "{key}: {e}");
    }
}
