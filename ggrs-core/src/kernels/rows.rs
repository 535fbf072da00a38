//! Row gathers and scatters: `get_rows` (embedding lookup) and `set_rows` (cache writes).

use crate::error::{Error, Result};
use crate::kernels::{split_range, RawTensor, Task, Work};

/// Reads index `(i, j, k)` of an i32 tensor.
///
/// # Safety
/// The index lies within `ids.ne`.
#[inline]
unsafe fn read_id(ids: &RawTensor, i: usize, j: usize, k: usize) -> i32 {
    // SAFETY: forwarded from the caller; i32 data is 4-byte aligned.
    unsafe { *(ids.data.add(ids.offset(i, j, k, 0)) as *const i32) }
}

/// `id` as a row index of a table of `rows` rows, or [`Error::IndexOutOfRange`].
pub(crate) fn check_id(op: &'static str, id: i32, rows: usize) -> Result<usize> {
    if id < 0 || id as usize >= rows {
        return Err(Error::IndexOutOfRange {
            op,
            index: id as i64,
            limit: rows,
        });
    }
    Ok(id as usize)
}

/// `dst[:, i, j, k] = a[:, ids[i, j, k], j, k]`, converted to f32.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`].
pub(crate) unsafe fn get_rows(task: &Task, chunk: usize, n_chunks: usize) -> Result<()> {
    let (d, a, ids) = (&task.dst, task.s0(), task.s1());
    let to_f32 = crate::types::traits(a.dtype)
        .to_f32
        .expect("builder admits only types with an f32 conversion");
    let row_bytes = a.dtype.row_size(a.ne[0]);
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i, j, k) = d.unravel_row(r);
        // SAFETY: (i, j, k) is within ids (dst's rows are ids' elements); the id is checked
        // against a's row count before the row is read; dst row owned by this thread.
        unsafe {
            let id = check_id("GET_ROWS", read_id(ids, i, j, k), a.ne[1])?;
            let src = std::slice::from_raw_parts(a.row_ptr(id, j, k) as *const u8, row_bytes);
            to_f32(src, d.row_f32_mut(i, j, k));
        }
    }
    Ok(())
}

/// `dst[:, ids[i, j % m2, k % m3], j, k] = src[:, i, j, k]`, converted to dst's type.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; planned as a single chunk, so no two threads write
/// dst.
pub(crate) unsafe fn set_rows(
    task: &Task,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) -> Result<()> {
    let d = &task.dst;
    let (src, ids) = (task.s1(), task.src[2].as_ref().expect("set_rows has ids"));
    // As ggml's CPU `from_float`: Q8_0 rows with its x86 rounding (halves to even), the other
    // types with their reference conversion.
    let from_f32 = crate::kernels::ggml_arith::activation_quantizer(d.dtype)
        .or(crate::types::traits(d.dtype).from_f32)
        .expect("builder admits only types with an f32 conversion");
    let row_bytes = d.dtype.row_size(d.ne[0]);
    for r in split_range(src.nrows(), n_chunks, chunk) {
        let (i, j, k) = src.unravel_row(r);
        // SAFETY: (i, j % m2, k % m3) is within ids; the id is checked against dst's row
        // count; j, k are within dst (same outer shape as src, checked by the builder);
        // src and dst do not share storage (checked by the builder).
        unsafe {
            let id = check_id(
                "SET_ROWS",
                read_id(ids, i, j % ids.ne[1], k % ids.ne[2]),
                d.ne[1],
            )?;
            let values = src.load_row(i, j, k, work.scratch);
            let out = std::slice::from_raw_parts_mut(d.row_ptr(id, j, k), row_bytes);
            from_f32(values, out);
        }
    }
    Ok(())
}
