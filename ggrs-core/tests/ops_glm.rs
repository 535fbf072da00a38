//! The ops GLM-style models need beyond LLaMA's, against naive references written here:
//! - `Context::rope_freqs`: rotary embedding of a section of each row (any offset) with a
//!   caller-given frequency table, in NEOX (rotate-half) and adjacent-pair modes, on dense
//!   and strided inputs, positions given as a view; two sections of one head turned by two
//!   position streams (GLM's 2-D rotary) straight out of a fused, per-head interleaved q|k|v
//!   projection; and its shape errors;
//! - the pieces the GLM v1 block builds from existing ops — LayerNorm with weight and bias,
//!   the α-scaled residual of the LayerNorm output, tanh GELU — checked once against a
//!   plain f64 formula.
//!
//! Every case runs on 1–4 threads (same bits) via `common::run_case`.

use crate::common;

use common::*;
use ggrs_core::{Context, DType, Error, Result, RopeMode, Tensor};
use Layout::{Contig, Padded, Permuted, Transposed};

/// Section rotary in f64: for token t at position p, pair i (i < freqs.len()) of the
/// section starting at `offset` turns by θ = p · freqs[i] (θ computed in f32, as the op's
/// contract says, then cos/sin in f64); pairs are (o+i, o+i+h) in Neox mode and
/// (o+2i, o+2i+1) in Normal mode, h = freqs.len(); every other dimension is copied.
fn rope_freqs_ref(x: &Arr, pos: &[i32], freqs: &[f32], offset: usize, mode: RopeMode) -> Arr {
    let ne = x.ne;
    let h = freqs.len();
    let mut out = x.clone();
    assert_eq!(pos.len(), ne[2], "one position per token");
    for i3 in 0..ne[3] {
        for (i2, &p) in pos.iter().enumerate() {
            for i1 in 0..ne[1] {
                for (i, &f) in freqs.iter().enumerate() {
                    let theta = (p as f32 * f) as f64;
                    let (s, c) = theta.sin_cos();
                    let (j0, j1) = match mode {
                        RopeMode::Neox => (offset + i, offset + i + h),
                        RopeMode::Normal => (offset + 2 * i, offset + 2 * i + 1),
                    };
                    let x0 = x.at([j0, i1, i2, i3]) as f64;
                    let x1 = x.at([j1, i1, i2, i3]) as f64;
                    out.set([j0, i1, i2, i3], (x0 * c - x1 * s) as f32);
                    out.set([j1, i1, i2, i3], (x1 * c + x0 * s) as f32);
                }
            }
        }
    }
    out
}

/// Positions increasing from `start` by random steps of 1..=step.
fn positions(rng: &mut Rng, n: usize, start: i32, step: usize) -> Vec<i32> {
    let mut pos = vec![start; n];
    for t in 1..n {
        pos[t] = pos[t - 1] + 1 + rng.below(step) as i32;
    }
    pos
}

/// An f32 leaf holding `vals` (no rounding).
fn f32_leaf(ctx: &mut Context, vals: &[f32]) -> Result<Tensor> {
    let t = ctx.new_tensor_1d(DType::F32, vals.len())?;
    ctx.set_f32(t, vals)?;
    Ok(t)
}

