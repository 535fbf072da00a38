//! Rotary scaling as llama.cpp applies it, on the tiny random-weight models made for it:
//! YaRN (`tiny-llama-yarn-f16`: `rope.scaling.type` yarn, factor 4, original context 32) and
//! LongRoPE (`tiny-phi3-longrope-f16`: long/short factor tensors, original context 16,
//! `rope.scaling.attn_factor` 1.5), both against llama.cpp's outputs, with prompts that run
//! past the original context; the choice between LongRoPE's long and short factors; and a
//! scaling type this build does not know, refused at load.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use ggrs_core::gguf::{GgufFile, Value};
use ggrs_llama::hparams::RopeScaling;
use ggrs_llama::{LlamaError, Model, Session, SessionParams};

fn tiny(name: &str) -> PathBuf {
    common::reference_dir().join(format!("tiny/{name}.gguf"))
}

fn tmp(name: &str) -> common::ScratchFile {
    common::ScratchFile::new("rope-scaling", name)
}

/// Every reference prompt's tokens plus its greedy run reach past `n_ctx_orig` in one
/// prompt at least, so positions beyond the original context are compared.
fn assert_crosses(refs: &[common::RefPrompt], n_ctx_orig: usize) {
    assert!(
        refs.iter().any(|r| r.tokens.len() > n_ctx_orig),
        "no prompt is longer than the original context {n_ctx_orig}"
    );
}

#[test]
fn yarn_hyperparameters() {
    let m = Model::load(tiny("tiny-llama-yarn-f16")).expect("load");
    let hp = &m.hparams;
    assert_eq!(hp.rope_scaling, RopeScaling::Yarn);
    assert_eq!((hp.n_ctx_orig, hp.rope_freq_scale), (32, 0.25));
    assert_eq!(hp.yarn.ext_factor, 1.0);
    assert_eq!((hp.yarn.beta_fast, hp.yarn.beta_slow), (32.0, 1.0));
    // llama.cpp hands ggml mscale / (1 + 0.1 ln 4) = 1 (to f32 rounding): ggml's rotary
    // multiplies the 1 + 0.1 ln 4 back.
    assert!((hp.yarn.attn_factor - 1.0).abs() < 1e-6, "{:?}", hp.yarn);
    let (_, yarn) = hp.rotary_with(ggrs_core::RopeMode::Normal, 16, 10000.0, 0.25);
    assert_eq!(yarn.expect("YaRN's blend").corr_dims, [0.0, 2.0]);
}

#[test]
fn tiny_llama_yarn_matches_llama_cpp() {
    let _one = common::serial();
    let path = tiny("tiny-llama-yarn-f16");
    let model = Arc::new(Model::load(&path).expect("load"));
    let refs = common::read_jsonl(&path.with_extension("public.jsonl"));
    assert_crosses(&refs, 32);
    common::assert_matches_reference("tiny-llama-yarn", &model, &refs, 0.01);
}

#[test]
fn tiny_phi3_longrope_matches_llama_cpp() {
    let _one = common::serial();
    let path = tiny("tiny-phi3-longrope-f16");
    let model = Arc::new(Model::load(&path).expect("load"));
    let hp = &model.hparams;
    assert_eq!((hp.rope_scaling, hp.n_ctx_orig), (RopeScaling::Linear, 16));
    assert_eq!((hp.yarn.ext_factor, hp.yarn.attn_factor), (0.0, 1.5));
    let refs = common::read_jsonl(&path.with_extension("public.jsonl"));
    assert_crosses(&refs, 16);
    common::assert_matches_reference("tiny-phi3-longrope", &model, &refs, 0.01);
}

