//! The AArch64 NEON kernels (Q4_0·Q8_0, Q8_0·Q8_0, the Q8_0 activation quantizer) against
//! references written plainly here and against the scalar reference kernels.
//!
//! Compiled on aarch64 only; on an x86-64 machine run it with `scripts/check-neon.sh`
//! (cross compiler + qemu-aarch64; the script runs it on an emulated CPU with and without
//! `dotprod`, and with `GGRS_FORCE_SCALAR=1`).
//!
//! What is checked:
//! - dot products: every NEON build, bit for bit, against a plain model of ggml's x86
//!   summation order (eight lanes of four products, one FMA per block and lane, a fixed
//!   final tree) — the order the NEON kernels keep so that `mul_mat` gives llama.cpp's x86
//!   bits — and the repacked-Q4_0 builds against a plain model of that order (one FMA per
//!   block); all against the scalar reference within `|neon − scalar| ≤ (nb + 8)·2⁻²³·M`,
//!   `M = Σ |dx·dy|·Σ |x·y|` (two summation orders of `nb + 8` rounded terms whose partial
//!   sums are all bounded by `M`); the 1 × 4, 4 × 1 and 4 × 4 forms against one-element
//!   calls, bit for bit; rows at odd byte offsets;
//! - the quantizer: the reference quantizer's bytes exactly, on random rows and on blocks
//!   built to hit its edge cases (exact halves, zeros, signed zeros, NaN, infinities,
//!   subnormal and huge maxima);
//! - selection: which builds are listed and chosen, and that `GGRS_FORCE_SCALAR` chooses
//!   the scalar kernels.
#![cfg(target_arch = "aarch64")]

use ggrs_core::quants::dispatch::{self, Isa, SumOrder, VecDotVariant};
use ggrs_core::quants::{quantize_row, BlockQ8_0, BlockQuant};
use ggrs_core::DType;
use half::f16;

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

    /// A block scale: mostly modest values of either sign, sometimes an edge value.
    fn scale(&mut self) -> f16 {
        match self.below(16) {
            0 => f16::from_f32(0.0),
            1 => f16::from_bits(0x8000),                       // −0
            2 => f16::from_bits(1 + self.below(0x3FF) as u16), // subnormal
            3 => f16::MAX,
            4 => f16::MIN,
            5 => f16::from_bits(0x0400), // smallest normal
            6 => loop {
                // any finite f16
                let h = f16::from_bits(self.next64() as u16);
                if h.is_finite() {
                    break h;
                }
            },
            _ => {
                let m = (self.below(2000) as f32 + 1.0) / 1000.0;
                let e = self.below(12) as i32 - 10;
                let s = if self.below(2) == 0 { 1.0 } else { -1.0 };
                f16::from_f32(s * m * 2f32.powi(e))
            }
        }
    }
}

/// How the codes of a block are drawn.
#[derive(Clone, Copy, Debug)]
enum Codes {
    Random,
    /// Every Q8 code −128 and every Q4 nibble 0 (value −8): the largest products.
    Min,
    /// Every Q8 code 127 and every Q4 nibble 15.
    Max,
    /// Codes alternating between the two extremes.
    Alternate,
    Zero,
}

const CODES: [Codes; 5] = [
    Codes::Random,
    Codes::Min,
    Codes::Max,
    Codes::Alternate,
    Codes::Zero,
];

/// `nb` blocks of `t` (Q4_0 or Q8_0): scale bytes then code bytes.
fn blocks(t: DType, nb: usize, codes: Codes, rng: &mut Rng) -> Vec<u8> {
    let size = t.type_size();
    let mut out = vec![0u8; nb * size];
    for blk in out.chunks_exact_mut(size) {
        blk[..2].copy_from_slice(&rng.scale().to_le_bytes());
        for (j, b) in blk[2..].iter_mut().enumerate() {
            *b = match (codes, t) {
                (Codes::Random, _) => rng.next64() as u8,
                (Codes::Min, DType::Q8_0) => 0x80,
                (Codes::Min, _) => 0x00,
                (Codes::Max, DType::Q8_0) => 0x7F,
                (Codes::Max, _) => 0xFF,
                (Codes::Alternate, DType::Q8_0) => [0x80, 0x7F][j % 2],
                (Codes::Alternate, _) => [0x0F, 0xF0][j % 2],
                (Codes::Zero, DType::Q8_0) => 0,
                (Codes::Zero, _) => 0x88,
            };
        }
    }
    out
}

