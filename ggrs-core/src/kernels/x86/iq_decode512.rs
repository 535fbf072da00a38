//! Grid i-quant blocks decoded 64 values at a time into AVX-512 registers, for
//! `iquants512.rs`: per pair `p` (values `64p .. 64p + 64`, `p < 4`) the grid magnitudes as
//! bytes and the negative values as a 64-bit mask register.
//!
//! Every type has the generic form: `iq_decode`'s two 32-value chunks joined, their 0xFF
//! byte masks moved to a mask register. Most take their grid rows from those chunks
//! ([`grid_rows`]: indices computed in general registers, rows loaded one by one) and their
//! signs as bits (IQ3_S and IQ2_S store one bit per value; IQ2_XS and the XXS types seven
//! bits per eight values, the eighth making the count even, computed here with a parity fold
//! on eight bytes at once), instead of byte compares; IQ1_M builds its shift-sign mask with
//! one byte shuffle and test. Decoding streams from memory (`ggrs bench`'s tg, one column),
//! measured with thread CPU time on a Zen 5: the `vpgatherdd`/`vpgatherqq` forms of the
//! rows were slower than scalar loads for every type but IQ2_XS (IQ2_XXS 17.0 → 12.9 ns per
//! block, IQ2_S 14.9 → 12.7, IQ3_S 22.0 → 20.4), and vector-built indices (extracted lane by
//! lane) slower than scalar ones. The bits are `IqBlock::codes`' either way: the tests
//! compare the kernels built on them with the portable ones on any bytes.
//!
//! # Safety
//! Every function needs a CPU with AVX2 and AVX-512 F/BW, and one whole block of its type
//! readable at `xb`; `p < 4`.

use std::arch::x86_64::*;
use std::mem::offset_of;

use super::iq_decode::IqSimd;
use super::util::read_u32;
use crate::quants::iq_grids::{IQ2XS_GRID, IQ3XXS_GRID};
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
    /// The odd multipliers `2s + 1` of the sixteen 16-value groups as i16, in group order
    /// ([`IqSimd::ls_bytes`] widened).
    ///
    /// # Safety
    /// See the module docs (and AVX-512 VL/BW).
    #[inline(always)]
    unsafe fn scales16(xb: *const u8) -> __m256i {
        // SAFETY: forwarded (caller: a readable block, the features).
        unsafe { _mm256_cvtepu8_epi16(Self::ls_bytes(xb)) }
    }

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

/// The grid rows of values `64p .. 64p + 64`: `iq_decode`'s two chunks (indices computed
/// in general registers, rows loaded one by one, as ggml's AVX2 kernels do; their sign
/// vectors unused), joined. Faster here than a `vpgatherdd`/`vpgatherqq` of the rows.
///
/// # Safety
/// One block readable at `xb`; `p < 4`; AVX2 and AVX-512 F.
#[inline(always)]
unsafe fn grid_rows<B: IqSimd>(xb: *const u8, p: usize) -> __m512i {
    // SAFETY: forwarded to the AVX2 decoder (caller: a readable block, p < 4).
    unsafe {
        let (g0, _) = B::chunk(xb, 2 * p);
        let (g1, _) = B::chunk(xb, 2 * p + 1);
        join(g0, g1)
    }
}

impl IqSimd512 for BlockIQ1S {
    #[inline(always)]
    unsafe fn pair(xb: *const u8, p: usize) -> (__m512i, __mmask64) {
        // SAFETY: bytes 8p..8p + 8 of `qs` and words 2p, 2p + 1 of `qh` (caller: p < 4, a
        // readable block); AVX2, AVX-512 F (caller).
        unsafe {
            let qh = read_u32(xb.add(offset_of!(BlockIQ1S, qh) + 4 * p));
            let rows = grid_rows::<Self>(xb, p);
            // The shift sign of each 32 values: bit 15 of its word.
            let lo = ((qh >> 15) & 1) as u64;
            let hi = (qh >> 31) as u64;
            let neg = lo.wrapping_neg() as u32 as u64 | hi.wrapping_neg() << 32;
            (rows, neg)
        }
    }
}

