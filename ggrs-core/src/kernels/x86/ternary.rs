//! AVX2 dot products of the ternary types with Q8_K, in the order of ggml's AVX2
//! `ggml_vec_dot_tq*_0_q8_K` (the portable form of that order is
//! `quants::tq2_0::ternary_dot_x86`): unsigned codes `t + 1` times signed activations with
//! `vpmaddubsw` into i16 lanes (pair sums at most 2·3·128, no saturation), Q8_K's `bsums`
//! subtracted lane by lane, lane pairs added with `vpmaddwd`, and `fma(lane, d_y·d_x, acc)`
//! per block into eight f32 lanes added as `hsum_float_8` at the end.
//!
//! Same tile form as `avx2.rs`: `k::<R, C>(nb, [x; R], [y; C]) -> [[f32; C]; R]`, every
//! element with the 1 × 1 kernel's operations.
//!
//! # Safety
//! Each kernel needs a CPU with AVX2, FMA and F16C, and `nb` whole blocks readable at every
//! `x[r]` and every `y[c]`.

use std::arch::x86_64::*;
use std::mem::offset_of;

use super::util::{f16_at, finish, read_f32, read_u32};
use crate::quants::{BlockQ8K, BlockQuant, BlockTQ1_0, BlockTQ2_0};

const Q8K: usize = BlockQ8K::BYTES;
const TQ1: usize = BlockTQ1_0::BYTES;
const TQ2: usize = BlockTQ2_0::BYTES;

/// Loads 32 bytes at `p` (any alignment).
///
/// # Safety
/// 32 bytes are readable at `p`; the CPU supports AVX.
#[inline(always)]
pub(super) unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the bytes and AVX; the load is unaligned.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// The end of a block for one column: `acc = fma(Σ pairs(s − bsums), d_y·d_x, acc)`.
///
/// # Safety
/// `yb` is a readable Q8_K block; the CPU supports AVX2 and FMA.
#[inline(always)]
unsafe fn close_block(s: __m256i, yb: *const u8, dx: f32, acc: __m256) -> __m256 {
    // SAFETY: the caller guarantees the block and the CPU features.
    unsafe {
        let ysum = load(yb.add(offset_of!(BlockQ8K, bsums)));
        let d = _mm256_set1_ps(read_f32(yb.add(offset_of!(BlockQ8K, d))) * dx);
        let s = _mm256_madd_epi16(_mm256_sub_epi16(s, ysum), _mm256_set1_epi16(1));
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc)
    }
}

/// TQ2_0 · Q8_K as ggml's AVX2 `ggml_vec_dot_tq2_0_q8_K`.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tq2_0_q8_k<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let m3 = _mm256_set1_epi8(3);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * TQ2);
                let dx = f16_at(xb.add(offset_of!(BlockTQ2_0, d)));
                let mut s0 = [_mm256_setzero_si256(); C];
                let mut s1 = [_mm256_setzero_si256(); C];
                for j in [0usize, 32] {
                    let q = load(xb.add(offset_of!(BlockTQ2_0, qs) + j));
                    let qx = [
                        _mm256_and_si256(q, m3),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(q), m3),
                        _mm256_and_si256(_mm256_srli_epi16::<4>(q), m3),
                        _mm256_and_si256(_mm256_srli_epi16::<6>(q), m3),
                    ];
                    for c in 0..C {
                        let yq = y[c].add(i * Q8K + offset_of!(BlockQ8K, qs) + 4 * j);
                        let p0 = _mm256_maddubs_epi16(qx[0], load(yq));
                        let p1 = _mm256_maddubs_epi16(qx[1], load(yq.add(32)));
                        let p2 = _mm256_maddubs_epi16(qx[2], load(yq.add(64)));
                        let p3 = _mm256_maddubs_epi16(qx[3], load(yq.add(96)));
                        s0[c] = _mm256_add_epi16(s0[c], _mm256_add_epi16(p0, p1));
                        s1[c] = _mm256_add_epi16(s1[c], _mm256_add_epi16(p2, p3));
                    }
                }
                for c in 0..C {
                    let s = _mm256_add_epi16(s0[c], s1[c]);
                    acc[r][c] = close_block(s, y[c].add(i * Q8K), dx, acc[r][c]);
                }
            }
        }
        finish(acc)
    }
}

