//! Text generation with ggrs-llama: load a GGUF model, open a session, stream tokens.
//!
//! ```text
//! cargo run --release --example llama -- -p "Write a haiku about Rust" -n 64
//! cargo run --release --example llama -- -m model.gguf -p "..." --temp 0 --seed 1 -t 2
//! ```
//! Without `-m` it uses the default model (Qwen2.5-Coder-0.5B-Instruct, q4_0), fetching and
//! converting it first if missing (`scripts/default-model.sh`). A prompt without special
//! tokens is wrapped in the model's chat format so that an instruct model answers it.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use ggrs::llama::{GenerateParams, Model, SamplingParams, Session, SessionParams};

struct Args {
    model: Option<PathBuf>,
    prompt: String,
    n_predict: usize,
    threads: usize,
    temperature: f32,
    seed: u64,
    raw: bool,
}

const USAGE: &str =
    "usage: llama [-m MODEL] [-p PROMPT] [-n N] [-t THREADS] [--temp T] [--seed S] [--raw]
  --raw   send the prompt as it is (no chat wrapping)";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        model: None,
        prompt: "Write a Rust function that checks whether a number is prime.".into(),
        n_predict: 128,
        threads: 0,
        temperature: 0.0,
        seed: 0,
        raw: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        let num = |v: String| {
            v.parse::<f64>()
                .map_err(|_| format!("{flag}: `{v}` is not a number"))
        };
        match flag.as_str() {
            "-m" | "--model" => a.model = Some(value()?.into()),
            "-p" | "--prompt" => a.prompt = value()?,
            "-n" | "--n-predict" => a.n_predict = num(value()?)? as usize,
            "-t" | "--threads" => a.threads = num(value()?)? as usize,
            "--temp" => a.temperature = num(value()?)? as f32,
            "--seed" => a.seed = num(value()?)? as u64,
            "--raw" => a.raw = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    Ok(a)
}

/// The default model, made by `scripts/default-model.sh` when missing.
fn default_model() -> Result<PathBuf, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/default-model.sh");
    eprintln!("preparing the default model with {} …", script.display());
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed ({})", script.display(), out.status));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    let path = match args.model.clone() {
        Some(p) => p,
        None => default_model()?,
    };

    // 1. The model: hyperparameters, tokenizer, weights mapped from the file (no copy).
    let model = Arc::new(Model::load(&path)?);
    let hp = &model.hparams;
    eprintln!(
        "{}: {} layers, width {}, {} heads ({} KV), vocabulary {}",
        path.display(),
        hp.n_layer,
        hp.n_embd,
        hp.n_head,
        hp.n_head_kv,
        hp.n_vocab
    );

    // 2. A session: KV cache, compute arena (sized by a measuring pass) and worker threads.
    let mut session = Session::new(
        model.clone(),
        SessionParams {
            n_ctx: 2048,
            n_threads: args.threads,
            ..SessionParams::default()
        },
    )?;

    // 3. The prompt: instruct models answer best in their chat format (ChatML for Qwen).
    let chatml = model.tokenizer().vocab().token_id("<|im_start|>").is_some();
    let prompt = if args.raw || !chatml || args.prompt.contains("<|") {
        args.prompt.clone()
    } else {
        format!(
            "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
            args.prompt
        )
    };

    // 4. Generate, printing each piece of text as soon as it is complete.
    let params = GenerateParams {
        max_tokens: args.n_predict,
        sampling: SamplingParams {
            temperature: args.temperature,
            seed: args.seed,
            ..SamplingParams::default()
        },
        ..GenerateParams::default()
    };
    let mut out = std::io::stdout().lock();
    let g = session.generate(&prompt, &params, |ev| {
        let _ = write!(out, "{}", ev.text);
        let _ = out.flush();
        ControlFlow::Continue(())
    })?;
    writeln!(out)?;
    let t = g.timings;
    eprintln!(
        "\nprompt: {} tokens, {:.1} t/s | generated: {} tokens, {:.1} t/s | stop: {:?}",
        t.prompt_tokens,
        t.prompt_tps(),
        t.gen_tokens,
        t.gen_tps(),
        g.stop
    );
    Ok(())
}
