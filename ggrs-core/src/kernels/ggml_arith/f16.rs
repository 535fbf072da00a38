//! ggml's F16 and F32 dot products in its orders (`ggml_vec_dot_f16`, tinyBLAS) and the f16
//! tiles of `mul_mat`'s F16 prompts: portable bodies, their AVX2 builds and the explicit
//! kernels of `kernels::x86::f16`.

use super::lanes::{dispatch_dot, half_at, reduce16};
use crate::cpu::{isa, Isa};

/// [`dot_f32_lanes16`]'s body (portable; compiled with FMA where the CPU has it, where
/// `mul_add` is one instruction instead of a library call, with the same bits).
#[inline(always)]
pub(super) fn dot_f32_lanes16_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let (a, b): (&[f32], &[f32]) = (bytemuck::cast_slice(a), bytemuck::cast_slice(b));
    let m = n / 16 * 16;
    let mut lanes = [0f32; 16];
    for (ca, cb) in a[..m].chunks_exact(16).zip(b[..m].chunks_exact(16)) {
        for (l, lane) in lanes.iter_mut().enumerate() {
            *lane = ca[l].mul_add(cb[l], *lane);
        }
    }
    let mut sum = reduce16(&lanes);
    for i in m..n {
        sum += a[i] * b[i];
    }
    sum
}

/// [`dot_f32_vec`]'s body (portable; compiled with FMA where the CPU has it).
#[inline(always)]
pub(super) fn dot_f32_vec_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let (a, b): (&[f32], &[f32]) = (bytemuck::cast_slice(a), bytemuck::cast_slice(b));
    let np = n & !63;
    let mut sum = dot_f16_vec_f32_body(&a[..np], &b[..np]);
    for i in np..n {
        sum += a[i] * b[i];
    }
    sum
}

#[inline(always)]
pub(crate) fn dot_f16_lanes16_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut lanes = [0f32; 16];
    for i in (0..n / 16 * 16).step_by(16) {
        for (l, lane) in lanes.iter_mut().enumerate() {
            let (x, y) = (half_at(a, 2 * (i + l)), half_at(b, 2 * (i + l)));
            *lane = x.mul_add(y, *lane);
        }
    }
    reduce16(&lanes)
}

/// ggml's `ggml_vec_dot_f16` on AVX-512 over values already widened to f32 (`x`, `y` hold f16
/// values): four registers of 16 FMA lanes over blocks of 64, registers 0+2 and 1+3 then
/// 0+1 added, [`reduce16`]; the tail products (exact in f32) added in f64.
#[inline(always)]
pub(crate) fn dot_f16_vec_f32_body(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let np = n & !63;
    let mut lanes = [0f32; 64];
    for (cx, cy) in x[..np].chunks_exact(64).zip(y[..np].chunks_exact(64)) {
        for t in 0..64 {
            lanes[t] = cx[t].mul_add(cy[t], lanes[t]);
        }
    }
    let mut r32 = [0f32; 32];
    for t in 0..32 {
        r32[t] = lanes[t] + lanes[t + 32];
    }
    let mut r16 = [0f32; 16];
    for t in 0..16 {
        r16[t] = r32[t] + r32[t + 16];
    }
    let mut sum = reduce16(&r16) as f64;
    for i in np..n {
        sum += (x[i] * y[i]) as f64;
    }
    sum as f32
}

/// `ggml_vec_dot_f16` on AVX-512 over f16 rows: [`dot_f16_vec_f32_body`]'s arithmetic with
/// each value widened on the way.
#[inline(always)]
pub(crate) fn dot_f16_vec_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    // Widen in blocks so the arithmetic stays that of `dot_f16_vec_f32_body`.
    let np = n & !63;
    let mut lanes = [0f32; 64];
    for blk in (0..np).step_by(64) {
        for (t, lane) in lanes.iter_mut().enumerate() {
            let (x, y) = (half_at(a, 2 * (blk + t)), half_at(b, 2 * (blk + t)));
            *lane = x.mul_add(y, *lane);
        }
    }
    let mut r32 = [0f32; 32];
    for t in 0..32 {
        r32[t] = lanes[t] + lanes[t + 32];
    }
    let mut r16 = [0f32; 16];
    for t in 0..16 {
        r16[t] = r32[t] + r32[t + 16];
    }
    let mut sum = reduce16(&r16) as f64;
    for i in np..n {
        sum += (half_at(a, 2 * i) * half_at(b, 2 * i)) as f64;
    }
    sum as f32
}

