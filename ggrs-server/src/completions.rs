//! `POST /v1/chat/completions` and `POST /v1/completions`: requests to the engine, answers as
//! one JSON object or as server-sent events.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ggrs_llama::engine::{Completion, EngineHandle, Event, Request, Ticket};
use ggrs_llama::{StopReason, Tokenizer};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::error::ApiError;
use crate::handler::{body_bytes, ready, St};
use crate::json_values::wrong_type;
use crate::limits::{
    check_choices, check_rendered, check_text, off_thread, rendered_limit, Cancel,
};
use crate::logit_bias::Vocab;
use crate::params::{gen_options, messages, Body, Endpoint, GenOptions, RequestDefaults};
use crate::state::{unix_now, AppState, Loaded};
use crate::structured;
use crate::tools;
use ggrs_llama::chat::reply::{ReasoningFormat, ReplyDelta, ReplyStream, ReplySyntax};
use ggrs_llama::chat::tools::ParsedReply;
use ggrs_llama::chat::TemplateVars;
use ggrs_llama::constraint::GrammarSpec;
use ggrs_llama::ChatTemplate;

/// `POST /v1/chat/completions`.
pub(crate) async fn chat(
    axum::extract::State(st): St,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let bytes = body_bytes(&st, bytes)?;
        let l = ready(&st)?;
        let (prompt, opts) = prepare_chat(&st, &l, bytes, Body::parse).await?;
        Ok::<_, ApiError>(generate(st.clone(), l, vec![prompt], opts, Endpoint::Chat).await)
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// A chat body's fields read and checked (everything the engine needs but the rendered
/// prompt): options, conversation, tools, the structured-output field and the template's
/// variables.
pub(crate) struct ChatParts {
    pub opts: GenOptions,
    pub msgs: Vec<ggrs_llama::chat::Message>,
    pub tools: Option<ggrs_llama::chat::tools::ToolSetup>,
    pub spec: Option<(&'static str, GrammarSpec)>,
    pub vars: TemplateVars,
    pub reasoning: ReasoningFormat,
    /// End the prompt with the assistant's turn (`add_generation_prompt`, default true).
    pub add_generation_prompt: bool,
}

/// Reads an OpenAI chat body against `template` (the server's settings: `n_predict`,
/// `reasoning`, the model's `vars`, its `vocab`, the `queue` and `max_text_bytes`), with no
/// model needed: the fuzz target runs this too.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_chat(
    mut body: Body,
    template: &ChatTemplate,
    mut vars: TemplateVars,
    reasoning: ReasoningFormat,
    defaults: &RequestDefaults,
    vocab: &dyn Vocab,
    queue: usize,
    max_text_bytes: usize,
) -> Result<ChatParts, ApiError> {
    let spec = structured::spec(&mut body)?;
    let tools = tools::setup(&mut body, template)?;
    let reasoning = match body.take("chat_template_kwargs") {
        Some(Value::Object(k)) => {
            if let Some(b) = k.get("enable_thinking").and_then(Value::as_bool) {
                vars.enable_thinking = b;
            }
            reasoning
        }
        Some(v) => return Err(wrong_type("chat_template_kwargs", "an object", &v)),
        None => reasoning,
    };
    // OpenAI's `reasoning_effort: "none"` turns thinking off, over the kwargs (as
    // llama-server reads it); other efforts leave `enable_thinking` alone.
    if body.get("reasoning_effort").and_then(Value::as_str) == Some("none") {
        vars.enable_thinking = false;
    }
    let reasoning = match body.take("reasoning_format") {
        Some(Value::String(r)) => {
            if ReasoningFormat::turns_thinking_off(&r) {
                vars.enable_thinking = false;
            }
            ReasoningFormat::parse(&r).ok_or_else(|| {
                ApiError::invalid(
                    "reasoning_format",
                    format!(
                        "'reasoning_format' must be {}, not '{r}'",
                        ReasoningFormat::NAMES
                    ),
                )
            })?
        }
        Some(v) => return Err(wrong_type("reasoning_format", "a string", &v)),
        None => reasoning,
    };
    let add_generation_prompt = match body.take("add_generation_prompt") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => b,
        Some(v) => return Err(wrong_type("add_generation_prompt", "a boolean", &v)),
    };
    let (opts, msgs) = chat_request(&body, defaults, vocab, queue, max_text_bytes)?;
    Ok(ChatParts {
        opts,
        msgs,
        tools,
        spec,
        vars,
        reasoning,
        add_generation_prompt,
    })
}

