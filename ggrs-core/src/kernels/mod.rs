//! CPU kernels: how each op is split into tasks and computed.
//!
//! The executor resolves every node into a `Task` (raw pointers to the node's data and its
//! sources' data, with shapes and strides) and runs it in up to three phases:
//! - INIT (`init`), on every thread in parallel, before any chunk of the node runs
//!   (e.g. `mul_mat` converting `src1` to the weight's `vec_dot_type` in the shared work
//!   buffer);
//! - COMPUTE (`compute_chunk`): the node's output split into `n_chunks` pieces that threads
//!   take from an atomic counter. Every output element belongs to exactly one chunk and is
//!   computed in a fixed order, so results do not depend on the thread count;
//! - FINALIZE (`finalize`), on one thread, only for ops that combine per-chunk partial
//!   results (`sum`).
//!
//! This module and the executor are where `unsafe` lives: kernels read and write through raw
//! pointers that the executor derived from a context it holds exclusively.

pub(crate) mod aarch64;
pub(crate) mod attn;
pub(crate) mod attn_quant;
pub(crate) mod dot_builds;
pub(crate) mod elementwise;
pub(crate) mod expf;
pub(crate) mod ggml_arith;
pub(crate) mod matmul;
pub(crate) mod nn;
pub(crate) mod packed;
pub(crate) mod reduce;
pub(crate) mod rope_freqs;
pub(crate) mod rope_yarn;
pub(crate) mod rows;
pub(crate) mod select;
pub(crate) mod ssm;
pub mod vec;
pub(crate) mod x86;

use crate::dtype::DType;
use crate::error::Result;
use crate::op::Op;
use crate::tensor::{TensorMeta, MAX_SRC};

pub use packed::PackedWeight;

/// True when `mul_mat` accepts weights of `dtype` (F32, F16, BF16 and every block type
/// with a dot-product kernel in this build).
pub fn mul_mat_supports(dtype: DType) -> bool {
    matmul::supports(dtype)
}

/// A tensor as a kernel sees it: a data pointer, type, shape and strides.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawTensor {
    pub data: *mut u8,
    pub dtype: DType,
    pub ne: [usize; 4],
    pub nb: [usize; 4],
}

impl RawTensor {
    pub(crate) fn new(m: &TensorMeta, data: *mut u8) -> RawTensor {
        RawTensor {
            data,
            dtype: m.dtype,
            ne: m.ne,
            nb: m.nb,
        }
    }

    pub fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    pub fn nelements(&self) -> usize {
        self.ne.iter().product()
    }

    /// Row index `r` (in `0..nrows`) as `(i1, i2, i3)`.
    #[inline]
    pub fn unravel_row(&self, r: usize) -> (usize, usize, usize) {
        let i1 = r % self.ne[1];
        let i2 = (r / self.ne[1]) % self.ne[2];
        let i3 = r / (self.ne[1] * self.ne[2]);
        (i1, i2, i3)
    }

    /// Byte offset of element `(i0, i1, i2, i3)`.
    #[inline]
    pub fn offset(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> usize {
        i0 * self.nb[0] + i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3]
    }

    /// True when row elements are adjacent.
    #[inline]
    pub fn dense_rows(&self) -> bool {
        self.ne[0] <= 1 || self.dtype.is_quantized() || self.nb[0] == self.dtype.type_size()
    }

    /// Pointer to the start of row `(i1, i2, i3)`.
    ///
    /// # Safety
    /// The indices must be within `ne`, and `data` must point at a live allocation spanning
    /// the tensor's bytes.
    #[inline]
    pub unsafe fn row_ptr(&self, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        // SAFETY: the caller guarantees the indices are in range, so the offset stays
        // inside the tensor's span.
        unsafe { self.data.add(self.offset(0, i1, i2, i3)) }
    }

    /// Row `(i1, i2, i3)` of an F32 tensor with dense rows, as a slice.
    ///
    /// # Safety
    /// As [`RawTensor::row_ptr`]; the tensor is F32 with `nb[0] == 4`, and nobody writes the
    /// row while the slice lives.
    #[inline]
    pub unsafe fn row_f32<'a>(&self, i1: usize, i2: usize, i3: usize) -> &'a [f32] {
        debug_assert!(self.dtype == DType::F32 && self.dense_rows());
        // SAFETY: the caller guarantees the row lies in a live allocation, is f32-aligned
        // (arena and external data are checked for alignment) and is not written meanwhile.
        unsafe { std::slice::from_raw_parts(self.row_ptr(i1, i2, i3) as *const f32, self.ne[0]) }
    }

