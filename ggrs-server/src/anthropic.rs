//! Anthropic's Messages API on the chat engine: `POST /v1/messages` (system, content
//! blocks `text`/`tool_use`/`tool_result`/`thinking`, tools, `tool_choice`,
//! `stop_sequences`, `thinking`, streaming with Anthropic's event types) and
//! `POST /v1/messages/count_tokens`. A request is translated into a chat-completions body
//! and prepared as one ([`prepare_chat`]); the reply is parsed the same way (reasoning,
//! tool calls) and written as Anthropic's content blocks.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ggrs_llama::chat::tools::ParsedReply;
use ggrs_llama::engine::Completion;
use ggrs_llama::StopReason;
use serde_json::{json, Map, Value};

use crate::completions::{prepare_chat, stream_state, submit, wait_all_timed, StreamState};
use crate::error::ApiError;
use crate::handler::{body_bytes, ready, St};
use crate::json_values::wrong_type;
use crate::params::Body;
use crate::state::AppState;
use crate::translate::{self, Pump, Translate};

/// Anthropic's error body for `e`: `{"type": "error", "error": {"type", "message"}}`.
fn error_response(e: ApiError) -> Response {
    let status = e.status;
    let kind = match status.as_u16() {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 | 503 => "overloaded_error",
        _ => "api_error",
    };
    let msg = e.message;
    let body = json!({"type": "error", "error": {"type": kind, "message": msg}});
    (status, Json(body)).into_response()
}

/// Text of a `system` field or of `tool_result` content: a string or text blocks.
fn text_of(v: &Value, field: &str) -> Result<String, ApiError> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut out = Vec::new();
            for b in blocks {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => out.push(t.as_str()),
                    (Some(kind), _) => {
                        return Err(ApiError::unsupported(
                            field,
                            &format!("content blocks of type '{kind}' here (text only)"),
                        ))
                    }
                    _ => return Err(wrong_type(field, "a string or text blocks", b)),
                }
            }
            Ok(out.join("\n"))
        }
        v => Err(wrong_type(field, "a string or a list of content blocks", v)),
    }
}

/// One Anthropic message as chat-completions messages (a user turn's `tool_result`
/// blocks become `tool` messages before its text).
fn messages_of(i: usize, m: &Value, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let at = format!("messages[{i}]");
    let role = m.get("role").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid(
            format!("{at}.role"),
            "a message needs a 'role' (user or assistant)",
        )
    })?;
    if role != "user" && role != "assistant" {
        return Err(ApiError::invalid(
            format!("{at}.role"),
            format!("'role' must be user or assistant, not '{role}'"),
        ));
    }
    let blocks = match m.get("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(b)) => b,
        Some(v) => {
            return Err(wrong_type(
                &format!("{at}.content"),
                "a string or blocks",
                v,
            ))
        }
        None => {
            return Err(ApiError::invalid(
                format!("{at}.content"),
                "a message needs 'content'",
            ))
        }
    };
    let mut text = Vec::new();
    let mut calls = Vec::new();
    let mut thinking = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let field = format!("{at}.content[{j}]");
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push(b.get("text").and_then(Value::as_str).unwrap_or("")),
            // Earlier reasoning goes back to the template as `reasoning_content` (templates
            // of reasoning models replay it around tool calls); redacted reasoning is opaque.
            Some("thinking") => {
                thinking.push(b.get("thinking").and_then(Value::as_str).unwrap_or(""))
            }
            Some("redacted_thinking") => {}
            Some("tool_use") => {
                let name = b.get("name").and_then(Value::as_str).unwrap_or("");
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({"id": b.get("id"), "type": "function",
                    "function": {"name": name, "arguments": input.to_string()}}));
            }
            Some("tool_result") => {
                let mut content = text_of(b.get("content").unwrap_or(&Value::Null), &field)?;
                if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                    content = format!("Error: {content}");
                }
                out.push(json!({"role": "tool", "tool_call_id": b.get("tool_use_id"),
                                "content": content}));
            }
            Some(kind) => {
                return Err(ApiError::unsupported(
                    &field,
                    &format!("content blocks of type '{kind}' (text, tool_use, tool_result)"),
                ))
            }
            None => return Err(wrong_type(&field, "a content block with a 'type'", b)),
        }
    }
    if !text.is_empty() || !calls.is_empty() || !thinking.is_empty() {
        let mut msg = json!({"role": role, "content": text.join("\n")});
        if !calls.is_empty() {
            msg["tool_calls"] = Value::Array(calls);
        }
        if role == "assistant" && !thinking.is_empty() {
            msg["reasoning_content"] = json!(thinking.join("\n"));
        }
        out.push(msg);
    }
    Ok(())
}

