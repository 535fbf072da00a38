//! LFM2 (`lfm2`, LiquidAI; llama.cpp's `llama_model_lfm2`): a hybrid of short gated
//! convolutions and attention. A layer whose `attention.head_count_kv` is 0 is a
//! convolution layer, the others attend (per-head Q/K RMSNorm, NEOX rotary); every layer has
//! the SwiGLU feed-forward:
//!
//! ```text
//! x = token_embd[tokens]
//! for each layer:
//!     h = rms_norm(x) · attn_norm
//!     conv layer:  b | c | u = in_proj · h                  // 3 × [n_embd, n_tokens]
//!                  s = [state | (b ⊙ u)ᵀ]                   // the last l_cache − 1 inputs first
//!                  m = out_proj · (c ⊙ ssm_conv(s, conv))   // state ← last l_cache − 1 columns
//!     attention:   m = attention(h) as Qwen3 (Q/K norms, NEOX rotary)
//!     x = x + m
//!     x = x + swiglu(rms_norm(x) · ffn_norm)
//! logits = output · (rms_norm(x) · token_embd_norm)
//! ```
//!
//! A convolution layer keeps `(l_cache − 1) · n_embd` values per sequence in the
//! recurrent-state cache ([`crate::recurrent_cache`]); only the attention layers have keys
//! and values.

use ggrs_core::gguf::GgufFile;
use ggrs_core::{Context, RopeMode, Tensor};

use super::decoder::{attention, blk, AttnWeights, FeedForward, QkvBias, Rotary, SwiGlu};
use crate::architecture::{ArchModel, Architecture, StepTensors};
use crate::error::{LlamaError, Result};
use crate::hparams::{get_usize, HParams, RecurrentLayer};
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::recurrent_cache::{conv_input, layer_state, RecurrentCache};
use crate::step::{read_conv_state, write_conv_state, StepInputs, StepShape};

/// The `lfm2` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lfm2;

/// A convolution layer's mixer weights.
#[derive(Debug, Clone)]
pub struct ShortConv {
    /// RMSNorm weight before the mixer, `[n_embd]`.
    pub norm: WeightId,
    /// `[n_embd, 3·n_embd]`: the gate `b`, the output gate `c` and the input `u`.
    pub in_proj: WeightId,
    /// Depthwise kernels, `[l_cache, n_embd]` f32.
    pub conv: WeightId,
    /// `[n_embd, n_embd]`.
    pub out_proj: WeightId,
}

/// A layer's token mixer.
#[derive(Debug, Clone)]
pub enum Lfm2Mixer {
    /// A short gated convolution (a recurrent layer).
    Conv(ShortConv),
    /// Attention with per-head Q/K norms.
    Attention(AttnWeights),
}

/// One LFM2 layer.
#[derive(Debug, Clone)]
pub struct Lfm2Layer {
    /// The token mixer.
    pub mixer: Lfm2Mixer,
    /// RMSNorm weight before the feed-forward, `[n_embd]`.
    pub ffn_norm: WeightId,
    /// The SwiGLU feed-forward.
    pub ffn: SwiGlu,
}

/// A loaded LFM2 model.
#[derive(Debug, Clone)]
pub struct Lfm2Model {
    /// Token embeddings, `[n_embd, n_vocab]`.
    pub tok_embd: WeightId,
    /// Final RMSNorm weight (`token_embd_norm`), `[n_embd]`.
    pub output_norm: WeightId,
    /// Output projection (the embeddings when tied).
    pub output: WeightId,
    /// The layers.
    pub layers: Vec<Lfm2Layer>,
    /// Convolution width (`shortconv.l_cache`): each output sees this many inputs.
    pub l_cache: usize,
}

/// `shortconv.l_cache`, required, at least 2.
fn l_cache(f: &GgufFile, hp: &HParams) -> Result<usize> {
    let key = format!("{}.shortconv.l_cache", hp.arch);
    match get_usize(f, &key)? {
        Some(n) if n >= 2 => Ok(n),
        Some(n) => Err(LlamaError::BadKey {
            key,
            detail: format!("{n}: a causal convolution needs a width of at least 2"),
        }),
        None => Err(LlamaError::MissingKey(key)),
    }
}

impl Architecture for Lfm2 {
    fn name(&self) -> &'static str {
        "lfm2"
    }

    fn hparams(&self, file: &GgufFile) -> Result<HParams> {
        let mut hp = HParams::from_gguf_hybrid(file)?;
        let d_conv = l_cache(file, &hp)? - 1;
        for il in 0..hp.n_layer {
            if hp.kv_layers[il].width() == 0 {
                hp.recurrent[il] = Some(RecurrentLayer {
                    conv: d_conv * hp.n_embd,
                    ssm: 0,
                });
            }
        }
        Ok(hp)
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let (e, v) = (hp.n_embd, hp.n_vocab);
        let l_cache = l_cache(l.file(), hp)?;
        let tok_embd = l.rows("token_embd.weight", &[e, v])?;
        let output_norm = l.f32("token_embd_norm.weight", &[e])?;
        let output = match l.opt_matrix("output.weight", &[e, v])? {
            Some(o) => o,
            None => l.also_matrix(tok_embd)?,
        };
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            let n = |s: &str| blk(i, s);
            let mixer = match hp.recurrent[i].is_some() {
                true => Lfm2Mixer::Conv(ShortConv {
                    norm: l.f32(&n("attn_norm.weight"), &[e])?,
                    in_proj: l.matrix(&n("shortconv.in_proj.weight"), &[e, 3 * e])?,
                    conv: l.f32(&n("shortconv.conv.weight"), &[l_cache, e])?,
                    out_proj: l.matrix(&n("shortconv.out_proj.weight"), &[e, e])?,
                }),
                false => Lfm2Mixer::Attention(AttnWeights::load(hp, l, i, QkvBias::Absent, true)?),
            };
            layers.push(Lfm2Layer {
                mixer,
                ffn_norm: l.f32(&n("ffn_norm.weight"), &[e])?,
                ffn: SwiGlu::load(hp, l, i)?,
            });
        }
        Ok(Box::new(Lfm2Model {
            tok_embd,
            output_norm,
            output,
            layers,
            l_cache,
        }))
    }
}

