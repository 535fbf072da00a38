//! Reductions and row normalisations: sum, sum_rows, mean, argmax, norm, rms_norm.

use crate::kernels::ggml_arith::reduce16;
use crate::kernels::{split_range, Task, TaskPlan, Work};
use crate::op::Op;
use crate::tensor::TensorMeta;

/// `sum` runs over a chunk count fixed by the shape (not the thread count), each chunk
/// writing an f64 partial that FINALIZE adds in order: the result is the same whatever the
/// number of threads.
pub(crate) fn plan_sum(src: &TensorMeta) -> TaskPlan {
    let n_chunks = src.nrows().clamp(1, 64);
    TaskPlan {
        n_chunks,
        init: false,
        finalize: true,
        work_shared: n_chunks * std::mem::size_of::<f64>(),
        scratch_f32: src.ne[0] + 16,
        ..TaskPlan::default()
    }
}

/// Partial sum of chunk `chunk` into the shared buffer.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; the shared buffer holds `n_chunks` f64 slots
/// (planned by [`plan_sum`]) and slot `chunk` is written by this thread only.
pub(crate) unsafe fn sum_chunk(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let a = task.s0();
    let mut acc = 0f64;
    for r in split_range(a.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = a.unravel_row(r);
        // SAFETY: r < a.nrows().
        let x = unsafe { a.load_row(i1, i2, i3, work.scratch) };
        for &v in x {
            acc += v as f64;
        }
    }
    // SAFETY: slot `chunk` < n_chunks lies in the planned shared buffer (8-byte aligned: the
    // work buffer is 64-byte aligned) and belongs to this chunk.
    unsafe { *(work.shared as *mut f64).add(chunk) = acc };
}

/// Adds the partials in chunk order.
///
/// # Safety
/// Every chunk of this node has run; one thread calls this.
pub(crate) unsafe fn sum_finalize(task: &Task, work: &mut Work) {
    let n = task.plan.n_chunks;
    // SAFETY: the shared buffer holds n f64 partials written by the chunks.
    let partials = unsafe { std::slice::from_raw_parts(work.shared as *const f64, n) };
    let total: f64 = partials.iter().sum();
    // SAFETY: dst is a 1-element F32 tensor in the arena.
    unsafe { *(task.dst.data as *mut f32) = total as f32 };
}

/// Sum (or mean) of each row.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`].
pub(crate) unsafe fn sum_rows(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let (d, a) = (&task.dst, task.s0());
    let mean = matches!(task.op, Op::Mean);
    for r in split_range(a.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = a.unravel_row(r);
        // SAFETY: dst has a's rows (with ne[0] = 1); this thread owns dst row r.
        unsafe {
            let x = a.load_row(i1, i2, i3, work.scratch);
            let s: f64 = x.iter().map(|&v| v as f64).sum();
            let v = if mean {
                (s / a.ne[0] as f64) as f32
            } else {
                s as f32
            };
            d.row_f32_mut(i1, i2, i3)[0] = v;
        }
    }
}

/// Index of each row's maximum (first on ties), as i32.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`].
pub(crate) unsafe fn argmax(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let (d, a) = (&task.dst, task.s0());
    for r in split_range(a.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = a.unravel_row(r);
        // SAFETY: dst is a dense i32 tensor with one element per row of a; this thread owns
        // element r.
        unsafe {
            let x = a.load_row(i1, i2, i3, work.scratch);
            let mut best = 0usize;
            let mut max = f32::NEG_INFINITY;
            for (i, &v) in x.iter().enumerate() {
                if v > max {
                    max = v;
                    best = i;
                }
            }
            *(d.data as *mut i32).add(r) = best as i32;
        }
    }
}

/// Indices of each row's `k` largest values, largest first; equal values in index order,
/// NaN after every number.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`].
pub(crate) unsafe fn argsort_top_k(
    task: &Task,
    k: usize,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) {
    let (d, a) = (&task.dst, task.s0());
    let mut order: Vec<usize> = Vec::with_capacity(a.ne[0]);
    for r in split_range(a.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = a.unravel_row(r);
        // SAFETY: dst is a dense i32 tensor of rows of k with a's outer shape; this thread
        // owns row r.
        unsafe {
            let x = a.load_row(i1, i2, i3, work.scratch);
            order.clear();
            order.extend(0..x.len());
            // Stable: equal values keep index order. NaN sorts last (`total_cmp` would put
            // a NaN with the sign bit clear above +∞).
            order.sort_by(|&p, &q| match (x[p].is_nan(), x[q].is_nan()) {
                (false, false) => x[q].total_cmp(&x[p]),
                (nan_p, nan_q) => nan_p.cmp(&nan_q),
            });
            let out = (d.data as *mut i32).add(r * k);
            for (t, &i) in order[..k].iter().enumerate() {
                *out.add(t) = i as i32;
            }
        }
    }
}

