//! `ggrs perplexity`: perplexity of a text with llama.cpp's protocol.

use std::io::Write;
use std::time::Instant;

use ggrs_llama::perplexity::perplexity;

use crate::common::{ModelArgs, PromptArgs};
use crate::CliResult;

/// Arguments of `ggrs perplexity`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    text: PromptArgs,
    /// Chunk size in tokens (the context of each evaluation).
    #[arg(long = "chunk", default_value_t = 512)]
    chunk: usize,
}

/// Runs `ggrs perplexity`.
pub fn run(mut a: Args) -> CliResult {
    if a.model.ctx_size != 0 {
        a.chunk = a.model.ctx_size;
    }
    if a.chunk < 4 {
        return Err(format!("--chunk (or -c) must be at least 4 tokens, not {}", a.chunk).into());
    }
    let text = a.text.text()?;
    a.model.ctx_size = a.chunk;
    a.model.batch_size = a.model.batch_size.max(a.chunk);
    let model = a.model.load(true)?;
    let tokens = model.tokenizer().encode(&text, true, false)?;
    let mut session = a.model.session_for(model, true, "--chunk (or -c)")?;
    let n_chunks = tokens.len() / a.chunk;
    eprintln!(
        "{} tokens, {} chunks of {}; scoring the second half of each chunk",
        tokens.len(),
        n_chunks,
        a.chunk
    );
    let t0 = Instant::now();
    let mut out = std::io::stdout().lock();
    let r = perplexity(&mut session, &tokens, a.chunk, |p| {
        let _ = write!(out, "[{}]{:.4},", p.chunks, p.ppl);
        let _ = out.flush();
    })?;
    writeln!(out)?;
    writeln!(
        out,
        "Final estimate: PPL = {:.4} +/- {:.5}",
        r.ppl, r.ppl_err
    )?;
    eprintln!(
        "{} tokens scored in {:.1} s ({:.1} tokens/s evaluated)",
        r.count,
        t0.elapsed().as_secs_f64(),
        (r.chunks * a.chunk) as f64 / t0.elapsed().as_secs_f64()
    );
    Ok(())
}
