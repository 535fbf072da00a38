//! WordPiece vocabularies (BERT: `tokenizer.json` with a `WordPiece` model, or `vocab.txt`)
//! as llama.cpp's `bert` vocabulary: each token in "phantom space" form (a word-initial
//! piece gets `▁` in front, a continuation piece `##x` becomes `x`, special tokens stay as
//! they are), special tokens typed as control tokens, every other as normal.

use std::path::Path;

use serde_json::Value as Json;

use super::{Specials, Vocab, CONTROL, NORMAL, UNUSED};
use crate::error::ConvertError;

/// `tokenizer.ggml.pre` of a WordPiece vocabulary: llama.cpp's converter names the
/// uncased BERT vocabulary (bert-base-uncased, all-MiniLM, BGE) by the hash of its
/// pre-tokenizer output as `bert-bge`; llama.cpp's WordPiece tokenizer does not read it.
const PRE: &str = "bert-bge";

/// The phantom-space form of WordPiece token `t` of type `ty` (llama.cpp's converter's).
fn phantom(t: &str, ty: i32) -> String {
    if ty == CONTROL {
        t.to_string()
    } else if let Some(rest) = t.strip_prefix("##") {
        rest.to_string()
    } else {
        format!("\u{2581}{t}")
    }
}

/// Tokens by id (`None` for ids no token has) as a vocabulary: gaps become unused
/// `[PADi]` tokens; `source` names the file.
fn finish(by_id: Vec<Option<(String, i32)>>, source: &str) -> Vocab {
    let mut tokens = Vec::with_capacity(by_id.len());
    let mut types = Vec::with_capacity(by_id.len());
    for (i, e) in by_id.into_iter().enumerate() {
        match e {
            Some((t, ty)) => {
                tokens.push(phantom(&t, ty));
                types.push(ty);
            }
            None => {
                tokens.push(format!("[PAD{i}]"));
                types.push(UNUSED);
            }
        }
    }
    Vocab {
        model: "bert".into(),
        pre: PRE.into(),
        tokens,
        scores: None,
        types,
        merges: None,
        source: source.into(),
        builtin: Specials::default(),
        notes: Vec::new(),
    }
}

/// Reads the `WordPiece` model of `tokenizer.json` (`j`, read from `path`): `model.vocab`
/// (token → id), the `added_tokens` marked special as control tokens.
pub(super) fn from_tokenizer_json(path: &Path, j: &Json) -> Result<Vocab, ConvertError> {
    let bad = |detail: String| ConvertError::Tokenizer {
        path: path.to_path_buf(),
        detail,
    };
    let vocab = j
        .pointer("/model/vocab")
        .and_then(Json::as_object)
        .ok_or_else(|| bad("has no `model.vocab` object".into()))?;
    let by_id = super::tokenizer_json::tokens_by_id(path, vocab, j, |_, special| {
        if special {
            CONTROL
        } else {
            NORMAL
        }
    })?;
    Ok(finish(by_id, "tokenizer.json"))
}

/// Reads `vocab.txt` (one token per line, the line number its id); `specials` (the token
/// strings of `tokenizer_config.json` / `special_tokens_map.json`) are control tokens.
pub(super) fn from_vocab_txt(path: &Path, specials: &[String]) -> Result<Vocab, ConvertError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConvertError::Tokenizer {
        path: path.to_path_buf(),
        detail: format!("cannot be read as UTF-8 text: {e}"),
    })?;
    let by_id = text
        .lines()
        .map(|t| {
            let t = t.trim_end_matches('\r');
            let ty = if specials.iter().any(|s| s == t) {
                CONTROL
            } else {
                NORMAL
            };
            Some((t.to_string(), ty))
        })
        .collect();
    Ok(finish(by_id, "vocab.txt"))
}

/// The special token strings named by `tokenizer_config.json` and `special_tokens_map.json`
/// in `dir` (`unk_token`, `cls_token`…, as strings or `{"content": …}` objects).
pub(super) fn special_strings(dir: &Path) -> Result<Vec<String>, ConvertError> {
    let mut out = Vec::new();
    for name in ["tokenizer_config.json", "special_tokens_map.json"] {
        let p = dir.join(name);
        if !p.is_file() {
            continue;
        }
        let j = crate::safetensors::read_json(&p)?;
        for key in [
            "unk_token",
            "sep_token",
            "pad_token",
            "cls_token",
            "mask_token",
        ] {
            let Some(e) = j.get(key) else { continue };
            if let Some(s) = e
                .as_str()
                .or_else(|| e.get("content").and_then(Json::as_str))
            {
                out.push(s.to_string());
            }
        }
    }
    Ok(out)
}
