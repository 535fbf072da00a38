//! Vector primitives (dot products, conversions) with run-time SIMD selection.
//!
//! Each primitive has one portable body written as 16 independent f32 lanes (multiply, then
//! add: never fused) reduced in a fixed tree. That body is compiled several times — plain,
//! with AVX2+FMA+F16C, with AVX-512 — and the best variant the CPU supports is chosen once,
//! at first use, through a cached function pointer. Because the arithmetic is the same
//! sequence of IEEE operations in every variant, the SIMD variants give the same bits as the
//! scalar reference. Set `GGRS_FORCE_SCALAR=1` to force the plain variant.

use std::sync::OnceLock;

use half::{bf16, f16};

#[cfg(target_arch = "x86_64")]
use crate::cpu::{isa, Isa};

/// The best instruction set the CPU itself supports, whatever `GGRS_FORCE_SCALAR` says (the
/// tests run every variant the CPU can).
#[cfg(all(test, target_arch = "x86_64"))]
fn detect() -> Isa {
    crate::cpu::CpuFeatures {
        force_scalar: false,
        ..*crate::cpu::features()
    }
    .best_isa()
}

const LANES: usize = 16;
/// Values converted at a time by the f16/bf16 dot products.
const BLOCK: usize = 128;

#[inline(always)]
fn lanes_fma(acc: &mut [f32; LANES], a: &[f32], b: &[f32]) {
    let n = a.len().min(b.len()) / LANES * LANES;
    for (ca, cb) in a[..n].chunks_exact(LANES).zip(b[..n].chunks_exact(LANES)) {
        for l in 0..LANES {
            acc[l] += ca[l] * cb[l];
        }
    }
}

#[inline(always)]
fn reduce_lanes(acc: &[f32; LANES]) -> f32 {
    let mut s8 = [0f32; 8];
    for l in 0..8 {
        s8[l] = acc[l] + acc[l + 8];
    }
    let mut s4 = [0f32; 4];
    for l in 0..4 {
        s4[l] = s8[l] + s8[l + 4];
    }
    (s4[0] + s4[2]) + (s4[1] + s4[3])
}

#[inline(always)]
fn dot_f32_body(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0f32; LANES];
    lanes_fma(&mut acc, &a[..n], &b[..n]);
    let mut tail = 0f32;
    for i in n / LANES * LANES..n {
        tail += a[i] * b[i];
    }
    reduce_lanes(&acc) + tail
}

