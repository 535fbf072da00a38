//! Q2_0, ggml's 2-bit type: 64 values per 18-byte block, each `(c − 1)·d` for a 2-bit code
//! `c` (levels −d, 0, d, 2d) with `d` the block's largest magnitude.
//!
//! Layout: `d` (f16), then `qs[16]`: value `j` in bits `2(j % 4)..2(j % 4) + 2` of byte
//! `j / 4`. Its dot product pairs with Q8_0 (two Q8_0 blocks per Q2_0 block).
//!
//! The quantizer is ggml's `quantize_row_q2_0_ref` (`llama-quantize` ignores the importance
//! matrix for it). llama.cpp's x86 build has no SIMD kernel for Q2_0: it runs
//! `ggml_vec_dot_q2_0_q8_0_generic` for every shape, whose order (GCC's FMAs included) the
//! scalar dot product keeps, and so does the AVX2 build in `kernels::x86::lowbit`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::mxfp4::cvtt_i32;
use super::{fp16, to_fp16, BlockQ8_0, BlockQuant};
use crate::dtype::DType;

/// Values per Q2_0 block.
pub const QK2_0: usize = 64;

/// One Q2_0 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ2_0 {
    /// Scale (the block's largest magnitude).
    pub d: f16,
    /// 2-bit codes `c` (value `(c − 1)·d`), four per byte.
    pub qs: [u8; QK2_0 / 4],
}

const _: () = assert!(std::mem::size_of::<BlockQ2_0>() == 18);

impl BlockQ2_0 {
    /// The code (0..=3) of value `j`.
    #[inline(always)]
    pub fn code(&self, j: usize) -> u8 {
        (self.qs[j / 4] >> (2 * (j % 4))) & 3
    }
}

impl BlockQuant for BlockQ2_0 {
    const DTYPE: DType = DType::Q2_0;
    const BLOCK_SIZE: usize = QK2_0;
    type VecDot = BlockQ8_0;
    const GGML_X86_DOT: Option<super::VecDotKernel> = Some(dot_q2_0_x86);

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        for (j, y) in out[..QK2_0].iter_mut().enumerate() {
            *y = (self.code(j) as i32 - 1) as f32 * d;
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK2_0];
        // `if (a > amax) amax = a` (a NaN never enters).
        let amax = x
            .iter()
            .fold(0.0f32, |m, v| if v.abs() > m { v.abs() } else { m });
        let id = if amax > 0.0 { 1.0 / amax } else { 0.0 };
        let mut b = BlockQ2_0 {
            d: to_fp16(amax),
            qs: [0; QK2_0 / 4],
        };
        for (j, &w) in x.iter().enumerate() {
            // `(int)roundf(w·id) + 1`, clamped to 0..=3 (x86's conversion of NaN and
            // infinities: `INT_MIN`).
            let q = cvtt_i32((w * id).round()).wrapping_add(1).clamp(0, 3);
            b.qs[j / 4] |= (q as u8) << (2 * (j % 4));
        }
        b
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8_0]) -> f32 {
        dot_blocks(a, b)
    }
}

/// `Σ (c − 1)·q` over Q8_0 block `k` (values `32k..32k + 32`) of a Q2_0 block.
#[inline(always)]
pub(crate) fn q2_0_sum(x: &BlockQ2_0, k: usize, y: &BlockQ8_0) -> i32 {
    (0..32)
        .map(|v| (x.code(32 * k + v) as i32 - 1) * y.qs[v] as i32)
        .sum()
}

/// `ggml_vec_dot_q2_0_q8_0_generic`'s order: per Q8_0 block `sumi = fma(dy, Σ, sumi)`, per
/// Q2_0 block `sumf = fma(d, sumi, sumf)`: GCC 12 contracts both `+=` into FMAs with its
/// generic and Intel tunings, as in the build that made llama.cpp's reference outputs (the
/// qwen05b Q2_0 file's logits match only so). With `-mtune=znver3`, which `-march=native`
/// picks on this AMD EPYC, GCC avoids FMA chains and `libggml-cpu.so` built here has
/// `vmulss`/`vaddss` instead: `tests/data/lowbit-ggml.c` says how its data was made.
fn dot_blocks(a: &[BlockQ2_0], b: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in a.iter().zip(b.chunks_exact(2)) {
        let mut sumi = 0f32;
        for (k, yb) in y.iter().enumerate() {
            sumi = fp16(yb.d).mul_add(q2_0_sum(x, k, yb) as f32, sumi);
        }
        sumf = fp16(x.d).mul_add(sumi, sumf);
    }
    sumf
}

/// Q2_0 · Q8_0 in llama.cpp's x86 order (`ggml_vec_dot_q2_0_q8_0_generic`, see
/// [`dot_blocks`]) on rows of bytes.
pub(crate) fn dot_q2_0_x86(n: usize, a: &[u8], b: &[u8]) -> f32 {
    super::row_blocks::<BlockQ2_0>(n, a, b).map_or(0.0, |(xs, ys)| dot_blocks(&xs, &ys))
}
