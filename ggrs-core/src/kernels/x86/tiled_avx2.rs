//! AVX2 (+FMA, F16C) tile kernels of the k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS
//! against Q8_K in the order of ggml's *tiled* matmul (`dispatch::SumOrder::GgmlTiled`):
//! every output element gets exactly the f32 operations of `k_quants::tiled::dot_tiled`.
//!
//! Per super-block `b` of a row and Q8_K block of a column the kernel computes two exact
//! integers, `s1 = Σ_j sc_j·Σ_{sub-block j} code·y` and (types with minimums)
//! `s2 = Σ_j min_j·bsum_j`, then, four columns at a time in one 128-bit vector,
//! `r = d·f32(s1)`, `r = fma(−dmin, f32(s2), r)`, `acc = fma(r, d_y, acc)`: the same
//! roundings in the same order as `dot_tiled`, so results are bit-identical to it and do not
//! depend on the tile shape.
//!
//! # Integer parts
//!
//! The codes are decoded as *unsigned* bytes `u = code + o` (Q6_K: `o = 32`, Q3_K: `o = 4`,
//! the others `o = 0`), 32 values per 256-bit register, and multiplied with the signed Q8_K
//! codes by `vpmaddubsw`: pair sums are at most `2·63·128 < 2¹⁵`, so nothing saturates, for
//! every code pattern (−128 activations included). `vpmaddwd` then multiplies each 16-bit
//! pair sum by its sub-block's scale and adds neighbours into 32-bit lanes. The offset is
//! removed once per block through Q8_K's per-16 sums: `Σ_j sc_j·Σ (u − o)·y =
//! Σ_j sc_j·Σ u·y − o·Σ_j sc_j·bsum_j`, the second term one `vpmaddwd` of `−o·sc` (at most
//! `32·128` in magnitude) with `bsums`. So, as for the other k-quant kernels, the Q8_K
//! blocks' `bsums` must be the sums of their codes (the Q8_K quantizers write them so);
//! `s2` reads them in `dot_tiled` too. All 32-bit sums are exact: `|s1| ≤ 256·32·128·128 <
//! 2³¹`.
//!
//! IQ4_XS levels (−127..=113) are too large for the unsigned trick (`2·240·128 ≥ 2¹⁵`) and
//! `vpsignb` cannot negate a −128 activation, so its kernel widens both operands to 16 bits:
//! the levels times the sub-block scale (`|127·32| < 2¹⁵`, once per row and block, shared by
//! the columns) against the widened activations, with `vpmaddwd`.
//!
//! # Tiles
//!
//! `k::<R, C>(nb, [x; R], [y; C])` computes `R` weight rows × `C ≤ 4` columns: per
//! super-block and row the codes and scales are decoded once and dotted with the `C`
//! columns (one 32-bit accumulator vector per column), the four accumulators reduced with
//! `vphaddd` into one vector of four `s1`, and the f32 steps done for the four columns at
//! once; each activation block is read once per row from L1.
//!
//! # Safety
//! Each kernel needs a CPU with AVX2, FMA and F16C, `C ≤ 4`, and `nb` whole blocks readable
//! at every `x[r]` and every `y[c]`.

use std::arch::x86_64::*;
use std::mem::offset_of;

use super::util::{f16_at, q4k_scales_mins, read_f32, read_u16, read_u32};
use crate::quants::iq4::KVALUES_IQ4NL;
use crate::quants::{
    BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, BlockQuant,
};

const Q8K: usize = BlockQ8K::BYTES;
/// Offset of the codes in a Q8_K block.
const Q8K_QS: usize = offset_of!(BlockQ8K, qs);
/// Offset of the per-16 sums in a Q8_K block.
const Q8K_BSUMS: usize = offset_of!(BlockQ8K, bsums);

/// A weight super-block as the tiled kernel reads it.
trait Decode {
    /// Bytes of one block.
    const BYTES: usize;
    /// Whether the type has minimums (`s2`, `dmin`).
    const HAS_MIN: bool;
    /// What the unsigned codes of [`Decode::codes`] exceed the signed ones by.
    const OFFSET: i16;

    /// The block's scales: `d`, `dmin` (0 without minimums), the scale of each 16 values as
    /// 16 × i16 (a 32-value sub-block's scale twice), and, with minimums, the minimum of each
    /// 16 values likewise.
    ///
    /// # Safety
    /// One block readable at `xb`; the CPU supports AVX2 and F16C.
    unsafe fn header(xb: *const u8) -> Header;

    /// The unsigned codes of values `128·h .. 128·h + 128` (`h` < 2), 32 per register.
    ///
    /// # Safety
    /// One block readable at `xb`; the CPU supports AVX2.
    unsafe fn codes(xb: *const u8, h: usize) -> [__m256i; 4];
}

/// The scales of one weight block (see [`Decode::header`]).
struct Header {
    d: f32,
    dmin: f32,
    sc16: __m256i,
    min16: __m256i,
}

/// Bytes `(4g, 4g + 1)` (the 16-bit lane `2g`) repeated in the low 128 bits and bytes
/// `(4g + 2, 4g + 3)` (lane `2g + 1`) in the high 128 bits: with `vpshufb` on eight 16-bit
/// scales present in both halves, the scales of the two 16-value halves of 32-value group
/// `g`.
const SCALE_PAIRS: [[u8; 32]; 4] = {
    let mut m = [[0u8; 32]; 4];
    let mut g = 0;
    while g < 4 {
        let mut i = 0;
        while i < 16 {
            m[g][i] = (4 * g + i % 2) as u8;
            m[g][16 + i] = (4 * g + 2 + i % 2) as u8;
            i += 1;
        }
        g += 1;
    }
    m
};

/// The four 32-bit sums of `acc[0..C]` (one per column) in lanes `0..C` (the rest 0).
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
unsafe fn sums<const C: usize>(acc: &[__m256i; C]) -> __m128i {
    // SAFETY: register-only AVX2 operations; `a` has four entries.
    unsafe {
        let z = _mm256_setzero_si256();
        let a: [__m256i; 4] = std::array::from_fn(|c| if c < C { acc[c] } else { z });
        let h01 = _mm256_hadd_epi32(a[0], a[1]);
        let h23 = _mm256_hadd_epi32(a[2], a[3]);
        let h = _mm256_hadd_epi32(h01, h23);
        _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
    }
}

