//! `SmolLM3ForCausalLM` → llama.cpp's `smollm3`: LLaMA's decoder layout
//! ([`super::llama::plan_decoder`], Q/K rows permuted). Its NoPE layers (every fourth) have
//! no GGUF key: llama.cpp fixes the period, and `no_rope_layers` is not carried over.

use serde_json::Value as Json;

use super::llama::{plan_decoder, DecoderVariant};
use super::ArchConverter;
use crate::config::Cfg;
use crate::error::ConvertError;
use crate::layout::LayoutBuilder;

/// `SmolLM3ForCausalLM`.
pub(crate) struct SmolLm3;

impl ArchConverter for SmolLm3 {
    fn gguf_name(&self) -> &'static str {
        "smollm3"
    }

    fn source(&self) -> &'static str {
        "SmolLM3ForCausalLM"
    }

    fn recognises(&self, name: &str, _cfg: &Json) -> bool {
        name == "SmolLM3ForCausalLM"
    }

    fn plan(&self, cfg: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<usize, ConvertError> {
        plan_decoder(cfg, out, &DecoderVariant::LLAMA)
    }

    fn bpe_pre(&self) -> &'static str {
        "smollm3"
    }
}
