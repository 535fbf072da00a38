//! Every `#[target_feature]` function for x86-64, by instruction set and concern.
//!
//! | file | what | instruction sets |
//! |---|---|---|
//! | `avx2.rs`, `avx512.rs` | block dot products in tiles (`dot_builds` wraps them) | AVX2 + FMA + F16C; AVX-512 F/BW/VL, VNNI |
//! | `avxvnni.rs` | `avx2.rs`'s 32-value dot products with `vpdpbusd` (VEX) | AVX2 + AVX-VNNI |
//! | `ternary.rs` | TQ1_0 / TQ2_0 dots in the order of ggml's AVX2 `ggml_vec_dot_tq*_0_q8_K` | AVX2 |
//! | `fp4.rs` | MXFP4 (vec_dot and repacked orders) / NVFP4 dots in the orders of ggml's x86 kernels | AVX2; AVX-512 VNNI (MXFP4 repacked) |
//! | `lowbit.rs` | Q1_0 / Q2_0 dots in the orders of ggml's AVX2 / generic `ggml_vec_dot_q*_0_q8_0` | AVX2 |
//! | `tiled_avx2.rs` | k-quant and IQ4_XS dots in ggml's tiled order, and their panels | AVX2 |
//! | `repacked_k.rs` | Q4_K / Q2_K in the order of ggml's repacked GEMV / GEMM | AVX2 |
//! | `iq_decode.rs` | IQ2/IQ3 grid i-quant blocks decoded into registers (for `iquants.rs`) | AVX2 |
//! | `iquants512.rs`, `iq_decode512.rs` | the grid i-quants' dots and panels of `iquants.rs`, 64 values per instruction | AVX-512 VNNI |
//! | `panel/` | `mul_mat`'s panel kernels (sixteen weight rows per panel) and packers | AVX-512 VNNI, AVX2 (some with AVX-VNNI builds) |
//! | `quantize.rs` | activation quantizers (f32 → Q8_0, Q8_1, Q8_K) | AVX2 |
//! | `f16.rs` | f16 widening, F16 / F32 dots in ggml's orders, f16 tiles | F16C, AVX2, AVX-512 |
//! | `exp.rs` | vectorised `expf` (glibc's and ggml's), SwiGLU groups | AVX2 + FMA, AVX-512 F |
//! | `attn.rs` | flash attention's f16 rows, key loops and score tiles | AVX2 + FMA + F16C, AVX-512 |
//! | `attn_quant.rs` | flash attention's key loop over quantized caches (groups of heads) | AVX2 + FMA + F16C |
//! | `util.rs` | unaligned reads and lane sums shared by the kernels (inlined) | any |
//!
//! Portable code that only needs to be *compiled* with more features (LLVM vectorises it,
//! `f32::mul_add` becomes one FMA) stays beside its op, and the `#[target_feature]`
//! wrapper that differs only by name comes from one macro, [`target_features!`]; the
//! kernels here are the ones written with intrinsics. Nothing here decides which kernel
//! runs: `kernels::select` and the ops ask [`crate::cpu::isa`] and call in.
//!
//! # Dot products of block-quantized rows
//!
//! SIMD dot products of block-quantized rows: Q4_0·Q8_0, Q5_0·Q8_0, Q8_0·Q8_0, Q4_K·Q8_K and
//! Q6_K·Q8_K, for x86-64 AVX2 and AVX-512 (with and without VNNI); Q4_1·Q8_1, Q5_1·Q8_1,
//! IQ4_NL·Q8_0 and IQ4_XS·Q8_K for AVX2 (which AVX-512 machines run too); Q4_0, Q5_0, Q8_0,
//! Q4_1, Q5_1 and IQ4_NL also for AVX2 with AVX-VNNI (`avxvnni.rs`, the same bits).
//!
//! # How the kernels are built
//!
//! Each kernel is one `#[target_feature]` function generic over a tile shape: `R` weight
//! rows times `C` activation columns. Each weight block is decoded once (nibbles unpacked,
//! scales converted) and dotted with the `C` columns, each activation block loaded once for
//! the `R` rows, and every element of the tile has its own accumulators and exactly the
//! sequence of operations of the 1 × 1 kernel, so its bits do not depend on the tile.
//! `mul_mat` uses 4 × 4 tiles where it has four rows and four columns (prompts: each weight
//! block decoded once per four columns, each activation block loaded once per four rows),
//! and 4 × 1 or 1 × 4 tiles for the rest (decoding: four independent dot products in flight
//! hide the latency of each).
//!
//! The integer part of every block's dot product is exact for *every* code pattern a block
//! may hold, −128 included: signed × signed products go through an unsigned operand offset
//! by a constant (`Σ x·y = Σ x·(y + 128) − 128·Σ x`) or through 16-bit products, never
//! through `vpsignb`, which overflows on −128. The k-quant kernels use Q8_K's per-16 sums
//! `bsums`, which must be the sums of the codes (as the Q8_K quantizer writes them; the
//! scalar Q4_K kernel relies on them too). What differs from the scalar reference is only the
//! order and fusion of the f32 operations (per-block scales applied with FMA, partial sums
//! kept in vector lanes and added in a fixed tree at the end; see below).
//!
//! Summation order. The Q4_0, Q5_0 and Q8_0 kernels keep ggml's x86 order exactly (eight
//! f32 lanes of four products, one FMA per block and lane, a fixed final tree: what
//! `ggml_vec_dot_q*_q8_0` and tinyBLAS do), and Q4_0 also comes in the order of ggml's
//! repacked `q4_0_8x8` kernels (one FMA per block on the exact block sum), so that `mul_mat`
//! can give llama.cpp's bits (see `kernels::ggml_arith` and `dispatch::SumOrder`). IQ4_NL
//! comes in the same two orders (tinyBLAS's and the repacked `iq4_nl_8x8`), IQ4_XS in the
//! order of ggml's AVX2 `ggml_vec_dot_iq4_xs_q8_K`. The
//! Q4_1 and Q5_1 kernels keep the order of ggml's x86 `ggml_vec_dot_q*_1_q8_1` (the same
//! lanes, plus one FMA chain of the minimum terms). The k-quant kernels keep their own order;
//! `tiled_avx2` holds the k-quant and IQ4_XS kernels in the order of ggml's tiled matmul
//! (tiles for the dispatch forms, and panels of rows × up to 16 columns for `mul_mat`).
//!
//! Rows are read with unaligned loads only: rows in GGUF files are 2-byte aligned.
//!
//! `quantize` holds the AVX2 activation quantizers: f32 → Q8_0 / Q8_K writing the reference
//! quantizers' bytes exactly, and ggml's own x86 Q8_0 / Q8_1 quantizers (its rounding,
//! for `mul_mat`'s INIT where llama.cpp's bits are the oracle).
//!

