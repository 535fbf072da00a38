//! The tool-calling fields of a chat request: `tools`, `tool_choice`,
//! `parallel_tool_calls`, read into a [`ToolSetup`] for the model's template.

use ggrs_llama::chat::tools::{ToolChoice, ToolFormat, ToolSetup};
use ggrs_llama::ChatTemplate;
use serde_json::Value;

use crate::error::ApiError;
use crate::json_values::wrong_type;
use crate::params::Body;

/// The request's tools (none when it offers none), taken from the body.
/// `parallel_tool_calls` defaults to false, as llama-server has it: a small model allowed
/// several calls tends to repeat one.
pub(crate) fn setup(
    body: &mut Body,
    template: &ChatTemplate,
) -> Result<Option<ToolSetup>, ApiError> {
    let tools = body.take("tools");
    let choice = body.take("tool_choice");
    let parallel = match body.take("parallel_tool_calls") {
        None => false,
        Some(Value::Bool(b)) => b,
        Some(v) => return Err(wrong_type("parallel_tool_calls", "a boolean", &v)),
    };
    let tools = match tools {
        None => return Ok(None),
        Some(Value::Array(a)) if a.is_empty() => return Ok(None),
        Some(v @ Value::Array(_)) => v,
        Some(v) => return Err(wrong_type("tools", "a list of tools", &v)),
    };
    let choice = match choice {
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" | "any" => ToolChoice::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!(
                        "'tool_choice' must be auto, none, required or a function, not '{other}'"
                    ),
                ))
            }
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str);
            match name {
                Some(n) => ToolChoice::Named(n.to_string()),
                None => {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        "'tool_choice' as an object must name a function: \
                         {\"type\": \"function\", \"function\": {\"name\": …}}",
                    ))
                }
            }
        }
        Some(v) => return Err(wrong_type("tool_choice", "a string or an object", &v)),
    };
    let format = ToolFormat::of_template(template);
    ToolSetup::new(format, &tools, choice, parallel)
        .map(Some)
        .map_err(|e| {
            let field = match &e {
                ggrs_llama::chat::tools::ToolError::UnknownChoice(_) => "tool_choice",
                _ => "tools",
            };
            ApiError::invalid(field, e.to_string())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> ChatTemplate {
        ChatTemplate::Jinja {
            source: "{{ '<tool_call>' }}".into(),
            bos_token: String::new(),
            eos_token: String::new(),
        }
    }

    #[test]
    fn tool_fields_are_read() {
        let mut b = Body::parse(
            br#"{"tools": [{"type": "function", "function": {"name": "f"}}],
                 "tool_choice": {"type": "function", "function": {"name": "f"}},
                 "parallel_tool_calls": true}"#,
        )
        .unwrap();
        let s = setup(&mut b, &template()).unwrap().unwrap();
        assert_eq!(s.choice, ToolChoice::Named("f".into()));
        assert!(s.parallel && s.format == ToolFormat::Hermes);
        assert!(b.get("tools").is_none());
        for (json, field) in [
            (
                r#"{"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "maybe"}"#,
                "tool_choice",
            ),
            (
                r#"{"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}"#,
                "tool_choice",
            ),
            (r#"{"tools": {"name": "f"}}"#, "tools"),
            (r#"{"tools": [{"type": "function"}]}"#, "tools"),
        ] {
            let mut b = Body::parse(json.as_bytes()).unwrap();
            let e = setup(&mut b, &template()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{json}");
        }
        let mut b = Body::parse(br#"{"tools": [], "tool_choice": "none"}"#).unwrap();
        assert!(setup(&mut b, &template()).unwrap().is_none());
    }
}
