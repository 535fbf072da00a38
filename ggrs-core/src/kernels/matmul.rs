//! `mul_mat`: `dst[i, j] = Σ_k a[k, i] · b[k, j]`, a broadcast over axes 2 and 3.
//!
//! INIT converts every row of `b` (f32, any strides) to the weight type's `vec_dot_type`
//! into the shared work buffer, rows split across threads (skipped when `b` already is dense
//! f32 and the weight pairs with f32). COMPUTE splits the output into tiles of weight rows ×
//! activation columns per batch; each output element is one dot product computed by one
//! thread, so results do not depend on the thread count.

use half::{bf16, f16};

use crate::dtype::DType;
use crate::kernels::{split_range, vec, Task, TaskPlan, Work};
use crate::tensor::TensorMeta;
use crate::types::traits;

/// A dot product of `n` values: a row of the weight type against a row of its
/// `vec_dot_type`, both as bytes.
pub type VecDotFn = fn(n: usize, a: &[u8], b: &[u8]) -> f32;

fn dot_f32(n: usize, a: &[u8], b: &[u8]) -> f32 {
    vec::dot_f32(&bytemuck::cast_slice(a)[..n], &bytemuck::cast_slice(b)[..n])
}

fn dot_f16(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let a: &[f16] = bytemuck::cast_slice(a);
    let b: &[f16] = bytemuck::cast_slice(b);
    vec::dot_f16(&a[..n], &b[..n])
}

fn dot_bf16(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let a: &[bf16] = bytemuck::cast_slice(a);
    let b: &[bf16] = bytemuck::cast_slice(b);
    vec::dot_bf16(&a[..n], &b[..n])
}

/// The dot product used when `dtype` is the weight type, if there is one.
pub fn vec_dot(dtype: DType) -> Option<VecDotFn> {
    match dtype {
        DType::F32 => Some(dot_f32),
        DType::F16 => Some(dot_f16),
        DType::BF16 => Some(dot_bf16),
        other => crate::quants::vec_dot(other),
    }
}

/// True when `mul_mat` accepts `dtype` as its weight operand.
pub fn supports(dtype: DType) -> bool {
    vec_dot(dtype).is_some() && traits(traits(dtype).vec_dot_type).from_f32.is_some()
}

fn needs_conversion(a: DType, b: &TensorMeta) -> bool {
    !(traits(a).vec_dot_type == DType::F32 && b.rows_contiguous())
}

/// Rows of `dst` (weight rows) and columns (activation rows) per tile at most.
const TILE: usize = 16;

fn grid(n: usize, m: usize, batches: usize, nth: usize) -> (usize, usize) {
    let ncb = m.div_ceil(TILE).max(1);
    let want = (nth * 4).div_ceil(ncb * batches).max(1);
    let nrb = want.min(n.div_ceil(TILE)).max(1);
    (nrb, ncb)
}

pub(crate) fn plan(a: &TensorMeta, b: &TensorMeta, dst: &TensorMeta, nth: usize) -> TaskPlan {
    let k = a.ne[0];
    let conv = needs_conversion(a.dtype, b);
    let vdt = traits(a.dtype).vec_dot_type;
    let batches = dst.ne[2] * dst.ne[3];
    let (nrb, ncb) = grid(dst.ne[0], dst.ne[1], batches, nth);
    TaskPlan {
        n_chunks: (batches * nrb * ncb).max(1),
        init: conv,
        finalize: false,
        work_shared: if conv { vdt.row_size(k) * b.nrows() } else { 0 },
        scratch_f32: if conv { k + 16 } else { 0 },
        tiles: (nrb, ncb),
    }
}

/// Converts b's rows to the vec-dot type.
///
/// # Safety
/// See [`crate::kernels::init`]; the shared buffer holds `b.nrows()` converted rows.
pub(crate) unsafe fn init(task: &Task, ith: usize, nth: usize, work: &mut Work) {
    let (a, b) = (task.s0(), task.s1());
    let vdt = traits(a.dtype).vec_dot_type;
    // Q8_0 activations: ggml's run-time (x86) quantizer, so codes match llama.cpp's (see
    // `ggml_arith`). Other block types: the fastest quantizer, whose bytes are the
    // reference quantizer's.
    let from = crate::kernels::ggml_arith::activation_quantizer(vdt)
        .or_else(|| crate::quants::dispatch::activation_quantizer(vdt))
        .or(traits(vdt).from_f32)
        .expect("supports() checked the vec-dot type converts from f32");
    let rs = vdt.row_size(a.ne[0]);
    for r in split_range(b.nrows(), nth, ith) {
        let (j, i2, i3) = b.unravel_row(r);
        // SAFETY: r < b.nrows(); slot r of the shared buffer is written by this thread only
        // (rows are split by thread).
        unsafe {
            let x = b.load_row(j, i2, i3, work.scratch);
            let out = std::slice::from_raw_parts_mut(work.shared.add(r * rs), rs);
            from(x, out);
        }
    }
}

