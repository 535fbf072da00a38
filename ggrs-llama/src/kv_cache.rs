//! The KV cache: per-layer key and value tensors, and which cell holds which
//! (sequence, position).
//!
//! Keys and values of layer l are `[n_embd_kv, size]` tensors: one row per cell, as
//! flash attention reads them (llama.cpp's layout with flash attention on). A step writes
//! its keys and values with `set_rows` (row `cell[t]` for token t).

use ggrs_core::{Context, DType, Tensor};

use crate::batch::{Batch, SeqId};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;

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
    /// Key tensors, `[n_embd_kv, size]` per layer.
    pub k: Vec<Tensor>,
    /// Value tensors, `[n_embd_kv, size]` per layer.
    pub v: Vec<Tensor>,
    /// Cells.
    pub cells: Vec<Cell>,
    /// Element type of keys and values.
    pub dtype: DType,
    /// Regions: 1, one cache all sequences share; n, sequence s owns cells
    /// `s·size/n .. (s+1)·size/n` and its token at position p sits in cell `s·size/n + p`
    /// ([`KvCache::set_streams`]).
    streams: usize,
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
}

/// The cells attention reads for `used` cells in use out of `size`, as llama.cpp pads them:
/// a multiple of 256, at least 256, at most `size`.
fn padded_kv(used: usize, size: usize) -> usize {
    size.min(KV_PAD.max(used.div_ceil(KV_PAD) * KV_PAD))
}

impl KvCache {
    /// Makes the cache tensors in `ctx` (which must have room: see [`KvCache::bytes`]).
    pub fn new(ctx: &mut Context, hp: &HParams, size: usize, dtype: DType) -> Result<KvCache> {
        if !matches!(dtype, DType::F16 | DType::F32 | DType::BF16) {
            return Err(LlamaError::InvalidArgument(format!(
                "KV cache type must be f16, bf16 or f32, not {dtype}"
            )));
        }
        let e = hp.n_embd_kv();
        let mut k = Vec::with_capacity(hp.n_layer);
        let mut v = Vec::with_capacity(hp.n_layer);
        for l in 0..hp.n_layer {
            let kt = ctx.new_tensor_2d(dtype, e, size)?;
            ctx.set_name(kt, format!("cache_k_l{l}"))?;
            let vt = ctx.new_tensor_2d(dtype, e, size)?;
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
            dtype,
            streams: 1,
        })
    }

    /// Splits the cache into `n` equal regions, one per sequence id `0..n` (llama.cpp's
    /// per-sequence streams, `kv_unified = false`): sequence s's token at position p then
    /// sits in cell `s·size/n + p`, and each sequence attends over its own region only, as
    /// a lone cache of `size/n` cells would. 1: one shared cache. Frees every cell.
    pub fn set_streams(&mut self, n: usize) -> Result<()> {
        if n == 0 || n > crate::batch::MAX_SEQ || !self.size().is_multiple_of(n) {
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
    pub fn bytes(hp: &HParams, size: usize, dtype: DType) -> usize {
        let per = dtype.row_size(hp.n_embd_kv()) * size;
        2 * hp.n_layer * Context::mem_size_for(1, per)
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
    }

    /// Frees the cells of `seq` at positions `from..` (all with `from` = 0).
    pub fn remove(&mut self, seq: SeqId, from: i32) {
        for c in &mut self.cells {
            if c.has(seq) && c.pos.is_some_and(|p| p >= from) {
                c.seqs &= !(1u64 << seq);
                if c.seqs == 0 {
                    c.pos = None;
                }
            }
        }
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
        if self.streams > 1 {
            return self.place_in_regions(batch);
        }
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
        let mut start = None;
        let mut run = 0;
        for (i, c) in self.cells.iter().enumerate() {
            if c.pos.is_none() {
                run += 1;
                if run == n {
                    start = Some(i + 1 - n);
                    break;
                }
            } else {
                run = 0;
            }
        }
        let cells: Vec<usize> = match start {
            Some(s) => (s..s + n).collect(),
            None => self
                .cells
                .iter()
                .enumerate()
                .filter(|(_, c)| c.pos.is_none())
                .map(|(i, _)| i)
                .take(n)
                .collect(),
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
        })
    }

    /// [`KvCache::place`] with regions: every token at its cell, then one span per run of
    /// one sequence's tokens (a sequence's tokens must be next to each other in the batch).
    fn place_in_regions(&mut self, batch: &Batch) -> Result<Placement> {
        let per = self.stream_size();
        let mut cells = Vec::with_capacity(batch.len());
        for t in 0..batch.len() {
            let (s, p) = (batch.seq[t] as usize, batch.pos[t] as usize);
            if s >= self.streams {
                return Err(LlamaError::InvalidArgument(format!(
                    "sequence id {s} has no region (the cache has {} regions)",
                    self.streams
                )));
            }
            if p >= per {
                return Err(LlamaError::ContextFull {
                    n_tokens: 1,
                    n_past: p,
                    n_ctx: per,
                });
            }
            let c = s * per + p;
            if self.cells[c].pos.is_some() || cells.contains(&c) {
                return Err(LlamaError::InvalidArgument(format!(
                    "sequence {s} already holds position {p}; remove it first"
                )));
            }
            cells.push(c);
        }
        let mut spans: Vec<SeqSpan> = Vec::new();
        for t in 0..batch.len() {
            let s = batch.seq[t];
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
        Ok(Placement { cells, n_kv, spans })
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
        let mut m = vec![f32::NEG_INFINITY; n_kv * batch.len()];
        for t in 0..batch.len() {
            let (s, p) = (batch.seq[t], batch.pos[t]);
            // Positions are non-negative (`Batch::validate`): p − window + 1 fits in i64.
            let first = window.map_or(i64::MIN, |w| p as i64 - w as i64 + 1);
            for (c, cell) in self.row_cells(s, n_kv).iter().enumerate() {
                let seen = cell.pos.is_some_and(|cp| cp <= p && cp as i64 >= first);
                if cell.has(s) && seen {
                    m[t * n_kv + c] = 0.0;
                }
            }
        }
        m
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
