//! What the grid i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) share: each
//! block decodes to grid values per group of 8 (read from ggml's grids, [`super::iq_grids`]),
//! signs and one odd integer multiplier per 16 values, and its dot product with Q8_K is an
//! exact integer sum per block scaled by `d_x·d_y` in f32.
//!
//! Two orders are written here once for all of them:
//! - ggml's generic C (`ggml_vec_dot_iq*_q8_K_generic`): per block the exact sum, then
//!   `sumf = fma(d, sum, sumf)` (GCC contracts the `+=` as in the build behind llama.cpp's
//!   reference outputs, see `q2_0.rs`), times the type's constant factor at the end;
//! - ggml's AVX2 kernels (`ggml_vec_dot_iq*_q8_K`): the activation bytes are negated with
//!   `vpsignb` (or xor/sub), which wraps −128 to −128, the products are added in eight i32
//!   lanes (value `v` of a block in lane `(v mod 32) / 4`), each block adds
//!   `fma(d, lane, acc)` per lane, and the lanes are added as `hsum_float_8`. The AVX2
//!   builds in `kernels::x86::iquants` keep these bits.

use super::k_quants::tiled::{TiledBlock, TiledTerms};
use super::k_quants::QK_K;
use super::{BlockQ8K, BlockQuant};
use crate::kernels::ggml_arith::lanes::hsum8;

/// `SIGN_BYTES[b]`: byte `j` is 0xFF where bit `j` of `b` is set, else 0.
pub(crate) static SIGN_BYTES: [u64; 256] = expand_bits();

const fn expand_bits() -> [u64; 256] {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut j = 0;
        while j < 8 {
            if (i >> j) & 1 == 1 {
                t[i] |= 0xFF << (8 * j);
            }
            j += 1;
        }
        i += 1;
    }
    t
}

/// ggml's `ksigns_iq2xs`: seven stored sign bits and the eighth making the count even.
#[inline(always)]
pub(crate) fn ksigns(bits7: u32) -> u8 {
    let i = (bits7 & 127) as u8;
    i | (((i.count_ones() & 1) as u8) << 7)
}

/// Byte `v % 8` of word `v / 8`.
#[inline(always)]
pub(crate) fn byte_at(words: &[u64; 32], v: usize) -> u8 {
    (words[v / 8] >> (8 * (v % 8))) as u8
}

/// A decoded IQ2/IQ3 block: value `v` is `±mag[v]·ls[v / 16]` (times the block's scale and
/// the type's constant), negative where byte `v` of `neg` is 0xFF.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct IqCodes {
    /// Grid magnitudes, eight values per word (little-endian bytes).
    pub mag: [u64; 32],
    /// 0xFF bytes where the value is negative.
    pub neg: [u64; 32],
    /// The odd integer multiplier `2s + 1` of each group of 16 values.
    pub ls: [i16; 16],
}

/// The writer items of a grid i-quant's `BlockQuant` impl: `$quant(x, Option<weights>,
/// &mut [B])` (ggml's `quantize_row_*_impl`) with unit weights for
/// [`BlockQuant::quantize`] and with the importance weights for
/// [`BlockQuant::quantize_row_weighted`]; `$needs` is [`BlockQuant::NEEDS_WEIGHTS`].
macro_rules! iq_writer {
    ($quant:path, $needs:expr) => {
        const NEEDS_WEIGHTS: bool = $needs;

        fn quantize(x: &[f32]) -> Self {
            let mut b = [<Self as bytemuck::Zeroable>::zeroed()];
            $quant(x, None, &mut b);
            b[0]
        }

        fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
            $quant(x, Some(qw), out)
        }
    };
}
pub(crate) use iq_writer;