/// The Q8_K scales of the `C` columns' block `i`, in lanes `0..C`.
///
/// # Safety
/// Block `i` readable in every column.
#[inline(always)]
unsafe fn column_scales<const C: usize>(y: &[*const u8; C], i: usize) -> __m128 {
    // SAFETY: the caller guarantees the blocks; unaligned reads.
    unsafe {
        let mut dy = [0f32; 4];
        for c in 0..C {
            dy[c] = read_f32(y[c].add(i * Q8K + offset_of!(BlockQ8K, d)));
        }
        _mm_loadu_ps(dy.as_ptr())
    }
}

/// Adds one row's block terms to its accumulator in `dot_tiled`'s order: `r = d·f32(s1)`,
/// with minimums `r = fma(−dmin, f32(s2), r)`, then `acc = fma(r, d_y, acc)`, per lane.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[inline(always)]
unsafe fn accumulate(
    min: bool,
    acc: __m128,
    hd: &Header,
    s1: __m128i,
    s2: __m128i,
    dy: __m128,
) -> __m128 {
    // SAFETY: register-only operations.
    unsafe {
        let mut r = _mm_mul_ps(_mm_set1_ps(hd.d), _mm_cvtepi32_ps(s1));
        if min {
            r = _mm_fnmadd_ps(_mm_set1_ps(hd.dmin), _mm_cvtepi32_ps(s2), r);
        }
        _mm_fmadd_ps(r, dy, acc)
    }
}

/// The first `C` lanes of each row's accumulator.
#[inline(always)]
fn lanes<const R: usize, const C: usize>(acc: [__m128; R]) -> [[f32; C]; R] {
    acc.map(|a| {
        let mut v = [0f32; 4];
        // SAFETY: `v` holds four f32; SSE is part of x86-64.
        unsafe { _mm_storeu_ps(v.as_mut_ptr(), a) };
        std::array::from_fn(|c| v[c])
    })
}

/// The shared loop of the k-quant kernels (see the module docs).
///
/// # Safety
/// As the kernels.
#[inline(always)]
unsafe fn tiled<X: Decode, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of every row and column is readable (caller); unaligned loads;
    // the CPU features are the caller's guarantee.
    unsafe {
        let masks: [__m256i; 4] = SCALE_PAIRS.map(|m| _mm256_loadu_si256(m.as_ptr().cast()));
        let mut acc = [_mm_setzero_ps(); R];
        for i in 0..nb {
            let dy = column_scales(&y, i);
            let yb: [*const u8; C] = y.map(|p| p.add(i * Q8K));
            let bsums: [__m256i; C] = yb.map(|p| _mm256_loadu_si256(p.add(Q8K_BSUMS).cast()));
            for r in 0..R {
                let xb = x[r].add(i * X::BYTES);
                let hd = X::header(xb);
                let mut s = [_mm256_setzero_si256(); C];
                if X::OFFSET != 0 {
                    let neg = _mm256_mullo_epi16(hd.sc16, _mm256_set1_epi16(-X::OFFSET));
                    for c in 0..C {
                        s[c] = _mm256_madd_epi16(neg, bsums[c]);
                    }
                }
                for h in 0..2 {
                    let codes = X::codes(xb, h);
                    // The eight scales of this half in both 128-bit halves.
                    let sc8 = if h == 0 {
                        _mm256_permute4x64_epi64::<0b01_00_01_00>(hd.sc16)
                    } else {
                        _mm256_permute4x64_epi64::<0b11_10_11_10>(hd.sc16)
                    };
                    for g in 0..4 {
                        let sc = _mm256_shuffle_epi8(sc8, masks[g]);
                        for c in 0..C {
                            let v = _mm256_loadu_si256(yb[c].add(Q8K_QS + 128 * h + 32 * g).cast());
                            let p = _mm256_maddubs_epi16(codes[g], v);
                            s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(p, sc));
                        }
                    }
                }
                let s1 = sums(&s);
                let s2 = if X::HAS_MIN {
                    let m: [__m256i; C] = bsums.map(|b| _mm256_madd_epi16(hd.min16, b));
                    sums(&m)
                } else {
                    _mm_setzero_si128()
                };
                acc[r] = accumulate(X::HAS_MIN, acc[r], &hd, s1, s2, dy);
            }
        }
        lanes(acc)
    }
}

/// Eight bytes at `p` as 16 × i16, each repeated twice (a 32-value sub-block's value for
/// both its 16-value halves), zero-extended.
///
/// # Safety
/// Eight bytes readable at `p`; the CPU supports AVX2.
#[inline(always)]
unsafe fn twice_u8(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the bytes and AVX2.
    unsafe {
        let m = _mm_loadl_epi64(p.cast());
        _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m))
    }
}

/// Q4_K: 4-bit codes, 32-value sub-blocks with 6-bit scales and minimums.
struct Q4K;

impl Decode for Q4K {
    const BYTES: usize = BlockQ4K::BYTES;
    const HAS_MIN: bool = true;
    const OFFSET: i16 = 0;

    #[inline(always)]
    unsafe fn header(xb: *const u8) -> Header {
        // SAFETY: the fields lie inside the block (caller); `[u8; 12]` has alignment 1.
        unsafe {
            let sm = q4k_scales_mins(&*xb.add(offset_of!(BlockQ4K, scales)).cast::<[u8; 12]>());
            Header {
                d: f16_at(xb.add(offset_of!(BlockQ4K, d))),
                dmin: f16_at(xb.add(offset_of!(BlockQ4K, dmin))),
                sc16: twice_u8(sm.as_ptr()),
                min16: twice_u8(sm.as_ptr().add(8)),
            }
        }
    }

    #[inline(always)]
    unsafe fn codes(xb: *const u8, h: usize) -> [__m256i; 4] {
        // SAFETY: bytes 64h..64h + 64 of `qs` lie inside the block (caller).
        unsafe {
            let low4 = _mm256_set1_epi8(0x0F);
            let q = xb.add(offset_of!(BlockQ4K, qs) + 64 * h);
            // Byte l of a 32-byte group: value l in its low nibble, value 32 + l in its high.
            let q0 = _mm256_loadu_si256(q.cast());
            let q1 = _mm256_loadu_si256(q.add(32).cast());
            [
                _mm256_and_si256(q0, low4),
                _mm256_and_si256(_mm256_srli_epi16::<4>(q0), low4),
                _mm256_and_si256(q1, low4),
                _mm256_and_si256(_mm256_srli_epi16::<4>(q1), low4),
            ]
        }
    }
}

