//! IQ4_NL and IQ4_XS through the public API: the layouts decoded by hand from the format
//! description, quantization round-trip and dot-product errors as ggml's
//! `test-quantize-fns` measures them, the quantizers' search against a plain least-squares
//! bound, GGUF type ids and names, and `get_rows` / `mul_mat` through the executor.
//! (Bit-exactness with llama.cpp's quantizer on a real model: `ggrs-llama/tests/
//! quantize_iq4_sha.rs`; the SIMD kernels and ggml's summation orders: `quants_simd.rs`.)

use ggrs_core::quants::{self, BlockIQ4NL, BlockIQ4XS, BlockQuant};
use ggrs_core::{Context, DType, Executor, Graph};
use half::f16;

/// The 16 levels, as ggml's `kvalues_iq4nl` lists them.
const LEVELS: [f32; 16] = [
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0,
    89.0, 113.0,
];

fn quantize(t: DType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; t.row_size(x.len())];
    quants::quantize_row_dyn(t, x, &mut q).expect("whole blocks");
    q
}

fn dequantize(t: DType, q: &[u8]) -> Vec<f32> {
    let mut y = vec![0f32; q.len() / t.type_size() * t.block_size()];
    quants::dequantize_row_dyn(t, q, &mut y).expect("whole blocks");
    y
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn gguf_ids_names_and_sizes() {
    assert_eq!(DType::from_id(20), Some(DType::IQ4NL));
    assert_eq!(DType::from_id(23), Some(DType::IQ4XS));
    assert_eq!(DType::IQ4NL.name(), "iq4_nl");
    assert_eq!(DType::IQ4XS.name(), "iq4_xs");
    assert_eq!(DType::from_name("IQ4_NL"), Some(DType::IQ4NL));
    assert_eq!(
        (DType::IQ4NL.block_size(), DType::IQ4NL.type_size()),
        (32, 18)
    );
    assert_eq!(
        (DType::IQ4XS.block_size(), DType::IQ4XS.type_size()),
        (256, 136)
    );
    assert_eq!(BlockIQ4NL::BYTES, 18);
    assert_eq!(BlockIQ4XS::BYTES, 136);
    assert_eq!(quants::vec_dot_type(DType::IQ4NL), Some(DType::Q8_0));
    assert_eq!(quants::vec_dot_type(DType::IQ4XS), Some(DType::Q8K));
    // Rows of 896 (Qwen's width) do not divide into IQ4_XS blocks: an error, not a panic.
    let mut out = vec![0u8; 136 * 3];
    assert!(quants::quantize_row_dyn(DType::IQ4XS, &[0.5; 896], &mut out).is_err());
}

#[test]
fn hand_built_blocks_decode_as_the_format_says() {
    // IQ4_NL: d = 0.5; byte j holds index j % 16 (low) and 15 − j % 16 (high).
    let mut b = vec![0u8; 18];
    b[..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
    for j in 0..16 {
        b[2 + j] = (j as u8) | ((15 - j as u8) << 4);
    }
    let y = dequantize(DType::IQ4NL, &b);
    for j in 0..16 {
        assert_eq!(y[j], 0.5 * LEVELS[j], "value {j}");
        assert_eq!(y[16 + j], 0.5 * LEVELS[15 - j], "value {}", 16 + j);
    }

    // IQ4_XS: d = 0.25, sub-block scales ls = 0, 63, 32, 33, 1, 62, 31, 40 (6 bits: low 4
    // in nibble ib % 2 of scales_l[ib / 2], high 2 at bit 2·ib of scales_h); sub-block ib's
    // byte j holds index (j + ib) % 16 (low) and (j + 2·ib) % 16 (high).
    let ls = [0u16, 63, 32, 33, 1, 62, 31, 40];
    let mut b = vec![0u8; 136];
    b[..2].copy_from_slice(&f16::from_f32(0.25).to_le_bytes());
    let mut sh = 0u16;
    for (ib, &l) in ls.iter().enumerate() {
        b[4 + ib / 2] |= ((l & 15) as u8) << (4 * (ib % 2));
        sh |= (l >> 4) << (2 * ib);
        for j in 0..16 {
            b[8 + 16 * ib + j] = (((j + ib) % 16) | (((j + 2 * ib) % 16) << 4)) as u8;
        }
    }
    b[2..4].copy_from_slice(&sh.to_le_bytes());
    let y = dequantize(DType::IQ4XS, &b);
    for (ib, &l) in ls.iter().enumerate() {
        let dl = 0.25 * (l as f32 - 32.0);
        for j in 0..16 {
            assert_eq!(
                y[32 * ib + j],
                dl * LEVELS[(j + ib) % 16],
                "sub-block {ib} value {j}"
            );
            assert_eq!(
                y[32 * ib + 16 + j],
                dl * LEVELS[(j + 2 * ib) % 16],
                "sub-block {ib} value {}",
                16 + j
            );
        }
    }
}

/// `0.1 + 2·cos(i + offset)`, as test-quantize-fns generates it.
fn cos_data(offset: f64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.1 + 2.0 * (i as f64 + offset).cos()) as f32)
        .collect()
}

