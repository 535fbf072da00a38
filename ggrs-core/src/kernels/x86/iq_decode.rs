//! The grid i-quant blocks (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) decoded
//! straight into AVX2 registers, 32 values at a time, for the kernels of `iquants.rs`.
//!
//! A block decodes to what the portable decoder (`IqBlock::codes`, `Iq1Block::codes`) writes to memory: per
//! 32-value chunk `k` the grid magnitudes (bytes) and a mask of 0xFF bytes where the value
//! is negative, and the odd multiplier `2s + 1` of each 16 values. Building the vectors
//! from the table rows with inserts (as ggml's AVX2 kernels do with `_mm256_set_epi64x`)
//! rather than through a decoded array avoids storing 512 bytes per block and reloading them
//! as vectors (loads that span several smaller stores wait for them to retire). The bits are
//! those of `IqBlock::codes`: the tests of `iquants.rs` compare the two on any bytes.
//!
//! # Safety
//! Every function needs a CPU with AVX2 and one whole block of its type readable at `xb`.

use std::arch::x86_64::*;
use std::mem::offset_of;

use super::util::{f16_at, read_u16, read_u32};
use crate::quants::iq_grids::IQ1S_GRID;
use crate::quants::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use crate::quants::{
    BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS, BlockQuant,
};

/// `KSIGN_MASK[i]`: byte `j` is 0xFF where bit `j` of ggml's `ksigns_iq2xs[i]` is set (seven
/// stored sign bits, the eighth making their count even).
static KSIGN_MASK: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0usize;
    while i < 128 {
        let bits = i | ((i.count_ones() as usize & 1) << 7);
        let mut j = 0;
        while j < 8 {
            if (bits >> j) & 1 == 1 {
                t[i] |= 0xFF << (8 * j);
            }
            j += 1;
        }
        i += 1;
    }
    t
};

/// A grid i-quant block of the IQ2/IQ3 kind as the AVX2 kernels read it.
pub(super) trait IqSimd: BlockQuant {
    /// True for IQ1_S/IQ1_M: [`IqSimd::chunk`] gives grid values −1, 0, 1 and a mask of the
    /// negative shifts instead of magnitudes and negative values.
    const GRID1: bool;
    /// The factor of ggml's tiled order's block scale (`IqBlock::FACTOR` for IQ2/IQ3, 1/8
    /// for IQ1); the IQ2/IQ3 vec_dot kernels end with it too.
    const FACTOR: f32;

    /// The block scale `d` (f16) as f32.
    ///
    /// # Safety
    /// See the module docs (and F16C).
    #[inline(always)]
    unsafe fn d(xb: *const u8) -> f32 {
        // SAFETY: every IQ2/IQ3 block starts with its f16 scale (caller: a readable block).
        unsafe { f16_at(xb) }
    }

    /// The odd multipliers `2s + 1` of the sixteen 16-value groups, one byte each.
    ///
    /// # Safety
    /// See the module docs.
    unsafe fn ls_bytes(xb: *const u8) -> __m128i;

    /// Values `32k .. 32k + 32` (`k < 8`): the grid magnitudes and the negative-value mask.
    ///
    /// # Safety
    /// See the module docs; `k < 8`.
    unsafe fn chunk(xb: *const u8, k: usize) -> (__m256i, __m256i);
}

/// `2n + 1` of sixteen nibble bytes.
#[inline(always)]
unsafe fn odd(n: __m128i) -> __m128i {
    // SAFETY: register-only SSE2 operations (bytes ≤ 15, so no carry crosses a byte).
    unsafe { _mm_or_si128(_mm_add_epi8(n, n), _mm_set1_epi8(1)) }
}

/// The nibbles of the eight bytes in `v` (low nibble first) as sixteen bytes.
#[inline(always)]
unsafe fn split_nibbles(v: __m128i) -> __m128i {
    // SAFETY: register-only SSE2 operations.
    unsafe {
        let low4 = _mm_set1_epi8(0x0F);
        let lo = _mm_and_si128(v, low4);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), low4);
        _mm_unpacklo_epi8(lo, hi)
    }
}

