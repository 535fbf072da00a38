//! Block-quantized `mul_mat`, scalar against SIMD: Q4_0 and Q8_0 weights of the shape of a
//! Qwen2.5-0.5B MLP projection (`ne = [896, 4864]`, 4864 rows of 896) times 1 and 128 f32
//! activation columns, through a persistent [`Executor`] on 1 and 2 threads.
//!
//! Run with `cargo bench -p ggrs-core --bench quant_mul_mat` (add a filter such as
//! `-- q4_0` to run a subset).
//!
//! Groups:
//! - `quant_mul_mat_bw`: 1 column (decoding one token), throughput as weight bytes streamed
//!   per second (criterion's `GB/s`, decimal);
//! - `quant_mul_mat_flops`: 128 columns (a prompt), throughput as `2·k·n·m` operations per
//!   second (criterion's `Gelem/s` reads as GFLOP/s);
//! - `quant_vec_dot`: every kernel build this CPU runs (`dispatch::vec_dot_variants`), called
//!   directly for the 4864 rows against one column on one thread, one row per call (`one`)
//!   and four (`rows4`), as weight bytes per second;
//! - `quant_tiles`: the tile forms of the build `mul_mat` uses over 16 columns, one thread,
//!   1 × 4 (`dot4`) against 4 × 4 (`tile`), as GFLOP/s;
//! - `quant_quantize_activations`: 128 columns of 896 activations quantized to Q8_0 and Q8_K
//!   by every quantizer this CPU runs (`dispatch::quantizer_variants`: the reference, and the
//!   SIMD one `mul_mat`'s INIT uses, which writes the same bytes), as values per second.
//!
//! `mul_mat` keeps ggml's summation order for Q4_0 and Q8_0 (llama.cpp's bits; for Q4_0 with
//! 4864 rows, the order of ggml's repacked kernels): the SIMD runs use the panel kernels of
//! `kernels::x86::panel` on AVX-512 VNNI (`Avx512Vnni-panels`: sixteen rows repacked at a
//! time, one row per lane), and the tile kernels of `kernels::x86` in that order otherwise
//! (`Avx512Vnni`, with the panels switched off by [`dispatch::force_no_panels`]). The `simd-off` runs switch them off
//! with [`dispatch::force_scalar`] (the process-wide switch; `GGRS_FORCE_SCALAR` is read once
//! per process and cannot alternate), and `mul_mat` falls back to `kernels::ggml_arith`'s
//! one-element kernels in the same order: portable code, but compiled with AVX2 enabled
//! (LLVM vectorizes it), so not the scalar reference. The scalar reference itself is timed
//! in `quant_vec_dot`; for a whole-process scalar run, set `GGRS_FORCE_SCALAR=1`. Each
//! iteration is one `Executor::compute` of a one-node graph, INIT (quantizing the
//! activations) included.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ggrs_core::quants::{self, dispatch};
use ggrs_core::{Context, DType, Executor, Graph, Tensor};

/// Shared dimension (values per weight row).
const K: usize = 896;
/// Weight rows.
const N: usize = 4864;
/// Weight types.
const TYPES: [DType; 2] = [DType::Q4_0, DType::Q8_0];
/// Thread counts.
const THREADS: [usize; 2] = [1, 2];

/// A ready-to-run product `mul_mat(w, x)`, `w: [K, N]` of the weight type, `x: [K, m]` f32.
struct Case {
    ctx: Context,
    graph: Graph,
    out: Tensor,
    weights: Vec<u8>,
    x: Vec<f32>,
}

fn setup(dtype: DType, m: usize) -> Case {
    let bytes = dtype.row_size(K) * N + 4 * K * m + 4 * N * m;
    let mut ctx = Context::with_mem_size(Context::mem_size_for(3, bytes));
    let a = ctx
        .new_tensor_2d(dtype, K, N)
        .expect("the arena was sized for w");
    let b = ctx
        .new_tensor_2d(DType::F32, K, m)
        .expect("the arena was sized for x");
    let out = ctx
        .mul_mat(a, b)
        .expect("w and x share ne[0] = K; the arena was sized for the result");
    // Deterministic values that do not repeat with a short period, quantized by the
    // reference quantizer.
    let wf: Vec<f32> = (0..K * N).map(|i| (i as f32 * 0.618).sin()).collect();
    let mut weights = vec![0u8; dtype.row_size(K) * N];
    quants::quantize_row_dyn(dtype, &wf, &mut weights).expect("K·N is whole blocks");
    let x: Vec<f32> = (0..K * m).map(|i| (i as f32 * 0.309 + 1.0).cos()).collect();
    ctx.set_bytes(a, &weights).expect("exactly w's bytes");
    ctx.set_f32(b, &x).expect("x is contiguous, K·m values");
    let graph = Graph::build(&ctx, out).expect("a one-node graph");
    Case {
        ctx,
        graph,
        out,
        weights,
        x,
    }
}

