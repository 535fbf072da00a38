//! The context: one static arena holding tensor metadata and data.
//!
//! A [`Context`] owns one 64-byte-aligned buffer whose size is fixed when it is made. Each
//! new tensor takes [`Context::tensor_overhead`] bytes for its metadata and, unless the context
//! is `no_alloc` or the tensor is a view or external, its data (aligned to 64 bytes) from the
//! same bump pointer. Nothing is freed one by one: [`Context::checkpoint`] and
//! [`Context::rewind`] drop everything made after a point, which is how a long-lived context
//! keeps its weights and drops each step's graph. Running out of room is an
//! [`Error::OutOfMemory`], never a panic.
//!
//! The metadata records themselves are kept in a typed table beside the byte buffer (so that
//! reading them needs no `unsafe`); the arena reserves their space all the same, so the
//! memory a context reports is what it uses.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::tensor::{
    contiguous_strides, nbytes_of, DataLoc, Tensor, TensorFlags, TensorMeta, MAX_SRC,
};

/// Alignment of the arena and of every tensor's data in it, in bytes (an AVX-512 register).
pub const ARENA_ALIGN: usize = 64;

/// A read-only buffer that tensors can point into without copying (a memory-mapped file, a
/// caller's `Vec<u8>`…). Implemented for everything that is `AsRef<[u8]> + Send + Sync`.
pub trait ExternalData: Send + Sync + 'static {
    /// The bytes.
    fn bytes(&self) -> &[u8];
}

impl<T: AsRef<[u8]> + Send + Sync + 'static> ExternalData for T {
    fn bytes(&self) -> &[u8] {
        self.as_ref()
    }
}

/// How to make a [`Context`].
#[derive(Debug, Clone, Copy)]
pub struct ContextParams {
    /// Arena size in bytes: metadata and data of every tensor.
    pub mem_size: usize,
    /// Build without data (views, shapes and op links only), to measure a graph.
    pub no_alloc: bool,
}

/// A point to [`Context::rewind`] to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    ctx: u32,
    n_tensors: usize,
    used: usize,
    n_external: usize,
}

#[repr(C, align(64))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Line([u8; ARENA_ALIGN]);

static NEXT_CTX_ID: AtomicU32 = AtomicU32::new(1);

