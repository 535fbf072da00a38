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

use half::f16;

use crate::cpu::{isa, Isa};
use crate::dtype::DType;
use crate::quants::dispatch::{ggml_sum_order, ggml_sum_order_cols, SumOrder};
use crate::quants::k_quants::repacked::{q2_k_gemm, q2_k_gemv, q4_k_gemm, q4_k_gemv};
use crate::quants::VecDotKernel as VecDotFn;
use crate::types::FromF32Fn;

/// Bytes of a Q8_0 block (f16 scale, 32 codes).
const Q8_0_BYTES: usize = 34;
/// Bytes of a Q4_0 block (f16 scale, 16 bytes of nibbles).
const Q4_0_BYTES: usize = 18;
/// Bytes of a Q5_0 block (f16 scale, 4 bytes of fifth bits, 16 of nibbles).
const Q5_0_BYTES: usize = 22;
/// Bytes of an IQ4_NL block (f16 scale, 16 bytes of level indices).
const IQ4NL_BYTES: usize = 18;
/// Bytes of an IQ4_XS super-block (f16 scale, u16 and 4 bytes of scales, 128 bytes of
/// indices).
const IQ4XS_BYTES: usize = 136;
/// Bytes of a Q8_K block (f32 scale, 256 codes, 16 i16 sums).
const Q8K_BYTES: usize = 292;
/// Bytes of a Q8_1 block (f16 scale, f16 `d·Σq`, 32 codes).
const Q8_1_BYTES: usize = 36;
/// Bytes of a Q4_1 block (f16 scale, f16 minimum, 16 bytes of nibbles).
const Q4_1_BYTES: usize = 20;
/// Bytes of a Q5_1 block (f16 scale, f16 minimum, 4 bytes of fifth bits, 16 of nibbles).
const Q5_1_BYTES: usize = 24;

#[inline(always)]
fn half_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

// -------------------------------------------------------------------------------------------
// Choosing the dot product of a mul_mat
// -------------------------------------------------------------------------------------------

/// The dot product ggml would use for weights of type `dtype` and shape `ne` against
/// `n_cols` activation rows per batch (`None`: no ggml-order kernel for this type; use the
/// generic one). Only `kernels::matmul::select` chooses with it.
pub(crate) fn mul_mat_dot(dtype: DType, ne: [usize; 4], n_cols: usize) -> Option<VecDotFn> {
    let rows = ne[1];
    let two_d = ne[2] == 1 && ne[3] == 1;
    // Q4_K and Q2_K weights llama.cpp repacks: the GEMV order (every column past
    // `mul_mat_gemm`'s, and every column below four).
    if let Some((gemv, _)) = repacked_dots(dtype, ne) {
        return Some(gemv);
    }
    // k-quants and IQ4_XS from 8 columns on: llama.cpp's tiled matmul.
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
        // layout).
        _ => None,
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

/// The portable dot product of k-quant (or IQ4_XS) type `dtype` in ggml's tiled order.
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

/// The runtime quantizer of activations for `vdt`, when it differs from the type's
/// reference one.
pub(crate) fn activation_quantizer(vdt: DType) -> Option<FromF32Fn> {
    match vdt {
        DType::Q8_0 => Some(quantize_row_q8_0_x86),
        DType::Q8_1 => Some(quantize_row_q8_1_x86),
        _ => None,
    }
}

// -------------------------------------------------------------------------------------------
// Activation quantization
// -------------------------------------------------------------------------------------------

/// ggml's x86 `quantize_row_q8_0`: per block of 32, `d = amax/127` stored as f16,
/// codes `round_half_even(x · 127/amax)`. `x.len()` is a multiple of 32 and `out` holds
/// `x.len()/32` blocks.
pub fn quantize_row_q8_0_x86(x: &[f32], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx2 {
        // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2, FMA and F16C.
        return unsafe { x86::quantize_row_q8_0(x, out) };
    }
    quantize_row_q8_0_body(x, out)
}

/// [`quantize_row_q8_0_x86`]'s portable body.
#[inline(always)]
fn quantize_row_q8_0_body(x: &[f32], out: &mut [u8]) {
    for (xs, blk) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let amax = xs.iter().fold(0f32, |m, &v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        blk[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        for (q, &v) in blk[2..].iter_mut().zip(xs) {
            *q = ((v * id).round_ties_even() as i32).clamp(-128, 127) as i8 as u8;
        }
    }
}

/// ggml's x86 `quantize_row_q8_1` (AVX2 build), for every input: per block of 32,
/// `amax = max |x|` in the order of its `max_ps` instructions, `d = amax/127` stored as f16,
/// `id = 127/amax` (0 when `amax` is 0), codes `cvtps2dq(round_half_even(x·id))` saturated to
/// i8, and `s = f16(d · Σ codes)` (the sum of the 32-bit codes, wrapping, as f32). For
/// finite inputs with a normal `amax` this is [`quantize_row_q8_0_x86`]'s `d` and codes;
/// NaN, infinities and tiny maxima give what the instructions give (`cvtps2dq` turns NaN
/// and out-of-range values into `i32::MIN`; `maxps` returns its second operand when one is
/// NaN). `x.len()` is a multiple of 32 and `out` holds `x.len()/32` blocks of 36 bytes
/// (`d`, `s`, 32 codes).
pub fn quantize_row_q8_1_x86(x: &[f32], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx2 {
        // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2, FMA and F16C.
        return unsafe { x86::quantize_row_q8_1(x, out) };
    }
    quantize_row_q8_1_body(x, out)
}

/// x86's `maxps` on one lane: `a` if `a > b`, else `b` (so `b` when either is NaN).
#[inline(always)]
fn maxps(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// x86's `cvtps2dq` on one lane of an integral value: `i32::MIN` for NaN and values outside
/// the `i32` range.
#[inline(always)]
fn cvtps2dq(r: f32) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&r) {
        r as i32
    } else {
        i32::MIN
    }
}

/// [`quantize_row_q8_1_x86`]'s portable body.
#[inline(always)]
fn quantize_row_q8_1_body(x: &[f32], out: &mut [u8]) {
    for (xs, blk) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_1_BYTES)) {
        // ggml: lanes of |v0|, then max with |v1|, |v2|, |v3| (8 lanes each), then the
        // halves (high first), the upper pair, the odd lane.
        let mut m = [0f32; 8];
        for l in 0..8 {
            m[l] = xs[l].abs();
            for k in 1..4 {
                m[l] = maxps(m[l], xs[8 * k + l].abs());
            }
        }
        let m4: [f32; 4] = std::array::from_fn(|l| maxps(m[4 + l], m[l]));
        let m2 = [maxps(m4[0], m4[2]), maxps(m4[1], m4[3])];
        let amax = maxps(m2[0], m2[1]);
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in blk[4..].iter_mut().zip(xs) {
            let c = cvtps2dq((v * id).round_ties_even());
            sum = sum.wrapping_add(c);
            *q = c.clamp(-128, 127) as i8 as u8;
        }
        blk[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        blk[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_le_bytes());
    }
}

// -------------------------------------------------------------------------------------------
// Dot products (portable bodies)
// -------------------------------------------------------------------------------------------

