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
    /// `<|start|>assistant`. With tools (which llama.cpp's built-in format leaves out),
    /// as GPT-OSS's own template writes them: a developer message declaring them in the
    /// `functions` namespace, calls as `commentary` messages to `functions.NAME`, and
    /// results as messages from `functions.NAME` to the assistant.
    GptOss,
}

/// The names `ChatTemplate::named` knows, as llama.cpp spells them.
pub const NAMES: &str = "llama3, gemma, phi3, chatml, command-r, gpt-oss, chatglm3, chatglm4";

/// C's `isspace` trim, as llama.cpp's formatter trims.
fn trim(s: &str) -> &str {
    s.trim_matches([' ', '\t', '\n', '\x0B', '\x0C', '\r'])
}

/// The developer message declaring `tools` (OpenAI's list) to GPT-OSS: the harmony
/// `functions` namespace, each function's parameters as their JSON Schema.
fn harmony_tools(tools: &serde_json::Value) -> String {
    let mut s = String::from(
        "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n",
    );
    for t in tools.as_array().into_iter().flatten() {
        let f = t.get("function").unwrap_or(t);
        let name = f.get("name").and_then(|n| n.as_str()).unwrap_or_default();
        if let Some(d) = f.get("description").and_then(|d| d.as_str()) {
            s += &format!("// {d}\n");
        }
        let params = f
            .get("parameters")
            .map_or_else(|| "{}".to_string(), |p| p.to_string());
        s += &format!("type {name} = (_: {params}) => any;\n\n");
    }
    s + "} // namespace functions<|end|>"
}

/// A GPT-OSS message in harmony's layout, tool calls and results included.
fn harmony_message(m: &Message, calls_so_far: &[(String, String)]) -> String {
    if m.role == "assistant" && !m.tool_calls.is_empty() {
        let mut s = String::new();
        if !m.content.is_empty() {
            s += &format!(
                "<|start|>assistant<|channel|>commentary<|message|>{}<|end|>",
                m.content
            );
        }
        for c in &m.tool_calls {
            s += &format!(
                "<|start|>assistant<|channel|>commentary to=functions.{} \
                 <|constrain|>json<|message|>{}<|call|>",
                c.name, c.arguments
            );
        }
        return s;
    }
    if m.role == "tool" {
        let name = m.name.clone().or_else(|| {
            let id = m.tool_call_id.as_deref()?;
            calls_so_far
                .iter()
                .find(|(i, _)| i == id)
                .map(|(_, n)| n.clone())
        });
        return format!(
            "<|start|>functions.{} to=assistant<|channel|>commentary<|message|>{}<|end|>",
            name.unwrap_or_default(),
            m.content
        );
    }
    let end = if m.role == "assistant" {
        "<|return|>"
    } else {
        "<|end|>"
    };
    format!("<|start|>{}<|message|>{}{end}", m.role, m.content)
}

/// Renders `messages` in `format` (`tools` are written by the `gpt-oss` format only).
pub(crate) fn render(
    format: NamedFormat,
    messages: &[Message],
    add_generation_prompt: bool,
    tools: Option<&serde_json::Value>,
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
            // The tools are declared after the system messages that open the conversation.
            let lead = messages.iter().take_while(|m| m.role == "system").count();
            let mut calls = Vec::new();
            for (i, m) in messages.iter().enumerate() {
                if i == lead {
                    if let Some(t) = tools.filter(|t| t.as_array().is_some_and(|a| !a.is_empty())) {
                        s += &harmony_tools(t);
                    }
                }
                s += &harmony_message(m, &calls);
                calls.extend(m.tool_calls.iter().map(|c| (c.id.clone(), c.name.clone())));
            }
            if add_generation_prompt {
                s += "<|start|>assistant";
            }
        }
    }
    Ok(s)
}
