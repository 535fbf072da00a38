//! The architecture plug-in interface: everything the rest of the crate knows about a model
//! family.
//!
//! - [`Architecture`] is what a registry entry is ([`crate::arch::Registry`]): it reads the
//!   hyperparameters and the typed weights from a GGUF file (through the shared
//!   [`WeightLoader`]) and says how text is encoded for the model ([`TextConventions`]).
//! - [`ArchModel`] is what loading gives: the architecture's own weight struct (handles from
//!   the loader) and any constants parsed once at load. It builds the graph of one step from
//!   the step's shape and the KV cache, and makes the per-session [`StepState`] that fills
//!   the positions and the attention mask of each step.
//!
//! The defaults cover the usual decoder: positions as the batch gives them and a causal mask
//! ([`CausalState`]), prompts encoded by the tokenizer, the file's own chat template
//! ([`PlainText`]). Sessions, generation, chat, perplexity and the CLI only call these traits;
//! adding an architecture is one file implementing them and one line in the registry, or,
//! from outside the crate, [`crate::Model::load_arch`] / [`crate::arch::Registry::register`]
//! (see `examples/custom_arch.rs`).
//!
//! ```no_run
//! use ggrs_core::{Context, Tensor};
//! use ggrs_llama::architecture::{ArchModel, Architecture, StepTensors};
//! use ggrs_llama::hparams::HParams;
//! use ggrs_llama::kv_cache::KvCache;
//! use ggrs_llama::loader::{ImportedWeights, WeightId, WeightLoader};
//! use ggrs_llama::step::{StepInputs, StepShape};
//!
//! /// A toy family with no blocks: logits = embeddings · embedding of the token.
//! struct Bigram;
//!
//! #[derive(Debug)]
//! struct BigramWeights {
//!     tok_embd: WeightId,
//! }
//!
//! impl Architecture for Bigram {
//!     fn name(&self) -> &'static str {
//!         "bigram"
//!     }
//!     fn load(
//!         &self,
//!         hp: &HParams,
//!         w: &mut WeightLoader<'_>,
//!     ) -> ggrs_llama::Result<Box<dyn ArchModel>> {
//!         let tok_embd = w.matrix("token_embd.weight", &[hp.n_embd, hp.n_vocab])?;
//!         Ok(Box::new(BigramWeights { tok_embd }))
//!     }
//! }
//!
//! impl ArchModel for BigramWeights {
//!     fn build(
//!         &self,
//!         ctx: &mut Context,
//!         _hp: &HParams,
//!         w: &ImportedWeights,
//!         _kv: &KvCache,
//!         shape: StepShape,
//!     ) -> ggrs_llama::Result<StepTensors> {
//!         let inputs = StepInputs::new(ctx, shape, 1, false)?;
//!         let mut x: Tensor = ctx.get_rows(w[self.tok_embd], inputs.tokens)?; // [n_embd, n]
//!         if let Some(ids) = inputs.out_ids {
//!             x = ctx.get_rows(x, ids)?; // [n_embd, n_outputs]
//!         }
//!         let logits = ctx.mul_mat(w[self.tok_embd], x)?; // [n_vocab, n_outputs]
//!         ctx.set_output(logits)?;
//!         Ok(StepTensors { inputs, logits })
//!     }
//! }
//!
//! let model = ggrs_llama::Model::load_arch("bigram.gguf", &Bigram, Default::default())?;
//! # Ok::<(), ggrs_llama::LlamaError>(())
//! ```

use std::any::Any;
use std::fmt::Debug;

use ggrs_core::gguf::GgufFile;
use ggrs_core::{Context, Tensor};

use crate::batch::{Batch, SeqId};
use crate::chat::template::{encode_rendered, ChatError, ChatTemplate};
use crate::error::Result;
use crate::hparams::HParams;
use crate::kv_cache::KvCache;
use crate::kv_shift::KeyShift;
use crate::loader::{ImportedWeights, WeightLoader};
use crate::step::{StepInputs, StepShape};
use crate::tokenizer::Tokenizer;

/// A model family: how to read it from a GGUF file. See the [module docs](self).
pub trait Architecture: Send + Sync {
    /// The `general.architecture` name this implementation reads (its registry key).
    fn name(&self) -> &'static str;

    /// Reads and checks the hyperparameters. Default: [`HParams::from_gguf`] (the keys every
    /// architecture shares, RMSNorm epsilon).
    fn hparams(&self, file: &GgufFile) -> Result<HParams> {
        HParams::from_gguf(file)
    }

