//! Tool calling: the tools a request offers, how the model's chat template writes a call
//! ([`ToolFormat`], detected from the template as llama.cpp's `common/chat.cpp` detects
//! it), the grammar that forces a valid call (`tool_choice` `required` or a named function)
//! or checks one once the model starts it (`auto`: a lazy grammar, engaged by the format's
//! opening tag), and the parser that turns the generated text back into
//! [`ToolCall`]s.
//!
//! Formats:
//! - [`ToolFormat::Hermes`] (Qwen2.5, Qwen3, Hermes 2 Pro, templates writing
//!   `<tool_call>`): `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`, one block
//!   per call;
//! - [`ToolFormat::Llama3`] (Llama 3.1–3.3, templates with an `ipython` role): the reply is
//!   a JSON object `{"name": …, "parameters": {…}}` (after an optional `<|python_tag|>`);
//! - [`ToolFormat::Mistral`] (Mistral Nemo and later, templates writing `[TOOL_CALLS]`):
//!   `[TOOL_CALLS][{"name": …, "arguments": {…}, "id": …}, …]`;
//! - [`ToolFormat::Qwen3Coder`] (Qwen3-Coder, Qwen3.5, Nemotron Nano 3: templates writing
//!   `<function=` and `<parameter=` inside `<tool_call>`):
//!   `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>`;
//! - [`ToolFormat::Lfm2`] (LiquidAI's LFM2 and LFM2.5, templates writing
//!   `<|tool_list_start|>` or `List of tools: [`):
//!   `<|tool_call_start|>[name(key="value", n=1)]<|tool_call_end|>`;
//! - [`ToolFormat::Generic`] (any template that does not know tools): the tools are
//!   described in the system message and the whole reply is JSON, `{"tool_call": {"name",
//!   "arguments"}}` (`{"tool_calls": […]}` when parallel calls are allowed) or
//!   `{"response": "…"}`, always under a grammar.
//!
//! ```
//! use ggrs_llama::chat::tools::{ToolChoice, ToolFormat, ToolSetup};
//! let tools = serde_json::json!([{"type": "function", "function": {"name": "get_weather",
//!     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
//! let setup = ToolSetup::new(ToolFormat::Hermes, &tools, ToolChoice::Auto, true).unwrap();
//! let reply = setup.parse(
//!     "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
//! );
//! assert_eq!(reply.content, "Let me look.");
//! assert_eq!(reply.tool_calls[0].name, "get_weather");
//! assert_eq!(reply.tool_calls[0].arguments, r#"{"city":"Paris"}"#);
//! ```

use serde_json::{json, Value};

use super::call_syntax::{self, Step, LFM2_CLOSE, LFM2_OPEN, XML_CLOSE, XML_OPEN};
use super::json_scan;
use super::message::Message;
pub use super::message::ToolCall;
use crate::constraint::{with_json_options, GrammarSpec, LazyTrigger};
use crate::tokenizer::{TokenType, Tokenizer};

/// One function a request offers.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// The JSON Schema of its arguments (`{"type": "object"}` when none was given).
    pub parameters: Value,
}

/// How the model's template writes tool calls (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name", "arguments"}</tool_call>` (Qwen, Hermes).
    Hermes,
    /// A bare `{"name", "parameters"}` object (Llama 3.x).
    Llama3,
    /// `[TOOL_CALLS][{"name", "arguments", "id"}]` (Mistral).
    Mistral,
    /// JSON replies described in the system message (templates without tools).
    Generic,
    /// GPT-OSS's harmony messages: a call is a `commentary` message to
    /// `functions.NAME` whose body is the JSON arguments.
    Harmony,
    /// Gemma 4: `<|tool_call>call:NAME{key:value,…}<tool_call|>`, strings between
    /// `<|"|>` marks.
    Gemma4,
    /// Qwen3-Coder's XML blocks (Qwen3.5 too):
    /// `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>`.
    Qwen3Coder,
    /// LFM2's Python-style lists: `<|tool_call_start|>[name(key="value")]<|tool_call_end|>`.
    Lfm2,
}

impl ToolFormat {
    /// The format a Jinja template's source writes (llama.cpp's detection by the markers in
    /// the template); [`ToolFormat::Generic`] for a template that does not mention tools
    /// or for none (built-in formats).
    pub fn detect(template_source: Option<&str>) -> ToolFormat {
        let Some(src) = template_source else {
            return ToolFormat::Generic;
        };
        if src.contains("<|channel|>") {
            ToolFormat::Harmony
        } else if src.contains("<|tool_call>call:") {
            ToolFormat::Gemma4
        } else if (src.contains("<|tool_list_start|>") && src.contains("<|tool_list_end|>"))
            || src.contains("List of tools: [")
        {
            // llama.cpp's LFM2 and LFM2.5 detections.
            ToolFormat::Lfm2
        } else if src.contains("<tool_call>")
            && src.contains("<function=")
            && src.contains("<parameter=")
            && !src.contains("'<tool_call><function=' ~ tool_call.name ~ '>'")
        {
            ToolFormat::Qwen3Coder
        } else if src.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if src.contains("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if src.contains("<|start_header_id|>ipython<|end_header_id|>") {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// The format `template` writes: a Jinja template's by [`ToolFormat::detect`], the
    /// built-in `gpt-oss` format's [`ToolFormat::Harmony`], any other built-in format's
    /// [`ToolFormat::Generic`].
    pub fn of_template(template: &crate::chat::ChatTemplate) -> ToolFormat {
        use crate::chat::{ChatTemplate, NamedFormat};
        match template {
            ChatTemplate::Jinja { source, .. } => ToolFormat::detect(Some(source)),
            ChatTemplate::Named(NamedFormat::GptOss) => ToolFormat::Harmony,
            _ => ToolFormat::Generic,
        }
    }

    /// The format's name, as llama-server reports it.
    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "Hermes 2 Pro",
            ToolFormat::Llama3 => "Llama 3.x",
            ToolFormat::Mistral => "Mistral Nemo",
            ToolFormat::Generic => "Generic",
            ToolFormat::Harmony => "GPT-OSS",
            ToolFormat::Gemma4 => "Gemma 4",
            ToolFormat::Qwen3Coder => "Qwen3 Coder",
            ToolFormat::Lfm2 => "LFM2",
        }
    }
}

/// `params` (a function's parameter schema) made to sit inside a larger schema: its
/// root `$defs`/`definitions` go to `defs` named `prefix` + their name, and its local
/// references (`#…`) are rewritten to match (one to the root itself, or into it, points
/// to a copy of the root kept in `defs` as `prefix` + `root`).
fn hoist_defs(params: &Value, prefix: &str, defs: &mut serde_json::Map<String, Value>) -> Value {
    fn rewrite(v: &mut Value, prefix: &str, root_used: &mut bool) {
        match v {
            Value::Array(a) => a.iter_mut().for_each(|x| rewrite(x, prefix, root_used)),
            Value::Object(o) => {
                for (k, x) in o.iter_mut() {
                    match (k.as_str(), &*x) {
                        ("$ref", Value::String(r)) if r.starts_with('#') => {
                            let local = &r[1..];
                            let to = ["/$defs/", "/definitions/"]
                                .iter()
                                .find_map(|d| local.strip_prefix(d));
                            *x = Value::String(match to {
                                Some(rest) => format!("#/$defs/{prefix}{rest}"),
                                None => {
                                    *root_used = true;
                                    format!("#/$defs/{prefix}root{local}")
                                }
                            });
                        }
                        ("enum" | "const" | "default" | "examples", _) => {}
                        _ => rewrite(x, prefix, root_used),
                    }
                }
            }
            _ => {}
        }
    }
    let mut p = params.clone();
    let mut root_used = false;
    if let Some(o) = p.as_object_mut() {
        for key in ["$defs", "definitions"] {
            if let Some(Value::Object(d)) = o.remove(key) {
                for (name, mut def) in d {
                    rewrite(&mut def, prefix, &mut root_used);
                    defs.insert(format!("{prefix}{name}"), def);
                }
            }
        }
    }
    rewrite(&mut p, prefix, &mut root_used);
    if root_used {
        defs.insert(format!("{prefix}root"), p.clone());
    }
    p
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model chooses whether to call tools.
    Auto,
    /// No tool is called (the tools are still shown to the model).
    None,
    /// At least one call.
    Required,
    /// A call of this function.
    Named(String),
}

