//! ggml's vectorised `expf` (`ggml_v_expf`) and the SiLU / SwiGLU rows built on it.

#[cfg(target_arch = "x86_64")]
use crate::cpu::{isa, Isa};

/// ggml's vectorised `expf` (`ggml_v_expf`, the AVX-512 variant, derived from Arm's optimized
/// routines; maximum error about 1.5 ulp), one lane: `x = n·ln2 + b` with n rounded to an
/// integer, a degree-5 polynomial for `e^b`, scaled by `2ⁿ`; results flush to 0 below about
/// −104 and to +∞ above about 88.4.
#[inline]
pub fn v_expf(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0; // 0x1.8p23: adding it rounds to an integer
    let log2e = f32::from_bits(0x3fb8_aa3b); // 0x1.715476p+0
    let ln2_hi = f32::from_bits(0x3f31_7200); // 0x1.62e4p-1
    let ln2_lo = f32::from_bits(0x35bf_be8e); // 0x1.7f7d1cp-20
    let c5 = f32::from_bits(0x3c07_2010); // 0x1.0e4020p-7
    let c4 = f32::from_bits(0x3d2b_9f17); // 0x1.573e2ep-5
    let c3 = f32::from_bits(0x3e2a_af33); // 0x1.555e66p-3
    let c2 = f32::from_bits(0x3eff_fedb); // 0x1.fffdb6p-2
    let c1 = f32::from_bits(0x3f7f_fff6); // 0x1.ffffecp-1
    let z = x.mul_add(log2e, SHIFT);
    let n = z - SHIFT;
    let b = (-n).mul_add(ln2_lo, (-n).mul_add(ln2_hi, x));
    let u = b * b;
    let j = c5
        .mul_add(b, c4)
        .mul_add(u, c3.mul_add(b, c2))
        .mul_add(u, c1.mul_add(b, 1.0));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    scalef(j, n)
}

/// `_mm512_scalef_ps` for an integral `n` with `|n| ≤ 192`: `j · 2ⁿ`, rounded once.
#[inline(always)]
pub(super) fn scalef(j: f32, n: f32) -> f32 {
    let e = n as i32;
    if (-126..=127).contains(&e) {
        j * f32::from_bits(((e + 127) as u32) << 23)
    } else {
        // 2ⁿ is not an f32 here; the product is exact in f64 and rounds once to f32.
        (j as f64 * f64::from_bits(((e + 1023) as u64) << 52)) as f32
    }
}

/// [`v_expf`] on 16 lanes at once (one AVX-512 register of ggml's). With AVX-512 it runs
/// ggml's own instruction sequence ([`x86::v_expf_512`], `scalef` doing the scaling);
/// elsewhere the portable [`v_expf16_body`]. The tests hold both to [`v_expf`]'s bits.
#[inline(always)]
pub(crate) fn v_expf16(x: &[f32; 16]) -> [f32; 16] {
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx512 {
        // SAFETY: `isa()` is AVX-512 or better only when the CPU has AVX-512 F.
        return unsafe { crate::kernels::x86::exp::v_expf16_512(x) };
    }
    v_expf16_body(x)
}

