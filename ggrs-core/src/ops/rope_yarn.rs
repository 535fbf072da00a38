//! Rotary position embedding with YaRN's frequency blend and a magnitude factor (ggml's
//! `rope_ext` with `ext_factor`, `attn_factor` and the correction dimensions): the rotary of
//! long-context models (YaRN, LongRoPE's attention factor).

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::ops::nn::RopeParams;
use crate::tensor::Tensor;

/// What [`Context::rope_yarn`] adds to [`RopeParams`] (ggml's `ext_factor`, `attn_factor`
/// and the correction dimensions it derives from `n_ctx_orig`, `beta_fast`, `beta_slow`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeYarn {
    /// How much of the unscaled ("extrapolated") angle is blended back in over the
    /// correction range (1 for YaRN, 0 for none: every pair then takes the scaled angle).
    pub ext_factor: f32,
    /// Factor of every cos and sin (a magnitude scale of the rotated dimensions).
    pub attn_factor: f32,
    /// The pair range `[low, high]` over which the blend ramps from the unscaled angle (pairs
    /// `i ≤ low`) to the scaled one (pairs `i ≥ high`); see [`RopeYarn::corr_dims`].
    pub corr_dims: [f32; 2],
}

impl RopeYarn {
    /// The correction range of YaRN for `n_dims` rotated dimensions, a model trained on
    /// `n_ctx_orig` positions, base `freq_base`: the pairs that turn `beta_fast` and
    /// `beta_slow` times over `n_ctx_orig` positions, as ggml's `ggml_rope_yarn_corr_dims`
    /// computes them in f32 (`floor` of the first, `ceil` of the second, clamped to
    /// `[0, n_dims − 1]`).
    pub fn corr_dims(
        n_dims: usize,
        n_ctx_orig: usize,
        freq_base: f32,
        beta_fast: f32,
        beta_slow: f32,
    ) -> [f32; 2] {
        let dim = |n_rot: f32| {
            n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * freq_base.ln())
        };
        let start = dim(beta_fast).floor();
        let end = dim(beta_slow).ceil();
        [start.max(0.0), end.min(n_dims as f32 - 1.0)]
    }
}

impl Context {
    /// [`Context::rope_ext_factors`] with YaRN's blend and a magnitude factor, as ggml's
    /// `rope_ext` computes them. For pair i (`i < n_dims/2`) of a token at position p, with
    /// `θ_e = p · base^(−2i/n_dims) / factors[i]` (factor 1 without `factors`) and
    /// `θ_s = freq_scale · θ_e`:
    ///
    /// - `ext_factor = 0`: `θ = θ_s`, `m = attn_factor`;
    /// - otherwise `r = ext_factor · (1 − clamp((i − low) / max(0.001, high − low), 0, 1))`,
    ///   `θ = θ_s·(1 − r) + θ_e·r` and `m = attn_factor · (1 + 0.1 · ln(1 / freq_scale))`;
    ///
    /// and the pair turns by θ with cos and sin multiplied by m. `y` =
    /// `RopeYarn { ext_factor: 0.0, attn_factor: 1.0, .. }` gives [`Context::rope_ext_factors`]'
    /// values.
    ///
    /// Shapes as [`Context::rope_ext_factors`]: a: `[head_dim, n_head, n_tokens, n3]` f32;
    /// pos: `[n_tokens]` i32; factors: `[n_dims / 2]` f32, dense → same shape as a, f32.
    pub fn rope_yarn(
        &mut self,
        a: Tensor,
        pos: Tensor,
        factors: Option<Tensor>,
        p: RopeParams,
        y: RopeYarn,
    ) -> Result<Tensor> {
        let na = self.check_rope_operands(a, pos, factors, p)?;
        let finite = [y.ext_factor, y.attn_factor, y.corr_dims[0], y.corr_dims[1]]
            .iter()
            .all(|v| v.is_finite());
        if !finite || (y.ext_factor != 0.0 && p.freq_scale <= 0.0) {
            return Err(Error::InvalidArgument {
                op: "ROPE_YARN",
                detail: format!(
                    "ext_factor, attn_factor and corr_dims must be finite ({y:?}), and \
                     freq_scale = {} positive with YaRN's blend",
                    p.freq_scale
                ),
            });
        }
        self.new_tensor_with(
            DType::F32,
            na,
            Op::RopeYarn {
                n_dims: p.n_dims,
                mode: p.mode,
                freq_base: p.freq_base,
                freq_scale: p.freq_scale,
                ext_factor: y.ext_factor,
                attn_factor: y.attn_factor,
                corr_dims: y.corr_dims,
            },
            [Some(a), Some(pos), factors],
        )
    }
}
