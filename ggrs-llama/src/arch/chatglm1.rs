//! The ChatGLM-6B (version 1) graph, architecture `chatglm1` (a GGUF layout of ggrs's own,
//! see `docs/gguf-chatglm1.md`), as the official `modeling_chatglm.py` computes it:
//!
//! ```text
//! x = token_embd[tokens]                                   // [n_embd, n_tokens], no scaling
//! for each layer:
//!     a = layer_norm(x) · attn_norm + attn_norm_b           // LayerNorm with bias
//!     qkv = Wqkv·a + bqkv                                   // per head: q | k | v (d each)
//!     q, k = rope2d(q), rope2d(k)                           // first d/2 of each head with the
//!                                                           // position, second d/2 with the
//!                                                           // block position; rotate-half
//!                                                           // pairs, f16-rounded frequencies
//!     cache_k[cell] = k; cache_v[cell] = v
//!     o = softmax(K·q / √d + mask) applied to V             // mask: see below
//!     h = a·α + (Wo·o + bo)                                 // α = residual_scale = √56: the
//!                                                           // residual is the LayerNorm output
//!     m = layer_norm(h) · ffn_norm + ffn_norm_b
//!     x = m·α + W_down·gelu_tanh(W_up·m + b_up) + b_down
//! logits = output · (layer_norm(x) · output_norm + output_norm_b)
//! ```
//!
//! Positions (official `get_position_ids` and generation code): a prompt
//! `x0 … x(n−1) [gMASK] <sop>` has the context `x0 … [gMASK]` (everything before `<sop>`,
//! the *context length* c = index of `<sop>`); token i gets position `i` and block position
//! 0 inside the context, and from `<sop>` on position = the index of `[gMASK]` (or `[MASK]`)
//! and block position `i − c + 1` (so `<sop>` has 1, the first generated token 2, …).
//!
//! Mask: the context is bidirectional (every context token sees every context token), the
//! rest causal. Hence the whole context must be evaluated in one step: a session with this
//! architecture rejects a step that would split it (see [`Glm1State::step_inputs`]).
//!
//! Tokens evaluated after the context (generated ones, or any text appended later without
//! clearing) continue the generated part: position = mask position, block position counting
//! on. A new conversation turn is a new prompt, as the official `chat()` re-encodes the whole
//! history: [`Glm1Model::reuses_cached_prefix`] is false, so a conversation clears the cache
//! and evaluates [`chat_prompt`]'s text anew.
//!
//! The step's `pos` input holds `2·n_tokens` i32: the positions, then the block positions;
//! the rotary frequency table (`[d/4]` f32) is a leaf filled while the graph is built.
//! Rotary embedding is `Context::rope_freqs` on each half of a head.
//!
//! Text ([`Glm1Text`]): a prompt is encoded with the official tokenizer's conventions
//! ([`preprocess_text`]) and `[gMASK] <sop>` appended; [`token_text`] undoes them for `<n>`,
//! `<|tab|>` and `<|blank_N|>` when generated text is decoded; the chat format is the
//! official one ([`ChatTemplate::ChatGlm1`]).
//!
//! Everything here is parsed once at load ([`Glm1Params`], kept in [`Glm1Model`] and
//! [`Glm1Text`]); the session sees only the [`ArchModel`] and [`StepState`] traits.

use std::collections::HashMap;

use ggrs_core::gguf::GgufFile;
use ggrs_core::{Context, DType, RopeMode, Tensor};

use crate::architecture::{
    ArchModel, Architecture, StepState, StepTensors, StepValues, TextConventions,
};
use crate::batch::{Batch, SeqId};
use crate::chat::template::{ChatError, ChatTemplate};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::step::{add_opt, cached_attention, layer_norm, AttnDims, StepInputs, StepShape};
use crate::tokenizer::Tokenizer;

pub use crate::chat::template::glm1_chat_prompt as chat_prompt;

/// The `chatglm1` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChatGlm1;

