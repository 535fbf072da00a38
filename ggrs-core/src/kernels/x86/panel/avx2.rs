//! The panel kernels (`panel`: sixteen weight rows per panel, one row per 32-bit lane) for
//! CPUs with AVX2 but without AVX-512 VNNI: each panel is two halves of eight rows, the low
//! and high 32 bytes of every packed 64-byte vector.
//!
//! The integer sums are the same exact integers the VNNI kernels make, through `vpmaddubsw`
//! (unsigned × signed bytes, pairs into 16 bits) and `vpmaddwd` by ones (pairs of pairs into
//! 32 bits); the f32 operations are the VNNI kernels' (ggml's orders), so both builds give
//! the same bits:
//!
//! - Q4_0 chain: the eight quads of a half-block's codes (0..=15) against the activation
//!   quads, products summed in 16 bits (each `vpmaddubsw` pair is at most 2·15·127 in
//!   magnitude, eight of them 30 480 < 2¹⁵), widened, plus the seed `−8 · Σ y`; then
//!   `acc = fma(s, dx·dy, acc)` per block.
//! - Q8_0 lanes: the packed codes are `x` itself (the portable packer leaves them signed
//!   where this build runs: [`super::flips_q8_0`]); `|x|` (at most 128,
//!   as an unsigned byte) against `y` carrying `x`'s sign (`vpsignb`: the activations come
//!   from the Q8_0 quantizer, so |y| ≤ 127 and the negation is exact), pairs at most
//!   2·128·127 < 2¹⁵. Eight accumulators per row, one per quad, added at the end in
//!   ggml's tree.
//!
//! AVX-VNNI builds (`*_vnni`, for CPUs whose best level is `cpu::Isa::Avx2Vnni`) of the
//! Q4_0 chain, the Q8_0 lanes and the lanes kernel (which `panel::gemm` runs for Q5_0 with
//! several columns only: the others measured no faster than the AVX2 builds) share these
//! bodies through
//! [`QuadSum`]: `vpdpbusd` (VEX) accumulates four products straight into each 32-bit lane,
//! seeded with the correction (the side data's `−o · Σ y`), instead of the 16-bit stage and
//! `vpmaddwd` by ones; their Q8_0 panels hold the codes as `x + 128`, as the AVX-512 VNNI
//! kernel's do ([`super::flips_q8_0`]). Q4_K's repacked kernels (`repacked_avx2`) multiply
//! their 16-bit sums by the scales with `vpdpwssd` there (`vpmaddwd` and an add fused; the
//! Q6_K lanes, which could do the same, measured no faster). The same exact integers, the
//! same f32 steps: the same bits as the AVX2 and the AVX-512 VNNI builds.
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX2, FMA and F16C (the `*_vnni` builds also
//! AVX-VNNI); the pointer contracts are those of [`super::gemm`].

use std::arch::x86_64::*;

use super::super::util::{read_f32, read_u16, read_u32};
use super::{q4_0_at, q6_k_qh, q6_k_ql, Kind, AUX_BYTES, ROWS};

/// Bytes of a Q8_0 block (activations).
const Q8_0_BYTES: usize = 34;

/// The prefetch of the two-half kernels here at the `len` bytes at `at` of a packed panel of
/// `panel_bytes`: the first half's pass streams them [`super::stream_ahead`]'s distance ahead
/// (four blocks ahead, as before, left the products at their memory time plus their
/// arithmetic: `GGRS_MAX_ISA=avx2 cargo run --release -p ggrs-core --example
/// kquant_decode_rate -- TYPE 896 4864 24 2 30 COLS` on the AVX-512 Zen 5, one column / eight
/// (ms): Q8_0 2.58 → 2.00 / 8.04 → 8.10, Q4_1 1.72 → 1.25 / 7.03 → 5.86, Q5_0 2.75 → 1.69 /
/// 8.64 → 7.51, IQ4_NL 1.98 → 1.14 / 6.79 → 5.57; `docs/kernel-bench-notes.md`). With one
/// column the second half's pass (which re-reads the panel from cache) fetches the same bytes
/// of the next panel, so that the stream from memory does not pause for half of every panel
/// (Q4_K, same command, one column, medians of six rounds: 1.48 → 1.29 ms); with several
/// columns the products are bound by arithmetic and those prefetches cost more than they
/// save.
#[inline(always)]
pub(super) fn stream_halves<const C: usize>(
    panel: *const u8,
    half: usize,
    at: usize,
    len: usize,
    panel_bytes: usize,
) {
    if half == 0 {
        super::stream_ahead(panel, at, len);
    } else if C == 1 {
        super::fetch_lines(panel, panel_bytes + at, len);
    }
}

/// Each row's eight lane accumulators (`a[g]`, lane `r` = row `r`) added in ggml's
/// `hsum_float_8` tree: `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`.
///
/// # Safety
/// AVX.
#[inline(always)]
pub(super) unsafe fn lanes_total(a: &[__m256; 8]) -> __m256 {
    // SAFETY: register-only AVX operations.
    unsafe {
        _mm256_add_ps(
            _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
            _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])),
        )
    }
}

