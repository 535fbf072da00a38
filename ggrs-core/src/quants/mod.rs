//! Block-quantized types (Q4_0 … Q8_1, the k-quants Q2_K … Q8_K and the i-quants IQ4_NL,
//! IQ4_XS): block layouts, reference quantize/dequantize and scalar dot products,
//! bit-compatible with GGUF files and with ggml's reference code.
//!
//! # Layout
//!
//! A block type stores [`BlockQuant::BLOCK_SIZE`] values (32, or 256 for the k-quants) in one
//! `#[repr(C)]` struct whose size is checked at compile time. A row of `n` values is `n /
//! BLOCK_SIZE` blocks laid end to end, exactly as in a GGUF file. Rows in a file are only
//! 2-byte aligned in general, so every function here takes rows as byte slices and reads
//! blocks through [`bytemuck`] (a zero-copy cast when the bytes are aligned, an unaligned copy
//! otherwise): no `unsafe` anywhere in this module.
//!
//! # Bit-exactness
//!
//! - Dequantization reproduces ggml's `dequantize_row_*` bit for bit: the same f32 operations
//!   in the same order and grouping (e.g. Q4_K computes `d1 = d * sc; m1 = min * m;
//!   y = d1 * q - m1`), so dequantizing a model and rounding to f16 gives llama.cpp's bytes.
//! - Quantization reproduces ggml's reference quantizers (`quantize_row_*_ref`, what
//!   `llama-quantize` runs when no importance matrix is given): same rounding (`roundf`,
//!   truncating casts, `nearest_int`), same scale search, same f16 rounding of scales.
//!   Note that ggml's *CPU* activation quantizers (`quantize_row_q8_0` with AVX) round ties to
//!   even and use `127 / amax` instead of `1 / (amax / 127)`; the reference rounding used here
//!   can differ from them by one unit in a few values.
//! - The scalar dot products follow ggml's `ggml_vec_dot_*_generic`: an integer dot product per
//!   block, scaled and accumulated in f32 in the same order.
//!
//! # Dot products and SIMD
//!
//! A weight type's dot product pairs it with its [`BlockQuant::VecDot`] type, as in ggml:
//! Q4_0, Q5_0, Q8_0, IQ4_NL → Q8_0; Q4_1, Q5_1 → Q8_1; the k-quants, IQ4_XS → Q8_K.
//! `mul_mat` converts f32 activations to that type once (INIT), then calls the dot product
//! per output element.
//! The scalar functions (`q4_0::vec_dot_q4_0_q8_0_scalar` …) are always compiled and are the
//! reference; [`vec_dot_kernel`] is the dispatch point where SIMD versions are chosen once at
//! run time (see [`dispatch`]).

use std::borrow::Cow;

use bytemuck::Pod;
use half::f16;

use crate::dtype::DType;
use crate::error::{Error, Result};

pub mod dispatch;
pub mod iq1_m;
pub mod iq1_s;
pub(crate) mod iq1_search;
pub mod iq2_s;
pub mod iq2_xs;
pub mod iq2_xxs;
pub mod iq3_s;
pub mod iq3_xxs;
pub mod iq4;
pub(crate) mod iq_codes;
pub(crate) mod iq_grids;
pub(crate) mod iq_search;
pub mod k_quants;
pub mod mxfp4;
pub mod nvfp4;
pub mod q1_0;
pub mod q2_0;
pub mod q4_0;
pub mod q4_1;
pub mod q5;
pub mod q8;
pub mod tq1_0;
pub mod tq2_0;

