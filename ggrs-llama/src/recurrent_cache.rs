//! The recurrent-state cache: what the recurrent layers of a hybrid model (LFM2's short
//! convolutions, Mamba-2, the gated delta-net) carry from one token to the next, beside the
//! KV cache of its attention layers.
//!
//! Unlike keys and values, a recurrent layer's state does not grow with the context: per
//! sequence and layer it is a fixed number of f32 values — the last `d_conv − 1` inputs of
//! its causal convolution (the *conv* part) and, for Mamba-2 and the delta-net, the SSM or
//! delta-rule state (the *ssm* part). [`HParams::recurrent`] says which layers keep which
//! (set by the architecture); a session with such layers keeps one row per (layer, slot) in
//! one f32 tensor, [`RecurrentCache::states`], where slot `s` is sequence id `s`.
//!
//! A step graph reads a layer's conv values of its sequences with
//! [`crate::step::read_conv_state`] and writes the new ones with
//! [`crate::step::write_conv_state`]; the ssm values are read and updated where they lie by
//! the ops that compute them (ggrs-core's `ssm_scan_in_place`, `gated_delta_net_in_place`
//! on [`crate::step::ssm_states`]), so that a decoding step copies no state. The session
//! fills the rows of the step's sequences ([`crate::step::StepInputs::rs_rows`]),
//! zeroes the state of a sequence that starts at position 0, and checks that every other
//! step continues its sequence where the state stands: a recurrent state cannot be rewound,
//! so forgetting the tail of a sequence ([`RecurrentCache::remove`]) forgets its state, and
//! [`RecurrentCache::reusable_prefix`] keeps a prefix only when it is the whole of what the
//! state holds.

use ggrs_core::{Context, DType, Tensor};

use crate::batch::{Batch, SeqId};
use crate::error::{LlamaError, Result};
pub use crate::hparams::RecurrentLayer;
use crate::hparams::{get_usize, HParams};
use ggrs_core::gguf::GgufFile;

/// The recurrent states of a session: see the [module docs](self).
#[derive(Debug, Clone)]
pub struct RecurrentCache {
    /// Every recurrent layer's states, `[width, n_layers · n_slots]` f32: row `r · n_slots +
    /// s` is the state of the `r`-th recurrent layer for slot (sequence id) `s`, its conv
    /// values first, then its ssm values.
    pub states: Tensor,
    /// Values per row (the widest layer's).
    pub width: usize,
    /// Per model layer: its index among the recurrent layers and what it keeps.
    layers: Vec<Option<(usize, RecurrentLayer)>>,
    /// Recurrent layers.
    n_rec: usize,
    /// Per slot: the position the next token must have (`None`: the state is empty, the
    /// sequence starts again at 0).
    next_pos: Vec<Option<i32>>,
}

/// Where one sequence of a step stands (see [`RecurrentCache::begin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqRun {
    /// Its id (slot).
    pub seq: SeqId,
    /// The position after its last token of the step.
    pub end: i32,
    /// Whether its state must be zeroed first (it starts at position 0).
    pub fresh: bool,
}

impl RecurrentCache {
    /// The cache for `hp`'s recurrent layers with `n_slots` sequences, its tensor made in
    /// `ctx`; `None` when the model has no recurrent layer.
    pub fn new(ctx: &mut Context, hp: &HParams, n_slots: usize) -> Result<Option<RecurrentCache>> {
        let mut layers = Vec::with_capacity(hp.n_layer);
        let (mut n_rec, mut width) = (0, 0);
        for l in &hp.recurrent {
            layers.push(l.map(|l| {
                width = width.max(l.width());
                n_rec += 1;
                (n_rec - 1, l)
            }));
        }
        if n_rec == 0 {
            return Ok(None);
        }
        let n_slots = n_slots.max(1);
        let states = ctx.new_tensor_2d(DType::F32, width.max(1), n_rec * n_slots)?;
        ctx.set_name(states, "cache_rs")?;
        if !ctx.is_no_alloc() {
            ctx.data_mut(states)?.fill(0);
        }
        Ok(Some(RecurrentCache {
            states,
            width: width.max(1),
            layers,
            n_rec,
            next_pos: vec![None; n_slots],
        }))
    }

    /// Arena bytes of the cache of `hp` with `n_slots` sequences (0 without recurrent layers).
    pub fn bytes(hp: &HParams, n_slots: usize) -> usize {
        let width = hp.recurrent.iter().flatten().map(|l| l.width()).max();
        let n_rec = hp.recurrent.iter().flatten().count();
        match width {
            Some(w) => Context::mem_size_for(1, 4 * w.max(1) * n_rec * n_slots.max(1)),
            None => 0,
        }
    }

    /// Recurrent layers.
    pub fn n_layers(&self) -> usize {
        self.n_rec
    }

    /// Sequences (slots) it holds states for: ids `0..n_slots`.
    pub fn n_slots(&self) -> usize {
        self.next_pos.len()
    }