/// Builds portable bodies with x86-64 target features: every
/// `$vis fn name(args) -> ret = body;` becomes
/// `$vis unsafe fn name(args) -> ret { body(args) }` compiled with
/// `#[target_feature(enable = $features)]` (so that the inlined body is vectorised for
/// them and `f32::mul_add` is one instruction; the bits are the portable body's). These
/// are the wrappers that differ only in name and features: all of them come from here. On
/// other targets the macro expands to nothing.
///
/// A call is sound only on a CPU that has `$features` (the caller checks
/// [`crate::cpu::isa`]) and where the body's own contract, if it is an `unsafe fn`, holds.
macro_rules! target_features {
    ($features:literal: $(
        $(#[$m:meta])*
        $vis:vis fn $name:ident $(<$(const $c:ident: $ct:ty),* $(,)?>)?
            ($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? = $body:expr;
    )+) => {$(
        $(#[$m])*
        ///
        /// # Safety
        /// The CPU supports the target features this function is compiled with; the body's
        /// own contract holds.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        #[allow(unused_unsafe)]
        $vis unsafe fn $name $(<$(const $c: $ct),*>)? ($($arg: $ty),*) $(-> $ret)? {
            // SAFETY: the caller's guarantees are the body's (see the macro).
            unsafe { $body($($arg),*) }
        }
    )+};
}
pub(crate) use target_features;

#[cfg(target_arch = "x86_64")]
pub(crate) mod attn;
#[cfg(target_arch = "x86_64")]
pub(crate) mod attn_quant;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avxvnni;
#[cfg(target_arch = "x86_64")]
pub(crate) mod exp;
#[cfg(target_arch = "x86_64")]
pub(crate) mod f16;
#[cfg(target_arch = "x86_64")]
pub(crate) mod fp4;
#[cfg(target_arch = "x86_64")]
mod iq_decode;
#[cfg(target_arch = "x86_64")]
mod iq_decode512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod iquants;
#[cfg(target_arch = "x86_64")]
pub(crate) mod iquants512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod lowbit;
#[cfg(target_arch = "x86_64")]
pub(crate) mod panel;
#[cfg(target_arch = "x86_64")]
pub(crate) mod quantize;
#[cfg(target_arch = "x86_64")]
pub(crate) mod repacked_k;
#[cfg(target_arch = "x86_64")]
pub(crate) mod ternary;
#[cfg(target_arch = "x86_64")]
pub(crate) mod tiled_avx2;
#[cfg(target_arch = "x86_64")]
mod util;

/// The panel kernel of weight type `dtype` in ggml's tiled order, if there is one (the
/// caller checks the CPU): the K-quants' and IQ4_XS's from `tiled_avx2`, the grid
/// i-quants' from `iquants`. Kept here, above both, because `iquants` builds on
/// `tiled_avx2`'s accumulators.
#[cfg(target_arch = "x86_64")]
pub(crate) fn panel_kernel(dtype: crate::dtype::DType) -> Option<tiled_avx2::PanelFn> {
    use crate::dtype::DType;
    // The grid i-quants' AVX-512 VNNI panels where the CPU runs them (same bits).
    if let Some(p) = iquants512::panel_vnni(dtype).filter(|_| panel::vnni()) {
        return Some(p);
    }
    Some(match dtype {
        DType::Q2K => tiled_avx2::q2_k_panel,
        DType::Q3K => tiled_avx2::q3_k_panel,
        DType::Q4K => tiled_avx2::q4_k_panel,
        DType::Q5K => tiled_avx2::q5_k_panel,
        DType::Q6K => tiled_avx2::q6_k_panel,
        DType::IQ4XS => tiled_avx2::iq4_xs_panel,
        DType::IQ2XXS => iquants::iq2_xxs_panel,
        DType::IQ2XS => iquants::iq2_xs_panel,
        DType::IQ2S => iquants::iq2_s_panel,
        DType::IQ3XXS => iquants::iq3_xxs_panel,
        DType::IQ3S => iquants::iq3_s_panel,
        DType::IQ1S => iquants::iq1_s_panel,
        DType::IQ1M => iquants::iq1_m_panel,
        _ => return None,
    })
}
