//! The tiny random-weight Phi-3 (arch `phi3`: fused Q|K|V, fused gate|up, NEOX rotary, GQA,
//! 3 layers, f16) against llama.cpp's outputs.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use ggrs_core::RopeMode;
use ggrs_llama::arch::fused::{FusedModel, QkvWeights};
use ggrs_llama::Model;

fn tiny_path() -> PathBuf {
    common::reference_dir().join("tiny/tiny-phi3-f16.gguf")
}

fn load() -> Arc<Model> {
    Arc::new(Model::load(tiny_path()).expect("load tiny phi3"))
}

#[test]
fn hyperparameters_and_fused_weights() {
    let m = load();
    let hp = &m.hparams;
    assert_eq!((hp.arch.as_str(), m.arch_name()), ("phi3", "phi3"));
    assert_eq!((hp.n_embd, hp.n_layer, hp.n_ff), (128, 3, 320));
    assert_eq!((hp.n_head, hp.n_head_kv, hp.head_dim), (4, 2, 32));
    // Rotary over the whole head.
    assert_eq!(hp.n_rot, hp.head_dim);
    let fm = m
        .arch_weights::<FusedModel>()
        .expect("a fused-projection model");
    assert_eq!(fm.style.rope_mode, RopeMode::Neox);
    assert!(fm.style.scale_queries);
    // No separate Q/K/V projection or gate was read.
    for w in m.weights() {
        for part in ["attn_q.", "attn_k.", "attn_v.", "ffn_gate."] {
            assert!(!w.name.contains(part), "{} read", w.name);
        }
    }
    let l0 = &fm.layers[0];
    let QkvWeights::Fused { w: wqkv, b: None } = l0.qkv else {
        panic!("expected a fused qkv without bias, got {:?}", l0.qkv);
    };
    assert_eq!(m.weight(wqkv).expect("weight").ne[..2], [128, 128 + 2 * 64]);
    assert_eq!(m.weight(l0.ffn_up).expect("weight").ne[..2], [128, 2 * 320]);
    assert!(l0.bo.is_none() && fm.output_b.is_none());
}

#[test]
fn tiny_phi3_matches_llama_cpp() {
    let model = load();
    let refs = common::read_jsonl(&tiny_path().with_extension("public.jsonl"));
    common::assert_matches_reference("tiny-phi3", &model, &refs, 0.01);
}
