//! Converting a GGUF file's tensors to another type (what `ggrs quantize` does).
//!
//! Every 2-D (or higher) tensor whose name ends in `weight` is converted to the target
//! type; everything else (norms, biases: 1-D tensors) is copied unchanged, as llama.cpp's
//! quantize tool keeps them. Unless [`QuantizeOptions::pure`] is set, the output projection
//! follows llama.cpp's default recipe (see [`target_type_for`]): it gets Q6_K (Q8_0 when its
//! rows do not divide into 256-value blocks) for every block-quantized target but Q8_0, and
//! tensors whose rows do not divide into the target's blocks fall back to a type whose blocks
//! fit, as llama.cpp does. A row is converted by decoding it to f32 (exact for F16 and
//! BF16, the type's dequantizer for block types) and encoding that with the target type's
//! reference quantizer, which is how llama.cpp's `--pure` quantization and its F16
//! conversion (`--allow-requantize`) proceed, so the result is bit-identical to theirs.
//! Metadata is copied, with `general.file_type` and `general.quantization_version` set.

use std::io::Write;
use std::path::Path;

use crate::dtype::DType;
use crate::gguf::{GgufError, GgufFile, GgufWriter, TensorInfo, Value};
use crate::types::traits;

/// What to convert to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantizeOptions {
    /// Type of the converted weights.
    pub target: DType,
    /// Convert tensors that are block-quantized already (llama.cpp refuses without it).
    pub allow_requantize: bool,
    /// Threads converting rows (0: one per physical core).
    pub n_threads: usize,
    /// Give every 2-D weight the target type (llama.cpp's `--pure`); when false, the output
    /// projection keeps more bits as llama.cpp's default recipe does.
    pub pure: bool,
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
    /// Tensors converted to the target type.
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

/// llama.cpp's `general.file_type` value for a file whose weights are mostly `t`.
pub fn file_type_id(t: DType) -> Option<u32> {
    Some(match t {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q4_0 => 2,
        DType::Q4_1 => 3,
        DType::Q8_0 => 7,
        DType::Q5_0 => 8,
        DType::Q5_1 => 9,
        DType::Q2K => 10,
        DType::Q3K => 12,
        DType::Q4K => 15,
        DType::Q5K => 17,
        DType::Q6K => 18,
        DType::IQ4NL => 25,
        DType::IQ4XS => 30,
        DType::BF16 => 32,
        _ => return None,
    })
}

/// The type tensor `info` gets: the target for weights of two or more axes, else its own
/// (the `--pure` rule, without shape fallbacks).
pub fn target_type(info: &TensorInfo, target: DType) -> DType {
    let n_dims = (1..4).rev().find(|&i| info.ne[i] > 1).map_or(1, |i| i + 1);
    if info.name.ends_with("weight") && n_dims >= 2 {
        target
    } else {
        info.dtype
    }
}

/// The type tensor `info` gets in a file converted to `target`, as llama.cpp's quantize tool
/// chooses it for a legacy or k-quant target:
/// - 1-D tensors and tensors not named `*weight` keep their type;
/// - unless `pure`, the output projection (`output.weight`, or `token_embd.weight` when the
///   file has no `output.weight` and so ties them) gets Q6_K, or Q8_0 when its rows are not a
///   multiple of 256, for every block-quantized target other than Q8_0;
/// - a block type whose blocks do not divide the rows falls back: Q6_K → Q8_0, Q5_K → Q5_1,
///   Q4_K → Q5_0, Q3_K/Q2_K → Q4_0, IQ4_XS → IQ4_NL; if that still does not fit, F16.
pub fn target_type_for(info: &TensorInfo, target: DType, pure: bool, has_output: bool) -> DType {
    let mut t = target_type(info, target);
    if t == info.dtype || !t.is_quantized() {
        return t;
    }
    let is_output =
        info.name == "output.weight" || (!has_output && info.name == "token_embd.weight");
    if !pure && is_output && t != DType::Q8_0 {
        t = if info.ne[0].is_multiple_of(DType::Q6K.block_size()) {
            DType::Q6K
        } else {
            DType::Q8_0
        };
    }
    if !info.ne[0].is_multiple_of(t.block_size()) {
        let fallback = match t {
            DType::Q6K => Some(DType::Q8_0),
            DType::Q5K => Some(DType::Q5_1),
            DType::Q4K => Some(DType::Q5_0),
            DType::Q3K | DType::Q2K => Some(DType::Q4_0),
            DType::IQ4XS => Some(DType::IQ4NL),
            _ => None,
        };
        // Without a fallback the type stays, and `quantize_file` reports the mismatch.
        if let Some(f) = fallback {
            t = if info.ne[0].is_multiple_of(f.block_size()) {
                f
            } else {
                DType::F16
            };
        }
    }
    t
}

