//! Long work (loading, prompt evaluation, generation, perplexity) runs on a worker thread
//! while the calling Python thread waits without holding the GIL, so other Python threads
//! run meanwhile, and checks for signals every 50 ms, so Ctrl-C raises `KeyboardInterrupt`
//! at once and tells the worker to stop at its next token.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use pyo3::prelude::*;

use crate::errors::ggrs_error;

/// How often a waiting Python thread looks for signals.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Work running on its own thread, sending messages of type `M`.
pub struct Job<M> {
    /// Only the waiting thread receives; the mutex makes the job shareable with the
    /// GIL-free closure that waits.
    rx: Mutex<Receiver<M>>,
    cancel: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl<M: Send + 'static> Job<M> {
    /// Starts `work` on a new thread; it sends its messages to the sender it is given and
    /// should stop early once the flag is set.
    pub fn spawn(
        py: Python<'_>,
        work: impl FnOnce(&Sender<M>, &AtomicBool) + Send + 'static,
    ) -> PyResult<Job<M>> {
        let (tx, rx) = mpsc::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let flag = cancel.clone();
        let handle = std::thread::Builder::new()
            .name("ggrs-python-worker".into())
            .spawn(move || work(&tx, &flag))
            .map_err(|e| ggrs_error(py, "GgrsError", format!("cannot start a thread: {e}")))?;
        Ok(Job {
            rx: Mutex::new(rx),
            cancel,
            handle: Some(handle),
        })
    }

    /// The next message, or `None` once the worker has finished. A signal handler that
    /// raises (Ctrl-C) cancels the work and its exception is returned.
    pub fn recv(&self, py: Python<'_>) -> PyResult<Option<M>> {
        loop {
            let wait = || {
                let rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
                rx.recv_timeout(SIGNAL_CHECK)
            };
            match py.detach(wait) {
                Ok(m) => return Ok(Some(m)),
                Err(RecvTimeoutError::Disconnected) => return Ok(None),
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = py.check_signals() {
                        self.cancel();
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Asks the worker to stop at its next chance.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// Cancels the work and waits (without the GIL) until the worker has finished, so that
    /// what it held (the session) is free again.
    pub fn stop(&mut self, py: Python<'_>) {
        self.cancel();
        if let Some(h) = self.handle.take() {
            // A worker that panicked has already dropped its sender; nothing to report.
            let _ = py.detach(|| h.join());
        }
    }
}

impl<M> Drop for Job<M> {
    fn drop(&mut self) {
        // Never wait here (the GIL may be held): the worker ends at its next token.
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// Runs `work` on a worker thread and returns its result, waiting as [`Job::recv`] does.
pub fn run<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce(&AtomicBool) -> T + Send + 'static,
) -> PyResult<T> {
    let job = Job::spawn(py, move |tx, cancel| {
        let _ = tx.send(work(cancel));
    })?;
    match job.recv(py)? {
        Some(t) => Ok(t),
        None => Err(worker_died(py)),
    }
}

/// The error for a worker that ended without an answer (a bug: it panicked).
pub fn worker_died(py: Python<'_>) -> PyErr {
    ggrs_error(
        py,
        "GgrsError",
        "internal error: the computation stopped without a result (please report it)".into(),
    )
}
