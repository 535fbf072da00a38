//! Chat formats built in under llama.cpp's names (`llama_chat_apply_template`, the
//! `--chat-template NAME` of its tools), for models whose file carries no template or to
//! override it: each writes the conversation the way llama.cpp's built-in formatter does.

use super::message::{ChatError, Message};

/// A format llama.cpp has built in, by the name it gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedFormat {
    /// `llama3`: `<|start_header_id|>role<|end_header_id|>\n\n` + trimmed content +
    /// `<|eot_id|>`.
    Llama3,
    /// `gemma`: `<start_of_turn>role\n` + trimmed content + `<end_of_turn>\n`, `assistant`
    /// written `model`; system text (trimmed) opens the next non-model turn, followed by
    /// `\n\n`.
    Gemma,
    /// `phi3`: `<|role|>\n` + content + `<|end|>\n`.
    Phi3,
    /// `chatml` (Qwen2/2.5/3 without thinking switches): `<|im_start|>role\n` + content +
    /// `<|im_end|>\n`.
    ChatMl,
    /// `command-r` (Cohere's Command R): `<|START_OF_TURN_TOKEN|>` + `<|SYSTEM_TOKEN|>`,
    /// `<|USER_TOKEN|>` or `<|CHATBOT_TOKEN|>` + trimmed content + `<|END_OF_TURN_TOKEN|>`
    /// (other roles are left out, as llama.cpp leaves them).
    CommandR,
    /// `gpt-oss` (harmony, without channels): `<|start|>role<|message|>` + content +
    /// `<|end|>` (`<|return|>` after an assistant's), the reply opened by
    /// `<|start|>assistant`.
    GptOss,
}

/// The names `ChatTemplate::named` knows, as llama.cpp spells them.
pub const NAMES: &str = "llama3, gemma, phi3, chatml, command-r, gpt-oss, chatglm3, chatglm4";

/// C's `isspace` trim, as llama.cpp's formatter trims.
fn trim(s: &str) -> &str {
    s.trim_matches([' ', '\t', '\n', '\x0B', '\x0C', '\r'])
}

/// Renders `messages` in `format`.
pub(crate) fn render(
    format: NamedFormat,
    messages: &[Message],
    add_generation_prompt: bool,
) -> Result<String, ChatError> {
    let mut s = String::new();
    match format {
        NamedFormat::Llama3 => {
            for m in messages {
                s += &format!(
                    "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>",
                    m.role,
                    trim(&m.content)
                );
            }
            if add_generation_prompt {
                s += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            }
        }
        NamedFormat::Gemma => {
            let mut system = String::new();
            for m in messages {
                if m.role == "system" {
                    system += trim(&m.content);
                    continue;
                }
                let role = if m.role == "assistant" {
                    "model"
                } else {
                    &m.role
                };
                s += &format!("<start_of_turn>{role}\n");
                if !system.is_empty() && role != "model" {
                    s += &system;
                    s += "\n\n";
                    system.clear();
                }
                s += trim(&m.content);
                s += "<end_of_turn>\n";
            }
            if add_generation_prompt {
                s += "<start_of_turn>model\n";
            }
        }
        NamedFormat::Phi3 => {
            for m in messages {
                s += &format!("<|{}|>\n{}<|end|>\n", m.role, m.content);
            }
            if add_generation_prompt {
                s += "<|assistant|>\n";
            }
        }
        NamedFormat::ChatMl => {
            for m in messages {
                s += &format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content);
            }
            if add_generation_prompt {
                s += "<|im_start|>assistant\n";
            }
        }
        NamedFormat::CommandR => {
            for m in messages {
                let token = match m.role.as_str() {
                    "system" => "SYSTEM",
                    "user" => "USER",
                    "assistant" => "CHATBOT",
                    _ => continue,
                };
                s += &format!(
                    "<|START_OF_TURN_TOKEN|><|{token}_TOKEN|>{}<|END_OF_TURN_TOKEN|>",
                    trim(&m.content)
                );
            }
            if add_generation_prompt {
                s += "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>";
            }
        }
        NamedFormat::GptOss => {
            for m in messages {
                let end = if m.role == "assistant" {
                    "<|return|>"
                } else {
                    "<|end|>"
                };
                s += &format!("<|start|>{}<|message|>{}{end}", m.role, m.content);
            }
            if add_generation_prompt {
                s += "<|start|>assistant";
            }
        }
    }
    Ok(s)
}