/// Layer norm of each row (no affine part), in the arithmetic of ggml's
/// `ggml_compute_forward_norm_f32` on AVX-512 (llama.cpp commit 0c1e570): the sum in f64
/// rounded to f32 and divided by `n` in f32; the centred squares summed 16 at a time by
/// GCC's `_mm512_reduce_add_ps` ([`reduce16`]), the groups (and the tail, one by one) in
/// f64; the variance rounded to f32.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`].
pub(crate) unsafe fn norm(task: &Task, eps: f32, chunk: usize, n_chunks: usize, work: &mut Work) {
    let (d, a) = (&task.dst, task.s0());
    let n = a.ne[0];
    for r in split_range(a.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = a.unravel_row(r);
        // SAFETY: same shapes; dst row owned by this thread.
        unsafe {
            let x = a.load_row(i1, i2, i3, work.scratch);
            let out = d.row_f32_mut(i1, i2, i3);
            let sum: f64 = x.iter().map(|&v| v as f64).sum();
            let scale = center(out, x, sum as f32 / n as f32, eps);
            for o in out.iter_mut() {
                *o *= scale;
            }
        }
    }
}

/// Rows whose mean sums [`norm_mul_add`] runs side by side.
pub(crate) const NORM_ROWS: usize = 8;

/// [`norm`] of each row times `w` plus `b` (if any), each value rounded at the same steps as
/// the unfused `norm`, `mul` and `add` (`((c · scale) · w) + b`), so the same bits. The f64
/// sums of the means, each one chain in order, run [`NORM_ROWS`] rows side by side (one row's
/// chain of `n` dependent additions was most of `norm`'s time). w's and b's rows are
/// broadcast (indices modulo their shapes).
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; dst is a fresh dense F32 tensor of a's shape, and
/// the scratch holds `(NORM_ROWS + 2) · a.ne[0]` values.
// (Eight rows read at the same index: a range loop reads clearest.)
#[allow(clippy::needless_range_loop)]
pub(crate) unsafe fn norm_mul_add(
    task: &Task,
    eps: f32,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) {
    let (d, a, w) = (&task.dst, task.s0(), task.s1());
    let bias = task.src[2].as_ref();
    let n = a.ne[0];
    let (sx, rest) = work.scratch.split_at_mut(NORM_ROWS * n);
    let (sw, rest) = rest.split_at_mut(n);
    let sb = &mut rest[..n];
    // The empty sum: the start of `Iterator::sum` over f64, as `norm` adds from it.
    let zero: f64 = std::iter::empty::<f64>().sum();
    let rows = split_range(a.nrows(), n_chunks, chunk);
    let mut r0 = rows.start;
    while r0 < rows.end {
        let g = (rows.end - r0).min(NORM_ROWS);
        let mut xs: [&[f32]; NORM_ROWS] = [&[]; NORM_ROWS];
        for (k, s) in sx.chunks_mut(n).take(g).enumerate() {
            let (i1, i2, i3) = a.unravel_row(r0 + k);
            // SAFETY: row r0 + k < a.nrows(); the scratch chunk holds n values.
            xs[k] = unsafe { a.load_row(i1, i2, i3, s) };
        }
        let mut sums = [zero; NORM_ROWS];
        if g == NORM_ROWS {
            // Eight named chains over rows cut to n (no bounds checks), so that the sums
            // stay in registers.
            let x: [&[f32]; NORM_ROWS] = std::array::from_fn(|k| &xs[k][..n]);
            let [mut s0, mut s1, mut s2, mut s3, mut s4, mut s5, mut s6, mut s7] = sums;
            for i in 0..n {
                s0 += x[0][i] as f64;
                s1 += x[1][i] as f64;
                s2 += x[2][i] as f64;
                s3 += x[3][i] as f64;
                s4 += x[4][i] as f64;
                s5 += x[5][i] as f64;
                s6 += x[6][i] as f64;
                s7 += x[7][i] as f64;
            }
            sums = [s0, s1, s2, s3, s4, s5, s6, s7];
        } else {
            for (s, x) in sums.iter_mut().zip(&xs).take(g) {
                *s = x.iter().map(|&v| v as f64).sum();
            }
        }
        for (k, (x, &sum)) in xs.iter().zip(&sums).take(g).enumerate() {
            let (i1, i2, i3) = a.unravel_row(r0 + k);
            // SAFETY: same shapes for a and dst; w's and b's indices are reduced modulo
            // their shapes (the builder checked they divide a's); the dst row is this
            // chunk's.
            unsafe {
                let out = d.row_f32_mut(i1, i2, i3);
                let scale = center(out, x, sum as f32 / n as f32, eps);
                let wr = w.load_row(i1 % w.ne[1], i2 % w.ne[2], i3 % w.ne[3], sw);
                match bias {
                    Some(b) => {
                        let br = b.load_row(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3], sb);
                        for ((o, &wv), &bv) in out.iter_mut().zip(wr).zip(br) {
                            *o = (*o * scale) * wv + bv;
                        }
                    }
                    None => {
                        for (o, &wv) in out.iter_mut().zip(wr) {
                            *o = (*o * scale) * wv;
                        }
                    }
                }
            }
        }
        r0 += g;
    }
}

