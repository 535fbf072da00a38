//! The tensor data: which type each tensor is written as, and the streaming writer that
//! reorders a tensor's rows and converts their type in pieces of a few MB.

use std::io::Write;

use ggrs_core::types::traits;
use ggrs_core::DType;

use crate::layout::{Planned, Transform};
use crate::options::OutType;

/// The type tensor `p` is written as: F32 for 1-D tensors and those planned as F32, else
/// the output type, or F16 when its rows are not whole blocks of a block type.
pub(crate) fn out_dtype(p: &Planned, outtype: OutType) -> DType {
    if p.shape.len() < 2 || p.keep_f32 {
        return DType::F32;
    }
    let to = outtype.dtype();
    let ne0 = p.shape.last().copied().unwrap_or(0);
    if ne0 % to.block_size() != 0 {
        DType::F16
    } else {
        to
    }
}

/// The checkpoint row that output row `r` comes from.
fn source_row(r: usize, rows: usize, transform: Transform) -> usize {
    match transform {
        Transform::None | Transform::AddOne => r,
        Transform::RopePermute { n_head } => {
            let d = rows / n_head;
            let (h, w) = (r / d, r % d);
            h * d + (w % 2) * (d / 2) + w / 2
        }
    }
}

/// Writes one tensor: rows of `src` (type `from`, checkpoint shape `shape`), reordered by
/// `transform` and converted to `to`, in pieces of a few MB spread over `n_threads`.
pub(crate) fn write_tensor(
    src: &[u8],
    from: DType,
    shape: &[usize],
    transform: Transform,
    to: DType,
    n_threads: usize,
    sink: &mut dyn Write,
) -> std::io::Result<()> {
    let numel: usize = shape.iter().product();
    // A 1-D tensor under a row permutation (a Q/K bias) is a column of one-value rows.
    let ne0 = match (shape.len(), transform) {
        (1, Transform::RopePermute { .. }) => 1,
        _ => shape.last().copied().unwrap_or(1),
    };
    let rows = numel.checked_div(ne0).unwrap_or(0);
    if from == to && transform == Transform::None {
        return sink.write_all(src);
    }
    if let Transform::RopePermute { n_head } = transform {
        if n_head == 0 || rows % (2 * n_head) != 0 {
            return Err(std::io::Error::other(format!(
                "{rows} rows do not split into {n_head} heads of an even number of rows"
            )));
        }
    }
    let in_row = from.row_size(ne0);
    let out_row = to.row_size(ne0);
    let (Some(to_f32), Some(from_f32)) = (traits(from).to_f32, traits(to).from_f32) else {
        return Err(std::io::Error::other(format!(
            "no conversion from {} to {}",
            from.name(),
            to.name()
        )));
    };
    let rows_per_piece = ((4 << 20) / out_row.max(1)).clamp(1, rows.max(1));
    let mut out = vec![0u8; rows_per_piece * out_row];
    let mut r0 = 0;
    while r0 < rows {
        let n = rows_per_piece.min(rows - r0);
        let piece = &mut out[..n * out_row];
        let per_thread = n.div_ceil(n_threads.max(1));
        let fill = |first: usize, dst: &mut [u8]| {
            let mut tmp = vec![0f32; ne0];
            for (k, d) in dst.chunks_mut(out_row).enumerate() {
                let s = source_row(first + k, rows, transform);
                let row = &src[s * in_row..(s + 1) * in_row];
                if from == to && transform != Transform::AddOne {
                    d.copy_from_slice(row);
                } else {
                    to_f32(row, &mut tmp);
                    if transform == Transform::AddOne {
                        tmp.iter_mut().for_each(|x| *x += 1.0);
                    }
                    from_f32(&tmp, d);
                }
            }
        };
        if n_threads <= 1 || n * ne0 < (1 << 16) {
            fill(r0, piece);
        } else {
            std::thread::scope(|s| {
                for (i, dst) in piece.chunks_mut(per_thread * out_row).enumerate() {
                    let fill = &fill;
                    s.spawn(move || fill(r0 + i * per_thread, dst));
                }
            });
        }
        sink.write_all(piece)?;
        r0 += n;
    }
    Ok(())
}
