//! Perplexity over a text, with llama.cpp's protocol (`llama-perplexity`): the tokens are cut
//! into chunks of `n_ctx`; each chunk is evaluated from an empty cache in one pass (its first
//! token replaced by BOS where the model adds one), and only the second half of its
//! positions is scored, each predicting the next token.

use std::ops::ControlFlow;

use crate::batch::Batch;
use crate::error::{LlamaError, Result};
use crate::session::Session;

/// Result after some chunks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Perplexity {
    /// Chunks evaluated.
    pub chunks: usize,
    /// Tokens scored.
    pub count: usize,
    /// `exp(mean negative log-likelihood)`.
    pub ppl: f64,
    /// Its uncertainty, as llama.cpp estimates it (`ppl · stddev(nll) / √(count − 1)`).
    pub ppl_err: f64,
}

fn log_softmax_at(row: &[f32], id: usize) -> f64 {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
    row[id] as f64 - max - sum.ln()
}

/// Computes the perplexity of `tokens` in chunks of `n_ctx` with `session` (which must allow
/// `n_ctx` tokens and all logits). `on_chunk` sees the running result after each chunk.
pub fn perplexity(
    session: &mut Session,
    tokens: &[u32],
    n_ctx: usize,
    mut on_chunk: impl FnMut(&Perplexity),
) -> Result<Perplexity> {
    perplexity_while(session, tokens, n_ctx, |p| {
        on_chunk(p);
        ControlFlow::Continue(())
    })
}

/// As [`perplexity`], stopping after a chunk for which `on_chunk` returns
/// `ControlFlow::Break(())` (the result then covers the chunks evaluated so far).
pub fn perplexity_while(
    session: &mut Session,
    tokens: &[u32],
    n_ctx: usize,
    on_chunk: impl FnMut(&Perplexity) -> ControlFlow<()>,
) -> Result<Perplexity> {
    run_chunks(session, tokens, n_ctx, false, on_chunk)
}

/// [`perplexity_while`]'s body. With `all_outputs` every position of a chunk is an output
/// (so that every layer runs on every token, as llama-imatrix asks), not only the scored
/// ones.
pub(crate) fn run_chunks(
    session: &mut Session,
    tokens: &[u32],
    n_ctx: usize,
    all_outputs: bool,
    mut on_chunk: impl FnMut(&Perplexity) -> ControlFlow<()>,
) -> Result<Perplexity> {
    if n_ctx < 4 {
        return Err(LlamaError::InvalidArgument(format!(
            "context {n_ctx} is too small (at least 4)"
        )));
    }
    if session.params().n_ctx < n_ctx || !session.params().logits_all {
        return Err(LlamaError::InvalidArgument(format!(
            "perplexity needs a session with n_ctx ≥ {n_ctx} and logits_all"
        )));
    }
    let n_chunks = tokens.len() / n_ctx;
    if n_chunks == 0 {
        return Err(LlamaError::InvalidArgument(format!(
            "the text has {} tokens, fewer than one chunk of {n_ctx}",
            tokens.len()
        )));
    }
    let model = session.model().clone();
    let nv = model.hparams.n_vocab;
    let bos = if model.tokenizer().vocab().add_bos() {
        model.tokenizer().bos()
    } else {
        None
    };
    let first = n_ctx / 2;
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    let mut last = Perplexity {
        chunks: 0,
        count: 0,
        ppl: f64::NAN,
        ppl_err: f64::NAN,
    };
    for c in 0..n_chunks {
        let mut chunk = tokens[c * n_ctx..(c + 1) * n_ctx].to_vec();
        if let Some(b) = bos {
            chunk[0] = b;
        }
        session.clear();
        // Logits are needed from position `first` on only.
        let mut batch = Batch::new();
        for (i, &t) in chunk.iter().enumerate() {
            batch.push(t, i as i32, 0, all_outputs || (i >= first && i + 1 < n_ctx));
        }
        session.decode(&batch)?;
        let logits = session.all_logits();
        let skip = if all_outputs { first } else { 0 };
        for (k, j) in (first..n_ctx - 1).enumerate() {
            let k = k + skip;
            let row = &logits[k * nv..(k + 1) * nv];
            let v = -log_softmax_at(row, chunk[j + 1] as usize);
            nll += v;
            nll2 += v * v;
            count += 1;
        }
        let mean = nll / count as f64;
        let var = nll2 / count as f64 - mean * mean;
        let ppl = mean.exp();
        let err = if var > 0.0 && count > 1 {
            (var / (count - 1) as f64).sqrt() * ppl
        } else {
            0.0
        };
        last = Perplexity {
            chunks: c + 1,
            count,
            ppl,
            ppl_err: err,
        };
        if on_chunk(&last).is_break() {
            break;
        }
    }
    session.clear();
    Ok(last)
}
