//! AArch64 NEON kernels for Q4_0 · Q8_0 and Q8_0 · Q8_0, and the Q8_0 activation quantizer.
//!
//! Every dot-product kernel has the form `k::<R, C>(nb, [x; R], [y; C]) -> [[f32; C]; R]`
//! of the x86 kernels (see `kernels/x86/mod.rs`): `nb` blocks of `R` weight rows dotted with `C`
//! Q8_0 rows, each weight block decoded once per tile, each activation block loaded once,
//! and every element of the tile computed with the operations of the 1 × 1 kernel.
//!
//! # Summation order
//!
//! The kernels keep **ggml's x86 order** (`dispatch::SumOrder::GgmlLanes`), not the order of
//! ggml's own aarch64 code: eight f32 lanes, lane `l` accumulating the exact integer sum of
//! the products of values `4l..4l + 4` of each block as `lane = fma(dx·dy, sum, lane)`,
//! and the lanes added at the end as `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`.
//! Here the eight lanes are two `float32x4_t`, lanes 0–3 for values 0..16 and 4–7 for values
//! 16..32, and `vfmaq_f32` is the same fused operation as `vfmadd`. So a NEON build gives
//! the bits of the AVX2 build and of `kernels::ggml_arith` (llama.cpp's x86 results), which
//! `mul_mat` requires of Q4_0 and Q8_0 weights. The Q4_0 `_chain` kernels keep ggml's
//! repacked-Q4_0 order instead (`SumOrder::GgmlBlockChain`): one exact integer sum per
//! block, `acc = fma(sum, dx·dy, acc)`.
//!
//! (ggml's `ggml_vec_dot_q*_q8_0` for NEON, built by GCC, sums differently: two blocks at a
//! time into two registers of four lanes with an unfused multiply and add, both registers
//! reduced pairwise and added, an odd last block added with a scalar FMA; and which products
//! share a lane depends on whether it was built with `dotprod`. Those results differ from
//! the ones here only by f32 rounding.)
//!
//! # Integer part
//!
//! Each lane's sum of four `i8 × i8` products is exact for every code pattern, −128 included:
//! - [`Widen`] (any ARMv8 CPU): `smull` to 16-bit products (|p| ≤ 2¹⁴), `saddlp` to 32-bit
//!   pair sums, `addp` to quad sums;
//! - [`Sdot`] (CPUs with the `dotprod` extension): `sdot`, which sums exactly the four
//!   products of bytes `4l..4l + 4` into 32-bit lane `l`.
//!
//! Both give the same integers, so the two builds give the same bits.
//!
//! # Safety
//!
//! Each kernel needs a CPU with NEON (and `dotprod` for the `_dotprod` ones) and `nb` whole
//! blocks readable at every `x[r]` and every `y[c]`. Rows are read with unaligned loads.

use std::arch::aarch64::*;
use std::arch::asm;
use std::mem::offset_of;

use half::f16;

use crate::quants::{to_fp16, BlockQ4_0, BlockQ8_0, BlockQuant};

const Q4_0: usize = BlockQ4_0::BYTES;
const Q8_0: usize = BlockQ8_0::BYTES;

/// The f16 at `p` as f32 (exact).
///
/// # Safety
/// Two bytes are readable at `p`.
#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees two readable bytes; `read_unaligned` takes any address.
    let b = unsafe { p.cast::<[u8; 2]>().read_unaligned() };
    f16::from_le_bytes(b).to_f32()
}

/// How a kernel forms four exact lane sums of 16 byte products: lane `l` is
/// `Σ_{k<4} a[4l + k]·b[4l + k]`.
pub(super) trait Quads {
    /// The four quad sums of `a · b` (signed bytes).
    ///
    /// # Safety
    /// The CPU supports the implementation's instructions.
    unsafe fn quads(a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

/// Quad sums from widening multiplies (base NEON).
pub(super) enum Widen {}

impl Quads for Widen {
    #[inline(always)]
    unsafe fn quads(a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: register-only NEON operations; the caller guarantees NEON.
        unsafe {
            // Products of bytes 0..8 and 8..16 as i16 (|p| ≤ 128·128 = 2¹⁴: no overflow),
            // adjacent pairs widened and added, then adjacent pair sums added: quads in
            // order.
            let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
            let hi = vmull_high_s8(a, b);
            vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi))
        }
    }
}

/// Quad sums from `sdot` (the `dotprod` extension).
pub(super) enum Sdot {}