/// The multipliers of the two XXS types: the top nibbles of the eight sign-and-scale words at
/// `aux`, `stride` bytes apart, each for both 16-value halves of its 32 values.
///
/// # Safety
/// The eight words are readable.
#[inline(always)]
unsafe fn xxs_ls(aux: *const u8, stride: usize) -> __m128i {
    // SAFETY: the caller guarantees the words.
    unsafe {
        let mut n = 0u64;
        for k in 0..8 {
            n |= ((read_u32(aux.add(stride * k)) >> 28) as u64) << (8 * k);
        }
        let v = _mm_cvtsi64_si128(n as i64);
        odd(_mm_unpacklo_epi8(v, v))
    }
}

/// The four 7-bit sign indices of an XXS sign-and-scale word as 0xFF masks of 32 values.
#[inline(always)]
unsafe fn xxs_signs(aux: u32) -> __m256i {
    let m = |l: u32| KSIGN_MASK[((aux >> (7 * l)) & 127) as usize] as i64;
    // SAFETY: register-only AVX operations.
    unsafe { _mm256_set_epi64x(m(3), m(2), m(1), m(0)) }
}

/// Four sign bytes (bit `j` of byte `l`: value `8l + j` negative) at `p` as 0xFF masks.
///
/// # Safety
/// Four bytes are readable at `p`; AVX2.
#[inline(always)]
unsafe fn sign_bytes(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the bytes and AVX2.
    unsafe {
        let s = _mm256_set1_epi32(read_u32(p) as i32);
        // Byte l of the word into bytes 8l..8l + 8 (bytes 2, 3 from the upper 128-bit half).
        let spread = _mm256_setr_epi64x(
            0,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let b = _mm256_and_si256(_mm256_shuffle_epi8(s, spread), bit);
        _mm256_cmpeq_epi8(b, bit)
    }
}

impl IqSimd for BlockIQ2XXS {
    const GRID1: bool = false;
    const FACTOR: f32 = 0.125;

    #[inline(always)]
    unsafe fn ls_bytes(xb: *const u8) -> __m128i {
        // SAFETY: word k of the block's `qs` sits at 8k + 4 (caller: a readable block).
        unsafe { xxs_ls(xb.add(offset_of!(BlockIQ2XXS, qs) + 4), 8) }
    }

    #[inline(always)]
    unsafe fn chunk(xb: *const u8, k: usize) -> (__m256i, __m256i) {
        // SAFETY: bytes 8k..8k + 8 of `qs` (caller: k < 8, a readable block); AVX.
        unsafe {
            let q = xb.add(offset_of!(BlockIQ2XXS, qs) + 8 * k);
            let g = |l: usize| IQ2XXS_GRID[*q.add(l) as usize] as i64;
            let mag = _mm256_set_epi64x(g(3), g(2), g(1), g(0));
            (mag, xxs_signs(read_u32(q.add(4))))
        }
    }
}

impl IqSimd for BlockIQ3XXS {
    const GRID1: bool = false;
    const FACTOR: f32 = 0.25;

    #[inline(always)]
    unsafe fn ls_bytes(xb: *const u8) -> __m128i {
        // SAFETY: the eight words follow the 64 grid bytes (caller: a readable block).
        unsafe { xxs_ls(xb.add(offset_of!(BlockIQ3XXS, qs) + 64), 4) }
    }

    #[inline(always)]
    unsafe fn chunk(xb: *const u8, k: usize) -> (__m256i, __m256i) {
        // SAFETY: grid bytes 8k..8k + 8 and word k (caller: k < 8, a readable block); AVX.
        unsafe {
            let q = xb.add(offset_of!(BlockIQ3XXS, qs));
            let g = |l: usize| IQ3XXS_GRID[*q.add(8 * k + l) as usize] as i32;
            let mag = _mm256_set_epi32(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0));
            (mag, xxs_signs(read_u32(q.add(64 + 4 * k))))
        }
    }
}

impl IqSimd for BlockIQ2XS {
    const GRID1: bool = false;
    const FACTOR: f32 = 0.125;

    #[inline(always)]
    unsafe fn ls_bytes(xb: *const u8) -> __m128i {
        // SAFETY: the eight scale bytes (caller: a readable block).
        unsafe {
            let s = xb.add(offset_of!(BlockIQ2XS, scales));
            odd(split_nibbles(_mm_loadl_epi64(s.cast())))
        }
    }

