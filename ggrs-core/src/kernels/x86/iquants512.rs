//! AVX-512 VNNI dot products of the grid i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
//! IQ3_XXS, IQ3_S) with Q8_K: the bits of `iquants.rs`'s AVX2 kernels, 64 values per
//! instruction instead of 32.
//!
//! - ggml's AVX2 `vec_dot` order (below eight columns, decoding): two 32-value chunks of a
//!   block in one register (chunk `2p` in the low half, `2p + 1` in the high), the signs
//!   applied to the activations under a mask register (`0 − q` where negative: −128 wraps to
//!   −128 as ggml's `vpsignb` / xor-sub do), `vpmaddubsw` into i16 pairs and `vpdpwssd` with
//!   the 16-value multipliers. Lane `j` of the high half holds what the AVX2 kernel's lane `j`
//!   gets from chunk `2p + 1`, so the two halves added give every AVX2 lane its exact
//!   integer, and the f32 steps (`fma(d, f32(lane), acc)` per block, `hsum_float_8`) are the
//!   AVX2 kernel's.
//! - ggml's tiled order (prompts, `*_panel_vnni`): the block's signed weights decoded once
//!   per row (`iquants::tiled_block`), the activations of the panel's columns biased to
//!   `y + 128` once per block for all rows, then per row and column four
//!   `vpmaddubsw` + `vpdpwssd` for the 256 values; the block's integer sum is exact, so it
//!   is the AVX2 panel's, and the f32 steps are `tiled_avx2::accumulate8`'s.
//!
//! The blocks are decoded by `iq_decode` (AVX2, 32 values at a time) and joined in pairs.
//!
//! # Safety
//! Each kernel needs a CPU with AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI, and `nb` whole
//! blocks readable at every `x[r]` and every `y[c]`.

use std::arch::x86_64::*;
use std::mem::offset_of;

use super::iq_decode::chunk_scales;
use super::iq_decode512::{join, IqSimd512};
use super::iquants::{iq1s_shift, iq_panels, prefetch_ahead, tiled_block};
use super::tiled_avx2::{accumulate8, padded, sums8, PanelFn, GROUP, PANEL_COLS};
use super::util::{finish, hsum256, read_f32};
use crate::dtype::DType;
use crate::quants::{
    BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS, BlockQ8K,
    BlockQuant,
};

const Q8K: usize = BlockQ8K::BYTES;
const QS: usize = offset_of!(BlockQ8K, qs);

/// Lane `j` plus lane `j + 8`, for `j < 8` (exact).
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline(always)]
unsafe fn fold(v: __m512i) -> __m256i {
    // SAFETY: register-only AVX-512 F operations (caller).
    unsafe { _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v)) }
}

/// Values `64p .. 64p + 64` of a block (`p < 4`): [`IqSimd512::pair`]'s grid bytes and
/// mask, and the i16 multipliers of the `vpmaddubsw` pairs.
///
/// # Safety
/// One block readable at `xb`; `p < 4`; AVX-512 F/BW.
#[inline(always)]
unsafe fn pair<B: IqSimd512>(
    xb: *const u8,
    ls: __m128i,
    p: usize,
) -> (__m512i, __mmask64, __m512i) {
    // SAFETY: forwarded to the decoders (caller: a readable block, p < 4, the features).
    unsafe {
        let (mag, neg) = B::pair(xb, p);
        let sc = join(chunk_scales(ls, 2 * p), chunk_scales(ls, 2 * p + 1));
        (mag, neg, sc)
    }
}

/// Values `64p .. 64p + 64` of a block for the `vec_dot` kernels: as [`pair`], the i16
/// multipliers picked with one `vpermw` from the block's sixteen ([`IqSimd512::scales16`]):
/// lane `m` gets group `4p + m / 8`'s.
///
/// # Safety
/// One block readable at `xb`; `p < 4`; AVX-512 F/BW.
#[inline(always)]
unsafe fn pair_dot<B: IqSimd512>(
    xb: *const u8,
    ls16: __m512i,
    p: usize,
) -> (__m512i, __mmask64, __m512i) {
    // SAFETY: forwarded to the decoders (caller: a readable block, p < 4, the features).
    unsafe {
        let (mag, neg) = B::pair(xb, p);
        let base = _mm512_set_epi64(
            0x0003_0003_0003_0003,
            0x0003_0003_0003_0003,
            0x0002_0002_0002_0002,
            0x0002_0002_0002_0002,
            0x0001_0001_0001_0001,
            0x0001_0001_0001_0001,
            0,
            0,
        );
        let pick = _mm512_add_epi16(base, _mm512_set1_epi16(4 * p as i16));
        (mag, neg, _mm512_permutexvar_epi16(pick, ls16))
    }
}