impl Quads for Sdot {
    #[inline(always)]
    unsafe fn quads(a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // The intrinsic `vdotq_s32` is not stable in Rust: the instruction itself, which
        // adds the four products of bytes 4l..4l + 4 into 32-bit lane l.
        // SAFETY: register-only instructions; the caller guarantees NEON and `dotprod` (the
        // kernels using this are compiled with it, so the assembler accepts `sdot`).
        unsafe {
            let mut acc = vdupq_n_s32(0);
            asm!(
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
            acc
        }
    }
}

/// A weight block type of the 32-value kernels, decoded to signed bytes in value order.
trait Weight {
    /// Bytes per block.
    const BYTES: usize;

    /// The block at `p`: its scale, its values 0..16 and its values 16..32.
    ///
    /// # Safety
    /// One block is readable at `p`.
    unsafe fn load(p: *const u8) -> (f32, int8x16_t, int8x16_t);
}

/// Q4_0 weights: codes `q − 8` from the low nibbles (values 0..16) and the high ones.
enum Q4 {}

impl Weight for Q4 {
    const BYTES: usize = Q4_0;

    #[inline(always)]
    unsafe fn load(p: *const u8) -> (f32, int8x16_t, int8x16_t) {
        // SAFETY: the scale and the 16 nibble bytes lie inside the block (caller).
        unsafe {
            let d = f16_at(p.add(offset_of!(BlockQ4_0, d)));
            let q = vld1q_u8(p.add(offset_of!(BlockQ4_0, qs)));
            let eight = vdupq_n_s8(8);
            let lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), eight);
            let hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)), eight);
            (d, lo, hi)
        }
    }
}

/// Q8_0 blocks (weights or activations).
enum Q8 {}

impl Weight for Q8 {
    const BYTES: usize = Q8_0;

    #[inline(always)]
    unsafe fn load(p: *const u8) -> (f32, int8x16_t, int8x16_t) {
        // SAFETY: the scale and the 32 code bytes lie inside the block (caller).
        unsafe {
            let qs = p.add(offset_of!(BlockQ8_0, qs)).cast::<i8>();
            (
                f16_at(p.add(offset_of!(BlockQ8_0, d))),
                vld1q_s8(qs),
                vld1q_s8(qs.add(16)),
            )
        }
    }
}

/// ggml's x86 lane reduction of lanes `lo` (0–3) and `hi` (4–7):
/// `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`.
///
/// # Safety
/// The CPU supports NEON.
#[inline(always)]
unsafe fn hsum8(lo: float32x4_t, hi: float32x4_t) -> f32 {
    // SAFETY: register-only NEON operations; the caller guarantees NEON.
    unsafe {
        let h = vaddq_f32(lo, hi);
        let s = vadd_f32(vget_low_f32(h), vget_high_f32(h));
        vget_lane_f32::<0>(s) + vget_lane_f32::<1>(s)
    }
}

/// The lanes kernel body (see the module docs): weight type `W`, integer part `Q`.
///
/// # Safety
/// See the module docs.
#[inline(always)]
unsafe fn lanes<W: Weight, Q: Quads, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of every row and column is readable (caller); the loads are
    // unaligned; the caller guarantees NEON and the CPU features of `Q`.
    unsafe {
        let zero = vdupq_n_f32(0.0);
        let mut lo = [[zero; C]; R];
        let mut hi = [[zero; C]; R];
        for i in 0..nb {
            let mut dx = [0f32; R];
            let mut xl = [vdupq_n_s8(0); R];
            let mut xh = [vdupq_n_s8(0); R];
            for r in 0..R {
                (dx[r], xl[r], xh[r]) = W::load(x[r].add(i * W::BYTES));
            }
            for c in 0..C {
                let (dy, yl, yh) = Q8::load(y[c].add(i * Q8_0));
                for r in 0..R {
                    let d = vdupq_n_f32(dx[r] * dy);
                    let (pl, ph) = (Q::quads(xl[r], yl), Q::quads(xh[r], yh));
                    lo[r][c] = vfmaq_f32(lo[r][c], vcvtq_f32_s32(pl), d);
                    hi[r][c] = vfmaq_f32(hi[r][c], vcvtq_f32_s32(ph), d);
                }
            }
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                out[r][c] = hsum8(lo[r][c], hi[r][c]);
            }
        }
        out
    }
}

/// The block-chain kernel body (ggml's repacked-Q4_0 order): per block the exact integer sum
/// `s`, then `acc = fma(s, dx·dy, acc)`.
///
/// # Safety
/// See the module docs.
#[inline(always)]
unsafe fn chain<W: Weight, Q: Quads, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: as in `lanes`.
    unsafe {
        let mut acc = [[0f32; C]; R];
        for i in 0..nb {
            let mut dx = [0f32; R];
            let mut xl = [vdupq_n_s8(0); R];
            let mut xh = [vdupq_n_s8(0); R];
            for r in 0..R {
                (dx[r], xl[r], xh[r]) = W::load(x[r].add(i * W::BYTES));
            }
            for c in 0..C {
                let (dy, yl, yh) = Q8::load(y[c].add(i * Q8_0));
                for r in 0..R {
                    let p = vaddq_s32(Q::quads(xl[r], yl), Q::quads(xh[r], yh));
                    // |s| ≤ 32·128·128 = 2¹⁹: exact in i32 and in f32.
                    let s = vaddvq_s32(p) as f32;
                    acc[r][c] = s.mul_add(dx[r] * dy, acc[r][c]);
                }
            }
        }
        acc
    }
}

