//! Reading a request's JSON: typed fields with errors that name them, the sampling options
//! both completion endpoints share, and the fields this server refuses.

use ggrs_llama::chat::reply::ReplySyntax;
use ggrs_llama::chat::tools::{new_call_id, ToolCall};
use ggrs_llama::chat::Message;
use ggrs_llama::{GenerateParams, SamplingParams};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::json_values::{as_int, type_name, wrong_type};
use crate::logit_bias::{self, Vocab};

/// Which endpoint a body is for (their `logprobs` fields differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Chat,
    Completions,
}

/// A request body: a JSON object.
pub(crate) struct Body(Map<String, Value>);

impl Body {
    /// Parses `bytes` as a JSON object.
    pub fn parse(bytes: &[u8]) -> Result<Body, ApiError> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
        match v {
            Value::Object(m) => Ok(Body(m)),
            v => Err(ApiError::bad_request(format!(
                "the body must be a JSON object, not {}",
                type_name(&v)
            ))),
        }
    }

    /// Removes the field `k` and gives its value (none when absent or null): for fields
    /// read by a module of their own before [`gen_options`] sees the rest.
    pub fn take(&mut self, k: &str) -> Option<Value> {
        self.0.remove(k).filter(|v| !v.is_null())
    }

    /// The field `k`, absent when null.
    pub fn get(&self, k: &str) -> Option<&Value> {
        self.0.get(k).filter(|v| !v.is_null())
    }

    pub fn f32(&self, k: &str) -> Result<Option<f32>, ApiError> {
        self.get(k)
            .map(|v| {
                v.as_f64()
                    .map(|x| x as f32)
                    .ok_or_else(|| wrong_type(k, "a number", v))
            })
            .transpose()
    }

    pub fn int(&self, k: &str) -> Result<Option<i64>, ApiError> {
        self.get(k)
            .map(|v| as_int(v).ok_or_else(|| wrong_type(k, "an integer", v)))
            .transpose()
    }

    pub fn bool(&self, k: &str) -> Result<Option<bool>, ApiError> {
        self.get(k)
            .map(|v| v.as_bool().ok_or_else(|| wrong_type(k, "a boolean", v)))
            .transpose()
    }

    pub fn str(&self, k: &str) -> Result<Option<&str>, ApiError> {
        self.get(k)
            .map(|v| v.as_str().ok_or_else(|| wrong_type(k, "a string", v)))
            .transpose()
    }

    /// A non-negative integer at most `max`.
    pub fn count(&self, k: &str, max: u64) -> Result<Option<usize>, ApiError> {
        match self.int(k)? {
            None => Ok(None),
            Some(n) if n >= 0 && n as u64 <= max => Ok(Some(n as usize)),
            Some(n) => Err(ApiError::invalid(
                k,
                format!("'{k}' must be between 0 and {max}, not {n}"),
            )),
        }
    }
}

/// Fields that would change the output in a way this server does not implement, with the
/// value that leaves the output alone (such a value is accepted). Fields not named here
/// nor read are ignored, as llama-server ignores them (`user`, `metadata`, `store`, …).
const UNSUPPORTED: &[(&str, &str)] = &[
    ("functions", "no function calling"),
    ("function_call", "no function calling"),
    ("response_format", "only {\"type\": \"text\"}"),
    ("grammar", "no grammar-constrained sampling"),
    ("json_schema", "no schema-constrained sampling"),
    ("mirostat", "no Mirostat sampling"),
    ("typical_p", "no locally typical sampling"),
    ("dynatemp_range", "no dynamic temperature"),
    ("xtc_probability", "no XTC sampling"),
    ("dry_multiplier", "no DRY sampling"),
    ("top_n_sigma", "no top-n-sigma sampling"),
    ("echo", "the prompt is not echoed"),
    ("suffix", "no fill-in-the-middle"),
    ("best_of", "best-of ranking is not done; use n"),
    ("audio", "text only"),
    ("modalities", "text only"),
    ("prediction", "no predicted outputs"),
    ("lora", "no LoRA adapters"),
    ("samplers", "the sampler order is fixed"),
];

