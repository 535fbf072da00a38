//! AVX2 dot products of the grid i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
//! IQ3_S) with Q8_K, in the order of ggml's AVX2 `ggml_vec_dot_iq*_q8_K` (the portable form
//! of that order is `quants::iq_codes::iq_dot_x86` and the IQ1 types' `dot_iq1_*_x86`).
//!
//! Each weight block is decoded once per row by the portable decoder (`IqBlock::codes`:
//! grid words, sign bytes and scales, the table lookups ggml also does in scalar code), then
//! multiplied with every column: activations negated by xor/sub (or `vpsignb` for the IQ1
//! grids; both wrap −128 to −128 as ggml's do), `vpmaddubsw` into i16 pairs (no saturation:
//! grid magnitudes are at most 62), `vpmaddwd` with the scales into eight i32 lanes, and
//! `fma(d, lane, acc)` per block into eight f32 lanes added as `hsum_float_8` at the end.
//!
//! Same tile form as `avx2.rs`: `k::<R, C>(nb, [x; R], [y; C]) -> [[f32; C]; R]`, every
//! element with the 1 × 1 kernel's operations.
//!
//! # Safety
//! Each kernel needs a CPU with AVX2, FMA and F16C, and `nb` whole blocks readable at every
//! `x[r]` and every `y[c]`.

use std::arch::x86_64::*;
use std::mem::offset_of;

use super::iq_decode::{chunk_scales, IqSimd};
use super::ternary::load;
use super::tiled_avx2::{accumulate8, padded, sums8, GROUP, PANEL_COLS};
use super::util::{finish, hsum256, hsum_i32, read_f32};
use crate::quants::iq1_s::iq1s_shift_sum;
use crate::quants::iq_codes::{Iq1Block, Iq1Codes, IqTiled};
use crate::quants::{
    BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS, BlockQ8K,
    BlockQuant,
};

const Q8K: usize = BlockQ8K::BYTES;

/// Words `4k..4k + 4` of a decoded array (values `32k..32k + 32`).
///
/// # Safety
/// `k < 8`; the CPU supports AVX.
#[inline(always)]
unsafe fn words(w: &[u64; 32], k: usize) -> __m256i {
    // SAFETY: 4k + 4 ≤ 32 words are inside the array (caller: k < 8); AVX (caller).
    unsafe { load(w.as_ptr().add(4 * k).cast()) }
}

/// The block at `p` (any alignment).
///
/// # Safety
/// `B::BYTES` bytes are readable at `p`.
#[inline(always)]
unsafe fn block_at<B: BlockQuant>(p: *const u8) -> B {
    // SAFETY: the caller guarantees the bytes; `B` is plain old data.
    bytemuck::pod_read_unaligned(unsafe { std::slice::from_raw_parts(p, B::BYTES) })
}

/// The i16 scale vectors of the eight 32-value chunks: the first 16 values' scale in the low
/// half, the second 16's in the high half (the `vpmaddubsw` pairs of each half).
///
/// # Safety
/// The CPU supports AVX.
#[inline(always)]
unsafe fn scale_vectors(ls: &[i16; 16]) -> [__m256i; 8] {
    // SAFETY: register-only AVX operations (caller).
    unsafe {
        let mut sc = [_mm256_setzero_si256(); 8];
        for (k, s) in sc.iter_mut().enumerate() {
            *s = _mm256_set_m128i(_mm_set1_epi16(ls[2 * k + 1]), _mm_set1_epi16(ls[2 * k]));
        }
        sc
    }
}

/// An IQ2/IQ3 type · Q8_K as ggml's AVX2 kernels: per row and block, each 32-value chunk
/// decoded into registers once ([`IqSimd::chunk`]) and multiplied with the `C` columns.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq_q8_k<B: IqSimd, const R: usize, const C: usize>(
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
                let ls = B::ls_bytes(xb);
                let mut s = [_mm256_setzero_si256(); C];
                for k in 0..8 {
                    let (mag, neg) = B::chunk(xb, k);
                    let sck = chunk_scales(ls, k);
                    for c in 0..C {
                        let q = load(yb[c].add(offset_of!(BlockQ8K, qs) + 32 * k));
                        let q = _mm256_sub_epi8(_mm256_xor_si256(q, neg), neg);
                        let dot = _mm256_maddubs_epi16(mag, q);
                        s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(dot, sck));
                    }
                }
                let dx = B::d(xb);
                for c in 0..C {
                    let d = _mm256_set1_ps(dx * dy[c]);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s[c]), acc[r][c]);
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

