//! Importance matrices: llama.cpp's imatrix files, read and written in both of its formats.
//!
//! An importance matrix holds, for each weight matrix a model multiplies (`blk.0.attn_q.weight`
//! …), the sum over many tokens of the squared input activation of every column (`in_sum2`)
//! and the number of tokens summed (`counts`; one count per expert for MoE weights).
//! `ggrs quantize --imatrix` weighs each column's rounding error by `in_sum2 / counts`
//! ([`Imatrix::quant_weights`]), as `llama-quantize --imatrix` does.
//!
//! - **GGUF** (llama-imatrix's default): `general.type = "imatrix"`, `imatrix.datasets`
//!   (strings), `imatrix.chunk_count`, `imatrix.chunk_size` (u32), and per entry, in name
//!   order, the F32 tensors `<name>.in_sum2` (`[n_in, n_mat]`) and `<name>.counts`
//!   (`[1, n_mat]`).
//! - **Legacy `.dat`** (little-endian): `i32` entry count; per entry `i32` name length, name,
//!   `i32` ncall, `i32` nval, nval `f32` equal to `in_sum2 / counts · ncall`; then optionally
//!   `i32` chunk count, `i32` length and the dataset name.

pub mod collect;

pub use collect::{collect, CollectOptions};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use ggrs_core::gguf::{GgufFile, GgufWriter, Value};
use ggrs_core::DType;

/// Why an importance matrix could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ImatrixError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The GGUF container is broken.
    #[error(transparent)]
    Gguf(#[from] ggrs_core::gguf::GgufError),
    /// The contents are not an importance matrix.
    #[error("{path}: not a valid importance matrix: {detail}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

/// One weight matrix's statistics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImatrixEntry {
    /// Σ x² per input column, `n_in` values per matrix (per expert), matrices one after
    /// another. In a legacy file: `in_sum2 / counts · ncall`, as stored.
    pub sums: Vec<f32>,
    /// Tokens summed, one per matrix (GGUF); in a legacy file the single `ncall`.
    pub counts: Vec<i64>,
}

/// An importance matrix (llama.cpp's `common_imatrix`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Imatrix {
    /// Entries by weight name.
    pub entries: BTreeMap<String, ImatrixEntry>,
    /// The text files the statistics came from.
    pub datasets: Vec<String>,
    /// Chunks processed.
    pub chunk_count: u32,
    /// Tokens per chunk (0 in a legacy file).
    pub chunk_size: u32,
    /// Read from a legacy `.dat` file.
    pub is_legacy: bool,
    /// The GGUF file had `imatrix.datasets`, `imatrix.chunk_count` and `imatrix.chunk_size`
    /// (llama-quantize refuses a GGUF imatrix without them).
    pub has_metadata: bool,
}

const IN_SUM2: &str = ".in_sum2";
const COUNTS: &str = ".counts";

impl Imatrix {
    /// Reads a GGUF or legacy importance matrix (told apart by the GGUF magic).
    pub fn load(path: impl AsRef<Path>) -> Result<Imatrix, ImatrixError> {
        let path = path.as_ref();
        let io = |source| ImatrixError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bytes = std::fs::read(path).map_err(io)?;
        if bytes.starts_with(b"GGUF") {
            Imatrix::from_gguf(path, &GgufFile::open(path)?)
        } else {
            Imatrix::from_legacy(path, &bytes)
        }
    }

