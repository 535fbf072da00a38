//! The serving engine: many requests on one model, batched continuously, with no HTTP in
//! sight (the `ggrs-server` crate puts an OpenAI-compatible API on top; an embedder can
//! use it directly).
//!
//! One engine thread owns the [`Session`] (model, KV cache, worker threads) and a fixed
//! number of slots, each with its own region of the KV cache. Requests wait in a bounded
//! queue until a slot is free. Every step packs one token of every generating slot plus a
//! piece of a waiting prompt into one graph, so a new request starts at the next step; while
//! slots generate, long prompt pieces go in parts of 128 tokens where that keeps the bits, so
//! a long prompt does not stop running streams for long. A slot keeps its tokens' keys and values
//! after a request: the next request that starts with the same tokens (the next turn of a
//! chat) evaluates only what is new.
//!
//! **Batch invariance**: a request's tokens and log-probabilities have the same bits
//! whether it runs alone or beside others, on any thread count, and equal
//! [`Session::generate_tokens`] (`ggrs run`) with the same prompt, sampling parameters and
//! seed. Each slot attends over its own cells exactly as a lone session would
//! ([`SessionParams::n_streams`]). The weights' products keep each column's arithmetic
//! whatever its neighbours: in one graph for the whole step when every weight type allows it
//! ([`ggrs_core::mul_mat_columns_independent`]: q4_0, q8_0, q4_1, q5_0, q5_1 on x86-64);
//! otherwise (f16, the k-quants) the decoding slots' tokens share one graph of per-column
//! products ([`ggrs_core::Context::set_per_column_products`]) and each prompt piece runs
//! in a graph of its own, as a lone session runs it.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ggrs_llama::engine::{Engine, EngineParams, Event, Request};
//! use ggrs_llama::{GenerateParams, Model};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = Arc::new(Model::load("qwen2.5-coder-0.5b-instruct-q4_0.gguf")?);
//! let engine = Engine::start(model.clone(), EngineParams { n_slots: 4, ..Default::default() })?;
//! let prompt = model.encode_prompt("The capital of France is")?;
//! let stream = engine
//!     .handle()
//!     .submit_stream(Request::new(prompt, GenerateParams::default()))?;
//! for event in stream {
//!     match event {
//!         Event::Token(t) => print!("{}", t.text),
//!         Event::Done(done) => eprintln!("\n{:?} after {} tokens", done.stop, done.tokens.len()),
//!         Event::Error(e) => eprintln!("error: {e}"),
//!     }
//! }
//! # Ok(()) }
//! ```

mod scheduler;
mod slot;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use ggrs_core::DType;

use crate::error::{LlamaError, Result};
use crate::generate::{GenerateParams, StopReason, Timings, TokenEvent};
use crate::model::Model;
use crate::session::{Session, SessionParams};

