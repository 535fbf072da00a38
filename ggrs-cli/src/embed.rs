//! `ggrs embed`: embeddings of texts (`-p TEXT`, or `-f FILE` with one input per line), as
//! llama.cpp's `llama-embedding`: pooled as the model says (or `--pooling`), normalised as
//! `--embd-normalize` says, printed as plain rows or JSON.

use std::io::Write;

use ggrs_llama::embed::{EmbedParams, Embedder, Pooling};

use crate::common::{checked_threads, ModelArgs};
use crate::profile::Profile;
use crate::CliResult;

/// How `ggrs embed` prints.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One line per input: its values separated by spaces.
    Plain,
    /// OpenAI's list object: `{"object": "list", "data": [{"embedding": [...]}, ...]}`.
    Json,
    /// A JSON array of arrays.
    Array,
}

/// Arguments of `ggrs embed`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Text to embed.
    #[arg(short = 'p', long, conflicts_with = "file")]
    prompt: Option<String>,
    /// Embed every non-empty line of FILE (one input per line).
    #[arg(short = 'f', long)]
    file: Option<std::path::PathBuf>,
    /// Pooling: none, mean, cls, last, rank [default: the model file's `pooling_type`].
    #[arg(long)]
    pooling: Option<String>,
    /// Normalisation (llama.cpp's): -1 none, 0 max absolute (int16), 1 taxicab,
    /// 2 Euclidean, p > 2 p-norm.
    #[arg(
        long = "embd-normalize",
        default_value_t = 2,
        allow_negative_numbers = true
    )]
    embd_normalize: i32,
    /// Output format.
    #[arg(long = "format", value_enum, default_value_t = Format::Plain)]
    format: Format,
    /// Time every node of every step and print a per-op profile to stderr at the end (as
    /// `ggrs bench --profile`).
    #[arg(long)]
    profile: bool,
}

/// Runs `ggrs embed`.
pub fn run(a: Args) -> CliResult {
    let inputs: Vec<String> = match (&a.prompt, &a.file) {
        (Some(p), _) => vec![p.clone()],
        (None, Some(f)) => std::fs::read_to_string(f)
            .map_err(|e| format!("{}: {e}", f.display()))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect(),
        (None, None) => return Err("give a text with -p TEXT or a file with -f FILE".into()),
    };
    if inputs.is_empty() {
        return Err("the file has no non-empty line to embed".into());
    }
    let pooling = a
        .pooling
        .as_deref()
        .map(str::parse::<Pooling>)
        .transpose()?;
    let model = a.model.load(inputs.len() > 64)?;
    let params = EmbedParams {
        pooling,
        normalize: a.embd_normalize,
        n_ctx: a.model.ctx_size,
        n_batch: a.model.batch_size.max(1),
        n_threads: checked_threads(a.model.threads),
    };
    let mut emb = Embedder::new(model, params)?;
    emb.set_profiling(a.profile);
    let t0 = std::time::Instant::now();
    let out = emb.embed(&inputs)?;
    let secs = t0.elapsed().as_secs_f64();
    let mut stdout = std::io::stdout().lock();
    match a.format {
        Format::Plain => {
            for v in &out {
                let line: Vec<String> = v.iter().map(|x| format!("{x:.6}")).collect();
                writeln!(stdout, "{}", line.join(" "))?;
            }
        }
        Format::Array => writeln!(stdout, "{}", serde_json::to_string(&out)?)?,
        Format::Json => {
            let data: Vec<serde_json::Value> = out
                .iter()
                .enumerate()
                .map(
                    |(i, v)| serde_json::json!({"object": "embedding", "index": i, "embedding": v}),
                )
                .collect();
            let doc = serde_json::json!({"object": "list", "data": data});
            writeln!(stdout, "{}", serde_json::to_string_pretty(&doc)?)?;
        }
    }
    eprintln!(
        "{} inputs, pooling {}, {:.1} ms ({:.1} inputs/s)",
        out.len(),
        emb.pooling().name(),
        secs * 1e3,
        out.len() as f64 / secs.max(1e-9)
    );
    if a.profile {
        let mut p = Profile::default();
        for step in emb.take_profile() {
            p.add(&step);
        }
        eprint!("{}", p.table(&format!("{} inputs", out.len()), 25));
    }
    Ok(())
}
