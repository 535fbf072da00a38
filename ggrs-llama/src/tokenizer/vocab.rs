//! The vocabulary: tokens, their scores and types, merge rules, special tokens and flags, read
//! from a model file's `tokenizer.ggml.*` keys with llama.cpp's defaults and rules.

use std::collections::HashMap;

use ggrs_core::gguf::{GgufFile, Value};

use super::error::TokenizerError;
use super::pretokenize::{PreConfig, PreTokenizer};

type Result<T> = std::result::Result<T, TokenizerError>;

/// The kind of a token, from `tokenizer.ggml.token_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// Type 0 or a value outside 1..=6: decodes to nothing.
    Undefined,
    /// Type 1: ordinary text.
    Normal,
    /// Type 2: the unknown token (`<unk>`).
    Unknown,
    /// Type 3: a control token (`<s>`, `<|im_start|>`…): matched in text only when special
    /// tokens are parsed, decoded to nothing unless asked.
    Control,
    /// Type 4: a user-defined token: always matched in text as a whole, decoded as its text.
    UserDefined,
    /// Type 5: unused: decodes to nothing.
    Unused,
    /// Type 6: a byte (`<0x0A>`), SentencePiece's fallback for text outside the vocabulary.
    Byte,
}

impl TokenType {
    /// The type of a `tokenizer.ggml.token_type` value (llama.cpp's numbering).
    pub fn from_gguf(value: i64) -> TokenType {
        match value {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }

    /// Whether text can contain this token by name (control, user-defined, unknown): such
    /// tokens are cut out of the text before the tokenizer proper runs.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            TokenType::Control | TokenType::UserDefined | TokenType::Unknown
        )
    }
}

/// The tokenizer algorithm, from `tokenizer.ggml.model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VocabKind {
    /// `llama`: SentencePiece (merges chosen by token score, byte fallback).
    Spm,
    /// `gpt2`: byte-level BPE (merges chosen by rank, after a pre-tokenizer).
    Bpe,
    /// `bert`: WordPiece (longest tokens first, word by word; BERT-family encoders).
    Wpm,
}

/// One token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenData {
    /// Its text as stored in the file (SentencePiece writes spaces as `▁`; byte-level BPE
    /// writes each byte as one character of GPT-2's byte map).
    pub text: String,
    /// Its score (SentencePiece: higher merges first); 0 if the file has no scores.
    pub score: f32,
    /// Its type.
    pub ty: TokenType,
}

/// Ids of the special tokens (each `None` if the vocabulary has none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence (`tokenizer.ggml.bos_token_id`).
    pub bos: Option<u32>,
    /// End of sequence (`tokenizer.ggml.eos_token_id`).
    pub eos: Option<u32>,
    /// End of turn (`tokenizer.ggml.eot_token_id`, or found by text: `<|im_end|>`…).
    pub eot: Option<u32>,
    /// End of message (`tokenizer.ggml.eom_token_id`, or `<|eom_id|>`).
    pub eom: Option<u32>,
    /// Unknown (`tokenizer.ggml.unknown_token_id`).
    pub unk: Option<u32>,
    /// Separator (`tokenizer.ggml.seperator_token_id`, llama.cpp's spelling).
    pub sep: Option<u32>,
    /// Padding (`tokenizer.ggml.padding_token_id`).
    pub pad: Option<u32>,
    /// Mask (`tokenizer.ggml.mask_token_id`).
    pub mask: Option<u32>,
    /// Fill-in-the-middle prefix (`tokenizer.ggml.fim_pre_token_id`, or by text).
    pub fim_pre: Option<u32>,
    /// Fill-in-the-middle suffix.
    pub fim_suf: Option<u32>,
    /// Fill-in-the-middle middle.
    pub fim_mid: Option<u32>,
    /// Fill-in-the-middle padding.
    pub fim_pad: Option<u32>,
    /// Fill-in-the-middle repository name.
    pub fim_rep: Option<u32>,
    /// Fill-in-the-middle file separator.
    pub fim_sep: Option<u32>,
}

