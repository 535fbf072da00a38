//! The pieces the LLaMA-like decoders share (`llama`, `qwen2`, `qwen3`, `qwen3moe`): the
//! embedding and output head ([`Head`]), the pre-norm attention block ([`AttnWeights`],
//! optionally with per-head Q/K RMSNorm), the SwiGLU feed-forward ([`SwiGlu`]), and the step
//! graph around them ([`Decoder`]), generic over the feed-forward block ([`FeedForward`]):
//!
//! ```text
//! x = token_embd[tokens]                                   // [n_embd, n_tokens]
//! for each layer:
//!     h = rms_norm(x) · attn_norm
//!     q, k, v = Wq·h (+bq), Wk·h (+bk), Wv·h (+bv)          // heads × head_dim; or views
//!                                                           // of one fused Wqkv·h (+bqkv)
//!     q, k = rms_norm(q) · q_norm, rms_norm(k) · k_norm     // per head, when present
//!     q, k = rope(q, pos), rope(k, pos)
//!     a = attention over the cache (see step::cached_attention)
//!     x = x + Wo·a (+bo)
//!     x = x + ffn(rms_norm(x) · ffn_norm)                    // FeedForward::build
//! logits = output · (rms_norm(x) · output_norm)             // [n_vocab, n_outputs]
//! ```

use std::fmt::Debug;

use ggrs_core::{Context, DType, RopeMode, Tensor};

use crate::architecture::{ArchModel, StepTensors};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::kv_cache::KvCache;
use crate::kv_shift::{KeyRotary, KeyShift};
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::step::{
    add_opt, cached_attention_sinks, AttnDims, AttnScores, AttnTemperature, LayerView, StepInputs,
    StepShape,
};

/// The name of tensor `s` of block `i` (`blk.{i}.{s}`).
pub fn blk(i: usize, s: &str) -> String {
    format!("blk.{i}.{s}")
}

/// Token embeddings and output head.
#[derive(Debug, Clone)]
pub struct Head {
    /// Token embeddings, `[n_embd, n_vocab]`.
    pub tok_embd: WeightId,
    /// Final RMSNorm weight, `[n_embd]`.
    pub output_norm: WeightId,
    /// Output projection, `[n_embd, n_vocab]` (the embeddings when tied).
    pub output: WeightId,
    /// Per-pair rotary frequency factors, `[n_rot / 2]` (`rope_freqs.weight`: Llama 3.1's
    /// rotary scaling), when the file has them.
    pub rope_freqs: Option<WeightId>,
}

impl Head {
    /// Reads `token_embd`, `output_norm` and `output` (the embeddings when the file has no
    /// `output.weight`), and `rope_freqs` where the file has it.
    pub fn load(hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Head> {
        let (tok_embd, output_norm, output) = l.embeddings_and_output()?;
        let rope_freqs = l.opt_f32("rope_freqs.weight", &[hp.n_rot / 2])?;
        Ok(Head {
            tok_embd,
            output_norm,
            output,
            rope_freqs,
        })
    }
}

/// Which Q/K/V biases an architecture reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkvBias {
    /// Read where the file has them (`llama`).
    Optional,
    /// Required (`qwen2`).
    Required,
    /// Not read (`qwen3`: the architecture has none).
    Absent,
}

/// The attention projections of a block: fused or separate.
#[derive(Debug, Clone)]
pub enum QkvWeights {
    /// `attn_qkv.weight` `[n_embd, q + 2·kv]` and its optional bias `[q + 2·kv]`.
    Fused {
        /// The fused matrix.
        w: WeightId,
        /// Its bias.
        b: Option<WeightId>,
    },
    /// `attn_q/k/v.weight` `[n_embd, q]`, `[n_embd, kv]`, `[n_embd, kv]` with optional
    /// biases.
    Split {
        /// Query, key and value projections.
        w: [WeightId; 3],
        /// Their biases.
        b: [Option<WeightId>; 3],
    },
}

