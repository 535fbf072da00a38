//! `flash_attn_ext` for one decoded token: the attention of a Qwen2.5-0.5B layer (14 query
//! heads sharing 2 key/value heads, head size 64, f16 cache laid out as the model's) over
//! 256, 1024 and 4096 cached keys, on 1 and 2 threads of a persistent [`Executor`], with the
//! keys split in 2 parts as llama.cpp does on 2 threads (from 512 keys on).
//!
//! Also a 512-token prompt (the tiled kernel).
//!
//! Run with `cargo bench -p ggrs-core --bench flash_attn`. Throughput is in (key, query
//! head) pairs per second: at depth `d` one call handles `14·d` of them.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ggrs_core::{Context, DType, Executor, Graph};

/// Query heads, key/value heads, head size.
const HEADS: (usize, usize, usize) = (14, 2, 64);

fn bench_flash_attn(c: &mut Criterion) {
    let mut g = c.benchmark_group("flash_attn_decode");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let (nh, nkv, d) = HEADS;
    for n_kv in [256usize, 1024, 4096] {
        let mut ctx = Context::with_mem_size(64 << 20);
        let tensors = (|| -> ggrs_core::Result<_> {
            let q = ctx.new_tensor(DType::F32, &[d, 1, nh, 1])?;
            // The model's cache: one row of all key/value heads per cell, read through views
            // of `[d, n_kv, heads]` (rows `d · heads` values apart, heads `d` apart).
            let kc = ctx.new_tensor(DType::F16, &[d * nkv, n_kv])?;
            let vc = ctx.new_tensor(DType::F16, &[d * nkv, n_kv])?;
            let m = ctx.new_tensor(DType::F16, &[n_kv, 1])?;
            let wave = |n: usize, f: f32| (0..n).map(|i| (i as f32 * f).sin()).collect::<Vec<_>>();
            ctx.set_f32(q, &wave(d * nh, 0.37))?;
            ctx.set_f32(kc, &wave(d * n_kv * nkv, 0.21))?;
            ctx.set_f32(vc, &wave(d * n_kv * nkv, 0.13))?;
            ctx.set_f32(m, &vec![0.0; n_kv])?;
            let (row, head) = (2 * d * nkv, 2 * d);
            let k = ctx.view_3d(kc, d, n_kv, nkv, row, head, 0)?;
            let v = ctx.view_3d(vc, d, n_kv, nkv, row, head, 0)?;
            let out = ctx.flash_attn_ext_split(q, k, v, Some(m), 0.125, 2)?;
            Graph::build(&ctx, out)
        })();
        let graph = tensors.expect("the bench graph is well formed");
        g.throughput(Throughput::Elements((nh * n_kv) as u64));
        for threads in [1usize, 2] {
            let mut exec = Executor::new(threads);
            g.bench_function(format!("kv{n_kv}/t{threads}"), |b| {
                b.iter(|| exec.compute(&mut ctx, &graph).expect("computes"))
            });
        }
        if n_kv == 1024 {
            // As in a model, where a layer's cache was last read a whole step (and all the
            // weights) ago: before each call (not timed) the same executor reads 64 MB
            // (and writes next to nothing), so the call finds its keys and values in memory only.
            let mut exec = Executor::new(2);
            let mut big = Context::with_mem_size(100 << 20);
            let flush = (|| -> ggrs_core::Result<_> {
                let a = big.new_tensor(DType::F32, &[4096, 4096])?;
                big.set_f32(a, &vec![1.0; 4096 * 4096])?;
                let sums = big.sum_rows(a)?;
                Graph::build(&big, sums)
            })()
            .expect("the flush graph is well formed");
            g.bench_function(format!("kv{n_kv}_cold/t2"), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        exec.compute(&mut big, &flush).expect("computes");
                        let t = Instant::now();
                        exec.compute(&mut ctx, &graph).expect("computes");
                        total += t.elapsed();
                    }
                    total
                })
            });
        }
    }
    g.finish();
}

/// A 512-token prompt's attention in one Qwen2.5-0.5B layer: 512 queries over 512 keys under
/// a causal mask (the tiled kernel), on 1 and 2 threads. Throughput in (query, key, head)
/// triples computed, masked ones included.
fn bench_flash_attn_prompt(c: &mut Criterion) {
    let mut g = c.benchmark_group("flash_attn_prompt");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    let (nh, nkv, d) = HEADS;
    let n = 512usize;
    let mut ctx = Context::with_mem_size(64 << 20);
    let graph = (|| -> ggrs_core::Result<_> {
        let wave = |n: usize, f: f32| (0..n).map(|i| (i as f32 * f).sin()).collect::<Vec<_>>();
        let q = ctx.new_tensor(DType::F32, &[d, n, nh, 1])?;
        let k = ctx.new_tensor(DType::F16, &[d, n, nkv, 1])?;
        let v = ctx.new_tensor(DType::F16, &[d, n, nkv, 1])?;
        let m = ctx.new_tensor(DType::F16, &[n, n])?;
        ctx.set_f32(q, &wave(d * n * nh, 0.37))?;
        ctx.set_f32(k, &wave(d * n * nkv, 0.21))?;
        ctx.set_f32(v, &wave(d * n * nkv, 0.13))?;
        let causal: Vec<f32> = (0..n * n)
            .map(|t| {
                if t % n > t / n {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        ctx.set_f32(m, &causal)?;
        let out = ctx.flash_attn_ext_split(q, k, v, Some(m), 0.125, 2)?;
        Graph::build(&ctx, out)
    })()
    .expect("the bench graph is well formed");
    g.throughput(Throughput::Elements((nh * n * n) as u64));
    for threads in [1usize, 2] {
        let mut exec = Executor::new(threads);
        g.bench_function(format!("q{n}_kv{n}/t{threads}"), |b| {
            b.iter(|| exec.compute(&mut ctx, &graph).expect("computes"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_flash_attn, bench_flash_attn_prompt);
criterion_main!(benches);
