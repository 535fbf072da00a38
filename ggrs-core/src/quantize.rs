//! The conversion engine behind `ggrs quantize`: writes a GGUF file's tensors with the
//! types a caller-supplied [`QuantizePlan`] names, one per tensor.
//!
//! This module knows nothing of models or tensor names: which tensor gets which type (the
//! `--pure` rule, llama.cpp's Q4_K_M… recipes, `--tensor-type` overrides) is decided by the
//! caller (`ggrs_llama::quantize`). A tensor whose planned type is its own is copied byte for
//! byte; any other is converted row by row, on several threads, by decoding the row to f32
//! (exact for F16 and BF16, the type's dequantizer for block types) and encoding that with
//! the target type's reference quantizer, or, when the plan gives the tensor importance
//! weights, its weighted quantizer ([`crate::quants::quantize_row_weighted`]). That is how
//! llama.cpp's quantize tool proceeds, with or without an importance matrix, so the result
//! is bit-identical to its output. The input's
//! metadata is copied, then `general.quantization_version` is set to 2 (ggml's
//! `GGML_QNT_VERSION`) and the plan's metadata is set (each moved to the end, as ggml does);
//! tensors are written in the plan's order.

use std::io::Write;
use std::path::Path;

use crate::dtype::DType;
use crate::gguf::{GgufError, GgufFile, GgufWriter, TensorInfo, Value};
use crate::quants::{needs_weights, quantize_row_weighted_dyn};
use crate::types::traits;

/// How to convert (the per-tensor types come in a [`QuantizePlan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuantizeOptions {
    /// Convert tensors that are block-quantized already (llama.cpp refuses without it).
    pub allow_requantize: bool,
    /// Threads converting rows (0: one per physical core).
    pub n_threads: usize,
}

/// What to write: the type of every tensor and the metadata to set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuantizePlan {
    /// The type of each tensor of the input, in the input's tensor order (same length).
    /// A tensor whose entry equals its own type is copied byte for byte.
    pub types: Vec<DType>,
    /// Metadata set after the input's metadata is copied, in this order, e.g.
    /// `general.file_type`. A key the input has is moved to the end with its new value,
    /// as ggml's `gguf_set_val_*` does.
    pub metadata: Vec<(String, Value)>,
    /// The order to write the tensors in, as indices into the input's tensors (a
    /// permutation); empty keeps the input's order.
    pub order: Vec<usize>,
    /// Importance weights per tensor, in the input's tensor order (empty: none at all): for a
    /// tensor of rows of `ne0` values, `ne0 · ne2` weights, `ne0` per matrix of a 3-D
    /// tensor (one per MoE expert). A converted tensor with weights is encoded as ggml's
    /// `quantize_<type>` with `quant_weights` does (`llama-quantize --imatrix`); types
    /// that ignore them there ignore them here.
    pub importance: Vec<Option<Vec<f32>>>,
}

impl QuantizePlan {
    /// The plan that gives every tensor of `input` the type `f(tensor)` and sets no metadata.
    pub fn from_fn(input: &GgufFile, f: impl FnMut(&TensorInfo) -> DType) -> QuantizePlan {
        QuantizePlan {
            types: input.tensors().iter().map(f).collect(),
            metadata: Vec::new(),
            order: Vec::new(),
            importance: Vec::new(),
        }
    }
}

/// Progress of a conversion, reported once per tensor after it is written.
#[derive(Debug, Clone)]
pub struct QuantizeProgress<'a> {
    /// 0-based index of the tensor just written.
    pub index: usize,
    /// Tensors in the file.
    pub total: usize,
    /// Its name.
    pub name: &'a str,
    /// Type it had.
    pub from: DType,
    /// Type it has now.
    pub to: DType,
    /// Bytes written so far (tensor data).
    pub bytes_done: u64,
    /// Bytes of tensor data in the output.
    pub bytes_total: u64,
}

