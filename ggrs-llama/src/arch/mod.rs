//! Per-architecture graph builders. Each builds, with ggrs-core's public API only, the
//! graph of one evaluation step: the batch's tokens in, K/V written to the cache, logits out.

pub mod llama;

use ggrs_core::{Context, Tensor};

use crate::error::Result;
use crate::model::{Model, WeightRef};

/// Weights imported into a session's context (external tensors pointing into the mapping).
#[derive(Debug, Clone)]
pub struct LayerTensors {
    /// See [`crate::model::LayerWeights`] for shapes.
    pub attn_norm: Tensor,
    /// Query projection.
    pub wq: Tensor,
    /// Key projection.
    pub wk: Tensor,
    /// Value projection.
    pub wv: Tensor,
    /// Output projection.
    pub wo: Tensor,
    /// Query bias.
    pub bq: Option<Tensor>,
    /// Key bias.
    pub bk: Option<Tensor>,
    /// Value bias.
    pub bv: Option<Tensor>,
    /// Output bias.
    pub bo: Option<Tensor>,
    /// FFN norm weight.
    pub ffn_norm: Tensor,
    /// Gate projection.
    pub ffn_gate: Tensor,
    /// Up projection.
    pub ffn_up: Tensor,
    /// Down projection.
    pub ffn_down: Tensor,
}

/// All weights of a model as tensors of one context.
#[derive(Debug, Clone)]
pub struct ModelTensors {
    /// Token embeddings.
    pub tok_embd: Tensor,
    /// Final norm weight.
    pub output_norm: Tensor,
    /// Output projection.
    pub output: Tensor,
    /// Blocks.
    pub layers: Vec<LayerTensors>,
}

impl ModelTensors {
    /// Imports every weight of `model` into `ctx` (metadata only; the data stays mapped).
    pub fn import(model: &Model, ctx: &mut Context) -> Result<ModelTensors> {
        let w = &model.weights;
        let mut imp = |r: &WeightRef| model.import(ctx, r);
        let tok_embd = imp(&w.tok_embd)?;
        let output_norm = imp(&w.output_norm)?;
        let output = if w.output.name == w.tok_embd.name {
            tok_embd
        } else {
            imp(&w.output)?
        };
        let mut layers = Vec::with_capacity(w.layers.len());
        for l in &w.layers {
            let mut opt =
                |r: &Option<WeightRef>| r.as_ref().map(|r| model.import(ctx, r)).transpose();
            let (bq, bk, bv, bo) = (opt(&l.bq)?, opt(&l.bk)?, opt(&l.bv)?, opt(&l.bo)?);
            let mut imp = |r: &WeightRef| model.import(ctx, r);
            layers.push(LayerTensors {
                attn_norm: imp(&l.attn_norm)?,
                wq: imp(&l.wq)?,
                wk: imp(&l.wk)?,
                wv: imp(&l.wv)?,
                wo: imp(&l.wo)?,
                bq,
                bk,
                bv,
                bo,
                ffn_norm: imp(&l.ffn_norm)?,
                ffn_gate: imp(&l.ffn_gate)?,
                ffn_up: imp(&l.ffn_up)?,
                ffn_down: imp(&l.ffn_down)?,
            });
        }
        Ok(ModelTensors {
            tok_embd,
            output_norm,
            output,
            layers,
        })
    }
}

/// The input tensors of one step (leaves the session fills before computing).
#[derive(Debug, Clone, Copy)]
pub struct StepInputs {
    /// Token ids, `[n_tokens]` i32.
    pub tokens: Tensor,
    /// Positions, `[n_tokens]` i32.
    pub pos: Tensor,
    /// Cache row (cell) of each token, `[n_tokens]` i32, for keys and values alike.
    pub k_rows: Tensor,
    /// Attention mask, `[n_kv, n_tokens]` f32.
    pub mask: Tensor,
    /// Tokens whose logits are computed, `[n_outputs]` i32 (absent when all are).
    pub out_ids: Option<Tensor>,
}

/// The sizes of a step's graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepShape {
    /// Tokens in the batch.
    pub n_tokens: usize,
    /// Cache cells attention reads.
    pub n_kv: usize,
    /// Tokens whose logits are wanted.
    pub n_outputs: usize,
    /// Flash attention's split-key part count (see [`crate::SessionParams::attn_kv_splits`]).
    pub attn_kv_splits: usize,
}
