//! The decoder with fused projections that ChatGLM2/3 ([`super::chatglm`]) and Phi-3
//! ([`super::phi3`]) share: the LLaMA graph of [`super::llama`] with the Q, K and V
//! projections in one matrix and the gate and up projections in another.
//!
//! ```text
//! x = token_embd[tokens]                                    // [n_embd, n_tokens]
//! for each layer:
//!     h = rms_norm(x) · attn_norm
//!     qkv = Wqkv·h (+ bqkv)                                 // one fused projection,
//!     q, k, v = views of qkv's rows: Q | K | V              // split by views
//!     q, k = rope(q, pos), rope(k, pos)                     // on the first n_rot dims of each
//!                                                           // head, in the family's pairing
//!     cache_k[cell] = k; cache_v[cell] = v
//!     a = softmax(K·q / √head_dim + mask) applied to V      // Phi-3: q scaled first, then
//!                                                           // softmax(K·q + mask), as llama.cpp
//!     x = x + Wo·a (+ bo)
//!     h = rms_norm(x) · ffn_norm
//!     g|u = W_up·h                                          // gate and up fused: [2·n_ff, n]
//!     x = x + W_down·(silu(g) · u)
//! logits = output · (rms_norm(x) · output_norm) (+ output bias)   // [n_vocab, n_outputs]
//! ```
//!
//! The fused Q/K/V matrix is `blk.N.attn_qkv.weight` `[n_embd, (n_head + 2·n_head_kv)·head_dim]`:
//! each output row of the product holds the query heads, then the key heads, then the value
//! heads. The graph takes Q, K and V as strided views of that row (no copies); rotary
//! embedding and the cache write read views as they are. Files with separate `attn_q/k/v`
//! (as llama.cpp also accepts) work too. `blk.N.ffn_up.weight` is `[n_embd, 2·n_ff]`: the
//! first `n_ff` outputs are the gate, the last `n_ff` the up projection, which is exactly the
//! layout of ggrs's fused [`Context::swiglu`].

use ggrs_core::{Context, RopeMode};

pub use super::decoder::QkvWeights;
use super::decoder::{project_qkv, LongRopeFactors, QkvViews, Rotary};

use crate::architecture::{ArchModel, StepTensors};
use crate::error::Result;
use crate::hparams::HParams;
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::step::{add_opt, cached_attention_scaled, AttnDims, StepInputs, StepShape};

/// The weights of one block (`e` = `n_embd`, `q` = `n_head·head_dim`, `f` = `n_ff`).
#[derive(Debug, Clone)]
pub struct FusedLayer {
    /// RMSNorm weight before attention, `[e]`.
    pub attn_norm: WeightId,
    /// Q, K and V projections.
    pub qkv: QkvWeights,
    /// Output projection, `[q, e]`.
    pub wo: WeightId,
    /// Output bias, `[e]` (ChatGLM and Phi-3 files have none).
    pub bo: Option<WeightId>,
    /// RMSNorm weight before the feed-forward block, `[e]`.
    pub ffn_norm: WeightId,
    /// Gate and up projection fused, `[e, 2·f]`: the first `f` outputs the gate.
    pub ffn_up: WeightId,
    /// Down projection, `[f, e]`.
    pub ffn_down: WeightId,
}

/// What differs between the families of this graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FusedStyle {
    /// How rotary pairs dimensions (normal for ChatGLM, NEOX for Phi-3).
    pub rope_mode: RopeMode,
    /// Whether the queries are multiplied by 1/√head_dim before attention (which then
    /// scales by 1) rather than the scores by 1/√head_dim (Phi-3, as llama.cpp builds it).
    pub scale_queries: bool,
}

/// A loaded model of this layout.
#[derive(Debug, Clone)]
pub struct FusedModel {
    /// The family's variant of the graph.
    pub style: FusedStyle,
    /// Token embeddings, `[n_embd, n_vocab]`.
    pub tok_embd: WeightId,
    /// Final RMSNorm weight, `[n_embd]`.
    pub output_norm: WeightId,
    /// Output projection, `[n_embd, n_vocab]` (the embeddings when tied).
    pub output: WeightId,
    /// Output bias, `[n_vocab]`, when the file has one.
    pub output_b: Option<WeightId>,
    /// Transformer blocks.
    pub layers: Vec<FusedLayer>,
    /// LongRoPE's frequency factors (Phi-3.5, Phi-4-mini), where the file has them.
    pub rope_factors: LongRopeFactors,
}

