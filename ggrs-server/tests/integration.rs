//! The integration tests of this crate, one module per file beside this one, built as one
//! test binary (a binary per file cost a link and a copy of the generic code each: the
//! build took more CPU than the tests). Run one file's tests with
//! `cargo test -p ggrs-server --test integration <file>::`.

mod api;
mod common;
mod context_shift;
mod embeddings;
mod hardening;
mod hybrids;
mod request_forms;
mod responsive;
mod serving;
mod speculative;
mod structured;
mod tools;