/// The vocabulary as plain data, before validation: what the `tokenizer.ggml.*` keys hold.
/// Build one by hand (for tests, or a vocabulary from elsewhere) and turn it into a
/// [`Vocab`] with [`Vocab::from_parts`]; `None` fields take llama.cpp's defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VocabParts {
    /// `tokenizer.ggml.model`: `llama`, `gpt2` or `gemma4`.
    pub model: String,
    /// `tokenizer.ggml.pre`: the BPE pre-tokenizer's name (`None`: `default`).
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores` (`None`: all 0).
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type` (`None`: all normal).
    pub token_types: Option<Vec<i64>>,
    /// `tokenizer.ggml.merges` (BPE only): `"left right"`, highest priority first.
    pub merges: Vec<String>,
    /// Special token ids given by keys (`None`: the model's default or none).
    pub special: SpecialTokens,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_sep_token` (default: true for WordPiece, as llama.cpp; its
    /// converter writes false, and `add_eos_token` true with EOS = [SEP], for BERT).
    pub add_sep: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` (SentencePiece's default: true).
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.ggml.remove_extra_whitespaces` (read, not used by these tokenizers, as in
    /// llama.cpp).
    pub remove_extra_whitespaces: Option<bool>,
    /// `tokenizer.ggml.normalizer.lowercase` (WordPiece: lower-case the text; default true).
    pub lowercase: Option<bool>,
    /// `tokenizer.ggml.normalizer.strip_accents` (WordPiece: decompose and drop accent
    /// marks; default: as `lowercase`).
    pub strip_accents: Option<bool>,
}

// Keys.
const K_MODEL: &str = "tokenizer.ggml.model";
const K_PRE: &str = "tokenizer.ggml.pre";
const K_TOKENS: &str = "tokenizer.ggml.tokens";
const K_SCORES: &str = "tokenizer.ggml.scores";
const K_TYPES: &str = "tokenizer.ggml.token_type";
const K_MERGES: &str = "tokenizer.ggml.merges";
const K_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const K_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const K_ADD_SEP: &str = "tokenizer.ggml.add_sep_token";
const K_ADD_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const K_REMOVE_WS: &str = "tokenizer.ggml.remove_extra_whitespaces";
const K_LOWERCASE: &str = "tokenizer.ggml.normalizer.lowercase";
const K_STRIP_ACCENTS: &str = "tokenizer.ggml.normalizer.strip_accents";
pub(crate) const K_BOS: &str = "tokenizer.ggml.bos_token_id";
pub(crate) const K_EOS: &str = "tokenizer.ggml.eos_token_id";
const K_EOT: &str = "tokenizer.ggml.eot_token_id";
const K_EOM: &str = "tokenizer.ggml.eom_token_id";
pub(crate) const K_UNK: &str = "tokenizer.ggml.unknown_token_id";
const K_SEP: &str = "tokenizer.ggml.seperator_token_id";
const K_PAD: &str = "tokenizer.ggml.padding_token_id";
const K_MASK: &str = "tokenizer.ggml.mask_token_id";
const K_CLS: &str = "tokenizer.ggml.cls_token_id";
const K_FIM_PRE: &str = "tokenizer.ggml.fim_pre_token_id";
const K_FIM_SUF: &str = "tokenizer.ggml.fim_suf_token_id";
const K_FIM_MID: &str = "tokenizer.ggml.fim_mid_token_id";
const K_FIM_PAD: &str = "tokenizer.ggml.fim_pad_token_id";
const K_FIM_REP: &str = "tokenizer.ggml.fim_rep_token_id";
const K_FIM_SEP: &str = "tokenizer.ggml.fim_sep_token_id";
// Older names of the first three fill-in-the-middle keys.
const K_PREFIX: &str = "tokenizer.ggml.prefix_token_id";
const K_SUFFIX: &str = "tokenizer.ggml.suffix_token_id";
const K_MIDDLE: &str = "tokenizer.ggml.middle_token_id";

/// Reads typed values out of a key lookup, with errors that name the key.
struct Keys<'a, F: Fn(&str) -> Option<&'a Value>> {
    get: F,
}

impl<'a, F: Fn(&str) -> Option<&'a Value>> Keys<'a, F> {
    fn string(&self, key: &'static str) -> Result<Option<String>> {
        match (self.get)(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(|s| Some(s.to_owned()))
                .ok_or(TokenizerError::WrongType {
                    key,
                    expected: "a string",
                    found: v.type_name(),
                }),
        }
    }

    fn bool(&self, key: &'static str) -> Result<Option<bool>> {
        match (self.get)(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or(TokenizerError::WrongType {
                key,
                expected: "a bool",
                found: v.type_name(),
            }),
        }
    }

    fn id(&self, key: &'static str) -> Result<Option<u32>> {
        match (self.get)(key) {
            None => Ok(None),
            Some(v) => v.as_u32().map(Some).ok_or(TokenizerError::WrongType {
                key,
                expected: "a token id (an unsigned integer)",
                found: v.type_name(),
            }),
        }
    }

    fn array(&self, key: &'static str) -> Result<Option<&'a [Value]>> {
        match (self.get)(key) {
            None => Ok(None),
            Some(v) => v.as_array().map(Some).ok_or(TokenizerError::WrongType {
                key,
                expected: "an array",
                found: v.type_name(),
            }),
        }
    }

    /// The elements of array `key`, each converted by `convert` (`None` when the key is
    /// absent; an error naming the index of the first element of another type).
    fn elements<T>(
        &self,
        key: &'static str,
        expected: &'static str,
        convert: impl Fn(&Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>> {
        let Some(items) = self.array(key)? else {
            return Ok(None);
        };
        items
            .iter()
            .enumerate()
            .map(|(index, v)| {
                convert(v).ok_or(TokenizerError::WrongElementType {
                    key,
                    index,
                    expected,
                    found: v.type_name(),
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    fn strings(&self, key: &'static str) -> Result<Option<Vec<String>>> {
        self.elements(key, "a string", |v| v.as_str().map(str::to_owned))
    }

    fn floats(&self, key: &'static str) -> Result<Option<Vec<f32>>> {
        self.elements(key, "a number", Value::as_f32)
    }

    fn ints(&self, key: &'static str) -> Result<Option<Vec<i64>>> {
        self.elements(key, "an integer", Value::as_i64)
    }
}

impl VocabParts {
    /// Reads the `tokenizer.ggml.*` keys through `get` (a key → value lookup, such as
    /// [`GgufFile::get`]). Checks the value types only; [`Vocab::from_parts`] checks the rest.
    pub fn from_kv<'a>(get: impl Fn(&str) -> Option<&'a Value>) -> Result<VocabParts> {
        let keys = Keys { get };
        let model = keys.string(K_MODEL)?.ok_or(TokenizerError::MissingKey {
            key: K_MODEL,
            hint: "it names the tokenizer: `llama` or `gpt2`",
        })?;
        let tokens = keys.strings(K_TOKENS)?.ok_or(TokenizerError::MissingKey {
            key: K_TOKENS,
            hint: "it lists the vocabulary",
        })?;
        let pre = keys.string(K_PRE)?;
        let bpe = model == "gpt2" || model == "gemma4";
        let merges = match keys.strings(K_MERGES)? {
            Some(merges) if bpe => merges,
            // Kimi K2's files may come without merges; llama.cpp accepts that.
            None if bpe && pre.as_deref() != Some("kimi-k2") => {
                return Err(TokenizerError::MissingKey {
                    key: K_MERGES,
                    hint: "a BPE tokenizer (`gpt2`, `gemma4`) needs its merge rules",
                })
            }
            _ => Vec::new(),
        };
        // WordPiece files name [CLS] (llama.cpp's BOS for them) by its own key.
        let bos = match keys.id(K_BOS)? {
            None if model == "bert" => keys.id(K_CLS)?,
            bos => bos,
        };
        let special = SpecialTokens {
            bos,
            eos: keys.id(K_EOS)?,
            eot: keys.id(K_EOT)?,
            eom: keys.id(K_EOM)?,
            unk: keys.id(K_UNK)?,
            sep: keys.id(K_SEP)?,
            pad: keys.id(K_PAD)?,
            mask: keys.id(K_MASK)?,
            // The older key names are read after the new ones and win, as in llama.cpp.
            fim_pre: keys.id(K_PREFIX)?.or(keys.id(K_FIM_PRE)?),
            fim_suf: keys.id(K_SUFFIX)?.or(keys.id(K_FIM_SUF)?),
            fim_mid: keys.id(K_MIDDLE)?.or(keys.id(K_FIM_MID)?),
            fim_pad: keys.id(K_FIM_PAD)?,
            fim_rep: keys.id(K_FIM_REP)?,
            fim_sep: keys.id(K_FIM_SEP)?,
        };
        Ok(VocabParts {
            model,
            pre,
            tokens,
            scores: keys.floats(K_SCORES)?,
            token_types: keys.ints(K_TYPES)?,
            merges,
            special,
            add_bos: keys.bool(K_ADD_BOS)?,
            add_eos: keys.bool(K_ADD_EOS)?,
            add_sep: keys.bool(K_ADD_SEP)?,
            add_space_prefix: keys.bool(K_ADD_PREFIX)?,
            remove_extra_whitespaces: keys.bool(K_REMOVE_WS)?,
            lowercase: keys.bool(K_LOWERCASE)?,
            strip_accents: keys.bool(K_STRIP_ACCENTS)?,
        })
    }
}

/// WordPiece's normaliser: llama.cpp's BertNormalizer options (`tokenizer.ggml.normalizer.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Normalizer {
    /// Lower-case every code point.
    pub lowercase: bool,
    /// Decompose (NFD, first code point) and drop accent marks.
    pub strip_accents: bool,
}

impl Normalizer {
    /// The options of a file's keys, with llama.cpp's defaults: `lowercase` true,
    /// `strip_accents` as `lowercase`.
    pub fn from_keys(lowercase: Option<bool>, strip_accents: Option<bool>) -> Normalizer {
        let lowercase = lowercase.unwrap_or(true);
        Normalizer {
            lowercase,
            strip_accents: strip_accents.unwrap_or(lowercase),
        }
    }
}

impl Default for Normalizer {
    fn default() -> Normalizer {
        Normalizer::from_keys(None, None)
    }
}

/// What a `tokenizer.ggml.model` llama.cpp knows but this crate does not implement is.
fn unsupported_model_kind(model: &str) -> Option<&'static str> {
    Some(match model {
        "t5" => "Unigram, as T5's",
        "rwkv" => "RWKV's greedy tokenizer",
        "plamo2" => "PLaMo 2's",
        "hybriddna" => "BPE with DNA sequences",
        "whitespace" => "BPE on whitespace-separated words",
        "no_vocab" | "none" => "no vocabulary",
        _ => return None,
    })
}

