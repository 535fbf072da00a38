//! Gemma 2 (`gemma2`, llama.cpp's `build_gemma2_iswa`):
//!
//! ```text
//! x = token_embd[tokens] · √n_embd                         // [n_embd, n_tokens]
//! for each layer l:
//!     h = rms_norm(x) · attn_norm
//!     q, k, v = Wq·h, Wk·h, Wv·h                            // heads × head_dim (key_length)
//!     q, k = rope_neox(q, pos), rope_neox(k, pos)
//!     q = q · attention_scale                               // 1/√head_dim (27B: 1/√(n_embd/n_head))
//!     s = c·tanh((K·q) / c)                                 // c = attn_logit_softcapping
//!     a = softmax(s + mask_l) applied to V                  // mask_l: sliding window on even l
//!     x = x + rms_norm(Wo·a) · post_attention_norm
//!     h = rms_norm(x) · ffn_norm
//!     x = x + rms_norm(W_down·(gelu_tanh(W_gate·h) · W_up·h)) · post_ffw_norm
//! logits = f·tanh(output · (rms_norm(x) · output_norm) / f) // f = final_logit_softcapping
//! ```
//!
//! Layers `l` with `l mod 2 = 0` attend through a sliding window of
//! `attention.sliding_window` positions (a query at position p sees keys at p − w + 1 … p),
//! the others globally, as llama.cpp decides for gemma2 (`set_swa_pattern(2)`). Both masks
//! come from [`SlidingWindowState`], built from each token's own position and sequence.
//! With an f16 cache attention is flash attention with ggml's `logit_softcap`, as llama.cpp
//! runs it on the CPU.

use ggrs_core::gguf::GgufFile;
use ggrs_core::{Context, RopeMode, Tensor};

use super::decoder::Rotary;
use crate::architecture::{ArchModel, Architecture, SlidingWindowState, StepState, StepTensors};
use crate::error::{LlamaError, Result};
use crate::hparams::{get_f32, get_usize, HParams};
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::step::{cached_attention_with, AttnDims, AttnScores, LayerView, StepInputs, StepShape};

/// Gemma 2 (`gemma2`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Gemma2;

/// The weights of one block (shapes with `e` = `n_embd`, `q` = `n_head·head_dim`,
/// `kv` = `n_head_kv·head_dim`, `f` = `n_ff`).
#[derive(Debug, Clone)]
pub struct Gemma2Layer {
    /// RMSNorm weight before attention, `[e]`.
    pub attn_norm: WeightId,
    /// Query projection, `[e, q]`.
    pub wq: WeightId,
    /// Key projection, `[e, kv]`.
    pub wk: WeightId,
    /// Value projection, `[e, kv]`.
    pub wv: WeightId,
    /// Output projection, `[q, e]`.
    pub wo: WeightId,
    /// RMSNorm weight of the attention output, `[e]`.
    pub attn_post_norm: WeightId,
    /// RMSNorm weight before the feed-forward block, `[e]`.
    pub ffn_norm: WeightId,
    /// Gate projection, `[e, f]`.
    pub ffn_gate: WeightId,
    /// Up projection, `[e, f]`.
    pub ffn_up: WeightId,
    /// Down projection, `[f, e]`.
    pub ffn_down: WeightId,
    /// RMSNorm weight of the feed-forward output, `[e]`.
    pub ffn_post_norm: WeightId,
}

impl Gemma2Layer {
    /// Reads block `i`'s weights.
    pub fn load(hp: &HParams, l: &mut WeightLoader<'_>, i: usize) -> Result<Gemma2Layer> {
        let (e, f) = (hp.n_embd, hp.n_ff_at(i));
        let (q, kv) = (hp.n_head * hp.head_dim, hp.n_embd_kv());
        let n = |s: &str| format!("blk.{i}.{s}");
        Ok(Gemma2Layer {
            attn_norm: l.f32(&n("attn_norm.weight"), &[e])?,
            wq: l.matrix(&n("attn_q.weight"), &[e, q])?,
            wk: l.matrix(&n("attn_k.weight"), &[e, kv])?,
            wv: l.matrix(&n("attn_v.weight"), &[e, kv])?,
            wo: l.matrix(&n("attn_output.weight"), &[q, e])?,
            attn_post_norm: l.f32(&n("post_attention_norm.weight"), &[e])?,
            ffn_norm: l.f32(&n("ffn_norm.weight"), &[e])?,
            ffn_gate: l.matrix(&n("ffn_gate.weight"), &[e, f])?,
            ffn_up: l.matrix(&n("ffn_up.weight"), &[e, f])?,
            ffn_down: l.matrix(&n("ffn_down.weight"), &[f, e])?,
            ffn_post_norm: l.f32(&n("post_ffw_norm.weight"), &[e])?,
        })
    }