/// The conversation of `parts` rendered by `template`, within the server's limit for
/// `max_text_bytes` of text (a 400 naming `messages` beyond it).
pub(crate) fn render_chat(
    parts: &ChatParts,
    template: &ChatTemplate,
    max_text_bytes: usize,
) -> Result<String, ApiError> {
    let (msgs, tools_value) = match &parts.tools {
        Some(t) => t.prepare(&parts.msgs),
        None => (parts.msgs.clone(), None),
    };
    let text = template
        .render_limited(
            &msgs,
            parts.add_generation_prompt,
            &parts.vars,
            tools_value.as_ref(),
            rendered_limit(max_text_bytes),
        )
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    check_rendered(max_text_bytes, text.len())?;
    Ok(text)
}

/// A chat body read against the model's template and rendered (the template's variables
/// and the server's limits applied): its parts and the prompt text.
fn read_and_render(
    st: &AppState,
    l: &Loaded,
    body: Body,
    cancel: &crate::limits::Cancel,
) -> Result<(ChatParts, String), ApiError> {
    let template = l
        .template
        .as_ref()
        .map_err(|e| ApiError::bad_request(format!("this model has no chat format: {e}")))?;
    let mut parts = read_chat(
        body,
        template,
        l.vars.clone(),
        st.reasoning_format,
        &st.defaults,
        &*l.model,
        l.handle.params().queue_capacity,
        st.max_text_bytes,
    )?;
    if !l.thinks {
        // llama-server reads no reasoning out of a template that cannot think.
        parts.reasoning = ReasoningFormat::None;
    }
    cancel.check()?;
    let text = render_chat(&parts, template, st.max_text_bytes)?;
    Ok((parts, text))
}

/// A chat request made ready for the engine: `to_body` reads the bytes into an OpenAI chat
/// body (the Anthropic and Responses endpoints translate theirs); the body's options, tools
/// and structured-output fields are read, the conversation rendered and tokenized on the
/// preparation pool, and the constraint compiled. Gives the prompt and the options (with
/// the reply's syntax).
pub(crate) async fn prepare_chat(
    st: &Arc<AppState>,
    l: &Arc<Loaded>,
    bytes: Bytes,
    to_body: impl FnOnce(&[u8]) -> Result<Body, ApiError> + Send + 'static,
) -> Result<(Vec<u32>, GenOptions), ApiError> {
    let (st2, l2) = (st.clone(), l.clone());
    let (mut opts, prompt, spec, lazy) = off_thread(&st.prep, move |cancel| {
        let (st, l) = (st2, l2);
        let (parts, text) = read_and_render(&st, &l, to_body(&bytes)?, cancel)?;
        cancel.check()?;
        let prompt = l
            .model
            .encode_chat(&text)
            .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
        let ChatParts {
            mut opts,
            tools,
            mut spec,
            reasoning,
            ..
        } = parts;
        // The tools' grammar: forced (`required`, a named function) or lazy (`auto`);
        // a structured-output field the request also gives wins over a lazy one.
        let mut lazy = None;
        if let Some((g, trigger)) = tools.as_ref().and_then(|t| t.grammar(l.model.tokenizer())) {
            match (spec.as_ref().map(|(f, _)| *f), trigger) {
                (None, trigger) => {
                    spec = Some(("tools", g));
                    lazy = trigger;
                }
                (Some(_), Some(_)) => {}
                (Some(field), None) => {
                    return Err(ApiError::invalid(
                        field,
                        format!(
                            "'{field}' cannot be combined with tools and a 'tool_choice' that \
                             forces a call"
                        ),
                    ))
                }
            }
        }
        opts.reply = Some(ReplySyntax::new(reasoning, &text, tools));
        Ok((opts, prompt, spec, lazy))
    })
    .await?;
    opts.params.constraint = structured::compile(l.model.tokenizer(), spec, lazy).await?;
    Ok((prompt, opts))
}