/// `q` with the bytes under `neg` negated (`0 − q`, wrapping).
///
/// # Safety
/// AVX-512 BW.
#[inline(always)]
unsafe fn negate(q: __m512i, neg: __mmask64) -> __m512i {
    // SAFETY: register-only AVX-512 BW operation (caller).
    unsafe { _mm512_mask_sub_epi8(q, neg, _mm512_setzero_si512(), q) }
}

/// 64 activation codes of a Q8_K block.
///
/// # Safety
/// 64 bytes readable at `p`; AVX-512 F.
#[inline(always)]
unsafe fn load64(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees the bytes; unaligned load.
    unsafe { _mm512_loadu_si512(p.cast()) }
}

/// An IQ2/IQ3 type · Q8_K in the order of ggml's AVX2 kernels (`iquants::iq_q8_k`'s bits).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn iq_q8_k<B: IqSimd512, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for i in 0..nb {
            let yb: [*const u8; C] = y.map(|p| p.add(i * Q8K));
            let dy: [f32; C] = yb.map(|p| read_f32(p.add(offset_of!(BlockQ8K, d))));
            for r in 0..R {
                let xb = x[r].add(i * B::BYTES);
                prefetch_ahead::<B, R>(&x, r, i, nb);
                let ls16 = _mm512_castsi256_si512(B::scales16(xb));
                let mut s = [_mm512_setzero_si512(); C];
                for p in 0..4 {
                    let (mag, neg, sc) = pair_dot::<B>(xb, ls16, p);
                    for c in 0..C {
                        let q = negate(load64(yb[c].add(QS + 64 * p)), neg);
                        s[c] = _mm512_dpwssd_epi32(s[c], _mm512_maddubs_epi16(mag, q), sc);
                    }
                }
                let dx = B::d(xb);
                for c in 0..C {
                    let d = _mm256_set1_ps(dx * dy[c]);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(fold(s[c])), acc[r][c]);
                }
            }
        }
        let mut out = finish(acc);
        for row in out.iter_mut() {
            for v in row.iter_mut() {
                *v *= B::FACTOR;
            }
        }
        out
    }
}

/// IQ1_S (`M = false`) or IQ1_M (`M = true`) · Q8_K in the order of ggml's AVX2 kernels
/// (`iquants::iq1_q8_k`'s bits): the grid part `|g|·(±q)` with the sign of `g` applied
/// under a mask, IQ1_S's shift part from `bsums`, IQ1_M's in a second set of lanes.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn iq1_q8_k<B: IqSimd512, const M: bool, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let ones = _mm512_set1_epi8(1);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut acc2 = [[_mm256_setzero_ps(); C]; R];
        let mut accum1 = [[0f32; C]; R];
        for i in 0..nb {
            let yb: [*const u8; C] = y.map(|p| p.add(i * Q8K));
            let dy: [f32; C] = yb.map(|p| read_f32(p.add(offset_of!(BlockQ8K, d))));
            for r in 0..R {
                let xb = x[r].add(i * B::BYTES);
                prefetch_ahead::<B, R>(&x, r, i, nb);
                let ls16 = _mm512_castsi256_si512(B::scales16(xb));
                let mut s1 = [_mm512_setzero_si512(); C];
                let mut s2 = [_mm512_setzero_si512(); C];
                for p in 0..4 {
                    // (`pair`'s mask is IQ1's negative shifts here; the grid's signs come
                    // from the grid values themselves.)
                    let (g, dneg, sc) = pair_dot::<B>(xb, ls16, p);
                    let gneg = _mm512_movepi8_mask(g);
                    let mag = _mm512_abs_epi8(g);
                    for c in 0..C {
                        let q = load64(yb[c].add(QS + 64 * p));
                        let dot = _mm512_maddubs_epi16(mag, negate(q, gneg));
                        s1[c] = _mm512_dpwssd_epi32(s1[c], dot, sc);
                        if M {
                            let dot = _mm512_maddubs_epi16(ones, negate(q, dneg));
                            s2[c] = _mm512_dpwssd_epi32(s2[c], dot, sc);
                        }
                    }
                }
                let dx = B::d(xb);
                for c in 0..C {
                    let d = dy[c] * dx;
                    let dv = _mm256_set1_ps(d);
                    acc[r][c] = _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(fold(s1[c])), acc[r][c]);
                    if M {
                        let s2 = _mm256_cvtepi32_ps(fold(s2[c]));
                        acc2[r][c] = _mm256_fmadd_ps(dv, s2, acc2[r][c]);
                    } else {
                        let shift = iq1s_shift(xb, yb[c]) as f32;
                        accum1[r][c] = d.mul_add(shift, accum1[r][c]);
                    }
                }
            }
        }
        let mut out = finish(acc);
        for r in 0..R {
            for c in 0..C {
                let shift = if M { hsum256(acc2[r][c]) } else { accum1[r][c] };
                out[r][c] += 0.125 * shift;
            }
        }
        out
    }
}

