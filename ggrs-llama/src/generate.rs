//! Text generation: prompt in, tokens out as they are made, with stop conditions and timings.

use std::ops::ControlFlow;
use std::time::Instant;

use crate::architecture::TextConventions;
use crate::batch::Batch;
use crate::constraint::{Constraint, ConstraintState};
use crate::error::{LlamaError, Result};
use crate::sampling::{top_logprobs, Sampler, SamplingParams};
use crate::session::Session;
use crate::speculative::drafting::{DraftControl, SpecStats, Speculation};
use crate::tokenizer::{DecodeState, Tokenizer};

/// How to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateParams {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Token choice.
    pub sampling: SamplingParams,
    /// Generation stops when the text contains one of these (it is not included).
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Report the `top_logprobs` most likely tokens at each step (0: none).
    pub top_logprobs: usize,
    /// Report log-probabilities under the distribution the token is drawn from (after the
    /// biases, penalties, top-k, top-p, min-p and temperature; tokens of no probability
    /// are not among the alternatives) instead of the model's own: llama-server's
    /// `post_sampling_probs`.
    pub post_sampling_probs: bool,
    /// A grammar or JSON Schema the output must follow (masks tokens before sampling).
    pub constraint: Option<Constraint>,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: 128,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            top_logprobs: 0,
            post_sampling_probs: false,
            constraint: None,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token (its id).
    EndOfGeneration(u32),
    /// `max_tokens` were generated.
    MaxTokens,
    /// The text reached a stop string (the string).
    StopString(String),
    /// The context is full.
    ContextFull,
    /// The callback asked to stop.
    Callback,
}

/// One generated token, as the callback sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    /// Token id.
    pub id: u32,
    /// Text that may be shown now: complete UTF-8, held back while it could be the start of
    /// a stop string (so it may be empty, and later events may carry more than one token's
    /// text).
    pub text: String,
    /// Log-probability of the token under the model (before sampling transforms; with
    /// [`GenerateParams::post_sampling_probs`], under the distribution it was drawn from).
    pub logprob: f32,
    /// The most likely tokens and their log-probabilities, if asked for.
    pub top_logprobs: Vec<(u32, f32)>,
    /// True for the closing event that only flushes text held back at the end (no token of
    /// its own: `id` repeats the last token's, `logprob` is 0).
    pub flush: bool,
}

/// Speeds of a generation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Prompt tokens evaluated.
    pub prompt_tokens: usize,
    /// Seconds spent evaluating the prompt.
    pub prompt_secs: f64,
    /// Tokens generated.
    pub gen_tokens: usize,
    /// Seconds spent generating (evaluating generated tokens and sampling).
    pub gen_secs: f64,
    /// Tokens drafted for speculative steps ([`crate::speculative`]).
    pub drafted: usize,
    /// Drafted tokens accepted (each one saved a step).
    pub accepted: usize,
}

impl Timings {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        rate(self.prompt_tokens, self.prompt_secs)
    }

    /// Generated tokens per second.
    pub fn gen_tps(&self) -> f64 {
        rate(self.gen_tokens, self.gen_secs)
    }
}

fn rate(n: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

/// The result of a generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The prompt's token ids.
    pub prompt_tokens: Vec<u32>,
    /// Generated token ids (an end-of-generation token included when it ended the text).
    pub tokens: Vec<u32>,
    /// Generated text (a stop string and what follows it removed).
    pub text: String,
    /// Tokens at the start of the prompt that were already in the cache and not evaluated
    /// again ([`crate::PromptCache`]; 0 for [`Session::generate_tokens`]).
    pub cached_tokens: usize,
    /// Why it ended.
    pub stop: StopReason,
    /// Per generated token: its log-probability and the most likely alternatives.
    pub logprobs: Vec<(f32, Vec<(u32, f32)>)>,
    /// Speeds.
    pub timings: Timings,
}

/// Longest suffix of `text` that is a proper prefix of one of `stops` (bytes).
fn held_back(text: &str, stops: &[String]) -> usize {
    let t = text.as_bytes();
    let mut best = 0;
    for s in stops {
        let s = s.as_bytes();
        for k in (1..s.len().min(t.len() + 1)).rev() {
            if k > best && t.ends_with(&s[..k]) {
                best = k;
                break;
            }
        }
    }
    best
}

/// The text of a stream of generated tokens: decodes them, finds stop strings (even when
/// one spans several tokens) and tells what may be shown at each step. Shared by
/// [`Session::generate_tokens`] and the serving engine ([`crate::engine`]).
#[derive(Debug, Clone)]
pub struct TextStream {
    decoder: DecodeState,
    stop: Vec<String>,
    text: String,
    emitted: usize,
}

