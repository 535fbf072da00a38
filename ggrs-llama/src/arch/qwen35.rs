//! Qwen3.5 (`qwen35`, llama.cpp's `llama_model_qwen35`): gated delta-net (linear attention)
//! layers and gated full-attention layers, each followed by a SwiGLU feed-forward:
//!
//! ```text
//! for each layer:
//!     h = rms_norm(x) · attn_norm
//!     delta-net:  qkv = attn_qkv · h;  z = attn_gate · h
//!                 q | k | v = silu(ssm_conv([state | qkvᵀ], ssm_conv1d))   // state ← last 3
//!                 q, k = l2_norm(q), l2_norm(k)                            // per head
//!                 β = sigmoid(ssm_beta · h);  g = softplus(ssm_alpha · h + ssm_dt.bias) · ssm_a
//!                 o = gated_delta_net(q, k, v, g, β, S)                    // S ← new state
//!                 m = ssm_out · (rms_norm(o) · ssm_norm ⊙ silu(z))
//!     attention:  q | gate = attn_q · h (per head);  k, v = attn_k · h, attn_v · h
//!                 q, k = rms_norm(q) · q_norm, rms_norm(k) · k_norm; NEOX rotary over n_rot
//!                 m = attn_output · (attention(q, k, v) ⊙ sigmoid(gate))
//!     x = x + m
//!     x = x + ffn(rms_norm(x) · post_attention_norm)
//! logits = output · (rms_norm(x) · output_norm)
//! ```
//!
//! Qwen3.5's rotary is "IMROPE" with `rope.dimension_sections`; for text every section gets
//! the token's position, which makes it NEOX rotary over `rope.dimension_count` dimensions
//! (checked at load: no rotated pair may fall in the fourth section). The feed-forward is a
//! [`FeedForward`], so that `qwen35moe` can reuse this file with its experts.

use ggrs_core::gguf::GgufFile;
use ggrs_core::{Context, RopeMode, Tensor};

use super::decoder::{blk, FeedForward, Rotary, SwiGlu};
use crate::architecture::{ArchModel, Architecture, StepTensors};
use crate::error::{LlamaError, Result};
use crate::hparams::{get_usize, HParams, RecurrentLayer};
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::recurrent_cache::{conv_input, layer_state, ssm_key, RecurrentCache};
use crate::step::{
    cached_attention_scaled, read_conv_state, ssm_states, state_rows, write_conv_state, AttnDims,
    StepInputs, StepShape,
};

/// The `qwen35` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct Qwen35;

/// The delta-net sizes (`ssm.*` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaNetDims {
    /// Convolution width (`ssm.conv_kernel`).
    pub d_conv: usize,
    /// Width of a key (and value) head (`ssm.state_size`).
    pub head_dim: usize,
    /// Key heads (`ssm.group_count`).
    pub n_k_heads: usize,
    /// Value heads (`ssm.time_step_rank`).
    pub n_v_heads: usize,
}

impl DeltaNetDims {
    /// Reads the `ssm.*` keys of `f` and checks them.
    pub fn read(f: &GgufFile, hp: &HParams) -> Result<DeltaNetDims> {
        let get = |name: &str| ssm_key(f, hp, name);
        let d = DeltaNetDims {
            d_conv: get("conv_kernel")?,
            head_dim: get("state_size")?,
            n_k_heads: get("group_count")?,
            n_v_heads: get("time_step_rank")?,
        };
        let inner = get("inner_size")?;
        let ok = d.d_conv >= 2
            && d.head_dim > 0
            && d.n_k_heads > 0
            && d.n_v_heads.is_multiple_of(d.n_k_heads)
            && inner == d.head_dim * d.n_v_heads;
        if !ok {
            return Err(LlamaError::BadKey {
                key: format!("{}.ssm.*", hp.arch),
                detail: format!(
                    "{d:?} with inner size {inner} do not fit: key heads must divide value \
                     heads, the inner size be value heads × state size"
                ),
            });
        }
        Ok(d)
    }

    /// Width of all key heads.
    pub fn key_dim(&self) -> usize {
        self.head_dim * self.n_k_heads
    }

    /// Width of all value heads.
    pub fn value_dim(&self) -> usize {
        self.head_dim * self.n_v_heads
    }

