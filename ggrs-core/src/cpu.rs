//! What this CPU can run, read once per process, in one vocabulary: [`Isa`].
//!
//! Every kernel choice in the crate (the vector primitives, the dot-product builds of
//! `quants::dispatch`, the F16 tiles and the vectorised `exp` of `kernels::ggml_arith`, the
//! panel kernels, the NEON kernels) asks [`isa`] (the best instruction set kernels may use
//! now) or [`CpuFeatures::runs`] (whether the CPU could run a build at all) instead of
//! probing the CPU itself, so that one process never mixes two views of the machine and
//! `GGRS_FORCE_SCALAR` is read in one place.
//!
//! ```
//! use ggrs_core::cpu::{self, Isa};
//! let f = cpu::features();
//! println!("AVX2 {} AVX-512 {} VNNI {}", f.avx2, f.avx512(), f.avx512vnni);
//! // `Scalar` under GGRS_FORCE_SCALAR=1; on this crate's x86-64 kernels the levels compare
//! // in order (AVX-512 kernels need `isa() >= Isa::Avx512`).
//! println!("kernels run at {:?}", cpu::isa());
//! assert!(cpu::isa() >= Isa::Scalar);
//! ```
//!
//! # AVX-VNNI
//!
//! [`Isa::Avx2Vnni`] is AVX2 with the VEX-encoded VNNI instructions (`vpdpbusd`,
//! `vpdpwssd` on 256 bits: Intel's client CPUs since Alder Lake, Sierra Forest). It sorts
//! between [`Isa::Avx2`] and [`Isa::Avx512`], so `isa() >= Isa::Avx2` (the AVX2 kernels
//! may run) holds for it and `isa() >= Isa::Avx512` does not; but AVX-512 does not imply
//! AVX-VNNI (Skylake-X, Ice Lake and Zen 4 lack it), so the AVX-VNNI builds are chosen for
//! `isa() == Isa::Avx2Vnni` only, never by `>=`. [`CpuFeatures::best_isa`] picks it only on
//! CPUs without AVX-512 (which have their own VNNI builds, or none);
//! [`CpuFeatures::runs`]`(Isa::Avx2Vnni)` says whether the CPU could run those builds at all
//! (so that tests on an AVX-512 machine with AVX-VNNI exercise them too), and
//! `GGRS_MAX_ISA=avx2vnni` makes such a machine choose them.

use std::sync::OnceLock;

/// An instruction set kernels are written for, the one vocabulary of the crate's dispatch.
///
/// Variants are ordered so that on x86-64 a higher one includes the lower ones
/// (`Avx512Vnni > Avx512 > Avx2Vnni > Avx2 > Scalar`), except that [`Isa::Avx512`] does not
/// include AVX-VNNI (see the module docs: its builds are chosen by `==`); the AArch64 ones
/// sort below every x86 one, so an x86 test such as `isa() >= Isa::Avx2` is false on AArch64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Portable code: the reference.
    Scalar,
    /// AArch64 NEON (Advanced SIMD), base ARMv8-A.
    #[cfg(target_arch = "aarch64")]
    Neon,
    /// AArch64 NEON with the dot-product extension (`sdot`).
    #[cfg(target_arch = "aarch64")]
    NeonDotprod,
    /// x86-64 AVX2 with FMA and F16C.
    Avx2,
    /// x86-64 AVX2 with FMA, F16C and AVX-VNNI (the VEX forms of `vpdpbusd`, `vpdpwssd`),
    /// on a CPU without AVX-512 (see the module docs).
    Avx2Vnni,
    /// x86-64 AVX-512 F/BW/VL (with FMA, F16C), without VNNI instructions.
    Avx512,
    /// x86-64 AVX-512 F/BW/VL with VNNI (`vpdpbusd`, `vpdpwssd`).
    Avx512Vnni,
}

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
    /// x86-64 AVX-VNNI (the VEX-encoded 128/256-bit `vpdpbusd`, `vpdpwssd`).
    pub avxvnni: bool,
    /// AArch64 Advanced SIMD.
    pub neon: bool,
    /// AArch64 dot-product extension (`sdot`).
    pub dotprod: bool,
    /// `GGRS_FORCE_SCALAR` asks for the portable kernels only.
    pub force_scalar: bool,
}