    /// The rest of block `il` once its queries, keys and values (`[q, k, v]`: q
    /// `[hd, nh, n]`, k and v `[kv, n]`) are made: attention over the cache as `at` says
    /// (rows, mask and cells: [`StepInputs::global_layer`] or [`StepInputs::window_layer`]),
    /// the output projection (rows `inp.out_ids` only in the last layer), the post-attention
    /// norm and residual, then [`Gemma2Layer::ffn`]. Returns the block's output.
    #[allow(clippy::too_many_arguments)]
    pub fn attend_and_ffn(
        &self,
        ctx: &mut Context,
        (hp, w, kv): (&HParams, &ImportedWeights, &KvCache),
        inp: &StepInputs,
        il: usize,
        at: LayerView,
        [q, k, v]: [Tensor; 3],
        scores: AttnScores,
        mut x: Tensor,
    ) -> Result<Tensor> {
        let dims = AttnDims {
            head_dim: hp.head_dim,
            n_head: hp.n_head,
            n_head_kv: hp.n_head_kv,
        };
        let attn = cached_attention_with(
            ctx,
            kv,
            il,
            at.k_rows,
            at.mask,
            at.shape,
            dims,
            q,
            [k, v],
            scores,
        )?;
        let mut cur = ctx.mul_mat(w[self.wo], attn)?; // [n_embd, n]
        if il + 1 == hp.n_layer {
            if let Some(ids) = inp.out_ids {
                cur = ctx.get_rows(cur, ids)?;
                x = ctx.get_rows(x, ids)?;
            }
        }
        let cur = ctx.rms_norm_mul(cur, w[self.attn_post_norm], hp.rms_eps)?;
        let sa_out = ctx.add(cur, x)?;
        self.ffn(ctx, hp, w, sa_out)
    }

    /// The feed-forward half of the block on the attention half's output `sa_out`
    /// (`[n_embd, n]`): `sa_out + rms_norm(W_down·(gelu(W_gate·h) · W_up·h)) · post_ffw_norm`
    /// with `h = rms_norm(sa_out) · ffn_norm`.
    pub fn ffn(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        sa_out: Tensor,
    ) -> Result<Tensor> {
        let ws = [
            self.ffn_norm,
            self.ffn_gate,
            self.ffn_up,
            self.ffn_down,
            self.ffn_post_norm,
        ];
        geglu_ffn(ctx, hp, w, ws, sa_out)
    }
}

/// Gemma's feed-forward half on `sa_out` (`[n_embd, n]`) with the weights `[ffn_norm, gate,
/// up, down, post_ffw_norm]`: `sa_out + rms_norm(W_down·(gelu(W_gate·h) · W_up·h)) ·
/// post_ffw_norm`, `h = rms_norm(sa_out) · ffn_norm`.
pub(crate) fn geglu_ffn(
    ctx: &mut Context,
    hp: &HParams,
    w: &ImportedWeights,
    [norm, gate, up, down, post]: [WeightId; 5],
    sa_out: Tensor,
) -> Result<Tensor> {
    let h = ctx.rms_norm_mul(sa_out, w[norm], hp.rms_eps)?;
    let g = ctx.mul_mat(w[gate], h)?; // [n_ff, n]
    let u = ctx.mul_mat(w[up], h)?;
    let act = ctx.geglu_split(g, u)?;
    let d = ctx.mul_mat(w[down], act)?; // [n_embd, n]
    let cur = ctx.rms_norm_mul(d, w[post], hp.rms_eps)?;
    Ok(ctx.add(cur, sa_out)?)
}

