//! SmolLM3 (`smollm3`, llama.cpp's `llm_build_smollm3`): the LLaMA layout of
//! [`super::decoder`] (normal rotary, SwiGLU, optional Q/K/V/O biases) where every fourth
//! layer has no rotary embedding ("NoPE"): layer `il` skips it when `(il + 1) % 4 == 0`.
//! The period has no GGUF key; llama.cpp fixes it at 4 for this architecture.

use ggrs_core::RopeMode;

use super::decoder::{Decoder, DecoderOptions, QkvBias};
use crate::architecture::{ArchModel, Architecture};
use crate::error::Result;
use crate::hparams::HParams;
use crate::loader::WeightLoader;

/// The `smollm3` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct SmolLm3;

/// Layers `il` with `(il + 1) % NOPE_PERIOD == 0` have no rotary (llama.cpp's
/// `n_no_rope_layer_step` for smollm3).
pub const NOPE_PERIOD: usize = 4;

impl Architecture for SmolLm3 {
    fn name(&self) -> &'static str {
        "smollm3"
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let mut model = Decoder::load_llama(hp, l, RopeMode::Normal, QkvBias::Optional)?;
        model.options = DecoderOptions {
            nope_period: Some(NOPE_PERIOD),
            ..DecoderOptions::default()
        };
        Ok(Box::new(model))
    }
}
