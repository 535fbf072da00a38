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
//! infinities, NaN) is handed to the C library. `kernels::x86::exp::expf4` runs it on four lanes,
//! `expf16` there on sixteen.

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
pub(crate) const INV_LN2_N: f64 = f64::from_bits(0x4047_1547_652b_82fe);
/// `1.5 · 2^52`: added to round to an integer held in the low mantissa bits.
pub(crate) const SHIFT: f64 = 6_755_399_441_055_744.0;
/// The cubic's coefficients, scaled for `r` in units of `ln2 / N`.
pub(crate) const C0: f64 = f64::from_bits(0x3ebc_6af8_4b91_2394);
pub(crate) const C1: f64 = f64::from_bits(0x3f2e_bfce_50fa_c4f3);
pub(crate) const C2: f64 = f64::from_bits(0x3f96_2e42_ff0c_52d6);
/// `bits(2^(i/N)) − (i << 52) / N`, i = 0..N (each power correctly rounded).
pub(crate) const T: [u64; 32] = [
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
pub(crate) fn in_range(x: f32) -> bool {
    x.abs() < 88.0
}

/// glibc's `expf(x)`, bit for bit (see the module docs): the formula the lanes of
/// `kernels::x86::exp::expf4` follow, written out one value at a time (the kernels keep calling the C
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
                unsafe {
                    _mm_storeu_ps(
                        out.as_mut_ptr(),
                        crate::kernels::x86::exp::expf4(_mm_loadu_ps(c.as_ptr())),
                    )
                };
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
                    _mm512_storeu_ps(
                        out.as_mut_ptr(),
                        crate::kernels::x86::exp::expf16(_mm512_loadu_ps(c.as_ptr())),
                    )
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
