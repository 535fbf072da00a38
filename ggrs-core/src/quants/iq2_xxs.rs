//! IQ2_XXS, ggml's 2.06-bit grid i-quant: 256 values per 66-byte block.
//!
//! Layout: `d` (f16), then `qs` as 8 groups of 8 bytes, one per 32 values: bytes 0–3 index
//! `iq2xxs_grid` (8 magnitudes each, for values `8l..8l + 8`), bytes 4–7 a `u32` holding
//! four 7-bit sign indices (`ksigns_iq2xs`, bits `7l..7l + 7`) and the 4-bit scale `s` in
//! bits 28–31. Value: `d·(0.5 + s)·0.25·grid·sign`. Its dot product pairs with Q8_K.
//!
//! Writing it is ggml's `quantize_row_iq2_xxs_impl` ([`quantize_blocks`]), which needs
//! importance weights (an imatrix): [`crate::quants::quantize_row`] refuses it without.

use bytemuck::{Pod, Zeroable};
use half::f16;

use std::sync::OnceLock;

use super::iq_codes::{iq_block, ksigns, IqCodes, SIGN_BYTES};
use super::iq_grids::IQ2XXS_GRID;
use super::iq_search::{
    fold_signs, grid8_search, odd_level, odd_level_sums, round_group, sub_block_scales, GridSearch,
    Lookup, IQ2_BYTES, IQ2_MAX_LEVEL,
};
use super::k_quants::{make_qp_quants, sigma_weights, sum_x2, QK_K};
use super::{c_max, to_fp16};

/// One IQ2_XXS block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ2XXS {
    /// Scale.
    pub d: f16,
    /// Grid indices, signs and scales (see the module docs).
    pub qs: [u8; QK_K / 4],
}

const _: () = assert!(std::mem::size_of::<BlockIQ2XXS>() == 66);