/// `_mm256` horizontal sum as ggml's `hsum_float_8` and tinyBLAS's `hsum` do it.
#[inline(always)]
fn hsum8(v: &[f32; 8]) -> f32 {
    let h = [v[4] + v[0], v[5] + v[1], v[6] + v[2], v[7] + v[3]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// GCC's `_mm512_reduce_add_ps`: halves of 8 lanes, then of 4, then lanes (0+2) + (1+3).
#[inline(always)]
pub(crate) fn reduce16(v: &[f32; 16]) -> f32 {
    let mut h8 = [0f32; 8];
    for i in 0..8 {
        h8[i] = v[i + 8] + v[i];
    }
    let mut h4 = [0f32; 4];
    for i in 0..4 {
        h4[i] = h8[i + 4] + h8[i];
    }
    (h4[0] + h4[2]) + (h4[1] + h4[3])
}

/// Codes of a Q4_0 block in value order (`q − 8`).
#[inline(always)]
fn q4_codes(blk: &[u8]) -> [i32; 32] {
    let mut v = [0i32; 32];
    for j in 0..16 {
        v[j] = (blk[2 + j] & 0x0F) as i32 - 8;
        v[j + 16] = (blk[2 + j] >> 4) as i32 - 8;
    }
    v
}

/// Levels of an IQ4_NL block in value order (`KVALUES_IQ4NL[index]`).
#[inline(always)]
fn iq4_nl_codes(blk: &[u8]) -> [i32; 32] {
    iq4_levels(&blk[2..18])
}

/// The 32 levels of 16 index bytes in IQ4_NL's layout, in value order.
#[inline(always)]
fn iq4_levels(qs: &[u8]) -> [i32; 32] {
    use crate::quants::iq4::KVALUES_IQ4NL;
    let mut v = [0i32; 32];
    for j in 0..16 {
        v[j] = KVALUES_IQ4NL[(qs[j] & 0x0F) as usize] as i32;
        v[j + 16] = KVALUES_IQ4NL[(qs[j] >> 4) as usize] as i32;
    }
    v
}

/// Eight exact lane sums of four products (lane `l`: values `4l..4l + 4`).
#[inline(always)]
fn quad_sums(x: &[i32; 32], y: &[i32; 32]) -> [i32; 8] {
    std::array::from_fn(|l| {
        x[4 * l] * y[4 * l]
            + x[4 * l + 1] * y[4 * l + 1]
            + x[4 * l + 2] * y[4 * l + 2]
            + x[4 * l + 3] * y[4 * l + 3]
    })
}

#[inline(always)]
fn q8_codes(blk: &[u8]) -> [i32; 32] {
    let mut v = [0i32; 32];
    for j in 0..32 {
        v[j] = blk[2 + j] as i8 as i32;
    }
    v
}

/// Eight lane sums of four products each, FMA-accumulated per block, then [`hsum8`].
#[inline(always)]
fn lanes8(nb: usize, block: impl Fn(usize) -> (f32, [i32; 32], [i32; 32])) -> f32 {
    let mut acc = [0f32; 8];
    for i in 0..nb {
        let (d, x, y) = block(i);
        for l in 0..8 {
            let p = x[4 * l] * y[4 * l]
                + x[4 * l + 1] * y[4 * l + 1]
                + x[4 * l + 2] * y[4 * l + 2]
                + x[4 * l + 3] * y[4 * l + 3];
            acc[l] = d.mul_add(p as f32, acc[l]);
        }
    }
    hsum8(&acc)
}

/// The Q4_1/Q5_1 order: [`lanes8`] over the unsigned codes, the minimum terms in one
/// FMA chain `summs = fma(mx, sy, summs)` beside it, and `hsum8(lanes) + summs` at the end.
/// `block(i)` gives `(dx·dy, x codes, y codes, mx, sy)`.
#[inline(always)]
fn lanes8_min(nb: usize, block: impl Fn(usize) -> (f32, [i32; 32], [i32; 32], f32, f32)) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for i in 0..nb {
        let (d, x, y, m, s) = block(i);
        summs = m.mul_add(s, summs);
        for l in 0..8 {
            let p = x[4 * l] * y[4 * l]
                + x[4 * l + 1] * y[4 * l + 1]
                + x[4 * l + 2] * y[4 * l + 2]
                + x[4 * l + 3] * y[4 * l + 3];
            acc[l] = d.mul_add(p as f32, acc[l]);
        }
    }
    hsum8(&acc) + summs
}

/// Codes of a Q8_1 block in value order.
#[inline(always)]
fn q8_1_codes(blk: &[u8]) -> [i32; 32] {
    let mut v = [0i32; 32];
    for j in 0..32 {
        v[j] = blk[4 + j] as i8 as i32;
    }
    v
}

/// Codes of a Q4_1 block in value order (0..=15).
#[inline(always)]
fn q4_1_codes(blk: &[u8]) -> [i32; 32] {
    let mut v = [0i32; 32];
    for j in 0..16 {
        v[j] = (blk[4 + j] & 0x0F) as i32;
        v[j + 16] = (blk[4 + j] >> 4) as i32;
    }
    v
}

/// Codes of a Q5_1 block in value order (0..=31): nibbles as Q4_1, bit `j` of `qh` as bit 4
/// of value `j`.
#[inline(always)]
fn q5_1_codes(blk: &[u8]) -> [i32; 32] {
    let qh = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
    let mut v = [0i32; 32];
    for j in 0..16 {
        v[j] = (blk[8 + j] & 0x0F) as i32 | (((qh >> j) & 1) << 4) as i32;
        v[j + 16] = (blk[8 + j] >> 4) as i32 | (((qh >> (j + 16)) & 1) << 4) as i32;
    }
    v
}

#[inline(always)]
fn dot_q4_1_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8_min(n / 32, |i| {
        let (x, y) = (&a[i * Q4_1_BYTES..], &b[i * Q8_1_BYTES..]);
        let d = half_at(x, 0) * half_at(y, 0);
        (
            d,
            q4_1_codes(x),
            q8_1_codes(y),
            half_at(x, 2),
            half_at(y, 2),
        )
    })
}

#[inline(always)]
fn dot_q5_1_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8_min(n / 32, |i| {
        let (x, y) = (&a[i * Q5_1_BYTES..], &b[i * Q8_1_BYTES..]);
        let d = half_at(x, 0) * half_at(y, 0);
        (
            d,
            q5_1_codes(x),
            q8_1_codes(y),
            half_at(x, 2),
            half_at(y, 2),
        )
    })
}

#[inline(always)]
fn dot_q8_0_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8(n / 32, |i| {
        let (x, y) = (&a[i * Q8_0_BYTES..], &b[i * Q8_0_BYTES..]);
        (half_at(x, 0) * half_at(y, 0), q8_codes(x), q8_codes(y))
    })
}

/// Codes of a Q5_0 block in value order (`(nibble | fifth_bit << 4) − 16`).
#[inline(always)]
fn q5_0_codes(blk: &[u8]) -> [i32; 32] {
    let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
    std::array::from_fn(|j| {
        let byte = blk[6 + j % 16];
        let nib = if j < 16 { byte & 0x0F } else { byte >> 4 } as i32;
        (nib | (((qh >> j) & 1) as i32) << 4) - 16
    })
}

#[inline(always)]
fn dot_q5_0_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8(n / 32, |i| {
        let (x, y) = (&a[i * Q5_0_BYTES..], &b[i * Q8_0_BYTES..]);
        (half_at(x, 0) * half_at(y, 0), q5_0_codes(x), q8_codes(y))
    })
}

#[inline(always)]
fn dot_q4_0_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8(n / 32, |i| {
        let (x, y) = (&a[i * Q4_0_BYTES..], &b[i * Q8_0_BYTES..]);
        (half_at(x, 0) * half_at(y, 0), q4_codes(x), q8_codes(y))
    })
}

#[inline(always)]
fn dot_q4_0_chain_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = 0f32;
    for i in 0..n / 32 {
        let (x, y) = (&a[i * Q4_0_BYTES..], &b[i * Q8_0_BYTES..]);
        let (qx, qy) = (q4_codes(x), q8_codes(y));
        let s: i32 = qx.iter().zip(&qy).map(|(p, q)| p * q).sum();
        acc = (s as f32).mul_add(half_at(x, 0) * half_at(y, 0), acc);
    }
    acc
}

#[inline(always)]
fn dot_iq4_nl_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8(n / 32, |i| {
        let (x, y) = (&a[i * IQ4NL_BYTES..], &b[i * Q8_0_BYTES..]);
        (half_at(x, 0) * half_at(y, 0), iq4_nl_codes(x), q8_codes(y))
    })
}

#[inline(always)]
fn dot_iq4_nl_chain_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = 0f32;
    for i in 0..n / 32 {
        let (x, y) = (&a[i * IQ4NL_BYTES..], &b[i * Q8_0_BYTES..]);
        let (qx, qy) = (iq4_nl_codes(x), q8_codes(y));
        let s: i32 = qx.iter().zip(&qy).map(|(p, q)| p * q).sum();
        acc = (s as f32).mul_add(half_at(x, 0) * half_at(y, 0), acc);
    }
    acc
}

/// `ggml_vec_dot_iq4_nl_q8_0` (AVX2): blocks in pairs, the even ones into one set of eight
/// lanes and the odd ones into another (`lane = fma(dy·dx, lane_sum, lane)`), the sets added
/// lane by lane and reduced as `hsum_float_8`; an odd last block in C, `sumf += d·sumi`,
/// which GCC contracts to one FMA.
#[inline(always)]
fn dot_iq4_nl_pairs_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let nb = n / 32;
    let block = |i: usize| {
        let (x, y) = (&a[i * IQ4NL_BYTES..], &b[i * Q8_0_BYTES..]);
        let d = half_at(y, 0) * half_at(x, 0);
        (d, quad_sums(&iq4_nl_codes(x), &q8_codes(y)))
    };
    let (mut acc1, mut acc2) = ([0f32; 8], [0f32; 8]);
    let mut ib = 0;
    while ib + 1 < nb {
        let (d1, l1) = block(ib);
        let (d2, l2) = block(ib + 1);
        for l in 0..8 {
            acc1[l] = d1.mul_add(l1[l] as f32, acc1[l]);
            acc2[l] = d2.mul_add(l2[l] as f32, acc2[l]);
        }
        ib += 2;
    }
    let both: [f32; 8] = std::array::from_fn(|l| acc1[l] + acc2[l]);
    let mut sumf = hsum8(&both);
    while ib < nb {
        let (d, l) = block(ib);
        let s: i32 = l.iter().sum();
        sumf = d.mul_add(s as f32, sumf);
        ib += 1;
    }
    sumf
}