#[test]
fn rope_freqs_section_with_frequency_table() {
    // (a shape [n0, n_head, n_tokens, n3], offset, pairs, layout, largest position step)
    type Case = ([usize; 4], usize, usize, Layout, usize);
    let cases: &[Case] = &[
        ([2, 1, 1, 1], 0, 1, Contig, 1),
        ([8, 3, 5, 1], 0, 4, Contig, 1),
        // A section in the middle / at the end of the row: the rest is copied.
        ([32, 4, 7, 1], 16, 8, Contig, 3),
        ([32, 4, 7, 1], 0, 8, Contig, 3),
        ([34, 2, 9, 2], 5, 7, Contig, 300),
        ([17, 3, 4, 1], 3, 3, Contig, 50),
        ([64, 2, 6, 1], 10, 27, Contig, 8000),
        // Strided inputs: heads and tokens swapped in memory, a transposed view, padded rows.
        ([64, 4, 6, 1], 32, 16, Permuted([0, 2, 1, 3]), 300),
        ([16, 5, 3, 2], 4, 6, Transposed, 300),
        ([32, 3, 5, 1], 8, 8, Padded, 300),
    ];
    for mode in [RopeMode::Neox, RopeMode::Normal] {
        for &(ne, offset, pairs, layout, step) in cases {
            let name = format!(
                "rope_freqs {mode:?} {ne:?} offset={offset} pairs={pairs} {} step={step}",
                layout.label()
            );
            run_case(&name, TOL_F32, |ctx, rng| {
                let (a, av) = input(ctx, rng, DType::F32, ne, layout, -1.0, 1.0)?;
                let start = rng.below(4) as i32;
                let pos = positions(rng, ne[2], start, step);
                // Any table: decreasing frequencies rounded to f16 as GLM's are, with one
                // random entry to show the table is read as given.
                let mut freqs: Vec<f32> = (0..pairs)
                    .map(|i| {
                        let f = 10000f64.powf(-((2 * i) as f64) / (2 * pairs) as f64) as f32;
                        half::f16::from_f32(f).to_f32()
                    })
                    .collect();
                freqs[pairs / 2] = rng.uniform(0.0, 2.0);
                let ft = f32_leaf(ctx, &freqs)?;
                let pt = if layout == Padded {
                    // Positions as a view into a longer i32 tensor, from its third entry.
                    let mut all = vec![-7i32; ne[2] + 3];
                    all[2..2 + ne[2]].copy_from_slice(&pos);
                    let base = ids_leaf(ctx, [ne[2] + 3, 1, 1, 1], &all)?;
                    ctx.view_1d(base, ne[2], 2 * 4)?
                } else {
                    ids_leaf(ctx, [ne[2], 1, 1, 1], &pos)?
                };
                let out = ctx.rope_freqs(a, pt, ft, offset, mode)?;
                Ok(Built::new(
                    out,
                    rope_freqs_ref(&av, &pos, &freqs, offset, mode),
                ))
            });
        }
    }
}

/// GLM's 2-D rotary straight from a fused projection: rows of `[n_head · 3d, n_tokens]` hold,
/// per head, q | k | v of width d each. q and k are strided views into it; the first half
/// of each head turns with one position stream, the second half with another (both
/// streams views of one `[2·n_tokens]` i32 input); v is not rotated.
#[test]
fn rope_freqs_two_position_streams_on_interleaved_qkv() {
    let (d, nh, n) = (32usize, 3usize, 6usize);
    let r = d / 2;
    for which in 0..2usize {
        let name = format!("glm 2-D rotary of {}", ["q", "k"][which]);
        run_case(&name, TOL_F32, |ctx, rng| {
            let vals = rng.vec(3 * d * nh * n, -1.0, 1.0);
            let (qkv, qkv_v) = leaf(ctx, DType::F32, [3 * d * nh, n, 1, 1], &vals)?;
            let pos_a: Vec<i32> = vec![0, 1, 2, 3, 4, 4];
            let pos_b: Vec<i32> = vec![0, 0, 0, 0, 0, 1];
            let both: Vec<i32> = pos_a.iter().chain(&pos_b).copied().collect();
            let pt = ids_leaf(ctx, [2 * n, 1, 1, 1], &both)?;
            let pa = ctx.view_1d(pt, n, 0)?;
            let pb = ctx.view_1d(pt, n, n * 4)?;
            let freqs: Vec<f32> = (0..r / 2)
                .map(|i| {
                    let f = 1.0 / 10000f64.powf((2 * i) as f64 / r as f64);
                    half::f16::from_f32(f as f32).to_f32()
                })
                .collect();
            let ft = f32_leaf(ctx, &freqs)?;
            let row = 3 * d * nh * 4;
            let x = ctx.view_3d(qkv, d, nh, n, 3 * d * 4, row, which * d * 4)?;
            let x1 = ctx.rope_freqs(x, pa, ft, 0, RopeMode::Neox)?;
            let x2 = ctx.rope_freqs(x1, pb, ft, r, RopeMode::Neox)?;
            // Reference: gather head h's q (or k) from the interleaved row, rotate the two
            // halves with the two streams.
            let xv = Arr::build([d, nh, n, 1], |i| {
                qkv_v.at([i[1] * 3 * d + which * d + i[0], i[2], 0, 0])
            });
            let w1 = rope_freqs_ref(&xv, &pos_a, &freqs, 0, RopeMode::Neox);
            let w2 = rope_freqs_ref(&w1, &pos_b, &freqs, r, RopeMode::Neox);
            Ok(Built::new(x2, w2))
        });
    }
}

