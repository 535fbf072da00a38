//! The AVX2 builds of `panel::repacked`'s Q4_K and Q2_K panel kernels (the repacked
//! `q4_K_8x8` / `q2_K_8x8` orders), for CPUs without AVX-512 VNNI: each panel is two halves
//! of eight rows, the low and high 32 bytes of every packed 64-byte vector, 16 bytes of every
//! 32-byte group of scales.
//!
//! The integer sums are the VNNI kernels' exact integers, through `vpmaddubsw` (unsigned
//! codes × signed Q8_K codes, pairs into 16 bits) and `vpmaddwd`: a Q4_K sub-block's eight
//! quads sum in 16 bits to at most 8·2·15·128 = 30 720 in magnitude, then `vpmaddwd` by the
//! scale pair `(sc, sc)` adds both halves times the scale exactly in 32 bits; a Q2_K
//! sub-block's four quads sum to at most 3072, widened by `vpmaddwd` by ones, and the two
//! sub-blocks of a scale pair go through one `vpmaddwd` against `(sc0, sc1)`. The f32 work is
//! the VNNI kernels' (the oracle's order), so both builds give the same bits. Q4_K also has
//! an AVX-VNNI build ([`q4_k_vnni`]), whose `vpdpwssd` fuses the scale's `vpmaddwd` with the
//! add (`panel::gemm` runs it for passes of several columns: with one it measured no faster).
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX2, FMA and F16C; the pointer contracts are
//! those of [`super::gemm`].

use std::arch::x86_64::*;

use super::super::util::{read_f32, read_u32};
use super::avx2::{Plain, QuadSum, Vex};
use super::repacked::{
    Q2K_PANEL_BYTES, Q2K_QS, Q2K_SC, Q4K_AUX_BYTES, Q4K_MIN, Q4K_PANEL_BYTES, Q4K_QS, Q4K_SC,
    Q8K_BSUMS, Q8K_BYTES, Q8K_QS,
};
use super::ROWS;

/// The four bytes at `p` in every 32-bit lane.
///
/// # Safety
/// Four bytes readable at `p`; AVX.
#[inline(always)]
pub(super) unsafe fn bcast(p: *const u8) -> __m256i {
    // SAFETY: forwarded from the caller.
    unsafe { _mm256_set1_epi32(read_u32(p) as i32) }
}

/// Stores `acc − accm` of each column's two halves into `out`.
///
/// # Safety
/// AVX.
#[inline(always)]
unsafe fn store<const C: usize>(
    out: &mut [[f32; ROWS]; C],
    half: usize,
    acc: &[__m256; C],
    accm: &[__m256; C],
) {
    for c in 0..C {
        // SAFETY: `out[c]` holds 16 f32, this half's 8 at 8·half; unaligned store.
        unsafe {
            _mm256_storeu_ps(
                out[c].as_mut_ptr().add(8 * half),
                _mm256_sub_ps(acc[c], accm[c]),
            )
        };
    }
}

/// `C` columns against a Q4_K panel in the repacked GEMM (`GEMM`) or GEMV order;
/// `out[c][r]` row `r` · column `c`.
///
/// # Safety
/// As [`super::gemm`] (Q8_K rows with `panel_repacked::activation_aux_q4_k`'s side
/// data), on a CPU with AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k<const C: usize, const GEMM: bool>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: forwarded from the caller.
    unsafe { q4_k_in::<Plain, C, GEMM>(nb, panel, y, aux, out) }
}

/// [`q4_k`], AVX-VNNI build: `vpdpwssd` multiplies the 16-bit sums by the scale pair and adds
/// them in one instruction (the same exact integers).
///
/// # Safety
/// As [`q4_k`], on a CPU with AVX-VNNI too.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn q4_k_vnni<const C: usize, const GEMM: bool>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: forwarded from the caller.
    unsafe { q4_k_in::<Vex, C, GEMM>(nb, panel, y, aux, out) }
}

