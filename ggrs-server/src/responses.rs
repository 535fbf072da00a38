//! OpenAI's Responses API, stateless, on the chat engine: `POST /v1/responses` with
//! `input` (a string or items: messages, `function_call`, `function_call_output`),
//! `instructions`, function `tools`, `tool_choice`, `text.format` (structured output),
//! `max_output_tokens`, and streaming (`response.created` … `response.completed`). A request
//! is translated into a chat-completions body and prepared as one ([`prepare_chat`]).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ggrs_llama::chat::tools::{ParsedReply, ToolCall};
use ggrs_llama::engine::Completion;
use ggrs_llama::StopReason;
use serde_json::{json, Map, Value};

use crate::completions::{prepare_chat, stream_state, submit, wait_all_timed, StreamState};
use crate::error::ApiError;
use crate::handler::{body_bytes, ready, St};
use crate::json_values::wrong_type;
use crate::params::{Body, Endpoint};
use crate::state::{unix_now, AppState};
use crate::translate::{self, Pump, Translate};

/// The text of a message item's `content`: a string or `input_text`/`output_text` parts.
fn content_text(v: Option<&Value>, field: &str) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for p in parts {
                match p.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text" | "text") => {
                        out.push_str(p.get("text").and_then(Value::as_str).unwrap_or(""))
                    }
                    Some(kind) => {
                        return Err(ApiError::unsupported(
                            field,
                            &format!("content of type '{kind}' (text only)"),
                        ))
                    }
                    None => return Err(wrong_type(field, "text parts", p)),
                }
            }
            Ok(out)
        }
        Some(v) => Err(wrong_type(field, "a string or a list of parts", v)),
    }
}

/// A Responses body as a chat-completions body (and the request's fields a response
/// echoes).
pub(crate) fn to_chat_body(bytes: &[u8]) -> Result<(Body, Map<String, Value>), ApiError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    let Value::Object(a) = v else {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    };
    if a.get("previous_response_id").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::unsupported(
            "previous_response_id",
            "responses are not stored; send the whole conversation in 'input'",
        ));
    }
    let mut msgs: Vec<Value> = Vec::new();
    if let Some(i) = a.get("instructions").and_then(Value::as_str) {
        msgs.push(json!({"role": "system", "content": i}));
    }
    match a.get("input") {
        Some(Value::String(s)) => msgs.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, it) in items.iter().enumerate() {
                let field = format!("input[{i}]");
                match it.get("type").and_then(Value::as_str) {
                    None | Some("message") => {
                        let role = it.get("role").and_then(Value::as_str).unwrap_or("user");
                        let text = content_text(it.get("content"), &field)?;
                        msgs.push(json!({"role": role, "content": text}));
                    }
                    Some("function_call") => {
                        let call = json!({"id": it.get("call_id"), "type": "function",
                            "function": {"name": it.get("name"),
                                         "arguments": it.get("arguments")}});
                        // Calls of one turn go into one assistant message.
                        match msgs.last_mut() {
                            Some(m)
                                if m["role"] == "assistant" && m.get("tool_calls").is_some() =>
                            {
                                if let Some(c) = m["tool_calls"].as_array_mut() {
                                    c.push(call);
                                }
                            }
                            _ => msgs.push(
                                json!({"role": "assistant", "content": "", "tool_calls": [call]}),
                            ),
                        }
                    }
                    Some("function_call_output") => {
                        let out = match it.get("output") {
                            Some(Value::String(s)) => s.clone(),
                            o => content_text(o, &field)?,
                        };
                        msgs.push(json!({"role": "tool", "tool_call_id": it.get("call_id"),
                                         "content": out}));
                    }
                    Some("reasoning") => {}
                    Some(kind) => {
                        return Err(ApiError::unsupported(
                            &field,
                            &format!("input items of type '{kind}'"),
                        ))
                    }
                }
            }
        }
        Some(v) => return Err(wrong_type("input", "a string or a list of items", v)),
        None => return Err(ApiError::invalid("input", "'input' is required")),
    }
    let mut o = Map::new();
    o.insert("messages".into(), Value::Array(msgs));
    for (from, to) in [
        ("max_output_tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("stream", "stream"),
        ("parallel_tool_calls", "parallel_tool_calls"),
    ] {
        if let Some(v) = a.get(from).filter(|v| !v.is_null()) {
            o.insert(to.into(), v.clone());
        }
    }
    if let Some(Value::Array(tools)) = a.get("tools") {
        let mut list = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::unsupported(
                    &format!("tools[{i}]"),
                    "tools other than functions (web search, file search, …)",
                ));
            }
            list.push(
                json!({"type": "function", "function": {"name": t.get("name"),
                "description": t.get("description"), "parameters": t.get("parameters")}}),
            );
        }
        o.insert("tools".into(), Value::Array(list));
    }
    if let Some(tc) = a.get("tool_choice").filter(|v| !v.is_null()) {
        let choice = match tc {
            Value::String(_) => tc.clone(),
            _ => json!({"type": "function", "function": {"name": tc.get("name")}}),
        };
        o.insert("tool_choice".into(), choice);
    }
    if let Some(f) = a.get("text").and_then(|t| t.get("format")) {
        let rf = match f.get("type").and_then(Value::as_str) {
            Some("json_schema") => json!({"type": "json_schema", "json_schema": {
                "name": f.get("name"), "schema": f.get("schema"), "strict": f.get("strict")}}),
            _ => f.clone(),
        };
        o.insert("response_format".into(), rf);
    }
    let mut echo = Map::new();
    for k in [
        "instructions",
        "tools",
        "tool_choice",
        "temperature",
        "top_p",
        "max_output_tokens",
        "parallel_tool_calls",
        "metadata",
        "text",
        "reasoning",
    ] {
        echo.insert(k.into(), a.get(k).cloned().unwrap_or(Value::Null));
    }
    Ok((Body::parse(Value::Object(o).to_string().as_bytes())?, echo))
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn call_item(c: &ToolCall, status: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{}", c.id), "call_id": c.id,
           "name": c.name, "arguments": c.arguments, "status": status})
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [],
           "content": [{"type": "reasoning_text", "text": text}]})
}

