//! Views (no data moved) and copies (data materialised).

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::ops::shape_err;
use crate::tensor::{contiguous_strides, Tensor};

impl Context {
    /// A view of `a` with shape `ne`, strides `nb` (bytes) at byte `offset` from `a`'s first
    /// byte. The view must lie within the data of `a`'s underlying tensor.
    pub fn view(
        &mut self,
        a: Tensor,
        ne: [usize; 4],
        nb: [usize; 4],
        offset: usize,
    ) -> Result<Tensor> {
        let m = self.meta(a)?;
        if m.dtype.is_quantized() && !ne[0].is_multiple_of(m.dtype.block_size()) {
            return Err(Error::InvalidView {
                op: "VIEW",
                detail: format!(
                    "ne[0] = {} is not a multiple of the {} block size",
                    ne[0], m.dtype
                ),
            });
        }
        self.new_view(a, Op::View, ne, nb, offset)
    }

    /// A 1-D view of `ne0` elements at byte `offset`.
    pub fn view_1d(&mut self, a: Tensor, ne0: usize, offset: usize) -> Result<Tensor> {
        let dt = self.meta(a)?.dtype;
        let row = (ne0 / dt.block_size())
            .checked_mul(dt.type_size())
            .ok_or_else(|| view_overflow("VIEW"))?;
        self.view(a, [ne0, 1, 1, 1], [dt.type_size(), row, row, row], offset)
    }

    /// A 2-D view: `ne1` rows of `ne0` elements, rows `nb1` bytes apart, at byte `offset`.
    pub fn view_2d(
        &mut self,
        a: Tensor,
        ne0: usize,
        ne1: usize,
        nb1: usize,
        offset: usize,
    ) -> Result<Tensor> {
        let dt = self.meta(a)?.dtype;
        let ts = dt.type_size();
        let nb2 = nb1.checked_mul(ne1).ok_or_else(|| view_overflow("VIEW"))?;
        self.view(a, [ne0, ne1, 1, 1], [ts, nb1, nb2, nb2], offset)
    }

    /// A 3-D view with row stride `nb1` and plane stride `nb2` (bytes).
    #[allow(clippy::too_many_arguments)]
    pub fn view_3d(
        &mut self,
        a: Tensor,
        ne0: usize,
        ne1: usize,
        ne2: usize,
        nb1: usize,
        nb2: usize,
        offset: usize,
    ) -> Result<Tensor> {
        let dt = self.meta(a)?.dtype;
        let ts = dt.type_size();
        let nb3 = nb2.checked_mul(ne2).ok_or_else(|| view_overflow("VIEW"))?;
        self.view(a, [ne0, ne1, ne2, 1], [ts, nb1, nb2, nb3], offset)
    }

    /// A 4-D view with strides `nb1`, `nb2`, `nb3` (bytes).
    #[allow(clippy::too_many_arguments)]
    pub fn view_4d(
        &mut self,
        a: Tensor,
        ne: [usize; 4],
        nb1: usize,
        nb2: usize,
        nb3: usize,
        offset: usize,
    ) -> Result<Tensor> {
        let dt = self.meta(a)?.dtype;
        self.view(a, ne, [dt.type_size(), nb1, nb2, nb3], offset)
    }

    /// `a` with shape `ne` (1 to 4 axes, same element count). `a` must be contiguous.
    pub fn reshape(&mut self, a: Tensor, ne: &[usize]) -> Result<Tensor> {
        let m = self.meta(a)?;
        if ne.is_empty() || ne.len() > 4 {
            return Err(Error::InvalidView {
                op: "RESHAPE",
                detail: format!("a tensor has 1 to 4 dimensions, got {}", ne.len()),
            });
        }
        let mut ne4 = [1usize; 4];
        ne4[..ne.len()].copy_from_slice(ne);
        if !m.is_contiguous() {
            return Err(Error::Layout {
                op: "RESHAPE",
                name: self.display_name(a),
                required: "contiguous",
            });
        }
        let count = ne4.iter().try_fold(1usize, |p, &n| p.checked_mul(n));
        if count != Some(m.nelements()) {
            return Err(Error::InvalidView {
                op: "RESHAPE",
                detail: format!(
                    "{:?} has {} elements, the new shape {:?} has {}",
                    m.ne,
                    m.nelements(),
                    ne,
                    count.map_or("more than usize::MAX".to_string(), |c| c.to_string())
                ),
            });
        }
        if ne4[0] % m.dtype.block_size() != 0 {
            return Err(Error::InvalidView {
                op: "RESHAPE",
                detail: format!("ne[0] = {} splits a {} block", ne4[0], m.dtype),
            });
        }
        let nb = contiguous_strides(m.dtype, &ne4);
        self.new_view(a, Op::Reshape, ne4, nb, 0)
    }

    /// `a` reshaped to `[ne0]`.
    pub fn reshape_1d(&mut self, a: Tensor, ne0: usize) -> Result<Tensor> {
        self.reshape(a, &[ne0])
    }

    /// `a` reshaped to `[ne0, ne1]`.
    pub fn reshape_2d(&mut self, a: Tensor, ne0: usize, ne1: usize) -> Result<Tensor> {
        self.reshape(a, &[ne0, ne1])
    }

