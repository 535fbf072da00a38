//! Chat: a conversation (a list of [`Message`]s) turned into the prompt text a model was
//! trained on, and [`Chat`], a multi-turn conversation that keeps its KV cache between turns.
//!
//! Where the prompt format comes from ([`ChatTemplate::for_model`]):
//! 1. the model's own Jinja template (`tokenizer.chat_template`), rendered with `minijinja`
//!    the way llama.cpp's Jinja engine renders it ([`jinja`]: Hugging Face's environment,
//!    `enable_thinking`, Llama 3.x's `date_string`, a system message merged into the next
//!    one for templates without a system role);
//! 2. an architecture's built-in format (for a `chatglm` model without a template, the
//!    ChatGLM3 format, GLM-4's when the vocabulary is GLM-4's byte-level BPE,
//!    `chatglm-bpe`/`glm4`);
//! 3. otherwise an error: there is no way to know the format.
//!
//! A caller may also pick a format by llama.cpp's name ([`ChatTemplate::named`]: `llama3`,
//! `gemma`, `phi3`, `chatml`, `chatglm3`, `chatglm4`; `--chat-template` in the CLI).
//!
//! The model's architecture decides: its
//! [`TextConventions`](crate::architecture::TextConventions) pick the format (ChatGLM-6B v1
//! always gets the official `chat()` convention, [`ChatTemplate::ChatGlm1`]) and encode the
//! rendered text, and an architecture whose cached keys depend on the whole prompt (ChatGLM-6B
//! v1's bidirectional context) makes [`Chat`] re-evaluate the conversation at every turn.
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

mod bounds;
mod call_syntax;
pub mod harmony;
pub mod jinja;
mod json_scan;
pub mod message;
pub mod named;
pub mod reply;
pub mod template;
pub mod tools;

use std::ops::ControlFlow;

use crate::error::{LlamaError, Result};
use crate::generate::{GenerateParams, Generation, TokenEvent};
use crate::model::Model;
use crate::prompt_cache::PromptCache;
use crate::session::Session;
use crate::tokenizer::Tokenizer;

pub use jinja::{TemplateVars, MAX_RENDERED_BYTES};
pub use named::NamedFormat;
pub use template::{glm1_chat_prompt, ChatError, ChatTemplate, Message};

impl ChatTemplate {
    /// The format for `model`, as its architecture's text conventions choose it from the
    /// file's Jinja template (`tokenizer.chat_template`) and the format built in for the
    /// architecture, if any; [`ChatError::NoTemplate`] when there is neither.
    pub fn for_model(model: &Model) -> std::result::Result<ChatTemplate, ChatError> {
        model.text().chat_template(
            model.arch_name(),
            model.tokenizer(),
            model.meta_str("tokenizer.chat_template"),
        )
    }

    /// The format a user asked for, as the `--chat-template` option of `ggrs` and
    /// llama-server reads it: `None`, the model's ([`ChatTemplate::for_model`]); else one of
    /// llama.cpp's built-in format names ([`ChatTemplate::named`]), or else a Jinja
    /// template's text, which must compile ([`ChatError::Template`]) and hold a Jinja tag
    /// (`{{` or `{%`; else [`ChatError::UnknownTemplate`]).
    pub fn resolve(
        model: &Model,
        name_or_jinja: Option<&str>,
    ) -> std::result::Result<ChatTemplate, ChatError> {
        match name_or_jinja {
            None => ChatTemplate::for_model(model),
            Some(s) => {
                if let Some(t) = ChatTemplate::named(s) {
                    return Ok(t);
                }
                // Text with no Jinja tag is a mistyped name or a path that names no file
                // (a caller reads a file's text before): taken as a template it would
                // render itself for every conversation.
                if !s.contains("{{") && !s.contains("{%") {
                    return Err(ChatError::UnknownTemplate {
                        given: s.chars().take(200).collect(),
                        known: named::NAMES,
                    });
                }
                jinja::check(s)?;
                Ok(ChatTemplate::jinja(s, model.tokenizer()))
            }
        }
    }
}

/// Token ids of a rendered prompt: special tokens parsed, BOS added as the model adds it,
/// but only once when the template already wrote the BOS text (Llama 3's templates do).
///
/// (The model-independent rule; [`Model::encode_chat`] applies the architecture's own
/// conventions where it has them.)
pub fn encode_prompt(tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    Ok(template::encode_rendered(tok, text)?)
}

/// A multi-turn conversation on a [`Session`]: each [`Chat::send`] renders the whole
/// conversation, evaluates only the tokens that differ from what the KV cache already holds
/// (normally just the new turn) and generates the reply.
///
/// When the model's architecture says its cached keys and values depend on the whole prompt
/// ([`ArchModel::reuses_cached_prefix`](crate::architecture::ArchModel::reuses_cached_prefix)
/// false: ChatGLM-6B v1, whose context before `[gMASK] <sop>` attends bidirectionally), every
/// turn clears the cache and evaluates the whole prompt, as the official `chat()` does. The
/// reply kept in the conversation is [`ChatTemplate::reply_for_history`] of the generated
/// text.
pub struct Chat {
    session: Session,
    template: ChatTemplate,
    /// What a Jinja template sees besides the conversation (fixed for the whole
    /// conversation, so that its date does not change the prompt between turns).
    vars: TemplateVars,
    system: Option<String>,
    messages: Vec<Message>,
    /// The tokens whose keys and values the cache holds.
    cache: PromptCache,
}

impl std::fmt::Debug for Chat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chat")
            .field("template", &self.template)
            .field("messages", &self.messages.len())
            .field("cached_tokens", &self.cache.tokens().len())
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
            vars: TemplateVars::default(),
            system: None,
            messages: Vec::new(),
            cache: PromptCache::new(),
        }
    }

    /// Sets (or removes) the system message that opens the conversation.
    pub fn set_system(&mut self, system: Option<String>) {
        self.system = system;
    }

    /// Sets what a Jinja template sees besides the conversation (`enable_thinking`, the
    /// date; default: [`TemplateVars::default`] when the chat was made).
    pub fn set_template_vars(&mut self, vars: TemplateVars) {
        self.vars = vars;
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
        self.cache.tokens().len()
    }

    /// Forgets the conversation (the system message stays) and clears the cache.
    pub fn reset(&mut self) {
        self.messages.clear();
        self.cache.forget(&mut self.session);
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
        Ok(self.template.render_with(&msgs, true, &self.vars)?)
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
        let model = self.session.model().clone();
        let tokens = model.encode_chat(&text)?;
        if tokens.is_empty() {
            return Err(LlamaError::EmptyPrompt);
        }
        // The prompt cache evaluates only what follows the cached prefix (for ChatGLM-6B
        // v1, whose context attends bidirectionally, the whole prompt each turn).
        match self
            .cache
            .generate(&mut self.session, &tokens, params, on_token)
        {
            Ok(g) => {
                self.messages.push(Message::user(user));
                let reply = self.template.reply_for_history(&g.text);
                self.messages.push(Message::assistant(reply));
                Ok(g)
            }
            Err(e) => {
                self.cache.forget(&mut self.session);
                Err(e)
            }
        }
    }
}
