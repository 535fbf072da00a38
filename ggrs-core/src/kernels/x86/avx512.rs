//! AVX-512 dot-product kernels.
//!
//! - Q4_0, Q5_0, Q8_0 × Q8_0: VNNI only (`vpdpbusd` on 256 bits), through the shared loop of
//!   `avx2::blocks_lanes`, so the f32 work is ggml's x86 order exactly (eight lanes of four
//!   products, one FMA per block and lane). `vpdpbusd` multiplies unsigned by signed bytes:
//!   one operand is offset (`y + 128` against the signed codes, or the unsigned codes
//!   against `y`) and each sum seeded with the negated correction; exact for any codes, so
//!   Q8_0 needs no 16-bit widening here. Without VNNI these types use the AVX2 kernels
//!   (AVX-512 BW adds nothing to them).
//! - Q4_K, Q6_K × Q8_K: 64 values (two sub-blocks of Q4_K, four of Q6_K) per 512-bit
//!   register, in two builds: VNNI (`vpdpwssd` for the scale multiply-accumulate) and
//!   without (`vpmaddwd` + add). The codes stay unsigned (≤ 63) against signed activations
//!   in `vpmaddubsw`: exact.
//!
//! Every kernel has the form `k::<R, C>(nb, [x; R], [y; C]) -> [[f32; C]; R]` (see
//! `kernels/x86/mod.rs`).
//!
//! # Safety
//! Each kernel needs a CPU with the features its `#[target_feature]` names, and `nb` whole
//! blocks readable at every `x[r]` and every `y[c]`.

use std::arch::x86_64::*;
use std::mem::offset_of;

use super::avx2::{blocks_lanes, BiasedDot, BlockChain, Lanes8, Q4_0Block, Q5_0Block, Q8_0Block};
use super::util::{f16_at, hsum256, hsum512, q4k_scales_mins, read_f32};
use crate::quants::{BlockQ4K, BlockQ6K, BlockQ8K, BlockQuant};

const Q4K: usize = BlockQ4K::BYTES;
const Q6K: usize = BlockQ6K::BYTES;
const Q8K: usize = BlockQ8K::BYTES;

/// The k-quants' scale multiply-accumulate, with or without VNNI.
trait IntDot {
    /// `acc + Σ a·b` per 32-bit lane over its two 16-bit halves (exact unless both products
    /// are −32768·−32768).
    ///
    /// # Safety
    /// The CPU supports the implementation's instructions.
    unsafe fn wssd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i;
}

/// AVX-512 BW without VNNI.
struct Plain;
/// AVX-512 VNNI.
struct Vnni;

impl IntDot for Plain {
    #[inline(always)]
    unsafe fn wssd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: register-only AVX-512 BW operations; callers run with AVX-512 BW.
        unsafe { _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)) }
    }
}

impl IntDot for Vnni {
    #[inline(always)]
    unsafe fn wssd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: only inlined into kernels built with (and run on CPUs with) AVX-512 VNNI.
        unsafe { _mm512_dpwssd_epi32(acc, a, b) }
    }
}

/// Defines the two builds `$plain` and `$vnni` of the generic body `$body::<D, C>`.
macro_rules! builds {
    ($(#[$doc:meta])* $plain:ident, $vnni:ident, $body:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// See the module docs.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
        pub(crate) unsafe fn $plain<const R: usize, const C: usize>(
            nb: usize,
            x: [*const u8; R],
            y: [*const u8; C],
        ) -> [[f32; C]; R] {
            // SAFETY: forwarded from the caller.
            unsafe { $body::<Plain, R, C>(nb, x, y) }
        }

        $(#[$doc])*
        /// (VNNI build.)
        ///
        /// # Safety
        /// See the module docs.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) unsafe fn $vnni<const R: usize, const C: usize>(
            nb: usize,
            x: [*const u8; R],
            y: [*const u8; C],
        ) -> [[f32; C]; R] {
            // SAFETY: forwarded from the caller.
            unsafe { $body::<Vnni, R, C>(nb, x, y) }
        }
    };
}

/// Every element's lanes reduced in a fixed order.
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline(always)]
unsafe fn finish<const R: usize, const C: usize>(acc: [[__m512; C]; R]) -> [[f32; C]; R] {
    let mut out = [[0f32; C]; R];
    for r in 0..R {
        for c in 0..C {
            // SAFETY: the caller guarantees AVX-512 F.
            out[r][c] = unsafe { hsum512(acc[r][c]) };
        }
    }
    out
}

/// VNNI on 256 bits: `vpdpbusd` takes the unsigned operand and the signed one directly,
/// seeded with the negated correction; exact for any codes.
struct Dpbusd;

