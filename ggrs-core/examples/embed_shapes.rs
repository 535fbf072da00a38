//! Throughput of the matrix products of a small encoder step (all-MiniLM-L6-v2: width 384,
//! feed-forward 1536, about 500 tokens per step): `mul_mat` of a `[k, n]` weight of TYPE
//! with `m` f32 columns, one node per graph, as the embedder runs it. Prints the fastest and
//! the median time of REPS runs and GFLOP/s (`2·k·n·m` per product) for each shape; the
//! fastest is the figure that survives a loaded machine.
//!
//! `cargo run --release -p ggrs-core --example embed_shapes -- [TYPE] [M] [THREADS] [REPS]`
//! (defaults `f16 490 1 30`; TYPE f16, f32, q8_0 or q4_0).

use std::time::Instant;

use ggrs_core::{Context, DType, Executor, Graph};

/// A deterministic stream of values in [-1, 1).
fn values(n: usize, seed: &mut u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn main() -> ggrs_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let count = |i: usize, d: &str| -> usize {
        let s = arg(i, d);
        s.parse().unwrap_or_else(|_| {
            eprintln!("argument {} ({s}) is not a count", i + 1);
            std::process::exit(2)
        })
    };
    let dtype = match arg(0, "f16").as_str() {
        "f16" => DType::F16,
        "f32" => DType::F32,
        "q8_0" => DType::Q8_0,
        "q4_0" => DType::Q4_0,
        other => {
            eprintln!("unknown type {other} (f16, f32, q8_0, q4_0)");
            std::process::exit(2)
        }
    };
    let (m, threads, reps) = (count(1, "490"), count(2, "1"), count(3, "30").max(1));
    let mut exec = Executor::new(threads);
    let mut seed = 2026u64;
    let mut total = 0.0;
    for (k, n) in [(384, 384), (384, 1536), (1536, 384)] {
        let bytes = dtype.row_size(k) * n + 4 * k * m + 4 * n * m;
        let mut ctx = Context::with_mem_size(Context::mem_size_for(3, bytes));
        let a = ctx.new_tensor_2d(dtype, k, n)?;
        let b = ctx.new_tensor_2d(DType::F32, k, m)?;
        let out = ctx.mul_mat(a, b)?;
        ctx.set_f32(a, &values(k * n, &mut seed))?;
        ctx.set_f32(b, &values(k * m, &mut seed))?;
        let graph = Graph::build(&ctx, out)?;
        exec.compute(&mut ctx, &graph)?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            exec.compute(&mut ctx, &graph)?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let (best, med) = (times[0], times[reps / 2]);
        let flop = 2.0 * (k * n * m) as f64;
        total += best * if k == n { 4.0 } else { 1.0 };
        println!(
            "{dtype} [{k}, {n}] x {m}, {threads} threads: best {:8.3} ms ({:6.1} GFLOP/s), median {:8.3} ms",
            best * 1e3,
            flop / best / 1e9,
            med * 1e3
        );
    }
    println!(
        "one layer's products (4 x [384, 384], up, down): {:.3} ms at best",
        total * 1e3
    );
    Ok(())
}
