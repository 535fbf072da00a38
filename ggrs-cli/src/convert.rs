//! `ggrs convert HF_DIR OUT.gguf [--outtype TYPE]`: a Hugging Face checkpoint to GGUF.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use ggrs_convert::{convert_hf_dir_with, ConvertEvent, ConvertOptions, OutType};

use crate::CliResult;

/// Arguments of `ggrs convert`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Hugging Face checkpoint directory (config.json, model.safetensors or
    /// model.safetensors.index.json with its shards, optional tokenizer files).
    input: PathBuf,
    /// Output GGUF file: written to a temporary file beside it and renamed over it when
    /// complete (never a file of the input directory).
    output: PathBuf,
    /// Type of the matrices: f32, f16, bf16, q8_0 or q4_0 (norms and biases stay f32).
    #[arg(long, default_value = "f16")]
    outtype: String,
    /// `general.name` (default: from config.json's `_name_or_path`, else the directory).
    #[arg(long)]
    name: Option<String>,
    /// Threads converting rows (0: all available).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
}

/// Runs `ggrs convert`.
pub fn run(a: Args) -> CliResult {
    let outtype: OutType = a.outtype.parse()?;
    let opts = ConvertOptions {
        outtype,
        n_threads: crate::common::checked_threads(a.threads),
        name: a.name,
    };
    let t0 = Instant::now();
    let mut err = std::io::stderr();
    let tty = std::io::IsTerminal::is_terminal(&err);
    let mut next_tenth = 1;
    let report = convert_hf_dir_with(&a.input, &a.output, &opts, |ev| match ev {
        ConvertEvent::Note(s) => {
            let _ = writeln!(err, "note: {s}");
        }
        ConvertEvent::Tensor(p) => {
            let pct = if p.bytes_total > 0 {
                100.0 * p.bytes_done as f64 / p.bytes_total as f64
            } else {
                100.0
            };
            let line = format!(
                "[{:>4}/{:<4}] {:>5.1}% {:>9.1}/{:.1} MiB  {:<28} -> {:<28} {}",
                p.index + 1,
                p.total,
                pct,
                p.bytes_done as f64 / 1048576.0,
                p.bytes_total as f64 / 1048576.0,
                p.hf_name,
                p.gguf_name,
                p.dtype.name()
            );
            if tty {
                let _ = write!(err, "\r{line}\x1b[K");
                let _ = err.flush();
                if p.index + 1 == p.total {
                    let _ = writeln!(err);
                }
            } else if pct >= next_tenth as f64 * 10.0 || p.index + 1 == p.total {
                let _ = writeln!(err, "{line}");
                next_tenth = (pct / 10.0) as usize + 1;
            }
        }
    })?;
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "wrote {} ({}, {} tensors, {:.1} MiB of tensor data, matrices {}, tokenizer: {}) in {:.2} s",
        a.output.display(),
        report.arch.gguf_name(),
        report.n_tensors,
        report.bytes_written as f64 / 1048576.0,
        outtype.name(),
        report.tokenizer.as_deref().unwrap_or("none"),
        secs
    );
    Ok(())
}