/// One tile of the output.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; INIT has run.
pub(crate) unsafe fn compute(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let (a, b, d) = (task.s0(), task.s1(), &task.dst);
    let _ = n_chunks;
    let k = a.ne[0];
    let (n, m) = (d.ne[0], d.ne[1]);
    let (nrb, ncb) = task.plan.tiles;
    let cb = chunk % ncb;
    let rb = (chunk / ncb) % nrb;
    let batch = chunk / (ncb * nrb);
    let (i2, i3) = (batch % d.ne[2], batch / d.ne[2]);
    // Broadcast: weight batch for output batch (i2, i3), as ggml maps it.
    let (a2, a3) = (i2 / (b.ne[2] / a.ne[2]), i3 / (b.ne[3] / a.ne[3]));
    let dot = vec_dot(a.dtype).expect("supports() checked");
    let conv = task.plan.init;
    let vdt = traits(a.dtype).vec_dot_type;
    let rs_b = vdt.row_size(k);
    let rs_a = a.dtype.row_size(k);
    let b_row = |j: usize| -> &[u8] {
        // SAFETY: j < m; with conversion, row (j, i2, i3) is slot r of the shared buffer,
        // written in INIT; without, b is dense f32 and the row lies in its span.
        unsafe {
            if conv {
                let r = j + m * (i2 + d.ne[2] * i3);
                std::slice::from_raw_parts(work.shared.add(r * rs_b), rs_b)
            } else {
                std::slice::from_raw_parts(b.row_ptr(j, i2, i3), rs_b)
            }
        }
    };
    let cols = split_range(m, ncb, cb);
    // Block types: 4 × 4 tiles of weight rows × activation columns (each weight block
    // decoded once per four columns, each activation block loaded once per four rows), then
    // 4 × 1 and 1 × 4 tiles for what is left (four independent dot products in flight). The
    // tile kernels give every element the bits of the one-element kernel of the same build,
    // so results do not depend on the tiling (or on the thread count).
    let tiles = if a.dtype.is_quantized() {
        crate::quants::dispatch::active_variant(a.dtype)
    } else {
        None
    };
    let dot = tiles.map_or(dot, |v| v.dot);
    // Weight types whose results must match llama.cpp's bit for bit (Q8_0, Q4_0, F16) use
    // ggml's x86 summation order (see `kernels::ggml_arith`): the SIMD tile kernels that
    // keep it (`quants::dispatch::SumOrder`), else ggml_arith's, one element at a time.
    let ggml_dot = crate::kernels::ggml_arith::mul_mat_dot(a, b.ne[1]);
    let (dot, tiles) = match ggml_dot {
        Some(g) => {
            let order = crate::quants::dispatch::ggml_sum_order(a.dtype, a.ne);
            match crate::quants::dispatch::active_variant_in(a.dtype, order) {
                Some(v) if a.dtype.is_quantized() => (v.dot, Some(v)),
                _ => (g, None),
            }
        }
        None => (dot, tiles),
    };
    let rows = split_range(n, nrb, rb);
    let a_row = |i: usize| -> &[u8] {
        // SAFETY: i < a.ne[1] and (a2, a3) within a's outer shape (ggml's broadcast rule,
        // checked by the builder).
        unsafe { std::slice::from_raw_parts(a.row_ptr(i, a2, a3) as *const u8, rs_a) }
    };
    // Output element (i, j) of this batch; the callers write only elements of this chunk's
    // tile, which no other chunk touches.
    let out = |i: usize, j: usize| -> *mut f32 {
        // SAFETY: i < n and j < m: the offset lies inside dst.
        unsafe { d.data.add(d.offset(i, j, i2, i3)) as *mut f32 }
    };
    let mut i = rows.start;
    if let Some(v) = tiles {
        while i + 4 <= rows.end {
            let ar = [a_row(i), a_row(i + 1), a_row(i + 2), a_row(i + 3)];
            let mut j = cols.start;
            while j + 4 <= cols.end {
                let t = (v.tile)(k, ar, [b_row(j), b_row(j + 1), b_row(j + 2), b_row(j + 3)]);
                for (r, row) in t.iter().enumerate() {
                    for (c, &val) in row.iter().enumerate() {
                        // SAFETY: an element of this chunk's tile (see `out`).
                        unsafe { *out(i + r, j + c) = val };
                    }
                }
                j += 4;
            }
            for j in j..cols.end {
                let r = (v.rows4)(k, ar, b_row(j));
                for (t, &val) in r.iter().enumerate() {
                    // SAFETY: an element of this chunk's tile (see `out`).
                    unsafe { *out(i + t, j) = val };
                }
            }
            i += 4;
        }
    }
    for i in i..rows.end {
        let arow = a_row(i);
        let mut j = cols.start;
        if let Some(v) = tiles {
            while j + 4 <= cols.end {
                let r = (v.dot4)(
                    k,
                    arow,
                    [b_row(j), b_row(j + 1), b_row(j + 2), b_row(j + 3)],
                );
                for (t, &val) in r.iter().enumerate() {
                    // SAFETY: an element of this chunk's tile (see `out`).
                    unsafe { *out(i, j + t) = val };
                }
                j += 4;
            }
        }
        for j in j..cols.end {
            // SAFETY: an element of this chunk's tile (see `out`).
            unsafe { *out(i, j) = dot(k, arow, b_row(j)) };
        }
    }
}
