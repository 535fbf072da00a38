//! AVX2 (+FMA, F16C) dot-product kernels: one 32-value block per 256-bit register.
//!
//! Every kernel has the form `k::<R, C>(nb, [x; R], [y; C]) -> [[f32; C]; R]`: `nb` blocks
//! of `R` weight rows dotted with `C` rows of the vec-dot type (see `kernels/x86/mod.rs` for why
//! the tile shape does not change any element's result).
//!
//! Integer parts, all exact for every code pattern:
//! - Q4_0/Q5_0: `vpmaddubsw` multiplies unsigned by signed bytes, so one operand is offset
//!   and the offset's contribution subtracted, on the weight side
//!   (`Σ x·y = Σ x·(y + 128) − 128·Σ x`) or the activation side (`Σ (u − o)·y =
//!   Σ u·y − o·Σ y`), whichever the tile shares more (see [`BiasedDot`]); 16-bit pair sums
//!   stay below 2¹⁵;
//! - Q8_0 × Q8_0 widens both operands to 16 bits (`vpmaddwd`): with |x| up to 128 the
//!   trick above would saturate, and `vpsignb` cannot negate −128;
//! - Q4_1/Q5_1 keep their codes unsigned (≤ 31) against the signed Q8_1 activations, as
//!   ggml's `mul_sum_us8_pairs_float` does (pair sums at most 2·31·128 < 2¹⁵), their
//!   minimum term `mx·sy` summed per block in its own FMA chain;
//! - the k-quants keep their codes unsigned (≤ 63) against signed activations;
//! - IQ4_NL and IQ4_XS look their levels (−127..=113) up with `vpshufb` and widen both
//!   operands to 16 bits (`vpmaddwd`), as Q8_0 does: their levels are too large for the
//!   offset trick.
//!
//! # Safety
//! Each kernel needs a CPU with AVX2, FMA and F16C, and `nb` whole blocks readable at every
//! `x[r]` and every `y[c]`.

use std::arch::x86_64::*;
use std::mem::offset_of;

use super::util::{f16_at, finish, hsum256, q4k_scales_mins, read_f32, read_u16, read_u32};
use crate::quants::iq4::KVALUES_IQ4NL;
use crate::quants::{
    BlockIQ4NL, BlockIQ4XS, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
    BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, BlockQuant,
};

const Q4_0: usize = BlockQ4_0::BYTES;
const Q5_0: usize = BlockQ5_0::BYTES;
const Q8_0: usize = BlockQ8_0::BYTES;
const Q8_1: usize = BlockQ8_1::BYTES;
const Q4K: usize = BlockQ4K::BYTES;
const Q5K: usize = BlockQ5K::BYTES;
const Q6K: usize = BlockQ6K::BYTES;
const Q8K: usize = BlockQ8K::BYTES;
const IQ4NL: usize = BlockIQ4NL::BYTES;
const IQ4XS: usize = BlockIQ4XS::BYTES;

/// The 16 low nibbles of `q` in bytes 0..16, the 16 high nibbles in bytes 16..32: the codes of
/// a Q4_0/Q5_0 block in value order.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn nibbles(q: __m128i) -> __m256i {
    // SAFETY: register-only AVX2 operations; the caller guarantees AVX2.
    unsafe {
        _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16::<4>(q), q),
            _mm256_set1_epi8(0x0F),
        )
    }
}

/// The integer dot product of the 32-value kernels: eight 32-bit lanes, lane `l` the exact
/// `Σ x·y` over bytes `4l..4l + 4` of a block. The instructions multiply unsigned by signed
/// bytes, so one operand is offset, on either side:
/// - weight side: `Σ x·y = Σ x·(y + 128) − 128·Σ x` from the signed codes `xs` and the
///   activations made unsigned, `v = y ^ 0x80`; the correction is per weight block, paid
///   once per row (the better side when a tile has more columns than rows);
/// - activation side: `Σ x·y = Σ u·y − o·Σ y` from the unsigned codes `u = x + o` and the
///   signed activations; the correction is per activation block, paid once per column.
///
/// Both give the same exact integers, so the side never changes a result.
pub(super) trait BiasedDot {
    /// The weight-side correction, `128·Σ x` per lane in the implementation's form.
    ///
    /// # Safety
    /// The CPU supports the implementation's instructions.
    unsafe fn weight_prepare(xs: __m256i) -> __m256i;
    /// The lane sums from the weight side; `prep` is `weight_prepare(xs)`.
    ///
    /// # Safety
    /// As `weight_prepare`.
    unsafe fn weight_lanes(prep: __m256i, xs: __m256i, v: __m256i) -> __m256i;
    /// The activation-side correction, `o·Σ y` per lane (`off` holds `o` in every byte).
    ///
    /// # Safety
    /// As `weight_prepare`.
    unsafe fn act_prepare(off: __m256i, y: __m256i) -> __m256i;
    /// The lane sums from the activation side; `prep` is `act_prepare(off, y)`.
    ///
    /// # Safety
    /// As `weight_prepare`.
    unsafe fn act_lanes(prep: __m256i, u: __m256i, y: __m256i) -> __m256i;
}

/// AVX2: `vpmaddubsw` (pairs, 16 bits) then `vpmaddwd` by ones (quads, 32 bits); exact for
/// |x| ≤ 16 and u ≤ 31 (pair sums at most 2·255·16 or 2·31·128, below 2¹⁵).
pub(super) struct Maddubs;

impl BiasedDot for Maddubs {
    #[inline(always)]
    unsafe fn weight_prepare(xs: __m256i) -> __m256i {
        // SAFETY: register-only AVX2 operations (the caller guarantees AVX2).
        unsafe { Self::quads(_mm256_set1_epi8(-128), xs) }
    }

