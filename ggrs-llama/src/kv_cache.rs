//! The KV cache: per-layer key and value tensors, and which cell holds which
//! (sequence, position).
//!
//! Keys and values of layer l are `[n_embd_kv, size]` tensors: one row per cell, as
//! flash attention reads them (llama.cpp's layout with flash attention on). A step writes
//! its keys and values with `set_rows` (row `cell[t]` for token t).

use ggrs_core::{Context, Tensor};

use crate::batch::{Batch, SeqId};
use crate::error::{LlamaError, Result};
use crate::hparams::{HParams, LayerCache};
use crate::kv_types::KvTypes;
use crate::recurrent_cache::RecurrentCache;

/// Attention reads the cache in multiples of this many cells (llama.cpp's padding).
const KV_PAD: usize = 256;

/// One slot of the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cell {
    /// Position of the token held, or `None` when free.
    pub pos: Option<i32>,
    /// Bit s set: the cell belongs to sequence s.
    pub seqs: u64,
}

impl Cell {
    fn has(&self, s: SeqId) -> bool {
        self.seqs & (1u64 << s) != 0
    }
}

/// Per-layer cache tensors and cell bookkeeping.
#[derive(Debug)]
pub struct KvCache {
    /// Key tensors, `[width, size]` per layer (`width` from [`HParams::kv_layers`]; a layer
    /// that shares another's cache holds that layer's tensor).
    pub k: Vec<Tensor>,
    /// Value tensors, as the keys.
    pub v: Vec<Tensor>,
    /// Cells.
    pub cells: Vec<Cell>,
    /// Element types of keys and values.
    pub types: KvTypes,
    /// Regions: 1, one cache all sequences share; n, sequence s owns cells
    /// `s·size/n .. (s+1)·size/n`, which it fills as a lone cache of `size/n` cells would
    /// ([`KvCache::set_streams`]).
    streams: usize,
    /// The cells of the sliding-window layers when they keep only their window
    /// ([`KvCache::with_window_cells`]); `None`: every layer uses [`KvCache::cells`].
    window: Option<WindowCells>,
    /// The layers whose tensors hold window cells.
    window_layers: Vec<usize>,
    /// The recurrent layers' states, for a model that has such layers
    /// ([`KvCache::add_recurrent`]).
    pub recurrent: Option<RecurrentCache>,
    /// Per cell, how far its position moved since its key was rotated
    /// ([`KvCache::shift_positions`]); empty when no cell moved.
    shifts: Vec<i32>,
}

/// The cells of the sliding-window layers of a trimmed cache (llama.cpp's SWA cache): a
/// small cache of their own, whose cells are freed once no query can see them again.
#[derive(Debug, Clone)]
struct WindowCells {
    /// Positions a query sees, its own included.
    window: u32,
    /// The cells.
    cells: Vec<Cell>,
    /// Per region: the cell (from the region's start) the next token takes.
    heads: Vec<usize>,
    /// Cells attention read in the last placement.
    n_kv: usize,
}

/// Where a step's tokens go in the sliding-window layers' own cells.
#[derive(Debug, Clone)]
pub struct WindowPlacement {
    /// Cell of each token.
    pub cells: Vec<usize>,
    /// Cells attention reads: `0..n_kv`.
    pub n_kv: usize,
    /// With regions: as [`Placement::spans`], over the window cells.
    pub spans: Vec<SeqSpan>,
    /// Cells whose keys and values move (`(from, to)`, in order, `to < from`) before the
    /// step: the session copies those rows of every sliding-window layer
    /// ([`KvCache::window_layers`]).
    pub moves: Vec<(usize, usize)>,
}

/// Where a step's tokens go and what they may see.
#[derive(Debug, Clone)]
pub struct Placement {
    /// Cell of each token.
    pub cells: Vec<usize>,
    /// Cells attention reads: `0..n_kv` (see [`KvCache::place`] for the padding).
    pub n_kv: usize,
    /// With regions ([`KvCache::set_streams`]): each sequence's run of tokens and the cells
    /// of its region it attends over; empty for one shared cache.
    pub spans: Vec<SeqSpan>,
    /// The tokens' cells in the sliding-window layers' own cells, when the cache is trimmed
    /// ([`KvCache::with_window_cells`]).
    pub window: Option<WindowPlacement>,
}

/// The cells attention reads for `used` cells in use out of `size`, as llama.cpp pads them:
/// a multiple of 256, at least 256, at most `size`.
fn padded_kv(used: usize, size: usize) -> usize {
    size.min(KV_PAD.max(used.div_ceil(KV_PAD) * KV_PAD))
}