/// Q4_0 × Q8_0 in ggml's x86 lane order, base NEON.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn q4_0_q8_0<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { lanes::<Q4, Widen, R, C>(nb, x, y) }
}

/// Q4_0 × Q8_0 in ggml's x86 lane order, with `sdot`.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn q4_0_q8_0_dotprod<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { lanes::<Q4, Sdot, R, C>(nb, x, y) }
}

/// Q8_0 × Q8_0 in ggml's x86 lane order, base NEON.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn q8_0_q8_0<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { lanes::<Q8, Widen, R, C>(nb, x, y) }
}

/// Q8_0 × Q8_0 in ggml's x86 lane order, with `sdot`.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn q8_0_q8_0_dotprod<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { lanes::<Q8, Sdot, R, C>(nb, x, y) }
}

/// Q4_0 × Q8_0 in ggml's repacked-Q4_0 order, base NEON.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn q4_0_q8_0_chain<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { chain::<Q4, Widen, R, C>(nb, x, y) }
}

/// Q4_0 × Q8_0 in ggml's repacked-Q4_0 order, with `sdot`.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn q4_0_q8_0_chain_dotprod<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { chain::<Q4, Sdot, R, C>(nb, x, y) }
}

/// f32 → Q8_0 writing exactly the bytes of the reference quantizer (`BlockQ8_0::quantize`):
/// `src.len() / 32` blocks into `dst` (the reference row quantizer's length rule; a mismatch
/// writes nothing in release builds).
///
/// Same IEEE operations on the same operands: `amax` (a maximum, whose value does not depend
/// on the order for finite inputs), `d = amax / 127`, `id = 1 / d`, `x · id`, then `frinta`
/// (round to nearest, halves away from zero: C's `roundf`) and a saturating conversion (Rust's
/// `as i8` on the rounded value). Blocks holding a NaN or an infinity, or whose `1 / d`
/// overflows, go to the reference quantizer itself.
///
/// # Safety
/// The CPU supports NEON.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn quantize_row_q8_0(src: &[f32], dst: &mut [u8]) {
    let ok = src.len() / 32 * 32 == src.len() && dst.len() == src.len() / 32 * Q8_0;
    debug_assert!(
        ok,
        "quantize q8_0: {} values into {} bytes",
        src.len(),
        dst.len()
    );
    if !ok {
        return;
    }
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(Q8_0)) {
        // SAFETY: each load reads 4 values inside the 32 of `x`.
        let v: [float32x4_t; 8] =
            std::array::from_fn(|k| unsafe { vld1q_f32(x.as_ptr().add(4 * k)) });
        // `fmax` propagates NaN, so a NaN anywhere makes `amax` NaN.
        let mut m = [vdupq_n_f32(0.0); 4];
        for k in 0..4 {
            m[k] = vmaxq_f32(vabsq_f32(v[2 * k]), vabsq_f32(v[2 * k + 1]));
        }
        let amax = vmaxvq_f32(vmaxq_f32(vmaxq_f32(m[0], m[1]), vmaxq_f32(m[2], m[3])));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        if !amax.is_finite() || !id.is_finite() {
            out.copy_from_slice(bytemuck::bytes_of(&BlockQ8_0::quantize(x)));
            continue;
        }
        let q: [int32x4_t; 8] =
            std::array::from_fn(|k| vcvtq_s32_f32(vrndaq_f32(vmulq_n_f32(v[k], id))));
        let mut codes = [0i8; 32];
        for h in 0..2 {
            let a = vcombine_s16(vqmovn_s32(q[4 * h]), vqmovn_s32(q[4 * h + 1]));
            let b = vcombine_s16(vqmovn_s32(q[4 * h + 2]), vqmovn_s32(q[4 * h + 3]));
            let bytes = vcombine_s8(vqmovn_s16(a), vqmovn_s16(b));
            // SAFETY: 16 bytes inside `codes` (h < 2).
            unsafe { vst1q_s8(codes.as_mut_ptr().add(16 * h), bytes) };
        }
        let qs = offset_of!(BlockQ8_0, qs);
        out[offset_of!(BlockQ8_0, d)..qs].copy_from_slice(&to_fp16(d).to_le_bytes());
        out[qs..].copy_from_slice(bytemuck::cast_slice(&codes));
    }
}
