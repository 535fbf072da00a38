//! Chat: a conversation (a list of [`Message`]s) turned into the prompt text a model was
//! trained on, and [`Chat`], a multi-turn conversation that keeps its KV cache between turns.
//!
//! Where the prompt format comes from ([`ChatTemplate::for_model`]):
//! 1. the model's own Jinja template (`tokenizer.chat_template`), rendered with `minijinja`
//!    the way Hugging Face's `apply_chat_template` renders it (`trim_blocks`,
//!    `lstrip_blocks`, `raise_exception`, Python string methods such as `.strip()`);
//! 2. for a `chatglm` model without a template, the ChatGLM3 format built in (GLM-4's when the
//!    vocabulary is GLM-4's byte-level BPE, `chatglm-bpe`/`glm4`);
//! 3. otherwise an error: there is no way to know the format.
//!
//! ChatGLM-6B v1 (`chatglm1`) always gets the official `chat()` convention
//! ([`ChatTemplate::ChatGlm1`]): its prompt ends with `[gMASK] <sop>` after a bidirectional
//! context, so [`Chat`] re-evaluates the whole conversation at every turn.
//!
//! ```no_run
//! use std::ops::ControlFlow;
//! use std::sync::Arc;
//! use ggrs_llama::chat::{Chat, Message};
//! use ggrs_llama::{GenerateParams, Model, Session, SessionParams};
//!
//! # fn main() -> ggrs_llama::Result<()> {
//! let model = Arc::new(Model::load("chatglm3-6b-q4_0.gguf")?);
//! let session = Session::new(model, SessionParams::default())?;
//! let mut chat = Chat::new(session)?;
//! chat.set_system(Some("Answer briefly.".into()));
//! for question in ["What is Rust?", "And Cargo?"] {
//!     // The second turn only evaluates its new tokens: the cache holds the first.
//!     let reply = chat.send(question, &GenerateParams::default(), |ev| {
//!         print!("{}", ev.text);
//!         ControlFlow::Continue(())
//!     })?;
//!     println!("\n[{} tokens]", reply.tokens.len());
//! }
//! # Ok(()) }
//! ```

use std::ops::ControlFlow;

use crate::error::{LlamaError, Result};
use crate::generate::{GenerateParams, Generation, TokenEvent};
use crate::hparams::Arch;
use crate::model::Model;
use crate::session::Session;
use crate::tokenizer::Tokenizer;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who speaks: `system`, `user`, `assistant` (ChatGLM also has `observation`, a tool's
    /// result).
    pub role: String,
    /// What is said.
    pub content: String,
}

impl Message {
    /// A message with any role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
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
         no built-in chat format; use a plain prompt (without --chat) or a model with a template"
    )]
    NoTemplate {
        /// The model's architecture.
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

/// A prompt format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplate {
    /// A Jinja template (Hugging Face's `chat_template`), with the texts it may refer to as
    /// `bos_token` and `eos_token`.
    Jinja {
        /// The template source.
        source: String,
        /// Text of the BOS token (empty if none).
        bos_token: String,
        /// Text of the EOS token (empty if none).
        eos_token: String,
    },
    /// ChatGLM3, as llama.cpp formats it: `[gMASK]sop`, then per message
    /// `<|role|>` + `"\n "` + content, then `<|assistant|>`. (The space after the newline
    /// reproduces the tokens of ChatGLM3's own tokenizer, which encodes the role line and the
    /// content separately, each with SentencePiece's leading space.)
    ChatGlm3,
    /// GLM-4 without a template, as llama.cpp formats it: `[gMASK]<sop>`, then per message
    /// `<|role|>\n` + content, then `<|assistant|>\n`.
    Glm4,
    /// ChatGLM-6B v1, as the official `chat()` builds its prompt
    /// ([`chatglm1::chat_prompt`](crate::arch::chatglm1::chat_prompt)): the bare question
    /// for the first turn, else `[Round i]\n问：…\n答：…\n` per past turn and
    /// `[Round n]\n问：{question}\n答：`. Messages alternate user and assistant and end with
    /// the user's question (no system role); the text is encoded with
    /// [`chatglm1::encode_prompt`](crate::arch::chatglm1::encode_prompt), which applies the
    /// v1 text conventions and appends `[gMASK] <sop>`.
    ChatGlm1,
}

/// Roles the ChatGLM formats have markers for.
const GLM_ROLES: &str = "system, user, assistant, observation";