    /// Channels of the convolution: q, k and v.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// What a layer keeps per sequence.
    pub fn state(&self) -> RecurrentLayer {
        RecurrentLayer {
            conv: (self.d_conv - 1) * self.conv_dim(),
            ssm: self.head_dim * self.head_dim * self.n_v_heads,
        }
    }
}

/// Which layers are delta-net layers: `attention.recurrent_layers` (one boolean per layer)
/// or, without it, every layer but each `full_attention_interval`-th (default 4).
pub fn recurrent_layers(f: &GgufFile, hp: &HParams) -> Result<Vec<bool>> {
    let key = format!("{}.attention.recurrent_layers", hp.arch);
    if let Some(v) = f.get(&key) {
        let flags: Option<Vec<bool>> = v
            .as_array()
            .map(|a| a.iter().map(|x| x.as_bool()).collect::<Option<Vec<bool>>>())
            .unwrap_or(None);
        return match flags {
            Some(l) if l.len() == hp.n_layer => Ok(l),
            _ => Err(LlamaError::BadKey {
                key,
                detail: format!("expected {} booleans (one per layer)", hp.n_layer),
            }),
        };
    }
    let interval_key = format!("{}.full_attention_interval", hp.arch);
    let interval = get_usize(f, &interval_key)?.unwrap_or(4);
    if interval == 0 {
        return Err(LlamaError::BadKey {
            key: interval_key,
            detail: "0: must be at least 1".into(),
        });
    }
    Ok((0..hp.n_layer).map(|i| (i + 1) % interval != 0).collect())
}

/// Checks that IMROPE with `rope.dimension_sections` is NEOX rotary for text: every rotated
/// pair takes the temporal, height or width position (all the token's position).
fn check_sections(f: &GgufFile, hp: &HParams) -> Result<()> {
    let key = format!("{}.rope.dimension_sections", hp.arch);
    let sections: Vec<usize> = match f.get(&key).and_then(|v| v.as_array()) {
        Some(a) => a
            .iter()
            .filter_map(|x| x.as_u64().map(|v| v as usize))
            .collect(),
        None => return Err(LlamaError::MissingKey(key)),
    };
    let s = |i: usize| sections.get(i).copied().unwrap_or(0);
    for pair in 0..hp.n_rot / 2 {
        if pair >= 3 * s(pair % 3) {
            return Err(LlamaError::BadKey {
                key,
                detail: format!(
                    "{sections:?}: rotated pair {pair} falls outside the text sections (only \
                     text positions are supported)"
                ),
            });
        }
    }
    Ok(())
}

/// A delta-net mixer's weights (`k` = `n_k_heads`, `v` = `n_v_heads`, `d` = `head_dim`).
#[derive(Debug, Clone)]
pub struct DeltaNetWeights {
    /// `[n_embd, conv_dim]`: q | k | v.
    pub qkv: WeightId,
    /// `[n_embd, v·d]`: the output gate z.
    pub gate: WeightId,
    /// `[d_conv, conv_dim]` f32.
    pub conv1d: WeightId,
    /// `[v]` f32.
    pub dt_b: WeightId,
    /// `[v]` f32 (−exp(A_log)).
    pub a: WeightId,
    /// `[n_embd, v]`.
    pub beta: WeightId,
    /// `[n_embd, v]`.
    pub alpha: WeightId,
    /// `[d]` f32.
    pub norm: WeightId,
    /// `[v·d, n_embd]`.
    pub out: WeightId,
}

/// A gated attention layer's weights.
#[derive(Debug, Clone)]
pub struct GatedAttnWeights {
    /// `[n_embd, 2·n_head·head_dim]`: per head, query then gate.
    pub wq: WeightId,
    /// `[n_embd, n_head_kv·head_dim]`.
    pub wk: WeightId,
    /// `[n_embd, n_head_kv·head_dim]`.
    pub wv: WeightId,
    /// `[n_head·head_dim, n_embd]`.
    pub wo: WeightId,
    /// `[head_dim]` f32.
    pub q_norm: WeightId,
    /// `[head_dim]` f32.
    pub k_norm: WeightId,
}

