//! Graph builders: every op is a method of [`Context`](crate::Context) that checks its
//! operands and returns a new tensor (no computation happens until the graph runs).
//!
//! Each method's doc comment states its shape contract with ggml's axis order: a shape
//! `[a, b, c]` means `ne[0] = a` (innermost), `ne[1] = b`, `ne[2] = c`.

mod arith;
mod fused;
pub(crate) mod nn;
mod reduce;
mod rope_freqs;
pub(crate) mod rope_yarn;
mod ssm;
mod views;

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{Tensor, TensorMeta};

impl Context {
    /// Metadata of `t`, failing unless its type is one of `allowed`.
    pub(crate) fn expect_type(
        &self,
        op: &'static str,
        what: &str,
        t: Tensor,
        allowed: &[DType],
    ) -> Result<&TensorMeta> {
        let m = self.meta(t)?;
        if !allowed.contains(&m.dtype) {
            let names: Vec<&str> = allowed.iter().map(|d| d.name()).collect();
            return Err(Error::UnsupportedType {
                op,
                dtype: m.dtype,
                detail: format!("{what} must be {}", names.join(" or ")),
            });
        }
        Ok(m)
    }

    /// Fails unless `t`'s data can be written by an op (it lives in this context's arena or
    /// has none yet).
    pub(crate) fn expect_writable(&self, op: &'static str, t: Tensor) -> Result<()> {
        if self.meta(t)?.is_external() {
            return Err(Error::ReadOnly {
                op,
                name: self.display_name(t),
            });
        }
        Ok(())
    }
}

/// True when `b` can be tiled to `a`'s shape (each `a.ne[i]` a multiple of `b.ne[i]`).
pub(crate) fn can_repeat(b: &[usize; 4], a: &[usize; 4]) -> bool {
    (0..4).all(|i| (b[i] == 0 && a[i] == 0) || (b[i] != 0 && a[i].is_multiple_of(b[i])))
}

pub(crate) fn shape_err(
    op: &'static str,
    a: [usize; 4],
    b: [usize; 4],
    detail: impl Into<String>,
) -> Error {
    Error::ShapeMismatch {
        op,
        a,
        b,
        detail: detail.into(),
    }
}
