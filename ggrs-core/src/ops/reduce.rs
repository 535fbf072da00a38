//! Reductions: sum, sum_rows, mean, argmax, argsort_top_k.

use crate::context::Context;
use crate::dtype::DType;
use crate::error::Result;
use crate::op::Op;
use crate::tensor::Tensor;

impl Context {
    /// Sum of every element. a: any shape f32 → `[1]` f32. The sum is taken in f64 over
    /// fixed-size chunks and combined in order, so it does not depend on the thread count.
    pub fn sum(&mut self, a: Tensor) -> Result<Tensor> {
        self.expect_type("SUM", "a", a, &[DType::F32])?;
        self.new_tensor_with(DType::F32, [1, 1, 1, 1], Op::Sum, [Some(a), None, None])
    }

    /// Sum of each row. a: `[n0, n1, n2, n3]` f32 → `[1, n1, n2, n3]` f32.
    pub fn sum_rows(&mut self, a: Tensor) -> Result<Tensor> {
        let mut ne = self.expect_type("SUM_ROWS", "a", a, &[DType::F32])?.ne;
        ne[0] = 1;
        self.new_tensor_with(DType::F32, ne, Op::SumRows, [Some(a), None, None])
    }

    /// Mean of each row. a: `[n0, n1, n2, n3]` f32 → `[1, n1, n2, n3]` f32.
    pub fn mean(&mut self, a: Tensor) -> Result<Tensor> {
        let mut ne = self.expect_type("MEAN", "a", a, &[DType::F32])?.ne;
        ne[0] = 1;
        self.new_tensor_with(DType::F32, ne, Op::Mean, [Some(a), None, None])
    }

    /// Index of the largest value of each row (the first, on ties). a: `[n0, n1, n2, n3]` f32
    /// → `[n1, n2, n3]` i32.
    pub fn argmax(&mut self, a: Tensor) -> Result<Tensor> {
        let ne = self.expect_type("ARGMAX", "a", a, &[DType::F32])?.ne;
        self.new_tensor_with(
            DType::I32,
            [ne[1], ne[2], ne[3], 1],
            Op::Argmax,
            [Some(a), None, None],
        )
    }

    /// Indices of the `k` largest values of each row, largest first (ggml's
    /// `ggml_argsort_top_k`: the first `k` of a descending argsort). Equal values keep their
    /// order (the lower index first); NaN counts as smaller than every number.
    /// a: `[n0, n1, n2, n3]` f32, `1 ≤ k ≤ n0` → `[k, n1, n2, n3]` i32.
    pub fn argsort_top_k(&mut self, a: Tensor, k: usize) -> Result<Tensor> {
        let mut ne = self.expect_type("ARGSORT_TOP_K", "a", a, &[DType::F32])?.ne;
        if k == 0 || k > ne[0] {
            return Err(crate::ops::shape_err(
                "ARGSORT_TOP_K",
                ne,
                [k, 1, 1, 1],
                format!("k must be in 1..={} (the row length)", ne[0]),
            ));
        }
        ne[0] = k;
        self.new_tensor_with(DType::I32, ne, Op::ArgsortTopK { k }, [Some(a), None, None])
    }
}
