//! TQ2_0, ggml's 2-bit ternary type (BitNet-style weights): 256 values per 66-byte block,
//! each value `d · t` with `t ∈ {−1, 0, 1}` stored as the 2-bit code `t + 1`.
//!
//! Layout: `qs[64]`, then `d` (f16). Byte `j + m` of each 32-byte half `j ∈ {0, 32}` holds
//! values `4j + 32l + m` (`l = 0..4`) in its bits `2l..2l + 2`. Its dot product pairs with Q8_K.
//!
//! The quantizer is ggml's `quantize_row_tq2_0_ref` (`d = max |x|`, `t = round(x / d)`, halves
//! away from zero), which `llama-quantize` also runs with an importance matrix (it ignores
//! it). The scalar dot product keeps `ggml_vec_dot_tq2_0_q8_K_generic`'s order;
//! [`dot_tq2_0_x86`] keeps the order of its AVX2 build (see [`ternary_x86_lanes`]), which is
//! the one llama.cpp runs on x86-64 and so the one `mul_mat` keeps.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::k_quants::QK_K;
use super::{c_max, fp16, to_fp16, BlockQ8K, BlockQuant};
use crate::dtype::DType;

/// One TQ2_0 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockTQ2_0 {
    /// 2-bit codes `t + 1`, four per byte (see the module docs for the order).
    pub qs: [u8; QK_K / 4],
    /// Scale (the block's largest magnitude).
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockTQ2_0>() == 66);

impl BlockTQ2_0 {
    /// The 256 codes (`t + 1`, 0..=3; 3 only in blocks no quantizer wrote) in value order.
    pub fn codes(&self) -> [u8; QK_K] {
        let mut c = [0u8; QK_K];
        for j in (0..QK_K / 4).step_by(32) {
            for l in 0..4 {
                for m in 0..32 {
                    c[4 * j + 32 * l + m] = (self.qs[j + m] >> (2 * l)) & 3;
                }
            }
        }
        c
    }
}

impl BlockQuant for BlockTQ2_0 {
    const DTYPE: DType = DType::TQ2_0;
    const BLOCK_SIZE: usize = QK_K;
    type VecDot = BlockQ8K;
    const GGML_X86_DOT: Option<super::VecDotKernel> = Some(dot_tq2_0_x86);

    fn dequantize(&self, out: &mut [f32]) {
        ternary_dequantize(&self.codes(), self.d, out);
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_K];
        let (d, id) = ternary_scale(x);
        let mut b = BlockTQ2_0 {
            qs: [0; QK_K / 4],
            d: to_fp16(d),
        };
        for (j, x) in x.chunks_exact(128).enumerate() {
            for m in 0..32 {
                let mut q = 0u8;
                for n in 0..4 {
                    q |= ((ternary_code(x[m + 32 * n], id) & 3) as u8) << (2 * n);
                }
                b.qs[32 * j + m] = q;
            }
        }
        b
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8K]) -> f32 {
        ternary_dot_generic(a, b, |x| (x.codes(), x.d))
    }
}

/// `y = (c − 1)·d` for the codes `c` of a ternary block (`dequantize_row_tq*_0`).
pub(crate) fn ternary_dequantize(codes: &[u8; QK_K], d: f16, out: &mut [f32]) {
    let d = fp16(d);
    for (y, &c) in out[..QK_K].iter_mut().zip(codes) {
        *y = (c as i16 - 1) as f32 * d;
    }
}

/// The order of `ggml_vec_dot_tq*_0_q8_K_generic`: per block the exact `Σ (c − 1)·q`, then
/// `sumf += sum · (d_x·d_y)` (one product, commutative, so TQ1_0's `d_x·d_y` and TQ2_0's
/// `d_y·d_x` agree).
pub(crate) fn ternary_dot_generic<B>(
    a: &[B],
    b: &[BlockQ8K],
    block: impl Fn(&B) -> ([u8; QK_K], f16),
) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        let (codes, dx) = block(x);
        let sum: i32 = codes
            .iter()
            .zip(&y.qs)
            .map(|(&c, &q)| (c as i32 - 1) * q as i32)
            .sum();
        sumf += sum as f32 * (y.d * fp16(dx));
    }
    sumf
}