/// Whether `v` is the value of `field` that changes nothing.
fn neutral(field: &str, v: &Value, n: usize) -> bool {
    let empty = |v: &Value| match v {
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    };
    let num = |x: f64| v.as_f64() == Some(x);
    match field {
        "tools" | "functions" | "grammar" | "json_schema" | "suffix" | "samplers" => empty(v),
        "tool_choice" | "function_call" => v.as_str() == Some("none"),
        "parallel_tool_calls" => v.is_boolean(),
        "response_format" => v.get("type").and_then(Value::as_str) == Some("text"),
        "mirostat" | "dynatemp_range" | "xtc_probability" | "dry_multiplier" => num(0.0),
        "typical_p" => num(1.0),
        "top_n_sigma" => v.as_f64().is_some_and(|x| x <= 0.0),
        "echo" => v.as_bool() == Some(false),
        "best_of" => as_int(v).is_some_and(|b| b <= 1 || b as usize == n),
        "modalities" => v
            .as_array()
            .is_some_and(|a| a.iter().all(|m| m.as_str() == Some("text"))),
        _ => false,
    }
}

/// Options of a completion request besides its prompt.
#[derive(Debug, Clone)]
pub(crate) struct GenOptions {
    pub params: GenerateParams,
    /// Choices per prompt.
    pub n: usize,
    pub stream: bool,
    pub include_usage: bool,
    pub cache_prompt: bool,
    /// Draft and verify tokens when the server speculates (`"speculative"`, default true;
    /// the output is the same either way).
    pub speculative: bool,
    /// Prompt tokens a context shift keeps (`"n_keep"`, llama-server's; -1: the whole
    /// prompt; none: the server's `--keep`).
    pub n_keep: Option<i32>,
    /// Tokens a context shift drops (`"n_discard"`, llama-server's; 0: half).
    pub n_discard: usize,
    /// Cut a prompt that does not fit in a slot instead of refusing it (`"truncate"`).
    pub truncate: bool,
    /// Report log-probabilities (with `params.top_logprobs` alternatives).
    pub logprobs: bool,
    /// How to split a chat reply into reasoning, text and tool calls (none: as it is).
    pub reply: Option<ReplySyntax>,
}

/// Most choices (`n`) per request.
pub(crate) const MAX_N: u64 = 64;
/// Most alternatives (`top_logprobs`) per token.
const MAX_TOP_LOGPROBS: u64 = 20;

/// A random seed for a request that gives none.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// `stop`: a string or a list of strings.
fn stop_strings(body: &Body) -> Result<Vec<String>, ApiError> {
    match body.get("stop") {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| wrong_type("stop", "a string or a list of strings", s))
            })
            .filter(|s| !matches!(s, Ok(s) if s.is_empty()))
            .collect(),
        Some(v) => Err(wrong_type("stop", "a string or a list of strings", v)),
    }
}

/// The token limit: the first of `max_completion_tokens`, `max_tokens`, `n_predict` given
/// (each one present must be an integer); -1 is no limit (as llama-server reads it),
/// other values below 1 are refused (as OpenAI refuses them).
fn max_tokens(body: &Body) -> Result<usize, ApiError> {
    let mut chosen = None;
    for k in ["max_completion_tokens", "max_tokens", "n_predict"] {
        if let Some(m) = body.int(k)? {
            chosen = chosen.or(Some((k, m)));
        }
    }
    match chosen {
        None | Some((_, -1)) => Ok(usize::MAX),
        Some((_, m)) if m > 0 => Ok(m as usize),
        Some((k, m)) => Err(ApiError::invalid(
            k,
            format!("'{k}' must be at least 1 (or -1: up to the context's end), not {m}"),
        )),
    }
}

