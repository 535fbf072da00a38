//! `GraniteForCausalLM` → llama.cpp's `granite`: LLaMA's decoder layout
//! ([`super::llama::plan_decoder`], Q/K rows permuted, `head_dim` ignored as llama.cpp's
//! converter ignores it) plus Granite's four multipliers: `attention_multiplier` →
//! `attention.scale`, `embedding_multiplier` → `embedding_scale`, `residual_multiplier` →
//! `residual_scale`, `logits_scaling` → `logit_scale`.

use ggrs_core::gguf::Value;
use serde_json::Value as Json;

use super::llama::{plan_decoder, DecoderVariant};
use super::ArchConverter;
use crate::config::Cfg;
use crate::error::ConvertError;
use crate::layout::LayoutBuilder;

/// `GraniteForCausalLM`.
pub(crate) struct Granite;

impl ArchConverter for Granite {
    fn gguf_name(&self) -> &'static str {
        "granite"
    }

    fn source(&self) -> &'static str {
        "GraniteForCausalLM"
    }

    fn recognises(&self, name: &str, _cfg: &Json) -> bool {
        name == "GraniteForCausalLM"
    }

    fn plan(&self, cfg: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<usize, ConvertError> {
        let n_vocab = plan_decoder(
            cfg,
            out,
            &DecoderVariant {
                head_dim: false,
                ..DecoderVariant::LLAMA
            },
        )?;
        for (hf, key) in [
            ("attention_multiplier", "attention.scale"),
            ("embedding_multiplier", "embedding_scale"),
            ("residual_multiplier", "residual_scale"),
            ("logits_scaling", "logit_scale"),
        ] {
            // As llama.cpp's converter: a missing or zero multiplier is not written.
            match cfg.opt_f64(&[hf])? {
                Some(v) if v != 0.0 => out.put(key, Value::F32(v as f32)),
                _ => {}
            }
        }
        Ok(n_vocab)
    }

    fn bpe_pre(&self) -> &'static str {
        "refact"
    }
}
