//! Embeddings and reranking: many inputs of different lengths evaluated together, pooled
//! and normalised as llama.cpp's `llama-embedding` / `llama-server --embeddings` do.
//!
//! An [`Embedder`] packs its inputs into steps of at most [`EmbedParams::n_batch`] tokens
//! (and [`crate::batch::MAX_SEQ`] inputs): one graph per step, each input in its own span of
//! a scratch KV cache, so that its attention reads its own tokens only (the whole input for an
//! encoder such as BERT, the tokens before it for a decoder). Every other op works column by
//! column, and the pooling runs on the host per input, so an input's embedding has the same
//! bits alone or in any batch (for weight types whose matrix products do not change order with
//! the column count: f16 from two columns on, q8_0, q4_0; a k-quant model's input of fewer
//! than 8 tokens can differ in the last bits).
//!
//! A model with recurrent layers (the hybrids: Qwen3.5, LFM2, Granite 4.0-H) evaluates each
//! input in a step of its own, from a zero recurrent state (as llama.cpp starts each
//! sequence), so its embedding is the same alone or among others.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ggrs_llama::embed::{EmbedParams, Embedder};
//! # fn main() -> ggrs_llama::Result<()> {
//! let model = Arc::new(ggrs_llama::Model::load("all-minilm-l6-v2-f16.gguf")?);
//! let mut emb = Embedder::new(model, EmbedParams::default())?;
//! let v = emb.embed(&["The capital of France is Paris.", "Paris is in France."])?;
//! let cos: f32 = v[0].iter().zip(&v[1]).map(|(a, b)| a * b).sum(); // normalised: a dot product
//! println!("{cos:.4}");
//! # Ok(()) }
//! ```

use std::str::FromStr;
use std::sync::Arc;

use ggrs_core::{Context, DType, Executor, Graph, Tensor};

use crate::architecture::StepTensors;
use crate::batch::MAX_SEQ;
use crate::error::{LlamaError, Result};
use crate::kv_cache::KvCache;
use crate::loader::ImportedWeights;
use crate::model::Model;
use crate::recurrent_cache::SeqRun;
use crate::step::{SeqSpan, SeqSpans, StepInputs, StepShape};

/// How the hidden states of an input's tokens become its embedding (llama.cpp's
/// `--pooling`; the file's `<arch>.pooling_type` when not given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// No pooling: one vector per token.
    None,
    /// The mean over the input's tokens (special tokens included).
    Mean,
    /// The first token's ([CLS]).
    Cls,
    /// The last token's (decoder embedders: Qwen3-Embedding).
    Last,
    /// A reranker's relevance score: the classification head on the first token.
    Rank,
}

impl Pooling {
    /// The pooling of a `pooling_type` value (llama.cpp's numbering: 0 none, 1 mean, 2 cls,
    /// 3 last, 4 rank); `None` for another value (unspecified: −1).
    pub fn from_gguf(v: i64) -> Option<Pooling> {
        Some(match v {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            _ => return None,
        })
    }

    /// The pooling `model`'s file asks for (`<arch>.pooling_type`), if any.
    pub fn of_model(model: &Model) -> Option<Pooling> {
        let key = format!("{}.pooling_type", model.hparams.arch);
        let v = model.gguf().get(&key)?;
        v.as_u64()
            .map(|u| u as i64)
            .or_else(|| v.as_f32().map(|f| f as i64))
            .and_then(Pooling::from_gguf)
    }

    /// Its name, as `--pooling` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }
}

impl FromStr for Pooling {
    type Err = LlamaError;

    fn from_str(s: &str) -> Result<Pooling> {
        Ok(match s {
            "none" => Pooling::None,
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            "last" => Pooling::Last,
            "rank" => Pooling::Rank,
            other => {
                return Err(LlamaError::InvalidArgument(format!(
                    "unknown pooling `{other}` (none, mean, cls, last, rank)"
                )))
            }
        })
    }
}

/// How to set up an [`Embedder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbedParams {
    /// The pooling; `None`: the model file's (`<arch>.pooling_type`). A model whose file
    /// gives none (a decoder) must be given one.
    pub pooling: Option<Pooling>,
    /// llama.cpp's `--embd-normalize`: −1 none, 0 max absolute value (scaled to int16),
    /// 1 taxicab, 2 Euclidean (the default), p > 2 p-norm. Not applied to rank scores.
    pub normalize: i32,
    /// Most tokens in one input; 0: the model's training context.
    pub n_ctx: usize,
    /// Most tokens evaluated in one graph (at least `n_ctx`); inputs are packed whole.
    pub n_batch: usize,
    /// Threads (0: one per physical core).
    pub n_threads: usize,
}