impl FusedModel {
    /// Reads the weights (Q/K/V fused when `attn_qkv` exists, separate otherwise, as
    /// llama.cpp loads them) for a model of `style`.
    pub fn load(style: FusedStyle, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<FusedModel> {
        let (e, v) = (hp.n_embd, hp.n_vocab);
        let (q, kv) = (hp.n_head * hp.head_dim, hp.n_embd_kv());
        let tok_embd = l.rows("token_embd.weight", &[e, v])?;
        let output_norm = l.f32("output_norm.weight", &[e])?;
        let output = match l.opt_matrix("output.weight", &[e, v])? {
            Some(o) => o,
            None => l.also_matrix(tok_embd)?,
        };
        let output_b = l.opt_f32("output.bias", &[v])?;
        let rope_factors = LongRopeFactors::load(hp, l)?;
        // `HParams::from_gguf` bounded `n_layer` by the file's tensor count.
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            let f = hp.n_ff_at(i);
            let qkv = QkvWeights::load(l, i, [e, q, kv])?;
            layers.push(FusedLayer {
                attn_norm: l.f32(&n("attn_norm.weight"), &[e])?,
                qkv,
                wo: l.matrix(&n("attn_output.weight"), &[q, e])?,
                bo: l.opt_f32(&n("attn_output.bias"), &[e])?,
                ffn_norm: l.f32(&n("ffn_norm.weight"), &[e])?,
                ffn_up: l.matrix(&n("ffn_up.weight"), &[e, 2 * f])?,
                ffn_down: l.matrix(&n("ffn_down.weight"), &[f, e])?,
            });
        }
        Ok(FusedModel {
            style,
            tok_embd,
            output_norm,
            output,
            output_b,
            layers,
            rope_factors,
        })
    }
}

impl ArchModel for FusedModel {
    /// Builds the step graph (see the [module docs](self)).
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<StepTensors> {
        let m = self;
        let n = shape.n_tokens;
        let (hd, nh, nhkv) = (hp.head_dim, hp.n_head, hp.n_head_kv);
        let dims = AttnDims {
            head_dim: hd,
            n_head: nh,
            n_head_kv: nhkv,
        };
        let e_kv = hp.n_embd_kv();
        let inv_sqrt_hd = 1.0 / (hd as f32).sqrt();
        let kq_scale = match m.style.scale_queries {
            true => 1.0,
            false => inv_sqrt_hd,
        };

        let inp = StepInputs::new(ctx, shape, 1, false)?;
        let (tokens, pos, out_ids) = (inp.tokens, inp.pos, inp.out_ids);
        let factors = m.rope_factors.pick(hp, kv, w);
        let rope = Rotary::new(hp, m.style.rope_mode, factors);

        let mut x = ctx.get_rows(w[m.tok_embd], tokens)?; // [n_embd, n]
        for (il, l) in m.layers.iter().enumerate() {
            let last = il + 1 == m.layers.len();
            let inp_sa = x;
            let h = ctx.rms_norm(x, hp.rms_eps)?;
            let h = ctx.mul(h, w[l.attn_norm])?;

            let QkvViews { q, k, v } = project_qkv(ctx, hp, w, &l.qkv, h, n)?;
            let mut q = rope.apply(ctx, q, pos)?; // [hd, nh, n], contiguous
            let k = rope.apply(ctx, k, pos)?; // [hd, nhkv, n], contiguous
            if m.style.scale_queries {
                q = ctx.scale(q, inv_sqrt_hd)?;
            }

            // Write this step's keys and values into the cache (V may be a strided view of the
            // fused product, which set_rows reads as it is), then attend as in the LLaMA graph.
            let k2 = ctx.reshape_2d(k, e_kv, n)?;
            let attn =
                cached_attention_scaled(ctx, kv, il, &inp, shape, dims, q, [k2, v], kq_scale)?;
            let mut cur = ctx.mul_mat(w[l.wo], attn)?; // [n_embd, n]
            cur = add_opt(ctx, cur, w.opt(l.bo))?;

            let mut inp_sa = inp_sa;
            if last {
                if let Some(ids) = out_ids {
                    cur = ctx.get_rows(cur, ids)?;
                    inp_sa = ctx.get_rows(inp_sa, ids)?;
                }
            }
            let ffn_inp = ctx.add(cur, inp_sa)?;
            let h = ctx.rms_norm(ffn_inp, hp.rms_eps)?;
            let h = ctx.mul(h, w[l.ffn_norm])?;
            // Fused: [2·n_ff, n], gate first, then up.
            let gate_up = ctx.mul_mat(w[l.ffn_up], h)?;
            let act = ctx.swiglu(gate_up)?; // [n_ff, n]
            let down = ctx.mul_mat(w[l.ffn_down], act)?; // [n_embd, n]
            x = ctx.add(down, ffn_inp)?;
        }
        let h = ctx.rms_norm(x, hp.rms_eps)?;
        let h = ctx.mul(h, w[m.output_norm])?;
        let logits = ctx.mul_mat(w[m.output], h)?; // [n_vocab, n_outputs]
        let logits = add_opt(ctx, logits, w.opt(m.output_b))?;
        ctx.set_name(logits, "logits")?;
        ctx.set_output(logits)?;
        Ok(StepTensors {
            inputs: inp,
            logits,
        })
    }
}