/// The AVX2 + FMA + F16C builds of the f32 bodies above.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;

    crate::kernels::x86::target_features!("avx2,fma,f16c":
        pub(super) fn dot_f32_lanes16(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_f32_lanes16_body;
        pub(super) fn dot_f32_vec(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_f32_vec_body;
    );
}

dispatch_dot!(
    /// llamafile's tinyBLAS on AVX-512 for f32 rows (`n` values as bytes): one register of
    /// 16 FMA lanes per output over blocks of 16, then [`reduce16`]; `n` is a multiple of 16
    /// where [`mul_mat_dot_f32`] chooses it (a tail, if any, is added in f32).
    dot_f32_lanes16,
    dot_f32_lanes16_body,
    avx2::dot_f32_lanes16
);
dispatch_dot!(
    /// `ggml_vec_dot_f32` on AVX-512 for f32 rows (`n` values as bytes): four registers of
    /// 16 FMA lanes over blocks of 64, the same reduction as [`dot_f16_vec_f32_body`]; the
    /// tail (below a block of 64) added in f32, as ggml's f32 sum.
    dot_f32_vec,
    dot_f32_vec_body,
    avx2::dot_f32_vec
);
dispatch_dot!(
    /// F16 · F16 as tinyBLAS: 16 FMA lanes, `_mm512_reduce_add_ps`.
    dot_f16_lanes16,
    dot_f16_lanes16_body,
    crate::kernels::x86::f16::dot_f16_lanes16
);
dispatch_dot!(
    /// F16 · F16 as `ggml_vec_dot_f16`.
    dot_f16_vec,
    dot_f16_vec_body,
    crate::kernels::x86::f16::dot_f16_vec
);

/// Widens the f16 values in `src` (little-endian, `2 · dst.len()` bytes or more) to f32 in
/// `dst`, exactly, eight at a time. Needs `isa() >= Isa::Avx2`.
pub(crate) fn widen_f16(src: &[u8], dst: &mut [f32]) {
    assert!(
        isa() >= Isa::Avx2 && src.len() >= 2 * dst.len(),
        "widen_f16: AVX2 (with F16C) and two bytes per value"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU features and the lengths were checked above.
    unsafe {
        crate::kernels::x86::f16::widen_f16(src.as_ptr(), dst)
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("isa() is below AVX2 off x86-64")
}

/// [`dot_f16_lanes16_body`] of `R` weight rows (f16, `n` values each, `n` a multiple of 16)
/// against `C` activation rows already widened to f32 (`b[c]` holds `n` f16 values as f32,
/// exactly): `t[r][c]` has the bits of the one-element kernel, each weight row converted
/// once per 16 values for the whole tile. Needs `isa() >= Isa::Avx2` (one register per pair
/// with AVX-512, two with AVX2: [`F16_TILE_AVX512`] and [`F16_TILE_AVX2`] are the shapes
/// that fit the registers).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn f16_lanes16_tile_f32<const R: usize, const C: usize>(
    n: usize,
    a: [&[u8]; R],
    b: [&[f32]; C],
) -> [[f32; C]; R] {
    assert!(
        isa() >= Isa::Avx2
            && n.is_multiple_of(16)
            && a.iter().all(|r| r.len() >= 2 * n)
            && b.iter().all(|r| r.len() >= n),
        "f16_lanes16_tile_f32: AVX2 and whole rows of n = 16·j values"
    );
    #[cfg(target_arch = "x86_64")]
    {
        let (a, b) = (a.map(|r| r.as_ptr()), b.map(|r| r.as_ptr()));
        // SAFETY: the CPU features and the row lengths were checked above.
        unsafe {
            if isa() >= Isa::Avx512 {
                crate::kernels::x86::f16::f16_lanes16_tile_f32::<R, C>(n, a, b)
            } else {
                crate::kernels::x86::f16::f16_lanes16_tile_f32_avx2::<R, C>(n, a, b)
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("isa() is below AVX2 off x86-64")
}

/// The tile `mul_mat`'s F16 prompt tiles take with AVX-512: 4 × 4 pairs in 16 registers.
#[cfg(target_arch = "x86_64")]
pub(crate) const F16_TILE_AVX512: (usize, usize) = (4, 4);
/// The tile with AVX2: 2 × 3 pairs in 12 registers (two per pair), two weight registers
/// and one activation register of the sixteen.
#[cfg(target_arch = "x86_64")]
pub(crate) const F16_TILE_AVX2: (usize, usize) = (2, 3);
