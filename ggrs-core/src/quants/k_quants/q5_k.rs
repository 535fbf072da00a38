//! Q5_K: 256 values in 8 sub-blocks of 32, `x = d·sc·q − dmin·m` with 5-bit codes `q` and a
//! 6-bit scale `sc` and minimum `m` per sub-block.
//!
//! Layout (176 bytes): `d`, `dmin` (f16), `scales[12]` (as Q4_K), `qh[32]`, `qs[128]`. The low
//! 4 bits are laid out as in Q4_K; value `64·c + l` (c in 0..4, l in 0..32) has its fifth bit
//! in bit `2c` of `qh[l]`, value `64·c + 32 + l` in bit `2c + 1`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q4_k::{quantize_scales_mins, vec_dot_scales_mins, weighted_rows, ScalesMins};
use super::q8_k::BlockQ8K;
use super::{get_scale_min_k4, Qkx2, K_SCALE_SIZE, QK_K};
use crate::dtype::DType;
use crate::error::Result;
use crate::quants::{fp16, BlockQuant};

/// One Q5_K super-block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5K {
    /// Super-block scale of the sub-block scales.
    pub d: f16,
    /// Super-block scale of the sub-block minimums.
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit minimums, packed as in Q4_K.
    pub scales: [u8; K_SCALE_SIZE],
    /// Fifth bit of each code.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits of each code.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

impl BlockQ5K {
    /// The codes (0..=31) of the super-block, in value order.
    pub(crate) fn codes(&self) -> [i8; QK_K] {
        let mut a = [0i8; QK_K];
        for c in 0..QK_K / 64 {
            let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for l in 0..32 {
                let q = self.qs[32 * c + l];
                let h = self.qh[l];
                a[64 * c + l] = ((q & 0x0F) + if h & u1 != 0 { 16 } else { 0 }) as i8;
                a[64 * c + 32 + l] = ((q >> 4) + if h & u2 != 0 { 16 } else { 0 }) as i8;
            }
        }
        a
    }
}

impl BlockQuant for BlockQ5K {
    const DTYPE: DType = DType::Q5K;
    const BLOCK_SIZE: usize = QK_K;
    type VecDot = BlockQ8K;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        let min = fp16(self.dmin);
        let out = &mut out[..QK_K];
        for c in 0..QK_K / 64 {
            let ql = &self.qs[32 * c..32 * c + 32];
            let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
            let (sc, m) = get_scale_min_k4(2 * c, &self.scales);
            let d1 = d * sc as f32;
            let m1 = min * m as f32;
            let (sc, m) = get_scale_min_k4(2 * c + 1, &self.scales);
            let d2 = d * sc as f32;
            let m2 = min * m as f32;
            for l in 0..32 {
                let q = (ql[l] & 0x0F) as i32 + if self.qh[l] & u1 != 0 { 16 } else { 0 };
                out[64 * c + l] = d1 * q as f32 - m1;
            }
            for l in 0..32 {
                let q = (ql[l] >> 4) as i32 + if self.qh[l] & u2 != 0 { 16 } else { 0 };
                out[64 * c + 32 + l] = d2 * q as f32 - m2;
            }
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let params = Qkx2 {
            nmax: 31,
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: false,
        };
        BlockQ5K::from_codes(quantize_scales_mins(&x[..QK_K], &params))
    }

    /// `quantize_row_q5_K_impl` (see [`quantize_scales_mins_weighted`]).
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        weighted_rows(x, qw, out, 31, BlockQ5K::from_codes);
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8K]) -> f32 {
        vec_dot_scales_mins(a, b, |x| (&x.scales, x.codes(), x.d, x.dmin))
    }
}

impl BlockQ5K {
    /// The block of packed scales, `d`, `dmin` and codes (0..=31, value order).
    fn from_codes((scales, d, dmin, l): ScalesMins) -> BlockQ5K {
        let mut qh = [0u8; QK_K / 8];
        let mut qs = [0u8; QK_K / 2];
        for c in 0..QK_K / 64 {
            let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for j in 0..32 {
                let mut l1 = l[64 * c + j];
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                let mut l2 = l[64 * c + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                qs[32 * c + j] = l1 | (l2 << 4);
            }
        }
        BlockQ5K {
            d,
            dmin,
            scales,
            qh,
            qs,
        }
    }
}

/// Decodes a row of Q5_K super-blocks (ggml's `dequantize_row_q5_K`).
pub fn dequantize_row_q5_k(src: &[u8], dst: &mut [f32]) -> Result<()> {
    crate::quants::dequantize_row::<BlockQ5K>(src, dst)
}

/// Encodes a row as Q5_K super-blocks (ggml's `quantize_row_q5_K_ref`).
pub fn quantize_row_q5_k_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    crate::quants::quantize_row::<BlockQ5K>(src, dst)
}

/// Scalar dot product of a Q5_K row with a Q8_K row of `n` values
/// (ggml's `ggml_vec_dot_q5_K_q8_K_generic`).
pub fn vec_dot_q5_k_q8_k_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    crate::quants::vec_dot_scalar::<BlockQ5K>(n, a, b)
}
