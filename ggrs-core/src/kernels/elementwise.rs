//! Element-wise kernels: binary arithmetic with broadcasting, activations, SwiGLU, repeat,
//! concat and copies. All split the destination by rows.

use crate::dtype::DType;
use crate::kernels::{read_f32, split_range, write_f32, RawTensor, Task, Work};
use crate::op::Op;

#[inline(always)]
fn zip_apply(out: &mut [f32], a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) {
    if a.len() == b.len() {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    } else {
        let nb = b.len();
        for (i, (o, &x)) in out.iter_mut().zip(a).enumerate() {
            *o = f(x, b[i % nb]);
        }
    }
}

/// `dst = a ∘ b` with b broadcast (add, sub, mul, div).
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; dst is a fresh dense F32 tensor of a's shape.
pub(crate) unsafe fn binary(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let (d, a, b) = (&task.dst, task.s0(), task.s1());
    let (sa, sb) = work.scratch.split_at_mut(a.ne[0]);
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: (i1, i2, i3) is a row of dst and (same shape) of a; b's indices are reduced
        // modulo its shape. dst rows of this chunk are written by this thread only.
        unsafe {
            let out = d.row_f32_mut(i1, i2, i3);
            let ra = a.load_row(i1, i2, i3, sa);
            let rb = b.load_row(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3], sb);
            match task.op {
                Op::Add => zip_apply(out, ra, rb, |x, y| x + y),
                Op::Sub => zip_apply(out, ra, rb, |x, y| x - y),
                Op::Mul => zip_apply(out, ra, rb, |x, y| x * y),
                _ => zip_apply(out, ra, rb, |x, y| x / y),
            }
        }
    }
}

/// GELU, tanh form.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const C: f32 = 0.044_715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + C * x * x)).tanh())
}

/// `gelu(g)·u` as ggml's CPU GeGLU computes it (`ggml_vec_geglu_f32` with `GGML_GELU_FP16`,
/// ggml's default): 0 for `g ≤ −10`, `g·u` for `g ≥ 10`, otherwise GELU looked up at `g`
/// rounded to f16, its value rounded to f16 (ggml's table holds `f16(gelu(h))` for every f16
/// `h`), times `u`.
#[inline(always)]
pub(crate) fn geglu_ggml(g: f32, u: f32) -> f32 {
    geglu_ggml_with(g, u, gelu_f16_table())
}

/// [`geglu_ggml`] with the table given (`gelu_f16_table()`).
#[inline(always)]
pub(crate) fn geglu_ggml_with(g: f32, u: f32, table: &[u16]) -> f32 {
    if g <= -10.0 {
        0.0
    } else if g >= 10.0 {
        g * u
    } else {
        let h = half::f16::from_f32(g).to_bits();
        half::f16::from_bits(table[h as usize]).to_f32() * u
    }
}

/// ggml's GELU table: the bits of `f16(gelu(h))` for every f16 `h` (by its bits), computed
/// once, on first use (65,536 evaluations of [`gelu_table_entry`], about a millisecond), so
/// that GeGLU and ggml's GELU cost a lookup per element rather than a `tanh`.
pub(crate) fn gelu_f16_table() -> &'static [u16] {
    static TABLE: std::sync::OnceLock<Box<[u16]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| {
                let h = half::f16::from_bits(bits).to_f32();
                half::f16::from_f32(gelu_table_entry(h)).to_bits()
            })
            .collect()
    })
}

/// The value ggml's GELU table holds for `x` before its rounding to f16: the tanh form as
/// GCC compiles ggml's `ggml_gelu_f32` for x86-64 with FMA, which contracts
/// `1 + 0.044715·x·x` into one fused multiply-add (unfused, about one table entry in a
/// thousand lands on the neighbouring f16, ~1e-3 relative).
#[inline(always)]
fn gelu_table_entry(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const C: f32 = 0.044_715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (C * x).mul_add(x, 1.0)).tanh())
}

