//! Ops of recurrent (state-space and linear-attention) layers: the short causal convolution
//! of Mamba, LFM2 and the gated delta-net (`ssm_conv`).

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::ops::shape_err;
use crate::tensor::Tensor;

impl Context {
    /// The causal depthwise convolution over time of recurrent layers (ggml's
    /// `ggml_ssm_conv`): each channel `i` of sequence `s` at token `t` is
    /// `Σ_{k<d_conv} sx[t + k, i, s] · c[k, i]`, summed in order of `k` in f32 as ggml's CPU
    /// kernel is compiled for x86-64 (the products of whole groups of four rounded, the last
    /// `d_conv % 4` fused into the sum), so the output at `t` sees the `d_conv − 1` columns
    /// before it and its own.
    ///
    /// - `sx`: `[d_conv − 1 + n_t, d_inner, n_s]` f32, dense rows with `nb[1] = ne[0]·4` (the
    ///   carried state — the last `d_conv − 1` inputs of the sequence — concatenated on
    ///   axis 0 with the `n_t` new inputs of each channel);
    /// - `c`: `[d_conv, d_inner]` f32, dense rows (one kernel per channel);
    /// - result: `[d_inner, n_t, n_s]` f32.
    pub fn ssm_conv(&mut self, sx: Tensor, c: Tensor) -> Result<Tensor> {
        let ms = self.expect_type("SSM_CONV", "sx", sx, &[DType::F32])?;
        let (ns, sb) = (ms.ne, ms.nb);
        let mc = self.expect_type("SSM_CONV", "c", c, &[DType::F32])?;
        let (nc, cb) = (mc.ne, mc.nb);
        if nc[2] != 1 || nc[3] != 1 || ns[3] != 1 || nc[0] == 0 || ns[1] != nc[1] {
            return Err(shape_err(
                "SSM_CONV",
                ns,
                nc,
                "sx must be [d_conv - 1 + n_t, d_inner, n_s] and c [d_conv, d_inner]",
            ));
        }
        if ns[0] < nc[0] - 1 {
            return Err(shape_err(
                "SSM_CONV",
                ns,
                nc,
                "sx must hold at least d_conv - 1 columns (the carried state)",
            ));
        }
        if sb[0] != 4 || (ns[1] > 1 && sb[1] != ns[0] * 4) || cb[0] != 4 {
            return Err(Error::InvalidArgument {
                op: "SSM_CONV",
                detail: "sx must have dense rows with nb[1] = ne[0]·4 and c dense rows".into(),
            });
        }
        let n_t = ns[0] + 1 - nc[0];
        self.new_tensor_with(
            DType::F32,
            [nc[1], n_t, ns[2], 1],
            Op::SsmConv,
            [Some(sx), Some(c)],
        )
    }
}