/// Checks a few output elements against a plain f64 dot product of the dequantized weights
/// and the f32 activations, so that a broken path cannot hide behind a fast time. The bound:
/// quantizing activations to 8 bits moves each by at most half a step, `amax/254` of its
/// block (`amax/127` allowed), plus f32 rounding.
fn check(case: &mut Case, exec: &mut Executor, dtype: DType, m: usize) {
    exec.compute(&mut case.ctx, &case.graph)
        .expect("mul_mat computes");
    let got = case.ctx.to_f32_vec(case.out).expect("the result has data");
    let rs = dtype.row_size(K);
    for (i, j) in [(0, 0), (N - 1, m - 1), (N / 2, m / 2)] {
        let mut w = vec![0f32; K];
        quants::dequantize_row_dyn(dtype, &case.weights[i * rs..(i + 1) * rs], &mut w)
            .expect("one row");
        let x = &case.x[j * K..(j + 1) * K];
        let (mut want, mut tol) = (0f64, 0f64);
        for (wb, xb) in w.chunks_exact(32).zip(x.chunks_exact(32)) {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
            for (&p, &q) in wb.iter().zip(xb) {
                want += p as f64 * q as f64;
                tol += (p as f64).abs() * (amax / 127.0 + 1e-4 * (q as f64).abs());
            }
        }
        let v = got[j * N + i] as f64;
        assert!(
            (v - want).abs() <= tol,
            "{dtype} out[{i}, {j}] = {v}, plain dot product {want} (bound {tol})"
        );
    }
}