/// The weights of one block (`e` = `n_embd`, `f` = `n_ff`); every norm has a bias.
#[derive(Debug, Clone)]
pub struct Glm1Layer {
    /// LayerNorm weight before attention, `[e]`.
    pub attn_norm: WeightId,
    /// Its bias, `[e]`.
    pub attn_norm_b: WeightId,
    /// Fused Q/K/V projection, `[e, 3e]`, per head `q | k | v`.
    pub wqkv: WeightId,
    /// Its bias, `[3e]`.
    pub bqkv: WeightId,
    /// Output projection, `[e, e]`.
    pub wo: WeightId,
    /// Output bias, `[e]`.
    pub bo: Option<WeightId>,
    /// LayerNorm weight before the feed-forward block, `[e]`.
    pub ffn_norm: WeightId,
    /// Its bias, `[e]`.
    pub ffn_norm_b: WeightId,
    /// Up projection, `[e, f]`.
    pub ffn_up: WeightId,
    /// Its bias, `[f]`.
    pub ffn_up_b: WeightId,
    /// Down projection, `[f, e]`.
    pub ffn_down: WeightId,
    /// Its bias, `[e]`.
    pub ffn_down_b: WeightId,
}

/// A loaded `chatglm1` model: its constants and weights.
#[derive(Debug, Clone)]
pub struct Glm1Model {
    /// The `chatglm1.*` constants and special tokens.
    pub params: Glm1Params,
    /// Token embeddings, `[n_embd, n_vocab]`.
    pub tok_embd: WeightId,
    /// Final LayerNorm weight, `[n_embd]`.
    pub output_norm: WeightId,
    /// Its bias, `[n_embd]`.
    pub output_norm_b: WeightId,
    /// Output projection, `[n_embd, n_vocab]` (the embeddings when tied).
    pub output: WeightId,
    /// Transformer blocks.
    pub layers: Vec<Glm1Layer>,
}

impl Architecture for ChatGlm1 {
    fn name(&self) -> &'static str {
        "chatglm1"
    }

    /// The shared keys, with LayerNorm's epsilon (`chatglm1.attention.layer_norm_epsilon`).
    fn hparams(&self, file: &GgufFile) -> Result<HParams> {
        HParams::from_gguf_eps(file, "attention.layer_norm_epsilon")
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let params = Glm1Params::from_gguf(l.file(), hp)?;
        let (e, v, f) = (hp.n_embd, hp.n_vocab, hp.n_ff);
        let qkv = 3 * hp.n_head * hp.head_dim;
        let tok_embd = l.rows("token_embd.weight", &[e, v])?;
        let output_norm = l.f32("output_norm.weight", &[e])?;
        let output_norm_b = l.f32("output_norm.bias", &[e])?;
        let output = match l.opt_matrix("output.weight", &[e, v])? {
            Some(o) => o,
            None => l.also_matrix(tok_embd)?,
        };
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            layers.push(Glm1Layer {
                wqkv: l.matrix(&n("attn_qkv.weight"), &[e, qkv])?,
                attn_norm: l.f32(&n("attn_norm.weight"), &[e])?,
                attn_norm_b: l.f32(&n("attn_norm.bias"), &[e])?,
                ffn_norm_b: l.f32(&n("ffn_norm.bias"), &[e])?,
                ffn_up_b: l.f32(&n("ffn_up.bias"), &[f])?,
                ffn_down_b: l.f32(&n("ffn_down.bias"), &[e])?,
                bqkv: l.f32(&n("attn_qkv.bias"), &[qkv])?,
                wo: l.matrix(&n("attn_output.weight"), &[e, e])?,
                bo: l.opt_f32(&n("attn_output.bias"), &[e])?,
                ffn_norm: l.f32(&n("ffn_norm.weight"), &[e])?,
                ffn_up: l.matrix(&n("ffn_up.weight"), &[e, f])?,
                ffn_down: l.matrix(&n("ffn_down.weight"), &[f, e])?,
            });
        }
        Ok(Box::new(Glm1Model {
            params,
            tok_embd,
            output_norm,
            output_norm_b,
            output,
            layers,
        }))
    }

    /// Reads the hyperparameters again for [`Glm1Params`]' checks (text needs no weights).
    fn text(&self, file: &GgufFile) -> Result<Box<dyn TextConventions>> {
        let hp = self.hparams(file)?;
        Ok(Box::new(Glm1Text {
            params: Glm1Params::from_gguf(file, &hp)?,
            has_vocab: file.get("tokenizer.ggml.model").is_some(),
        }))
    }
}