    /// Row `(i1, i2, i3)` of an F32 tensor with dense rows, mutable.
    ///
    /// # Safety
    /// As [`RawTensor::row_f32`], and this thread is the only one touching the row.
    #[inline]
    pub unsafe fn row_f32_mut<'a>(&self, i1: usize, i2: usize, i3: usize) -> &'a mut [f32] {
        debug_assert!(self.dtype == DType::F32 && self.dense_rows());
        // SAFETY: the caller guarantees exclusive access to this in-bounds, aligned row.
        unsafe { std::slice::from_raw_parts_mut(self.row_ptr(i1, i2, i3) as *mut f32, self.ne[0]) }
    }

    /// Row `(i1, i2, i3)` as f32 values: the row itself when it is dense F32, otherwise a
    /// converted/gathered copy in `scratch` (which must hold `ne[0]` values).
    ///
    /// # Safety
    /// As [`RawTensor::row_ptr`]; nobody writes the row while the slice lives.
    #[inline]
    pub unsafe fn load_row<'a>(
        &self,
        i1: usize,
        i2: usize,
        i3: usize,
        scratch: &'a mut [f32],
    ) -> &'a [f32] {
        let n = self.ne[0];
        if self.dtype == DType::F32 && self.dense_rows() {
            // SAFETY: forwarded caller guarantee.
            return unsafe { self.row_f32(i1, i2, i3) };
        }
        let dst = &mut scratch[..n];
        // SAFETY: forwarded caller guarantee; each element read lies in the tensor's span.
        unsafe {
            let base = self.row_ptr(i1, i2, i3);
            if self.dense_rows() {
                let bytes = std::slice::from_raw_parts(base as *const u8, self.dtype.row_size(n));
                let f = crate::types::traits(self.dtype)
                    .to_f32
                    .expect("planner only admits types with an f32 conversion");
                f(bytes, dst);
            } else {
                for (i0, d) in dst.iter_mut().enumerate() {
                    *d = read_f32(base.add(i0 * self.nb[0]), self.dtype);
                }
            }
        }
        dst
    }
}

/// Reads one value of a plain float type at `p`.
///
/// # Safety
/// `p` points at a readable, aligned value of `dtype` (F32, F16, BF16 or I32).
#[inline]
pub(crate) unsafe fn read_f32(p: *const u8, dtype: DType) -> f32 {
    // SAFETY: the caller guarantees `p` is a valid aligned pointer for the type read.
    unsafe {
        match dtype {
            DType::F32 => *(p as *const f32),
            DType::F16 => half::f16::from_bits(*(p as *const u16)).to_f32(),
            DType::BF16 => half::bf16::from_bits(*(p as *const u16)).to_f32(),
            DType::I32 => *(p as *const i32) as f32,
            _ => f32::NAN,
        }
    }
}

/// Writes one value of a plain float type at `p`.
///
/// # Safety
/// `p` points at a writable, aligned slot of `dtype` (F32, F16 or BF16) that no other thread
/// touches.
#[inline]
pub(crate) unsafe fn write_f32(p: *mut u8, dtype: DType, v: f32) {
    // SAFETY: the caller guarantees exclusive access to an aligned slot of the type.
    unsafe {
        match dtype {
            DType::F32 => *(p as *mut f32) = v,
            DType::F16 => *(p as *mut u16) = half::f16::from_f32(v).to_bits(),
            DType::BF16 => *(p as *mut u16) = half::bf16::from_f32(v).to_bits(),
            _ => {}
        }
    }
}

/// How a node runs: its chunk count, phases and work-buffer needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskPlan {
    /// Pieces the COMPUTE phase is split into (0 for nodes that move no data).
    pub n_chunks: usize,
    /// Whether the op has an INIT phase.
    pub init: bool,
    /// Whether the op has a FINALIZE phase.
    pub finalize: bool,
    /// Bytes of the shared work buffer the node needs.
    pub work_shared: usize,
    /// f32 values of private scratch each thread needs.
    pub scratch_f32: usize,
    /// For tiled ops (`mul_mat`): row blocks × column blocks per batch.
    pub tiles: (usize, usize),
    /// Threads the plan is for (0 in plans made outside `plan`).
    pub n_threads: usize,
    /// For a `mul_mat` (or `mul_mat_id`): the kernel its plan chose and the activation form
    /// its INIT writes ([`select`]).
    pub(crate) matmul: Option<select::MatMulKernel>,
}

