//! # ggrs-core
//!
//! GGML-style tensors in a static arena, a graph builder and a multi-threaded CPU executor.
//!
//! Work happens in three steps, as in ggml:
//!
//! 1. **Build.** Tensors live in a [`Context`], one memory arena of a size fixed when it is
//!    made. Op methods such as [`Context::mul_mat`] or [`Context::add`] check their operands'
//!    shapes and return a new tensor that records the op and its sources; they compute
//!    nothing.
//! 2. **Graph.** [`Graph::build`] walks the source links back from an output and lists every
//!    tensor it depends on, sources before the tensors that read them.
//! 3. **Compute.** An [`Executor`], a pool of threads started once and reused, runs the
//!    graph's nodes in that order and writes each result into the arena.
//!
//! Shapes use ggml's axis order: `ne = [n0, n1, n2, n3]`, `n0` innermost (adjacent in memory),
//! so a matrix of `rows` rows of `cols` values has the shape `[cols, rows]`.
//!
//! ## f(x) = a·x² + b
//!
//! ```
//! use ggrs_core::{Context, Executor, Graph, Result, Tensor};
//!
//! /// Builds f = a·x² + b in `ctx`; returns (x, f).
//! fn build(ctx: &mut Context) -> Result<(Tensor, Tensor)> {
//!     let x = ctx.new_f32(2.0)?; // a 1-element f32 tensor (a leaf: no op)
//!     let a = ctx.new_f32(3.0)?;
//!     let b = ctx.new_f32(4.0)?;
//!     ctx.set_name(x, "x")?;
//!     let x2 = ctx.mul(x, x)?; // nodes: ops recorded, nothing computed yet
//!     let ax2 = ctx.mul(a, x2)?;
//!     let f = ctx.add(ax2, b)?;
//!     ctx.set_name(f, "f")?;
//!     Ok((x, f))
//! }
//!
//! # fn main() -> Result<()> {
//! // Measure mode: a context that allocates nothing and counts the bytes the same tensors
//! // need (metadata, data, alignment) ...
//! let mut measure = Context::measure();
//! build(&mut measure)?;
//! // ... so that the real context can be made exactly that large.
//! let mut ctx = Context::with_mem_size(measure.used_mem());
//! let (x, f) = build(&mut ctx)?;
//!
//! let graph = Graph::build(&ctx, f)?;
//! assert_eq!((graph.nodes().len(), graph.leafs().len()), (3, 3));
//! println!("{}", graph.display(&ctx)); // one line per node and leaf
//! let _dot: String = graph.to_dot(&ctx); // the same as Graphviz DOT
//!
//! let mut exec = Executor::new(1); // threads start here and are reused by every compute
//! exec.compute(&mut ctx, &graph)?;
//! assert_eq!(ctx.get_f32_scalar(f)?, 16.0); // 3·2² + 4
//!
//! // Set an input and compute the same graph again.
//! ctx.set_f32(x, &[-1.5])?;
//! exec.compute(&mut ctx, &graph)?;
//! assert_eq!(ctx.get_f32_scalar(f)?, 10.75); // 3·2.25 + 4
//! # Ok(())
//! # }
//! ```
//!
//! ## A dense layer: mul_mat, bias, activation, softmax
//!
//! ```
//! use ggrs_core::{Context, DType, Executor, Graph, Result};
//!
//! # fn main() -> Result<()> {
//! let (k, n, m) = (4, 3, 2); // 4 inputs, 3 outputs, a batch of 2 rows
//! let mut ctx = Context::with_mem_size(64 * 1024);
//! let w = ctx.new_tensor_2d(DType::F32, k, n)?; // [k, n]: n rows of k weights
//! let bias = ctx.new_tensor_1d(DType::F32, n)?; // [n]
//! let x = ctx.new_tensor_2d(DType::F32, k, m)?; // [k, m]: m rows of k inputs
//!
//! // mul_mat(w, x): [k, n] × [k, m] → [n, m], out[i, j] = Σ_k w[k, i]·x[k, j] (x·wᵀ)
//! let y = ctx.mul_mat(w, x)?;
//! let y = ctx.add(y, bias)?; // bias [n] is broadcast over the m rows
//! let y = ctx.silu(y)?;
//! let probs = ctx.soft_max(y)?; // softmax of each row of n values
//!
//! let wv: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.7).sin()).collect();
//! let bv = [0.1, -0.2, 0.3];
//! let xv: Vec<f32> = (0..k * m).map(|i| i as f32 * 0.25 - 1.0).collect();
//! ctx.set_f32(w, &wv)?;
//! ctx.set_f32(bias, &bv)?;
//! ctx.set_f32(x, &xv)?;
//!
//! let graph = Graph::build(&ctx, probs)?;
//! Executor::new(2).compute(&mut ctx, &graph)?; // 2 threads; same result with any count
//! let got = ctx.to_f32_vec(probs)?; // [n, m]: row j holds the n probabilities of input j
//!
//! // The same with plain loops.
//! for j in 0..m {
//!     let z: Vec<f32> = (0..n)
//!         .map(|i| {
//!             let s: f32 = (0..k).map(|c| wv[i * k + c] * xv[j * k + c]).sum::<f32>() + bv[i];
//!             s / (1.0 + (-s).exp()) // silu
//!         })
//!         .collect();
//!     let total: f32 = z.iter().map(|v| v.exp()).sum();
//!     for i in 0..n {
//!         assert!((got[j * n + i] - z[i].exp() / total).abs() < 1e-5);
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! `examples/simple_graph.rs` in the repository walks through the same steps at more length
//! (`cargo run --release --example simple_graph`).
//!
//! ## Where things are
//!
//! - [`context`]: the [`Context`] arena. One 64-byte-aligned buffer; tensor metadata and data
//!   are bump-allocated from it and never freed one by one. [`Context::measure`] builds
//!   without data to learn a graph's size; [`Context::checkpoint`] and [`Context::rewind`]
//!   drop everything made after a point (keep the weights, drop a step's graph). Running out
//!   of room is an [`Error::OutOfMemory`]. Weights may also point into external read-only
//!   buffers such as a memory-mapped file ([`Context::new_tensor_external`]).
//! - [`alloc`]: graph allocation with memory reuse ([`Context::alloc_graph`]): with deferred
//!   allocation on, intermediates get arena space just before they are computed and give it
//!   back once their last consumer has run, so a step needs its peak memory, not the sum.
//! - [`tensor`]: [`Tensor`] handles and [`TensorMeta`], ggml's layout: `ne[4]` element counts
//!   (`ne[0]` innermost) and `nb[4]` byte strides (`nb[0]` the type size, `nb[1]` a row's
//!   bytes, `ne[0] / block_size · block_bytes` for block types). Views (`view_*`, `reshape`,
//!   `permute`, `transpose`) share their source's data with other strides; `cont` copies.
//! - Ops: methods of [`Context`], each stating its shape contract in its doc comment
//!   (arithmetic with broadcasting, activations, `mul_mat`, norms, `soft_max`, `rope`,
//!   `flash_attn_ext`, `get_rows`/`set_rows`, reductions, views and copies). [`Op`] names
//!   what made a tensor. Where llama.cpp's results are the oracle (`mul_mat` on Q8_0, Q4_0
//!   and F16 weights, activation quantization, SiLU, rope, attention), kernels add in the
//!   order ggml's x86 build does, so a model's logits match llama.cpp's to the bit.
//! - [`graph`]: [`Graph`], nodes in topological order and leaves apart, printable
//!   ([`Graph::display`]) and exportable as Graphviz DOT ([`Graph::to_dot`]).
//! - [`exec`]: [`Executor`]. It plans each node (task count, work buffer size; [`Plan`]),
//!   then its persistent threads run every node in up to three phases: INIT on all threads
//!   before the main work (e.g. `mul_mat` converting its activations to the weight's
//!   dot-product type), COMPUTE in chunks taken from an atomic counter, FINALIZE on one thread
//!   for ops that combine partial results. Views cost nothing; nodes that touch memory
//!   independently run as one epoch, and a thread waits for work to be done, never for a
//!   peer to arrive (a preempted peer delays nobody unless it holds a chunk). Each output element is
//!   computed by one thread in a fixed order, so results do not depend on the thread count.
//!   Optional per-node timing ([`Executor::set_profiling`]) and an abort callback.
//! - [`dtype`] and [`types`]: [`DType`] (GGUF type ids, block and byte sizes) and per-type
//!   traits (row conversions to and from f32, the type a dot product pairs with);
//!   [`quants`]: block-quantized types.
//! - [`kernels`]: the CPU kernels behind each op. Vector primitives in [`kernels::vec`] are
//!   compiled as plain Rust and for AVX2 and AVX-512; the best version for the CPU is chosen
//!   once at run time from [`cpu::isa`], the one instruction-set vocabulary ([`cpu::Isa`]).
//!   Set the environment variable `GGRS_FORCE_SCALAR=1` to force the plain versions (to
//!   compare against them, or to rule out a SIMD bug), `GGRS_MAX_ISA=avx2` (for example) to
//!   run what a CPU without AVX-512 runs, `GGRS_MAX_ISA=avx2vnni` what one with AVX-VNNI
//!   runs ([`cpu::CpuFeatures::detect`]).
//! - [`weights`]: weights prepared once for the kernels ([`weights::prepare`]: panel
//!   layouts on huge pages) and the per-column property batch invariance needs
//!   ([`weights::columns_independent`]), so that a model loader names no kernel.
//! - [`gguf`]: GGUF files, read through a memory map without copying tensor data, and
//!   written; [`quantize`]: writing a GGUF file with each tensor converted to the type a
//!   caller's plan names (the recipes that make plans live in `ggrs_llama::quantize`).
//! - [`error`]: the one [`Error`] type; every fallible call returns [`Result`].
//!
//! ## From a `mul_mat` node to the instruction that runs it
//!
//! In the order the code runs (files under `src/`):
//!
//! 1. `ops/nn.rs`: [`Context::mul_mat`] checks shapes and records [`Op::MulMat`] (with
//!    [`Context::set_per_column_products`]'s setting); nothing is computed.
//! 2. `exec/`: [`Executor::compute`] plans every node through `kernels/mod.rs` (`plan`),
//!    which hands `mul_mat` to `kernels/matmul/mod.rs` (`plan`).
//! 3. `kernels/select.rs` (`select`), the one table that decides, picks the kernel and the
//!    activation form from the weight's type and shape, the column count and [`cpu::isa`]:
//!    a panel kernel (`panel_kind`, when `panels_run`), F16 tiles, the tiled k-quant panels,
//!    or element-wise dot products in the order `quants/dispatch.rs` names
//!    ([`quants::dispatch::ggml_sum_order`]) with the best build it allows
//!    ([`quants::dispatch::active_variant`]).
//! 4. INIT (`kernels/matmul/mod.rs`: `init`): the activations are converted once to the
//!    weight's dot-product type (`quants/dispatch.rs`: `activation_quantizer`, or
//!    `kernels/ggml_arith/quantize.rs` where ggml's x86 rounding is the oracle).
//! 5. COMPUTE (`kernels/matmul/mod.rs`: `compute`), chunk by chunk on every thread: panels
//!    come from the weight's prepared copy ([`weights::prepare`], `kernels/packed.rs`) or are
//!    packed per node. Every `#[target_feature]` function is under `kernels/x86/` (`panel/`
//!    for the panel kernels, `avx2.rs`, `avx512.rs`, `tiled_avx2.rs`, `f16.rs`, `exp.rs`,
//!    `attn.rs`, …) or `kernels/aarch64/` (`neon.rs`); `kernels/dot_builds.rs` wraps the
//!    block dot products for `quants/dispatch.rs`. Portable bodies sit beside their ops:
//!    `quants/` (the block formats and their reference dot products) and
//!    `kernels/ggml_arith/` (ggml's orders: `dots.rs`, `f16.rs`, `quantize.rs`, `exp.rs`),
//!    compiled for more instruction sets by `kernels/x86/mod.rs`'s `target_features!`.
//!
//! A weight type lives in `quants/` (its block layout, reference quantizer, dequantizer and
//! dot product, and the `with_block!` row of `quants/mod.rs` that `types/` reads); its SIMD
//! kernels in `kernels/x86/`, listed by `kernels/dot_builds.rs`.
#![warn(missing_docs)]
// Every `unsafe` block says why it is sound (`// SAFETY:`), as the house rules ask.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod alloc;
pub mod context;
pub mod cpu;
pub mod dtype;
pub mod error;
pub mod exec;
pub mod gguf;
pub mod graph;
pub mod kernels;
pub mod op;
mod ops;
pub mod outfile;
pub mod quantize;
pub mod quants;
pub mod tensor;
pub mod types;
pub mod weights;

pub use context::{
    available_memory, Checkpoint, Context, ContextParams, ExternalData, ARENA_ALIGN,
};
pub use dtype::DType;
pub use error::{Error, Result};
pub use exec::{compute_graph, Executor, MatMulObserver, MatMulView, NodeTiming, Plan};
pub use graph::Graph;
pub use op::{Op, RopeMode};
pub use ops::nn::{RopeParams, FLASH_ATTN_KV_TYPES, SET_ROWS_BLOCK_TYPES};
pub use ops::rope_yarn::RopeYarn;
pub use tensor::{Tensor, TensorFlags, TensorMeta};
pub use weights::columns_independent as mul_mat_columns_independent;
