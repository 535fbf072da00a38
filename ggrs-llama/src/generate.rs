//! Text generation: prompt in, tokens out as they are made, with stop conditions and timings.

use std::ops::ControlFlow;
use std::time::Instant;

use crate::error::{LlamaError, Result};
use crate::sampling::{top_logprobs, Sampler, SamplingParams};
use crate::session::Session;

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
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: 128,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            top_logprobs: 0,
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
    /// Log-probability of the token under the model (before sampling transforms).
    pub logprob: f32,
    /// The most likely tokens and their log-probabilities, if asked for.
    pub top_logprobs: Vec<(u32, f32)>,
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
        mut on_token: impl FnMut(&TokenEvent) -> ControlFlow<()>,
    ) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(LlamaError::EmptyPrompt);
        }
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
        let model = self.model().clone();
        let tok = model.tokenizer();
        let conventions = model.text();
        let mut sampler = Sampler::new(params.sampling.clone());
        for &t in prompt {
            sampler.accept(t);
        }
        let mut timings = Timings {
            prompt_tokens: prompt.len(),
            ..Timings::default()
        };
        let t0 = Instant::now();
        self.eval(prompt, false)?;
        timings.prompt_secs = t0.elapsed().as_secs_f64();

        let t1 = Instant::now();
        let mut decoder = tok.continuation_decoder();
        let mut text = String::new();
        let mut emitted = 0usize;
        let mut tokens = Vec::new();
        let mut logprobs = Vec::new();
        let mut stop = StopReason::MaxTokens;
        while tokens.len() < params.max_tokens {
            let logits = self.logits();
            let id = sampler.sample(logits);
            sampler.accept(id);
            let top = top_logprobs(logits, params.top_logprobs.max(1));
            let lp = if top.first().map(|t| t.0) == Some(id) {
                top[0].1
            } else {
                top_logprobs_of(logits, id)
            };
            let top = if params.top_logprobs == 0 {
                Vec::new()
            } else {
                top
            };
            tokens.push(id);
            logprobs.push((lp, top.clone()));
            timings.gen_tokens += 1;
            if !params.ignore_eos && tok.is_eog(id) {
                stop = StopReason::EndOfGeneration(id);
                break;
            }
            // Text an architecture writes as tokens of its own (ChatGLM-6B v1: newlines, tabs
            // and space runs).
            match conventions.token_text(tok, id) {
                Some(t) => text.push_str(&t),
                None => text.push_str(&decoder.push(id)?),
            }
            // A stop string anywhere in the new text ends the generation there.
            let mut search_from =
                emitted.saturating_sub(params.stop.iter().map(|s| s.len()).max().unwrap_or(0));
            while !text.is_char_boundary(search_from) {
                search_from -= 1;
            }
            let hit = params
                .stop
                .iter()
                .filter(|s| !s.is_empty())
                .filter_map(|s| {
                    text[search_from..]
                        .find(s.as_str())
                        .map(|p| (search_from + p, s))
                })
                .min_by_key(|(p, _)| *p);
            let (visible_end, stopped) = match hit {
                Some((p, s)) => (p, Some(s.clone())),
                None => (text.len() - held_back(&text, &params.stop), None),
            };
            let event = TokenEvent {
                id,
                text: text[emitted..visible_end.max(emitted)].to_string(),
                logprob: lp,
                top_logprobs: top,
            };
            emitted = visible_end.max(emitted);
            let flow = on_token(&event);
            if let Some(s) = stopped {
                text.truncate(visible_end);
                stop = StopReason::StopString(s);
                break;
            }
            if flow.is_break() {
                stop = StopReason::Callback;
                break;
            }
            if tokens.len() >= params.max_tokens {
                break;
            }
            if self.kv_cache().used() >= n_ctx {
                stop = StopReason::ContextFull;
                break;
            }
            self.eval(&[id], false)?;
        }
        if !matches!(stop, StopReason::StopString(_)) && emitted < text.len() {
            let rest = text[emitted..].to_string();
            let _ = on_token(&TokenEvent {
                id: *tokens.last().unwrap_or(&0),
                text: rest,
                logprob: 0.0,
                top_logprobs: Vec::new(),
            });
        }
        timings.gen_secs = t1.elapsed().as_secs_f64();
        Ok(Generation {
            prompt_tokens: prompt.to_vec(),
            tokens,
            text,
            stop,
            logprobs,
            timings,
        })
    }
}

fn top_logprobs_of(logits: &[f32], id: u32) -> f32 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let lse = max as f64
        + logits
            .iter()
            .map(|&x| ((x - max) as f64).exp())
            .sum::<f64>()
            .ln();
    (logits[id as usize] as f64 - lse) as f32
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
