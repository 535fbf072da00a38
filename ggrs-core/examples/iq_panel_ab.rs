//! A/B of a prompt-sized `mul_mat` of a grid i-quant weight (IQ1_S … IQ3_S) through the
//! executor: the panel kernels (`kernels::x86::panel::grid_vnni`, AVX-512 VNNI: each panel
//! decoded once per node) against the path they replace (panels switched off:
//! `tiled_avx2`'s panels, which decode each weight block once per sixteen columns),
//! alternating in one process; the fastest and median time of each over `REPS` runs, and
//! whether both gave the same bits (they must).
//!
//! `cargo run --release -p ggrs-core --example iq_panel_ab -- [TYPE] [K] [N] [M] [THREADS] [REPS] [WHICH]`
//! (defaults `iq3_s 4864 896 512 2 10 ab`: Qwen2.5-0.5B's `ffn_down` against a 512-token
//! prompt; TYPE any block type name `DType` parses; WHICH `on` or `off` runs one path only,
//! e.g. under `perf stat -e cycles:u`, whose counts a busy machine's time slicing leaves
//! alone). With one thread it also prints the process's CPU time per run (Linux), which
//! a busy machine's time slicing leaves alone too (its caches and clocks it does not).

use std::sync::Arc;
use std::time::Instant;

use ggrs_core::quants::dispatch::force_no_panels;
use ggrs_core::{Context, DType, Executor, Graph};

/// CPU time of the whole process, in seconds (0 where it cannot be read).
fn cpu_time() -> f64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec for the call to fill.
        if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } == 0 {
            return ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9;
        }
    }
    0.0
}

fn main() -> ggrs_core::Result<()> {
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
    let (k, n, m) = (num(1, "4864"), num(2, "896"), num(3, "512"));
    let (threads, reps) = (num(4, "2"), num(5, "10"));
    let paths: &[bool] = match arg(6, "ab").as_str() {
        "on" => &[false],
        "off" => &[true],
        _ => &[false, true],
    };
    // Any bytes with finite block scales (the speed does not depend on the values).
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let bs = dtype.type_size();
    let mut w: Vec<u8> = (0..dtype.row_size(k) * n).map(|_| next() as u8).collect();
    for blk in w.chunks_exact_mut(bs) {
        let d = half::f16::from_f32((next() % 1000) as f32 / 1e4).to_bits();
        if dtype == DType::IQ1M {
            for j in 0..4 {
                let b = &mut blk[48 + 2 * j + 1];
                *b = (*b & 0x0F) | ((((d >> (4 * j)) & 15) as u8) << 4);
            }
        } else {
            blk[..2].copy_from_slice(&d.to_le_bytes());
        }
    }
    let x: Vec<f32> = (0..k * m)
        .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let w = Arc::new(w);
    let mut ctx = Context::with_mem_size(Context::mem_size_for(3, 4 * k * m + 4 * n * m + 4096));
    let a = ctx.new_tensor_external(dtype, &[k, n], Arc::clone(&w) as _, 0)?;
    let b = ctx.new_tensor_2d(DType::F32, k, m)?;
    ctx.set_f32(b, &x)?;
    let out = ctx.mul_mat(a, b)?;
    let mut times = [Vec::new(), Vec::new()];
    let mut cpu = [Vec::new(), Vec::new()];
    let mut bits: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    for rep in 0..=reps {
        for &off in paths {
            let which = off as usize;
            force_no_panels(off);
            // (A plan is made once per graph and executor: new ones see the switch.)
            let graph = Graph::build(&ctx, out)?;
            let mut exec = Executor::new(threads);
            exec.compute(&mut ctx, &graph)?;
            let (t0, c0) = (Instant::now(), cpu_time());
            exec.compute(&mut ctx, &graph)?;
            let dt = t0.elapsed().as_secs_f64();
            let dc = cpu_time() - c0;
            if rep > 0 {
                times[which].push(dt);
                cpu[which].push(dc);
            } else {
                bits[which] = ctx.to_f32_vec(out)?.iter().map(|v| v.to_bits()).collect();
            }
        }
    }
    force_no_panels(false);
    let same = paths.len() < 2 || bits[0] == bits[1];
    for (which, label) in [
        "panels (decoded once)",
        "panels off (tiled_avx2 / iquants512)",
    ]
    .iter()
    .enumerate()
    {
        let t = &mut times[which];
        if t.is_empty() {
            continue;
        }
        t.sort_by(f64::total_cmp);
        let c = &mut cpu[which];
        c.sort_by(f64::total_cmp);
        println!(
            "{dtype} [{k}, {n}] x {m} columns, {threads} threads, {label}: fastest {:.2} ms, median {:.2} ms, median cpu {:.2} ms",
            t[0] * 1e3,
            t[t.len() / 2] * 1e3,
            c[c.len() / 2] * 1e3
        );
    }
    println!("same bits: {same}");
    if !same {
        std::process::exit(1);
    }
    Ok(())
}
