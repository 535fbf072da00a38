//! AVX2 dot products of the 4-bit float types with Q8_0, in the orders of ggml's x86
//! kernels (portable forms in `quants::mxfp4` and `quants::nvfp4`): the levels looked up
//! with `vpshufb` from `KVALUES_FP4`, multiplied with the activations as ggml does
//! (`vpsignb` both ways, `vpmaddubsw`, `vpmaddwd` by ones: eight i32 lanes of four products),
//! then
//! - MXFP4, `ggml_vec_dot_mxfp4_q8_0`: even and odd blocks into two sets of eight f32 lanes
//!   (`fma(dy·dx, lanes, acc)`), added lane by lane, `hsum_float_8`, an odd last block in C
//!   (one FMA, as GCC contracts it);
//! - MXFP4, the repacked `mxfp4_8x8` GEMV/GEMM: per block the lanes' total,
//!   `acc = fma(Σ, dx·dy, acc)` (also an AVX-512 VNNI build, [`mxfp4_q8_0_chain_vnni`],
//!   which sums eight blocks at a time);
//! - NVFP4, `ggml_vec_dot_nvfp4_q8_0`: per Q8_0 block of the NVFP4 block, lanes 0–3 and
//!   4–7 scaled by their sub-blocks' `ue4m3·dy`, one FMA into eight f32 lanes.
//!
//! Same tile form as `avx2.rs`: `k::<R, C>(nb, [x; R], [y; C]) -> [[f32; C]; R]`, every
//! element with the 1 × 1 kernel's operations.
//!
//! # Safety
//! Each kernel needs a CPU with AVX2, FMA and F16C, `nb` whole weight blocks readable at
//! every `x[r]` and their Q8_0 blocks (one per MXFP4 block, two per NVFP4 block) at every
//! `y[c]`.

use std::arch::x86_64::*;
use std::mem::offset_of;

use super::util::{f16_at, finish, hsum256, hsum_i32};
use crate::quants::mxfp4::{e8m0_half, KVALUES_FP4};
use crate::quants::nvfp4::ue4m3_half;
use crate::quants::{BlockMXFP4, BlockNVFP4, BlockQ8_0, BlockQuant};

const Q8: usize = BlockQ8_0::BYTES;
const MX: usize = BlockMXFP4::BYTES;
const NV: usize = BlockNVFP4::BYTES;

/// The FP4 levels as a byte table for `vpshufb`.
///
/// # Safety
/// The CPU supports SSE2.
#[inline(always)]
unsafe fn levels_table() -> __m128i {
    // SAFETY: 16 readable bytes; unaligned load.
    unsafe { _mm_loadu_si128(KVALUES_FP4.as_ptr().cast()) }
}

/// The levels of 16 bytes of packed indices: (low nibbles, high nibbles).
///
/// # Safety
/// 16 bytes are readable at `p`; the CPU supports AVX2.
#[inline(always)]
unsafe fn levels16(p: *const u8, table: __m128i) -> (__m128i, __m128i) {
    // SAFETY: the caller guarantees the bytes and the CPU features.
    unsafe {
        let q = _mm_loadu_si128(p.cast());
        let m4 = _mm_set1_epi8(0x0F);
        (
            _mm_shuffle_epi8(table, _mm_and_si128(q, m4)),
            _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16::<4>(q), m4)),
        )
    }
}

/// ggml's `mul_add_epi8` then `vpmaddwd` by ones: eight i32 lanes, lane `l` the sum of the
/// products `|x|·sign(y, x)` of bytes `4l..4l + 4`.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn quads(x: __m256i, y: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
        _mm256_madd_epi16(p, _mm256_set1_epi16(1))
    }
}

/// The 32 activation codes of the Q8_0 block at `yb`.
///
/// # Safety
/// A Q8_0 block is readable at `yb`; the CPU supports AVX.
#[inline(always)]
unsafe fn q8_codes(yb: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the block; unaligned load.
    unsafe { _mm256_loadu_si256(yb.add(offset_of!(BlockQ8_0, qs)).cast()) }
}

