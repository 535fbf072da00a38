//! `ggrs quantize --imatrix` against `llama-quantize --imatrix`: with llama.cpp's importance
//! matrix for Qwen2.5-Coder-0.5B (`qwen05b/imatrix-gpl3.gguf`), the recipes Q4_K_M, IQ4_XS
//! and Q2_K_S choose every tensor's type as llama.cpp did (`tensor-sha256-lowbit.json`:
//! `q4_k_m-imat`, `iq4_xs-imat`, `q2_k_s`), and layer 0's seven matrices and
//! layer 23's `ffn_down` come out byte-identical (sha256). The whole files are compared
//! by hand (README); this keeps the test to seconds. Skips without the f16 conversion.

use crate::common;

use std::sync::Arc;

use ggrs_core::gguf::GgufFile;
use ggrs_core::quants::{quantize_row_dyn, quantize_row_weighted_dyn};
use ggrs_llama::imatrix::QuantWeights;
use ggrs_llama::quantize::{plan, FileType, QuantizeError, RecipeOptions};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn listing(kind: &str) -> serde_json::Map<String, Value> {
    let path = common::reference_dir().join("qwen05b/tensor-sha256-lowbit.json");
    let all: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json");
    all[kind].as_object().expect("listing").clone()
}

fn weights() -> Arc<QuantWeights> {
    let path = common::reference_dir().join("qwen05b/imatrix-gpl3.gguf");
    Arc::new(QuantWeights::load(&path, &[], &[]).expect("load the imatrix"))
}

fn check(kind: &str, ft: FileType) -> Vec<String> {
    let Some(f16) = common::qwen05b("f16") else {
        return Vec::new();
    };
    let input = GgufFile::open(&f16).expect("open f16");
    let mut recipe = RecipeOptions::new(ft);
    recipe.imatrix = Some(weights());
    let p = plan(&input, &recipe).expect("plan");
    let want = listing(kind);
    let mut bad = Vec::new();
    for (i, t) in input.tensors().iter().enumerate() {
        let w = &want[&t.name];
        let wt = w["type"].as_str().expect("type");
        if !wt.eq_ignore_ascii_case(p.types[i].name()) {
            bad.push(format!(
                "{kind}: {} is {}, llama.cpp's {wt}",
                t.name, p.types[i]
            ));
            continue;
        }
        let sample = t.name.starts_with("blk.0.") || t.name == "blk.23.ffn_down.weight";
        if !sample || p.types[i] == t.dtype {
            continue;
        }
        let (ne0, to) = (t.ne[0], p.types[i]);
        let data = input.tensor_data(t);
        let row = to.row_size(ne0);
        let mut out = vec![0u8; row * (data.len() / (2 * ne0))];
        let mut x = vec![0f32; ne0];
        for (src, dst) in data.chunks_exact(2 * ne0).zip(out.chunks_exact_mut(row)) {
            for (v, c) in x.iter_mut().zip(src.chunks_exact(2)) {
                *v = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
            match &p.importance[i] {
                Some(qw) => quantize_row_weighted_dyn(to, &x, qw, dst),
                None => quantize_row_dyn(to, &x, dst),
            }
            .expect("quantize");
        }
        let hex = format!("{:x}", Sha256::digest(&out));
        if hex != w["sha256"].as_str().expect("sha") {
            bad.push(format!(
                "{kind}: {} ({to}) differs from llama.cpp's bytes",
                t.name
            ));
        }
    }
    bad
}

#[test]
fn q4_k_m_with_imatrix_matches_llama_quantize() {
    let bad = check("q4_k_m-imat", FileType::Q4KM);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn iq4_xs_with_imatrix_matches_llama_quantize() {
    let bad = check("iq4_xs-imat", FileType::IQ4XS);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn q2_k_s_with_imatrix_matches_llama_quantize() {
    let bad = check("q2_k_s", FileType::Q2KS);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn q2_k_s_without_imatrix_is_refused() {
    let Some(f16) = common::qwen05b("f16") else {
        return;
    };
    let input = GgufFile::open(&f16).expect("open f16");
    let err = plan(&input, &RecipeOptions::new(FileType::Q2KS)).unwrap_err();
    assert!(matches!(err, QuantizeError::NeedsImatrix { .. }), "{err}");
    // With the importance matrix but not for the tensors that need it.
    let path = common::reference_dir().join("qwen05b/imatrix-gpl3.gguf");
    let mut recipe = RecipeOptions::new(FileType::Q2KS);
    let w = QuantWeights::load(&path, &["attn".into()], &[]).expect("load");
    recipe.imatrix = Some(Arc::new(w));
    let err = plan(&input, &recipe).unwrap_err();
    assert!(
        matches!(err, QuantizeError::MissingImatrixEntry { .. }),
        "{err}"
    );
}