/// Texts by which llama.cpp recognises special tokens a file does not name by key.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Turn starts that end generation with the ChatGLM pre-tokenizers (`chatglm-spm`,
/// `chatglm-bpe`, `glm4`).
const CHATGLM_EOG_TEXTS: &[&str] = &["<|user|>", "<|observation|>"];
/// Tokens that end generation, besides EOS, EOT, EOM and the FIM pad/repo/separator tokens
/// (llama.cpp's list: harmony's `<|return|>`/`<|call|>`, Gemma 4's `<turn|>`, `<eos>` and
/// `<|tool_response>`, Solar Open's `<|flush|>`/`<|calls|>`, Kimi's `[EOT]`/`[EOS]`…).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Pairs of tokens whose presence together means `<|end|>` only ends a message, not the
/// reply (GPT-OSS's harmony format, Solar Open): llama.cpp then drops `<|end|>` from the
/// end-of-generation tokens.
const END_IS_NOT_EOG: [[&str; 2]; 2] = [["<|return|>", "<|call|>"], ["<|calls|>", "<|flush|>"]];

/// A validated vocabulary, ready to tokenize with (see [`super::Tokenizer`]).
#[derive(Debug, Clone)]
pub struct Vocab {
    pub(crate) kind: VocabKind,
    pub(crate) pre_name: Option<String>,
    pub(crate) pre: Option<PreTokenizer>,
    pub(crate) tokens: Vec<TokenData>,
    pub(crate) token_to_id: HashMap<String, u32>,
    /// BPE: the distinct texts that appear in merge rules, numbered.
    pub(crate) merge_parts: HashMap<String, u32>,
    /// BPE: rank of the merge of two parts (numbered as in `merge_parts`); lower merges first.
    pub(crate) merge_ranks: HashMap<(u32, u32), u32>,
    pub(crate) special: SpecialTokens,
    pub(crate) eog: Vec<u32>,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) add_space_prefix: bool,
    pub(crate) remove_extra_whitespaces: bool,
    pub(crate) ignore_merges: bool,
    pub(crate) clean_spaces: bool,
    /// BPE: words are written with GPT-2's byte map (false: raw UTF-8, with `<0xXX>` byte
    /// tokens for what has no token).
    pub(crate) byte_encode: bool,
    /// BPE: spaces are `▁` in tokens (SentencePiece-style BPE).
    pub(crate) escape_whitespaces: bool,
    /// BPE: a word of line feeds that is a token is taken whole (Gemma 4).
    pub(crate) newline_words_whole: bool,
    /// Control, user-defined and unknown tokens, longest text first: the tokens cut out of
    /// text before tokenizing.
    pub(crate) special_by_length: Vec<u32>,
    /// WordPiece: the separator ([SEP]) ends an encoding with special tokens.
    pub(crate) add_sep: bool,
    /// WordPiece: how the text is normalised before it is cut into words.
    pub(crate) normalizer: Normalizer,
    /// Longest token text in bytes (WordPiece's longest match).
    pub(crate) max_token_len: usize,
}