/// The activation quad at `p` in every 32-bit lane.
///
/// # Safety
/// Four bytes readable at `p`; AVX.
#[inline(always)]
unsafe fn quad(p: *const u8) -> __m256i {
    // SAFETY: forwarded from the caller.
    unsafe { _mm256_set1_epi32(read_u32(p) as i32) }
}

/// How the kernels here sum four `unsigned × signed` byte products per 32-bit lane: a
/// running sum started with [`QuadSum::start`], products added with [`QuadSum::add`], exact
/// 32-bit sums from [`QuadSum::finish`]. A seed (the correction `−o · Σ y`, an `i32` in the
/// side data, or none) goes in at the start or at the end, whichever the build prefers.
pub(super) trait QuadSum {
    /// Whether this build's Q8_0 panels hold the codes as `x + 128` ([`super::flips_q8_0`]),
    /// so that their sums start from the seeds `−128 · Σ y`.
    const FLIPS_Q8: bool;
    /// A running sum with the seed at `seed` (an `i32` in every lane; `None`: zero).
    ///
    /// # Safety
    /// Four bytes readable at `seed`; the CPU supports the implementation's instructions.
    unsafe fn start(seed: Option<*const u8>) -> __m256i;
    /// `acc` plus, per 32-bit lane, the four products of the unsigned bytes of `u` and the
    /// signed bytes of `s` (through 16-bit pair sums in [`Plain`]: the caller bounds every
    /// 16-bit sum of its additions below 2¹⁵).
    ///
    /// # Safety
    /// As `start`.
    unsafe fn add(acc: __m256i, u: __m256i, s: __m256i) -> __m256i;
    /// Two running sums added.
    ///
    /// # Safety
    /// As `start`.
    unsafe fn join(a: __m256i, b: __m256i) -> __m256i;
    /// The exact 32-bit lane sums of `acc`, seed included (`seed` as given to `start`).
    ///
    /// # Safety
    /// As `start`.
    unsafe fn finish(acc: __m256i, seed: Option<*const u8>) -> __m256i;
    /// The operands of `add` for the packed Q8_0 codes `w` (as this build's panels hold
    /// them: [`super::flips_q8_0`]) against the signed activations `y`.
    ///
    /// # Safety
    /// As `start`.
    unsafe fn q8_operands(w: __m256i, y: __m256i) -> (__m256i, __m256i);
    /// `acc` plus, per 32-bit lane, the two products of its signed 16-bit halves in `a` and
    /// `b` (`vpmaddwd` then an add, or `vpdpwssd`: the same exact sum unless both products
    /// are −32768·−32768, which no caller makes).
    ///
    /// # Safety
    /// As `start`.
    unsafe fn wssd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i;
}

/// AVX2: `vpmaddubsw` pairs summed in 16 bits, `vpmaddwd` by ones, the seed added last;
/// Q8_0 codes signed, `|x|` against `y` carrying `x`'s sign.
pub(super) struct Plain;
/// AVX-VNNI: `vpdpbusd` (VEX) from the seed; Q8_0 codes stored as `x + 128`.
pub(super) struct Vex;

/// The `i32` at `seed` in every lane, or zero.
///
/// # Safety
/// Four bytes readable at `seed`; AVX.
#[inline(always)]
unsafe fn seed_of(seed: Option<*const u8>) -> __m256i {
    // SAFETY: forwarded from the caller.
    unsafe {
        match seed {
            Some(p) => _mm256_set1_epi32(read_u32(p) as i32),
            None => _mm256_setzero_si256(),
        }
    }
}

impl QuadSum for Plain {
    const FLIPS_Q8: bool = false;