/// With the table `base^(−2i/n_dims)`, a section at offset 0 is `rope_ext` in NEOX mode
/// (whose angles come from ggml's f32 recurrence: equal to rounding).
#[test]
fn rope_freqs_agrees_with_rope_ext_for_the_standard_table() {
    let ne = [64usize, 4, 9, 1];
    let n_dims = 48;
    let mut ctx = Context::with_mem_size(DEFAULT_MEM);
    let mut rng = Rng::new(7);
    let vals = rng.vec(nelem(ne), -1.0, 1.0);
    let (a, _) = leaf(&mut ctx, DType::F32, ne, &vals).unwrap();
    let pos: Vec<i32> = (0..ne[2] as i32).map(|t| 3 * t).collect();
    let pt = ids_leaf(&mut ctx, [ne[2], 1, 1, 1], &pos).unwrap();
    let freqs: Vec<f32> = (0..n_dims / 2)
        .map(|i| 10000f64.powf(-((2 * i) as f64) / n_dims as f64) as f32)
        .collect();
    let ft = f32_leaf(&mut ctx, &freqs).unwrap();
    let x = ctx.rope_freqs(a, pt, ft, 0, RopeMode::Neox).unwrap();
    let y = ctx.rope(a, pt, n_dims, RopeMode::Neox).unwrap();
    let mut g = ggrs_core::Graph::new();
    g.build_forward_expand(&ctx, x).unwrap();
    g.build_forward_expand(&ctx, y).unwrap();
    ggrs_core::Executor::new(2).compute(&mut ctx, &g).unwrap();
    let (xv, yv) = (ctx.to_f32_vec(x).unwrap(), ctx.to_f32_vec(y).unwrap());
    let max = xv
        .iter()
        .zip(&yv)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(max < 1e-5, "rope_freqs vs rope_ext: max |Δ| = {max}");
    // The untouched dimensions are copied exactly.
    for t in 0..ne[1] * ne[2] {
        for i in n_dims..ne[0] {
            assert_eq!(xv[t * ne[0] + i], vals[t * ne[0] + i]);
        }
    }
}

