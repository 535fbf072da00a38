//! IQ3_XXS, ggml's 3.06-bit grid i-quant: 256 values per 98-byte block.
//!
//! Layout: `d` (f16), `qs[96]`: bytes 0–63 index `iq3xxs_grid` (4 magnitudes each, for
//! values `4k..4k + 4`), bytes 64–95 eight `u32`, one per 32 values, holding four 7-bit sign
//! indices (`ksigns_iq2xs`, bits `7l..7l + 7` for values `8l..8l + 8`) and the 4-bit scale
//! `s` in bits 28–31. Value: `d·(0.5 + s)·0.5·grid·sign`. Its dot product pairs with Q8_K.
//!
//! ggrs reads and multiplies IQ3_XXS but does not quantize to it (not written yet).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::iq_codes::{iq_block, ksigns, IqCodes, SIGN_BYTES};
use super::iq_grids::IQ3XXS_GRID;
use super::k_quants::QK_K;

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

iq_block!(BlockIQ3XXS, IQ3XXS, 0.25, codes, db);
