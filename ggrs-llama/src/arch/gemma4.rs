//! Gemma 4 (`gemma4`, llama.cpp's `llama_model_gemma4`): Gemma 3's block with layers of two
//! shapes, caches shared between layers, per-layer token embeddings and a scale per layer:
//!
//! ```text
//! x = token_embd[tokens] · √n_embd
//! ple = per_layer_inputs(tokens, x)               // [n_ple, n, n_layer], see below
//! for each layer l (local or global: attention.sliding_window_pattern, one flag per layer):
//!     h = rms_norm(x) · attn_norm
//!     q = rms_norm(Wq·h) · q_norm                  // per head; local heads key_length_swa
//!                                                  // wide, global heads key_length
//!     if l has a cache of its own (l < n_layer − shared_kv_layers):
//!         k = Wk·h; v = Wv·h, or k when the layer has no Wv (K = V)
//!         k = rms_norm(k) · k_norm; v = rms_norm(v)        // per head; v without weight
//!         write rope(k), v to layer l's cache
//!     else: attend over the cache of the last earlier layer of its kind with one
//!     q = rope(q)       // NEOX; local: rope.dimension_count_swa dims, base freq_base_swa;
//!                       // global: rope.dimension_count dims, base freq_base, rope_freqs
//!     a = softmax(K·q + mask_l) · V               // scale 1; local: sliding window
//!     x = x + rms_norm(Wo·a) · post_attention_norm
//!     x = x + rms_norm(W_down·(gelu(W_gate·h') · W_up·h')) · post_ffw_norm,
//!             h' = rms_norm(x) · ffn_norm         // a layer with a router (26B-A4B) adds
//!                                                  // routed experts: see [`super::gemma4_moe`]
//!     x = x + rms_norm(proj · (gelu(inp_gate · x) ⊙ ple[l])) · post_norm   // with PLE
//!     x = x · layer_output_scale                   // when present
//! logits = c·tanh(output · (rms_norm(x) · output_norm) / c)   // c = final_logit_softcapping
//!
//! per_layer_inputs: (per_layer_token_embd[tokens] · √n_ple
//!                   + rms_norm(per_layer_model_proj · x / √n_embd) · per_layer_proj_norm)
//!                   · 1/√2, split into n_layer vectors of n_ple per token
//! ```
//!
//! Every layer runs on every token; the logits' rows are picked after the output norm, as
//! llama.cpp does for this architecture. Feed-forward widths may differ per layer (a
//! `feed_forward_length` array: E2B/E4B's double-wide MLP in the shared-cache layers). Not
//! covered: the fused `attn_qkv` layout.

use ggrs_core::gguf::GgufFile;
use ggrs_core::{Context, RopeMode, Tensor};

use super::decoder::{blk, Rotary};
use super::gemma2::{geglu_ffn, positive, sliding_window};
use super::gemma4_moe::Gemma4Moe;
use super::gpt_oss::swa_layers;
use crate::architecture::{ArchModel, Architecture, SlidingWindowState, StepState, StepTensors};
use crate::error::{LlamaError, Result};
use crate::hparams::{get_f32, get_usize, get_usize_or_layers, HParams, LayerCache};
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::step::{attend_cache, AttnDims, AttnScores, StepInputs, StepShape};

/// Gemma 4 (`gemma4`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Gemma4;

/// The shape of one Gemma 4 layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemma4LayerShape {
    /// Whether the layer attends through the sliding window.
    pub local: bool,
    /// Width of one head (`attention.key_length_swa` for local layers, `key_length` else).
    pub head_dim: usize,
    /// KV heads of the cache the layer reads (`attention.head_count_kv`, per layer).
    pub n_head_kv: usize,
    /// The layer whose cache it reads: itself, or the last earlier layer of its kind with
    /// a cache (`attention.shared_kv_layers`).
    pub kv_source: usize,
}

/// Gemma 4's constants beyond [`HParams`].
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4Consts {
    /// Positions a local layer's query sees, its own included (`attention.sliding_window`).
    pub window: u32,
    /// Every layer's shape.
    pub layers: Vec<Gemma4LayerShape>,
    /// Rotated dimensions of the local layers (`rope.dimension_count_swa`).
    pub n_rot_swa: usize,
    /// Rotary base of the local layers (`rope.freq_base_swa`, default 10000).
    pub freq_base_swa: f32,
    /// Width of each layer's per-layer embedding (`embedding_length_per_layer_input`; 0:
    /// none).
    pub n_ple: usize,
    /// Logits are soft-capped to `±c` (`final_logit_softcapping`) when present.
    pub final_softcap: Option<f32>,
}