impl ArchModel for Glm1Model {
    /// Builds the step graph (see the [module docs](self)); `pos` is `[2·n_tokens]`.
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

    /// Positions and masks from [`Glm1State`], with this model's special tokens.
    fn new_state(&self) -> Box<dyn StepState> {
        Box::new(Glm1Steps {
            params: self.params.clone(),
            state: Glm1State::default(),
        })
    }

    /// False: the prompt context attends bidirectionally, so its cached keys change with
    /// every token added to it.
    fn reuses_cached_prefix(&self) -> bool {
        false
    }
}

/// A session's `chatglm1` step state: [`Glm1State`] and the model's [`Glm1Params`].
#[derive(Debug, Clone)]
struct Glm1Steps {
    params: Glm1Params,
    state: Glm1State,
}

impl StepState for Glm1Steps {
    fn inputs(&mut self, piece: &Batch, kv: &KvCache, n_kv: usize) -> Result<StepValues> {
        let (pos, mask) = self.state.step_inputs(&self.params, piece, kv, n_kv)?;
        Ok(StepValues {
            pos,
            mask,
            mask_swa: None,
        })
    }

    fn clear(&mut self) {
        self.state.clear();
    }

    fn remove(&mut self, seq: SeqId, from: i32) {
        self.state.remove(seq, from);
    }
}

/// The residual scale of every ChatGLM-6B v1 model: `sqrt(2·28)` (the official `GLMBlock`
/// is always built with its default `num_layers = 28`).
pub const DEFAULT_RESIDUAL_SCALE: f32 = 7.483_315;

/// What the `chatglm1` graph and positions need beyond [`HParams`].
#[derive(Debug, Clone, PartialEq)]
pub struct Glm1Params {
    /// α, the factor of the residual branch (`chatglm1.residual_scale`; default √56).
    pub residual_scale: f32,
    /// LayerNorm epsilon (`chatglm1.attention.layer_norm_epsilon`).
    pub norm_eps: f32,
    /// Width of each rotated half of a head (`chatglm1.rope.dimension_count` = head_dim/2).
    pub rope_dims: usize,
    /// Rotary base (`chatglm1.rope.freq_base`, 10000).
    pub freq_base: f32,
    /// `<sop>`, which ends the context (`tokenizer.ggml.bos_token_id`).
    pub bos: u32,
    /// `<eop>`, the end of generation (`tokenizer.ggml.eos_token_id`).
    pub eos: u32,
    /// `[gMASK]` (`tokenizer.ggml.gmask_token_id`).
    pub gmask: Option<u32>,
    /// `[MASK]` (`tokenizer.ggml.mask_token_id`).
    pub mask: Option<u32>,
}

fn key_u32(f: &GgufFile, key: &str) -> Result<Option<u32>> {
    match f.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| LlamaError::BadKey {
                key: key.into(),
                detail: format!("expected a token id, found {}", v.type_name()),
            }),
    }
}

