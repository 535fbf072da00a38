//! What every step graph shares: the input leaves a session fills ([`StepInputs`]), the
//! step's sizes ([`StepShape`]), the KV-cache attention block ([`cached_attention`]) and small
//! graph helpers. Architectures build their graphs from these and ggrs-core's public API.

use ggrs_core::{Context, DType, Tensor};

use crate::error::{LlamaError, Result};
use crate::kv_cache::KvCache;
pub use crate::kv_cache::{SeqSpan, SeqSpans};
use crate::kv_types::KvTypes;
use crate::recurrent_cache::RecurrentCache;

/// `x + b` when there is a bias `b`, else `x`.
pub fn add_opt(ctx: &mut Context, x: Tensor, b: Option<Tensor>) -> Result<Tensor> {
    Ok(match b {
        Some(b) => ctx.add(x, b)?,
        None => x,
    })
}

/// LayerNorm with weight and optional bias: `norm(x) · w (+ b)`, each column of `x`
/// (`[n, …]` f32) normalised to zero mean and unit variance with `eps`.
pub fn layer_norm(
    ctx: &mut Context,
    x: Tensor,
    w: Tensor,
    b: Option<Tensor>,
    eps: f32,
) -> Result<Tensor> {
    // One node with the bits of norm, mul and add.
    Ok(ctx.norm_mul_add(x, w, b, eps)?)
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
    /// The sliding-window layers' attention mask, `[n_kv, n_tokens]` f32, when the graph has
    /// such layers ([`StepInputs::add_swa_mask`]; filled from `StepValues::mask_swa`).
    pub mask_swa: Option<Tensor>,
    /// Tokens whose logits are computed, `[n_outputs]` i32 (absent when all are).
    pub out_ids: Option<Tensor>,
    /// A factor of each token's queries, `[1, 1, n_tokens]` f32, and the temperature it
    /// comes from, when the graph has one ([`StepInputs::add_attn_temperature`]; filled
    /// from the positions).
    pub q_scale: Option<(Tensor, AttnTemperature)>,
    /// The tokens' rows in the sliding-window layers' own cells, `[n_tokens]` i32, when the
    /// cache keeps them apart ([`StepShape::window`]; added by [`StepInputs::add_swa_mask`]).
    pub k_rows_swa: Option<Tensor>,
    /// The rows of the recurrent states the step's sequences read and write, `[n_seqs,
    /// n_recurrent_layers]` i32, when the model has recurrent layers
    /// ([`StepInputs::add_recurrent`]; see [`crate::recurrent_cache`]).
    pub rs_rows: Option<Tensor>,
    /// The recurrent states as the last conv-state write of the graph leaves them
    /// ([`write_conv_state`]); the session computes it with the logits. (The ssm values are
    /// updated in place by the ops that compute them: see [`ssm_states`].)
    pub state_out: Option<Tensor>,
}

/// Llama 4's attention temperature (Mistral 3's `attention.temperature_scale`): the queries of
/// the token at position `p` are multiplied by `1 + scale · ln(⌊(p + offset) / floor⌋ + 1)`,
/// so that attention stays sharp far beyond the original context.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnTemperature {
    /// The factor of the logarithm (`attention.temperature_scale`).
    pub scale: f32,
    /// Positions per step of the logarithm's argument (llama.cpp: the original context
    /// length of the rotary scaling).
    pub floor: f32,
    /// Added to the position first (0 for Mistral 3).
    pub offset: f32,
}

impl AttnTemperature {
    /// The query factor of position `pos`, with llama.cpp's arithmetic (the quotient and
    /// its floor in f32, the logarithm in f64).
    pub fn factor(&self, pos: i32) -> f32 {
        let steps = ((pos as f32 + self.offset) / self.floor).floor();
        ((steps as f64 + 1.0).ln() * self.scale as f64 + 1.0) as f32
    }

    /// The factors of `pos`, one per position.
    pub fn factors(&self, pos: &[i32]) -> Vec<f32> {
        pos.iter().map(|&p| self.factor(p)).collect()
    }
}

