//! BERT encoders (`bert`, llama.cpp's `build_bert` for `LLM_ARCH_BERT`): the layout of
//! all-MiniLM-L6-v2, BGE, E5 and the BERT cross-encoders; and `nomic-bert`
//! (nomic-embed-text), the same graph with rotary positions and a SwiGLU feed-forward.
//! Embedding models: they give hidden states for [`crate::embed::Embedder`], not logits.
//!
//! ```text
//! x = token_embd[tokens] + token_types[0]                   // [n_embd, n_tokens]
//! x = layer_norm(x + position_embd[pos]) · w + b            // bert; nomic-bert: no positions
//! for each layer:
//!     q, k, v = Wq·x + bq, Wk·x + bk, Wv·x + bv              // or one fused Wqkv (attn_qkv)
//!     q, k = rope_neox(q, pos), rope_neox(k, pos)            // nomic-bert only
//!     a = attention of every token over its whole input   // not causal
//!     x = layer_norm(Wo·a + bo + x)                          // attn_output_norm
//!     f = gelu(W_up·x + b_up)                                // bert
//!     f = silu(W_gate·x) · (W_up·x)                          // nomic-bert (no FFN biases)
//!     x = layer_norm(W_down·f + b_down + x)                  // layer_output_norm
//! ```
//!
//! No final norm (the layers are post-norm). Keys and values are rounded to f16 as llama.cpp
//! rounds them for flash attention; the token type is always 0 (as llama.cpp, "sentence
//! A"). A reranker adds a classification head (`cls`, `cls.output`) on the first token's
//! hidden state: see [`ArchModel::classifier`]. nomic-bert's FFN biases, where a file has
//! them, are not used (as llama.cpp's graph does not use them).

use ggrs_core::{Context, DType, RopeMode, Tensor};

use super::decoder::{blk, Rotary};
use super::decoder::{project_qkv, QkvViews, QkvWeights};
use crate::architecture::{ArchModel, Architecture, StepTensors};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::step::{add_opt, cached_attention, layer_norm, AttnDims, StepInputs, StepShape};

/// An architecture of the BERT family: [`BERT`] or [`NOMIC_BERT`].
#[derive(Debug, Clone, Copy)]
pub struct Bert {
    name: &'static str,
}

/// BERT (`bert`): all-MiniLM-L6-v2, BGE, E5, BERT cross-encoders.
pub const BERT: Bert = Bert { name: "bert" };

/// nomic-bert (`nomic-bert`): nomic-embed-text v1/v1.5.
pub const NOMIC_BERT: Bert = Bert { name: "nomic-bert" };

/// One BERT layer (`e` = `n_embd`, `f` = `n_ff`).
#[derive(Debug, Clone)]
pub struct BertLayer {
    /// Query, key and value projections `[e, e]` (or one fused `[e, 3e]`) and their biases.
    pub qkv: QkvWeights,
    /// Output projection `[e, e]`.
    pub wo: WeightId,
    /// Output bias `[e]`.
    pub bo: Option<WeightId>,
    /// LayerNorm after attention (weight, bias).
    pub attn_out_norm: (WeightId, Option<WeightId>),
    /// Up projection `[e, f]`.
    pub up: WeightId,
    /// Up bias (`bert`).
    pub up_b: Option<WeightId>,
    /// Gate projection `[e, f]` of a SwiGLU feed-forward (`nomic-bert`); `None`: GELU.
    pub gate: Option<WeightId>,
    /// Down projection `[f, e]`.
    pub down: WeightId,
    /// Down bias (`bert`).
    pub down_b: Option<WeightId>,
    /// LayerNorm after the feed-forward (weight, bias).
    pub out_norm: (WeightId, Option<WeightId>),
}

/// A loaded BERT model.
#[derive(Debug, Clone)]
pub struct BertModel {
    /// `"bert"` or `"nomic-bert"`.
    pub arch: &'static str,
    /// Token embeddings, `[e, n_vocab]`.
    pub tok_embd: WeightId,
    /// Token-type embeddings, `[e, n_types]` (row 0 is added to every token).
    pub type_embd: Option<WeightId>,
    /// Position embeddings, `[e, n_ctx_train]` (`bert`); `None`: rotary positions
    /// (`nomic-bert`).
    pub pos_embd: Option<WeightId>,
    /// LayerNorm of the embeddings (weight, bias).
    pub embd_norm: (WeightId, Option<WeightId>),
    /// The layers.
    pub layers: Vec<BertLayer>,
    /// Reranker head: pooler `[e, e]` + bias, then `tanh`.
    pub cls: Option<(WeightId, Option<WeightId>)>,
    /// Reranker head: output `[e, n_cls_out]` + bias.
    pub cls_out: Option<(WeightId, Option<WeightId>)>,
}