/// An Anthropic Messages body as a chat-completions body.
pub(crate) fn to_chat_body(bytes: &[u8]) -> Result<Body, ApiError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    let Value::Object(a) = v else {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    };
    let mut msgs = Vec::new();
    if let Some(s) = a.get("system").filter(|s| !s.is_null()) {
        msgs.push(json!({"role": "system", "content": text_of(s, "system")?}));
    }
    match a.get("messages") {
        Some(Value::Array(list)) => {
            for (i, m) in list.iter().enumerate() {
                messages_of(i, m, &mut msgs)?;
            }
        }
        Some(v) => return Err(wrong_type("messages", "a list of messages", v)),
        None => return Err(ApiError::invalid("messages", "'messages' is required")),
    }
    let mut o = Map::new();
    o.insert("messages".into(), Value::Array(msgs));
    for (from, to) in [
        ("max_tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("top_k", "top_k"),
        ("stop_sequences", "stop"),
        ("stream", "stream"),
    ] {
        if let Some(v) = a.get(from) {
            o.insert(to.into(), v.clone());
        }
    }
    if let Some(Value::Array(tools)) = a.get("tools") {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {"name": t.get("name"),
                    "description": t.get("description"),
                    "parameters": t.get("input_schema")}})
            })
            .collect();
        o.insert("tools".into(), Value::Array(tools));
    }
    if let Some(tc) = a.get("tool_choice").filter(|v| !v.is_null()) {
        let choice = match tc.get("type").and_then(Value::as_str) {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => json!({"type": "function", "function": {"name": tc.get("name")}}),
            _ => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    "'tool_choice' must be {\"type\": auto | any | tool | none}",
                ))
            }
        };
        o.insert("tool_choice".into(), choice);
        if let Some(d) = tc.get("disable_parallel_tool_use").and_then(Value::as_bool) {
            o.insert("parallel_tool_calls".into(), json!(!d));
        }
    }
    match a
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
    {
        Some("enabled") => {
            o.insert(
                "chat_template_kwargs".into(),
                json!({"enable_thinking": true}),
            );
        }
        Some("disabled") => {
            o.insert(
                "chat_template_kwargs".into(),
                json!({"enable_thinking": false}),
            );
        }
        _ => {}
    }
    Body::parse(Value::Object(o).to_string().as_bytes())
}

/// `stop_reason` and `stop_sequence` of a finished reply.
/// A call cut off by `max_tokens` is `max_tokens`: its input is not whole.
fn stop_of(c: &Completion, tool_calls: bool) -> (&'static str, Value) {
    match &c.stop {
        StopReason::MaxTokens | StopReason::ContextFull => ("max_tokens", Value::Null),
        _ if tool_calls => ("tool_use", Value::Null),
        StopReason::StopString(s) => ("stop_sequence", json!(s)),
        _ => ("end_turn", Value::Null),
    }
}

/// A tool call's `input` (its arguments as an object).
fn input_of(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| json!({}))
}

/// Content blocks of a reply.
fn blocks(r: &ParsedReply) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(t) = r.reasoning.as_ref().filter(|t| !t.is_empty()) {
        out.push(json!({"type": "thinking", "thinking": t, "signature": ""}));
    }
    if !r.content.is_empty() || r.tool_calls.is_empty() {
        out.push(json!({"type": "text", "text": r.content}));
    }
    for c in &r.tool_calls {
        out.push(json!({"type": "tool_use", "id": c.id, "name": c.name,
                        "input": input_of(&c.arguments)}));
    }
    out
}

fn usage(c: &Completion) -> Value {
    json!({"input_tokens": c.prompt_tokens, "output_tokens": c.tokens.len(),
           "cache_read_input_tokens": c.cached_tokens, "cache_creation_input_tokens": 0})
}

