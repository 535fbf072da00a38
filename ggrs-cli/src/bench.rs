//! `ggrs bench`: prompt-processing (pp) and text-generation (tg) speed, like llama-bench.
//!
//! pp N: N tokens evaluated as one batch from an empty cache (or after `--depth` tokens).
//! tg N: N tokens evaluated one at a time (each step a graph of one token), after the same
//! depth. Token ids are drawn at random from the vocabulary, as llama-bench does. Each test
//! runs once to warm up, then `--reps` times; the table gives mean ± standard deviation
//! and the median.
//!
//! `--profile` also times every node of every measured step and prints, after the table,
//! the time per op type and the most expensive nodes of each test.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

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
    /// Print a per-op profile of each test (time per op type and per node). Profiling
    /// runs each node on its own (no two nodes at once) so that every time is that node's
    /// own: the speeds measured with it are a little lower.
    #[arg(long)]
    profile: bool,
}

/// Node times summed over the measured steps of one test.
#[derive(Default)]
struct Profile {
    steps: usize,
    /// Per op name: nodes run and total time.
    ops: BTreeMap<&'static str, (usize, Duration)>,
    /// Per graph node (index, op, shape): times run and total time.
    nodes: BTreeMap<(usize, &'static str, [usize; 4]), (usize, Duration)>,
}

impl Profile {
    /// Adds the per-node times of the step the session just computed.
    fn add(&mut self, s: &ggrs_llama::Session) {
        self.steps += 1;
        for t in s.profile() {
            let o = self.ops.entry(t.op).or_default();
            o.0 += 1;
            o.1 += t.time;
            let n = self.nodes.entry((t.node, t.op, t.ne)).or_default();
            n.0 += 1;
            n.1 += t.time;
        }
    }

    /// Per-op table, then the `top` most expensive nodes.
    fn table(&self, title: &str, top: usize) -> String {
        let total: Duration = self.ops.values().map(|v| v.1).sum();
        let share = |t: Duration| 100.0 * t.as_secs_f64() / total.as_secs_f64().max(1e-12);
        let mut out = format!(
            "\nprofile of {title}: {} steps, {:.2} ms in nodes\n\n| op | nodes | ms | share |\n| --- | ---: | ---: | ---: |\n",
            self.steps,
            total.as_secs_f64() * 1e3
        );
        let mut ops: Vec<_> = self.ops.iter().collect();
        ops.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        for (op, (n, t)) in ops {
            out += &format!(
                "| {op} | {n} | {:.2} | {:.1}% |\n",
                t.as_secs_f64() * 1e3,
                share(*t)
            );
        }
        out += "\n| node | op | shape | runs | µs per run | share |\n";
        out += "| ---: | --- | --- | ---: | ---: | ---: |\n";
        let mut nodes: Vec<_> = self.nodes.iter().collect();
        nodes.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        for ((i, op, ne), (n, t)) in nodes.into_iter().take(top) {
            out += &format!(
                "| {i} | {op} | {ne:?} | {n} | {:.1} | {:.1}% |\n",
                t.as_secs_f64() * 1e6 / *n as f64,
                share(*t)
            );
        }
        out
    }
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
    let mut profiles: Vec<String> = Vec::new();
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
        if a.profile {
            s.set_profiling(true);
        }
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
            let mut prof = Profile::default();
            for rep in 0..=a.reps {
                s.clear();
                if a.depth > 0 {
                    s.eval(&random_tokens(a.depth), false)?;
                }
                let toks = random_tokens(n);
                let t0 = Instant::now();
                let mut secs = 0.0;
                if is_pp {
                    s.eval(&toks, false)?;
                    secs = t0.elapsed().as_secs_f64();
                    if a.profile && rep > 0 {
                        prof.add(&s);
                    }
                } else {
                    for &tok in &toks {
                        let t = Instant::now();
                        s.eval(&[tok], false)?;
                        secs += t.elapsed().as_secs_f64();
                        if a.profile && rep > 0 {
                            prof.add(&s);
                        }
                    }
                }
                if rep > 0 {
                    speeds.push(n as f64 / secs);
                }
            }
            let st = stats(&speeds);
            if a.profile {
                profiles.push(prof.table(&format!("{label}, {t} threads"), 25));
            }
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
    for p in &profiles {
        if a.json {
            eprint!("{p}");
        } else {
            print!("{p}");
        }
    }
    Ok(())
}
