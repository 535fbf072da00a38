//! `flash_attn_ext`: attention without the score matrix, with the arithmetic of ggml's CPU
//! kernel.
//!
//! llama.cpp runs attention through ggml's flash-attention kernel by default (`-fa auto`
//! resolves to on for the CPU backend). Its rounding differs from softmax followed by two
//! matrix products — above all, the one-row kernel keeps the weighted sum of values in **f16**
//! — and in a quantized model the difference does not stay small: every activation row is
//! rounded to 8 bits before the next matrix product, so a change in the last bits of an
//! attention output moves quantization codes, and the logits drift apart by tenths. Matching
//! llama.cpp therefore means doing what its kernel does, operation by operation. This module
//! follows ggml's `ggml_compute_forward_flash_attn_ext_f16` (llama.cpp commit 0c1e570) as GCC
//! compiles it for x86-64 with AVX-512 (`-march=native`, where the compiler contracts
//! `a*b + c` into an FMA and `_mm512_reduce_add_ps` adds in a fixed tree):
//!
//! **One-row kernel** (fewer than [`TILE_Q`] queries per head, e.g. every decode step):
//! for each (query, head) row, q is rounded to f16; for every key not masked with −∞,
//! `s = dot_f16(k, q)·scale + mask` (the dot product in ggml's AVX-512 order: 64 FMA lanes,
//! then a fixed reduction tree, the tail in f64); then an online softmax: a new maximum
//! rescales the f16 accumulator by `exp(M_old − M)` (`y = f16(y·ms)`), and the value row is
//! added as `y = f16(fma(v, exp(s − M), y))`; the running sum is `S = fma(S, ms, vs)`.
//! The output is `f32(y) · (1/S)`.
//!
//! **Tiled kernel** (at least [`TILE_Q`] queries): queries in tiles of 64 (of one head), keys in
//! tiles of [`TILE_KV`]; scores `Σ_d q·k` as a chain of FMAs over `d` in f32 (q not rounded),
//! scaled, masked; per key tile the row maximum updates `M` (rescaling the f32 accumulator and
//! the sum by `expf(M_old − M)`), the weights are `ggml_v_expf(s − M)` (ggml's vectorised
//! exponential, reproduced lane by lane in [`v_expf`]) summed 16 at a time in f64, and the
//! accumulator gets `fma(w, v, acc)` over the tile's keys in order. Key tiles whose mask is
//! −∞ for every query of the tile are skipped. The output is `acc · (1/S)`.
//!
//! **Split keys** (one query per head, at least [`SPLIT_MIN_KV`] keys, `kv_splits ≥ 2`):
//! ggml splits the keys into as many parts as it runs threads, runs the one-row kernel on
//! each part (keeping its maximum `M`, sum `S` and unnormalised accumulator widened to f32)
//! and merges the parts in order: `M' = max(M, Mₚ)`, `acc = fma(acc, e^(M−M'), accₚ·e^(Mₚ−M'))`,
//! `S = fma(S, e^(M−M'), Sₚ·e^(Mₚ−M'))`, then `acc · (1/S)`. The part count is the op's
//! `kv_splits` (llama.cpp's thread count), not ours; parts run as separate chunks and are
//! merged in FINALIZE.
//!
//! **Sinks** (gpt-oss): a per-head logit that joins the denominator, applied as ggml does
//! after the keys and before the normalisation (on the split-key path, to the first part
//! only): a sink above the running maximum `M` rescales the accumulator (widened to f32) and
//! the sum by `exp(M − sink)` and adds 1, otherwise `exp(sink − M)` is added to the sum
//! (`S = fma(S, ms, vs)`), see `add_sink`.
//!
//! Every output row (or part) is computed by one thread in this fixed order, so results do
//! not depend on the thread count.
//!
//! `exp` is the C library's `expf` in both (Rust's `f32::exp` calls the same function).
//! On x86-64 with AVX2, FMA and F16C the loops run vectorised through the same IEEE operations
//! (conversions round to nearest even, FMAs are exact-then-rounded), so every variant gives
//! the same bits; `GGRS_FORCE_SCALAR=1` forces the portable one.

use half::f16;

use crate::cpu::{isa, Isa};
use crate::dtype::DType;
use crate::kernels::ggml_arith::{dot_f16_vec_f32_body, reduce16, v_expf16};
#[cfg(target_arch = "x86_64")]
use crate::kernels::x86::attn as x86;
use crate::kernels::{split_range, RawTensor, Task, TaskPlan, Work};
use crate::tensor::TensorMeta;

/// Queries per tile of the tiled kernel; fewer queries than this use the one-row kernel
/// (ggml's `GGML_FA_TILE_Q`).
pub const TILE_Q: usize = 64;
/// Keys per tile of the tiled kernel (ggml's `GGML_FA_TILE_KV`).
pub const TILE_KV: usize = 64;

/// Fewest keys for which ggml splits a single query's keys across its threads.
pub const SPLIT_MIN_KV: usize = 512;

fn use_tiled(n_q: usize) -> bool {
    n_q >= TILE_Q
}

/// Whether the split-key path runs: one query per head, one outer index, enough keys.
fn use_split(q_ne: [usize; 4], n_kv: usize, kv_splits: usize) -> bool {
    kv_splits >= 2 && q_ne[1] == 1 && q_ne[3] == 1 && n_kv >= SPLIT_MIN_KV
}

/// Query heads per group of the one-row kernel: the heads that share one key head and one
/// value head (grouped-query attention), which it runs together so that each key and value
/// row is read once per group; 1 when keys and values are broadcast differently.
pub(super) fn group_size(q_ne: [usize; 4], k_ne: [usize; 4], v_ne: [usize; 4]) -> usize {
    if k_ne[2] == v_ne[2] && k_ne[3] == q_ne[3] && v_ne[3] == q_ne[3] && k_ne[2] > 0 {
        q_ne[2] / k_ne[2]
    } else {
        1
    }
}

/// Scratch (f32 slots) of the one-row kernel: q rounded to f16 (as f32), a converted key row,
/// the f16 accumulator (two per slot).
fn row_scratch(dk: usize, dv: usize) -> usize {
    2 * dk + dv.div_ceil(2) + 16
}

/// Scratch (f32 slots) of the tiled kernel.
fn tile_scratch(dk: usize, dv: usize) -> usize {
    TILE_Q * dk // q tile
        + dk * TILE_KV // key tile, transposed
        + dk // one converted key row
        + 2 * TILE_Q * TILE_KV // scores, mask
        + TILE_Q * dv // accumulators
        + TILE_KV * dv // value tile
        + 2 * TILE_Q // S, M
        + 16
}

pub(crate) fn plan(
    q: &TensorMeta,
    k: &TensorMeta,
    v: &TensorMeta,
    kv_splits: usize,
    nth: usize,
) -> TaskPlan {
    let (dk, dv, n_q) = (k.ne[0], v.ne[0], q.ne[1]);
    let heads = q.ne[2] * q.ne[3];
    let gs = group_size(q.ne, k.ne, v.ne);
    if use_split(q.ne, k.ne[1], kv_splits) {
        // One chunk per (head group, part); partial results of each head in the shared
        // buffer, merged in FINALIZE.
        return TaskPlan {
            n_chunks: heads / gs * kv_splits,
            finalize: true,
            work_shared: heads * kv_splits * (2 + dv) * std::mem::size_of::<f32>(),
            scratch_f32: (gs * row_scratch(dk, dv)).max(dv),
            ..TaskPlan::default()
        };
    }
    let (units, scratch) = if use_tiled(n_q) {
        (heads * n_q.div_ceil(TILE_Q), tile_scratch(dk, dv))
    } else {
        let slots = if use_query_groups(dk, gs) {
            QUERY_GROUP
        } else {
            gs
        };
        (heads / gs * n_q, slots * row_scratch(dk, dv))
    };
    TaskPlan {
        n_chunks: units.min(nth * 4).max(1),
        scratch_f32: scratch,
        ..TaskPlan::default()
    }
}

/// The operands of one node, with the broadcast factors.
pub(super) struct Attn<'a> {
    pub(super) q: &'a RawTensor,
    pub(super) k: &'a RawTensor,
    pub(super) v: &'a RawTensor,
    pub(super) mask: Option<&'a RawTensor>,
    /// Per-head sink logits, `[n_head]` f32.
    pub(super) sinks: Option<&'a RawTensor>,
    /// The output.
    pub(super) dst: &'a RawTensor,
    /// The op's scale, divided by `softcap` when there is one (as ggml does).
    pub(super) scale: f32,
    /// Soft-cap `c` (scores become `c·tanh(s·scale/c)`), 0 for none.
    pub(super) softcap: f32,
    /// The CPU has AVX2, FMA and F16C.
    pub(super) fast: bool,
}

