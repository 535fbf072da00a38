//! IQ1_M, ggml's 1.75-bit grid i-quant: 256 values per 56-byte block.
//!
//! Layout: `qs[32]` (the low 8 bits of an 11-bit `iq1s_grid` index per group of 8 values),
//! `qh[16]` (per 16 values, one nibble per group of 8: bits 0–2 are bits 8–10 of its index,
//! bit 3 the sign of its shift), `scales[8]` (four `u16`: bits 0–11 hold four 3-bit scales,
//! one per 16 values; the top nibbles together make the f16 block scale `d`). Value:
//! `d·(2s + 1)·(grid ± 1/8)` with grid values −1, 0, 1. Its dot product pairs with Q8_K.
//!
//! ggrs reads and multiplies IQ1_M but does not quantize to it (not written yet).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::iq_codes::{
    byte_at, iq1_block, iq1_grid_sum, iq1_x86_lanes, wrap_neg, Iq1Block, Iq1Codes, SIGN_BYTES,
};
use super::iq_grids::IQ1S_GRID;
use super::k_quants::QK_K;
use super::BlockQ8K;
use crate::kernels::ggml_arith::lanes::hsum8;

/// One IQ1_M block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ1M {
    /// Low index bits, one byte per group of 8 values.
    pub qs: [u8; QK_K / 8],
    /// High index bits and shift signs, a nibble per group of 8 values.
    pub qh: [u8; QK_K / 16],
    /// 3-bit scales and the f16 block scale (see the module docs).
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIQ1M>() == 56);

impl BlockIQ1M {
    fn sc(&self, k: usize) -> u16 {
        u16::from_le_bytes([self.scales[2 * k], self.scales[2 * k + 1]])
    }

    /// The block scale: the top nibbles of the four scale words.
    pub fn d(&self) -> f32 {
        let bits = (self.sc(0) >> 12)
            | ((self.sc(1) >> 8) & 0x00f0)
            | ((self.sc(2) >> 4) & 0x0f00)
            | (self.sc(3) & 0xf000);
        f16::from_bits(bits).to_f32()
    }
}

impl Iq1Block for BlockIQ1M {
    fn codes(&self) -> Iq1Codes {
        let mut c = Iq1Codes {
            d: self.d(),
            ..Default::default()
        };
        for k in 0..QK_K / 8 {
            let h = (self.qh[k / 2] >> (4 * (k % 2))) & 15;
            c.grid[k] = IQ1S_GRID[self.qs[k] as usize | (((h & 7) as usize) << 8)];
            c.delta_neg[k] = SIGN_BYTES[if h & 8 != 0 { 255 } else { 0 }];
        }
        for (g, ls) in c.ls.iter_mut().enumerate() {
            let ib = g / 2;
            let s = (self.sc(ib / 2) >> (6 * (ib % 2) + 3 * (g % 2))) & 7;
            *ls = 2 * s as i16 + 1;
        }
        c
    }
}

/// `ggml_vec_dot_iq1_m_q8_K_generic`: per block `sumf = fma(d·d_y, sumi1 + 1/8·sumi2, sumf)`,
/// `sumi2` the exact `Σ ls·(±q)`.
fn dot_generic(a: &[BlockIQ1M], b: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in a.iter().zip(b) {
        let c = x.codes();
        let sumi2: i32 =
            y.qs.iter()
                .enumerate()
                .map(|(v, &q)| {
                    let s = if byte_at(&c.delta_neg, v) != 0 { -1 } else { 1 };
                    s * q as i32 * c.ls[v / 16] as i32
                })
                .sum();
        let t = iq1_grid_sum(&c, y) as f32 + 0.125 * sumi2 as f32;
        sumf = (c.d * y.d).mul_add(t, sumf);
    }
    sumf
}

iq1_block!(BlockIQ1M, IQ1M, dot_iq1_m_x86, dot_generic);

/// The eight i32 lanes of the shift part in ggml's AVX2 IQ1_M kernel for one block:
/// `vpsignb(q, ±1)` (−(−128) wraps) times the scale.
pub(crate) fn iq1m_shift_lanes(c: &Iq1Codes, y: &BlockQ8K) -> [i32; 8] {
    let mut l = [0i32; 8];
    for (v, &q) in y.qs.iter().enumerate() {
        l[(v % 32) / 4] += wrap_neg(q, byte_at(&c.delta_neg, v) != 0) * c.ls[v / 16] as i32;
    }
    l
}

/// IQ1_M · Q8_K in the order of ggml's AVX2 `ggml_vec_dot_iq1_m_q8_K` (portable; the AVX2
/// build in `kernels::x86::iquants` gives the same bits): grid and shift parts in two sets
/// of eight i32 lanes, each added per block as `fma(d, lane, acc)`, and at the end
/// `hsum_float_8(acc1) + 1/8·hsum_float_8(acc2)`.
pub(crate) fn dot_iq1_m_x86(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let Some((xs, ys)) = super::row_blocks::<BlockIQ1M>(n, a, b) else {
        return 0.0;
    };
    let mut acc1 = [0f32; 8];
    let mut acc2 = [0f32; 8];
    for (x, y) in xs.iter().zip(ys.iter()) {
        let c = x.codes();
        let d = y.d * c.d;
        for (a, l) in acc1.iter_mut().zip(iq1_x86_lanes(&c, y)) {
            *a = d.mul_add(l as f32, *a);
        }
        for (a, l) in acc2.iter_mut().zip(iq1m_shift_lanes(&c, y)) {
            *a = d.mul_add(l as f32, *a);
        }
    }
    hsum8(&acc1) + 0.125 * hsum8(&acc2)
}
