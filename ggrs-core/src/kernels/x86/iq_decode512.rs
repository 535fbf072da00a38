//! Grid i-quant blocks decoded 64 values at a time into AVX-512 registers, for
//! `iquants512.rs`: per pair `p` (values `64p .. 64p + 64`, `p < 4`) the grid magnitudes as
//! bytes and the negative values as a 64-bit mask register.
//!
//! Every type has the generic form: `iq_decode`'s two 32-value chunks joined, their 0xFF
//! byte masks moved to a mask register (the IQ1 types use it: gathering their rows measured
//! slower). The others gather their grid rows with one `vpgatherdd` (IQ3: sixteen 4-byte
//! rows) or `vpgatherqq` (IQ2: eight 8-byte rows) and take their signs as bits (IQ3_S and IQ2_S store one bit per value; IQ2_XS
//! and the XXS types seven bits per eight values, the eighth making the count even, computed
//! here with a parity fold on eight bytes at once), instead of building the vectors by
//! inserts and byte compares. The
//! bits are `IqBlock::codes`' either way: `iquants512`'s tests compare the kernels built on
//! them with the portable ones on any bytes.
//!
//! # Safety
//! Every function needs a CPU with AVX2 and AVX-512 F/BW, and one whole block of its type
//! readable at `xb`; `p < 4`.

use std::arch::x86_64::*;
use std::mem::offset_of;

use super::iq_decode::IqSimd;
use super::util::read_u32;
use crate::quants::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID};
use crate::quants::iq_grids::{IQ3S_GRID, IQ3XXS_GRID};
use crate::quants::{
    BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS,
};

/// `lo` in the low 256 bits, `hi` in the high.
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline(always)]
pub(super) unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    // SAFETY: register-only AVX-512 F operations (caller).
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi) }
}

/// A grid i-quant block as the AVX-512 kernels read it.
pub(super) trait IqSimd512: IqSimd {
    /// Values `64p .. 64p + 64`: the grid bytes (magnitudes; IQ1: values −1, 0, 1) and the
    /// mask of negative values (IQ1: of negative shifts).
    ///
    /// # Safety
    /// See the module docs.
    #[inline(always)]
    unsafe fn pair(xb: *const u8, p: usize) -> (__m512i, __mmask64) {
        // SAFETY: forwarded to the AVX2 decoders (caller: a readable block, p < 4).
        unsafe {
            let (m0, n0) = Self::chunk(xb, 2 * p);
            let (m1, n1) = Self::chunk(xb, 2 * p + 1);
            (join(m0, m1), _mm512_movepi8_mask(join(n0, n1)))
        }
    }
}

impl IqSimd512 for BlockIQ1S {}
impl IqSimd512 for BlockIQ1M {}

/// The sign masks of 64 values from two XXS sign-and-scale words (`lo` for the first 32):
/// four 7-bit fields per word, each made a byte whose eighth bit makes its count of set
/// bits even (ggml's `ksigns_iq2xs`); bit `j` of the result is value `j`'s sign.
#[inline(always)]
fn xxs_sign_bits(lo: u32, hi: u32) -> u64 {
    let t = (lo as u64 | (hi as u64) << 32) & 0x0FFF_FFFF_0FFF_FFFF;
    let s = (t & 0x0000_007F_0000_007F)
        | ((t << 1) & 0x0000_7F00_0000_7F00)
        | ((t << 2) & 0x007F_0000_007F_0000)
        | ((t << 3) & 0x7F00_0000_7F00_0000);
    // Bit 0 of each byte: the parity of that byte (its bits 4..7 fold into 0..3, then 2..3
    // into 0..1, then 1 into 0; what crosses from the next byte lands above the bits read).
    let mut x = s ^ (s >> 4);
    x ^= x >> 2;
    x ^= x >> 1;
    s | ((x & 0x0101_0101_0101_0101) << 7)
}

/// Eight bytes of seven sign bits each (bit 7 clear) completed with their parity bit, as
/// [`xxs_sign_bits`] does.
#[inline(always)]
fn with_parity(s: u64) -> u64 {
    let mut x = s ^ (s >> 4);
    x ^= x >> 2;
    x ^= x >> 1;
    s | ((x & 0x0101_0101_0101_0101) << 7)
}

/// The eight 8-byte grid rows `table[idx[l]]` (`idx` as 64-bit lanes), gathered.
///
/// # Safety
/// Every index is below the table's length; AVX-512 F.
#[inline(always)]
unsafe fn gather64(idx: __m512i, table: &[u64]) -> __m512i {
    // SAFETY: the caller guarantees the indices and the CPU feature.
    unsafe { _mm512_i64gather_epi64::<8>(idx, table.as_ptr().cast()) }
}

