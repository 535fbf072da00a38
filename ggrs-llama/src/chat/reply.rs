//! The model's reply split into reasoning, text and tool calls — whole ([`ReplySyntax::parse`])
//! or while it streams ([`ReplyStream`], which sends each part as soon as it cannot change
//! any more and holds back what may still turn out to be a marker or a tool call).
//!
//! Reasoning models write their thoughts between `<think>` and `</think>` (Qwen3,
//! DeepSeek-R1 and its distills); with [`ReasoningFormat::Deepseek`] that part goes to
//! `reasoning_content`, as llama-server's `--reasoning-format deepseek` does. A template
//! whose generation prompt already opens `<think>` (DeepSeek-R1's) starts the reply inside
//! the reasoning ([`ReplySyntax::thinking_forced_open`]).
//!
//! ```
//! use ggrs_llama::chat::reply::{ReasoningFormat, ReplySyntax};
//! let syntax = ReplySyntax::new(ReasoningFormat::Deepseek, "<|im_start|>assistant\n", None);
//! let r = syntax.parse("<think>\n2 + 2 is 4.\n</think>\n\nIt is 4.");
//! assert_eq!(r.reasoning.as_deref(), Some("2 + 2 is 4."));
//! assert_eq!(r.content, "It is 4.");
//! ```

use super::harmony;
use super::tools::{new_call_id, ParsedReply, PartialCall, ToolCall, ToolSetup};

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
/// Gemma 4's reasoning marks.
const GEMMA_THOUGHT_OPEN: &str = "<|channel>thought";
const GEMMA_THOUGHT_CLOSE: &str = "<channel|>";

/// What to do with `<think>` blocks (llama-server's `--reasoning-format`). At llama.cpp
/// 0c1e570 every value but `none` moves the reasoning to `reasoning_content`, streamed or
/// not (`deepseek-legacy`'s "leave it inline while streaming" is recorded by llama-server
/// but read by no parser); the names are kept so that `/props` reports the one given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReasoningFormat {
    /// Leave them in the content (`none`).
    None,
    /// Move them to `reasoning_content` (`deepseek`).
    #[default]
    Deepseek,
    /// As [`ReasoningFormat::Deepseek`] (`auto`).
    Auto,
    /// As [`ReasoningFormat::Deepseek`] (`deepseek-legacy`).
    DeepseekLegacy,
}

impl ReasoningFormat {
    /// Reads llama-server's names: `none`, `deepseek`, `deepseek-legacy`, `auto`; and
    /// `nothink` (which llama.cpp's test harness lists and llama-server 0c1e570 refuses),
    /// read as `none`: see [`ReasoningFormat::turns_thinking_off`].
    pub fn parse(s: &str) -> Option<ReasoningFormat> {
        match s {
            "none" | "nothink" => Some(ReasoningFormat::None),
            "deepseek" => Some(ReasoningFormat::Deepseek),
            "auto" => Some(ReasoningFormat::Auto),
            "deepseek-legacy" => Some(ReasoningFormat::DeepseekLegacy),
            _ => None,
        }
    }

    /// The names [`ReasoningFormat::parse`] takes, for error messages.
    pub const NAMES: &'static str = "none, deepseek, deepseek-legacy, auto or nothink";

    /// Whether the name also turns thinking off: `nothink` is `none` with the template
    /// rendered with `enable_thinking = false` (no reasoning to leave in the content).
    pub fn turns_thinking_off(s: &str) -> bool {
        s == "nothink"
    }

    /// llama-server's name for it (`/props`).
    pub fn name(self) -> &'static str {
        match self {
            ReasoningFormat::None => "none",
            ReasoningFormat::Deepseek => "deepseek",
            ReasoningFormat::Auto => "auto",
            ReasoningFormat::DeepseekLegacy => "deepseek-legacy",
        }
    }
}

/// Whether a reasoning model thinks (llama-server's `--reasoning on|off|auto`): the
/// template variable `enable_thinking` every request starts from (a request's
/// `chat_template_kwargs.enable_thinking` still wins). `off` renders the template with
/// `enable_thinking = false`, so a template that reads it closes (or leaves out) the
/// thinking block of the generation prompt (Qwen3's `<think>\n\n</think>\n\n`) and the
/// reply has no reasoning to split off; `on` and `auto` leave thinking on, as llama-server
/// does for a template that can think.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reasoning {
    /// Thinking on (`enable_thinking = true`).
    On,
    /// Thinking off (`enable_thinking = false`).
    Off,
    /// The template's default: thinking on where the template has it.
    #[default]
    Auto,
}