/// `Σ grid·q·ls` (and for IQ1_M `Σ (±q)·ls`, the shift part) of one decoded IQ1 block
/// against the activations at `yq`, in i32 lanes.
///
/// # Safety
/// 256 bytes are readable at `yq`; the CPU supports AVX2.
#[inline(always)]
unsafe fn iq1_lanes<const M: bool>(
    codes: &Iq1Codes,
    sc: &[__m256i; 8],
    yq: *const u8,
) -> (__m256i, __m256i) {
    // SAFETY: the caller guarantees the bytes and AVX2.
    unsafe {
        let ones = _mm256_set1_epi8(1);
        let mut s1 = _mm256_setzero_si256();
        let mut s2 = _mm256_setzero_si256();
        for (k, sck) in sc.iter().enumerate() {
            let q = load(yq.add(32 * k));
            let g = words(&codes.grid, k);
            let dot = _mm256_maddubs_epi16(_mm256_sign_epi8(g, g), _mm256_sign_epi8(q, g));
            s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(dot, *sck));
            if M {
                let neg = words(&codes.delta_neg, k);
                let qd = _mm256_sub_epi8(_mm256_xor_si256(q, neg), neg);
                let dot = _mm256_maddubs_epi16(ones, qd);
                s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(dot, *sck));
            }
        }
        (s1, s2)
    }
}

/// IQ1_S (`M = false`) or IQ1_M (`M = true`) · Q8_K as ggml's AVX2 kernels: IQ1_S's shift
/// part from Q8_K's `bsums` into one f32 per element (`accum1 = fma(d, sumi1, accum1)`),
/// IQ1_M's in a second set of lanes; `hsum(acc) + 1/8·(shift part)` at the end.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq1_q8_k<B: Iq1Block, const M: bool, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut acc2 = [[_mm256_setzero_ps(); C]; R];
        let mut accum1 = [[0f32; C]; R];
        for i in 0..nb {
            for r in 0..R {
                let codes = block_at::<B>(x[r].add(i * B::BYTES)).codes();
                let sc = scale_vectors(&codes.ls);
                for c in 0..C {
                    let yb = y[c].add(i * Q8K);
                    let (s1, s2) = iq1_lanes::<M>(&codes, &sc, yb.add(offset_of!(BlockQ8K, qs)));
                    let dy = read_f32(yb.add(offset_of!(BlockQ8K, d)));
                    let d = dy * codes.d;
                    let dv = _mm256_set1_ps(d);
                    acc[r][c] = _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(s1), acc[r][c]);
                    if M {
                        acc2[r][c] = _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(s2), acc2[r][c]);
                    } else {
                        let bsums = yb
                            .add(offset_of!(BlockQ8K, bsums))
                            .cast::<[i16; 16]>()
                            .read_unaligned();
                        let shift = iq1s_shift_sum(&codes, &bsums) as f32;
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

/// A grid i-quant · Q8_K in the order of ggml's tiled matmul (`tiled-kernel.cpp`'s AVX2
/// act-bias MAC): per block `s1 = Σ ls·Σ (y + 128)·w − 128·Σ ls·Σ w` (exact: pair sums of
/// at most 255·62·2), `r = d·f32(s1)`, `acc = fma(r, d_y, acc)`.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq_tiled<B: IqTiled, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let ones = _mm256_set1_epi8(1);
        let bias = _mm256_set1_epi8(-128);
        let high5 = _mm256_set1_epi8(-8);
        let mut acc = [[0f32; C]; R];
        for i in 0..nb {
            for r in 0..R {
                let tc = block_at::<B>(x[r].add(i * B::BYTES)).tiled_codes();
                let sc = scale_vectors(&tc.ls);
                // The signed weights: `(a ^ b) − b` (IQ2/IQ3), `8·a + (b | 1)` (IQ1).
                let mut w = [_mm256_setzero_si256(); 8];
                for (k, wk) in w.iter_mut().enumerate() {
                    let (a, b) = (words(&tc.a, k), words(&tc.b, k));
                    *wk = if B::GRID1 {
                        let a8 = _mm256_and_si256(_mm256_slli_epi16::<3>(a), high5);
                        _mm256_add_epi8(a8, _mm256_or_si256(b, ones))
                    } else {
                        _mm256_sub_epi8(_mm256_xor_si256(a, b), b)
                    };
                }
                let mut wsum = _mm256_setzero_si256();
                for (wk, sck) in w.iter().zip(&sc) {
                    let dot = _mm256_maddubs_epi16(ones, *wk);
                    wsum = _mm256_add_epi32(wsum, _mm256_madd_epi16(dot, *sck));
                }
                let corr = 128 * hsum_i32(wsum);
                for c in 0..C {
                    let yb = y[c].add(i * Q8K);
                    let yq = yb.add(offset_of!(BlockQ8K, qs));
                    let mut s = _mm256_setzero_si256();
                    for (k, (wk, sck)) in w.iter().zip(&sc).enumerate() {
                        let q = _mm256_xor_si256(load(yq.add(32 * k)), bias);
                        let dot = _mm256_maddubs_epi16(q, *wk);
                        s = _mm256_add_epi32(s, _mm256_madd_epi16(dot, *sck));
                    }
                    let s1 = hsum_i32(s) - corr;
                    let dy = read_f32(yb.add(offset_of!(BlockQ8K, d)));
                    acc[r][c] = (tc.d * s1 as f32).mul_add(dy, acc[r][c]);
                }
            }
        }
        acc
    }
}