impl IqSimd512 for BlockIQ1M {
    #[inline(always)]
    unsafe fn scales16(xb: *const u8) -> __m256i {
        // SAFETY: the 8 scale bytes (caller: a readable block); AVX2, AVX-512 BW/VL.
        unsafe {
            // Group g's 3-bit field sits at bit 16(g / 4) + 3(g % 4) of the four scale
            // words: shifted by 3j in 64-bit lane j, field (w, j) is at the bottom of 16-bit
            // lane 4j + w; then put in group order (lane g from lane 4(g % 4) + g / 4).
            let sc = xb
                .add(offset_of!(BlockIQ1M, scales))
                .cast::<u64>()
                .read_unaligned();
            let v = _mm256_srlv_epi64(
                _mm256_set1_epi64x(sc as i64),
                _mm256_setr_epi64x(0, 3, 6, 9),
            );
            let v = _mm256_and_si256(v, _mm256_set1_epi16(7));
            let v = _mm256_or_si256(_mm256_add_epi16(v, v), _mm256_set1_epi16(1));
            let order = _mm256_setr_epi16(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
            _mm256_permutexvar_epi16(order, v)
        }
    }

    #[inline(always)]
    unsafe fn pair(xb: *const u8, p: usize) -> (__m512i, __mmask64) {
        // SAFETY: bytes 8p..8p + 8 of `qs` and 4p..4p + 4 of `qh` (caller: p < 4, a readable
        // block); AVX2, AVX-512 F/BW (caller).
        unsafe {
            let qh = read_u32(xb.add(offset_of!(BlockIQ1M, qh) + 4 * p));
            let rows = grid_rows::<Self>(xb, p);
            // Byte j of the pair reads the sign bit of row j / 8: bit 3 or 7 of byte j / 16.
            let pick = _mm512_set_epi64(
                0x0303_0303_0303_0303,
                0x0303_0303_0303_0303,
                0x0202_0202_0202_0202,
                0x0202_0202_0202_0202,
                0x0101_0101_0101_0101,
                0x0101_0101_0101_0101,
                0,
                0,
            );
            let bytes = _mm512_shuffle_epi8(_mm512_set1_epi32(qh as i32), pick);
            let bit = _mm512_set_epi64(
                0x8080_8080_8080_8080u64 as i64,
                0x0808_0808_0808_0808,
                0x8080_8080_8080_8080u64 as i64,
                0x0808_0808_0808_0808,
                0x8080_8080_8080_8080u64 as i64,
                0x0808_0808_0808_0808,
                0x8080_8080_8080_8080u64 as i64,
                0x0808_0808_0808_0808,
            );
            (rows, _mm512_test_epi8_mask(bytes, bit))
        }
    }
}

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
        // SAFETY: bytes 16p..16p + 16 of `qs` (caller: p < 4, a readable block); AVX2,
        // AVX-512 F/BW (caller).
        unsafe {
            let q = xb.add(offset_of!(BlockIQ2XXS, qs) + 16 * p);
            let mag = grid_rows::<Self>(xb, p);
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
        // SAFETY: the grid rows as `iq_decode` reads them, sign bytes 32 + 8p..32 + 8p + 8
        // of `qs` (caller: p < 4, a readable block); AVX2, AVX-512 F/BW (caller).
        unsafe {
            let q = xb.add(offset_of!(BlockIQ2S, qs));
            let mag = grid_rows::<Self>(xb, p);
            let signs = q.add(32 + 8 * p).cast::<u64>().read_unaligned();
            (mag, signs)
        }
    }
}

impl IqSimd512 for BlockIQ3S {
    #[inline(always)]
    unsafe fn pair(xb: *const u8, p: usize) -> (__m512i, __mmask64) {
        // SAFETY: the grid rows as `iq_decode` reads them, sign bytes 8p..8p + 8 (caller:
        // p < 4, a readable block); AVX2, AVX-512 F/BW (caller).
        unsafe {
            let mag = grid_rows::<Self>(xb, p);
            let signs = xb.add(offset_of!(BlockIQ3S, signs) + 8 * p);
            (mag, signs.cast::<u64>().read_unaligned())
        }
    }
}

impl IqSimd512 for BlockIQ3XXS {
    #[inline(always)]
    unsafe fn pair(xb: *const u8, p: usize) -> (__m512i, __mmask64) {
        // SAFETY: grid bytes 16p..16p + 16 and words 2p, 2p + 1 after the 64 grid bytes
        // (caller: p < 4, a readable block); byte indices of the 256-row grid (indexing
        // checks them too); AVX-512 F/BW (caller).
        unsafe {
            let q = xb.add(offset_of!(BlockIQ3XXS, qs));
            let g = |l: usize| IQ3XXS_GRID[*q.add(16 * p + l) as usize] as i32;
            let mag = _mm512_setr_epi32(
                g(0),
                g(1),
                g(2),
                g(3),
                g(4),
                g(5),
                g(6),
                g(7),
                g(8),
                g(9),
                g(10),
                g(11),
                g(12),
                g(13),
                g(14),
                g(15),
            );
            let aux = q.add(64 + 8 * p);
            (mag, xxs_sign_bits(read_u32(aux), read_u32(aux.add(4))))
        }
    }
}
