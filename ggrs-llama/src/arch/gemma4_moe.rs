//! The mixture-of-experts feed-forward of Gemma 4 26B-A4B (llama.cpp's `gemma4` MoE layers):
//! the dense GeGLU feed-forward kept as a shared expert, beside routed GeGLU experts, each
//! branch normalised on its own (`e` = `n_embd`, `f` = the experts' width, `x` = `n_expert`):
//!
//! ```text
//! mlp = rms_norm(W_down·(gelu(W_gate·h₁) · W_up·h₁)) · post_ffw_norm_1,  h₁ = rms_norm(a) · ffn_norm
//! r   = ffn_gate_inp · (rms_norm(a) / √e · ffn_gate_inp.scale)          // router logits [x, n]
//! p   = softmax(r); ids = the n_used largest; w = p[ids] / Σ p[ids]
//! y_s = down[ids_s] · (gelu(gate[ids_s]·h₂) · up[ids_s]·h₂) · down_scale[ids_s],
//!       h₂ = rms_norm(a) · pre_ffw_norm_2
//! moe = rms_norm(w_0·y_0 + w_1·y_1 + …) · post_ffw_norm_2
//! out = a + rms_norm(mlp + moe) · post_ffw_norm                          // a: the attention's output
//! ```
//!
//! The router sees the attention output `a` itself, not a normed copy with a weight. The
//! experts' gate and up projections are stored fused (`ffn_gate_up_exps`, `[e, 2f, x]`: gate
//! rows first) or apart; each stacked projection may carry a scale per expert
//! (`<name>.scale`, `[x]`), applied to its product as llama.cpp's `build_lora_mm_id` does.
//! As in [`super::qwen3moe::MoeFfn`], llama.cpp's clamp of Σ p\[ids\] from below at 2⁻¹⁴
//! never acts (the sum is at least `n_used / x`) and is left out.

use ggrs_core::{Context, Tensor};

use super::decoder::blk;
use super::qwen3moe::{count_key, softmax_route, sum_slots};
use crate::error::Result;
use crate::hparams::HParams;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};

/// The experts' gate and up projections: fused, or two stacks with optional scales.
#[derive(Debug, Clone, Copy)]
pub enum GateUp {
    /// `ffn_gate_up_exps.weight`, `[e, 2f, x]`: each expert's gate rows, then its up rows.
    Fused(WeightId),
    /// `ffn_gate_exps.weight` and `ffn_up_exps.weight`, `[e, f, x]` each, with their
    /// per-expert scales (`[x]`) when the file has them.
    Split {
        /// The gate projections.
        gate: WeightId,
        /// The up projections.
        up: WeightId,
        /// Scale of each expert's gate product.
        gate_scale: Option<WeightId>,
        /// Scale of each expert's up product.
        up_scale: Option<WeightId>,
    },
}

/// One Gemma 4 mixture-of-experts block (beside the layer's dense feed-forward).
#[derive(Debug, Clone)]
pub struct Gemma4Moe {
    /// Router, `[e, x]` f32.
    pub gate_inp: WeightId,
    /// Router input scale, `[e]` (`ffn_gate_inp.scale`).
    pub gate_inp_scale: WeightId,
    /// RMSNorm weight of the experts' input, `[e]` (`pre_ffw_norm_2`).
    pub pre_norm: WeightId,
    /// RMSNorm weight of the dense branch's output, `[e]` (`post_ffw_norm_1`).
    pub post_norm_dense: WeightId,
    /// RMSNorm weight of the experts' output, `[e]` (`post_ffw_norm_2`).
    pub post_norm_experts: WeightId,
    /// The experts' gate and up projections.
    pub gate_up: GateUp,
    /// The experts' down projections, `[f, e, x]`.
    pub down: WeightId,
    /// Scale of each expert's output, `[x]` (`ffn_down_exps.scale`: the checkpoint's
    /// `router.per_expert_scale`).
    pub down_scale: Option<WeightId>,
    /// Experts (`expert_count`).
    pub n_expert: usize,
    /// Experts per token (`expert_used_count`).
    pub n_used: usize,
}

impl Gemma4Moe {
    /// Block `i`'s experts when the file has a router for it (`ffn_gate_inp.weight`), of the
    /// counts and width of `expert_count`, `expert_used_count` and
    /// `expert_feed_forward_length`.
    pub fn load(hp: &HParams, l: &mut WeightLoader<'_>, i: usize) -> Result<Option<Gemma4Moe>> {
        let n = |x: &str| blk(i, x);
        if !l.has(&n("ffn_gate_inp.weight")) {
            return Ok(None);
        }
        let n_expert = count_key(hp, l, "expert_count", 1 << 16)?;
        let n_used = count_key(hp, l, "expert_used_count", n_expert)?;
        let f = count_key(hp, l, "expert_feed_forward_length", 1 << 31)?;
        let (e, x) = (hp.n_embd, n_expert);
        let gate_up = match l.has(&n("ffn_gate_up_exps.weight")) {
            true => GateUp::Fused(l.matrix(&n("ffn_gate_up_exps.weight"), &[e, 2 * f, x])?),
            false => GateUp::Split {
                gate: l.matrix(&n("ffn_gate_exps.weight"), &[e, f, x])?,
                up: l.matrix(&n("ffn_up_exps.weight"), &[e, f, x])?,
                gate_scale: l.opt_f32(&n("ffn_gate_exps.scale"), &[x])?,
                up_scale: l.opt_f32(&n("ffn_up_exps.scale"), &[x])?,
            },
        };
        Ok(Some(Gemma4Moe {
            gate_inp: l.f32(&n("ffn_gate_inp.weight"), &[e, x])?,
            gate_inp_scale: l.f32(&n("ffn_gate_inp.scale"), &[e])?,
            pre_norm: l.f32(&n("pre_ffw_norm_2.weight"), &[e])?,
            post_norm_dense: l.f32(&n("post_ffw_norm_1.weight"), &[e])?,
            post_norm_experts: l.f32(&n("post_ffw_norm_2.weight"), &[e])?,
            gate_up,
            down: l.matrix(&n("ffn_down_exps.weight"), &[f, e, x])?,
            down_scale: l.opt_f32(&n("ffn_down_exps.scale"), &[x])?,
            n_expert,
            n_used,
        }))
    }

