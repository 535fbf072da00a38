//! The LLaMA / Qwen2 graph (llama.cpp's `build_llama`, Qwen2 adding Q/K/V biases and NEOX
//! rotary):
//!
//! ```text
//! x = token_embd[tokens]                                   // [n_embd, n_tokens]
//! for each layer:
//!     h = rms_norm(x) · attn_norm
//!     q, k, v = Wq·h (+bq), Wk·h (+bk), Wv·h (+bv)          // heads × head_dim
//!     q, k = rope(q, pos), rope(k, pos)
//!     cache_k[cell] = k; cache_v[cell] = v                  // set_rows
//!     a = softmax(K·q / √head_dim + mask) applied to V      // over cells 0..n_kv, GQA by broadcast:
//!                                                           // flash_attn_ext for an F16 cache
//!     x = x + Wo·a (+bo)
//!     h = rms_norm(x) · ffn_norm
//!     x = x + W_down·(silu(W_gate·h) · (W_up·h))
//! logits = output · (rms_norm(x) · output_norm)             // [n_vocab, n_outputs]
//! ```

use ggrs_core::{Context, RopeParams, Tensor};

use crate::arch::{cached_attention, need, AttnDims, ModelTensors, StepInputs, StepShape};
use crate::error::Result;
use crate::hparams::HParams;
use crate::kv_cache::KvCache;

fn add_bias(ctx: &mut Context, x: Tensor, b: Option<Tensor>) -> Result<Tensor> {
    Ok(match b {
        Some(b) => ctx.add(x, b)?,
        None => x,
    })
}

/// Builds the step graph; returns the inputs to fill and the logits tensor
/// (`[n_vocab, n_outputs]`).
pub fn build(
    ctx: &mut Context,
    hp: &HParams,
    w: &ModelTensors,
    kv: &KvCache,
    shape: StepShape,
) -> Result<(StepInputs, Tensor)> {
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
    let rope = RopeParams {
        n_dims: hp.n_rot,
        mode: hp.arch.rope_mode(),
        freq_base: hp.rope_freq_base,
        freq_scale: hp.rope_freq_scale,
    };

    let mut x = ctx.get_rows(w.tok_embd, tokens)?; // [n_embd, n]
    for (il, l) in w.layers.iter().enumerate() {
        let last = il + 1 == w.layers.len();
        let inp_sa = x;
        let h = ctx.rms_norm_mul(x, l.attn_norm, hp.rms_eps)?; // fused: same bits as rms_norm · w

        let q = ctx.mul_mat(need(l.wq, "attn_q.weight")?, h)?; // [nh·hd, n]
        let q = add_bias(ctx, q, l.bq)?;
        let k = ctx.mul_mat(need(l.wk, "attn_k.weight")?, h)?; // [nhkv·hd, n]
        let k = add_bias(ctx, k, l.bk)?;
        let v = ctx.mul_mat(need(l.wv, "attn_v.weight")?, h)?; // [nhkv·hd, n]
        let v = add_bias(ctx, v, l.bv)?;

        let q = ctx.reshape_3d(q, hd, nh, n)?;
        let q = ctx.rope_ext(q, pos, rope)?; // [hd, nh, n]
        let k = ctx.reshape_3d(k, hd, nhkv, n)?;
        let k = ctx.rope_ext(k, pos, rope)?; // [hd, nhkv, n]

        // Write this step's keys and values into the cache, then attend over cells 0..n_kv.
        let k2 = ctx.reshape_2d(k, e_kv, n)?;
        let v2 = ctx.reshape_2d(v, e_kv, n)?;
        let attn = cached_attention(ctx, kv, il, &inp, shape, dims, q, [k2, v2])?;
        let mut cur = ctx.mul_mat(l.wo, attn)?; // [n_embd, n]
        cur = add_bias(ctx, cur, l.bo)?;

        let mut inp_sa = inp_sa;
        if last {
            if let Some(ids) = out_ids {
                cur = ctx.get_rows(cur, ids)?;
                inp_sa = ctx.get_rows(inp_sa, ids)?;
            }
        }
        let ffn_inp = ctx.add(cur, inp_sa)?;
        let h = ctx.rms_norm_mul(ffn_inp, l.ffn_norm, hp.rms_eps)?;
        let gate = ctx.mul_mat(need(l.ffn_gate, "ffn_gate.weight")?, h)?; // [n_ff, n]
        let up = ctx.mul_mat(l.ffn_up, h)?;
        let act = ctx.swiglu_split(gate, up)?;
        let down = ctx.mul_mat(l.ffn_down, act)?; // [n_embd, n]
        x = ctx.add(down, ffn_inp)?;
    }
    let h = ctx.rms_norm_mul(x, w.output_norm, hp.rms_eps)?;
    let logits = ctx.mul_mat(w.output, h)?; // [n_vocab, n_outputs]
    ctx.set_name(logits, "logits")?;
    ctx.set_output(logits)?;
    Ok((inp, logits))
}
