//! The SIMD builds of the block dot products, by weight type and instruction set: the
//! `#[target_feature]` kernels of `kernels::x86` and `kernels::aarch64` wrapped in the
//! safe forms ([`VecDotKernel`] and its tiles) that `quants::dispatch` hands out once the
//! CPU was checked (see `kernels/x86/mod.rs` for how the kernels are built and which order
//! each keeps).

use crate::cpu::Isa;
use crate::dtype::DType;
#[cfg(target_arch = "aarch64")]
use crate::kernels::aarch64::neon;
#[cfg(target_arch = "x86_64")]
use crate::kernels::x86::{
    avx2, avx512, avxvnni, fp4, iquants, iquants512, lowbit, quantize, ternary, tiled_avx2,
};
use crate::quants::{
    BlockQuant, FromF32Fn, VecDot4Kernel, VecDotKernel, VecDotRows4Kernel, VecDotTileKernel,
};

/// Whole blocks usable in a call with `n` values: `n / BLOCK_SIZE`, cut to the blocks present
/// in every operand (debug builds assert that the operands are exact rows).
#[inline(always)]
pub(crate) fn usable_blocks<B: BlockQuant>(n: usize, xs: &[&[u8]], ys: &[&[u8]]) -> usize {
    // Activation bytes per weight block (several Q8_0 blocks for NVFP4, Q2_0 and Q1_0).
    let yb =
        B::BLOCK_SIZE / <B::VecDot as BlockQuant>::BLOCK_SIZE * <B::VecDot as BlockQuant>::BYTES;
    let nb = n / B::BLOCK_SIZE;
    debug_assert!(
        nb * B::BLOCK_SIZE == n
            && xs.iter().all(|a| a.len() == nb * B::BYTES)
            && ys.iter().all(|b| b.len() == nb * yb),
        "vec_dot {}: n = {n}, {:?} bytes against {:?}",
        B::DTYPE,
        xs.iter().map(|a| a.len()).collect::<Vec<_>>(),
        ys.iter().map(|b| b.len()).collect::<Vec<_>>()
    );
    let mut k = nb;
    for a in xs {
        k = k.min(a.len() / B::BYTES);
    }
    for b in ys {
        k = k.min(b.len() / yb);
    }
    k
}

/// Defines the constant `$name`: the safe forms ([`VecDotKernel`], [`VecDot4Kernel`],
/// [`VecDotRows4Kernel`], [`VecDotTileKernel`]) of one `#[target_feature]` kernel
/// `$m::$f::<R, C>(nb, [x; R], [y; C]) -> [[f32; C]; R]`.
///
/// The wrappers are private to this crate and only handed out by [`kernels`] after the CPU
/// was checked for the kernel's instruction set: that check is what makes their `unsafe`
/// calls sound.
macro_rules! wrappers {
    ($name:ident, $B:ty, $m:ident :: $f:ident) => {
        #[allow(non_upper_case_globals)]
        const $name: Forms = {
            fn one(n: usize, a: &[u8], b: &[u8]) -> f32 {
                let nb = usable_blocks::<$B>(n, &[a], &[b]);
                // SAFETY: `kernels` hands this function out only when the CPU supports the
                // kernel's target features; every row holds at least `nb` whole blocks of
                // its type (checked above), which is all the kernel reads.
                unsafe { $m::$f::<1, 1>(nb, [a.as_ptr()], [b.as_ptr()])[0][0] }
            }

            fn four(n: usize, a: &[u8], b: [&[u8]; 4]) -> [f32; 4] {
                let nb = usable_blocks::<$B>(n, &[a], &b);
                // SAFETY: as in `one`.
                unsafe { $m::$f::<1, 4>(nb, [a.as_ptr()], b.map(|s| s.as_ptr()))[0] }
            }

            fn rows4(n: usize, a: [&[u8]; 4], b: &[u8]) -> [f32; 4] {
                let nb = usable_blocks::<$B>(n, &a, &[b]);
                // SAFETY: as in `one`.
                let t = unsafe { $m::$f::<4, 1>(nb, a.map(|s| s.as_ptr()), [b.as_ptr()]) };
                t.map(|r| r[0])
            }

            fn tile(n: usize, a: [&[u8]; 4], b: [&[u8]; 4]) -> [[f32; 4]; 4] {
                let nb = usable_blocks::<$B>(n, &a, &b);
                // SAFETY: as in `one`.
                unsafe { $m::$f::<4, 4>(nb, a.map(|s| s.as_ptr()), b.map(|s| s.as_ptr())) }
            }

            (one, four, rows4, tile)
        };
    };
}

