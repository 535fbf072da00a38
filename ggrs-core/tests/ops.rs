//! Every op of `ggrs_core::Context` against a naive reference written here.
//!
//! Each case builds its inputs (odd sizes, broadcast shapes, permuted, transposed and
//! strided views as operands), computes the op on 1, 2, 3 and 4 threads, and checks that
//! - the one-thread result is within the NMSE bound of a reference computed with plain index
//!   loops over logical coordinates (in f64 where the op does arithmetic), and
//! - every other thread count gives the same bits.
//!
//! See `common/cases.rs` for the harness, the input layouts and the bounds.

use crate::common;

use common::*;
use ggrs_core::{Context, DType, Executor, Graph, Result, RopeMode, RopeParams, Tensor};
use Layout::{Contig, Padded, Permuted, Transposed};

/// Index `i` reduced modulo the shape `of` on every axis (the broadcast rule of b in binary
/// ops and of repeat).
fn bcast(i: [usize; 4], of: [usize; 4]) -> [usize; 4] {
    [i[0] % of[0], i[1] % of[1], i[2] % of[2], i[3] % of[3]]
}

/// Values of shape `ne` for a reduction: one value per row, from `f(row values)`.
fn per_row(x: &Arr, f: impl Fn(&[f64]) -> f64) -> Arr {
    let ne = x.ne;
    Arr::build([1, ne[1], ne[2], ne[3]], |r| {
        let row: Vec<f64> = (0..ne[0])
            .map(|i0| x.at([i0, r[1], r[2], r[3]]) as f64)
            .collect();
        f(&row) as f32
    })
}

// -------------------------------------------------------------------------------------------
// Binary arithmetic with broadcasting
// -------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
}

#[test]
fn binary_ops_with_broadcast_and_strided_operands() {
    // (a shape, b shape, a layout, b layout)
    let cases: &[([usize; 4], [usize; 4], Layout, Layout)] = &[
        ([1, 1, 1, 1], [1, 1, 1, 1], Contig, Contig),
        ([17, 3, 5, 2], [17, 3, 5, 2], Contig, Contig),
        ([17, 3, 5, 2], [17, 1, 5, 1], Contig, Contig),
        ([17, 3, 5, 2], [1, 3, 1, 2], Contig, Contig),
        ([17, 3, 5, 2], [1, 1, 1, 1], Contig, Contig),
        (
            [100, 6, 3, 1],
            [100, 2, 1, 1],
            Permuted([2, 0, 1, 3]),
            Transposed,
        ),
        (
            [17, 3, 5, 2],
            [17, 3, 5, 2],
            Transposed,
            Permuted([3, 1, 0, 2]),
        ),
        ([257, 100, 1, 1], [257, 1, 1, 1], Contig, Padded),
        ([257, 100, 1, 1], [257, 100, 1, 1], Padded, Transposed),
        ([3, 17, 4, 1], [3, 17, 2, 1], Permuted([1, 2, 0, 3]), Padded),
        (
            [1, 7, 3, 3],
            [1, 7, 1, 3],
            Transposed,
            Permuted([0, 3, 2, 1]),
        ),
    ];
    for op in [Bin::Add, Bin::Sub, Bin::Mul, Bin::Div] {
        for &(na, nb, la, lb) in cases {
            let name = format!("{op:?} a{na:?} {} b{nb:?} {}", la.label(), lb.label());
            run_case(&name, TOL_F32, |ctx, rng| {
                let (a, av) = input(ctx, rng, DType::F32, na, la, -2.0, 2.0)?;
                // Keep divisors away from zero.
                let (lo, hi) = match op {
                    Bin::Div => (0.5, 2.0),
                    _ => (-2.0, 2.0),
                };
                let (b, bv) = input(ctx, rng, DType::F32, nb, lb, lo, hi)?;
                let out = match op {
                    Bin::Add => ctx.add(a, b)?,
                    Bin::Sub => ctx.sub(a, b)?,
                    Bin::Mul => ctx.mul(a, b)?,
                    Bin::Div => ctx.div(a, b)?,
                };
                let want = Arr::build(na, |i| {
                    let x = av.at(i);
                    let y = bv.at(bcast(i, nb));
                    match op {
                        Bin::Add => x + y,
                        Bin::Sub => x - y,
                        Bin::Mul => x * y,
                        Bin::Div => x / y,
                    }
                });
                Ok(Built::new(out, want))
            });
        }
    }
}

// -------------------------------------------------------------------------------------------
// Unary element-wise ops
// -------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Un {
    Scale(f32),
    Sqr,
    Sqrt,
    Silu,
    Gelu,
    Relu,
}