/// The sampling parameters' ranges, each error naming its field; a `logit_bias` that bans
/// every token of the vocabulary is refused (nothing could be generated).
fn check_sampling(p: &SamplingParams, n_vocab: usize) -> Result<(), ApiError> {
    let finite = |field: &str, v: f32| {
        if v.is_finite() {
            Ok(())
        } else {
            Err(ApiError::invalid(
                field,
                format!("'{field}' must be a finite number (of f32's range), not {v}"),
            ))
        }
    };
    finite("temperature", p.temperature)?;
    finite("frequency_penalty", p.frequency_penalty)?;
    finite("presence_penalty", p.presence_penalty)?;
    for (field, v) in [("top_p", p.top_p), ("min_p", p.min_p)] {
        if !(0.0..=1.0).contains(&v) {
            return Err(ApiError::invalid(
                field,
                format!("'{field}' must be between 0 and 1, not {v}"),
            ));
        }
    }
    if !(p.repeat_penalty.is_finite() && p.repeat_penalty > 0.0) {
        return Err(ApiError::invalid(
            "repeat_penalty",
            format!(
                "'repeat_penalty' must be a finite number above 0, not {}",
                p.repeat_penalty
            ),
        ));
    }
    const F: &str = "logit_bias";
    if let Some(&(t, b)) = p
        .logit_bias
        .iter()
        .find(|(_, b)| !b.is_finite() && *b != f32::NEG_INFINITY)
    {
        return Err(ApiError::invalid(
            F,
            format!(
                "the bias of token {t} is {b}: a bias must be a number of f32's range (or false)"
            ),
        ));
    }
    let banned: std::collections::BTreeSet<u32> = p
        .logit_bias
        .iter()
        .filter(|(_, b)| *b == f32::NEG_INFINITY)
        .map(|&(t, _)| t)
        .collect();
    if n_vocab > 0 && banned.len() >= n_vocab {
        return Err(ApiError::invalid(
            F,
            format!(
                "'{F}' bans all {n_vocab} tokens of the vocabulary: nothing could be generated"
            ),
        ));
    }
    // The library's own checks, should they ever be stricter than the ones above.
    p.validate().map_err(ApiError::bad_request)
}

/// What a request gets for the fields it leaves out (the server's command line, as
/// llama-server's: `-n` caps every request, `--temp`, `--top-k`, …, `--seed` are defaults).
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestDefaults {
    /// The server's `-n`: the most tokens any request generates.
    pub n_predict: Option<usize>,
    /// The samplers' defaults (their `seed` is not used: see `seed`).
    pub sampling: SamplingParams,
    /// `--seed`: the seed of a request that gives none; `None`: a random one per request.
    pub seed: Option<u64>,
}