impl<'a> Attn<'a> {
    /// The operands of `task` (a `flash_attn_ext` node) with its scale and soft-cap.
    pub(super) fn new(task: &'a Task, scale: f32, softcap: f32) -> Attn<'a> {
        Attn {
            q: task.s0(),
            k: task.s1(),
            v: task.src[2]
                .as_ref()
                .expect("the builder gives flash_attn_ext a value tensor"),
            mask: task.src[3].as_ref(),
            sinks: task.src[4].as_ref(),
            dst: &task.dst,
            scale: if softcap != 0.0 {
                scale / softcap
            } else {
                scale
            },
            softcap,
            fast: isa() >= Isa::Avx2,
        }
    }
}

/// A mask row: its first element, the element stride in bytes, and whether it is F16.
pub(super) type MaskRow = (*const u8, usize, bool);

/// Row addresses of one (query, head) hoisted out of the key loop.
pub(super) struct HeadRows {
    /// The first key row of the head (GQA broadcast resolved).
    pub(super) k0: *mut u8,
    /// The first value row of the head.
    pub(super) v0: *mut u8,
    /// Key row stride in bytes.
    pub(super) knb: usize,
    /// Value row stride in bytes.
    pub(super) vnb: usize,
    /// The mask row of the query, if the node has a mask.
    pub(super) mask: Option<MaskRow>,
}

/// Element `ic` of a mask row (0 without a mask).
///
/// # Safety
/// `ic < n_kv`, so the element lies in the mask row.
#[inline(always)]
pub(super) unsafe fn mask_value(mask: Option<MaskRow>, ic: usize) -> f32 {
    match mask {
        None => 0.0,
        // SAFETY: the element lies in the mask row (caller); elements are aligned.
        Some((p, nb0, f16m)) => unsafe {
            let e = p.add(ic * nb0);
            if f16m {
                h2f(*(e as *const u16))
            } else {
                *(e as *const f32)
            }
        },
    }
}

impl Attn<'_> {
    /// The row addresses of query `iq1` in head `(iq2, iq3)`.
    ///
    /// # Safety
    /// Indices in range; the builder checked the broadcast rule and the mask's shape.
    pub(super) unsafe fn head_rows(&self, iq1: usize, iq2: usize, iq3: usize) -> HeadRows {
        let (k, v, qt) = (self.k, self.v, self.q);
        let (k2, k3) = (iq2 / (qt.ne[2] / k.ne[2]), iq3 / (qt.ne[3] / k.ne[3]));
        let (v2, v3) = (iq2 / (qt.ne[2] / v.ne[2]), iq3 / (qt.ne[3] / v.ne[3]));
        // SAFETY: head indices in range (caller, broadcast rule checked by the builder).
        let (k0, v0) = unsafe { (k.row_ptr(0, k2, k3), v.row_ptr(0, v2, v3)) };
        let mask = self.mask.map(|m| {
            // SAFETY: the builder checked the mask's shape (ne[0] = n_kv, ne[1] ≥ n_q,
            // broadcast over axes 2 and 3).
            let p = unsafe { m.data.add(m.offset(0, iq1, iq2 % m.ne[2], iq3 % m.ne[3])) };
            (p as *const u8, m.nb[0], m.dtype == DType::F16)
        });
        HeadRows {
            k0,
            v0,
            knb: k.nb[1],
            vnb: v.nb[1],
            mask,
        }
    }

    fn dk(&self) -> usize {
        self.k.ne[0]
    }
    fn dv(&self) -> usize {
        self.v.ne[0]
    }
    fn n_kv(&self) -> usize {
        self.k.ne[1]
    }

    /// The sink logit of query head `h`, if the node has sinks.
    pub(super) fn sink(&self, h: usize) -> Option<f32> {
        self.sinks.map(|t| {
            // SAFETY: the builder checked the sinks: F32 with `q.ne[2]` elements, and
            // h < q.ne[2].
            unsafe { *(t.data.add(t.offset(h, 0, 0, 0)) as *const f32) }
        })
    }

    /// Key row `ic` for query head `(iq2, iq3)`.
    ///
    /// # Safety
    /// `ic < n_kv`, `iq2 < q.ne[2]`, `iq3 < q.ne[3]`; the builder checked the broadcast rule.
    unsafe fn k_row(&self, ic: usize, iq2: usize, iq3: usize) -> &[u16] {
        let (k, q) = (self.k, self.q);
        let (i2, i3) = (iq2 / (q.ne[2] / k.ne[2]), iq3 / (q.ne[3] / k.ne[3]));
        // SAFETY: indices in range (caller); F16 rows are dense and 2-byte aligned.
        unsafe { std::slice::from_raw_parts(k.row_ptr(ic, i2, i3) as *const u16, k.ne[0]) }
    }

    /// Value row `ic` for query head `(iq2, iq3)`.
    ///
    /// # Safety
    /// As [`Attn::k_row`].
    unsafe fn v_row(&self, ic: usize, iq2: usize, iq3: usize) -> &[u16] {
        let (v, q) = (self.v, self.q);
        let (i2, i3) = (iq2 / (q.ne[2] / v.ne[2]), iq3 / (q.ne[3] / v.ne[3]));
        // SAFETY: indices in range (caller); F16 rows are dense and 2-byte aligned.
        unsafe { std::slice::from_raw_parts(v.row_ptr(ic, i2, i3) as *const u16, v.ne[0]) }
    }

    /// Query row `(iq1, iq2, iq3)`.
    ///
    /// # Safety
    /// Indices in range; q is F32 with dense rows.
    pub(super) unsafe fn q_row(&self, iq1: usize, iq2: usize, iq3: usize) -> &[f32] {
        // SAFETY: forwarded; the builder checked q's type and row layout.
        unsafe { self.q.row_f32(iq1, iq2, iq3) }
    }

    /// The key, value and mask rows that query `iq1` of the heads from `h0` (batch `iq3`)
    /// reads, those heads sharing one key/value head (`group_size`), as the x86 key loops
    /// take them.
    ///
    /// # Safety
    /// Head and batch indices in range (the broadcast rule is checked by the builder); the
    /// mask, if any, has `ne[2] == 1`.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn group_key_rows(&self, iq1: usize, h0: usize, iq3: usize) -> x86::KeyRows {
        let (k, v, qt) = (self.k, self.v, self.q);
        let (k2, k3) = (h0 / (qt.ne[2] / k.ne[2]), iq3 / (qt.ne[3] / k.ne[3]));
        let (v2, v3) = (h0 / (qt.ne[2] / v.ne[2]), iq3 / (qt.ne[3] / v.ne[3]));
        // SAFETY: indices in range (caller); the mask row of query iq1 (its ne[2] is 1).
        unsafe {
            x86::KeyRows {
                k0: k.row_ptr(0, k2, k3),
                knb: k.nb[1],
                v0: v.row_ptr(0, v2, v3),
                vnb: v.nb[1],
                mask: self.mask.map(|m| {
                    let p = m.data.add(m.offset(0, iq1, 0, iq3 % m.ne[3]));
                    (p as *const u8, m.nb[0], m.dtype == DType::F16)
                }),
            }
        }
    }

    /// Output row of query `iq1`, head `iq2` (the result is `[d_v, n_head, n_q, n3]`).
    ///
    /// # Safety
    /// Indices in range; only the thread computing this (query, head) writes it.
    pub(super) unsafe fn out_row<'o>(&self, iq1: usize, iq2: usize, iq3: usize) -> &'o mut [f32] {
        // SAFETY: forwarded; dst is a dense f32 tensor made by the builder.
        unsafe { self.dst.row_f32_mut(iq2, iq1, iq3) }
    }
}

