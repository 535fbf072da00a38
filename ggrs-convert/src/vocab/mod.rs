//! The tokenizer of a Hugging Face directory, as `tokenizer.ggml.*` keys.
//!
//! - `tokenizer.model` (or ChatGLM-6B v1's `ice_text.model`): a SentencePiece model, a
//!   protocol-buffer message read by a small wire-format reader ([`sentencepiece`]) →
//!   `llama` (tokens, scores, token types).
//! - `tokenizer.json` (byte-level BPE): `model.vocab`, `model.merges`, `added_tokens`
//!   ([`tokenizer_json`]) → `gpt2` (tokens, token types, merges).
//! - `tokenizer.json` with a WordPiece model, or `vocab.txt` (BERT) ([`wordpiece`]) →
//!   `bert` (tokens in llama.cpp's phantom-space form, token types).
//!
//! The architecture names the pre-tokenizer (`tokenizer.ggml.pre`) and may complete a
//! SentencePiece vocabulary (ChatGLM2's control tokens): see
//! [`ArchConverter`](crate::arch::ArchConverter).
//!
//! Special token ids come from `tokenizer_config.json` (token strings looked up in the
//! vocabulary) first and `config.json` (`*_token_id`) second, as llama.cpp's converter
//! takes them; for SentencePiece the model's own `unk_id`/`bos_id`/`eos_id` fill the gaps.

mod sentencepiece;
mod tokenizer_json;
mod wordpiece;

use std::path::Path;

use ggrs_core::gguf::Value;
use serde_json::Value as Json;

use crate::config::Cfg;
use crate::error::ConvertError;
use crate::safetensors::read_json;

/// GGUF token types (the same numbers as SentencePiece's piece types).
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// A vocabulary read from the directory.
#[derive(Debug, Clone, Default)]
pub struct Vocab {
    /// `tokenizer.ggml.model`: `llama` (SentencePiece) or `gpt2` (byte-level BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`.
    pub pre: String,
    /// Token strings by id.
    pub tokens: Vec<String>,
    /// Scores by id (SentencePiece only).
    pub scores: Option<Vec<f32>>,
    /// Token types by id.
    pub types: Vec<i32>,
    /// BPE merges, `"a b"` each (BPE only).
    pub merges: Option<Vec<String>>,
    /// The file it came from (for messages).
    pub source: String,
    /// Special ids the model file itself names (SentencePiece's trainer spec).
    builtin: Specials,
    /// Things the user should know about the vocabulary.
    pub notes: Vec<String>,
}

impl Vocab {
    /// Appends control token `text` (score 0 when the vocabulary has scores).
    pub fn push_control(&mut self, text: &str) {
        self.tokens.push(text.to_string());
        self.types.push(CONTROL);
        if let Some(s) = &mut self.scores {
            s.push(0.0);
        }
    }
}

/// Special token ids and flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Specials {
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.mask_token_id`.
    pub mask: Option<u32>,
    /// `tokenizer.ggml.gmask_token_id` (ChatGLM-6B v1).
    pub gmask: Option<u32>,
    /// `tokenizer.ggml.cls_token_id` (BERT's [CLS]).
    pub cls: Option<u32>,
    /// `tokenizer.ggml.seperator_token_id` (BERT's [SEP]; llama.cpp's spelling).
    pub sep: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_sep_token`.
    pub add_sep: Option<bool>,
    /// `tokenizer.ggml.normalizer.lowercase` (a `tokenizer.json` normaliser's).
    pub lowercase: Option<bool>,
    /// `tokenizer.ggml.normalizer.strip_accents` (a `tokenizer.json` normaliser's).
    pub strip_accents: Option<bool>,
}

