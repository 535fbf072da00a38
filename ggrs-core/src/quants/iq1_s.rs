//! IQ1_S, ggml's 1.56-bit grid i-quant: 256 values per 50-byte block.
//!
//! Layout: `d` (f16), `qs[32]` (the low 8 bits of an 11-bit `iq1s_grid` index per group of 8
//! values), `qh[8]` (`u16` per 32 values: bits `3l..3l + 3` are bits 8–10 of group `l`'s
//! index, bits 12–14 the scale `s`, bit 15 the sign of the shift). Value:
//! `d·(2s + 1)·(grid ± 1/8)` with grid values −1, 0, 1. Its dot product pairs with Q8_K: the
//! shift's part is read from Q8_K's `bsums`.
//!
//! Writing it is ggml's `quantize_row_iq1_s_impl` ([`quantize_blocks`]), which needs
//! importance weights (an imatrix): [`crate::quants::quantize_row`] refuses it without.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::iq1_search::{ascending, fit_to_grid, split_levels, X_M, X_P};
use super::iq_codes::{iq1_block, iq1_grid_sum, iq1_x86_lanes, Iq1Block, Iq1Codes, SIGN_BYTES};
use super::iq_grids::IQ1S_GRID;
use super::iq_search::sub_block_scales;
use super::k_quants::{sigma_weights, sum_x2, QK_K};
use super::{c_max, fp16, to_fp16, BlockQ8K};
use crate::kernels::ggml_arith::lanes::hsum8;

/// One IQ1_S block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ1S {
    /// Scale.
    pub d: f16,
    /// Low index bits, one byte per group of 8 values.
    pub qs: [u8; QK_K / 8],
    /// High index bits, scale and shift sign per 32 values.
    pub qh: [u16; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIQ1S>() == 50);

