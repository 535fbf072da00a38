//! EmbeddingGemma (`gemma-embedding`, llama.cpp's `llama_model_gemma_embedding`): the Gemma 3
//! block ([`super::gemma3`]) as a bidirectional encoder, for [`crate::embed::Embedder`]:
//!
//! ```text
//! x = token_embd[tokens] · √n_embd
//! for each layer l (local iff l mod pattern < pattern − 1):
//!     Gemma 3's block; every token attends to its whole input (not causal), a local layer's
//!     query at p only to keys k with |p − k| ≤ sliding_window / 2 (a symmetric window)
//! h = rms_norm(x) · output_norm                     // the hidden state, pooled (mean)
//! e = dense_3 · (dense_2 · pooled)                  // when the file has them
//! ```
//!
//! The queries are scaled by 1/√head_dim for every size. The Dense layers are
//! sentence-transformers' (a GGUF converted with `--sentence-transformers-dense-modules`):
//! `dense_2.weight` `[n_embd, d]`, `dense_3.weight` `[d, n_embd]`, no bias and no activation,
//! applied to each pooled vector (to every token's with pooling `none`), as llama.cpp does.
//! It generates no text.

use ggrs_core::{Context, Tensor};

use super::gemma3::{gemma3_hidden_states, Gemma3Consts, Gemma3Layer};
use crate::architecture::{ArchModel, Architecture, StepTensors};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::step::StepShape;

/// EmbeddingGemma (`gemma-embedding`).
#[derive(Debug, Clone, Copy, Default)]
pub struct GemmaEmbedding;

/// A loaded EmbeddingGemma model.
#[derive(Debug, Clone)]
pub struct GemmaEmbeddingModel {
    /// Token embeddings, `[n_embd, n_vocab]`.
    pub tok_embd: WeightId,
    /// Final RMSNorm weight, `[n_embd]`.
    pub output_norm: WeightId,
    /// The Gemma 3 blocks.
    pub layers: Vec<Gemma3Layer>,
    /// Window (symmetric here), pattern, local rotary base, query scale.
    pub consts: Gemma3Consts,
    /// The sentence-transformers Dense layers: `dense_2` `[n_embd, d]` then `dense_3`
    /// `[d, n_embd]`, when present.
    pub dense: Vec<WeightId>,
}

impl Architecture for GemmaEmbedding {
    fn name(&self) -> &'static str {
        "gemma-embedding"
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let mut consts = Gemma3Consts::from_gguf(l.file(), hp)?;
        // llama.cpp: 1/√head_dim whatever the layer count (Gemma 3 27B's rule not applied).
        consts.q_scale = 1.0 / (hp.head_dim as f32).sqrt();
        let e = hp.n_embd;
        let tok_embd = l.rows("token_embd.weight", &[e, hp.n_vocab])?;
        let output_norm = l.f32("output_norm.weight", &[e])?;
        let d = hp.head_dim;
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            layers.push(Gemma3Layer {
                base: super::gemma2::Gemma2Layer::load(hp, l, i)?,
                q_norm: l.f32(&format!("blk.{i}.attn_q_norm.weight"), &[d])?,
                k_norm: l.f32(&format!("blk.{i}.attn_k_norm.weight"), &[d])?,
            });
        }
        // The Dense layers: widths from the file, checked to chain n_embd → d → n_embd.
        let width = |l: &WeightLoader<'_>, name: &str| l.file().tensor(name).map(|t| t.ne[1]);
        let mut dense = Vec::new();
        match (width(l, "dense_2.weight"), width(l, "dense_3.weight")) {
            (None, None) => {}
            (Some(d2), Some(_)) => {
                dense.push(l.matrix("dense_2.weight", &[e, d2])?);
                dense.push(l.matrix("dense_3.weight", &[d2, e])?);
            }
            _ => {
                return Err(LlamaError::Embedding(
                    "EmbeddingGemma's Dense layers come in pairs (dense_2.weight and \
                     dense_3.weight); this file has one"
                        .into(),
                ))
            }
        }
        Ok(Box::new(GemmaEmbeddingModel {
            tok_embd,
            output_norm,
            layers,
            consts,
            dense,
        }))
    }
}

impl ArchModel for GemmaEmbeddingModel {
    fn build(
        &self,
        _ctx: &mut Context,
        _hp: &HParams,
        _w: &ImportedWeights,
        _kv: &KvCache,
        _shape: StepShape,
    ) -> Result<StepTensors> {
        Err(LlamaError::NotGenerative {
            arch: "gemma-embedding",
        })
    }

    fn build_embeddings(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<Option<StepTensors>> {
        let blocks = (self.tok_embd, &self.layers[..], self.consts);
        gemma3_hidden_states(ctx, (hp, w, kv, shape), blocks, self.output_norm).map(Some)
    }

    fn embeddings_causal(&self) -> bool {
        false
    }

    fn embeddings_window(&self) -> Option<u32> {
        Some(self.consts.window)
    }

    fn embedding_projection(
        &self,
        ctx: &mut Context,
        _hp: &HParams,
        w: &ImportedWeights,
        x: Tensor,
    ) -> Result<Option<Tensor>> {
        if self.dense.is_empty() {
            return Ok(None);
        }
        let mut cur = x;
        for &d in &self.dense {
            cur = ctx.mul_mat(w[d], cur)?;
        }
        Ok(Some(cur))
    }
}