    fn from_gguf(path: &Path, f: &GgufFile) -> Result<Imatrix, ImatrixError> {
        let invalid = |detail: String| ImatrixError::Invalid {
            path: path.to_path_buf(),
            detail,
        };
        if f.tensors().is_empty() {
            return Err(invalid("it holds no tensors".into()));
        }
        let mut m = Imatrix::default();
        let datasets = f.get("imatrix.datasets");
        if let Some(a) = datasets.and_then(|v| v.as_array()) {
            m.datasets = a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
        }
        let chunk_count = f.get("imatrix.chunk_count");
        let chunk_size = f.get("imatrix.chunk_size");
        m.has_metadata = datasets.is_some() && chunk_count.is_some() && chunk_size.is_some();
        m.chunk_count = chunk_count.and_then(|v| v.as_u32()).unwrap_or(0);
        m.chunk_size = chunk_size.and_then(|v| v.as_u32()).unwrap_or(0);
        type Pair<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);
        let mut pairs: BTreeMap<&str, Pair> = BTreeMap::new();
        for t in f.tensors() {
            let (name, is_sum) = if let Some(n) = t.name.strip_suffix(IN_SUM2) {
                (n, true)
            } else if let Some(n) = t.name.strip_suffix(COUNTS) {
                (n, false)
            } else {
                continue;
            };
            if t.dtype != DType::F32 {
                return Err(invalid(format!("`{}` is {}, not F32", t.name, t.dtype)));
            }
            let p = pairs.entry(name).or_default();
            let data = Some(f.tensor_data(t));
            if is_sum {
                p.0 = data;
            } else {
                p.1 = data;
            }
        }
        let floats = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        for (name, p) in pairs {
            let (Some(sums), Some(counts)) = p else {
                return Err(invalid(format!("`{name}` lacks its sums or its counts")));
            };
            let counts: Vec<i64> = floats(counts)
                .into_iter()
                .map(|c| c.round() as i64)
                .collect();
            let sums = floats(sums);
            if counts.is_empty() || sums.len() % counts.len() != 0 {
                return Err(invalid(format!(
                    "`{name}`: {} sums do not split into {} matrices",
                    sums.len(),
                    counts.len()
                )));
            }
            m.entries
                .insert(name.to_string(), ImatrixEntry { sums, counts });
        }
        Ok(m)
    }

    fn from_legacy(path: &Path, bytes: &[u8]) -> Result<Imatrix, ImatrixError> {
        let invalid = |detail: &str| ImatrixError::Invalid {
            path: path.to_path_buf(),
            detail: format!("legacy format: {detail}"),
        };
        let mut r = Reader { bytes, pos: 0 };
        let n_entries = r.i32().ok_or_else(|| invalid("no entry count"))?;
        if n_entries < 1 {
            return Err(invalid("no entries"));
        }
        let mut m = Imatrix {
            is_legacy: true,
            ..Imatrix::default()
        };
        for i in 0..n_entries {
            let name = r
                .string()
                .ok_or_else(|| invalid(&format!("entry {}: bad name", i + 1)))?;
            let (Some(ncall), Some(nval)) = (r.i32(), r.i32()) else {
                return Err(invalid(&format!("entry {}: truncated", i + 1)));
            };
            if nval < 1 {
                return Err(invalid(&format!("entry `{name}`: {nval} values")));
            }
            let sums = r
                .take(nval as usize * 4)
                .ok_or_else(|| invalid(&format!("entry `{name}`: truncated values")))?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let counts = vec![ncall as i64];
            m.entries.insert(name, ImatrixEntry { sums, counts });
        }
        // The chunk count and dataset name are optional.
        if let Some(n) = r.i32() {
            m.chunk_count = n.max(0) as u32;
            if let Some(d) = r.string().filter(|d| !d.is_empty()) {
                m.datasets.push(d);
            }
        }
        Ok(m)
    }

    /// The weights `llama-quantize` hands the quantizers, by weight name: `in_sum2 /
    /// count` per matrix (1 for a matrix never used) from a GGUF file; `sums / ncall` from a
    /// legacy one (the sums as stored when ncall is 0).
    pub fn quant_weights(&self) -> HashMap<String, Vec<f32>> {
        let mut out = HashMap::with_capacity(self.entries.len());
        for (name, e) in &self.entries {
            let mut w = vec![0f32; e.sums.len()];
            if self.is_legacy {
                let ncall = e.counts.first().copied().unwrap_or(0);
                for (w, &s) in w.iter_mut().zip(&e.sums) {
                    *w = if ncall > 0 { s / ncall as f32 } else { s };
                }
            } else {
                let ne0 = e.sums.len() / e.counts.len().max(1);
                for (j, &c) in e.counts.iter().enumerate() {
                    let count = c as f32;
                    for i in 0..ne0 {
                        w[j * ne0 + i] = if count > 0.0 {
                            e.sums[j * ne0 + i] / count
                        } else {
                            1.0
                        };
                    }
                }
            }
            out.insert(name.clone(), w);
        }
        out
    }

    /// Writes the GGUF format as llama-imatrix does (entries in name order).
    pub fn save_gguf(&self, path: impl AsRef<Path>) -> Result<(), ImatrixError> {
        let mut w = GgufWriter::new();
        w.add_kv("general.type", Value::String("imatrix".into()))?;
        w.add_kv(
            "imatrix.datasets",
            Value::Array(self.datasets.iter().cloned().map(Value::String).collect()),
        )?;
        w.add_kv("imatrix.chunk_count", Value::U32(self.chunk_count))?;
        w.add_kv("imatrix.chunk_size", Value::U32(self.chunk_size))?;
        let mut blobs: Vec<Vec<u8>> = Vec::new();
        for (name, e) in &self.entries {
            let nmat = e.counts.len();
            if nmat == 0 || e.sums.is_empty() {
                continue;
            }
            // ggml writes the axes up to the last one longer than 1.
            let (sums_ne, counts_ne) = if nmat > 1 {
                (vec![e.sums.len() / nmat, nmat], vec![1, nmat])
            } else {
                (vec![e.sums.len()], vec![1])
            };
            w.add_tensor_info(format!("{name}{IN_SUM2}"), DType::F32, &sums_ne)?;
            w.add_tensor_info(format!("{name}{COUNTS}"), DType::F32, &counts_ne)?;
            blobs.push(e.sums.iter().flat_map(|v| v.to_le_bytes()).collect());
            blobs.push(
                e.counts
                    .iter()
                    .flat_map(|&c| (c as f32).to_le_bytes())
                    .collect(),
            );
        }
        let mut next = blobs.into_iter();
        w.write_to_path(path, |_, sink| {
            sink.write_all(&next.next().unwrap_or_default())
        })?;
        Ok(())
    }

    /// Writes the legacy `.dat` format as llama-imatrix does, for statistics collected over
    /// chunks of `chunk_size` tokens (`ncall` is the largest count in chunks, rounded up).
    pub fn save_dat(&self, path: impl AsRef<Path>) -> Result<(), ImatrixError> {
        let path = path.as_ref();
        let chunk = self.chunk_size.max(1) as i64;
        let mut out = Vec::new();
        let stored: Vec<_> = self
            .entries
            .iter()
            .filter(|(_, e)| e.counts.iter().any(|&c| c != 0))
            .collect();
        out.extend((stored.len() as i32).to_le_bytes());
        for (name, e) in stored {
            out.extend((name.len() as i32).to_le_bytes());
            out.extend(name.as_bytes());
            let max = e.counts.iter().copied().max().unwrap_or(0);
            let ncall = ((max + chunk - 1) / chunk) as i32;
            out.extend(ncall.to_le_bytes());
            out.extend((e.sums.len() as i32).to_le_bytes());
            let per = e.sums.len() / e.counts.len().max(1);
            for (i, &v) in e.sums.iter().enumerate() {
                let mut count = e.counts[i / per.max(1)] as f32;
                let mut value = v;
                if count == 0.0 {
                    (value, count) = (1.0, 1.0);
                }
                out.extend(((value / count) * ncall as f32).to_le_bytes());
            }
        }
        out.extend((self.chunk_count as i32).to_le_bytes());
        let dataset = self.datasets.last().map_or("", String::as_str);
        out.extend((dataset.len() as i32).to_le_bytes());
        out.extend(dataset.as_bytes());
        std::fs::write(path, out).map_err(|source| ImatrixError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// A little-endian cursor over the legacy format.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }

    fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.i32()?).ok()?;
        Some(String::from_utf8_lossy(self.take(len)?).into_owned())
    }
}