/// How to set up an [`Engine`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineParams {
    /// Slots: requests generating at once (llama-server's `--parallel`).
    pub n_slots: usize,
    /// KV cache cells in all; each slot gets `n_ctx / n_slots`, rounded down to a multiple of
    /// 256 (at least 256). 0: 4096 per slot, at most the model's training context.
    pub n_ctx: usize,
    /// Most prompt tokens evaluated in one step (and the size of the pieces a prompt is
    /// evaluated in, as `ggrs run -b`).
    pub n_batch: usize,
    /// Threads (0: one per physical core).
    pub n_threads: usize,
    /// Requests that may wait for a slot; more are refused ([`SubmitError::QueueFull`]).
    pub queue_capacity: usize,
    /// Element type of the KV cache's keys, and of its values unless `kv_type_v` (see
    /// [`SessionParams::kv_type`]).
    pub kv_type: DType,
    /// Element type of the KV cache's values when it differs from the keys'.
    pub kv_type_v: Option<DType>,
    /// Flash attention's split-key parts (see [`SessionParams::attn_kv_splits`]).
    pub attn_kv_splits: usize,
    /// Keep every cell for the sliding-window layers too (see [`SessionParams::swa_full`]);
    /// false: each slot's sliding-window layers keep only their window.
    pub swa_full: bool,
    /// Speculative decoding with the n-gram drafter ([`crate::speculative`]): each
    /// generating slot's drafted tokens are verified in the step it shares with the other
    /// slots, and every request's output stays that of plain decoding. `None`: off. A
    /// request can turn it off for itself ([`Request::speculative`]). Needs `swa_full` for
    /// models with sliding-window layers.
    pub spec: Option<crate::speculative::drafting::SpecParams>,
    /// With [`EngineParams::spec`]: speculate only where it pays, and run plain decoding
    /// elsewhere: speculation stays on when a step's many-column products read each weight
    /// once for all its columns ([`Session::batches_sequences`]: q4_0, q8_0, q4_1, q5_0 and
    /// q5_1 weights on x86-64, where a verified column costs about half a one-token step)
    /// and the model takes exact steps with these settings ([`Session::supports_exact_steps`],
    /// e.g. no trimmed sliding-window cache); otherwise a verified column would cost about a
    /// step of its own, and the engine starts without it ([`EngineHandle::params`] then shows
    /// `spec: None`). Where it stays on, each slot still drafts only while its drafts are
    /// accepted often enough to pay ([`crate::speculative::DraftControl`]). False: speculate
    /// wherever `spec` is set.
    pub spec_auto: bool,
    /// Context shift (llama-server's `--context-shift`; default off): a request that
    /// generates up to the end of its slot's context keeps its first tokens
    /// ([`Request::n_keep`]), drops half of the rest (or [`Request::n_discard`]) and goes
    /// on, the kept keys re-rotated to their new positions ([`crate::kv_shift`]); only that
    /// slot's region of the cache changes. Off: generation stops when the slot is full.
    /// Needs a model whose keys can be re-rotated ([`Session::supports_shift`]).
    pub context_shift: bool,
    /// The `n_keep` of a request that gives none (llama-server's `--keep`; default 0).
    pub n_keep: i32,
}

impl Default for EngineParams {
    fn default() -> Self {
        let s = SessionParams::default();
        EngineParams {
            n_slots: 4,
            n_ctx: 0,
            n_batch: s.n_batch,
            n_threads: 0,
            queue_capacity: 64,
            kv_type: s.kv_type,
            kv_type_v: s.kv_type_v,
            attn_kv_splits: s.attn_kv_splits,
            swa_full: s.swa_full,
            spec: None,
            spec_auto: false,
            context_shift: false,
            n_keep: 0,
        }
    }
}

/// One request: prompt tokens and how to generate after them.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Prompt token ids (at least one).
    pub prompt: Vec<u32>,
    /// Token limit, sampling, stop strings, log-probabilities.
    pub params: GenerateParams,
    /// Reuse the keys and values a slot holds for a prefix of the prompt (llama-server's
    /// `cache_prompt`; default true): only the rest is evaluated. Like any other way of
    /// cutting a prompt into pieces, this can change the last bits of what follows: the
    /// attention kernels (llama.cpp's, reproduced) take other arithmetic for fewer than 64
    /// queries, as do the f16 and k-quant products for fewer than a few columns. Results
    /// equal a lone session's where both sides take the same kernels (a short prompt and
    /// q4_0, q8_0, q4_1, q5_0 or q5_1 weights); turn it off to replay a lone session (`ggrs
    /// run`) exactly.
    pub cache_prompt: bool,
    /// Draft and verify tokens when the engine speculates ([`EngineParams::spec`]; default
    /// true). The output is the same either way; false only saves the verification work
    /// when drafts are unlikely to be accepted.
    pub speculative: bool,
    /// With [`EngineParams::context_shift`] (and for [`Request::truncate`]): the prompt
    /// tokens a context shift keeps, BOS not counted (llama-server's `n_keep`: negative,
    /// the whole prompt; BOS is kept too when the vocabulary adds one; at most the slot's
    /// context − 4). `None`: [`EngineParams::n_keep`].
    pub n_keep: Option<i32>,
    /// Tokens a context shift drops after the kept ones (llama-server's `n_discard`; 0:
    /// half of them).
    pub n_discard: usize,
    /// A prompt that does not fit in a slot's context is cut instead of refused, as
    /// llama-server cut prompts while it could ([`crate::kv_shift::truncated_prompt`]):
    /// the first [`Request::n_keep`] tokens stay, whole blocks of half the remaining
    /// context are dropped after them. Default false: [`SubmitError::PromptTooLong`].
    pub truncate: bool,
}