/// The body of [`q4_k`] and [`q4_k_vnni`].
///
/// # Safety
/// As the builds.
#[inline(always)]
unsafe fn q4_k_in<D: QuadSum, const C: usize, const GEMM: bool>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: packed super-block i < nb of the panel, Q8_K block i of each column and its
    // side data are readable (caller); unaligned loads.
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        for half in 0..2 {
            let mut acc = [_mm256_setzero_ps(); C];
            let mut accm = [_mm256_setzero_ps(); C];
            for i in 0..nb {
                let p = panel.add(i * Q4K_PANEL_BYTES);
                super::avx2::stream_halves::<C>(
                    panel,
                    half,
                    i * Q4K_PANEL_BYTES,
                    Q4K_PANEL_BYTES,
                    nb * Q4K_PANEL_BYTES,
                );
                let dx = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16 * half).cast()));
                let mx = _mm256_cvtph_ps(_mm_loadu_si128(p.add(32 + 16 * half).cast()));
                let yb: [*const u8; C] = std::array::from_fn(|c| y[c].add(i * Q8K_BYTES));
                let ax: [*const u8; C] = std::array::from_fn(|c| aux[c].add(i * Q4K_AUX_BYTES));
                let mut st = [_mm256_setzero_si256(); C];
                let mut mt = [_mm256_setzero_si256(); C];
                for ch in 0..4 {
                    let mut s = [_mm256_setzero_si256(); C];
                    for h in 0..2 {
                        let j = 2 * ch + h;
                        let s32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                            p.add(Q4K_SC + 16 * j + 8 * half).cast(),
                        ));
                        // (sc, sc) in the two 16-bit halves of each lane.
                        let scp = _mm256_or_si256(s32, _mm256_slli_epi32::<16>(s32));
                        let w: [__m256i; 8] = std::array::from_fn(|g| {
                            let v = _mm256_loadu_si256(
                                p.add(Q4K_QS + 64 * (8 * ch + g) + 32 * half).cast(),
                            );
                            if h == 0 {
                                _mm256_and_si256(v, low)
                            } else {
                                _mm256_and_si256(_mm256_srli_epi16::<4>(v), low)
                            }
                        });
                        for c in 0..C {
                            let yq = yb[c].add(Q8K_QS + 64 * ch + 32 * h);
                            let m = |g: usize| _mm256_maddubs_epi16(w[g], bcast(yq.add(4 * g)));
                            let a16 = _mm256_add_epi16(
                                _mm256_add_epi16(
                                    _mm256_add_epi16(m(0), m(1)),
                                    _mm256_add_epi16(m(2), m(3)),
                                ),
                                _mm256_add_epi16(
                                    _mm256_add_epi16(m(4), m(5)),
                                    _mm256_add_epi16(m(6), m(7)),
                                ),
                            );
                            s[c] = D::wssd(s[c], a16, scp);
                        }
                    }
                    let mp = _mm256_cvtepu8_epi16(_mm_loadu_si128(
                        p.add(Q4K_MIN + 32 * ch + 16 * half).cast(),
                    ));
                    for c in 0..C {
                        let m = _mm256_madd_epi16(mp, bcast(ax[c].add(4 * ch)));
                        if GEMM {
                            let dy = _mm256_set1_ps(read_f32(yb[c]));
                            let (dd, dm) = (_mm256_mul_ps(dx, dy), _mm256_mul_ps(mx, dy));
                            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), dd, acc[c]);
                            accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), dm, accm[c]);
                        } else {
                            st[c] = _mm256_add_epi32(st[c], s[c]);
                            mt[c] = _mm256_add_epi32(mt[c], m);
                        }
                    }
                }
                if !GEMM {
                    for c in 0..C {
                        let dy = _mm256_set1_ps(read_f32(yb[c]));
                        let (dd, dm) = (_mm256_mul_ps(dx, dy), _mm256_mul_ps(mx, dy));
                        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(st[c]), dd, acc[c]);
                        accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mt[c]), dm, accm[c]);
                    }
                }
            }
            store(out, half, &acc, &accm);
        }
    }
}

