//! Models split across several GGUF files, as llama.cpp's `llama-gguf-split` writes them and
//! llama.cpp loads them: `PREFIX-00001-of-00003.gguf`, `PREFIX-00002-of-00003.gguf`, ….
//!
//! Every part carries `split.no` (u16, from 0), `split.count` (u16) and
//! `split.tensors.count` (i32, the tensors of all parts together); the first part also has
//! all of the model's metadata, the others only those three keys. Each part's tensor infos
//! list its own tensors, with offsets into its own data section.
//! [`GgufFile::open`](super::GgufFile::open) reads such a model as one file; this module
//! writes them ([`plan_split`], [`write_split`], [`write_merged`]; their names are
//! [`split_path`]'s).

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::error::GgufError;
use super::names::{split_path, SPLIT_COUNT_KEY, SPLIT_NO_KEY, SPLIT_TENSORS_KEY};
use super::reader::GgufFile;
use super::value::Value;
use super::writer::GgufWriter;

type Result<T> = std::result::Result<T, GgufError>;

/// llama.cpp's padding of tensor data when it plans parts by size (`GGUF_DEFAULT_ALIGNMENT`).
const PLAN_PADDING: u64 = 32;

/// How [`plan_split`] cuts a model into parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitLimit {
    /// At most this many tensors per part (`--split-max-tensors`).
    Tensors(usize),
    /// At most this many bytes of tensor data per part, each tensor counted padded to 32
    /// bytes (`--split-max-size`; the metadata is not counted, as in llama-gguf-split).
    Bytes(u64),
}

/// The tensors of each part (ranges of indices into `file.tensors()`), cut as
/// llama-gguf-split cuts them for the same limit: by count, a new part every `n` tensors; by
/// size, a new part before the tensor that would take the part's data past the limit. Fails
/// when the limit is 0, or when a part would be empty (the first tensor alone is larger
/// than the size limit), which llama-gguf-split refuses too.
pub fn plan_split(file: &GgufFile, limit: SplitLimit) -> Result<Vec<Range<usize>>> {
    let tensors = file.tensors();
    let mut parts = Vec::new();
    let mut start = 0;
    let mut size = 0u64;
    match limit {
        SplitLimit::Tensors(0) | SplitLimit::Bytes(0) => {
            return Err(GgufError::SplitPlan {
                detail: "the limit per part must be at least 1".into(),
            })
        }
        SplitLimit::Tensors(n) => {
            while start < tensors.len() {
                let end = (start + n).min(tensors.len());
                parts.push(start..end);
                start = end;
            }
        }
        SplitLimit::Bytes(max) => {
            for (i, t) in tensors.iter().enumerate() {
                let padded = (t.size as u64).next_multiple_of(PLAN_PADDING);
                if size + padded > max {
                    if i == start {
                        return Err(GgufError::SplitPlan {
                            detail: format!(
                                "tensor `{}` alone takes {padded} bytes, more than the limit \
                                 of {max} bytes per part: choose a larger --split-max-size",
                                t.name
                            ),
                        });
                    }
                    parts.push(start..i);
                    start = i;
                    size = padded;
                } else {
                    size += padded;
                }
            }
            if start < tensors.len() || parts.is_empty() {
                parts.push(start..tensors.len());
            }
        }
    }
    if parts.is_empty() {
        parts.push(0..0);
    }
    if parts.len() > u16::MAX as usize {
        return Err(GgufError::SplitPlan {
            detail: format!(
                "{} parts; split.no and split.count are u16, so at most {}: choose a larger \
                 limit",
                parts.len(),
                u16::MAX
            ),
        });
    }
    Ok(parts)
}

/// The writers of the parts of `plan` (from [`plan_split`]): the first with all of
/// `file`'s metadata (except any split keys it had), every one with `split.no`,
/// `split.tensors.count` and `split.count` appended and its own tensors, as
/// llama-gguf-split lays them out.
pub fn split_writers(file: &GgufFile, plan: &[Range<usize>]) -> Result<Vec<GgufWriter>> {
    let count = u16::try_from(plan.len()).map_err(|_| GgufError::SplitPlan {
        detail: format!("{} parts, more than {}", plan.len(), u16::MAX),
    })?;
    let n_tensors = i32::try_from(file.tensors().len()).map_err(|_| GgufError::SplitPlan {
        detail: format!(
            "{} tensors; split.tensors.count is an i32",
            file.tensors().len()
        ),
    })?;
    let mut writers = Vec::with_capacity(plan.len());
    for (no, range) in plan.iter().enumerate() {
        let mut w = GgufWriter::new();
        if no == 0 {
            copy_metadata(file, &mut w)?;
        }
        // In llama-gguf-split's order: it sets `split.count` last, once it knows it.
        w.add_kv(SPLIT_NO_KEY, Value::U16(no as u16))?;
        w.add_kv(SPLIT_TENSORS_KEY, Value::I32(n_tensors))?;
        w.add_kv(SPLIT_COUNT_KEY, Value::U16(count))?;
        for t in &file.tensors()[range.clone()] {
            w.add_tensor_info(t.name.clone(), t.dtype, t.shape())?;
        }
        w.protect(file.sources().cloned());
        writers.push(w);
    }
    Ok(writers)
}