impl ChatTemplate {
    /// The format for `model`: [`ChatTemplate::ChatGlm1`] for a `chatglm1` model (its prompt
    /// needs the v1 encoding, which no Jinja template can express), else its Jinja template
    /// if it has one, the built-in ChatGLM format for a `chatglm` model without one, else
    /// [`ChatError::NoTemplate`].
    pub fn for_model(model: &Model) -> std::result::Result<ChatTemplate, ChatError> {
        if model.hparams.arch == Arch::ChatGlm1 {
            return Ok(ChatTemplate::ChatGlm1);
        }
        let tok = model.tokenizer();
        if let Some(src) = model.meta_str("tokenizer.chat_template") {
            return Ok(ChatTemplate::jinja(src, tok));
        }
        match model.hparams.arch {
            Arch::ChatGlm => Ok(ChatTemplate::builtin_glm(tok)),
            arch => Err(ChatError::NoTemplate { arch: arch.name() }),
        }
    }

    /// A Jinja template whose `bos_token`/`eos_token` are `tok`'s.
    pub fn jinja(source: impl Into<String>, tok: &Tokenizer) -> ChatTemplate {
        let text = |id: Option<u32>| {
            id.and_then(|id| tok.vocab().token(id))
                .map(|t| t.text.clone())
                .unwrap_or_default()
        };
        ChatTemplate::Jinja {
            source: source.into(),
            bos_token: text(tok.bos()),
            eos_token: text(tok.eos()),
        }
    }

    /// The built-in ChatGLM format for `tok`: GLM-4's for its BPE vocabulary
    /// (`chatglm-bpe`, `glm4`), ChatGLM3's otherwise.
    pub fn builtin_glm(tok: &Tokenizer) -> ChatTemplate {
        match tok.vocab().pre_name() {
            Some("chatglm-bpe" | "glm4") => ChatTemplate::Glm4,
            _ => ChatTemplate::ChatGlm3,
        }
    }

    /// The prompt text for `messages`; with `add_generation_prompt`, ending with the marker
    /// that starts the assistant's reply.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> std::result::Result<String, ChatError> {
        if messages.is_empty() {
            return Err(ChatError::EmptyConversation);
        }
        match self {
            ChatTemplate::Jinja {
                source,
                bos_token,
                eos_token,
            } => render_jinja(
                source,
                messages,
                add_generation_prompt,
                bos_token,
                eos_token,
            ),
            ChatTemplate::ChatGlm3 => render_glm(
                "ChatGLM3",
                messages,
                "[gMASK]sop",
                "\n ",
                add_generation_prompt,
                "",
            ),
            ChatTemplate::Glm4 => render_glm(
                "GLM-4",
                messages,
                "[gMASK]<sop>",
                "\n",
                add_generation_prompt,
                "\n",
            ),
            ChatTemplate::ChatGlm1 => render_glm1(messages, add_generation_prompt),
        }
    }
}

/// The official ChatGLM-6B v1 prompt of `messages` (user, assistant, …, user).
fn render_glm1(
    messages: &[Message],
    add_generation_prompt: bool,
) -> std::result::Result<String, ChatError> {
    const FORMAT: &str = "ChatGLM-6B";
    const EXPECTED: &str =
        "alternating user and assistant messages, starting and ending with the user's";
    for (index, m) in messages.iter().enumerate() {
        let want = if index % 2 == 0 { "user" } else { "assistant" };
        if m.role != want {
            return Err(if GLM1_ROLES.split(", ").any(|r| r == m.role) {
                ChatError::Order {
                    format: FORMAT,
                    expected: EXPECTED,
                    index,
                    role: m.role.clone(),
                }
            } else {
                ChatError::UnknownRole {
                    format: FORMAT,
                    role: m.role.clone(),
                    known: GLM1_ROLES,
                }
            });
        }
    }
    // The official format only has a prompt that ends with a question to answer.
    let (Some(query), true) = (messages.last(), add_generation_prompt) else {
        return Err(ChatError::Order {
            format: FORMAT,
            expected: "a conversation ending with a user question and a generation prompt",
            index: messages.len().saturating_sub(1),
            role: messages.last().map_or_else(String::new, |m| m.role.clone()),
        });
    };
    if query.role != "user" {
        return Err(ChatError::Order {
            format: FORMAT,
            expected: EXPECTED,
            index: messages.len() - 1,
            role: query.role.clone(),
        });
    }
    let history: Vec<(String, String)> = messages[..messages.len() - 1]
        .chunks_exact(2)
        .map(|p| (p[0].content.clone(), p[1].content.clone()))
        .collect();
    Ok(crate::arch::chatglm1::chat_prompt(&history, &query.content))
}

