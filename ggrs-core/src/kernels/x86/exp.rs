//! Vectorised `exp` written with intrinsics: ggml's `ggml_v_expf` on AVX-512 and the SwiGLU
//! groups built on it, and glibc's `expf` on four (AVX2 + FMA) and sixteen (AVX-512) lanes.

use std::arch::x86_64::*;

use crate::kernels::expf::{in_range, C0, C1, C2, INV_LN2_N, SHIFT, T};

/// ggml's `ggml_v_expf` for AVX-512: `ggml_arith::v_expf` on sixteen lanes, the scaling by
/// `2ⁿ` done by `scalef` (rounded once, as `ggml_arith`'s `scalef` does) and lanes with
/// `|n| > 192` saturated to 0 or +∞.
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn v_expf_512(x: __m512) -> __m512 {
    let c = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
    let shift = _mm512_set1_ps(12_582_912.0);
    let z = _mm512_fmadd_ps(x, c(0x3fb8_aa3b), shift);
    let n = _mm512_sub_ps(z, shift);
    let b = _mm512_fnmadd_ps(n, c(0x35bf_be8e), _mm512_fnmadd_ps(n, c(0x3f31_7200), x));
    let far = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
    let u = _mm512_mul_ps(b, b);
    let j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(
            _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
            u,
            _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
        ),
        u,
        _mm512_fmadd_ps(c(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
    );
    let res = _mm512_scalef_ps(j, n);
    if far == 0 {
        return res;
    }
    let zero = _mm512_setzero_ps();
    let low = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, zero);
    let alt = _mm512_mask_blend_ps(low, _mm512_set1_ps(f32::INFINITY), zero);
    _mm512_mask_blend_ps(far, res, alt)
}

/// `ggml_arith::v_expf16` through [`v_expf_512`].
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn v_expf16_512(x: &[f32; 16]) -> [f32; 16] {
    let mut out = [0f32; 16];
    // SAFETY: sixteen floats readable at x and writable at out; unaligned accesses.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), v_expf_512(_mm512_loadu_ps(x.as_ptr()))) };
    out
}

/// ggml's `ggml_vec_swiglu_f32` (`ggml_vec_silu_f32` without `u`) on AVX-512 for the
/// whole groups of 16 of the row: `out = g / (1 + v_expf(0 − g)) · u`. Returns where the
/// groups end (the tail is `ggml_arith::swiglu_tail`'s).
///
/// # Safety
/// The CPU supports AVX-512 F.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn swiglu_groups_512(out: &mut [f32], g: &[f32], u: Option<&[f32]>) -> usize {
    let n = out
        .len()
        .min(g.len())
        .min(u.map_or(usize::MAX, |u| u.len()));
    let np = n / 16 * 16;
    let one = _mm512_set1_ps(1.0);
    let zero = _mm512_setzero_ps();
    for i in (0..np).step_by(16) {
        // SAFETY: i + 16 ≤ n, within out, g and u; unaligned accesses.
        unsafe {
            let x = _mm512_loadu_ps(g.as_ptr().add(i));
            let e = v_expf_512(_mm512_sub_ps(zero, x));
            let s = _mm512_div_ps(x, _mm512_add_ps(one, e));
            let s = match u {
                Some(u) => _mm512_mul_ps(s, _mm512_loadu_ps(u.as_ptr().add(i))),
                None => s,
            };
            _mm512_storeu_ps(out.as_mut_ptr().add(i), s);
        }
    }
    np
}

