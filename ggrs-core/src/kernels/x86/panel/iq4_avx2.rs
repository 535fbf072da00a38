//! The i-quant panel kernels (`panel::iq4`: layouts and AVX-512 VNNI builds) for CPUs with
//! AVX2 but without AVX-512 VNNI: each panel is two halves of eight rows, the low and high
//! 32 bytes of every packed 64-byte vector, one half at a time (the second re-reads the
//! panel from cache), as `panel::avx2`'s kernels do.
//!
//! AVX2 has no `vpdpbusd`, and `vpmaddubsw` would saturate on `level + 128` (up to 241)
//! times an activation, so both kernels take the levels' magnitudes (at most 127) as the
//! unsigned operand and give the activation quad the level's sign (`vpsignb`; the
//! activations come from the Q8_0 / Q8_K quantizers, `|y| ≤ 127`, so the negation is
//! exact): pairs at most 2·127·127 < 2¹⁵. `vpmaddwd` then widens the pairs into exact
//! 32-bit sums, by ones (IQ4_NL) or by the sub-block scale in both halves (IQ4_XS). The f32
//! steps are the VNNI kernels', so both builds give the same bits.
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX2, FMA and F16C; the pointer contracts are
//! those of [`super::gemm`].

use std::arch::x86_64::*;

use super::super::util::{read_f32, read_u32};
use super::avx2::{lanes_total, stream_halves};
use super::{q4_0_at, Kind, AUX_BYTES, ROWS};
use crate::quants::iq4::KVALUES_IQ4NL;

/// Bytes of a Q8_0 block (activations).
const Q8_0_BYTES: usize = 34;
/// Bytes of a Q8_K block: f32 `d`, 256 codes, 16 `i16` group sums.
const Q8_K_BYTES: usize = 292;
/// Offset of the codes in a Q8_K block.
const Q8_K_QS: usize = 4;

/// The activation quad at `p` in every 32-bit lane.
///
/// # Safety
/// Four bytes readable at `p`; AVX.
#[inline(always)]
unsafe fn quad(p: *const u8) -> __m256i {
    // SAFETY: forwarded from the caller.
    unsafe { _mm256_set1_epi32(read_u32(p) as i32) }
}

/// The level table in both 128-bit lanes.
///
/// # Safety
/// AVX2.
#[inline(always)]
unsafe fn levels() -> __m256i {
    // SAFETY: the table holds 16 bytes; unaligned load.
    unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast())) }
}

/// `Σ |x|·(y with x's sign)` over each pair of bytes, as 16-bit sums: `x·y` exactly when
/// `x ≠ 0` and `|x|, |y| ≤ 127`.
///
/// # Safety
/// AVX2.
#[inline(always)]
unsafe fn signed_pairs(x: __m256i, x_abs: __m256i, y: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe { _mm256_maddubs_epi16(x_abs, _mm256_sign_epi8(y, x)) }
}

/// `C` columns against an IQ4_NL panel in the chain order; `out[c][r]` row `r` · column `c`.
///
/// # Safety
/// As [`super::gemm`] (Q8_0 columns from the quantizer with their side data for
/// [`Kind::IQ4NLChain`]), on a CPU with AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_nl_chain<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: packed block i < nb of the panel, Q8_0 block i of each column and its side
    // data are readable (caller); unaligned loads; the stores write `out`'s arrays.
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let table = levels();
        // Bytes per block, on average (blocks are packed in pairs).
        let block = Kind::IQ4NLChain.panel_bytes(2) / 2;
        for half in 0..2 {
            let mut acc = [_mm256_setzero_ps(); C];
            for i in 0..nb {
                stream_halves::<C>(
                    panel,
                    half,
                    i * block,
                    block,
                    Kind::IQ4NLChain.panel_bytes(nb),
                );
                let (sc, vec) = q4_0_at(i);
                // Exact: every f16 is an f32.
                let dx = _mm256_cvtph_ps(_mm_loadu_si128(panel.add(sc + 16 * half).cast()));
                let p = panel.add(vec + 32 * half);
                let mut s = [_mm256_setzero_si256(); C];
                for g in 0..4 {
                    let v = _mm256_loadu_si256(p.add(64 * g).cast());
                    let nibbles = [
                        (_mm256_and_si256(v, low), 4 * g),
                        (_mm256_and_si256(_mm256_srli_epi16::<4>(v), low), 16 + 4 * g),
                    ];
                    for (idx, at) in nibbles {
                        let x = _mm256_shuffle_epi8(table, idx);
                        let x_abs = _mm256_abs_epi8(x);
                        for (c, sc) in s.iter_mut().enumerate() {
                            let yq = quad(y[c].add(i * Q8_0_BYTES + 2 + at));
                            let p = _mm256_madd_epi16(signed_pairs(x, x_abs, yq), ones);
                            *sc = _mm256_add_epi32(*sc, p);
                        }
                    }
                }
                for c in 0..C {
                    let dy = read_f32(aux[c].add(i * AUX_BYTES));
                    let d = _mm256_mul_ps(dx, _mm256_set1_ps(dy));
                    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), d, acc[c]);
                }
            }
            for (o, a) in out.iter_mut().zip(&acc) {
                _mm256_storeu_ps(o.as_mut_ptr().add(8 * half), *a);
            }
        }
    }
}