/// The portable body of [`v_expf16`]: the same operations lane by lane, with the scaling by
/// `2ⁿ` done by building the power of two for lanes in the normal range and saturation for
/// lanes far outside it (only a lane in between, or NaN, sends the group to the scalar path).
/// Compiled with AVX2 it vectorises only in part, several times slower than
/// `kernels::x86::exp::v_expf_512` (figures in `docs/kernel-bench-notes.md`).
#[inline(always)]
pub(super) fn v_expf16_body(x: &[f32; 16]) -> [f32; 16] {
    const SHIFT: f32 = 12_582_912.0;
    let log2e = f32::from_bits(0x3fb8_aa3b);
    let ln2_hi = f32::from_bits(0x3f31_7200);
    let ln2_lo = f32::from_bits(0x35bf_be8e);
    let c5 = f32::from_bits(0x3c07_2010);
    let c4 = f32::from_bits(0x3d2b_9f17);
    let c3 = f32::from_bits(0x3e2a_af33);
    let c2 = f32::from_bits(0x3eff_fedb);
    let c1 = f32::from_bits(0x3f7f_fff6);
    let mut n = [0f32; 16];
    let mut j = [0f32; 16];
    for l in 0..16 {
        let z = x[l].mul_add(log2e, SHIFT);
        n[l] = z - SHIFT;
        let b = (-n[l]).mul_add(ln2_lo, (-n[l]).mul_add(ln2_hi, x[l]));
        let u = b * b;
        j[l] = c5
            .mul_add(b, c4)
            .mul_add(u, c3.mul_add(b, c2))
            .mul_add(u, c1.mul_add(b, 1.0));
    }
    let mut out = [0f32; 16];
    // Lanes with |n| ≤ 126 scale by a power of two built in the exponent field; lanes with
    // |n| > 192 (−∞ among them: masked scores) saturate to 0 or ∞, as in `v_expf`.
    let mut rare = false;
    for l in 0..16 {
        let normal = n[l].abs() <= 126.0;
        let e = if normal { n[l] as i32 } else { 0 };
        let scaled = j[l] * f32::from_bits(((e + 127) as u32) << 23);
        let saturated = if n[l] <= 0.0 { 0.0 } else { f32::INFINITY };
        out[l] = if normal { scaled } else { saturated };
        let beyond = n[l].abs() > 192.0; // false for NaN
        rare |= !normal && !beyond;
    }
    if rare {
        // A lane between the two ranges, or NaN: the scalar path, lane by lane.
        for l in 0..16 {
            out[l] = v_expf(x[l]);
        }
    }
    out
}

/// ggml's `ggml_vec_swiglu_f32` on AVX-512: `out = silu(g)·u`, with
/// `silu(x) = x / (1 + v_expf(0 − x))` for groups of 16 and `x / (1 + expf(−x))` (the C
/// library's `expf`) for the remaining tail. `u = None` gives plain SiLU
/// (`ggml_vec_silu_f32`, same split).
pub(crate) fn swiglu_row(out: &mut [f32], g: &[f32], u: Option<&[f32]>) {
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx512 {
        // SAFETY: `isa()` is AVX-512 or better only when the CPU has AVX-512 F.
        let done = unsafe { crate::kernels::x86::exp::swiglu_groups_512(out, g, u) };
        return swiglu_tail(out, g, u, done);
    }
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx2 {
        // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2, FMA and F16C.
        return unsafe { swiglu_row_avx2(out, g, u) };
    }
    swiglu_row_body(out, g, u)
}

#[inline(always)]
pub(super) fn swiglu_row_body(out: &mut [f32], g: &[f32], u: Option<&[f32]>) {
    let n = out.len().min(g.len());
    let np = n / 16 * 16;
    for i in (0..np).step_by(16) {
        let mut neg = [0f32; 16];
        for l in 0..16 {
            neg[l] = 0.0 - g[i + l];
        }
        let e = v_expf16_body(&neg);
        for l in 0..16 {
            let s = g[i + l] / (1.0 + e[l]);
            out[i + l] = match u {
                Some(u) => s * u[i + l],
                None => s,
            };
        }
    }
    swiglu_tail(out, g, u, np);
}

/// The elements of a SwiGLU row from `from` on, one at a time with the C library's `expf`
/// (ggml's scalar tail).
#[inline(always)]
pub(super) fn swiglu_tail(out: &mut [f32], g: &[f32], u: Option<&[f32]>, from: usize) {
    let n = out.len().min(g.len());
    for i in from..n {
        let s = crate::kernels::expf::silu(g[i]);
        out[i] = match u {
            Some(u) => s * u[i],
            None => s,
        };
    }
}

crate::kernels::x86::target_features!("avx2,fma,f16c":
    /// [`swiglu_row_body`] compiled for AVX2 + FMA + F16C.
    fn swiglu_row_avx2(out: &mut [f32], g: &[f32], u: Option<&[f32]>) = swiglu_row_body;
);