impl Lfm2Model {
    /// Convolution layer `il`'s mixer on the normed input `h` (`[n_embd, n_tokens]`),
    /// reading and writing its state; `[n_embd, n_tokens]` out.
    #[allow(clippy::too_many_arguments)]
    fn short_conv(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        rs: &RecurrentCache,
        inp: &mut StepInputs,
        shape: StepShape,
        il: usize,
        sc: &ShortConv,
        h: Tensor,
    ) -> Result<Tensor> {
        let (r, keeps) = layer_state(Some(rs), il)?;
        let (e, n, n_s) = (hp.n_embd, shape.n_tokens, shape.n_seqs);
        let n_t = n / n_s;
        let bcu = ctx.mul_mat(w[sc.in_proj], h)?; // [3e, n]
        let row = ctx.meta(bcu)?.nb[1];
        let b = ctx.view_2d(bcu, e, n, row, 0)?;
        let c = ctx.view_2d(bcu, e, n, row, 4 * e)?;
        let u = ctx.view_2d(bcu, e, n, row, 8 * e)?;
        let bu = ctx.mul(b, u)?; // [e, n]
        let bu = ctx.reshape_3d(bu, e, n_t, n_s)?;
        let state = read_conv_state(ctx, rs, inp, r, keeps.conv)?; // [conv, n_s]
        let (sx, new_state) = conv_input(ctx, state, bu, self.l_cache)?;
        write_conv_state(ctx, rs, inp, r, new_state)?;
        let conv = ctx.ssm_conv(sx, w[sc.conv])?; // [e, n_t, n_s]
        let conv = ctx.reshape_2d(conv, e, n)?;
        let y = ctx.mul(c, conv)?;
        Ok(ctx.mul_mat(w[sc.out_proj], y)?)
    }
}

impl Lfm2Model {
    /// The step graph: the logits, or with `hidden` the final hidden states (after the
    /// output norm, every token) as [`ArchModel::build_embeddings`] gives them.
    fn forward(
        &self,
        ctx: &mut Context,
        (hp, w, kv, shape): (&HParams, &ImportedWeights, &KvCache, StepShape),
        hidden: bool,
    ) -> Result<StepTensors> {
        let mut inp = StepInputs::new(ctx, shape, 1, false)?;
        let rs = match kv.recurrent.is_some() {
            true => Some(inp.add_recurrent(ctx, shape, kv)?),
            false => None,
        };
        let rope = Rotary::new(hp, RopeMode::Neox, None);
        let mut x = ctx.get_rows(w[self.tok_embd], inp.tokens)?; // [n_embd, n]
        for (il, l) in self.layers.iter().enumerate() {
            let mut residual = x;
            let mut cur = match &l.mixer {
                Lfm2Mixer::Conv(sc) => {
                    let rs = rs.ok_or_else(|| {
                        LlamaError::InvalidArgument("the cache keeps no recurrent states".into())
                    })?;
                    let h = ctx.rms_norm_mul(x, w[sc.norm], hp.rms_eps)?;
                    self.short_conv(ctx, hp, w, rs, &mut inp, shape, il, sc, h)?
                }
                Lfm2Mixer::Attention(a) => attention(ctx, hp, w, kv, &inp, shape, il, a, rope, x)?,
            };
            if il + 1 == self.layers.len() {
                if let Some(ids) = inp.out_ids {
                    cur = ctx.get_rows(cur, ids)?;
                    residual = ctx.get_rows(residual, ids)?;
                }
            }
            let ffn_inp = ctx.add(residual, cur)?;
            let h = ctx.rms_norm_mul(ffn_inp, w[l.ffn_norm], hp.rms_eps)?;
            let out = l.ffn.build(ctx, hp, w, h)?;
            x = ctx.add(ffn_inp, out)?;
        }
        let h = ctx.rms_norm_mul(x, w[self.output_norm], hp.rms_eps)?;
        let logits = match hidden {
            true => h,                                // [n_embd, n_tokens]
            false => ctx.mul_mat(w[self.output], h)?, // [n_vocab, n_outputs]
        };
        ctx.set_name(logits, if hidden { "embd" } else { "logits" })?;
        ctx.set_output(logits)?;
        Ok(StepTensors {
            inputs: inp,
            logits,
        })
    }
}

arch_model_with_forward!(Lfm2Model);
