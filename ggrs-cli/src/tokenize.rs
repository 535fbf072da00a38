//! `ggrs tokenize`: print a text's token ids and pieces, as llama-tokenize does.
//!
//! A ChatGLM-6B v1 (`chatglm1`) file is tokenized the way generation encodes its prompts
//! ([`chatglm1::encode_prompt`]): the official text conventions (`<n>`, `<|tab|>`,
//! `<|blank_N|>`) and `[gMASK] <sop>` at the end.

use ggrs_core::gguf::GgufFile;
use ggrs_llama::arch::chatglm1;
use ggrs_llama::{Model, Tokenizer};

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
    /// Do not add BOS/EOS even where the model adds them (chatglm1: leave out the final
    /// `[gMASK] <sop>`).
    #[arg(long)]
    no_bos: bool,
    /// Treat special-token text (e.g. `<|im_start|>`) as plain text (chatglm1 always does,
    /// as its official tokenizer).
    #[arg(long)]
    no_parse_special: bool,
}

/// Runs `ggrs tokenize`.
pub fn run(a: Args) -> CliResult {
    let text = a.prompt.text()?;
    let file = GgufFile::open(a.model.path()?)?;
    let glm1 = file.get("general.architecture").and_then(|v| v.as_str()) == Some("chatglm1");
    let (tok, ids) = if glm1 {
        // The model (its weights mapped, not read) for the encoding generation uses.
        let model = Model::from_gguf(file)?;
        let mut ids = chatglm1::encode_prompt(&model, &text)?;
        if a.no_bos {
            // encode_prompt appends exactly `[gMASK] <sop>` to the text's tokens.
            ids.truncate(ids.len().saturating_sub(2));
        }
        (model.tokenizer().clone(), ids)
    } else {
        // The tokenizer alone: no weights are mapped for this.
        let tok = Tokenizer::from_gguf(&file)?;
        let ids = tok.encode(&text, !a.no_bos, !a.no_parse_special)?;
        (tok, ids)
    };
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
