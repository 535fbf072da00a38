//! The SIMD builds of ggml's tiled k-quant order (`SumOrder::GgmlTiled`: Q2_K, Q3_K, Q4_K,
//! Q5_K, Q6_K, IQ4_XS against eight activation columns or more) give, element by element,
//! the bits of an independent oracle written from the block formats: per super-block the
//! exact integers `s1 = Σ_j sc_j·Σ code·y`, `s2 = Σ_j min_j·bsum_j`, then `r = d·f32(s1)`,
//! `r = fma(−dmin, f32(s2), r)` (types with minimums), `acc = fma(r, d_y, acc)`. Checked for
//! the dispatch's tile forms directly and for `mul_mat` through the executor (the panel
//! kernels), on random and extreme blocks, 1 and 2 threads.

mod common;

use common::run_mul_mat;

use ggrs_core::quants::dispatch::{self, Isa, SumOrder};
use ggrs_core::quants::{self, QK_K};
use ggrs_core::DType;
use half::f16;

const TYPES: [DType; 6] = [
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::IQ4XS,
];

const Q8K: usize = 292;

/// The IQ4_NL levels.
const LEVELS: [i32; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 16
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn f16_at(p: &[u8], off: usize) -> f32 {
    f16::from_le_bytes([p[off], p[off + 1]]).to_f32()
}

/// The byte offsets of the f16 fields of a block of `t`: `d`, then `dmin` if any.
fn halves(t: DType) -> &'static [usize] {
    match t {
        DType::Q2K => &[80, 82],
        DType::Q3K => &[108],
        DType::Q4K | DType::Q5K => &[0, 2],
        DType::Q6K => &[208],
        DType::IQ4XS => &[0],
        _ => unreachable!("{t}"),
    }
}

/// Q4_K / Q5_K scale and minimum of 32-value sub-block `j` from the 12 packed bytes.
fn scale_min_k4(q: &[u8], j: usize) -> (i32, i32) {
    if j < 4 {
        ((q[j] & 63) as i32, (q[j + 4] & 63) as i32)
    } else {
        (
            ((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4)) as i32,
            ((q[j + 4] >> 4) | ((q[j] >> 6) << 4)) as i32,
        )
    }
}

/// One weight block of `t` read plainly: the signed code of each value, the scale and the
/// minimum (0 without) of each 16 values, `d`, `dmin`.
fn decode(t: DType, x: &[u8]) -> ([i32; QK_K], [i32; 16], [i32; 16], f32, f32) {
    let (mut code, mut sc, mut mn) = ([0i32; QK_K], [0i32; 16], [0i32; 16]);
    let (d, dmin) = match t {
        DType::Q2K => {
            for (v, c) in code.iter_mut().enumerate() {
                let byte = x[16 + 32 * (v / 128) + v % 32];
                *c = ((byte >> (2 * ((v % 128) / 32))) & 3) as i32;
            }
            for j in 0..16 {
                sc[j] = (x[j] & 15) as i32;
                mn[j] = (x[j] >> 4) as i32;
            }
            (f16_at(x, 80), f16_at(x, 82))
        }
        DType::Q3K => {
            for (v, c) in code.iter_mut().enumerate() {
                let (half, s, l) = (v / 128, (v % 128) / 32, v % 32);
                let low = ((x[32 + 32 * half + l] >> (2 * s)) & 3) as i32;
                let set = x[l] & (1 << (4 * half + s)) != 0;
                *c = low - if set { 0 } else { 4 };
            }
            let s = &x[96..108];
            for (j, v) in sc.iter_mut().enumerate() {
                let low = if j < 8 { s[j] & 15 } else { s[j - 8] >> 4 };
                let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
                *v = (low | (high << 4)) as i32 - 32;
            }
            (f16_at(x, 108), 0.0)
        }
        DType::Q4K | DType::Q5K => {
            let q5 = t == DType::Q5K;
            let qs = if q5 { 48 } else { 16 };
            for (v, out) in code.iter_mut().enumerate() {
                let (c, l) = (v / 64, v % 32);
                let byte = x[qs + 32 * c + l];
                let high_nibble = v % 64 >= 32;
                let mut q = if high_nibble { byte >> 4 } else { byte & 15 } as i32;
                if q5 && x[16 + l] & (1 << (2 * c + high_nibble as usize)) != 0 {
                    q += 16;
                }
                *out = q;
            }
            for j in 0..16 {
                (sc[j], mn[j]) = scale_min_k4(&x[4..16], j / 2);
            }
            (f16_at(x, 0), f16_at(x, 2))
        }
        DType::Q6K => {
            for (v, c) in code.iter_mut().enumerate() {
                let (h, l, g) = (v / 128, v % 32, (v % 128) / 32);
                let ql = x[64 * h + l + if g % 2 == 1 { 32 } else { 0 }];
                let low = if g < 2 { ql & 15 } else { ql >> 4 };
                let high = (x[128 + 32 * h + l] >> (2 * g)) & 3;
                *c = (low | (high << 4)) as i32 - 32;
            }
            for (j, v) in sc.iter_mut().enumerate() {
                *v = x[192 + j] as i8 as i32;
            }
            (f16_at(x, 208), 0.0)
        }
        DType::IQ4XS => {
            let sh = u16::from_le_bytes([x[2], x[3]]) as i32;
            for (v, c) in code.iter_mut().enumerate() {
                let (ib, j) = (v / 32, v % 32);
                let byte = x[8 + 16 * ib + j % 16];
                *c = LEVELS[if j < 16 { byte & 15 } else { byte >> 4 } as usize];
            }
            for (j, v) in sc.iter_mut().enumerate() {
                let ib = j / 2;
                let ls =
                    ((x[4 + ib / 2] >> (4 * (ib % 2))) & 15) as i32 | (((sh >> (2 * ib)) & 3) << 4);
                *v = ls - 32;
            }
            (f16_at(x, 0), 0.0)
        }
        _ => unreachable!("{t}"),
    };
    (code, sc, mn, d, dmin)
}