    #[inline(always)]
    unsafe fn weight_lanes(prep: __m256i, xs: __m256i, v: __m256i) -> __m256i {
        // SAFETY: as `weight_prepare`.
        unsafe { _mm256_sub_epi32(Self::quads(v, xs), prep) }
    }

    #[inline(always)]
    unsafe fn act_prepare(off: __m256i, y: __m256i) -> __m256i {
        // SAFETY: as `weight_prepare`.
        unsafe { Self::quads(off, y) }
    }

    #[inline(always)]
    unsafe fn act_lanes(prep: __m256i, u: __m256i, y: __m256i) -> __m256i {
        // SAFETY: as `weight_prepare`.
        unsafe { _mm256_sub_epi32(Self::quads(u, y), prep) }
    }
}

impl Maddubs {
    /// `Σ u·s` over each 4 bytes, `u` unsigned, `s` signed, `2·u·|s|` < 2¹⁵.
    ///
    /// # Safety
    /// The CPU supports AVX2.
    #[inline(always)]
    unsafe fn quads(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: register-only AVX2 operations.
        unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)) }
    }
}

/// How the 32-value kernels sum their blocks' lane sums in f32: the two orders of ggml's x86
/// kernels.
pub(super) trait Accumulate {
    /// Per-element accumulator.
    type Acc: Copy;
    /// Whether blocks are added a tile at a time ([`Accumulate::add_tile`]) rather than an
    /// element at a time ([`Accumulate::add`]).
    const TILED: bool;
    /// The empty accumulator.
    ///
    /// # Safety
    /// The CPU supports AVX.
    unsafe fn zero() -> Self::Acc;
    /// Adds one block to one element: `d = dx·dy` and its eight exact lane sums.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    unsafe fn add(acc: Self::Acc, d: f32, lanes: __m256i) -> Self::Acc;
    /// Adds one block to every element of a tile: element `(r, c)` gets `d = dx[r]·dy[c]`
    /// and its eight exact lane sums `lanes[r][c]`.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    unsafe fn add_tile<const R: usize, const C: usize>(
        acc: &mut [[Self::Acc; C]; R],
        dx: &[f32; R],
        dy: &[f32; C],
        lanes: &[[__m256i; C]; R],
    );
    /// The element's value.
    ///
    /// # Safety
    /// The CPU supports AVX.
    unsafe fn total(acc: Self::Acc) -> f32;
}

/// ggml's `ggml_vec_dot_q*_q8_0` and tinyBLAS order: eight f32 lanes, per block
/// `lane = fma(dx·dy, lane_sum, lane)`, added at the end as
/// `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`.
pub(super) struct Lanes8;

/// ggml's repacked-Q4_0 (`q4_0_8x8`) order: the block's exact integer sum, then one f32
/// chain per element, `acc = fma(block_sum, dx·dy, acc)`.
pub(super) struct BlockChain;

impl Accumulate for Lanes8 {
    type Acc = __m256;
    const TILED: bool = false;

    #[inline(always)]
    unsafe fn add(acc: __m256, d: f32, lanes: __m256i) -> __m256 {
        // SAFETY: register-only AVX2/FMA operations.
        unsafe { _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc) }
    }

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        // SAFETY: register-only AVX operation.
        unsafe { _mm256_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn add_tile<const R: usize, const C: usize>(
        acc: &mut [[__m256; C]; R],
        dx: &[f32; R],
        dy: &[f32; C],
        lanes: &[[__m256i; C]; R],
    ) {
        for r in 0..R {
            for c in 0..C {
                // SAFETY: forwarded from the caller.
                acc[r][c] = unsafe { Self::add(acc[r][c], dx[r] * dy[c], lanes[r][c]) };
            }
        }
    }

    #[inline(always)]
    unsafe fn total(acc: __m256) -> f32 {
        // SAFETY: the caller guarantees AVX.
        unsafe { hsum256(acc) }
    }
}

/// The totals of four vectors of eight `i32` lanes, `[Σ l[0], Σ l[1], Σ l[2], Σ l[3]]`
/// (exact).
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn sum4x8(l: [__m256i; 4]) -> __m128i {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        // Per 128-bit half: pairs, then quads, of each vector; then the halves added.
        let t = _mm256_hadd_epi32(_mm256_hadd_epi32(l[0], l[1]), _mm256_hadd_epi32(l[2], l[3]));
        _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256::<1>(t))
    }
}

/// `fma(Σ l[k], d[k], a[k])` for k in 0..4, one per f32 lane (the block sums exact).
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[inline(always)]
unsafe fn chain4(l: [__m256i; 4], d: [f32; 4], a: [f32; 4]) -> [f32; 4] {
    // SAFETY: register operations and loads/stores of local 4-value arrays.
    unsafe {
        let s = _mm_cvtepi32_ps(sum4x8(l));
        let v = _mm_fmadd_ps(s, _mm_loadu_ps(d.as_ptr()), _mm_loadu_ps(a.as_ptr()));
        let mut out = [0f32; 4];
        _mm_storeu_ps(out.as_mut_ptr(), v);
        out
    }
}

impl Accumulate for BlockChain {
    type Acc = f32;
    const TILED: bool = true;

    #[inline(always)]
    unsafe fn add(acc: f32, d: f32, lanes: __m256i) -> f32 {
        // SAFETY: register-only AVX2 operations.
        let s = unsafe { _mm_extract_epi32::<0>(sum4x8([lanes; 4])) };
        (s as f32).mul_add(d, acc)
    }

    #[inline(always)]
    unsafe fn zero() -> f32 {
        0.0
    }

