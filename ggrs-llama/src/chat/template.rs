//! Prompt formats: a conversation (a list of [`Message`]s) rendered as the text a model was
//! trained on: a Jinja template (Hugging Face's `chat_template`) or one of the built-in
//! formats. This module knows tokenizers and text only (no model, session or architecture):
//! an architecture picks its format through
//! [`TextConventions::chat_template`](crate::architecture::TextConventions::chat_template).

use super::jinja::TemplateVars;
use super::named::NamedFormat;
use crate::tokenizer::{Tokenizer, TokenizerError};

pub use super::message::{ChatError, Message};

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
    /// ChatGLM-6B v1, as the official `chat()` builds its prompt ([`glm1_chat_prompt`]): the
    /// bare question
    /// for the first turn, else `[Round i]\n问：…\n答：…\n` per past turn and
    /// `[Round n]\n问：{question}\n答：`. Messages alternate user and assistant and end with
    /// the user's question (no system role). (The `chatglm1` architecture's text conventions
    /// encode the text: the v1 conventions, then `[gMASK] <sop>`.)
    ChatGlm1,
    /// One of llama.cpp's built-in formats, chosen by name ([`ChatTemplate::named`]).
    Named(NamedFormat),
}

/// Whether two generation prompts, rendered with thinking off and on, differ as a thinking
/// switch does (llama.cpp's `compare_thinking_enabled`): what differs is at the end of the
/// prompt (thinking on opens a block, or thinking off closes one), or both differ.
fn thinking_switch_at_end(off: &str, on: &str) -> bool {
    let common = |a: &[u8], b: &[u8]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let p = common(off.as_bytes(), on.as_bytes());
    let (a, b) = (&off.as_bytes()[p..], &on.as_bytes()[p..]);
    let sfx = common(
        &a.iter().rev().copied().collect::<Vec<_>>(),
        &b.iter().rev().copied().collect::<Vec<_>>(),
    );
    let text = |x: &[u8]| String::from_utf8_lossy(x).trim().to_string();
    let (left, right) = (text(&a[..a.len() - sfx]), text(&b[..b.len() - sfx]));
    match (left.is_empty(), right.is_empty()) {
        (true, true) => false,
        (true, false) => on.trim_end().ends_with(&right),
        (false, true) => off.trim_end().ends_with(&left),
        (false, false) => true,
    }
}

/// Roles the ChatGLM formats have markers for.
const GLM_ROLES: &str = "system, user, assistant, observation";

impl ChatTemplate {
    /// The format llama.cpp builds in under `name` (`llama3`, `gemma`, `phi3`, `chatml`,
    /// `command-r`, `gpt-oss`, `chatglm3`, `chatglm4`), or `None`.
    pub fn named(name: &str) -> Option<ChatTemplate> {
        Some(match name {
            "llama3" => ChatTemplate::Named(NamedFormat::Llama3),
            "gemma" => ChatTemplate::Named(NamedFormat::Gemma),
            "phi3" => ChatTemplate::Named(NamedFormat::Phi3),
            "chatml" => ChatTemplate::Named(NamedFormat::ChatMl),
            "command-r" => ChatTemplate::Named(NamedFormat::CommandR),
            "gpt-oss" => ChatTemplate::Named(NamedFormat::GptOss),
            "chatglm3" => ChatTemplate::ChatGlm3,
            "chatglm4" => ChatTemplate::Glm4,
            _ => return None,
        })
    }
}

impl ChatTemplate {
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
    /// that starts the assistant's reply. A Jinja template sees the default
    /// [`TemplateVars`] (thinking on, today's date).
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> std::result::Result<String, ChatError> {
        self.render_with(messages, add_generation_prompt, &TemplateVars::default())
    }

