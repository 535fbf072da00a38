//! Granite 4.0-H dense (`granitehybrid`, llama.cpp's `llama_model_granite_hybrid`): Mamba-2
//! layers and attention layers (a layer whose `attention.head_count_kv` is 0 is a Mamba-2
//! layer), Granite's four multipliers (see [`super::granite`]) and a SwiGLU feed-forward in
//! every layer. The Mamba-2 mixer (`mamba-base.cpp`):
//!
//! ```text
//! z | xBC | dt = ssm_in · h                       // d_inner | d_inner + 2·n_group·d_state | n_head
//! xBC = silu(ssm_conv([state | xBCᵀ], conv1d) + conv1d.bias)     // state ← last d_conv − 1
//! x | B | C = xBC                                 // x as [head_dim, n_head]
//! y = ssm_scan(S, x, dt + dt.bias, A, B, C) + x ⊙ D               // S ← the new states
//! y = rms_norm_groups(silu(z) ⊙ y) · ssm_norm     // n_group groups of d_inner / n_group
//! out = ssm_out · y
//! ```
//!
//! Each Mamba-2 layer keeps, per sequence, `(d_conv − 1)·(d_inner + 2·n_group·d_state)`
//! conv values and `d_state·d_inner` SSM values in the recurrent-state cache.

use ggrs_core::gguf::GgufFile;
use ggrs_core::{Context, RopeMode, Tensor};

use super::decoder::{attention_scaled, blk, AttnWeights, FeedForward, QkvBias, Rotary, SwiGlu};
use super::granite::multiplier;
use crate::architecture::{ArchModel, Architecture, StepTensors};
use crate::error::{LlamaError, Result};
use crate::hparams::{HParams, RecurrentLayer};
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::recurrent_cache::{conv_input, layer_state, ssm_key, RecurrentCache};
use crate::step::{
    read_conv_state, ssm_states, state_rows, write_conv_state, StepInputs, StepShape,
};

/// The `granitehybrid` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct GraniteHybrid;

/// The Mamba-2 sizes (`ssm.*` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mamba2Dims {
    /// Convolution width (`ssm.conv_kernel`).
    pub d_conv: usize,
    /// Inner width (`ssm.inner_size`).
    pub d_inner: usize,
    /// State size per channel (`ssm.state_size`).
    pub d_state: usize,
    /// SSM heads (`ssm.time_step_rank`).
    pub n_head: usize,
    /// B/C groups (`ssm.group_count`).
    pub n_group: usize,
}

impl Mamba2Dims {
    /// Reads the `ssm.*` keys of `f` (all required) and checks they fit together.
    pub fn read(f: &GgufFile, hp: &HParams) -> Result<Mamba2Dims> {
        let get = |name: &str| ssm_key(f, hp, name);
        let d = Mamba2Dims {
            d_conv: get("conv_kernel")?,
            d_inner: get("inner_size")?,
            d_state: get("state_size")?,
            n_head: get("time_step_rank")?,
            n_group: get("group_count")?,
        };
        let ok = d.d_conv >= 2
            && d.d_state > 0
            && d.n_head > 0
            && d.n_group > 0
            && d.d_inner.is_multiple_of(d.n_head)
            && d.d_inner.is_multiple_of(d.n_group)
            && d.n_head.is_multiple_of(d.n_group);
        if !ok {
            return Err(LlamaError::BadKey {
                key: format!("{}.ssm.*", hp.arch),
                detail: format!(
                    "{d:?} do not fit: conv width ≥ 2, heads and groups dividing the inner \
                     size, groups dividing the heads"
                ),
            });
        }
        Ok(d)
    }

    /// Channels of the convolution: x, B and C.
    pub fn conv_dim(&self) -> usize {
        self.d_inner + 2 * self.n_group * self.d_state
    }

    /// What a layer keeps per sequence.
    pub fn state(&self) -> RecurrentLayer {
        RecurrentLayer {
            conv: (self.d_conv - 1) * self.conv_dim(),
            ssm: self.d_state * self.d_inner,
        }
    }
}

