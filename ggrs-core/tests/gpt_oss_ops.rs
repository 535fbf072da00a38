//! The ops gpt-oss adds, against references written here:
//! - `swiglu_oai` (the clamped SwiGLU) bit for bit against its formula in ggml's order;
//! - `add_id` (the experts' biases) bit for bit, and its out-of-range ids refused;
//! - attention sinks in `flash_attn_ext_sinks` (one-row, tiled and split-key kernels) and in
//!   `soft_max_ext_sinks` against a naive f64 softmax whose denominator has the sink, with a
//!   sink of −∞ giving the bits of no sink;
//!
//! each on 1–4 threads (same bits), and their shape contracts.

use crate::common;

use common::*;
use ggrs_core::{Context, DType, Error, Executor, Graph, Result, Tensor};

/// Computes `out` on `threads` threads and reads it back.
fn compute(ctx: &mut Context, out: Tensor, threads: usize) -> Result<Vec<f32>> {
    let mut g = Graph::new();
    g.build_forward_expand(ctx, out)?;
    Executor::new(threads).compute(ctx, &g)?;
    ctx.to_f32_vec(out)
}

/// ggml's scalar loop, written out: `x = min(g, limit)`, `y = clamp(u, −limit, limit)`,
/// `x / (1 + exp(alpha·(−x))) · (y + 1)`.
fn swiglu_oai_ref(g: f32, u: f32, alpha: f32, limit: f32) -> f32 {
    let x = g.min(limit);
    let y = u.clamp(-limit, limit);
    let glu = x / (1.0 + (alpha * -x).exp());
    glu * (y + 1.0)
}

#[test]
fn swiglu_oai_follows_ggmls_formula() {
    let (n0, n1) = (67, 5);
    // Values up to ±12, so that the clamp at 7 bites on both inputs.
    let g: Vec<f32> = values(11, n0 * n1).iter().map(|v| v * 12.0).collect();
    let u: Vec<f32> = values(12, n0 * n1).iter().map(|v| v * 12.0).collect();
    assert!(g.iter().any(|&v| v > 7.0) && u.iter().any(|&v| v < -7.0));
    for threads in [1, 2, 3] {
        let mut ctx = Context::with_mem_size(1 << 20);
        let (tg, _) = leaf(&mut ctx, DType::F32, [n0, n1, 1, 1], &g).unwrap();
        let (tu, _) = leaf(&mut ctx, DType::F32, [n0, n1, 1, 1], &u).unwrap();
        let out = ctx.swiglu_oai(tg, tu, 1.702, 7.0).unwrap();
        let got = compute(&mut ctx, out, threads).unwrap();
        for (k, o) in got.iter().enumerate() {
            let want = swiglu_oai_ref(g[k], u[k], 1.702, 7.0);
            assert_eq!(o.to_bits(), want.to_bits(), "g={} u={}", g[k], u[k]);
        }
        // Clamped: above the limits nothing changes.
        let at = |ctx: &mut Context, gv: f32, uv: f32| {
            let a = ctx.new_tensor(DType::F32, &[1]).unwrap();
            let b = ctx.new_tensor(DType::F32, &[1]).unwrap();
            ctx.set_f32(a, &[gv]).unwrap();
            ctx.set_f32(b, &[uv]).unwrap();
            let o = ctx.swiglu_oai(a, b, 1.702, 7.0).unwrap();
            compute(ctx, o, 1).unwrap()[0]
        };
        let mut ctx = Context::with_mem_size(1 << 16);
        assert_eq!(at(&mut ctx, 9.0, 30.0), at(&mut ctx, 7.0, 7.0));
        assert_eq!(at(&mut ctx, 1.0, -30.0), at(&mut ctx, 1.0, -7.0));
    }
    // A transposed (strided) gate gives the values of its elements.
    let mut ctx = Context::with_mem_size(1 << 20);
    let (base, _) = leaf(&mut ctx, DType::F32, [n1, n0, 1, 1], &g).unwrap();
    let tg = ctx.transpose(base).unwrap(); // [n0, n1]: element (i, j) = g[i·n1 + j]
    let (tu, _) = leaf(&mut ctx, DType::F32, [n0, n1, 1, 1], &u).unwrap();
    let out = ctx.swiglu_oai(tg, tu, 1.702, 7.0).unwrap();
    let got = compute(&mut ctx, out, 2).unwrap();
    for j in 0..n1 {
        for i in 0..n0 {
            let want = swiglu_oai_ref(g[i * n1 + j], u[j * n0 + i], 1.702, 7.0);
            assert_eq!(got[j * n0 + i].to_bits(), want.to_bits());
        }
    }
}