    #[inline(always)]
    unsafe fn start(_seed: Option<*const u8>) -> __m256i {
        // SAFETY: register-only AVX operation.
        unsafe { _mm256_setzero_si256() }
    }

    #[inline(always)]
    unsafe fn add(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: register-only AVX2 operations (the caller guarantees AVX2).
        unsafe { _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s)) }
    }

    #[inline(always)]
    unsafe fn join(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: as `add`.
        unsafe { _mm256_add_epi16(a, b) }
    }

    #[inline(always)]
    unsafe fn finish(acc: __m256i, seed: Option<*const u8>) -> __m256i {
        // SAFETY: as `add`; the seed's bytes are the caller's guarantee.
        unsafe {
            let s = _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
            match seed {
                Some(_) => _mm256_add_epi32(s, seed_of(seed)),
                None => s,
            }
        }
    }

    #[inline(always)]
    unsafe fn q8_operands(w: __m256i, y: __m256i) -> (__m256i, __m256i) {
        // SAFETY: as `add`. `vpsignb` negates `y` exactly: the activations come from the
        // Q8_0 quantizer (|y| ≤ 127), and `|x|` (at most 128) is read unsigned.
        unsafe { (_mm256_abs_epi8(w), _mm256_sign_epi8(y, w)) }
    }

    #[inline(always)]
    unsafe fn wssd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: as `add`.
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)) }
    }
}

impl QuadSum for Vex {
    const FLIPS_Q8: bool = true;

    #[inline(always)]
    unsafe fn start(seed: Option<*const u8>) -> __m256i {
        // SAFETY: forwarded from the caller.
        unsafe { seed_of(seed) }
    }

    #[inline(always)]
    unsafe fn add(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: only inlined into the `*_vnni` builds, compiled with (and run on CPUs
        // with) AVX-VNNI.
        unsafe { _mm256_dpbusd_avx_epi32(acc, u, s) }
    }

    #[inline(always)]
    unsafe fn join(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: register-only AVX2 operation.
        unsafe { _mm256_add_epi32(a, b) }
    }

    #[inline(always)]
    unsafe fn finish(acc: __m256i, _seed: Option<*const u8>) -> __m256i {
        acc
    }

    #[inline(always)]
    unsafe fn q8_operands(w: __m256i, y: __m256i) -> (__m256i, __m256i) {
        (w, y)
    }

    #[inline(always)]
    unsafe fn wssd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: as `add`.
        unsafe { _mm256_dpwssd_avx_epi32(acc, a, b) }
    }
}

/// `C` columns against a Q4_0 panel in the chain order; `out[c][r]` row `r` · column `c`.
///
/// # Safety
/// As [`super::gemm`], on a CPU with AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_0_chain<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: forwarded from the caller.
    unsafe { q4_0_chain_in::<Plain, C>(nb, panel, y, aux, out) }
}

/// [`q4_0_chain`], AVX-VNNI build.
///
/// # Safety
/// As [`super::gemm`], on a CPU with AVX2, FMA, F16C and AVX-VNNI.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn q4_0_chain_vnni<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: forwarded from the caller.
    unsafe { q4_0_chain_in::<Vex, C>(nb, panel, y, aux, out) }
}