/// What [`TextStream::push`] made of one token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextStep {
    /// Text that may be shown now (complete UTF-8, nothing that could start a stop string).
    pub visible: String,
    /// The stop string the text reached, if any (the text now ends before it).
    pub stopped: Option<String>,
}

impl TextStream {
    /// A stream for text that follows a prompt (the decoder of
    /// [`Tokenizer::continuation_decoder`]), ending at any of `stop`.
    pub fn new(tok: &Tokenizer, stop: Vec<String>) -> TextStream {
        TextStream {
            decoder: tok.continuation_decoder().into_state(),
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
            text: String::new(),
            emitted: 0,
        }
    }

    /// Adds generated token `id` (text as the architecture's conventions write it).
    pub fn push(
        &mut self,
        tok: &Tokenizer,
        conventions: &dyn TextConventions,
        id: u32,
    ) -> Result<TextStep> {
        // Text an architecture writes as tokens of its own (ChatGLM-6B v1: newlines, tabs
        // and space runs).
        match conventions.token_text(tok, id) {
            Some(t) => self.text.push_str(&t),
            None => self.text.push_str(&self.decoder.push(tok, id)?),
        }
        // A stop string anywhere in the new text ends the generation there.
        let longest = self.stop.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut search_from = self.emitted.saturating_sub(longest);
        while !self.text.is_char_boundary(search_from) {
            search_from -= 1;
        }
        let hit = self
            .stop
            .iter()
            .filter_map(|s| {
                self.text[search_from..]
                    .find(s.as_str())
                    .map(|p| (search_from + p, s))
            })
            .min_by_key(|(p, _)| *p);
        let (visible_end, stopped) = match hit {
            Some((p, s)) => (p, Some(s.clone())),
            None => (self.text.len() - held_back(&self.text, &self.stop), None),
        };
        let visible = self.text[self.emitted..visible_end.max(self.emitted)].to_string();
        self.emitted = visible_end.max(self.emitted);
        if stopped.is_some() {
            self.text.truncate(visible_end);
        }
        Ok(TextStep { visible, stopped })
    }

    /// Ends the stream: the text held back so far (a possible stop-string start that never
    /// completed), to be shown now.
    pub fn flush(&mut self) -> String {
        let rest = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        rest
    }

    /// The whole text so far (a stop string and what follows it removed).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Takes the whole text.
    pub fn into_text(self) -> String {
        self.text
    }
}

/// One generation, token by token, as [`Session::generate_tokens`] and the serving engine
/// both run it: sample from the logits, record the token and its log-probabilities, then
/// end at an end-of-generation token, a stop string, a listener that stops listening, the
/// token limit or a full context, checked in that order.
#[derive(Debug, Clone)]
pub(crate) struct Picker {
    sampler: Sampler,
    stream: TextStream,
    params: GenerateParams,
    /// The grammar's state, when the output is constrained.
    constraint: Option<ConstraintState>,
    /// Generated token ids.
    pub tokens: Vec<u32>,
    /// Per generated token: its log-probability and the most likely alternatives.
    pub logprobs: Vec<(f32, Vec<(u32, f32)>)>,
}

/// What [`Picker::pick`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Evaluate this token, then pick again.
    Next(u32),
    /// The generation ended.
    Stop(StopReason),
}

impl Picker {
    /// A generation with `params` after `prompt` (whose tokens the penalties see).
    pub fn new(tok: &Tokenizer, params: &GenerateParams, prompt: &[u32]) -> Picker {
        let mut sampler = Sampler::new(params.sampling.clone());
        for &t in prompt {
            sampler.accept(t);
        }
        Picker {
            sampler,
            stream: TextStream::new(tok, params.stop.clone()),
            constraint: params.constraint.as_ref().map(Constraint::start),
            params: params.clone(),
            tokens: Vec::new(),
            logprobs: Vec::new(),
        }
    }

    /// The token limit.
    pub fn max_tokens(&self) -> usize {
        self.params.max_tokens
    }

