//! Choosing a dot-product kernel per block type, once per process.
//!
//! Every block type has a scalar reference kernel (`vec_dot_scalar::<B>`), always compiled.
//! Faster kernels (AVX2, AVX-512/VNNI, NEON) plug in here: give `detect` an arm that checks
//! the CPU feature at run time (`is_x86_feature_detected!`) and returns the kernel. The choice
//! is made on first use and cached, so `mul_mat` pays one table read per node. A SIMD kernel
//! must keep the [`VecDotKernel`] contract (a row of the weight type and a row of its `VecDot`
//! type, `n` values each) and be tested against the scalar one it replaces.

use std::sync::OnceLock;

use crate::dtype::DType;
use crate::quants::{vec_dot_scalar, BlockQuant, VecDotKernel};

use super::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
    BlockQ8K, BlockQ8_0, BlockQ8_1,
};

/// The block types, in the order of the kernel table.
const BLOCK_TYPES: [DType; 12] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q8_1,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Q8K,
];

fn slot(dtype: DType) -> Option<usize> {
    BLOCK_TYPES.iter().position(|&t| t == dtype)
}

/// The scalar reference dot product of weight type `dtype` (`None` for non-block types).
pub fn vec_dot_scalar_kernel(dtype: DType) -> Option<VecDotKernel> {
    fn k<B: BlockQuant>() -> Option<VecDotKernel> {
        Some(vec_dot_scalar::<B>)
    }
    match dtype {
        DType::Q4_0 => k::<BlockQ4_0>(),
        DType::Q4_1 => k::<BlockQ4_1>(),
        DType::Q5_0 => k::<BlockQ5_0>(),
        DType::Q5_1 => k::<BlockQ5_1>(),
        DType::Q8_0 => k::<BlockQ8_0>(),
        DType::Q8_1 => k::<BlockQ8_1>(),
        DType::Q2K => k::<BlockQ2K>(),
        DType::Q3K => k::<BlockQ3K>(),
        DType::Q4K => k::<BlockQ4K>(),
        DType::Q5K => k::<BlockQ5K>(),
        DType::Q6K => k::<BlockQ6K>(),
        DType::Q8K => k::<BlockQ8K>(),
        _ => None,
    }
}

/// The fastest kernel this CPU runs for `dtype`, if faster than the scalar one.
///
/// This is the plug-in point for SIMD kernels; none is registered yet, so every type uses
/// its scalar reference.
fn detect(dtype: DType) -> Option<VecDotKernel> {
    let _ = dtype;
    None
}

/// The dot-product kernel `mul_mat` uses for weight type `dtype`: the best one for this CPU,
/// chosen on first use (`None` for non-block types).
pub fn vec_dot_kernel(dtype: DType) -> Option<VecDotKernel> {
    static TABLE: OnceLock<[Option<VecDotKernel>; BLOCK_TYPES.len()]> = OnceLock::new();
    let table =
        TABLE.get_or_init(|| BLOCK_TYPES.map(|t| detect(t).or_else(|| vec_dot_scalar_kernel(t))));
    slot(dtype).and_then(|i| table[i])
}
