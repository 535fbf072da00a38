//! Element-wise ops: binary arithmetic with broadcasting, unary activations, repeat, concat.

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::ops::{can_repeat, shape_err};
use crate::tensor::Tensor;

impl Context {
    fn binary(&mut self, op: Op, a: Tensor, b: Tensor) -> Result<Tensor> {
        let name = op.name();
        let ma = self.expect_type(name, "a", a, &[DType::F32])?.ne;
        let mb = self.expect_type(name, "b", b, &[DType::F32])?.ne;
        if !can_repeat(&mb, &ma) {
            return Err(shape_err(
                name,
                ma,
                mb,
                "each dimension of b must divide the same dimension of a (b is broadcast)",
            ));
        }
        self.new_tensor_with(DType::F32, ma, op, [Some(a), Some(b), None])
    }

    /// `a + b`. a: `[n0, n1, n2, n3]` f32; b: f32 whose every `ne[i]` divides `a`'s (b is
    /// repeated to a's shape) → `[n0, n1, n2, n3]` f32. Either may be non-contiguous.
    pub fn add(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(Op::Add, a, b)
    }

    /// `a - b`, broadcasting b as [`Context::add`] does.
    pub fn sub(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(Op::Sub, a, b)
    }

    /// `a * b` element-wise, broadcasting b as [`Context::add`] does.
    pub fn mul(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(Op::Mul, a, b)
    }

    /// `a / b` element-wise, broadcasting b as [`Context::add`] does.
    pub fn div(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(Op::Div, a, b)
    }

    fn unary(&mut self, op: Op, a: Tensor) -> Result<Tensor> {
        let ne = self.expect_type(op.name(), "a", a, &[DType::F32])?.ne;
        self.new_tensor_with(DType::F32, ne, op, [Some(a), None, None])
    }

    /// `a · s`. a: any shape f32 → same shape f32.
    pub fn scale(&mut self, a: Tensor, s: f32) -> Result<Tensor> {
        self.unary(Op::Scale { s }, a)
    }

    /// `a²` element-wise. Any shape f32 → same shape.
    pub fn sqr(&mut self, a: Tensor) -> Result<Tensor> {
        self.unary(Op::Sqr, a)
    }

    /// `√a` element-wise. Any shape f32 → same shape.
    pub fn sqrt(&mut self, a: Tensor) -> Result<Tensor> {
        self.unary(Op::Sqrt, a)
    }

    /// `a · σ(a)` (SiLU). Any shape f32 → same shape.
    pub fn silu(&mut self, a: Tensor) -> Result<Tensor> {
        self.unary(Op::Silu, a)
    }

    /// GELU in its tanh form, `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`. Any shape f32 →
    /// same shape.
    pub fn gelu(&mut self, a: Tensor) -> Result<Tensor> {
        self.unary(Op::Gelu, a)
    }

    /// `tanh(a)` element-wise. Any shape f32 → same shape.
    pub fn tanh(&mut self, a: Tensor) -> Result<Tensor> {
        self.unary(Op::Tanh, a)
    }

    /// Soft-capping, `c · tanh(a / c)` element-wise, computed as ggml graphs write it
    /// (`scale(tanh(scale(a, 1/c)), c)`, the same roundings). Any shape f32 → same shape;
    /// `c` must be finite and positive.
    pub fn soft_cap(&mut self, a: Tensor, c: f32) -> Result<Tensor> {
        if !(c.is_finite() && c > 0.0) {
            return Err(Error::InvalidArgument {
                op: "SOFT_CAP",
                detail: format!("the cap {c} must be finite and positive"),
            });
        }
        let x = self.scale(a, 1.0 / c)?;
        let x = self.tanh(x)?;
        self.scale(x, c)
    }

    /// `max(a, 0)`. Any shape f32 → same shape.
    pub fn relu(&mut self, a: Tensor) -> Result<Tensor> {
        self.unary(Op::Relu, a)
    }