impl QkvWeights {
    /// Reads block `i`'s Q/K/V projections (`[e, q, kv]`: `n_embd`, query and key/value
    /// widths): fused when `attn_qkv` exists, separate otherwise, as llama.cpp loads them;
    /// biases where the file has them.
    pub fn load(l: &mut WeightLoader<'_>, i: usize, [e, q, kv]: [usize; 3]) -> Result<QkvWeights> {
        let n = |s: &str| format!("blk.{i}.{s}");
        Ok(
            match l.opt_matrix(&n("attn_qkv.weight"), &[e, q + 2 * kv])? {
                Some(w) => QkvWeights::Fused {
                    w,
                    b: l.opt_f32(&n("attn_qkv.bias"), &[q + 2 * kv])?,
                },
                None => QkvWeights::Split {
                    w: [
                        l.matrix(&n("attn_q.weight"), &[e, q])?,
                        l.matrix(&n("attn_k.weight"), &[e, kv])?,
                        l.matrix(&n("attn_v.weight"), &[e, kv])?,
                    ],
                    b: [
                        l.opt_f32(&n("attn_q.bias"), &[q])?,
                        l.opt_f32(&n("attn_k.bias"), &[kv])?,
                        l.opt_f32(&n("attn_v.bias"), &[kv])?,
                    ],
                },
            },
        )
    }
}

/// Q, K and V of one layer: q `[hd, nh, n]`, k `[hd, nhkv, n]`, v `[nhkv·hd, n]` (any of
/// them may be a strided view).
pub(crate) struct QkvViews {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
}

/// The attention projections of `h` (`[n_embd, n]`): one fused product split by views, or
/// (files converted without fusing) three products.
pub(crate) fn project_qkv(
    ctx: &mut Context,
    hp: &HParams,
    w: &ImportedWeights,
    qkv: &QkvWeights,
    h: Tensor,
    n: usize,
) -> Result<QkvViews> {
    let (hd, nh, nhkv) = (hp.head_dim, hp.n_head, hp.n_head_kv);
    let (e_q, e_kv) = (hd * nh, hp.n_embd_kv());
    let f = DType::F32.type_size();
    match *qkv {
        QkvWeights::Fused { w: wqkv, b } => {
            let cur = ctx.mul_mat(w[wqkv], h)?; // [e_q + 2·e_kv, n]
            let cur = add_opt(ctx, cur, w.opt(b))?;
            let row = (e_q + 2 * e_kv) * f; // bytes from one token's row to the next
            let q = ctx.view_3d(cur, hd, nh, n, hd * f, row, 0)?; // [hd, nh, n]
            let k = ctx.view_3d(cur, hd, nhkv, n, hd * f, row, e_q * f)?; // [hd, nhkv, n]
            let v = ctx.view_2d(cur, e_kv, n, row, (e_q + e_kv) * f)?; // [e_kv, n]
            Ok(QkvViews { q, k, v })
        }
        QkvWeights::Split {
            w: [wq, wk, wv],
            b: [bq, bk, bv],
        } => {
            let q = ctx.mul_mat(w[wq], h)?;
            let q = add_opt(ctx, q, w.opt(bq))?;
            let k = ctx.mul_mat(w[wk], h)?;
            let k = add_opt(ctx, k, w.opt(bk))?;
            let v = ctx.mul_mat(w[wv], h)?;
            let v = add_opt(ctx, v, w.opt(bv))?;
            Ok(QkvViews {
                q: ctx.reshape_3d(q, hd, nh, n)?,
                k: ctx.reshape_3d(k, hd, nhkv, n)?,
                v,
            })
        }
    }
}

