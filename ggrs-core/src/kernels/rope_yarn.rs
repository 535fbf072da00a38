//! Rotary embedding with YaRN's blend and a magnitude factor (`Context::rope_yarn`): the
//! cos/sin table as ggml's `rope_yarn` computes it, the rotation of [`super::nn`]'s rope.

use crate::dtype::DType;
use crate::kernels::nn::rotate_row;
use crate::kernels::{split_range, Task, Work};
use crate::op::Op;

/// The blend weight of pair `i` for the correction range `[low, high]` (ggml's
/// `rope_yarn_ramp`): 1 up to `low`, 0 from `high` on, linear between.
fn ramp(low: f32, high: f32, i: usize) -> f32 {
    let y = (i as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// For each (head, token) row: the cos/sin table of the token's position, computed as ggml
/// does — `θ₀ = p`, `θ_{i+1} = θ_i · base^(−2/n_dims)` in f32, each divided by its pair's
/// factor when src2 holds them, then YaRN's blend of the scaled and unscaled angle and the
/// magnitude factor (see `Context::rope_yarn`) — reused for consecutive rows of one token.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; pos is a dense i32 tensor of `a.ne[2]` entries;
/// src2, when set, a dense f32 tensor of `n_dims / 2` entries (checked by the builder).
pub(crate) unsafe fn rope_yarn(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let Op::RopeYarn {
        n_dims,
        mode,
        freq_base,
        freq_scale,
        ext_factor,
        attn_factor,
        corr_dims: [low, high],
    } = task.op
    else {
        return;
    };
    let (d, a, pos) = (&task.dst, task.s0(), task.s1());
    let ne0 = a.ne[0];
    let theta_scale = freq_base.powf(-2.0 / n_dims as f32);
    let mscale = match ext_factor != 0.0 {
        true => attn_factor * (1.0 + 0.1 * (1.0 / freq_scale).ln()),
        false => attn_factor,
    };
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
                let mut theta = p as f32;
                for i in 0..n_dims / 2 {
                    let extrap = theta / factors.map_or(1.0, |ff| ff[i]);
                    let interp = freq_scale * extrap;
                    let t = match ext_factor != 0.0 {
                        true => {
                            let mix = ramp(low, high, i) * ext_factor;
                            interp * (1.0 - mix) + extrap * mix
                        }
                        false => interp,
                    };
                    cache[2 * i] = t.cos() * mscale;
                    cache[2 * i + 1] = t.sin() * mscale;
                    theta *= theta_scale;
                }
                cached = Some(i2);
            }
            let x = a.load_row(i1, i2, i3, sx);
            let out = d.row_f32_mut(i1, i2, i3);
            rotate_row(mode, &cache[..n_dims], &x[..ne0], &mut out[..ne0]);
        }
    }
}
