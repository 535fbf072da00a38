//! The official chat templates of Llama 3.x, Gemma 2, Phi-3 and Qwen3 (llama.cpp's copies in
//! `models/templates/`, stored under `tests/data/templates/`) rendered as llama.cpp's Jinja
//! engine renders them. The expected texts are written out by hand from each template's
//! logic for the same conversation: system, user, assistant, user, then the generation
//! prompt.

use std::path::PathBuf;

use ggrs_llama::chat::{ChatTemplate, Message, TemplateVars};

/// 2025-01-02 15:00:00 UTC.
const JAN_2_2025: i64 = 1_735_830_000;

fn template(file: &str, bos: &str, eos: &str) -> ChatTemplate {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/templates")
        .join(file);
    let source =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ChatTemplate::Jinja {
        source,
        bos_token: bos.into(),
        eos_token: eos.into(),
    }
}

fn conversation() -> Vec<Message> {
    vec![
        Message::system("You are terse."),
        Message::user("Hi"),
        Message::assistant("Hello."),
        Message::user("2+2?"),
    ]
}

fn vars(enable_thinking: bool) -> TemplateVars {
    TemplateVars {
        enable_thinking,
        now_unix: JAN_2_2025,
    }
}

fn render(t: &ChatTemplate, msgs: &[Message], add_generation_prompt: bool) -> String {
    t.render_with(msgs, add_generation_prompt, &vars(true))
        .expect("render")
}

/// Llama 3.1 / 3.3: the system block with the knowledge cutoff and today's date (llama.cpp
/// passes `date_string` to these templates), then one header per message; no tools.
#[test]
fn llama3_official_template() {
    let t = template(
        "meta-llama-Llama-3.3-70B-Instruct.jinja",
        "<|begin_of_text|>",
        "<|eot_id|>",
    );
    assert_eq!(
        render(&t, &conversation(), true),
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n\
         Cutting Knowledge Date: December 2023\nToday Date: 02 Jan 2025\n\n\
         You are terse.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    // Without a system message the block is still there, empty after the date.
    assert_eq!(
        render(&t, &[Message::user(" Hi ")], false),
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n\
         Cutting Knowledge Date: December 2023\nToday Date: 02 Jan 2025\n\n<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    );
}

/// Gemma 2 raises on a system message: as llama.cpp does for a template without a system
/// role, the system text starts the first user message (joined by a newline).
#[test]
fn gemma2_official_template_merges_the_system_message() {
    let t = template("google-gemma-2-2b-it.jinja", "<bos>", "<eos>");
    assert_eq!(
        render(&t, &conversation(), true),
        "<bos><start_of_turn>user\nYou are terse.\nHi<end_of_turn>\n\
         <start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\n2+2?<end_of_turn>\n\
         <start_of_turn>model\n"
    );
    // The template's own checks still hold: roles must alternate.
    let bad = [Message::user("a"), Message::user("b")];
    assert!(t.render_with(&bad, true, &vars(true)).is_err());
}

/// Phi-3 (3.5-mini's template): `<|role|>\n` + content + `<|end|>\n`; EOS only without the
/// generation prompt.
#[test]
fn phi3_official_template() {
    let t = template(
        "microsoft-Phi-3.5-mini-instruct.jinja",
        "<s>",
        "<|endoftext|>",
    );
    assert_eq!(
        render(&t, &conversation(), true),
        "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n\
         <|assistant|>\nHello.<|end|>\n<|user|>\n2+2?<|end|>\n<|assistant|>\n"
    );
    assert_eq!(
        render(&t, &[Message::user("Hi")], false),
        "<|user|>\nHi<|end|>\n<|endoftext|>"
    );
}

/// Qwen3: ChatML; `enable_thinking = false` adds an empty think block to the generation
/// prompt; the reasoning of answers before the last question is dropped, that of the last
/// answer kept.
#[test]
fn qwen3_official_template_and_thinking() {
    let t = template("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>");
    let chatml = "<|im_start|>system\nYou are terse.<|im_end|>\n\
                  <|im_start|>user\nHi<|im_end|>\n\
                  <|im_start|>assistant\nHello.<|im_end|>\n\
                  <|im_start|>user\n2+2?<|im_end|>\n\
                  <|im_start|>assistant\n";
    assert_eq!(render(&t, &conversation(), true), chatml);
    let no_think = t
        .render_with(&conversation(), true, &vars(false))
        .expect("render");
    assert_eq!(no_think, format!("{chatml}<think>\n\n</think>\n\n"));

    let thought = "<think>\nLet me see.\n</think>\n\nHello.";
    let earlier = [
        Message::user("Hi"),
        Message::assistant(thought),
        Message::user("2+2?"),
    ];
    assert_eq!(
        render(&t, &earlier, true),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n\
         <|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    );
    let last = [Message::user("Hi"), Message::assistant(thought)];
    assert_eq!(
        render(&t, &last, false),
        "<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\n<think>\nLet me see.\n</think>\n\nHello.<|im_end|>\n"
    );
}

/// `date_string` goes to the Llama 3.x templates only (as llama.cpp passes it);
/// `strftime_now` to every template; `enable_thinking` is true by default.
#[test]
fn template_variables() {
    let t = ChatTemplate::Jinja {
        source: "{% if date_string is defined %}D{% else %}U{% endif %} \
                 {{ strftime_now('%d %B %Y') }} {% if enable_thinking %}think{% endif %}"
            .into(),
        bos_token: String::new(),
        eos_token: String::new(),
    };
    assert_eq!(
        render(&t, &[Message::user("x")], true),
        "U 02 January 2025 think"
    );
    let plain = t.render(&[Message::user("x")], true).expect("render");
    assert!(plain.ends_with(" think"), "{plain}");
}

/// llama.cpp's built-in formats by name (`llama_chat_apply_template`), written out for the
/// same conversation.
#[test]
fn named_formats() {
    let named = |name: &str| ChatTemplate::named(name).expect("a known name");
    let conv = conversation();
    assert_eq!(
        render(&named("llama3"), &conv, true),
        "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    // Gemma has no system turn: its text opens the first user turn, then a blank line.
    assert_eq!(
        render(&named("gemma"), &conv, true),
        "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n\
         <start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n"
    );
    assert_eq!(
        render(&named("phi3"), &conv, true),
        "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n\
         <|assistant|>\nHello.<|end|>\n<|user|>\n2+2?<|end|>\n<|assistant|>\n"
    );
    assert_eq!(
        render(&named("chatml"), &conv, false),
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
    );
    assert_eq!(named("chatglm3"), ChatTemplate::ChatGlm3);
    assert_eq!(named("chatglm4"), ChatTemplate::Glm4);
    assert_eq!(ChatTemplate::named("llama-3"), None);
    // llama3 and gemma trim the content (C whitespace), phi3 and chatml keep it.
    let spaced = [Message::user(" \tHi\n")];
    assert_eq!(
        render(&named("llama3"), &spaced, false),
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    );
    assert_eq!(
        render(&named("gemma"), &spaced, false),
        "<start_of_turn>user\nHi<end_of_turn>\n"
    );
    assert_eq!(
        render(&named("phi3"), &spaced, false),
        "<|user|>\n \tHi\n<|end|>\n"
    );
}