/// Summary of a conversion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuantizeReport {
    /// Tensors in the file.
    pub n_tensors: usize,
    /// Tensors converted to another type.
    pub n_converted: usize,
    /// Bytes of tensor data read.
    pub bytes_in: u64,
    /// Bytes of tensor data written.
    pub bytes_out: u64,
}

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    /// Reading or writing the file failed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The target type has no quantizer in this build.
    #[error("cannot convert to {0}: this build has no quantizer for it")]
    NoQuantizer(DType),
    /// A source tensor's type cannot be decoded.
    #[error("tensor `{name}` has type {dtype}, which this build cannot decode")]
    NoDequantizer {
        /// Tensor name.
        name: String,
        /// Its type.
        dtype: DType,
    },
    /// The target type is written only with importance weights, and the plan gives the
    /// tensor none.
    #[error(
        "tensor `{name}`: {to} is written only with importance weights, and none were given \
         for it (pass an importance matrix with an entry for it: --imatrix FILE)"
    )]
    NeedsWeights {
        /// Tensor name.
        name: String,
        /// The target type.
        to: DType,
    },
    /// A tensor is quantized already and requantizing was not allowed.
    #[error(
        "tensor `{name}` is {from} already; converting it to {to} loses precision twice \
         (pass --allow-requantize to do it anyway)"
    )]
    Requantize {
        /// Tensor name.
        name: String,
        /// Its type.
        from: DType,
        /// The target type.
        to: DType,
    },
    /// The plan does not name one type per tensor.
    #[error("the quantization plan names {planned} types for a file of {tensors} tensors")]
    PlanLength {
        /// Types in the plan.
        planned: usize,
        /// Tensors in the file.
        tensors: usize,
    },
    /// A tensor's importance weights do not have one value per column of each matrix.
    #[error(
        "tensor `{name}`: {got} importance weights, expected {expected} (one per column of \
         each of its matrices)"
    )]
    ImportanceLength {
        /// Tensor name.
        name: String,
        /// Weights given.
        got: usize,
        /// `ne0 · ne2`.
        expected: usize,
    },
    /// The plan's tensor order is not a permutation of the input's tensors.
    #[error("the quantization plan's tensor order is not a permutation of the file's {0} tensors")]
    BadOrder(usize),
    /// A tensor's rows do not divide into the target's blocks.
    #[error("tensor `{name}`: rows of {ne0} values do not divide into {to} blocks of {block}")]
    BlockMismatch {
        /// Tensor name.
        name: String,
        /// Row length.
        ne0: usize,
        /// The target type.
        to: DType,
        /// Its block size.
        block: usize,
    },
}

/// Writes `input` to `out` with tensor `i` converted to `plan.types[i]` as the
/// [module docs](self) say, calling `progress` after each tensor.
///
/// Fails before writing anything if the plan does not have one type per tensor, if a
/// target type has no quantizer or a source type no dequantizer in this build, if a
/// target type written only with importance weights gets a tensor without them, if a
/// quantized tensor would be converted without [`QuantizeOptions::allow_requantize`], or if
/// a tensor's rows do not divide into its target's blocks.
pub fn quantize_file(
    input: &GgufFile,
    out: &Path,
    plan: &QuantizePlan,
    opts: &QuantizeOptions,
    mut progress: impl FnMut(&QuantizeProgress),
) -> Result<QuantizeReport, QuantizeError> {
    write_quantized(input, out, plan, opts, &mut progress)
}

/// [`quantize_file`]'s body, not generic: compiled once here rather than in every caller
/// (inlined into a caller, the whole conversion engine took LLVM minutes to optimise).
fn write_quantized(
    input: &GgufFile,
    out: &Path,
    plan: &QuantizePlan,
    opts: &QuantizeOptions,
    progress: &mut dyn FnMut(&QuantizeProgress),
) -> Result<QuantizeReport, QuantizeError> {
    let n = input.tensors().len();
    if plan.types.len() != n {
        return Err(QuantizeError::PlanLength {
            planned: plan.types.len(),
            tensors: n,
        });
    }
    if !plan.importance.is_empty() && plan.importance.len() != n {
        return Err(QuantizeError::PlanLength {
            planned: plan.importance.len(),
            tensors: n,
        });
    }
    let importance = |i: usize| plan.importance.get(i).and_then(|w| w.as_deref());
    for (i, t) in input.tensors().iter().enumerate() {
        if let Some(w) = importance(i) {
            let expected = t.ne[0] * t.ne[2];
            if w.len() != expected {
                return Err(QuantizeError::ImportanceLength {
                    name: t.name.clone(),
                    got: w.len(),
                    expected,
                });
            }
        }
    }
    let order: Vec<usize> = if plan.order.is_empty() {
        (0..n).collect()
    } else {
        let mut seen = vec![false; n];
        for &i in &plan.order {
            if i >= n || std::mem::replace(&mut seen[i], true) {
                return Err(QuantizeError::BadOrder(n));
            }
        }
        if plan.order.len() != n {
            return Err(QuantizeError::BadOrder(n));
        }
        plan.order.clone()
    };
    let mut w = GgufWriter::new();
    // The writer refuses an output that is the input file (or, for a split model, any of
    // its parts) under any name.
    w.protect(input.sources().cloned());
    // Every key in its place, `general.alignment` included (which sets the writer's
    // alignment): a file without it has the default alignment, and so will the output. The
    // keys of a split input's first part are left out: the output is one file (as
    // llama-quantize removes them too).
    let split_keys = [
        crate::gguf::SPLIT_NO_KEY,
        crate::gguf::SPLIT_COUNT_KEY,
        crate::gguf::SPLIT_TENSORS_KEY,
    ];
    for (k, v) in input.metadata() {
        if !split_keys.contains(&k.as_str()) {
            w.add_kv(k.clone(), v.clone())?;
        }
    }
    let version = ("general.quantization_version".to_string(), Value::U32(2));
    for (k, v) in std::iter::once(&version).chain(&plan.metadata) {
        w.remove_kv(k);
        w.add_kv(k.clone(), v.clone())?;
    }
    for &i in &order {
        let (t, new) = (&input.tensors()[i], plan.types[i]);
        if new != t.dtype {
            if needs_weights(new) {
                if importance(i).is_none() {
                    return Err(QuantizeError::NeedsWeights {
                        name: t.name.clone(),
                        to: new,
                    });
                }
            } else if traits(new).from_f32.is_none() {
                return Err(QuantizeError::NoQuantizer(new));
            }
            if t.dtype.is_quantized() && !opts.allow_requantize {
                return Err(QuantizeError::Requantize {
                    name: t.name.clone(),
                    from: t.dtype,
                    to: new,
                });
            }
            if traits(t.dtype).to_f32.is_none() {
                return Err(QuantizeError::NoDequantizer {
                    name: t.name.clone(),
                    dtype: t.dtype,
                });
            }
            if t.ne[0] % new.block_size() != 0 {
                return Err(QuantizeError::BlockMismatch {
                    name: t.name.clone(),
                    ne0: t.ne[0],
                    to: new,
                    block: new.block_size(),
                });
            }
        }
        w.add_tensor_info(t.name.clone(), new, &t.ne[..t.n_dims.clamp(1, 4)])?;
    }
    let n_threads = if opts.n_threads == 0 {
        crate::exec::default_threads()
    } else {
        opts.n_threads
    };
    let total: u64 = w.tensors().iter().map(|t| t.size as u64).sum();
    let mut report = QuantizeReport {
        n_tensors: plan.types.len(),
        ..QuantizeReport::default()
    };
    let mut done = 0u64;
    let mut index = 0usize;
    let tensors = input.tensors();
    w.write_to_path(out, |info, sink| {
        let weights = importance(order[index]);
        let src = &tensors[order[index]];
        let data = input.tensor_data(src);
        report.bytes_in += data.len() as u64;
        if info.dtype == src.dtype {
            sink.write_all(data)?;
        } else {
            report.n_converted += 1;
            convert_rows(src, data, info.dtype, weights, n_threads, sink)?;
        }
        done += info.size as u64;
        report.bytes_out += info.size as u64;
        progress(&QuantizeProgress {
            index,
            total: tensors.len(),
            name: &src.name,
            from: src.dtype,
            to: info.dtype,
            bytes_done: done,
            bytes_total: total,
        });
        index += 1;
        Ok(())
    })?;
    Ok(report)
}

