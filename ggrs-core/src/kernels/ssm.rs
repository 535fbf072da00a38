//! Kernels of the recurrent layers' ops (see `ops::ssm`).

use crate::kernels::{split_range, Task};

/// `ssm_conv`: chunk `chunk` of `n_chunks` over the channels (`d_inner`); every output is
/// its own in-order f32 sum, so the split does not change any bit.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; the builder checked the shapes and strides.
pub(crate) unsafe fn ssm_conv(task: &Task, chunk: usize, n_chunks: usize) {
    let (d, sx, c) = (&task.dst, task.s0(), task.s1());
    let (nc, n_t, n_s) = (c.ne[0], d.ne[1], d.ne[2]);
    // ggml's loop as GCC builds it for x86-64: the products of whole groups of four are
    // rounded and added in order, the last `nc % 4` fused into the sum (FMA).
    let fused_from = nc - nc % 4;
    for i in split_range(d.ne[0], n_chunks, chunk) {
        // SAFETY: i < d_inner = c.ne[1] = sx.ne[1]; the kernel row has nc values.
        let w = unsafe { c.row_f32(i, 0, 0) };
        for s in 0..n_s {
            // SAFETY: row (i, s) of sx holds d_conv − 1 + n_t values.
            let x = unsafe { sx.row_f32(i, s, 0) };
            for t in 0..n_t {
                let mut sum = 0.0f32;
                for k in 0..fused_from {
                    sum += x[t + k] * w[k];
                }
                for k in fused_from..nc {
                    sum = x[t + k].mul_add(w[k], sum);
                }
                // SAFETY: (i, t, s) lies in dst; channel i belongs to this chunk only.
                unsafe { *(d.data.add(d.offset(i, t, s, 0)) as *mut f32) = sum };
            }
        }
    }
}
