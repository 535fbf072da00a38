//! A session: one context holding the imported weights, the KV cache and, per step, the
//! step's graph; an executor; the logits of the last step.
//!
//! The context's size is measured, not guessed: at creation the session builds the largest
//! step it accepts (`n_batch` tokens, every cache cell attended, the outputs it is set up
//! for) in a measuring context with the graph allocator, and makes its arena exactly that
//! large. A step builds its graph after a checkpoint, places intermediates with
//! [`Context::alloc_graph`] (memory reused across layers), fills the inputs, computes and
//! copies the logits out. The graph stays in the arena: the next step with the same shape
//! (token generation, until the padded cache length grows) only fills the inputs and
//! computes it again, and the executor reuses what it resolved for it; another shape
//! rewinds to the checkpoint and builds anew.

use std::sync::Arc;

use ggrs_core::{Checkpoint, Context, DType, Executor, Graph};

use crate::architecture::{StepState, StepTensors};
use crate::batch::{Batch, SeqId};
use crate::error::{LlamaError, Result};
use crate::hparams::{HParams, LayerCache};
use crate::kv_cache::{KvCache, Placement};
use crate::kv_types::KvTypes;
use crate::loader::ImportedWeights;
use crate::model::Model;
use crate::recurrent_cache::{Checkpoints, SavedState};
use crate::step::{SeqSpan, SeqSpans, StepInputs, StepShape, WindowShape};

/// Queries from which flash attention takes its tiled kernel (`ggrs_core`'s
/// `kernels::attn::TILE_Q`, llama.cpp's `GGML_FA_TILE_Q`).
const FA_TILE_Q: usize = 64;
/// Cells from which flash attention splits a single query's keys (`ggrs_core`'s
/// `kernels::attn::SPLIT_MIN_KV`).
const FA_SPLIT_MIN_KV: usize = 512;

/// How to set up a [`Session`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionParams {
    /// Context size in tokens (KV cache cells); 0: the model's training context, at most 4096.
    pub n_ctx: usize,
    /// Most tokens evaluated in one graph; longer inputs are split.
    pub n_batch: usize,
    /// Threads (0: one per physical core).
    pub n_threads: usize,
    /// Element type of the KV cache's keys (F16 by default; see
    /// [`crate::kv_types::KvTypes`] for the types), and of its values unless `kv_type_v`.
    pub kv_type: DType,
    /// Element type of the KV cache's values when it differs from the keys' (llama.cpp's
    /// `-ctv`); `None`: `kv_type`.
    pub kv_type_v: Option<DType>,
    /// Whether a step may ask for the logits of every token (needed for perplexity); when
    /// false only the last token of a step gets logits.
    pub logits_all: bool,
    /// Parts flash attention splits a decode step's keys into once it attends to 512 cells
    /// or more. llama.cpp splits them across its threads, so its logits there depend on its
    /// thread count: 2 (the default) reproduces `llama.cpp -t 2`, the reference outputs, bit
    /// for bit; 1 never splits. ggrs's own results never depend on `n_threads`.
    pub attn_kv_splits: usize,
    /// Regions of the KV cache (0 or 1: one cache all sequences share). With n, sequence
    /// ids `0..n` each own `n_ctx / n` cells and attend over them only, as a lone session
    /// with that context would (llama.cpp's per-sequence streams): a sequence's logits then
    /// do not depend on what else a step holds ([`Session::decode`]). `n_ctx` must be a
    /// multiple of `n`. A model with recurrent layers ([`crate::recurrent_cache`]) keeps a
    /// state for each sequence id `0..n` (only sequence 0 with `n` = 1).
    pub n_streams: usize,
    /// Keep every cell for the sliding-window layers too (llama.cpp's `--swa-full`). False
    /// (the default): the layers that attend through a sliding window (Gemma 2/3/4,
    /// gpt-oss) keep only their window plus a step's tokens
    /// ([`KvCache::window_cells`]), so their share of the cache does not grow with the
    /// context; a cached prefix can then be reused only while the window behind it is
    /// still held ([`Session::reusable_prefix`]).
    pub swa_full: bool,
    /// Most drafted tokens a speculative step verifies (0: no speculation). With n > 0 the
    /// arena also holds a step of [`Session::decode_exact`] with n + 1 tokens (per region,
    /// with regions: up to [`crate::batch::MAX_SEQ`] tokens in all), each with its logits,
    /// and such a step may ask for logits of every token even without `logits_all`.
    pub n_draft: usize,
}

impl Default for SessionParams {
    fn default() -> Self {
        SessionParams {
            n_ctx: 0,
            n_batch: 512,
            n_threads: 0,
            kv_type: DType::F16,
            kv_type_v: None,
            logits_all: false,
            attn_kv_splits: 2,
            n_streams: 1,
            swa_full: false,
            n_draft: 0,
        }
    }
}

impl SessionParams {
    /// The KV cache's key and value types (`kv_type`, `kv_type_v`).
    pub fn kv_types(&self) -> KvTypes {
        KvTypes {
            k: self.kv_type,
            v: self.kv_type_v.unwrap_or(self.kv_type),
        }
    }
}

/// Evaluation state for one model: see the [module docs](self).
pub struct Session {
    model: Arc<Model>,
    params: SessionParams,
    ctx: Context,
    exec: Executor,
    weights: ImportedWeights,
    kv: KvCache,
    base: Checkpoint,
    /// The last step's logits, when they are not `logits_in`.
    logits: Vec<f32>,
    /// The last step's logits tensor, read where the step left it (in the arena, until the
    /// next step or rewind): a step of one piece needs no copy of its rows (a verification
    /// step of many columns has megabytes of them).
    logits_in: Option<ggrs_core::Tensor>,
    n_outputs: usize,
    op_profile: Option<OpProfile>,
    /// The architecture's per-sequence state: each step's positions and mask.
    state: Box<dyn StepState>,
    /// The graph of the last one-token step, kept (with its tensors in the arena, right
    /// after `base`) and computed again while steps have its shape: decoding one token at a
    /// time, the shape changes only when the padded cache length does.
    one: Option<BuiltStep>,
    /// Where the one-token graph's tensors end: other steps build after it, so that
    /// speculative decoding, which alternates one-token steps with wider ones, keeps both
    /// graphs (and the executor what it resolved for both) instead of building each anew.
    one_end: Option<Checkpoint>,
    /// The graph of the last step of more than one token, kept after the one-token graph
    /// (or `base`) while steps have its shape.
    built: Option<BuiltStep>,
    /// Whether every weight's products keep each column's bits whatever its neighbours
    /// ([`ggrs_core::weights::columns_independent`]); if not, a step of several sequences in
    /// cache regions is split (see `Session::pieces`).
    columns_independent: bool,
    /// The recurrent state of sequence 0 right after the last prompt generation evaluated
    /// (a checkpoint for [`crate::PromptCache`]).
    prompt_state: Option<SavedState>,
    /// The drafter generation uses, if any ([`Session::set_speculation`]).
    pub(crate) speculation: Option<crate::speculative::drafting::Speculation>,
    /// Whether generation shifts the context when it reaches its end, and the prompt
    /// tokens it keeps ([`Session::set_context_shift`]).
    pub(crate) context_shift: Option<i32>,
    /// The context shifts made since the last generation began (`(kept, dropped)` cells,
    /// in order), so that a record of the cached tokens can drop the same ones.
    pub(crate) shifts: Vec<(usize, usize)>,
}

