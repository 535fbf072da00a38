//! MXFP4, the OCP microscaling 4-bit float type (GPT-OSS ships its experts in it): 32 values
//! per 17-byte block, each `2^(e − 128) · v` with `v` an E2M1 value doubled (`KVALUES_FP4`)
//! and `e` the block's E8M0 exponent byte.
//!
//! Layout: `e` (u8), then `qs[16]`: byte `j` holds value `j` in its low nibble and value
//! `j + 16` in its high nibble. Its dot product pairs with Q8_0.
//!
//! The quantizer is ggml's `quantize_row_mxfp4_ref` (which `llama-quantize` runs whatever the
//! importance matrix): `e = ⌊log2 max|x|⌋ − 2 + 127`, each value the nearest level (the first
//! of equals). llama.cpp's x86 build multiplies MXFP4 in two orders: 2-D weights whose row
//! count is a multiple of 8 are repacked and take the `mxfp4_8x8` GEMV/GEMM
//! ([`dot_mxfp4_chain`]), the rest `ggml_vec_dot_mxfp4_q8_0` ([`dot_mxfp4_pairs`]).

use bytemuck::{Pod, Zeroable};

use super::q8::QK8_0;
use super::{fp16, BlockQ8_0, BlockQuant};
use crate::dtype::DType;

/// Values per MXFP4 block.
pub const QK_MXFP4: usize = 32;

/// The E2M1 values doubled (ggml's `kvalues_fp4`), shared by MXFP4 and NVFP4.
pub const KVALUES_FP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// One MXFP4 block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockMXFP4 {
    /// E8M0 exponent: the scale is `2^(e − 127)`, halved for the doubled levels.
    pub e: u8,
    /// 4-bit level indices (see the module docs for the order).
    pub qs: [u8; QK_MXFP4 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockMXFP4>() == 17);

/// `2^(e − 128)` (ggml's `GGML_E8M0_TO_FP32_HALF`, subnormal for `e < 2`).
#[inline(always)]
pub(crate) fn e8m0_half(e: u8) -> f32 {
    f32::from_bits(if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    })
}