#[test]
fn round_trip_and_dot_errors_as_test_quantize_fns() {
    let n = 256 * 16;
    let x = cos_data(0.0, n);
    let y = cos_data(1.0, n);
    let exact: f64 = x.iter().zip(&y).map(|(a, b)| *a as f64 * *b as f64).sum();
    for t in [DType::IQ4NL, DType::IQ4XS] {
        let q = quantize(t, &x);
        let back = dequantize(t, &q);
        let sum2: f64 = x
            .iter()
            .zip(&back)
            .map(|(a, b)| ((a - b) as f64).powi(2))
            .sum();
        // ggml's `array_rmse`: √(Σ d²) / n, bound 0.002 for 4-bit types.
        let err = sum2.sqrt() / n as f64;
        assert!(err <= 0.002, "{t}: total error {err}");
        // And the plain RMS error: below 0.3 of a uniform 4-bit step over the data's range
        // (4.2 / 15); the non-linear grid with its searched scale does better than uniform
        // rounding (0.29 step) on this data.
        let rms = (sum2 / n as f64).sqrt();
        assert!(rms <= 0.3 * 4.2 / 15.0, "{t}: rms {rms}");

        let vt = quants::vec_dot_type(t).unwrap();
        let qy = quantize(vt, &y);
        let got = quants::vec_dot_row_dyn(t, n, &q, &qy).unwrap();
        let derr = (got as f64 - exact).abs() / n as f64;
        assert!(derr <= 0.02, "{t}: dot error {derr}");
        // The fused kernel is the dot product of the dequantized rows, up to f32 rounding.
        let dy = dequantize(vt, &qy);
        let reference: f64 = back
            .iter()
            .zip(&dy)
            .map(|(a, b)| *a as f64 * *b as f64)
            .sum();
        let scale: f64 = back
            .iter()
            .zip(&dy)
            .map(|(a, b)| (*a as f64 * *b as f64).abs())
            .sum();
        let tol = (n as f64 / 32.0 + 8.0) * f32::EPSILON as f64 * scale;
        assert!(
            (got as f64 - reference).abs() <= tol,
            "{t}: {got} vs dequantized {reference}"
        );
    }
}

/// The weighted squared error `Σ x²·(x − d·level)²` of one 32-value group, with the group's
/// own scale `d` and the levels the quantizer chose.
fn group_error(x: &[f32], y: &[f32]) -> f64 {
    x.iter()
        .zip(y)
        .map(|(a, b)| (*a as f64).powi(2) * ((a - b) as f64).powi(2))
        .sum()
}

#[test]
fn iq4_nl_search_beats_plain_max_scaling() {
    // The search over 15 candidate scales keeps the best weighted fit, so it does at least
    // as well as mapping the largest magnitude to the end level −127 with each value's
    // nearest level (the first candidate), up to the f16 rounding of the stored scale.
    let mut seed = 12345u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    };
    let mut better = 0;
    for _ in 0..200 {
        let x: Vec<f32> = (0..32).map(|_| next() * 3.0).collect();
        let y = dequantize(DType::IQ4NL, &quantize(DType::IQ4NL, &x));
        // Plain: d = max / −127 (max the signed value of largest magnitude), nearest level.
        let max = x
            .iter()
            .copied()
            .fold(0f32, |m, v| if v.abs() > m.abs() { v } else { m });
        let d = f16::from_f32(max / -127.0).to_f32();
        let plain: Vec<f32> = x
            .iter()
            .map(|&v| {
                let l = LEVELS
                    .iter()
                    .copied()
                    .min_by(|a, b| (v - d * a).abs().total_cmp(&(v - d * b).abs()))
                    .unwrap();
                d * l
            })
            .collect();
        let (e, ep) = (group_error(&x, &y), group_error(&x, &plain));
        assert!(e <= ep * 1.01 + 1e-12, "search {e} > plain {ep} for {x:?}");
        if e < ep * 0.99 {
            better += 1;
        }
    }
    assert!(
        better >= 100,
        "the search improved only {better} of 200 groups"
    );
}