fn silu_ref(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
fn gelu_ref(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

/// Shapes and layouts the row-wise and element-wise ops are tried on.
const SHAPES: &[([usize; 4], Layout)] = &[
    ([1, 1, 1, 1], Contig),
    ([3, 1, 1, 1], Contig),
    ([17, 3, 1, 1], Contig),
    ([100, 5, 3, 1], Contig),
    ([257, 3, 2, 2], Contig),
    ([257, 100, 1, 1], Contig),
    ([17, 5, 3, 2], Permuted([2, 0, 1, 3])),
    ([17, 5, 3, 2], Permuted([0, 2, 3, 1])),
    ([100, 7, 1, 1], Transposed),
    ([33, 4, 3, 2], Padded),
];

#[test]
fn unary_ops() {
    let ops = [
        Un::Scale(0.37),
        Un::Scale(-2.5),
        Un::Sqr,
        Un::Sqrt,
        Un::Silu,
        Un::Gelu,
        Un::Relu,
    ];
    for op in ops {
        for &(ne, layout) in SHAPES {
            let name = format!("{op:?} {ne:?} {}", layout.label());
            run_case(&name, TOL_F32, |ctx, rng| {
                let (lo, hi) = match op {
                    Un::Sqrt => (0.0, 4.0),
                    _ => (-5.0, 5.0),
                };
                let (a, av) = input(ctx, rng, DType::F32, ne, layout, lo, hi)?;
                let out = match op {
                    Un::Scale(s) => ctx.scale(a, s)?,
                    Un::Sqr => ctx.sqr(a)?,
                    Un::Sqrt => ctx.sqrt(a)?,
                    Un::Silu => ctx.silu(a)?,
                    Un::Gelu => ctx.gelu(a)?,
                    Un::Relu => ctx.relu(a)?,
                };
                let want = Arr::build(ne, |i| {
                    let x = av.at(i) as f64;
                    let y = match op {
                        Un::Scale(s) => x * s as f64,
                        Un::Sqr => x * x,
                        Un::Sqrt => x.sqrt(),
                        Un::Silu => silu_ref(x),
                        Un::Gelu => gelu_ref(x),
                        Un::Relu => x.max(0.0),
                    };
                    y as f32
                });
                Ok(Built::new(out, want))
            });
        }
    }
}

#[test]
fn gelu_is_the_tanh_form() {
    // On [-3, 3] the tanh form and the erf form of GELU differ by an NMSE of about 4e-8,
    // below the general f32 bound of 1e-7, so that bound cannot tell which one a kernel
    // computes. Evaluated in f32, the tanh form lands ~1e-14 from its f64 value; 1e-10 leaves
    // room for any reasonable f32 evaluation and still rejects the erf form.
    run_case("gelu tanh form", 1e-10, |ctx, rng| {
        let (a, av) = input(ctx, rng, DType::F32, [257, 40, 1, 1], Contig, -3.0, 3.0)?;
        let out = ctx.gelu(a)?;
        Ok(Built::new(
            out,
            Arr::build(av.ne, |i| gelu_ref(av.at(i) as f64) as f32),
        ))
    });
}

#[test]
fn swiglu_fused_and_split() {
    // Fused: the first half of each row is the gate, the second half the value.
    let fused: &[([usize; 4], Layout)] = &[
        ([2, 1, 1, 1], Contig),
        ([34, 3, 1, 1], Contig),
        ([200, 5, 3, 1], Contig),
        ([514, 3, 2, 2], Contig),
        ([34, 5, 3, 2], Permuted([0, 2, 1, 3])),
        ([34, 7, 1, 1], Transposed),
        ([100, 4, 3, 2], Padded),
        // One long row (a decoding step): split across threads in groups of 16, odd tail.
        ([2 * 4867, 1, 1, 1], Contig),
    ];
    for &(ne, layout) in fused {
        let name = format!("swiglu {ne:?} {}", layout.label());
        run_case(&name, TOL_F32, |ctx, rng| {
            let (a, av) = input(ctx, rng, DType::F32, ne, layout, -4.0, 4.0)?;
            let out = ctx.swiglu(a)?;
            let h = ne[0] / 2;
            let want = Arr::build([h, ne[1], ne[2], ne[3]], |i| {
                let g = av.at(i) as f64;
                let u = av.at([i[0] + h, i[1], i[2], i[3]]) as f64;
                (silu_ref(g) * u) as f32
            });
            Ok(Built::new(out, want))
        });
    }
    let split: &[([usize; 4], Layout, Layout)] = &[
        ([1, 1, 1, 1], Contig, Contig),
        ([17, 3, 1, 1], Contig, Contig),
        ([257, 5, 3, 1], Contig, Contig),
        ([17, 5, 3, 2], Permuted([2, 0, 1, 3]), Transposed),
        ([100, 7, 2, 1], Padded, Permuted([0, 2, 1, 3])),
        ([4867, 1, 1, 1], Contig, Contig),
        ([2056, 1, 1, 1], Padded, Contig),
    ];
    for &(ne, lg, lu) in split {
        let name = format!("swiglu_split {ne:?} {} {}", lg.label(), lu.label());
        run_case(&name, TOL_F32, |ctx, rng| {
            let (g, gv) = input(ctx, rng, DType::F32, ne, lg, -4.0, 4.0)?;
            let (u, uv) = input(ctx, rng, DType::F32, ne, lu, -4.0, 4.0)?;
            let out = ctx.swiglu_split(g, u)?;
            let want = Arr::build(ne, |i| (silu_ref(gv.at(i) as f64) * uv.at(i) as f64) as f32);
            Ok(Built::new(out, want))
        });
    }
}

// -------------------------------------------------------------------------------------------
// Reductions
// -------------------------------------------------------------------------------------------

#[test]
fn sum_sum_rows_mean() {
    for &(ne, layout) in SHAPES {
        let label = format!("{ne:?} {}", layout.label());
        run_case(&format!("sum {label}"), TOL_F32, |ctx, rng| {
            let (a, av) = input(ctx, rng, DType::F32, ne, layout, -1.0, 1.5)?;
            let out = ctx.sum(a)?;
            let total: f64 = av.v.iter().map(|&x| x as f64).sum();
            Ok(Built::new(
                out,
                Arr::from_vec([1, 1, 1, 1], vec![total as f32]),
            ))
        });
        run_case(&format!("sum_rows {label}"), TOL_F32, |ctx, rng| {
            let (a, av) = input(ctx, rng, DType::F32, ne, layout, -1.0, 1.5)?;
            let out = ctx.sum_rows(a)?;
            Ok(Built::new(out, per_row(&av, |r| r.iter().sum())))
        });
        run_case(&format!("mean {label}"), TOL_F32, |ctx, rng| {
            let (a, av) = input(ctx, rng, DType::F32, ne, layout, -1.0, 1.5)?;
            let out = ctx.mean(a)?;
            Ok(Built::new(
                out,
                per_row(&av, |r| r.iter().sum::<f64>() / r.len() as f64),
            ))
        });
    }
}

#[test]
fn argmax_first_index_of_the_maximum() {
    for &(ne, layout) in SHAPES {
        let name = format!("argmax {ne:?} {}", layout.label());
        // Indices are exact: a tolerance of 0.
        run_case(&name, 0.0, |ctx, rng| {
            let (a, av) = input(ctx, rng, DType::F32, ne, layout, -3.0, 3.0)?;
            let out = ctx.argmax(a)?;
            let want = Arr::build([ne[1], ne[2], ne[3], 1], |r| {
                let mut best = 0;
                for i0 in 1..ne[0] {
                    if av.at([i0, r[0], r[1], r[2]]) > av.at([best, r[0], r[1], r[2]]) {
                        best = i0;
                    }
                }
                best as f32
            });
            Ok(Built::new(out, want))
        });
    }
    // Ties: the first of equal maxima wins.
    run_case("argmax ties", 0.0, |ctx, _| {
        let rows: [[f32; 5]; 4] = [
            [1.0, 3.0, 3.0, -1.0, 3.0],
            [7.0, 7.0, 7.0, 7.0, 7.0],
            [-5.0, -4.0, -4.0, -6.0, -4.0],
            [0.0, 0.0, 0.0, 0.0, 2.0],
        ];
        let vals: Vec<f32> = rows.iter().flatten().copied().collect();
        let (a, _) = leaf(ctx, DType::F32, [5, 4, 1, 1], &vals)?;
        let out = ctx.argmax(a)?;
        Ok(Built::new(
            out,
            Arr::from_vec([4, 1, 1, 1], vec![1.0, 0.0, 1.0, 4.0]),
        ))
    });
}

#[test]
fn norm_and_rms_norm() {
    // With values of order 1, eps hardly matters; with values of order 1e-3 the variance is
    // comparable to eps, which pins down where eps enters the formula.
    for (eps, amp) in [(1e-5f32, 1.0f32), (1e-6, 1.0), (1e-5, 3e-3)] {
        for &(ne, layout) in SHAPES {
            let label = format!("eps={eps:e} amp={amp} {ne:?} {}", layout.label());
            run_case(&format!("norm {label}"), TOL_F32, |ctx, rng| {
                let (a, av) = input(ctx, rng, DType::F32, ne, layout, -2.0 * amp, 3.0 * amp)?;
                let out = ctx.norm(a, eps)?;
                let want = Arr::build(ne, |i| {
                    let row: Vec<f64> = (0..ne[0])
                        .map(|k| av.at([k, i[1], i[2], i[3]]) as f64)
                        .collect();
                    let n = row.len() as f64;
                    let mean = row.iter().sum::<f64>() / n;
                    let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
                    ((av.at(i) as f64 - mean) / (var + eps as f64).sqrt()) as f32
                });
                Ok(Built::new(out, want))
            });
            run_case(&format!("rms_norm {label}"), TOL_F32, |ctx, rng| {
                let (a, av) = input(ctx, rng, DType::F32, ne, layout, -2.0 * amp, 3.0 * amp)?;
                let out = ctx.rms_norm(a, eps)?;
                let want = Arr::build(ne, |i| {
                    let ms = (0..ne[0])
                        .map(|k| {
                            let x = av.at([k, i[1], i[2], i[3]]) as f64;
                            x * x
                        })
                        .sum::<f64>()
                        / ne[0] as f64;
                    (av.at(i) as f64 / (ms + eps as f64).sqrt()) as f32
                });
                Ok(Built::new(out, want))
            });
        }
    }
}

// -------------------------------------------------------------------------------------------
// Repeat and concat
// -------------------------------------------------------------------------------------------

#[test]
fn repeat_and_repeat_to() {
    let cases: &[([usize; 4], [usize; 4], Layout)] = &[
        ([1, 1, 1, 1], [5, 3, 2, 2], Contig),
        ([3, 1, 2, 1], [9, 4, 2, 3], Contig),
        ([17, 3, 1, 1], [17, 3, 1, 1], Contig),
        ([17, 3, 1, 1], [34, 6, 3, 1], Transposed),
        ([5, 2, 3, 1], [10, 4, 3, 2], Permuted([1, 2, 0, 3])),
        ([7, 3, 2, 1], [21, 3, 4, 3], Padded),
    ];
    for (k, &(na, ne, layout)) in cases.iter().enumerate() {
        // Alternate between repeat (shape of a tensor) and repeat_to (explicit shape).
        let via_tensor = k % 2 == 0;
        let name = format!(
            "repeat{} {na:?} -> {ne:?} {}",
            if via_tensor { "" } else { "_to" },
            layout.label()
        );
        run_case(&name, TOL_F32, |ctx, rng| {
            let (a, av) = input(ctx, rng, DType::F32, na, layout, -1.0, 1.0)?;
            let out = if via_tensor {
                // The target's data is never read: only its shape matters.
                let like = ctx.new_tensor(DType::F32, &ne)?;
                ctx.repeat(a, like)?
            } else {
                ctx.repeat_to(a, ne)?
            };
            let want = Arr::build(ne, |i| av.at(bcast(i, na)));
            Ok(Built::new(out, want))
        });
    }
}

#[test]
fn concat_on_every_dim() {
    let base = [5usize, 3, 2, 2];
    let layouts = [
        (Contig, Contig),
        (Permuted([2, 0, 3, 1]), Transposed),
        (Transposed, Padded),
        (Padded, Permuted([0, 2, 1, 3])),
    ];
    for dim in 0..4 {
        for &(la, lb) in &layouts {
            let mut na = base;
            let mut nb = base;
            na[dim] = 3;
            nb[dim] = 4;
            let name = format!(
                "concat dim {dim} a{na:?} {} b{nb:?} {}",
                la.label(),
                lb.label()
            );
            run_case(&name, TOL_F32, |ctx, rng| {
                let (a, av) = input(ctx, rng, DType::F32, na, la, -1.0, 1.0)?;
                let (b, bv) = input(ctx, rng, DType::F32, nb, lb, -1.0, 1.0)?;
                let out = ctx.concat(a, b, dim)?;
                let mut ne = na;
                ne[dim] += nb[dim];
                let want = Arr::build(ne, |i| {
                    if i[dim] < na[dim] {
                        av.at(i)
                    } else {
                        let mut j = i;
                        j[dim] -= na[dim];
                        bv.at(j)
                    }
                });
                Ok(Built::new(out, want))
            });
        }
    }
    // Odd, larger pieces along axis 0 and 1.
    run_case("concat dim 0 large", TOL_F32, |ctx, rng| {
        let (a, av) = input(ctx, rng, DType::F32, [257, 17, 1, 1], Contig, -1.0, 1.0)?;
        let (b, bv) = input(ctx, rng, DType::F32, [1, 17, 1, 1], Contig, -1.0, 1.0)?;
        let out = ctx.concat(a, b, 0)?;
        let want = Arr::build([258, 17, 1, 1], |i| {
            if i[0] < 257 {
                av.at(i)
            } else {
                bv.at([0, i[1], 0, 0])
            }
        });
        Ok(Built::new(out, want))
    });
}

// -------------------------------------------------------------------------------------------
// get_rows and set_rows
// -------------------------------------------------------------------------------------------

/// An i32 index tensor of logical shape `[n, n2, 1, 1]`, dense or transposed (a view of a
/// `[n2, n]` base), holding `vals` in logical order.
fn ids_input(
    ctx: &mut Context,
    n: usize,
    n2: usize,
    vals: &[i32],
    transposed: bool,
) -> Result<Tensor> {
    if !transposed {
        return ids_leaf(ctx, [n, n2, 1, 1], vals);
    }
    // Base element (j, i) holds logical element (i, j).
    let mut base = vec![0i32; n * n2];
    for j in 0..n2 {
        for i in 0..n {
            base[j + n2 * i] = vals[i + n * j];
        }
    }
    let b = ids_leaf(ctx, [n2, n, 1, 1], &base)?;
    ctx.transpose(b)
}

#[test]
fn get_rows_f32_f16_bf16() {
    // (a shape [n0, rows, n2, n3], ids per (n2, n3), a layout, ids transposed)
    let cases: &[([usize; 4], usize, Layout, bool)] = &[
        ([1, 1, 1, 1], 1, Contig, false),
        ([17, 10, 1, 1], 5, Contig, false),
        ([3, 7, 2, 3], 4, Contig, false),
        ([100, 257, 1, 1], 33, Contig, false),
        ([257, 3, 1, 1], 17, Padded, false),
        ([17, 9, 4, 1], 6, Contig, true),
        ([33, 5, 3, 1], 2, Padded, true),
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let tol = match dtype {
            DType::F32 => TOL_F32,
            DType::F16 => TOL_F16,
            _ => TOL_BF16,
        };
        for &(na, n, layout, ids_t) in cases {
            if ids_t && na[3] != 1 {
                continue;
            }
            let name = format!(
                "get_rows {dtype} a{na:?} {} ids [{n}, {}, {}]{}",
                layout.label(),
                na[2],
                na[3],
                if ids_t { " transposed" } else { "" }
            );
            run_case(&name, tol, |ctx, rng| {
                let (a, av) = input(ctx, rng, dtype, na, layout, -3.0, 3.0)?;
                let ne_ids = [n, na[2], na[3], 1];
                let ids: Vec<i32> = (0..nelem(ne_ids))
                    .map(|_| rng.below(na[1]) as i32)
                    .collect();
                let idt = if ids_t {
                    ids_input(ctx, n, na[2], &ids, true)?
                } else {
                    ids_leaf(ctx, ne_ids, &ids)?
                };
                let out = ctx.get_rows(a, idt)?;
                let want = Arr::build([na[0], n, na[2], na[3]], |i| {
                    let row = ids[flat(ne_ids, [i[1], i[2], i[3], 0])] as usize;
                    av.at([i[0], row, i[2], i[3]])
                });
                Ok(Built::new(out, want))
            });
        }
    }
}

#[test]
fn set_rows_f32_f16_bf16() {
    // (dst shape [n0, rows, n2, n3], rows written n, ids broadcast (m2, m3), src layout,
    //  dst layout)
    type Case = ([usize; 4], usize, (usize, usize), Layout, Layout);
    let cases: &[Case] = &[
        ([1, 1, 1, 1], 1, (1, 1), Contig, Contig),
        ([17, 10, 1, 1], 3, (1, 1), Contig, Contig),
        ([3, 7, 2, 3], 4, (2, 3), Contig, Contig),
        ([3, 7, 4, 3], 5, (2, 1), Contig, Contig),
        ([100, 33, 2, 1], 17, (1, 1), Transposed, Contig),
        ([17, 9, 3, 2], 9, (3, 2), Permuted([0, 2, 1, 3]), Padded),
        ([257, 5, 1, 1], 2, (1, 1), Padded, Padded),
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let tol = match dtype {
            DType::F32 => TOL_F32,
            DType::F16 => TOL_F16,
            _ => TOL_BF16,
        };
        for &(nd, n, (m2, m3), ls, ld) in cases {
            let name = format!(
                "set_rows {dtype} dst{nd:?} {} n={n} ids[{n},{m2},{m3}] src {}",
                ld.label(),
                ls.label()
            );
            run_case(&name, tol, |ctx, rng| {
                let (dst, dv) = input(ctx, rng, dtype, nd, ld, -1.0, 1.0)?;
                let ns = [nd[0], n, nd[2], nd[3]];
                let (src, sv) = input(ctx, rng, DType::F32, ns, ls, -5.0, 5.0)?;
                // Distinct rows for each (j2, k3) of the ids, so no row is written twice.
                let ne_ids = [n, m2, m3, 1];
                let mut ids = vec![0i32; nelem(ne_ids)];
                for k in 0..m3 {
                    for j in 0..m2 {
                        let p = rng.permutation(nd[1]);
                        for i in 0..n {
                            ids[flat(ne_ids, [i, j, k, 0])] = p[i] as i32;
                        }
                    }
                }
                let idt = ids_leaf(ctx, ne_ids, &ids)?;
                let out = ctx.set_rows(dst, src, idt)?;
                let mut want = dv.clone();
                for k in 0..nd[3] {
                    for j in 0..nd[2] {
                        for i in 0..n {
                            let row = ids[flat(ne_ids, [i, j % m2, k % m3, 0])] as usize;
                            for c in 0..nd[0] {
                                want.set([c, row, j, k], round_to(dtype, sv.at([c, i, j, k])));
                            }
                        }
                    }
                }
                Ok(Built::new(out, want))
            });
        }
    }
}

// -------------------------------------------------------------------------------------------
// mul_mat
// -------------------------------------------------------------------------------------------

#[test]
fn mul_mat_f32_f16_bf16_with_broadcast() {
    // (k, n, m, a batches [a2, a3], b batches [b2, b3], a layout, b layout)
    type Case = (usize, usize, usize, [usize; 2], [usize; 2], Layout, Layout);
    let cases: &[Case] = &[
        (1, 1, 1, [1, 1], [1, 1], Contig, Contig),
        (3, 5, 7, [1, 1], [1, 1], Contig, Contig),
        (17, 33, 3, [1, 1], [1, 1], Contig, Contig),
        (257, 17, 1, [1, 1], [1, 1], Contig, Contig),
        (100, 100, 33, [1, 1], [1, 1], Contig, Contig),
        // Grouped-query attention: a [k, n, 2, 1] with b [k, m, 6, 1].
        (64, 9, 5, [2, 1], [6, 1], Contig, Contig),
        (17, 20, 3, [2, 3], [4, 6], Contig, Contig),
        (100, 3, 17, [1, 1], [3, 2], Contig, Contig),
        // Strided operands: a permuted with dense rows, b transposed or permuted.
        (17, 9, 5, [2, 1], [6, 1], Permuted([0, 2, 1, 3]), Transposed),
        (100, 7, 11, [3, 1], [3, 1], Padded, Permuted([0, 2, 1, 3])),
        (
            33,
            16,
            9,
            [1, 2],
            [2, 4],
            Permuted([0, 3, 2, 1]),
            Permuted([1, 2, 0, 3]),
        ),
        (1, 4, 6, [1, 1], [1, 1], Contig, Transposed),
        (
            257,
            5,
            3,
            [1, 1],
            [1, 1],
            Permuted([0, 2, 1, 3]),
            Transposed,
        ),
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let tol = match dtype {
            DType::F32 => TOL_F32,
            DType::F16 => TOL_F16,
            _ => TOL_BF16,
        };
        for &(k, n, m, [a2, a3], [b2, b3], la, lb) in cases {
            let na = [k, n, a2, a3];
            let nb = [k, m, b2, b3];
            let name = format!(
                "mul_mat {dtype} a{na:?} {} b{nb:?} {}",
                la.label(),
                lb.label()
            );
            run_case(&name, tol, |ctx, rng| {
                let (a, av) = input(ctx, rng, dtype, na, la, -1.0, 1.0)?;
                let (b, bv) = input(ctx, rng, DType::F32, nb, lb, -1.0, 1.0)?;
                let out = ctx.mul_mat(a, b)?;
                // out[i, j, i2, i3] = Σ_k a[k, i, i2 / (b2 / a2), i3 / (b3 / a3)] · b[k, j, i2, i3]
                let (r2, r3) = (b2 / a2, b3 / a3);
                let want = Arr::build([n, m, b2, b3], |o| {
                    let [i, j, i2, i3] = o;
                    let mut s = 0f64;
                    for kk in 0..k {
                        s +=
                            av.at([kk, i, i2 / r2, i3 / r3]) as f64 * bv.at([kk, j, i2, i3]) as f64;
                    }
                    s as f32
                });
                Ok(Built::new(out, want))
            });
        }
    }
}

// -------------------------------------------------------------------------------------------
// Attention pieces: causal mask, softmax, rope
// -------------------------------------------------------------------------------------------

#[test]
fn diag_mask_inf_causal() {
    let cases: &[([usize; 4], usize, Layout)] = &[
        ([1, 1, 1, 1], 0, Contig),
        ([5, 5, 2, 1], 0, Contig),
        ([7, 3, 2, 2], 4, Contig),
        ([17, 17, 3, 1], 0, Permuted([1, 0, 3, 2])),
        ([17, 6, 2, 1], 11, Transposed),
        ([100, 9, 1, 2], 3, Padded),
    ];
    for &(ne, n_past, layout) in cases {
        let name = format!("diag_mask_inf {ne:?} n_past={n_past} {}", layout.label());
        run_case(&name, TOL_F32, |ctx, rng| {
            let (a, av) = input(ctx, rng, DType::F32, ne, layout, -2.0, 2.0)?;
            let out = ctx.diag_mask_inf(a, n_past)?;
            let want = Arr::build(ne, |i| {
                if i[0] > n_past + i[1] {
                    f32::NEG_INFINITY
                } else {
                    av.at(i)
                }
            });
            Ok(Built::new(out, want))
        });
    }
}

/// Softmax of `x·scale + mask` along each row, in f64; rows that are all −∞ give zeros.
fn soft_max_ref(x: &Arr, mask: Option<&Arr>, scale: f32) -> Arr {
    let ne = x.ne;
    let mut out = Arr::zeros(ne);
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                let z: Vec<f64> = (0..ne[0])
                    .map(|i0| {
                        let m = match mask {
                            Some(mk) => mk.at([i0, i1, i2 % mk.ne[2], i3 % mk.ne[3]]) as f64,
                            None => 0.0,
                        };
                        x.at([i0, i1, i2, i3]) as f64 * scale as f64 + m
                    })
                    .collect();
                let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if max == f64::NEG_INFINITY {
                    continue;
                }
                let e: Vec<f64> = z.iter().map(|v| (v - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (i0, v) in e.iter().enumerate() {
                    out.set([i0, i1, i2, i3], (v / sum) as f32);
                }
            }
        }
    }
    out
}

#[test]
fn soft_max_ext_with_and_without_mask() {
    // (a shape, a layout, mask: None or (type, [m1, m2, m3]), scale)
    type Case = ([usize; 4], Layout, Option<(DType, [usize; 3])>, f32);
    let cases: &[Case] = &[
        ([1, 1, 1, 1], Contig, None, 1.0),
        ([17, 5, 3, 2], Contig, None, 1.0),
        ([257, 4, 1, 1], Contig, None, 0.125),
        ([100, 7, 2, 1], Transposed, None, 0.7),
        ([17, 5, 3, 2], Permuted([1, 2, 0, 3]), None, 2.0),
        ([17, 5, 3, 2], Contig, Some((DType::F32, [5, 1, 1])), 1.0),
        ([17, 5, 3, 2], Contig, Some((DType::F16, [5, 1, 1])), 0.3),
        // The mask has more rows than a (a KV-padded mask): row j of a uses mask row j.
        ([17, 5, 3, 2], Contig, Some((DType::F32, [9, 1, 1])), 0.5),
        ([33, 3, 2, 1], Padded, Some((DType::F16, [8, 1, 1])), 0.125),
        // Broadcast of the mask over axes 2 and 3.
        ([17, 4, 6, 2], Contig, Some((DType::F32, [4, 3, 1])), 1.0),
        (
            [17, 4, 6, 2],
            Transposed,
            Some((DType::F16, [6, 2, 2])),
            0.25,
        ),
        (
            [100, 3, 2, 1],
            Permuted([0, 2, 1, 3]),
            Some((DType::F32, [3, 2, 1])),
            0.1,
        ),
    ];
    for &(ne, layout, mask, scale) in cases {
        let mlabel = match mask {
            None => "no mask".to_string(),
            Some((t, m)) => format!("mask {t} [{}, {}, {}, {}]", ne[0], m[0], m[1], m[2]),
        };
        let tol = match mask {
            Some((DType::F16, _)) => TOL_F16,
            _ => TOL_F32,
        };
        let name = format!(
            "soft_max_ext {ne:?} {} {mlabel} scale={scale}",
            layout.label()
        );
        run_case(&name, tol, |ctx, rng| {
            let (a, av) = input(ctx, rng, DType::F32, ne, layout, -3.0, 3.0)?;
            let (mt, mv) = match mask {
                None => (None, None),
                Some((dtype, [m1, m2, m3])) => {
                    let nm = [ne[0], m1, m2, m3];
                    // A causal pattern of −∞ with random values elsewhere; the last row of
                    // a mask with more than one row is all −∞ (its softmax is all zeros).
                    let vals: Vec<f32> = indices(nm)
                        .map(|i| {
                            let all_masked = m1 > 1 && i[1] == ne[1] - 1 && i[2] == 0;
                            if all_masked || i[0] > i[1] + ne[0] / 2 {
                                f32::NEG_INFINITY
                            } else {
                                rng.uniform(-2.0, 0.5)
                            }
                        })
                        .collect();
                    let (t, v) = leaf(ctx, dtype, nm, &vals)?;
                    (Some(t), Some(v))
                }
            };
            let out = ctx.soft_max_ext(a, mt, scale)?;
            Ok(Built::new(out, soft_max_ref(&av, mv.as_ref(), scale)))
        });
    }
    // The mask as a strided view (rows dense, padded) into a larger f16 tensor, as a mask
    // padded for the KV cache is viewed.
    for (ne0, ne1, m_rows) in [(17usize, 5usize, 5usize), (40, 3, 8)] {
        let name = format!(
            "soft_max_ext [{ne0}, {ne1}] mask view of f16 [{}, {}]",
            ne0 + 7,
            m_rows + 2
        );
        run_case(&name, TOL_F16, |ctx, rng| {
            let (a, av) = input(ctx, rng, DType::F32, [ne0, ne1, 1, 1], Contig, -3.0, 3.0)?;
            let nm_base = [ne0 + 7, m_rows + 2, 1, 1];
            let vals: Vec<f32> = indices(nm_base)
                .map(|i| {
                    if i[0] % 5 == 4 {
                        f32::NEG_INFINITY
                    } else {
                        rng.uniform(-2.0, 0.0)
                    }
                })
                .collect();
            let (mb, mbv) = leaf(ctx, DType::F16, nm_base, &vals)?;
            // m_rows rows of ne0 values from (3, 1).
            let mask = ctx.view_2d(mb, ne0, m_rows, nm_base[0] * 2, (nm_base[0] + 3) * 2)?;
            let mv = Arr::build([ne0, m_rows, 1, 1], |i| mbv.at([i[0] + 3, i[1] + 1, 0, 0]));
            let out = ctx.soft_max_ext(a, Some(mask), 0.5)?;
            Ok(Built::new(out, soft_max_ref(&av, Some(&mv), 0.5)))
        });
    }
    // soft_max is soft_max_ext without mask and scale 1.
    run_case("soft_max plain", TOL_F32, |ctx, rng| {
        let (a, av) = input(ctx, rng, DType::F32, [17, 3, 2, 1], Contig, -3.0, 3.0)?;
        let out = ctx.soft_max(a)?;
        Ok(Built::new(out, soft_max_ref(&av, None, 1.0)))
    });
}

/// RoPE in f64: for token t at position p, pair i (i < n_dims/2) turns by
/// θ = p · freq_scale · base^(−2i/n_dims); pairs are (2i, 2i+1) in Normal mode and
/// (i, i + n_dims/2) in Neox mode; dimensions from n_dims on are copied.
fn rope_ref(x: &Arr, pos: &[i32], p: RopeParams) -> Arr {
    rope_ref_factors(x, pos, None, p)
}

/// [`rope_ref`] with per-pair frequency factors: pair i turns by
/// θ = p · freq_scale · base^(−2i/n_dims) / factors[i].
fn rope_ref_factors(x: &Arr, pos: &[i32], factors: Option<&[f32]>, p: RopeParams) -> Arr {
    let ne = x.ne;
    let half = p.n_dims / 2;
    let mut out = x.clone();
    assert_eq!(pos.len(), ne[2], "one position per token");
    for i3 in 0..ne[3] {
        for (i2, &p_tok) in pos.iter().enumerate() {
            for i1 in 0..ne[1] {
                for i in 0..half {
                    let theta = p_tok as f64
                        * p.freq_scale as f64
                        * (p.freq_base as f64).powf(-2.0 * i as f64 / p.n_dims as f64)
                        / factors.map_or(1.0, |f| f[i] as f64);
                    let (s, c) = theta.sin_cos();
                    let (j0, j1) = match p.mode {
                        RopeMode::Normal => (2 * i, 2 * i + 1),
                        RopeMode::Neox => (i, i + half),
                    };
                    let x0 = x.at([j0, i1, i2, i3]) as f64;
                    let x1 = x.at([j1, i1, i2, i3]) as f64;
                    out.set([j0, i1, i2, i3], (x0 * c - x1 * s) as f32);
                    out.set([j1, i1, i2, i3], (x0 * s + x1 * c) as f32);
                }
            }
        }
    }
    out
}

#[test]
fn rope_normal_and_neox_partial_rotary() {
    // (a shape [head_dim, n_head, n_tokens, n3], n_dims, freq_base, freq_scale, layout,
    //  largest position step)
    type Case = ([usize; 4], usize, f32, f32, Layout, usize);
    let cases: &[Case] = &[
        ([2, 1, 1, 1], 2, 10000.0, 1.0, Contig, 1),
        ([8, 3, 5, 1], 8, 10000.0, 1.0, Contig, 1),
        ([64, 4, 7, 1], 64, 10000.0, 1.0, Contig, 300),
        // Partial rotary: only the leading n_dims dimensions turn.
        ([64, 3, 5, 2], 32, 10000.0, 1.0, Contig, 300),
        ([34, 2, 9, 1], 6, 500.0, 1.0, Contig, 300),
        ([128, 2, 3, 1], 64, 1_000_000.0, 0.25, Contig, 300),
        ([17, 3, 4, 1], 10, 10000.0, 0.5, Contig, 300),
        // Long contexts: positions in the tens of thousands. The kernel builds θ with ggml's
        // f32 recurrence (θ_{i+1} = θ_i · base^(−2/n_dims)), whose rounding grows with the
        // position: NMSE ~1e-8 here against ~1e-11 for positions below 1000, still under
        // the f32 bound.
        ([64, 2, 6, 1], 64, 10000.0, 1.0, Contig, 8000),
        ([128, 2, 4, 1], 96, 1_000_000.0, 1.0, Contig, 10000),
        // Strided inputs: heads and tokens swapped in memory (as after a permute), a
        // transposed view, padded rows.
        ([64, 4, 6, 1], 64, 10000.0, 1.0, Permuted([0, 2, 1, 3]), 300),
        ([16, 5, 3, 2], 12, 10000.0, 1.0, Transposed, 300),
        ([32, 3, 5, 1], 16, 20000.0, 2.0, Padded, 300),
    ];
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for &(ne, n_dims, freq_base, freq_scale, layout, step) in cases {
            let p = RopeParams {
                n_dims,
                mode,
                freq_base,
                freq_scale,
            };
            let name = format!(
                "rope {mode:?} {ne:?} n_dims={n_dims} base={freq_base} scale={freq_scale} {} \
                 step={step}",
                layout.label()
            );
            run_case(&name, TOL_F32, |ctx, rng| {
                let (a, av) = input(ctx, rng, DType::F32, ne, layout, -1.0, 1.0)?;
                // Positions: increasing from 0 by random steps of 1..=step.
                let mut pos = vec![0i32; ne[2]];
                for t in 1..ne[2] {
                    pos[t] = pos[t - 1] + 1 + rng.below(step) as i32;
                }
                let pt = if layout == Padded {
                    // Positions as a view into a longer i32 tensor, from its third entry.
                    let mut all = vec![-7i32; ne[2] + 3];
                    all[2..2 + ne[2]].copy_from_slice(&pos);
                    let base = ids_leaf(ctx, [ne[2] + 3, 1, 1, 1], &all)?;
                    ctx.view_1d(base, ne[2], 2 * 4)?
                } else {
                    ids_leaf(ctx, [ne[2], 1, 1, 1], &pos)?
                };
                let out = if freq_base == 10000.0 && freq_scale == 1.0 {
                    ctx.rope(a, pt, n_dims, mode)?
                } else {
                    ctx.rope_ext(a, pt, p)?
                };
                Ok(Built::new(out, rope_ref(&av, &pos, p)))
            });
        }
    }
}

