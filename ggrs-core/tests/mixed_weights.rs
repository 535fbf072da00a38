//! Weights of different types that read the same activations (a layer's Q, K and V, or gate
//! and up, in llama.cpp's k-quant mixtures) must each give what they give alone.
//!
//! The executor converts a `mul_mat`'s activations once and lets the next `mul_mat` of the
//! same input reuse that conversion. Each weight type's kernel may need its own converted form
//! (another vec-dot type, or side data after the rows for a panel kernel), so a conversion made
//! for one type must never be handed to another that needs a different form. This test runs
//! every ordered pair of weight types on one input in one graph, on 1 and 2 threads, with the
//! SIMD kernels and with the portable ones, and requires each result to equal, bit for bit, the
//! same weight computed in a graph of its own.

mod common;

use common::values;
use ggrs_core::quants::dispatch::force_scalar;
use ggrs_core::{Context, DType, Executor, Graph};

/// Every weight type `mul_mat` takes.
const TYPES: [DType; 16] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Q8K,
    DType::IQ4NL,
    DType::IQ4XS,
];

/// Activation width: a multiple of 256 (k-quant super-blocks) and of 32.
const K: usize = 512;

/// `rows` rows of type `t`, quantized from seeded values.
fn weight(t: DType, rows: usize, seed: u64) -> Vec<u8> {
    let x = values(seed, K * rows);
    common::encode(t, &x)
}

/// Computes `mul_mat(w, x)` for each weight of `ws` (type, rows, bytes) on the input `x`
/// (`m` columns), all in one graph, and returns each result's bytes.
fn run(ws: &[(DType, usize, &[u8])], x: &[f32], m: usize, threads: usize) -> Vec<Vec<u8>> {
    let mut ctx = Context::with_mem_size(2 << 20);
    let input = ctx.new_tensor_2d(DType::F32, K, m).unwrap();
    ctx.set_f32(input, x).unwrap();
    let outs: Vec<_> = ws
        .iter()
        .map(|&(t, rows, bytes)| {
            let w = ctx.new_tensor_2d(t, K, rows).unwrap();
            ctx.set_bytes(w, bytes).unwrap();
            ctx.mul_mat(w, input).unwrap()
        })
        .collect();
    // One graph holding every product (they share the input), in the order given.
    let mut g = Graph::new();
    for &o in &outs {
        g.build_forward_expand(&ctx, o).unwrap();
    }
    Executor::new(threads).compute(&mut ctx, &g).unwrap();
    outs.iter()
        .map(|&o| {
            ctx.to_f32_vec(o)
                .unwrap()
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()
        })
        .collect()
}

fn check_all_pairs() {
    // 32 rows: enough for the panel kernels (16 rows) and a multiple of 8 (llama.cpp's
    // repacked Q4_0 order); 40 rows for the second weight, a different shape.
    let (n1, n2) = (32, 40);
    let weights: Vec<(Vec<u8>, Vec<u8>)> = TYPES
        .iter()
        .enumerate()
        .map(|(i, &t)| (weight(t, n1, 1 + i as u64), weight(t, n2, 101 + i as u64)))
        .collect();
    for m in [1usize, 3, 9] {
        let x = values(99 + m as u64, K * m);
        for threads in [1, 2] {
            // Each weight alone, as the first (n1 rows) and as the second (n2 rows) weight.
            let alone: Vec<(Vec<u8>, Vec<u8>)> = TYPES
                .iter()
                .zip(&weights)
                .map(|(&t, (w1, w2))| {
                    (
                        run(&[(t, n1, w1)], &x, m, threads).remove(0),
                        run(&[(t, n2, w2)], &x, m, threads).remove(0),
                    )
                })
                .collect();
            for (i, &a) in TYPES.iter().enumerate() {
                for (j, &b) in TYPES.iter().enumerate() {
                    let both = run(
                        &[(a, n1, &weights[i].0), (b, n2, &weights[j].1)],
                        &x,
                        m,
                        threads,
                    );
                    assert!(
                        both[0] == alone[i].0 && both[1] == alone[j].1,
                        "{a} then {b} on one input ({m} columns, {threads} threads): \
                         {a} equal to alone: {}, {b} equal to alone: {}",
                        both[0] == alone[i].0,
                        both[1] == alone[j].1
                    );
                }
            }
        }
    }
}

/// Both builds in one test: `force_scalar` switches the whole process.
#[test]
fn weights_sharing_an_input_give_their_own_results() {
    force_scalar(false);
    check_all_pairs();
    force_scalar(true);
    check_all_pairs();
    force_scalar(false);
}
