//! Writing GGUF v3 files front to back: header, metadata and tensor infos first, then each
//! tensor's data in order, so that no more than one tensor need be in memory.

use std::collections::HashSet;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::error::GgufError;
use super::reader::{tensor_layout, TensorInfo};
use super::value::{Value, ValueType};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, VERSION};
use crate::dtype::DType;
use crate::outfile::{OutputFile, Protected};

type Result<T> = std::result::Result<T, GgufError>;

/// Builds a GGUF v3 file: ordered metadata, tensor infos, then tensor data streamed in order.
///
/// ```
/// use ggrs_core::{gguf::{GgufFile, GgufWriter}, DType};
/// # fn main() -> Result<(), ggrs_core::gguf::GgufError> {
/// let mut w = GgufWriter::new();
/// w.add_kv("general.architecture", "llama")?;
/// w.add_tensor_info("x", DType::F32, &[2, 3])?;
/// let values: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
/// let bytes = w.to_bytes(|_info, out| out.write_all(&values))?;
/// let file = GgufFile::from_bytes(std::sync::Arc::new(bytes))?;
/// assert_eq!(file.tensor("x").map(|t| t.ne), Some([2, 3, 1, 1]));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
    names: HashSet<String>,
    alignment: usize,
    protected: Vec<Protected>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    /// An empty file: no metadata, no tensors, alignment 32.
    pub fn new() -> GgufWriter {
        GgufWriter {
            metadata: Vec::new(),
            tensors: Vec::new(),
            names: HashSet::new(),
            alignment: DEFAULT_ALIGNMENT,
            protected: Vec::new(),
        }
    }

    /// The data alignment the file will have.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Sets the data alignment (a power of two that fits in a u32) by setting
    /// `general.alignment`; tensor offsets are laid out again.
    pub fn set_alignment(&mut self, alignment: usize) -> Result<()> {
        let v = u32::try_from(alignment).map_err(|_| GgufError::BadAlignment {
            value: alignment.to_string(),
        })?;
        self.set_kv(ALIGNMENT_KEY, Value::U32(v))
    }

    /// Appends a metadata entry. Fails if `key` is already there, if an array (at any depth)
    /// mixes element types or nests deeper than [`MAX_ARRAY_DEPTH`], or if the key is
    /// `general.alignment` and the value is not a u32 power of two.
    ///
    /// An empty array is written with element type u8 (the `Value` does not record one).
    pub fn add_kv(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<()> {
        let key = key.into();
        if self.metadata.iter().any(|(k, _)| *k == key) {
            return Err(GgufError::DuplicateKey { key, offset: 0 });
        }
        let value = value.into();
        self.check_value(&key, &value)?;
        self.metadata.push((key, value));
        Ok(())
    }

    /// Sets a metadata entry: replaces the value in place if `key` is there, appends it
    /// otherwise. Same checks as [`GgufWriter::add_kv`].
    pub fn set_kv(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<()> {
        let key = key.into();
        let value = value.into();
        self.check_value(&key, &value)?;
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.metadata.push((key, value)),
        }
        Ok(())
    }

    /// Removes a metadata entry, returning its value. Removing `general.alignment` brings the
    /// alignment back to 32.
    pub fn remove_kv(&mut self, key: &str) -> Option<Value> {
        let i = self.metadata.iter().position(|(k, _)| k == key)?;
        let (_, v) = self.metadata.remove(i);
        if key == ALIGNMENT_KEY {
            self.alignment = DEFAULT_ALIGNMENT;
            self.layout();
        }
        Some(v)
    }

    /// The value of metadata key `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The metadata entries, in the order they will be written.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// Appends a tensor info: `ne` holds 1 to 4 axes, innermost first, `ne[0]` a multiple of
    /// the type's block size. Its offset is laid out after the previous tensor's data,
    /// rounded up to the alignment. Fails on a duplicate name or a bad shape.
    pub fn add_tensor_info(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        ne: &[usize],
    ) -> Result<&TensorInfo> {
        let name = name.into();
        if self.names.contains(&name) {
            return Err(GgufError::DuplicateTensor { name, offset: 0 });
        }
        let dims: Vec<u64> = ne.iter().map(|&n| n as u64).collect();
        let (ne4, size) = tensor_layout(&name, dtype, &dims)?;
        let offset = self.data_size();
        self.names.insert(name.clone());
        self.tensors.push(TensorInfo {
            name,
            dtype,
            ne: ne4,
            n_dims: ne.len(),
            offset,
            size,
        });
        Ok(&self.tensors[self.tensors.len() - 1])
    }

    /// The tensor infos, in the order their data must be written, with their offsets.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Bytes of the data section: every tensor's data, each padded to the alignment.
    pub fn data_size(&self) -> u64 {
        self.tensors
            .last()
            .map_or(0, |t| align_up(t.offset + t.size as u64, self.alignment))
    }

    /// Writes the header, the metadata, the tensor infos and the padding before the data
    /// section to `out`, and returns the writer that takes the tensors' data in order.
    pub fn write_header<W: Write>(&self, mut out: W) -> Result<TensorDataWriter<'_, W>> {
        let mut buf = Vec::new();
        buf.extend_from_slice(&MAGIC);
        buf.extend_from_slice(&VERSION.to_le_bytes());
        buf.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        buf.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut buf, key);
            buf.extend_from_slice(&value.value_type().id().to_le_bytes());
            put_value(&mut buf, value);
        }
        for t in &self.tensors {
            put_str(&mut buf, &t.name);
            buf.extend_from_slice(&(t.n_dims as u32).to_le_bytes());
            for &n in t.shape() {
                buf.extend_from_slice(&(n as u64).to_le_bytes());
            }
            buf.extend_from_slice(&t.dtype.id().to_le_bytes());
            buf.extend_from_slice(&t.offset.to_le_bytes());
        }
        // A file without tensors ends here, unpadded (as llama.cpp writes vocab-only files):
        // with a large alignment the padding would be most of the file.
        let data_start = if self.tensors.is_empty() {
            buf.len() as u64
        } else {
            align_up(buf.len() as u64, self.alignment)
        };
        buf.resize(data_start as usize, 0);
        out.write_all(&buf).map_err(|source| GgufError::Write {
            what: "header, metadata and tensor infos".into(),
            offset: 0,
            source,
        })?;
        Ok(TensorDataWriter {
            out,
            tensors: &self.tensors,
            alignment: self.alignment,
            next: 0,
            pos: data_start,
        })
    }

    /// Protects `inputs` (the files the data is read from): [`GgufWriter::write_to_path`]
    /// refuses an output that is one of them, whatever its spelling
    /// ([`OutputError::SameAsInput`](crate::outfile::OutputError::SameAsInput)).
    pub fn protect(&mut self, inputs: impl IntoIterator<Item = Protected>) {
        self.protected.extend(inputs);
    }

    /// Writes the whole file to `path`, calling `data(info, out)` for each tensor in order
    /// to write exactly `info.size` bytes of its data to `out`.
    ///
    /// The file is written as an [`OutputFile`]: to a temporary file beside `path`, fsynced
    /// and renamed over `path` only when complete, so an error, a panic or a killed process
    /// leaves whatever `path` held untouched. A character device or pipe is written
    /// through; a directory, a block device or a protected input ([`GgufWriter::protect`])
    /// is refused before anything is written.
    pub fn write_to_path(
        &self,
        path: impl AsRef<Path>,
        data: impl FnMut(&TensorInfo, &mut dyn Write) -> io::Result<()>,
    ) -> Result<()> {
        let path = path.as_ref();
        let io_err = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OutputFile::create(path, &self.protected)?;
        // Dropping the `OutputFile` on an error path removes its temporary file only.
        let file = self
            .write_stream(BufWriter::with_capacity(1 << 20, file), data)?
            .into_inner()
            .map_err(|e| io_err(e.into_error()))?;
        file.commit()?;
        Ok(())
    }

    /// The whole file in memory, with tensor data from `data` as in
    /// [`GgufWriter::write_to_path`].
    pub fn to_bytes(
        &self,
        data: impl FnMut(&TensorInfo, &mut dyn Write) -> io::Result<()>,
    ) -> Result<Vec<u8>> {
        self.write_stream(Vec::new(), data)
    }

    fn write_stream<W: Write>(
        &self,
        out: W,
        mut data: impl FnMut(&TensorInfo, &mut dyn Write) -> io::Result<()>,
    ) -> Result<W> {
        let mut w = self.write_header(out)?;
        for info in &self.tensors {
            w.write_tensor_with(|out| data(info, out))?;
        }
        w.finish()
    }

    fn check_value(&mut self, key: &str, value: &Value) -> Result<()> {
        check_array(key, value, 0)?;
        if key == ALIGNMENT_KEY {
            match value {
                Value::U32(a) if a.is_power_of_two() => {
                    self.alignment = *a as usize;
                    self.layout();
                }
                v => {
                    return Err(GgufError::BadAlignment {
                        value: format!("{v:?}"),
                    })
                }
            }
        }
        Ok(())
    }

    /// Lays the tensor offsets out again (after an alignment change).
    fn layout(&mut self) {
        let mut offset = 0u64;
        for t in &mut self.tensors {
            t.offset = offset;
            offset = align_up(offset + t.size as u64, self.alignment);
        }
    }
}

