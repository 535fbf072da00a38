//! `tanh`, `soft_cap` and `geglu_split` (Gemma 2's soft-capping and GeGLU) against their
//! formulas, computed directly here, on 1 and 2 threads and on strided (transposed) inputs.

use ggrs_core::{Context, DType, Executor, Graph, Tensor};
use half::f16;

/// Seeded values spread over [−scale, scale].
fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
        })
        .collect()
}

/// Builds `f` over inputs of shape `[n0, n1]` holding `xs`, computes it on `threads` threads
/// and returns the result.
fn run(
    xs: &[&[f32]],
    (n0, n1): (usize, usize),
    threads: usize,
    f: impl Fn(&mut Context, &[Tensor]) -> Tensor,
) -> Vec<f32> {
    let mut ctx = Context::with_mem_size(4 << 20);
    let inputs: Vec<Tensor> = xs
        .iter()
        .map(|x| {
            let t = ctx.new_tensor_2d(DType::F32, n0, n1).unwrap();
            ctx.set_f32(t, x).unwrap();
            t
        })
        .collect();
    let out = f(&mut ctx, &inputs);
    let mut g = Graph::new();
    g.build_forward_expand(&ctx, out).unwrap();
    Executor::new(threads).compute(&mut ctx, &g).unwrap();
    ctx.to_f32_vec(out).unwrap()
}

/// ggml's GELU (tanh form) in f32, as its table is built.
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + (0.797_884_6 * x * (1.0 + 0.044_715 * x * x)).tanh())
}

#[test]
fn tanh_and_soft_cap_follow_the_formula() {
    let (n0, n1) = (37, 5);
    let x = values(7, n0 * n1, 40.0);
    for threads in [1, 2] {
        let t = run(&[&x], (n0, n1), threads, |c, i| c.tanh(i[0]).unwrap());
        for (o, &v) in t.iter().zip(&x) {
            assert_eq!(o.to_bits(), v.tanh().to_bits(), "tanh({v})");
        }
        for cap in [5.0f32, 30.0] {
            let y = run(&[&x], (n0, n1), threads, |c, i| {
                c.soft_cap(i[0], cap).unwrap()
            });
            for (o, &v) in y.iter().zip(&x) {
                // The same roundings as ggml's scale → tanh → scale.
                let want = (v * (1.0 / cap)).tanh() * cap;
                assert_eq!(o.to_bits(), want.to_bits(), "soft_cap({v}, {cap})");
                assert!(
                    o.abs() < cap,
                    "|soft_cap({v}, {cap})| = {o} reaches the cap"
                );
                // And close to the exact c·tanh(x/c).
                let exact = cap as f64 * (v as f64 / cap as f64).tanh();
                assert!(
                    (*o as f64 - exact).abs() < 1e-5 * cap as f64,
                    "{v}: {o} vs {exact}"
                );
            }
        }
    }
    // Soft-capping a transposed (strided) view gives the values of its elements.
    let y = run(&[&x], (n0, n1), 2, |c, i| {
        let t = c.transpose(i[0]).unwrap();
        c.soft_cap(t, 5.0).unwrap()
    });
    for r in 0..n1 {
        for k in 0..n0 {
            let v = x[r * n0 + k];
            assert_eq!(y[k * n1 + r], (v * 0.2).tanh() * 5.0);
        }
    }
}

#[test]
fn soft_cap_rejects_a_cap_that_is_not_positive() {
    let mut ctx = Context::with_mem_size(1 << 20);
    let t = ctx.new_tensor_1d(DType::F32, 4).unwrap();
    for cap in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        assert!(ctx.soft_cap(t, cap).is_err(), "cap {cap} accepted");
    }
}

#[test]
fn geglu_is_ggml_gelu_of_the_gate_times_up() {
    let (n0, n1) = (300, 3);
    let mut g = values(11, n0 * n1, 12.0);
    // The branch points and f16-rounding boundaries.
    g[..6].copy_from_slice(&[-10.0, 10.0, -10.5, 10.5, 0.0, -0.0]);
    let u = values(12, n0 * n1, 3.0);
    for threads in [1, 2] {
        let y = run(&[&g, &u], (n0, n1), threads, |c, i| {
            c.geglu_split(i[0], i[1]).unwrap()
        });
        for ((o, &gv), &uv) in y.iter().zip(&g).zip(&u) {
            let want = if gv <= -10.0 {
                0.0
            } else if gv >= 10.0 {
                gv * uv
            } else {
                let h = f16::from_f32(gv).to_f32();
                f16::from_f32(gelu(h)).to_f32() * uv
            };
            assert_eq!(o.to_bits(), want.to_bits(), "geglu({gv}, {uv})");
            // Within f16 rounding of the exact GELU.
            let exact = gelu(gv) * uv;
            assert!(
                (o - exact).abs() <= 2e-3 * (1.0 + exact.abs()),
                "geglu({gv}, {uv}) = {o}, exact {exact}"
            );
        }
    }
    let mut ctx = Context::with_mem_size(1 << 20);
    let a = ctx.new_tensor_1d(DType::F32, 4).unwrap();
    let b = ctx.new_tensor_1d(DType::F32, 5).unwrap();
    assert!(ctx.geglu_split(a, b).is_err(), "shapes differ");
}
