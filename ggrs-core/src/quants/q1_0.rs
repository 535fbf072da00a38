//! Q1_0, ggml's 1-bit type: 128 values per 18-byte block, each `±d` (the sign bit of the
//! value) with `d` the block's mean magnitude.
//!
//! Layout: `d` (f16), then `qs[16]`: bit `j % 8` of byte `j / 8` is set when value `j` is
//! `+d`. Its dot product pairs with Q8_0 (four Q8_0 blocks per Q1_0 block).
//!
//! The quantizer is ggml's `quantize_row_q1_0_ref` (`llama-quantize` ignores the importance
//! matrix for it). The scalar dot product keeps `ggml_vec_dot_q1_0_q8_0_generic`'s order,
//! [`dot_q1_0_x86`] that of its AVX2 build, which llama.cpp runs on x86-64 for every shape.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::{fp16, to_fp16, BlockQ8_0, BlockQuant};
use crate::dtype::DType;

/// Values per Q1_0 block.
pub const QK1_0: usize = 128;

/// One Q1_0 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ1_0 {
    /// Scale (the mean magnitude).
    pub d: f16,
    /// Sign bits, set for `+d` (value order, least significant bit first).
    pub qs: [u8; QK1_0 / 8],
}

const _: () = assert!(std::mem::size_of::<BlockQ1_0>() == 18);

impl BlockQ1_0 {
    /// True when value `j` is `+d`.
    #[inline(always)]
    pub fn positive(&self, j: usize) -> bool {
        (self.qs[j / 8] >> (j % 8)) & 1 == 1
    }
}

impl BlockQuant for BlockQ1_0 {
    const DTYPE: DType = DType::Q1_0;
    const BLOCK_SIZE: usize = QK1_0;
    type VecDot = BlockQ8_0;
    const GGML_X86_DOT: Option<super::VecDotKernel> = Some(dot_q1_0_x86);

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        for (j, y) in out[..QK1_0].iter_mut().enumerate() {
            *y = if self.positive(j) { d } else { -d };
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK1_0];
        let sum_abs = x.iter().fold(0.0f32, |s, v| s + v.abs());
        let mut b = BlockQ1_0 {
            d: to_fp16(sum_abs / QK1_0 as f32),
            qs: [0; QK1_0 / 8],
        };
        for (j, &v) in x.iter().enumerate() {
            if v >= 0.0 {
                b.qs[j / 8] |= 1 << (j % 8);
            }
        }
        b
    }

    /// `ggml_vec_dot_q1_0_q8_0_generic`: per Q8_0 block `sumi += dy·Σ ±q` (`int`), per Q1_0
    /// block `sumf += d·sumi`, each one FMA (GCC's contraction, see `q2_0`).
    fn vec_dot(a: &[Self], b: &[BlockQ8_0]) -> f32 {
        let mut sumf = 0f32;
        for (x, y) in a.iter().zip(b.chunks_exact(4)) {
            let mut sumi = 0f32;
            for (k, yb) in y.iter().enumerate() {
                let s: i32 = (0..32)
                    .map(|v| {
                        let q = yb.qs[v] as i32;
                        if x.positive(32 * k + v) {
                            q
                        } else {
                            -q
                        }
                    })
                    .sum();
                sumi = fp16(yb.d).mul_add(s as f32, sumi);
            }
            sumf = fp16(x.d).mul_add(sumi, sumf);
        }
        sumf
    }
}

/// The eight i32 lanes of ggml's AVX2 Q1_0 kernel for Q8_0 block `k` of a Q1_0 block: lane
/// `l` the sum over values `4l..4l + 4` of `q` or its 8-bit negation (`vpsubb`, so −128
/// stays −128: no ggml activation quantizer writes it).
#[inline(always)]
pub(crate) fn q1_0_lanes(x: &BlockQ1_0, k: usize, y: &BlockQ8_0) -> [i32; 8] {
    std::array::from_fn(|l| {
        (4 * l..4 * l + 4)
            .map(|v| {
                let q = y.qs[v];
                (if x.positive(32 * k + v) {
                    q
                } else {
                    q.wrapping_neg()
                }) as i32
            })
            .sum()
    })
}

/// Q1_0 · Q8_0 in the order of ggml's AVX2 `ggml_vec_dot_q1_0_q8_0`: per Q1_0 block eight
/// lanes `blk = dy₀·lanes₀`, then `blk = fma(dy_k, lanes_k, blk)` for its other three Q8_0
/// blocks, `acc = fma(d, blk, acc)`; `hsum_float_8` at the end. The AVX2 build in
/// `kernels::x86::lowbit` gives the same bits.
pub(crate) fn dot_q1_0_x86(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let Some((xs, ys)) = super::row_blocks::<BlockQ1_0>(n, a, b) else {
        return 0.0;
    };
    let mut acc = [0f32; 8];
    for (x, y) in xs.iter().zip(ys.chunks_exact(4)) {
        let mut blk = [0f32; 8];
        for (k, yb) in y.iter().enumerate() {
            let dy = fp16(yb.d);
            for (b, l) in blk.iter_mut().zip(q1_0_lanes(x, k, yb)) {
                *b = if k == 0 {
                    dy * l as f32
                } else {
                    dy.mul_add(l as f32, *b)
                };
            }
        }
        let d = fp16(x.d);
        for (a, b) in acc.iter_mut().zip(blk) {
            *a = d.mul_add(b, *a);
        }
    }
    crate::kernels::ggml_arith::lanes::hsum8(&acc)
}