/// A Mamba-2 mixer's weights.
#[derive(Debug, Clone)]
pub struct Mamba2Weights {
    /// `[n_embd, 2·d_inner + 2·n_group·d_state + n_head]`: z, xBC, dt.
    pub ssm_in: WeightId,
    /// `[d_conv, conv_dim]` f32.
    pub conv1d: WeightId,
    /// `[conv_dim]` f32.
    pub conv1d_b: WeightId,
    /// `[n_head]` f32.
    pub dt_b: WeightId,
    /// `[1, n_head]` f32 (−exp(A_log)).
    pub a: WeightId,
    /// `[1, n_head]` f32.
    pub d: WeightId,
    /// `[d_inner / n_group, n_group]` f32.
    pub norm: WeightId,
    /// `[d_inner, n_embd]`.
    pub ssm_out: WeightId,
}

/// A layer's token mixer.
#[derive(Debug, Clone)]
pub enum GraniteMixer {
    /// Mamba-2 (a recurrent layer).
    Mamba2(Mamba2Weights),
    /// Attention (no Q/K norms).
    Attention(AttnWeights),
}

/// One layer.
#[derive(Debug, Clone)]
pub struct GraniteHybridLayer {
    /// RMSNorm weight before the mixer, `[n_embd]` (the attention's own for an attention
    /// layer).
    pub norm: WeightId,
    /// The mixer.
    pub mixer: GraniteMixer,
    /// RMSNorm weight before the feed-forward.
    pub ffn_norm: WeightId,
    /// The feed-forward.
    pub ffn: SwiGlu,
}

/// Granite's multipliers (absent or 0 in the file: not applied).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GraniteScales {
    /// Input embeddings × it.
    pub embd: Option<f32>,
    /// Key·query products × it instead of 1/√head_dim.
    pub kq: Option<f32>,
    /// Mixer and feed-forward outputs × it before the residual adds.
    pub residual: Option<f32>,
    /// Logits ÷ it.
    pub logit: Option<f32>,
}

/// A loaded Granite 4.0-H model.
#[derive(Debug, Clone)]
pub struct GraniteHybridModel {
    /// Token embeddings.
    pub tok_embd: WeightId,
    /// Final RMSNorm weight.
    pub output_norm: WeightId,
    /// Output projection (the embeddings when tied).
    pub output: WeightId,
    /// The layers.
    pub layers: Vec<GraniteHybridLayer>,
    /// The Mamba-2 sizes.
    pub dims: Mamba2Dims,
    /// The multipliers.
    pub scales: GraniteScales,
    /// Whether the attention layers rotate (`rope.scaling.finetuned`, default true).
    pub rope: bool,
}

impl Architecture for GraniteHybrid {
    fn name(&self) -> &'static str {
        "granitehybrid"
    }

    fn hparams(&self, file: &GgufFile) -> Result<HParams> {
        let mut hp = HParams::from_gguf_hybrid(file)?;
        let dims = Mamba2Dims::read(file, &hp)?;
        for il in 0..hp.n_layer {
            if hp.kv_layers[il].width() == 0 {
                hp.recurrent[il] = Some(dims.state());
            }
        }
        Ok(hp)
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let dims = Mamba2Dims::read(l.file(), hp)?;
        let (e, v) = (hp.n_embd, hp.n_vocab);
        let Mamba2Dims {
            d_conv,
            d_inner,
            d_state,
            n_head,
            n_group,
        } = dims;
        let finetuned_key = format!("{}.rope.scaling.finetuned", hp.arch);
        let rope = match l.file().get(&finetuned_key) {
            None => true,
            Some(v) => v.as_bool().ok_or_else(|| LlamaError::BadKey {
                key: finetuned_key,
                detail: format!("expected a boolean, found {}", v.type_name()),
            })?,
        };
        let scales = GraniteScales {
            embd: multiplier(l, hp, "embedding_scale")?,
            kq: multiplier(l, hp, "attention.scale")?,
            residual: multiplier(l, hp, "residual_scale")?,
            logit: multiplier(l, hp, "logit_scale")?,
        };
        let tok_embd = l.rows("token_embd.weight", &[e, v])?;
        let output_norm = l.f32("output_norm.weight", &[e])?;
        let output = match l.opt_matrix("output.weight", &[e, v])? {
            Some(o) => o,
            None => l.also_matrix(tok_embd)?,
        };
        let d_in_proj = 2 * d_inner + 2 * n_group * d_state + n_head;
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            let n = |s: &str| blk(i, s);
            let (norm, mixer) = match hp.recurrent[i].is_some() {
                true => (
                    l.f32(&n("attn_norm.weight"), &[e])?,
                    GraniteMixer::Mamba2(Mamba2Weights {
                        ssm_in: l.matrix(&n("ssm_in.weight"), &[e, d_in_proj])?,
                        conv1d: l.f32(&n("ssm_conv1d.weight"), &[d_conv, dims.conv_dim()])?,
                        conv1d_b: l.f32(&n("ssm_conv1d.bias"), &[dims.conv_dim()])?,
                        dt_b: l.f32(&n("ssm_dt.bias"), &[n_head])?,
                        a: l.f32(&n("ssm_a"), &[1, n_head])?,
                        d: l.f32(&n("ssm_d"), &[1, n_head])?,
                        norm: l.f32(&n("ssm_norm.weight"), &[d_inner / n_group, n_group])?,
                        ssm_out: l.matrix(&n("ssm_out.weight"), &[d_inner, e])?,
                    }),
                ),
                false => {
                    let a = AttnWeights::load(hp, l, i, QkvBias::Optional, false)?;
                    (a.attn_norm, GraniteMixer::Attention(a))
                }
            };
            layers.push(GraniteHybridLayer {
                norm,
                mixer,
                ffn_norm: l.f32(&n("ffn_norm.weight"), &[e])?,
                ffn: SwiGlu::load(hp, l, i)?,
            });
        }
        Ok(Box::new(GraniteHybridModel {
            tok_embd,
            output_norm,
            output,
            layers,
            dims,
            scales,
            rope,
        }))
    }
}

