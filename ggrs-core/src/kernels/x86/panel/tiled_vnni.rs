//! AVX-512 VNNI panel kernels (`panel`: sixteen weight rows, one per 32-bit lane) for Q3_K
//! and Q6_K weights against eight Q8_K columns or more, in the order of ggml's tiled k-quant
//! matmul (`k_quants::tiled::dot_tiled`, the oracle): per super-block and row the exact
//! `s1 = Σ_j sc_j · Σ_{i in j} code_i · y_i` over the sixteen 16-value sub-blocks, then
//! `r = d · s1` and `acc = fma(r, d_y, acc)`. They read the panels their types' lane kinds
//! pack (`panel::q3k`'s layout for Q3_K, `panel`'s Q6_K layout), so one packed copy serves
//! both orders.
//!
//! A sub-block's sum starts from the seed `−o · bsum_j` (`o` the code offset: 4 for Q3_K,
//! 32 for Q6_K; `bsum_j` the Q8_K block sum of its 16 codes, which must be the sum of the
//! codes, as every Q8_K quantizer writes it) and adds the unsigned codes `u = code + o` times
//! the activations with four `vpdpbusd`: `Σ (u − o)·y`, at most 16·32·128 in magnitude. Then
//! `vpmulld` by the scale (at most 128 in magnitude) and a 32-bit sum over the sixteen
//! sub-blocks: all exact.
//!
//! CPUs without AVX-512 VNNI keep `tiled_avx2`'s kernels for these products.
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C); the
//! pointer contracts are those of [`super::gemm`] (Q8_K rows, no side data).

use std::arch::x86_64::*;

use super::super::util::{read_f32, read_u16, read_u32};
use super::{q6_k_qh, q6_k_ql, Kind};

/// Bytes of a Q8_K block: f32 `d`, 256 codes, 16 i16 block sums.
const Q8K_BYTES: usize = 292;
/// Offset of the block sums in a Q8_K block.
const Q8K_BSUMS: usize = 260;

/// A weight type's packed super-block as the tiled kernel reads it.
pub(super) trait TiledPanel {
    /// The lane kind whose layout the panels have.
    const KIND: Kind;
    /// The code offset `o` (`u = code + o`).
    const OFFSET: i32;
    /// The sixteen rows' `d`, widened.
    ///
    /// # Safety
    /// A packed super-block at `p`; AVX-512 F.
    unsafe fn d(p: *const u8) -> __m512;
    /// Sub-block `j`'s scale of each row, as i32.
    ///
    /// # Safety
    /// As [`TiledPanel::d`].
    unsafe fn scale(p: *const u8, j: usize) -> __m512i;
    /// The unsigned codes of quad `q` (values `32g + 4q..32g + 4q + 4`) of 32-value group
    /// `g` of each row.
    ///
    /// # Safety
    /// As [`TiledPanel::d`], with AVX-512 BW.
    unsafe fn quad(p: *const u8, g: usize, q: usize) -> __m512i;
}

/// Q3_K (`panel::q3k`'s layout).
pub(super) struct Q3K;
/// Q6_K (`panel`'s layout of [`Kind::Q6KLanes`]).
pub(super) struct Q6K;

impl TiledPanel for Q3K {
    const KIND: Kind = Kind::Q3KLanes;
    const OFFSET: i32 = 4;

    #[inline(always)]
    unsafe fn d(p: *const u8) -> __m512 {
        // SAFETY: the sixteen f16 `d` open the packed super-block (caller).
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }

    #[inline(always)]
    unsafe fn scale(p: *const u8, j: usize) -> __m512i {
        let at = Self::KIND.block_at(0).s + 16 * j;
        // SAFETY: sixteen i8 scales, row r at byte r (caller).
        unsafe { _mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(at).cast())) }
    }

    #[inline(always)]
    unsafe fn quad(p: *const u8, g: usize, q: usize) -> __m512i {
        // Group g = 4h + s: low bits at 2s of `qs_8h+q`, high bit at 4h + s of `hm_q`.
        use super::q3k::{hm_at, qs_at};
        let (h, s) = (g / 4, g % 4);
        // SAFETY: vectors of the packed super-block (caller); register operations.
        unsafe {
            let qs = _mm512_loadu_si512(p.add(qs_at(8 * h + q)).cast());
            let hm = _mm512_loadu_si512(p.add(hm_at(q)).cast());
            let k = (4 * h + s) as i32;
            let shift = _mm_cvtsi32_si128((k - 2).abs());
            let hm = if k >= 2 {
                _mm512_srl_epi16(hm, shift)
            } else {
                _mm512_sll_epi16(hm, shift)
            };
            // (qs >> 2s) & 3 | (hm & 4)
            _mm512_ternarylogic_epi32::<0xEC>(
                _mm512_srl_epi16(qs, _mm_cvtsi32_si128(2 * s as i32)),
                _mm512_and_si512(hm, _mm512_set1_epi8(4)),
                _mm512_set1_epi8(3),
            )
        }
    }
}

