//! Fused ops of `ggrs_core::Context` against naive references written here, and against
//! the unfused graphs they replace (which must give the same bits).
//!
//! Inputs come in several layouts (dense, permuted, transposed, padded views) and odd or
//! broadcast shapes; each case runs on 1, 2, 3 and 4 threads (see `common/cases.rs`).

use crate::common;

use common::*;
use ggrs_core::{Context, DType, Error, Executor, Graph, Result, Tensor};
use Layout::{Contig, Padded, Permuted, Transposed};

/// (a shape, a layout, w shape, w layout)
const CASES: &[([usize; 4], Layout, [usize; 4], Layout)] = &[
    ([1, 1, 1, 1], Contig, [1, 1, 1, 1], Contig),
    ([3, 1, 1, 1], Contig, [3, 1, 1, 1], Contig),
    ([17, 3, 1, 1], Contig, [17, 1, 1, 1], Contig),
    ([100, 5, 3, 1], Contig, [100, 5, 1, 1], Contig),
    ([257, 3, 2, 2], Contig, [257, 1, 2, 1], Padded),
    ([896, 7, 1, 1], Contig, [896, 1, 1, 1], Contig),
    ([17, 5, 3, 2], Permuted([2, 0, 1, 3]), [17, 1, 3, 1], Contig),
    (
        [17, 5, 3, 2],
        Permuted([0, 2, 3, 1]),
        [17, 5, 3, 2],
        Transposed,
    ),
    ([100, 7, 1, 1], Transposed, [100, 1, 1, 1], Contig),
    ([33, 4, 3, 2], Padded, [33, 2, 1, 2], Permuted([0, 2, 1, 3])),
];

/// `rms_norm_mul(a, w)` in f64: each row divided by √(mean(row²) + eps), times w (indices
/// modulo w's shape).
fn rms_norm_mul_ref(av: &Arr, wv: &Arr, eps: f32) -> Arr {
    let (ne, nw) = (av.ne, wv.ne);
    Arr::build(ne, |i| {
        let ms = (0..ne[0])
            .map(|k| {
                let x = av.at([k, i[1], i[2], i[3]]) as f64;
                x * x
            })
            .sum::<f64>()
            / ne[0] as f64;
        let w = wv.at([i[0], i[1] % nw[1], i[2] % nw[2], i[3] % nw[3]]) as f64;
        (av.at(i) as f64 / (ms + eps as f64).sqrt() * w) as f32
    })
}

#[test]
fn rms_norm_mul_against_reference() {
    for (eps, amp) in [(1e-5f32, 1.0f32), (1e-6, 1.0), (1e-5, 3e-3)] {
        for &(na, la, nw, lw) in CASES {
            let name = format!(
                "rms_norm_mul eps={eps:e} amp={amp} a{na:?} {} w{nw:?} {}",
                la.label(),
                lw.label()
            );
            run_case(&name, TOL_F32, |ctx, rng| {
                let (a, av) = input(ctx, rng, DType::F32, na, la, -2.0 * amp, 3.0 * amp)?;
                let (w, wv) = input(ctx, rng, DType::F32, nw, lw, -1.5, 1.5)?;
                let out = ctx.rms_norm_mul(a, w, eps)?;
                Ok(Built::new(out, rms_norm_mul_ref(&av, &wv, eps)))
            });
        }
    }
}

/// Computes `out` (built by `f` from inputs made with the same seed) on `threads` threads.
fn compute_with(
    name: &str,
    threads: usize,
    f: impl Fn(&mut Context, &mut Rng) -> Result<Tensor>,
) -> Vec<f32> {
    let mut ctx = Context::with_mem_size(DEFAULT_MEM);
    let mut rng = Rng::from_name(name);
    let out = f(&mut ctx, &mut rng).unwrap_or_else(|e| panic!("{name}: build: {e}"));
    let g = Graph::build(&ctx, out).unwrap_or_else(|e| panic!("{name}: graph: {e}"));
    poison_outputs(&mut ctx, &g);
    Executor::new(threads)
        .compute(&mut ctx, &g)
        .unwrap_or_else(|e| panic!("{name}: compute: {e}"));
    ctx.to_f32_vec(out)
        .unwrap_or_else(|e| panic!("{name}: read: {e}"))
}

