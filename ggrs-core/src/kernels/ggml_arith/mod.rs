//! Arithmetic in the order ggml's x86-64 CPU backend performs it, so that a model evaluated
//! here gives llama.cpp's numbers to the bit (llama.cpp commit 0c1e570, built with GCC and
//! `-march=native` for AVX-512 with VNNI).
//!
//! Why bits matter: in a quantized model every activation row is rounded to 8 bits (Q8_0)
//! before each matrix product. A difference in the last bit of an activation occasionally
//! moves a code to its neighbour; that changes the next product by a whole quantization step,
//! which moves more codes in the next layer, and after 24 layers the logits differ by tenths
//! (measured on Qwen2.5-0.5B Q8_0: 0.25 with every op "right" to float rounding, against a
//! bound of 0.1). The summation order is therefore part of the contract here:
//!
//! | weight | activations | ggml kernel | order reproduced |
//! |---|---|---|---|
//! | Q8_0, Q5_0, Q4_0 (rows % 8 ≠ 0) | Q8_0 | `tinyBLAS_Q0_AVX` (≥ 2 columns), `ggml_vec_dot_*_q8_0` (1) | 8 lanes of 4 products each; per block `lane = fma(dx·dy, lane_sum, lane)`; lanes added as `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))` |
//! | Q4_0, rows % 8 = 0 | Q8_0 | repacked `q4_0_8x8` GEMM/GEMV | per block `acc = fma(block_sum, dx·dy, acc)` |
//! | IQ4_NL, rows % 8 = 0 | Q8_0 | repacked `iq4_nl_8x8` GEMM/GEMV | as Q4_0's repacked kernels |
//! | Q4_K, Q2_K, rows % 8 = 0 | Q8_K | repacked `q4_K_8x8` / `q2_K_8x8` GEMM (first `4·⌊m/4⌋` of `m ≥ 4` columns), GEMV (the rest) | exact integer sums; `acc = fma(S, d·dy, acc)`, `accm = fma(M, dmin·dy, accm)` per super-block (GEMV) or per 64 / 128 values (GEMM); `acc − accm` (see `quants::k_quants::repacked`) |
//! | IQ4_NL, rows % 8 ≠ 0 | Q8_0 | `tinyBLAS_Q0_AVX` (≥ 2 columns) | as Q4_0's lanes |
//! | IQ4_NL, rows % 8 ≠ 0 | Q8_0 | `ggml_vec_dot_iq4_nl_q8_0` (1 column) | two sets of 8 lanes (even and odd blocks) added lane-wise, then the lane tree; an odd last block added as `fma(dx·dy, block_sum, total)` |
//! | IQ4_XS | Q8_K | `ggml_vec_dot_iq4_xs_q8_K` | 8 lanes; lane `l` the exact `Σ_sub-block (ls − 32)·Σ x·y` over values `4l..4l+4` of each sub-block; per super-block `lane = fma(dx·dy, lane_sum, lane)`; the lane tree |
//! | Q4_1, Q5_1 (every shape) | Q8_1 | `ggml_vec_dot_q4_1_q8_1`, `ggml_vec_dot_q5_1_q8_1` (no tinyBLAS or repacked kernel takes them) | the 8 lanes as above over the unsigned codes, and per block `summs = fma(mx, sy, summs)` (GCC contracts `summs += m·s`); result `hsum(lanes) + summs` |
//! | F16 | F16 | `tinyBLAS` with 16-float vectors (≥ 2 columns, k % 16 = 0, rows % 4 = 0) | 16 FMA lanes over k, GCC's `_mm512_reduce_add_ps` tree |
//! | F16 | F16 | `ggml_vec_dot_f16` (otherwise) | 4 × 16 FMA lanes over blocks of 64, fixed tree, tail in f64 |
//!
//! Activations are quantized as `quantize_row_q8_0` and `quantize_row_q8_1` do on x86
//! (`d = max/127`, `id = 127/max`, codes rounded half to even; Q8_1 also `s = f16(d·Σq)`) —
//! not as the reference quantizers used for files (`id = 1/d`, halves away from zero). The element-wise pieces ggml vectorises with
//! approximations are here too: `ggml_v_expf` and the SiLU built on it, and the rotary
//! embedding with the FMAs GCC contracts it to.
//!
//! Every function has a portable body; on x86-64 with AVX2 + FMA + F16C the same body is
//! compiled with those features (FMA is exact-then-rounded, so both give the same bits).
//!
//! The pieces: `dots` (block dot products), `f16` (F16 and F32 dot products and tiles),
//! `quantize` (activation quantizers), `exp` (`expf`, SiLU, SwiGLU), `lanes` (block sizes and
//! the final lane trees they share); their `#[target_feature]` kernels are in
//! `kernels::x86`. This module chooses among them for a `mul_mat` (and holds the rotary pair).

