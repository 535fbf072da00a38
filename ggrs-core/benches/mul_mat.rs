//! `mul_mat` throughput: f32 and f16 weights of the shapes of a Qwen2.5-0.5B layer
//! (896×896, the attention projections; 4864×896, the MLP projections) times 1, 32 and 128
//! activation columns, on 1 and 2 threads of a persistent [`Executor`].
//!
//! Run with `cargo bench -p ggrs-core --bench mul_mat` (add a filter such as `-- f16/4864`
//! to run a subset).
//!
//! Two groups:
//! - `mul_mat`: every case, throughput as elements per second where one element is one
//!   floating-point operation, so criterion's `Gelem/s` reads as GFLOP/s
//!   (`2·k·n·m` operations per product).
//! - `mul_mat_weight_bw`: the 1-column cases again (a matrix-vector product, as in decoding
//!   one token), throughput as weight bytes read per second (GB/s, decimal): the figure to
//!   hold against the machine's memory bandwidth.
//!
//! Each iteration is one `Executor::compute` of a one-node graph, as a model runs it (the
//! executor prepares the graph on the first and reuses that while it stays the same).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ggrs_core::{Context, DType, Executor, Graph, Tensor};

/// Shared dimension (the model width).
const K: usize = 896;
/// Weight rows: the two projection shapes.
const NS: [usize; 2] = [896, 4864];
/// Activation columns (tokens per step).
const MS: [usize; 3] = [1, 32, 128];
/// Weight types.
const TYPES: [DType; 2] = [DType::F32, DType::F16];
/// Thread counts.
const THREADS: [usize; 2] = [1, 2];

/// A ready-to-run product: a context holding `a: [K, n]` (weights), `b: [K, m]` and the
/// one-node graph `mul_mat(a, b)`.
struct Case {
    ctx: Context,
    graph: Graph,
    out: Tensor,
    a_vals: Vec<f32>,
    b_vals: Vec<f32>,
}

fn setup(dtype: DType, n: usize, m: usize) -> Case {
    let bytes = dtype.row_size(K) * n + 4 * K * m + 4 * n * m;
    let mut ctx = Context::with_mem_size(Context::mem_size_for(3, bytes));
    let a = ctx
        .new_tensor_2d(dtype, K, n)
        .expect("the arena was sized for a");
    let b = ctx
        .new_tensor_2d(DType::F32, K, m)
        .expect("the arena was sized for b");
    let out = ctx
        .mul_mat(a, b)
        .expect("a and b share ne[0] = K; the arena was sized for the result");
    // Deterministic values in [-1, 1] that do not repeat with a short period.
    let a_vals: Vec<f32> = (0..K * n).map(|i| (i as f32 * 0.618).sin()).collect();
    let b_vals: Vec<f32> = (0..K * m).map(|i| (i as f32 * 0.309 + 1.0).cos()).collect();
    ctx.set_f32(a, &a_vals)
        .expect("a is contiguous, K·n values");
    ctx.set_f32(b, &b_vals)
        .expect("b is contiguous, K·m values");
    let graph = Graph::build(&ctx, out).expect("a one-node graph");
    Case {
        ctx,
        graph,
        out,
        a_vals,
        b_vals,
    }
}

/// Checks two corners of the product against plain dot products, so that a broken kernel
/// cannot hide behind a fast time. f16 weights (and the activations, converted to f16 for
/// the dot product) carry about 3 significant digits.
fn check(case: &mut Case, exec: &mut Executor, dtype: DType, n: usize, m: usize) {
    exec.compute(&mut case.ctx, &case.graph)
        .expect("mul_mat computes");
    let got = case.ctx.to_f32_vec(case.out).expect("the result has data");
    for (i, j) in [(0, 0), (n - 1, m - 1)] {
        let want: f32 = (0..K)
            .map(|c| case.a_vals[i * K + c] * case.b_vals[j * K + c])
            .sum();
        let tol = if dtype == DType::F16 { 0.1 } else { 1e-3 };
        let v = got[j * n + i];
        assert!(
            (v - want).abs() <= tol,
            "{dtype} {n}x{K} · {m} columns: out[{i}, {j}] = {v}, plain dot product {want}"
        );
    }
}

fn bench_mul_mat(c: &mut Criterion) {
    let mut flops = c.benchmark_group("mul_mat");
    for threads in THREADS {
        let mut exec = Executor::new(threads);
        for dtype in TYPES {
            for n in NS {
                for m in MS {
                    let mut case = setup(dtype, n, m);
                    check(&mut case, &mut exec, dtype, n, m);
                    flops.throughput(Throughput::Elements((2 * K * n * m) as u64));
                    flops.bench_function(format!("{dtype}/{n}x{K}/m={m}/t={threads}"), |bch| {
                        bch.iter(|| {
                            exec.compute(&mut case.ctx, &case.graph)
                                .expect("mul_mat computes")
                        })
                    });
                }
            }
        }
    }
    flops.finish();

    let mut bw = c.benchmark_group("mul_mat_weight_bw");
    for threads in THREADS {
        let mut exec = Executor::new(threads);
        for dtype in TYPES {
            for n in NS {
                let mut case = setup(dtype, n, 1);
                bw.throughput(Throughput::BytesDecimal((dtype.row_size(K) * n) as u64));
                bw.bench_function(format!("{dtype}/{n}x{K}/m=1/t={threads}"), |bch| {
                    bch.iter(|| {
                        exec.compute(&mut case.ctx, &case.graph)
                            .expect("mul_mat computes")
                    })
                });
            }
        }
    }
    bw.finish();
}

criterion_group! {
    name = benches;
    // Short runs: the whole file takes about two minutes.
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench_mul_mat
}
criterion_main!(benches);
