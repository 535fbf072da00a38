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

    /// Layer normalisation of each row times a weight plus a bias, `norm(a, eps) · w + b`
    /// in one node (BERT's LayerNorm): `out[i] = ((a[i] − μ) · (1/√(σ² + eps))) · w[i] + b[i]`
    /// with [`Context::norm`]'s arithmetic.
    ///
    /// a: `[n0, n1, n2, n3]` f32 (any strides); w and b (if any): `[n0, m1, m2, m3]` f32 with
    /// each `m_i` dividing `n_i` (broadcast as in [`Context::mul`]; usually `[n0]` vectors)
    /// → `[n0, n1, n2, n3]` f32. Same bits as `add(mul(norm(a, eps), w), b)`.
    pub fn norm_mul_add(
        &mut self,
        a: Tensor,
        w: Tensor,
        b: Option<Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        let na = self.expect_type("NORM_MUL_ADD", "a", a, &[DType::F32])?.ne;
        for (name, t) in [("w", Some(w)), ("b", b)] {
            let Some(t) = t else { continue };
            let nt = self.expect_type("NORM_MUL_ADD", name, t, &[DType::F32])?.ne;
            if nt[0] != na[0] || !can_repeat(&nt, &na) {
                return Err(shape_err(
                    "NORM_MUL_ADD",
                    na,
                    nt,
                    "w and b must be [a.ne[0], m1, m2, m3] with each m_i dividing a.ne[i]",
                ));
            }
        }
        self.new_tensor_with(
            DType::F32,
            na,
            Op::NormMulAdd { eps },
            [Some(a), Some(w), b],
        )
    }
}
