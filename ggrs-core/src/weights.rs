//! Weights prepared for the kernels, once, ahead of any graph: what a model loader asks of
//! the backend without naming a kernel.
//!
//! A loader hands [`prepare`] the matrix weights it will multiply (type, shape, bytes) and
//! gets back, for each, a [`PreparedWeight`] or `None`. A prepared weight is a copy on
//! transparent huge pages, laid out for the `mul_mat` kernel this CPU runs for it where
//! that kernel reads a layout of its own (the panel kernels), else the rows as they are.
//! Giving it to the weight's tensor ([`Context::set_packed`](crate::Context::set_packed))
//! makes every `mul_mat` read the copy, with the same bits.
//!
//! [`columns_independent`] names the arithmetic property batch invariance needs: whether a
//! product with a weight gives each activation column the bits it would have alone. A
//! caller that needs it for every product of a graph asks for it while building
//! ([`Context::set_per_column_products`](crate::Context::set_per_column_products)).
//!
//! ```
//! use ggrs_core::{weights, DType};
//! // 32 rows of 64 Q4_0 values (2 blocks of 18 bytes per row), and an f32 vector.
//! let (a, b) = (vec![0u8; 32 * 36], vec![0u8; 64 * 4]);
//! let ws = [
//!     (DType::Q4_0, [64, 32, 1, 1], &a[..]),
//!     (DType::F32, [64, 1, 1, 1], &b[..]),
//! ];
//! let prepared = weights::prepare(&ws, true, |_| ());
//! assert_eq!(prepared.len(), 2);
//! // Copies where this CPU and target prepare weights; nothing elsewhere.
//! for p in prepared.iter().flatten() {
//!     assert!(p.bytes() > 0);
//! }
//! ```

use crate::dtype::DType;

/// A weight prepared for the kernels (see the module docs): owned by whoever loaded the
/// weights, shared by clones, given to a tensor with
/// [`Context::set_packed`](crate::Context::set_packed).
pub use crate::kernels::packed::PackedWeight as PreparedWeight;

/// Whether [`prepare`] lays a weight of type `dtype` and shape `ne` out anew for this CPU's
/// kernels (`true`), rather than copying its rows as they are or leaving it (`false`).
pub fn relayouts(dtype: DType, ne: [usize; 4]) -> bool {
    PreparedWeight::repacks(dtype, ne)
}

/// Prepares `weights` (type, shape, bytes in file layout) for the kernels, in one shared
/// huge-page buffer: entry `i` of the result belongs to `weights[i]`. Prepared are the
/// weights the kernels read in a layout of their own ([`relayouts`]: 2-D matrices, and
/// stacks of them matrix by matrix), and with `plain_copies` also every other 2-D matrix
/// (copied as it is, so that it too is read from huge pages); the others, and any whose copy
/// could not be made (or every one on targets without preparation), get `None` and are
/// read where they are. `done(i)` is called as soon as `weights[i]` has been copied and
/// will not be read again here (e.g. to release a mapped source's pages).
pub fn prepare(
    weights: &[(DType, [usize; 4], &[u8])],
    plain_copies: bool,
    mut done: impl FnMut(usize),
) -> Vec<Option<PreparedWeight>> {
    let picked: Vec<usize> = (0..weights.len())
        .filter(|&i| {
            let (dtype, ne, _) = weights[i];
            ne[3] == 1 && (relayouts(dtype, ne) || (plain_copies && ne[2] == 1))
        })
        .collect();
    let sources: Vec<(DType, [usize; 4], &[u8])> = picked.iter().map(|&i| weights[i]).collect();
    let copies = PreparedWeight::pack_all(&sources, |j| done(picked[j]));
    let mut out: Vec<Option<PreparedWeight>> = vec![None; weights.len()];
    for (&i, copy) in picked.iter().zip(copies) {
        out[i] = copy;
    }
    out
}

/// Whether every `mul_mat` with a weight of type `dtype` and shape `ne` gives each
/// activation column the bits it would have alone, whatever the other columns (true for
/// the types whose kernels keep one order per column on this CPU). Where it is false, a
/// graph built with per-column products on
/// ([`Context::set_per_column_products`](crate::Context::set_per_column_products)) still
/// gets that property, at some speed.
pub fn columns_independent(dtype: DType, ne: [usize; 4]) -> bool {
    crate::kernels::matmul::columns_independent(dtype, ne)
}

/// Whether `mul_mat` multiplies weights of type `dtype` (F32, F16, BF16 and every block type
/// with a dot-product kernel in this build).
pub fn supported(dtype: DType) -> bool {
    crate::kernels::mul_mat_supports(dtype)
}
