//! How fast one-column `mul_mat`s (decoding) read their weights: `L` distinct weights of
//! `ROWS` rows of `K` values each (default: the 24 `ffn_down` matrices of Qwen2.5-0.5B,
//! 896 × 4864, 60 to 100 MB, more than the last-level cache), packed together as a model load
//! packs them, multiplied by one activation column each in one graph, as a decoding step
//! does. Prints the median time per graph and the weight bytes (file layout) read per second.
//!
//! `cargo run --release -p ggrs-core --example kquant_decode_rate -- [TYPE] [ROWS] [K] [L]
//! [THREADS] [REPS] [COLS]` (defaults `q4_k 896 4864 24 2 100 1`; TYPE one of q4_0, q4_1,
//! q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, iq1_s, iq1_m, iq2_xxs,
//! iq2_xs, iq2_s, iq3_xxs, iq3_s). With COLS > 1 the activations are COLS columns (a
//! prompt's products) instead of one.

use std::sync::Arc;
use std::time::Instant;

use ggrs_core::kernels::PackedWeight;
use ggrs_core::{Context, DType, Executor, ExternalData, Graph};

/// A deterministic stream of values in [-1, 1).
fn values(n: usize, seed: &mut u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn main() -> ggrs_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let count = |i: usize, d: &str| -> usize {
        let s = arg(i, d);
        s.parse().unwrap_or_else(|_| {
            eprintln!("argument {} ({s}) is not a count", i + 1);
            std::process::exit(2)
        })
    };
    let dtype = match arg(0, "q4_k").as_str() {
        "q4_0" => DType::Q4_0,
        "q8_0" => DType::Q8_0,
        "q4_1" => DType::Q4_1,
        "q5_0" => DType::Q5_0,
        "q5_1" => DType::Q5_1,
        "q3_k" => DType::Q3K,
        "q2_k" => DType::Q2K,
        "q4_k" => DType::Q4K,
        "q5_k" => DType::Q5K,
        "q6_k" => DType::Q6K,
        "iq4_nl" => DType::IQ4NL,
        "iq4_xs" => DType::IQ4XS,
        "iq2_xxs" => DType::IQ2XXS,
        "iq2_xs" => DType::IQ2XS,
        "iq2_s" => DType::IQ2S,
        "iq3_xxs" => DType::IQ3XXS,
        "iq3_s" => DType::IQ3S,
        "iq1_s" => DType::IQ1S,
        "iq1_m" => DType::IQ1M,
        other => {
            eprintln!(
                "unknown type {other}: q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, \
                 iq4_nl, iq4_xs, iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs or iq3_s"
            );
            std::process::exit(2)
        }
    };
    let (rows, k, layers) = (count(1, "896"), count(2, "4864"), count(3, "24"));
    let (threads, reps) = (count(4, "2"), count(5, "100").max(1));
    let cols = count(6, "1").max(1);
    let quantize = ggrs_core::types::traits(dtype)
        .from_f32
        .expect("the listed types quantize from f32");
    let row_bytes = dtype.row_size(k);
    // Real blocks: every row quantized from its own random values (a few distinct rows,
    // repeated, keep the set-up short; the weights still differ from layer to layer).
    let mut seed = 5;
    let distinct: Vec<Vec<u8>> = (0..64)
        .map(|_| {
            let mut q = vec![0u8; row_bytes];
            quantize(&values(k, &mut seed), &mut q);
            q
        })
        .collect();
    let datas: Vec<Arc<Vec<u8>>> = (0..layers)
        .map(|l| {
            let mut d = Vec::with_capacity(rows * row_bytes);
            for r in 0..rows {
                d.extend_from_slice(&distinct[(r * 7 + l * 13) % distinct.len()]);
            }
            Arc::new(d)
        })
        .collect();
    let ne = [k, rows, 1, 1];
    let packed = PackedWeight::pack_all(
        &datas
            .iter()
            .map(|d| (dtype, ne, &d[..]))
            .collect::<Vec<_>>(),
        |_| (),
    );
    let mut ctx = Context::with_mem_size(256 << 20);
    let x = ctx.new_tensor_2d(DType::F32, k, cols)?;
    ctx.set_f32(x, &values(k * cols, &mut seed))?;
    let mut graph = Graph::new();
    let mut outs = Vec::new();
    for (d, p) in datas.iter().zip(&packed) {
        let data: Arc<dyn ExternalData> = Arc::clone(d) as Arc<dyn ExternalData>;
        let w = ctx.new_tensor_external(dtype, &[k, rows], data, 0)?;
        if let Some(p) = p {
            ctx.set_packed(w, p)?;
        }
        let y = ctx.mul_mat(w, x)?;
        graph.build_forward_expand(&ctx, y)?;
        outs.push(y);
    }
    let mut exec = Executor::new(threads);
    exec.compute(&mut ctx, &graph)?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = Instant::now();
        exec.compute(&mut ctx, &graph)?;
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[reps / 2];
    let bytes = (layers * rows * row_bytes) as f64;
    let mut check = 0f64;
    for y in outs {
        check += ctx.to_f32_vec(y)?.iter().map(|&v| v as f64).sum::<f64>();
    }
    println!(
        "{dtype} {layers} x {rows}x{k} cols={cols} t={threads} packed={}: median {:.3} ms, {:.1} GB/s \
         (fastest {:.3} ms, {:.1} GB/s) check {check:.6e}",
        packed.iter().all(Option::is_some),
        median * 1e3,
        bytes / median / 1e9,
        times[0] * 1e3,
        bytes / times[0] / 1e9,
    );
    Ok(())
}