/// The levels of the MXFP4 block at `xb` in value order.
///
/// # Safety
/// An MXFP4 block is readable at `xb`; the CPU supports AVX2.
#[inline(always)]
unsafe fn mxfp4_levels(xb: *const u8, table: __m128i) -> __m256i {
    // SAFETY: the caller guarantees the block and the CPU features.
    unsafe {
        let (lo, hi) = levels16(xb.add(offset_of!(BlockMXFP4, qs)), table);
        _mm256_set_m128i(hi, lo)
    }
}

/// MXFP4 · Q8_0 as ggml's AVX2 `ggml_vec_dot_mxfp4_q8_0`.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn mxfp4_q8_0<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: blocks i < nb of every row are readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let table = levels_table();
        let mut acc1 = [[_mm256_setzero_ps(); C]; R];
        let mut acc2 = [[_mm256_setzero_ps(); C]; R];
        let mut ib = 0;
        while ib + 1 < nb {
            for r in 0..R {
                let (x1, x2) = (x[r].add(ib * MX), x[r].add((ib + 1) * MX));
                let (l1, l2) = (mxfp4_levels(x1, table), mxfp4_levels(x2, table));
                let (d1, d2) = (e8m0_half(*x1), e8m0_half(*x2));
                for c in 0..C {
                    let (y1, y2) = (y[c].add(ib * Q8), y[c].add((ib + 1) * Q8));
                    let p1 = _mm256_cvtepi32_ps(quads(l1, q8_codes(y1)));
                    let p2 = _mm256_cvtepi32_ps(quads(l2, q8_codes(y2)));
                    let s1 = _mm256_set1_ps(f16_at(y1) * d1);
                    let s2 = _mm256_set1_ps(f16_at(y2) * d2);
                    acc1[r][c] = _mm256_fmadd_ps(s1, p1, acc1[r][c]);
                    acc2[r][c] = _mm256_fmadd_ps(s2, p2, acc2[r][c]);
                }
            }
            ib += 2;
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                let mut sumf = hsum256(_mm256_add_ps(acc1[r][c], acc2[r][c]));
                if ib < nb {
                    // The odd last block in C: `int` products, `sumf += d·Σ` as one FMA.
                    let (xb, yb) = (x[r].add(ib * MX), y[c].add(ib * Q8));
                    let l = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(mxfp4_levels(xb, table)));
                    let lh = _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(mxfp4_levels(
                        xb, table,
                    )));
                    let q = q8_codes(yb);
                    let ql = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
                    let qh = _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(q));
                    let s = _mm256_add_epi32(_mm256_madd_epi16(l, ql), _mm256_madd_epi16(lh, qh));
                    let d = f16_at(yb) * e8m0_half(*xb);
                    sumf = d.mul_add(hsum_i32(s) as f32, sumf);
                }
                out[r][c] = sumf;
            }
        }
        out
    }
}

/// MXFP4 · Q8_0 as ggml's repacked `mxfp4_8x8` GEMV/GEMM (one row of its eight).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn mxfp4_q8_0_chain<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: as in `mxfp4_q8_0`.
    unsafe {
        let table = levels_table();
        let mut acc = [[0f32; C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * MX);
                let l = mxfp4_levels(xb, table);
                let dx = e8m0_half(*xb);
                for c in 0..C {
                    let yb = y[c].add(i * Q8);
                    let s = hsum_i32(quads(l, q8_codes(yb)));
                    acc[r][c] = (s as f32).mul_add(dx * f16_at(yb), acc[r][c]);
                }
            }
        }
        acc
    }
}

/// The eight i32 lanes of each of `v[0..8]` summed: lane `b` of the result is `Σ v[b]`
/// (exact integers, any order).
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn block_sums8(v: &[__m256i; 8]) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        // No closure (`array::from_fn`): it would not inherit the caller's target features.
        let h = [
            _mm256_hadd_epi32(v[0], v[1]),
            _mm256_hadd_epi32(v[2], v[3]),
            _mm256_hadd_epi32(v[4], v[5]),
            _mm256_hadd_epi32(v[6], v[7]),
        ];
        // Lanes 0..4 / 4..8: the low / high halves of v[0..4] (g0) and v[4..8] (g1).
        let g0 = _mm256_hadd_epi32(h[0], h[1]);
        let g1 = _mm256_hadd_epi32(h[2], h[3]);
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(g0, g1),
            _mm256_permute2x128_si256::<0x31>(g0, g1),
        )
    }
}

