//! Per-type traits: how a row of each type converts to and from f32, and which type its
//! dot products pair with (ggml's `type_traits`).
//!
//! The functions here work on byte slices and are the reference implementation that the
//! kernels are tested against.

use half::{bf16, f16};

use crate::dtype::DType;
use crate::error::{Error, Result};

pub use crate::quants::{FromF32Fn, ToF32Fn};

/// What the library knows about one type.
#[derive(Clone, Copy)]
pub struct TypeTraits {
    /// The type.
    pub dtype: DType,
    /// Row → f32, if the type can be read as values.
    pub to_f32: Option<ToF32Fn>,
    /// f32 → row, if the type can be written from values.
    pub from_f32: Option<FromF32Fn>,
    /// The type `mul_mat` converts activations to before dot products with this type.
    pub vec_dot_type: DType,
}

impl std::fmt::Debug for TypeTraits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypeTraits")
            .field("dtype", &self.dtype)
            .field("to_f32", &self.to_f32.is_some())
            .field("from_f32", &self.from_f32.is_some())
            .field("vec_dot_type", &self.vec_dot_type)
            .finish()
    }
}

fn f32_to_f32(src: &[u8], dst: &mut [f32]) {
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

fn f32_from_f32(src: &[f32], dst: &mut [u8]) {
    for (s, c) in src.iter().zip(dst.chunks_exact_mut(4)) {
        c.copy_from_slice(&s.to_le_bytes());
    }
}

fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
    match bytemuck::try_cast_slice::<u8, f16>(src) {
        Ok(h) => half::slice::HalfFloatSliceExt::convert_to_f32_slice(h, dst),
        Err(_) => {
            for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
    }
}

fn f16_from_f32(src: &[f32], dst: &mut [u8]) {
    match bytemuck::try_cast_slice_mut::<u8, f16>(dst) {
        Ok(h) => half::slice::HalfFloatSliceExt::convert_from_f32_slice(h, src),
        Err(_) => {
            for (s, c) in src.iter().zip(dst.chunks_exact_mut(2)) {
                c.copy_from_slice(&f16::from_f32(*s).to_le_bytes());
            }
        }
    }
}

fn bf16_to_f32(src: &[u8], dst: &mut [f32]) {
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = bf16::from_le_bytes([c[0], c[1]]).to_f32();
    }
}

fn bf16_from_f32(src: &[f32], dst: &mut [u8]) {
    for (s, c) in src.iter().zip(dst.chunks_exact_mut(2)) {
        c.copy_from_slice(&bf16::from_f32(*s).to_le_bytes());
    }
}

fn i32_to_f32(src: &[u8], dst: &mut [f32]) {
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32;
    }
}

/// The traits of `dtype`.
pub fn traits(dtype: DType) -> TypeTraits {
    let (to_f32, from_f32, vec_dot_type): (Option<ToF32Fn>, Option<FromF32Fn>, DType) = match dtype
    {
        DType::F32 => (Some(f32_to_f32), Some(f32_from_f32), DType::F32),
        DType::F16 => (Some(f16_to_f32), Some(f16_from_f32), DType::F16),
        DType::BF16 => (Some(bf16_to_f32), Some(bf16_from_f32), DType::BF16),
        DType::I32 => (Some(i32_to_f32), None, DType::I32),
        other => match crate::quants::traits(other) {
            Some(q) => (q.to_f32, q.from_f32, q.vec_dot_type),
            None => (None, None, other),
        },
    };
    TypeTraits {
        dtype,
        to_f32,
        from_f32,
        vec_dot_type,
    }
}

/// Byte alignment the kernels need for data of `dtype`.
pub fn data_align(dtype: DType) -> usize {
    match dtype {
        DType::F32 | DType::I32 => 4,
        DType::I64 | DType::F64 => 8,
        DType::I8 => 1,
        // Every other type (F16, BF16, I16 and the blocks, which start with an f16) reads
        // 16-bit fields.
        _ => 2,
    }
}

/// Converts `values` (rows of `ne0`) to `dtype` into `dst`.
pub(crate) fn from_f32_rows(
    dtype: DType,
    values: &[f32],
    dst: &mut [u8],
    ne0: usize,
) -> Result<()> {
    let f = traits(dtype).from_f32.ok_or(Error::UnsupportedType {
        op: "set_f32",
        dtype,
        detail: "no conversion from f32 to this type".into(),
    })?;
    let row_bytes = dtype.row_size(ne0);
    for (src, d) in values.chunks(ne0).zip(dst.chunks_mut(row_bytes)) {
        f(src, d);
    }
    Ok(())
}

/// Reads the values of a tensor of `dtype`, shape `ne` and strides `nb` from `bytes` (which
/// starts at its first byte) into a Vec in logical order.
pub(crate) fn gather_f32(
    dtype: DType,
    ne: &[usize; 4],
    nb: &[usize; 4],
    bytes: &[u8],
) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    gather_f32_into(dtype, ne, nb, bytes, &mut out)?;
    Ok(out)
}

/// The values of a tensor of `dtype`, shape `ne` and strides `nb` whose data starts at
/// `bytes`, read in place: `Some` for dense little-endian F32 data aligned for f32.
pub(crate) fn dense_f32<'a>(
    dtype: DType,
    ne: &[usize; 4],
    nb: &[usize; 4],
    bytes: &'a [u8],
) -> Option<&'a [f32]> {
    let n: usize = ne.iter().product();
    let dense =
        nb[0] == 4 && nb[1] == 4 * ne[0] && nb[2] == nb[1] * ne[1] && nb[3] == nb[2] * ne[2];
    if cfg!(target_endian = "big") || dtype != DType::F32 || !dense || bytes.len() < 4 * n {
        return None;
    }
    bytemuck::try_cast_slice::<u8, f32>(&bytes[..4 * n]).ok()
}

/// As [`gather_f32`], appending to `out` (whose spare capacity is reused).
pub(crate) fn gather_f32_into(
    dtype: DType,
    ne: &[usize; 4],
    nb: &[usize; 4],
    bytes: &[u8],
    out: &mut Vec<f32>,
) -> Result<()> {
    let f = traits(dtype).to_f32.ok_or(Error::UnsupportedType {
        op: "to_f32_vec",
        dtype,
        detail: "no conversion from this type to f32".into(),
    })?;
    let n: usize = ne.iter().product();
    if let Some(v) = dense_f32(dtype, ne, nb, bytes) {
        // Dense little-endian f32 (e.g. logits): one copy.
        out.extend_from_slice(v);
        return Ok(());
    }
    let start = out.len();
    out.resize(start + n, 0.0);
    let out = &mut out[start..];
    if n == 0 {
        return Ok(());
    }
    let row_dense = dtype.is_quantized() || nb[0] == dtype.type_size();
    let row_bytes = dtype.row_size(ne[0]);
    let mut k = 0;
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                let o = i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
                let dst = &mut out[k..k + ne[0]];
                if row_dense {
                    f(&bytes[o..o + row_bytes], dst);
                } else {
                    let ts = dtype.type_size();
                    for (i0, d) in dst.iter_mut().enumerate() {
                        let e = o + i0 * nb[0];
                        let mut one = [0f32];
                        f(&bytes[e..e + ts], &mut one);
                        *d = one[0];
                    }
                }
                k += ne[0];
            }
        }
    }
    Ok(())
}
