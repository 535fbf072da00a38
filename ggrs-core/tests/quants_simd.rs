//! The SIMD dot-product kernels of the block types against the scalar reference, through the
//! public test-support API (`quants::dispatch::vec_dot_variants`), and `mul_mat` through the
//! executor against the per-element dot product of the kernel it selected.
//!
//! # Tolerance
//!
//! A SIMD kernel computes every block's integer sum exactly, as the scalar one does, and
//! differs only in how it rounds and orders the f32 work: block scales applied by FMA,
//! partial sums held in 8 or 16 vector lanes and added in a tree at the end. Reordering or
//! fusing a sum of `k` rounded terms moves it by at most about `k·2⁻²⁴·Σ|terms|`; here
//! `k` ≤ 16 blocks + 16 lanes, so `k·2⁻²⁴` < 2·10⁻⁶, and the test bound is
//! `|simd − scalar| ≤ 1e-5 · M`, where `M = Σ_i |x_i|·|y_i|` over the dequantized values
//! (for Q4_K, whose values are `d·sc·q − dmin·m`, the two parts counted separately:
//! `Σ_i (|d·sc·q_i| + |dmin·m|)·|y_i|`). `M` bounds every partial sum, so this is a relative
//! error of 1e-5 that stays meaningful when the dot product itself cancels to near zero.
//! Where all terms have one sign (the extreme blocks), `M` is the result itself and the test
//! also asserts the plain relative error ≤ 1e-5.

mod common;

use common::run_mul_mat;

use ggrs_core::quants::dispatch::{self, Isa, SumOrder, VecDotVariant};
use ggrs_core::quants::{self, QK_K};
use ggrs_core::DType;
use half::f16;

/// The weight types with SIMD kernels.
const SIMD_TYPES: [DType; 10] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::IQ4NL,
    DType::IQ4XS,
];

/// Q4_1, Q5_1, Q5_K and the i-quants, whose SIMD kernels are AVX2 only.
fn avx2_only(t: DType) -> bool {
    matches!(
        t,
        DType::IQ4NL | DType::IQ4XS | DType::Q4_1 | DType::Q5_1 | DType::Q5K
    )
}

/// Whether `t` has an AVX-VNNI build (`kernels/x86/avxvnni.rs`).
fn has_avx_vnni_build(t: DType) -> bool {
    matches!(
        t,
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 | DType::Q4_1 | DType::Q5_1 | DType::IQ4NL
    )
}

/// ggml's `kvalues_iq4nl`: the 16 levels an IQ4_NL / IQ4_XS index selects.
const IQ4_LEVELS: [i32; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next64() % n
    }

    /// Any finite f16, subnormals and the largest ones included.
    fn finite_f16(&mut self) -> f16 {
        loop {
            let h = f16::from_bits(self.next64() as u16);
            if h.is_finite() {
                return h;
            }
        }
    }

    /// A finite f16 scale of modest size (2^-14 .. 2^4), either sign.
    fn modest_f16(&mut self) -> f16 {
        let sign = (self.below(2) as u16) << 15;
        let e = 1 + self.below(18) as u16;
        let m = self.below(1024) as u16;
        f16::from_bits(sign | (e << 10) | m)
    }
}

// ------------------------------------------------------------------------------------------
// Blocks
// ------------------------------------------------------------------------------------------

/// Byte offsets of a weight type's f16 scales.
fn f16_fields(t: DType) -> &'static [usize] {
    match t {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 | DType::IQ4NL | DType::IQ4XS => &[0],
        DType::Q4K | DType::Q5K | DType::Q4_1 | DType::Q5_1 => &[0, 2],
        DType::Q6K => &[208],
        _ => unreachable!("no SIMD kernel for {t}"),
    }
}

/// Sets Q8_K block `p`'s scale and makes its group sums the sums of its codes (what makes a
/// Q8_K block valid).
fn fix_q8k(p: &mut [u8], d: f32) {
    p[0..4].copy_from_slice(&d.to_le_bytes());
    for j in 0..16 {
        let s: i32 = (0..16).map(|i| p[4 + 16 * j + i] as i8 as i32).sum();
        p[260 + 2 * j..262 + 2 * j].copy_from_slice(&(s as i16).to_le_bytes());
    }
}

/// Sets Q8_1 block `p`'s scale to `d` and its `s` to `f16(d·Σ codes)` (what the quantizer
/// writes), halving `d` until `s` is finite.
fn fix_q8_1(p: &mut [u8], d: f16) {
    let sum: i32 = p[4..36].iter().map(|&b| b as i8 as i32).sum();
    let mut d = d;
    let s = loop {
        let s = f16::from_f32(d.to_f32() * sum as f32);
        if s.is_finite() {
            break s;
        }
        d = f16::from_f32(d.to_f32() * 0.5);
    };
    p[0..2].copy_from_slice(&d.to_le_bytes());
    p[2..4].copy_from_slice(&s.to_le_bytes());
}