    #[inline(always)]
    unsafe fn add_tile<const R: usize, const C: usize>(
        acc: &mut [[f32; C]; R],
        dx: &[f32; R],
        dy: &[f32; C],
        lanes: &[[__m256i; C]; R],
    ) {
        // Each element: acc = fma(block_sum, dx·dy, acc); four elements at a time where the
        // tile has them, one per f32 lane (the same operation on each).
        if C == 4 {
            for r in 0..R {
                let d = std::array::from_fn(|c| dx[r] * dy[c]);
                let a = std::array::from_fn(|c| acc[r][c]);
                // SAFETY: AVX2 and FMA are the caller's guarantee.
                let v = unsafe { chain4(std::array::from_fn(|c| lanes[r][c]), d, a) };
                acc[r][..4].copy_from_slice(&v);
            }
        } else if R == 4 {
            for c in 0..C {
                let d = std::array::from_fn(|r| dx[r] * dy[c]);
                let a = std::array::from_fn(|r| acc[r][c]);
                // SAFETY: AVX2 and FMA are the caller's guarantee.
                let v = unsafe { chain4(std::array::from_fn(|r| lanes[r][c]), d, a) };
                for (r, &val) in v.iter().enumerate() {
                    acc[r][c] = val;
                }
            }
        } else {
            for r in 0..R {
                for c in 0..C {
                    // SAFETY: AVX2 and FMA are the caller's guarantee.
                    acc[r][c] = unsafe { Self::add(acc[r][c], dx[r] * dy[c], lanes[r][c]) };
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn total(acc: f32) -> f32 {
        acc
    }
}

/// Shared loop of the 32-value kernels: per block, eight exact lane sums of four products
/// ([`BiasedDot`]), summed in f32 in one of ggml's x86 orders ([`Accumulate`]).
///
/// # Safety
/// As the kernels; `D`'s instructions are supported.
#[inline(always)]
pub(super) unsafe fn blocks_lanes<
    X: BlockDecode,
    D: BiasedDot,
    A: Accumulate,
    const R: usize,
    const C: usize,
>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let bias = _mm256_set1_epi8(-128);
        let off = _mm256_set1_epi8(X::OFFSET as i8);
        // The offset goes on the side with fewer rows in the tile (see `BiasedDot`).
        let act_side = R > C;
        let mut acc = [[A::zero(); C]; R];
        for i in 0..nb {
            let mut dx = [0f32; R];
            let mut xs = [_mm256_setzero_si256(); R];
            let mut prep = [_mm256_setzero_si256(); R];
            for r in 0..R {
                let xb = x[r].add(i * X::BYTES);
                dx[r] = f16_at(xb);
                if act_side {
                    xs[r] = X::decode_unsigned(xb);
                } else {
                    xs[r] = X::decode(xb);
                    prep[r] = D::weight_prepare(xs[r]);
                }
            }
            let mut dy = [0f32; C];
            let mut lanes = [[_mm256_setzero_si256(); C]; R];
            for c in 0..C {
                let yb = y[c].add(i * Q8_0);
                let v = _mm256_loadu_si256(yb.add(offset_of!(BlockQ8_0, qs)).cast());
                dy[c] = f16_at(yb.add(offset_of!(BlockQ8_0, d)));
                let (ya, yprep) = if act_side {
                    (v, D::act_prepare(off, v))
                } else {
                    (_mm256_xor_si256(v, bias), _mm256_setzero_si256())
                };
                for r in 0..R {
                    let l = if act_side {
                        D::act_lanes(yprep, xs[r], ya)
                    } else {
                        D::weight_lanes(prep[r], xs[r], ya)
                    };
                    if A::TILED {
                        lanes[r][c] = l;
                    } else {
                        acc[r][c] = A::add(acc[r][c], dx[r] * dy[c], l);
                    }
                }
            }
            if A::TILED {
                A::add_tile(&mut acc, &dx, &dy, &lanes);
            }
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                out[r][c] = A::total(acc[r][c]);
            }
        }
        out
    }
}

const _: () = assert!(offset_of!(BlockQ4_0, d) == 0 && offset_of!(BlockQ5_0, d) == 0);

/// Bit `j` of `bits` as `0x10` in byte `j` (0 otherwise): Q5_0's fifth bits in value order.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn fifth_bits(bits: u32) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        // Byte j takes byte j / 8 of `bits` (the broadcast puts every byte of `bits` in both
        // 128-bit halves, which `vpshufb` shuffles separately)...
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits as i32),
            _mm256_set_epi64x(
                0x0303_0303_0303_0303,
                0x0202_0202_0202_0202,
                0x0101_0101_0101_0101,
                0,
            ),
        );
        // ...and keeps bit j % 8 of it.
        let sel = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel);
        _mm256_and_si256(set, _mm256_set1_epi8(0x10))
    }
}

/// How a 32-value weight type's blocks decode to codes.
pub(super) trait BlockDecode {
    /// Bytes per block (the scale `d` is its first field).
    const BYTES: usize;
    /// The offset `o` of the unsigned codes: `x = u − o`.
    const OFFSET: u8;
    /// The unsigned codes `u` of the block at `p`, in value order.
    ///
    /// # Safety
    /// A whole block readable at `p`; the CPU supports AVX2.
    unsafe fn decode_unsigned(p: *const u8) -> __m256i;
    /// The signed codes `x = u − o` (wrapping bytes; exact for |x| ≤ 128).
    ///
    /// # Safety
    /// As `decode_unsigned`.
    #[inline(always)]
    unsafe fn decode(p: *const u8) -> __m256i {
        // SAFETY: forwarded from the caller.
        unsafe {
            _mm256_sub_epi8(
                Self::decode_unsigned(p),
                _mm256_set1_epi8(Self::OFFSET as i8),
            )
        }
    }
}

/// Q4_0: codes 0..=15, offset 8.
pub(super) struct Q4_0Block;
/// Q5_0: codes 0..=31, offset 16.
pub(super) struct Q5_0Block;
/// Q8_0: the i8 codes plus 128 (a `xor` with 0x80), offset 128 (|x| ≤ 128: only for exact
/// `BiasedDot`s, i.e. VNNI).
pub(super) struct Q8_0Block;