impl Gemma4Consts {
    /// Reads the constants from `f` (keys under `hp.arch`), as llama.cpp's loader does.
    pub fn from_gguf(f: &GgufFile, hp: &HParams) -> Result<Gemma4Consts> {
        let k = |s: &str| format!("{}.{s}", hp.arch);
        let n_layer = hp.n_layer;
        let window = sliding_window(f, &k("attention.sliding_window"), None)?;
        let pattern = k("attention.sliding_window_pattern");
        if f.get(&pattern).is_none() {
            return Err(LlamaError::MissingKey(pattern));
        }
        let local = swa_layers(f, &pattern, n_layer, 0)?;
        let required = |key: String| -> Result<usize> {
            get_usize(f, &key)?.ok_or(LlamaError::MissingKey(key))
        };
        let hd_swa = required(k("attention.key_length_swa"))?;
        // Values as wide as keys, in both kinds of layer (llama.cpp requires it).
        let widths = [
            (
                "attention.value_length_swa",
                Some(required(k("attention.value_length_swa"))?),
                hd_swa,
            ),
            (
                "attention.value_length",
                get_usize(f, &k("attention.value_length"))?,
                hp.head_dim,
            ),
        ];
        for (key, v, width) in widths {
            if v.is_some_and(|v| v != width) {
                return Err(LlamaError::BadKey {
                    key: k(key),
                    detail: format!("values must be as wide as keys ({width})"),
                });
            }
        }
        if hd_swa == 0 || hd_swa > 1 << 20 {
            return Err(LlamaError::BadKey {
                key: k("attention.key_length_swa"),
                detail: format!("{hd_swa} must be between 1 and {}", 1 << 20),
            });
        }
        let n_rot_swa = get_usize(f, &k("rope.dimension_count_swa"))?.unwrap_or(hp.n_rot);
        if n_rot_swa > hd_swa || n_rot_swa % 2 != 0 {
            return Err(LlamaError::BadKey {
                key: k("rope.dimension_count_swa"),
                detail: format!("{n_rot_swa} must be even and at most the head size {hd_swa}"),
            });
        }
        let freq_base_swa = positive(f, &k("rope.freq_base_swa"), 10000.0)?;
        let n_ple = required(k("embedding_length_per_layer_input"))?;
        if n_ple > 1 << 20 {
            return Err(LlamaError::BadKey {
                key: k("embedding_length_per_layer_input"),
                detail: format!("{n_ple} is larger than any model's"),
            });
        }
        let final_softcap = match get_f32(f, &k("final_logit_softcapping"))? {
            None | Some(0.0) => None,
            Some(_) => Some(positive(f, &k("final_logit_softcapping"), 30.0)?),
        };
        let shared_key = k("attention.shared_kv_layers");
        let shared = get_usize(f, &shared_key)?.unwrap_or(0);
        let with_kv = n_layer.saturating_sub(shared);
        if shared > 0 && with_kv < 2 {
            return Err(LlamaError::BadKey {
                key: shared_key,
                detail: format!("{shared} of {n_layer} layers: at least two must have a cache"),
            });
        }
        let kv_heads = get_usize_or_layers(f, &k("attention.head_count_kv"), n_layer)?
            .unwrap_or_else(|| vec![hp.n_head; n_layer]);
        let mut layers: Vec<Gemma4LayerShape> = Vec::with_capacity(n_layer);
        for (il, &is_local) in local.iter().enumerate() {
            let kv_source = match il < with_kv {
                true => il,
                // As llama.cpp: the last local or the last global layer with a cache.
                false => with_kv - if is_local { 2 } else { 1 },
            };
            let head_dim = if is_local { hd_swa } else { hp.head_dim };
            let src = layers.get(kv_source).copied();
            if src.is_some_and(|s| s.local != is_local) {
                return Err(LlamaError::BadKey {
                    key: pattern,
                    detail: format!(
                        "layer {il} would share the cache of layer {kv_source}, which is of \
                         the other kind (local/global)"
                    ),
                });
            }
            layers.push(Gemma4LayerShape {
                local: is_local,
                head_dim,
                n_head_kv: kv_heads[kv_source],
                kv_source,
            });
        }
        Ok(Gemma4Consts {
            window,
            layers,
            n_rot_swa,
            freq_base_swa,
            n_ple,
            final_softcap,
        })
    }

