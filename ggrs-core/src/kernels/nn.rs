//! Attention pieces: causal mask, softmax, rotary position embedding.

use crate::dtype::DType;
use crate::error::Result;
use crate::kernels::ggml_arith::rotate_pair;
use crate::kernels::{split_range, Task, Work};
use crate::op::{Op, RopeMode};

/// `dst = a` with −∞ above the causal diagonal.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`].
pub(crate) unsafe fn diag_mask_inf(
    task: &Task,
    n_past: usize,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) {
    let (d, a) = (&task.dst, task.s0());
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: same shapes; dst row owned by this thread.
        unsafe {
            let x = a.load_row(i1, i2, i3, work.scratch);
            let out = d.row_f32_mut(i1, i2, i3);
            for (i0, (o, &v)) in out.iter_mut().zip(x).enumerate() {
                *o = if i0 > n_past + i1 {
                    f32::NEG_INFINITY
                } else {
                    v
                };
            }
        }
    }
}

/// Softmax of `a·scale + mask` along rows, with src2's sink logit of the row's plane (head)
/// in the denominator when the node has sinks.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; src2, when set, is F32 with `a.ne[2]` elements
/// (checked by the builder).
pub(crate) unsafe fn soft_max(
    task: &Task,
    scale: f32,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) {
    let (d, a) = (&task.dst, task.s0());
    let mask = task.src[1];
    let sinks = task.src[2].as_ref();
    let n = a.ne[0];
    let (sa, sm) = work.scratch.split_at_mut(n);
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: a and dst share the shape; the mask row index is i1 < m.ne[1] and the
        // outer indices are reduced modulo the mask's shape; the sinks hold a.ne[2] > i2
        // f32 values (all checked by the builder).
        unsafe {
            let x = a.load_row(i1, i2, i3, sa);
            let out = d.row_f32_mut(i1, i2, i3);
            match &mask {
                Some(m) => {
                    let mr = m.load_row(i1, i2 % m.ne[2], i3 % m.ne[3], sm);
                    for ((o, &v), &mv) in out.iter_mut().zip(x).zip(mr) {
                        *o = v * scale + mv;
                    }
                }
                None => {
                    for (o, &v) in out.iter_mut().zip(x) {
                        *o = v * scale;
                    }
                }
            }
            let mut max = out.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            // A sink logit of this plane (head) joins the maximum and, after the row's terms,
            // the sum (ggml's order).
            let sink = sinks.map(|t| *(t.data.add(t.offset(i2, 0, 0, 0)) as *const f32));
            if let Some(s) = sink {
                max = max.max(s);
            }
            if max == f32::NEG_INFINITY {
                out.fill(0.0);
                continue;
            }
            let mut sum = 0f64;
            for o in out.iter_mut() {
                let e = (*o - max).exp();
                *o = e;
                sum += e as f64;
            }
            if let Some(s) = sink {
                sum += (s - max).exp() as f64;
            }
            let inv = (1.0 / sum) as f32;
            for o in out.iter_mut() {
                *o *= inv;
            }
        }
    }
}

/// Rotary embedding. For each (head, token) row, the cos/sin table of the token's position is
/// computed as ggml does — `θ₀ = p`, `θ_{i+1} = θ_i · base^(−2/n_dims)` in f32, angles scaled
/// by `freq_scale` (each first divided by its pair's frequency factor when src2 holds them)
/// — and reused for consecutive rows of the same token.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; pos is a dense i32 tensor of `a.ne[2]` entries;
/// src2, when set, a dense f32 tensor of `n_dims / 2` entries.
pub(crate) unsafe fn rope(
    task: &Task,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) -> Result<()> {
    let Op::Rope {
        n_dims,
        mode,
        freq_base,
        freq_scale,
    } = task.op
    else {
        return Ok(());
    };
    let theta_scale = freq_base.powf(-2.0 / n_dims as f32);
    let table = |p: i32, factors: Option<&[f32]>, cache: &mut [f32]| {
        let mut theta = p as f32;
        for i in 0..n_dims / 2 {
            // As ggml: the factor divides the angle before the position scale.
            let t = match factors {
                Some(ff) => freq_scale * (theta / ff[i]),
                None => freq_scale * theta,
            };
            cache[2 * i] = t.cos();
            cache[2 * i + 1] = t.sin();
            theta *= theta_scale;
        }
    };
    // SAFETY: forwarded caller guarantee.
    unsafe { rotate_rows(task, chunk, n_chunks, work, (n_dims, mode), table) };
    Ok(())
}

