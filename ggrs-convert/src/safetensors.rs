//! Reading safetensors checkpoints (single file or sharded) through memory maps.
//!
//! A safetensors file is laid out as:
//!
//! ```text
//! n: u64 (little-endian)   length of the header
//! header: n bytes of JSON  { "name": { "dtype": "F32", "shape": [rows, cols],
//!                                      "data_offsets": [begin, end] }, …,
//!                            "__metadata__": { … } (optional, ignored) }
//! data                     the tensors' bytes; offsets are relative to the data start
//! ```
//!
//! Shapes are PyTorch order (outermost first); data is little-endian and row-major. Every
//! offset and size is checked against the file before any tensor is handed out, so a
//! truncated or inconsistent file is an error at open time, not a wild read later.
//!
//! A sharded checkpoint has `model.safetensors.index.json` whose `weight_map` maps each
//! tensor name to the shard file holding it.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use ggrs_core::DType;
use serde_json::Value;

use super::error::ConvertError;

/// Headers larger than this are refused (real ones are a few hundred KB).
const MAX_HEADER: u64 = 100 << 20;

/// The element type of a safetensors tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StDtype {
    /// One of the types the converter reads.
    Float(DType),
    /// Any other type (`I64`, `BOOL`, `F64`…), with its name and element size if known.
    Other(String, Option<usize>),
}

impl StDtype {
    fn parse(s: &str) -> StDtype {
        match s {
            "F32" => StDtype::Float(DType::F32),
            "F16" => StDtype::Float(DType::F16),
            "BF16" => StDtype::Float(DType::BF16),
            "F64" | "I64" | "U64" => StDtype::Other(s.into(), Some(8)),
            "I32" | "U32" => StDtype::Other(s.into(), Some(4)),
            "I16" | "U16" => StDtype::Other(s.into(), Some(2)),
            "I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2" => StDtype::Other(s.into(), Some(1)),
            _ => StDtype::Other(s.into(), None),
        }
    }

    fn elem_size(&self) -> Option<usize> {
        match self {
            StDtype::Float(d) => Some(d.type_size()),
            StDtype::Other(_, size) => *size,
        }
    }

    /// The safetensors name of the type.
    pub fn name(&self) -> String {
        match self {
            StDtype::Float(DType::BF16) => "BF16".into(),
            StDtype::Float(d) => d.name().to_uppercase(),
            StDtype::Other(s, _) => s.clone(),
        }
    }
}

/// One tensor of a checkpoint: where its bytes are and what they hold.
#[derive(Debug, Clone)]
pub struct StTensor {
    /// Its name in the checkpoint.
    pub name: String,
    /// Element type.
    pub dtype: StDtype,
    /// Shape, outermost first (PyTorch order).
    pub shape: Vec<usize>,
    /// Index of the file holding it in [`Checkpoint::files`].
    pub file: usize,
    /// Byte range within that file (absolute, header included).
    pub start: usize,
    /// End of the byte range (exclusive).
    pub end: usize,
}

/// A memory-mapped safetensors file.
#[derive(Debug)]
pub struct StFile {
    /// Its path.
    pub path: PathBuf,
    map: memmap2::Mmap,
}

/// All tensors of a checkpoint, across its shards.
#[derive(Debug)]
pub struct Checkpoint {
    /// The mapped files.
    pub files: Vec<StFile>,
    /// Tensors in the order they appear (file by file, then by data offset).
    pub tensors: Vec<StTensor>,
    by_name: HashMap<String, usize>,
}

impl Checkpoint {
    /// Opens the checkpoint of Hugging Face directory `dir`: `model.safetensors`, or the
    /// shards `model.safetensors.index.json` names.
    pub fn open_dir(dir: &Path) -> Result<Checkpoint, ConvertError> {
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        if index.is_file() {
            return Checkpoint::open_index(dir, &index);
        }
        if single.is_file() {
            return Checkpoint::open_files(&[single]);
        }
        let mut hint = String::new();
        if let Ok(rd) = std::fs::read_dir(dir) {
            let mut names: Vec<String> = rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            let st: Vec<&String> = names
                .iter()
                .filter(|n| n.ends_with(".safetensors"))
                .collect();
            if !st.is_empty() {
                hint = format!(
                    " (found {st:?}: without an index only model.safetensors is read; add \
                     model.safetensors.index.json for shards)"
                );
            } else if names
                .iter()
                .any(|n| n.ends_with(".bin") || n.ends_with(".pt"))
            {
                hint = " (PyTorch .bin checkpoints are not read: save the model with \
                         safetensors first, e.g. save_pretrained(..., safe_serialization=True))"
                    .into();
            }
        }
        Err(ConvertError::NoWeights {
            dir: dir.to_path_buf(),
            hint,
        })
    }

