//! IQ2_XS, ggml's 2.31-bit grid i-quant: 256 values per 74-byte block.
//!
//! Layout: `d` (f16), `qs[32]` (`u16`: bits 0–8 index `iq2xs_grid`, 8 magnitudes for values
//! `8k..8k + 8`; bits 9–15 a 7-bit sign index into `ksigns_iq2xs`), `scales[8]` (per 32
//! values, low nibble for the first 16, high for the second). Value:
//! `d·(0.5 + s)·0.25·grid·sign`. Its dot product pairs with Q8_K.
//!
//! Writing it is ggml's `quantize_row_iq2_xs_impl` ([`quantize_blocks`]), which needs
//! importance weights (an imatrix): [`crate::quants::quantize_row`] refuses it without.

use bytemuck::{Pod, Zeroable};
use half::f16;

use std::sync::OnceLock;

use super::iq_codes::{iq_block, ksigns, IqCodes, SIGN_BYTES};
use super::iq_grids::IQ2XS_GRID;
use super::iq_search::{
    fit_sub_block, fold_signs, grid8_search, sub_block_scales, GridSearch, IQ2_BYTES, IQ2_MAX_LEVEL,
};
use super::k_quants::{sigma_weights, sum_x2, QK_K};
use super::{c_max, to_fp16};

/// One IQ2_XS block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ2XS {
    /// Scale.
    pub d: f16,
    /// Grid index (9 bits) and sign index (7 bits) per group of 8 values.
    pub qs: [u16; QK_K / 8],
    /// 4-bit scales, two per 32 values.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIQ2XS>() == 74);

impl BlockIQ2XS {
    /// The 4-bit scale of group `g` of 16 values.
    fn nibble(&self, g: usize) -> u8 {
        (self.scales[g / 2] >> (4 * (g % 2))) & 15
    }
}

/// The decoded block.
fn codes(x: &BlockIQ2XS) -> IqCodes {
    let mut c = IqCodes::default();
    for (k, &q) in x.qs.iter().enumerate() {
        c.mag[k] = IQ2XS_GRID[(q & 511) as usize];
        c.neg[k] = SIGN_BYTES[ksigns((q >> 9) as u32) as usize];
    }
    for (g, ls) in c.ls.iter_mut().enumerate() {
        *ls = 2 * x.nibble(g) as i16 + 1;
    }
    c
}

/// ggml's dequantizer's scale of group `g` of 16 values.
fn db(x: &BlockIQ2XS, d: f32, g: usize) -> f32 {
    d * (0.5 + x.nibble(g) as f32) * 0.25
}

iq_block!(BlockIQ2XS, IQ2XS, 0.125, codes, db, quantize_blocks, true);

/// The IQ2_XS grid's search (ggml's `iq2xs_init_impl(GGML_TYPE_IQ2_XS)`): levels 0–2 of
/// magnitudes 8, 25, 43; two neighbour distances.
fn search() -> &'static GridSearch<8> {
    static CELL: OnceLock<GridSearch<8>> = OnceLock::new();
    grid8_search(&CELL, &IQ2XS_GRID, &IQ2_BYTES, 2)
}

/// ggml's `quantize_row_iq2_xs_impl` on the blocks of `x` (`out.len()` of them) with
/// importance weights `qw` (unit weights when `None`, which ggml does not offer: the row
/// functions refuse this type without weights). Sub-blocks of 16 values.
pub(crate) fn quantize_blocks(x: &[f32], qw: Option<&[f32]>, out: &mut [BlockIQ2XS]) {
    let grid = search();
    let ones = [1f32; QK_K];
    for (ibl, y) in out.iter_mut().enumerate() {
        let xbl = &x[QK_K * ibl..QK_K * (ibl + 1)];
        let qwb = qw.map_or(&ones[..], |w| &w[QK_K * ibl..QK_K * (ibl + 1)]);
        let mut q2 = [0u16; QK_K / 8];
        let mut scales = [0f32; QK_K / 16];
        let mut max_scale = 0f32;
        let sigma2 = sum_x2(xbl) / QK_K as f32;
        for ib in 0..QK_K / 16 {
            let xb = &xbl[16 * ib..16 * ib + 16];
            let mut weight = [0f32; 16];
            sigma_weights(&qwb[16 * ib..16 * ib + 16], xb, sigma2, &mut weight);
            let mut xval = [0f32; 16];
            let mut signs = fold_signs(xb, &weight, &mut xval);
            let trials = (9, 0.1);
            let fit = fit_sub_block(grid, 2, IQ2_MAX_LEVEL, &xval, &weight, 1e-15, trials, false);
            let Some(fit) = fit else {
                continue;
            };
            if fit.flipped {
                for s in &mut signs[..2] {
                    *s = !*s & 127;
                }
            }
            for (k, (&gi, &s)) in fit.index.iter().zip(&signs).take(2).enumerate() {
                q2[2 * ib + k] = gi | (s as u16) << 9;
            }
            scales[ib] = fit.scale;
            max_scale = c_max(max_scale, fit.scale);
        }
        *y = BlockIQ2XS::zeroed();
        let Some((d, ls)) = sub_block_scales(&scales, max_scale, 16) else {
            continue;
        };
        y.d = to_fp16(d);
        for (ib, l) in ls.into_iter().enumerate() {
            y.scales[ib / 2] |= l << (4 * (ib % 2));
        }
        y.qs = q2;
    }
}
