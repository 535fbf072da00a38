//! TQ1_0 and TQ2_0 against llama.cpp's own code: `data/ternary-ggml.txt` holds what
//! llama.cpp 0c1e570's ggml (`libggml-base`, `libggml-cpu` built for AVX2) returns for seeded
//! rows — `quantize_row_tq{1,2}_0_ref` bytes, `dequantize_row_tq*` values (FNV-1a of their
//! bits), `quantize_row_q8_K` activations (FNV-1a) and the bits of
//! `ggml_vec_dot_tq*_0_q8_K` (AVX2) and `ggml_vec_dot_tq*_0_q8_K_generic` over every run of
//! whole blocks of the weight row. `data/ternary-ggml.c` is the program that wrote it (link
//! it against a llama.cpp build: `gcc -O2 ternary-ggml.c -lggml-cpu -lggml-base`). The
//! weight blocks include an all-zero block, exact halves, a scale that overflows f16, a
//! lone spike, subnormal values and ±0.49 (rounds to zero).
//!
//! Then every kernel build against the portable order bit for bit, and `mul_mat` through the
//! executor (1–9 columns, 1–2 threads, SIMD and scalar) against the x86-order dot per element.

mod common;

use common::{assert_every_form, fnv, mix, run_mul_mat, unhex, Lcg};
use ggrs_core::quants::dispatch::{self, SumOrder};
use ggrs_core::quants::{self, BlockQuant, BlockTQ1_0, BlockTQ2_0, VecDotKernel};
use ggrs_core::DType;

const NB: usize = 8;
const QK: usize = 256;

/// `weights()` of `ternary-ggml.c`: eight blocks of patterns.
fn weights() -> Vec<f32> {
    let mut r = Lcg(1);
    let mut x = vec![0f32; NB * QK];
    for b in 0..NB {
        for i in 0..QK {
            let v = r.next();
            x[b * QK + i] = match b {
                0 => v,
                1 => 0.0,
                2 if i == 7 => 2.0,
                2 => ((i % 5) as f32 - 2.0) * 0.5,
                3 => v * 1.0e5,
                4 if i == 200 => -100.0,
                4 => v * 1.0e-3,
                5 => v * 1.0e-39,
                6 if i % 3 == 0 => 0.0,
                6 => v * 3.0,
                _ if i == 255 => -1.0,
                _ => (if v > 0.0 { 1.0 } else { -1.0 }) * 0.49,
            };
        }
    }
    x
}

/// `acts(c)` of `ternary-ggml.c`.
fn acts(c: u64) -> Vec<f32> {
    let mut r = Lcg(1000 + c);
    (0..NB * QK)
        .map(|i| {
            let v = r.next();
            if c == 2 {
                if i % 16 == 0 {
                    50.0
                } else {
                    v
                }
            } else {
                v * (c + 1) as f32
            }
        })
        .collect()
}

fn data() -> Vec<Vec<String>> {
    include_str!("data/ternary-ggml.txt")
        .lines()
        .map(|l| l.split(' ').map(str::to_string).collect())
        .collect()
}

fn dtype(name: &str) -> DType {
    DType::from_name(name).expect("tq1_0 or tq2_0")
}

fn quantize(t: DType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; t.row_size(x.len())];
    quants::quantize_row_dyn(t, x, &mut q).expect("whole blocks");
    q
}

fn x86_dot(t: DType) -> VecDotKernel {
    match t {
        DType::TQ1_0 => BlockTQ1_0::GGML_X86_DOT,
        _ => BlockTQ2_0::GGML_X86_DOT,
    }
    .expect("the ternary types declare ggml's x86 order")
}