/// Block `i` of a row: its scale and its 32 values as integers, in value order.
fn block_values(t: DType, row: &[u8], i: usize) -> (f32, [i32; 32]) {
    let b = &row[i * t.type_size()..(i + 1) * t.type_size()];
    let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
    let mut v = [0i32; 32];
    if t == DType::Q8_0 {
        for j in 0..32 {
            v[j] = b[2 + j] as i8 as i32;
        }
    } else {
        for j in 0..16 {
            v[j] = (b[2 + j] & 15) as i32 - 8;
            v[j + 16] = (b[2 + j] >> 4) as i32 - 8;
        }
    }
    (d, v)
}

/// ggml's x86 order, written out: eight lanes of four products, `lane = fma(dx·dy, sum,
/// lane)`, then `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`.
fn model_lanes(t: DType, nb: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut lane = [0f32; 8];
    for i in 0..nb {
        let (dx, x) = block_values(t, a, i);
        let (dy, y) = block_values(DType::Q8_0, b, i);
        for (l, acc) in lane.iter_mut().enumerate() {
            let s: i32 = (4 * l..4 * l + 4).map(|j| x[j] * y[j]).sum();
            *acc = (dx * dy).mul_add(s as f32, *acc);
        }
    }
    ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]))
}

/// ggml's repacked-Q4_0 order, written out: `acc = fma(Σ x·y, dx·dy, acc)` per block.
fn model_chain(nb: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = 0f32;
    for i in 0..nb {
        let (dx, x) = block_values(DType::Q4_0, a, i);
        let (dy, y) = block_values(DType::Q8_0, b, i);
        let s: i32 = (0..32).map(|j| x[j] * y[j]).sum();
        acc = (s as f32).mul_add(dx * dy, acc);
    }
    acc
}

/// `M = Σ_i |dx·dy|·Σ_j |x_j·y_j|` in f64: a bound on every partial sum of either order.
fn magnitude(t: DType, nb: usize, a: &[u8], b: &[u8]) -> f64 {
    (0..nb)
        .map(|i| {
            let (dx, x) = block_values(t, a, i);
            let (dy, y) = block_values(DType::Q8_0, b, i);
            let s: i64 = (0..32).map(|j| (x[j] as i64 * y[j] as i64).abs()).sum();
            (dx as f64 * dy as f64).abs() * s as f64
        })
        .sum()
}

/// Equal bits, or both NaN.
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// `src` at byte offset `off` of a fresh buffer.
fn shifted(src: &[u8], off: usize) -> Vec<u8> {
    let mut v = vec![0u8; off + src.len()];
    v[off..].copy_from_slice(src);
    v
}

fn neon_isas() -> Vec<Isa> {
    let mut v = Vec::new();
    if std::arch::is_aarch64_feature_detected!("neon") {
        v.push(Isa::Neon);
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            v.push(Isa::NeonDotprod);
        }
    }
    v
}

fn forced_scalar() -> bool {
    std::env::var("GGRS_FORCE_SCALAR").is_ok_and(|v| v != "0" && !v.is_empty())
}

/// Running totals of one dot-product check.
#[derive(Default)]
struct Stats {
    cases: usize,
    bitwise: usize,
    max_rel: f64,
}

/// A plain model of a summation order: `(nb, weight row, Q8_0 row) -> dot product`.
type Model = dyn Fn(usize, &[u8], &[u8]) -> f32;

