//! Q3_K: 256 values in 16 sub-blocks of 16, `x = d·(sc − 32)·(q − 4)` with 3-bit codes `q`
//! and a 6-bit scale `sc` per sub-block.
//!
//! Layout (110 bytes): `hmask[32]` (bit 2 of each code), `qs[64]` (bits 0–1), `scales[12]`
//! (sixteen 6-bit scales), `d` (f16). Value `v = 128·h + 32·s + l` (h in 0..2, s in 0..4,
//! l in 0..32) has its low bits in bits `2s..2s+2` of `qs[32·h + l]` and its high bit in bit
//! `4h + s` of `hmask[l]`; it belongs to sub-block `v / 16`. Scale `j` has its low 4 bits in
//! the low nibble of `scales[j]` (j < 8) or the high nibble of `scales[j − 8]`, and its top 2
//! bits at bit `2·(j / 4)` of `scales[8 + j % 4]`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_k::BlockQ8K;
use super::{
    lane_sums, make_q3_quants_rmse, make_qx_quants_rmse1, nearest_int, q3_k_scale, sigma_weights,
    sum_x2, K_SCALE_SIZE, QK_K,
};
use crate::dtype::DType;
use crate::error::Result;
use crate::quants::{fp16, to_fp16, BlockQuant};

/// One Q3_K super-block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ3K {
    /// High bit of each code (set: code ≥ 4).
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of each code, four per byte.
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit sub-block scales, stored with +32.
    pub scales: [u8; K_SCALE_SIZE],
    /// Super-block scale.
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

impl BlockQ3K {
    /// The signed codes (−4..=3) of the super-block, in value order.
    pub(crate) fn codes(&self) -> [i8; QK_K] {
        let mut a = [0i8; QK_K];
        for half in 0..QK_K / 128 {
            let q = &self.qs[32 * half..32 * half + 32];
            for s in 0..4 {
                let m = 1u8 << (4 * half + s);
                for l in 0..32 {
                    let low = ((q[l] >> (2 * s)) & 3) as i8;
                    let high_clear = self.hmask[l] & m == 0;
                    a[128 * half + 32 * s + l] = low - if high_clear { 4 } else { 0 };
                }
            }
        }
        a
    }
}

impl BlockQuant for BlockQ3K {
    const DTYPE: DType = DType::Q3K;
    const BLOCK_SIZE: usize = QK_K;
    type VecDot = BlockQ8K;

    fn dequantize(&self, out: &mut [f32]) {
        let d_all = fp16(self.d);
        let out = &mut out[..QK_K];
        let a = self.codes();
        for (j, (y, q)) in out.chunks_exact_mut(16).zip(a.chunks_exact(16)).enumerate() {
            let dl = d_all * q3_k_scale(&self.scales, j) as f32;
            for (v, &c) in y.iter_mut().zip(q) {
                *v = dl * c as f32;
            }
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_K];
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; QK_K / 16];
        let mut max_scale = 0.0f32;
        let mut amax = 0.0f32;
        for j in 0..QK_K / 16 {
            scales[j] =
                make_q3_quants_rmse(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }

        let mut b = BlockQ3K::zeroed();
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &scale) in scales.iter().enumerate() {
                // ggml keeps this in an int8_t: truncate, clamp, offset.
                let ls = (nearest_int(iscale * scale) as i8 as i32).clamp(-32, 31) + 32;
                pack_scale(&mut b.scales, j, ls as u8);
            }
            b.d = to_fp16(1.0 / iscale);
        } else {
            b.d = to_fp16(0.0);
        }

        finish(x, b, l)
    }

    /// `quantize_row_q3_K_impl`: each 16-value search (`make_qx_quants`) weighted by
    /// `qw·√(σ² + x²)` (`σ² = 2·Σx²/256`), then the sixteen scales quantized to 6 bits by
    /// `make_qx_quants` weighted by the sub-blocks' weight sums.
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        for (i, b) in out.iter_mut().enumerate() {
            let x = &x[QK_K * i..QK_K * (i + 1)];
            let qw = &qw[QK_K * i..QK_K * (i + 1)];
            let sigma2 = 2.0 * sum_x2(x) / QK_K as f32;
            let mut l = [0i8; QK_K];
            let mut scales = [0f32; QK_K / 16];
            let mut sw = [0f32; QK_K / 16];
            for j in 0..QK_K / 16 {
                let r = 16 * j..16 * j + 16;
                let mut weight = [0f32; 16];
                sigma_weights(&qw[r.clone()], &x[r.clone()], sigma2, &mut weight);
                let mut sumw = 0.0f32;
                for &w in &weight {
                    sumw += w;
                }
                sw[j] = sumw;
                scales[j] = make_qx_quants_rmse1(4, &x[r.clone()], &mut l[r], Some(&weight));
            }
            let mut ls = [0i8; QK_K / 16];
            let d_block = make_qx_quants_rmse1(32, &scales, &mut ls, Some(&sw));
            let mut blk = BlockQ3K::zeroed();
            for (j, &lj) in ls.iter().enumerate() {
                pack_scale(&mut blk.scales, j, lj as u8);
            }
            blk.d = to_fp16(d_block);
            *b = finish(x, blk, l);
        }
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8K]) -> f32 {
        let mut sums = [0f32; 8];
        for (x, y) in a.iter().zip(b) {
            let codes = x.codes();
            let mut scales = [0i32; 16];
            for (j, s) in scales.iter_mut().enumerate() {
                *s = q3_k_scale(&x.scales, j);
            }
            let aux32 = lane_sums(&codes, &y.qs, &scales, 16);
            let d = fp16(x.d) * y.d;
            for (s, &v) in sums.iter_mut().zip(&aux32) {
                *s += d * v as f32;
            }
        }
        let mut sumf = 0.0f32;
        for s in sums {
            sumf += s;
        }
        sumf
    }
}

