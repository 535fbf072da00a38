//! The k-quant dot product in the order of ggml's *tiled* matmul, which llama.cpp's CPU
//! backend runs for a k-quant weight times eight activation columns or more (prompts), in
//! place of the per-element `ggml_vec_dot_*_q8_K` it uses below eight columns (decoding).
//! Weights it keeps in a repacked layout (Q4_K with a row count that is a multiple of 8 on
//! AVX2 machines) take the repacked kernels instead.
//!
//! Per super-block `b` of a row the tiled kernel reduces the integer products to two exact
//! integers, then does its f32 work in a fixed order:
//!
//! ```text
//! s1 = Σ_j scale_j · Σ_{i in sub-block j} code_i · y_i      (codes with their offset removed)
//! s2 = Σ_j min_j · bsum_j                                    (types with minimums only)
//! r  = d · f32(s1)            then, with minimums,  r = fma(−dmin, f32(s2), r)
//! acc = fma(r, d_y, acc)
//! ```
//!
//! starting from `acc = 0` and taking the super-blocks in order. `d`, `dmin` are the weight
//! block's f16 scales widened to f32, `d_y` the Q8_K block's scale. This is the order of
//! ggml's AVX2 microkernel, which the reference outputs in `shared/reference` follow (the
//! Q6_K recipe's logits equal them to the printed digits with it, and differ with the
//! AVX-512 VNNI microkernel's, which rounds `r · d_y` before adding it).

use super::q2_k::BlockQ2K;
use super::q3_k::BlockQ3K;
use super::q4_k::BlockQ4K;
use super::q5_k::BlockQ5K;
use super::q6_k::BlockQ6K;
use super::q8_k::BlockQ8K;
use super::{get_scale_min_k4, q3_k_scale, QK_K};
use crate::quants::iq4::{BlockIQ4XS, KVALUES_IQ4NL};
use crate::quants::{fp16, BlockQuant};

/// Column counts from which llama.cpp's CPU backend multiplies a k-quant weight with its
/// tiled kernel (the order of this module) instead of one `ggml_vec_dot` per element.
pub const GGML_TILED_MIN_COLS: usize = 8;

/// What one weight super-block contributes against one Q8_K block, before any rounding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TiledTerms {
    /// The block's scale, widened to f32.
    pub d: f32,
    /// The block's minimum scale (0 for types without minimums).
    pub dmin: f32,
    /// `Σ_j scale_j · Σ code·y`: the scaled integer dot product.
    pub s1: i32,
    /// `Σ_j min_j · Σ y` over the sub-blocks (0 for types without minimums).
    pub s2: i32,
}

/// A k-quant block type as ggml's tiled matmul sees it.
pub(crate) trait TiledBlock: BlockQuant<VecDot = BlockQ8K> {
    /// Whether the type has per-sub-block minimums (`r` gets the `dmin` term).
    const HAS_MIN: bool;
    /// The block's terms against the activation block `y`.
    fn terms(&self, y: &BlockQ8K) -> TiledTerms;
}

/// `Σ_i scale16[i / 16] · codes[i] · y[i]`, exact.
#[inline(always)]
fn scaled_dot(codes: &[i8; QK_K], y: &[i8; QK_K], scale16: &[i32; 16]) -> i32 {
    let mut s = 0i32;
    for (j, (c, q)) in codes.chunks_exact(16).zip(y.chunks_exact(16)).enumerate() {
        let raw: i32 = c.iter().zip(q).map(|(&a, &b)| a as i32 * b as i32).sum();
        s += scale16[j] * raw;
    }
    s
}

/// `Σ_j min16[j] · bsums[j]`, exact.
#[inline(always)]
fn min_dot(min16: &[i32; 16], bsums: &[i16; 16]) -> i32 {
    min16.iter().zip(bsums).map(|(&m, &b)| m * b as i32).sum()
}

