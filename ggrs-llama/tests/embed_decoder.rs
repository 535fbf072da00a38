//! Decoder embedders: the `qwen3` graph with last-token pooling (Qwen3-Embedding's recipe) on
//! the tiny Qwen3, against llama.cpp's logits of the same prompt; and the errors of a decoder
//! asked for embeddings without a pooling.

mod common;

use std::sync::Arc;

use ggrs_llama::embed::{EmbedParams, Embedder, Pooling};
use ggrs_llama::Model;

#[test]
fn last_token_pooling_is_the_final_hidden_state() {
    let path = common::reference_dir().join("tiny/tiny-qwen3-f16.gguf");
    let model = Arc::new(Model::load(&path).expect("load tiny qwen3"));
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
    let refs =
        common::read_jsonl(&common::reference_dir().join("tiny/tiny-qwen3-f16.public.jsonl"));
    // The output head is tied: logits = token_embd · hidden (f16 rows).
    let file = model.gguf();
    let info = file.tensor("token_embd.weight").expect("embeddings");
    let rows = file.tensor_data(info);
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
                "{:?}: token {id}: {l} vs {want}",
                r.prompt
            );
        }
    }
}