    #[inline(always)]
    unsafe fn chunk(xb: *const u8, k: usize) -> (__m256i, __m256i) {
        // SAFETY: words 4k..4k + 4 of `qs` (caller: k < 8, a readable block); AVX.
        unsafe {
            let q = xb.add(offset_of!(BlockIQ2XS, qs) + 8 * k);
            let w = |l: usize| read_u16(q.add(2 * l));
            let g = |l: usize| IQ2XS_GRID[(w(l) & 511) as usize] as i64;
            let s = |l: usize| KSIGN_MASK[(w(l) >> 9) as usize] as i64;
            let mag = _mm256_set_epi64x(g(3), g(2), g(1), g(0));
            let neg = _mm256_set_epi64x(s(3), s(2), s(1), s(0));
            (mag, neg)
        }
    }
}

impl IqSimd for BlockIQ2S {
    const GRID1: bool = false;
    const FACTOR: f32 = 0.125;

    #[inline(always)]
    unsafe fn ls_bytes(xb: *const u8) -> __m128i {
        // SAFETY: the eight scale bytes (caller: a readable block).
        unsafe {
            let s = xb.add(offset_of!(BlockIQ2S, scales));
            odd(split_nibbles(_mm_loadl_epi64(s.cast())))
        }
    }

    #[inline(always)]
    unsafe fn chunk(xb: *const u8, k: usize) -> (__m256i, __m256i) {
        // SAFETY: grid bytes 4k..4k + 4, sign bytes 32 + 4k.., high bits byte k (caller: k < 8,
        // a readable block); AVX2.
        unsafe {
            let q = xb.add(offset_of!(BlockIQ2S, qs) + 4 * k);
            let qh = *xb.add(offset_of!(BlockIQ2S, qh) + k) as usize;
            let g = |l: usize| IQ2S_GRID[*q.add(l) as usize | (((qh >> (2 * l)) & 3) << 8)] as i64;
            let mag = _mm256_set_epi64x(g(3), g(2), g(1), g(0));
            (mag, sign_bytes(q.add(32)))
        }
    }
}

impl IqSimd for BlockIQ3S {
    const GRID1: bool = false;
    const FACTOR: f32 = 1.0;

    #[inline(always)]
    unsafe fn ls_bytes(xb: *const u8) -> __m128i {
        // SAFETY: the four scale bytes (caller: a readable block).
        unsafe {
            let s = read_u32(xb.add(offset_of!(BlockIQ3S, scales)));
            let n = split_nibbles(_mm_cvtsi32_si128(s as i32));
            odd(_mm_unpacklo_epi8(n, n))
        }
    }

    #[inline(always)]
    unsafe fn chunk(xb: *const u8, k: usize) -> (__m256i, __m256i) {
        // SAFETY: grid bytes 8k..8k + 8, high bits byte k, sign bytes 4k..4k + 4 (caller:
        // k < 8, a readable block); AVX2.
        unsafe {
            let q = xb.add(offset_of!(BlockIQ3S, qs) + 8 * k);
            let qh = *xb.add(offset_of!(BlockIQ3S, qh) + k) as usize;
            let g = |l: usize| IQ3S_GRID[*q.add(l) as usize | (((qh >> l) & 1) << 8)] as i32;
            let mag = _mm256_set_epi32(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0));
            (
                mag,
                sign_bytes(xb.add(offset_of!(BlockIQ3S, signs) + 4 * k)),
            )
        }
    }
}

/// A byte of 0xFF (all of it set) where `neg`, else 0, in every byte of a 64-bit word.
#[inline(always)]
fn all_or_none(neg: bool) -> i64 {
    -(neg as i64)
}

impl IqSimd for BlockIQ1S {
    const GRID1: bool = true;
    const FACTOR: f32 = 0.125;

    #[inline(always)]
    unsafe fn ls_bytes(xb: *const u8) -> __m128i {
        // SAFETY: the eight `qh` words (caller: a readable block).
        unsafe {
            let qh = xb.add(offset_of!(BlockIQ1S, qh));
            let mut n = 0u64;
            for k in 0..8 {
                n |= (((read_u16(qh.add(2 * k)) >> 12) & 7) as u64) << (8 * k);
            }
            let v = _mm_cvtsi64_si128(n as i64);
            odd(_mm_unpacklo_epi8(v, v))
        }
    }

