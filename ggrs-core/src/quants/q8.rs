//! Q8_0 and Q8_1: 32 values as signed 8-bit codes and an f16 scale, `x = d · q`.
//!
//! - Q8_0 (34 bytes): `d` (f16), 32 × i8. The dot-product partner of Q4_0, Q5_0 and Q8_0.
//! - Q8_1 (36 bytes): `d`, `s` (f16, `s = d · Σ q`), 32 × i8. The partner of Q4_1 and Q5_1,
//!   whose minimum term needs the sum of the activations.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::{c_max, fp16, to_fp16, BlockQuant};
use crate::dtype::DType;
use crate::error::Result;

/// Values per Q8_0 block.
pub const QK8_0: usize = 32;
/// Values per Q8_1 block.
pub const QK8_1: usize = 32;

/// One Q8_0 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Codes.
    pub qs: [i8; QK8_0],
}

/// One Q8_1 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_1 {
    /// Scale.
    pub d: f16,
    /// `d · Σ qs` (rounded to f16).
    pub s: f16,
    /// Codes.
    pub qs: [i8; QK8_1],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);

/// `amax / 127` and its inverse (0 for an all-zero block), as ggml's Q8 reference quantizers.
#[inline(always)]
fn scale_for(x: &[f32]) -> (f32, f32) {
    let mut amax = 0.0f32;
    for &v in x {
        amax = c_max(amax, v.abs());
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    (d, id)
}

impl BlockQuant for BlockQ8_0 {
    const DTYPE: DType = DType::Q8_0;
    const BLOCK_SIZE: usize = QK8_0;
    type VecDot = BlockQ8_0;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        for (y, &q) in out[..QK8_0].iter_mut().zip(&self.qs) {
            *y = q as f32 * d;
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK8_0];
        let (d, id) = scale_for(x);
        let mut qs = [0i8; QK8_0];
        for (q, &v) in qs.iter_mut().zip(x) {
            // roundf: halves away from zero.
            *q = (v * id).round() as i8;
        }
        BlockQ8_0 { d: to_fp16(d), qs }
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8_0]) -> f32 {
        let mut sumf = 0.0f32;
        for (x, y) in a.iter().zip(b) {
            let mut sumi = 0i32;
            for j in 0..QK8_0 {
                sumi += x.qs[j] as i32 * y.qs[j] as i32;
            }
            sumf += sumi as f32 * (fp16(x.d) * fp16(y.d));
        }
        sumf
    }
}

impl BlockQuant for BlockQ8_1 {
    const DTYPE: DType = DType::Q8_1;
    const BLOCK_SIZE: usize = QK8_1;
    type VecDot = BlockQ8_1;

    fn dequantize(&self, out: &mut [f32]) {
        // ggml has no `dequantize_row_q8_1`; this is the value the format encodes.
        let d = fp16(self.d);
        for (y, &q) in out[..QK8_1].iter_mut().zip(&self.qs) {
            *y = q as f32 * d;
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK8_1];
        let (d, id) = scale_for(x);
        let mut qs = [0i8; QK8_1];
        let mut sum = 0i32;
        for j in 0..QK8_1 / 2 {
            qs[j] = (x[j] * id).round() as i8;
            qs[j + QK8_1 / 2] = (x[j + QK8_1 / 2] * id).round() as i8;
            sum += qs[j] as i32 + qs[j + QK8_1 / 2] as i32;
        }
        BlockQ8_1 {
            d: to_fp16(d),
            s: to_fp16(sum as f32 * d),
            qs,
        }
    }

    /// Q8_1 · Q8_1 (ggml has no such kernel: Q8_1 is only ever an activation type; this one
    /// exists so every block type can be a `mul_mat` weight).
    fn vec_dot(a: &[Self], b: &[BlockQ8_1]) -> f32 {
        let mut sumf = 0.0f32;
        for (x, y) in a.iter().zip(b) {
            let mut sumi = 0i32;
            for j in 0..QK8_1 {
                sumi += x.qs[j] as i32 * y.qs[j] as i32;
            }
            sumf += sumi as f32 * (fp16(x.d) * fp16(y.d));
        }
        sumf
    }
}

/// Decodes a row of Q8_0 blocks (ggml's `dequantize_row_q8_0`).
pub fn dequantize_row_q8_0(src: &[u8], dst: &mut [f32]) -> Result<()> {
    super::dequantize_row::<BlockQ8_0>(src, dst)
}

/// Encodes a row as Q8_0 blocks (ggml's `quantize_row_q8_0_ref`).
pub fn quantize_row_q8_0_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    super::quantize_row::<BlockQ8_0>(src, dst)
}

/// Scalar dot product of two Q8_0 rows of `n` values (ggml's `ggml_vec_dot_q8_0_q8_0_generic`).
pub fn vec_dot_q8_0_q8_0_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    super::vec_dot_scalar::<BlockQ8_0>(n, a, b)
}

/// Decodes a row of Q8_1 blocks (`d · q`; ggml has no such function).
pub fn dequantize_row_q8_1(src: &[u8], dst: &mut [f32]) -> Result<()> {
    super::dequantize_row::<BlockQ8_1>(src, dst)
}

/// Encodes a row as Q8_1 blocks (ggml's `quantize_row_q8_1_ref`).
pub fn quantize_row_q8_1_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    super::quantize_row::<BlockQ8_1>(src, dst)
}

/// Scalar dot product of two Q8_1 rows of `n` values.
pub fn vec_dot_q8_1_q8_1_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    super::vec_dot_scalar::<BlockQ8_1>(n, a, b)
}