/// Converts the rows of `data` (tensor `src`) to `to`, writing them to `sink` in pieces of
/// a few MB, rows split across `n_threads` threads; a row of matrix `k` (`ne2` index) is
/// encoded with `weights[k·ne0..(k + 1)·ne0]` when weights are given.
fn convert_rows(
    src: &TensorInfo,
    data: &[u8],
    to: DType,
    weights: Option<&[f32]>,
    n_threads: usize,
    sink: &mut dyn Write,
) -> std::io::Result<()> {
    let ne0 = src.ne[0];
    let rows = src.ne[1] * src.ne[2] * src.ne[3];
    // Rows of one matrix: the weights change with the `ne2` index (an expert).
    let rows_per_matrix = src.ne[1].max(1);
    let n_matrices = src.ne[2].max(1);
    let in_row = src.dtype.row_size(ne0);
    let out_row = to.row_size(ne0);
    let to_f32 = traits(src.dtype).to_f32.expect("checked by quantize_file");
    // `None` only for a type written with weights alone, which then has them (checked by
    // `quantize_file`).
    let from_f32 = traits(to).from_f32;
    let rows_per_piece = ((8 << 20) / out_row.max(1)).clamp(1, rows.max(1));
    let mut out = vec![0u8; rows_per_piece * out_row];
    let mut r0 = 0;
    while r0 < rows {
        let n = rows_per_piece.min(rows - r0);
        let piece = &mut out[..n * out_row];
        let input = &data[r0 * in_row..(r0 + n) * in_row];
        let per_thread = n.div_ceil(n_threads.max(1));
        std::thread::scope(|s| {
            for (t, (dst, srcb)) in piece
                .chunks_mut(per_thread * out_row)
                .zip(input.chunks(per_thread * in_row))
                .enumerate()
            {
                let first = r0 + t * per_thread;
                s.spawn(move || {
                    let mut tmp = vec![0f32; ne0];
                    for (k, (d, r)) in dst.chunks_mut(out_row).zip(srcb.chunks(in_row)).enumerate()
                    {
                        to_f32(r, &mut tmp);
                        match weights.filter(|_| to.is_quantized()) {
                            Some(w) => {
                                let m = (first + k) / rows_per_matrix % n_matrices;
                                let r = quantize_row_weighted_dyn(
                                    to,
                                    &tmp,
                                    &w[m * ne0..(m + 1) * ne0],
                                    d,
                                );
                                debug_assert!(r.is_ok(), "{r:?}");
                            }
                            None => {
                                if let Some(f) = from_f32 {
                                    f(&tmp, d)
                                }
                            }
                        }
                    }
                });
            }
        });
        sink.write_all(piece)?;
        r0 += n;
    }
    Ok(())
}
