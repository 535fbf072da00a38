//! `flash_attn_ext` over quantized keys and values (llama.cpp's `-ctk`/`-ctv` caches), written
//! by `set_rows` as a KV cache is, against a reference in f64 over the same stored values: the
//! keys and values as their blocks decode, the query as ggml converts it for the keys' dot
//! product (quantized to Q8_0 / Q8_1 for block keys, rounded to f16 for F16 keys). Also the
//! Walsh–Hadamard op that llama.cpp wraps around a quantized cache.

use crate::common;

use common::values;
use ggrs_core::{quants, Context, DType, Executor, Graph, Result, Tensor};

/// Row `bytes` of type `t` as f32 values.
fn decode(t: DType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    if t == DType::F16 {
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            *o = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        }
    } else {
        quants::dequantize_row_dyn(t, bytes, &mut out).unwrap();
    }
    out
}

const DK: usize = 64;
const N_KV: usize = 40;
const N_Q: usize = 3;
const NH: usize = 4;
const NHKV: usize = 2;

/// A cache of type `t` (`[DK·NHKV, N_KV]`) written from `src` by `set_rows`, and its view
/// `[DK, N_KV, NHKV]`.
fn cache(ctx: &mut Context, t: DType, src: &[f32], ids: Tensor) -> Result<(Tensor, Tensor)> {
    let c = ctx.new_tensor_2d(t, DK * NHKV, N_KV)?;
    ctx.data_mut(c)?.fill(0);
    let s = ctx.new_tensor_2d(DType::F32, DK * NHKV, N_KV)?;
    ctx.set_f32(s, src)?;
    let w = ctx.set_rows(c, s, ids)?;
    let (row, head) = (t.row_size(DK * NHKV), t.row_size(DK));
    Ok((c, ctx.view_3d(w, DK, N_KV, NHKV, row, head, 0)?))
}