#[test]
fn ids_names_sizes() {
    assert_eq!(DType::from_id(34), Some(DType::TQ1_0));
    assert_eq!(DType::from_id(35), Some(DType::TQ2_0));
    assert_eq!(DType::from_name("TQ2_0"), Some(DType::TQ2_0));
    assert_eq!(
        (DType::TQ1_0.block_size(), DType::TQ1_0.type_size()),
        (256, 54)
    );
    assert_eq!(
        (DType::TQ2_0.block_size(), DType::TQ2_0.type_size()),
        (256, 66)
    );
    assert_eq!(quants::vec_dot_type(DType::TQ1_0), Some(DType::Q8K));
    assert_eq!(
        dispatch::ggml_sum_order(DType::TQ2_0, [256, 7, 1, 1]),
        SumOrder::GgmlLanes
    );
    // 896-wide rows (Qwen2.5-0.5B) are not whole blocks: an error.
    let mut out = vec![0u8; 66 * 3];
    assert!(quants::quantize_row_dyn(DType::TQ2_0, &[0.5; 896], &mut out).is_err());
}

/// The quantizers write llama.cpp's bytes; dequantization gives its values.
#[test]
fn quantize_and_dequantize_as_llama_cpp() {
    let x = weights();
    let mut seen = 0;
    for l in data() {
        match l[0].as_str() {
            "tq1_0" | "tq2_0" => {
                let t = dtype(&l[0]);
                assert_eq!(quantize(t, &x), unhex(&l[1]), "{t} bytes");
                seen += 1;
            }
            "dequant" => {
                let t = dtype(&l[1]);
                let q = quantize(t, &x);
                let mut y = vec![0f32; NB * QK];
                quants::dequantize_row_dyn(t, &q, &mut y).expect("whole blocks");
                let h = fnv(y.iter().flat_map(|v| v.to_bits().to_le_bytes()));
                assert_eq!(format!("{h:016x}"), l[2], "{t} dequantized");
                seen += 1;
            }
            "q8_K" => {
                let y = acts(l[1].parse().expect("column"));
                // The reference quantizer and the one `mul_mat` runs both write ggml's
                // x86 `quantize_row_q8_K` bytes.
                let q = dispatch::activation_quantizer(DType::Q8K).expect("Q8_K converts");
                let mut fast = vec![0u8; DType::Q8K.row_size(y.len())];
                q(&y, &mut fast);
                for bytes in [quantize(DType::Q8K, &y), fast] {
                    assert_eq!(format!("{:016x}", fnv(bytes)), l[2], "Q8_K column {}", l[1]);
                }
                seen += 1;
            }
            _ => {}
        }
    }
    assert_eq!(seen, 7);
}

/// The generic scalar dot product has `ggml_vec_dot_*_generic`'s bits; the x86-order dot
/// and every SIMD build keeping it have the AVX2 kernel's, over every run of whole blocks.
#[test]
fn dot_products_as_llama_cpp() {
    let x = weights();
    let cols: Vec<Vec<u8>> = (0..3).map(|c| quantize(DType::Q8K, &acts(c))).collect();
    let mut n = 0;
    for l in data().iter().filter(|l| l[0] == "dot") {
        let t = dtype(&l[1]);
        let [c, o, k]: [usize; 3] = std::array::from_fn(|i| l[2 + i].parse().expect("index"));
        let (avx2, generic) = (
            u32::from_str_radix(&l[5], 16).expect("bits"),
            u32::from_str_radix(&l[6], 16).expect("bits"),
        );
        let w = quantize(t, &x);
        let row = &w[o * t.type_size()..(o + k) * t.type_size()];
        let y = &cols[c][..k * DType::Q8K.type_size()];
        let what = format!("{t} column {c} blocks {o}..{}", o + k);
        let scalar = dispatch::vec_dot_scalar_kernel(t).expect("block type");
        assert_eq!(scalar(k * QK, row, y).to_bits(), generic, "{what} generic");
        assert_eq!(
            x86_dot(t)(k * QK, row, y).to_bits(),
            avx2,
            "{what} x86 order"
        );
        for v in dispatch::vec_dot_variants_in(t, SumOrder::GgmlLanes) {
            assert_eq!(
                (v.dot)(k * QK, row, y).to_bits(),
                avx2,
                "{what} {:?}",
                v.isa
            );
            let r4 = (v.rows4)(k * QK, [row; 4], y);
            let d4 = (v.dot4)(k * QK, row, [y; 4]);
            let tile = (v.tile)(k * QK, [row; 4], [y; 4]);
            assert!(r4
                .iter()
                .chain(&d4)
                .chain(tile.iter().flatten())
                .all(|r| r.to_bits() == avx2));
        }
        n += 1;
    }
    assert_eq!(n, 2 * 3 * NB * (NB + 1) / 2);
    #[cfg(target_arch = "x86_64")]
    if ggrs_core::cpu::features().runs(dispatch::Isa::Avx2) {
        for t in [DType::TQ1_0, DType::TQ2_0] {
            assert!(!dispatch::vec_dot_variants_in(t, SumOrder::GgmlLanes).is_empty());
        }
    }
}