/// Gemma 2's constants beyond [`HParams`], read once at load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemma2Consts {
    /// Attention scores are soft-capped to `±attn_softcap` (`attn_logit_softcapping`,
    /// default 50).
    pub attn_softcap: f32,
    /// Logits are soft-capped to `±final_softcap` (`final_logit_softcapping`, default 30).
    pub final_softcap: f32,
    /// Positions a sliding-window layer's query sees, its own included
    /// (`attention.sliding_window`, default 4096).
    pub window: u32,
    /// Factor of the queries before attention.
    pub q_scale: f32,
}

/// A loaded Gemma 2 model.
#[derive(Debug, Clone)]
pub struct Gemma2Model {
    /// Token embeddings, `[n_embd, n_vocab]`.
    pub tok_embd: WeightId,
    /// Final RMSNorm weight, `[n_embd]`.
    pub output_norm: WeightId,
    /// Output projection, `[n_embd, n_vocab]` (the embeddings when tied).
    pub output: WeightId,
    /// Transformer blocks.
    pub layers: Vec<Gemma2Layer>,
    /// Soft-caps, window and query scale.
    pub consts: Gemma2Consts,
}

impl Gemma2Model {
    /// Whether layer `il` attends through the sliding window (llama.cpp's pattern 2: the
    /// even layers).
    pub fn is_sliding(il: usize) -> bool {
        il.is_multiple_of(2)
    }
}

/// A positive finite number under `key`, or `default` when absent.
pub(crate) fn positive(f: &GgufFile, key: &str, default: f32) -> Result<f32> {
    let v = get_f32(f, key)?.unwrap_or(default);
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(LlamaError::BadKey {
            key: key.to_string(),
            detail: format!("{v} must be a positive finite number"),
        })
    }
}

/// The sliding window under `key` (positions a query sees, its own included), `default`
/// when absent (`None`: required).
pub(crate) fn sliding_window(f: &GgufFile, key: &str, default: Option<usize>) -> Result<u32> {
    let window = match get_usize(f, key)?.or(default) {
        Some(w) => w,
        None => return Err(LlamaError::MissingKey(key.to_string())),
    };
    match u32::try_from(window) {
        Ok(w) if w > 0 => Ok(w),
        _ => Err(LlamaError::BadKey {
            key: key.to_string(),
            detail: format!("{window} must be between 1 and {}", u32::MAX),
        }),
    }
}

impl Gemma2Consts {
    /// Reads the constants from `f` (keys under `hp.arch`), with llama.cpp's defaults.
    pub fn from_gguf(f: &GgufFile, hp: &HParams) -> Result<Gemma2Consts> {
        let k = |s: &str| format!("{}.{s}", hp.arch);
        let attn_softcap = positive(f, &k("attn_logit_softcapping"), 50.0)?;
        let final_softcap = positive(f, &k("final_logit_softcapping"), 30.0)?;
        let window = sliding_window(f, &k("attention.sliding_window"), Some(4096))?;
        let key = k("attention.value_length");
        if let Some(vl) = get_usize(f, &key)? {
            if vl != hp.head_dim {
                return Err(LlamaError::BadKey {
                    key,
                    detail: format!(
                        "values of width {vl} differ from keys of width {} (not supported)",
                        hp.head_dim
                    ),
                });
            }
        }
        // As llama.cpp (after gemma_pytorch): the 27B model (46 layers) scales queries by
        // 1/√(n_embd/n_head), the others by 1/√head_dim.
        let q_dim = match hp.n_layer {
            46 => hp.n_embd / hp.n_head,
            _ => hp.head_dim,
        };
        Ok(Gemma2Consts {
            attn_softcap,
            final_softcap,
            window,
            q_scale: 1.0 / (q_dim as f32).sqrt(),
        })
    }
}