/// Roles of the ChatGLM-6B v1 format.
const GLM1_ROLES: &str = "user, assistant";

/// The reply as the official `chat()` keeps it in the history (`process_response`):
/// trimmed, `[[训练时间]]` replaced by `2023年`, and each ASCII `, ! : ; ?` next to a CJK
/// ideograph (U+4E00–U+9FFF) written in its full-width form.
fn glm1_process_response(text: &str) -> String {
    let text = text.trim().replace("[[训练时间]]", "2023年");
    let cjk = |c: Option<&char>| c.is_some_and(|c| ('\u{4e00}'..='\u{9fff}').contains(c));
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    for (i, &c) in chars.iter().enumerate() {
        let wide = match c {
            ',' => '，',
            '!' => '！',
            ':' => '：',
            ';' => '；',
            '?' => '？',
            _ => c,
        };
        let near_cjk = cjk(i.checked_sub(1).and_then(|j| chars.get(j))) || cjk(chars.get(i + 1));
        out.push(if near_cjk { wide } else { c });
    }
    out
}

fn render_glm(
    format: &'static str,
    messages: &[Message],
    prefix: &str,
    after_role: &str,
    add_generation_prompt: bool,
    after_assistant: &str,
) -> std::result::Result<String, ChatError> {
    let mut s = String::from(prefix);
    for m in messages {
        if !GLM_ROLES.split(", ").any(|r| r == m.role) {
            return Err(ChatError::UnknownRole {
                format,
                role: m.role.clone(),
                known: GLM_ROLES,
            });
        }
        s.push_str("<|");
        s.push_str(&m.role);
        s.push_str("|>");
        s.push_str(after_role);
        s.push_str(&m.content);
    }
    if add_generation_prompt {
        s.push_str("<|assistant|>");
        s.push_str(after_assistant);
    }
    Ok(s)
}

fn render_jinja(
    source: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> std::result::Result<String, ChatError> {
    use minijinja::{Environment, Error, ErrorKind, Value};
    let mut env = Environment::new();
    // Hugging Face renders chat templates with these two options on.
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    // `str.strip()`, `.startswith()`, `dict.items()`… as templates written for Python use.
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        },
    );
    let msgs: Vec<Value> = messages
        .iter()
        .map(|m| {
            Value::from_iter([
                ("role", Value::from(m.role.as_str())),
                ("content", Value::from(m.content.as_str())),
            ])
        })
        .collect();
    let ctx = Value::from_iter([
        ("messages", Value::from(msgs)),
        ("add_generation_prompt", Value::from(add_generation_prompt)),
        ("bos_token", Value::from(bos_token)),
        ("eos_token", Value::from(eos_token)),
    ]);
    Ok(env.render_str(source, ctx)?)
}

/// Token ids of a rendered prompt: special tokens parsed, BOS added as the model adds it,
/// but only once when the template already wrote the BOS text (Llama 3's templates do).
pub fn encode_prompt(tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    let mut ids = tok.encode(text, true, true)?;
    if let Some(bos) = tok.bos() {
        if tok.vocab().add_bos() && ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
            ids.remove(0);
        }
    }
    Ok(ids)
}

/// A multi-turn conversation on a [`Session`]: each [`Chat::send`] renders the whole
/// conversation, evaluates only the tokens that differ from what the KV cache already holds
/// (normally just the new turn) and generates the reply.
///
/// With [`ChatTemplate::ChatGlm1`] every turn clears the cache and evaluates the whole
/// prompt, as the official `chat()` does: the context before `[gMASK] <sop>` attends
/// bidirectionally, so a new turn changes the keys and values of every earlier token. The
/// reply kept in the conversation is the official `process_response` of the generated text
/// (trimmed, ASCII punctuation next to Chinese made full-width).
pub struct Chat {
    session: Session,
    template: ChatTemplate,
    system: Option<String>,
    messages: Vec<Message>,
    /// The tokens whose keys and values the cache holds, in order (positions 0..).
    cached: Vec<u32>,
}

impl std::fmt::Debug for Chat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chat")
            .field("template", &self.template)
            .field("messages", &self.messages.len())
            .field("cached_tokens", &self.cached.len())
            .finish()
    }
}

impl Chat {
    /// A conversation with the model's format ([`ChatTemplate::for_model`]). The session's
    /// cache is cleared.
    pub fn new(session: Session) -> Result<Chat> {
        let template = ChatTemplate::for_model(session.model())?;
        Ok(Chat::with_template(session, template))
    }

