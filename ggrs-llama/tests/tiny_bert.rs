//! The tiny random-weight BERT (post-LayerNorm encoder, WordPiece vocabulary, mean pooling,
//! f16) against llama.cpp's embeddings (`reference/dump_embeddings`), and the embedder's
//! batching, pooling and errors.

use crate::common;

use std::sync::Arc;

use common::{embedder, max_diff};
use ggrs_llama::embed::{cosine, normalize, EmbedParams, Embedder, Pooling};
use ggrs_llama::{LlamaError, Model, Session, SessionParams};
use serde_json::Value;

fn load() -> Arc<Model> {
    let path = common::reference_dir().join("tiny/tiny-bert-f16.gguf");
    Arc::new(Model::load(path).expect("load tiny bert"))
}

fn refs() -> Vec<Value> {
    common::json_lines(&common::reference_dir().join("tiny/tiny-bert-f16.public.jsonl"))
}

#[test]
fn wordpiece_tokens_match_llama_cpp() {
    let model = load();
    let e = embedder(&model, None, 2);
    for r in refs() {
        let want: Vec<u32> = r["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|t| t.as_u64().expect("id") as u32)
            .collect();
        let got = e
            .tokenize(r["prompt"].as_str().expect("prompt"))
            .expect("tokenize");
        assert_eq!(got, want, "{:?}", r["prompt"]);
    }
}

#[test]
fn mean_pooled_embeddings_match_llama_cpp() {
    let model = load();
    assert_eq!(Pooling::of_model(&model), Some(Pooling::Mean));
    // To the printed digits (`%.6f`: ±5e-7, plus the f32 value's own rounding). Measured:
    // at most 5.07e-7 raw and 4.99e-7 normalised over the six prompts, with LayerNorm in
    // ggml's AVX-512 summation order (it was up to 2.7e-4 before).
    common::assert_embeddings_match("tiny-bert", &model, &refs(), 6e-7);
}

#[test]
fn batch_equals_one_by_one_bit_for_bit() {
    let model = load();
    let refs = refs();
    let prompts: Vec<&str> = refs.iter().map(|r| r["prompt"].as_str().unwrap()).collect();
    let poolings = [Pooling::Mean, Pooling::Cls, Pooling::Last, Pooling::None];
    common::assert_batch_is_one_by_one(&model, &prompts, &poolings);
}

#[test]
fn poolings_and_normalisation() {
    let model = load();
    let text = "The capital of France is";
    let mut none = embedder(&model, Some(Pooling::None), -1);
    let rows = none.embed(&[text]).expect("none").remove(0);
    let e = model.hparams.n_embd;
    let n = rows.len() / e;
    assert_eq!(n, 7, "one vector per token");
    let mut mean = vec![0.0f64; e];
    for r in rows.chunks(e) {
        for (m, x) in mean.iter_mut().zip(r) {
            *m += *x as f64 / n as f64;
        }
    }
    let mean: Vec<f32> = mean.into_iter().map(|x| x as f32).collect();
    let got = embedder(&model, Some(Pooling::Mean), -1)
        .embed(&[text])
        .unwrap();
    assert!(max_diff(&got[0], &mean) < 1e-5);
    let cls = embedder(&model, Some(Pooling::Cls), -1)
        .embed(&[text])
        .unwrap();
    assert_eq!(cls[0], rows[..e]);
    let last = embedder(&model, Some(Pooling::Last), -1)
        .embed(&[text])
        .unwrap();
    assert_eq!(last[0], rows[(n - 1) * e..]);
    // Normalisations as llama.cpp's common_embd_normalize.
    let mut v = vec![3.0f32, -4.0];
    normalize(&mut v, 2);
    assert_eq!(v, [0.6, -0.8]);
    let mut v = vec![3.0f32, -4.0];
    normalize(&mut v, 1);
    assert!((v[0] - 3.0 / 7.0).abs() < 1e-7 && (v[1] + 4.0 / 7.0).abs() < 1e-7);
    let mut v = vec![3.0f32, -4.0];
    normalize(&mut v, 0);
    assert_eq!(v, [3.0 * 32760.0 / 4.0, -32760.0]);
    let unit = embedder(&model, None, 2).embed(&[text]).unwrap();
    let norm: f32 = unit[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
    assert!((cosine(&unit[0], &got[0]) - 1.0).abs() < 1e-5);
}

#[test]
fn bad_inputs_get_clear_errors() {
    let model = load();
    let mut e = embedder(&model, None, 2);
    let err = e.embed(&[""]).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    let err = e.embed_tokens(&[vec![]]).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    // The model's context: 128 positions.
    let long = "word ".repeat(200);
    let err = e.embed(&[long.as_str()]).unwrap_err();
    assert!(err.to_string().contains("128"), "{err}");
    let err = e.embed_tokens(&[vec![101, 40000, 102]]).unwrap_err();
    assert!(matches!(err, LlamaError::TokenOutOfRange { .. }), "{err}");
    let err = e.rerank("q", &["d"]).unwrap_err();
    assert!(err.to_string().contains("not a reranker"), "{err}");
    let err = Embedder::new(
        model.clone(),
        EmbedParams {
            pooling: Some(Pooling::Rank),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("classification head"), "{err}");
    // Not a generation model.
    let err = Session::new(model.clone(), SessionParams::default()).unwrap_err();
    assert!(matches!(err, LlamaError::NotGenerative { .. }), "{err}");
}

#[test]
fn rerank_scores_are_the_head_on_the_cls_token_and_order_documents() {
    let path = common::tiny_reranker();
    let model = Arc::new(Model::load(&path).unwrap());
    let _ = std::fs::remove_file(&path);
    let mut r = embedder(&model, None, 2);
    assert_eq!(r.pooling(), Pooling::Rank);
    let query = "The capital of France";
    let docs = [
        "Paris is the capital of France.",
        "Bananas are yellow.",
        "1, 2, 3",
    ];
    let scores = r.rerank(query, &docs).unwrap();
    assert_eq!(scores.len(), 3);
    // The same inputs' [CLS] states, unnormalised, through the head on the host.
    let inputs = ggrs_llama::embed::rerank_inputs(&model, query, &docs).unwrap();
    assert_eq!(inputs[0][0], 101, "[CLS] first");
    let mut cls = embedder(&model, Some(Pooling::Cls), -1);
    let states = cls.embed_tokens(&inputs).unwrap();
    let (w, b) = common::reranker_head();
    for (s, h) in scores.iter().zip(&states) {
        let want: f32 = h.iter().zip(&w).map(|(x, y)| x * y).sum::<f32>() + b;
        assert!(
            (s - want).abs() < 1e-3 * want.abs().max(1.0),
            "{s} vs {want}"
        );
    }
    // Distinct documents, distinct scores (an ordering to test against).
    assert!(scores[0] != scores[1] && scores[1] != scores[2]);
}

/// llama.cpp's converter writes BERT vocabularies with `add_sep_token` false and
/// `add_eos_token` true, EOS = [SEP]: the same ids as the default (one [SEP] at the end, not
/// two), and the same embeddings.
#[test]
fn the_converters_add_eos_flags_give_the_same_tokens() {
    use ggrs_core::gguf::Value as GV;
    let src = common::reference_dir().join("tiny/tiny-bert-f16.gguf");
    let out = std::env::temp_dir().join(format!("ggrs-bert-eos-{}.gguf", std::process::id()));
    let add = vec![
        ("tokenizer.ggml.add_sep_token".to_string(), GV::Bool(false)),
        ("tokenizer.ggml.add_eos_token".to_string(), GV::Bool(true)),
        ("tokenizer.ggml.eos_token_id".to_string(), GV::U32(102)),
    ];
    let keep = |_: &str, ne: &[usize]| Some(ne.to_vec());
    common::rewrite_gguf_adding(&src, &out, |_, v| Some(v.clone()), keep, add, vec![]);
    let model = Arc::new(Model::load(&out).unwrap());
    let _ = std::fs::remove_file(&out);
    let e = embedder(&model, None, 2);
    for r in refs() {
        let want: Vec<u32> = r["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(e.tokenize(r["prompt"].as_str().unwrap()).unwrap(), want);
    }
}