/// Llama 3.1's rotary scaling: per-pair factors divide each pair's angle (the factors of
/// `tiny-llama3-f16.gguf`, and random ones), against the direct formula; factors of 1 give
/// `rope_ext`'s bits; a factor table of the wrong length is an error.
#[test]
fn rope_with_frequency_factors() {
    let llama3: Vec<f32> = [1.0, 1.0, 1.0, 1.179, 3.569]
        .into_iter()
        .chain(std::iter::repeat_n(8.0, 11))
        .collect();
    // (a shape, n_dims, freq_base, freq_scale, layout)
    type Case = ([usize; 4], usize, f32, f32, Layout);
    let cases: &[Case] = &[
        ([32, 4, 7, 1], 32, 500_000.0, 1.0, Contig),
        ([32, 2, 5, 1], 32, 500_000.0, 0.5, Permuted([0, 2, 1, 3])),
        ([40, 3, 6, 1], 24, 10000.0, 1.0, Padded),
    ];
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for &(ne, n_dims, freq_base, freq_scale, layout) in cases {
            let p = RopeParams {
                n_dims,
                mode,
                freq_base,
                freq_scale,
            };
            let name = format!(
                "rope factors {mode:?} {ne:?} n_dims={n_dims} {}",
                layout.label()
            );
            run_case(&name, TOL_F32, |ctx, rng| {
                let (a, av) = input(ctx, rng, DType::F32, ne, layout, -1.0, 1.0)?;
                let mut pos = vec![0i32; ne[2]];
                for t in 1..ne[2] {
                    pos[t] = pos[t - 1] + 1 + rng.below(300) as i32;
                }
                let pt = ids_leaf(ctx, [ne[2], 1, 1, 1], &pos)?;
                let ff = match n_dims {
                    32 => llama3.clone(),
                    _ => rng.vec(n_dims / 2, 0.5, 9.0),
                };
                let (f, _) = leaf(ctx, DType::F32, [n_dims / 2, 1, 1, 1], &ff)?;
                let out = ctx.rope_ext_factors(a, pt, Some(f), p)?;
                Ok(Built::new(out, rope_ref_factors(&av, &pos, Some(&ff), p)))
            });
        }
    }

    // Factors of 1 change nothing: the same bits as without factors.
    let mut ctx = Context::with_mem_size(1 << 20);
    let mut rng = Rng::from_name("rope factors of 1");
    let p = RopeParams {
        n_dims: 32,
        mode: RopeMode::Normal,
        freq_base: 500_000.0,
        freq_scale: 1.0,
    };
    let (a, _) = input(
        &mut ctx,
        &mut rng,
        DType::F32,
        [32, 2, 5, 1],
        Contig,
        -1.0,
        1.0,
    )
    .expect("input");
    let pt = ids_leaf(&mut ctx, [5, 1, 1, 1], &[0, 3, 90, 1000, 4000]).expect("pos");
    let (ones, _) = leaf(&mut ctx, DType::F32, [16, 1, 1, 1], &[1.0; 16]).expect("ones");
    let plain = ctx.rope_ext(a, pt, p).expect("rope");
    let with = ctx.rope_ext_factors(a, pt, Some(ones), p).expect("rope");
    let mut g = Graph::new();
    for t in [plain, with] {
        g.build_forward_expand(&ctx, t).expect("graph");
    }
    Executor::new(2).compute(&mut ctx, &g).expect("compute");
    let x = ctx.to_f32_vec(plain).expect("read");
    let y = ctx.to_f32_vec(with).expect("read");
    assert_same_bits("rope factors of 1", 2, &x, &y);

    // One factor per rotated pair, no more, no fewer.
    let (short, _) = leaf(&mut ctx, DType::F32, [15, 1, 1, 1], &[1.0; 15]).expect("leaf");
    expect_err(
        "15 factors for 16 pairs",
        ctx.rope_ext_factors(a, pt, Some(short), p),
    );
}

