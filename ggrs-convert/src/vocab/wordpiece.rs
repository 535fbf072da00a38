//! WordPiece vocabularies (BERT: `tokenizer.json` with a `WordPiece` model, or `vocab.txt`)
//! as llama.cpp's `bert` vocabulary: each token in "phantom space" form (a word-initial
//! piece gets `▁` in front, a continuation piece `##x` becomes `x`, special tokens stay as
//! they are), special tokens typed as control tokens, every other as normal.

use std::path::Path;

use serde_json::Value as Json;

use super::{token_of, Specials, Vocab, CONTROL, NORMAL, UNUSED};
use crate::error::ConvertError;

/// `tokenizer.ggml.pre` of a WordPiece vocabulary: llama.cpp's converter names the
/// uncased BERT vocabulary (bert-base-uncased, all-MiniLM, BGE) by the hash of its
/// pre-tokenizer output; `bert-bge` and `jina-v2-en` share that hash and the later test,
/// `jina-v2-en`, wins (what `convert_hf_to_gguf.py` 0c1e570 writes for all-MiniLM-L6-v2).
/// llama.cpp's WordPiece tokenizer does not read it.
const PRE: &str = "jina-v2-en";

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

/// Completes the specials of a WordPiece vocabulary read from `tokenizer.json` (`tj`) as
/// llama.cpp's converter (gguf-py's `SpecialVocab`) does for BERT:
/// - BOS is the [CLS] token and EOS the [SEP] token when `tokenizer_config.json` (`tc`)
///   names no BOS/EOS; `cls_token_id` is not written (llama.cpp's converter has no such key);
/// - `add_bos`/`add_eos`/`add_sep` from the `TemplateProcessing` post-processor (BERT's
///   `[CLS] $A [SEP]` / `[CLS] $A [SEP] $B [SEP]`: BOS and EOS added, no separator of its
///   own), `RobertaProcessing` (all three), or a `ByteLevel` one (none), then from
///   `tc`'s `add_*_token` flags where the post-processor said nothing;
/// - the normaliser's `lowercase` and `strip_accents` (a `BertNormalizer`, `Lowercase`,
///   `StripAccents`, or a `Sequence` of them; `strip_accents: null` writes nothing).
pub(super) fn complete_specials(s: &mut Specials, tj: &Json, tc: Option<&Json>, v: &Vocab) {
    let text = |key: &str| -> Option<String> {
        let e = tc?.get(key)?;
        e.as_str()
            .or_else(|| e.get("content")?.as_str())
            .map(str::to_string)
    };
    let cls = text("cls_token");
    let sep = text("sep_token");
    let bos = text("bos_token").or_else(|| cls.clone());
    let eos = text("eos_token").or_else(|| sep.clone());
    if tc.is_some() {
        let id = |t: &Option<String>| {
            let t = t.as_ref()?;
            token_of(&serde_json::json!({ "t": t }), "t", v)
        };
        s.bos = s.bos.or(id(&bos));
        s.eos = s.eos.or(id(&eos));
    }
    s.cls = None;
    let (mut add_bos, mut add_eos, mut add_sep) = (None, None, None);
    if let Some(pp) = tj.get("post_processor").filter(|p| !p.is_null()) {
        let list = match pp.get("processors").and_then(Json::as_array) {
            Some(l) => l.clone(),
            None => vec![pp.clone()],
        };
        for p in &list {
            match p.get("type").and_then(Json::as_str) {
                Some("ByteLevel") => {
                    add_bos.get_or_insert(false);
                    add_eos.get_or_insert(false);
                }
                Some("RobertaProcessing") => {
                    (add_bos, add_eos, add_sep) = (Some(true), Some(true), Some(true));
                }
                Some("TemplateProcessing") => {
                    let special = |x: &Json| -> Option<String> {
                        x.pointer("/SpecialToken/id")?.as_str().map(str::to_string)
                    };
                    let single = p.get("single").and_then(Json::as_array);
                    let single = single.map(Vec::as_slice).unwrap_or_default();
                    let (mut first, mut last) = (None, None);
                    if single.len() > 1 {
                        first = special(&single[0]);
                        if let Some(f) = &first {
                            add_bos = Some(Some(f) == bos.as_ref() || Some(f) == cls.as_ref());
                        }
                        last = special(&single[single.len() - 1]);
                        if let Some(l) = &last {
                            add_eos = Some(Some(l) == eos.as_ref());
                        }
                    }
                    let pair = p.get("pair").and_then(Json::as_array);
                    let pair = pair.map(Vec::as_slice).unwrap_or_default();
                    let start =
                        usize::from(first.is_some() && pair.first().and_then(special) == first);
                    let stop = pair.len()
                        - usize::from(last.is_some() && pair.last().and_then(special) == last);
                    let inner = pair.get(start..stop).unwrap_or_default();
                    let seq = |x: Option<&Json>| -> Option<String> {
                        x?.pointer("/Sequence/id")?.as_str().map(str::to_string)
                    };
                    if inner.len() > 2
                        && seq(inner.first()).as_deref() == Some("A")
                        && seq(inner.last()).as_deref() == Some("B")
                    {
                        let middle = &inner[1..inner.len() - 1];
                        let is_sep = |x: &Json| {
                            let t = special(x);
                            t.is_some() && (t == sep || t == eos)
                        };
                        let mut add = is_sep(&middle[0]) && last.is_none();
                        if middle.len() == 2 && is_sep(&middle[1]) {
                            add = true;
                        }
                        add_sep = Some(add);
                    }
                }
                _ => {}
            }
        }
    }
    let flag = |key: &str| tc.and_then(|t| t.get(key)).and_then(Json::as_bool);
    s.add_bos = add_bos.or(flag("add_bos_token"));
    s.add_eos = add_eos.or(flag("add_eos_token"));
    s.add_sep = add_sep.or(flag("add_sep_token"));
    if let Some(n) = tj.get("normalizer") {
        read_normalizer(n, s);
    }
}

/// The `lowercase` / `strip_accents` flags of a `tokenizer.json` normaliser (gguf-py's
/// `_parse_normalizer`).
fn read_normalizer(n: &Json, s: &mut Specials) {
    match n.get("type").and_then(Json::as_str) {
        Some("Lowercase") => s.lowercase = Some(true),
        Some("StripAccents") => s.strip_accents = Some(true),
        Some("BertNormalizer") => {
            if let Some(b) = n.get("lowercase").and_then(Json::as_bool) {
                s.lowercase = Some(b);
            }
            if let Some(b) = n.get("strip_accents").and_then(Json::as_bool) {
                s.strip_accents = Some(b);
            }
        }
        Some("Sequence") => {
            for m in n
                .get("normalizers")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                read_normalizer(m, s);
            }
        }
        _ => {}
    }
}
