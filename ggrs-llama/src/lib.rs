//! # ggrs-llama
//!
//! LLaMA-family inference on top of `ggrs-core`: GGUF model loading, the per-step graph with
//! a KV cache, tokenizers, sampling and generation.
#![warn(missing_docs)]

pub mod arch;
pub mod batch;
pub mod error;
pub mod hparams;
pub mod kv_cache;
pub mod model;
pub mod sampling;
pub mod session;
pub mod tokenizer;

pub use batch::Batch;
pub use error::{LlamaError, Result};
pub use hparams::{Arch, HParams};
pub use model::Model;
pub use session::{Session, SessionParams};