/// A kernel's forms: one element, one row × four columns, four rows × one column, four rows
/// × four columns.
pub(crate) type Forms = (
    VecDotKernel,
    VecDot4Kernel,
    VecDotRows4Kernel,
    VecDotTileKernel,
);

#[cfg(target_arch = "x86_64")]
mod forms {
    use super::*;
    use crate::quants::{
        BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS,
    };
    use crate::quants::{
        BlockIQ4NL, BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K,
        BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8_0, BlockTQ1_0, BlockTQ2_0,
    };
    use crate::quants::{BlockMXFP4, BlockNVFP4, BlockQ1_0, BlockQ2_0};

    wrappers!(q4_0_avx2, BlockQ4_0, avx2::q4_0_q8_0);
    wrappers!(iq4_nl_avx2, BlockIQ4NL, avx2::iq4_nl_q8_0);
    wrappers!(iq4_nl_avx2_chain, BlockIQ4NL, avx2::iq4_nl_q8_0_chain);
    wrappers!(iq4_xs_avx2, BlockIQ4XS, avx2::iq4_xs_q8_k);
    wrappers!(q4_1_avx2, BlockQ4_1, avx2::q4_1_q8_1);
    wrappers!(q5_1_avx2, BlockQ5_1, avx2::q5_1_q8_1);
    wrappers!(q5_0_avx2, BlockQ5_0, avx2::q5_0_q8_0);
    wrappers!(q8_0_avx2, BlockQ8_0, avx2::q8_0_q8_0);
    wrappers!(q4_k_avx2, BlockQ4K, avx2::q4_k_q8_k);
    wrappers!(q5_k_avx2, BlockQ5K, avx2::q5_k_q8_k);
    wrappers!(q6_k_avx2, BlockQ6K, avx2::q6_k_q8_k);
    wrappers!(tq1_0_avx2, BlockTQ1_0, ternary::tq1_0_q8_k);
    wrappers!(tq2_0_avx2, BlockTQ2_0, ternary::tq2_0_q8_k);
    wrappers!(mxfp4_avx2, BlockMXFP4, fp4::mxfp4_q8_0);
    wrappers!(mxfp4_avx2_chain, BlockMXFP4, fp4::mxfp4_q8_0_chain);
    wrappers!(mxfp4_vnni_chain, BlockMXFP4, fp4::mxfp4_q8_0_chain_vnni);
    wrappers!(nvfp4_avx2, BlockNVFP4, fp4::nvfp4_q8_0);
    wrappers!(q1_0_avx2, BlockQ1_0, lowbit::q1_0_q8_0);
    wrappers!(q2_0_avx2, BlockQ2_0, lowbit::q2_0_q8_0);
    wrappers!(iq2_xxs_avx2, BlockIQ2XXS, iquants::iq2_xxs_q8_k);
    wrappers!(iq2_xs_avx2, BlockIQ2XS, iquants::iq2_xs_q8_k);
    wrappers!(iq2_s_avx2, BlockIQ2S, iquants::iq2_s_q8_k);
    wrappers!(iq3_xxs_avx2, BlockIQ3XXS, iquants::iq3_xxs_q8_k);
    wrappers!(iq3_s_avx2, BlockIQ3S, iquants::iq3_s_q8_k);
    wrappers!(iq1_s_avx2, BlockIQ1S, iquants::iq1_s_q8_k);
    wrappers!(iq1_m_avx2, BlockIQ1M, iquants::iq1_m_q8_k);
    wrappers!(iq2_xxs_vnni, BlockIQ2XXS, iquants512::iq2_xxs_q8_k_vnni);
    wrappers!(iq2_xs_vnni, BlockIQ2XS, iquants512::iq2_xs_q8_k_vnni);
    wrappers!(iq2_s_vnni, BlockIQ2S, iquants512::iq2_s_q8_k_vnni);
    wrappers!(iq3_xxs_vnni, BlockIQ3XXS, iquants512::iq3_xxs_q8_k_vnni);
    wrappers!(iq3_s_vnni, BlockIQ3S, iquants512::iq3_s_q8_k_vnni);
    wrappers!(iq1_s_vnni, BlockIQ1S, iquants512::iq1_s_q8_k_vnni);
    wrappers!(iq1_m_vnni, BlockIQ1M, iquants512::iq1_m_q8_k_vnni);