#[inline(always)]
fn map(out: &mut [f32], a: &[f32], f: impl Fn(f32) -> f32) {
    for (o, &x) in out.iter_mut().zip(a) {
        *o = f(x);
    }
}

/// `dst = H·a / √len` on every run of `len` values of each row (see `Context::hadamard`).
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; dst is a fresh dense F32 tensor of a's shape.
pub(crate) unsafe fn hadamard(
    task: &Task,
    len: usize,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) {
    let (d, a) = (&task.dst, task.s0());
    let scale = 1.0 / (len as f32).sqrt();
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: row (i1, i2, i3) exists in dst and a (same shape); this thread owns it in dst.
        unsafe {
            let out = d.row_f32_mut(i1, i2, i3);
            let x = a.load_row(i1, i2, i3, work.scratch);
            map(out, x, |v| v * scale);
        }
        // SAFETY: as above.
        let out = unsafe { d.row_f32_mut(i1, i2, i3) };
        for run in out.chunks_exact_mut(len) {
            fwht_butterflies(run);
        }
    }
}

/// The butterflies of ggml's `fwht` on one run (a power of two long): for strides 1, 2, 4,
/// …, `(x[i], x[i + stride]) ← (x[i] + x[i + stride], x[i] − x[i + stride])`.
fn fwht_butterflies(x: &mut [f32]) {
    let n = x.len();
    let mut len = 1;
    while len < n {
        for i in (0..n).step_by(2 * len) {
            for j in i..i + len {
                let (u, v) = (x[j], x[j + len]);
                x[j] = u + v;
                x[j + len] = u - v;
            }
        }
        len <<= 1;
    }
}

/// `dst = f(a)` element-wise (scale, square, square root, SiLU, GELU, tanh, ReLU).
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; dst is a fresh dense F32 tensor of a's shape.
pub(crate) unsafe fn unary(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let (d, a) = (&task.dst, task.s0());
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: row (i1, i2, i3) exists in dst and a (same shape); this thread owns it in dst.
        unsafe {
            let out = d.row_f32_mut(i1, i2, i3);
            let x = a.load_row(i1, i2, i3, work.scratch);
            match task.op {
                Op::Scale { s } => map(out, x, |v| v * s),
                Op::Sqr => map(out, x, |v| v * v),
                Op::Sqrt => map(out, x, f32::sqrt),
                // ggml's vectorised SiLU (see `ggml_arith`), so results match llama.cpp's.
                Op::Silu => crate::kernels::ggml_arith::swiglu_row(out, x, None),
                Op::Gelu => map(out, x, gelu),
                Op::Tanh => map(out, x, f32::tanh),
                _ => map(out, x, |v| v.max(0.0)),
            }
        }
    }
}

/// SwiGLU: `silu(g)·u` from the halves of src0, or from src0 and src1.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`].
pub(crate) unsafe fn swiglu(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let d = &task.dst;
    let n = d.ne[0];
    let (s0, s1) = work.scratch.split_at_mut(task.s0().ne[0]);
    // One row in several chunks: chunk c takes a piece of whole groups of 16 (the last one
    // also the tail), so every element goes through the same path as in the whole row.
    // Otherwise chunk c takes whole rows.
    let (rows, piece) = if d.nrows() == 1 && n_chunks > 1 {
        let groups = split_range(n / 16, n_chunks, chunk);
        let end = if groups.end == n / 16 {
            n
        } else {
            16 * groups.end
        };
        (0..1, 16 * groups.start..end)
    } else {
        (split_range(d.nrows(), n_chunks, chunk), 0..n)
    };
    for r in rows {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: rows in range for dst and the sources (same row shape); dst row owned.
        unsafe {
            let out = d.row_f32_mut(i1, i2, i3);
            let (g, u) = match &task.src[1] {
                None => {
                    let x = task.s0().load_row(i1, i2, i3, s0);
                    (&x[..n], &x[n..2 * n])
                }
                Some(b) => (
                    task.s0().load_row(i1, i2, i3, s0),
                    b.load_row(i1, i2, i3, s1),
                ),
            };
            // ggml's vectorised SiLU (see `ggml_arith`), so results match llama.cpp's.
            let p = piece.clone();
            crate::kernels::ggml_arith::swiglu_row(&mut out[p.clone()], &g[p.clone()], Some(&u[p]));
        }
    }
}

