//! `tokenizer.json` (Hugging Face `tokenizers`, BPE model) as a `gpt2` vocabulary: tokens
//! and types from `model.vocab` and `added_tokens`, merges from `model.merges`.

use std::path::Path;

use serde_json::Value as Json;

use super::{Specials, Vocab, CONTROL, NORMAL, UNUSED, USER_DEFINED};
use crate::error::ConvertError;

/// Reads the BPE `tokenizer.json` `j` (read from `path`) as a `gpt2` vocabulary whose
/// `tokenizer.ggml.pre` is `pre`.
pub(super) fn read_tokenizer_json(path: &Path, j: &Json, pre: &str) -> Result<Vocab, ConvertError> {
    let bad = |detail: String| ConvertError::Tokenizer {
        path: path.to_path_buf(),
        detail,
    };
    let model = j
        .get("model")
        .ok_or_else(|| bad("has no `model` object".into()))?;
    let kind = model.get("type").and_then(Json::as_str).unwrap_or("BPE");
    if kind != "BPE" {
        return Err(bad(format!(
            "has a `{kind}` model; only BPE tokenizer.json files are converted"
        )));
    }
    let vocab = model
        .get("vocab")
        .and_then(Json::as_object)
        .ok_or_else(|| bad("has no `model.vocab` object".into()))?;
    let by_id = tokens_by_id(path, vocab, j, |text, special| {
        if special || looks_special(text) {
            CONTROL
        } else {
            USER_DEFINED
        }
    })?;
    let mut tokens = Vec::with_capacity(by_id.len());
    let mut types = Vec::with_capacity(by_id.len());
    for (i, e) in by_id.into_iter().enumerate() {
        match e {
            Some((t, ty)) => {
                tokens.push(t);
                types.push(ty);
            }
            None => {
                tokens.push(format!("[PAD{i}]"));
                types.push(UNUSED);
            }
        }
    }
    let merges = match model.get("merges") {
        None => Vec::new(),
        Some(m) => {
            let arr = m
                .as_array()
                .ok_or_else(|| bad("`model.merges` is not an array".into()))?;
            let mut out = Vec::with_capacity(arr.len());
            for (i, e) in arr.iter().enumerate() {
                if let Some(s) = e.as_str() {
                    out.push(s.to_string());
                } else if let Some([a, b]) = e.as_array().map(Vec::as_slice) {
                    let (Some(a), Some(b)) = (a.as_str(), b.as_str()) else {
                        return Err(bad(format!("merge {i} is not a pair of strings")));
                    };
                    // A space inside a piece is written as U+0120 (llama.cpp's convention).
                    let enc = |s: &str| s.replace(' ', "\u{0120}");
                    out.push(format!("{} {}", enc(a), enc(b)));
                } else {
                    return Err(bad(format!("merge {i} is neither \"a b\" nor [a, b]")));
                }
            }
            out
        }
    };
    Ok(Vocab {
        model: "gpt2".into(),
        pre: pre.into(),
        tokens,
        scores: None,
        types,
        merges: Some(merges),
        source: "tokenizer.json".into(),
        builtin: Specials::default(),
        notes: Vec::new(),
    })
}

/// llama.cpp's `does_token_look_special`: `<|…|>`, `<…>` control-looking tokens.
fn looks_special(t: &str) -> bool {
    (t.starts_with("<|") && t.ends_with("|>"))
        || matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<｜") && t.ends_with("｜>"))
}

/// The tokens of `tokenizer.json` `j` (read from `path`) by id: `vocab` (token → id) as
/// normal tokens, then `added_tokens` typed by `added_type(text, special)`; `None` for ids
/// no token has.
pub(super) fn tokens_by_id(
    path: &Path,
    vocab: &serde_json::Map<String, Json>,
    j: &Json,
    added_type: impl Fn(&str, bool) -> i32,
) -> Result<Vec<Option<(String, i32)>>, ConvertError> {
    let bad = |detail: String| ConvertError::Tokenizer {
        path: path.to_path_buf(),
        detail,
    };
    let mut by_id: Vec<Option<(String, i32)>> = Vec::new();
    let mut set = |id: u64, text: &str, ty: i32| -> Result<(), ConvertError> {
        let id = usize::try_from(id)
            .ok()
            .filter(|&i| i < (1 << 24))
            .ok_or_else(|| bad(format!("token `{text}` has an implausible id {id}")))?;
        if by_id.len() <= id {
            by_id.resize(id + 1, None);
        }
        by_id[id] = Some((text.to_string(), ty));
        Ok(())
    };
    for (text, id) in vocab {
        let id = id
            .as_u64()
            .ok_or_else(|| bad(format!("token `{text}` has id {id}, not an integer")))?;
        set(id, text, NORMAL)?;
    }
    if let Some(added) = j.get("added_tokens").and_then(Json::as_array) {
        for a in added {
            let (Some(id), Some(text)) = (
                a.get("id").and_then(Json::as_u64),
                a.get("content").and_then(Json::as_str),
            ) else {
                return Err(bad(format!("an added token lacks an id or content: {a}")));
            };
            let special = a.get("special").and_then(Json::as_bool).unwrap_or(false);
            set(id, text, added_type(text, special))?;
        }
    }
    Ok(by_id)
}