/// Checks the builds `builds` of `t` against `model` (bitwise) and the scalar reference
/// (bound), the tile forms against one-element calls, on rows of `nb` blocks.
fn check_builds(
    t: DType,
    builds: &[VecDotVariant],
    model: &Model,
    nb: usize,
    codes: (Codes, Codes),
    rng: &mut Rng,
    stats: &mut Stats,
) {
    let n = 32 * nb;
    let scalar = dispatch::vec_dot_scalar_kernel(t).expect("Q4_0 and Q8_0 have a scalar kernel");
    let rows: Vec<Vec<u8>> = (0..4).map(|_| blocks(t, nb, codes.0, rng)).collect();
    let cols: Vec<Vec<u8>> = (0..4)
        .map(|_| blocks(DType::Q8_0, nb, codes.1, rng))
        .collect();
    for v in builds {
        assert!(neon_isas().contains(&v.isa), "{t}: build {:?}", v.isa);
        for (r, a) in rows.iter().enumerate() {
            for (c, b) in cols.iter().enumerate() {
                let got = (v.dot)(n, a, b);
                let want = model(nb, a, b);
                assert!(
                    same(got, want),
                    "{t} {:?} nb={nb} {codes:?} ({r}, {c}): {got:e} ≠ model {want:e}",
                    v.isa
                );
                // Odd start addresses: rows in GGUF files are only 2-byte aligned.
                let (sa, sb) = (shifted(a, 1 + r), shifted(b, 3 + c));
                let moved = (v.dot)(n, &sa[1 + r..], &sb[3 + c..]);
                assert!(same(moved, got), "{t} {:?} nb={nb}: offsets", v.isa);
                let reference = scalar(n, a, b);
                let m = magnitude(t, nb, a, b);
                if m.is_finite() && m < f32::MAX as f64 / 2.0 {
                    let diff = (got as f64 - reference as f64).abs();
                    let bound = (nb + 8) as f64 * f32::EPSILON as f64 * m;
                    assert!(
                        diff <= bound,
                        "{t} {:?} nb={nb} {codes:?}: neon {got:e}, scalar {reference:e}, \
                         |diff| {diff:e} > {bound:e}",
                        v.isa
                    );
                    if m > 0.0 {
                        stats.max_rel = stats.max_rel.max(diff / m);
                    }
                }
                stats.cases += 1;
                stats.bitwise += 1;
            }
        }
        let ar: [&[u8]; 4] = std::array::from_fn(|r| rows[r].as_slice());
        let br: [&[u8]; 4] = std::array::from_fn(|c| cols[c].as_slice());
        let tile = (v.tile)(n, ar, br);
        let rows4 = (v.rows4)(n, ar, br[2]);
        let four = (v.dot4)(n, ar[1], br);
        for r in 0..4 {
            for c in 0..4 {
                let one = (v.dot)(n, ar[r], br[c]);
                assert!(same(tile[r][c], one), "{t} {:?} tile ({r}, {c})", v.isa);
            }
            assert!(same(rows4[r], (v.dot)(n, ar[r], br[2])), "{t} rows4 {r}");
            assert!(same(four[r], (v.dot)(n, ar[1], br[r])), "{t} dot4 {r}");
        }
    }
}

const BLOCK_COUNTS: [usize; 14] = [0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 64, 129];

#[test]
fn dot_products_match_ggml_x86_order_and_scalar() {
    let mut rng = Rng(0x5EED_0001);
    for t in [DType::Q4_0, DType::Q8_0] {
        let builds: Vec<VecDotVariant> = dispatch::vec_dot_variants(t)
            .into_iter()
            .filter(|v| v.isa != Isa::Scalar)
            .collect();
        let lanes: Vec<Isa> = dispatch::vec_dot_variants_in(t, SumOrder::GgmlLanes)
            .iter()
            .map(|v| v.isa)
            .collect();
        assert_eq!(lanes, neon_isas(), "{t}: builds in ggml's x86 order");
        let model = move |nb: usize, a: &[u8], b: &[u8]| model_lanes(t, nb, a, b);
        let mut stats = Stats::default();
        for &nb in &BLOCK_COUNTS {
            let trials = if nb > 32 { 3 } else { 12 };
            for _ in 0..trials {
                check_builds(
                    t,
                    &builds,
                    &model,
                    nb,
                    (Codes::Random, Codes::Random),
                    &mut rng,
                    &mut stats,
                );
            }
            for cx in CODES {
                for cy in CODES {
                    check_builds(
                        t,
                        &builds,
                        &model,
                        nb.min(9),
                        (cx, cy),
                        &mut rng,
                        &mut stats,
                    );
                }
            }
        }
        println!(
            "{t} · Q8_0 lanes order: {} builds {:?}, {} dot products bit-identical to the \
             model, max |neon − scalar| / M = {:.3e}",
            builds.len(),
            builds.iter().map(|v| v.isa).collect::<Vec<_>>(),
            stats.cases,
            stats.max_rel
        );
        assert!(stats.cases > 1000);
    }
}

