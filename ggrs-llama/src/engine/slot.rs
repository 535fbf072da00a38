//! A slot: a region of the KV cache, the tokens it holds, and the request it serves.

use std::time::Instant;

use crate::architecture::TextConventions;
use crate::error::Result;
use crate::generate::{token_logprobs, StopReason, TextStream, Timings, TokenEvent};
use crate::sampling::Sampler;
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
}

/// A request in a slot.
pub(super) struct Job {
    pub pending: Pending,
    /// Prompt tokens in the cache (reused or evaluated).
    pub prompt_done: usize,
    /// Prompt tokens reused from the slot's cache.
    pub cached_tokens: usize,
    pub sampler: Sampler,
    pub stream: TextStream,
    pub tokens: Vec<u32>,
    pub logprobs: Vec<(f32, Vec<(u32, f32)>)>,
    /// The token sampled last, to evaluate in the next step.
    pub next: Option<u32>,
    pub started: Instant,
    pub first_token: Option<Instant>,
    pub queue_secs: f64,
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
    /// Starts `pending` in a slot whose cache holds its first `reuse` prompt tokens.
    pub fn new(pending: Pending, reuse: usize, tok: &Tokenizer) -> Job {
        let mut sampler = Sampler::new(pending.request.params.sampling.clone());
        for &t in &pending.request.prompt {
            sampler.accept(t);
        }
        let stream = TextStream::new(tok, pending.request.params.stop.clone());
        let queue_secs = pending.queued_at.elapsed().as_secs_f64();
        Job {
            pending,
            prompt_done: reuse,
            cached_tokens: reuse,
            sampler,
            stream,
            tokens: Vec::new(),
            logprobs: Vec::new(),
            next: None,
            started: Instant::now(),
            first_token: None,
            queue_secs,
        }
    }

    /// Prompt tokens still to evaluate.
    pub fn prompt_left(&self) -> &[u32] {
        &self.pending.request.prompt[self.prompt_done..]
    }

    /// Samples a token from `logits` and tells the listener, as
    /// [`crate::Session::generate_tokens`] does step by step (same checks, same order);
    /// `n_cached` cells of the slot's `n_ctx` are in use.
    pub fn sample(
        &mut self,
        logits: &[f32],
        tok: &Tokenizer,
        conventions: &dyn TextConventions,
        n_cached: usize,
        n_ctx: usize,
    ) -> Result<Outcome> {
        let params = &self.pending.request.params;
        if self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
        let id = self.sampler.sample(logits);
        self.sampler.accept(id);
        let (lp, top) = token_logprobs(logits, id, params.top_logprobs);
        self.tokens.push(id);
        self.logprobs.push((lp, top.clone()));
        if !params.ignore_eos && tok.is_eog(id) {
            return Ok(Outcome::Finished(StopReason::EndOfGeneration(id)));
        }
        let step = self.stream.push(tok, conventions, id)?;
        let listening = (self.pending.sink)(Event::Token(TokenEvent {
            id,
            text: step.visible,
            logprob: lp,
            top_logprobs: top,
        }));
        if let Some(s) = step.stopped {
            return Ok(Outcome::Finished(StopReason::StopString(s)));
        }
        if !listening
            || self
                .pending
                .cancel
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(Outcome::Finished(StopReason::Callback));
        }
        if self.tokens.len() >= params.max_tokens {
            return Ok(Outcome::Finished(StopReason::MaxTokens));
        }
        if n_cached >= n_ctx {
            return Ok(Outcome::Finished(StopReason::ContextFull));
        }
        self.next = Some(id);
        Ok(Outcome::Continue)
    }

    /// Ends the job with `stop`: sends `Done` to the listener (if it still listens).
    pub fn finish(mut self, stop: StopReason, slot: usize) {
        let tail = if matches!(stop, StopReason::StopString(_)) {
            String::new()
        } else {
            self.stream.flush()
        };
        let now = Instant::now();
        let first = self.first_token.unwrap_or(now);
        let timings = Timings {
            prompt_tokens: self.pending.request.prompt.len() - self.cached_tokens,
            prompt_secs: (first - self.started).as_secs_f64(),
            gen_tokens: self.tokens.len(),
            gen_secs: (now - first).as_secs_f64(),
        };
        let done = Completion {
            tokens: self.tokens,
            text: self.stream.into_text(),
            tail,
            stop,
            logprobs: self.logprobs,
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
