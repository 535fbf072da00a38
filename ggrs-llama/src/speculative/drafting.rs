//! The drafting half of speculative decoding: the [`Drafter`] trait, the n-gram drafter, the
//! draft-length control and the statistics (nothing here runs a model).

use crate::error::Result;

/// Proposes tokens to follow a sequence.
pub trait Drafter: Send {
    /// Up to `max` tokens likely to follow `history` (the prompt and the generated tokens,
    /// the last one the token about to be evaluated); fewer or none when it has no guess.
    fn draft(&mut self, history: &[u32], max: usize) -> Result<Vec<u32>>;
}

/// How much to draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecParams {
    /// Most tokens drafted per step (the session's [`SessionParams::n_draft`] must allow
    /// them).
    pub draft_max: usize,
    /// Fewest tokens worth a speculative step: a shorter draft is dropped (plain step).
    pub draft_min: usize,
    /// Draft fewer tokens (or none) while drafts are rejected or verification is dear
    /// ([`DraftControl`]); false: always up to `draft_max`.
    pub adaptive: bool,
}

impl Default for SpecParams {
    /// 16 tokens at most, at least 1, adaptive.
    fn default() -> Self {
        SpecParams {
            draft_max: 16,
            draft_min: 1,
            adaptive: true,
        }
    }
}

/// Drafted and accepted token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Speculative steps (steps that verified at least one drafted token).
    pub steps: usize,
    /// Tokens drafted and verified.
    pub drafted: usize,
    /// Drafted tokens accepted (equal to what the model samples).
    pub accepted: usize,
}

impl SpecStats {
    /// Accepted / drafted (0 when nothing was drafted).
    pub fn acceptance(&self) -> f64 {
        match self.drafted {
            0 => 0.0,
            d => self.accepted as f64 / d as f64,
        }
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: SpecStats) {
        self.steps += other.steps;
        self.drafted += other.drafted;
        self.accepted += other.accepted;
    }
}

/// How many drafted tokens are worth verifying now: a running estimate of the chance that
/// a drafted token is accepted (given the ones before it were) and of what a verified
/// column costs next to a one-token step (measured), and the draft length that maximises
/// the expected tokens per unit of time, `(1 + a + a² + … + aᵏ) / (1 + c·k)` (0: a plain
/// step). So speculation backs off where drafts are rejected or columns are dear (both
/// estimates drift back during plain steps, so it tries again now and then), and drafts long
/// where they are accepted. It decides speed only: the output never depends on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DraftControl {
    /// Estimated chance that a drafted token is accepted after accepted ones.
    pub accept: f64,
    /// Estimated cost of one verified column, in one-token steps.
    pub column_cost: f64,
    /// Seconds of a one-token step (running mean; 0 until measured).
    pub step_secs: f64,
}

impl Default for DraftControl {
    fn default() -> Self {
        DraftControl {
            accept: Self::PRIOR,
            column_cost: Self::COST_PRIOR,
            step_secs: 0.0,
        }
    }
}

impl DraftControl {
    /// Where the acceptance estimate starts, and drifts back to during plain steps (so
    /// that drafting resumes now and then).
    const PRIOR: f64 = 0.75;
    /// Where the column cost estimate starts, and drifts back down to during plain steps.
    const COST_PRIOR: f64 = 0.4;
    /// Weight of a new observation in the running estimates.
    const RATE: f64 = 0.15;

    /// The draft length, at most `cap`, with the most expected tokens per unit of time.
    pub fn limit(&self, cap: usize) -> usize {
        let (a, c) = (self.accept, self.column_cost.max(0.01));
        let (mut best, mut best_rate) = (0, 1.0);
        let (mut gain, mut p) = (1.0, 1.0);
        for k in 1..=cap {
            p *= a;
            gain += p;
            let rate = gain / (1.0 + c * k as f64);
            if rate > best_rate {
                (best, best_rate) = (k, rate);
            }
        }
        best
    }

    /// The control for the next request of the same slot: what was measured of the steps'
    /// cost carries over (it belongs to the machine and the model, not to the request), the
    /// acceptance estimate starts again from its prior.
    pub fn for_next_request(&self) -> DraftControl {
        DraftControl {
            accept: Self::PRIOR,
            ..*self
        }
    }

    /// A plain (one-token) step took `secs`.
    pub fn plain_step(&mut self, secs: f64) {
        self.step_secs = match self.step_secs {
            0.0 => secs,
            s => s + Self::RATE * (secs - s),
        };
        // Both estimates drift back to their priors (a dear column may have been a busy
        // moment of the machine), so that drafting is tried again now and then.
        self.accept += 0.05 * (Self::PRIOR - self.accept).max(0.0);
        self.column_cost += 0.02 * (Self::COST_PRIOR - self.column_cost).min(0.0);
    }

    /// A step verified `drafted` tokens, kept `kept`, in `secs`.
    pub fn spec_step(&mut self, drafted: usize, kept: usize, secs: f64) {
        for i in 0..drafted.min(kept + 1) {
            let hit = (i < kept) as u8 as f64;
            self.accept += Self::RATE * (hit - self.accept);
        }
        if self.step_secs > 0.0 && drafted > 0 {
            let c = (secs / self.step_secs - 1.0) / drafted as f64;
            self.column_cost += Self::RATE * (c.clamp(0.0, 2.0) - self.column_cost);
        }
    }
}