    /// What each layer keeps in the KV cache.
    pub fn kv_layers(&self) -> Vec<LayerCache> {
        let window = self.window;
        self.layers
            .iter()
            .enumerate()
            .map(|(il, s)| match s.kv_source == il {
                true => LayerCache::Own {
                    width: s.head_dim * s.n_head_kv,
                    window: s.local.then_some(window),
                },
                false => LayerCache::Shares(s.kv_source),
            })
            .collect()
    }
}

/// One Gemma 4 block (`q` = this layer's `n_head · head_dim`, `kv` = `n_head_kv · head_dim`,
/// `e` = `n_embd`, `f` = `n_ff`, `p` = the per-layer embedding width).
#[derive(Debug, Clone)]
pub struct Gemma4Layer {
    /// RMSNorm weight before attention, `[e]`.
    pub attn_norm: WeightId,
    /// Query projection, `[e, q]`.
    pub wq: WeightId,
    /// Key projection, `[e, kv]` (none in a layer that reads another's cache).
    pub wk: Option<WeightId>,
    /// Value projection, `[e, kv]` (none: the values are the keys' projection).
    pub wv: Option<WeightId>,
    /// Output projection, `[q, e]`.
    pub wo: WeightId,
    /// RMSNorm weight of each query head, `[head_dim]`.
    pub q_norm: WeightId,
    /// RMSNorm weight of each key head, `[head_dim]` (with `wk`).
    pub k_norm: Option<WeightId>,
    /// RMSNorm weight of the attention output, `[e]`.
    pub attn_post_norm: WeightId,
    /// The feed-forward weights `[ffn_norm, gate, up, down, post_ffw_norm]`.
    pub ffn: [WeightId; 5],
    /// Per-layer embedding gate `[e, p]`, projection `[p, e]` and RMSNorm weight `[e]`.
    pub ple: Option<[WeightId; 3]>,
    /// The layer's output factor, `[1]` (`layer_output_scale.weight`).
    pub out_scale: Option<WeightId>,
    /// The routed experts beside the feed-forward (Gemma 4 26B-A4B), when the layer has a
    /// router.
    pub moe: Option<Gemma4Moe>,
}

/// The per-layer token embeddings: table `[p · n_layer, n_vocab]`, projection
/// `[e, p · n_layer]` and RMSNorm weight `[p]`.
#[derive(Debug, Clone, Copy)]
pub struct PerLayerEmbeddings {
    /// `per_layer_token_embd.weight`.
    pub tok_embd: WeightId,
    /// `per_layer_model_proj.weight`.
    pub model_proj: WeightId,
    /// `per_layer_proj_norm.weight`.
    pub proj_norm: WeightId,
}

/// A loaded Gemma 4 model.
#[derive(Debug, Clone)]
pub struct Gemma4Model {
    /// Token embeddings, `[n_embd, n_vocab]`.
    pub tok_embd: WeightId,
    /// Final RMSNorm weight, `[n_embd]`.
    pub output_norm: WeightId,
    /// Output projection (the embeddings when tied).
    pub output: WeightId,
    /// Frequency factors of the global layers' rotary, `[head_dim / 2]`.
    pub rope_freqs: Option<WeightId>,
    /// Per-layer embeddings, when the model has them.
    pub ple: Option<PerLayerEmbeddings>,
    /// Transformer blocks.
    pub layers: Vec<Gemma4Layer>,
    /// Layer shapes, window, local rotary, soft-cap.
    pub consts: Gemma4Consts,
}