    /// As [`ChatTemplate::render`], a Jinja template seeing `vars` (`enable_thinking`, the
    /// date) and writing at most [`MAX_RENDERED_BYTES`](super::jinja::MAX_RENDERED_BYTES).
    pub fn render_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        vars: &TemplateVars,
    ) -> std::result::Result<String, ChatError> {
        self.render_tools(messages, add_generation_prompt, vars, None)
    }

    /// As [`ChatTemplate::render_with`], a Jinja template also seeing `tools` (OpenAI's
    /// list of `{"type": "function", "function": {name, description, parameters}}`) as
    /// Hugging Face's `apply_chat_template(tools=…)` passes it. Built-in formats ignore
    /// `tools` (see [`super::tools::ToolSetup::prepare`] for templates without tools), but
    /// `gpt-oss`, which declares them as GPT-OSS's own template does.
    pub fn render_tools(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        vars: &TemplateVars,
        tools: Option<&serde_json::Value>,
    ) -> std::result::Result<String, ChatError> {
        self.render_limited(
            messages,
            add_generation_prompt,
            vars,
            tools,
            super::jinja::MAX_RENDERED_BYTES,
        )
    }

    /// As [`ChatTemplate::render_tools`], with a template that writes (or builds a value
    /// of) more than `max_bytes` stopped with [`ChatError::Template`] saying so: a server's
    /// bound on what one request may render.
    pub fn render_limited(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        vars: &TemplateVars,
        tools: Option<&serde_json::Value>,
        max_bytes: usize,
    ) -> std::result::Result<String, ChatError> {
        if messages.is_empty() {
            return Err(ChatError::EmptyConversation);
        }
        match self {
            ChatTemplate::Jinja {
                source,
                bos_token,
                eos_token,
            } => super::jinja::render(
                source,
                messages,
                add_generation_prompt,
                [bos_token, eos_token],
                vars,
                max_bytes,
                tools,
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
            ChatTemplate::Named(format) => {
                super::named::render(*format, messages, add_generation_prompt, tools)
            }
        }
    }
}

impl ChatTemplate {
    /// Whether the format has a system role (ChatGLM-6B v1's has none).
    pub fn has_system_role(&self) -> bool {
        !matches!(self, ChatTemplate::ChatGlm1)
    }

    /// Whether the template can think, judged as llama.cpp judges it
    /// (`common_chat_templates_support_enable_thinking`, its template analysis): a GPT-OSS
    /// (harmony), Ministral 3 or Kimi K2 template (llama.cpp's own parsers for these say
    /// they think); one that writes an assistant's `reasoning_content` back; one
    /// whose generation prompt changes with `enable_thinking`; or an old Qwen/DeepSeek
    /// template that splits replies at `</think>`. Built-in formats cannot. llama-server
    /// renders with thinking off, and leaves `<think>` in the content, for a template that
    /// cannot think.
    pub fn supports_thinking(&self) -> bool {
        let ChatTemplate::Jinja { source, .. } = self else {
            return false;
        };
        if source.contains("<|channel|>")
            || (source.contains("content.split('</think>')")
                && !source.contains("reasoning_content"))
            || source.contains("Write your thoughts between <think></think>")
            || (source.contains("[SYSTEM_PROMPT]") && source.contains("[TOOL_CALLS]"))
            || source.contains("<|tool_calls_section_begin|>")
        {
            return true;
        }
        const THOUGHT: &str = "REASON_PART I am thinking END_R";
        let user = Message::user("U_USER_MSG Hello END_U");
        let mut answer = Message::assistant("A_ASST_MSG I can help END_A");
        answer.reasoning_content = Some(THOUGHT.into());
        let vars = |enable_thinking| TemplateVars {
            enable_thinking,
            now_unix: 0,
        };
        // A probe conversation renders in a few KiB; a template that builds more than
        // PROBE_BYTES for it cannot think usefully, and the probe stays quick (64 MiB of a
        // doubling list took 19 s to refuse).
        const PROBE_BYTES: usize = 1 << 20;
        let probe = |msgs: &[Message], add, on| {
            self.render_limited(msgs, add, &vars(on), None, PROBE_BYTES)
        };
        let history = [user.clone(), answer];
        if probe(&history, false, true).is_ok_and(|t| t.contains(THOUGHT)) {
            return true;
        }
        let prompt = |on| probe(std::slice::from_ref(&user), true, on);
        match (prompt(false), prompt(true)) {
            (Ok(off), Ok(on)) => thinking_switch_at_end(&off, &on),
            _ => false,
        }
    }

