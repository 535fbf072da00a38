//! IQ1_S, ggml's 1.56-bit grid i-quant: 256 values per 50-byte block.
//!
//! Layout: `d` (f16), `qs[32]` (the low 8 bits of an 11-bit `iq1s_grid` index per group of 8
//! values), `qh[8]` (`u16` per 32 values: bits `3l..3l + 3` are bits 8–10 of group `l`'s
//! index, bits 12–14 the scale `s`, bit 15 the sign of the shift). Value:
//! `d·(2s + 1)·(grid ± 1/8)` with grid values −1, 0, 1. Its dot product pairs with Q8_K: the
//! shift's part is read from Q8_K's `bsums`.
//!
//! ggrs reads and multiplies IQ1_S but does not quantize to it (not written yet).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::iq_codes::{iq1_block, iq1_grid_sum, iq1_x86_lanes, Iq1Block, Iq1Codes, SIGN_BYTES};
use super::iq_grids::IQ1S_GRID;
use super::k_quants::QK_K;
use super::{fp16, BlockQ8K};
use crate::kernels::ggml_arith::lanes::hsum8;

/// One IQ1_S block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ1S {
    /// Scale.
    pub d: f16,
    /// Low index bits, one byte per group of 8 values.
    pub qs: [u8; QK_K / 8],
    /// High index bits, scale and shift sign per 32 values.
    pub qh: [u16; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIQ1S>() == 50);

impl Iq1Block for BlockIQ1S {
    fn codes(&self) -> Iq1Codes {
        let mut c = Iq1Codes {
            d: fp16(self.d),
            ..Default::default()
        };
        for (ib, &qh) in self.qh.iter().enumerate() {
            for l in 0..4 {
                let idx = self.qs[4 * ib + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
                c.grid[4 * ib + l] = IQ1S_GRID[idx];
                c.delta_neg[4 * ib + l] = SIGN_BYTES[if qh & 0x8000 != 0 { 255 } else { 0 }];
            }
            let ls = 2 * ((qh >> 12) & 7) as i16 + 1;
            c.ls[2 * ib] = ls;
            c.ls[2 * ib + 1] = ls;
        }
        c
    }
}

/// `Σ ls·(±1)·(bsums[2ib] + bsums[2ib + 1])` over the sub-blocks: the shift part of a
/// block's dot product with a Q8_K block of sums `bsums` (exact, in every order).
pub(crate) fn iq1s_shift_sum(c: &Iq1Codes, bsums: &[i16; QK_K / 16]) -> i32 {
    (0..QK_K / 32)
        .map(|ib| {
            let s = if c.delta_neg[4 * ib] != 0 { -1 } else { 1 };
            (bsums[2 * ib] as i32 + bsums[2 * ib + 1] as i32) * s * c.ls[2 * ib] as i32
        })
        .sum()
}

/// `ggml_vec_dot_iq1_s_q8_K_generic`: per block
/// `sumf = fma(d_x·d_y, sumi + 1/8·sumi1, sumf)`.
fn dot_generic(a: &[BlockIQ1S], b: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in a.iter().zip(b) {
        let c = x.codes();
        let t = iq1_grid_sum(&c, y) as f32 + 0.125 * iq1s_shift_sum(&c, &y.bsums) as f32;
        sumf = (c.d * y.d).mul_add(t, sumf);
    }
    sumf
}

iq1_block!(BlockIQ1S, IQ1S, dot_iq1_s_x86, dot_generic);

/// IQ1_S · Q8_K in the order of ggml's AVX2 `ggml_vec_dot_iq1_s_q8_K` (portable; the AVX2
/// build in `kernels::x86::iquants` gives the same bits): the grid part in eight i32 lanes
/// added per block as `fma(d, lane, acc)`, the shift part in one f32 as
/// `accum1 = fma(d, sumi1, accum1)` (GCC fuses it), and at the end
/// `hsum_float_8(acc) + 1/8·accum1`.
pub(crate) fn dot_iq1_s_x86(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let Some((xs, ys)) = super::row_blocks::<BlockIQ1S>(n, a, b) else {
        return 0.0;
    };
    let mut acc = [0f32; 8];
    let mut accum1 = 0f32;
    for (x, y) in xs.iter().zip(ys.iter()) {
        let c = x.codes();
        let d = y.d * c.d;
        for (a, l) in acc.iter_mut().zip(iq1_x86_lanes(&c, y)) {
            *a = d.mul_add(l as f32, *a);
        }
        accum1 = d.mul_add(iq1s_shift_sum(&c, &y.bsums) as f32, accum1);
    }
    hsum8(&acc) + 0.125 * accum1
}
