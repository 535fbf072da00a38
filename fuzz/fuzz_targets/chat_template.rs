//! Fuzzes chat-template rendering: arbitrary message lists (roles and contents from the
//! fuzz bytes) through the Qwen2 vocabulary's Jinja template and the built-in ChatGLM one,
//! and arbitrary template sources through the Jinja renderer. Rendering gives text or a
//! typed error, never a panic or a hang.

#![no_main]

mod common;

use std::sync::OnceLock;

use ggrs_llama::{ChatTemplate, Message};
use libfuzzer_sys::fuzz_target;

struct Setup {
    tok: ggrs_llama::Tokenizer,
    qwen: ChatTemplate,
    glm: ChatTemplate,
}

static SETUP: OnceLock<Setup> = OnceLock::new();

fn setup() -> Setup {
    let (tok, src) = common::qwen2_vocab();
    let qwen = ChatTemplate::jinja(src, &tok);
    let glm = ChatTemplate::builtin_glm(&tok);
    Setup { tok, qwen, glm }
}

const ROLES: [&str; 5] = ["system", "user", "assistant", "tool", ""];

fuzz_target!(|data: &[u8]| {
    let s = SETUP.get_or_init(setup);
    let parts = common::fields(data, 9);
    let (head, msgs) = parts.split_first().expect("fields gives at least one");
    let messages: Vec<Message> = msgs
        .iter()
        .map(|m| {
            let (role, content) = match m.split_first() {
                Some((&r, c)) => (ROLES[r as usize % ROLES.len()], c),
                None => ("user", &[][..]),
            };
            Message::new(role, String::from_utf8_lossy(content))
        })
        .collect();
    let gen = head.first().is_some_and(|b| b & 1 == 1);
    let _ = s.qwen.render(&messages, gen);
    let _ = s.glm.render(&messages, gen);
    // The first field as a template of its own.
    if head.len() > 1 {
        let t = ChatTemplate::jinja(String::from_utf8_lossy(&head[1..]), &s.tok);
        let _ = t.render(&messages, gen);
    }
});