impl Vocab {
    /// Reads the vocabulary from a model file.
    pub fn from_gguf(file: &GgufFile) -> Result<Vocab> {
        Vocab::from_parts(VocabParts::from_kv(|key| file.get(key))?)
    }

    /// Validates plain vocabulary data and applies llama.cpp's defaults and rules:
    /// - `llama` (SentencePiece): BOS 1, EOS 2, UNK 0 unless given, BOS added, a space
    ///   prefixed to the text;
    /// - `gpt2` (BPE): BOS = EOS = 11 unless given (llama.cpp's default), the pre-tokenizer
    ///   named by `pre` and its flags (a missing name means `default`; an unknown one is an
    ///   error, as in llama.cpp);
    /// - `gemma4` (BPE on raw UTF-8 with spaces as `▁`): Gemma 4's pre-tokenizer whatever
    ///   `pre` says, no default special tokens, BOS always added (llama.cpp's workaround);
    /// - tokens whose text marks them as end-of-turn, end-of-message or fill-in-the-middle
    ///   tokens become control tokens and fill the special ids the file does not give, and
    ///   the end-of-generation set is built, both as llama.cpp does;
    /// - an empty token text becomes `[EMPTY_<id>]`.
    ///
    /// Errors: an unknown or unsupported model or pre-tokenizer, an empty vocabulary, per-token arrays of
    /// the wrong length, duplicate token texts, NaN scores, malformed merges, and BOS, EOS,
    /// EOT, EOM or UNK ids outside the vocabulary (other out-of-range special ids are ignored,
    /// as llama.cpp does).
    pub fn from_parts(parts: VocabParts) -> Result<Vocab> {
        let kind = match parts.model.as_str() {
            "llama" => VocabKind::Spm,
            "gpt2" | "gemma4" => VocabKind::Bpe,
            "bert" => VocabKind::Wpm,
            other => {
                return Err(match unsupported_model_kind(other) {
                    Some(kind) => TokenizerError::UnsupportedModel {
                        model: parts.model,
                        kind,
                    },
                    None => TokenizerError::UnknownModel { model: parts.model },
                });
            }
        };
        let n = parts.tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        let in_range = |id: u32| (id as usize) < n;

        // Defaults by model.
        let mut special = SpecialTokens::default();
        let (pre, pre_cfg) = match kind {
            VocabKind::Spm => {
                special.bos = Some(1);
                special.eos = Some(2);
                special.unk = Some(0);
                (None, None)
            }
            VocabKind::Bpe => {
                // A `gemma4` model always has Gemma 4's pre-tokenizer, and no default
                // special tokens.
                let gemma4 = parts.model == "gemma4";
                let name = match parts.pre.as_deref() {
                    _ if gemma4 => "gemma4",
                    Some(name) => name,
                    None => "default",
                };
                let pre = PreTokenizer::from_name(name)?;
                let cfg: PreConfig = *pre.config();
                if !gemma4 {
                    if !cfg.no_default_bos {
                        special.bos = Some(11);
                    }
                    special.eos = Some(11);
                }
                (Some(pre), Some(cfg))
            }
            VocabKind::Wpm => {
                // llama.cpp's defaults for `bert`: [CLS] 101 first, [SEP] 102 last.
                special.bos = Some(101);
                special.unk = Some(100);
                special.sep = Some(102).filter(|&i| in_range(i));
                special.pad = Some(0);
                special.mask = Some(103).filter(|&i| in_range(i));
                (None, None)
            }
        };
        // A default that is not in a (small, hand-made) vocabulary means "none".
        for id in [&mut special.bos, &mut special.eos, &mut special.unk] {
            if id.is_some_and(|i| !in_range(i)) {
                *id = None;
            }
        }
        let (mut add_bos, mut add_eos, mut add_space_prefix, clean_spaces, ignore_merges) =
            match pre_cfg {
                None if kind == VocabKind::Wpm => (true, false, false, false, false),
                None => (true, false, true, false, false),
                Some(c) => (c.add_bos, false, false, c.clean_spaces, c.ignore_merges),
            };
        if let Some(v) = parts.add_space_prefix {
            add_space_prefix = v;
        }

        // Tokens.
        if let Some(s) = &parts.scores {
            if s.len() != n {
                return Err(TokenizerError::LengthMismatch {
                    key: K_SCORES,
                    len: s.len(),
                    n_tokens: n,
                });
            }
        }
        if let Some(t) = &parts.token_types {
            if t.len() != n {
                return Err(TokenizerError::LengthMismatch {
                    key: K_TYPES,
                    len: t.len(),
                    n_tokens: n,
                });
            }
        }
        let mut tokens = Vec::with_capacity(n);
        let mut token_to_id = HashMap::with_capacity(n);
        for (i, text) in parts.tokens.into_iter().enumerate() {
            let id = i as u32;
            let text = if text.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                text
            };
            let score = parts.scores.as_ref().map_or(0.0, |s| s[i]);
            if score.is_nan() {
                return Err(TokenizerError::BadScore { id });
            }
            let ty = parts
                .token_types
                .as_ref()
                .map_or(TokenType::Normal, |t| TokenType::from_gguf(t[i]));
            if let Some(first) = token_to_id.insert(text.clone(), id) {
                return Err(TokenizerError::DuplicateToken {
                    text,
                    first,
                    second: id,
                });
            }
            tokens.push(TokenData { text, score, ty });
        }

