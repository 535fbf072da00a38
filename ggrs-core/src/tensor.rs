//! Tensor handles and metadata (ggml's `ggml_tensor` layout).
//!
//! A tensor has up to four dimensions. `ne[i]` counts elements along axis `i` (`ne[0]` is the
//! innermost, contiguous one) and `nb[i]` is the stride of axis `i` in bytes: `nb[0]` is the
//! type size, `nb[1]` the byte size of a row (`ne[0] / block_size * type_size` for block
//! types). Views share their source's data with other strides and an offset.

use crate::dtype::DType;
use crate::op::Op;

/// Most sources an op reads (the in-place selective scan: states, x, dt, A, B, C and the
/// states' rows).
pub const MAX_SRC: usize = 7;
/// Most dimensions a tensor has.
pub const MAX_DIMS: usize = 4;

/// A handle to a tensor in a [`Context`](crate::Context). Cheap to copy; only meaningful
/// together with the context that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tensor {
    pub(crate) ctx: u32,
    pub(crate) id: u32,
}

/// A hasher for maps keyed by [`Tensor`] (graph building, allocation): handles are small
/// integers that need no protection against collisions crafted by an attacker, so a
/// multiply-rotate mix replaces the standard library's SipHash, which showed in the per-step
/// profile of token generation.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TensorHasher(u64);

impl std::hash::Hasher for TensorHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(26) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Builds [`TensorHasher`]s.
pub(crate) type TensorHash = std::hash::BuildHasherDefault<TensorHasher>;

impl Tensor {
    /// The tensor's index in its context (creation order).
    pub fn index(self) -> usize {
        self.id as usize
    }
}

/// Flags a caller sets on a tensor to say what it is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TensorFlags {
    /// Data is set by the caller before each compute.
    pub input: bool,
    /// Data is read by the caller after compute.
    pub output: bool,
    /// A trainable or loaded parameter (weight).
    pub param: bool,
}

/// Where a tensor's bytes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataLoc {
    /// Not allocated (`no_alloc` contexts).
    None,
    /// At a byte offset in the context's arena.
    Arena(usize),
    /// At a byte offset in one of the context's external (read-only) buffers.
    External { buf: usize, offset: usize },
}

impl DataLoc {
    pub(crate) fn offset_by(self, by: usize) -> DataLoc {
        match self {
            DataLoc::None => DataLoc::None,
            DataLoc::Arena(o) => DataLoc::Arena(o + by),
            DataLoc::External { buf, offset } => DataLoc::External {
                buf,
                offset: offset + by,
            },
        }
    }
}

/// Everything a context knows about one tensor.
#[derive(Debug, Clone)]
pub struct TensorMeta {
    /// Element type.
    pub dtype: DType,
    /// Elements per axis; `ne[0]` is innermost.
    pub ne: [usize; 4],
    /// Stride per axis in bytes.
    pub nb: [usize; 4],
    /// The op that computes this tensor (`Op::None` for leaves).
    pub op: Op,
    /// The op's operands.
    pub src: [Option<Tensor>; MAX_SRC],
    /// For views: the tensor that owns the data.
    pub view_src: Option<Tensor>,
    /// For views: the byte offset into `view_src`'s data.
    pub view_offs: usize,
    /// A name for printing and lookup; may be empty.
    pub name: String,
    /// Caller's flags.
    pub flags: TensorFlags,
    pub(crate) data: DataLoc,
    /// A copy of the data packed for `mul_mat` (see [`crate::Context::set_packed`]).
    pub(crate) packed: Option<crate::kernels::packed::PackedWeight>,
}

impl TensorMeta {
    /// Number of elements.
    pub fn nelements(&self) -> usize {
        self.ne.iter().product()
    }

    /// Number of rows (`ne[1]·ne[2]·ne[3]`).
    pub fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Bytes spanned by the data, strides included (ggml's `ggml_nbytes`).
    pub fn nbytes(&self) -> usize {
        nbytes_of(self.dtype, &self.ne, &self.nb)
    }

    /// True when the elements are stored densely in order (axes of size 1 ignored).
    pub fn is_contiguous(&self) -> bool {
        is_contiguous(self.dtype, &self.ne, &self.nb)
    }

    /// True when each row is dense (`nb[0]` is the type size), whatever the outer strides.
    pub fn rows_contiguous(&self) -> bool {
        self.ne[0] <= 1 || self.dtype.is_quantized() || self.nb[0] == self.dtype.type_size()
    }

    /// True when the tensor has data (an arena or external location).
    pub fn has_data(&self) -> bool {
        self.data != DataLoc::None
    }

    /// True when the data lives in an external (read-only) buffer.
    pub fn is_external(&self) -> bool {
        matches!(self.data, DataLoc::External { .. })
    }

    /// Number of axes that matter (1 + the last axis with more than one element).
    pub fn n_dims(&self) -> usize {
        (1..4).rev().find(|&i| self.ne[i] > 1).map_or(1, |i| i + 1)
    }
}

/// Strides of a dense tensor of `ne` elements of `dtype`.
pub fn contiguous_strides(dtype: DType, ne: &[usize; 4]) -> [usize; 4] {
    let mut nb = [0; 4];
    nb[0] = dtype.type_size();
    nb[1] = dtype.row_size(ne[0]);
    nb[2] = nb[1] * ne[1];
    nb[3] = nb[2] * ne[2];
    nb
}

/// Bytes spanned by a tensor of this shape and strides.
pub(crate) fn nbytes_of(dtype: DType, ne: &[usize; 4], nb: &[usize; 4]) -> usize {
    if ne.contains(&0) {
        return 0;
    }
    let bs = dtype.block_size();
    let mut n = if bs == 1 {
        dtype.type_size() + (ne[0] - 1) * nb[0]
    } else {
        dtype.row_size(ne[0])
    };
    for i in 1..4 {
        n += (ne[i] - 1) * nb[i];
    }
    n
}

pub(crate) fn is_contiguous(dtype: DType, ne: &[usize; 4], nb: &[usize; 4]) -> bool {
    let mut expect = dtype.type_size();
    for i in 0..4 {
        if ne[i] != 1 && nb[i] != expect {
            return false;
        }
        expect = if i == 0 {
            dtype.row_size(ne[0])
        } else {
            expect * ne[i]
        };
    }
    true
}
