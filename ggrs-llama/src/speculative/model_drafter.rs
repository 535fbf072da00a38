//! A draft model as a [`Drafter`]: a smaller model with the target's vocabulary, greedy, in a
//! session of its own.

use std::sync::Arc;

use super::drafting::Drafter;
use crate::batch::Batch;
use crate::error::{LlamaError, Result};
use crate::model::Model;
use crate::sampling::argmax;
use crate::session::{Session, SessionParams};

/// A draft model: a smaller model sharing the target's vocabulary, in a session of its own,
/// proposing its greedy continuation (and stopping when its most likely token is less likely
/// than `p_min`). Its cache follows the history: what it shares with the last call is kept.
pub struct ModelDrafter {
    session: Session,
    /// Tokens its cache holds, in order.
    cached: Vec<u32>,
    /// Drafting stops at a token whose probability under the draft model is below this.
    pub p_min: f32,
}

impl std::fmt::Debug for ModelDrafter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelDrafter")
            .field("cached", &self.cached.len())
            .field("p_min", &self.p_min)
            .finish_non_exhaustive()
    }
}

impl ModelDrafter {
    /// A drafter running `draft` in a session with `params` for a target whose vocabulary
    /// has `target_vocab` tokens: the vocabularies must have the same size (the tokens of
    /// one are the tokens of the other).
    pub fn new(draft: Arc<Model>, params: SessionParams, target: &Model) -> Result<ModelDrafter> {
        let (nd, nt) = (draft.hparams.n_vocab, target.hparams.n_vocab);
        let (td, tt) = (draft.tokenizer(), target.tokenizer());
        let same = nd == nt
            && td.n_vocab() == tt.n_vocab()
            && (0..td.n_vocab() as u32)
                .all(|i| td.token_to_piece(i).ok() == tt.token_to_piece(i).ok());
        if !same {
            return Err(LlamaError::InvalidArgument(format!(
                "the draft model's vocabulary ({nd} tokens) is not the target's ({nt} tokens): \
                 a draft model must share the target's tokenizer"
            )));
        }
        Ok(ModelDrafter {
            session: Session::new(draft, params)?,
            cached: Vec::new(),
            p_min: 0.75,
        })
    }

    /// The draft model's session.
    pub fn session(&self) -> &Session {
        &self.session
    }
}

impl Drafter for ModelDrafter {
    fn draft(&mut self, history: &[u32], max: usize) -> Result<Vec<u32>> {
        if history.is_empty() || max == 0 {
            return Ok(Vec::new());
        }
        // Keep the shared prefix (at most all but the last token, whose logits are needed).
        let keep = self
            .cached
            .iter()
            .zip(history)
            .take_while(|(a, b)| a == b)
            .count()
            .min(history.len() - 1);
        let room = self.session.params().n_ctx;
        if history.len() + max > room {
            // The draft model's context is full: no guesses (the target goes on alone).
            return Ok(Vec::new());
        }
        self.session.remove(0, keep as i32);
        self.cached.truncate(keep);
        let nb = self.session.params().n_batch;
        for piece in history[keep..].chunks(nb) {
            let start = self.cached.len() as i32;
            self.session
                .decode(&Batch::from_tokens(piece, start, 0, false))
                .inspect_err(|_| self.resync())?;
            self.cached.extend_from_slice(piece);
        }
        let mut out = Vec::with_capacity(max);
        loop {
            let logits = self.session.logits();
            let best = argmax(logits);
            let lse = crate::sampling::log_sum_exp(logits);
            let p = (logits[best as usize] as f64 - lse).exp();
            if p < self.p_min as f64 {
                break;
            }
            out.push(best);
            if out.len() == max {
                break;
            }
            let start = self.cached.len() as i32;
            self.session
                .decode(&Batch::from_tokens(&[best], start, 0, false))
                .inspect_err(|_| self.resync())?;
            self.cached.push(best);
        }
        Ok(out)
    }
}

impl ModelDrafter {
    /// After a failed step: forget everything (the next draft evaluates the history anew).
    fn resync(&mut self) {
        self.session.clear();
        self.cached.clear();
    }
}