    /// Picks the next token from `logits` and tells `listen` (false: stop listening);
    /// `full`: the context has no room for another token.
    pub fn pick(
        &mut self,
        logits: &[f32],
        tok: &Tokenizer,
        conventions: &dyn TextConventions,
        full: bool,
        listen: impl FnOnce(TokenEvent) -> bool,
    ) -> Result<Pick> {
        if self.tokens.len() >= self.params.max_tokens {
            return Ok(Pick::Stop(StopReason::MaxTokens));
        }
        // A constraint masks what cannot continue the output before any other transform.
        let masked;
        let sampled = match &mut self.constraint {
            Some(c) if c.engaged() => {
                let mut m = logits.to_vec();
                c.mask(&mut m)?;
                masked = m;
                &masked
            }
            _ => logits,
        };
        let (id, post) = if self.params.post_sampling_probs {
            let (id, dist) = self
                .sampler
                .try_sample_with_probs(sampled)
                .map_err(|e| LlamaError::InvalidArgument(e.to_string()))?;
            (id, Some(dist))
        } else {
            let id = self
                .sampler
                .try_sample(sampled)
                .map_err(|e| LlamaError::InvalidArgument(e.to_string()))?;
            (id, None)
        };
        self.sampler.accept(id);
        if let Some(c) = &mut self.constraint {
            let piece = if c.engaged() {
                Vec::new()
            } else {
                tok.token_to_piece(id)?
            };
            c.accept(tok, id, &piece)?;
        }
        let (lp, top) = match post {
            Some(dist) => post_sampling_logprobs(&dist, id, self.params.top_logprobs),
            None => token_logprobs(logits, id, self.params.top_logprobs),
        };
        self.tokens.push(id);
        self.logprobs.push((lp, top.clone()));
        if !self.params.ignore_eos && tok.is_eog(id) {
            return Ok(Pick::Stop(StopReason::EndOfGeneration(id)));
        }
        let step = self.stream.push(tok, conventions, id)?;
        let listening = listen(TokenEvent {
            id,
            text: step.visible,
            logprob: lp,
            top_logprobs: top,
            flush: false,
        });
        Ok(if let Some(s) = step.stopped {
            Pick::Stop(StopReason::StopString(s))
        } else if !listening {
            Pick::Stop(StopReason::Callback)
        } else if self.tokens.len() >= self.params.max_tokens {
            Pick::Stop(StopReason::MaxTokens)
        } else if full {
            Pick::Stop(StopReason::ContextFull)
        } else {
            Pick::Next(id)
        })
    }

    /// Ends the generation that stopped with `stop`.
    pub fn finish(mut self, stop: &StopReason) -> Picked {
        let tail = if matches!(stop, StopReason::StopString(_)) {
            String::new()
        } else {
            self.stream.flush()
        };
        Picked {
            tail,
            text: self.stream.into_text(),
            tokens: self.tokens,
            logprobs: self.logprobs,
        }
    }
}

/// A finished [`Picker`].
pub(crate) struct Picked {
    /// The text held back so far (none after a stop string), to show now.
    pub tail: String,
    /// The whole text (a stop string and what follows it removed).
    pub text: String,
    /// Generated token ids.
    pub tokens: Vec<u32>,
    /// Per generated token: its log-probability and the most likely alternatives.
    pub logprobs: Vec<(f32, Vec<(u32, f32)>)>,
}

impl Session {
    /// Tokenizes `prompt` as the model's architecture encodes a prompt
    /// ([`crate::Model::encode_prompt`]: BOS per the model, special tokens such as
    /// `<|im_start|>` parsed) and generates after it; see [`Session::generate_tokens`].
    pub fn generate(
        &mut self,
        prompt: &str,
        params: &GenerateParams,
        on_token: impl FnMut(&TokenEvent) -> ControlFlow<()>,
    ) -> Result<Generation> {
        let tokens = self.model().encode_prompt(prompt)?;
        self.generate_tokens(&tokens, params, on_token)
    }

    /// Evaluates `prompt` after what the cache holds, then generates up to
    /// `params.max_tokens` tokens, calling `on_token` with each as it is made (return
    /// `ControlFlow::Break(())` to stop). Ends at an end-of-generation token, a stop string,
    /// the token limit or a full context.
    pub fn generate_tokens(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        on_token: impl FnMut(&TokenEvent) -> ControlFlow<()>,
    ) -> Result<Generation> {
        self.generate_after_prefix(prompt, 0, params, on_token)
    }

