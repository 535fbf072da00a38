//! Fused ops: one node (one pass over memory, one synchronisation of the threads) where
//! the unfused graph takes two. Each gives the same bits as the ops it replaces: the
//! per-element arithmetic and its rounding steps are the same.

use crate::context::Context;
use crate::dtype::DType;
use crate::error::Result;
use crate::op::Op;
use crate::ops::{can_repeat, shape_err};
use crate::tensor::Tensor;

impl Context {
    /// RMS normalisation of each row times a weight, `rms_norm(a, eps) · w` in one node:
    /// `out[i] = (a[i] / √(mean(a_row²) + eps)) · w[i]`.
    ///
    /// a: `[n0, n1, n2, n3]` f32 (any strides); w: `[n0, w1, w2, w3]` f32 with `w1 | n1`,
    /// `w2 | n2`, `w3 | n3` (broadcast as in [`Context::mul`]; usually a `[n0]` vector)
    /// → `[n0, n1, n2, n3]` f32. Same bits as `mul(rms_norm(a, eps), w)`.
    pub fn rms_norm_mul(&mut self, a: Tensor, w: Tensor, eps: f32) -> Result<Tensor> {
        let na = self.expect_type("RMS_NORM_MUL", "a", a, &[DType::F32])?.ne;
        let nw = self.expect_type("RMS_NORM_MUL", "w", w, &[DType::F32])?.ne;
        if nw[0] != na[0] || !can_repeat(&nw, &na) {
            return Err(shape_err(
                "RMS_NORM_MUL",
                na,
                nw,
                "w must be [a.ne[0], w1, w2, w3] with each w_i dividing a.ne[i]",
            ));
        }
        self.new_tensor_with(
            DType::F32,
            na,
            Op::RmsNormMul { eps },
            [Some(a), Some(w), None],
        )
    }
}
