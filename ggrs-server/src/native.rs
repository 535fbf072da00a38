//! llama-server's own completion endpoint, `POST /completion`: the format its web UI, its
//! test suite and many scripts speak. The request takes the same fields as
//! `/v1/completions` (`prompt`, `n_predict`, `n_probs`, `stop`, the samplers, `stream`,
//! `cache_prompt`, `return_tokens`); the answer is llama-server's object (`content`,
//! `tokens`, `stop`, `stop_type`, `tokens_predicted`, `tokens_evaluated`, `timings`,
//! `generation_settings`, `completion_probabilities` with `n_probs`), one per prompt (a list
//! of prompts gives a list). Streamed, each event is such an object for a piece of text
//! (`stop: false`, its `tokens`), then a last one with `stop: true` and the totals; there is
//! no `[DONE]`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ggrs_llama::engine::{Completion, Event};
use ggrs_llama::StopReason;
use serde_json::{json, Value};

use crate::completions::{
    chat_logprob, read_completion, submit, timings, wait_all_timed, CompletionRequest, Running,
};
use crate::error::ApiError;
use crate::handler::St;
use crate::params::GenOptions;
use crate::state::{AppState, Loaded};

/// `POST /completion`.
pub(crate) async fn completion(
    axum::extract::State(st): St,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let (l, req) = read_completion(&st, bytes, true).await?;
        let CompletionRequest {
            opts,
            prompts,
            return_tokens,
        } = req;
        let many = prompts.len() > 1;
        let run = submit(&l.handle, prompts, &opts, "")?;
        let native = Native {
            st: st.clone(),
            l,
            opts,
            return_tokens,
        };
        if native.opts.stream {
            return Ok(native.stream(run).into_response());
        }
        let (_, done) = wait_all_timed(&st, run).await?;
        let mut all: Vec<Value> = done
            .iter()
            .enumerate()
            .map(|(i, c)| native.last(i, c))
            .collect();
        Ok::<_, ApiError>(match many {
            true => Json(Value::Array(all)).into_response(),
            false => Json(all.remove(0)).into_response(),
        })
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// What the answer objects of one request are made from.
struct Native {
    st: Arc<AppState>,
    l: Arc<Loaded>,
    opts: GenOptions,
    return_tokens: bool,
}

impl Native {
    /// The generation settings llama-server reports with each finished answer.
    fn settings(&self) -> Value {
        let p = &self.opts.params;
        let s = &p.sampling;
        let n_predict = match p.max_tokens {
            usize::MAX => -1,
            n => n as i64,
        };
        json!({
            "n_predict": n_predict,
            "seed": s.seed,
            "temperature": s.temperature,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "min_p": s.min_p,
            "repeat_penalty": s.repeat_penalty,
            "repeat_last_n": s.penalty_last_n,
            "frequency_penalty": s.frequency_penalty,
            "presence_penalty": s.presence_penalty,
            "stop": p.stop,
            "ignore_eos": p.ignore_eos,
            "n_probs": p.top_logprobs,
            "post_sampling_probs": p.post_sampling_probs,
            "stream": self.opts.stream,
            // Samplers ggrs does not have, at llama-server's values that turn them off.
            "adaptive_target": -1.0,
            "adaptive_decay": 0.9,
        })
    }

    /// The last object of prompt `i`'s answer (the whole answer when not streamed).
    fn last(&self, i: usize, c: &Completion) -> Value {
        let (stop_type, word) = match &c.stop {
            StopReason::EndOfGeneration(_) => ("eos", String::new()),
            StopReason::StopString(w) => ("word", w.clone()),
            StopReason::MaxTokens | StopReason::ContextFull => ("limit", String::new()),
            StopReason::Callback => ("none", String::new()),
        };
        let mut v = json!({
            "index": i,
            "content": if self.opts.stream { String::new() } else { c.text.clone() },
            "tokens": if self.return_tokens && !self.opts.stream { c.tokens.clone() } else { Vec::new() },
            "id_slot": c.slot,
            "stop": true,
            "model": self.st.model_id,
            "tokens_predicted": c.tokens.len(),
            "tokens_evaluated": c.prompt_tokens,
            "generation_settings": self.settings(),
            "has_new_line": c.text.contains('\n'),
            "truncated": c.truncated,
            "stop_type": stop_type,
            "stopping_word": word,
            "tokens_cached": c.prompt_tokens + c.tokens.len(),
            "timings": timings(c),
        });
        if self.opts.logprobs && !self.opts.stream {
            let tok = self.l.model.tokenizer();
            let post = self.opts.params.post_sampling_probs;
            v["completion_probabilities"] = c
                .tokens
                .iter()
                .zip(&c.logprobs)
                .map(|(&id, (lp, top))| chat_logprob(tok, id, *lp, top, post))
                .collect();
        }
        v
    }

    /// The answer as server-sent events (dropping the stream cancels the requests).
    fn stream(
        self,
        run: Running,
    ) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
        let left = run.n_choices();
        let events =
            futures_util::stream::unfold((self, run, left), |(me, mut run, left)| async move {
                if left == 0 {
                    return None;
                }
                let got = match me.st.timeout {
                    Some(t) => tokio::time::timeout(t, run.recv())
                        .await
                        .map_err(|_| ApiError::timeout(t.as_secs_f64())),
                    None => Ok(run.recv().await),
                };
                let (data, left) = match got {
                    Ok(Some((i, Event::Token(t)))) => {
                        let mut v = json!({
                            "index": i,
                            "content": t.text,
                            "tokens": [t.id],
                            "stop": false,
                            "id_slot": -1,
                            "model": me.st.model_id,
                        });
                        if me.opts.logprobs && !t.flush {
                            let tok = me.l.model.tokenizer();
                            v["completion_probabilities"] = json!([chat_logprob(
                                tok,
                                t.id,
                                t.logprob,
                                &t.top_logprobs,
                                me.opts.params.post_sampling_probs,
                            )]);
                        }
                        (v, left)
                    }
                    Ok(Some((i, Event::Done(c)))) => {
                        let mut v = me.last(i, &c);
                        // Text held back until the end (a possible stop string) ends here.
                        v["content"] = json!(c.tail);
                        (v, left - 1)
                    }
                    Ok(Some((_, Event::Error(e)))) => (ApiError::server(e).body(), 0),
                    Ok(None) => (ApiError::server("the engine stopped").body(), 0),
                    Err(e) => (e.body(), 0),
                };
                let e = SseEvent::default().data(data.to_string());
                Some((Ok(e), (me, run, left)))
            });
        Sse::new(events)
    }
}