/// `kernels::expf`'s `expf` of four lanes.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn expf4(x: __m128) -> __m128 {
    let xd = _mm256_cvtps_pd(x);
    let k = _mm256_fmadd_pd(_mm256_set1_pd(INV_LN2_N), xd, _mm256_set1_pd(SHIFT));
    let ki = _mm256_castpd_si256(k);
    let kd = _mm256_sub_pd(k, _mm256_set1_pd(SHIFT));
    let r = _mm256_fmadd_pd(
        _mm256_set1_pd(INV_LN2_N),
        xd,
        _mm256_sub_pd(_mm256_setzero_pd(), kd),
    );
    let idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    // SAFETY: every index is in 0..32, inside the table.
    let t = unsafe { _mm256_i64gather_epi64::<8>(T.as_ptr().cast(), idx) };
    let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
    let z = _mm256_fmadd_pd(_mm256_set1_pd(C0), r, _mm256_set1_pd(C1));
    let p = _mm256_fmadd_pd(_mm256_set1_pd(C2), r, _mm256_set1_pd(1.0));
    let y = _mm256_fmadd_pd(z, _mm256_mul_pd(r, r), p);
    let out = _mm256_cvtpd_ps(_mm256_mul_pd(y, s));
    // Lanes outside the table's range (or NaN): the C library, one by one.
    let big = _mm_cmp_ps::<_CMP_NLT_UQ>(_mm_andnot_ps(_mm_set1_ps(-0.0), x), _mm_set1_ps(88.0));
    if _mm_movemask_ps(big) == 0 {
        return out;
    }
    let (mut xs, mut ys) = ([0f32; 4], [0f32; 4]);
    // SAFETY: 4 f32 readable/writable in each array.
    unsafe {
        _mm_storeu_ps(xs.as_mut_ptr(), x);
        _mm_storeu_ps(ys.as_mut_ptr(), out);
    }
    for (y, &x) in ys.iter_mut().zip(&xs) {
        if !in_range(x) {
            *y = x.exp();
        }
    }
    // SAFETY: 4 f32 readable.
    unsafe { _mm_loadu_ps(ys.as_ptr()) }
}

/// `kernels::expf`'s `expf` of sixteen lanes, in two halves of eight doubles (the table read with
/// two-register permutes instead of a gather).
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn expf16(x: __m512) -> __m512 {
    // SAFETY: the table has 32 entries: four registers of eight.
    let t: [__m512i; 4] =
        std::array::from_fn(|i| unsafe { _mm512_loadu_si512(T.as_ptr().add(8 * i).cast()) });
    let half = |xs: __m256| {
        let xd = _mm512_cvtps_pd(xs);
        let k = _mm512_fmadd_pd(_mm512_set1_pd(INV_LN2_N), xd, _mm512_set1_pd(SHIFT));
        let ki = _mm512_castpd_si512(k);
        let kd = _mm512_sub_pd(k, _mm512_set1_pd(SHIFT));
        let r = _mm512_fmadd_pd(
            _mm512_set1_pd(INV_LN2_N),
            xd,
            _mm512_sub_pd(_mm512_setzero_pd(), kd),
        );
        // Entry ki mod 32: bits 0..4 pick one of 16 in a register pair, bit 4 the pair.
        let idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
        let lo = _mm512_permutex2var_epi64(t[0], idx, t[1]);
        let hi = _mm512_permutex2var_epi64(t[2], idx, t[3]);
        let upper = _mm512_test_epi64_mask(idx, _mm512_set1_epi64(16));
        let tv = _mm512_mask_blend_epi64(upper, lo, hi);
        let s = _mm512_castsi512_pd(_mm512_add_epi64(tv, _mm512_slli_epi64::<47>(ki)));
        let z = _mm512_fmadd_pd(_mm512_set1_pd(C0), r, _mm512_set1_pd(C1));
        let p = _mm512_fmadd_pd(_mm512_set1_pd(C2), r, _mm512_set1_pd(1.0));
        let y = _mm512_fmadd_pd(z, _mm512_mul_pd(r, r), p);
        _mm512_cvtpd_ps(_mm512_mul_pd(y, s))
    };
    let lo = half(_mm512_castps512_ps256(x));
    let hi = half(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
        _mm512_castps_pd(x),
    )));
    let out = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
        _mm512_castps_pd(_mm512_castps256_ps512(lo)),
        _mm256_castps_pd(hi),
    ));
    // Lanes outside the table's range (or NaN): the C library, one by one.
    let big = _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(_mm512_abs_ps(x), _mm512_set1_ps(88.0));
    if big == 0 {
        return out;
    }
    let (mut xs, mut ys) = ([0f32; 16], [0f32; 16]);
    // SAFETY: 16 f32 readable/writable in each array.
    unsafe {
        _mm512_storeu_ps(xs.as_mut_ptr(), x);
        _mm512_storeu_ps(ys.as_mut_ptr(), out);
    }
    for (y, &x) in ys.iter_mut().zip(&xs) {
        if !in_range(x) {
            *y = x.exp();
        }
    }
    // SAFETY: 16 f32 readable.
    unsafe { _mm512_loadu_ps(ys.as_ptr()) }
}