/// Q5_K: Q4_K's layout plus a fifth bit per code in `qh`.
struct Q5K;

impl Decode for Q5K {
    const BYTES: usize = BlockQ5K::BYTES;
    const HAS_MIN: bool = true;
    const OFFSET: i16 = 0;

    #[inline(always)]
    unsafe fn header(xb: *const u8) -> Header {
        // SAFETY: the fields lie inside the block (caller); `[u8; 12]` has alignment 1.
        unsafe {
            let sm = q4k_scales_mins(&*xb.add(offset_of!(BlockQ5K, scales)).cast::<[u8; 12]>());
            Header {
                d: f16_at(xb.add(offset_of!(BlockQ5K, d))),
                dmin: f16_at(xb.add(offset_of!(BlockQ5K, dmin))),
                sc16: twice_u8(sm.as_ptr()),
                min16: twice_u8(sm.as_ptr().add(8)),
            }
        }
    }

    #[inline(always)]
    unsafe fn codes(xb: *const u8, h: usize) -> [__m256i; 4] {
        // SAFETY: `qh` and bytes 64h..64h + 64 of `qs` lie inside the block (caller).
        unsafe {
            let low4 = _mm256_set1_epi8(0x0F);
            let bit4 = _mm256_set1_epi8(0x10);
            let q = xb.add(offset_of!(BlockQ5K, qs) + 64 * h);
            let q0 = _mm256_loadu_si256(q.cast());
            let q1 = _mm256_loadu_si256(q.add(32).cast());
            // Value 128h + 32g + l takes bit 4h + g of qh[l] as its fifth bit (16); for the
            // second half the bits are first moved down by four (within each byte: bits 0..4
            // of a byte come from its own bits 4..8).
            let mut qh = _mm256_loadu_si256(xb.add(offset_of!(BlockQ5K, qh)).cast());
            if h == 1 {
                qh = _mm256_srli_epi16::<4>(qh);
            }
            [
                _mm256_or_si256(
                    _mm256_and_si256(q0, low4),
                    _mm256_and_si256(_mm256_slli_epi16::<4>(qh), bit4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(q0), low4),
                    _mm256_and_si256(_mm256_slli_epi16::<3>(qh), bit4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(q1, low4),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(qh), bit4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(q1), low4),
                    _mm256_and_si256(_mm256_slli_epi16::<1>(qh), bit4),
                ),
            ]
        }
    }
}

/// Q6_K: 6-bit codes stored with +32, 16-value sub-blocks with i8 scales.
struct Q6K;

impl Decode for Q6K {
    const BYTES: usize = BlockQ6K::BYTES;
    const HAS_MIN: bool = false;
    const OFFSET: i16 = 32;

    #[inline(always)]
    unsafe fn header(xb: *const u8) -> Header {
        // SAFETY: the fields lie inside the block (caller).
        unsafe {
            let sc = _mm_loadu_si128(xb.add(offset_of!(BlockQ6K, scales)).cast());
            Header {
                d: f16_at(xb.add(offset_of!(BlockQ6K, d))),
                dmin: 0.0,
                sc16: _mm256_cvtepi8_epi16(sc),
                min16: _mm256_setzero_si256(),
            }
        }
    }

    #[inline(always)]
    unsafe fn codes(xb: *const u8, h: usize) -> [__m256i; 4] {
        // SAFETY: bytes 64h..64h + 64 of `ql` and 32h..32h + 32 of `qh` lie inside the block.
        unsafe {
            let low4 = _mm256_set1_epi8(0x0F);
            let bits45 = _mm256_set1_epi8(0x30);
            let ql = xb.add(offset_of!(BlockQ6K, ql) + 64 * h);
            let ql0 = _mm256_loadu_si256(ql.cast());
            let ql1 = _mm256_loadu_si256(ql.add(32).cast());
            let qh = _mm256_loadu_si256(xb.add(offset_of!(BlockQ6K, qh) + 32 * h).cast());
            // Values 128h + 32g + l: low bits from the low nibbles of ql bytes l (g = 0),
            // 32 + l (g = 1), their high nibbles (g = 2, 3); high bits from bit pair g of
            // qh[l].
            [
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
            ]
        }
    }
}

/// Q3_K: 2 low bits in `qs`, a high bit in `hmask` (set: code ≥ 0), signed 6-bit scales per
/// 16 values stored with +32.
struct Q3K;

impl Decode for Q3K {
    const BYTES: usize = BlockQ3K::BYTES;
    const HAS_MIN: bool = false;
    const OFFSET: i16 = 4;

    #[inline(always)]
    unsafe fn header(xb: *const u8) -> Header {
        // SAFETY: the 12 scale bytes and `d` lie inside the block (caller); unaligned reads.
        unsafe {
            const LOW4: u64 = 0x0F0F_0F0F_0F0F_0F0F;
            const LOW2: u32 = 0x0303_0303;
            let s = xb.add(offset_of!(BlockQ3K, scales));
            let lo8 = s.cast::<u64>().read_unaligned();
            let hi = read_u32(s.add(8));
            // Scale j: low 4 bits from byte j (j < 8, low nibble) or j − 8 (high nibble),
            // high 2 bits from bits 2·(j / 4) of byte 8 + j % 4.
            let h = |q: u32| ((hi >> (2 * q)) & LOW2) << 4;
            let first = (lo8 & LOW4) | (h(0) as u64) | ((h(1) as u64) << 32);
            let second = ((lo8 >> 4) & LOW4) | (h(2) as u64) | ((h(3) as u64) << 32);
            let v = _mm_set_epi64x(second as i64, first as i64);
            let sc = _mm_sub_epi8(v, _mm_set1_epi8(32));
            Header {
                d: f16_at(xb.add(offset_of!(BlockQ3K, d))),
                dmin: 0.0,
                sc16: _mm256_cvtepi8_epi16(sc),
                min16: _mm256_setzero_si256(),
            }
        }
    }

