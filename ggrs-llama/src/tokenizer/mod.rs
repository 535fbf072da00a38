//! Tokenizers: text ↔ token ids, exactly as llama.cpp does it.
//!
//! Three algorithms, chosen by the model file's `tokenizer.ggml.model`:
//! - `llama`: SentencePiece with byte fallback (LLaMA 1/2, Mistral, ChatGLM's vocabularies);
//! - `bert`: WordPiece (BERT-family encoders; [CLS] first and [SEP] last);
//! - `gpt2`: byte-level BPE behind a pre-tokenizer named by `tokenizer.ggml.pre`, any of
//!   llama.cpp's (Qwen2, LLaMA 3, GPT-2, DeepSeek and more; see [`PreTokenizer`]); `gemma4`
//!   is the same BPE on raw UTF-8 with spaces written as `▁` (Gemma 4).
//!
//! Other tokenizer models llama.cpp has (`t5`'s Unigram, `rwkv`…) are
//! refused with [`TokenizerError::UnsupportedModel`].
//!
//! ```no_run
//! # fn main() -> Result<(), ggrs_llama::tokenizer::TokenizerError> {
//! use ggrs_llama::tokenizer::Tokenizer;
//!
//! let tok = Tokenizer::open("model.gguf")?;
//! let ids = tok.encode("Hello world", true, false)?;
//! assert_eq!(tok.decode(&ids)?.trim_start(), "Hello world");
//! # Ok(())
//! # }
//! ```
//!
//! Special tokens: with `parse_special`, the text of a control token (`<|im_start|>`, `<s>`…)
//! becomes that token; without it, such text is tokenized as plain text. User-defined tokens
//! are always matched (llama.cpp does the same). Per-token `lstrip`/`rstrip` attributes,
//! which llama.cpp sets for a few model names (Phi-3, Jina), are not implemented.
//!
//! Decoding follows llama.cpp's `llama_detokenize` with `remove_special = false`: with
//! SentencePiece's `add_space_prefix`, one leading space is removed from the *first* token's
//! piece only. So `decode(encode(s, add_special = false))` gives back `s`, while a sequence
//! that starts with BOS decodes to `" " + s` (the BOS piece is empty and takes the strip);
//! [`Tokenizer::decode_skip_bos`] removes BOS and that space.

mod bpe;
mod decode;
mod error;
mod pretokenize;
mod spm;
mod unicode;
mod vocab;
mod wpm;

use std::path::Path;

use ggrs_core::gguf::GgufFile;

pub use decode::{DecodeState, Decoder};
pub use error::TokenizerError;
pub use pretokenize::PreTokenizer;
pub use vocab::{SpecialTokens, TokenData, TokenType, Vocab, VocabKind, VocabParts};

/// A tokenizer: a [`Vocab`] and the algorithms that use it. Cheap to share (`Send + Sync`).
#[derive(Debug, Clone)]
pub struct Tokenizer {
    vocab: Vocab,
    /// Constrained decoding's per-vocabulary state, built on first use.
    grammar: DerivedCell,
}

/// A value derived once from a tokenizer's vocabulary and shared by every clone of it
/// (constrained decoding keeps its token trie here). Type-erased, so the tokenizer names
/// none of its users.
#[derive(Clone, Default)]
pub struct DerivedCell(
    std::sync::Arc<std::sync::OnceLock<std::sync::Arc<dyn std::any::Any + Send + Sync>>>,
);

impl std::fmt::Debug for DerivedCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "DerivedCell(built)"
        } else {
            "DerivedCell(empty)"
        })
    }
}

impl DerivedCell {
    /// The value, built by `init` on first use. `None` when the cell already holds a value
    /// of another type (each cell has one user, which always asks for the same type).
    pub fn get_or_init<T: std::any::Any + Send + Sync>(
        &self,
        init: impl FnOnce() -> T,
    ) -> Option<&T> {
        self.0
            .get_or_init(|| std::sync::Arc::new(init()))
            .downcast_ref::<T>()
    }
}

/// A piece of the input after special tokens have been cut out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fragment {
    /// `text[start..end]`, still to tokenize.
    Text { start: usize, end: usize },
    /// A special token found in the text.
    Token(u32),
}

impl Tokenizer {
    /// A tokenizer for `vocab`.
    pub fn new(vocab: Vocab) -> Tokenizer {
        Tokenizer {
            vocab,
            grammar: Default::default(),
        }
    }

