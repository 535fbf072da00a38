//! `ggrs quantize IN OUT TYPE`: convert a model's weights with one of llama.cpp's recipes.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use ggrs_core::gguf::GgufFile;
use ggrs_core::quantize::QuantizeOptions;
use ggrs_llama::imatrix::QuantWeights;
use ggrs_llama::quantize::{quantize, FileType, QuantType, RecipeOptions, TensorTypeOverride};

use crate::CliResult;

const TYPES_HELP: &str = "\
TYPE is one of llama-quantize's file types (case does not matter):
  Q4_K_M (alias Q4_K), Q4_K_S, Q5_K_M (alias Q5_K), Q5_K_S, Q3_K_M (alias Q3_K), Q3_K_S,
  Q3_K_L, Q2_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, F16, BF16, F32
  (or the number llama.cpp writes as general.file_type). Q2_K_S needs an importance matrix.

Each tensor's type is chosen as llama.cpp's quantize tool chooses it: 1-D tensors and norms
keep theirs; the k-quant mixtures give attn_v and ffn_down more bits in some layers (by the
same layer counters), the output projection gets Q6_K (Q8_0 when its rows are not a multiple
of 256), and a type whose blocks do not divide a tensor's rows falls back (Q4_K -> Q5_0,
Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0, IQ4_XS -> IQ4_NL, else F16). The bytes are
those llama-quantize writes, with or without an importance matrix.

With --imatrix FILE (llama.cpp's imatrix GGUF or legacy .dat, e.g. from `ggrs imatrix`), each
converted tensor's rounding errors are weighted by the mean squared input activation of its
columns, as llama-quantize --imatrix does (Q4_0/Q4_1/Q5_0/Q5_1, the k-quants and IQ4_NL/IQ4_XS
use it; Q8_0 and the ternary/FP4 types ignore it). It also changes a few type choices: with
it, IQ4_NL/IQ4_XS keep ffn_down in the first layers, Q4_0/Q5_0 give them Q4_1/Q5_1.

Examples:
  ggrs quantize model-f16.gguf model-q4_k_m.gguf q4_k_m
  ggrs quantize --imatrix model.imatrix.gguf model-f16.gguf model-iq4_xs.gguf iq4_xs
  ggrs quantize model-f16.gguf mix.gguf q5_0 --pure --tensor-type attn_v=q8_0
  ggrs quantize model-f16.gguf out.gguf q4_k_m --tensor-type 'blk\\.[0-3]\\.ffn_down=q8_0' \\
      --output-tensor-type q8_0 --token-embedding-type q4_0";

/// Arguments of `ggrs quantize`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = TYPES_HELP)]
pub struct Args {
    /// Input GGUF file.
    input: PathBuf,
    /// Output GGUF file: written to a temporary file beside it and renamed over it when
    /// complete (never the input, under any name).
    output: PathBuf,
    /// File type (recipe): q4_k_m, q5_k_m, q6_k, q8_0, q4_0, iq4_xs, f16, … (see `ggrs help quantize`).
    #[arg(value_name = "TYPE")]
    target: String,
    /// Give every 2-D weight the file type's own type (llama-quantize's --pure): no per-layer
    /// mixture and no special output projection; overrides and shape fallbacks still apply.
    #[arg(long)]
    pure: bool,
    /// NAME=TYPE: tensors whose name contains a match of the regular expression NAME get the
    /// tensor type TYPE (e.g. attn_v=q8_0, 'blk\.1[0-9]\.ffn_up=q6_k'); the first matching
    /// option wins. Repeatable. Like llama-quantize, only for quantized file types.
    #[arg(long = "tensor-type", value_name = "NAME=TYPE")]
    tensor_type: Vec<String>,
    /// Tensor type of output.weight (e.g. q8_0, f16).
    #[arg(long, value_name = "TYPE")]
    output_tensor_type: Option<String>,
    /// Tensor type of token_embd.weight (e.g. q8_0, f16).
    #[arg(long, value_name = "TYPE")]
    token_embedding_type: Option<String>,
    /// Keep output.weight as it is in the input.
    #[arg(long)]
    leave_output_tensor: bool,
    /// Importance matrix (llama.cpp's imatrix GGUF or legacy .dat) to weigh the rounding
    /// errors with, as llama-quantize --imatrix.
    #[arg(long, value_name = "FILE")]
    imatrix: Option<PathBuf>,
    /// Use the importance matrix only for tensors whose name contains NAME (repeatable).
    #[arg(long = "include-weights", value_name = "NAME", requires = "imatrix")]
    include_weights: Vec<String>,
    /// Do not use the importance matrix for tensors whose name contains NAME (repeatable).
    #[arg(
        long = "exclude-weights",
        value_name = "NAME",
        requires = "imatrix",
        conflicts_with = "include_weights"
    )]
    exclude_weights: Vec<String>,
    /// Allow converting tensors that are block-quantized already.
    #[arg(long)]
    allow_requantize: bool,
    /// Threads (0: one per physical core).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
}

