//! Executor overhead: a chain of 1,000 trivial nodes (`scale` of a 4-element tensor, each
//! node reading the previous one), computed by a persistent [`Executor`] on 1 and 2 threads.
//!
//! Run with `cargo bench -p ggrs-core --bench executor`.
//!
//! The work per node is negligible, so the time is what the executor spends per node:
//! planning, resolving and scheduling it, taking its one chunk from the atomic counter and,
//! with 2 threads, waiting until the node is complete before the next one (each node of a
//! chain reads the previous one, so every node is an epoch of its own). Throughput is
//! reported in nodes per second (criterion's `elem/s`); µs per node = 10⁶ / (nodes per
//! second), or the time per iteration / 1000.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ggrs_core::{Context, DType, Executor, Graph};

/// Nodes in the chain.
const N_NODES: usize = 1000;
/// Elements of the tensor each node scales.
const LEN: usize = 4;

fn bench_chain(c: &mut Criterion) {
    let mut ctx =
        Context::with_mem_size(Context::mem_size_for(N_NODES + 1, (N_NODES + 1) * 4 * LEN));
    let x = ctx
        .new_tensor_1d(DType::F32, LEN)
        .expect("the arena was sized for the input");
    ctx.set_f32(x, &[1.0; LEN]).expect("x holds LEN values");
    let mut last = x;
    for _ in 0..N_NODES {
        // 1.0001^1000 ≈ 1.105: the values stay finite and every node changes them.
        last = ctx
            .scale(last, 1.0001)
            .expect("the arena was sized for every node");
    }
    let graph = Graph::build(&ctx, last).expect("a chain graph");
    assert_eq!(graph.nodes().len(), N_NODES, "one node per scale");

    let mut group = c.benchmark_group("executor");
    group.throughput(Throughput::Elements(N_NODES as u64));
    for threads in [1, 2] {
        let mut exec = Executor::new(threads);
        exec.compute(&mut ctx, &graph).expect("the chain computes");
        let out = ctx.to_f32_vec(last).expect("the last node has data");
        let want = 1.0001f64.powi(N_NODES as i32) as f32;
        assert!(
            out.iter().all(|v| (v - want).abs() < 1e-4),
            "chain result {out:?}, expected {want} everywhere"
        );
        group.bench_function(format!("chain{N_NODES}/scale/t={threads}"), |b| {
            b.iter(|| exec.compute(&mut ctx, &graph).expect("the chain computes"))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench_chain
}
criterion_main!(benches);
