//! Phi-3 (architecture `phi3`, llama.cpp's `llm_build_phi3`): the fused-projection decoder of
//! [`super::fused`] (one `attn_qkv` matrix holding Q | K | V, one `ffn_up` holding the gate
//! then the up projection, no biases) with NEOX (rotate-half) rotary over `rope.dimension_count`
//! dimensions of each head and the queries scaled by 1/√head_dim before attention.
//!
//! The file's `attention.sliding_window` is not applied: llama.cpp disables it for `phi3`
//! (its converted files give a window the models were not trained with). The long-context
//! variants (Phi-3-128k, Phi-3.5-mini, Phi-4-mini) rotate with LongRoPE: per-pair factors
//! `rope_factors_long` / `rope_factors_short`, the long ones when the session's context
//! exceeds `rope.scaling.original_context_length` ([`LongRopeFactors::pick`]), and cos and
//! sin × `rope.scaling.attn_factor`.
//!
//! [`LongRopeFactors::pick`]: super::decoder::LongRopeFactors::pick

use ggrs_core::RopeMode;

use crate::architecture::{ArchModel, Architecture};
use crate::error::Result;
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
        Ok(Box::new(FusedModel::load(STYLE, hp, l)?))
    }
}