/// ggml's `best_index_mxfp4`: the level index whose `level · d` is nearest to `x`, the first
/// of equals (`|level·d − x|`, the product exact for both FP4 scales).
pub(crate) fn best_index_fp4(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (KVALUES_FP4[0] as f32 * d - x).abs();
    for (i, &k) in KVALUES_FP4.iter().enumerate().skip(1) {
        let err = (k as f32 * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

/// The 8-bit product `x·y` of ggml's x86 FP4 kernels, which multiply signed bytes with
/// `vpsignb`: `|x| · sign(y, x)`, where `sign` negates `y` in 8 bits (−128 stays −128) for a
/// negative `x`. Exact except for `y = −128` against a negative level, which no ggml
/// activation quantizer writes.
#[inline(always)]
pub(crate) fn sign_product(x: i8, y: i8) -> i32 {
    let sy = match x.signum() {
        -1 => y.wrapping_neg(),
        0 => 0,
        _ => y,
    };
    x.unsigned_abs() as i32 * sy as i32
}

/// `int` conversion of a float as x86-64 does it (`cvttss2si`): truncation, and `i32::MIN`
/// for NaN and values out of range (C leaves them undefined; GCC emits that instruction).
#[inline(always)]
pub(crate) fn cvtt_i32(v: f32) -> i32 {
    if v.is_finite() && (-2_147_483_648.0..2_147_483_648.0).contains(&v) {
        v as i32
    } else {
        i32::MIN
    }
}

impl BlockMXFP4 {
    /// The 32 levels (doubled E2M1 values) in value order.
    pub fn levels(&self) -> [i8; QK_MXFP4] {
        let mut v = [0i8; QK_MXFP4];
        for (j, &q) in self.qs.iter().enumerate() {
            v[j] = KVALUES_FP4[(q & 0x0F) as usize];
            v[j + 16] = KVALUES_FP4[(q >> 4) as usize];
        }
        v
    }
}

impl BlockQuant for BlockMXFP4 {
    const DTYPE: DType = DType::MXFP4;
    const BLOCK_SIZE: usize = QK_MXFP4;
    type VecDot = BlockQ8_0;
    const GGML_X86_DOT: Option<super::VecDotKernel> = Some(dot_mxfp4_pairs);
    const GGML_X86_REPACKED_DOT: Option<super::VecDotKernel> = Some(dot_mxfp4_chain);

    fn dequantize(&self, out: &mut [f32]) {
        let d = e8m0_half(self.e);
        for (y, l) in out[..QK_MXFP4].iter_mut().zip(self.levels()) {
            *y = l as f32 * d;
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_MXFP4];
        // `amax < |v|` (a NaN never enters).
        let amax = x
            .iter()
            .fold(0.0f32, |m, v| if m < v.abs() { v.abs() } else { m });
        // `(uint8_t)(floorf(log2f(amax)) - 2 + 127)`: glibc's `log2f` (what `f32::log2`
        // calls on Linux), the conversion through a 32-bit `int` as GCC compiles it.
        let e = if amax > 0.0 {
            cvtt_i32(amax.log2().floor() - 2.0 + 127.0) as u8
        } else {
            0
        };
        let d = e8m0_half(e);
        let mut b = BlockMXFP4 {
            e,
            qs: [0; QK_MXFP4 / 2],
        };
        for j in 0..QK_MXFP4 / 2 {
            b.qs[j] = best_index_fp4(x[j], d) | (best_index_fp4(x[j + 16], d) << 4);
        }
        b
    }

    /// `ggml_vec_dot_mxfp4_q8_0_generic`: per block `sumf += (dy·dx)·Σ`, one FMA (GCC's
    /// contraction, see `q2_0`).
    fn vec_dot(a: &[Self], b: &[BlockQ8_0]) -> f32 {
        let mut sumf = 0f32;
        for (x, y) in a.iter().zip(b) {
            let d = fp16(y.d) * e8m0_half(x.e);
            sumf = d.mul_add(exact_sum(x, y) as f32, sumf);
        }
        sumf
    }
}

/// `Σ level·q` of one block in `int`, as ggml's C loops compute it.
fn exact_sum(x: &BlockMXFP4, y: &BlockQ8_0) -> i32 {
    x.levels()
        .iter()
        .zip(&y.qs)
        .map(|(&l, &q)| l as i32 * q as i32)
        .sum()
}

/// The eight i32 lanes of ggml's AVX2 MXFP4 kernels for one block: lane `l` the sum of the
/// [`sign_product`]s of values `4l..4l + 4`.
#[inline(always)]
pub(crate) fn mxfp4_lanes(x: &BlockMXFP4, y: &BlockQ8_0) -> [i32; 8] {
    let l = x.levels();
    std::array::from_fn(|k| {
        (4 * k..4 * k + 4)
            .map(|v| sign_product(l[v], y.qs[v]))
            .sum()
    })
}

/// MXFP4 · Q8_0 in the order of ggml's AVX2 `ggml_vec_dot_mxfp4_q8_0` (llama.cpp's kernel
/// for weights it does not repack): blocks in pairs, the even ones into one set of eight
/// lanes and the odd ones into another (`lane = fma(dy·dx, lane_sum, lane)`), the sets added
/// lane by lane and reduced as `hsum_float_8`; an odd last block in C (`int` products,
/// `sumf += d·Σ` contracted to one FMA). The AVX2 build in `kernels::x86::fp4` gives the
/// same bits.
pub(crate) fn dot_mxfp4_pairs(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let Some((xs, ys)) = super::row_blocks::<BlockMXFP4>(n, a, b) else {
        return 0.0;
    };
    let nb = xs.len();
    let scale = |i: usize| fp16(ys[i].d) * e8m0_half(xs[i].e);
    let (mut acc1, mut acc2) = ([0f32; 8], [0f32; 8]);
    let mut ib = 0;
    while ib + 1 < nb {
        let (l1, l2) = (
            mxfp4_lanes(&xs[ib], &ys[ib]),
            mxfp4_lanes(&xs[ib + 1], &ys[ib + 1]),
        );
        let (d1, d2) = (scale(ib), scale(ib + 1));
        for l in 0..8 {
            acc1[l] = d1.mul_add(l1[l] as f32, acc1[l]);
            acc2[l] = d2.mul_add(l2[l] as f32, acc2[l]);
        }
        ib += 2;
    }
    let both: [f32; 8] = std::array::from_fn(|l| acc1[l] + acc2[l]);
    let mut sumf = crate::kernels::ggml_arith::lanes::hsum8(&both);
    if ib < nb {
        sumf = scale(ib).mul_add(exact_sum(&xs[ib], &ys[ib]) as f32, sumf);
    }
    sumf
}

/// MXFP4 · Q8_0 in the order of ggml's repacked `mxfp4_8x8` GEMV and GEMM (AVX2, and its
/// AVX-512 GEMM): per block the sum of the [`sign_product`]s, then `acc = fma(Σ, dx·dy,
/// acc)`. The AVX2 build in `kernels::x86::fp4` gives the same bits.
pub(crate) fn dot_mxfp4_chain(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let Some((xs, ys)) = super::row_blocks::<BlockMXFP4>(n, a, b) else {
        return 0.0;
    };
    let mut acc = 0f32;
    for (x, y) in xs.iter().zip(ys.iter()) {
        let s: i32 = mxfp4_lanes(x, y).iter().sum();
        acc = (s as f32).mul_add(e8m0_half(x.e) * fp16(y.d), acc);
    }
    acc
}

const _: () = assert!(QK_MXFP4 == QK8_0);
