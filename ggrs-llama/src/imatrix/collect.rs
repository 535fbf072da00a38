//! Collecting an importance matrix (`ggrs imatrix`, llama.cpp's `llama-imatrix`): the model
//! runs over a text in chunks as `llama-perplexity` does (each chunk from an empty cache, its
//! first token replaced by BOS where the model adds one, every position an output), and for
//! every matrix product with a weight of a layer (`blk.*`; `output.weight` on request) the
//! squares of its input activations are summed per column, with the number of tokens
//! summed. MoE experts (`mul_mat_id`) are summed per expert, with a count per expert.
//!
//! As llama-imatrix: a dense product with fewer than 16 input columns is ignored, sums are
//! f32 added in token order, a non-finite sum stops the run, and the perplexity of the second
//! half of each chunk is reported as it goes.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

use ggrs_core::MatMulView;

use super::{Imatrix, ImatrixEntry};
use crate::error::{LlamaError, Result};
use crate::perplexity::{run_chunks, Perplexity};
use crate::session::Session;

/// What to collect.
#[derive(Debug, Clone)]
pub struct CollectOptions {
    /// Tokens per chunk (`-c`).
    pub n_ctx: usize,
    /// Chunks to process at most (`--chunks`; `None`: all of the text).
    pub n_chunks: Option<usize>,
    /// Also collect `output.weight` (llama-imatrix's `--process-output`).
    pub process_output: bool,
    /// The text file's name, recorded as the dataset.
    pub dataset: String,
}

#[derive(Default)]
struct Stat {
    values: Vec<f32>,
    counts: Vec<i64>,
}

#[derive(Default)]
struct Stats {
    entries: BTreeMap<String, Stat>,
    /// The first weight whose sums went infinite or NaN.
    non_finite: Option<String>,
}

impl Stats {
    /// Adds the squared inputs of one product (llama.cpp's `collect_imatrix`).
    fn add(&mut self, v: &MatMulView<'_>, process_output: bool) {
        let name = v.weight;
        let ne0 = v.input_ne[0];
        if v.indirect {
            let n_as = v.weight_ne[2];
            let e = self.entries.entry(name.to_string()).or_default();
            if e.values.is_empty() {
                e.values = vec![0.0; ne0 * n_as];
                e.counts = vec![0; n_as];
            } else if e.values.len() != ne0 * n_as || e.counts.len() != n_as {
                self.non_finite.get_or_insert_with(|| name.to_string());
                return;
            }
            let n_tokens = v.input_ne[2];
            for slot in 0..v.id_slots() {
                for row in 0..n_tokens {
                    let Some(ex) = v.id(slot, row).filter(|&x| (x as usize) < n_as) else {
                        continue;
                    };
                    let ex = ex as usize;
                    let x = v.input_row(slot % v.input_ne[1], row, 0);
                    e.counts[ex] += 1;
                    let acc = &mut e.values[ex * ne0..(ex + 1) * ne0];
                    for (a, &xi) in acc.iter_mut().zip(x) {
                        *a += xi * xi;
                    }
                }
            }
            if e.values.iter().any(|x| !x.is_finite()) {
                self.non_finite.get_or_insert_with(|| name.to_string());
            }
            return;
        }
        let wanted = name.starts_with("blk.") || (process_output && name == "output.weight");
        if v.input_ne[1] < 16 || !wanted {
            return;
        }
        let (w2, w3) = (v.weight_ne[2].max(1), v.weight_ne[3].max(1));
        let n_mat = w2 * w3;
        let e = self.entries.entry(name.to_string()).or_default();
        if e.values.is_empty() {
            e.values = vec![0.0; ne0 * n_mat];
            e.counts = vec![0];
        } else if e.values.len() != ne0 * n_mat {
            self.non_finite.get_or_insert_with(|| name.to_string());
            return;
        }
        for i3 in 0..v.input_ne[3] {
            for i2 in 0..v.input_ne[2] {
                let mat = (i3 % w3) * w2 + (i2 % w2);
                let acc = &mut e.values[mat * ne0..(mat + 1) * ne0];
                for i1 in 0..v.input_ne[1] {
                    for (a, &xi) in acc.iter_mut().zip(v.input_row(i1, i2, i3)) {
                        *a += xi * xi;
                    }
                }
            }
        }
        if e.values.iter().any(|x| !x.is_finite()) {
            self.non_finite.get_or_insert_with(|| name.to_string());
        }
        let rows = v.input_ne[1] * v.input_ne[2] * v.input_ne[3];
        for c in &mut e.counts {
            *c += (rows / n_mat) as i64;
        }
    }
}

/// Runs `session` over `tokens` as [`CollectOptions`] say and returns the importance matrix
/// and the perplexity; `on_chunk` sees the running perplexity after each chunk, and a
/// function that returns the matrix so far (to save it now and then). The session must allow
/// `n_ctx` tokens and all logits.
pub fn collect(
    session: &mut Session,
    tokens: &[u32],
    opts: &CollectOptions,
    mut on_chunk: impl FnMut(&Perplexity, &dyn Fn() -> Imatrix),
) -> Result<(Imatrix, Perplexity)> {
    let n_ctx = opts.n_ctx;
    if tokens.len() < 2 * n_ctx {
        return Err(LlamaError::InvalidArgument(format!(
            "the text has {} tokens; an importance matrix with chunks of {n_ctx} needs at \
             least {} (two chunks)",
            tokens.len(),
            2 * n_ctx
        )));
    }
    let n_chunks = (tokens.len() / n_ctx).min(opts.n_chunks.unwrap_or(usize::MAX));
    let stats = Arc::new(Mutex::new(Stats::default()));
    let sink = Arc::clone(&stats);
    let process_output = opts.process_output;
    session.set_matmul_observer(Some(Box::new(move |v: &MatMulView<'_>| {
        sink.lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(v, process_output);
    })));
    let mut failed = None;
    let r = run_chunks(session, &tokens[..n_chunks * n_ctx], n_ctx, true, |p| {
        let s = stats.lock().unwrap_or_else(|e| e.into_inner());
        if s.non_finite.is_none() {
            on_chunk(p, &|| snapshot(&s, opts, p.chunks));
        }
        match &s.non_finite {
            Some(name) => {
                failed = Some(name.clone());
                ControlFlow::Break(())
            }
            None => ControlFlow::Continue(()),
        }
    });
    session.set_matmul_observer(None);
    let ppl = r?;
    if let Some(name) = failed {
        return Err(LlamaError::InvalidArgument(format!(
            "non-finite (or inconsistent) activations in the input of `{name}`"
        )));
    }
    let s = stats.lock().unwrap_or_else(|e| e.into_inner());
    Ok((snapshot(&s, opts, ppl.chunks), ppl))
}

/// The importance matrix of `stats` after `chunks` chunks.
fn snapshot(stats: &Stats, opts: &CollectOptions, chunks: usize) -> Imatrix {
    let entries = stats
        .entries
        .iter()
        .map(|(name, s)| {
            let e = ImatrixEntry {
                sums: s.values.clone(),
                counts: s.counts.clone(),
            };
            (name.clone(), e)
        })
        .collect();
    Imatrix {
        entries,
        datasets: vec![opts.dataset.clone()],
        chunk_count: chunks as u32,
        chunk_size: opts.n_ctx as u32,
        is_legacy: false,
        has_metadata: true,
    }
}
