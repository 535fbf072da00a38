//! SentencePiece models (`tokenizer.model`, ChatGLM-6B v1's `ice_text.model`): the
//! protocol-buffer wire format, just enough of it.
//!
//! A message is a sequence of fields, each a varint key (field number << 3 | wire type)
//! followed by a value: wire type 0 a varint, 1 eight bytes, 2 a varint length and that many
//! bytes (strings, nested messages), 5 four bytes. ModelProto (sentencepiece_model.proto):
//!   1: repeated SentencePiece pieces { 1: string piece, 2: float score, 3: enum type }
//!   2: TrainerSpec { 3: model_type, 40: unk_id, 41: bos_id, 42: eos_id, 43: pad_id }
//! Piece types: NORMAL 1 (the default), UNKNOWN 2, CONTROL 3, USER_DEFINED 4, BYTE 6,
//! UNUSED 5 — the numbers GGUF's token types use.

use std::path::Path;

use super::{Vocab, NORMAL, UNKNOWN};
use crate::error::ConvertError;

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

/// Reads the SentencePiece model at `path` as a `llama` vocabulary whose
/// `tokenizer.ggml.pre` is `pre`.
pub(super) fn read_sentencepiece(path: &Path, pre: &str) -> Result<Vocab, ConvertError> {
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
        pre: pre.into(),
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
