//! Rust errors as Python exceptions: the classes live in `ggrs/errors.py` (so that they can
//! also derive from `OSError`, `ValueError` and `MemoryError`), and every `LlamaError` maps
//! to one of them with its message.

use ggrs_llama::LlamaError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// The `ggrs.errors` class named `name`, with `message`. Falls back to `RuntimeError` if the
/// Python half of the package cannot be imported (it always can in an installed package).
pub fn ggrs_error(py: Python<'_>, name: &str, message: String) -> PyErr {
    let class = py
        .import("ggrs.errors")
        .and_then(|m| m.getattr(name))
        .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
    match class {
        Ok(ty) => PyErr::from_type(ty, message),
        Err(_) => PyRuntimeError::new_err(message),
    }
}

/// The exception class of `e`.
fn class_of(e: &LlamaError) -> &'static str {
    match e {
        LlamaError::Gguf(_) | LlamaError::Io { .. } => "FileError",
        LlamaError::UnsupportedArch { .. }
        | LlamaError::MissingKey(_)
        | LlamaError::BadKey { .. }
        | LlamaError::MissingTensor(_)
        | LlamaError::BadShape { .. }
        | LlamaError::BadTensorType { .. }
        | LlamaError::UnsupportedTensor { .. }
        | LlamaError::UnsupportedRopeScaling { .. }
        | LlamaError::NotGenerative { .. } => "ModelError",
        LlamaError::ContextFull { .. } => "ContextFullError",
        LlamaError::ContextShiftUnsupported { .. } => "BadArgumentError",
        LlamaError::TokenOutOfRange { .. }
        | LlamaError::EmptyPrompt
        | LlamaError::InvalidArgument(_)
        | LlamaError::Embedding(_)
        | LlamaError::Chat(_)
        | LlamaError::Constraint(_) => "BadArgumentError",
        LlamaError::SessionTooLarge { .. } => "OutOfMemoryError",
        // A tokenizer that cannot be built is a model problem; one that fails on a text is
        // about the argument.
        LlamaError::Tokenizer(_) => "ModelError",
        LlamaError::Cancelled | LlamaError::Core(_) => "GgrsError",
    }
}

/// `e` as the Python exception of its kind.
pub fn to_py(py: Python<'_>, e: LlamaError) -> PyErr {
    ggrs_error(py, class_of(&e), e.to_string())
}

/// A bad argument found on the Rust side of the binding.
pub fn bad_argument(py: Python<'_>, message: impl Into<String>) -> PyErr {
    ggrs_error(py, "BadArgumentError", message.into())
}

/// Extension: `result.py_err(py)?` for results of `ggrs-llama`.
pub trait IntoPyResult<T> {
    /// The result with its error as a Python exception.
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, LlamaError> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}