/// What an architecture says about its vocabulary (see `arch::ArchConverter`): the
/// `tokenizer.ggml.pre` of a SentencePiece and of a BPE vocabulary, and how to complete a
/// SentencePiece one before it is padded.
pub(crate) struct VocabRules<'a> {
    /// `tokenizer.ggml.pre` of a vocabulary read from a SentencePiece model.
    pub sentencepiece_pre: &'static str,
    /// `tokenizer.ggml.pre` of a vocabulary read from a BPE `tokenizer.json`.
    pub bpe_pre: &'static str,
    /// Completes a SentencePiece vocabulary (`vocab`, `n_vocab`, `config.json`).
    pub complete_sentencepiece: &'a dyn Fn(&mut Vocab, usize, &Json),
}

/// Reads the directory's tokenizer, padded to `n_vocab` entries (`[PADi]`, unused), or
/// `None` when it has none, by the architecture's `rules`. `cfg` is `config.json` (for
/// [`VocabRules::complete_sentencepiece`]).
pub(crate) fn load(
    dir: &Path,
    rules: &VocabRules<'_>,
    n_vocab: usize,
    cfg: &Json,
) -> Result<Option<Vocab>, ConvertError> {
    let spm = ["tokenizer.model", "ice_text.model"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file());
    let json = dir.join("tokenizer.json");
    let vocab_txt = dir.join("vocab.txt");
    let mut v = if let Some(p) = spm {
        sentencepiece::read_sentencepiece(&p, rules.sentencepiece_pre)?
    } else if json.is_file() {
        let j = read_json(&json)?;
        if j.pointer("/model/type").and_then(Json::as_str) == Some("WordPiece") {
            wordpiece::from_tokenizer_json(&json, &j)?
        } else {
            tokenizer_json::read_tokenizer_json(&json, &j, rules.bpe_pre)?
        }
    } else if vocab_txt.is_file() {
        wordpiece::from_vocab_txt(&vocab_txt, &wordpiece::special_strings(dir)?)?
    } else {
        return Ok(None);
    };
    if v.model == "llama" {
        (rules.complete_sentencepiece)(&mut v, n_vocab, cfg);
    }
    if v.tokens.len() > n_vocab {
        return Err(ConvertError::Tokenizer {
            path: dir.join(&v.source),
            detail: format!(
                "has {} tokens but the model's embedding table has {n_vocab} rows",
                v.tokens.len()
            ),
        });
    }
    for i in v.tokens.len()..n_vocab {
        v.tokens.push(format!("[PAD{i}]"));
        v.types.push(UNUSED);
        if let Some(s) = &mut v.scores {
            s.push(-1000.0);
        }
    }
    Ok(Some(v))
}

/// The special ids of the directory: `tokenizer_config.json` strings looked up in `vocab`,
/// then `config.json` ids, then the SentencePiece model's own. A WordPiece (BERT) vocabulary
/// read from `tokenizer.json` is completed as llama.cpp's converter (gguf-py's
/// `SpecialVocab`) completes it: see [`wordpiece::complete_specials`].
pub fn specials(dir: &Path, cfg: &Json, vocab: Option<&Vocab>) -> Result<Specials, ConvertError> {
    let mut s = Specials::default();
    let tc_path = dir.join("tokenizer_config.json");
    let tc = match tc_path.is_file() {
        true => Some(read_json(&tc_path)?),
        false => None,
    };
    if let Some(tc) = &tc {
        s.add_bos = tc.get("add_bos_token").and_then(Json::as_bool);
        s.add_eos = tc.get("add_eos_token").and_then(Json::as_bool);
        if let Some(v) = vocab {
            let lookup = |key: &str| token_of(tc, key, v);
            s.bos = lookup("bos_token");
            s.eos = lookup("eos_token");
            s.unk = lookup("unk_token");
            s.pad = lookup("pad_token");
            s.mask = lookup("mask_token");
            s.gmask = lookup("gmask_token");
            s.cls = lookup("cls_token");
            s.sep = lookup("sep_token");
        }
    }
    let json = dir.join("tokenizer.json");
    if let (Some(v), true) = (vocab, json.is_file()) {
        if v.model == "bert" {
            wordpiece::complete_specials(&mut s, &read_json(&json)?, tc.as_ref(), v);
        }
    }
    let c = Cfg(cfg);
    s.bos = s.bos.or(c.token_id("bos_token_id")?);
    s.eos = s.eos.or(c.token_id("eos_token_id")?);
    s.unk = s.unk.or(c.token_id("unk_token_id")?);
    s.pad = s.pad.or(c.token_id("pad_token_id")?);
    s.mask = s.mask.or(c.token_id("mask_token_id")?);
    s.gmask = s.gmask.or(c.token_id("gmask_token_id")?);
    if let Some(v) = vocab {
        s.bos = s.bos.or(v.builtin.bos);
        s.eos = s.eos.or(v.builtin.eos);
        s.unk = s.unk.or(v.builtin.unk);
        s.pad = s.pad.or(v.builtin.pad);
    }
    Ok(s)
}