impl Default for EmbedParams {
    fn default() -> Self {
        EmbedParams {
            pooling: None,
            normalize: 2,
            n_ctx: 0,
            n_batch: 2048,
            n_threads: 0,
        }
    }
}

/// llama.cpp's `common_embd_normalize`: `v` scaled by 1/‖v‖ for the norm `kind` (see
/// [`EmbedParams::normalize`]); a zero vector stays zero.
pub fn normalize(v: &mut [f32], kind: i32) {
    let sum: f64 = match kind {
        ..=-1 => 1.0,
        0 => v.iter().fold(0.0f64, |m, &x| m.max(x.abs() as f64)) / 32760.0,
        2 => v.iter().map(|&x| (x * x) as f64).sum::<f64>().sqrt(),
        p => {
            let s: f64 = v.iter().map(|&x| (x.abs() as f64).powi(p)).sum();
            s.powf(1.0 / p as f64)
        }
    };
    let norm = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
    for x in v {
        *x *= norm;
    }
}

/// Cosine similarity of two vectors (0 when either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += x as f64 * x as f64;
        bb += y as f64 * y as f64;
    }
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        (ab / (aa.sqrt() * bb.sqrt())) as f32
    }
}

/// The inputs of a rerank request: for each document, the query and the document as one
/// input, as llama-server's `/rerank` builds it (BOS, query, EOS, SEP, document, EOS, each
/// where the vocabulary adds it; SEP stands for a missing EOS). Error: an empty query or
/// document.
pub fn rerank_inputs<S: AsRef<str>>(
    model: &Model,
    query: &str,
    docs: &[S],
) -> Result<Vec<Vec<u32>>> {
    let tok = model.tokenizer();
    let v = tok.vocab();
    let sp = v.special();
    let eos = sp.eos.or(sp.sep);
    let pieces = |t: &str| -> Result<Vec<u32>> {
        if t.is_empty() {
            return Err(LlamaError::Embedding(
                "the query and every document must be non-empty".into(),
            ));
        }
        Ok(tok.encode(t, false, true)?)
    };
    let q = pieces(query)?;
    let mut inputs = Vec::with_capacity(docs.len());
    for d in docs {
        let mut t = Vec::new();
        if v.add_bos() {
            t.extend(sp.bos);
        }
        t.extend_from_slice(&q);
        if v.add_eos() {
            t.extend(eos);
        }
        if v.add_sep() {
            t.extend(sp.sep);
        }
        t.extend(pieces(d.as_ref())?);
        if v.add_eos() {
            t.extend(eos);
        }
        inputs.push(t);
    }
    Ok(inputs)
}

/// The context of the last step size: its arena, the weights and scratch cache in it.
struct Arena {
    ctx: Context,
    weights: ImportedWeights,
    kv: KvCache,
    base: ggrs_core::Checkpoint,
}

/// Computes embeddings (or rerank scores) of many inputs: see the [module docs](self).
pub struct Embedder {
    model: Arc<Model>,
    params: EmbedParams,
    pooling: Pooling,
    exec: Executor,
    arena: Option<Arena>,
    /// The per-node times of every step since profiling was turned on.
    profile: Option<Vec<Vec<ggrs_core::NodeTiming>>>,
    /// The model has recurrent layers: one input per step, each from a zero state.
    recurrent: bool,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("pooling", &self.pooling)
            .field("params", &self.params)
            .finish()
    }
}

/// The graph of one step: inputs, the cls-token ids of a rank step, the mean weights of a
/// mean-pooling step, whether the output is one pooled column per input, the output.
struct Built {
    inp: StepInputs,
    cls_ids: Option<Tensor>,
    mean_w: Option<Tensor>,
    pooled_in_graph: bool,
    out: Tensor,
    graph: Graph,
}