// -------------------------------------------------------------------------------------------
// Copies and conversions
// -------------------------------------------------------------------------------------------

fn tol_for(types: &[DType]) -> f64 {
    if types.contains(&DType::BF16) {
        TOL_BF16
    } else if types.contains(&DType::F16) {
        TOL_F16
    } else {
        TOL_F32
    }
}

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[test]
fn cont_dup_cast_between_float_types() {
    let shapes: &[([usize; 4], Layout)] = &[
        ([1, 1, 1, 1], Contig),
        ([17, 3, 1, 1], Contig),
        ([257, 100, 1, 1], Transposed),
        ([17, 5, 3, 2], Permuted([3, 0, 2, 1])),
        ([100, 3, 2, 2], Padded),
        ([3, 17, 4, 1], Permuted([1, 2, 0, 3])),
    ];
    for from in FLOATS {
        for to in FLOATS {
            for &(ne, layout) in shapes {
                let name = format!("cast {from} -> {to} {ne:?} {}", layout.label());
                run_case(&name, tol_for(&[from, to]), |ctx, rng| {
                    let (a, av) = input(ctx, rng, from, ne, layout, -100.0, 100.0)?;
                    let out = if from == to {
                        ctx.cont(a)?
                    } else {
                        ctx.cast(a, to)?
                    };
                    let want = Arr::build(ne, |i| round_to(to, av.at(i)));
                    Ok(Built::new(out, want))
                });
            }
        }
    }
    run_case("dup permuted", TOL_F32, |ctx, rng| {
        let (a, av) = input(
            ctx,
            rng,
            DType::F32,
            [7, 5, 3, 1],
            Permuted([2, 1, 0, 3]),
            -1.0,
            1.0,
        )?;
        let out = ctx.dup(a)?;
        Ok(Built::new(out, av))
    });
}