impl StepInputs {
    /// Creates a step's input tensors (named `inp_tokens`, `inp_pos`, `inp_k_rows`,
    /// `inp_mask`, `inp_out_ids`) for `shape`: `pos_streams` position values per token (1;
    /// ChatGLM-6B v1 has 2), and `out_ids` also when every token is an output if
    /// `always_out_ids` (so a measured graph has the leaves of every smaller step).
    pub fn new(
        ctx: &mut Context,
        shape: StepShape,
        pos_streams: usize,
        always_out_ids: bool,
    ) -> Result<StepInputs> {
        let n = shape.n_tokens;
        let tokens = ctx.new_tensor_1d(DType::I32, n)?;
        ctx.set_name(tokens, "inp_tokens")?;
        let pos = ctx.new_tensor_1d(DType::I32, pos_streams * n)?;
        ctx.set_name(pos, "inp_pos")?;
        let k_rows = ctx.new_tensor_1d(DType::I32, n)?;
        ctx.set_name(k_rows, "inp_k_rows")?;
        let mask = ctx.new_tensor_2d(DType::F32, shape.n_kv, n)?;
        ctx.set_name(mask, "inp_mask")?;
        let out_ids = if always_out_ids || shape.n_outputs < n {
            let t = ctx.new_tensor_1d(DType::I32, shape.n_outputs)?;
            ctx.set_name(t, "inp_out_ids")?;
            Some(t)
        } else {
            None
        };
        Ok(StepInputs {
            tokens,
            pos,
            k_rows,
            mask,
            mask_swa: None,
            out_ids,
            q_scale: None,
            k_rows_swa: None,
            rs_rows: None,
            state_out: None,
        })
    }

    /// Adds the recurrent-state rows input (`inp_rs_rows`, see [`StepInputs::rs_rows`]) for
    /// a graph of `shape` over the recurrent states of `kv`, and returns that cache; an
    /// error when `kv` keeps none (the model's [`crate::HParams::recurrent`] is empty).
    pub fn add_recurrent<'a>(
        &mut self,
        ctx: &mut Context,
        shape: StepShape,
        kv: &'a KvCache,
    ) -> Result<&'a RecurrentCache> {
        let rs = kv.recurrent.as_ref().ok_or_else(|| {
            crate::error::LlamaError::InvalidArgument(
                "the cache keeps no recurrent states: the architecture must mark its recurrent \
                 layers in HParams::recurrent"
                    .into(),
            )
        })?;
        let rows = ctx.new_tensor_2d(DType::I32, shape.n_seqs, rs.n_layers())?;
        ctx.set_name(rows, "inp_rs_rows")?;
        self.rs_rows = Some(rows);
        Ok(rs)
    }

    /// Adds the per-token query factor input of `temp` (`inp_q_scale`, `[1, 1, n_tokens]`
    /// f32, see [`StepInputs::q_scale`]) for a graph of `shape`, and returns it. The
    /// attention blocks of [`crate::arch::decoder`] multiply the rotated queries by it.
    pub fn add_attn_temperature(
        &mut self,
        ctx: &mut Context,
        shape: StepShape,
        temp: AttnTemperature,
    ) -> Result<Tensor> {
        let t = ctx.new_tensor_3d(DType::F32, 1, 1, shape.n_tokens)?;
        ctx.set_name(t, "inp_q_scale")?;
        self.q_scale = Some((t, temp));
        Ok(t)
    }

    /// Adds the sliding-window mask input (`inp_mask_swa`, `[n_kv, n_tokens]` f32, see
    /// [`StepInputs::mask_swa`]) for a graph of `shape`, and returns it. When the cache
    /// keeps the window layers' cells apart ([`StepShape::window`]) the mask spans those
    /// cells and the tokens' rows among them are an input too (`inp_k_rows_swa`).
    pub fn add_swa_mask(&mut self, ctx: &mut Context, shape: StepShape) -> Result<Tensor> {
        let n_kv = shape.windowed().n_kv;
        let m = ctx.new_tensor_2d(DType::F32, n_kv, shape.n_tokens)?;
        ctx.set_name(m, "inp_mask_swa")?;
        self.mask_swa = Some(m);
        if shape.window.is_some() {
            let rows = ctx.new_tensor_1d(DType::I32, shape.n_tokens)?;
            ctx.set_name(rows, "inp_k_rows_swa")?;
            self.k_rows_swa = Some(rows);
        }
        Ok(m)
    }

    /// Where a layer that attends over every earlier position reads.
    pub fn global_layer(&self, shape: StepShape) -> LayerView {
        LayerView {
            k_rows: self.k_rows,
            mask: self.mask,
            shape,
        }
    }

    /// Where a sliding-window layer reads: the window mask (added by
    /// [`StepInputs::add_swa_mask`], which `mask_swa` is), and the window cells' rows and
    /// count when the cache keeps them apart.
    pub fn window_layer(&self, mask_swa: Tensor, shape: StepShape) -> LayerView {
        LayerView {
            k_rows: self.k_rows_swa.unwrap_or(self.k_rows),
            mask: mask_swa,
            shape: shape.windowed(),
        }
    }
}

