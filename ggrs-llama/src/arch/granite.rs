//! Granite 3.x dense (`granite`, llama.cpp's `llama_model_granite`): the LLaMA layout of
//! [`super::decoder`] with IBM's four multipliers:
//!
//! - `embedding_scale`: the input embeddings × it (when present and non-zero);
//! - `attention.scale`: the key·query products × it instead of 1/√head_dim (when non-zero);
//! - `residual_scale`: the attention and the feed-forward outputs × it before each residual
//!   add (when non-zero);
//! - `logit_scale` (required): the logits ÷ it.
//!
//! `rope.scaling.finetuned` = false switches the rotary off in every layer (Granite uses
//! that key so; absent means rotary on).

use ggrs_core::RopeMode;

use super::decoder::{Decoder, DecoderOptions, QkvBias};
use crate::architecture::{ArchModel, Architecture};
use crate::error::{LlamaError, Result};
use crate::hparams::{get_f32, HParams};
use crate::loader::WeightLoader;

/// The `granite` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct Granite;

/// `<arch>.{name}` as a finite number, `None` when absent or 0 (llama.cpp's "not set").
pub(crate) fn multiplier(l: &WeightLoader<'_>, hp: &HParams, name: &str) -> Result<Option<f32>> {
    let key = format!("{}.{name}", hp.arch);
    match get_f32(l.file(), &key)? {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(v) if v.is_finite() => Ok(Some(v)),
        Some(v) => Err(LlamaError::BadKey {
            key,
            detail: format!("{v} must be a finite number"),
        }),
    }
}

impl Architecture for Granite {
    fn name(&self) -> &'static str {
        "granite"
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let logit_key = format!("{}.logit_scale", hp.arch);
        let logit_scale =
            multiplier(l, hp, "logit_scale")?.ok_or(LlamaError::MissingKey(logit_key))?;
        let finetuned_key = format!("{}.rope.scaling.finetuned", hp.arch);
        let use_rope = match l.file().get(&finetuned_key) {
            None => true,
            Some(v) => v.as_bool().ok_or_else(|| LlamaError::BadKey {
                key: finetuned_key,
                detail: format!("expected a boolean, found {}", v.type_name()),
            })?,
        };
        let options = DecoderOptions {
            nope_period: (!use_rope).then_some(1),
            embd_scale: multiplier(l, hp, "embedding_scale")?,
            kq_scale: multiplier(l, hp, "attention.scale")?,
            residual_scale: multiplier(l, hp, "residual_scale")?,
            logit_scale: Some(logit_scale),
            attn_temp: None,
        };
        let mut model = Decoder::load_llama(hp, l, RopeMode::Normal, QkvBias::Optional)?;
        model.options = options;
        Ok(Box::new(model))
    }
}
