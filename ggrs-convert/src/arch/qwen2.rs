//! `Qwen2ForCausalLM` → llama.cpp's `qwen2`: LLaMA's decoder layout
//! ([`super::llama::plan_decoder`]) with Q/K/V biases always present, Q/K rows in checkpoint
//! order (the GGUF uses NEOX-style rope), and no `rope.dimension_count`/`vocab_size` keys.

use serde_json::Value as Json;

use super::llama::{plan_decoder, DecoderVariant};
use super::ArchConverter;
use crate::config::Cfg;
use crate::error::ConvertError;
use crate::layout::{LayoutBuilder, Req};

/// `Qwen2ForCausalLM`.
pub(crate) struct Qwen2;

impl ArchConverter for Qwen2 {
    fn gguf_name(&self) -> &'static str {
        "qwen2"
    }

    fn source(&self) -> &'static str {
        "Qwen2ForCausalLM"
    }

    fn recognises(&self, name: &str, _cfg: &Json) -> bool {
        name == "Qwen2ForCausalLM"
    }

    fn plan(&self, cfg: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<usize, ConvertError> {
        plan_decoder(
            cfg,
            out,
            &DecoderVariant {
                permute_qk: false,
                qkv_bias: Req::Need,
                rope_dims_and_vocab: false,
                head_dim: true,
            },
        )
    }

    fn bpe_pre(&self) -> &'static str {
        "qwen2"
    }
}
