//! The native half of the `ggrs` Python package (`ggrs._ggrs`): a model with its session
//! ([`model::NativeModel`]), generation streams ([`generation::TokenStream`]) and file
//! conversion. The Python half (`python/ggrs/`) wraps it with llama-cpp-python's calls.
//!
//! Long work runs on a worker thread while the calling Python thread waits without the GIL
//! and keeps answering signals ([`worker`]); Rust errors become the exceptions of
//! `ggrs.errors` ([`errors`]).

mod errors;
mod generation;
mod model;
mod quantize;
mod worker;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _ggrs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<model::NativeModel>()?;
    m.add_class::<generation::TokenStream>()?;
    m.add_class::<generation::Piece>()?;
    m.add_function(wrap_pyfunction!(quantize::quantize, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