/// `POST /apply-template` (llama-server's): the prompt a chat request renders,
/// `{"prompt": text}`, without generating (the request's tools and
/// `add_generation_prompt` are taken into account), without a leading BOS text when the
/// model adds BOS itself, as llama-server returns it.
pub(crate) async fn apply_template(
    axum::extract::State(st): St,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let bytes = body_bytes(&st, bytes)?;
        let l = ready(&st)?;
        let (st2, l2) = (st.clone(), l.clone());
        let text = off_thread(&st.prep, move |cancel| {
            let mut body = Body::parse(&bytes)?;
            // Nothing is generated: the fields that would refuse it are not read.
            body.take("stream");
            let text = read_and_render(&st2, &l2, body, cancel)?.1;
            let tok = l2.model.tokenizer();
            Ok(ggrs_llama::chat::template::without_leading_bos(tok, &text).to_string())
        })
        .await?;
        Ok::<_, ApiError>(Json(json!({ "prompt": text })).into_response())
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /v1/completions`.
pub(crate) async fn completions(
    axum::extract::State(st): St,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let (l, req) = read_completion(&st, bytes, false).await?;
        Ok::<_, ApiError>(
            generate(st.clone(), l, req.prompts, req.opts, Endpoint::Completions).await,
        )
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// A completion request, read: its options (with its grammar compiled), its prompts
/// (tokenized on the preparation pool) and llama-server's `return_tokens`.
pub(crate) struct CompletionRequest {
    pub opts: GenOptions,
    pub prompts: Vec<Vec<u32>>,
    pub return_tokens: bool,
}

/// Reads a completion request (`/v1/completions`; with `native`, llama-server's
/// `/completion`: one answer per prompt, `return_tokens` read), once the model is loaded.
pub(crate) async fn read_completion(
    st: &Arc<AppState>,
    bytes: Result<Bytes, BytesRejection>,
    native: bool,
) -> Result<(Arc<Loaded>, CompletionRequest), ApiError> {
    let bytes = body_bytes(st, bytes)?;
    let l = ready(st)?;
    let (st2, l2) = (st.clone(), l.clone());
    let (mut req, spec) = off_thread(&st.prep, move |cancel| {
        let (st, l) = (st2, l2);
        let mut body = Body::parse(&bytes)?;
        let spec = structured::spec(&mut body)?;
        let mut opts = gen_options(&body, Endpoint::Completions, &st.defaults, &*l.model)?;
        let return_tokens = match native {
            // llama-server's endpoint has no `n`.
            true => {
                opts.n = 1;
                body.bool("return_tokens")?.unwrap_or(false)
            }
            false => false,
        };
        let encode = |text: &str, add_special: bool| {
            l.model
                .text()
                .encode(l.model.tokenizer(), text, add_special, true)
                .map_err(|e| ApiError::invalid("prompt", e.to_string()))
        };
        let limits = PromptLimits {
            max_text_bytes: st.max_text_bytes,
            queue: l.handle.params().queue_capacity,
            n: opts.n,
            n_vocab: l.model.hparams.n_vocab,
        };
        let prompts = prompts(&body, limits, cancel, encode)?;
        let req = CompletionRequest {
            opts,
            prompts,
            return_tokens,
        };
        Ok((req, spec))
    })
    .await?;
    req.opts.params.constraint = structured::compile(l.model.tokenizer(), spec, None).await?;
    Ok((l, req))
}

/// `prompt` in every form llama-server takes (those of [`crate::embed_inputs`]): a string,
/// a list of token ids with strings mixed in (`[12, "text", 34]`), an object with
/// `prompt_string`, or a list of those, one choice set each (with `n` choices each, at most
/// `queue` in all). Strings (at most `max_text_bytes` in all) are tokenized by
/// `tokenize(text, add_special)`, BOS only where a prompt starts with a string; every token
/// id must be below `n_vocab`.
pub(crate) fn prompts(
    body: &Body,
    limits: PromptLimits,
    cancel: &Cancel,
    tokenize: impl Fn(&str, bool) -> Result<Vec<u32>, ApiError>,
) -> Result<Vec<Vec<u32>>, ApiError> {
    const F: &str = "prompt";
    let Some(v) = body.get(F) else {
        return Err(ApiError::invalid(F, "'prompt' is required"));
    };
    let n_vocab = limits.n_vocab;
    let check = |i: usize, ids: &[u32]| {
        if ids.is_empty() {
            return Err(ApiError::invalid(F, format!("prompt {i} is empty")));
        }
        match ids.iter().find(|&&t| t as usize >= n_vocab) {
            Some(t) => Err(ApiError::invalid(
                F,
                format!(
                    "token id {t} in prompt {i} is out of range: ids are below {n_vocab} (the \
                     vocabulary size)"
                ),
            )),
            None => Ok(()),
        }
    };
    let list = crate::embed_inputs::inputs(
        F,
        v,
        limits.max_text_bytes,
        cancel,
        |_, text, add_special| tokenize(text, add_special),
        check,
    )?;
    check_choices(limits.queue, list.len(), limits.n)?;
    Ok(list)
}

/// What a completion request's prompts are checked against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PromptLimits {
    /// The server's limit on a request's text.
    pub max_text_bytes: usize,
    /// Requests the engine's queue holds.
    pub queue: usize,
    /// Choices per prompt.
    pub n: usize,
    /// Token ids are below this.
    pub n_vocab: usize,
}

/// A chat request's options and conversation, checked: the choices fit the `queue`, the
/// messages' text `max_text_bytes`.
pub(crate) fn chat_request(
    body: &Body,
    defaults: &RequestDefaults,
    vocab: &dyn Vocab,
    queue: usize,
    max_text_bytes: usize,
) -> Result<(GenOptions, Vec<ggrs_llama::chat::Message>), ApiError> {
    let opts = gen_options(body, Endpoint::Chat, defaults, vocab)?;
    check_choices(queue, 1, opts.n)?;
    let msgs = messages(body)?;
    let text_bytes = msgs.iter().map(|m| m.content.len() + m.role.len()).sum();
    check_text(max_text_bytes, "messages", text_bytes)?;
    Ok((opts, msgs))
}

/// Cancels the requests it holds when dropped (the client went away, or the answer is
/// complete: cancelling a finished request does nothing).
struct CancelOnDrop(Vec<Ticket>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.cancel();
        }
    }
}

/// The running requests of one HTTP request: each choice's events, tagged with its index.
pub(crate) struct Running {
    rx: UnboundedReceiver<(usize, Event)>,
    _cancel: CancelOnDrop,
    n_choices: usize,
    pub id: String,
}

impl Running {
    /// Choices in the run.
    pub(crate) fn n_choices(&self) -> usize {
        self.n_choices
    }

    /// The next event of any choice (`None`: the engine stopped).
    pub(crate) async fn recv(&mut self) -> Option<(usize, Event)> {
        self.rx.recv().await
    }
}

/// Submits `n` choices per prompt (choice `p * n + i` has seed `seed + i`). The run's id is
/// `prefix` and a number; the prefix carries its API's separator (`chatcmpl-`, `msg_`,
/// `resp_`), as clients check it.
pub(crate) fn submit(
    h: &EngineHandle,
    prompts: Vec<Vec<u32>>,
    opts: &GenOptions,
    prefix: &str,
) -> Result<Running, ApiError> {
    let (tx, rx) = unbounded_channel();
    let mut tickets = CancelOnDrop(Vec::new());
    let mut index = 0;
    for prompt in prompts {
        for i in 0..opts.n {
            let mut params = opts.params.clone();
            params.sampling.seed = params.sampling.seed.wrapping_add(i as u64);
            let request = Request {
                prompt: prompt.clone(),
                params,
                cache_prompt: opts.cache_prompt,
                speculative: opts.speculative,
                n_keep: opts.n_keep,
                n_discard: opts.n_discard,
                truncate: opts.truncate,
            };
            let tx = tx.clone();
            let idx = index;
            // On failure, `tickets` is dropped and cancels the choices already queued.
            let t = h.submit(request, Box::new(move |e| tx.send((idx, e)).is_ok()))?;
            tickets.0.push(t);
            index += 1;
        }
    }
    let id = format!("{prefix}{}", tickets.0.first().map_or(0, |t| t.id));
    Ok(Running {
        rx,
        _cancel: tickets,
        n_choices: index,
        id,
    })
}

/// `finish_reason` of a stop.
fn finish_reason(s: &StopReason) -> &'static str {
    match s {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        _ => "stop",
    }
}

/// The token's text bytes (control tokens' own text).
fn piece(tok: &Tokenizer, id: u32) -> Vec<u8> {
    // The ids come from the engine, which only generates ids of the vocabulary: the lookup
    // cannot fail (an empty piece would be the harmless answer if it did).
    tok.token_to_piece(id).unwrap_or_default()
}

/// A token, its log-probability and the most likely alternatives.
type TokenLogprobs<'a> = (u32, f32, &'a [(u32, f32)]);

/// One token's log-probabilities in the chat form (`logprob`, `top_logprobs`); with
/// `post_sampling` (llama-server's `post_sampling_probs`: `lp` and `top` are of the
/// distribution the sampler drew from), probabilities as llama-server gives them: `prob`,
/// `top_probs`.
pub(crate) fn chat_logprob(
    tok: &Tokenizer,
    id: u32,
    lp: f32,
    top: &[(u32, f32)],
    post_sampling: bool,
) -> Value {
    let entry = |id: u32, lp: f32| {
        let b = piece(tok, id);
        let mut e = json!({"id": id, "token": String::from_utf8_lossy(&b), "bytes": b});
        match post_sampling {
            true => e["prob"] = json!(lp.exp()),
            false => e["logprob"] = json!(lp),
        }
        e
    };
    let mut e = entry(id, lp);
    let key = if post_sampling {
        "top_probs"
    } else {
        "top_logprobs"
    };
    e[key] = top.iter().map(|&(t, l)| entry(t, l)).collect();
    e
}

/// Tokens' log-probabilities in the completions form; `offset`: the text length before
/// the first token.
fn completion_logprobs(tok: &Tokenizer, items: &[TokenLogprobs], mut offset: usize) -> Value {
    let mut tokens = Vec::new();
    let mut lps = Vec::new();
    let mut tops = Vec::new();
    let mut offsets = Vec::new();
    for &(id, lp, top) in items {
        let text = String::from_utf8_lossy(&piece(tok, id)).into_owned();
        offsets.push(offset);
        offset += text.len();
        tokens.push(text);
        lps.push(lp);
        let m: serde_json::Map<String, Value> = top
            .iter()
            .map(|&(t, l)| {
                (
                    String::from_utf8_lossy(&piece(tok, t)).into_owned(),
                    json!(l),
                )
            })
            .collect();
        tops.push(m);
    }
    json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

/// Per-token log-probabilities of a finished choice (without the end-of-generation token,
/// which is not part of the text).
fn choice_logprobs(
    tok: &Tokenizer,
    c: &Completion,
    endpoint: Endpoint,
    post_sampling: bool,
) -> Value {
    let n = match c.stop {
        StopReason::EndOfGeneration(_) => c.tokens.len().saturating_sub(1),
        _ => c.tokens.len(),
    };
    let items: Vec<TokenLogprobs> = c
        .tokens
        .iter()
        .zip(&c.logprobs)
        .take(n)
        .map(|(&id, (lp, top))| (id, *lp, top.as_slice()))
        .collect();
    match endpoint {
        Endpoint::Chat => json!({"content": items
            .iter()
            .map(|&(id, lp, top)| chat_logprob(tok, id, lp, top, post_sampling))
            .collect::<Vec<_>>()}),
        Endpoint::Completions => completion_logprobs(tok, &items, 0),
    }
}

/// `usage` of finished choices, in index order, `n` per prompt: as OpenAI counts it, each
/// prompt once (with its first choice's cached tokens), every choice's generated tokens.
fn usage<'a>(n: usize, done: impl Iterator<Item = &'a Completion>) -> Value {
    let (mut prompt, mut gen, mut cached) = (0, 0, 0);
    for (k, c) in done.enumerate() {
        if k % n.max(1) == 0 {
            prompt += c.prompt_tokens;
            cached += c.cached_tokens;
        }
        gen += c.tokens.len();
    }
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": gen,
        "total_tokens": prompt + gen,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

/// llama-server's `timings` of a choice.
pub(crate) fn timings(c: &Completion) -> Value {
    let t = &c.timings;
    let per = |n: usize, s: f64| if n > 0 { s * 1000.0 / n as f64 } else { 0.0 };
    json!({
        "cache_n": c.cached_tokens,
        "prompt_n": t.prompt_tokens,
        "prompt_ms": t.prompt_secs * 1000.0,
        "prompt_per_token_ms": per(t.prompt_tokens, t.prompt_secs),
        "prompt_per_second": t.prompt_tps(),
        "predicted_n": t.gen_tokens,
        "predicted_ms": t.gen_secs * 1000.0,
        "predicted_per_token_ms": per(t.gen_tokens, t.gen_secs),
        "predicted_per_second": t.gen_tps(),
        "draft_n": t.drafted,
        "draft_n_accepted": t.accepted,
    })
}

/// The fields every answer object starts with.
fn head(run: &Running, st: &AppState, object: &str) -> Value {
    json!({
        "id": run.id,
        "object": object,
        "created": unix_now(),
        "model": st.model_id,
        "system_fingerprint": concat!("ggrs-", env!("CARGO_PKG_VERSION")),
    })
}

async fn generate(
    st: Arc<AppState>,
    l: Arc<Loaded>,
    prompts: Vec<Vec<u32>>,
    opts: GenOptions,
    endpoint: Endpoint,
) -> Response {
    let prefix = match endpoint {
        Endpoint::Chat => "chatcmpl-",
        Endpoint::Completions => "cmpl-",
    };
    let run = match submit(&l.handle, prompts, &opts, prefix) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if opts.stream {
        stream(st, l, run, opts, endpoint).into_response()
    } else {
        match collect(&st, &l, run, &opts, endpoint).await {
            Ok(v) => Json(v).into_response(),
            Err(e) => e.into_response(),
        }
    }
}

/// Waits for every choice and builds the answer (dropping this future, as when the client
/// disconnects, cancels the requests).
async fn collect(
    st: &AppState,
    l: &Loaded,
    run: Running,
    opts: &GenOptions,
    endpoint: Endpoint,
) -> Result<Value, ApiError> {
    let (run, done) = wait_all_timed(st, run).await?;
    answer(st, l, &run, &done, opts, endpoint)
}

/// Waits for every choice of `run` (dropping this future cancels them).
pub(crate) async fn wait_all(mut run: Running) -> Result<(Running, Vec<Completion>), ApiError> {
    let mut done: Vec<Option<Completion>> = vec![None; run.n_choices];
    let mut left = run.n_choices;
    while left > 0 {
        match run.rx.recv().await {
            Some((i, Event::Done(c))) => {
                done[i] = Some(c);
                left -= 1;
            }
            Some((_, Event::Error(e))) => return Err(ApiError::server(e)),
            Some((_, Event::Token(_))) => {}
            None => return Err(ApiError::server("the engine stopped")),
        }
    }
    Ok((run, done.into_iter().flatten().collect()))
}

/// [`wait_all`] within the server's timeout.
pub(crate) async fn wait_all_timed(
    st: &AppState,
    run: Running,
) -> Result<(Running, Vec<Completion>), ApiError> {
    match st.timeout {
        Some(t) => tokio::time::timeout(t, wait_all(run))
            .await
            .unwrap_or_else(|_| Err(ApiError::timeout(t.as_secs_f64()))),
        None => wait_all(run).await,
    }
}

/// The answer object of finished choices.
fn answer(
    st: &AppState,
    l: &Loaded,
    run: &Running,
    done: &[Completion],
    opts: &GenOptions,
    endpoint: Endpoint,
) -> Result<Value, ApiError> {
    let tok = l.model.tokenizer();
    let choices: Vec<Value> = done
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let lp = if opts.logprobs {
                choice_logprobs(tok, c, endpoint, opts.params.post_sampling_probs)
            } else {
                Value::Null
            };
            let mut ch =
                json!({"index": i, "logprobs": lp, "finish_reason": finish_reason(&c.stop)});
            match endpoint {
                Endpoint::Chat => {
                    let reply = match &opts.reply {
                        Some(syntax) => syntax.parse(&c.text),
                        None => ParsedReply {
                            content: c.text.clone(),
                            ..ParsedReply::default()
                        },
                    };
                    // A call cut off by `max_tokens` stays `length` (as llama-server and
                    // OpenAI say it): its arguments are not whole.
                    if !reply.tool_calls.is_empty() && ch["finish_reason"] != "length" {
                        ch["finish_reason"] = json!("tool_calls");
                    }
                    ch["message"] = chat_message(&reply);
                }
                Endpoint::Completions => ch["text"] = json!(c.text),
            }
            ch
        })
        .collect();
    let object = match endpoint {
        Endpoint::Chat => "chat.completion",
        Endpoint::Completions => "text_completion",
    };
    let mut v = head(run, st, object);
    v["choices"] = Value::Array(choices);
    v["usage"] = usage(opts.n, done.iter());
    if let Some(c) = done.first() {
        v["timings"] = timings(c);
    }
    Ok(v)
}

/// The `message` of a chat answer: `content` (null when the reply is only tool calls, as
/// OpenAI writes it), `reasoning_content` when split off, `tool_calls`.
fn chat_message(r: &ParsedReply) -> Value {
    let content = if r.content.is_empty() && !r.tool_calls.is_empty() {
        Value::Null
    } else {
        json!(r.content)
    };
    let mut m = json!({"role": "assistant", "content": content});
    if let Some(t) = &r.reasoning {
        m["reasoning_content"] = json!(t);
    }
    if !r.tool_calls.is_empty() {
        m["tool_calls"] = r
            .tool_calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
    }
    m
}

/// The state of an event stream.
pub(crate) struct StreamState {
    st: Arc<AppState>,
    l: Arc<Loaded>,
    run: Running,
    opts: GenOptions,
    endpoint: Endpoint,
    /// Events ready to send.
    out: VecDeque<String>,
    pub done: Vec<Option<Completion>>,
    left: usize,
    /// Text length sent per choice (the completions form's `text_offset`).
    sent: Vec<usize>,
    /// Each chat choice's reply, split as it streams.
    replies: Vec<ReplyStream>,
    finished: bool,
}

impl StreamState {
    /// A chunk for choice `i` with `delta` (chat: the delta object; completions: the text).
    fn chunk(&self, i: usize, delta: Value, logprobs: Value, finish: Option<&str>) -> Value {
        let (object, body) = match self.endpoint {
            Endpoint::Chat => ("chat.completion.chunk", "delta"),
            Endpoint::Completions => ("text_completion", "text"),
        };
        let mut v = head(&self.run, &self.st, object);
        v["choices"] =
            json!([{"index": i, body: delta, "logprobs": logprobs, "finish_reason": finish}]);
        v
    }

    fn text_delta(&self, text: &str) -> Value {
        match self.endpoint {
            Endpoint::Chat => json!({"content": text}),
            Endpoint::Completions => json!(text),
        }
    }

    /// The answer's id.
    pub fn run_id(&self) -> &str {
        &self.run.id
    }

    /// Chunks of a chat choice's reply pieces.
    fn reply_chunks(&mut self, i: usize, deltas: Vec<ReplyDelta>, mut logprobs: Value) {
        for d in deltas {
            let delta = match d {
                ReplyDelta::Content(t) => json!({"content": t}),
                ReplyDelta::Reasoning(t) => json!({"reasoning_content": t}),
                // OpenAI's pieces: the first names the call, the next carry its arguments.
                ReplyDelta::ToolCall { index, id, name } => {
                    json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                        "function": {"name": name, "arguments": ""}}]})
                }
                ReplyDelta::Arguments { index, text } => {
                    json!({"tool_calls": [{"index": index, "function": {"arguments": text}}]})
                }
            };
            let c = self.chunk(i, delta, std::mem::take(&mut logprobs), None);
            self.out.push_back(c.to_string());
        }
        if !logprobs.is_null() {
            let c = self.chunk(i, json!({}), logprobs, None);
            self.out.push_back(c.to_string());
        }
    }

    /// Turns one engine event into chunks.
    fn on_event(&mut self, i: usize, e: Event) {
        let tok = self.l.model.tokenizer();
        match e {
            Event::Token(t) => {
                if t.text.is_empty() && !self.opts.logprobs {
                    return;
                }
                let lp = if !self.opts.logprobs {
                    Value::Null
                } else if self.endpoint == Endpoint::Chat {
                    json!({"content": [chat_logprob(
                        tok,
                        t.id,
                        t.logprob,
                        &t.top_logprobs,
                        self.opts.params.post_sampling_probs,
                    )]})
                } else {
                    completion_logprobs(tok, &[(t.id, t.logprob, &t.top_logprobs)], self.sent[i])
                };
                self.sent[i] += t.text.len();
                if self.endpoint == Endpoint::Chat {
                    let deltas = self.replies[i].push(&t.text);
                    self.reply_chunks(i, deltas, lp);
                    return;
                }
                let c = self.chunk(i, self.text_delta(&t.text), lp, None);
                self.out.push_back(c.to_string());
            }
            Event::Done(c) => {
                let mut finish = finish_reason(&c.stop);
                if self.endpoint == Endpoint::Chat {
                    let mut deltas = self.replies[i].push(&c.tail);
                    let (rest, parsed) = self.replies[i].finish();
                    deltas.extend(rest);
                    self.reply_chunks(i, deltas, Value::Null);
                    // As the whole answer says it (a call cut off by `max_tokens`: `length`).
                    if !parsed.tool_calls.is_empty() && finish != "length" {
                        finish = "tool_calls";
                    }
                } else if !c.tail.is_empty() {
                    let chunk = self.chunk(i, self.text_delta(&c.tail), Value::Null, None);
                    self.out.push_back(chunk.to_string());
                }
                let empty = match self.endpoint {
                    Endpoint::Chat => json!({}),
                    Endpoint::Completions => json!(""),
                };
                let mut last = self.chunk(i, empty, Value::Null, Some(finish));
                last["timings"] = timings(&c);
                self.out.push_back(last.to_string());
                self.done[i] = Some(c);
                self.left -= 1;
                if self.left == 0 {
                    self.finish();
                }
            }
            Event::Error(e) => {
                self.out.push_back(ApiError::server(e).body().to_string());
                self.finished = true;
            }
        }
    }

    fn finish(&mut self) {
        if self.opts.include_usage {
            let object = match self.endpoint {
                Endpoint::Chat => "chat.completion.chunk",
                Endpoint::Completions => "text_completion",
            };
            let mut v = head(&self.run, &self.st, object);
            v["choices"] = json!([]);
            v["usage"] = usage(self.opts.n, self.done.iter().flatten());
            if let Some(Some(c)) = self.done.first() {
                v["timings"] = timings(c);
            }
            self.out.push_back(v.to_string());
        }
        self.out.push_back("[DONE]".into());
        self.finished = true;
    }

    /// The next event to send, waiting for the engine when none is ready.
    pub async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(e) = self.out.pop_front() {
                return Some(e);
            }
            if self.finished {
                return None;
            }
            let recv = self.run.rx.recv();
            let got = match self.st.timeout {
                Some(t) => tokio::time::timeout(t, recv).await.map_err(|_| t),
                None => Ok(recv.await),
            };
            match got {
                Ok(Some((i, e))) => self.on_event(i, e),
                Ok(None) => {
                    let e = ApiError::server("the engine stopped");
                    self.out.push_back(e.body().to_string());
                    self.finished = true;
                }
                Err(t) => {
                    let e = ApiError::timeout(t.as_secs_f64());
                    self.out.push_back(e.body().to_string());
                    self.finished = true;
                }
            }
        }
    }
}

/// The answer as server-sent events: `data: {chunk}` per piece of text, a last chunk per
/// choice with its `finish_reason`, the usage if asked, then `data: [DONE]`. Dropping the
/// stream (the client disconnected) cancels the requests.
fn stream(
    st: Arc<AppState>,
    l: Arc<Loaded>,
    run: Running,
    opts: GenOptions,
    endpoint: Endpoint,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let s = stream_state(st, l, run, opts, endpoint);
    let events = futures_util::stream::unfold(s, |mut s| async move {
        let e = s.next().await?;
        Some((Ok(SseEvent::default().data(e)), s))
    });
    Sse::new(events)
}

/// The state of a stream of chunks (each as JSON text, then `[DONE]`).
pub(crate) fn stream_state(
    st: Arc<AppState>,
    l: Arc<Loaded>,
    run: Running,
    opts: GenOptions,
    endpoint: Endpoint,
) -> StreamState {
    let n = run.n_choices;
    let mut s = StreamState {
        st,
        l,
        run,
        opts,
        endpoint,
        out: VecDeque::new(),
        done: vec![None; n],
        left: n,
        sent: vec![0; n],
        replies: Vec::new(),
        finished: false,
    };
    let syntax = s
        .opts
        .reply
        .clone()
        .unwrap_or_else(|| ReplySyntax::new(ReasoningFormat::None, "", None));
    s.replies = vec![ReplyStream::new(syntax); n];
    if endpoint == Endpoint::Chat {
        for i in 0..n {
            let c = s.chunk(
                i,
                json!({"role": "assistant", "content": null}),
                Value::Null,
                None,
            );
            s.out.push_back(c.to_string());
        }
    }
    s
}