impl Embedder {
    /// An embedder for `model`. Errors: the architecture has no embedding graph, no pooling
    /// is given or in the file, `rank` pooling for a model without a classification head.
    pub fn new(model: Arc<Model>, params: EmbedParams) -> Result<Embedder> {
        let arch = model.arch_name();
        let pooling = match params.pooling.or_else(|| Pooling::of_model(&model)) {
            Some(p) => p,
            None => {
                return Err(LlamaError::Embedding(format!(
                    "the `{arch}` model's file names no pooling type (`{}.pooling_type`): \
                     choose one (--pooling mean|cls|last|none; decoder embedders such as \
                     Qwen3-Embedding use `last`)",
                    model.hparams.arch
                )))
            }
        };
        let mut params = params;
        let hp = &model.hparams;
        if params.n_ctx == 0 {
            params.n_ctx = hp.n_ctx_train.max(1);
        }
        params.n_batch = params.n_batch.max(params.n_ctx);
        let recurrent = hp.recurrent.iter().any(Option::is_some);
        let mut e = Embedder {
            exec: Executor::new(params.n_threads),
            model,
            params,
            pooling,
            arena: None,
            profile: None,
            recurrent,
        };
        // Check at once that the model has an embedding graph (and a head for `rank`).
        e.measure(&[1])?;
        Ok(e)
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The pooling in use.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// The parameters in use (`n_ctx` and `n_batch` resolved).
    pub fn params(&self) -> &EmbedParams {
        &self.params
    }

    /// Compute threads (the parameter's 0 resolved).
    pub fn n_threads(&self) -> usize {
        self.exec.n_threads()
    }

    /// Turns per-node timing of every step on (collected until [`Embedder::take_profile`])
    /// or off. Timing costs a little: leave it off outside measurements.
    pub fn set_profiling(&mut self, on: bool) {
        self.exec.set_profiling(on);
        self.profile = on.then(Vec::new);
    }

    /// The per-node times of each step computed since profiling was turned on (or since the
    /// last call), one list per step; empty when profiling is off.
    pub fn take_profile(&mut self) -> Vec<Vec<ggrs_core::NodeTiming>> {
        self.profile
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Sets (`Some`) or removes (`None`) a callback shown every matrix product of the model's
    /// graphs after it is computed (see [`ggrs_core::Executor::set_matmul_observer`]).
    pub fn set_matmul_observer(&mut self, f: Option<ggrs_core::MatMulObserver>) {
        self.exec.set_matmul_observer(f);
    }

    /// Width of one embedding (`n_embd`; for `rank`, the number of scores per input).
    pub fn n_embd(&self) -> usize {
        self.model.hparams.n_embd
    }

    /// Token ids of `text` as an embedding input: the model's special tokens added
    /// ([CLS] … [SEP] for BERT), special-token text parsed (as `llama-embedding`).
    /// Error: an empty text.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        if text.is_empty() {
            return Err(LlamaError::Embedding(
                "an input is empty: give at least one character".into(),
            ));
        }
        self.model
            .text()
            .encode(self.model.tokenizer(), text, true, true)
    }