/// A layer's token mixer.
#[derive(Debug, Clone)]
pub enum Qwen35Mixer {
    /// The gated delta-net (a recurrent layer).
    DeltaNet(DeltaNetWeights),
    /// Gated full attention.
    Attention(GatedAttnWeights),
}

/// One layer.
#[derive(Debug, Clone)]
pub struct Qwen35Layer<F> {
    /// RMSNorm weight before the mixer.
    pub attn_norm: WeightId,
    /// The mixer.
    pub mixer: Qwen35Mixer,
    /// RMSNorm weight before the feed-forward (`post_attention_norm`).
    pub post_norm: WeightId,
    /// The feed-forward.
    pub ffn: F,
}

/// A loaded Qwen3.5 model, generic over the feed-forward (SwiGLU for `qwen35`, experts for
/// `qwen35moe`).
#[derive(Debug, Clone)]
pub struct Qwen35Model<F> {
    /// Token embeddings.
    pub tok_embd: WeightId,
    /// Final RMSNorm weight.
    pub output_norm: WeightId,
    /// Output projection (the embeddings when tied).
    pub output: WeightId,
    /// The layers.
    pub layers: Vec<Qwen35Layer<F>>,
    /// The delta-net sizes.
    pub dims: DeltaNetDims,
}

/// [`Architecture::hparams`] of the Qwen3.5 family: the delta-net layers keep no keys and
/// values but a recurrent state.
pub fn hybrid_hparams(file: &GgufFile) -> Result<HParams> {
    let mut hp = HParams::from_gguf(file)?;
    let dims = DeltaNetDims::read(file, &hp)?;
    check_sections(file, &hp)?;
    for (il, rec) in recurrent_layers(file, &hp)?.into_iter().enumerate() {
        if rec {
            hp.recurrent[il] = Some(dims.state());
            hp.kv_layers[il] = crate::hparams::LayerCache::Own {
                width: 0,
                window: None,
            };
        }
    }
    Ok(hp)
}

impl<F: FeedForward> Qwen35Model<F> {
    /// Reads the model, each layer's feed-forward through `ffn`.
    pub fn load(
        hp: &HParams,
        l: &mut WeightLoader<'_>,
        ffn: impl Fn(&mut WeightLoader<'_>, usize) -> Result<F>,
    ) -> Result<Qwen35Model<F>> {
        let dims = DeltaNetDims::read(l.file(), hp)?;
        let (e, v) = (hp.n_embd, hp.n_vocab);
        let tok_embd = l.rows("token_embd.weight", &[e, v])?;
        let output_norm = l.f32("output_norm.weight", &[e])?;
        let output = match l.opt_matrix("output.weight", &[e, v])? {
            Some(o) => o,
            None => l.also_matrix(tok_embd)?,
        };
        let (hd, nh, e_kv) = (hp.head_dim, hp.n_head, hp.n_embd_kv());
        let (nv, vd) = (dims.n_v_heads, dims.value_dim());
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            let n = |s: &str| blk(i, s);
            let attn_norm = l.f32(&n("attn_norm.weight"), &[e])?;
            let post_norm = l.f32(&n("post_attention_norm.weight"), &[e])?;
            let mixer = match hp.recurrent[i].is_some() {
                true => Qwen35Mixer::DeltaNet(DeltaNetWeights {
                    qkv: l.matrix(&n("attn_qkv.weight"), &[e, dims.conv_dim()])?,
                    gate: l.matrix(&n("attn_gate.weight"), &[e, vd])?,
                    conv1d: l.f32(&n("ssm_conv1d.weight"), &[dims.d_conv, dims.conv_dim()])?,
                    dt_b: l.f32(&n("ssm_dt.bias"), &[nv])?,
                    a: l.f32(&n("ssm_a"), &[nv])?,
                    beta: l.matrix(&n("ssm_beta.weight"), &[e, nv])?,
                    alpha: l.matrix(&n("ssm_alpha.weight"), &[e, nv])?,
                    norm: l.f32(&n("ssm_norm.weight"), &[dims.head_dim])?,
                    out: l.matrix(&n("ssm_out.weight"), &[vd, e])?,
                }),
                false => Qwen35Mixer::Attention(GatedAttnWeights {
                    wq: l.matrix(&n("attn_q.weight"), &[e, 2 * nh * hd])?,
                    wk: l.matrix(&n("attn_k.weight"), &[e, e_kv])?,
                    wv: l.matrix(&n("attn_v.weight"), &[e, e_kv])?,
                    wo: l.matrix(&n("attn_output.weight"), &[nh * hd, e])?,
                    q_norm: l.f32(&n("attn_q_norm.weight"), &[hd])?,
                    k_norm: l.f32(&n("attn_k_norm.weight"), &[hd])?,
                }),
            };
            layers.push(Qwen35Layer {
                attn_norm,
                mixer,
                post_norm,
                ffn: ffn(l, i)?,
            });
        }
        Ok(Qwen35Model {
            tok_embd,
            output_norm,
            output,
            layers,
            dims,
        })
    }

