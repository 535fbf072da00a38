//! IQ2_XS, ggml's 2.31-bit grid i-quant: 256 values per 74-byte block.
//!
//! Layout: `d` (f16), `qs[32]` (`u16`: bits 0–8 index `iq2xs_grid`, 8 magnitudes for values
//! `8k..8k + 8`; bits 9–15 a 7-bit sign index into `ksigns_iq2xs`), `scales[8]` (per 32
//! values, low nibble for the first 16, high for the second). Value:
//! `d·(0.5 + s)·0.25·grid·sign`. Its dot product pairs with Q8_K.
//!
//! ggrs reads and multiplies IQ2_XS but does not quantize to it (not written yet).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::iq_codes::{iq_block, ksigns, IqCodes, SIGN_BYTES};
use super::iq_grids::IQ2XS_GRID;
use super::k_quants::QK_K;

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

iq_block!(BlockIQ2XS, IQ2XS, 0.125, codes, db);