    /// Reads the architecture's weights through `weights` (each checked for name, shape and
    /// type) and any constants of its own from `weights.file()`, once, into the model's
    /// [`ArchModel`].
    fn load(&self, hp: &HParams, weights: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>>;

    /// How text is encoded for the model and its tokens decoded. Needs the file's metadata
    /// only, not the weights (`ggrs tokenize` asks without loading them). Default:
    /// [`PlainText`].
    fn text(&self, file: &GgufFile) -> Result<Box<dyn TextConventions>> {
        let _ = file;
        Ok(Box::new(PlainText))
    }
}

/// The tensors of a built step graph: the inputs to fill and the logits
/// (`[n_vocab, n_outputs]`, marked as the graph's output).
#[derive(Debug, Clone, Copy)]
pub struct StepTensors {
    /// The input leaves.
    pub inputs: StepInputs,
    /// The logits of the step's outputs.
    pub logits: Tensor,
}

/// An architecture's part of a loaded model: typed weights and constants, and the graph
/// builder. Immutable and shared by every session of the model. See the
/// [module docs](self).
pub trait ArchModel: Any + Send + Sync + Debug {
    /// Builds, in `ctx`, the graph of one step of `shape`: the batch's tokens in
    /// (`StepInputs::tokens`), keys and values written to the cache `kv` at the cells
    /// `StepInputs::k_rows`, logits out. `w` holds the model's weights as tensors of `ctx`.
    ///
    /// The graph is built once per shape and computed again for every step of that shape,
    /// so it must depend on nothing but its arguments; per-step values go into the inputs,
    /// which the session fills from [`StepState::inputs`]. The session also builds it in a
    /// measuring context (no data), where leaves that must be filled at build time (a table
    /// of constants) are left alone (`ctx.is_no_alloc()`).
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<StepTensors>;

    /// A session's per-sequence state, which gives each step's positions and mask. Default:
    /// [`CausalState`].
    fn new_state(&self) -> Box<dyn StepState> {
        Box::new(CausalState)
    }

    /// Builds, in `ctx`, the graph of an embedding step of `shape` (see
    /// [`crate::embed::Embedder`]): as [`ArchModel::build`], but the output (in
    /// `StepTensors::logits`) is the final hidden state of every token, `[n_embd,
    /// n_tokens]` (after the output norm of a decoder, before any output head). Each
    /// sequence of the step is one input, in its own span of `kv` (`shape.spans`), attending
    /// as [`ArchModel::embeddings_causal`] says under the mask the embedder fills.
    /// `None` (the default): the architecture has no embedding graph.
    fn build_embeddings(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<Option<StepTensors>> {
        let _ = (ctx, hp, w, kv, shape);
        Ok(None)
    }

    /// Whether a token of an embedding step attends only to the tokens before it (decoders:
    /// true, the default) or to its whole input (encoders such as BERT: false).
    fn embeddings_causal(&self) -> bool {
        true
    }

    /// The sliding window of an embedding graph with windowed layers (one that has
    /// `StepInputs::mask_swa`), which the embedder fills on top of the usual mask: a query
    /// at position `p` sees the key at `k` iff `p − k < window` for a causal graph, iff
    /// `|p − k| ≤ window / 2` for a bidirectional one (llama.cpp's standard and symmetric
    /// windows). `None` (the default): no such layers.
    fn embeddings_window(&self) -> Option<u32> {
        None
    }

    /// Projections of pooled embeddings (sentence-transformers' Dense layers): `x`
    /// `[n_embd, n]` (pooled vectors, or every token's hidden state with pooling `none`)
    /// to `[n_embd, n]`. `None` (the default): the model has none.
    fn embedding_projection(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        x: Tensor,
    ) -> Result<Option<Tensor>> {
        let _ = (ctx, hp, w, x);
        Ok(None)
    }

    /// A reranker's classification head on pooled hidden states `x` (`[n_embd, n]`):
    /// relevance scores `[n_cls_out, n]` (llama.cpp's `rank` pooling). `None` (the
    /// default): the model has no such head.
    fn classifier(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        x: Tensor,
    ) -> Result<Option<Tensor>> {
        let _ = (ctx, hp, w, x);
        Ok(None)
    }

    /// Whether the keys and values cached for a prompt's prefix stay valid when the prompt
    /// goes on differently (true for causal attention). False makes a conversation evaluate
    /// its whole prompt at every turn (ChatGLM-6B v1, whose prompt context attends
    /// bidirectionally).
    fn reuses_cached_prefix(&self) -> bool {
        true
    }

    /// How the keys in `kv` are rotated, so that a session can rotate them again when a
    /// sequence's positions move (a context shift, [`crate::kv_shift`]). `w` holds the
    /// weights (frequency-factor tensors) as the step graph sees them. `Err(why)` (the
    /// default): the architecture cannot move cached positions, and a context shift is
    /// refused with `why` ([`crate::LlamaError::ContextShiftUnsupported`]).
    fn key_shift(
        &self,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
    ) -> std::result::Result<KeyShift, String> {
        let _ = (hp, w, kv);
        Err("its cached keys cannot be moved to other positions".into())
    }
}

/// The values of a step's position and mask inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct StepValues {
    /// `StepInputs::pos`: as many values per token as the architecture's graph reads
    /// (usually one: the batch's positions).
    pub pos: Vec<i32>,
    /// `StepInputs::mask`, `[n_kv, n_tokens]`: 0 where a token may attend a cell, −∞ where
    /// not.
    pub mask: Vec<f32>,
    /// `StepInputs::mask_swa`, the mask of the sliding-window layers (same layout), for a
    /// graph that has that input (see [`SlidingWindowState`]); `None` otherwise.
    pub mask_swa: Option<Vec<f32>>,
}

/// Per-session state behind a step's positions and mask (one per session, made by
/// [`ArchModel::new_state`]).
pub trait StepState: Send + Debug {
    /// The positions and mask of `piece`, placed in `kv` (`kv` already holds its cells;
    /// attention reads cells `0..n_kv`). An error rejects the step (nothing was computed).
    fn inputs(&mut self, piece: &Batch, kv: &KvCache, n_kv: usize) -> Result<StepValues>;

