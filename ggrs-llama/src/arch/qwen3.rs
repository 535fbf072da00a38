//! Qwen3 (`qwen3`, llama.cpp's `build_qwen3`): the [`Decoder`] of [`super::decoder`] with
//! NEOX rotary, no biases, and a per-head RMSNorm of the queries and keys (`attn_q_norm`,
//! `attn_k_norm`, `[head_dim]`, shared by all heads) before the rotary. The head width comes
//! from `attention.key_length`, so `n_head·head_dim` may differ from `n_embd`.

use ggrs_core::RopeMode;

use super::decoder::{AttnWeights, Decoder, QkvBias, SwiGlu};
use crate::architecture::{ArchModel, Architecture};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::loader::WeightLoader;

/// The `qwen3` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct Qwen3;

/// A loaded Qwen3 model.
pub type Qwen3Model = Decoder<SwiGlu>;

/// Checks that the values have the keys' width (`attention.value_length`, when present,
/// equals `attention.key_length`): the KV cache holds both at `head_dim`.
pub(crate) fn check_value_length(hp: &HParams, l: &WeightLoader<'_>) -> Result<()> {
    let key = format!("{}.attention.value_length", hp.arch);
    if let Some(v) = l.file().get(&key) {
        if v.as_u64() != Some(hp.head_dim as u64) {
            return Err(LlamaError::BadKey {
                key,
                detail: format!(
                    "must equal attention.key_length ({}): values as wide as keys",
                    hp.head_dim
                ),
            });
        }
    }
    Ok(())
}

/// Block `i`'s attention as Qwen3 has it: no biases, per-head Q/K norms.
pub(crate) fn load_attention(
    hp: &HParams,
    l: &mut WeightLoader<'_>,
    i: usize,
) -> Result<AttnWeights> {
    AttnWeights::load(hp, l, i, QkvBias::Absent, true)
}

impl Architecture for Qwen3 {
    fn name(&self) -> &'static str {
        "qwen3"
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        check_value_length(hp, l)?;
        let model = Qwen3Model::load(
            hp,
            l,
            RopeMode::Neox,
            |l, i| load_attention(hp, l, i),
            |l, i| SwiGlu::load(hp, l, i),
        )?;
        Ok(Box::new(model))
    }
}
