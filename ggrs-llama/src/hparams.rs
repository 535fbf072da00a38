//! Hyperparameters read from a GGUF file's `<arch>.*` keys.

use ggrs_core::gguf::GgufFile;
use ggrs_core::{RopeMode, RopeParams};

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
    /// Feed-forward inner width.
    pub n_ff: usize,
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
    /// Rotary position scale (1 / linear scaling factor).
    pub rope_freq_scale: f32,
    /// Norm epsilon: RMSNorm's (`attention.layer_norm_rms_epsilon`), or the LayerNorm
    /// epsilon of an architecture that reads it from another key (see
    /// [`HParams::from_gguf_eps`]).
    pub rms_eps: f32,
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
        let arch_name = HParams::arch_name(f)?.to_string();
        let k = |s: &str| format!("{arch_name}.{s}");
        let n_embd = require(
            get_usize(f, &k("embedding_length"))?,
            &k("embedding_length"),
        )?;
        let n_layer = require(get_usize(f, &k("block_count"))?, &k("block_count"))?;
        let n_ff = require(
            get_usize(f, &k("feed_forward_length"))?,
            &k("feed_forward_length"),
        )?;
        let n_head = require(
            get_usize(f, &k("attention.head_count"))?,
            &k("attention.head_count"),
        )?;
        let n_ctx_train = get_usize(f, &k("context_length"))?.unwrap_or(2048);
        let n_head_kv = get_usize(f, &k("attention.head_count_kv"))?.unwrap_or(n_head);
        if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 || n_embd % n_head != 0 {
            return Err(LlamaError::BadKey {
                key: k("attention.head_count_kv"),
                detail: format!(
                    "{n_head} query heads, {n_head_kv} KV heads and width {n_embd} do not fit \
                     (heads must divide the width, KV heads the query heads)"
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
        Ok(HParams {
            arch: arch_name,
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            n_rot,
            rope_freq_base,
            rope_freq_scale: if scale > 0.0 { 1.0 / scale } else { 1.0 },
            rms_eps,
        })
    }

    /// The rotary parameters of the model's keys and queries, pairing dimensions by `mode`.
    pub fn rope(&self, mode: RopeMode) -> RopeParams {
        RopeParams {
            n_dims: self.n_rot,
            mode,
            freq_base: self.rope_freq_base,
            freq_scale: self.rope_freq_scale,
        }
    }

    /// Width of the keys (and values) of all KV heads together.
    pub fn n_embd_kv(&self) -> usize {
        self.head_dim * self.n_head_kv
    }
}