/// Scales and minimums of the eight 32-value sub-blocks of Q4_K / Q5_K, per 16 values.
fn scales_mins_k4(packed: &[u8; super::K_SCALE_SIZE]) -> ([i32; 16], [i32; 16]) {
    let (mut sc, mut mn) = ([0i32; 16], [0i32; 16]);
    for j in 0..8 {
        let (s, m) = get_scale_min_k4(j, packed);
        sc[2 * j..2 * j + 2].fill(s as i32);
        mn[2 * j..2 * j + 2].fill(m as i32);
    }
    (sc, mn)
}

impl TiledBlock for BlockQ2K {
    const HAS_MIN: bool = true;
    fn terms(&self, y: &BlockQ8K) -> TiledTerms {
        // Value 128h + 32s + 16p + l is bits 2s of byte 32h + 16p + l; sub-block j = value / 16
        // has its scale in the low nibble of byte j, its minimum in the high one.
        let mut codes = [0i8; QK_K];
        for (v, c) in codes.iter_mut().enumerate() {
            let (h, s, p, l) = (v / 128, (v % 128) / 32, (v % 32) / 16, v % 16);
            *c = ((self.qs[32 * h + 16 * p + l] >> (2 * s)) & 3) as i8;
        }
        let sc = self.scales.map(|b| (b & 0x0F) as i32);
        let mn = self.scales.map(|b| (b >> 4) as i32);
        TiledTerms {
            d: fp16(self.d),
            dmin: fp16(self.dmin),
            s1: scaled_dot(&codes, &y.qs, &sc),
            s2: min_dot(&mn, &y.bsums),
        }
    }
}

impl TiledBlock for BlockQ3K {
    const HAS_MIN: bool = false;
    fn terms(&self, y: &BlockQ8K) -> TiledTerms {
        let sc: [i32; 16] = std::array::from_fn(|j| q3_k_scale(&self.scales, j));
        TiledTerms {
            d: fp16(self.d),
            dmin: 0.0,
            s1: scaled_dot(&self.codes(), &y.qs, &sc),
            s2: 0,
        }
    }
}

/// The terms of a Q4_K or Q5_K super-block (the same packed scales and minimums; only the
/// codes differ) against `y`.
fn k4_terms(
    d: half::f16,
    dmin: half::f16,
    scales: &[u8; super::K_SCALE_SIZE],
    codes: &[i8; QK_K],
    y: &BlockQ8K,
) -> TiledTerms {
    let (sc, mn) = scales_mins_k4(scales);
    TiledTerms {
        d: fp16(d),
        dmin: fp16(dmin),
        s1: scaled_dot(codes, &y.qs, &sc),
        s2: min_dot(&mn, &y.bsums),
    }
}

impl TiledBlock for BlockQ4K {
    const HAS_MIN: bool = true;
    fn terms(&self, y: &BlockQ8K) -> TiledTerms {
        k4_terms(self.d, self.dmin, &self.scales, &self.codes(), y)
    }
}

impl TiledBlock for BlockQ5K {
    const HAS_MIN: bool = true;
    fn terms(&self, y: &BlockQ8K) -> TiledTerms {
        k4_terms(self.d, self.dmin, &self.scales, &self.codes(), y)
    }
}

impl TiledBlock for BlockIQ4XS {
    const HAS_MIN: bool = false;
    fn terms(&self, y: &BlockQ8K) -> TiledTerms {
        // Sub-block `ib` (32 values): value j from the low nibble of byte 16·ib + j, value
        // j + 16 from the high nibble; each a level of the IQ4_NL table.
        let mut codes = [0i8; QK_K];
        for (ib, c) in codes.chunks_exact_mut(32).enumerate() {
            for j in 0..16 {
                let b = self.qs[16 * ib + j];
                c[j] = KVALUES_IQ4NL[(b & 0x0F) as usize];
                c[j + 16] = KVALUES_IQ4NL[(b >> 4) as usize];
            }
        }
        let sc: [i32; 16] = std::array::from_fn(|j| self.sub_scale(j / 2) - 32);
        TiledTerms {
            d: fp16(self.d),
            dmin: 0.0,
            s1: scaled_dot(&codes, &y.qs, &sc),
            s2: 0,
        }
    }
}