    /// As [`Session::generate_tokens`], when the cache already holds the first `cached`
    /// tokens of `prompt` (and nothing after them): evaluates `prompt[cached..]` only, while
    /// the penalties see the whole prompt. `cached` must be below `prompt.len()`.
    pub(crate) fn generate_after_prefix(
        &mut self,
        prompt: &[u32],
        cached: usize,
        params: &GenerateParams,
        mut on_token: impl FnMut(&TokenEvent) -> ControlFlow<()>,
    ) -> Result<Generation> {
        if prompt.len() <= cached {
            return Err(LlamaError::EmptyPrompt);
        }
        let (context, prompt) = (prompt, &prompt[cached..]);
        params
            .sampling
            .validate()
            .map_err(LlamaError::InvalidArgument)?;
        let n_ctx = self.params().n_ctx;
        let n_past = self.kv_cache().used();
        if n_past + prompt.len() > n_ctx {
            return Err(LlamaError::ContextFull {
                n_tokens: prompt.len(),
                n_past,
                n_ctx,
            });
        }
        self.shifts.clear();
        let model = self.model().clone();
        let mut picker = Picker::new(model.tokenizer(), params, context);
        let mut timings = Timings {
            prompt_tokens: prompt.len(),
            ..Timings::default()
        };
        let t0 = Instant::now();
        self.eval(prompt, false)?;
        self.note_prompt_state()?;
        timings.prompt_secs = t0.elapsed().as_secs_f64();

        let t1 = Instant::now();
        // The drafter is taken out for the loop (the loop borrows the session mutably).
        let mut spec = self.speculation.take();
        let mut stats = SpecStats::default();
        let looped = self.decode_loop(
            context,
            &mut picker,
            spec.as_mut(),
            &mut stats,
            &mut on_token,
        );
        self.speculation = spec;
        let stop = looped?;
        timings.drafted = stats.drafted;
        timings.accepted = stats.accepted;
        let Picked {
            tail,
            text,
            tokens,
            logprobs,
        } = picker.finish(&stop);
        timings.gen_tokens = tokens.len();
        if !tail.is_empty() {
            let _ = on_token(&TokenEvent {
                id: *tokens.last().unwrap_or(&0),
                text: tail,
                logprob: 0.0,
                top_logprobs: Vec::new(),
                flush: true,
            });
        }
        timings.gen_secs = t1.elapsed().as_secs_f64();
        Ok(Generation {
            prompt_tokens: context.to_vec(),
            tokens,
            text,
            cached_tokens: cached,
            stop,
            logprobs,
            timings,
        })
    }
}

