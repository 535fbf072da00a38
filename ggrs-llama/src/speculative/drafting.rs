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
/// a drafted token is accepted (given the ones before it were) and of what a step of each
/// width costs next to a one-token step (measured), and the draft length that maximises
/// the expected tokens per unit of time, `(1 + a + a² + … + aᵏ) / cost(k + 1)` (0: a plain
/// step). So speculation backs off where drafts are rejected or columns are dear (the
/// estimates drift back during plain steps, so it tries again now and then), and drafts long
/// where they are accepted. It decides speed only: the output never depends on it.
///
/// The cost of a width is what steps of that width measured; a width not yet measured is
/// estimated from the running cost per column of the steps so far (`column_cost`). Widths are
/// not priced alike: while the products stream the weights from memory, the first few
/// columns are nearly free, and past the widest pass of the products' kernel a column costs
/// a second pass (Qwen2.5-0.5B Q4_0, two threads, AVX-512: 2, 4, 8, 9 and 16 columns cost
/// 1.03, 1.18, 1.44, 1.69 and 3.11 one-token steps; `spec_step_cost`), which one cost per
/// column misjudges both ways.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DraftControl {
    /// Estimated chance that a drafted token is accepted after accepted ones.
    pub accept: f64,
    /// Estimated cost of one verified column, in one-token steps.
    pub column_cost: f64,
    /// Seconds of a one-token step (running mean; 0 until measured).
    pub step_secs: f64,
    /// Measured cost of a step of `w` columns (index `w`), in one-token steps (0: not yet).
    width_cost: [f64; WIDTHS],
}

/// Step widths [`DraftControl`] prices one by one (up to 63 drafted tokens and the sampled
/// one; wider steps are priced per column).
const WIDTHS: usize = 65;

impl Default for DraftControl {
    fn default() -> Self {
        DraftControl {
            accept: Self::PRIOR,
            column_cost: Self::COST_PRIOR,
            step_secs: 0.0,
            width_cost: [0.0; WIDTHS],
        }
    }
}

impl DraftControl {
    /// Where the acceptance estimate starts, and drifts back to during plain steps (so
    /// that drafting resumes now and then).
    const PRIOR: f64 = 0.75;
    /// Where the column cost estimate starts, and drifts back down to during plain steps: a
    /// column that reads no weights of its own (the products stream the weights once for
    /// all columns) costs about this much; where columns are dearer, the first step says so.
    const COST_PRIOR: f64 = 0.1;
    /// Weight of a new observation in the running estimates.
    const RATE: f64 = 0.15;
    /// Weight of a new observation of one width's cost (each width is seen less often).
    const WIDTH_RATE: f64 = 0.3;

    /// How many widths past the widest one measured a draft may reach: the control learns
    /// the cost of wider steps a few columns at a time.
    const GROW: usize = 4;

    /// The measured cost of a step of `w` columns (1 for `w` = 1), if any.
    fn seen(&self, w: usize) -> Option<f64> {
        match (w, self.width_cost.get(w)) {
            (1, _) => Some(1.0),
            (_, Some(&c)) if c > 0.0 => Some(c),
            _ => None,
        }
    }

    /// The estimated cost of a step of `w` ≥ 1 columns, in one-token steps: measured, else
    /// interpolated between the nearest widths measured on either side, else (wider than
    /// any measured) the widest measured one plus the running cost per column.
    fn cost(&self, w: usize) -> f64 {
        if let Some(c) = self.seen(w) {
            return c;
        }
        // Width 1 is always known.
        let (lo, lo_cost) = (1..w)
            .rev()
            .find_map(|v| self.seen(v).map(|c| (v, c)))
            .unwrap_or((1, 1.0));
        match (w + 1..WIDTHS).find_map(|v| self.seen(v).map(|c| (v, c))) {
            Some((hi, hi_cost)) => {
                lo_cost + (hi_cost - lo_cost) * (w - lo) as f64 / (hi - lo) as f64
            }
            None => lo_cost + self.column_cost.max(0.01) * (w - lo) as f64,
        }
    }

    /// The widest step measured (1 before any speculative step).
    fn widest_seen(&self) -> usize {
        (2..WIDTHS)
            .rev()
            .find(|&w| self.width_cost[w] > 0.0)
            .unwrap_or(1)
    }

