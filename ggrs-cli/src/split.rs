//! `ggrs split`: cut a GGUF model into the parts llama-gguf-split writes, or merge such parts
//! back into one file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ggrs_core::gguf::{
    plan_split, split_path, split_writers, write_merged, write_split, GgufFile, SplitLimit,
    WriteProgress,
};

use crate::CliResult;

const SPLIT_HELP: &str = "\
Splitting writes OUTPUT-00001-of-0000N.gguf, OUTPUT-00002-of-0000N.gguf, …: OUTPUT is a
prefix, as for llama-gguf-split (the parts of `ggrs split in.gguf out` are out-00001-of-….gguf).
The first part holds all the metadata, every part the keys split.no, split.count and
split.tensors.count and its own tensors; the bytes are those llama-gguf-split writes for the
same limit. Every ggrs command that takes a model (run, chat, bench, perplexity, embed, serve,
inspect, quantize) reads the parts when given the first, as llama.cpp does.

Merging (--merge FIRST_PART OUT) writes one file with the first part's metadata, minus the
split keys, and every part's tensors in order: the file split comes back byte for byte.
(llama-gguf-split --merge keeps the split keys, with split.count 0.)

Outputs that exist already are refused unless --force; an input is never overwritten.

Examples:
  ggrs split --split-max-size 2G model-q4_k_m.gguf model-q4_k_m
  ggrs split --split-max-tensors 128 model.gguf parts/model
  ggrs split --merge model-q4_k_m-00001-of-00003.gguf model-q4_k_m.gguf";

/// Arguments of `ggrs split`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = SPLIT_HELP)]
pub struct Args {
    /// Input: the GGUF model to split (a split model's first part works too), or with
    /// --merge the first part of the split model.
    input: PathBuf,
    /// Output: the parts' prefix (OUTPUT-00001-of-0000N.gguf, …), or with --merge the file
    /// to write.
    output: PathBuf,
    /// Split INPUT into parts (the default).
    #[arg(long, conflicts_with = "merge")]
    split: bool,
    /// Merge the parts of the split model whose first part is INPUT into the file OUTPUT.
    #[arg(long)]
    merge: bool,
    /// At most N tensors per part (default 128, as llama-gguf-split).
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = ["split_max_size", "merge"]
    )]
    split_max_tensors: Option<usize>,
    /// At most this much tensor data per part: a number with M (10^6 bytes) or G (10^9
    /// bytes), e.g. 500M, 2G (as llama-gguf-split; the metadata is not counted).
    #[arg(long, value_name = "N(M|G)", conflicts_with = "merge")]
    split_max_size: Option<String>,
    /// Print the parts that would be written, and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Replace output files that exist already.
    #[arg(long)]
    force: bool,
}

/// A bad argument or an output in the way.
#[derive(Debug, thiserror::Error)]
pub enum SplitArgError {
    /// `--split-max-size` is not a positive number with M or G.
    #[error(
        "--split-max-size {given}: give a positive whole number followed by M (megabytes, \
         10^6 bytes) or G (gigabytes, 10^9 bytes), e.g. 500M or 2G"
    )]
    BadSize {
        /// The value given.
        given: String,
    },
    /// An output exists and `--force` was not given.
    #[error(
        "{}: the file exists already; remove it, choose another output, or pass --force to \
         replace it",
        path.display()
    )]
    Exists {
        /// The output in the way.
        path: PathBuf,
    },
}