impl Architecture for Bert {
    fn name(&self) -> &'static str {
        self.name
    }

    fn hparams(&self, file: &ggrs_core::gguf::GgufFile) -> Result<HParams> {
        HParams::from_gguf_eps(file, "attention.layer_norm_epsilon")
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        Ok(Box::new(BertModel::load(self.name, hp, l)?))
    }
}

impl BertModel {
    /// Reads a `bert` or `nomic-bert` (`arch`) model's weights.
    pub fn load(arch: &'static str, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<BertModel> {
        let (e, f) = (hp.n_embd, hp.n_ff);
        let nomic = arch == "nomic-bert";
        if hp.n_head_kv != hp.n_head || hp.head_dim * hp.n_head != e {
            return Err(LlamaError::BadKey {
                key: format!("{arch}.attention.head_count_kv"),
                detail: "BERT has as many key/value heads as query heads, covering n_embd".into(),
            });
        }
        let norm = |l: &mut WeightLoader<'_>, name: &str| -> Result<(WeightId, Option<WeightId>)> {
            Ok((
                l.f32(&format!("{name}.weight"), &[e])?,
                l.opt_f32(&format!("{name}.bias"), &[e])?,
            ))
        };
        let tok_embd = l.rows("token_embd.weight", &[e, hp.n_vocab])?;
        let n_types = l
            .file()
            .tensor("token_types.weight")
            .map(|t| t.ne[1].max(1));
        let type_embd = match n_types {
            Some(n) => Some(l.rows("token_types.weight", &[e, n])?),
            None => None,
        };
        let pos_embd = match nomic {
            true => None,
            false => Some(l.rows("position_embd.weight", &[e, hp.n_ctx_train])?),
        };
        let embd_norm = norm(l, "token_embd_norm")?;
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            let n = |s: &str| blk(i, s);
            let qkv = QkvWeights::load(l, i, [e, e, e])?;
            let wo = l.matrix(&n("attn_output.weight"), &[e, e])?;
            let bo = l.opt_f32(&n("attn_output.bias"), &[e])?;
            let attn_out_norm = norm(l, &n("attn_output_norm"))?;
            let up = l.matrix(&n("ffn_up.weight"), &[e, f])?;
            let gate = match nomic {
                true => Some(l.matrix(&n("ffn_gate.weight"), &[e, f])?),
                false => None,
            };
            let (up_b, down_b) = match nomic {
                true => (None, None),
                false => (
                    l.opt_f32(&n("ffn_up.bias"), &[f])?,
                    l.opt_f32(&n("ffn_down.bias"), &[e])?,
                ),
            };
            layers.push(BertLayer {
                qkv,
                wo,
                bo,
                attn_out_norm,
                up,
                up_b,
                gate,
                down: l.matrix(&n("ffn_down.weight"), &[f, e])?,
                down_b,
                out_norm: norm(l, &n("layer_output_norm"))?,
            });
        }
        let cls = match l.opt_matrix("cls.weight", &[e, e])? {
            Some(w) => Some((w, l.opt_f32("cls.bias", &[e])?)),
            None => None,
        };
        let n_cls_out = l.file().tensor("cls.output.weight").map(|t| t.ne[1]);
        let cls_out = match n_cls_out {
            Some(n) => Some((
                l.matrix("cls.output.weight", &[e, n])?,
                l.opt_f32("cls.output.bias", &[n])?,
            )),
            None => None,
        };
        Ok(BertModel {
            arch,
            tok_embd,
            type_embd,
            pos_embd,
            embd_norm,
            layers,
            cls,
            cls_out,
        })
    }
}

impl ArchModel for BertModel {
    fn build(
        &self,
        _ctx: &mut Context,
        _hp: &HParams,
        _w: &ImportedWeights,
        _kv: &KvCache,
        _shape: StepShape,
    ) -> Result<StepTensors> {
        Err(LlamaError::NotGenerative { arch: self.arch })
    }

