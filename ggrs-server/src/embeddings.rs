//! Embeddings and reranking (`ggrs serve --embeddings` / `--reranking`): OpenAI's
//! `POST /v1/embeddings`, llama-server's `/embedding` and `/embeddings`, and `POST /rerank`
//! / `/v1/rerank`.
//!
//! One worker thread owns a [`ggrs_llama::embed::Embedder`]; requests queue on a channel and
//! the worker takes every request waiting when it is free and evaluates their inputs
//! together (packed into steps of up to `n_batch` tokens), so concurrent requests share
//! steps. Each input's result does not depend on what it was batched with (see
//! [`ggrs_llama::embed`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use ggrs_llama::embed::{normalize, Pooling};
use serde_json::{json, Value};

use crate::embed_inputs::check_count;
pub(crate) use crate::embed_inputs::{inputs, MAX_INPUTS};
use crate::embed_service::EmbedService;
use crate::error::ApiError;
use crate::handler::{body_bytes, St};
use crate::limits::{check_text, off_thread};
use crate::params::Body;
use crate::state::AppState;

/// The service, or the reason there is none (503 while loading, 501 when not enabled).
fn service(st: &AppState, reranking: bool) -> Result<Arc<EmbedService>, ApiError> {
    match st.embed.get() {
        Some(s) if reranking && !s.reranking => Err(ApiError::not_supported(
            axum::http::StatusCode::NOT_IMPLEMENTED,
            "this server does not rerank: start it with --reranking (and a reranker model)",
        )),
        Some(s) if !reranking && s.reranking => Err(ApiError::not_supported(
            axum::http::StatusCode::NOT_IMPLEMENTED,
            "this server reranks (--reranking): use /v1/rerank",
        )),
        Some(s) => Ok(s.clone()),
        // While the model loads (an embedding-only model gets its worker without the flag).
        None => match st.loaded() {
            Ok(None) => Err(ApiError::loading()),
            Err(e) if st.embed_enabled => Err(ApiError::server(e.to_string())),
            _ => Err(ApiError::not_supported(
                axum::http::StatusCode::NOT_IMPLEMENTED,
                "this server does not compute embeddings: start it with --embeddings",
            )),
        },
    }
}

/// The service and the request's body, parsed on the preparation pool.
async fn service_and_body(
    st: &Arc<AppState>,
    bytes: Result<Bytes, BytesRejection>,
    reranking: bool,
) -> Result<(Arc<EmbedService>, Arc<Body>), ApiError> {
    let s = service(st, reranking)?;
    let bytes = body_bytes(st, bytes)?;
    let body = Arc::new(off_thread(&st.prep, move |_| Body::parse(&bytes)).await?);
    Ok((s, body))
}

/// The request's inputs from `field` (or `alt`), parsed and tokenized on the preparation
/// pool.
async fn request_inputs(
    st: &Arc<AppState>,
    s: &Arc<EmbedService>,
    body: &Arc<Body>,
    [field, alt]: [&'static str; 2],
) -> Result<Vec<Vec<u32>>, ApiError> {
    let (s, body, max) = (s.clone(), body.clone(), st.max_text_bytes);
    off_thread(&st.prep, move |cancel| {
        let input = body
            .get(field)
            .or_else(|| body.get(alt))
            .ok_or_else(|| ApiError::invalid(field, format!("'{field}' is required")))?;
        inputs(
            field,
            input,
            max,
            cancel,
            |_, t, add_special| s.tokenize(t, add_special),
            |i, t| s.check(i, t),
        )
    })
    .await
}

/// The normalisation a request asks for (`embd_normalize`, llama-server's; default 2).
fn norm_kind(body: &Body) -> Result<i32, ApiError> {
    match body.get("embd_normalize") {
        None | Some(Value::Null) => Ok(2),
        Some(v) => v
            .as_i64()
            .and_then(|x| i32::try_from(x).ok())
            .ok_or_else(|| ApiError::invalid("embd_normalize", "must be an integer")),
    }
}

/// `/v1/embeddings`' options: `dimensions` (only the model's own), `encoding_format`
/// (`float` or `base64`: true) and `embd_normalize`.
pub(crate) fn v1_options(body: &Body, n_embd: usize) -> Result<(bool, i32), ApiError> {
    match body.get("dimensions") {
        None | Some(Value::Null) => {}
        Some(d) if d.as_u64() == Some(n_embd as u64) => {}
        Some(_) => {
            return Err(ApiError::unsupported(
                "dimensions",
                &format!(
                    "this model's embeddings have {n_embd} dimensions and cannot be shortened"
                ),
            ))
        }
    }
    let base64 = match body.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("'{other}' is not 'float' or 'base64'"),
            ))
        }
    };
    Ok((base64, norm_kind(body)?))
}

/// Most numbers one answer of `/embedding` may carry (pooling `none` gives `n_embd` per
/// token): 4 Mi floats, some 50 MB of JSON.
pub(crate) const MAX_OUTPUT_FLOATS: usize = 1 << 22;

/// 400 naming `field` when per-token embeddings of `n_tokens` tokens (`n_embd` each) would
/// be more than [`MAX_OUTPUT_FLOATS`].
pub(crate) fn check_output(field: &str, n_tokens: usize, n_embd: usize) -> Result<(), ApiError> {
    let floats = n_tokens.saturating_mul(n_embd);
    if floats > MAX_OUTPUT_FLOATS {
        return Err(ApiError::invalid(
            field,
            format!(
                "'{field}' has {n_tokens} tokens; with pooling 'none' that is {floats} numbers \
                 ({n_embd} per token), more than the {MAX_OUTPUT_FLOATS} one answer may carry: \
                 send fewer tokens, or start the server with --pooling mean|cls|last"
            ),
        ));
    }
    Ok(())
}