/// The query, key, value and output projections of one attention block and their biases
/// (shapes with `e` = `n_embd`, `q` = `n_head·head_dim`, `kv` = `n_head_kv·head_dim`).
#[derive(Debug, Clone)]
pub struct QkvoWeights {
    /// Q, K and V: separate `attn_q/k/v` (`[e, q]`, `[e, kv]`, `[e, kv]`), or one fused
    /// `attn_qkv` (`[e, q + 2·kv]`), which llama.cpp accepts for every architecture of
    /// this decoder (`create_tensor_qkv`).
    pub qkv: QkvWeights,
    /// Output projection, `[q, e]`.
    pub wo: WeightId,
    /// Output bias, `[e]`.
    pub bo: Option<WeightId>,
}

impl QkvoWeights {
    /// Reads block `i`'s `attn_q`, `attn_k`, `attn_v` (or `attn_qkv`) and `attn_output`
    /// (`[e, q, kv]` as above), biases as `bias` says (a fused matrix takes only a fused
    /// bias; the output bias is taken where the file has it unless `Absent`); `between`
    /// reads what an architecture keeps between the Q/K/V matrices and the output matrix in
    /// its weight table (the decoders' `attn_norm`).
    pub fn load<T>(
        l: &mut WeightLoader<'_>,
        i: usize,
        [e, q, kv]: [usize; 3],
        bias: QkvBias,
        between: impl FnOnce(&mut WeightLoader<'_>) -> Result<T>,
    ) -> Result<(QkvoWeights, T)> {
        let n = |s: &str| blk(i, s);
        let b = |l: &mut WeightLoader<'_>, s: &str, len: usize| match bias {
            QkvBias::Required => l.f32(&n(s), &[len]).map(Some),
            QkvBias::Optional => l.opt_f32(&n(s), &[len]),
            QkvBias::Absent => Ok(None),
        };
        // Read in the order of the original loader (the weight table's order).
        let mut qkv = match l.opt_matrix(&n("attn_qkv.weight"), &[e, q + 2 * kv])? {
            Some(w) => QkvWeights::Fused { w, b: None },
            None => QkvWeights::Split {
                w: [
                    l.matrix(&n("attn_q.weight"), &[e, q])?,
                    l.matrix(&n("attn_k.weight"), &[e, kv])?,
                    l.matrix(&n("attn_v.weight"), &[e, kv])?,
                ],
                b: [None; 3],
            },
        };
        let t = between(l)?;
        let wo = l.matrix(&n("attn_output.weight"), &[q, e])?;
        match &mut qkv {
            QkvWeights::Fused { b: fused_b, .. } => {
                // llama.cpp also takes separate Q/K/V biases beside a fused matrix (legacy
                // files); this graph adds one bias to the fused product.
                if let Some(s) = ["attn_q.bias", "attn_k.bias", "attn_v.bias"]
                    .into_iter()
                    .find(|s| l.has(&n(s)))
                {
                    return Err(LlamaError::UnsupportedTensor {
                        name: n(s),
                        detail: "separate Q/K/V biases beside a fused attn_qkv matrix; \
                                 fuse them into attn_qkv.bias"
                            .into(),
                    });
                }
                *fused_b = match bias {
                    QkvBias::Absent => None,
                    _ => l.opt_f32(&n("attn_qkv.bias"), &[q + 2 * kv])?,
                };
            }
            QkvWeights::Split { b: split_b, .. } => {
                *split_b = [
                    b(l, "attn_q.bias", q)?,
                    b(l, "attn_k.bias", kv)?,
                    b(l, "attn_v.bias", kv)?,
                ];
            }
        }
        let bo = match bias {
            QkvBias::Absent => None,
            _ => l.opt_f32(&n("attn_output.bias"), &[e])?,
        };
        Ok((QkvoWeights { qkv, wo, bo }, t))
    }
}

/// The attention weights of one block: the projections ([`QkvoWeights`], whose fields
/// `attn.qkv`… reach through `Deref`), the norm before them and the optional per-head Q/K
/// norms (`d` = `head_dim`).
#[derive(Debug, Clone)]
pub struct AttnWeights {
    /// RMSNorm weight before attention, `[e]`.
    pub attn_norm: WeightId,
    /// The projections and their biases.
    pub proj: QkvoWeights,
    /// Per-head RMSNorm weight of the queries, `[d]`, shared by all heads (Qwen3).
    pub q_norm: Option<WeightId>,
    /// Per-head RMSNorm weight of the keys, `[d]`, shared by all heads (Qwen3).
    pub k_norm: Option<WeightId>,
}