/// Takes the tensors' data, in order, after [`GgufWriter::write_header`].
///
/// After an error the output is not a valid file: discard it.
#[derive(Debug)]
pub struct TensorDataWriter<'a, W: Write> {
    out: W,
    tensors: &'a [TensorInfo],
    alignment: usize,
    next: usize,
    pos: u64,
}

impl<'a, W: Write> TensorDataWriter<'a, W> {
    /// The tensor whose data is to be written next, or `None` when all are.
    pub fn next_tensor(&self) -> Option<&'a TensorInfo> {
        self.tensors.get(self.next)
    }

    /// Writes the next tensor's data: `bytes` must be exactly its size.
    pub fn write_tensor(&mut self, bytes: &[u8]) -> Result<()> {
        self.write_tensor_with(|out| out.write_all(bytes))
    }

    /// Writes the next tensor's data by calling `f` with the output, which must receive
    /// exactly the tensor's size in bytes (in as many writes as `f` likes); then pads to the
    /// alignment.
    pub fn write_tensor_with(
        &mut self,
        f: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> Result<()> {
        let Some(info) = self.next_tensor() else {
            return Err(GgufError::TensorData {
                tensor: "-".into(),
                detail: format!("all {} tensors are written already", self.tensors.len()),
            });
        };
        let size = info.size as u64;
        let mut sink = Limited {
            inner: &mut self.out,
            left: size,
            overflow: false,
        };
        let result = f(&mut sink);
        let (left, overflow) = (sink.left, sink.overflow);
        let written = size - left;
        if overflow {
            return Err(GgufError::TensorData {
                tensor: info.name.clone(),
                detail: format!("the data source gave more than the tensor's {size} bytes"),
            });
        }
        result.map_err(|source| GgufError::Write {
            what: format!("data of tensor `{}`", info.name),
            offset: self.pos + written,
            source,
        })?;
        if left != 0 {
            return Err(GgufError::TensorData {
                tensor: info.name.clone(),
                detail: format!("the data source gave {written} bytes, the tensor has {size}"),
            });
        }
        self.pos += size;
        let padded = align_up(self.pos, self.alignment);
        write_zeros(&mut self.out, padded - self.pos).map_err(|source| GgufError::Write {
            what: format!("padding after tensor `{}`", info.name),
            offset: self.pos,
            source,
        })?;
        self.pos = padded;
        self.next += 1;
        Ok(())
    }

    /// Checks that every tensor was written, flushes and returns the output.
    pub fn finish(mut self) -> Result<W> {
        if let Some(t) = self.next_tensor() {
            return Err(GgufError::TensorData {
                tensor: t.name.clone(),
                detail: format!(
                    "no data written ({} of {} tensors written)",
                    self.next,
                    self.tensors.len()
                ),
            });
        }
        self.out.flush().map_err(|source| GgufError::Write {
            what: "the end of the file".into(),
            offset: self.pos,
            source,
        })?;
        Ok(self.out)
    }
}

