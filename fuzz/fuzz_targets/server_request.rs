//! Fuzzes the HTTP server's request parsing and validation: a path selector, header lines
//! and a JSON body (fields split at `FF FE`) through the checks every endpoint makes before
//! it touches the model (`ggrs_server::fuzzing::check_request`): origin and `Host` checks,
//! the API key's header, the body's JSON, every completion option, chat messages, prompts,
//! `/tokenize` and `/detokenize` fields, the chat endpoints' tools, `tool_choice` and
//! structured-output fields rendered through the Qwen2 vocabulary's template (OpenAI chat,
//! Anthropic `/v1/messages` and `count_tokens`, `/v1/responses`), the embedding and rerank
//! inputs, and the size and choice limits. A request gets
//! accepted options that keep the engine's invariants, or a 4xx naming what is wrong; never
//! a panic.

#![no_main]

mod common;

use std::sync::OnceLock;

use ggrs_llama::ChatTemplate;
use libfuzzer_sys::fuzz_target;

const PATHS: [&str; 11] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/tokenize",
    "/detokenize",
    "/health",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/v1/embeddings",
    "/embedding",
    "/rerank",
];

static TEMPLATE: OnceLock<ChatTemplate> = OnceLock::new();

/// The Qwen2 vocabulary's Jinja chat template.
fn template() -> ChatTemplate {
    let (tok, src) = common::qwen2_vocab();
    ChatTemplate::jinja(src, &tok)
}

fuzz_target!(|data: &[u8]| {
    let parts = common::fields(data, 3);
    let (sel, head, body) = match parts.as_slice() {
        [s, h, b] => (s.first().copied().unwrap_or(0), *h, *b),
        [s, b] => (s.first().copied().unwrap_or(0), &[][..], *b),
        [b] => (0, &[][..], *b),
        _ => return,
    };
    let template = TEMPLATE.get_or_init(template);
    let path = PATHS[sel as usize % PATHS.len()];
    let headers: Vec<(&[u8], &[u8])> = head
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let i = line.iter().position(|&b| b == b':')?;
            let v = &line[i + 1..];
            let v = v.strip_prefix(b" ").unwrap_or(v);
            Some((&line[..i], v))
        })
        .collect();
    // A small vocabulary and queue so that the limits are reached; the text limit as small.
    // The selector's high bits pick the vocabulary size; its top bit reads a chat without
    // the template (the options only).
    let n_vocab = 64 + (sel as usize >> 4);
    let t = (sel & 0x80 == 0).then_some(template);
    let _ = ggrs_server::fuzzing::check_request(path, &headers, body, n_vocab, 8, 4096, t);
});