impl std::ops::Deref for AttnWeights {
    type Target = QkvoWeights;

    fn deref(&self) -> &QkvoWeights {
        &self.proj
    }
}

impl AttnWeights {
    /// Reads block `i`'s attention weights: biases as `bias` says, and the per-head Q/K
    /// norms (`attn_q_norm`, `attn_k_norm`, required) when `qk_norm`.
    pub fn load(
        hp: &HParams,
        l: &mut WeightLoader<'_>,
        i: usize,
        bias: QkvBias,
        qk_norm: bool,
    ) -> Result<AttnWeights> {
        let e = hp.n_embd;
        let (q, kv, d) = (hp.n_head * hp.head_dim, hp.n_embd_kv(), hp.head_dim);
        let n = |s: &str| blk(i, s);
        let norm = |l: &mut WeightLoader<'_>, s: &str| match qk_norm {
            true => l.f32(&n(s), &[d]).map(Some),
            false => Ok(None),
        };
        let (proj, attn_norm) = QkvoWeights::load(l, i, [e, q, kv], bias, |l| {
            l.f32(&n("attn_norm.weight"), &[e])
        })?;
        Ok(AttnWeights {
            attn_norm,
            proj,
            q_norm: norm(l, "attn_q_norm.weight")?,
            k_norm: norm(l, "attn_k_norm.weight")?,
        })
    }
}

/// A block's feed-forward part: `ffn(h)` of the normed input `h` (`[n_embd, n_tokens]`),
/// `[n_embd, n_tokens]` out.
pub trait FeedForward: Debug + Send + Sync + 'static {
    /// Builds the block's feed-forward graph on `h`.
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        h: Tensor,
    ) -> Result<Tensor>;
}

/// The SwiGLU feed-forward: `W_down·(silu(W_gate·h) · (W_up·h))` (`f` = `n_ff`).
#[derive(Debug, Clone)]
pub struct SwiGlu {
    /// Gate projection, `[e, f]`.
    pub gate: WeightId,
    /// Up projection, `[e, f]`.
    pub up: WeightId,
    /// Down projection, `[f, e]`.
    pub down: WeightId,
}

impl SwiGlu {
    /// Reads block `i`'s `ffn_gate`, `ffn_up` and `ffn_down`.
    pub fn load(hp: &HParams, l: &mut WeightLoader<'_>, i: usize) -> Result<SwiGlu> {
        let (e, f) = (hp.n_embd, hp.n_ff_at(i));
        Ok(SwiGlu {
            gate: l.matrix(&blk(i, "ffn_gate.weight"), &[e, f])?,
            up: l.matrix(&blk(i, "ffn_up.weight"), &[e, f])?,
            down: l.matrix(&blk(i, "ffn_down.weight"), &[f, e])?,
        })
    }
}

impl FeedForward for SwiGlu {
    fn build(
        &self,
        ctx: &mut Context,
        _hp: &HParams,
        w: &ImportedWeights,
        h: Tensor,
    ) -> Result<Tensor> {
        let gate = ctx.mul_mat(w[self.gate], h)?; // [n_ff, n]
        let up = ctx.mul_mat(w[self.up], h)?;
        let act = ctx.swiglu_split(gate, up)?;
        Ok(ctx.mul_mat(w[self.down], act)?) // [n_embd, n]
    }
}

/// One block: attention, the RMSNorm weight before the feed-forward (`[n_embd]`), and the
/// feed-forward.
#[derive(Debug, Clone)]
pub struct Block<F> {
    /// The attention weights.
    pub attn: AttnWeights,
    /// RMSNorm weight before the feed-forward block, `[n_embd]`.
    pub ffn_norm: WeightId,
    /// The feed-forward block.
    pub ffn: F,
}

