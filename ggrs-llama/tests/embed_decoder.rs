//! Decoder embedders: last-token pooling (Qwen3-Embedding's recipe) on the tiny Qwen3 and on
//! the tiny Gemma 3 (sliding-window layers), against llama.cpp's logits of the same prompt
//! (the output heads are tied, so the final hidden state gives them); and the error of a
//! decoder asked for embeddings without a pooling.

use crate::common;

use std::sync::Arc;

use ggrs_llama::embed::{EmbedParams, Embedder, Pooling};
use ggrs_llama::Model;

/// The last-token embeddings of every reference prompt of `tiny/<file>`, turned into logits
/// through the tied embedding table, are llama.cpp's last-position top-10 logits (within
/// 0.02: the products are summed in another order than llama.cpp's output head).
fn last_token_pooling_gives_the_logits(file: &str) {
    let path = common::reference_dir().join("tiny").join(file);
    let model = Arc::new(Model::load(&path).expect("load the tiny model"));
    // No pooling in a decoder's file: a clear error, naming the option.
    let err = Embedder::new(model.clone(), EmbedParams::default()).unwrap_err();
    assert!(err.to_string().contains("--pooling"), "{err}");
    let mut e = Embedder::new(
        model.clone(),
        EmbedParams {
            pooling: Some(Pooling::Last),
            normalize: -1,
            n_threads: 2,
            ..Default::default()
        },
    )
    .expect("embedder");
    let jsonl = file.replace(".gguf", ".public.jsonl");
    let refs = common::read_jsonl(&common::reference_dir().join("tiny").join(jsonl));
    // The output head is tied: logits = token_embd · hidden (f16 rows).
    let gguf = model.gguf();
    assert!(gguf.tensor("output.weight").is_none(), "{file}: untied");
    let info = gguf.tensor("token_embd.weight").expect("embeddings");
    let rows = gguf.tensor_data(info);
    let n_embd = model.hparams.n_embd;
    let logit = |id: u32, h: &[f32]| -> f32 {
        let row = &rows[id as usize * 2 * n_embd..(id as usize + 1) * 2 * n_embd];
        row.chunks(2)
            .zip(h)
            .map(|(b, &x)| half::f16::from_le_bytes([b[0], b[1]]).to_f32() * x)
            .sum()
    };
    let inputs: Vec<Vec<u32>> = refs.iter().map(|r| r.tokens.clone()).collect();
    let got = e.embed_tokens(&inputs).expect("embed");
    for (r, h) in refs.iter().zip(&got) {
        assert_eq!(h.len(), n_embd);
        let last = r.prompt_topk.last().expect("positions");
        for &(id, want) in last {
            let l = logit(id, h);
            assert!(
                (l - want).abs() < 0.02,
                "{file} {:?}: token {id}: {l} vs {want}",
                r.prompt
            );
        }
    }
}

#[test]
fn last_token_pooling_is_the_final_hidden_state() {
    last_token_pooling_gives_the_logits("tiny-qwen3-f16.gguf");
}

/// Gemma 3 as a decoder embedder: causal, the local layers seeing their window of 4 tokens
/// (the reference prompts are longer), the final norm, no softcap in this file.
#[test]
fn gemma3_last_token_pooling_is_the_final_hidden_state() {
    let path = common::reference_dir().join("tiny/tiny-gemma3-f16.gguf");
    let model = Model::load(&path).expect("load");
    let c = model
        .arch_weights::<ggrs_llama::arch::gemma3::Gemma3Model>()
        .expect("gemma3")
        .consts;
    assert!(c.final_softcap.is_none() && c.window < 6, "{c:?}");
    last_token_pooling_gives_the_logits("tiny-gemma3-f16.gguf");
}
