//! `rope_yarn` (YaRN's blend and a magnitude factor, LongRoPE's attention factor) against a
//! direct f64 evaluation of ggml's formula; without blend or factor it gives `rope_ext`'s
//! bits; the correction range as ggml computes it.

use crate::common;

use ggrs_core::{Context, DType, Executor, Graph, RopeMode, RopeParams, RopeYarn, Tensor};

/// `[hd, nh, n]` input of seeded values, positions `pos`; `f` builds the op; the result.
fn run(
    hd: usize,
    nh: usize,
    pos: &[i32],
    factors: Option<&[f32]>,
    threads: usize,
    f: impl Fn(&mut Context, Tensor, Tensor, Option<Tensor>) -> Tensor,
) -> (Vec<f32>, Vec<f32>) {
    let n = pos.len();
    let x = common::values(11, hd * nh * n);
    let mut ctx = Context::with_mem_size(4 << 20);
    let a = ctx.new_tensor_3d(DType::F32, hd, nh, n).unwrap();
    ctx.set_f32(a, &x).unwrap();
    let p = ctx.new_tensor_1d(DType::I32, n).unwrap();
    ctx.data_mut(p).unwrap().copy_from_slice(
        &pos.iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
    );
    let ff = factors.map(|v| {
        let t = ctx.new_tensor_1d(DType::F32, v.len()).unwrap();
        ctx.set_f32(t, v).unwrap();
        t
    });
    let out = f(&mut ctx, a, p, ff);
    let mut g = Graph::new();
    g.build_forward_expand(&ctx, out).unwrap();
    Executor::new(threads).compute(&mut ctx, &g).unwrap();
    (x, ctx.to_f32_vec(out).unwrap())
}

#[test]
fn corr_dims_as_ggml() {
    // The tiny YaRN models: llama (16 dims, original context 32, base 1e4) and gpt-oss
    // (16 dims, 64, base 150000) both give pairs [0, 2].
    assert_eq!(RopeYarn::corr_dims(16, 32, 10000.0, 32.0, 1.0), [0.0, 2.0]);
    assert_eq!(RopeYarn::corr_dims(16, 64, 150000.0, 32.0, 1.0), [0.0, 2.0]);
    // GPT-OSS 20B: 64 dims, 4096 positions, base 150000.
    assert_eq!(
        RopeYarn::corr_dims(64, 4096, 150000.0, 32.0, 1.0),
        [8.0, 18.0]
    );
}

#[test]
fn no_blend_and_unit_factor_is_rope_ext() {
    let pos = [0, 1, 5, 40, 41];
    let p = RopeParams {
        n_dims: 12,
        mode: RopeMode::Neox,
        freq_base: 10000.0,
        freq_scale: 0.5,
    };
    let ff = [1.0, 1.5, 2.0, 4.0, 9.0, 40.0];
    let y = RopeYarn {
        ext_factor: 0.0,
        attn_factor: 1.0,
        corr_dims: [0.0, 2.0],
    };
    for threads in [1, 2] {
        let (_, a) = run(16, 3, &pos, Some(&ff), threads, |c, a, p0, f| {
            c.rope_ext_factors(a, p0, f, p).unwrap()
        });
        let (_, b) = run(16, 3, &pos, Some(&ff), threads, |c, a, p0, f| {
            c.rope_yarn(a, p0, f, p, y).unwrap()
        });
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}

#[test]
fn yarn_follows_the_formula() {
    let (hd, nh, n_dims) = (16, 2, 16);
    let pos = [0, 3, 17, 31, 33, 100];
    let y = RopeYarn {
        ext_factor: 1.0,
        attn_factor: 0.9,
        corr_dims: RopeYarn::corr_dims(n_dims, 32, 10000.0, 32.0, 1.0),
    };
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        let p = RopeParams {
            n_dims,
            mode,
            freq_base: 10000.0,
            freq_scale: 0.25,
        };
        let (x, out) = run(hd, nh, &pos, None, 2, |c, a, p0, f| {
            c.rope_yarn(a, p0, f, p, y).unwrap()
        });
        let m = 0.9 * (1.0 + 0.1 * 4f64.ln());
        for (t, &pp) in pos.iter().enumerate() {
            for h in 0..nh {
                let row = &x[(t * nh + h) * hd..][..hd];
                let got = &out[(t * nh + h) * hd..][..hd];
                for i in 0..n_dims / 2 {
                    let extrap = pp as f64 * 10000f64.powf(-2.0 * i as f64 / n_dims as f64);
                    let ramp = 1.0 - ((i as f64 - 0.0) / 2.0).clamp(0.0, 1.0);
                    let th = extrap * 0.25 * (1.0 - ramp) + extrap * ramp;
                    let (j0, j1) = match mode {
                        RopeMode::Normal => (2 * i, 2 * i + 1),
                        RopeMode::Neox => (i, i + n_dims / 2),
                    };
                    let (x0, x1) = (row[j0] as f64, row[j1] as f64);
                    let (c, s) = (th.cos() * m, th.sin() * m);
                    let want = [x0 * c - x1 * s, x0 * s + x1 * c];
                    for (g, w) in [got[j0], got[j1]].iter().zip(want) {
                        assert!((*g as f64 - w).abs() < 1e-4, "{mode:?} pos {pp} pair {i}");
                    }
                }
            }
        }
    }
}
