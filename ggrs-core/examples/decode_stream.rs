//! The read rate of one decoding `mul_mat` (one activation column) against a large weight
//! packed as a model load packs it: `cargo run --release -p ggrs-core --example
//! decode_stream -- [TYPE] [ROWS] [K] [THREADS] [REPS] [COLUMNS]` (defaults: `q6_k 151936
//! 1024 2 200 1`, the shape of Qwen3's output matrix in the generated test models, one
//! column as in decoding). Prints the median time per product and the weight bytes read per
//! second at that median, and the process's CPU time per product (which other processes
//! sharing the cores inflate less than the wall time).

use std::sync::Arc;
use std::time::Instant;

use ggrs_core::kernels::PackedWeight;
use ggrs_core::{Context, DType, Executor, Graph};

/// A deterministic byte stream.
fn bytes(n: usize, seed: &mut u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (*seed >> 56) as u8
        })
        .collect()
}

/// CPU time of the process so far, in seconds (all threads; Linux only, 0 elsewhere).
fn cpu_seconds() -> f64 {
    #[cfg(target_os = "linux")]
    {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid timespec to write.
        unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
        t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
    }
    #[cfg(not(target_os = "linux"))]
    {
        0.0
    }
}

fn main() -> ggrs_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let bad = |detail: String| ggrs_core::Error::InvalidArgument {
        op: "decode_stream",
        detail,
    };
    let dtype: DType = match arg(0, "q6_k").as_str() {
        "q6_k" => DType::Q6K,
        "q4_0" => DType::Q4_0,
        "q8_0" => DType::Q8_0,
        "q4_k" => DType::Q4K,
        other => {
            return Err(bad(format!(
                "unknown type {other} (q6_k, q4_0, q8_0, q4_k)"
            )))
        }
    };
    let parse = |i: usize, d: &str| -> ggrs_core::Result<usize> {
        let v = arg(i, d);
        v.parse()
            .map_err(|_| bad(format!("argument {} ({v}) is not a count", i + 1)))
    };
    let (rows, k, threads, reps) = (
        parse(1, "151936")?,
        parse(2, "1024")?,
        parse(3, "2")?,
        parse(4, "200")?.max(1),
    );
    let m = parse(5, "1")?.max(1);
    if k == 0 || !k.is_multiple_of(dtype.block_size()) || rows == 0 {
        return Err(bad(format!(
            "{rows} rows of {k} values: need rows and a multiple of {} values",
            dtype.block_size()
        )));
    }
    // Real quantized rows: quantize random f32 values (a valid block for every type).
    let mut seed = 7;
    let x: Vec<f32> = bytes(k * m, &mut seed)
        .iter()
        .map(|&b| b as f32 / 64.0 - 2.0)
        .collect();
    let row_bytes = dtype.row_size(k);
    let mut one = vec![0u8; row_bytes];
    let mut ctx = Context::with_mem_size(64 << 20);
    let wf: Vec<f32> = (0..k)
        .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
        .collect();
    let from = ggrs_core::types::traits(dtype)
        .from_f32
        .ok_or_else(|| bad(format!("{dtype} does not quantize from f32")))?;
    from(&wf, &mut one);
    let mut data = Vec::with_capacity(rows * row_bytes);
    for r in 0..rows {
        // Vary the rows a little: rotate the row's bytes (whole blocks stay valid blocks).
        let bs = dtype.type_size();
        let shift = (r % (k / dtype.block_size())) * bs;
        data.extend_from_slice(&one[shift..]);
        data.extend_from_slice(&one[..shift]);
    }
    let buf: Arc<dyn ggrs_core::ExternalData> = Arc::new(data);
    let w = ctx.new_tensor_external(dtype, &[k, rows], Arc::clone(&buf), 0)?;
    let packed = PackedWeight::pack(dtype, [k, rows, 1, 1], buf.bytes());
    if let Some(p) = &packed {
        ctx.set_packed(w, p)?;
    }
    let a = ctx.new_tensor_2d(DType::F32, k, m)?;
    ctx.set_f32(a, &x)?;
    let y = ctx.mul_mat(w, a)?;
    let graph = Graph::build(&ctx, y)?;
    let mut exec = Executor::new(threads);
    exec.compute(&mut ctx, &graph)?;
    let mut times = Vec::with_capacity(reps);
    let mut cpu = Vec::with_capacity(reps);
    for _ in 0..reps {
        let (t0, c0) = (Instant::now(), cpu_seconds());
        exec.compute(&mut ctx, &graph)?;
        times.push(t0.elapsed().as_secs_f64());
        cpu.push(cpu_seconds() - c0);
    }
    times.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    let med = times[reps / 2];
    let gb = (rows * row_bytes) as f64 / 1e9;
    let out = ctx.to_f32_vec(y)?;
    let check: f64 = out.iter().map(|&v| v as f64).sum();
    println!(
        "{dtype} {rows}x{k} m={m} t={threads} packed={} median {:.3} ms  {:.1} GB/s  (min {:.3} ms) cpu median {:.3} ms min {:.3} ms check {check:.6e}",
        packed.is_some(),
        med * 1e3,
        gb / med,
        times[0] * 1e3,
        cpu[reps / 2] * 1e3,
        cpu[0] * 1e3,
    );
    Ok(())
}
