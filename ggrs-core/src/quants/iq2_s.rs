//! IQ2_S, ggml's 2.56-bit grid i-quant: 256 values per 82-byte block.
//!
//! Layout: `d` (f16), `qs[64]` (bytes 0–31: the low 8 bits of a 10-bit `iq2s_grid` index per
//! group of 8 values; bytes 32–63: the 8 sign bits of each group), `qh[8]` (per 32 values,
//! bits `2l..2l + 2` are bits 8–9 of group `l`'s index), `scales[8]` (per 32 values, low
//! nibble for the first 16, high for the second). Value: `d·(0.5 + s)·0.25·grid·sign`. Its
//! dot product pairs with Q8_K.
//!
//! Writing it is ggml's `quantize_row_iq2_s_impl` ([`quantize_blocks`]), with importance
//! weights (`llama-quantize --imatrix`) or without (`quantize_row_iq2_s_ref`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use std::sync::OnceLock;

use super::iq_codes::{iq_block, IqCodes, SIGN_BYTES};
use super::iq_grids::IQ2S_GRID;
use super::iq_search::{
    fit_sub_block, grid8_search, split_signs, sub_block_scales, GridSearch, IQ2_BYTES,
    IQ2_MAX_LEVEL,
};
use super::k_quants::{sigma_weights, sum_x2, QK_K};
use super::{c_max, to_fp16};

/// One IQ2_S block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ2S {
    /// Scale.
    pub d: f16,
    /// Low index bits (32 bytes), then sign bits (32 bytes).
    pub qs: [u8; QK_K / 4],
    /// High index bits, 2 per group of 8 values.
    pub qh: [u8; QK_K / 32],
    /// 4-bit scales, two per 32 values.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIQ2S>() == 82);

impl BlockIQ2S {
    /// The 4-bit scale of group `g` of 16 values.
    fn nibble(&self, g: usize) -> u8 {
        (self.scales[g / 2] >> (4 * (g % 2))) & 15
    }
}

/// The decoded block.
fn codes(x: &BlockIQ2S) -> IqCodes {
    let mut c = IqCodes::default();
    for k in 0..QK_K / 8 {
        let hi = ((x.qh[k / 4] >> (2 * (k % 4))) & 3) as usize;
        c.mag[k] = IQ2S_GRID[x.qs[k] as usize | (hi << 8)];
        c.neg[k] = SIGN_BYTES[x.qs[QK_K / 8 + k] as usize];
    }
    for (g, ls) in c.ls.iter_mut().enumerate() {
        *ls = 2 * x.nibble(g) as i16 + 1;
    }
    c
}

/// ggml's dequantizer's scale of group `g` of 16 values.
fn db(x: &BlockIQ2S, d: f32, g: usize) -> f32 {
    d * (0.5 + x.nibble(g) as f32) * 0.25
}

iq_block!(BlockIQ2S, IQ2S, 0.125, codes, db, quantize_blocks, false);

/// The IQ2_S grid's search (ggml's `iq2xs_init_impl(GGML_TYPE_IQ2_S)`): levels 0–2 of
/// magnitudes 8, 25, 43; one neighbour distance.
fn search() -> &'static GridSearch<8> {
    static CELL: OnceLock<GridSearch<8>> = OnceLock::new();
    grid8_search(&CELL, &IQ2S_GRID, &IQ2_BYTES, 1)
}

/// ggml's `GROUP_MAX_EPS_IQ2_S`: sub-blocks whose largest magnitude is below it stay zero.
const GROUP_MAX_EPS: f32 = 1e-8;

/// ggml's `quantize_row_iq2_s_impl` on the blocks of `x` (`out.len()` of them), with
/// importance weights `qw` (`w = qw·√(σ² + x²)`) or without (`w = σ²/4 + x²`), `σ² =
/// 2·Σx²/256`. Sub-blocks of 16 values; every sign is stored (no folding).
pub(crate) fn quantize_blocks(x: &[f32], qw: Option<&[f32]>, out: &mut [BlockIQ2S]) {
    let grid = search();
    for (ibl, y) in out.iter_mut().enumerate() {
        *y = BlockIQ2S::zeroed();
        let xbl = &x[QK_K * ibl..QK_K * (ibl + 1)];
        let mut scales = [0f32; QK_K / 16];
        let mut max_scale = 0f32;
        let sigma2 = 2.0 * sum_x2(xbl) / QK_K as f32;
        for ib in 0..QK_K / 16 {
            let xb = &xbl[16 * ib..16 * ib + 16];
            let mut weight = [0f32; 16];
            match qw {
                Some(qw) => {
                    let w0 = QK_K * ibl + 16 * ib;
                    sigma_weights(&qw[w0..w0 + 16], xb, sigma2, &mut weight);
                }
                None => {
                    for (w, &v) in weight.iter_mut().zip(xb) {
                        *w = 0.25 * sigma2 + v * v;
                    }
                }
            }
            let mut xval = [0f32; 16];
            let mut signs = split_signs(xb, &mut xval);
            let trials = (9, 0.1);
            let eps = GROUP_MAX_EPS;
            let fit = fit_sub_block(grid, 2, IQ2_MAX_LEVEL, &xval, &weight, eps, trials, false);
            let Some(fit) = fit else {
                continue;
            };
            if fit.flipped {
                for s in &mut signs {
                    *s = !*s;
                }
            }
            for (k, (&gi, &s)) in fit.index.iter().zip(&signs).take(2).enumerate() {
                let i8 = 2 * ib + k;
                y.qs[i8] = gi as u8;
                y.qh[i8 / 4] |= ((gi >> 8) as u8) << (2 * (i8 % 4));
                y.qs[QK_K / 8 + i8] = s;
            }
            scales[ib] = fit.scale;
            max_scale = c_max(max_scale, fit.scale);
        }
        let Some((d, ls)) = sub_block_scales(&scales, max_scale, 16) else {
            continue;
        };
        // ggml's fudge factor on the stored scale only.
        y.d = to_fp16(d * 0.9875);
        for (ib, l) in ls.into_iter().enumerate() {
            y.scales[ib / 2] |= l << (4 * (ib % 2));
        }
    }
}
