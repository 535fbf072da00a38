//! The native half of the `ggrs` Python package (`ggrs._ggrs`): a model with its session
//! ([`model::NativeModel`]), generation streams ([`generation::TokenStream`]) and file
//! conversion. The Python half (`python/ggrs/`) wraps it with llama-cpp-python's calls.
//!
//! Long work runs on a worker thread while the calling Python thread waits without the GIL
//! and keeps answering signals ([`worker`]); Rust errors become the exceptions of
//! `ggrs.errors` ([`errors`]).

mod chat;
mod embedding;
mod errors;
mod generation;
mod model;
mod quantize;
mod state;
mod worker;

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;

/// Set when the interpreter exits (`atexit`, registered by the package): models still
/// loaded then are left to the operating system instead of being dropped, as `ggrs run`'s
/// process ends (unmapping and freeing a model's buffers took about 30 ms of every short
/// script's run).
static EXITING: AtomicBool = AtomicBool::new(false);

/// Whether the interpreter is exiting ([`EXITING`]).
pub(crate) fn exiting() -> bool {
    EXITING.load(Ordering::Relaxed)
}

/// Called by `atexit`: from now on dropped models are not freed ([`EXITING`]).
#[pyfunction]
fn _at_exit() {
    EXITING.store(true, Ordering::Relaxed);
}

/// The native module.
#[pymodule]
fn _ggrs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<model::NativeModel>()?;
    m.add_class::<generation::TokenStream>()?;
    m.add_class::<generation::Piece>()?;
    m.add_class::<chat::ChatPlan>()?;
    m.add_class::<chat::ReplyPieces>()?;
    m.add_function(wrap_pyfunction!(quantize::quantize, m)?)?;
    m.add_function(wrap_pyfunction!(_at_exit, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