/// One IQ2/IQ3 block as ggml's tiled matmul multiplies it: the signed weights
/// `(mag ^ neg) − neg` of the eight chunks, their i16 multipliers, and the bias correction
/// `128·Σ ls·Σ w` (the activations enter `vpmaddubsw` as the unsigned `y + 128`).
///
/// # Safety
/// One block readable at `xb`; the CPU supports AVX2.
#[inline(always)]
unsafe fn tiled_block<B: IqSimd>(xb: *const u8) -> ([__m256i; 8], [__m256i; 8], i32) {
    // SAFETY: forwarded to the decoders (caller: a readable block, AVX2).
    unsafe {
        let ones = _mm256_set1_epi8(1);
        let ls = B::ls_bytes(xb);
        let mut w = [_mm256_setzero_si256(); 8];
        let mut sc = [_mm256_setzero_si256(); 8];
        let mut wsum = _mm256_setzero_si256();
        for k in 0..8 {
            let (mag, neg) = B::chunk(xb, k);
            w[k] = _mm256_sub_epi8(_mm256_xor_si256(mag, neg), neg);
            sc[k] = chunk_scales(ls, k);
            let dot = _mm256_maddubs_epi16(ones, w[k]);
            wsum = _mm256_add_epi32(wsum, _mm256_madd_epi16(dot, sc[k]));
        }
        (w, sc, 128 * hsum_i32(wsum))
    }
}

/// `Σ ls·Σ (y + 128)·w` of a block decoded by [`tiled_block`] against the Q8_K codes at
/// `yq`, in eight i32 lanes (exact: pair sums of at most 255·62·2).
///
/// # Safety
/// 256 bytes readable at `yq`; the CPU supports AVX2.
#[inline(always)]
unsafe fn biased_lanes(w: &[__m256i; 8], sc: &[__m256i; 8], yq: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the bytes and AVX2.
    unsafe {
        let bias = _mm256_set1_epi8(-128);
        let mut s = _mm256_setzero_si256();
        for k in 0..8 {
            let q = _mm256_xor_si256(load(yq.add(32 * k)), bias);
            let dot = _mm256_maddubs_epi16(q, w[k]);
            s = _mm256_add_epi32(s, _mm256_madd_epi16(dot, sc[k]));
        }
        s
    }
}

/// An IQ2/IQ3 type · Q8_K in the order of ggml's tiled matmul ([`iq_tiled`]'s, with the
/// block decoded into registers).
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq23_tiled<B: IqSimd, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let mut acc = [[0f32; C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * B::BYTES);
                let (w, sc, corr) = tiled_block::<B>(xb);
                let d = B::d(xb) * B::FACTOR;
                for c in 0..C {
                    let yb = y[c].add(i * Q8K);
                    let s = biased_lanes(&w, &sc, yb.add(offset_of!(BlockQ8K, qs)));
                    let s1 = hsum_i32(s) - corr;
                    let dy = read_f32(yb.add(offset_of!(BlockQ8K, d)));
                    acc[r][c] = (d * s1 as f32).mul_add(dy, acc[r][c]);
                }
            }
        }
        acc
    }
}