#[test]
fn cpy_same_and_other_shapes() {
    // Same shape, any pair of types, destination dense or strided.
    let same: &[([usize; 4], Layout, Layout)] = &[
        ([17, 3, 1, 1], Contig, Contig),
        ([17, 5, 3, 2], Permuted([2, 0, 1, 3]), Contig),
        ([33, 7, 2, 1], Contig, Transposed),
        ([100, 3, 2, 2], Transposed, Padded),
        ([257, 100, 1, 1], Contig, Transposed),
    ];
    for from in FLOATS {
        for to in FLOATS {
            for &(ne, la, lb) in same {
                let name = format!("cpy {from} {} -> {to} {} {ne:?}", la.label(), lb.label());
                run_case(&name, tol_for(&[from, to]), |ctx, rng| {
                    let (a, av) = input(ctx, rng, from, ne, la, -10.0, 10.0)?;
                    let (b, _) = input(ctx, rng, to, ne, lb, -1.0, 1.0)?;
                    let out = ctx.cpy(a, b)?;
                    let want = Arr::build(ne, |i| round_to(to, av.at(i)));
                    Ok(Built::new(out, want))
                });
            }
        }
    }
    // Other shapes with as many elements: element k (logical order) of a goes to element k
    // of b.
    let reshaping: &[([usize; 4], Layout, [usize; 4], Layout)] = &[
        ([17, 3, 5, 1], Contig, [51, 5, 1, 1], Contig),
        (
            [17, 3, 5, 1],
            Permuted([1, 0, 2, 3]),
            [255, 1, 1, 1],
            Contig,
        ),
        ([6, 5, 4, 1], Contig, [5, 4, 6, 1], Transposed),
        ([257, 100, 1, 1], Transposed, [100, 257, 1, 1], Contig),
    ];
    for (from, to) in [
        (DType::F32, DType::F32),
        (DType::F32, DType::F16),
        (DType::F16, DType::BF16),
        (DType::BF16, DType::F32),
    ] {
        for &(na, la, nb, lb) in reshaping {
            let name = format!(
                "cpy {from} a{na:?} {} -> {to} b{nb:?} {}",
                la.label(),
                lb.label()
            );
            run_case(&name, tol_for(&[from, to]), |ctx, rng| {
                let (a, av) = input(ctx, rng, from, na, la, -10.0, 10.0)?;
                let (b, _) = input(ctx, rng, to, nb, lb, -1.0, 1.0)?;
                let out = ctx.cpy(a, b)?;
                // Both arrays are in logical order: element k to element k.
                let want = Arr::from_vec(nb, av.v.iter().map(|&x| round_to(to, x)).collect());
                Ok(Built::new(out, want))
            });
        }
    }
}

