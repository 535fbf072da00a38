//! `ggrs bench`: prompt-processing (pp) and text-generation (tg) speed, like llama-bench.
//!
//! pp N: N tokens evaluated as one batch from an empty cache (or after `--depth` tokens).
//! tg N: N tokens evaluated one at a time (each step a graph of one token), after the same
//! depth. Token ids are drawn at random from the vocabulary, as llama-bench does. Each test
//! runs once to warm up, then `--reps` times; the table gives mean ± standard deviation
//! and the median.
//!
//! `-d 0,1024` runs every test at each depth. A single depth's context is evaluated once
//! (random tokens) and kept for every repetition, as llama-bench keeps it; with several
//! depths each repetition evaluates its depth again. The repetitions of a test at its depths are
//! interleaved (rep 1 at every depth, then rep 2, …), so that a drift of the machine's speed
//! during the run (memory bandwidth on shared hosts) hits every depth alike; each depth after
//! the first also gets its speed relative to the first depth, as the median of the per-rep
//! ratios.
//!
//! On a terminal, standard error shows which test and repetition is running.
//!
//! `--profile` also times every node of every measured step and prints, after the table,
//! the time per op type and the most expensive nodes of each test.

use std::io::IsTerminal;
use std::time::Instant;

use ggrs_llama::sampling::Rng;
use serde_json::json;

use crate::common::ModelArgs;
use crate::profile::Profile;
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
    /// Thread counts to test (comma-separated) [default: `-t` when given, else 2].
    #[arg(long = "threads-list", value_delimiter = ',')]
    threads_list: Option<Vec<usize>>,
    /// Context already filled before each test (comma-separated: every test runs at each
    /// depth, repetitions interleaved across depths).
    #[arg(short = 'd', long, value_delimiter = ',', default_value = "0")]
    depth: Vec<usize>,
    /// Repetitions of each test (after one warm-up run).
    #[arg(short = 'r', long, default_value_t = 5)]
    reps: usize,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    json: bool,
    /// Also measure how fast the threads read plain memory (a 256 MiB buffer, read before
    /// and after every generation rep) and report, per generation test, the weight bytes streamed per
    /// second against it: how close decoding runs to the memory-bandwidth bound.
    #[arg(long)]
    mem_bw: bool,
    /// Print a per-op profile of each test (time per op type and per node). Profiling
    /// runs each node on its own (no two nodes at once) so that every time is that node's
    /// own: the speeds measured with it are a little lower.
    #[arg(long)]
    profile: bool,
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

/// Bytes of the plain-read probe (`--mem-bw`): far more than any cache.
const PROBE_BYTES: usize = 256 << 20;