mod dots;
mod exp;
mod f16;
pub(crate) mod lanes;
mod quantize;
#[cfg(test)]
mod tests;

pub(crate) use dots::*;
pub use exp::v_expf;
pub(crate) use exp::{swiglu_row, v_expf16};
pub(crate) use f16::*;
pub(crate) use lanes::reduce16;
pub(crate) use quantize::activation_quantizer;
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) use quantize::{quantize_row_q8_0_x86, quantize_row_q8_1_x86};

use crate::dtype::DType;
use crate::quants::dispatch::{ggml_sum_order, ggml_sum_order_cols, SumOrder};
use crate::quants::VecDotKernel as VecDotFn;

// -------------------------------------------------------------------------------------------
// Choosing the dot product of a mul_mat
// -------------------------------------------------------------------------------------------

/// The dot product ggml would use for weights of type `dtype` and shape `ne` against
/// `n_cols` activation rows per batch (`None`: no ggml-order kernel for this type; use the
/// generic one). Only `kernels::select` chooses with it.
pub(crate) fn mul_mat_dot(dtype: DType, ne: [usize; 4], n_cols: usize) -> Option<VecDotFn> {
    let rows = ne[1];
    let two_d = ne[2] == 1 && ne[3] == 1;
    // Q4_K and Q2_K weights llama.cpp repacks: the GEMV order (every column past
    // `mul_mat_gemm`'s, and every column below four).
    if let Some((gemv, _)) = repacked_dots(dtype, ne) {
        return Some(gemv);
    }
    // k-quants, IQ4_XS and the grid i-quants from 8 columns on: llama.cpp's tiled matmul.
    if ggml_sum_order_cols(dtype, ne, n_cols) == SumOrder::GgmlTiled {
        return tiled_dot(dtype);
    }
    match dtype {
        DType::Q8_0 => Some(dot_q8_0_lanes),
        // llama.cpp repacks 2-D Q4_0 weights whose row count is a multiple of 8.
        DType::Q4_0 if rows.is_multiple_of(8) && two_d => Some(dot_q4_0_chain),
        DType::Q4_0 => Some(dot_q4_0_lanes),
        DType::Q5_0 => Some(dot_q5_0_lanes),
        // IQ4_NL: repacked as Q4_0 is; otherwise tinyBLAS for prompts, the vec_dot for one
        // column.
        DType::IQ4NL if rows.is_multiple_of(8) && two_d => Some(dot_iq4_nl_chain),
        DType::IQ4NL if n_cols >= 2 => Some(dot_iq4_nl_lanes),
        DType::IQ4NL => Some(dot_iq4_nl_pairs),
        DType::IQ4XS => Some(dot_iq4_xs_lanes),
        // No tinyBLAS or repacked kernel takes Q4_1/Q5_1: `ggml_vec_dot_*_q8_1` for every shape.
        DType::Q3K => Some(crate::quants::k_quants::tiled::dot_q3_k_vec),
        DType::Q5K => Some(crate::quants::k_quants::tiled::dot_q5_k_vec),
        DType::Q6K => Some(crate::quants::k_quants::tiled::dot_q6_k_vec),
        DType::Q4_1 => Some(dot_q4_1_lanes),
        DType::Q5_1 => Some(dot_q5_1_lanes),
        DType::F16 if f16_uses_lanes16(ne, n_cols) => Some(dot_f16_lanes16),
        DType::F16 => Some(dot_f16_vec),
        // F32 weights: see `mul_mat_dot_f32` (the choice also depends on the activations'
        // layout). Block types that declare their x86 orders in their own file
        // (`BlockQuant::GGML_X86_REPACKED_DOT` for the weights llama.cpp repacks,
        // `BlockQuant::GGML_X86_DOT` for the rest): that order.
        _ => (rows.is_multiple_of(8) && two_d)
            .then(|| crate::quants::ggml_x86_repacked_dot(dtype))
            .flatten()
            .or_else(|| crate::quants::ggml_x86_dot(dtype)),
    }
}

/// For weights llama.cpp multiplies with its repacked Q4_K / Q2_K kernels
/// (`quants::k_quants::repacked`), against `n_cols` activation columns per batch: the number
/// of leading columns of each batch that take its GEMM kernel's order, and that order's dot
/// product. [`mul_mat_dot`] gives the GEMV order, for the other columns. `None` for other
/// weights, or when no column takes the GEMM (fewer than four).
pub(crate) fn mul_mat_gemm(
    dtype: DType,
    ne: [usize; 4],
    n_cols: usize,
) -> Option<(usize, VecDotFn)> {
    let cols = crate::quants::k_quants::repacked::gemm_columns(n_cols);
    let (_, gemm) = repacked_dots(dtype, ne)?;
    (cols > 0).then_some((cols, gemm))
}