/// `iquants::tiled_block` in pairs of chunks: the block's signed weights (IQ2/IQ3:
/// magnitudes negated under the sign mask; IQ1: `iquants::tiled_block`'s, joined), the i16
/// multipliers and the bias correction `128·Σ ls·Σ w`.
///
/// # Safety
/// One block readable at `xb`; AVX-512 F/BW/VL/VNNI.
#[inline(always)]
unsafe fn tiled_block512<B: IqSimd512>(xb: *const u8) -> ([__m512i; 4], [__m512i; 4], i32) {
    // SAFETY: forwarded to the decoders (caller: a readable block, the features).
    unsafe {
        if B::GRID1 {
            let (w8, sc8, corr) = tiled_block::<B>(xb);
            let w = std::array::from_fn(|p| join(w8[2 * p], w8[2 * p + 1]));
            let sc = std::array::from_fn(|p| join(sc8[2 * p], sc8[2 * p + 1]));
            return (w, sc, corr);
        }
        let ones = _mm512_set1_epi8(1);
        let ls = B::ls_bytes(xb);
        let mut w = [_mm512_setzero_si512(); 4];
        let mut sc = [_mm512_setzero_si512(); 4];
        let mut wsum = _mm512_setzero_si512();
        for p in 0..4 {
            let (mag, neg, s) = pair::<B>(xb, ls, p);
            w[p] = negate(mag, neg);
            sc[p] = s;
            wsum = _mm512_dpwssd_epi32(wsum, _mm512_maddubs_epi16(ones, w[p]), s);
        }
        (w, sc, 128 * _mm512_reduce_add_epi32(wsum))
    }
}

/// Grid i-quant panels in ggml's tiled order (`tiled_avx2::PanelFn`'s contract), with the
/// bits of `iquants`' AVX2 panels: per super-block the columns' codes biased to `y + 128`
/// once, each row's block decoded once (`tiled_block`) and dotted with the columns eight at
/// a time, 64 values per `vpmaddubsw` + `vpdpwssd`.
///
/// # Safety
/// As `tiled_avx2::PanelFn`, on a CPU with AVX-512 F/BW/VL/VNNI.
#[inline(always)]
unsafe fn grid_panel<B: IqSimd512>(nb: usize, x: &[*const u8], y: &[*const u8], out: &mut [f32]) {
    debug_assert!(!y.is_empty() && y.len() <= PANEL_COLS);
    debug_assert!(out.len() >= x.len() * PANEL_COLS);
    // SAFETY: block i < nb of every row and column is readable (caller); unaligned loads;
    // `out` has room for every row (checked above); the CPU features are the caller's.
    unsafe {
        let groups = y.len().div_ceil(GROUP);
        let cols = groups * GROUP;
        let y = padded(y);
        let bias = _mm512_set1_epi8(-128);
        out[..x.len() * PANEL_COLS].fill(0.0);
        let mut yq = [[_mm512_setzero_si512(); 4]; PANEL_COLS];
        for i in 0..nb {
            let yb: [*const u8; PANEL_COLS] = y.map(|p| p.add(i * Q8K));
            let dy: [f32; PANEL_COLS] = yb.map(|p| read_f32(p.add(offset_of!(BlockQ8K, d))));
            for c in 0..cols {
                for (p, v) in yq[c].iter_mut().enumerate() {
                    *v = _mm512_xor_si512(load64(yb[c].add(QS + 64 * p)), bias);
                }
            }
            for (r, &xr) in x.iter().enumerate() {
                let xb = xr.add(i * B::BYTES);
                if i + 1 < nb {
                    // The row's next block, while this one is computed.
                    let next = xb.add(B::BYTES);
                    let mut o = 0;
                    while o < B::BYTES {
                        _mm_prefetch::<_MM_HINT_T0>(next.add(o).cast());
                        o += 64;
                    }
                }
                let (w, sc, corr) = tiled_block512::<B>(xb);
                let corr = _mm256_set1_epi32(corr);
                let d = B::d(xb) * B::FACTOR;
                for grp in 0..groups {
                    let mut s = [_mm256_setzero_si256(); GROUP];
                    for (c, s_c) in s.iter_mut().enumerate() {
                        let q = &yq[GROUP * grp + c];
                        let mut t = _mm512_setzero_si512();
                        for p in 0..4 {
                            t = _mm512_dpwssd_epi32(t, _mm512_maddubs_epi16(q[p], w[p]), sc[p]);
                        }
                        *s_c = fold(t);
                    }
                    accumulate8(
                        false,
                        out.as_mut_ptr().add(r * PANEL_COLS + GROUP * grp),
                        d,
                        0.0,
                        _mm256_sub_epi32(sums8(&s), corr),
                        _mm256_setzero_si256(),
                        dy.as_ptr().add(GROUP * grp),
                    );
                }
            }
        }
    }
}

