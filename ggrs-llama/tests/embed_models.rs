//! Embedding models beyond BERT against llama.cpp:
//! - `gemma-embedding` (EmbeddingGemma: the Gemma 3 block, bidirectional, symmetric sliding
//!   window, mean pooling, the sentence-transformers Dense layers) on
//!   `tiny/tiny-gemma-embedding-f16.gguf` against `reference/dump_embeddings`;
//! - `nomic-bert` (rotary positions, fused Q/K/V, SwiGLU) on `tests/data/tiny-nomic-bert-f16.gguf`
//!   against `llama-embedding` (both made by `scripts/make-tiny-nomic-bert.py`).
//!
//! And for both: a batch equals its inputs one by one, bit for bit, for every pooling.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use ggrs_llama::{LlamaError, Model, Pooling, Session, SessionParams};
use serde_json::Value;

const POOLINGS: [Pooling; 4] = [Pooling::Mean, Pooling::Cls, Pooling::Last, Pooling::None];

fn gemma() -> Arc<Model> {
    let path = common::reference_dir().join("tiny/tiny-gemma-embedding-f16.gguf");
    Arc::new(Model::load(path).expect("load tiny gemma-embedding"))
}

fn gemma_refs() -> Vec<Value> {
    common::json_lines(&common::reference_dir().join("tiny/tiny-gemma-embedding-f16.public.jsonl"))
}

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn nomic() -> Arc<Model> {
    Arc::new(Model::load(data("tiny-nomic-bert-f16.gguf")).expect("load tiny nomic-bert"))
}

fn prompts(refs: &[Value]) -> Vec<&str> {
    refs.iter().map(|r| r["prompt"].as_str().unwrap()).collect()
}

#[test]
fn gemma_embedding_matches_llama_cpp() {
    let model = gemma();
    assert_eq!(model.arch_name(), "gemma-embedding");
    assert_eq!(Pooling::of_model(&model), Some(Pooling::Mean));
    // To the printed digits (`%.6f`: ±5e-7, and the f32 value's own rounding).
    common::assert_embeddings_match("tiny-gemma-embedding", &model, &gemma_refs(), 6e-7);
}

#[test]
fn gemma_embedding_batch_equals_one_by_one() {
    let model = gemma();
    let refs = gemma_refs();
    common::assert_batch_is_one_by_one(&model, &prompts(&refs), &POOLINGS);
}

/// The sliding window bites (every prompt is longer than the window of 4, so its layers 0,
/// 1 and 3 see |p − k| ≤ 2 only) and the Dense layers apply: without either, the result
/// differs. Checked on a copy of the file whose window covers everything, and one without
/// the Dense layers.
#[test]
fn gemma_embedding_window_and_dense_layers_matter() {
    use ggrs_core::gguf::Value as GV;
    let src = common::reference_dir().join("tiny/tiny-gemma-embedding-f16.gguf");
    let refs = gemma_refs();
    let p = prompts(&refs);
    let want = common::embedder(&gemma(), None, -1).embed(&p).unwrap();
    let tmp =
        |tag: &str| std::env::temp_dir().join(format!("ggrs-{tag}-{}.gguf", std::process::id()));
    let key = "gemma-embedding.attention.sliding_window";
    let wide = common::gguf_with_key(&src, key, GV::U32(4096));
    let path = tmp("gemma-emb-wide");
    std::fs::write(&path, wide).unwrap();
    let m = Arc::new(Model::load(&path).unwrap());
    let _ = std::fs::remove_file(&path);
    let got = common::embedder(&m, None, -1).embed(&p).unwrap();
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(
            common::max_diff(a, b) > 1e-3,
            "prompt {i}: the window changes nothing"
        );
    }
    // Without the Dense layers: the pooled hidden state, another vector (64 wide as well).
    let path = tmp("gemma-emb-bare");
    let no_dense = |name: &str, ne: &[usize]| (!name.starts_with("dense_")).then(|| ne.to_vec());
    common::rewrite_gguf(&src, &path, |_, v| Some(v.clone()), no_dense);
    let m = Arc::new(Model::load(&path).unwrap());
    let _ = std::fs::remove_file(&path);
    let got = common::embedder(&m, None, -1).embed(&p).unwrap();
    assert_eq!(got[0].len(), 64);
    assert!(common::max_diff(&got[0], &want[0]) > 1e-2);
}

#[test]
fn embedding_models_generate_nothing() {
    for model in [gemma(), nomic()] {
        let err = Session::new(model.clone(), SessionParams::default()).unwrap_err();
        assert!(matches!(err, LlamaError::NotGenerative { .. }), "{err}");
    }
}

/// The reference is this machine's llama.cpp build (AVX2: tinyBLAS and LayerNorm sum 8
/// lanes at a time), while ggrs follows ggml's AVX-512 summation orders (in which the other
/// tiny references were made), so activations rounded to f16 before each matrix product now
/// and then round the other way. Measured: max |Δ| per prompt 6.2e-4, 1.2e-4, 5.3e-4,
/// 1.9e-4, 3.2e-4, 3.6e-4 (normalised at most 1.8e-4; cosine ≥ 0.99999982), less than
/// llama.cpp's own difference between a prompt alone and the same prompt in a batch of six
/// (1.4e-3 to 2.2e-3 on this file); a plain float64 forward of the file is 2.3e-3 from
/// llama.cpp and 2.8e-3 from ggrs (prompt 0). Bound: 1e-3.
#[test]
fn nomic_bert_matches_llama_cpp() {
    let model = nomic();
    assert_eq!(model.arch_name(), "nomic-bert");
    let refs = common::json_lines(&data("tiny-nomic-bert-f16.llama-embedding.jsonl"));
    assert_eq!(refs.len(), 6);
    common::assert_embeddings_match("tiny-nomic-bert", &model, &refs, 1e-3);
}

#[test]
fn nomic_bert_batch_equals_one_by_one() {
    let model = nomic();
    let refs = common::json_lines(&data("tiny-nomic-bert-f16.llama-embedding.jsonl"));
    common::assert_batch_is_one_by_one(&model, &prompts(&refs), &POOLINGS);
}