impl BlockIQ2XXS {
    /// The sign-and-scale word of sub-block `ib` (32 values).
    fn aux(&self, ib: usize) -> u32 {
        let b = &self.qs[8 * ib + 4..8 * ib + 8];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

/// The decoded block.
fn codes(x: &BlockIQ2XXS) -> IqCodes {
    let mut c = IqCodes::default();
    for ib in 0..QK_K / 32 {
        let aux = x.aux(ib);
        for l in 0..4 {
            c.mag[4 * ib + l] = IQ2XXS_GRID[x.qs[8 * ib + l] as usize];
            c.neg[4 * ib + l] = SIGN_BYTES[ksigns(aux >> (7 * l)) as usize];
        }
        let ls = 2 * (aux >> 28) as i16 + 1;
        c.ls[2 * ib] = ls;
        c.ls[2 * ib + 1] = ls;
    }
    c
}

/// ggml's dequantizer's scale of group `g` of 16 values.
fn db(x: &BlockIQ2XXS, d: f32, g: usize) -> f32 {
    d * (0.5 + (x.aux(g / 2) >> 28) as f32) * 0.25
}

iq_block!(BlockIQ2XXS, IQ2XXS, 0.125, codes, db, quantize_blocks, true);

/// The IQ2_XXS grid's search (ggml's `iq2xs_init_impl(GGML_TYPE_IQ2_XXS)`): levels 0–2 of
/// magnitudes 8, 25, 43; two neighbour distances.
fn search() -> &'static GridSearch<8> {
    static CELL: OnceLock<GridSearch<8>> = OnceLock::new();
    grid8_search(&CELL, &IQ2XXS_GRID, &IQ2_BYTES, 2)
}

/// ggml's `quantize_row_iq2_xxs_impl` on the blocks of `x` (`out.len()` of them) with
/// importance weights `qw` (unit weights when `None`, which ggml does not offer: the row
/// functions refuse this type without weights).
pub(crate) fn quantize_blocks(x: &[f32], qw: Option<&[f32]>, out: &mut [BlockIQ2XXS]) {
    let grid = search();
    let ones = [1f32; QK_K];
    for (ibl, y) in out.iter_mut().enumerate() {
        let xbl = &x[QK_K * ibl..QK_K * (ibl + 1)];
        let qwb = qw.map_or(&ones[..], |w| &w[QK_K * ibl..QK_K * (ibl + 1)]);
        let mut q2 = [0u32; QK_K / 16];
        let mut scales = [0f32; QK_K / 32];
        let mut max_scale = 0f32;
        let sigma2 = sum_x2(xbl) / QK_K as f32;
        for ib in 0..QK_K / 32 {
            let xb = &xbl[32 * ib..32 * ib + 32];
            let mut weight = [0f32; 32];
            sigma_weights(&qwb[32 * ib..32 * ib + 32], xb, sigma2, &mut weight);
            let waux = weight.map(f32::sqrt);
            let mut xval = [0f32; 32];
            let mut signs = fold_signs(xb, &weight, &mut xval);
            let max = xval[1..].iter().fold(xval[0], |m, &v| c_max(m, v));
            if max < 1e-15 {
                continue;
            }
            let mut lq = [0u8; 32];
            let mut scale = make_qp_quants(IQ2_MAX_LEVEL + 2, &xval, &mut lq, &weight);
            let mut l = lq.map(|v| v as i8);
            let eff_max = scale * (IQ2_MAX_LEVEL + 1) as f32;
            if eff_max <= 0.0 {
                continue;
            }
            let mut best = 0f32;
            let mut laux = [0i8; 32];
            for is in -6..=6 {
                let id = (5.0 + is as f32 * 0.1) / eff_max;
                let this_scale = 1.0 / id;
                for k in 0..4 {
                    let g = 8 * k..8 * k + 8;
                    for i in g.clone() {
                        laux[i] = odd_level(id, xval[i], IQ2_MAX_LEVEL);
                    }
                    let u = GridSearch::<8>::index_of(&laux[g.clone()], 2);
                    if let Lookup::Near(c) = grid.lookup(u) {
                        let (xv, wa) = (&xval[g.clone()], &waux[g.clone()]);
                        grid.best_neighbour(c, xv, wa, this_scale, &mut laux[g]);
                    }
                }
                let (sumqx, sumq2) = odd_level_sums(&weight, &xval, &laux);
                if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    l = laux;
                }
            }
            if scale > 0.0 {
                let id = 1.0 / scale;
                for k in 0..4 {
                    let g = 8 * k..8 * k + 8;
                    round_group(grid, (id, scale), IQ2_MAX_LEVEL, 2, g, &xval, &waux, &mut l);
                }
                let (sumqx, sumq2) = odd_level_sums(&weight, &xval, &l);
                if sumq2 > 0.0 {
                    scale = sumqx / sumq2;
                }
            }
            if scale < 0.0 {
                // ggml's guard for a negative least-squares scale: flip it and the signs.
                scale = -scale;
                for s in &mut signs {
                    *s = !*s & 127;
                }
            }
            for k in 0..4 {
                let u = GridSearch::<8>::index_of(&l[8 * k..8 * k + 8], 2);
                // Every level set above is a grid point's (ggml aborts otherwise).
                let gi = grid.on_grid(u).unwrap_or(0) as u32;
                q2[2 * ib] |= gi << (8 * k);
                q2[2 * ib + 1] |= (signs[k] as u32) << (7 * k);
            }
            scales[ib] = scale;
            max_scale = c_max(max_scale, scale);
        }
        *y = BlockIQ2XXS::zeroed();
        let Some((d, ls)) = sub_block_scales(&scales, max_scale, 16) else {
            continue;
        };
        y.d = to_fp16(d);
        for (ib, l) in ls.into_iter().enumerate() {
            q2[2 * ib + 1] |= (l as u32) << 28;
        }
        for (b, w) in y.qs.chunks_exact_mut(4).zip(&q2) {
            b.copy_from_slice(&w.to_le_bytes());
        }
    }
}