/// `POST /v1/embeddings` (OpenAI).
pub(crate) async fn v1_embeddings(
    State(st): St,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (s, body) = service_and_body(&st, bytes, false).await?;
    if s.pooling == Pooling::None {
        return Err(ApiError::bad_request(
            "pooling 'none' gives one vector per token, which the OpenAI API cannot carry: \
             use /embeddings, or start the server with --pooling mean|cls|last",
        ));
    }
    let (base64, kind) = v1_options(&body, s.model.hparams.n_embd)?;
    let list = request_inputs(&st, &s, &body, ["input", "input"]).await?;
    let n_tokens: usize = list.iter().map(Vec::len).sum();
    let out = s.run(list).await?;
    let data: Vec<Value> = out
        .into_iter()
        .enumerate()
        .map(|(i, mut v)| {
            normalize(&mut v, kind);
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": body.get("model").and_then(Value::as_str).unwrap_or(&st.model_id),
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    }))
    .into_response())
}

/// llama-server's `POST /embedding` and `/embeddings`: `content` (or `input`); an array of
/// `{"index", "embedding"}` with `embedding` a list of rows (one row when pooled, one per
/// token with pooling `none`).
pub(crate) async fn embeddings(
    State(st): St,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (s, body) = service_and_body(&st, bytes, false).await?;
    let kind = norm_kind(&body)?;
    let list = request_inputs(&st, &s, &body, ["content", "input"]).await?;
    let e = s.model.hparams.n_embd;
    if s.pooling == Pooling::None {
        check_output("content", list.iter().map(Vec::len).sum(), e)?;
    }
    let out = s.run(list).await?;
    let items: Vec<Value> = out
        .into_iter()
        .enumerate()
        .map(|(i, mut v)| {
            // As llama-server: a pooled vector is normalised, token vectors (pooling
            // `none`) are not.
            let pooled = s.pooling != Pooling::None;
            let rows: Vec<Vec<f32>> = v
                .chunks_mut(e)
                .map(|r| {
                    if pooled {
                        normalize(r, kind);
                    }
                    r.to_vec()
                })
                .collect();
            json!({"index": i, "embedding": rows})
        })
        .collect();
    Ok(Json(Value::Array(items)).into_response())
}

/// A rerank request's `query`, `documents` (or `texts`; strings or `{"text"}` objects) and
/// `top_n`, within [`MAX_INPUTS`] documents and `max_text_bytes` of text.
pub(crate) fn rerank_request(
    body: &Body,
    max_text_bytes: usize,
) -> Result<(&str, Vec<String>, usize), ApiError> {
    let query = body
        .get("query")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("query", "'query' (a string) is required"))?;
    let docs: Vec<String> = match body.get("documents").or_else(|| body.get("texts")) {
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|d| {
                d.as_str()
                    .map(str::to_string)
                    .or_else(|| d.get("text").and_then(Value::as_str).map(str::to_string))
                    .ok_or_else(|| ApiError::invalid("documents", "each document is a string"))
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(ApiError::invalid(
                "documents",
                "'documents' (a non-empty list of strings) is required",
            ))
        }
    };
    let top_n = match body.get("top_n") {
        None | Some(Value::Null) => docs.len(),
        Some(v) => v
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| ApiError::invalid("top_n", "must be a non-negative integer"))?,
    };
    check_count("documents", docs.len())?;
    let text_bytes = query.len() + docs.iter().map(String::len).sum::<usize>();
    check_text(max_text_bytes, "documents", text_bytes)?;
    Ok((query, docs, top_n))
}

/// `POST /rerank` and `/v1/rerank`: `query`, `documents` (strings), `top_n`; results sorted
/// by relevance score, highest first.
pub(crate) async fn rerank(
    State(st): St,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (s, body) = service_and_body(&st, bytes, true).await?;
    let (query, docs, top_n) = rerank_request(&body, st.max_text_bytes)?;
    let (s2, query, docs) = (s.clone(), query.to_string(), Arc::new(docs));
    let docs2 = docs.clone();
    let list = off_thread(&st.prep, move |_| {
        let list = ggrs_llama::embed::rerank_inputs(&s2.model, &query, &docs2)
            .map_err(|e| ApiError::invalid("documents", e.to_string()))?;
        for (i, t) in list.iter().enumerate() {
            s2.check(i, t)?;
        }
        Ok(list)
    })
    .await?;
    let n_tokens: usize = list.iter().map(Vec::len).sum();
    let scores = s.run(list).await?;
    let mut results: Vec<(usize, f32)> = scores.iter().map(|v| v[0]).enumerate().collect();
    results.sort_by(|a, b| b.1.total_cmp(&a.1));
    results.truncate(top_n);
    let return_text = body.get("return_documents").and_then(Value::as_bool) == Some(true);
    let results: Vec<Value> = results
        .into_iter()
        .map(|(i, score)| {
            let mut r = json!({"index": i, "relevance_score": score});
            if return_text {
                r["document"] = json!({"text": docs[i]});
            }
            r
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "model": body.get("model").and_then(Value::as_str).unwrap_or(&st.model_id),
        "results": results,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    }))
    .into_response())
}
