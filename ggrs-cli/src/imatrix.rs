//! `ggrs imatrix`: collect an importance matrix over a text (llama-imatrix), or show one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ggrs_llama::imatrix::{collect, CollectOptions, Imatrix};

use crate::common::{ModelArgs, PromptArgs};
use crate::CliResult;

const HELP: &str = "\
Runs the model over the text in chunks of -c tokens as llama-imatrix does (each chunk from an
empty cache, its first token BOS where the model adds one) and sums, for every matrix product
with a layer's weight (blk.*; output.weight with --process-output; MoE experts one by one),
the squares of the input activations per column and the number of tokens. The result is
llama.cpp's imatrix GGUF (or its legacy .dat), for `ggrs quantize --imatrix` or
llama-quantize --imatrix. The perplexity of the second half of each chunk is printed as it
goes.

Examples:
  ggrs imatrix -m model-f16.gguf -f calibration.txt -o model.imatrix.gguf
  ggrs imatrix -m model-f16.gguf -f calibration.txt -c 128 --chunks 4 -o small.imatrix.gguf
  ggrs imatrix --show model.imatrix.gguf";

/// Arguments of `ggrs imatrix`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = HELP)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    text: PromptArgs,
    /// Output file.
    #[arg(short = 'o', long = "output", default_value = "imatrix.gguf")]
    output: PathBuf,
    /// Output format: gguf (llama-imatrix's default) or dat (the legacy format).
    #[arg(long = "output-format", value_parser = ["gguf", "dat"], default_value = "gguf")]
    output_format: String,
    /// Process at most N chunks.
    #[arg(long = "chunks", value_name = "N")]
    chunks: Option<usize>,
    /// Also write the file every N chunks (it is always written at the end).
    #[arg(long = "output-frequency", value_name = "N", default_value_t = 10)]
    output_frequency: usize,
    /// Also keep a copy every N chunks, as OUTPUT.at_<chunks> (llama-imatrix's snapshots;
    /// 0: none).
    #[arg(long = "save-frequency", value_name = "N", default_value_t = 0)]
    save_frequency: usize,
    /// Also collect output.weight.
    #[arg(long = "process-output")]
    process_output: bool,
    /// Print the statistics of an imatrix file (GGUF or .dat) instead of collecting.
    #[arg(long = "show", value_name = "FILE", conflicts_with_all = ["model", "prompt", "file"])]
    show: Option<PathBuf>,
}

/// Runs `ggrs imatrix`.
pub fn run(mut a: Args) -> CliResult {
    if let Some(path) = &a.show {
        return show(path);
    }
    if a.model.ctx_size == 0 {
        a.model.ctx_size = 512;
    }
    let n_ctx = a.model.ctx_size;
    if n_ctx < 4 {
        return Err(format!("-c must be at least 4 tokens, not {n_ctx}").into());
    }
    let text = a.text.text()?;
    let dataset = a
        .text
        .file
        .as_ref()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    a.model.batch_size = a.model.batch_size.max(n_ctx);
    let model = a.model.load(true)?;
    let tokens = model.tokenizer().encode(&text, true, false)?;
    let mut session = a.model.session_for(model, true, "-c")?;
    let n_chunks = (tokens.len() / n_ctx).min(a.chunks.unwrap_or(usize::MAX));
    eprintln!(
        "{} tokens; computing over {n_chunks} chunks of {n_ctx}",
        tokens.len()
    );
    let opts = CollectOptions {
        n_ctx,
        n_chunks: a.chunks,
        process_output: a.process_output,
        dataset,
    };
    let t0 = Instant::now();
    let mut out = std::io::stdout().lock();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let save_to = |m: &Imatrix, path: &Path| -> Result<(), ggrs_llama::imatrix::ImatrixError> {
        if a.output_format == "dat" {
            m.save_dat(path)
        } else {
            m.save_gguf(path)
        }
    };
    let save = |m: &Imatrix| save_to(m, &a.output);
    // llama-imatrix's snapshot name: the output's name plus `.at_<chunks>`.
    let snapshot = |chunks: usize| {
        let mut name = a.output.clone().into_os_string();
        name.push(format!(".at_{chunks}"));
        PathBuf::from(name)
    };
    let mut save_error = None;
    let (m, ppl) = collect(&mut session, &tokens, &opts, |p, so_far| {
        let _ = write!(out, "[{}]{:.4},", p.chunks, p.ppl);
        let _ = out.flush();
        if a.output_frequency > 0 && p.chunks % a.output_frequency == 0 && p.chunks < n_chunks {
            if let Err(e) = save(&so_far()) {
                save_error.get_or_insert(e);
            }
        }
        if a.save_frequency > 0 && p.chunks % a.save_frequency == 0 {
            if let Err(e) = save_to(&so_far(), &snapshot(p.chunks)) {
                save_error.get_or_insert(e);
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let eta = secs / p.chunks as f64 * (n_chunks - p.chunks) as f64;
        if tty {
            eprint!(
                "\r\x1b[Kchunk {}/{n_chunks}, {secs:.0} s, ETA {eta:.0} s",
                p.chunks
            );
        }
    })?;
    if tty {
        eprintln!();
    }
    writeln!(out)?;
    writeln!(
        out,
        "Final estimate: PPL = {:.4} +/- {:.5}",
        ppl.ppl, ppl.ppl_err
    )?;
    if let Some(e) = save_error {
        return Err(e.into());
    }
    save(&m)?;
    eprintln!(
        "{} entries over {} chunks written to {} in {:.1} s",
        m.entries.len(),
        m.chunk_count,
        a.output.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `--show`: one line per entry: its matrices, columns, tokens, and the mean, minimum and
/// maximum of `in_sum2 / count` over its columns.
fn show(path: &PathBuf) -> CliResult {
    let m = Imatrix::load(path)?;
    let w = m.quant_weights();
    let mut out = std::io::stdout().lock();
    let chunks = if m.chunk_size > 0 {
        format!("{} chunks of {} tokens", m.chunk_count, m.chunk_size)
    } else {
        format!("{} chunks", m.chunk_count)
    };
    writeln!(
        out,
        "{}: {} format, {} entries, {chunks}, datasets {:?}",
        path.display(),
        if m.is_legacy { "legacy .dat" } else { "GGUF" },
        m.entries.len(),
        m.datasets
    )?;
    // A legacy file stores calls (chunks) per entry, a GGUF file tokens.
    let count = if m.is_legacy { "ncall" } else { "tokens" };
    writeln!(
        out,
        "{:<40} {:>4} {:>6} {:>9} {:>12} {:>12} {:>12}",
        "weight", "mats", "cols", count, "mean", "min", "max"
    )?;
    for (name, e) in &m.entries {
        let v = &w[name];
        let n = v.len().max(1) as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let min = v.iter().copied().fold(f32::INFINITY, f32::min);
        let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let nmat = e.counts.len().max(1);
        writeln!(
            out,
            "{:<40} {:>4} {:>6} {:>9} {:>12.4e} {:>12.4e} {:>12.4e}",
            name,
            nmat,
            e.sums.len() / nmat,
            e.counts.iter().max().copied().unwrap_or(0),
            mean,
            min,
            max
        )?;
    }
    Ok(())
}
