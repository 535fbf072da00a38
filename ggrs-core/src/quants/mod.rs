//! Block-quantized types (Q4_0, Q8_0, the k-quants…): block layouts, reference
//! quantize/dequantize and dot products.

use crate::dtype::DType;
use crate::types::{FromF32Fn, ToF32Fn};

/// Conversions a block type provides.
#[derive(Clone, Copy)]
pub(crate) struct QuantTraits {
    pub to_f32: Option<ToF32Fn>,
    pub from_f32: Option<FromF32Fn>,
    pub vec_dot_type: DType,
}

/// The traits of a block type, or `None` where this build has none.
pub(crate) fn traits(_dtype: DType) -> Option<QuantTraits> {
    None
}

/// The fused dequantize-and-dot kernel of a block type, or `None` where this build has none.
pub(crate) fn vec_dot(_dtype: DType) -> Option<crate::kernels::matmul::VecDotFn> {
    None
}