impl Architecture for Gemma2 {
    fn name(&self) -> &'static str {
        "gemma2"
    }

    fn hparams(&self, file: &GgufFile) -> Result<HParams> {
        let mut hp = HParams::from_gguf(file)?;
        let c = Gemma2Consts::from_gguf(file, &hp)?;
        hp.set_windows(|il| Gemma2Model::is_sliding(il).then_some(c.window));
        Ok(hp)
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let consts = Gemma2Consts::from_gguf(l.file(), hp)?;
        let (tok_embd, output_norm, output) = l.embeddings_and_output()?;
        // `HParams::from_gguf` bounded `n_layer` by the file's tensor count.
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            layers.push(Gemma2Layer::load(hp, l, i)?);
        }
        Ok(Box::new(Gemma2Model {
            tok_embd,
            output_norm,
            output,
            layers,
            consts,
        }))
    }
}

impl ArchModel for Gemma2Model {
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

    fn new_state(&self) -> Box<dyn StepState> {
        Box::new(SlidingWindowState {
            window: self.consts.window,
        })
    }
}

/// Builds the step graph; returns the inputs to fill and the logits tensor
/// (`[n_vocab, n_outputs]`).
fn build(
    m: &Gemma2Model,
    ctx: &mut Context,
    hp: &HParams,
    w: &ImportedWeights,
    kv: &KvCache,
    shape: StepShape,
) -> Result<StepTensors> {
    let n = shape.n_tokens;
    let (hd, nh, nhkv) = (hp.head_dim, hp.n_head, hp.n_head_kv);
    let e_kv = hp.n_embd_kv();
    let c = m.consts;

    let mut inp = StepInputs::new(ctx, shape, 1, false)?;
    let mask_swa = inp.add_swa_mask(ctx, shape)?;
    let rope = Rotary::new(hp, RopeMode::Neox, None);
    // Queries come scaled; the scores are soft-capped as they are.
    let scores = AttnScores {
        scale: 1.0,
        softcap: Some(c.attn_softcap),
    };

    let x = ctx.get_rows(w[m.tok_embd], inp.tokens)?; // [n_embd, n]
    let mut x = ctx.scale(x, (hp.n_embd as f32).sqrt())?;
    for (il, l) in m.layers.iter().enumerate() {
        let h = ctx.rms_norm_mul(x, w[l.attn_norm], hp.rms_eps)?;

        let q = ctx.mul_mat(w[l.wq], h)?; // [nh·hd, n]
        let k = ctx.mul_mat(w[l.wk], h)?; // [nhkv·hd, n]
        let v = ctx.mul_mat(w[l.wv], h)?; // [nhkv·hd, n]
        let q = ctx.reshape_3d(q, hd, nh, n)?;
        let q = rope.apply(ctx, q, inp.pos)?; // [hd, nh, n]
        let q = ctx.scale(q, c.q_scale)?;
        let k = ctx.reshape_3d(k, hd, nhkv, n)?;
        let k = rope.apply(ctx, k, inp.pos)?; // [hd, nhkv, n]

        let k2 = ctx.reshape_2d(k, e_kv, n)?;
        let at = match Gemma2Model::is_sliding(il) {
            true => inp.window_layer(mask_swa, shape),
            false => inp.global_layer(shape),
        };
        let qkv = [q, k2, v];
        x = l.attend_and_ffn(ctx, (hp, w, kv), &inp, il, at, qkv, scores, x)?;
    }
    output_logits(
        ctx,
        (hp, w),
        inp,
        x,
        [m.output_norm, m.output],
        Some(c.final_softcap),
    )
}

/// The logits of the last hidden states `x`: `softcap(output · (rms_norm(x) · norm))`
/// (`[norm, output]` the weights), named, marked as the graph's output, with the step's
/// inputs.
pub(crate) fn output_logits(
    ctx: &mut Context,
    (hp, w): (&HParams, &ImportedWeights),
    inputs: StepInputs,
    x: Tensor,
    [norm, output]: [WeightId; 2],
    softcap: Option<f32>,
) -> Result<StepTensors> {
    let h = ctx.rms_norm_mul(x, w[norm], hp.rms_eps)?;
    let mut logits = ctx.mul_mat(w[output], h)?; // [n_vocab, n_outputs]
    if let Some(c) = softcap {
        logits = ctx.soft_cap(logits, c)?;
    }
    ctx.set_name(logits, "logits")?;
    ctx.set_output(logits)?;
    Ok(StepTensors { inputs, logits })
}