#[test]
fn zero_groups_quantize_to_zeros() {
    for t in [DType::IQ4NL, DType::IQ4XS] {
        let x = vec![0f32; 256];
        let y = dequantize(t, &quantize(t, &x));
        assert!(y.iter().all(|&v| v == 0.0), "{t}");
    }
}

/// Weights for `mul_mat`/`get_rows`: quantized from a smooth pattern.
fn weights(t: DType, k: usize, rows: usize, seed: f64) -> Vec<u8> {
    let x: Vec<f32> = (0..k * rows)
        .map(|i| ((i as f64 * 0.731 + seed).sin() * 0.6 + (i % 7) as f64 * 0.01) as f32)
        .collect();
    quantize(t, &x)
}

#[test]
fn get_rows_decodes_rows() {
    for t in [DType::IQ4NL, DType::IQ4XS] {
        let k = 2 * t.block_size();
        let rows = 5;
        let w = weights(t, k, rows, 0.3);
        let ids = [4i32, 0, 2, 2];
        let mut ctx = Context::with_mem_size(4 << 20);
        let a = ctx.new_tensor(t, &[k, rows]).unwrap();
        let idt = ctx.new_tensor(DType::I32, &[ids.len()]).unwrap();
        ctx.set_bytes(a, &w).unwrap();
        ctx.set_i32(idt, &ids).unwrap();
        let out = ctx.get_rows(a, idt).unwrap();
        let g = Graph::build(&ctx, out).unwrap();
        Executor::new(2).compute(&mut ctx, &g).unwrap();
        let got = ctx.to_f32_vec(out).unwrap();
        let rs = t.row_size(k);
        for (r, &id) in ids.iter().enumerate() {
            let id = id as usize;
            let want = dequantize(t, &w[id * rs..(id + 1) * rs]);
            assert_eq!(
                f32_bytes(&got[r * k..(r + 1) * k]),
                f32_bytes(&want),
                "{t} row {r}"
            );
        }
    }
}

#[test]
fn mul_mat_against_f64_reference_on_1_to_4_threads() {
    // (type, blocks per row, rows, columns): IQ4_NL with a row count llama.cpp repacks (16)
    // and one it does not (13), one column and several.
    let cases = [
        (DType::IQ4NL, 7, 16, 5),
        (DType::IQ4NL, 7, 13, 5),
        (DType::IQ4NL, 9, 13, 1),
        (DType::IQ4NL, 9, 16, 1),
        (DType::IQ4XS, 3, 13, 6),
        (DType::IQ4XS, 2, 8, 1),
    ];
    for (t, blocks, n, m) in cases {
        let vt = quants::vec_dot_type(t).unwrap();
        let k = blocks * t.block_size();
        let w = weights(t, k, n, 1.7);
        let x: Vec<f32> = (0..k * m)
            .map(|i| ((i as f64 * 0.377).cos() * 0.8 + 0.05) as f32)
            .collect();
        let wf = dequantize(t, &w);
        // Reference: dequantized weights · activations through the vec-dot type, in f64.
        let mut want = vec![0f64; n * m];
        for j in 0..m {
            let col = dequantize(vt, &quantize(vt, &x[j * k..(j + 1) * k]));
            for i in 0..n {
                want[j * n + i] = wf[i * k..(i + 1) * k]
                    .iter()
                    .zip(&col)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum();
            }
        }
        let mut first: Option<Vec<f32>> = None;
        for threads in 1..=4 {
            let mut ctx = Context::with_mem_size(8 << 20);
            let a = ctx.new_tensor(t, &[k, n]).unwrap();
            let b = ctx.new_tensor(DType::F32, &[k, m]).unwrap();
            ctx.set_bytes(a, &w).unwrap();
            ctx.set_f32(b, &x).unwrap();
            let out = ctx.mul_mat(a, b).unwrap();
            let g = Graph::build(&ctx, out).unwrap();
            Executor::new(threads).compute(&mut ctx, &g).unwrap();
            let got = ctx.to_f32_vec(out).unwrap();
            let num: f64 = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (*g as f64 - w).powi(2))
                .sum();
            let den: f64 = want.iter().map(|w| w * w).sum();
            // NMSE: the activations' run-time quantizer may round a code differently from
            // the reference one (ties), hence not bit-equality.
            assert!(
                num / den <= 1e-9,
                "{t} [{k}, {n}] × [{k}, {m}] {threads} threads: nmse {}",
                num / den
            );
            match &first {
                None => first = Some(got),
                Some(f) => assert_eq!(f32_bytes(f), f32_bytes(&got), "{t}: thread count"),
            }
        }
    }
}