/// The response object.
fn response(
    st: &AppState,
    id: &str,
    created: u64,
    echo: &Map<String, Value>,
    status: &str,
    output: Vec<Value>,
    c: Option<&Completion>,
) -> Value {
    let mut v = json!({"id": id, "object": "response", "created_at": created, "status": status,
        "model": st.model_id, "output": output, "error": null, "incomplete_details": null,
        "previous_response_id": null, "store": false});
    for (k, x) in echo {
        v[k] = x.clone();
    }
    if v["tool_choice"].is_null() {
        v["tool_choice"] = json!("auto");
    }
    if v["tools"].is_null() {
        v["tools"] = json!([]);
    }
    if v["parallel_tool_calls"].is_null() {
        v["parallel_tool_calls"] = json!(false);
    }
    if v["text"].is_null() {
        v["text"] = json!({"format": {"type": "text"}});
    }
    if let Some(c) = c {
        if matches!(c.stop, StopReason::MaxTokens | StopReason::ContextFull) {
            v["status"] = json!("incomplete");
            v["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        let out = c.tokens.len();
        v["usage"] = json!({"input_tokens": c.prompt_tokens,
            "input_tokens_details": {"cached_tokens": c.cached_tokens},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": c.prompt_tokens + out});
    }
    v
}

/// The output items of a finished reply.
fn output(id: &str, r: &ParsedReply) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(t) = &r.reasoning {
        out.push(reasoning_item(&format!("rs_{id}"), t));
    }
    if !r.content.is_empty() || r.tool_calls.is_empty() {
        out.push(message_item(&format!("msg_{id}"), &r.content, "completed"));
    }
    out.extend(r.tool_calls.iter().map(|c| call_item(c, "completed")));
    out
}

/// `POST /v1/responses`.
pub(crate) async fn responses(
    axum::extract::State(st): St,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let bytes = body_bytes(&st, bytes)?;
        let l = ready(&st)?;
        let echo = Arc::new(std::sync::Mutex::new(Map::new()));
        let echo2 = echo.clone();
        let (prompt, mut opts) = prepare_chat(&st, &l, bytes, move |b| {
            let (body, e) = to_chat_body(b)?;
            *echo2.lock().unwrap_or_else(|p| p.into_inner()) = e;
            Ok(body)
        })
        .await?;
        let echo = std::mem::take(&mut *echo.lock().unwrap_or_else(|p| p.into_inner()));
        opts.n = 1;
        let run = submit(&l.handle, vec![prompt], &opts, "resp_")?;
        let created = unix_now();
        if opts.stream {
            let s = stream_state(st.clone(), l.clone(), run, opts, Endpoint::Chat);
            return Ok(stream(st.clone(), s, echo, created).into_response());
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
        let out = output(&run.id, &reply);
        let v = response(&st, &run.id, created, &echo, "completed", out, Some(c));
        Ok::<_, ApiError>(Json(v).into_response())
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// Turns the chat chunks into the Responses stream's events.
struct Translator {
    p: Pump,
    st: Arc<AppState>,
    echo: Map<String, Value>,
    created: u64,
    seq: u64,
    /// The open item: its output index, kind (`message`, `reasoning`, `function_call`),
    /// text (or arguments) so far.
    open: Option<(usize, &'static str, String)>,
    /// The open `function_call` item's call.
    call: Option<ToolCall>,
    items: Vec<Value>,
}

impl Translator {
    fn emit(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.p
            .out
            .push_back(SseEvent::default().event(kind).data(data.to_string()));
    }

    fn id(&self) -> String {
        self.p.s.run_id().to_string()
    }

    fn item_id(&self, kind: &str, index: usize) -> String {
        let p = if kind == "message" { "msg" } else { "rs" };
        format!("{p}_{}_{index}", self.id())
    }

    fn close(&mut self) {
        let Some((i, kind, text)) = self.open.take() else {
            return;
        };
        if kind == "function_call" {
            let Some(mut call) = self.call.take() else {
                return;
            };
            call.arguments = text;
            let id = format!("fc_{}", call.id);
            self.emit(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": i, "arguments": call.arguments}),
            );
            let item = call_item(&call, "completed");
            self.emit(
                "response.output_item.done",
                json!({"output_index": i, "item": item}),
            );
            self.items.push(item);
            return;
        }
        let id = self.item_id(kind, i);
        let item = if kind == "message" {
            let part = json!({"type": "output_text", "text": text, "annotations": []});
            self.emit(
                "response.output_text.done",
                json!({"item_id": id, "output_index": i,
                "content_index": 0, "text": text}),
            );
            self.emit(
                "response.content_part.done",
                json!({"item_id": id, "output_index": i,
                "content_index": 0, "part": part}),
            );
            message_item(&id, &text, "completed")
        } else {
            self.emit(
                "response.reasoning_text.done",
                json!({"item_id": id, "output_index": i,
                "content_index": 0, "text": text}),
            );
            reasoning_item(&id, &text)
        };
        self.emit(
            "response.output_item.done",
            json!({"output_index": i, "item": item}),
        );
        self.items.push(item);
    }

    /// Appends `text` to an item of `kind`, opening it (and closing another) first.
    fn text(&mut self, kind: &'static str, text: &str) {
        if !matches!(&self.open, Some((_, k, _)) if *k == kind) {
            self.close();
            let i = self.items.len();
            let id = self.item_id(kind, i);
            let item = if kind == "message" {
                json!({"type": "message", "id": id, "status": "in_progress",
                       "role": "assistant", "content": []})
            } else {
                json!({"type": "reasoning", "id": id, "summary": [],
                       "content": [{"type": "reasoning_text", "text": ""}]})
            };
            self.emit(
                "response.output_item.added",
                json!({"output_index": i, "item": item}),
            );
            if kind == "message" {
                self.emit(
                    "response.content_part.added",
                    json!({"item_id": id,
                    "output_index": i, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []}}),
                );
            }
            self.open = Some((i, kind, String::new()));
        }
        let Some((i, _, acc)) = self.open.as_mut() else {
            return;
        };
        acc.push_str(text);
        let i = *i;
        let id = self.item_id(kind, i);
        let event = if kind == "message" {
            "response.output_text.delta"
        } else {
            "response.reasoning_text.delta"
        };
        self.emit(
            event,
            json!({"item_id": id, "output_index": i, "content_index": 0, "delta": text}),
        );
    }

    /// A piece of a call: the first (with its id) adds a `function_call` item, the next
    /// ones its arguments' deltas; the item is done when another item starts or the
    /// stream ends.
    fn call(&mut self, c: &Value) {
        let f = &c["function"];
        if c.get("id").is_some() {
            self.close();
            let i = self.items.len();
            let call = ToolCall {
                id: c["id"].as_str().unwrap_or("").to_string(),
                name: f["name"].as_str().unwrap_or("").to_string(),
                arguments: String::new(),
            };
            let added = call_item(&call, "in_progress");
            self.emit(
                "response.output_item.added",
                json!({"output_index": i, "item": added}),
            );
            self.open = Some((i, "function_call", String::new()));
            self.call = Some(call);
        }
        let args = f["arguments"].as_str().unwrap_or("");
        if args.is_empty() {
            return;
        }
        let Some((i, "function_call", acc)) = self.open.as_mut() else {
            return;
        };
        acc.push_str(args);
        let i = *i;
        let id = self.call.as_ref().map(|c| format!("fc_{}", c.id));
        self.emit(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": i, "delta": args}),
        );
    }

    fn chunk(&mut self, chunk: &str) {
        if chunk == "[DONE]" {
            self.close();
            let c = self.p.s.done.first().cloned().flatten();
            let id = self.id();
            let items = std::mem::take(&mut self.items);
            let r = response(
                &self.st,
                &id,
                self.created,
                &self.echo,
                "completed",
                items,
                c.as_ref(),
            );
            let kind = if r["status"] == "incomplete" {
                "response.incomplete"
            } else {
                "response.completed"
            };
            self.emit(kind, json!({"response": r}));
            self.p.done = true;
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(chunk) else {
            return;
        };
        if let Some(e) = v.get("error") {
            self.emit(
                "error",
                json!({"code": "server_error", "message": e["message"], "param": null}),
            );
            self.p.done = true;
            return;
        }
        let Some(choice) = v["choices"].get(0) else {
            return;
        };
        let d = &choice["delta"];
        if let Some(t) = d.get("reasoning_content").and_then(Value::as_str) {
            self.text("reasoning", t);
        }
        if let Some(t) = d
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.text("message", t);
        }
        if let Some(calls) = d.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                self.call(c);
            }
        }
    }
}

impl Translate for Translator {
    fn pump(&mut self) -> &mut Pump {
        &mut self.p
    }

    fn start(&mut self) {
        let id = self.id();
        let r = response(
            &self.st,
            &id,
            self.created,
            &self.echo,
            "in_progress",
            vec![],
            None,
        );
        self.emit("response.created", json!({"response": r}));
        self.emit("response.in_progress", json!({"response": r}));
    }

    fn on_chunk(&mut self, chunk: &str) {
        self.chunk(chunk)
    }
}

fn stream(
    st: Arc<AppState>,
    s: StreamState,
    echo: Map<String, Value>,
    created: u64,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    translate::sse(Translator {
        p: Pump::new(s),
        st,
        echo,
        created,
        seq: 0,
        open: None,
        call: None,
        items: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_translate_to_chat_bodies() {
        let (b, echo) = to_chat_body(
            br#"{"model": "m", "instructions": "Be brief.", "max_output_tokens": 20,
                 "tools": [{"type": "function", "name": "add", "parameters": {"type": "object"}}],
                 "tool_choice": {"type": "function", "name": "add"},
                 "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
                 "input": [{"role": "user", "content": [{"type": "input_text", "text": "1+2?"}]},
                           {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"},
                           {"type": "function_call_output", "call_id": "c1", "output": "3"}]}"#,
        )
        .unwrap();
        let m = b.get("messages").unwrap();
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[1]["content"], "1+2?");
        assert_eq!(m[2]["tool_calls"][0]["id"], "c1");
        assert_eq!(m[3]["role"], "tool");
        assert_eq!(b.get("max_tokens").unwrap(), &json!(20));
        assert_eq!(b.get("tool_choice").unwrap()["function"]["name"], "add");
        assert_eq!(
            b.get("response_format").unwrap()["json_schema"]["schema"],
            json!({"type": "object"})
        );
        assert_eq!(echo["instructions"], "Be brief.");
        for bad in [
            r#"{"input": 3}"#,
            r#"{"model": "m"}"#,
            r#"{"input": "x", "previous_response_id": "resp_1"}"#,
            r#"{"input": "x", "tools": [{"type": "web_search"}]}"#,
        ] {
            assert!(to_chat_body(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
