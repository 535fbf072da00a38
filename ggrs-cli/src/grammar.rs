//! `--grammar`, `--grammar-file`, `--json-schema`: constrained output for `ggrs run` and
//! `ggrs chat` (see `ggrs_llama::constraint`).

use std::path::PathBuf;

use ggrs_llama::constraint::{Constraint, GrammarSpec};
use ggrs_llama::Tokenizer;

/// Options that make the output follow a grammar or a JSON Schema.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct GrammarArgs {
    /// Constrain the output to a llama.cpp GBNF grammar (`root ::= …`), given inline.
    #[arg(long, value_name = "GBNF", conflicts_with_all = ["grammar_file", "json_schema"])]
    pub grammar: Option<String>,
    /// Constrain the output to the GBNF grammar in FILE (e.g. llama.cpp's grammars/json.gbnf).
    #[arg(long, value_name = "FILE", conflicts_with = "json_schema")]
    pub grammar_file: Option<PathBuf>,
    /// Constrain the output to JSON that validates against this JSON Schema (inline JSON, or
    /// @FILE to read it from a file); `{}` means any JSON value.
    #[arg(long, value_name = "SCHEMA|@FILE")]
    pub json_schema: Option<String>,
}

impl GrammarArgs {
    /// The compiled constraint, if one was asked for.
    pub fn constraint(&self, tok: &Tokenizer) -> Result<Option<Constraint>, String> {
        let spec = if let Some(g) = &self.grammar {
            GrammarSpec::Gbnf(g.clone())
        } else if let Some(f) = &self.grammar_file {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read the grammar file {}: {e}", f.display()))?;
            GrammarSpec::Gbnf(text)
        } else if let Some(s) = &self.json_schema {
            let text = match s.strip_prefix('@') {
                Some(path) => std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read the schema file {path}: {e}"))?,
                None => s.clone(),
            };
            let v = serde_json::from_str(&text)
                .map_err(|e| format!("--json-schema is not valid JSON: {e}"))?;
            GrammarSpec::JsonSchema(v)
        } else {
            return Ok(None);
        };
        Constraint::compile(tok, spec)
            .map(Some)
            .map_err(|e| e.to_string())
    }
}
