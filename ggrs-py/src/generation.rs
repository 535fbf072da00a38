//! Generation on a worker thread: the tokens as `Piece`s through a `TokenStream`, the result
//! as a dict (which `ggrs.Generation` wraps).

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use ggrs_llama::{GenerateParams, Generation, LlamaError, StopReason, TokenEvent};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::IntoPyResult;
use crate::state::{lock, State};
use crate::worker::{self, Job};

/// What a generating worker sends.
pub enum Message {
    /// A token was made (only when streaming).
    Token(TokenEvent),
    /// The generation ended.
    Done(Result<Generation, LlamaError>),
}

/// Starts generating after `prompt` on a worker thread that holds the session until it is
/// done; with `stream`, every token is sent as it is made. Without `cache_prompt` the cache
/// is emptied first, while the session is held (so that another thread's generation cannot
/// slip in between).
pub fn start_generation(
    py: Python<'_>,
    state: Arc<Mutex<State>>,
    prompt: Vec<u32>,
    params: GenerateParams,
    stream: bool,
    cache_prompt: bool,
) -> PyResult<Job<Message>> {
    Job::spawn(py, move |tx, cancel| {
        let mut g = lock(&state);
        let State { session, cache } = &mut *g;
        if !cache_prompt {
            cache.forget(session);
        }
        let result = cache.generate(session, &prompt, &params, |event| {
            if stream && tx.send(Message::Token(event.clone())).is_err() {
                return ControlFlow::Break(());
            }
            if cancel.load(Ordering::Relaxed) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        drop(g);
        let _ = tx.send(Message::Done(result));
    })
}

/// One generated token as a stream gives it.
#[pyclass(frozen, get_all, module = "ggrs._ggrs")]
pub struct Piece {
    /// Text that may be shown now: complete UTF-8 characters, held back while it could be
    /// the start of a stop string (so it may be empty, and a later piece may carry the text
    /// of several tokens). The last piece of a stream may carry held-back text only
    /// (`token` is then None).
    pub text: String,
    /// The token id (None for the closing piece that only flushes held-back text).
    pub token: Option<u32>,
    /// Log-probability of the token under the model (None for the closing piece).
    pub logprob: Option<f32>,
    /// The most likely tokens and their log-probabilities, if asked for (`logprobs=N`).
    pub top_logprobs: Vec<(u32, f32)>,
}

#[pymethods]
impl Piece {
    fn __repr__(&self) -> String {
        format!(
            "Piece(text={:?}, token={:?}, logprob={:?})",
            self.text, self.token, self.logprob
        )
    }
}

/// The name Python sees for a stop reason, and the stop string if any.
fn stop_reason(stop: &StopReason) -> (&'static str, Option<&str>) {
    match stop {
        StopReason::EndOfGeneration(_) => ("eos", None),
        StopReason::MaxTokens => ("length", None),
        StopReason::StopString(s) => ("stop", Some(s)),
        StopReason::ContextFull => ("context", None),
        StopReason::Callback => ("cancelled", None),
    }
}

/// The fields of `ggrs.Generation`, as a dict.
pub fn generation_dict<'py>(py: Python<'py>, g: &Generation) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let (reason, stop_string) = stop_reason(&g.stop);
    d.set_item("text", &g.text)?;
    d.set_item("tokens", &g.tokens)?;
    d.set_item("prompt_tokens", &g.prompt_tokens)?;
    d.set_item("cached_tokens", g.cached_tokens)?;
    d.set_item("stop_reason", reason)?;
    d.set_item("stop_string", stop_string)?;
    let lp: Vec<f32> = g.logprobs.iter().map(|l| l.0).collect();
    let top: Vec<&Vec<(u32, f32)>> = g.logprobs.iter().map(|l| &l.1).collect();
    d.set_item("logprobs", lp)?;
    d.set_item("top_logprobs", top)?;
    let t = &g.timings;
    let timings = PyDict::new(py);
    timings.set_item("prompt_tokens", t.prompt_tokens)?;
    timings.set_item("prompt_seconds", t.prompt_secs)?;
    timings.set_item("generated_tokens", t.gen_tokens)?;
    timings.set_item("generation_seconds", t.gen_secs)?;
    timings.set_item("prompt_tokens_per_second", t.prompt_tps())?;
    timings.set_item("generated_tokens_per_second", t.gen_tps())?;
    timings.set_item("draft_tokens", t.drafted)?;
    timings.set_item("draft_accepted", t.accepted)?;
    d.set_item("timings", timings)?;
    Ok(d)
}

/// The tokens of a generation as they are made: iterate it for `Piece`s; `result` holds the
/// finished generation's dict afterwards. Dropping or closing it stops the generation.
#[pyclass(module = "ggrs._ggrs")]
pub struct TokenStream {
    job: Option<Job<Message>>,
    result: Option<Py<PyDict>>,
}

impl TokenStream {
    /// A stream over a started generation.
    pub fn new(job: Job<Message>) -> TokenStream {
        TokenStream {
            job: Some(job),
            result: None,
        }
    }
}

#[pymethods]
impl TokenStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Piece>> {
        let slot = &mut self.job;
        let Some(job) = slot.as_mut() else {
            return Ok(None);
        };
        match job.recv(py) {
            Ok(Some(Message::Token(e))) => Ok(Some(Piece {
                text: e.text,
                token: (!e.flush).then_some(e.id),
                logprob: (!e.flush).then_some(e.logprob),
                top_logprobs: e.top_logprobs,
            })),
            Ok(Some(Message::Done(r))) => {
                job.stop(py);
                *slot = None;
                self.result = Some(generation_dict(py, &r.py_err(py)?)?.unbind());
                Ok(None)
            }
            Ok(None) => {
                *slot = None;
                Err(worker::worker_died(py))
            }
            Err(e) => {
                if let Some(mut j) = slot.take() {
                    j.stop(py);
                }
                Err(e)
            }
        }
    }

    /// The finished generation (a dict of `ggrs.Generation`'s fields), once the stream is
    /// exhausted; None before.
    #[getter]
    fn result(&self, py: Python<'_>) -> Option<Py<PyDict>> {
        self.result.as_ref().map(|r| r.clone_ref(py))
    }

    /// Stops the generation and waits until the session is free.
    fn close(&mut self, py: Python<'_>) {
        if let Some(mut j) = self.job.take() {
            j.stop(py);
        }
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &mut self,
        py: Python<'_>,
        _ty: Option<Bound<'_, PyAny>>,
        _value: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> bool {
        self.close(py);
        false
    }
}
