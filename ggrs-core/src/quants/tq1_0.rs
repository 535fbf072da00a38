//! TQ1_0, ggml's 1.69-bit ternary type: 256 values `d · t`, `t ∈ {−1, 0, 1}`, per 54-byte
//! block, five trits per byte (3⁵ = 243 ≤ 256).
//!
//! Layout: `qs[48]`, `qh[4]`, `d` (f16). A byte holds the trits `t + 1` of five values (four
//! in `qh`) as the base-3 number `q` (first value most significant), stored as
//! `⌈q · 256 / 243⌉`; trit `n` of stored byte `b` is `((b · 3ⁿ mod 256) · 3) >> 8`. Values
//! `32n + m` (`n < 5`, `m < 32`) are in `qs[m]`, values `160 + 16n + m` (`m < 16`) in
//! `qs[32 + m]`, values `240 + 4n + j` in `qh[j]` (as trits 0–3 of five, the last one zero).
//! Its dot product pairs with Q8_K.
//!
//! The quantizer is ggml's `quantize_row_tq1_0_ref` (which `llama-quantize` runs whatever
//! the importance matrix). The scalar dot product keeps `ggml_vec_dot_tq1_0_q8_K_generic`'s
//! order; [`dot_tq1_0_x86`] the order of its AVX2 build, which `mul_mat` keeps (the same as
//! TQ2_0's: see [`super::tq2_0::ternary_x86_lanes`]).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::k_quants::QK_K;
use super::tq2_0::{
    ternary_code, ternary_dequantize, ternary_dot_generic, ternary_dot_x86, ternary_scale,
};
use super::{to_fp16, BlockQ8K, BlockQuant};
use crate::dtype::DType;

/// One TQ1_0 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockTQ1_0 {
    /// Five trits per byte (values 0..240, see the module docs).
    pub qs: [u8; 48],
    /// Four trits per byte (values 240..256).
    pub qh: [u8; 4],
    /// Scale (the block's largest magnitude).
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockTQ1_0>() == 54);

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Trit `n` (`t + 1`, 0..=2 for bytes a quantizer wrote) of stored byte `b`.
#[inline(always)]
fn trit(b: u8, n: usize) -> u8 {
    ((b.wrapping_mul(POW3[n]) as u16 * 3) >> 8) as u8
}

/// Packs trits (`t + 1`, first most significant) into a stored byte: `⌈q · 256 / 243⌉`.
#[inline(always)]
fn pack(trits: impl Iterator<Item = i32>) -> u8 {
    let q = trits.fold(0u8, |q, t| q.wrapping_mul(3).wrapping_add(t as u8));
    (q as u16 * 256).div_ceil(243) as u8
}

impl BlockTQ1_0 {
    /// The 256 codes `t + 1` in value order.
    pub fn codes(&self) -> [u8; QK_K] {
        let mut c = [0u8; QK_K];
        for n in 0..5 {
            for m in 0..32 {
                c[32 * n + m] = trit(self.qs[m], n);
            }
            for m in 0..16 {
                c[160 + 16 * n + m] = trit(self.qs[32 + m], n);
            }
        }
        for n in 0..4 {
            for j in 0..4 {
                c[240 + 4 * n + j] = trit(self.qh[j], n);
            }
        }
        c
    }
}

impl BlockQuant for BlockTQ1_0 {
    const DTYPE: DType = DType::TQ1_0;
    const BLOCK_SIZE: usize = QK_K;
    type VecDot = BlockQ8K;
    const GGML_X86_DOT: Option<super::VecDotKernel> = Some(dot_tq1_0_x86);

    fn dequantize(&self, out: &mut [f32]) {
        ternary_dequantize(&self.codes(), self.d, out);
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_K];
        let (d, id) = ternary_scale(x);
        let mut b = BlockTQ1_0 {
            qs: [0; 48],
            qh: [0; 4],
            d: to_fp16(d),
        };
        let code = |i: usize| ternary_code(x[i], id);
        for m in 0..32 {
            b.qs[m] = pack((0..5).map(|n| code(m + 32 * n)));
        }
        for m in 0..16 {
            b.qs[32 + m] = pack((0..5).map(|n| code(160 + m + 16 * n)));
        }
        for j in 0..4 {
            // The fifth trit is zero: the first value goes to the most significant trit.
            b.qh[j] = pack((0..4).map(|n| code(240 + j + 4 * n)).chain([0]));
        }
        b
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8K]) -> f32 {
        ternary_dot_generic(a, b, |x| (x.codes(), x.d))
    }
}

/// TQ1_0 · Q8_K in the order of ggml's AVX2 `ggml_vec_dot_tq1_0_q8_K` (portable; the AVX2
/// build in `kernels::x86::ternary` gives the same bits).
pub(crate) fn dot_tq1_0_x86(n: usize, a: &[u8], b: &[u8]) -> f32 {
    ternary_dot_x86::<BlockTQ1_0>(n, a, b, |x| (x.codes(), x.d))
}