    #[inline(always)]
    unsafe fn codes(xb: *const u8, h: usize) -> [__m256i; 4] {
        // SAFETY: `hmask` and bytes 32h..32h + 32 of `qs` lie inside the block (caller).
        unsafe {
            let low2 = _mm256_set1_epi8(0x03);
            let bit2 = _mm256_set1_epi8(0x04);
            let q = _mm256_loadu_si256(xb.add(offset_of!(BlockQ3K, qs) + 32 * h).cast());
            // Value 128h + 32g + l: bits 2g, 2g + 1 of qs[32h + l], and bit 4h + g of
            // hmask[l] as the third (4); the second half's mask bits moved down by four first.
            let mut m = _mm256_loadu_si256(xb.add(offset_of!(BlockQ3K, hmask)).cast());
            if h == 1 {
                m = _mm256_srli_epi16::<4>(m);
            }
            [
                _mm256_or_si256(
                    _mm256_and_si256(q, low2),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(m), bit2),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<2>(q), low2),
                    _mm256_and_si256(_mm256_slli_epi16::<1>(m), bit2),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(q), low2),
                    _mm256_and_si256(m, bit2),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<6>(q), low2),
                    _mm256_and_si256(_mm256_srli_epi16::<1>(m), bit2),
                ),
            ]
        }
    }
}

/// Q2_K: 2-bit codes, 16-value sub-blocks with a 4-bit scale and a 4-bit minimum each.
struct Q2K;

impl Decode for Q2K {
    const BYTES: usize = BlockQ2K::BYTES;
    const HAS_MIN: bool = true;
    const OFFSET: i16 = 0;

    #[inline(always)]
    unsafe fn header(xb: *const u8) -> Header {
        // SAFETY: the fields lie inside the block (caller).
        unsafe {
            let s = _mm_loadu_si128(xb.add(offset_of!(BlockQ2K, scales)).cast());
            let low4 = _mm_set1_epi8(0x0F);
            Header {
                d: f16_at(xb.add(offset_of!(BlockQ2K, d))),
                dmin: f16_at(xb.add(offset_of!(BlockQ2K, dmin))),
                sc16: _mm256_cvtepu8_epi16(_mm_and_si128(s, low4)),
                min16: _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(s), low4)),
            }
        }
    }

    #[inline(always)]
    unsafe fn codes(xb: *const u8, h: usize) -> [__m256i; 4] {
        // SAFETY: bytes 32h..32h + 32 of `qs` lie inside the block (caller).
        unsafe {
            let low2 = _mm256_set1_epi8(0x03);
            // Value 128h + 32g + b: bits 2g, 2g + 1 of byte 32h + b.
            let q = _mm256_loadu_si256(xb.add(offset_of!(BlockQ2K, qs) + 32 * h).cast());
            [
                _mm256_and_si256(q, low2),
                _mm256_and_si256(_mm256_srli_epi16::<2>(q), low2),
                _mm256_and_si256(_mm256_srli_epi16::<4>(q), low2),
                _mm256_and_si256(_mm256_srli_epi16::<6>(q), low2),
            ]
        }
    }
}

macro_rules! kernel {
    ($(#[$doc:meta])* $name:ident, $X:ty) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// See the module docs.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) unsafe fn $name<const R: usize, const C: usize>(
            nb: usize,
            x: [*const u8; R],
            y: [*const u8; C],
        ) -> [[f32; C]; R] {
            // SAFETY: forwarded from the caller.
            unsafe { tiled::<$X, R, C>(nb, x, y) }
        }
    };
}

kernel!(
    /// Q2_K × Q8_K in ggml's tiled order.
    q2_k_tiled,
    Q2K
);
kernel!(
    /// Q3_K × Q8_K in ggml's tiled order.
    q3_k_tiled,
    Q3K
);
kernel!(
    /// Q4_K × Q8_K in ggml's tiled order.
    q4_k_tiled,
    Q4K
);
kernel!(
    /// Q5_K × Q8_K in ggml's tiled order.
    q5_k_tiled,
    Q5K
);
kernel!(
    /// Q6_K × Q8_K in ggml's tiled order.
    q6_k_tiled,
    Q6K
);

/// IQ4_XS × Q8_K in ggml's tiled order (see the module docs): levels times sub-block scale
/// as i16, against the widened activations.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn iq4_xs_tiled<const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of every row and column is readable (caller); unaligned loads;
    // the CPU features are the caller's guarantee.
    unsafe {
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
        let low4 = _mm256_set1_epi8(0x0F);
        let mut acc = [_mm_setzero_ps(); R];
        for i in 0..nb {
            let dy = column_scales(&y, i);
            let yb: [*const u8; C] = y.map(|p| p.add(i * Q8K + Q8K_QS));
            for r in 0..R {
                let xb = x[r].add(i * BlockIQ4XS::BYTES);
                let hd = Header {
                    d: f16_at(xb.add(offset_of!(BlockIQ4XS, d))),
                    dmin: 0.0,
                    sc16: _mm256_setzero_si256(),
                    min16: _mm256_setzero_si256(),
                };
                let sh = read_u16(xb.add(offset_of!(BlockIQ4XS, scales_h))) as u32;
                let sl = read_u32(xb.add(offset_of!(BlockIQ4XS, scales_l)));
                let mut s = [_mm256_setzero_si256(); C];
                for ib in 0..8 {
                    // Sub-block ib: low 4 bits of its scale in nibble ib of scales_l, high 2
                    // in bits 2·ib of scales_h; stored with +32.
                    let ls = ((sl >> (4 * ib)) & 0x0F) | (((sh >> (2 * ib)) & 3) << 4);
                    let ls = _mm256_set1_epi16(ls as i16 - 32);
                    // Bytes 16·ib + j: value j in the low nibble, value 16 + j in the high.
                    let q = _mm_loadu_si128(xb.add(offset_of!(BlockIQ4XS, qs) + 16 * ib).cast());
                    let idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(q), q), low4);
                    let lv = _mm256_shuffle_epi8(table, idx);
                    let w0 =
                        _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(lv)), ls);
                    let w1 = _mm256_mullo_epi16(
                        _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(lv)),
                        ls,
                    );
                    for c in 0..C {
                        let yq = yb[c].add(32 * ib);
                        let y0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(yq.cast()));
                        let y1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(yq.add(16).cast()));
                        let p =
                            _mm256_add_epi32(_mm256_madd_epi16(w0, y0), _mm256_madd_epi16(w1, y1));
                        s[c] = _mm256_add_epi32(s[c], p);
                    }
                }
                acc[r] = accumulate(false, acc[r], &hd, sums(&s), _mm_setzero_si128(), dy);
            }
        }
        lanes(acc)
    }
}