impl IqSimd512 for BlockIQ2XXS {
    #[inline(always)]
    unsafe fn pair(xb: *const u8, p: usize) -> (__m512i, __mmask64) {
        // SAFETY: bytes 16p..16p + 16 of `qs` (caller: p < 4, a readable block); grid
        // indices are bytes (256 rows); AVX-512 F/BW (caller).
        unsafe {
            let q = xb.add(offset_of!(BlockIQ2XXS, qs) + 16 * p);
            let v = _mm_loadu_si128(q.cast());
            // The four grid bytes of each chunk (bytes 0..4 and 8..12).
            let pick = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1);
            let idx = _mm512_cvtepu8_epi64(_mm_shuffle_epi8(v, pick));
            let mag = gather64(idx, &IQ2XXS_GRID);
            (mag, xxs_sign_bits(read_u32(q.add(4)), read_u32(q.add(12))))
        }
    }
}

impl IqSimd512 for BlockIQ2XS {
    #[inline(always)]
    unsafe fn pair(xb: *const u8, p: usize) -> (__m512i, __mmask64) {
        // SAFETY: words 8p..8p + 8 of `qs` (caller: p < 4, a readable block); indices
        // masked to 9 bits (512 rows); AVX-512 F/BW (caller).
        unsafe {
            let q = xb.add(offset_of!(BlockIQ2XS, qs) + 16 * p);
            let v = _mm_loadu_si128(q.cast());
            let idx = _mm512_and_si512(_mm512_cvtepu16_epi64(v), _mm512_set1_epi64(511));
            let mag = gather64(idx, &IQ2XS_GRID);
            let s7 = _mm_srli_epi16::<9>(v);
            let s7 = _mm_cvtsi128_si64(_mm_packus_epi16(s7, s7)) as u64;
            (mag, with_parity(s7))
        }
    }
}

impl IqSimd512 for BlockIQ2S {
    #[inline(always)]
    unsafe fn pair(xb: *const u8, p: usize) -> (__m512i, __mmask64) {
        // SAFETY: grid bytes 8p..8p + 8, high-bit bytes 2p, 2p + 1, sign bytes 32 + 8p..
        // (caller: p < 4, a readable block); indices of 10 bits (1024 rows); AVX-512 F/BW.
        unsafe {
            let q = xb.add(offset_of!(BlockIQ2S, qs));
            let low = _mm512_cvtepu8_epi64(_mm_loadl_epi64(q.add(8 * p).cast()));
            let qh = xb.add(offset_of!(BlockIQ2S, qh) + 2 * p);
            let h = _mm512_setr_epi64(
                *qh as i64,
                *qh as i64,
                *qh as i64,
                *qh as i64,
                *qh.add(1) as i64,
                *qh.add(1) as i64,
                *qh.add(1) as i64,
                *qh.add(1) as i64,
            );
            let h = _mm512_srlv_epi64(h, _mm512_setr_epi64(0, 2, 4, 6, 0, 2, 4, 6));
            let h = _mm512_slli_epi64::<8>(_mm512_and_si512(h, _mm512_set1_epi64(3)));
            let mag = gather64(_mm512_or_si512(low, h), &IQ2S_GRID);
            let signs = q.add(32 + 8 * p).cast::<u64>().read_unaligned();
            (mag, signs)
        }
    }
}

impl IqSimd512 for BlockIQ3S {
    #[inline(always)]
    unsafe fn pair(xb: *const u8, p: usize) -> (__m512i, __mmask64) {
        // SAFETY: grid bytes 16p..16p + 16, high-bit bytes 2p, 2p + 1, sign bytes 8p..8p + 8
        // (caller: p < 4, a readable block); the gather reads rows of the 512-row grid
        // (indices below 512); AVX-512 F/BW (caller).
        unsafe {
            let q = xb.add(offset_of!(BlockIQ3S, qs) + 16 * p);
            let qh = xb
                .add(offset_of!(BlockIQ3S, qh) + 2 * p)
                .cast::<u16>()
                .read_unaligned();
            let idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.cast()));
            // Bit l of the two high-bit bytes is bit 8 of index l.
            let idx = _mm512_mask_or_epi32(idx, qh, idx, _mm512_set1_epi32(256));
            let mag = _mm512_i32gather_epi32::<4>(idx, IQ3S_GRID.as_ptr().cast());
            let signs = xb.add(offset_of!(BlockIQ3S, signs) + 8 * p);
            (mag, signs.cast::<u64>().read_unaligned())
        }
    }
}

impl IqSimd512 for BlockIQ3XXS {
    #[inline(always)]
    unsafe fn pair(xb: *const u8, p: usize) -> (__m512i, __mmask64) {
        // SAFETY: grid bytes 16p..16p + 16 and words 2p, 2p + 1 after the 64 grid bytes
        // (caller: p < 4, a readable block); the gather reads rows of the 256-row grid;
        // AVX-512 F/BW (caller).
        unsafe {
            let q = xb.add(offset_of!(BlockIQ3XXS, qs));
            let idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.add(16 * p).cast()));
            let mag = _mm512_i32gather_epi32::<4>(idx, IQ3XXS_GRID.as_ptr().cast());
            let aux = q.add(64 + 8 * p);
            (mag, xxs_sign_bits(read_u32(aux), read_u32(aux.add(4))))
        }
    }
}
