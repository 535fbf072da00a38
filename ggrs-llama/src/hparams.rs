//! Hyperparameters read from a GGUF file's `<arch>.*` keys.

use ggrs_core::gguf::GgufFile;
use ggrs_core::{RopeMode, RopeParams, RopeYarn};

use crate::error::{LlamaError, Result};

/// A model's shape and constants.
#[derive(Debug, Clone, PartialEq)]
pub struct HParams {
    /// The file's architecture name (`general.architecture`), the prefix of its keys.
    pub arch: String,
    /// Vocabulary size.
    pub n_vocab: usize,
    /// Context length the model was trained for.
    pub n_ctx_train: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Feed-forward inner width: the widest layer's when `feed_forward_length` is one
    /// number per layer (see [`HParams::n_ff_layers`]).
    pub n_ff: usize,
    /// Each layer's feed-forward inner width (`feed_forward_length`, a number or one per
    /// layer as Gemma 4's double-wide MLP and OpenELM write it; llama.cpp's `n_ff(il)`).
    pub n_ff_layers: Vec<usize>,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_head`).
    pub n_head_kv: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Rotated dimensions per head.
    pub n_rot: usize,
    /// Rotary base.
    pub rope_freq_base: f32,
    /// Rotary position scale (1 / `rope.scaling.factor`; 1 when the scaling type is none).
    pub rope_freq_scale: f32,
    /// How positions are stretched beyond the trained context (`rope.scaling.type`).
    pub rope_scaling: RopeScaling,
    /// The context the rotary was trained on before any extension
    /// (`rope.scaling.original_context_length`, default the context length): YaRN's
    /// correction range and LongRoPE's choice of factors depend on it.
    pub n_ctx_orig: usize,
    /// YaRN's constants and the magnitude factor of the rotary, as llama.cpp derives them.
    pub yarn: YarnParams,
    /// Norm epsilon: RMSNorm's (`attention.layer_norm_rms_epsilon`), or the LayerNorm
    /// epsilon of an architecture that reads it from another key (see
    /// [`HParams::from_gguf_eps`]).
    pub rms_eps: f32,
    /// What each layer keeps in the KV cache: by default its own keys and values of
    /// `head_dim · n_head_kv` (the layer's own KV head count when `attention.head_count_kv`
    /// is a per-layer array). An architecture with other widths or shared caches (Gemma 4)
    /// sets it in its [`crate::architecture::Architecture::hparams`].
    pub kv_layers: Vec<LayerCache>,
    /// Per layer, what it keeps in the recurrent-state cache when it is a recurrent layer
    /// (LFM2's short convolutions, Mamba-2, the gated delta-net); `None` for the others (all,
    /// by default). An architecture with such layers sets it in its
    /// [`crate::architecture::Architecture::hparams`] (see [`crate::recurrent_cache`]), and
    /// gives them no keys and values (`LayerCache::Own` of width 0).
    pub recurrent: Vec<Option<RecurrentLayer>>,
}

/// What one recurrent layer keeps per sequence ([`HParams::recurrent`]), in f32 values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecurrentLayer {
    /// The convolution's carried inputs: `(d_conv − 1) · channels`, stored `[d_conv − 1,
    /// channels]` (time innermost, as `ssm_conv` reads it).
    pub conv: usize,
    /// The SSM / delta-rule state (0 for a layer with none, such as LFM2's).
    pub ssm: usize,
}

impl RecurrentLayer {
    /// Values of one row: conv then ssm.
    pub fn width(&self) -> usize {
        self.conv + self.ssm
    }
}

/// What one layer keeps in the KV cache ([`HParams::kv_layers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerCache {
    /// Keys and values of its own, rows of this width (all heads together).
    Own {
        /// Row width of its keys and of its values.
        width: usize,
        /// Positions a query of the layer sees (its own included) when it attends through
        /// a sliding window; `None`: every earlier position.
        window: Option<u32>,
    },
    /// No cache of its own: it attends over that earlier layer's keys and values (Gemma 4's
    /// shared-KV layers).
    Shares(usize),
}

impl LayerCache {
    /// Row width of the layer's own keys (0 when it shares another layer's).
    pub fn width(&self) -> usize {
        match *self {
            LayerCache::Own { width, .. } => width,
            LayerCache::Shares(_) => 0,
        }
    }
}