pub use dispatch::{vec_dot_kernel, vec_dot_scalar_kernel};
pub use iq1_m::BlockIQ1M;
pub use iq1_s::BlockIQ1S;
pub use iq2_s::BlockIQ2S;
pub use iq2_xs::BlockIQ2XS;
pub use iq2_xxs::BlockIQ2XXS;
pub use iq3_s::BlockIQ3S;
pub use iq3_xxs::BlockIQ3XXS;
pub use iq4::{BlockIQ4NL, BlockIQ4XS};
pub use k_quants::q2_k::BlockQ2K;
pub use k_quants::q3_k::BlockQ3K;
pub use k_quants::q4_k::BlockQ4K;
pub use k_quants::q5_k::BlockQ5K;
pub use k_quants::q6_k::BlockQ6K;
pub use k_quants::q8_k::BlockQ8K;
pub use k_quants::QK_K;
pub use mxfp4::BlockMXFP4;
pub use nvfp4::BlockNVFP4;
pub use q1_0::BlockQ1_0;
pub use q2_0::BlockQ2_0;
pub use q4_0::BlockQ4_0;
pub use q4_1::BlockQ4_1;
pub use q5::{BlockQ5_0, BlockQ5_1};
pub use q8::{BlockQ8_0, BlockQ8_1};
pub use tq1_0::BlockTQ1_0;
pub use tq2_0::BlockTQ2_0;

/// A dot-product kernel: `n` values of a row of the weight type (`a`) against a row of its
/// `VecDot` type (`b`), both as bytes. The same type as `mul_mat`'s kernel pointer.
pub type VecDotKernel = fn(n: usize, a: &[u8], b: &[u8]) -> f32;

/// Converts a row of `dtype` bytes to f32 (`src` holds exactly `dst.len()` values).
pub type ToF32Fn = fn(src: &[u8], dst: &mut [f32]);
/// Converts f32 values to a row of `dtype` bytes (`dst` holds exactly `src.len()` values).
pub type FromF32Fn = fn(src: &[f32], dst: &mut [u8]);

/// A dot product of one weight row with four rows of its `VecDot` type (`n` values each):
/// `[dot(a, b[0]), …, dot(a, b[3])]`, each bit-identical to the one-row kernel of the same
/// build. `mul_mat` uses it to load each weight block once per four activation columns.
pub type VecDot4Kernel = fn(n: usize, a: &[u8], b: [&[u8]; 4]) -> [f32; 4];

/// A dot product of four weight rows with one row of their `VecDot` type (`n` values each):
/// `[dot(a[0], b), …, dot(a[3], b)]`, each bit-identical to the one-row kernel of the same
/// build. `mul_mat` uses it when it has fewer than four columns (decoding).
pub type VecDotRows4Kernel = fn(n: usize, a: [&[u8]; 4], b: &[u8]) -> [f32; 4];

/// Dot products of four weight rows with four rows of their `VecDot` type: `t[r][c] =
/// dot(a[r], b[c])`, each bit-identical to the one-row kernel of the same build. `mul_mat`
/// uses it for prompts (each weight block decoded once per four columns, each activation
/// block loaded once per four rows).
pub type VecDotTileKernel = fn(n: usize, a: [&[u8]; 4], b: [&[u8]; 4]) -> [[f32; 4]; 4];

