//! A step's input: (token, position, sequence) entries, as llama.cpp's `llama_batch`.

use crate::error::{LlamaError, Result};

/// Identifies a sequence (a conversation) in a shared KV cache.
pub type SeqId = u32;

/// Most sequences one KV cache tracks.
pub const MAX_SEQ: usize = 64;

/// The tokens of one evaluation step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    /// Token ids.
    pub tokens: Vec<u32>,
    /// Position of each token in its sequence.
    pub pos: Vec<i32>,
    /// Sequence of each token.
    pub seq: Vec<SeqId>,
    /// Whether logits are wanted for each token.
    pub logits: Vec<bool>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Appends one entry.
    pub fn push(&mut self, token: u32, pos: i32, seq: SeqId, logits: bool) {
        self.tokens.push(token);
        self.pos.push(pos);
        self.seq.push(seq);
        self.logits.push(logits);
    }

    /// `tokens` of sequence `seq` at positions `start..`, logits for the last one only (or
    /// for all, with `all_logits`).
    pub fn from_tokens(tokens: &[u32], start: i32, seq: SeqId, all_logits: bool) -> Batch {
        let mut b = Batch::new();
        for (i, &t) in tokens.iter().enumerate() {
            b.push(
                t,
                start + i as i32,
                seq,
                all_logits || i + 1 == tokens.len(),
            );
        }
        b
    }

    /// Entries in the batch.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when the batch has no entries.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Number of entries whose logits are wanted.
    pub fn n_outputs(&self) -> usize {
        self.logits.iter().filter(|&&l| l).count()
    }

    /// Checks lengths, token ids, sequence ids and positions.
    pub fn validate(&self, n_vocab: usize) -> Result<()> {
        let n = self.tokens.len();
        if n == 0 {
            return Err(LlamaError::EmptyPrompt);
        }
        if self.pos.len() != n || self.seq.len() != n || self.logits.len() != n {
            return Err(LlamaError::InvalidArgument(
                "batch fields (tokens, pos, seq, logits) have different lengths".into(),
            ));
        }
        if let Some(&t) = self.tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(LlamaError::TokenOutOfRange {
                id: t as i64,
                n_vocab,
            });
        }
        if let Some(&s) = self.seq.iter().find(|&&s| s as usize >= MAX_SEQ) {
            return Err(LlamaError::InvalidArgument(format!(
                "sequence id {s} is out of range (at most {MAX_SEQ} sequences)"
            )));
        }
        if let Some(&p) = self.pos.iter().find(|&&p| p < 0) {
            return Err(LlamaError::InvalidArgument(format!(
                "negative position {p}"
            )));
        }
        Ok(())
    }
}