impl Glm1Params {
    /// Reads and checks the `chatglm1.*` keys and special token ids of `f`.
    pub fn from_gguf(f: &GgufFile, hp: &HParams) -> Result<Glm1Params> {
        let k = |s: &str| format!("chatglm1.{s}");
        let num = |key: &str| -> Result<Option<f32>> {
            match f.get(key) {
                None => Ok(None),
                Some(v) => v.as_f32().map(Some).ok_or_else(|| LlamaError::BadKey {
                    key: key.into(),
                    detail: format!("expected a number, found {}", v.type_name()),
                }),
            }
        };
        let key_2d = k("position_encoding_2d");
        match f.get(&key_2d) {
            None => {}
            Some(v) => match v.as_bool() {
                Some(true) => {}
                Some(false) => {
                    return Err(LlamaError::BadKey {
                        key: key_2d,
                        detail: "is false: 1-D position encoding (a ChatGLM v1 variant no \
                                 released model uses) is not supported"
                            .into(),
                    })
                }
                None => {
                    return Err(LlamaError::BadKey {
                        key: key_2d,
                        detail: format!("expected a bool, found {}", v.type_name()),
                    })
                }
            },
        }
        let rope_dims = hp.n_rot;
        if !hp.head_dim.is_multiple_of(4)
            || rope_dims * 2 != hp.head_dim
            || hp.n_head_kv != hp.n_head
        {
            return Err(LlamaError::BadKey {
                key: k("rope.dimension_count"),
                detail: format!(
                    "{rope_dims} must be half the head size {} (a multiple of 4), with as many \
                     KV heads as query heads ({} vs {})",
                    hp.head_dim, hp.n_head_kv, hp.n_head
                ),
            });
        }
        let norm_key = k("attention.layer_norm_epsilon");
        let norm_eps = num(&norm_key)?.ok_or(LlamaError::MissingKey(norm_key))?;
        let residual_scale = num(&k("residual_scale"))?.unwrap_or(DEFAULT_RESIDUAL_SCALE);
        if !residual_scale.is_finite() {
            return Err(LlamaError::BadKey {
                key: k("residual_scale"),
                detail: format!("{residual_scale} is not finite"),
            });
        }
        let id = |name: &str| format!("tokenizer.ggml.{name}_token_id");
        let bos = key_u32(f, &id("bos"))?.ok_or_else(|| LlamaError::MissingKey(id("bos")))?;
        let eos = key_u32(f, &id("eos"))?.ok_or_else(|| LlamaError::MissingKey(id("eos")))?;
        let gmask = key_u32(f, &id("gmask"))?;
        let mask = key_u32(f, &id("mask"))?;
        if gmask.is_none() && mask.is_none() {
            return Err(LlamaError::MissingKey(format!(
                "{} (or {}): ChatGLM v1 prompts need [gMASK]",
                id("gmask"),
                id("mask")
            )));
        }
        for (name, v) in [
            ("bos", Some(bos)),
            ("eos", Some(eos)),
            ("gmask", gmask),
            ("mask", mask),
        ] {
            if let Some(v) = v.filter(|&v| v as usize >= hp.n_vocab) {
                return Err(LlamaError::BadKey {
                    key: id(name),
                    detail: format!("{v} is outside the vocabulary of {}", hp.n_vocab),
                });
            }
        }
        Ok(Glm1Params {
            residual_scale,
            norm_eps,
            rope_dims,
            freq_base: hp.rope_freq_base,
            bos,
            eos,
            gmask,
            mask,
        })
    }

    /// The rotary frequencies of one half of a head, as the official code uses them:
    /// `1 / base^(2i/r)` for `i < r/2` (`r` = [`Glm1Params::rope_dims`]) computed in f32, then
    /// rounded to f16.
    pub fn rope_freqs(&self) -> Vec<f32> {
        let r = self.rope_dims;
        let exact: Vec<f32> = (0..r / 2)
            .map(|i| 1.0 / self.freq_base.powf((2 * i) as f32 / r as f32))
            .collect();
        // Round trip through ggrs-core's F16 row conversion (round to nearest even).
        let f16 = ggrs_core::types::traits(DType::F16);
        match (f16.from_f32, f16.to_f32) {
            (Some(to_half), Some(to_single)) => {
                let mut bytes = vec![0u8; DType::F16.row_size(exact.len())];
                to_half(&exact, &mut bytes);
                let mut out = vec![0f32; exact.len()];
                to_single(&bytes, &mut out);
                out
            }
            // F16 always converts both ways; keep the exact values if it ever did not.
            _ => exact,
        }
    }