/// `t · s` when there is a factor.
fn scale_opt(ctx: &mut Context, t: Tensor, s: Option<f32>) -> Result<Tensor> {
    Ok(match s {
        Some(s) => ctx.scale(t, s)?,
        None => t,
    })
}

impl GraniteHybridModel {
    /// Mamba-2 layer `il` on the normed input `h` (`[n_embd, n_tokens]`), reading and
    /// writing its states; `[n_embd, n_tokens]` out.
    #[allow(clippy::too_many_arguments)]
    fn mamba2(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        rs: &RecurrentCache,
        inp: &mut StepInputs,
        shape: StepShape,
        il: usize,
        m: &Mamba2Weights,
        h: Tensor,
    ) -> Result<Tensor> {
        let (r, keeps) = layer_state(Some(rs), il)?;
        let Mamba2Dims {
            d_conv,
            d_inner,
            d_state,
            n_head,
            n_group,
        } = self.dims;
        let (n, n_s) = (shape.n_tokens, shape.n_seqs);
        let n_t = n / n_s;
        let (conv_dim, head_dim) = (self.dims.conv_dim(), d_inner / n_head);
        let zxbcdt = ctx.mul_mat(w[m.ssm_in], h)?; // [d_in_proj, n]
        let row = ctx.meta(zxbcdt)?.nb[1];
        let z = ctx.view_2d(zxbcdt, d_inner, n, row, 0)?;
        let z = ctx.cont(z)?;
        let xbc = ctx.view_3d(zxbcdt, conv_dim, n_t, n_s, row, row * n_t, 4 * d_inner)?;
        let dt = ctx.view_2d(zxbcdt, n_head, n, row, 4 * (d_inner + conv_dim))?;

        // The convolution over the carried inputs and this step's.
        let state = read_conv_state(ctx, rs, inp, r, keeps.conv)?; // [conv, n_s]
        let (conv_x, new_conv) = conv_input(ctx, state, xbc, d_conv)?;
        write_conv_state(ctx, rs, inp, r, new_conv)?;
        let xbc = ctx.ssm_conv(conv_x, w[m.conv1d])?; // [conv_dim, n_t, n_s]
        let xbc = ctx.add(xbc, w[m.conv1d_b])?;
        let xbc = ctx.silu(xbc)?;

        // The scan.
        let (c1, c2) = (4 * conv_dim, 4 * conv_dim * n_t);
        let x = ctx.view_4d(xbc, [head_dim, n_head, n_t, n_s], 4 * head_dim, c1, c2, 0)?;
        let bc_shape = [d_state, n_group, n_t, n_s];
        let bx = ctx.view_4d(xbc, bc_shape, 4 * d_state, c1, c2, 4 * d_inner)?;
        let cx = ctx.view_4d(
            xbc,
            bc_shape,
            4 * d_state,
            c1,
            c2,
            4 * (d_inner + n_group * d_state),
        )?;
        let dt = ctx.cont(dt)?;
        let dt = ctx.add(dt, w[m.dt_b])?;
        let dt = ctx.reshape_3d(dt, n_head, n_t, n_s)?;
        // Every sequence's states updated where they lie in the cache (no copy in or out).
        let ssm = ssm_states(ctx, rs, keeps.conv, [d_state, head_dim, n_head])?;
        let rows = state_rows(ctx, inp, r)?;
        let y = ctx.ssm_scan_in_place(ssm, rows, x, dt, w[m.a], bx, cx)?; // [head_dim, n_head, n_t, n_s]
        let xd = ctx.mul(x, w[m.d])?;
        let y = ctx.add(y, xd)?;
        let y = ctx.reshape_2d(y, d_inner, n)?;
        let y = ctx.swiglu_split(z, y)?;
        let y = ctx.reshape_3d(y, d_inner / n_group, n_group, n)?;
        let y = ctx.rms_norm_mul(y, w[m.norm], hp.rms_eps)?;
        let y = ctx.reshape_2d(y, d_inner, n)?;
        Ok(ctx.mul_mat(w[m.ssm_out], y)?)
    }
}