impl BiasedDot for Dpbusd {
    #[inline(always)]
    unsafe fn weight_prepare(xs: __m256i) -> __m256i {
        // SAFETY: only inlined into kernels built with (and run on CPUs with) AVX-512 VNNI
        // and VL.
        unsafe {
            let zero = _mm256_setzero_si256();
            _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(-128), xs))
        }
    }

    #[inline(always)]
    unsafe fn weight_lanes(prep: __m256i, xs: __m256i, v: __m256i) -> __m256i {
        // SAFETY: as `weight_prepare`.
        unsafe { _mm256_dpbusd_epi32(prep, v, xs) }
    }

    #[inline(always)]
    unsafe fn act_prepare(off: __m256i, y: __m256i) -> __m256i {
        // SAFETY: as `weight_prepare`.
        unsafe {
            let zero = _mm256_setzero_si256();
            _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, off, y))
        }
    }

    #[inline(always)]
    unsafe fn act_lanes(prep: __m256i, u: __m256i, y: __m256i) -> __m256i {
        // SAFETY: as `weight_prepare`.
        unsafe { _mm256_dpbusd_epi32(prep, u, y) }
    }
}

/// Defines a VNNI kernel of a 32-value type: [`blocks_lanes`] with `vpdpbusd`.
macro_rules! vnni_lanes {
    ($(#[$doc:meta])* $name:ident, $X:ty, $A:ty) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// See the module docs.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) unsafe fn $name<const R: usize, const C: usize>(
            nb: usize,
            x: [*const u8; R],
            y: [*const u8; C],
        ) -> [[f32; C]; R] {
            // SAFETY: forwarded from the caller.
            unsafe { blocks_lanes::<$X, Dpbusd, $A, R, C>(nb, x, y) }
        }
    };
}

vnni_lanes!(
    /// Q4_0 × Q8_0 (VNNI), in ggml's lane order.
    q4_0_q8_0_vnni,
    Q4_0Block,
    Lanes8
);
vnni_lanes!(
    /// Q4_0 × Q8_0 (VNNI), in ggml's repacked-Q4_0 order.
    q4_0_q8_0_chain_vnni,
    Q4_0Block,
    BlockChain
);
vnni_lanes!(
    /// Q5_0 × Q8_0 (VNNI), in ggml's lane order.
    q5_0_q8_0_vnni,
    Q5_0Block,
    Lanes8
);
vnni_lanes!(
    /// Q8_0 × Q8_0 (VNNI), in ggml's lane order.
    q8_0_q8_0_vnni,
    Q8_0Block,
    Lanes8
);

/// 256-bit `v` in the low half of a 512-bit vector, the high half zero.
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline(always)]
unsafe fn zext(v: __m256i) -> __m512i {
    // SAFETY: register-only operation.
    unsafe { _mm512_inserti64x4::<0>(_mm512_setzero_si512(), v) }
}

/// `a` in the low 256 bits, `b` in the high 256 bits.
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline(always)]
unsafe fn join(a: __m256i, b: __m256i) -> __m512i {
    // SAFETY: register-only operation.
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b) }
}

#[inline(always)]
unsafe fn q4_k_body<D: IntDot, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads; `scales` is
    // read through a reference to `[u8; 12]` (alignment 1).
    unsafe {
        let low4 = _mm512_set1_epi8(0x0F);
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        let mut acc_min = [[_mm256_setzero_ps(); C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * Q4K);
                let dx = f16_at(xb.add(offset_of!(BlockQ4K, d)));
                let dmx = f16_at(xb.add(offset_of!(BlockQ4K, dmin)));
                let sm = q4k_scales_mins(&*xb.add(offset_of!(BlockQ4K, scales)).cast::<[u8; 12]>());
                let m = _mm_loadl_epi64(sm.as_ptr().add(8).cast());
                let mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));

                let mut sumi = [_mm512_setzero_si512(); C];
                for k in 0..4 {
                    // 64 values: sub-block 2k (low nibbles) then 2k + 1 (high nibbles).
                    let q = _mm256_loadu_si256(xb.add(offset_of!(BlockQ4K, qs) + 32 * k).cast());
                    let codes = _mm512_and_si512(join(q, _mm256_srli_epi16::<4>(q)), low4);
                    let scale = join(
                        _mm256_set1_epi16(sm[2 * k] as i16),
                        _mm256_set1_epi16(sm[2 * k + 1] as i16),
                    );
                    for c in 0..C {
                        let yq = y[c].add(i * Q8K + offset_of!(BlockQ8K, qs) + 64 * k);
                        let p = _mm512_maddubs_epi16(codes, _mm512_loadu_si512(yq.cast()));
                        sumi[c] = D::wssd(sumi[c], p, scale);
                    }
                }
                for c in 0..C {
                    let yb = y[c].add(i * Q8K);
                    let yd = read_f32(yb.add(offset_of!(BlockQ8K, d)));
                    let bsums = _mm256_loadu_si256(yb.add(offset_of!(BlockQ8K, bsums)).cast());
                    let msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, mins));
                    let d = _mm512_set1_ps(dx * yd);
                    acc[r][c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi[c]), acc[r][c]);
                    let dm = _mm256_set1_ps(dmx * yd);
                    acc_min[r][c] = _mm256_fmadd_ps(dm, msum, acc_min[r][c]);
                }
            }
        }
        let mut out = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                out[r][c] = hsum512(acc[r][c]) - hsum256(acc_min[r][c]);
            }
        }
        out
    }
}