// -------------------------------------------------------------------------------------------
// Panels: any number of rows × up to 16 columns
// -------------------------------------------------------------------------------------------

/// Columns a panel takes at most.
pub(crate) const PANEL_COLS: usize = 16;

/// Columns of one accumulator group of the panel kernels.
pub(super) const GROUP: usize = 8;

/// The eight 32-bit sums of `a[0..8]` (one per column), lane `c` for column `c`.
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
pub(super) unsafe fn sums8(a: &[__m256i; GROUP]) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        let h01 = _mm256_hadd_epi32(a[0], a[1]);
        let h23 = _mm256_hadd_epi32(a[2], a[3]);
        let h45 = _mm256_hadd_epi32(a[4], a[5]);
        let h67 = _mm256_hadd_epi32(a[6], a[7]);
        // Per 128-bit half: the partial sums of columns 0..4 (q0) and 4..8 (q1) over that
        // half of each accumulator.
        let q0 = _mm256_hadd_epi32(h01, h23);
        let q1 = _mm256_hadd_epi32(h45, h67);
        let lo = _mm256_permute2x128_si256::<0x20>(q0, q1);
        let hi = _mm256_permute2x128_si256::<0x31>(q0, q1);
        _mm256_add_epi32(lo, hi)
    }
}

/// `acc[0..8] = fma(r, dy, acc)` with `r = d·f32(s1)` (with minimums then
/// `r = fma(−dmin, f32(s2), r)`), per lane: [`accumulate`] for eight columns.
///
/// # Safety
/// Eight f32 readable and writable at `acc`, eight readable at `dy`; AVX2 and FMA.
#[inline(always)]
pub(super) unsafe fn accumulate8(
    min: bool,
    acc: *mut f32,
    d: f32,
    dmin: f32,
    s1: __m256i,
    s2: __m256i,
    dy: *const f32,
) {
    // SAFETY: the caller guarantees the memory and the CPU features.
    unsafe {
        let mut r = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s1));
        if min {
            r = _mm256_fnmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(s2), r);
        }
        let a = _mm256_fmadd_ps(r, _mm256_loadu_ps(dy), _mm256_loadu_ps(acc));
        _mm256_storeu_ps(acc, a);
    }
}

/// The column pointers of a panel, padded to [`PANEL_COLS`] with the first one (padded
/// columns compute into lanes nobody reads).
pub(super) fn padded(y: &[*const u8]) -> [*const u8; PANEL_COLS] {
    std::array::from_fn(|c| if c < y.len() { y[c] } else { y[0] })
}

/// The shared loop of the k-quant panel kernels: `out[r·PANEL_COLS + c] = dot(x[r], y[c])`
/// in `dot_tiled`'s order, for every row of `x` and the `y.len()` ≤ [`PANEL_COLS`] columns.
/// Per super-block, each row's block is decoded once (codes and per-chunk scales into a
/// buffer) and dotted with the columns eight at a time.
///
/// # Safety
/// As the kernels; `1 ≤ y.len() ≤ PANEL_COLS`, `out` holds `x.len()·PANEL_COLS` values.
#[inline(always)]
unsafe fn panel<X: Decode>(nb: usize, x: &[*const u8], y: &[*const u8], out: &mut [f32]) {
    debug_assert!(!y.is_empty() && y.len() <= PANEL_COLS);
    debug_assert!(out.len() >= x.len() * PANEL_COLS);
    // SAFETY: block i < nb of every row and column is readable (caller); unaligned loads;
    // `out` has room for every row (checked above); the CPU features are the caller's
    // guarantee.
    unsafe {
        let masks: [__m256i; 4] = SCALE_PAIRS.map(|m| _mm256_loadu_si256(m.as_ptr().cast()));
        let groups = y.len().div_ceil(GROUP);
        let y = padded(y);
        out[..x.len() * PANEL_COLS].fill(0.0);
        let mut codes = [_mm256_setzero_si256(); 8];
        let mut scales = [_mm256_setzero_si256(); 8];
        for i in 0..nb {
            let mut dy = [0f32; PANEL_COLS];
            for (d, p) in dy.iter_mut().zip(&y) {
                *d = read_f32(p.add(i * Q8K + offset_of!(BlockQ8K, d)));
            }
            let yb: [*const u8; PANEL_COLS] = y.map(|p| p.add(i * Q8K));
            for (r, &xr) in x.iter().enumerate() {
                let xb = xr.add(i * X::BYTES);
                if i + 1 < nb {
                    // The row's next block, while this one is computed.
                    let next = xb.add(X::BYTES);
                    let mut o = 0;
                    while o < X::BYTES {
                        _mm_prefetch::<_MM_HINT_T0>(next.add(o).cast());
                        o += 64;
                    }
                }
                let hd = X::header(xb);
                for h in 0..2 {
                    let c4 = X::codes(xb, h);
                    let sc8 = if h == 0 {
                        _mm256_permute4x64_epi64::<0b01_00_01_00>(hd.sc16)
                    } else {
                        _mm256_permute4x64_epi64::<0b11_10_11_10>(hd.sc16)
                    };
                    for g in 0..4 {
                        codes[4 * h + g] = c4[g];
                        scales[4 * h + g] = _mm256_shuffle_epi8(sc8, masks[g]);
                    }
                }
                let neg = _mm256_mullo_epi16(hd.sc16, _mm256_set1_epi16(-X::OFFSET));
                for grp in 0..groups {
                    let cols: [*const u8; GROUP] = std::array::from_fn(|c| yb[GROUP * grp + c]);
                    let bsums: [__m256i; GROUP] =
                        cols.map(|p| _mm256_loadu_si256(p.add(Q8K_BSUMS).cast()));
                    let mut s = [_mm256_setzero_si256(); GROUP];
                    if X::OFFSET != 0 {
                        for c in 0..GROUP {
                            s[c] = _mm256_madd_epi16(neg, bsums[c]);
                        }
                    }
                    for k in 0..8 {
                        let (w, sc) = (codes[k], scales[k]);
                        for c in 0..GROUP {
                            let v = _mm256_loadu_si256(cols[c].add(Q8K_QS + 32 * k).cast());
                            let p = _mm256_maddubs_epi16(w, v);
                            s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(p, sc));
                        }
                    }
                    let s1 = sums8(&s);
                    let s2 = if X::HAS_MIN {
                        sums8(&bsums.map(|b| _mm256_madd_epi16(hd.min16, b)))
                    } else {
                        _mm256_setzero_si256()
                    };
                    accumulate8(
                        X::HAS_MIN,
                        out.as_mut_ptr().add(r * PANEL_COLS + GROUP * grp),
                        hd.d,
                        hd.dmin,
                        s1,
                        s2,
                        dy.as_ptr().add(GROUP * grp),
                    );
                }
            }
        }
    }
}