/// The non-negative integer under `key`, `None` when absent; another type is
/// [`LlamaError::BadKey`].
pub(crate) fn get_usize(f: &GgufFile, key: &str) -> Result<Option<usize>> {
    match f.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|x| Some(x as usize))
            .ok_or_else(|| LlamaError::BadKey {
                key: key.to_string(),
                detail: format!("expected a non-negative integer, found {}", v.type_name()),
            }),
    }
}

/// The number under `key`, `None` when absent; another type is [`LlamaError::BadKey`].
pub(crate) fn get_f32(f: &GgufFile, key: &str) -> Result<Option<f32>> {
    match f.get(key) {
        None => Ok(None),
        Some(v) => v.as_f32().map(Some).ok_or_else(|| LlamaError::BadKey {
            key: key.to_string(),
            detail: format!("expected a number, found {}", v.type_name()),
        }),
    }
}

/// A model's rotary scaling type (`<arch>.rope.scaling.type`), llama.cpp's names. An absent
/// key is [`RopeScaling::Linear`] (with factor 1 when there is no factor either); any other
/// name is refused at load ([`LlamaError::UnsupportedRopeScaling`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeScaling {
    /// `none`: positions as they are, whatever `rope.scaling.factor` says.
    None,
    /// `linear`: positions × 1/factor.
    Linear,
    /// `yarn`: YaRN's blend of scaled and unscaled frequencies plus its magnitude factor.
    Yarn,
    /// `longrope`: per-pair factors from the file's tensors (Phi-3), positions × 1/factor.
    LongRope,
}

/// YaRN's parameters as llama.cpp derives them from a file (its `cparams.yarn_*`): what
/// [`HParams::rotary`] turns into a [`RopeYarn`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct YarnParams {
    /// Share of the unscaled angle blended in (1 for [`RopeScaling::Yarn`], else 0).
    pub ext_factor: f32,
    /// The magnitude factor handed to the rotary (ggml's `attn_factor`): with YaRN,
    /// `mscale / (1 + 0.1·ln factor)` (the rotary multiplies the latter back), times
    /// `rope.scaling.attn_factor` (LongRoPE's factor) in every case.
    pub attn_factor: f32,
    /// The fast boundary of YaRN's correction range, in rotations (default 32).
    pub beta_fast: f32,
    /// The slow boundary, in rotations (default 1).
    pub beta_slow: f32,
}

/// llama.cpp's `get_mscale`: YaRN's magnitude for a context `scale` times the original.
fn yarn_mscale(scale: f32, mscale: f32) -> f32 {
    match scale <= 1.0 {
        true => 1.0,
        false => 0.1 * mscale * scale.ln() + 1.0,
    }
}

impl YarnParams {
    /// The parameters of a model of scaling type `ty` and position scale `freq_scale`, with
    /// YaRN's betas, `yarn_log_multiplier` (HF's `mscale_all_dim`; 0: none) and
    /// `rope.scaling.attn_factor` (`attn`), computed in f32 as llama.cpp's context does.
    pub fn new(
        ty: RopeScaling,
        freq_scale: f32,
        beta_fast: f32,
        beta_slow: f32,
        log_mul: f32,
        attn: f32,
    ) -> YarnParams {
        let ext_factor = match ty {
            RopeScaling::Yarn => 1.0,
            _ => 0.0,
        };
        let mut attn_factor = 1.0;
        if ext_factor != 0.0 {
            let factor = 1.0 / freq_scale;
            attn_factor = match log_mul != 0.0 {
                true => yarn_mscale(factor, 1.0) / yarn_mscale(factor, log_mul),
                false => yarn_mscale(factor, 1.0),
            };
            // ggml's rotary multiplies by 1 + 0.1·ln(factor) whenever it blends: cancel it.
            attn_factor *= 1.0 / (1.0 + 0.1 * factor.ln());
        }
        YarnParams {
            ext_factor,
            attn_factor: attn_factor * attn,
            beta_fast,
            beta_slow,
        }
    }
}

/// The non-negative integer under `key`, or one per layer (an array of `n_layer`), `None`
/// when absent.
pub(crate) fn get_usize_or_layers(
    f: &GgufFile,
    key: &str,
    n_layer: usize,
) -> Result<Option<Vec<usize>>> {
    let Some(items) = f.get(key).and_then(|v| v.as_array()) else {
        return Ok(get_usize(f, key)?.map(|v| vec![v; n_layer]));
    };
    let values: Option<Vec<usize>> = items
        .iter()
        .map(|v| v.as_u64().map(|x| x as usize))
        .collect();
    match values {
        Some(v) if v.len() == n_layer => Ok(Some(v)),
        _ => Err(LlamaError::BadKey {
            key: key.to_string(),
            detail: format!("expected a number or {n_layer} numbers (one per layer)"),
        }),
    }
}

