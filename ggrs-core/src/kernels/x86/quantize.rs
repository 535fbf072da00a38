//! AVX2 activation quantizers (f32 → Q8_0, f32 → Q8_K) that write exactly the bytes of the
//! reference quantizers (`BlockQ8_0::quantize`, `BlockQ8K::quantize`), for `mul_mat`'s INIT.
//!
//! Identical bytes by construction: every f32 operation of the reference is done with the
//! same IEEE operation on the same operands (products `x·id`, `1/d`, ggml's `nearest_int`
//! by the same `+ 1.5·2²³` bit trick), and the two steps that SIMD would reorder are ones
//! whose result does not depend on order for finite inputs: the maximum of `|x|` and, for
//! Q8_K, the first value reaching it. Blocks the fast path cannot reproduce — a NaN (the
//! reference's running maximum depends on where the NaN sits), an infinite maximum, or a
//! scale whose inverse overflows (tiny subnormal maxima) — are handed to the reference
//! quantizer itself, block by block.
//!
//! Beside them, ggml's own AVX2 `quantize_row_q8_0` and `quantize_row_q8_1`
//! ([`ggml_quantize_row_q8_0`], [`ggml_quantize_row_q8_1`]): ggml's rounding rather than the
//! reference's, for `mul_mat`'s INIT where llama.cpp's bits are the oracle
//! (`kernels::ggml_arith::quantize`).

use std::arch::x86_64::*;

use crate::kernels::ggml_arith::lanes::{Q8_0_BYTES, Q8_1_BYTES};
use crate::quants::{to_fp16, BlockQ8K, BlockQ8_0, BlockQuant, QK_K};

/// `|x|` of 8 lanes.
///
/// # Safety
/// The CPU supports AVX.
#[inline(always)]
unsafe fn abs(v: __m256) -> __m256 {
    // SAFETY: register-only AVX operation.
    unsafe { _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF))) }
}

/// The 8-lane maximum of `|x|` over `x` (a multiple of 8 values) and whether any lane is NaN.
///
/// # Safety
/// The CPU supports AVX; `x.len()` is a multiple of 8.
#[inline(always)]
unsafe fn abs_max(x: &[f32]) -> (f32, bool) {
    // SAFETY: each load reads 8 values inside `x`; unaligned loads.
    unsafe {
        let mut m = _mm256_setzero_ps();
        let mut nan = _mm256_setzero_ps();
        for c in x.chunks_exact(8) {
            let v = _mm256_loadu_ps(c.as_ptr());
            nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
            m = _mm256_max_ps(m, abs(v));
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let m1 = _mm_max_ss(m2, _mm_movehdup_ps(m2));
        (_mm_cvtss_f32(m1), _mm256_movemask_ps(nan) != 0)
    }
}

/// Packs 32 `i32` lanes (in value order across `q[0..4]`) into 32 bytes with signed
/// saturation, in value order.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn pack32(q: [__m256i; 4]) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        // The packs work per 128-bit half: lanes come out as 0-3 8-11 | 4-7 12-15 for the
        // 16-bit step and need one dword permutation at the end.
        let ab = _mm256_packs_epi32(q[0], q[1]);
        let cd = _mm256_packs_epi32(q[2], q[3]);
        let bytes = _mm256_packs_epi16(ab, cd);
        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }
}

/// Rounds to nearest, halves away from zero (C's `roundf`), exactly for every finite `v`.
///
/// # Safety
/// The CPU supports AVX.
#[inline(always)]
unsafe fn round_half_away(v: __m256) -> __m256 {
    // SAFETY: register-only AVX operations.
    unsafe {
        // t = trunc(v); v − t is exact (|t| ≤ |v| and t shares v's sign and exponent range);
        // one more unit, with v's sign, when the dropped fraction is at least a half.
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
        let frac = abs(_mm256_sub_ps(v, t));
        let up = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, _mm256_set1_ps(0.5));
        let sign = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN)));
        let one = _mm256_or_ps(_mm256_set1_ps(1.0), sign);
        _mm256_add_ps(t, _mm256_and_ps(up, one))
    }
}

