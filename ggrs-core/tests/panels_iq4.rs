//! IQ4_NL and IQ4_XS `mul_mat` through the panel kernels (`kernels::x86::panel_iq4`) give
//! the bits of the other paths: with the weight packed ahead (`PackedWeight`) or packed
//! chunk by chunk, against the tile kernels (panels switched off) and the portable kernels
//! (`force_scalar`), for 1 to 17 columns (IQ4_XS changes order at eight), row counts that
//! leave rows past the last whole panel, and 1 and 2 threads. (Each path is checked against
//! ggml's one-element orders in the unit tests; this checks how `mul_mat` strings them
//! together: plans, packed-copy lookup, leftover rows.)

mod common;

use std::sync::Arc;

use ggrs_core::kernels::PackedWeight;
use ggrs_core::quants::dispatch::{force_no_panels, force_scalar};
use ggrs_core::{quants, Context, DType, Executor, Graph};

/// Seeded values in [−2, 2) (`common::values`, doubled).
fn values(seed: u64, n: usize) -> Vec<f32> {
    common::values(seed, n)
        .into_iter()
        .map(|v| v * 2.0)
        .collect()
}

/// `mul_mat` of the external weight `w` (`[k, n]` of `t`) with the `m` columns `x`.
fn product(t: DType, k: usize, n: usize, w: &Arc<Vec<u8>>, x: &[f32], threads: usize) -> Vec<u32> {
    let m = x.len() / k;
    let mut ctx = Context::with_mem_size(Context::mem_size_for(3, 4 * k * m + 4 * n * m + 4096));
    let a = ctx
        .new_tensor_external(t, &[k, n], Arc::clone(w) as _, 0)
        .expect("the weight fits its buffer");
    let b = ctx.new_tensor_2d(DType::F32, k, m).expect("arena room");
    ctx.set_f32(b, x).expect("m columns of k values");
    let out = ctx.mul_mat(a, b).expect("shapes agree");
    let g = Graph::build(&ctx, out).expect("one node");
    Executor::new(threads).compute(&mut ctx, &g).expect("runs");
    ctx.to_f32_vec(out)
        .expect("f32 output")
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// How many values of `got` differ from `want` (in bits).
fn differ(got: &[u32], want: &[u32]) -> usize {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).filter(|(g, w)| g != w).count()
}

#[test]
fn iq4_panels_give_the_bits_of_the_other_paths() {
    let cases = [
        // IQ4_NL: repacked by llama.cpp (rows a multiple of 8), one panel plus 8 rows.
        (DType::IQ4NL, 7 * 32, 24),
        (DType::IQ4NL, 28 * 32, 48),
        // IQ4_XS: rows past the last panel; odd super-block counts.
        (DType::IQ4XS, 256, 40),
        (DType::IQ4XS, 3 * 256, 33),
    ];
    for (i, &(t, k, n)) in cases.iter().enumerate() {
        let mut w = vec![0u8; t.row_size(k) * n];
        quants::quantize_row_dyn(t, &values(1 + i as u64, k * n), &mut w).expect("whole blocks");
        let w = Arc::new(w);
        for m in [1usize, 2, 3, 7, 8, 9, 17] {
            let x = values(100 + m as u64, k * m);
            for threads in [1, 2] {
                let what = format!("{t} k={k} n={n} m={m} {threads} threads");
                force_no_panels(true);
                let tiles = product(t, k, n, &w, &x, threads);
                force_no_panels(false);
                force_scalar(true);
                let portable = product(t, k, n, &w, &x, threads);
                force_scalar(false);
                assert_eq!(
                    differ(&tiles, &portable),
                    0,
                    "{what}: tiles and portable kernels"
                );
                let unpacked = product(t, k, n, &w, &x, threads);
                assert_eq!(
                    differ(&unpacked, &tiles),
                    0,
                    "{what}: panels packed chunk by chunk"
                );
                let packed = PackedWeight::pack(t, [k, n, 1, 1], &w);
                // (Only x86-64 packs weights.)
                assert_eq!(
                    packed.is_some(),
                    cfg!(target_arch = "x86_64"),
                    "{what}: packing"
                );
                let with_copy = product(t, k, n, &w, &x, threads);
                drop(packed);
                assert_eq!(differ(&with_copy, &tiles), 0, "{what}: panels packed ahead");
            }
        }
    }
}
