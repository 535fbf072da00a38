//! Activations quantized as ggml's x86 build does (`quantize_row_q8_0`, `quantize_row_q8_1`:
//! `id = 127/amax`, codes rounded half to even), not as the reference quantizers of files.

use half::f16;

use super::lanes::{Q8_0_BYTES, Q8_1_BYTES};
#[cfg(target_arch = "x86_64")]
use crate::cpu::{isa, Isa};
use crate::dtype::DType;
use crate::types::FromF32Fn;

/// The runtime quantizer of activations for `vdt`, when it differs from the type's
/// reference one.
pub(crate) fn activation_quantizer(vdt: DType) -> Option<FromF32Fn> {
    match vdt {
        DType::Q8_0 => Some(quantize_row_q8_0_x86),
        DType::Q8_1 => Some(quantize_row_q8_1_x86),
        _ => None,
    }
}

/// ggml's x86 `quantize_row_q8_0`: per block of 32, `d = amax/127` stored as f16,
/// codes `round_half_even(x · 127/amax)`. `x.len()` is a multiple of 32 and `out` holds
/// `x.len()/32` blocks.
pub fn quantize_row_q8_0_x86(x: &[f32], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx2 {
        // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2, FMA and F16C.
        return unsafe { crate::kernels::x86::quantize::ggml_quantize_row_q8_0(x, out) };
    }
    quantize_row_q8_0_body(x, out)
}

/// [`quantize_row_q8_0_x86`]'s portable body.
#[inline(always)]
pub(super) fn quantize_row_q8_0_body(x: &[f32], out: &mut [u8]) {
    for (xs, blk) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let amax = xs.iter().fold(0f32, |m, &v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        blk[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        for (q, &v) in blk[2..].iter_mut().zip(xs) {
            *q = ((v * id).round_ties_even() as i32).clamp(-128, 127) as i8 as u8;
        }
    }
}

/// ggml's x86 `quantize_row_q8_1` (AVX2 build), for every input: per block of 32,
/// `amax = max |x|` in the order of its `max_ps` instructions, `d = amax/127` stored as f16,
/// `id = 127/amax` (0 when `amax` is 0), codes `cvtps2dq(round_half_even(x·id))` saturated to
/// i8, and `s = f16(d · Σ codes)` (the sum of the 32-bit codes, wrapping, as f32). For
/// finite inputs with a normal `amax` this is [`quantize_row_q8_0_x86`]'s `d` and codes;
/// NaN, infinities and tiny maxima give what the instructions give (`cvtps2dq` turns NaN
/// and out-of-range values into `i32::MIN`; `maxps` returns its second operand when one is
/// NaN). `x.len()` is a multiple of 32 and `out` holds `x.len()/32` blocks of 36 bytes
/// (`d`, `s`, 32 codes).
pub fn quantize_row_q8_1_x86(x: &[f32], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx2 {
        // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2, FMA and F16C.
        return unsafe { crate::kernels::x86::quantize::ggml_quantize_row_q8_1(x, out) };
    }
    quantize_row_q8_1_body(x, out)
}

/// x86's `maxps` on one lane: `a` if `a > b`, else `b` (so `b` when either is NaN).
#[inline(always)]
pub(super) fn maxps(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// x86's `cvtps2dq` on one lane of an integral value: `i32::MIN` for NaN and values outside
/// the `i32` range.
#[inline(always)]
pub(super) fn cvtps2dq(r: f32) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&r) {
        r as i32
    } else {
        i32::MIN
    }
}

/// [`quantize_row_q8_1_x86`]'s portable body.
#[inline(always)]
pub(super) fn quantize_row_q8_1_body(x: &[f32], out: &mut [u8]) {
    for (xs, blk) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_1_BYTES)) {
        // ggml: lanes of |v0|, then max with |v1|, |v2|, |v3| (8 lanes each), then the
        // halves (high first), the upper pair, the odd lane.
        let mut m = [0f32; 8];
        for l in 0..8 {
            m[l] = xs[l].abs();
            for k in 1..4 {
                m[l] = maxps(m[l], xs[8 * k + l].abs());
            }
        }
        let m4: [f32; 4] = std::array::from_fn(|l| maxps(m[4 + l], m[l]));
        let m2 = [maxps(m4[0], m4[2]), maxps(m4[1], m4[3])];
        let amax = maxps(m2[0], m2[1]);
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in blk[4..].iter_mut().zip(xs) {
            let c = cvtps2dq((v * id).round_ties_even());
            sum = sum.wrapping_add(c);
            *q = c.clamp(-128, 127) as i8 as u8;
        }
        blk[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        blk[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_le_bytes());
    }
}