impl BlockDecode for Q8_0Block {
    const BYTES: usize = Q8_0;
    const OFFSET: u8 = 128;

    #[inline(always)]
    unsafe fn decode_unsigned(p: *const u8) -> __m256i {
        // SAFETY: the block's 32 code bytes (caller); unaligned load.
        unsafe {
            let q = _mm256_loadu_si256(p.add(offset_of!(BlockQ8_0, qs)).cast());
            _mm256_xor_si256(q, _mm256_set1_epi8(-128))
        }
    }
}

impl BlockDecode for Q4_0Block {
    const BYTES: usize = Q4_0;
    const OFFSET: u8 = 8;

    #[inline(always)]
    unsafe fn decode_unsigned(p: *const u8) -> __m256i {
        // SAFETY: the block's 16 code bytes (caller); unaligned load.
        unsafe { nibbles(_mm_loadu_si128(p.add(offset_of!(BlockQ4_0, qs)).cast())) }
    }
}

impl BlockDecode for Q5_0Block {
    const BYTES: usize = Q5_0;
    const OFFSET: u8 = 16;

    #[inline(always)]
    unsafe fn decode_unsigned(p: *const u8) -> __m256i {
        // SAFETY: the block's code and fifth-bit bytes (caller); unaligned loads.
        unsafe {
            let low = nibbles(_mm_loadu_si128(p.add(offset_of!(BlockQ5_0, qs)).cast()));
            _mm256_or_si256(low, fifth_bits(read_u32(p.add(offset_of!(BlockQ5_0, qh)))))
        }
    }
}

/// IQ4_NL: the levels (−127..=113) plus 128, offset 128 (|x| ≤ 127: only for exact
/// `BiasedDot`s, i.e. VNNI; the AVX2 kernels widen the levels instead, [`iq4_nl_q8_0`]).
pub(super) struct IQ4NLBlock;

const _: () = assert!(offset_of!(BlockIQ4NL, d) == 0);

impl BlockDecode for IQ4NLBlock {
    const BYTES: usize = IQ4NL;
    const OFFSET: u8 = 128;

    #[inline(always)]
    unsafe fn decode_unsigned(p: *const u8) -> __m256i {
        // SAFETY: the block's 16 index bytes (caller); the table lookup is register-only.
        unsafe {
            let levels = iq4_levels(p.add(offset_of!(BlockIQ4NL, qs)));
            _mm256_xor_si256(levels, _mm256_set1_epi8(-128))
        }
    }
}

/// Q4_1: codes 0..=15 (the offset is unused: the minimum is a term of its own).
pub(super) struct Q4_1Block;
/// Q5_1: codes 0..=31 (as [`Q4_1Block`]).
pub(super) struct Q5_1Block;

const _: () = assert!(
    offset_of!(BlockQ4_1, d) == 0
        && offset_of!(BlockQ4_1, m) == 2
        && offset_of!(BlockQ5_1, d) == 0
        && offset_of!(BlockQ5_1, m) == 2
        && offset_of!(BlockQ8_1, d) == 0
        && offset_of!(BlockQ8_1, s) == 2
);

impl BlockDecode for Q4_1Block {
    const BYTES: usize = BlockQ4_1::BYTES;
    const OFFSET: u8 = 0;

    #[inline(always)]
    unsafe fn decode_unsigned(p: *const u8) -> __m256i {
        // SAFETY: the block's 16 code bytes (caller); unaligned load.
        unsafe { nibbles(_mm_loadu_si128(p.add(offset_of!(BlockQ4_1, qs)).cast())) }
    }
}

impl BlockDecode for Q5_1Block {
    const BYTES: usize = BlockQ5_1::BYTES;
    const OFFSET: u8 = 0;

    #[inline(always)]
    unsafe fn decode_unsigned(p: *const u8) -> __m256i {
        // SAFETY: the block's code and fifth-bit bytes (caller); unaligned loads.
        unsafe {
            let low = nibbles(_mm_loadu_si128(p.add(offset_of!(BlockQ5_1, qs)).cast()));
            _mm256_or_si256(low, fifth_bits(read_u32(p.add(offset_of!(BlockQ5_1, qh)))))
        }
    }
}

/// Shared loop of Q4_1 and Q5_1 against Q8_1, in the order of ggml's x86
/// `ggml_vec_dot_q4_1_q8_1` / `ggml_vec_dot_q5_1_q8_1`: per block, eight exact lane sums
/// of four `code·activation` products (`D`'s activation-side lanes with no correction:
/// unsigned codes, signed activations; `vpmaddubsw` + `vpmaddwd` by ones, or `vpdpbusd`),
/// `lane = fma(dx·dy, lane_sum, lane)`, and beside it
/// `summs = fma(mx, sy, summs)` (`mx` the weight block's minimum, `sy` the activation
/// block's `d·Σq`); at the end `hsum(lanes) + summs`, the lanes added as ggml's
/// `hsum_float_8`.
///
/// # Safety
/// As the kernels.
#[inline(always)]
pub(super) unsafe fn blocks_min<X: BlockDecode, D: BiasedDot, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let zero = _mm256_setzero_si256();
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut summs = [[0f32; C]; R];
        for i in 0..nb {
            let mut dx = [0f32; R];
            let mut mx = [0f32; R];
            let mut xs = [_mm256_setzero_si256(); R];
            for r in 0..R {
                let xb = x[r].add(i * X::BYTES);
                dx[r] = f16_at(xb);
                mx[r] = f16_at(xb.add(2));
                xs[r] = X::decode_unsigned(xb);
            }
            let mut sy = [0f32; C];
            for c in 0..C {
                let yb = y[c].add(i * Q8_1);
                let dy = f16_at(yb.add(offset_of!(BlockQ8_1, d)));
                sy[c] = f16_at(yb.add(offset_of!(BlockQ8_1, s)));
                let v = _mm256_loadu_si256(yb.add(offset_of!(BlockQ8_1, qs)).cast());
                for r in 0..R {
                    let lanes = D::act_lanes(zero, xs[r], v);
                    let d = _mm256_set1_ps(dx[r] * dy);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[r][c]);
                }
            }
            summs_fma(&mut summs, &mx, &sy);
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                out[r][c] = hsum256(acc[r][c]) + summs[r][c];
            }
        }
        out
    }
}

