//! The element-wise and row nodes of one decoding step, at the sizes of Qwen2.5-0.5B (one
//! token): SwiGLU of the 4864-wide feed-forward row, `rms_norm · w` of the 896-wide
//! embedding, NEOX RoPE of the 14 query heads of 64. Each runs as a single-node graph on a
//! persistent [`Executor`] of 1 and 2 threads, so the time includes the executor's cost per
//! node (see the `executor` bench for that alone).
//!
//! Run with `cargo bench -p ggrs-core --bench decode_ops`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ggrs_core::{Context, DType, Executor, Graph, RopeMode, RopeParams, Tensor};

/// Feed-forward width of Qwen2.5-0.5B.
const N_FF: usize = 4864;
/// Embedding width of Qwen2.5-0.5B.
const N_EMBD: usize = 896;
/// Head size and query heads of Qwen2.5-0.5B.
const HEAD: (usize, usize) = (64, 14);

/// Values in about [−6, 6]: SiLU sees both signs and the exponential's whole useful range.
fn ramp(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37) % 1201) as f32 / 100.0 - 6.0)
        .collect()
}

fn f32_input(ctx: &mut Context, ne: &[usize]) -> Tensor {
    let t = match *ne {
        [a] => ctx.new_tensor_1d(DType::F32, a),
        [a, b, c] => ctx.new_tensor_3d(DType::F32, a, b, c),
        _ => unreachable!("1-d and 3-d inputs only"),
    }
    .expect("the arena was sized for the inputs");
    let n = ne.iter().product();
    ctx.set_f32(t, &ramp(n)).expect("sized above");
    t
}

fn bench_decode_ops(c: &mut Criterion) {
    let mut ctx = Context::with_mem_size(8 << 20);
    let g = f32_input(&mut ctx, &[N_FF]);
    let u = f32_input(&mut ctx, &[N_FF]);
    let x = f32_input(&mut ctx, &[N_EMBD]);
    let w = f32_input(&mut ctx, &[N_EMBD]);
    let q = f32_input(&mut ctx, &[HEAD.0, HEAD.1, 1]);
    let pos = ctx.new_tensor_1d(DType::I32, 1).expect("sized");
    ctx.set_i32(pos, &[100]).expect("one position");
    let rope = RopeParams {
        n_dims: HEAD.0,
        mode: RopeMode::Neox,
        freq_base: 1_000_000.0,
        freq_scale: 1.0,
    };
    let nodes = [
        ("swiglu", ctx.swiglu_split(g, u).expect("same shapes"), N_FF),
        (
            "rms_norm_mul",
            ctx.rms_norm_mul(x, w, 1e-6).expect("same shapes"),
            N_EMBD,
        ),
        (
            "rope_neox",
            ctx.rope_ext(q, pos, rope).expect("one position"),
            HEAD.0 * HEAD.1,
        ),
    ];
    let mut group = c.benchmark_group("decode_ops");
    for (name, node, elems) in nodes {
        let graph = Graph::build(&ctx, node).expect("a one-node graph");
        group.throughput(Throughput::Elements(elems as u64));
        for threads in [1, 2] {
            let mut exec = Executor::new(threads);
            exec.compute(&mut ctx, &graph).expect("computes");
            let out = ctx.to_f32_vec(node).expect("the node has data");
            assert!(out.iter().all(|v| v.is_finite()), "{name}: finite results");
            group.bench_function(format!("{name}/t={threads}"), |b| {
                b.iter(|| exec.compute(&mut ctx, &graph).expect("computes"))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_decode_ops
}
criterion_main!(benches);