/// The rows of chunk `chunk` of a rotary node: for each (head, token) row, `table(p,
/// factors, cache)` fills the `n_dims` cos/sin values of the token's position `p` (the
/// pair factors of src2 when set), reused for consecutive rows of one token, and the row
/// is turned by them ([`rotate_row`]).
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; src1 is a dense i32 tensor of `a.ne[2]`
/// positions; src2, when set, a dense f32 tensor of `n_dims / 2` entries (both checked by
/// the op's builder); the per-thread scratch holds `n_dims + a.ne[0]` values.
pub(crate) unsafe fn rotate_rows(
    task: &Task,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
    (n_dims, mode): (usize, RopeMode),
    mut table: impl FnMut(i32, Option<&[f32]>, &mut [f32]),
) {
    let (d, a, pos) = (&task.dst, task.s0(), task.s1());
    let ne0 = a.ne[0];
    // SAFETY: the builder checked that the factors, when given, are a dense f32 tensor of
    // n_dims/2 values; nobody writes them while the graph runs (a source of this node).
    let factors: Option<&[f32]> = task.src[2]
        .as_ref()
        .map(|f| unsafe { std::slice::from_raw_parts(f.data as *const f32, n_dims / 2) });
    let (cache, sx) = work.scratch.split_at_mut(n_dims);
    let mut cached: Option<usize> = None;
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: i2 < pos.ne[0] (checked by the builder) so the position read is in range;
        // same shapes for a and dst; dst row owned by this thread.
        unsafe {
            if cached != Some(i2) {
                debug_assert_eq!(pos.dtype, DType::I32);
                let p = *(pos.data.add(i2 * pos.nb[0]) as *const i32);
                table(p, factors, &mut cache[..n_dims]);
                cached = Some(i2);
            }
            let x = a.load_row(i1, i2, i3, sx);
            let out = d.row_f32_mut(i1, i2, i3);
            rotate_row(mode, &cache[..n_dims], &x[..ne0], &mut out[..ne0]);
        }
    }
}

/// One row of RoPE: the first `cache.len()` values turned pair by pair by the cached
/// `(cos, sin)`, the rest copied.
pub(crate) fn rotate_row(mode: RopeMode, cache: &[f32], x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::isa() >= crate::cpu::Isa::Avx2 {
        // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2, FMA and F16C.
        return unsafe { rotate_row_fma(mode, cache, x, out) };
    }
    rotate_row_body(mode, cache, x, out)
}

crate::kernels::x86::target_features!("avx2,fma,f16c":
    /// [`rotate_row_body`] compiled with FMA, so that its fused multiply-adds
    /// (`f32::mul_add`) are instructions rather than calls to a software `fmaf`.
    fn rotate_row_fma(mode: RopeMode, cache: &[f32], x: &[f32], out: &mut [f32]) = rotate_row_body;
);

#[inline(always)]
fn rotate_row_body(mode: RopeMode, cache: &[f32], x: &[f32], out: &mut [f32]) {
    let n_dims = cache.len();
    // The rotations use the FMAs of ggml's compiled kernel (see `ggml_arith`).
    let h = n_dims / 2;
    let fused_pairs = h / 4 * 4;
    match mode {
        RopeMode::Normal => {
            for i in 0..h {
                let (c, s) = (cache[2 * i], cache[2 * i + 1]);
                let (x0, x1) = (x[2 * i], x[2 * i + 1]);
                (out[2 * i], out[2 * i + 1]) = rotate_pair(x0, x1, c, s, i < fused_pairs);
            }
        }
        RopeMode::Neox => {
            for i in 0..h {
                let (c, s) = (cache[2 * i], cache[2 * i + 1]);
                let (x0, x1) = (x[i], x[i + h]);
                (out[i], out[i + h]) = rotate_pair(x0, x1, c, s, true);
            }
        }
    }
    out[n_dims..].copy_from_slice(&x[n_dims..]);
}
