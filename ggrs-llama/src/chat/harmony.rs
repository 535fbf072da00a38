//! GPT-OSS's harmony replies: messages on channels. The reply after the prompt's
//! `<|start|>assistant` is a run of messages, each `[<|start|>assistant][ to=RECIPIENT]`
//! `<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>BODY` ended by
//! `<|end|>` (another message follows), `<|call|>` or `<|return|>` (the reply ends):
//! - `analysis`: the model's reasoning (`reasoning_content`);
//! - `final`: the answer (`content`);
//! - `commentary` to `functions.NAME`: a tool call whose body is the JSON arguments;
//!   `commentary` to no one: a preamble, shown as content.
//!
//! ```
//! use ggrs_llama::chat::harmony;
//! let r = harmony::parse(
//!     "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>4",
//!     None,
//!     true,
//! );
//! assert_eq!((r.reasoning.as_deref(), r.content.as_str()), (Some("Easy."), "4"));
//! ```

use serde_json::Value;

use super::json_scan::minify;
use super::tools::{new_call_id, ParsedReply, PartialCall, ToolCall, ToolSetup, HARMONY_TO};

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
/// What ends a message's body.
const ENDS: [&str; 3] = ["<|end|>", "<|call|>", "<|return|>"];

/// The harmony marks a reply is made of: generated, they are written in its text (as
/// llama-server keeps them), so that the channels can be read. (`<|call|>` and
/// `<|return|>` end the generation.)
pub const MARKS: [&str; 5] = [
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|constrain|>",
];

/// Whether a prompt ends where a harmony reply starts.
pub fn prompt_opens_reply(prompt: &str) -> bool {
    prompt.trim_end().ends_with("<|start|>assistant")
}

/// One message of a reply.
struct Msg<'a> {
    channel: &'a str,
    /// The function a call goes to (`to=functions.NAME`).
    function: Option<&'a str>,
    body: &'a str,
    complete: bool,
    /// No harmony header at all: text as it is.
    plain: bool,
}

