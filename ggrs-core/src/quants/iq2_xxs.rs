//! IQ2_XXS, ggml's 2.06-bit grid i-quant: 256 values per 66-byte block.
//!
//! Layout: `d` (f16), then `qs` as 8 groups of 8 bytes, one per 32 values: bytes 0–3 index
//! `iq2xxs_grid` (8 magnitudes each, for values `8l..8l + 8`), bytes 4–7 a `u32` holding
//! four 7-bit sign indices (`ksigns_iq2xs`, bits `7l..7l + 7`) and the 4-bit scale `s` in
//! bits 28–31. Value: `d·(0.5 + s)·0.25·grid·sign`. Its dot product pairs with Q8_K.
//!
//! ggrs reads and multiplies IQ2_XXS but does not quantize to it (ggml's search needs an
//! importance matrix and its grid neighbour maps; not written yet).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::iq_codes::{iq_block, ksigns, IqCodes, SIGN_BYTES};
use super::iq_grids::IQ2XXS_GRID;
use super::k_quants::QK_K;

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

iq_block!(BlockIQ2XXS, IQ2XXS, 0.125, codes, db);