impl TiledBlock for BlockQ6K {
    const HAS_MIN: bool = false;
    fn terms(&self, y: &BlockQ8K) -> TiledTerms {
        let sc = self.scales.map(|s| s as i32);
        TiledTerms {
            d: fp16(self.d),
            dmin: 0.0,
            s1: scaled_dot(&self.codes(), &y.qs, &sc),
            s2: 0,
        }
    }
}

/// One row of `B` (`n` values, a multiple of 256) · one Q8_K row, in the tiled order (see the
/// module docs). Rows shorter than `n` count only their whole blocks.
pub(crate) fn dot_tiled<B: TiledBlock>(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = 0f32;
    let blocks = a
        .chunks_exact(B::BYTES)
        .zip(b.chunks_exact(BlockQ8K::BYTES))
        .take(n / QK_K);
    for (xa, yb) in blocks {
        let x: B = bytemuck::pod_read_unaligned(xa);
        let y: BlockQ8K = bytemuck::pod_read_unaligned(yb);
        let t = x.terms(&y);
        let mut r = t.d * t.s1 as f32;
        if B::HAS_MIN {
            r = (-t.dmin).mul_add(t.s2 as f32, r);
        }
        acc = r.mul_add(y.d, acc);
    }
    acc
}

/// Eight exact integer lanes of one super-block as ggml's AVX2 `ggml_vec_dot_q*_K_q8_K`
/// build them: lane `l` sums `scale16[p / 16] · code_p · y_p` over the values `p` with
/// `(p mod 32) / 4 = l`.
#[inline(always)]
fn vec_lanes(codes: &[i8; QK_K], y: &[i8; QK_K], scale16: &[i32; 16]) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for p in 0..QK_K {
        lanes[(p % 32) / 4] += scale16[p / 16] * codes[p] as i32 * y[p] as i32;
    }
    lanes
}