/// A static arena of tensors. See the [module docs](self).
pub struct Context {
    id: u32,
    arena: Vec<Line>,
    capacity: usize,
    used: usize,
    no_alloc: bool,
    deferred: bool,
    /// `mul_mat` nodes made now compute every column as a one-column product
    /// ([`Context::set_per_column_products`]).
    per_column: bool,
    tensors: Vec<TensorMeta>,
    external: Vec<Arc<dyn ExternalData>>,
    /// Changes whenever existing tensors' metadata may change (a rewind, any metadata
    /// update).
    layout_gen: u64,
    /// For each tensor, the `layout_gen` when it was made or its metadata last changed: the
    /// executor reuses what it resolved for a graph while none of the tensors up to the
    /// graph's last one changed ([`Context::layout_key_upto`]), whatever happened after it.
    tensor_gen: Vec<u64>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("capacity", &self.capacity)
            .field("used", &self.used)
            .field("no_alloc", &self.no_alloc)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl Context {
    /// Makes a context with an arena of `params.mem_size` bytes (rounded up to 64).
    ///
    /// A `no_alloc` context reserves no data buffer: tensors made in it have no data, and it
    /// only counts, in [`Context::used_mem`], what a real context would need.
    pub fn new(params: ContextParams) -> Context {
        let capacity = params.mem_size.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        let arena = if params.no_alloc {
            Vec::new()
        } else {
            vec![Line([0; ARENA_ALIGN]); capacity / ARENA_ALIGN]
        };
        Context {
            id: NEXT_CTX_ID.fetch_add(1, Ordering::Relaxed),
            arena,
            capacity,
            used: 0,
            no_alloc: params.no_alloc,
            deferred: false,
            per_column: false,
            tensors: Vec::new(),
            external: Vec::new(),
            layout_gen: 0,
            tensor_gen: Vec::new(),
        }
    }

    /// Makes a context of `mem_size` bytes with data.
    pub fn with_mem_size(mem_size: usize) -> Context {
        Context::new(ContextParams {
            mem_size,
            no_alloc: false,
        })
    }

    /// As [`Context::with_mem_size`], but a size the system cannot give is an
    /// [`crate::Error::ArenaAlloc`] instead of an abort. The arena is
    /// zeroed (its pages are touched) here, so the memory is really there when it returns.
    pub fn try_with_mem_size(mem_size: usize) -> Result<Context> {
        let capacity = mem_size
            .checked_next_multiple_of(ARENA_ALIGN)
            .ok_or(crate::Error::ArenaAlloc { bytes: mem_size })?;
        let lines = capacity / ARENA_ALIGN;
        let mut arena: Vec<Line> = Vec::new();
        arena
            .try_reserve_exact(lines)
            .map_err(|_| crate::Error::ArenaAlloc { bytes: capacity })?;
        arena.resize(lines, Line([0; ARENA_ALIGN]));
        let mut ctx = Context::new(ContextParams {
            mem_size: 0,
            no_alloc: false,
        });
        ctx.arena = arena;
        ctx.capacity = capacity;
        Ok(ctx)
    }

    /// A `no_alloc` context without a size limit: build a graph in it, then read
    /// [`Context::used_mem`] to learn the `mem_size` a real context needs for the same graph.
    pub fn measure() -> Context {
        Context::new(ContextParams {
            mem_size: usize::MAX - ARENA_ALIGN,
            no_alloc: true,
        })
    }

    /// Arena bytes taken by one tensor's metadata.
    pub const fn tensor_overhead() -> usize {
        std::mem::size_of::<TensorMeta>().div_ceil(ARENA_ALIGN) * ARENA_ALIGN
    }

    /// Arena bytes a context needs for `n_tensors` tensors of `data_bytes` bytes in all
    /// (alignment padding included, assuming each tensor's data is allocated separately).
    pub fn mem_size_for(n_tensors: usize, data_bytes: usize) -> usize {
        n_tensors * (Context::tensor_overhead() + ARENA_ALIGN) + data_bytes
    }

    /// Bytes of the arena in use (metadata and data).
    pub fn used_mem(&self) -> usize {
        self.used
    }

    /// Arena size in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes still free.
    pub fn available(&self) -> usize {
        self.capacity - self.used
    }

    /// True for a context that allocates no data.
    pub fn is_no_alloc(&self) -> bool {
        self.no_alloc
    }

    /// Turns deferred allocation on or off. While it is on, the results of ops get no data
    /// when they are made; [`Context::alloc_graph`] later places them in the arena, reusing
    /// the memory of intermediates whose consumers have all run. Leaves (inputs made with
    /// `new_tensor`) are still allocated at once.
    pub fn set_deferred_alloc(&mut self, on: bool) {
        self.deferred = on;
    }

    /// True while deferred allocation is on.
    pub fn is_deferred_alloc(&self) -> bool {
        self.deferred
    }

    /// While on, the `mul_mat` nodes made compute every output column with the arithmetic of
    /// a one-column product (a decode step's), whatever the column count, still reading each
    /// weight once for all columns. Results then do not depend on which other columns a
    /// batch holds (batch invariance for a server's decode steps), for every weight type;
    /// off (the default), several columns take the kernels a prompt takes, whose order, as
    /// llama.cpp's, depends on the column count for some types (F16, the k-quants: see
    /// [`crate::mul_mat_columns_independent`]).
    pub fn set_per_column_products(&mut self, on: bool) {
        self.per_column = on;
    }

    /// True while [`Context::set_per_column_products`] is on.
    pub fn per_column_products(&self) -> bool {
        self.per_column
    }

    /// Number of tensors in the context.
    pub fn n_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// Handles of every tensor, in creation order.
    pub fn tensors(&self) -> impl Iterator<Item = Tensor> + '_ {
        let ctx = self.id;
        (0..self.tensors.len()).map(move |i| Tensor { ctx, id: i as u32 })
    }