/// The head layout of one attention layer (see [`cached_attention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnDims {
    /// Width of one head.
    pub head_dim: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (a divisor of `n_head`).
    pub n_head_kv: usize,
}

/// How one attention layer turns key·query products into weights (see
/// [`cached_attention_with`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnScores {
    /// Factor applied to each key·query product.
    pub scale: f32,
    /// Soft-capping `c·tanh(s/c)` of the scaled products before the mask (Gemma 2's
    /// `attn_logit_softcapping`), if any.
    pub softcap: Option<f32>,
}

/// Writes this step's keys and values (`k`, `v`: `[head_dim·n_head_kv, n_tokens]`, rows may
/// be strided views) into layer `il`'s cache at the cells `inp.k_rows`, then attends the
/// queries `q` (`[head_dim, n_head, n_tokens]`) over cells `0..shape.n_kv` under `inp.mask`,
/// scaled by 1/√head_dim. An f16 cache uses flash attention split in
/// `shape.attn_kv_splits` parts (llama.cpp's default, so the same arithmetic), another type
/// `mul_mat` + `soft_max_ext`. Returns `[head_dim·n_head, n_tokens]`, heads of a token
/// contiguous.
#[allow(clippy::too_many_arguments)]
pub fn cached_attention(
    ctx: &mut Context,
    kv: &KvCache,
    il: usize,
    inp: &StepInputs,
    shape: StepShape,
    dims: AttnDims,
    q: Tensor,
    kv_new: [Tensor; 2],
) -> Result<Tensor> {
    let scores = AttnScores {
        scale: 1.0 / (dims.head_dim as f32).sqrt(),
        softcap: None,
    };
    cached_attention_with(
        ctx, kv, il, inp.k_rows, inp.mask, shape, dims, q, kv_new, scores,
    )
}

/// [`cached_attention`] with the scores scaled by `kq_scale` instead of 1/√head_dim (a
/// graph that scales the queries beforehand passes 1).
#[allow(clippy::too_many_arguments)]
pub fn cached_attention_scaled(
    ctx: &mut Context,
    kv: &KvCache,
    il: usize,
    inp: &StepInputs,
    shape: StepShape,
    dims: AttnDims,
    q: Tensor,
    kv_new: [Tensor; 2],
    kq_scale: f32,
) -> Result<Tensor> {
    let scores = AttnScores {
        scale: kq_scale,
        softcap: None,
    };
    cached_attention_with(
        ctx, kv, il, inp.k_rows, inp.mask, shape, dims, q, kv_new, scores,
    )
}

/// [`cached_attention`] with the cache rows `k_rows`, the mask `mask` (`[n_kv, n_tokens]`:
/// `inp.mask`, or a sliding-window layer's `inp.mask_swa`) and the score arithmetic
/// `scores` given. An f16 cache uses flash attention (with ggml's `logit_softcap` when
/// soft-capping), another type llama.cpp's path without it: `K·q`, soft-capping as
/// `scale(tanh(scale(s·scale, 1/c)), c)`, `soft_max_ext` with the mask, then the values.
#[allow(clippy::too_many_arguments)]
pub fn cached_attention_with(
    ctx: &mut Context,
    kv: &KvCache,
    il: usize,
    k_rows: Tensor,
    mask: Tensor,
    shape: StepShape,
    dims: AttnDims,
    q: Tensor,
    kv_new: [Tensor; 2],
    scores: AttnScores,
) -> Result<Tensor> {
    let (masks, qkv) = ([k_rows, mask], (q, kv_new));
    cached_attention_sinks(ctx, kv, il, masks, shape, dims, qkv, scores, None)
}