/// `C` columns (fewer than eight) against an IQ4_XS panel in `ggml_vec_dot_iq4_xs_q8_K`'s
/// lane order (`panel::iq4`'s module docs); `out[c][r]` row `r` · column `c`.
///
/// # Safety
/// As [`super::gemm`] (Q8_K columns from the quantizer, no side data), on a CPU with
/// AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_xs_lanes<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: packed super-block i < nb of the panel and Q8_K block i of each column are
    // readable (caller); unaligned loads; the stores write `out`'s arrays.
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        let table = levels();
        let (m_lo, m_hi) = (_mm256_set1_epi32(0x0F), _mm256_set1_epi32(0x30));
        let (bias, low16) = (_mm256_set1_epi32(32), _mm256_set1_epi32(0xFFFF));
        let bytes = Kind::IQ4XSLanes.panel_bytes(1);
        for half in 0..2 {
            let mut acc = [[_mm256_setzero_ps(); 8]; C];
            for i in 0..nb {
                stream_halves::<C>(
                    panel,
                    half,
                    i * bytes,
                    bytes,
                    Kind::IQ4XSLanes.panel_bytes(nb),
                );
                let at = Kind::IQ4XSLanes.block_at(i);
                let dx = _mm256_cvtph_ps(_mm_loadu_si128(panel.add(at.d + 16 * half).cast()));
                let sl = _mm256_loadu_si256(panel.add(at.s + 32 * half).cast());
                // The two high bits of sub-block ib at bits 4 + 2·ib.
                let sh = _mm256_slli_epi32::<4>(_mm256_cvtepu16_epi32(_mm_loadu_si128(
                    panel.add(at.h + 16 * half).cast(),
                )));
                // Sub-block ib's scale `ls − 32` as the same i16 in both halves of each lane.
                let pair = |ib: usize| {
                    let l = _mm256_srl_epi32(sl, _mm_cvtsi32_si128(4 * ib as i32));
                    let h = _mm256_srl_epi32(sh, _mm_cvtsi32_si128(2 * ib as i32));
                    let ls = _mm256_or_si256(_mm256_and_si256(l, m_lo), _mm256_and_si256(h, m_hi));
                    let ls = _mm256_sub_epi32(ls, bias);
                    _mm256_or_si256(_mm256_and_si256(ls, low16), _mm256_slli_epi32::<16>(ls))
                };
                // Sub-block by sub-block, so that the panel streams in order: quad g into
                // lane g (low nibbles) and lane g + 4 (high).
                let mut lanes = [[_mm256_setzero_si256(); 8]; C];
                for ib in 0..8 {
                    let pair = pair(ib);
                    for g in 0..4 {
                        let v = _mm256_loadu_si256(
                            panel.add(at.v + 64 * (4 * ib + g) + 32 * half).cast(),
                        );
                        let x_lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
                        let x_hi = _mm256_shuffle_epi8(
                            table,
                            _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                        );
                        let (a_lo, a_hi) = (_mm256_abs_epi8(x_lo), _mm256_abs_epi8(x_hi));
                        for (c, l) in lanes.iter_mut().enumerate() {
                            let yq = y[c].add(i * Q8_K_BYTES + Q8_K_QS + 32 * ib);
                            let p_lo = signed_pairs(x_lo, a_lo, quad(yq.add(4 * g)));
                            let p_hi = signed_pairs(x_hi, a_hi, quad(yq.add(16 + 4 * g)));
                            l[g] = _mm256_add_epi32(l[g], _mm256_madd_epi16(p_lo, pair));
                            l[g + 4] = _mm256_add_epi32(l[g + 4], _mm256_madd_epi16(p_hi, pair));
                        }
                    }
                }
                for (c, l) in lanes.iter().enumerate() {
                    let dy = read_f32(y[c].add(i * Q8_K_BYTES));
                    let d = _mm256_mul_ps(dx, _mm256_set1_ps(dy));
                    for (a, &lane) in acc[c].iter_mut().zip(l) {
                        *a = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lane), *a);
                    }
                }
            }
            for (o, a) in out.iter_mut().zip(&acc) {
                _mm256_storeu_ps(o.as_mut_ptr().add(8 * half), lanes_total(a));
            }
        }
    }
}