/// The ternary quantizers' scale: `d = max |x|` (C's `MAX`, so a NaN propagates as ggml's
/// does) and its inverse (0 for an all-zero block).
pub(crate) fn ternary_scale(x: &[f32]) -> (f32, f32) {
    let amax = x.iter().fold(0.0f32, |m, v| c_max(m, v.abs()));
    (amax, if amax != 0.0 { 1.0 / amax } else { 0.0 })
}

/// The code `t + 1` of value `v` for inverse scale `id`: `int xi = lroundf(v · id) + 1`
/// (halves away from zero, as `f32::round`). Where the product is not a finite `long` — a
/// block of subnormals makes `id` infinite — x86-64 glibc's `lroundf` returns `LONG_MIN`,
/// and the `int` keeps the low 32 bits: the same here, so such blocks get ggml's bytes too.
#[inline(always)]
pub(crate) fn ternary_code(v: f32, id: f32) -> i32 {
    let p = v * id;
    let l = if p.is_nan() || p.abs() >= 9.223_372e18 {
        i64::MIN
    } else {
        p.round() as i64
    };
    l.wrapping_add(1) as i32
}

/// The eight f32-lane integers of ggml's AVX2 ternary dot products
/// (`ggml_vec_dot_tq{1,2}_0_q8_K`) for one block: `codes` the block's codes `t + 1` in value
/// order against `y`. The kernels add unsigned-code × activation pairs into sixteen i16
/// lanes (activation `v` falls in lane `(v mod 32) / 2`), subtract Q8_K's `bsums` lane by
/// lane (wrapping, as `vpsubw`), and add lane pairs to eight i32 lanes; the f32 lanes then
/// take `fma(lane, d, acc)` per block. Exact for every code and activation byte.
#[inline(always)]
pub(crate) fn ternary_x86_lanes(codes: &[u8; QK_K], y: &BlockQ8K) -> [i32; 8] {
    let mut s16 = [0i32; 16];
    for (v, (&c, &q)) in codes.iter().zip(&y.qs).enumerate() {
        s16[(v % 32) / 2] += c as i32 * q as i32;
    }
    std::array::from_fn(|l| {
        let w = |k: usize| (s16[k] - y.bsums[k] as i32) as i16 as i32;
        w(2 * l) + w(2 * l + 1)
    })
}

/// The dot product of a row of ternary blocks with a row of Q8_K in the order of ggml's AVX2
/// kernels: per block [`ternary_x86_lanes`], `acc[l] = fma(lane, d_y · d_x, acc[l])`, then
/// the lanes added as `hsum_float_8` does.
pub(crate) fn ternary_dot_x86<B: BlockQuant<VecDot = BlockQ8K>>(
    n: usize,
    a: &[u8],
    b: &[u8],
    block: impl Fn(&B) -> ([u8; QK_K], f16),
) -> f32 {
    // `mul_mat` passes exact rows; otherwise only the whole blocks present in both count.
    let nb = (n / QK_K)
        .min(a.len() / B::BYTES)
        .min(b.len() / BlockQ8K::BYTES);
    let (Ok(xs), Ok(ys)) = (
        super::cast_blocks::<B>(&a[..nb * B::BYTES]),
        super::cast_blocks::<BlockQ8K>(&b[..nb * BlockQ8K::BYTES]),
    ) else {
        // Unreachable: both slices were cut to whole blocks.
        return 0.0;
    };
    let mut acc = [0f32; 8];
    for (x, y) in xs.iter().zip(ys.iter()) {
        let (codes, dx) = block(x);
        let d = y.d * fp16(dx);
        for (a, l) in acc.iter_mut().zip(ternary_x86_lanes(&codes, y)) {
            *a = (l as f32).mul_add(d, *a);
        }
    }
    crate::kernels::ggml_arith::lanes::hsum8(&acc)
}

/// TQ2_0 · Q8_K in the order of ggml's AVX2 `ggml_vec_dot_tq2_0_q8_K` (portable; the AVX2
/// build in `kernels::x86::ternary` gives the same bits).
pub(crate) fn dot_tq2_0_x86(n: usize, a: &[u8], b: &[u8]) -> f32 {
    ternary_dot_x86::<BlockTQ2_0>(n, a, b, |x| (x.codes(), x.d))
}