/// GeGLU: `gelu(g)·u` from src0 and src1 (see [`geglu_ggml`]), whole rows per chunk.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; dst is a fresh dense F32 tensor of the sources'
/// shape.
pub(crate) unsafe fn geglu(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::isa() >= crate::cpu::Isa::Avx2 {
        let table = gelu_f16_table();
        // SAFETY: forwarded; the CPU has AVX2 and F16C (`isa()`), the table one entry per f16.
        return unsafe {
            glu_rows_with(task, chunk, n_chunks, work, |out, g, u| {
                let done = crate::kernels::x86::f16::geglu_table(out, g, u, table);
                for ((o, &g), &u) in out[done..].iter_mut().zip(&g[done..]).zip(&u[done..]) {
                    *o = geglu_ggml_with(g, u, table);
                }
            })
        };
    }
    // SAFETY: forwarded.
    unsafe { glu_rows(task, chunk, n_chunks, work, geglu_ggml) }
}

/// gpt-oss's clamped SwiGLU of src0 (gate) and src1 (up), see [`swiglu_oai_ggml`].
///
/// # Safety
/// As [`geglu`].
pub(crate) unsafe fn swiglu_oai(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let Op::SwigluOai { alpha, limit } = task.op else {
        return;
    };
    // SAFETY: forwarded.
    unsafe {
        glu_rows(task, chunk, n_chunks, work, |g, u| {
            swiglu_oai_ggml(g, u, alpha, limit)
        })
    }
}

/// `dst = f(src0, src1)` element by element, whole rows per chunk.
///
/// # Safety
/// As [`geglu`]; the node has a second source of src0's shape.
#[inline(always)]
unsafe fn glu_rows(
    task: &Task,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
    f: impl Fn(f32, f32) -> f32,
) {
    // SAFETY: forwarded.
    unsafe {
        glu_rows_with(task, chunk, n_chunks, work, |out, g, u| {
            for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
                *o = f(g, u);
            }
        })
    }
}

/// [`glu_rows`] with a function of whole rows: `f(out, gate, up)`.
///
/// # Safety
/// As [`glu_rows`].
unsafe fn glu_rows_with(
    task: &Task,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
    f: impl Fn(&mut [f32], &[f32], &[f32]),
) {
    let d = &task.dst;
    let n0 = task.s0().ne[0];
    let (s0, s1) = work.scratch.split_at_mut(n0);
    // No second source (GELU alone, `Context::gelu_ggml`): the up values are ones.
    let b = task.src[1].as_ref();
    if b.is_none() {
        s1[..n0].fill(1.0);
    }
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: rows in range for dst and the sources (same shape); dst row owned.
        unsafe {
            let out = d.row_f32_mut(i1, i2, i3);
            let g = task.s0().load_row(i1, i2, i3, s0);
            let u = match b {
                Some(b) => b.load_row(i1, i2, i3, s1),
                None => &s1[..n0],
            };
            f(out, g, u);
        }
    }
}

/// gpt-oss's clamped SwiGLU of one gate value `g` and up value `u`, in the order of ggml's
/// CPU kernel (`ggml_compute_forward_swiglu_oai_f32`, scalar: nothing there is contracted
/// into an FMA): `x = min(g, limit)`, `y = clamp(u, −limit, limit)`,
/// `(x / (1 + exp(alpha·(−x)))) · (y + 1)`.
#[inline(always)]
pub(crate) fn swiglu_oai_ggml(g: f32, u: f32, alpha: f32, limit: f32) -> f32 {
    // As C's std::min / std::clamp: a NaN gate or up value passes through.
    let x = if limit < g { limit } else { g };
    let y = if u < -limit {
        -limit
    } else if limit < u {
        limit
    } else {
        u
    };
    let glu = x / (1.0 + (alpha * -x).exp());
    glu * (y + 1.0)
}

