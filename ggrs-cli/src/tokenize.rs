//! `ggrs tokenize`: print a text's token ids and pieces, as llama-tokenize does.
//!
//! Text is encoded the way generation encodes a prompt: with the text conventions of the
//! file's architecture ([`Registry::text_conventions`]; ChatGLM-6B v1's `<n>`, `<|tab|>`,
//! `<|blank_N|>` and `[gMASK] <sop>` at the end), from the tokenizer alone: no weights are
//! mapped for this.

use ggrs_core::gguf::GgufFile;
use ggrs_llama::{Registry, Tokenizer};

use crate::common::{ModelArgs, PromptArgs};
use crate::CliResult;

/// Arguments of `ggrs tokenize`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    prompt: PromptArgs,
    /// Print only the ids, as a list.
    #[arg(long)]
    ids: bool,
    /// Do not add BOS/EOS even where the model adds them (nor an architecture's own prompt
    /// markers, e.g. ChatGLM-6B v1's final `[gMASK] <sop>`).
    #[arg(long)]
    no_bos: bool,
    /// Treat special-token text (e.g. `<|im_start|>`) as plain text (some architectures always
    /// do, e.g. ChatGLM-6B v1 as its official tokenizer).
    #[arg(long)]
    no_parse_special: bool,
}

/// Runs `ggrs tokenize`.
pub fn run(a: Args) -> CliResult {
    let text = a.prompt.text()?;
    let file = GgufFile::open(a.model.path()?)?;
    let tok = Tokenizer::from_gguf(&file)?;
    let conventions = Registry::builtin().text_conventions(&file)?;
    let ids = conventions.encode(&tok, &text, !a.no_bos, !a.no_parse_special)?;
    if a.ids {
        println!("{ids:?}");
        return Ok(());
    }
    for id in &ids {
        let piece = tok.token_to_piece(*id)?;
        println!("{id:>6} -> '{}'", String::from_utf8_lossy(&piece));
    }
    eprintln!("{} tokens", ids.len());
    Ok(())
}
