//! The LLaMA / Qwen2 graph (llama.cpp's `build_llama`; Qwen2 adds Q/K/V biases and NEOX
//! rotary; Llama 3.1's rotary scaling through the optional `rope_freqs.weight`): the
//! [`Decoder`] of [`super::decoder`] with the SwiGLU feed-forward and no Q/K norms.

use ggrs_core::RopeMode;

use super::decoder::{Block, Decoder, QkvBias, SwiGlu};
use crate::architecture::{ArchModel, Architecture};
use crate::error::Result;
use crate::hparams::HParams;
use crate::loader::WeightLoader;

/// The LLaMA layout, under one of the names that use it.
#[derive(Debug, Clone, Copy)]
pub struct Llama {
    name: &'static str,
    rope_mode: RopeMode,
    bias: QkvBias,
}

/// LLaMA 1/2/3, Mistral and relatives (`llama`): normal (adjacent-pair) rotary; Q/K/V/O
/// biases read where the file has them.
pub const LLAMA: Llama = Llama {
    name: "llama",
    rope_mode: RopeMode::Normal,
    bias: QkvBias::Optional,
};

/// Qwen2 / Qwen2.5 (`qwen2`): the LLaMA layout with Q/K/V biases (required) and NEOX
/// rotary.
pub const QWEN2: Llama = Llama {
    name: "qwen2",
    rope_mode: RopeMode::Neox,
    bias: QkvBias::Required,
};

/// One LLaMA block: attention and the SwiGLU feed-forward.
pub type LlamaLayer = Block<SwiGlu>;

/// A loaded LLaMA-layout model.
pub type LlamaModel = Decoder<SwiGlu>;

impl Architecture for Llama {
    fn name(&self) -> &'static str {
        self.name
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        Ok(Box::new(LlamaModel::load_llama(
            hp,
            l,
            self.rope_mode,
            self.bias,
        )?))
    }
}
