//! # ggrs-llama
//!
//! LLaMA-family inference on top of `ggrs-core`: GGUF model loading, the per-step graph with
//! a KV cache, tokenizers, sampling, generation and perplexity.
//!
//! ```no_run
//! use std::ops::ControlFlow;
//! use std::sync::Arc;
//! use ggrs_llama::{GenerateParams, Model, SamplingParams, Session, SessionParams};
//!
//! # fn main() -> ggrs_llama::Result<()> {
//! // The model is immutable and can be shared by sessions on several threads.
//! let model = Arc::new(Model::load("qwen2.5-coder-0.5b-instruct-q4_0.gguf")?);
//! // A session owns a KV cache, a measured compute arena and its worker threads.
//! let mut session = Session::new(model.clone(), SessionParams { n_ctx: 2048, ..Default::default() })?;
//! let params = GenerateParams {
//!     max_tokens: 64,
//!     sampling: SamplingParams { temperature: 0.7, seed: 1, ..Default::default() },
//!     stop: vec!["\n\n".into()],
//!     ..Default::default()
//! };
//! let out = session.generate("fn fibonacci(n: u64) -> u64 {", &params, |event| {
//!     print!("{}", event.text); // text arrives as soon as it is complete UTF-8
//!     ControlFlow::Continue(())
//! })?;
//! eprintln!("{:.1} tokens/s, stopped by {:?}", out.timings.gen_tps(), out.stop);
//! # Ok(()) }
//! ```
//!
//! Lower level: [`Session::decode`] evaluates a [`Batch`] of (token, position, sequence)
//! entries and leaves the logits in [`Session::all_logits`]; [`sampling::Sampler`] picks
//! tokens; [`tokenizer::Tokenizer`] encodes and decodes text;
//! [`perplexity::perplexity`] runs llama.cpp's perplexity protocol.
//!
//! Modules in dependency order (each uses only those before it): [`tokenizer`],
//! [`chat::template`] (prompt formats), [`error`], [`hparams`] (what the GGUF says about
//! the model), [`batch`], [`kv_cache`] (with [`recurrent_cache`], the hybrids' recurrent states),
//! [`loader`] (the shared weight loader),
//! [`step`] (a step graph's inputs and the KV-cache attention block), [`architecture`] (the
//! plug-in traits), [`arch`] (ggrs's architectures, one file each, and the [`arch::Registry`]),
//! [`model`], [`session`], [`sampling`], [`generate`], [`prompt_cache`], [`chat`] (multi-turn chat),
//! [`perplexity`], [`embed`] (embeddings and reranking), [`engine`] (many requests batched continuously, for servers). Apart:
//! [`quantize`] (llama.cpp's quantization recipes over ggrs-core's conversion engine).
//! Converting Hugging Face checkpoints to GGUF is the separate crate `ggrs-convert`.
//!
//! Bringing an architecture ggrs does not ship: implement [`architecture::Architecture`]
//! (hyperparameters, typed weights through [`loader::WeightLoader`]) and
//! [`architecture::ArchModel`] (the step graph), then [`Model::load_arch`] a file with it or
//! [`arch::Registry::register`] it (see `examples/custom_arch.rs`).
#![warn(missing_docs)]

pub mod arch;
pub mod architecture;
pub mod batch;
pub mod chat;
pub mod constraint;
pub mod embed;
pub mod engine;
pub mod error;
pub mod generate;
pub mod hparams;
pub mod imatrix;
pub mod kv_cache;
pub mod kv_shift;
pub mod kv_types;
pub mod loader;
pub mod model;
pub mod perplexity;
pub mod prompt_cache;
pub mod quantize;
pub mod recurrent_cache;
pub mod sampling;
pub mod session;
pub mod speculative;
pub mod step;
pub mod tokenizer;

pub use arch::Registry;
pub use architecture::{ArchModel, Architecture};
pub use batch::Batch;
pub use chat::{Chat, ChatTemplate, Message};
pub use embed::{EmbedParams, Embedder, Pooling};
pub use engine::{Engine, EngineHandle, EngineParams};
pub use error::{LlamaError, Result};
pub use generate::{GenerateParams, Generation, StopReason, Timings, TokenEvent};
pub use hparams::HParams;
pub use model::{Model, ModelOptions};
pub use prompt_cache::PromptCache;
pub use sampling::{Sampler, SamplingParams};
pub use session::{Session, SessionParams};
pub use tokenizer::Tokenizer;