    /// Walsh–Hadamard rotation of every run of `n` values along axis 0: each run `x`
    /// becomes `H·x / √n`, `H` the natural-order (Sylvester) `n × n` Hadamard matrix (an
    /// orthonormal rotation that is its own inverse). Computed as ggml's CPU `fwht` (what
    /// `mul_mat` with a Hadamard matrix and `GGML_HINT_SRC0_IS_HADAMARD` runs): each value
    /// times `1/sqrtf(n)`, then butterflies `(u + v, u − v)` over strides 1, 2, 4, …, n/2.
    /// a: f32 `[ne0, …]` with `n` a power of two (at least 2) dividing `ne0`, rows dense →
    /// the same shape, f32, contiguous.
    pub fn hadamard(&mut self, a: Tensor, n: usize) -> Result<Tensor> {
        let op = Op::Hadamard { n };
        let m = self.expect_type(op.name(), "a", a, &[DType::F32])?;
        let (ne, dense) = (m.ne, m.rows_contiguous());
        if n < 2 || !n.is_power_of_two() || !ne[0].is_multiple_of(n) {
            return Err(Error::InvalidArgument {
                op: "HADAMARD",
                detail: format!(
                    "n = {n} must be a power of two of at least 2 dividing ne[0] = {}",
                    ne[0]
                ),
            });
        }
        if !dense {
            return Err(Error::Layout {
                op: "HADAMARD",
                name: self.display_name(a),
                required: "row-contiguous",
            });
        }
        self.new_tensor_with(DType::F32, ne, op, [Some(a), None, None])
    }

    /// SwiGLU over a fused tensor: a: `[2n, r1, r2, r3]` f32 whose first half of each row is
    /// the gate g and second half the value u → `[n, r1, r2, r3]`, `silu(g) · u`.
    pub fn swiglu(&mut self, a: Tensor) -> Result<Tensor> {
        let mut ne = self.expect_type("SWIGLU", "a", a, &[DType::F32])?.ne;
        if ne[0] % 2 != 0 {
            return Err(shape_err(
                "SWIGLU",
                ne,
                [0; 4],
                "ne[0] must be even (two halves)",
            ));
        }
        ne[0] /= 2;
        self.new_tensor_with(DType::F32, ne, Op::Swiglu, [Some(a), None, None])
    }

    /// SwiGLU of two tensors: g, u: same shape f32 → same shape, `silu(g) · u`.
    pub fn swiglu_split(&mut self, g: Tensor, u: Tensor) -> Result<Tensor> {
        let ng = self.expect_type("SWIGLU", "g", g, &[DType::F32])?.ne;
        let nu = self.expect_type("SWIGLU", "u", u, &[DType::F32])?.ne;
        if ng != nu {
            return Err(shape_err(
                "SWIGLU",
                ng,
                nu,
                "g and u must have the same shape",
            ));
        }
        self.new_tensor_with(DType::F32, ng, Op::Swiglu, [Some(g), Some(u), None])
    }

    /// GeGLU of two tensors: g, u: same shape f32 → same shape, `gelu(g) · u` with GELU in
    /// its tanh form as ggml's CPU kernel evaluates it inside GeGLU: looked up at `g` rounded
    /// to f16 and rounded to f16 itself (0 for `g ≤ −10`, `g` for `g ≥ 10`), so results
    /// match llama.cpp's bit for bit.
    pub fn geglu_split(&mut self, g: Tensor, u: Tensor) -> Result<Tensor> {
        let ng = self.expect_type("GEGLU", "g", g, &[DType::F32])?.ne;
        let nu = self.expect_type("GEGLU", "u", u, &[DType::F32])?.ne;
        if ng != nu {
            return Err(shape_err(
                "GEGLU",
                ng,
                nu,
                "g and u must have the same shape",
            ));
        }
        self.new_tensor_with(DType::F32, ng, Op::Geglu, [Some(g), Some(u), None])
    }

    /// GELU as ggml's CPU `ggml_gelu` computes it (the f16 table: looked up at `a` rounded to
    /// f16; 0 for `a ≤ −10`, `a` for `a ≥ 10`): the same bits as
    /// `geglu_split(a, ones)`, without the tensor of ones. Any shape f32 → same shape.
    pub fn gelu_ggml(&mut self, a: Tensor) -> Result<Tensor> {
        let na = self.expect_type("GEGLU", "a", a, &[DType::F32])?.ne;
        self.new_tensor_with(DType::F32, na, Op::Geglu, [Some(a), None, None])
    }

