//! Fuzzes the HTTP server's request parsing and validation: a path selector, header lines
//! and a JSON body (fields split at `FF FE`) through the checks every endpoint makes before
//! it touches the model (`ggrs_server::fuzzing::check_request`): origin and `Host` checks,
//! the API key's header, the body's JSON, every completion option, chat messages, prompts,
//! `/tokenize` and `/detokenize` fields, and the size and choice limits. A request gets
//! accepted options that keep the engine's invariants, or a 4xx naming what is wrong; never
//! a panic.

#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;

const PATHS: [&str; 5] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/tokenize",
    "/detokenize",
    "/health",
];

fuzz_target!(|data: &[u8]| {
    let parts = common::fields(data, 3);
    let (sel, head, body) = match parts.as_slice() {
        [s, h, b] => (s.first().copied().unwrap_or(0), *h, *b),
        [s, b] => (s.first().copied().unwrap_or(0), &[][..], *b),
        [b] => (0, &[][..], *b),
        _ => return,
    };
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
    let n_vocab = 64 + (sel as usize >> 3);
    let _ = ggrs_server::fuzzing::check_request(path, &headers, body, n_vocab, 8, 4096);
});
