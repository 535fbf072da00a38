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
    let from = traits(vdt)
        .from_f32
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
    for i in split_range(n, nrb, rb) {
        // SAFETY: i < a.ne[1] and (a2, a3) within a's outer shape (ggml's broadcast rule,
        // checked by the builder); the dst elements of this tile belong to this chunk.
        unsafe {
            let arow = std::slice::from_raw_parts(a.row_ptr(i, a2, a3) as *const u8, rs_a);
            for j in cols.clone() {
                let v = dot(k, arow, b_row(j));
                *(d.data.add(d.offset(i, j, i2, i3)) as *mut f32) = v;
            }
        }
    }
}