/// COMPUTE: chunk `chunk` of `n_chunks` — a range of (query, head) rows for the one-row
/// kernel, a range of query tiles for the tiled kernel.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; the builder checked the shape contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn flash_attn_ext(
    task: &Task,
    scale: f32,
    softcap: f32,
    kv_splits: usize,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) {
    let a = Attn::new(task, scale, softcap);
    let (n_q, n_head, n3) = (a.q.ne[1], a.q.ne[2], a.q.ne[3]);
    let gs = group_size(a.q.ne, a.k.ne, a.v.ne);
    let rs = row_scratch(a.dk(), a.dv());
    if use_split(a.q.ne, a.n_kv(), kv_splits) {
        let n_kv = a.n_kv();
        let per = n_kv.div_ceil(kv_splits);
        let stride = 2 + a.dv();
        for u in split_range(n_head / gs * kv_splits, n_chunks, chunk) {
            let (g, part) = (u / kv_splits, u % kv_splits);
            let keys = (part * per).min(n_kv)..((part + 1) * per).min(n_kv);
            let heads = g * gs..(g + 1) * gs;
            // SAFETY: indices in range; the scratch holds gs row scratches (plan).
            let results = unsafe { group_row_keys(&a, 0, heads.clone(), 0, keys, work.scratch) };
            for (j, (h, (max, sum))) in heads.zip(results).enumerate() {
                // SAFETY: slot h · kv_splits + part of the shared buffer (planned for
                // n_head · kv_splits slots of `stride` f32) belongs to this chunk only.
                let slot = unsafe {
                    std::slice::from_raw_parts_mut(
                        (work.shared as *mut f32).add((h * kv_splits + part) * stride),
                        stride,
                    )
                };
                let acc = row_acc(&mut work.scratch[j * rs..(j + 1) * rs], a.dk(), a.dv());
                f16_to_f32(acc, &mut slot[2..], a.fast);
                // As ggml: the sink joins the first part only.
                let (max, sum) = match a.sink(h) {
                    Some(s) if part == 0 => add_sink(s, max, sum, &mut slot[2..]),
                    _ => (max, sum),
                };
                slot[0] = max;
                slot[1] = sum;
            }
        }
        return;
    }
    if use_tiled(n_q) {
        let n_tiles = n_q.div_ceil(TILE_Q);
        for u in split_range(n_tiles * n_head * n3, n_chunks, chunk) {
            let (t, iq2, iq3) = (u % n_tiles, (u / n_tiles) % n_head, u / (n_tiles * n_head));
            // SAFETY: t < n_tiles, iq2 < n_head, iq3 < n3; this chunk owns the tile's rows;
            // the fast variant only when the CPU has its features.
            unsafe {
                #[cfg(target_arch = "x86_64")]
                if a.fast {
                    tile_fast(&a, t * TILE_Q, iq2, iq3, work.scratch);
                    continue;
                }
                tile_body::<false>(&a, t * TILE_Q, iq2, iq3, work.scratch)
            };
        }
    } else {
        let n_groups = n_head / gs;
        let mut rows = split_range(n_q * n_groups * n3, n_chunks, chunk);
        #[cfg(target_arch = "x86_64")]
        if use_query_lanes_512(&a, gs) {
            // Runs of up to eight consecutive queries of one head, one f64 lane each.
            while !rows.is_empty() {
                let r = rows.start;
                let (iq1, iq2, iq3) = (r % n_q, (r / n_q) % n_head, r / (n_q * n_head));
                let live = x86::QUERY_LANES.min(n_q - iq1).min(rows.len());
                // SAFETY: indices in range; K and V are F16 with dk = dv = 32 and the CPU
                // has AVX-512 (`use_query_lanes_512`).
                unsafe { query_lanes_512(&a, iq1, live, iq2, iq3) };
                rows.start += live;
            }
        }
        if use_query_groups(a.dk(), gs) {
            // Runs of up to QUERY_GROUP consecutive queries of one head together.
            while !rows.is_empty() {
                let r = rows.start;
                // (gs = 1: one group per head.)
                let (iq1, iq2, iq3) = (r % n_q, (r / n_q) % n_groups, r / (n_q * n_groups));
                let live = QUERY_GROUP.min(n_q - iq1).min(rows.len());
                let qs: [usize; QUERY_GROUP] =
                    std::array::from_fn(|j| if j < live { iq1 + j } else { iq1 });
                // SAFETY: indices in range; the scratch holds QUERY_GROUP row scratches
                // (plan); K and V are F16 on this path.
                let results = unsafe { query_group_keys(&a, qs, live, iq2, iq3, work.scratch) };
                for (j, (max, sum)) in results.into_iter().enumerate().take(live) {
                    // SAFETY: indices in range; this chunk owns these rows.
                    let out = unsafe { a.out_row(qs[j], iq2, iq3) };
                    let acc = row_acc(&mut work.scratch[j * rs..(j + 1) * rs], a.dk(), a.dv());
                    finish_row(&a, acc, out, iq2, max, sum);
                }
                rows.start += live;
            }
        }
        for r in rows {
            let (iq1, g, iq3) = (r % n_q, (r / n_q) % n_groups, r / (n_q * n_groups));
            let heads = g * gs..(g + 1) * gs;
            // SAFETY: indices in range; the scratch holds gs row scratches (plan).
            let results =
                unsafe { group_row_keys(&a, iq1, heads.clone(), iq3, 0..a.n_kv(), work.scratch) };
            for (j, (iq2, (max, sum))) in heads.zip(results).enumerate() {
                // SAFETY: indices in range; this chunk owns the group's rows.
                let out = unsafe { a.out_row(iq1, iq2, iq3) };
                let acc = row_acc(&mut work.scratch[j * rs..(j + 1) * rs], a.dk(), a.dv());
                finish_row(&a, acc, out, iq2, max, sum);
            }
        }
    }
}

