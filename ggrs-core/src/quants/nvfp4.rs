//! NVFP4, NVIDIA's 4-bit float type: 64 values per 36-byte block, four sub-blocks of 16
//! values, each value `s · v` with `v` an E2M1 value doubled (`KVALUES_FP4`) and `s` half
//! the sub-block's UE4M3 scale (unsigned, 4 exponent bits of bias 7, 3 mantissa bits).
//!
//! Layout: `d[4]` (the UE4M3 scale bytes), then `qs[32]`: byte `8s + j` holds value
//! `16s + j` in its low nibble and `16s + j + 8` in its high nibble. Its dot product pairs
//! with Q8_0 (two Q8_0 blocks per NVFP4 block).
//!
//! The quantizer is ggml's `quantize_row_nvfp4_ref` (`llama-quantize` ignores the importance
//! matrix for it): per sub-block `s = ue4m3(max|x| / 6)`, each value the nearest level. The
//! x86 build of llama.cpp multiplies NVFP4 only with `ggml_vec_dot_nvfp4_q8_0`, whose AVX2
//! order [`dot_nvfp4_x86`] keeps.

use bytemuck::{Pod, Zeroable};

use super::mxfp4::{best_index_fp4, cvtt_i32, sign_product, KVALUES_FP4};
use super::{fp16, BlockQ8_0, BlockQuant};
use crate::dtype::DType;

/// Values per NVFP4 block.
pub const QK_NVFP4: usize = 64;
/// Values per NVFP4 sub-block (one scale each).
pub const QK_NVFP4_SUB: usize = 16;

/// One NVFP4 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockNVFP4 {
    /// UE4M3 scales, one per 16 values.
    pub d: [u8; 4],
    /// 4-bit level indices (see the module docs for the order).
    pub qs: [u8; QK_NVFP4 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockNVFP4>() == 36);

/// A UE4M3 byte as f32, halved for the doubled levels (ggml's `ggml_ue4m3_to_fp32`): 0 for
/// `0x00` and `0x7F`; the top bit is ignored. Read from a table of all 256 bytes
/// ([`ue4m3_half_calc`]'s values), so the kernels pay one load per scale.
#[inline(always)]
pub(crate) fn ue4m3_half(x: u8) -> f32 {
    UE4M3_HALF[x as usize]
}

/// [`ue4m3_half`] of every byte.
static UE4M3_HALF: [f32; 256] = {
    let mut t = [0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = ue4m3_half_calc(i as u8);
        i += 1;
    }
    t
};

/// [`ue4m3_half`] computed.
const fn ue4m3_half_calc(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let exp = ((x >> 3) & 0xF) as i32;
    let man = (x & 7) as f32;
    let raw = if exp == 0 {
        man * exp2i(-9)
    } else {
        (1.0 + man / 8.0) * exp2i(exp - 7)
    };
    raw * 0.5
}

/// `2^k` for a normal exponent `k` (ggml's `ldexpf` of these scales is exact).
const fn exp2i(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// ggml's `ggml_fp32_to_ue4m3`: positive values only (else 0), capped at 448, the mantissa
/// rounded half up on its fourth bit, 0x7E past the range.
pub(crate) fn to_ue4m3(x: f32) -> u8 {
    // Zero, negative values and NaN.
    if x.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return 0;
    }
    let x = if x > 448.0 { 448.0 } else { x };
    let bits = x.to_bits();
    let fp32_exp = ((bits >> 23) & 0xFF) as i32 - 127;
    let fp32_man = ((bits >> 20) & 7) as i32;
    let mut exp = fp32_exp + 7;
    if exp <= 0 {
        // Subnormal: `(int)(x·512 + 0.5)`, 1..=7.
        let man = cvtt_i32(x * 512.0 + 0.5).min(7);
        return if man < 1 { 0 } else { man as u8 };
    }
    if exp >= 15 {
        return 0x7E;
    }
    let mut man = fp32_man + ((bits >> 19) & 1) as i32;
    if man > 7 {
        man = 0;
        exp += 1;
        if exp >= 15 {
            return 0x7E;
        }
    }
    ((exp << 3) | man) as u8
}

