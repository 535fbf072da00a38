//! The integration tests of this crate, one module per file beside this one, built as one
//! test binary (a binary per file cost a link and a copy of the generic code each: the
//! build took more CPU than the tests). Run one file's tests with
//! `cargo test -p ggrs-cli --test integration <file>::`.

mod chat;
mod cli;
mod common;
mod convert;
mod gemma3_270m;
mod grammar;
mod hardening;
/// ggrs-llama's test helpers (model fetching, reference files), shared with its tests.
#[path = "../../ggrs-llama/tests/common/mod.rs"]
mod llama_common;
mod python_clients;
mod reliability;
mod serve;
mod split;
