//! Converting a Hugging Face checkpoint directory to a GGUF model file (`ggrs convert`).
//!
//! The directory holds `config.json` and the weights as `model.safetensors` or as shards
//! listed by `model.safetensors.index.json`, and optionally a tokenizer (`tokenizer.model`,
//! `tokenizer.json`, `tokenizer_config.json`). The architecture comes from `config.json`:
//!
//! | `architectures` | GGUF layout |
//! |---|---|
//! | `LlamaForCausalLM` | llama.cpp's `llama`, Q/K rows permuted as llama.cpp's converter does |
//! | `Qwen2ForCausalLM` | llama.cpp's `qwen2` |
//! | `SmolLM3ForCausalLM` | llama.cpp's `smollm3` (Q/K permuted) |
//! | `GraniteForCausalLM` | llama.cpp's `granite` (Q/K permuted, the four multipliers) |
//! | `Ministral3ForCausalLM` | llama.cpp's `mistral3` (Q/K permuted, YaRN, attention temperature) |
//! | `Gemma3ForCausalLM` | llama.cpp's `gemma3` (norm weights stored plus one) |
//! | `Mistral3ForConditionalGeneration`, `Gemma3ForConditionalGeneration` | the text model, as above (`multimodal.rs`; the vision tensors are left out) |
//! | `Phi3ForCausalLM` | llama.cpp's `phi3` (LongRoPE factors from `config.json` as tensors) |
//! | `ChatGLMModel` without `position_encoding_2d` (ChatGLM2/3) | llama.cpp's `chatglm` |
//! | `ChatGLMModel` with `position_encoding_2d` (ChatGLM-6B v1) | `chatglm1`, documented in `docs/gguf-chatglm1.md` |
//! | `BertModel`, `BertForMaskedLM`, `BertForSequenceClassification` | llama.cpp's `bert` (WordPiece vocabulary, sentence-transformers pooling) |
//!
//! Tensors are streamed: the checkpoint is memory-mapped, and each tensor is converted in
//! pieces of a few MB straight into the output, so memory stays bounded by the vocabulary
//! and one piece, not the model. 1-D tensors (norms, biases) are always written as F32;
//! matrices get the output type (for q8_0/q4_0 a matrix whose rows are not a whole number of
//! 32-value blocks falls back to F16, as llama.cpp's converter does).
//!
//! Modules: [`convert_hf_dir`] runs a conversion (`convert.rs`) with the caller's
//! [`ConvertOptions`] (`options.rs`); it reads the checkpoint ([`safetensors`]) and
//! `config.json` (`config.rs`), lets the source architecture plan the output (`layout.rs`:
//! metadata keys and tensors, checked against the checkpoint), reads the tokenizer
//! (`vocab/`), and streams each tensor's rows, reordered and converted, into the file
//! (`tensor_data.rs`). Each source architecture is one file of `arch/` implementing its
//! `ArchConverter` trait (recognising `config.json`, hyperparameters → GGUF keys, tensor
//! names, shapes and row transforms, tokenizer hooks); `arch/mod.rs` holds the registry,
//! the one place an architecture is looked up ([`SourceArch::detect`]). Adding an
//! architecture is its file plus one line there.
//!
//! ```no_run
//! use ggrs_convert::{convert_hf_dir, ConvertOptions, OutType};
//! # fn main() -> Result<(), ggrs_convert::ConvertError> {
//! let opts = ConvertOptions { outtype: OutType::F32, ..Default::default() };
//! let report = convert_hf_dir("chatglm6b-v1/tiny_model".as_ref(), "tiny.gguf".as_ref(), &opts)?;
//! eprintln!("{} tensors as {}", report.n_tensors, report.arch.gguf_name());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod safetensors;

mod arch;
mod config;
mod convert;
mod error;
mod layout;
mod multimodal;
mod options;
mod tensor_data;
mod vocab;

pub use arch::SourceArch;
pub use convert::{
    convert_hf_dir, convert_hf_dir_with, ConvertEvent, ConvertReport, TensorProgress,
};
pub use error::ConvertError;
pub use layout::Transform;
pub use options::{ConvertOptions, OutType};