impl Reasoning {
    /// The names llama-server takes: `on`, `off`, `auto`.
    pub fn parse(s: &str) -> Option<Reasoning> {
        match s {
            "on" => Some(Reasoning::On),
            "off" => Some(Reasoning::Off),
            "auto" => Some(Reasoning::Auto),
            _ => None,
        }
    }

    /// The value of the template variable `enable_thinking`.
    pub fn enable_thinking(self) -> bool {
        self != Reasoning::Off
    }
}

/// How a model writes its reply's parts, as its prompt shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplyLayout {
    /// Reasoning between `<think>` and `</think>` (Qwen3, DeepSeek-R1), then the text.
    #[default]
    Think,
    /// Gemma 4: reasoning between `<|channel>thought` and `<channel|>`.
    Gemma4,
    /// GPT-OSS's harmony channels ([`harmony`]).
    Harmony,
}

impl ReplyLayout {
    /// The layout of a reply to `prompt` (the rendered conversation) by a model whose
    /// tools are written in `tools`' format.
    pub fn detect(prompt: &str, tools: Option<&ToolSetup>) -> ReplyLayout {
        use super::tools::ToolFormat;
        let format = tools.map(|t| t.format);
        if harmony::prompt_opens_reply(prompt) || format == Some(ToolFormat::Harmony) {
            ReplyLayout::Harmony
        } else if prompt.trim_end().ends_with("<|turn>model") || format == Some(ToolFormat::Gemma4)
        {
            ReplyLayout::Gemma4
        } else {
            ReplyLayout::Think
        }
    }

    /// The marks around the reasoning.
    fn marks(self) -> (&'static str, &'static str) {
        match self {
            ReplyLayout::Gemma4 => (GEMMA_THOUGHT_OPEN, GEMMA_THOUGHT_CLOSE),
            _ => (THINK_OPEN, THINK_CLOSE),
        }
    }
}

/// How to read one reply: the reasoning format and the request's tools.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplySyntax {
    /// What to do with `<think>` blocks.
    pub reasoning: ReasoningFormat,
    /// The prompt ended inside `<think>`: the reply starts with reasoning.
    pub thinking_forced_open: bool,
    /// The request's tools (none: no tool calls are parsed).
    pub tools: Option<ToolSetup>,
    /// How the model lays its reply out.
    pub layout: ReplyLayout,
}

/// A reply split as far as it goes: reasoning, text, and the calls so far.
struct Settled<'a> {
    reasoning: std::borrow::Cow<'a, str>,
    content: std::borrow::Cow<'a, str>,
    calls: Vec<PartialCall>,
}

impl ReplySyntax {
    /// The syntax for a reply to `prompt` (the rendered conversation).
    pub fn new(reasoning: ReasoningFormat, prompt: &str, tools: Option<ToolSetup>) -> ReplySyntax {
        let layout = ReplyLayout::detect(prompt, tools.as_ref());
        let (open, _) = layout.marks();
        let thinking_forced_open = reasoning != ReasoningFormat::None
            && layout != ReplyLayout::Harmony
            && prompt.trim_end().ends_with(open);
        ReplySyntax {
            reasoning,
            thinking_forced_open,
            tools,
            layout,
        }
    }

    /// Whether the reply needs any splitting at all.
    pub fn is_plain(&self) -> bool {
        self.layout != ReplyLayout::Harmony
            && self.reasoning == ReasoningFormat::None
            && !self.tools.as_ref().is_some_and(|t| t.active())
    }

    fn active_tools(&self) -> Option<&ToolSetup> {
        self.tools.as_ref().filter(|t| t.active())
    }