/// The trits (`t + 1`) of 32 bytes already multiplied by `3ⁿ` (mod 256): the top two bits
/// of `3·b` read with byte averages, as ggml does (`vpsubusb`, two `vpavgb`, shift, mask),
/// equal to `((b · 3) >> 8)` for every byte.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn trits(q: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 operations; the caller guarantees AVX2.
    unsafe {
        let q = _mm256_subs_epu8(q, _mm256_set1_epi8(1));
        let q = _mm256_avg_epu8(q, _mm256_avg_epu8(q, _mm256_setzero_si256()));
        _mm256_and_si256(_mm256_srli_epi16::<6>(q), _mm256_set1_epi8(3))
    }
}

/// `b · 3` for every byte (mod 256), with 8-bit adds.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn times3(b: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe { _mm256_add_epi8(b, _mm256_add_epi8(b, b)) }
}

/// `b · 9` for every byte (mod 256): a 16-bit shift by 3 with the bits that crossed into
/// the next byte masked off, plus `b`.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn times9(b: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        let shifted = _mm256_and_si256(_mm256_slli_epi16::<3>(b), _mm256_set1_epi8(-8));
        _mm256_add_epi8(shifted, b)
    }
}

/// The codes of one TQ1_0 block as eight registers, register `k` against activations
/// `32k..32k + 32`: the five trits of `qs[0..32]`, then trits (0, 1), (2, 3) of `qs[32..48]`
/// and trit 4 of `qs[32..48]` beside the four trits of `qh` (`qh[j]·3ⁿ` at byte `4n + j`).
///
/// # Safety
/// 54 bytes are readable at `xb`; the CPU supports AVX2.
#[inline(always)]
unsafe fn tq1_0_codes(xb: *const u8) -> [__m256i; 8] {
    // SAFETY: the block's bytes are readable (caller); unaligned loads; AVX2.
    unsafe {
        let a0 = load(xb.add(offset_of!(BlockTQ1_0, qs)));
        let a1 = times3(a0);
        let a2 = times9(a0);
        let a3 = times9(a1);
        let a4 = times9(a2);
        let b = _mm_loadu_si128(xb.add(offset_of!(BlockTQ1_0, qs) + 32).cast());
        let b = _mm256_set_m128i(b, b);
        let (b1, b2) = (times3(b), times9(b));
        let (b3, b4) = (times9(b1), times9(b2));
        let qh = read_u32(xb.add(offset_of!(BlockTQ1_0, qh)));
        let h = _mm256_cvtepu8_epi16(_mm_set1_epi32(qh as i32));
        let h = _mm256_mullo_epi16(
            h,
            _mm256_set_epi16(27, 27, 27, 27, 9, 9, 9, 9, 3, 3, 3, 3, 1, 1, 1, 1),
        );
        let h = _mm256_and_si256(h, _mm256_set1_epi16(0xFF));
        let h = _mm_packus_epi16(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
        [
            trits(a0),
            trits(a1),
            trits(a2),
            trits(a3),
            trits(a4),
            trits(_mm256_set_m128i(
                _mm256_castsi256_si128(b1),
                _mm256_castsi256_si128(b),
            )),
            trits(_mm256_set_m128i(
                _mm256_castsi256_si128(b3),
                _mm256_castsi256_si128(b2),
            )),
            trits(_mm256_set_m128i(h, _mm256_castsi256_si128(b4))),
        ]
    }
}

/// TQ1_0 · Q8_K as ggml's AVX2 `ggml_vec_dot_tq1_0_q8_K` (its i16 sums are exact modulo
/// 2¹⁶ in any order, so one accumulator gives its lanes).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tq1_0_q8_k<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * TQ1);
                let dx = f16_at(xb.add(offset_of!(BlockTQ1_0, d)));
                let qx = tq1_0_codes(xb);
                for c in 0..C {
                    let yq = y[c].add(i * Q8K + offset_of!(BlockQ8K, qs));
                    let mut s = _mm256_setzero_si256();
                    for (k, q) in qx.iter().enumerate() {
                        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(*q, load(yq.add(32 * k))));
                    }
                    acc[r][c] = close_block(s, y[c].add(i * Q8K), dx, acc[r][c]);
                }
            }
        }
        finish(acc)
    }
}
