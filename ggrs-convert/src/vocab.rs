//! The tokenizer of a Hugging Face directory, as `tokenizer.ggml.*` keys.
//!
//! - `tokenizer.model` (or ChatGLM-6B v1's `ice_text.model`): a SentencePiece model, a
//!   protocol-buffer message read here by a small wire-format reader → `llama` (tokens,
//!   scores, token types).
//! - `tokenizer.json` (byte-level BPE): `model.vocab`, `model.merges`, `added_tokens` →
//!   `gpt2` (tokens, token types, merges, pre-tokenizer named after the architecture).
//!
//! Special token ids come from `tokenizer_config.json` (token strings looked up in the
//! vocabulary) first and `config.json` (`*_token_id`) second, as llama.cpp's converter
//! takes them; for SentencePiece the model's own `unk_id`/`bos_id`/`eos_id` fill the gaps.

use std::path::Path;

use ggrs_core::gguf::Value;
use serde_json::Value as Json;

use super::error::ConvertError;
use super::layout::{Cfg, SourceArch};
use super::safetensors::read_json;

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
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
}

/// Special tokens the ChatGLM2 tokenizer appends after the SentencePiece pieces (ids from
/// the piece count on, in this order); ChatGLM3 appends the role tokens after them.
const CHATGLM2_SPECIAL: [&str; 5] = ["[MASK]", "[gMASK]", "[sMASK]", "sop", "eop"];
const CHATGLM3_ROLES: [&str; 4] = ["<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"];

