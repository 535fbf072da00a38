//! Fuzzes the whole load path: arbitrary bytes through the GGUF reader, `Model::from_gguf`
//! (hyperparameters, tokenizer, every weight's name, shape and type), tokenizing a text and,
//! for a model that loads, one decode step in a small session. Any outcome but a panic, an
//! abort or a huge allocation is fine; a decoded step must give one logit per token.

#![no_main]

use std::sync::Arc;

use ggrs_core::gguf::GgufFile;
use ggrs_llama::{Batch, Model, Session, SessionParams};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(Arc::new(data.to_vec())) else {
        return;
    };
    let Ok(model) = Model::from_gguf(file) else {
        return;
    };
    let model = Arc::new(model);
    let Ok(ids) = model.tokenizer().encode("Hello, wörld! 12 3", true, true) else {
        return;
    };
    assert!(ids.iter().all(|&i| (i as usize) < model.hparams.n_vocab));
    if ids.is_empty() {
        return;
    }
    let params = SessionParams {
        n_ctx: 32,
        n_batch: 16,
        n_threads: 1,
        ..SessionParams::default()
    };
    let Ok(mut s) = Session::new(model.clone(), params) else {
        return;
    };
    let n = ids.len().min(8);
    if s.decode(&Batch::from_tokens(&ids[..n], 0, 0, false))
        .is_ok()
    {
        assert_eq!(s.logits().len(), model.hparams.n_vocab);
    }
});