#[test]
fn cpy_into_a_cache_view_leaves_the_rest_alone() {
    // A KV-cache write: rows [at, at + n) of an f16 cache [d, cells, heads] receive new rows
    // through a 3-D view; the whole cache is read back.
    for (d, cells, heads, at, n) in [(16, 10, 3, 4, 3), (17, 33, 2, 0, 33), (64, 9, 1, 8, 1)] {
        for dtype in [DType::F16, DType::F32] {
            let name = format!(
                "cpy into {dtype} cache [{d}, {cells}, {heads}] rows {at}..{}",
                at + n
            );
            run_case(&name, tol_for(&[dtype]), |ctx, rng| {
                let cache_ne = [d, cells, heads, 1];
                let (cache, cv) = input(ctx, rng, dtype, cache_ne, Contig, -1.0, 1.0)?;
                let ts = dtype.type_size();
                let view = ctx.view_3d(cache, d, n, heads, d * ts, d * cells * ts, at * d * ts)?;
                // New rows, given as a permuted f32 tensor [d, heads, n] → [d, n, heads].
                let (k, kv) = input(
                    ctx,
                    rng,
                    DType::F32,
                    [d, n, heads, 1],
                    Permuted([0, 2, 1, 3]),
                    -3.0,
                    3.0,
                )?;
                let w = ctx.cpy(k, view)?;
                let mut want = cv.clone();
                for h in 0..heads {
                    for r in 0..n {
                        for c in 0..d {
                            want.set([c, at + r, h, 0], round_to(dtype, kv.at([c, r, h, 0])));
                        }
                    }
                }
                Ok(Built {
                    expand: vec![w],
                    read: cache,
                    want,
                })
            });
        }
    }
}