/// `dst[:, i1, i2] = a[:, i1, i2] + b[:, ids[i1, i2]]` (ggml's `add_id`).
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; the builder checked the shapes (ids `[a.ne[1],
/// a.ne[2]]` I32, b `[a.ne[0], n_b]`).
pub(crate) unsafe fn add_id(
    task: &Task,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) -> crate::error::Result<()> {
    let (d, a, b) = (&task.dst, task.s0(), task.s1());
    let ids = task.src[2]
        .as_ref()
        .expect("the builder gives add_id its ids");
    let (sa, sb) = work.scratch.split_at_mut(a.ne[0]);
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: (i1, i2) lies within ids (its shape is a's rows); the id is checked against
        // b's row count before its row is read; dst row owned by this thread.
        unsafe {
            let raw = *(ids.data.add(ids.offset(i1, i2, 0, 0)) as *const i32);
            let id = crate::kernels::rows::check_id("ADD_ID", raw, b.ne[1])?;
            let out = d.row_f32_mut(i1, i2, i3);
            let ra = a.load_row(i1, i2, i3, sa);
            let rb = b.load_row(id, 0, 0, sb);
            zip_apply(out, ra, rb, |x, y| x + y);
        }
    }
    Ok(())
}

/// Repeat: `dst[i] = a[i mod a.ne]`.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`].
pub(crate) unsafe fn repeat(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let (d, a) = (&task.dst, task.s0());
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: a's indices are reduced modulo its shape; dst row owned by this thread.
        unsafe {
            let out = d.row_f32_mut(i1, i2, i3);
            let x = a.load_row(i1 % a.ne[1], i2 % a.ne[2], i3 % a.ne[3], work.scratch);
            for (k, o) in out.iter_mut().enumerate() {
                *o = x[k % x.len()];
            }
        }
    }
}

/// Concat along `dim`.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`].
pub(crate) unsafe fn concat(
    task: &Task,
    dim: usize,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) {
    let (d, a, b) = (&task.dst, task.s0(), task.s1());
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: every index is checked against a's extent along `dim` before choosing the
        // source, so reads stay in range; dst row owned by this thread.
        unsafe {
            let out = d.row_f32_mut(i1, i2, i3);
            if dim == 0 {
                let (sa, sb) = work.scratch.split_at_mut(a.ne[0]);
                let ra = a.load_row(i1, i2, i3, sa);
                let rb = b.load_row(i1, i2, i3, sb);
                out[..ra.len()].copy_from_slice(ra);
                out[ra.len()..].copy_from_slice(rb);
            } else {
                let mut idx = [0, i1, i2, i3];
                let src = if idx[dim] < a.ne[dim] {
                    a
                } else {
                    idx[dim] -= a.ne[dim];
                    b
                };
                let x = src.load_row(idx[1], idx[2], idx[3], work.scratch);
                out.copy_from_slice(x);
            }
        }
    }
}

