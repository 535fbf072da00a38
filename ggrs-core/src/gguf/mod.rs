//! GGUF files: read through a memory map (no copy of tensor data), and written in a stream.
//!
//! A GGUF file (versions 2 and 3; all numbers little-endian) is laid out as:
//!
//! ```text
//! header        "GGUF"  version: u32  tensor_count: u64  kv_count: u64
//! metadata      kv_count × (key: string, type: u32, value)
//! tensor infos  tensor_count × (name: string, n_dims: u32, ne: [u64; n_dims], type: u32,
//!                               offset: u64)
//! padding       zeros up to the next multiple of `general.alignment` (default 32)
//! data          each tensor's bytes at data start + its offset (a multiple of the alignment)
//! ```
//!
//! A string is a u64 byte length followed by UTF-8 bytes; a value is one of the thirteen
//! [`ValueType`]s, an array being an element type (u32), a count (u64) and the elements
//! (arrays may nest). A tensor's type id is a [`DType`](crate::DType) id and its size is
//! `row_size(ne[0]) · ne[1] · ne[2] · ne[3]` bytes.
//!
//! [`GgufFile`] parses and validates everything but the tensor bytes, and hands out tensor
//! data as slices of the mapping or as external tensors of a [`Context`](crate::Context):
//!
//! ```no_run
//! use ggrs_core::{gguf::GgufFile, Context};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = GgufFile::open("model.gguf")?;
//! let arch = file.get("general.architecture").and_then(|v| v.as_str());
//! let mut ctx = Context::with_mem_size(Context::mem_size_for(file.tensors().len(), 0));
//! let embd = file.load_tensor(&mut ctx, "token_embd.weight")?; // points into the file
//! # let _ = (arch, embd); Ok(()) }
//! ```
//!
//! A model split into parts by llama-gguf-split (`NAME-00001-of-00003.gguf`, …) opens by its
//! first part and reads as one file (see [`GgufFile::open`]); [`write_split`] and
//! [`write_merged`] write such parts and join them again.
//!
//! [`GgufWriter`] collects metadata and tensor infos, then writes the file front to back,
//! asking for each tensor's bytes in turn, so a converter never holds more than one tensor.

mod error;
mod mapping;
mod names;
mod reader;
mod split;
mod value;
mod writer;

pub use error::GgufError;
pub use mapping::HugePageReport;
#[cfg(target_arch = "x86_64")]
pub(crate) use mapping::HUGE as HUGE_PAGE;
pub use names::{split_path, split_prefix, SPLIT_COUNT_KEY, SPLIT_NO_KEY, SPLIT_TENSORS_KEY};
pub use reader::{GgufFile, SplitPart, TensorInfo};
pub use split::{plan_split, split_writers, write_merged, write_split, SplitLimit, WriteProgress};
pub use value::{Value, ValueType};
pub use writer::{GgufWriter, TensorDataWriter};

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// The version [`GgufWriter`] writes.
pub const VERSION: u32 = 3;

/// Data alignment when the file has no `general.alignment` key.
pub const DEFAULT_ALIGNMENT: usize = 32;

/// The metadata key that sets the data alignment (a u32 power of two).
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// How deep arrays may nest in a file that this reader accepts (an array of arrays is depth 2).
/// Real files use depth 1; the limit keeps a hostile file from exhausting the stack.
pub const MAX_ARRAY_DEPTH: usize = 32;