/// f32 → Q8_0, `src.len() / 32` blocks into `dst` (the same length rule as the reference
/// row quantizer; a mismatch writes nothing in release builds).
///
/// # Safety
/// The CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_row_q8_0(src: &[f32], dst: &mut [u8]) {
    let bytes = BlockQ8_0::BYTES;
    let ok = src.len() / 32 * 32 == src.len() && dst.len() == src.len() / 32 * bytes;
    debug_assert!(
        ok,
        "quantize q8_0: {} values into {} bytes",
        src.len(),
        dst.len()
    );
    if !ok {
        return;
    }
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(bytes)) {
        // SAFETY: AVX/AVX2/F16C are the caller's guarantee; loads read 8 values inside the
        // 32 of `x`; the store writes the 32 code bytes inside the block's 34.
        unsafe {
            let (amax, nan) = abs_max(x);
            // As `scale_for`: d = amax / 127, id = 1 / d (0 for an all-zero block).
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            if nan || !amax.is_finite() || !id.is_finite() {
                out.copy_from_slice(bytemuck::bytes_of(&BlockQ8_0::quantize(x)));
                continue;
            }
            let idv = _mm256_set1_ps(id);
            let mut q = [_mm256_setzero_si256(); 4];
            for (k, qk) in q.iter_mut().enumerate() {
                let v = _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(8 * k)), idv);
                // |v| ≤ 127·(1 + 2⁻²²): the rounded values are integers in −127..=127.
                *qk = _mm256_cvtps_epi32(round_half_away(v));
            }
            out[0..2].copy_from_slice(&to_fp16(d).to_le_bytes());
            _mm256_storeu_si256(out.as_mut_ptr().add(2).cast(), pack32(q));
        }
    }
}

/// f32 → Q8_K, `src.len() / 256` blocks into `dst` (as [`quantize_row_q8_0`]).
///
/// # Safety
/// The CPU supports AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_row_q8_k(src: &[f32], dst: &mut [u8]) {
    let bytes = BlockQ8K::BYTES;
    let ok = src.len() / QK_K * QK_K == src.len() && dst.len() == src.len() / QK_K * bytes;
    debug_assert!(
        ok,
        "quantize q8_K: {} values into {} bytes",
        src.len(),
        dst.len()
    );
    if !ok {
        return;
    }
    for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(bytes)) {
        // SAFETY: as in `quantize_row_q8_0`; stores write 32 bytes at offsets 4 + 32k < 260
        // of the 292-byte block.
        unsafe {
            let (amax, nan) = abs_max(x);
            if amax == 0.0 && !nan {
                out.fill(0);
                continue;
            }
            // The reference keeps the first value of largest magnitude, with its sign.
            let amaxv = _mm256_set1_ps(amax);
            let mut first = QK_K;
            for (k, c) in x.chunks_exact(8).enumerate() {
                let hit = _mm256_cmp_ps::<_CMP_EQ_OQ>(abs(_mm256_loadu_ps(c.as_ptr())), amaxv);
                let mask = _mm256_movemask_ps(hit);
                if mask != 0 {
                    first = 8 * k + mask.trailing_zeros() as usize;
                    break;
                }
            }
            let iscale = if first < QK_K {
                -127.0 / x[first]
            } else {
                f32::NAN
            };
            if nan || !amax.is_finite() || !iscale.is_finite() {
                out.copy_from_slice(bytemuck::bytes_of(&BlockQ8K::quantize(x)));
                continue;
            }
            let isv = _mm256_set1_ps(iscale);
            let magic = _mm256_set1_ps(12_582_912.0);
            let mant = _mm256_set1_epi32(0x007F_FFFF);
            let half = _mm256_set1_epi32(0x0040_0000);
            let qs = out.as_mut_ptr().add(4);
            for k in 0..QK_K / 32 {
                let mut q = [_mm256_setzero_si256(); 4];
                for (l, ql) in q.iter_mut().enumerate() {
                    let v = _mm256_mul_ps(isv, _mm256_loadu_ps(x.as_ptr().add(32 * k + 8 * l)));
                    // nearest_int: the integer lands in the low mantissa bits of v + 1.5·2²³.
                    let bits = _mm256_castps_si256(_mm256_add_ps(v, magic));
                    let n = _mm256_sub_epi32(_mm256_and_si256(bits, mant), half);
                    // |v| ≤ 127·(1 + 2⁻²²): n in −127..=127, so the reference's
                    // `.min(127) as i8` is the identity, as the saturating pack is.
                    *ql = n;
                }
                _mm256_storeu_si256(qs.add(32 * k).cast(), pack32(q));
            }
            out[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
            for j in 0..QK_K / 16 {
                let s: i16 = out[4 + 16 * j..4 + 16 * j + 16]
                    .iter()
                    .map(|&b| b as i8 as i16)
                    .sum();
                out[260 + 2 * j..262 + 2 * j].copy_from_slice(&s.to_le_bytes());
            }
        }
    }
}