impl CpuFeatures {
    /// Probes the CPU and the environment now (use [`features`] for the cached answer).
    ///
    /// `GGRS_MAX_ISA` (`scalar`, `avx2`, `avx2vnni`, `avx512`, `avx512vnni`; on AArch64 `neon`,
    /// `neon-dotprod`) caps what the process sees: the extensions above that level read as
    /// absent, so every kernel choice is the one a CPU without them makes (to run the AVX2
    /// kernels on an AVX-512 machine, say). An unknown value is reported on standard error
    /// and ignored.
    pub fn detect() -> Self {
        let f = Self::detect_cpu();
        match std::env::var("GGRS_MAX_ISA") {
            Ok(v) if !v.is_empty() => match parse_isa(&v) {
                Some(cap) => f.capped(cap),
                None => {
                    eprintln!(
                        "ggrs: GGRS_MAX_ISA={v:?} is not one of {}; ignored",
                        ISA_NAMES.map(|(n, _)| n).join(", ")
                    );
                    f
                }
            },
            _ => f,
        }
    }

    /// These features as a CPU whose best instruction set is at most `cap` has them (the
    /// extensions above `cap` cleared; `Scalar` also sets [`Self::force_scalar`]).
    pub fn capped(self, cap: Isa) -> Self {
        let mut f = self;
        if cap < Isa::Avx512Vnni {
            f.avx512vnni = false;
        }
        if cap < Isa::Avx512 {
            (f.avx512f, f.avx512bw, f.avx512vl) = (false, false, false);
        }
        if cap < Isa::Avx2Vnni {
            f.avxvnni = false;
        }
        if cap < Isa::Avx2 {
            (f.avx2, f.fma, f.f16c) = (false, false, false);
        }
        #[cfg(target_arch = "aarch64")]
        {
            if cap < Isa::NeonDotprod {
                f.dotprod = false;
            }
            if cap < Isa::Neon {
                f.neon = false;
            }
        }
        if cap == Isa::Scalar {
            f.force_scalar = true;
        }
        f
    }

    /// The CPU's own features and `GGRS_FORCE_SCALAR`.
    fn detect_cpu() -> Self {
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
            f.avxvnni = has!("avxvnni");
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

    /// The best instruction set kernels may use: the best this CPU runs, or
    /// [`Isa::Scalar`] when [`Self::force_scalar`] switched SIMD off. [`Isa::Avx2Vnni`] only
    /// on CPUs without the AVX-512 kernels' features (see the module docs).
    pub fn best_isa(&self) -> Isa {
        let order = [
            Isa::Avx512Vnni,
            Isa::Avx512,
            Isa::Avx2Vnni,
            Isa::Avx2,
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDotprod,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon,
        ];
        if self.force_scalar {
            return Isa::Scalar;
        }
        order
            .into_iter()
            .find(|&i| self.runs(i))
            .unwrap_or(Isa::Scalar)
    }

    /// Whether this CPU can execute code built for `isa` (regardless of
    /// [`Self::force_scalar`], which the dispatcher applies). `Avx2Vnni` holds on AVX-512
    /// CPUs with AVX-VNNI too, though [`Self::best_isa`] never picks it there.
    pub fn runs(&self, isa: Isa) -> bool {
        match isa {
            Isa::Scalar => true,
            Isa::Avx2 => self.avx2_fma_f16c(),
            Isa::Avx2Vnni => self.avx2_fma_f16c() && self.avxvnni,
            Isa::Avx512 => self.avx512(),
            Isa::Avx512Vnni => self.avx512() && self.avx512vnni,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => self.neon,
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDotprod => self.neon && self.dotprod,
        }
    }
}

/// The names `GGRS_MAX_ISA` takes, and their instruction sets.
const ISA_NAMES: [(&str, Isa); ISA_COUNT] = [
    ("scalar", Isa::Scalar),
    ("avx2", Isa::Avx2),
    ("avx2vnni", Isa::Avx2Vnni),
    ("avx512", Isa::Avx512),
    ("avx512vnni", Isa::Avx512Vnni),
    #[cfg(target_arch = "aarch64")]
    ("neon", Isa::Neon),
    #[cfg(target_arch = "aarch64")]
    ("neon-dotprod", Isa::NeonDotprod),
];

#[cfg(target_arch = "aarch64")]
const ISA_COUNT: usize = 7;
#[cfg(not(target_arch = "aarch64"))]
const ISA_COUNT: usize = 5;

/// The instruction set a `GGRS_MAX_ISA` value names (case-insensitive), if any.
pub fn parse_isa(name: &str) -> Option<Isa> {
    let name = name.trim().to_ascii_lowercase();
    ISA_NAMES.iter().find(|(n, _)| *n == name).map(|&(_, i)| i)
}

/// This CPU's features, probed once per process (see [`CpuFeatures::detect`]).
pub fn features() -> &'static CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    FEATURES.get_or_init(CpuFeatures::detect)
}

