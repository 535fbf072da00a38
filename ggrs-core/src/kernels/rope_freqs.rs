//! Rotary embedding of a section of each row with a caller-given frequency table
//! (`Context::rope_freqs`).

use crate::dtype::DType;
use crate::kernels::{split_range, Task, Work};
use crate::op::RopeMode;

/// Rotates dimensions `offset .. offset + n_rot` of every row by `pos[token] · freqs[i]`;
/// copies the rest. Angles are the f32 product, `cos`/`sin` f32, the rotation unfused
/// (`x0·c − x1·s`, `x1·c + x0·s`, each product rounded), as a plain f32 implementation
/// computes it.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; the builder checked that pos is a dense i32 tensor
/// of `a.ne[2]` entries, freqs a dense f32 tensor of `n_rot/2` entries and that the section
/// lies within a row. The thread scratch holds at least `n_rot + a.ne[0]` values (the plan's
/// default row scratch, `2·ne0 + 16`).
pub(crate) unsafe fn rope_freqs(
    task: &Task,
    offset: usize,
    mode: RopeMode,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) {
    let (d, a, pos) = (&task.dst, task.s0(), task.s1());
    let freqs = task.src[2]
        .as_ref()
        .expect("the rope_freqs builder always sets src2 (freqs)");
    debug_assert_eq!(pos.dtype, DType::I32);
    debug_assert_eq!(freqs.dtype, DType::F32);
    let half = freqs.ne[0];
    let n_rot = 2 * half;
    let ne0 = a.ne[0];
    // SAFETY: freqs is a dense f32 tensor of `half` values that nobody writes while the
    // graph runs (it is a source of this node).
    let fr = unsafe { std::slice::from_raw_parts(freqs.data as *const f32, half) };
    debug_assert!(
        work.scratch.len() >= n_rot + ne0,
        "rope_freqs needs n_rot + ne0 values of scratch (the planner's default row scratch)"
    );
    let (cache, sx) = work.scratch.split_at_mut(n_rot);
    let mut cached: Option<usize> = None;
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: i2 < pos.ne[0] (checked by the builder), so the position read is in range;
        // a and dst have the same shape; this thread owns the dst row.
        unsafe {
            if cached != Some(i2) {
                let p = *(pos.data.add(i2 * pos.nb[0]) as *const i32) as f32;
                for (i, &f) in fr.iter().enumerate() {
                    let theta = p * f;
                    cache[2 * i] = theta.cos();
                    cache[2 * i + 1] = theta.sin();
                }
                cached = Some(i2);
            }
            let x = a.load_row(i1, i2, i3, sx);
            let out = d.row_f32_mut(i1, i2, i3);
            out[..offset].copy_from_slice(&x[..offset]);
            out[offset + n_rot..ne0].copy_from_slice(&x[offset + n_rot..ne0]);
            let xs = &x[offset..offset + n_rot];
            let os = &mut out[offset..offset + n_rot];
            for i in 0..half {
                let (c, s) = (cache[2 * i], cache[2 * i + 1]);
                let (j0, j1) = match mode {
                    RopeMode::Neox => (i, i + half),
                    RopeMode::Normal => (2 * i, 2 * i + 1),
                };
                let (x0, x1) = (xs[j0], xs[j1]);
                os[j0] = x0 * c - x1 * s;
                os[j1] = x1 * c + x0 * s;
            }
        }
    }
}
