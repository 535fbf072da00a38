//! `tanh`, `soft_cap` and `geglu_split` (Gemma 2's soft-capping and GeGLU) against their
//! formulas, computed directly here, on 1 and 2 threads and on strided (transposed) inputs.

use crate::common;

use ggrs_core::{Context, DType, Executor, Graph, Tensor};
use half::f16;

/// Seeded values spread over [−scale, scale) (`common::values`, scaled).
fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    common::values(seed, n)
        .into_iter()
        .map(|v| v * scale)
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

/// `gelu_ggml` (one source) has the bits of `geglu_split` with up values of one, also on a
/// strided (transposed) input.
#[test]
fn gelu_ggml_is_geglu_with_ones() {
    let (n0, n1) = (300, 3);
    let mut g = values(13, n0 * n1, 12.0);
    g[..6].copy_from_slice(&[-10.0, 10.0, -10.5, 10.5, 0.0, -0.0]);
    let ones = vec![1.0f32; n0 * n1];
    for threads in [1, 2] {
        let want = run(&[&g, &ones], (n0, n1), threads, |c, i| {
            c.geglu_split(i[0], i[1]).unwrap()
        });
        let got = run(&[&g], (n0, n1), threads, |c, i| c.gelu_ggml(i[0]).unwrap());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "{threads} threads");
    }
    let t = run(&[&g], (n0, n1), 2, |c, i| {
        let t = c.transpose(i[0]).unwrap();
        c.gelu_ggml(t).unwrap()
    });
    let d = run(&[&g], (n0, n1), 1, |c, i| c.gelu_ggml(i[0]).unwrap());
    for r in 0..n1 {
        for k in 0..n0 {
            assert_eq!(t[k * n1 + r].to_bits(), d[r * n0 + k].to_bits());
        }
    }
}

/// Flash attention with `softcap` against `softmax(c·tanh(scale·k·q / c) + mask) · v`
/// computed directly (f64, from the same f16 keys and values): the one-row kernel (few
/// queries), the tiled kernel (64 queries or more) and the split-key path (one query, 512
/// keys or more, 2 parts); and `softcap` = 0 is the plain kernel, bit for bit.
#[test]
fn flash_attention_soft_caps_scores_before_the_mask() {
    let (d, nh, nhkv) = (48usize, 4usize, 2usize);
    let (scale, cap) = (0.3f32, 5.0f32);
    for (n_q, n_kv, splits) in [(5usize, 40usize, 1usize), (70, 90, 1), (1, 600, 2)] {
        let q = values(21, d * n_q * nh, 3.0);
        let kf: Vec<f32> = values(22, d * n_kv * nhkv, 2.0)
            .iter()
            .map(|&x| f16::from_f32(x).to_f32())
            .collect();
        let vf: Vec<f32> = values(23, d * n_kv * nhkv, 1.0)
            .iter()
            .map(|&x| f16::from_f32(x).to_f32())
            .collect();
        // Query i sees keys 0..=i + n_kv − n_q, except every third one.
        let mask: Vec<f32> = (0..n_q * n_kv)
            .map(|e| {
                let (i, j) = (e / n_kv, e % n_kv);
                if j > i + n_kv - n_q || j % 3 == 1 {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        let compute = |softcap: Option<f32>, threads: usize| -> Vec<f32> {
            let mut ctx = Context::with_mem_size(16 << 20);
            let qt = ctx.new_tensor_3d(DType::F32, d, n_q, nh).unwrap();
            ctx.set_f32(qt, &q).unwrap();
            let to16 = |x: &[f32]| -> Vec<u8> {
                x.iter()
                    .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                    .collect()
            };
            let kt = ctx.new_tensor_3d(DType::F16, d, n_kv, nhkv).unwrap();
            ctx.set_bytes(kt, &to16(&kf)).unwrap();
            let vt = ctx.new_tensor_3d(DType::F16, d, n_kv, nhkv).unwrap();
            ctx.set_bytes(vt, &to16(&vf)).unwrap();
            let mt = ctx.new_tensor_2d(DType::F32, n_kv, n_q).unwrap();
            ctx.set_f32(mt, &mask).unwrap();
            let out = match softcap {
                Some(c) => ctx.flash_attn_ext_softcap(qt, kt, vt, Some(mt), scale, c, splits),
                None => ctx.flash_attn_ext_split(qt, kt, vt, Some(mt), scale, splits),
            }
            .unwrap(); // [d, nh, n_q]
            let mut g = Graph::new();
            g.build_forward_expand(&ctx, out).unwrap();
            Executor::new(threads).compute(&mut ctx, &g).unwrap();
            ctx.to_f32_vec(out).unwrap()
        };
        let one = compute(Some(cap), 1);
        assert_eq!(one, compute(Some(cap), 2), "thread count changed the bits");
        assert_eq!(
            compute(Some(0.0), 1),
            compute(None, 1),
            "softcap 0 is not the plain kernel"
        );
        let mut worst = 0f64;
        for i in 0..n_q {
            for h in 0..nh {
                let hk = h / (nh / nhkv);
                let qrow = &q[(h * n_q + i) * d..][..d];
                let s: Vec<f64> = (0..n_kv)
                    .map(|j| {
                        let krow = &kf[(hk * n_kv + j) * d..][..d];
                        let dot: f64 = qrow
                            .iter()
                            .zip(krow)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum();
                        let capped = cap as f64 * (dot * scale as f64 / cap as f64).tanh();
                        capped + mask[i * n_kv + j] as f64
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = s.iter().map(|&x| (x - m).exp()).collect();
                let sum: f64 = w.iter().sum();
                for e in 0..d {
                    let want: f64 = (0..n_kv)
                        .map(|j| w[j] * vf[(hk * n_kv + j) * d + e] as f64)
                        .sum::<f64>()
                        / sum;
                    let got = one[(i * nh + h) * d + e] as f64;
                    worst = worst.max((got - want).abs());
                }
            }
        }
        // q is rounded to f16 and the one-row kernel accumulates in f16: a few 1e-3.
        assert!(worst < 5e-3, "n_q {n_q}, n_kv {n_kv}: max error {worst}");
        // Without the cap the scores (|s| up to ≈ 15) would give other weights.
        let plain = compute(None, 1);
        let moved = one
            .iter()
            .zip(&plain)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(moved > 1e-2, "the cap changed nothing ({moved})");
    }
}
