//! The engine thread: admits requests into slots, packs each step's batch, samples and
//! reports.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use crate::batch::{Batch, SeqId};
use crate::generate::StopReason;
use crate::session::Session;

use super::slot::{Job, Outcome, Slot};
use super::{Command, EngineParams, Pending, Shared, SlotInfo};

/// Prompt tokens per step while other slots are generating, when a piece may be cut (see
/// `Scheduler::piece`).
const PROMPT_CHUNK: usize = 128;

/// Fewest queries for which flash attention takes its tiled kernel
/// (`ggrs_core::kernels::attn::TILE_Q`, llama.cpp's): parts of a piece keep at least this many.
const TILED_MIN: usize = 64;

/// The engine thread's state.
pub(super) struct Scheduler {
    session: Session,
    params: EngineParams,
    n_ctx_slot: usize,
    shared: Arc<Shared>,
    slots: Vec<Slot>,
    queue: VecDeque<Pending>,
    /// Admission order of the busy slots (prompt pieces are served first come, first
    /// served).
    order: VecDeque<usize>,
    /// Drafts every slot's tokens when the engine speculates.
    drafter: Box<dyn crate::speculative::drafting::Drafter>,
}

/// Why a step's entry is in the batch.
#[derive(Clone, Copy)]
enum Entry {
    /// A slot's sampled token.
    Decode(usize),
    /// A piece of a slot's prompt, `n` tokens, and whether it ends the prompt.
    Prompt { slot: usize, n: usize, last: bool },
}

impl Scheduler {
    pub fn new(
        session: Session,
        params: EngineParams,
        n_ctx_slot: usize,
        shared: Arc<Shared>,
        drafter: Box<dyn crate::speculative::drafting::Drafter>,
    ) -> Scheduler {
        let slots = (0..params.n_slots)
            .map(|id| Slot {
                checkpoints: Default::default(),
                control: Default::default(),
                id,
                cached: Vec::new(),
                job: None,
            })
            .collect();
        let s = Scheduler {
            session,
            params,
            n_ctx_slot,
            shared,
            slots,
            queue: VecDeque::new(),
            order: VecDeque::new(),
            drafter,
        };
        s.publish();
        s
    }