impl Architecture for Gemma4 {
    fn name(&self) -> &'static str {
        "gemma4"
    }

    fn hparams(&self, file: &GgufFile) -> Result<HParams> {
        let mut hp = HParams::from_gguf(file)?;
        hp.kv_layers = Gemma4Consts::from_gguf(file, &hp)?.kv_layers();
        Ok(hp)
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let consts = Gemma4Consts::from_gguf(l.file(), hp)?;
        let (e, nh, p) = (hp.n_embd, hp.n_head, consts.n_ple);
        let (tok_embd, output_norm, output) = l.embeddings_and_output()?;
        let pl = p * hp.n_layer;
        let ple = match p {
            0 => None,
            _ => Some(PerLayerEmbeddings {
                tok_embd: l.rows("per_layer_token_embd.weight", &[pl, hp.n_vocab])?,
                model_proj: l.matrix("per_layer_model_proj.weight", &[e, pl])?,
                proj_norm: l.f32("per_layer_proj_norm.weight", &[p])?,
            }),
        };
        let rope_freqs = l.opt_f32("rope_freqs.weight", &[hp.n_rot / 2])?;
        let mut layers = Vec::with_capacity(hp.n_layer);
        for (i, s) in consts.layers.iter().enumerate() {
            let n = |x: &str| blk(i, x);
            let (d, own) = (s.head_dim, s.kv_source == i);
            // Per-layer widths: the E2B/E4B files give the shared-cache layers a double-wide
            // MLP through a `feed_forward_length` array.
            let (kv, f) = (d * s.n_head_kv, hp.n_ff_at(i));
            let wq = l.matrix(&n("attn_q.weight"), &[e, d * nh])?;
            let (wk, wv) = match own {
                true => (
                    Some(l.matrix(&n("attn_k.weight"), &[e, kv])?),
                    l.opt_matrix(&n("attn_v.weight"), &[e, kv])?,
                ),
                false => (None, None),
            };
            let k_norm = match own {
                true => Some(l.f32(&n("attn_k_norm.weight"), &[d])?),
                false => None,
            };
            layers.push(Gemma4Layer {
                attn_norm: l.f32(&n("attn_norm.weight"), &[e])?,
                wq,
                wk,
                wv,
                k_norm,
                q_norm: l.f32(&n("attn_q_norm.weight"), &[d])?,
                wo: l.matrix(&n("attn_output.weight"), &[d * nh, e])?,
                attn_post_norm: l.f32(&n("post_attention_norm.weight"), &[e])?,
                ffn: [
                    l.f32(&n("ffn_norm.weight"), &[e])?,
                    l.matrix(&n("ffn_gate.weight"), &[e, f])?,
                    l.matrix(&n("ffn_up.weight"), &[e, f])?,
                    l.matrix(&n("ffn_down.weight"), &[f, e])?,
                    l.f32(&n("post_ffw_norm.weight"), &[e])?,
                ],
                ple: match p {
                    0 => None,
                    _ => Some([
                        l.matrix(&n("inp_gate.weight"), &[e, p])?,
                        l.matrix(&n("proj.weight"), &[p, e])?,
                        l.f32(&n("post_norm.weight"), &[e])?,
                    ]),
                },
                out_scale: l.opt_f32(&n("layer_output_scale.weight"), &[1])?,
                moe: Gemma4Moe::load(hp, l, i)?,
            });
        }
        Ok(Box::new(Gemma4Model {
            tok_embd,
            output_norm,
            output,
            rope_freqs,
            ple,
            layers,
            consts,
        }))
    }
}

impl Gemma4Model {
    /// The per-layer inputs of the step, `[n_ple, n, n_layer]` (contiguous), from the
    /// tokens and the scaled embeddings `x` (`[n_embd, n]`).
    fn per_layer_inputs(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        ple: PerLayerEmbeddings,
        (tokens, x): (Tensor, Tensor),
    ) -> Result<Tensor> {
        let (p, nl, n) = (self.consts.n_ple, hp.n_layer, ctx.shape(x)?[1]);
        let t = ctx.get_rows(w[ple.tok_embd], tokens)?; // [p·nl, n]
        let t = ctx.reshape_3d(t, p, nl, n)?;
        let t = ctx.scale(t, (p as f32).sqrt())?;
        let proj = ctx.mul_mat(w[ple.model_proj], x)?; // [p·nl, n]
        let proj = ctx.scale(proj, 1.0 / (hp.n_embd as f32).sqrt())?;
        let proj = ctx.reshape_3d(proj, p, nl, n)?;
        let proj = ctx.rms_norm_mul(proj, w[ple.proj_norm], hp.rms_eps)?;
        let sum = ctx.add(proj, t)?;
        let sum = ctx.scale(sum, 1.0 / 2f32.sqrt())?;
        let sum = ctx.permute(sum, [0, 2, 1, 3])?; // [p, n, nl]
        Ok(ctx.cont(sum)?)
    }
}