/// A step's graph, its inputs and its logits tensor, for [`StepShape`] `shape`.
struct BuiltStep {
    shape: StepShape,
    inp: StepInputs,
    logits: ggrs_core::Tensor,
    graph: Graph,
}

/// Time per op type over the steps of a session (see [`Session::op_profile`]).
#[derive(Debug, Clone, Default)]
pub struct OpProfile {
    /// Steps recorded.
    pub steps: usize,
    /// Per op name: nodes run and total time.
    pub ops: std::collections::BTreeMap<&'static str, (usize, std::time::Duration)>,
}

impl OpProfile {
    /// The profile as a table, most expensive op first.
    pub fn table(&self) -> String {
        let total: std::time::Duration = self.ops.values().map(|v| v.1).sum();
        let mut rows: Vec<_> = self.ops.iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        let mut s = format!(
            "{:<16} {:>8} {:>12} {:>7}   ({} steps, {:.1} ms)\n",
            "op",
            "nodes",
            "time (ms)",
            "share",
            self.steps,
            total.as_secs_f64() * 1e3
        );
        for (op, (n, t)) in rows {
            s += &format!(
                "{:<16} {:>8} {:>12.2} {:>6.1}%\n",
                op,
                n,
                t.as_secs_f64() * 1e3,
                100.0 * t.as_secs_f64() / total.as_secs_f64().max(1e-12)
            );
        }
        s
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(p) = &self.op_profile {
            if std::env::var_os("GGRS_PROFILE").is_some() {
                eprintln!("\nggrs profile (GGRS_PROFILE):\n{}", p.table());
            }
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("params", &self.params)
            .field("arena_bytes", &self.ctx.capacity())
            .field("kv_used", &self.kv.used())
            .finish()
    }
}

/// Bytes of the KV cache tensors of `n_ctx` cells (`window_cells` for the sliding-window
/// layers when they keep their own), or `None` when that overflows.
fn kv_cache_bytes(
    hp: &HParams,
    n_ctx: usize,
    window_cells: Option<usize>,
    types: KvTypes,
) -> Option<u64> {
    hp.kv_layers.iter().try_fold(0u64, |sum, l| {
        let row = types.cell_bytes(l.width()) as u64;
        let cells = match l {
            LayerCache::Own {
                window: Some(_), ..
            } => window_cells.unwrap_or(n_ctx),
            _ => n_ctx,
        };
        sum.checked_add(row.checked_mul(cells as u64)?)
    })
}

/// The largest steps of a session with cache regions, every region read whole: one long run
/// and a token per other region (the long run first, or last), and the tokens spread evenly
/// over every region (the arena must hold whichever needs most).
fn worst_spans(p: &SessionParams, window_cells: Option<usize>) -> Vec<StepShape> {
    let per = p.n_ctx / p.n_streams;
    let per_w = window_cells.map(|n| n / p.n_streams);
    let regions = p.n_streams.min(p.n_batch);
    let others = regions - 1;
    let long = p.n_batch - others;
    let even: Vec<usize> = (0..regions)
        .map(|r| p.n_batch / regions + usize::from(r < p.n_batch % regions))
        .collect();
    let mut long_first = vec![long];
    long_first.extend(std::iter::repeat_n(1, others));
    let mut long_last = vec![1; others];
    long_last.push(long);
    [long_first, long_last, even]
        .into_iter()
        .map(|lengths| {
            let mut first_token = 0;
            let spans: Vec<SeqSpan> = lengths
                .iter()
                .enumerate()
                .map(|(r, &n)| {
                    let s = SeqSpan {
                        first_token: first_token as u32,
                        n_tokens: n as u32,
                        first_cell: (r * per) as u32,
                        n_kv: per as u32,
                    };
                    first_token += n;
                    s
                })
                .collect();
            let window = per_w.map(|pw| {
                let w_spans: Vec<SeqSpan> = spans
                    .iter()
                    .enumerate()
                    .map(|(r, s)| SeqSpan {
                        first_cell: (r * pw) as u32,
                        n_kv: pw as u32,
                        ..*s
                    })
                    .collect();
                WindowShape {
                    n_kv: pw,
                    spans: SeqSpans::new(&w_spans)
                        .expect("n_streams ≤ MAX_SEQ (checked by Session::new)"),
                }
            });
            StepShape {
                n_tokens: p.n_batch,
                n_kv: per,
                n_outputs: if p.logits_all { p.n_batch } else { 1 },
                attn_kv_splits: p.attn_kv_splits,
                spans: SeqSpans::new(&spans)
                    .expect("n_streams ≤ MAX_SEQ (checked by Session::new)"),
                per_column: false,
                window,
                n_seqs: 1,
            }
        })
        .collect()
}

fn build_step(
    ctx: &mut Context,
    model: &Model,
    w: &ImportedWeights,
    kv: &KvCache,
    shape: StepShape,
) -> Result<(StepInputs, ggrs_core::Tensor, Graph)> {
    ctx.set_per_column_products(shape.per_column);
    let built = model.arch().build(ctx, &model.hparams, w, kv, shape);
    ctx.set_per_column_products(false);
    let StepTensors { inputs, logits } = built?;
    let mut graph = Graph::build(ctx, logits)?;
    if let Some(states) = inputs.state_out {
        // The recurrent layers' state writes (nothing reads them within the step).
        graph.build_forward_expand(ctx, states)?;
    }
    ctx.alloc_graph(&graph)?;
    Ok((inputs, logits, graph))
}

impl Session {
    /// Sets up a session: measures and allocates its arena, imports the weights, makes the
    /// KV cache and starts the worker threads.
    pub fn new(model: Arc<Model>, params: SessionParams) -> Result<Session> {
        let hp = &model.hparams;
        let mut params = params;
        if params.n_ctx == 0 {
            params.n_ctx = hp.n_ctx_train.clamp(1, 4096);
        }
        if params.n_batch == 0 {
            return Err(LlamaError::InvalidArgument(
                "n_batch must be at least 1".into(),
            ));
        }
        if params.attn_kv_splits == 0 {
            return Err(LlamaError::InvalidArgument(
                "attn_kv_splits must be at least 1 (1: never split)".into(),
            ));
        }
        params.n_batch = params.n_batch.min(params.n_ctx);
        params.n_streams = params.n_streams.max(1);
        if params.n_streams > crate::batch::MAX_SEQ
            || !params.n_ctx.is_multiple_of(params.n_streams)
        {
            return Err(LlamaError::InvalidArgument(format!(
                "n_ctx ({}) must be a multiple of n_streams ({}), which is at most {}",
                params.n_ctx,
                params.n_streams,
                crate::batch::MAX_SEQ
            )));
        }
        let window_cells = match params.swa_full {
            true => None,
            false => KvCache::window_cells(hp, params.n_ctx, params.n_streams, params.n_batch),
        };
        let worst = StepShape {
            n_tokens: params.n_batch,
            n_kv: params.n_ctx,
            n_outputs: if params.logits_all { params.n_batch } else { 1 },
            attn_kv_splits: params.attn_kv_splits,
            spans: Default::default(),
            per_column: false,
            window: window_cells.map(|n| WindowShape {
                n_kv: n,
                spans: Default::default(),
            }),
            n_seqs: 1,
        };
        // Before anything is allocated: the KV cache alone (tensors and cell bookkeeping)
        // must fit in what the machine can give.
        let too_large = |kv: Option<u64>, compute: Option<u64>, available: Option<u64>| {
            LlamaError::SessionTooLarge {
                n_ctx: params.n_ctx,
                n_batch: params.n_batch,
                kv_bytes: kv.unwrap_or(u64::MAX),
                compute_bytes: compute,
                available,
            }
        };
        let cell_bytes = (params.n_ctx as u64)
            .saturating_mul(std::mem::size_of::<crate::kv_cache::Cell>() as u64);
        let kv_bytes = kv_cache_bytes(hp, params.n_ctx, window_cells, params.kv_types());
        let available = ggrs_core::available_memory();
        match (kv_bytes, available) {
            (None, a) => return Err(too_large(None, None, a)),
            (Some(kv), Some(a)) if kv.saturating_add(cell_bytes) > a => {
                return Err(too_large(Some(kv), None, Some(a)))
            }
            _ => {}
        }
        // Measure: the same allocations as the real context will make, without data.
        let mut m = Context::measure();
        let w = model.import_weights(&mut m)?;
        let mut kv =
            KvCache::with_window_cells(&mut m, hp, params.n_ctx, params.kv_types(), window_cells)?;
        kv.set_streams(params.n_streams)?;
        kv.add_recurrent(&mut m, hp, params.n_streams)?;
        let kv_used = m.used_mem();
        m.set_deferred_alloc(true);
        let before = m.checkpoint();
        let before_used = m.used_mem();
        // With regions every step attends per region (one shared-cache step over all the
        // cells never happens): measure the largest such steps instead.
        let one = worst;
        let mut worst = if params.n_streams > 1 {
            worst_spans(&params, window_cells)
        } else {
            vec![one]
        };
        if kv.recurrent.is_some() {
            // Recurrent layers hold a state per sequence of the step: also measure a step
            // of one token for each sequence the cache holds.
            let n = params.n_streams.min(params.n_batch);
            let singles = SessionParams {
                n_batch: n,
                ..params
            };
            let extra = match params.n_streams > 1 {
                true => worst_spans(&singles, window_cells),
                false => vec![StepShape {
                    n_tokens: n,
                    n_outputs: 1,
                    ..one
                }],
            };
            worst.extend(extra.into_iter().map(|w| StepShape { n_seqs: n, ..w }));
        }
        // Steps of exact columns (speculative verification): one single-token span per
        // token, every span reading its whole region, products per column or not.
        if params.n_draft > 0 && window_cells.is_none() {
            let n = if params.n_streams > 1 {
                crate::batch::MAX_SEQ
            } else {
                params.n_draft + 1
            }
            .min(params.n_batch)
            .min(crate::batch::MAX_SEQ);
            let per = params.n_ctx / params.n_streams;
            let spans: Vec<SeqSpan> = (0..n)
                .map(|t| SeqSpan {
                    first_token: t as u32,
                    n_tokens: 1,
                    first_cell: ((t % params.n_streams) * per) as u32,
                    n_kv: per as u32,
                })
                .collect();
            let spans = SeqSpans::new(&spans).expect("at most MAX_SEQ spans (clamped above)");
            for per_column in [false, true] {
                worst.push(StepShape {
                    n_tokens: n,
                    n_kv: per,
                    n_outputs: n,
                    attn_kv_splits: params.attn_kv_splits,
                    spans,
                    per_column,
                    window: None,
                    n_seqs: 1,
                });
            }
        }
        // A one-token step's graph stays in the arena below the others (`Session::one`):
        // room for the largest of those too.
        let singles = SessionParams {
            n_batch: 1,
            ..params
        };
        let single_shapes = match params.n_streams > 1 {
            true => worst_spans(&singles, window_cells),
            false => vec![StepShape {
                n_tokens: 1,
                n_outputs: 1,
                ..one
            }],
        };
        let mut one_size = 0;
        for shape in single_shapes {
            for per_column in [false, true] {
                m.rewind(before)?;
                build_step(
                    &mut m,
                    &model,
                    &w,
                    &kv,
                    StepShape {
                        per_column,
                        ..shape
                    },
                )?;
                one_size = one_size.max(m.used_mem() - before_used);
            }
        }
        let mut size = 0;
        for shape in worst {
            m.rewind(before)?;
            build_step(&mut m, &model, &w, &kv, shape)?;
            size = size.max(m.used_mem() + one_size);
        }
        // The graph that rotates the keys again after positions move (context shift), for
        // an architecture and a cache that can (see `Session::supports_shift`).
        // (At most every cell moves: in a cache of regions, every slot's at once.)
        let movable = window_cells.is_none() && kv.recurrent.is_none();
        if let Some(shift) = movable
            .then(|| model.arch().key_shift(hp, &w, &kv).ok())
            .flatten()
        {
            m.rewind(before)?;
            let (_, graph) = crate::kv_shift::build_key_shift(&mut m, &kv, &shift, kv.size())?;
            m.alloc_graph(&graph)?;
            size = size.max(m.used_mem());
        }
        let compute = Some(size.saturating_sub(kv_used) as u64);
        if let Some(a) = available {
            if (size as u64).saturating_add(cell_bytes) > a {
                return Err(too_large(kv_bytes, compute, Some(a)));
            }
        }
        let mut ctx = Context::try_with_mem_size(size).map_err(|e| match e {
            ggrs_core::Error::ArenaAlloc { .. } => too_large(kv_bytes, compute, None),
            e => e.into(),
        })?;
        let weights = model.import_weights(&mut ctx)?;
        let mut kv = KvCache::with_window_cells(
            &mut ctx,
            hp,
            params.n_ctx,
            params.kv_types(),
            window_cells,
        )?;
        kv.set_streams(params.n_streams)?;
        kv.add_recurrent(&mut ctx, hp, params.n_streams)?;
        let columns_independent = model.matrix_weights().all(|w| {
            // Stacked experts go through `mul_mat_id`, whose columns are one-column products
            // by contract.
            w.ne[1] <= 1 || w.ne[2] > 1 || ggrs_core::weights::columns_independent(w.dtype, w.ne)
        });
        ctx.set_deferred_alloc(true);
        let base = ctx.checkpoint();
        let state = model.arch().new_state();
        Ok(Session {
            exec: Executor::new(params.n_threads),
            model,
            params,
            ctx,
            weights,
            kv,
            base,
            logits: Vec::new(),
            logits_in: None,
            n_outputs: 0,
            op_profile: None,
            state,
            one: None,
            one_end: None,
            built: None,
            columns_independent,
            prompt_state: None,
            speculation: None,
            context_shift: None,
            shifts: Vec::new(),
        })
        .map(|mut s: Session| {
            if std::env::var_os("GGRS_PROFILE").is_some() {
                s.set_profiling(true);
            }
            s
        })
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The parameters in force (with defaults resolved).
    pub fn params(&self) -> &SessionParams {
        &self.params
    }

    /// Bytes of the session's arena (KV cache, weight metadata and the largest step graph).
    pub fn arena_bytes(&self) -> usize {
        self.ctx.capacity()
    }

    /// Threads the session computes with.
    pub fn n_threads(&self) -> usize {
        self.exec.n_threads()
    }

    /// Runs `f` on every item on the session's compute threads, between steps (e.g. sampling
    /// a batch's rows of logits); see [`Executor::for_each_mut`]: each item goes to one
    /// thread, so `f`'s result for an item must depend on that item only.
    pub fn for_each_mut<T: Send>(&self, items: &mut [T], f: impl Fn(&mut T) + Sync) {
        self.exec.for_each_mut(items, f)
    }

    /// Whether a step of several sequences in cache regions runs as one graph (every
    /// weight keeps each column's bits whatever its neighbours), rather than one graph for
    /// the one-token sequences (per-column products) and one per longer run. Either way a
    /// sequence's results do not depend on the others.
    pub fn batches_sequences(&self) -> bool {
        self.columns_independent
    }

    /// Makes generation ([`Session::generate_tokens`] and what calls it) go on past the end
    /// of the context (`Some(keep)`) as llama.cpp's `--context-shift --keep N` does: when
    /// the next token would take the last cell, the first `keep` prompt tokens after BOS stay
    /// (the whole prompt when `keep` is negative or longer than it; BOS always), half of the
    /// positions after them are dropped and the rest move down ([`Session::context_shift`]).
    /// `None` (the default): generation stops when the context is full. Fails with
    /// [`LlamaError::ContextShiftUnsupported`] where positions cannot move
    /// ([`Session::supports_shift`]) or the cache is split into regions (the engine shifts
    /// each slot's region itself: [`Session::shift_out`]).
    pub fn set_context_shift(&mut self, keep: Option<i32>) -> Result<()> {
        if keep.is_some() {
            self.supports_whole_context_shift()?;
        }
        self.context_shift = keep;
        Ok(())
    }

    /// The context shifts ([`Session::context_shift`]) made since the last generation began,
    /// in order: `(kept, dropped)` cells each. A record of the cached tokens drops
    /// `kept..kept + dropped` of its tokens for each, in turn.
    pub fn shifts(&self) -> &[(usize, usize)] {
        &self.shifts
    }

    /// The context shift generation makes ([`Session::set_context_shift`]).
    pub fn context_shift_keep(&self) -> Option<i32> {
        self.context_shift
    }

    /// Makes generation ([`Session::generate_tokens`] and what calls it) speculative with
    /// `spec`'s drafter (`None`: plain decoding). The output does not change (see
    /// [`crate::speculative`]). Fails when the session cannot verify `spec.params.draft_max`
    /// tokens a step ([`SessionParams::n_draft`], [`Session::supports_exact_steps`]).
    pub fn set_speculation(
        &mut self,
        spec: Option<crate::speculative::drafting::Speculation>,
    ) -> Result<()> {
        if let Some(s) = &spec {
            self.supports_exact_steps()
                .map_err(LlamaError::InvalidArgument)?;
            let max = self
                .params
                .n_draft
                .min(self.params.n_batch.saturating_sub(1))
                .min(crate::batch::MAX_SEQ - 1);
            if s.params.draft_max == 0 || s.params.draft_max > max {
                return Err(LlamaError::InvalidArgument(format!(
                    "--draft-max {} is outside 1..={max} (this session verifies at most \
                     {max} drafted tokens a step: SessionParams::n_draft)",
                    s.params.draft_max
                )));
            }
            if s.params.draft_min > s.params.draft_max {
                return Err(LlamaError::InvalidArgument(format!(
                    "--draft-min {} is above --draft-max {}",
                    s.params.draft_min, s.params.draft_max
                )));
            }
        }
        self.speculation = spec;
        Ok(())
    }

    /// The drafter generation uses, if any.
    pub fn speculation(&self) -> Option<&crate::speculative::drafting::Speculation> {
        self.speculation.as_ref()
    }

    /// The KV cache.
    pub fn kv_cache(&self) -> &KvCache {
        &self.kv
    }

    /// Tokens in the cache for sequence 0 (its next position).
    pub fn n_past(&self) -> usize {
        self.kv.max_pos(0).map_or(0, |p| p as usize + 1)
    }

    /// Forgets every cached token.
    pub fn clear(&mut self) {
        self.kv.clear();
        self.state.clear();
        self.logits.clear();
        self.logits_in = None;
        self.n_outputs = 0;
    }

    /// How many of the first `len` cached positions of `seq` a following step can build on
    /// (see [`KvCache::reusable_prefix`]): `len`, or 0 when the sliding-window layers no
    /// longer hold the window behind position `len`.
    pub fn reusable_prefix(&self, seq: SeqId, len: usize) -> usize {
        self.kv.reusable_prefix(seq, len)
    }

    /// The recurrent state of sequence `seq` (and the position it stands at), for a model
    /// with recurrent layers; `None` for a model without. Together with the keys and values
    /// of its positions, which stay in the cache until [`Session::remove`]d, it lets the
    /// sequence go back to this point: [`Session::restore_state`].
    pub fn save_state(&self, seq: SeqId) -> Result<Option<SavedState>> {
        match &self.kv.recurrent {
            Some(rs) => Ok(Some(rs.save(self.ctx.data(rs.states)?, seq)?)),
            None => Ok(None),
        }
    }

    /// Makes `saved` (from [`Session::save_state`]) the recurrent state of `seq` again. The
    /// cache must still hold the keys and values of its positions before
    /// `saved.next_pos`; remove the later ones first (`remove(seq, saved.next_pos)`, which
    /// also drops the state the sequence had gone on to).
    pub fn restore_state(&mut self, seq: SeqId, saved: &SavedState) -> Result<()> {
        let Some(rs) = self.kv.recurrent.as_mut() else {
            return Err(LlamaError::InvalidArgument(
                "the model has no recurrent layers: there is no state to restore".into(),
            ));
        };
        rs.restore(self.ctx.data_mut(rs.states)?, seq, saved)
    }

    /// Keeps the recurrent state of sequence 0 as it stands after a prompt (see
    /// [`Session::take_prompt_state`]); nothing for a model without recurrent layers.
    pub(crate) fn note_prompt_state(&mut self) -> Result<()> {
        self.prompt_state = self.save_state(0)?;
        Ok(())
    }

    /// The recurrent state of sequence 0 right after the prompt of the last generation
    /// ([`Session::generate_tokens`] and the prompt cache's), taken out.
    pub fn take_prompt_state(&mut self) -> Option<SavedState> {
        self.prompt_state.take()
    }

    /// Makes the cache of `seq` hold its first `len` positions and nothing after them, going
    /// back to the longest of `checkpoints` within them when the recurrent state already
    /// went further (it cannot be rewound); returns how many positions it holds then: `len`,
    /// a checkpoint's position, or 0 (the sequence starts over). For a model without
    /// recurrent layers: [`Session::reusable_prefix`].
    pub fn resume_at(
        &mut self,
        seq: SeqId,
        len: usize,
        checkpoints: &Checkpoints,
    ) -> Result<usize> {
        let mut keep = self.reusable_prefix(seq, len);
        if keep < len && self.kv.recurrent.is_some() {
            if let Some(c) = checkpoints.best(len) {
                self.remove(seq, c.next_pos);
                self.restore_state(seq, c)?;
                keep = self.reusable_prefix(seq, c.next_pos as usize);
            }
        }
        self.remove(seq, keep as i32);
        Ok(keep)
    }

    /// Forgets the tokens of `seq` from position `from` on.
    pub fn remove(&mut self, seq: SeqId, from: i32) {
        self.kv.remove(seq, from);
        self.state.remove(seq, from);
    }

    /// Whether this session can move cached positions ([`Session::shift_positions`]); if
    /// not, why (a typed error).
    pub fn supports_shift(&self) -> Result<()> {
        let unsupported = |reason: String| LlamaError::ContextShiftUnsupported {
            arch: self.model.arch_name().to_string(),
            reason,
        };
        let hp = &self.model.hparams;
        let shift = self
            .model
            .arch()
            .key_shift(hp, &self.weights, &self.kv)
            .map_err(unsupported)?;
        if self.kv.types.rot_k(shift.head_dim).is_some()
            && shift
                .layers
                .iter()
                .flatten()
                .any(|r| r.params.n_dims != shift.head_dim)
        {
            return Err(unsupported(
                "a quantized key cache of partly rotated heads cannot be re-rotated".into(),
            ));
        }
        if self.kv.window_size().is_some() {
            return Err(unsupported(
                "its sliding-window layers keep only their window (use swa_full / --swa-full)"
                    .into(),
            ));
        }
        if self.kv.recurrent.is_some() {
            return Err(unsupported(
                "it keeps a recurrent state, which cannot move to other positions".into(),
            ));
        }
        Ok(())
    }

    /// Adds `delta` to the cached positions `p0..p1` of `seq` (llama.cpp's
    /// `llama_memory_seq_add`); the moved keys are rotated by `delta` before the next step
    /// (see [`crate::kv_shift`]). A typed error, and nothing changed, where the model or the
    /// cache cannot ([`Session::supports_shift`]).
    pub fn shift_positions(&mut self, seq: SeqId, p0: i32, p1: i32, delta: i32) -> Result<()> {
        self.supports_shift()?;
        self.kv.shift_positions(seq, p0, p1, delta)
    }

    /// The context shift of sequence 0, as llama.cpp's `llama-completion` and
    /// `llama-server` make it when generation reaches the end of the context: keeps the
    /// first `n_keep` positions, drops half of the ones after them
    /// ([`crate::kv_shift::discarded`]) and moves the rest down. Returns how many were
    /// dropped (0: nothing could be, the cache is unchanged).
    pub fn context_shift(&mut self, n_keep: usize) -> Result<usize> {
        self.supports_whole_context_shift()?;
        let n_discard = crate::kv_shift::discarded(self.n_past(), n_keep);
        self.shift_out(0, n_keep, n_discard)?;
        if n_discard > 0 {
            self.shifts.push((n_keep, n_discard));
        }
        Ok(n_discard)
    }

    /// The context shift of one sequence (llama-server's, per slot): frees the positions
    /// `n_keep..n_keep + n_discard` of `seq` and moves the ones after them down by
    /// `n_discard` (their keys are rotated before the next step). In a cache split into
    /// regions only `seq`'s region changes. A typed error, and nothing changed, where the
    /// model or the cache cannot ([`Session::supports_shift`]).
    pub fn shift_out(&mut self, seq: SeqId, n_keep: usize, n_discard: usize) -> Result<()> {
        self.supports_shift()?;
        if n_discard == 0 {
            return Ok(());
        }
        let n_past = self.kv.max_pos(seq).map_or(0, |p| p + 1);
        let (keep, end) = (n_keep as i32, (n_keep + n_discard) as i32);
        self.kv.remove_range(seq, keep, end);
        self.kv
            .shift_positions(seq, end, n_past.max(end), -(n_discard as i32))
    }

    /// [`Session::supports_shift`], and a cache of one region (the context generation of
    /// sequence 0 shifts is the whole cache).
    fn supports_whole_context_shift(&self) -> Result<()> {
        self.supports_shift()?;
        if self.kv.streams() > 1 {
            return Err(LlamaError::ContextShiftUnsupported {
                arch: self.model.arch_name().to_string(),
                reason: "the cache is split into per-sequence regions (n_streams > 1): \
                         the serving engine shifts each slot's region"
                    .into(),
            });
        }
        Ok(())
    }

    /// Rotates the keys whose positions moved ([`KvCache::pending_shift`]) by their deltas,
    /// before a step reads them; the other keys are not touched.
    fn apply_shift(&mut self) -> Result<()> {
        let Some(deltas) = self.kv.pending_shift() else {
            return Ok(());
        };
        // Only the moved keys: the others (another slot's, the kept prefix) keep their bits,
        // which re-rounding a quantized cache would not.
        let (rows, deltas): (Vec<i32>, Vec<i32>) = deltas
            .iter()
            .enumerate()
            .filter(|(_, &d)| d != 0)
            .map(|(c, &d)| (c as i32, d))
            .unzip();
        if rows.is_empty() {
            self.kv.shift_applied();
            return Ok(());
        }
        let hp = &self.model.hparams;
        let shift = self
            .model
            .arch()
            .key_shift(hp, &self.weights, &self.kv)
            .map_err(|reason| LlamaError::ContextShiftUnsupported {
                arch: self.model.arch_name().to_string(),
                reason,
            })?;
        self.forget_steps();
        self.ctx.rewind(self.base)?;
        let done = (|| {
            let (inp, graph) =
                crate::kv_shift::build_key_shift(&mut self.ctx, &self.kv, &shift, rows.len())?;
            self.ctx.alloc_graph(&graph)?;
            self.ctx.set_i32(inp.rows, &rows)?;
            self.ctx.set_i32(inp.delta, &deltas)?;
            self.exec.compute(&mut self.ctx, &graph)?;
            Ok::<(), LlamaError>(())
        })();
        self.ctx.rewind(self.base)?;
        done?;
        self.kv.shift_applied();
        Ok(())
    }

    /// Turns per-node timing of the executor on or off.
    /// (`GGRS_PROFILE=1` in the environment turns it on at creation and prints the
    /// per-op table when the session is dropped.)
    pub fn set_profiling(&mut self, on: bool) {
        self.exec.set_profiling(on);
        self.op_profile = on.then(OpProfile::default);
    }

    /// Time per op type over every step since profiling was turned on.
    pub fn op_profile(&self) -> Option<&OpProfile> {
        self.op_profile.as_ref()
    }

    /// Per-node times of the last graph computed (when profiling is on).
    pub fn profile(&self) -> &[ggrs_core::NodeTiming] {
        self.exec.profile()
    }

    /// Evaluates `batch`, split into pieces of at most `n_batch` tokens. Afterwards
    /// [`Session::logits`] holds one row of `n_vocab` logits per entry that asked for them,
    /// in batch order. On error, the cells of the failed piece are freed.
    pub fn decode(&mut self, batch: &Batch) -> Result<()> {
        let hp = &self.model.hparams;
        batch.validate(hp.n_vocab)?;
        if !self.params.logits_all && batch.n_outputs() > 1 {
            return Err(LlamaError::InvalidArgument(
                "this session gives logits for one token per step; create it with \
                 logits_all = true to get more"
                    .into(),
            ));
        }
        self.start_step(batch.len())?;
        // Batch entries of each piece evaluated as one graph, and whether its products are
        // per column (see `pieces`).
        let pieces = self.pieces(batch);
        let mut order = Vec::with_capacity(batch.n_outputs());
        for (idx, per_column) in pieces {
            let piece = Batch {
                tokens: idx.iter().map(|&i| batch.tokens[i]).collect(),
                pos: idx.iter().map(|&i| batch.pos[i]).collect(),
                seq: idx.iter().map(|&i| batch.seq[i]).collect(),
                logits: idx.iter().map(|&i| batch.logits[i]).collect(),
            };
            order.extend(idx.iter().copied().filter(|&i| batch.logits[i]));
            let placed = self.kv.place(&piece)?;
            self.move_window_cells(&placed)?;
            self.run_placed(&piece, &placed, per_column)?;
        }
        // Rows in batch order (pieces may have taken the entries in another order).
        if order.windows(2).any(|w| w[0] > w[1]) {
            self.own_logits()?;
            let nv = self.model.hparams.n_vocab;
            let mut rows: Vec<(usize, usize)> =
                order.iter().enumerate().map(|(r, &i)| (i, r)).collect();
            rows.sort_unstable();
            let mut sorted = Vec::with_capacity(self.logits.len());
            for (_, r) in rows {
                sorted.extend_from_slice(&self.logits[r * nv..(r + 1) * nv]);
            }
            self.logits = sorted;
        }
        Ok(())
    }

    /// Evaluates `batch` (at most `n_batch` and [`crate::batch::MAX_SEQ`] tokens) so that
    /// every token's logits have the bits a step of that token alone would give after the
    /// tokens before it (same cells, same padded cell count and flash-attention key split,
    /// one-column products where a weight's products depend on the column count): the
    /// verification step of speculative decoding, whose accepted tokens must compute
    /// exactly as in plain decoding. Logits for every entry that asks (up to
    /// [`SessionParams::n_draft`] + 1 of them without `logits_all`). A model whose
    /// sliding-window layers keep cells of their own (without `swa_full`) or whose
    /// architecture keeps a recurrent state cannot take such steps: see
    /// [`Session::supports_exact_steps`].
    pub fn decode_exact(&mut self, batch: &Batch) -> Result<()> {
        let hp = &self.model.hparams;
        batch.validate(hp.n_vocab)?;
        if let Err(why) = self.supports_exact_steps() {
            return Err(LlamaError::InvalidArgument(why));
        }
        let max_out = match self.params.logits_all {
            true => self.params.n_batch,
            false => self.params.n_draft + 1,
        };
        if batch.n_outputs() > max_out || batch.len() > self.params.n_batch {
            return Err(LlamaError::InvalidArgument(format!(
                "a step of exact columns takes at most {} tokens with {} outputs here \
                 (SessionParams::n_batch, n_draft), not {} with {}",
                self.params.n_batch,
                max_out,
                batch.len(),
                batch.n_outputs()
            )));
        }
        self.start_step(batch.len())?;
        let mut placed = self.kv.place_exact(batch)?;
        self.merge_exact_spans(&mut placed);
        let per_column = !self.columns_independent;
        self.run_placed(batch, &placed, per_column)
    }

    /// Checks that `n` more tokens fit in the cache, rotates moved keys and forgets the last
    /// step's logits.
    fn start_step(&mut self, n: usize) -> Result<()> {
        self.logits_in = None;
        self.apply_shift()?;
        if n > self.kv.size() - self.kv.used() {
            return Err(LlamaError::ContextFull {
                n_tokens: n,
                n_past: self.kv.used(),
                n_ctx: self.kv.size(),
            });
        }
        self.logits.clear();
        self.n_outputs = 0;
        Ok(())
    }

    /// Forgets the kept step graphs (before a rewind to `base`).
    fn forget_steps(&mut self) {
        self.one = None;
        self.one_end = None;
        self.built = None;
        self.logits_in = None;
    }

    /// Copies the logits still in the arena (`logits_in`) into `logits`, before anything
    /// can overwrite or drop them.
    fn own_logits(&mut self) -> Result<()> {
        if let Some(t) = self.logits_in.take() {
            let nv = self.model.hparams.n_vocab;
            let rows = self.ctx.f32_data(t)?;
            self.logits.extend_from_slice(&rows[..self.n_outputs * nv]);
        }
        Ok(())
    }

    /// Runs `piece`, placed at `placed`; on error frees its cells and drops the step's graph.
    fn run_placed(&mut self, piece: &Batch, placed: &Placement, per_column: bool) -> Result<()> {
        if let Err(e) = self.run_piece(piece, placed, per_column) {
            self.kv.unplace(placed);
            self.forget_steps();
            self.ctx.rewind(self.base)?;
            return Err(e);
        }
        Ok(())
    }

    /// Joins the one-token spans of an exact placement where that keeps every token's bits:
    /// with an f16 cache, fewer than [`FA_TILE_Q`] queries per span take flash attention's
    /// one-row kernel, which skips masked keys (so the cell count read does not matter),
    /// unless a one-token step would have split the token's keys ([`FA_SPLIT_MIN_KV`] cells
    /// or more, `attn_kv_splits` ≥ 2). Then a sequence's tokens attend as one span (one
    /// shared cache: no spans), and the step is a few large nodes instead of many small
    /// ones.
    fn merge_exact_spans(&self, placed: &mut Placement) {
        let splits = self.params.attn_kv_splits >= 2;
        // A quantized cache always takes the one-row kernel and never splits keys.
        let types = self.kv.types;
        let f16 = types.k == DType::F16 && types.v == DType::F16;
        let one_row = (types.flash_attn() && !f16)
            || f16
                && placed.spans.len() < FA_TILE_Q
                && placed
                    .spans
                    .iter()
                    .all(|s| !(splits && s.n_kv as usize >= FA_SPLIT_MIN_KV));
        if !one_row {
            return;
        }
        if self.kv.streams() <= 1 {
            placed.spans.clear();
            return;
        }
        let mut merged: Vec<SeqSpan> = Vec::with_capacity(placed.spans.len());
        for sp in &placed.spans {
            match merged.last_mut() {
                Some(m) if m.first_cell == sp.first_cell => {
                    m.n_tokens += sp.n_tokens;
                    m.n_kv = m.n_kv.max(sp.n_kv);
                }
                _ => merged.push(*sp),
            }
        }
        placed.spans = merged;
    }

    /// Whether [`Session::decode_exact`] can run here; if not, why: a trimmed
    /// sliding-window cache, or an architecture with a per-sequence state other than the
    /// causal mask (a recurrent state cannot be rolled back cell by cell).
    pub fn supports_exact_steps(&self) -> std::result::Result<(), String> {
        if !self.kv.window_layers().is_empty() && !self.params.swa_full {
            return Err(format!(
                "exact (speculative) steps need every cache cell in the sliding-window layers \
                 of {} (SessionParams::swa_full, --swa-full)",
                self.model.arch_name()
            ));
        }
        // A recurrent state (kept by the cache's recurrent part) is overwritten by each step:
        // the rejected drafts could not be taken back.
        if self.kv.recurrent.is_some() {
            return Err(format!(
                "{} keeps a recurrent state, which speculative steps cannot roll back",
                self.model.arch_name()
            ));
        }
        Ok(())
    }

    /// How [`Session::decode`] evaluates `batch`: pieces of at most `n_batch` entries, each
    /// one graph. In cache regions with weights whose products depend on the column count
    /// ([`Session::batches_sequences`] false), each sequence's results must not depend on
    /// the others: sequences of one token (decode steps) go together in one graph of
    /// per-column products (one-column arithmetic, each weight read once), and each longer
    /// run of a sequence (a prompt piece) in a graph of its own, as a lone session takes it.
    fn pieces(&self, batch: &Batch) -> Vec<(Vec<usize>, bool)> {
        let nb = self.params.n_batch;
        let chunks = |idx: Vec<usize>, per_column: bool| {
            idx.chunks(nb)
                .map(|c| (c.to_vec(), per_column))
                .collect::<Vec<_>>()
        };
        if self.kv.recurrent.is_some() {
            return self.recurrent_pieces(batch);
        }
        if self.params.n_streams <= 1 || self.columns_independent {
            return chunks((0..batch.len()).collect(), false);
        }
        let mut runs: Vec<Vec<usize>> = Vec::new();
        for i in 0..batch.len() {
            match runs.last_mut() {
                Some(r) if batch.seq[r[0]] == batch.seq[i] => r.push(i),
                _ => runs.push(vec![i]),
            }
        }
        let (singles, longer): (Vec<_>, Vec<_>) = runs.into_iter().partition(|r| r.len() == 1);
        let mut pieces = chunks(singles.into_iter().flatten().collect(), true);
        for r in longer {
            pieces.extend(chunks(r, false));
        }
        pieces
    }

    /// [`Session::pieces`] for a model with recurrent layers, whose graph takes a step's
    /// tokens as runs of equal length, one sequence each ([`StepShape::n_seqs`]): in batch
    /// order, each run of two or more tokens of one sequence alone (in pieces of at most
    /// `n_batch`), and runs of one token together as long as no sequence repeats.
    fn recurrent_pieces(&self, batch: &Batch) -> Vec<(Vec<usize>, bool)> {
        let nb = self.params.n_batch;
        let per_column = self.params.n_streams > 1 && !self.columns_independent;
        let mut pieces: Vec<(Vec<usize>, bool)> = Vec::new();
        let mut singles: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < batch.len() {
            let end = (i..batch.len())
                .find(|&j| batch.seq[j] != batch.seq[i])
                .unwrap_or(batch.len());
            let repeats = singles.iter().any(|&k| batch.seq[k] == batch.seq[i]);
            if !singles.is_empty() && (end - i > 1 || repeats || singles.len() == nb) {
                pieces.push((std::mem::take(&mut singles), per_column));
            }
            if end - i == 1 {
                singles.push(i);
            } else {
                let run: Vec<usize> = (i..end).collect();
                pieces.extend(run.chunks(nb).map(|c| (c.to_vec(), false)));
            }
            i = end;
        }
        if !singles.is_empty() {
            pieces.push((singles, per_column));
        }
        pieces
    }

    /// Copies the keys and values of the window cells a placement moved
    /// ([`crate::kv_cache::WindowPlacement::moves`]) in every sliding-window layer.
    fn move_window_cells(&mut self, placed: &Placement) -> Result<()> {
        let Some(w) = placed.window.as_ref().filter(|w| !w.moves.is_empty()) else {
            return Ok(());
        };
        let hp = &self.model.hparams;
        for &il in self.kv.window_layers() {
            let width = hp.kv_layers[il].width();
            for (t, ty) in [
                (self.kv.k[il], self.kv.types.k),
                (self.kv.v[il], self.kv.types.v),
            ] {
                let row = ty.row_size(width);
                let data = self.ctx.data_mut(t)?;
                for &(from, to) in &w.moves {
                    data.copy_within(from * row..(from + 1) * row, to * row);
                }
            }
        }
        Ok(())
    }

    fn run_piece(&mut self, piece: &Batch, placed: &Placement, per_column: bool) -> Result<()> {
        // An earlier piece's logits, before this piece's graph may take their place.
        self.own_logits()?;
        let n = piece.len();
        let outputs: Vec<i32> = (0..n)
            .filter(|&i| piece.logits[i])
            .map(|i| i as i32)
            .collect();
        if outputs.is_empty() {
            // Still run the step to fill the cache; compute one output and drop it.
        }
        let n_out = outputs.len().max(1);
        let spans = SeqSpans::new(&placed.spans).ok_or_else(|| {
            LlamaError::InvalidArgument(format!(
                "a step holds at most {} sequences",
                crate::batch::MAX_SEQ
            ))
        })?;
        let window = match &placed.window {
            Some(w) => Some(WindowShape {
                n_kv: w.n_kv,
                spans: SeqSpans::new(&w.spans).ok_or_else(|| {
                    LlamaError::InvalidArgument(format!(
                        "a step holds at most {} sequences",
                        crate::batch::MAX_SEQ
                    ))
                })?,
            }),
            None => None,
        };
        let shape = StepShape {
            n_tokens: n,
            n_kv: placed.n_kv,
            n_outputs: n_out,
            attn_kv_splits: self.params.attn_kv_splits,
            spans,
            per_column,
            window,
            n_seqs: 1,
        };
        // Recurrent layers: where each sequence's state stands (checked before anything
        // is computed).
        let runs = match &self.kv.recurrent {
            Some(rs) => Some(rs.begin(piece)?),
            None => None,
        };
        let shape = StepShape {
            n_seqs: runs.as_ref().map_or(1, |r| r.len()),
            ..shape
        };
        // One-token steps keep their graph right after `base`, wider ones after it.
        let single = shape.n_tokens == 1;
        let kept = match single {
            true => &self.one,
            false => &self.built,
        };
        if kept.as_ref().is_none_or(|b| b.shape != shape) {
            let from = match (single, self.one_end) {
                (false, Some(end)) => end,
                _ => {
                    self.forget_steps();
                    self.base
                }
            };
            self.built = None;
            self.ctx.rewind(from)?;
            let (inp, logits, graph) =
                build_step(&mut self.ctx, &self.model, &self.weights, &self.kv, shape)?;
            let step = Some(BuiltStep {
                shape,
                inp,
                logits,
                graph,
            });
            match single {
                true => {
                    self.one = step;
                    self.one_end = Some(self.ctx.checkpoint());
                }
                false => self.built = step,
            }
        }
        let kept = match single {
            true => &self.one,
            false => &self.built,
        };
        let Some(BuiltStep {
            inp, logits, graph, ..
        }) = kept
        else {
            unreachable!("the step's graph was built just above")
        };
        let (inp, logits) = (*inp, *logits);
        let toks: Vec<i32> = piece.tokens.iter().map(|&t| t as i32).collect();
        self.ctx.set_i32(inp.tokens, &toks)?;
        // Positions and mask as the architecture's step state gives them (the batch's
        // positions and a causal mask, unless it says otherwise).
        let values = self.state.inputs(piece, &self.kv, placed.n_kv)?;
        self.ctx.set_i32(inp.pos, &values.pos)?;
        let cells: Vec<i32> = placed.cells.iter().map(|&c| c as i32).collect();
        self.ctx.set_i32(inp.k_rows, &cells)?;
        if let (Some(t), Some(w)) = (inp.k_rows_swa, &placed.window) {
            let cells: Vec<i32> = w.cells.iter().map(|&c| c as i32).collect();
            self.ctx.set_i32(t, &cells)?;
        }
        self.ctx.set_f32(inp.mask, &values.mask)?;
        if let Some(t) = inp.mask_swa {
            let m = values.mask_swa.as_ref().ok_or_else(|| {
                LlamaError::InvalidArgument(
                    "the step graph has a sliding-window mask but the architecture's step \
                     state gave none (StepValues::mask_swa)"
                        .into(),
                )
            })?;
            self.ctx.set_f32(t, m)?;
        }
        if let Some((t, temp)) = inp.q_scale {
            // The batch's own positions (an architecture with more position streams has
            // no temperature).
            self.ctx.set_f32(t, &temp.factors(&piece.pos))?;
        }
        if let Some(ids) = inp.out_ids {
            let ids_v: Vec<i32> = if outputs.is_empty() {
                vec![n as i32 - 1]
            } else {
                outputs.clone()
            };
            self.ctx.set_i32(ids, &ids_v)?;
        }
        if let (Some(rs), Some(runs), Some(t)) = (&self.kv.recurrent, &runs, inp.rs_rows) {
            self.ctx.set_i32(t, &rs.rows(runs))?;
            // A sequence that starts at position 0 starts from an empty state.
            let data = self.ctx.data_mut(rs.states)?;
            for run in runs.iter().filter(|r| r.fresh) {
                for r in 0..rs.n_layers() {
                    let range = rs.row_range(r, run.seq);
                    data[4 * range.start..4 * range.end].fill(0);
                }
            }
        }
        let computed = self.exec.compute(&mut self.ctx, graph);
        if let (Some(rs), Some(runs)) = (&mut self.kv.recurrent, &runs) {
            match computed {
                Ok(()) => rs.commit(runs),
                // The states may be half written: those sequences start over.
                Err(_) => runs.iter().for_each(|r| rs.remove(r.seq, 0)),
            }
        }
        computed?;
        if let Some(p) = &mut self.op_profile {
            p.steps += 1;
            for t in self.exec.profile() {
                let e = p.ops.entry(t.op).or_default();
                e.0 += 1;
                e.1 += t.time;
            }
        }
        if !outputs.is_empty() {
            let nv = self.model.hparams.n_vocab;
            // The first piece's rows stay where they are when they can be read as f32.
            let in_place = self.n_outputs == 0
                && self.logits.is_empty()
                && self
                    .ctx
                    .f32_data(logits)
                    .is_ok_and(|v| v.len() >= outputs.len() * nv);
            match in_place {
                true => self.logits_in = Some(logits),
                false => self.ctx.append_f32(logits, &mut self.logits)?,
            }
            self.n_outputs += outputs.len();
        }
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) a callback shown every matrix product of the model's
    /// graphs after it is computed (see [`ggrs_core::Executor::set_matmul_observer`]); the
    /// importance-matrix collector ([`crate::imatrix::collect`]) uses it.
    pub fn set_matmul_observer(&mut self, f: Option<ggrs_core::MatMulObserver>) {
        self.exec.set_matmul_observer(f);
    }

    /// Evaluates `tokens` of sequence 0 after what the cache holds; logits for the last one
    /// (or every one, with `all_logits`, if the session allows it).
    pub fn eval(&mut self, tokens: &[u32], all_logits: bool) -> Result<()> {
        let start = self.n_past() as i32;
        self.decode(&Batch::from_tokens(tokens, start, 0, all_logits))
    }

    /// Logits of the last step: `n_outputs × n_vocab` values, one row per output.
    pub fn all_logits(&self) -> &[f32] {
        match self.logits_in {
            // Checked readable (dense f32, enough rows) when the step set it; it stays so
            // until the next step or rewind, which clear it first. (Empty otherwise.)
            Some(t) => self
                .ctx
                .f32_data(t)
                .map(|v| &v[..self.n_outputs * self.model.hparams.n_vocab])
                .unwrap_or(&[]),
            None => &self.logits,
        }
    }

    /// Rows in [`Session::all_logits`].
    pub fn n_outputs(&self) -> usize {
        self.n_outputs
    }

    /// Logits of the last output of the last step (`n_vocab` values; empty before any step).
    pub fn logits(&self) -> &[f32] {
        let nv = self.model.hparams.n_vocab;
        if self.n_outputs == 0 {
            return &[];
        }
        &self.all_logits()[(self.n_outputs - 1) * nv..self.n_outputs * nv]
    }
}