impl TaskPlan {
    /// For a `mul_mat` with INIT: what INIT writes into the shared work buffer. Two nodes
    /// share one conversion only when these are equal.
    pub(crate) fn activation(&self) -> Option<matmul::ActivationForm> {
        self.matmul.and_then(|k| k.activation)
    }

    /// True for nodes that move no data (views).
    pub fn is_noop(&self) -> bool {
        self.n_chunks == 0
    }
}

/// A node ready to run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Task {
    pub op: Op,
    pub dst: RawTensor,
    pub src: [Option<RawTensor>; MAX_SRC],
    pub plan: TaskPlan,
    /// For a `mul_mat` or `mul_mat_id` on the panel path whose weight was packed ahead
    /// (`matmul::PackedWeight`): the first byte of the packed copy, which the executor keeps
    /// alive while the graph runs (`matmul::attach_packed`). Null otherwise.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub packed: *const u8,
}

// SAFETY: a Task holds raw pointers into buffers that the executor keeps alive and
// exclusively borrowed for the whole computation; threads write disjoint chunks of `dst`
// within an epoch (see `compute_chunk` and `exec::schedule`), so sharing tasks is sound.
unsafe impl Send for Task {}
// SAFETY: as above.
unsafe impl Sync for Task {}

impl Task {
    #[inline]
    pub fn s0(&self) -> &RawTensor {
        self.src[0].as_ref().expect("builder gives this op a src0")
    }

    #[inline]
    pub fn s1(&self) -> &RawTensor {
        self.src[1].as_ref().expect("builder gives this op a src1")
    }
}

/// Work memory handed to a phase.
pub(crate) struct Work<'a> {
    /// The shared part of the work buffer (INIT output, per-chunk partials).
    pub shared: *mut u8,
    /// This thread's private scratch.
    pub scratch: &'a mut [f32],
}

/// Splits `0..n` into `parts` nearly equal ranges; returns range `i`.
#[inline]
pub(crate) fn split_range(n: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    let start = n * i / parts;
    let end = n * (i + 1) / parts;
    start..end
}

/// Chunks for `rows` rows of `row_len` values: enough pieces for the threads to balance,
/// none so small that taking it costs more than computing it.
pub(crate) fn row_chunks(rows: usize, row_len: usize, n_threads: usize) -> usize {
    if rows == 0 {
        return 1;
    }
    let min_values_per_chunk = 4096;
    let max_by_size = (rows * row_len.max(1))
        .div_ceil(min_values_per_chunk)
        .max(1);
    rows.min(n_threads * 4).min(max_by_size).max(1)
}

/// Plans one node. `src` are the sources' metadata in order.
pub(crate) fn plan(
    op: &Op,
    dst: &TensorMeta,
    src: &[Option<&TensorMeta>; MAX_SRC],
    nth: usize,
) -> TaskPlan {
    TaskPlan {
        n_threads: nth,
        ..plan_op(op, dst, src, nth)
    }
}