    fn open_index(dir: &Path, index: &Path) -> Result<Checkpoint, ConvertError> {
        let json = read_json(index)?;
        let map = json
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| ConvertError::Safetensors {
                path: index.to_path_buf(),
                detail: "has no `weight_map` object".into(),
            })?;
        // Shard file → one tensor it should hold (for messages), in a stable order.
        let mut shards: BTreeMap<String, String> = BTreeMap::new();
        for (tensor, file) in map {
            let file = file.as_str().ok_or_else(|| ConvertError::Safetensors {
                path: index.to_path_buf(),
                detail: format!("weight_map entry `{tensor}` is not a file name"),
            })?;
            if file.contains('/') || file.contains('\\') || file.starts_with('.') {
                return Err(ConvertError::Safetensors {
                    path: index.to_path_buf(),
                    detail: format!(
                        "weight_map entry `{tensor}` names `{file}`, not a file of the directory"
                    ),
                });
            }
            shards
                .entry(file.to_string())
                .or_insert_with(|| tensor.clone());
        }
        let mut paths = Vec::new();
        for (file, tensor) in &shards {
            let p = dir.join(file);
            if !p.is_file() {
                return Err(ConvertError::MissingShard {
                    path: p,
                    tensor: tensor.clone(),
                });
            }
            paths.push(p);
        }
        let ck = Checkpoint::open_files(&paths)?;
        for (tensor, file) in map {
            if ck.get(tensor).is_none() {
                return Err(ConvertError::Safetensors {
                    path: dir.join(file.as_str().unwrap_or_default()),
                    detail: format!(
                        "does not hold tensor `{tensor}`, which model.safetensors.index.json \
                         places there"
                    ),
                });
            }
        }
        Ok(ck)
    }

    /// Opens and checks the given safetensors files as one checkpoint.
    pub fn open_files(paths: &[PathBuf]) -> Result<Checkpoint, ConvertError> {
        let mut files = Vec::new();
        let mut tensors = Vec::new();
        let mut by_name = HashMap::new();
        for (fi, path) in paths.iter().enumerate() {
            let (file, mut ts) = open_one(path, fi)?;
            ts.sort_by_key(|t| t.start);
            for t in ts {
                if by_name.insert(t.name.clone(), tensors.len()).is_some() {
                    return Err(ConvertError::Safetensors {
                        path: path.clone(),
                        detail: format!("tensor `{}` appears in more than one shard", t.name),
                    });
                }
                tensors.push(t);
            }
            files.push(file);
        }
        Ok(Checkpoint {
            files,
            tensors,
            by_name,
        })
    }

    /// Keeps the tensors `rename` gives a name, under that name, in their order, and drops
    /// the others; returns how many were dropped. Error: two tensors renamed alike.
    pub fn retain_renamed(
        &mut self,
        rename: impl Fn(&str) -> Option<String>,
    ) -> Result<usize, ConvertError> {
        let before = self.tensors.len();
        let mut kept = Vec::with_capacity(before);
        let mut by_name = HashMap::new();
        for mut t in std::mem::take(&mut self.tensors) {
            let Some(name) = rename(&t.name) else {
                continue;
            };
            if by_name.insert(name.clone(), kept.len()).is_some() {
                return Err(ConvertError::Safetensors {
                    path: self.files[t.file].path.clone(),
                    detail: format!("two tensors are both `{name}` (`{}` is one)", t.name),
                });
            }
            t.name = name;
            kept.push(t);
        }
        self.tensors = kept;
        self.by_name = by_name;
        Ok(before - self.tensors.len())
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&StTensor> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of tensor `t` (checked against the file at open time).
    pub fn data(&self, t: &StTensor) -> &[u8] {
        &self.files[t.file].map[t.start..t.end]
    }
}