        // Merge rules: "left right", split at the first space after the first byte.
        let mut merge_parts: HashMap<String, u32> = HashMap::new();
        let mut merge_ranks = HashMap::with_capacity(parts.merges.len());
        if kind == VocabKind::Bpe {
            for (rank, merge) in parts.merges.iter().enumerate() {
                let split = merge
                    .as_bytes()
                    .get(1..)
                    .and_then(|rest| rest.iter().position(|&b| b == b' '))
                    .map(|p| p + 1)
                    .ok_or_else(|| TokenizerError::BadMerge {
                        index: rank,
                        merge: merge.clone(),
                    })?;
                let mut part_id = |s: &str| {
                    let next = merge_parts.len() as u32;
                    *merge_parts.entry(s.to_owned()).or_insert(next)
                };
                let left = part_id(&merge[..split]);
                let right = part_id(&merge[split + 1..]);
                // The first rule for a pair wins, as with llama.cpp's `emplace`.
                merge_ranks.entry((left, right)).or_insert(rank as u32);
            }
        }

        // Special ids from the keys.
        let given = parts.special;
        let essential = [
            (K_BOS, given.bos, &mut special.bos),
            (K_EOS, given.eos, &mut special.eos),
            (K_EOT, given.eot, &mut special.eot),
            (K_EOM, given.eom, &mut special.eom),
            (K_UNK, given.unk, &mut special.unk),
        ];
        for (key, value, slot) in essential {
            if let Some(id) = value {
                if !in_range(id) {
                    return Err(TokenizerError::SpecialIdOutOfRange {
                        key,
                        id,
                        n_tokens: n,
                    });
                }
                *slot = Some(id);
            }
        }
        let optional = [
            (given.sep, &mut special.sep),
            (given.pad, &mut special.pad),
            (given.mask, &mut special.mask),
            (given.fim_pre, &mut special.fim_pre),
            (given.fim_suf, &mut special.fim_suf),
            (given.fim_mid, &mut special.fim_mid),
            (given.fim_pad, &mut special.fim_pad),
            (given.fim_rep, &mut special.fim_rep),
            (given.fim_sep, &mut special.fim_sep),
        ];
        for (value, slot) in optional {
            if let Some(id) = value.filter(|&id| in_range(id)) {
                *slot = Some(id);
            }
        }
        if let Some(v) = parts.add_bos {
            add_bos = v;
        }
        // llama.cpp's workaround for Gemma 4 files that say `add_bos_token = false`.
        add_bos |= pre_cfg.is_some_and(|c| c.gemma4);
        if let Some(v) = parts.add_eos {
            add_eos = v;
        }