impl BlockNVFP4 {
    /// The 64 levels (doubled E2M1 values) in value order.
    pub fn levels(&self) -> [i8; QK_NVFP4] {
        let mut v = [0i8; QK_NVFP4];
        for s in 0..4 {
            for j in 0..8 {
                let q = self.qs[8 * s + j];
                v[16 * s + j] = KVALUES_FP4[(q & 0x0F) as usize];
                v[16 * s + j + 8] = KVALUES_FP4[(q >> 4) as usize];
            }
        }
        v
    }
}

impl BlockQuant for BlockNVFP4 {
    const DTYPE: DType = DType::NVFP4;
    const BLOCK_SIZE: usize = QK_NVFP4;
    type VecDot = BlockQ8_0;
    const GGML_X86_DOT: Option<super::VecDotKernel> = Some(dot_nvfp4_x86);

    fn dequantize(&self, out: &mut [f32]) {
        let l = self.levels();
        for (s, out) in out[..QK_NVFP4].chunks_exact_mut(16).enumerate() {
            let d = ue4m3_half(self.d[s]);
            for (y, &v) in out.iter_mut().zip(&l[16 * s..16 * s + 16]) {
                *y = v as f32 * d;
            }
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let mut b = BlockNVFP4 {
            d: [0; 4],
            qs: [0; QK_NVFP4 / 2],
        };
        for (s, xb) in x[..QK_NVFP4].chunks_exact(QK_NVFP4_SUB).enumerate() {
            let amax = xb
                .iter()
                .fold(0.0f32, |m, v| if m < v.abs() { v.abs() } else { m });
            let ue = to_ue4m3(amax / 6.0);
            b.d[s] = ue;
            let d = ue4m3_half(ue);
            for j in 0..8 {
                b.qs[8 * s + j] = best_index_fp4(xb[j], d) | (best_index_fp4(xb[j + 8], d) << 4);
            }
        }
        b
    }

    /// `ggml_vec_dot_nvfp4_q8_0_generic`: per sub-block `sumf += (dy·d)·Σ` (`int`
    /// products), one FMA (GCC's contraction, see `q2_0`).
    fn vec_dot(a: &[Self], b: &[BlockQ8_0]) -> f32 {
        let mut sumf = 0f32;
        for (x, y) in a.iter().zip(b.chunks_exact(2)) {
            let l = x.levels();
            for s in 0..4 {
                let yb = &y[s / 2];
                let off = (s % 2) * 16;
                let sum: i32 = (0..16)
                    .map(|j| l[16 * s + j] as i32 * yb.qs[off + j] as i32)
                    .sum();
                sumf = (fp16(yb.d) * ue4m3_half(x.d[s])).mul_add(sum as f32, sumf);
            }
        }
        sumf
    }
}

/// NVFP4 · Q8_0 in the order of ggml's AVX2 `ggml_vec_dot_nvfp4_q8_0`: per block two sets
/// of eight i32 lanes (lane `l` of Q8_0 block `h` the [`sign_product`]s of values
/// `32h + 4l .. 32h + 4l + 4`), each `acc = fma(scales, lanes, acc)` with the scale
/// `ue4m3(d_s)·dy` of the lane's sub-block, then `hsum_float_8`. The AVX2 build in
/// `kernels::x86::fp4` gives the same bits.
pub(crate) fn dot_nvfp4_x86(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let Some((xs, ys)) = super::row_blocks::<BlockNVFP4>(n, a, b) else {
        return 0.0;
    };
    let mut acc = [0f32; 8];
    for (x, y) in xs.iter().zip(ys.chunks_exact(2)) {
        let l = x.levels();
        for h in 0..2 {
            let dy = fp16(y[h].d);
            let scales = [ue4m3_half(x.d[2 * h]) * dy, ue4m3_half(x.d[2 * h + 1]) * dy];
            for (k, a) in acc.iter_mut().enumerate() {
                let lane: i32 = (4 * k..4 * k + 4)
                    .map(|v| sign_product(l[32 * h + v], y[h].qs[v]))
                    .sum();
                *a = scales[k / 4].mul_add(lane as f32, *a);
            }
        }
    }
    crate::kernels::ggml_arith::lanes::hsum8(&acc)
}
