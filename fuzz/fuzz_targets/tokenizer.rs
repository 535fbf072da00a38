//! Fuzzes the tokenizers of every reference vocabulary (SentencePiece, BPE, ChatGLM) with
//! arbitrary bytes: encoding (with and without special tokens) gives ids inside the
//! vocabulary, decoding any ids (in range or not) gives text or an error, never a panic.

#![no_main]

mod common;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

static TOKENIZERS: OnceLock<Vec<ggrs_llama::Tokenizer>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let toks = TOKENIZERS.get_or_init(common::tokenizers);
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let tok = &toks[sel as usize % toks.len()];
    let text = String::from_utf8_lossy(rest);
    let n_vocab = tok.vocab().len();
    for (add, parse) in [(false, false), (true, true)] {
        if let Ok(ids) = tok.encode(&text, add, parse) {
            assert!(ids.iter().all(|&i| (i as usize) < n_vocab));
            let _ = tok.decode(&ids);
        }
    }
    // The bytes as token ids, valid or not.
    let ids: Vec<u32> = rest
        .chunks(4)
        .map(|c| c.iter().fold(0u32, |a, &b| a << 8 | b as u32) % (2 * n_vocab as u32).max(1))
        .collect();
    let _ = tok.decode(&ids);
    let _ = tok.decode_with_special(&ids);
});
