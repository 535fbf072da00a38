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

use super::decoder::{Decoder, DecoderOptions, QkvBias};
use super::granite::multiplier;
use crate::architecture::{ArchModel, Architecture};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::loader::WeightLoader;
use crate::step::AttnTemperature;

/// The `mistral3` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mistral3;

/// The attention temperature of a `mistral3` file (`attention.temperature_scale`), `None`
/// when the key is absent or 0.
pub fn attn_temperature(l: &WeightLoader<'_>, hp: &HParams) -> Result<Option<AttnTemperature>> {
    Ok(
        multiplier(l, hp, "attention.temperature_scale")?.map(|scale| AttnTemperature {
            scale,
            // `HParams::from_gguf` made it positive (the training context when the file
            // gives no original context).
            floor: hp.n_ctx_orig as f32,
            offset: 0.0,
        }),
    )
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
        let attn_temp = attn_temperature(l, hp)?;
        let mut model = Decoder::load_llama(hp, l, RopeMode::Normal, QkvBias::Optional)?;
        model.options = DecoderOptions {
            attn_temp,
            ..DecoderOptions::default()
        };
        Ok(Box::new(model))
    }
}