/// The best instruction set kernels may use in this process ([`CpuFeatures::best_isa`] of
/// [`features`]): `Scalar` under `GGRS_FORCE_SCALAR`.
#[inline]
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| features().best_isa())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_features() {
        let none = CpuFeatures::default();
        assert_eq!(none.best_isa(), Isa::Scalar);
        assert!(none.runs(Isa::Scalar) && !none.runs(Isa::Avx2));
        let avx2 = CpuFeatures {
            avx2: true,
            fma: true,
            f16c: true,
            ..none
        };
        assert_eq!(avx2.best_isa(), Isa::Avx2);
        assert!(avx2.runs(Isa::Avx2) && !avx2.runs(Isa::Avx512));
        // AVX-512 F without BW is not enough for the AVX-512 kernels.
        let f_only = CpuFeatures {
            avx512f: true,
            ..avx2
        };
        assert_eq!(f_only.best_isa(), Isa::Avx2);
        let vnni = CpuFeatures {
            avx512bw: true,
            avx512vl: true,
            avx512vnni: true,
            ..f_only
        };
        assert_eq!(vnni.best_isa(), Isa::Avx512Vnni);
        assert!(vnni.runs(Isa::Avx512Vnni));
        let no_vnni = CpuFeatures {
            avx512vnni: false,
            ..vnni
        };
        assert_eq!(no_vnni.best_isa(), Isa::Avx512);
        assert!(Isa::Avx512Vnni > Isa::Avx512 && Isa::Avx512 > Isa::Avx2);
        // AVX-VNNI: chosen on a CPU without AVX-512 only, though AVX-512 CPUs with it run
        // its builds; it includes AVX2 (`>=`), and AVX2 alone does not run it.
        let avx_vnni = CpuFeatures {
            avxvnni: true,
            ..avx2
        };
        assert_eq!(avx_vnni.best_isa(), Isa::Avx2Vnni);
        assert!(avx_vnni.runs(Isa::Avx2Vnni) && avx_vnni.runs(Isa::Avx2));
        assert!(!avx_vnni.runs(Isa::Avx512) && !avx2.runs(Isa::Avx2Vnni));
        assert!(Isa::Avx2Vnni > Isa::Avx2 && Isa::Avx2Vnni < Isa::Avx512);
        let both = CpuFeatures {
            avxvnni: true,
            ..vnni
        };
        assert_eq!(both.best_isa(), Isa::Avx512Vnni);
        assert!(both.runs(Isa::Avx2Vnni));
        assert_eq!(
            CpuFeatures {
                avxvnni: true,
                ..no_vnni
            }
            .best_isa(),
            Isa::Avx512
        );
        // AVX-VNNI without the AVX2 kernels' F16C is nothing the kernels use.
        let no_f16c = CpuFeatures {
            f16c: false,
            ..avx_vnni
        };
        assert_eq!(no_f16c.best_isa(), Isa::Scalar);
        assert!(!no_f16c.runs(Isa::Avx2Vnni));
        let forced = CpuFeatures {
            force_scalar: true,
            ..vnni
        };
        assert_eq!(forced.best_isa(), Isa::Scalar);
        // The CPU still runs the code; the dispatcher is what declines it.
        assert!(forced.runs(Isa::Avx512Vnni));
    }

    #[test]
    fn a_cap_hides_the_extensions_above_it() {
        let vnni = CpuFeatures {
            avx2: true,
            fma: true,
            f16c: true,
            avx512f: true,
            avx512bw: true,
            avx512vl: true,
            avx512vnni: true,
            avxvnni: true,
            ..CpuFeatures::default()
        };
        assert_eq!(vnni.capped(Isa::Avx512Vnni), vnni);
        assert_eq!(vnni.capped(Isa::Avx512).best_isa(), Isa::Avx512);
        // `avx2vnni` on an AVX-512 machine with AVX-VNNI: the AVX-VNNI builds' choice.
        let avx2vnni = vnni.capped(Isa::Avx2Vnni);
        assert_eq!(avx2vnni.best_isa(), Isa::Avx2Vnni);
        assert!(avx2vnni.avxvnni && !avx2vnni.avx512f && !avx2vnni.avx512vnni);
        // `avx2` keeps meaning the plain AVX2 kernels: AVX-VNNI cleared too.
        let avx2 = vnni.capped(Isa::Avx2);
        assert_eq!(avx2.best_isa(), Isa::Avx2);
        assert!(!avx2.runs(Isa::Avx512) && !avx2.avx512f && avx2.f16c);
        assert!(!avx2.avxvnni && !avx2.runs(Isa::Avx2Vnni));
        let scalar = vnni.capped(Isa::Scalar);
        assert_eq!(scalar.best_isa(), Isa::Scalar);
        assert!(!scalar.runs(Isa::Avx2) && scalar.force_scalar);
        // A cap above what the CPU has changes nothing.
        let plain = CpuFeatures {
            avx2: true,
            fma: true,
            f16c: true,
            ..CpuFeatures::default()
        };
        assert_eq!(plain.capped(Isa::Avx512Vnni), plain);
        assert_eq!(plain.capped(Isa::Avx2Vnni).best_isa(), Isa::Avx2);
        assert_eq!(parse_isa(" AVX2 "), Some(Isa::Avx2));
        assert_eq!(parse_isa("avx2vnni"), Some(Isa::Avx2Vnni));
        assert_eq!(parse_isa("avx512vnni"), Some(Isa::Avx512Vnni));
        assert_eq!(parse_isa("sse4"), None);
    }

    /// `GGRS_MAX_ISA` read from the environment: in a child process of this test binary with
    /// `GGRS_MAX_ISA=avx2` (read once per process), the kernels run at AVX2 at most.
    #[test]
    fn the_environment_caps_the_process() {
        if let Some(cap) = std::env::var("GGRS_MAX_ISA")
            .ok()
            .and_then(|v| parse_isa(&v))
        {
            assert!(isa() <= cap, "isa {:?} above GGRS_MAX_ISA {cap:?}", isa());
            assert!(!features().runs(Isa::Avx512) || cap >= Isa::Avx512);
            assert!(!features().avxvnni || cap >= Isa::Avx2Vnni);
            return;
        }
        if !CpuFeatures::detect_cpu().runs(Isa::Avx2) {
            return;
        }
        let exe = std::env::current_exe().expect("the test binary");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "cpu::tests::the_environment_caps_the_process",
                "--nocapture",
            ])
            .env("GGRS_MAX_ISA", "avx2")
            .output()
            .expect("run the test binary");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "GGRS_MAX_ISA=avx2 run failed:\n{text}"
        );
        assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
    }
}
