//! Q5_0 and Q5_1: 32 values as 5-bit codes, the low 4 bits packed as in Q4_0/Q4_1 and the
//! fifth bits in a 32-bit little-endian mask `qh` (bit `j` belongs to value `j`).
//!
//! - Q5_0 (22 bytes): `d` (f16), `qh`, 16 bytes of nibbles; `x = d · (q − 16)`.
//! - Q5_1 (24 bytes): `d`, `m` (f16), `qh`, 16 bytes of nibbles; `x = d · q + m`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::k_quants::{make_qkx2_quants, make_qx_quants_rmse1, sigma_weights, sum_x2, Qkx2};
use super::q8::{BlockQ8_0, BlockQ8_1};
use super::{fp16, to_fp16, BlockQuant};
use crate::dtype::DType;
use crate::error::Result;

/// Values per Q5_0 / Q5_1 block.
pub const QK5: usize = 32;

/// One Q5_0 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: f16,
    /// Fifth bits, a little-endian u32: bit `j` is bit 4 of value `j`.
    pub qh: [u8; 4],
    /// Low 4 bits: value `j` in the low nibble of `qs[j]`, value `j + 16` in the high nibble.
    pub qs: [u8; QK5 / 2],
}

/// One Q5_1 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (the value of code 0).
    pub m: f16,
    /// Fifth bits, a little-endian u32: bit `j` is bit 4 of value `j`.
    pub qh: [u8; 4],
    /// Low 4 bits: value `j` in the low nibble of `qs[j]`, value `j + 16` in the high nibble.
    pub qs: [u8; QK5 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

/// The 5-bit codes of values `j` and `j + 16` (`qs` nibbles plus `qh` bits).
#[inline(always)]
fn codes(qs: &[u8; QK5 / 2], qh: u32, j: usize) -> (i32, i32) {
    let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
    let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
    (((qs[j] & 0x0F) | xh_0) as i32, ((qs[j] >> 4) | xh_1) as i32)
}

/// Packs two 5-bit codes for positions `j` and `j + 16`.
#[inline(always)]
fn pack(qs: &mut [u8; QK5 / 2], qh: &mut u32, j: usize, xi0: u8, xi1: u8) {
    qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
    *qh |= (((xi0 & 0x10) >> 4) as u32) << j;
    *qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK5 / 2);
}

impl BlockQuant for BlockQ5_0 {
    const DTYPE: DType = DType::Q5_0;
    const BLOCK_SIZE: usize = QK5;
    type VecDot = BlockQ8_0;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        let qh = u32::from_le_bytes(self.qh);
        let (lo, hi) = out[..QK5].split_at_mut(QK5 / 2);
        for j in 0..QK5 / 2 {
            let (c0, c1) = codes(&self.qs, qh, j);
            lo[j] = (c0 - 16) as f32 * d;
            hi[j] = (c1 - 16) as f32 * d;
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK5];
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; QK5 / 2];
        let mut qh = 0u32;
        for j in 0..QK5 / 2 {
            // ggml: MIN(31, (int8_t)(x*id + 16.5f)).
            let xi0 = ((x[j] * id + 16.5) as i8).min(31) as u8;
            let xi1 = ((x[j + QK5 / 2] * id + 16.5) as i8).min(31) as u8;
            pack(&mut qs, &mut qh, j, xi0, xi1);
        }
        BlockQ5_0 {
            d: to_fp16(d),
            qh: qh.to_le_bytes(),
            qs,
        }
    }

    /// `quantize_row_q5_0_impl`: per block, `make_qx_quants` weighted by `qw·√(σ² + x²)`
    /// with `σ² = Σx²/n` over the whole row.
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        let sigma2 = sum_x2(x) / x.len() as f32;
        for (ib, b) in out.iter_mut().enumerate() {
            let r = QK5 * ib..QK5 * (ib + 1);
            let mut w = [0f32; QK5];
            sigma_weights(&qw[r.clone()], &x[r.clone()], sigma2, &mut w);
            let mut l = [0i8; QK5];
            let d = make_qx_quants_rmse1(16, &x[r], &mut l, Some(&w));
            let mut qs = [0u8; QK5 / 2];
            let mut qh = 0u32;
            for j in 0..QK5 / 2 {
                pack(&mut qs, &mut qh, j, l[j] as u8, l[j + QK5 / 2] as u8);
            }
            *b = BlockQ5_0 {
                d: to_fp16(d),
                qh: qh.to_le_bytes(),
                qs,
            };
        }
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8_0]) -> f32 {
        let mut sumf = 0.0f32;
        for (x, y) in a.iter().zip(b) {
            let qh = u32::from_le_bytes(x.qh);
            let (mut sumi0, mut sumi1) = (0i32, 0i32);
            for j in 0..QK5 / 2 {
                let (c0, c1) = codes(&x.qs, qh, j);
                sumi0 += (c0 - 16) * y.qs[j] as i32;
                sumi1 += (c1 - 16) * y.qs[j + QK5 / 2] as i32;
            }
            let sumi = sumi0 + sumi1;
            sumf += (fp16(x.d) * fp16(y.d)) * sumi as f32;
        }
        sumf
    }
}