/// `summs[r][c] = fma(mx[r], sy[c], summs[r][c])` for every element of a tile: four
/// elements per 128-bit FMA where a row or column of the tile has four (the same operation
/// on each lane), one at a time otherwise.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[inline(always)]
unsafe fn summs_fma<const R: usize, const C: usize>(
    summs: &mut [[f32; C]; R],
    mx: &[f32; R],
    sy: &[f32; C],
) {
    // SAFETY: register operations and unaligned loads/stores of 4-value local arrays.
    unsafe {
        if C == 4 {
            let s = _mm_loadu_ps(sy.as_ptr());
            for r in 0..R {
                let p = summs[r].as_mut_ptr();
                _mm_storeu_ps(p, _mm_fmadd_ps(_mm_set1_ps(mx[r]), s, _mm_loadu_ps(p)));
            }
        } else if R == 4 {
            let m = _mm_loadu_ps(mx.as_ptr());
            for c in 0..C {
                let col: [f32; 4] = std::array::from_fn(|r| summs[r][c]);
                let mut out = [0f32; 4];
                let v = _mm_fmadd_ps(m, _mm_set1_ps(sy[c]), _mm_loadu_ps(col.as_ptr()));
                _mm_storeu_ps(out.as_mut_ptr(), v);
                for (r, &o) in out.iter().enumerate() {
                    summs[r][c] = o;
                }
            }
        } else {
            for r in 0..R {
                for c in 0..C {
                    summs[r][c] = mx[r].mul_add(sy[c], summs[r][c]);
                }
            }
        }
    }
}

/// Q4_1 × Q8_1 in ggml's x86 order (see [`blocks_min`] and the module docs).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_1_q8_1<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { blocks_min::<Q4_1Block, Maddubs, R, C>(nb, x, y) }
}

/// Q5_1 × Q8_1 in ggml's x86 order (see [`blocks_min`] and the module docs).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q5_1_q8_1<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { blocks_min::<Q5_1Block, Maddubs, R, C>(nb, x, y) }
}

/// Q4_0 × Q8_0 (see the module docs for the contract).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_0_q8_0<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { blocks_lanes::<Q4_0Block, Maddubs, Lanes8, R, C>(nb, x, y) }
}

/// Q5_0 × Q8_0 (see the module docs for the contract).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q5_0_q8_0<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { blocks_lanes::<Q5_0Block, Maddubs, Lanes8, R, C>(nb, x, y) }
}

/// Q4_0 × Q8_0 in ggml's repacked-Q4_0 order ([`BlockChain`]).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_0_q8_0_chain<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { blocks_lanes::<Q4_0Block, Maddubs, BlockChain, R, C>(nb, x, y) }
}

/// Q8_0 × Q8_0 (see the module docs for the contract).
///
/// Lane `l` of a block is the exact `Σ x·y` over its values `4l..4l + 4`. Where the block of
/// activations holds no −128 (always, for activations from ggml's quantizer, whose codes lie
/// in −127..=127), ggml's own form: `vpmaddubsw(|x|, sign(y, x))` then `vpmaddwd` by ones
/// (`|x|` ≤ 128 read unsigned, `|sign(y, x)|` ≤ 127: pair sums at most 2·128·127 < 2¹⁵).
/// Otherwise both operands are widened to 16 bits ([`q8_0_lanes_wide`]). The same integers
/// either way, so the f32 work (ggml's lanes) never depends on the path.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q8_0_q8_0<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let qs = offset_of!(BlockQ8_0, qs);
        let ones = _mm256_set1_epi16(1);
        let min = _mm256_set1_epi8(i8::MIN);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..nb {
            let mut dx = [0f32; R];
            let mut xv = [_mm256_setzero_si256(); R];
            let mut ax = [_mm256_setzero_si256(); R];
            for r in 0..R {
                let xb = x[r].add(i * Q8_0);
                dx[r] = f16_at(xb.add(offset_of!(BlockQ8_0, d)));
                xv[r] = _mm256_loadu_si256(xb.add(qs).cast());
                ax[r] = _mm256_abs_epi8(xv[r]);
            }
            for c in 0..C {
                let yb = y[c].add(i * Q8_0);
                let yv = _mm256_loadu_si256(yb.add(qs).cast());
                let dy = f16_at(yb.add(offset_of!(BlockQ8_0, d)));
                let has_min = _mm256_movemask_epi8(_mm256_cmpeq_epi8(yv, min)) != 0;
                for r in 0..R {
                    let q = if has_min {
                        q8_0_lanes_wide(xv[r], yv)
                    } else {
                        let p = _mm256_maddubs_epi16(ax[r], _mm256_sign_epi8(yv, xv[r]));
                        _mm256_madd_epi16(p, ones)
                    };
                    let d = _mm256_set1_ps(dx[r] * dy);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(q), acc[r][c]);
                }
            }
        }
        finish(acc)
    }
}

/// The eight exact quad sums (lane `l`: values `4l..4l + 4`) of two blocks of 32 signed
/// bytes, any values (−128 included), through 16-bit products.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn q8_0_lanes_wide(x: __m256i, y: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        // Pair sums of values 0..16 and 16..32, added pairwise into the lanes: `vphaddd`
        // gives quads 0 1 4 5 in the low half and 2 3 6 7 in the high half; one 64-bit
        // permutation puts them in value order.
        let [x0, x1] = widen_i8(x);
        let [y0, y1] = widen_i8(y);
        let p0 = _mm256_madd_epi16(x0, y0);
        let p1 = _mm256_madd_epi16(x1, y1);
        _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(p0, p1))
    }
}

