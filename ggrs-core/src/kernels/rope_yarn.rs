//! Rotary embedding with YaRN's blend and a magnitude factor (`Context::rope_yarn`): the
//! cos/sin table as ggml's `rope_yarn` computes it, the rotation of [`super::nn`]'s rope.

use crate::kernels::nn::rotate_rows;
use crate::kernels::{Task, Work};
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
    let theta_scale = freq_base.powf(-2.0 / n_dims as f32);
    let mscale = match ext_factor != 0.0 {
        true => attn_factor * (1.0 + 0.1 * (1.0 / freq_scale).ln()),
        false => attn_factor,
    };
    let table = |p: i32, factors: Option<&[f32]>, cache: &mut [f32]| {
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
    };
    // SAFETY: forwarded caller guarantee.
    unsafe { rotate_rows(task, chunk, n_chunks, work, (n_dims, mode), table) };
}
