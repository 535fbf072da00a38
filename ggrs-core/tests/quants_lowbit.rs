//! MXFP4, NVFP4, Q1_0 and Q2_0 against llama.cpp's own code: `data/lowbit-ggml.txt` holds
//! what llama.cpp 0c1e570's ggml (`libggml-base`, `libggml-cpu` built for AVX2) returns for
//! seeded rows — `quantize_row_*_ref` bytes, `dequantize_row_*` values (FNV-1a of their
//! bits), `quantize_row_q8_0` activations (its x86 build), the bits of
//! `ggml_vec_dot_*_q8_0` (AVX2) and `ggml_vec_dot_*_q8_0_generic` over runs of whole blocks,
//! and the repacked `ggml_gemv_mxfp4_8x8_q8_0`. `data/lowbit-ggml.c` is the program that
//! wrote it. The weights include an all-zero segment, exact halves, large and subnormal
//! values, a lone spike and maxima just below a power of two (where `log2f` rounds up).
//!
//! Then every kernel build against the portable order bit for bit on any bytes, and
//! `mul_mat` through the executor (1–9 columns, 1–2 threads, SIMD and scalar) against the
//! portable x86-order dot per element.

mod common;

use common::{assert_every_form, encode, fnv, mix, run_mul_mat, unhex, Lcg};
use ggrs_core::quants::dispatch::{self, SumOrder};
use ggrs_core::quants::{
    self, BlockMXFP4, BlockNVFP4, BlockQ1_0, BlockQ2_0, BlockQuant, VecDotKernel,
};
use ggrs_core::DType;

const N: usize = 1024;
const TYPES: [DType; 4] = [DType::MXFP4, DType::NVFP4, DType::Q1_0, DType::Q2_0];

/// `weights()` of `lowbit-ggml.c`: eight segments of 128 values.
fn weights() -> Vec<f32> {
    let mut r = Lcg(1);
    (0..N)
        .map(|i| {
            let v = r.next();
            let j = i % 128;
            match i / 128 {
                0 => v,
                1 => 0.0,
                2 if j == 7 => 2.0,
                2 => ((j % 5) as f32 - 2.0) * 0.5,
                3 => v * 1.0e5,
                4 if j == 72 => -100.0,
                4 => v * 1.0e-3,
                5 => v * 1.0e-39,
                6 if j % 3 == 0 => 0.0,
                6 => v * 3.0,
                _ => match j {
                    0 => f32::from_bits(0x40FF_FFFF),
                    32 => 4.0,
                    64 => f32::from_bits(0x407F_FFFF),
                    _ => v * 0.9,
                },
            }
        })
        .collect()
}

fn data() -> Vec<Vec<String>> {
    include_str!("data/lowbit-ggml.txt")
        .lines()
        .map(|l| l.split(' ').map(str::to_string).collect())
        .collect()
}

/// ggml's x86 `quantize_row_q8_0` activations of column `c`, as it wrote them.
fn activations(c: usize) -> Vec<u8> {
    let lines = data();
    let l = lines
        .iter()
        .find(|l| l[0] == "q8_0" && l[1] == c.to_string())
        .expect("three activation columns");
    unhex(&l[2])
}

fn x86_dot(t: DType) -> VecDotKernel {
    match t {
        DType::MXFP4 => BlockMXFP4::GGML_X86_DOT,
        DType::NVFP4 => BlockNVFP4::GGML_X86_DOT,
        DType::Q1_0 => BlockQ1_0::GGML_X86_DOT,
        _ => BlockQ2_0::GGML_X86_DOT,
    }
    .expect("the low-bit types declare ggml's x86 order")
}

fn repacked_dot() -> VecDotKernel {
    BlockMXFP4::GGML_X86_REPACKED_DOT.expect("MXFP4 declares the repacked order")
}

/// Activation bytes for `n` weight values (Q8_0 blocks of 32).
fn q8_bytes(n: usize) -> usize {
    DType::Q8_0.row_size(n)
}

#[test]
fn ids_names_sizes_and_orders() {
    for (t, id, name, block, bytes) in [
        (DType::MXFP4, 39, "mxfp4", 32, 17),
        (DType::NVFP4, 40, "nvfp4", 64, 36),
        (DType::Q1_0, 41, "q1_0", 128, 18),
        (DType::Q2_0, 42, "q2_0", 64, 18),
    ] {
        assert_eq!(DType::from_id(id), Some(t));
        assert_eq!(DType::from_name(&name.to_uppercase()), Some(t));
        assert_eq!((t.block_size(), t.type_size()), (block, bytes), "{t}");
        assert_eq!(quants::vec_dot_type(t), Some(DType::Q8_0));
        assert_eq!(
            ggrs_core::dtype::describe_type_id(id),
            format!("type {name} (ggml type {id})")
        );
    }
    // llama.cpp repacks 2-D MXFP4 weights whose row count is a multiple of 8.
    assert_eq!(
        dispatch::ggml_sum_order(DType::MXFP4, [896, 128, 1, 1]),
        SumOrder::GgmlBlockChain
    );
    assert_eq!(
        dispatch::ggml_sum_order(DType::MXFP4, [896, 7, 1, 1]),
        SumOrder::GgmlLanes
    );
    for t in [DType::NVFP4, DType::Q1_0, DType::Q2_0] {
        assert_eq!(
            dispatch::ggml_sum_order(t, [896, 128, 1, 1]),
            SumOrder::GgmlLanes
        );
    }
}

