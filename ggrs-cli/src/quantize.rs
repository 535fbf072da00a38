//! `ggrs quantize IN OUT TYPE`: convert a model's weights to another type.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use ggrs_core::gguf::GgufFile;
use ggrs_core::quantize::{quantize_file, QuantizeOptions};
use ggrs_core::DType;

use crate::CliResult;

/// Arguments of `ggrs quantize`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input GGUF file.
    input: PathBuf,
    /// Output GGUF file: written to a temporary file beside it and renamed over it when
    /// complete (never the input, under any name).
    output: PathBuf,
    /// Target type of the weights: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, …
    #[arg(value_name = "TYPE")]
    target: String,
    /// Convert every 2-D weight (token embeddings and output included) to TYPE and keep
    /// 1-D tensors as they are. Without it, the output projection gets Q6_K (Q8_0 when its
    /// rows are not a multiple of 256) as in llama.cpp's default recipe; llama.cpp's per-layer
    /// k-quant mixtures (Q4_K_M, …) are not implemented.
    #[arg(long)]
    pure: bool,
    /// Allow converting tensors that are block-quantized already.
    #[arg(long)]
    allow_requantize: bool,
    /// Threads (0: one per physical core).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
}

/// Runs `ggrs quantize`.
pub fn run(a: Args) -> CliResult {
    let target = DType::from_name(&a.target).ok_or_else(|| {
        format!(
            "unknown type `{}` (try f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1)",
            a.target
        )
    })?;
    let input = GgufFile::open(&a.input)?;
    let opts = QuantizeOptions {
        target,
        allow_requantize: a.allow_requantize,
        n_threads: crate::common::checked_threads(a.threads),
        pure: a.pure,
    };
    let t0 = Instant::now();
    let mut err = std::io::stderr();
    // On a terminal one line is redrawn; in a log, a line per tenth of the work.
    let tty = std::io::IsTerminal::is_terminal(&err);
    let mut next_tenth = 1;
    let report = quantize_file(&input, &a.output, &opts, |p| {
        let pct = if p.bytes_total > 0 {
            100.0 * p.bytes_done as f64 / p.bytes_total as f64
        } else {
            100.0
        };
        let line = format!(
            "[{:>4}/{:<4}] {:>5.1}%  {:<32} {:>5} -> {:<5}",
            p.index + 1,
            p.total,
            pct,
            p.name,
            p.from.name(),
            p.to.name()
        );
        if tty {
            let _ = write!(err, "\r{line}");
            let _ = err.flush();
        } else if pct >= next_tenth as f64 * 10.0 || p.index + 1 == p.total {
            let _ = writeln!(err, "{line}");
            next_tenth = (pct / 10.0) as usize + 1;
        }
    })?;
    if tty {
        eprintln!();
    }
    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    eprintln!(
        "{} tensors ({} converted to {}), {:.1} MiB -> {:.1} MiB in {:.1} s",
        report.n_tensors,
        report.n_converted,
        target,
        mb(report.bytes_in),
        mb(report.bytes_out),
        t0.elapsed().as_secs_f64()
    );
    println!("{}", a.output.display());
    Ok(())
}
