//! The error type of `ggrs-llama`.

use ggrs_core::gguf::GgufError;

/// Shorthand for `Result<T, LlamaError>`.
pub type Result<T> = std::result::Result<T, LlamaError>;

/// Everything that can go wrong loading a model or generating with it.
#[derive(Debug, thiserror::Error)]
pub enum LlamaError {
    /// An error from the tensor library (shapes, memory, compute).
    #[error(transparent)]
    Core(#[from] ggrs_core::Error),
    /// The model file could not be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The tokenizer could not be built or used.
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// A grammar or schema could not be compiled or followed.
    #[error(transparent)]
    Constraint(#[from] crate::constraint::ConstraintError),
    /// A conversation could not be formatted as a prompt.
    #[error(transparent)]
    Chat(#[from] crate::chat::template::ChatError),
    /// The file's `general.architecture` is not one the registry it was looked up in knows
    /// (the built-in one: [`crate::arch::Registry::builtin`]).
    #[error(
        "unsupported architecture `{name}` (this build runs: {supported}; bring your own with \
         `Model::load_arch` or `Registry::register`)"
    )]
    UnsupportedArch {
        /// The name the file gives.
        name: String,
        /// The names the registry knows, comma-separated.
        supported: String,
    },
    /// A required metadata key is missing.
    #[error("the model file has no `{0}` key")]
    MissingKey(String),
    /// A metadata key holds a value of the wrong type or out of range.
    #[error("the model file's `{key}` is invalid: {detail}")]
    BadKey {
        /// The key.
        key: String,
        /// What is wrong.
        detail: String,
    },
    /// The file asks for a rotary scaling type this build does not know (running it with
    /// another scaling would give wrong results).
    #[error(
        "the model file's `{key}` is `{value}`, a rotary scaling this build does not implement \
         (known: none, linear, yarn, longrope)"
    )]
    UnsupportedRopeScaling {
        /// The key (`<arch>.rope.scaling.type`).
        key: String,
        /// The type it names.
        value: String,
    },
    /// A required tensor is missing.
    #[error("the model file has no tensor `{0}`")]
    MissingTensor(String),
    /// A tensor has the wrong shape.
    #[error("tensor `{name}` has shape {got:?}, the hyperparameters need {expected:?}")]
    BadShape {
        /// Tensor name.
        name: String,
        /// Shape found (`ne`).
        got: Vec<usize>,
        /// Shape needed.
        expected: Vec<usize>,
    },
    /// A tensor's type cannot be used where it is.
    #[error("tensor `{name}` has type {dtype}, which {detail}")]
    BadTensorType {
        /// Tensor name.
        name: String,
        /// Its type.
        dtype: ggrs_core::DType,
        /// Why it does not work.
        detail: String,
    },
    /// The file holds a tensor for a feature this build does not implement (running without
    /// it would give wrong results).
    #[error("tensor `{name}` is not supported: {detail}")]
    UnsupportedTensor {
        /// Tensor name.
        name: String,
        /// What is missing and what to do instead.
        detail: String,
    },
    /// The tokens do not fit in the context.
    #[error(
        "{n_tokens} tokens do not fit in the context: {n_past} already used of {n_ctx} \
         (use a larger context size or a shorter prompt)"
    )]
    ContextFull {
        /// Tokens to add.
        n_tokens: usize,
        /// Tokens already in the cache.
        n_past: usize,
        /// Context size.
        n_ctx: usize,
    },
    /// A context shift (moving cached tokens to other positions) is not possible here.
    #[error(
        "context shift is not supported for `{arch}`: {reason} (run without --context-shift, \
         or use a larger context)"
    )]
    ContextShiftUnsupported {
        /// The model's architecture.
        arch: String,
        /// Why.
        reason: String,
    },
    /// A token id outside the vocabulary.
    #[error("token id {id} is out of range (the vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange {
        /// The id.
        id: i64,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// Nothing to evaluate.
    #[error("the prompt is empty: give at least one token")]
    EmptyPrompt,
    /// An argument outside its domain.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The model is an embedding model (an encoder such as BERT): it gives embeddings, not
    /// logits, so it cannot generate text.
    #[error(
        "`{arch}` is an embedding model: it gives embeddings, not text (use `ggrs embed`, \
         `ggrs serve --embeddings` or the Embedder API)"
    )]
    NotGenerative {
        /// The architecture.
        arch: &'static str,
    },

    /// An embedding request the model cannot serve (see [`crate::embed`]).
    #[error("{0}")]
    Embedding(String),
    /// The generation was stopped by the caller.
    #[error("generation cancelled")]
    Cancelled,
    /// The session would need more memory than the machine can give (its KV cache and
    /// compute arena grow with the context size and the batch size).
    #[error("{}", session_too_large(*n_ctx, *n_batch, *kv_bytes, *compute_bytes, *available))]
    SessionTooLarge {
        /// Context size asked for (tokens).
        n_ctx: usize,
        /// Batch size asked for (tokens).
        n_batch: usize,
        /// Bytes of the KV cache (`u64::MAX` when the size overflows).
        kv_bytes: u64,
        /// Bytes of the rest of the arena (the largest step's intermediates), when measured.
        compute_bytes: Option<u64>,
        /// Bytes the machine said it could give; `None` when the allocation itself failed.
        available: Option<u64>,
    },
    /// Reading a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

fn session_too_large(
    n_ctx: usize,
    n_batch: usize,
    kv: u64,
    compute: Option<u64>,
    available: Option<u64>,
) -> String {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let need = match (kv, compute) {
        (u64::MAX, _) => "more bytes than a 64-bit address holds".to_string(),
        (kv, None) => format!("{kv} bytes ({:.2} GiB) for its KV cache alone", gib(kv)),
        (kv, Some(c)) => format!(
            "{} bytes ({:.2} GiB: KV cache {:.2} GiB, compute arena {:.2} GiB)",
            kv.saturating_add(c),
            gib(kv.saturating_add(c)),
            gib(kv),
            gib(c)
        ),
    };
    let have = match available {
        Some(a) => format!("the machine has {a} bytes ({:.2} GiB) available", gib(a)),
        None => "the system refused the memory".to_string(),
    };
    format!(
        "a session with a context of {n_ctx} tokens and batches of {n_batch} needs {need}, \
         but {have}: use a smaller context size or batch size"
    )
}