/// `nb` blocks of type `t` of random bytes with finite scales: every code pattern a file
/// (or, for Q8_0/Q8_1/Q8_K, the activation quantizer and more) may hold. `wide` draws scales
/// from the whole finite f16 range, otherwise from 2^-14 .. 2^4.
fn random_blocks(t: DType, r: &mut Rng, nb: usize, wide: bool) -> Vec<u8> {
    let ts = t.type_size();
    let mut out = vec![0u8; nb * ts];
    for p in out.chunks_exact_mut(ts) {
        for b in p.iter_mut() {
            *b = r.next64() as u8;
        }
        if t == DType::Q8K {
            let e = r.below(30) as i32 - 20;
            let d = (1.0 + r.below(1000) as f32 / 1000.0) * 2f32.powi(e);
            fix_q8k(p, if r.below(2) == 0 { d } else { -d });
            continue;
        }
        if t == DType::Q8_1 {
            let d = if wide { r.finite_f16() } else { r.modest_f16() };
            fix_q8_1(p, d);
            continue;
        }
        for &off in f16_fields(t) {
            let h = if wide { r.finite_f16() } else { r.modest_f16() };
            p[off..off + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
    out
}

/// Extreme blocks: every code at the top (or bottom, `low`) of its range, scales positive
/// and large, so that every product has the same sign and the integer sums are as large as
/// the format allows.
fn extreme_blocks(t: DType, nb: usize, low: bool, scale: f16) -> Vec<u8> {
    let ts = t.type_size();
    let mut out = vec![0u8; nb * ts];
    for p in out.chunks_exact_mut(ts) {
        match t {
            // Nibble 0 is −8 (low) and 15 is +7.
            DType::Q4_0 => p[2..].fill(if low { 0x00 } else { 0xFF }),
            // Code 0 is −16, 31 is +15.
            DType::Q5_0 => p[2..].fill(if low { 0x00 } else { 0xFF }),
            DType::Q8_0 => p[2..].fill(if low { 0x80 } else { 0x7F }),
            // Codes 0 or 15 (31); the minimum (set below) negative when `low`: every value
            // is then the minimum, negative, or `15·d + m`, positive.
            DType::Q4_1 => p[4..].fill(if low { 0x00 } else { 0xFF }),
            DType::Q5_1 => p[4..].fill(if low { 0x00 } else { 0xFF }),
            DType::Q8_1 => {
                p[4..].fill(if low { 0x80 } else { 0x7F });
                fix_q8_1(p, scale);
            }
            DType::Q8K => {
                p[4..260].fill(if low { 0x80 } else { 0x7F });
                fix_q8k(p, 0.75);
            }
            // Scales and minimums 63 (all scale bytes 0xFF); codes 15, or 0 (then, with
            // d = 0 below, every value is −dmin·63: negative, as the activations are when
            // `low`).
            DType::Q4K => {
                p[4..16].fill(0xFF);
                p[16..].fill(if low { 0x00 } else { 0xFF });
            }
            // As Q4_K, with the fifth bits (bytes 16..48) all set or all clear: codes 31,
            // or 0 with d = 0 (below).
            DType::Q5K => {
                p[4..16].fill(0xFF);
                p[16..].fill(if low { 0x00 } else { 0xFF });
            }
            // Codes 63 (+31) or 0 (−32); scales 127.
            DType::Q6K => {
                p[..192].fill(if low { 0x00 } else { 0xFF });
                p[192..208].fill(0x7F);
            }
            // Index 0 is the level −127, 15 is +113.
            DType::IQ4NL => p[2..].fill(if low { 0x00 } else { 0xFF }),
            // Sub-block scales 63 (31 after the − 32), indices as IQ4_NL's.
            DType::IQ4XS => {
                p[2..8].fill(0xFF);
                p[8..].fill(if low { 0x00 } else { 0xFF });
            }
            _ => unreachable!(),
        }
        if t != DType::Q8K && t != DType::Q8_1 {
            for &off in f16_fields(t) {
                p[off..off + 2].copy_from_slice(&scale.to_le_bytes());
            }
            if matches!(t, DType::Q4_1 | DType::Q5_1) && low {
                p[2..4].copy_from_slice(&(-scale).to_le_bytes());
            }
            if matches!(t, DType::Q4K | DType::Q5K) && low {
                // d = 0: only the minimum term, −dmin·63·y, positive against negative y.
                p[0..2].copy_from_slice(&f16::ZERO.to_le_bytes());
            }
        }
    }
    out
}

// ------------------------------------------------------------------------------------------
// The tolerance's scale
// ------------------------------------------------------------------------------------------

fn f16_at(p: &[u8], off: usize) -> f64 {
    f16::from_le_bytes([p[off], p[off + 1]]).to_f64()
}

fn dequantize(t: DType, q: &[u8]) -> Vec<f32> {
    let mut y = vec![0f32; q.len() / t.type_size() * t.block_size()];
    quants::dequantize_row_dyn(t, q, &mut y).expect("whole blocks");
    y
}

/// `M` of the module docs, in f64.
fn magnitude(t: DType, a: &[u8], b: &[u8]) -> f64 {
    let vt = quants::vec_dot_type(t).expect("block type");
    let y = dequantize(vt, b);
    if matches!(t, DType::Q4_1 | DType::Q5_1) {
        // `Σ d·dy·q·qy + m·s` per block: the code part term by term, the minimum part as
        // `|m|·|s|` (s is the block's stored, rounded `dy·Σ qy`).
        let ta = t.type_size();
        let mut m = 0.0;
        for (i, (xa, yb)) in a.chunks_exact(ta).zip(b.chunks_exact(36)).enumerate() {
            let (d, mn) = (f16_at(xa, 0), f16_at(xa, 2));
            let q = codes32(t, xa);
            for j in 0..32 {
                m += (d * q[j] as f64 * y[32 * i + j] as f64).abs();
            }
            m += (mn * f16_at(yb, 2)).abs();
        }
        return m;
    }
    if !matches!(t, DType::Q4K | DType::Q5K) {
        let x = dequantize(t, a);
        return x
            .iter()
            .zip(&y)
            .map(|(p, q)| (*p as f64 * *q as f64).abs())
            .sum();
    }
    // Q4_K from the format: d, dmin, 12 bytes of 6-bit scales and minimums, 128 bytes of
    // nibbles (values 64c + l in the low nibbles of byte 32c + l, 64c + 32 + l in the high).
    // Q5_K: the same with 32 bytes of fifth bits before the nibbles (bit 2c of byte l for
    // value 64c + l, bit 2c + 1 for 64c + 32 + l).
    let five = t == DType::Q5K;
    let (bytes, qs) = if five { (176, 48) } else { (144, 16) };
    let mut m = 0.0;
    for (blk, ys) in a.chunks_exact(bytes).zip(y.chunks_exact(QK_K)) {
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        let s = &blk[4..16];
        let scale_min = |j: usize| -> (u8, u8) {
            if j < 4 {
                (s[j] & 63, s[j + 4] & 63)
            } else {
                (
                    (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4),
                    (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
                )
            }
        };
        for (v, &yv) in ys.iter().enumerate() {
            let (c, l, high) = (v / 64, v % 32, (v % 64) >= 32);
            let byte = blk[qs + 32 * c + l];
            let mut q = if high { byte >> 4 } else { byte & 15 };
            if five {
                q += ((blk[16 + l] >> (2 * c + high as usize)) & 1) << 4;
            }
            let (sc, mn) = scale_min(2 * c + high as usize);
            m += ((d * sc as f64 * q as f64).abs() + (dmin * mn as f64).abs()) * (yv as f64).abs();
        }
    }
    m
}

// ------------------------------------------------------------------------------------------
// Kernels against the scalar reference
// ------------------------------------------------------------------------------------------

/// The instruction sets this CPU runs, as the test sees them.
fn cpu_isas() -> Vec<Isa> {
    let mut v = vec![Isa::Scalar];
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let avx2 = has!("avx2") && has!("fma") && has!("f16c");
        let avx512 = avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vl");
        if avx2 {
            v.push(Isa::Avx2);
            if has!("avxvnni") {
                v.push(Isa::Avx2Vnni);
            }
        }
        if avx512 {
            v.push(Isa::Avx512);
            if has!("avx512vnni") {
                v.push(Isa::Avx512Vnni);
            }
        }
    }
    v
}

// The x86 builds; `quants_neon.rs` checks the aarch64 list and selection.
#[cfg(target_arch = "x86_64")]
#[test]
fn every_build_the_cpu_runs_is_listed() {
    let isas = cpu_isas();
    for t in SIMD_TYPES {
        let got: Vec<Isa> = dispatch::vec_dot_variants(t)
            .iter()
            .map(|v| v.isa)
            .collect();
        // The 32-value types have no AVX-512 build without VNNI (AVX2's serves); Q4_1, Q5_1
        // and the i-quants have AVX2 builds only (Q4_1, Q5_1 and IQ4_NL also AVX-VNNI ones).
        let want: Vec<Isa> = isas
            .iter()
            .copied()
            .filter(|&i| t.block_size() == QK_K || i != Isa::Avx512)
            .filter(|&i| !avx2_only(t) || i <= Isa::Avx2Vnni)
            .filter(|&i| i != Isa::Avx2Vnni || has_avx_vnni_build(t))
            .collect();
        assert_eq!(got, want, "{t}");
    }
    // The ggml orders: every SIMD build of Q4_0, Q5_0, Q8_0, Q4_1, Q5_1 keeps ggml's lanes;
    // Q4_0 also has builds in the repacked order; nothing else does.
    let simd32: Vec<Isa> = isas
        .iter()
        .copied()
        .filter(|&i| matches!(i, Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512Vnni))
        .collect();
    for t in [DType::Q4_0, DType::Q5_0, DType::Q8_0] {
        let got: Vec<Isa> = dispatch::vec_dot_variants_in(t, SumOrder::GgmlLanes)
            .iter()
            .map(|v| v.isa)
            .collect();
        assert_eq!(got, simd32, "{t}");
    }
    let avx2_and_vnni: Vec<Isa> = isas
        .iter()
        .copied()
        .filter(|&i| matches!(i, Isa::Avx2 | Isa::Avx2Vnni))
        .collect();
    for t in [DType::Q4_1, DType::Q5_1] {
        let got: Vec<Isa> = dispatch::vec_dot_variants_in(t, SumOrder::GgmlLanes)
            .iter()
            .map(|v| v.isa)
            .collect();
        assert_eq!(got, avx2_and_vnni, "{t}");
    }
    let avx2: Vec<Isa> = isas.iter().copied().filter(|&i| i == Isa::Avx2).collect();
    let got: Vec<Isa> = dispatch::vec_dot_variants_in(DType::Q4_0, SumOrder::GgmlBlockChain)
        .iter()
        .map(|v| v.isa)
        .collect();
    assert_eq!(got, simd32);
    // IQ4_NL in both orders, IQ4_XS in its lanes: the AVX2 builds (and IQ4_NL's AVX-VNNI
    // ones).
    for (t, order) in [
        (DType::IQ4NL, SumOrder::GgmlLanes),
        (DType::IQ4NL, SumOrder::GgmlBlockChain),
        (DType::IQ4XS, SumOrder::GgmlLanes),
    ] {
        let got: Vec<Isa> = dispatch::vec_dot_variants_in(t, order)
            .iter()
            .map(|v| v.isa)
            .collect();
        let want: Vec<Isa> = isas
            .iter()
            .copied()
            .filter(|&i| i == Isa::Avx2 || (i == Isa::Avx2Vnni && has_avx_vnni_build(t)))
            .collect();
        assert_eq!(got, want, "{t} {order:?}");
    }
    assert!(dispatch::vec_dot_variants_in(DType::IQ4XS, SumOrder::GgmlBlockChain).is_empty());
    for t in [
        DType::Q8_0,
        DType::Q4K,
        DType::Q6K,
        DType::Q4_1,
        DType::Q5_1,
    ] {
        assert!(
            dispatch::vec_dot_variants_in(t, SumOrder::GgmlBlockChain).is_empty(),
            "{t}"
        );
    }
    assert!(dispatch::vec_dot_variants_in(DType::Q4K, SumOrder::GgmlLanes).is_empty());
    // Q5_K in `ggml_vec_dot_q5_K_q8_K`'s lanes: the AVX2 build.
    let got: Vec<Isa> = dispatch::vec_dot_variants_in(DType::Q5K, SumOrder::GgmlLanes)
        .iter()
        .map(|v| v.isa)
        .collect();
    assert_eq!(got, avx2, "Q5_K lanes");
    // Q6_K in `ggml_vec_dot_q6_K_q8_K`'s lanes: the AVX2 build only (its AVX-512 builds sum
    // in their own order).
    let got: Vec<Isa> = dispatch::vec_dot_variants_in(DType::Q6K, SumOrder::GgmlLanes)
        .iter()
        .map(|v| v.isa)
        .collect();
    assert_eq!(got, avx2, "Q6_K lanes");
    // Types without SIMD kernels have their scalar reference only; others none.
    for t in [DType::Q2K, DType::Q3K, DType::Q8K, DType::Q8_1] {
        let got: Vec<Isa> = dispatch::vec_dot_variants(t)
            .iter()
            .map(|v| v.isa)
            .collect();
        assert_eq!(got, [Isa::Scalar], "{t}");
    }
    assert!(dispatch::vec_dot_variants(DType::F32).is_empty());
    assert!(dispatch::vec_dot_variants(DType::F16).is_empty());
}

/// `src` copied to byte offset `off` of a fresh buffer: a row starting at any alignment.
fn at_offset(src: &[u8], off: usize) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; src.len() + off];
    buf[off..].copy_from_slice(src);
    (buf, off)
}

/// Checks every build against the scalar one for rows `a` (weights) and `b` (activations)
/// of `n` values, each at several start offsets; also the tile forms (1 × 4, 4 × 1, 4 × 4)
/// against one-element calls, bit for bit. `same_sign`: all terms share a sign, so the
/// plain relative error is checked too.
fn check_row(t: DType, variants: &[VecDotVariant], n: usize, a: &[u8], b: &[u8], same_sign: bool) {
    let want = (variants[0].dot)(n, a, b);
    let m = magnitude(t, a, b);
    assert!(want.is_finite(), "{t} n={n}: scalar result {want}");
    assert!(
        (want as f64).abs() <= m * (1.0 + 1e-5) + 1e-30,
        "{t} n={n}: |{want}| > M = {m}"
    );
    for v in &variants[1..] {
        for (oa, ob) in [(0, 0), (1, 3), (3, 1), (2, 5)] {
            let (ba, oa) = at_offset(a, oa);
            let (bb, ob) = at_offset(b, ob);
            let (ra, rb) = (&ba[oa..], &bb[ob..]);
            let got = (v.dot)(n, ra, rb);
            let err = (got as f64 - want as f64).abs();
            assert!(
                err <= 1e-5 * m,
                "{t} {:?} n={n} offsets ({oa}, {ob}): {got} vs scalar {want} (M = {m})",
                v.isa
            );
            if same_sign {
                assert!(
                    err <= 1e-5 * (want as f64).abs(),
                    "{t} {:?} n={n}: {got} vs scalar {want}: relative error {}",
                    v.isa,
                    err / (want as f64).abs()
                );
            }
            let four = (v.dot4)(n, ra, [rb, b, rb, b]);
            let each = [got, (v.dot)(n, ra, b), got, (v.dot)(n, ra, b)];
            assert_eq!(
                four.map(f32::to_bits),
                each.map(f32::to_bits),
                "{t} {:?} n={n}: four-column form differs from one-column calls",
                v.isa
            );
            let rows = (v.rows4)(n, [ra, a, ra, a], rb);
            let each = [got, (v.dot)(n, a, rb), got, (v.dot)(n, a, rb)];
            assert_eq!(
                rows.map(f32::to_bits),
                each.map(f32::to_bits),
                "{t} {:?} n={n}: four-row form differs from one-row calls",
                v.isa
            );
            let tile = (v.tile)(n, [a, ra, a, ra], [rb, b, b, rb]);
            let ab = (v.dot)(n, a, b);
            let arb = (v.dot)(n, a, rb);
            let rab = (v.dot)(n, ra, b);
            let each = [
                [arb, ab, ab, arb],
                [got, rab, rab, got],
                [arb, ab, ab, arb],
                [got, rab, rab, got],
            ];
            assert_eq!(
                tile.map(|r| r.map(f32::to_bits)),
                each.map(|r| r.map(f32::to_bits)),
                "{t} {:?} n={n}: 4 × 4 form differs from one-element calls",
                v.isa
            );
        }
    }
}

/// Row lengths tested, in blocks: every count up to 16 (32-value types) or 8 (k-quants), and
/// a long row.
fn block_counts(t: DType) -> Vec<usize> {
    let mut v: Vec<usize> = (0..=if t.block_size() == 32 { 16 } else { 8 }).collect();
    v.push(if t.block_size() == 32 { 77 } else { 19 });
    v
}

#[test]
fn simd_matches_scalar_on_random_blocks() {
    let mut r = Rng(0x5EED);
    for t in SIMD_TYPES {
        let vt = quants::vec_dot_type(t).expect("block type");
        let variants = dispatch::vec_dot_variants(t);
        assert_eq!(variants[0].isa, Isa::Scalar);
        for nb in block_counts(t) {
            let n = nb * t.block_size();
            for rep in 0..6 {
                let wide = rep % 2 == 1;
                let a = random_blocks(t, &mut r, nb, wide);
                let b = random_blocks(vt, &mut r, nb, wide);
                check_row(t, &variants, n, &a, &b, false);
            }
        }
    }
}

#[test]
fn simd_matches_scalar_on_quantized_data() {
    // Activations as `mul_mat` makes them (the reference quantizer), weights quantized from
    // smooth data: the common case, with little cancellation.
    for t in SIMD_TYPES {
        let vt = quants::vec_dot_type(t).expect("block type");
        let variants = dispatch::vec_dot_variants(t);
        for nb in block_counts(t) {
            let n = nb * t.block_size();
            let xw: Vec<f32> = (0..n)
                .map(|i| 0.1 + 2.0 * (i as f32 * 0.37).cos())
                .collect();
            let xa: Vec<f32> = (0..n)
                .map(|i| (i as f32 * 0.11 + 0.5).sin() * 3.0)
                .collect();
            let mut a = vec![0u8; t.row_size(n)];
            let mut b = vec![0u8; vt.row_size(n)];
            quants::quantize_row_dyn(t, &xw, &mut a).expect("whole blocks");
            quants::quantize_row_dyn(vt, &xa, &mut b).expect("whole blocks");
            check_row(t, &variants, n, &a, &b, false);
        }
    }
}

#[test]
fn simd_matches_scalar_on_extreme_blocks() {
    for t in SIMD_TYPES {
        let vt = quants::vec_dot_type(t).expect("block type");
        let variants = dispatch::vec_dot_variants(t);
        for nb in block_counts(t) {
            let n = nb * t.block_size();
            for scale in [f16::MAX, f16::from_f32(1.0), f16::from_f32(1.0e-3)] {
                for low in [false, true] {
                    // Weights at one end of their range, activations at the same end (all
                    // products positive): ±127 Q8 codes and, for `low`, −128.
                    let a = extreme_blocks(t, nb, low, scale);
                    let b = extreme_blocks(vt, nb, low, scale);
                    check_row(t, &variants, n, &a, &b, true);
                    // ±127 exactly: activations at +127 or −127 whatever the weights.
                    let mut b127 = b.clone();
                    for p in b127.chunks_exact_mut(vt.type_size()) {
                        let qs = match vt {
                            DType::Q8K => 4..260,
                            DType::Q8_1 => 4..36,
                            _ => 2..34,
                        };
                        if low {
                            p[qs].fill(0x81);
                        }
                        if vt == DType::Q8K {
                            fix_q8k(p, 0.75);
                        }
                        if vt == DType::Q8_1 {
                            let d = f16::from_le_bytes([p[0], p[1]]);
                            fix_q8_1(p, d);
                        }
                    }
                    check_row(t, &variants, n, &a, &b127, true);
                }
            }
        }
    }
}

#[test]
fn kernels_accept_short_and_empty_rows() {
    for t in SIMD_TYPES {
        for v in dispatch::vec_dot_variants(t) {
            assert_eq!((v.dot)(0, &[], &[]), 0.0, "{t} {:?}", v.isa);
            assert_eq!(
                (v.dot4)(0, &[], [&[], &[], &[], &[]]),
                [0.0; 4],
                "{t} {:?}",
                v.isa
            );
            assert_eq!(
                (v.rows4)(0, [&[], &[], &[], &[]], &[]),
                [0.0; 4],
                "{t} {:?}",
                v.isa
            );
            assert_eq!(
                (v.tile)(0, [&[], &[], &[], &[]], [&[], &[], &[], &[]]),
                [[0.0; 4]; 4],
                "{t} {:?}",
                v.isa
            );
        }
    }
}

// ------------------------------------------------------------------------------------------
// ggml's summation orders, bit for bit
// ------------------------------------------------------------------------------------------

/// The codes of 32-value block `blk` of type `t`, in value order (from the formats: Q4_0
/// nibble − 8, value j in the low nibble of byte j, j + 16 in the high one; Q5_0 the same
/// plus bit j of the 32-bit `qh` as bit 4, − 16; Q4_1 and Q5_1 the same codes unsigned, after
/// their f16 scale and minimum; Q8_0 and Q8_1 the bytes as i8, after `d` (and `s`)).
fn codes32(t: DType, blk: &[u8]) -> [i32; 32] {
    let mut v = [0i32; 32];
    let nibbles = |v: &mut [i32; 32], qs: &[u8], qh: Option<&[u8]>, offset: i32| {
        let qh = qh.map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        for j in 0..16 {
            let hi0 = ((qh >> j) & 1) as i32;
            let hi1 = ((qh >> (j + 16)) & 1) as i32;
            v[j] = ((qs[j] & 15) as i32 | hi0 << 4) - offset;
            v[j + 16] = ((qs[j] >> 4) as i32 | hi1 << 4) - offset;
        }
    };
    match t {
        DType::Q4_0 => nibbles(&mut v, &blk[2..18], None, 8),
        DType::Q5_0 => nibbles(&mut v, &blk[6..22], Some(&blk[2..6]), 16),
        DType::Q4_1 => nibbles(&mut v, &blk[4..20], None, 0),
        DType::Q5_1 => nibbles(&mut v, &blk[8..24], Some(&blk[4..8]), 0),
        DType::Q8_0 | DType::Q8_1 => {
            let off = if t == DType::Q8_0 { 2 } else { 4 };
            for j in 0..32 {
                v[j] = blk[off + j] as i8 as i32;
            }
        }
        DType::IQ4NL => v = iq4_levels(&blk[2..18]),
        _ => unreachable!(),
    }
    v
}

/// The levels of 16 index bytes in IQ4_NL's layout (value j in the low nibble of byte j,
/// j + 16 in the high one), in value order.
fn iq4_levels(qs: &[u8]) -> [i32; 32] {
    std::array::from_fn(|j| {
        let b = qs[j % 16];
        IQ4_LEVELS[if j < 16 { b & 15 } else { b >> 4 } as usize]
    })
}

/// `(l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)`: ggml's `hsum_float_8`.
fn tree8(l: [f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// IQ4_XS · Q8_K as ggml's AVX2 `ggml_vec_dot_iq4_xs_q8_K`, from the formats: lane l sums
/// `(ls − 32)·level·y` over values 4l..4l + 4 of every sub-block, exactly; per super-block
/// `lane = fma(d·d_y, lane_sum, lane)`; the lane tree.
fn iq4_xs_lanes_dot(k: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for i in 0..k / QK_K {
        let (x, y) = (&a[i * 136..(i + 1) * 136], &b[i * 292..(i + 1) * 292]);
        let sh = u16::from_le_bytes([x[2], x[3]]) as i32;
        let mut lanes = [0i32; 8];
        for ib in 0..8 {
            let ls =
                ((x[4 + ib / 2] as i32 >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
            let lv = iq4_levels(&x[8 + 16 * ib..24 + 16 * ib]);
            for (j, &l) in lv.iter().enumerate() {
                lanes[j / 4] += (ls - 32) * l * (y[4 + 32 * ib + j] as i8 as i32);
            }
        }
        let d = f16_at(x, 0) as f32 * f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        for l in 0..8 {
            acc[l] = d.mul_add(lanes[l] as f32, acc[l]);
        }
    }
    tree8(acc)
}

/// Q5_K · Q8_K as ggml's AVX2 `ggml_vec_dot_q5_K_q8_K`, from the formats: lane l sums
/// `sc_j·code·y` over the values p with `(p mod 32) / 4 = l`, exactly; per super-block
/// `lane = fma(d_y·d, lane_sum, lane)` and `summs = fma(−d_y·dmin, Σ_j min_j·(bsum_2j +
/// bsum_2j+1), summs)`; the lane tree plus `summs`.
fn q5_k_lanes_dot(k: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for i in 0..k / QK_K {
        let (x, y) = (&a[i * 176..(i + 1) * 176], &b[i * 292..(i + 1) * 292]);
        let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let s = &x[4..16];
        // Sub-block j's 6-bit scale and minimum (Q4_K's packing).
        let scale_min = |j: usize| -> (i32, i32) {
            if j < 4 {
                ((s[j] & 63) as i32, (s[j + 4] & 63) as i32)
            } else {
                (
                    ((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4)) as i32,
                    ((s[j + 4] >> 4) | ((s[j] >> 6) << 4)) as i32,
                )
            }
        };
        let bsum = |j: usize| i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]) as i32;
        let mins: i32 = (0..8)
            .map(|j| scale_min(j).1 * (bsum(2 * j) + bsum(2 * j + 1)))
            .sum();
        let mut lanes = [0i32; 8];
        for p in 0..QK_K {
            let (c, l, high) = (p / 64, p % 32, (p % 64) / 32);
            let byte = x[48 + 32 * c + l];
            let nib = if high == 1 { byte >> 4 } else { byte & 15 } as i32;
            let code = nib + 16 * ((x[16 + l] >> (2 * c + high)) & 1) as i32;
            lanes[l / 4] += scale_min(p / 32).0 * code * (y[4 + p] as i8 as i32);
        }
        let d = dy * f16_at(x, 0) as f32;
        let dmin = -dy * f16_at(x, 2) as f32;
        summs = dmin.mul_add(mins as f32, summs);
        for l in 0..8 {
            acc[l] = d.mul_add(lanes[l] as f32, acc[l]);
        }
    }
    tree8(acc) + summs
}

/// Q6_K · Q8_K as ggml's AVX2 `ggml_vec_dot_q6_K_q8_K`, from the format (`ql[128]`,
/// `qh[64]`, `scales[16]` i8, f16 `d`): lane l sums `sc_j·u·y` over the values p with
/// `(p mod 32) / 4 = l` for the unsigned 6-bit codes u, minus `32·(sc_2l·bsum_2l +
/// sc_2l+1·bsum_2l+1)`, exactly; per super-block `lane = fma(d_y·d, lane_sum, lane)`; the
/// lane tree.
fn q6_k_lanes_dot(k: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for i in 0..k / QK_K {
        let (x, y) = (&a[i * 210..(i + 1) * 210], &b[i * 292..(i + 1) * 292]);
        let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let (ql, qh, sc) = (&x[0..128], &x[128..192], &x[192..208]);
        let scale = |j: usize| sc[j] as i8 as i32;
        let bsum = |j: usize| i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]) as i32;
        let mut lanes = [0i32; 8];
        for p in 0..QK_K {
            // Value p = 128h + 32s + l: low nibble of ql[64h + l] (s = 0), of ql[64h + 32 + l]
            // (s = 1), high nibbles for s = 2, 3; high two bits at 2s of qh[32h + l].
            let (h, s, l) = (p / 128, (p % 128) / 32, p % 32);
            let byte = ql[64 * h + 32 * (s % 2) + l];
            let low = if s >= 2 { byte >> 4 } else { byte & 15 } as i32;
            let u = low | ((((qh[32 * h + l] >> (2 * s)) & 3) as i32) << 4);
            lanes[l / 4] += scale(p / 16) * u * (y[4 + p] as i8 as i32);
        }
        for (l, lane) in lanes.iter_mut().enumerate() {
            *lane -= 32 * (scale(2 * l) * bsum(2 * l) + scale(2 * l + 1) * bsum(2 * l + 1));
        }
        let d = dy * f16_at(x, 208) as f32;
        for l in 0..8 {
            acc[l] = d.mul_add(lanes[l] as f32, acc[l]);
        }
    }
    tree8(acc)
}

/// IQ4_NL · Q8_0 as ggml's AVX2 `ggml_vec_dot_iq4_nl_q8_0` (weights llama.cpp does not
/// repack, one column): even and odd blocks into two sets of eight lanes
/// (`lane = fma(dy·dx, lane_sum, lane)`), the sets added lane by lane, the lane tree, then an
/// odd last block as `fma(d, block_sum, total)`.
fn iq4_nl_pairs_dot(k: usize, a: &[u8], b: &[u8]) -> f32 {
    let nb = k / 32;
    let block = |i: usize| {
        let (x, y) = (&a[i * 18..(i + 1) * 18], &b[i * 34..(i + 1) * 34]);
        let d = f16_at(y, 0) as f32 * f16_at(x, 0) as f32;
        let (qx, qy) = (codes32(DType::IQ4NL, x), codes32(DType::Q8_0, y));
        let lanes: [i32; 8] =
            std::array::from_fn(|l| (4 * l..4 * l + 4).map(|j| qx[j] * qy[j]).sum());
        (d, lanes)
    };
    let mut sets = [[0f32; 8]; 2];
    let pairs = nb / 2 * 2;
    for i in 0..pairs {
        let (d, lanes) = block(i);
        for l in 0..8 {
            sets[i % 2][l] = d.mul_add(lanes[l] as f32, sets[i % 2][l]);
        }
    }
    let mut sum = tree8(std::array::from_fn(|l| sets[0][l] + sets[1][l]));
    for i in pairs..nb {
        let (d, lanes) = block(i);
        sum = d.mul_add(lanes.iter().sum::<i32>() as f32, sum);
    }
    sum
}

/// ggml's x86 orders written out plainly (see `SumOrder`). For Q4_1/Q5_1, ggml's
/// `ggml_vec_dot_q*_1_q8_1` AVX2 loop: `summs += m·s` (contracted by GCC to one FMA),
/// `acc = fma(dx·dy, lanes, acc)`, then `hsum_float_8(acc) + summs`.
fn ggml_order_dot(t: DType, order: SumOrder, k: usize, a: &[u8], b: &[u8]) -> f32 {
    if t == DType::IQ4XS {
        assert_eq!(order, SumOrder::GgmlLanes);
        return iq4_xs_lanes_dot(k, a, b);
    }
    if t == DType::Q5K {
        assert_eq!(order, SumOrder::GgmlLanes);
        return q5_k_lanes_dot(k, a, b);
    }
    if t == DType::Q6K {
        assert_eq!(order, SumOrder::GgmlLanes);
        return q6_k_lanes_dot(k, a, b);
    }
    let vt = quants::vec_dot_type(t).expect("block type");
    let (ta, tb) = (t.type_size(), vt.type_size());
    let mut lanes = [0f32; 8];
    let mut chain = 0f32;
    let mut summs = 0f32;
    for i in 0..k / 32 {
        let (xa, yb) = (&a[i * ta..(i + 1) * ta], &b[i * tb..(i + 1) * tb]);
        let d = f16_at(xa, 0) as f32 * f16_at(yb, 0) as f32;
        if vt == DType::Q8_1 {
            summs = (f16_at(xa, 2) as f32).mul_add(f16_at(yb, 2) as f32, summs);
        }
        let (x, y) = (codes32(t, xa), codes32(vt, yb));
        let mut block = 0i32;
        for (l, lane) in lanes.iter_mut().enumerate() {
            let s: i32 = (4 * l..4 * l + 4).map(|j| x[j] * y[j]).sum();
            *lane = d.mul_add(s as f32, *lane);
            block += s;
        }
        chain = (block as f32).mul_add(d, chain);
    }
    match order {
        SumOrder::GgmlLanes => {
            let l = lanes;
            // hsum_float_8: high half + low half, then lanes 0 + 2 and 1 + 3, then those.
            let total = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
            if vt == DType::Q8_1 {
                total + summs
            } else {
                total
            }
        }
        SumOrder::GgmlBlockChain => chain,
        SumOrder::Any | SumOrder::GgmlTiled | SumOrder::GgmlRepacked => {
            unreachable!("not an order of the Q8_0 pairs")
        }
    }
}

/// ggml's tiled k-quant matmul written out plainly for Q4_K, Q5_K, Q6_K and IQ4_XS (see
/// `SumOrder::GgmlTiled`): per super-block the exact integers `s1 = Σ_j sc_j·Σ code·y` and
/// `s2 = Σ_j min_j·Σ y`, then `r = d·s1`, `r = fma(−dmin, s2, r)`, `acc = fma(r, dy, acc)`.
fn ggml_tiled_dot(t: DType, k: usize, a: &[u8], b: &[u8]) -> f32 {
    let (ta, tb) = (t.type_size(), 292);
    let mut acc = 0f32;
    for i in 0..k / QK_K {
        let (x, y) = (&a[i * ta..(i + 1) * ta], &b[i * tb..(i + 1) * tb]);
        let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let yq = |p: usize| y[4 + p] as i8 as i32;
        let bsum = |j: usize| i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]) as i32;
        let r = match t {
            DType::Q4K | DType::Q5K => {
                // d, dmin (f16), 12 bytes of 6-bit scales and mins, (Q5_K: 32 bytes of fifth
                // bits,) 128 bytes of nibbles.
                let five = t == DType::Q5K;
                let qs = if five { 48 } else { 16 };
                let (d, dmin) = (f16_at(x, 0) as f32, f16_at(x, 2) as f32);
                let q = &x[4..16];
                let sm = |j: usize| -> (i32, i32) {
                    if j < 4 {
                        ((q[j] & 63) as i32, (q[j + 4] & 63) as i32)
                    } else {
                        (
                            ((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4)) as i32,
                            ((q[j + 4] >> 4) | ((q[j] >> 6) << 4)) as i32,
                        )
                    }
                };
                let (mut s1, mut s2) = (0i32, 0i32);
                for p in 0..QK_K {
                    let byte = x[qs + 32 * (p / 64) + p % 32];
                    let mut code = if p % 64 < 32 { byte & 15 } else { byte >> 4 };
                    if five {
                        code += ((x[16 + p % 32] >> (2 * (p / 64) + (p % 64) / 32)) & 1) << 4;
                    }
                    s1 += sm(p / 32).0 * code as i32 * yq(p);
                }
                for j in 0..8 {
                    s2 += sm(j).1 * (bsum(2 * j) + bsum(2 * j + 1));
                }
                (-dmin).mul_add(s2 as f32, d * s1 as f32)
            }
            DType::Q6K => {
                // ql (128), qh (64), scales (16 × i8), d (f16).
                let d = f16_at(x, 208) as f32;
                let mut s1 = 0i32;
                for p in 0..QK_K {
                    let (h, l, g) = (p / 128, p % 32, (p % 128) / 32);
                    let ql = x[64 * h + l + if g % 2 == 1 { 32 } else { 0 }];
                    let low = if g < 2 { ql & 15 } else { ql >> 4 };
                    let high = (x[128 + 32 * h + l] >> (2 * g)) & 3;
                    let code = (low | (high << 4)) as i32 - 32;
                    s1 += x[192 + p / 16] as i8 as i32 * code * yq(p);
                }
                d * s1 as f32
            }
            DType::IQ4XS => {
                // d (f16), scales_h (u16), scales_l (4 bytes), 128 bytes of level indices.
                let d = f16_at(x, 0) as f32;
                let sh = u16::from_le_bytes([x[2], x[3]]) as i32;
                let mut s1 = 0i32;
                for p in 0..QK_K {
                    let (ib, j) = (p / 32, p % 32);
                    let ls = ((x[4 + ib / 2] >> (4 * (ib % 2))) & 15) as i32
                        | (((sh >> (2 * ib)) & 3) << 4);
                    let byte = x[8 + 16 * ib + j % 16];
                    let idx = if j < 16 { byte & 15 } else { byte >> 4 };
                    s1 += (ls - 32) * quants::iq4::KVALUES_IQ4NL[idx as usize] as i32 * yq(p);
                }
                d * s1 as f32
            }
            _ => unreachable!("{t} has no tiled case here"),
        };
        acc = r.mul_add(dy, acc);
    }
    acc
}

