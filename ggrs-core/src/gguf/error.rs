//! The error type of the GGUF reader and writer.
//!
//! Every variant says what is wrong and, for a file being read, where: the byte offset of the
//! field at fault and which part of the file it belongs to (the header, metadata entry `i`
//! with its key, tensor info `i` with its name).

use std::path::PathBuf;

/// Everything that can go wrong while reading or writing a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// Opening, mapping or writing the file at `path` failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// The output file could not be set up or completed (it is an input, a directory, …).
    #[error(transparent)]
    Output(#[from] crate::outfile::OutputError),

    /// Writing to the output of a [`GgufWriter`](super::GgufWriter) failed.
    #[error("writing {what} at byte {offset}: {source}")]
    Write {
        /// What was being written.
        what: String,
        /// Byte offset in the output where the write failed.
        offset: u64,
        /// The writer's error.
        #[source]
        source: std::io::Error,
    },

    /// The file does not start with `GGUF`.
    #[error("not a GGUF file: it starts with {found:02x?}, not \"GGUF\" (47 47 55 46)")]
    BadMagic {
        /// The first four bytes (fewer if the file is shorter).
        found: Vec<u8>,
    },

    /// A GGUF version this reader does not support (only 2 and 3 are).
    #[error("unsupported GGUF version {version} (this reader handles versions 2 and 3{hint})")]
    UnsupportedVersion {
        /// The version field.
        version: u32,
        /// Extra advice (for example about big-endian files), or empty.
        hint: &'static str,
    },

    /// The file ends before a field does.
    #[error(
        "file truncated: {what} needs {needed} bytes at offset {offset}, \
         but only {available} remain"
    )]
    Truncated {
        /// The field and where it is (e.g. "string length (metadata entry 3)").
        what: String,
        /// Byte offset of the field.
        offset: u64,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },

    /// A metadata value type id outside `0..=12`.
    #[error("unknown metadata value type id {id} at offset {offset} ({what})")]
    UnknownValueType {
        /// The type id read.
        id: u32,
        /// Byte offset of the type id.
        offset: u64,
        /// Where it is (e.g. "metadata entry 3, key `general.name`").
        what: String,
    },

    /// A tensor type id this library does not read: a retired one (4, 5, 31–33, 36–38), an
    /// unknown one, or one of ggml's types ggrs has no kernels for (none in ggml 0c1e570).
    #[error(
        "tensor `{name}` has {} (at offset {offset}), which ggrs cannot read; it reads {}. \
         A file of the same model in one of those types (e.g. Q4_K_M, IQ4_XS) works",
        crate::dtype::describe_type_id(*id),
        crate::dtype::supported_type_names()
    )]
    UnknownTensorType {
        /// Tensor name.
        name: String,
        /// The type id read.
        id: u32,
        /// Byte offset of the type id.
        offset: u64,
    },

    /// A count or length that cannot be right: it is larger than what the rest of the file
    /// could hold, or overflows the address space.
    #[error(
        "{what} at offset {offset} is {count}, more than the file can hold \
         (at most {max} from here)"
    )]
    TooLarge {
        /// What is being counted (e.g. "tensor count (header)").
        what: String,
        /// The count or length read.
        count: u64,
        /// Byte offset of the field.
        offset: u64,
        /// The largest value the remaining bytes allow.
        max: u64,
    },

    /// Arrays nested deeper than the reader allows (a hostile file could otherwise exhaust
    /// the stack).
    #[error("arrays nested more than {max} deep at offset {offset} ({what})")]
    TooDeep {
        /// Where it is.
        what: String,
        /// Byte offset of the innermost array.
        offset: u64,
        /// The nesting limit.
        max: usize,
    },

    /// A string (key, tensor name or value) that is not valid UTF-8.
    #[error("{what} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Which string.
        what: String,
        /// Byte offset of its first byte.
        offset: u64,
    },

    /// The same metadata key twice.
    #[error("duplicate metadata key `{key}` (second one at offset {offset})")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Byte offset of the second occurrence (0 when adding to a writer).
        offset: u64,
    },

    /// The same tensor name twice.
    #[error("duplicate tensor name `{name}` (second one at offset {offset})")]
    DuplicateTensor {
        /// The name.
        name: String,
        /// Byte offset of the second occurrence (0 when adding to a writer).
        offset: u64,
    },

    /// `general.alignment` is not a power of two that fits in a u32.
    #[error("general.alignment must be a non-zero power of two stored as u32, got {value}")]
    BadAlignment {
        /// The value found, as text.
        value: String,
    },

    /// A tensor's dimensions are invalid (count outside 1..=4, `ne[0]` not a multiple of the
    /// type's block size, a size overflowing the address space).
    #[error("tensor `{name}`: invalid shape {ne:?}: {detail}")]
    BadShape {
        /// Tensor name.
        name: String,
        /// The dimensions read (as many as given).
        ne: Vec<u64>,
        /// Which rule was broken.
        detail: String,
    },

    /// A tensor's data does not lie inside the file.
    #[error(
        "tensor `{tensor}`: its {size} bytes at data offset {offset} end past the end of the \
         data section ({data_len} bytes, starting at file offset {data_start})"
    )]
    BadOffset {
        /// Tensor name.
        tensor: String,
        /// Its offset, relative to the data section.
        offset: u64,
        /// Its size in bytes.
        size: u64,
        /// Bytes in the data section.
        data_len: u64,
        /// File offset of the data section.
        data_start: u64,
    },

    /// A tensor's offset is not a multiple of the file's alignment.
    #[error(
        "tensor `{tensor}`: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    Misaligned {
        /// Tensor name.
        tensor: String,
        /// Its offset, relative to the data section.
        offset: u64,
        /// The file's alignment.
        alignment: usize,
    },

    /// No tensor of this name in the file.
    #[error("no tensor named `{name}` in the file")]
    TensorNotFound {
        /// The name asked for.
        name: String,
    },

    /// A metadata value the writer cannot encode (for example an array whose elements are
    /// not all of one type).
    #[error("metadata key `{key}`: {detail}")]
    InvalidValue {
        /// The key.
        key: String,
        /// What is wrong.
        detail: String,
    },

    /// Tensor data given to the writer does not match its tensor info.
    #[error("tensor `{tensor}`: {detail}")]
    TensorData {
        /// Tensor name (or "-" when there is no tensor left to write).
        tensor: String,
        /// What is wrong (size mismatch, missing data…).
        detail: String,
    },

    /// Making a tensor in a [`Context`](crate::Context) failed (out of arena memory, data
    /// misaligned in memory for its type…).
    #[error("loading tensor `{name}`: {source}")]
    Context {
        /// Tensor name.
        name: String,
        /// The context's error (boxed: it is much larger than the other variants).
        #[source]
        source: Box<crate::Error>,
    },

    /// A part of a split model (other than the first) failed to parse.
    #[error("{}: {source}", path.display())]
    InPart {
        /// The part.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: Box<GgufError>,
    },

    /// The file opened is a later part of a split model: models are opened by their first
    /// part (as llama.cpp requires too).
    #[error(
        "{}: this is part {no} of {count} of a split model; open the first part instead{}",
        path.display(),
        first.as_ref().map_or(String::new(), |f| format!(", {}", f.display()))
    )]
    SplitNotFirst {
        /// The file opened.
        path: PathBuf,
        /// Its part number, from 1 (`split.no` + 1).
        no: u32,
        /// The number of parts (`split.count`).
        count: u32,
        /// The first part's name, when the file is named as llama-gguf-split names parts.
        first: Option<PathBuf>,
    },

    /// The first part of a split model is not named `PREFIX-00001-of-NNNNN.gguf`, so the
    /// other parts cannot be found.
    #[error(
        "{}: the file is the first of {count} parts of a split model, but its name does not \
         end in `-00001-of-{count:05}.gguf`, so the other parts cannot be found: keep the \
         names llama-gguf-split gave the parts (PREFIX-00001-of-{count:05}.gguf, …)",
        path.display()
    )]
    SplitName {
        /// The file opened.
        path: PathBuf,
        /// The number of parts it declares.
        count: u32,
    },

    /// A part of a split model is not there.
    #[error(
        "{}: part {no} of {count} of the split model {} is missing: put every part in the \
         same directory, named as llama-gguf-split names them",
        path.display(),
        first.display()
    )]
    SplitMissing {
        /// The missing part's expected name.
        path: PathBuf,
        /// Its part number, from 1.
        no: u32,
        /// The number of parts.
        count: u32,
        /// The first part.
        first: PathBuf,
    },

    /// A part's split keys disagree with its place (wrong `split.no`, another `split.count`,
    /// a missing or mistyped key), or the parts' tensors do not add up to
    /// `split.tensors.count`.
    #[error("{}: {detail}", path.display())]
    SplitMismatch {
        /// The part at fault.
        path: PathBuf,
        /// What disagrees.
        detail: String,
    },

    /// A split that cannot be made ([`plan_split`](super::plan_split)): a zero limit, a
    /// tensor larger than the size limit, too many parts.
    #[error("cannot split the model: {detail}")]
    SplitPlan {
        /// Why.
        detail: String,
    },

    /// Two parts of a split model hold a tensor of the same name.
    #[error(
        "tensor `{name}` is in two parts of the split model: {} and {}",
        first.display(),
        second.display()
    )]
    SplitDuplicateTensor {
        /// The tensor name.
        name: String,
        /// The part where it is first.
        first: PathBuf,
        /// The part where it is again.
        second: PathBuf,
    },
}
