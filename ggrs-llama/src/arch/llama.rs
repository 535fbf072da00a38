//! The LLaMA / Qwen2 graph (llama.cpp's `build_llama`, Qwen2 adding Q/K/V biases and NEOX
//! rotary; Llama 3.1's rotary scaling through the optional `rope_freqs.weight`):
//!
//! ```text
//! x = token_embd[tokens]                                   // [n_embd, n_tokens]
//! for each layer:
//!     h = rms_norm(x) · attn_norm
//!     q, k, v = Wq·h (+bq), Wk·h (+bk), Wv·h (+bv)          // heads × head_dim
//!     q, k = rope(q, pos), rope(k, pos)                     // pair i turns by pos·base^(−2i/n_rot)
//!                                                           // / rope_freqs[i] when the file has them
//!     cache_k[cell] = k; cache_v[cell] = v                  // set_rows
//!     a = softmax(K·q / √head_dim + mask) applied to V      // over cells 0..n_kv, GQA by broadcast:
//!                                                           // flash_attn_ext for an F16 cache
//!     x = x + Wo·a (+bo)
//!     h = rms_norm(x) · ffn_norm
//!     x = x + W_down·(silu(W_gate·h) · (W_up·h))
//! logits = output · (rms_norm(x) · output_norm)             // [n_vocab, n_outputs]
//! ```

use ggrs_core::{Context, RopeMode};

use crate::architecture::{ArchModel, Architecture, StepTensors};
use crate::error::Result;
use crate::hparams::HParams;
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::step::{add_opt, cached_attention, AttnDims, StepInputs, StepShape};

/// The LLaMA layout, under one of the names that use it.
#[derive(Debug, Clone, Copy)]
pub struct Llama {
    name: &'static str,
    rope_mode: RopeMode,
    qkv_bias: bool,
}

/// LLaMA 1/2/3, Mistral and relatives (`llama`): normal (adjacent-pair) rotary; Q/K/V/O
/// biases read where the file has them.
pub const LLAMA: Llama = Llama {
    name: "llama",
    rope_mode: RopeMode::Normal,
    qkv_bias: false,
};

/// Qwen2 / Qwen2.5 (`qwen2`): the LLaMA layout with Q/K/V biases (required) and NEOX
/// rotary.
pub const QWEN2: Llama = Llama {
    name: "qwen2",
    rope_mode: RopeMode::Neox,
    qkv_bias: true,
};

/// The weights of one block (shapes with `e` = `n_embd`, `q` = `n_head·head_dim`,
/// `kv` = `n_head_kv·head_dim`, `f` = `n_ff`).
#[derive(Debug, Clone)]
pub struct LlamaLayer {
    /// RMSNorm weight before attention, `[e]`.
    pub attn_norm: WeightId,
    /// Query projection, `[e, q]`.
    pub wq: WeightId,
    /// Key projection, `[e, kv]`.
    pub wk: WeightId,
    /// Value projection, `[e, kv]`.
    pub wv: WeightId,
    /// Query bias, `[q]`.
    pub bq: Option<WeightId>,
    /// Key bias, `[kv]`.
    pub bk: Option<WeightId>,
    /// Value bias, `[kv]`.
    pub bv: Option<WeightId>,
    /// Output projection, `[q, e]`.
    pub wo: WeightId,
    /// Output bias, `[e]`.
    pub bo: Option<WeightId>,
    /// RMSNorm weight before the feed-forward block, `[e]`.
    pub ffn_norm: WeightId,
    /// Gate projection, `[e, f]`.
    pub ffn_gate: WeightId,
    /// Up projection, `[e, f]`.
    pub ffn_up: WeightId,
    /// Down projection, `[f, e]`.
    pub ffn_down: WeightId,
}

/// A loaded LLaMA-layout model: its weights and rotary mode.
#[derive(Debug, Clone)]
pub struct LlamaModel {
    /// How rotary pairs dimensions (normal for `llama`, NEOX for `qwen2`).
    pub rope_mode: RopeMode,
    /// Per-pair rotary frequency factors, `[n_rot / 2]` (`rope_freqs.weight`, Llama 3.1's
    /// rotary scaling: pair i's angle is divided by factor i), when the file has them.
    pub rope_freqs: Option<WeightId>,
    /// Token embeddings, `[n_embd, n_vocab]`.
    pub tok_embd: WeightId,
    /// Final RMSNorm weight, `[n_embd]`.
    pub output_norm: WeightId,
    /// Output projection, `[n_embd, n_vocab]` (the embeddings when tied).
    pub output: WeightId,
    /// Transformer blocks.
    pub layers: Vec<LlamaLayer>,
}

