//! Gemma 3 (`gemma3`, llama.cpp's `llm_build_gemma3_iswa`): Gemma 2's block (embeddings ×
//! √n_embd, RMSNorm before and after attention and the feed-forward, GeGLU) with per-head
//! RMSNorm of the queries and keys before the rotary, no attention soft-capping, and
//! interleaved sliding-window ("local") and global layers with rotary bases of their own:
//!
//! ```text
//! x = token_embd[tokens] · √n_embd
//! for each layer l (local iff l mod pattern < pattern − 1):
//!     h = rms_norm(x) · attn_norm
//!     q, k, v = Wq·h, Wk·h, Wv·h                   // heads × head_dim (key_length)
//!     q, k = rms_norm(q) · q_norm, rms_norm(k) · k_norm      // per head
//!     q, k = rope_neox(q, k): local: base freq_base_swa (10000), no scaling;
//!                             global: base freq_base, the file's rotary scaling
//!     q = q · q_scale                              // 1/√head_dim (27B: 1/√(n_embd/n_head))
//!     a = softmax(K·q + mask_l) · V                // mask_l: sliding window on local layers
//!     x = x + rms_norm(Wo·a) · post_attention_norm
//!     x = x + rms_norm(ffn(rms_norm(x) · ffn_norm)) · post_ffw_norm
//! logits = output · (rms_norm(x) · output_norm)   // soft-capped when the file says so
//! ```
//!
//! `attention.sliding_window_pattern` (default 6: five local layers, then a global one) and
//! `attention.sliding_window` (required) as llama.cpp reads them.

use ggrs_core::{Context, RopeMode, Tensor};

use super::decoder::Rotary;
use super::gemma2::{output_logits, positive, sliding_window, Gemma2Layer};
use crate::architecture::{ArchModel, Architecture, SlidingWindowState, StepState, StepTensors};
use crate::error::{LlamaError, Result};
use crate::hparams::{get_f32, get_usize, HParams};
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::step::{AttnScores, StepInputs, StepShape};

/// Gemma 3 (`gemma3`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Gemma3;

/// One Gemma 3 block: Gemma 2's weights plus the per-head Q/K norms (`[head_dim]`).
#[derive(Debug, Clone)]
pub struct Gemma3Layer {
    /// The weights Gemma 2's block has.
    pub base: Gemma2Layer,
    /// RMSNorm weight of each query head, `[head_dim]`.
    pub q_norm: WeightId,
    /// RMSNorm weight of each key head, `[head_dim]`.
    pub k_norm: WeightId,
}

/// Gemma 3's constants beyond [`HParams`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemma3Consts {
    /// Positions a local layer's query sees, its own included (`attention.sliding_window`).
    pub window: u32,
    /// Layer `il` is local iff `il % pattern < pattern − 1`
    /// (`attention.sliding_window_pattern`, default 6).
    pub pattern: usize,
    /// Rotary base of the local layers (`rope.freq_base_swa`, default 10000).
    pub freq_base_swa: f32,
    /// Factor of the queries before attention.
    pub q_scale: f32,
    /// Logits are soft-capped to `±c` (`final_logit_softcapping`) when present.
    pub final_softcap: Option<f32>,
}

impl Gemma3Consts {
    /// Whether layer `il` attends through the sliding window.
    pub fn is_local(&self, il: usize) -> bool {
        il % self.pattern < self.pattern - 1
    }