#[test]
fn simd_builds_keep_ggml_orders_bit_for_bit() {
    let mut r = Rng(31);
    let cases = [
        (DType::Q4_0, SumOrder::GgmlLanes),
        (DType::Q5_0, SumOrder::GgmlLanes),
        (DType::Q8_0, SumOrder::GgmlLanes),
        (DType::Q4_1, SumOrder::GgmlLanes),
        (DType::Q5_1, SumOrder::GgmlLanes),
        (DType::Q4_0, SumOrder::GgmlBlockChain),
        (DType::IQ4NL, SumOrder::GgmlLanes),
        (DType::IQ4NL, SumOrder::GgmlBlockChain),
        (DType::IQ4XS, SumOrder::GgmlLanes),
        (DType::Q5K, SumOrder::GgmlLanes),
        (DType::Q6K, SumOrder::GgmlLanes),
    ];
    for (t, order) in cases {
        let vt = quants::vec_dot_type(t).expect("block type");
        let builds = dispatch::vec_dot_variants_in(t, order);
        if cpu_isas().contains(&Isa::Avx2) {
            assert!(!builds.is_empty(), "{t} {order:?}: no SIMD build");
        }
        for nb in (0..=16).chain([77]) {
            let k = t.block_size() * nb;
            for rep in 0..3 {
                let wide = rep == 2;
                let w = random_blocks(t, &mut r, 4 * nb, wide);
                let y = random_blocks(vt, &mut r, 4 * nb, wide);
                let (rs, ys) = (t.row_size(k), vt.row_size(k));
                let wr: [&[u8]; 4] = std::array::from_fn(|i| &w[i * rs..(i + 1) * rs]);
                let yr: [&[u8]; 4] = std::array::from_fn(|j| &y[j * ys..(j + 1) * ys]);
                let want: [[u32; 4]; 4] = std::array::from_fn(|i| {
                    std::array::from_fn(|j| ggml_order_dot(t, order, k, wr[i], yr[j]).to_bits())
                });
                for v in &builds {
                    let what = format!("{t} {order:?} {:?} k={k}", v.isa);
                    assert_eq!(
                        (v.tile)(k, wr, yr).map(|x| x.map(f32::to_bits)),
                        want,
                        "{what}"
                    );
                    assert_eq!((v.dot)(k, wr[1], yr[2]).to_bits(), want[1][2], "{what}");
                    let four = (v.dot4)(k, wr[3], yr).map(f32::to_bits);
                    assert_eq!(four, want[3], "{what}");
                    let rows = (v.rows4)(k, wr, yr[0]).map(f32::to_bits);
                    assert_eq!(rows, want.map(|row| row[0]), "{what}");
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// Activation quantizers: the reference's bytes, exactly
// ------------------------------------------------------------------------------------------

/// `groups` groups of 32 values, each of a kind the quantizers must get exactly right:
/// ties, subnormals, huge values, a maximum magnitude reached by both signs (the first one
/// sets Q8_K's sign), NaN and infinities (handed back to the reference), −0.
fn awkward_values(r: &mut Rng, groups: usize) -> Vec<f32> {
    let mut x = vec![0f32; 32 * groups];
    for g in x.chunks_exact_mut(32) {
        let kind = r.below(16);
        let s = (1 + r.below(1000)) as f32 * 0.01;
        for v in g.iter_mut() {
            let u = (r.below(1 << 24) as f32) / 16_777_216.0 * 2.0 - 1.0;
            *v = match kind {
                0 => 0.0,
                1 => s,
                2 => u * 1e-20,
                3 => u * 1e-40,
                4 => u * 1e30,
                5 => u * 3e38,
                // Half-integers with a maximum of 127: Q8_0's scale is exactly 1, every value
                // a tie for `roundf`.
                6 => (r.below(255) as i32 - 127) as f32 * 0.5,
                7 => -0.0,
                8 => (r.below(41) as f32 - 20.0) * 0.25,
                9 => f32::from_bits(1 + r.below(8) as u32),
                _ => u * s,
            };
        }
        match kind {
            6 => g[r.below(32) as usize] = 127.0,
            8 => {
                // The largest magnitude twice, opposite signs, in random order.
                let (i, j) = (r.below(16) as usize, 16 + r.below(16) as usize);
                let sign = if r.below(2) == 0 { 1.0 } else { -1.0 };
                g[i] = 7.5 * sign;
                g[j] = -7.5 * sign;
            }
            10 => g[r.below(32) as usize] = f32::NAN,
            11 => {
                g[r.below(32) as usize] = if r.below(2) == 0 {
                    f32::INFINITY
                } else {
                    f32::NEG_INFINITY
                }
            }
            12 => g[r.below(32) as usize] = s * 1000.0,
            _ => {}
        }
    }
    x
}

#[test]
fn simd_quantizers_write_the_reference_bytes() {
    let mut r = Rng(2024);
    for t in [DType::Q8_0, DType::Q8K] {
        let variants = dispatch::quantizer_variants(t);
        assert_eq!(variants[0].0, Isa::Scalar, "{t}");
        if cpu_isas().contains(&Isa::Avx2) {
            assert!(
                variants.iter().any(|(isa, _)| *isa == Isa::Avx2),
                "{t}: no AVX2 quantizer"
            );
        }
        let per = t.block_size() / 32;
        for rep in 0..400 {
            let nb = 1 + rep % 7;
            // One spare value in front: rows start at any multiple of 4 bytes.
            let x = awkward_values(&mut r, nb * per + 1);
            let len = nb * t.block_size();
            let src = if rep % 2 == 0 {
                &x[..len]
            } else {
                &x[1..1 + len]
            };
            let mut want = vec![0u8; t.row_size(src.len())];
            quants::quantize_row_dyn(t, src, &mut want).expect("whole blocks");
            for (isa, q) in &variants {
                // Output at an odd byte offset too.
                let mut buf = vec![0xAAu8; want.len() + 1];
                q(src, &mut buf[1..]);
                let diff = buf[1..].iter().zip(&want).position(|(a, b)| a != b);
                assert!(
                    diff.is_none(),
                    "{t} {isa:?} rep {rep}: byte {diff:?} differs from the reference"
                );
            }
        }
    }
    assert!(dispatch::quantizer_variants(DType::F32).is_empty());
}

// ------------------------------------------------------------------------------------------
// Selection
// ------------------------------------------------------------------------------------------

// The x86 builds; `quants_neon.rs` checks the aarch64 list and selection.
#[cfg(target_arch = "x86_64")]
#[test]
fn best_build_is_selected_and_env_forces_scalar() {
    let forced = std::env::var("GGRS_FORCE_SCALAR").is_ok_and(|v| !v.is_empty() && v != "0");
    let best = *cpu_isas().last().expect("scalar at least");
    for t in SIMD_TYPES {
        let isa = dispatch::active_variant(t).expect("block type").isa;
        // Where the CPU's best is AVX-VNNI (no AVX-512), the types without such a build run
        // their AVX2 one; on AVX-512 CPUs, the types with AVX2 builds only (Q4_1, Q5_1, the
        // i-quants) run those.
        let best = if best == Isa::Avx2Vnni {
            if has_avx_vnni_build(t) {
                best
            } else {
                Isa::Avx2
            }
        } else if avx2_only(t) {
            best.min(Isa::Avx2)
        } else {
            best
        };
        assert_eq!(isa, if forced { Isa::Scalar } else { best }, "{t}");
        if matches!(t, DType::Q4_1 | DType::Q5_1) {
            // `mul_mat` runs them in ggml's order: the AVX2 (or AVX-VNNI) build, or portable
            // code.
            let v = dispatch::active_variant_in(t, SumOrder::GgmlLanes);
            let want = (!forced && matches!(best, Isa::Avx2 | Isa::Avx2Vnni)).then_some(best);
            assert_eq!(v.map(|v| v.isa), want, "{t}");
        }
    }
    for t in [DType::Q2K, DType::Q8K] {
        assert_eq!(
            dispatch::active_variant(t).expect("block type").isa,
            Isa::Scalar
        );
    }
    assert!(dispatch::active_variant(DType::F32).is_none());
    if !forced {
        // Run this very test again in a child process with the variable set.
        let exe = std::env::current_exe().expect("the test binary's path");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "best_build_is_selected_and_env_forces_scalar",
                "--test-threads=1",
            ])
            .env("GGRS_FORCE_SCALAR", "1")
            .output()
            .expect("the test binary runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "child run:\n{text}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// mul_mat through the executor
// ------------------------------------------------------------------------------------------

/// Through the executor, every output element is bit for bit the selected kernel's dot
/// product of its weight row and its quantized activation column (for Q4_0 and Q8_0: ggml's
/// order for the weight's shape), whatever the thread count and whether it went through a
/// tile, and the SIMD result is
/// within the tolerance of the scalar one ([`dispatch::force_scalar`]). The only test in
/// this file that flips `force_scalar` or runs graphs, so no other test sees the switch.
#[test]
fn mul_mat_uses_the_selected_kernel_per_element() {
    let mut r = Rng(77);
    // 37 rows: Q4_0 and IQ4_NL in ggml's lane order (IQ4_NL: its vec_dot's pair order for
    // one column); 40 (a multiple of 8): in their repacked order.
    for (t, n) in SIMD_TYPES
        .map(|t| (t, 37))
        .into_iter()
        .chain([(DType::Q4_0, 40), (DType::IQ4NL, 40)])
    {
        let vt = quants::vec_dot_type(t).expect("block type");
        let k = 4 * t.block_size() + if t.block_size() == 32 { 96 } else { 0 };
        let w = random_blocks(t, &mut r, n * k / t.block_size(), false);
        let rs = t.row_size(k);
        for m in [1, 3, 4, 5, 9, 18] {
            // From 8 columns on, k-quants take ggml's tiled order.
            let order = dispatch::ggml_sum_order_cols(t, [k, n, 1, 1], m);
            // Activations that every Q8 quantizer maps to the same codes (integers times 1/8,
            // each group of 32 reaching ±127/8): `mul_mat`'s INIT may use a run-time
            // quantizer whose rounding differs from the reference's on other values.
            let mut x: Vec<f32> = (0..k * m)
                .map(|_| (r.below(255) as i32 - 127) as f32 * 0.125)
                .collect();
            for g in x.chunks_exact_mut(32) {
                let sign = if r.below(2) == 0 { 1.0 } else { -1.0 };
                g[r.below(32) as usize] = sign * 127.0 * 0.125;
            }
            let cols: Vec<Vec<u8>> = x
                .chunks_exact(k)
                .map(|c| {
                    let mut q = vec![0u8; vt.row_size(k)];
                    quants::quantize_row_dyn(vt, c, &mut q).expect("whole blocks");
                    q
                })
                .collect();
            for forced in [false, true] {
                dispatch::force_scalar(forced);
                let v = dispatch::active_variant(t).expect("block type");
                if forced {
                    assert_eq!(v.isa, Isa::Scalar);
                }
                for threads in [1, 2, 3] {
                    let got = run_mul_mat(t, &w, &x, k, n, m, threads);
                    for j in 0..m {
                        for i in 0..n {
                            let row = &w[i * rs..(i + 1) * rs];
                            // Q4_0, Q8_0 and the i-quants keep ggml's order whichever code
                            // runs them.
                            let want = match order {
                                SumOrder::Any => (v.dot)(k, row, &cols[j]),
                                SumOrder::GgmlTiled => ggml_tiled_dot(t, k, row, &cols[j]),
                                SumOrder::GgmlLanes if t == DType::IQ4NL && m == 1 => {
                                    iq4_nl_pairs_dot(k, row, &cols[j])
                                }
                                _ => ggml_order_dot(t, order, k, row, &cols[j]),
                            };
                            assert_eq!(
                                got[j * n + i].to_bits(),
                                want.to_bits(),
                                "{t} {:?} {order:?} m={m} threads={threads} out[{i}, {j}]",
                                v.isa
                            );
                        }
                    }
                }
            }
            dispatch::force_scalar(false);
            // SIMD against scalar through the whole graph.
            let simd = run_mul_mat(t, &w, &x, k, n, m, 2);
            dispatch::force_scalar(true);
            let scalar = run_mul_mat(t, &w, &x, k, n, m, 2);
            dispatch::force_scalar(false);
            for j in 0..m {
                for i in 0..n {
                    let mg = magnitude(t, &w[i * rs..(i + 1) * rs], &cols[j]);
                    let (s, q) = (simd[j * n + i] as f64, scalar[j * n + i] as f64);
                    assert!(
                        (s - q).abs() <= 1e-5 * mg,
                        "{t} m={m} out[{i}, {j}]: {s} vs {q}"
                    );
                }
            }
        }
    }
}
