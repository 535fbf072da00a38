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

use super::tools::{ParsedReply, ToolCall, ToolSetup};

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// What to do with `<think>` blocks (llama-server's `--reasoning-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReasoningFormat {
    /// Leave them in the content.
    None,
    /// Move them to `reasoning_content` (llama-server's `deepseek`, and its `auto`).
    #[default]
    Deepseek,
}

impl ReasoningFormat {
    /// Reads llama-server's names: `none`, `deepseek`, `auto` (= deepseek).
    pub fn parse(s: &str) -> Option<ReasoningFormat> {
        match s {
            "none" => Some(ReasoningFormat::None),
            "deepseek" | "auto" => Some(ReasoningFormat::Deepseek),
            _ => None,
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
}

impl ReplySyntax {
    /// The syntax for a reply to `prompt` (the rendered conversation).
    pub fn new(reasoning: ReasoningFormat, prompt: &str, tools: Option<ToolSetup>) -> ReplySyntax {
        let thinking_forced_open =
            reasoning != ReasoningFormat::None && prompt.trim_end().ends_with(THINK_OPEN);
        ReplySyntax {
            reasoning,
            thinking_forced_open,
            tools,
        }
    }

    /// Whether the reply needs any splitting at all.
    pub fn is_plain(&self) -> bool {
        self.reasoning == ReasoningFormat::None && !self.tools.as_ref().is_some_and(|t| t.active())
    }

    /// Splits off the reasoning: (reasoning, the rest, whether the reasoning is closed).
    fn split_reasoning<'a>(&self, text: &'a str) -> (Option<&'a str>, &'a str, bool) {
        if self.reasoning == ReasoningFormat::None {
            return (None, text, true);
        }
        let inner = if self.thinking_forced_open {
            text.strip_prefix(THINK_OPEN).unwrap_or(text)
        } else {
            match text.trim_start().strip_prefix(THINK_OPEN) {
                Some(inner) => inner,
                None => return (None, text, true),
            }
        };
        match inner.find(THINK_CLOSE) {
            Some(e) => (
                Some(&inner[..e]),
                inner[e + THINK_CLOSE.len()..].trim_start(),
                true,
            ),
            None => (Some(inner), "", false),
        }
    }

    /// The whole reply, split.
    pub fn parse(&self, text: &str) -> ParsedReply {
        let (reasoning, rest, _) = self.split_reasoning(text);
        let mut reply = match &self.tools {
            Some(t) => t.parse(rest),
            None => ParsedReply {
                content: rest.to_string(),
                ..ParsedReply::default()
            },
        };
        reply.reasoning = reasoning.map(|r| r.trim().to_string());
        reply
    }

    /// What of `text` (a reply so far) can be shown now and will not change: (reasoning,
    /// content). Held back: a possible start of `<think>`/`</think>` at the end, and
    /// everything from the start of a tool call on (sent whole by
    /// [`ReplyStream::finish`]).
    fn settled<'a>(&self, text: &'a str) -> (&'a str, &'a str) {
        if self.reasoning != ReasoningFormat::None && !self.thinking_forced_open {
            let t = text.trim_start();
            if THINK_OPEN.starts_with(t) {
                return ("", ""); // may still become `<think>`
            }
        }
        let (reasoning, rest, closed) = self.split_reasoning(text);
        if !closed {
            let r = reasoning.unwrap_or("");
            return (&r[..r.len() - partial_suffix(r, THINK_CLOSE)], "");
        }
        let reasoning = reasoning.unwrap_or("");
        let Some(tools) = self.tools.as_ref().filter(|t| t.active()) else {
            return (reasoning, rest);
        };
        // A reply that may be a bare JSON call (any format accepts one) waits for the end.
        let lead = rest.trim_start();
        if lead.starts_with('{') || lead.starts_with("```json") || "```json".starts_with(lead) {
            return (reasoning, "");
        }
        let mut end = rest.len();
        for o in tools.openers() {
            if let Some(p) = rest.find(o) {
                end = end.min(p);
            }
            end = end.min(rest.len() - partial_suffix(rest, o));
        }
        (reasoning, rest[..end].trim_end_matches(['\n', ' ']))
    }
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
    /// A tool call (sent whole, once the reply is complete).
    ToolCall(ToolCall),
}

/// A reply being streamed: [`ReplyStream::push`] each piece of generated text, then
/// [`ReplyStream::finish`]. The deltas, joined, equal [`ReplySyntax::parse`] of the whole.
#[derive(Debug, Clone)]
pub struct ReplyStream {
    syntax: ReplySyntax,
    text: String,
    sent_reasoning: usize,
    sent_content: usize,
}

impl ReplyStream {
    /// A stream for a reply read by `syntax`.
    pub fn new(syntax: ReplySyntax) -> ReplyStream {
        ReplyStream {
            syntax,
            text: String::new(),
            sent_reasoning: 0,
            sent_content: 0,
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
        let (r, c) = self.syntax.settled(&text);
        // Reasoning settles at its end trimmed, so hold its trailing whitespace.
        self.deltas(r.trim_end(), c, &mut out);
        self.text = text;
        out
    }

    /// The reply is complete: what is left (the rest of the text, the tool calls), and the
    /// whole reply parsed.
    pub fn finish(&mut self) -> (Vec<ReplyDelta>, ParsedReply) {
        let parsed = self.syntax.parse(&self.text);
        let mut out = Vec::new();
        if self.syntax.is_plain() {
            return (out, parsed);
        }
        let reasoning = parsed.reasoning.clone().unwrap_or_default();
        self.deltas(&reasoning, &parsed.content, &mut out);
        out.extend(parsed.tool_calls.iter().cloned().map(ReplyDelta::ToolCall));
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
                ReplyDelta::ToolCall(x) => calls.push(x.name),
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
        let names: Vec<String> = parsed.tool_calls.iter().map(|c| c.name.clone()).collect();
        assert_eq!(calls, names);
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
        assert_eq!(
            ReasoningFormat::parse("auto"),
            Some(ReasoningFormat::Deepseek)
        );
        assert_eq!(ReasoningFormat::parse("x"), None);
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
}
