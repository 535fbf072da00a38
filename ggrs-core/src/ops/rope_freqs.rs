//! Rotary position embedding over a section of each row, with caller-given frequencies.

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::{Op, RopeMode};
use crate::ops::shape_err;
use crate::tensor::Tensor;

impl Context {
    /// Rotary position embedding of the dimensions `offset .. offset + n_rot` of each row,
    /// where `n_rot = 2 · freqs.ne[0]`, with an explicit table of per-pair frequencies
    /// (instead of [`Context::rope_ext`]'s `base^(−2i/n_dims)`). This covers rotary schemes
    /// that rotate several sections of a head with different position streams (GLM's 2-D
    /// positions: call it once per section) or use rounded or learned frequencies.
    ///
    /// Shapes: a: `[n0, n1, n_tokens, n3]` f32, any strides (a view into a fused projection
    /// is fine); pos: `[n_tokens]` i32 (dense); freqs: `[n_rot / 2]`
    /// f32 (dense), `offset + n_rot ≤ n0` → `[n0, n1, n_tokens, n3]` f32, contiguous.
    ///
    /// For token t at position p, pair i (`i < n_rot/2`) turns by `θ = p · freqs[i]` (the
    /// product in f32, then `cos θ` and `sin θ` in f32):
    /// `(x0, x1) → (x0·cos θ − x1·sin θ, x1·cos θ + x0·sin θ)`, where `(x0, x1)` is
    /// `(x[o + i], x[o + i + n_rot/2])` in [`RopeMode::Neox`] (rotate-half pairing) and
    /// `(x[o + 2i], x[o + 2i + 1])` in [`RopeMode::Normal`], `o = offset`. Every dimension
    /// outside the section is copied.
    pub fn rope_freqs(
        &mut self,
        a: Tensor,
        pos: Tensor,
        freqs: Tensor,
        offset: usize,
        mode: RopeMode,
    ) -> Result<Tensor> {
        const OP: &str = "ROPE_FREQS";
        let na = self.expect_type(OP, "a", a, &[DType::F32])?.ne;
        let mp = self.expect_type(OP, "pos", pos, &[DType::I32])?;
        let (np, p_dense) = (mp.ne, mp.rows_contiguous());
        if np[0] != na[2] || np[1] * np[2] * np[3] != 1 {
            return Err(shape_err(
                OP,
                na,
                np,
                "pos must be [a.ne[2]] (one position per token)",
            ));
        }
        let mf = self.expect_type(OP, "freqs", freqs, &[DType::F32])?;
        let (nf, f_dense) = (mf.ne, mf.rows_contiguous());
        if nf[1] * nf[2] * nf[3] != 1 || nf[0] == 0 {
            return Err(shape_err(
                OP,
                na,
                nf,
                "freqs must be [n_rot / 2], one frequency per rotated pair",
            ));
        }
        for (t, dense) in [(pos, p_dense), (freqs, f_dense)] {
            if !dense {
                return Err(Error::Layout {
                    op: OP,
                    name: self.display_name(t),
                    required: "contiguous",
                });
            }
        }
        let n_rot = 2 * nf[0];
        if offset.checked_add(n_rot).is_none_or(|end| end > na[0]) {
            return Err(Error::InvalidArgument {
                op: OP,
                detail: format!(
                    "the rotated section {offset}..{} (offset + 2·freqs.ne[0]) must lie within \
                     the row of {} values",
                    offset.saturating_add(n_rot),
                    na[0]
                ),
            });
        }
        self.new_tensor_with(
            DType::F32,
            na,
            Op::RopeFreqs { offset, mode },
            [Some(a), Some(pos), Some(freqs)],
        )
    }
}