impl Request {
    /// A request for `prompt` with `params` (prompt cache on, speculative where the engine
    /// is, the engine's `n_keep`, no truncation).
    pub fn new(prompt: Vec<u32>, params: GenerateParams) -> Request {
        Request {
            prompt,
            params,
            cache_prompt: true,
            speculative: true,
            n_keep: None,
            n_discard: 0,
            truncate: false,
        }
    }
}

/// What a request's receiver hears, in order: tokens, then `Done` or `Error`.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A generated token. Its `text` may be empty (an incomplete character, or the start of
    /// a stop string, held back); the text of the tokens, concatenated, is the completion.
    Token(TokenEvent),
    /// The request ended normally.
    Done(Completion),
    /// The request failed (the engine goes on serving the others).
    Error(String),
}

/// The result of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// Generated token ids (an end-of-generation token included when it ended the text).
    pub tokens: Vec<u32>,
    /// Generated text (a stop string and what follows it removed).
    pub text: String,
    /// The end of `text` that no [`Event::Token`] carried (text held back while it could
    /// have been the start of a stop string): a streaming client shows it now.
    pub tail: String,
    /// Why it ended ([`StopReason::Callback`]: cancelled).
    pub stop: StopReason,
    /// Per generated token: its log-probability and the most likely alternatives.
    pub logprobs: Vec<(f32, Vec<(u32, f32)>)>,
    /// Prompt tokens (after truncation, [`Request::truncate`]).
    pub prompt_tokens: usize,
    /// The context was exceeded (llama-server's `truncated`): the prompt was cut, a context
    /// shift dropped tokens, or generation stopped at the end of the slot's context.
    pub truncated: bool,
    /// Context shifts made for this request.
    pub shifts: usize,
    /// Prompt tokens whose keys and values came from the slot's cache (not evaluated).
    pub cached_tokens: usize,
    /// Speeds: prompt time is from the request's start in a slot to its first token.
    pub timings: Timings,
    /// Seconds the request waited for a slot.
    pub queue_secs: f64,
    /// The slot that served it.
    pub slot: usize,
}

/// Why a request was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The waiting queue is full; try again later.
    #[error("the server is busy: {waiting} requests are waiting (the queue holds {capacity})")]
    QueueFull {
        /// Requests waiting.
        waiting: usize,
        /// Queue capacity.
        capacity: usize,
    },
    /// The prompt does not fit in a slot's context.
    #[error(
        "the prompt has {n_prompt} tokens but a slot's context holds {n_ctx_slot} (prompt and \
         generated tokens together); shorten the prompt, ask for truncation (\"truncate\": \
         true) or start the server with a larger context per slot"
    )]
    PromptTooLong {
        /// Prompt tokens.
        n_prompt: usize,
        /// Cells per slot.
        n_ctx_slot: usize,
    },
    /// A parameter is out of range (the message says which).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The engine has stopped.
    #[error("the engine has stopped")]
    Stopped,
}

/// Receives a request's events on the engine thread. Returns false when nobody listens any
/// more (a closed connection): the engine then cancels the request at once. It must not
/// block.
pub type EventSink = Box<dyn FnMut(Event) -> bool + Send>;

