//! The inputs of an embedding request (`input`, or llama-server's `content`) in every form
//! llama-server 0c1e570 takes them:
//! - a string: one input, with the model's special tokens (BOS/CLS, EOS/SEP) added;
//! - a list of token ids: one input, as given;
//! - a list mixing token ids and strings (`[12, 34, "text", 56]`): one input, the strings
//!   tokenized in place (special tokens added only to a string that comes first);
//! - `{"prompt_string": "text"}` (or a mixed list in place of the text) and
//!   `{"content": [{"type": "text", "text": …}, …]}` (the text parts joined): one input, as
//!   a string (a list);
//! - a list of the above (strings, lists, objects): one input each.
//!
//! An input whose tokens are empty (an empty string on a model that adds no special token,
//! an empty list) is a 400, as are image, audio and video parts (the model reads text only).

use serde_json::Value;

use crate::error::ApiError;
use crate::limits::{check_text, Cancel};

/// Most inputs one request may carry (OpenAI's limit for `/v1/embeddings`; documents of a
/// rerank request).
pub(crate) const MAX_INPUTS: usize = 2048;

/// 400 naming `field` when a request has more than [`MAX_INPUTS`] inputs.
pub(crate) fn check_count(field: &str, n: usize) -> Result<(), ApiError> {
    if n > MAX_INPUTS {
        return Err(ApiError::invalid(
            field,
            format!("'{field}' has {n} inputs; a request may have at most {MAX_INPUTS}"),
        ));
    }
    Ok(())
}

/// The inputs of `v` (the request's `field`) in the forms of the [module docs](self); at
/// most [`MAX_INPUTS`] of them and `max_text_bytes` of text in all, tokenized here (on the
/// preparation pool) and checked. `tokenize(i, text, add_special)` and `check(i, ids)` are
/// the model's (the fuzz target gives its own).
pub(crate) fn inputs(
    field: &str,
    v: &Value,
    max_text_bytes: usize,
    cancel: &Cancel,
    tokenize: impl Fn(usize, &str, bool) -> Result<Vec<u32>, ApiError>,
    check: impl Fn(usize, &[u32]) -> Result<(), ApiError>,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let items: Vec<&Value> = match v {
        Value::String(_) | Value::Object(_) => vec![v],
        Value::Array(a) if a.is_empty() => {
            return Err(ApiError::invalid(
                field,
                format!("'{field}' is an empty list"),
            ))
        }
        Value::Array(a) if a.iter().any(Value::is_number) => vec![v],
        Value::Array(a) => a.iter().collect(),
        _ => return Err(shape_error(field)),
    };
    check_count(field, items.len())?;
    let mut texts = Vec::with_capacity(items.len());
    for (i, x) in items.iter().enumerate() {
        texts.push(Input::read(field, i, x)?);
    }
    let text_bytes: usize = texts.iter().map(Input::text_bytes).sum();
    check_text(max_text_bytes, field, text_bytes)?;
    let mut list = Vec::with_capacity(texts.len());
    for (i, input) in texts.into_iter().enumerate() {
        cancel.check()?;
        let t = match input {
            Input::Text(t) => tokenize(i, &t, true)?,
            Input::Mixed(parts) => {
                let mut ids = Vec::new();
                for (k, p) in parts.into_iter().enumerate() {
                    match p {
                        Part::Id(id) => ids.push(id),
                        Part::Text(t) => ids.extend(tokenize(i, t, k == 0)?),
                    }
                }
                ids
            }
        };
        check(i, &t)?;
        list.push(t);
    }
    Ok(list)
}

fn shape_error(field: &str) -> ApiError {
    ApiError::invalid(
        field,
        format!(
            "'{field}' must be a string, a list of token ids (strings may be mixed in), an \
             object with `prompt_string` or text `content` parts, or a list of these"
        ),
    )
}

/// One input before tokenizing.
enum Input<'a> {
    /// Text, special tokens added.
    Text(String),
    /// Token ids and strings.
    Mixed(Vec<Part<'a>>),
}

/// A piece of a mixed input.
enum Part<'a> {
    Id(u32),
    Text(&'a str),
}

