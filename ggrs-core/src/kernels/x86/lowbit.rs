//! AVX2 dot products of Q1_0 and Q2_0 with Q8_0 (portable forms in `quants::q1_0` and
//! `quants::q2_0`):
//! - Q1_0 as ggml's AVX2 `ggml_vec_dot_q1_0_q8_0`: each sign bit spread to a byte mask
//!   (`vpshufb`, `vpand`, `vpcmpeqb`), the activation negated where the bit is clear
//!   (`vpxor`, `vpsubb`), eight i32 lanes of four codes (`vpmaddubsw` and `vpmaddwd` by
//!   ones); per Q1_0 block `blk = dy₀·lanes₀`, `blk = fma(dy_k, lanes_k, blk)`, then
//!   `acc = fma(d, blk, acc)`; `hsum_float_8`;
//! - Q2_0 in the order of `ggml_vec_dot_q2_0_q8_0_generic` (llama.cpp has no SIMD kernel
//!   for it): the exact `Σ (c − 1)·q` of each Q8_0 block from SIMD integer sums, then the
//!   scalar chain `sumi = fma(dy, Σ, sumi)`, `sumf = fma(d, sumi, sumf)` (GCC's contraction).
//!
//! Same tile form as `avx2.rs`: `k::<R, C>(nb, [x; R], [y; C]) -> [[f32; C]; R]`, every
//! element with the 1 × 1 kernel's operations.
//!
//! # Safety
//! Each kernel needs a CPU with AVX2, FMA and F16C, `nb` whole weight blocks readable at
//! every `x[r]` and their Q8_0 blocks (four per Q1_0 block, two per Q2_0 block) at every
//! `y[c]`.

use std::arch::x86_64::*;
use std::mem::offset_of;

use super::util::{f16_at, finish, hsum_i32, read_u32};
use crate::quants::{BlockQ1_0, BlockQ2_0, BlockQ8_0, BlockQuant};

const Q8: usize = BlockQ8_0::BYTES;
const Q1: usize = BlockQ1_0::BYTES;
const Q2: usize = BlockQ2_0::BYTES;

/// The 32 activation codes of the Q8_0 block at `yb`.
///
/// # Safety
/// A Q8_0 block is readable at `yb`; the CPU supports AVX.
#[inline(always)]
unsafe fn q8_codes(yb: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the block; unaligned load.
    unsafe { _mm256_loadu_si256(yb.add(offset_of!(BlockQ8_0, qs)).cast()) }
}

/// Q1_0 · Q8_0 as ggml's AVX2 `ggml_vec_dot_q1_0_q8_0`.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q1_0_q8_0<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: blocks i < nb of every row are readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let ones8 = _mm256_set1_epi8(1);
        let ones16 = _mm256_set1_epi16(1);
        let byte_shuf = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        );
        let bit_masks = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let zero = _mm256_setzero_si256();
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * Q1);
                let d = _mm256_set1_ps(f16_at(xb.add(offset_of!(BlockQ1_0, d))));
                let sm: [__m256i; 4] = std::array::from_fn(|k| {
                    let bits = read_u32(xb.add(offset_of!(BlockQ1_0, qs) + 4 * k));
                    let spread = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), byte_shuf);
                    _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit_masks), zero)
                });
                for c in 0..C {
                    let mut blk = _mm256_setzero_ps();
                    for (k, sm) in sm.iter().enumerate() {
                        let yb = y[c].add((4 * i + k) * Q8);
                        let sy = _mm256_sub_epi8(_mm256_xor_si256(q8_codes(yb), *sm), *sm);
                        let s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, sy), ones16);
                        let dy = _mm256_set1_ps(f16_at(yb));
                        blk = if k == 0 {
                            _mm256_mul_ps(dy, _mm256_cvtepi32_ps(s))
                        } else {
                            _mm256_fmadd_ps(dy, _mm256_cvtepi32_ps(s), blk)
                        };
                    }
                    acc[r][c] = _mm256_fmadd_ps(d, blk, acc[r][c]);
                }
            }
        }
        finish(acc)
    }
}

/// The codes of a Q2_0 block's 64 values in value order, as two registers (values 0–31,
/// 32–63): the four 2-bit fields of each byte interleaved back with byte unpacks.
///
/// # Safety
/// A Q2_0 block is readable at `xb`; the CPU supports AVX2.
#[inline(always)]
unsafe fn q2_0_codes(xb: *const u8) -> [__m256i; 2] {
    // SAFETY: the caller guarantees the block and the CPU features.
    unsafe {
        let q = _mm_loadu_si128(xb.add(offset_of!(BlockQ2_0, qs)).cast());
        let m3 = _mm_set1_epi8(3);
        let t0 = _mm_and_si128(q, m3);
        let t1 = _mm_and_si128(_mm_srli_epi16::<2>(q), m3);
        let t2 = _mm_and_si128(_mm_srli_epi16::<4>(q), m3);
        let t3 = _mm_and_si128(_mm_srli_epi16::<6>(q), m3);
        // Fields (0, 1) and (2, 3) of each byte side by side, then the pairs interleaved.
        let (a0, b0) = (_mm_unpacklo_epi8(t0, t1), _mm_unpacklo_epi8(t2, t3));
        let (a1, b1) = (_mm_unpackhi_epi8(t0, t1), _mm_unpackhi_epi8(t2, t3));
        [
            _mm256_set_m128i(_mm_unpackhi_epi16(a0, b0), _mm_unpacklo_epi16(a0, b0)),
            _mm256_set_m128i(_mm_unpackhi_epi16(a1, b1), _mm_unpacklo_epi16(a1, b1)),
        ]
    }
}

/// The exact `Σ (c − 1)·q` of 32 codes against a Q8_0 block's codes: `Σ c·q − Σ q`.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn q2_0_sum(codes: __m256i, q: __m256i) -> i32 {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        let ones16 = _mm256_set1_epi16(1);
        let cq = _mm256_madd_epi16(_mm256_maddubs_epi16(codes, q), ones16);
        let sq = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), ones16);
        hsum_i32(_mm256_sub_epi32(cq, sq))
    }
}

/// Q2_0 · Q8_0 in the order of `ggml_vec_dot_q2_0_q8_0_generic`.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q2_0_q8_0<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: as in `q1_0_q8_0`.
    unsafe {
        let mut acc = [[0f32; C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * Q2);
                let d = f16_at(xb.add(offset_of!(BlockQ2_0, d)));
                let codes = q2_0_codes(xb);
                for c in 0..C {
                    let mut sumi = 0f32;
                    for (k, codes) in codes.iter().enumerate() {
                        let yb = y[c].add((2 * i + k) * Q8);
                        let s = q2_0_sum(*codes, q8_codes(yb));
                        sumi = f16_at(yb).mul_add(s as f32, sumi);
                    }
                    acc[r][c] = d.mul_add(sumi, acc[r][c]);
                }
            }
        }
        acc
    }
}