/// One block type: its layout, its reference quantizer and dequantizer, and its dot product
/// with the block type activations are converted to.
///
/// Implemented by [`BlockQ4_0`], [`BlockQ4_1`], [`BlockQ5_0`], [`BlockQ5_1`], [`BlockQ8_0`],
/// [`BlockQ8_1`], [`BlockQ2K`], [`BlockQ3K`], [`BlockQ4K`], [`BlockQ5K`], [`BlockQ6K`],
/// [`BlockQ8K`], [`BlockIQ4NL`] and [`BlockIQ4XS`]. Work on rows of bytes with
/// [`dequantize_row`], [`quantize_row`] and [`vec_dot_row`].
pub trait BlockQuant: Pod + std::fmt::Debug + Send + Sync + 'static {
    /// The GGUF type this block encodes.
    const DTYPE: DType;
    /// Values per block (32, or [`QK_K`] = 256 for the k-quants).
    const BLOCK_SIZE: usize;
    /// Bytes per block (the struct's size, as stored in a GGUF file).
    const BYTES: usize = std::mem::size_of::<Self>();

    /// The block type the other operand of [`BlockQuant::vec_dot`] is quantized to
    /// (ggml's `vec_dot_type`).
    type VecDot: BlockQuant;

    /// Decodes this block into `out[..BLOCK_SIZE]`, bit-exact with ggml's `dequantize_row_*`.
    ///
    /// Panics if `out` holds fewer than `BLOCK_SIZE` values (the row functions check this).
    fn dequantize(&self, out: &mut [f32]);

    /// Encodes `x[..BLOCK_SIZE]`, bit-exact with ggml's `quantize_row_*_ref`.
    ///
    /// Panics if `x` holds fewer than `BLOCK_SIZE` values (the row functions check this).
    fn quantize(x: &[f32]) -> Self;

    /// Encodes one row `x` (whole blocks, `out.len()` of them) with importance weights `qw`
    /// (one per value of `x`, e.g. an importance matrix's mean squared activations),
    /// bit-exact with ggml's `quantize_<type>(…, quant_weights)` that `llama-quantize
    /// --imatrix` runs. Some types weigh a value against its whole row, hence a row here.
    ///
    /// The default ignores the weights and encodes each block with
    /// [`BlockQuant::quantize`], as ggml does for Q8_0, TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0 and
    /// Q2_0. Panics if `x` or `qw` hold fewer than `out.len() · BLOCK_SIZE` values (the row
    /// functions check this).
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        let _ = qw;
        for (b, xb) in out.iter_mut().zip(x.chunks_exact(Self::BLOCK_SIZE)) {
            *b = Self::quantize(xb);
        }
    }

    /// Scalar reference dot product of a row of blocks with a row of `VecDot` blocks (the
    /// shorter of the two sets the length), accumulated as ggml's `ggml_vec_dot_*_generic`.
    fn vec_dot(a: &[Self], b: &[Self::VecDot]) -> f32;

    /// The type's dot product in the order of ggml's x86 (AVX2) `ggml_vec_dot_*` as portable
    /// code, for a type llama.cpp multiplies with that one kernel for every shape and column
    /// count (no tinyBLAS, repacked or tiled kernel takes it). `Some` makes it the type's
    /// `mul_mat` contract with no other row anywhere: `kernels::ggml_arith::mul_mat_dot`
    /// returns it, `dispatch::ggml_sum_order` names it [`dispatch::SumOrder::GgmlLanes`], and
    /// the type's SIMD builds in `kernels::dot_builds` must keep its bits. `None` (the
    /// default): the type's order is given in those modules, or free.
    const GGML_X86_DOT: Option<VecDotKernel> = None;

    /// For a type llama.cpp's x86 (AVX2) build repacks — 2-D weights whose row count is a
    /// multiple of 8 (`ggml_repack_get_optimal_repack_type`) — and then multiplies with one
    /// 8-row GEMV/GEMM order for every column count: that order as portable code. `Some`
    /// makes it the `mul_mat` contract of such weights
    /// ([`dispatch::SumOrder::GgmlBlockChain`]; the type's builds in the repacked-order table
    /// of `kernels::dot_builds` must keep its bits), [`BlockQuant::GGML_X86_DOT`] staying
    /// the contract of the other shapes.
    const GGML_X86_REPACKED_DOT: Option<VecDotKernel> = None;

    /// False for a type ggrs would read and multiply but not write (every block type of
    /// this build is written; a new type may start without its writer):
    /// [`quantize_row`] refuses it with [`Error::UnsupportedType`], its conversions have no
    /// `from_f32`, and its [`BlockQuant::quantize`] is not to be called.
    const QUANTIZES: bool = true;

    /// True for a type ggml writes only with importance weights (IQ2_XXS, IQ2_XS, IQ1_S:
    /// `ggml_quantize_requires_imatrix` and the quantizers' asserts; IQ1_M is written
    /// without them, though `llama-quantize`'s IQ1_M recipe asks for an imatrix):
    /// [`quantize_row`] refuses it with [`Error::UnsupportedType`] and its conversions have
    /// no `from_f32`; [`quantize_row_weighted`] writes it. Its [`BlockQuant::quantize`]
    /// (unit weights) is not what ggml would write.
    const NEEDS_WEIGHTS: bool = false;
}