impl BlockQuant for BlockQ5_1 {
    const DTYPE: DType = DType::Q5_1;
    const BLOCK_SIZE: usize = QK5;
    type VecDot = BlockQ8_1;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        let m = fp16(self.m);
        let qh = u32::from_le_bytes(self.qh);
        let (lo, hi) = out[..QK5].split_at_mut(QK5 / 2);
        for j in 0..QK5 / 2 {
            let (c0, c1) = codes(&self.qs, qh, j);
            lo[j] = c0 as f32 * d + m;
            hi[j] = c1 as f32 * d + m;
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK5];
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
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; QK5 / 2];
        let mut qh = 0u32;
        for j in 0..QK5 / 2 {
            // ggml: (uint8_t)(x0 + 0.5f), no clamp (the code is at most 31 by construction;
            // `pack` keeps 5 bits).
            let xi0 = ((x[j] - min) * id + 0.5) as u8;
            let xi1 = ((x[j + QK5 / 2] - min) * id + 0.5) as u8;
            pack(&mut qs, &mut qh, j, xi0, xi1);
        }
        BlockQ5_1 {
            d: to_fp16(d),
            m: to_fp16(min),
            qh: qh.to_le_bytes(),
            qs,
        }
    }

    /// `quantize_row_q5_1_impl`: per block, `make_qkx3_quants` weighted by
    /// `qw·√(σ² + x²)` with `σ² = Σx²/n` over the whole row.
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        let sigma2 = sum_x2(x) / x.len() as f32;
        let params = Qkx2::imatrix(31);
        for (ib, b) in out.iter_mut().enumerate() {
            let r = QK5 * ib..QK5 * (ib + 1);
            let mut w = [0f32; QK5];
            sigma_weights(&qw[r.clone()], &x[r.clone()], sigma2, &mut w);
            let mut l = [0u8; QK5];
            let (d, the_min) = make_qkx2_quants(&params, &x[r], &w, &mut l);
            let mut qs = [0u8; QK5 / 2];
            let mut qh = 0u32;
            for j in 0..QK5 / 2 {
                pack(&mut qs, &mut qh, j, l[j], l[j + QK5 / 2]);
            }
            *b = BlockQ5_1 {
                d: to_fp16(d),
                m: to_fp16(-the_min),
                qh: qh.to_le_bytes(),
                qs,
            };
        }
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8_1]) -> f32 {
        let mut sumf = 0.0f32;
        for (x, y) in a.iter().zip(b) {
            let qh = u32::from_le_bytes(x.qh);
            let (mut sumi0, mut sumi1) = (0i32, 0i32);
            for j in 0..QK5 / 2 {
                let (c0, c1) = codes(&x.qs, qh, j);
                sumi0 += c0 * y.qs[j] as i32;
                sumi1 += c1 * y.qs[j + QK5 / 2] as i32;
            }
            let sumi = sumi0 + sumi1;
            sumf += (fp16(x.d) * fp16(y.d)) * sumi as f32 + fp16(x.m) * fp16(y.s);
        }
        sumf
    }
}

/// Decodes a row of Q5_0 blocks (ggml's `dequantize_row_q5_0`).
pub fn dequantize_row_q5_0(src: &[u8], dst: &mut [f32]) -> Result<()> {
    super::dequantize_row::<BlockQ5_0>(src, dst)
}

/// Encodes a row as Q5_0 blocks (ggml's `quantize_row_q5_0_ref`).
pub fn quantize_row_q5_0_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    super::quantize_row::<BlockQ5_0>(src, dst)
}

/// Scalar dot product of a Q5_0 row with a Q8_0 row of `n` values
/// (ggml's `ggml_vec_dot_q5_0_q8_0_generic`).
pub fn vec_dot_q5_0_q8_0_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    super::vec_dot_scalar::<BlockQ5_0>(n, a, b)
}

/// Decodes a row of Q5_1 blocks (ggml's `dequantize_row_q5_1`).
pub fn dequantize_row_q5_1(src: &[u8], dst: &mut [f32]) -> Result<()> {
    super::dequantize_row::<BlockQ5_1>(src, dst)
}

/// Encodes a row as Q5_1 blocks (ggml's `quantize_row_q5_1_ref`).
pub fn quantize_row_q5_1_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    super::quantize_row::<BlockQ5_1>(src, dst)
}

/// Scalar dot product of a Q5_1 row with a Q8_1 row of `n` values
/// (ggml's `ggml_vec_dot_q5_1_q8_1_generic`).
pub fn vec_dot_q5_1_q8_1_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    super::vec_dot_scalar::<BlockQ5_1>(n, a, b)
}
