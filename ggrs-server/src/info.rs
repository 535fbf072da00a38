//! The endpoints around generation: the page, health, models, properties, slots, metrics,
//! tokenize and detokenize.

use std::fmt::Write;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use ggrs_llama::ChatTemplate;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::handler::{body_bytes, ready, ready_model, St};
use crate::json_values::wrong_type;
use crate::limits::{check_text, off_thread, rendered_limit};
use crate::params::Body;

/// The chat page, compiled in.
const CHAT_PAGE: &str = include_str!("../assets/chat.html");

/// `GET /`: the chat page (404 with `--no-webui`).
pub(crate) async fn index(State(st): St) -> Response {
    if st.webui {
        Html(CHAT_PAGE).into_response()
    } else {
        ApiError::not_found("the web page is turned off (--no-webui)").into_response()
    }
}

/// `GET /health`: 200 `{"status": "ok"}` when the model is ready, 503 while it loads.
pub(crate) async fn health(State(st): St) -> Response {
    if st.embed.get().is_some() {
        return Json(json!({"status": "ok"})).into_response();
    }
    match ready(&st) {
        Ok(_) => Json(json!({"status": "ok"})).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/models`: the one model, by its first alias or file name, with every alias and
/// tag (`aliases`, `tags`, as llama-server lists them).
pub(crate) async fn models(State(st): St) -> Response {
    let mut meta = json!({});
    // The engine's model, or an embedding-only server's.
    let model = match st.loaded() {
        Ok(Some(l)) => Some(l.model.clone()),
        _ => st.embed.get().map(|s| s.model.clone()),
    };
    if let Some(m) = model {
        let h = &m.hparams;
        meta = json!({
            "n_vocab": h.n_vocab,
            "n_ctx_train": h.n_ctx_train,
            "n_embd": h.n_embd,
            "size": m.weight_bytes(),
        });
    }
    Json(json!({
        "object": "list",
        "data": [{
            "id": st.model_id,
            "aliases": st.aliases,
            "tags": st.tags,
            "object": "model",
            "created": st.created,
            "owned_by": "ggrs",
            "meta": meta,
        }],
    }))
    .into_response()
}

/// How the chat format is shown in `/props`.
fn template_text(t: &ChatTemplate) -> String {
    match t {
        ChatTemplate::Jinja { source, .. } => source.clone(),
        ChatTemplate::Named(f) => format!("{f:?}").to_lowercase(),
        ChatTemplate::ChatGlm3 => "chatglm3".into(),
        ChatTemplate::Glm4 => "chatglm4".into(),
        ChatTemplate::ChatGlm1 => "chatglm1".into(),
    }
}

/// `GET /props`: the server's settings and the default generation parameters.
pub(crate) async fn props(State(st): St) -> Response {
    let l = match ready(&st) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    let d = &st.defaults.sampling;
    let template = l.template.as_ref().map(template_text).unwrap_or_default();
    Json(json!({
        "default_generation_settings": {
            "n_ctx": l.handle.n_ctx_slot(),
            "params": {
                "n_predict": st.defaults.n_predict.map_or(-1, |n| n as i64),
                "temperature": d.temperature,
                "top_k": d.top_k,
                "top_p": d.top_p,
                "min_p": d.min_p,
                "repeat_penalty": d.repeat_penalty,
                "repeat_last_n": d.penalty_last_n,
                "presence_penalty": d.presence_penalty,
                "frequency_penalty": d.frequency_penalty,
                // llama-server's -1 (0xFFFFFFFF there): a random seed per request.
                "seed": st.defaults.seed.map_or(-1, |s| s as i64),
                "cache_prompt": true,
                "reasoning_format": st.reasoning_format.name(),
                "reasoning_in_content": false,
            },
        },
        "total_slots": st.n_slots,
        "model_path": st.model_path,
        "model_alias": st.model_id,
        "chat_template": template,
        // ggrs's: whether prompts are rendered with thinking on (`--reasoning`, and whether
        // the template can think, as llama-server decides it).
        "enable_thinking": l.vars.enable_thinking,
        "modalities": {"vision": false, "audio": false},
        "build_info": concat!("ggrs ", env!("CARGO_PKG_VERSION")),
    }))
    .into_response()
}

/// `GET /slots`: each slot's state.
pub(crate) async fn slots(State(st): St) -> Response {
    if !st.slots_endpoint {
        return ApiError::not_supported(
            StatusCode::NOT_IMPLEMENTED,
            "this server's slots endpoint is off (--no-slots)",
        )
        .into_response();
    }
    let l = match ready(&st) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    let v: Vec<Value> = l
        .handle
        .slots()
        .into_iter()
        .map(|s| {
            json!({
                "id": s.id,
                "n_ctx": s.n_ctx,
                "is_processing": s.busy,
                "n_cached": s.n_cached,
                "n_decoded": s.n_generated,
                "id_task": s.request,
            })
        })
        .collect();
    Json(v).into_response()
}

/// `GET /metrics` (with `--metrics`): Prometheus text.
pub(crate) async fn metrics(State(st): St) -> Response {
    if !st.metrics {
        return ApiError::not_supported(
            StatusCode::NOT_IMPLEMENTED,
            "this server has no metrics endpoint: start it with --metrics",
        )
        .into_response();
    }
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, lines: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP ggrs_{name} {help}\n# TYPE ggrs_{name} {kind}");
        for (labels, v) in lines {
            let _ = writeln!(out, "ggrs_{name}{labels} {v}");
        }
    };
    let by_status: Vec<(String, f64)> = st
        .counters
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .by_status
        .iter()
        .map(|(s, n)| (format!("{{status=\"{s}\"}}"), *n as f64))
        .collect();
    metric(
        "http_requests_total",
        "counter",
        "HTTP requests answered, by status.",
        by_status,
    );
    let plain = |v: f64| vec![(String::new(), v)];
    metric(
        "ready",
        "gauge",
        "1 when the model is loaded.",
        plain(matches!(st.loaded(), Ok(Some(_))) as u8 as f64),
    );
    if let Ok(Some(l)) = st.loaded() {
        let m = l.handle.metrics();
        let tps = if m.busy_secs > 0.0 {
            m.generated_tokens as f64 / m.busy_secs
        } else {
            0.0
        };
        let rows: [(&str, &str, &str, f64); 17] = [
            (
                "draft_tokens_total",
                "counter",
                "Tokens drafted and verified by speculative decoding.",
                m.draft_tokens as f64,
            ),
            (
                "draft_accepted_total",
                "counter",
                "Drafted tokens accepted (equal to what the model sampled).",
                m.draft_accepted as f64,
            ),
            (
                "prompt_tokens_total",
                "counter",
                "Prompt tokens evaluated (cached ones not counted).",
                m.prompt_tokens as f64,
            ),
            (
                "cached_prompt_tokens_total",
                "counter",
                "Prompt tokens served from slot caches.",
                m.cached_tokens as f64,
            ),
            (
                "cache_hits_total",
                "counter",
                "Requests that reused a slot's cached prefix.",
                m.cache_hits as f64,
            ),
            (
                "checkpoint_lookups_total",
                "counter",
                "Requests to a recurrent model whose slot state stood past the shared prefix.",
                m.checkpoint_lookups as f64,
            ),
            (
                "checkpoint_hits_total",
                "counter",
                "Of those, requests that resumed from a recurrent-state checkpoint.",
                m.checkpoint_hits as f64,
            ),
            (
                "generated_tokens_total",
                "counter",
                "Tokens generated.",
                m.generated_tokens as f64,
            ),
            (
                "generated_tokens_per_second",
                "gauge",
                "Tokens generated per second of evaluation since the start.",
                tps,
            ),
            (
                "requests_done_total",
                "counter",
                "Engine requests finished normally.",
                m.requests_done as f64,
            ),
            (
                "requests_cancelled_total",
                "counter",
                "Engine requests cancelled (client gone).",
                m.requests_cancelled as f64,
            ),
            (
                "requests_failed_total",
                "counter",
                "Engine requests that failed.",
                m.requests_failed as f64,
            ),
            (
                "queue_length",
                "gauge",
                "Requests waiting for a slot.",
                m.queued as f64,
            ),
            (
                "busy_slots",
                "gauge",
                "Slots serving a request.",
                m.busy_slots as f64,
            ),
            ("slots", "gauge", "Slots.", m.n_slots as f64),
            (
                "kv_cells_used",
                "gauge",
                "KV cache cells holding tokens.",
                m.kv_used as f64,
            ),
            (
                "steps_total",
                "counter",
                "Engine steps evaluated.",
                m.steps as f64,
            ),
        ];
        for (name, kind, help, v) in rows {
            metric(name, kind, help, plain(v));
        }
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// A JSON answer already serialized (200).
fn json_bytes(v: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v).into_response()
}

/// One token of `/tokenize` with `with_pieces`: its piece as text, or as bytes when they
/// are not UTF-8 on their own.
#[derive(serde::Serialize)]
struct TokenPiece {
    id: u32,
    piece: Piece,
}

#[derive(serde::Serialize)]
#[serde(untagged)]
enum Piece {
    Text(String),
    Bytes(Vec<u8>),
}

/// `POST /tokenize`: `content`, `add_special` (default false), `parse_special` (default
/// true), `with_pieces` → `{"tokens": [...]}`. The content is at most the server's text
/// limit; the work runs on the preparation pool and the answer is written straight to
/// bytes (no JSON tree per token).
pub(crate) async fn tokenize(State(st): St, bytes: Result<Bytes, BytesRejection>) -> Response {
    let run = async {
        let bytes = body_bytes(&st, bytes)?;
        let model = ready_model(&st)?;
        let st2 = st.clone();
        off_thread(&st.prep, move |cancel| {
            let body = Body::parse(&bytes)?;
            let (content, add_special, parse_special, with_pieces) =
                tokenize_options(&body, st2.max_text_bytes)?;
            let tok = model.tokenizer();
            let ids = tok
                .encode(content, add_special, parse_special)
                .map_err(|e| ApiError::invalid("content", e.to_string()))?;
            drop(body);
            cancel.check()?;
            let out = if with_pieces {
                let pieces: Vec<TokenPiece> = ids
                    .iter()
                    .map(|&id| {
                        // `id` was just produced by the tokenizer: it is in the vocabulary.
                        let b = tok.token_to_piece(id).unwrap_or_default();
                        let piece = match String::from_utf8(b) {
                            Ok(s) => Piece::Text(s),
                            Err(e) => Piece::Bytes(e.into_bytes()),
                        };
                        TokenPiece { id, piece }
                    })
                    .collect();
                serde_json::to_vec(&json!({ "tokens": pieces }))
            } else {
                serde_json::to_vec(&json!({ "tokens": ids }))
            };
            out.map_err(|e| ApiError::server(e.to_string()))
        })
        .await
    };
    match run.await {
        Ok(v) => json_bytes(v),
        Err(e) => e.into_response(),
    }
}

/// `POST /detokenize`: `tokens` → `{"content": text}` (control tokens written out), on the
/// preparation pool.
pub(crate) async fn detokenize(State(st): St, bytes: Result<Bytes, BytesRejection>) -> Response {
    let run = async {
        let bytes = body_bytes(&st, bytes)?;
        let model = ready_model(&st)?;
        let max = st.max_text_bytes;
        off_thread(&st.prep, move |cancel| {
            let ids = token_ids(&Body::parse(&bytes)?)?;
            let tok = model.tokenizer();
            check_detokenize(&ids, max, |id| tok.token_to_piece(id).map(|p| p.len()))?;
            cancel.check()?;
            let text = tok
                .decode_with_special(&ids)
                .map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
            serde_json::to_vec(&json!({ "content": text }))
                .map_err(|e| ApiError::server(e.to_string()))
        })
        .await
    };
    match run.await {
        Ok(v) => json_bytes(v),
        Err(e) => e.into_response(),
    }
}

/// `/detokenize`'s bounds, checked before any text is built: at most `max_text_bytes` ids
/// (what `/tokenize` can give for the text it takes), and their pieces (`piece_len(id)`,
/// an error for an id outside the vocabulary) at most `max_text_bytes` + 64 KiB of text. A
/// 400 naming `tokens` otherwise.
pub(crate) fn check_detokenize<E: std::fmt::Display>(
    ids: &[u32],
    max_text_bytes: usize,
    piece_len: impl Fn(u32) -> Result<usize, E>,
) -> Result<(), ApiError> {
    if ids.len() > max_text_bytes {
        return Err(ApiError::invalid(
            "tokens",
            format!(
                "'tokens' has {} ids; this server detokenizes at most {max_text_bytes} per \
                 request (--max-text-bytes)",
                ids.len()
            ),
        ));
    }
    let limit = rendered_limit(max_text_bytes);
    let mut bytes = 0usize;
    for &id in ids {
        bytes += piece_len(id).map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
        if bytes > limit {
            return Err(ApiError::invalid(
                "tokens",
                format!(
                    "the text of 'tokens' is more than {limit} bytes, the most this server \
                     writes per request (--max-text-bytes)"
                ),
            ));
        }
    }
    Ok(())
}

/// `/detokenize`'s `tokens`: a list of token ids (absent: none).
pub(crate) fn token_ids(body: &Body) -> Result<Vec<u32>, ApiError> {
    match body.get("tokens") {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| {
                t.as_u64()
                    .filter(|&t| t <= u32::MAX as u64)
                    .map(|t| t as u32)
                    .ok_or_else(|| wrong_type("tokens", "a list of token ids", t))
            })
            .collect(),
        Some(v) => Err(wrong_type("tokens", "a list of token ids", v)),
    }
}

/// `/tokenize`'s options: `content` (within `max_text_bytes`), `add_special`,
/// `parse_special`, `with_pieces`.
pub(crate) fn tokenize_options(
    body: &Body,
    max_text_bytes: usize,
) -> Result<(&str, bool, bool, bool), ApiError> {
    let content = body.str("content")?.unwrap_or_default();
    let add_special = body.bool("add_special")?.unwrap_or(false);
    let parse_special = body.bool("parse_special")?.unwrap_or(true);
    let with_pieces = body.bool("with_pieces")?.unwrap_or(false);
    check_text(max_text_bytes, "content", content.len())?;
    Ok((content, add_special, parse_special, with_pieces))
}