/// A writer that accepts at most `left` more bytes.
struct Limited<'w, W: Write> {
    inner: &'w mut W,
    left: u64,
    overflow: bool,
}

impl<W: Write> Write for Limited<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() as u64 > self.left {
            self.overflow = true;
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "more bytes than the tensor holds",
            ));
        }
        let n = self.inner.write(buf)?;
        self.left -= n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn write_zeros(out: &mut impl Write, mut n: u64) -> io::Result<()> {
    const ZEROS: [u8; 256] = [0; 256];
    while n > 0 {
        let k = n.min(ZEROS.len() as u64) as usize;
        out.write_all(&ZEROS[..k])?;
        n -= k as u64;
    }
    Ok(())
}

fn align_up(n: u64, alignment: usize) -> u64 {
    n.next_multiple_of(alignment as u64)
}

fn check_array(key: &str, value: &Value, depth: usize) -> Result<()> {
    let Value::Array(items) = value else {
        return Ok(());
    };
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::InvalidValue {
            key: key.to_owned(),
            detail: format!("arrays nest more than {MAX_ARRAY_DEPTH} deep"),
        });
    }
    let elem = items.first().map_or(ValueType::U8, Value::value_type);
    if let Some(bad) = items.iter().find(|v| v.value_type() != elem) {
        return Err(GgufError::InvalidValue {
            key: key.to_owned(),
            detail: format!(
                "an array mixes element types ({} and {}); GGUF arrays hold one type",
                elem.name(),
                bad.type_name()
            ),
        });
    }
    items
        .iter()
        .try_for_each(|v| check_array(key, v, depth + 1))
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

/// Appends a value's encoding, without its type id.
fn put_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I8(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => buf.push(u8::from(*x)),
        Value::String(s) => put_str(buf, s),
        Value::Array(items) => {
            let elem = items.first().map_or(ValueType::U8, Value::value_type);
            buf.extend_from_slice(&elem.id().to_le_bytes());
            buf.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(buf, item);
            }
        }
    }
}