// -------------------------------------------------------------------------------------------
// Views read through ops
// -------------------------------------------------------------------------------------------

#[test]
fn views_read_through_ops() {
    let ne = [17usize, 6, 3, 2];
    let es = 4; // f32
                // view_1d: 10 values from flat position 7.
    run_case("view_1d", TOL_F32, |ctx, rng| {
        let (a, av) = input(ctx, rng, DType::F32, ne, Contig, -1.0, 1.0)?;
        let v = ctx.view_1d(a, 10, 7 * es)?;
        let out = ctx.cont(v)?;
        Ok(Built::new(
            out,
            Arr::from_vec([10, 1, 1, 1], av.v[7..17].to_vec()),
        ))
    });
    // view_2d: 4 rows of 5 from (3, 1, 0), rows 17 apart.
    run_case("view_2d", TOL_F32, |ctx, rng| {
        let (a, av) = input(ctx, rng, DType::F32, ne, Contig, -1.0, 1.0)?;
        let v = ctx.view_2d(a, 5, 4, ne[0] * es, (ne[0] + 3) * es)?;
        let out = ctx.scale(v, 1.0)?;
        let want = Arr::build([5, 4, 1, 1], |i| av.at([3 + i[0], 1 + i[1], 0, 0]));
        Ok(Built::new(out, want))
    });
    // view_3d: every other row, planes as in the source, from (2, 1, 1).
    run_case("view_3d", TOL_F32, |ctx, rng| {
        let (a, av) = input(ctx, rng, DType::F32, ne, Contig, -1.0, 1.0)?;
        let nb1 = 2 * ne[0] * es;
        let nb2 = ne[0] * ne[1] * es;
        let off = (2 + ne[0] + ne[0] * ne[1]) * es;
        let v = ctx.view_3d(a, 9, 2, 4, nb1, nb2, off)?;
        let out = ctx.cont(v)?;
        let want = Arr::build([9, 2, 4, 1], |i| {
            // Plane index 1 + i2 runs past ne[2] = 3 into the next i3, as flat memory does.
            let p = 1 + i[2];
            av.at([2 + i[0], 1 + 2 * i[1], p % ne[2], p / ne[2]])
        });
        Ok(Built::new(out, want))
    });
    // view_4d: a [4, 3, 2, 2] window with the source's strides, at (1, 2, 1, 0).
    run_case("view_4d", TOL_F32, |ctx, rng| {
        let (a, av) = input(ctx, rng, DType::F32, ne, Contig, -1.0, 1.0)?;
        let nb1 = ne[0] * es;
        let nb2 = nb1 * ne[1];
        let nb3 = nb2 * ne[2];
        let off = es + 2 * nb1 + nb2;
        let v = ctx.view_4d(a, [4, 3, 2, 2], nb1, nb2, nb3, off)?;
        let b = ctx.new_tensor(DType::F32, &[4, 3, 2, 2])?;
        ctx.set_f32(b, &[0.5; 48])?;
        let out = ctx.add(v, b)?;
        let want = Arr::build([4, 3, 2, 2], |i| {
            av.at([1 + i[0], 2 + i[1], 1 + i[2], i[3]]) + 0.5
        });
        Ok(Built::new(out, want))
    });
    // reshape_1d..4d keep the flat order.
    for shape in [
        vec![612usize],
        vec![34, 18],
        vec![51, 4, 3],
        vec![3, 34, 2, 3],
    ] {
        let name = format!("reshape {shape:?}");
        run_case(&name, TOL_F32, |ctx, rng| {
            let (a, av) = input(ctx, rng, DType::F32, ne, Contig, -1.0, 1.0)?;
            let r = match shape.len() {
                1 => ctx.reshape_1d(a, shape[0])?,
                2 => ctx.reshape_2d(a, shape[0], shape[1])?,
                3 => ctx.reshape_3d(a, shape[0], shape[1], shape[2])?,
                _ => ctx.reshape_4d(a, shape[0], shape[1], shape[2], shape[3])?,
            };
            let out = ctx.relu(r)?;
            let mut ne4 = [1; 4];
            ne4[..shape.len()].copy_from_slice(&shape);
            Ok(Built::new(
                out,
                Arr::from_vec(ne4, av.v.iter().map(|&x| x.max(0.0)).collect()),
            ))
        });
    }
    // Every permutation of 4 axes, read through cont.
    let mut perms = Vec::new();
    for p0 in 0..4 {
        for p1 in 0..4 {
            for p2 in 0..4 {
                for p3 in 0..4 {
                    let p = [p0, p1, p2, p3];
                    let mut seen = [false; 4];
                    p.iter().for_each(|&x| seen[x] = true);
                    if seen.iter().all(|&s| s) {
                        perms.push(p);
                    }
                }
            }
        }
    }
    assert_eq!(perms.len(), 24);
    let src = [5usize, 3, 4, 2];
    for axes in perms {
        run_case(&format!("permute {axes:?}"), TOL_F32, |ctx, rng| {
            let (a, av) = input(ctx, rng, DType::F32, src, Contig, -1.0, 1.0)?;
            let p = ctx.permute(a, axes)?;
            let out = ctx.cont(p)?;
            // Axis i of a becomes axis axes[i]: out[r] = a[r[axes[0]], …, r[axes[3]]].
            let mut ne_out = [0; 4];
            for i in 0..4 {
                ne_out[axes[i]] = src[i];
            }
            let want = Arr::build(ne_out, |r| {
                av.at([r[axes[0]], r[axes[1]], r[axes[2]], r[axes[3]]])
            });
            Ok(Built::new(out, want))
        });
    }
    // An explicit case, spelled out: permute [0, 2, 1, 3] swaps axes 1 and 2.
    run_case("permute swap 1 2 explicit", TOL_F32, |ctx, _| {
        let vals: Vec<f32> = (0..24).map(|x| x as f32).collect();
        let (a, _) = leaf(ctx, DType::F32, [2, 3, 4, 1], &vals)?;
        let p = ctx.permute(a, [0, 2, 1, 3])?;
        let out = ctx.cont(p)?;
        // out[i0, i1, i2] = a[i0, i2, i1] = i0 + 2·i2 + 6·i1.
        let want = Arr::build([2, 4, 3, 1], |i| (i[0] + 2 * i[2] + 6 * i[1]) as f32);
        Ok(Built::new(out, want))
    });
    // transpose, and views of views (a transpose of a permute of a 3-D view).
    run_case("transpose", TOL_F32, |ctx, rng| {
        let (a, av) = input(ctx, rng, DType::F32, [17, 9, 2, 1], Contig, -1.0, 1.0)?;
        let t = ctx.transpose(a)?;
        let out = ctx.sqr(t)?;
        let want = Arr::build([9, 17, 2, 1], |i| {
            let x = av.at([i[1], i[0], i[2], i[3]]);
            x * x
        });
        Ok(Built::new(out, want))
    });
    run_case("view of view of view", TOL_F32, |ctx, rng| {
        let (a, av) = input(ctx, rng, DType::F32, ne, Contig, -1.0, 1.0)?;
        // v: [8, 5, 3] from (1, 1, 0, 1).
        let nb1 = ne[0] * es;
        let nb2 = nb1 * ne[1];
        let off = es + nb1 + nb2 * ne[2];
        let v = ctx.view_3d(a, 8, 5, 3, nb1, nb2, off)?;
        // Axis 0 of v goes to 2, 1 to 0, 2 to 1: p is [5, 3, 8], p[r] = v[r2, r0, r1].
        let p = ctx.permute(v, [2, 0, 1, 3])?;
        let t = ctx.transpose(p)?; // [3, 5, 8]
        let out = ctx.cont(t)?;
        // t[i0, i1, i2] = p[i1, i0, i2] = v[i2, i1, i0] = a[1 + i2, 1 + i1, i0, 1]
        let want = Arr::build([3, 5, 8, 1], |i| av.at([1 + i[2], 1 + i[1], i[0], 1]));
        Ok(Built::new(out, want))
    });
}