    /// The official prompt around already-tokenized text: `text [gMASK] <sop>`.
    pub fn prompt(&self, text: &[u32]) -> Vec<u32> {
        let mut v = text.to_vec();
        v.push(self.gmask.or(self.mask).unwrap_or(self.bos));
        v.push(self.bos);
        v
    }
}

/// Where a sequence's context ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Glm1Anchor {
    /// Index of `<sop>` (tokens before it are the bidirectional context).
    pub context_length: i32,
    /// Index of `[gMASK]` (or `[MASK]`): the position of `<sop>` and everything after it.
    pub mask_position: i32,
}

impl Glm1Anchor {
    /// `(position, block position)` of the token at index `i` of the sequence.
    pub fn positions(&self, i: i32) -> (i32, i32) {
        if i < self.context_length {
            (i, 0)
        } else {
            (self.mask_position, i - self.context_length + 1)
        }
    }
}

/// Per-sequence context anchors of a session running a `chatglm1` model.
#[derive(Debug, Clone, Default)]
pub struct Glm1State {
    anchors: HashMap<SeqId, Glm1Anchor>,
}

impl Glm1State {
    /// Forgets every sequence.
    pub fn clear(&mut self) {
        self.anchors.clear();
    }

    /// Forgets `seq`'s anchor when its tokens from `from` on are removed and that reaches
    /// into the context (its `<sop>` is gone).
    pub fn remove(&mut self, seq: SeqId, from: i32) {
        if self
            .anchors
            .get(&seq)
            .is_some_and(|a| from <= a.context_length)
        {
            self.anchors.remove(&seq);
        }
    }

    /// The anchor of `seq`, once its context was evaluated.
    pub fn anchor(&self, seq: SeqId) -> Option<Glm1Anchor> {
        self.anchors.get(&seq).copied()
    }

    /// Rotary positions (`2·n`: positions, then block positions) and the attention mask
    /// (`[n_kv, n]`, 0 or −∞) of a placed step (batch positions are sequence indices).
    ///
    /// A step holding index 0 of a sequence starts it: it must hold its whole context and
    /// `<sop>` (indices `0..=c`), with `[gMASK]` or `[MASK]` before `<sop>`; any later step
    /// of the sequence must lie after its `<sop>`. Anything else (a prompt split over several
    /// steps, a prompt without `<sop>`) is an error, as the context's attention is
    /// bidirectional and cannot be computed piecewise.
    pub fn step_inputs(
        &mut self,
        gp: &Glm1Params,
        piece: &Batch,
        kv: &KvCache,
        n_kv: usize,
    ) -> Result<(Vec<i32>, Vec<f32>)> {
        let n = piece.len();
        let mut seqs: Vec<SeqId> = piece.seq.clone();
        seqs.sort_unstable();
        seqs.dedup();
        for &s in &seqs {
            let idx: Vec<usize> = (0..n).filter(|&t| piece.seq[t] == s).collect();
            let starts = idx.iter().any(|&t| piece.pos[t] == 0);
            if starts {
                let anchor = Self::find_anchor(gp, piece, &idx)?;
                self.anchors.insert(s, anchor);
            } else {
                // The anchor counts only while the cache still holds the sequence's <sop>
                // (a failed or removed step may have dropped it).
                let held = |a: &Glm1Anchor| {
                    kv.cells
                        .iter()
                        .any(|c| c.pos == Some(a.context_length) && c.seqs & (1u64 << s) != 0)
                };
                let a = self.anchors.get(&s).filter(|a| held(a)).ok_or_else(|| {
                    LlamaError::InvalidArgument(format!(
                        "chatglm1: sequence {s} has no evaluated context: its first step must \
                         hold the whole prompt up to <sop> (id {}) — the context's attention is \
                         bidirectional, so it cannot be prefilled in pieces (raise n_batch to \
                         the prompt length)",
                        gp.bos
                    ))
                })?;
                if let Some(&t) = idx.iter().find(|&&t| piece.pos[t] <= a.context_length) {
                    return Err(LlamaError::InvalidArgument(format!(
                        "chatglm1: position {} of sequence {s} lies inside its evaluated \
                         context (up to <sop> at {}); clear the sequence and evaluate the \
                         whole prompt again",
                        piece.pos[t], a.context_length
                    )));
                }
            }
        }
        let mut pos = vec![0i32; 2 * n];
        let mut mask = vec![f32::NEG_INFINITY; n_kv * n];
        for t in 0..n {
            let (s, p) = (piece.seq[t], piece.pos[t]);
            // Every sequence of the piece has an anchor now (inserted or checked above).
            let a = self.anchors[&s];
            (pos[t], pos[n + t]) = a.positions(p);
            let row = &mut mask[t * n_kv..(t + 1) * n_kv];
            for (m, cell) in row.iter_mut().zip(kv.row_cells(s, n_kv)) {
                let Some(cp) = cell.pos else { continue };
                let same_seq = cell.seqs & (1u64 << s) != 0;
                let in_context = p < a.context_length && cp < a.context_length;
                if same_seq && (cp <= p || in_context) {
                    *m = 0.0;
                }
            }
        }
        Ok((pos, mask))
    }