    /// gpt-oss's clamped SwiGLU (ggml's `swiglu_oai`): g (gate), u (up): same shape f32 →
    /// same shape, `x·σ(alpha·x)·(y + 1)` with `x = min(g, limit)` and
    /// `y = clamp(u, −limit, limit)`, evaluated as ggml's CPU kernel does
    /// (`x / (1 + exp(alpha·(−x)))`, then `· (y + 1)`, every step rounded to f32), so
    /// results match llama.cpp's bit for bit. gpt-oss uses `alpha` = 1.702, `limit` = 7.
    /// `alpha` must be finite and `limit` positive (not NaN).
    pub fn swiglu_oai(&mut self, g: Tensor, u: Tensor, alpha: f32, limit: f32) -> Result<Tensor> {
        const OP: &str = "SWIGLU_OAI";
        if !alpha.is_finite() || limit.is_nan() || limit <= 0.0 {
            return Err(Error::InvalidArgument {
                op: OP,
                detail: format!("alpha = {alpha} must be finite and limit = {limit} positive"),
            });
        }
        let ng = self.expect_type(OP, "g", g, &[DType::F32])?.ne;
        let nu = self.expect_type(OP, "u", u, &[DType::F32])?.ne;
        if ng != nu {
            return Err(shape_err(OP, ng, nu, "g and u must have the same shape"));
        }
        self.new_tensor_with(
            DType::F32,
            ng,
            Op::SwigluOai { alpha, limit },
            [Some(g), Some(u), None],
        )
    }

    /// Adds to each row of `a` the row of `b` its id selects (ggml's `add_id`: the experts'
    /// biases of a mixture of experts). a: `[n0, n1, n2]` f32; b: `[n0, n_b]` f32 (one row
    /// per id); ids: `[n1, n2]` I32, each in `0..n_b` → `[n0, n1, n2]` f32 with
    /// `out[:, i1, i2] = a[:, i1, i2] + b[:, ids[i1, i2]]`. An id out of range makes the
    /// computation fail with [`Error::IndexOutOfRange`].
    pub fn add_id(&mut self, a: Tensor, b: Tensor, ids: Tensor) -> Result<Tensor> {
        const OP: &str = "ADD_ID";
        let na = self.expect_type(OP, "a", a, &[DType::F32])?.ne;
        let nb = self.expect_type(OP, "b", b, &[DType::F32])?.ne;
        let ni = self.expect_type(OP, "ids", ids, &[DType::I32])?.ne;
        if na[3] != 1 || nb[2] != 1 || nb[3] != 1 || nb[0] != na[0] {
            return Err(shape_err(
                OP,
                na,
                nb,
                "a must be [n0, n1, n2] and b [n0, n_b] (one row per id)",
            ));
        }
        if ni[0] != na[1] || ni[1] != na[2] || ni[2] != 1 || ni[3] != 1 {
            return Err(shape_err(
                OP,
                na,
                ni,
                "ids must be [a.ne[1], a.ne[2]] (one id per row of a)",
            ));
        }
        self.new_tensor_with(DType::F32, na, Op::AddId, [Some(a), Some(b), Some(ids)])
    }

    /// a tiled to `b`'s shape (b's data is not read). a: f32 whose every `ne[i]` divides
    /// `b.ne[i]` → b's shape, f32.
    pub fn repeat(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        let ne = self.meta(b)?.ne;
        self.repeat_to(a, ne)
    }

    /// a tiled to shape `ne`; every `a.ne[i]` must divide `ne[i]`.
    pub fn repeat_to(&mut self, a: Tensor, ne: [usize; 4]) -> Result<Tensor> {
        let na = self.expect_type("REPEAT", "a", a, &[DType::F32])?.ne;
        if !can_repeat(&na, &ne) {
            return Err(shape_err(
                "REPEAT",
                na,
                ne,
                "each dimension of a must divide the target's",
            ));
        }
        self.new_tensor_with(DType::F32, ne, Op::Repeat, [Some(a), None, None])
    }

    /// a and b joined along `dim`: shapes equal except on `dim`; f32 → f32 with
    /// `ne[dim] = a.ne[dim] + b.ne[dim]`.
    pub fn concat(&mut self, a: Tensor, b: Tensor, dim: usize) -> Result<Tensor> {
        if dim >= 4 {
            return Err(Error::InvalidArgument {
                op: "CONCAT",
                detail: format!("dim {dim} is not an axis (0..4)"),
            });
        }
        let na = self.expect_type("CONCAT", "a", a, &[DType::F32])?.ne;
        let nb = self.expect_type("CONCAT", "b", b, &[DType::F32])?.ne;
        if (0..4).any(|i| i != dim && na[i] != nb[i]) {
            return Err(shape_err(
                "CONCAT",
                na,
                nb,
                format!("shapes must agree on every axis but {dim}"),
            ));
        }
        let mut ne = na;
        ne[dim] += nb[dim];
        self.new_tensor_with(DType::F32, ne, Op::Concat { dim }, [Some(a), Some(b), None])
    }
}