/// Reads the options both completion endpoints share (llama-server's names; what a
/// request leaves out comes from `defaults`); `vocab`: for `logit_bias`.
pub(crate) fn gen_options(
    body: &Body,
    endpoint: Endpoint,
    defaults: &RequestDefaults,
    vocab: &dyn Vocab,
) -> Result<GenOptions, ApiError> {
    let n = body.int("n")?.unwrap_or(1);
    if !(1..=MAX_N as i64).contains(&n) {
        return Err(ApiError::invalid(
            "n",
            format!("'n' must be between 1 and {MAX_N}, not {n}"),
        ));
    }
    let n = n as usize;
    for (field, why) in UNSUPPORTED {
        if let Some(v) = body.get(field) {
            if !neutral(field, v, n) {
                return Err(ApiError::unsupported(field, why));
            }
        }
    }
    let mut max_tokens = max_tokens(body)?;
    if let Some(cap) = defaults.n_predict {
        max_tokens = max_tokens.min(cap);
    }
    let d = &defaults.sampling;
    let seed = match body.get("seed") {
        None => defaults.seed.unwrap_or_else(random_seed),
        Some(v) => match (v.as_u64(), as_int(v)) {
            (Some(s), _) => s,
            (None, Some(_)) => random_seed(), // negative: random, as llama-server's -1
            _ => return Err(wrong_type("seed", "an integer", v)),
        },
    };
    let repeat_last_n = match body.int("repeat_last_n")? {
        Some(n) if n < 0 => usize::MAX,
        Some(n) => n as usize,
        None => d.penalty_last_n,
    };
    let sampling = SamplingParams {
        temperature: body.f32("temperature")?.unwrap_or(d.temperature),
        top_k: body.int("top_k")?.map_or(d.top_k, |k| k.max(0) as usize),
        top_p: body.f32("top_p")?.unwrap_or(d.top_p),
        min_p: body.f32("min_p")?.unwrap_or(d.min_p),
        repeat_penalty: body.f32("repeat_penalty")?.unwrap_or(d.repeat_penalty),
        frequency_penalty: body
            .f32("frequency_penalty")?
            .unwrap_or(d.frequency_penalty),
        presence_penalty: body.f32("presence_penalty")?.unwrap_or(d.presence_penalty),
        penalty_last_n: repeat_last_n,
        seed,
        logit_bias: logit_bias::read(body.get("logit_bias"), vocab)?,
    };
    check_sampling(&sampling, vocab.n_vocab())?;
    let (logprobs, top_logprobs) = match endpoint {
        Endpoint::Chat => {
            let on = body.bool("logprobs")?.unwrap_or(false);
            let top = body.count("top_logprobs", MAX_TOP_LOGPROBS)?.unwrap_or(0);
            (on, if on { top } else { 0 })
        }
        Endpoint::Completions => {
            let top = match body.get("logprobs") {
                Some(Value::Bool(b)) => b.then_some(0),
                Some(_) => body.count("logprobs", MAX_TOP_LOGPROBS)?,
                None => None,
            };
            let top = match top {
                Some(t) => Some(t),
                None => body.count("n_probs", MAX_TOP_LOGPROBS)?.filter(|&t| t > 0),
            };
            (top.is_some(), top.unwrap_or(0))
        }
    };
    // llama-server's: the probabilities reported are those the sampler chain leaves.
    let post_sampling_probs = body.bool("post_sampling_probs")?.unwrap_or(false);
    let include_usage = match body.get("stream_options") {
        None => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => return Err(wrong_type("stream_options.include_usage", "a boolean", v)),
        },
        Some(v) => return Err(wrong_type("stream_options", "an object", v)),
    };
    Ok(GenOptions {
        params: GenerateParams {
            max_tokens,
            sampling,
            stop: stop_strings(body)?,
            ignore_eos: body.bool("ignore_eos")?.unwrap_or(false),
            top_logprobs,
            post_sampling_probs: logprobs && post_sampling_probs,
            constraint: None,
        },
        n,
        stream: body.bool("stream")?.unwrap_or(false),
        include_usage,
        cache_prompt: body.bool("cache_prompt")?.unwrap_or(true),
        speculative: body.bool("speculative")?.unwrap_or(true),
        n_keep: body
            .int("n_keep")?
            .map(|k| k.clamp(-1, i32::MAX as i64) as i32),
        n_discard: body.count("n_discard", u32::MAX as u64)?.unwrap_or(0),
        truncate: body.bool("truncate")?.unwrap_or(false),
        logprobs,
        reply: None,
    })
}

/// The conversation of a chat request: `messages`, each with a `role` (`system`,
/// `developer` — read as `system` —, `user`, `assistant`) and a `content` that is a string
/// or a list of text parts.
pub(crate) fn messages(body: &Body) -> Result<Vec<Message>, ApiError> {
    const F: &str = "messages";
    let list = match body.get(F) {
        None => return Err(ApiError::invalid(F, "'messages' is required")),
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid(F, "'messages' must not be empty"))
        }
        Some(Value::Array(a)) => a,
        Some(v) => return Err(wrong_type(F, "a list of messages", v)),
    };
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let at = format!("messages[{i}]");
            let Some(m) = m.as_object() else {
                return Err(wrong_type(&at, "an object", m));
            };
            let role = match m.get("role") {
                Some(Value::String(r)) => r.as_str(),
                Some(v) => return Err(wrong_type(&format!("{at}.role"), "a string", v)),
                None => {
                    return Err(ApiError::invalid(
                        format!("{at}.role"),
                        "a message needs a 'role'",
                    ))
                }
            };
            let role = match role {
                "system" | "developer" => "system",
                "user" | "assistant" | "tool" => role,
                "function" => "tool",
                other => {
                    return Err(ApiError::unsupported(
                        &format!("{at}.role"),
                        &format!(
                            "role '{other}' (only system, developer, user, assistant and tool)"
                        ),
                    ))
                }
            };
            let mut msg = Message::new(role, content(m.get("content"), &at)?);
            if role == "assistant" {
                msg.tool_calls = tool_calls(m.get("tool_calls"), &at)?;
                msg.reasoning_content = match m.get("reasoning_content") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(r)) => Some(r.clone()),
                    Some(v) => {
                        return Err(wrong_type(
                            &format!("{at}.reasoning_content"),
                            "a string",
                            v,
                        ))
                    }
                };
            }
            if role == "tool" {
                let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
                msg.tool_call_id = s("tool_call_id");
                msg.name = s("name");
            }
            Ok(msg)
        })
        .collect()
}

