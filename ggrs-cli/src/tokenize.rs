//! `ggrs tokenize`: print a text's token ids and pieces, as llama-tokenize does.

use ggrs_llama::Tokenizer;

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
    /// Do not add BOS/EOS even where the model adds them.
    #[arg(long)]
    no_bos: bool,
    /// Treat special-token text (e.g. `<|im_start|>`) as plain text.
    #[arg(long)]
    no_parse_special: bool,
}

/// Runs `ggrs tokenize`.
pub fn run(a: Args) -> CliResult {
    let text = a.prompt.text()?;
    // The tokenizer alone: no weights are mapped for this.
    let tok = Tokenizer::open(a.model.path()?)?;
    let ids = tok.encode(&text, !a.no_bos, !a.no_parse_special)?;
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