#[test]
fn quantized_kv_attention_matches_the_reference() {
    let pairs = [
        (DType::Q8_0, DType::Q8_0),
        (DType::Q4_0, DType::F16),
        (DType::F16, DType::Q5_1),
        (DType::Q4_1, DType::IQ4NL),
        (DType::Q5_0, DType::Q4_0),
        (DType::IQ4NL, DType::Q8_0),
        (DType::Q5_1, DType::Q4_1),
    ];
    for (tk, tv) in pairs {
        let mut ctx = Context::with_mem_size(8 << 20);
        let qv = values(1, DK * N_Q * NH);
        let (kv, vv) = (values(2, DK * NHKV * N_KV), values(3, DK * NHKV * N_KV));
        let q = ctx.new_tensor_3d(DType::F32, DK, N_Q, NH).unwrap();
        ctx.set_f32(q, &qv).unwrap();
        let ids = ctx.new_tensor_1d(DType::I32, N_KV).unwrap();
        ctx.set_i32(ids, &(0..N_KV as i32).collect::<Vec<_>>())
            .unwrap();
        let (kc, kk) = cache(&mut ctx, tk, &kv, ids).unwrap();
        let (vc, vw) = cache(&mut ctx, tv, &vv, ids).unwrap();
        // Query i sees keys 0..=N_KV − N_Q + i, minus a few.
        let hidden = |i: usize, j: usize| j > N_KV - N_Q + i || (j * 5 + i) % 7 == 3;
        let mask_v: Vec<f32> = (0..N_Q * N_KV)
            .map(|x| {
                if hidden(x / N_KV, x % N_KV) {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        let mask = ctx.new_tensor_2d(DType::F32, N_KV, N_Q).unwrap();
        ctx.set_f32(mask, &mask_v).unwrap();
        let scale = 0.125;
        let out = ctx.flash_attn_ext(q, kk, vw, Some(mask), scale).unwrap();
        let mut g = Graph::new();
        g.build_forward_expand(&ctx, out).unwrap();
        Executor::new(2).compute(&mut ctx, &g).unwrap();
        let got = ctx.to_f32_vec(out).unwrap(); // [DK, NH, N_Q]
                                                // The stored keys and values, per cell and head.
        let (kb, vb) = (ctx.data(kc).unwrap(), ctx.data(vc).unwrap());
        let at = |t: DType, b: &[u8], cell: usize, h: usize| {
            let row = &b[cell * t.row_size(DK * NHKV)..];
            decode(t, &row[h * t.row_size(DK)..][..t.row_size(DK)], DK)
        };
        let mut err = 0f64;
        let mut norm = 0f64;
        for i in 0..N_Q {
            for h in 0..NH {
                let hk = h / (NH / NHKV);
                let qrow = &qv[(h * N_Q + i) * DK..][..DK];
                let qd: Vec<f32> = if tk == DType::F16 {
                    qrow.iter()
                        .map(|&x| half::f16::from_f32(x).to_f32())
                        .collect()
                } else {
                    let vdt = quants::vec_dot_type(tk).unwrap();
                    let mut b = vec![0u8; vdt.row_size(DK)];
                    quants::quantize_row_dyn(vdt, qrow, &mut b).unwrap();
                    decode(vdt, &b, DK)
                };
                let s: Vec<f64> = (0..N_KV)
                    .map(|j| {
                        if hidden(i, j) {
                            return f64::NEG_INFINITY;
                        }
                        let k = at(tk, kb, j, hk);
                        let d: f64 = k.iter().zip(&qd).map(|(&a, &b)| a as f64 * b as f64).sum();
                        d * scale as f64
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = s.iter().map(|&x| (x - m).exp()).collect();
                let sum: f64 = p.iter().sum();
                for d in 0..DK {
                    let want: f64 = (0..N_KV)
                        .filter(|&j| p[j] > 0.0)
                        .map(|j| p[j] * at(tv, vb, j, hk)[d] as f64)
                        .sum::<f64>()
                        / sum;
                    let g = got[(i * NH + h) * DK + d] as f64;
                    err += (g - want).powi(2);
                    norm += want.powi(2);
                }
            }
        }
        let nmse = err / norm;
        // f32 accumulation: ~1e-12; the f16 accumulator of F16 values: ~1e-6.
        let tol = if tv == DType::F16 { 2e-5 } else { 1e-9 };
        assert!(nmse < tol, "K {tk} V {tv}: NMSE {nmse:e} (bound {tol:e})");
    }
}

/// `hadamard` is the orthonormal Walsh–Hadamard rotation (its own inverse) on every run.
#[test]
fn hadamard_rotates_each_run_and_undoes_itself() {
    let mut ctx = Context::with_mem_size(1 << 20);
    let x = values(9, 128 * 3);
    let a = ctx.new_tensor_2d(DType::F32, 128, 3).unwrap();
    ctx.set_f32(a, &x).unwrap();
    let h = ctx.hadamard(a, 64).unwrap();
    let back = ctx.hadamard(h, 64).unwrap();
    let mut g = Graph::new();
    g.build_forward_expand(&ctx, back).unwrap();
    Executor::new(1).compute(&mut ctx, &g).unwrap();
    let (hv, bv) = (ctx.to_f32_vec(h).unwrap(), ctx.to_f32_vec(back).unwrap());
    for run in 0..6 {
        for i in 0..64usize {
            // Row i of the natural-order Hadamard matrix: (−1)^popcount(i & j).
            let want: f64 = (0..64)
                .map(|j| {
                    let sign = if (i & j).count_ones().is_multiple_of(2) {
                        1.0
                    } else {
                        -1.0
                    };
                    sign * x[run * 64 + j] as f64
                })
                .sum::<f64>()
                / 8.0;
            assert!(
                (hv[run * 64 + i] as f64 - want).abs() < 1e-5,
                "run {run} value {i}"
            );
        }
    }
    for (b, o) in bv.iter().zip(&x) {
        assert!((b - o).abs() < 1e-5);
    }
    assert!(ctx.hadamard(a, 48).is_err(), "not a power of two");
}