/// IQ2/IQ3 panels in ggml's tiled order (`tiled_avx2::PanelFn`'s contract): per
/// super-block, each row's block decoded once ([`tiled_block`]) and dotted with the columns
/// eight at a time, with [`iq23_tiled`]'s bits for every element.
///
/// # Safety
/// As `tiled_avx2::PanelFn`.
#[inline(always)]
unsafe fn iq23_panel<B: IqSimd>(nb: usize, x: &[*const u8], y: &[*const u8], out: &mut [f32]) {
    debug_assert!(!y.is_empty() && y.len() <= PANEL_COLS);
    debug_assert!(out.len() >= x.len() * PANEL_COLS);
    // SAFETY: block i < nb of every row and column is readable (caller); unaligned loads;
    // `out` has room for every row (checked above); the CPU features are the caller's.
    unsafe {
        let groups = y.len().div_ceil(GROUP);
        let y = padded(y);
        out[..x.len() * PANEL_COLS].fill(0.0);
        for i in 0..nb {
            let yb: [*const u8; PANEL_COLS] = y.map(|p| p.add(i * Q8K));
            let dy: [f32; PANEL_COLS] = yb.map(|p| read_f32(p.add(offset_of!(BlockQ8K, d))));
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
                let (w, sc, corr) = tiled_block::<B>(xb);
                let corr = _mm256_set1_epi32(corr);
                let d = B::d(xb) * B::FACTOR;
                for grp in 0..groups {
                    let s: [__m256i; GROUP] = std::array::from_fn(|c| {
                        biased_lanes(&w, &sc, yb[GROUP * grp + c].add(offset_of!(BlockQ8K, qs)))
                    });
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

macro_rules! iq_panels {
    ($($(#[doc = $doc:expr])+ $name:ident => $B:ty;)+) => {
        $(
            $(#[doc = $doc])+
            ///
            /// # Safety
            /// A CPU with AVX2, FMA and F16C; `nb` whole blocks readable at every row and
            /// column pointer; `1 ≤ y.len() ≤ PANEL_COLS`; `out` holds `x.len()·PANEL_COLS`
            /// values.
            #[target_feature(enable = "avx2,fma,f16c")]
            pub(crate) unsafe fn $name(
                nb: usize,
                x: &[*const u8],
                y: &[*const u8],
                out: &mut [f32],
            ) {
                // SAFETY: forwarded from the caller.
                unsafe { iq23_panel::<$B>(nb, x, y, out) }
            }
        )+
    };
}

iq_panels! {
    /// IQ2_XXS panels in ggml's tiled order.
    iq2_xxs_panel => BlockIQ2XXS;
    /// IQ2_XS panels in ggml's tiled order.
    iq2_xs_panel => BlockIQ2XS;
    /// IQ2_S panels in ggml's tiled order.
    iq2_s_panel => BlockIQ2S;
    /// IQ3_XXS panels in ggml's tiled order.
    iq3_xxs_panel => BlockIQ3XXS;
    /// IQ3_S panels in ggml's tiled order.
    iq3_s_panel => BlockIQ3S;
}

macro_rules! iq_kernels {
    ($($(#[doc = $doc:expr])+ $name:ident => $body:expr;)+) => {
        $(
            $(#[doc = $doc])+
            ///
            /// # Safety
            /// See the module docs.
            #[target_feature(enable = "avx2,fma,f16c")]
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
    iq2_xxs_q8_k => iq_q8_k::<BlockIQ2XXS, R, C>;
    /// IQ2_XS · Q8_K as ggml's AVX2 `ggml_vec_dot_iq2_xs_q8_K`.
    iq2_xs_q8_k => iq_q8_k::<BlockIQ2XS, R, C>;
    /// IQ2_S · Q8_K as ggml's AVX2 `ggml_vec_dot_iq2_s_q8_K`.
    iq2_s_q8_k => iq_q8_k::<BlockIQ2S, R, C>;
    /// IQ3_XXS · Q8_K as ggml's AVX2 `ggml_vec_dot_iq3_xxs_q8_K`.
    iq3_xxs_q8_k => iq_q8_k::<BlockIQ3XXS, R, C>;
    /// IQ3_S · Q8_K as ggml's AVX2 `ggml_vec_dot_iq3_s_q8_K`.
    iq3_s_q8_k => iq_q8_k::<BlockIQ3S, R, C>;
    /// IQ1_S · Q8_K as ggml's AVX2 `ggml_vec_dot_iq1_s_q8_K`.
    iq1_s_q8_k => iq1_q8_k::<BlockIQ1S, false, R, C>;
    /// IQ1_M · Q8_K as ggml's AVX2 `ggml_vec_dot_iq1_m_q8_K`.
    iq1_m_q8_k => iq1_q8_k::<BlockIQ1M, true, R, C>;
    /// IQ2_XXS · Q8_K in the order of ggml's tiled matmul.
    iq2_xxs_tiled => iq23_tiled::<BlockIQ2XXS, R, C>;
    /// IQ2_XS · Q8_K in the order of ggml's tiled matmul.
    iq2_xs_tiled => iq23_tiled::<BlockIQ2XS, R, C>;
    /// IQ2_S · Q8_K in the order of ggml's tiled matmul.
    iq2_s_tiled => iq23_tiled::<BlockIQ2S, R, C>;
    /// IQ3_XXS · Q8_K in the order of ggml's tiled matmul.
    iq3_xxs_tiled => iq23_tiled::<BlockIQ3XXS, R, C>;
    /// IQ3_S · Q8_K in the order of ggml's tiled matmul.
    iq3_s_tiled => iq23_tiled::<BlockIQ3S, R, C>;
    /// IQ1_S · Q8_K in the order of ggml's tiled matmul.
    iq1_s_tiled => iq_tiled::<BlockIQ1S, R, C>;
    /// IQ1_M · Q8_K in the order of ggml's tiled matmul.
    iq1_m_tiled => iq_tiled::<BlockIQ1M, R, C>;
}