/// Counters since the engine started, and the present load (see [`EngineHandle::metrics`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Metrics {
    /// Slots.
    pub n_slots: usize,
    /// Slots serving a request now.
    pub busy_slots: usize,
    /// Requests waiting for a slot now.
    pub queued: usize,
    /// Requests finished normally.
    pub requests_done: u64,
    /// Requests cancelled (receiver gone or [`Ticket::cancel`]).
    pub requests_cancelled: u64,
    /// Requests that failed.
    pub requests_failed: u64,
    /// Prompt tokens evaluated (cached ones not counted).
    pub prompt_tokens: u64,
    /// Prompt tokens served from slot caches.
    pub cached_tokens: u64,
    /// Requests that reused a slot's cached prefix.
    pub cache_hits: u64,
    /// Requests to a model with recurrent layers whose slot's state stood past the shared
    /// prefix (it cannot be rewound), so that only a recurrent-state checkpoint could serve
    /// the prefix.
    pub checkpoint_lookups: u64,
    /// Those of [`Metrics::checkpoint_lookups`] that resumed from a checkpoint.
    pub checkpoint_hits: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Tokens drafted and verified by speculative steps.
    pub draft_tokens: u64,
    /// Drafted tokens accepted.
    pub draft_accepted: u64,
    /// Steps (graphs) evaluated.
    pub steps: u64,
    /// Seconds spent evaluating steps.
    pub busy_secs: f64,
    /// KV cache cells holding tokens (busy and idle slots' caches).
    pub kv_used: usize,
}

/// One slot as [`EngineHandle::slots`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    /// Slot index.
    pub id: usize,
    /// Serving a request now.
    pub busy: bool,
    /// Tokens whose keys and values the slot holds (a cache for the next request).
    pub n_cached: usize,
    /// Cells of the slot's region.
    pub n_ctx: usize,
    /// Tokens generated so far for the request it serves.
    pub n_generated: usize,
    /// The id of the request it serves ([`Ticket::id`]).
    pub request: Option<u64>,
}

/// Commands to the engine thread.
enum Command {
    Submit(Box<Pending>),
    Shutdown,
}

/// A request waiting for a slot.
struct Pending {
    id: u64,
    request: Request,
    sink: EventSink,
    cancel: Arc<AtomicBool>,
    queued_at: std::time::Instant,
    /// The prompt was cut to fit ([`Request::truncate`]).
    cut: bool,
}

/// State shared by the handles and the engine thread.
struct Shared {
    queued: AtomicUsize,
    next_id: AtomicU64,
    stopped: AtomicBool,
    metrics: Mutex<Metrics>,
    slots: Mutex<Vec<SlotInfo>>,
}

/// A running engine; dropping it stops the thread (requests in flight end with an error).
pub struct Engine {
    handle: EngineHandle,
    thread: Option<JoinHandle<()>>,
}

/// A cheap, clonable way to talk to an [`Engine`] from any thread.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    model: Arc<Model>,
    params: EngineParams,
    n_ctx_slot: usize,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineHandle")
            .field("params", &self.params)
            .field("n_ctx_slot", &self.n_ctx_slot)
            .finish()
    }
}

/// A submitted request: its id, and a way to cancel it.
#[derive(Debug, Clone)]
pub struct Ticket {
    /// The request's id (unique in this engine).
    pub id: u64,
    cancel: Arc<AtomicBool>,
}

impl Ticket {
    /// Cancels the request: it ends (with [`StopReason::Callback`]) at the next step and its
    /// slot is free.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// A request's events as a blocking iterator (see [`EngineHandle::submit_stream`]);
/// dropping it cancels the request.
pub struct RequestStream {
    rx: mpsc::Receiver<Event>,
    ticket: Ticket,
    done: bool,
}

impl RequestStream {
    /// The request's ticket.
    pub fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    /// Waits for the end and returns the completion (tokens' events are dropped).
    pub fn wait(mut self) -> std::result::Result<Completion, String> {
        for e in self.by_ref() {
            match e {
                Event::Done(c) => return Ok(c),
                Event::Error(e) => return Err(e),
                Event::Token(_) => {}
            }
        }
        Err("the engine stopped before the request ended".into())
    }
}

impl Iterator for RequestStream {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        let e = self.rx.recv().ok()?;
        if !matches!(e, Event::Token(_)) {
            self.done = true;
        }
        Some(e)
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        if !self.done {
            self.ticket.cancel();
        }
    }
}