// ------------------------------------------------------------------------------------------
// f16 scales as ggml rounds them
// ------------------------------------------------------------------------------------------

/// f16 → f32 (exact).
#[inline(always)]
pub(crate) fn fp16(h: f16) -> f32 {
    h.to_f32()
}

/// f32 → f16 as ggml's `GGML_FP32_TO_FP16`: round to nearest even, overflow to infinity, and
/// every NaN to the canonical quiet NaN `0x7E00` (with the sign kept).
#[inline(always)]
pub(crate) fn to_fp16(x: f32) -> f16 {
    if x.is_nan() {
        let sign = ((x.to_bits() >> 16) & 0x8000) as u16;
        f16::from_bits(sign | 0x7E00)
    } else {
        f16::from_f32(x)
    }
}

/// C's `MAX(a, b)` macro on floats (`a > b ? a : b`), which keeps a NaN in `b`; `f32::max`
/// would drop it.
#[inline(always)]
pub(crate) fn c_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

// ------------------------------------------------------------------------------------------
// Rows of blocks as bytes
// ------------------------------------------------------------------------------------------

/// The blocks in `bytes` (a whole number of blocks): borrowed when the bytes are aligned for
/// `B`, copied otherwise (rows of a GGUF file are only guaranteed 2-byte alignment).
pub fn cast_blocks<B: BlockQuant>(bytes: &[u8]) -> Result<Cow<'_, [B]>> {
    if bytes.len() / B::BYTES * B::BYTES != bytes.len() {
        return Err(Error::InvalidArgument {
            op: "quants::cast_blocks",
            detail: format!(
                "{} bytes is not a whole number of {}-byte {} blocks",
                bytes.len(),
                B::BYTES,
                B::DTYPE
            ),
        });
    }
    Ok(match bytemuck::try_cast_slice::<u8, B>(bytes) {
        Ok(blocks) => Cow::Borrowed(blocks),
        Err(_) => Cow::Owned(
            bytes
                .chunks_exact(B::BYTES)
                .map(bytemuck::pod_read_unaligned::<B>)
                .collect(),
        ),
    })
}

fn row_error<B: BlockQuant>(op: &'static str, values: usize, bytes: usize) -> Error {
    Error::InvalidArgument {
        op,
        detail: format!(
            "{} values and {} bytes do not make a row of {} ({} values per {}-byte block: \
             the value count must be a multiple of {} and the bytes {} per block)",
            values,
            bytes,
            B::DTYPE,
            B::BLOCK_SIZE,
            B::BYTES,
            B::BLOCK_SIZE,
            B::BYTES
        ),
    }
}

/// Checks that `values` values and `bytes` bytes make one row of `B`; returns the block count.
fn check_row<B: BlockQuant>(op: &'static str, values: usize, bytes: usize) -> Result<usize> {
    let nb = values / B::BLOCK_SIZE;
    if nb * B::BLOCK_SIZE != values || bytes != nb * B::BYTES {
        return Err(row_error::<B>(op, values, bytes));
    }
    Ok(nb)
}

/// Decodes a row of `B` blocks (`src`, `dst.len() / BLOCK_SIZE` blocks) into `dst`,
/// bit-exact with ggml's `dequantize_row_*`.
///
/// Errors when `dst.len()` is not a multiple of the block size or `src` is not exactly the
/// row's size in bytes.
pub fn dequantize_row<B: BlockQuant>(src: &[u8], dst: &mut [f32]) -> Result<()> {
    check_row::<B>("quants::dequantize_row", dst.len(), src.len())?;
    let blocks = cast_blocks::<B>(src)?;
    for (b, out) in blocks.iter().zip(dst.chunks_exact_mut(B::BLOCK_SIZE)) {
        b.dequantize(out);
    }
    Ok(())
}