impl KvCache {
    /// Makes the cache tensors in `ctx` (which must have room: see [`KvCache::bytes`]), keys
    /// and values of `types` (one [`ggrs_core::DType`] for both, or a [`KvTypes`]).
    pub fn new(
        ctx: &mut Context,
        hp: &HParams,
        size: usize,
        types: impl Into<KvTypes>,
    ) -> Result<KvCache> {
        KvCache::with_window_cells(ctx, hp, size, types, None)
    }

    /// The sliding window every windowed layer of `hp` shares (see [`LayerCache::Own`]), if
    /// there are such layers and they agree.
    pub fn shared_window(hp: &HParams) -> Option<u32> {
        let mut windows = hp.kv_layers.iter().filter_map(|l| match l {
            LayerCache::Own { window, .. } => *window,
            LayerCache::Shares(_) => None,
        });
        let w = windows.next()?;
        windows.all(|x| x == w).then_some(w)
    }

    /// The cells the sliding-window layers of a session need when they keep only their
    /// window, as llama.cpp sizes its SWA cache: per region of `size / streams` cells, the
    /// window plus a step of `n_batch` tokens, rounded up to 256, at most the region. `None`
    /// when the model has no such layers or trimming would save nothing.
    pub fn window_cells(
        hp: &HParams,
        size: usize,
        streams: usize,
        n_batch: usize,
    ) -> Option<usize> {
        let w = KvCache::shared_window(hp)? as usize;
        let per = size / streams.max(1);
        let need = w
            .saturating_add(n_batch)
            .div_ceil(KV_PAD)
            .saturating_mul(KV_PAD);
        (need < per).then(|| need * streams.max(1))
    }

