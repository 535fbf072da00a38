//! Choosing the next token from logits: penalties, top-k, top-p, min-p, temperature, and a
//! seeded random draw (llama.cpp's default order), or greedy argmax.
//!
//! **Counter-based draws.** The random number behind the token at a position is not the next
//! output of a generator that every draw advances: it is a hash of (seed, stream, position)
//! ([`draw`]), where the position is how many tokens the sampler has seen
//! ([`Sampler::accept`]: the prompt's and the generated ones). So the token sampled at a
//! position depends only on the seed, the logits there and the tokens before it, not on how
//! many draws happened before or in which order: speculative decoding
//! ([`crate::speculative`]) can tell what the model would sample at each drafted position
//! from that position's logits, and accept a drafted token exactly when it equals it, with
//! the output identical to plain decoding. A seeded run stays reproducible (same seed, same
//! prompt, same tokens); the tokens differ from those of ggrs versions before this scheme
//! (which drew from one SplitMix64 sequence).

use std::collections::VecDeque;

/// How to pick tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 or less picks the most likely token (greedy).
    pub temperature: f32,
    /// Keep only the k most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probabilities add up to p (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one (0: none).
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of recent tokens by this (1: off).
    pub repeat_penalty: f32,
    /// Subtract `count · frequency_penalty` from the logits of recent tokens (0: off).
    pub frequency_penalty: f32,
    /// Subtract this from the logits of tokens that occurred recently (0: off).
    pub presence_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub penalty_last_n: usize,
    /// Seed of the random draw: the same seed gives the same choices.
    pub seed: u64,
    /// Added to the logits of these tokens before anything else (the OpenAI API's
    /// `logit_bias`; `f32::NEG_INFINITY` bans a token). Reported log-probabilities stay
    /// the model's.
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplingParams {
    /// llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no
    /// penalties (last 64 tokens when enabled), seed 0.
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplingParams {
    /// Always the most likely token.
    pub fn greedy() -> SamplingParams {
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        }
    }

    /// Checks the ranges of the parameters.
    pub fn validate(&self) -> Result<(), String> {
        if !self.temperature.is_finite() {
            return Err(format!("temperature {} is not finite", self.temperature));
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return Err(format!("top-p {} is outside 0..=1", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min-p {} is outside 0..=1", self.min_p));
        }
        if !self.repeat_penalty.is_finite() || self.repeat_penalty <= 0.0 {
            return Err(format!(
                "repeat penalty {} must be finite and > 0",
                self.repeat_penalty
            ));
        }
        if !self.frequency_penalty.is_finite() {
            return Err(format!(
                "frequency penalty {} is not finite",
                self.frequency_penalty
            ));
        }
        if !self.presence_penalty.is_finite() {
            return Err(format!(
                "presence penalty {} is not finite",
                self.presence_penalty
            ));
        }
        if let Some(&(t, b)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| b.is_nan() || *b == f32::INFINITY)
        {
            return Err(format!(
                "the logit bias of token {t} is {b}: it must be a number or -infinity"
            ));
        }
        Ok(())
    }
}

/// Temperatures below this pick the most likely token (as 0 does): dividing logits by a
/// smaller one overflows `f32` for ordinary logits, and the draw is greedy in effect anyway
/// (a logit gap of 0.001 is a probability ratio of e^-1000).
pub const MIN_TEMPERATURE: f32 = 1e-6;

/// No token can be picked: every logit is −∞ or NaN after the biases (every token banned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "no token can be sampled: every token is banned (logit_bias of -infinity or false) or \
     has no probability"
)]
pub struct NoCandidates;