impl GraniteHybridModel {
    /// The step graph: the logits, or with `hidden` the final hidden states (after the
    /// output norm, every token, before the logit scale) as [`ArchModel::build_embeddings`]
    /// gives them.
    fn forward(
        &self,
        ctx: &mut Context,
        (hp, w, kv, shape): (&HParams, &ImportedWeights, &KvCache, StepShape),
        hidden: bool,
    ) -> Result<StepTensors> {
        let s = self.scales;
        let mut inp = StepInputs::new(ctx, shape, 1, false)?;
        let rs = match kv.recurrent.is_some() {
            true => Some(inp.add_recurrent(ctx, shape, kv)?),
            false => None,
        };
        let rope = self.rope.then(|| Rotary::new(hp, RopeMode::Normal, None));
        let kq_scale = s.kq.unwrap_or(1.0 / (hp.head_dim as f32).sqrt());
        let x = ctx.get_rows(w[self.tok_embd], inp.tokens)?; // [n_embd, n]
        let mut x = scale_opt(ctx, x, s.embd)?;
        for (il, l) in self.layers.iter().enumerate() {
            let mut residual = x;
            let mut cur = match &l.mixer {
                GraniteMixer::Mamba2(m) => {
                    let rs = rs.ok_or_else(|| {
                        LlamaError::InvalidArgument("the cache keeps no recurrent states".into())
                    })?;
                    let h = ctx.rms_norm_mul(x, w[l.norm], hp.rms_eps)?;
                    self.mamba2(ctx, hp, w, rs, &mut inp, shape, il, m, h)?
                }
                GraniteMixer::Attention(a) => {
                    attention_scaled(ctx, hp, w, kv, &inp, shape, il, a, rope, x, kq_scale)?
                }
            };
            if il + 1 == self.layers.len() {
                if let Some(ids) = inp.out_ids {
                    cur = ctx.get_rows(cur, ids)?;
                    residual = ctx.get_rows(residual, ids)?;
                }
            }
            let cur = scale_opt(ctx, cur, s.residual)?;
            let ffn_inp = ctx.add(cur, residual)?;
            let h = ctx.rms_norm_mul(ffn_inp, w[l.ffn_norm], hp.rms_eps)?;
            let out = l.ffn.build(ctx, hp, w, h)?;
            let out = scale_opt(ctx, out, s.residual)?;
            x = ctx.add(out, ffn_inp)?;
        }
        let h = ctx.rms_norm_mul(x, w[self.output_norm], hp.rms_eps)?;
        let logits = match hidden {
            true => h, // [n_embd, n_tokens]
            false => {
                let logits = ctx.mul_mat(w[self.output], h)?; // [n_vocab, n_outputs]
                scale_opt(ctx, logits, s.logit.map(|v| 1.0 / v))?
            }
        };
        ctx.set_name(logits, if hidden { "embd" } else { "logits" })?;
        ctx.set_output(logits)?;
        Ok(StepTensors {
            inputs: inp,
            logits,
        })
    }
}

arch_model_with_forward!(GraniteHybridModel);