/// `l / 8` for the 32 16-bit lanes `l`: with a base added, the sub-block of each lane of a
/// `vpmaddubsw` result over 64 Q6_K values.
static LANE_GROUP: [i16; 32] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
];

#[inline(always)]
unsafe fn q6_k_body<D: IntDot, const R: usize, const C: usize>(
    nb: usize,
    x: [*const u8; R],
    y: [*const u8; C],
) -> [[f32; C]; R] {
    // SAFETY: block i < nb of each row is readable (caller); unaligned loads.
    unsafe {
        let low4 = _mm512_set1_epi8(0x0F);
        let bits45 = _mm512_set1_epi8(0x30);
        let group = _mm512_loadu_si512(LANE_GROUP.as_ptr().cast());
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        for i in 0..nb {
            for r in 0..R {
                let xb = x[r].add(i * Q6K);
                let dx = f16_at(xb.add(offset_of!(BlockQ6K, d)));
                let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(
                    xb.add(offset_of!(BlockQ6K, scales)).cast(),
                ));
                let sc512 = _mm512_castsi256_si512(sc16);

                // The `− 32` of every code: 32·Σ_j sc_j·bsums_j, subtracted up front.
                let mut sumi = [_mm512_setzero_si512(); C];
                for c in 0..C {
                    let bsums = y[c].add(i * Q8K + offset_of!(BlockQ8K, bsums));
                    let off = _mm256_madd_epi16(sc16, _mm256_loadu_si256(bsums.cast()));
                    sumi[c] = _mm512_sub_epi32(sumi[c], zext(_mm256_slli_epi32::<5>(off)));
                }
                for h in 0..2 {
                    let ql = _mm512_loadu_si512(xb.add(offset_of!(BlockQ6K, ql) + 64 * h).cast());
                    let qh = _mm256_loadu_si256(xb.add(offset_of!(BlockQ6K, qh) + 32 * h).cast());
                    // qh in the low half, qh >> 2 in the high half: bit pairs 0/1 and 2/3 at
                    // bits 0–1 (`a`), 2/3 and 6/7 at bits 4–5 (`b`).
                    let qh2 = join(qh, _mm256_srli_epi16::<2>(qh));
                    // Values 128h + 0..64: low nibbles of ql[0..64]; 128h + 64..128: high.
                    let a = _mm512_or_si512(
                        _mm512_and_si512(ql, low4),
                        _mm512_and_si512(_mm512_slli_epi16::<4>(qh2), bits45),
                    );
                    let b = _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(ql), low4),
                        _mm512_and_si512(qh2, bits45),
                    );
                    let base = 8 * h as i16;
                    let ia = _mm512_add_epi16(group, _mm512_set1_epi16(base));
                    let ib = _mm512_add_epi16(group, _mm512_set1_epi16(base + 4));
                    let sa = _mm512_permutexvar_epi16(ia, sc512);
                    let sb = _mm512_permutexvar_epi16(ib, sc512);
                    for c in 0..C {
                        let yq = y[c].add(i * Q8K + offset_of!(BlockQ8K, qs) + 128 * h);
                        let pa = _mm512_maddubs_epi16(a, _mm512_loadu_si512(yq.cast()));
                        let pb = _mm512_maddubs_epi16(b, _mm512_loadu_si512(yq.add(64).cast()));
                        sumi[c] = D::wssd(D::wssd(sumi[c], pa, sa), pb, sb);
                    }
                }
                for c in 0..C {
                    let yd = read_f32(y[c].add(i * Q8K + offset_of!(BlockQ8K, d)));
                    let d = _mm512_set1_ps(dx * yd);
                    acc[r][c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi[c]), acc[r][c]);
                }
            }
        }
        finish(acc)
    }
}

builds!(
    /// Q4_K × Q8_K (the Q8_K blocks' `bsums` must be the sums of their codes).
    q4_k_q8_k,
    q4_k_q8_k_vnni,
    q4_k_body
);
builds!(
    /// Q6_K × Q8_K (the Q8_K blocks' `bsums` must be the sums of their codes); codes stay
    /// unsigned (0..=63) and the `− 32` comes from the group sums.
    q6_k_q8_k,
    q6_k_q8_k_vnni,
    q6_k_body
);