/// The `IqBlock` and `BlockQuant` impls of an IQ2/IQ3 block type `$B` (with an f16 field
/// `d`): its decoder `$codes(&B) -> IqCodes`, `$db(&B, d, g)`, the float scale ggml's
/// dequantizer gives group `g` of 16 values, and its writer `$quant`, `$needs` (see
/// `iq_writer`).
macro_rules! iq_block {
    ($B:ty, $dtype:ident, $factor:expr, $codes:path, $db:path, $quant:path, $needs:expr) => {
        impl $crate::quants::iq_codes::IqBlock for $B {
            const FACTOR: f32 = $factor;
            fn codes(&self) -> $crate::quants::iq_codes::IqCodes {
                $codes(self)
            }
            fn scale(&self) -> f32 {
                $crate::quants::fp16(self.d)
            }
        }

        impl $crate::quants::BlockQuant for $B {
            const DTYPE: $crate::dtype::DType = $crate::dtype::DType::$dtype;
            const BLOCK_SIZE: usize = $crate::quants::QK_K;
            type VecDot = $crate::quants::BlockQ8K;
            const GGML_X86_DOT: Option<$crate::quants::VecDotKernel> =
                Some($crate::quants::iq_codes::iq_dot_x86::<$B>);

            fn dequantize(&self, out: &mut [f32]) {
                use $crate::quants::iq_codes::IqBlock;
                let d = $crate::quants::fp16(self.d);
                $crate::quants::iq_codes::iq_dequantize(&self.codes(), |g| $db(self, d, g), out);
            }

            $crate::quants::iq_codes::iq_writer!($quant, $needs);

            fn vec_dot(a: &[Self], b: &[$crate::quants::BlockQ8K]) -> f32 {
                $crate::quants::iq_codes::iq_dot_generic(a, b)
            }
        }
    };
}
pub(crate) use iq_block;

/// The `BlockQuant` impl of an IQ1 block type `$B`: its x86-order and generic dots and its
/// writer `$quant`, `$needs` (see `iq_writer`).
macro_rules! iq1_block {
    ($B:ty, $dtype:ident, $x86:path, $generic:path, $quant:path, $needs:expr) => {
        impl $crate::quants::BlockQuant for $B {
            const DTYPE: $crate::dtype::DType = $crate::dtype::DType::$dtype;
            const BLOCK_SIZE: usize = $crate::quants::QK_K;
            type VecDot = $crate::quants::BlockQ8K;
            const GGML_X86_DOT: Option<$crate::quants::VecDotKernel> = Some($x86);

            fn dequantize(&self, out: &mut [f32]) {
                use $crate::quants::iq_codes::Iq1Block;
                $crate::quants::iq_codes::iq1_dequantize(&self.codes(), out);
            }

            $crate::quants::iq_codes::iq_writer!($quant, $needs);

            fn vec_dot(a: &[Self], b: &[$crate::quants::BlockQ8K]) -> f32 {
                $generic(a, b)
            }
        }
    };
}
pub(crate) use iq1_block;

/// A grid i-quant of the IQ2/IQ3 kind: its decoded codes and f16 scale.
pub(crate) trait IqBlock: BlockQuant<VecDot = BlockQ8K> {
    /// The constant the dot products end with (0.125, 0.25 or 1).
    const FACTOR: f32;
    /// The decoded block.
    fn codes(&self) -> IqCodes;
    /// The block scale `d` as f32.
    fn scale(&self) -> f32;
}

/// The exact `Σ ±mag·q·ls` of a block against `y` (generic C: no wrap, `q` negated in int).
fn iq_sum_exact(c: &IqCodes, y: &BlockQ8K) -> i32 {
    let mut s = 0i32;
    for (v, &q) in y.qs.iter().enumerate() {
        let m = byte_at(&c.mag, v) as i32 * c.ls[v / 16] as i32;
        let q = if byte_at(&c.neg, v) != 0 {
            -(q as i32)
        } else {
            q as i32
        };
        s += m * q;
    }
    s
}

/// ggml's generic order for the IQ2/IQ3 types (see the module docs).
pub(crate) fn iq_dot_generic<B: IqBlock>(a: &[B], b: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in a.iter().zip(b) {
        let d = x.scale() * y.d;
        sumf = d.mul_add(iq_sum_exact(&x.codes(), y) as f32, sumf);
    }
    B::FACTOR * sumf
}

/// The activation byte as `vpsignb`/xor-sub negate it: −(−128) stays −128.
#[inline(always)]
pub(crate) fn wrap_neg(q: i8, neg: bool) -> i32 {
    if neg {
        q.wrapping_neg() as i32
    } else {
        q as i32
    }
}

