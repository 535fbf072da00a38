//! The ChatGLM2 / ChatGLM3 / GLM-4 graph (architecture `chatglm`, llama.cpp's
//! `llm_build_chatglm`), built by the shared fused-projection decoder of [`super::fused`]. It
//! is the LLaMA graph of [`super::llama`] with three differences, marked ① ② ③ below:
//!
//! ```text
//! x = token_embd[tokens]                                    // [n_embd, n_tokens]
//! for each layer:
//!     h = rms_norm(x) · attn_norm
//!     qkv = Wqkv·h + bqkv                                   // ① one fused projection with
//!     q, k, v = views of qkv's rows: Q | K | V              //   bias, split by views
//!     q, k = rope(q, pos), rope(k, pos)                     // ② on the first n_rot = head_dim/2
//!                                                           //   dims of each head, pairs (2i, 2i+1)
//!     cache_k[cell] = k; cache_v[cell] = v
//!     a = softmax(K·q / √head_dim + mask) applied to V
//!     x = x + Wo·a                                          // no output bias
//!     h = rms_norm(x) · ffn_norm
//!     g|u = W_up·h                                          // ③ gate and up fused: [2·n_ff, n]
//!     x = x + W_down·(silu(g) · u)
//! logits = output · (rms_norm(x) · output_norm)             // [n_vocab, n_outputs]
//! ```
//!
//! ① The Q, K and V projections are one matrix, `blk.N.attn_qkv.weight`
//! `[n_embd, (n_head + 2·n_head_kv)·head_dim]`: each output row of the product holds the
//! query heads, then the key heads, then the value heads. The graph takes Q, K and V as
//! strided views of that row (no copies); rotary embedding and the cache write read views
//! as they are. Files with separate `attn_q/k/v` (as llama.cpp also accepts) work too.
//!
//! ② `rope.dimension_count` is half the head size: only the first half of each head turns,
//! in ggml's normal mode (adjacent pairs), the second half passes through.
//!
//! ③ `blk.N.ffn_up.weight` is `[n_embd, 2·n_ff]`; the first `n_ff` outputs are the gate,
//! the last `n_ff` the up projection, which is exactly the layout of ggrs's fused
//! [`ggrs_core::Context::swiglu`].

use ggrs_core::gguf::GgufFile;
use ggrs_core::RopeMode;

use crate::architecture::{ArchModel, Architecture, TextConventions};
use crate::chat::template::{ChatError, ChatTemplate};
use crate::error::Result;
use crate::hparams::HParams;
use crate::loader::WeightLoader;
use crate::tokenizer::Tokenizer;

use super::fused::{FusedModel, FusedStyle};

/// The attention projections of a block: ① fused (as ChatGLM files have them) or separate.
pub use super::fused::QkvWeights as GlmQkv;

/// The weights of one block.
pub use super::fused::FusedLayer as ChatGlmLayer;

/// A loaded `chatglm` model (the shared fused-projection model, also Phi-3's).
pub use super::fused::FusedModel as ChatGlmModel;

/// The `chatglm` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChatGlm;

/// ② Normal (adjacent-pair) rotary on the first `rope.dimension_count` = head_dim/2
/// dimensions of each head; scores scaled by 1/√head_dim.
const STYLE: FusedStyle = FusedStyle {
    rope_mode: RopeMode::Normal,
    scale_queries: false,
};

impl Architecture for ChatGlm {
    fn name(&self) -> &'static str {
        "chatglm"
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        Ok(Box::new(FusedModel::load(STYLE, hp, l)?))
    }

    fn text(&self, _file: &GgufFile) -> Result<Box<dyn TextConventions>> {
        Ok(Box::new(ChatGlmText))
    }
}

/// ChatGLM's text conventions: the tokenizer's encoding, and, for a file without a chat
/// template, the format built in (ChatGLM3's, or GLM-4's for its BPE vocabulary).
#[derive(Debug, Clone, Copy, Default)]
pub struct ChatGlmText;

impl TextConventions for ChatGlmText {
    fn chat_template(
        &self,
        _arch: &'static str,
        tok: &Tokenizer,
        jinja: Option<&str>,
    ) -> std::result::Result<ChatTemplate, ChatError> {
        Ok(match jinja {
            Some(src) => ChatTemplate::jinja(src, tok),
            None => ChatTemplate::builtin_glm(tok),
        })
    }
}