impl<'a> Input<'a> {
    /// Input `i` of the request's `field`, checked for shape.
    fn read(field: &str, i: usize, x: &'a Value) -> Result<Input<'a>, ApiError> {
        let invalid = |m: String| ApiError::invalid(field, format!("input {i}: {m}"));
        match x {
            Value::String(t) => Ok(Input::Text(t.clone())),
            Value::Array(a) => Input::mixed(a).map_err(invalid),
            Value::Object(o) => {
                if let Some(p) = o.get("prompt_string") {
                    let has_media = o
                        .get("multimodal_data")
                        .is_some_and(|m| m.as_array().is_none_or(|a| !a.is_empty()));
                    if has_media {
                        return Err(invalid(
                            "`multimodal_data`: this model reads text only".into(),
                        ));
                    }
                    return match p {
                        Value::String(t) => Ok(Input::Text(t.clone())),
                        Value::Array(a) => Input::mixed(a).map_err(invalid),
                        _ => Err(invalid(
                            "`prompt_string` must be a string or a list of token ids and \
                             strings"
                                .into(),
                        )),
                    };
                }
                let Some(Value::Array(parts)) = o.get("content") else {
                    return Err(invalid(
                        "an object needs `prompt_string` (a string) or `content` (a list of \
                         text parts)"
                            .into(),
                    ));
                };
                let mut text = String::new();
                for part in parts {
                    match (part.get("type").and_then(Value::as_str), part.get("text")) {
                        (Some("text"), Some(Value::String(t))) => text.push_str(t),
                        (Some("text"), _) => {
                            return Err(invalid("a text part needs `text` (a string)".into()))
                        }
                        (Some(ty), _) => {
                            return Err(invalid(format!(
                                "a `{ty}` part: this model reads text only"
                            )))
                        }
                        (None, _) => return Err(invalid("a content part needs `type`".into())),
                    }
                }
                Ok(Input::Text(text))
            }
            _ => Err(shape_error(field)),
        }
    }

    /// A list of token ids and strings (`[12, "text", 34]`) as one input.
    fn mixed(a: &'a [Value]) -> Result<Input<'a>, String> {
        a.iter()
            .map(|p| match p {
                Value::String(t) => Ok(Part::Text(t)),
                p => p
                    .as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .map(Part::Id)
                    .ok_or_else(|| "a list holds token ids (integers) and strings".to_string()),
            })
            .collect::<Result<_, _>>()
            .map(Input::Mixed)
    }

    /// Bytes of text to tokenize.
    fn text_bytes(&self) -> usize {
        match self {
            Input::Text(t) => t.len(),
            Input::Mixed(parts) => parts
                .iter()
                .map(|p| match p {
                    Part::Text(t) => t.len(),
                    Part::Id(_) => 0,
                })
                .sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Tokens: a text's bytes, special tokens 1 and 2 around it when asked.
    fn run(v: Value) -> Result<Vec<Vec<u32>>, ApiError> {
        let tokenize = |_: usize, t: &str, special: bool| {
            let mut ids: Vec<u32> = t.bytes().map(u32::from).collect();
            if special {
                ids.insert(0, 1);
                ids.push(2);
            }
            Ok(ids)
        };
        let check = |i: usize, t: &[u32]| match t.is_empty() {
            true => Err(ApiError::invalid("input", format!("input {i} is empty"))),
            false => Ok(()),
        };
        inputs("input", &v, 1 << 20, &Cancel::default(), tokenize, check)
    }

    #[test]
    fn every_llama_server_form() {
        assert_eq!(run(json!("ab")).unwrap(), [vec![1, 97, 98, 2]]);
        assert_eq!(run(json!("")).unwrap(), [vec![1, 2]]);
        assert_eq!(run(json!([12, 34])).unwrap(), [vec![12, 34]]);
        assert_eq!(
            run(json!(["a", 7, "b"])).unwrap(),
            [vec![1, 97, 2, 7, 98]],
            "only a leading string gets special tokens"
        );
        assert_eq!(run(json!([7, "b"])).unwrap(), [vec![7, 98]]);
        assert_eq!(
            run(json!(["a", [5, 6], {"prompt_string": "b"}])).unwrap(),
            [vec![1, 97, 2], vec![5, 6], vec![1, 98, 2]]
        );
        assert_eq!(
            run(json!({"prompt_string": [7, "b"]})).unwrap(),
            run(json!([7, "b"])).unwrap()
        );
        assert_eq!(
            run(json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}))
                .unwrap(),
            run(json!("ab")).unwrap()
        );
        for bad in [
            json!([]),
            json!([[]]),
            json!(3),
            json!(null),
            json!([1.5]),
            json!([-1]),
            json!({"content": "string"}),
            json!({"content": [{"type": "unknown"}]}),
            json!({"content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}),
            json!({"prompt_string": "a", "multimodal_data": ["AAAA"]}),
            json!({"prompt_string": 3}),
            json!({"prompt_string": [1, null]}),
            json!({"other": 1}),
            json!([["a", {"x": 1}]]),
        ] {
            let e = run(bad.clone()).expect_err(&bad.to_string());
            assert!(e.status == 400 && !e.message.is_empty(), "{bad}");
        }
    }
}