/// Encodes `src` (a multiple of the block size) into a row of `B` blocks in `dst` (exactly
/// the row's size in bytes), bit-exact with ggml's `quantize_row_*_ref`.
pub fn quantize_row<B: BlockQuant>(src: &[f32], dst: &mut [u8]) -> Result<()> {
    if B::QUANTIZES && B::NEEDS_WEIGHTS {
        return Err(Error::UnsupportedType {
            op: "quants::quantize_row",
            dtype: B::DTYPE,
            detail: "this type is written only with importance weights (an importance \
                     matrix: ggrs quantize --imatrix FILE)"
                .into(),
        });
    }
    if !B::QUANTIZES {
        return Err(Error::UnsupportedType {
            op: "quants::quantize_row",
            dtype: B::DTYPE,
            detail: "ggrs reads and multiplies this type but cannot quantize to it yet \
                     (quantize with llama-quantize --imatrix)"
                .into(),
        });
    }
    check_row::<B>("quants::quantize_row", src.len(), dst.len())?;
    for (x, out) in src
        .chunks_exact(B::BLOCK_SIZE)
        .zip(dst.chunks_exact_mut(B::BYTES))
    {
        out.copy_from_slice(bytemuck::bytes_of(&B::quantize(x)));
    }
    Ok(())
}

/// Encodes `src` into a row of `B` blocks in `dst` (as [`quantize_row`]) with the importance
/// weights `weights` (one per value), bit-exact with ggml's `quantize_<type>` given
/// `quant_weights` (see [`BlockQuant::quantize_row_weighted`]).
pub fn quantize_row_weighted<B: BlockQuant>(
    src: &[f32],
    weights: &[f32],
    dst: &mut [u8],
) -> Result<()> {
    const OP: &str = "quants::quantize_row_weighted";
    if !B::QUANTIZES {
        // Same refusal as the unweighted entry point.
        return quantize_row::<B>(src, dst);
    }
    let nb = check_row::<B>(OP, src.len(), dst.len())?;
    if weights.len() != src.len() {
        return Err(Error::InvalidArgument {
            op: OP,
            detail: format!(
                "{} importance weights for a row of {} values",
                weights.len(),
                src.len()
            ),
        });
    }
    let mut blocks = vec![B::zeroed(); nb];
    B::quantize_row_weighted(src, weights, &mut blocks);
    dst.copy_from_slice(bytemuck::cast_slice(&blocks));
    Ok(())
}

/// Scalar dot product of `n` values: `a` a row of `B`, `b` a row of `B::VecDot`, both exactly
/// `n` values long.
pub fn vec_dot_row<B: BlockQuant>(n: usize, a: &[u8], b: &[u8]) -> Result<f32> {
    check_row::<B>("quants::vec_dot_row (a)", n, a.len())?;
    check_row::<B::VecDot>("quants::vec_dot_row (b)", n, b.len())?;
    let xa = cast_blocks::<B>(a)?;
    let xb = cast_blocks::<B::VecDot>(b)?;
    Ok(B::vec_dot(&xa, &xb))
}

/// [`vec_dot_row`] with the [`VecDotKernel`] signature: the kernel form of the scalar
/// reference.
///
/// `mul_mat` passes rows of exactly `n` values. Should the slices be shorter or not whole
/// blocks, only the whole blocks present in both are used (debug builds assert instead).
pub fn vec_dot_scalar<B: BlockQuant>(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let nb = n / B::BLOCK_SIZE;
    // Activation blocks per weight block (2 and 4 for NVFP4, Q2_0 and Q1_0 against Q8_0).
    let per = B::BLOCK_SIZE / <B::VecDot as BlockQuant>::BLOCK_SIZE;
    debug_assert!(
        nb * B::BLOCK_SIZE == n
            && a.len() == nb * B::BYTES
            && b.len() == nb * per * <B::VecDot as BlockQuant>::BYTES,
        "vec_dot {}: n = {n}, {} and {} bytes",
        B::DTYPE,
        a.len(),
        b.len()
    );
    let nb = nb
        .min(a.len() / B::BYTES)
        .min(b.len() / (per * <B::VecDot as BlockQuant>::BYTES));
    let a = &a[..nb * B::BYTES];
    let b = &b[..nb * per * <B::VecDot as BlockQuant>::BYTES];
    match (cast_blocks::<B>(a), cast_blocks::<B::VecDot>(b)) {
        (Ok(xa), Ok(xb)) => B::vec_dot(&xa, &xb),
        // Unreachable: both slices were cut to whole blocks above.
        _ => 0.0,
    }
}

