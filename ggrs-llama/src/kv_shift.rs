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

/// The inputs of a K-shift graph: the cells rotated and each one's delta.
#[derive(Debug, Clone, Copy)]
pub struct KeyShiftInputs {
    /// `[n]` i32, the cells whose keys are read, rotated and written back.
    pub rows: Tensor,
    /// `[n]` i32, each of those cells' position delta.
    pub delta: Tensor,
}

/// Builds, in `ctx`, the graph that rotates the keys of `n` cells of `kv` by their deltas
/// (see the [module docs](self)). The caller fills the inputs (which cells, which deltas)
/// and computes the graph. Each key's arithmetic is its own: which other cells are rotated
/// in the same graph does not change its bits.
pub fn build_key_shift(
    ctx: &mut Context,
    kv: &KvCache,
    shift: &KeyShift,
    n: usize,
) -> Result<(KeyShiftInputs, Graph)> {
    let size = n;
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
        let mut k = ctx.get_rows(cache, rows)?; // [hd·nhkv, n]
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

/// The cells llama-server's context shift keeps for a request: its `n_keep` (negative: the
/// whole prompt of `n_prompt` tokens), plus BOS when the vocabulary adds one (`add_bos`),
/// at most `n_ctx − 4` (not capped at the prompt, unlike `llama-completion`'s rule,
/// [`crate::Session::set_context_shift`]).
pub fn kept(n_keep: i32, n_prompt: usize, add_bos: bool, n_ctx: usize) -> usize {
    let keep = usize::try_from(n_keep).unwrap_or(n_prompt) + usize::from(add_bos);
    keep.min(n_ctx.saturating_sub(4))
}

/// Cells a context shift of a sequence holding `n_past` cells drops after the `n_keep` kept
/// ones, as llama-server counts them: `n_discard`, or half of the rest when it is 0, at
/// most all of the rest but one.
pub fn discarded_by_server(n_past: usize, n_keep: usize, n_discard: usize) -> usize {
    let left = n_past.saturating_sub(n_keep);
    let n = match n_discard {
        0 => left / 2,
        n => n,
    };
    n.min(left.saturating_sub(1))
}

/// A prompt that does not fit in a context of `n_ctx` cells, cut as llama-server cut prompts
/// with the context shift on (up to late 2025; llama.cpp 0c1e570 refuses them): the first
/// `n_keep` tokens stay (at most `n_ctx − 4`, see [`kept`]), then whole blocks of
/// `(n_ctx − n_keep) / 2` tokens are dropped after them until what is left is shorter than
/// the context. A prompt shorter than `n_ctx` is returned as it is.
pub fn truncated_prompt(prompt: &[u32], n_keep: usize, n_ctx: usize) -> Vec<u32> {
    let n_keep = n_keep.min(n_ctx.saturating_sub(4));
    if prompt.len() < n_ctx || n_ctx <= n_keep + 1 {
        return prompt.to_vec();
    }
    let block = (n_ctx - n_keep) / 2;
    let erased = (prompt.len() - n_keep - block) / block;
    let mut out = prompt[..n_keep].to_vec();
    out.extend_from_slice(&prompt[n_keep + erased * block..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_servers_keep_discard_and_truncation_rules() {
        // n_keep plus BOS, not capped at the prompt; negative: the prompt; at most n_ctx − 4.
        assert_eq!(kept(4, 2, true, 256), 5);
        assert_eq!(kept(4, 2, false, 256), 4);
        assert_eq!(kept(-1, 30, true, 256), 31);
        assert_eq!(kept(1000, 30, false, 256), 252);
        // Half of the rest, or n_discard, at most all of the rest but one.
        assert_eq!(discarded_by_server(255, 5, 0), 125);
        assert_eq!(discarded_by_server(255, 5, 10), 10);
        assert_eq!(discarded_by_server(255, 5, 1000), 249);
        assert_eq!(discarded_by_server(255, 254, 0), 0);
        // 600 tokens into 256 cells keeping 10: blocks of 123; (600 − 10 − 123) / 123 = 3
        // blocks dropped, 600 − 369 = 231 tokens left.
        let p: Vec<u32> = (0..600).collect();
        let t = truncated_prompt(&p, 10, 256);
        assert_eq!(t.len(), 231);
        assert_eq!(t[..10], p[..10]);
        assert_eq!(t[10], 10 + 3 * 123);
        assert_eq!(t.last(), p.last());
        // Exactly the context: cut too (llama-server's test was `>=`); shorter: unchanged.
        assert!(truncated_prompt(&p[..256], 10, 256).len() < 256);
        assert_eq!(truncated_prompt(&p[..255], 10, 256).len(), 255);
        for n in [256, 300, 511, 512, 5000] {
            let p: Vec<u32> = (0..n).collect();
            for keep in [0, 1, 5, 200, 252, 300] {
                let t = truncated_prompt(&p, keep, 256);
                assert!(t.len() < 256, "{n} tokens, keep {keep}: {}", t.len());
            }
        }
    }
}
