//! Times every build of a weight type's one-column dot product (ggml's `vec_dot` order, the
//! 4-row form decoding runs) against each other in the same process, alternating: ns per
//! weight block, fastest of `ROUNDS` rounds. For A/B comparisons of kernel builds on a busy
//! machine, where whole-model benchmarks are too noisy.
//!
//! `cargo run --release -p ggrs-core --example iq_dot_ab -- [TYPE] [ROWS] [K] [ROUNDS]`
//! (defaults `iq3_s 896 4864 20`; TYPE: any block type name `DType` parses, e.g. iq2_xxs).

use std::time::Instant;

use ggrs_core::quants::dispatch::{vec_dot_variants_in, SumOrder};
use ggrs_core::DType;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let name = arg(0, "iq3_s");
    let Some(dtype) = DType::ALL
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(&name))
    else {
        eprintln!("unknown type {name}");
        std::process::exit(2)
    };
    let num = |i: usize, d: &str| arg(i, d).parse::<usize>().unwrap_or(1).max(1);
    let (rows, k, rounds) = (num(1, "896"), num(2, "4864"), num(3, "20"));
    let vdt = ggrs_core::types::traits(dtype).vec_dot_type;
    let (rs, ys) = (dtype.row_size(k), vdt.row_size(k));
    // Any bytes: the kernels' speed does not depend on the values (f16 scales kept finite).
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut byte = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 24) as u8 & 0x3b
    };
    let w: Vec<u8> = (0..rows * rs).map(|_| byte()).collect();
    let y: Vec<u8> = (0..ys).map(|_| byte()).collect();
    let builds = vec_dot_variants_in(dtype, SumOrder::GgmlLanes);
    let mut best = vec![f64::INFINITY; builds.len()];
    let mut check = vec![0f32; builds.len()];
    for _ in 0..rounds {
        for (b, v) in builds.iter().enumerate() {
            let t0 = Instant::now();
            let mut acc = 0f32;
            for r in (0..rows / 4 * 4).step_by(4) {
                let a: [&[u8]; 4] = std::array::from_fn(|i| &w[(r + i) * rs..(r + i + 1) * rs]);
                acc += (v.rows4)(k, a, &y).iter().sum::<f32>();
            }
            best[b] = best[b].min(t0.elapsed().as_secs_f64());
            check[b] = acc;
        }
    }
    let blocks = (rows / 4 * 4 * k / dtype.block_size()) as f64;
    for (b, v) in builds.iter().enumerate() {
        println!(
            "{dtype} {:?}: {:.1} ns per block ({:.3} ms per {rows}x{k}) check {:e}",
            v.isa,
            best[b] * 1e9 / blocks,
            best[b] * 1e3,
            check[b]
        );
    }
}