/// Writes `input` to `out` with its weights converted as the [module docs](self) say,
/// calling `progress` after each tensor.
pub fn quantize_file(
    input: &GgufFile,
    out: &Path,
    opts: &QuantizeOptions,
    mut progress: impl FnMut(&QuantizeProgress),
) -> Result<QuantizeReport, QuantizeError> {
    let to = opts.target;
    if traits(to).from_f32.is_none() {
        return Err(QuantizeError::NoQuantizer(to));
    }
    let mut w = GgufWriter::new();
    w.protect(input.source().cloned());
    w.set_alignment(input.alignment())?;
    for (k, v) in input.metadata() {
        if k == "general.alignment" {
            continue;
        }
        w.add_kv(k.clone(), v.clone())?;
    }
    if let Some(ft) = file_type_id(to) {
        w.set_kv("general.file_type", Value::U32(ft))?;
    }
    w.set_kv("general.quantization_version", Value::U32(2))?;
    let mut plan = Vec::with_capacity(input.tensors().len());
    let has_output = input.tensors().iter().any(|t| t.name == "output.weight");
    for t in input.tensors() {
        let new = target_type_for(t, to, opts.pure, has_output);
        if new != t.dtype {
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
        plan.push(new);
    }
    let n_threads = if opts.n_threads == 0 {
        crate::exec::default_threads()
    } else {
        opts.n_threads
    };
    let total: u64 = w.tensors().iter().map(|t| t.size as u64).sum();
    let mut report = QuantizeReport {
        n_tensors: plan.len(),
        ..QuantizeReport::default()
    };
    let mut done = 0u64;
    let mut index = 0usize;
    let tensors = input.tensors();
    w.write_to_path(out, |info, sink| {
        let src = &tensors[index];
        let data = input.tensor_data(src);
        report.bytes_in += data.len() as u64;
        if info.dtype == src.dtype {
            sink.write_all(data)?;
        } else {
            report.n_converted += 1;
            convert_rows(src, data, info.dtype, n_threads, sink)?;
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
/// a few MB, rows split across `n_threads` threads.
fn convert_rows(
    src: &TensorInfo,
    data: &[u8],
    to: DType,
    n_threads: usize,
    sink: &mut dyn Write,
) -> std::io::Result<()> {
    let ne0 = src.ne[0];
    let rows = src.ne[1] * src.ne[2] * src.ne[3];
    let in_row = src.dtype.row_size(ne0);
    let out_row = to.row_size(ne0);
    let to_f32 = traits(src.dtype).to_f32.expect("checked by quantize_file");
    let from_f32 = traits(to).from_f32.expect("checked by quantize_file");
    let rows_per_piece = ((8 << 20) / out_row.max(1)).clamp(1, rows.max(1));
    let mut out = vec![0u8; rows_per_piece * out_row];
    let mut r0 = 0;
    while r0 < rows {
        let n = rows_per_piece.min(rows - r0);
        let piece = &mut out[..n * out_row];
        let input = &data[r0 * in_row..(r0 + n) * in_row];
        let per_thread = n.div_ceil(n_threads.max(1));
        std::thread::scope(|s| {
            for (dst, srcb) in piece
                .chunks_mut(per_thread * out_row)
                .zip(input.chunks(per_thread * in_row))
            {
                s.spawn(move || {
                    let mut tmp = vec![0f32; ne0];
                    for (d, r) in dst.chunks_mut(out_row).zip(srcb.chunks(in_row)) {
                        to_f32(r, &mut tmp);
                        from_f32(&tmp, d);
                    }
                });
            }
        });
        sink.write_all(piece)?;
        r0 += n;
    }
    Ok(())
}