/// The IQ4_XS panel kernel ([`panel`]'s contract): per super-block the columns' activations
/// widened to 16 bits once, each row's levels times its sub-block scales once.
///
/// # Safety
/// As [`panel`].
#[inline(always)]
unsafe fn panel_iq4_xs(nb: usize, x: &[*const u8], y: &[*const u8], out: &mut [f32]) {
    debug_assert!(!y.is_empty() && y.len() <= PANEL_COLS);
    debug_assert!(out.len() >= x.len() * PANEL_COLS);
    // SAFETY: as in `panel`.
    unsafe {
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
        let low4 = _mm256_set1_epi8(0x0F);
        let groups = y.len().div_ceil(GROUP);
        let ncols = groups * GROUP;
        let y = padded(y);
        out[..x.len() * PANEL_COLS].fill(0.0);
        let mut wide = [[_mm256_setzero_si256(); 16]; PANEL_COLS];
        let mut w = [_mm256_setzero_si256(); 16];
        for i in 0..nb {
            let mut dy = [0f32; PANEL_COLS];
            for c in 0..ncols {
                let yb = y[c].add(i * Q8K);
                dy[c] = read_f32(yb.add(offset_of!(BlockQ8K, d)));
                for (j, v) in wide[c].iter_mut().enumerate() {
                    *v = _mm256_cvtepi8_epi16(_mm_loadu_si128(yb.add(Q8K_QS + 16 * j).cast()));
                }
            }
            for (r, &xr) in x.iter().enumerate() {
                let xb = xr.add(i * BlockIQ4XS::BYTES);
                if i + 1 < nb {
                    let next = xb.add(BlockIQ4XS::BYTES);
                    let mut o = 0;
                    while o < BlockIQ4XS::BYTES {
                        _mm_prefetch::<_MM_HINT_T0>(next.add(o).cast());
                        o += 64;
                    }
                }
                let d = f16_at(xb.add(offset_of!(BlockIQ4XS, d)));
                let sh = read_u16(xb.add(offset_of!(BlockIQ4XS, scales_h))) as u32;
                let sl = read_u32(xb.add(offset_of!(BlockIQ4XS, scales_l)));
                for ib in 0..8 {
                    let ls = ((sl >> (4 * ib)) & 0x0F) | (((sh >> (2 * ib)) & 3) << 4);
                    let ls = _mm256_set1_epi16(ls as i16 - 32);
                    let q = _mm_loadu_si128(xb.add(offset_of!(BlockIQ4XS, qs) + 16 * ib).cast());
                    let idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(q), q), low4);
                    let lv = _mm256_shuffle_epi8(table, idx);
                    w[2 * ib] =
                        _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(lv)), ls);
                    w[2 * ib + 1] = _mm256_mullo_epi16(
                        _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(lv)),
                        ls,
                    );
                }
                for grp in 0..groups {
                    let mut s = [_mm256_setzero_si256(); GROUP];
                    for j in 0..16 {
                        let wj = w[j];
                        for c in 0..GROUP {
                            let p = _mm256_madd_epi16(wj, wide[GROUP * grp + c][j]);
                            s[c] = _mm256_add_epi32(s[c], p);
                        }
                    }
                    accumulate8(
                        false,
                        out.as_mut_ptr().add(r * PANEL_COLS + GROUP * grp),
                        d,
                        0.0,
                        sums8(&s),
                        _mm256_setzero_si256(),
                        dy.as_ptr().add(GROUP * grp),
                    );
                }
            }
        }
    }
}

/// A panel kernel: `out[r·PANEL_COLS + c]` = row `x[r]` · column `y[c]` (`nb` super-blocks
/// each) in ggml's tiled order, for every row and the `1..=PANEL_COLS` columns.
pub(crate) type PanelFn = unsafe fn(nb: usize, x: &[*const u8], y: &[*const u8], out: &mut [f32]);

macro_rules! panel_kernel {
    ($(#[$doc:meta])* $name:ident, $body:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// A CPU with AVX2, FMA and F16C; `nb` whole blocks readable at every row and column
        /// pointer; `1 ≤ y.len() ≤ PANEL_COLS`; `out` holds `x.len()·PANEL_COLS` values.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) unsafe fn $name(nb: usize, x: &[*const u8], y: &[*const u8], out: &mut [f32]) {
            // SAFETY: forwarded from the caller.
            unsafe { $body(nb, x, y, out) }
        }
    };
}