/// Copies row `(i1, i2, i3)` of `s` into row `(j1, j2, j3)` of `d`, converting the type.
///
/// # Safety
/// Both rows exist and have `s.ne[0]` elements; the destination row is owned by this thread.
unsafe fn copy_row(
    s: &RawTensor,
    (i1, i2, i3): (usize, usize, usize),
    d: &RawTensor,
    (j1, j2, j3): (usize, usize, usize),
    scratch: &mut [f32],
) {
    let n = s.ne[0];
    // SAFETY: forwarded from the caller.
    unsafe {
        let sp = s.row_ptr(i1, i2, i3);
        let dp = d.row_ptr(j1, j2, j3);
        if s.dtype == d.dtype && s.dense_rows() && d.dense_rows() {
            std::ptr::copy_nonoverlapping(sp, dp, s.dtype.row_size(n));
        } else if s.dtype == d.dtype {
            let ts = s.dtype.type_size();
            for i0 in 0..n {
                std::ptr::copy_nonoverlapping(sp.add(i0 * s.nb[0]), dp.add(i0 * d.nb[0]), ts);
            }
        } else {
            let x = s.load_row(i1, i2, i3, scratch);
            if d.dense_rows() && d.dtype != DType::F32 {
                let bytes = std::slice::from_raw_parts_mut(dp, d.dtype.row_size(n));
                let f = crate::types::traits(d.dtype)
                    .from_f32
                    .expect("builder admits only float destinations");
                f(x, bytes);
            } else {
                for (i0, &v) in x.iter().enumerate() {
                    write_f32(dp.add(i0 * d.nb[0]), d.dtype, v);
                }
            }
        }
    }
}

/// Dup (contiguous copy / cast) and cpy (into another tensor, same element count).
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; the builder rejects copies whose source and
/// destination share storage.
pub(crate) unsafe fn copy(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let (d, s) = (&task.dst, task.s0());
    if s.ne == d.ne {
        for r in split_range(d.nrows(), n_chunks, chunk) {
            let ix = d.unravel_row(r);
            // SAFETY: same shapes, so the row exists in both; dst row owned by this thread.
            unsafe { copy_row(s, ix, d, ix, work.scratch) };
        }
        return;
    }
    // Different shapes, same element count: element k of s (logical order) goes to element
    // k of d.
    let unravel = |t: &RawTensor, k: usize| -> usize {
        let i0 = k % t.ne[0];
        let r = k / t.ne[0];
        let (i1, i2, i3) = t.unravel_row(r);
        t.offset(i0, i1, i2, i3)
    };
    for k in split_range(d.nelements(), n_chunks, chunk) {
        // SAFETY: k < nelements of both tensors, so both offsets are inside their spans;
        // element k of dst belongs to this chunk only.
        unsafe {
            let v = read_f32(s.data.add(unravel(s, k)), s.dtype);
            write_f32(d.data.add(unravel(d, k)), d.dtype, v);
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The AVX2 table GeGLU has the scalar function's bits for every f16 gate value, the
    /// values around the ±10 cut-offs, infinities and NaN, against several up values, and
    /// for a row length that leaves a scalar tail.
    #[test]
    fn geglu_rows_have_the_scalar_bits() {
        if crate::cpu::isa() < crate::cpu::Isa::Avx2 {
            eprintln!("SKIPPED: no AVX2");
            return;
        }
        let mut g: Vec<f32> = (0..=u16::MAX)
            .map(|b| half::f16::from_bits(b).to_f32())
            .collect();
        for x in [
            -10.0f32,
            10.0,
            -9.999_999,
            9.999_999,
            -10.000_001,
            10.000_001,
        ] {
            g.extend([x, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-30, -0.0]);
        }
        g.extend((0..4001).map(|i| (i as f32 - 2000.0) * 0.006_123_7));
        let table = gelu_f16_table();
        for u0 in [1.0f32, -0.37, 3.5e4, 0.0] {
            let u: Vec<f32> = (0..g.len())
                .map(|i| u0 * (1.0 + (i % 7) as f32 * 0.1))
                .collect();
            let mut out = vec![0f32; g.len()];
            // SAFETY: AVX2 (and F16C) checked above; the table has one entry per f16.
            let done = unsafe { crate::kernels::x86::f16::geglu_table(&mut out, &g, &u, table) };
            assert_eq!(done, g.len() / 8 * 8);
            for i in 0..done {
                let want = geglu_ggml(g[i], u[i]);
                assert_eq!(
                    out[i].to_bits(),
                    want.to_bits(),
                    "g {} u {}: {} against {}",
                    g[i],
                    u[i],
                    out[i],
                    want
                );
            }
        }
    }
}
