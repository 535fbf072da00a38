//! `ggrs bench`: prompt-processing (pp) and text-generation (tg) speed, like llama-bench.
//!
//! pp N: N tokens evaluated as one batch from an empty cache (or after `--depth` tokens).
//! tg N: N tokens evaluated one at a time (each step a graph of one token), after the same
//! depth. Token ids are drawn at random from the vocabulary, as llama-bench does. Each test
//! runs once to warm up, then `--reps` times; the table gives mean ± standard deviation
//! and the median.

use std::time::Instant;

use ggrs_llama::sampling::Rng;
use serde_json::json;

use crate::common::ModelArgs;
use crate::CliResult;

/// Arguments of `ggrs bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Prompt lengths to test (comma-separated; 0 to skip).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    n_prompt: Vec<usize>,
    /// Generation lengths to test (comma-separated; 0 to skip).
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    n_gen: Vec<usize>,
    /// Thread counts to test (comma-separated).
    #[arg(long = "threads-list", value_delimiter = ',', default_value = "2")]
    threads_list: Vec<usize>,
    /// Context already filled before each test.
    #[arg(short = 'd', long, default_value_t = 0)]
    depth: usize,
    /// Repetitions of each test (after one warm-up run).
    #[arg(short = 'r', long, default_value_t = 5)]
    reps: usize,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    json: bool,
}

struct Stats {
    mean: f64,
    sd: f64,
    median: f64,
}

fn stats(v: &[f64]) -> Stats {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let sd = if v.len() > 1 {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let median = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    Stats { mean, sd, median }
}

/// Runs `ggrs bench`.
pub fn run(a: Args) -> CliResult {
    if a.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    let model = a.model.load()?;
    let path = a.model.path()?;
    let hp = model.hparams.clone();
    let size: usize = model.gguf().tensors().iter().map(|t| t.size).sum();
    let params: usize = model.gguf().tensors().iter().map(|t| t.nelements()).sum();
    let ftype = model
        .gguf()
        .tensor("blk.0.ffn_down.weight")
        .map_or("?".into(), |t| t.dtype.name().to_string());
    let name = format!("{} {:.1}B {}", hp.arch.name(), params as f64 / 1e9, ftype);
    let max_p = a.n_prompt.iter().copied().max().unwrap_or(0);
    let max_n = a.n_gen.iter().copied().max().unwrap_or(0);
    let mut rng = Rng::new(1234);
    let mut random_tokens = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|_| (rng.next_u64() % hp.n_vocab as u64) as u32)
            .collect()
    };
    if !a.json {
        println!("| model | size | params | threads | test | t/s (mean ± sd) | median t/s |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    }
    for &t in &a.threads_list {
        let mut margs = a.model.clone();
        margs.threads = t;
        margs.ctx_size = a.depth + max_p.max(max_n) + 1;
        margs.batch_size = max_p.max(a.depth).max(1);
        let mut s = margs.session(model.clone(), false)?;
        let mut tests: Vec<(String, usize, bool)> = Vec::new();
        tests.extend(
            a.n_prompt
                .iter()
                .filter(|&&n| n > 0)
                .map(|&n| (format!("pp{n}"), n, true)),
        );
        tests.extend(
            a.n_gen
                .iter()
                .filter(|&&n| n > 0)
                .map(|&n| (format!("tg{n}"), n, false)),
        );
        for (label, n, is_pp) in tests {
            let label = if a.depth > 0 {
                format!("{label} @ d{}", a.depth)
            } else {
                label
            };
            let mut speeds = Vec::with_capacity(a.reps);
            for rep in 0..=a.reps {
                s.clear();
                if a.depth > 0 {
                    s.eval(&random_tokens(a.depth), false)?;
                }
                let toks = random_tokens(n);
                let t0 = Instant::now();
                if is_pp {
                    s.eval(&toks, false)?;
                } else {
                    for &tok in &toks {
                        s.eval(&[tok], false)?;
                    }
                }
                let secs = t0.elapsed().as_secs_f64();
                if rep > 0 {
                    speeds.push(n as f64 / secs);
                }
            }
            let st = stats(&speeds);
            if a.json {
                println!(
                    "{}",
                    json!({"model": path.display().to_string(), "name": name, "size": size, "params": params,
                           "threads": t, "test": label, "n": n, "depth": a.depth,
                           "tps_mean": st.mean, "tps_sd": st.sd, "tps_median": st.median, "samples": speeds})
                );
            } else {
                println!(
                    "| {name} | {:.2} MiB | {:.2} M | {t} | {label} | {:.2} ± {:.2} | {:.2} |",
                    size as f64 / (1024.0 * 1024.0),
                    params as f64 / 1e6,
                    st.mean,
                    st.sd,
                    st.median
                );
            }
        }
    }
    Ok(())
}