    /// The reply as the conversation keeps it for the next turns: the generated text as it
    /// is, except ChatGLM-6B v1's, which keeps the official `process_response` of it
    /// (trimmed, ASCII punctuation next to Chinese made full-width).
    pub fn reply_for_history(&self, generated: &str) -> String {
        match self {
            ChatTemplate::ChatGlm1 => glm1_process_response(generated),
            _ => generated.to_string(),
        }
    }
}

/// The official prompt of a ChatGLM-6B v1 conversation (`chat()` of the official code): the
/// bare query when there is no history, else `[Round i]\n问：{query}\n答：{response}\n` per
/// past turn followed by `[Round n]\n问：{query}\n答：`.
pub fn glm1_chat_prompt(history: &[(String, String)], query: &str) -> String {
    if history.is_empty() {
        return query.to_string();
    }
    let mut s = String::new();
    for (i, (q, r)) in history.iter().enumerate() {
        s += &format!("[Round {i}]\n问：{q}\n答：{r}\n");
    }
    s += &format!("[Round {}]\n问：{query}\n答：", history.len());
    s
}

/// A rendered prompt as llama-server's `/apply-template` returns it: without the BOS text the
/// template wrote first when the model adds the BOS token itself (its tokenizer puts it back;
/// see [`encode_rendered`]).
pub fn without_leading_bos<'a>(tok: &Tokenizer, text: &'a str) -> &'a str {
    let bos = tok
        .bos()
        .filter(|_| tok.vocab().add_bos())
        .and_then(|id| tok.vocab().token(id));
    match bos {
        Some(t) if !t.text.is_empty() => text.strip_prefix(t.text.as_str()).unwrap_or(text),
        _ => text,
    }
}

/// Token ids of a rendered prompt: special tokens parsed, BOS added as the model adds it,
/// but only once when the template already wrote the BOS text (Llama 3's templates do).
pub fn encode_rendered(tok: &Tokenizer, text: &str) -> Result<Vec<u32>, TokenizerError> {
    let mut ids = tok.encode(text, true, true)?;
    if let Some(bos) = tok.bos() {
        if tok.vocab().add_bos() && ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
            ids.remove(0);
        }
    }
    Ok(ids)
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
    Ok(glm1_chat_prompt(&history, &query.content))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Which templates can think, as llama.cpp 0c1e570 judges them (`llama-server`'s
    /// `chat template, thinking = ` line, `-lv 4`), on the copies of real templates.
    #[test]
    fn templates_that_can_think() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/templates/");
        let judge = |name: &str| {
            let source = std::fs::read_to_string(format!("{dir}{name}.jinja")).unwrap();
            ChatTemplate::Jinja {
                source,
                bos_token: "<s>".into(),
                eos_token: "</s>".into(),
            }
            .supports_thinking()
        };
        for (name, thinks) in [
            ("Qwen-Qwen3-0.6B", true),
            ("HuggingFaceTB-SmolLM3-3B", true),
            ("ibm-granite-granite-3.3-2B-Instruct", true),
            ("google-gemma-4-31B-it", true),
            ("mistralai-Ministral-3-14B-Reasoning-2512", true),
            ("ibm-granite-granite-4.0", false),
            ("meta-llama-Llama-3.3-70B-Instruct", false),
            ("google-gemma-2-2b-it", false),
            ("microsoft-Phi-3.5-mini-instruct", false),
        ] {
            assert_eq!(judge(name), thinks, "{name}");
        }
        assert!(!ChatTemplate::named("chatml").unwrap().supports_thinking());
        // `enable_thinking` read in the middle of the conversation is no thinking switch.
        let mid = ChatTemplate::Jinja {
            source: "{% for m in messages %}{{ m.role }}: {{ m.content }}\
                     {% if enable_thinking %}[T]{% endif %}\n{% endfor %}\
                     {% if add_generation_prompt %}assistant:{% endif %}"
                .into(),
            bos_token: String::new(),
            eos_token: String::new(),
        };
        assert!(!mid.supports_thinking());
    }

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