#[inline(always)]
fn f16_to_f32_block(src: &[f16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

#[inline(always)]
fn bf16_to_f32_block(src: &[bf16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits((s.to_bits() as u32) << 16);
    }
}

macro_rules! dot_half_body {
    ($a:expr, $b:expr, $conv:expr) => {{
        let (a, b) = ($a, $b);
        let n = a.len().min(b.len());
        let mut acc = [0f32; LANES];
        let mut fa = [0f32; BLOCK];
        let mut fb = [0f32; BLOCK];
        let full = n / LANES * LANES;
        let mut i = 0;
        while i < full {
            let len = BLOCK.min(full - i);
            $conv(&a[i..i + len], &mut fa[..len]);
            $conv(&b[i..i + len], &mut fb[..len]);
            lanes_fma(&mut acc, &fa[..len], &fb[..len]);
            i += len;
        }
        let mut tail = 0f32;
        if full < n {
            let len = n - full;
            $conv(&a[full..n], &mut fa[..len]);
            $conv(&b[full..n], &mut fb[..len]);
            for k in 0..len {
                tail += fa[k] * fb[k];
            }
        }
        reduce_lanes(&acc) + tail
    }};
}

#[inline(always)]
fn dot_bf16_body(a: &[bf16], b: &[bf16]) -> f32 {
    dot_half_body!(a, b, bf16_to_f32_block)
}

/// Defines a public dispatching function `$name` over the portable `$body`, with AVX2 and
/// AVX-512 builds of the same body.
macro_rules! simd_dispatch {
    ($(#[$doc:meta])* $name:ident, $scalar:ident, $avx2:ident, $avx512:ident,
     fn($($arg:ident: $ty:ty),*) -> $ret:ty = $body:ident) => {
        /// The portable build (the reference the SIMD builds are tested against).
        pub fn $scalar($($arg: $ty),*) -> $ret {
            $body($($arg),*)
        }

        crate::kernels::x86::target_features!("avx2,fma,f16c":
            /// The AVX2 build.
            fn $avx2($($arg: $ty),*) -> $ret = $body;
        );
        crate::kernels::x86::target_features!("avx512f,avx512bw,avx512vl,fma,f16c":
            /// The AVX-512 build.
            fn $avx512($($arg: $ty),*) -> $ret = $body;
        );

        $(#[$doc])*
        #[inline]
        pub fn $name($($arg: $ty),*) -> $ret {
            static IMPL: OnceLock<fn($($ty),*) -> $ret> = OnceLock::new();
            let f = IMPL.get_or_init(|| {
                #[cfg(target_arch = "x86_64")]
                {
                    let level = isa();
                    if level >= Isa::Avx512 {
                        return |$($arg: $ty),*| {
                            // SAFETY: `isa()` is AVX-512 or better only when the CPU reports
                            // AVX-512 F/BW/VL, FMA and F16C.
                            unsafe { $avx512($($arg),*) }
                        };
                    }
                    if level >= Isa::Avx2 {
                        return |$($arg: $ty),*| {
                            // SAFETY: `isa()` is AVX2 or better only when the CPU reports
                            // AVX2, FMA and F16C.
                            unsafe { $avx2($($arg),*) }
                        };
                    }
                }
                $scalar
            });
            f($($arg),*)
        }

        #[cfg(all(test, target_arch = "x86_64"))]
        impl SimdVariants {
            /// Every variant this CPU can run, with its level.
            #[allow(dead_code)]
            pub(crate) fn $name() -> Vec<(Isa, fn($($ty),*) -> $ret)> {
                let mut v: Vec<(Isa, fn($($ty),*) -> $ret)> = vec![(Isa::Scalar, $scalar)];
                let lvl = detect();
                if lvl >= Isa::Avx2 {
                    // SAFETY: the CPU reports AVX2, FMA and F16C.
                    v.push((Isa::Avx2, |$($arg: $ty),*| unsafe { $avx2($($arg),*) }));
                }
                if lvl >= Isa::Avx512 {
                    // SAFETY: the CPU reports AVX-512 F/BW/VL, FMA and F16C.
                    v.push((Isa::Avx512, |$($arg: $ty),*| unsafe { $avx512($($arg),*) }));
                }
                v
            }
        }
    };
}

#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) struct SimdVariants;

simd_dispatch!(
    /// `Σ a[i]·b[i]` over the shorter length, f32.
    dot_f32, dot_f32_scalar, dot_f32_avx2, dot_f32_avx512,
    fn(a: &[f32], b: &[f32]) -> f32 = dot_f32_body
);

simd_dispatch!(
    /// `Σ a[i]·b[i]` of bf16 vectors, accumulated in f32.
    dot_bf16, dot_bf16_scalar, dot_bf16_avx2, dot_bf16_avx512,
    fn(a: &[bf16], b: &[bf16]) -> f32 = dot_bf16_body
);

#[inline(always)]
fn dot_f16_with(a: &[f16], b: &[f16], conv: impl Fn(&[f16], &mut [f32])) -> f32 {
    dot_half_body!(a, b, conv)
}

/// A dot product of two f16 vectors.
type DotF16Fn = fn(&[f16], &[f16]) -> f32;

/// The portable build of [`dot_f16`] (the reference the SIMD builds are tested against).
pub fn dot_f16_scalar(a: &[f16], b: &[f16]) -> f32 {
    dot_f16_with(a, b, f16_to_f32_block)
}

/// [`dot_f16`] converting with F16C.
///
/// # Safety
/// The CPU supports AVX and F16C.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dot_f16_f16c_body(a: &[f16], b: &[f16]) -> f32 {
    // SAFETY: the caller guarantees F16C.
    dot_f16_with(a, b, |s, d| unsafe {
        crate::kernels::x86::f16::f16_to_f32_block_f16c(s, d)
    })
}

crate::kernels::x86::target_features!("avx2,fma,f16c":
    /// The AVX2 build of [`dot_f16`].
    fn dot_f16_avx2(a: &[f16], b: &[f16]) -> f32 = dot_f16_f16c_body;
);
crate::kernels::x86::target_features!("avx512f,avx512bw,avx512vl,fma,f16c":
    /// The AVX-512 build of [`dot_f16`].
    fn dot_f16_avx512(a: &[f16], b: &[f16]) -> f32 = dot_f16_f16c_body;
);

/// `Σ a[i]·b[i]` of f16 vectors, accumulated in f32 (products of f16 values are exact in
/// f32). The SIMD builds convert with F16C; all builds give the same bits.
#[inline]
pub fn dot_f16(a: &[f16], b: &[f16]) -> f32 {
    static IMPL: OnceLock<DotF16Fn> = OnceLock::new();
    let f = IMPL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let level = isa();
            if level >= Isa::Avx512 {
                // SAFETY: `isa()` is AVX-512 or better only when the CPU reports AVX-512
                // F/BW/VL, FMA and F16C.
                return |a, b| unsafe { dot_f16_avx512(a, b) };
            }
            if level >= Isa::Avx2 {
                // SAFETY: `isa()` is AVX2 or better only when the CPU reports AVX2, FMA and
                // F16C.
                return |a, b| unsafe { dot_f16_avx2(a, b) };
            }
        }
        dot_f16_scalar
    });
    f(a, b)
}

