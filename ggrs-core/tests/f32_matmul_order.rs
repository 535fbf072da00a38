//! An F32 weight's `mul_mat` sums in ggml's orders (on the AVX-512 build llama.cpp's
//! reference outputs come from): llamafile's tinyBLAS (one accumulator of 16 FMA lanes per
//! output, then `_mm512_reduce_add_ps`) for two columns or more of contiguous activations
//! and a row count that is a multiple of 4 (tinyBLAS's `matmul` refuses others),
//! `ggml_vec_dot_f32` (four accumulators of 16 lanes over blocks of 64) for one column,
//! strided activations or other row counts. A MoE router (F32) multiplied in another order may round a
//! probability differently from llama.cpp's and, near a tie, choose another expert.

use crate::common;

use common::values;
use ggrs_core::{Context, DType, Executor, Graph};

const K: usize = 192;

/// GCC's `_mm512_reduce_add_ps`: 8 + 8, then 4 + 4, then (0 + 2) + (1 + 3).
fn reduce_add_ps(v: &[f32; 16]) -> f32 {
    let h8: Vec<f32> = (0..8).map(|i| v[i + 8] + v[i]).collect();
    let h4: Vec<f32> = (0..4).map(|i| h8[i + 4] + h8[i]).collect();
    (h4[0] + h4[2]) + (h4[1] + h4[3])
}

fn tinyblas(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (ca, cb) in a.chunks_exact(16).zip(b.chunks_exact(16)) {
        for l in 0..16 {
            acc[l] = ca[l].mul_add(cb[l], acc[l]);
        }
    }
    reduce_add_ps(&acc)
}

fn vec_dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [[0f32; 16]; 4];
    for (ca, cb) in a.chunks_exact(64).zip(b.chunks_exact(64)) {
        for (r, reg) in acc.iter_mut().enumerate() {
            for l in 0..16 {
                reg[l] = ca[16 * r + l].mul_add(cb[16 * r + l], reg[l]);
            }
        }
    }
    let mut r = [0f32; 16];
    for l in 0..16 {
        r[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    reduce_add_ps(&r)
}

/// `mul_mat(w, x)` for `n` rows of `w` and `m` columns of `x` (`x` transposed into a
/// strided view when `strided`), on `threads`.
fn product(w: &[f32], x: &[f32], n: usize, m: usize, strided: bool, threads: usize) -> Vec<f32> {
    let mut ctx = Context::with_mem_size(1 << 20);
    let wt = ctx.new_tensor_2d(DType::F32, K, n).unwrap();
    ctx.set_f32(wt, w).unwrap();
    let b = if strided {
        // x stored as [m, K]: its transpose is [K, m] with strided rows.
        let xt = ctx.new_tensor_2d(DType::F32, m, K).unwrap();
        let mut t = vec![0f32; m * K];
        for j in 0..m {
            for k in 0..K {
                t[j + m * k] = x[k + K * j];
            }
        }
        ctx.set_f32(xt, &t).unwrap();
        ctx.transpose(xt).unwrap()
    } else {
        let xb = ctx.new_tensor_2d(DType::F32, K, m).unwrap();
        ctx.set_f32(xb, &x[..K * m]).unwrap();
        xb
    };
    let y = ctx.mul_mat(wt, b).unwrap();
    let mut g = Graph::new();
    g.build_forward_expand(&ctx, y).unwrap();
    Executor::new(threads).compute(&mut ctx, &g).unwrap();
    ctx.to_f32_vec(y).unwrap()
}

#[test]
fn f32_weights_take_ggml_orders() {
    let x = values(2, K * 5);
    for (threads, n) in [(1, 8), (2, 8), (1, 6), (2, 6)] {
        let w = values(1, K * n);
        for (m, strided) in [(1, false), (2, false), (5, false), (5, true), (1, true)] {
            let got = product(&w, &x, n, m, strided, threads);
            let mut differs_from_other = false;
            for j in 0..m {
                for i in 0..n {
                    let (a, b) = (&w[i * K..(i + 1) * K], &x[j * K..(j + 1) * K]);
                    let (tb, vd) = (tinyblas(a, b), vec_dot_f32(a, b));
                    let (want, other) = if m >= 2 && !strided && n % 4 == 0 {
                        (tb, vd)
                    } else {
                        (vd, tb)
                    };
                    assert_eq!(
                        got[i + n * j].to_bits(),
                        want.to_bits(),
                        "{n} rows, {m} columns, strided {strided}, {threads} threads: ({i}, {j})"
                    );
                    differs_from_other |= want.to_bits() != other.to_bits();
                }
            }
            // The two orders round differently somewhere (else this test tells nothing).
            if m == 5 {
                assert!(differs_from_other, "the orders agree on every value");
            }
        }
    }
}
