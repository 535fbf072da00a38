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

use super::iq_codes::{iq_dequantize, iq_dot_generic, IqBlock, IqCodes, SIGN_BYTES};
use super::iq_grids::IQ2S_GRID;
use super::k_quants::QK_K;
use super::{fp16, BlockQ8K, BlockQuant};
use crate::dtype::DType;

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

impl IqBlock for BlockIQ2S {
    const FACTOR: f32 = 0.125;

    fn codes(&self) -> IqCodes {
        let mut c = IqCodes {
            mag: [0; 32],
            neg: [0; 32],
            ls: [0; 16],
        };
        for k in 0..QK_K / 8 {
            let hi = ((self.qh[k / 4] >> (2 * (k % 4))) & 3) as usize;
            c.mag[k] = IQ2S_GRID[self.qs[k] as usize | (hi << 8)];
            c.neg[k] = SIGN_BYTES[self.qs[QK_K / 8 + k] as usize];
        }
        for (g, ls) in c.ls.iter_mut().enumerate() {
            *ls = 2 * self.nibble(g) as i16 + 1;
        }
        c
    }

    fn scale(&self) -> f32 {
        fp16(self.d)
    }
}

impl BlockQuant for BlockIQ2S {
    const DTYPE: DType = DType::IQ2S;
    const BLOCK_SIZE: usize = QK_K;
    type VecDot = BlockQ8K;
    const GGML_X86_DOT: Option<super::VecDotKernel> =
        Some(super::iq_codes::iq_dot_x86::<BlockIQ2S>);
    const QUANTIZES: bool = false;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        let db: [f32; 16] = std::array::from_fn(|g| d * (0.5 + self.nibble(g) as f32) * 0.25);
        iq_dequantize(&self.codes(), |g| db[g], out);
    }

    /// Not written yet ([`BlockQuant::QUANTIZES`] is false): an all-zero block.
    fn quantize(_x: &[f32]) -> Self {
        Self::zeroed()
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8K]) -> f32 {
        iq_dot_generic(a, b)
    }
}
