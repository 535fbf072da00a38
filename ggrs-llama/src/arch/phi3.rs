//! Phi-3 (architecture `phi3`, llama.cpp's `llm_build_phi3`): the fused-projection decoder of
//! [`super::fused`] (one `attn_qkv` matrix holding Q | K | V, one `ffn_up` holding the gate
//! then the up projection, no biases) with NEOX (rotate-half) rotary over `rope.dimension_count`
//! dimensions of each head and the queries scaled by 1/√head_dim before attention.
//!
//! The file's `attention.sliding_window` is not applied: llama.cpp disables it for `phi3`
//! (its converted files give a window the models were not trained with). The long-context
//! variants' `rope_factors_long` / `rope_factors_short` tensors (Phi-3-128k, Phi-3.5) are
//! not supported: a file holding them is refused rather than run without them.

use ggrs_core::RopeMode;

use crate::architecture::{ArchModel, Architecture};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::loader::WeightLoader;

use super::fused::{FusedModel, FusedStyle};

/// The `phi3` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct Phi3;

/// NEOX rotary; queries scaled before attention, as llama.cpp's graph does.
const STYLE: FusedStyle = FusedStyle {
    rope_mode: RopeMode::Neox,
    scale_queries: true,
};

impl Architecture for Phi3 {
    fn name(&self) -> &'static str {
        "phi3"
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        for name in ["rope_factors_long.weight", "rope_factors_short.weight"] {
            if l.has(name) {
                return Err(LlamaError::UnsupportedTensor {
                    name: name.to_string(),
                    detail: "Phi-3's long-context rotary scaling (LongRoPE) is not implemented; \
                             use a 4k-context Phi-3 file"
                        .into(),
                });
            }
        }
        Ok(Box::new(FusedModel::load(STYLE, hp, l)?))
    }
}
