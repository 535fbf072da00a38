//! IQ3_S, ggml's 3.44-bit grid i-quant: 256 values per 110-byte block.
//!
//! Layout: `d` (f16), `qs[64]` (the low 8 bits of a 9-bit `iq3s_grid` index per group of 4
//! values), `qh[8]` (per 32 values, bit `k` is bit 8 of group `k`'s index), `signs[32]` (one
//! bit per value), `scales[4]` (per 64 values, low nibble for the first 32, high for the
//! second). Value: `d·(1 + 2s)·grid·sign`. Its dot product pairs with Q8_K.
//!
//! Writing it is ggml's `quantize_row_iq3_s_impl` ([`quantize_blocks`]), with importance
//! weights (`llama-quantize --imatrix`) or without (`quantize_row_iq3_s_ref`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use std::sync::OnceLock;

use super::iq_codes::{iq_block, IqCodes, SIGN_BYTES};
use super::iq_grids::IQ3S_GRID;
use super::iq_search::{
    fit_sub_block, grid_search, split_signs, sub_block_scales, sub_block_weights, GridSearch,
};
use super::k_quants::{sum_x2, QK_K};
use super::{c_max, to_fp16};

/// One IQ3_S block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ3S {
    /// Scale.
    pub d: f16,
    /// Low index bits, one byte per group of 4 values.
    pub qs: [u8; QK_K / 4],
    /// High index bits, one per group of 4 values.
    pub qh: [u8; QK_K / 32],
    /// Sign bits, one per value.
    pub signs: [u8; QK_K / 8],
    /// 4-bit scales, two per 64 values.
    pub scales: [u8; QK_K / 64],
}

const _: () = assert!(std::mem::size_of::<BlockIQ3S>() == 110);

impl BlockIQ3S {
    /// The 4-bit scale of sub-block `ib` (32 values).
    fn nibble(&self, ib: usize) -> u8 {
        (self.scales[ib / 2] >> (4 * (ib % 2))) & 15
    }

    /// The grid word of group `k` of 4 values.
    fn grid(&self, k: usize) -> u64 {
        let hi = ((self.qh[k / 8] >> (k % 8)) & 1) as usize;
        IQ3S_GRID[self.qs[k] as usize | (hi << 8)] as u64
    }
}

/// The decoded block.
fn codes(x: &BlockIQ3S) -> IqCodes {
    let mut c = IqCodes::default();
    for k in 0..QK_K / 8 {
        c.mag[k] = x.grid(2 * k) | (x.grid(2 * k + 1) << 32);
        c.neg[k] = SIGN_BYTES[x.signs[k] as usize];
    }
    for (g, ls) in c.ls.iter_mut().enumerate() {
        *ls = 2 * x.nibble(g / 2) as i16 + 1;
    }
    c
}

/// ggml's dequantizer's scale of group `g` of 16 values.
fn db(x: &BlockIQ3S, d: f32, g: usize) -> f32 {
    d * (1 + 2 * x.nibble(g / 2) as i32) as f32
}

iq_block!(BlockIQ3S, IQ3S, 1.0, codes, db, quantize_blocks, false);

/// The IQ3_S grid's search (ggml's `iq3xs_init_impl(512)`): levels 0–7 of magnitudes
/// 1, 3, …, 15; three neighbour distances.
fn search() -> &'static GridSearch<4> {
    static CELL: OnceLock<GridSearch<4>> = OnceLock::new();
    let bytes = [1, 3, 5, 7, 9, 11, 13, 15];
    grid_search(&CELL, |k| IQ3S_GRID[k] as u64, 512, &bytes, 3, 4096, 3)
}

/// The largest level (ggml's `kMaxQ − 1`).
const MAX_LEVEL: i32 = 7;

/// ggml's `quantize_row_iq3_s_impl(32, …)` on the blocks of `x` (`out.len()` of them), with
/// importance weights `qw` (`w = qw·√(σ² + x²)`, `σ² = 2·Σx²/256`) or without (`w = x²`).
/// Every sign is stored (no folding).
pub(crate) fn quantize_blocks(x: &[f32], qw: Option<&[f32]>, out: &mut [BlockIQ3S]) {
    let grid = search();
    for (ibl, y) in out.iter_mut().enumerate() {
        *y = BlockIQ3S::zeroed();
        let xbl = &x[QK_K * ibl..QK_K * (ibl + 1)];
        let mut scales = [0f32; QK_K / 32];
        let mut max_scale = 0f32;
        let sigma2 = 2.0 * sum_x2(xbl) / QK_K as f32;
        // Where the next sub-block's indices and signs go: ggml advances its pointers only
        // past sub-blocks that are not all zeros, so those after one move down (their high
        // index bits stay in place).
        let mut at = 0;
        for ib in 0..QK_K / 32 {
            let xb = &xbl[32 * ib..32 * ib + 32];
            let mut weight = [0f32; 32];
            let w0 = QK_K * ibl + 32 * ib;
            sub_block_weights(qw.map(|q| &q[w0..w0 + 32]), xb, sigma2, &mut weight);
            let mut xval = [0f32; 32];
            let mut signs = split_signs(xb, &mut xval);
            // ggml skips only all-zero sub-blocks here (`!max`).
            let fit = fit_sub_block(grid, 3, MAX_LEVEL, &xval, &weight, 0.0, (9, 0.2), true);
            let Some(fit) = fit else {
                continue;
            };
            if fit.flipped {
                for s in &mut signs {
                    *s = !*s;
                }
            }
            for (k, &gi) in fit.index.iter().enumerate() {
                y.qs[8 * at + k] = gi as u8;
                y.qh[ib] |= ((gi >> 8) as u8) << k;
            }
            let scale = fit.scale;
            y.signs[4 * at..4 * at + 4].copy_from_slice(&signs);
            at += 1;
            scales[ib] = scale;
            max_scale = c_max(max_scale, scale);
        }
        let Some((d, ls)) = sub_block_scales(&scales, max_scale, 16) else {
            continue;
        };
        // ggml's fudge factor on the stored scale only.
        y.d = to_fp16(d * 1.033);
        for (ib, l) in ls.into_iter().enumerate() {
            y.scales[ib / 2] |= l << (4 * (ib % 2));
        }
    }
}