#[test]
fn rope_freqs_rejects_bad_operands() {
    let mut ctx = Context::with_mem_size(DEFAULT_MEM);
    let a = ctx.new_tensor_3d(DType::F32, 16, 2, 5).unwrap();
    let pos = ids_leaf(&mut ctx, [5, 1, 1, 1], &[0, 1, 2, 3, 4]).unwrap();
    let short_pos = ids_leaf(&mut ctx, [4, 1, 1, 1], &[0, 1, 2, 3]).unwrap();
    let f4 = f32_leaf(&mut ctx, &[1.0; 4]).unwrap();
    let f9 = f32_leaf(&mut ctx, &[1.0; 9]).unwrap();
    let f_2d = ctx.new_tensor_2d(DType::F32, 2, 2).unwrap();
    let f_i32 = ids_leaf(&mut ctx, [4, 1, 1, 1], &[1; 4]).unwrap();
    let a16 = ctx.new_tensor_3d(DType::F16, 16, 2, 5).unwrap();
    let at = ctx.transpose(a).unwrap();

    // Section past the row: offset 9 + 8 > 16, and 18 rotated dims > 16.
    let e = expect_err("offset", ctx.rope_freqs(a, pos, f4, 9, RopeMode::Neox));
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert!(e.to_string().contains("9..17"), "{e}");
    let e = expect_err(
        "too many pairs",
        ctx.rope_freqs(a, pos, f9, 0, RopeMode::Neox),
    );
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = expect_err(
        "huge offset",
        ctx.rope_freqs(a, pos, f4, usize::MAX, RopeMode::Neox),
    );
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // One position per token.
    let e = expect_err("pos", ctx.rope_freqs(a, short_pos, f4, 0, RopeMode::Normal));
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // A 1-D f32 table.
    let e = expect_err("2-D freqs", ctx.rope_freqs(a, pos, f_2d, 0, RopeMode::Neox));
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = expect_err(
        "i32 freqs",
        ctx.rope_freqs(a, pos, f_i32, 0, RopeMode::Neox),
    );
    assert!(matches!(e, Error::UnsupportedType { .. }), "{e}");
    // f32 input with dense rows.
    let e = expect_err("f16 a", ctx.rope_freqs(a16, pos, f4, 0, RopeMode::Neox));
    assert!(matches!(e, Error::UnsupportedType { .. }), "{e}");
    // A transposed a (`[2, 16, 5]`) is fine as an operand, but its rows (2 values) cannot
    // hold a section of 8.
    let e = expect_err(
        "transposed a",
        ctx.rope_freqs(at, pos, f4, 0, RopeMode::Neox),
    );
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // A non-contiguous table is refused.
    let f8 = f32_leaf(&mut ctx, &[1.0; 8]).unwrap();
    let every_other = ctx.view_2d(f8, 1, 4, 8, 0).unwrap(); // [1, 4], rows 8 bytes apart
    let f_strided = ctx.transpose(every_other).unwrap(); // [4, 1], values 8 bytes apart
    let e = expect_err(
        "strided freqs",
        ctx.rope_freqs(a, pos, f_strided, 0, RopeMode::Neox),
    );
    assert!(matches!(e, Error::Layout { .. }), "{e}");
}

/// GLM v1's block pieces from existing ops: `LayerNorm(x)·w + b`, then `a·α + f(a)` with the
/// LayerNorm output `a` as the residual, `f` = tanh GELU here; checked against the formulas
/// in f64.
#[test]
fn layer_norm_with_bias_alpha_residual_and_tanh_gelu() {
    let ne = [37usize, 5, 1, 1];
    let (eps, alpha) = (1e-5f32, 56f32.sqrt());
    run_case(
        "glm layernorm + alpha residual + gelu",
        TOL_F32,
        |ctx, rng| {
            let (x, xv) = input(ctx, rng, DType::F32, ne, Contig, -3.0, 3.0)?;
            let (w, wv) = input(ctx, rng, DType::F32, [ne[0], 1, 1, 1], Contig, 0.5, 1.5)?;
            let (b, bv) = input(ctx, rng, DType::F32, [ne[0], 1, 1, 1], Contig, -0.5, 0.5)?;
            let n = ctx.norm(x, eps)?;
            let n = ctx.mul(n, w)?;
            let a = ctx.add(n, b)?;
            let g = ctx.gelu(a)?;
            let s = ctx.scale(a, alpha)?;
            let out = ctx.add(s, g)?;
            let want = {
                let mut out = Arr::zeros(ne);
                for r in 0..ne[1] {
                    let row: Vec<f64> = (0..ne[0]).map(|i| xv.at([i, r, 0, 0]) as f64).collect();
                    let mean = row.iter().sum::<f64>() / ne[0] as f64;
                    let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / ne[0] as f64;
                    for (i, v) in row.iter().enumerate() {
                        let a = (v - mean) / (var + eps as f64).sqrt() * wv.at([i, 0, 0, 0]) as f64
                            + bv.at([i, 0, 0, 0]) as f64;
                        let gelu = 0.5
                            * a
                            * (1.0
                                + ((2.0 / std::f64::consts::PI).sqrt()
                                    * (a + 0.044715 * a.powi(3)))
                                .tanh());
                        out.set([i, r, 0, 0], (a * alpha as f64 + gelu) as f32);
                    }
                }
                out
            };
            Ok(Built::new(out, want))
        },
    );
}