#[test]
fn swiglu_oai_rejects_bad_operands() {
    let mut ctx = Context::with_mem_size(1 << 16);
    let a = ctx.new_tensor(DType::F32, &[8, 2]).unwrap();
    let b = ctx.new_tensor(DType::F32, &[8, 3]).unwrap();
    let h = ctx.new_tensor(DType::F16, &[8, 2]).unwrap();
    let e = expect_err("shapes", ctx.swiglu_oai(a, b, 1.702, 7.0));
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = expect_err("type", ctx.swiglu_oai(a, h, 1.702, 7.0));
    assert!(matches!(e, Error::UnsupportedType { .. }), "{e}");
    for (alpha, limit) in [(f32::NAN, 7.0), (1.702, 0.0), (1.702, f32::NAN)] {
        let e = expect_err("parameters", ctx.swiglu_oai(a, a, alpha, limit));
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    }
}

#[test]
fn add_id_adds_the_chosen_rows() {
    // [n0, n_used, n_tok] plus rows of an [n0, n_b] table chosen per (slot, token).
    let (n0, nu, nt, nb) = (19, 3, 4, 6);
    let a = values(21, n0 * nu * nt);
    let b = values(22, n0 * nb);
    let ids: Vec<i32> = (0..nu * nt).map(|k| ((k * 5 + 1) % nb) as i32).collect();
    let mut first: Option<Vec<f32>> = None;
    for threads in THREADS {
        let mut ctx = Context::with_mem_size(1 << 20);
        let (ta, _) = leaf(&mut ctx, DType::F32, [n0, nu, nt, 1], &a).unwrap();
        let (tb, _) = leaf(&mut ctx, DType::F32, [n0, nb, 1, 1], &b).unwrap();
        let ti = ids_leaf(&mut ctx, [nu, nt, 1, 1], &ids).unwrap();
        let out = ctx.add_id(ta, tb, ti).unwrap();
        assert_eq!(ctx.shape(out).unwrap(), [n0, nu, nt, 1]);
        let got = compute(&mut ctx, out, threads).unwrap();
        for (r, &id) in ids.iter().enumerate() {
            for i in 0..n0 {
                let want = a[r * n0 + i] + b[id as usize * n0 + i];
                assert_eq!(got[r * n0 + i].to_bits(), want.to_bits(), "row {r}, {i}");
            }
        }
        match &first {
            None => first = Some(got),
            Some(f) => assert_same_bits("add_id", threads, f, &got),
        }
    }
}

#[test]
fn add_id_rejects_bad_operands_and_ids() {
    let mut ctx = Context::with_mem_size(1 << 16);
    let a = ctx.new_tensor(DType::F32, &[8, 2, 3]).unwrap();
    let b = ctx.new_tensor(DType::F32, &[8, 4]).unwrap();
    let b_wide = ctx.new_tensor(DType::F32, &[9, 4]).unwrap();
    let ids = ctx.new_tensor(DType::I32, &[2, 3]).unwrap();
    let ids_short = ctx.new_tensor(DType::I32, &[2, 2]).unwrap();
    let ids_f = ctx.new_tensor(DType::F32, &[2, 3]).unwrap();
    let e = expect_err("row width", ctx.add_id(a, b_wide, ids));
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = expect_err("id count", ctx.add_id(a, b, ids_short));
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = expect_err("id type", ctx.add_id(a, b, ids_f));
    assert!(matches!(e, Error::UnsupportedType { .. }), "{e}");
    // An id past the table fails the computation with a typed error.
    for bad in [4, -1] {
        let mut ctx = Context::with_mem_size(1 << 16);
        let (ta, _) = leaf(&mut ctx, DType::F32, [4, 2, 1, 1], &[0.5; 8]).unwrap();
        let (tb, _) = leaf(&mut ctx, DType::F32, [4, 4, 1, 1], &[1.0; 16]).unwrap();
        let ti = ids_leaf(&mut ctx, [2, 1, 1, 1], &[1, bad]).unwrap();
        let out = ctx.add_id(ta, tb, ti).unwrap();
        let e = expect_err("id out of range", compute(&mut ctx, out, 2));
        assert!(matches!(e, Error::IndexOutOfRange { .. }), "{e}");
    }
}