    /// A conversation with the given format. The session's cache is cleared.
    pub fn with_template(mut session: Session, template: ChatTemplate) -> Chat {
        session.clear();
        Chat {
            session,
            template,
            system: None,
            messages: Vec::new(),
            cached: Vec::new(),
        }
    }

    /// Sets (or removes) the system message that opens the conversation.
    pub fn set_system(&mut self, system: Option<String>) {
        self.system = system;
    }

    /// The messages so far (the system message not included).
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The prompt format.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The session (its cache holds the conversation).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Tokens the cache holds for the conversation.
    pub fn cached_tokens(&self) -> usize {
        self.cached.len()
    }

    /// Forgets the conversation (the system message stays) and clears the cache.
    pub fn reset(&mut self) {
        self.messages.clear();
        self.cached.clear();
        self.session.clear();
    }

    fn all_messages(&self, extra: Option<&Message>) -> Vec<Message> {
        let sys = self.system.as_ref().map(Message::system);
        sys.into_iter()
            .chain(self.messages.iter().cloned())
            .chain(extra.cloned())
            .collect()
    }

    /// The prompt text the next turn with `user` would evaluate (the whole conversation).
    pub fn render_next(&self, user: &str) -> Result<String> {
        let msgs = self.all_messages(Some(&Message::user(user)));
        Ok(self.template.render(&msgs, true)?)
    }

    /// Adds the user message `user`, generates the reply (streaming it to `on_token`, as
    /// [`Session::generate_tokens`]) and adds it to the conversation. Only the tokens after
    /// the longest prefix the cache already holds are evaluated. On error the user message is
    /// dropped and the cache cleared, so the conversation can go on.
    pub fn send(
        &mut self,
        user: &str,
        params: &GenerateParams,
        on_token: impl FnMut(&TokenEvent) -> ControlFlow<()>,
    ) -> Result<Generation> {
        let text = self.render_next(user)?;
        let glm1 = self.template == ChatTemplate::ChatGlm1;
        let tokens = match glm1 {
            true => crate::arch::chatglm1::encode_prompt(self.session.model(), &text)?,
            false => encode_prompt(self.session.model().tokenizer(), &text)?,
        };
        if tokens.is_empty() {
            return Err(LlamaError::EmptyPrompt);
        }
        // Reuse the cached prefix; evaluate at least one token to get logits. ChatGLM-6B v1
        // reuses nothing: its bidirectional context is evaluated anew each turn.
        let mut keep = self
            .cached
            .iter()
            .zip(&tokens)
            .take_while(|(a, b)| a == b && !glm1)
            .count();
        keep = keep.min(tokens.len() - 1);
        self.session.remove(0, keep as i32);
        self.cached.truncate(keep);
        match self
            .session
            .generate_tokens(&tokens[keep..], params, on_token)
        {
            Ok(g) => {
                self.messages.push(Message::user(user));
                let reply = match glm1 {
                    true => glm1_process_response(&g.text),
                    false => g.text.clone(),
                };
                self.messages.push(Message::assistant(reply));
                // The cache holds the prompt and every generated token but the last (the
                // last one is sampled, never evaluated).
                self.cached = tokens;
                let n = g.tokens.len().saturating_sub(1);
                self.cached.extend_from_slice(&g.tokens[..n]);
                self.cached.truncate(self.session.n_past());
                Ok(g)
            }
            Err(e) => {
                self.cached.clear();
                self.session.clear();
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glm_formats_reject_unknown_roles() {
        let e = ChatTemplate::ChatGlm3
            .render(&[Message::new("tool", "x")], true)
            .unwrap_err();
        assert!(matches!(e, ChatError::UnknownRole { ref role, .. } if role == "tool"));
        assert!(matches!(
            ChatTemplate::Glm4.render(&[], true),
            Err(ChatError::EmptyConversation)
        ));
    }

    /// The official `process_response`: strip, `[[训练时间]]`, and ASCII `,!:;?` beside a
    /// CJK ideograph (either side) made full-width; elsewhere left alone.
    #[test]
    fn glm1_reply_processing() {
        assert_eq!(
            glm1_process_response("  \n你好,世界!ok, fine? 是:a;b 问? \t"),
            "你好，世界！ok, fine? 是：a;b 问？"
        );
        assert_eq!(glm1_process_response("[[训练时间]]了,"), "2023年了，");
        assert_eq!(glm1_process_response(",中"), "，中");
    }
}