    #[inline(always)]
    unsafe fn chunk(xb: *const u8, k: usize) -> (__m256i, __m256i) {
        // SAFETY: bytes 4k..4k + 4 of `qs` and word k of `qh` (caller: k < 8, a readable
        // block); AVX.
        unsafe {
            let q = xb.add(offset_of!(BlockIQ1S, qs) + 4 * k);
            let qh = read_u16(xb.add(offset_of!(BlockIQ1S, qh) + 2 * k)) as usize;
            let g = |l: usize| IQ1S_GRID[*q.add(l) as usize | (((qh >> (3 * l)) & 7) << 8)] as i64;
            let grid = _mm256_set_epi64x(g(3), g(2), g(1), g(0));
            (grid, _mm256_set1_epi64x(all_or_none(qh & 0x8000 != 0)))
        }
    }
}

/// Scale word `i` (`i < 4`) of an IQ1_M block.
///
/// # Safety
/// One IQ1_M block readable at `xb`.
#[inline(always)]
unsafe fn iq1m_sc(xb: *const u8, i: usize) -> u16 {
    // SAFETY: the four words are inside the block (caller).
    unsafe { read_u16(xb.add(offset_of!(BlockIQ1M, scales) + 2 * i)) }
}

impl IqSimd for BlockIQ1M {
    const GRID1: bool = true;
    const FACTOR: f32 = 0.125;

    #[inline(always)]
    unsafe fn d(xb: *const u8) -> f32 {
        // SAFETY: the top nibbles of the four scale words make the f16 scale; F16C (caller).
        unsafe {
            let mut h = 0u16;
            for i in 0..4 {
                h |= (iq1m_sc(xb, i) >> 12) << (4 * i);
            }
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
        }
    }

    #[inline(always)]
    unsafe fn ls_bytes(xb: *const u8) -> __m128i {
        // SAFETY: the four scale words (caller: a readable block).
        unsafe {
            // Group g (16 values) of sub-block ib = g / 2: bits 6(ib % 2) + 3(g % 2) of
            // word ib / 2, so four 3-bit fields per word, in order.
            let mut n = [0u64; 2];
            for g in 0..16 {
                let v = (iq1m_sc(xb, g / 4) >> (3 * (g % 4))) & 7;
                n[g / 8] |= (v as u64) << (8 * (g % 8));
            }
            odd(_mm_set_epi64x(n[1] as i64, n[0] as i64))
        }
    }

    #[inline(always)]
    unsafe fn chunk(xb: *const u8, k: usize) -> (__m256i, __m256i) {
        // SAFETY: bytes 4k..4k + 4 of `qs` and 2k, 2k + 1 of `qh` (caller: k < 8, a readable
        // block); AVX.
        unsafe {
            let q = xb.add(offset_of!(BlockIQ1M, qs) + 4 * k);
            let qh = read_u16(xb.add(offset_of!(BlockIQ1M, qh) + 2 * k)) as usize;
            let h = |l: usize| (qh >> (4 * l)) & 15;
            let g = |l: usize| IQ1S_GRID[*q.add(l) as usize | ((h(l) & 7) << 8)] as i64;
            let s = |l: usize| all_or_none(h(l) & 8 != 0);
            let grid = _mm256_set_epi64x(g(3), g(2), g(1), g(0));
            (grid, _mm256_set_epi64x(s(3), s(2), s(1), s(0)))
        }
    }
}

/// `M[k]`: with `vpshufb` on the sixteen multiplier bytes, byte `2k` eight times then byte
/// `2k + 1` eight times (the multipliers of chunk `k`'s two 16-value halves).
const SCALE_PICK: [[u8; 16]; 8] = {
    let mut m = [[0u8; 16]; 8];
    let mut k = 0;
    while k < 8 {
        let mut i = 0;
        while i < 16 {
            m[k][i] = (2 * k + i / 8) as u8;
            i += 1;
        }
        k += 1;
    }
    m
};

/// The i16 multipliers of chunk `k` (`k < 8`): the first 16 values' in the low 128 bits,
/// the second 16's in the high (the `vpmaddubsw` pairs of each half), from
/// [`IqSimd::ls_bytes`].
///
/// # Safety
/// The CPU supports AVX2.
#[inline(always)]
pub(super) unsafe fn chunk_scales(ls: __m128i, k: usize) -> __m256i {
    // SAFETY: `SCALE_PICK[k]` holds 16 bytes (k < 8: indexing checks it); AVX2 (caller).
    unsafe {
        let pick = _mm_loadu_si128(SCALE_PICK[k].as_ptr().cast());
        _mm256_cvtepu8_epi16(_mm_shuffle_epi8(ls, pick))
    }
}