/// ggml's `hsum_float_8`: `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`.
#[inline(always)]
fn hsum8(acc: &[f32; 8]) -> f32 {
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

/// One Q5_K row · one Q8_K row (`n` values) in the order of ggml's AVX2
/// `ggml_vec_dot_q5_K_q8_K`, which llama.cpp runs below eight columns: per super-block the
/// eight exact integer lanes of [`vec_lanes`]; `lane = fma(d·d_y, lane, lane_acc)`; the
/// minimum terms `summs = fma(−d_y·dmin, Σ_j min_j·(bsum_2j + bsum_2j+1), summs)`; the
/// result `hsum8(lanes) + summs`.
pub(crate) fn dot_q5_k_vec(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    let blocks = a
        .chunks_exact(BlockQ5K::BYTES)
        .zip(b.chunks_exact(BlockQ8K::BYTES))
        .take(n / QK_K);
    for (xa, yb) in blocks {
        let x: BlockQ5K = bytemuck::pod_read_unaligned(xa);
        let y: BlockQ8K = bytemuck::pod_read_unaligned(yb);
        let d = y.d * fp16(x.d);
        let dmin = -y.d * fp16(x.dmin);
        let (sc, mn) = scales_mins_k4(&x.scales);
        let mins: i32 = (0..8)
            .map(|j| mn[2 * j] * (y.bsums[2 * j] as i32 + y.bsums[2 * j + 1] as i32))
            .sum();
        summs = dmin.mul_add(mins as f32, summs);
        let lanes = vec_lanes(&x.codes(), &y.qs, &sc);
        for (l, &v) in acc.iter_mut().zip(&lanes) {
            *l = d.mul_add(v as f32, *l);
        }
    }
    hsum8(&acc) + summs
}

/// One Q3_K row · one Q8_K row (`n` values) in the order of ggml's AVX2
/// `ggml_vec_dot_q3_K_q8_K`, which llama.cpp runs below eight columns: per super-block the
/// eight exact integer lanes of [`vec_lanes`] over the signed codes (−4..=3) and the signed
/// 6-bit scales; `lane = fma(d_y·d, lane, lane_acc)`; the result `hsum8(lanes)`.
pub(crate) fn dot_q3_k_vec(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let blocks = a
        .chunks_exact(BlockQ3K::BYTES)
        .zip(b.chunks_exact(BlockQ8K::BYTES))
        .take(n / QK_K);
    for (xa, yb) in blocks {
        let x: BlockQ3K = bytemuck::pod_read_unaligned(xa);
        let y: BlockQ8K = bytemuck::pod_read_unaligned(yb);
        let d = y.d * fp16(x.d);
        let sc: [i32; 16] = std::array::from_fn(|j| q3_k_scale(&x.scales, j));
        let lanes = vec_lanes(&x.codes(), &y.qs, &sc);
        for (l, &v) in acc.iter_mut().zip(&lanes) {
            *l = d.mul_add(v as f32, *l);
        }
    }
    hsum8(&acc)
}

/// One Q6_K row · one Q8_K row (`n` values) in the order of ggml's AVX2
/// `ggml_vec_dot_q6_K_q8_K`, which llama.cpp runs below eight columns: per super-block eight
/// exact integer lanes of the *unsigned* codes (0..=63), lane `l` summing `sc_j · u · y` over
/// the values `p` with `(p mod 32) / 4 = l`, minus `32 · (sc_2l · bsum_2l + sc_2l+1 ·
/// bsum_2l+1)`; `lane = fma(d_y·d, lane, lane_acc)`; the result `hsum8(lanes)`.
pub(crate) fn dot_q6_k_vec(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let blocks = a
        .chunks_exact(BlockQ6K::BYTES)
        .zip(b.chunks_exact(BlockQ8K::BYTES))
        .take(n / QK_K);
    for (xa, yb) in blocks {
        let x: BlockQ6K = bytemuck::pod_read_unaligned(xa);
        let y: BlockQ8K = bytemuck::pod_read_unaligned(yb);
        let d = y.d * fp16(x.d);
        let sc = x.scales.map(|s| s as i32);
        let unsigned = x.codes().map(|c| c + 32);
        let mut lanes = vec_lanes(&unsigned, &y.qs, &sc);
        for (l, lane) in lanes.iter_mut().enumerate() {
            let (j0, j1) = (2 * l, 2 * l + 1);
            *lane -= 32 * (sc[j0] * y.bsums[j0] as i32 + sc[j1] * y.bsums[j1] as i32);
        }
        for (l, &v) in acc.iter_mut().zip(&lanes) {
            *l = d.mul_add(v as f32, *l);
        }
    }
    hsum8(&acc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quants::k_quants::QK_K;

    /// The tiled sums are the exact value of the dequantized dot product: d·s1 − dmin·s2
    /// equals Σ w_i·q_i computed in f64 from the dequantized weights, for every type.
    fn check<B: TiledBlock>() {
        let mut seed = 7u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        for _ in 0..20 {
            let x: Vec<f32> = (0..QK_K).map(|_| rnd() * 3.0).collect();
            let w = B::quantize(&x);
            let yv: Vec<f32> = (0..QK_K).map(|_| rnd()).collect();
            let y = BlockQ8K::quantize(&yv);
            let mut wd = vec![0f32; QK_K];
            w.dequantize(&mut wd);
            let terms = wd.iter().zip(&y.qs).map(|(&a, &q)| a as f64 * q as f64);
            let exact: f64 = terms.clone().sum();
            let norm: f64 = terms.map(f64::abs).sum();
            let t = w.terms(&y);
            let ours = t.d as f64 * t.s1 as f64 - t.dmin as f64 * t.s2 as f64;
            assert!(
                (ours - exact).abs() <= 1e-6 * norm,
                "{}: {ours} vs {exact}",
                B::DTYPE
            );
        }
    }

    #[test]
    fn tiled_terms_are_the_dequantized_dot_product() {
        check::<BlockQ2K>();
        check::<BlockQ3K>();
        check::<BlockQ4K>();
        check::<BlockQ5K>();
        check::<BlockQ6K>();
        check::<BlockIQ4XS>();
    }
}
