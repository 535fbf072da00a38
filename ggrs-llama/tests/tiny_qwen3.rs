//! The tiny random-weight Qwen3 (head_dim 32 from `attention.key_length` with Q width 128 ≠
//! n_embd 64, per-head Q/K RMSNorm, NEOX rotary, qwen2 vocabulary, f16) against llama.cpp's
//! outputs.

use crate::common;

use std::sync::Arc;

use ggrs_llama::arch::decoder::QkvWeights;
use ggrs_llama::arch::qwen3::Qwen3Model;
use ggrs_llama::Model;

fn load() -> Arc<Model> {
    let path = common::reference_dir().join("tiny/tiny-qwen3-f16.gguf");
    Arc::new(Model::load(path).expect("load tiny qwen3"))
}

#[test]
fn hyperparameters_and_qk_norms() {
    let m = load();
    let hp = &m.hparams;
    assert_eq!(m.arch_name(), "qwen3");
    assert_eq!((hp.n_embd, hp.n_layer, hp.n_ff), (64, 3, 192));
    assert_eq!((hp.n_head, hp.n_head_kv, hp.head_dim), (4, 2, 32));
    assert_ne!(hp.n_head * hp.head_dim, hp.n_embd);
    let qm = m.arch_weights::<Qwen3Model>().expect("a qwen3 model");
    for l in &qm.layers {
        for n in [l.attn.q_norm, l.attn.k_norm] {
            let w = m
                .weight(n.expect("per-head norm"))
                .expect("weight of this model");
            assert_eq!(w.ne[..2], [32, 1], "{}", w.name);
        }
        assert!(matches!(
            l.attn.qkv,
            QkvWeights::Split {
                b: [None, None, None],
                ..
            }
        ));
    }
    assert!(!m.tokenizer().vocab().add_bos());
}

#[test]
fn tiny_qwen3_matches_llama_cpp() {
    let model = load();
    let refs =
        common::read_jsonl(&common::reference_dir().join("tiny/tiny-qwen3-f16.public.jsonl"));
    common::assert_matches_reference("tiny-qwen3", &model, &refs, 0.01);
}