    /// Splits off the reasoning: (reasoning, the rest, whether the reasoning is closed).
    fn split_reasoning<'a>(&self, text: &'a str) -> (Option<&'a str>, &'a str, bool) {
        if self.reasoning == ReasoningFormat::None {
            return (None, text, true);
        }
        let (open, close) = self.layout.marks();
        let inner = if self.thinking_forced_open {
            text.strip_prefix(open).unwrap_or(text)
        } else {
            match text.trim_start().strip_prefix(open) {
                Some(inner) => inner,
                None => return (None, text, true),
            }
        };
        // Qwen3.5 may open a call without closing its reasoning: as llama.cpp's
        // Qwen3-Coder parser, `<tool_call>` ends the reasoning too.
        if let Some(c) = self.call_ends_reasoning().and_then(|o| inner.find(o)) {
            if inner.find(close).is_none_or(|e| c < e) {
                return (Some(&inner[..c]), &inner[c..], true);
            }
        }
        match inner.find(close) {
            Some(e) => (
                Some(&inner[..e]),
                inner[e + close.len()..].trim_start(),
                true,
            ),
            None => (Some(inner), "", false),
        }
    }

    /// The mark that opens a call and also ends the reasoning (Qwen3-Coder's `<tool_call>`).
    fn call_ends_reasoning(&self) -> Option<&'static str> {
        use super::tools::ToolFormat;
        let t = self.active_tools()?;
        (t.format == ToolFormat::Qwen3Coder).then_some("<tool_call>")
    }

    /// The whole reply, split.
    pub fn parse(&self, text: &str) -> ParsedReply {
        if self.layout == ReplyLayout::Harmony {
            let split = self.reasoning != ReasoningFormat::None;
            return harmony::parse(text, self.active_tools(), split);
        }
        let (reasoning, rest, _) = self.split_reasoning(text);
        let mut reply = match &self.tools {
            Some(t) => t.parse(rest),
            None => ParsedReply {
                content: rest.to_string(),
                ..ParsedReply::default()
            },
        };
        reply.reasoning = reasoning.map(|r| r.trim().to_string());
        if self.active_tools().is_some() {
            // A reply that ends inside a call (cut off by `max_tokens`) has the call as far
            // as it went, as a stream sends it (and as OpenAI answers): not its text.
            let s = self.settled_parts(text);
            if s.calls.len() > reply.tool_calls.len() {
                reply.content = s.content.into_owned();
                reply.tool_calls = s
                    .calls
                    .into_iter()
                    .map(|c| ToolCall {
                        id: c.id.unwrap_or_else(new_call_id),
                        name: c.name,
                        arguments: c.arguments,
                    })
                    .collect();
            }
        }
        if self.layout == ReplyLayout::Gemma4 && self.reasoning != ReasoningFormat::None {
            let (thoughts, content) = gemma4_tidy(&reply.content, false);
            if !thoughts.is_empty() {
                let first = reply.reasoning.as_deref().unwrap_or("");
                reply.reasoning = Some(join_thoughts(first, &thoughts));
            }
            reply.content = content.trim_end().to_string();
        }
        reply
    }

    /// What of `text` (a reply so far) can be shown now and will not change: reasoning,
    /// content, and the tool calls as far as they go. Held back: a possible start of a
    /// marker at the end, and the text of a tool call.
    fn settled<'a>(&self, text: &'a str) -> Settled<'a> {
        let s = self.settled_parts(text);
        if self.layout != ReplyLayout::Gemma4 || self.reasoning == ReasoningFormat::None {
            return s;
        }
        let (thoughts, content) = gemma4_tidy(&s.content, true);
        let reasoning = if thoughts.is_empty() {
            s.reasoning
        } else {
            join_thoughts(&s.reasoning, &thoughts).into()
        };
        Settled {
            reasoning,
            content: content.trim_end().to_string().into(),
            calls: s.calls,
        }
    }

    /// [`ReplySyntax::settled`] before Gemma 4's extra marks are read.
    fn settled_parts<'a>(&self, text: &'a str) -> Settled<'a> {
        let none = |r: &'a str, c: &'a str| Settled {
            reasoning: r.into(),
            content: c.into(),
            calls: Vec::new(),
        };
        if self.layout == ReplyLayout::Harmony {
            let split = self.reasoning != ReasoningFormat::None;
            let s = harmony::split(text, self.active_tools(), split, true);
            return Settled {
                reasoning: s.reasoning.unwrap_or_default().into(),
                content: s.content.into(),
                calls: s.calls,
            };
        }
        let (open, close) = self.layout.marks();
        if self.reasoning != ReasoningFormat::None && !self.thinking_forced_open {
            let t = text.trim_start();
            if open.starts_with(t) {
                return none("", ""); // may still become the opening mark
            }
        }
        let (reasoning, rest, closed) = self.split_reasoning(text);
        if !closed {
            let r = reasoning.unwrap_or("");
            let mut keep = partial_suffix(r, close);
            if let Some(o) = self.call_ends_reasoning() {
                keep = keep.max(partial_suffix(r, o));
            }
            return none(&r[..r.len() - keep], "");
        }
        let reasoning = reasoning.unwrap_or("");
        let Some(tools) = self.active_tools() else {
            return none(reasoning, rest);
        };
        // A reply that may be a bare JSON call (any format accepts one) is no content.
        let lead = rest.trim_start();
        let bare = ["{", "```json", "<|python_tag|>"];
        if bare
            .iter()
            .any(|b| lead.starts_with(b) || b.starts_with(lead))
        {
            return Settled {
                reasoning: reasoning.into(),
                content: "".into(),
                calls: tools.partial_calls(rest),
            };
        }
        let mut end = rest.len();
        let mut call_at = None;
        for o in tools.openers() {
            if let Some(p) = rest.find(o) {
                end = end.min(p);
                call_at = Some(call_at.map_or(p, |c: usize| c.min(p)));
            }
            end = end.min(rest.len() - partial_suffix(rest, o));
        }
        Settled {
            reasoning: reasoning.into(),
            content: rest[..end].trim_end_matches(['\n', ' ']).into(),
            calls: call_at.map_or_else(Vec::new, |p| tools.partial_calls(&rest[p..])),
        }
    }
}

