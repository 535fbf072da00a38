//! Embeddings and rerank scores for `NativeModel.embed` / `NativeModel.rerank`: one
//! [`Embedder`] per model, made at the first call (or at load for an embedding-only model)
//! and made again when another pooling is asked for.

use std::sync::{Arc, Mutex, MutexGuard};

use ggrs_llama::embed::{normalize, EmbedParams, Embedder, Pooling};
use ggrs_llama::{LlamaError, Model};

/// What an embedder is made with, besides the pooling.
#[derive(Debug, Clone, Copy)]
pub struct EmbedSettings {
    /// Most tokens in one input (0: the model's training context).
    pub n_ctx: usize,
    /// Most tokens evaluated in one step.
    pub n_batch: usize,
    /// Compute threads (0: one per physical core).
    pub n_threads: usize,
}

/// The model's embedder, if made, with the pooling it was asked for (`None`: the file's).
pub type EmbedSlot = Arc<Mutex<Option<(Option<Pooling>, Embedder)>>>;

/// One input as the caller gave it.
pub enum Input {
    /// A text, tokenized with the model's special tokens.
    Text(String),
    /// Token ids, as they are.
    Ids(Vec<u32>),
}

/// Locks the slot (an embedder left by a panicking worker holds no state between calls).
fn lock(
    slot: &Mutex<Option<(Option<Pooling>, Embedder)>>,
) -> MutexGuard<'_, Option<(Option<Pooling>, Embedder)>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// The slot's embedder for `pooling`, made (again) if it holds none or one for another
/// pooling. Results are not normalised here (see [`embed`]).
pub fn embedder<'a>(
    slot: &'a mut Option<(Option<Pooling>, Embedder)>,
    model: &Arc<Model>,
    settings: EmbedSettings,
    pooling: Option<Pooling>,
) -> Result<&'a mut Embedder, LlamaError> {
    if !matches!(slot, Some((p, _)) if *p == pooling) {
        *slot = None;
        let params = EmbedParams {
            pooling,
            normalize: -1,
            n_ctx: settings.n_ctx,
            n_batch: settings.n_batch,
            n_threads: settings.n_threads,
        };
        *slot = Some((pooling, Embedder::new(model.clone(), params)?));
    }
    match slot {
        Some((_, e)) => Ok(e),
        // Set just above.
        None => unreachable!("the embedder was just made"),
    }
}

/// The embeddings of `inputs` (normalised by llama.cpp's `kind`, each token's vector on its
/// own with pooling `none`), the pooling used, and the number of tokens evaluated.
pub fn embed(
    slot: &EmbedSlot,
    model: &Arc<Model>,
    settings: EmbedSettings,
    pooling: Option<Pooling>,
    inputs: Vec<Input>,
    kind: i32,
) -> Result<(Vec<Vec<f32>>, Pooling, usize), LlamaError> {
    let mut g = lock(slot);
    let e = embedder(&mut g, model, settings, pooling)?;
    let ids = inputs
        .into_iter()
        .map(|i| match i {
            Input::Text(t) => e.tokenize(&t),
            Input::Ids(ids) => Ok(ids),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let n_tokens = ids.iter().map(Vec::len).sum();
    let mut out = e.embed_tokens(&ids)?;
    let used = e.pooling();
    let width = match used {
        Pooling::None => e.n_embd(),
        _ => usize::MAX,
    };
    if used != Pooling::Rank {
        for v in &mut out {
            for row in v.chunks_mut(width) {
                normalize(row, kind);
            }
        }
    }
    Ok((out, used, n_tokens))
}

/// Relevance scores of `docs` for `query`, in the order of `docs` (a reranker model: `rank`
/// pooling from its file).
pub fn rerank(
    slot: &EmbedSlot,
    model: &Arc<Model>,
    settings: EmbedSettings,
    query: &str,
    docs: &[String],
) -> Result<Vec<f32>, LlamaError> {
    let mut g = lock(slot);
    embedder(&mut g, model, settings, None)?.rerank(query, docs)
}
