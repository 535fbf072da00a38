//! The grid i-quants IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S (read and
//! multiplied, not written): their table rows; dequantized values and the bits of both dot
//! orders (AVX2 and generic) against llama.cpp's own ggml on seeded random blocks
//! (`data/iquants-ggml.{c,txt}`); every kernel build against the portable
//! x86 order bit for bit on any bytes (short rows of 1–5 blocks, every tile form), and
//! `mul_mat` through the executor (1–9 columns, 1–2 threads, SIMD and scalar) against the
//! portable x86-order dot per element below eight columns and an oracle of ggml's tiled
//! matmul from eight on (also through the AVX-512 VNNI panels: 16-row panels, 8–40
//! columns). The orders themselves are checked against llama.cpp
//! on real files by `ggrs-llama/tests/qwen05b_lowbit.rs`.

mod common;

use common::{assert_every_form, fnv, mix, run_mul_mat, Lcg};
use ggrs_core::quants::dispatch::{self, SumOrder};
use ggrs_core::quants::{
    self, BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS,
    BlockQuant, VecDotKernel,
};
use ggrs_core::DType;

const QK: usize = 256;

/// Each type: ggml id, name, bytes per block.
const TYPES: [(DType, u32, &str, usize); 7] = [
    (DType::IQ2XXS, 16, "iq2_xxs", 66),
    (DType::IQ2XS, 17, "iq2_xs", 74),
    (DType::IQ3XXS, 18, "iq3_xxs", 98),
    (DType::IQ1S, 19, "iq1_s", 50),
    (DType::IQ3S, 21, "iq3_s", 110),
    (DType::IQ2S, 22, "iq2_s", 82),
    (DType::IQ1M, 29, "iq1_m", 56),
];

fn x86_dot(t: DType) -> VecDotKernel {
    match t {
        DType::IQ2XXS => BlockIQ2XXS::GGML_X86_DOT,
        DType::IQ2XS => BlockIQ2XS::GGML_X86_DOT,
        DType::IQ2S => BlockIQ2S::GGML_X86_DOT,
        DType::IQ3XXS => BlockIQ3XXS::GGML_X86_DOT,
        DType::IQ3S => BlockIQ3S::GGML_X86_DOT,
        DType::IQ1S => BlockIQ1S::GGML_X86_DOT,
        _ => BlockIQ1M::GGML_X86_DOT,
    }
    .expect("the grid i-quants declare ggml's x86 order")
}

/// `data/iquants-ggml.txt`, split into words.
fn data() -> Vec<Vec<String>> {
    include_str!("data/iquants-ggml.txt")
        .lines()
        .map(|l| l.split(' ').map(str::to_owned).collect())
        .collect()
}

const NB: usize = 6;

/// `iquants-ggml.c`'s weights of type number `t` of [`TYPES`]: `NB` random blocks with
/// moderate f16 scales.
fn c_weights(t: usize) -> Vec<u8> {
    let (ty, _, _, bytes) = TYPES_C[t];
    let mut s = 1 + t as u64;
    let mut w: Vec<u8> = (0..NB * bytes).map(|_| mix(&mut s) as u8).collect();
    for blk in w.chunks_exact_mut(bytes) {
        set_scale(ty, blk, mix(&mut s));
    }
    w
}

/// `iquants-ggml.c`'s Q8_K activation column `c`.
fn c_activations(c: usize) -> Vec<u8> {
    let mut s = 100 + c as u64;
    let mut y = Vec::new();
    for b in 0..NB {
        y.extend_from_slice(&(0.01 * (b + 1 + c) as f32).to_le_bytes());
        // As the C `?:`, which draws no number for a forced −128.
        let q: Vec<i8> = (0..QK)
            .map(|_| {
                if c == 1 && b % 2 == 0 {
                    -128
                } else {
                    mix(&mut s) as i8
                }
            })
            .collect();
        y.extend(q.iter().map(|&v| v as u8));
        for j in 0..16 {
            let sum: i16 = q[16 * j..16 * j + 16].iter().map(|&v| v as i16).sum();
            y.extend_from_slice(&sum.to_le_bytes());
        }
    }
    y
}