/// What Gemma 4 writes after its answer besides text, read as llama.cpp's Gemma 4 parser
/// reads it: the `<|turn>model\n` it may repeat at the start, channel marks that open no
/// thought (`<|channel>` alone), further thought blocks (`<|channel>thought…<channel|>`,
/// their text more reasoning), and a stray `<channel|>`, where the answer ends (what
/// follows it is dropped). Gives the further reasoning and the text. `streaming`: the text
/// may go on, so a mark being written (or an open block) is held back.
fn gemma4_tidy(text: &str, streaming: bool) -> (Vec<&str>, String) {
    const TURN: &str = "<|turn>model\n";
    const OPEN: &str = "<|channel>";
    let mut rest = text;
    if streaming && TURN.starts_with(rest) {
        return (Vec::new(), String::new());
    }
    rest = rest.strip_prefix(TURN).unwrap_or(rest);
    let (mut thoughts, mut out) = (Vec::new(), String::new());
    loop {
        let open = rest.find(OPEN);
        let close = rest.find(GEMMA_THOUGHT_CLOSE);
        match (open, close) {
            (Some(o), c) if c.is_none_or(|c| o < c) => {
                out += &rest[..o];
                let after = &rest[o + OPEN.len()..];
                if let Some(body) = after.strip_prefix("thought") {
                    match body.find(GEMMA_THOUGHT_CLOSE) {
                        Some(e) => {
                            thoughts.push(&body[..e]);
                            rest = &body[e + GEMMA_THOUGHT_CLOSE.len()..];
                        }
                        // An open block: reasoning to the end (held while streaming).
                        None => {
                            if !streaming {
                                thoughts.push(body);
                            }
                            break;
                        }
                    }
                } else if streaming && "thought".starts_with(after) {
                    break;
                } else {
                    rest = after; // a channel mark with no thought: dropped
                }
            }
            (_, Some(c)) => {
                out += &rest[..c];
                break;
            }
            _ => {
                let keep = if streaming {
                    rest.len()
                        - partial_suffix(rest, OPEN).max(partial_suffix(rest, GEMMA_THOUGHT_CLOSE))
                } else {
                    rest.len()
                };
                out += &rest[..keep];
                break;
            }
        }
    }
    (thoughts, out)
}

/// The reasoning of a reply whose first thought was `first` and which had further
/// `thoughts` (Gemma 4): the non-empty ones, trimmed, a line apart.
fn join_thoughts(first: &str, thoughts: &[&str]) -> String {
    std::iter::once(first)
        .chain(thoughts.iter().copied())
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The length of the longest end of `text` that begins `marker` (without being all of it).
fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

/// One piece of a streamed reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyDelta {
    /// More reasoning.
    Reasoning(String),
    /// More text.
    Content(String),
    /// A tool call starts: its index in the reply, its id and the function's name (its
    /// arguments follow in [`ReplyDelta::Arguments`]).
    ToolCall {
        /// The call's index among the reply's calls (0, 1, …).
        index: usize,
        /// The call's id.
        id: String,
        /// The function's name.
        name: String,
    },
    /// More of call `index`'s arguments (JSON text; the pieces of one call, joined, are
    /// its whole arguments).
    Arguments {
        /// The call's index.
        index: usize,
        /// The piece.
        text: String,
    },
}

/// A reply being streamed: [`ReplyStream::push`] each piece of generated text, then
/// [`ReplyStream::finish`]. The deltas, joined, equal [`ReplySyntax::parse`] of the whole:
/// reasoning, text, and each call's name and arguments (sent in pieces as they are
/// generated).
#[derive(Debug, Clone)]
pub struct ReplyStream {
    syntax: ReplySyntax,
    text: String,
    sent_reasoning: usize,
    sent_content: usize,
    /// The calls started: their ids and the arguments sent.
    calls: Vec<(String, String)>,
}

impl ReplyStream {
    /// A stream for a reply read by `syntax`.
    pub fn new(syntax: ReplySyntax) -> ReplyStream {
        ReplyStream {
            syntax,
            text: String::new(),
            sent_reasoning: 0,
            sent_content: 0,
            calls: Vec::new(),
        }
    }