    wrappers!(q4_k_avx512, BlockQ4K, avx512::q4_k_q8_k);
    wrappers!(q6_k_avx512, BlockQ6K, avx512::q6_k_q8_k);

    wrappers!(q4_0_vnni, BlockQ4_0, avx512::q4_0_q8_0_vnni);
    wrappers!(q5_0_vnni, BlockQ5_0, avx512::q5_0_q8_0_vnni);
    wrappers!(q8_0_vnni, BlockQ8_0, avx512::q8_0_q8_0_vnni);
    wrappers!(q4_k_vnni, BlockQ4K, avx512::q4_k_q8_k_vnni);
    wrappers!(q6_k_vnni, BlockQ6K, avx512::q6_k_q8_k_vnni);

    wrappers!(q4_0_avxvnni, BlockQ4_0, avxvnni::q4_0_q8_0);
    wrappers!(q5_0_avxvnni, BlockQ5_0, avxvnni::q5_0_q8_0);
    wrappers!(q8_0_avxvnni, BlockQ8_0, avxvnni::q8_0_q8_0);
    wrappers!(q4_1_avxvnni, BlockQ4_1, avxvnni::q4_1_q8_1);
    wrappers!(q5_1_avxvnni, BlockQ5_1, avxvnni::q5_1_q8_1);
    wrappers!(iq4_nl_avxvnni, BlockIQ4NL, avxvnni::iq4_nl_q8_0);
    wrappers!(q4_0_avxvnni_chain, BlockQ4_0, avxvnni::q4_0_q8_0_chain);
    wrappers!(iq4_nl_avxvnni_chain, BlockIQ4NL, avxvnni::iq4_nl_q8_0_chain);

    wrappers!(q4_0_avx2_chain, BlockQ4_0, avx2::q4_0_q8_0_chain);
    wrappers!(q4_0_vnni_chain, BlockQ4_0, avx512::q4_0_q8_0_chain_vnni);

