//! The request parsing and validation of every endpoint, without a model or a network, for
//! the fuzz target `fuzz/fuzz_targets/server_request.rs`. Not a stable API.

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::completions::{chat_request, prompts};
use crate::info::{token_ids, tokenize_options};
use crate::origins::OriginPolicy;
use crate::params::{gen_options, Body, Endpoint};

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
/// limit of `max_text_bytes`); strings of a prompt count as one token per byte. Panics if
/// an accepted request breaks the invariants the engine relies on.
pub fn check_request(
    path: &str,
    headers: &[(&[u8], &[u8])],
    body: &[u8],
    n_vocab: usize,
    queue: usize,
    max_text_bytes: usize,
) -> Result<(), Refusal> {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(k), HeaderValue::from_bytes(v)) {
            map.append(k, v);
        }
    }
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
    let body = Body::parse(body).map_err(refuse)?;
    match path {
        "/v1/chat/completions" => {
            let (opts, msgs) =
                chat_request(&body, None, n_vocab, queue, max_text_bytes).map_err(refuse)?;
            check_options(&opts, queue);
            assert!(!msgs.is_empty(), "a chat has messages");
        }
        "/v1/completions" => {
            let opts = gen_options(&body, Endpoint::Completions, None, n_vocab).map_err(refuse)?;
            let encode = |s: &str| Ok(s.bytes().map(u32::from).collect());
            let list = prompts(&body, max_text_bytes, queue, opts.n, encode).map_err(refuse)?;
            check_options(&opts, queue);
            assert!(!list.is_empty() && list.iter().all(|p| !p.is_empty()));
            assert!(list.len() * opts.n <= queue, "the choices fit the queue");
        }
        "/tokenize" => {
            let (content, ..) = tokenize_options(&body, max_text_bytes).map_err(refuse)?;
            assert!(content.len() <= max_text_bytes);
        }
        "/detokenize" => {
            token_ids(&body).map_err(refuse)?;
        }
        _ => {}
    }
    Ok(())
}

/// What the engine relies on in accepted options.
fn check_options(o: &crate::params::GenOptions, queue: usize) {
    assert!(o.n >= 1 && o.n <= queue, "n = {}", o.n);
    assert!(o.params.max_tokens >= 1);
    assert!(o.params.top_logprobs <= 20);
    assert!(
        o.params.sampling.validate().is_ok(),
        "{:?}",
        o.params.sampling
    );
    assert!(o.params.stop.iter().all(|s| !s.is_empty()));
}