/// What the LLaMA-layout families built on [`Decoder`] change in its graph (all off by
/// default, which is the graph of the [module docs](self)).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecoderOptions {
    /// Layers `il` with `(il + 1) % period == 0` skip the rotary (SmolLM3's NoPE layers,
    /// period 4).
    pub nope_period: Option<usize>,
    /// Factor of the input embeddings (Granite's `embedding_scale`).
    pub embd_scale: Option<f32>,
    /// Factor of the key·query products instead of 1/√head_dim (Granite's
    /// `attention.scale`).
    pub kq_scale: Option<f32>,
    /// Factor of the attention and feed-forward outputs before each residual add (Granite's
    /// `residual_scale`).
    pub residual_scale: Option<f32>,
    /// The logits are divided by this (Granite's `logit_scale`).
    pub logit_scale: Option<f32>,
    /// Each token's queries are multiplied by this temperature's factor of its position
    /// after the rotary (Mistral 3's `attention.temperature_scale`).
    pub attn_temp: Option<AttnTemperature>,
}

/// A loaded LLaMA-like decoder: head, blocks and rotary mode. Its [`ArchModel::build`] is
/// the graph of the [module docs](self).
#[derive(Debug, Clone)]
pub struct Decoder<F> {
    /// How rotary pairs dimensions (normal for `llama`, NEOX for the Qwen family).
    pub rope_mode: RopeMode,
    /// Embeddings and output head.
    pub head: Head,
    /// Transformer blocks.
    pub layers: Vec<Block<F>>,
    /// The family's changes to the graph.
    pub options: DecoderOptions,
}