/// The quantizers write llama.cpp's bytes; dequantization gives its values.
#[test]
fn quantize_and_dequantize_as_llama_cpp() {
    let x = weights();
    let mut seen = 0;
    for l in data() {
        let Some(t) = DType::from_name(&l[0]).filter(|t| TYPES.contains(t)) else {
            if l[0] == "dequant" {
                let t = DType::from_name(&l[1]).expect("type");
                let q = encode(t, &x);
                let mut y = vec![0f32; N];
                quants::dequantize_row_dyn(t, &q, &mut y).expect("whole blocks");
                let h = fnv(y.iter().flat_map(|v| v.to_bits().to_le_bytes()));
                assert_eq!(format!("{h:016x}"), l[2], "{t} dequantized");
                seen += 1;
            }
            continue;
        };
        let got = encode(t, &x);
        let want = unhex(&l[1]);
        for (b, (g, w)) in got
            .chunks(t.type_size())
            .zip(want.chunks(t.type_size()))
            .enumerate()
        {
            assert_eq!(g, w, "{t} block {b}");
        }
        seen += 1;
    }
    assert_eq!(seen, 8);
}

/// The generic scalar dot product has `ggml_vec_dot_*_generic`'s bits; the x86-order dot
/// and every SIMD build keeping it have the AVX2 kernel's; MXFP4's repacked order has the
/// bits of llama.cpp's `mxfp4_8x8` GEMV.
#[test]
fn dot_products_as_llama_cpp() {
    let x = weights();
    let cols: Vec<Vec<u8>> = (0..3).map(activations).collect();
    let mut n = 0;
    for l in data().iter().filter(|l| l[0] == "dot") {
        let t = DType::from_name(&l[1]).expect("type");
        let [c, o, k]: [usize; 3] = std::array::from_fn(|i| l[2 + i].parse().expect("index"));
        let [avx2, generic] =
            std::array::from_fn(|i| u32::from_str_radix(&l[5 + i], 16).expect("bits"));
        let w = encode(t, &x);
        let vals = k * t.block_size();
        let row = &w[o * t.type_size()..(o + k) * t.type_size()];
        let y = &cols[c][..q8_bytes(vals)];
        let what = format!("{t} column {c} blocks {o}..{}", o + k);
        let scalar = dispatch::vec_dot_scalar_kernel(t).expect("block type");
        assert_eq!(scalar(vals, row, y).to_bits(), generic, "{what} generic");
        assert_eq!(x86_dot(t)(vals, row, y).to_bits(), avx2, "{what} x86 order");
        for v in dispatch::vec_dot_variants_in(t, SumOrder::GgmlLanes) {
            let what = format!("{what} {:?}", v.isa);
            assert_eq!((v.dot)(vals, row, y).to_bits(), avx2, "{what}");
            let r4 = (v.rows4)(vals, [row; 4], y);
            let d4 = (v.dot4)(vals, row, [y; 4]);
            let tile = (v.tile)(vals, [row; 4], [y; 4]);
            assert!(
                r4.iter()
                    .chain(&d4)
                    .chain(tile.iter().flatten())
                    .all(|r| r.to_bits() == avx2),
                "{what} tiles"
            );
        }
        n += 1;
    }
    assert!(n > 300, "{n} dot lines");

    let w = encode(DType::MXFP4, &x);
    let mut gemv = 0;
    for l in data().iter().filter(|l| l[0] == "gemv") {
        let c: usize = l[2].parse().expect("column");
        let y = &cols[c][..q8_bytes(256)];
        let builds = dispatch::vec_dot_variants_in(DType::MXFP4, SumOrder::GgmlBlockChain);
        for r in 0..8 {
            let want = u32::from_str_radix(&l[3 + r], 16).expect("bits");
            let row = &w[3 * r * 17..(3 * r + 8) * 17];
            assert_eq!(
                repacked_dot()(256, row, y).to_bits(),
                want,
                "gemv row {r} col {c}"
            );
            for v in &builds {
                assert_eq!((v.dot)(256, row, y).to_bits(), want, "{:?} row {r}", v.isa);
                assert_eq!((v.tile)(256, [row; 4], [y; 4])[3][2].to_bits(), want);
            }
        }
        gemv += 1;
    }
    assert_eq!(gemv, 3);
    #[cfg(target_arch = "x86_64")]
    if ggrs_core::cpu::features().runs(dispatch::Isa::Avx2) {
        for t in TYPES {
            assert!(!dispatch::vec_dot_variants_in(t, SumOrder::GgmlLanes).is_empty());
        }
        assert!(!dispatch::vec_dot_variants_in(DType::MXFP4, SumOrder::GgmlBlockChain).is_empty());
    }
}

