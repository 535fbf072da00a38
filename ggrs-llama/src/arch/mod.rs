//! Per-architecture graph builders. Each builds, with ggrs-core's public API only, the
//! graph of one evaluation step: the batch's tokens in, K/V written to the cache, logits out.

pub mod chatglm;
pub mod chatglm1;
pub mod llama;

use ggrs_core::{Context, DType, Tensor};

use crate::error::{LlamaError, Result};
use crate::kv_cache::KvCache;
use crate::model::{Model, WeightRef};

/// Weights imported into a session's context (external tensors pointing into the mapping).
#[derive(Debug, Clone)]
pub struct LayerTensors {
    /// See [`crate::model::LayerWeights`] for shapes.
    pub attn_norm: Tensor,
    /// Attention norm bias (LayerNorm models).
    pub attn_norm_b: Option<Tensor>,
    /// Query projection (absent when fused into `wqkv`).
    pub wq: Option<Tensor>,
    /// Key projection.
    pub wk: Option<Tensor>,
    /// Value projection.
    pub wv: Option<Tensor>,
    /// Fused Q|K|V projection (ChatGLM).
    pub wqkv: Option<Tensor>,
    /// Bias of the fused projection.
    pub bqkv: Option<Tensor>,
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
    /// FFN norm bias (LayerNorm models).
    pub ffn_norm_b: Option<Tensor>,
    /// Up projection bias.
    pub ffn_up_b: Option<Tensor>,
    /// Down projection bias.
    pub ffn_down_b: Option<Tensor>,
    /// Gate projection (absent when fused into `ffn_up`).
    pub ffn_gate: Option<Tensor>,
    /// Up projection (ChatGLM: gate and up fused).
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
    /// Final norm bias (LayerNorm models).
    pub output_norm_b: Option<Tensor>,
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
        let output_norm_b = w.output_norm_b.as_ref().map(&mut imp).transpose()?;
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
            let (wq, wk, wv) = (opt(&l.wq)?, opt(&l.wk)?, opt(&l.wv)?);
            let (wqkv, bqkv, ffn_gate) = (opt(&l.wqkv)?, opt(&l.bqkv)?, opt(&l.ffn_gate)?);
            let (attn_norm_b, ffn_norm_b) = (opt(&l.attn_norm_b)?, opt(&l.ffn_norm_b)?);
            let (ffn_up_b, ffn_down_b) = (opt(&l.ffn_up_b)?, opt(&l.ffn_down_b)?);
            let mut imp = |r: &WeightRef| model.import(ctx, r);
            layers.push(LayerTensors {
                attn_norm: imp(&l.attn_norm)?,
                attn_norm_b,
                wq,
                wk,
                wv,
                wqkv,
                bqkv,
                wo: imp(&l.wo)?,
                bq,
                bk,
                bv,
                bo,
                ffn_norm: imp(&l.ffn_norm)?,
                ffn_norm_b,
                ffn_up_b,
                ffn_down_b,
                ffn_gate,
                ffn_up: imp(&l.ffn_up)?,
                ffn_down: imp(&l.ffn_down)?,
            });
        }
        Ok(ModelTensors {
            tok_embd,
            output_norm,
            output_norm_b,
            output,
            layers,
        })
    }
}

/// A weight the graph builder needs: the tensor, or an error naming it if the model has none
/// (the loader checks each architecture's weights, so this only fails on a loader bug).
pub fn need(t: Option<Tensor>, name: &'static str) -> Result<Tensor> {
    t.ok_or_else(|| LlamaError::MissingTensor(format!("blk.*.{name} (needed by this graph)")))
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
            out_ids,
        })
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
    [k, v]: [Tensor; 2],
) -> Result<Tensor> {
    let AttnDims {
        head_dim: hd,
        n_head: nh,
        n_head_kv: nhkv,
    } = dims;
    let (n, n_kv) = (shape.n_tokens, shape.n_kv);
    let (e_kv, kv_ts) = (hd * nhkv, kv.dtype.type_size());
    let k_cache = ctx.set_rows(kv.k[il], k, inp.k_rows)?; // [e_kv, size]
    let v_cache = ctx.set_rows(kv.v[il], v, inp.k_rows)?; // [e_kv, size]
    let kk = ctx.view_3d(k_cache, hd, n_kv, nhkv, e_kv * kv_ts, hd * kv_ts, 0)?; // [hd, n_kv, nhkv]
    let vv = ctx.view_3d(v_cache, hd, n_kv, nhkv, e_kv * kv_ts, hd * kv_ts, 0)?; // [hd, n_kv, nhkv]
    let qq = ctx.permute(q, [0, 2, 1, 3])?; // [hd, n, nh]
    let kq_scale = 1.0 / (hd as f32).sqrt();
    let mask = Some(inp.mask);
    let merged = if kv.dtype == DType::F16 {
        ctx.flash_attn_ext_split(qq, kk, vv, mask, kq_scale, shape.attn_kv_splits)?
    // [hd, nh, n]
    } else {
        let kq = ctx.mul_mat(kk, qq)?; // [n_kv, n, nh]
        let kq = ctx.soft_max_ext(kq, mask, kq_scale)?;
        let vt = ctx.transpose(vv)?;
        let vt = ctx.cont(vt)?; // [n_kv, hd, nhkv]
        let kqv = ctx.mul_mat(vt, kq)?; // [hd, n, nh]
        let merged = ctx.permute(kqv, [0, 2, 1, 3])?; // [hd, nh, n]
        ctx.cont(merged)?
    };
    Ok(ctx.reshape_2d(merged, hd * nh, n)?)
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