    // ggml's tiled k-quant order (`SumOrder::GgmlTiled`).
    wrappers!(q2_k_tiled_avx2, BlockQ2K, tiled_avx2::q2_k_tiled);
    wrappers!(q3_k_tiled_avx2, BlockQ3K, tiled_avx2::q3_k_tiled);
    wrappers!(q4_k_tiled_avx2, BlockQ4K, tiled_avx2::q4_k_tiled);
    wrappers!(q5_k_tiled_avx2, BlockQ5K, tiled_avx2::q5_k_tiled);
    wrappers!(q6_k_tiled_avx2, BlockQ6K, tiled_avx2::q6_k_tiled);
    wrappers!(iq4_xs_tiled_avx2, BlockIQ4XS, tiled_avx2::iq4_xs_tiled);
    wrappers!(iq2_xxs_tiled_avx2, BlockIQ2XXS, iquants::iq2_xxs_tiled);
    wrappers!(iq2_xs_tiled_avx2, BlockIQ2XS, iquants::iq2_xs_tiled);
    wrappers!(iq2_s_tiled_avx2, BlockIQ2S, iquants::iq2_s_tiled);
    wrappers!(iq3_xxs_tiled_avx2, BlockIQ3XXS, iquants::iq3_xxs_tiled);
    wrappers!(iq3_s_tiled_avx2, BlockIQ3S, iquants::iq3_s_tiled);
    wrappers!(iq1_s_tiled_avx2, BlockIQ1S, iquants::iq1_s_tiled);
    wrappers!(iq1_m_tiled_avx2, BlockIQ1M, iquants::iq1_m_tiled);

    /// The kernel forms of `dtype` in ggml's tiled k-quant order for `isa`, without checking
    /// the CPU. (AVX-512 machines run the AVX2 builds.)
    pub(super) fn tiled_table(dtype: DType, isa: Isa) -> Option<Forms> {
        if isa != Isa::Avx2 {
            return None;
        }
        Some(match dtype {
            DType::Q2K => q2_k_tiled_avx2,
            DType::Q3K => q3_k_tiled_avx2,
            DType::Q4K => q4_k_tiled_avx2,
            DType::Q5K => q5_k_tiled_avx2,
            DType::Q6K => q6_k_tiled_avx2,
            DType::IQ4XS => iq4_xs_tiled_avx2,
            DType::IQ2XXS => iq2_xxs_tiled_avx2,
            DType::IQ2XS => iq2_xs_tiled_avx2,
            DType::IQ2S => iq2_s_tiled_avx2,
            DType::IQ3XXS => iq3_xxs_tiled_avx2,
            DType::IQ3S => iq3_s_tiled_avx2,
            DType::IQ1S => iq1_s_tiled_avx2,
            DType::IQ1M => iq1_m_tiled_avx2,
            _ => return None,
        })
    }