/// [`cached_attention_with`] (cache rows and mask given as `[k_rows, mask]`, the queries
/// and this step's keys and values as `(q, [k, v])`) with attention sinks: `sinks`
/// (`[n_head]` f32, gpt-oss's `attn_sinks`) holds one logit per query head that joins the
/// softmax's denominator without a value (ggml's `flash_attn_ext_add_sinks` /
/// `soft_max_add_sinks`). `None`: no sinks.
#[allow(clippy::too_many_arguments)]
pub fn cached_attention_sinks(
    ctx: &mut Context,
    kv: &KvCache,
    il: usize,
    [k_rows, mask]: [Tensor; 2],
    shape: StepShape,
    dims: AttnDims,
    (q, [k, v]): (Tensor, [Tensor; 2]),
    scores: AttnScores,
    sinks: Option<Tensor>,
) -> Result<Tensor> {
    // A quantized cache: llama.cpp rotates queries and keys (and values, and back the
    // output) by a Walsh–Hadamard transform around it, which leaves the attention unchanged
    // but spreads outliers over the quantization blocks.
    let (rot_k, rot_v) = (kv.types.rot_k(dims.head_dim), kv.types.rot_v(dims.head_dim));
    let (q, k) = match rot_k {
        Some(n) => (ctx.hadamard(q, n)?, ctx.hadamard(k, n)?),
        None => (q, k),
    };
    let v = match rot_v {
        Some(n) => ctx.hadamard(v, n)?,
        None => v,
    };
    let k_cache = ctx.set_rows(kv.k[il], k, k_rows)?; // [e_kv, size]
    let v_cache = ctx.set_rows(kv.v[il], v, k_rows)?; // [e_kv, size]
    let out = attend_cache(
        ctx,
        kv.types,
        [k_cache, v_cache],
        mask,
        shape,
        dims,
        q,
        scores,
        sinks,
    )?;
    Ok(match rot_v {
        Some(n) => ctx.hadamard(out, n)?,
        None => out,
    })
}

/// The attention half of [`cached_attention_sinks`]: the queries `q` (`[head_dim, n_head,
/// n_tokens]`) over cells `0..shape.n_kv` (or each span's cells) of the written caches
/// `[k_cache, v_cache]` (`[head_dim·n_head_kv, size]` of types `types`: the tensors
/// `set_rows` gave, so that the graph reads them after this step's keys are in) under
/// `mask`. A layer that shares an earlier layer's cache (Gemma 4) passes that layer's.
/// Returns `[head_dim·n_head, n_tokens]`.
#[allow(clippy::too_many_arguments)]
pub fn attend_cache(
    ctx: &mut Context,
    types: KvTypes,
    [k_cache, v_cache]: [Tensor; 2],
    mask: Tensor,
    shape: StepShape,
    dims: AttnDims,
    q: Tensor,
    scores: AttnScores,
    sinks: Option<Tensor>,
) -> Result<Tensor> {
    let AttnDims {
        head_dim: hd,
        n_head: nh,
        n_head_kv: nhkv,
    } = dims;
    let n = shape.n_tokens;
    let e_kv = hd * nhkv;
    let qq = ctx.permute(q, [0, 2, 1, 3])?; // [hd, n, nh]
                                            // Cells `first..first + n_kv` of the cache, as [hd, n_kv, nhkv].
    let cache_view = |ctx: &mut Context, cache: Tensor, first: usize, n_kv: usize| {
        let dtype = ctx.meta(cache)?.dtype;
        let (row, head) = (dtype.row_size(e_kv), dtype.row_size(hd));
        ctx.view_3d(cache, hd, n_kv, nhkv, row, head, first * row)
    };
    let spans = shape.spans.as_slice();
    if spans.is_empty() {
        let kk = cache_view(ctx, k_cache, 0, shape.n_kv)?;
        let vv = cache_view(ctx, v_cache, 0, shape.n_kv)?;
        let merged = attend(ctx, types, shape, qq, kk, vv, mask, scores, sinks)?;
        return Ok(ctx.reshape_2d(merged, hd * nh, n)?);
    }
    // Sequences in their own regions: each span's queries attend over its region's cells
    // only, exactly as in a lone session (same cells, padding and key splits), then the
    // spans' outputs are joined in token order.
    let qnb = ctx.meta(qq)?.nb;
    let mut parts = Vec::with_capacity(spans.len());
    for sp in spans {
        let (t0, ng) = (sp.first_token as usize, sp.n_tokens as usize);
        let (c0, nkv) = (sp.first_cell as usize, sp.n_kv as usize);
        let q_g = ctx.view_3d(qq, hd, ng, nh, qnb[1], qnb[2], t0 * qnb[1])?;
        let kk = cache_view(ctx, k_cache, c0, nkv)?;
        let vv = cache_view(ctx, v_cache, c0, nkv)?;
        let m_g = ctx.view_2d(mask, nkv, ng, 4 * shape.n_kv, 4 * t0 * shape.n_kv)?;
        parts.push(attend(ctx, types, shape, q_g, kk, vv, m_g, scores, sinks)?);
        // [hd, nh, ng]
    }
    let merged = concat_tree(ctx, parts, 2)?.expect("a step has at least one span");
    Ok(ctx.reshape_2d(merged, hd * nh, n)?)
}