    /// The reply so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    fn deltas(&mut self, reasoning: &str, content: &str, out: &mut Vec<ReplyDelta>) {
        // Reasoning is sent trimmed at its start, as `parse` trims it.
        let r = reasoning.trim_start();
        if r.len() > self.sent_reasoning && r.is_char_boundary(self.sent_reasoning) {
            out.push(ReplyDelta::Reasoning(r[self.sent_reasoning..].to_string()));
            self.sent_reasoning = r.len();
        }
        if content.len() > self.sent_content && content.is_char_boundary(self.sent_content) {
            out.push(ReplyDelta::Content(
                content[self.sent_content..].to_string(),
            ));
            self.sent_content = content.len();
        }
    }

    /// Sends what is new of the calls: a start for each new call, the arguments' new end.
    /// Arguments that no longer extend what was sent (never, for the formats' parsers) are
    /// not sent.
    fn call_deltas<'a>(
        &mut self,
        calls: impl Iterator<Item = (&'a str, Option<&'a str>, &'a str)>,
        out: &mut Vec<ReplyDelta>,
    ) {
        for (index, (name, id, args)) in calls.enumerate() {
            if index == self.calls.len() {
                let id = id.map_or_else(new_call_id, str::to_string);
                out.push(ReplyDelta::ToolCall {
                    index,
                    id: id.clone(),
                    name: name.to_string(),
                });
                self.calls.push((id, String::new()));
            }
            let sent = &mut self.calls[index].1;
            if args.len() > sent.len() && args.starts_with(sent.as_str()) {
                out.push(ReplyDelta::Arguments {
                    index,
                    text: args[sent.len()..].to_string(),
                });
                *sent = args.to_string();
            }
        }
    }

    /// Adds generated text; gives what can be shown now.
    pub fn push(&mut self, piece: &str) -> Vec<ReplyDelta> {
        self.text.push_str(piece);
        let mut out = Vec::new();
        if self.syntax.is_plain() {
            if !piece.is_empty() {
                out.push(ReplyDelta::Content(piece.to_string()));
                self.sent_content += piece.len();
            }
            return out;
        }
        let text = std::mem::take(&mut self.text);
        let s = self.syntax.settled(&text);
        // Reasoning settles at its end trimmed, so hold its trailing whitespace.
        self.deltas(s.reasoning.trim_end(), &s.content, &mut out);
        let calls = s
            .calls
            .iter()
            .map(|c| (c.name.as_str(), c.id.as_deref(), c.arguments.as_str()));
        self.call_deltas(calls, &mut out);
        drop(s);
        self.text = text;
        out
    }

    /// The reply is complete: what is left (the rest of the text, the calls' rest), and
    /// the whole reply parsed (its calls with the ids the stream sent).
    pub fn finish(&mut self) -> (Vec<ReplyDelta>, ParsedReply) {
        let mut parsed = self.syntax.parse(&self.text);
        let mut out = Vec::new();
        if self.syntax.is_plain() {
            return (out, parsed);
        }
        let reasoning = parsed.reasoning.clone().unwrap_or_default();
        self.deltas(&reasoning, &parsed.content, &mut out);
        let calls: Vec<(String, String, String)> = parsed
            .tool_calls
            .iter()
            .map(|c| (c.name.clone(), c.id.clone(), c.arguments.clone()))
            .collect();
        self.call_deltas(
            calls
                .iter()
                .map(|(n, id, a)| (n.as_str(), Some(id.as_str()), a.as_str())),
            &mut out,
        );
        for (c, (id, _)) in parsed.tool_calls.iter_mut().zip(&self.calls) {
            c.id = id.clone();
        }
        (out, parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tools::{ToolChoice, ToolFormat};

    fn tools() -> ToolSetup {
        let t = serde_json::json!([{"type": "function", "function": {"name": "add",
            "parameters": {"type": "object"}}}]);
        ToolSetup::new(ToolFormat::Hermes, &t, ToolChoice::Auto, true).unwrap()
    }

    /// Streams `text` one character at a time; the joined deltas equal the parse.
    fn stream_matches_parse(syntax: ReplySyntax, text: &str) -> ParsedReply {
        let mut s = ReplyStream::new(syntax.clone());
        let mut deltas = Vec::new();
        for ch in text.chars() {
            deltas.extend(s.push(&ch.to_string()));
        }
        let (rest, parsed) = s.finish();
        deltas.extend(rest);
        let (mut r, mut c, mut calls) = (String::new(), String::new(), Vec::new());
        for d in deltas {
            match d {
                ReplyDelta::Reasoning(x) => r += &x,
                ReplyDelta::Content(x) => c += &x,
                ReplyDelta::ToolCall { index, name, .. } => {
                    assert_eq!(index, calls.len());
                    calls.push((name, String::new()));
                }
                ReplyDelta::Arguments { index, text } => calls[index].1 += &text,
            }
        }
        // The same split (call ids are fresh on each parse).
        let again = syntax.parse(text);
        assert_eq!(
            (&parsed.reasoning, &parsed.content),
            (&again.reasoning, &again.content)
        );
        let strip = |r: &ParsedReply| -> Vec<(String, String)> {
            r.tool_calls
                .iter()
                .map(|c| (c.name.clone(), c.arguments.clone()))
                .collect()
        };
        assert_eq!(strip(&parsed), strip(&again));
        assert_eq!(r, parsed.reasoning.clone().unwrap_or_default(), "{text:?}");
        assert_eq!(c, parsed.content, "{text:?}");
        // Each call's argument pieces join to its whole arguments.
        assert_eq!(calls, strip(&parsed), "{text:?}");
        parsed
    }

    #[test]
    fn reasoning_is_split() {
        let ds = ReplySyntax::new(ReasoningFormat::Deepseek, "assistant\n", None);
        let r = stream_matches_parse(ds.clone(), "<think>\nLet me see.\n</think>\n\nFour.");
        assert_eq!(r.reasoning.as_deref(), Some("Let me see."));
        assert_eq!(r.content, "Four.");
        // No think block: all content, reasoning absent.
        let r = stream_matches_parse(ds.clone(), "<thin is not a tag");
        assert_eq!(
            (r.reasoning, r.content.as_str()),
            (None, "<thin is not a tag")
        );
        // Unclosed (cut off): all reasoning.
        let r = stream_matches_parse(ds, "<think>still thinking");
        assert_eq!(r.reasoning.as_deref(), Some("still thinking"));
        assert_eq!(r.content, "");
        // Forced open by the prompt (DeepSeek-R1's template).
        let forced = ReplySyntax::new(ReasoningFormat::Deepseek, "<｜Assistant｜><think>\n", None);
        assert!(forced.thinking_forced_open);
        let r = stream_matches_parse(forced, "Hmm.\n</think>\nYes.");
        assert_eq!(
            (r.reasoning.as_deref(), r.content.as_str()),
            (Some("Hmm."), "Yes.")
        );
        // --reasoning-format none: left alone.
        let none = ReplySyntax::new(ReasoningFormat::None, "<think>\n", None);
        let r = stream_matches_parse(none, "<think>a</think>b");
        assert_eq!(
            (r.reasoning, r.content.as_str()),
            (None, "<think>a</think>b")
        );
        for name in ["none", "deepseek", "auto", "deepseek-legacy"] {
            assert_eq!(ReasoningFormat::parse(name).map(|f| f.name()), Some(name));
        }
        assert_eq!(
            ReasoningFormat::parse("nothink"),
            Some(ReasoningFormat::None)
        );
        assert!(ReasoningFormat::turns_thinking_off("nothink"));
        // Every name but `none` splits the reasoning off.
        let legacy = ReplySyntax::new(ReasoningFormat::DeepseekLegacy, "assistant\n", None);
        let r = legacy.parse("<think>Hm.</think>Yes.");
        assert_eq!(
            (r.reasoning.as_deref(), r.content.as_str()),
            (Some("Hm."), "Yes.")
        );
        assert_eq!(ReasoningFormat::parse("x"), None);
    }

    /// Gemma 4's marks after the answer, as llama.cpp's parser reads them: an empty
    /// thought block and a channel mark with no thought are dropped, a later thought is
    /// more reasoning, the answer ends at a stray `<channel|>`; streamed as parsed.
    #[test]
    fn gemma4_marks_leave_the_content() {
        let syntax = ReplySyntax::new(ReasoningFormat::Deepseek, "<|turn>model\n", None);
        assert_eq!(syntax.layout, ReplyLayout::Gemma4);
        for (text, reasoning, content) in [
            (
                "<|channel>thought\nPlan.<channel|>It is 4.<|channel>thought\n<channel|>",
                Some("Plan."),
                "It is 4.",
            ),
            ("It is 4.<channel|>junk", None, "It is 4."),
            (
                "<|channel><|channel>thought\nA<channel|>Yes.",
                Some("A"),
                "Yes.",
            ),
            (
                "<|turn>model\nYes.<|channel>thought more<channel|> Sure.",
                Some("more"),
                "Yes. Sure.",
            ),
            ("Plain <b>text</b>.", None, "Plain <b>text</b>."),
        ] {
            let r = stream_matches_parse(syntax.clone(), text);
            assert_eq!(
                (r.reasoning.as_deref(), r.content.as_str()),
                (reasoning, content),
                "{text:?}"
            );
        }
        // `--reasoning-format none` leaves the text as it is.
        let none = ReplySyntax::new(ReasoningFormat::None, "<|turn>model\n", None);
        let text = "A<|channel>thought\n<channel|>";
        assert_eq!(none.parse(text).content, text);
    }

    /// A reply cut off inside a call (by `max_tokens`) has the call as far as it went,
    /// whole or streamed, and none of its text in the content (once its name is known).
    #[test]
    fn a_cut_call_is_the_call_so_far() {
        let syntax = ReplySyntax::new(ReasoningFormat::Deepseek, "", Some(tools()));
        let text = "Calling.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b";
        let r = stream_matches_parse(syntax.clone(), text);
        assert_eq!(r.content, "Calling.");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "add");
        assert!(r.tool_calls[0].arguments.starts_with("{\"a\":1"), "{r:?}");
        // Cut before the name is known: no call, the text as it is (streamed too).
        let text = "Calling.\n<tool_call>\n{\"na";
        let r = stream_matches_parse(syntax, text);
        assert_eq!((r.content.as_str(), r.tool_calls.len()), (text, 0));
    }

    #[test]
    fn streamed_tool_calls_hold_back_the_call() {
        let syntax = ReplySyntax::new(ReasoningFormat::Deepseek, "", Some(tools()));
        let text = "<think>plan</think>Calling.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        let r = stream_matches_parse(syntax.clone(), text);
        assert_eq!(r.content, "Calling.");
        assert_eq!(r.tool_calls.len(), 1);
        // The call's text is never sent as content.
        let mut s = ReplyStream::new(syntax.clone());
        for ch in text.chars() {
            for d in s.push(&ch.to_string()) {
                if let ReplyDelta::Content(c) = d {
                    assert!(!c.contains('<') && !c.contains('{'), "{c:?}");
                }
            }
        }
        // A bare JSON call, and text that only looked like a call's start.
        let r = stream_matches_parse(syntax.clone(), "{\"name\": \"add\", \"arguments\": {}}");
        assert_eq!(r.tool_calls.len(), 1);
        let r = stream_matches_parse(syntax.clone(), "a < b and <tool is not a call");
        assert_eq!(r.content, "a < b and <tool is not a call");
        let r = stream_matches_parse(syntax, "{not json at all");
        assert_eq!(r.content, "{not json at all");
    }

    fn setup(format: ToolFormat, parallel: bool) -> ToolSetup {
        let t = serde_json::json!([
            {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}
        ]);
        ToolSetup::new(format, &t, ToolChoice::Auto, parallel).unwrap()
    }

    /// The deltas of `text` streamed a character at a time.
    fn deltas_of(syntax: &ReplySyntax, text: &str) -> Vec<ReplyDelta> {
        let mut s = ReplyStream::new(syntax.clone());
        let mut out = Vec::new();
        for ch in text.chars() {
            out.extend(s.push(&ch.to_string()));
        }
        out.extend(s.finish().0);
        out
    }

    #[test]
    fn arguments_stream_in_pieces_in_every_format() {
        let cases = [
            (
                ToolFormat::Hermes,
                "Sure.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 12, \"b\": [1, \"x y\"]}}\n</tool_call>\n<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"t\": \"hi\"}}\n</tool_call>",
                2,
            ),
            (
                ToolFormat::Mistral,
                "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}, \"id\": \"abcDEF123\"}, {\"name\": \"echo\", \"arguments\": {}}]",
                2,
            ),
            (
                ToolFormat::Llama3,
                "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1}}; {\"name\": \"echo\", \"parameters\": {\"t\": \"}\"}}",
                2,
            ),
            (
                ToolFormat::Generic,
                "{\"tool_calls\": [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]}",
                1,
            ),
            (
                ToolFormat::Gemma4,
                "<|tool_call>call:add{a:1,b:<|\"|>x, y<|\"|>,c:[1,{d:true}]}<tool_call|>",
                1,
            ),
            (
                ToolFormat::Qwen3Coder,
                "Sure.\n\n<tool_call>\n<function=add>\n<parameter=a>\n12\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=echo>\n<parameter=t>\nhi <b>\n</parameter>\n</function>\n</tool_call>",
                2,
            ),
            (
                ToolFormat::Lfm2,
                "Sure.<|tool_call_start|>[add(a=12, b=[1, 'x y']), echo(t=\"hi\")]<|tool_call_end|>",
                2,
            ),
        ];
        for (format, text, n) in cases {
            let syntax = ReplySyntax::new(ReasoningFormat::Deepseek, "", Some(setup(format, true)));
            let r = stream_matches_parse(syntax.clone(), text);
            assert_eq!(r.tool_calls.len(), n, "{format:?}: {r:?}");
            let d = deltas_of(&syntax, text);
            // The start comes first, with the name; the arguments follow in pieces (one
            // for Gemma 4, whose call is converted once complete).
            let start = d
                .iter()
                .position(|x| matches!(x, ReplyDelta::ToolCall { index: 0, .. }))
                .unwrap();
            let pieces = d
                .iter()
                .filter(|x| matches!(x, ReplyDelta::Arguments { index: 0, .. }))
                .count();
            let first_piece = d
                .iter()
                .position(|x| matches!(x, ReplyDelta::Arguments { index: 0, .. }))
                .unwrap();
            assert!(start < first_piece, "{format:?}");
            // Gemma 4's, Qwen3-Coder's and LFM2's calls are converted once complete.
            let whole = [ToolFormat::Gemma4, ToolFormat::Qwen3Coder, ToolFormat::Lfm2];
            if !whole.contains(&format) {
                assert!(pieces > 3, "{format:?}: {pieces} pieces");
            }
        }
        // Arguments as the model writes them, compact; ids the stream sent are the reply's.
        let syntax = ReplySyntax::new(
            ReasoningFormat::Deepseek,
            "",
            Some(setup(ToolFormat::Mistral, true)),
        );
        let r = syntax.parse("[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"x\": 1.50, \"s\": \"\\u00e9\"}, \"id\": \"abcDEF123\"}]");
        assert_eq!(r.tool_calls[0].arguments, r#"{"x":1.50,"s":"\u00e9"}"#);
        let g = setup(ToolFormat::Gemma4, false)
            .parse("<|tool_call>call:add{a:1,b:<|\"|>x, \"y\"<|\"|>}<tool_call|>");
        assert_eq!(g.tool_calls[0].arguments, r#"{"a":1,"b":"x, \"y\""}"#);
    }

    /// Qwen3.5's prompt opens `<think>`; a call may start before the reasoning closes
    /// (llama.cpp's Qwen3-Coder parser ends the reasoning at `<tool_call>` too).
    #[test]
    fn a_qwen3_coder_call_ends_the_reasoning() {
        let prompt = "<|im_start|>assistant\n<think>\n";
        let syntax = ReplySyntax::new(
            ReasoningFormat::Deepseek,
            prompt,
            Some(setup(ToolFormat::Qwen3Coder, false)),
        );
        let call = "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>";
        for (text, reasoning) in [
            (format!("I add.\n{call}"), "I add."),
            (format!("I add.\n</think>\n\n{call}"), "I add."),
        ] {
            let r = stream_matches_parse(syntax.clone(), &text);
            assert_eq!(r.reasoning.as_deref(), Some(reasoning), "{text}");
            assert_eq!(r.tool_calls.len(), 1, "{text}");
            assert_eq!(r.tool_calls[0].arguments, r#"{"a":1}"#);
        }
        // Without tools the mark is reasoning like any text.
        let plain = ReplySyntax::new(ReasoningFormat::Deepseek, prompt, None);
        let r = plain.parse(&format!("I add.\n{call}"));
        assert!(r.reasoning.unwrap().ends_with("</tool_call>"));
    }

    #[test]
    fn harmony_channels_stream() {
        let t = setup(ToolFormat::Harmony, false);
        let syntax = ReplySyntax::new(ReasoningFormat::Deepseek, "<|start|>assistant", Some(t));
        assert_eq!(syntax.layout, ReplyLayout::Harmony);
        let text = "<|channel|>analysis<|message|>I will add.<|end|><|start|>assistant<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": 1, \"b\": 22}";
        let r = stream_matches_parse(syntax.clone(), text);
        assert_eq!(r.reasoning.as_deref(), Some("I will add."));
        assert_eq!(r.tool_calls[0].arguments, r#"{"a":1,"b":22}"#);
        let d = deltas_of(&syntax, text);
        assert!(
            d.iter()
                .filter(|x| matches!(x, ReplyDelta::Arguments { .. }))
                .count()
                > 3
        );
        let r = stream_matches_parse(
            syntax,
            "<|channel|>analysis<|message|>Hmm.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.",
        );
        assert_eq!(
            (r.reasoning.as_deref(), r.content.as_str()),
            (Some("Hmm."), "It is 4.")
        );
        // Without tools, the same split.
        let plain = ReplySyntax::new(ReasoningFormat::Deepseek, "<|start|>assistant\n", None);
        let r = stream_matches_parse(plain, "<|channel|>final<|message|>Hi<|return|>");
        assert_eq!(r.content, "Hi");
        // Gemma 4's thoughts.
        let gemma = ReplySyntax::new(ReasoningFormat::Deepseek, "<|turn>model\n", None);
        assert_eq!(gemma.layout, ReplyLayout::Gemma4);
        let r = stream_matches_parse(gemma, "<|channel>thought\nSo.<channel|>Four.");
        assert_eq!(
            (r.reasoning.as_deref(), r.content.as_str()),
            (Some("So."), "Four.")
        );
    }
}