    /// Model layer `il`'s index among the recurrent layers and what it keeps, if it is one.
    pub fn layer(&self, il: usize) -> Option<(usize, RecurrentLayer)> {
        self.layers.get(il).copied().flatten()
    }

    /// The position the next token of `seq` must have (0 when its state is empty).
    pub fn next_pos(&self, seq: SeqId) -> i32 {
        self.next_pos
            .get(seq as usize)
            .copied()
            .flatten()
            .unwrap_or(0)
    }

    /// The sequences of `piece` in order of first appearance, each with where it ends and
    /// whether its state starts empty; an error when a sequence is out of the slots, its
    /// tokens are not consecutive positions, or it does not continue where its state
    /// stands. Nothing changes until [`RecurrentCache::commit`].
    pub fn begin(&self, piece: &Batch) -> Result<Vec<SeqRun>> {
        let mut runs: Vec<SeqRun> = Vec::new();
        for (&seq, &pos) in piece.seq.iter().zip(&piece.pos) {
            self.check_slot(seq)?;
            match runs.iter_mut().find(|r| r.seq == seq) {
                Some(r) if r.end == pos => r.end += 1,
                Some(r) => {
                    return Err(LlamaError::InvalidArgument(format!(
                        "sequence {seq}: position {pos} after {}: a model with recurrent layers \
                         takes each sequence's tokens in order, without gaps",
                        r.end - 1
                    )))
                }
                None => {
                    let next = self.next_pos(seq);
                    if pos != 0 && pos != next {
                        return Err(LlamaError::InvalidArgument(format!(
                            "sequence {seq}: position {pos}, but its recurrent state stands at \
                             position {next} (a recurrent state cannot be rewound: start the \
                             sequence again at 0)"
                        )));
                    }
                    runs.push(SeqRun {
                        seq,
                        end: pos + 1,
                        fresh: pos == 0,
                    });
                }
            }
        }
        Ok(runs)
    }

    /// Records that a step of `runs` was computed.
    pub fn commit(&mut self, runs: &[SeqRun]) {
        for r in runs {
            self.next_pos[r.seq as usize] = Some(r.end);
        }
    }

    /// The rows of [`RecurrentCache::states`] a step of `runs` reads, `[n_seqs, n_layers]`
    /// (the values of [`crate::step::StepInputs::rs_rows`]).
    pub fn rows(&self, runs: &[SeqRun]) -> Vec<i32> {
        let n_slots = self.n_slots();
        (0..self.n_rec)
            .flat_map(|r| {
                runs.iter()
                    .map(move |s| (r * n_slots + s.seq as usize) as i32)
            })
            .collect()
    }

    /// The element range of slot `seq`'s row of recurrent layer `r` in the states' data.
    pub fn row_range(&self, r: usize, seq: SeqId) -> std::ops::Range<usize> {
        let row = r * self.n_slots() + seq as usize;
        row * self.width..(row + 1) * self.width
    }

    /// Forgets every state.
    pub fn clear(&mut self) {
        self.next_pos.fill(None);
    }

    /// Forgets the tokens of `seq` from position `from` on: the state goes when it holds
    /// any of them (it cannot be rewound).
    pub fn remove(&mut self, seq: SeqId, from: i32) {
        if let Some(p) = self.next_pos.get_mut(seq as usize) {
            if p.is_some_and(|next| next > from) || from <= 0 {
                *p = None;
            }
        }
    }

    /// How many of the first `len` positions of `seq` a following step can build on: `len`
    /// when the state stands exactly there, else 0.
    pub fn reusable_prefix(&self, seq: SeqId, len: usize) -> usize {
        match self.next_pos(seq) as usize == len {
            true => len,
            false => 0,
        }
    }

    /// The state of `seq` (every recurrent layer's row, from the bytes `data` of
    /// [`RecurrentCache::states`]) and its position: what [`RecurrentCache::restore`] takes
    /// back.
    pub fn save(&self, data: &[u8], seq: SeqId) -> Result<SavedState> {
        self.check_slot(seq)?;
        let values = (0..self.n_rec)
            .flat_map(|r| {
                let range = self.row_range(r, seq);
                data[4 * range.start..4 * range.end]
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            })
            .collect();
        Ok(SavedState {
            next_pos: self.next_pos(seq),
            values,
        })
    }

    /// Puts `saved` back as the state of `seq` in the bytes `data` of
    /// [`RecurrentCache::states`].
    pub fn restore(&mut self, data: &mut [u8], seq: SeqId, saved: &SavedState) -> Result<()> {
        self.check_slot(seq)?;
        if saved.values.len() != self.n_rec * self.width {
            return Err(LlamaError::InvalidArgument(format!(
                "a saved recurrent state of {} values does not fit this cache ({} layers of {} \
                 values)",
                saved.values.len(),
                self.n_rec,
                self.width
            )));
        }
        for r in 0..self.n_rec {
            let range = self.row_range(r, seq);
            let src = &saved.values[r * self.width..(r + 1) * self.width];
            for (b, v) in data[4 * range.start..4 * range.end]
                .chunks_exact_mut(4)
                .zip(src)
            {
                b.copy_from_slice(&v.to_le_bytes());
            }
        }
        self.next_pos[seq as usize] = (saved.next_pos > 0).then_some(saved.next_pos);
        Ok(())
    }