/// Q4_K × Q8_K (see the module docs for the contract; the Q8_K blocks' `bsums` must be the
/// sums of their codes).
///
/// Per super-block and column: `d·Σ_j sc_j·Σ q·y − dmin·Σ_j m_j·Σ y`, the first sum from
/// `vpmaddubsw` (codes × activations) then `vpmaddwd` (× the sub-block scale), the second
/// from the group sums.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_k_q8_k<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; `scales` is
    // 12 bytes inside the block, read through a reference to `[u8; 12]` (alignment 1).
    unsafe {
        let low4 = _mm256_set1_epi8(0x0F);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut acc_min = [[_mm256_setzero_ps(); C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * Q4K);
                let dx = f16_at(xb.add(offset_of!(BlockQ4K, d)));
                let dmx = f16_at(xb.add(offset_of!(BlockQ4K, dmin)));
                let sm = q4k_scales_mins(&*xb.add(offset_of!(BlockQ4K, scales)).cast::<[u8; 12]>());
                // Minimum j for the two 16-value groups of sub-block j.
                let m = _mm_loadl_epi64(sm.as_ptr().add(8).cast());
                let mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));

                let mut sumi = [_mm256_setzero_si256(); C];
                for k in 0..4 {
                    // 64 values: sub-block 2k in the low nibbles, 2k + 1 in the high ones.
                    let q = _mm256_loadu_si256(xb.add(offset_of!(BlockQ4K, qs) + 32 * k).cast());
                    let lo = _mm256_and_si256(q, low4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), low4);
                    let s_lo = _mm256_set1_epi16(sm[2 * k] as i16);
                    let s_hi = _mm256_set1_epi16(sm[2 * k + 1] as i16);
                    for c in 0..C {
                        let yq = y[c].add(i * Q8K + offset_of!(BlockQ8K, qs) + 64 * k);
                        let v0 = _mm256_loadu_si256(yq.cast());
                        let v1 = _mm256_loadu_si256(yq.add(32).cast());
                        let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, v0), s_lo);
                        let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, v1), s_hi);
                        sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p0, p1));
                    }
                }
                for c in 0..C {
                    let yb = y[c].add(i * Q8K);
                    let yd = read_f32(yb.add(offset_of!(BlockQ8K, d)));
                    let bsums = _mm256_loadu_si256(yb.add(offset_of!(BlockQ8K, bsums)).cast());
                    let msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, mins));
                    let d = _mm256_set1_ps(dx * yd);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                    let dm = _mm256_set1_ps(dmx * yd);
                    acc_min[r][c] = _mm256_fmadd_ps(dm, msum, acc_min[r][c]);
                }
            }
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                out[r][c] = hsum256(acc[r][c]) - hsum256(acc_min[r][c]);
            }
        }
        out
    }
}

/// Q5_K × Q8_K in the order of ggml's AVX2 `ggml_vec_dot_q5_K_q8_K` (bit for bit the
/// portable `k_quants::tiled::dot_q5_k_vec`, which `mul_mat` keeps below eight columns).
///
/// Per super-block and element: eight exact 32-bit lanes, lane `l` summing
/// `sc_j · code · y` over the values `p` with `(p mod 32) / 4 = l` (`vpmaddubsw` of the
/// unsigned codes, 0..=31, with the activations, then `vpmaddwd` by the sub-block scale);
/// `lane = fma(d·d_y, lane_sum, lane)`; the minimum terms in one scalar chain,
/// `summs = fma(−d_y·dmin, Σ_j min_j·(bsum_2j + bsum_2j+1), summs)`; at the end
/// `hsum(lanes) + summs`, the lanes added in `hsum_float_8`'s tree. The Q8_K `bsums` are
/// used as given (the portable order reads them too).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q5_k_q8_k<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; `scales` is
    // 12 bytes inside the block, read through a reference to `[u8; 12]` (alignment 1).
    unsafe {
        let low4 = _mm256_set1_epi8(0x0F);
        let bit4 = _mm256_set1_epi8(0x10);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut summs = [[0f32; C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * Q5K);
                let dx = f16_at(xb.add(offset_of!(BlockQ5K, d)));
                let dmx = f16_at(xb.add(offset_of!(BlockQ5K, dmin)));
                let sm = q5k_scales(xb);
                // Minimum j for the two 16-value groups of sub-block j.
                let m = _mm_loadl_epi64(sm.as_ptr().add(8).cast());
                let mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
                // Fifth bits: bit 2k of byte l belongs to value 64k + l, bit 2k + 1 to
                // value 64k + 32 + l; shifted down by two per pair of sub-blocks (the bits
                // a 16-bit shift brings in from the next byte land in bits 6 and 7, never
                // read).
                let mut qh = _mm256_loadu_si256(xb.add(offset_of!(BlockQ5K, qh)).cast());
                let mut sumi = [_mm256_setzero_si256(); C];
                for k in 0..4 {
                    let q = _mm256_loadu_si256(xb.add(offset_of!(BlockQ5K, qs) + 32 * k).cast());
                    let lo = _mm256_or_si256(
                        _mm256_and_si256(q, low4),
                        _mm256_and_si256(_mm256_slli_epi16::<4>(qh), bit4),
                    );
                    let hi = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(q), low4),
                        _mm256_and_si256(_mm256_slli_epi16::<3>(qh), bit4),
                    );
                    qh = _mm256_srli_epi16::<2>(qh);
                    let s_lo = _mm256_set1_epi16(sm[2 * k] as i16);
                    let s_hi = _mm256_set1_epi16(sm[2 * k + 1] as i16);
                    for c in 0..C {
                        let yq = y[c].add(i * Q8K + offset_of!(BlockQ8K, qs) + 64 * k);
                        let v0 = _mm256_loadu_si256(yq.cast());
                        let v1 = _mm256_loadu_si256(yq.add(32).cast());
                        let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, v0), s_lo);
                        let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, v1), s_hi);
                        sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p0, p1));
                    }
                }
                for c in 0..C {
                    let yb = y[c].add(i * Q8K);
                    let yd = read_f32(yb.add(offset_of!(BlockQ8K, d)));
                    let bsums = _mm256_loadu_si256(yb.add(offset_of!(BlockQ8K, bsums)).cast());
                    let msum = hsum_i32(_mm256_madd_epi16(bsums, mins));
                    summs[r][c] = (-yd * dmx).mul_add(msum as f32, summs[r][c]);
                    let d = _mm256_set1_ps(yd * dx);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                }
            }
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                out[r][c] = hsum256(acc[r][c]) + summs[r][c];
            }
        }
        out
    }
}