/// `parts` joined in order along `dim` (`None` for no parts), as a balanced tree of
/// `concat`s: each value is copied about log₂(parts) times rather than once per later part
/// (a chain's quadratic copying), and the concats of a level are independent nodes.
pub fn concat_tree(
    ctx: &mut Context,
    mut parts: Vec<Tensor>,
    dim: usize,
) -> Result<Option<Tensor>> {
    while parts.len() > 1 {
        let mut next = Vec::with_capacity(parts.len().div_ceil(2));
        let mut it = parts.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => ctx.concat(a, b, dim)?,
                None => a,
            });
        }
        parts = next;
    }
    Ok(parts.pop())
}

/// Attention of the queries `qq` (`[hd, n, nh]`) over keys `kk` and values `vv` (`[hd,
/// n_kv, nhkv]` views of a cache of types `types`) under `mask` (`[n_kv, n]`): flash
/// attention for the types it reads (f16 and the quantized ones), else `K·q`, soft-max and
/// `V`. Returns `[hd, nh, n]`, contiguous.
#[allow(clippy::too_many_arguments)]
fn attend(
    ctx: &mut Context,
    types: KvTypes,
    shape: StepShape,
    qq: Tensor,
    kk: Tensor,
    vv: Tensor,
    mask: Tensor,
    scores: AttnScores,
    sinks: Option<Tensor>,
) -> Result<Tensor> {
    let mask = Some(mask);
    Ok(if types.flash_attn() {
        let (scale, softcap) = (scores.scale, scores.softcap.unwrap_or(0.0));
        let splits = shape.attn_kv_splits;
        ctx.flash_attn_ext_sinks(qq, kk, vv, mask, sinks, scale, softcap, splits)?
    } else {
        let mut kq = ctx.mul_mat(kk, qq)?; // [n_kv, n, nh]
        let mut softmax_scale = scores.scale;
        if let Some(c) = scores.softcap {
            if scores.scale != 1.0 {
                kq = ctx.scale(kq, scores.scale)?;
                softmax_scale = 1.0;
            }
            kq = ctx.soft_cap(kq, c)?;
        }
        let kq = match sinks {
            Some(s) => ctx.soft_max_ext_sinks(kq, mask, s, softmax_scale)?,
            None => ctx.soft_max_ext(kq, mask, softmax_scale)?,
        };
        let vt = ctx.transpose(vv)?;
        let vt = ctx.cont(vt)?; // [n_kv, hd, nhkv]
        let kqv = ctx.mul_mat(vt, kq)?; // [hd, n, nh]
        let merged = ctx.permute(kqv, [0, 2, 1, 3])?; // [hd, nh, n]
        ctx.cont(merged)?
    })
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
    /// With cache regions: each sequence's tokens and cells; `n_kv` is then the widest
    /// span's (the mask's width). Empty: one shared cache.
    pub spans: SeqSpans,
    /// The graph's matrix products compute every column as a one-column product
    /// ([`ggrs_core::Context::set_per_column_products`]; set while the graph is built).
    pub per_column: bool,
    /// When the sliding-window layers keep cells of their own
    /// ([`KvCache::with_window_cells`]): the cells they read.
    pub window: Option<WindowShape>,
    /// Sequences of the step as its recurrent layers take them: the tokens are `n_seqs`
    /// runs of `n_tokens / n_seqs` consecutive tokens, one sequence each (every sequence of
    /// one token, or one sequence). 1 for a model without recurrent layers.
    pub n_seqs: usize,
}

/// The cells the sliding-window layers of a trimmed cache read in a step (as
/// [`StepShape::n_kv`] and [`StepShape::spans`] for the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowShape {
    /// Cells attention reads.
    pub n_kv: usize,
    /// With regions: each sequence's tokens and window cells.
    pub spans: SeqSpans,
}