/// A drafter and its limits, attached to a session ([`Session::set_speculation`]).
pub struct Speculation {
    /// Draft sizes.
    pub params: SpecParams,
    /// Who drafts.
    pub drafter: Box<dyn Drafter>,
}

impl Speculation {
    /// `drafter` with `params`.
    pub fn new(params: SpecParams, drafter: Box<dyn Drafter>) -> Speculation {
        Speculation { params, drafter }
    }
}

impl std::fmt::Debug for Speculation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Speculation")
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

/// Prompt lookup: finds the earlier place in the history whose tokens before it match the
/// longest suffix of the history (at least `min_match` tokens, compared up to `max_match`),
/// and proposes the tokens that followed it there. Code edits, retrieval answers and JSON
/// re-emit long stretches of their input, which this guesses for free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NgramDrafter {
    /// Shortest suffix match that counts.
    pub min_match: usize,
    /// Longest suffix compared (longer matches rank equal).
    pub max_match: usize,
}

impl Default for NgramDrafter {
    /// Matches of 2 to 64 tokens.
    fn default() -> Self {
        NgramDrafter {
            min_match: 2,
            max_match: 64,
        }
    }
}

impl NgramDrafter {
    /// The proposal for `history` (see the type's docs): the longest match wins, the latest
    /// of equally long ones.
    pub fn lookup(&self, history: &[u32], max: usize) -> Vec<u32> {
        let n = history.len();
        if n < 2 || max == 0 {
            return Vec::new();
        }
        let last = history[n - 1];
        let (mut best, mut best_len) = (None, 0usize);
        for i in (0..n - 1).rev() {
            if history[i] != last {
                continue;
            }
            // Length of the match ending at i against the suffix ending at n − 1.
            let cap = self.max_match.min(i + 1);
            let len = (0..cap)
                .take_while(|&l| history[i - l] == history[n - 1 - l])
                .count();
            if len > best_len {
                (best, best_len) = (Some(i), len);
                if len >= self.max_match {
                    break;
                }
            }
        }
        match best {
            Some(i) if best_len >= self.min_match.max(1) => {
                history[i + 1..(i + 1 + max).min(n)].to_vec()
            }
            _ => Vec::new(),
        }
    }
}

impl Drafter for NgramDrafter {
    fn draft(&mut self, history: &[u32], max: usize) -> Result<Vec<u32>> {
        Ok(self.lookup(history, max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_proposes_the_longest_match() {
        let d = NgramDrafter::default();
        // "1 2 3 4 5 ... 9 2 3" : the suffix [2, 3] matched at 1..=2, continuation 4 5.
        let h = [1, 2, 3, 4, 5, 6, 9, 2, 3];
        assert_eq!(d.lookup(&h, 2), vec![4, 5]);
        assert_eq!(d.lookup(&h, 100), vec![4, 5, 6, 9, 2, 3]);
        // The longer of two matches wins over the later one.
        let h = [7, 8, 9, 1, 5, 8, 9, 2, 0, 7, 8, 9];
        assert_eq!(d.lookup(&h, 1), vec![1]);
        // Equally long: the latest.
        let h = [8, 9, 1, 8, 9, 2, 8, 9];
        assert_eq!(d.lookup(&h, 1), vec![2]);
        // A single-token match is below min_match: nothing.
        let h = [1, 9, 5, 2, 9];
        assert!(d.lookup(&h, 4).is_empty());
        assert!(NgramDrafter {
            min_match: 1,
            max_match: 8
        }
        .lookup(&h, 4)
        .starts_with(&[5, 2]));
        assert!(d.lookup(&[3], 4).is_empty());
        assert!(d.lookup(&[], 4).is_empty());
    }

    #[test]
    fn draft_control_backs_off_and_grows() {
        let mut c = DraftControl::default();
        c.plain_step(0.1);
        let start = c.limit(16);
        assert!(start >= 1, "drafts at first: {c:?}");
        // Rejected drafts at a full step's cost per column: plain steps.
        for _ in 0..20 {
            c.spec_step(4, 0, 0.1 + 4.0 * 0.1);
        }
        assert_eq!(c.limit(16), 0, "{c:?}");
        // Plain steps drift back to drafting.
        for _ in 0..200 {
            c.plain_step(0.1);
        }
        assert!(c.limit(16) >= 1, "{c:?}");
        // Everything accepted, cheap columns: long drafts.
        for _ in 0..20 {
            c.spec_step(8, 8, 0.1 + 8.0 * 0.01);
        }
        assert!(c.limit(16) >= 8, "{c:?}");
    }

    #[test]
    fn the_next_request_keeps_the_measured_costs() {
        let mut c = DraftControl::default();
        c.plain_step(0.1);
        // Columns as dear as whole steps, drafts rejected: no drafting.
        for _ in 0..20 {
            c.spec_step(4, 0, 0.1 + 4.0 * 0.1);
        }
        let next = c.for_next_request();
        assert_eq!(next.accept, DraftControl::default().accept);
        assert_eq!(
            (next.column_cost, next.step_secs),
            (c.column_cost, c.step_secs)
        );
        // Even with the acceptance prior, a column that costs a step does not pay.
        assert_eq!(next.limit(16), 0, "{next:?}");
        assert!(DraftControl::default().limit(16) > 0);
    }
}