#[cfg(all(test, target_arch = "x86_64"))]
impl SimdVariants {
    /// Every build of [`dot_f16`] this CPU can run.
    pub(crate) fn dot_f16() -> Vec<(Isa, DotF16Fn)> {
        let mut v: Vec<(Isa, DotF16Fn)> = vec![(Isa::Scalar, dot_f16_scalar)];
        let lvl = detect();
        if lvl >= Isa::Avx2 {
            // SAFETY: the CPU reports AVX2, FMA and F16C.
            v.push((Isa::Avx2, |a, b| unsafe { dot_f16_avx2(a, b) }));
        }
        if lvl >= Isa::Avx512 {
            // SAFETY: the CPU reports AVX-512 F/BW/VL, FMA and F16C.
            v.push((Isa::Avx512, |a, b| unsafe { dot_f16_avx512(a, b) }));
        }
        v
    }
}

/// `ln Σᵢ exp(xᵢ)`, as `m + ln Σᵢ exp(xᵢ − m)` with `m` the largest value: the exponentials
/// with ggml's vectorised `expf` (about 1.5 ulp, sixteen values at a time; AVX-512 where the
/// CPU has it, the same bits in portable code), summed in f64 in sixteen lanes added in
/// order at the end, so the result has the same bits on every CPU. For log-probabilities
/// over a vocabulary (`log_softmax(x)ᵢ = xᵢ − log_sum_exp(x)`), an order of magnitude
/// faster than an f64 `exp` per value (`docs/kernel-bench-notes.md`). NaN for an empty
/// slice or one whose largest value is infinite.
///
/// ```
/// let x = [1.0f32, 2.0, 3.0];
/// let want = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
/// assert!((ggrs_core::kernels::vec::log_sum_exp(&x) - want).abs() < 1e-6);
/// ```
pub fn log_sum_exp(x: &[f32]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx512 {
        // SAFETY: `isa()` is AVX-512 or better only when the CPU has AVX-512 F (and AVX2
        // and FMA, which the fallback builds take).
        return unsafe { log_sum_exp_avx512(x) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx2 {
        // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2, FMA and F16C.
        return unsafe { log_sum_exp_avx2(x) };
    }
    log_sum_exp_body(x)
}

/// [`log_sum_exp`] compiled for AVX2 and FMA: the same operations (`mul_add` is one fused
/// step either way), with the FMA instruction instead of a call of the C library's `fmaf`
/// per product, which had made it about 5% of a token's decoding time on qwen05b.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn log_sum_exp_avx2(x: &[f32]) -> f64 {
    log_sum_exp_body(x)
}

/// [`log_sum_exp`] written for AVX-512, with the portable body's bits: the maximum of the
/// row (exact in any order; rows with a NaN take the AVX2 build), then per group of sixteen
/// `x − M` through ggml's `v_expf` (`v_expf16` runs the same `v_expf_512` on such a CPU),
/// each lane widened and added to its own f64 lane, the tail and the final sum as the body
/// does them. It runs once per generated token over the vocabulary (about 152k logits on
/// qwen05b), where the body's per-group calls and stores through arrays took several times
/// longer.
///
/// # Safety
/// The CPU must have AVX-512 F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn log_sum_exp_avx512(x: &[f32]) -> f64 {
    use std::arch::x86_64::*;
    let mut chunks = x.chunks_exact(16);
    let mut vmax = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut nan = 0u16;
    for c in &mut chunks {
        // SAFETY: sixteen floats readable in the chunk.
        let v = unsafe { _mm512_loadu_ps(c.as_ptr()) };
        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        vmax = _mm512_max_ps(vmax, v);
    }
    if nan != 0 {
        // SAFETY: the caller's features include AVX2 and FMA.
        return unsafe { log_sum_exp_avx2(x) };
    }
    let mut lanes = [0f32; 16];
    // SAFETY: sixteen floats writable.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), vmax) };
    let m = chunks
        .remainder()
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    if !m.is_finite() {
        return f64::NAN;
    }
    let mv = _mm512_set1_ps(m);
    let (mut lo, mut hi) = (_mm512_setzero_pd(), _mm512_setzero_pd());
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        // SAFETY: sixteen floats readable in the chunk; the features are this function's.
        let e = unsafe {
            crate::kernels::x86::exp::v_expf_512(_mm512_sub_ps(_mm512_loadu_ps(c.as_ptr()), mv))
        };
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        hi = _mm512_add_pd(
            hi,
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                _mm512_castps_pd(e),
            ))),
        );
    }
    let mut sums = [0f64; 16];
    // SAFETY: sixteen f64 writable, eight at a time.
    unsafe {
        _mm512_storeu_pd(sums.as_mut_ptr(), lo);
        _mm512_storeu_pd(sums.as_mut_ptr().add(8), hi);
    }
    for (l, &v) in sums.iter_mut().zip(chunks.remainder()) {
        *l += crate::kernels::ggml_arith::v_expf(v - m) as f64;
    }
    m as f64 + sums.iter().sum::<f64>().ln()
}

