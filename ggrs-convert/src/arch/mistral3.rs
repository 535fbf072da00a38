//! `Ministral3ForCausalLM` (the text model of Ministral 3 / Mistral Small 3.x) → llama.cpp's
//! `mistral3`: LLaMA's decoder layout ([`super::llama::plan_decoder`], Q/K rows permuted,
//! YaRN from `rope_parameters`), plus, for `model_type` `ministral3`, YaRN's
//! `mscale_all_dim` → `rope.scaling.yarn_log_multiplier` and Llama 4's
//! `llama_4_scaling_beta` → `attention.temperature_scale`, as llama.cpp's converter writes
//! them. The multimodal `Mistral3ForConditionalGeneration` layout comes here through
//! `multimodal.rs` (its `text_config`, its `language_model.` tensors).

use ggrs_core::gguf::Value;
use serde_json::Value as Json;

use super::llama::{plan_decoder, rope_params, DecoderVariant};
use super::ArchConverter;
use crate::config::Cfg;
use crate::error::ConvertError;
use crate::layout::LayoutBuilder;

/// `Ministral3ForCausalLM`.
pub(crate) struct Mistral3;

impl ArchConverter for Mistral3 {
    fn gguf_name(&self) -> &'static str {
        "mistral3"
    }

    fn source(&self) -> &'static str {
        "Ministral3ForCausalLM"
    }

    fn recognises(&self, name: &str, _cfg: &Json) -> bool {
        name == "Ministral3ForCausalLM"
    }

    fn plan(&self, cfg: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<usize, ConvertError> {
        let n_vocab = plan_decoder(cfg, out, &DecoderVariant::LLAMA)?;
        if cfg.get("model_type").and_then(Json::as_str) == Some("ministral3") {
            let rp = rope_params(cfg);
            let yarn = rp.and_then(|r| r.get("rope_type")).and_then(Json::as_str);
            if yarn != Some("yarn") {
                return Err(ConvertError::Config {
                    key: "rope_parameters.rope_type".into(),
                    detail: "Ministral 3 must use YaRN (`rope_type` `yarn`)".into(),
                });
            }
            for (hf, key) in [
                ("mscale_all_dim", "rope.scaling.yarn_log_multiplier"),
                ("llama_4_scaling_beta", "attention.temperature_scale"),
            ] {
                let v = rp.and_then(|r| r.get(hf)).and_then(Json::as_f64);
                let v = v.ok_or_else(|| ConvertError::Config {
                    key: format!("rope_parameters.{hf}"),
                    detail: "is missing (Ministral 3 needs it)".into(),
                })?;
                out.put(key, Value::F32(v as f32));
            }
        }
        Ok(n_vocab)
    }

    fn bpe_pre(&self) -> &'static str {
        "tekken"
    }
}
