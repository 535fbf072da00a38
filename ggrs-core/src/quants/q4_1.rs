//! Q4_1: 32 values as 4-bit codes `q` in 0..=15, an f16 scale and an f16 minimum,
//! `x = d · q + m`.
//!
//! Layout (20 bytes): `d`, `m` (f16), then 16 bytes of nibbles as in Q4_0 (value `j` low,
//! value `j + 16` high).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::k_quants::{make_qkx2_quants, sigma_weights, sum_x2, Qkx2};
use super::q8::BlockQ8_1;
use super::{fp16, to_fp16, BlockQuant};
use crate::dtype::DType;
use crate::error::Result;

/// Values per Q4_1 block.
pub const QK4_1: usize = 32;

/// One Q4_1 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (the value of code 0).
    pub m: f16,
    /// Codes: value `j` in the low nibble of `qs[j]`, value `j + 16` in the high nibble.
    pub qs: [u8; QK4_1 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

impl BlockQuant for BlockQ4_1 {
    const DTYPE: DType = DType::Q4_1;
    const BLOCK_SIZE: usize = QK4_1;
    type VecDot = BlockQ8_1;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        let m = fp16(self.m);
        let (lo, hi) = out[..QK4_1].split_at_mut(QK4_1 / 2);
        for j in 0..QK4_1 / 2 {
            let x0 = (self.qs[j] & 0x0F) as i32;
            let x1 = (self.qs[j] >> 4) as i32;
            lo[j] = x0 as f32 * d + m;
            hi[j] = x1 as f32 * d + m;
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK4_1];
        let mut min = f32::MAX;
        let mut max = -f32::MAX;
        for &v in x {
            if v < min {
                min = v;
            }
            if v > max {
                max = v;
            }
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; QK4_1 / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let x0 = (x[j] - min) * id;
            let x1 = (x[j + QK4_1 / 2] - min) * id;
            // ggml: MIN(15, (int8_t)(x0 + 0.5f)).
            let xi0 = ((x0 + 0.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 0.5) as i8).min(15) as u8;
            *q = xi0 | (xi1 << 4);
        }
        BlockQ4_1 {
            d: to_fp16(d),
            m: to_fp16(min),
            qs,
        }
    }

    /// `quantize_row_q4_1_impl`: per block, `make_qkx3_quants` weighted by
    /// `qw·√(σ² + x²)` with `σ² = Σx²/n` over the whole row.
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        let sigma2 = sum_x2(x) / x.len() as f32;
        let params = Qkx2::imatrix(15);
        for (ib, b) in out.iter_mut().enumerate() {
            let r = QK4_1 * ib..QK4_1 * (ib + 1);
            let mut w = [0f32; QK4_1];
            sigma_weights(&qw[r.clone()], &x[r.clone()], sigma2, &mut w);
            let mut l = [0u8; QK4_1];
            let (d, the_min) = make_qkx2_quants(&params, &x[r], &w, &mut l);
            let mut qs = [0u8; QK4_1 / 2];
            for (j, q) in qs.iter_mut().enumerate() {
                *q = l[j] | (l[j + QK4_1 / 2] << 4);
            }
            *b = BlockQ4_1 {
                d: to_fp16(d),
                m: to_fp16(-the_min),
                qs,
            };
        }
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8_1]) -> f32 {
        let mut sumf = 0.0f32;
        for (x, y) in a.iter().zip(b) {
            let (mut sumi0, mut sumi1) = (0i32, 0i32);
            for j in 0..QK4_1 / 2 {
                let v0 = (x.qs[j] & 0x0F) as i32;
                let v1 = (x.qs[j] >> 4) as i32;
                sumi0 += v0 * y.qs[j] as i32;
                sumi1 += v1 * y.qs[j + QK4_1 / 2] as i32;
            }
            let sumi = sumi0 + sumi1;
            // Σ (d·q + m)·(dy·qy) = d·dy·Σ q·qy + m·(dy·Σ qy), and y.s holds dy·Σ qy.
            sumf += (fp16(x.d) * fp16(y.d)) * sumi as f32 + fp16(x.m) * fp16(y.s);
        }
        sumf
    }
}

/// Decodes a row of Q4_1 blocks (ggml's `dequantize_row_q4_1`).
pub fn dequantize_row_q4_1(src: &[u8], dst: &mut [f32]) -> Result<()> {
    super::dequantize_row::<BlockQ4_1>(src, dst)
}

/// Encodes a row as Q4_1 blocks (ggml's `quantize_row_q4_1_ref`).
pub fn quantize_row_q4_1_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    super::quantize_row::<BlockQ4_1>(src, dst)
}

/// Scalar dot product of a Q4_1 row with a Q8_1 row of `n` values
/// (ggml's `ggml_vec_dot_q4_1_q8_1_generic`).
pub fn vec_dot_q4_1_q8_1_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    super::vec_dot_scalar::<BlockQ4_1>(n, a, b)
}