/// `softmax` with a sink, per (query, head), in f64: `Σ_j e^(s_j − M)·v_j / (Σ_j e^(s_j − M) +
/// e^(sink − M))`, `s` the scaled scores of the visible keys.
#[allow(clippy::too_many_arguments)]
fn attn_sinks_ref(
    [dk, dv, n_q, n_kv, n_head, n_head_kv]: [usize; 6],
    q: &Arr,
    k: &Arr,
    v: &Arr,
    visible: impl Fn(usize, usize) -> bool,
    sinks: &[f32],
    scale: f32,
) -> Arr {
    let mut out = Arr::zeros([dv, n_head, n_q, 1]);
    for (h, &sink) in sinks.iter().enumerate().take(n_head) {
        let kh = h / (n_head / n_head_kv);
        for i in 0..n_q {
            let s: Vec<f64> = (0..n_kv)
                .map(|j| match visible(i, j) {
                    true => {
                        let dot: f64 = (0..dk)
                            .map(|d| q.at([d, i, h, 0]) as f64 * k.at([d, j, kh, 0]) as f64)
                            .sum();
                        dot * scale as f64
                    }
                    false => f64::NEG_INFINITY,
                })
                .collect();
            let sink = sink as f64;
            let max = s.iter().cloned().fold(sink, f64::max);
            let p: Vec<f64> = s.iter().map(|&x| (x - max).exp()).collect();
            let sum: f64 = p.iter().sum::<f64>() + (sink - max).exp();
            for d in 0..dv {
                let y: f64 = (0..n_kv).map(|j| p[j] * v.at([d, j, kh, 0]) as f64).sum();
                out.set([d, h, i, 0], (y / sum) as f32);
            }
        }
    }
    out
}

