//! `mul_mat_id` grouping its columns by matrix and running each matrix's columns through
//! the kernels of its type (panels where the type has them), against one `mul_mat` per
//! column: every column must keep, bit for bit, what a one-column product by its matrix
//! (as a 2-D tensor) gives, for every weight type, with the stack packed at load or not,
//! on 1 and 2 threads, with the SIMD builds and the portable ones (`force_scalar`), for
//! 1..40 tokens whose ids repeat matrices and leave some unused.
//!
//! One test flips `force_scalar`, which is process-wide: every test of this file holds
//! [`SERIAL`] while it runs.

mod common;

use common::values;
use std::sync::{Arc, Mutex};

use ggrs_core::kernels::PackedWeight;
use ggrs_core::quants::dispatch::force_scalar;
use ggrs_core::{Context, DType, Error, Executor, Graph, Tensor};

/// Values per row: a multiple of 256 (the k-quants' super-blocks), an odd count of them.
const K: usize = 768;
/// Rows of each matrix: two whole panels of 16 and 8 rows past them (a multiple of 8:
/// llama.cpp's repacked orders).
const N: usize = 40;
/// Matrices in the stack.
const N_MAT: usize = 8;
/// Slots (experts used) per token.
const N_USED: usize = 4;

/// `rows` rows of `K` values of type `t` from seeded values; the last block of the first
/// row is extreme (large values next to tiny ones).
fn weight(t: DType, rows: usize, seed: u64) -> Vec<u8> {
    let mut x = values(seed, K * rows);
    for (i, v) in x[K - 256..K].iter_mut().enumerate() {
        *v = if i % 7 == 0 { 60.0 } else { *v * 1e-3 };
    }
    common::encode(t, &x)
}