panel_kernel!(
    /// Q2_K panels in ggml's tiled order.
    q2_k_panel,
    panel::<Q2K>
);
panel_kernel!(
    /// Q3_K panels in ggml's tiled order.
    q3_k_panel,
    panel::<Q3K>
);
panel_kernel!(
    /// Q4_K panels in ggml's tiled order.
    q4_k_panel,
    panel::<Q4K>
);
panel_kernel!(
    /// Q5_K panels in ggml's tiled order.
    q5_k_panel,
    panel::<Q5K>
);
panel_kernel!(
    /// Q6_K panels in ggml's tiled order.
    q6_k_panel,
    panel::<Q6K>
);
panel_kernel!(
    /// IQ4_XS panels in ggml's tiled order.
    iq4_xs_panel,
    panel_iq4_xs
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quants::k_quants::tiled::{dot_tiled, TiledBlock};

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 16
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A finite, normal f16 `±(1..2)·2^e`, `e` in −14..=6, as bytes.
    fn f16_bytes(r: &mut Rng) -> [u8; 2] {
        let e = r.below(21) as i32 - 14;
        let v = (1.0 + r.below(1024) as f32 / 1024.0) * 2f32.powi(e);
        let v = if r.below(2) == 0 { v } else { -v };
        half::f16::from_f32(v).to_le_bytes()
    }

    /// `nb` blocks of `B`: random bytes, or (`pattern` 1, 2) all bytes 0x00 or 0xFF (every
    /// code and scale at an end of its range), with random f16 scales.
    fn weight_row<B: TiledBlock>(nb: usize, pattern: u64, r: &mut Rng) -> Vec<u8> {
        let halves: &[usize] = match B::DTYPE {
            crate::dtype::DType::Q2K => &[offset_of!(BlockQ2K, d), offset_of!(BlockQ2K, dmin)],
            crate::dtype::DType::Q3K => &[offset_of!(BlockQ3K, d)],
            crate::dtype::DType::Q4K => &[offset_of!(BlockQ4K, d), offset_of!(BlockQ4K, dmin)],
            crate::dtype::DType::Q5K => &[offset_of!(BlockQ5K, d), offset_of!(BlockQ5K, dmin)],
            crate::dtype::DType::Q6K => &[offset_of!(BlockQ6K, d)],
            // IQ1_M's scale is the top nibbles of its four scale words (set below).
            crate::dtype::DType::IQ1M => &[],
            // IQ4_XS and the other grid i-quants start with their f16 scale.
            _ => &[offset_of!(BlockIQ4XS, d)],
        };
        let mut out = vec![0u8; nb * B::BYTES];
        for blk in out.chunks_exact_mut(B::BYTES) {
            for b in blk.iter_mut() {
                *b = match pattern {
                    1 => 0x00,
                    2 => 0xFF,
                    _ => r.next() as u8,
                };
            }
            for &o in halves {
                blk[o..o + 2].copy_from_slice(&f16_bytes(r));
            }
            if B::DTYPE == crate::dtype::DType::IQ1M {
                let d = u16::from_le_bytes(f16_bytes(r));
                for k in 0..4 {
                    let b = &mut blk[48 + 2 * k + 1];
                    *b = (*b & 0x0F) | ((((d >> (4 * k)) & 15) as u8) << 4);
                }
            }
        }
        out
    }

    /// `nb` Q8_K blocks with their `bsums`: random codes, or (`pattern` 1, 2) all −128 or
    /// all 127.
    fn q8k_row(nb: usize, pattern: u64, r: &mut Rng) -> Vec<u8> {
        let mut out = vec![0u8; nb * Q8K];
        for blk in out.chunks_exact_mut(Q8K) {
            let e = r.below(30) as i32 - 20;
            let d = (1.0 + r.below(1000) as f32 / 1000.0) * 2f32.powi(e);
            let d = if r.below(2) == 0 { d } else { -d };
            blk[..4].copy_from_slice(&d.to_le_bytes());
            for q in &mut blk[Q8K_QS..Q8K_BSUMS] {
                *q = match pattern {
                    1 => 0x80,
                    2 => 0x7F,
                    _ => r.next() as u8,
                };
            }
            for j in 0..16 {
                let s: i32 = (0..16).map(|l| blk[Q8K_QS + 16 * j + l] as i8 as i32).sum();
                let at = Q8K_BSUMS + 2 * j;
                blk[at..at + 2].copy_from_slice(&(s as i16).to_le_bytes());
            }
        }
        out
    }

    type Kernel<const R: usize, const C: usize> =
        unsafe fn(usize, [*const u8; R], [*const u8; C]) -> [[f32; C]; R];

    /// Kernel `k` on rows `xs[..R]` and columns `ys[..C]` equals `dot_tiled` bit for bit.
    fn check_shape<B: TiledBlock, const R: usize, const C: usize>(
        k: Kernel<R, C>,
        nb: usize,
        xs: &[Vec<u8>],
        ys: &[Vec<u8>],
    ) {
        let x: [*const u8; R] = std::array::from_fn(|r| xs[r].as_ptr());
        let y: [*const u8; C] = std::array::from_fn(|c| ys[c].as_ptr());
        // SAFETY: the test runs only where the CPU has AVX2, FMA and F16C; every row and
        // column holds `nb` whole blocks.
        let got = unsafe { k(nb, x, y) };
        for r in 0..R {
            for c in 0..C {
                let want = dot_tiled::<B>(nb * 256, &xs[r], &ys[c]);
                assert_eq!(
                    got[r][c].to_bits(),
                    want.to_bits(),
                    "{} {R}x{C} nb={nb} ({r}, {c}): {} vs {want}",
                    B::DTYPE,
                    got[r][c]
                );
            }
        }
    }

    macro_rules! check {
        ($B:ty, $k:ident) => {{
            let mut r = Rng(0x5eed ^ <$B as BlockQuant>::BYTES as u64);
            for nb in [1usize, 2, 3, 7] {
                for rep in 0..6 {
                    // Rows and columns: random, then extremes mixed in.
                    let xs: Vec<Vec<u8>> = (0..4)
                        .map(|i| {
                            weight_row::<$B>(nb, if rep < 2 { 0 } else { (i + rep) % 3 }, &mut r)
                        })
                        .collect();
                    let ys: Vec<Vec<u8>> = (0..4)
                        .map(|i| q8k_row(nb, if rep < 2 { 0 } else { (i + 2 * rep) % 3 }, &mut r))
                        .collect();
                    check_shape::<$B, 4, 4>($k::<4, 4>, nb, &xs, &ys);
                    check_shape::<$B, 1, 1>($k::<1, 1>, nb, &xs, &ys);
                    check_shape::<$B, 1, 4>($k::<1, 4>, nb, &xs, &ys);
                    check_shape::<$B, 4, 1>($k::<4, 1>, nb, &xs, &ys);
                    check_shape::<$B, 2, 3>($k::<2, 3>, nb, &xs, &ys);
                    check_shape::<$B, 3, 2>($k::<3, 2>, nb, &xs, &ys);
                }
            }
        }};
    }

    /// Panel kernel `p` on `rows` weight rows and `cols` columns equals `dot_tiled`.
    fn check_panel<B: TiledBlock>(p: PanelFn, nb: usize, xs: &[Vec<u8>], ys: &[Vec<u8>]) {
        let x: Vec<*const u8> = xs.iter().map(|v| v.as_ptr()).collect();
        let y: Vec<*const u8> = ys.iter().map(|v| v.as_ptr()).collect();
        let mut out = vec![f32::NAN; x.len() * PANEL_COLS];
        // SAFETY: AVX2, FMA and F16C checked by the caller; `nb` blocks in every row and
        // column; 1..=16 columns; `out` sized for the rows.
        unsafe { p(nb, &x, &y, &mut out) };
        for (r, xr) in xs.iter().enumerate() {
            for (c, yc) in ys.iter().enumerate() {
                let want = dot_tiled::<B>(nb * 256, xr, yc);
                let got = out[r * PANEL_COLS + c];
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{} panel {}x{} nb={nb} ({r}, {c}): {got} vs {want}",
                    B::DTYPE,
                    xs.len(),
                    ys.len()
                );
            }
        }
    }

    fn panels<B: TiledBlock>(p: PanelFn) {
        let mut r = Rng(0xface ^ B::BYTES as u64);
        for nb in [1usize, 2, 5] {
            for (rows, cols) in [(1, 1), (3, 5), (16, 16), (2, 8), (5, 9), (16, 12), (1, 16)] {
                for rep in 0..3 {
                    let xs: Vec<Vec<u8>> = (0..rows)
                        .map(|i| {
                            weight_row::<B>(
                                nb,
                                if rep == 0 { 0 } else { (i + rep) as u64 % 3 },
                                &mut r,
                            )
                        })
                        .collect();
                    let ys: Vec<Vec<u8>> = (0..cols)
                        .map(|i| {
                            q8k_row(
                                nb,
                                if rep == 0 {
                                    0
                                } else {
                                    (2 * i + rep) as u64 % 3
                                },
                                &mut r,
                            )
                        })
                        .collect();
                    check_panel::<B>(p, nb, &xs, &ys);
                }
            }
        }
    }

    /// Every panel kernel (k-quants, IQ4_XS, grid i-quants) gives `dot_tiled`'s bits for every
    /// element, for any number of rows and 1..=16 columns (partial groups of eight included),
    /// random and extreme blocks (−128 activations included).
    #[test]
    fn panel_kernels_equal_dot_tiled() {
        if !avx2() {
            return;
        }
        panels::<BlockQ2K>(q2_k_panel);
        panels::<BlockQ3K>(q3_k_panel);
        panels::<BlockQ4K>(q4_k_panel);
        panels::<BlockQ5K>(q5_k_panel);
        panels::<BlockQ6K>(q6_k_panel);
        panels::<BlockIQ4XS>(iq4_xs_panel);
        use super::super::iquants as iq;
        use crate::quants::{
            BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS,
        };
        panels::<BlockIQ2XXS>(iq::iq2_xxs_panel);
        panels::<BlockIQ2XS>(iq::iq2_xs_panel);
        panels::<BlockIQ2S>(iq::iq2_s_panel);
        panels::<BlockIQ3XXS>(iq::iq3_xxs_panel);
        panels::<BlockIQ3S>(iq::iq3_s_panel);
        panels::<BlockIQ1S>(iq::iq1_s_panel);
        panels::<BlockIQ1M>(iq::iq1_m_panel);
    }

    fn avx2() -> bool {
        use std::arch::is_x86_feature_detected as has;
        has!("avx2") && has!("fma") && has!("f16c")
    }

    /// The AVX-512 VNNI panels of the grid i-quants (`iquants512`) give `dot_tiled`'s bits
    /// as their AVX2 twins do: the shapes of [`panel_kernels_equal_dot_tiled`], then every
    /// column count 1..=16 on random and extreme blocks (−128 activations included).
    #[test]
    fn vnni_iq_panels_equal_dot_tiled() {
        if !crate::cpu::features().runs(crate::cpu::Isa::Avx512Vnni) {
            return;
        }
        use super::super::iquants512 as iq;
        use crate::quants::{
            BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS,
        };
        fn all_columns<B: TiledBlock>(p: PanelFn) {
            panels::<B>(p);
            let mut r = Rng(0xc0de ^ B::BYTES as u64);
            for cols in 1..=PANEL_COLS {
                for rep in 0..2u64 {
                    let xs: Vec<Vec<u8>> = (0..3)
                        .map(|i| weight_row::<B>(2, (i + rep) % 3, &mut r))
                        .collect();
                    let ys: Vec<Vec<u8>> = (0..cols as u64)
                        .map(|i| q8k_row(2, (i + rep) % 3, &mut r))
                        .collect();
                    check_panel::<B>(p, 2, &xs, &ys);
                }
            }
        }
        all_columns::<BlockIQ2XXS>(iq::iq2_xxs_panel_vnni);
        all_columns::<BlockIQ2XS>(iq::iq2_xs_panel_vnni);
        all_columns::<BlockIQ2S>(iq::iq2_s_panel_vnni);
        all_columns::<BlockIQ3XXS>(iq::iq3_xxs_panel_vnni);
        all_columns::<BlockIQ3S>(iq::iq3_s_panel_vnni);
        all_columns::<BlockIQ1S>(iq::iq1_s_panel_vnni);
        all_columns::<BlockIQ1M>(iq::iq1_m_panel_vnni);
    }

    /// Every kernel, every tile shape, gives `dot_tiled`'s bits, for random blocks and for
    /// codes, scales and activations at the ends of their ranges (−128 included).
    #[test]
    fn tiled_kernels_equal_dot_tiled() {
        if !avx2() {
            return;
        }
        check!(BlockQ2K, q2_k_tiled);
        check!(BlockQ3K, q3_k_tiled);
        check!(BlockQ4K, q4_k_tiled);
        check!(BlockQ5K, q5_k_tiled);
        check!(BlockQ6K, q6_k_tiled);
        check!(BlockIQ4XS, iq4_xs_tiled);
    }
}