/// Sets the 6-bit scale `ls` (0..=63, the stored value) of sub-block `j` in Q3_K's packed
/// scales (low 4 bits in a nibble of byte `j % 8`, high 2 bits in byte `8 + j % 4`).
fn pack_scale(scales: &mut [u8; K_SCALE_SIZE], j: usize, ls: u8) {
    if j < 8 {
        scales[j] = ls & 0x0F;
    } else {
        scales[j - 8] |= (ls & 0x0F) << 4;
    }
    scales[j % 4 + 8] |= (ls >> 4) << (2 * (j / 4));
}

/// The common end of the Q3_K quantizers: every code recomputed against the rounded scales
/// of `b` (a sub-block whose scale rounded to zero keeps the codes `l` of the search), then
/// split into the high-bit mask and the packed low bits.
fn finish(x: &[f32], mut b: BlockQ3K, mut l: [i8; QK_K]) -> BlockQ3K {
    for j in 0..QK_K / 16 {
        let d = fp16(b.d) * q3_k_scale(&b.scales, j) as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let q = nearest_int(x[16 * j + ii] / d).clamp(-4, 3);
            l[16 * j + ii] = (q + 4) as i8;
        }
    }

    // High bits: value j goes to bit j / 32 of hmask[j % 32].
    for (j, lj) in l.iter_mut().enumerate() {
        if *lj > 3 {
            b.hmask[j % 32] |= 1 << (j / 32);
            *lj -= 4;
        }
    }
    for j in (0..QK_K).step_by(128) {
        for k in 0..32 {
            let c = |o: usize| l[j + k + o] as u8;
            b.qs[j / 4 + k] = c(0) | (c(32) << 2) | (c(64) << 4) | (c(96) << 6);
        }
    }
    b
}

/// Decodes a row of Q3_K super-blocks (ggml's `dequantize_row_q3_K`).
pub fn dequantize_row_q3_k(src: &[u8], dst: &mut [f32]) -> Result<()> {
    crate::quants::dequantize_row::<BlockQ3K>(src, dst)
}

/// Encodes a row as Q3_K super-blocks (ggml's `quantize_row_q3_K_ref`).
pub fn quantize_row_q3_k_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    crate::quants::quantize_row::<BlockQ3K>(src, dst)
}

/// Scalar dot product of a Q3_K row with a Q8_K row of `n` values
/// (ggml's `ggml_vec_dot_q3_K_q8_K_generic`).
pub fn vec_dot_q3_k_q8_k_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    crate::quants::vec_dot_scalar::<BlockQ3K>(n, a, b)
}
