//! Reading GGUF files: a bounds-checked parser over any byte buffer, and [`GgufFile::open`],
//! which runs it over a read-only memory map of the file.
//!
//! The parser never trusts a number it reads: every length and count is compared with the
//! bytes left in the buffer before anything is read or allocated, every type id is looked up
//! before use, and every tensor's data range is checked against the data section. A bad file
//! is a [`GgufError`] naming the field and its byte offset.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::GgufError;
use super::mapping::{FileMap, HugePageReport};
use super::names::{split_path, split_prefix, SPLIT_COUNT_KEY, SPLIT_NO_KEY, SPLIT_TENSORS_KEY};
use super::value::{Value, ValueType};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH};
use crate::context::{Context, ExternalData};
use crate::dtype::DType;
use crate::tensor::Tensor;

type Result<T> = std::result::Result<T, GgufError>;

/// Bytes a tensor info takes at the least: name length (8), `n_dims` (4), one dimension (8),
/// type (4), offset (8).
const MIN_TENSOR_INFO: usize = 32;
/// Bytes a metadata entry takes at the least: key length (8), value type (4), a 1-byte value.
const MIN_KV: usize = 13;
/// Initial capacity reserved for an array, at most: a count that passed the size check is
/// still only a claim, so larger arrays grow as their elements are actually read.
const MAX_RESERVE: usize = 1 << 16;

/// Where a tensor is and what it holds, as read from the file's tensor infos.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name (`token_embd.weight`, `blk.0.attn_q.weight`…).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Element counts, innermost first; axes past `n_dims` are 1.
    pub ne: [usize; 4],
    /// Number of axes stored in the file (1 to 4).
    pub n_dims: usize,
    /// Byte offset of the data, relative to the start of the data section: for a split
    /// model ([`GgufFile::parts`]), relative to the first part's data section in
    /// [`GgufFile::data`], where the parts lie one after the other (see
    /// [`GgufFile::tensor_part`] for the offset in the part's own file).
    pub offset: u64,
    /// Bytes of data: `dtype.row_size(ne[0]) * ne[1] * ne[2] * ne[3]`.
    pub size: usize,
}

impl TensorInfo {
    /// The stored axes: `&ne[..n_dims]`.
    pub fn shape(&self) -> &[usize] {
        &self.ne[..self.n_dims.clamp(1, 4)]
    }

    /// Number of elements (`ne[0] * ne[1] * ne[2] * ne[3]`, saturating).
    pub fn nelements(&self) -> usize {
        self.ne.iter().fold(1usize, |a, &n| a.saturating_mul(n))
    }
}

/// One file of a model split across several ([`GgufFile::parts`]), as llama-gguf-split
/// writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitPart {
    /// The file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Where its data section starts in the file.
    pub data_offset: usize,
    /// How many tensors it holds.
    pub n_tensors: usize,
    /// Where the file starts in [`GgufFile::data`].
    pub start: usize,
}

/// A parsed GGUF file: its metadata, tensor infos and the bytes they point into.
///
/// Parsing validates the whole header, metadata and tensor-info region and every tensor's
/// data range; tensor data itself is not read until asked for, and never copied. A
/// `GgufFile` is `Send + Sync` and can be shared across threads.
///
/// A model split into parts (`NAME-00001-of-00003.gguf`, …, as llama-gguf-split writes and
/// llama.cpp loads) is opened by its first part and reads as one file: the first part's
/// metadata, every part's tensors in one table ([`GgufFile::parts`] lists the files).
pub struct GgufFile {
    data: Arc<dyn ExternalData>,
    /// The mapping behind `data`, when the file was opened from disk (see `release_pages`).
    map: Option<Arc<FileMap>>,
    version: u32,
    alignment: usize,
    data_start: usize,
    metadata: Vec<(String, Value)>,
    kv_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// The file this was opened from (for outputs to refuse it), when opened from disk.
    source: Option<crate::outfile::Protected>,
    /// The parts of a split model, in order (empty for a single file).
    parts: Vec<SplitPart>,
    /// For a split model: the part of each tensor, indexed like `tensors`.
    tensor_parts: Vec<u32>,
    /// Every part but the first, as inputs to protect (empty for a single file).
    more_sources: Vec<crate::outfile::Protected>,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("bytes", &self.data.bytes().len())
            .field("alignment", &self.alignment)
            .field("data_start", &self.data_start)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("parts", &self.parts.len())
            .finish()
    }
}