// -------------------------------------------------------------------------------------------
// A small composite graph: one transformer-style attention block
// -------------------------------------------------------------------------------------------

#[test]
fn attention_block_matches_step_by_step_reference() {
    // q, k, v: [head_dim, n_head, n_tokens]; K and V heads shared by groups of query heads.
    let (hd, nh, nkv, nt) = (16usize, 6usize, 2usize, 5usize);
    run_case("attention block", TOL_F16, |ctx, rng| {
        let (q, qv) = input(ctx, rng, DType::F32, [hd, nh, nt, 1], Contig, -1.0, 1.0)?;
        let (k, kv) = input(ctx, rng, DType::F32, [hd, nkv, nt, 1], Contig, -1.0, 1.0)?;
        let (v, vv) = input(ctx, rng, DType::F32, [hd, nkv, nt, 1], Contig, -1.0, 1.0)?;
        let pos: Vec<i32> = (0..nt as i32).map(|t| t + 3).collect();
        let pt = ids_leaf(ctx, [nt, 1, 1, 1], &pos)?;
        let p = RopeParams::new(hd, RopeMode::Neox);
        let qr = ctx.rope_ext(q, pt, p)?;
        let kr = ctx.rope_ext(k, pt, p)?;
        // K as f16 (a cache), then heads first: [hd, nt, nkv].
        let k16 = ctx.cast(kr, DType::F16)?;
        let kp = ctx.permute(k16, [0, 2, 1, 3])?;
        let qp = ctx.permute(qr, [0, 2, 1, 3])?; // [hd, nt, nh]
        let kq = ctx.mul_mat(kp, qp)?; // [nt(keys), nt(queries), nh]
        let kq = ctx.diag_mask_inf(kq, 0)?;
        let scale = 1.0 / (hd as f32).sqrt();
        let att = ctx.soft_max_ext(kq, None, scale)?;
        // V transposed to [nt, hd, nkv] so that mul_mat sums over tokens.
        let vp = ctx.permute(v, [1, 2, 0, 3])?; // [nt, hd, nkv], a strided view
        let vc = ctx.cont(vp)?;
        let out = ctx.mul_mat(vc, att)?; // [hd, nt, nh]
                                         // Reference, step by step in f64.
        let qr_ref = rope_ref(&qv, &pos, p);
        let kr_ref = rope_ref(&kv, &pos, p);
        let group = nh / nkv;
        let want = Arr::build([hd, nt, nh, 1], |o| {
            let [c, tq, h, _] = o;
            let hk = h / group;
            let mut scores = vec![f64::NEG_INFINITY; nt];
            for (tk, s) in scores.iter_mut().enumerate().take(tq + 1) {
                let mut dot = 0f64;
                for d in 0..hd {
                    let kk = round_to(DType::F16, kr_ref.at([d, hk, tk, 0])) as f64;
                    dot += qr_ref.at([d, h, tq, 0]) as f64 * kk;
                }
                *s = dot * scale as f64;
            }
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            let mut acc = 0f64;
            for (tk, w) in e.iter().enumerate() {
                acc += w / sum * vv.at([c, hk, tk, 0]) as f64;
            }
            acc as f32
        });
        Ok(Built::new(out, want))
    });
}