#[test]
fn q4_0_chain_order_matches_model_and_scalar() {
    let mut rng = Rng(0x5EED_0002);
    let builds = dispatch::vec_dot_variants_in(DType::Q4_0, SumOrder::GgmlBlockChain);
    assert_eq!(
        builds.iter().map(|v| v.isa).collect::<Vec<_>>(),
        neon_isas()
    );
    let mut stats = Stats::default();
    for &nb in &BLOCK_COUNTS {
        for _ in 0..8 {
            check_builds(
                DType::Q4_0,
                &builds,
                &model_chain,
                nb,
                (Codes::Random, Codes::Random),
                &mut rng,
                &mut stats,
            );
        }
        for cx in CODES {
            check_builds(
                DType::Q4_0,
                &builds,
                &model_chain,
                nb.min(9),
                (cx, Codes::Min),
                &mut rng,
                &mut stats,
            );
        }
    }
    println!(
        "Q4_0 · Q8_0 block-chain order: {} dot products bit-identical to the model, \
         max |neon − scalar| / M = {:.3e}",
        stats.cases, stats.max_rel
    );
    assert!(stats.cases > 500);
}

/// Blocks whose scales are infinite or NaN: the builds still follow the model (NaN for NaN).
#[test]
fn non_finite_scales_follow_the_model() {
    let mut rng = Rng(0x5EED_0003);
    let mut count = 0;
    for t in [DType::Q4_0, DType::Q8_0] {
        for v in dispatch::vec_dot_variants_in(t, SumOrder::GgmlLanes) {
            for bits in [0x7C00u16, 0xFC00, 0x7E00] {
                for nb in [1usize, 2, 5] {
                    let mut a = blocks(t, nb, Codes::Random, &mut rng);
                    let b = blocks(DType::Q8_0, nb, Codes::Random, &mut rng);
                    let at = rng.below(nb as u64) as usize * t.type_size();
                    a[at..at + 2].copy_from_slice(&bits.to_le_bytes());
                    let got = (v.dot)(32 * nb, &a, &b);
                    assert!(same(got, model_lanes(t, nb, &a, &b)), "{t} {:?}", v.isa);
                    count += 1;
                }
            }
        }
    }
    assert!(count > 0 || neon_isas().is_empty());
}

/// A row of 32-value blocks built to hit the quantizer's edge cases, plus random ones.
fn quantizer_rows(rng: &mut Rng) -> Vec<Vec<f32>> {
    let mut rows = Vec::new();
    // Exact halves: amax = 127·2^e makes d = 2^e and id = 2^−e, so x·id is exactly k + ½.
    for e in [-20, -3, 0, 5, 30] {
        let s = 2f32.powi(e);
        let mut x: Vec<f32> = (0..32).map(|j| (j as f32 - 16.0 + 0.5) * 3.0 * s).collect();
        x[7] = 127.0 * s;
        x[8] = -126.5 * s;
        x[9] = 0.5 * s;
        x[10] = -0.5 * s;
        x[11] = 1.5 * s;
        x[12] = -2.5 * s;
        rows.push(x);
    }
    rows.push(vec![0.0; 32]);
    rows.push(vec![-0.0; 32]);
    rows.push(vec![1.0; 32]);
    rows.push(vec![-3.5e-3; 32]);
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        f32::from_bits(1),           // smallest subnormal
        f32::from_bits(0x0000_1234), // subnormal
        -f32::from_bits(0x007F_FFFF),
        1e-40,
        1e-38,
        3e38,
    ];
    for &sp in &specials {
        // Alone in a zero block, and among random values.
        let mut x = vec![0f32; 32];
        x[rng.below(32) as usize] = sp;
        rows.push(x);
        let mut x: Vec<f32> = (0..32)
            .map(|_| (rng.below(2001) as f32 - 1000.0) / 37.0)
            .collect();
        x[rng.below(32) as usize] = sp;
        rows.push(x);
    }
    // Only subnormals and zeros (d subnormal or 1/d infinite).
    rows.push(
        (0..32)
            .map(|j| f32::from_bits(j as u32 * 0x1_0001) * if j % 2 == 0 { 1.0 } else { -1.0 })
            .collect(),
    );
    // Random blocks over a wide range of magnitudes.
    for _ in 0..2000 {
        let e = rng.below(200) as i32 - 100;
        let s = 2f32.powi(e);
        rows.push(
            (0..32)
                .map(|_| {
                    let u = (rng.next64() >> 40) as f32 / (1u64 << 24) as f32;
                    (2.0 * u - 1.0) * s
                })
                .collect(),
        );
    }
    // Random bit patterns (finite, NaN and infinite values included).
    for _ in 0..500 {
        rows.push(
            (0..32)
                .map(|_| f32::from_bits(rng.next64() as u32))
                .collect(),
        );
    }
    rows
}