impl Architecture for Llama {
    fn name(&self) -> &'static str {
        self.name
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let (e, f) = (hp.n_embd, hp.n_ff);
        let (q, kv) = (hp.n_head * hp.head_dim, hp.n_embd_kv());
        let (tok_embd, output_norm, output) = l.embeddings_and_output()?;
        let rope_freqs = l.opt_f32("rope_freqs.weight", &[hp.n_rot / 2])?;
        // `HParams::from_gguf` bounded `n_layer` by the file's tensor count.
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            let bias = |l: &mut WeightLoader<'_>, s: &str, len: usize| match self.qkv_bias {
                true => l.f32(&n(s), &[len]).map(Some),
                false => l.opt_f32(&n(s), &[len]),
            };
            layers.push(LlamaLayer {
                wq: l.matrix(&n("attn_q.weight"), &[e, q])?,
                wk: l.matrix(&n("attn_k.weight"), &[e, kv])?,
                wv: l.matrix(&n("attn_v.weight"), &[e, kv])?,
                attn_norm: l.f32(&n("attn_norm.weight"), &[e])?,
                wo: l.matrix(&n("attn_output.weight"), &[q, e])?,
                bq: bias(l, "attn_q.bias", q)?,
                bk: bias(l, "attn_k.bias", kv)?,
                bv: bias(l, "attn_v.bias", kv)?,
                bo: l.opt_f32(&n("attn_output.bias"), &[e])?,
                ffn_norm: l.f32(&n("ffn_norm.weight"), &[e])?,
                ffn_gate: l.matrix(&n("ffn_gate.weight"), &[e, f])?,
                ffn_up: l.matrix(&n("ffn_up.weight"), &[e, f])?,
                ffn_down: l.matrix(&n("ffn_down.weight"), &[f, e])?,
            });
        }
        Ok(Box::new(LlamaModel {
            rope_mode: self.rope_mode,
            rope_freqs,
            tok_embd,
            output_norm,
            output,
            layers,
        }))
    }
}

impl ArchModel for LlamaModel {
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<StepTensors> {
        build(self, ctx, hp, w, kv, shape)
    }
}

/// Builds the step graph; returns the inputs to fill and the logits tensor
/// (`[n_vocab, n_outputs]`).
fn build(
    m: &LlamaModel,
    ctx: &mut Context,
    hp: &HParams,
    w: &ImportedWeights,
    kv: &KvCache,
    shape: StepShape,
) -> Result<StepTensors> {
    let n = shape.n_tokens;
    let (hd, nh, nhkv) = (hp.head_dim, hp.n_head, hp.n_head_kv);
    let dims = AttnDims {
        head_dim: hd,
        n_head: nh,
        n_head_kv: nhkv,
    };
    let e_kv = hp.n_embd_kv();

    let inp = StepInputs::new(ctx, shape, 1, false)?;
    let (tokens, pos, out_ids) = (inp.tokens, inp.pos, inp.out_ids);
    let rope = hp.rope(m.rope_mode);

    let freqs = w.opt(m.rope_freqs);

    let mut x = ctx.get_rows(w[m.tok_embd], tokens)?; // [n_embd, n]
    for (il, l) in m.layers.iter().enumerate() {
        let last = il + 1 == m.layers.len();
        let inp_sa = x;
        let h = ctx.rms_norm_mul(x, w[l.attn_norm], hp.rms_eps)?; // fused: same bits as rms_norm · w

        let q = ctx.mul_mat(w[l.wq], h)?; // [nh·hd, n]
        let q = add_opt(ctx, q, w.opt(l.bq))?;
        let k = ctx.mul_mat(w[l.wk], h)?; // [nhkv·hd, n]
        let k = add_opt(ctx, k, w.opt(l.bk))?;
        let v = ctx.mul_mat(w[l.wv], h)?; // [nhkv·hd, n]
        let v = add_opt(ctx, v, w.opt(l.bv))?;

        let q = ctx.reshape_3d(q, hd, nh, n)?;
        let q = ctx.rope_ext_factors(q, pos, freqs, rope)?; // [hd, nh, n]
        let k = ctx.reshape_3d(k, hd, nhkv, n)?;
        let k = ctx.rope_ext_factors(k, pos, freqs, rope)?; // [hd, nhkv, n]

        // Write this step's keys and values into the cache, then attend over cells 0..n_kv.
        let k2 = ctx.reshape_2d(k, e_kv, n)?;
        let v2 = ctx.reshape_2d(v, e_kv, n)?;
        let attn = cached_attention(ctx, kv, il, &inp, shape, dims, q, [k2, v2])?;
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
        let h = ctx.rms_norm_mul(ffn_inp, w[l.ffn_norm], hp.rms_eps)?;
        let gate = ctx.mul_mat(w[l.ffn_gate], h)?; // [n_ff, n]
        let up = ctx.mul_mat(w[l.ffn_up], h)?;
        let act = ctx.swiglu_split(gate, up)?;
        let down = ctx.mul_mat(w[l.ffn_down], act)?; // [n_embd, n]
        x = ctx.add(down, ffn_inp)?;
    }
    let h = ctx.rms_norm_mul(x, w[m.output_norm], hp.rms_eps)?;
    let logits = ctx.mul_mat(w[m.output], h)?; // [n_vocab, n_outputs]
    ctx.set_name(logits, "logits")?;
    ctx.set_output(logits)?;
    Ok(StepTensors {
        inputs: inp,
        logits,
    })
}