fn require<T>(v: Option<T>, key: &str) -> Result<T> {
    v.ok_or_else(|| LlamaError::MissingKey(key.to_string()))
}

impl HParams {
    /// The architecture name a file gives (`general.architecture`).
    pub fn arch_name(f: &GgufFile) -> Result<&str> {
        f.get("general.architecture")
            .ok_or_else(|| LlamaError::MissingKey("general.architecture".into()))?
            .as_str()
            .ok_or_else(|| LlamaError::BadKey {
                key: "general.architecture".into(),
                detail: "expected a string".into(),
            })
    }

    /// Reads the hyperparameters of `f` from the keys every architecture shares, under the
    /// prefix `general.architecture` names. Keys llama.cpp treats as optional take its
    /// defaults (`rope.dimension_count` = head size, `head_count_kv` = `head_count`, rope
    /// base 10000). The norm epsilon is RMSNorm's, `<arch>.attention.layer_norm_rms_epsilon`.
    pub fn from_gguf(f: &GgufFile) -> Result<HParams> {
        HParams::from_gguf_eps(f, "attention.layer_norm_rms_epsilon")
    }

    /// As [`HParams::from_gguf`], with the norm epsilon read from `<arch>.{eps_key}` (a
    /// LayerNorm model: `attention.layer_norm_epsilon`).
    pub fn from_gguf_eps(f: &GgufFile, eps_key: &str) -> Result<HParams> {
        HParams::read(f, eps_key, false)
    }

    /// As [`HParams::from_gguf`] for a hybrid model whose `attention.head_count_kv` array has
    /// 0 for its recurrent layers (LFM2, Granite 4.0-H): those layers get no keys and values
    /// (`LayerCache::Own` of width 0). The architecture then says what they keep in
    /// [`HParams::recurrent`].
    pub fn from_gguf_hybrid(f: &GgufFile) -> Result<HParams> {
        HParams::read(f, "attention.layer_norm_rms_epsilon", true)
    }