/// A one-row result into its output row: the f16 accumulator widened, the sink of head
/// `iq2` joined (if any), divided by the sum `S`.
fn finish_row(a: &Attn, acc: &[u16], out: &mut [f32], iq2: usize, max: f32, sum: f32) {
    f16_to_f32(acc, out, a.fast);
    let sum = match a.sink(iq2) {
        Some(s) => add_sink(s, max, sum, out).1,
        None => sum,
    };
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// The one-row kernel for query `iq1` of the heads `heads` (of outer index `iq3`), which
/// share their key and value heads ([`group_size`]), over keys `keys`: head `heads.start + j`
/// leaves its f16 accumulator in the `j`-th [`row_scratch`] part of `sc` ([`row_acc`]);
/// returns each head's `(M, S)`. Every head gets the arithmetic of [`one_row_keys`] in the
/// same order; on x86-64 with `dk = dv` one of `x86::HEAD_DIMS` (64, 128, 256) and one mask
/// row for all heads, up to eight heads run in lockstep over the keys, so that each key and
/// value row is loaded once for them and their dependency chains overlap (with AVX-512 and
/// `dk = 64`, sixteen keys at a time: see `x86::keys_block_512`).
///
/// # Safety
/// Indices in range, `keys` within `0..n_kv`; `sc` holds `heads.len()` row scratches.
unsafe fn group_row_keys(
    a: &Attn,
    iq1: usize,
    heads: std::ops::Range<usize>,
    iq3: usize,
    keys: std::ops::Range<usize>,
    sc: &mut [f32],
) -> Vec<(f32, f32)> {
    let (dk, dv) = (a.dk(), a.dv());
    let rs = row_scratch(dk, dv);
    #[cfg(target_arch = "x86_64")]
    if a.fast
        && a.softcap == 0.0
        && dk == dv
        && x86::HEAD_DIMS.contains(&dk)
        && a.mask.is_none_or(|m| m.ne[2] == 1)
    {
        let mut out = Vec::with_capacity(heads.len());
        let mut h = heads.start;
        while h < heads.end {
            let n = (heads.end - h).min(x86::MAX_GROUP);
            // SAFETY: forwarded; heads h..h + n are in range and their scratches lie in
            // `sc` (part j of `heads` at j · rs).
            unsafe {
                let part = &mut sc[(h - heads.start) * rs..(h - heads.start + n) * rs];
                group_keys_d(a, iq1, h..h + n, iq3, keys.clone(), part, rs, &mut out);
            }
            h += n;
        }
        return out;
    }
    heads
        .enumerate()
        .map(|(j, iq2)| {
            // SAFETY: forwarded; part j of the scratch is this head's.
            unsafe {
                one_row_keys(
                    a,
                    iq1,
                    iq2,
                    iq3,
                    keys.clone(),
                    &mut sc[j * rs..(j + 1) * rs],
                )
            }
        })
        .collect()
}

/// The f16 accumulator of the one-row kernel in its scratch.
fn row_acc(sc: &mut [f32], dk: usize, dv: usize) -> &mut [u16] {
    let rest = &mut sc[2 * dk..2 * dk + dv.div_ceil(2)];
    &mut bytemuck::cast_slice_mut(rest)[..dv]
}

/// The one-row kernel over keys `keys`: leaves the f16 accumulator (unnormalised) in the
/// scratch ([`row_acc`]) and returns the running maximum and sum `(M, S)`.
///
/// # Safety
/// Indices in range, `keys` within `0..n_kv`; `sc` holds [`row_scratch`] values.
unsafe fn one_row_keys(
    a: &Attn,
    iq1: usize,
    iq2: usize,
    iq3: usize,
    keys: std::ops::Range<usize>,
    sc: &mut [f32],
) -> (f32, f32) {
    let (dk, dv) = (a.dk(), a.dv());
    let (qh, rest) = sc.split_at_mut(dk);
    let (kr, rest) = rest.split_at_mut(dk);
    let acc: &mut [u16] = &mut bytemuck::cast_slice_mut(&mut rest[..dv.div_ceil(2)])[..dv];
    // SAFETY: indices in range (caller).
    let q = unsafe { a.q_row(iq1, iq2, iq3) };
    for (h, &x) in qh.iter_mut().zip(q) {
        *h = h2f(f2h(x));
    }
    acc.fill(0);
    // SAFETY: indices in range (caller).
    let HeadRows {
        k0,
        v0,
        knb,
        vnb,
        mask,
    } = unsafe { a.head_rows(iq1, iq2, iq3) };
    #[cfg(target_arch = "x86_64")]
    if a.fast && a.softcap == 0.0 && dk == dv && x86::HEAD_DIMS.contains(&dk) {
        macro_rules! run {
            ($($d:literal $n:literal)*) => {
                match dk {
                    $($d => {
                        let qh: &[f32; $d] = (&*qh).try_into().expect("dk was matched");
                        let acc: &mut [u16; $d] = acc.try_into().expect("dv = dk");
                        // SAFETY: `fast` means AVX2, FMA and F16C; rows `keys` of this head's
                        // keys and values (dense F16 rows of dk elements, strides knb / vnb
                        // from k0 / v0) and the mask row's elements `keys` lie in their
                        // tensors (the builder checked the shapes).
                        return unsafe {
                            x86::row_keys_d::<$d, $n>(
                                qh, acc, k0, knb, v0, vnb, mask, keys.start, keys.end, a.scale,
                            )
                        };
                    })*
                    d => unreachable!("head size {d} is not one of x86::HEAD_DIMS"),
                }
            };
        }
        run!(64 8 128 16 256 32)
    }
    let mut sum = 0f32; // S
    let mut max = f32::NEG_INFINITY; // M
    for ic in keys {
        // SAFETY: ic < n_kv.
        let mv = unsafe { mask_value(mask, ic) };
        if mv == f32::NEG_INFINITY {
            continue;
        }
        // SAFETY: ic < n_kv: rows ic of this head's keys and values lie in their tensors;
        // F16 rows are dense and 2-byte aligned.
        let (kr16, vr16) = unsafe {
            (
                std::slice::from_raw_parts(k0.add(ic * knb) as *const u16, dk),
                std::slice::from_raw_parts(v0.add(ic * vnb) as *const u16, dv),
            )
        };
        f16_to_f32(kr16, kr, a.fast);
        let mut s = dot_f16_ggml(kr, qh, a.fast);
        s *= a.scale;
        if a.softcap != 0.0 {
            s = a.softcap * s.tanh();
        }
        s += mv;
        let (ms, vs);
        if s > max {
            let old = max;
            max = s;
            ms = (old - max).exp();
            vs = 1.0;
            scale_f16(acc, ms, a.fast);
        } else {
            ms = 1.0;
            vs = (s - max).exp();
        }
        mad_f16(acc, vr16, vs, a.fast);
        sum = sum.mul_add(ms, vs);
    }
    (max, sum)
}

/// Queries of one head that [`query_group_keys`] runs in lockstep.
const QUERY_GROUP: usize = 4;

/// Whether the one-row path runs [`query_group_keys`]: heads narrower than 64 (ggml's
/// `ggml_vec_dot_f16` then adds every product in f64, one long dependency chain per
/// (query, key) that the lockstep hides) and no grouped-query sharing to exploit instead.
fn use_query_groups(dk: usize, gs: usize) -> bool {
    dk < 64 && gs == 1
}

/// The one-row kernel of [`one_row_keys`] for `G` queries `iq1` of head `(iq2, iq3)` at
/// once, over all keys: the dot products of a key with the `G` queries run side by side
/// (lane `j` of each f64 step is query `j`'s chain), then each query's softmax and value
/// update exactly as [`one_row_keys`] does them. Query `j` leaves its f16 accumulator in
/// the `j`-th [`row_scratch`] part of `sc` and gets its `(M, S)`. Bits: each query's, alone.
/// Only the first `live` queries count (a shorter run fills the rest of the group with its
/// first query, whose lanes are then skipped). Needs `dk < 64` (the dot is then only its
/// f64 tail).
///
/// # Safety
/// Indices in range; `sc` holds `G` row scratches; K and V are F16.
#[inline(always)]
unsafe fn query_group_keys_body<const G: usize>(
    a: &Attn,
    iq1: [usize; G],
    live: usize,
    iq2: usize,
    iq3: usize,
    sc: &mut [f32],
) -> [(f32, f32); G] {
    let (dk, dv) = (a.dk(), a.dv());
    assert!(dk < 64, "query_group_keys: heads narrower than 64");
    let rs = row_scratch(dk, dv);
    // The queries rounded to f16, transposed: qt[i][j] is value i of query j.
    let mut qt = [[0f32; G]; 64];
    for (j, &i1) in iq1.iter().enumerate() {
        // SAFETY: indices in range (caller).
        let q = unsafe { a.q_row(i1, iq2, iq3) };
        for (i, &x) in q[..dk].iter().enumerate() {
            qt[i][j] = h2f(f2h(x));
        }
    }
    let qt = &qt[..dk];
    // SAFETY: indices in range (caller).
    let rows: [HeadRows; G] = std::array::from_fn(|j| unsafe { a.head_rows(iq1[j], iq2, iq3) });
    let (k0, v0, knb, vnb) = (rows[0].k0, rows[0].v0, rows[0].knb, rows[0].vnb);
    let mut parts = sc.chunks_mut(rs);
    let mut accs: [&mut [u16]; G] = std::array::from_fn(|_| {
        let part = parts.next().expect("the plan gives G row scratches");
        row_acc(part, dk, dv)
    });
    for acc in accs.iter_mut() {
        acc.fill(0);
    }
    let mut kr = [0f32; 64];
    let kr = &mut kr[..dk];
    let mut max = [f32::NEG_INFINITY; G];
    let mut sum = [0f32; G];
    for ic in 0..a.n_kv() {
        let mv: [f32; G] = std::array::from_fn(|j| {
            if j < live {
                // SAFETY: ic < n_kv.
                unsafe { mask_value(rows[j].mask, ic) }
            } else {
                f32::NEG_INFINITY
            }
        });
        if mv.iter().all(|&m| m == f32::NEG_INFINITY) {
            continue;
        }
        // SAFETY: ic < n_kv: row ic of this head's keys and values lies in its tensor;
        // F16 rows are dense and 2-byte aligned (every query of the group shares them).
        let (kr16, vr16) = unsafe {
            (
                std::slice::from_raw_parts(k0.add(ic * knb) as *const u16, dk),
                std::slice::from_raw_parts(v0.add(ic * vnb) as *const u16, dv),
            )
        };
        f16_to_f32(kr16, kr, a.fast);
        // `dot_f16_vec_f32_body` below 64 values: 0, then each product added in f64.
        let mut dot = [0f64; G];
        for (q, &k) in qt.iter().zip(kr.iter()) {
            for j in 0..G {
                dot[j] += (k * q[j]) as f64;
            }
        }
        // Each live query's score and the argument of its one exponential (a new maximum:
        // `M_old − M`; else `s − M`), then the exponentials of the group at once.
        let mut arg = [0f32; G];
        let mut grew = [false; G];
        for j in 0..G {
            if mv[j] == f32::NEG_INFINITY {
                continue;
            }
            let mut s = dot[j] as f32;
            s *= a.scale;
            if a.softcap != 0.0 {
                s = a.softcap * s.tanh();
            }
            s += mv[j];
            if s > max[j] {
                arg[j] = max[j] - s;
                max[j] = s;
                grew[j] = true;
            } else {
                arg[j] = s - max[j];
            }
        }
        let e = exp_group(arg, a.fast);
        for j in 0..G {
            if mv[j] == f32::NEG_INFINITY {
                continue;
            }
            let (ms, vs) = if grew[j] {
                scale_f16(accs[j], e[j], a.fast);
                (e[j], 1.0)
            } else {
                (1.0, e[j])
            };
            mad_f16(accs[j], vr16, vs, a.fast);
            sum[j] = sum[j].mul_add(ms, vs);
        }
    }
    std::array::from_fn(|j| (max[j], sum[j]))
}

/// Whether the one-row path runs [`query_lanes_512`]: the query-group case
/// ([`use_query_groups`]) with `dk = dv = 32`, no soft-cap, on AVX-512 (the heads of
/// all-MiniLM-L6-v2, BGE-small and other small encoders).
#[cfg(target_arch = "x86_64")]
fn use_query_lanes_512(a: &Attn, gs: usize) -> bool {
    a.fast
        && isa() >= Isa::Avx512
        && use_query_groups(a.dk(), gs)
        && a.dk() == x86::D32
        && a.dv() == x86::D32
        && a.softcap == 0.0
}

/// Queries `iq1..iq1 + live` (`live ≤ 8`) of head `(iq2, iq3)` through
/// `x86::query_keys_d32_512` (each query's bits as [`one_row_keys`] alone), written to their
/// output rows.
///
/// # Safety
/// Indices in range; [`use_query_lanes_512`] holds; K and V are F16; this chunk owns the
/// rows.
#[cfg(target_arch = "x86_64")]
unsafe fn query_lanes_512(a: &Attn, iq1: usize, live: usize, iq2: usize, iq3: usize) {
    const G: usize = x86::QUERY_LANES;
    let mut q = [[0f32; x86::D32]; G];
    let mut masks = [None; G];
    for (j, (qj, mj)) in q.iter_mut().zip(masks.iter_mut()).enumerate().take(live) {
        // SAFETY: iq1 + j < n_q (live counts queries in range); indices in range (caller).
        let (row, hr) = unsafe { (a.q_row(iq1 + j, iq2, iq3), a.head_rows(iq1 + j, iq2, iq3)) };
        // Rounded to f16 (and back), eight values per conversion.
        // SAFETY: the CPU has F16C and AVX2 (`use_query_lanes_512`).
        unsafe { x86::round_to_f16(&row[..x86::D32], qj) };
        *mj = hr.mask;
    }
    // SAFETY: indices in range (caller).
    let hr = unsafe { a.head_rows(iq1, iq2, iq3) };
    let mut acc = [[0u16; x86::D32]; G];
    // SAFETY: the CPU has AVX-512 F/BW/VL, AVX2, FMA and F16C (`use_query_lanes_512`); the
    // head's key and value rows (F16, 32 values) and each query's mask row hold every key.
    let res = unsafe {
        x86::query_keys_d32_512(
            &q,
            live,
            &masks,
            (hr.k0 as *const u8, hr.knb, hr.v0 as *const u8, hr.vnb),
            a.n_kv(),
            a.scale,
            &mut acc,
        )
    };
    for (j, ((max, sum), acc)) in res.into_iter().zip(&acc).enumerate().take(live) {
        // SAFETY: indices in range; this chunk owns these rows.
        let out = unsafe { a.out_row(iq1 + j, iq2, iq3) };
        finish_row(a, acc, out, iq2, max, sum);
    }
}

/// glibc's `expf` of each value (`x86::exp::expf4`, four lanes at a time, where the CPU
/// has AVX2 and FMA: `fast`).
#[inline(always)]
fn exp_group<const G: usize>(x: [f32; G], fast: bool) -> [f32; G] {
    #[cfg(target_arch = "x86_64")]
    if fast {
        use std::arch::x86_64::{_mm_loadu_ps, _mm_storeu_ps};
        let mut y = [0f32; G];
        for (xs, ys) in x.chunks(4).zip(y.chunks_mut(4)) {
            let mut l = [0f32; 4];
            l[..xs.len()].copy_from_slice(xs);
            let mut o = [0f32; 4];
            // SAFETY: `fast` means AVX2 and FMA; four f32 readable and writable in `l`, `o`.
            unsafe {
                _mm_storeu_ps(
                    o.as_mut_ptr(),
                    crate::kernels::x86::exp::expf4(_mm_loadu_ps(l.as_ptr())),
                )
            };
            ys.copy_from_slice(&o[..ys.len()]);
        }
        return y;
    }
    let _ = fast;
    x.map(f32::exp)
}

/// [`query_group_keys_body`] for [`QUERY_GROUP`] queries, built for AVX2 + FMA + F16C
/// when the CPU has them (`a.fast`).
///
/// # Safety
/// As [`query_group_keys_body`].
unsafe fn query_group_keys(
    a: &Attn,
    iq1: [usize; QUERY_GROUP],
    live: usize,
    iq2: usize,
    iq3: usize,
    sc: &mut [f32],
) -> [(f32, f32); QUERY_GROUP] {
    #[cfg(target_arch = "x86_64")]
    if a.fast {
        // SAFETY: `fast` means AVX2, FMA and F16C; the rest forwarded.
        return unsafe { query_group_keys_fast(a, iq1, live, iq2, iq3, sc) };
    }
    // SAFETY: forwarded.
    unsafe { query_group_keys_body(a, iq1, live, iq2, iq3, sc) }
}

/// Joins the sink logit `s` to a row's softmax as ggml does after the keys (the sink has
/// no value): with the running maximum `max`, sum `sum` and unnormalised f32 accumulator
/// `acc`, a sink above the maximum rescales the accumulator and the sum by `exp(max − s)`
/// and adds 1, otherwise adds `exp(s − max)` to the sum (`S = fma(S, ms, vs)`). Returns the
/// new `(M, S)`.
pub(super) fn add_sink(s: f32, max: f32, sum: f32, acc: &mut [f32]) -> (f32, f32) {
    if s > max {
        let ms = (max - s).exp();
        for y in acc.iter_mut() {
            *y *= ms;
        }
        (s, sum.mul_add(ms, 1.0))
    } else {
        (max, sum.mul_add(1.0, (s - max).exp()))
    }
}

/// FINALIZE of the split-key path: merges each head's parts in order, as ggml's
/// `ggml_flash_attn_ext_reduce_partials` does (the compiler fuses `old·e₀ + new·e₁` into
/// `fma(old, e₀, new·e₁)`), and writes the normalised rows. Nothing to do otherwise.
///
/// # Safety
/// See [`crate::kernels::finalize`]; every chunk of the node has run.
pub(crate) unsafe fn finalize(task: &Task, kv_splits: usize, work: &mut Work) {
    let (q, k) = (task.s0(), task.s1());
    let Some(v) = task.src[2].as_ref() else {
        return;
    };
    if !use_split(q.ne, k.ne[1], kv_splits) {
        return;
    }
    let dv = v.ne[0];
    let stride = 2 + dv;
    let acc = &mut work.scratch[..dv];
    for h in 0..q.ne[2] {
        let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
        acc.fill(0.0);
        for part in 0..kv_splits {
            // SAFETY: the slot was written by its chunk (all chunks have run); nobody writes
            // the shared buffer meanwhile.
            let slot = unsafe {
                std::slice::from_raw_parts(
                    (work.shared as *const f32).add((h * kv_splits + part) * stride),
                    stride,
                )
            };
            let (m_p, s_p) = (slot[0], slot[1]);
            if s_p == 0.0 {
                continue;
            }
            let m_new = max.max(m_p);
            let (e_old, e_new) = ((max - m_new).exp(), (m_p - m_new).exp());
            for (y, &yp) in acc.iter_mut().zip(&slot[2..]) {
                *y = y.mul_add(e_old, yp * e_new);
            }
            sum = sum.mul_add(e_old, s_p * e_new);
            max = m_new;
        }
        if sum != 0.0 {
            let inv = 1.0 / sum;
            for y in acc.iter_mut() {
                *y *= inv;
            }
        }
        // SAFETY: head h < n_head of the single query; FINALIZE runs on one thread.
        let out = unsafe { task.dst.row_f32_mut(h, 0, 0) };
        out.copy_from_slice(acc);
    }
}

/// The tiled kernel for queries `q0..q0 + 64` (clipped) of head `(iq2, iq3)`. `FAST`: the
/// caller runs with AVX2 + FMA + F16C (conversions use F16C; the loops, written with plain
/// FMAs, vectorise).
///
/// # Safety
/// `q0 < n_q`, head indices in range; `sc` holds [`tile_scratch`] values; with `FAST`, the
/// CPU has the features.
#[inline(always)]
unsafe fn tile_body<const FAST: bool>(a: &Attn, q0: usize, iq2: usize, iq3: usize, sc: &mut [f32]) {
    let (dk, dv, n_kv) = (a.dk(), a.dv(), a.n_kv());
    let rows = TILE_Q.min(a.q.ne[1] - q0);
    let (qt, rest) = sc.split_at_mut(TILE_Q * dk);
    let (kt, rest) = rest.split_at_mut(dk * TILE_KV);
    let (krow, rest) = rest.split_at_mut(dk);
    let (kq, rest) = rest.split_at_mut(TILE_Q * TILE_KV);
    let (mk, rest) = rest.split_at_mut(TILE_Q * TILE_KV);
    let (acc, rest) = rest.split_at_mut(TILE_Q * dv);
    let (vt, rest) = rest.split_at_mut(TILE_KV * dv);
    let (ssum, rest) = rest.split_at_mut(TILE_Q);
    let (smax, _) = rest.split_at_mut(TILE_Q);

    for r in 0..rows {
        // SAFETY: q0 + r < n_q.
        let q = unsafe { a.q_row(q0 + r, iq2, iq3) };
        qt[r * dk..(r + 1) * dk].copy_from_slice(q);
    }
    acc[..rows * dv].fill(0.0);
    ssum.fill(0.0);
    smax.fill(f32::NEG_INFINITY);
    kt.fill(0.0);
    vt.fill(0.0);
    let mut skip = [false; TILE_Q];
    // Register-blocked score and value products (the same FMA chains) with AVX-512.
    #[cfg(target_arch = "x86_64")]
    let x86_512 = crate::cpu::isa() >= crate::cpu::Isa::Avx512;

    for ic0 in (0..n_kv).step_by(TILE_KV) {
        let n_t = TILE_KV.min(n_kv - ic0);
        if let Some(m) = a.mask {
            let f16m = m.dtype == DType::F16;
            let mut all_masked = true;
            for r in 0..rows {
                // SAFETY: ic0 < n_kv, q0 + r < n_q, broadcast indices reduced: the mask row's
                // elements ic0..ic0 + n_t lie in the mask (the builder checked its shape).
                let p = unsafe {
                    m.data
                        .add(m.offset(ic0, q0 + r, iq2 % m.ne[2], iq3 % m.ne[3]))
                };
                let mr = &mut mk[r * TILE_KV..(r + 1) * TILE_KV];
                let dense = m.nb[0] == m.dtype.type_size();
                if dense && !f16m {
                    // SAFETY: n_t dense, aligned f32 elements from p (as above).
                    mr[..n_t].copy_from_slice(unsafe {
                        std::slice::from_raw_parts(p as *const f32, n_t)
                    });
                } else if dense {
                    // SAFETY: n_t dense, aligned f16 elements from p (as above).
                    let h = unsafe { std::slice::from_raw_parts(p as *const u16, n_t) };
                    f16_to_f32(h, &mut mr[..n_t], FAST);
                } else {
                    for (c, x) in mr[..n_t].iter_mut().enumerate() {
                        // SAFETY: element c < n_t of that row; F16/F32 elements are aligned.
                        *x = unsafe {
                            let e = p.add(c * m.nb[0]);
                            if f16m {
                                h2f(*(e as *const u16))
                            } else {
                                *(e as *const f32)
                            }
                        };
                    }
                }
                mr[n_t..].fill(f32::NEG_INFINITY);
                all_masked &= mr.iter().all(|&x| x == f32::NEG_INFINITY);
            }
            if all_masked {
                continue;
            }
        }
        // Keys of the tile, transposed: kt[d][c].
        for c in 0..n_t {
            // SAFETY: ic0 + c < n_kv.
            f16_to_f32(unsafe { a.k_row(ic0 + c, iq2, iq3) }, krow, FAST);
            for (d, &x) in krow.iter().enumerate() {
                kt[d * TILE_KV + c] = x;
            }
        }
        #[cfg(target_arch = "x86_64")]
        let blocked = FAST && {
            if x86_512 {
                // SAFETY: AVX-512 F (checked); the q tile holds TILE_Q rows of dk, the key
                // tile dk rows of TILE_KV, the scores TILE_Q rows of TILE_KV.
                unsafe { x86::scores_512(qt, kt, kq, rows, dk) };
            } else {
                // SAFETY: FAST: the CPU has AVX2 and FMA; the tiles as above.
                unsafe { x86::scores_avx2(qt, kt, kq, rows, dk) };
            }
            true
        };
        #[cfg(not(target_arch = "x86_64"))]
        let blocked = false;
        for r in 0..rows {
            let s = &mut kq[r * TILE_KV..(r + 1) * TILE_KV];
            if !blocked {
                s.fill(0.0);
                for d in 0..dk {
                    fma_into_body(s, qt[r * dk + d], &kt[d * TILE_KV..(d + 1) * TILE_KV]);
                }
            }
            for x in s.iter_mut() {
                *x *= a.scale;
            }
            for x in &mut s[n_t..] {
                *x = f32::NEG_INFINITY;
            }
            if a.softcap != 0.0 {
                // As ggml: after the padding (which becomes −c), before the mask.
                for x in s.iter_mut() {
                    *x = x.tanh() * a.softcap;
                }
            }
            if a.mask.is_some() {
                for (x, &m) in s.iter_mut().zip(&mk[r * TILE_KV..(r + 1) * TILE_KV]) {
                    *x += m;
                }
            }
            let tile_max = row_max(s);
            skip[r] = tile_max == f32::NEG_INFINITY;
            if skip[r] {
                continue;
            }
            let old = smax[r];
            let new = old.max(tile_max);
            if new > old {
                let ms = (old - new).exp();
                for y in &mut acc[r * dv..(r + 1) * dv] {
                    *y *= ms;
                }
                ssum[r] *= ms;
            }
            smax[r] = new;
            ssum[r] = (ssum[r] as f64 + soft_max_sum(s, new)) as f32;
        }
        // Values of the tile; rows past the end stay zero (their weights are zero too).
        for c in 0..n_t {
            // SAFETY: ic0 + c < n_kv.
            f16_to_f32(
                unsafe { a.v_row(ic0 + c, iq2, iq3) },
                &mut vt[c * dv..(c + 1) * dv],
                FAST,
            );
        }
        vt[n_t * dv..].fill(0.0);
        #[cfg(target_arch = "x86_64")]
        if FAST && dv % 32 == 0 {
            let mut active = [0usize; TILE_Q];
            let mut n_active = 0;
            for r in (0..rows).filter(|&r| !skip[r]) {
                active[n_active] = r;
                n_active += 1;
            }
            let active = &active[..n_active];
            if x86_512 && dv % 64 == 0 {
                // SAFETY: AVX-512 F (checked); rows `active` of the weights (TILE_KV each)
                // and of the accumulators (dv each), TILE_KV value rows of dv.
                unsafe { x86::weighted_values_512(kq, vt, acc, active, dv) };
            } else {
                // SAFETY: FAST: the CPU has AVX2 and FMA; the rows as above.
                unsafe { x86::weighted_values_avx2(kq, vt, acc, active, dv) };
            }
            continue;
        }
        for r in 0..rows {
            if skip[r] {
                continue;
            }
            let y = &mut acc[r * dv..(r + 1) * dv];
            for c in 0..TILE_KV {
                fma_into_body(y, kq[r * TILE_KV + c], &vt[c * dv..(c + 1) * dv]);
            }
        }
    }
    if let Some(s) = a.sink(iq2) {
        for r in 0..rows {
            ssum[r] = add_sink(s, smax[r], ssum[r], &mut acc[r * dv..(r + 1) * dv]).1;
        }
    }
    for r in 0..rows {
        let inv = if ssum[r] == 0.0 { 0.0 } else { 1.0 / ssum[r] };
        // SAFETY: q0 + r < n_q; this thread owns the tile's rows.
        let out = unsafe { a.out_row(q0 + r, iq2, iq3) };
        for (o, &y) in out.iter_mut().zip(&acc[r * dv..(r + 1) * dv]) {
            *o = y * inv;
        }
    }
}

// -------------------------------------------------------------------------------------------
// Arithmetic primitives (portable bodies; vectorised variants below run the same operations)
// -------------------------------------------------------------------------------------------

/// The tiled kernel's row maximum, `fold(−∞, |m, x| if m > x { m } else { x })`: sixteen
/// running maxima at once when the row has no NaN (the same value: only the sign of a zero
/// maximum can differ, and every use of the maximum — differences fed to `exp`, `>` tests —
/// gives the same result for either sign), the fold itself otherwise.
#[inline(always)]
fn row_max(s: &[f32]) -> f32 {
    let fold = |m: f32, x: f32| if m > x { m } else { x };
    if !s.len().is_multiple_of(16) || s.iter().any(|x| x.is_nan()) {
        return s.iter().fold(f32::NEG_INFINITY, |m, &x| fold(m, x));
    }
    let mut lanes = [f32::NEG_INFINITY; 16];
    for c in s.chunks_exact(16) {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = fold(*m, x);
        }
    }
    lanes.iter().fold(f32::NEG_INFINITY, |m, &x| fold(m, x))
}