/// The longest end of `text` that may still become one of `marks`.
fn held_back(text: &str, marks: &[&str]) -> usize {
    marks
        .iter()
        .map(|m| {
            (1..m.len().min(text.len() + 1))
                .rev()
                .find(|&n| {
                    text.is_char_boundary(text.len() - n) && m.starts_with(&text[text.len() - n..])
                })
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}

/// The word after `key` in `header` (up to a space or a `<`).
fn word_after<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let p = header.find(key)? + key.len();
    let rest = &header[p..];
    let end = rest.find([' ', '<', '\n']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The reply's messages; `partial`: the text may still grow (an unfinished header is left
/// out, a body's possible marker start held back).
fn messages(text: &str, partial: bool) -> Vec<Msg<'_>> {
    let mut out = Vec::new();
    let n = text.split(START).count();
    for (k, seg) in text.split(START).enumerate() {
        let last = k + 1 == n;
        let Some(m) = seg.find(MESSAGE) else {
            let lead = seg.trim_start();
            let may_be_header = lead.starts_with(CHANNEL)
                || CHANNEL.starts_with(lead)
                || lead.starts_with("to=")
                || (k > 0 && ("assistant".starts_with(lead) || lead.starts_with("assistant")));
            if k == 0 && (!partial || !may_be_header) {
                // The model wrote no harmony header: the text is content.
                let cut = if partial && last {
                    held_back(seg, &[START])
                } else {
                    0
                };
                out.push(Msg {
                    channel: "",
                    function: None,
                    body: &seg[..seg.len() - cut],
                    complete: !partial,
                    plain: true,
                });
            }
            continue;
        };
        let header = &seg[..m];
        let rest = &seg[m + MESSAGE.len()..];
        let end = ENDS.iter().filter_map(|e| rest.find(e)).min();
        let (body, complete) = match end {
            Some(e) => (&rest[..e], true),
            None if partial && last => {
                let mut marks = ENDS.to_vec();
                marks.push(START);
                (&rest[..rest.len() - held_back(rest, &marks)], false)
            }
            None => (rest, !partial),
        };
        out.push(Msg {
            channel: word_after(header, CHANNEL).unwrap_or(""),
            function: word_after(header, HARMONY_TO),
            body,
            complete,
            plain: false,
        });
    }
    out
}

/// What a reply holds so far: reasoning, content, the calls.
pub(crate) struct Split {
    pub reasoning: Option<String>,
    pub content: String,
    pub calls: Vec<PartialCall>,
}

/// Splits `text`; `tools`: the request's (calls to others are content); `reasoning`: move
/// `analysis` to the reasoning (else it is content too).
pub(crate) fn split(
    text: &str,
    tools: Option<&ToolSetup>,
    reasoning: bool,
    partial: bool,
) -> Split {
    let mut out = Split {
        reasoning: None,
        content: String::new(),
        calls: Vec::new(),
    };
    let tools = tools.filter(|t| t.active());
    for m in messages(text, partial) {
        if let (Some(f), Some(t)) = (m.function, tools) {
            if t.knows(f) {
                out.calls.push(PartialCall {
                    name: f.to_string(),
                    id: None,
                    arguments: minify(m.body.trim()),
                    complete: m.complete,
                });
                continue;
            }
        }
        if m.channel == "analysis" && reasoning && !m.plain {
            let r = out.reasoning.get_or_insert_with(String::new);
            if !r.is_empty() {
                r.push('\n');
            }
            r.push_str(m.body);
        } else {
            out.content.push_str(m.body);
        }
    }
    out
}

/// The whole reply split: `analysis` to the reasoning (with `reasoning`), `final` and
/// preambles to the content, calls of the request's tools to tool calls (a call whose
/// arguments are not JSON stays content).
pub fn parse(text: &str, tools: Option<&ToolSetup>, reasoning: bool) -> ParsedReply {
    let s = split(text, tools, reasoning, false);
    let mut reply = ParsedReply {
        reasoning: s.reasoning.map(|r| r.trim().to_string()),
        content: s.content,
        tool_calls: Vec::new(),
    };
    for c in s.calls {
        if serde_json::from_str::<Value>(&c.arguments).is_ok() {
            reply.tool_calls.push(ToolCall {
                id: new_call_id(),
                name: c.name,
                arguments: c.arguments,
            });
        } else {
            reply.content.push_str(&c.arguments);
        }
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tools::{ToolChoice, ToolFormat};

    fn tools() -> ToolSetup {
        let t = serde_json::json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        ToolSetup::new(ToolFormat::Harmony, &t, ToolChoice::Auto, false).unwrap()
    }

    #[test]
    fn channels_split() {
        let t = tools();
        let text = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
        let r = parse(text, Some(&t), true);
        assert_eq!(r.reasoning.as_deref(), Some("Need weather."));
        assert_eq!(r.content, "");
        assert_eq!(r.tool_calls[0].name, "get_weather");
        assert_eq!(r.tool_calls[0].arguments, r#"{"city":"Paris"}"#);
        // The recipient in the role header.
        let r = parse(
            "<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{}",
            Some(&t),
            true,
        );
        assert_eq!(r.tool_calls.len(), 1);
        // A final answer; reasoning kept as content with reasoning off.
        let text = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hi!";
        let r = parse(text, Some(&t), false);
        assert_eq!((r.reasoning, r.content.as_str()), (None, "thinkHi!"));
        // An unknown function, or no harmony at all: content.
        let r = parse(
            "<|channel|>commentary to=functions.rm<|message|>{}",
            Some(&t),
            true,
        );
        assert_eq!((r.tool_calls.len(), r.content.as_str()), (0, "{}"));
        let r = parse("plain words", Some(&t), true);
        assert_eq!(r.content, "plain words");
    }
}