    /// Constrained decoding's per-vocabulary state (token trie, lexer slices): built by
    /// the first [`crate::constraint::Constraint::compile`] and shared by every clone.
    pub fn grammar_vocab(&self) -> &DerivedCell {
        &self.grammar
    }

    /// Reads the tokenizer from a model file's `tokenizer.ggml.*` keys.
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        Ok(Tokenizer::new(Vocab::from_gguf(file)?))
    }

    /// Opens a GGUF file (a model or a vocabulary-only file) and reads its tokenizer.
    pub fn open(path: impl AsRef<Path>) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_gguf(&GgufFile::open(path)?)
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// Number of tokens in the vocabulary.
    pub fn n_vocab(&self) -> usize {
        self.vocab.len()
    }

    /// The BOS token, if any.
    pub fn bos(&self) -> Option<u32> {
        self.vocab.special.bos
    }

    /// The EOS token, if any.
    pub fn eos(&self) -> Option<u32> {
        self.vocab.special.eos
    }

    /// Whether `id` ends generation (EOS, EOT, `<|im_end|>`, `<|endoftext|>`…).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.is_eog(id)
    }

    /// Tokenizes `text`.
    ///
    /// - `add_special`: put BOS first and/or EOS last, as the vocabulary's `add_bos_token`
    ///   and `add_eos_token` say (an error if it asks for one it does not have);
    /// - `parse_special`: text spelling a control token (`<|im_start|>`) becomes that token;
    ///   otherwise it is ordinary text. User-defined tokens are matched either way.
    ///
    /// llama.cpp's `llama_tokenize` gives the same ids for the same arguments.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        self.encode_spm_prefix(text, add_special, parse_special, true)
    }

    /// [`Tokenizer::encode`], where `space_after_special = false` makes a SentencePiece
    /// vocabulary add its space prefix only at the start of the text, not again after each
    /// special or user-defined token (SentencePiece's own behaviour, which ChatGLM-6B v1's
    /// tokenizer relies on for `<n>`, `<|tab|>`, `<|blank_N|>`).
    pub(crate) fn encode_spm_prefix(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
        space_after_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let v = &self.vocab;
        let fragments = self.partition(text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && v.add_bos {
            out.push(v.special.bos.ok_or(TokenizerError::MissingSpecialToken {
                which: "BOS",
                flag: "tokenizer.ggml.add_bos_token",
                key: vocab::K_BOS,
            })?);
        }
        match v.kind {
            VocabKind::Spm => {
                // A space goes before text at the start and after each special token.
                let mut after_special = true;
                let mut buf = String::new();
                for f in fragments {
                    match f {
                        Fragment::Text { start, end } => {
                            buf.clear();
                            if v.add_space_prefix && after_special {
                                buf.push('▁');
                            }
                            for c in text[start..end].chars() {
                                buf.push(if c == ' ' { '▁' } else { c });
                            }
                            spm::tokenize(v, &buf, &mut out)?;
                            after_special = false;
                        }
                        Fragment::Token(id) => {
                            // Prefixed once: before a leading special token the space is a
                            // token of its own (SentencePiece's `▁` then `<n>`).
                            if !space_after_special && after_special && v.add_space_prefix {
                                spm::tokenize(v, "▁", &mut out)?;
                            }
                            out.push(id);
                            after_special = space_after_special;
                        }
                    }
                }
            }
            VocabKind::Bpe => {
                // `Vocab::from_parts` gives every BPE vocabulary its pre-tokenizer.
                let pre = v.pre.expect("a BPE vocabulary has a pre-tokenizer");
                for f in fragments {
                    match f {
                        Fragment::Text { start, end } => {
                            bpe::tokenize(v, pre, &text[start..end], &mut out)
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            VocabKind::Wpm => {
                for f in fragments {
                    match f {
                        Fragment::Text { start, end } => {
                            wpm::tokenize(v, &text[start..end], &mut out)?
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && v.add_sep {
            out.push(v.special.sep.ok_or(TokenizerError::MissingSpecialToken {
                which: "SEP",
                flag: "a WordPiece vocabulary",
                key: "tokenizer.ggml.seperator_token_id",
            })?);
        }
        if add_special && v.add_eos {
            out.push(v.special.eos.ok_or(TokenizerError::MissingSpecialToken {
                which: "EOS",
                flag: "tokenizer.ggml.add_eos_token",
                key: vocab::K_EOS,
            })?);
        }
        Ok(out)
    }

    /// Cuts the special tokens out of `text`, as llama.cpp's `tokenizer_st_partition`: each
    /// special token in turn, longest first, splits every text fragment at its occurrences.
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        let v = &self.vocab;
        let mut fragments = Vec::new();
        if text.is_empty() {
            return fragments;
        }
        fragments.push(Fragment::Text {
            start: 0,
            end: text.len(),
        });
        for &id in &v.special_by_length {
            let token = &v.tokens[id as usize];
            if !parse_special && token.ty != TokenType::UserDefined {
                continue;
            }
            let needle = token.text.as_str();
            // Cheap test first: most special tokens do not occur at all.
            if !text.contains(needle) {
                continue;
            }
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for f in fragments {
                let Fragment::Text { mut start, end } = f else {
                    next.push(f);
                    continue;
                };
                while let Some(at) = text[start..end].find(needle) {
                    let at = start + at;
                    if at > start {
                        next.push(Fragment::Text { start, end: at });
                    }
                    next.push(Fragment::Token(id));
                    start = at + needle.len();
                }
                if start < end {
                    next.push(Fragment::Text { start, end });
                }
            }
            fragments = next;
        }
        fragments
    }

    /// The bytes of token `id`, control tokens included as their text (llama.cpp's
    /// `llama_token_to_piece` with `special = true`): SentencePiece `▁` becomes a space and
    /// `<0xNN>` its byte; BPE byte characters become their bytes. A piece can be part of a
    /// UTF-8 character. Error: `id` outside the vocabulary.
    pub fn token_to_piece(&self, id: u32) -> Result<Vec<u8>, TokenizerError> {
        decode::piece(&self.vocab, id, true, false)
    }

    /// The bytes of token `id` as generated text shows it: control and unknown tokens give
    /// nothing (llama.cpp's `llama_token_to_piece` with `special = false`).
    pub fn token_to_text_piece(&self, id: u32) -> Result<Vec<u8>, TokenizerError> {
        decode::piece(&self.vocab, id, false, false)
    }

    /// Decodes `ids` to text as llama.cpp's `llama_detokenize(remove_special = false,
    /// unparse_special = false)`: control tokens give nothing, the first piece loses one
    /// leading space if the vocabulary adds a space prefix, BPE vocabularies with
    /// `clean_spaces` tidy spaces before punctuation, and invalid UTF-8 becomes U+FFFD.
    /// Error: an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.decode_impl(ids, false)
    }

    /// As [`Tokenizer::decode`], but control tokens appear as their text (`<|im_end|>`).
    pub fn decode_with_special(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.decode_impl(ids, true)
    }

    /// As [`Tokenizer::decode`] after removing a leading BOS (and a trailing EOS when the
    /// vocabulary adds one), with the first text piece's leading space removed as for text
    /// without BOS: `decode_skip_bos(encode(s, true, false)) == s`.
    pub fn decode_skip_bos(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let v = &self.vocab;
        let mut ids = ids;
        if let (Some(bos), Some((&first, rest))) = (v.special.bos, ids.split_first()) {
            if v.add_bos && first == bos {
                ids = rest;
            }
        }
        if let (Some(eos), Some((&last, rest))) = (v.special.eos, ids.split_last()) {
            if v.add_eos && last == eos {
                ids = rest;
            }
        }
        self.decode_impl(ids, false)
    }

    fn decode_impl(&self, ids: &[u32], special: bool) -> Result<String, TokenizerError> {
        let mut bytes = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let strip = i == 0 && self.vocab.add_space_prefix;
            bytes.extend_from_slice(&decode::piece(&self.vocab, id, special, strip)?);
        }
        if self.vocab.clean_spaces {
            bytes = decode::clean_spaces(bytes);
        }
        Ok(String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// A streaming decoder for a sequence that starts here: its first piece loses a leading
    /// space as in [`Tokenizer::decode`], and control tokens give nothing.
    pub fn decoder(&self) -> Decoder<'_> {
        Decoder::new(self, self.vocab.add_space_prefix, false)
    }

    /// A streaming decoder for tokens that continue earlier ones (generated tokens after a
    /// prompt): no space is removed. Control tokens give nothing.
    pub fn continuation_decoder(&self) -> Decoder<'_> {
        Decoder::new(self, false, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then `extra`.
    fn spm(extra: &[(&str, f32, i64)]) -> Tokenizer {
        let mut parts = VocabParts {
            model: "llama".into(),
            tokens: vec!["<unk>".into(), "<s>".into(), "</s>".into()],
            scores: Some(vec![0.0; 3]),
            token_types: Some(vec![2, 3, 3]),
            ..VocabParts::default()
        };
        for b in 0..=255u8 {
            parts.tokens.push(format!("<0x{b:02X}>"));
            parts.scores.as_mut().unwrap().push(0.0);
            parts.token_types.as_mut().unwrap().push(6);
        }
        for &(t, s, ty) in extra {
            parts.tokens.push(t.into());
            parts.scores.as_mut().unwrap().push(s);
            parts.token_types.as_mut().unwrap().push(ty);
        }
        Tokenizer::new(Vocab::from_parts(parts).unwrap())
    }

    fn id(t: &Tokenizer, text: &str) -> u32 {
        t.vocab().token_id(text).unwrap()
    }

    #[test]
    fn spm_space_prefix_and_specials() {
        let t = spm(&[
            ("▁", -1.0, 1),
            ("h", -2.0, 1),
            ("i", -2.0, 1),
            ("▁h", -1.5, 1),
            ("▁hi", -0.5, 1),
            ("<|x|>", 0.0, 3),
            ("<u>", 0.0, 4),
        ]);
        let hi = id(&t, "▁hi");
        let x = id(&t, "<|x|>");
        let u = id(&t, "<u>");
        assert_eq!(t.encode("hi", false, false).unwrap(), vec![hi]);
        assert_eq!(t.encode("hi", true, false).unwrap(), vec![1, hi]);
        assert_eq!(t.encode("", true, false).unwrap(), vec![1]);
        assert_eq!(t.encode("", false, false).unwrap(), Vec::<u32>::new());
        // A control token is matched only when parsing specials; a space goes after it.
        assert_eq!(t.encode("hi<|x|>hi", false, true).unwrap(), vec![hi, x, hi]);
        let plain = t.encode("hi<|x|>hi", false, false).unwrap();
        assert!(!plain.contains(&x));
        // A user-defined token is always matched.
        assert_eq!(t.encode("<u>hi", false, false).unwrap(), vec![u, hi]);
        // Decoding: first piece loses its space; BOS takes the strip; control tokens vanish.
        assert_eq!(t.decode(&[hi, hi]).unwrap(), "hi hi");
        assert_eq!(t.decode(&[1, hi]).unwrap(), " hi");
        assert_eq!(t.decode_skip_bos(&[1, hi]).unwrap(), "hi");
        assert_eq!(t.decode(&[hi, x, hi]).unwrap(), "hi hi");
        assert_eq!(t.decode_with_special(&[hi, x, u]).unwrap(), "hi<|x|><u>");
        assert!(matches!(
            t.decode(&[99_999]),
            Err(TokenizerError::TokenOutOfRange { id: 99_999, .. })
        ));
    }

    #[test]
    fn streaming_holds_back_partial_characters() {
        let t = spm(&[("▁", -1.0, 1)]);
        // "▁€" → ▁ + bytes E2 82 AC.
        let ids = t.encode("€", false, false).unwrap();
        assert_eq!(ids, vec![id(&t, "▁"), 3 + 0xe2, 3 + 0x82, 3 + 0xac]);
        let mut d = t.continuation_decoder();
        assert_eq!(d.push(ids[0]).unwrap(), " ");
        assert_eq!(d.push(ids[1]).unwrap(), "");
        assert_eq!(d.push(ids[2]).unwrap(), "");
        assert_eq!(d.pending(), &[0xe2, 0x82]);
        assert_eq!(d.push(ids[3]).unwrap(), "€");
        assert_eq!(d.finish(), "");
        // An invalid byte is replaced at once; a dangling lead byte at the end on finish.
        let mut d = t.decoder();
        assert_eq!(d.push(3 + 0xff).unwrap(), "\u{fffd}");
        assert_eq!(d.push(3 + 0xe2).unwrap(), "");
        assert_eq!(d.finish(), "\u{fffd}");
    }

    #[test]
    fn vocab_errors() {
        let parts = VocabParts {
            model: "t5".into(),
            tokens: vec!["a".into()],
            ..VocabParts::default()
        };
        let e = Vocab::from_parts(parts).unwrap_err();
        assert!(
            matches!(&e, TokenizerError::UnsupportedModel { model, kind } if model == "t5" && kind.contains("Unigram"))
        );
        assert!(e.to_string().contains("`t5`"));
        let parts = VocabParts {
            model: "no-such-model".into(),
            tokens: vec!["a".into()],
            ..VocabParts::default()
        };
        let e = Vocab::from_parts(parts).unwrap_err();
        assert!(matches!(&e, TokenizerError::UnknownModel { model } if model == "no-such-model"));

        let parts = VocabParts {
            model: "gpt2".into(),
            pre: Some("no-such-pre".into()),
            tokens: vec!["a".into()],
            ..VocabParts::default()
        };
        let e = Vocab::from_parts(parts).unwrap_err();
        assert!(
            matches!(&e, TokenizerError::UnknownPreTokenizer { pre, .. } if pre == "no-such-pre")
        );
        assert!(e.to_string().contains("qwen2"));

        let parts = VocabParts {
            model: "llama".into(),
            tokens: vec!["a".into(), "b".into()],
            scores: Some(vec![0.0]),
            ..VocabParts::default()
        };
        assert!(matches!(
            Vocab::from_parts(parts),
            Err(TokenizerError::LengthMismatch {
                len: 1,
                n_tokens: 2,
                ..
            })
        ));

        let parts = VocabParts {
            model: "llama".into(),
            tokens: vec!["a".into(), "a".into()],
            ..VocabParts::default()
        };
        assert!(matches!(
            Vocab::from_parts(parts),
            Err(TokenizerError::DuplicateToken {
                first: 0,
                second: 1,
                ..
            })
        ));

        let mut parts = VocabParts {
            model: "llama".into(),
            tokens: vec!["a".into(), "b".into()],
            ..VocabParts::default()
        };
        parts.special.eos = Some(7);
        assert!(matches!(
            Vocab::from_parts(parts),
            Err(TokenizerError::SpecialIdOutOfRange {
                id: 7,
                n_tokens: 2,
                ..
            })
        ));

        let parts = VocabParts {
            model: "gpt2".into(),
            tokens: vec!["a".into(), "b".into()],
            merges: vec!["ab".into()],
            ..VocabParts::default()
        };
        assert!(matches!(
            Vocab::from_parts(parts),
            Err(TokenizerError::BadMerge { index: 0, .. })
        ));

        // In a one-token SentencePiece vocabulary the default BOS (id 1) does not exist, so
        // adding it fails while plain encoding works.
        let parts = VocabParts {
            model: "llama".into(),
            tokens: vec!["▁a".into()],
            ..VocabParts::default()
        };
        let t = Tokenizer::new(Vocab::from_parts(parts).unwrap());
        assert!(matches!(
            t.encode("a", true, false),
            Err(TokenizerError::MissingSpecialToken { which: "BOS", .. })
        ));
        assert_eq!(t.encode("a", false, false).unwrap(), vec![0]);
    }

    #[test]
    fn gguf_key_types_are_checked() {
        use ggrs_core::gguf::Value;
        let kv: Vec<(&str, Value)> = vec![
            ("tokenizer.ggml.model", Value::String("llama".into())),
            (
                "tokenizer.ggml.tokens",
                Value::Array(vec![Value::String("a".into()), Value::U32(3)]),
            ),
        ];
        let get = |k: &str| kv.iter().find(|(n, _)| *n == k).map(|(_, v)| v);
        let e = VocabParts::from_kv(get).unwrap_err();
        assert!(matches!(
            e,
            TokenizerError::WrongElementType {
                key: "tokenizer.ggml.tokens",
                index: 1,
                ..
            }
        ));
        let kv: Vec<(&str, Value)> = vec![("tokenizer.ggml.model", Value::U32(1))];
        let get = |k: &str| kv.iter().find(|(n, _)| *n == k).map(|(_, v)| v);
        assert!(matches!(
            VocabParts::from_kv(get),
            Err(TokenizerError::WrongType {
                key: "tokenizer.ggml.model",
                ..
            })
        ));
        let kv: Vec<(&str, Value)> = vec![("tokenizer.ggml.model", Value::String("llama".into()))];
        let get = |k: &str| kv.iter().find(|(n, _)| *n == k).map(|(_, v)| v);
        assert!(matches!(
            VocabParts::from_kv(get),
            Err(TokenizerError::MissingKey {
                key: "tokenizer.ggml.tokens",
                ..
            })
        ));
    }
}