/// Reads `buf` once on `threads` threads (contiguous halves, thirds, …), as a generation
/// step streams its weights, and returns the rate in GB/s (decimal).
fn read_rate(buf: &[u64], threads: usize) -> f64 {
    let part = buf.len().div_ceil(threads.max(1));
    let t0 = Instant::now();
    let total = std::thread::scope(|sc| {
        let handles: Vec<_> = buf
            .chunks(part)
            .map(|c| {
                sc.spawn(move || {
                    // Eight independent sums so that the loop is bound by loads, not adds.
                    let mut acc = [0u64; 8];
                    for w in c.chunks_exact(8) {
                        for (a, &x) in acc.iter_mut().zip(w) {
                            *a = a.wrapping_add(x);
                        }
                    }
                    acc.iter().fold(0u64, |s, &a| s.wrapping_add(a))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(0))
            .fold(0u64, u64::wrapping_add)
    });
    let secs = t0.elapsed().as_secs_f64();
    std::hint::black_box(total);
    (buf.len() * 8) as f64 / secs / 1e9
}

/// Weight bytes one generation step reads: every tensor but the token embedding, of which
/// a step reads one row (unless the output projection is tied to it, when it is read whole).
fn weight_bytes_per_token(model: &ggrs_llama::Model) -> usize {
    let t = model.gguf().tensors();
    let all: usize = t.iter().map(|t| t.size).sum();
    let tied = !t.iter().any(|t| t.name == "output.weight");
    let embd = t
        .iter()
        .find(|t| t.name == "token_embd.weight")
        .map_or(0, |t| t.size);
    if tied {
        all
    } else {
        all - embd
    }
}

/// Seconds one run of a test takes: `toks` as one batch (pp) or one token per step (tg),
/// on a session already filled to the test's depth. With `prof`, every step's node times
/// are added to it.
fn time_test(
    s: &mut ggrs_llama::Session,
    toks: &[u32],
    is_pp: bool,
    mut prof: Option<&mut Profile>,
) -> Result<f64, ggrs_llama::LlamaError> {
    let mut secs = 0.0;
    if is_pp {
        let t0 = Instant::now();
        s.eval(toks, false)?;
        secs = t0.elapsed().as_secs_f64();
        if let Some(p) = prof.as_deref_mut() {
            p.add(s.profile());
        }
    } else {
        for &tok in toks {
            let t0 = Instant::now();
            s.eval(&[tok], false)?;
            secs += t0.elapsed().as_secs_f64();
            if let Some(p) = prof.as_deref_mut() {
                p.add(s.profile());
            }
        }
    }
    Ok(secs)
}

/// The file's type as llama-quantize names it (`Q4_K_M`), from `general.file_type`; for a
/// file without it (or with a number we do not know), the type of its first FFN down
/// projection, else `?`.
fn file_type_name(gguf: &ggrs_core::gguf::GgufFile) -> String {
    let named = gguf
        .get("general.file_type")
        .and_then(|v| v.as_u32())
        .and_then(|id| ggrs_llama::quantize::FileType::from_name(&id.to_string()))
        .map(|t| t.name().to_string());
    named.unwrap_or_else(|| {
        gguf.tensor("blk.0.ffn_down.weight")
            .map_or("?".into(), |t| t.dtype.name().to_string())
    })
}

/// Runs `ggrs bench`.
pub fn run(a: Args) -> CliResult {
    if a.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    if a.depth.is_empty() {
        return Err("--depth needs at least one value (0: an empty context)".into());
    }
    let model = a.model.load(true)?;
    let path = a.model.path()?;
    let hp = model.hparams.clone();
    let size: usize = model.gguf().tensors().iter().map(|t| t.size).sum();
    let params: usize = model.gguf().tensors().iter().map(|t| t.nelements()).sum();
    let ftype = file_type_name(model.gguf());
    let name = format!("{} {:.1}B {}", hp.arch, params as f64 / 1e9, ftype);
    let max_p = a.n_prompt.iter().copied().max().unwrap_or(0);
    let max_n = a.n_gen.iter().copied().max().unwrap_or(0);
    let mut rng = Rng::new(1234);
    let mut random_tokens = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|_| (rng.next_u64() % hp.n_vocab as u64) as u32)
            .collect()
    };
    let mut profiles: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let kv = a.model.kv_types()?;
    let kv_per_token = kv.bytes_per_token(&hp);
    // As llama-bench: the cache types get columns when they are not the default f16.
    let kv_cols = kv != ggrs_llama::kv_types::KvTypes::default();
    let kv_cells = if kv_cols {
        format!(" {} | {} |", kv.k, kv.v)
    } else {
        String::new()
    };
    if !a.json {
        let (head, rule) = if kv_cols {
            (" type_k | type_v |", " --- | --- |")
        } else {
            ("", "")
        };
        println!("| model | size | params | threads |{head} test | t/s (mean ± sd) | median t/s |");
        println!("| --- | ---: | ---: | ---: |{rule} ---: | ---: | ---: |");
    }
    if !a.json {
        notes.push(format!(
            "KV cache: {kv_per_token} bytes per token (K {}, V {}; {:.1} MiB per 1024 tokens)",
            kv.k,
            kv.v,
            kv_per_token as f64 / 1024.0
        ));
    }
    let max_d = a.depth.iter().copied().max().unwrap_or(0);
    // Filled (not zero pages) so that reading it reads memory.
    let probe: Vec<u64> = if a.mem_bw {
        (0..PROBE_BYTES / 8).map(|i| i as u64 | 1).collect()
    } else {
        Vec::new()
    };
    let wbytes = weight_bytes_per_token(&model);
    // Which test and rep is running, on a terminal only (erased before each row).
    let progress = std::io::stderr().is_terminal();
    // `-t N` alone tests N threads (as llama-bench's `-t`); `--threads-list` takes precedence.
    let threads_list = a.threads_list.clone().unwrap_or_else(|| {
        vec![if a.model.threads > 0 {
            a.model.threads
        } else {
            2
        }]
    });
    for &t in &threads_list {
        let mut margs = a.model.clone();
        margs.threads = t;
        margs.ctx_size = max_d + max_p.max(max_n) + 1;
        margs.batch_size = max_p.max(max_d).max(1);
        let mut s = margs.session_for(
            model.clone(),
            false,
            "-p (--n-prompt), -n (--n-gen) or -d (--depth)",
        )?;
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
        for (test, n, is_pp) in tests {
            let nd = a.depth.len();
            let mut speeds = vec![Vec::with_capacity(a.reps); nd];
            let mut profs: Vec<Profile> = (0..nd).map(|_| Profile::default()).collect();
            let mut read = Vec::new();
            // (depth index, recurrent state) of the context the session holds.
            let mut held = None;
            for rep in 0..=a.reps {
                if progress {
                    // Rep 0 is the warm-up.
                    let what = if rep == 0 {
                        "warm-up".to_string()
                    } else {
                        format!("rep {rep}/{}", a.reps)
                    };
                    eprint!("\r\x1b[K{test}, {t} threads: {what}");
                }
                if a.mem_bw && !is_pp && rep > 0 {
                    read.push(read_rate(&probe, t));
                }
                for (di, &depth) in a.depth.iter().enumerate() {
                    // The depth's context is evaluated once and kept for the next reps at
                    // that depth (as llama-bench keeps it): only the test's tokens go.
                    let reuse = depth > 0
                        && held.as_ref().is_some_and(|(d, _)| *d == di)
                        && s.reusable_prefix(0, depth) == depth;
                    if reuse {
                        s.remove(0, depth as i32);
                        if let Some((_, Some(state))) = &held {
                            s.restore_state(0, state)?;
                        }
                    } else {
                        s.clear();
                        held = None;
                        if depth > 0 {
                            s.eval(&random_tokens(depth), false)?;
                            held = Some((di, s.save_state(0)?));
                        }
                    }
                    let toks = random_tokens(n);
                    let prof = (a.profile && rep > 0).then_some(&mut profs[di]);
                    let secs = time_test(&mut s, &toks, is_pp, prof)?;
                    if rep > 0 {
                        speeds[di].push(n as f64 / secs);
                    }
                }
                // A second read after the rep: on a shared host the memory's rate moves within
                // seconds, and one short read per rep was the noisier half of the ratio.
                if a.mem_bw && !is_pp && rep > 0 {
                    read.push(read_rate(&probe, t));
                }
            }
            if progress {
                eprint!("\r\x1b[K");
            }
            for (di, &depth) in a.depth.iter().enumerate() {
                let label = if depth > 0 {
                    format!("{test} @ d{depth}")
                } else {
                    test.clone()
                };
                let st = stats(&speeds[di]);
                // Against the first depth: the median of the per-rep ratios (each pair
                // measured back to back).
                let vs_first = (di > 0).then(|| {
                    let r: Vec<f64> = speeds[di]
                        .iter()
                        .zip(&speeds[0])
                        .map(|(x, y)| x / y)
                        .collect();
                    stats(&r).median
                });
                if a.profile {
                    profiles.push(profs[di].table(&format!("{label}, {t} threads"), 25));
                }
                // Weight bytes per second, and against the plain read of the same reps.
                let bw = (!read.is_empty()).then(|| {
                    let gbps = wbytes as f64 * st.median / 1e9;
                    (gbps, stats(&read).median)
                });
                if a.json {
                    println!(
                        "{}",
                        json!({"model": path.display().to_string(), "name": name, "size": size, "params": params,
                               "threads": t, "test": label, "n": n, "depth": depth,
                               "type_k": kv.k.name(), "type_v": kv.v.name(), "kv_bytes_per_token": kv_per_token,
                               "tps_mean": st.mean, "tps_sd": st.sd, "tps_median": st.median, "samples": speeds[di],
                               "vs_first_depth": vs_first,
                               "weight_gbps": bw.map(|b| b.0), "read_gbps": bw.map(|b| b.1), "read_samples": read})
                    );
                } else {
                    if let Some((gbps, rd)) = bw {
                        notes.push(format!(
                            "{label}, {t} threads: {:.0} MB of weights per token → {gbps:.1} GB/s, {:.0}% of a plain {t}-thread read of memory in the same reps ({rd:.1} GB/s, median of {})",
                            wbytes as f64 / 1e6,
                            100.0 * gbps / rd,
                            read.len()
                        ));
                    }
                    let rel = vs_first.map_or(String::new(), |r| {
                        format!(" ({:+.1}% vs d{})", 100.0 * (r - 1.0), a.depth[0])
                    });
                    println!(
                        "| {name} | {:.2} MiB | {:.2} M | {t} |{kv_cells} {label} | {:.2} ± {:.2} | {:.2}{rel} |",
                        size as f64 / (1024.0 * 1024.0),
                        params as f64 / 1e6,
                        st.mean,
                        st.sd,
                        st.median
                    );
                }
            }
        }
    }
    for n in &notes {
        println!("\n{n}");
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
