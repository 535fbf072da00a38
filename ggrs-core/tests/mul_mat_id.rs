//! `mul_mat_id` (a matrix chosen per column, the experts of a mixture-of-experts layer) and
//! `argsort_top_k` (the router's choice of experts).
//!
//! Every column of a `mul_mat_id` must be, bit for bit, what `mul_mat` gives for the chosen
//! matrix (as a 2-D tensor of its own) times that one column, on 1 and 2 threads.

use crate::common;

use common::values;
use ggrs_core::{Context, DType, Error, Executor, Graph, Tensor};

const K: usize = 512;
/// Rows of each matrix: a multiple of 8 (llama.cpp's repacked Q4_0 order) but not of 16.
const N: usize = 40;
const N_MAT: usize = 4;
const N_USED: usize = 2;
const N_TOK: usize = 5;

/// `rows` rows of `K` values of type `t`, from seeded values.
fn weight(t: DType, rows: usize, seed: u64) -> Vec<u8> {
    let x = values(seed, K * rows);
    common::encode(t, &x)
}

fn bits(ctx: &Context, t: Tensor) -> Vec<u32> {
    ctx.to_f32_vec(t)
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// `mul_mat(matrix, column)` in a graph of its own: `N` values.
fn one_column(t: DType, matrix: &[u8], col: &[f32], threads: usize) -> Vec<u32> {
    let mut ctx = Context::with_mem_size(4 << 20);
    let w = ctx.new_tensor_2d(t, K, N).unwrap();
    ctx.set_bytes(w, matrix).unwrap();
    let x = ctx.new_tensor_2d(DType::F32, K, 1).unwrap();
    ctx.set_f32(x, col).unwrap();
    let y = ctx.mul_mat(w, x).unwrap();
    let mut g = Graph::new();
    g.build_forward_expand(&ctx, y).unwrap();
    Executor::new(threads).compute(&mut ctx, &g).unwrap();
    bits(&ctx, y)
}

/// Ids of every slot of every token: all matrices used, one token using one matrix twice,
/// one matrix (3) used by a single slot.
fn ids() -> Vec<i32> {
    vec![0, 1, 2, 0, 1, 1, 3, 2, 0, 2]
}

/// `mul_mat_id` of the stacked matrices on `b` (`[K, n_b, N_TOK]`) with `ids`, on
/// `threads`; optionally also `mul_mat(first matrix, b)` in the same graph (which may share
/// the activation conversion). Returns the result bits (and the extra product's).
fn run_id(
    t: DType,
    stack: &[u8],
    b_vals: &[f32],
    n_b: usize,
    ids: &[i32],
    threads: usize,
    with_mul_mat: bool,
) -> ggrs_core::Result<(Vec<u32>, Option<Vec<u32>>)> {
    let mut ctx = Context::with_mem_size(8 << 20);
    let a = ctx.new_tensor_3d(t, K, N, N_MAT)?;
    ctx.set_bytes(a, stack)?;
    let b = ctx.new_tensor_3d(DType::F32, K, n_b, N_TOK)?;
    ctx.set_f32(b, b_vals)?;
    let id = ctx.new_tensor_2d(DType::I32, N_USED, N_TOK)?;
    ctx.set_i32(id, ids)?;
    let y = ctx.mul_mat_id(a, b, id)?;
    assert_eq!(ctx.shape(y)?, [N, N_USED, N_TOK, 1]);
    let mut g = Graph::new();
    let extra = if with_mul_mat {
        let w = ctx.new_tensor_2d(t, K, N)?;
        ctx.set_bytes(w, &stack[..t.row_size(K) * N])?;
        let z = ctx.mul_mat(w, b)?;
        g.build_forward_expand(&ctx, z)?;
        Some(z)
    } else {
        None
    };
    g.build_forward_expand(&ctx, y)?;
    Executor::new(threads).compute(&mut ctx, &g)?;
    Ok((bits(&ctx, y), extra.map(|z| bits(&ctx, z))))
}

fn check_type(t: DType) {
    let stack: Vec<u8> = (0..N_MAT)
        .flat_map(|e| weight(t, N, 10 + e as u64))
        .collect();
    let mat_bytes = t.row_size(K) * N;
    let ids = ids();
    for n_b in [1, N_USED] {
        let b_vals = values(77 + n_b as u64, K * n_b * N_TOK);
        for threads in [1, 2] {
            let (got, _) = run_id(t, &stack, &b_vals, n_b, &ids, threads, false).unwrap();
            for tok in 0..N_TOK {
                for slot in 0..N_USED {
                    let e = ids[slot + N_USED * tok] as usize;
                    let c = slot % n_b + n_b * tok;
                    let want = one_column(
                        t,
                        &stack[e * mat_bytes..(e + 1) * mat_bytes],
                        &b_vals[c * K..(c + 1) * K],
                        threads,
                    );
                    let at = (slot + N_USED * tok) * N;
                    assert_eq!(
                        &got[at..at + N],
                        &want[..],
                        "{t:?}, n_b {n_b}, {threads} threads, token {tok}, slot {slot}"
                    );
                }
            }
        }
    }
}

#[test]
fn equals_one_mul_mat_per_column_f32() {
    check_type(DType::F32);
}

#[test]
fn equals_one_mul_mat_per_column_f16() {
    check_type(DType::F16);
}

#[test]
fn equals_one_mul_mat_per_column_q4_0() {
    check_type(DType::Q4_0);
}

#[test]
fn equals_one_mul_mat_per_column_q8_0() {
    check_type(DType::Q8_0);
}

#[test]
fn equals_one_mul_mat_per_column_q4_k() {
    check_type(DType::Q4K);
}

/// A `mul_mat` on the same activations in the same graph (the executor may let one reuse the
/// other's conversion) changes neither result.
#[test]
fn sharing_a_graph_with_mul_mat_changes_nothing() {
    for t in [DType::F16, DType::Q8_0, DType::Q4K] {
        let stack: Vec<u8> = (0..N_MAT)
            .flat_map(|e| weight(t, N, 30 + e as u64))
            .collect();
        let b_vals = values(5, K * N_TOK);
        for threads in [1, 2] {
            let (alone, _) = run_id(t, &stack, &b_vals, 1, &ids(), threads, false).unwrap();
            let (both, z) = run_id(t, &stack, &b_vals, 1, &ids(), threads, true).unwrap();
            assert_eq!(alone, both, "{t:?}, {threads} threads");
            // The plain product of the first matrix, column by column.
            let z = z.expect("the extra product");
            for tok in 0..N_TOK {
                let want = one_column(t, &stack[..t.row_size(K) * N], &b_vals[tok * K..][..K], 1);
                assert_eq!(&z[tok * N..(tok + 1) * N], &want[..], "{t:?} mul_mat");
            }
        }
    }
}

#[test]
fn an_id_out_of_range_is_an_error() {
    let t = DType::F16;
    let stack: Vec<u8> = (0..N_MAT).flat_map(|e| weight(t, N, e as u64)).collect();
    let b_vals = values(1, K * N_TOK);
    for bad in [N_MAT as i32, -1] {
        let mut ids = ids();
        ids[7] = bad;
        for threads in [1, 2] {
            match run_id(t, &stack, &b_vals, 1, &ids, threads, false) {
                Err(Error::IndexOutOfRange { index, limit, .. }) => {
                    assert_eq!((index, limit), (bad as i64, N_MAT));
                }
                other => panic!("id {bad}: expected IndexOutOfRange, got {other:?}"),
            }
        }
    }
}

#[test]
fn shapes_and_types_are_checked() {
    let mut ctx = Context::with_mem_size(1 << 20);
    let a = ctx.new_tensor_3d(DType::F16, 64, 8, 4).unwrap();
    let ids = ctx.new_tensor_2d(DType::I32, 2, 3).unwrap();
    let shape_err = |r: ggrs_core::Result<Tensor>| {
        assert!(
            matches!(
                r,
                Err(Error::ShapeMismatch {
                    op: "MUL_MAT_ID",
                    ..
                })
            ),
            "{r:?}"
        )
    };
    // Another k.
    let b = ctx.new_tensor_3d(DType::F32, 32, 1, 3).unwrap();
    shape_err(ctx.mul_mat_id(a, b, ids));
    // Another token count.
    let b = ctx.new_tensor_3d(DType::F32, 64, 1, 4).unwrap();
    shape_err(ctx.mul_mat_id(a, b, ids));
    // n_b not dividing n_used.
    let b = ctx.new_tensor_3d(DType::F32, 64, 3, 3).unwrap();
    shape_err(ctx.mul_mat_id(a, b, ids));
    // ids of another type.
    let b = ctx.new_tensor_3d(DType::F32, 64, 1, 3).unwrap();
    let fids = ctx.new_tensor_2d(DType::F32, 2, 3).unwrap();
    assert!(matches!(
        ctx.mul_mat_id(a, b, fids),
        Err(Error::UnsupportedType { .. })
    ));
    // A 4-D stack.
    let a4 = ctx.new_tensor_4d(DType::F16, 64, 8, 2, 2).unwrap();
    shape_err(ctx.mul_mat_id(a4, b, ids));
    // The right shapes.
    let y = ctx.mul_mat_id(a, b, ids).unwrap();
    assert_eq!(ctx.shape(y).unwrap(), [8, 2, 3, 1]);
}

#[test]
fn argsort_top_k_picks_the_largest_in_order() {
    let rows: Vec<Vec<f32>> = vec![
        vec![0.1, 0.7, -2.0, 0.7, 3.0],
        vec![f32::NAN, -1.0, -0.5, 5.0, f32::NEG_INFINITY],
        vec![1.0, 1.0, 1.0, 1.0, 1.0],
        vec![-3.0, -2.0, -1.0, 0.0, 1.0],
    ];
    for threads in [1, 2] {
        let mut ctx = Context::with_mem_size(1 << 20);
        let a = ctx.new_tensor_2d(DType::F32, 5, rows.len()).unwrap();
        ctx.set_f32(a, &rows.concat()).unwrap();
        let top = ctx.argsort_top_k(a, 3).unwrap();
        let mut g = Graph::new();
        g.build_forward_expand(&ctx, top).unwrap();
        Executor::new(threads).compute(&mut ctx, &g).unwrap();
        let got = ctx.to_i32_vec(top).unwrap();
        // An independent selection: largest first, lower index on ties, NaN last.
        let mut want = Vec::new();
        for r in &rows {
            let mut idx: Vec<usize> = (0..r.len()).collect();
            for _ in 0..3 {
                let best = idx
                    .iter()
                    .copied()
                    .reduce(|p, q| {
                        if r[q] > r[p] || r[p].is_nan() && !r[q].is_nan() {
                            q
                        } else {
                            p
                        }
                    })
                    .unwrap();
                want.push(best as i32);
                idx.retain(|&i| i != best);
            }
        }
        assert_eq!(got, want);
        assert_eq!(&got[..3], &[4, 1, 3]);
    }
    let mut ctx = Context::with_mem_size(1 << 20);
    let a = ctx.new_tensor_2d(DType::F32, 5, 2).unwrap();
    assert!(ctx.argsort_top_k(a, 6).is_err());
    assert!(ctx.argsort_top_k(a, 0).is_err());
}