/// Q5_K's (= Q4_K's) scales and minimums of the block at `xb` (see `q4k_scales_mins`).
///
/// # Safety
/// A whole Q5_K block readable at `xb`.
#[inline(always)]
unsafe fn q5k_scales(xb: *const u8) -> [u8; 16] {
    // SAFETY: the 12 scale bytes lie inside the block (caller); `[u8; 12]` has alignment 1.
    unsafe { q4k_scales_mins(&*xb.add(offset_of!(BlockQ5K, scales)).cast::<[u8; 12]>()) }
}

/// The sum of the eight `i32` lanes of `v` (exact while it fits).
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        let s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2)))
    }
}

/// Q6_K × Q8_K (see the module docs for the contract; the Q8_K blocks' `bsums` must be the
/// sums of their codes).
///
/// Codes are kept unsigned (0..=63); the `− 32` is applied once per super-block as
/// `32·Σ_j sc_j·bsums_j`.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q6_k_q8_k<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let low4 = _mm256_set1_epi8(0x0F);
        let bits45 = _mm256_set1_epi8(0x30);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * Q6K);
                let dx = f16_at(xb.add(offset_of!(BlockQ6K, d)));
                let sc_ptr = xb.add(offset_of!(BlockQ6K, scales));
                let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc_ptr.cast()));

                let mut sumi = [_mm256_setzero_si256(); C];
                for c in 0..C {
                    let bsums = y[c].add(i * Q8K + offset_of!(BlockQ8K, bsums));
                    let off = _mm256_madd_epi16(sc16, _mm256_loadu_si256(bsums.cast()));
                    sumi[c] = _mm256_sub_epi32(sumi[c], _mm256_slli_epi32::<5>(off));
                }
                for h in 0..2 {
                    let ql = xb.add(offset_of!(BlockQ6K, ql) + 64 * h);
                    let ql0 = _mm256_loadu_si256(ql.cast());
                    let ql1 = _mm256_loadu_si256(ql.add(32).cast());
                    let qh = _mm256_loadu_si256(xb.add(offset_of!(BlockQ6K, qh) + 32 * h).cast());
                    // Values 128h + 32g + l, g = 0..4: low bits from `ql` (low nibbles of
                    // bytes 0..32, of 32..64, high nibbles of 0..32, of 32..64), high bits
                    // from bit pair g of `qh[l]`.
                    let codes = [
                        _mm256_or_si256(
                            _mm256_and_si256(ql0, low4),
                            _mm256_and_si256(_mm256_slli_epi16::<4>(qh), bits45),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(ql1, low4),
                            _mm256_and_si256(_mm256_slli_epi16::<2>(qh), bits45),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), low4),
                            _mm256_and_si256(qh, bits45),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), low4),
                            _mm256_and_si256(_mm256_srli_epi16::<2>(qh), bits45),
                        ),
                    ];
                    // Sub-blocks 8h + 2g (values 0..16 of group g) and 8h + 2g + 1 (16..32).
                    let mut scales = [_mm256_setzero_si256(); 4];
                    for (g, s) in scales.iter_mut().enumerate() {
                        let j = 8 * h + 2 * g;
                        let (s0, s1) = (*sc_ptr.add(j) as i8, *sc_ptr.add(j + 1) as i8);
                        *s = _mm256_set_m128i(_mm_set1_epi16(s1 as i16), _mm_set1_epi16(s0 as i16));
                    }
                    for c in 0..C {
                        let yq = y[c].add(i * Q8K + offset_of!(BlockQ8K, qs) + 128 * h);
                        for g in 0..4 {
                            let v = _mm256_loadu_si256(yq.add(32 * g).cast());
                            let p = _mm256_maddubs_epi16(codes[g], v);
                            sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p, scales[g]));
                        }
                    }
                }
                for c in 0..C {
                    let yd = read_f32(y[c].add(i * Q8K + offset_of!(BlockQ8K, d)));
                    let d = _mm256_set1_ps(dx * yd);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                }
            }
        }
        finish(acc)
    }
}

/// The 32 levels of an IQ4_NL-layout group of 16 index bytes at `p` (`KVALUES_IQ4NL` looked
/// up), in value order: low nibbles give values 0..16, high nibbles values 16..32.
///
/// # Safety
/// 16 bytes readable at `p`; the CPU supports AVX2.
#[inline(always)]
unsafe fn iq4_levels(p: *const u8) -> __m256i {
    // SAFETY: the table is 16 bytes; the caller guarantees the 16 index bytes and AVX2.
    unsafe {
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
        _mm256_shuffle_epi8(table, nibbles(_mm_loadu_si128(p.cast())))
    }
}

/// The 32 signed bytes of `v` widened to 16 bits: values 0..16, values 16..32.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn widen_i8(v: __m256i) -> [__m256i; 2] {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        [
            _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)),
            _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(v)),
        ]
    }
}

