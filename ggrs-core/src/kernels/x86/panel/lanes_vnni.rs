//! The AVX-512 VNNI build of the lanes panel kernel for Q4_1, Q5_0 and Q5_1 weights
//! (`panel`'s layout: sixteen rows, one per 32-bit lane; `panel::avx2::lanes` is the AVX2
//! build, same bits): ggml's x86 lane order (`ggml_vec_dot_q4_1_q8_1`, `_q5_0_q8_0`,
//! `_q5_1_q8_1`, tinyBLAS), per row eight accumulators, one per quad `g` of the block,
//! `acc_g = fma(s_g, dx·dy, acc_g)` on the exact quad sum `s_g`; for the types with a
//! minimum `summs = fma(mx, sy, summs)` beside them; at the end
//! `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) + summs`.
//!
//! A quad sum is one `vpdpbusd` of the unsigned codes (at most 31) against the broadcast
//! activation quad, seeded with `−16 · Σ y` over the quad for Q5_0's offset (the side data of
//! `panel::activation_aux`): exact in 32 bits.
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C); the
//! pointer contracts are those of [`super::gemm`].

use std::arch::x86_64::*;

use super::super::util::{f16_at, read_u32};
use super::avx2::LanesType;
use super::{stream_ahead, AUX_BYTES};

/// Bit `g` of every byte of `h` moved to bit 4 (`0x10`), the other bits cleared: the fifth
/// bits of quad `g` (see `panel::BlockAt::h`). The 16-bit shifts move no bit across a byte
/// into position 4.
///
/// # Safety
/// AVX-512 BW.
#[inline(always)]
pub(super) unsafe fn fifth(h: __m512i, g: usize) -> __m512i {
    // SAFETY: register-only AVX-512 BW operations.
    unsafe {
        let moved = match g {
            0 => _mm512_slli_epi16::<4>(h),
            1 => _mm512_slli_epi16::<3>(h),
            2 => _mm512_slli_epi16::<2>(h),
            3 => _mm512_slli_epi16::<1>(h),
            4 => h,
            5 => _mm512_srli_epi16::<1>(h),
            6 => _mm512_srli_epi16::<2>(h),
            _ => _mm512_srli_epi16::<3>(h),
        };
        _mm512_and_si512(moved, _mm512_set1_epi8(0x10))
    }
}

/// `C` columns against a Q4_1, Q5_0 or Q5_1 panel in ggml's lane order (see the module
/// docs): lane `r` of result `c` is row `r` · column `c`.
///
/// # Safety
/// As [`super::gemm`]: Q8_1 activation rows for the types with a minimum, else Q8_0
/// rows with their side data.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn lanes<T: LanesType, const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
) -> [__m512; C] {
    // Activation block bytes and where its codes start (Q8_1: d, s, codes; Q8_0: d, codes).
    let (yb, yq) = if T::MIN { (36, 4) } else { (34, 2) };
    // SAFETY: packed block i < nb of the panel, activation block i of each column and its
    // side data are readable (caller); unaligned loads.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let mut acc = [[_mm512_setzero_ps(); 8]; C];
        let mut summs = [_mm512_setzero_ps(); C];
        let bb = T::KIND.panel_bytes(1);
        for i in 0..nb {
            stream_ahead(panel, i * bb, bb);
            let at = T::KIND.block_at(i);
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(panel.add(at.d).cast()));
            let mx = if T::MIN {
                _mm512_cvtph_ps(_mm256_loadu_si256(panel.add(at.m).cast()))
            } else {
                _mm512_setzero_ps()
            };
            let mut u = [_mm512_setzero_si512(); 8];
            for g in 0..4 {
                let v = _mm512_loadu_si512(panel.add(at.v + 64 * g).cast());
                u[g] = _mm512_and_si512(v, low);
                u[g + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
            }
            if T::FIFTH {
                let h = _mm512_loadu_si512(panel.add(at.h).cast());
                for (g, ug) in u.iter_mut().enumerate() {
                    *ug = _mm512_or_si512(*ug, fifth(h, g));
                }
            }
            for c in 0..C {
                let b = y[c].add(i * yb);
                let d = _mm512_mul_ps(dx, _mm512_set1_ps(f16_at(b)));
                if T::MIN {
                    let sy = _mm512_set1_ps(f16_at(b.add(2)));
                    summs[c] = _mm512_fmadd_ps(mx, sy, summs[c]);
                }
                let q = b.add(yq);
                for (g, lane) in acc[c].iter_mut().enumerate() {
                    let seed = if T::MIN {
                        _mm512_setzero_si512()
                    } else {
                        // Side data exist only for the types without a minimum.
                        let s = read_u32(aux[c].add(i * AUX_BYTES + 8 + 4 * g));
                        _mm512_set1_epi32(s as i32)
                    };
                    let yv = _mm512_set1_epi32(read_u32(q.add(4 * g)) as i32);
                    let s = _mm512_dpbusd_epi32(seed, u[g], yv);
                    *lane = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, *lane);
                }
            }
        }
        std::array::from_fn(|c| {
            let a = &acc[c];
            let t = _mm512_add_ps(
                _mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])),
            );
            if T::MIN {
                _mm512_add_ps(t, summs[c])
            } else {
                t
            }
        })
    }
}