impl Session {
    /// Samples and evaluates until the generation stops: one token a step, or, with a
    /// drafter, the sampled token and the drafted ones in one exact step
    /// ([`Session::decode_exact`]), keeping the drafted tokens the picker samples too (see
    /// [`crate::speculative`]). `context`: the prompt (with any cached prefix).
    fn decode_loop(
        &mut self,
        context: &[u32],
        picker: &mut Picker,
        mut spec: Option<&mut Speculation>,
        stats: &mut SpecStats,
        on_token: &mut impl FnMut(&TokenEvent) -> ControlFlow<()>,
    ) -> Result<StopReason> {
        let model = self.model().clone();
        let (tok, conventions) = (model.tokenizer(), model.text());
        let n_ctx = self.params().n_ctx;
        let nv = model.hparams.n_vocab;
        let max_tokens = picker.max_tokens();
        // With a context shift, the cells kept (llama.cpp's n_keep: the prompt tokens asked
        // for after BOS, at most the prompt, at most n_ctx − 4), and the last cell is never
        // taken: the shift comes when the next token would take it.
        let keep = self.context_shift.map(|k| {
            let bos = usize::from(context.first().is_some_and(|&t| Some(t) == tok.bos()));
            let kept = match usize::try_from(k) {
                Ok(k) if k + bos <= context.len() => k + bos,
                _ => context.len(),
            };
            kept.min(n_ctx.saturating_sub(4))
        });
        // The last cell is never taken without a shift either: generation stops when the
        // next token would take it, with prompt + output = n_ctx, as llama-completion and
        // llama-server stop ("context full and context shift is disabled").
        let n_ctx_gen = n_ctx - 1;
        let full_at = |used: usize| keep.is_none() && used + 1 >= n_ctx;
        let full = full_at(self.kv_cache().used());
        let listen = |e: TokenEvent| on_token(&e).is_continue();
        let mut next = match picker.pick(self.logits(), tok, conventions, full, listen)? {
            Pick::Next(id) => id,
            Pick::Stop(stop) => return Ok(stop),
        };
        // The prompt and the output so far (what the drafter continues).
        let mut history: Vec<u32> = context.to_vec();
        history.push(next);
        let mut control = DraftControl::default();
        loop {
            let used = self.kv_cache().used();
            let drafts = match spec.as_deref_mut() {
                Some(s) => {
                    // Drafts the context has room for, and that could be kept before the
                    // token limit (the token sampled from the last row is never evaluated).
                    let room = n_ctx_gen.saturating_sub(used + 1);
                    let left = max_tokens.saturating_sub(picker.tokens.len() + 1);
                    let mut cap = s.params.draft_max.min(room).min(left);
                    if s.params.adaptive {
                        cap = control.limit(cap);
                    }
                    let mut d = match cap >= s.params.draft_min.max(1) {
                        true => s.drafter.draft(&history, cap)?,
                        false => Vec::new(),
                    };
                    d.truncate(cap);
                    if d.len() < s.params.draft_min {
                        d.clear();
                    }
                    d
                }
                None => Vec::new(),
            };
            let t0 = Instant::now();
            if drafts.is_empty() {
                if let Some(k) = keep.filter(|_| used + 1 >= n_ctx) {
                    if self.context_shift(k)? == 0 {
                        return Ok(StopReason::ContextFull);
                    }
                }
                self.eval(&[next], false)?;
                control.plain_step(t0.elapsed().as_secs_f64());
                let full = full_at(self.kv_cache().used());
                let listen = |e: TokenEvent| on_token(&e).is_continue();
                match picker.pick(self.logits(), tok, conventions, full, listen)? {
                    Pick::Next(id) => {
                        next = id;
                        history.push(id);
                    }
                    Pick::Stop(stop) => return Ok(stop),
                }
                continue;
            }
            let base = self.n_past() as i32;
            let mut step = Vec::with_capacity(drafts.len() + 1);
            step.push(next);
            step.extend_from_slice(&drafts);
            self.decode_exact(&Batch::from_tokens(&step, base, 0, true))?;
            let secs = t0.elapsed().as_secs_f64();
            stats.steps += 1;
            stats.drafted += drafts.len();
            // Row j holds the logits after `next` and j drafted tokens: sample it as plain
            // decoding would (the cache then held used + 1 + j cells); keep going while the
            // sampled token is the drafted one.
            let mut j = 0;
            let outcome = loop {
                let row = &self.all_logits()[j * nv..(j + 1) * nv];
                let full = full_at(used + 1 + j);
                let listen = |e: TokenEvent| on_token(&e).is_continue();
                match picker.pick(row, tok, conventions, full, listen)? {
                    Pick::Stop(stop) => break Err(stop),
                    Pick::Next(t) => {
                        history.push(t);
                        match drafts.get(j) {
                            Some(&d) if d == t => j += 1,
                            _ => break Ok(t),
                        }
                    }
                }
            };
            stats.accepted += j;
            control.spec_step(drafts.len(), j, secs);
            if j < drafts.len() {
                // The cells of the rejected drafts, as if they never ran.
                self.remove(0, base + 1 + j as i32);
            }
            match outcome {
                Ok(t) => next = t,
                Err(stop) => return Ok(stop),
            }
        }
    }
}

/// The log-probability of `id` under `logits` and the `top` most likely tokens with theirs
/// (empty when `top` is 0).
pub fn token_logprobs(logits: &[f32], id: u32, top: usize) -> (f32, Vec<(u32, f32)>) {
    if top == 0 {
        // The same value `top_logprobs` would give `id`, without its pass for the best.
        return (top_logprobs_of(logits, id), Vec::new());
    }
    let best = top_logprobs(logits, top);
    let lp = if best.first().map(|t| t.0) == Some(id) {
        best[0].1
    } else {
        top_logprobs_of(logits, id)
    };
    (lp, best)
}

/// The log-probability of `id` under `dist` (a sampler's post-sampling distribution, most
/// likely first; −∞ when `id` is not in it) and its first `top` entries with theirs.
fn post_sampling_logprobs(dist: &[(u32, f32)], id: u32, top: usize) -> (f32, Vec<(u32, f32)>) {
    let lp = dist
        .iter()
        .find(|d| d.0 == id)
        .map_or(f32::NEG_INFINITY, |d| d.1.ln());
    let best = dist.iter().take(top).map(|&(t, p)| (t, p.ln())).collect();
    (lp, best)
}

fn top_logprobs_of(logits: &[f32], id: u32) -> f32 {
    (logits[id as usize] as f64 - crate::sampling::log_sum_exp(logits)) as f32
}

#[cfg(test)]
mod tests {
    use super::held_back;

    #[test]
    fn holds_back_stop_prefixes() {
        let stops = vec!["</end>".to_string(), "\n\n".to_string()];
        assert_eq!(held_back("hello </e", &stops), 3);
        assert_eq!(held_back("hello\n", &stops), 1);
        assert_eq!(held_back("hello", &stops), 0);
    }
}
