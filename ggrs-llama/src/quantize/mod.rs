//! `ggrs quantize`: llama.cpp's quantization recipes (Q4_K_M, Q5_K_M, Q3_K_M, Q2_K, IQ4_XS,
//! …) on top of ggrs-core's conversion engine ([`ggrs_core::quantize`]).
//!
//! ggrs-core converts each tensor to the type a plan names; this module, which knows tensor
//! names and layer roles, makes the plan the way llama.cpp's quantize tool does
//! ([`recipe`]): the same type for every tensor, the same `general.file_type`, the same
//! tensor order, and, with or without an importance matrix (`--imatrix`,
//! [`crate::imatrix`]), the same bytes.
//!
//! ```no_run
//! use ggrs_core::gguf::GgufFile;
//! use ggrs_core::quantize::QuantizeOptions;
//! use ggrs_llama::quantize::{quantize, FileType, RecipeOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let input = GgufFile::open("model-f16.gguf")?;
//! let recipe = RecipeOptions::new(FileType::Q4KM);
//! let engine = QuantizeOptions { allow_requantize: false, n_threads: 0 };
//! quantize(&input, "model-q4_k_m.gguf".as_ref(), &recipe, &engine, |_| {})?;
//! # Ok(()) }
//! ```

pub mod recipe;
pub mod types;

use std::path::Path;

use ggrs_core::gguf::{GgufFile, Value};
use ggrs_core::quantize::{
    quantize_file, QuantizeOptions, QuantizePlan, QuantizeProgress, QuantizeReport,
};

pub use recipe::{
    allows_quantization, choose_types, fallback, tensor_order, Choice, ModelFacts, RecipeOptions,
    Role, TensorTypeOverride,
};
pub use types::{FileType, QuantType};

/// Why a recipe could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    /// The conversion itself failed (reading, writing, a type without a quantizer, …).
    #[error(transparent)]
    Engine(#[from] ggrs_core::quantize::QuantizeError),
    /// The model's metadata lacks a key the recipes read.
    #[error("the model file has no valid `{0}` key, which the quantization recipes read")]
    MissingKey(String),
    /// A MoE tensor's name does not say its layer.
    #[error(
        "cannot tell the layer of tensor `{0}` (expected `blk.N.…` with N below the block count)"
    )]
    NoLayer(String),
    /// A `--tensor-type` argument is malformed.
    #[error("bad tensor type override `{spec}`: {detail}")]
    BadOverride {
        /// The argument.
        spec: String,
        /// What is wrong.
        detail: String,
    },
    /// The recipe chose a type this build cannot write.
    #[error("tensor `{name}` would be {ty}, which this build cannot write yet")]
    UnsupportedType {
        /// Tensor name.
        name: String,
        /// The chosen type.
        ty: QuantType,
    },
    /// llama.cpp refuses this recipe without an importance matrix.
    #[error(
        "{file_type} makes `{name}` {ty}, which needs an importance matrix: pass --imatrix FILE \
         (made by `ggrs imatrix` or llama-imatrix), or choose Q2_K or Q3_K_S instead"
    )]
    NeedsImatrix {
        /// The file type.
        file_type: FileType,
        /// The first tensor concerned.
        name: String,
        /// Its type.
        ty: QuantType,
    },
    /// The importance matrix lacks a tensor that a very low-bit type needs it for.
    #[error(
        "the importance matrix has no entry for `{name}`, which {ty} cannot quantize well \
         without one (check --include-weights/--exclude-weights)"
    )]
    MissingImatrixEntry {
        /// Tensor name.
        name: String,
        /// Its type.
        ty: QuantType,
    },
    /// An importance matrix entry does not fit its tensor.
    #[error(
        "the importance matrix has {got} values for `{name}`, which has {expected} columns \
         (over all its matrices): was it computed for another model?"
    )]
    ImatrixSize {
        /// Tensor name.
        name: String,
        /// Values in the matrix.
        got: usize,
        /// `ne0 · ne2`.
        expected: usize,
    },
}