    /// Records the current state, to drop everything made after it with [`Context::rewind`].
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            ctx: self.id,
            n_tensors: self.tensors.len(),
            used: self.used,
            n_external: self.external.len(),
        }
    }

    /// Drops every tensor made after `cp`, freeing its metadata and data. Handles to those
    /// tensors become invalid (a later tensor may reuse their index).
    pub fn rewind(&mut self, cp: Checkpoint) -> Result<()> {
        if cp.ctx != self.id {
            return Err(Error::InvalidArgument {
                op: "rewind",
                detail: "the checkpoint belongs to another context".into(),
            });
        }
        if cp.n_tensors > self.tensors.len() || cp.used > self.used {
            return Err(Error::InvalidArgument {
                op: "rewind",
                detail: "the checkpoint is newer than the context (rewound past it already)".into(),
            });
        }
        self.layout_gen += 1;
        self.tensors.truncate(cp.n_tensors);
        self.tensor_gen.truncate(cp.n_tensors);
        self.external.truncate(cp.n_external);
        self.used = cp.used;
        Ok(())
    }

    /// `(id, generation)` of the first `n` tensors: equal between two moments only if none
    /// of them was dropped, replaced or had its metadata changed in between (tensors made
    /// after them, and rewinds that keep them, leave it alone). `u64::MAX`, which no
    /// generation reaches, while fewer than `n` tensors exist.
    pub(crate) fn layout_key_upto(&self, n: usize) -> (u32, u64) {
        match self.tensor_gen.get(..n) {
            Some(gens) => (self.id, gens.iter().copied().max().unwrap_or(0)),
            None => (self.id, u64::MAX),
        }
    }

    /// The metadata of `t`.
    pub fn meta(&self, t: Tensor) -> Result<&TensorMeta> {
        if t.ctx != self.id {
            return Err(Error::InvalidTensor {
                id: t.id as usize,
                count: self.tensors.len(),
                detail: "the handle belongs to another context",
            });
        }
        self.tensors.get(t.id as usize).ok_or(Error::InvalidTensor {
            id: t.id as usize,
            count: self.tensors.len(),
            detail: "the tensor was dropped by a rewind",
        })
    }

    pub(crate) fn meta_mut(&mut self, t: Tensor) -> Result<&mut TensorMeta> {
        self.meta(t)?;
        self.layout_gen += 1;
        self.tensor_gen[t.id as usize] = self.layout_gen;
        Ok(&mut self.tensors[t.id as usize])
    }

    /// Shape (`ne`) of `t`.
    pub fn shape(&self, t: Tensor) -> Result<[usize; 4]> {
        Ok(self.meta(t)?.ne)
    }

    /// Element type of `t`.
    pub fn dtype(&self, t: Tensor) -> Result<DType> {
        Ok(self.meta(t)?.dtype)
    }

    /// The tensor's name, or `#index` when it has none.
    pub fn display_name(&self, t: Tensor) -> String {
        match self.meta(t) {
            Ok(m) if !m.name.is_empty() => m.name.clone(),
            _ => format!("#{}", t.id),
        }
    }

    /// Names `t` (returns `t` for chaining).
    pub fn set_name(&mut self, t: Tensor, name: impl Into<String>) -> Result<Tensor> {
        self.meta_mut(t)?.name = name.into();
        Ok(t)
    }

    /// The first tensor named `name`.
    pub fn get_tensor(&self, name: &str) -> Option<Tensor> {
        self.tensors
            .iter()
            .position(|m| m.name == name)
            .map(|i| Tensor {
                ctx: self.id,
                id: i as u32,
            })
    }

    /// Sets the caller's flags of `t`.
    pub fn set_flags(&mut self, t: Tensor, flags: TensorFlags) -> Result<()> {
        self.meta_mut(t)?.flags = flags;
        Ok(())
    }

    /// Marks `t` as an input (data set by the caller before each compute).
    pub fn set_input(&mut self, t: Tensor) -> Result<()> {
        self.meta_mut(t)?.flags.input = true;
        Ok(())
    }

    /// Marks `t` as an output (read by the caller after compute).
    pub fn set_output(&mut self, t: Tensor) -> Result<()> {
        self.meta_mut(t)?.flags.output = true;
        Ok(())
    }

    /// Marks `t` as a parameter (weight).
    pub fn set_param(&mut self, t: Tensor) -> Result<()> {
        self.meta_mut(t)?.flags.param = true;
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Allocation
    // ---------------------------------------------------------------------------------------

    /// Bump-allocates `size` bytes aligned to [`ARENA_ALIGN`]; returns the offset.
    pub(crate) fn alloc(&mut self, size: usize, what: &dyn Fn() -> String) -> Result<usize> {
        let start = self.used.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        let end = start.checked_add(size);
        match end {
            Some(end) if end <= self.capacity => {
                self.used = end;
                Ok(start)
            }
            _ => Err(Error::OutOfMemory {
                what: what(),
                needed: size + (start - self.used),
                available: self.capacity - self.used,
                capacity: self.capacity,
            }),
        }
    }

    /// Pushes a tensor record, reserving its metadata (and, if `data_size` is given and the
    /// context allocates, its data) in the arena.
    pub(crate) fn push_tensor(
        &mut self,
        mut meta: TensorMeta,
        data_size: Option<usize>,
    ) -> Result<Tensor> {
        if self.tensors.len() >= u32::MAX as usize {
            return Err(Error::InvalidArgument {
                op: "new_tensor",
                detail: "too many tensors in one context".into(),
            });
        }
        let saved = self.used;
        let name = meta.name.clone();
        self.alloc(Context::tensor_overhead(), &|| {
            format!("metadata of tensor `{name}`")
        })?;
        if let Some(size) = data_size {
            let shape = meta.ne;
            let dtype = meta.dtype;
            match self.alloc(size, &|| format!("{dtype} tensor {shape:?} ({size} bytes)")) {
                Ok(offset) => {
                    meta.data = if self.no_alloc {
                        DataLoc::None
                    } else {
                        DataLoc::Arena(offset)
                    };
                }
                Err(e) => {
                    self.used = saved;
                    return Err(e);
                }
            }
        }
        self.tensors.push(meta);
        self.tensor_gen.push(self.layout_gen);
        Ok(Tensor {
            ctx: self.id,
            id: (self.tensors.len() - 1) as u32,
        })
    }

    fn check_shape(op: &'static str, dtype: DType, ne: &[usize]) -> Result<[usize; 4]> {
        if ne.is_empty() || ne.len() > 4 {
            return Err(Error::InvalidArgument {
                op,
                detail: format!("a tensor has 1 to 4 dimensions, got {}", ne.len()),
            });
        }
        let mut out = [1usize; 4];
        out[..ne.len()].copy_from_slice(ne);
        if out[0] % dtype.block_size() != 0 {
            return Err(Error::InvalidArgument {
                op,
                detail: format!(
                    "ne[0] = {} is not a multiple of the {} block size {}",
                    out[0],
                    dtype,
                    dtype.block_size()
                ),
            });
        }
        let overflow = || Error::InvalidArgument {
            op,
            detail: format!("shape {ne:?} overflows the address space"),
        };
        // The row size itself may overflow (`row_size` does not check), so start from it.
        let mut total: usize = (out[0] / dtype.block_size())
            .checked_mul(dtype.type_size())
            .ok_or_else(overflow)?;
        for &n in &out[1..] {
            total = total.checked_mul(n).ok_or_else(overflow)?;
        }
        Ok(out)
    }

    /// Makes a leaf tensor of `ne` (1 to 4 axes, innermost first) with data in the arena.
    /// Its data starts zeroed only if the arena was never used at that place before; set it
    /// before reading.
    pub fn new_tensor(&mut self, dtype: DType, ne: &[usize]) -> Result<Tensor> {
        let ne = Context::check_shape("new_tensor", dtype, ne)?;
        self.new_tensor_with(dtype, ne, Op::None, [None; MAX_SRC])
    }

    /// A 1-D tensor of `ne0` elements.
    pub fn new_tensor_1d(&mut self, dtype: DType, ne0: usize) -> Result<Tensor> {
        self.new_tensor(dtype, &[ne0])
    }

    /// A 2-D tensor: `ne1` rows of `ne0` elements.
    pub fn new_tensor_2d(&mut self, dtype: DType, ne0: usize, ne1: usize) -> Result<Tensor> {
        self.new_tensor(dtype, &[ne0, ne1])
    }

    /// A 3-D tensor.
    pub fn new_tensor_3d(
        &mut self,
        dtype: DType,
        ne0: usize,
        ne1: usize,
        ne2: usize,
    ) -> Result<Tensor> {
        self.new_tensor(dtype, &[ne0, ne1, ne2])
    }

    /// A 4-D tensor.
    pub fn new_tensor_4d(
        &mut self,
        dtype: DType,
        ne0: usize,
        ne1: usize,
        ne2: usize,
        ne3: usize,
    ) -> Result<Tensor> {
        self.new_tensor(dtype, &[ne0, ne1, ne2, ne3])
    }

    /// An f32 scalar holding `v` (a 1-element tensor).
    pub fn new_f32(&mut self, v: f32) -> Result<Tensor> {
        let t = self.new_tensor_1d(DType::F32, 1)?;
        if !self.no_alloc {
            self.set_f32(t, &[v])?;
        }
        Ok(t)
    }

    pub(crate) fn new_tensor_with<const N: usize>(
        &mut self,
        dtype: DType,
        ne: [usize; 4],
        op: Op,
        srcs: [Option<Tensor>; N],
    ) -> Result<Tensor> {
        const { assert!(N <= MAX_SRC) };
        let mut src = [None; MAX_SRC];
        src[..N].copy_from_slice(&srcs);
        // Op results take shapes from their operands (or, for repeat_to, from the caller):
        // check that the byte size is addressable before computing strides.
        Context::check_shape(op.name(), dtype, &ne)?;
        let nb = contiguous_strides(dtype, &ne);
        let size = nbytes_of(dtype, &ne, &nb);
        let data_size = if self.deferred && op != Op::None {
            None
        } else {
            Some(size)
        };
        let meta = TensorMeta {
            dtype,
            ne,
            nb,
            op,
            src,
            view_src: None,
            view_offs: 0,
            name: String::new(),
            flags: TensorFlags::default(),
            data: DataLoc::None,
            packed: None,
        };
        self.push_tensor(meta, data_size)
    }

    /// Makes a leaf tensor whose data lies in `buf` at byte `offset` (no copy): weights in a
    /// memory-mapped file, a caller's buffer. The data is read-only: ops may read it, never
    /// write it. Fails if the bytes do not fit in `buf` or are misaligned for the type.
    pub fn new_tensor_external(
        &mut self,
        dtype: DType,
        ne: &[usize],
        buf: Arc<dyn ExternalData>,
        offset: usize,
    ) -> Result<Tensor> {
        let ne = Context::check_shape("new_tensor_external", dtype, ne)?;
        let nb = contiguous_strides(dtype, &ne);
        let size = nbytes_of(dtype, &ne, &nb);
        let bytes = buf.bytes();
        if offset.checked_add(size).is_none_or(|end| end > bytes.len()) {
            return Err(Error::InvalidArgument {
                op: "new_tensor_external",
                detail: format!(
                    "{size} bytes at offset {offset} do not fit in a buffer of {} bytes",
                    bytes.len()
                ),
            });
        }
        let align = crate::types::data_align(dtype);
        let addr = bytes.as_ptr() as usize + offset;
        if !addr.is_multiple_of(align) {
            return Err(Error::InvalidArgument {
                op: "new_tensor_external",
                detail: format!("{dtype} data must be {align}-byte aligned, address is {addr:#x}"),
            });
        }
        let idx = match self
            .external
            .iter()
            .position(|b| std::ptr::addr_eq(Arc::as_ptr(b), Arc::as_ptr(&buf)))
        {
            Some(i) => i,
            None => {
                self.external.push(buf);
                self.external.len() - 1
            }
        };
        let meta = TensorMeta {
            dtype,
            ne,
            nb,
            op: Op::None,
            src: [None; MAX_SRC],
            view_src: None,
            view_offs: 0,
            name: String::new(),
            flags: TensorFlags::default(),
            data: DataLoc::External { buf: idx, offset },
            packed: None,
        };
        self.push_tensor(meta, None)
    }

    /// Gives the weight `t` a copy of its data packed ahead for `mul_mat`
    /// ([`crate::kernels::PackedWeight`]): from now on every `mul_mat` with `t` as its weight
    /// operand reads the copy (with the same results, bit for bit), and every other op keeps
    /// reading `t`'s own data. `t` must be a leaf whose data lies in an external buffer
    /// (read-only, see [`Context::new_tensor_external`]) and `packed` a copy made from those
    /// very bytes (same type, shape and address); anything else is an error.
    pub fn set_packed(&mut self, t: Tensor, packed: &crate::kernels::PackedWeight) -> Result<()> {
        let m = self.meta(t)?;
        let (dtype, ne) = (m.dtype, m.ne);
        if m.op != Op::None || m.view_src.is_some() || !matches!(m.data, DataLoc::External { .. }) {
            return Err(Error::InvalidArgument {
                op: "set_packed",
                detail: format!(
                    "{} is not a leaf tensor with external data: only read-only weights carry \
                     packed copies",
                    self.display_name(t)
                ),
            });
        }
        let source = self.data(t)?.as_ptr();
        if !packed.copies(dtype, ne, source) {
            return Err(Error::InvalidArgument {
                op: "set_packed",
                detail: format!(
                    "the packed copy was not made from {}'s data ({dtype}, shape {ne:?})",
                    self.display_name(t)
                ),
            });
        }
        self.meta_mut(t)?.packed = Some(packed.clone());
        Ok(())
    }

    /// The packed copy `t` carries ([`Context::set_packed`]), if any.
    pub fn packed(&self, t: Tensor) -> Option<&crate::kernels::PackedWeight> {
        self.meta(t).ok()?.packed.as_ref()
    }

    /// Makes a view tensor of `src` (metadata only).
    pub(crate) fn new_view(
        &mut self,
        src: Tensor,
        op: Op,
        ne: [usize; 4],
        nb: [usize; 4],
        offset: usize,
    ) -> Result<Tensor> {
        let s = self.meta(src)?;
        let (root, base_offs) = match s.view_src {
            Some(r) => (r, s.view_offs),
            None => (src, 0),
        };
        let root_meta = self.meta(root)?;
        let root_bytes = root_meta.nbytes();
        let dtype = s.dtype;
        // Sizes, strides and offsets come from the caller: an overflow is an invalid view
        // (a wrapped span could otherwise pass the bounds check below).
        let (need, total) = match (
            checked_nbytes(dtype, &ne, &nb),
            base_offs.checked_add(offset),
        ) {
            (Some(need), Some(total)) if total.checked_add(need).is_some() => (need, total),
            _ => {
                return Err(Error::InvalidView {
                    op: op.name(),
                    detail: format!(
                        "view {ne:?} with strides {nb:?} at offset {offset} overflows the \
                         address space"
                    ),
                })
            }
        };
        if need > 0 && total + need > root_bytes {
            return Err(Error::InvalidView {
                op: op.name(),
                detail: format!(
                    "view {ne:?} with strides {nb:?} at offset {total} reaches byte {} of a \
                     {root_bytes}-byte source",
                    total + need
                ),
            });
        }
        let align = crate::types::data_align(dtype);
        if total % align != 0 || nb.iter().any(|&s| s % align != 0) {
            return Err(Error::InvalidView {
                op: op.name(),
                detail: format!(
                    "offset {total} and strides {nb:?} must be multiples of {align} for {dtype} data"
                ),
            });
        }
        let data = root_meta.data.offset_by(total);
        let meta = TensorMeta {
            dtype,
            ne,
            nb,
            op,
            src: [Some(src), None, None, None, None, None, None],
            view_src: Some(root),
            view_offs: total,
            name: String::new(),
            flags: TensorFlags::default(),
            data,
            packed: None,
        };
        self.push_tensor(meta, None)
    }

    // ---------------------------------------------------------------------------------------
    // Data access
    // ---------------------------------------------------------------------------------------

    pub(crate) fn arena_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.arena)
    }

    pub(crate) fn arena_bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.arena)
    }

    pub(crate) fn external_bytes(&self, buf: usize) -> &[u8] {
        self.external[buf].bytes()
    }

    /// Raw bytes spanned by `t` (its `nbytes()` from its first byte; for a strided view this
    /// includes the gaps).
    pub fn data(&self, t: Tensor) -> Result<&[u8]> {
        let m = self.meta(t)?;
        let n = m.nbytes();
        match m.data {
            DataLoc::None => Err(Error::NoData {
                name: self.display_name(t),
            }),
            DataLoc::Arena(o) => Ok(&self.arena_bytes()[o..o + n]),
            DataLoc::External { buf, offset } => Ok(&self.external_bytes(buf)[offset..offset + n]),
        }
    }

    /// The values of a dense F32 tensor where they lie (no copy): `nelements()` of them in
    /// logical order. An error for another type, a tensor with gaps between its elements, or
    /// data not aligned for f32.
    pub fn f32_data(&self, t: Tensor) -> Result<&[f32]> {
        let m = self.meta(t)?;
        crate::types::dense_f32(m.dtype, &m.ne, &m.nb, self.data(t)?).ok_or_else(|| {
            Error::UnsupportedType {
                op: "f32_data",
                dtype: m.dtype,
                detail: "a dense little-endian F32 tensor aligned for f32 is needed".into(),
            }
        })
    }

    /// Mutable raw bytes spanned by `t`; fails for external (read-only) data.
    pub fn data_mut(&mut self, t: Tensor) -> Result<&mut [u8]> {
        let m = self.meta(t)?;
        let n = m.nbytes();
        match m.data {
            DataLoc::None => Err(Error::NoData {
                name: self.display_name(t),
            }),
            DataLoc::Arena(o) => Ok(&mut self.arena_bytes_mut()[o..o + n]),
            DataLoc::External { .. } => Err(Error::ReadOnly {
                op: "data_mut",
                name: self.display_name(t),
            }),
        }
    }

    fn check_len(&self, op: &'static str, t: Tensor, got: usize) -> Result<&TensorMeta> {
        let m = self.meta(t)?;
        if m.nelements() != got {
            return Err(Error::LengthMismatch {
                op,
                name: self.display_name(t),
                expected: m.nelements(),
                got,
            });
        }
        if !m.is_contiguous() {
            return Err(Error::Layout {
                op,
                name: self.display_name(t),
                required: "contiguous",
            });
        }
        Ok(m)
    }

    /// Sets the data of a contiguous tensor from f32 values, converting to its type
    /// (F32, F16, BF16, or any block type with a quantizer).
    pub fn set_f32(&mut self, t: Tensor, values: &[f32]) -> Result<()> {
        let dtype = self.check_len("set_f32", t, values.len())?.dtype;
        let ne0 = self.meta(t)?.ne[0].max(1);
        let bytes = self.data_mut(t)?;
        crate::types::from_f32_rows(dtype, values, bytes, ne0)
    }

    /// Sets the data of a contiguous I32 tensor.
    pub fn set_i32(&mut self, t: Tensor, values: &[i32]) -> Result<()> {
        let m = self.check_len("set_i32", t, values.len())?;
        if m.dtype != DType::I32 {
            return Err(Error::UnsupportedType {
                op: "set_i32",
                dtype: m.dtype,
                detail: "the tensor must be i32".into(),
            });
        }
        let bytes = self.data_mut(t)?;
        bytes.copy_from_slice(bytemuck::cast_slice(values));
        Ok(())
    }

    /// Sets raw bytes of a contiguous tensor (its exact byte size).
    pub fn set_bytes(&mut self, t: Tensor, src: &[u8]) -> Result<()> {
        let m = self.meta(t)?;
        if !m.is_contiguous() {
            return Err(Error::Layout {
                op: "set_bytes",
                name: self.display_name(t),
                required: "contiguous",
            });
        }
        let n = m.nbytes();
        if n != src.len() {
            return Err(Error::LengthMismatch {
                op: "set_bytes",
                name: self.display_name(t),
                expected: n,
                got: src.len(),
            });
        }
        self.data_mut(t)?.copy_from_slice(src);
        Ok(())
    }

    /// The values of `t` as f32 in logical order (`ne[0]` fastest), whatever its type and
    /// strides (I32 values are converted).
    pub fn to_f32_vec(&self, t: Tensor) -> Result<Vec<f32>> {
        let m = self.meta(t)?;
        let bytes = self.data(t)?;
        crate::types::gather_f32(m.dtype, &m.ne, &m.nb, bytes)
    }

    /// Appends the values of `t` (any type with a conversion to f32), in logical order, to
    /// `out`, reusing its spare capacity: [`Context::to_f32_vec`] without a new allocation.
    pub fn append_f32(&self, t: Tensor, out: &mut Vec<f32>) -> Result<()> {
        let m = self.meta(t)?;
        let bytes = self.data(t)?;
        crate::types::gather_f32_into(m.dtype, &m.ne, &m.nb, bytes, out)
    }

    /// The values of an I32 tensor in logical order.
    pub fn to_i32_vec(&self, t: Tensor) -> Result<Vec<i32>> {
        let m = self.meta(t)?;
        if m.dtype != DType::I32 {
            return Err(Error::UnsupportedType {
                op: "to_i32_vec",
                dtype: m.dtype,
                detail: "the tensor must be i32".into(),
            });
        }
        let bytes = self.data(t)?;
        let mut out = Vec::with_capacity(m.nelements());
        for i3 in 0..m.ne[3] {
            for i2 in 0..m.ne[2] {
                for i1 in 0..m.ne[1] {
                    for i0 in 0..m.ne[0] {
                        let o = i0 * m.nb[0] + i1 * m.nb[1] + i2 * m.nb[2] + i3 * m.nb[3];
                        out.push(i32::from_le_bytes([
                            bytes[o],
                            bytes[o + 1],
                            bytes[o + 2],
                            bytes[o + 3],
                        ]));
                    }
                }
            }
        }
        Ok(out)
    }

    /// The one value of a 1-element tensor, as f32.
    pub fn get_f32_scalar(&self, t: Tensor) -> Result<f32> {
        let v = self.to_f32_vec(t)?;
        if v.len() != 1 {
            return Err(Error::LengthMismatch {
                op: "get_f32_scalar",
                name: self.display_name(t),
                expected: 1,
                got: v.len(),
            });
        }
        Ok(v[0])
    }

    /// True when `a` and `b` read or write the same underlying tensor's data.
    pub(crate) fn shares_storage(&self, a: Tensor, b: Tensor) -> Result<bool> {
        let root = |t: Tensor| -> Result<Tensor> { Ok(self.meta(t)?.view_src.unwrap_or(t)) };
        Ok(root(a)? == root(b)?)
    }
}