    /// The anchor of a sequence that starts in this step (`idx`: its entries).
    fn find_anchor(gp: &Glm1Params, piece: &Batch, idx: &[usize]) -> Result<Glm1Anchor> {
        let at = |p: i32| idx.iter().copied().find(|&t| piece.pos[t] == p);
        let sop = idx
            .iter()
            .copied()
            .filter(|&t| piece.tokens[t] == gp.bos)
            .map(|t| piece.pos[t])
            .min()
            .ok_or_else(|| {
                LlamaError::InvalidArgument(format!(
                    "chatglm1: the first step of a sequence must hold its whole context and \
                     <sop> (id {}); this one ({} tokens) has no <sop>. Give the prompt as \
                     `text [gMASK] <sop>` in one step (n_batch at least its length): the \
                     context's attention is bidirectional and cannot be prefilled in pieces",
                    gp.bos,
                    idx.len()
                ))
            })?;
        if let Some(missing) = (0..sop).find(|&p| at(p).is_none()) {
            return Err(LlamaError::InvalidArgument(format!(
                "chatglm1: the step holds <sop> at index {sop} but not index {missing} of its \
                 context: the whole context must be evaluated in one step"
            )));
        }
        let find = |id: Option<u32>| {
            id.and_then(|id| (0..sop).find(|&p| at(p).is_some_and(|t| piece.tokens[t] == id)))
        };
        let mask_position = find(gp.gmask).or_else(|| find(gp.mask)).ok_or_else(|| {
            LlamaError::InvalidArgument(format!(
                "chatglm1: the prompt has no [gMASK] (id {}) or [MASK] (id {}) before <sop>: \
                 ChatGLM-6B prompts end with `[gMASK] <sop>`",
                gp.gmask.map_or("none".into(), |v| v.to_string()),
                gp.mask.map_or("none".into(), |v| v.to_string()),
            ))
        })?;
        Ok(Glm1Anchor {
            context_length: sop,
            mask_position,
        })
    }
}

