//! The error type of the Hugging Face → GGUF converter.

use std::path::PathBuf;

use ggrs_core::gguf::GgufError;

/// Everything that can go wrong converting a Hugging Face checkpoint directory to GGUF.
///
/// Every variant names the file (or key, or tensor) at fault and says what was expected.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The input is not a directory, or has no `config.json`.
    #[error(
        "{} has no config.json: give a Hugging Face checkpoint directory (config.json plus \
         model.safetensors or model.safetensors.index.json and its shards)",
        dir.display()
    )]
    NoConfig {
        /// The directory given.
        dir: PathBuf,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file (config, index, tokenizer) is not valid JSON.
    #[error("{} is not valid JSON: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        #[source]
        source: serde_json::Error,
    },
    /// `config.json` lacks a key the architecture needs, or holds a value of the wrong kind.
    #[error("config.json: `{key}` {detail}")]
    Config {
        /// The key (or keys tried, separated by `|`).
        key: String,
        /// What is wrong.
        detail: String,
    },
    /// `architectures` in `config.json` names no architecture the converter knows.
    #[error("config.json: unsupported architecture {found:?} (supported: {supported})")]
    UnsupportedArchitecture {
        /// The `architectures` entries found (empty when the key is missing).
        found: Vec<String>,
        /// The architectures the converter reads, as [`crate::SourceArch::source`] names
        /// them, comma-separated.
        supported: String,
    },
    /// The directory has neither `model.safetensors` nor `model.safetensors.index.json`.
    #[error(
        "{} has no model.safetensors and no model.safetensors.index.json{hint}",
        dir.display()
    )]
    NoWeights {
        /// The directory.
        dir: PathBuf,
        /// A hint on what was found instead (e.g. PyTorch `.bin` files).
        hint: String,
    },
    /// A shard named by `model.safetensors.index.json` does not exist.
    #[error(
        "shard {} (named by model.safetensors.index.json for tensor `{tensor}`) is missing",
        path.display()
    )]
    MissingShard {
        /// The shard's path.
        path: PathBuf,
        /// One tensor the index places in it.
        tensor: String,
    },
    /// A safetensors file is malformed or truncated.
    #[error("{}: {detail}", path.display())]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A tensor the architecture needs is not in the checkpoint.
    #[error("the checkpoint has no tensor `{name}` (needed for {arch} as `{gguf_name}`)")]
    MissingTensor {
        /// Hugging Face tensor name.
        name: String,
        /// GGUF tensor name it would become.
        gguf_name: String,
        /// Architecture being converted.
        arch: String,
    },
    /// The checkpoint holds a tensor the converter does not know where to put.
    #[error("the checkpoint's tensor `{name}` has no place in the {arch} layout")]
    UnexpectedTensor {
        /// Hugging Face tensor name.
        name: String,
        /// Architecture being converted.
        arch: String,
    },
    /// A tensor's shape disagrees with `config.json`.
    #[error("tensor `{name}` has shape {found:?}, config.json implies {expected:?}")]
    TensorShape {
        /// Hugging Face tensor name.
        name: String,
        /// Shape in the checkpoint (PyTorch order, outermost first).
        found: Vec<usize>,
        /// Shape the configuration implies.
        expected: Vec<usize>,
    },
    /// A tensor's element type is not one the converter reads.
    #[error("tensor `{name}` has dtype {dtype}; the converter reads F32, F16 and BF16")]
    TensorDtype {
        /// Hugging Face tensor name.
        name: String,
        /// The safetensors dtype string.
        dtype: String,
    },
    /// The tokenizer files are malformed.
    #[error("{}: {detail}", path.display())]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The `--outtype` name is not one of f32, f16, bf16, q8_0, q4_0.
    #[error("unknown output type `{0}` (use f32, f16, bf16, q8_0 or q4_0)")]
    OutType(String),
    /// Writing the GGUF file failed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
}