    /// The embeddings of `texts` (see [`Embedder::embed_tokens`]).
    pub fn embed<S: AsRef<str>>(&mut self, texts: &[S]) -> Result<Vec<Vec<f32>>> {
        let inputs = texts
            .iter()
            .map(|t| self.tokenize(t.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        self.embed_tokens(&inputs)
    }

    /// The embedding of each input (token ids), in order: `n_embd` values pooled and
    /// normalised as the parameters say; with pooling `none`, every token's vector one after
    /// the other (`n_tokens · n_embd`); with `rank`, the relevance score(s).
    /// Errors: an empty input, an input longer than `n_ctx`, a token outside the vocabulary.
    pub fn embed_tokens(&mut self, inputs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let n_vocab = self.model.hparams.n_vocab;
        for (i, t) in inputs.iter().enumerate() {
            if t.is_empty() {
                return Err(LlamaError::Embedding(format!(
                    "input {i} is empty: give at least one token"
                )));
            }
            if t.len() > self.params.n_ctx {
                return Err(LlamaError::Embedding(format!(
                    "input {i} has {} tokens, more than the context of {} tokens the model \
                     takes in one input (split or truncate it)",
                    t.len(),
                    self.params.n_ctx
                )));
            }
            if let Some(&id) = t.iter().find(|&&id| id as usize >= n_vocab) {
                return Err(LlamaError::TokenOutOfRange {
                    id: id as i64,
                    n_vocab,
                });
            }
        }
        let mut out = Vec::with_capacity(inputs.len());
        let mut start = 0;
        while start < inputs.len() {
            // Inputs packed whole into a step of at most n_batch tokens and MAX_SEQ inputs
            // (one input per step with recurrent layers).
            let per_step = if self.recurrent { 1 } else { MAX_SEQ };
            let mut end = start;
            let mut n = 0;
            while end < inputs.len() && end - start < per_step {
                if n + inputs[end].len() > self.params.n_batch && end > start {
                    break;
                }
                n += inputs[end].len();
                end += 1;
            }
            out.extend(self.step(&inputs[start..end])?);
            start = end;
        }
        Ok(out)
    }

    /// Relevance scores of `docs` for `query` (`rank` pooling), in the order of `docs`: each
    /// pair is one input, as llama-server's `/rerank` builds it (BOS, query, EOS, SEP,
    /// document, EOS, each where the vocabulary adds it). Error: the model is not a
    /// reranker (its pooling is not `rank`).
    pub fn rerank<S: AsRef<str>>(&mut self, query: &str, docs: &[S]) -> Result<Vec<f32>> {
        if self.pooling != Pooling::Rank {
            return Err(LlamaError::Embedding(format!(
                "this model is not a reranker: its pooling is `{}`, reranking needs `rank` \
                 (a cross-encoder with a classification head)",
                self.pooling.name()
            )));
        }
        let inputs = rerank_inputs(&self.model, query, docs)?;
        Ok(self
            .embed_tokens(&inputs)?
            .into_iter()
            .map(|s| s[0])
            .collect())
    }

    /// The step shape of inputs of `lens` tokens, each in its own span.
    fn shape(lens: &[usize]) -> Result<StepShape> {
        let mut spans = Vec::with_capacity(lens.len());
        let mut first = 0u32;
        for &l in lens {
            spans.push(SeqSpan {
                first_token: first,
                n_tokens: l as u32,
                first_cell: first,
                n_kv: l as u32,
            });
            first += l as u32;
        }
        Ok(StepShape {
            n_tokens: first as usize,
            n_kv: lens.iter().copied().max().unwrap_or(1),
            n_outputs: first as usize,
            attn_kv_splits: 1,
            spans: SeqSpans::new(&spans).ok_or_else(|| {
                LlamaError::InvalidArgument(format!("a step holds at most {MAX_SEQ} inputs"))
            })?,
            per_column: false,
            window: None,
            n_seqs: 1,
        })
    }

    /// Builds the graph of a step of `shape` in `ctx`.
    fn build(
        &self,
        ctx: &mut Context,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<Built> {
        let m = &self.model;
        let arch = m.arch_name();
        let Some(StepTensors { inputs, logits }) =
            m.arch().build_embeddings(ctx, &m.hparams, w, kv, shape)?
        else {
            return Err(LlamaError::Embedding(format!(
                "the `{arch}` architecture has no embedding graph in ggrs (embedding models: \
                 bert, nomic-bert, gemma-embedding, and the decoders llama, qwen2, qwen3, \
                 qwen3moe, gemma3, qwen35, qwen35moe, lfm2, granitehybrid with --pooling)"
            )));
        };
        let e = m.hparams.n_embd;
        let project =
            |ctx: &mut Context, x: Tensor| m.arch().embedding_projection(ctx, &m.hparams, w, x);
        let (mut cls_ids, mut mean_w, mut pooled_in_graph) = (None, None, false);
        let out = match self.pooling {
            Pooling::Rank => {
                let n_in = shape.spans.as_slice().len();
                let ids = ctx.new_tensor_1d(DType::I32, n_in)?;
                ctx.set_name(ids, "inp_cls")?;
                let x = ctx.get_rows(logits, ids)?;
                let scores = m.arch().classifier(ctx, &m.hparams, w, x)?.ok_or_else(|| {
                    LlamaError::Embedding(format!(
                        "`rank` pooling needs a classification head (cls.output.weight), \
                         which this `{arch}` model has not"
                    ))
                })?;
                cls_ids = Some(ids);
                scores
            }
            // Every token's vector, projected as a whole when the model has projections.
            Pooling::None => project(ctx, logits)?.unwrap_or(logits),
            pooling => {
                // One column per input, pooled in the graph (mean: as llama.cpp, the product
                // of the transposed hidden states with a column of 1/n, same arithmetic as
                // its f32 `mul_mat`) and projected on its own, so that an input's result
                // does not depend on the others in the step. Cls and last without a
                // projection are read from the hidden states on the host.
                let wts = if pooling == Pooling::Mean {
                    let wts = ctx.new_tensor_1d(DType::F32, shape.n_tokens)?;
                    ctx.set_name(wts, "inp_mean")?;
                    mean_w = Some(wts);
                    Some(wts)
                } else {
                    None
                };
                let mut pooled: Vec<Tensor> = Vec::new();
                for sp in shape.spans.as_slice() {
                    let (t0, l) = (sp.first_token as usize, sp.n_tokens as usize);
                    let p = match wts {
                        Some(wts) => {
                            let h = ctx.view_2d(logits, e, l, 4 * e, 4 * e * t0)?;
                            let ht = ctx.transpose(h)?;
                            let ht = ctx.cont(ht)?; // [l, e]
                            let col = ctx.view_2d(wts, l, 1, 4 * l, 4 * t0)?;
                            ctx.mul_mat(ht, col)? // [e, 1]
                        }
                        None => {
                            let at = if pooling == Pooling::Cls {
                                t0
                            } else {
                                t0 + l - 1
                            };
                            ctx.view_2d(logits, e, 1, 4 * e, 4 * e * at)?
                        }
                    };
                    let p = match project(ctx, p)? {
                        Some(q) => q,
                        None if wts.is_none() => break, // pooled on the host
                        None => p,
                    };
                    pooled.push(p);
                }
                match crate::step::concat_tree(ctx, pooled, 1)? {
                    Some(p) => {
                        pooled_in_graph = true;
                        p
                    }
                    None => logits,
                }
            }
        };
        ctx.set_output(out)?;
        let graph = Graph::build(ctx, out)?;
        ctx.alloc_graph(&graph)?;
        Ok(Built {
            inp: inputs,
            cls_ids,
            mean_w,
            pooled_in_graph,
            out,
            graph,
        })
    }

    /// Makes sure the arena fits a step of inputs of `lens` tokens (measuring it; a larger
    /// arena is kept for later steps).
    fn measure(&mut self, lens: &[usize]) -> Result<()> {
        let shape = Embedder::shape(lens)?;
        let hp = &self.model.hparams;
        let cells = self.params.n_batch;
        let mut m = Context::measure();
        let w = self.model.import_weights(&mut m)?;
        let mut kv = KvCache::new(&mut m, hp, cells, DType::F16)?;
        kv.add_recurrent(&mut m, hp, 1)?;
        m.set_deferred_alloc(true);
        self.build(&mut m, &w, &kv, shape)?;
        let size = m.used_mem();
        if self
            .arena
            .as_ref()
            .is_some_and(|a| a.ctx.capacity() >= size)
        {
            return Ok(());
        }
        self.arena = None;
        let mut ctx = Context::try_with_mem_size(size)?;
        let weights = self.model.import_weights(&mut ctx)?;
        let mut kv = KvCache::new(&mut ctx, hp, cells, DType::F16)?;
        kv.add_recurrent(&mut ctx, hp, 1)?;
        ctx.set_deferred_alloc(true);
        let base = ctx.checkpoint();
        self.arena = Some(Arena {
            ctx,
            weights,
            kv,
            base,
        });
        Ok(())
    }

    /// Evaluates one step of `inputs` (at most `n_batch` tokens, `MAX_SEQ` inputs).
    fn step(&mut self, inputs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let lens: Vec<usize> = inputs.iter().map(|t| t.len()).collect();
        self.measure(&lens)?;
        let shape = Embedder::shape(&lens)?;
        let mut arena = self.arena.take().expect("measure made the arena");
        let res = self.run(&mut arena, inputs, shape);
        let rewound = arena.ctx.rewind(arena.base);
        self.arena = Some(arena);
        let res = res?;
        rewound?;
        Ok(res)
    }

    fn run(
        &mut self,
        a: &mut Arena,
        inputs: &[Vec<u32>],
        shape: StepShape,
    ) -> Result<Vec<Vec<f32>>> {
        a.ctx.rewind(a.base)?;
        let built = self.build(&mut a.ctx, &a.weights, &a.kv, shape)?;
        let n = shape.n_tokens;
        let n_kv = shape.n_kv;
        let arch = self.model.arch();
        let causal = arch.embeddings_causal();
        let window = arch.embeddings_window();
        let mut toks = Vec::with_capacity(n);
        let mut pos = Vec::with_capacity(n);
        let mut mask = vec![f32::NEG_INFINITY; n_kv * n];
        let mut mask_swa = built.inp.mask_swa.map(|_| mask.clone());
        let mut t = 0;
        for input in inputs {
            for (p, &id) in input.iter().enumerate() {
                toks.push(id as i32);
                pos.push(p as i32);
                // Key k of the input: up to p (causal) or all; in a window as llama.cpp's
                // standard (p − k < w) or symmetric (|p − k| ≤ w/2) sliding window.
                let seen = if causal { p + 1 } else { input.len() };
                mask[t * n_kv..t * n_kv + seen].fill(0.0);
                if let Some(m) = mask_swa.as_mut() {
                    let row = &mut m[t * n_kv..t * n_kv + seen];
                    for (k, x) in row.iter_mut().enumerate() {
                        let inside = match window {
                            None => true,
                            Some(w) if causal => p - k < w as usize,
                            Some(w) => p.abs_diff(k) <= w as usize / 2,
                        };
                        if inside {
                            *x = 0.0;
                        }
                    }
                }
                t += 1;
            }
        }
        let cells: Vec<i32> = (0..n as i32).collect();
        let ctx = &mut a.ctx;
        ctx.set_i32(built.inp.tokens, &toks)?;
        ctx.set_i32(built.inp.pos, &pos)?;
        ctx.set_i32(built.inp.k_rows, &cells)?;
        ctx.set_f32(built.inp.mask, &mask)?;
        if let (Some(t), Some(m)) = (built.inp.mask_swa, &mask_swa) {
            ctx.set_f32(t, m)?;
        }
        if let Some((t, temp)) = built.inp.q_scale {
            ctx.set_f32(t, &temp.factors(&pos))?;
        }
        if let Some(ids) = built.cls_ids {
            let mut first = Vec::with_capacity(inputs.len());
            let mut at = 0i32;
            for input in inputs {
                first.push(at);
                at += input.len() as i32;
            }
            ctx.set_i32(ids, &first)?;
        }
        if let (Some(rs), Some(rows)) = (&a.kv.recurrent, built.inp.rs_rows) {
            // The step's one input (sequence 0) starts from a zero state.
            let run = SeqRun {
                seq: 0,
                end: n as i32,
                fresh: true,
            };
            ctx.set_i32(rows, &rs.rows(&[run]))?;
            ctx.data_mut(rs.states)?.fill(0);
        }
        if let Some(wts) = built.mean_w {
            let w: Vec<f32> = inputs
                .iter()
                .flat_map(|t| std::iter::repeat_n(1.0 / t.len() as f32, t.len()))
                .collect();
            ctx.set_f32(wts, &w)?;
        }
        self.exec.compute(ctx, &built.graph)?;
        if let Some(p) = self.profile.as_mut() {
            p.push(self.exec.profile().to_vec());
        }
        let mut raw = Vec::new();
        ctx.append_f32(built.out, &mut raw)?;
        let per = raw.len() / inputs.len().max(1);
        match self.pooling {
            Pooling::Rank => return Ok(raw.chunks(per).map(|c| c.to_vec()).collect()),
            _ if built.pooled_in_graph => {
                let norm = self.params.normalize;
                return Ok(raw
                    .chunks(per)
                    .map(|c| {
                        let mut v = c.to_vec();
                        normalize(&mut v, norm);
                        v
                    })
                    .collect());
            }
            _ => {}
        }
        let e = self.model.hparams.n_embd;
        let mut out = Vec::with_capacity(inputs.len());
        let mut at = 0;
        for input in inputs {
            let rows = &raw[at * e..(at + input.len()) * e];
            at += input.len();
            out.push(self.pool(rows, e));
        }
        Ok(out)
    }

    /// Pools one input's rows (`n_tokens × e`) and normalises the result.
    fn pool(&self, rows: &[f32], e: usize) -> Vec<f32> {
        let n = rows.len() / e;
        let norm = self.params.normalize;
        match self.pooling {
            Pooling::None => {
                let mut v = rows.to_vec();
                for r in v.chunks_mut(e) {
                    normalize(r, norm);
                }
                v
            }
            Pooling::Cls | Pooling::Rank | Pooling::Mean => {
                let mut v = rows[..e].to_vec();
                normalize(&mut v, norm);
                v
            }
            Pooling::Last => {
                let mut v = rows[(n - 1) * e..].to_vec();
                normalize(&mut v, norm);
                v
            }
        }
    }
}