    fn read(f: &GgufFile, eps_key: &str, kv_free_layers: bool) -> Result<HParams> {
        let arch_name = HParams::arch_name(f)?.to_string();
        let k = |s: &str| format!("{arch_name}.{s}");
        let n_embd = require(
            get_usize(f, &k("embedding_length"))?,
            &k("embedding_length"),
        )?;
        let n_layer = require(get_usize(f, &k("block_count"))?, &k("block_count"))?;
        // Header numbers size allocations (per-layer lists, the KV cache, a placeholder
        // vocabulary): bound them by what the file holds before anything is allocated.
        let n_tensors = f.tensors().len();
        if n_layer == 0 {
            return Err(LlamaError::BadKey {
                key: k("block_count"),
                detail: "0 layers: a model needs at least one block".into(),
            });
        }
        if n_layer > n_tensors {
            return Err(LlamaError::BadKey {
                key: k("block_count"),
                detail: format!(
                    "{n_layer} layers, but the file holds only {n_tensors} tensors (every \
                     layer has several)"
                ),
            });
        }
        let n_ff_layers = require(
            get_usize_or_layers(f, &k("feed_forward_length"), n_layer)?,
            &k("feed_forward_length"),
        )?;
        let n_ff = n_ff_layers.iter().copied().max().unwrap_or(0);
        let n_head = require(
            get_usize(f, &k("attention.head_count"))?,
            &k("attention.head_count"),
        )?;
        let n_ctx_train = get_usize(f, &k("context_length"))?.unwrap_or(2048);
        let kv_key = k("attention.head_count_kv");
        let kv_heads = get_usize_or_layers(f, &kv_key, n_layer)?;
        let n_head_kv = kv_heads
            .as_ref()
            .map_or(n_head, |l| l.iter().copied().max().unwrap_or(n_head));
        let per_layer_kv = kv_heads.unwrap_or_else(|| vec![n_head_kv; n_layer]);
        // A hybrid model's recurrent layers have no KV heads (0 in the per-layer array).
        let bad_heads = |h: usize| (h == 0 && !kv_free_layers) || (h != 0 && n_head % h != 0);
        if n_head == 0
            || n_head_kv == 0
            || per_layer_kv.iter().any(|&h| bad_heads(h))
            || n_embd % n_head != 0
        {
            return Err(LlamaError::BadKey {
                key: kv_key,
                detail: format!(
                    "{n_head} query heads, {per_layer_kv:?} KV heads and width {n_embd} do not \
                     fit (heads must divide the width, KV heads the query heads)"
                ),
            });
        }
        let head_dim = get_usize(f, &k("attention.key_length"))?.unwrap_or(n_embd / n_head);
        let n_rot = get_usize(f, &k("rope.dimension_count"))?.unwrap_or(head_dim);
        if n_rot > head_dim || n_rot % 2 != 0 {
            return Err(LlamaError::BadKey {
                key: k("rope.dimension_count"),
                detail: format!("{n_rot} must be even and at most the head size {head_dim}"),
            });
        }
        let rope_freq_base = get_f32(f, &k("rope.freq_base"))?.unwrap_or(10000.0);
        let scale = get_f32(f, &k("rope.scale_linear"))?
            .or(get_f32(f, &k("rope.scaling.factor"))?)
            .unwrap_or(1.0);
        let scaling_key = k("rope.scaling.type");
        let rope_scaling = match f.get(&scaling_key) {
            None => RopeScaling::Linear,
            Some(v) => match v.as_str() {
                Some("none") => RopeScaling::None,
                Some("linear") => RopeScaling::Linear,
                Some("yarn") => RopeScaling::Yarn,
                Some("longrope") => RopeScaling::LongRope,
                other => {
                    return Err(LlamaError::UnsupportedRopeScaling {
                        key: scaling_key,
                        value: other.map_or_else(|| format!("{v:?}"), str::to_string),
                    })
                }
            },
        };
        let rope_freq_scale = match (rope_scaling, scale > 0.0) {
            (RopeScaling::None, _) | (_, false) => 1.0,
            _ => 1.0 / scale,
        };
        if !scale.is_finite() {
            return Err(LlamaError::BadKey {
                key: k("rope.scaling.factor"),
                detail: format!("{scale} must be a finite number"),
            });
        }
        let n_ctx_orig = match get_usize(f, &k("rope.scaling.original_context_length"))? {
            Some(n) if n > 0 => n,
            _ => n_ctx_train,
        };
        let rope_attn = get_f32(f, &k("rope.scaling.attn_factor"))?.unwrap_or(1.0);
        if !(rope_attn.is_finite() && rope_attn > 0.0) {
            return Err(LlamaError::BadKey {
                key: k("rope.scaling.attn_factor"),
                detail: format!("{rope_attn} must be a positive finite number"),
            });
        }
        let yarn = YarnParams::new(rope_scaling, rope_freq_scale, 32.0, 1.0, 0.0, rope_attn);
        let eps_key = k(eps_key);
        let rms_eps = require(get_f32(f, &eps_key)?, &eps_key)?;
        // A norm divides by sqrt(mean + eps): eps must be a finite number >= 0 (0 is
        // allowed: some converters write it), or every activation is NaN.
        if !(rms_eps.is_finite() && rms_eps >= 0.0) {
            return Err(LlamaError::BadKey {
                key: eps_key,
                detail: format!("{rms_eps} is not a finite number >= 0"),
            });
        }
        let n_vocab = match get_usize(f, &k("vocab_size"))? {
            Some(n) => n,
            None => f
                .get("tokenizer.ggml.tokens")
                .and_then(|v| v.as_array())
                .map(|a| a.len())
                .or_else(|| f.tensor("token_embd.weight").map(|t| t.ne[1]))
                .ok_or_else(|| LlamaError::MissingKey("tokenizer.ggml.tokens".into()))?,
        };
        if let Some(t) = f.tensor("token_embd.weight") {
            if n_vocab != t.ne[1] {
                return Err(LlamaError::BadKey {
                    key: k("vocab_size"),
                    detail: format!(
                        "{n_vocab} tokens, but token_embd.weight has {} rows",
                        t.ne[1]
                    ),
                });
            }
        }
        const MAX_DIM: usize = 1 << 31;
        for (key, v) in [
            ("embedding_length", n_embd),
            ("feed_forward_length", n_ff),
            ("attention.head_count", n_head),
            ("attention.key_length", head_dim),
            ("vocab_size", n_vocab),
        ] {
            if v > MAX_DIM {
                return Err(LlamaError::BadKey {
                    key: k(key),
                    detail: format!("{v} is larger than any model's (at most {MAX_DIM})"),
                });
            }
        }
        if head_dim.checked_mul(n_head).is_none_or(|w| w > MAX_DIM) {
            return Err(LlamaError::BadKey {
                key: k("attention.key_length"),
                detail: format!("{n_head} heads of {head_dim} values are too wide"),
            });
        }
        let kv_layers = per_layer_kv
            .iter()
            .map(|&h| LayerCache::Own {
                width: head_dim * h,
                window: None,
            })
            .collect();
        Ok(HParams {
            recurrent: vec![None; n_layer],
            kv_layers,
            arch: arch_name,
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_ff,
            n_ff_layers,
            n_head,
            n_head_kv,
            head_dim,
            n_rot,
            rope_freq_base,
            rope_freq_scale,
            rope_scaling,
            n_ctx_orig,
            yarn,
            rms_eps,
        })
    }