iq_panels! {
    features = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    cpu = "AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI";
    /// IQ2_XXS panels in ggml's tiled order.
    iq2_xxs_panel_vnni => BlockIQ2XXS;
    /// IQ2_XS panels in ggml's tiled order.
    iq2_xs_panel_vnni => BlockIQ2XS;
    /// IQ2_S panels in ggml's tiled order.
    iq2_s_panel_vnni => BlockIQ2S;
    /// IQ3_XXS panels in ggml's tiled order.
    iq3_xxs_panel_vnni => BlockIQ3XXS;
    /// IQ3_S panels in ggml's tiled order.
    iq3_s_panel_vnni => BlockIQ3S;
    /// IQ1_S panels in ggml's tiled order.
    iq1_s_panel_vnni => BlockIQ1S;
    /// IQ1_M panels in ggml's tiled order.
    iq1_m_panel_vnni => BlockIQ1M;
}

/// The AVX-512 VNNI panel kernel of grid i-quant `dtype`, if it is one (the caller checks
/// the CPU).
pub(crate) fn panel_vnni(dtype: DType) -> Option<PanelFn> {
    Some(match dtype {
        DType::IQ2XXS => iq2_xxs_panel_vnni,
        DType::IQ2XS => iq2_xs_panel_vnni,
        DType::IQ2S => iq2_s_panel_vnni,
        DType::IQ3XXS => iq3_xxs_panel_vnni,
        DType::IQ3S => iq3_s_panel_vnni,
        DType::IQ1S => iq1_s_panel_vnni,
        DType::IQ1M => iq1_m_panel_vnni,
        _ => return None,
    })
}

macro_rules! iq_kernels {
    ($($(#[doc = $doc:expr])+ $name:ident => $body:expr;)+) => {
        $(
            $(#[doc = $doc])+
            ///
            /// # Safety
            /// See the module docs.
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            pub(crate) unsafe fn $name<const R: usize, const C: usize>(
                nb: usize,
                x: [*const u8; R],
                y: [*const u8; C],
            ) -> [[f32; C]; R] {
                // SAFETY: the same contract (caller).
                unsafe { $body(nb, x, y) }
            }
        )+
    };
}

iq_kernels! {
    /// IQ2_XXS · Q8_K as ggml's AVX2 `ggml_vec_dot_iq2_xxs_q8_K`.
    iq2_xxs_q8_k_vnni => iq_q8_k::<BlockIQ2XXS, R, C>;
    /// IQ2_XS · Q8_K as ggml's AVX2 `ggml_vec_dot_iq2_xs_q8_K`.
    iq2_xs_q8_k_vnni => iq_q8_k::<BlockIQ2XS, R, C>;
    /// IQ2_S · Q8_K as ggml's AVX2 `ggml_vec_dot_iq2_s_q8_K`.
    iq2_s_q8_k_vnni => iq_q8_k::<BlockIQ2S, R, C>;
    /// IQ3_XXS · Q8_K as ggml's AVX2 `ggml_vec_dot_iq3_xxs_q8_K`.
    iq3_xxs_q8_k_vnni => iq_q8_k::<BlockIQ3XXS, R, C>;
    /// IQ3_S · Q8_K as ggml's AVX2 `ggml_vec_dot_iq3_s_q8_K`.
    iq3_s_q8_k_vnni => iq_q8_k::<BlockIQ3S, R, C>;
    /// IQ1_S · Q8_K as ggml's AVX2 `ggml_vec_dot_iq1_s_q8_K`.
    iq1_s_q8_k_vnni => iq1_q8_k::<BlockIQ1S, false, R, C>;
    /// IQ1_M · Q8_K as ggml's AVX2 `ggml_vec_dot_iq1_m_q8_K`.
    iq1_m_q8_k_vnni => iq1_q8_k::<BlockIQ1M, true, R, C>;
}
