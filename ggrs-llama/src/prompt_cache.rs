//! Reusing what a session's KV cache already holds: a new prompt that starts with tokens the
//! cache has evaluates only the rest (llama.cpp's and llama-cpp-python's prompt cache). A
//! multi-turn chat then prefills only the new turn, and the same prompt sent twice only its
//! last token.

use std::ops::ControlFlow;

use crate::error::{LlamaError, Result};
use crate::generate::{GenerateParams, Generation, TokenEvent};
use crate::recurrent_cache::Checkpoints;
use crate::session::Session;

/// The tokens of sequence 0 whose keys and values a [`Session`]'s cache holds, in position
/// order, so that the next prompt evaluates only what follows the longest prefix it shares
/// with them.
///
/// Use one `PromptCache` per session and go through it for everything that changes the
/// session's sequence 0 (or call [`PromptCache::forget`] after changing it directly).
///
/// A prompt split between the cache and a new step may take different kernels than the
/// same prompt evaluated in one step, so logits can differ in their last bits from a fresh
/// session's; [`PromptCache::forget`] first when they must not. When the model's
/// architecture says its cached keys depend on the whole prompt
/// ([`ArchModel::reuses_cached_prefix`](crate::architecture::ArchModel::reuses_cached_prefix)
/// false: ChatGLM-6B v1), nothing is reused.
///
/// For a model with recurrent layers, whose state cannot be rewound, the record also keeps
/// the state at the end of each prompt ([`Checkpoints`]): a prompt that shares only part of
/// what the session evaluated (a chat template that renders the last reply otherwise)
/// resumes from the longest such checkpoint within the shared part
/// ([`PromptCache::checkpoint_hits`] counts them) instead of evaluating everything again.
#[derive(Debug, Clone, Default)]
pub struct PromptCache {
    tokens: Vec<u32>,
    checkpoints: Checkpoints,
    checkpoint_hits: u64,
}

impl PromptCache {
    /// An empty record, for a session whose sequence 0 is empty.
    pub fn new() -> PromptCache {
        PromptCache::default()
    }

    /// The tokens the cache holds.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Clears the session's cache and this record.
    pub fn forget(&mut self, session: &mut Session) {
        self.tokens.clear();
        self.checkpoints.clear();
        session.clear();
    }

    /// Prompts that resumed from a recurrent-state checkpoint (see the type's docs).
    pub fn checkpoint_hits(&self) -> u64 {
        self.checkpoint_hits
    }

    /// How many tokens of `prompt` can be kept: the shared prefix, less one so that at least
    /// one token is evaluated (logits come from an evaluation); for a model with recurrent
    /// layers whose state stands past that prefix, the longest checkpoint within it (0
    /// without one).
    pub fn reusable(&self, session: &Session, prompt: &[u32]) -> usize {
        if !session.model().arch().reuses_cached_prefix() {
            return 0;
        }
        let keep = self.shared(prompt);
        match session.reusable_prefix(0, keep) {
            0 => self
                .checkpoints
                .best(keep)
                .map_or(0, |c| c.next_pos as usize),
            n => n,
        }
    }

    /// Generates after `prompt` as [`Session::generate_tokens`] does on an empty cache, but
    /// evaluates only what follows the prefix the cache shares with it
    /// ([`Generation::cached_tokens`] says how many tokens were kept). Afterwards the cache
    /// holds the prompt and every generated token but the last (which is sampled, never
    /// evaluated). After an error the record still matches the cache.
    pub fn generate(
        &mut self,
        session: &mut Session,
        prompt: &[u32],
        params: &GenerateParams,
        on_token: impl FnMut(&TokenEvent) -> ControlFlow<()>,
    ) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(LlamaError::EmptyPrompt);
        }
        let keep = self.keep(session, prompt)?;
        match session.generate_after_prefix(prompt, keep, params, on_token) {
            Ok(g) => {
                if let Some(state) = session.take_prompt_state() {
                    self.checkpoints.record(state);
                }
                self.tokens.extend_from_slice(&prompt[keep..]);
                let evaluated = g.tokens.len().saturating_sub(1);
                self.tokens.extend_from_slice(&g.tokens[..evaluated]);
                // The tokens a context shift dropped from the cache.
                for &(kept, dropped) in session.shifts() {
                    let end = (kept + dropped).min(self.tokens.len());
                    self.tokens.drain(kept.min(end)..end);
                }
                self.tokens.truncate(session.n_past());
                Ok(g)
            }
            Err(e) => {
                self.resync(session);
                Err(e)
            }
        }
    }

    /// Makes the cache hold `tokens` with logits for the last one (or for every evaluated
    /// one, with `all_logits`, when the session allows it), evaluating only what follows
    /// the shared prefix. Returns how many tokens were kept. After an error the record
    /// still matches the cache.
    pub fn eval_prompt(
        &mut self,
        session: &mut Session,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<usize> {
        if tokens.is_empty() {
            return Err(LlamaError::EmptyPrompt);
        }
        let keep = self.keep(session, tokens)?;
        self.append(session, &tokens[keep..], all_logits)?;
        Ok(keep)
    }

    /// Evaluates `tokens` after what the cache holds (as [`Session::eval`]). After an error
    /// the record still matches the cache.
    pub fn append(
        &mut self,
        session: &mut Session,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<()> {
        match session.eval(tokens, all_logits) {
            Ok(()) => {
                self.tokens.extend_from_slice(tokens);
                if let Some(state) = session.save_state(0)? {
                    self.checkpoints.record(state);
                }
                Ok(())
            }
            Err(e) => {
                self.resync(session);
                Err(e)
            }
        }
    }

    /// After an error: an input refused before evaluation left the cache a prefix of the
    /// record; anything else (a step that failed half-way) clears both.
    fn resync(&mut self, session: &mut Session) {
        if session.n_past() <= self.tokens.len() {
            self.tokens.truncate(session.n_past());
            self.checkpoints.truncate(self.tokens.len());
        } else {
            self.forget(session);
        }
    }

    /// Keeps the reusable prefix of `prompt` in the session and this record (going back to a
    /// recurrent-state checkpoint where needed), drops the rest.
    fn keep(&mut self, session: &mut Session, prompt: &[u32]) -> Result<usize> {
        let limit = match session.model().arch().reuses_cached_prefix() {
            true => self.shared(prompt),
            false => 0,
        };
        let direct = session.reusable_prefix(0, limit);
        let keep = match session.resume_at(0, limit, &self.checkpoints) {
            Ok(k) => k,
            Err(e) => {
                self.forget(session);
                return Err(e);
            }
        };
        if keep > direct {
            self.checkpoint_hits += 1;
        }
        self.tokens.truncate(keep);
        self.checkpoints.truncate(keep);
        Ok(keep)
    }

    /// The prefix `prompt` shares with the record, less one token so that at least one is
    /// evaluated (logits come from an evaluation).
    fn shared(&self, prompt: &[u32]) -> usize {
        let shared = self
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        shared.min(prompt.len().saturating_sub(1))
    }
}