#[test]
fn quantizer_writes_the_reference_bytes() {
    let mut rng = Rng(0x5EED_0004);
    let variants = dispatch::quantizer_variants(DType::Q8_0);
    assert_eq!(variants[0].0, Isa::Scalar);
    let neon: Vec<_> = variants
        .iter()
        .filter(|(isa, _)| *isa == Isa::Neon)
        .collect();
    assert_eq!(neon.len(), neon_isas().len().min(1), "one NEON quantizer");
    let rows = quantizer_rows(&mut rng);
    let bytes = BlockQ8_0::DTYPE.type_size();
    let mut blocks_checked = 0;
    for (_, q) in &neon {
        // Block by block, then the whole set as one long row.
        for x in &rows {
            let mut want = vec![0u8; bytes];
            quantize_row::<BlockQ8_0>(x, &mut want).expect("one block");
            let mut got = vec![0xAAu8; bytes];
            q(x, &mut got);
            assert_eq!(got, want, "block {x:?}");
            blocks_checked += 1;
        }
        let long: Vec<f32> = rows.iter().flatten().copied().collect();
        let mut want = vec![0u8; long.len() / 32 * bytes];
        quantize_row::<BlockQ8_0>(&long, &mut want).expect("whole blocks");
        let mut got = vec![0x55u8; want.len()];
        q(&long, &mut got);
        assert!(got == want, "long row");
        // An empty row writes nothing.
        q(&[], &mut []);
    }
    println!(
        "Q8_0 quantizer: {blocks_checked} blocks byte-identical to the reference \
         ({} rows of 32)",
        rows.len()
    );
    assert!(blocks_checked >= rows.len() || neon.is_empty());
}

#[test]
fn selection_follows_cpu_and_force_scalar() {
    let isas = neon_isas();
    let best = isas.last().copied();
    for t in [DType::Q4_0, DType::Q8_0] {
        let listed: Vec<Isa> = dispatch::vec_dot_variants(t)
            .iter()
            .map(|v| v.isa)
            .collect();
        let mut want = vec![Isa::Scalar];
        want.extend(&isas);
        assert_eq!(listed, want, "{t}");
        let active = dispatch::active_variant(t).expect("block type").isa;
        let in_lanes = dispatch::active_variant_in(t, SumOrder::GgmlLanes).map(|v| v.isa);
        if forced_scalar() {
            assert_eq!(active, Isa::Scalar, "{t}: GGRS_FORCE_SCALAR");
            assert_eq!(in_lanes, None, "{t}: GGRS_FORCE_SCALAR");
        } else {
            assert_eq!(Some(active), best.or(Some(Isa::Scalar)), "{t}");
            assert_eq!(in_lanes, best, "{t}");
        }
        println!(
            "{t}: active build {active:?} (forced scalar: {})",
            forced_scalar()
        );
    }
    // No NEON kernels for the other block types.
    for t in [DType::Q4_1, DType::Q5_0, DType::Q4K, DType::Q6K] {
        let listed: Vec<Isa> = dispatch::vec_dot_variants(t)
            .iter()
            .map(|v| v.isa)
            .collect();
        assert_eq!(listed, [Isa::Scalar], "{t}");
    }
    // The quantizer: the NEON one unless forced off (compared by what it writes).
    let q = dispatch::activation_quantizer(DType::Q8_0).expect("Q8_0 quantizes");
    let x: Vec<f32> = (0..32).map(|j| j as f32 - 15.5).collect();
    let mut got = vec![0u8; 34];
    q(&x, &mut got);
    let mut want = vec![0u8; 34];
    quantize_row::<BlockQ8_0>(&x, &mut want).expect("one block");
    assert_eq!(got, want);
}