/// 32 signed bytes at `p` widened to 16 bits (see [`widen_i8`]).
///
/// # Safety
/// 32 bytes readable at `p`; the CPU supports AVX2.
#[inline(always)]
unsafe fn load_widen_i8(p: *const u8) -> [__m256i; 2] {
    // SAFETY: the caller guarantees the bytes and AVX2.
    unsafe {
        [
            _mm256_cvtepi8_epi16(_mm_loadu_si128(p.cast())),
            _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(16).cast())),
        ]
    }
}

/// Four-product sums of 16-bit operands (`x`, `y` as [`widen_i8`] gives them), in the
/// lane order of `vphaddd`: quads 0 1 4 5 in the low half, 2 3 6 7 in the high half (quad
/// `q` = values `4q..4q + 4`). Exact while `|x·y|` pair sums fit 31 bits.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn quads_hadd(x: &[__m256i; 2], y: &[__m256i; 2]) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe { _mm256_hadd_epi32(_mm256_madd_epi16(x[0], y[0]), _mm256_madd_epi16(x[1], y[1])) }
}

/// [`quads_hadd`]'s lanes put in value order (lane `l` = values `4l..4l + 4`).
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn quads_in_order(h: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 operation.
    unsafe { _mm256_permute4x64_epi64::<0b11_01_10_00>(h) }
}

/// Shared loop of the IQ4_NL kernels: per block, eight exact lane sums of four products
/// (levels × activations, both widened to 16 bits), summed in f32 in one of ggml's x86
/// orders ([`Accumulate`]).
///
/// # Safety
/// As the kernels.
#[inline(always)]
unsafe fn iq4_nl_blocks<A: Accumulate, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let mut acc = [[A::zero(); C]; R];
        for i in 0..nb {
            let mut dx = [0f32; R];
            let mut xw = [[_mm256_setzero_si256(); 2]; R];
            for r in 0..R {
                let xb = x[r].add(i * IQ4NL);
                dx[r] = f16_at(xb.add(offset_of!(BlockIQ4NL, d)));
                xw[r] = widen_i8(iq4_levels(xb.add(offset_of!(BlockIQ4NL, qs))));
            }
            let mut dy = [0f32; C];
            let mut lanes = [[_mm256_setzero_si256(); C]; R];
            for c in 0..C {
                let yb = y[c].add(i * Q8_0);
                dy[c] = f16_at(yb.add(offset_of!(BlockQ8_0, d)));
                let yw = load_widen_i8(yb.add(offset_of!(BlockQ8_0, qs)));
                for r in 0..R {
                    let l = quads_in_order(quads_hadd(&xw[r], &yw));
                    if A::TILED {
                        lanes[r][c] = l;
                    } else {
                        acc[r][c] = A::add(acc[r][c], dx[r] * dy[c], l);
                    }
                }
            }
            if A::TILED {
                A::add_tile(&mut acc, &dx, &dy, &lanes);
            }
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                out[r][c] = A::total(acc[r][c]);
            }
        }
        out
    }
}

/// IQ4_NL × Q8_0 in the order of tinyBLAS and ggml's x86 lane kernels ([`Lanes8`]; see the
/// module docs for the contract).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn iq4_nl_q8_0<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { iq4_nl_blocks::<Lanes8, R, C>(nb, x, y) }
}

/// IQ4_NL × Q8_0 in the order of ggml's repacked `iq4_nl_8x8` kernels ([`BlockChain`], the
/// order they share with `q4_0_8x8`).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn iq4_nl_q8_0_chain<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: forwarded from the caller.
    unsafe { iq4_nl_blocks::<BlockChain, R, C>(nb, x, y) }
}

/// IQ4_XS × Q8_K in the order of ggml's AVX2 `ggml_vec_dot_iq4_xs_q8_K` (see the module docs
/// for the contract).
///
/// Per super-block and element: eight 32-bit lanes, lane `l` the exact
/// `Σ_sub-block (ls − 32)·Σ x·y` over values `4l..4l + 4` of each sub-block (levels times the
/// sub-block scale fit 16 bits: |127·32| < 2¹⁵); then `lane = fma(d·d_y, lane_sum, lane)`
/// and the lanes added at the end in `hsum_float_8`'s tree.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn iq4_xs_q8_k<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * IQ4XS);
                let dx = f16_at(xb.add(offset_of!(BlockIQ4XS, d)));
                let sh = read_u16(xb.add(offset_of!(BlockIQ4XS, scales_h)));
                let sl = xb.add(offset_of!(BlockIQ4XS, scales_l));
                let mut sumi = [_mm256_setzero_si256(); C];
                for ib in 0..8 {
                    let low = (*sl.add(ib / 2) >> (4 * (ib % 2))) & 0x0F;
                    let high = ((sh >> (2 * ib)) & 3) as u8;
                    let ls = _mm256_set1_epi16((low | (high << 4)) as i16 - 32);
                    let lv = iq4_levels(xb.add(offset_of!(BlockIQ4XS, qs) + 16 * ib));
                    let [x0, x1] = widen_i8(lv);
                    let xs = [_mm256_mullo_epi16(x0, ls), _mm256_mullo_epi16(x1, ls)];
                    for c in 0..C {
                        let yq = y[c].add(i * Q8K + offset_of!(BlockQ8K, qs) + 32 * ib);
                        let yw = load_widen_i8(yq);
                        sumi[c] = _mm256_add_epi32(sumi[c], quads_hadd(&xs, &yw));
                    }
                }
                for c in 0..C {
                    let yd = read_f32(y[c].add(i * Q8K + offset_of!(BlockQ8K, d)));
                    let d = _mm256_set1_ps(dx * yd);
                    let q = _mm256_cvtepi32_ps(quads_in_order(sumi[c]));
                    acc[r][c] = _mm256_fmadd_ps(d, q, acc[r][c]);
                }
            }
        }
        finish(acc)
    }
}