    /// Delta-net layer `il` on the normed input `h` (`[n_embd, n_tokens]`), reading and
    /// writing its states; `[n_embd, n_tokens]` out.
    #[allow(clippy::too_many_arguments)]
    fn delta_net(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        rs: &RecurrentCache,
        inp: &mut StepInputs,
        shape: StepShape,
        il: usize,
        m: &DeltaNetWeights,
        h: Tensor,
    ) -> Result<Tensor> {
        let (r, keeps) = layer_state(Some(rs), il)?;
        let DeltaNetDims {
            d_conv,
            head_dim: d,
            n_k_heads: nk,
            n_v_heads: nv,
        } = self.dims;
        let (n, n_s) = (shape.n_tokens, shape.n_seqs);
        let n_t = n / n_s;
        let conv_dim = self.dims.conv_dim();
        let qkv = ctx.mul_mat(w[m.qkv], h)?; // [conv_dim, n]
        let z = ctx.mul_mat(w[m.gate], h)?; // [nv·d, n]
        let beta = ctx.mul_mat(w[m.beta], h)?; // [nv, n]
        let beta = ctx.sigmoid(beta)?;
        let beta = ctx.reshape_4d(beta, 1, nv, n_t, n_s)?;
        let alpha = ctx.mul_mat(w[m.alpha], h)?; // [nv, n]
        let alpha = ctx.add(alpha, w[m.dt_b])?;
        let alpha = ctx.softplus(alpha)?;
        let g = ctx.mul(alpha, w[m.a])?;
        let g = ctx.reshape_4d(g, 1, nv, n_t, n_s)?;

        // The convolution over the carried inputs and this step's.
        let state = read_conv_state(ctx, rs, inp, r, keeps.conv)?; // [conv, n_s]
        let qkv = ctx.reshape_3d(qkv, conv_dim, n_t, n_s)?;
        let (conv_x, new_conv) = conv_input(ctx, state, qkv, d_conv)?;
        write_conv_state(ctx, rs, inp, r, new_conv)?;
        let conv = ctx.ssm_conv(conv_x, w[m.conv1d])?; // [conv_dim, n_t, n_s]
        let conv = ctx.silu(conv)?;

        // q, k (L2-normalised per head as rms_norm(x, eps/d)/√d) and v.
        let (c1, c2) = (4 * conv_dim, 4 * conv_dim * n_t);
        let q = ctx.view_4d(conv, [d, nk, n_t, n_s], 4 * d, c1, c2, 0)?;
        let k = ctx.view_4d(conv, [d, nk, n_t, n_s], 4 * d, c1, c2, 4 * nk * d)?;
        let v = ctx.view_4d(conv, [d, nv, n_t, n_s], 4 * d, c1, c2, 8 * nk * d)?;
        let (eps, inv) = (hp.rms_eps / d as f32, 1.0 / (d as f32).sqrt());
        let q = ctx.rms_norm(q, eps)?;
        let q = ctx.scale(q, inv)?;
        let k = ctx.rms_norm(k, eps)?;
        let k = ctx.scale(k, inv)?;

        // Every sequence's state updated where it lies in the cache (no copy in or out).
        let s = ssm_states(ctx, rs, keeps.conv, [d, d, nv])?;
        let rows = state_rows(ctx, inp, r)?;
        let o = ctx.gated_delta_net_in_place(q, k, v, g, beta, s, rows)?; // [d, nv, n_t, n_s]

        // Gated RMSNorm per head, then the output projection.
        let o = ctx.rms_norm_mul(o, w[m.norm], hp.rms_eps)?;
        let z = ctx.reshape_4d(z, d, nv, n_t, n_s)?;
        let z = ctx.silu(z)?;
        let o = ctx.mul(o, z)?;
        let o = ctx.reshape_2d(o, d * nv, n)?;
        Ok(ctx.mul_mat(w[m.out], o)?)
    }

