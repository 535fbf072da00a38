//! IQ2_S, ggml's 2.56-bit grid i-quant: 256 values per 82-byte block.
//!
//! Layout: `d` (f16), `qs[64]` (bytes 0–31: the low 8 bits of a 10-bit `iq2s_grid` index per
//! group of 8 values; bytes 32–63: the 8 sign bits of each group), `qh[8]` (per 32 values,
//! bits `2l..2l + 2` are bits 8–9 of group `l`'s index), `scales[8]` (per 32 values, low
//! nibble for the first 16, high for the second). Value: `d·(0.5 + s)·0.25·grid·sign`. Its
//! dot product pairs with Q8_K.
//!
//! ggrs reads and multiplies IQ2_S but does not quantize to it (not written yet).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::iq_codes::{iq_block, IqCodes, SIGN_BYTES};
use super::iq_grids::IQ2S_GRID;
use super::k_quants::QK_K;

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

iq_block!(BlockIQ2S, IQ2S, 0.125, codes, db);
