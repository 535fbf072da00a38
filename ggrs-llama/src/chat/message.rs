//! A conversation's parts: [`Message`] and the [`ChatError`] rendering one can give.

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who speaks: `system`, `user`, `assistant` (ChatGLM also has `observation`, a tool's
    /// result).
    pub role: String,
    /// What is said.
    pub content: String,
    /// The tools an assistant message calls (OpenAI's `tool_calls`; empty for most).
    pub tool_calls: Vec<ToolCall>,
    /// For a `tool` message: the id of the call it answers (`tool_call_id`).
    pub tool_call_id: Option<String>,
    /// For a `tool` message: the function's name (some templates show it).
    pub name: Option<String>,
    /// For an assistant message: its reasoning (`reasoning_content`, an Anthropic
    /// `thinking` block), which templates of reasoning models replay in `<think>` tags.
    pub reasoning_content: Option<String>,
}

impl Message {
    /// A message with any role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            reasoning_content: None,
        }
    }

    /// An assistant message calling `calls` (after `content`, which may be empty).
    pub fn assistant_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Message {
        Message {
            tool_calls: calls,
            ..Message::assistant(content)
        }
    }

    /// A tool's result, answering the call `call_id` (of the function `name`).
    pub fn tool_result(
        content: impl Into<String>,
        call_id: Option<String>,
        name: Option<String>,
    ) -> Message {
        Message {
            tool_call_id: call_id,
            name,
            ..Message::new("tool", content)
        }
    }

    /// A system message (instructions for the assistant).
    pub fn system(content: impl Into<String>) -> Message {
        Message::new("system", content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Message {
        Message::new("user", content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Message {
        Message::new("assistant", content)
    }
}

/// What can go wrong turning a conversation into a prompt.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The model carries no template and its architecture has no built-in format.
    #[error(
        "the model (architecture `{arch}`) has no chat template (`tokenizer.chat_template`) and \
         no built-in chat format; give one with --chat-template (a Jinja file, or a built-in \
         format: chatml, gemma, llama3, phi3, command-r, gpt-oss, chatglm3, chatglm4), or use \
         a plain prompt (without --chat)"
    )]
    NoTemplate {
        /// The model's architecture (`general.architecture`).
        arch: &'static str,
    },
    /// The Jinja template failed to compile or to render.
    #[error("the chat template failed: {detail}")]
    Template {
        /// minijinja's message (with the template line where it has one).
        detail: String,
    },
    /// A built-in format met a role it has no marker for.
    #[error("the {format} chat format has no role `{role}` (it knows: {known})")]
    UnknownRole {
        /// The format's name.
        format: &'static str,
        /// The role given.
        role: String,
        /// The roles it knows.
        known: &'static str,
    },
    /// A chat template argument that is no known format name, names no file and holds no
    /// Jinja tag.
    #[error(
        "the chat template `{given}` is not a file, not a built-in format ({known}) and not a \
         Jinja template (it has no `{{{{` or `{{%`)"
    )]
    UnknownTemplate {
        /// The argument (its first 200 characters).
        given: String,
        /// The built-in format names.
        known: &'static str,
    },
    /// Nothing to format.
    #[error("the conversation is empty: give at least one message")]
    EmptyConversation,
    /// A built-in format that needs its messages in a fixed order met another.
    #[error("the {format} chat format needs {expected}; message {index} has role `{role}`")]
    Order {
        /// The format's name.
        format: &'static str,
        /// What the format accepts.
        expected: &'static str,
        /// Index of the first message out of order.
        index: usize,
        /// Its role.
        role: String,
    },
}

impl From<minijinja::Error> for ChatError {
    fn from(e: minijinja::Error) -> ChatError {
        // minijinja's Display gives the kind and message; its alternate form adds the source
        // context. Keep the message and the line, as they say what to fix.
        let mut detail = e.to_string();
        if let Some(line) = e.line() {
            detail = format!("{detail} (template line {line})");
        }
        ChatError::Template { detail }
    }
}

/// One call of a tool by the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The call's id (`call_…`), which the tool's answer names (`tool_call_id`).
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments: a JSON object, as text (OpenAI's `function.arguments`).
    pub arguments: String,
}