    /// [`KvCache::new`], with the sliding-window layers keeping `window_cells` cells of their
    /// own (from [`KvCache::window_cells`]) instead of `size`: their keys and values grow
    /// with the window, not the context. `None`: every layer keeps `size` cells.
    pub fn with_window_cells(
        ctx: &mut Context,
        hp: &HParams,
        size: usize,
        types: impl Into<KvTypes>,
        window_cells: Option<usize>,
    ) -> Result<KvCache> {
        let types: KvTypes = types.into();
        let trimmed = match (window_cells, KvCache::shared_window(hp)) {
            (Some(n), Some(w)) if n > 0 => Some((n, w)),
            (Some(_), _) => {
                return Err(LlamaError::InvalidArgument(
                    "the model has no sliding-window layers sharing one window to trim".into(),
                ))
            }
            (None, _) => None,
        };
        types.check()?;
        let mut k: Vec<Tensor> = Vec::with_capacity(hp.n_layer);
        let mut v: Vec<Tensor> = Vec::with_capacity(hp.n_layer);
        for (l, layer) in hp.kv_layers.iter().enumerate() {
            let (e, rows) = match *layer {
                LayerCache::Own {
                    width,
                    window: Some(_),
                } => (width, trimmed.map_or(size, |t| t.0)),
                LayerCache::Own { width, .. } => (width, size),
                LayerCache::Shares(src) => match (k.get(src), v.get(src)) {
                    // A shared layer's handles are its source's tensors.
                    (Some(&kt), Some(&vt)) => {
                        k.push(kt);
                        v.push(vt);
                        continue;
                    }
                    _ => {
                        return Err(LlamaError::InvalidArgument(format!(
                            "layer {l} shares the KV cache of layer {src}, which is not an \
                             earlier layer"
                        )))
                    }
                },
            };
            for t in [types.k, types.v] {
                if !e.is_multiple_of(t.block_size()) {
                    return Err(LlamaError::InvalidArgument(format!(
                        "KV cache type {t} needs rows of a multiple of {} values; layer {l} \
                         has {e}",
                        t.block_size()
                    )));
                }
            }
            let kt = ctx.new_tensor_2d(types.k, e, rows)?;
            ctx.set_name(kt, format!("cache_k_l{l}"))?;
            let vt = ctx.new_tensor_2d(types.v, e, rows)?;
            ctx.set_name(vt, format!("cache_v_l{l}"))?;
            if !ctx.is_no_alloc() {
                // Free cells are masked out, but their bytes still meet the value matrix
                // (0 · NaN would poison a sum): start from zeros.
                ctx.data_mut(kt)?.fill(0);
                ctx.data_mut(vt)?.fill(0);
            }
            k.push(kt);
            v.push(vt);
        }
        Ok(KvCache {
            k,
            v,
            cells: vec![Cell::default(); size],
            types,
            streams: 1,
            window_layers: match trimmed {
                Some(_) => hp
                    .kv_layers
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| {
                        matches!(
                            l,
                            LayerCache::Own {
                                window: Some(_),
                                ..
                            }
                        )
                    })
                    .map(|(il, _)| il)
                    .collect(),
                None => Vec::new(),
            },
            recurrent: None,
            shifts: Vec::new(),
            window: trimmed.map(|(n, window)| WindowCells {
                window,
                cells: vec![Cell::default(); n],
                heads: vec![0],
                n_kv: 0,
            }),
        })
    }

    /// Adds the states of `hp`'s recurrent layers (if any) for sequences `0..n_slots`,
    /// made in `ctx` (see [`crate::recurrent_cache`]).
    pub fn add_recurrent(&mut self, ctx: &mut Context, hp: &HParams, n_slots: usize) -> Result<()> {
        self.recurrent = RecurrentCache::new(ctx, hp, n_slots)?;
        Ok(())
    }

    /// The layers whose keys and values live in the window cells (each sliding-window layer
    /// with a cache of its own), when the cache keeps them apart.
    pub fn window_layers(&self) -> &[usize] {
        &self.window_layers
    }

    /// Cells of the sliding-window layers when they keep only their window
    /// ([`KvCache::with_window_cells`]).
    pub fn window_size(&self) -> Option<usize> {
        self.window.as_ref().map(|w| w.cells.len())
    }

    /// Splits the cache into `n` equal regions, one per sequence id `0..n` (llama.cpp's
    /// per-sequence streams, `kv_unified = false`): sequence s's tokens then take cells of
    /// `s·size/n .. (s+1)·size/n` as a lone cache of `size/n` cells would place them (the
    /// first run of free cells; position p in cell `s·size/n + p` until a context shift
    /// moves positions), and each sequence attends over its own region only, as that lone
    /// cache would. 1: one shared cache. Frees every cell.
    pub fn set_streams(&mut self, n: usize) -> Result<()> {
        let window_ok = self
            .window
            .as_ref()
            .is_none_or(|w| w.cells.len().is_multiple_of(n.max(1)));
        if n == 0 || n > crate::batch::MAX_SEQ || !self.size().is_multiple_of(n) || !window_ok {
            return Err(LlamaError::InvalidArgument(format!(
                "cannot split a cache of {} cells into {n} equal regions (1 to {})",
                self.size(),
                crate::batch::MAX_SEQ
            )));
        }
        self.streams = n;
        self.clear();
        Ok(())
    }

    /// Regions (see [`KvCache::set_streams`]).
    pub fn streams(&self) -> usize {
        self.streams
    }

    /// Cells of each region.
    pub fn stream_size(&self) -> usize {
        self.size() / self.streams
    }

    /// Arena bytes the cache takes (data and metadata).
    pub fn bytes(hp: &HParams, size: usize, types: impl Into<KvTypes>) -> usize {
        KvCache::bytes_with_window_cells(hp, size, types, None)
    }

    /// [`KvCache::bytes`] of a cache whose sliding-window layers keep `window_cells` cells
    /// ([`KvCache::with_window_cells`]).
    pub fn bytes_with_window_cells(
        hp: &HParams,
        size: usize,
        types: impl Into<KvTypes>,
        window_cells: Option<usize>,
    ) -> usize {
        let types: KvTypes = types.into();
        hp.kv_layers
            .iter()
            .map(|l| match *l {
                LayerCache::Own { width, window } => {
                    let rows = match window {
                        Some(_) => window_cells.unwrap_or(size),
                        None => size,
                    };
                    Context::mem_size_for(1, types.k.row_size(width) * rows)
                        + Context::mem_size_for(1, types.v.row_size(width) * rows)
                }
                LayerCache::Shares(_) => 0,
            })
            .sum()
    }

    /// Number of cells.
    pub fn size(&self) -> usize {
        self.cells.len()
    }

    /// Cells in use.
    pub fn used(&self) -> usize {
        self.cells.iter().filter(|c| c.pos.is_some()).count()
    }

    /// Frees every cell.
    pub fn clear(&mut self) {
        self.cells.fill(Cell::default());
        self.shifts.clear();
        if let Some(rs) = &mut self.recurrent {
            rs.clear();
        }
        if let Some(w) = &mut self.window {
            w.cells.fill(Cell::default());
            w.heads = vec![0; self.streams];
        }
    }

    /// Frees the cells of `seq` at positions `from..` (all with `from` = 0).
    pub fn remove(&mut self, seq: SeqId, from: i32) {
        remove_from(&mut self.cells, seq, from);
        if let Some(rs) = &mut self.recurrent {
            rs.remove(seq, from);
        }
        let streams = self.streams;
        if let Some(w) = &mut self.window {
            remove_from(&mut w.cells, seq, from);
            // Each region's head goes back to just after its last cell in use.
            let per = w.cells.len() / streams;
            for (r, head) in w.heads.iter_mut().enumerate() {
                let region = &w.cells[r * per..(r + 1) * per];
                *head = region
                    .iter()
                    .rposition(|c| c.pos.is_some())
                    .map_or(0, |i| i + 1);
            }
        }
    }

    /// Frees the cells of `seq` at positions `p0..p1` (llama.cpp's `llama_memory_seq_rm`
    /// with an end), in a cache without window cells or recurrent layers (callers check:
    /// [`KvCache::shift_positions`]).
    pub fn remove_range(&mut self, seq: SeqId, p0: i32, p1: i32) {
        remove_between(&mut self.cells, seq, p0, p1);
    }

    /// How many of the first `len` positions of `seq` a following step can build on: `len`,
    /// unless the sliding-window layers have already dropped keys that a token at position
    /// `len` would see (they keep only the window of the furthest position evaluated), then
    /// 0. Callers that keep a cached prefix (the prompt cache, the engine) ask this first.
    pub fn reusable_prefix(&self, seq: SeqId, len: usize) -> usize {
        // A recurrent state stands at one position: a prefix is reusable only when it is
        // the whole of what the state holds.
        if self
            .recurrent
            .as_ref()
            .is_some_and(|rs| rs.reusable_prefix(seq, len) != len)
        {
            return 0;
        }
        let Some(w) = &self.window else {
            return len;
        };
        let first = (len as i64 - w.window as i64 + 1).max(0);
        let held: Vec<i64> = w
            .cells
            .iter()
            .filter(|c| c.has(seq))
            .filter_map(|c| c.pos.map(i64::from))
            .filter(|&p| p >= first && p < len as i64)
            .collect();
        match held.len() as i64 == len as i64 - first {
            true => len,
            false => 0,
        }
    }

    /// Adds `delta` to the positions `p0..p1` of `seq` (llama.cpp's `llama_memory_seq_add`);
    /// a cell whose position would fall below 0 is freed. The keys of the moved cells must
    /// then be rotated by their deltas ([`KvCache::pending_shift`], which
    /// [`crate::Session`] applies before its next step). In a cache with regions
    /// ([`KvCache::set_streams`]) only `seq`'s region changes. Refused (nothing changes) for
    /// a cache whose sliding-window layers keep cells of their own, or with recurrent layers
    /// (a state cannot move).
    pub fn shift_positions(&mut self, seq: SeqId, p0: i32, p1: i32, delta: i32) -> Result<()> {
        let refuse = |why: &str| Err(LlamaError::InvalidArgument(why.to_string()));
        if self.window.is_some() {
            return refuse(
                "positions cannot move in a trimmed sliding-window cache \
                 (create the session with swa_full / --swa-full)",
            );
        }
        if self.recurrent.is_some() {
            return refuse("positions cannot move in a model with recurrent layers");
        }
        if delta == 0 || p0 >= p1 {
            return Ok(());
        }
        let size = self.cells.len();
        for (i, c) in self.cells.iter_mut().enumerate() {
            let Some(p) = c.pos.filter(|&p| p >= p0 && p < p1 && c.has(seq)) else {
                continue;
            };
            if self.shifts.is_empty() {
                self.shifts = vec![0; size];
            }
            self.shifts[i] += delta;
            let moved = p + delta;
            match moved < 0 {
                // As llama.cpp: a cell pushed before position 0 is freed.
                true => *c = Cell::default(),
                false => c.pos = Some(moved),
            }
        }
        Ok(())
    }

    /// Each cell's position delta its key has not been rotated by yet (0 for free cells),
    /// or `None` when no key awaits rotation.
    pub fn pending_shift(&self) -> Option<Vec<i32>> {
        if self.shifts.is_empty() {
            return None;
        }
        Some(
            self.cells
                .iter()
                .zip(&self.shifts)
                .map(|(c, &d)| if c.pos.is_some() { d } else { 0 })
                .collect(),
        )
    }

    /// The keys were rotated by [`KvCache::pending_shift`]'s deltas.
    pub fn shift_applied(&mut self) {
        self.shifts.clear();
    }

    /// Highest position held for `seq`, if any.
    pub fn max_pos(&self, seq: SeqId) -> Option<i32> {
        self.cells
            .iter()
            .filter(|c| c.has(seq))
            .filter_map(|c| c.pos)
            .max()
    }

    /// Finds a cell for every token of `batch` (a run of free cells, as llama.cpp does),
    /// marks them used and returns the placement. Fails when the cache is full.
    pub fn place(&mut self, batch: &Batch) -> Result<Placement> {
        let mut placed = match self.streams > 1 {
            true => self.place_in_regions(batch, false)?,
            false => self.place_shared(batch)?,
        };
        if self.window.is_some() {
            match self.place_window(batch) {
                Ok(w) => placed.window = Some(w),
                Err(e) => {
                    for &c in &placed.cells {
                        self.cells[c] = Cell::default();
                    }
                    return Err(e);
                }
            }
        }
        Ok(placed)
    }

    /// As [`KvCache::place`], for a step whose every token must compute as a step of that
    /// token alone would (speculative verification, [`crate::Session::decode_exact`]): the
    /// tokens take the cells one-token steps in batch order would take (one shared cache:
    /// the first free cells in order), and each token gets a span of its own
    /// ([`Placement::spans`], at most [`crate::batch::MAX_SEQ`] tokens) reading the cells
    /// such a step would read: as many as the cache's extent (last cell in use + 1, in its
    /// region) after that token and the ones before it, padded as [`KvCache::place`] pads.
    /// A cache whose sliding-window layers keep cells of their own
    /// ([`KvCache::with_window_cells`]) cannot place so (an error).
    pub fn place_exact(&mut self, batch: &Batch) -> Result<Placement> {
        if self.window.is_some() {
            return Err(LlamaError::InvalidArgument(
                "a step of exact columns cannot use a trimmed sliding-window cache \
                 (create the session with swa_full)"
                    .into(),
            ));
        }
        if batch.len() > crate::batch::MAX_SEQ {
            return Err(LlamaError::InvalidArgument(format!(
                "a step of exact columns holds at most {} tokens",
                crate::batch::MAX_SEQ
            )));
        }
        let per = self.stream_size();
        // Each region's extent before the step.
        let extent = |cells: &[Cell]| {
            cells
                .iter()
                .rposition(|c| c.pos.is_some())
                .map_or(0, |i| i + 1)
        };
        let mut extents: Vec<usize> = (0..self.streams)
            .map(|r| extent(&self.cells[r * per..(r + 1) * per]))
            .collect();
        let mut placed = if self.streams > 1 {
            self.place_in_regions(batch, true)?
        } else {
            let n = batch.len();
            let free = free_in(&self.cells, n);
            if free.len() < n {
                return Err(LlamaError::ContextFull {
                    n_tokens: n,
                    n_past: self.used(),
                    n_ctx: self.size(),
                });
            }
            for (t, &c) in free.iter().enumerate() {
                self.cells[c] = Cell {
                    pos: Some(batch.pos[t]),
                    seqs: 1u64 << batch.seq[t],
                };
            }
            Placement {
                cells: free,
                n_kv: 0,
                spans: Vec::new(),
                window: None,
            }
        };
        placed.spans = placed
            .cells
            .iter()
            .enumerate()
            .map(|(t, &c)| {
                let r = c / per;
                extents[r] = extents[r].max(c - r * per + 1);
                SeqSpan {
                    first_token: t as u32,
                    n_tokens: 1,
                    first_cell: (r * per) as u32,
                    n_kv: padded_kv(extents[r], per) as u32,
                }
            })
            .collect();
        placed.n_kv = placed
            .spans
            .iter()
            .map(|s| s.n_kv as usize)
            .max()
            .unwrap_or(KV_PAD.min(per));
        Ok(placed)
    }

    /// Frees the cells of `placed` (a step that failed).
    pub fn unplace(&mut self, placed: &Placement) {
        for &c in &placed.cells {
            self.cells[c] = Cell::default();
        }
        if let (Some(w), Some(p)) = (&mut self.window, &placed.window) {
            for &c in &p.cells {
                w.cells[c] = Cell::default();
            }
        }
    }

    /// The window cells of `batch`'s tokens: first the cells no token of their sequences can
    /// see any more are freed (positions before the earliest new token's window), then each
    /// token takes a free cell, searching from where the last step stopped (one shared
    /// cache) or at position mod region size (regions).
    fn place_window(&mut self, batch: &Batch) -> Result<WindowPlacement> {
        let streams = self.streams;
        let w = self.window.as_mut().expect("called with window cells");
        let mut first: Vec<(SeqId, i64)> = Vec::new();
        for t in 0..batch.len() {
            let (s, p) = (batch.seq[t], batch.pos[t] as i64);
            match first.iter_mut().find(|f| f.0 == s) {
                Some(f) => f.1 = f.1.min(p),
                None => first.push((s, p)),
            }
        }
        for &(s, p_min) in &first {
            let oldest_seen = p_min - w.window as i64 + 1;
            for c in w.cells.iter_mut() {
                if c.has(s) && c.pos.is_some_and(|cp| (cp as i64) < oldest_seen) {
                    c.seqs &= !(1u64 << s);
                    if c.seqs == 0 {
                        c.pos = None;
                    }
                }
            }
        }
        let size = w.cells.len();
        let per = size / streams;
        let full = |s: SeqId| {
            LlamaError::InvalidArgument(format!(
                "the sliding-window layers' cache ({size} cells) cannot hold this step's tokens \
                 of sequence {s} with their window; use a smaller batch or keep every cell \
                 (swa_full / --swa-full)"
            ))
        };
        // Each region (the whole cache without regions) fills from its head on; when the
        // step's tokens do not fit before its end, the cells still in use move to its start
        // (their keys and values with them: `moves`), so that cells stay in position order
        // and attention sums the window's keys in the order a full cache would.
        let region = |s: SeqId| match streams > 1 {
            true => s as usize,
            false => 0,
        };
        let mut moves = Vec::new();
        let mut want = vec![0usize; streams];
        for t in 0..batch.len() {
            let r = region(batch.seq[t]);
            if r >= streams {
                return Err(LlamaError::InvalidArgument(format!(
                    "sequence id {} has no region (the cache has {streams} regions)",
                    batch.seq[t]
                )));
            }
            want[r] += 1;
        }
        for (r, &n) in want.iter().enumerate() {
            if n == 0 || w.heads[r] + n <= per {
                continue;
            }
            let base = r * per;
            // Refused before anything moves, so that the cells keep matching the tensors.
            let live = w.cells[base..base + per]
                .iter()
                .filter(|c| c.pos.is_some())
                .count();
            if live + n > per {
                let s = batch.seq[(0..batch.len())
                    .find(|&t| region(batch.seq[t]) == r)
                    .unwrap_or(0)];
                return Err(full(s));
            }
            let mut to = base;
            for from in base..base + per {
                if w.cells[from].pos.is_some() {
                    if from != to {
                        w.cells[to] = w.cells[from];
                        w.cells[from] = Cell::default();
                        moves.push((from, to));
                    }
                    to += 1;
                }
            }
            w.heads[r] = to - base;
        }
        let mut cells = Vec::with_capacity(batch.len());
        for t in 0..batch.len() {
            let r = region(batch.seq[t]);
            if w.heads[r] >= per {
                return Err(full(batch.seq[t]));
            }
            cells.push(r * per + w.heads[r]);
            w.heads[r] += 1;
        }
        let mut spans: Vec<SeqSpan> = Vec::new();
        if streams > 1 {
            for t in 0..batch.len() {
                let s = batch.seq[t];
                match spans.last_mut() {
                    Some(sp) if batch.seq[sp.first_token as usize] == s => sp.n_tokens += 1,
                    _ => spans.push(SeqSpan {
                        first_token: t as u32,
                        n_tokens: 1,
                        first_cell: (s as usize * per) as u32,
                        n_kv: 0,
                    }),
                }
            }
        }
        for (t, &c) in cells.iter().enumerate() {
            w.cells[c] = Cell {
                pos: Some(batch.pos[t]),
                seqs: 1u64 << batch.seq[t],
            };
        }
        let used_in = |cells: &[Cell]| {
            cells
                .iter()
                .rposition(|c| c.pos.is_some())
                .map_or(0, |i| i + 1)
        };
        let n_kv = if spans.is_empty() {
            padded_kv(used_in(&w.cells), size)
        } else {
            let per = size / streams;
            for sp in &mut spans {
                let base = sp.first_cell as usize;
                sp.n_kv = padded_kv(used_in(&w.cells[base..base + per]), per) as u32;
            }
            spans
                .iter()
                .map(|s| s.n_kv as usize)
                .max()
                .unwrap_or(KV_PAD)
        };
        w.n_kv = n_kv;
        Ok(WindowPlacement {
            cells,
            n_kv,
            spans,
            moves,
        })
    }

    /// The sliding-window mask of a placed batch (`[n_kv, n_tokens]`, see
    /// [`KvCache::mask_window`] with `window`): over cells `0..n_kv` of the cache, or, when
    /// the sliding-window layers keep cells of their own ([`KvCache::with_window_cells`]),
    /// over theirs as the last placement gave them (their own `n_kv`).
    pub fn window_mask(&self, batch: &Batch, n_kv: usize, window: u32) -> Vec<f32> {
        match &self.window {
            None => self.mask_window(batch, n_kv, Some(window)),
            Some(w) => {
                let per = w.cells.len() / self.streams;
                let row = |s: SeqId| match self.streams > 1 {
                    true => {
                        let base = (s as usize).min(self.streams - 1) * per;
                        &w.cells[base..base + w.n_kv.min(per)]
                    }
                    false => &w.cells[..w.n_kv],
                };
                mask_rows(batch, w.n_kv, Some(w.window.min(window)), row)
            }
        }
    }

    fn place_shared(&mut self, batch: &Batch) -> Result<Placement> {
        let n = batch.len();
        let size = self.size();
        let used = self.used();
        if n > size - used {
            return Err(LlamaError::ContextFull {
                n_tokens: n,
                n_past: used,
                n_ctx: size,
            });
        }
        // First run of n free cells; else any free cells in order.
        let cells: Vec<usize> = match first_free_run(&self.cells, n) {
            Some(s) => (s..s + n).collect(),
            None => free_in(&self.cells, n),
        };
        for (t, &c) in cells.iter().enumerate() {
            self.cells[c] = Cell {
                pos: Some(batch.pos[t]),
                seqs: 1u64 << batch.seq[t],
            };
        }
        let used = self
            .cells
            .iter()
            .rposition(|c| c.pos.is_some())
            .map_or(0, |i| i + 1);
        // As llama.cpp: attend to a padded number of cells, a multiple of 256 and at least 256
        // (at most the cache size). The extra cells are masked and change no sum, but
        // flash attention's split-key decode path divides this count among its parts.
        let n_kv = padded_kv(used, size);
        Ok(Placement {
            cells,
            n_kv,
            spans: Vec::new(),
            window: None,
        })
    }

    /// [`KvCache::place`] with regions: each sequence's run of tokens (a sequence's tokens
    /// must be next to each other in the batch) takes cells of its region as
    /// [`KvCache::place`] takes them in a lone cache of the region's size (`exact`: the
    /// first free cells in order, as one-token steps would take them), then one span per
    /// run.
    fn place_in_regions(&mut self, batch: &Batch, exact: bool) -> Result<Placement> {
        let per = self.stream_size();
        let mut spans: Vec<SeqSpan> = Vec::new();
        for t in 0..batch.len() {
            let s = batch.seq[t];
            if s as usize >= self.streams {
                return Err(LlamaError::InvalidArgument(format!(
                    "sequence id {s} has no region (the cache has {} regions)",
                    self.streams
                )));
            }
            match spans.last_mut() {
                Some(sp) if batch.seq[sp.first_token as usize] == s => sp.n_tokens += 1,
                _ => {
                    if spans
                        .iter()
                        .any(|sp| batch.seq[sp.first_token as usize] == s)
                    {
                        return Err(LlamaError::InvalidArgument(format!(
                            "the tokens of sequence {s} are not next to each other in the batch"
                        )));
                    }
                    spans.push(SeqSpan {
                        first_token: t as u32,
                        n_tokens: 1,
                        first_cell: (s as usize * per) as u32,
                        n_kv: 0,
                    });
                }
            }
        }
        // Cells of every span first: nothing is marked until the whole batch fits.
        let mut cells = Vec::with_capacity(batch.len());
        for sp in &spans {
            let (base, t0, n) = (
                sp.first_cell as usize,
                sp.first_token as usize,
                sp.n_tokens as usize,
            );
            let region = &self.cells[base..base + per];
            let s = batch.seq[t0];
            let held = region.iter().filter(|c| c.pos.is_some()).count();
            if n > per - held {
                return Err(LlamaError::ContextFull {
                    n_tokens: n,
                    n_past: held,
                    n_ctx: per,
                });
            }
            let top = region
                .iter()
                .filter(|c| c.has(s))
                .filter_map(|c| c.pos)
                .max();
            for &p in &batch.pos[t0..t0 + n] {
                if top.is_some_and(|m| p <= m)
                    && region.iter().any(|c| c.has(s) && c.pos == Some(p))
                {
                    return Err(LlamaError::InvalidArgument(format!(
                        "sequence {s} already holds position {p}; remove it first"
                    )));
                }
            }
            let run = match exact {
                true => None,
                false => first_free_run(region, n),
            };
            match run {
                Some(r) => cells.extend((r..r + n).map(|c| base + c)),
                None => cells.extend(free_in(region, n).into_iter().map(|c| base + c)),
            }
        }
        for (t, &c) in cells.iter().enumerate() {
            self.cells[c] = Cell {
                pos: Some(batch.pos[t]),
                seqs: 1u64 << batch.seq[t],
            };
        }
        for sp in &mut spans {
            let base = sp.first_cell as usize;
            let used = self.cells[base..base + per]
                .iter()
                .rposition(|c| c.pos.is_some())
                .map_or(0, |i| i + 1);
            sp.n_kv = padded_kv(used, per) as u32;
        }
        let n_kv = spans
            .iter()
            .map(|s| s.n_kv as usize)
            .max()
            .unwrap_or(KV_PAD);
        Ok(Placement {
            cells,
            n_kv,
            spans,
            window: None,
        })
    }

    /// The cells column `c` of a mask row of sequence `seq` stands for, `c` in `0..n_kv`:
    /// cells `0..n_kv` of a shared cache, or of `seq`'s region ([`KvCache::set_streams`]).
    pub fn row_cells(&self, seq: SeqId, n_kv: usize) -> &[Cell] {
        if self.streams > 1 {
            let per = self.stream_size();
            let base = (seq as usize).min(self.streams - 1) * per;
            &self.cells[base..base + n_kv.min(per)]
        } else {
            &self.cells[..n_kv]
        }
    }

    /// The attention mask of a placed batch, `[n_kv, n_tokens]` row-major by token: 0 where
    /// token t may see cell c (same sequence, position ≤ its own), −∞ elsewhere. With
    /// regions, column c of token t's row is cell c of its sequence's region
    /// ([`KvCache::row_cells`]).
    pub fn mask(&self, batch: &Batch, n_kv: usize) -> Vec<f32> {
        self.mask_window(batch, n_kv, None)
    }

    /// As [`KvCache::mask`], and with a sliding window of `window` positions (llama.cpp's
    /// standard SWA): a token at position p sees its sequence's cells at positions
    /// `p − window + 1 ..= p` only. `None`: no window (the causal mask).
    pub fn mask_window(&self, batch: &Batch, n_kv: usize, window: Option<u32>) -> Vec<f32> {
        mask_rows(batch, n_kv, window, |s| self.row_cells(s, n_kv))
    }
}

