//! A slot: a region of the KV cache, the tokens it holds, and the request it serves.

use std::time::Instant;

use crate::architecture::TextConventions;
use crate::error::Result;
use crate::generate::{Pick, Picked, Picker, StopReason, Timings, TokenEvent};
use crate::tokenizer::Tokenizer;

use super::{Completion, Event, Pending};

/// One slot of the engine.
pub(super) struct Slot {
    /// Index, also the sequence id of its tokens in the session.
    pub id: usize,
    /// Tokens whose keys and values the slot's region holds, at positions `0..len`.
    pub cached: Vec<u32>,
    /// The request it serves.
    pub job: Option<Job>,
    /// Recurrent states at the end of its last prompts, for a model with recurrent layers
    /// (see [`crate::recurrent_cache::Checkpoints`]).
    pub checkpoints: crate::recurrent_cache::Checkpoints,
    /// The draft control its last request ended with: the next starts from its measured
    /// step costs ([`crate::speculative::DraftControl::for_next_request`]).
    pub control: crate::speculative::drafting::DraftControl,
}

/// A request in a slot.
pub(super) struct Job {
    pub pending: Pending,
    /// Prompt tokens in the cache (reused or evaluated).
    pub prompt_done: usize,
    /// Prompt tokens reused from the slot's cache.
    pub cached_tokens: usize,
    /// Sampling, text and stop conditions, as `ggrs run` applies them.
    pub picker: Picker,
    /// The token sampled last, to evaluate in the next step.
    pub next: Option<u32>,
    pub started: Instant,
    pub first_token: Option<Instant>,
    pub queue_secs: f64,
    /// Tokens drafted for this request and verified.
    pub drafted: usize,
    /// Drafted tokens accepted.
    pub accepted: usize,
    /// How much to draft (see [`crate::speculative::drafting::DraftControl`]).
    pub control: crate::speculative::drafting::DraftControl,
    /// Context shifts made for it.
    pub shifts: usize,
    /// Cells its context shifts kept (its first tokens, which no shift moved).
    pub kept: usize,
}

/// What became of a job after a sampled token.
pub(super) enum Outcome {
    /// Generate on: evaluate `next` in the next step.
    Continue,
    /// It ended.
    Finished(StopReason),
}

impl Slot {
    /// Longest prefix `prompt` shares with the cached tokens.
    pub fn common_prefix(&self, prompt: &[u32]) -> usize {
        self.cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
    }
}

impl Job {
    /// Starts `pending` in a slot whose cache holds its first `reuse` prompt tokens, with
    /// the draft control `control`.
    pub fn new(
        pending: Pending,
        reuse: usize,
        tok: &Tokenizer,
        control: crate::speculative::drafting::DraftControl,
    ) -> Job {
        let picker = Picker::new(tok, &pending.request.params, &pending.request.prompt);
        let queue_secs = pending.queued_at.elapsed().as_secs_f64();
        Job {
            pending,
            prompt_done: reuse,
            cached_tokens: reuse,
            picker,
            next: None,
            started: Instant::now(),
            first_token: None,
            queue_secs,
            drafted: 0,
            accepted: 0,
            control,
            shifts: 0,
            kept: 0,
        }
    }

    /// Prompt tokens still to evaluate.
    pub fn prompt_left(&self) -> &[u32] {
        &self.pending.request.prompt[self.prompt_done..]
    }

    /// Tokens generated so far.
    pub fn n_generated(&self) -> usize {
        self.picker.tokens.len()
    }

    /// Samples a token from `logits` and tells the listener, as
    /// [`crate::Session::generate_tokens`] does step by step (the same [`Picker`]);
    /// `n_cached` cells of the slot's `n_ctx` are in use. A listener gone or a cancelled
    /// ticket ends the job ([`StopReason::Callback`]).
    pub fn sample(
        &mut self,
        logits: &[f32],
        tok: &Tokenizer,
        conventions: &dyn TextConventions,
        n_cached: usize,
        n_ctx: usize,
    ) -> Result<Outcome> {
        if self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
        let (sink, cancel) = (&mut self.pending.sink, &self.pending.cancel);
        let listen = |e: TokenEvent| {
            sink(Event::Token(e)) && !cancel.load(std::sync::atomic::Ordering::Relaxed)
        };
        Ok(
            match self
                .picker
                .pick(logits, tok, conventions, n_cached >= n_ctx, listen)?
            {
                Pick::Next(id) => {
                    self.next = Some(id);
                    Outcome::Continue
                }
                Pick::Stop(stop) => Outcome::Finished(stop),
            },
        )
    }

    /// The verification of a speculative step ([`crate::speculative`]): `rows` holds the
    /// logits after the evaluated token and after each of `drafts` (`drafts.len() + 1` rows
    /// of `n_vocab`); samples them in order as [`Job::sample`] would one step after another
    /// (`n_cached` cells in use before the step), keeping drafted tokens while they equal
    /// the sampled ones. Returns how many drafts were kept and the outcome (on `Continue`,
    /// `next` is the token sampled after them).
    #[allow(clippy::too_many_arguments)]
    pub fn verify(
        &mut self,
        rows: &[f32],
        n_vocab: usize,
        drafts: &[u32],
        tok: &Tokenizer,
        conventions: &dyn TextConventions,
        n_cached: usize,
        n_ctx: usize,
    ) -> (usize, Result<Outcome>) {
        for j in 0..=drafts.len() {
            let row = &rows[j * n_vocab..(j + 1) * n_vocab];
            match self.sample(row, tok, conventions, n_cached + 1 + j, n_ctx) {
                Ok(Outcome::Continue) if self.next == drafts.get(j).copied() => {
                    self.next = None;
                }
                outcome => return (j, outcome),
            }
        }
        unreachable!("the last row never has a draft to compare with")
    }

    /// The prompt and the tokens generated so far (what a drafter continues).
    pub fn history(&self) -> Vec<u32> {
        let mut h = self.pending.request.prompt.clone();
        h.extend_from_slice(&self.picker.tokens);
        h
    }

    /// Ends the job with `stop`: sends `Done` to the listener (if it still listens).
    pub fn finish(mut self, stop: StopReason, slot: usize) {
        let now = Instant::now();
        let first = self.first_token.unwrap_or(now);
        let Picked {
            tail,
            text,
            tokens,
            logprobs,
        } = self.picker.finish(&stop);
        let timings = Timings {
            prompt_tokens: self.pending.request.prompt.len() - self.cached_tokens,
            prompt_secs: (first - self.started).as_secs_f64(),
            gen_tokens: tokens.len(),
            gen_secs: (now - first).as_secs_f64(),
            drafted: self.drafted,
            accepted: self.accepted,
        };
        let truncated = self.pending.cut || self.shifts > 0 || stop == StopReason::ContextFull;
        let done = Completion {
            tokens,
            text,
            tail,
            truncated,
            shifts: self.shifts,
            stop,
            logprobs,
            prompt_tokens: self.pending.request.prompt.len(),
            cached_tokens: self.cached_tokens,
            timings,
            queue_secs: self.queue_secs,
            slot,
        };
        let _ = (self.pending.sink)(Event::Done(done));
    }

    /// Ends the job with an error.
    pub fn fail(mut self, message: String) {
        let _ = (self.pending.sink)(Event::Error(message));
    }
}
