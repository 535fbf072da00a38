//! What this CPU can run, read once per process.
//!
//! Every kernel choice in the crate (the vector primitives' level, the dot-product builds of
//! `quants::dispatch`, the F16 tiles and the vectorised `exp` of `kernels::ggml_arith`, the
//! NEON kernels) asks [`features`] instead of probing the CPU itself, so that one process
//! never mixes two views of the machine and `GGRS_FORCE_SCALAR` is read in one place.
//!
//! ```
//! let cpu = ggrs_core::cpu::features();
//! println!("AVX2 {} AVX-512 {} VNNI {}", cpu.avx2, cpu.avx512(), cpu.avx512vnni);
//! ```

use std::sync::OnceLock;

/// The instruction-set extensions the kernels care about, as this CPU reports them, and
/// whether the user switched SIMD off (`GGRS_FORCE_SCALAR` set to anything but `0` or the
/// empty string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuFeatures {
    /// x86-64 AVX2.
    pub avx2: bool,
    /// x86-64 FMA3.
    pub fma: bool,
    /// x86-64 F16C (f16 ⇄ f32 conversions).
    pub f16c: bool,
    /// x86-64 AVX-512 Foundation.
    pub avx512f: bool,
    /// x86-64 AVX-512 byte and word instructions.
    pub avx512bw: bool,
    /// x86-64 AVX-512 vector-length extensions (128/256-bit forms).
    pub avx512vl: bool,
    /// x86-64 AVX-512 VNNI (`vpdpbusd`, `vpdpwssd`).
    pub avx512vnni: bool,
    /// AArch64 Advanced SIMD.
    pub neon: bool,
    /// AArch64 dot-product extension (`sdot`).
    pub dotprod: bool,
    /// `GGRS_FORCE_SCALAR` asks for the portable kernels only.
    pub force_scalar: bool,
}

impl CpuFeatures {
    /// Probes the CPU and the environment now (use [`features`] for the cached answer).
    pub fn detect() -> Self {
        let force_scalar =
            std::env::var("GGRS_FORCE_SCALAR").is_ok_and(|v| v != "0" && !v.is_empty());
        #[allow(unused_mut)]
        let mut f = CpuFeatures {
            force_scalar,
            ..CpuFeatures::default()
        };
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            f.avx2 = has!("avx2");
            f.fma = has!("fma");
            f.f16c = has!("f16c");
            f.avx512f = has!("avx512f");
            f.avx512bw = has!("avx512bw");
            f.avx512vl = has!("avx512vl");
            f.avx512vnni = has!("avx512vnni");
        }
        #[cfg(target_arch = "aarch64")]
        {
            use std::arch::is_aarch64_feature_detected as has;
            f.neon = has!("neon");
            f.dotprod = has!("dotprod");
        }
        f
    }

    /// AVX2 with FMA and F16C: what every x86 SIMD kernel here needs.
    pub fn avx2_fma_f16c(&self) -> bool {
        self.avx2 && self.fma && self.f16c
    }

    /// [`Self::avx2_fma_f16c`] and AVX-512 F, BW and VL: what the AVX-512 kernels need.
    pub fn avx512(&self) -> bool {
        self.avx2_fma_f16c() && self.avx512f && self.avx512bw && self.avx512vl
    }

    /// The SIMD level the x86 kernels run at (`Scalar` when SIMD is switched off).
    pub fn simd_level(&self) -> crate::kernels::vec::SimdLevel {
        use crate::kernels::vec::SimdLevel;
        if self.force_scalar {
            SimdLevel::Scalar
        } else if self.avx512() {
            SimdLevel::Avx512
        } else if self.avx2_fma_f16c() {
            SimdLevel::Avx2
        } else {
            SimdLevel::Scalar
        }
    }

    /// Whether this CPU can execute code built for `isa` (regardless of
    /// [`Self::force_scalar`], which the dispatcher applies).
    pub fn runs(&self, isa: crate::quants::dispatch::Isa) -> bool {
        use crate::quants::dispatch::Isa;
        match isa {
            Isa::Scalar => true,
            Isa::Avx2 => self.avx2_fma_f16c(),
            Isa::Avx512 => self.avx512(),
            Isa::Avx512Vnni => self.avx512() && self.avx512vnni,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => self.neon,
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDotprod => self.neon && self.dotprod,
        }
    }
}

/// This CPU's features, probed once per process (see [`CpuFeatures::detect`]).
pub fn features() -> &'static CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    FEATURES.get_or_init(CpuFeatures::detect)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_features() {
        use crate::kernels::vec::SimdLevel;
        use crate::quants::dispatch::Isa;
        let none = CpuFeatures::default();
        assert_eq!(none.simd_level(), SimdLevel::Scalar);
        assert!(none.runs(Isa::Scalar) && !none.runs(Isa::Avx2));
        let avx2 = CpuFeatures {
            avx2: true,
            fma: true,
            f16c: true,
            ..none
        };
        assert_eq!(avx2.simd_level(), SimdLevel::Avx2);
        assert!(avx2.runs(Isa::Avx2) && !avx2.runs(Isa::Avx512));
        // AVX-512 F without BW is not enough for the AVX-512 kernels.
        let f_only = CpuFeatures {
            avx512f: true,
            ..avx2
        };
        assert_eq!(f_only.simd_level(), SimdLevel::Avx2);
        let vnni = CpuFeatures {
            avx512bw: true,
            avx512vl: true,
            avx512vnni: true,
            ..f_only
        };
        assert_eq!(vnni.simd_level(), SimdLevel::Avx512);
        assert!(vnni.runs(Isa::Avx512Vnni));
        let forced = CpuFeatures {
            force_scalar: true,
            ..vnni
        };
        assert_eq!(forced.simd_level(), SimdLevel::Scalar);
        // The CPU still runs the code; the dispatcher is what declines it.
        assert!(forced.runs(Isa::Avx512Vnni));
    }
}
