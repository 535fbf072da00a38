//! The text model of a multimodal checkpoint (`Gemma3ForConditionalGeneration`,
//! `Mistral3ForConditionalGeneration`): its `config.json` nests the language model's
//! hyperparameters under `text_config` and its tensors under `language_model.` (or
//! `model.language_model.` since transformers 4.52), beside a vision tower and a projector.
//! As llama.cpp's converter does for the text GGUF, the language model is converted as its
//! text-only architecture and the vision tensors are left out (llama.cpp writes them to a
//! separate `mmproj` file, which ggrs does not read).

use serde_json::Value as Json;

use crate::error::ConvertError;

/// A multimodal wrapper and the text-only architecture of each text model type it may hold.
struct Wrapper {
    /// The `architectures` entry of the multimodal checkpoint.
    name: &'static str,
    /// `(text_config.model_type, text-only architecture)`; `None` as the type matches a
    /// `text_config` without `model_type`.
    text: &'static [(Option<&'static str>, &'static str)],
}

const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        name: "Gemma3ForConditionalGeneration",
        text: &[
            (Some("gemma3_text"), "Gemma3ForCausalLM"),
            (None, "Gemma3ForCausalLM"),
        ],
    },
    Wrapper {
        name: "Mistral3ForConditionalGeneration",
        text: &[(Some("ministral3"), "Ministral3ForCausalLM")],
    },
];

/// For a multimodal `cfg`, the configuration of its text model: the top-level keys with
/// `text_config`'s over them (`vision_config` and `text_config` removed) and `architectures`
/// naming the text-only architecture. `Ok(None)` for any other configuration. Errors: a
/// wrapper without `text_config`, or whose text model type has no converter.
pub(crate) fn text_config(cfg: &Json) -> Result<Option<Json>, ConvertError> {
    let names = cfg.get("architectures").and_then(Json::as_array);
    let Some(w) = names.into_iter().flatten().find_map(|n| {
        let n = n.as_str()?;
        WRAPPERS.iter().find(|w| w.name == n)
    }) else {
        return Ok(None);
    };
    let Some(text) = cfg.get("text_config").and_then(Json::as_object) else {
        return Err(ConvertError::Config {
            key: "text_config".into(),
            detail: format!(
                "a {} checkpoint needs its text model's configuration",
                w.name
            ),
        });
    };
    let ty = text.get("model_type").and_then(Json::as_str);
    let Some(&(_, arch)) = w.text.iter().find(|(t, _)| *t == ty) else {
        return Err(ConvertError::Config {
            key: "text_config.model_type".into(),
            detail: format!(
                "the text model of this {} is {}, which ggrs does not convert (it converts: {})",
                w.name,
                ty.map_or("unnamed".into(), |t| format!("`{t}`")),
                w.text
                    .iter()
                    .filter_map(|(t, _)| t.map(|t| format!("`{t}`")))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    };
    let mut out = cfg.as_object().cloned().unwrap_or_default();
    out.remove("text_config");
    out.remove("vision_config");
    for (k, v) in text {
        out.insert(k.clone(), v.clone());
    }
    out.insert("architectures".into(), Json::from(vec![arch]));
    Ok(Some(Json::Object(out)))
}

/// The text-only name of tensor `name` of a multimodal checkpoint, or `None` for a tensor
/// outside the language model (vision tower, projector).
pub(crate) fn text_tensor_name(name: &str) -> Option<String> {
    for (from, to) in [
        ("language_model.model.", "model."),
        ("model.language_model.", "model."),
        ("language_model.lm_head.", "lm_head."),
    ] {
        if let Some(rest) = name.strip_prefix(from) {
            return Some(format!("{to}{rest}"));
        }
    }
    name.starts_with("lm_head.").then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_config_of_the_wrappers() {
        let cfg = json!({
            "architectures": ["Mistral3ForConditionalGeneration"],
            "model_type": "mistral3",
            "torch_dtype": "bfloat16",
            "text_config": {"model_type": "ministral3", "hidden_size": 64},
            "vision_config": {"hidden_size": 32}
        });
        let t = text_config(&cfg).unwrap().unwrap();
        assert_eq!(t["architectures"], json!(["Ministral3ForCausalLM"]));
        assert_eq!(t["model_type"], "ministral3");
        assert_eq!(t["hidden_size"], 64);
        assert_eq!(t["torch_dtype"], "bfloat16");
        assert!(t.get("vision_config").is_none() && t.get("text_config").is_none());

        let small = json!({
            "architectures": ["Mistral3ForConditionalGeneration"],
            "text_config": {"model_type": "mistral"}
        });
        let e = text_config(&small).unwrap_err().to_string();
        assert!(e.contains("`mistral`") && e.contains("`ministral3`"), "{e}");
        let bare = json!({"architectures": ["Gemma3ForConditionalGeneration"]});
        assert!(text_config(&bare)
            .unwrap_err()
            .to_string()
            .contains("text_config"));
        let plain = json!({"architectures": ["LlamaForCausalLM"]});
        assert!(text_config(&plain).unwrap().is_none());
    }

    #[test]
    fn text_tensor_names() {
        for (from, to) in [
            (
                "language_model.model.layers.0.mlp.up_proj.weight",
                Some("model.layers.0.mlp.up_proj.weight"),
            ),
            (
                "model.language_model.embed_tokens.weight",
                Some("model.embed_tokens.weight"),
            ),
            ("language_model.lm_head.weight", Some("lm_head.weight")),
            ("lm_head.weight", Some("lm_head.weight")),
            (
                "vision_tower.transformer.layers.0.attention.q_proj.weight",
                None,
            ),
            ("model.vision_tower.patch_conv.weight", None),
            ("multi_modal_projector.linear_1.weight", None),
        ] {
            assert_eq!(text_tensor_name(from).as_deref(), to, "{from}");
        }
    }
}