/// The whole blocks of a row of `n` values of `B` (`a`) and of its activation row (`b`, in
/// `B::VecDot` blocks, several per weight block where those are smaller) present in both,
/// for the portable dot products in ggml's x86 orders. `mul_mat` passes exact rows; shorter
/// slices give the blocks they hold.
pub(crate) type RowBlocks<'a, B> = (Cow<'a, [B]>, Cow<'a, [<B as BlockQuant>::VecDot]>);

/// See [`RowBlocks`]; `None` only if a cast of whole blocks failed, which cannot happen.
pub(crate) fn row_blocks<'a, B: BlockQuant>(
    n: usize,
    a: &'a [u8],
    b: &'a [u8],
) -> Option<RowBlocks<'a, B>> {
    let per = B::BLOCK_SIZE / <B::VecDot as BlockQuant>::BLOCK_SIZE;
    let yb = per * <B::VecDot as BlockQuant>::BYTES;
    let nb = (n / B::BLOCK_SIZE)
        .min(a.len() / B::BYTES)
        .min(b.len() / yb);
    let xs = cast_blocks::<B>(&a[..nb * B::BYTES]).ok()?;
    let ys = cast_blocks::<B::VecDot>(&b[..nb * yb]).ok()?;
    Some((xs, ys))
}

// The `ToF32Fn` / `FromF32Fn` forms used by `types::traits`. Their callers (tensor readers,
// `get_rows`, `mul_mat` INIT, `set_f32`) always pass exact rows; a mismatch is a bug upstream,
// reported in debug builds, and leaves the output untouched in release builds.
fn to_f32_fn<B: BlockQuant>(src: &[u8], dst: &mut [f32]) {
    let r = dequantize_row::<B>(src, dst);
    debug_assert!(r.is_ok(), "{r:?}");
}

fn from_f32_fn<B: BlockQuant>(src: &[f32], dst: &mut [u8]) {
    let r = quantize_row::<B>(src, dst);
    debug_assert!(r.is_ok(), "{r:?}");
}

// ------------------------------------------------------------------------------------------
// Entry points for `types::traits` and `mul_mat`
// ------------------------------------------------------------------------------------------

/// Conversions a block type provides.
#[derive(Clone, Copy)]
pub(crate) struct QuantTraits {
    pub to_f32: Option<ToF32Fn>,
    pub from_f32: Option<FromF32Fn>,
    pub vec_dot_type: DType,
}

fn traits_of<B: BlockQuant>() -> QuantTraits {
    QuantTraits {
        to_f32: Some(to_f32_fn::<B>),
        from_f32: if B::QUANTIZES && !B::NEEDS_WEIGHTS {
            Some(from_f32_fn::<B>)
        } else {
            None
        },
        vec_dot_type: <B::VecDot as BlockQuant>::DTYPE,
    }
}

