//! BPE pre-tokenizers: how text is cut into words before merges are applied.
//!
//! llama.cpp picks a list of regular expressions by the GGUF key `tokenizer.ggml.pre` and
//! applies them in turn (its `unicode_regex_split`): each one cuts every piece left by the
//! previous one, and text between two matches (a "gap") becomes a piece of its own. It runs
//! its most used expressions through hand-written code, and the others through `std::regex`
//! with its own treatment of Unicode categories.
//!
//! Here [`table`] holds llama.cpp's lists as data, name by name, and one engine applies any
//! of them. Each expression runs either through a hand-written [`scan::Scanner`], for the
//! strings there is one for (recognised by their text: llama.cpp's own code for GPT-2,
//! LLaMA 3, Qwen2, Qwen3.5, Kimi K2, AFMoE and line splitting, plus the simple expressions
//! of the default and Falcon lists, kept hand-written because they are fast), or through
//! the `regex` crate, translated from `std::regex`'s syntax and semantics by
//! [`ecmascript`]. Pieces are counted in characters, as in llama.cpp.
//!
//! To add a pre-tokenizer: add its `tokenizer.ggml.pre` name to
//! [`table::PRE_TOKENIZERS`] with its flags, and, if llama.cpp gives it a list of
//! expressions no other name uses, that list (copied verbatim) beside the others. The engine
//! compiles it on first use; an expression it cannot run exactly (a look-around form
//! [`ecmascript`] does not rewrite, say) makes the name an
//! [`TokenizerError::UnsupportedPreTokenizer`] error with the reason, and
//! `every_listed_expression_compiles` in the tests names the offender.

mod ecmascript;
mod scan;
pub(crate) mod table;

use std::fmt;

use super::error::TokenizerError;
use ecmascript::{Haystacks, RegexStage};
use scan::{Scanner, Sink};
pub(crate) use table::{PreConfig, PRE_TOKENIZERS};

/// One expression of a list, ready to run.
#[derive(Debug)]
enum Stage {
    /// A hand-written scanner.
    Scan(Scanner),
    /// The `regex` crate.
    Regex(RegexStage),
}

/// A pre-tokenizer of a byte-level BPE vocabulary, named by `tokenizer.ggml.pre`: llama.cpp's
/// list of regular expressions for that name, compiled.
#[derive(Clone, Copy)]
pub struct PreTokenizer {
    name: &'static str,
    config: &'static PreConfig,
    stages: &'static [Stage],
}

impl PartialEq for PreTokenizer {
    fn eq(&self, other: &PreTokenizer) -> bool {
        self.name == other.name
    }
}

impl Eq for PreTokenizer {}

impl fmt::Debug for PreTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PreTokenizer").field(&self.name).finish()
    }
}

impl PreTokenizer {
    /// The pre-tokenizer llama.cpp uses for the `tokenizer.ggml.pre` name `name`.
    ///
    /// Errors: [`TokenizerError::UnknownPreTokenizer`] for a name llama.cpp does not know
    /// either; [`TokenizerError::UnsupportedPreTokenizer`] for one whose expressions this
    /// crate cannot run exactly as llama.cpp does.
    pub fn from_name(name: &str) -> Result<PreTokenizer, TokenizerError> {
        let Some((name, config)) = PRE_TOKENIZERS.iter().find(|(n, _)| *n == name) else {
            return Err(TokenizerError::UnknownPreTokenizer {
                pre: name.to_owned(),
                known: PreTokenizer::names().collect::<Vec<_>>().join(", "),
            });
        };
        let unsupported = |reason: String| TokenizerError::UnsupportedPreTokenizer {
            pre: (*name).to_owned(),
            reason,
        };
        let stages = config
            .exprs
            .compiled
            .get_or_init(|| config.exprs.list.iter().map(|e| compile(e)).collect())
            .as_deref()
            .map_err(|why| unsupported(why.clone()))?;
        Ok(PreTokenizer {
            name,
            config,
            stages,
        })
    }

    /// Every `tokenizer.ggml.pre` name llama.cpp knows (some of which
    /// [`PreTokenizer::from_name`] refuses as unsupported).
    pub fn names() -> impl Iterator<Item = &'static str> {
        PRE_TOKENIZERS.iter().map(|(n, _)| *n)
    }

    /// Its `tokenizer.ggml.pre` name.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// llama.cpp's regular expressions for it, in the order they apply.
    pub fn expressions(self) -> &'static [&'static str] {
        self.config.exprs.list
    }

    /// How the name configures the tokenizer.
    pub(crate) fn config(self) -> &'static PreConfig {
        self.config
    }

    /// Cuts `text` into words. The words are consecutive, non-empty and together make up
    /// `text` exactly.
    pub fn split(self, text: &str) -> Vec<&str> {
        let chars: Vec<char> = text.chars().collect();
        // Byte offset of each character, and of the end.
        let mut byte_at: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        byte_at.push(text.len());

        // Lengths (in characters) of consecutive pieces, as in llama.cpp.
        let mut pieces = vec![chars.len()];
        if chars.is_empty() {
            pieces.clear();
        }
        let mut haystacks = Haystacks::default();
        for stage in self.stages {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            let mut start = 0;
            for &len in &pieces {
                match stage {
                    Stage::Scan(scanner) => {
                        let mut sink = Sink {
                            out: &mut next,
                            prev_end: 0,
                        };
                        scanner.split(&chars[start..start + len], &mut sink);
                        sink.emit(len);
                    }
                    Stage::Regex(re) => re.split(&chars, &mut haystacks, start, len, &mut next),
                }
                start += len;
            }
            pieces = next;
        }

        let mut words = Vec::with_capacity(pieces.len());
        let mut start = 0;
        for len in pieces {
            words.push(&text[byte_at[start]..byte_at[start + len]]);
            start += len;
        }
        words
    }
}

/// One expression as a stage: its scanner if it has one, the regex crate otherwise.
fn compile(expr: &str) -> Result<Stage, String> {
    match Scanner::for_expression(expr) {
        Some(scanner) => Ok(Stage::Scan(scanner)),
        None => RegexStage::compile(expr)
            .map(Stage::Regex)
            .map_err(|why| format!("llama.cpp's expression {expr:?} cannot run exactly: {why}")),
    }
}

#[cfg(test)]
mod tests;