/// The id in `v` of the token `tokenizer_config.json` (`tc`) names under `key` (a string or
/// a `{"content": …}` object).
pub(crate) fn token_of(tc: &Json, key: &str, v: &Vocab) -> Option<u32> {
    let e = tc.get(key)?;
    let content = e.as_str().or_else(|| e.get("content")?.as_str())?;
    let id = v.tokens.iter().position(|t| t == content)?;
    u32::try_from(id).ok()
}

/// The `tokenizer.ggml.*` entries of a vocabulary.
pub fn vocab_metadata(v: &Vocab) -> Vec<(String, Value)> {
    let mut md = vec![
        (
            "tokenizer.ggml.model".to_string(),
            Value::String(v.model.clone()),
        ),
        (
            "tokenizer.ggml.pre".to_string(),
            Value::String(v.pre.clone()),
        ),
        (
            "tokenizer.ggml.tokens".to_string(),
            Value::Array(v.tokens.iter().map(|t| Value::String(t.clone())).collect()),
        ),
    ];
    if let Some(s) = &v.scores {
        md.push((
            "tokenizer.ggml.scores".into(),
            Value::Array(s.iter().map(|&x| Value::F32(x)).collect()),
        ));
    }
    md.push((
        "tokenizer.ggml.token_type".into(),
        Value::Array(v.types.iter().map(|&x| Value::I32(x)).collect()),
    ));
    if let Some(m) = &v.merges {
        md.push((
            "tokenizer.ggml.merges".into(),
            Value::Array(m.iter().map(|x| Value::String(x.clone())).collect()),
        ));
    }
    md
}

/// The `tokenizer.ggml.*_token_id` and `add_*_token` entries.
pub fn special_metadata(s: &Specials) -> Vec<(String, Value)> {
    let mut md = Vec::new();
    let ids = [
        ("bos", s.bos),
        ("eos", s.eos),
        ("unknown", s.unk),
        ("padding", s.pad),
        ("mask", s.mask),
        ("gmask", s.gmask),
        ("cls", s.cls),
        ("seperator", s.sep),
    ];
    for (k, id) in ids {
        if let Some(id) = id {
            md.push((format!("tokenizer.ggml.{k}_token_id"), Value::U32(id)));
        }
    }
    if let Some(b) = s.add_bos {
        md.push(("tokenizer.ggml.add_bos_token".into(), Value::Bool(b)));
    }
    if let Some(b) = s.add_eos {
        md.push(("tokenizer.ggml.add_eos_token".into(), Value::Bool(b)));
    }
    if let Some(b) = s.add_sep {
        md.push(("tokenizer.ggml.add_sep_token".into(), Value::Bool(b)));
    }
    if let Some(b) = s.lowercase {
        md.push(("tokenizer.ggml.normalizer.lowercase".into(), Value::Bool(b)));
    }
    if let Some(b) = s.strip_accents {
        md.push((
            "tokenizer.ggml.normalizer.strip_accents".into(),
            Value::Bool(b),
        ));
    }
    md
}
