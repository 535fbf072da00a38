//! `ggrs`: the command line over ggrs-core and ggrs-llama. It parses arguments and prints;
//! everything a library user would also need lives in the libraries.

mod bench;
mod chat;
mod common;
mod convert;
mod embed;
mod grammar;
mod imatrix;
mod inspect;
mod perplexity;
mod profile;
mod quantize;
mod run;
mod serve;
mod split;
mod tokenize;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Pure-Rust GGML-style inference: run, inspect and quantize GGUF models.
#[derive(Parser, Debug)]
#[command(name = "ggrs", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate text from a prompt (streams to stdout, timings to stderr).
    Run(run::Args),
    /// Chat interactively: one line per message, replies streamed, context kept between turns.
    Chat(chat::Args),
    /// Print the token ids (and pieces) of a text.
    Tokenize(tokenize::Args),
    /// Embeddings of texts (-p TEXT, or -f FILE with one input per line), like llama-embedding.
    Embed(embed::Args),
    /// Perplexity of a text file (llama.cpp's protocol).
    Perplexity(perplexity::Args),
    /// Measure prompt (pp) and generation (tg) speed, like llama-bench.
    Bench(bench::Args),
    /// Print a GGUF file's metadata and tensor table (like gguf-dump).
    Inspect(inspect::Args),
    /// Write a copy of a GGUF model with its weights converted to another type.
    Quantize(quantize::Args),
    /// Split a GGUF model into parts as llama-gguf-split does, or merge parts (--merge).
    Split(split::Args),
    /// Collect an importance matrix over a text for quantizing (like llama-imatrix).
    Imatrix(imatrix::Args),
    /// Convert a Hugging Face checkpoint directory (safetensors) to a GGUF model.
    Convert(convert::Args),
    /// Serve a model over HTTP: an OpenAI-compatible API (llama-server's) and a chat page.
    Serve(serve::Args),
}

/// An error with its chain of causes, for printing.
pub(crate) fn report(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(common::rewrite_md(serve::rewrite_np(
        std::env::args_os().collect(),
    )));
    let result = match cli.command {
        Command::Run(a) => run::run(a),
        Command::Chat(a) => chat::run(a),
        Command::Tokenize(a) => tokenize::run(a),
        Command::Embed(a) => embed::run(a),
        Command::Perplexity(a) => perplexity::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Quantize(a) => quantize::run(a),
        Command::Split(a) => split::run(a),
        Command::Imatrix(a) => imatrix::run(a),
        Command::Convert(a) => convert::run(a),
        Command::Serve(a) => serve::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", report(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// What subcommands return.
pub(crate) type CliResult = Result<(), Box<dyn std::error::Error>>;