/// An assistant message's `tool_calls`: `[{"id", "type": "function", "function": {"name",
/// "arguments"}}]`, the arguments a JSON text (or, as some clients send them, an object).
fn tool_calls(v: Option<&Value>, at: &str) -> Result<Vec<ToolCall>, ApiError> {
    let field = format!("{at}.tool_calls");
    let list = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(wrong_type(&field, "a list of tool calls", v)),
    };
    list.iter()
        .map(|c| {
            let f = c.get("function").unwrap_or(c);
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid(&field, "a tool call needs a 'function' with a 'name'")
            })?;
            let arguments = match f.get("arguments") {
                None | Some(Value::Null) => "{}".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
            };
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(new_call_id, str::to_string);
            Ok(ToolCall {
                id,
                name: name.to_string(),
                arguments,
            })
        })
        .collect()
}

/// A message's content: a string, a list of `{"type": "text", "text": …}` parts (joined),
/// or null (empty).
fn content(v: Option<&Value>, at: &str) -> Result<String, ApiError> {
    let field = format!("{at}.content");
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    (Some("text"), _) => {
                        return Err(wrong_type(&field, "text parts with a 'text' string", p))
                    }
                    (Some(kind), _) => {
                        return Err(ApiError::unsupported(
                            &field,
                            &format!("content parts of type '{kind}' (text only)"),
                        ))
                    }
                    (None, _) => {
                        return Err(wrong_type(&field, "a string or a list of text parts", p))
                    }
                }
            }
            Ok(text)
        }
        Some(v) => Err(wrong_type(&field, "a string or a list of text parts", v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary of 100 ids, text keys tokenized to their bytes.
    const V: crate::logit_bias::ByteVocab = crate::logit_bias::ByteVocab(100);

    fn body(s: &str) -> Body {
        Body::parse(s.as_bytes()).expect("valid test JSON")
    }

    #[test]
    fn defaults_are_llama_servers() {
        let none = RequestDefaults::default();
        let o = gen_options(&body("{}"), Endpoint::Chat, &none, &V).unwrap();
        let d = SamplingParams::default();
        assert_eq!(o.params.sampling.temperature, d.temperature);
        assert_eq!(o.params.sampling.top_k, d.top_k);
        assert_eq!(o.params.max_tokens, usize::MAX);
        assert!(o.cache_prompt && !o.stream && !o.logprobs && o.n == 1);
        let cap = RequestDefaults {
            n_predict: Some(8),
            ..Default::default()
        };
        let capped = gen_options(&body(r#"{"max_tokens": 50}"#), Endpoint::Chat, &cap, &V);
        assert_eq!(capped.unwrap().params.max_tokens, 8);
    }

    #[test]
    fn server_defaults_fill_what_a_request_leaves_out() {
        let server = RequestDefaults {
            n_predict: None,
            sampling: SamplingParams {
                temperature: 0.3,
                top_k: 7,
                min_p: 0.0,
                ..Default::default()
            },
            seed: Some(42),
        };
        let o = gen_options(&body("{}"), Endpoint::Chat, &server, &V).unwrap();
        let s = &o.params.sampling;
        assert_eq!((s.temperature, s.top_k, s.min_p, s.seed), (0.3, 7, 0.0, 42));
        assert_eq!(s.top_p, SamplingParams::default().top_p);
        let o = gen_options(
            &body(r#"{"temperature": 1.5, "top_k": 3, "seed": 9}"#),
            Endpoint::Chat,
            &server,
            &V,
        )
        .unwrap();
        let s = &o.params.sampling;
        assert_eq!((s.temperature, s.top_k, s.seed), (1.5, 3, 9));
        // Without a server seed, two requests without one get different seeds.
        let none = RequestDefaults::default();
        let a = gen_options(&body("{}"), Endpoint::Chat, &none, &V).unwrap();
        let b = gen_options(&body("{}"), Endpoint::Chat, &none, &V).unwrap();
        assert_ne!(a.params.sampling.seed, b.params.sampling.seed);
    }

    #[test]
    fn fields_are_read_and_checked() {
        let o = gen_options(
            &body(
                r#"{"stop": ["a", ""], "seed": 7, "logit_bias": {"3": -1.5, "4": false},
                    "logprobs": 2, "n": 3, "top_k": -1, "stream": true,
                    "stream_options": {"include_usage": true}}"#,
            ),
            Endpoint::Completions,
            &RequestDefaults::default(),
            &V,
        )
        .unwrap();
        assert_eq!(o.params.stop, vec!["a".to_string()]);
        assert_eq!(o.params.sampling.seed, 7);
        assert_eq!(
            o.params.sampling.logit_bias,
            vec![(3, -1.5), (4, f32::NEG_INFINITY)]
        );
        assert!(o.logprobs && o.params.top_logprobs == 2 && o.n == 3);
        assert_eq!(o.params.sampling.top_k, 0);
        assert!(o.stream && o.include_usage);
        for (json, param) in [
            (r#"{"temperature": "hot"}"#, "temperature"),
            (r#"{"logit_bias": {"100": 1}}"#, "logit_bias"),
            (
                r#"{"response_format": {"type": "json_object"}}"#,
                "response_format",
            ),
            (r#"{"n": 0}"#, "n"),
            (r#"{"max_tokens": 0}"#, "max_tokens"),
            (r#"{"stop": 3}"#, "stop"),
        ] {
            let e = gen_options(&body(json), Endpoint::Chat, &RequestDefaults::default(), &V)
                .unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{json}: {e:?}");
        }
        // Neutral values of unsupported fields, and unknown fields, pass.
        gen_options(
            &body(r#"{"tools": [], "response_format": {"type": "text"}, "user": "x", "foo": 1}"#),
            Endpoint::Chat,
            &RequestDefaults::default(),
            &V,
        )
        .unwrap();
    }

    /// `post_sampling_probs` asks for the sampler's probabilities only with probabilities
    /// asked for; `logit_bias` by text reaches the sampler as the same ids would.
    #[test]
    fn post_sampling_probs_and_logit_bias_text() {
        let read = |json: &str| {
            gen_options(
                &body(json),
                Endpoint::Completions,
                &RequestDefaults::default(),
                &V,
            )
        };
        let on = read(r#"{"n_probs": 3, "post_sampling_probs": true}"#).unwrap();
        assert!(on.logprobs && on.params.post_sampling_probs && on.params.top_logprobs == 3);
        let off = read(r#"{"post_sampling_probs": true}"#).unwrap();
        assert!(!off.logprobs && !off.params.post_sampling_probs);
        let e = read(r#"{"n_probs": 3, "post_sampling_probs": 1}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("post_sampling_probs"));
        let by_text = read(r#"{"logit_bias": [["AB", false]]}"#).unwrap();
        let by_id = read(r#"{"logit_bias": {"65": false, "66": false}}"#).unwrap();
        assert_eq!(
            by_text.params.sampling.logit_bias,
            by_id.params.sampling.logit_bias
        );
        assert_eq!(
            by_id.params.sampling.logit_bias,
            vec![(65, f32::NEG_INFINITY), (66, f32::NEG_INFINITY)]
        );
    }

    #[test]
    fn messages_are_read() {
        let m = messages(&body(
            r#"{"messages": [{"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}]}"#,
        ))
        .unwrap();
        assert_eq!(
            m,
            vec![Message::system("be brief"), Message::user("hi there")]
        );
        for json in [
            r#"{"messages": []}"#,
            r#"{"messages": [{"role": "robot", "content": "x"}]}"#,
            r#"{"messages": [{"role": "assistant", "tool_calls": [{"id": "1"}]}]}"#,
            r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
            r#"{"messages": "hi"}"#,
        ] {
            assert!(messages(&body(json)).is_err(), "{json}");
        }
    }
}