    /// The kernel forms of `dtype` written for `isa`, without checking the CPU.
    pub(super) fn table(dtype: DType, isa: Isa) -> Option<Forms> {
        let forms: Forms = match (isa, dtype) {
            (Isa::Avx2, DType::Q4_0) => q4_0_avx2,
            (Isa::Avx2, DType::Q4_1) => q4_1_avx2,
            (Isa::Avx2, DType::Q5_0) => q5_0_avx2,
            (Isa::Avx2, DType::Q5_1) => q5_1_avx2,
            (Isa::Avx2, DType::Q8_0) => q8_0_avx2,
            (Isa::Avx2, DType::Q4K) => q4_k_avx2,
            (Isa::Avx2, DType::Q5K) => q5_k_avx2,
            (Isa::Avx2, DType::Q6K) => q6_k_avx2,
            (Isa::Avx2, DType::IQ4NL) => iq4_nl_avx2,
            (Isa::Avx2, DType::IQ4XS) => iq4_xs_avx2,
            (Isa::Avx2, DType::TQ1_0) => tq1_0_avx2,
            (Isa::Avx2, DType::TQ2_0) => tq2_0_avx2,
            (Isa::Avx2, DType::MXFP4) => mxfp4_avx2,
            (Isa::Avx2, DType::NVFP4) => nvfp4_avx2,
            (Isa::Avx2, DType::Q1_0) => q1_0_avx2,
            (Isa::Avx2, DType::Q2_0) => q2_0_avx2,
            (Isa::Avx2, DType::IQ2XXS) => iq2_xxs_avx2,
            (Isa::Avx2, DType::IQ2XS) => iq2_xs_avx2,
            (Isa::Avx2, DType::IQ2S) => iq2_s_avx2,
            (Isa::Avx2, DType::IQ3XXS) => iq3_xxs_avx2,
            (Isa::Avx2, DType::IQ3S) => iq3_s_avx2,
            (Isa::Avx2, DType::IQ1S) => iq1_s_avx2,
            (Isa::Avx2, DType::IQ1M) => iq1_m_avx2,
            (Isa::Avx2Vnni, DType::Q4_0) => q4_0_avxvnni,
            (Isa::Avx2Vnni, DType::Q5_0) => q5_0_avxvnni,
            (Isa::Avx2Vnni, DType::Q8_0) => q8_0_avxvnni,
            (Isa::Avx2Vnni, DType::Q4_1) => q4_1_avxvnni,
            (Isa::Avx2Vnni, DType::Q5_1) => q5_1_avxvnni,
            (Isa::Avx2Vnni, DType::IQ4NL) => iq4_nl_avxvnni,
            (Isa::Avx512, DType::Q4K) => q4_k_avx512,
            (Isa::Avx512, DType::Q6K) => q6_k_avx512,
            (Isa::Avx512Vnni, DType::Q4_0) => q4_0_vnni,
            (Isa::Avx512Vnni, DType::Q5_0) => q5_0_vnni,
            (Isa::Avx512Vnni, DType::Q8_0) => q8_0_vnni,
            (Isa::Avx512Vnni, DType::Q4K) => q4_k_vnni,
            (Isa::Avx512Vnni, DType::Q6K) => q6_k_vnni,
            (Isa::Avx512Vnni, DType::IQ2XXS) => iq2_xxs_vnni,
            (Isa::Avx512Vnni, DType::IQ2XS) => iq2_xs_vnni,
            (Isa::Avx512Vnni, DType::IQ2S) => iq2_s_vnni,
            (Isa::Avx512Vnni, DType::IQ3XXS) => iq3_xxs_vnni,
            (Isa::Avx512Vnni, DType::IQ3S) => iq3_s_vnni,
            (Isa::Avx512Vnni, DType::IQ1S) => iq1_s_vnni,
            (Isa::Avx512Vnni, DType::IQ1M) => iq1_m_vnni,
            _ => return None,
        };
        Some(forms)
    }

