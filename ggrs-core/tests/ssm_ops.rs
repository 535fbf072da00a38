//! The recurrent layers' ops against plain loops of their recurrences written here, bit for
//! bit (same f32 arithmetic in the same order), on 1–3 threads, and their shape contracts:
//! - `ssm_conv`, the short causal convolution (LFM2, Mamba-2, the gated delta-net).

mod common;

use common::*;
use ggrs_core::{Context, DType, Executor, Graph, Result, Tensor};

/// Computes `out` on `threads` threads and reads it back.
fn compute(ctx: &mut Context, out: Tensor, threads: usize) -> Result<Vec<f32>> {
    let mut g = Graph::new();
    g.build_forward_expand(ctx, out)?;
    Executor::new(threads).compute(ctx, &g)?;
    ctx.to_f32_vec(out)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The convolution as a loop: `y[i, t, s] = Σ_k sx[t + k, i, s] · c[k, i]`, in order of k,
/// as GCC compiles ggml's loop (products of whole groups of four rounded, the rest fused).
fn ssm_conv_ref(sx: &[f32], c: &[f32], d_conv: usize, d_inner: usize, n_t: usize) -> Vec<f32> {
    let ncs = d_conv - 1 + n_t;
    let n_s = sx.len() / (ncs * d_inner);
    let mut y = vec![0.0; d_inner * n_t * n_s];
    for s in 0..n_s {
        for t in 0..n_t {
            for i in 0..d_inner {
                let mut sum = 0.0f32;
                for k in 0..d_conv {
                    let (a, b) = (sx[(s * d_inner + i) * ncs + t + k], c[i * d_conv + k]);
                    sum = match k < d_conv / 4 * 4 {
                        true => sum + a * b,
                        false => a.mul_add(b, sum),
                    };
                }
                y[(s * n_t + t) * d_inner + i] = sum;
            }
        }
    }
    y
}

#[test]
fn ssm_conv_is_the_loop() {
    for (d_conv, d_inner, n_t, n_s) in [(4, 37, 9, 2), (3, 64, 1, 5), (4, 130, 17, 1), (6, 11, 3, 2), (2, 8, 0, 1)]
    {
        let ncs = d_conv - 1 + n_t;
        let sx = values(1 + n_t as u64, ncs * d_inner * n_s);
        let c = values(99, d_conv * d_inner);
        let want = ssm_conv_ref(&sx, &c, d_conv, d_inner, n_t);
        for threads in [1, 2, 3] {
            let mut ctx = Context::with_mem_size(1 << 22);
            let (tx, _) = leaf(&mut ctx, DType::F32, [ncs, d_inner, n_s, 1], &sx).unwrap();
            let (tc, _) = leaf(&mut ctx, DType::F32, [d_conv, d_inner, 1, 1], &c).unwrap();
            let y = ctx.ssm_conv(tx, tc).unwrap();
            assert_eq!(ctx.meta(y).unwrap().ne, [d_inner, n_t, n_s, 1]);
            if n_t == 0 {
                continue;
            }
            let got = compute(&mut ctx, y, threads).unwrap();
            assert!(same_bits(&got, &want), "{d_conv} {d_inner} {n_t} {n_s}");
        }
    }
}

#[test]
fn ssm_conv_checks_shapes() {
    let mut ctx = Context::with_mem_size(1 << 20);
    let sx = ctx.new_tensor(DType::F32, &[6, 8, 2]).unwrap();
    let c = ctx.new_tensor(DType::F32, &[4, 9]).unwrap();
    assert!(ctx.ssm_conv(sx, c).is_err(), "channels differ");
    let short = ctx.new_tensor(DType::F32, &[2, 9]).unwrap();
    let c4 = ctx.new_tensor(DType::F32, &[4, 9]).unwrap();
    assert!(ctx.ssm_conv(short, c4).is_err(), "fewer columns than the state");
    let f16 = ctx.new_tensor(DType::F16, &[4, 9]).unwrap();
    let sx9 = ctx.new_tensor(DType::F32, &[6, 9]).unwrap();
    assert!(ctx.ssm_conv(sx9, f16).is_err(), "f16 kernels");
    // A transposed input (strided rows) is refused: the caller makes it contiguous.
    let t = ctx.new_tensor(DType::F32, &[9, 6]).unwrap();
    let tt = ctx.transpose(t).unwrap();
    assert!(ctx.ssm_conv(tt, c4).is_err());
}