fn tensor_type(s: &str, what: &str) -> Result<QuantType, String> {
    QuantType::from_name(s).ok_or_else(|| {
        format!(
            "{what}: unknown tensor type `{s}` (one of {})",
            QuantType::ALL.map(|t| t.name()).join(", ")
        )
    })
}

/// Runs `ggrs quantize`.
pub fn run(a: Args) -> CliResult {
    let file_type = FileType::from_name(&a.target).ok_or_else(|| {
        format!(
            "unknown type `{}`: not a file type (one of {}; see `ggrs help quantize`)",
            a.target,
            FileType::ALL.map(|(_, n)| n).join(", ")
        )
    })?;
    let mut recipe = RecipeOptions::new(file_type);
    recipe.pure = a.pure;
    recipe.leave_output = a.leave_output_tensor;
    for spec in &a.tensor_type {
        recipe.overrides.push(TensorTypeOverride::parse(spec)?);
    }
    if let Some(t) = &a.output_tensor_type {
        recipe.output_type = Some(tensor_type(t, "--output-tensor-type")?);
    }
    if let Some(t) = &a.token_embedding_type {
        recipe.token_embedding_type = Some(tensor_type(t, "--token-embedding-type")?);
    }
    if let Some(path) = &a.imatrix {
        let w = QuantWeights::load(path, &a.include_weights, &a.exclude_weights)?;
        eprintln!(
            "importance matrix {}: {} entries{}{}",
            path.display(),
            w.weights.len(),
            w.dataset
                .as_ref()
                .map(|d| format!(", dataset {d}"))
                .unwrap_or_default(),
            if w.chunk_count > 0 {
                format!(", {} chunks", w.chunk_count)
            } else {
                String::new()
            }
        );
        recipe.imatrix = Some(std::sync::Arc::new(w));
    }
    let input = GgufFile::open(&a.input)?;
    let opts = QuantizeOptions {
        allow_requantize: a.allow_requantize,
        n_threads: crate::common::checked_threads(a.threads),
    };
    let t0 = Instant::now();
    let mut err = std::io::stderr();
    // On a terminal one line is redrawn; in a log, a line per tenth of the work.
    let tty = std::io::IsTerminal::is_terminal(&err);
    let mut next_tenth = 1;
    let report = quantize(&input, &a.output, &recipe, &opts, |p| {
        let pct = if p.bytes_total > 0 {
            100.0 * p.bytes_done as f64 / p.bytes_total as f64
        } else {
            100.0
        };
        let line = format!(
            "[{:>4}/{:<4}] {:>5.1}%  {:<32} {:>6} -> {:<6}",
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
        "{} tensors ({} converted, file type {}), {:.1} MiB -> {:.1} MiB in {:.1} s",
        report.n_tensors,
        report.n_converted,
        file_type,
        mb(report.bytes_in),
        mb(report.bytes_out),
        t0.elapsed().as_secs_f64()
    );
    println!("{}", a.output.display());
    Ok(())
}