/// The per-type table of the block types, indexed by [`DType`] (ggml's `type_traits_cpu`):
/// evaluates `$body` with the type alias `$B` naming the block struct of `$dtype`, or `$none`
/// when `$dtype` is not a block type. Every per-type answer of the crate — [`traits`] (the
/// conversions `types::traits` hands out), [`vec_dot_type`], the `_dyn` row functions, the
/// scalar dot products of `dispatch` — is read through it, so a new block type is its file
/// and one row here (plus, for speed, its kernels in `kernels/x86/`).
macro_rules! with_block {
    ($dtype:expr, $B:ident => $body:expr, _ => $none:expr) => {
        match $dtype {
            $crate::dtype::DType::Q4_0 => {
                type $B = $crate::quants::BlockQ4_0;
                $body
            }
            $crate::dtype::DType::Q4_1 => {
                type $B = $crate::quants::BlockQ4_1;
                $body
            }
            $crate::dtype::DType::Q5_0 => {
                type $B = $crate::quants::BlockQ5_0;
                $body
            }
            $crate::dtype::DType::Q5_1 => {
                type $B = $crate::quants::BlockQ5_1;
                $body
            }
            $crate::dtype::DType::Q8_0 => {
                type $B = $crate::quants::BlockQ8_0;
                $body
            }
            $crate::dtype::DType::Q8_1 => {
                type $B = $crate::quants::BlockQ8_1;
                $body
            }
            $crate::dtype::DType::Q2K => {
                type $B = $crate::quants::BlockQ2K;
                $body
            }
            $crate::dtype::DType::Q3K => {
                type $B = $crate::quants::BlockQ3K;
                $body
            }
            $crate::dtype::DType::Q4K => {
                type $B = $crate::quants::BlockQ4K;
                $body
            }
            $crate::dtype::DType::Q5K => {
                type $B = $crate::quants::BlockQ5K;
                $body
            }
            $crate::dtype::DType::Q6K => {
                type $B = $crate::quants::BlockQ6K;
                $body
            }
            $crate::dtype::DType::Q8K => {
                type $B = $crate::quants::BlockQ8K;
                $body
            }
            $crate::dtype::DType::IQ2XXS => {
                type $B = $crate::quants::BlockIQ2XXS;
                $body
            }
            $crate::dtype::DType::IQ2XS => {
                type $B = $crate::quants::BlockIQ2XS;
                $body
            }
            $crate::dtype::DType::IQ3XXS => {
                type $B = $crate::quants::BlockIQ3XXS;
                $body
            }
            $crate::dtype::DType::IQ1S => {
                type $B = $crate::quants::BlockIQ1S;
                $body
            }
            $crate::dtype::DType::IQ3S => {
                type $B = $crate::quants::BlockIQ3S;
                $body
            }
            $crate::dtype::DType::IQ2S => {
                type $B = $crate::quants::BlockIQ2S;
                $body
            }
            $crate::dtype::DType::IQ1M => {
                type $B = $crate::quants::BlockIQ1M;
                $body
            }
            $crate::dtype::DType::IQ4NL => {
                type $B = $crate::quants::BlockIQ4NL;
                $body
            }
            $crate::dtype::DType::IQ4XS => {
                type $B = $crate::quants::BlockIQ4XS;
                $body
            }
            $crate::dtype::DType::TQ1_0 => {
                type $B = $crate::quants::BlockTQ1_0;
                $body
            }
            $crate::dtype::DType::TQ2_0 => {
                type $B = $crate::quants::BlockTQ2_0;
                $body
            }
            $crate::dtype::DType::MXFP4 => {
                type $B = $crate::quants::BlockMXFP4;
                $body
            }
            $crate::dtype::DType::NVFP4 => {
                type $B = $crate::quants::BlockNVFP4;
                $body
            }
            $crate::dtype::DType::Q1_0 => {
                type $B = $crate::quants::BlockQ1_0;
                $body
            }
            $crate::dtype::DType::Q2_0 => {
                type $B = $crate::quants::BlockQ2_0;
                $body
            }
            _ => $none,
        }
    };
}

/// The traits of a block type, or `None` where this build has none.
/// `with_block!` by path, for the modules declared before it (`dispatch`).
pub(crate) use with_block;

pub(crate) fn traits(dtype: DType) -> Option<QuantTraits> {
    with_block!(dtype, B => Some(traits_of::<B>()), _ => None)
}

/// The fused dequantize-and-dot kernel of a block type, or `None` where this build has none.
pub(crate) fn vec_dot(dtype: DType) -> Option<VecDotKernel> {
    vec_dot_kernel(dtype)
}

/// The portable dot product in ggml's x86 order of a type that declares one
/// ([`BlockQuant::GGML_X86_DOT`]).
pub(crate) fn ggml_x86_dot(dtype: DType) -> Option<VecDotKernel> {
    with_block!(dtype, B => B::GGML_X86_DOT, _ => None)
}

