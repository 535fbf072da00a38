//! What a verification step of speculative decoding costs next to a one-token step: exact
//! steps ([`Session::decode_exact`]) of `k` columns at a given depth, each followed by the
//! KV rollback of its cells, against a one-token step at the same depth.
//!
//! ```text
//! cargo run --release -p ggrs-llama --example spec_step_cost -- MODEL.gguf [DEPTH=300] [THREADS=1] [REPS=20] [K,K,...]
//! ```
//!
//! Prints per column count the mean step time (wall clock, and with one thread the
//! thread's CPU time from `/proc/thread-self/schedstat`, which a busy machine inflates
//! much less), its ratio to the one-token step and the cost of each extra column in
//! one-token steps (what [`DraftControl`] estimates while generating). `PROFILE=1` also
//! prints the time per op and weight shape of each column count (the fastest repetition).
//!
//! [`DraftControl`]: ggrs_llama::speculative::DraftControl

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use ggrs_llama::{Batch, Model, Session, SessionParams};

/// This thread's CPU seconds so far (scheduler statistics: updated at scheduler ticks, so
/// only totals over many steps are meaningful); 0 where the file does not exist.
fn cpu_secs() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns * 1e-9)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .ok_or("usage: spec_step_cost MODEL [DEPTH] [THREADS] [REPS] [K,K,...]")?;
    let arg = |i: usize, d: usize| -> Result<usize, Box<dyn std::error::Error>> {
        Ok(args.get(i).map(|s| s.parse()).transpose()?.unwrap_or(d))
    };
    let (depth, threads, reps) = (arg(1, 300)?, arg(2, 1)?, arg(3, 20)?.max(1));
    let ks: Vec<usize> = match args.get(4) {
        Some(list) => list
            .split(',')
            .map(|k| k.parse::<usize>())
            .collect::<Result<_, _>>()?,
        None => vec![1, 2, 3, 4, 5, 6, 8, 9, 12, 16, 17],
    };
    let model = Arc::new(Model::load(path)?);
    let mut s = Session::new(
        model.clone(),
        SessionParams {
            n_ctx: depth + 128,
            n_threads: threads,
            n_draft: 63,
            ..SessionParams::default()
        },
    )?;
    let nv = model.hparams.n_vocab as u32;
    let prompt: Vec<u32> = (0..depth as u32).map(|i| (i * 7919 + 13) % nv).collect();
    s.eval(&prompt, false)?;
    let profile = std::env::var_os("PROFILE").is_some();
    s.set_profiling(profile);
    println!("depth {depth}, {threads} thread(s), {reps} steps per column count (means)");
    let mut one = None;
    for &k in &ks {
        let toks: Vec<u32> = (0..k as u32).map(|i| (i * 31 + 5) % nv).collect();
        let step = |s: &mut Session| -> Result<(), Box<dyn std::error::Error>> {
            let base = s.n_past() as i32;
            s.decode_exact(&Batch::from_tokens(&toks, base, 0, true))?;
            s.remove(0, base);
            Ok(())
        };
        // One warm-up step (builds the step's graph), then the timed ones.
        step(&mut s)?;
        let mut by: BTreeMap<String, f64> = BTreeMap::new();
        let (wall, cpu) = (Instant::now(), cpu_secs());
        for _ in 0..reps {
            step(&mut s)?;
            if profile {
                let mut mine: BTreeMap<String, f64> = BTreeMap::new();
                for t in s.profile() {
                    let key = match t.weight {
                        Some(w) => format!("{} {w:?} rows {}", t.op, t.ne[0]),
                        None => t.op.to_string(),
                    };
                    *mine.entry(key).or_default() += t.time.as_secs_f64();
                }
                for (key, v) in mine {
                    let e = by.entry(key).or_insert(f64::INFINITY);
                    *e = e.min(v);
                }
            }
        }
        let wall = wall.elapsed().as_secs_f64() / reps as f64;
        let cpu = (cpu_secs() - cpu) / reps as f64;
        // With one thread the CPU time is the step's; with more, the wall clock.
        let t = if threads == 1 && cpu > 0.0 { cpu } else { wall };
        let base = *one.get_or_insert(t);
        let per_col = match k {
            1 => String::new(),
            _ => format!(
                "  {:.3} step per extra column",
                (t / base - 1.0) / (k - 1) as f64
            ),
        };
        println!(
            "  {k:2} columns: {:7.2} ms wall, {:7.2} ms CPU  {:5.2}x a one-token step{per_col}",
            wall * 1e3,
            cpu * 1e3,
            t / base
        );
        let mut v: Vec<_> = by.into_iter().collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (name, t) in v.iter().take(12) {
            println!("      {:8.3} ms  {name}", t * 1e3);
        }
    }
    Ok(())
}