/// Reads the directory's tokenizer, padded to `n_vocab` entries (`[PADi]`, unused), or
/// `None` when it has none. `cfg` is `config.json` (for ChatGLM3 detection).
pub fn load(
    dir: &Path,
    arch: SourceArch,
    n_vocab: usize,
    cfg: &Json,
) -> Result<Option<Vocab>, ConvertError> {
    let spm = ["tokenizer.model", "ice_text.model"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file());
    let json = dir.join("tokenizer.json");
    let mut v = if let Some(p) = spm {
        read_sentencepiece(&p, arch)?
    } else if json.is_file() {
        read_tokenizer_json(&json, arch)?
    } else {
        return Ok(None);
    };
    if arch == SourceArch::ChatGlm2 && v.model == "llama" {
        // ChatGLM2/3 keep their control tokens outside the SentencePiece model.
        let name = cfg
            .get("_name_or_path")
            .and_then(Json::as_str)
            .unwrap_or("");
        let roles: &[&str] = if name.contains("chatglm3") {
            &CHATGLM3_ROLES
        } else {
            &[]
        };
        let extra: Vec<&str> = CHATGLM2_SPECIAL.iter().chain(roles).copied().collect();
        if v.tokens.iter().any(|t| extra.contains(&t.as_str())) {
            // The model file has them already: nothing to add.
        } else if v.tokens.len() + extra.len() <= n_vocab {
            for t in extra {
                v.tokens.push(t.to_string());
                v.types.push(CONTROL);
                if let Some(s) = &mut v.scores {
                    s.push(0.0);
                }
            }
        } else {
            v.notes.push(format!(
                "the SentencePiece model fills all {n_vocab} ids: ChatGLM's control tokens \
                 ({}) are not added",
                extra.join(" ")
            ));
        }
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
/// then `config.json` ids, then the SentencePiece model's own.
pub fn specials(dir: &Path, cfg: &Json, vocab: Option<&Vocab>) -> Result<Specials, ConvertError> {
    let mut s = Specials::default();
    let tc_path = dir.join("tokenizer_config.json");
    if tc_path.is_file() {
        let tc = read_json(&tc_path)?;
        s.add_bos = tc.get("add_bos_token").and_then(Json::as_bool);
        s.add_eos = tc.get("add_eos_token").and_then(Json::as_bool);
        if let Some(v) = vocab {
            let lookup = |key: &str| -> Option<u32> {
                let e = tc.get(key)?;
                let content = e.as_str().or_else(|| e.get("content")?.as_str())?;
                let id = v.tokens.iter().position(|t| t == content)?;
                u32::try_from(id).ok()
            };
            s.bos = lookup("bos_token");
            s.eos = lookup("eos_token");
            s.unk = lookup("unk_token");
            s.pad = lookup("pad_token");
            s.mask = lookup("mask_token");
            s.gmask = lookup("gmask_token");
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
    md
}

// ---------------------------------------------------------------------------------------
// SentencePiece: the protocol-buffer wire format, just enough of it.
//
// A message is a sequence of fields, each a varint key (field number << 3 | wire type)
// followed by a value: wire type 0 a varint, 1 eight bytes, 2 a varint length and that many
// bytes (strings, nested messages), 5 four bytes. ModelProto (sentencepiece_model.proto):
//   1: repeated SentencePiece pieces { 1: string piece, 2: float score, 3: enum type }
//   2: TrainerSpec { 3: model_type, 40: unk_id, 41: bos_id, 42: eos_id, 43: pad_id }
// Piece types: NORMAL 1 (the default), UNKNOWN 2, CONTROL 3, USER_DEFINED 4, BYTE 6,
// UNUSED 5 — the numbers GGUF's token types use.
// ---------------------------------------------------------------------------------------

/// One field of a protobuf message.
enum Field<'a> {
    Varint(u64),
    Fixed64,
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// Reads the fields of one protobuf message in order.
struct Proto<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Proto<'a> {
    fn new(buf: &'a [u8]) -> Proto<'a> {
        Proto { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(format!("a varint runs past the end at byte {}", self.pos));
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!(
            "a varint is longer than 10 bytes at byte {}",
            self.pos
        ))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                format!(
                    "a field of {n} bytes at byte {} runs past the end ({} bytes)",
                    self.pos,
                    self.buf.len()
                )
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next field (number, value), or `None` at the end.
    fn next_field(&mut self) -> Result<Option<(u64, Field<'a>)>, String> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let (num, wire) = (key >> 3, key & 7);
        let f = match wire {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Field::Fixed64
            }
            2 => {
                let n = self.varint()?;
                let n = usize::try_from(n).map_err(|_| format!("length {n} is too large"))?;
                Field::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Field::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            w => return Err(format!("unsupported wire type {w} for field {num}")),
        };
        Ok(Some((num, f)))
    }
}

/// An int32 id from a varint (negative ids are sign-extended to 64 bits on the wire).
fn proto_id(v: u64) -> Option<u32> {
    let i = v as i64;
    u32::try_from(i).ok()
}

fn read_sentencepiece(path: &Path, arch: SourceArch) -> Result<Vocab, ConvertError> {
    let bytes = std::fs::read(path).map_err(|source| ConvertError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |detail: String| ConvertError::Tokenizer {
        path: path.to_path_buf(),
        detail: format!("not a valid SentencePiece model: {detail}"),
    };
    let mut v = Vocab {
        model: "llama".into(),
        pre: match arch {
            SourceArch::ChatGlm2 => "chatglm-spm".into(),
            _ => "default".into(),
        },
        scores: Some(Vec::new()),
        source: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        ..Vocab::default()
    };
    let mut scores = Vec::new();
    // The trainer spec's defaults: unk 0, bos 1, eos 2, pad none.
    v.builtin.unk = Some(0);
    v.builtin.bos = Some(1);
    v.builtin.eos = Some(2);
    let mut model_type = 1;
    let mut msg = Proto::new(&bytes);
    while let Some((num, f)) = msg.next_field().map_err(bad)? {
        match (num, f) {
            (1, Field::Bytes(piece)) => {
                let mut p = Proto::new(piece);
                let (mut text, mut score, mut ty) = (None, 0f32, NORMAL);
                while let Some((n, f)) = p.next_field().map_err(bad)? {
                    match (n, f) {
                        (1, Field::Bytes(s)) => {
                            let s = std::str::from_utf8(s).map_err(|_| {
                                bad(format!("piece {} is not UTF-8", v.tokens.len()))
                            })?;
                            text = Some(s.to_string());
                        }
                        (2, Field::Fixed32(bits)) => score = f32::from_bits(bits),
                        (3, Field::Varint(t)) => {
                            ty = match t {
                                1..=6 => t as i32,
                                other => {
                                    return Err(bad(format!(
                                        "piece {} has unknown type {other}",
                                        v.tokens.len()
                                    )))
                                }
                            }
                        }
                        _ => {}
                    }
                }
                let text =
                    text.ok_or_else(|| bad(format!("piece {} has no text", v.tokens.len())))?;
                if score.is_nan() {
                    return Err(bad(format!("piece {} has a NaN score", v.tokens.len())));
                }
                v.tokens.push(text);
                scores.push(score);
                v.types.push(ty);
            }
            (2, Field::Bytes(spec)) => {
                let mut p = Proto::new(spec);
                while let Some((n, f)) = p.next_field().map_err(bad)? {
                    if let Field::Varint(x) = f {
                        match n {
                            3 => model_type = x,
                            40 => v.builtin.unk = proto_id(x),
                            41 => v.builtin.bos = proto_id(x),
                            42 => v.builtin.eos = proto_id(x),
                            43 => v.builtin.pad = proto_id(x),
                            _ => {}
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if v.tokens.is_empty() {
        return Err(bad("it has no pieces".into()));
    }
    if model_type != 1 && model_type != 2 {
        return Err(bad(format!(
            "model type {model_type} (only unigram 1 and BPE 2 are supported)"
        )));
    }
    let n = v.tokens.len();
    for id in [
        &mut v.builtin.unk,
        &mut v.builtin.bos,
        &mut v.builtin.eos,
        &mut v.builtin.pad,
    ] {
        if id.is_some_and(|i| i as usize >= n) {
            *id = None;
        }
    }
    // Types llama.cpp relies on: the unknown piece is UNKNOWN.
    if let Some(u) = v.builtin.unk {
        if v.types[u as usize] == NORMAL {
            v.types[u as usize] = UNKNOWN;
        }
    }
    v.scores = Some(scores);
    Ok(v)
}

// ---------------------------------------------------------------------------------------
// tokenizer.json (Hugging Face `tokenizers`, BPE model).
// ---------------------------------------------------------------------------------------

fn read_tokenizer_json(path: &Path, arch: SourceArch) -> Result<Vocab, ConvertError> {
    let j = read_json(path)?;
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
            let ty = if special || looks_special(text) {
                CONTROL
            } else {
                USER_DEFINED
            };
            set(id, text, ty)?;
        }
    }
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
    let pre = match arch {
        SourceArch::Qwen2 => "qwen2",
        SourceArch::Llama => "llama-bpe",
        SourceArch::ChatGlm2 | SourceArch::ChatGlm1 => "chatglm-bpe",
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