    fn build_embeddings(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<Option<StepTensors>> {
        let inp = StepInputs::new(ctx, shape, 1, false)?;
        let n = shape.n_tokens;
        let (e, eps) = (hp.n_embd, hp.rms_eps);
        let mut x = ctx.get_rows(w[self.tok_embd], inp.tokens)?; // [e, n]
        if let Some(types) = w.opt(self.type_embd) {
            // Row 0 of the token types (every token is of type 0).
            let zero = ctx.new_tensor_1d(DType::I32, 1)?;
            ctx.set_name(zero, "inp_type_zero")?;
            if !ctx.is_no_alloc() {
                ctx.set_i32(zero, &[0])?;
            }
            let row0 = ctx.get_rows(types, zero)?; // [e, 1]
            x = ctx.add(x, row0)?;
        }
        if let Some(pos_embd) = self.pos_embd {
            let pos = ctx.get_rows(w[pos_embd], inp.pos)?;
            x = ctx.add(pos, x)?;
        }
        let mut x = layer_norm(ctx, x, w[self.embd_norm.0], w.opt(self.embd_norm.1), eps)?;
        let dims = AttnDims {
            head_dim: hp.head_dim,
            n_head: hp.n_head,
            n_head_kv: hp.n_head,
        };
        let rope = self
            .pos_embd
            .is_none()
            .then(|| Rotary::new(hp, RopeMode::Neox, None));
        for (il, l) in self.layers.iter().enumerate() {
            let QkvViews { q, k, v } = project_qkv(ctx, hp, w, &l.qkv, x, n)?;
            let (q, k) = match (rope, &l.qkv) {
                (Some(r), _) => (r.apply(ctx, q, inp.pos)?, r.apply(ctx, k, inp.pos)?),
                // Views of a fused product made contiguous (the same values).
                (None, QkvWeights::Fused { .. }) => (ctx.cont(q)?, ctx.cont(k)?),
                (None, QkvWeights::Split { .. }) => (q, k),
            };
            let k = ctx.reshape_2d(k, e, n)?;
            let a = cached_attention(ctx, kv, il, &inp, shape, dims, q, [k, v])?; // [e, n]
            let o = ctx.mul_mat(w[l.wo], a)?;
            let o = add_opt(ctx, o, w.opt(l.bo))?;
            let h = ctx.add(o, x)?;
            let (nw, nb) = l.attn_out_norm;
            let ffn_inp = layer_norm(ctx, h, w[nw], w.opt(nb), eps)?;
            let up = ctx.mul_mat(w[l.up], ffn_inp)?;
            let up = add_opt(ctx, up, w.opt(l.up_b))?;
            let act = match l.gate {
                Some(g) => {
                    let gate = ctx.mul_mat(w[g], ffn_inp)?;
                    ctx.swiglu_split(gate, up)?
                }
                // GELU as ggml's CPU kernel computes it (the f16 table).
                None => ctx.gelu_ggml(up)?,
            };
            let down = ctx.mul_mat(w[l.down], act)?;
            let down = add_opt(ctx, down, w.opt(l.down_b))?;
            let h = ctx.add(down, ffn_inp)?;
            let (nw, nb) = l.out_norm;
            x = layer_norm(ctx, h, w[nw], w.opt(nb), eps)?;
        }
        debug_assert_eq!(ctx.meta(x)?.ne[0], e);
        ctx.set_name(x, "embd")?;
        ctx.set_output(x)?;
        Ok(Some(StepTensors {
            inputs: inp,
            logits: x,
        }))
    }

    fn embeddings_causal(&self) -> bool {
        false
    }

    fn classifier(
        &self,
        ctx: &mut Context,
        _hp: &HParams,
        w: &ImportedWeights,
        x: Tensor,
    ) -> Result<Option<Tensor>> {
        let Some((out, out_b)) = self.cls_out else {
            return Ok(None);
        };
        let mut cur = x;
        if let Some((pool, pool_b)) = self.cls {
            cur = ctx.mul_mat(w[pool], cur)?;
            cur = add_opt(ctx, cur, w.opt(pool_b))?;
            cur = ctx.tanh(cur)?;
        }
        let cur = ctx.mul_mat(w[out], cur)?;
        Ok(Some(add_opt(ctx, cur, w.opt(out_b))?))
    }
}
