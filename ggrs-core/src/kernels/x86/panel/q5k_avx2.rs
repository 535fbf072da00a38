//! The AVX2 build of `panel::q5k`'s Q5_K lanes panel kernel, for CPUs without AVX-512 VNNI:
//! each panel is two halves of eight rows, the low and high 32 bytes of every packed 64-byte
//! vector and 16 bytes of each group of sixteen f16 scales. The integers are the VNNI build's
//! (`vpmaddubsw` pair sums, then `vpmaddwd` against the scale in both halves and a 32-bit
//! add instead of `vpdpwssd`), the f32 work the same, so both builds give the same bits.
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX2, FMA and F16C; the pointer contracts are
//! those of [`super::gemm`] (Q8_K rows and their side data).

use std::arch::x86_64::*;

use super::super::util::read_f32;
use super::avx2::{fifth, lanes_total};
use super::q5k::{h_at, v_at, MIN_PAIR, Q5K_DMIN, Q5K_PANEL_BYTES, Q5K_SC, SCALE_DUP};
use super::repacked::{Q4K_AUX_BYTES, Q8K_BYTES};
use super::repacked_avx2::bcast;
use super::ROWS;

/// Offset of the codes in a Q8_K block.
const Q8K_QS: usize = 4;

/// `C` columns against a Q5_K panel of `nb` super-blocks in the lane order; `out[c][r]` row
/// `r` · column `c`.
///
/// # Safety
/// See the module docs.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_k_lanes<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: packed super-block i < nb of the panel, Q8_K block i of each column and its
    // side data are readable (caller); unaligned loads; the control arrays hold 64 bytes
    // (their 128-bit quarters are alike: the first 32 bytes serve); the stores write
    // `out`'s arrays.
    unsafe {
        let dup = SCALE_DUP.map(|c| _mm256_loadu_si256(c.as_ptr().cast()));
        let pair = MIN_PAIR.map(|c| _mm256_loadu_si256(c.as_ptr().cast()));
        let low = _mm256_set1_epi8(0x0F);
        let m6 = _mm256_set1_epi8(0x3F);
        let top = _mm256_set1_epi8(0x30);
        for half in 0..2 {
            // acc[l][c]: lane l of column c.
            let mut acc = [[_mm256_setzero_ps(); C]; 8];
            let mut summs = [_mm256_setzero_ps(); C];
            for i in 0..nb {
                let p = panel.add(i * Q5K_PANEL_BYTES);
                super::avx2::stream_halves::<C>(
                    panel,
                    half,
                    i * Q5K_PANEL_BYTES,
                    Q5K_PANEL_BYTES,
                    nb * Q5K_PANEL_BYTES,
                );
                let yb: [*const u8; C] = std::array::from_fn(|c| y[c].add(i * Q8K_BYTES));
                let ax: [*const u8; C] = std::array::from_fn(|c| aux[c].add(i * Q4K_AUX_BYTES));
                let dx = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16 * half).cast()));
                let mx = _mm256_cvtph_ps(_mm_loadu_si128(p.add(Q5K_DMIN + 16 * half).cast()));
                let ld = |at: usize| _mm256_loadu_si256(p.add(at + 32 * half).cast());
                // `panel_q5k::scales_mins`, eight rows.
                let (u0, u1, u2) = (ld(Q5K_SC), ld(Q5K_SC + 64), ld(Q5K_SC + 128));
                let scv = [
                    _mm256_and_si256(u0, m6),
                    _mm256_or_si256(
                        _mm256_and_si256(u2, low),
                        _mm256_and_si256(_mm256_srli_epi32::<2>(u0), top),
                    ),
                ];
                let mnv = [
                    _mm256_and_si256(u1, m6),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi32::<4>(u2), low),
                        _mm256_and_si256(_mm256_srli_epi32::<2>(u1), top),
                    ),
                ];
                for c in 0..C {
                    let mut mins = _mm256_setzero_si256();
                    for ch in 0..4 {
                        let m = _mm256_shuffle_epi8(mnv[ch / 2], pair[ch % 2]);
                        let prod = _mm256_madd_epi16(m, bcast(ax[c].add(4 * ch)));
                        mins = _mm256_add_epi32(mins, prod);
                    }
                    let dy = read_f32(yb[c]);
                    let dmin = _mm256_mul_ps(mx, _mm256_set1_ps(-dy));
                    summs[c] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(mins), summs[c]);
                }
                let d: [__m256; C] =
                    std::array::from_fn(|c| _mm256_mul_ps(dx, _mm256_set1_ps(read_f32(yb[c]))));
                let sc: [__m256i; 8] =
                    std::array::from_fn(|j| _mm256_shuffle_epi8(scv[j / 4], dup[j % 4]));
                for (l, acc_l) in acc.iter_mut().enumerate() {
                    let h = ld(h_at(l));
                    let mut lane = [_mm256_setzero_si256(); C];
                    for pp in 0..4 {
                        let v = ld(v_at(pp, l));
                        for n in 0..2 {
                            let j = 2 * pp + n;
                            let nib = if n == 0 { v } else { _mm256_srli_epi16::<4>(v) };
                            let u = _mm256_or_si256(_mm256_and_si256(nib, low), fifth(h, j));
                            for (c, lc) in lane.iter_mut().enumerate() {
                                let q = bcast(yb[c].add(Q8K_QS + 32 * j + 4 * l));
                                let pr = _mm256_maddubs_epi16(u, q);
                                *lc = _mm256_add_epi32(*lc, _mm256_madd_epi16(pr, sc[j]));
                            }
                        }
                    }
                    for ((a, &dc), &lc) in acc_l.iter_mut().zip(&d).zip(&lane) {
                        *a = _mm256_fmadd_ps(dc, _mm256_cvtepi32_ps(lc), *a);
                    }
                }
            }
            for c in 0..C {
                let a: [__m256; 8] = std::array::from_fn(|l| acc[l][c]);
                let t = _mm256_add_ps(lanes_total(&a), summs[c]);
                _mm256_storeu_ps(out[c].as_mut_ptr().add(8 * half), t);
            }
        }
    }
}
