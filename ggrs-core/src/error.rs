//! The one error type of `ggrs-core`.
//!
//! Every fallible builder, planner and executor call returns [`Result<T>`]. Variants carry the
//! op and the shapes involved so that a message alone says what to fix.

use crate::dtype::DType;

/// Shorthand for `std::result::Result<T, ggrs_core::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong while building or computing a graph.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// The context's arena has no room for an allocation.
    #[error(
        "context arena out of memory while allocating {what}: needed {needed} bytes, \
         {available} of {capacity} available (create the context with a larger mem_size)"
    )]
    OutOfMemory {
        /// What was being allocated (a tensor name or "tensor metadata").
        what: String,
        /// Bytes the allocation needed (including alignment padding).
        needed: usize,
        /// Bytes still free in the arena.
        available: usize,
        /// Total arena size.
        capacity: usize,
    },

    /// The system refused the memory for a context's arena.
    #[error(
        "cannot allocate a context arena of {bytes} bytes ({:.2} GiB): the system refused \
         the memory",
        *bytes as f64 / (1u64 << 30) as f64
    )]
    ArenaAlloc {
        /// Bytes asked for.
        bytes: usize,
    },

    /// Operand shapes do not fit the op's shape contract.
    #[error("{op}: shape mismatch: {detail} (a: {a:?}, b: {b:?})")]
    ShapeMismatch {
        /// Op name.
        op: &'static str,
        /// Shape of the first operand (`ne`).
        a: [usize; 4],
        /// Shape of the second operand (`ne`), or zeros when there is none.
        b: [usize; 4],
        /// Which rule was broken.
        detail: String,
    },

    /// A view, reshape or permutation that does not fit its source.
    #[error("{op}: invalid view: {detail}")]
    InvalidView {
        /// Op name.
        op: &'static str,
        /// Which rule was broken.
        detail: String,
    },

    /// The op does not support an operand of this type.
    #[error("{op}: type {dtype} is not supported here ({detail})")]
    UnsupportedType {
        /// Op name.
        op: &'static str,
        /// The offending type.
        dtype: DType,
        /// Which operand and what is supported instead.
        detail: String,
    },

    /// An argument outside the op's domain (an axis out of range, a bad permutation…).
    #[error("{op}: invalid argument: {detail}")]
    InvalidArgument {
        /// Op or function name.
        op: &'static str,
        /// What is wrong.
        detail: String,
    },

    /// The operand's memory layout is not one the op accepts.
    #[error("{op}: operand `{name}` must be {required}; apply `cont` first")]
    Layout {
        /// Op name.
        op: &'static str,
        /// Tensor name (or `#id`).
        name: String,
        /// The layout needed ("contiguous", "row-contiguous").
        required: &'static str,
    },

    /// A write into a tensor whose data is read-only (e.g. memory-mapped weights).
    #[error("{op}: tensor `{name}` is read-only (its data lives outside the arena)")]
    ReadOnly {
        /// Op name.
        op: &'static str,
        /// Tensor name.
        name: String,
    },

    /// Data was needed but the tensor has none (built in a `no_alloc` context).
    #[error("tensor `{name}` has no data (the context was created with no_alloc)")]
    NoData {
        /// Tensor name.
        name: String,
    },

    /// A tensor handle from another context, or from before a `rewind`.
    #[error("invalid tensor handle #{id} (context holds {count} tensors): {detail}")]
    InvalidTensor {
        /// The handle's index.
        id: usize,
        /// How many tensors the context holds now.
        count: usize,
        /// Why it is invalid.
        detail: &'static str,
    },

    /// Reading or writing data with a slice whose length does not match the tensor.
    #[error("{op}: tensor `{name}` holds {expected} elements, the slice has {got}")]
    LengthMismatch {
        /// Function name.
        op: &'static str,
        /// Tensor name.
        name: String,
        /// Elements in the tensor.
        expected: usize,
        /// Elements in the slice.
        got: usize,
    },

    /// The abort callback asked the executor to stop.
    #[error("computation aborted by the callback after {completed} of {total} nodes")]
    Aborted {
        /// Nodes fully computed before the stop.
        completed: usize,
        /// Nodes in the graph.
        total: usize,
    },

    /// An index read from a tensor (a token id, a row index) is outside its table.
    #[error("{op}: index {index} is out of range (the table has {limit} rows)")]
    IndexOutOfRange {
        /// Op name.
        op: &'static str,
        /// The offending index.
        index: i64,
        /// Number of rows.
        limit: usize,
    },

    /// Operands that must not overlap share storage.
    #[error("{op}: `{a}` and `{b}` share storage; the op would read what it writes")]
    Overlap {
        /// Op name.
        op: &'static str,
        /// First tensor.
        a: String,
        /// Second tensor.
        b: String,
    },

    /// A graph grew past its node limit.
    #[error("graph has more than {limit} nodes")]
    GraphTooLarge {
        /// The limit.
        limit: usize,
    },
}
