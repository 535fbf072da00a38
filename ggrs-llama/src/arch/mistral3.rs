//! Mistral 3 text models (`mistral3`, llama.cpp's `llama_model_mistral3`: Mistral Small
//! 3.x, Ministral 3): the LLaMA layout of [`super::decoder`] (normal rotary, SwiGLU,
//! optional output/feed-forward biases) with YaRN rotary scaling (its `yarn_beta_fast`,
//! `yarn_beta_slow` and `yarn_log_multiplier` keys read) and, when the file has
//! `attention.temperature_scale` (non-zero), Llama 4's attention temperature: the rotated
//! queries of the token at position `p` are multiplied by
//! `1 + scale · ln(⌊p / n_ctx_orig⌋ + 1)`, `n_ctx_orig` being the rotary's original context
//! (`rope.scaling.original_context_length`), see [`AttnTemperature`].

use ggrs_core::gguf::GgufFile;
use ggrs_core::RopeMode;

use super::decoder::{AttnWeights, Decoder, DecoderOptions, QkvBias, SwiGlu};
use crate::architecture::{ArchModel, Architecture};
use crate::error::{LlamaError, Result};
use crate::hparams::{get_f32, HParams};
use crate::loader::WeightLoader;
use crate::step::AttnTemperature;

/// The `mistral3` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mistral3;

/// The attention temperature of a `mistral3` file (`attention.temperature_scale`), `None`
/// when the key is absent or 0.
pub fn attn_temperature(f: &GgufFile, hp: &HParams) -> Result<Option<AttnTemperature>> {
    let key = format!("{}.attention.temperature_scale", hp.arch);
    match get_f32(f, &key)? {
        None | Some(0.0) => Ok(None),
        Some(scale) if scale.is_finite() => Ok(Some(AttnTemperature {
            scale,
            // `HParams::from_gguf` made it positive (the training context when the file
            // gives no original context).
            floor: hp.n_ctx_orig as f32,
            offset: 0.0,
        })),
        Some(v) => Err(LlamaError::BadKey {
            key,
            detail: format!("{v} must be a finite number"),
        }),
    }
}

impl Architecture for Mistral3 {
    fn name(&self) -> &'static str {
        "mistral3"
    }

    fn hparams(&self, file: &GgufFile) -> Result<HParams> {
        let mut hp = HParams::from_gguf(file)?;
        hp.read_yarn_keys(file)?;
        Ok(hp)
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        if hp.n_rot != hp.head_dim {
            return Err(LlamaError::BadKey {
                key: format!("{}.rope.dimension_count", hp.arch),
                detail: format!(
                    "mistral3 rotates whole heads: {} must equal the head size {}",
                    hp.n_rot, hp.head_dim
                ),
            });
        }
        let attn_temp = attn_temperature(l.file(), hp)?;
        let mut model = Decoder::load(
            hp,
            l,
            RopeMode::Normal,
            |l, i| AttnWeights::load(hp, l, i, QkvBias::Optional, false),
            |l, i| SwiGlu::load(hp, l, i),
        )?;
        model.options = DecoderOptions {
            attn_temp,
            ..DecoderOptions::default()
        };
        Ok(Box::new(model))
    }
}