    /// The kernel forms of `dtype` in ggml's repacked-Q4_0 order for `isa`, without checking
    /// the CPU.
    pub(super) fn chain_table(dtype: DType, isa: Isa) -> Option<Forms> {
        match (isa, dtype) {
            (Isa::Avx2, DType::Q4_0) => Some(q4_0_avx2_chain),
            (Isa::Avx2, DType::IQ4NL) => Some(iq4_nl_avx2_chain),
            (Isa::Avx2, DType::MXFP4) => Some(mxfp4_avx2_chain),
            (Isa::Avx2Vnni, DType::Q4_0) => Some(q4_0_avxvnni_chain),
            (Isa::Avx2Vnni, DType::IQ4NL) => Some(iq4_nl_avxvnni_chain),
            (Isa::Avx512Vnni, DType::MXFP4) => Some(mxfp4_vnni_chain),
            (Isa::Avx512Vnni, DType::Q4_0) => Some(q4_0_vnni_chain),
            _ => None,
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod forms {
    use super::*;
    use crate::quants::{BlockQ4_0, BlockQ8_0};

    wrappers!(q4_0_neon, BlockQ4_0, neon::q4_0_q8_0);
    wrappers!(q8_0_neon, BlockQ8_0, neon::q8_0_q8_0);
    wrappers!(q4_0_neon_chain, BlockQ4_0, neon::q4_0_q8_0_chain);
    wrappers!(q4_0_dotprod, BlockQ4_0, neon::q4_0_q8_0_dotprod);
    wrappers!(q8_0_dotprod, BlockQ8_0, neon::q8_0_q8_0_dotprod);
    wrappers!(q4_0_dotprod_chain, BlockQ4_0, neon::q4_0_q8_0_chain_dotprod);

    /// The kernel forms of `dtype` written for `isa`, without checking the CPU.
    pub(super) fn table(dtype: DType, isa: Isa) -> Option<Forms> {
        match (isa, dtype) {
            (Isa::Neon, DType::Q4_0) => Some(q4_0_neon),
            (Isa::Neon, DType::Q8_0) => Some(q8_0_neon),
            (Isa::NeonDotprod, DType::Q4_0) => Some(q4_0_dotprod),
            (Isa::NeonDotprod, DType::Q8_0) => Some(q8_0_dotprod),
            _ => None,
        }
    }

    /// The kernel forms of `dtype` in ggml's repacked-Q4_0 order for `isa`, without checking
    /// the CPU.
    pub(super) fn chain_table(dtype: DType, isa: Isa) -> Option<Forms> {
        match (isa, dtype) {
            (Isa::Neon, DType::Q4_0) => Some(q4_0_neon_chain),
            (Isa::NeonDotprod, DType::Q4_0) => Some(q4_0_dotprod_chain),
            _ => None,
        }
    }
}

/// The SIMD kernel forms of weight type `dtype` for `isa` (in ggml's repacked-Q4_0 order
/// when `chain`), if this build has them and this CPU runs them. `Isa::Scalar` has none here
/// (see `dispatch`).
pub(crate) fn kernels(dtype: DType, isa: Isa, chain: bool) -> Option<Forms> {
    if isa == Isa::Scalar || !crate::cpu::features().runs(isa) {
        return None;
    }
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        if chain {
            forms::chain_table(dtype, isa)
        } else {
            forms::table(dtype, isa)
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (dtype, chain);
        None
    }
}

/// The SIMD kernel forms of weight type `dtype` for `isa` in ggml's tiled k-quant order
/// (`dispatch::SumOrder::GgmlTiled`, bit-identical to `k_quants::tiled::dot_tiled`), if this
/// build has them and this CPU runs them.
pub(crate) fn tiled_kernels(dtype: DType, isa: Isa) -> Option<Forms> {
    if isa == Isa::Scalar || !crate::cpu::features().runs(isa) {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        forms::tiled_table(dtype, isa)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = dtype;
        None
    }
}

/// The SIMD activation quantizer into `dtype` for `isa`, if this build has one and this CPU
/// runs it. It writes exactly the reference quantizer's bytes.
pub(crate) fn quantizer(dtype: DType, isa: Isa) -> Option<FromF32Fn> {
    #[cfg(target_arch = "aarch64")]
    {
        fn q8_0(src: &[f32], dst: &mut [u8]) {
            // SAFETY: handed out below only when the CPU supports NEON; the function checks
            // the lengths itself.
            unsafe { neon::quantize_row_q8_0(src, dst) }
        }
        if isa == Isa::Neon && dtype == DType::Q8_0 && crate::cpu::features().runs(isa) {
            return Some(q8_0);
        }
    }
    if isa != Isa::Avx2 || !crate::cpu::features().runs(isa) {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        fn q8_0(src: &[f32], dst: &mut [u8]) {
            // SAFETY: handed out by `quantizer` only when the CPU supports AVX2 (and FMA,
            // F16C); the function checks the lengths itself.
            unsafe { quantize::quantize_row_q8_0(src, dst) }
        }
        fn q8_k(src: &[f32], dst: &mut [u8]) {
            // SAFETY: as above.
            unsafe { quantize::quantize_row_q8_k(src, dst) }
        }
        match dtype {
            DType::Q8_0 => Some(q8_0),
            DType::Q8K => Some(q8_k),
            _ => None,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = dtype;
        None
    }
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::kernels::RawTensor;
    use crate::quants::dispatch::{ggml_sum_order, vec_dot_variants_in, SumOrder};

    /// `nb` blocks of `t` with random codes and finite scales (deterministic).
    fn blocks(t: DType, nb: usize, seed: &mut u64) -> Vec<u8> {
        let mut next = || {
            *seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (*seed >> 33) as u32
        };
        let mut out = vec![0u8; nb * t.type_size()];
        for blk in out.chunks_exact_mut(t.type_size()) {
            for b in blk.iter_mut() {
                *b = next() as u8;
            }
            let h = half::f16::from_f32((next() % 2000) as f32 / 1000.0 - 1.0);
            blk[0..2].copy_from_slice(&h.to_le_bytes());
            if matches!(t, DType::Q4_1 | DType::Q5_1 | DType::Q8_1 | DType::Q5K) {
                // The minimum (or Q8_1's `s`): finite too.
                let h = half::f16::from_f32((next() % 2000) as f32 / 100.0 - 10.0);
                blk[2..4].copy_from_slice(&h.to_le_bytes());
            }
        }
        out
    }

    /// The SIMD builds `mul_mat` may use in place of `kernels::ggml_arith`'s dot products
    /// give ggml_arith's bits: the same choice of order for the same weight shape, and the
    /// same arithmetic.
    #[test]
    fn ggml_order_builds_match_ggml_arith() {
        let mut seed = 7u64;
        let k = 9 * 32;
        for (t, rows) in [
            (DType::Q4_0, 8),
            (DType::Q4_0, 12),
            (DType::Q4_0, 7),
            (DType::Q8_0, 8),
            (DType::IQ4NL, 8),
            (DType::IQ4NL, 7),
            (DType::IQ4XS, 8),
            (DType::IQ4XS, 5),
            (DType::Q4_1, 8),
            (DType::Q5_1, 7),
            (DType::Q5K, 8),
            (DType::Q5K, 5),
        ] {
            let k = k / 32 * t.block_size();
            let ne = [k, rows, 1, 1];
            let a = RawTensor {
                data: std::ptr::null_mut(),
                dtype: t,
                ne,
                nb: [
                    t.type_size(),
                    t.row_size(k),
                    t.row_size(k) * rows,
                    t.row_size(k) * rows,
                ],
            };
            let g = crate::kernels::ggml_arith::mul_mat_dot(a.dtype, a.ne, 4)
                .expect("ggml_arith has a kernel for Q4_0, Q8_0, Q4_1, Q5_1 and the i-quants");
            let vt = crate::quants::vec_dot_type(t).expect("block type");
            let order = ggml_sum_order(t, ne);
            assert_ne!(order, SumOrder::Any);
            let builds = vec_dot_variants_in(t, order);
            assert!(!builds.is_empty() || !crate::cpu::features().runs(crate::cpu::Isa::Avx2));
            let w = blocks(t, 4 * k / t.block_size(), &mut seed);
            let mut y = blocks(vt, 4 * k / t.block_size(), &mut seed);
            if vt == DType::Q8K {
                // Q8_K's scale is an f32: a finite one.
                for (i, blk) in y.chunks_exact_mut(vt.type_size()).enumerate() {
                    blk[..4].copy_from_slice(&(0.01 * (i as f32 + 1.0)).to_le_bytes());
                }
            }
            let (rs, ys) = (t.row_size(k), vt.row_size(k));
            let wr: [&[u8]; 4] = std::array::from_fn(|r| &w[r * rs..(r + 1) * rs]);
            let yr: [&[u8]; 4] = std::array::from_fn(|c| &y[c * ys..(c + 1) * ys]);
            for v in builds {
                let tile = (v.tile)(k, wr, yr);
                for r in 0..4 {
                    for c in 0..4 {
                        let want = g(k, wr[r], yr[c]);
                        assert_eq!(
                            tile[r][c].to_bits(),
                            want.to_bits(),
                            "{t} rows={rows} {:?} ({r}, {c})",
                            v.isa
                        );
                        assert_eq!((v.dot)(k, wr[r], yr[c]).to_bits(), want.to_bits());
                    }
                }
            }
        }
    }
    /// The AVX2 Q5_K build in `ggml_vec_dot_q5_K_q8_K`'s lanes gives the bits of the
    /// portable order it replaces (`k_quants::tiled::dot_q5_k_vec`), in every form, for
    /// random super-blocks, for extreme ones (every code 31 or 0, scales and minimums 63,
    /// activations ±127 and −128, group sums at the i16 limits) and several row lengths.
    #[test]
    fn q5_k_avx2_is_dot_q5_k_vec() {
        use crate::quants::dispatch::Isa;
        use crate::quants::k_quants::tiled::dot_q5_k_vec;
        if !crate::cpu::features().runs(Isa::Avx2) {
            return;
        }
        let builds = vec_dot_variants_in(DType::Q5K, SumOrder::GgmlLanes);
        assert!(builds.iter().any(|v| v.isa == Isa::Avx2));
        let mut seed = 23u64;
        let (xs, ys) = (DType::Q5K.type_size(), DType::Q8K.type_size());
        for nb in [1usize, 2, 3, 7, 19] {
            let k = nb * 256;
            for pattern in 0..6 {
                let mut w = blocks(DType::Q5K, 4 * nb, &mut seed);
                let mut y = blocks(DType::Q8K, 4 * nb, &mut seed);
                for (i, blk) in w.chunks_exact_mut(xs).enumerate() {
                    match pattern {
                        // Codes 31, scales and minimums 63.
                        1 => blk[4..].fill(0xFF),
                        // Codes 0, scales and minimums 63.
                        2 => {
                            blk[4..16].fill(0xFF);
                            blk[16..].fill(0);
                        }
                        // Large scales of both signs.
                        3 => {
                            let d = half::f16::from_f32(if i % 2 == 0 { 6.0e4 } else { -3.0e4 });
                            blk[0..2].copy_from_slice(&d.to_le_bytes());
                        }
                        _ => {}
                    }
                }
                for (i, blk) in y.chunks_exact_mut(ys).enumerate() {
                    let d = 0.01 * (i as f32 + 1.0) * if i % 3 == 0 { -1.0 } else { 1.0 };
                    blk[..4].copy_from_slice(&d.to_le_bytes());
                    match pattern {
                        1 => blk[4..260].fill(0x7F),
                        2 | 4 => blk[4..260].fill(0x80),
                        _ => {}
                    }
                    if pattern == 5 {
                        // Group sums at the ends of i16, whatever the codes.
                        for j in 0..16 {
                            let v: i16 = if j % 2 == 0 { i16::MAX } else { i16::MIN };
                            blk[260 + 2 * j..262 + 2 * j].copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
                let wr: [&[u8]; 4] = std::array::from_fn(|r| &w[r * nb * xs..(r + 1) * nb * xs]);
                let yr: [&[u8]; 4] = std::array::from_fn(|c| &y[c * nb * ys..(c + 1) * nb * ys]);
                let want: [[u32; 4]; 4] = std::array::from_fn(|r| {
                    std::array::from_fn(|c| dot_q5_k_vec(k, wr[r], yr[c]).to_bits())
                });
                for v in &builds {
                    let what = format!("{:?} nb={nb} pattern {pattern}", v.isa);
                    let tile = (v.tile)(k, wr, yr).map(|r| r.map(f32::to_bits));
                    assert_eq!(tile, want, "{what}");
                    let rows = (v.rows4)(k, wr, yr[1]).map(f32::to_bits);
                    assert_eq!(rows, want.map(|r| r[1]), "{what}");
                    let four = (v.dot4)(k, wr[2], yr).map(f32::to_bits);
                    assert_eq!(four, want[2], "{what}");
                    assert_eq!((v.dot)(k, wr[3], yr[0]).to_bits(), want[3][0], "{what}");
                }
            }
        }
    }
}