/// The portable dot product in the order of ggml's x86 repacked kernels of a type that
/// declares one ([`BlockQuant::GGML_X86_REPACKED_DOT`]).
pub(crate) fn ggml_x86_repacked_dot(dtype: DType) -> Option<VecDotKernel> {
    with_block!(dtype, B => B::GGML_X86_REPACKED_DOT, _ => None)
}

/// The [`BlockQuant::VecDot`] type of a block type (`None` for non-block types).
pub fn vec_dot_type(dtype: DType) -> Option<DType> {
    with_block!(dtype, B => Some(<<B as BlockQuant>::VecDot as BlockQuant>::DTYPE), _ => None)
}

/// Dequantizes a row of any block type `dtype` (see [`dequantize_row`]).
pub fn dequantize_row_dyn(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    with_block!(dtype, B => dequantize_row::<B>(src, dst),
        _ => Err(not_a_block_type("quants::dequantize_row_dyn", dtype)))
}

/// Quantizes a row into any block type `dtype` (see [`quantize_row`]).
pub fn quantize_row_dyn(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    with_block!(dtype, B => quantize_row::<B>(src, dst),
        _ => Err(not_a_block_type("quants::quantize_row_dyn", dtype)))
}

/// Quantizes a row into any block type `dtype` with importance weights (see
/// [`quantize_row_weighted`]).
pub fn quantize_row_weighted_dyn(
    dtype: DType,
    src: &[f32],
    weights: &[f32],
    dst: &mut [u8],
) -> Result<()> {
    with_block!(dtype, B => quantize_row_weighted::<B>(src, weights, dst),
        _ => Err(not_a_block_type("quants::quantize_row_weighted_dyn", dtype)))
}

/// Whether ggrs writes block type `dtype` given importance weights: true for the types
/// with a `from_f32` conversion and for those that need weights
/// ([`BlockQuant::NEEDS_WEIGHTS`]); false for the others and for non-block types.
pub fn quantizes_weighted(dtype: DType) -> bool {
    with_block!(dtype, B => B::QUANTIZES, _ => false)
}

/// Whether block type `dtype` is written only with importance weights
/// ([`BlockQuant::NEEDS_WEIGHTS`]).
pub fn needs_weights(dtype: DType) -> bool {
    with_block!(dtype, B => B::QUANTIZES && B::NEEDS_WEIGHTS, _ => false)
}

/// Scalar dot product for weight type `dtype` (see [`vec_dot_row`]).
pub fn vec_dot_row_dyn(dtype: DType, n: usize, a: &[u8], b: &[u8]) -> Result<f32> {
    with_block!(dtype, B => vec_dot_row::<B>(n, a, b),
        _ => Err(not_a_block_type("quants::vec_dot_row_dyn", dtype)))
}

fn not_a_block_type(op: &'static str, dtype: DType) -> Error {
    Error::UnsupportedType {
        op,
        dtype,
        detail: format!(
            "not a block-quantized type (use one of {})",
            DType::ALL
                .iter()
                .filter(|t| t.is_quantized())
                .map(|t| t.name())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_dtype() {
        fn check<B: BlockQuant>(t: DType) -> Option<()> {
            assert_eq!(B::DTYPE, t);
            assert_eq!(B::BYTES, B::DTYPE.type_size(), "{}", B::DTYPE);
            assert_eq!(B::BLOCK_SIZE, B::DTYPE.block_size(), "{}", B::DTYPE);
            Some(())
        }
        for t in DType::ALL {
            let is_block = with_block!(t, B => check::<B>(t), _ => None).is_some();
            assert_eq!(is_block, t.is_quantized(), "{t}");
        }
    }

    #[test]
    fn fp16_rounding_like_ggml() {
        assert_eq!(to_fp16(f32::NAN).to_bits() & 0x7fff, 0x7E00);
        assert_eq!(to_fp16(1e6).to_bits(), 0x7C00);
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even.
        assert_eq!(to_fp16(1.0 + 1.0 / 2048.0).to_bits(), 0x3C00);
    }
}