/// The body of [`q4_0_chain`] and [`q4_0_chain_vnni`].
///
/// # Safety
/// As the builds.
#[inline(always)]
unsafe fn q4_0_chain_in<D: QuadSum, const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: packed block i < nb of the panel, Q8_0 block i of each column and its side
    // data are readable (caller); unaligned loads; the stores write `out`'s arrays.
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        let pb = Kind::Q4_0Chain.panel_bytes(nb);
        // One half panel (eight rows) at a time, and within a block one quad group of codes
        // at a time against every column: the group's two code vectors, the columns' 16-bit
        // sums and their accumulators stay in registers for up to four columns (the second
        // half re-reads the panel from L1). Measured on AMD EPYC (AVX2, one L1-resident
        // panel, four columns): 6.4 ns a block and column, against 7.5 ns for the
        // block-outer loop with both halves' accumulators, which spilled. The sums (16-bit
        // pair sums at most 30 480 in magnitude, or 32-bit ones) are exact integers in any
        // order of addition; the f32 steps are the one-column kernel's, in its order. Two
        // running sums per column (low and high nibbles), to halve the dependency chains.
        for half in 0..2 {
            let mut acc = [_mm256_setzero_ps(); C];
            for i in 0..nb {
                let (sc, vec) = q4_0_at(i);
                if i % 2 == 0 {
                    // The pair's bytes (see `stream_halves`).
                    stream_halves::<C>(panel, half, sc, super::Q4_0_PAIR, pb);
                }
                // Exact: every f16 is an f32.
                let dxh = _mm256_cvtph_ps(_mm_loadu_si128(panel.add(sc + 16 * half).cast()));
                let p = panel.add(vec + 32 * half);
                let seed: [_; C] = std::array::from_fn(|c| Some(aux[c].add(i * AUX_BYTES + 4)));
                let mut s_lo: [__m256i; C] = std::array::from_fn(|c| D::start(seed[c]));
                let mut s_hi = [D::start(None); C];
                for g in 0..4 {
                    let v = _mm256_loadu_si256(p.add(64 * g).cast());
                    let lo = _mm256_and_si256(v, low);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                    for c in 0..C {
                        let yq = y[c].add(i * Q8_0_BYTES + 2 + 4 * g);
                        s_lo[c] = D::add(s_lo[c], lo, quad(yq));
                        s_hi[c] = D::add(s_hi[c], hi, quad(yq.add(16)));
                    }
                }
                for (c, a) in acc.iter_mut().enumerate() {
                    let ax = aux[c].add(i * AUX_BYTES);
                    let s = D::finish(D::join(s_lo[c], s_hi[c]), seed[c]);
                    let d = _mm256_mul_ps(dxh, _mm256_set1_ps(read_f32(ax)));
                    *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, *a);
                }
            }
            for (o, a) in out.iter_mut().zip(&acc) {
                _mm256_storeu_ps(o.as_mut_ptr().add(8 * half), *a);
            }
        }
    }
}

/// `C` columns against a Q8_0 panel in the lane order; `out[c][r]` row `r` · column `c`;
/// `stream`: the first pass over the panel, which prefetches it (see [`super::gemm`]).
///
/// # Safety
/// As [`super::gemm`], on a CPU with AVX2, FMA and F16C; the panel packed with signed
/// codes ([`super::flips_q8_0`] false).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q8_0_lanes<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
    stream: bool,
) {
    // SAFETY: forwarded from the caller.
    unsafe { q8_0_lanes_in::<Plain, C>(nb, panel, y, aux, out, stream) }
}

/// [`q8_0_lanes`], AVX-VNNI build.
///
/// # Safety
/// As [`super::gemm`], on a CPU with AVX2, FMA, F16C and AVX-VNNI; the panel packed with
/// the codes as `x + 128` ([`super::flips_q8_0`] true).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn q8_0_lanes_vnni<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
    stream: bool,
) {
    // SAFETY: forwarded from the caller.
    unsafe { q8_0_lanes_in::<Vex, C>(nb, panel, y, aux, out, stream) }
}

/// The body of [`q8_0_lanes`] and [`q8_0_lanes_vnni`].
///
/// # Safety
/// As the builds.
#[inline(always)]
unsafe fn q8_0_lanes_in<D: QuadSum, const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
    stream: bool,
) {
    // SAFETY: as `q4_0_chain_in`.
    unsafe {
        let bb = Kind::Q8_0Lanes.panel_bytes(1);
        // One half panel at a time: its eight accumulators per column stay in registers.
        for half in 0..2 {
            let mut acc = [[_mm256_setzero_ps(); 8]; C];
            for i in 0..nb {
                // Only on the first pass over the panel (`stream`): a prompt's later passes
                // (one column each here) find it in cache, and their prefetches only cost
                // (the AVX-512 Zen 5, `kquant_decode_rate q8_0 896 4864 24 2 30 16`, three
                // rounds without any prefetch, ms: AVX2 build 16.2 → 14.5, AVX-VNNI build
                // 16.1 → 12.7; one column needs them in the model: tg64 98 → 69–80 t/s).
                // With prefetch on the first pass only, `ggrs bench -p 512 -n 64 -r 2` on q8_0,
                // two rounds: pp512 296 / 289 → 347 / 339 t/s (`GGRS_MAX_ISA=avx2vnni`),
                // 286 / 293 → 302 / 319 (`avx2`), tg64 within the noise.
                if stream {
                    stream_halves::<C>(panel, half, i * bb, bb, bb * nb);
                }
                let p = panel.add(i * bb);
                let dx = _mm256_loadu_ps(p.add(32 * half).cast());
                for (c, acc_c) in acc.iter_mut().enumerate() {
                    let yq = y[c].add(i * Q8_0_BYTES + 2);
                    let ax = aux[c].add(i * AUX_BYTES);
                    let d = _mm256_mul_ps(dx, _mm256_set1_ps(read_f32(ax)));
                    for (g, lane) in acc_c.iter_mut().enumerate() {
                        // The codes as this build's packer stores them (`flips_q8_0`), loaded
                        // where they are used (fewer live registers; the columns of a pass
                        // share the loads).
                        let w = _mm256_loadu_si256(p.add(64 + 64 * g + 32 * half).cast());
                        // The seeds `−128 · Σ y` of the quads, for flipped codes only.
                        let seed = D::FLIPS_Q8.then(|| ax.add(8 + 4 * g));
                        let (u, ys) = D::q8_operands(w, quad(yq.add(4 * g)));
                        let s = D::finish(D::add(D::start(seed), u, ys), seed);
                        *lane = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, *lane);
                    }
                }
            }
            for (o, a) in out.iter_mut().zip(&acc) {
                let t = lanes_total(a);
                _mm256_storeu_ps(o.as_mut_ptr().add(8 * half), t);
            }
        }
    }
}

