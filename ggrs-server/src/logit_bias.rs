//! `logit_bias` in every form llama-server reads it, each bias a number or `false` (never
//! sample the token: −∞):
//! - an object (OpenAI's form): `{"15043": -1.5}`; a key that is an integer is a token id,
//!   any other key is text, and each of its tokens gets the bias (`{" hello": false}`);
//! - a list of pairs (llama-server's): `[[15043, -1.5], [" hello", false]]`; the first
//!   element is a token id (an integer) or text (a string, tokenized: even `"15043"` is
//!   text here, as llama-server reads it).
//!
//! Text is tokenized as llama-server does it: without BOS, special-token text read as plain
//! text. Where llama-server silently skips what it cannot read (an id out of range, a bias
//! that is not a number, a pair of three), this is a 400 naming `logit_bias`.

use ggrs_llama::Model;
use serde_json::Value;

use crate::error::ApiError;
use crate::json_values::wrong_type;

const F: &str = "logit_bias";

/// The vocabulary `logit_bias` is read against: its size (ids are below it) and the
/// tokenizer its text keys go through.
pub(crate) trait Vocab {
    /// Number of token ids (the size of the model's logits).
    fn n_vocab(&self) -> usize;

    /// The tokens of `text`, without BOS and with special-token text read as plain text
    /// (llama-server's tokenizing of a `logit_bias` key); the error says why not.
    fn tokenize(&self, text: &str) -> Result<Vec<u32>, String>;
}

impl Vocab for Model {
    fn n_vocab(&self) -> usize {
        self.hparams.n_vocab
    }

    fn tokenize(&self, text: &str) -> Result<Vec<u32>, String> {
        self.text()
            .encode(self.tokenizer(), text, false, false)
            .map_err(|e| e.to_string())
    }
}

/// `logit_bias` of a request body (`v`: the field's value, none when absent or null):
/// `(token id, bias)` pairs in the order given, a token of a text once per occurrence
/// (biases of a token given twice add up, as in llama-server's sampler).
pub(crate) fn read(v: Option<&Value>, vocab: &dyn Vocab) -> Result<Vec<(u32, f32)>, ApiError> {
    let mut out = Vec::new();
    match v {
        None => {}
        Some(Value::Object(m)) => {
            for (key, bias) in m {
                let bias = bias_value(bias)?;
                // Leading blanks are allowed before an id, as llama-server's `strtol` allows them.
                match key.trim_start().parse::<i64>() {
                    Ok(id) => out.push((token_id(id, vocab)?, bias)),
                    Err(_) => out.extend(text_tokens(key, vocab)?.into_iter().map(|t| (t, bias))),
                }
            }
        }
        Some(Value::Array(pairs)) => {
            for pair in pairs {
                let Some([token, bias]) = pair.as_array().map(Vec::as_slice) else {
                    return Err(wrong_type(
                        F,
                        "a list of [token id or text, bias] pairs",
                        pair,
                    ));
                };
                let bias = bias_value(bias)?;
                match token {
                    Value::String(text) => {
                        out.extend(text_tokens(text, vocab)?.into_iter().map(|t| (t, bias)))
                    }
                    t => match crate::json_values::as_int(t) {
                        Some(id) => out.push((token_id(id, vocab)?, bias)),
                        None => {
                            return Err(wrong_type(
                                F,
                                "a list of [token id or text, bias] pairs, each token an \
                                 integer or a string",
                                t,
                            ))
                        }
                    },
                }
            }
        }
        Some(v) => {
            return Err(wrong_type(
                F,
                "an object of token ids or texts to biases, or a list of [token, bias] pairs",
                v,
            ))
        }
    }
    Ok(out)
}

/// A bias: a number, or `false` (−∞: never sample the token).
fn bias_value(v: &Value) -> Result<f32, ApiError> {
    match v {
        Value::Bool(false) => Ok(f32::NEG_INFINITY),
        v => v.as_f64().map(|x| x as f32).ok_or_else(|| {
            ApiError::invalid(
                F,
                format!(
                    "a bias in '{F}' must be a number or false, not {}",
                    crate::json_values::type_name(v)
                ),
            )
        }),
    }
}