    /// Reads the constants from `f` (keys under `hp.arch`), with llama.cpp's defaults.
    pub fn from_gguf(f: &ggrs_core::gguf::GgufFile, hp: &HParams) -> Result<Gemma3Consts> {
        let k = |s: &str| format!("{}.{s}", hp.arch);
        let window = sliding_window(f, &k("attention.sliding_window"), None)?;
        let key = k("attention.sliding_window_pattern");
        let pattern = match get_usize(f, &key)?.unwrap_or(6) {
            p if p >= 1 => p,
            p => {
                return Err(LlamaError::BadKey {
                    key,
                    detail: format!("{p} must be at least 1"),
                })
            }
        };
        let freq_base_swa = positive(f, &k("rope.freq_base_swa"), 10000.0)?;
        let final_softcap = match get_f32(f, &k("final_logit_softcapping"))? {
            None | Some(0.0) => None,
            Some(_) => Some(positive(f, &k("final_logit_softcapping"), 30.0)?),
        };
        let key = k("attention.value_length");
        if get_usize(f, &key)?.is_some_and(|v| v != hp.head_dim) {
            return Err(LlamaError::BadKey {
                key,
                detail: format!("values must be as wide as keys ({})", hp.head_dim),
            });
        }
        // As llama.cpp: the 27B model (62 layers) scales queries by 1/√(n_embd/n_head).
        let q_dim = match hp.n_layer {
            62 => hp.n_embd / hp.n_head,
            _ => hp.head_dim,
        };
        Ok(Gemma3Consts {
            window,
            pattern,
            freq_base_swa,
            q_scale: 1.0 / (q_dim as f32).sqrt(),
            final_softcap,
        })
    }
}

/// A loaded Gemma 3 model.
#[derive(Debug, Clone)]
pub struct Gemma3Model {
    /// Token embeddings, `[n_embd, n_vocab]`.
    pub tok_embd: WeightId,
    /// Final RMSNorm weight, `[n_embd]`.
    pub output_norm: WeightId,
    /// Output projection (the embeddings when tied).
    pub output: WeightId,
    /// Transformer blocks.
    pub layers: Vec<Gemma3Layer>,
    /// Window, pattern, local rotary base, query scale, soft-cap.
    pub consts: Gemma3Consts,
}

impl Architecture for Gemma3 {
    fn name(&self) -> &'static str {
        "gemma3"
    }

    fn hparams(&self, file: &ggrs_core::gguf::GgufFile) -> Result<HParams> {
        let mut hp = HParams::from_gguf(file)?;
        let c = Gemma3Consts::from_gguf(file, &hp)?;
        hp.set_windows(|il| c.is_local(il).then_some(c.window));
        Ok(hp)
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let consts = Gemma3Consts::from_gguf(l.file(), hp)?;
        let (tok_embd, output_norm, output) = l.embeddings_and_output()?;
        let d = hp.head_dim;
        // `HParams::from_gguf` bounded `n_layer` by the file's tensor count.
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            layers.push(Gemma3Layer {
                base: Gemma2Layer::load(hp, l, i)?,
                q_norm: l.f32(&format!("blk.{i}.attn_q_norm.weight"), &[d])?,
                k_norm: l.f32(&format!("blk.{i}.attn_k_norm.weight"), &[d])?,
            });
        }
        Ok(Box::new(Gemma3Model {
            tok_embd,
            output_norm,
            output,
            layers,
            consts,
        }))
    }
}

