//! Reductions: sum, sum_rows, mean, argmax.

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
}