    /// The draft length, at most `cap`, with the most expected tokens per unit of time; 0
    /// until a one-token step has been timed ([`DraftControl::plain_step`]), against which
    /// every wider step is measured (without it, the costs of the widths could not be
    /// learned, and drafts would stay as short as the first ones).
    pub fn limit(&self, cap: usize) -> usize {
        if self.step_secs <= 0.0 {
            return 0;
        }
        let cap = cap.min(self.widest_seen() - 1 + Self::GROW);
        let a = self.accept;
        let (mut best, mut best_rate) = (0, 1.0);
        let (mut gain, mut p) = (1.0, 1.0);
        for k in 1..=cap {
            p *= a;
            gain += p;
            let rate = gain / self.cost(k + 1);
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
        // The estimates drift back to their priors (a dear column may have been a busy
        // moment of the machine), so that drafting is tried again now and then.
        self.accept += 0.05 * (Self::PRIOR - self.accept).max(0.0);
        self.column_cost += 0.02 * (Self::COST_PRIOR - self.column_cost).min(0.0);
        for (w, c) in self.width_cost.iter_mut().enumerate().skip(2) {
            if *c > 0.0 {
                let prior = 1.0 + Self::COST_PRIOR * (w - 1) as f64;
                *c += 0.02 * (prior - *c).min(0.0);
            }
        }
    }

    /// A step verified `drafted` tokens, kept `kept`, in `secs`.
    pub fn spec_step(&mut self, drafted: usize, kept: usize, secs: f64) {
        for i in 0..drafted.min(kept + 1) {
            let hit = (i < kept) as u8 as f64;
            self.accept += Self::RATE * (hit - self.accept);
        }
        if self.step_secs > 0.0 && drafted > 0 {
            let rel = (secs / self.step_secs).clamp(1.0, 1.0 + 2.0 * drafted as f64);
            let c = (rel - 1.0) / drafted as f64;
            self.column_cost += Self::RATE * (c - self.column_cost);
            if let Some(w) = self.width_cost.get_mut(drafted + 1) {
                *w = match *w {
                    0.0 => rel,
                    old => old + Self::WIDTH_RATE * (rel - old),
                };
            }
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
///
/// Where no suffix of `min_match` tokens matches (just after an edit: a renamed identifier,
/// a changed word), [`Drafter::draft`] keeps copying from where its last draft came from: it
/// takes the first match of the last token alone at or after the place the copy had reached
/// (the source of the last draft, moved on by the tokens generated since), so that a copy
/// resumes one token after an edit instead of two; failing that, the latest match of the
/// last token alone. A verified column costs little next to a step (the products stream
/// the weights once for all columns), so even such weak guesses pay; the draft-length
/// control ([`DraftControl`]) stops drafting where they are rejected. (On the code-editing
/// prompts of `scripts/bench-spec`, replayed with measured step costs: 322 → 328 drafted
/// tokens accepted of 536, 2.03 → 2.14× plain decoding.) [`NgramDrafter::lookup`] is the
/// longest-match proposal alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NgramDrafter {
    /// Shortest suffix match that counts.
    pub min_match: usize,
    /// Longest suffix compared (longer matches rank equal).
    pub max_match: usize,
    /// Where the last draft was copied from in the history, and the history's length then.
    copy: Option<(usize, usize)>,
}

impl Default for NgramDrafter {
    /// Matches of 2 to 64 tokens.
    fn default() -> Self {
        NgramDrafter {
            min_match: 2,
            max_match: 64,
            copy: None,
        }
    }
}

impl NgramDrafter {
    /// The proposal for `history` (see the type's docs): the longest match wins, the latest
    /// of equally long ones.
    pub fn lookup(&self, history: &[u32], max: usize) -> Vec<u32> {
        self.lookup_from(history, max, None, false)
            .map(|(at, n)| history[at..at + n].to_vec())
            .unwrap_or_default()
    }

    /// Where the proposal for `history` starts and how long it is: the longest suffix match
    /// (of at least `min_match` tokens), else, with `resume` (where a copy had reached), the
    /// first single-token match whose continuation starts at or after it, else, with
    /// `single`, the latest single-token match.
    fn lookup_from(
        &self,
        history: &[u32],
        max: usize,
        resume: Option<usize>,
        single: bool,
    ) -> Option<(usize, usize)> {
        let n = history.len();
        if n < 2 || max == 0 {
            return None;
        }
        let last = history[n - 1];
        let (mut best, mut best_len) = (None, 0usize);
        // The first continuation at or after `resume` of a single-token match.
        let mut near: Option<usize> = None;
        for i in (0..n - 1).rev() {
            if history[i] != last {
                continue;
            }
            if resume.is_some_and(|r| i + 1 >= r) {
                near = Some(i + 1);
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
        let at = match (best, near) {
            (Some(i), _) if best_len >= self.min_match.max(1) => i + 1,
            (_, Some(at)) => at,
            (Some(i), None) if single => i + 1,
            _ => return None,
        };
        Some((at, max.min(n - at)))
    }
}

impl Drafter for NgramDrafter {
    fn draft(&mut self, history: &[u32], max: usize) -> Result<Vec<u32>> {
        // The copy has moved on by the tokens generated since the last draft (a history
        // that did not grow from the last one starts afresh).
        let resume = match self.copy {
            Some((at, len)) if history.len() >= len => Some(at + (history.len() - len)),
            _ => None,
        };
        let found = self.lookup_from(history, max, resume, true);
        if let Some((at, _)) = found {
            self.copy = Some((at, history.len()));
        }
        Ok(found
            .map(|(at, n)| history[at..at + n].to_vec())
            .unwrap_or_default())
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
            max_match: 8,
            ..NgramDrafter::default()
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
    fn draft_control_prices_each_width() {
        // Step costs measured on Qwen2.5-0.5B Q4_0 (two threads, AVX-512): nearly free
        // columns up to eight, then a second pass of the products.
        let curve = [
            1.0, 1.03, 1.10, 1.18, 1.20, 1.25, 1.37, 1.44, 1.69, 1.81, 2.09, 2.27, 2.47, 2.67,
            2.80, 3.11, 3.15,
        ];
        let cost = |w: usize| curve[w - 1];
        // Everything accepted: the best width is the one with the most columns per cost.
        let best = (1..=17).map(|w| w as f64 / cost(w)).fold(0.0, f64::max);
        let mut c = DraftControl::default();
        c.plain_step(0.1);
        let mut widths = Vec::new();
        for _ in 0..40 {
            let k = c.limit(16);
            assert!(k >= 1, "drafting stopped: {c:?}");
            widths.push(k + 1);
            c.spec_step(k, k, 0.1 * cost(k + 1));
        }
        let w = c.limit(16) + 1;
        assert!(
            w as f64 / cost(w) >= 0.95 * best,
            "settled on {w} columns ({:.2} per step, best {best:.2}); widths {widths:?}",
            w as f64 / cost(w)
        );
        // It grew a few widths at a time.
        assert!(widths[0] <= 1 + DraftControl::GROW, "{widths:?}");
        // Unmeasured widths: interpolated, or extrapolated per column past the widest.
        let mut d = DraftControl::default();
        d.plain_step(0.1);
        d.spec_step(3, 3, 0.1 * 1.2);
        d.spec_step(7, 7, 0.1 * 1.6);
        assert!((d.cost(6) - 1.4).abs() < 1e-9, "{d:?}");
        assert!(d.cost(9) > d.cost(8) && d.cost(2) < d.cost(4), "{d:?}");
    }

    #[test]
    fn ngram_resumes_the_copy_after_an_edit() {
        // The source 1 2 3 4 5 6 7 8, copied with 4 replaced by 9: after "… 3 9" no pair
        // matches, and the single token 9 does not occur in the source; after "… 3 9 5",
        // the pair (9, 5) matches nothing either, but 5's continuation 6 7 8 lies just
        // where the copy had reached.
        let src = [1, 2, 3, 4, 5, 6, 7, 8, 0, 5, 7];
        let mut d = NgramDrafter::default();
        let mut h: Vec<u32> = src.to_vec();
        h.extend([1, 2]);
        assert_eq!(d.draft(&h, 3).unwrap(), vec![3, 4, 5]);
        h.extend([3, 9]);
        assert!(d.draft(&h, 3).unwrap().is_empty());
        h.push(5);
        // The latest 5 (at index 9, continuing with 7) is not the copy's: 6 7 8 is.
        assert_eq!(d.draft(&h, 3).unwrap(), vec![6, 7, 8]);
        // Stateless lookup: nothing (no pair matches).
        assert!(d.lookup(&h, 3).is_empty());
        // A history that is not a continuation starts afresh.
        assert!(d.draft(&h[..5], 3).unwrap().is_empty());
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
        // A fresh control drafts once a one-token step has been timed, not before.
        let mut fresh = DraftControl::default();
        assert_eq!(fresh.limit(16), 0);
        fresh.plain_step(0.1);
        assert!(fresh.limit(16) > 0);
    }
}