/// A weight type of the lanes panel kernel ([`lanes`]).
pub(super) trait LanesType {
    /// The panel kind (its layout).
    const KIND: Kind;
    /// Whether the codes have a fifth bit.
    const FIFTH: bool;
    /// Whether the type has a minimum (then the activations are Q8_1, without side data);
    /// else they are Q8_0 with the seeds `−o · Σ y` per quad.
    const MIN: bool;
}

/// Q4_1: nibbles, minimum.
pub(super) struct Q4_1;
/// Q5_0: nibbles and fifth bits, offset 16.
pub(super) struct Q5_0;
/// Q5_1: nibbles and fifth bits, minimum.
pub(super) struct Q5_1;

impl LanesType for Q4_1 {
    const KIND: Kind = Kind::Q4_1Lanes;
    const FIFTH: bool = false;
    const MIN: bool = true;
}

impl LanesType for Q5_0 {
    const KIND: Kind = Kind::Q5_0Lanes;
    const FIFTH: bool = true;
    const MIN: bool = false;
}

impl LanesType for Q5_1 {
    const KIND: Kind = Kind::Q5_1Lanes;
    const FIFTH: bool = true;
    const MIN: bool = true;
}

/// Bit `g` of every byte of `h` moved to bit 4 (`0x10`), the other bits cleared: the fifth
/// bits of quad `g` (see `panel::BlockAt::h`). The 16-bit shifts move no bit across a byte
/// into position 4.
///
/// # Safety
/// AVX2.
#[inline(always)]
pub(super) unsafe fn fifth(h: __m256i, g: usize) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        let b4 = _mm256_set1_epi8(0x10);
        let moved = match g {
            0 => _mm256_slli_epi16::<4>(h),
            1 => _mm256_slli_epi16::<3>(h),
            2 => _mm256_slli_epi16::<2>(h),
            3 => _mm256_slli_epi16::<1>(h),
            4 => h,
            5 => _mm256_srli_epi16::<1>(h),
            6 => _mm256_srli_epi16::<2>(h),
            _ => _mm256_srli_epi16::<3>(h),
        };
        _mm256_and_si256(moved, b4)
    }
}

/// `C` columns against a Q4_1, Q5_0 or Q5_1 panel in ggml's x86 lane order
/// (`ggml_vec_dot_q4_1_q8_1`, `_q5_0_q8_0`, `_q5_1_q8_1`): per row eight accumulators, one
/// per quad `g` of the block (values `4g..4g + 4`), `acc_g = fma(s_g, dx·dy, acc_g)` on the
/// exact quad sum `s_g`; beside them, for the types with a minimum, `summs = fma(mx, sy,
/// summs)`; at the end `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) + summs`.
/// Quad sums: unsigned codes (at most 31) against signed activations, pairs at most
/// 2·31·127 in magnitude (exact in 16 bits), plus the seed for Q5_0's offset.
///
/// # Safety
/// As [`super::gemm`], on a CPU with AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn lanes<T: LanesType, const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: forwarded from the caller.
    unsafe { lanes_in::<T, Plain, C>(nb, panel, y, aux, out) }
}

