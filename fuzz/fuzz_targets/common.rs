//! Shared by the fuzz targets: where the reference vocabularies are, and a splitter that
//! turns fuzz bytes into several fields.
#![allow(dead_code)]

use std::path::PathBuf;

/// `shared/reference` (beside the repository), or `$GGRS_REFERENCE_DIR`.
pub fn reference_dir() -> PathBuf {
    match std::env::var_os("GGRS_REFERENCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/reference"
        )),
    }
}

/// The tokenizers of every vocabulary file in `shared/reference/vocab` and of the tiny
/// ChatGLM model (the vocabulary types the project reads: SentencePiece, BPE, ChatGLM).
pub fn tokenizers() -> Vec<ggrs_llama::Tokenizer> {
    let dir = reference_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("vocab"))
        .expect("shared/reference/vocab (set GGRS_REFERENCE_DIR)")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    files.sort();
    files.push(dir.join("tiny/tiny-chatglm-f16.gguf"));
    files
        .iter()
        .map(|p| {
            let f = ggrs_core::gguf::GgufFile::open(p).expect("vocab file");
            ggrs_llama::Tokenizer::from_gguf(&f).expect("vocab loads")
        })
        .collect()
}

/// The Qwen2 vocabulary's tokenizer and its Jinja chat template's source.
pub fn qwen2_vocab() -> (ggrs_llama::Tokenizer, String) {
    let f = ggrs_core::gguf::GgufFile::open(reference_dir().join("vocab/ggml-vocab-qwen2.gguf"))
        .expect("qwen2 vocab (set GGRS_REFERENCE_DIR)");
    let tok = ggrs_llama::Tokenizer::from_gguf(&f).expect("vocab loads");
    let src = f
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str())
        .expect("the qwen2 vocab has a chat template")
        .to_string();
    (tok, src)
}

/// Splits `data` at `0xFF 0xFE` markers into at most `n` fields.
pub fn fields(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while out.len() + 1 < n {
        match rest.windows(2).position(|w| w == [0xFF, 0xFE]) {
            Some(i) => {
                out.push(&rest[..i]);
                rest = &rest[i + 2..];
            }
            None => break,
        }
    }
    out.push(rest);
    out
}