impl<F: FeedForward> Decoder<F> {
    /// Reads the head and `hp.n_layer` blocks: each block's attention and feed-forward
    /// through `attn` and `ffn` (given the loader and the block index), its `ffn_norm` here.
    pub fn load(
        hp: &HParams,
        l: &mut WeightLoader<'_>,
        rope_mode: RopeMode,
        attn: impl Fn(&mut WeightLoader<'_>, usize) -> Result<AttnWeights>,
        ffn: impl Fn(&mut WeightLoader<'_>, usize) -> Result<F>,
    ) -> Result<Decoder<F>> {
        let head = Head::load(hp, l)?;
        // `HParams::from_gguf` bounded `n_layer` by the file's tensor count.
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            layers.push(Block {
                attn: attn(l, i)?,
                ffn_norm: l.f32(&blk(i, "ffn_norm.weight"), &[hp.n_embd])?,
                ffn: ffn(l, i)?,
            });
        }
        Ok(Decoder {
            rope_mode,
            head,
            layers,
            options: DecoderOptions::default(),
        })
    }
}

impl Decoder<SwiGlu> {
    /// The LLaMA layout: [`Decoder::load`] with biases as `bias` says, no Q/K norms, and the
    /// SwiGLU feed-forward.
    pub fn load_llama(
        hp: &HParams,
        l: &mut WeightLoader<'_>,
        rope_mode: RopeMode,
        bias: QkvBias,
    ) -> Result<Decoder<SwiGlu>> {
        Decoder::load(
            hp,
            l,
            rope_mode,
            |l, i| AttnWeights::load(hp, l, i, bias, false),
            |l, i| SwiGlu::load(hp, l, i),
        )
    }
}

impl<F: FeedForward> Decoder<F> {
    /// The step graph: logits `[n_vocab, n_outputs]` when `head`, else the normed hidden
    /// state of every token, `[n_embd, n_tokens]` (embeddings).
    fn forward(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
        head: bool,
    ) -> Result<StepTensors> {
        let o = self.options;
        let mut inp = StepInputs::new(ctx, shape, 1, false)?;
        if let Some(temp) = o.attn_temp {
            inp.add_attn_temperature(ctx, shape, temp)?;
        }
        let rope = Rotary::new(hp, self.rope_mode, w.opt(self.head.rope_freqs));
        let kq_scale = o.kq_scale.unwrap_or(1.0 / (hp.head_dim as f32).sqrt());
        let scale_opt = |ctx: &mut Context, t: Tensor, s: Option<f32>| match s {
            Some(s) => ctx.scale(t, s),
            None => Ok(t),
        };
        let x = ctx.get_rows(w[self.head.tok_embd], inp.tokens)?; // [n_embd, n]
        let mut x = scale_opt(ctx, x, o.embd_scale)?;
        for (il, l) in self.layers.iter().enumerate() {
            let last = il + 1 == self.layers.len();
            let nope = o.nope_period.is_some_and(|p| (il + 1) % p == 0);
            let rope_l = (!nope).then_some(rope);
            let mut inp_sa = x;
            let mut cur = attention_scaled(
                ctx, hp, w, kv, &inp, shape, il, &l.attn, rope_l, x, kq_scale,
            )?;
            if last && head {
                if let Some(ids) = inp.out_ids {
                    cur = ctx.get_rows(cur, ids)?;
                    inp_sa = ctx.get_rows(inp_sa, ids)?;
                }
            }
            let cur = scale_opt(ctx, cur, o.residual_scale)?;
            let ffn_inp = ctx.add(cur, inp_sa)?;
            let h = ctx.rms_norm_mul(ffn_inp, w[l.ffn_norm], hp.rms_eps)?;
            let out = l.ffn.build(ctx, hp, w, h)?;
            let out = scale_opt(ctx, out, o.residual_scale)?;
            x = ctx.add(out, ffn_inp)?;
        }
        let h = ctx.rms_norm_mul(x, w[self.head.output_norm], hp.rms_eps)?;
        let out = if head {
            let logits = ctx.mul_mat(w[self.head.output], h)?; // [n_vocab, n_outputs]
            let logits = scale_opt(ctx, logits, o.logit_scale.map(|s| 1.0 / s))?;
            ctx.set_name(logits, "logits")?;
            logits
        } else {
            ctx.set_name(h, "embd")?;
            h
        };
        ctx.set_output(out)?;
        Ok(StepTensors {
            inputs: inp,
            logits: out,
        })
    }
}

impl<F: FeedForward> ArchModel for Decoder<F> {
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<StepTensors> {
        self.forward(ctx, hp, w, kv, shape, true)
    }

    fn build_embeddings(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<Option<StepTensors>> {
        self.forward(ctx, hp, w, kv, shape, false).map(Some)
    }

    fn key_shift(
        &self,
        hp: &HParams,
        w: &ImportedWeights,
        _kv: &KvCache,
    ) -> std::result::Result<KeyShift, String> {
        let rope = Rotary::new(hp, self.rope_mode, w.opt(self.head.rope_freqs));
        let nope = self.options.nope_period;
        Ok(KeyShift {
            layers: (0..self.layers.len())
                .map(|il| match nope.is_some_and(|p| (il + 1) % p == 0) {
                    true => None,
                    false => Some(rope),
                })
                .collect(),
            head_dim: hp.head_dim,
            n_head_kv: hp.n_head_kv,
        })
    }
}

/// The rotary embedding of a step: its parameters, YaRN's blend and magnitude factor when
/// the file asks for them, and per-pair frequency factors (Llama 3.1's `rope_freqs`,
/// LongRoPE's long or short factors): `pos·base^(−2i/n_rot) / freqs[i]`. The same type as
/// the context shift re-applies to cached keys ([`KeyRotary`]).
pub type Rotary = KeyRotary;

impl Rotary {
    /// The model's rotary over `hp.n_rot` dimensions at its base and scale, in `mode`,
    /// with the factors `freqs`.
    pub fn new(hp: &HParams, mode: RopeMode, freqs: Option<Tensor>) -> Rotary {
        let (params, yarn) = hp.rotary_with(mode, hp.n_rot, hp.rope_freq_base, hp.rope_freq_scale);
        Rotary {
            params,
            yarn,
            freqs,
        }
    }