    /// Every sequence was forgotten ([`crate::Session::clear`]).
    fn clear(&mut self) {}

    /// The tokens of `seq` from position `from` on were forgotten
    /// ([`crate::Session::remove`]).
    fn remove(&mut self, seq: SeqId, from: i32) {
        let _ = (seq, from);
    }
}

/// The usual step state: no state; positions as the batch gives them, each token attending
/// the cells of its sequences at positions up to its own ([`KvCache::mask`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct CausalState;

impl StepState for CausalState {
    fn inputs(&mut self, piece: &Batch, kv: &KvCache, n_kv: usize) -> Result<StepValues> {
        Ok(StepValues {
            pos: piece.pos.clone(),
            mask: kv.mask(piece, n_kv),
            mask_swa: None,
        })
    }
}

/// The step state of a model whose layers attend either causally or through a sliding
/// window (Gemma 2): positions as the batch gives them, the causal mask, and the sliding-window
/// mask ([`KvCache::window_mask`]), both built from each token's own position and sequence, so
/// they hold for a batch of several sequences and across steps alike.
#[derive(Debug, Clone, Copy)]
pub struct SlidingWindowState {
    /// Positions a sliding-window query sees, its own included.
    pub window: u32,
}

impl StepState for SlidingWindowState {
    fn inputs(&mut self, piece: &Batch, kv: &KvCache, n_kv: usize) -> Result<StepValues> {
        Ok(StepValues {
            pos: piece.pos.clone(),
            mask: kv.mask(piece, n_kv),
            mask_swa: Some(kv.window_mask(piece, n_kv, self.window)),
        })
    }
}

/// An architecture's text conventions: prompt encoding, token text, chat format. See
/// [`PlainText`] for the defaults.
pub trait TextConventions: Send + Sync + Debug {
    /// Token ids of a prompt `text`; `add_special`: the tokens the model adds around a
    /// prompt (BOS where its vocabulary adds one), `parse_special`: special-token text such
    /// as `<|im_start|>` becomes those tokens. Default: the tokenizer's encoding.
    fn encode(
        &self,
        tok: &Tokenizer,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>> {
        Ok(tok.encode(text, add_special, parse_special)?)
    }

    /// Token ids of a rendered chat prompt. Default: [`encode_rendered`] (special tokens
    /// parsed, BOS once).
    fn encode_chat(&self, tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
        Ok(encode_rendered(tok, text)?)
    }

    /// The text of generated token `id` when the architecture writes some text as tokens of
    /// its own (ChatGLM-6B v1's `<n>`); `None`: decode it as usual. Default: always `None`.
    fn token_text(&self, tok: &Tokenizer, id: u32) -> Option<String> {
        let _ = (tok, id);
        None
    }

    /// The chat format of a model of architecture `arch` whose file carries the Jinja
    /// template `jinja`, if any. Default: that template, else [`ChatError::NoTemplate`].
    fn chat_template(
        &self,
        arch: &'static str,
        tok: &Tokenizer,
        jinja: Option<&str>,
    ) -> std::result::Result<ChatTemplate, ChatError> {
        match jinja {
            Some(src) => Ok(ChatTemplate::jinja(src, tok)),
            None => Err(ChatError::NoTemplate { arch }),
        }
    }
}

/// The default text conventions (every method's default).
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainText;

impl TextConventions for PlainText {}
