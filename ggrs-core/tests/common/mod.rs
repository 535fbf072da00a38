//! What the integration tests of ggrs-core share (one module, `common`, the name every crate's
//! tests use, for every test binary): seeded values and their encoding in any weight type
//! (here), and the op tests' harness, input layouts and reference arrays ([`cases`]).

#![allow(dead_code)] // each test binary uses its own part

mod cases;
#[allow(unused_imports)] // not every test binary runs op cases
pub use cases::*;

use ggrs_core::{quants, Context, DType, Executor, Graph};

/// `n` values in [-1, 1) from `seed` (xorshift; the same on every machine).
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0
        })
        .collect()
}

/// `x` stored as type `t` (converted for the float types, quantized for block types);
/// `x.len()` a whole number of `t`'s blocks.
pub fn encode(t: DType, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; t.row_size(x.len())];
    match t {
        DType::F32 => {
            for (o, v) in out.chunks_exact_mut(4).zip(x) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        DType::F16 => {
            for (o, v) in out.chunks_exact_mut(2).zip(x) {
                o.copy_from_slice(&half::f16::from_f32(*v).to_le_bytes());
            }
        }
        DType::BF16 => {
            for (o, v) in out.chunks_exact_mut(2).zip(x) {
                o.copy_from_slice(&half::bf16::from_f32(*v).to_le_bytes());
            }
        }
        _ => quants::quantize_row_dyn(t, x, &mut out).expect("whole blocks"),
    }
    out
}

/// `mul_mat(w, x)` for `w: [k, n]` of type `t` (bytes) and `x: [k, m]` f32, on `threads`
/// threads.
pub fn run_mul_mat(
    t: DType,
    w: &[u8],
    x: &[f32],
    k: usize,
    n: usize,
    m: usize,
    threads: usize,
) -> Vec<f32> {
    let mut ctx = Context::with_mem_size(16 << 20);
    let a = ctx.new_tensor(t, &[k, n]).expect("arena");
    let b = ctx.new_tensor(DType::F32, &[k, m]).expect("arena");
    ctx.set_bytes(a, w).expect("whole rows");
    ctx.set_f32(b, x).expect("k·m values");
    let out = ctx.mul_mat(a, b).expect("shapes agree");
    let g = Graph::build(&ctx, out).expect("one node");
    Executor::new(threads)
        .compute(&mut ctx, &g)
        .expect("computes");
    ctx.to_f32_vec(out).expect("f32 result")
}