/// The mask of `batch` over `n_kv` cells, `row(s)` the cells column c of a row of sequence
/// `s` stands for (see [`KvCache::mask_window`]).
fn mask_rows<'a>(
    batch: &Batch,
    n_kv: usize,
    window: Option<u32>,
    row: impl Fn(SeqId) -> &'a [Cell],
) -> Vec<f32> {
    let mut m = vec![f32::NEG_INFINITY; n_kv * batch.len()];
    for t in 0..batch.len() {
        let (s, p) = (batch.seq[t], batch.pos[t]);
        // Positions are non-negative (`Batch::validate`): p − window + 1 fits in i64.
        let first = window.map_or(i64::MIN, |w| p as i64 - w as i64 + 1);
        for (c, cell) in row(s).iter().enumerate() {
            let seen = cell.pos.is_some_and(|cp| cp <= p && cp as i64 >= first);
            if cell.has(s) && seen {
                m[t * n_kv + c] = 0.0;
            }
        }
    }
    m
}

/// The first of the first run of `n` free cells among `cells`, if there is one.
fn first_free_run(cells: &[Cell], n: usize) -> Option<usize> {
    let mut run = 0;
    for (i, c) in cells.iter().enumerate() {
        if c.pos.is_none() {
            run += 1;
            if run == n {
                return Some(i + 1 - n);
            }
        } else {
            run = 0;
        }
    }
    None
}