/// Why a request's tools cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// A tool that is not `{"type": "function", "function": {"name": …}}`.
    #[error("tools[{index}]: {why}")]
    BadTool {
        /// Its index in `tools`.
        index: usize,
        /// What is wrong.
        why: String,
    },
    /// `tool_choice` names a function that is not among the tools.
    #[error("tool_choice names the function '{0}', which is not among the tools")]
    UnknownChoice(String),
}

/// What the model's reply holds once split: its reasoning, its text and its tool calls.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedReply {
    /// The reasoning (`<think>` content), when split off.
    pub reasoning: Option<String>,
    /// The text for the user.
    pub content: String,
    /// The tool calls.
    pub tool_calls: Vec<ToolCall>,
}

/// A request's tools and how this model writes them: renders them into the prompt,
/// builds the grammar and parses the reply.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSetup {
    /// The model's format.
    pub format: ToolFormat,
    /// The tools, as the request gave them (for the template).
    pub raw: Value,
    /// The tools.
    pub tools: Vec<Tool>,
    /// `tool_choice`.
    pub choice: ToolChoice,
    /// `parallel_tool_calls`: more than one call per reply.
    pub parallel: bool,
}

impl ToolSetup {
    /// Reads OpenAI's `tools` list (`[{"type": "function", "function": {"name",
    /// "description", "parameters"}}]`; a bare `{"name", "parameters"}` is taken too).
    pub fn new(
        format: ToolFormat,
        tools: &Value,
        choice: ToolChoice,
        parallel: bool,
    ) -> Result<ToolSetup, ToolError> {
        let list = tools.as_array().ok_or(ToolError::BadTool {
            index: 0,
            why: "'tools' must be a list".into(),
        })?;
        let mut parsed = Vec::new();
        let mut raw = Vec::new();
        for (index, t) in list.iter().enumerate() {
            let bad = |why: &str| ToolError::BadTool {
                index,
                why: why.into(),
            };
            let f = match t.get("type").and_then(Value::as_str) {
                Some("function") | None => t.get("function").unwrap_or(t),
                Some(other) => {
                    return Err(bad(&format!(
                        "tools of type '{other}' are not supported (only 'function')"
                    )))
                }
            };
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| bad("a function needs a 'name' string"))?;
            let parameters = match f.get("parameters") {
                None | Some(Value::Null) => json!({"type": "object"}),
                Some(p @ Value::Object(_)) => p.clone(),
                Some(_) => return Err(bad("'parameters' must be a JSON Schema object")),
            };
            parsed.push(Tool {
                name: name.to_string(),
                parameters,
            });
            // The template sees OpenAI's shape, whichever the request used.
            raw.push(if t.get("function").is_some() {
                t.clone()
            } else {
                json!({"type": "function", "function": f})
            });
        }
        if let ToolChoice::Named(n) = &choice {
            if !parsed.iter().any(|t| &t.name == n) {
                return Err(ToolError::UnknownChoice(n.clone()));
            }
        }
        Ok(ToolSetup {
            format,
            raw: Value::Array(raw),
            tools: parsed,
            choice,
            parallel,
        })
    }

    /// Whether the model may call tools (tools offered, `tool_choice` not `none`).
    pub fn active(&self) -> bool {
        !self.tools.is_empty() && self.choice != ToolChoice::None
    }

    /// The conversation and the `tools` value the template is rendered with. A template
    /// that knows tools gets them as they are; for [`ToolFormat::Generic`] the tools and
    /// the reply format are described in the system message, assistant calls are written
    /// as the JSON the model is asked for, and tool results become user messages.
    pub fn prepare(&self, messages: &[Message]) -> (Vec<Message>, Option<Value>) {
        if self.format != ToolFormat::Generic {
            let tools = (!self.tools.is_empty()).then(|| self.raw.clone());
            return (messages.to_vec(), tools);
        }
        let mut out: Vec<Message> = messages
            .iter()
            .map(|m| {
                if !m.tool_calls.is_empty() {
                    let calls: Vec<Value> = m.tool_calls.iter().map(call_json).collect();
                    Message::assistant(json!({"tool_calls": calls}).to_string())
                } else if m.role == "tool" {
                    let r = json!({"tool_response": {"tool": m.name, "tool_call_id":
                        m.tool_call_id, "content": m.content}});
                    Message::user(r.to_string())
                } else {
                    m.clone()
                }
            })
            .collect();
        if self.active() {
            let schema = self.generic_schema();
            let text = format!(
                "Respond in JSON format, either with `tool_call` (a request to call tools) \
                 or with `response` reply to the user's request, following this schema:\n{}",
                serde_json::to_string_pretty(&schema).unwrap_or_default()
            );
            match out.first_mut() {
                Some(m) if m.role == "system" => {
                    m.content = format!("{}\n\n{text}", m.content);
                }
                _ => out.insert(0, Message::system(text)),
            }
        }
        (out, None)
    }

    /// The tools the choice allows.
    fn allowed(&self) -> Vec<&Tool> {
        match &self.choice {
            ToolChoice::Named(n) => self.tools.iter().filter(|t| &t.name == n).collect(),
            ToolChoice::None => Vec::new(),
            _ => self.tools.iter().collect(),
        }
    }

    /// The schema of one call in this format (`args`: the key of the arguments). The
    /// functions' own definitions (`$defs`, `definitions`, which pydantic writes for nested
    /// models) are moved to its root, renamed per function, and their references with them,
    /// as llama.cpp resolves each function's references within its parameters.
    fn call_schema(&self, args: &str, with_id: bool) -> Value {
        let mut defs = serde_json::Map::new();
        let alts: Vec<Value> = self
            .allowed()
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut props = serde_json::Map::new();
                props.insert("name".into(), json!({"const": t.name}));
                let params = hoist_defs(&t.parameters, &format!("f{i}_"), &mut defs);
                props.insert(args.into(), params);
                let mut required = vec![json!("name"), json!(args)];
                if with_id {
                    props.insert(
                        "id".into(),
                        json!({"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}),
                    );
                    required.push(json!("id"));
                }
                json!({"type": "object", "properties": props, "required": required,
                       "additionalProperties": false})
            })
            .collect();
        let mut schema = if alts.len() == 1 {
            alts[0].clone()
        } else {
            json!({"anyOf": alts})
        };
        if !defs.is_empty() {
            schema["$defs"] = Value::Object(defs);
        }
        schema
    }

    /// The schema of a [`ToolFormat::Generic`] reply.
    fn generic_schema(&self) -> Value {
        let mut call = self.call_schema("arguments", false);
        let defs = call.as_object_mut().and_then(|o| o.remove("$defs"));
        let calls = if self.parallel {
            json!({"type": "object", "properties": {"tool_calls": {"type": "array",
                "items": call, "minItems": 1}}, "required": ["tool_calls"],
                "additionalProperties": false})
        } else {
            json!({"type": "object", "properties": {"tool_call": call},
                "required": ["tool_call"], "additionalProperties": false})
        };
        let mut schema = if self.choice == ToolChoice::Auto {
            let response = json!({"type": "object", "properties": {"response":
                {"type": "string"}}, "required": ["response"], "additionalProperties": false});
            json!({"anyOf": [calls, response]})
        } else {
            calls
        };
        if let Some(defs) = defs {
            schema["$defs"] = defs;
        }
        schema
    }

    /// The grammar the reply must follow, and its trigger when lazy: none when the model
    /// may not call tools; for `required` or a named function a call is forced from the
    /// first token; for `auto` the grammar engages when the model writes the format's
    /// opening (Hermes, Mistral, Llama 3) — the generic format is always constrained.
    /// `tok` decides how markers that are control tokens are named.
    pub fn grammar(&self, tok: &Tokenizer) -> Option<(GrammarSpec, Option<LazyTrigger>)> {
        if !self.active() {
            return None;
        }
        let forced = self.choice != ToolChoice::Auto;
        let quoted = |s: &str| serde_json::Value::String(s.to_string()).to_string();
        let marker = |s: &str| match tok.vocab().token_id(s) {
            Some(id)
                if tok
                    .vocab()
                    .token(id)
                    .is_some_and(|t| t.ty == TokenType::Control) =>
            {
                format!("<[{id}]>")
            }
            _ => quoted(s),
        };
        // The calls' JSON as the formats write it (`", "`, `": "`, no free whitespace: a
        // small model left free to add whitespace can loop on it), at most one newline
        // around a call.
        let lark = |start: String, call_schema: &Value| {
            let schema = with_json_options(call_schema);
            format!("start: {start}\ncall: %json {schema}\nws: /[ \\n]?/\n")
        };
        match self.format {
            ToolFormat::Hermes => {
                let schema = self.call_schema("arguments", false);
                let open = marker("<tool_call>");
                let close = marker("</tool_call>");
                let block = format!("ws call ws {close}");
                let more = if self.parallel {
                    format!("(ws {open} {block})*")
                } else {
                    String::new()
                };
                if forced {
                    let g = lark(format!("{open} {block} {more}"), &schema);
                    Some((GrammarSpec::Lark(g), None))
                } else {
                    let g = lark(format!("{block} {more}"), &schema);
                    let words = vec!["<tool_call>".to_string()];
                    Some((GrammarSpec::Lark(g), Some(LazyTrigger { words })))
                }
            }
            ToolFormat::Mistral => {
                let schema = self.call_schema("arguments", true);
                let list = if self.parallel {
                    "\"[\" ws call (ws \",\" ws call)* ws \"]\"".to_string()
                } else {
                    "\"[\" ws call ws \"]\"".to_string()
                };
                if forced {
                    let g = lark(format!("{} {list}", marker("[TOOL_CALLS]")), &schema);
                    Some((GrammarSpec::Lark(g), None))
                } else {
                    let words = vec!["[TOOL_CALLS]".to_string()];
                    let g = lark(list, &schema);
                    Some((GrammarSpec::Lark(g), Some(LazyTrigger { words })))
                }
            }
            ToolFormat::Llama3 => {
                let schema = self.call_schema("parameters", false);
                let start = if self.parallel {
                    "call (ws \";\" ws call)*"
                } else {
                    "call"
                };
                if forced {
                    Some((GrammarSpec::Lark(lark(start.into(), &schema)), None))
                } else {
                    // The trigger is the call's own start: the grammar takes over after it.
                    let words = vec!["{\"name\": ".to_string()];
                    let names: Vec<String> = self
                        .allowed()
                        .iter()
                        .map(|t| quoted(&quoted(&t.name)))
                        .collect();
                    let args = with_json_options(&json!({"type": "object"}));
                    let rest = format!(
                        "start: name \", \\\"parameters\\\": \" args \"}}\"\nname: {}\nargs: %json {args}\n",
                        names.join(" | ")
                    );
                    Some((GrammarSpec::Lark(rest), Some(LazyTrigger { words })))
                }
            }
            ToolFormat::Generic => Some((GrammarSpec::JsonSchema(self.generic_schema()), None)),
            ToolFormat::Qwen3Coder => {
                // A string value runs to `\n</parameter>\n` (it holds no `</`); any other
                // follows its schema as JSON.
                let head = |name: &str| quoted(&format!("\n<function={name}>\n"));
                let tail = "\"</function>\\n\"";
                let (g, alts) = self.call_rules(head, tail, "", |i, j, key, schema, g| {
                        let open = quoted(&format!("<parameter={key}>\n"));
                        if schema.get("type").and_then(Value::as_str) == Some("string") {
                            let text = match schema.get("maxLength").and_then(Value::as_u64) {
                                Some(n) => format!("[^<]{{0,{n}}}"),
                                None => r"([^<]|<[^\/])*".to_string(),
                            };
                            *g += &format!(r"p{i}_{j}: {open} /{text}\n<\/parameter>\n/");
                            g.push('\n');
                        } else {
                            let schema = with_json_options(schema);
                            *g += &format!(
                                "p{i}_{j}: {open} v{i}_{j} \"\\n</parameter>\\n\"\nv{i}_{j}: %json {schema}\n"
                            );
                        }
                        format!("p{i}_{j}")
                });
                let close = marker(XML_CLOSE);
                let call = format!("({}) {close}", alts.join(" | "));
                let open = marker(XML_OPEN);
                let more = if self.parallel {
                    format!("(\"\\n\" {open} {call})*")
                } else {
                    String::new()
                };
                Some(forced_or_lazy(
                    forced,
                    &format!("{open} {call} {more}"),
                    &format!("{call} {more}"),
                    &g,
                    XML_OPEN,
                ))
            }
            ToolFormat::Lfm2 => {
                // `name(key=value, …)`: strings double-quoted, other values JSON.
                let head = |name: &str| quoted(&format!("{name}("));
                let (g, alts) = self.call_rules(head, "\")\"", "\", \"", |i, j, key, schema, g| {
                    let value = if schema.get("type").and_then(Value::as_str) == Some("string") {
                        let n = schema.get("maxLength").and_then(Value::as_u64);
                        let n = n.map_or("*".to_string(), |n| format!("{{0,{n}}}"));
                        *g += &format!(r#"s{i}_{j}: /"([^"\\]|\\.){n}"/"#);
                        g.push('\n');
                        format!("s{i}_{j}")
                    } else {
                        *g += &format!("v{i}_{j}: %json {}\n", with_json_options(schema));
                        format!("v{i}_{j}")
                    };
                    format!("{} {value}", quoted(&format!("{key}=")))
                });
                let call = format!("({})", alts.join(" | "));
                let calls = if self.parallel {
                    format!("\"[\" {call} (\", \" {call})* \"]\" {}", marker(LFM2_CLOSE))
                } else {
                    format!("\"[\" {call} \"]\" {}", marker(LFM2_CLOSE))
                };
                Some(forced_or_lazy(
                    forced,
                    &format!("{} {calls}", marker(LFM2_OPEN)),
                    &calls,
                    &g,
                    LFM2_OPEN,
                ))
            }
            ToolFormat::Harmony => {
                // `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}`;
                // the call ends the reply (`<|call|>`), so there is one.
                let mut g = String::new();
                let mut alts = Vec::new();
                for (i, t) in self.allowed().iter().enumerate() {
                    let schema = with_json_options(&t.parameters);
                    g += &format!(
                        "c{i}: {} \" \" {} \"json\" {} a{i}\na{i}: %json {schema}\n",
                        quoted(&t.name),
                        marker("<|constrain|>"),
                        marker("<|message|>")
                    );
                    alts.push(format!("c{i}"));
                }
                let calls = format!("({})", alts.join(" | "));
                let open = format!("{} \"commentary to=functions.\"", marker("<|channel|>"));
                let forced_start = format!("{open} {calls}");
                Some(forced_or_lazy(
                    forced,
                    &forced_start,
                    &calls,
                    &g,
                    HARMONY_TO,
                ))
            }
            ToolFormat::Gemma4 => {
                let q = marker(GEMMA_QUOTE);
                let mut g = format!(
                    "gdict: \"{{\" (gkv (\",\" gkv)*)? \"}}\"\n\
                     gkv: /[A-Za-z_][A-Za-z0-9_]*/ \":\" gval\n\
                     gval: gstr | gdict | garr | /-?(0|[1-9][0-9]{{0,15}})(\\.[0-9]{{1,16}})?/ | \"true\" | \"false\" | \"null\"\n\
                     gstr: {q} gtext? {q}\n\
                     gtext: /[^<]+/\n\
                     garr: \"[\" (gval (\",\" gval)*)? \"]\"\n"
                );
                let mut alts = Vec::new();
                for (i, t) in self.allowed().iter().enumerate() {
                    let args = gemma_args(i, t, &q, &mut g);
                    g += &format!("c{i}: {} {args}\n", quoted(&t.name));
                    alts.push(format!("c{i}"));
                }
                let call = format!("\"call:\" ({}) {}", alts.join(" | "), marker(GEMMA_CLOSE));
                let open = marker(GEMMA_OPEN);
                let more = if self.parallel {
                    format!("({open} {call})*")
                } else {
                    String::new()
                };
                let forced_start = format!("{open} {call} {more}");
                let lazy_start = format!("{call} {more}");
                Some(forced_or_lazy(
                    forced,
                    &forced_start,
                    &lazy_start,
                    &g,
                    GEMMA_OPEN,
                ))
            }
        }
    }

    /// The Lark rules `c0`, `c1`, … of the allowed tools' calls, and their names: each
    /// `head(name)`, its arguments (`param(i, j, key, schema, rules)` gives the rule of
    /// tool `i`'s parameter `j`, adding what it needs to `rules`; `sep` between two, see
    /// [`arg_sequence`]), then `tail`.
    fn call_rules(
        &self,
        head: impl Fn(&str) -> String,
        tail: &str,
        sep: &str,
        mut param: impl FnMut(usize, usize, &str, &Value, &mut String) -> String,
    ) -> (String, Vec<String>) {
        let mut g = String::new();
        let mut alts = Vec::new();
        for (i, t) in self.allowed().iter().enumerate() {
            let props = t.parameters.get("properties").and_then(Value::as_object);
            let params: Vec<(&str, String)> = props
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(j, (key, schema))| (key.as_str(), param(i, j, key, schema, &mut g)))
                .collect();
            let args = arg_sequence(t, &params, sep);
            g += &format!("c{i}: {} {args} {tail}\n", head(&t.name));
            alts.push(format!("c{i}"));
        }
        (g, alts)
    }

    /// Splits the generated `text` into the text for the user and the tool calls, as the
    /// format writes them. Text that does not parse as a call stays text; calls of
    /// functions that are not among the tools stay text too.
    pub fn parse(&self, text: &str) -> ParsedReply {
        let plain = || ParsedReply {
            content: text.to_string(),
            ..ParsedReply::default()
        };
        if !self.active() {
            return plain();
        }
        let parsed = match self.format {
            ToolFormat::Hermes => self.parse_hermes(text),
            ToolFormat::Mistral => self.parse_mistral(text),
            ToolFormat::Llama3 => self.parse_bare_json(text),
            ToolFormat::Generic => self.parse_generic(text),
            ToolFormat::Gemma4 => self.parse_gemma4(text),
            ToolFormat::Qwen3Coder => self.parse_qwen3_coder(text),
            ToolFormat::Lfm2 => self.parse_lfm2(text),
            // Harmony calls are messages of the reply: `chat::harmony` reads them.
            ToolFormat::Harmony => None,
        };
        // A small model asked for tools may write a bare call (or one in a ```json fence)
        // whatever its template says.
        parsed
            .or_else(|| self.parse_bare_json(text))
            .unwrap_or_else(plain)
    }

    /// Whether `name` is one of the request's tools.
    pub(crate) fn knows(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }

    /// A call object (`{"name", "arguments" | "parameters"}`) of a known tool; `raw`: the
    /// object's JSON text. The arguments are their text as the model wrote it, compact
    /// ([`json_scan::minify`]): the text a stream sends in pieces.
    fn call_from(&self, v: &Value, raw: &str) -> Option<ToolCall> {
        let name = v.get("name")?.as_str()?;
        if !self.knows(name) {
            return None;
        }
        let args = match v.get("arguments").or_else(|| v.get("parameters")) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(_)) => {
                let raw = raw.trim();
                let (members, _) = json_scan::members(raw, 0)?;
                let m = members
                    .iter()
                    .rev()
                    .find(|m| m.key == "arguments")
                    .or_else(|| members.iter().rev().find(|m| m.key == "parameters"))?;
                json_scan::minify(m.value.text(raw))
            }
            None | Some(Value::Null) => "{}".into(),
            Some(_) => return None,
        };
        let id = v
            .get("id")
            .and_then(Value::as_str)
            .map_or_else(new_call_id, str::to_string);
        Some(ToolCall {
            id,
            name: name.to_string(),
            arguments: args,
        })
    }

    fn parse_hermes(&self, text: &str) -> Option<ParsedReply> {
        const OPEN: &str = "<tool_call>";
        const CLOSE: &str = "</tool_call>";
        let first = text.find(OPEN)?;
        let mut calls = Vec::new();
        let mut rest = &text[first..];
        while let Some(after) = rest.strip_prefix(OPEN) {
            let (body, next) = match after.find(CLOSE) {
                Some(e) => (&after[..e], &after[e + CLOSE.len()..]),
                None => (after, ""), // cut off at its end (the model stopped)
            };
            let v: Value = serde_json::from_str(body.trim()).ok()?;
            calls.push(self.call_from(&v, body)?);
            rest = next.trim_start();
        }
        if !rest.trim().is_empty() {
            // Text after the calls: not a reply this format writes.
            return None;
        }
        Some(reply_with_calls(text, first, calls))
    }

    fn parse_mistral(&self, text: &str) -> Option<ParsedReply> {
        const OPEN: &str = "[TOOL_CALLS]";
        let first = text.find(OPEN)?;
        let raw = text[first + OPEN.len()..].trim();
        let list: Value = serde_json::from_str(raw).ok()?;
        let calls = match list {
            Value::Array(a) => {
                let (spans, _) = json_scan::elements(raw, 0)?;
                a.iter()
                    .zip(&spans)
                    .map(|(v, sp)| self.call_from(v, sp.text(raw)))
                    .collect::<Option<Vec<_>>>()?
            }
            o @ Value::Object(_) => vec![self.call_from(&o, raw)?],
            _ => return None,
        };
        Some(reply_with_calls(text, first, calls))
    }

    /// A reply that is one call object, or several separated by `;` (Llama 3.x), after an
    /// optional `<|python_tag|>`, possibly in a Markdown ```json fence.
    fn parse_bare_json(&self, text: &str) -> Option<ParsedReply> {
        let mut t = text.trim();
        t = t.strip_prefix("<|python_tag|>").unwrap_or(t).trim();
        if let Some(inner) = t.strip_prefix("```json").or_else(|| t.strip_prefix("```")) {
            t = inner.trim().strip_suffix("```")?.trim();
        }
        if !t.starts_with('{') {
            return None;
        }
        let mut calls = Vec::new();
        let mut rest = t;
        loop {
            let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
            let v = values.next()?.ok()?;
            calls.push(self.call_from(&v, &rest[..values.byte_offset()])?);
            let after = rest[values.byte_offset()..].trim_start();
            let after = after.strip_prefix(';').unwrap_or(after).trim_start();
            if after.is_empty() {
                break;
            }
            rest = after;
        }
        Some(ParsedReply {
            content: String::new(),
            tool_calls: calls,
            reasoning: None,
        })
    }

    fn parse_generic(&self, text: &str) -> Option<ParsedReply> {
        let raw = text.trim();
        let v: Value = serde_json::from_str(raw).ok()?;
        if let Some(r) = v.get("response").and_then(Value::as_str) {
            return Some(ParsedReply {
                content: r.to_string(),
                ..ParsedReply::default()
            });
        }
        let (members, _) = json_scan::members(raw, 0)?;
        let member = |k: &str| members.iter().rev().find(|m| m.key == k).map(|m| m.value);
        let calls = if let Some(c) = v.get("tool_call") {
            vec![self.call_from(c, member("tool_call")?.text(raw))?]
        } else {
            let list = member("tool_calls")?.text(raw);
            let (spans, _) = json_scan::elements(list, 0)?;
            v.get("tool_calls")?
                .as_array()?
                .iter()
                .zip(&spans)
                .map(|(c, sp)| self.call_from(c, sp.text(list)))
                .collect::<Option<Vec<_>>>()?
        };
        Some(ParsedReply {
            tool_calls: calls,
            ..ParsedReply::default()
        })
    }

    /// Text that starts a call in this format, for a stream to hold back: the opening tag,
    /// or, for formats whose call is a bare JSON reply, `{` and "```json" at the reply's
    /// start.
    pub fn openers(&self) -> &'static [&'static str] {
        match self.format {
            ToolFormat::Hermes => &["<tool_call>"],
            ToolFormat::Mistral => &["[TOOL_CALLS]"],
            ToolFormat::Gemma4 => &[GEMMA_OPEN],
            ToolFormat::Qwen3Coder => &[XML_OPEN],
            ToolFormat::Lfm2 => &[LFM2_OPEN],
            ToolFormat::Llama3 | ToolFormat::Generic | ToolFormat::Harmony => &[],
        }
    }

    /// The parameter schema of the tool named `name`.
    fn schema_of(&self, name: &str) -> Option<&Value> {
        self.tools
            .iter()
            .find(|t| t.name == name)
            .map(|t| &t.parameters)
    }

    /// Qwen3-Coder's calls, one `<tool_call>` block after another.
    fn parse_qwen3_coder(&self, text: &str) -> Option<ParsedReply> {
        let first = text.find(XML_OPEN)?;
        let mut calls = Vec::new();
        let mut rest = &text[first..];
        while let Some(after) = rest.strip_prefix(XML_OPEN) {
            let Step::Call(name, arguments, used) =
                call_syntax::xml_call(after, |n| self.schema_of(n))
            else {
                return None;
            };
            calls.push(ToolCall {
                id: new_call_id(),
                name,
                arguments,
            });
            rest = after[used..].trim_start();
        }
        if !rest.trim().is_empty() {
            return None;
        }
        Some(reply_with_calls(text, first, calls))
    }

    /// LFM2's list of calls after `<|tool_call_start|>`.
    fn parse_lfm2(&self, text: &str) -> Option<ParsedReply> {
        let first = text.find(LFM2_OPEN)?;
        let after = &text[first + LFM2_OPEN.len()..];
        let (steps, used, closed) = call_syntax::lfm2_list(after, |n| self.knows(n))?;
        if !closed || !after[used..].trim().is_empty() {
            return None;
        }
        let calls = steps
            .into_iter()
            .filter_map(|s| match s {
                Step::Call(name, arguments, _) => Some(ToolCall {
                    id: new_call_id(),
                    name,
                    arguments,
                }),
                _ => None,
            })
            .collect();
        Some(reply_with_calls(text, first, calls))
    }

    /// Gemma 4's calls: `<|tool_call>call:NAME{…}<tool_call|>`, one after another.
    fn parse_gemma4(&self, text: &str) -> Option<ParsedReply> {
        let first = text.find(GEMMA_OPEN)?;
        let mut calls = Vec::new();
        let mut rest = &text[first..];
        while let Some(after) = rest.strip_prefix(GEMMA_OPEN) {
            let (call, used) = self.gemma4_call(after)?;
            calls.push(call?);
            rest = after[used..].trim_start();
        }
        if !rest.trim().is_empty() {
            return None;
        }
        Some(reply_with_calls(text, first, calls))
    }

    /// One Gemma 4 call after its opening mark: the call (None while its arguments are
    /// incomplete) and the bytes it used (its closing mark included). None: not a call of a
    /// known tool.
    fn gemma4_call(&self, text: &str) -> Option<(Option<ToolCall>, usize)> {
        let body = text.strip_prefix("call:")?;
        let brace = body.find('{')?;
        let name = body[..brace].trim();
        if !self.knows(name) {
            return None;
        }
        let start = text.len() - body.len() + brace;
        let Some((args, used)) = gemma_value(&text[start..]) else {
            return Some((None, text.len()));
        };
        let mut end = start + used;
        if let Some(r) = text[end..].strip_prefix(GEMMA_CLOSE) {
            end = text.len() - r.len();
        }
        let call = ToolCall {
            id: new_call_id(),
            name: name.to_string(),
            arguments: args,
        };
        Some((Some(call), end))
    }

    /// The calls in `text` (the reply from where its calls start) as far as they are
    /// written, for a stream: each with its name once that is complete and names a tool,
    /// and its arguments so far (Gemma 4's once the call is complete).
    pub fn partial_calls(&self, text: &str) -> Vec<PartialCall> {
        let mut out = Vec::new();
        if !self.active() {
            return out;
        }
        match self.format {
            ToolFormat::Hermes => {
                let mut rest = text.trim_start();
                while let Some(after) = rest.strip_prefix("<tool_call>") {
                    let i = json_scan::skip_ws(after, 0);
                    let Some((call, end)) = self.partial_object(after, i) else {
                        break;
                    };
                    out.push(call);
                    let Some(end) = end else { break };
                    let tail = after[end..].trim_start();
                    rest = tail
                        .strip_prefix("</tool_call>")
                        .unwrap_or(tail)
                        .trim_start();
                }
            }
            ToolFormat::Mistral => {
                let Some(p) = text.find("[TOOL_CALLS]") else {
                    return out;
                };
                let list = &text[p + "[TOOL_CALLS]".len()..];
                let i = json_scan::skip_ws(list, 0);
                if let Some((spans, _)) = json_scan::elements(list, i) {
                    for sp in spans {
                        match self.partial_object(list, sp.start) {
                            Some((call, _)) => out.push(call),
                            None => break,
                        }
                    }
                } else if let Some((call, _)) = self.partial_object(list, i) {
                    out.push(call);
                }
            }
            ToolFormat::Gemma4 => {
                let mut rest = text.trim_start();
                while let Some(after) = rest.strip_prefix(GEMMA_OPEN) {
                    let Some((call, used)) = self.gemma4_call(after) else {
                        break;
                    };
                    let Some(call) = call else {
                        // The name is known once the arguments start.
                        let body = &after["call:".len().min(after.len())..];
                        if let Some(b) = body.find('{') {
                            out.push(PartialCall {
                                name: body[..b].trim().to_string(),
                                id: None,
                                arguments: String::new(),
                                complete: false,
                            });
                        }
                        break;
                    };
                    out.push(PartialCall {
                        name: call.name,
                        id: None,
                        arguments: call.arguments,
                        complete: true,
                    });
                    rest = after[used..].trim_start();
                }
            }
            ToolFormat::Generic => {
                let t = text.trim_start();
                let Some((members, _)) = json_scan::members(t, 0) else {
                    return out;
                };
                for m in members {
                    match m.key.as_str() {
                        "tool_call" => {
                            if let Some((call, _)) = self.partial_object(t, m.value.start) {
                                out.push(call);
                            }
                        }
                        "tool_calls" => {
                            if let Some((spans, _)) = json_scan::elements(t, m.value.start) {
                                for sp in spans {
                                    match self.partial_object(t, sp.start) {
                                        Some((call, _)) => out.push(call),
                                        None => break,
                                    }
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            ToolFormat::Qwen3Coder => {
                let mut rest = text.trim_start();
                while let Some(after) = rest.strip_prefix(XML_OPEN) {
                    let step = call_syntax::xml_call(after, |n| self.schema_of(n));
                    let Some((call, used)) = partial_of(step) else {
                        break;
                    };
                    out.push(call);
                    let Some(used) = used else { break };
                    rest = after[used..].trim_start();
                }
            }
            ToolFormat::Lfm2 => {
                let t = text.trim_start();
                if let Some(after) = t.strip_prefix(LFM2_OPEN) {
                    if let Some((steps, _, _)) = call_syntax::lfm2_list(after, |n| self.knows(n)) {
                        out.extend(steps.into_iter().filter_map(|s| partial_of(s).map(|p| p.0)));
                    }
                }
            }
            ToolFormat::Llama3 | ToolFormat::Harmony => {}
        }
        if out.is_empty() {
            out = self.partial_bare(text);
        }
        out
    }

    /// Bare call objects (after an optional `<|python_tag|>` or ```json fence), separated
    /// by `;`.
    fn partial_bare(&self, text: &str) -> Vec<PartialCall> {
        let mut out = Vec::new();
        let mut t = text.trim_start();
        t = t.strip_prefix("<|python_tag|>").unwrap_or(t).trim_start();
        t = t.strip_prefix("```json").unwrap_or(t).trim_start();
        let mut i = 0;
        while let Some((call, end)) = self.partial_object(t, i) {
            out.push(call);
            let Some(end) = end else { break };
            let j = json_scan::skip_ws(t, end);
            if t.as_bytes().get(j) != Some(&b';') {
                break;
            }
            i = json_scan::skip_ws(t, j + 1);
        }
        out
    }

    /// The call object at `i` of `text` as far as it goes (None until its name is complete
    /// and names a tool), and its end once closed.
    fn partial_object(&self, text: &str, i: usize) -> Option<(PartialCall, Option<usize>)> {
        let (members, end) = json_scan::members(text, i)?;
        let string = |k: &str| {
            members
                .iter()
                .find(|m| m.key == k && m.value.complete)
                .and_then(|m| serde_json::from_str::<String>(m.value.text(text)).ok())
        };
        let name = string("name").filter(|n| self.knows(n))?;
        let args = members
            .iter()
            .find(|m| m.key == "arguments" || m.key == "parameters");
        let arguments = match args {
            // Arguments written as a JSON string are sent once complete.
            Some(m) if text[m.value.start..].starts_with('"') => {
                if m.value.complete {
                    serde_json::from_str::<String>(m.value.text(text)).unwrap_or_default()
                } else {
                    String::new()
                }
            }
            Some(m) => json_scan::minify(m.value.text(text)),
            None => String::new(),
        };
        let call = PartialCall {
            name,
            id: string("id"),
            arguments,
            complete: end.is_some(),
        };
        Some((call, end))
    }
}

/// A Lark grammar with `rules`: from the first token `start: forced_start` when `forced`,
/// else `start: lazy_start` once the model writes `trigger`.
fn forced_or_lazy(
    forced: bool,
    forced_start: &str,
    lazy_start: &str,
    rules: &str,
    trigger: &str,
) -> (GrammarSpec, Option<LazyTrigger>) {
    if forced {
        (
            GrammarSpec::Lark(format!("start: {forced_start}\n{rules}")),
            None,
        )
    } else {
        let words = vec![trigger.to_string()];
        let g = GrammarSpec::Lark(format!("start: {lazy_start}\n{rules}"));
        (g, Some(LazyTrigger { words }))
    }
}

/// The grammar of a call's arguments, `params` (key, rule) in the schema's order: the
/// required ones in that order, then any of the others, each once or more, `sep` between
/// two (a Lark literal, or empty).
fn arg_sequence(t: &Tool, params: &[(&str, String)], sep: &str) -> String {
    let required: Vec<&str> = t
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let (req, opt): (Vec<_>, Vec<_>) = params.iter().partition(|(k, _)| required.contains(k));
    let req: Vec<&str> = req.iter().map(|(_, r)| r.as_str()).collect();
    let opt: Vec<&str> = opt.iter().map(|(_, r)| r.as_str()).collect();
    let any_opt = format!("({})", opt.join(" | "));
    match (req.is_empty(), opt.is_empty()) {
        (true, true) => String::new(),
        (false, true) => req.join(&format!(" {sep} ")),
        (false, false) => format!("{} ({sep} {any_opt})*", req.join(&format!(" {sep} "))),
        (true, false) => format!("({any_opt} ({sep} {any_opt})*)?"),
    }
}

/// A reply whose calls start at byte `first` of `text`: the text before them (trimmed at
/// its end) is its content.
fn reply_with_calls(text: &str, first: usize, calls: Vec<ToolCall>) -> ParsedReply {
    ParsedReply {
        content: text[..first].trim_end().to_string(),
        tool_calls: calls,
        reasoning: None,
    }
}

/// A call read by [`call_syntax`] as a stream shows it: its name once known, its
/// arguments once complete; and the bytes it used when complete.
fn partial_of(step: Step) -> Option<(PartialCall, Option<usize>)> {
    match step {
        Step::NotACall | Step::Open(None) => None,
        Step::Open(Some(name)) => Some((
            PartialCall {
                name,
                id: None,
                arguments: String::new(),
                complete: false,
            },
            None,
        )),
        Step::Call(name, arguments, used) => Some((
            PartialCall {
                name,
                id: None,
                arguments,
                complete: true,
            },
            Some(used),
        )),
    }
}

/// A tool call as far as a streamed reply has written it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialCall {
    /// The function's name (one of the request's tools).
    pub name: String,
    /// The call's id, when the reply writes one.
    pub id: Option<String>,
    /// The arguments so far, compact; whole once `complete`.
    pub arguments: String,
    /// Whether the call is complete.
    pub complete: bool,
}

/// Where GPT-OSS names a call's recipient (`to=functions.NAME`).
pub(crate) const HARMONY_TO: &str = "to=functions.";
/// Gemma 4's marks around a call and around a string.
const GEMMA_OPEN: &str = "<|tool_call>";
const GEMMA_CLOSE: &str = "<tool_call|>";
const GEMMA_QUOTE: &str = "<|\"|>";

/// The grammar of tool `i`'s Gemma 4 arguments (rules added to `g`, `q`: the string
/// mark): with `properties`, a dict of those keys, each value following its schema where
/// that is simple (an integer, a number, a boolean, an enum of strings, a string with its
/// `maxLength`), any value otherwise; without, any dict.
fn gemma_args(i: usize, t: &Tool, q: &str, g: &mut String) -> String {
    let Some(props) = t.parameters.get("properties").and_then(Value::as_object) else {
        return "gdict".into();
    };
    if props.is_empty() {
        return "gdict".into();
    }
    let quoted = |s: &str| Value::String(s.to_string()).to_string();
    let mut members = Vec::new();
    for (j, (key, schema)) in props.iter().enumerate() {
        let value = if let Some(e) = schema.get("enum").and_then(Value::as_array) {
            let words: Option<Vec<String>> = e
                .iter()
                .map(|w| w.as_str().map(|w| format!("{q} {} {q}", quoted(w))))
                .collect();
            words.map_or_else(|| "gval".to_string(), |w| format!("({})", w.join(" | ")))
        } else {
            match schema.get("type").and_then(Value::as_str) {
                // JSON's numbers: no leading zeros (the reply parser reads them as JSON).
                Some("integer") => "/-?(0|[1-9][0-9]{0,15})/".to_string(),
                Some("number") => "/-?(0|[1-9][0-9]{0,15})(\\.[0-9]{1,16})?/".to_string(),
                Some("boolean") => "(\"true\" | \"false\")".to_string(),
                Some("string") => match schema.get("maxLength").and_then(Value::as_u64) {
                    Some(n) => {
                        g.push_str(&format!("t{i}_{j}: /[^<]{{1,{}}}/\n", n.max(1)));
                        format!("{q} t{i}_{j}? {q}")
                    }
                    None => "gstr".to_string(),
                },
                _ => "gval".to_string(),
            }
        };
        members.push(format!("{} {value}", quoted(&format!("{key}:"))));
    }
    g.push_str(&format!("k{i}: {}\n", members.join(" | ")));
    g.push_str(&format!("d{i}: \"{{\" (k{i} (\",\" k{i})*)? \"}}\"\n"));
    format!("d{i}")
}

/// A Gemma 4 value at the start of `text` (`{key:value,…}`, `[…]`, `<|"|>text<|"|>`, a
/// number, `true`, `false`, `null`) as compact JSON, and the bytes it used; None when the
/// text ends inside it or breaks the syntax.
fn gemma_value(text: &str) -> Option<(String, usize)> {
    let t = text.trim_start();
    let lead = text.len() - t.len();
    let (json, used) = if let Some(body) = t.strip_prefix(GEMMA_QUOTE) {
        let e = body.find(GEMMA_QUOTE)?;
        let s = Value::String(body[..e].to_string()).to_string();
        (s, GEMMA_QUOTE.len() * 2 + e)
    } else if t.starts_with('{') || t.starts_with('[') {
        let (open, close) = if t.starts_with('{') {
            ('{', '}')
        } else {
            ('[', ']')
        };
        let mut out = String::from(open);
        let mut i = 1;
        let mut first = true;
        loop {
            let rest = &t[i..];
            let r = rest.trim_start();
            i += rest.len() - r.len();
            if let Some(after) = r.strip_prefix(close) {
                out.push(close);
                i = t.len() - after.len();
                break;
            }
            if !first {
                let after = r.strip_prefix(',')?;
                i = t.len() - after.len();
                out.push(',');
            }
            first = false;
            let r = &t[i..];
            if open == '{' {
                let colon = r.find(':')?;
                let key = r[..colon].trim();
                if key.is_empty() || key.contains(['}', '{', ',']) {
                    return None;
                }
                out += &Value::String(key.to_string()).to_string();
                out.push(':');
                i += colon + 1;
            }
            let (v, used) = gemma_value(&t[i..])?;
            out += &v;
            i += used;
        }
        (out, i)
    } else {
        let end = t
            .find(|c: char| matches!(c, ',' | '}' | ']' | '<') || c.is_whitespace())
            .unwrap_or(t.len());
        if end == t.len() {
            return None; // may go on
        }
        let word = &t[..end];
        // A number or a literal, checked as JSON.
        serde_json::from_str::<Value>(word).ok()?;
        (word.to_string(), end)
    };
    Some((json, lead + used))
}

/// A call as the generic format writes it.
fn call_json(c: &ToolCall) -> Value {
    let args: Value =
        serde_json::from_str(&c.arguments).unwrap_or_else(|_| Value::String(c.arguments.clone()));
    json!({"name": c.name, "arguments": args, "id": c.id})
}

/// A fresh call id: `call_` and 24 letters and digits, as OpenAI's.
pub fn new_call_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let mut x = h.finish();
    let mut id = String::from("call_");
    for i in 0..24 {
        if i > 0 && i % 10 == 0 {
            let mut h2 = std::collections::hash_map::RandomState::new().build_hasher();
            h2.write_u64(x);
            x = h2.finish();
        }
        id.push(ALPHABET[(x % ALPHABET.len() as u64) as usize] as char);
        x /= ALPHABET.len() as u64;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function's own definitions move to the root of the call's schema, renamed, with
    /// their references (and one to the function's root, kept as a definition).
    #[test]
    fn definitions_move_to_the_root_of_the_call() {
        let params = json!({"$defs": {"City": {"type": "object",
                "properties": {"up": {"$ref": "#"}, "n": {"$ref": "#/$defs/N"}}}, "N": {"type": "integer"}},
            "type": "object", "properties": {"city": {"$ref": "#/$defs/City"},
                "same": {"$ref": "#/properties/city"}, "e": {"enum": [{"$ref": "#"}]}}});
        let mut defs = serde_json::Map::new();
        let p = hoist_defs(&params, "f0_", &mut defs);
        assert_eq!(p.get("$defs"), None);
        assert_eq!(p["properties"]["city"]["$ref"], "#/$defs/f0_City");
        assert_eq!(
            p["properties"]["same"]["$ref"],
            "#/$defs/f0_root/properties/city"
        );
        // Data is left alone.
        assert_eq!(p["properties"]["e"]["enum"][0]["$ref"], "#");
        assert_eq!(
            defs["f0_City"]["properties"]["up"]["$ref"],
            "#/$defs/f0_root"
        );
        assert_eq!(defs["f0_City"]["properties"]["n"]["$ref"], "#/$defs/f0_N");
        assert_eq!(defs["f0_root"], p);
        let t = json!([{"type": "function", "function": {"name": "w", "parameters": params}}]);
        let setup = ToolSetup::new(ToolFormat::Generic, &t, ToolChoice::Required, false).unwrap();
        let schema = setup.generic_schema();
        assert!(schema["$defs"]["f0_City"].is_object(), "{schema}");
        assert!(
            schema["properties"]["tool_call"].get("$defs").is_none(),
            "{schema}"
        );
    }

    fn tools() -> Value {
        json!([
            {"type": "function", "function": {"name": "get_weather", "description": "Weather",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}},
            {"type": "function", "function": {"name": "add",
             "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                            "b": {"type": "integer"}}}}}
        ])
    }

    fn setup(f: ToolFormat) -> ToolSetup {
        ToolSetup::new(f, &tools(), ToolChoice::Auto, true).unwrap()
    }

    #[test]
    fn formats_are_detected_from_templates() {
        assert_eq!(
            ToolFormat::detect(Some("{{ '<tool_call>' }}")),
            ToolFormat::Hermes
        );
        assert_eq!(
            ToolFormat::detect(Some("{{ '[TOOL_CALLS]' }}")),
            ToolFormat::Mistral
        );
        assert_eq!(
            ToolFormat::detect(Some("<|start_header_id|>ipython<|end_header_id|>")),
            ToolFormat::Llama3
        );
        assert_eq!(ToolFormat::detect(Some("{{ x }}")), ToolFormat::Generic);
        assert_eq!(ToolFormat::detect(None), ToolFormat::Generic);
    }

    /// Qwen3.5's and LFM2's templates are detected as llama.cpp detects them, and their
    /// replies parse as llama.cpp's `test-chat.cpp` expects (its cases, JSON compared).
    #[test]
    fn qwen3_coder_and_lfm2_calls() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/templates/");
        let detect = |f: &str| {
            let src = std::fs::read_to_string(format!("{dir}{f}")).unwrap();
            ToolFormat::detect(Some(&src))
        };
        assert_eq!(detect("Qwen-Qwen3.5-4B.jinja"), ToolFormat::Qwen3Coder);
        assert_eq!(detect("LiquidAI-LFM2-8B-A1B.jinja"), ToolFormat::Lfm2);
        assert_eq!(detect("LiquidAI-LFM2.5-Instruct.jinja"), ToolFormat::Lfm2);
        assert_eq!(detect("ibm-granite-granite-4.0.jinja"), ToolFormat::Hermes);
        assert_eq!(detect("Qwen-Qwen3-0.6B.jinja"), ToolFormat::Hermes);
        let t = json!([
            {"type": "function", "function": {"name": "special_function", "parameters": {"type": "object",
                "properties": {"arg1": {"type": "integer"}}}}},
            {"type": "function", "function": {"name": "special_function_with_opt", "parameters": {"type": "object",
                "properties": {"arg1": {"type": "integer"}, "arg2": {"type": "integer"}}}}},
            {"type": "function", "function": {"name": "python", "parameters": {"type": "object",
                "properties": {"code": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "set_config", "parameters": {"type": "object",
                "properties": {"config": {"type": "object"}}}}},
            {"type": "function", "function": {"name": "Calendar.create_event", "parameters": {"type": "object",
                "properties": {"title": {"type": "string"}, "participants": {"type": "array"}}}}},
            {"type": "function", "function": {"name": "empty_args", "parameters": {"type": "object"}}}
        ]);
        let calls = |format, text: &str| {
            let s = ToolSetup::new(format, &t, ToolChoice::Auto, true).unwrap();
            let r = s.parse(text);
            let c: Vec<(String, Value)> = r
                .tool_calls
                .iter()
                .map(|c| (c.name.clone(), serde_json::from_str(&c.arguments).unwrap()))
                .collect();
            (r.content, c)
        };
        let one = |n: &str, a: Value| vec![(n.to_string(), a)];
        let q = ToolFormat::Qwen3Coder;
        assert_eq!(
            calls(q, "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>"),
            (String::new(), one("special_function", json!({"arg1": 1})))
        );
        assert_eq!(
            calls(q, "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=special_function_with_opt>\n<parameter=arg1>\n1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n</function>\n</tool_call>").1.len(),
            2
        );
        assert_eq!(
            calls(q, "Let me run it.\n\n<tool_call>\n<function=python>\n<parameter=code>\ndef hello():\n    print(\"Hello, world!\")\n\nhello()\n</parameter>\n</function>\n</tool_call>"),
            ("Let me run it.".to_string(), one("python", json!({"code": "def hello():\n    print(\"Hello, world!\")\n\nhello()"})))
        );
        // A string parameter keeps a value that looks like JSON as text.
        assert_eq!(
            calls(q, "<tool_call>\n<function=python>\n<parameter=code>\n12\n</parameter>\n</function>\n</tool_call>").1,
            one("python", json!({"code": "12"}))
        );
        // Unknown functions stay text.
        let text = "<tool_call>\n<function=nope>\n</function>\n</tool_call>";
        assert_eq!(calls(q, text), (text.to_string(), vec![]));

        let l = ToolFormat::Lfm2;
        let lfm = |s: &str| format!("<|tool_call_start|>[{s}]<|tool_call_end|>");
        for (text, name, args) in [
            (
                "special_function(arg1=1)",
                "special_function",
                json!({"arg1": 1}),
            ),
            (
                "set_config(config={\"enabled\": True, \"count\": 3})",
                "set_config",
                json!({"config": {"enabled": true, "count": 3}}),
            ),
            (
                "set_config(config={\"enabled\": true, \"note\": null})",
                "set_config",
                json!({"config": {"enabled": true, "note": null}}),
            ),
            (
                "Calendar.create_event(title=\"demo\", participants=[\"Alice\", \"Bob\"])",
                "Calendar.create_event",
                json!({"title": "demo", "participants": ["Alice", "Bob"]}),
            ),
            (
                "python(code=\"def hello():\\n    print('hey')\")",
                "python",
                json!({"code": "def hello():\n    print('hey')"}),
            ),
            (
                "python(code=\"print(\\\"hi\\\")\")",
                "python",
                json!({"code": "print(\"hi\")"}),
            ),
            ("empty_args()", "empty_args", json!({})),
        ] {
            assert_eq!(
                calls(l, &lfm(text)),
                (String::new(), one(name, args)),
                "{text}"
            );
        }
        assert_eq!(
            calls(
                l,
                &format!(
                    "Let me check.{}",
                    lfm("special_function(arg1=1), special_function_with_opt(arg1=1, arg2=2)")
                )
            ),
            (
                "Let me check.".to_string(),
                vec![
                    ("special_function".to_string(), json!({"arg1": 1})),
                    (
                        "special_function_with_opt".to_string(),
                        json!({"arg1": 1, "arg2": 2})
                    ),
                ]
            )
        );
        let link =
            "Use this format: [link text](url). Example: [Wikipedia](https://www.wikipedia.org).";
        assert_eq!(calls(l, link), (link.to_string(), vec![]));
        // A stream sees the name before the arguments are complete.
        let s = ToolSetup::new(l, &t, ToolChoice::Auto, true).unwrap();
        let p = s.partial_calls("<|tool_call_start|>[special_function(arg1=");
        assert_eq!(
            (p[0].name.as_str(), p[0].complete),
            ("special_function", false)
        );
    }

    #[test]
    fn hermes_calls_parse() {
        let s = setup(ToolFormat::Hermes);
        let r = s.parse(
            "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
        );
        assert_eq!(r.content, "I'll check.");
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].name, "get_weather");
        assert_eq!(r.tool_calls[0].arguments, r#"{"city":"Paris"}"#);
        assert_eq!(r.tool_calls[1].arguments, r#"{"a":1,"b":2}"#);
        assert!(r.tool_calls[0].id.starts_with("call_"));
        assert_ne!(r.tool_calls[0].id, r.tool_calls[1].id);
        // Cut off before its closing tag (the model stopped there).
        let r = s.parse("<tool_call>\n{\"name\": \"add\", \"arguments\": {}}");
        assert_eq!(r.tool_calls.len(), 1);
        // An unknown function, bad JSON: text.
        for t in [
            "<tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"add\", \"arguments\": \n</tool_call>",
            "Just text.",
        ] {
            let r = s.parse(t);
            assert!(r.tool_calls.is_empty() && r.content == t, "{t}");
        }
        // A bare call, or in a fence, as small models write it.
        let r = s.parse("```json\n{\"name\": \"add\", \"arguments\": {\"a\": 3}}\n```");
        assert_eq!(r.tool_calls[0].arguments, r#"{"a":3}"#);
        assert_eq!(r.content, "");
        // tool_choice none: all text.
        let none = ToolSetup::new(ToolFormat::Hermes, &tools(), ToolChoice::None, true).unwrap();
        assert!(none
            .parse("<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>")
            .tool_calls
            .is_empty());
    }

    #[test]
    fn llama3_mistral_and_generic_calls_parse() {
        let r = setup(ToolFormat::Llama3).parse(
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; {\"name\": \"add\", \"parameters\": {\"a\": 1}}",
        );
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].arguments, r#"{"city":"Oslo"}"#);
        let r = setup(ToolFormat::Mistral).parse(
            "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}, \"id\": \"abcDEF123\"}]",
        );
        assert_eq!(r.tool_calls[0].id, "abcDEF123");
        assert_eq!(r.tool_calls[0].arguments, r#"{"a":1,"b":2}"#);
        let g = setup(ToolFormat::Generic);
        let r = g.parse(r#"{"tool_calls": [{"name": "add", "arguments": {"a": 1}}]}"#);
        assert_eq!(r.tool_calls[0].name, "add");
        let r = g.parse(r#"{"response": "Hello"}"#);
        assert_eq!((r.content.as_str(), r.tool_calls.len()), ("Hello", 0));
    }

    #[test]
    fn bad_tools_and_choices_are_refused() {
        let t = json!([{"type": "function", "function": {"description": "x"}}]);
        assert!(ToolSetup::new(ToolFormat::Hermes, &t, ToolChoice::Auto, true).is_err());
        let t = json!([{"type": "retrieval"}]);
        assert!(ToolSetup::new(ToolFormat::Hermes, &t, ToolChoice::Auto, true).is_err());
        assert_eq!(
            ToolSetup::new(
                ToolFormat::Hermes,
                &tools(),
                ToolChoice::Named("nope".into()),
                true
            ),
            Err(ToolError::UnknownChoice("nope".into()))
        );
    }

    #[test]
    fn generic_format_describes_tools_and_rewrites_history() {
        let s = setup(ToolFormat::Generic);
        let call = ToolCall {
            id: "call_1".into(),
            name: "add".into(),
            arguments: r#"{"a":1}"#.into(),
        };
        let (msgs, tools) = s.prepare(&[
            Message::user("add"),
            Message::assistant_calls("", vec![call]),
            Message::tool_result("3", Some("call_1".into()), Some("add".into())),
        ]);
        assert!(tools.is_none());
        assert_eq!(msgs[0].role, "system");
        assert!(msgs[0].content.contains("get_weather"));
        assert!(msgs[2].content.contains("\"tool_calls\""));
        assert_eq!(msgs[3].role, "user");
        assert!(msgs[3].content.contains("tool_response"));
        // Hermes: as given, with the tools for the template.
        let (msgs, tools) = setup(ToolFormat::Hermes).prepare(&[Message::user("x")]);
        assert_eq!(msgs.len(), 1);
        assert_eq!(tools.unwrap().as_array().unwrap().len(), 2);
    }
}
