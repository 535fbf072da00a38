//! Speculative decoding that never changes the output.
//!
//! A drafter guesses the tokens that follow; the session evaluates the token just sampled
//! and the guesses as one step ([`Session::decode_exact`](crate::Session::decode_exact): every column computes as a
//! one-token step would, so each row of logits has the bits plain decoding gives at that
//! position), and the generation samples row after row as it would one step after another
//! (the draws are keyed by position, [`crate::sampling::draw`]): a drafted token is kept
//! exactly when it equals the token sampled at its position, and the first that does not is
//! replaced by the sampled one. The cells of the rejected guesses are then removed from the
//! cache. So tokens, log-probabilities and text are those of plain decoding, greedy or
//! sampled with a seed, whatever the drafter proposes; a good drafter only makes it faster
//! (several tokens per read of the weights).
//!
//! Drafters: [`NgramDrafter`] (prompt lookup: the continuation of the longest earlier match
//! of the last tokens, in the prompt and the output) and [`ModelDrafter`] (a smaller model
//! with the same vocabulary, greedy, in a session of its own).

// Internal users name the submodules (`crate::speculative::drafting::…`): the drafting half
// knows nothing of sessions, while the draft model runs one.
pub(crate) mod drafting;
mod model_drafter;

pub use drafting::{DraftControl, Drafter, NgramDrafter, SpecParams, SpecStats, Speculation};
pub use model_drafter::ModelDrafter;
