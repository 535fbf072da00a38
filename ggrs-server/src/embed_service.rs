//! The embedding worker: one thread that owns an [`Embedder`] and evaluates every waiting
//! request together, so concurrent embedding requests share steps.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use ggrs_llama::embed::{EmbedParams, Embedder, Pooling};
use ggrs_llama::Model;

use crate::error::ApiError;

/// A batch of inputs and where its results go.
struct Job {
    inputs: Vec<Vec<u32>>,
    reply: tokio::sync::oneshot::Sender<Result<Vec<Vec<f32>>, String>>,
}

/// The embedding worker of a server: see the [module docs](self).
pub(crate) struct EmbedService {
    /// The model the worker evaluates.
    pub(crate) model: Arc<Model>,
    /// The pooling every request gets.
    pub(crate) pooling: Pooling,
    /// Most tokens one input may have.
    pub(crate) n_ctx: usize,
    /// Whether the server was started with `--reranking`.
    pub(crate) reranking: bool,
    jobs: std::sync::Mutex<mpsc::Sender<Job>>,
    /// Requests queued or being evaluated.
    waiting: AtomicUsize,
    /// Most requests [`waiting`](Self::waiting) at once (the server's `--queue`); more get 503.
    queue: usize,
}

/// Counts one request as waiting while it lives.
struct InQueue<'a>(&'a AtomicUsize);

impl Drop for InQueue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl EmbedService {
    /// Starts the worker for `model` (its embedder checked first: a model without an
    /// embedding graph or pooling is an error), holding at most `queue` requests. The
    /// embedder does not normalise: each request does, as it asks.
    pub fn start(
        model: Arc<Model>,
        pooling: Option<Pooling>,
        reranking: bool,
        [n_batch, n_threads, queue]: [usize; 3],
    ) -> Result<EmbedService, String> {
        if queue == 0 {
            return Err("the embedding queue must hold at least 1 request".into());
        }
        let pooling = if reranking {
            Some(Pooling::Rank)
        } else {
            pooling
        };
        let params = EmbedParams {
            pooling,
            normalize: -1,
            n_batch,
            n_threads,
            ..Default::default()
        };
        let mut emb = Embedder::new(model.clone(), params).map_err(|e| e.to_string())?;
        let (pooling, n_ctx) = (emb.pooling(), emb.params().n_ctx);
        let budget = emb.params().n_batch;
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("ggrs-embed".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    // Every job waiting now, up to about one step's worth of tokens.
                    let mut jobs = vec![first];
                    let mut n: usize = jobs[0].inputs.iter().map(Vec::len).sum();
                    while n < budget {
                        match rx.try_recv() {
                            Ok(j) => {
                                n += j.inputs.iter().map(Vec::len).sum::<usize>();
                                jobs.push(j);
                            }
                            Err(_) => break,
                        }
                    }
                    let all: Vec<Vec<u32>> =
                        jobs.iter().flat_map(|j| j.inputs.iter().cloned()).collect();
                    let res = emb.embed_tokens(&all).map_err(|e| e.to_string());
                    let mut at = 0;
                    for j in jobs {
                        let k = j.inputs.len();
                        let part = match &res {
                            Ok(v) => Ok(v[at..at + k].to_vec()),
                            Err(e) => Err(e.clone()),
                        };
                        at += k;
                        let _ = j.reply.send(part);
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(EmbedService {
            model,
            pooling,
            n_ctx,
            reranking,
            jobs: std::sync::Mutex::new(tx),
            waiting: AtomicUsize::new(0),
            queue,
        })
    }

    /// The results of `inputs` (each already checked), computed by the worker; 503 when
    /// the queue already holds its most requests.
    pub(crate) async fn run(&self, inputs: Vec<Vec<u32>>) -> Result<Vec<Vec<f32>>, ApiError> {
        let before = self.waiting.fetch_add(1, Ordering::Relaxed);
        let _counted = InQueue(&self.waiting);
        if before >= self.queue {
            return Err(ApiError::busy(format!(
                "the embedding queue is full ({} requests waiting, --queue): retry shortly",
                self.queue
            )));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(Job { inputs, reply: tx })
            .map_err(|_| ApiError::server("the embedding worker stopped"))?;
        rx.await
            .map_err(|_| ApiError::server("the embedding worker stopped"))?
            .map_err(ApiError::server)
    }

    /// Checks one input's tokens: not empty, within the context, in the vocabulary.
    pub(crate) fn check(&self, i: usize, t: &[u32]) -> Result<(), ApiError> {
        if t.is_empty() {
            return Err(ApiError::invalid(
                "input",
                format!("input {i} is empty: it has no tokens (give some text or token ids)"),
            ));
        }
        if t.len() > self.n_ctx {
            return Err(ApiError::invalid(
                "input",
                format!(
                    "input {i} is too large: {} tokens, more than the model's context of {} \
                     tokens (split or truncate it)",
                    t.len(),
                    self.n_ctx
                ),
            ));
        }
        let nv = self.model.hparams.n_vocab;
        if let Some(id) = t.iter().find(|&&id| id as usize >= nv) {
            return Err(ApiError::invalid(
                "input",
                format!("token id {id} is out of range (the vocabulary has {nv} tokens)"),
            ));
        }
        Ok(())
    }

    /// Token ids of a text input, with the model's special tokens (BOS/CLS, EOS/SEP) when
    /// `add_special`, as an embedding input.
    pub(crate) fn tokenize(&self, text: &str, add_special: bool) -> Result<Vec<u32>, ApiError> {
        self.model
            .text()
            .encode(self.model.tokenizer(), text, add_special, true)
            .map_err(|e| ApiError::invalid("input", e.to_string()))
    }
}
