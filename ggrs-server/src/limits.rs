//! Bounds on what one request may cost: text sizes, choices per request, and the heavy
//! preparation (JSON parsing, template rendering, tokenization) run on a small pool of
//! blocking threads, never on the HTTP workers, and abandoned when the client leaves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::error::ApiError;

/// Preparation jobs (parsing, rendering, tokenizing) that run at once; more wait for a
/// turn (the machine's cores are the engine's: two jobs keep the HTTP side moving without
/// taking them all).
pub(crate) const PREP_JOBS: usize = 2;

/// The pool's gate, shared by the handlers.
pub(crate) struct Prep {
    jobs: Arc<Semaphore>,
}

impl Prep {
    pub fn new() -> Prep {
        Prep {
            jobs: Arc::new(Semaphore::new(PREP_JOBS)),
        }
    }
}

/// Set when the request that started a job is gone (its future was dropped: the client
/// disconnected); a job checks it between its stages.
#[derive(Clone, Default)]
pub(crate) struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// An error (the client is gone: nobody reads it) when the request was abandoned.
    pub fn check(&self) -> Result<(), ApiError> {
        if self.0.load(Ordering::Relaxed) {
            Err(ApiError::bad_request("the client closed the connection"))
        } else {
            Ok(())
        }
    }
}

/// Sets the flag when dropped (the handler's future ended, finished or abandoned).
struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        (self.0).0.store(true, Ordering::Relaxed);
    }
}

/// Runs `job` on the blocking pool once a turn is free. Dropping the returned future (the
/// client left) cancels the wait, and tells a running job through its [`Cancel`].
pub(crate) async fn off_thread<T: Send + 'static>(
    prep: &Prep,
    job: impl FnOnce(&Cancel) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let permit = prep
        .jobs
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| ApiError::server("the server is shutting down"))?;
    let cancel = Cancel::default();
    let _on_drop = CancelOnDrop(cancel.clone());
    let handle = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        job(&cancel)
    });
    handle
        .await
        .map_err(|e| ApiError::server(format!("the request's preparation failed: {e}")))?
}

/// 400 when the text of `field` (`bytes` in all) is more than the server tokenizes for one
/// request (`--max-text-bytes`).
pub(crate) fn check_text(max_text_bytes: usize, field: &str, bytes: usize) -> Result<(), ApiError> {
    if bytes > max_text_bytes {
        return Err(ApiError::invalid(
            field,
            format!(
                "'{field}' holds {bytes} bytes of text; this server tokenizes at most {} per \
                 request (--max-text-bytes)",
                max_text_bytes
            ),
        ));
    }
    Ok(())
}

/// Template text a rendered chat prompt may add to its messages' text.
const TEMPLATE_OVERHEAD: usize = 64 << 10;

/// Most bytes a chat template may write for one request: the text limit and the template's
/// own text (a Jinja template is stopped as it passes it, before it fills the memory).
pub(crate) fn rendered_limit(max_text_bytes: usize) -> usize {
    max_text_bytes.saturating_add(TEMPLATE_OVERHEAD)
}

/// 400 when a rendered chat prompt is larger than its messages allow (a template that
/// writes far more than the conversation holds).
pub(crate) fn check_rendered(max_text_bytes: usize, bytes: usize) -> Result<(), ApiError> {
    let limit = rendered_limit(max_text_bytes);
    if bytes > limit {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "the chat template rendered {bytes} bytes, more than the {limit} this server \
                 tokenizes per request"
            ),
        ));
    }
    Ok(())
}

/// 400 naming `n` (or `prompt`) when a request asks for more choices than the engine's
/// queue holds: it could never be accepted, so 503 and a retry would not help.
pub(crate) fn check_choices(queue: usize, prompts: usize, n: usize) -> Result<(), ApiError> {
    let choices = prompts.saturating_mul(n);
    if choices <= queue {
        return Ok(());
    }
    let (field, what) = if prompts <= 1 {
        ("n", format!("'n' is {n}"))
    } else {
        (
            "prompt",
            format!("{prompts} prompts × n = {n} make {choices} choices"),
        )
    };
    Err(ApiError::invalid(
        field,
        format!("{what}, more than the server's queue of {queue} requests (--queue) can hold"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_beyond_the_queue_name_the_field() {
        assert!(check_choices(4, 1, 4).is_ok());
        assert_eq!(
            check_choices(4, 1, 5).unwrap_err().param.as_deref(),
            Some("n")
        );
        let e = check_choices(4, 3, 2).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("prompt"));
        assert_eq!(e.status.as_u16(), 400);
    }
}