/// `ggml_arith::quantize_row_q8_0_x86`: ggml's AVX2 `quantize_row_q8_0`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn ggml_quantize_row_q8_0(x: &[f32], out: &mut [u8]) {
    use std::arch::x86_64::*;
    let nb = (x.len() / 32).min(out.len() / Q8_0_BYTES);
    // SAFETY: block i < nb: 32 f32 readable at 32·i of x, 34 bytes writable at 34·i of
    // out; unaligned loads and stores; the CPU features are the caller's guarantee.
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        // Bytes of `packs` come out in the order 0-3, 8-11, 16-19, 24-27, 4-7, …: dwords
        // 0, 4, 1, 5, … restore value order.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for i in 0..nb {
            let p = x.as_ptr().add(32 * i);
            let v = [
                _mm256_loadu_ps(p),
                _mm256_loadu_ps(p.add(8)),
                _mm256_loadu_ps(p.add(16)),
                _mm256_loadu_ps(p.add(24)),
            ];
            let m = _mm256_max_ps(
                _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])),
            );
            let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
            let d = amax / 127.0;
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(d));
            let blk = out.as_mut_ptr().add(Q8_0_BYTES * i);
            blk.cast::<u16>()
                .write_unaligned(_mm_extract_epi16::<0>(h) as u16);
            let idv = _mm256_set1_ps(id);
            let q = v.map(|vk| {
                let t = _mm256_mul_ps(vk, idv);
                // NaN (only from infinite inputs) becomes 0, as `as i32` makes it.
                let t = _mm256_and_ps(t, _mm256_cmp_ps::<_CMP_ORD_Q>(t, t));
                _mm256_cvtps_epi32(_mm256_round_ps::<
                    { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
                >(t))
            });
            let b = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let b = _mm256_permutevar8x32_epi32(b, order);
            _mm256_storeu_si256(blk.add(2).cast(), b);
        }
    }
}

/// `ggml_arith::quantize_row_q8_1_x86`: ggml's AVX2 `quantize_row_q8_1`, its instructions in
/// its order.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn ggml_quantize_row_q8_1(x: &[f32], out: &mut [u8]) {
    use std::arch::x86_64::*;
    let nb = (x.len() / 32).min(out.len() / Q8_1_BYTES);
    // (Register-only F16C operations: safe inside this function's features.)
    let f16_bits = |v: f32| {
        let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(v));
        _mm_extract_epi16::<0>(h) as u16
    };
    // SAFETY: block i < nb: 32 f32 readable at 32·i of x, 36 bytes writable at 36·i of
    // out; unaligned loads and stores; the CPU features are the caller's guarantee.
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        // Bytes of `packs` come out in the order 0-3, 8-11, 16-19, 24-27, 4-7, …: dwords
        // 0, 4, 1, 5, … restore value order.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for i in 0..nb {
            let p = x.as_ptr().add(32 * i);
            let v = [
                _mm256_loadu_ps(p),
                _mm256_loadu_ps(p.add(8)),
                _mm256_loadu_ps(p.add(16)),
                _mm256_loadu_ps(p.add(24)),
            ];
            // ggml's order (it matters only for NaN: `maxps` keeps its second operand).
            let mut m = _mm256_andnot_ps(sign, v[0]);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[1]));
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[2]));
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[3]));
            let m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(m), _mm256_castps256_ps128(m));
            let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
            let d = amax / 127.0;
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let idv = _mm256_set1_ps(id);
            let q = v.map(|vk| {
                _mm256_cvtps_epi32(_mm256_round_ps::<
                    { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
                >(_mm256_mul_ps(vk, idv)))
            });
            // Σ codes over the 32-bit values (wrapping), as ggml's `hsum_i32_8`.
            let s8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let s4 = _mm_add_epi32(
                _mm256_castsi256_si128(s8),
                _mm256_extracti128_si256::<1>(s8),
            );
            let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
            let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<0b10_11_00_01>(s2));
            let sum = _mm_cvtsi128_si32(s1);
            let blk = out.as_mut_ptr().add(Q8_1_BYTES * i);
            blk.cast::<u16>().write_unaligned(f16_bits(d));
            blk.add(2)
                .cast::<u16>()
                .write_unaligned(f16_bits(d * sum as f32));
            let b = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let b = _mm256_permutevar8x32_epi32(b, order);
            _mm256_storeu_si256(blk.add(4).cast(), b);
        }
    }
}