impl StepShape {
    /// The shape a sliding-window layer attends with: this one, with the window cells'
    /// count and spans when the cache keeps them apart.
    pub fn windowed(&self) -> StepShape {
        match self.window {
            Some(w) => StepShape {
                n_kv: w.n_kv,
                spans: w.spans,
                window: None,
                ..*self
            },
            None => *self,
        }
    }
}

/// Where one layer's attention reads: the cache rows of the step's tokens, the mask and the
/// cells ([`StepInputs::global_layer`], [`StepInputs::window_layer`]).
#[derive(Debug, Clone, Copy)]
pub struct LayerView {
    /// Cache row of each token, `[n_tokens]` i32.
    pub k_rows: Tensor,
    /// `[shape.n_kv, n_tokens]` f32.
    pub mask: Tensor,
    /// The step's shape as the layer reads the cache.
    pub shape: StepShape,
}

/// The carried convolution inputs of recurrent layer `r` for the step's sequences: the
/// first `len` values of each sequence's row (its conv values, see
/// [`RecurrentLayer`](crate::recurrent_cache::RecurrentLayer)), `[len, n_seqs]` f32, read
/// after the writes of the layers before it.
pub fn read_conv_state(
    ctx: &mut Context,
    rs: &RecurrentCache,
    inp: &StepInputs,
    r: usize,
    len: usize,
) -> Result<Tensor> {
    let rows = state_rows(ctx, inp, r)?;
    let conv = conv_columns(ctx, rs, inp, len)?;
    Ok(ctx.get_rows(conv, rows)?)
}

/// Writes `new` (`[len, n_seqs]` f32) as the first `len` values (the conv values) of
/// recurrent layer `r`'s rows of the step's sequences; the write runs before any later
/// layer reads ([`StepInputs::state_out`]).
pub fn write_conv_state(
    ctx: &mut Context,
    rs: &RecurrentCache,
    inp: &mut StepInputs,
    r: usize,
    new: Tensor,
) -> Result<()> {
    let len = ctx.meta(new)?.ne[0];
    let rows = state_rows(ctx, inp, r)?;
    let conv = conv_columns(ctx, rs, inp, len)?;
    let written = ctx.set_rows(conv, new, rows)?;
    // The whole states again, as the write leaves them.
    let n_rows = ctx.meta(rs.states)?.ne[1];
    let states = ctx.view_2d(written, rs.width, n_rows, 4 * rs.width, 0)?;
    inp.state_out = Some(states);
    Ok(())
}

/// Every row of the recurrent states from value `offset` on (the ssm values of a layer that
/// keeps `offset` conv values), as `ne` (`[a, b, c, n_rows]` with `a·b·c` values per row):
/// what the in-place recurrent ops (`ssm_scan_in_place`, `gated_delta_net_in_place`) update,
/// at the rows [`state_rows`] gives.
pub fn ssm_states(
    ctx: &mut Context,
    rs: &RecurrentCache,
    offset: usize,
    [a, b, c]: [usize; 3],
) -> Result<Tensor> {
    let n_rows = ctx.meta(rs.states)?.ne[1];
    Ok(ctx.view_4d(
        rs.states,
        [a, b, c, n_rows],
        4 * a,
        4 * a * b,
        4 * rs.width,
        4 * offset,
    )?)
}

/// The rows of recurrent layer `r`'s states that the step's sequences own, `[n_seqs]` i32
/// (a view of the step's input [`StepInputs::rs_rows`]).
pub fn state_rows(ctx: &mut Context, inp: &StepInputs, r: usize) -> Result<Tensor> {
    let all = inp.rs_rows.ok_or_else(|| {
        LlamaError::InvalidArgument(
            "the step graph reads recurrent states but has no rs_rows input \
             (StepInputs::add_recurrent)"
                .into(),
        )
    })?;
    let n_seqs = ctx.meta(all)?.ne[0];
    Ok(ctx.view_1d(all, n_seqs, r * n_seqs * 4)?)
}

/// The first `len` values of every row of the states, `[len, n_rows]`, as the writes so far
/// left them.
fn conv_columns(
    ctx: &mut Context,
    rs: &RecurrentCache,
    inp: &StepInputs,
    len: usize,
) -> Result<Tensor> {
    let states = inp.state_out.unwrap_or(rs.states);
    let n_rows = ctx.meta(rs.states)?.ne[1];
    Ok(ctx.view_2d(states, len, n_rows, 4 * rs.width, 0)?)
}
