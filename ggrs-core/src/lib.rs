//! # ggrs-core
//!
//! GGML-style tensors in a static arena, a graph builder and a multi-threaded CPU executor.
#![warn(missing_docs)]

pub mod context;
pub mod dtype;
pub mod error;
pub mod exec;
pub mod graph;
pub mod kernels;
pub mod op;
mod ops;
pub mod quants;
pub mod tensor;
pub mod types;

pub use context::{Checkpoint, Context, ContextParams, ExternalData, ARENA_ALIGN};
pub use dtype::DType;
pub use error::{Error, Result};
pub use exec::{compute_graph, Executor, NodeTiming, Plan};
pub use graph::Graph;
pub use op::{Op, RopeMode};
pub use ops::nn::RopeParams;
pub use tensor::{Tensor, TensorFlags, TensorMeta};