    /// Recomputes [`HParams::yarn`] with YaRN's betas and `yarn_log_multiplier` from the file, for
    /// the architectures whose llama.cpp loader reads `rope.scaling.yarn_beta_fast`,
    /// `yarn_beta_slow` and `yarn_log_multiplier` (the others keep the defaults 32, 1 and none).
    pub fn read_yarn_keys(&mut self, f: &GgufFile) -> Result<()> {
        let k = |s: &str| format!("{}.rope.scaling.{s}", self.arch);
        let beta_fast = get_f32(f, &k("yarn_beta_fast"))?.unwrap_or(32.0);
        let beta_slow = get_f32(f, &k("yarn_beta_slow"))?.unwrap_or(1.0);
        let log_mul = get_f32(f, &k("yarn_log_multiplier"))?.unwrap_or(0.0);
        let attn = get_f32(f, &k("attn_factor"))?.unwrap_or(1.0);
        for (key, v) in [("yarn_beta_fast", beta_fast), ("yarn_beta_slow", beta_slow)] {
            if !v.is_finite() || v <= 0.0 {
                return Err(LlamaError::BadKey {
                    key: k(key),
                    detail: format!("{v} must be a positive finite number"),
                });
            }
        }
        self.yarn = YarnParams::new(
            self.rope_scaling,
            self.rope_freq_scale,
            beta_fast,
            beta_slow,
            log_mul,
            attn,
        );
        Ok(())
    }

    /// The rotary of the model's keys and queries over `n_rot` dimensions (`self.n_rot` for
    /// most models) at base `freq_base` and position scale `freq_scale`, pairing dimensions
    /// by `mode`, with the file's YaRN or magnitude scaling: what [`HParams::rope`] gives,
    /// plus YaRN's blend when [`HParams::yarn`] calls for it.
    pub fn rotary_with(
        &self,
        mode: RopeMode,
        n_rot: usize,
        freq_base: f32,
        freq_scale: f32,
    ) -> (RopeParams, Option<RopeYarn>) {
        let params = RopeParams {
            n_dims: n_rot,
            mode,
            freq_base,
            freq_scale,
        };
        let y = self.yarn;
        let yarn = (y.ext_factor != 0.0 || y.attn_factor != 1.0).then(|| RopeYarn {
            ext_factor: y.ext_factor,
            attn_factor: y.attn_factor,
            corr_dims: RopeYarn::corr_dims(
                n_rot,
                self.n_ctx_orig,
                freq_base,
                y.beta_fast,
                y.beta_slow,
            ),
        });
        (params, yarn)
    }

    /// The rotary parameters of the model's keys and queries, pairing dimensions by `mode`
    /// (without YaRN's blend or magnitude factor: see [`HParams::rotary_with`]).
    pub fn rope(&self, mode: RopeMode) -> RopeParams {
        RopeParams {
            n_dims: self.n_rot,
            mode,
            freq_base: self.rope_freq_base,
            freq_scale: self.rope_freq_scale,
        }
    }

    /// Marks the layers `window(il)` gives a window for as attending through that sliding
    /// window ([`LayerCache::Own`]'s `window`), so that a session's cache can keep only
    /// their window ([`crate::kv_cache::KvCache::window_cells`]).
    pub fn set_windows(&mut self, window: impl Fn(usize) -> Option<u32>) {
        for (il, l) in self.kv_layers.iter_mut().enumerate() {
            if let LayerCache::Own { window: w, .. } = l {
                *w = window(il);
            }
        }
    }

    /// Layer `il`'s feed-forward inner width ([`HParams::n_ff_layers`]).
    pub fn n_ff_at(&self, il: usize) -> usize {
        self.n_ff_layers.get(il).copied().unwrap_or(self.n_ff)
    }

    /// Width of the keys (and values) of all KV heads together.
    pub fn n_embd_kv(&self) -> usize {
        self.head_dim * self.n_head_kv
    }
}
