//! Q4_0: 32 values as 4-bit codes `q` in 0..=15 and one f16 scale, `x = d · (q − 8)`.
//!
//! Layout (18 bytes): `d` (f16), then 16 bytes where byte `j` holds value `j` in its low
//! nibble and value `j + 16` in its high nibble.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::k_quants::{make_qx_quants_rmse1, sigma_weights, sum_x2};
use super::q8::BlockQ8_0;
use super::{fp16, to_fp16, BlockQuant};
use crate::dtype::DType;
use crate::error::Result;

/// Values per Q4_0 block.
pub const QK4_0: usize = 32;

/// One Q4_0 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Codes: value `j` in the low nibble of `qs[j]`, value `j + 16` in the high nibble.
    pub qs: [u8; QK4_0 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

impl BlockQuant for BlockQ4_0 {
    const DTYPE: DType = DType::Q4_0;
    const BLOCK_SIZE: usize = QK4_0;
    type VecDot = BlockQ8_0;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        let (lo, hi) = out[..QK4_0].split_at_mut(QK4_0 / 2);
        for j in 0..QK4_0 / 2 {
            let x0 = (self.qs[j] & 0x0F) as i32 - 8;
            let x1 = (self.qs[j] >> 4) as i32 - 8;
            lo[j] = x0 as f32 * d;
            hi[j] = x1 as f32 * d;
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK4_0];
        // The value of largest magnitude, with its sign: it maps to code 0 (−8 · d).
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; QK4_0 / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            // ggml: MIN(15, (int8_t)(x*id + 8.5f)), a truncating conversion.
            let xi0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
            let xi1 = ((x[j + QK4_0 / 2] * id + 8.5) as i8).min(15) as u8;
            *q = xi0 | (xi1 << 4);
        }
        BlockQ4_0 { d: to_fp16(d), qs }
    }

    /// `quantize_row_q4_0_impl`: per block, `make_qx_quants` weighted by `qw·√(σ² + x²)`
    /// with `σ² = Σx²/n` over the whole row.
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        let sigma2 = sum_x2(x) / x.len() as f32;
        for (ib, b) in out.iter_mut().enumerate() {
            let r = QK4_0 * ib..QK4_0 * (ib + 1);
            let mut w = [0f32; QK4_0];
            sigma_weights(&qw[r.clone()], &x[r.clone()], sigma2, &mut w);
            let mut l = [0i8; QK4_0];
            let d = make_qx_quants_rmse1(8, &x[r], &mut l, Some(&w));
            let mut qs = [0u8; QK4_0 / 2];
            for (j, q) in qs.iter_mut().enumerate() {
                *q = l[j] as u8 | ((l[j + QK4_0 / 2] as u8) << 4);
            }
            *b = BlockQ4_0 { d: to_fp16(d), qs };
        }
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8_0]) -> f32 {
        let mut sumf = 0.0f32;
        for (x, y) in a.iter().zip(b) {
            let (mut sumi0, mut sumi1) = (0i32, 0i32);
            for j in 0..QK4_0 / 2 {
                let v0 = (x.qs[j] & 0x0F) as i32 - 8;
                let v1 = (x.qs[j] >> 4) as i32 - 8;
                sumi0 += v0 * y.qs[j] as i32;
                sumi1 += v1 * y.qs[j + QK4_0 / 2] as i32;
            }
            let sumi = sumi0 + sumi1;
            sumf += sumi as f32 * fp16(x.d) * fp16(y.d);
        }
        sumf
    }
}

/// Decodes a row of Q4_0 blocks (ggml's `dequantize_row_q4_0`).
pub fn dequantize_row_q4_0(src: &[u8], dst: &mut [f32]) -> Result<()> {
    super::dequantize_row::<BlockQ4_0>(src, dst)
}

/// Encodes a row as Q4_0 blocks (ggml's `quantize_row_q4_0_ref`).
pub fn quantize_row_q4_0_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    super::quantize_row::<BlockQ4_0>(src, dst)
}

/// Scalar dot product of a Q4_0 row with a Q8_0 row of `n` values
/// (ggml's `ggml_vec_dot_q4_0_q8_0_generic`).
pub fn vec_dot_q4_0_q8_0_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    super::vec_dot_scalar::<BlockQ4_0>(n, a, b)
}
