//! AVX2 dot products of the grid i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
//! IQ3_S) with Q8_K, in the order of ggml's AVX2 `ggml_vec_dot_iq*_q8_K` (the portable form
//! of that order is `quants::iq_codes::iq_dot_x86` and the IQ1 types' `dot_iq1_*_x86`).
//!
//! Each weight block is decoded once per row, 32 values at a time straight into registers
//! (`iq_decode`: grid rows and sign masks by table lookups, as ggml's kernels do), and each
//! chunk multiplied with every column: activations negated by xor/sub (or `vpsignb` for the IQ1
//! grids; both wrap −128 to −128 as ggml's do), `vpmaddubsw` into i16 pairs (no saturation:
//! grid magnitudes are at most 62), `vpmaddwd` with the scales into eight i32 lanes, and
//! `fma(d, lane, acc)` per block into eight f32 lanes added as `hsum_float_8` at the end.
//!
//! Same tile form as `avx2.rs`: `k::<R, C>(nb, [x; R], [y; C]) -> [[f32; C]; R]`, every
//! element with the 1 × 1 kernel's operations. The same in the order of ggml's tiled matmul
//! (`*_tiled`), and its panels for `mul_mat`'s prompts (`*_panel`: rows × up to 16
//! columns, each weight block decoded once for all of them, `tiled_avx2::PanelFn`).
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
use crate::quants::{
    BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS, BlockQ8K,
    BlockQuant,
};

const Q8K: usize = BlockQ8K::BYTES;

/// Blocks a row's prefetch runs ahead of its decode in the `vec_dot` kernels (decoding
/// streams each weight once, and the grid decode is too slow for the hardware prefetcher
/// to stay ahead on its own).
const AHEAD: usize = 8;

