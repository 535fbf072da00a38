//! The model's vocabulary as llguidance sees it: every token's bytes in a trie (control
//! tokens behind llguidance's 0xFF marker, so grammars can name them as `<|im_end|>` but
//! text never matches them), the end-of-generation tokens, and our tokenizer for the text
//! the engine wants split.

use std::sync::Arc;

use llguidance::earley::SlicedBiasComputer;
use llguidance::ParserFactory;
use toktrie::{InferenceCapabilities, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::tokenizer::{TokenType, Tokenizer};

struct Env {
    trie: TokTrie,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // Only used to force tokens, which ggrs does not ask for (the constraint catches up
        // on text with the model's own tokenizer): the trie's greedy split is enough.
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// The byte strings of the vocabulary, one per id.
fn token_bytes(tok: &Tokenizer) -> Vec<Vec<u8>> {
    let v = tok.vocab();
    (0..v.len() as u32)
        .map(|id| {
            let Some(t) = v.token(id) else {
                return Vec::new();
            };
            match t.ty {
                TokenType::Control => {
                    let mut b = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    b.extend_from_slice(t.text.as_bytes());
                    b
                }
                TokenType::Unused | TokenType::Undefined => Vec::new(),
                _ => tok.token_to_piece(id).unwrap_or_default(),
            }
        })
        .collect()
}

/// Builds the per-vocabulary engine state (once per model).
pub(super) fn factory(tok: &Tokenizer) -> Result<ParserFactory, String> {
    let n = tok.n_vocab() as u32;
    let eog = tok.vocab().eog_ids().to_vec();
    let eos = tok
        .eos()
        .or_else(|| eog.first().copied())
        .ok_or("the vocabulary has no end-of-generation token")?;
    let info = TokRxInfo {
        tok_bos: tok.bos(),
        ..TokRxInfo::new(n, eos)
    };
    let mut ends = vec![eos];
    ends.extend(eog.iter().copied().filter(|&t| t != eos));
    let trie = TokTrie::from(&info, &token_bytes(tok)).with_eos_tokens(&ends);
    let env: TokEnv = Arc::new(Env { trie });
    let mut f = ParserFactory::new(
        &env,
        InferenceCapabilities::default(),
        &SlicedBiasComputer::general_slices(),
    )
    .map_err(|e| e.to_string())?;
    f.quiet();
    Ok(f)
}
