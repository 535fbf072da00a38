//! `ggrs._ggrs.quantize`: `ggrs quantize` as a function (used to make the default model).

use std::path::PathBuf;

use ggrs_core::gguf::GgufFile;
use ggrs_core::quantize::QuantizeOptions;
use ggrs_llama::quantize::{FileType, RecipeOptions};
use ggrs_llama::LlamaError;
use pyo3::prelude::*;

use crate::errors::{bad_argument, ggrs_error, IntoPyResult};
use crate::worker;

/// Writes `source` converted to `file_type` (a llama.cpp file type name such as "q4_0",
/// "Q4_K_M" or "f16") to `dest`, as `ggrs quantize` does; `pure` leaves out the recipe's
/// mixture rules, `allow_requantize` permits an already quantized source. Returns the
/// number of tensors converted.
#[pyfunction]
#[pyo3(signature = (source, dest, file_type, *, pure=false, allow_requantize=false, n_threads=0))]
pub fn quantize(
    py: Python<'_>,
    source: PathBuf,
    dest: PathBuf,
    file_type: &str,
    pure: bool,
    allow_requantize: bool,
    n_threads: usize,
) -> PyResult<usize> {
    let ft = FileType::from_name(file_type).ok_or_else(|| {
        bad_argument(
            py,
            format!(
                "unknown file type {file_type:?} (one of {})",
                FileType::ALL.map(|(_, n)| n).join(", ")
            ),
        )
    })?;
    let mut recipe = RecipeOptions::new(ft);
    recipe.pure = pure;
    let opts = QuantizeOptions {
        allow_requantize,
        n_threads,
    };
    let r = worker::run(py, move |_| {
        let input = GgufFile::open(&source).map_err(LlamaError::from)?;
        ggrs_llama::quantize::quantize(&input, &dest, &recipe, &opts, |_| {})
            .map_err(|e| LlamaError::InvalidArgument(e.to_string()))
    })?;
    match r {
        Ok(report) => Ok(report.n_converted),
        Err(LlamaError::InvalidArgument(m)) => Err(ggrs_error(py, "GgrsError", m)),
        Err(e) => Err(e).py_err(py),
    }
}
