//! The router: routes, API keys, body limits, request counting and CORS.

use std::sync::Arc;

use axum::body::{Body as HttpBody, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::error::ApiError;
use crate::params::Body;
use crate::state::{AppState, Loaded};
use crate::{completions, embeddings, info};

/// Shared state as handlers receive it.
pub(crate) type St = State<Arc<AppState>>;

/// Paths open without an API key (as llama-server's: health, the model list, the page).
const PUBLIC: &[&str] = &["/", "/health", "/v1/health", "/models", "/v1/models"];

/// All routes, with their layers.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    let limit = state.max_body_bytes;
    Router::new()
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
        .route("/v1/chat/completions", post(completions::chat))
        .route("/chat/completions", post(completions::chat))
        .route("/v1/completions", post(completions::completions))
        .route("/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings::v1_embeddings))
        .route("/embeddings", post(embeddings::embeddings))
        .route("/embedding", post(embeddings::embeddings))
        .route("/v1/rerank", post(embeddings::rerank))
        .route("/rerank", post(embeddings::rerank))
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .layer(tower_http::cors::CorsLayer::permissive())
        .with_state(state)
}

/// Counts every answer by status (for `/metrics`).
async fn count(State(st): St, req: Request, next: Next) -> Response {
    let r = next.run(req).await;
    st.count(r.status().as_u16());
    r
}

/// The API key check, and a body announced larger than the limit refused before it is read.
///
/// A refused request's body is read (up to the limit) before the answer, so the client's
/// keep-alive connection stays usable; a body too large to read gets `Connection: close`
/// instead, so no client reuses a connection the server is about to drop.
async fn guard(State(st): St, req: Request<HttpBody>, next: Next) -> Response {
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = announced.is_some_and(|n| n > st.max_body_bytes as u64);
    if !st.api_keys.is_empty() && !PUBLIC.contains(&req.uri().path()) {
        let h = req.headers();
        let bearer = h
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let x_key = h.get("x-api-key").and_then(|v| v.to_str().ok());
        if !bearer
            .or(x_key)
            .is_some_and(|k| st.api_keys.iter().any(|a| a == k))
        {
            let refused = ApiError::unauthorized().into_response();
            if too_large {
                return closing(refused);
            }
            if axum::body::to_bytes(req.into_body(), st.max_body_bytes)
                .await
                .is_err()
            {
                return closing(refused);
            }
            return refused;
        }
    }
    if too_large {
        return closing(ApiError::too_large(st.max_body_bytes).into_response());
    }
    next.run(req).await
}

/// `r` with `Connection: close` (its request's body was left unread).
fn closing(mut r: Response) -> Response {
    r.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    r
}

/// The body as JSON, or the error for a body too large or not a JSON object.
pub(crate) fn json_body(
    st: &AppState,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Body, ApiError> {
    let bytes = bytes.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(st.max_body_bytes)
        } else {
            ApiError::bad_request(r.body_text())
        }
    })?;
    Body::parse(&bytes)
}

/// The engine, or 503 while the model loads (500 if it failed).
pub(crate) fn ready(st: &AppState) -> Result<Arc<Loaded>, ApiError> {
    match st.loaded() {
        Ok(Some(l)) => Ok(l),
        Ok(None) => Err(ApiError::loading()),
        Err(e) => Err(ApiError::server(e.to_string())),
    }
}
