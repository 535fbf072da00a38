//! A chat request made ready for generation ([`ChatPlan`]): the conversation (with tool
//! calls and tool results) rendered by the model's template with the request's tools, the
//! grammar that forces or checks a call, and the syntax that splits the reply into
//! reasoning, text and tool calls — whole ([`ChatPlan::parse`]) or while it streams
//! ([`ReplyPieces`]). The Python half builds llama-cpp-python's answers from them.

use ggrs_llama::chat::reply::{ReasoningFormat, ReplyDelta, ReplyStream, ReplySyntax};
use ggrs_llama::chat::tools::{ParsedReply, ToolCall, ToolChoice, ToolFormat, ToolSetup};
use ggrs_llama::chat::{ChatTemplate, Message, TemplateVars};
use ggrs_llama::constraint::{GrammarSpec, LazyTrigger};
use ggrs_llama::{LlamaError, Model};
use pyo3::prelude::*;

use crate::errors::{bad_argument, IntoPyResult};

/// One message as Python passes it: role, content, tool calls `(id, name, arguments)`,
/// `tool_call_id`, `name`, `reasoning_content`.
pub type PyMessage = (
    String,
    String,
    Vec<(String, String, String)>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// A reply as Python reads it: reasoning (None when not split off), text, calls
/// `(id, name, arguments)`.
type PyReply = (Option<String>, String, Vec<(String, String, String)>);

/// A piece of a streamed reply: kind (`reasoning`, `content`, `call`, `arguments`), call
/// index, and two texts (the text; for `call` the id and the name).
type PyDelta = (&'static str, usize, String, String);

fn reply(r: ParsedReply) -> PyReply {
    let calls = r
        .tool_calls
        .into_iter()
        .map(|c| (c.id, c.name, c.arguments))
        .collect();
    (r.reasoning, r.content, calls)
}

fn delta(d: ReplyDelta) -> PyDelta {
    match d {
        ReplyDelta::Reasoning(t) => ("reasoning", 0, t, String::new()),
        ReplyDelta::Content(t) => ("content", 0, t, String::new()),
        ReplyDelta::ToolCall { index, id, name } => ("call", index, id, name),
        ReplyDelta::Arguments { index, text } => ("arguments", index, text, String::new()),
    }
}

/// A chat request ready to generate: its prompt, the tools' grammar, its reply's syntax.
#[pyclass(frozen, module = "ggrs._ggrs")]
pub struct ChatPlan {
    prompt: String,
    syntax: ReplySyntax,
    /// The tools' grammar, with its trigger when lazy (`tool_choice` auto).
    grammar: Option<(GrammarSpec, Option<LazyTrigger>)>,
}

impl ChatPlan {
    /// The grammar the generation follows, given the request's own (`grammar`,
    /// `response_format`): a request's own wins over a lazy tools grammar, and cannot be
    /// combined with a forced call.
    pub fn constraint(
        &self,
        own: Option<GrammarSpec>,
    ) -> Result<(Option<GrammarSpec>, Option<LazyTrigger>), String> {
        match (own, &self.grammar) {
            (None, Some((g, trigger))) => Ok((Some(g.clone()), trigger.clone())),
            (Some(own), Some((_, Some(_)))) | (Some(own), None) => Ok((Some(own), None)),
            (None, None) => Ok((None, None)),
            (Some(_), Some((_, None))) => Err("give a grammar or a response_format schema, or a \
                                               tool_choice that forces a call, not both"
                .into()),
        }
    }
}

#[pymethods]
impl ChatPlan {
    /// The rendered prompt.
    #[getter]
    fn prompt(&self) -> &str {
        &self.prompt
    }

    /// The reply split: `(reasoning, content, [(id, name, arguments)])`.
    fn parse(&self, text: &str) -> PyReply {
        reply(self.syntax.parse(text))
    }

    /// A splitter for a reply as it streams.
    fn stream(&self) -> ReplyPieces {
        ReplyPieces {
            inner: ReplyStream::new(self.syntax.clone()),
        }
    }
}

/// A reply split while it streams (see `ggrs_llama::chat::reply::ReplyStream`).
#[pyclass(module = "ggrs._ggrs")]
pub struct ReplyPieces {
    inner: ReplyStream,
}

#[pymethods]
impl ReplyPieces {
    /// Adds generated text; gives the pieces that can be shown now.
    fn push(&mut self, text: &str) -> Vec<PyDelta> {
        self.inner.push(text).into_iter().map(delta).collect()
    }

    /// The reply is complete: the last pieces and the whole reply split.
    fn finish(&mut self) -> (Vec<PyDelta>, PyReply) {
        let (pieces, parsed) = self.inner.finish();
        (pieces.into_iter().map(delta).collect(), reply(parsed))
    }
}

/// What `chat_plan` is asked for, besides the model and the messages.
pub struct PlanRequest {
    pub add_generation_prompt: bool,
    pub template: Option<String>,
    pub enable_thinking: bool,
    /// OpenAI's `tools` list, as JSON text.
    pub tools: Option<String>,
    /// `auto`, `none`, `required` or `function` (with `tool_name`).
    pub tool_choice: String,
    pub tool_name: Option<String>,
    pub parallel_tool_calls: bool,
    /// Split `<think>` reasoning off.
    pub reasoning: bool,
}

/// Renders `messages` with the request's tools and makes its plan.
pub fn chat_plan(
    py: Python<'_>,
    model: &Model,
    messages: Vec<PyMessage>,
    req: PlanRequest,
) -> PyResult<ChatPlan> {
    let format = ChatTemplate::resolve(model, req.template.as_deref())
        .map_err(LlamaError::from)
        .py_err(py)?;
    let msgs: Vec<Message> = messages
        .into_iter()
        .map(|(role, content, calls, call_id, name, reasoning)| {
            let mut m = Message::new(role, content);
            m.tool_calls = calls
                .into_iter()
                .map(|(id, name, arguments)| ToolCall {
                    id,
                    name,
                    arguments,
                })
                .collect();
            m.tool_call_id = call_id;
            m.name = name;
            m.reasoning_content = reasoning;
            m
        })
        .collect();
    let tools = match &req.tools {
        None => None,
        Some(text) => {
            let list: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| bad_argument(py, format!("`tools` is not valid JSON: {e}")))?;
            let choice = match (req.tool_choice.as_str(), req.tool_name) {
                ("auto", _) => ToolChoice::Auto,
                ("none", _) => ToolChoice::None,
                ("required", _) => ToolChoice::Required,
                ("function", Some(n)) => ToolChoice::Named(n),
                (other, _) => {
                    return Err(bad_argument(
                        py,
                        format!(
                            "`tool_choice` must be \"auto\", \"none\", \"required\" or \
                             {{\"type\": \"function\", \"function\": {{\"name\": …}}}}, not {other:?}"
                        ),
                    ))
                }
            };
            let setup = ToolSetup::new(
                ToolFormat::of_template(&format),
                &list,
                choice,
                req.parallel_tool_calls,
            )
            .map_err(|e| bad_argument(py, e.to_string()))?;
            Some(setup).filter(|s| !s.tools.is_empty())
        }
    };
    let (msgs, tools_value) = match &tools {
        Some(t) => t.prepare(&msgs),
        None => (msgs, None),
    };
    let vars = TemplateVars {
        enable_thinking: req.enable_thinking,
        ..TemplateVars::default()
    };
    let prompt = format
        .render_tools(
            &msgs,
            req.add_generation_prompt,
            &vars,
            tools_value.as_ref(),
        )
        .map_err(LlamaError::from)
        .py_err(py)?;
    let grammar = tools.as_ref().and_then(|t| t.grammar(model.tokenizer()));
    let reasoning = if req.reasoning {
        ReasoningFormat::Deepseek
    } else {
        ReasoningFormat::None
    };
    let syntax = ReplySyntax::new(reasoning, &prompt, tools);
    Ok(ChatPlan {
        prompt,
        syntax,
        grammar,
    })
}