/// [`lanes`], AVX-VNNI build.
///
/// # Safety
/// As [`super::gemm`], on a CPU with AVX2, FMA, F16C and AVX-VNNI.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn lanes_vnni<T: LanesType, const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: forwarded from the caller.
    unsafe { lanes_in::<T, Vex, C>(nb, panel, y, aux, out) }
}

/// The body of [`lanes`] and [`lanes_vnni`].
///
/// # Safety
/// As the builds.
#[inline(always)]
unsafe fn lanes_in<T: LanesType, D: QuadSum, const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // Activation block bytes and where its codes start (Q8_1: d, s, codes; Q8_0: d, codes).
    let (yb, yq) = if T::MIN { (36, 4) } else { (Q8_0_BYTES, 2) };
    // SAFETY: as `q4_0_chain_in`.
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        for half in 0..2 {
            let mut acc = [[_mm256_setzero_ps(); 8]; C];
            let mut summs = [_mm256_setzero_ps(); C];
            for i in 0..nb {
                let at = T::KIND.block_at(i);
                let bb = T::KIND.panel_bytes(1);
                stream_halves::<C>(panel, half, i * bb, bb, T::KIND.panel_bytes(nb));
                let dx = _mm256_cvtph_ps(_mm_loadu_si128(panel.add(at.d + 16 * half).cast()));
                let mx = if T::MIN {
                    _mm256_cvtph_ps(_mm_loadu_si128(panel.add(at.m + 16 * half).cast()))
                } else {
                    _mm256_setzero_ps()
                };
                let h = if T::FIFTH {
                    _mm256_loadu_si256(panel.add(at.h + 32 * half).cast())
                } else {
                    _mm256_setzero_si256()
                };
                let mut u = [_mm256_setzero_si256(); 8];
                for g in 0..4 {
                    let v = _mm256_loadu_si256(panel.add(at.v + 64 * g + 32 * half).cast());
                    u[g] = _mm256_and_si256(v, low);
                    u[g + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                }
                if T::FIFTH {
                    for (g, ug) in u.iter_mut().enumerate() {
                        *ug = _mm256_or_si256(*ug, fifth(h, g));
                    }
                }
                for c in 0..C {
                    let b = y[c].add(i * yb);
                    let d = _mm256_mul_ps(dx, _mm256_set1_ps(super::super::util::f16_at(b)));
                    if T::MIN {
                        let sy = _mm256_set1_ps(super::super::util::f16_at(b.add(2)));
                        summs[c] = _mm256_fmadd_ps(mx, sy, summs[c]);
                    }
                    let q = b.add(yq);
                    for (g, lane) in acc[c].iter_mut().enumerate() {
                        // Side data exist only for the types without a minimum.
                        let seed = (!T::MIN).then(|| aux[c].add(i * AUX_BYTES + 8 + 4 * g));
                        let s = D::finish(D::add(D::start(seed), u[g], quad(q.add(4 * g))), seed);
                        *lane = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, *lane);
                    }
                }
            }
            for c in 0..C {
                let a = &acc[c];
                let mut t = lanes_total(a);
                if T::MIN {
                    t = _mm256_add_ps(t, summs[c]);
                }
                _mm256_storeu_ps(out[c].as_mut_ptr().add(8 * half), t);
            }
        }
    }
}

/// Bytes of a Q8_K block: f32 `d`, 256 codes, 16 `i16` sums of 16 codes.
const Q8_K_BYTES: usize = 292;

/// The high two bits of Q6_K codes for quad row `m` (bits `2m..2m + 2` of each `qh` byte)
/// as bits 4 and 5 (`0x30`); the 16-bit shifts move no other bit into those places.
///
/// # Safety
/// AVX2.
#[inline(always)]
unsafe fn q6_high(qh: __m256i, m: usize) -> __m256i {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        let moved = match m {
            0 => _mm256_slli_epi16::<4>(qh),
            1 => _mm256_slli_epi16::<2>(qh),
            2 => qh,
            _ => _mm256_srli_epi16::<2>(qh),
        };
        _mm256_and_si256(moved, _mm256_set1_epi8(0x30))
    }
}