/// Random weight bytes of type `t` with finite, moderate scales.
fn random_weights(t: DType, n: usize, s: &mut u64) -> Vec<u8> {
    let mut w: Vec<u8> = (0..t.row_size(n)).map(|_| mix(s) as u8).collect();
    for blk in w.chunks_exact_mut(t.type_size()) {
        match t {
            DType::MXFP4 => blk[0] = 100 + (mix(s) % 50) as u8,
            DType::NVFP4 => {}
            _ => {
                let d = half::f16::from_f32((mix(s) % 2000) as f32 / 1000.0 - 1.0);
                blk[..2].copy_from_slice(&d.to_le_bytes());
            }
        }
    }
    w
}

/// Any bytes at all (every level, −128 activations, unused UE4M3 codes) with finite scales:
/// every build has the portable order's bits in every tile form.
#[test]
fn every_build_is_the_portable_order_on_any_bytes() {
    let mut s = 5u64;
    for t in TYPES {
        let mut orders = vec![(SumOrder::GgmlLanes, x86_dot(t))];
        if t == DType::MXFP4 {
            orders.push((SumOrder::GgmlBlockChain, repacked_dot()));
        }
        // (9 and 17: MXFP4's AVX-512 chain sums eight blocks at a time, then the rest.)
        for nb in [1usize, 2, 3, 5, 9, 17] {
            let n = nb * t.block_size();
            let (rs, ys) = (t.row_size(n), q8_bytes(n));
            let w: Vec<u8> = (0..4).flat_map(|_| random_weights(t, n, &mut s)).collect();
            let mut y: Vec<u8> = (0..4 * ys).map(|_| mix(&mut s) as u8).collect();
            for (i, blk) in y.chunks_exact_mut(34).enumerate() {
                let d = half::f16::from_f32(0.01 * (i as f32 + 1.0));
                blk[..2].copy_from_slice(&d.to_le_bytes());
                if i % 3 == 0 {
                    blk[2..].fill(0x80);
                }
            }
            let wr: [&[u8]; 4] = std::array::from_fn(|r| &w[r * rs..(r + 1) * rs]);
            let yr: [&[u8]; 4] = std::array::from_fn(|c| &y[c * ys..(c + 1) * ys]);
            for (order, dot) in &orders {
                let want: [[u32; 4]; 4] = std::array::from_fn(|r| {
                    std::array::from_fn(|c| dot(n, wr[r], yr[c]).to_bits())
                });
                let builds = dispatch::vec_dot_variants_in(t, *order);
                for v in builds {
                    let what = format!("{t} {order:?} {:?} nb={nb}", v.isa);
                    assert_every_form(&v, n, wr, yr, want, &what);
                }
            }
        }
    }
}

/// Activations whose Q8_0 bytes are the same from the reference quantizer and from ggml's
/// x86 one (which `mul_mat` runs): integers up to 127 in magnitude times 0.25, each block
/// of 32 led by 127 (`d = 0.25`, `1/d = 127/max = 4`, every product exact).
fn exact_activations(r: &mut Lcg, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| {
            if i % 32 == 0 {
                127.0 * 0.25
            } else {
                (r.next() * 127.0).round() * 0.25
            }
        })
        .collect()
}

/// Through the executor every output element is the x86-order dot of its weight row and its
/// Q8_0 column (MXFP4 weights with a multiple of 8 rows: the repacked order), with SIMD and
/// with `force_scalar` (the only test here that flips it), for 1–9 columns, 1–2 threads.
#[test]
fn mul_mat_keeps_ggml_x86_orders() {
    let mut r = Lcg(99);
    for t in TYPES {
        for (blocks, n) in [(1, 5), (3, 8), (2, 16)] {
            let k = blocks * t.block_size().max(64);
            let w = encode(t, &(0..k * n).map(|_| r.next()).collect::<Vec<_>>());
            let rs = t.row_size(k);
            let dot = if t == DType::MXFP4 && n % 8 == 0 {
                repacked_dot()
            } else {
                x86_dot(t)
            };
            for m in 1..=9 {
                let x = exact_activations(&mut r, k * m);
                let cols: Vec<Vec<u8>> =
                    x.chunks_exact(k).map(|c| encode(DType::Q8_0, c)).collect();
                for forced in [false, true] {
                    dispatch::force_scalar(forced);
                    for threads in [1, 2] {
                        let got = run_mul_mat(t, &w, &x, k, n, m, threads);
                        for j in 0..m {
                            for i in 0..n {
                                let want = dot(k, &w[i * rs..(i + 1) * rs], &cols[j]);
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