/// Builds the step graph; returns the inputs to fill and the logits (`[n_vocab, n_outputs]`).
/// `pos` is `[2·n_tokens]` (see the [module docs](self)).
fn build(
    m: &Glm1Model,
    ctx: &mut Context,
    hp: &HParams,
    w: &ImportedWeights,
    kv: &KvCache,
    shape: StepShape,
) -> Result<StepTensors> {
    let gp = &m.params;
    let n = shape.n_tokens;
    let (d, nh) = (hp.head_dim, hp.n_head);
    let dims = AttnDims {
        head_dim: d,
        n_head: nh,
        n_head_kv: nh,
    };
    let e = d * nh;
    let r = gp.rope_dims;
    let f32s = DType::F32.type_size();
    let alpha = gp.residual_scale;

    // Two position streams; `out_ids` always present (all rows when every token is an
    // output), so that the graph the session measures its arena with has the same leaves as
    // every smaller step.
    let inp = StepInputs::new(ctx, shape, 2, true)?;
    let (tokens, pos, out_ids) = (inp.tokens, inp.pos, inp.out_ids);
    // Leaves get their memory at once (also with deferred allocation): fill the table now.
    let table = gp.rope_freqs();
    let freqs = ctx.new_tensor_1d(DType::F32, table.len())?;
    ctx.set_name(freqs, "rope_freqs")?;
    if !ctx.is_no_alloc() {
        ctx.set_f32(freqs, &table)?;
    }
    let pos_a = ctx.view_1d(pos, n, 0)?;
    let pos_b = ctx.view_1d(pos, n, n * DType::I32.type_size())?;

    let mut x = ctx.get_rows(w[m.tok_embd], tokens)?; // [e, n]
    for (il, l) in m.layers.iter().enumerate() {
        let a = layer_norm(ctx, x, w[l.attn_norm], Some(w[l.attn_norm_b]), gp.norm_eps)?;
        let qkv = ctx.mul_mat(w[l.wqkv], a)?; // [3e, n]
        let qkv = ctx.add(qkv, w[l.bqkv])?;
        // Per head h, rows [h·3d, h·3d + d) are q, the next d k, then v.
        let head = |ctx: &mut Context, which: usize| {
            ctx.view_3d(qkv, d, nh, n, 3 * d * f32s, 3 * e * f32s, which * d * f32s)
        };
        let rope2d = |ctx: &mut Context, t: Tensor| -> Result<Tensor> {
            let t = ctx.rope_freqs(t, pos_a, freqs, 0, RopeMode::Neox)?;
            Ok(ctx.rope_freqs(t, pos_b, freqs, r, RopeMode::Neox)?)
        };
        let q = head(ctx, 0)?;
        let q = rope2d(ctx, q)?; // [d, nh, n]
        let k = head(ctx, 1)?;
        let k = rope2d(ctx, k)?; // [d, nh, n]
        let v = head(ctx, 2)?;
        let v = ctx.cont(v)?; // [d, nh, n]

        let k2 = ctx.reshape_2d(k, e, n)?;
        let v2 = ctx.reshape_2d(v, e, n)?;
        let o = cached_attention(ctx, kv, il, &inp, shape, dims, q, [k2, v2])?;
        let o = ctx.mul_mat(w[l.wo], o)?;
        let o = add_opt(ctx, o, w.opt(l.bo))?;
        let ra = ctx.scale(a, alpha)?;
        let mut h = ctx.add(ra, o)?;
        if il + 1 == m.layers.len() {
            // Only the rows whose logits are wanted go through the last FFN (rows are
            // independent from here on).
            if let Some(ids) = out_ids {
                h = ctx.get_rows(h, ids)?;
            }
        }

        let mm = layer_norm(ctx, h, w[l.ffn_norm], Some(w[l.ffn_norm_b]), gp.norm_eps)?;
        let up = ctx.mul_mat(w[l.ffn_up], mm)?; // [n_ff, n]
        let up = ctx.add(up, w[l.ffn_up_b])?;
        let act = ctx.gelu(up)?;
        let down = ctx.mul_mat(w[l.ffn_down], act)?; // [e, n]
        let down = ctx.add(down, w[l.ffn_down_b])?;
        let rm = ctx.scale(mm, alpha)?;
        x = ctx.add(rm, down)?;
    }
    let h = layer_norm(
        ctx,
        x,
        w[m.output_norm],
        Some(w[m.output_norm_b]),
        gp.norm_eps,
    )?;
    let logits = ctx.mul_mat(w[m.output], h)?; // [n_vocab, n_outputs]
    ctx.set_name(logits, "logits")?;
    ctx.set_output(logits)?;
    Ok(StepTensors {
        inputs: inp,
        logits,
    })
}