/// One flash-attention case with sinks: `[dk, dv, n_q, n_kv, n_head, n_head_kv]`, causal
/// mask or none, split-key part count, and the sink values (one per head). Returns the
/// output tensor and its reference.
fn flash_case(
    ctx: &mut Context,
    rng: &mut Rng,
    dims: [usize; 6],
    causal: bool,
    kv_splits: usize,
    sinks: &[f32],
) -> Result<(Tensor, Arr)> {
    let [dk, dv, n_q, n_kv, n_head, n_head_kv] = dims;
    let (q, qv) = input(
        ctx,
        rng,
        DType::F32,
        [dk, n_q, n_head, 1],
        Layout::Permuted([0, 2, 1, 3]),
        -1.0,
        1.0,
    )?;
    let (k, kv) = input(
        ctx,
        rng,
        DType::F16,
        [dk, n_kv, n_head_kv, 1],
        Layout::Padded,
        -1.0,
        1.0,
    )?;
    let (v, vv) = input(
        ctx,
        rng,
        DType::F16,
        [dv, n_kv, n_head_kv, 1],
        Layout::Padded,
        -1.0,
        1.0,
    )?;
    let visible = |i: usize, j: usize| !causal || j + n_q <= i + n_kv;
    let mask = if causal {
        let m: Vec<f32> = indices([n_kv, n_q, 1, 1])
            .map(|[j, i, _, _]| {
                if visible(i, j) {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        Some(leaf(ctx, DType::F16, [n_kv, n_q, 1, 1], &m)?.0)
    } else {
        None
    };
    let (ts, _) = leaf(ctx, DType::F32, [n_head, 1, 1, 1], sinks)?;
    let scale = 1.0 / (dk as f32).sqrt();
    let out = ctx.flash_attn_ext_sinks(q, k, v, mask, Some(ts), scale, 0.0, kv_splits)?;
    let want = attn_sinks_ref(dims, &qv, &kv, &vv, visible, sinks, scale);
    Ok((out, want))
}

#[test]
fn flash_attn_sinks_match_the_naive_reference() {
    // (dims, causal, kv_splits): the one-row kernel (with the grouped x86 path at d = 64),
    // the tiled kernel (≥ 64 queries), the split-key decode path (the sink in part 0 only).
    let cases: [([usize; 6], bool, usize); 6] = [
        ([16, 16, 6, 6, 4, 2], true, 1),
        ([64, 64, 5, 9, 4, 2], true, 1),
        ([32, 32, 1, 40, 4, 4], false, 1),
        ([32, 32, 70, 90, 2, 1], true, 1),
        ([64, 64, 1, 600, 4, 2], false, 2),
        ([16, 16, 1, 515, 4, 2], false, 3),
    ];
    for (dims, causal, splits) in cases {
        let n_head = dims[4];
        // Sinks below, near and above the scores (|s| ≲ √d): both of ggml's branches.
        let sinks: Vec<f32> = (0..n_head)
            .map(|h| [-3.0, 0.25, 6.0, 12.0][h % 4])
            .collect();
        let name = format!("flash_attn sinks {dims:?} causal={causal} splits={splits}");
        let tol = if dims[2] >= 64 { TOL_F32 } else { 2e-5 };
        run_case_mem(&name, tol, 32 << 20, |ctx, rng| {
            let (out, want) = flash_case(ctx, rng, dims, causal, splits, &sinks)?;
            Ok(Built::new(out, want))
        });
        // A sink of −∞ is no sink: the bits of flash_attn_ext_split.
        let none = vec![f32::NEG_INFINITY; n_head];
        let with = run_case_mem(&name, f64::INFINITY, 32 << 20, |ctx, rng| {
            let (out, want) = flash_case(ctx, rng, dims, causal, splits, &none)?;
            Ok(Built::new(out, want))
        });
        let mut ctx = Context::with_mem_size(32 << 20);
        let mut rng = Rng::from_name(&name);
        let (out, _) = flash_case(&mut ctx, &mut rng, dims, causal, splits, &none).unwrap();
        let m = ctx.meta(out).unwrap().src;
        let (q, k, v, mask) = (m[0].unwrap(), m[1].unwrap(), m[2].unwrap(), m[3]);
        let scale = 1.0 / (dims[0] as f32).sqrt();
        let plain = ctx
            .flash_attn_ext_split(q, k, v, mask, scale, splits)
            .unwrap();
        let plain = compute(&mut ctx, plain, 2).unwrap();
        assert_same_bits(&format!("{name}: −∞ sinks"), 2, &plain, &with);
    }
}

#[test]
fn soft_max_sinks_join_the_denominator() {
    let (n0, n1, n2) = (13, 3, 4);
    let x: Vec<f32> = values(31, n0 * n1 * n2).iter().map(|v| v * 4.0).collect();
    let sinks = [-1.0f32, 0.5, 3.0, 9.0];
    let scale = 0.7;
    let mut first: Option<Vec<f32>> = None;
    for threads in THREADS {
        let mut ctx = Context::with_mem_size(1 << 20);
        let (tx, _) = leaf(&mut ctx, DType::F32, [n0, n1, n2, 1], &x).unwrap();
        let (ts, _) = leaf(&mut ctx, DType::F32, [n2, 1, 1, 1], &sinks).unwrap();
        let out = ctx.soft_max_ext_sinks(tx, None, ts, scale).unwrap();
        let got = compute(&mut ctx, out, threads).unwrap();
        for r in 0..n1 * n2 {
            let row: Vec<f64> = (0..n0).map(|i| (x[r * n0 + i] * scale) as f64).collect();
            let sink = sinks[r / n1] as f64;
            let max = row.iter().cloned().fold(sink, f64::max);
            let sum: f64 = row.iter().map(|s| (s - max).exp()).sum::<f64>() + (sink - max).exp();
            for i in 0..n0 {
                let want = (row[i] - max).exp() / sum;
                let d = (got[r * n0 + i] as f64 - want).abs();
                assert!(
                    d < 4e-6 * want.max(1e-3),
                    "row {r}, {i}: {} vs {want}",
                    got[r * n0 + i]
                );
            }
            let total: f64 = (0..n0).map(|i| got[r * n0 + i] as f64).sum();
            assert!(
                total < 1.0 - 1e-4,
                "the sink takes a share of row {r}: {total}"
            );
        }
        match &first {
            None => first = Some(got),
            Some(f) => assert_same_bits("soft_max sinks", threads, f, &got),
        }
    }
}

#[test]
fn sinks_must_be_one_f32_per_head() {
    let mut ctx = Context::with_mem_size(1 << 20);
    let q = ctx.new_tensor(DType::F32, &[16, 3, 4]).unwrap();
    let k = ctx.new_tensor(DType::F16, &[16, 5, 2]).unwrap();
    let v = ctx.new_tensor(DType::F16, &[16, 5, 2]).unwrap();
    let s3 = ctx.new_tensor(DType::F32, &[3]).unwrap();
    let s16 = ctx.new_tensor(DType::F16, &[4]).unwrap();
    let s2d = ctx.new_tensor(DType::F32, &[4, 2]).unwrap();
    for (what, s, shape) in [
        ("count", s3, true),
        ("type", s16, false),
        ("rank", s2d, true),
    ] {
        let e = expect_err(
            what,
            ctx.flash_attn_ext_sinks(q, k, v, None, Some(s), 0.25, 0.0, 1),
        );
        match shape {
            true => assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}"),
            false => assert!(matches!(e, Error::UnsupportedType { .. }), "{e}"),
        }
    }
    let kq = ctx.new_tensor(DType::F32, &[5, 3, 4]).unwrap();
    let e = expect_err("soft_max count", ctx.soft_max_ext_sinks(kq, None, s3, 1.0));
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let s4 = ctx.new_tensor(DType::F32, &[4]).unwrap();
    let ok = ctx
        .flash_attn_ext_sinks(q, k, v, None, Some(s4), 0.25, 0.0, 1)
        .unwrap();
    assert_eq!(ctx.shape(ok).unwrap(), [16, 4, 3, 1]);
    assert!(ctx.soft_max_ext_sinks(kq, None, s4, 1.0).is_ok());
}
