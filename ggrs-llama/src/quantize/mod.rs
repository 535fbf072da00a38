//! `ggrs quantize`: llama.cpp's quantization recipes (Q4_K_M, Q5_K_M, Q3_K_M, Q2_K, IQ4_XS,
//! …) on top of ggrs-core's conversion engine ([`ggrs_core::quantize`]).
//!
//! ggrs-core converts each tensor to the type a plan names; this module, which knows tensor
//! names and layer roles, makes the plan the way llama.cpp's quantize tool does
//! ([`recipe`]): the same type for every tensor, the same `general.file_type`, the same
//! tensor order, and (without an importance matrix, which ggrs does not support) the same
//! bytes.
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
        "{file_type} makes `{name}` {ty}, which llama.cpp only does with an importance matrix \
         (ggrs has none): choose Q2_K or Q3_K_S instead"
    )]
    NeedsImatrix {
        /// The file type.
        file_type: FileType,
        /// The first tensor concerned.
        name: String,
        /// Its type.
        ty: QuantType,
    },
}

/// llama.cpp's `tensor_requires_imatrix`, for the types ggrs can choose: Q2_K tensors of a
/// Q2_K_S file other than the embeddings and output.
fn requires_imatrix(name: &str, ty: QuantType, file_type: FileType) -> bool {
    let embd_or_output = matches!(
        name,
        "token_embd.weight" | "per_layer_token_embd.weight" | "output.weight"
    );
    !embd_or_output && ty == QuantType::Q2K && file_type == FileType::Q2KS
}

/// The conversion plan for `input` under `recipe`: every tensor's type (see
/// [`recipe::choose_types`]), `general.file_type`, and llama.cpp's tensor order, so that the
/// file is the one llama-quantize writes.
pub fn plan(input: &GgufFile, recipe: &RecipeOptions) -> Result<QuantizePlan, QuantizeError> {
    let facts = ModelFacts::from_gguf(input)?;
    let choice = choose_types(input.tensors(), &facts, recipe)?;
    let mut types = Vec::with_capacity(choice.types.len());
    for (t, c) in input.tensors().iter().zip(&choice.types) {
        let Some(q) = *c else {
            types.push(t.dtype);
            continue;
        };
        if requires_imatrix(&t.name, q, recipe.file_type) {
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
        types.push(d);
    }
    Ok(QuantizePlan {
        types,
        metadata: vec![(
            "general.file_type".to_string(),
            Value::U32(recipe.file_type.id()),
        )],
        order: choice.order,
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