/// `C` columns against a Q2_K panel in the repacked GEMM (`GEMM`) or GEMV order;
/// `out[c][r]` row `r` · column `c`.
///
/// # Safety
/// As [`super::gemm`] (Q8_K rows, no side data), on a CPU with AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q2_k<const C: usize, const GEMM: bool>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: packed super-block i < nb of the panel and Q8_K block i of each column are
    // readable (caller); unaligned loads.
    unsafe {
        let three = _mm256_set1_epi8(3);
        let nib = _mm256_set1_epi16(0x0F);
        let ones = _mm256_set1_epi16(1);
        for half in 0..2 {
            let mut acc = [_mm256_setzero_ps(); C];
            let mut accm = [_mm256_setzero_ps(); C];
            for i in 0..nb {
                let p = panel.add(i * Q2K_PANEL_BYTES);
                super::avx2::stream_halves::<C>(
                    panel,
                    half,
                    i * Q2K_PANEL_BYTES,
                    Q2K_PANEL_BYTES,
                    nb * Q2K_PANEL_BYTES,
                );
                let dx = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16 * half).cast()));
                let mx = _mm256_cvtph_ps(_mm_loadu_si128(p.add(32 + 16 * half).cast()));
                let yb: [*const u8; C] = std::array::from_fn(|c| y[c].add(i * Q8K_BYTES));
                let mut st = [_mm256_setzero_si256(); C];
                let mut mt = [_mm256_setzero_si256(); C];
                for h in 0..2 {
                    let mut s = [_mm256_setzero_si256(); C];
                    let mut m = [_mm256_setzero_si256(); C];
                    let raw: [__m256i; 8] = std::array::from_fn(|q| {
                        _mm256_loadu_si256(p.add(Q2K_QS + 64 * (8 * h + q) + 32 * half).cast())
                    });
                    for sft in 0..4 {
                        let u = 4 * h + sft;
                        let pair = _mm256_cvtepu8_epi16(_mm_loadu_si128(
                            p.add(Q2K_SC + 32 * u + 16 * half).cast(),
                        ));
                        let scw = _mm256_and_si256(pair, nib);
                        let mw = _mm256_srli_epi16::<4>(pair);
                        let shift = _mm_cvtsi32_si128(2 * sft as i32);
                        let w: [__m256i; 8] = std::array::from_fn(|q| {
                            _mm256_and_si256(_mm256_srl_epi16(raw[q], shift), three)
                        });
                        for c in 0..C {
                            let yq = yb[c].add(Q8K_QS + 128 * h + 32 * sft);
                            let mb = |q: usize| _mm256_maddubs_epi16(w[q], bcast(yq.add(4 * q)));
                            let a0 = _mm256_madd_epi16(
                                _mm256_add_epi16(
                                    _mm256_add_epi16(mb(0), mb(1)),
                                    _mm256_add_epi16(mb(2), mb(3)),
                                ),
                                ones,
                            );
                            let a1 = _mm256_madd_epi16(
                                _mm256_add_epi16(
                                    _mm256_add_epi16(mb(4), mb(5)),
                                    _mm256_add_epi16(mb(6), mb(7)),
                                ),
                                ones,
                            );
                            // (a0, a1) as the 16-bit halves of each lane, against (sc0, sc1).
                            let packed =
                                _mm256_blend_epi16::<0xAA>(a0, _mm256_slli_epi32::<16>(a1));
                            s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(packed, scw));
                            let bs = bcast(yb[c].add(Q8K_BSUMS + 4 * u));
                            m[c] = _mm256_add_epi32(m[c], _mm256_madd_epi16(mw, bs));
                        }
                    }
                    for c in 0..C {
                        if GEMM {
                            let dy = _mm256_set1_ps(read_f32(yb[c]));
                            let (dd, dm) = (_mm256_mul_ps(dx, dy), _mm256_mul_ps(mx, dy));
                            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), dd, acc[c]);
                            accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m[c]), dm, accm[c]);
                        } else {
                            st[c] = _mm256_add_epi32(st[c], s[c]);
                            mt[c] = _mm256_add_epi32(mt[c], m[c]);
                        }
                    }
                }
                if !GEMM {
                    for c in 0..C {
                        let dy = _mm256_set1_ps(read_f32(yb[c]));
                        let (dd, dm) = (_mm256_mul_ps(dx, dy), _mm256_mul_ps(mx, dy));
                        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(st[c]), dd, acc[c]);
                        accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mt[c]), dm, accm[c]);
                    }
                }
            }
            store(out, half, &acc, &accm);
        }
    }
}