/// Any bytes at all (codes 3, trits of bytes no quantizer writes, Q8_K sums that are not the
/// codes' sums, −128 activations) with finite scales: every build has the portable order's
/// bits in every tile form.
#[test]
fn every_build_is_the_portable_order_on_any_bytes() {
    let mut s = 5u64;
    for t in [DType::TQ1_0, DType::TQ2_0] {
        for nb in [1usize, 2, 3, 5] {
            let n = nb * QK;
            let mut w: Vec<u8> = (0..4 * t.row_size(n)).map(|_| mix(&mut s) as u8).collect();
            for blk in w.chunks_exact_mut(t.type_size()) {
                let d = half::f16::from_f32((mix(&mut s) % 2000) as f32 / 1000.0 - 1.0);
                let at = t.type_size() - 2;
                blk[at..].copy_from_slice(&d.to_le_bytes());
            }
            let ys = DType::Q8K.row_size(n);
            let mut y: Vec<u8> = (0..4 * ys).map(|_| mix(&mut s) as u8).collect();
            for (i, blk) in y.chunks_exact_mut(DType::Q8K.type_size()).enumerate() {
                blk[..4].copy_from_slice(&(0.01 * (i as f32 + 1.0)).to_le_bytes());
                if i % 3 == 0 {
                    blk[4..260].fill(0x80);
                }
            }
            let rs = t.row_size(n);
            let wr: [&[u8]; 4] = std::array::from_fn(|r| &w[r * rs..(r + 1) * rs]);
            let yr: [&[u8]; 4] = std::array::from_fn(|c| &y[c * ys..(c + 1) * ys]);
            let want: [[u32; 4]; 4] = std::array::from_fn(|r| {
                std::array::from_fn(|c| x86_dot(t)(n, wr[r], yr[c]).to_bits())
            });
            for v in dispatch::vec_dot_variants_in(t, SumOrder::GgmlLanes) {
                let what = format!("{t} {:?} nb={nb}", v.isa);
                assert_every_form(&v, n, wr, yr, want, &what);
            }
        }
    }
}

/// Through the executor every output element is the x86-order dot of its weight row and its
/// Q8_K column, with SIMD and with `force_scalar` (the only test here that flips it), for
/// 1–9 columns, 1–2 threads, short and tall weights.
#[test]
fn mul_mat_keeps_ggml_x86_order() {
    let mut r = Lcg(99);
    for t in [DType::TQ1_0, DType::TQ2_0] {
        for (k, n) in [(QK, 1), (2 * QK, 7), (3 * QK, 37)] {
            let w = quantize(t, &(0..k * n).map(|_| r.next()).collect::<Vec<_>>());
            let rs = t.row_size(k);
            for m in 1..=9 {
                let x: Vec<f32> = (0..k * m).map(|_| r.next() * 4.0).collect();
                let cols: Vec<Vec<u8>> =
                    x.chunks_exact(k).map(|c| quantize(DType::Q8K, c)).collect();
                for forced in [false, true] {
                    dispatch::force_scalar(forced);
                    for threads in [1, 2] {
                        let got = run_mul_mat(t, &w, &x, k, n, m, threads);
                        for j in 0..m {
                            for i in 0..n {
                                let want = x86_dot(t)(k, &w[i * rs..(i + 1) * rs], &cols[j]);
                                assert_eq!(
                                    got[j * n + i].to_bits(),
                                    want.to_bits(),
                                    "{t} k={k} n={n} m={m} threads={threads} scalar={forced} [{i}, {j}]"
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
