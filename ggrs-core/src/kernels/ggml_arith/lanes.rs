//! What ggml's x86 kernels share: the block sizes they step through and the fixed trees
//! their lanes are added in at the end. A leaf: the portable bodies (`dots`, `f16`) and the
//! x86 kernels (`kernels::x86::f16`, `kernels::x86::quantize`) read it.

use half::f16;

/// Bytes of a Q8_0 block (f16 scale, 32 codes).
pub(crate) const Q8_0_BYTES: usize = 34;
/// Bytes of a Q4_0 block (f16 scale, 16 bytes of nibbles).
pub(crate) const Q4_0_BYTES: usize = 18;
/// Bytes of a Q5_0 block (f16 scale, 4 bytes of fifth bits, 16 of nibbles).
pub(crate) const Q5_0_BYTES: usize = 22;
/// Bytes of an IQ4_NL block (f16 scale, 16 bytes of level indices).
pub(crate) const IQ4NL_BYTES: usize = 18;
/// Bytes of an IQ4_XS super-block (f16 scale, u16 and 4 bytes of scales, 128 bytes of
/// indices).
pub(crate) const IQ4XS_BYTES: usize = 136;
/// Bytes of a Q8_K block (f32 scale, 256 codes, 16 i16 sums).
pub(crate) const Q8K_BYTES: usize = 292;
/// Bytes of a Q8_1 block (f16 scale, f16 `d·Σq`, 32 codes).
pub(crate) const Q8_1_BYTES: usize = 36;
/// Bytes of a Q4_1 block (f16 scale, f16 minimum, 16 bytes of nibbles).
pub(crate) const Q4_1_BYTES: usize = 20;
/// Bytes of a Q5_1 block (f16 scale, f16 minimum, 4 bytes of fifth bits, 16 of nibbles).
pub(crate) const Q5_1_BYTES: usize = 24;

/// The little-endian f16 at byte `i` of `b`, as f32.
#[inline(always)]
pub(crate) fn half_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// `_mm256` horizontal sum as ggml's `hsum_float_8` and tinyBLAS's `hsum` do it.
#[inline(always)]
pub(crate) fn hsum8(v: &[f32; 8]) -> f32 {
    let h = [v[4] + v[0], v[5] + v[1], v[6] + v[2], v[7] + v[3]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// GCC's `_mm512_reduce_add_ps`: halves of 8 lanes, then of 4, then lanes (0+2) + (1+3).
#[inline(always)]
pub(crate) fn reduce16(v: &[f32; 16]) -> f32 {
    let mut h8 = [0f32; 8];
    for i in 0..8 {
        h8[i] = v[i + 8] + v[i];
    }
    let mut h4 = [0f32; 4];
    for i in 0..4 {
        h4[i] = h8[i + 4] + h8[i];
    }
    (h4[0] + h4[2]) + (h4[1] + h4[3])
}

/// Defines `$name(n, a, b)`, a dot product that runs `$simd` (an AVX2 + FMA + F16C build
/// of `$body`'s arithmetic, same bits) where [`crate::cpu::isa`] allows, else the portable
/// `$body`.
macro_rules! dispatch_dot {
    ($(#[$m:meta])* $name:ident, $body:path, $simd:path) => {
        $(#[$m])*
        pub(crate) fn $name(n: usize, a: &[u8], b: &[u8]) -> f32 {
            #[cfg(target_arch = "x86_64")]
            if $crate::cpu::isa() >= $crate::cpu::Isa::Avx2 {
                // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2, FMA and F16C.
                return unsafe { $simd(n, a, b) };
            }
            $body(n, a, b)
        }
    };
}
pub(crate) use dispatch_dot;
