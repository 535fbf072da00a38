//! The error type of the tokenizers.

use ggrs_core::gguf::GgufError;

/// Everything that can go wrong building a tokenizer from a model file's `tokenizer.ggml.*`
/// keys, or using it.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The model file could not be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),

    /// A key the tokenizer needs is missing.
    #[error("the model file has no `{key}` key ({hint})")]
    MissingKey {
        /// The key.
        key: &'static str,
        /// What the key is for.
        hint: &'static str,
    },

    /// A key holds a value of the wrong type.
    #[error("`{key}` should be {expected}, but the model file has a {found} there")]
    WrongType {
        /// The key.
        key: &'static str,
        /// The type the tokenizer needs.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },

    /// An element of an array key has the wrong type.
    #[error("`{key}[{index}]` should be {expected}, but the model file has a {found} there")]
    WrongElementType {
        /// The key.
        key: &'static str,
        /// Index of the element.
        index: usize,
        /// The type the tokenizer needs.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },

    /// A per-token array does not have one entry per token.
    #[error(
        "`{key}` has {len} entries but `tokenizer.ggml.tokens` has {n_tokens}: \
         the model file's vocabulary is inconsistent"
    )]
    LengthMismatch {
        /// The key.
        key: &'static str,
        /// Its number of entries.
        len: usize,
        /// Number of tokens.
        n_tokens: usize,
    },

    /// `tokenizer.ggml.model` names a tokenizer this crate does not implement.
    #[error(
        "unsupported tokenizer model `{model}` in `tokenizer.ggml.model` (supported: `llama` = \
         SentencePiece, `gpt2` = byte-level BPE, `gemma4` = Gemma 4's BPE)"
    )]
    UnknownModel {
        /// The name found.
        model: String,
    },

    /// `tokenizer.ggml.model` names a tokenizer llama.cpp has but this crate does not
    /// implement.
    #[error(
        "the tokenizer model `{model}` ({kind}) in `tokenizer.ggml.model` is not supported: \
         ggrs implements `llama` (SentencePiece), `gpt2` (byte-level BPE) and `gemma4` \
         (Gemma 4's BPE)"
    )]
    UnsupportedModel {
        /// The name found.
        model: String,
        /// What kind of tokenizer it is.
        kind: &'static str,
    },

    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not know.
    #[error(
        "unknown pre-tokenizer `{pre}` in `tokenizer.ggml.pre`; known: {known} (a new one \
         needs an entry in ggrs-llama's tokenizer/pretokenize/table.rs: its name, flags and \
         llama.cpp's regular expressions for it)"
    )]
    UnknownPreTokenizer {
        /// The name found.
        pre: String,
        /// The names this crate knows, comma separated.
        known: String,
    },

    /// `tokenizer.ggml.pre` names one of llama.cpp's pre-tokenizers that this crate cannot
    /// run exactly as llama.cpp does.
    #[error(
        "the pre-tokenizer `{pre}` in `tokenizer.ggml.pre` is one of llama.cpp's, but ggrs \
         cannot run it exactly: {reason}"
    )]
    UnsupportedPreTokenizer {
        /// The name found.
        pre: String,
        /// Why.
        reason: String,
    },

    /// The vocabulary has no tokens.
    #[error("the vocabulary is empty: `tokenizer.ggml.tokens` has no entries")]
    EmptyVocab,

    /// Two tokens have the same text, so text cannot be mapped back to one id.
    #[error(
        "tokens {first} and {second} are both {text:?}: the model file's vocabulary is corrupt"
    )]
    DuplicateToken {
        /// The text.
        text: String,
        /// The first id.
        first: u32,
        /// The second id.
        second: u32,
    },

    /// A merge rule is not two pieces separated by a space.
    #[error("`tokenizer.ggml.merges[{index}]` = {merge:?} is not two pieces separated by a space")]
    BadMerge {
        /// Index of the rule.
        index: usize,
        /// The rule.
        merge: String,
    },

    /// A token score is not a number.
    #[error("`tokenizer.ggml.scores[{id}]` is NaN: the model file's vocabulary is corrupt")]
    BadScore {
        /// The token id.
        id: u32,
    },

    /// A special-token key names an id outside the vocabulary.
    #[error("`{key}` = {id} is not a token id: the vocabulary has {n_tokens} tokens")]
    SpecialIdOutOfRange {
        /// The key.
        key: &'static str,
        /// The id found.
        id: u32,
        /// Number of tokens.
        n_tokens: usize,
    },

    /// A token id given to the tokenizer is outside the vocabulary.
    #[error("token id {id} is out of range: the vocabulary has {n_tokens} tokens (0..{n_tokens})")]
    TokenOutOfRange {
        /// The id.
        id: u32,
        /// Number of tokens.
        n_tokens: usize,
    },

    /// Encoding needs a special token the vocabulary does not define.
    #[error(
        "the vocabulary asks for a {which} token to be added (`{flag}`), but defines none \
         (`{key}` is missing and there is no default); encode with add_special = false"
    )]
    MissingSpecialToken {
        /// "BOS" or "EOS".
        which: &'static str,
        /// The flag asking for it.
        flag: &'static str,
        /// The key that would define it.
        key: &'static str,
    },

    /// SentencePiece byte fallback found no token for a byte, and there is no unknown token.
    #[error(
        "no token for byte 0x{byte:02X}: the vocabulary has neither `<0x{byte:02X}>` nor an \
         unknown token"
    )]
    NoByteToken {
        /// The byte.
        byte: u8,
    },
}