impl Iq1Block for BlockIQ1S {
    fn codes(&self) -> Iq1Codes {
        let mut c = Iq1Codes {
            d: fp16(self.d),
            ..Default::default()
        };
        for (ib, &qh) in self.qh.iter().enumerate() {
            for l in 0..4 {
                let idx = self.qs[4 * ib + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
                c.grid[4 * ib + l] = IQ1S_GRID[idx];
                c.delta_neg[4 * ib + l] = SIGN_BYTES[if qh & 0x8000 != 0 { 255 } else { 0 }];
            }
            let ls = 2 * ((qh >> 12) & 7) as i16 + 1;
            c.ls[2 * ib] = ls;
            c.ls[2 * ib + 1] = ls;
        }
        c
    }
}

/// `Σ ls·(±1)·(bsums[2ib] + bsums[2ib + 1])` over the sub-blocks: the shift part of a
/// block's dot product with a Q8_K block of sums `bsums` (exact, in every order).
pub(crate) fn iq1s_shift_sum(c: &Iq1Codes, bsums: &[i16; QK_K / 16]) -> i32 {
    (0..QK_K / 32)
        .map(|ib| {
            let s = if c.delta_neg[4 * ib] != 0 { -1 } else { 1 };
            (bsums[2 * ib] as i32 + bsums[2 * ib + 1] as i32) * s * c.ls[2 * ib] as i32
        })
        .sum()
}

/// `ggml_vec_dot_iq1_s_q8_K_generic`: per block
/// `sumf = fma(d_x·d_y, sumi + 1/8·sumi1, sumf)`.
fn dot_generic(a: &[BlockIQ1S], b: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in a.iter().zip(b) {
        let c = x.codes();
        let t = iq1_grid_sum(&c, y) as f32 + 0.125 * iq1s_shift_sum(&c, &y.bsums) as f32;
        sumf = (c.d * y.d).mul_add(t, sumf);
    }
    sumf
}

iq1_block!(
    BlockIQ1S,
    IQ1S,
    dot_iq1_s_x86,
    dot_generic,
    quantize_blocks,
    true
);

/// Values per sub-block (ggml's `IQ1S_BLOCK_SIZE`).
const BS: usize = 32;

/// ggml's `GROUP_MAX_EPS_IQ1_S`: sub-blocks whose largest magnitude is below it stay zero.
const GROUP_MAX_EPS: f32 = 1e-12;

/// ggml's `quantize_row_iq1_s_impl` on the blocks of `x` (`out.len()` of them) with
/// importance weights `qw` (`w = qw·√(σ² + x²)`, `σ² = 2·Σx²/256`; unit `qw` when `None`,
/// which ggml does not offer: the row functions refuse this type without weights).
///
/// Per sub-block of 32 values, the levels −1, 0, 1 (shifted by ±1/8) that maximise
/// `(Σ w·q·x)² / Σ w·q²` are found exactly: the values sorted, every pair of split points
/// of the sorted order tried with both shifts from prefix sums; then the groups of 8 are
/// fitted to the grid.
pub(crate) fn quantize_blocks(x: &[f32], qw: Option<&[f32]>, out: &mut [BlockIQ1S]) {
    let ones = [1f32; QK_K];
    for (ibl, y) in out.iter_mut().enumerate() {
        *y = BlockIQ1S::zeroed();
        let xbl = &x[QK_K * ibl..QK_K * (ibl + 1)];
        let qwb = qw.map_or(&ones[..], |w| &w[QK_K * ibl..QK_K * (ibl + 1)]);
        let mut scales = [0f32; QK_K / BS];
        let mut shifts = [1i8; QK_K / BS];
        let mut max_scale = 0f32;
        let sigma2 = 2.0 * sum_x2(xbl) / QK_K as f32;
        for ib in 0..QK_K / BS {
            let xb = &xbl[BS * ib..BS * (ib + 1)];
            let mut weight = [0f32; BS];
            sigma_weights(&qwb[BS * ib..BS * (ib + 1)], xb, sigma2, &mut weight);
            let max = xb[1..].iter().fold(xb[0].abs(), |m, &v| c_max(m, v.abs()));
            if max < GROUP_MAX_EPS {
                continue;
            }
            let mut order = [0usize; BS];
            ascending(xb, &mut order);
            let mut sumx = [0f32; BS + 1];
            let mut sumw = [0f32; BS + 1];
            for (j, &i) in order.iter().enumerate() {
                sumx[j + 1] = sumx[j] + weight[i] * xb[i];
                sumw[j + 1] = sumw[j] + weight[i];
            }
            let mut best_score = -f32::MAX;
            let mut scale = max;
            let mut best: Option<((usize, usize), i8)> = None;
            for i1 in 0..=BS {
                for i2 in i1..=BS {
                    for (v, shift) in [(&X_P, 1), (&X_M, -1)] {
                        let sumqx = (sumx[i1] - sumx[0]) * v[0]
                            + (sumx[i2] - sumx[i1]) * v[1]
                            + (sumx[BS] - sumx[i2]) * v[2];
                        let sumq2 = (sumw[i1] - sumw[0]) * v[0] * v[0]
                            + (sumw[i2] - sumw[i1]) * v[1] * v[1]
                            + (sumw[BS] - sumw[i2]) * v[2] * v[2];
                        if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                            scale = sumqx / sumq2;
                            best_score = scale * sumqx;
                            best = Some(((i1, i2), shift));
                        }
                    }
                }
            }
            let Some((split, mut shift)) = best else {
                continue;
            };
            let mut l = [0i8; BS];
            let (scale, flipped) = split_levels(&order, split, scale, &mut l);
            if flipped {
                shift = -shift;
            }
            let xx = if shift == 1 { &X_P } else { &X_M };
            let mut index = [0u16; BS / 8];
            let scale = fit_to_grid(xb, &weight, |_| xx, scale, &mut l, &mut index);
            let mut h = 0u16;
            for (k, &ix) in index.iter().enumerate() {
                y.qs[(BS / 8) * ib + k] = ix as u8;
                h |= (ix >> 8) << (3 * k);
            }
            y.qh[ib] = h;
            scales[ib] = scale;
            shifts[ib] = shift;
            max_scale = c_max(max_scale, scale);
        }
        let Some((d, ls)) = sub_block_scales(&scales, max_scale, 8) else {
            continue;
        };
        // ggml's fudge factor on the stored scale only.
        y.d = to_fp16(d * 1.125);
        for (ib, (l, &shift)) in ls.into_iter().zip(&shifts).enumerate() {
            let sign = if shift == -1 { 8 } else { 0 };
            y.qh[ib] |= ((l | sign) as u16) << 12;
        }
    }
}

/// IQ1_S · Q8_K in the order of ggml's AVX2 `ggml_vec_dot_iq1_s_q8_K` (portable; the AVX2
/// build in `kernels::x86::iquants` gives the same bits): the grid part in eight i32 lanes
/// added per block as `fma(d, lane, acc)`, the shift part in one f32 as
/// `accum1 = fma(d, sumi1, accum1)` (GCC fuses it), and at the end
/// `hsum_float_8(acc) + 1/8·accum1`.
pub(crate) fn dot_iq1_s_x86(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let Some((xs, ys)) = super::row_blocks::<BlockIQ1S>(n, a, b) else {
        return 0.0;
    };
    let mut acc = [0f32; 8];
    let mut accum1 = 0f32;
    for (x, y) in xs.iter().zip(ys.iter()) {
        let c = x.codes();
        let d = y.d * c.d;
        for (a, l) in acc.iter_mut().zip(iq1_x86_lanes(&c, y)) {
            *a = d.mul_add(l as f32, *a);
        }
        accum1 = d.mul_add(iq1s_shift_sum(&c, &y.bsums) as f32, accum1);
    }
    hsum8(&acc) + 0.125 * accum1
}