/// ggml's LayerNorm middle step for one row of `out.len()` values (`x` at least as long):
/// `out = x − mean`, and the scale
/// `1/√(var + eps)` with the variance summed as ggml sums it (f32 squares sixteen at a time,
/// `reduce16`, added in f64; the tail one by one).
fn center(out: &mut [f32], x: &[f32], mean: f32, eps: f32) -> f32 {
    let n = out.len();
    let x = &x[..n];
    let mut sum2 = 0f64;
    let np = n & !15;
    for (o, v) in out[..np].chunks_exact_mut(16).zip(x[..np].chunks_exact(16)) {
        let mut sq = [0f32; 16];
        for ((o, &v), s) in o.iter_mut().zip(v).zip(&mut sq) {
            let c = v - mean;
            *o = c;
            *s = c * c;
        }
        sum2 += reduce16(&sq) as f64;
    }
    for (o, &v) in out[np..].iter_mut().zip(&x[np..]) {
        let c = v - mean;
        *o = c;
        sum2 += (c * c) as f64;
    }
    let variance = (sum2 / n as f64) as f32;
    1.0 / (variance + eps).sqrt()
}

/// RMS norm of each row (no weight).
///
/// # Safety
/// See [`crate::kernels::compute_chunk`].
pub(crate) unsafe fn rms_norm(
    task: &Task,
    eps: f32,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) {
    let (d, a) = (&task.dst, task.s0());
    let n = a.ne[0];
    for r in split_range(a.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = a.unravel_row(r);
        // SAFETY: same shapes; dst row owned by this thread.
        unsafe {
            let x = a.load_row(i1, i2, i3, work.scratch);
            let out = d.row_f32_mut(i1, i2, i3);
            let scale = rms_scale(x, n, eps);
            for (o, &v) in out.iter_mut().zip(x) {
                *o = v * scale;
            }
        }
    }
}

/// `1 / √(mean(x²) + eps)` of a row of `n` values (squares summed in f64, in order).
#[inline]
fn rms_scale(x: &[f32], n: usize, eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / n as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// `rms_norm(a) · w`: each value is `(x · scale) · w`, rounded to f32 at the same two steps
/// as the unfused `rms_norm` then `mul`, so the results are the same bits. w's rows are
/// broadcast (indices modulo its shape).
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; dst is a fresh dense F32 tensor of a's shape, and
/// the scratch holds `2 · a.ne[0]` values.
pub(crate) unsafe fn rms_norm_mul(
    task: &Task,
    eps: f32,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) {
    let (d, a, w) = (&task.dst, task.s0(), task.s1());
    let n = a.ne[0];
    let (sa, sw) = work.scratch.split_at_mut(n);
    for r in split_range(a.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = a.unravel_row(r);
        // SAFETY: same shapes for a and dst; w's indices are reduced modulo its shape (the
        // builder checked it divides a's); the dst row is owned by this chunk.
        unsafe {
            let x = a.load_row(i1, i2, i3, sa);
            let g = w.load_row(i1 % w.ne[1], i2 % w.ne[2], i3 % w.ne[3], sw);
            let out = d.row_f32_mut(i1, i2, i3);
            let scale = rms_scale(x, n, eps);
            for ((o, &v), &gv) in out.iter_mut().zip(x).zip(g) {
                *o = (v * scale) * gv;
            }
        }
    }
}