    /// `a` reshaped to `[ne0, ne1, ne2]`.
    pub fn reshape_3d(&mut self, a: Tensor, ne0: usize, ne1: usize, ne2: usize) -> Result<Tensor> {
        self.reshape(a, &[ne0, ne1, ne2])
    }

    /// `a` reshaped to `[ne0, ne1, ne2, ne3]`.
    pub fn reshape_4d(
        &mut self,
        a: Tensor,
        ne0: usize,
        ne1: usize,
        ne2: usize,
        ne3: usize,
    ) -> Result<Tensor> {
        self.reshape(a, &[ne0, ne1, ne2, ne3])
    }

    /// Permutes axes as ggml does: axis `i` of `a` becomes axis `axes[i]` of the result
    /// (`axes` is a permutation of 0..4). No data moves; the result is a strided view.
    pub fn permute(&mut self, a: Tensor, axes: [usize; 4]) -> Result<Tensor> {
        let m = self.meta(a)?;
        let mut seen = [false; 4];
        for &x in &axes {
            if x >= 4 || seen[x] {
                return Err(Error::InvalidView {
                    op: "PERMUTE",
                    detail: format!("{axes:?} is not a permutation of 0..4"),
                });
            }
            seen[x] = true;
        }
        if m.dtype.is_quantized() && axes[0] != 0 {
            return Err(Error::InvalidView {
                op: "PERMUTE",
                detail: format!(
                    "axis 0 of a {} tensor holds blocks and cannot move",
                    m.dtype
                ),
            });
        }
        let mut ne = [0; 4];
        let mut nb = [0; 4];
        for i in 0..4 {
            ne[axes[i]] = m.ne[i];
            nb[axes[i]] = m.nb[i];
        }
        self.new_view(a, Op::Permute { axes }, ne, nb, 0)
    }

    /// Swaps axes 0 and 1 (a strided view).
    pub fn transpose(&mut self, a: Tensor) -> Result<Tensor> {
        let m = self.meta(a)?;
        if m.dtype.is_quantized() {
            return Err(Error::InvalidView {
                op: "TRANSPOSE",
                detail: format!(
                    "axis 0 of a {} tensor holds blocks and cannot move",
                    m.dtype
                ),
            });
        }
        let mut ne = m.ne;
        let mut nb = m.nb;
        ne.swap(0, 1);
        nb.swap(0, 1);
        self.new_view(a, Op::Transpose, ne, nb, 0)
    }

    /// A contiguous copy of `a` (same type and shape). a: F32, F16, BF16 or I32, any strides.
    pub fn cont(&mut self, a: Tensor) -> Result<Tensor> {
        let dt = self.meta(a)?.dtype;
        self.cast(a, dt)
    }

    /// Same as [`Context::cont`] (ggml's `dup`).
    pub fn dup(&mut self, a: Tensor) -> Result<Tensor> {
        self.cont(a)
    }

    /// A contiguous copy of `a` converted to `dtype`. a: F32, F16 or BF16 (or I32 copied to
    /// I32), any strides → same shape, `dtype` (F32, F16 or BF16).
    pub fn cast(&mut self, a: Tensor, dtype: DType) -> Result<Tensor> {
        let m = self.meta(a)?;
        let ne = m.ne;
        let ok = (m.dtype.is_float() && dtype.is_float())
            || (m.dtype == DType::I32 && dtype == DType::I32);
        if !ok {
            return Err(Error::UnsupportedType {
                op: "DUP",
                dtype: m.dtype,
                detail: format!(
                    "cannot copy {} to {dtype}: F32, F16, BF16 (or I32 → I32)",
                    m.dtype
                ),
            });
        }
        self.new_tensor_with(dtype, ne, Op::Dup, [Some(a), None, None])
    }

    /// Copies `a` into `b`, converting the type, and returns a view of `b` that depends on the
    /// copy. a, b: F32, F16 or BF16 with the same number of elements (element `k` of a in
    /// logical order goes to element `k` of b); b must be writable (in the arena).
    pub fn cpy(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        let ma = self.meta(a)?;
        let (na, ta) = (ma.ne, ma.dtype);
        let mb = self.meta(b)?;
        let (nbe, tb, nbb) = (mb.ne, mb.dtype, mb.nb);
        if !ta.is_float() || !tb.is_float() {
            return Err(Error::UnsupportedType {
                op: "CPY",
                dtype: if ta.is_float() { tb } else { ta },
                detail: "cpy copies between F32, F16 and BF16".into(),
            });
        }
        if na.iter().product::<usize>() != nbe.iter().product::<usize>() {
            return Err(shape_err(
                "CPY",
                na,
                nbe,
                "a and b must hold as many elements",
            ));
        }
        self.expect_writable("CPY", b)?;
        if self.shares_storage(a, b)? {
            return Err(Error::Overlap {
                op: "CPY",
                a: self.display_name(a),
                b: self.display_name(b),
            });
        }
        let t = self.new_view(b, Op::Cpy, nbe, nbb, 0)?;
        self.meta_mut(t)?.src = [Some(a), Some(b), None, None, None, None, None];
        Ok(t)
    }
}

/// The error for a view whose strides overflow the address space.
fn view_overflow(op: &'static str) -> Error {
    Error::InvalidView {
        op,
        detail: "the view's strides overflow the address space".into(),
    }
}