impl TiledPanel for Q6K {
    const KIND: Kind = Kind::Q6KLanes;
    const OFFSET: i32 = 32;

    #[inline(always)]
    unsafe fn d(p: *const u8) -> __m512 {
        let at = Self::KIND.block_at(0).d;
        // SAFETY: the sixteen f16 `d` of the packed super-block (caller).
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.add(at).cast())) }
    }

    #[inline(always)]
    unsafe fn scale(p: *const u8, j: usize) -> __m512i {
        let at = Self::KIND.block_at(0).s + 16 * j;
        // SAFETY: sixteen i8 scales, row r at byte r (caller).
        unsafe { _mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(at).cast())) }
    }

    #[inline(always)]
    unsafe fn quad(p: *const u8, g: usize, q: usize) -> __m512i {
        // Group g = 4n + m: value 128n + 32m + 4q + e has its low nibble in `ql` byte
        // 64n + 32·(m % 2) + 4q + e (the high nibble for m ≥ 2) and its top two bits at 2m of
        // `qh` byte 32n + 4q + e.
        let at = Self::KIND.block_at(0);
        let (n, m) = (g / 4, g % 4);
        // SAFETY: vectors of the packed super-block (caller); register operations.
        unsafe {
            let ql = _mm512_loadu_si512(p.add(at.v + q6_k_ql(16 * n + 8 * (m % 2) + q)).cast());
            let qh = _mm512_loadu_si512(p.add(at.v + q6_k_qh(8 * n + q)).cast());
            let lo = if m < 2 {
                ql
            } else {
                _mm512_srli_epi16::<4>(ql)
            };
            let hi = match m {
                0 => _mm512_slli_epi16::<4>(qh),
                1 => _mm512_slli_epi16::<2>(qh),
                2 => qh,
                _ => _mm512_srli_epi16::<2>(qh),
            };
            // (lo & 0x0F) | (hi & 0x30)
            _mm512_ternarylogic_epi32::<0xEC>(
                lo,
                _mm512_and_si512(hi, _mm512_set1_epi8(0x30)),
                _mm512_set1_epi8(0x0F),
            )
        }
    }
}

/// `C` columns against a panel of `nb` packed super-blocks of `T` in the tiled order: lane
/// `r` of result `c` is row `r` · column `c`.
///
/// # Safety
/// See the module docs.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn tiled<T: TiledPanel, const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
) -> [__m512; C] {
    let bytes = T::KIND.panel_bytes(1);
    // SAFETY: packed super-block i < nb of the panel and Q8_K block i of each column are
    // readable (caller); unaligned loads.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); C];
        for i in 0..nb {
            let p = panel.add(i * bytes);
            let yb: [*const u8; C] = std::array::from_fn(|c| y[c].add(i * Q8K_BYTES));
            let mut s1 = [_mm512_setzero_si512(); C];
            for g in 0..8 {
                for half in 0..2 {
                    let j = 2 * g + half;
                    let u: [__m512i; 4] = std::array::from_fn(|e| T::quad(p, g, 4 * half + e));
                    let sc = T::scale(p, j);
                    for c in 0..C {
                        let bsum = read_u16(yb[c].add(Q8K_BSUMS + 2 * j)) as i16 as i32;
                        let mut a = _mm512_set1_epi32(-T::OFFSET * bsum);
                        let yq = yb[c].add(4 + 32 * g + 16 * half);
                        for (e, ue) in u.iter().enumerate() {
                            let yv = _mm512_set1_epi32(read_u32(yq.add(4 * e)) as i32);
                            a = _mm512_dpbusd_epi32(a, *ue, yv);
                        }
                        s1[c] = _mm512_add_epi32(s1[c], _mm512_mullo_epi32(a, sc));
                    }
                }
            }
            let d = T::d(p);
            for c in 0..C {
                let r = _mm512_mul_ps(d, _mm512_cvtepi32_ps(s1[c]));
                acc[c] = _mm512_fmadd_ps(r, _mm512_set1_ps(read_f32(yb[c])), acc[c]);
            }
        }
        acc
    }
}