        // Special tokens recognised by their text. llama.cpp walks a hash map, so when several
        // texts match (Qwen has both `<|im_end|>` and `<|endoftext|>`), which one becomes the
        // EOT id is arbitrary there; we take the first text of the list that exists (all of
        // them end generation either way).
        let by_text: [(&[&str], &mut Option<u32>); 8] = [
            (EOT_TEXTS, &mut special.eot),
            (EOM_TEXTS, &mut special.eom),
            (FIM_PRE_TEXTS, &mut special.fim_pre),
            (FIM_SUF_TEXTS, &mut special.fim_suf),
            (FIM_MID_TEXTS, &mut special.fim_mid),
            (FIM_PAD_TEXTS, &mut special.fim_pad),
            (FIM_REP_TEXTS, &mut special.fim_rep),
            (FIM_SEP_TEXTS, &mut special.fim_sep),
        ];
        for (texts, slot) in by_text {
            if slot.is_some() {
                continue;
            }
            if let Some(id) = texts.iter().find_map(|t| token_to_id.get(*t).copied()) {
                *slot = Some(id);
                tokens[id as usize].ty = TokenType::Control;
            }
        }

        // End-of-generation tokens.
        let mut eog: Vec<u32> = [special.fim_pad, special.fim_rep, special.fim_sep]
            .into_iter()
            .flatten()
            .collect();
        for text in EOG_TEXTS {
            if let Some(&id) = token_to_id.get(*text) {
                eog.push(id);
                tokens[id as usize].ty = TokenType::Control;
            }
        }
        // ChatGLM3 / GLM-4: the start of a user or observation turn ends the assistant's turn
        // (their generation configs stop on these beside EOS).
        if matches!(
            parts.pre.as_deref(),
            Some("chatglm-spm" | "chatglm-bpe" | "glm4")
        ) {
            eog.extend(CHATGLM_EOG_TEXTS.iter().filter_map(|t| token_to_id.get(*t)));
        }
        eog.extend(
            [special.eos, special.eot, special.eom]
                .into_iter()
                .flatten(),
        );
        let has = |t: &str| token_to_id.contains_key(t);
        if END_IS_NOT_EOG
            .iter()
            .any(|pair| pair.iter().all(|t| has(t)))
        {
            if let Some(end) = token_to_id.get("<|end|>") {
                eog.retain(|id| id != end);
            }
        }
        eog.sort_unstable();
        eog.dedup();