/// Appends `file`'s metadata to `w`, leaving out the split keys.
fn copy_metadata(file: &GgufFile, w: &mut GgufWriter) -> Result<()> {
    for (k, v) in file.metadata() {
        if ![SPLIT_NO_KEY, SPLIT_COUNT_KEY, SPLIT_TENSORS_KEY].contains(&k.as_str()) {
            w.add_kv(k.clone(), v.clone())?;
        }
    }
    Ok(())
}

/// Progress of [`write_split`] and [`write_merged`], reported after each tensor.
#[derive(Debug, Clone, Copy)]
pub struct WriteProgress<'a> {
    /// The file being written.
    pub path: &'a Path,
    /// Its number, from 0, and how many files are written.
    pub file: usize,
    /// How many files are written.
    pub files: usize,
    /// The tensor just written.
    pub name: &'a str,
    /// Tensors written so far (of all files) and in all.
    pub tensors_done: usize,
    /// Tensors in all.
    pub tensors_total: usize,
    /// Bytes of tensor data written so far and in all.
    pub bytes_done: u64,
    /// Bytes of tensor data in all.
    pub bytes_total: u64,
}

/// Writes `file` as the parts `plan` (from [`plan_split`]) to `split_path(prefix, i, n)`,
/// each written whole to a temporary file and renamed into place (an existing file of that
/// name is replaced; refusing is the caller's choice). No part may be one of `file`'s own
/// files. Returns the parts' paths.
pub fn write_split(
    file: &GgufFile,
    plan: &[Range<usize>],
    prefix: &Path,
    mut progress: impl FnMut(&WriteProgress<'_>),
) -> Result<Vec<PathBuf>> {
    let writers = split_writers(file, plan)?;
    let count = writers.len() as u32;
    let paths: Vec<PathBuf> = (0..count).map(|i| split_path(prefix, i, count)).collect();
    let mut counter = Counter::new(file);
    for (i, (w, path)) in writers.iter().zip(&paths).enumerate() {
        write_one(file, w, path, i, paths.len(), &mut counter, &mut progress)?;
    }
    Ok(paths)
}

/// Writes the split model `file` (opened by its first part) to `out` as one file: the first
/// part's metadata without the split keys, every part's tensors in order. A model split
/// from a file llama-gguf-split or [`write_split`] could have written (tensors in order,
/// each padded to the alignment) comes back byte for byte. (llama-gguf-split `--merge`
/// keeps the split keys instead, with `split.count` 0.) Fails if `file` is not split.
pub fn write_merged(
    file: &GgufFile,
    out: &Path,
    mut progress: impl FnMut(&WriteProgress<'_>),
) -> Result<()> {
    if file.get(SPLIT_COUNT_KEY).is_none() {
        let path = file.source().map_or_else(PathBuf::new, |s| s.path.clone());
        return Err(GgufError::SplitMismatch {
            path,
            detail: format!(
                "not a split model (no {SPLIT_COUNT_KEY} key): there is nothing to merge"
            ),
        });
    }
    let mut w = GgufWriter::new();
    copy_metadata(file, &mut w)?;
    for t in file.tensors() {
        w.add_tensor_info(t.name.clone(), t.dtype, t.shape())?;
    }
    w.protect(file.sources().cloned());
    let mut counter = Counter::new(file);
    write_one(file, &w, out, 0, 1, &mut counter, &mut progress)
}

/// Running totals for progress reports.
struct Counter {
    tensors_done: usize,
    tensors_total: usize,
    bytes_done: u64,
    bytes_total: u64,
}

impl Counter {
    fn new(file: &GgufFile) -> Counter {
        Counter {
            tensors_done: 0,
            tensors_total: file.tensors().len(),
            bytes_done: 0,
            bytes_total: file.tensors().iter().map(|t| t.size as u64).sum(),
        }
    }
}

/// Writes one output file, its tensors' data taken from `file` by name.
fn write_one(
    file: &GgufFile,
    w: &GgufWriter,
    path: &Path,
    index: usize,
    files: usize,
    counter: &mut Counter,
    progress: &mut impl FnMut(&WriteProgress<'_>),
) -> Result<()> {
    w.write_to_path(path, |info, out| {
        let src = file.tensor(&info.name).ok_or_else(|| {
            std::io::Error::other(format!("tensor `{}` vanished from the input", info.name))
        })?;
        out.write_all(file.tensor_data(src))?;
        counter.tensors_done += 1;
        counter.bytes_done += src.size as u64;
        progress(&WriteProgress {
            path,
            file: index,
            files,
            name: &info.name,
            tensors_done: counter.tensors_done,
            tensors_total: counter.tensors_total,
            bytes_done: counter.bytes_done,
            bytes_total: counter.bytes_total,
        });
        Ok(())
    })
}
