//! What every handler shares: the state extractor, reading a body, and the loaded
//! model (or why there is none yet).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;

use crate::error::ApiError;
use crate::state::{AppState, LoadError, Loaded};

/// Shared state as handlers receive it.
pub(crate) type St = State<Arc<AppState>>;

/// The body's bytes, or the error for a body too large or unreadable.
pub(crate) fn body_bytes(
    st: &AppState,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Bytes, ApiError> {
    bytes.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(st.max_body_bytes)
        } else {
            ApiError::bad_request(r.body_text())
        }
    })
}

/// The engine, or 503 while the model loads (501 for an embedding-only model, 500 if it
/// failed).
pub(crate) fn ready(st: &AppState) -> Result<Arc<Loaded>, ApiError> {
    match st.loaded() {
        Ok(Some(l)) => Ok(l),
        Ok(None) => Err(ApiError::loading()),
        Err(e @ LoadError::EmbeddingOnly(_)) => Err(ApiError::not_supported(
            StatusCode::NOT_IMPLEMENTED,
            e.to_string(),
        )),
        Err(e) => Err(ApiError::server(e.to_string())),
    }
}

/// The model, for what needs its vocabulary only (`/tokenize`, `/detokenize`): the engine's,
/// or an embedding-only server's; else as [`ready`].
pub(crate) fn ready_model(st: &AppState) -> Result<Arc<ggrs_llama::Model>, ApiError> {
    match ready(st) {
        Ok(l) => Ok(l.model.clone()),
        Err(e) => st.embed.get().map(|s| s.model.clone()).ok_or(e),
    }
}