fn bench_quant_mul_mat(c: &mut Criterion) {
    for (group, m) in [("quant_mul_mat_bw", 1), ("quant_mul_mat_flops", 128)] {
        let mut g = c.benchmark_group(group);
        for dtype in TYPES {
            let mut case = setup(dtype, m);
            g.throughput(if m == 1 {
                Throughput::BytesDecimal((dtype.row_size(K) * N) as u64)
            } else {
                Throughput::Elements((2 * K * N * m) as u64)
            });
            for threads in THREADS {
                let mut exec = Executor::new(threads);
                for (scalar, panels) in [(true, false), (false, false), (false, true)] {
                    dispatch::force_scalar(scalar);
                    dispatch::force_no_panels(!panels);
                    // The tile kernels `mul_mat` uses for this shape (in ggml's order), if any,
                    // or the panel kernels.
                    let order = dispatch::ggml_sum_order(dtype, [K, N, 1, 1]);
                    let path = dispatch::active_variant_in(dtype, order).map_or_else(
                        || "simd-off".to_string(),
                        |v| format!("{:?}{}", v.isa, if panels { "-panels" } else { "" }),
                    );
                    if panels && !path.starts_with("Avx512Vnni") {
                        continue;
                    }
                    check(&mut case, &mut exec, dtype, m);
                    let id = format!("{dtype}/{N}x{K}/m={m}/t={threads}/{path}");
                    g.bench_function(id, |bch| {
                        bch.iter(|| {
                            exec.compute(&mut case.ctx, &case.graph)
                                .expect("mul_mat computes")
                        })
                    });
                }
            }
            dispatch::force_scalar(false);
            dispatch::force_no_panels(false);
        }
        g.finish();
    }

    let mut g = c.benchmark_group("quant_vec_dot");
    for dtype in TYPES {
        let case = setup(dtype, 1);
        let vt = quants::vec_dot_type(dtype).expect("a block type");
        let mut col = vec![0u8; vt.row_size(K)];
        quants::quantize_row_dyn(vt, &case.x, &mut col).expect("K is whole blocks");
        let rs = dtype.row_size(K);
        g.throughput(Throughput::BytesDecimal((rs * N) as u64));
        for v in dispatch::vec_dot_variants(dtype) {
            let id = BenchmarkId::new(format!("{dtype}/{N}x{K}/one"), format!("{:?}", v.isa));
            g.bench_function(id, |bch| {
                bch.iter(|| {
                    let mut s = 0f32;
                    for row in case.weights.chunks_exact(rs) {
                        s += (v.dot)(K, row, &col);
                    }
                    std::hint::black_box(s)
                })
            });
            let id = BenchmarkId::new(format!("{dtype}/{N}x{K}/rows4"), format!("{:?}", v.isa));
            g.bench_function(id, |bch| {
                bch.iter(|| {
                    let mut s = 0f32;
                    for rows in case.weights.chunks_exact(4 * rs) {
                        let r = |t: usize| &rows[t * rs..(t + 1) * rs];
                        let d = (v.rows4)(K, [r(0), r(1), r(2), r(3)], &col);
                        s += d[0] + d[1] + d[2] + d[3];
                    }
                    std::hint::black_box(s)
                })
            });
        }
    }
    g.finish();

    // The tile shapes of the build `mul_mat` uses, on 16 columns (one tile of `mul_mat`'s
    // grid), one thread: 1 × 4 (`dot4`) against 4 × 4 (`tile`).
    let mut g = c.benchmark_group("quant_tiles");
    let m = 16;
    for dtype in TYPES {
        let case = setup(dtype, m);
        let vt = quants::vec_dot_type(dtype).expect("a block type");
        let crs = vt.row_size(K);
        let mut cols = vec![0u8; crs * m];
        quants::quantize_row_dyn(vt, &case.x, &mut cols).expect("K is whole blocks");
        let col = |j: usize| &cols[j * crs..(j + 1) * crs];
        let rs = dtype.row_size(K);
        // The builds `mul_mat` uses for this shape (ggml's order: for Q4_0 with 4864 rows,
        // the repacked order), else the default one.
        let order = dispatch::ggml_sum_order(dtype, [K, N, 1, 1]);
        let v = dispatch::active_variant_in(dtype, order)
            .or_else(|| dispatch::active_variant(dtype))
            .expect("a block type");
        g.throughput(Throughput::Elements((2 * K * N * m) as u64));
        g.bench_function(
            format!("{dtype}/{N}x{K}/m={m}/1x4/{:?}/{order:?}", v.isa),
            |bch| {
                bch.iter(|| {
                    let mut s = 0f32;
                    for row in case.weights.chunks_exact(rs) {
                        for j in (0..m).step_by(4) {
                            let d = (v.dot4)(K, row, [col(j), col(j + 1), col(j + 2), col(j + 3)]);
                            s += d[0] + d[1] + d[2] + d[3];
                        }
                    }
                    std::hint::black_box(s)
                })
            },
        );
        g.bench_function(
            format!("{dtype}/{N}x{K}/m={m}/4x4/{:?}/{order:?}", v.isa),
            |bch| {
                bch.iter(|| {
                    let mut s = 0f32;
                    for rows in case.weights.chunks_exact(4 * rs) {
                        let r = |t: usize| &rows[t * rs..(t + 1) * rs];
                        for j in (0..m).step_by(4) {
                            let t = (v.tile)(
                                K,
                                [r(0), r(1), r(2), r(3)],
                                [col(j), col(j + 1), col(j + 2), col(j + 3)],
                            );
                            s += t.iter().flatten().sum::<f32>();
                        }
                    }
                    std::hint::black_box(s)
                })
            },
        );
    }
    g.finish();
}

fn bench_quantize(c: &mut Criterion) {
    let mut g = c.benchmark_group("quant_quantize_activations");
    let m = 128;
    let x: Vec<f32> = (0..K * m).map(|i| (i as f32 * 0.309 + 1.0).cos()).collect();
    g.throughput(Throughput::Elements((K * m) as u64));
    for vt in [DType::Q8_0, DType::Q8K] {
        // K·m values are whole Q8_K super-blocks too (128·896 = 448·256).
        let mut out = vec![0u8; vt.row_size(K * m)];
        for (isa, q) in dispatch::quantizer_variants(vt) {
            g.bench_function(format!("{vt}/{K}x{m}/{isa:?}"), |bch| {
                bch.iter(|| q(&x, &mut out))
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    // Short runs: 3 s of measurement, 10 samples.
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench_quant_mul_mat, bench_quantize
}
criterion_main!(benches);