/// `POST /v1/messages`.
pub(crate) async fn messages(
    axum::extract::State(st): St,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let bytes = body_bytes(&st, bytes)?;
        let l = ready(&st)?;
        let (prompt, mut opts) = prepare_chat(&st, &l, bytes, to_chat_body).await?;
        opts.n = 1;
        opts.include_usage = true;
        let input_tokens = prompt.len();
        let run = submit(&l.handle, vec![prompt], &opts, "msg_")?;
        if opts.stream {
            let s = stream_state(
                st.clone(),
                l.clone(),
                run,
                opts,
                crate::params::Endpoint::Chat,
            );
            return Ok(stream(st.clone(), s, input_tokens).into_response());
        }
        let (run, done) = wait_all_timed(&st, run).await?;
        let c = done
            .first()
            .ok_or_else(|| ApiError::server("no reply was generated"))?;
        let reply = match &opts.reply {
            Some(syntax) => syntax.parse(&c.text),
            None => ParsedReply {
                content: c.text.clone(),
                ..ParsedReply::default()
            },
        };
        let (stop_reason, stop_sequence) = stop_of(c, !reply.tool_calls.is_empty());
        Ok::<_, ApiError>(
            Json(json!({
                "id": run.id,
                "type": "message",
                "role": "assistant",
                "model": st.model_id,
                "content": blocks(&reply),
                "stop_reason": stop_reason,
                "stop_sequence": stop_sequence,
                "usage": usage(c),
            }))
            .into_response(),
        )
    };
    run.await.unwrap_or_else(error_response)
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens, as the conversation renders.
pub(crate) async fn count_tokens(
    axum::extract::State(st): St,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let bytes = body_bytes(&st, bytes)?;
        let l = ready(&st)?;
        let (prompt, _) = prepare_chat(&st, &l, bytes, |b| {
            let mut body = to_chat_body(b)?;
            // Counting generates nothing: drop the fields that would refuse it.
            body.take("stream");
            Ok(body)
        })
        .await?;
        Ok::<_, ApiError>(Json(json!({"input_tokens": prompt.len()})).into_response())
    };
    run.await.unwrap_or_else(error_response)
}

/// Anthropic's stream: `message_start`, then per content block `content_block_start`,
/// its `content_block_delta`s and `content_block_stop`, then `message_delta` (stop
/// reason, usage) and `message_stop`.
struct Translator {
    p: Pump,
    st: Arc<AppState>,
    input_tokens: usize,
    /// The open block: its index and kind (`text`, `thinking`).
    open: Option<(usize, &'static str)>,
    next_index: usize,
}

fn event(kind: &str, data: Value) -> SseEvent {
    SseEvent::default().event(kind).data(data.to_string())
}

impl Translator {
    fn close_block(&mut self) {
        if let Some((i, _)) = self.open.take() {
            self.p.out.push_back(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": i}),
            ));
        }
    }