#[inline(always)]
fn log_sum_exp_body(x: &[f32]) -> f64 {
    use crate::kernels::ggml_arith::{v_expf, v_expf16};
    let m = x.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    if !m.is_finite() {
        return f64::NAN;
    }
    let mut lanes = [0f64; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        let mut d = [0f32; 16];
        for (o, &v) in d.iter_mut().zip(c) {
            *o = v - m;
        }
        for (l, e) in lanes.iter_mut().zip(v_expf16(&d)) {
            *l += e as f64;
        }
    }
    for (l, &v) in lanes.iter_mut().zip(chunks.remainder()) {
        *l += v_expf(v - m) as f64;
    }
    m as f64 + lanes.iter().sum::<f64>().ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_arch = "x86_64")]
    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 + seed as f32) * 0.37).sin() * 3.0)
            .collect()
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn simd_variants_match_scalar_bit_for_bit() {
        let a = data(600, 1);
        let b = data(600, 7);
        let ah: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
        let bh: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
        let ab: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
        let bb: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
        for n in 0..=515 {
            for off in 0..3 {
                let r = off..off + n;
                let want = dot_f32_scalar(&a[r.clone()], &b[r.clone()]);
                let naive: f64 = a[r.clone()]
                    .iter()
                    .zip(&b[r.clone()])
                    .map(|(x, y)| *x as f64 * *y as f64)
                    .sum();
                assert!(
                    (want as f64 - naive).abs() <= 1e-4 * (1.0 + naive.abs()),
                    "n={n}"
                );
                for (lvl, f) in SimdVariants::dot_f32() {
                    assert_eq!(
                        f(&a[r.clone()], &b[r.clone()]).to_bits(),
                        want.to_bits(),
                        "{lvl:?} n={n}"
                    );
                }
                let want = dot_f16_scalar(&ah[r.clone()], &bh[r.clone()]);
                for (lvl, f) in SimdVariants::dot_f16() {
                    assert_eq!(
                        f(&ah[r.clone()], &bh[r.clone()]).to_bits(),
                        want.to_bits(),
                        "{lvl:?} n={n}"
                    );
                }
                let want = dot_bf16_scalar(&ab[r.clone()], &bb[r.clone()]);
                for (lvl, f) in SimdVariants::dot_bf16() {
                    assert_eq!(
                        f(&ab[r.clone()], &bb[r.clone()]).to_bits(),
                        want.to_bits(),
                        "{lvl:?} n={n}"
                    );
                }
            }
        }
    }

    #[test]
    fn log_sum_exp_is_close_to_the_f64_sum_and_has_one_set_of_bits() {
        // A vocabulary-sized row: a few large values among many small ones.
        let x: Vec<f32> = (0..151_937u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) >> 8) % 4000) as f32 / 100.0 - 25.0)
            .collect();
        let m = x.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v)) as f64;
        let exact = m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
        let got = log_sum_exp(&x);
        assert!((got - exact).abs() < 1e-6, "{got} vs {exact}");
        // Tails of every length and a lone value.
        for n in [1usize, 15, 16, 17, 33] {
            let s = &x[..n];
            let mm = s.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v)) as f64;
            let e = mm + s.iter().map(|&v| (v as f64 - mm).exp()).sum::<f64>().ln();
            assert!((log_sum_exp(s) - e).abs() < 1e-6, "n = {n}");
        }
        assert!(log_sum_exp(&[]).is_nan());
        assert!(log_sum_exp(&[f32::NEG_INFINITY; 3]).is_nan());
        // The AVX2+FMA and AVX-512 builds have the portable body's bits (values far below
        // the maximum included: their exponentials are subnormal or 0).
        #[cfg(target_arch = "x86_64")]
        {
            let mut y = x.clone();
            for (i, v) in y.iter_mut().enumerate().step_by(97) {
                *v = -60.0 - (i % 200) as f32;
            }
            y[5] = f32::NEG_INFINITY;
            for x in [&x, &y] {
                for n in [x.len(), 1, 15, 16, 17, 31, 1000] {
                    let want = log_sum_exp_body(&x[..n]).to_bits();
                    if isa() >= Isa::Avx2 {
                        // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2 and
                        // FMA.
                        let fast = unsafe { log_sum_exp_avx2(&x[..n]) };
                        assert_eq!(fast.to_bits(), want, "n = {n}");
                    }
                    if isa() >= Isa::Avx512 {
                        // SAFETY: `isa()` is AVX-512 or better only when the CPU has
                        // AVX-512 F, AVX2 and FMA.
                        let fast = unsafe { log_sum_exp_avx512(&x[..n]) };
                        assert_eq!(fast.to_bits(), want, "n = {n}");
                    }
                }
            }
            if isa() >= Isa::Avx512 {
                // A NaN: NaN, as the body gives.
                let mut z = x[..40].to_vec();
                z[20] = f32::NAN;
                // SAFETY: as above.
                let fast = unsafe { log_sum_exp_avx512(&z) };
                assert!(fast.is_nan() && log_sum_exp_body(&z).is_nan());
            }
        }
    }
}
