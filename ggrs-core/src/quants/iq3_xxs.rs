//! IQ3_XXS, ggml's 3.06-bit grid i-quant: 256 values per 98-byte block.
//!
//! Layout: `d` (f16), `qs[96]`: bytes 0–63 index `iq3xxs_grid` (4 magnitudes each, for
//! values `4k..4k + 4`), bytes 64–95 eight `u32`, one per 32 values, holding four 7-bit sign
//! indices (`ksigns_iq2xs`, bits `7l..7l + 7` for values `8l..8l + 8`) and the 4-bit scale
//! `s` in bits 28–31. Value: `d·(0.5 + s)·0.5·grid·sign`. Its dot product pairs with Q8_K.
//!
//! Writing it is ggml's `quantize_row_iq3_xxs_impl` ([`quantize_blocks`]), with importance
//! weights (`llama-quantize --imatrix`) or without (`quantize_row_iq3_xxs_ref`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use std::sync::OnceLock;

use super::iq_codes::{iq_block, ksigns, IqCodes, SIGN_BYTES};
use super::iq_grids::IQ3XXS_GRID;
use super::iq_search::{
    fit_sub_block, fold_signs, grid_search, sub_block_scales, sub_block_weights, GridSearch,
};
use super::k_quants::{sum_x2, QK_K};
use super::{c_max, to_fp16};

/// One IQ3_XXS block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ3XXS {
    /// Scale.
    pub d: f16,
    /// Grid indices (64 bytes), then sign-and-scale words (32 bytes).
    pub qs: [u8; 3 * QK_K / 8],
}

const _: () = assert!(std::mem::size_of::<BlockIQ3XXS>() == 98);

impl BlockIQ3XXS {
    /// The sign-and-scale word of sub-block `ib` (32 values).
    fn aux(&self, ib: usize) -> u32 {
        let b = &self.qs[QK_K / 4 + 4 * ib..QK_K / 4 + 4 * ib + 4];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

/// The decoded block.
fn codes(x: &BlockIQ3XXS) -> IqCodes {
    let mut c = IqCodes::default();
    for k in 0..QK_K / 8 {
        let lo = IQ3XXS_GRID[x.qs[2 * k] as usize] as u64;
        let hi = IQ3XXS_GRID[x.qs[2 * k + 1] as usize] as u64;
        c.mag[k] = lo | (hi << 32);
    }
    for ib in 0..QK_K / 32 {
        let aux = x.aux(ib);
        for l in 0..4 {
            c.neg[4 * ib + l] = SIGN_BYTES[ksigns(aux >> (7 * l)) as usize];
        }
        let ls = 2 * (aux >> 28) as i16 + 1;
        c.ls[2 * ib] = ls;
        c.ls[2 * ib + 1] = ls;
    }
    c
}

/// ggml's dequantizer's scale of group `g` of 16 values.
fn db(x: &BlockIQ3XXS, d: f32, g: usize) -> f32 {
    d * (0.5 + (x.aux(g / 2) >> 28) as f32) * 0.5
}

iq_block!(BlockIQ3XXS, IQ3XXS, 0.25, codes, db, quantize_blocks, false);

/// The IQ3_XXS grid's search (ggml's `iq3xs_init_impl(256)`): levels 0–7 of magnitudes
/// 4, 12, …, 52, 62; two neighbour distances.
fn search() -> &'static GridSearch<4> {
    static CELL: OnceLock<GridSearch<4>> = OnceLock::new();
    let bytes = [0x04, 0x0c, 0x14, 0x1c, 0x24, 0x2c, 0x34, 0x3e];
    grid_search(&CELL, |k| IQ3XXS_GRID[k] as u64, 256, &bytes, 3, 4096, 2)
}

/// The largest level (ggml's `kMaxQ − 1`).
const MAX_LEVEL: i32 = 7;

/// ggml's `quantize_row_iq3_xxs_impl(256, …)` on the blocks of `x` (`out.len()` of them),
/// with importance weights `qw` (`w = qw·√(σ² + x²)`, `σ² = 2·Σx²/256`) or without
/// (`w = x²`).
pub(crate) fn quantize_blocks(x: &[f32], qw: Option<&[f32]>, out: &mut [BlockIQ3XXS]) {
    let grid = search();
    for (ibl, y) in out.iter_mut().enumerate() {
        let xbl = &x[QK_K * ibl..QK_K * (ibl + 1)];
        // Grid indices (64 bytes), then the sign-and-scale words.
        let mut q3 = [0u8; QK_K / 4];
        let mut words = [0u32; QK_K / 32];
        let mut scales = [0f32; QK_K / 32];
        let mut max_scale = 0f32;
        let sigma2 = 2.0 * sum_x2(xbl) / QK_K as f32;
        for ib in 0..QK_K / 32 {
            let xb = &xbl[32 * ib..32 * ib + 32];
            let mut weight = [0f32; 32];
            let w0 = QK_K * ibl + 32 * ib;
            sub_block_weights(qw.map(|q| &q[w0..w0 + 32]), xb, sigma2, &mut weight);
            let mut xval = [0f32; 32];
            let mut signs = fold_signs(xb, &weight, &mut xval);
            let trials = (15, 0.2);
            let fit = fit_sub_block(grid, 3, MAX_LEVEL, &xval, &weight, 1e-8, trials, false);
            let Some(fit) = fit else {
                continue;
            };
            if fit.flipped {
                for s in &mut signs {
                    *s = !*s & 127;
                }
            }
            for (q, &gi) in q3[8 * ib..8 * ib + 8].iter_mut().zip(&fit.index) {
                *q = gi as u8;
            }
            let scale = fit.scale;
            words[ib] = signs[0] as u32
                | (signs[1] as u32) << 7
                | (signs[2] as u32) << 14
                | (signs[3] as u32) << 21;
            scales[ib] = scale;
            max_scale = c_max(max_scale, scale);
        }
        *y = BlockIQ3XXS::zeroed();
        let Some((d, ls)) = sub_block_scales(&scales, max_scale, 16) else {
            continue;
        };
        // ggml's "small improvement via this fudge factor" on the stored scale only.
        y.d = to_fp16(d * 1.0125);
        for (w, l) in words.iter_mut().zip(ls) {
            *w |= (l as u32) << 28;
        }
        y.qs[..QK_K / 4].copy_from_slice(&q3);
        for (b, w) in y.qs[QK_K / 4..].chunks_exact_mut(4).zip(&words) {
            b.copy_from_slice(&w.to_le_bytes());
        }
    }
}
