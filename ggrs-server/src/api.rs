//! The router: routes, API keys, body limits, request counting and CORS.

use std::sync::Arc;

use axum::body::Body as HttpBody;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::error::ApiError;
use crate::handler::St;
use crate::state::AppState;
use crate::{anthropic, completions, embeddings, info, native, responses};

/// Paths open without an API key (as llama-server's: health, the model list, the page).
const PUBLIC: &[&str] = &["/", "/health", "/v1/health", "/models", "/v1/models"];

/// All routes, with their layers.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    let limit = state.max_body_bytes;
    let cors = state.origins.layer();
    let router = Router::new()
        .route("/", get(info::index))
        .route("/health", get(info::health))
        .route("/v1/health", get(info::health))
        .route("/v1/models", get(info::models))
        .route("/models", get(info::models))
        .route("/props", get(info::props))
        .route("/slots", get(info::slots))
        .route("/metrics", get(info::metrics))
        .route("/tokenize", post(info::tokenize))
        .route("/detokenize", post(info::detokenize))
        .route("/apply-template", post(completions::apply_template))
        .route("/v1/chat/completions", post(completions::chat))
        .route("/chat/completions", post(completions::chat))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/responses", post(responses::responses))
        .route("/responses", post(responses::responses))
        // As llama-server: `/completion` and `/completions` are its own format,
        // `/v1/completions` OpenAI's.
        .route("/completion", post(native::completion))
        .route("/completions", post(native::completion))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings::v1_embeddings))
        .route("/embeddings", post(embeddings::embeddings))
        .route("/embedding", post(embeddings::embeddings))
        .route("/v1/rerank", post(embeddings::rerank))
        .route("/rerank", post(embeddings::rerank))
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(middleware::from_fn_with_state(state.clone(), count));
    match cors {
        Some(cors) => router.layer(cors).with_state(state),
        None => router.with_state(state),
    }
}

/// Counts every answer by status (for `/metrics`).
async fn count(State(st): St, req: Request, next: Next) -> Response {
    let r = next.run(req).await;
    st.count(r.status().as_u16());
    r
}

/// The API key check, a body announced larger than the limit refused before it is read,
/// and the body read whole within `--body-timeout` (a client trickling its body cannot hold
/// a connection longer than that).
///
/// A refused request's body is read (up to the limit, within the timeout) before the
/// answer, so the client's keep-alive connection stays usable; a body too large or too
/// slow to read gets `Connection: close` instead, so no client reuses a connection the
/// server is about to drop.
async fn guard(State(st): St, req: Request<HttpBody>, next: Next) -> Response {
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = announced.is_some_and(|n| n > st.max_body_bytes as u64);
    if let Err(e) = st.origins.check(req.headers()) {
        return closing(e.into_response());
    }
    if !st.api_keys.is_empty() && !PUBLIC.contains(&req.uri().path()) {
        let h = req.headers();
        let bearer = h
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        let x_key = h.get("x-api-key").and_then(|v| v.to_str().ok());
        if !bearer
            .or(x_key)
            .is_some_and(|k| st.api_keys.iter().any(|a| a == k))
        {
            let refused = ApiError::unauthorized().into_response();
            if too_large || read_body(&st, req).await.is_err() {
                return closing(refused);
            }
            return refused;
        }
    }
    if too_large {
        return closing(ApiError::too_large(st.max_body_bytes).into_response());
    }
    match read_body(&st, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => closing(e.into_response()),
    }
}

/// `req` with its body read whole (up to the body limit, within `--body-timeout`), or why
/// it could not be: 408 too slow, 413 too large, 400 unreadable (the client went away).
async fn read_body(st: &AppState, req: Request<HttpBody>) -> Result<Request<HttpBody>, ApiError> {
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(
        st.body_read_timeout,
        axum::body::to_bytes(body, st.max_body_bytes),
    )
    .await;
    match read {
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, HttpBody::from(bytes))),
        Err(_) => Err(ApiError::body_timeout(st.body_read_timeout.as_secs_f64())),
        Ok(Err(e)) => {
            let e = e.into_inner();
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(ApiError::too_large(st.max_body_bytes))
            } else {
                Err(ApiError::bad_request(format!(
                    "the request body could not be read: {e}"
                )))
            }
        }
    }
}

/// The key of an `Authorization: Bearer KEY` value (the scheme's name is
/// case-insensitive, RFC 9110 §11.1).
pub(crate) fn bearer_token(v: &str) -> Option<&str> {
    let (scheme, key) = v.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(key.trim())
}

/// `r` with `Connection: close` (its request's body was left unread).
fn closing(mut r: Response) -> Response {
    r.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    r
}
