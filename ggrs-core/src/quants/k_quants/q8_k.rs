//! Q8_K: 256 values as signed 8-bit codes with an f32 scale, `x = d · q`, plus the sum of each
//! group of 16 codes. Never stored in files: it is what `mul_mat` converts activations to for
//! dot products with the k-quants (whose minimum terms use the group sums).
//!
//! Layout (292 bytes, 4-byte aligned): `d` (f32), `qs[256]` (i8), `bsums[16]` (i16).

use bytemuck::{Pod, Zeroable};

use super::{nearest_int, QK_K};
use crate::dtype::DType;
use crate::error::Result;
use crate::quants::BlockQuant;

/// One Q8_K block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8K {
    /// Scale.
    pub d: f32,
    /// Codes.
    pub qs: [i8; QK_K],
    /// `bsums[j] = Σ qs[16j .. 16j + 16]`.
    pub bsums: [i16; QK_K / 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

impl BlockQuant for BlockQ8K {
    const DTYPE: DType = DType::Q8K;
    const BLOCK_SIZE: usize = QK_K;
    type VecDot = BlockQ8K;

    fn dequantize(&self, out: &mut [f32]) {
        for (y, &q) in out[..QK_K].iter_mut().zip(&self.qs) {
            *y = self.d * q as f32;
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_K];
        let mut max = 0.0f32;
        let mut amax = 0.0f32;
        for &v in x {
            let ax = v.abs();
            if ax > amax {
                amax = ax;
                max = v;
            }
        }
        let mut b = BlockQ8K::zeroed();
        if amax == 0.0 {
            // ggml leaves `bsums` as they were here; they are zeroed, which is what they sum to.
            return b;
        }
        // The value of largest magnitude maps to −127 (ggml: "-127.f/max").
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (s, q) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *s = q.iter().map(|&v| v as i16).sum();
        }
        b.d = 1.0 / iscale;
        b
    }

    /// Q8_K · Q8_K (ggml has no such kernel: Q8_K is only ever an activation type; this one
    /// exists so every block type can be a `mul_mat` weight).
    fn vec_dot(a: &[Self], b: &[BlockQ8K]) -> f32 {
        let mut sumf = 0.0f32;
        for (x, y) in a.iter().zip(b) {
            let mut sumi = 0i32;
            for (&p, &q) in x.qs.iter().zip(&y.qs) {
                sumi += p as i32 * q as i32;
            }
            sumf += (x.d * y.d) * sumi as f32;
        }
        sumf
    }
}

/// Decodes a row of Q8_K blocks (ggml's `dequantize_row_q8_K`).
pub fn dequantize_row_q8_k(src: &[u8], dst: &mut [f32]) -> Result<()> {
    crate::quants::dequantize_row::<BlockQ8K>(src, dst)
}

/// Encodes a row as Q8_K blocks (ggml's `quantize_row_q8_K_ref`).
pub fn quantize_row_q8_k_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    crate::quants::quantize_row::<BlockQ8K>(src, dst)
}

/// Scalar dot product of two Q8_K rows of `n` values.
pub fn vec_dot_q8_k_q8_k_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    crate::quants::vec_dot_scalar::<BlockQ8K>(n, a, b)
}