/// `C` columns (fewer than eight) against a Q6_K panel in the order of ggml's AVX2
/// `ggml_vec_dot_q6_K_q8_K`: per super-block and row, eight exact integer lanes, lane `l`
/// summing `sc_j · u · y` over the values `p` with `(p mod 32) / 4 = l` (`u` the unsigned
/// code 0..=63, `j = p / 16`), minus `32 · (sc_2l · bsum_2l + sc_2l+1 · bsum_2l+1)`; then
/// `lane = fma(d_y·d, lane, acc)`; at the end ggml's `hsum_float_8`. Pairs of
/// `vpmaddubsw` are at most 2·63·128 in magnitude (Q8_K codes reach −128): exact.
///
/// # Safety
/// As [`super::gemm`] (Q8_K activation rows, no side data), on a CPU with AVX2, FMA
/// and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k_lanes<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: packed super-block i < nb of the panel and Q8_K block i of each column are
    // readable (caller); unaligned loads; the stores write `out`'s arrays.
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        for half in 0..2 {
            // Row 8·half + 4L + r' (L the 128-bit lane) into the high bytes of both 16-bit
            // halves of 32-bit lane r', zero below: then an arithmetic shift by 8 sign-extends.
            let ctrl: [i8; 32] = std::array::from_fn(|b| {
                let (lane128, r, byte) = (b / 16, (b % 16) / 4, b % 4);
                if byte % 2 == 1 {
                    (8 * half + 4 * lane128 + r) as i8
                } else {
                    -1
                }
            });
            let ctrl = _mm256_loadu_si256(ctrl.as_ptr().cast());
            let mut acc = [[_mm256_setzero_ps(); 8]; C];
            for i in 0..nb {
                let bb = Kind::Q6KLanes.panel_bytes(1);
                stream_halves::<C>(panel, half, i * bb, bb, Kind::Q6KLanes.panel_bytes(nb));
                let at = Kind::Q6KLanes.block_at(i);
                let dx = _mm256_cvtph_ps(_mm_loadu_si128(panel.add(at.d + 16 * half).cast()));
                // Scale j of each row, as the same i16 in both halves of its lane.
                let sc: [__m256i; 16] = std::array::from_fn(|j| {
                    let b = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                        panel.add(at.s + 16 * j).cast(),
                    ));
                    _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(b, ctrl))
                });
                for c in 0..C {
                    let yb = y[c].add(i * Q8_K_BYTES);
                    let d = _mm256_mul_ps(dx, _mm256_set1_ps(read_f32(yb)));
                    let q8 = yb.add(4);
                    let mut lanes = [_mm256_setzero_si256(); 8];
                    for n in 0..2 {
                        for (l, lane) in lanes.iter_mut().enumerate() {
                            let qh = _mm256_loadu_si256(
                                panel.add(at.v + q6_k_qh(8 * n + l) + 32 * half).cast(),
                            );
                            for m2 in 0..2 {
                                let ql = _mm256_loadu_si256(
                                    panel
                                        .add(at.v + q6_k_ql(16 * n + 8 * m2 + l) + 32 * half)
                                        .cast(),
                                );
                                for nib in 0..2 {
                                    let m = 2 * nib + m2;
                                    let lo = if nib == 0 {
                                        _mm256_and_si256(ql, low)
                                    } else {
                                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql), low)
                                    };
                                    let u = _mm256_or_si256(lo, q6_high(qh, m));
                                    let k = 4 * n + m;
                                    let yq = quad(q8.add(32 * k + 4 * l));
                                    let p = _mm256_madd_epi16(
                                        _mm256_maddubs_epi16(u, yq),
                                        sc[2 * k + l / 4],
                                    );
                                    *lane = _mm256_add_epi32(*lane, p);
                                }
                            }
                        }
                    }
                    let bsums = yb.add(4 + 256);
                    for (l, lane) in lanes.iter().enumerate() {
                        // (bsum, 0) pairs: madd with a scale pair gives sc · bsum.
                        let b0 = _mm256_set1_epi32(read_u16(bsums.add(4 * l)) as i32);
                        let b1 = _mm256_set1_epi32(read_u16(bsums.add(4 * l + 2)) as i32);
                        let corr = _mm256_add_epi32(
                            _mm256_madd_epi16(sc[2 * l], b0),
                            _mm256_madd_epi16(sc[2 * l + 1], b1),
                        );
                        let s = _mm256_sub_epi32(*lane, _mm256_slli_epi32::<5>(corr));
                        acc[c][l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[c][l]);
                    }
                }
            }
            for (o, a) in out.iter_mut().zip(&acc) {
                let t = lanes_total(a);
                _mm256_storeu_ps(o.as_mut_ptr().add(8 * half), t);
            }
        }
    }
}