    /// Gated attention layer `il` on the normed input `h`; `[n_embd, n_tokens]` out.
    #[allow(clippy::too_many_arguments)]
    fn gated_attention(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        inp: &StepInputs,
        shape: StepShape,
        il: usize,
        a: &GatedAttnWeights,
        h: Tensor,
    ) -> Result<Tensor> {
        let n = shape.n_tokens;
        let (hd, nh, nhkv) = (hp.head_dim, hp.n_head, hp.n_head_kv);
        let qg = ctx.mul_mat(w[a.wq], h)?; // [2·nh·hd, n]
        let k = ctx.mul_mat(w[a.wk], h)?;
        let v = ctx.mul_mat(w[a.wv], h)?;
        let q = ctx.view_3d(qg, hd, nh, n, 8 * hd, 8 * hd * nh, 0)?;
        let q = ctx.rms_norm_mul(q, w[a.q_norm], hp.rms_eps)?;
        let k = ctx.reshape_3d(k, hd, nhkv, n)?;
        let k = ctx.rms_norm_mul(k, w[a.k_norm], hp.rms_eps)?;
        let gate = ctx.view_3d(qg, hd, nh, n, 8 * hd, 8 * hd * nh, 4 * hd)?;
        let gate = ctx.cont(gate)?;
        let gate = ctx.reshape_2d(gate, hd * nh, n)?;
        let rope = Rotary::new(hp, RopeMode::Neox, None);
        let q = rope.apply(ctx, q, inp.pos)?;
        let k = rope.apply(ctx, k, inp.pos)?;
        let k2 = ctx.reshape_2d(k, hd * nhkv, n)?;
        let dims = AttnDims {
            head_dim: hd,
            n_head: nh,
            n_head_kv: nhkv,
        };
        let kq_scale = 1.0 / (hd as f32).sqrt();
        let attn = cached_attention_scaled(ctx, kv, il, inp, shape, dims, q, [k2, v], kq_scale)?;
        let gate = ctx.sigmoid(gate)?;
        let attn = ctx.mul(attn, gate)?;
        Ok(ctx.mul_mat(w[a.wo], attn)?)
    }
}

impl<F: FeedForward> Qwen35Model<F> {
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
        let mut x = ctx.get_rows(w[self.tok_embd], inp.tokens)?; // [n_embd, n]
        for (il, l) in self.layers.iter().enumerate() {
            let h = ctx.rms_norm_mul(x, w[l.attn_norm], hp.rms_eps)?;
            let cur = match &l.mixer {
                Qwen35Mixer::DeltaNet(m) => {
                    let rs = rs.ok_or_else(|| {
                        LlamaError::InvalidArgument("the cache keeps no recurrent states".into())
                    })?;
                    self.delta_net(ctx, hp, w, rs, &mut inp, shape, il, m, h)?
                }
                Qwen35Mixer::Attention(a) => {
                    self.gated_attention(ctx, hp, w, kv, &inp, shape, il, a, h)?
                }
            };
            let cur = ctx.add(cur, x)?;
            let post = ctx.rms_norm_mul(cur, w[l.post_norm], hp.rms_eps)?;
            let out = l.ffn.build(ctx, hp, w, post)?;
            x = ctx.add(out, cur)?;
        }
        let mut h = ctx.rms_norm_mul(x, w[self.output_norm], hp.rms_eps)?;
        if let Some(ids) = inp.out_ids {
            h = ctx.get_rows(h, ids)?;
        }
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

arch_model_with_forward!(Qwen35Model<F> where F: FeedForward);

impl Architecture for Qwen35 {
    fn name(&self) -> &'static str {
        "qwen35"
    }

    fn hparams(&self, file: &GgufFile) -> Result<HParams> {
        hybrid_hparams(file)
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let model = Qwen35Model::load(hp, l, |l, i| SwiGlu::load(hp, l, i))?;
        Ok(Box::new(model))
    }
}
