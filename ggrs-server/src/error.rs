//! Errors as the OpenAI API writes them: `{"error": {"message", "type", "param", "code"}}`
//! with the HTTP status as `code` (as llama-server does).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ggrs_llama::engine::SubmitError;
use serde_json::json;

/// An error answer.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    pub param: Option<String>,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
            retry_after: None,
        }
    }

    /// 400 about the field `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.into()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }

    /// 400 not about one field.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400: a field this server does not implement.
    pub fn unsupported(param: &str, why: &str) -> ApiError {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                "not_supported_error",
                format!("'{param}' is not supported by this server: {why}"),
            )
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid or missing API key: send 'Authorization: Bearer <key>'",
        )
    }

    /// 403: a request from a page or host this server does not serve.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "permission_error", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found_error", message)
    }

    pub fn not_supported(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError::new(status, "not_supported_error", message)
    }

    /// 503: the model is still loading.
    pub fn loading() -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable_error",
                "Loading model",
            )
        }
    }

    /// 503 with `Retry-After: 1`: a queue is full, try again shortly.
    pub fn busy(message: impl Into<String>) -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable_error",
                message,
            )
        }
    }

    pub fn server(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    pub fn timeout(secs: f64) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout_error",
            format!("the request did not finish within the server's timeout of {secs} s"),
        )
    }

    /// 408: the client took longer than `--body-timeout` to send the request's body.
    pub fn body_timeout(secs: f64) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout_error",
            format!(
                "the request body did not arrive within the server's limit of {secs} s \
                 (--body-timeout)"
            ),
        )
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is larger than the server's limit of {limit} bytes"),
        )
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.status.as_u16(),
        }})
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> ApiError {
        match &e {
            SubmitError::QueueFull { .. } => ApiError::busy(e.to_string()),
            SubmitError::PromptTooLong { .. } => ApiError::new(
                StatusCode::BAD_REQUEST,
                "exceed_context_size_error",
                e.to_string(),
            ),
            SubmitError::Invalid(_) => ApiError::bad_request(e.to_string()),
            SubmitError::Stopped => ApiError::server(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