/// `id` checked against the vocabulary.
fn token_id(id: i64, vocab: &dyn Vocab) -> Result<u32, ApiError> {
    let n = vocab.n_vocab();
    u32::try_from(id)
        .ok()
        .filter(|&t| (t as usize) < n)
        .ok_or_else(|| {
            ApiError::invalid(
                F,
                format!(
                    "token id {id} in '{F}' is out of range: ids are below {n} (the \
                     vocabulary size)"
                ),
            )
        })
}

/// The tokens of a text key; text with none (the empty string) is refused.
fn text_tokens(text: &str, vocab: &dyn Vocab) -> Result<Vec<u32>, ApiError> {
    let ids = vocab.tokenize(text).map_err(|e| {
        ApiError::invalid(
            F,
            format!("the text {text:?} in '{F}' cannot be tokenized: {e}"),
        )
    })?;
    if ids.is_empty() {
        return Err(ApiError::invalid(
            F,
            format!("the text {text:?} in '{F}' is neither a token id nor text with tokens"),
        ));
    }
    // The tokenizer gives ids of its own vocabulary; one beyond the logits (a file whose
    // vocabulary outgrows its output layer) is refused rather than ignored.
    ids.into_iter().map(|t| token_id(t as i64, vocab)).collect()
}

/// A vocabulary for tests and the fuzz target, no model needed: `n` ids, a text's tokens
/// are its bytes (each below `n`, else the text cannot be tokenized).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ByteVocab(pub usize);

impl Vocab for ByteVocab {
    fn n_vocab(&self) -> usize {
        self.0
    }

    fn tokenize(&self, text: &str) -> Result<Vec<u32>, String> {
        text.bytes()
            .map(|b| match (b as usize) < self.0 {
                true => Ok(u32::from(b)),
                false => Err(format!("byte {b} has no token")),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bias(v: Value) -> Result<Vec<(u32, f32)>, ApiError> {
        read(Some(&v), &ByteVocab(128))
    }

    /// Every form gives what the plain id form gives for the same tokens.
    #[test]
    fn every_form_gives_the_id_form() {
        let ids = bias(json!({"104": -1.5, "105": -1.5})).unwrap();
        assert_eq!(ids, vec![(104, -1.5), (105, -1.5)]);
        for same in [
            json!({"hi": -1.5}),
            json!([[104, -1.5], [105, -1.5]]),
            json!([["hi", -1.5]]),
            json!([["h", -1.5], [105.0, -1.5]]),
        ] {
            assert_eq!(bias(same.clone()).unwrap(), ids, "{same}");
        }
        // false bans: −∞ in every form.
        let ban = bias(json!({"104": false})).unwrap();
        assert_eq!(ban, vec![(104, f32::NEG_INFINITY)]);
        assert_eq!(bias(json!({"h": false})).unwrap(), ban);
        assert_eq!(bias(json!([["h", false]])).unwrap(), ban);
        assert_eq!(bias(json!([[104, false]])).unwrap(), ban);
        // In the pair form a string is text even when it reads as a number.
        assert_eq!(
            bias(json!([["12", 2.0]])).unwrap(),
            vec![(u32::from(b'1'), 2.0), (u32::from(b'2'), 2.0)]
        );
        assert!(read(None, &ByteVocab(128)).unwrap().is_empty());
    }

    #[test]
    fn bad_input_is_a_400_naming_the_field() {
        for bad in [
            json!({"300": 1}),
            json!({"-1": 1}),
            json!({"": 1}),
            json!({"104": "1"}),
            json!({"104": true}),
            json!({"104": null}),
            json!({"é": 1}),
            json!([[300, 1]]),
            json!([[-1, 1]]),
            json!([[1.5, 1]]),
            json!([[104, 1, 2]]),
            json!([104, 1]),
            json!([["", 1]]),
            json!([[104, [1]]]),
            json!([[null, 1]]),
            json!("104"),
            json!(3),
        ] {
            let e = bias(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(e.status, 400, "{bad}");
            assert_eq!(e.param.as_deref(), Some(F), "{bad}");
            assert!(e.message.contains(F), "{bad}: {}", e.message);
        }
    }
}