impl ArchModel for Gemma4Model {
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<StepTensors> {
        let c = &self.consts;
        let (n, nh) = (shape.n_tokens, hp.n_head);
        let mut inp = StepInputs::new(ctx, shape, 1, false)?;
        let mask_swa = inp.add_swa_mask(ctx, shape)?;
        let global = Rotary::new(hp, RopeMode::Neox, w.opt(self.rope_freqs));
        let local = Rotary::neox_with(hp, c.n_rot_swa, (c.freq_base_swa, 1.0), None);
        let scores = AttnScores {
            scale: 1.0,
            softcap: None,
        };

        let x = ctx.get_rows(w[self.tok_embd], inp.tokens)?; // [n_embd, n]
        let mut x = ctx.scale(x, (hp.n_embd as f32).sqrt())?;
        let ple = match self.ple {
            Some(p) => Some(self.per_layer_inputs(ctx, hp, w, p, (inp.tokens, x))?),
            None => None,
        };
        // The written caches of each layer (a shared layer's are its source's).
        let mut caches: Vec<[Tensor; 2]> = Vec::with_capacity(self.layers.len());
        for (il, (l, s)) in self.layers.iter().zip(&c.layers).enumerate() {
            let (hd, nkv) = (s.head_dim, s.n_head_kv);
            let rope = if s.local { local } else { global };
            let h = ctx.rms_norm_mul(x, w[l.attn_norm], hp.rms_eps)?;
            let q = ctx.mul_mat(w[l.wq], h)?; // [nh·hd, n]
            let q = ctx.reshape_3d(q, hd, nh, n)?;
            let q = ctx.rms_norm_mul(q, w[l.q_norm], hp.rms_eps)?;
            let q = rope.apply(ctx, q, inp.pos)?; // [hd, nh, n]
            let cache = match (l.wk, l.k_norm) {
                (Some(wk), Some(k_norm)) => {
                    let k = ctx.mul_mat(w[wk], h)?; // [nkv·hd, n]
                    let v = match l.wv {
                        Some(wv) => ctx.mul_mat(w[wv], h)?,
                        None => k,
                    };
                    let k = ctx.reshape_3d(k, hd, nkv, n)?;
                    let v = ctx.reshape_3d(v, hd, nkv, n)?;
                    let k = ctx.rms_norm_mul(k, w[k_norm], hp.rms_eps)?;
                    let v = ctx.rms_norm(v, hp.rms_eps)?;
                    let k = rope.apply(ctx, k, inp.pos)?;
                    let k = ctx.reshape_2d(k, hd * nkv, n)?;
                    let v = ctx.reshape_2d(v, hd * nkv, n)?;
                    let rows = match s.local {
                        true => inp.window_layer(mask_swa, shape).k_rows,
                        false => inp.k_rows,
                    };
                    let kc = ctx.set_rows(kv.k[il], k, rows)?;
                    let vc = ctx.set_rows(kv.v[il], v, rows)?;
                    [kc, vc]
                }
                // Checked at load: a layer without keys reads an earlier layer's cache.
                _ => caches[s.kv_source],
            };
            caches.push(cache);
            let dims = AttnDims {
                head_dim: hd,
                n_head: nh,
                n_head_kv: nkv,
            };
            let at = match s.local {
                true => inp.window_layer(mask_swa, shape),
                false => inp.global_layer(shape),
            };
            let attn = attend_cache(
                ctx, kv.types, cache, at.mask, at.shape, dims, q, scores, None,
            )?;
            let cur = ctx.mul_mat(w[l.wo], attn)?; // [n_embd, n]
            let cur = ctx.rms_norm_mul(cur, w[l.attn_post_norm], hp.rms_eps)?;
            let attn_out = ctx.add(cur, x)?;
            let mut cur = match &l.moe {
                Some(moe) => moe.build(ctx, hp, w, l.ffn, attn_out)?,
                None => geglu_ffn(ctx, hp, w, l.ffn, attn_out)?,
            };
            if let (Some([gate, proj, norm]), Some(ple)) = (l.ple, ple) {
                let p = c.n_ple;
                let g = ctx.mul_mat(w[gate], cur)?; // [p, n]
                let row = 4 * p;
                let this = ctx.view_2d(ple, p, n, row, il * row * n)?;
                // gelu(g) ⊙ ple[l] with ggml's GELU (its f16 table), as GeGLU computes it.
                let g = ctx.geglu_split(g, this)?;
                let g = ctx.mul_mat(w[proj], g)?; // [n_embd, n]
                let g = ctx.rms_norm_mul(g, w[norm], hp.rms_eps)?;
                cur = ctx.add(cur, g)?;
            }
            if let Some(scale) = l.out_scale {
                cur = ctx.mul(cur, w[scale])?;
            }
            x = cur;
        }
        let mut h = ctx.rms_norm_mul(x, w[self.output_norm], hp.rms_eps)?;
        if let Some(ids) = inp.out_ids {
            h = ctx.get_rows(h, ids)?;
        }
        let mut logits = ctx.mul_mat(w[self.output], h)?; // [n_vocab, n_outputs]
        if let Some(cap) = c.final_softcap {
            logits = ctx.soft_cap(logits, cap)?;
        }
        ctx.set_name(logits, "logits")?;
        ctx.set_output(logits)?;
        Ok(StepTensors {
            inputs: inp,
            logits,
        })
    }

    fn new_state(&self) -> Box<dyn StepState> {
        Box::new(SlidingWindowState {
            window: self.consts.window,
        })
    }
}