/// Bytes spanned by a tensor of this shape and strides (as `nbytes_of`), or `None` when the
/// span does not fit in `usize`.
fn checked_nbytes(dtype: DType, ne: &[usize; 4], nb: &[usize; 4]) -> Option<usize> {
    if ne.contains(&0) {
        return Some(0);
    }
    let mut n = if dtype.block_size() == 1 {
        (ne[0] - 1)
            .checked_mul(nb[0])?
            .checked_add(dtype.type_size())?
    } else {
        (ne[0] / dtype.block_size()).checked_mul(dtype.type_size())?
    };
    for i in 1..4 {
        n = n.checked_add((ne[i] - 1).checked_mul(nb[i])?)?;
    }
    Some(n)
}

/// Bytes of memory the system can still give this process, as far as it says: Linux's
/// `MemAvailable` (`/proc/meminfo`), lowered to the room left under a cgroup v2 memory limit
/// when there is one. `None` where neither can be read (other systems): callers then rely on
/// a fallible allocation ([`Context::try_with_mem_size`]) alone.
pub fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let mut avail = kib.saturating_mul(1024);
    let read = |p: &str| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    if let (Some(max), Some(cur)) = (
        read("/sys/fs/cgroup/memory.max"),
        read("/sys/fs/cgroup/memory.current"),
    ) {
        avail = avail.min(max.saturating_sub(cur));
    }
    Some(avail)
}
