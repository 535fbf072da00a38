//! The ChatGLM2 / ChatGLM3 / GLM-4 graph (architecture `chatglm`, llama.cpp's
//! `llm_build_chatglm`). It is the LLaMA graph of [`super::llama`] with three differences,
//! marked ① ② ③ below:
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
//! [`Context::swiglu`].

use ggrs_core::{Context, DType, RopeParams, Tensor};

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

/// Q, K and V of one layer: q `[hd, nh, n]`, k `[hd, nhkv, n]`, v `[nhkv·hd, n]` (any of
/// them may be a strided view).
struct Qkv {
    q: Tensor,
    k: Tensor,
    v: Tensor,
}

/// ① The attention projections: one fused product split by views, or (files converted
/// without fusing) three products.
fn project_qkv(
    ctx: &mut Context,
    hp: &HParams,
    l: &crate::arch::LayerTensors,
    h: Tensor,
    n: usize,
) -> Result<Qkv> {
    let (hd, nh, nhkv) = (hp.head_dim, hp.n_head, hp.n_head_kv);
    let (e_q, e_kv) = (hd * nh, hp.n_embd_kv());
    let f = DType::F32.type_size();
    if let Some(wqkv) = l.wqkv {
        let cur = ctx.mul_mat(wqkv, h)?; // [e_q + 2·e_kv, n]
        let cur = add_bias(ctx, cur, l.bqkv)?;
        let row = (e_q + 2 * e_kv) * f; // bytes from one token's row to the next
        let q = ctx.view_3d(cur, hd, nh, n, hd * f, row, 0)?; // [hd, nh, n]
        let k = ctx.view_3d(cur, hd, nhkv, n, hd * f, row, e_q * f)?; // [hd, nhkv, n]
        let v = ctx.view_2d(cur, e_kv, n, row, (e_q + e_kv) * f)?; // [e_kv, n]
        return Ok(Qkv { q, k, v });
    }
    let q = ctx.mul_mat(need(l.wq, "attn_q.weight")?, h)?;
    let q = add_bias(ctx, q, l.bq)?;
    let k = ctx.mul_mat(need(l.wk, "attn_k.weight")?, h)?;
    let k = add_bias(ctx, k, l.bk)?;
    let v = ctx.mul_mat(need(l.wv, "attn_v.weight")?, h)?;
    let v = add_bias(ctx, v, l.bv)?;
    Ok(Qkv {
        q: ctx.reshape_3d(q, hd, nh, n)?,
        k: ctx.reshape_3d(k, hd, nhkv, n)?,
        v,
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
    // ② n_rot (rope.dimension_count) is head_dim / 2 in these files: half of each head turns.
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
        let h = ctx.rms_norm(x, hp.rms_eps)?;
        let h = ctx.mul(h, l.attn_norm)?;

        let Qkv { q, k, v } = project_qkv(ctx, hp, l, h, n)?;
        let q = ctx.rope_ext(q, pos, rope)?; // [hd, nh, n], contiguous
        let k = ctx.rope_ext(k, pos, rope)?; // [hd, nhkv, n], contiguous

        // Write this step's keys and values into the cache (V may be a strided view of the
        // fused product, which set_rows reads as it is), then attend as in the LLaMA graph.
        let k2 = ctx.reshape_2d(k, e_kv, n)?;
        let attn = cached_attention(ctx, kv, il, &inp, shape, dims, q, [k2, v])?;
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
        let h = ctx.rms_norm(ffn_inp, hp.rms_eps)?;
        let h = ctx.mul(h, l.ffn_norm)?;
        let act = match l.ffn_gate {
            // ③ fused: [2·n_ff, n], gate first, then up.
            None => {
                let gate_up = ctx.mul_mat(l.ffn_up, h)?;
                ctx.swiglu(gate_up)? // [n_ff, n]
            }
            Some(gate) => {
                let g = ctx.mul_mat(gate, h)?;
                let u = ctx.mul_mat(l.ffn_up, h)?;
                ctx.swiglu_split(g, u)?
            }
        };
        let down = ctx.mul_mat(l.ffn_down, act)?; // [n_embd, n]
        x = ctx.add(down, ffn_inp)?;
    }
    let h = ctx.rms_norm(x, hp.rms_eps)?;
    let h = ctx.mul(h, w.output_norm)?;
    let logits = ctx.mul_mat(w.output, h)?; // [n_vocab, n_outputs]
    ctx.set_name(logits, "logits")?;
    ctx.set_output(logits)?;
    Ok((inp, logits))
}