/// The first `n` free cells among `cells` (fewer when there are not so many), in order.
fn free_in(cells: &[Cell], n: usize) -> Vec<usize> {
    cells
        .iter()
        .enumerate()
        .filter(|(_, c)| c.pos.is_none())
        .map(|(i, _)| i)
        .take(n)
        .collect()
}

/// Frees the cells of `seq` at positions `from..` among `cells`.
fn remove_from(cells: &mut [Cell], seq: SeqId, from: i32) {
    remove_between(cells, seq, from, i32::MAX);
}

/// Frees the cells of `seq` at positions `p0..p1` among `cells`.
fn remove_between(cells: &mut [Cell], seq: SeqId, p0: i32, p1: i32) {
    for c in cells {
        if c.has(seq) && c.pos.is_some_and(|p| p >= p0 && p < p1) {
            c.seqs &= !(1u64 << seq);
            if c.seqs == 0 {
                c.pos = None;
            }
        }
    }
}

/// One sequence's share of a step whose sequences have cache regions of their own
/// ([`KvCache::set_streams`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeqSpan {
    /// Its first token in the batch (its tokens are next to each other).
    pub first_token: u32,
    /// Its tokens.
    pub n_tokens: u32,
    /// First cell of its region.
    pub first_cell: u32,
    /// Cells of its region attention reads (padded as a lone cache pads them).
    pub n_kv: u32,
}

/// The spans of a step, at most [`crate::batch::MAX_SEQ`] (a value type, so that
/// [`crate::step::StepShape`] stays `Copy` and comparable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqSpans {
    len: usize,
    items: [SeqSpan; crate::batch::MAX_SEQ],
}

impl Default for SeqSpans {
    fn default() -> Self {
        SeqSpans {
            len: 0,
            items: [SeqSpan::default(); crate::batch::MAX_SEQ],
        }
    }
}

impl SeqSpans {
    /// `spans`, or `None` when there are more than [`crate::batch::MAX_SEQ`].
    pub fn new(spans: &[SeqSpan]) -> Option<SeqSpans> {
        let mut s = SeqSpans::default();
        s.items.get_mut(..spans.len())?.copy_from_slice(spans);
        s.len = spans.len();
        Some(s)
    }

    /// The spans (empty: one shared cache, every token attends over cells `0..n_kv`).
    pub fn as_slice(&self) -> &[SeqSpan] {
        &self.items[..self.len]
    }
}