/// The oracle: row `a` of `t` · Q8_K row `b`, `k` values, in ggml's tiled order.
fn oracle(t: DType, k: usize, a: &[u8], b: &[u8]) -> f32 {
    let ts = t.type_size();
    let has_min = matches!(t, DType::Q2K | DType::Q4K | DType::Q5K);
    let mut acc = 0f32;
    for i in 0..k / QK_K {
        let (x, y) = (&a[i * ts..(i + 1) * ts], &b[i * Q8K..(i + 1) * Q8K]);
        let (code, sc, mn, d, dmin) = decode(t, x);
        let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let (mut s1, mut s2) = (0i32, 0i32);
        for v in 0..QK_K {
            s1 += sc[v / 16] * code[v] * y[4 + v] as i8 as i32;
        }
        for j in 0..16 {
            s2 += mn[j] * i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]) as i32;
        }
        let mut r = d * s1 as f32;
        if has_min {
            r = (-dmin).mul_add(s2 as f32, r);
        }
        acc = r.mul_add(dy, acc);
    }
    acc
}

/// `nb` blocks of `t`: random bytes, or (`pattern` 1, 2) all 0x00 or all 0xFF (codes and
/// scales at the ends of their ranges), with finite f16 scales of either sign.
fn weights(t: DType, nb: usize, pattern: u64, r: &mut Rng) -> Vec<u8> {
    let ts = t.type_size();
    let mut out = vec![0u8; nb * ts];
    for blk in out.chunks_exact_mut(ts) {
        for b in blk.iter_mut() {
            *b = match pattern {
                1 => 0x00,
                2 => 0xFF,
                _ => r.next() as u8,
            };
        }
        for &o in halves(t) {
            let e = r.below(20) as i32 - 14;
            let v = (1.0 + r.below(1024) as f32 / 1024.0) * 2f32.powi(e);
            let v = if r.below(2) == 0 { v } else { -v };
            blk[o..o + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
        }
    }
    out
}

/// `nb` valid Q8_K blocks (sums of the codes in `bsums`): random codes, or (`pattern` 1, 2)
/// all −128 or all 127.
fn q8k(nb: usize, pattern: u64, r: &mut Rng) -> Vec<u8> {
    let mut out = vec![0u8; nb * Q8K];
    for blk in out.chunks_exact_mut(Q8K) {
        let e = r.below(30) as i32 - 20;
        let d = (1.0 + r.below(1000) as f32 / 1000.0) * 2f32.powi(e);
        let d = if r.below(2) == 0 { d } else { -d };
        blk[..4].copy_from_slice(&d.to_le_bytes());
        for q in &mut blk[4..260] {
            *q = match pattern {
                1 => 0x80,
                2 => 0x7F,
                _ => r.next() as u8,
            };
        }
        for j in 0..16 {
            let s: i32 = (0..16).map(|l| blk[4 + 16 * j + l] as i8 as i32).sum();
            blk[260 + 2 * j..262 + 2 * j].copy_from_slice(&(s as i16).to_le_bytes());
        }
    }
    out
}

fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        has!("avx2") && has!("fma") && has!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Every SIMD build keeping the tiled order, in all four forms, equals the oracle bit for
/// bit: random blocks and blocks with every code, scale and activation at an end of its
/// range (−128 activations included), 1 to 9 super-blocks.
#[test]
fn tiled_builds_equal_the_oracle() {
    let mut r = Rng(2024);
    for t in TYPES {
        let builds = dispatch::vec_dot_variants_in(t, SumOrder::GgmlTiled);
        if avx2() {
            assert!(
                builds.iter().any(|v| v.isa == Isa::Avx2),
                "{t}: no AVX2 tiled build"
            );
        }
        for nb in [1usize, 2, 3, 5, 9] {
            let k = nb * QK_K;
            for rep in 0..5u64 {
                let w: Vec<Vec<u8>> = (0..4)
                    .map(|i| weights(t, nb, if rep < 2 { 0 } else { (i + rep) % 3 }, &mut r))
                    .collect();
                let y: Vec<Vec<u8>> = (0..4)
                    .map(|i| q8k(nb, if rep < 2 { 0 } else { (2 * i + rep) % 3 }, &mut r))
                    .collect();
                let wr: [&[u8]; 4] = std::array::from_fn(|i| &w[i][..]);
                let yr: [&[u8]; 4] = std::array::from_fn(|i| &y[i][..]);
                let want: Vec<Vec<u32>> = (0..4)
                    .map(|i| {
                        (0..4)
                            .map(|j| oracle(t, k, wr[i], yr[j]).to_bits())
                            .collect()
                    })
                    .collect();
                for v in &builds {
                    let tile = (v.tile)(k, wr, yr);
                    for i in 0..4 {
                        // Row i against the four columns; the four rows against column i.
                        let four = (v.dot4)(k, wr[i], yr);
                        let rows = (v.rows4)(k, wr, yr[i]);
                        for j in 0..4 {
                            let at = format!("{t} {:?} nb={nb} rep={rep} ({i}, {j})", v.isa);
                            assert_eq!(tile[i][j].to_bits(), want[i][j], "tile {at}");
                            assert_eq!(four[j].to_bits(), want[i][j], "dot4 {at}");
                            assert_eq!(rows[j].to_bits(), want[j][i], "rows4 {at}");
                            let one = (v.dot)(k, wr[i], yr[j]).to_bits();
                            assert_eq!(one, want[i][j], "dot {at}");
                        }
                    }
                }
            }
        }
    }
}

/// Through the executor, prompts (8 columns or more) of every tiled type give the oracle's
/// bits for every element against the quantized columns, on 1 and 2 threads, for column
/// counts that fill, split and leave partial panels, and row counts on both sides of a
/// multiple of 8 (Q4_K and Q2_K with 40 rows are repacked by llama.cpp, hence not tiled:
/// skipped), with the SIMD kernels on and off (`force_scalar`: the portable `dot_tiled`).
#[test]
fn mul_mat_prompts_equal_the_oracle() {
    let mut r = Rng(99);
    for t in TYPES {
        for (n, nb) in [(37usize, 3usize), (40, 2)] {
            let k = nb * QK_K;
            let w: Vec<u8> = (0..n)
                .flat_map(|i| weights(t, nb, [0, 0, 1, 2][i % 4], &mut r))
                .collect();
            let rs = t.row_size(k);
            for m in [8usize, 13, 16, 17, 40] {
                if dispatch::ggml_sum_order_cols(t, [k, n, 1, 1], m) != SumOrder::GgmlTiled {
                    continue;
                }
                let x: Vec<f32> = (0..k * m)
                    .map(|_| {
                        (r.below(20001) as f32 / 1000.0 - 10.0)
                            * if r.below(7) == 0 { 50.0 } else { 1.0 }
                    })
                    .collect();
                let cols: Vec<Vec<u8>> = x
                    .chunks_exact(k)
                    .map(|c| {
                        let mut q = vec![0u8; DType::Q8K.row_size(k)];
                        quants::quantize_row_dyn(DType::Q8K, c, &mut q).expect("whole blocks");
                        q
                    })
                    .collect();
                for forced in [false, true] {
                    dispatch::force_scalar(forced);
                    for threads in [1, 2] {
                        let got = run_mul_mat(t, &w, &x, k, n, m, threads);
                        for j in 0..m {
                            for i in 0..n {
                                let want = oracle(t, k, &w[i * rs..(i + 1) * rs], &cols[j]);
                                assert_eq!(
                                    got[j * n + i].to_bits(),
                                    want.to_bits(),
                                    "{t} n={n} m={m} threads={threads} forced={forced} ({i}, {j}): {} vs {want}",
                                    got[j * n + i]
                                );
                            }
                        }
                    }
                }
                dispatch::force_scalar(false);
            }
        }
    }
}
