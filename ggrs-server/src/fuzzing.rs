//! The request parsing and validation of every endpoint, without a model or a network, for
//! the fuzz target `fuzz/fuzz_targets/server_request.rs`. Not a stable API.

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::completions::{chat_request, prompts, read_chat, render_chat, PromptLimits};
use crate::info::{check_detokenize, token_ids, tokenize_options};
use crate::limits::Cancel;
use crate::logit_bias::ByteVocab;
use crate::origins::OriginPolicy;
use crate::params::{gen_options, Body, Endpoint, RequestDefaults};

/// A refusal: HTTP status and the field it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 4xx.
    pub status: u16,
    /// The field named (`param`), if any.
    pub param: Option<String>,
    /// The error object as sent.
    pub body: String,
}

/// Checks a request to `path` with `headers` and `body` as the server does before it
/// touches a model (a vocabulary of `n_vocab` tokens, a queue of `queue` requests, a text
/// limit of `max_text_bytes`); strings of a prompt count as one token per byte, and so do
/// the texts of embedding inputs and of `logit_bias` keys; a `/detokenize` piece is 1–16 bytes. With a `template`, a chat
/// request (`/v1/chat/completions`, `/apply-template`, `/v1/messages`,
/// `/v1/messages/count_tokens`, `/v1/responses`) is read as the server reads it (tools, `tool_choice`, `grammar`,
/// `json_schema`, `response_format`, template options) and rendered within the server's
/// limit; the grammar is not compiled (that needs a vocabulary). Panics if an accepted
/// request breaks the invariants the engine relies on.
pub fn check_request(
    path: &str,
    headers: &[(&[u8], &[u8])],
    body: &[u8],
    n_vocab: usize,
    queue: usize,
    max_text_bytes: usize,
    template: Option<&ggrs_llama::ChatTemplate>,
) -> Result<(), Refusal> {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(k), HeaderValue::from_bytes(v)) {
            map.append(k, v);
        }
    }
    let vocab = ByteVocab(n_vocab);
    let refuse = |e: crate::error::ApiError| {
        assert!(
            (400..500).contains(&e.status.as_u16()),
            "a refusal of a request is a 4xx: {e:?}"
        );
        Refusal {
            status: e.status.as_u16(),
            param: e.param.clone(),
            body: e.body().to_string(),
        }
    };
    for (origins, host) in [
        (&[][..], "127.0.0.1"),
        (&["https://a.example".into()][..], "0.0.0.0"),
    ] {
        OriginPolicy::new(origins, host)
            .check(&map)
            .map_err(refuse)?;
    }
    if let Some(v) = map.get(axum::http::header::AUTHORIZATION) {
        if let Ok(v) = v.to_str() {
            if let Some(k) = crate::api::bearer_token(v) {
                assert!(v.contains(k), "the key is part of the header");
            }
        }
    }
    let chat_body = match path {
        "/v1/messages" | "/v1/messages/count_tokens" => {
            Some(crate::anthropic::to_chat_body(body).map_err(refuse)?)
        }
        "/v1/responses" => Some(crate::responses::to_chat_body(body).map_err(refuse)?.0),
        "/v1/chat/completions" | "/apply-template" if template.is_some() => {
            let mut b = Body::parse(body).map_err(refuse)?;
            if path == "/apply-template" {
                b.take("stream"); // as the endpoint reads it: nothing is generated
            }
            Some(b)
        }
        _ => None,
    };
    if let Some(b) = chat_body {
        let Some(t) = template else { return Ok(()) };
        let parts = read_chat(
            b,
            t,
            Default::default(),
            Default::default(),
            &RequestDefaults::default(),
            &vocab,
            queue,
            max_text_bytes,
        )
        .map_err(refuse)?;
        check_options(&parts.opts, queue, n_vocab);
        assert!(!parts.msgs.is_empty(), "a chat has messages");
        let text = render_chat(&parts, t, max_text_bytes).map_err(refuse)?;
        assert!(text.len() <= crate::limits::rendered_limit(max_text_bytes));
        return Ok(());
    }
    let body = Body::parse(body).map_err(refuse)?;
    match path {
        "/v1/chat/completions" => {
            let (opts, msgs) = chat_request(
                &body,
                &RequestDefaults::default(),
                &vocab,
                queue,
                max_text_bytes,
            )
            .map_err(refuse)?;
            check_options(&opts, queue, n_vocab);
            assert!(!msgs.is_empty(), "a chat has messages");
        }
        "/v1/completions" => {
            let opts = gen_options(
                &body,
                Endpoint::Completions,
                &RequestDefaults::default(),
                &vocab,
            )
            .map_err(refuse)?;
            let encode = |s: &str, _: bool| Ok(s.bytes().map(u32::from).collect());
            let limits = PromptLimits {
                max_text_bytes,
                queue,
                n: opts.n,
                n_vocab,
            };
            let list = prompts(&body, limits, &Cancel::default(), encode).map_err(refuse)?;
            check_options(&opts, queue, n_vocab);
            assert!(!list.is_empty() && list.iter().all(|p| !p.is_empty()));
            assert!(list.len() * opts.n <= queue, "the choices fit the queue");
            assert!(
                list.iter().flatten().all(|&t| (t as usize) < n_vocab),
                "prompt ids are in the vocabulary"
            );
        }
        "/tokenize" => {
            let (content, ..) = tokenize_options(&body, max_text_bytes).map_err(refuse)?;
            assert!(content.len() <= max_text_bytes);
        }
        "/detokenize" => {
            let ids = token_ids(&body).map_err(refuse)?;
            let piece = |id: u32| -> Result<usize, String> {
                if (id as usize) < n_vocab {
                    Ok(1 + id as usize % 16)
                } else {
                    Err(format!("token id {id} is out of range"))
                }
            };
            check_detokenize(&ids, max_text_bytes, piece).map_err(refuse)?;
            assert!(ids.len() <= max_text_bytes);
        }
        "/v1/embeddings" | "/embedding" => {
            let (field, alt) = if path == "/embedding" {
                ("content", "input")
            } else {
                crate::embeddings::v1_options(&body, 32).map_err(refuse)?;
                ("input", "input")
            };
            let Some(v) = body.get(field).or_else(|| body.get(alt)) else {
                return Ok(());
            };
            let encode = |_: usize, s: &str, _: bool| Ok(s.bytes().map(u32::from).collect());
            let check = |i: usize, t: &[u32]| {
                if t.is_empty() || t.iter().any(|&id| id as usize >= n_vocab) {
                    Err(crate::error::ApiError::invalid(field, format!("input {i}")))
                } else {
                    Ok(())
                }
            };
            let list = crate::embeddings::inputs(
                field,
                v,
                max_text_bytes,
                &Cancel::default(),
                encode,
                check,
            )
            .map_err(refuse)?;
            assert!(!list.is_empty() && list.len() <= crate::embeddings::MAX_INPUTS);
            let texts = match v {
                serde_json::Value::String(t) => t.len(),
                serde_json::Value::Array(a) => {
                    a.iter().filter_map(|x| x.as_str()).map(str::len).sum()
                }
                _ => 0,
            };
            assert!(texts <= max_text_bytes, "{texts} bytes of text");
            let tokens: usize = list.iter().map(Vec::len).sum();
            crate::embeddings::check_output(field, tokens, 32).map_err(refuse)?;
        }
        "/rerank" => {
            let (query, docs, _) =
                crate::embeddings::rerank_request(&body, max_text_bytes).map_err(refuse)?;
            assert!(!docs.is_empty() && docs.len() <= crate::embeddings::MAX_INPUTS);
            let bytes = query.len() + docs.iter().map(String::len).sum::<usize>();
            assert!(bytes <= max_text_bytes);
        }
        _ => {}
    }
    Ok(())
}

/// What the engine relies on in accepted options.
fn check_options(o: &crate::params::GenOptions, queue: usize, n_vocab: usize) {
    assert!(o.n >= 1 && o.n <= queue, "n = {}", o.n);
    assert!(
        o.params
            .sampling
            .logit_bias
            .iter()
            .all(|&(t, _)| (t as usize) < n_vocab),
        "logit_bias ids are in the vocabulary"
    );
    assert!(o.params.max_tokens >= 1);
    assert!(o.params.top_logprobs <= 20);
    assert!(
        o.params.sampling.validate().is_ok(),
        "{:?}",
        o.params.sampling
    );
    assert!(o.params.stop.iter().all(|s| !s.is_empty()));
}