/// The eight i32 lanes of ggml's AVX2 IQ2/IQ3 kernels for one block (exact): group `k` of 8
/// values fills lanes `2(k mod 4)` and `2(k mod 4) + 1`.
pub(crate) fn iq_x86_lanes(c: &IqCodes, y: &BlockQ8K) -> [i32; 8] {
    let mut l = [0i32; 8];
    for (k, q) in y.qs.chunks_exact(8).enumerate() {
        let (m, n) = (c.mag[k].to_le_bytes(), c.neg[k].to_le_bytes());
        let ls = c.ls[k / 2] as i32;
        let mut s = [0i32; 2];
        for j in 0..8 {
            s[j / 4] += m[j] as i32 * wrap_neg(q[j], n[j] != 0);
        }
        l[2 * (k % 4)] += s[0] * ls;
        l[2 * (k % 4) + 1] += s[1] * ls;
    }
    l
}

/// ggml's AVX2 order for the IQ2/IQ3 types, as portable code (see the module docs).
pub(crate) fn iq_dot_x86<B: IqBlock>(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let Some((xs, ys)) = super::row_blocks::<B>(n, a, b) else {
        return 0.0;
    };
    let mut acc = [0f32; 8];
    for (x, y) in xs.iter().zip(ys.iter()) {
        let d = x.scale() * y.d;
        for (a, l) in acc.iter_mut().zip(iq_x86_lanes(&x.codes(), y)) {
            *a = d.mul_add(l as f32, *a);
        }
    }
    B::FACTOR * hsum8(&acc)
}

/// `y[v] = ±(db(v / 16)·mag[v])` (ggml's `db * grid[j] * (sign ? -1.f : 1.f)`).
pub(crate) fn iq_dequantize(c: &IqCodes, db: impl Fn(usize) -> f32, out: &mut [f32]) {
    for (v, y) in out[..QK_K].iter_mut().enumerate() {
        let x = db(v / 16) * byte_at(&c.mag, v) as f32;
        *y = if byte_at(&c.neg, v) != 0 { -x } else { x };
    }
}

/// A decoded IQ1_S/IQ1_M block: value `v` is `d·ls[v / 16]·(grid[v] ± 1/8)`, the shift
/// negative where byte `v` of `delta_neg` is 0xFF.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Iq1Codes {
    /// The block scale.
    pub d: f32,
    /// Grid values −1, 0, 1 as signed bytes, eight per word.
    pub grid: [u64; 32],
    /// 0xFF bytes where the shift is −1/8.
    pub delta_neg: [u64; 32],
    /// The odd integer multiplier `2s + 1` of each group of 16 values.
    pub ls: [i16; 16],
}

/// The IQ1 types: their decoded codes.
pub(crate) trait Iq1Block: BlockQuant<VecDot = BlockQ8K> {
    /// The decoded block.
    fn codes(&self) -> Iq1Codes;
}

/// `y[v] = (d·ls)·(grid + delta)` (ggml's `dl * (grid[j] + delta)`).
pub(crate) fn iq1_dequantize(c: &Iq1Codes, out: &mut [f32]) {
    for (v, y) in out[..QK_K].iter_mut().enumerate() {
        let dl = c.d * c.ls[v / 16] as f32;
        let delta = if byte_at(&c.delta_neg, v) != 0 {
            -0.125f32
        } else {
            0.125
        };
        *y = dl * (byte_at(&c.grid, v) as i8 as f32 + delta);
    }
}

/// The AVX2 kernels' product of a grid byte and an activation byte: `vpsignb(q, g)` then
/// times `|g|` (−(−128) wraps to −128).
#[inline(always)]
pub(crate) fn iq1_product(g: u8, q: i8) -> i32 {
    let g = g as i8;
    match g.signum() {
        0 => 0,
        s => g.unsigned_abs() as i32 * wrap_neg(q, s < 0),
    }
}