/// Reads and parses a JSON file.
pub(crate) fn read_json(path: &Path) -> Result<Value, ConvertError> {
    let text = std::fs::read(path).map_err(|source| ConvertError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|source| ConvertError::Json {
        path: path.to_path_buf(),
        source,
    })
}

fn open_one(path: &Path, file_index: usize) -> Result<(StFile, Vec<StTensor>), ConvertError> {
    let bad = |detail: String| ConvertError::Safetensors {
        path: path.to_path_buf(),
        detail,
    };
    let f = File::open(path).map_err(|source| ConvertError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    // SAFETY: `Mmap::map` is unsafe because the bytes may change if another process writes
    // or truncates the file while it is mapped. The map is private and read-only, lives in
    // the returned `StFile` for as long as any slice of it is used, and every range handed
    // out is checked against its length below; like every mmap-based model loader we
    // require that checkpoint files are not modified during a conversion.
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|source| ConvertError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let len = map.len() as u64;
    if len < 8 {
        return Err(bad(format!(
            "truncated: {len} bytes, not even the 8-byte header length"
        )));
    }
    let mut n8 = [0u8; 8];
    n8.copy_from_slice(&map[..8]);
    let n = u64::from_le_bytes(n8);
    if n > MAX_HEADER {
        return Err(bad(format!(
            "header length {n} is implausible (over {MAX_HEADER} bytes): not a safetensors file?"
        )));
    }
    if 8 + n > len {
        return Err(bad(format!(
            "truncated: the header needs {} bytes, the file has {len}",
            8 + n
        )));
    }
    let data_start = 8 + n as usize;
    let data_len = map.len() - data_start;
    let header: Value = serde_json::from_slice(&map[8..data_start])
        .map_err(|e| bad(format!("the JSON header is invalid: {e}")))?;
    let obj = header
        .as_object()
        .ok_or_else(|| bad("the JSON header is not an object".into()))?;
    let mut tensors = Vec::new();
    for (name, entry) in obj {
        if name == "__metadata__" {
            continue;
        }
        let dtype = entry
            .get("dtype")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("tensor `{name}` has no dtype string")))?;
        let dtype = StDtype::parse(dtype);
        let shape = entry
            .get("shape")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("tensor `{name}` has no shape array")))?
            .iter()
            .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| {
                bad(format!(
                    "tensor `{name}` has a shape that is not all non-negative integers"
                ))
            })?;
        let offs = entry
            .get("data_offsets")
            .and_then(Value::as_array)
            .filter(|a| a.len() == 2)
            .and_then(|a| Some((a[0].as_u64()?, a[1].as_u64()?)))
            .ok_or_else(|| bad(format!("tensor `{name}` has no [begin, end] data_offsets")))?;
        let (begin, end) = offs;
        if begin > end {
            return Err(bad(format!(
                "tensor `{name}` has data_offsets [{begin}, {end}] that run backwards"
            )));
        }
        if end > data_len as u64 {
            return Err(bad(format!(
                "truncated: tensor `{name}` needs data up to byte {end} of the data section, \
                 which has {data_len} bytes ({} bytes short)",
                end - data_len as u64
            )));
        }
        if let Some(es) = dtype.elem_size() {
            let numel = shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .and_then(|n| n.checked_mul(es));
            if numel != Some((end - begin) as usize) {
                return Err(bad(format!(
                    "tensor `{name}` ({}, shape {shape:?}) should take {} bytes but data_offsets \
                     [{begin}, {end}] give {}",
                    dtype.name(),
                    numel.map_or("too many".to_string(), |n| n.to_string()),
                    end - begin
                )));
            }
        }
        tensors.push(StTensor {
            name: name.clone(),
            dtype,
            shape,
            file: file_index,
            start: data_start + begin as usize,
            end: data_start + end as usize,
        });
    }
    Ok((
        StFile {
            path: path.to_path_buf(),
            map,
        },
        tensors,
    ))
}
