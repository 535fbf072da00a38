//! IQ3_S, ggml's 3.44-bit grid i-quant: 256 values per 110-byte block.
//!
//! Layout: `d` (f16), `qs[64]` (the low 8 bits of a 9-bit `iq3s_grid` index per group of 4
//! values), `qh[8]` (per 32 values, bit `k` is bit 8 of group `k`'s index), `signs[32]` (one
//! bit per value), `scales[4]` (per 64 values, low nibble for the first 32, high for the
//! second). Value: `d·(1 + 2s)·grid·sign`. Its dot product pairs with Q8_K.
//!
//! ggrs reads and multiplies IQ3_S but does not quantize to it (not written yet).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::iq_codes::{iq_block, IqCodes, SIGN_BYTES};
use super::iq_grids::IQ3S_GRID;
use super::k_quants::QK_K;

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

iq_block!(BlockIQ3S, IQ3S, 1.0, codes, db);