/// The eight i32 lanes of `Σ grid·q·ls` in ggml's AVX2 IQ1 kernels for one block.
pub(crate) fn iq1_x86_lanes(c: &Iq1Codes, y: &BlockQ8K) -> [i32; 8] {
    let mut l = [0i32; 8];
    for (v, &q) in y.qs.iter().enumerate() {
        l[(v % 32) / 4] += iq1_product(byte_at(&c.grid, v), q) * c.ls[v / 16] as i32;
    }
    l
}

/// The exact `Σ grid·q·ls` of a block (generic C).
pub(crate) fn iq1_grid_sum(c: &Iq1Codes, y: &BlockQ8K) -> i32 {
    y.qs.iter()
        .enumerate()
        .map(|(v, &q)| byte_at(&c.grid, v) as i8 as i32 * q as i32 * c.ls[v / 16] as i32)
        .sum()
}

// ------------------------------------------------------------------------------------------
// ggml's tiled matmul (prompts: eight columns or more)
// ------------------------------------------------------------------------------------------

/// A block as ggml's tiled matmul sees it (`tiled_unpack_src0`): signed weight bytes `w`
/// from two decoded byte arrays (see [`TiledCodes::w`]), an odd multiplier per 16 values and
/// the scale `d` with the type's factor folded in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TiledCodes {
    /// IQ2/IQ3: grid magnitudes; IQ1: grid values −1, 0, 1 (bytes, eight per word).
    pub a: [u64; 32],
    /// 0xFF bytes where the value (IQ2/IQ3) or the shift (IQ1) is negative.
    pub b: [u64; 32],
    /// The odd integer multiplier of each group of 16 values.
    pub ls: [i16; 16],
    /// `d·FACTOR` (IQ2/IQ3) or `d/8` (IQ1).
    pub d: f32,
}

impl TiledCodes {
    /// Weight `v`: `±mag` for IQ2/IQ3 (the sign on the weight, so no wrap), `8·grid ± 1` for
    /// IQ1 (`grid1`).
    #[inline(always)]
    pub fn w(&self, v: usize, grid1: bool) -> i32 {
        let (a, neg) = (byte_at(&self.a, v), byte_at(&self.b, v) != 0);
        match (grid1, neg) {
            (false, false) => a as i32,
            (false, true) => -(a as i32),
            (true, _) => 8 * (a as i8 as i32) + if neg { -1 } else { 1 },
        }
    }
}

/// A grid i-quant in ggml's tiled matmul.
pub(crate) trait IqTiled: BlockQuant<VecDot = BlockQ8K> {
    /// The block's tiled codes.
    fn tiled_codes(&self) -> TiledCodes;
}

fn iq_tiled_codes<B: IqBlock>(x: &B) -> TiledCodes {
    let c = x.codes();
    TiledCodes {
        a: c.mag,
        b: c.neg,
        ls: c.ls,
        d: x.scale() * B::FACTOR,
    }
}

fn iq1_tiled_codes<B: Iq1Block>(x: &B) -> TiledCodes {
    let c = x.codes();
    TiledCodes {
        a: c.grid,
        b: c.delta_neg,
        ls: c.ls,
        d: c.d * 0.125,
    }
}

macro_rules! tiled_blocks {
    ($f:ident, $grid1:expr; $($B:ty),+) => {$(
        impl IqTiled for $B {
            fn tiled_codes(&self) -> TiledCodes {
                $f(self)
            }
        }

        impl TiledBlock for $B {
            const HAS_MIN: bool = false;
            /// `s1 = Σ ls·Σ w·y`, exact.
            fn terms(&self, y: &BlockQ8K) -> TiledTerms {
                let c = self.tiled_codes();
                let s1 = y
                    .qs
                    .iter()
                    .enumerate()
                    .map(|(v, &q)| c.w(v, $grid1) * c.ls[v / 16] as i32 * q as i32)
                    .sum();
                TiledTerms {
                    d: c.d,
                    dmin: 0.0,
                    s1,
                    s2: 0,
                }
            }
        }
    )+};
}

tiled_blocks!(iq_tiled_codes, false; super::BlockIQ2XXS, super::BlockIQ2XS, super::BlockIQ2S,
    super::BlockIQ3XXS, super::BlockIQ3S);
tiled_blocks!(iq1_tiled_codes, true; super::BlockIQ1S, super::BlockIQ1M);