/// The importance weights `ggrs quantize --imatrix` uses: [`Imatrix::quant_weights`] after
/// `--include-weights`/`--exclude-weights`, with what llama-quantize records of the file.
#[derive(Clone, Default)]
pub struct QuantWeights {
    /// Weights by tensor name.
    pub weights: HashMap<String, Vec<f32>>,
    /// The file name as given (written as `quantize.imatrix.file`, at most 127 bytes).
    pub file: String,
    /// The first dataset (`quantize.imatrix.dataset`).
    pub dataset: Option<String>,
    /// Chunks the matrix was computed on (`quantize.imatrix.chunks_count` when positive).
    pub chunk_count: u32,
}

impl std::fmt::Debug for QuantWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantWeights")
            .field("entries", &self.weights.len())
            .field("file", &self.file)
            .field("dataset", &self.dataset)
            .field("chunk_count", &self.chunk_count)
            .finish()
    }
}

impl QuantWeights {
    /// Reads `path` as llama-quantize's `--imatrix` does: a GGUF matrix must carry its
    /// metadata, and no weight may be infinite or NaN. Then, as its `--exclude-weights`
    /// and `--include-weights` do, drops the entries whose name contains one of `exclude`,
    /// and keeps only those whose name contains one of `include` (when any is given).
    pub fn load(
        path: &Path,
        include: &[String],
        exclude: &[String],
    ) -> Result<QuantWeights, ImatrixError> {
        let m = Imatrix::load(path)?;
        if !m.is_legacy && !m.has_metadata {
            return Err(ImatrixError::Invalid {
                path: path.to_path_buf(),
                detail: "missing imatrix metadata (imatrix.datasets, imatrix.chunk_count, \
                         imatrix.chunk_size)"
                    .into(),
            });
        }
        let mut weights = m.quant_weights();
        if let Some((name, _)) = weights
            .iter()
            .find(|(_, w)| w.iter().any(|v| !v.is_finite()))
        {
            return Err(ImatrixError::Invalid {
                path: path.to_path_buf(),
                detail: format!("`{name}` has a non-finite value"),
            });
        }
        weights.retain(|name, _| !exclude.iter().any(|x| name.contains(x.as_str())));
        if !include.is_empty() {
            weights.retain(|name, _| include.iter().any(|x| name.contains(x.as_str())));
        }
        let mut file = path.to_string_lossy().into_owned();
        if file.len() > 127 {
            let mut cut = 127;
            while !file.is_char_boundary(cut) {
                cut -= 1;
            }
            file.truncate(cut);
        }
        Ok(QuantWeights {
            weights,
            file,
            dataset: m.datasets.first().cloned(),
            chunk_count: m.chunk_count,
        })
    }
}