/// Cells per slot for `params` on a model trained for `n_ctx_train` tokens.
fn slot_cells(params: &EngineParams, n_ctx_train: usize) -> usize {
    const PAD: usize = 256;
    let per = if params.n_ctx == 0 {
        4096.min(n_ctx_train.max(PAD))
    } else {
        params.n_ctx / params.n_slots
    };
    // Multiples of 256: a slot then attends over exactly the cells a lone session of any
    // size would (llama.cpp's padding), which batch invariance needs.
    (per / PAD * PAD).max(PAD)
}

impl Engine {
    /// Creates the session (`n_slots` regions of the KV cache) and starts the engine
    /// thread.
    pub fn start(model: Arc<Model>, params: EngineParams) -> Result<Engine> {
        Engine::start_with_drafter(
            model,
            params,
            Box::new(crate::speculative::drafting::NgramDrafter::default()),
        )
    }

    /// As [`Engine::start`], with `drafter` proposing every slot's drafts when
    /// [`EngineParams::spec`] is set (it sees each slot's prompt and output in turn).
    pub fn start_with_drafter(
        model: Arc<Model>,
        params: EngineParams,
        drafter: Box<dyn crate::speculative::drafting::Drafter>,
    ) -> Result<Engine> {
        if params.n_slots == 0 || params.n_slots > crate::batch::MAX_SEQ {
            return Err(LlamaError::InvalidArgument(format!(
                "the number of slots must be between 1 and {}, not {}",
                crate::batch::MAX_SEQ,
                params.n_slots
            )));
        }
        if params.n_batch == 0 || params.queue_capacity == 0 {
            return Err(LlamaError::InvalidArgument(
                "n_batch and queue_capacity must be at least 1".into(),
            ));
        }
        let n_ctx_slot = slot_cells(&params, model.hparams.n_ctx_train);
        let session = Session::new(
            model.clone(),
            SessionParams {
                n_ctx: n_ctx_slot * params.n_slots,
                // Decoding slots' tokens come on top of a prompt piece.
                n_batch: params.n_batch.min(n_ctx_slot) + params.n_slots,
                n_threads: params.n_threads,
                kv_type: params.kv_type,
                kv_type_v: params.kv_type_v,
                logits_all: true,
                attn_kv_splits: params.attn_kv_splits,
                n_streams: params.n_slots,
                swa_full: params.swa_full,
                n_draft: params.spec.map_or(0, |s| s.draft_max),
            },
        )?;
        if params.context_shift {
            session.supports_shift()?;
        }
        let mut params = params;
        if params.spec_auto
            && !(session.batches_sequences() && session.supports_exact_steps().is_ok())
        {
            params.spec = None;
        }
        if params.spec.is_some() {
            if let Err(why) = session.supports_exact_steps() {
                return Err(LlamaError::InvalidArgument(format!(
                    "speculative decoding: {why}"
                )));
            }
        }
        let shared = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            stopped: AtomicBool::new(false),
            metrics: Mutex::new(Metrics {
                n_slots: params.n_slots,
                ..Metrics::default()
            }),
            slots: Mutex::new(Vec::new()),
        });
        let (tx, rx) = mpsc::channel();
        let handle = EngineHandle {
            tx,
            shared: shared.clone(),
            model,
            params,
            n_ctx_slot,
        };
        let mut sched = scheduler::Scheduler::new(session, params, n_ctx_slot, shared, drafter);
        let thread = std::thread::Builder::new()
            .name("ggrs-engine".into())
            .spawn(move || sched.run(rx))
            .map_err(|e| LlamaError::InvalidArgument(format!("cannot start a thread: {e}")))?;
        Ok(Engine {
            handle,
            thread: Some(thread),
        })
    }

    /// A handle to submit requests from other threads.
    pub fn handle(&self) -> EngineHandle {
        self.handle.clone()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.handle.tx.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl EngineHandle {
    /// The model served.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The parameters the engine runs with.
    pub fn params(&self) -> &EngineParams {
        &self.params
    }

    /// Cells of each slot's context (prompt and generated tokens of one request together).
    pub fn n_ctx_slot(&self) -> usize {
        self.n_ctx_slot
    }

    /// The cells a context shift (or a truncation) of `r` keeps, by llama-server's rule:
    /// [`Request::n_keep`] (negative: the whole prompt), plus BOS when the vocabulary adds
    /// one, at most the slot's context − 4.
    pub fn n_keep(&self, r: &Request) -> usize {
        let add_bos = self.model.tokenizer().vocab().add_bos;
        crate::kv_shift::kept(
            r.n_keep.unwrap_or(self.params.n_keep),
            r.prompt.len(),
            add_bos,
            self.n_ctx_slot,
        )
    }

    /// Queues `request`; `sink` receives its events on the engine thread. Fails at once
    /// when the queue is full, the prompt cannot fit in a slot or a parameter is invalid.
    pub fn submit(
        &self,
        request: Request,
        sink: EventSink,
    ) -> std::result::Result<Ticket, SubmitError> {
        if self.shared.stopped.load(Ordering::Relaxed) {
            return Err(SubmitError::Stopped);
        }
        let mut request = request;
        let cut = self.check(&mut request)?;
        let waiting = self.shared.queued.fetch_add(1, Ordering::AcqRel);
        if waiting >= self.params.queue_capacity {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::QueueFull {
                waiting,
                capacity: self.params.queue_capacity,
            });
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let cancel = Arc::new(AtomicBool::new(false));
        let pending = Pending {
            id,
            request,
            sink,
            cancel: cancel.clone(),
            queued_at: std::time::Instant::now(),
            cut,
        };
        if self.tx.send(Command::Submit(Box::new(pending))).is_err() {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::Stopped);
        }
        Ok(Ticket { id, cancel })
    }

    /// As [`EngineHandle::submit`], with the events delivered to a blocking iterator.
    pub fn submit_stream(
        &self,
        request: Request,
    ) -> std::result::Result<RequestStream, SubmitError> {
        let (tx, rx) = mpsc::channel();
        let ticket = self.submit(request, Box::new(move |e| tx.send(e).is_ok()))?;
        Ok(RequestStream {
            rx,
            ticket,
            done: false,
        })
    }

    /// Counters and load now.
    pub fn metrics(&self) -> Metrics {
        let mut m = *self
            .shared
            .metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        m.queued = self.shared.queued.load(Ordering::Relaxed);
        m
    }

    /// The slots now.
    pub fn slots(&self) -> Vec<SlotInfo> {
        self.shared
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Checks `r`, and cuts its prompt when it asks for truncation and does not fit;
    /// returns whether it was cut.
    fn check(&self, r: &mut Request) -> std::result::Result<bool, SubmitError> {
        if r.prompt.is_empty() {
            return Err(SubmitError::Invalid("the prompt is empty".into()));
        }
        let n_vocab = self.model.hparams.n_vocab;
        if let Some(&t) = r.prompt.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(SubmitError::Invalid(format!(
                "token id {t} is out of range (the vocabulary has {n_vocab} tokens)"
            )));
        }
        r.params.sampling.validate().map_err(SubmitError::Invalid)?;
        let cut = r.truncate && r.prompt.len() >= self.n_ctx_slot;
        if cut {
            let keep = self.n_keep(r);
            r.prompt = crate::kv_shift::truncated_prompt(&r.prompt, keep, self.n_ctx_slot);
        }
        if r.prompt.len() > self.n_ctx_slot {
            return Err(SubmitError::PromptTooLong {
                n_prompt: r.prompt.len(),
                n_ctx_slot: self.n_ctx_slot,
            });
        }
        Ok(cut)
    }
}