    /// Serves until shutdown (or until every handle is gone).
    pub fn run(&mut self, rx: mpsc::Receiver<Command>) {
        loop {
            // Block while there is nothing to do; else take what has arrived.
            let idle = self.queue.is_empty() && self.slots.iter().all(|s| s.job.is_none());
            if idle {
                match rx.recv() {
                    Ok(c) => {
                        if !self.command(c) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            let mut open = true;
            loop {
                match rx.try_recv() {
                    Ok(c) => {
                        if !self.command(c) {
                            open = false;
                            break;
                        }
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            if !open {
                break;
            }
            self.drop_cancelled();
            self.admit();
            self.step();
            self.publish();
        }
        self.shared.stopped.store(true, Ordering::Relaxed);
        for p in self.queue.drain(..) {
            let mut p = p;
            let _ = (p.sink)(super::Event::Error("the engine stopped".into()));
        }
        for s in &mut self.slots {
            if let Some(j) = s.job.take() {
                j.fail("the engine stopped".into());
            }
        }
    }

    /// Handles a command; false: stop.
    fn command(&mut self, c: Command) -> bool {
        match c {
            Command::Submit(p) => {
                self.queue.push_back(*p);
                true
            }
            Command::Shutdown => false,
        }
    }

    /// Ends cancelled requests, queued or running.
    fn drop_cancelled(&mut self) {
        let before = self.queue.len();
        self.queue.retain(|p| !p.cancel.load(Ordering::Relaxed));
        let gone = before - self.queue.len();
        if gone > 0 {
            self.shared.queued.fetch_sub(gone, Ordering::AcqRel);
            self.metrics(|m| m.requests_cancelled += gone as u64);
        }
        for i in 0..self.slots.len() {
            let cancelled = self.slots[i]
                .job
                .as_ref()
                .is_some_and(|j| j.pending.cancel.load(Ordering::Relaxed));
            if cancelled {
                self.end(i, StopReason::Callback);
            }
        }
    }

    /// Moves queued requests into free slots: the free slot whose cache shares the longest
    /// prefix with the prompt (the rest of its cache is dropped).
    fn admit(&mut self) {
        while !self.queue.is_empty() {
            let prompt = &self.queue[0].request.prompt;
            let best = self
                .slots
                .iter()
                .filter(|s| s.job.is_none())
                .map(|s| {
                    (
                        s.common_prefix(prompt),
                        std::cmp::Reverse(s.cached.len()),
                        s.id,
                    )
                })
                .max();
            let Some((shared, _, i)) = best else { break };
            let pending = self
                .queue
                .pop_front()
                .expect("the queue is not empty (loop test)");
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            // At least one prompt token is evaluated: its logits give the first token.
            let keep = match pending.request.cache_prompt {
                true => shared.min(pending.request.prompt.len() - 1),
                false => 0,
            };
            // Sliding-window layers may have dropped the window behind the prefix; a
            // recurrent state stands where the slot's last request left it, or goes back to
            // a checkpoint within the prefix.
            let direct = self.session.reusable_prefix(i as SeqId, keep);
            let slot = &mut self.slots[i];
            let reuse = match self.session.resume_at(i as SeqId, keep, &slot.checkpoints) {
                Ok(n) => n,
                Err(_) => {
                    self.session.remove(i as SeqId, 0);
                    0
                }
            };
            slot.cached.truncate(reuse);
            slot.checkpoints.truncate(reuse);
            let recurrent = self.session.kv_cache().recurrent.is_some();
            self.metrics(|m| {
                if reuse > 0 {
                    m.cache_hits += 1;
                    m.cached_tokens += reuse as u64;
                }
                if recurrent && direct < keep {
                    m.checkpoint_lookups += 1;
                    m.checkpoint_hits += u64::from(reuse > direct);
                }
            });
            let tok = self.session.model().tokenizer();
            let control = self.slots[i].control.for_next_request();
            self.slots[i].job = Some(Job::new(pending, reuse, tok, control));
            self.order.push_back(i);
        }
    }

    /// Packs the batch (every generating slot's token, then prompt pieces first come first
    /// served within `n_batch` tokens), evaluates it and samples. When a generating slot
    /// has drafted tokens, the generating slots take an exact step of their own first
    /// ([`Scheduler::speculative_step`]), then the prompt pieces one.
    fn step(&mut self) {
        if self.params.context_shift {
            self.shift_full_slots();
        }
        let drafts = self.drafts();
        let generating = drafts.iter().any(|d| d.is_some());
        if drafts.iter().flatten().any(|d| !d.is_empty()) {
            self.speculative_step(&drafts);
            self.prompt_step(false, generating);
        } else {
            self.prompt_step(true, generating);
        }
    }

    /// The context shift of every generating slot whose next token would take its region's
    /// last cell, as llama-server shifts a slot (see [`EngineParams::context_shift`]): keeps
    /// the request's first cells, drops the next ones and moves the rest down. A slot that
    /// has nothing left to drop ends ([`StopReason::ContextFull`]).
    fn shift_full_slots(&mut self) {
        let n_ctx = self.n_ctx_slot;
        let add_bos = self.session.model().tokenizer().vocab().add_bos;
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            let Some(j) = s.job.as_ref().filter(|j| j.next.is_some()) else {
                continue;
            };
            if s.cached.len() + 1 < n_ctx {
                continue;
            }
            let r = &j.pending.request;
            let keep = crate::kv_shift::kept(
                r.n_keep.unwrap_or(self.params.n_keep),
                r.prompt.len(),
                add_bos,
                n_ctx,
            );
            let n_discard = crate::kv_shift::discarded_by_server(s.cached.len(), keep, r.n_discard);
            if n_discard == 0 {
                self.end(i, StopReason::ContextFull);
                continue;
            }
            if let Err(e) = self.session.shift_out(i as SeqId, keep, n_discard) {
                self.fail_slots(&[i], &e.to_string());
                continue;
            }
            let s = &mut self.slots[i];
            s.cached.drain(keep..keep + n_discard);
            let j = s
                .job
                .as_mut()
                .expect("a shifted slot has a job (checked above)");
            j.shifts += 1;
            j.kept = keep;
        }
    }

    /// After slot `i`'s job `j`: keeps its draft control's measurements for the slot's next
    /// request, and, if a context shift moved its cells, forgets all but the kept ones
    /// (their keys were computed next to tokens that are gone, so they serve no later
    /// prompt).
    fn after_job(&mut self, i: usize, j: &Job) {
        self.slots[i].control = j.control;
        if j.shifts > 0 {
            self.slots[i].cached.truncate(j.kept);
            self.session.remove(i as SeqId, j.kept as i32);
        }
    }

    /// Cells in use at which a slot's generation stops: one below its context, or never
    /// with the context shift (the shift makes room first). As llama-server does
    /// (`prompt.n_tokens() + 1 >= n_ctx` after a token is sampled), the token sampled when
    /// the slot holds `n_ctx − 1` cells is the last one, and is not evaluated: prompt and
    /// output together hold `n_ctx` tokens, the point at which the shift would have run.
    fn stop_at(&self) -> usize {
        match self.params.context_shift {
            true => usize::MAX,
            false => self.n_ctx_slot.saturating_sub(1),
        }
    }

    /// Per slot: `None` when it is not generating; else the tokens drafted to follow its
    /// next token (none when the engine or the request does not speculate), within the
    /// slot's room, its token limit and [`crate::batch::MAX_SEQ`] tokens in all.
    fn drafts(&mut self) -> Vec<Option<Vec<u32>>> {
        let generating = self
            .slots
            .iter()
            .filter(|s| s.job.as_ref().is_some_and(|j| j.next.is_some()))
            .count();
        let mut budget = crate::batch::MAX_SEQ
            .min(self.session.params().n_batch)
            .saturating_sub(generating);
        let spec = self.params.spec;
        // With the context shift, the last cell stays free (the shift comes before it), so
        // that drafting does not move the shifts.
        let n_ctx = self.n_ctx_slot - usize::from(self.params.context_shift);
        let drafter = &mut self.drafter;
        self.slots
            .iter()
            .map(|s| {
                let j = s.job.as_ref()?;
                j.next?;
                let Some(sp) = spec.filter(|_| j.pending.request.speculative) else {
                    return Some(Vec::new());
                };
                let room = n_ctx.saturating_sub(s.cached.len() + 1);
                let left = j
                    .pending
                    .request
                    .params
                    .max_tokens
                    .saturating_sub(j.n_generated() + 1);
                let mut cap = sp.draft_max.min(room).min(left).min(budget);
                if sp.adaptive {
                    cap = j.control.limit(cap);
                }
                if cap < sp.draft_min.max(1) {
                    return Some(Vec::new());
                }
                // (The picker's tokens end with `next`.)
                let history = j.history();
                // A drafter that fails only costs the speculation.
                let mut d = drafter.draft(&history, cap).unwrap_or_default();
                d.truncate(cap);
                if d.len() < sp.draft_min {
                    d.clear();
                }
                budget -= d.len();
                Some(d)
            })
            .collect()
    }

    /// Evaluates every generating slot's next token and its drafts as exact columns
    /// ([`Session::decode_exact`]), then verifies each slot's rows on the compute threads
    /// and drops the cells of the rejected drafts.
    fn speculative_step(&mut self, drafts: &[Option<Vec<u32>>]) {
        let mut batch = Batch::new();
        // (slot, drafts, first row)
        let mut entries: Vec<(usize, &[u32], usize)> = Vec::new();
        for (s, d) in self.slots.iter().zip(drafts) {
            let (Some(d), Some(next)) = (d, s.job.as_ref().and_then(|j| j.next)) else {
                continue;
            };
            let start = s.cached.len() as i32;
            entries.push((s.id, d, batch.len()));
            batch.push(next, start, s.id as SeqId, true);
            for (k, &t) in d.iter().enumerate() {
                batch.push(t, start + 1 + k as i32, s.id as SeqId, true);
            }
        }
        let t0 = Instant::now();
        let result = self.session.decode_exact(&batch);
        let secs = t0.elapsed().as_secs_f64();
        if let Err(e) = result {
            let failed: Vec<usize> = entries.iter().map(|e| e.0).collect();
            self.fail_slots(&failed, &e.to_string());
            return;
        }
        let model = self.session.model().clone();
        let (tok, conventions) = (model.tokenizer(), model.text());
        let nv = model.hparams.n_vocab;
        let n_ctx = self.stop_at();
        let logits = self.session.all_logits();
        // (slot, its drafts, its rows, (kept drafts, outcome) once verified)
        type Item<'a> = (
            &'a mut Slot,
            &'a [u32],
            &'a [f32],
            Option<(usize, crate::error::Result<Outcome>)>,
        );
        let mut work: Vec<Item> = Vec::with_capacity(entries.len());
        let mut it = entries.iter().peekable();
        for s in self.slots.iter_mut() {
            if let Some(&&(_, d, r)) = it.peek().filter(|e| e.0 == s.id) {
                it.next();
                work.push((s, d, &logits[r * nv..(r + 1 + d.len()) * nv], None));
            }
        }
        self.session.for_each_mut(&mut work, |(s, d, rows, out)| {
            let n_cached = s.cached.len();
            let j = s.job.as_mut().expect("a verified slot has a job");
            let next = j.next.take().expect("a verified slot has a token");
            let verified = j.verify(rows, nv, d, tok, conventions, n_cached, n_ctx);
            // The evaluated token and the kept drafts are in the cache now.
            s.cached.push(next);
            s.cached.extend_from_slice(&d[..verified.0]);
            j.drafted += d.len();
            j.accepted += verified.0;
            j.control.spec_step(d.len(), verified.0, secs);
            *out = Some(verified);
        });
        let results: Vec<(usize, usize, usize, crate::error::Result<Outcome>)> = work
            .into_iter()
            .map(|(s, d, _, out)| {
                let (kept, outcome) = out.expect("for_each_mut visits every item");
                (s.id, d.len(), kept, outcome)
            })
            .collect();
        let (mut n_gen, mut drafted, mut accepted) = (0u64, 0u64, 0u64);
        for (i, n_drafts, kept, outcome) in results {
            if kept < n_drafts {
                // The rejected drafts' cells, as if they never ran.
                let from = self.slots[i].cached.len() as i32;
                self.session.remove(i as SeqId, from);
            }
            n_gen += 1 + kept as u64;
            drafted += n_drafts as u64;
            accepted += kept as u64;
            self.conclude(i, outcome);
        }
        self.metrics(|m| {
            m.steps += 1;
            m.busy_secs += secs;
            m.generated_tokens += n_gen;
            m.draft_tokens += drafted;
            m.draft_accepted += accepted;
        });
    }

    /// Ends the jobs of `slots` with the error `msg` and forgets their caches.
    fn fail_slots(&mut self, slots: &[usize], msg: &str) {
        for &i in slots {
            self.session.remove(i as SeqId, 0);
            self.slots[i].cached.clear();
            if let Some(j) = self.slots[i].job.take() {
                j.fail(msg.to_string());
                self.order.retain(|&o| o != i);
                self.metrics(|m| m.requests_failed += 1);
            }
        }
    }

    /// Acts on a slot's sampling outcome: goes on, ends the job, or fails it.
    fn conclude(&mut self, i: usize, outcome: crate::error::Result<Outcome>) {
        match outcome {
            Ok(Outcome::Continue) => {}
            Ok(Outcome::Finished(stop)) => self.end(i, stop),
            Err(e) => {
                if let Some(j) = self.slots[i].job.take() {
                    self.order.retain(|&o| o != i);
                    self.after_job(i, &j);
                    self.metrics(|m| m.requests_failed += 1);
                    j.fail(e.to_string());
                }
            }
        }
    }

    /// The step of [`Scheduler::step`] without drafts: with `decode`, every generating
    /// slot's token, then prompt pieces (cut smaller when `generating` slots wait on them).
    fn prompt_step(&mut self, decode: bool, generating: bool) {
        let mut batch = Batch::new();
        let mut entries = Vec::new();
        for s in self.slots.iter().filter(|_| decode) {
            if let Some(next) = s.job.as_ref().and_then(|j| j.next) {
                batch.push(next, s.cached.len() as i32, s.id as SeqId, true);
                entries.push(Entry::Decode(s.id));
            }
        }
        let mut budget = self.params.n_batch;
        for &i in &self.order {
            let s = &self.slots[i];
            let Some(j) = &s.job else { continue };
            let left = j.prompt_left();
            if left.is_empty() {
                continue;
            }
            let n = self.piece(j, generating);
            if n > budget {
                break;
            }
            budget -= n;
            let last = n == left.len();
            let start = s.cached.len();
            for (k, &t) in left[..n].iter().enumerate() {
                batch.push(t, (start + k) as i32, s.id as SeqId, last && k + 1 == n);
            }
            entries.push(Entry::Prompt { slot: i, n, last });
        }
        if batch.is_empty() {
            return;
        }
        let t0 = Instant::now();
        let result = self.session.decode(&batch);
        let secs = t0.elapsed().as_secs_f64();
        if let Err(e) = result {
            let failed: Vec<usize> = entries
                .iter()
                .map(|e| match *e {
                    Entry::Decode(i) | Entry::Prompt { slot: i, .. } => i,
                })
                .collect();
            self.fail_slots(&failed, &e.to_string());
            return;
        }
        let (mut n_prompt, mut n_gen) = (0u64, 0u64);
        // Slot of each output row, in batch order.
        let mut outputs = Vec::new();
        for e in entries {
            match e {
                Entry::Decode(i) => {
                    let s = &mut self.slots[i];
                    let j = s.job.as_mut().expect("a decoding slot has a job");
                    j.control.plain_step(secs);
                    s.cached
                        .push(j.next.take().expect("a decode entry has a token"));
                    n_gen += 1;
                    outputs.push(i);
                }
                Entry::Prompt { slot, n, last } => {
                    let s = &mut self.slots[slot];
                    let j = s.job.as_mut().expect("a prompting slot has a job");
                    s.cached
                        .extend_from_slice(&j.pending.request.prompt[j.prompt_done..][..n]);
                    j.prompt_done += n;
                    n_prompt += n as u64;
                    if last {
                        outputs.push(slot);
                        // The state at the end of the prompt: a checkpoint for the next
                        // request that shares this prompt but not what follows.
                        if let Ok(Some(state)) = self.session.save_state(slot as SeqId) {
                            self.slots[slot].checkpoints.record(state);
                        }
                    }
                }
            }
        }
        for (i, outcome) in self.sample(&outputs) {
            self.conclude(i, outcome);
        }
        self.metrics(|m| {
            m.steps += 1;
            m.busy_secs += secs;
            m.prompt_tokens += n_prompt;
            m.generated_tokens += n_gen;
        });
    }

    /// The prompt tokens of `j` to evaluate in this step. Pieces as a lone session cuts them
    /// (`n_batch` tokens from where the evaluation started), so that the arithmetic is the
    /// same; while other slots are generating (`others`), a piece is cut further into parts
    /// of about [`PROMPT_CHUNK`] tokens, so that a long prompt does not stop them for long,
    /// where that keeps the bits: every weight keeps each column's bits whatever the others
    /// ([`Session::batches_sequences`]), and every part has at least [`TILED_MIN`] tokens, so
    /// attention takes the same (tiled) kernel for each query as over the whole piece.
    fn piece(&self, j: &Job, others: bool) -> usize {
        let nb = self.params.n_batch;
        let len = j.pending.request.prompt.len();
        let into = (j.prompt_done - j.cached_tokens) % nb;
        let rest = (len - j.prompt_done).min(nb - into);
        if !others || !self.session.batches_sequences() || rest < PROMPT_CHUNK + TILED_MIN {
            return rest;
        }
        PROMPT_CHUNK
    }

    /// Samples the next token of each slot of `outputs` (slot of each logits row) from the
    /// last step's logits, on the session's compute threads (idle meanwhile; a 150k-entry
    /// vocabulary takes a fraction of a millisecond per token). Each slot's sampler and
    /// listener see only its own rows, so the results do not depend on how slots are spread
    /// over threads.
    fn sample(&mut self, outputs: &[usize]) -> Vec<(usize, crate::error::Result<Outcome>)> {
        let n_vocab = self.session.model().hparams.n_vocab;
        let model = self.session.model().clone();
        let (tok, conventions) = (model.tokenizer(), model.text());
        let n_ctx = self.stop_at();
        let logits = self.session.all_logits();
        // (slot, its row of logits, its outcome once sampled)
        type Item<'a> = (
            &'a mut Slot,
            &'a [f32],
            Option<crate::error::Result<Outcome>>,
        );
        let mut work: Vec<Item> = Vec::with_capacity(outputs.len());
        let mut rows: Vec<(usize, usize)> =
            outputs.iter().enumerate().map(|(r, &i)| (i, r)).collect();
        rows.sort_unstable();
        let mut it = rows.into_iter().peekable();
        for s in self.slots.iter_mut() {
            if let Some(&(_, r)) = it.peek().filter(|(i, _)| *i == s.id) {
                it.next();
                work.push((s, &logits[r * n_vocab..(r + 1) * n_vocab], None));
            }
        }
        // On the session's compute threads, idle between steps (no thread started per step).
        self.session.for_each_mut(&mut work, |(s, l, out)| {
            let n_cached = s.cached.len();
            let j = s.job.as_mut().expect("an output's slot has a job");
            *out = Some(j.sample(l, tok, conventions, n_cached, n_ctx));
        });
        work.into_iter()
            .map(|(s, _, out)| (s.id, out.expect("for_each_mut visits every item")))
            .collect()
    }

    /// Ends slot `i`'s job with `stop`; the slot keeps its cache for later requests.
    fn end(&mut self, i: usize, stop: StopReason) {
        let Some(j) = self.slots[i].job.take() else {
            return;
        };
        self.order.retain(|&o| o != i);
        self.after_job(i, &j);
        // The counters and the slot's state first: a listener that reads them on `Done`
        // sees the request ended.
        let cancelled = stop == StopReason::Callback;
        self.metrics(|m| {
            if cancelled {
                m.requests_cancelled += 1
            } else {
                m.requests_done += 1
            }
        });
        self.publish();
        j.finish(stop, i);
    }

    fn metrics(&self, f: impl FnOnce(&mut super::Metrics)) {
        let mut m = self
            .shared
            .metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        f(&mut m);
    }

    /// Publishes the slots' state and the load for the handles.
    fn publish(&self) {
        let info: Vec<SlotInfo> = self
            .slots
            .iter()
            .map(|s| SlotInfo {
                id: s.id,
                busy: s.job.is_some(),
                n_cached: s.cached.len(),
                n_ctx: self.n_ctx_slot,
                n_generated: s.job.as_ref().map_or(0, |j| j.n_generated()),
                request: s.job.as_ref().map(|j| j.pending.id),
            })
            .collect();
        let busy = info.iter().filter(|s| s.busy).count();
        let kv_used = self.session.kv_cache().used();
        *self.shared.slots.lock().unwrap_or_else(|p| p.into_inner()) = info;
        self.metrics(|m| {
            m.busy_slots = busy;
            m.kv_used = kv_used;
        });
    }
}