/// The f32 values of a 1-D tensor of `file`.
fn f32_tensor(file: &GgufFile, name: &str) -> Vec<f32> {
    let t = file.tensor(name).expect("tensor present");
    file.tensor_data(t)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Largest difference between our prompt logits and the reference's top-10, over the
/// first prompt longer than 16 tokens, with a session of `n_ctx` cells.
fn max_diff_at(model: &Arc<Model>, r: &common::RefPrompt, n_ctx: usize) -> f32 {
    let params = SessionParams {
        n_ctx,
        n_batch: 256,
        n_threads: 2,
        logits_all: true,
        ..Default::default()
    };
    let mut s = Session::new(model.clone(), params).expect("session");
    s.eval(&r.tokens, true).expect("prompt");
    let nv = model.hparams.n_vocab;
    let all = s.all_logits();
    let mut worst = 0f32;
    for (i, top) in r.prompt_topk.iter().enumerate() {
        for &(id, l) in top {
            worst = worst.max((all[i * nv + id as usize] - l).abs());
        }
    }
    worst
}

/// llama.cpp takes LongRoPE's long factors when the context of a sequence (rounded up to 256
/// cells) exceeds the original context, the short ones otherwise. A copy whose original
/// context is 256, whose short factors are the reference file's long ones and whose long
/// factors are all 1: a 256-cell session takes the short factors and reproduces llama.cpp's
/// logits, a 512-cell session takes the long ones and does not.
#[test]
fn longrope_picks_factors_by_context() {
    let _one = common::serial();
    let src_path = tiny("tiny-phi3-longrope-f16");
    let src = GgufFile::open(&src_path).expect("open");
    let long = f32_tensor(&src, "rope_factors_long.weight");
    assert_eq!(long.len(), 6);
    let out = tmp("longrope-short.gguf");
    common::rewrite_gguf_adding(
        &src_path,
        &out,
        |k, v| match k {
            "phi3.rope.scaling.original_context_length" => Some(Value::U32(256)),
            _ => Some(v.clone()),
        },
        |n, ne| (!n.starts_with("rope_factors_")).then(|| ne.to_vec()),
        Vec::new(),
        vec![
            ("rope_factors_long.weight".to_string(), vec![1.0; 6]),
            ("rope_factors_short.weight".to_string(), long),
        ],
    );
    let model = Arc::new(Model::load(&out).expect("load the copy"));
    assert_eq!(model.hparams.n_ctx_orig, 256);
    let refs = common::read_jsonl(&src_path.with_extension("public.jsonl"));
    let r = refs
        .iter()
        .find(|r| r.tokens.len() > 16)
        .expect("a long prompt");
    let short = max_diff_at(&model, r, 256);
    assert!(short <= 0.01, "256 cells (short factors): {short}");
    let long = max_diff_at(&model, r, 512);
    assert!(long > 0.1, "512 cells (long factors, all 1): {long}");
    let _ = std::fs::remove_file(&out);
}

/// A scaling type this build does not implement is an error at load naming the key and the
/// type, not a silent fallback to linear scaling.
#[test]
fn unknown_scaling_type_is_refused() {
    let src = tiny("tiny-llama-yarn-f16");
    let bytes = common::gguf_with_key(
        &src,
        "llama.rope.scaling.type",
        Value::String("dynamic".into()),
    );
    let out = tmp("dynamic.gguf");
    std::fs::write(&out, bytes).expect("write");
    match Model::load(&out).expect_err("unknown scaling type") {
        LlamaError::UnsupportedRopeScaling { key, value } => {
            assert_eq!(
                (key.as_str(), value.as_str()),
                ("llama.rope.scaling.type", "dynamic")
            );
        }
        other => panic!("expected UnsupportedRopeScaling, got {other}"),
    }
    let _ = std::fs::remove_file(&out);
}

/// `none` ignores the factor; an absent type with a factor is linear scaling.
#[test]
fn none_and_absent_types() {
    let src = tiny("tiny-llama-yarn-f16");
    let none = common::gguf_with_key(
        &src,
        "llama.rope.scaling.type",
        Value::String("none".into()),
    );
    let none_path = tmp("none.gguf");
    std::fs::write(&none_path, none).expect("write");
    let f = GgufFile::open(&none_path).expect("parse");
    let hp = ggrs_llama::hparams::HParams::from_gguf(&f).expect("hparams");
    let _ = std::fs::remove_file(&none_path);
    assert_eq!(
        (hp.rope_scaling, hp.rope_freq_scale),
        (RopeScaling::None, 1.0)
    );
    assert_eq!((hp.yarn.ext_factor, hp.yarn.attn_factor), (0.0, 1.0));
    let out = tmp("absent.gguf");
    common::rewrite_gguf(
        &src,
        &out,
        |k, v| (k != "llama.rope.scaling.type").then(|| v.clone()),
        |_, ne| Some(ne.to_vec()),
    );
    let hp = ggrs_llama::hparams::HParams::from_gguf(&GgufFile::open(&out).expect("open"))
        .expect("hparams");
    assert_eq!(
        (hp.rope_scaling, hp.rope_freq_scale),
        (RopeScaling::Linear, 0.25)
    );
    assert_eq!(hp.yarn.ext_factor, 0.0);
    let _ = std::fs::remove_file(&out);
}