    /// A rotary over `n_rot` dimensions at base `freq_base` and position scale
    /// `freq_scale` (a sliding-window layer's own), NEOX pairing, with the file's YaRN blend
    /// and the factors `freqs`.
    pub fn neox_with(
        hp: &HParams,
        n_rot: usize,
        (freq_base, freq_scale): (f32, f32),
        freqs: Option<Tensor>,
    ) -> Rotary {
        let (params, yarn) = hp.rotary_with(RopeMode::Neox, n_rot, freq_base, freq_scale);
        Rotary {
            params,
            yarn,
            freqs,
        }
    }
}

/// LongRoPE's two sets of per-pair frequency factors (`rope_factors_long.weight`,
/// `rope_factors_short.weight`, `[n_rot / 2]` f32 each; Phi-3.5, Phi-4-mini).
#[derive(Debug, Clone, Copy)]
pub struct LongRopeFactors {
    /// The factors of a context longer than the original one.
    pub long: Option<WeightId>,
    /// The factors of a context within it.
    pub short: Option<WeightId>,
}

impl LongRopeFactors {
    /// Reads the factor tensors the file has.
    pub fn load(hp: &HParams, l: &mut WeightLoader<'_>) -> Result<LongRopeFactors> {
        Ok(LongRopeFactors {
            long: l.opt_f32("rope_factors_long.weight", &[hp.n_rot / 2])?,
            short: l.opt_f32("rope_factors_short.weight", &[hp.n_rot / 2])?,
        })
    }