/// The embedding and blocks of a Gemma 3 graph (shared with EmbeddingGemma): the step's
/// inputs (with the sliding-window mask) and the last block's output `[n_embd, n_outputs]`,
/// before the final norm.
pub(crate) fn gemma3_blocks(
    ctx: &mut Context,
    (hp, w, kv, shape): (&HParams, &ImportedWeights, &KvCache, StepShape),
    tok_embd: WeightId,
    layers: &[Gemma3Layer],
    c: Gemma3Consts,
) -> Result<(StepInputs, Tensor)> {
    let n = shape.n_tokens;
    let (hd, nh, nhkv) = (hp.head_dim, hp.n_head, hp.n_head_kv);
    let mut inp = StepInputs::new(ctx, shape, 1, false)?;
    let mask_swa = inp.add_swa_mask(ctx, shape)?;
    let global = Rotary::new(hp, RopeMode::Neox, None);
    let local = Rotary::neox_with(hp, hp.n_rot, (c.freq_base_swa, 1.0), None);
    let scores = AttnScores {
        scale: 1.0,
        softcap: None,
    };

    let x = ctx.get_rows(w[tok_embd], inp.tokens)?; // [n_embd, n]
    let mut x = ctx.scale(x, (hp.n_embd as f32).sqrt())?;
    for (il, layer) in layers.iter().enumerate() {
        let l = &layer.base;
        let is_local = c.is_local(il);
        let rope = if is_local { local } else { global };
        let h = ctx.rms_norm_mul(x, w[l.attn_norm], hp.rms_eps)?;

        let q = ctx.mul_mat(w[l.wq], h)?; // [nh·hd, n]
        let k = ctx.mul_mat(w[l.wk], h)?; // [nhkv·hd, n]
        let v = ctx.mul_mat(w[l.wv], h)?; // [nhkv·hd, n]
        let q = ctx.reshape_3d(q, hd, nh, n)?;
        let q = ctx.rms_norm_mul(q, w[layer.q_norm], hp.rms_eps)?;
        let q = rope.apply(ctx, q, inp.pos)?; // [hd, nh, n]
        let q = ctx.scale(q, c.q_scale)?;
        let k = ctx.reshape_3d(k, hd, nhkv, n)?;
        let k = ctx.rms_norm_mul(k, w[layer.k_norm], hp.rms_eps)?;
        let k = rope.apply(ctx, k, inp.pos)?; // [hd, nhkv, n]

        let k2 = ctx.reshape_2d(k, hp.n_embd_kv(), n)?;
        let at = match is_local {
            true => inp.window_layer(mask_swa, shape),
            false => inp.global_layer(shape),
        };
        let qkv = [q, k2, v];
        x = l.attend_and_ffn(ctx, (hp, w, kv), &inp, il, at, qkv, scores, x)?;
    }
    Ok((inp, x))
}

/// The final-normed hidden states of a Gemma 3 graph (`[n_embd, n_outputs]`, named `embd`,
/// the step's output): an embedding graph's, Gemma 3's and EmbeddingGemma's.
pub(crate) fn gemma3_hidden_states(
    ctx: &mut Context,
    step: (&HParams, &ImportedWeights, &KvCache, StepShape),
    (tok_embd, layers, c): (WeightId, &[Gemma3Layer], Gemma3Consts),
    output_norm: WeightId,
) -> Result<StepTensors> {
    let (hp, w) = (step.0, step.1);
    let (inputs, x) = gemma3_blocks(ctx, step, tok_embd, layers, c)?;
    let h = ctx.rms_norm_mul(x, w[output_norm], hp.rms_eps)?;
    ctx.set_name(h, "embd")?;
    ctx.set_output(h)?;
    Ok(StepTensors { inputs, logits: h })
}

impl ArchModel for Gemma3Model {
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<StepTensors> {
        let m = self;
        let (inp, x) = gemma3_blocks(ctx, (hp, w, kv, shape), m.tok_embd, &m.layers, m.consts)?;
        output_logits(
            ctx,
            (hp, w),
            inp,
            x,
            [m.output_norm, m.output],
            m.consts.final_softcap,
        )
    }

    fn new_state(&self) -> Box<dyn StepState> {
        Box::new(SlidingWindowState {
            window: self.consts.window,
        })
    }

    /// The final-normed hidden states of every token (`--pooling` chooses the pooling, as
    /// for the other decoders), causal, the local layers seeing their window.
    fn build_embeddings(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<Option<StepTensors>> {
        let m = self;
        let blocks = (m.tok_embd, &m.layers[..], m.consts);
        gemma3_hidden_states(ctx, (hp, w, kv, shape), blocks, m.output_norm).map(Some)
    }

    fn embeddings_window(&self) -> Option<u32> {
        Some(self.consts.window)
    }
}