        let max_token_len = tokens.iter().map(|t| t.text.len()).max().unwrap_or(0);

        // Tokens cut out of text before tokenizing, longest first (ties: lower id first).
        let mut special_by_length: Vec<u32> = (0..n as u32)
            .filter(|&id| tokens[id as usize].ty.is_special())
            .collect();
        special_by_length.sort_by_key(|&id| std::cmp::Reverse(tokens[id as usize].text.len()));

        Ok(Vocab {
            kind,
            pre_name: parts.pre,
            pre,
            tokens,
            token_to_id,
            merge_parts,
            merge_ranks,
            special,
            eog,
            add_bos,
            add_eos,
            add_space_prefix,
            remove_extra_whitespaces: parts.remove_extra_whitespaces.unwrap_or(false),
            ignore_merges,
            clean_spaces,
            byte_encode: pre.is_none_or(|p| p.config().exprs.byte_encode),
            escape_whitespaces: pre_cfg.is_some_and(|c| c.escape_whitespaces),
            newline_words_whole: pre_cfg.is_some_and(|c| c.gemma4),
            special_by_length,
            add_sep: parts.add_sep.unwrap_or(kind == VocabKind::Wpm),
            normalizer: Normalizer::from_keys(parts.lowercase, parts.strip_accents),
            max_token_len,
        })
    }

    /// The tokenizer algorithm.
    pub fn kind(&self) -> VocabKind {
        self.kind
    }

    /// The BPE pre-tokenizer (`None` for SentencePiece).
    pub fn pre_tokenizer(&self) -> Option<PreTokenizer> {
        self.pre
    }

    /// The `tokenizer.ggml.pre` name, as in the file.
    pub fn pre_name(&self) -> Option<&str> {
        self.pre_name.as_deref()
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Always false: a vocabulary has at least one token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The token `id`, if it exists.
    pub fn token(&self, id: u32) -> Option<&TokenData> {
        self.tokens.get(id as usize)
    }

    /// The id of the token whose text is exactly `text` (in the file's spelling: `▁` for
    /// SentencePiece spaces, GPT-2's byte characters for BPE).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }

    /// The special token ids.
    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// Whether `id` ends generation (EOS, EOT, EOM, `<|im_end|>`, `<|endoftext|>`…).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether encoding with `add_special` puts BOS first.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether encoding with `add_special` puts the separator ([SEP]) last (WordPiece).
    pub fn add_sep(&self) -> bool {
        self.add_sep
    }

    /// Whether encoding with `add_special` puts EOS last.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether SentencePiece puts a space before text that starts the input or follows a
    /// special token (and decoding drops it again from the first token).
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// The `tokenizer.ggml.remove_extra_whitespaces` flag (read but, as in llama.cpp, not
    /// used by these tokenizers).
    pub fn remove_extra_whitespaces(&self) -> bool {
        self.remove_extra_whitespaces
    }

    /// Whether a BPE word that is already a token skips the merges (LLaMA 3).
    pub fn ignore_merges(&self) -> bool {
        self.ignore_merges
    }

    /// Whether decoding removes spaces before punctuation and some contractions.
    pub fn clean_spaces(&self) -> bool {
        self.clean_spaces
    }

    /// Number of BPE merge rules that are distinct pairs.
    pub fn n_merges(&self) -> usize {
        self.merge_ranks.len()
    }

    /// The rank of the BPE merge of `left` and `right` (lower merges first), if any.
    pub(crate) fn merge_rank(&self, left: &str, right: &str) -> Option<u32> {
        let l = *self.merge_parts.get(left)?;
        let r = *self.merge_parts.get(right)?;
        self.merge_ranks.get(&(l, r)).copied()
    }
}