impl GgufFile {
    /// Opens and parses the GGUF file at `path` through a read-only memory map (no copy of
    /// tensor data is made). Fails with [`GgufError::Io`] if the file cannot be opened or
    /// mapped, and with the parser's errors if it is not a valid GGUF v2/v3 file.
    ///
    /// On Linux the map starts at a 2 MiB boundary and is advised for transparent huge
    /// pages, so that parts of the file the page cache holds in 2 MiB folios are mapped with
    /// 2 MiB entries (see [`GgufFile::settle_huge_pages`]).
    ///
    /// The file must not be modified or truncated while the `GgufFile` (or any tensor
    /// loaded from it) is alive: the mapping shows the file's current contents.
    ///
    /// The first part of a split model (`split.count` > 1, `split.no` 0) opens the whole
    /// model: the other parts are found by llama.cpp's naming (`PREFIX-%05d-of-%05d.gguf`),
    /// mapped after the first in one range of addresses (no copy on Linux) and checked: every
    /// part present ([`GgufError::SplitMissing`]), each part's `split.no` its place and its
    /// `split.count` the first's, the tensors adding up to `split.tensors.count`
    /// ([`GgufError::SplitMismatch`]), no tensor in two parts
    /// ([`GgufError::SplitDuplicateTensor`]). A later part is refused with the first part's
    /// name ([`GgufError::SplitNotFirst`]): the keys that describe the model are only in the
    /// first, and llama.cpp refuses the same way.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let file = GgufFile::open_single(path)?;
        let count = split_key(&file, SPLIT_COUNT_KEY, path)?.unwrap_or(0);
        if count <= 1 {
            return Ok(file);
        }
        let no = split_key(&file, SPLIT_NO_KEY, path)?.ok_or_else(|| GgufError::SplitMismatch {
            path: path.to_path_buf(),
            detail: format!("the file has {SPLIT_COUNT_KEY} = {count} but no {SPLIT_NO_KEY}"),
        })?;
        if no != 0 {
            return Err(GgufError::SplitNotFirst {
                path: path.to_path_buf(),
                no: no + 1,
                count,
                first: split_prefix(path, no, count).map(|p| split_path(&p, 0, count)),
            });
        }
        GgufFile::open_split(path, count, file)
    }

    /// Opens the `count` parts of a split model whose first part is `first`, already parsed
    /// as `head` (whose metadata and tensor infos are kept: they do not depend on where the
    /// file is mapped).
    fn open_split(first: &Path, count: u32, head: GgufFile) -> Result<GgufFile> {
        let head_len = head.data.bytes().len();
        let mut first_part = Some(Parsed {
            version: head.version,
            alignment: head.alignment,
            data_start: head.data_start,
            metadata: head.metadata,
            kv_index: head.kv_index,
            tensors: head.tensors,
            tensor_index: head.tensor_index,
        });
        let prefix = split_prefix(first, 0, count).ok_or_else(|| GgufError::SplitName {
            path: first.to_path_buf(),
            count,
        })?;
        let mut files = Vec::with_capacity(count as usize);
        let mut paths = Vec::with_capacity(count as usize);
        let mut sources = Vec::with_capacity(count as usize);
        for no in 0..count {
            let path = if no == 0 {
                first.to_path_buf()
            } else {
                split_path(&prefix, no, count)
            };
            let io = |source| GgufError::Io {
                path: path.clone(),
                source,
            };
            let file = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(GgufError::SplitMissing {
                        path,
                        no: no + 1,
                        count,
                        first: first.to_path_buf(),
                    })
                }
                Err(e) => return Err(io(e)),
            };
            let len = file.metadata().map_err(io)?.len();
            if no == 0 && len != head_len as u64 {
                return Err(io(std::io::Error::other(
                    "the file changed while it was being opened",
                )));
            }
            let len = usize::try_from(len).map_err(|_| {
                io(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the file is larger than the address space",
                ))
            })?;
            if len == 0 {
                return Err(GgufError::InPart {
                    path,
                    source: Box::new(GgufError::BadMagic { found: Vec::new() }),
                });
            }
            if let Some(id) = crate::outfile::FileId::of_file(&file) {
                sources.push(crate::outfile::Protected {
                    id,
                    path: path.clone(),
                });
            }
            files.push((file, len));
            paths.push(path);
        }
        let map = Arc::new(FileMap::open_parts(files).map_err(|source| GgufError::Io {
            path: first.to_path_buf(),
            source,
        })?);
        let bytes = map.bytes();
        let mut head: Option<Parsed> = None;
        let mut parts = Vec::with_capacity(paths.len());
        let mut tensors = Vec::new();
        let mut tensor_parts = Vec::new();
        let mut tensor_index: HashMap<String, usize> = HashMap::new();
        for (no, (path, range)) in paths.iter().zip(map.part_ranges()).enumerate() {
            let in_part = |source| GgufError::InPart {
                path: path.clone(),
                source: Box::new(source),
            };
            let p = match first_part.take() {
                Some(p) => p,
                None => parse(&bytes[range.clone()]).map_err(in_part)?,
            };
            let mismatch = |detail: String| GgufError::SplitMismatch {
                path: path.clone(),
                detail,
            };
            let key = |k: &str| -> Result<u32> {
                let v = p.kv_index.get(k).map(|&i| &p.metadata[i].1);
                match v.map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok())) {
                    Some(Some(n)) => Ok(n),
                    Some(None) => Err(mismatch(format!(
                        "{k} is not a count ({})",
                        v.map_or("", |v| v.type_name())
                    ))),
                    None => Err(mismatch(format!("the part has no {k} key"))),
                }
            };
            let (got_no, got_count) = (key(SPLIT_NO_KEY)?, key(SPLIT_COUNT_KEY)?);
            if got_no as usize != no || got_count != count {
                return Err(mismatch(format!(
                    "expected part {} of {count} ({SPLIT_NO_KEY} = {no}, {SPLIT_COUNT_KEY} = \
                     {count}), the file says part {} of {got_count} ({SPLIT_NO_KEY} = \
                     {got_no}, {SPLIT_COUNT_KEY} = {got_count}): are parts of two splits mixed?",
                    no + 1,
                    got_no as u64 + 1,
                )));
            }
            let base = head.as_ref().map_or(p.data_start, |h| h.data_start);
            let part_data = range.start + p.data_start;
            for t in &p.tensors {
                if let Some(&j) = tensor_index.get(&t.name) {
                    return Err(GgufError::SplitDuplicateTensor {
                        name: t.name.clone(),
                        first: paths[tensor_parts[j] as usize].clone(),
                        second: path.clone(),
                    });
                }
                tensor_index.insert(t.name.clone(), tensors.len());
                let mut t = t.clone();
                // The first part starts the mapping, so later parts' data lies past its data
                // section's start: the offset stays non-negative.
                t.offset += (part_data - base) as u64;
                tensors.push(t);
                tensor_parts.push(no as u32);
            }
            parts.push(SplitPart {
                path: path.clone(),
                size: range.len() as u64,
                data_offset: p.data_start,
                n_tensors: p.tensors.len(),
                start: range.start,
            });
            if head.is_none() {
                head = Some(p);
            }
        }
        let head = head.expect("a split model has at least two parts");
        let expected = head
            .kv_index
            .get(SPLIT_TENSORS_KEY)
            .map(|&i| &head.metadata[i].1);
        if let Some(v) = expected {
            let n = v.as_i64().ok_or_else(|| GgufError::SplitMismatch {
                path: first.to_path_buf(),
                detail: format!("{SPLIT_TENSORS_KEY} is not a count ({})", v.type_name()),
            })?;
            if n != tensors.len() as i64 {
                let listing: Vec<String> = parts
                    .iter()
                    .map(|p| format!("{} in {}", p.n_tensors, p.path.display()))
                    .collect();
                return Err(GgufError::SplitMismatch {
                    path: first.to_path_buf(),
                    detail: format!(
                        "{SPLIT_TENSORS_KEY} = {n}, but the {count} parts hold {} tensors ({}): \
                         a part is damaged or from another split",
                        tensors.len(),
                        listing.join(", ")
                    ),
                });
            }
        }
        let mut sources = sources.into_iter();
        Ok(GgufFile {
            data: map.clone(),
            map: Some(map),
            version: head.version,
            alignment: head.alignment,
            data_start: head.data_start,
            metadata: head.metadata,
            kv_index: head.kv_index,
            tensors,
            tensor_index,
            source: sources.next(),
            parts,
            tensor_parts,
            more_sources: sources.collect(),
        })
    }

    /// [`GgufFile::open`] without looking for split parts.
    fn open_single(path: &Path) -> Result<GgufFile> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let source = crate::outfile::FileId::of_file(&file).map(|id| crate::outfile::Protected {
            id,
            path: path.to_path_buf(),
        });
        let len = file.metadata().map_err(io)?.len();
        if len == 0 {
            // Nothing to map (mapping zero bytes fails on some systems): let the parser
            // report the missing header.
            let mut parsed = GgufFile::from_bytes(Arc::new(Vec::<u8>::new()))?;
            parsed.source = source;
            return Ok(parsed);
        }
        let len = usize::try_from(len).map_err(|_| {
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the file is larger than the address space",
            ))
        })?;
        // The returned file (and every tensor pointing into it) holds the map through an
        // `Arc`; the file must not change while it is open (see above).
        let map = Arc::new(FileMap::open(file, len).map_err(io)?);
        let mut parsed = GgufFile::from_bytes(map.clone())?;
        parsed.map = Some(map);
        parsed.source = source;
        Ok(parsed)
    }

    /// Hints that the mapped pages lying entirely inside `bytes` (a slice of this file's
    /// data, e.g. a weight that was copied elsewhere) will not be needed soon: they leave
    /// the process's resident memory. They stay readable: a later read brings them back
    /// from the file. Returns the bytes released (0 for a file not opened from disk, a
    /// slice from elsewhere, or if the system refuses).
    pub fn release_pages(&self, bytes: &[u8]) -> usize {
        let Some(map) = &self.map else { return 0 };
        let base = map.bytes().as_ptr() as usize;
        let start = bytes.as_ptr() as usize;
        if start < base || start + bytes.len() > base + map.bytes().len() {
            return 0;
        }
        map.release(start - base..start - base + bytes.len())
    }

    /// Makes the byte ranges `ranges` of the file (offsets from its start; e.g. the weights
    /// a model will stream from the map on every token) resident, on 2 MiB pages where the
    /// system can give them, and reports how far that went. `None` for a file not opened
    /// from disk.
    ///
    /// When the page cache held the file in small folios (less than half of what huge
    /// pages could cover is), and the system does keep files in huge folios, the file's
    /// cached pages are dropped and read again through the map, once (see
    /// [`HugePageReport::recached`]); later opens find them in huge folios. Results never
    /// change: only which page-table entries map the same bytes.
    pub fn settle_huge_pages(&self, ranges: &[std::ops::Range<usize>]) -> Option<HugePageReport> {
        Some(self.map.as_ref()?.settle_huge_pages(ranges))
    }

    /// Parses a GGUF file held in any buffer (a `Vec<u8>`, a mapping…), with the same checks
    /// as [`GgufFile::open`]. Tensor data stays in `data`.
    pub fn from_bytes(data: Arc<dyn ExternalData>) -> Result<GgufFile> {
        let parsed = parse(data.bytes())?;
        Ok(GgufFile {
            data,
            map: None,
            version: parsed.version,
            alignment: parsed.alignment,
            data_start: parsed.data_start,
            metadata: parsed.metadata,
            kv_index: parsed.kv_index,
            tensors: parsed.tensors,
            tensor_index: parsed.tensor_index,
            source: None,
            parts: Vec::new(),
            tensor_parts: Vec::new(),
            more_sources: Vec::new(),
        })
    }

    /// The file this was opened from ([`GgufFile::open`]), as an input a writer must not
    /// overwrite ([`GgufWriter::protect`](super::GgufWriter::protect)); `None` for a file
    /// parsed from memory.
    pub fn source(&self) -> Option<&crate::outfile::Protected> {
        self.source.as_ref()
    }

    /// Every file this was opened from (the first part and the others, for a split model),
    /// as inputs a writer must not overwrite.
    pub fn sources(&self) -> impl Iterator<Item = &crate::outfile::Protected> + '_ {
        self.source.iter().chain(&self.more_sources)
    }

    /// The files of a split model, in order (empty for a single file).
    pub fn parts(&self) -> &[SplitPart] {
        &self.parts
    }

    /// Where tensor `name` lies in a split model: its part's index in [`GgufFile::parts`]
    /// and its offset in that part's data section, as the part's tensor info says. For a
    /// single file, part 0 and the tensor's offset. `None` for an unknown name.
    pub fn tensor_part(&self, name: &str) -> Option<(usize, u64)> {
        let i = *self.tensor_index.get(name)?;
        let info = &self.tensors[i];
        let Some(&no) = self.tensor_parts.get(i) else {
            return Some((0, info.offset));
        };
        let part = &self.parts[no as usize];
        // Inverts the shift `open_split` made: every term is within the mapping.
        let at = self.data_start as u64 + info.offset;
        Some((no as usize, at - (part.start + part.data_offset) as u64))
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment in bytes (`general.alignment`, 32 when absent).
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// File offset where the data section starts (tensor offsets are relative to it; for a
    /// split model, the first part's, in [`GgufFile::data`]).
    pub fn data_offset(&self) -> usize {
        self.data_start
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The value of metadata key `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kv_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Every tensor info, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The info of the tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The data bytes of a tensor of this file (no copy). An info that does not come from
    /// this file and does not fit in it gives an empty slice.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let bytes = self.data.bytes();
        let range = usize::try_from(info.offset)
            .ok()
            .and_then(|o| o.checked_add(self.data_start))
            .and_then(|start| Some(start..start.checked_add(info.size)?));
        range.and_then(|r| bytes.get(r)).unwrap_or(&[])
    }

    /// The whole file's bytes, to make tensors that point into it with
    /// [`Context::new_tensor_external`] (at `data_offset() + info.offset`). For a split
    /// model, every part's bytes one after the other, each starting at its
    /// [`SplitPart::start`] (the gaps between them read as zeros).
    pub fn data(&self) -> Arc<dyn ExternalData> {
        Arc::clone(&self.data)
    }

    /// Makes in `ctx` a leaf tensor named `name` whose data is this file's (no copy): the
    /// context keeps the file's bytes alive. Fails if there is no such tensor, or if the
    /// context cannot take it (arena full, data misaligned in memory for its type).
    pub fn load_tensor(&self, ctx: &mut Context, name: &str) -> Result<Tensor> {
        let info = self.tensor(name).ok_or_else(|| GgufError::TensorNotFound {
            name: name.to_owned(),
        })?;
        let wrap = |source| GgufError::Context {
            name: name.to_owned(),
            source: Box::new(source),
        };
        // Cannot overflow: parsing checked that data_start + offset + size is within the
        // buffer, whose length is a usize.
        let offset = self.data_start + info.offset as usize;
        let t = ctx
            .new_tensor_external(info.dtype, info.shape(), self.data(), offset)
            .map_err(wrap)?;
        ctx.set_name(t, name).map_err(wrap)
    }
}

/// The value of split key `key` of `file` as a count (any integer type; llama-gguf-split
/// writes u16), `None` when absent.
fn split_key(file: &GgufFile, key: &str, path: &Path) -> Result<Option<u32>> {
    let Some(v) = file.get(key) else {
        return Ok(None);
    };
    match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
        Some(n) => Ok(Some(n)),
        None => Err(GgufError::SplitMismatch {
            path: path.to_path_buf(),
            detail: format!("{key} is not a count ({})", v.type_name()),
        }),
    }
}

/// The part of the file being parsed, for error messages.
enum Part {
    Header,
    Kv { index: usize, key: Option<String> },
    Tensor { index: usize, name: Option<String> },
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Header => f.write_str("header"),
            Part::Kv { index, key: None } => write!(f, "metadata entry {index}"),
            Part::Kv {
                index,
                key: Some(k),
            } => write!(f, "metadata entry {index}, key `{k}`"),
            Part::Tensor { index, name: None } => write!(f, "tensor info {index}"),
            Part::Tensor {
                index,
                name: Some(n),
            } => write!(f, "tensor info {index}, `{n}`"),
        }
    }
}

/// A little-endian cursor that reports every short read as [`GgufError::Truncated`].
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    part: Part,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// "`what` (`part`)", built only when an error is.
    fn at(&self, what: &str) -> String {
        format!("{what} ({})", self.part)
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: self.at(what),
                offset: self.pos as u64,
                needed: n as u64,
                available: self.remaining() as u64,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.bytes(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.bytes(what).map(u64::from_le_bytes)
    }

    /// Reads a u64 count of items that take at least `min_size` bytes each, and checks that
    /// the rest of the buffer could hold them.
    fn count(&mut self, what: &str, min_size: usize) -> Result<usize> {
        self.count_of(what, "", min_size)
    }

    /// [`Cursor::count`] for the field named `what` followed by `suffix` (so that no name
    /// needs to be built unless there is an error).
    fn count_of(&mut self, what: &str, suffix: &str, min_size: usize) -> Result<usize> {
        let offset = self.pos as u64;
        if self.remaining() < 8 {
            return Err(GgufError::Truncated {
                what: self.at(&format!("{what}{suffix}")),
                offset,
                needed: 8,
                available: self.remaining() as u64,
            });
        }
        let n = self.u64(what)?;
        let max = (self.remaining() / min_size.max(1)) as u64;
        if n > max {
            return Err(GgufError::TooLarge {
                what: self.at(&format!("{what}{suffix}")),
                count: n,
                offset,
                max,
            });
        }
        // Fits: n <= remaining bytes, which is a usize.
        Ok(n as usize)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.count_of(what, " length", 1)?;
        let start = self.pos;
        let bytes = self.take(n, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 {
                what: self.at(what),
                offset: start as u64,
            }),
        }
    }

    fn value_type(&mut self, what: &str) -> Result<ValueType> {
        let offset = self.pos as u64;
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or_else(|| GgufError::UnknownValueType {
            id,
            offset,
            what: self.at(what),
        })
    }

    /// Reads one value of type `ty`; `depth` is the number of arrays it is inside.
    fn value(&mut self, ty: ValueType, depth: usize) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.bytes("u8 value")?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.bytes("i8 value")?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.bytes("u16 value")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.bytes("i16 value")?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.bytes("u32 value")?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.bytes("i32 value")?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.bytes("u64 value")?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.bytes("i64 value")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.bytes("f32 value")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.bytes("f64 value")?)),
            // Any non-zero byte is true, as in C.
            ValueType::Bool => Value::Bool(self.bytes::<1>("bool value")?[0] != 0),
            ValueType::String => Value::String(self.string("string value")?),
            ValueType::Array => {
                let offset = self.pos as u64;
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::TooDeep {
                        what: self.part.to_string(),
                        offset,
                        max: MAX_ARRAY_DEPTH,
                    });
                }
                let elem = self.value_type("array element type")?;
                let n = self.count("array length", elem.min_encoded_size())?;
                let mut items = Vec::with_capacity(n.min(MAX_RESERVE));
                for _ in 0..n {
                    items.push(self.value(elem, depth + 1)?);
                }
                Value::Array(items)
            }
        })
    }
}

/// What [`parse`] finds in a buffer.
struct Parsed {
    version: u32,
    alignment: usize,
    data_start: usize,
    metadata: Vec<(String, Value)>,
    kv_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

fn parse(buf: &[u8]) -> Result<Parsed> {
    let mut c = Cursor {
        buf,
        pos: 0,
        part: Part::Header,
    };

    // --- header: magic, version, tensor count, metadata count ---
    let head = &buf[..buf.len().min(4)];
    if head != &MAGIC[..head.len()] || head.is_empty() {
        return Err(GgufError::BadMagic {
            found: head.to_vec(),
        });
    }
    c.take(4, "magic")?;
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        let hint = if version == 1 {
            "; version 1 used 32-bit counts: convert the file with a current llama.cpp"
        } else if matches!(version.swap_bytes(), 2 | 3) {
            "; this looks like a big-endian file, which is not supported"
        } else {
            ""
        };
        return Err(GgufError::UnsupportedVersion { version, hint });
    }
    let n_tensors = c.count("tensor count", MIN_TENSOR_INFO)?;
    let n_kv = c.count("metadata entry count", MIN_KV)?;

    // --- metadata ---
    let mut metadata = Vec::with_capacity(n_kv.min(MAX_RESERVE));
    let mut kv_index = HashMap::with_capacity(n_kv.min(MAX_RESERVE));
    for index in 0..n_kv {
        c.part = Part::Kv { index, key: None };
        let key_offset = c.pos as u64;
        let key = c.string("key")?;
        if kv_index.contains_key(&key) {
            return Err(GgufError::DuplicateKey {
                key,
                offset: key_offset,
            });
        }
        c.part = Part::Kv {
            index,
            key: Some(key.clone()),
        };
        let ty = c.value_type("value type")?;
        let value = c.value(ty, 0)?;
        kv_index.insert(key.clone(), index);
        metadata.push((key, value));
    }

    let alignment = match kv_index.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(&i) => {
            let v = &metadata[i].1;
            match v.as_u32().filter(|a| a.is_power_of_two()) {
                Some(a) => a as usize,
                None => {
                    return Err(GgufError::BadAlignment {
                        value: format!("{v:?}"),
                    })
                }
            }
        }
    };

    // --- tensor infos ---
    let mut tensors = Vec::with_capacity(n_tensors.min(MAX_RESERVE));
    let mut tensor_index = HashMap::with_capacity(n_tensors.min(MAX_RESERVE));
    for index in 0..n_tensors {
        c.part = Part::Tensor { index, name: None };
        let name_offset = c.pos as u64;
        let name = c.string("tensor name")?;
        if tensor_index.contains_key(&name) {
            return Err(GgufError::DuplicateTensor {
                name,
                offset: name_offset,
            });
        }
        c.part = Part::Tensor {
            index,
            name: Some(name.clone()),
        };
        let dims_offset = c.pos;
        let n_dims = c.u32("dimension count")?;
        if !(1..=4).contains(&n_dims) {
            return Err(GgufError::BadShape {
                name,
                ne: Vec::new(),
                detail: format!(
                    "{n_dims} dimensions (at offset {dims_offset}); a tensor has 1 to 4"
                ),
            });
        }
        let mut raw = [1u64; 4];
        for d in raw.iter_mut().take(n_dims as usize) {
            *d = c.u64("dimension")?;
        }
        let type_offset = c.pos as u64;
        let type_id = c.u32("tensor type")?;
        let offset = c.u64("tensor data offset")?;
        let Some(dtype) = DType::from_id(type_id) else {
            return Err(GgufError::UnknownTensorType {
                name,
                id: type_id,
                offset: type_offset,
            });
        };
        let (ne, size) = tensor_layout(&name, dtype, &raw[..n_dims as usize])?;
        if offset % alignment as u64 != 0 {
            return Err(GgufError::Misaligned {
                tensor: name,
                offset,
                alignment,
            });
        }
        tensor_index.insert(name.clone(), index);
        tensors.push(TensorInfo {
            name,
            dtype,
            ne,
            n_dims: n_dims as usize,
            offset,
            size,
        });
    }

    // --- data section: at the next multiple of the alignment ---
    let infos_end = c.pos;
    let data_start = match infos_end.checked_next_multiple_of(alignment) {
        Some(s) if s <= buf.len() => s,
        // A file without tensors may end without padding.
        _ if n_tensors == 0 => buf.len(),
        s => {
            return Err(GgufError::Truncated {
                what: "padding before the data section".into(),
                offset: infos_end as u64,
                needed: s.map_or(u64::MAX, |s| (s - infos_end) as u64),
                available: (buf.len() - infos_end) as u64,
            })
        }
    };
    let data_len = buf.len() - data_start;
    for t in &tensors {
        let fits = t
            .offset
            .checked_add(t.size as u64)
            .is_some_and(|end| end <= data_len as u64);
        if !fits {
            return Err(GgufError::BadOffset {
                tensor: t.name.clone(),
                offset: t.offset,
                size: t.size as u64,
                data_len: data_len as u64,
                data_start: data_start as u64,
            });
        }
    }

    Ok(Parsed {
        version,
        alignment,
        data_start,
        metadata,
        kv_index,
        tensors,
        tensor_index,
    })
}

/// Checks a tensor's dimensions and returns them padded to 4 axes with its size in bytes.
pub(super) fn tensor_layout(name: &str, dtype: DType, dims: &[u64]) -> Result<([usize; 4], usize)> {
    let bad = |detail: String| GgufError::BadShape {
        name: name.to_owned(),
        ne: dims.to_vec(),
        detail,
    };
    if dims.is_empty() || dims.len() > 4 {
        return Err(bad(format!(
            "{} dimensions; a tensor has 1 to 4",
            dims.len()
        )));
    }
    let mut ne = [1usize; 4];
    for (n, &d) in ne.iter_mut().zip(dims) {
        *n = usize::try_from(d)
            .map_err(|_| bad("a dimension overflows the address space".into()))?;
    }
    let block = dtype.block_size();
    if ne[0] % block != 0 {
        return Err(bad(format!(
            "ne[0] = {} is not a multiple of the {dtype} block size {block}",
            ne[0]
        )));
    }
    let overflow = || bad("the element count overflows the address space".into());
    // The element count must fit as well as the byte size (block types store fewer bytes
    // than elements).
    ne.iter()
        .try_fold(1usize, |a, &n| a.checked_mul(n))
        .ok_or_else(overflow)?;
    // `dtype.row_size` would overflow unchecked on a hostile ne[0]: same formula, checked.
    let row = (ne[0] / block)
        .checked_mul(dtype.type_size())
        .ok_or_else(overflow)?;
    let size = ne[1..]
        .iter()
        .try_fold(row, |a, &n| a.checked_mul(n))
        .ok_or_else(overflow)?;
    Ok((ne, size))
}
