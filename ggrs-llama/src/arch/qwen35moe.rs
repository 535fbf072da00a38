//! Qwen3.5-MoE (`qwen35moe`, llama.cpp's `llama_model_qwen35moe`): the hybrid of
//! [`super::qwen35`] (gated delta-net and gated attention layers) with every feed-forward a
//! mixture of experts ([`MoeFfn`], as Qwen3-MoE's) plus a shared SwiGLU expert gated per
//! token:
//!
//! ```text
//! ffn(h) = moe(h) + shared(h) · sigmoid(ffn_gate_inp_shexp · h)
//! ```

use ggrs_core::gguf::GgufFile;
use ggrs_core::{Context, Tensor};

use super::decoder::{blk, FeedForward};
use super::qwen35::{hybrid_hparams, Qwen35Model};
use super::qwen3moe::{count_key, MoeFfn};
use crate::architecture::{ArchModel, Architecture};
use crate::error::Result;
use crate::hparams::HParams;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};

/// The `qwen35moe` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct Qwen35Moe;

/// A loaded Qwen3.5-MoE model.
pub type Qwen35MoeModel = Qwen35Model<SharedMoeFfn>;

/// The experts and the gated shared expert (`e` = `n_embd`, `s` =
/// `expert_shared_feed_forward_length`).
#[derive(Debug, Clone)]
pub struct SharedMoeFfn {
    /// The routed experts.
    pub moe: MoeFfn,
    /// The shared expert's gate projection, `[e, s]`.
    pub gate_shexp: WeightId,
    /// Its up projection, `[e, s]`.
    pub up_shexp: WeightId,
    /// Its down projection, `[s, e]`.
    pub down_shexp: WeightId,
    /// The shared expert's per-token gate, `[e]` f32.
    pub gate_inp_shexp: WeightId,
}

impl SharedMoeFfn {
    /// Reads block `i`'s experts and shared expert.
    pub fn load(hp: &HParams, l: &mut WeightLoader<'_>, i: usize) -> Result<SharedMoeFfn> {
        let moe = MoeFfn::load(hp, l, i)?;
        let e = hp.n_embd;
        let s = count_key(hp, l, "expert_shared_feed_forward_length", 1 << 31)?;
        Ok(SharedMoeFfn {
            moe,
            gate_inp_shexp: l.f32(&blk(i, "ffn_gate_inp_shexp.weight"), &[e])?,
            gate_shexp: l.matrix(&blk(i, "ffn_gate_shexp.weight"), &[e, s])?,
            up_shexp: l.matrix(&blk(i, "ffn_up_shexp.weight"), &[e, s])?,
            down_shexp: l.matrix(&blk(i, "ffn_down_shexp.weight"), &[s, e])?,
        })
    }
}

impl FeedForward for SharedMoeFfn {
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        h: Tensor,
    ) -> Result<Tensor> {
        let moe = self.moe.build(ctx, hp, w, h)?;
        let gate = ctx.mul_mat(w[self.gate_shexp], h)?;
        let up = ctx.mul_mat(w[self.up_shexp], h)?;
        let act = ctx.swiglu_split(gate, up)?;
        let shared = ctx.mul_mat(w[self.down_shexp], act)?; // [e, n]
        let g = ctx.mul_mat(w[self.gate_inp_shexp], h)?; // [1, n]
        let g = ctx.sigmoid(g)?;
        let shared = ctx.mul(shared, g)?;
        Ok(ctx.add(moe, shared)?)
    }
}

impl Architecture for Qwen35Moe {
    fn name(&self) -> &'static str {
        "qwen35moe"
    }

    fn hparams(&self, file: &GgufFile) -> Result<HParams> {
        hybrid_hparams(file)
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let model = Qwen35Model::load(hp, l, |l, i| SharedMoeFfn::load(hp, l, i))?;
        Ok(Box::new(model))
    }
}