    /// Fails unless `seq` is one of the cache's slots.
    fn check_slot(&self, seq: SeqId) -> Result<()> {
        match (seq as usize) < self.n_slots() {
            true => Ok(()),
            false => Err(LlamaError::InvalidArgument(format!(
                "sequence {seq}: this session keeps recurrent states for sequences 0..{}",
                self.n_slots()
            ))),
        }
    }
}

/// One sequence's recurrent state, taken out of a cache ([`RecurrentCache::save`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SavedState {
    /// The position its next token takes.
    pub next_pos: i32,
    /// Every recurrent layer's row, in layer order.
    pub values: Vec<f32>,
}

/// Recurrent states of one sequence saved at chosen prefix lengths (llama.cpp's context
/// checkpoints): since a recurrent state cannot be rewound, a new prompt that shares only
/// part of what a sequence evaluated goes back to the longest checkpoint within the shared
/// part ([`crate::Session::resume_at`]) instead of starting over. The prompt cache and the
/// serving engine keep one at the end of each prompt.
#[derive(Debug, Clone, Default)]
pub struct Checkpoints {
    /// The states, by increasing position.
    items: Vec<SavedState>,
}

impl Checkpoints {
    /// Checkpoints kept per sequence (the oldest go first).
    pub const MAX: usize = 4;

    /// Keeps `state` (replacing one at the same position, dropping later ones: they belong
    /// to a history the sequence left).
    pub fn record(&mut self, state: SavedState) {
        self.items.retain(|c| c.next_pos < state.next_pos);
        self.items.push(state);
        if self.items.len() > Checkpoints::MAX {
            self.items.remove(0);
        }
    }

    /// The longest checkpoint at a position in `1..=limit`.
    pub fn best(&self, limit: usize) -> Option<&SavedState> {
        self.items
            .iter()
            .rev()
            .find(|c| c.next_pos > 0 && c.next_pos as usize <= limit)
    }

    /// Forgets the checkpoints past position `len` (the sequence's tokens from `len` on
    /// changed).
    pub fn truncate(&mut self, len: usize) {
        self.items.retain(|c| c.next_pos as usize <= len);
    }

    /// Forgets every checkpoint.
    pub fn clear(&mut self) {
        self.items.clear();
    }

    /// Checkpoints held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// The required integer key `<arch>.ssm.{name}` of `f` (the recurrent layers' sizes).
pub fn ssm_key(f: &GgufFile, hp: &HParams, name: &str) -> Result<usize> {
    let key = format!("{}.ssm.{name}", hp.arch);
    get_usize(f, &key)?.ok_or(LlamaError::MissingKey(key))
}

/// Model layer `il`'s index among the recurrent layers of `rs` and what it keeps, or an
/// error when the cache keeps no state for it.
pub fn layer_state(rs: Option<&RecurrentCache>, il: usize) -> Result<(usize, RecurrentLayer)> {
    rs.and_then(|rs| rs.layer(il)).ok_or_else(|| {
        LlamaError::InvalidArgument(format!(
            "layer {il} is recurrent but the cache keeps no state for it (HParams::recurrent)"
        ))
    })
}

/// The input of a recurrent layer's causal convolution and the convolution's next carried
/// inputs: `x` (`[channels, n_t, n_s]`, this step's inputs of each sequence, any strides)
/// after the `d_conv − 1` inputs each sequence carries (its conv values, read with
/// [`crate::step::read_conv_state`] as `state`, `[(d_conv − 1)·channels, n_s]` or wider,
/// rows dense). Returns `[d_conv − 1 + n_t, channels, n_s]` (what `ssm_conv` takes) and the
/// last `d_conv − 1` columns of it as rows `[(d_conv − 1)·channels, n_s]` (what the state
/// keeps next, for [`crate::step::write_conv_state`]).
pub fn conv_input(
    ctx: &mut Context,
    state: Tensor,
    x: Tensor,
    d_conv: usize,
) -> Result<(Tensor, Tensor)> {
    let [channels, n_t, n_s, _] = ctx.meta(x)?.ne;
    let row = ctx.meta(state)?.nb[1];
    let carried = ctx.view_3d(state, d_conv - 1, channels, n_s, 4 * (d_conv - 1), row, 0)?;
    let x_t = ctx.transpose(x)?; // [n_t, channels, n_s]
    let conv_x = ctx.concat(carried, x_t, 0)?;
    let nb = ctx.meta(conv_x)?.nb;
    let last = ctx.view_3d(conv_x, d_conv - 1, channels, n_s, nb[1], nb[2], 4 * n_t)?;
    let last = ctx.cont(last)?;
    let next = ctx.reshape_2d(last, (d_conv - 1) * channels, n_s)?;
    Ok((conv_x, next))
}