#[inline(always)]
pub(super) fn h2f(h: u16) -> f32 {
    f16::from_bits(h).to_f32()
}

#[inline(always)]
pub(super) fn f2h(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// `acc[j] = fma(a, b[j], acc[j])`: one step of ggml's `simd_gemm` FMA chains.
#[inline(always)]
fn fma_into_body(acc: &mut [f32], a: f32, b: &[f32]) {
    for (y, &x) in acc.iter_mut().zip(b) {
        *y = a.mul_add(x, *y);
    }
}

#[inline(always)]
pub(super) fn f16_to_f32(src: &[u16], dst: &mut [f32], fast: bool) {
    #[cfg(target_arch = "x86_64")]
    if fast {
        // SAFETY: `fast` is only true when the CPU has AVX2, FMA and F16C.
        return unsafe {
            crate::kernels::x86::f16::f16_to_f32_block_f16c(bytemuck::cast_slice(src), dst)
        };
    }
    let _ = fast;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = h2f(s);
    }
}

pub(super) fn dot_f16_ggml(x: &[f32], y: &[f32], fast: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if fast {
        // SAFETY: as in `f16_to_f32`.
        return unsafe { dot_f16_ggml_fast(x, y) };
    }
    let _ = fast;
    dot_f16_vec_f32_body(x, y)
}