/// `ggml_vec_dot_iq4_xs_q8_K` (AVX2): see the module table.
#[inline(always)]
fn dot_iq4_xs_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for i in 0..n / 256 {
        let (x, y) = (&a[i * IQ4XS_BYTES..], &b[i * Q8K_BYTES..]);
        let sh = u16::from_le_bytes([x[2], x[3]]);
        let mut lanes = [0i32; 8];
        for ib in 0..8 {
            let low = (x[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
            let high = ((sh >> (2 * ib)) & 3) as u8;
            let ls = (low | (high << 4)) as i32 - 32;
            let qx = iq4_levels(&x[8 + 16 * ib..8 + 16 * ib + 16]);
            let qy: [i32; 32] = std::array::from_fn(|j| y[4 + 32 * ib + j] as i8 as i32);
            for (lane, q) in lanes.iter_mut().zip(quad_sums(&qx, &qy)) {
                *lane += ls * q;
            }
        }
        let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let d = half_at(x, 0) * dy;
        for l in 0..8 {
            acc[l] = d.mul_add(lanes[l] as f32, acc[l]);
        }
    }
    hsum8(&acc)
}

/// The dot product ggml uses for an F32 weight of shape `ne` against `n_cols` activation
/// columns per batch, `b_contiguous` telling whether the activations are one contiguous
/// block (`ggml_is_contiguous`): llamafile's tinyBLAS ([`dot_f32_lanes16`]) when it takes
/// the product (at least two columns, contiguous activations, `k` a multiple of its 16
/// lanes), else `ggml_vec_dot_f32` ([`dot_f32_vec`]).
pub(crate) fn mul_mat_dot_f32(
    ne: [usize; 4],
    n_cols: usize,
    b_contiguous: bool,
) -> Option<VecDotFn> {
    if n_cols >= 2 && b_contiguous && ne[0].is_multiple_of(16) {
        Some(dot_f32_lanes16)
    } else {
        Some(dot_f32_vec)
    }
}

/// [`dot_f32_lanes16`]'s body (portable; compiled with FMA where the CPU has it, where
/// `mul_add` is one instruction instead of a library call, with the same bits).
#[inline(always)]
fn dot_f32_lanes16_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let (a, b): (&[f32], &[f32]) = (bytemuck::cast_slice(a), bytemuck::cast_slice(b));
    let m = n / 16 * 16;
    let mut lanes = [0f32; 16];
    for (ca, cb) in a[..m].chunks_exact(16).zip(b[..m].chunks_exact(16)) {
        for (l, lane) in lanes.iter_mut().enumerate() {
            *lane = ca[l].mul_add(cb[l], *lane);
        }
    }
    let mut sum = reduce16(&lanes);
    for i in m..n {
        sum += a[i] * b[i];
    }
    sum
}

/// [`dot_f32_vec`]'s body (portable; compiled with FMA where the CPU has it).
#[inline(always)]
fn dot_f32_vec_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let (a, b): (&[f32], &[f32]) = (bytemuck::cast_slice(a), bytemuck::cast_slice(b));
    let np = n & !63;
    let mut sum = dot_f16_vec_f32_body(&a[..np], &b[..np]);
    for i in np..n {
        sum += a[i] * b[i];
    }
    sum
}

#[inline(always)]
pub(crate) fn dot_f16_lanes16_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut lanes = [0f32; 16];
    for i in (0..n / 16 * 16).step_by(16) {
        for (l, lane) in lanes.iter_mut().enumerate() {
            let (x, y) = (half_at(a, 2 * (i + l)), half_at(b, 2 * (i + l)));
            *lane = x.mul_add(y, *lane);
        }
    }
    reduce16(&lanes)
}

/// ggml's `ggml_vec_dot_f16` on AVX-512 over values already widened to f32 (`x`, `y` hold f16
/// values): four registers of 16 FMA lanes over blocks of 64, registers 0+2 and 1+3 then
/// 0+1 added, [`reduce16`]; the tail products (exact in f32) added in f64.
#[inline(always)]
pub(crate) fn dot_f16_vec_f32_body(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let np = n & !63;
    let mut lanes = [0f32; 64];
    for (cx, cy) in x[..np].chunks_exact(64).zip(y[..np].chunks_exact(64)) {
        for t in 0..64 {
            lanes[t] = cx[t].mul_add(cy[t], lanes[t]);
        }
    }
    let mut r32 = [0f32; 32];
    for t in 0..32 {
        r32[t] = lanes[t] + lanes[t + 32];
    }
    let mut r16 = [0f32; 16];
    for t in 0..16 {
        r16[t] = r32[t] + r32[t + 16];
    }
    let mut sum = reduce16(&r16) as f64;
    for i in np..n {
        sum += (x[i] * y[i]) as f64;
    }
    sum as f32
}

/// `ggml_vec_dot_f16` on AVX-512 over f16 rows: [`dot_f16_vec_f32_body`]'s arithmetic with
/// each value widened on the way.
#[inline(always)]
pub(crate) fn dot_f16_vec_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    // Widen in blocks so the arithmetic stays that of `dot_f16_vec_f32_body`.
    let np = n & !63;
    let mut lanes = [0f32; 64];
    for blk in (0..np).step_by(64) {
        for (t, lane) in lanes.iter_mut().enumerate() {
            let (x, y) = (half_at(a, 2 * (blk + t)), half_at(b, 2 * (blk + t)));
            *lane = x.mul_add(y, *lane);
        }
    }
    let mut r32 = [0f32; 32];
    for t in 0..32 {
        r32[t] = lanes[t] + lanes[t + 32];
    }
    let mut r16 = [0f32; 16];
    for t in 0..16 {
        r16[t] = r32[t] + r32[t + 16];
    }
    let mut sum = reduce16(&r16) as f64;
    for i in np..n {
        sum += (half_at(a, 2 * i) * half_at(b, 2 * i)) as f64;
    }
    sum as f32
}