/// The (GEMV, GEMM) dot products of a Q4_K or Q2_K weight llama.cpp repacks.
fn repacked_dots(dtype: DType, ne: [usize; 4]) -> Option<(VecDotFn, VecDotFn)> {
    if ggml_sum_order(dtype, ne) != SumOrder::GgmlRepacked {
        return None;
    }
    match dtype {
        DType::Q4K => Some((dot_q4_k_gemv, dot_q4_k_gemm)),
        DType::Q2K => Some((dot_q2_k_gemv, dot_q2_k_gemm)),
        _ => None,
    }
}

/// The portable dot product of k-quant (IQ4_XS, grid i-quant) type `dtype` in ggml's tiled
/// order.
fn tiled_dot(dtype: DType) -> Option<VecDotFn> {
    use crate::quants::k_quants::tiled::dot_tiled;
    use crate::quants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
    Some(match dtype {
        DType::Q2K => dot_tiled::<BlockQ2K>,
        DType::Q3K => dot_tiled::<BlockQ3K>,
        DType::Q4K => dot_tiled::<BlockQ4K>,
        DType::Q5K => dot_tiled::<BlockQ5K>,
        DType::Q6K => dot_tiled::<BlockQ6K>,
        DType::IQ4XS => dot_tiled::<crate::quants::iq4::BlockIQ4XS>,
        DType::IQ2XXS => dot_tiled::<crate::quants::BlockIQ2XXS>,
        DType::IQ2XS => dot_tiled::<crate::quants::BlockIQ2XS>,
        DType::IQ2S => dot_tiled::<crate::quants::BlockIQ2S>,
        DType::IQ3XXS => dot_tiled::<crate::quants::BlockIQ3XXS>,
        DType::IQ3S => dot_tiled::<crate::quants::BlockIQ3S>,
        DType::IQ1S => dot_tiled::<crate::quants::BlockIQ1S>,
        DType::IQ1M => dot_tiled::<crate::quants::BlockIQ1M>,
        _ => return None,
    })
}

/// True when the SIMD builds of `quants::dispatch::ggml_sum_order`'s order for weight `a`
/// give [`mul_mat_dot`]'s bits against `n_cols` columns per batch. False only for IQ4_NL
/// weights llama.cpp does not repack, against one column: `ggml_vec_dot_iq4_nl_q8_0`'s
/// order, which only [`mul_mat_dot`]'s kernel keeps.
pub(crate) fn simd_order_holds(dtype: DType, ne: [usize; 4], n_cols: usize) -> bool {
    let repacked = ne[1].is_multiple_of(8) && ne[2] == 1 && ne[3] == 1;
    !(dtype == DType::IQ4NL && !repacked && n_cols < 2)
}

/// True when ggml multiplies an F16 weight of shape `ne` by `n_cols` columns per batch with
/// tinyBLAS ([`dot_f16_lanes16`]'s order), false for `ggml_vec_dot_f16` ([`dot_f16_vec`]).
pub(crate) fn f16_uses_lanes16(ne: [usize; 4], n_cols: usize) -> bool {
    n_cols >= 2 && ne[0].is_multiple_of(16) && ne[1].is_multiple_of(4)
}

/// The dot product ggml uses for an F32 weight of shape `ne` against `n_cols` activation
/// columns per batch, `b_contiguous` telling whether the activations are one contiguous
/// block (`ggml_is_contiguous`): llamafile's tinyBLAS ([`dot_f32_lanes16`]) when it takes
/// the product (at least two columns, contiguous activations, `k` a multiple of its 16
/// lanes, rows a multiple of 4 — tinyBLAS refuses other row counts, such as Qwen3.5-MoE's
/// one-row shared-expert gate), else `ggml_vec_dot_f32` ([`dot_f32_vec`]).
pub(crate) fn mul_mat_dot_f32(
    ne: [usize; 4],
    n_cols: usize,
    b_contiguous: bool,
) -> Option<VecDotFn> {
    if n_cols >= 2 && b_contiguous && ne[0].is_multiple_of(16) && ne[1].is_multiple_of(4) {
        Some(dot_f32_lanes16)
    } else {
        Some(dot_f32_vec)
    }
}

/// One rotary pair as GCC compiles ggml's `rotate_pairs`: `(x0, x1)` turned by `(cos, sin)`
/// to `(x0·c − x1·s, x0·s + x1·c)`, the `x0` products fused with the rounded `x1` products.
/// NEOX pairs run in a scalar loop, adjacent pairs in a vector loop whose last
/// `n_pairs % 4` pairs run unfused (`fused = false`).
#[inline(always)]
pub(crate) fn rotate_pair(x0: f32, x1: f32, c: f32, s: f32, fused: bool) -> (f32, f32) {
    if fused {
        (x0.mul_add(c, -(x1 * s)), x0.mul_add(s, x1 * c))
    } else {
        (x0 * c - x1 * s, x0 * s + x1 * c)
    }
}