/// The C program's type order.
const TYPES_C: [(DType, u32, &str, usize); 7] = [
    TYPES[0], TYPES[1], TYPES[5], TYPES[2], TYPES[4], TYPES[3], TYPES[6],
];

/// Dequantized values and both dot orders equal llama.cpp's bit for bit.
#[test]
fn dequantize_and_dots_as_llama_cpp() {
    let lines = data();
    let cols: Vec<Vec<u8>> = (0..3).map(c_activations).collect();
    let mut seen = 0;
    for (t, &(ty, _, name, bytes)) in TYPES_C.iter().enumerate() {
        let w = c_weights(t);
        let mut dq = vec![0f32; NB * QK];
        quants::dequantize_row_dyn(ty, &w, &mut dq).expect("whole blocks");
        let want = lines
            .iter()
            .find(|l| l[0] == "dequant" && l[1] == name)
            .expect("a dequant line per type");
        let got = fnv(dq.iter().flat_map(|v| v.to_bits().to_le_bytes()));
        assert_eq!(format!("{got:016x}"), want[2], "{name} dequantized");
        let generic = dispatch::vec_dot_scalar_kernel(ty).expect("block type");
        for l in lines.iter().filter(|l| l[0] == "dot" && l[1] == name) {
            let (c, k): (usize, usize) = (l[2].parse().unwrap(), l[3].parse().unwrap());
            let (row, y) = (&w[..k * bytes], &cols[c][..k * DType::Q8K.type_size()]);
            let what = format!("{name} column {c}, {k} blocks");
            assert_eq!(
                format!("{:08x}", x86_dot(ty)(k * QK, row, y).to_bits()),
                l[4],
                "{what} x86"
            );
            assert_eq!(
                format!("{:08x}", generic(k * QK, row, y).to_bits()),
                l[5],
                "{what} generic"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 7 * 3 * NB);
}

#[test]
fn ids_names_sizes_orders_and_quantizers() {
    for (t, id, name, bytes) in TYPES {
        assert_eq!(DType::from_id(id), Some(t));
        assert_eq!(DType::from_name(&name.to_uppercase()), Some(t));
        assert_eq!((t.block_size(), t.type_size()), (QK, bytes), "{t}");
        assert_eq!(quants::vec_dot_type(t), Some(DType::Q8K));
        assert_eq!(
            ggrs_core::dtype::describe_type_id(id),
            format!("type {name} (ggml type {id})")
        );
        assert!(ggrs_core::dtype::supported_type_names().contains(name));
        assert_eq!(
            dispatch::ggml_sum_order(t, [4864, 896, 1, 1]),
            SumOrder::GgmlLanes
        );
        // Written with importance weights; without, only where ggml writes them without
        // (IQ3_XXS, IQ3_S, IQ2_S, IQ1_M); the others are refused.
        match quants::quantize_row_dyn(t, &[0.5; QK], &mut vec![0u8; bytes]) {
            Ok(()) => assert!(quants::quantizes_weighted(t) && !quants::needs_weights(t)),
            Err(err) if quants::needs_weights(t) => {
                assert!(err.to_string().contains("importance weights"), "{t}: {err}")
            }
            Err(err) => {
                assert!(!quants::quantizes_weighted(t), "{t}: {err}");
                assert!(err.to_string().contains("cannot quantize"), "{t}: {err}");
            }
        }
    }
}

/// Sets the f16 scale of block `blk` of type `t` to `(m mod 2000) / 1000 − 1`.
fn set_scale(t: DType, blk: &mut [u8], m: u64) {
    set_scale_bits(
        t,
        blk,
        half::f16::from_f32((m % 2000) as f32 / 1000.0 - 1.0).to_bits(),
    );
}

/// Sets the f16 scale of block `blk` of type `t` to the bits `d`.
fn set_scale_bits(t: DType, blk: &mut [u8], d: u16) {
    if t == DType::IQ1M {
        // The f16 scale's four nibbles are the top nibbles of the four scale words.
        for k in 0..4 {
            let b = &mut blk[48 + 2 * k + 1];
            *b = (*b & 0x0f) | ((((d >> (4 * k)) & 15) as u8) << 4);
        }
    } else {
        blk[..2].copy_from_slice(&d.to_le_bytes());
    }
}

/// Random weight bytes of type `t` with finite, moderate block scales.
fn random_weights(t: DType, n: usize, s: &mut u64) -> Vec<u8> {
    let mut w: Vec<u8> = (0..t.row_size(n)).map(|_| mix(s) as u8).collect();
    for blk in w.chunks_exact_mut(t.type_size()) {
        set_scale(t, blk, mix(s));
    }
    w
}

/// Any bytes at all (every grid entry and sign, −128 activations, scales of every size):
/// every build of ggml's vec_dot order has the portable order's bits, and every build of
/// its tiled order the tiled oracle's, in every tile form.
#[test]
fn every_build_is_the_portable_order_on_any_bytes() {
    let mut s = 7u64;
    for (t, ..) in TYPES {
        let dot = x86_dot(t);
        for nb in [1usize, 2, 3, 5] {
            let n = nb * QK;
            let (rs, ys) = (t.row_size(n), DType::Q8K.row_size(n));
            let w: Vec<u8> = (0..4).flat_map(|_| random_weights(t, n, &mut s)).collect();
            let mut y: Vec<u8> = (0..4 * ys).map(|_| mix(&mut s) as u8).collect();
            for (i, blk) in y.chunks_exact_mut(DType::Q8K.type_size()).enumerate() {
                blk[..4].copy_from_slice(&(0.01 * (i as f32 + 1.0)).to_le_bytes());
                if i % 3 == 0 {
                    blk[4..260].fill(0x80);
                }
                // Block sums of the codes, as every Q8_K row has them (IQ1_S reads its shift
                // part from them in ggml's vec_dot, from the codes in its tiled matmul).
                for j in 0..16 {
                    let sum: i16 = blk[4 + 16 * j..20 + 16 * j]
                        .iter()
                        .map(|&b| b as i8 as i16)
                        .sum();
                    blk[260 + 2 * j..262 + 2 * j].copy_from_slice(&sum.to_le_bytes());
                }
            }
            let wr: [&[u8]; 4] = std::array::from_fn(|r| &w[r * rs..(r + 1) * rs]);
            let yr: [&[u8]; 4] = std::array::from_fn(|c| &y[c * ys..(c + 1) * ys]);
            for order in [SumOrder::GgmlLanes, SumOrder::GgmlTiled] {
                let want: [[u32; 4]; 4] = std::array::from_fn(|r| {
                    std::array::from_fn(|c| {
                        let v = if order == SumOrder::GgmlTiled {
                            tiled_oracle(t, n, wr[r], yr[c])
                        } else {
                            dot(n, wr[r], yr[c])
                        };
                        v.to_bits()
                    })
                });
                let builds = dispatch::vec_dot_variants_in(t, order);
                assert!(
                    !builds.is_empty() || !cfg!(target_arch = "x86_64"),
                    "{t} {order:?}: no build"
                );
                for v in builds {
                    let what = format!("{t} {order:?} {:?} nb={nb}", v.isa);
                    assert_every_form(&v, n, wr, yr, want, &what);
                }
            }
        }
    }
}

/// Q8_K activation bytes of `n` values: any codes, a small scale, the block sums the codes
/// make (IQ1_S's kernels read its shift part from them).
fn q8k_bytes(n: usize, s: &mut u64) -> Vec<u8> {
    let mut y: Vec<u8> = (0..DType::Q8K.row_size(n)).map(|_| mix(s) as u8).collect();
    for (i, blk) in y.chunks_exact_mut(DType::Q8K.type_size()).enumerate() {
        blk[..4].copy_from_slice(&(0.02 * (i as f32 + 1.0)).to_le_bytes());
        for j in 0..16 {
            let sum: i16 = blk[4 + 16 * j..20 + 16 * j]
                .iter()
                .map(|&b| b as i8 as i16)
                .sum();
            blk[260 + 2 * j..262 + 2 * j].copy_from_slice(&sum.to_le_bytes());
        }
    }
    y
}

/// The one-column kernels prefetch ahead of each row and, near its end, into the rows
/// after the call's (as far apart as its first two rows): rows in separate allocations and
/// in any order, as long as an ffn_down row (19 blocks) or shorter than the prefetch
/// distance, give every build the portable bits all the same.
#[test]
fn rows_anywhere_keep_the_portable_bits() {
    let mut s = 11u64;
    for (t, ..) in TYPES {
        let dot = x86_dot(t);
        for nb in [1usize, 9, 19] {
            let n = nb * QK;
            let rows: Vec<Vec<u8>> = (0..4).map(|_| random_weights(t, n, &mut s)).collect();
            let y = q8k_bytes(n, &mut s);
            let x: [&[u8]; 4] = [&rows[3], &rows[0], &rows[2], &rows[1]];
            let want = x.map(|r| dot(n, r, &y).to_bits());
            let builds = dispatch::vec_dot_variants_in(t, SumOrder::GgmlLanes);
            assert!(
                !builds.is_empty() || !cfg!(target_arch = "x86_64"),
                "{t}: no build"
            );
            for v in builds {
                let got = (v.rows4)(n, x, &y).map(f32::to_bits);
                assert_eq!(got, want, "{t} {:?} nb={nb}", v.isa);
            }
        }
    }
}

/// The oracle of ggml's tiled order (prompts): per block `r = d_t·f32(s1)`,
/// `acc = fma(r, d_y, acc)`, with `d_t` the block scale times the type's factor (IQ2: 1/8,
/// IQ3_XXS: 1/4, IQ3_S: 1, IQ1: 1/8 with values `8·grid ± 1`) and `f32(s1)` read off the
/// generic dot (checked against llama.cpp above) of the block and its Q8_K block, both with
/// scale 1: `FACTOR·f32(s1)` for IQ2/IQ3, `f32(s1)/8` for IQ1.
fn tiled_oracle(t: DType, k: usize, w: &[u8], y: &[u8]) -> f32 {
    let generic = dispatch::vec_dot_scalar_kernel(t).expect("block type");
    let (bs, ys) = (t.type_size(), DType::Q8K.type_size());
    let factor = match t {
        DType::IQ3XXS => 0.25,
        DType::IQ3S => 1.0,
        _ => 0.125,
    };
    let mut acc = 0f32;
    for (x, yb) in w.chunks_exact(bs).zip(y.chunks_exact(ys)).take(k / QK) {
        let (mut x1, mut y1) = (x.to_vec(), yb.to_vec());
        let d = block_scale(t, x);
        set_scale_bits(t, &mut x1, 0x3C00);
        y1[..4].copy_from_slice(&1.0f32.to_le_bytes());
        let unit = generic(QK, &x1, &y1);
        let s1 = if matches!(t, DType::IQ1S | DType::IQ1M) {
            unit * 8.0
        } else {
            unit / factor
        };
        let dy = f32::from_le_bytes([yb[0], yb[1], yb[2], yb[3]]);
        acc = ((d * factor) * s1).mul_add(dy, acc);
    }
    acc
}

/// The f16 block scale of block `x` of type `t`, as f32.
fn block_scale(t: DType, x: &[u8]) -> f32 {
    let bits = if t == DType::IQ1M {
        (0..4).fold(0u16, |h, k| {
            h | (((x[48 + 2 * k + 1] >> 4) as u16) << (4 * k))
        })
    } else {
        u16::from_le_bytes([x[0], x[1]])
    };
    half::f16::from_bits(bits).to_f32()
}

/// Through the executor every output element is, below eight columns, the x86-order dot of
/// its weight row and its Q8_K column, and from eight columns on the tiled order's oracle,
/// with SIMD and with `force_scalar` (the only test here that flips it), for 1–9 columns and
/// 1–2 threads.
#[test]
fn mul_mat_keeps_ggml_x86_orders() {
    let mut r = Lcg(99);
    let mut s = 11u64;
    let q8k = dispatch::activation_quantizer(DType::Q8K).expect("Q8_K converts");
    for (t, ..) in TYPES {
        let dot = x86_dot(t);
        for (k, n) in [(QK, 3), (2 * QK, 9)] {
            let w: Vec<u8> = (0..n).flat_map(|_| random_weights(t, k, &mut s)).collect();
            let rs = t.row_size(k);
            for m in [1usize, 2, 4, 5, 8, 9] {
                let x: Vec<f32> = (0..k * m).map(|_| r.next()).collect();
                let cols: Vec<Vec<u8>> = x
                    .chunks_exact(k)
                    .map(|c| {
                        let mut b = vec![0u8; DType::Q8K.row_size(k)];
                        q8k(c, &mut b);
                        b
                    })
                    .collect();
                for forced in [false, true] {
                    dispatch::force_scalar(forced);
                    for threads in [1, 2] {
                        let got = run_mul_mat(t, &w, &x, k, n, m, threads);
                        for j in 0..m {
                            for i in 0..n {
                                let row = &w[i * rs..(i + 1) * rs];
                                let want = if m >= dispatch::GGML_TILED_MIN_COLS {
                                    tiled_oracle(t, k, row, &cols[j])
                                } else {
                                    dot(k, row, &cols[j])
                                };
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

/// The grid panels (`kernels::x86::panel::grid_vnni`, AVX-512 VNNI: sixteen rows per panel,
/// decoded once per node) through the executor: from eight columns on every element has the
/// tiled oracle's bits, on any bytes, for row counts with rows past the last whole panel
/// (which another kernel takes), 8–40 columns, short rows, one and two threads; and the
/// panels switched off (`force_no_panels`: the tiled panels of `tiled_avx2` / `iquants512`)
/// give the same bits. (Where the CPU has no AVX-512 VNNI both runs take the other path.)
#[test]
fn grid_panels_keep_the_tiled_order() {
    let mut r = Lcg(5);
    let mut s = 23u64;
    let q8k = dispatch::activation_quantizer(DType::Q8K).expect("Q8_K converts");
    for (t, ..) in TYPES {
        for (k, n, ms) in [(QK, 40, &[8usize, 13][..]), (3 * QK, 33, &[9, 40][..])] {
            let w: Vec<u8> = (0..n).flat_map(|_| random_weights(t, k, &mut s)).collect();
            let rs = t.row_size(k);
            for &m in ms {
                let x: Vec<f32> = (0..k * m).map(|_| r.next()).collect();
                let cols: Vec<Vec<u8>> = x
                    .chunks_exact(k)
                    .map(|c| {
                        let mut b = vec![0u8; DType::Q8K.row_size(k)];
                        q8k(c, &mut b);
                        b
                    })
                    .collect();
                for threads in [1, 2] {
                    let got = run_mul_mat(t, &w, &x, k, n, m, threads);
                    dispatch::force_no_panels(true);
                    let off = run_mul_mat(t, &w, &x, k, n, m, threads);
                    dispatch::force_no_panels(false);
                    for j in 0..m {
                        for i in 0..n {
                            let row = &w[i * rs..(i + 1) * rs];
                            let want = tiled_oracle(t, k, row, &cols[j]).to_bits();
                            let what =
                                format!("{t} k={k} n={n} m={m} threads={threads} [{i}, {j}]");
                            assert_eq!(got[j * n + i].to_bits(), want, "{what}");
                            assert_eq!(off[j * n + i].to_bits(), want, "{what}, panels off");
                        }
                    }
                }
            }
        }
    }
}