    /// Makes sure a block of `kind` is open (closing another kind), and gives its index.
    fn block(&mut self, kind: &'static str, start: Value) -> usize {
        if let Some((i, k)) = self.open {
            if k == kind {
                return i;
            }
        }
        self.close_block();
        let i = self.next_index;
        self.next_index += 1;
        self.open = Some((i, kind));
        self.p.out.push_back(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": start}),
        ));
        i
    }

    /// Turns one chat-completions chunk into Anthropic events.
    fn chunk(&mut self, chunk: &str) {
        if chunk == "[DONE]" {
            self.close_block();
            self.p
                .out
                .push_back(event("message_stop", json!({"type": "message_stop"})));
            self.p.done = true;
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(chunk) else {
            return;
        };
        if let Some(e) = v.get("error") {
            self.p.out.push_back(event(
                "error",
                json!({"type": "error", "error": {"type": "api_error", "message": e["message"]}}),
            ));
            self.p.done = true;
            return;
        }
        let Some(choice) = v["choices"].get(0) else {
            return; // the usage chunk: `message_delta` carries the usage
        };
        let d = &choice["delta"];
        if let Some(t) = d.get("reasoning_content").and_then(Value::as_str) {
            let start = json!({"type": "thinking", "thinking": "", "signature": ""});
            let i = self.block("thinking", start);
            self.p.out.push_back(event(
                "content_block_delta",
                json!({"type": "content_block_delta",
                "index": i, "delta": {"type": "thinking_delta", "thinking": t}}),
            ));
        }
        if let Some(t) = d
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            let i = self.block("text", json!({"type": "text", "text": ""}));
            self.p.out.push_back(event(
                "content_block_delta",
                json!({"type": "content_block_delta",
                "index": i, "delta": {"type": "text_delta", "text": t}}),
            ));
        }
        // A call's first piece (with its id) opens a `tool_use` block; each piece of its
        // arguments is an `input_json_delta`.
        if let Some(calls) = d.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                let f = &c["function"];
                if c.get("id").is_some() {
                    self.close_block();
                    self.block(
                        "tool_use",
                        json!({"type": "tool_use", "id": c["id"],
                        "name": f["name"], "input": {}}),
                    );
                }
                let args = f["arguments"].as_str().unwrap_or("");
                if let (Some((i, "tool_use")), false) = (self.open, args.is_empty()) {
                    self.p.out.push_back(event(
                        "content_block_delta",
                        json!({"type": "content_block_delta",
                        "index": i, "delta": {"type": "input_json_delta", "partial_json": args}}),
                    ));
                }
            }
        }
        if choice["finish_reason"].is_string() {
            self.close_block();
            let calls = choice["finish_reason"] == "tool_calls";
            let (reason, seq, out_tokens) = match self.p.s.done.first().and_then(Option::as_ref) {
                Some(c) => {
                    let (r, s) = stop_of(c, calls);
                    (r, s, c.tokens.len())
                }
                None => ("end_turn", Value::Null, 0),
            };
            self.p.out.push_back(event(
                "message_delta",
                json!({"type": "message_delta",
                       "delta": {"stop_reason": reason, "stop_sequence": seq},
                       "usage": {"output_tokens": out_tokens}}),
            ));
        }
    }
}

impl Translate for Translator {
    fn pump(&mut self) -> &mut Pump {
        &mut self.p
    }

    fn start(&mut self) {
        let msg = json!({"type": "message_start", "message": {
            "id": self.p.s.run_id(), "type": "message", "role": "assistant",
            "content": [], "model": self.st.model_id, "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}}});
        self.p.out.push_back(event("message_start", msg));
    }

    fn on_chunk(&mut self, chunk: &str) {
        self.chunk(chunk)
    }
}

fn stream(
    st: Arc<AppState>,
    s: StreamState,
    input_tokens: usize,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    translate::sse(Translator {
        p: Pump::new(s),
        st,
        input_tokens,
        open: None,
        next_index: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_translate_to_chat_bodies() {
        let b = to_chat_body(
            br#"{"model": "x", "max_tokens": 50, "system": [{"type": "text", "text": "Be brief."}],
                 "stop_sequences": ["END"],
                 "tools": [{"name": "add", "description": "Adds", "input_schema": {"type": "object"}}],
                 "tool_choice": {"type": "tool", "name": "add", "disable_parallel_tool_use": true},
                 "messages": [
                   {"role": "user", "content": "add 1 and 2"},
                   {"role": "assistant", "content": [{"type": "thinking", "thinking": "Add them.", "signature": ""},
                     {"type": "text", "text": "Sure."},
                     {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"},
                     {"type": "text", "text": "thanks"}]}]}"#,
        )
        .unwrap();
        let m = b.get("messages").unwrap().as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"a":1,"b":2}"#
        );
        // Interleaved thinking goes back to the template as the message's reasoning.
        assert_eq!(m[2]["reasoning_content"], "Add them.");
        assert_eq!(m[2]["content"], "Sure.");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "toolu_1", "content": "3"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "thanks"}));
        assert_eq!(b.get("stop").unwrap(), &json!(["END"]));
        assert_eq!(b.get("tool_choice").unwrap()["function"]["name"], "add");
        assert_eq!(b.get("parallel_tool_calls").unwrap(), &json!(false));
        assert_eq!(
            b.get("tools").unwrap()[0]["function"]["parameters"],
            json!({"type": "object"})
        );
        for bad in [
            r#"{"messages": [{"role": "system", "content": "x"}]}"#,
            r#"{"messages": [{"role": "user", "content": [{"type": "image"}]}]}"#,
            r#"{"max_tokens": 5}"#,
            r#"{"messages": [], "tool_choice": {"type": "sometimes"}}"#,
        ] {
            assert!(to_chat_body(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