fn plan_op(
    op: &Op,
    dst: &TensorMeta,
    src: &[Option<&TensorMeta>; MAX_SRC],
    nth: usize,
) -> TaskPlan {
    let rows = dst.nrows();
    let ne0 = dst.ne[0];
    let row_plan = |scratch: usize| TaskPlan {
        n_chunks: row_chunks(rows, ne0, nth),
        scratch_f32: scratch,
        ..TaskPlan::default()
    };
    let s0 = src[0];
    let s0ne0 = s0.map_or(0, |m| m.ne[0]);
    match op {
        Op::None | Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose => {
            TaskPlan::default()
        }
        Op::Sum => reduce::plan_sum(s0.expect("sum has a source")),
        Op::MulMat { per_column } => matmul::plan(
            s0.expect("mul_mat src0"),
            src[1].expect("mul_mat src1"),
            dst,
            nth,
            *per_column,
        ),
        Op::SetRows => TaskPlan {
            // One chunk: duplicate ids may target the same row, so one thread writes them all
            // (in order: the last write wins, as in a sequential loop).
            n_chunks: 1,
            scratch_f32: s0ne0 + 16,
            ..TaskPlan::default()
        },
        Op::Cpy => {
            let s = s0.expect("cpy src0");
            if s.ne == dst.ne {
                // A converting or strided row is gathered into scratch first (copy_row).
                row_plan(s.ne[0] + 16)
            } else {
                TaskPlan {
                    n_chunks: dst.nelements().div_ceil(16384).clamp(1, nth * 4),
                    ..TaskPlan::default()
                }
            }
        }
        // Row ops that may need a converted/gathered source row (+ mask row) in scratch.
        Op::SoftMax { .. } => row_plan(2 * s0ne0 + 16),
        Op::FlashAttnExt { kv_splits, .. } => {
            let (q, k, v) = (
                s0.expect("flash_attn_ext q"),
                src[1].expect("flash_attn_ext k"),
                src[2].expect("flash_attn_ext v"),
            );
            if attn_quant::applies(k.dtype, v.dtype) {
                attn_quant::plan(q, k, v, nth)
            } else {
                attn::plan(q, k, v, *kv_splits, nth)
            }
        }
        Op::GetRows => row_plan(0),
        Op::SsmConv => TaskPlan {
            n_chunks: dst.ne[0].min(nth * 4).max(1),
            ..TaskPlan::default()
        },
        Op::SsmScan { .. } => TaskPlan {
            n_chunks: src[1].map_or(1, |x| x.ne[1]).min(nth * 4).max(1),
            ..TaskPlan::default()
        },
        Op::GatedDeltaNet { .. } => TaskPlan {
            // One piece per (head, sequence) at most.
            n_chunks: src[2].map_or(1, |v| v.ne[1] * v.ne[3]).min(nth * 4).max(1),
            ..TaskPlan::default()
        },
        Op::MulMatId => matmul::plan_id(
            s0.expect("mul_mat_id src0"),
            src[1].expect("mul_mat_id src1"),
            dst,
            nth,
        ),
        Op::Argmax | Op::SumRows | Op::Mean | Op::ArgsortTopK { .. } => {
            let s = s0.expect("reduction source");
            TaskPlan {
                n_chunks: row_chunks(s.nrows(), s.ne[0], nth),
                scratch_f32: s.ne[0] + 16,
                ..TaskPlan::default()
            }
        }
        // One long row (a decoding step's feed-forward): pieces of it, in groups of 16.
        Op::Swiglu if rows == 1 && ne0 >= SWIGLU_SPLIT_MIN => TaskPlan {
            n_chunks: nth.max(1),
            scratch_f32: s0ne0.max(ne0) * 2 + 16,
            ..TaskPlan::default()
        },
        // Up to NORM_ROWS rows of the source and a row each of weight and bias.
        Op::NormMulAdd { .. } => row_plan(ne0 * (reduce::NORM_ROWS + 2) + 16),
        _ => row_plan(s0ne0.max(ne0) * 2 + 16),
    }
}

/// Shortest single row that `swiglu` splits across threads.
const SWIGLU_SPLIT_MIN: usize = 2048;

/// INIT phase of `task` on thread `ith` of `nth`.
///
/// # Safety
/// `task` was planned and resolved by the executor for the current computation; `work`
/// holds at least `task.plan.work_shared` shared bytes. All threads run INIT for the same
/// node concurrently, and each writes only its own part of the shared buffer.
pub(crate) unsafe fn init(task: &Task, ith: usize, nth: usize, work: &mut Work) {
    // SAFETY: forwarded from the caller.
    unsafe {
        if let Op::MulMat { .. } | Op::MulMatId = task.op {
            // mul_mat_id converts b's rows into the same slots as mul_mat.
            matmul::init(task, ith, nth, work)
        }
        if matches!(task.op, Op::MulMatId) && ith == 0 {
            // One piece also groups the columns by matrix, after the converted rows.
            matmul::experts::group(task, work)
        }
    }
}