/// A small, seedable random generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform value in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The uniform value in `[0, 1)` behind the token sampled at `position` of stream `stream`
/// with seed `seed`: a hash of the three (SplitMix64's finaliser over each word in turn),
/// so any position's draw is known without drawing the ones before it.
pub fn draw(seed: u64, stream: u64, position: u64) -> f64 {
    let mut h = mix64(seed ^ 0x5EED_5EED_5EED_5EED);
    h = mix64(h ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    h = mix64(h ^ position.wrapping_mul(0xD1B5_4A32_D192_ED03));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// SplitMix64's finaliser (a bijection of `u64` that mixes every bit into every other).
fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Picks tokens; remembers recent ones for the penalties, and counts the tokens seen (the
/// position whose [`draw`] the next pick uses).
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    /// Which stream of draws (0 unless the caller asks for another, e.g. several
    /// completions of one prompt with one seed).
    stream: u64,
    /// Tokens accepted so far: the position of the next pick.
    position: u64,
    recent: VecDeque<u32>,
}

/// Index of the largest value (the first on ties; NaN never wins over a number, and a NaN
/// first value is kept); 0 for an empty slice.
pub fn argmax(logits: &[f32]) -> u32 {
    let Some(&first) = logits.first() else {
        return 0;
    };
    let (mut best, mut best_x) = (0usize, first);
    for (c, chunk) in logits.chunks(SCAN).enumerate() {
        // Most chunks hold nothing above the best so far: a lane-wise maximum (vectorised)
        // tells, and only a chunk that does is walked in order.
        // (`best_x` may be a NaN first value: then nothing is greater and nothing changes.)
        let above = chunk_max(chunk).partial_cmp(&best_x) == Some(std::cmp::Ordering::Greater);
        if !above {
            continue;
        }
        for (i, &x) in chunk.iter().enumerate() {
            if x > best_x {
                (best, best_x) = (c * SCAN + i, x);
            }
        }
    }
    best as u32
}

/// Values per chunk of the scans in [`argmax`] and [`top_ids`].
const SCAN: usize = 256;
/// Lanes of the lane-wise maxima (one AVX-512 register of f32 or i32).
const LANES: usize = 16;

/// The largest value of `chunk` by `>` (NaN never counts; −∞ for no number).
fn chunk_max(chunk: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; LANES];
    let mut it = chunk.chunks_exact(LANES);
    for v in &mut it {
        for (m, &x) in m.iter_mut().zip(v) {
            *m = if x > *m { x } else { *m };
        }
    }
    let tail = it.remainder().iter();
    m.into_iter()
        .chain(tail.copied())
        .fold(f32::NEG_INFINITY, |a, x| if x > a { x } else { a })
}

/// `x`'s rank in [`f32::total_cmp`]'s order as an `i32` (same order under `<`).
fn total_key(x: f32) -> i32 {
    let b = x.to_bits() as i32;
    b ^ (((b >> 31) as u32) >> 1) as i32
}

/// The largest [`total_key`] of `chunk`.
fn chunk_max_key(chunk: &[f32]) -> i32 {
    let mut m = [i32::MIN; LANES];
    let mut it = chunk.chunks_exact(LANES);
    for v in &mut it {
        for (m, &x) in m.iter_mut().zip(v) {
            *m = (*m).max(total_key(x));
        }
    }
    let tail = it.remainder().iter().map(|&x| total_key(x));
    m.into_iter().chain(tail).max().unwrap_or(i32::MIN)
}

/// `log Σ exp(logits)`, from the largest logit ([`ggrs_core::kernels::vec::log_sum_exp`]:
/// vectorised, the same bits on every CPU).
pub fn log_sum_exp(logits: &[f32]) -> f64 {
    ggrs_core::kernels::vec::log_sum_exp(logits)
}

/// The `k` most likely tokens and their log-probabilities under `softmax(logits)`, most
/// likely first (ties: the lower id first).
pub fn top_logprobs(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let k = k.min(logits.len());
    if k == 0 {
        return Vec::new();
    }
    let lse = log_sum_exp(logits);
    top_ids(logits, k)
        .into_iter()
        .map(|i| (i, (logits[i as usize] as f64 - lse) as f32))
        .collect()
}

/// The ids of the `k` largest logits, largest first, ties by lower id: one pass keeping
/// the best `k` in order (k is small: a handful of alternatives to show), or a selection
/// for large `k`.
fn top_ids(logits: &[f32], k: usize) -> Vec<u32> {
    // `a` ranks before `b`.
    let before = |a: u32, b: u32| {
        logits[a as usize]
            .total_cmp(&logits[b as usize])
            .then(b.cmp(&a))
            .is_gt()
    };
    if k > 64 {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        idx.select_nth_unstable_by(k - 1, |&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
        idx.truncate(k);
        idx.sort_by(|&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
        return idx;
    }
    let mut best: Vec<u32> = Vec::with_capacity(k + 1);
    for (c, chunk) in logits.chunks(SCAN).enumerate() {
        // A later id enters only with a value above the k-th best (ties keep the lower
        // id): a chunk whose largest value is not above it is skipped whole.
        if best.len() == k && chunk_max_key(chunk) <= total_key(logits[best[k - 1] as usize]) {
            continue;
        }
        let from = (c * SCAN) as u32;
        for i in from..from + chunk.len() as u32 {
            if best.len() == k && !before(i, best[k - 1]) {
                continue;
            }
            let at = best.partition_point(|&b| before(b, i));
            best.insert(at, i);
            best.truncate(k);
        }
    }
    best
}

impl Sampler {
    /// A sampler with `params` (draws keyed by `params.seed`, stream 0, from position 0).
    pub fn new(params: SamplingParams) -> Sampler {
        Sampler::with_stream(params, 0)
    }

    /// A sampler drawing from stream `stream` of `params.seed` (another stream gives other
    /// choices from the same seed).
    pub fn with_stream(params: SamplingParams, stream: u64) -> Sampler {
        Sampler {
            params,
            stream,
            position: 0,
            recent: VecDeque::new(),
        }
    }

    /// The position of the next pick: how many tokens [`Sampler::accept`] has seen.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Records `token` as generated (or part of the prompt), for the penalties; the next
    /// pick draws for the next position.
    pub fn accept(&mut self, token: u32) {
        self.position += 1;
        if self.params.penalty_last_n == 0 {
            return;
        }
        if self.recent.len() == self.params.penalty_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(token);
    }

    /// Forgets the recent tokens and starts again at position 0.
    pub fn reset(&mut self) {
        self.recent.clear();
        self.position = 0;
    }

    /// Whether the penalties change any logit now.
    fn penalizes(&self) -> bool {
        let p = &self.params;
        !self.recent.is_empty()
            && (p.repeat_penalty != 1.0 || p.frequency_penalty != 0.0 || p.presence_penalty != 0.0)
    }

    fn apply_penalties(&self, logits: &mut [f32]) {
        if !self.penalizes() {
            return;
        }
        let p = &self.params;
        let mut counts: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        for &t in &self.recent {
            *counts.entry(t).or_default() += 1;
        }
        for (&t, &c) in &counts {
            let Some(l) = logits.get_mut(t as usize) else {
                continue;
            };
            if *l <= 0.0 {
                *l *= p.repeat_penalty;
            } else {
                *l /= p.repeat_penalty;
            }
            *l -= c as f32 * p.frequency_penalty + p.presence_penalty;
        }
    }

    /// Picks the next token from `logits` (one value per vocabulary entry), with the draw of
    /// the current position ([`draw`]): picking again before [`Sampler::accept`] gives the
    /// same token for the same logits. Does not record it: call [`Sampler::accept`] with the
    /// token kept. When no token can be picked (every
    /// logit −∞ or NaN after the biases: all banned) this returns the plain argmax of
    /// `logits`; [`Sampler::try_sample`] reports that case as an error instead.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.try_sample(logits).unwrap_or_else(|_| argmax(logits))
    }

    /// [`Sampler::sample`], defined for every finite input: a temperature below
    /// [`MIN_TEMPERATURE`] picks greedily; tokens whose adjusted logit is −∞ or NaN (banned
    /// by `logit_bias`) are never picked, and when that leaves none the answer is
    /// [`NoCandidates`]; an adjusted logit that overflows to +∞ counts as the largest finite
    /// value.
    pub fn try_sample(&mut self, logits: &[f32]) -> Result<u32, NoCandidates> {
        match self.chain(logits)? {
            Chain::Certain(id) => Ok(id),
            Chain::Scaled(cand) => Ok(self.draw_from(&cand, &softmax(&cand))),
        }
    }

    /// [`Sampler::try_sample`] (the same token), with the distribution the token was drawn
    /// from: the candidates the sampler chain (biases, penalties, top-k, top-p, min-p,
    /// temperature) leaves and their probabilities, most likely first, tokens of no
    /// probability left out (a greedy pick is one token of probability 1). llama-server's
    /// "post-sampling probabilities".
    pub fn try_sample_with_probs(
        &mut self,
        logits: &[f32],
    ) -> Result<(u32, Vec<(u32, f32)>), NoCandidates> {
        match self.chain(logits)? {
            Chain::Certain(id) => Ok((id, vec![(id, 1.0)])),
            Chain::Scaled(cand) => {
                let pr = softmax(&cand);
                let id = self.draw_from(&cand, &pr);
                let dist = cand
                    .iter()
                    .zip(&pr)
                    .map(|(&(t, _), &q)| (t, q as f32))
                    .filter(|&(_, q)| q > 0.0)
                    .collect();
                Ok((id, dist))
            }
        }
    }

    /// The token of `cand` (probabilities `pr`) that this position's [`draw`] falls on.
    fn draw_from(&self, cand: &[(u32, f32)], pr: &[f64]) -> u32 {
        let r = draw(self.params.seed, self.stream, self.position);
        let mut cum = 0.0;
        for (i, &q) in pr.iter().enumerate() {
            cum += q;
            if r < cum {
                return cand[i].0;
            }
        }
        // Rounding left the sum below the draw: the last candidate (`chain` never gives an
        // empty list, so the index exists).
        cand[cand.len() - 1].0
    }

    /// The sampler chain up to the draw: the logits biased and penalised, then greedy, or
    /// the candidates top-k, top-p and min-p keep with their logits divided by the
    /// temperature.
    fn chain(&self, logits: &[f32]) -> Result<Chain, NoCandidates> {
        // The logits as biased and penalised (a copy only when something changes them).
        let adjusted: Vec<f32>;
        let l: &[f32] = if self.params.logit_bias.is_empty() && !self.penalizes() {
            logits
        } else {
            let mut v = logits.to_vec();
            for &(t, b) in &self.params.logit_bias {
                if let Some(x) = v.get_mut(t as usize) {
                    *x += b;
                }
            }
            self.apply_penalties(&mut v);
            // A bias or penalty that overflows (a huge finite bias, a tiny repeat penalty)
            // stays the largest finite value rather than +∞ (which would make every
            // probability NaN).
            for x in &mut v {
                if *x == f32::INFINITY {
                    *x = f32::MAX;
                }
            }
            adjusted = v;
            &adjusted
        };
        let p = &self.params;
        if p.temperature < MIN_TEMPERATURE || l.len() <= 1 {
            let best = argmax(l);
            return match l.get(best as usize) {
                Some(x) if *x > f32::NEG_INFINITY => Ok(Chain::Certain(best)),
                _ => Err(NoCandidates),
            };
        }
        // Candidates sorted by logit, most likely first (ties: the lower id first): the
        // `top_k` best in one pass over the vocabulary, or all of them.
        let mut cand: Vec<(u32, f32)> = if p.top_k > 0 && p.top_k < l.len() {
            top_ids(l, p.top_k)
                .into_iter()
                .map(|i| (i, l[i as usize]))
                .collect()
        } else {
            let mut all: Vec<(u32, f32)> =
                l.iter().enumerate().map(|(i, &x)| (i as u32, x)).collect();
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            all
        };
        // Banned tokens (−∞, and NaN, which sorts first) are no candidates: they have no
        // probability, and the draw's fall-back to the last candidate must not reach them.
        cand.retain(|&(_, x)| x > f32::NEG_INFINITY);
        if cand.is_empty() {
            return Err(NoCandidates);
        }
        if p.top_p < 1.0 {
            let pr = softmax(&cand);
            let mut cum = 0.0;
            let mut keep = cand.len();
            for (i, &q) in pr.iter().enumerate() {
                cum += q;
                if cum >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep.max(1));
        }
        if p.min_p > 0.0 {
            let floor = cand[0].1 + p.min_p.ln();
            let keep = cand.iter().take_while(|&&(_, x)| x >= floor).count();
            cand.truncate(keep.max(1));
        }
        for c in &mut cand {
            c.1 /= p.temperature;
        }
        if !cand[0].1.is_finite() {
            // Divided by a small temperature the largest logit overflowed: all the
            // probability is on it.
            return Ok(Chain::Certain(cand[0].0));
        }
        Ok(Chain::Scaled(cand))
    }
}

/// What the sampler chain leaves to draw from.
enum Chain {
    /// One token has all the probability.
    Certain(u32),
    /// Candidates (at least one) and their logits over the temperature, most likely first.
    Scaled(Vec<(u32, f32)>),
}

/// The probabilities of candidates sorted by logit, most likely first (not empty).
fn softmax(c: &[(u32, f32)]) -> Vec<f64> {
    let max = c[0].1;
    let e: Vec<f64> = c.iter().map(|&(_, x)| ((x - max) as f64).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.5, -1.0, 0.0, 2.9]
    }

    /// Samples and accepts (the next pick draws for the next position).
    fn pick(s: &mut Sampler, logits: &[f32]) -> u32 {
        let t = s.sample(logits);
        s.accept(t);
        t
    }

    /// The draw depends on (seed, stream, position) only: picking twice at one position gives
    /// one token, the same position of a fresh sampler gives it again whatever happened
    /// before, and other seeds, streams and positions draw other values.
    #[test]
    fn draws_are_keyed_by_position() {
        let free = SamplingParams {
            seed: 11,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            temperature: 3.0,
            ..SamplingParams::default()
        };
        let mut a = Sampler::new(free.clone());
        let first: Vec<u32> = (0..64).map(|_| pick(&mut a, &logits())).collect();
        // Repeated picks at one position agree.
        let mut b = Sampler::new(free.clone());
        for _ in 0..5 {
            assert_eq!(b.sample(&logits()), first[0]);
        }
        // Skipping to position 40 by accepting any tokens (no penalties): the same pick.
        let mut c = Sampler::new(free.clone());
        for t in 0..40 {
            c.accept(t % 3);
        }
        assert_eq!(c.position(), 40);
        assert_eq!(c.sample(&logits()), first[40]);
        // The picks vary over positions (six tokens, temperature 3: not all alike).
        assert!(first.iter().any(|&t| t != first[0]));
        let d = |seed, stream, pos| draw(seed, stream, pos);
        assert_ne!(d(11, 0, 5), d(12, 0, 5));
        assert_ne!(d(11, 0, 5), d(11, 1, 5));
        assert_ne!(d(11, 0, 5), d(11, 0, 6));
        assert_eq!(d(11, 0, 5), d(11, 0, 5));
        // Roughly uniform: the mean of many draws is near 1/2.
        let mean = (0..10_000).map(|i| draw(3, 0, i)).sum::<f64>() / 10_000.0;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
        let mut other = Sampler::with_stream(free, 1);
        let alt: Vec<u32> = (0..64).map(|_| pick(&mut other, &logits())).collect();
        assert_ne!(alt, first);
    }

    /// The distribution reported with a pick is the one the pick is drawn from: the same
    /// token as a plain pick, probabilities summing to 1 over what top-k keeps, most likely
    /// first; a greedy pick is certain.
    #[test]
    fn post_sampling_probs_are_the_drawn_distribution() {
        for seed in 0..20 {
            let params = SamplingParams {
                seed,
                top_k: 3,
                top_p: 1.0,
                min_p: 0.0,
                temperature: 1.5,
                ..SamplingParams::default()
            };
            let mut a = Sampler::new(params.clone());
            let mut b = Sampler::new(params);
            let (id, dist) = a.try_sample_with_probs(&logits()).unwrap();
            assert_eq!(id, b.try_sample(&logits()).unwrap());
            assert_eq!(dist.len(), 3);
            let ids: Vec<u32> = dist.iter().map(|d| d.0).collect();
            assert_eq!(
                ids,
                top_logprobs(&logits(), 3)
                    .iter()
                    .map(|t| t.0)
                    .collect::<Vec<_>>()
            );
            assert!(ids.contains(&id));
            assert!(dist.windows(2).all(|w| w[0].1 >= w[1].1));
            let total: f32 = dist.iter().map(|d| d.1).sum();
            assert!((total - 1.0).abs() < 1e-5, "{total}");
        }
        let mut g = Sampler::new(SamplingParams::greedy());
        assert_eq!(
            g.try_sample_with_probs(&logits()).unwrap(),
            (1, vec![(1, 1.0)])
        );
    }

    #[test]
    fn greedy_is_argmax() {
        let mut s = Sampler::new(SamplingParams::greedy());
        assert_eq!(s.sample(&logits()), 1);
    }

    #[test]
    fn same_seed_same_choices() {
        let draw = |seed| {
            let mut s = Sampler::new(SamplingParams {
                seed,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                temperature: 1.5,
                ..SamplingParams::default()
            });
            (0..50).map(|_| pick(&mut s, &logits())).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn filters_restrict_the_choices() {
        // top-k 2 leaves tokens 1 and 5 only.
        let mut s = Sampler::new(SamplingParams {
            top_k: 2,
            top_p: 1.0,
            min_p: 0.0,
            temperature: 5.0,
            ..SamplingParams::default()
        });
        for _ in 0..200 {
            assert!(matches!(pick(&mut s, &logits()), 1 | 5));
        }
        // min-p 0.5: exp(2.5 - 3) = 0.61 ≥ 0.5 keeps 2; exp(1 - 3) = 0.14 drops 0.
        let mut s = Sampler::new(SamplingParams {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.5,
            temperature: 5.0,
            ..SamplingParams::default()
        });
        let seen: std::collections::BTreeSet<u32> =
            (0..500).map(|_| pick(&mut s, &logits())).collect();
        assert_eq!(seen, [1, 2, 5].into_iter().collect());
        // top-p 0.3: token 1 alone has p ≈ 0.37 after softmax over all six.
        let mut s = Sampler::new(SamplingParams {
            top_k: 0,
            top_p: 0.3,
            min_p: 0.0,
            temperature: 1.0,
            ..SamplingParams::default()
        });
        for _ in 0..100 {
            assert_eq!(pick(&mut s, &logits()), 1);
        }
    }

    #[test]
    fn penalties_change_the_winner() {
        let mut s = Sampler::new(SamplingParams {
            repeat_penalty: 1.5,
            ..SamplingParams::greedy()
        });
        s.accept(1);
        // 3.0 / 1.5 = 2.0 < 2.9: token 5 wins.
        assert_eq!(s.sample(&logits()), 5);
        let mut s = Sampler::new(SamplingParams {
            frequency_penalty: 0.2,
            presence_penalty: 0.0,
            ..SamplingParams::greedy()
        });
        s.accept(1);
        assert_eq!(s.sample(&logits()), 5);
    }

    /// The first index of the largest value by `>`, in one plain pass: the definition the
    /// chunked [`argmax`] must keep.
    fn argmax_plain(v: &[f32]) -> u32 {
        let mut best = 0usize;
        for (i, &x) in v.iter().enumerate() {
            if x > v[best] {
                best = i;
            }
        }
        best as u32
    }

    /// Vocabulary-sized rows with ties, infinities, NaN and −0.0 in every position class
    /// (chunk starts, lane tails, the last partial chunk): the chunked scans equal the plain
    /// definitions.
    #[test]
    fn chunked_scans_equal_plain_ones() {
        let mut seed = 5u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for len in [1, 15, 16, 17, 255, 256, 257, 1000, 4099, 151_936] {
            for case in 0..8 {
                let mut v: Vec<f32> = (0..len).map(|_| (next() % 64) as f32 / 8.0 - 4.0).collect();
                let mut poke = |v: &mut Vec<f32>, x: f32| {
                    let at = next() as usize % v.len();
                    v[at] = x;
                };
                match case {
                    0 => {}
                    1 => (0..3).for_each(|_| poke(&mut v, f32::NAN)),
                    2 => (0..3).for_each(|_| poke(&mut v, f32::INFINITY)),
                    3 => v.iter_mut().for_each(|x| *x = f32::NEG_INFINITY),
                    4 => {
                        v[0] = f32::NAN;
                        poke(&mut v, 9.0);
                    }
                    5 => v
                        .iter_mut()
                        .for_each(|x| *x = if *x > 0.0 { -0.0 } else { 0.0 }),
                    6 => v.iter_mut().for_each(|x| *x = -x.abs() - 1.0),
                    // Negative and rising: every chunk beats the best so far.
                    _ => {
                        let n = v.len() as f32;
                        v.iter_mut()
                            .enumerate()
                            .for_each(|(i, x)| *x = -1.0 - (n - i as f32) / 64.0)
                    }
                }
                assert_eq!(argmax(&v), argmax_plain(&v), "len {len} case {case}");
                let mut all: Vec<u32> = (0..len as u32).collect();
                all.sort_by(|&a, &b| v[b as usize].total_cmp(&v[a as usize]).then(a.cmp(&b)));
                for k in [1, 3, 40, 64] {
                    let k = k.min(len);
                    assert_eq!(top_ids(&v, k), all[..k], "len {len} case {case} k {k}");
                }
            }
        }
    }

    /// The one-pass selection equals a full sort (ties by lower id), for every k.
    #[test]
    fn top_ids_equal_a_full_sort() {
        let mut seed = 9u64;
        let v: Vec<f32> = (0..500)
            .map(|_| {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                ((seed >> 40) % 50) as f32 / 7.0
            })
            .collect();
        let mut all: Vec<u32> = (0..v.len() as u32).collect();
        all.sort_by(|&a, &b| v[b as usize].total_cmp(&v[a as usize]).then(a.cmp(&b)));
        for k in [1, 2, 5, 20, 64, 65, 200, 500] {
            assert_eq!(top_ids(&v, k), all[..k].to_vec(), "k = {k}");
        }
    }

    #[test]
    fn logit_bias_moves_and_bans_tokens() {
        // +1 on token 2 (2.5 -> 3.5) makes it the greedy winner.
        let mut s = Sampler::new(SamplingParams {
            logit_bias: vec![(2, 1.0)],
            ..SamplingParams::greedy()
        });
        assert_eq!(s.sample(&logits()), 2);
        // Banning 1 and 5 leaves 2 the most likely; sampling never picks a banned token.
        let mut s = Sampler::new(SamplingParams {
            logit_bias: vec![(1, f32::NEG_INFINITY), (5, f32::NEG_INFINITY), (99, 5.0)],
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            temperature: 2.0,
            ..SamplingParams::default()
        });
        for _ in 0..300 {
            assert!(!matches!(pick(&mut s, &logits()), 1 | 5));
        }
        let greedy = Sampler::new(SamplingParams {
            logit_bias: vec![(1, f32::NEG_INFINITY), (5, f32::NEG_INFINITY)],
            ..SamplingParams::greedy()
        })
        .sample(&logits());
        assert_eq!(greedy, 2);
        // The caller's logits (what log-probabilities are computed from) are untouched.
        let l = logits();
        let mut s = Sampler::new(SamplingParams {
            logit_bias: vec![(0, 10.0)],
            ..SamplingParams::greedy()
        });
        assert_eq!(s.sample(&l), 0);
        assert_eq!(l, logits());
        // NaN and +infinity are refused.
        for b in [f32::NAN, f32::INFINITY] {
            let p = SamplingParams {
                logit_bias: vec![(0, b)],
                ..SamplingParams::default()
            };
            assert!(p.validate().is_err());
        }
    }

    /// The plain definitions (issue 32): a temperature below the floor is greedy, a banned
    /// token is never picked, all banned is an error, and an overflowing bias or penalty
    /// still picks among the candidates.
    #[test]
    fn samplers_are_defined_for_every_finite_input() {
        let free = |temperature: f32, seed: u64| SamplingParams {
            temperature,
            seed,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..SamplingParams::default()
        };
        for t in [1e-40, 1e-38, 1e-30, 1e-7] {
            for seed in 0..20 {
                assert_eq!(Sampler::new(free(t, seed)).sample(&logits()), 1, "t {t}");
            }
        }
        // Logits large enough that dividing by a small (above the floor) temperature
        // overflows: the most likely token still wins.
        let big = vec![1e33, 3e33, -3e33];
        for seed in 0..20 {
            assert_eq!(Sampler::new(free(1e-5, seed)).try_sample(&big), Ok(1));
        }
        // Everything banned: an error, by either path.
        let ban_all: Vec<(u32, f32)> = (0..6).map(|t| (t, f32::NEG_INFINITY)).collect();
        for base in [
            free(1.0, 3),
            SamplingParams::greedy(),
            SamplingParams::default(),
        ] {
            let mut s = Sampler::new(SamplingParams {
                logit_bias: ban_all.clone(),
                ..base
            });
            assert_eq!(s.try_sample(&logits()), Err(NoCandidates));
        }
        // All but one banned: always that one, whatever the draw.
        let mut s = Sampler::new(SamplingParams {
            logit_bias: ban_all[..5].to_vec(),
            ..free(2.0, 9)
        });
        for _ in 0..200 {
            assert_eq!(s.try_sample(&logits()), Ok(5));
            s.accept(5);
        }
        // A finite bias that overflows to +inf counts as the largest value, not NaN.
        for seed in 0..20 {
            let mut s = Sampler::new(SamplingParams {
                logit_bias: vec![(3, f32::MAX)],
                ..free(1.0, seed)
            });
            assert_eq!(s.try_sample(&logits()), Ok(3));
        }
        // NaN logits (from the model) are no candidates.
        let mut l = logits();
        l[1] = f32::NAN;
        for seed in 0..50 {
            assert_ne!(Sampler::new(free(1.0, seed)).try_sample(&l), Ok(1));
        }
        // NaN and +inf biases are refused by the checks.
        for b in [f32::NAN, f32::INFINITY] {
            let p = SamplingParams {
                logit_bias: vec![(0, b)],
                ..SamplingParams::default()
            };
            assert!(p.validate().is_err());
        }
    }

    #[test]
    fn logprobs_are_normalised() {
        let t = top_logprobs(&logits(), 6);
        let total: f64 = t.iter().map(|&(_, lp)| (lp as f64).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert_eq!(t[0].0, 1);
        assert_eq!(t[1].0, 5);
    }
}
