//! Structured outputs: the `grammar` (llama.cpp GBNF), `json_schema` (llama-server) and
//! `response_format` (OpenAI: `text`, `json_object`, `json_schema`) fields of a completion
//! request, compiled into a [`Constraint`] the engine applies while sampling.

use ggrs_llama::constraint::{Constraint, GrammarSpec, LazyTrigger};
use ggrs_llama::Tokenizer;
use serde_json::Value;

use crate::error::ApiError;
use crate::json_values::wrong_type;
use crate::params::Body;

/// What the request asks the output to follow (none: free text), and the field that asked.
pub(crate) fn spec(body: &mut Body) -> Result<Option<(&'static str, GrammarSpec)>, ApiError> {
    let mut found: Vec<(&'static str, GrammarSpec)> = Vec::new();
    if let Some(v) = body.take("grammar") {
        match v {
            Value::String(s) if s.trim().is_empty() => {}
            Value::String(s) => found.push(("grammar", GrammarSpec::Gbnf(s))),
            v => return Err(wrong_type("grammar", "a string (a GBNF grammar)", &v)),
        }
    }
    if let Some(v) = body.take("json_schema") {
        match v {
            Value::Object(o) if o.is_empty() => {
                found.push(("json_schema", GrammarSpec::JsonSchema(Value::Object(o))))
            }
            v @ (Value::Object(_) | Value::Bool(true)) => {
                found.push(("json_schema", GrammarSpec::JsonSchema(v)))
            }
            v => return Err(wrong_type("json_schema", "an object (a JSON Schema)", &v)),
        }
    }
    if let Some(v) = body.take("response_format") {
        if let Some(s) = response_format(&v)? {
            found.push(("response_format", s));
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(ApiError::invalid(
            found[1].0,
            format!(
                "give one of 'grammar', 'json_schema' and 'response_format', not '{}' and '{}'",
                found[0].0, found[1].0
            ),
        )),
    }
}

/// `response_format`: `{"type": "text"}` (none), `{"type": "json_object"}` (any object;
/// llama-server also takes a `schema` there), `{"type": "json_schema", "json_schema":
/// {"name", "schema", "strict"}}`.
fn response_format(v: &Value) -> Result<Option<GrammarSpec>, ApiError> {
    const F: &str = "response_format";
    let Some(o) = v.as_object() else {
        return Err(wrong_type(F, "an object", v));
    };
    let schema_in = |o: &serde_json::Map<String, Value>, at: &str| match o.get("schema") {
        None | Some(Value::Null) => Ok(None),
        Some(s @ (Value::Object(_) | Value::Bool(true))) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid(
            F,
            format!("'{at}' must be an object (a JSON Schema)"),
        )),
    };
    match o.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(match schema_in(o, "response_format.schema")? {
            Some(s) => GrammarSpec::JsonSchema(s),
            None => GrammarSpec::JsonObject,
        })),
        Some("json_schema") => {
            let js = match o.get("json_schema") {
                Some(Value::Object(js)) => js,
                Some(_) => {
                    return Err(ApiError::invalid(
                        F,
                        "'response_format.json_schema' must be an object",
                    ))
                }
                None => {
                    return Err(ApiError::invalid(
                        F,
                        "'response_format' of type 'json_schema' needs a 'json_schema' object \
                         with the 'schema'",
                    ))
                }
            };
            // OpenAI nests it under `schema`; some clients send the schema itself.
            let schema = match schema_in(js, "response_format.json_schema.schema")? {
                Some(s) => s,
                None if js.contains_key("type") || js.contains_key("properties") => {
                    Value::Object(js.clone())
                }
                None => serde_json::json!({}),
            };
            Ok(Some(GrammarSpec::JsonSchema(schema)))
        }
        Some(t) => Err(ApiError::invalid(
            F,
            format!(
                "'response_format' has an unknown type '{t}' (text, json_object or json_schema)"
            ),
        )),
        None => Err(ApiError::invalid(
            F,
            "'response_format' needs a 'type' (text, json_object or json_schema)",
        )),
    }
}

/// Compiles what the request asks for (off the async threads: the first constraint on a
/// model builds the vocabulary's token trie). A 400 names the field and says why it does not
/// compile.
/// `lazy`: start only after one of its trigger words (a tool call's opening).
pub(crate) async fn compile(
    tok: &Tokenizer,
    spec: Option<(&'static str, GrammarSpec)>,
    lazy: Option<LazyTrigger>,
) -> Result<Option<Constraint>, ApiError> {
    let Some((field, spec)) = spec else {
        return Ok(None);
    };
    let tok = tok.clone();
    let r = tokio::task::spawn_blocking(move || Constraint::compile_lazy(&tok, spec, lazy))
        .await
        .map_err(|e| ApiError::server(format!("compiling the constraint failed: {e}")))?;
    r.map(Some)
        .map_err(|e| ApiError::invalid(field, format!("'{field}': {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(s: &str) -> Body {
        Body::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn fields_are_read_and_removed() {
        let mut b = body(r#"{"grammar": "root ::= \"a\"", "x": 1}"#);
        assert!(matches!(
            spec(&mut b).unwrap(),
            Some(("grammar", GrammarSpec::Gbnf(_)))
        ));
        assert!(b.get("grammar").is_none());
        let mut b = body(r#"{"response_format": {"type": "json_object"}}"#);
        assert_eq!(spec(&mut b).unwrap().unwrap().1, GrammarSpec::JsonObject);
        let mut b = body(
            r#"{"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": {"type": "integer"}}}}"#,
        );
        assert_eq!(
            spec(&mut b).unwrap().unwrap().1,
            GrammarSpec::JsonSchema(serde_json::json!({"type": "integer"}))
        );
        let mut b = body(r#"{"response_format": {"type": "text"}}"#);
        assert!(spec(&mut b).unwrap().is_none());
        let mut b = body(r#"{"grammar": "root ::= \"a\"", "json_schema": {}}"#);
        assert!(spec(&mut b).is_err());
        let mut b = body(r#"{"response_format": {"type": "xml"}}"#);
        assert!(spec(&mut b).is_err());
        let mut b = body(r#"{"json_schema": 3}"#);
        assert!(spec(&mut b).is_err());
    }
}