/// ggml's `ggml_vec_scale_f16`: `y = f16(f32(y) · v)`.
pub(super) fn scale_f16(y: &mut [u16], v: f32, fast: bool) {
    #[cfg(target_arch = "x86_64")]
    if fast {
        // SAFETY: as in `f16_to_f32`.
        return unsafe { x86::scale_f16(y, v) };
    }
    let _ = fast;
    for h in y.iter_mut() {
        *h = f2h(h2f(*h) * v);
    }
}

/// ggml's `ggml_vec_mad_f16` (the FMA is explicit in its SIMD body and contracted by the
/// compiler in its tail): `y = f16(fma(f32(x), v, f32(y)))`.
pub(super) fn mad_f16(y: &mut [u16], x: &[u16], v: f32, fast: bool) {
    #[cfg(target_arch = "x86_64")]
    if fast {
        // SAFETY: as in `f16_to_f32`.
        return unsafe { x86::mad_f16(y, x, v) };
    }
    let _ = fast;
    for (h, &s) in y.iter_mut().zip(x) {
        *h = f2h(h2f(s).mul_add(v, h2f(*h)));
    }
}

/// ggml's `ggml_vec_soft_max_f32` on AVX-512 for a row whose length is a multiple of 16:
/// `x = v_expf(x − max)` in place, returning the sum (each group of 16 added by
/// [`reduce16`], the groups in f64).
#[inline(always)]
fn soft_max_sum(x: &mut [f32], max: f32) -> f64 {
    debug_assert_eq!(x.len() % 16, 0);
    let mut sum = 0f64;
    for c in x.chunks_exact_mut(16) {
        let mut d = [0f32; 16];
        for (o, &i) in d.iter_mut().zip(c.iter()) {
            *o = i - max;
        }
        let v = v_expf16(&d);
        c.copy_from_slice(&v);
        sum += reduce16(&v) as f64;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
/// [`group_row_keys`] for at most [`x86::MAX_GROUP`] heads with `dk = dv` one of
/// `x86::HEAD_DIMS` and one mask row for all of them: appends each head's `(M, S)` to `out`
/// and leaves its accumulator in part `j` (of `rs` values) of `sc`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; indices in range, `keys` within `0..n_kv`; `sc`
/// holds `heads.len()` row scratches of `rs` values; the mask (if any) has `ne[2] = 1`.
#[allow(clippy::too_many_arguments)]
#[cfg(target_arch = "x86_64")]
unsafe fn group_keys_d(
    a: &Attn,
    iq1: usize,
    heads: std::ops::Range<usize>,
    iq3: usize,
    keys: std::ops::Range<usize>,
    sc: &mut [f32],
    rs: usize,
    out: &mut Vec<(f32, f32)>,
) {
    match a.dk() {
        // SAFETY: forwarded.
        64 => unsafe { group_keys_dn::<64, 8>(a, iq1, heads, iq3, keys, sc, rs, out) },
        // SAFETY: forwarded.
        128 => unsafe { group_keys_dn::<128, 16>(a, iq1, heads, iq3, keys, sc, rs, out) },
        // SAFETY: forwarded.
        256 => unsafe { group_keys_dn::<256, 32>(a, iq1, heads, iq3, keys, sc, rs, out) },
        d => unreachable!("head size {d} is not one of x86::HEAD_DIMS"),
    }
}

#[cfg(target_arch = "x86_64")]
/// [`group_keys_d`] for heads of size `D` (`N = D / 8` vectors).
///
/// # Safety
/// As [`group_keys_d`]; `dk = dv = D`.
#[allow(clippy::too_many_arguments)]
#[cfg(target_arch = "x86_64")]
unsafe fn group_keys_dn<const D: usize, const N: usize>(
    a: &Attn,
    iq1: usize,
    heads: std::ops::Range<usize>,
    iq3: usize,
    keys: std::ops::Range<usize>,
    sc: &mut [f32],
    rs: usize,
    out: &mut Vec<(f32, f32)>,
) {
    macro_rules! run {
        ($($g:literal)*) => {
            match heads.len() {
                $($g => {
                    // SAFETY: forwarded.
                    unsafe {
                        group_n::<$g, D, N>(a, iq1, heads.start, iq3, keys, sc, rs, out)
                    }
                })*
                n => unreachable!("groups hold 1 to {} heads, not {n}", x86::MAX_GROUP),
            }
        };
    }
    run!(1 2 3 4 5 6 7 8)
}

#[cfg(target_arch = "x86_64")]
/// [`group_keys_d`] for `G` heads from `h0`, of size `D` (`N = D / 8` vectors).
///
/// # Safety
/// As [`group_keys_d`].
#[allow(clippy::too_many_arguments)]
#[cfg(target_arch = "x86_64")]
unsafe fn group_n<const G: usize, const D: usize, const N: usize>(
    a: &Attn,
    iq1: usize,
    h0: usize,
    iq3: usize,
    keys: std::ops::Range<usize>,
    sc: &mut [f32],
    rs: usize,
    out: &mut Vec<(f32, f32)>,
) {
    let mut q = [[0f32; D]; G];
    for (j, qh) in q.iter_mut().enumerate() {
        // SAFETY: head h0 + j in range (caller).
        let row = unsafe { a.q_row(iq1, h0 + j, iq3) };
        // SAFETY: `fast` (checked by the caller) means F16C.
        unsafe { x86::round_to_f16(row, qh) };
    }
    // The heads share their key and value head (`group_size`).
    // SAFETY: head indices in range (caller); the mask's ne[2] is 1 (caller).
    let rows = unsafe { a.group_key_rows(iq1, h0, iq3) };
    let mut acc = [[0u16; D]; G];
    // SAFETY: `fast` (checked by the caller) means AVX2, FMA and F16C; the rows lie in
    // their tensors (the builder checked the shapes).
    let res = unsafe {
        if D == x86::D512 && crate::cpu::isa() >= crate::cpu::Isa::Avx512 {
            let q: [[f32; x86::D512]; G] =
                std::array::from_fn(|g| q[g][..].try_into().expect("D = D512"));
            let mut acc512 = [[0u16; x86::D512]; G];
            let r = x86::keys_block_512::<G>(&q, &mut acc512, &rows, keys, a.scale);
            for (y, x) in acc.iter_mut().zip(&acc512) {
                y.copy_from_slice(x);
            }
            r
        } else {
            x86::keys_group::<G, D, N>(&mut q, &mut acc, &rows, keys, a.scale)
        }
    };
    for (j, (acc, r)) in acc.iter().zip(res).enumerate() {
        row_acc(&mut sc[j * rs..(j + 1) * rs], D, D).copy_from_slice(acc);
        out.push(r);
    }
}

crate::kernels::x86::target_features!("avx2,fma,f16c":
    /// [`tile_body`] compiled for AVX2 + FMA + F16C (`a.fast`).
    fn tile_fast(a: &Attn, q0: usize, iq2: usize, iq3: usize, sc: &mut [f32]) = tile_body::<true>;
    /// [`dot_f16_vec_f32_body`] compiled for AVX2 + FMA + F16C.
    fn dot_f16_ggml_fast(x: &[f32], y: &[f32]) -> f32 = dot_f16_vec_f32_body;
    /// [`query_group_keys_body`] compiled for AVX2 + FMA + F16C.
    fn query_group_keys_fast(
        a: &Attn,
        iq1: [usize; QUERY_GROUP],
        live: usize,
        iq2: usize,
        iq3: usize,
        sc: &mut [f32],
    ) -> [(f32, f32); QUERY_GROUP] = query_group_keys_body::<QUERY_GROUP>;
);

/// The score tiles of `kernels::x86::attn` are this module's.
#[cfg(target_arch = "x86_64")]
const _: () = assert!(TILE_Q == x86::TILE_Q && TILE_KV == x86::TILE_KV);

#[cfg(all(test, target_arch = "x86_64"))]
mod x86_tests {
    use super::{f2h, h2f};
    use crate::cpu::{isa, Isa};
    use crate::kernels::x86::attn::*;

    /// Keys and values of one head as the cache holds them (rows `stride` u16 apart,
    /// this head's `d` values first) and a mask row in either element type.
    struct Case {
        k: Vec<u16>,
        v: Vec<u16>,
        stride: usize,
        mask_f16: Vec<u16>,
        mask_f32: Vec<f32>,
    }

    fn rng(seed: &mut u64) -> f32 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    /// `n` keys; `spiky`: some keys' rows ×40 (scores jumping by far more than 88, so
    /// that exponentials leave the table's range), one NaN in a key row.
    fn case(d: usize, n: usize, spiky: bool, seed: u64) -> Case {
        let mut s = seed | 1;
        let stride = 2 * d;
        let mut row = |i: usize, scale: f32| -> Vec<u16> {
            let mut r: Vec<u16> = (0..stride).map(|_| f2h(rng(&mut s) * scale)).collect();
            if spiky && i % 37 == 5 {
                r.iter_mut().take(d).for_each(|x| *x = f2h(h2f(*x) * 40.0));
            }
            r
        };
        let mut k: Vec<u16> = (0..n).flat_map(|i| row(i, 2.0)).collect();
        let v: Vec<u16> = (0..n).flat_map(|i| row(i + 1000, 1.0)).collect();
        if spiky && n > 9 {
            k[9 * stride + 3] = 0x7e00; // NaN
        }
        let masked = |i: usize| i % 7 == 3 || (40..60).contains(&i);
        let value = |i: usize| match i % 5 {
            0 => -1.5,
            1 => 0.25,
            _ => 0.0,
        };
        let mask_f32: Vec<f32> = (0..n)
            .map(|i| {
                if masked(i) {
                    f32::NEG_INFINITY
                } else {
                    value(i)
                }
            })
            .collect();
        let mask_f16 = mask_f32.iter().map(|&x| f2h(x)).collect();
        Case {
            k,
            v,
            stride,
            mask_f16,
            mask_f32,
        }
    }

    /// The one-key loop of `one_row_keys` with the portable primitives.
    fn reference<const D: usize>(
        q: &[f32; D],
        c: &Case,
        mask: Option<&[f32]>,
        keys: std::ops::Range<usize>,
        scale: f32,
    ) -> ([u16; D], f32, f32) {
        let (mut acc, mut max, mut sum) = ([0u16; D], f32::NEG_INFINITY, 0f32);
        for ic in keys {
            let mv = mask.map_or(0.0, |m| m[ic]);
            if mv == f32::NEG_INFINITY {
                continue;
            }
            let kr: Vec<f32> = c.k[ic * c.stride..][..D].iter().map(|&h| h2f(h)).collect();
            let vr = &c.v[ic * c.stride..][..D];
            let mut s = super::dot_f16_ggml(&kr, q, false);
            s *= scale;
            s += mv;
            let (ms, vs);
            if s > max {
                let old = max;
                max = s;
                ms = (old - max).exp();
                vs = 1.0;
                super::scale_f16(&mut acc, ms, false);
            } else {
                ms = 1.0;
                vs = (s - max).exp();
            }
            super::mad_f16(&mut acc, vr, vs, false);
            sum = sum.mul_add(ms, vs);
        }
        (acc, max, sum)
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    fn check<const G: usize, const D: usize, const N: usize>() {
        let scale = 1.0 / (D as f32).sqrt();
        for (n, spiky) in [(0, false), (1, false), (16, false), (33, true), (600, true)] {
            let c = case(D, n, spiky, 7 + n as u64);
            let mut seed = 99 + G as u64;
            let q: [[f32; D]; G] =
                std::array::from_fn(|_| std::array::from_fn(|_| h2f(f2h(rng(&mut seed)))));
            let ranges = [0..n, n / 3..n, n.min(5)..n.min(21)];
            for keys in ranges {
                for which in 0..3 {
                    let mask = match which {
                        0 => None,
                        1 => Some((c.mask_f16.as_ptr() as *const u8, 2, true)),
                        _ => Some((c.mask_f32.as_ptr() as *const u8, 4, false)),
                    };
                    let rows = KeyRows {
                        k0: c.k.as_ptr() as *const u8,
                        knb: 2 * c.stride,
                        v0: c.v.as_ptr() as *const u8,
                        vnb: 2 * c.stride,
                        mask,
                    };
                    let mref = (which > 0).then_some(&c.mask_f32[..]);
                    let want: Vec<_> = q
                        .iter()
                        .map(|qh| reference(qh, &c, mref, keys.clone(), scale))
                        .collect();
                    let what = format!("G={G} D={D} n={n} keys={keys:?} mask={which}");
                    let mut runs = Vec::new();
                    if isa() >= Isa::Avx512 && D == D512 {
                        let q5: [[f32; D512]; G] =
                            std::array::from_fn(|g| q[g][..].try_into().expect("D = D512"));
                        let mut acc5 = [[0u16; D512]; G];
                        // SAFETY: the CPU has the features (checked); the rows and the
                        // mask cover every key of `keys`.
                        let r = unsafe {
                            keys_block_512::<G>(&q5, &mut acc5, &rows, keys.clone(), scale)
                        };
                        let mut acc = [[0u16; D]; G];
                        for (y, x) in acc.iter_mut().zip(&acc5) {
                            y.copy_from_slice(x);
                        }
                        runs.push(("block", acc, r));
                    }
                    if isa() >= Isa::Avx2 {
                        let mut acc = [[0u16; D]; G];
                        // SAFETY: as above (AVX2, FMA, F16C).
                        let r = unsafe {
                            keys_group::<G, D, N>(
                                &mut q.clone(),
                                &mut acc,
                                &rows,
                                keys.clone(),
                                scale,
                            )
                        };
                        runs.push(("group", acc, r));
                    }
                    for (name, acc, r) in runs {
                        for (g, (wa, wm, ws)) in want.iter().enumerate() {
                            let (m, s) = r[g];
                            assert!(same(m, *wm), "{name} {what} head {g}: M {m} vs {wm}");
                            assert!(same(s, *ws), "{name} {what} head {g}: S {s} vs {ws}");
                            for (x, y) in acc[g].iter().zip(wa) {
                                assert!(
                                    same(h2f(*x), h2f(*y)),
                                    "{name} {what} head {g}: acc {} vs {}",
                                    h2f(*x),
                                    h2f(*y)
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The AVX-512 eight-query kernel for heads of 32 equals the one-query loop with the
    /// portable primitives, query by query: masks that differ per query (−∞ runs, f16 and
    /// f32, none), fewer live queries than lanes, spiky scores (exponentials out of the
    /// table's range), a NaN key, 0 to 70 keys.
    #[test]
    fn query_lanes_equal_the_one_query_loop() {
        if isa() < Isa::Avx512 {
            return;
        }
        const D: usize = D32;
        const G: usize = QUERY_LANES;
        let scale = 1.0 / (D as f32).sqrt();
        for (n, spiky) in [
            (0, false),
            (1, false),
            (7, false),
            (9, true),
            (33, true),
            (70, true),
        ] {
            let c = case(D, n, spiky, 11 + n as u64);
            // Query g reads mask elements g.. of a row of n + G: shifted runs of −∞.
            let wide: Vec<f32> = (0..n + G)
                .map(|i| match (i % 11, i % 5) {
                    (4, _) | (5, _) => f32::NEG_INFINITY,
                    (_, 0) => -1.5,
                    (_, 1) => 0.25,
                    _ => 0.0,
                })
                .collect();
            let wide16: Vec<u16> = wide.iter().map(|&x| f2h(x)).collect();
            let mut seed = 5 + n as u64;
            let q: [[f32; D]; G] =
                std::array::from_fn(|_| std::array::from_fn(|_| h2f(f2h(rng(&mut seed) * 3.0))));
            for live in [G, 3] {
                for which in 0..3 {
                    let masks: [Option<(*const u8, usize, bool)>; G] =
                        std::array::from_fn(|g| match which {
                            0 => None,
                            1 => Some((wide16[g..].as_ptr() as *const u8, 2, true)),
                            _ => Some((wide[g..].as_ptr() as *const u8, 4, false)),
                        });
                    let mut acc = [[0u16; D]; G];
                    let rows = (
                        c.k.as_ptr() as *const u8,
                        2 * c.stride,
                        c.v.as_ptr() as *const u8,
                        2 * c.stride,
                    );
                    // SAFETY: AVX-512 (checked); the rows and mask rows cover keys 0..n.
                    let r =
                        unsafe { query_keys_d32_512(&q, live, &masks, rows, n, scale, &mut acc) };
                    for g in 0..live {
                        let mref = (which > 0).then_some(&wide[g..]);
                        let (wa, wm, ws) = reference::<D>(&q[g], &c, mref, 0..n, scale);
                        let what = format!("n={n} live={live} mask={which} query {g}");
                        let (m, s) = r[g];
                        assert!(same(m, wm), "{what}: M {m} vs {wm}");
                        assert!(same(s, ws), "{what}: S {s} vs {ws}");
                        for (x, y) in acc[g].iter().zip(&wa) {
                            assert!(
                                same(h2f(*x), h2f(*y)),
                                "{what}: acc {} vs {}",
                                h2f(*x),
                                h2f(*y)
                            );
                        }
                    }
                }
            }
        }
    }

    /// The vectorised rounding of queries to f16 equals the portable one, on every 97th
    /// bit pattern (subnormals, overflow to infinity, NaN included) and odd lengths.
    #[test]
    fn round_to_f16_equals_the_portable_rounding() {
        if isa() < Isa::Avx2 {
            return;
        }
        let xs: Vec<f32> = (0..=u32::MAX / 97)
            .map(|i| f32::from_bits(i * 97))
            .collect();
        for c in xs.chunks(1003) {
            let mut got = vec![0f32; c.len()];
            // SAFETY: the CPU has F16C (checked).
            unsafe { round_to_f16(c, &mut got) };
            for (&x, &y) in c.iter().zip(&got) {
                let want = h2f(f2h(x));
                assert!(
                    same(y, want),
                    "round_to_f16({x:e}) = {y:e}, portable {want:e}"
                );
            }
        }
    }

    /// The AVX2 score and value tiles of the tiled kernel give the portable loops' bits
    /// (the same FMA chains), for partial row blocks, skipped rows and several head sizes.
    #[test]
    fn avx2_tiles_equal_the_portable_loops() {
        if isa() < Isa::Avx2 {
            return;
        }
        let (tq, tkv) = (super::TILE_Q, super::TILE_KV);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for dk in [32, 64, 96, 128, 256] {
            for rows in [1, 2, 3, 37, tq] {
                let qt: Vec<f32> = (0..tq * dk).map(|_| rng(&mut seed) * 3.0).collect();
                let kt: Vec<f32> = (0..dk * tkv).map(|_| rng(&mut seed)).collect();
                let mut got = vec![7.0f32; tq * tkv];
                // SAFETY: AVX2 (checked; this level implies FMA); tiles of the sizes asked.
                unsafe { scores_avx2(&qt, &kt, &mut got, rows, dk) };
                for r in 0..rows {
                    let mut want = vec![0f32; tkv];
                    for d in 0..dk {
                        super::fma_into_body(
                            &mut want,
                            qt[r * dk + d],
                            &kt[d * tkv..(d + 1) * tkv],
                        );
                    }
                    let g = &got[r * tkv..(r + 1) * tkv];
                    assert!(
                        g.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "scores dk={dk} rows={rows} r={r}"
                    );
                }
                let dv = dk;
                let kq: Vec<f32> = (0..tq * tkv).map(|_| rng(&mut seed).abs()).collect();
                let vt: Vec<f32> = (0..tkv * dv).map(|_| rng(&mut seed)).collect();
                let acc0: Vec<f32> = (0..tq * dv).map(|_| rng(&mut seed)).collect();
                let active: Vec<usize> = (0..rows).filter(|r| r % 5 != 3).collect();
                let mut got = acc0.clone();
                // SAFETY: as above; dv is a multiple of 32, rows below TILE_Q.
                unsafe { weighted_values_avx2(&kq, &vt, &mut got, &active, dv) };
                let mut want = acc0.clone();
                for &r in &active {
                    for c in 0..tkv {
                        super::fma_into_body(
                            &mut want[r * dv..(r + 1) * dv],
                            kq[r * tkv + c],
                            &vt[c * dv..(c + 1) * dv],
                        );
                    }
                }
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "values dv={dv} rows={rows}"
                );
            }
        }
    }

    /// The blocked AVX-512 loop (head size 64) and the AVX2 one (every head size of
    /// `HEAD_DIMS`) give the one-key loop's bits, with masked keys (whole masked blocks
    /// too), partial blocks, NaN scores and exponentials outside the table's range.
    #[test]
    fn key_loops_equal_the_one_key_loop() {
        check::<1, 64, 8>();
        check::<2, 64, 8>();
        check::<3, 64, 8>();
        check::<7, 64, 8>();
        check::<8, 64, 8>();
        check::<1, 128, 16>();
        check::<2, 128, 16>();
        check::<5, 128, 16>();
        check::<8, 128, 16>();
        check::<1, 256, 32>();
        check::<4, 256, 32>();
        assert_eq!(
            HEAD_DIMS,
            [64, 128, 256],
            "every head size is checked above"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let t = (i as f32 + seed as f32 * 0.37).sin() * 3.0 + (i % 7) as f32 * 0.01;
                h2f(f2h(t))
            })
            .collect()
    }

    #[test]
    fn vectorised_primitives_equal_portable_ones() {
        if isa() < Isa::Avx2 {
            return;
        }
        for n in 0..=515 {
            for off in [0, 1, 3] {
                let x = data(n + off, 1);
                let y = data(n + off, 2);
                let (x, y) = (&x[off..], &y[off..]);
                let a = dot_f16_ggml(x, y, false);
                let b = dot_f16_ggml(x, y, true);
                assert_eq!(a.to_bits(), b.to_bits(), "dot n={n} off={off}");

                let h: Vec<u16> = x.iter().map(|&v| f2h(v)).collect();
                let mut p = vec![0f32; n];
                let mut q = vec![0f32; n];
                f16_to_f32(&h, &mut p, false);
                f16_to_f32(&h, &mut q, true);
                assert_eq!(p, q, "f16_to_f32 n={n}");

                let mut ya: Vec<u16> = y.iter().map(|&v| f2h(v)).collect();
                let mut yb = ya.clone();
                mad_f16(&mut ya, &h, 0.3791, false);
                mad_f16(&mut yb, &h, 0.3791, true);
                assert_eq!(ya, yb, "mad_f16 n={n}");
                scale_f16(&mut ya, 0.8123, false);
                scale_f16(&mut yb, 0.8123, true);
                assert_eq!(ya, yb, "scale_f16 n={n}");
            }
        }
    }
}
