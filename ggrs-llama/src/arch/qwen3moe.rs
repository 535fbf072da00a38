//! Qwen3-MoE (`qwen3moe`, llama.cpp's `build_qwen3moe`): Qwen3's attention (per-head Q/K
//! RMSNorm, NEOX rotary, no biases) in the [`Decoder`] of [`super::decoder`], with every
//! feed-forward a mixture of experts ([`MoeFfn`]).

use ggrs_core::{Context, RopeMode, Tensor};

use super::decoder::{blk, Decoder, FeedForward};
use super::qwen3::{check_value_length, load_attention};
use crate::architecture::{ArchModel, Architecture};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};

/// The `qwen3moe` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct Qwen3Moe;

/// A loaded Qwen3-MoE model.
pub type Qwen3MoeModel = Decoder<MoeFfn>;

/// A mixture-of-experts feed-forward as llama.cpp's `build_moe_ffn` computes it with softmax
/// gating and normalised weights, and the experts' SwiGLU (`e` = `n_embd`, `f` = the experts'
/// width, `x` = `n_expert`):
///
/// ```text
/// p = softmax(gate_inp · h)                      // [x, n]: router probabilities
/// ids = indices of the n_used largest p          // [n_used, n], largest first
/// w = p[ids] / Σ p[ids]                          // [n_used, n]: weights summing to 1
/// y_s = down[ids_s] · (silu(gate[ids_s]·h) · up[ids_s]·h)   // [e, n_used, n]
/// out = w_0·y_0 + w_1·y_1 + …                    // summed in slot order
/// ```
///
/// llama.cpp also clamps Σ p\[ids\] from below at 2⁻¹⁴ before dividing; the sum of the
/// `n_used` largest of `x` probabilities is at least `n_used / x`, far above it, so the clamp
/// never acts and is left out.
#[derive(Debug, Clone)]
pub struct MoeFfn {
    /// Router, `[e, x]` f32.
    pub gate_inp: WeightId,
    /// The experts' gate projections, stacked: `[e, f, x]`.
    pub gate_exps: WeightId,
    /// The experts' up projections, stacked: `[e, f, x]`.
    pub up_exps: WeightId,
    /// The experts' down projections, stacked: `[f, e, x]`.
    pub down_exps: WeightId,
    /// Experts per token (`expert_used_count`).
    pub n_used: usize,
    /// Experts (`expert_count`).
    pub n_expert: usize,
}

/// A required positive integer key `<arch>.{name}`, at most `max`.
pub(crate) fn count_key(
    hp: &HParams,
    l: &WeightLoader<'_>,
    name: &str,
    max: usize,
) -> Result<usize> {
    let key = format!("{}.{name}", hp.arch);
    let v = l
        .file()
        .get(&key)
        .ok_or_else(|| LlamaError::MissingKey(key.clone()))?;
    match v.as_u64() {
        Some(n) if n >= 1 && n <= max as u64 => Ok(n as usize),
        _ => Err(LlamaError::BadKey {
            key,
            detail: format!("expected an integer in 1..={max}, found {v:?}"),
        }),
    }
}

impl MoeFfn {
    /// Reads block `i`'s router and stacked experts, of the counts and width the file's
    /// `expert_count`, `expert_used_count` and `expert_feed_forward_length` give.
    pub fn load(hp: &HParams, l: &mut WeightLoader<'_>, i: usize) -> Result<MoeFfn> {
        // Bounded by the shapes below (each expert a slice of a stored tensor); the bound here
        // only keeps the products of the shape check in range.
        let n_expert = count_key(hp, l, "expert_count", 1 << 16)?;
        let n_used = count_key(hp, l, "expert_used_count", n_expert)?;
        let f = count_key(hp, l, "expert_feed_forward_length", 1 << 31)?;
        let e = hp.n_embd;
        Ok(MoeFfn {
            gate_inp: l.f32(&blk(i, "ffn_gate_inp.weight"), &[e, n_expert])?,
            gate_exps: l.matrix(&blk(i, "ffn_gate_exps.weight"), &[e, f, n_expert])?,
            up_exps: l.matrix(&blk(i, "ffn_up_exps.weight"), &[e, f, n_expert])?,
            down_exps: l.matrix(&blk(i, "ffn_down_exps.weight"), &[f, e, n_expert])?,
            n_used,
            n_expert,
        })
    }
}

impl FeedForward for MoeFfn {
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        h: Tensor,
    ) -> Result<Tensor> {
        let (e, n) = (hp.n_embd, ctx.shape(h)?[1]);
        let nu = self.n_used;
        // Routing, as llama.cpp orders it: softmax over all experts, the top n_used, their
        // probabilities renormalised.
        let logits = ctx.mul_mat(w[self.gate_inp], h)?; // [nx, n]
        let (ids, weights) = softmax_route(ctx, logits, nu)?;
        // The chosen experts, every slot reading the token's one column.
        let x = ctx.reshape_3d(h, e, 1, n)?;
        let up = ctx.mul_mat_id(w[self.up_exps], x, ids)?; // [f, nu, n]
        let gate = ctx.mul_mat_id(w[self.gate_exps], x, ids)?;
        let act = ctx.swiglu_split(gate, up)?;
        let experts = ctx.mul_mat_id(w[self.down_exps], act, ids)?; // [e, nu, n]
        let experts = ctx.mul(experts, weights)?;
        sum_slots(ctx, experts)
    }
}

/// llama.cpp's softmax routing with normalised weights, from the router's `logits`
/// (`[x, n]`): the `n_used` chosen experts per token, largest probability first (`ids`,
/// `[n_used, n]`), and their probabilities divided by their sum (`weights`, `[1, n_used, n]`).
pub(crate) fn softmax_route(
    ctx: &mut Context,
    logits: Tensor,
    n_used: usize,
) -> Result<(Tensor, Tensor)> {
    let [nx, n, ..] = ctx.meta(logits)?.ne;
    let probs = ctx.soft_max(logits)?;
    let ids = ctx.argsort_top_k(probs, n_used)?; // [nu, n]
    let probs = ctx.reshape_3d(probs, 1, nx, n)?;
    let weights = ctx.get_rows(probs, ids)?; // [1, nu, n]
    let weights = ctx.reshape_2d(weights, n_used, n)?;
    let sum = ctx.sum_rows(weights)?; // [1, n]
    let weights = ctx.div(weights, sum)?;
    let weights = ctx.reshape_3d(weights, 1, n_used, n)?;
    Ok((ids, weights))
}

/// The weighted outputs of the chosen experts (`[e, n_used, n]`) summed over the slots, in
/// slot order as llama.cpp adds them: `[e, n]`, contiguous.
pub fn sum_slots(ctx: &mut Context, experts: Tensor) -> Result<Tensor> {
    let m = ctx.meta(experts)?;
    let ([e, nu, n, _], nb) = (m.ne, m.nb);
    let mut out = ctx.view_2d(experts, e, n, nb[2], 0)?;
    for s in 1..nu {
        let y = ctx.view_2d(experts, e, n, nb[2], s * nb[1])?;
        out = ctx.add(out, y)?;
    }
    if nu == 1 {
        out = ctx.cont(out)?;
    }
    Ok(out)
}

impl Architecture for Qwen3Moe {
    fn name(&self) -> &'static str {
        "qwen3moe"
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        check_value_length(hp, l)?;
        let model = Qwen3MoeModel::load(
            hp,
            l,
            RopeMode::Neox,
            |l, i| load_attention(hp, l, i),
            |l, i| MoeFfn::load(hp, l, i),
        )?;
        Ok(Box::new(model))
    }
}