    /// The block's output `out` (see the [module docs](self)) for the attention output `a`
    /// (`[e, n]`, the residual included) and the layer's dense feed-forward
    /// `[ffn_norm, gate, up, down, post_ffw_norm]`.
    pub fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        [norm, gate, up, down, post]: [WeightId; 5],
        a: Tensor,
    ) -> Result<Tensor> {
        let (e, n) = (hp.n_embd, ctx.shape(a)?[1]);
        let (nx, nu) = (self.n_expert, self.n_used);
        // The shared expert: the dense feed-forward with its own output norm.
        let h = ctx.rms_norm_mul(a, w[norm], hp.rms_eps)?;
        let g = ctx.mul_mat(w[gate], h)?;
        let u = ctx.mul_mat(w[up], h)?;
        let act = ctx.geglu_split(g, u)?;
        let dense = ctx.mul_mat(w[down], act)?; // [e, n]
        let dense = ctx.rms_norm_mul(dense, w[self.post_norm_dense], hp.rms_eps)?;
        // Routing on the attention output.
        let x_in = ctx.rms_norm_mul(a, w[self.pre_norm], hp.rms_eps)?;
        let r = ctx.rms_norm(a, hp.rms_eps)?;
        let r = ctx.scale(r, 1.0 / (e as f32).sqrt())?;
        let r = ctx.mul(r, w[self.gate_inp_scale])?;
        let logits = ctx.mul_mat(w[self.gate_inp], r)?; // [nx, n]
        let (ids, weights) = softmax_route(ctx, logits, nu)?;
        // The chosen experts, every slot reading the token's one column.
        let x = ctx.reshape_3d(x_in, e, 1, n)?;
        let scaled = |ctx: &mut Context, y: Tensor, s: Option<WeightId>| match s {
            Some(s) => per_expert_scale(ctx, y, w[s], ids, nx),
            None => Ok(y),
        };
        let (g, u) = match self.gate_up {
            GateUp::Fused(gu) => {
                let gu = ctx.mul_mat_id(w[gu], x, ids)?; // [2f, nu, n]
                let m = ctx.meta(gu)?;
                let (f, nb) = (m.ne[0] / 2, m.nb);
                let g = ctx.view_3d(gu, f, nu, n, nb[1], nb[2], 0)?;
                let u = ctx.view_3d(gu, f, nu, n, nb[1], nb[2], f * nb[0])?;
                (g, u)
            }
            GateUp::Split {
                gate,
                up,
                gate_scale,
                up_scale,
            } => {
                let u = ctx.mul_mat_id(w[up], x, ids)?; // [f, nu, n]
                let u = scaled(ctx, u, up_scale)?;
                let g = ctx.mul_mat_id(w[gate], x, ids)?;
                let g = scaled(ctx, g, gate_scale)?;
                (g, u)
            }
        };
        let act = ctx.geglu_split(g, u)?;
        let experts = ctx.mul_mat_id(w[self.down], act, ids)?; // [e, nu, n]
        let experts = scaled(ctx, experts, self.down_scale)?;
        let experts = ctx.mul(experts, weights)?;
        let moe = sum_slots(ctx, experts)?;
        let moe = ctx.rms_norm_mul(moe, w[self.post_norm_experts], hp.rms_eps)?;
        let cur = ctx.add(dense, moe)?;
        let cur = ctx.rms_norm_mul(cur, w[post], hp.rms_eps)?;
        Ok(ctx.add(cur, a)?)
    }
}

/// `y` (`[k, nu, n]`, one slot per chosen expert) times each chosen expert's scale
/// (`s`: `[nx]`, picked by `ids`: `[nu, n]`), as llama.cpp's `build_lora_mm_id` applies a
/// per-expert scale.
fn per_expert_scale(
    ctx: &mut Context,
    y: Tensor,
    s: Tensor,
    ids: Tensor,
    nx: usize,
) -> Result<Tensor> {
    let n = ctx.shape(ids)?[1];
    let s = ctx.reshape_3d(s, 1, nx, 1)?;
    let s = ctx.repeat_to(s, [1, nx, n, 1])?;
    let s = ctx.get_rows(s, ids)?; // [1, nu, n]
    Ok(ctx.mul(y, s)?)
}