fn bits(ctx: &Context, t: Tensor) -> Vec<u32> {
    ctx.to_f32_vec(t)
        .expect("f32 output")
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// `mul_mat(matrix, column)` in a graph of its own: `N` values.
fn one_column(t: DType, matrix: &[u8], col: &[f32], threads: usize) -> Vec<u32> {
    let mut ctx = Context::with_mem_size(4 << 20);
    let w = ctx.new_tensor_2d(t, K, N).expect("room");
    ctx.set_bytes(w, matrix).expect("K × N");
    let x = ctx.new_tensor_2d(DType::F32, K, 1).expect("room");
    ctx.set_f32(x, col).expect("K values");
    let y = ctx.mul_mat(w, x).expect("shapes agree");
    let mut g = Graph::new();
    g.build_forward_expand(&ctx, y).expect("one node");
    Executor::new(threads).compute(&mut ctx, &g).expect("runs");
    bits(&ctx, y)
}

/// Ids of `n_tok` tokens: seeded, matrices 6 and 7 never chosen, token 0 choosing matrix 2
/// twice when it has two slots or more.
fn ids_for(n_tok: usize, seed: u64) -> Vec<i32> {
    let mut ids: Vec<i32> = values(seed, N_USED * n_tok)
        .iter()
        .map(|v| ((v + 1.0) * 3.0) as i32 % 6)
        .collect();
    ids[0] = 2;
    ids[1] = 2;
    ids
}

/// The stack `[K, N, N_MAT]` (external data, carrying `packed` if given), `mul_mat_id`
/// on `b` (`[K, n_b, n_tok]`) with `ids`, on `threads`: the result bits.
#[allow(clippy::too_many_arguments)]
fn run_id(
    t: DType,
    stack: &Arc<Vec<u8>>,
    packed: Option<&PackedWeight>,
    b_vals: &[f32],
    n_b: usize,
    n_tok: usize,
    ids: &[i32],
    threads: usize,
) -> ggrs_core::Result<Vec<u32>> {
    let mut ctx = Context::with_mem_size(16 << 20);
    let a = ctx.new_tensor_external(t, &[K, N, N_MAT], Arc::clone(stack) as _, 0)?;
    if let Some(p) = packed {
        ctx.set_packed(a, p)?;
    }
    let b = ctx.new_tensor_3d(DType::F32, K, n_b, n_tok)?;
    ctx.set_f32(b, b_vals)?;
    let id = ctx.new_tensor_2d(DType::I32, N_USED, n_tok)?;
    ctx.set_i32(id, ids)?;
    let y = ctx.mul_mat_id(a, b, id)?;
    let mut g = Graph::new();
    g.build_forward_expand(&ctx, y)?;
    Executor::new(threads).compute(&mut ctx, &g)?;
    Ok(bits(&ctx, y))
}

/// Held by every test of this file: one of them switches the builds for the process.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    // (A test that failed while holding the lock leaves nothing half-done to guard.)
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const TYPES: [DType; 15] = [
    DType::Q4_0,
    DType::Q8_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::IQ4NL,
    DType::IQ4XS,
    DType::F16,
    DType::BF16,
    DType::F32,
];

/// Every column of every token count, type, packing and thread count against its
/// one-column product; the failures, described.
fn check_all(failures: &mut Vec<String>, build: &str) {
    for (ti, &t) in TYPES.iter().enumerate() {
        let mat_bytes = t.row_size(K) * N;
        let stack: Arc<Vec<u8>> = Arc::new(
            (0..N_MAT)
                .flat_map(|e| weight(t, N, 100 * ti as u64 + e as u64))
                .collect(),
        );
        let packed = PackedWeight::pack(t, [K, N, N_MAT, 1], &stack);
        for (n_tok, n_b) in [
            (1, 1),
            (1, N_USED),
            (2, 1),
            (3, N_USED),
            (7, 1),
            (17, 1),
            (40, 1),
        ] {
            let ids = ids_for(n_tok, 7 + n_tok as u64);
            let b_vals = values(77 + n_tok as u64 + n_b as u64, K * n_b * n_tok);
            // The one-column products, once per column.
            let want: Vec<Vec<u32>> = (0..n_tok * N_USED)
                .map(|c| {
                    let (slot, tok) = (c % N_USED, c / N_USED);
                    let e = ids[c] as usize;
                    let col = slot % n_b + n_b * tok;
                    one_column(
                        t,
                        &stack[e * mat_bytes..(e + 1) * mat_bytes],
                        &b_vals[col * K..(col + 1) * K],
                        1,
                    )
                })
                .collect();
            // (Without a packed copy, one pass.)
            let passes = if packed.is_some() { 2 } else { 1 };
            for p in [None, packed.as_ref()].into_iter().take(passes) {
                for threads in [1, 2] {
                    let got = run_id(t, &stack, p, &b_vals, n_b, n_tok, &ids, threads)
                        .expect("valid ids");
                    let differ = (0..n_tok * N_USED)
                        .filter(|&c| got[c * N..(c + 1) * N] != want[c][..])
                        .count();
                    if differ > 0 {
                        failures.push(format!(
                            "{build}: {t:?}, {n_tok} tokens, n_b {n_b}, {}packed, {threads} \
                             threads: {differ} of {} columns differ",
                            if p.is_some() { "" } else { "not " },
                            n_tok * N_USED
                        ));
                    }
                }
            }
        }
    }
}

#[test]
fn every_column_equals_its_one_column_product() {
    let _serial = serial();
    let mut failures = Vec::new();
    force_scalar(false);
    check_all(&mut failures, "SIMD");
    force_scalar(true);
    check_all(&mut failures, "portable");
    force_scalar(false);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The stacks the panel kernels read are packed matrix by matrix; the others are not
/// packed at all.
#[test]
fn stacks_are_packed_for_the_panel_kernels_only() {
    let _serial = serial();
    let stack = vec![0u8; DType::Q4_0.row_size(K) * N * N_MAT];
    let p = PackedWeight::pack(DType::Q4_0, [K, N, N_MAT, 1], &stack);
    assert_eq!(
        p.is_some(),
        PackedWeight::repacks(DType::Q4_0, [K, N, N_MAT, 1])
    );
    if let Some(p) = p {
        // Two whole panels per matrix (the 8 rows past them stay in the source), each
        // sixteen rows of K / 32 blocks of 18 bytes.
        assert_eq!(p.bytes(), N_MAT * (N / 16) * 16 * (K / 32) * 18);
    }
    let f16 = vec![0u8; DType::F16.row_size(K) * N * N_MAT];
    assert!(PackedWeight::pack(DType::F16, [K, N, N_MAT, 1], &f16).is_none());
}

/// An id outside the stack is a typed error whether or not the panel kernels run, packed
/// or not, on 1 and 2 threads.
#[test]
fn an_id_out_of_range_is_an_error_on_the_panel_path() {
    let _serial = serial();
    let t = DType::Q4_0;
    let stack: Arc<Vec<u8>> = Arc::new((0..N_MAT).flat_map(|e| weight(t, N, e as u64)).collect());
    let packed = PackedWeight::pack(t, [K, N, N_MAT, 1], &stack);
    let n_tok = 5;
    let b_vals = values(3, K * n_tok);
    for bad in [N_MAT as i32, -3, i32::MAX] {
        let mut ids = ids_for(n_tok, 1);
        ids[9] = bad;
        ids[13] = -1;
        for p in [None, packed.as_ref()] {
            for threads in [1, 2] {
                match run_id(t, &stack, p, &b_vals, 1, n_tok, &ids, threads) {
                    Err(Error::IndexOutOfRange { index, limit, .. }) => {
                        // The first invalid id, in (token, slot) order.
                        assert_eq!((index, limit), (bad as i64, N_MAT));
                    }
                    other => panic!("id {bad}: expected IndexOutOfRange, got {other:?}"),
                }
            }
        }
    }
}

/// Two `mul_mat_id`s on the same activations with different ids (the executor may share the
/// conversion, never the grouping), and two with the same ids: each equals its own
/// one-column products.
#[test]
fn products_sharing_activations_keep_their_own_ids() {
    let _serial = serial();
    for t in [DType::Q4_0, DType::Q6K, DType::F16] {
        let mat_bytes = t.row_size(K) * N;
        let stacks: Vec<Arc<Vec<u8>>> = (0..2)
            .map(|s| {
                Arc::new(
                    (0..N_MAT)
                        .flat_map(|e| weight(t, N, 50 + 10 * s + e as u64))
                        .collect(),
                )
            })
            .collect();
        let n_tok = 6;
        let b_vals = values(9, K * n_tok);
        let ids = [ids_for(n_tok, 21), ids_for(n_tok, 22)];
        assert_ne!(ids[0], ids[1]);
        for same in [false, true] {
            for threads in [1, 2] {
                let mut ctx = Context::with_mem_size(16 << 20);
                let b = ctx.new_tensor_3d(DType::F32, K, 1, n_tok).expect("room");
                ctx.set_f32(b, &b_vals).expect("values");
                let mut g = Graph::new();
                let mut outs = Vec::new();
                for (s, stack) in stacks.iter().enumerate() {
                    let a = ctx
                        .new_tensor_external(t, &[K, N, N_MAT], Arc::clone(stack) as _, 0)
                        .expect("room");
                    if let Some(p) = PackedWeight::pack(t, [K, N, N_MAT, 1], stack) {
                        ctx.set_packed(a, &p).expect("a copy of this stack");
                    }
                    let id = ctx.new_tensor_2d(DType::I32, N_USED, n_tok).expect("room");
                    let which = if same { 0 } else { s };
                    ctx.set_i32(id, &ids[which]).expect("ids");
                    let y = ctx.mul_mat_id(a, b, id).expect("shapes agree");
                    g.build_forward_expand(&ctx, y).expect("valid graph");
                    outs.push((y, stack, which));
                }
                Executor::new(threads).compute(&mut ctx, &g).expect("runs");
                for (y, stack, which) in outs {
                    let got = bits(&ctx, y);
                    for c in 0..n_tok * N_USED {
                        let e = ids[which][c] as usize;
                        let want = one_column(
                            t,
                            &stack[e * mat_bytes..(e + 1) * mat_bytes],
                            &b_vals[(c / N_USED) * K..][..K],
                            1,
                        );
                        assert_eq!(
                            got[c * N..(c + 1) * N],
                            want[..],
                            "{t:?}, same ids {same}, {threads} threads, column {c}"
                        );
                    }
                }
            }
        }
    }
}

/// A packed stack also serves a batched `mul_mat` (each batch its own matrix): the copy's
/// panels are read matrix by matrix, giving the bits of the unpacked stack.
#[test]
fn a_packed_stack_serves_a_batched_mul_mat() {
    let _serial = serial();
    for t in [DType::Q8_0, DType::Q6K, DType::Q4_0] {
        let stack: Arc<Vec<u8>> = Arc::new(
            (0..N_MAT)
                .flat_map(|e| weight(t, N, 300 + e as u64))
                .collect(),
        );
        let b_vals = values(31, K * 3 * N_MAT);
        let run = |packed: Option<&PackedWeight>, threads: usize| {
            let mut ctx = Context::with_mem_size(16 << 20);
            let a = ctx
                .new_tensor_external(t, &[K, N, N_MAT], Arc::clone(&stack) as _, 0)
                .expect("room");
            if let Some(p) = packed {
                ctx.set_packed(a, p).expect("a copy of this stack");
            }
            let b = ctx.new_tensor_3d(DType::F32, K, 3, N_MAT).expect("room");
            ctx.set_f32(b, &b_vals).expect("values");
            let y = ctx.mul_mat(a, b).expect("one matrix per batch");
            let mut g = Graph::new();
            g.build_forward_expand(&ctx, y).expect("one node");
            Executor::new(threads).compute(&mut ctx, &g).expect("runs");
            bits(&ctx, y)
        };
        let Some(packed) = PackedWeight::pack(t, [K, N, N_MAT, 1], &stack) else {
            continue; // no panels for this type here: nothing packed to read
        };
        for threads in [1, 2] {
            let (got, want) = (run(Some(&packed), threads), run(None, threads));
            let differ = got.iter().zip(&want).filter(|(g, w)| g != w).count();
            assert_eq!(
                (got.len(), differ),
                (want.len(), 0),
                "{t:?}, {threads} threads: values differ"
            );
        }
    }
}
