//! The single-precision exponential of glibc (`expf`, from ARM's optimized-routines: a
//! 32-entry table of `2^(i/32)` and a cubic in double precision), reproduced so that it can
//! run several lanes at once with the same bits.
//!
//! ggml's CPU kernels call the C library's `expf` one value at a time (the flash-attention
//! key loop, the merge of its split parts); llama.cpp's reference outputs were made with
//! glibc's, whose x86-64 build with FMA (`__expf_fma`) computes, for `|x| < 88`:
//!
//! ```text
//! k  = fma(N/ln2, x, 1.5·2^52)          (rounds x·N/ln2 to an integer in the low bits)
//! kd = k − 1.5·2^52,  r = fma(N/ln2, x, −kd)
//! s  = 2^(k/N), from T[k mod N] plus k·2^(52−5) in the exponent field
//! y  = fma(fma(C0, r, C1), r², fma(C2, r, 1)) · s,  returned rounded to f32
//! ```
//!
//! [`expf`] is that formula (identical to glibc's `expf` for every finite `|x| < 88`:
//! checked against it for all 2,237,661,184 such inputs when this module was written, and on
//! a stride through them by the tests); anything else (overflow and underflow territory,
//! infinities, NaN) is handed to the C library. [`x86::expf4`] runs it on four lanes,
//! [`x86::expf16`] on sixteen.

// The table path runs in the x86-64 lanes (and the tests); other targets call the C library.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

/// SiLU, `x·σ(x)`, with the C library's `expf` (what ggml's scalar paths use).
#[inline(always)]
pub(crate) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `N`: table entries per octave.
#[cfg(test)]
const N: u64 = 32;
/// `N / ln 2`.
const INV_LN2_N: f64 = f64::from_bits(0x4047_1547_652b_82fe);
/// `1.5 · 2^52`: added to round to an integer held in the low mantissa bits.
const SHIFT: f64 = 6_755_399_441_055_744.0;
/// The cubic's coefficients, scaled for `r` in units of `ln2 / N`.
const C0: f64 = f64::from_bits(0x3ebc_6af8_4b91_2394);
const C1: f64 = f64::from_bits(0x3f2e_bfce_50fa_c4f3);
const C2: f64 = f64::from_bits(0x3f96_2e42_ff0c_52d6);
/// `bits(2^(i/N)) − (i << 52) / N`, i = 0..N (each power correctly rounded).
const T: [u64; 32] = [
    0x3ff0_0000_0000_0000,
    0x3fef_d9b0_d315_8574,
    0x3fef_b558_6cf9_890f,
    0x3fef_9301_d012_5b51,
    0x3fef_72b8_3c7d_517b,
    0x3fef_5487_3168_b9aa,
    0x3fef_387a_6e75_6238,
    0x3fef_1e9d_f51f_dee1,
    0x3fef_06fe_0a31_b715,
    0x3fee_f1a7_373a_a9cb,
    0x3fee_dea6_4c12_3422,
    0x3fee_ce08_6061_892d,
    0x3fee_bfda_d536_2a27,
    0x3fee_b42b_569d_4f82,
    0x3fee_ab07_dd48_5429,
    0x3fee_a47e_b03a_5585,
    0x3fee_a09e_667f_3bcd,
    0x3fee_9f75_e8ec_5f74,
    0x3fee_a114_73eb_0187,
    0x3fee_a589_994c_ce13,
    0x3fee_ace5_422a_a0db,
    0x3fee_b737_b0cd_c5e5,
    0x3fee_c491_82a3_f090,
    0x3fee_d503_b23e_255d,
    0x3fee_e89f_995a_d3ad,
    0x3fee_ff76_f2fb_5e47,
    0x3fef_199b_dd85_529c,
    0x3fef_3720_dcef_9069,
    0x3fef_5818_dcfb_a487,
    0x3fef_7c97_337b_9b5f,
    0x3fef_a4af_a2a4_90da,
    0x3fef_d076_5b6e_4540,
];

/// Whether `x` takes the table path (finite, `|x| < 88`); other values go to the C library.
#[inline(always)]
fn in_range(x: f32) -> bool {
    x.abs() < 88.0
}

/// glibc's `expf(x)`, bit for bit (see the module docs): the formula the lanes of
/// [`x86::expf4`] follow, written out one value at a time (the kernels keep calling the C
/// library where they go one value at a time).
#[cfg(test)]
pub(crate) fn expf(x: f32) -> f32 {
    if !in_range(x) {
        return x.exp();
    }
    let xd = f64::from(x);
    let k = INV_LN2_N.mul_add(xd, SHIFT);
    let ki = k.to_bits();
    let kd = k - SHIFT;
    let r = INV_LN2_N.mul_add(xd, -kd);
    let s = f64::from_bits(T[(ki % N) as usize].wrapping_add(ki << 47));
    let z = C0.mul_add(r, C1);
    let y = z.mul_add(r * r, C2.mul_add(r, 1.0));
    (y * s) as f32
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    use super::{C0, C1, C2, INV_LN2_N, SHIFT, T};

    /// [`super::expf`] of four lanes.
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
            if !super::in_range(x) {
                *y = x.exp();
            }
        }
        // SAFETY: 4 f32 readable.
        unsafe { _mm_loadu_ps(ys.as_ptr()) }
    }

    /// [`super::expf`] of sixteen lanes, in two halves of eight doubles (the table read with
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
            if !super::in_range(x) {
                *y = x.exp();
            }
        }
        // SAFETY: 16 f32 readable.
        unsafe { _mm512_loadu_ps(ys.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every 61st bit pattern (all exponents and signs, both paths, NaNs and infinities):
    /// the scalar formula and the four- and sixteen-lane ones equal the C library's `expf`.
    #[test]
    fn matches_the_c_library() {
        let xs: Vec<f32> = (0..=u32::MAX / 61)
            .map(|i| f32::from_bits(i * 61))
            .collect();
        for &x in &xs {
            let (a, b) = (expf(x), x.exp());
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "expf({x:e}) = {a:e}, C library {b:e}"
            );
        }
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::features().avx2 && crate::cpu::features().fma {
            use std::arch::x86_64::{_mm_loadu_ps, _mm_storeu_ps};
            for c in xs.chunks_exact(4) {
                let mut out = [0f32; 4];
                // SAFETY: the CPU was checked; 4 f32 readable and writable.
                unsafe { _mm_storeu_ps(out.as_mut_ptr(), x86::expf4(_mm_loadu_ps(c.as_ptr()))) };
                for (&x, &a) in c.iter().zip(&out) {
                    let b = x.exp();
                    assert!(
                        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                        "expf4({x:e}) = {a:e}, C library {b:e}"
                    );
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::features().avx512f {
            use std::arch::x86_64::{_mm512_loadu_ps, _mm512_storeu_ps};
            for c in xs.chunks_exact(16) {
                let mut out = [0f32; 16];
                // SAFETY: the CPU was checked; 16 f32 readable and writable.
                unsafe {
                    _mm512_storeu_ps(out.as_mut_ptr(), x86::expf16(_mm512_loadu_ps(c.as_ptr())))
                };
                for (&x, &a) in c.iter().zip(&out) {
                    let b = x.exp();
                    assert!(
                        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                        "expf16({x:e}) = {a:e}, C library {b:e}"
                    );
                }
            }
        }
    }
}