/// Reads a `--split-max-size` value: `N` followed by `M` (10^6) or `G` (10^9), as
/// llama-gguf-split (lower case accepted too).
fn parse_size(s: &str) -> Result<u64, SplitArgError> {
    let bad = || SplitArgError::BadSize {
        given: s.to_owned(),
    };
    let (num, unit) = s.split_at(s.len().saturating_sub(1));
    let scale: u64 = match unit {
        "M" | "m" => 1_000_000,
        "G" | "g" => 1_000_000_000,
        _ => return Err(bad()),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    n.checked_mul(scale).ok_or_else(bad)
}

/// Refuses `path` if it exists and `force` is off.
fn check_free(path: &Path, force: bool) -> Result<(), SplitArgError> {
    if !force && std::fs::symlink_metadata(path).is_ok() {
        return Err(SplitArgError::Exists {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Progress on stderr, as `ggrs quantize` shows it: one line redrawn on a terminal, a line
/// per tenth of the work in a log.
struct Progress {
    err: std::io::Stderr,
    tty: bool,
    next_tenth: usize,
}

impl Progress {
    fn new() -> Progress {
        let err = std::io::stderr();
        let tty = std::io::IsTerminal::is_terminal(&err);
        Progress {
            err,
            tty,
            next_tenth: 1,
        }
    }

    fn report(&mut self, p: &WriteProgress<'_>) {
        let pct = if p.bytes_total > 0 {
            100.0 * p.bytes_done as f64 / p.bytes_total as f64
        } else {
            100.0
        };
        let name = p.path.file_name().map_or_else(
            || p.path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let line = format!(
            "[{:>4}/{:<4}] {:>5.1}%  {} ({}/{})  {:<32}",
            p.tensors_done,
            p.tensors_total,
            pct,
            name,
            p.file + 1,
            p.files,
            p.name
        );
        if self.tty {
            let _ = write!(self.err, "\r{line}");
            let _ = self.err.flush();
        } else if pct >= self.next_tenth as f64 * 10.0 || p.tensors_done == p.tensors_total {
            let _ = writeln!(self.err, "{line}");
            self.next_tenth = (pct / 10.0) as usize + 1;
        }
    }

    fn finish(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

/// Runs `ggrs split`.
pub fn run(a: Args) -> CliResult {
    if a.merge {
        return merge(&a);
    }
    let limit = match (&a.split_max_size, a.split_max_tensors) {
        (Some(s), _) => SplitLimit::Bytes(parse_size(s)?),
        (None, Some(n)) => SplitLimit::Tensors(n),
        (None, None) => SplitLimit::Tensors(128),
    };
    let input = GgufFile::open(&a.input)?;
    let plan = plan_split(&input, limit)?;
    let writers = split_writers(&input, &plan)?;
    let n = plan.len() as u32;
    let paths: Vec<PathBuf> = (0..n).map(|i| split_path(&a.output, i, n)).collect();
    eprintln!(
        "{}: {} tensors -> {} parts",
        a.input.display(),
        input.tensors().len(),
        n
    );
    for (i, (w, p)) in writers.iter().zip(&paths).enumerate() {
        eprintln!(
            "  part {:>5}: {:>5} tensors, {:>10.1} MB of tensor data  {}",
            i + 1,
            w.tensors().len(),
            mb(w.data_size()),
            p.display()
        );
    }
    if a.dry_run {
        return Ok(());
    }
    for p in &paths {
        check_free(p, a.force)?;
    }
    let t0 = Instant::now();
    let mut progress = Progress::new();
    let written = write_split(&input, &plan, &a.output, |p| progress.report(p))?;
    progress.finish();
    let bytes: u64 = written
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    eprintln!(
        "{} parts, {:.1} MB, in {:.1} s",
        written.len(),
        mb(bytes),
        t0.elapsed().as_secs_f64()
    );
    for p in &written {
        println!("{}", p.display());
    }
    Ok(())
}

/// `ggrs split --merge FIRST OUT`.
fn merge(a: &Args) -> CliResult {
    let input = GgufFile::open(&a.input)?;
    if !a.dry_run {
        check_free(&a.output, a.force)?;
    }
    eprintln!(
        "{}: {} tensors in {} parts -> {}",
        a.input.display(),
        input.tensors().len(),
        input.parts().len().max(1),
        a.output.display()
    );
    if a.dry_run {
        return Ok(());
    }
    let t0 = Instant::now();
    let mut progress = Progress::new();
    write_merged(&input, &a.output, |p| progress.report(p))?;
    progress.finish();
    eprintln!("merged in {:.1} s", t0.elapsed().as_secs_f64());
    println!("{}", a.output.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_llama_gguf_split_reads_them() {
        assert_eq!(parse_size("500M").unwrap(), 500_000_000);
        assert_eq!(parse_size("2G").unwrap(), 2_000_000_000);
        assert_eq!(parse_size("2g").unwrap(), 2_000_000_000);
        for bad in ["", "M", "0M", "-1G", "1.5G", "10", "10K", "G2"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