macro_rules! dispatch_dot {
    ($(#[$m:meta])* $name:ident, $body:ident) => {
        $(#[$m])*
        pub(crate) fn $name(n: usize, a: &[u8], b: &[u8]) -> f32 {
            #[cfg(target_arch = "x86_64")]
            if isa() >= Isa::Avx2 {
                // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2, FMA and F16C.
                return unsafe { x86::$name(n, a, b) };
            }
            $body(n, a, b)
        }
    };
}

dispatch_dot!(
    /// Q8_0 · Q8_0 in ggml's x86 lane order (see the module table).
    dot_q8_0_lanes,
    dot_q8_0_lanes_body
);
dispatch_dot!(
    /// llamafile's tinyBLAS on AVX-512 for f32 rows (`n` values as bytes): one register of
    /// 16 FMA lanes per output over blocks of 16, then [`reduce16`]; `n` is a multiple of 16
    /// where [`mul_mat_dot_f32`] chooses it (a tail, if any, is added in f32).
    dot_f32_lanes16,
    dot_f32_lanes16_body
);
dispatch_dot!(
    /// `ggml_vec_dot_f32` on AVX-512 for f32 rows (`n` values as bytes): four registers of
    /// 16 FMA lanes over blocks of 64, the same reduction as [`dot_f16_vec_f32_body`]; the
    /// tail (below a block of 64) added in f32, as ggml's f32 sum.
    dot_f32_vec,
    dot_f32_vec_body
);

dispatch_dot!(
    /// Q4_0 · Q8_0 in ggml's x86 lane order (unpacked weights).
    dot_q4_0_lanes,
    dot_q4_0_lanes_body
);
dispatch_dot!(
    /// Q5_0 · Q8_0 in ggml's x86 lane order (`ggml_vec_dot_q5_0_q8_0`, tinyBLAS).
    dot_q5_0_lanes,
    dot_q5_0_lanes_body
);
dispatch_dot!(
    /// Q4_0 · Q8_0 as the repacked `q4_0_8x8` kernels: one FMA per block.
    dot_q4_0_chain,
    dot_q4_0_chain_body
);
dispatch_dot!(
    /// Q4_K · Q8_K as the repacked `ggml_gemv_q4_K_8x8_q8_K` (one FMA per super-block).
    dot_q4_k_gemv,
    q4_k_gemv
);
dispatch_dot!(
    /// Q4_K · Q8_K as the repacked `ggml_gemm_q4_K_8x8_q8_K` (one FMA per 64 values).
    dot_q4_k_gemm,
    q4_k_gemm
);
dispatch_dot!(
    /// Q2_K · Q8_K as the repacked `ggml_gemv_q2_K_8x8_q8_K` (one FMA per super-block).
    dot_q2_k_gemv,
    q2_k_gemv
);
dispatch_dot!(
    /// Q2_K · Q8_K as the repacked `ggml_gemm_q2_K_8x8_q8_K` (one FMA per 128 values).
    dot_q2_k_gemm,
    q2_k_gemm
);
dispatch_dot!(
    /// IQ4_NL · Q8_0 in tinyBLAS's lane order (unpacked weights, two columns or more).
    dot_iq4_nl_lanes,
    dot_iq4_nl_lanes_body
);
dispatch_dot!(
    /// IQ4_NL · Q8_0 as the repacked `iq4_nl_8x8` kernels: one FMA per block.
    dot_iq4_nl_chain,
    dot_iq4_nl_chain_body
);
dispatch_dot!(
    /// IQ4_NL · Q8_0 as `ggml_vec_dot_iq4_nl_q8_0` (unpacked weights, one column).
    dot_iq4_nl_pairs,
    dot_iq4_nl_pairs_body
);
dispatch_dot!(
    /// IQ4_XS · Q8_K as `ggml_vec_dot_iq4_xs_q8_K`.
    dot_iq4_xs_lanes,
    dot_iq4_xs_lanes_body
);
dispatch_dot!(
    /// Q4_1 · Q8_1 as `ggml_vec_dot_q4_1_q8_1` on x86 (see the module table).
    dot_q4_1_lanes,
    dot_q4_1_lanes_body
);
dispatch_dot!(
    /// Q5_1 · Q8_1 as `ggml_vec_dot_q5_1_q8_1` on x86 (see the module table).
    dot_q5_1_lanes,
    dot_q5_1_lanes_body
);
dispatch_dot!(
    /// F16 · F16 as tinyBLAS: 16 FMA lanes, `_mm512_reduce_add_ps`.
    dot_f16_lanes16,
    dot_f16_lanes16_body
);
dispatch_dot!(
    /// F16 · F16 as `ggml_vec_dot_f16`.
    dot_f16_vec,
    dot_f16_vec_body
);

/// Widens the f16 values in `src` (little-endian, `2 · dst.len()` bytes or more) to f32 in
/// `dst`, exactly, sixteen at a time. Needs `isa() >= Isa::Avx512`.
pub(crate) fn widen_f16(src: &[u8], dst: &mut [f32]) {
    assert!(
        isa() >= Isa::Avx512 && src.len() >= 2 * dst.len(),
        "widen_f16: AVX-512 and two bytes per value"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU features and the lengths were checked above.
    unsafe {
        x86::widen_f16(src.as_ptr(), dst)
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("isa() is below AVX-512 off x86-64")
}

/// [`dot_f16_lanes16_body`] of `R` weight rows (f16, `n` values each, `n` a multiple of 16)
/// against `C` activation rows already widened to f32 (`b[c]` holds `n` f16 values as f32,
/// exactly): `t[r][c]` has the bits of the one-element kernel, each weight row converted
/// once per 16 values for the whole tile. Needs `isa() >= Isa::Avx512`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn f16_lanes16_tile_f32<const R: usize, const C: usize>(
    n: usize,
    a: [&[u8]; R],
    b: [&[f32]; C],
) -> [[f32; C]; R] {
    assert!(
        isa() >= Isa::Avx512
            && n.is_multiple_of(16)
            && a.iter().all(|r| r.len() >= 2 * n)
            && b.iter().all(|r| r.len() >= n),
        "f16_lanes16_tile_f32: AVX-512 and whole rows of n = 16·j values"
    );
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the CPU features and the row lengths were checked above.
        unsafe {
            x86::f16_lanes16_tile_f32::<R, C>(n, a.map(|r| r.as_ptr()), b.map(|r| r.as_ptr()))
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("isa() is below AVX-512 off x86-64")
}

// -------------------------------------------------------------------------------------------
// Element-wise approximations
// -------------------------------------------------------------------------------------------

/// ggml's vectorised `expf` (`ggml_v_expf`, the AVX-512 variant, derived from Arm's optimized
/// routines; maximum error about 1.5 ulp), one lane: `x = n·ln2 + b` with n rounded to an
/// integer, a degree-5 polynomial for `e^b`, scaled by `2ⁿ`; results flush to 0 below about
/// −104 and to +∞ above about 88.4.
#[inline]
pub fn v_expf(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0; // 0x1.8p23: adding it rounds to an integer
    let log2e = f32::from_bits(0x3fb8_aa3b); // 0x1.715476p+0
    let ln2_hi = f32::from_bits(0x3f31_7200); // 0x1.62e4p-1
    let ln2_lo = f32::from_bits(0x35bf_be8e); // 0x1.7f7d1cp-20
    let c5 = f32::from_bits(0x3c07_2010); // 0x1.0e4020p-7
    let c4 = f32::from_bits(0x3d2b_9f17); // 0x1.573e2ep-5
    let c3 = f32::from_bits(0x3e2a_af33); // 0x1.555e66p-3
    let c2 = f32::from_bits(0x3eff_fedb); // 0x1.fffdb6p-2
    let c1 = f32::from_bits(0x3f7f_fff6); // 0x1.ffffecp-1
    let z = x.mul_add(log2e, SHIFT);
    let n = z - SHIFT;
    let b = (-n).mul_add(ln2_lo, (-n).mul_add(ln2_hi, x));
    let u = b * b;
    let j = c5
        .mul_add(b, c4)
        .mul_add(u, c3.mul_add(b, c2))
        .mul_add(u, c1.mul_add(b, 1.0));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    scalef(j, n)
}

/// `_mm512_scalef_ps` for an integral `n` with `|n| ≤ 192`: `j · 2ⁿ`, rounded once.
#[inline(always)]
fn scalef(j: f32, n: f32) -> f32 {
    let e = n as i32;
    if (-126..=127).contains(&e) {
        j * f32::from_bits(((e + 127) as u32) << 23)
    } else {
        // 2ⁿ is not an f32 here; the product is exact in f64 and rounds once to f32.
        (j as f64 * f64::from_bits(((e + 1023) as u64) << 52)) as f32
    }
}

/// [`v_expf`] on 16 lanes at once (one AVX-512 register of ggml's). With AVX-512 it runs
/// ggml's own instruction sequence ([`x86::v_expf_512`], `scalef` doing the scaling);
/// elsewhere the portable [`v_expf16_body`]. The tests hold both to [`v_expf`]'s bits.
#[inline(always)]
pub(crate) fn v_expf16(x: &[f32; 16]) -> [f32; 16] {
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx512 {
        // SAFETY: `isa()` is AVX-512 or better only when the CPU has AVX-512 F.
        return unsafe { x86::v_expf16_512(x) };
    }
    v_expf16_body(x)
}

/// The portable body of [`v_expf16`]: the same operations lane by lane, with the scaling by
/// `2ⁿ` done by building the power of two for lanes in the normal range and saturation for
/// lanes far outside it (only a lane in between, or NaN, sends the group to the scalar path).
/// Compiled with AVX2 it vectorises only in part (measured: 11.5 µs for a 4864-value SwiGLU
/// row, against 1.5 µs through [`x86::v_expf_512`]).
#[inline(always)]
fn v_expf16_body(x: &[f32; 16]) -> [f32; 16] {
    const SHIFT: f32 = 12_582_912.0;
    let log2e = f32::from_bits(0x3fb8_aa3b);
    let ln2_hi = f32::from_bits(0x3f31_7200);
    let ln2_lo = f32::from_bits(0x35bf_be8e);
    let c5 = f32::from_bits(0x3c07_2010);
    let c4 = f32::from_bits(0x3d2b_9f17);
    let c3 = f32::from_bits(0x3e2a_af33);
    let c2 = f32::from_bits(0x3eff_fedb);
    let c1 = f32::from_bits(0x3f7f_fff6);
    let mut n = [0f32; 16];
    let mut j = [0f32; 16];
    for l in 0..16 {
        let z = x[l].mul_add(log2e, SHIFT);
        n[l] = z - SHIFT;
        let b = (-n[l]).mul_add(ln2_lo, (-n[l]).mul_add(ln2_hi, x[l]));
        let u = b * b;
        j[l] = c5
            .mul_add(b, c4)
            .mul_add(u, c3.mul_add(b, c2))
            .mul_add(u, c1.mul_add(b, 1.0));
    }
    let mut out = [0f32; 16];
    // Lanes with |n| ≤ 126 scale by a power of two built in the exponent field; lanes with
    // |n| > 192 (−∞ among them: masked scores) saturate to 0 or ∞, as in `v_expf`.
    let mut rare = false;
    for l in 0..16 {
        let normal = n[l].abs() <= 126.0;
        let e = if normal { n[l] as i32 } else { 0 };
        let scaled = j[l] * f32::from_bits(((e + 127) as u32) << 23);
        let saturated = if n[l] <= 0.0 { 0.0 } else { f32::INFINITY };
        out[l] = if normal { scaled } else { saturated };
        let beyond = n[l].abs() > 192.0; // false for NaN
        rare |= !normal && !beyond;
    }
    if rare {
        // A lane between the two ranges, or NaN: the scalar path, lane by lane.
        for l in 0..16 {
            out[l] = v_expf(x[l]);
        }
    }
    out
}

/// ggml's `ggml_vec_swiglu_f32` on AVX-512: `out = silu(g)·u`, with
/// `silu(x) = x / (1 + v_expf(0 − x))` for groups of 16 and `x / (1 + expf(−x))` (the C
/// library's `expf`) for the remaining tail. `u = None` gives plain SiLU
/// (`ggml_vec_silu_f32`, same split).
pub(crate) fn swiglu_row(out: &mut [f32], g: &[f32], u: Option<&[f32]>) {
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx512 {
        // SAFETY: `isa()` is AVX-512 or better only when the CPU has AVX-512 F.
        let done = unsafe { x86::swiglu_groups_512(out, g, u) };
        return swiglu_tail(out, g, u, done);
    }
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx2 {
        // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2, FMA and F16C.
        return unsafe { x86::swiglu_row(out, g, u) };
    }
    swiglu_row_body(out, g, u)
}

#[inline(always)]
fn swiglu_row_body(out: &mut [f32], g: &[f32], u: Option<&[f32]>) {
    let n = out.len().min(g.len());
    let np = n / 16 * 16;
    for i in (0..np).step_by(16) {
        let mut neg = [0f32; 16];
        for l in 0..16 {
            neg[l] = 0.0 - g[i + l];
        }
        let e = v_expf16_body(&neg);
        for l in 0..16 {
            let s = g[i + l] / (1.0 + e[l]);
            out[i + l] = match u {
                Some(u) => s * u[i + l],
                None => s,
            };
        }
    }
    swiglu_tail(out, g, u, np);
}

/// The elements of a SwiGLU row from `from` on, one at a time with the C library's `expf`
/// (ggml's scalar tail).
#[inline(always)]
fn swiglu_tail(out: &mut [f32], g: &[f32], u: Option<&[f32]>, from: usize) {
    let n = out.len().min(g.len());
    for i in from..n {
        let s = crate::kernels::expf::silu(g[i]);
        out[i] = match u {
            Some(u) => s * u[i],
            None => s,
        };
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

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    //! The bodies compiled with AVX2 + FMA + F16C (same operations, vectorised by LLVM).
    macro_rules! with_features {
        ($($name:ident => $body:ident),* $(,)?) => {$(
            /// # Safety
            /// The CPU supports AVX2, FMA and F16C.
            #[target_feature(enable = "avx2,fma,f16c")]
            pub(super) unsafe fn $name(n: usize, a: &[u8], b: &[u8]) -> f32 {
                super::$body(n, a, b)
            }
        )*};
    }
    /// # Safety
    /// The CPU supports AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn quantize_row_q8_0(x: &[f32], out: &mut [u8]) {
        use std::arch::x86_64::*;
        let nb = (x.len() / 32).min(out.len() / super::Q8_0_BYTES);
        // SAFETY: block i < nb: 32 f32 readable at 32·i of x, 34 bytes writable at 34·i of
        // out; unaligned loads and stores; the CPU features are the caller's guarantee.
        unsafe {
            let sign = _mm256_set1_ps(-0.0);
            // Bytes of `packs` come out in the order 0-3, 8-11, 16-19, 24-27, 4-7, …: dwords
            // 0, 4, 1, 5, … restore value order.
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            for i in 0..nb {
                let p = x.as_ptr().add(32 * i);
                let v = [
                    _mm256_loadu_ps(p),
                    _mm256_loadu_ps(p.add(8)),
                    _mm256_loadu_ps(p.add(16)),
                    _mm256_loadu_ps(p.add(24)),
                ];
                let m = _mm256_max_ps(
                    _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                    _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])),
                );
                let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
                let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
                let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
                let d = amax / 127.0;
                let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(d));
                let blk = out.as_mut_ptr().add(super::Q8_0_BYTES * i);
                blk.cast::<u16>()
                    .write_unaligned(_mm_extract_epi16::<0>(h) as u16);
                let idv = _mm256_set1_ps(id);
                let q = v.map(|vk| {
                    let t = _mm256_mul_ps(vk, idv);
                    // NaN (only from infinite inputs) becomes 0, as `as i32` makes it.
                    let t = _mm256_and_ps(t, _mm256_cmp_ps::<_CMP_ORD_Q>(t, t));
                    _mm256_cvtps_epi32(_mm256_round_ps::<
                        { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
                    >(t))
                });
                let b = _mm256_packs_epi16(
                    _mm256_packs_epi32(q[0], q[1]),
                    _mm256_packs_epi32(q[2], q[3]),
                );
                let b = _mm256_permutevar8x32_epi32(b, order);
                _mm256_storeu_si256(blk.add(2).cast(), b);
            }
        }
    }

    /// [`super::quantize_row_q8_1_x86`]: ggml's AVX2 `quantize_row_q8_1`, its instructions in
    /// its order.
    ///
    /// # Safety
    /// The CPU supports AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn quantize_row_q8_1(x: &[f32], out: &mut [u8]) {
        use std::arch::x86_64::*;
        let nb = (x.len() / 32).min(out.len() / super::Q8_1_BYTES);
        // (Register-only F16C operations: safe inside this function's features.)
        let f16_bits = |v: f32| {
            let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(v));
            _mm_extract_epi16::<0>(h) as u16
        };
        // SAFETY: block i < nb: 32 f32 readable at 32·i of x, 36 bytes writable at 36·i of
        // out; unaligned loads and stores; the CPU features are the caller's guarantee.
        unsafe {
            let sign = _mm256_set1_ps(-0.0);
            // Bytes of `packs` come out in the order 0-3, 8-11, 16-19, 24-27, 4-7, …: dwords
            // 0, 4, 1, 5, … restore value order.
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            for i in 0..nb {
                let p = x.as_ptr().add(32 * i);
                let v = [
                    _mm256_loadu_ps(p),
                    _mm256_loadu_ps(p.add(8)),
                    _mm256_loadu_ps(p.add(16)),
                    _mm256_loadu_ps(p.add(24)),
                ];
                // ggml's order (it matters only for NaN: `maxps` keeps its second operand).
                let mut m = _mm256_andnot_ps(sign, v[0]);
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[1]));
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[2]));
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[3]));
                let m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(m), _mm256_castps256_ps128(m));
                let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
                let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
                let d = amax / 127.0;
                let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                let idv = _mm256_set1_ps(id);
                let q = v.map(|vk| {
                    _mm256_cvtps_epi32(_mm256_round_ps::<
                        { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
                    >(_mm256_mul_ps(vk, idv)))
                });
                // Σ codes over the 32-bit values (wrapping), as ggml's `hsum_i32_8`.
                let s8 =
                    _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
                let s4 = _mm_add_epi32(
                    _mm256_castsi256_si128(s8),
                    _mm256_extracti128_si256::<1>(s8),
                );
                let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
                let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<0b10_11_00_01>(s2));
                let sum = _mm_cvtsi128_si32(s1);
                let blk = out.as_mut_ptr().add(super::Q8_1_BYTES * i);
                blk.cast::<u16>().write_unaligned(f16_bits(d));
                blk.add(2)
                    .cast::<u16>()
                    .write_unaligned(f16_bits(d * sum as f32));
                let b = _mm256_packs_epi16(
                    _mm256_packs_epi32(q[0], q[1]),
                    _mm256_packs_epi32(q[2], q[3]),
                );
                let b = _mm256_permutevar8x32_epi32(b, order);
                _mm256_storeu_si256(blk.add(4).cast(), b);
            }
        }
    }

    /// # Safety
    /// The CPU supports AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn swiglu_row(out: &mut [f32], g: &[f32], u: Option<&[f32]>) {
        super::swiglu_row_body(out, g, u)
    }

    use std::arch::x86_64::{
        _mm512_abs_ps, _mm512_add_ps, _mm512_cmp_ps_mask, _mm512_div_ps, _mm512_fnmadd_ps,
        _mm512_mask_blend_ps, _mm512_mul_ps, _mm512_scalef_ps, _mm512_set1_ps, _mm512_sub_ps,
        _CMP_GT_OQ, _CMP_LE_OQ,
    };

    /// ggml's `ggml_v_expf` for AVX-512: [`super::v_expf`] on sixteen lanes, the scaling by
    /// `2ⁿ` done by `scalef` (rounded once, as `super::scalef` does) and lanes with
    /// `|n| > 192` saturated to 0 or +∞.
    ///
    /// # Safety
    /// The CPU supports AVX-512 F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn v_expf_512(x: __m512) -> __m512 {
        let c = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
        let shift = _mm512_set1_ps(12_582_912.0);
        let z = _mm512_fmadd_ps(x, c(0x3fb8_aa3b), shift);
        let n = _mm512_sub_ps(z, shift);
        let b = _mm512_fnmadd_ps(n, c(0x35bf_be8e), _mm512_fnmadd_ps(n, c(0x3f31_7200), x));
        let far = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
        let u = _mm512_mul_ps(b, b);
        let j = _mm512_fmadd_ps(
            _mm512_fmadd_ps(
                _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
                u,
                _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
            ),
            u,
            _mm512_fmadd_ps(c(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
        );
        let res = _mm512_scalef_ps(j, n);
        if far == 0 {
            return res;
        }
        let zero = _mm512_setzero_ps();
        let low = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, zero);
        let alt = _mm512_mask_blend_ps(low, _mm512_set1_ps(f32::INFINITY), zero);
        _mm512_mask_blend_ps(far, res, alt)
    }

    /// [`super::v_expf16`] through [`v_expf_512`].
    ///
    /// # Safety
    /// The CPU supports AVX-512 F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn v_expf16_512(x: &[f32; 16]) -> [f32; 16] {
        let mut out = [0f32; 16];
        // SAFETY: sixteen floats readable at x and writable at out; unaligned accesses.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), v_expf_512(_mm512_loadu_ps(x.as_ptr()))) };
        out
    }

    /// ggml's `ggml_vec_swiglu_f32` (`ggml_vec_silu_f32` without `u`) on AVX-512 for the
    /// whole groups of 16 of the row: `out = g / (1 + v_expf(0 − g)) · u`. Returns where the
    /// groups end (the tail is [`super::swiglu_tail`]'s).
    ///
    /// # Safety
    /// The CPU supports AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn swiglu_groups_512(out: &mut [f32], g: &[f32], u: Option<&[f32]>) -> usize {
        let n = out
            .len()
            .min(g.len())
            .min(u.map_or(usize::MAX, |u| u.len()));
        let np = n / 16 * 16;
        let one = _mm512_set1_ps(1.0);
        let zero = _mm512_setzero_ps();
        for i in (0..np).step_by(16) {
            // SAFETY: i + 16 ≤ n, within out, g and u; unaligned accesses.
            unsafe {
                let x = _mm512_loadu_ps(g.as_ptr().add(i));
                let e = v_expf_512(_mm512_sub_ps(zero, x));
                let s = _mm512_div_ps(x, _mm512_add_ps(one, e));
                let s = match u {
                    Some(u) => _mm512_mul_ps(s, _mm512_loadu_ps(u.as_ptr().add(i))),
                    None => s,
                };
                _mm512_storeu_ps(out.as_mut_ptr().add(i), s);
            }
        }
        np
    }

    with_features!(
        dot_q8_0_lanes => dot_q8_0_lanes_body,
        dot_q4_0_lanes => dot_q4_0_lanes_body,
        dot_q5_0_lanes => dot_q5_0_lanes_body,
        dot_q4_0_chain => dot_q4_0_chain_body,
        dot_iq4_nl_lanes => dot_iq4_nl_lanes_body,
        dot_iq4_nl_chain => dot_iq4_nl_chain_body,
        dot_iq4_nl_pairs => dot_iq4_nl_pairs_body,
        dot_iq4_xs_lanes => dot_iq4_xs_lanes_body,
        dot_q4_1_lanes => dot_q4_1_lanes_body,
        dot_q5_1_lanes => dot_q5_1_lanes_body,
        dot_f32_lanes16 => dot_f32_lanes16_body,
        dot_f32_vec => dot_f32_vec_body,
    );

    // The repacked Q4_K / Q2_K orders: explicit AVX2 kernels (`dispatch::repacked_k`).
    macro_rules! repacked_k {
        ($($name:ident => $kernel:ident, $gemm:literal),* $(,)?) => {$(
            /// # Safety
            /// The CPU supports AVX2, FMA and F16C.
            pub(super) unsafe fn $name(n: usize, a: &[u8], b: &[u8]) -> f32 {
                // SAFETY: the CPU features are the caller's guarantee.
                unsafe { crate::quants::dispatch::repacked_k::$kernel(n, a, b, $gemm) }
            }
        )*};
    }
    repacked_k!(
        dot_q4_k_gemv => dot_q4_k, false,
        dot_q4_k_gemm => dot_q4_k, true,
        dot_q2_k_gemv => dot_q2_k, false,
        dot_q2_k_gemm => dot_q2_k, true,
    );

    use std::arch::x86_64::{
        __m128i, __m256, _mm256_cvtph_ps, _mm256_fmadd_ps, _mm256_setzero_ps, _mm256_storeu_ps,
        _mm_loadu_si128,
    };

    /// Eight f16 values at `p` widened to f32.
    ///
    /// # Safety
    /// 16 bytes are readable at `p`; the CPU supports F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const u8) -> __m256 {
        // SAFETY: forwarded; unaligned load.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }

    use std::arch::x86_64::{
        __m256i, __m512, _mm256_loadu_si256, _mm512_cvtph_ps, _mm512_fmadd_ps, _mm512_loadu_ps,
        _mm512_setzero_ps, _mm512_storeu_ps,
    };

    /// Sixteen f16 values at `p` widened to f32.
    ///
    /// # Safety
    /// 32 bytes are readable at `p`; the CPU supports AVX-512 F/BW/VL.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    unsafe fn load16(p: *const u8) -> __m512 {
        // SAFETY: forwarded; unaligned load.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }

    /// See [`super::widen_f16`].
    ///
    /// # Safety
    /// `2 · dst.len()` bytes are readable at `src`; the CPU supports AVX-512 F/BW/VL.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn widen_f16(src: *const u8, dst: &mut [f32]) {
        let n = dst.len();
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: values i..i + 16 lie in both (caller); unaligned load and store.
            unsafe { _mm512_storeu_ps(dst.as_mut_ptr().add(i), load16(src.add(2 * i))) };
            i += 16;
        }
        for (j, d) in dst.iter_mut().enumerate().skip(i) {
            // SAFETY: value j < n lies in `src` (caller).
            let h = unsafe { std::ptr::read_unaligned(src.add(2 * j) as *const u16) };
            *d = half::f16::from_bits(u16::from_le(h)).to_f32();
        }
    }

    /// The lanes of `v` reduced as [`super::reduce16`].
    ///
    /// # Safety
    /// The CPU supports AVX-512 F/BW/VL.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    unsafe fn reduce(v: __m512) -> f32 {
        let mut lanes = [0f32; 16];
        // SAFETY: `lanes` holds 16 f32; unaligned store.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), v) };
        super::reduce16(&lanes)
    }

    /// [`super::f16_lanes16_tile_f32`]: one register of 16 FMA lanes per pair.
    ///
    /// # Safety
    /// The CPU supports AVX-512 F/BW/VL; `2n` bytes readable at every `a[r]`, `n` f32 at every
    /// `b[c]`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn f16_lanes16_tile_f32<const R: usize, const C: usize>(
        n: usize,
        a: [*const u8; R],
        b: [*const f32; C],
    ) -> [[f32; C]; R] {
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        for i in (0..n).step_by(16) {
            // SAFETY: i + 16 <= n: 32 bytes at offset 2·i of every weight row, 16 f32 at
            // offset i of every activation row.
            unsafe {
                let av: [__m512; R] = std::array::from_fn(|r| load16(a[r].add(2 * i)));
                for c in 0..C {
                    let bv = _mm512_loadu_ps(b[c].add(i));
                    for r in 0..R {
                        acc[r][c] = _mm512_fmadd_ps(av[r], bv, acc[r][c]);
                    }
                }
            }
        }
        if R * C == 16 {
            // SAFETY: AVX-512 F (caller).
            let t = unsafe { reduce_x16(std::array::from_fn(|e| acc[e / C][e % C])) };
            return std::array::from_fn(|r| std::array::from_fn(|c| t[r * C + c]));
        }
        // SAFETY: AVX-512 F (caller).
        acc.map(|row| row.map(|v| unsafe { reduce(v) }))
    }

    /// The horizontal sums of sixteen registers, `out[j] = Σ r[j]`, each added in the tree of
    /// `_mm512_reduce_add_ps` ([`super::reduce16`]): lanes `i + 8` onto `i`, then
    /// `i + 4` onto `i`, then `(h₀ + h₂) + (h₁ + h₃)`. Each level adds the same pairs for
    /// several registers at once; the inputs are paired so that the last level leaves the
    /// sums in order.
    ///
    /// # Safety
    /// The CPU supports AVX-512 F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn sum_lanes_x16(r: &[__m512; 16]) -> __m512 {
        use std::arch::x86_64::{_mm512_shuffle_f32x4, _mm512_shuffle_ps};
        // The sum of two shuffles of (p, q): one with each register's lower parts, one with
        // the upper parts they are added to.
        macro_rules! fold {
            ($shuffle:ident, $lower:literal, $upper:literal) => {
                |p, q| _mm512_add_ps($shuffle::<$lower>(p, q), $shuffle::<$upper>(p, q))
            };
        }
        // Quarters (128 bits) 0 + 2 and 1 + 3 of p and of q: [p's 8 sums, q's 8 sums].
        let l1 = fold!(_mm512_shuffle_f32x4, 0x44, 0xEE);
        // Of [a, b] and [c, d] (8 sums each): halves 0 + 1 of each → [a, b, c, d] (4 each).
        let l2 = fold!(_mm512_shuffle_f32x4, 0x88, 0xDD);
        // Within each quarter: [x₀ + x₂, x₁ + x₃] of p's and of q's four.
        let l3 = fold!(_mm512_shuffle_ps, 0x44, 0xEE);
        // Within each quarter: [p₀ + p₁, p₂ + p₃, q₀ + q₁, q₂ + q₃].
        let l4 = fold!(_mm512_shuffle_ps, 0x88, 0xDD);
        // Quarter lanes after l2: [0, 4, 8, 12], [1, 5, 9, 13], [2, 6, ...], [3, 7, ...];
        // l3 of the first two puts registers (0, 1), (4, 5), (8, 9), (12, 13) in the quarters, l4
        // then lays out 0..16 in order.
        let q0 = l2(l1(r[0], r[4]), l1(r[8], r[12]));
        let q1 = l2(l1(r[1], r[5]), l1(r[9], r[13]));
        let q2 = l2(l1(r[2], r[6]), l1(r[10], r[14]));
        let q3 = l2(l1(r[3], r[7]), l1(r[11], r[15]));
        l4(l3(q0, q1), l3(q2, q3))
    }

    /// [`sum_lanes_x16`] as an array.
    ///
    /// # Safety
    /// The CPU supports AVX-512 F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn reduce_x16(v: [__m512; 16]) -> [f32; 16] {
        let mut out = [0f32; 16];
        // SAFETY: `out` holds 16 f32; unaligned store; the features are this function's.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), sum_lanes_x16(&v)) };
        out
    }

    /// [`super::dot_f16_lanes16_body`] with F16C conversions: lanes 0–7 and 8–15 in two
    /// registers, one FMA each per 16 values, then the same reduction.
    ///
    /// # Safety
    /// The CPU supports AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_f16_lanes16(n: usize, a: &[u8], b: &[u8]) -> f32 {
        let m = n / 16 * 16;
        let (a, b) = (&a[..2 * m], &b[..2 * m]);
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for i in (0..m).step_by(16) {
            // SAFETY: i + 16 <= m and both slices hold 2·m bytes.
            unsafe {
                let (pa, pb) = (a.as_ptr().add(2 * i), b.as_ptr().add(2 * i));
                lo = _mm256_fmadd_ps(load8(pa), load8(pb), lo);
                hi = _mm256_fmadd_ps(load8(pa.add(16)), load8(pb.add(16)), hi);
            }
        }
        let mut lanes = [0f32; 16];
        // SAFETY: `lanes` holds 16 f32; unaligned stores.
        unsafe {
            _mm256_storeu_ps(lanes.as_mut_ptr(), lo);
            _mm256_storeu_ps(lanes.as_mut_ptr().add(8), hi);
        }
        super::reduce16(&lanes)
    }

    /// [`super::dot_f16_vec_body`] with F16C conversions: 64 lanes in eight registers.
    ///
    /// # Safety
    /// The CPU supports AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_f16_vec(n: usize, a: &[u8], b: &[u8]) -> f32 {
        let np = n & !63;
        let (a, b) = (&a[..2 * n], &b[..2 * n]);
        let mut acc = [_mm256_setzero_ps(); 8];
        for blk in (0..np).step_by(64) {
            for (r, reg) in acc.iter_mut().enumerate() {
                // SAFETY: blk + 8·r + 8 <= np <= n, and both slices hold 2·n bytes.
                unsafe {
                    let off = 2 * (blk + 8 * r);
                    *reg = _mm256_fmadd_ps(
                        load8(a.as_ptr().add(off)),
                        load8(b.as_ptr().add(off)),
                        *reg,
                    );
                }
            }
        }
        let mut lanes = [0f32; 64];
        for (r, reg) in acc.iter().enumerate() {
            // SAFETY: `lanes` holds 64 f32; each store writes 8 of them.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr().add(8 * r), *reg) };
        }
        let mut r32 = [0f32; 32];
        for t in 0..32 {
            r32[t] = lanes[t] + lanes[t + 32];
        }
        let mut r16 = [0f32; 16];
        for t in 0..16 {
            r16[t] = r32[t] + r32[t + 16];
        }
        let mut sum = super::reduce16(&r16) as f64;
        for i in np..n {
            sum += (super::half_at(a, 2 * i) * super::half_at(b, 2 * i)) as f64;
        }
        sum as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 * 0.731 + seed as f32).sin() * 2.5) + 0.01 * (i % 5) as f32)
            .collect()
    }

    fn q8(x: &[f32]) -> Vec<u8> {
        let mut out = vec![0u8; x.len() / 32 * Q8_0_BYTES];
        quantize_row_q8_0_x86(x, &mut out);
        out
    }

    fn f16s(x: &[f32]) -> Vec<u8> {
        x.iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect()
    }

    #[test]
    fn vectorised_dots_equal_portable_ones() {
        if isa() < Isa::Avx2 {
            return;
        }
        for nb in [1usize, 2, 3, 7, 28, 152] {
            let n = nb * 32;
            let (x, y) = (vals(n, 1), vals(n, 2));
            let (qx, qy) = (q8(&x), q8(&y));
            assert_eq!(
                dot_q8_0_lanes(n, &qx, &qy).to_bits(),
                dot_q8_0_lanes_body(n, &qx, &qy).to_bits()
            );
            // Q4_0 bytes: any nibbles will do for the order check.
            let q4: Vec<u8> = (0..nb * Q4_0_BYTES).map(|i| (i * 37 % 251) as u8).collect();
            let mut q4 = q4;
            for blk in q4.chunks_exact_mut(Q4_0_BYTES) {
                blk[..2].copy_from_slice(&f16::from_f32(0.013).to_le_bytes());
            }
            assert_eq!(
                dot_q4_0_lanes(n, &q4, &qy).to_bits(),
                dot_q4_0_lanes_body(n, &q4, &qy).to_bits()
            );
            assert_eq!(
                dot_q4_0_chain(n, &q4, &qy).to_bits(),
                dot_q4_0_chain_body(n, &q4, &qy).to_bits()
            );
            // Q5_0 (any bytes, finite scales): the portable lanes equal the SIMD build, which
            // keeps ggml's lanes (`quants::simd`).
            let mut q5: Vec<u8> = (0..nb * Q5_0_BYTES).map(|i| (i * 41 % 249) as u8).collect();
            for blk in q5.chunks_exact_mut(Q5_0_BYTES) {
                blk[..2].copy_from_slice(&f16::from_f32(-0.021).to_le_bytes());
            }
            let portable = dot_q5_0_lanes_body(n, &q5, &qy).to_bits();
            assert_eq!(dot_q5_0_lanes(n, &q5, &qy).to_bits(), portable);
            let simd = crate::quants::dispatch::active_variant_in(
                DType::Q5_0,
                crate::quants::dispatch::SumOrder::GgmlLanes,
            )
            .expect("an AVX2 Q5_0 build");
            assert_eq!((simd.dot)(n, &q5, &qy).to_bits(), portable, "nb={nb}");
            // IQ4_NL: the same bytes read as level indices.
            for (f, body) in [
                (
                    dot_iq4_nl_lanes as fn(usize, &[u8], &[u8]) -> f32,
                    dot_iq4_nl_lanes_body as fn(usize, &[u8], &[u8]) -> f32,
                ),
                (dot_iq4_nl_chain, dot_iq4_nl_chain_body),
                (dot_iq4_nl_pairs, dot_iq4_nl_pairs_body),
            ] {
                assert_eq!(
                    f(n, &q4, &qy).to_bits(),
                    body(n, &q4, &qy).to_bits(),
                    "nb={nb}"
                );
            }
            // IQ4_XS against Q8_K: any index and scale bytes, finite scales.
            let nk = nb.div_ceil(8);
            let mut xs: Vec<u8> = (0..nk * IQ4XS_BYTES)
                .map(|i| (i * 53 % 253) as u8)
                .collect();
            let mut ys: Vec<u8> = (0..nk * Q8K_BYTES).map(|i| (i * 29 % 255) as u8).collect();
            for blk in xs.chunks_exact_mut(IQ4XS_BYTES) {
                blk[..2].copy_from_slice(&f16::from_f32(0.021).to_le_bytes());
            }
            for blk in ys.chunks_exact_mut(Q8K_BYTES) {
                blk[..4].copy_from_slice(&0.37f32.to_le_bytes());
            }
            assert_eq!(
                dot_iq4_xs_lanes(256 * nk, &xs, &ys).to_bits(),
                dot_iq4_xs_lanes_body(256 * nk, &xs, &ys).to_bits()
            );
            // Q4_1/Q5_1 against Q8_1: any codes, modest scales and minimums.
            let mut y1 = vec![0u8; nb * Q8_1_BYTES];
            quantize_row_q8_1_x86(&y, &mut y1);
            for (bytes, dot, body) in [
                (
                    Q4_1_BYTES,
                    dot_q4_1_lanes as fn(usize, &[u8], &[u8]) -> f32,
                    dot_q4_1_lanes_body as fn(usize, &[u8], &[u8]) -> f32,
                ),
                (Q5_1_BYTES, dot_q5_1_lanes, dot_q5_1_lanes_body),
            ] {
                let mut w: Vec<u8> = (0..nb * bytes).map(|i| (i * 53 % 241) as u8).collect();
                for (b, blk) in w.chunks_exact_mut(bytes).enumerate() {
                    blk[..2]
                        .copy_from_slice(&f16::from_f32(0.011 + 0.001 * b as f32).to_le_bytes());
                    blk[2..4].copy_from_slice(&f16::from_f32(-0.2 + 0.03 * b as f32).to_le_bytes());
                }
                assert_eq!(dot(n, &w, &y1).to_bits(), body(n, &w, &y1).to_bits());
            }
        }
        for n in 0..=515 {
            let (x, y) = (vals(n, 3), vals(n, 4));
            let (hx, hy) = (f16s(&x), f16s(&y));
            assert_eq!(
                dot_f16_vec(n, &hx, &hy).to_bits(),
                dot_f16_vec_body(n, &hx, &hy).to_bits(),
                "n={n}"
            );
            let m = n / 16 * 16;
            assert_eq!(
                dot_f16_lanes16(m, &hx, &hy).to_bits(),
                dot_f16_lanes16_body(m, &hx, &hy).to_bits(),
                "n={m}"
            );
        }
    }

    /// The AVX-512 F16 tiles give the one-element kernels' bits.
    #[test]
    fn f16_tiles_equal_one_element_kernels() {
        if isa() < Isa::Avx512 {
            return;
        }
        for n in [0usize, 16, 48, 64, 80, 896, 1000, 1024] {
            let rows: Vec<Vec<u8>> = (0..8).map(|s| f16s(&vals(n, 10 + s))).collect();
            let a: [&[u8]; 4] = std::array::from_fn(|r| &rows[r][..]);
            let b: [&[u8]; 4] = std::array::from_fn(|c| &rows[4 + c][..]);
            if n % 16 == 0 {
                let wide: Vec<Vec<f32>> = b
                    .iter()
                    .map(|r| r.chunks_exact(2).map(|h| half_at(h, 0)).collect())
                    .collect();
                let t4 =
                    f16_lanes16_tile_f32::<4, 4>(n, a, [&wide[0], &wide[1], &wide[2], &wide[3]]);
                for r in 0..4 {
                    for c in 0..4 {
                        let want = dot_f16_lanes16_body(n, a[r], b[c]).to_bits();
                        assert_eq!(t4[r][c].to_bits(), want, "n={n} ({r}, {c}), 4 × 4");
                    }
                }
                let t2 = f16_lanes16_tile_f32::<4, 3>(n, a, [&wide[0], &wide[1], &wide[3]]);
                for r in 0..4 {
                    for (c, bc) in [0, 1, 3].into_iter().enumerate() {
                        let want = dot_f16_lanes16_body(n, a[r], b[bc]).to_bits();
                        assert_eq!(t2[r][c].to_bits(), want, "n={n} ({r}, {bc})");
                    }
                }
            }
        }
    }

    #[test]
    fn dots_are_close_to_exact_sums() {
        let n = 28 * 32;
        let (x, y) = (vals(n, 5), vals(n, 6));
        let (qx, qy) = (q8(&x), q8(&y));
        let deq = |q: &[u8]| -> Vec<f64> {
            q.chunks_exact(Q8_0_BYTES)
                .flat_map(|b| {
                    let d = half_at(b, 0) as f64;
                    (0..32).map(move |j| d * (b[2 + j] as i8) as f64)
                })
                .collect()
        };
        let want: f64 = deq(&qx).iter().zip(deq(&qy)).map(|(a, b)| a * b).sum();
        let got = dot_q8_0_lanes(n, &qx, &qy) as f64;
        assert!(
            (got - want).abs() <= 1e-5 * want.abs().max(1.0),
            "{got} vs {want}"
        );
        let (hx, hy) = (f16s(&x), f16s(&y));
        let want: f64 = x
            .iter()
            .zip(&y)
            .map(|(&a, &b)| f16::from_f32(a).to_f64() * f16::from_f32(b).to_f64())
            .sum();
        for got in [dot_f16_vec(n, &hx, &hy), dot_f16_lanes16(n, &hx, &hy)] {
            assert!((got as f64 - want).abs() <= 1e-5 * want.abs().max(1.0));
        }
    }

    #[test]
    fn x86_quantizer_build_equals_portable_body() {
        for nb in [1usize, 3, 28, 152] {
            let mut x = vals(nb * 32, 9);
            // Exact halves, zeros, a zero block and an infinity.
            x[1] = 0.5;
            x[2] = -2.5;
            x[nb * 32 - 1] = f32::INFINITY;
            for v in &mut x[32..64.min(nb * 32)] {
                *v = 0.0;
            }
            let (mut a, mut b) = (vec![0u8; nb * Q8_0_BYTES], vec![0u8; nb * Q8_0_BYTES]);
            quantize_row_q8_0_x86(&x, &mut a);
            quantize_row_q8_0_body(&x, &mut b);
            assert_eq!(a, b);
        }
    }

    /// Awkward groups of 32: ties, zeros, a zero block, tiny maxima (127/max overflows),
    /// huge values, NaN and infinities in various lanes.
    fn awkward(nb: usize, seed: u32) -> Vec<f32> {
        let mut x = vals(nb * 32, seed);
        for (b, g) in x.chunks_exact_mut(32).enumerate() {
            let at = (b * 7 + seed as usize) % 32;
            match (b + seed as usize) % 9 {
                0 => g.fill(0.0),
                1 => {
                    for (j, v) in g.iter_mut().enumerate() {
                        *v = (j as f32 - 16.0) * 0.5;
                    }
                    g[at] = 127.0;
                }
                2 => g[at] = f32::NAN,
                3 => g[at] = f32::INFINITY,
                4 => g[at] = f32::NEG_INFINITY,
                5 => {
                    for v in g.iter_mut() {
                        *v *= 1e-39;
                    }
                }
                6 => {
                    for v in g.iter_mut() {
                        *v *= 3e38;
                    }
                }
                7 => g[0] = f32::NAN,
                _ => {}
            }
        }
        x
    }

    #[test]
    fn x86_q8_1_quantizer_build_equals_portable_body() {
        for nb in [1usize, 2, 9, 28, 152] {
            for seed in 0..9 {
                let x = awkward(nb, seed);
                let (mut a, mut b) = (vec![0u8; nb * Q8_1_BYTES], vec![1u8; nb * Q8_1_BYTES]);
                quantize_row_q8_1_x86(&x, &mut a);
                quantize_row_q8_1_body(&x, &mut b);
                assert_eq!(a, b, "nb={nb} seed={seed}");
            }
        }
    }

    /// On finite inputs with normal maxima, Q8_1's `d` and codes are Q8_0's (the same
    /// instructions in ggml), and `s` is `f16(d · Σ codes)` computed from the written codes.
    #[test]
    fn x86_q8_1_is_q8_0_plus_the_code_sum() {
        let nb = 40;
        let mut x = vals(nb * 32, 11);
        for (b, g) in x.chunks_exact_mut(32).enumerate() {
            if b % 5 == 0 {
                for (j, v) in g.iter_mut().enumerate() {
                    *v = (j as f32 - 16.0) * 0.5;
                }
                g[b % 32] = -127.0;
            }
            if b % 7 == 3 {
                g.fill(0.0);
            }
        }
        let q0 = q8(&x);
        let mut q1 = vec![0u8; nb * Q8_1_BYTES];
        quantize_row_q8_1_x86(&x, &mut q1);
        let blocks = q0.chunks_exact(Q8_0_BYTES).zip(q1.chunks_exact(Q8_1_BYTES));
        for ((b0, b1), xs) in blocks.zip(x.chunks_exact(32)) {
            assert_eq!(b0[..2], b1[..2]);
            assert_eq!(b0[2..], b1[4..]);
            // The f32 scale, before its rounding to f16.
            let d = xs.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            let sum: i32 = b1[4..].iter().map(|&c| c as i8 as i32).sum();
            let s = f16::from_f32(d * sum as f32);
            assert_eq!(half_at(b1, 2).to_bits(), s.to_f32().to_bits());
        }
    }

    #[test]
    fn x86_quantizer_rounds_half_to_even_with_id_127_over_max() {
        // amax = 127 makes id = 1 exactly: 0.5 → 0, 1.5 → 2, 2.5 → 2, −2.5 → −2.
        let mut x = [0f32; 32];
        x[0] = 127.0;
        x[1] = 0.5;
        x[2] = 1.5;
        x[3] = 2.5;
        x[4] = -2.5;
        let q = q8(&x);
        assert_eq!(half_at(&q, 0), 1.0);
        let codes: Vec<i8> = q[2..7].iter().map(|&b| b as i8).collect();
        assert_eq!(codes, [127, 0, 2, 2, -2]);
    }

    #[test]
    fn v_expf16_and_swiglu_variants_agree_with_v_expf() {
        // Through the normal range, the results that round to subnormals (n < −126) and
        // the saturated ends; both the dispatched variant (AVX-512 `scalef` where the CPU
        // has it) and the portable body.
        let xs: Vec<f32> = (0..8000).map(|i| (i as f32 - 4000.0) * 0.0371).collect();
        for c in xs.chunks_exact(16) {
            let a: [f32; 16] = c.try_into().unwrap();
            for (name, got) in [("v_expf16", v_expf16(&a)), ("body", v_expf16_body(&a))] {
                for l in 0..16 {
                    assert_eq!(
                        got[l].to_bits(),
                        v_expf(a[l]).to_bits(),
                        "{name}: x = {}",
                        a[l]
                    );
                }
            }
        }
        // Groups mixing ordinary lanes with saturating ones (−∞, as masked scores give, and
        // far out of range), lanes between the ranges (|n| in 126..192) and NaN.
        let special = [
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
            -200.0,
            200.0,
            -100.0,
            100.0,
            -87.9,
            88.5,
            -0.0,
            1e-30,
        ];
        for (t, &sp) in special.iter().enumerate() {
            for every in [1usize, 2, 5, 16] {
                let a: [f32; 16] = std::array::from_fn(|l| {
                    if (l + t) % every == 0 {
                        sp
                    } else {
                        (l as f32 - 8.0) * 3.7
                    }
                });
                for got in [v_expf16(&a), v_expf16_body(&a)] {
                    for l in 0..16 {
                        let want = v_expf(a[l]);
                        assert!(
                            got[l].to_bits() == want.to_bits()
                                || (got[l].is_nan() && want.is_nan()),
                            "x = {} in a group with {sp}: {} vs {want}",
                            a[l],
                            got[l]
                        );
                    }
                }
            }
        }
        let g: Vec<f32> = (0..531).map(|i| ((i as f32) * 0.37).sin() * 9.0).collect();
        let u: Vec<f32> = (0..531).map(|i| ((i as f32) * 0.11).cos()).collect();
        let (mut a, mut b) = (vec![0f32; 531], vec![0f32; 531]);
        swiglu_row(&mut a, &g, Some(&u));
        swiglu_row_body(&mut b, &g, Some(&u));
        assert_eq!(a, b);
        for i in 0..531 {
            let e = if i < 528 {
                v_expf(-g[i])
            } else {
                (-g[i]).exp()
            };
            assert_eq!(
                a[i].to_bits(),
                (g[i] / (1.0 + e) * u[i]).to_bits(),
                "i = {i}"
            );
        }
    }

    #[test]
    fn v_expf_is_within_two_ulp_and_saturates() {
        let mut x = -103.0f32;
        while x < 88.0 {
            let got = v_expf(x) as f64;
            let want = (x as f64).exp();
            let ulp = (f32::EPSILON as f64 * want).max(1.5e-45);
            assert!(
                (got - want).abs() <= 2.0 * ulp,
                "v_expf({x}) = {got}, exp = {want}"
            );
            x += 0.0137;
        }
        assert_eq!(v_expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(v_expf(-200.0), 0.0);
        assert_eq!(v_expf(200.0), f32::INFINITY);
        assert_eq!(v_expf(0.0), 1.0);
    }
}