/// COMPUTE phase: chunk `chunk` of `task.plan.n_chunks`.
///
/// # Safety
/// As [`init`]; INIT of this node finished on every thread; no other thread computes the
/// same chunk. Chunks of one node write disjoint parts of `dst`.
pub(crate) unsafe fn compute_chunk(task: &Task, chunk: usize, work: &mut Work) -> Result<()> {
    let n = task.plan.n_chunks;
    // SAFETY: forwarded from the caller.
    unsafe {
        match task.op {
            Op::Add | Op::Sub | Op::Mul | Op::Div => elementwise::binary(task, chunk, n, work),
            Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Silu | Op::Gelu | Op::Tanh | Op::Relu => {
                elementwise::unary(task, chunk, n, work)
            }
            Op::Sigmoid | Op::Softplus => ssm::unary(task, chunk, n, work),
            Op::Hadamard { n: len } => elementwise::hadamard(task, len, chunk, n, work),
            Op::Swiglu => elementwise::swiglu(task, chunk, n, work),
            Op::Geglu => elementwise::geglu(task, chunk, n, work),
            Op::SwigluOai { .. } => elementwise::swiglu_oai(task, chunk, n, work),
            Op::AddId => return elementwise::add_id(task, chunk, n, work),
            Op::Repeat => elementwise::repeat(task, chunk, n, work),
            Op::Concat { dim } => elementwise::concat(task, dim, chunk, n, work),
            Op::Dup | Op::Cpy => elementwise::copy(task, chunk, n, work),
            Op::Sum => reduce::sum_chunk(task, chunk, n, work),
            Op::SumRows | Op::Mean => reduce::sum_rows(task, chunk, n, work),
            Op::Argmax => reduce::argmax(task, chunk, n, work),
            Op::ArgsortTopK { k } => reduce::argsort_top_k(task, k, chunk, n, work),
            Op::Norm { eps } => reduce::norm(task, eps, chunk, n, work),
            Op::RmsNorm { eps } => reduce::rms_norm(task, eps, chunk, n, work),
            Op::RmsNormMul { eps } => reduce::rms_norm_mul(task, eps, chunk, n, work),
            Op::NormMulAdd { eps } => reduce::norm_mul_add(task, eps, chunk, n, work),
            Op::GetRows => return rows::get_rows(task, chunk, n),
            Op::SetRows => return rows::set_rows(task, chunk, n, work),
            Op::MulMat { .. } => matmul::compute(task, chunk, n, work),
            Op::MulMatId => return matmul::compute_id(task, chunk, n, work),
            Op::DiagMaskInf { n_past } => nn::diag_mask_inf(task, n_past, chunk, n, work),
            Op::SoftMax { scale } => nn::soft_max(task, scale, chunk, n, work),
            Op::FlashAttnExt { scale, softcap, .. }
                if attn_quant::applies(task.s1().dtype, flash_attn_v_type(task)) =>
            {
                attn_quant::flash_attn_ext(task, scale, softcap, chunk, n, work)
            }
            Op::FlashAttnExt {
                scale,
                softcap,
                kv_splits,
            } => attn::flash_attn_ext(task, scale, softcap, kv_splits, chunk, n, work),
            Op::Rope { .. } => return nn::rope(task, chunk, n, work),
            Op::RopeYarn { .. } => rope_yarn::rope_yarn(task, chunk, n, work),
            Op::RopeFreqs { offset, mode } => {
                rope_freqs::rope_freqs(task, offset, mode, chunk, n, work)
            }
            Op::SsmConv => ssm::ssm_conv(task, chunk, n),
            Op::SsmScan { in_place } => return ssm::ssm_scan(task, in_place, chunk, n),
            Op::GatedDeltaNet { in_place } => {
                return ssm::gated_delta_net(task, in_place, chunk, n)
            }
            Op::None | Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose => {}
        }
    }
    Ok(())
}

/// FINALIZE phase, on one thread after every chunk finished.
///
/// # Safety
/// As [`compute_chunk`]; no other thread runs meanwhile.
pub(crate) unsafe fn finalize(task: &Task, work: &mut Work) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match task.op {
            Op::Sum => reduce::sum_finalize(task, work),
            Op::FlashAttnExt { .. }
                if attn_quant::applies(task.s1().dtype, flash_attn_v_type(task)) => {}
            Op::FlashAttnExt { kv_splits, .. } => attn::finalize(task, kv_splits, work),
            _ => {}
        }
    }
}

/// The value type of a `flash_attn_ext` node.
fn flash_attn_v_type(task: &Task) -> DType {
    task.src[2]
        .as_ref()
        .expect("the builder gives flash_attn_ext a value tensor")
        .dtype
}

/// The kernels' tests' deterministic generator: the high 31 bits of a 64-bit linear
/// congruential step of `seed` (Knuth's MMIX constants).
#[cfg(test)]
pub(crate) fn test_rng(seed: &mut u64) -> u32 {
    *seed = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (*seed >> 33) as u32
}