    /// The factors for a session whose cache is `kv`, chosen as llama.cpp chooses them: the
    /// long ones when the context of one sequence, in cells rounded up to a multiple of 256
    /// (llama.cpp's padding), exceeds the original context `hp.n_ctx_orig`, else the short
    /// ones. A property of the session, not of how far a sequence has got.
    pub fn pick(&self, hp: &HParams, kv: &KvCache, w: &ImportedWeights) -> Option<Tensor> {
        let n_ctx_seq = kv.stream_size().div_ceil(256) * 256;
        w.opt(match n_ctx_seq > hp.n_ctx_orig {
            true => self.long,
            false => self.short,
        })
    }
}

/// Block `il`'s attention on the residual stream `x` (`[n_embd, n_tokens]`): norm, Q/K/V
/// (biases, per-head Q/K norms where `a` has them), rotary, the cached attention, and the
/// output projection. Returns `Wo·attn (+bo)`, `[n_embd, n_tokens]` (the residual is not
/// added).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    ctx: &mut Context,
    hp: &HParams,
    w: &ImportedWeights,
    kv: &KvCache,
    inp: &StepInputs,
    shape: StepShape,
    il: usize,
    a: &AttnWeights,
    rope: Rotary,
    x: Tensor,
) -> Result<Tensor> {
    let kq_scale = 1.0 / (hp.head_dim as f32).sqrt();
    attention_scaled(ctx, hp, w, kv, inp, shape, il, a, Some(rope), x, kq_scale)
}

/// [`attention`] with the key·query products scaled by `kq_scale`, and no rotary where
/// `rope` is `None` (a NoPE layer).
#[allow(clippy::too_many_arguments)]
pub fn attention_scaled(
    ctx: &mut Context,
    hp: &HParams,
    w: &ImportedWeights,
    kv: &KvCache,
    inp: &StepInputs,
    shape: StepShape,
    il: usize,
    a: &AttnWeights,
    rope: Option<Rotary>,
    x: Tensor,
    kq_scale: f32,
) -> Result<Tensor> {
    let how = AttnMasking {
        kq_scale,
        at: inp.global_layer(shape),
        sinks: None,
    };
    attention_masked(ctx, hp, w, kv, inp, shape, il, a, rope, x, how)
}

/// How [`attention_masked`] weighs the keys: the factor of the key·query products, the mask
/// (`StepInputs::mask`, or a sliding-window layer's `StepInputs::mask_swa`) and the
/// per-head sink logits (`[n_head]` f32, gpt-oss), if any.
#[derive(Debug, Clone, Copy)]
pub struct AttnMasking {
    /// Factor of each key·query product.
    pub kq_scale: f32,
    /// Cache rows, mask (`[n_kv, n_tokens]` f32: 0 where a token may attend a cell, −∞
    /// where not) and cells the layer reads ([`StepInputs::global_layer`],
    /// [`StepInputs::window_layer`]).
    pub at: LayerView,
    /// One logit per query head joining the softmax's denominator, or none.
    pub sinks: Option<Tensor>,
}

/// [`attention_scaled`] under the mask and with the sinks `how` gives.
#[allow(clippy::too_many_arguments)]
pub fn attention_masked(
    ctx: &mut Context,
    hp: &HParams,
    w: &ImportedWeights,
    kv: &KvCache,
    inp: &StepInputs,
    shape: StepShape,
    il: usize,
    a: &AttnWeights,
    rope: Option<Rotary>,
    x: Tensor,
    how: AttnMasking,
) -> Result<Tensor> {
    let n = shape.n_tokens;
    let (hd, nh, nhkv) = (hp.head_dim, hp.n_head, hp.n_head_kv);
    let e_kv = hp.n_embd_kv();
    let h = ctx.rms_norm_mul(x, w[a.attn_norm], hp.rms_eps)?; // fused: same bits as rms_norm · w

    // q [hd, nh, n], k [hd, nhkv, n], v [nhkv·hd, n]: views of one product when fused,
    // made contiguous where a norm or the cache's reshape reads them (the rotary reads
    // views as they are).
    let QkvViews { q, k, v } = project_qkv(ctx, hp, w, &a.qkv, h, n)?;
    let fused = matches!(a.qkv, QkvWeights::Fused { .. });
    let cont = |ctx: &mut Context, t: Tensor, needed: bool| match fused && needed {
        true => ctx.cont(t),
        false => Ok(t),
    };
    let mut q = cont(ctx, q, a.q_norm.is_some() || rope.is_none())?;
    if let Some(qn) = w.opt(a.q_norm) {
        q = ctx.rms_norm_mul(q, qn, hp.rms_eps)?; // each head's row of hd values
    }
    let mut q = match rope {
        Some(r) => r.apply(ctx, q, inp.pos)?, // [hd, nh, n]
        None => q,
    };
    if let Some((t, _)) = inp.q_scale {
        q = ctx.mul(q, t)?; // each token's queries by its temperature factor
    }
    let mut k = cont(ctx, k, a.k_norm.is_some() || rope.is_none())?;
    if let Some(kn) = w.opt(a.k_norm) {
        k = ctx.rms_norm_mul(k, kn, hp.rms_eps)?;
    }
    let k = match rope {
        Some(r) => r.apply(ctx, k, inp.pos)?, // [hd, nhkv, n]
        None => k,
    };

    // Write this step's keys and values into the cache, then attend over cells 0..n_kv.
    let k2 = ctx.reshape_2d(k, e_kv, n)?;
    let v2 = v; // [e_kv, n], possibly a strided view, which the cache write reads as it is
    let dims = AttnDims {
        head_dim: hd,
        n_head: nh,
        n_head_kv: nhkv,
    };
    let scores = AttnScores {
        scale: how.kq_scale,
        softcap: None,
    };
    let masks = [how.at.k_rows, how.at.mask];
    let attn = cached_attention_sinks(
        ctx,
        kv,
        il,
        masks,
        how.at.shape,
        dims,
        (q, [k2, v2]),
        scores,
        how.sinks,
    )?;
    let cur = ctx.mul_mat(w[a.wo], attn)?; // [n_embd, n]
    add_opt(ctx, cur, w.opt(a.bo))
}