/// llama.cpp's `tensor_requires_imatrix`: the 1- to 3-bit grid i-quants (IQ3_S aside), and
/// the Q2_K tensors of a Q2_K_S file, other than the embeddings and output.
fn requires_imatrix(name: &str, ty: QuantType, file_type: FileType) -> bool {
    let embd_or_output = is_token_embd(name) || name == "output.weight";
    let needs = match ty {
        QuantType::IQ3XXS
        | QuantType::IQ2XXS
        | QuantType::IQ2XS
        | QuantType::IQ2S
        | QuantType::IQ1M
        | QuantType::IQ1S => true,
        QuantType::Q2K => file_type == FileType::Q2KS,
        _ => false,
    };
    !embd_or_output && needs
}

/// llama.cpp's `tensor_name_match_token_embd`.
fn is_token_embd(name: &str) -> bool {
    matches!(name, "token_embd.weight" | "per_layer_token_embd.weight")
}

/// The conversion plan for `input` under `recipe`: every tensor's type (see
/// [`recipe::choose_types`]), `general.file_type`, and llama.cpp's tensor order, so that the
/// file is the one llama-quantize writes.
pub fn plan(input: &GgufFile, recipe: &RecipeOptions) -> Result<QuantizePlan, QuantizeError> {
    let facts = ModelFacts::from_gguf(input)?;
    let choice = choose_types(input.tensors(), &facts, recipe)?;
    let imatrix = recipe.imatrix.as_deref().filter(|m| !m.weights.is_empty());
    let mut types = Vec::with_capacity(choice.types.len());
    let mut importance = Vec::with_capacity(choice.types.len());
    for (t, c) in input.tensors().iter().zip(&choice.types) {
        let Some(q) = *c else {
            types.push(t.dtype);
            importance.push(None);
            continue;
        };
        let needs = requires_imatrix(&t.name, q, recipe.file_type);
        if needs && imatrix.is_none() {
            return Err(QuantizeError::NeedsImatrix {
                file_type: recipe.file_type,
                name: t.name.clone(),
                ty: q,
            });
        }
        let d = q.dtype().ok_or_else(|| QuantizeError::UnsupportedType {
            name: t.name.clone(),
            ty: q,
        })?;
        // As llama-quantize: a tensor that is converted takes its entry when the sizes
        // agree; a size mismatch is an error except for the token embeddings.
        let mut w = None;
        if d != t.dtype {
            if let Some(e) = imatrix.and_then(|m| m.weights.get(&t.name)) {
                let expected = t.ne[0] * t.ne[2];
                if e.len() == expected {
                    w = Some(e.clone());
                } else if !is_token_embd(&t.name) {
                    return Err(QuantizeError::ImatrixSize {
                        name: t.name.clone(),
                        got: e.len(),
                        expected,
                    });
                }
            }
            if needs && w.is_none() {
                return Err(QuantizeError::MissingImatrixEntry {
                    name: t.name.clone(),
                    ty: q,
                });
            }
        }
        types.push(d);
        importance.push(w);
    }
    let mut metadata = vec![(
        "general.file_type".to_string(),
        Value::U32(recipe.file_type.id()),
    )];
    if let Some(m) = imatrix {
        // llama-quantize's KV overrides, in its order.
        let mut kv = |k: &str, v: Value| metadata.push((k.to_string(), v));
        kv("quantize.imatrix.file", Value::String(m.file.clone()));
        if let Some(d) = &m.dataset {
            let mut d = d.clone();
            let mut cut = d.len().min(127);
            while !d.is_char_boundary(cut) {
                cut -= 1;
            }
            d.truncate(cut);
            kv("quantize.imatrix.dataset", Value::String(d));
        }
        kv(
            "quantize.imatrix.entries_count",
            Value::U32(m.weights.len() as u32),
        );
        if m.chunk_count > 0 {
            kv("quantize.imatrix.chunks_count", Value::U32(m.chunk_count));
        }
    }
    Ok(QuantizePlan {
        types,
        metadata,
        order: choice.order,
        importance,
    })
}

/// Writes `input` to `out` quantized with `recipe` (what `ggrs quantize IN OUT TYPE` does),
/// calling `progress` after each tensor.
pub fn quantize(
    input: &GgufFile,
    out: &Path,
    recipe: &RecipeOptions,
    engine: &QuantizeOptions,
    progress: impl FnMut(&QuantizeProgress),
) -> Result<QuantizeReport, QuantizeError> {
    let plan = plan(input, recipe)?;
    Ok(quantize_file(input, out, &plan, engine, progress)?)
}