/// Asks for the cache lines of the block `AHEAD` blocks after block `i` of row `r` of a
/// kernel's `R` rows: in that row while it has that many blocks left, else the same place
/// in the row `R` rows down (the first row of the next call's tile, rows lying as far apart
/// as the first two: the matmul's rows are consecutive), so that the next tile's rows do
/// not start cold. A hint only: any address is sound.
#[inline(always)]
pub(super) fn prefetch_ahead<B: BlockQuant, const R: usize>(
    x: &[*const u8; R],
    r: usize,
    i: usize,
    nb: usize,
) {
    let j = i + AHEAD;
    let p = if j < nb || R == 1 {
        x[r].wrapping_add(j * B::BYTES)
    } else {
        let stride = (x[1] as usize).wrapping_sub(x[0] as usize);
        x[r].wrapping_add(R.wrapping_mul(stride))
            .wrapping_add((j - nb) * B::BYTES)
    };
    let mut o = 0;
    while o < B::BYTES {
        // SAFETY: a prefetch never faults and reads nothing into the program.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o).cast()) };
        o += 64;
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
                prefetch_ahead::<B, R>(&x, r, i, nb);
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

/// IQ1_S's shift part `Σ ls·(±1)·(bsums[2ib] + bsums[2ib + 1])` of the block at `xb`
/// against the Q8_K block at `yb` (exact; `quants::iq1_s::iq1s_shift_sum` from the bytes).
///
/// # Safety
/// One IQ1_S block readable at `xb`, one Q8_K block at `yb`.
#[inline(always)]
pub(super) unsafe fn iq1s_shift(xb: *const u8, yb: *const u8) -> i32 {
    // SAFETY: the caller guarantees both blocks; unaligned loads; AVX2 (every caller is an
    // AVX2 kernel).
    unsafe {
        let qh = _mm256_cvtepi16_epi32(_mm_loadu_si128(xb.add(offset_of!(BlockIQ1S, qh)).cast()));
        // ls = 2·((qh >> 12) & 7) + 1, negated where bit 15 is set (qh sign-extended).
        let ls = _mm256_and_si256(_mm256_srli_epi32::<11>(qh), _mm256_set1_epi32(14));
        let ls = _mm256_or_si256(ls, _mm256_set1_epi32(1));
        let neg = _mm256_srai_epi32::<31>(_mm256_slli_epi32::<16>(qh));
        let ls = _mm256_sub_epi32(_mm256_xor_si256(ls, neg), neg);
        // bsums[2ib] + bsums[2ib + 1] per lane ib.
        let bs = _mm256_loadu_si256(yb.add(offset_of!(BlockQ8K, bsums)).cast());
        let pairs = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
        hsum_i32(_mm256_mullo_epi32(pairs, ls))
    }
}

/// IQ1_S (`M = false`) or IQ1_M (`M = true`) · Q8_K as ggml's AVX2 kernels: the grid part
/// `vpmaddubsw(|g|, vpsignb(q, g))` in eight i32 lanes; IQ1_S's shift part from Q8_K's
/// `bsums` into one f32 per element (`accum1 = fma(d, sumi1, accum1)`), IQ1_M's
/// (`Σ (±q)·ls`) in a second set of lanes; `hsum(acc) + 1/8·(shift part)` at the end.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq1_q8_k<B: IqSimd, const M: bool, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; the CPU
    // features are the caller's guarantee.
    unsafe {
        let ones = _mm256_set1_epi8(1);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut acc2 = [[_mm256_setzero_ps(); C]; R];
        let mut accum1 = [[0f32; C]; R];
        for i in 0..nb {
            let yb: [*const u8; C] = y.map(|p| p.add(i * Q8K));
            let dy: [f32; C] = yb.map(|p| read_f32(p.add(offset_of!(BlockQ8K, d))));
            for r in 0..R {
                let xb = x[r].add(i * B::BYTES);
                prefetch_ahead::<B, R>(&x, r, i, nb);
                let ls = B::ls_bytes(xb);
                let mut s1 = [_mm256_setzero_si256(); C];
                let mut s2 = [_mm256_setzero_si256(); C];
                for k in 0..8 {
                    let (g, dneg) = B::chunk(xb, k);
                    let sck = chunk_scales(ls, k);
                    let mag = _mm256_sign_epi8(g, g);
                    for c in 0..C {
                        let q = load(yb[c].add(offset_of!(BlockQ8K, qs) + 32 * k));
                        let dot = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(q, g));
                        s1[c] = _mm256_add_epi32(s1[c], _mm256_madd_epi16(dot, sck));
                        if M {
                            let qd = _mm256_sub_epi8(_mm256_xor_si256(q, dneg), dneg);
                            let dot = _mm256_maddubs_epi16(ones, qd);
                            s2[c] = _mm256_add_epi32(s2[c], _mm256_madd_epi16(dot, sck));
                        }
                    }
                }
                let dx = B::d(xb);
                for c in 0..C {
                    let d = dy[c] * dx;
                    let dv = _mm256_set1_ps(d);
                    acc[r][c] = _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(s1[c]), acc[r][c]);
                    if M {
                        acc2[r][c] = _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(s2[c]), acc2[r][c]);
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

/// One grid i-quant block as ggml's tiled matmul multiplies it (`tiled_unpack_src0`): the
/// signed weights of the eight chunks, `(mag ^ neg) − neg` (IQ2/IQ3) or `8·grid + (±1)`
/// (IQ1), their i16 multipliers, and the bias correction `128·Σ ls·Σ w` (the activations
/// enter `vpmaddubsw` as the unsigned `y + 128`).
///
/// # Safety
/// One block readable at `xb`; the CPU supports AVX2.
#[inline(always)]
pub(super) unsafe fn tiled_block<B: IqSimd>(xb: *const u8) -> ([__m256i; 8], [__m256i; 8], i32) {
    // SAFETY: forwarded to the decoders (caller: a readable block, AVX2).
    unsafe {
        let ones = _mm256_set1_epi8(1);
        let high5 = _mm256_set1_epi8(-8);
        let ls = B::ls_bytes(xb);
        let mut w = [_mm256_setzero_si256(); 8];
        let mut sc = [_mm256_setzero_si256(); 8];
        let mut wsum = _mm256_setzero_si256();
        for k in 0..8 {
            let (a, b) = B::chunk(xb, k);
            w[k] = if B::GRID1 {
                let a8 = _mm256_and_si256(_mm256_slli_epi16::<3>(a), high5);
                _mm256_add_epi8(a8, _mm256_or_si256(b, ones))
            } else {
                _mm256_sub_epi8(_mm256_xor_si256(a, b), b)
            };
            sc[k] = chunk_scales(ls, k);
            let dot = _mm256_maddubs_epi16(ones, w[k]);
            wsum = _mm256_add_epi32(wsum, _mm256_madd_epi16(dot, sc[k]));
        }
        (w, sc, 128 * hsum_i32(wsum))
    }
}

/// `Σ ls·Σ (y + 128)·w` of a block decoded by [`tiled_block`] against the Q8_K codes at
/// `yq`, in eight i32 lanes (exact: pair sums of at most 255·62·2; IQ1 weights are at most
/// 9 in magnitude).
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

/// A grid i-quant · Q8_K in the order of ggml's tiled matmul (`tiled-kernel.cpp`'s AVX2
/// act-bias MAC): per block `s1 = Σ ls·Σ (y + 128)·w − 128·Σ ls·Σ w` (exact),
/// `r = d·FACTOR·f32(s1)`, `acc = fma(r, d_y, acc)`.
///
/// # Safety
/// See the module docs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn grid_tiled<B: IqSimd, const R: usize, const C: usize>(
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

/// Grid i-quant panels in ggml's tiled order (`tiled_avx2::PanelFn`'s contract): per
/// super-block, each row's block decoded once ([`tiled_block`]) and dotted with the columns
/// eight at a time, with [`grid_tiled`]'s bits for every element.
///
/// # Safety
/// As `tiled_avx2::PanelFn`.
#[inline(always)]
unsafe fn grid_panel<B: IqSimd>(nb: usize, x: &[*const u8], y: &[*const u8], out: &mut [f32]) {
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
                    // (A loop, not a closure: a closure would not get the AVX2 features of
                    // the kernel this body is inlined into.)
                    let mut s = [_mm256_setzero_si256(); GROUP];
                    for (c, sc_c) in s.iter_mut().enumerate() {
                        let yq = yb[GROUP * grp + c].add(offset_of!(BlockQ8K, qs));
                        *sc_c = biased_lanes(&w, &sc, yq);
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

/// Declares the panel entry points of one build: each a `#[target_feature]` function that
/// runs the calling module's `grid_panel::<Block>` (the AVX2 build here, the AVX-512 VNNI
/// build in `iquants512.rs`), with the features and the CPU its safety contract names.
macro_rules! iq_panels {
    (
        features = $features:literal, cpu = $cpu:literal;
        $($(#[doc = $doc:expr])+ $name:ident => $B:ty;)+
    ) => {
        $(
            $(#[doc = $doc])+
            ///
            /// # Safety
            #[doc = concat!("A CPU with ", $cpu, "; `nb` whole blocks readable at every row and")]
            /// column pointer; `1 ≤ y.len() ≤ PANEL_COLS`; `out` holds `x.len()·PANEL_COLS`
            /// values.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn $name(
                nb: usize,
                x: &[*const u8],
                y: &[*const u8],
                out: &mut [f32],
            ) {
                // SAFETY: forwarded from the caller.
                unsafe { grid_panel::<$B>(nb, x, y, out) }
            }
        )+
    };
}
pub(crate) use iq_panels;

iq_panels! {
    features = "avx2,fma,f16c", cpu = "AVX2, FMA and F16C";
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
    /// IQ1_S panels in ggml's tiled order.
    iq1_s_panel => BlockIQ1S;
    /// IQ1_M panels in ggml's tiled order.
    iq1_m_panel => BlockIQ1M;
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
    iq2_xxs_tiled => grid_tiled::<BlockIQ2XXS, R, C>;
    /// IQ2_XS · Q8_K in the order of ggml's tiled matmul.
    iq2_xs_tiled => grid_tiled::<BlockIQ2XS, R, C>;
    /// IQ2_S · Q8_K in the order of ggml's tiled matmul.
    iq2_s_tiled => grid_tiled::<BlockIQ2S, R, C>;
    /// IQ3_XXS · Q8_K in the order of ggml's tiled matmul.
    iq3_xxs_tiled => grid_tiled::<BlockIQ3XXS, R, C>;
    /// IQ3_S · Q8_K in the order of ggml's tiled matmul.
    iq3_s_tiled => grid_tiled::<BlockIQ3S, R, C>;
    /// IQ1_S · Q8_K in the order of ggml's tiled matmul.
    iq1_s_tiled => grid_tiled::<BlockIQ1S, R, C>;
    /// IQ1_M · Q8_K in the order of ggml's tiled matmul.
    iq1_m_tiled => grid_tiled::<BlockIQ1M, R, C>;
}