#[test]
fn rms_norm_mul_gives_the_bits_of_rms_norm_then_mul() {
    for &(na, la, nw, lw) in CASES {
        let name = format!(
            "fused vs unfused a{na:?} {} w{nw:?} {}",
            la.label(),
            lw.label()
        );
        let make = |ctx: &mut Context, rng: &mut Rng| -> Result<(Tensor, Tensor)> {
            let (a, _) = input(ctx, rng, DType::F32, na, la, -2.0, 3.0)?;
            let (w, _) = input(ctx, rng, DType::F32, nw, lw, -1.5, 1.5)?;
            Ok((a, w))
        };
        for threads in [1, 2, 3] {
            let fused = compute_with(&name, threads, |ctx, rng| {
                let (a, w) = make(ctx, rng)?;
                ctx.rms_norm_mul(a, w, 1e-6)
            });
            let unfused = compute_with(&name, threads, |ctx, rng| {
                let (a, w) = make(ctx, rng)?;
                let h = ctx.rms_norm(a, 1e-6)?;
                ctx.mul(h, w)
            });
            assert_same_bits(&name, threads, &unfused, &fused);
        }
    }
}

/// `norm_mul_add` (LayerNorm in one node) has the bits of `norm`, `mul` and `add`, with
/// and without a bias, on every layout and row count (the mean sums run eight rows side by
/// side, then the rest one by one).
#[test]
fn norm_mul_add_gives_the_bits_of_norm_then_mul_then_add() {
    for &(na, la, nw, lw) in CASES {
        for bias in [true, false] {
            let name = format!(
                "norm_mul_add bias={bias} a{na:?} {} w{nw:?} {}",
                la.label(),
                lw.label()
            );
            let make = |ctx: &mut Context, rng: &mut Rng| -> Result<[Option<Tensor>; 3]> {
                let (a, _) = input(ctx, rng, DType::F32, na, la, -2.0, 3.0)?;
                let (w, _) = input(ctx, rng, DType::F32, nw, lw, -1.5, 1.5)?;
                let (b, _) = input(ctx, rng, DType::F32, nw, Contig, -0.5, 0.5)?;
                Ok([Some(a), Some(w), bias.then_some(b)])
            };
            for threads in [1, 2, 3] {
                let fused = compute_with(&name, threads, |ctx, rng| {
                    let [a, w, b] = make(ctx, rng)?;
                    ctx.norm_mul_add(a.unwrap(), w.unwrap(), b, 1e-12)
                });
                let unfused = compute_with(&name, threads, |ctx, rng| {
                    let [a, w, b] = make(ctx, rng)?;
                    let h = ctx.norm(a.unwrap(), 1e-12)?;
                    let h = ctx.mul(h, w.unwrap())?;
                    match b {
                        Some(b) => ctx.add(h, b),
                        None => Ok(h),
                    }
                });
                assert_same_bits(&name, threads, &unfused, &fused);
            }
        }
    }
    // A bias whose rows are shorter than a's is refused.
    let mut ctx = Context::with_mem_size(DEFAULT_MEM);
    let a = ctx.new_tensor_2d(DType::F32, 16, 3).unwrap();
    let w = ctx.new_tensor_1d(DType::F32, 16).unwrap();
    let b = ctx.new_tensor_1d(DType::F32, 8).unwrap();
    let e = expect_err("short b", ctx.norm_mul_add(a, w, Some(b), 1e-6));
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "NORM_MUL_ADD",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn rms_norm_mul_rejects_bad_operands() {
    let mut ctx = Context::with_mem_size(DEFAULT_MEM);
    let a = ctx.new_tensor_2d(DType::F32, 16, 3).unwrap();
    // w's rows must be as long as a's.
    let w = ctx.new_tensor_1d(DType::F32, 8).unwrap();
    let e = expect_err("short w", ctx.rms_norm_mul(a, w, 1e-6));
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "RMS_NORM_MUL",
                ..
            }
        ),
        "{e:?}"
    );
    // w's other axes must divide a's.
    let w = ctx.new_tensor_2d(DType::F32, 16, 2).unwrap();
    let e = expect_err("w2 ∤ a2", ctx.rms_norm_mul(a, w, 1e-6));
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "RMS_NORM_MUL",
                ..
            }
        ),
        "{e:?}"
    );
    // Only f32.
    let w = ctx.new_tensor_1d(DType::F16, 16).unwrap();
    let e = expect_err("f16 w", ctx.rms_norm_mul(a, w, 1e-6));
    assert!(
        matches!(
            e,
            Error::UnsupportedType {
                op: "RMS_NORM_MUL",
                ..
            }
        ),
        "{e:?}"
    );
    let a16 = ctx.new_tensor_2d(DType::F16, 16, 3).unwrap();
    let w = ctx.new_tensor_1d(DType::F32, 16).unwrap();
    let e = expect_err("f16 a", ctx.rms_norm_mul(a16, w, 1e-6));
    assert!(
        matches!(
            e,
            Error::UnsupportedType {
                op: "RMS_NORM_MUL",
                ..
            }
        ),
        "{e:?}"
    );
}