/// MXFP4 · Q8_0 as ggml's repacked `mxfp4_8x8` GEMV/GEMM (one row of its eight), for CPUs
/// with AVX-512 VNNI: eight blocks at a time, each block's products `|level| · sign(y,
/// level)` (`vpsignb`, then `vpdpbusd`: the sums of [`mxfp4_q8_0_chain`] for any bytes),
/// the eight blocks' sums reduced together ([`block_sums8`]) and then chained one FMA per
/// block in order, `acc = fma(Σ, dx·dy, acc)`; the last `nb % 8` blocks one at a time.
///
/// # Safety
/// See the module docs; the CPU also supports AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn mxfp4_q8_0_chain_vnni<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: as in `mxfp4_q8_0`.
    unsafe {
        let table = levels_table();
        let zero = _mm256_setzero_si256();
        let mut acc = [[0f32; C]; R];
        let mut i = 0;
        while i + 8 <= nb {
            for r in 0..R {
                // Loops rather than closures (`array::from_fn`), which might not inherit
                // this function's target features.
                let (mut l, mut labs, mut dx) = ([zero; 8], [zero; 8], [0f32; 8]);
                for b in 0..8 {
                    let xb = x[r].add((i + b) * MX);
                    l[b] = mxfp4_levels(xb, table);
                    labs[b] = _mm256_abs_epi8(l[b]);
                    dx[b] = e8m0_half(*xb);
                }
                for c in 0..C {
                    let mut v = [zero; 8];
                    for b in 0..8 {
                        let ys = _mm256_sign_epi8(q8_codes(y[c].add((i + b) * Q8)), l[b]);
                        v[b] = _mm256_dpbusd_epi32(zero, labs[b], ys);
                    }
                    let mut sums = [0i32; 8];
                    _mm256_storeu_si256(sums.as_mut_ptr().cast(), block_sums8(&v));
                    for b in 0..8 {
                        let dy = f16_at(y[c].add((i + b) * Q8));
                        acc[r][c] = (sums[b] as f32).mul_add(dx[b] * dy, acc[r][c]);
                    }
                }
            }
            i += 8;
        }
        while i < nb {
            for r in 0..R {
                let xb = x[r].add(i * MX);
                let l = mxfp4_levels(xb, table);
                let labs = _mm256_abs_epi8(l);
                let dx = e8m0_half(*xb);
                for c in 0..C {
                    let yb = y[c].add(i * Q8);
                    let ys = _mm256_sign_epi8(q8_codes(yb), l);
                    let s = hsum_i32(_mm256_dpbusd_epi32(zero, labs, ys));
                    acc[r][c] = (s as f32).mul_add(dx * f16_at(yb), acc[r][c]);
                }
            }
            i += 1;
        }
        acc
    }
}

/// NVFP4 · Q8_0 as ggml's AVX2 `ggml_vec_dot_nvfp4_q8_0`.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn nvfp4_q8_0<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: as in `mxfp4_q8_0` (two Q8_0 blocks per NVFP4 block).
    unsafe {
        let table = levels_table();
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * NV);
                let mut lv = [_mm256_setzero_si256(); 2];
                for (h, lv) in lv.iter_mut().enumerate() {
                    let (lo, hi) = levels16(xb.add(offset_of!(BlockNVFP4, qs) + 16 * h), table);
                    *lv = _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
                }
                let ue: [f32; 4] = std::array::from_fn(|s| ue4m3_half(*xb.add(s)));
                for c in 0..C {
                    for (h, lv) in lv.iter().enumerate() {
                        let yb = y[c].add((2 * i + h) * Q8);
                        let p = _mm256_cvtepi32_ps(quads(*lv, q8_codes(yb)));
                        let dy = f16_at(yb);
                        let scales = _mm256_set_m128(
                            _mm_set1_ps(ue[2 * h + 1] * dy),
                            _mm_set1_ps(ue[2 * h] * dy),
                        );
                        acc[r][c] = _mm256_fmadd_ps(scales, p, acc[r][c]);
                    }
                }
            }
        }
        finish(acc)
    }
}
