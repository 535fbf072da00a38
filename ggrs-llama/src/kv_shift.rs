//! Moving cached tokens to other positions (llama.cpp's `llama_memory_seq_add` and its
//! K-shift), and the context shift generation builds on it.
//!
//! A key in the cache was rotated for the position its token had when it was evaluated.
//! When a sequence's positions move by `d` (the context shift drops the oldest tokens after
//! a kept prefix, and the tokens after them move down), each moved key is rotated again by
//! `d`, as llama.cpp's K-shift does: the same rotary as the forward pass, applied to the
//! whole key cache of each layer with one (possibly zero) position delta per cell, in place.
//! A quantized key cache is read to f32, rotated back from its Walsh–Hadamard rotation
//! ([`crate::kv_types::KvTypes::rot_k`]), rotated by the delta, rotated forward again and
//! quantized back.
//!
//! The cache records the deltas ([`crate::kv_cache::KvCache::shift_positions`]); the session
//! applies them before its next step, with the rotary the architecture gives
//! ([`crate::architecture::ArchModel::key_shift`]); an architecture that cannot re-rotate its
//! keys refuses ([`crate::LlamaError::ContextShiftUnsupported`]).

use ggrs_core::{Context, DType, Graph, RopeParams, RopeYarn, Tensor};

use crate::error::Result;
use crate::kv_cache::KvCache;

/// The rotary of one layer's keys: what the forward pass applies to them.
#[derive(Debug, Clone, Copy)]
pub struct KeyRotary {
    /// Dimensions rotated, pairing, frequency base and scale.
    pub params: RopeParams,
    /// YaRN's blend and magnitude factor, or none.
    pub yarn: Option<RopeYarn>,
    /// Per-pair frequency factors, `[n_rot / 2]` f32, or none.
    pub freqs: Option<Tensor>,
}

impl KeyRotary {
    /// `x` (`[head_dim, n_heads, n]` f32) rotated by the positions `pos` (`[n]` i32).
    pub fn apply(&self, ctx: &mut Context, x: Tensor, pos: Tensor) -> Result<Tensor> {
        Ok(match self.yarn {
            None => ctx.rope_ext_factors(x, pos, self.freqs, self.params)?,
            Some(y) => ctx.rope_yarn(x, pos, self.freqs, self.params, y)?,
        })
    }
}

/// How an architecture's cached keys are rotated: per layer, its rotary (`None`: the layer's
/// keys carry no position, or it shares another layer's cache), and the head layout of the
/// cache rows.
#[derive(Debug, Clone)]
pub struct KeyShift {
    /// Per layer, the rotary of its keys.
    pub layers: Vec<Option<KeyRotary>>,
    /// Values of one key head.
    pub head_dim: usize,
    /// Key heads in a cache row.
    pub n_head_kv: usize,
}

/// The inputs of a K-shift graph: the cell indices `0..size` and each cell's delta.
#[derive(Debug, Clone, Copy)]
pub struct KeyShiftInputs {
    /// `[size]` i32, `0..size` (the rows read and written back).
    pub rows: Tensor,
    /// `[size]` i32, each cell's position delta.
    pub delta: Tensor,
}

/// Builds, in `ctx`, the graph that rotates every key of `kv` by its cell's delta (see the
/// [module docs](self)). The caller fills the inputs and computes the graph.
pub fn build_key_shift(
    ctx: &mut Context,
    kv: &KvCache,
    shift: &KeyShift,
) -> Result<(KeyShiftInputs, Graph)> {
    let size = kv.size();
    let rows = ctx.new_tensor_1d(DType::I32, size)?;
    ctx.set_name(rows, "kshift_rows")?;
    let delta = ctx.new_tensor_1d(DType::I32, size)?;
    ctx.set_name(delta, "kshift_delta")?;
    let (hd, nhkv) = (shift.head_dim, shift.n_head_kv);
    let rot = kv.types.rot_k(hd);
    let mut graph = Graph::new();
    for (il, layer) in shift.layers.iter().enumerate() {
        let Some(r) = layer else { continue };
        let Some(&cache) = kv.k.get(il) else { continue };
        // f32 copies of the keys (dequantized for a block type).
        let mut k = ctx.get_rows(cache, rows)?; // [hd·nhkv, size]
        if let Some(n) = rot {
            k = ctx.hadamard(k, n)?; // back from the cache's rotation (its own inverse)
        }
        let k = ctx.reshape_3d(k, hd, nhkv, size)?;
        let k = r.apply(ctx, k, delta)?;
        let mut k = ctx.reshape_2d(k, hd * nhkv, size)?;
        if let Some(n) = rot {
            k = ctx.hadamard(k, n)?;
        }
        let written = ctx.set_rows(cache, k, rows)?;
        graph.build_forward_expand(ctx, written)?;
    }
    Ok((KeyShiftInputs { rows, delta }, graph))
}

/// Cells a context shift drops: half of those after the kept prefix, as llama.cpp's
/// `llama-completion` and `llama-server` drop them (`n_discard = (n_past − n_keep) / 2`).
pub fn discarded(n_past: usize, n_keep: usize) -> usize {
    n_past.saturating_sub(n_keep) / 2
}