/// Longest whitespace run the official tokenizer writes as one `<|blank_N|>` token.
const MAX_BLANK: usize = 80;

/// The official ChatGLM-6B text conventions applied before SentencePiece encoding: `\n` →
/// `<n>`, tab → `<|tab|>`, each run of 2 to 80 spaces → `<|blank_N|>` (longer runs take
/// `<|blank_80|>` as often as it fits, then the rest; a single space stays a space).
pub fn preprocess_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut spaces = 0usize;
    let flush = |out: &mut String, spaces: &mut usize| {
        while *spaces >= MAX_BLANK {
            out.push_str("<|blank_80|>");
            *spaces -= MAX_BLANK;
        }
        match *spaces {
            0 => {}
            1 => out.push(' '),
            k => out.push_str(&format!("<|blank_{k}|>")),
        }
        *spaces = 0;
    };
    for ch in text.chars() {
        if ch == ' ' {
            spaces += 1;
            continue;
        }
        flush(&mut out, &mut spaces);
        match ch {
            '\n' => out.push_str("<n>"),
            '\t' => out.push_str("<|tab|>"),
            c => out.push(c),
        }
    }
    flush(&mut out, &mut spaces);
    out
}

/// The text of token `id` under the official decoding conventions when it is one of the
/// conventional tokens (`<n>` → `\n`, `<|tab|>` → tab, `<|blank_N|>` → N spaces); `None`
/// for every other token (decode it as usual).
pub fn token_text(tok: &Tokenizer, id: u32) -> Option<String> {
    let t = tok.vocab().token(id)?.text.as_str();
    match t {
        "<n>" => Some("\n".into()),
        "<|tab|>" => Some("\t".into()),
        _ => {
            let k: usize = t
                .strip_prefix("<|blank_")?
                .strip_suffix("|>")?
                .parse()
                .ok()?;
            (2..=MAX_BLANK).contains(&k).then(|| " ".repeat(k))
        }
    }
}

/// ChatGLM-6B v1's text conventions (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct Glm1Text {
    /// The special tokens (and constants) of the file.
    pub params: Glm1Params,
    /// Whether the file carries a vocabulary (`tokenizer.ggml.model`).
    pub has_vocab: bool,
}

impl TextConventions for Glm1Text {
    /// The official tokenizer's ids for generation: the text with [`preprocess_text`]'s
    /// conventions, no BOS, special-token text never parsed, then, with `add_special`,
    /// `[gMASK] <sop>`. Fails when the model file carries no vocabulary (give ids instead).
    fn encode(
        &self,
        tok: &Tokenizer,
        text: &str,
        add_special: bool,
        _parse_special: bool,
    ) -> Result<Vec<u32>> {
        if !self.has_vocab {
            return Err(LlamaError::InvalidArgument(
                "this chatglm1 model file carries no vocabulary (it was converted without \
                 tokenizer files): give the prompt as token ids (`ggrs run --prompt-ids 5,6,7`, \
                 ending with [gMASK] <sop>)"
                    .into(),
            ));
        }
        // SentencePiece's space prefix only at the start, not again after `<n>` & co.
        let ids = tok.encode_spm_prefix(&preprocess_text(text), false, false, false)?;
        Ok(match add_special {
            true => self.params.prompt(&ids),
            false => ids,
        })
    }

    /// As a plain prompt: the rendered conversation is `[Round i]` text, then
    /// `[gMASK] <sop>`.
    fn encode_chat(&self, tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
        self.encode(tok, text, true, false)
    }

    fn token_text(&self, tok: &Tokenizer, id: u32) -> Option<String> {
        token_text(tok, id)
    }

    /// Always the official format: no Jinja template can express the v1 encoding.
    fn chat_template(
        &self,
        _arch: &'static str,
        _tok: &Tokenizer,
        _jinja: Option<&str>,
    ) -> std::result::Result<ChatTemplate, ChatError> {
        Ok(ChatTemplate::ChatGlm1)
    }
}
