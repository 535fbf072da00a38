//! What a conversion writes: the metadata keys and the list of tensors (Hugging Face name →
//! GGUF name, expected shape, row transform), built by the source architecture's
//! [`ArchConverter::plan`](crate::arch::ArchConverter::plan) through a [`LayoutBuilder`]
//! and checked against the checkpoint.

use ggrs_core::gguf::Value;

use crate::config::Cfg;
use crate::error::ConvertError;
use crate::safetensors::{Checkpoint, StDtype};

/// How a tensor's rows are reordered on the way to GGUF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    /// Rows (and elements of a 1-D tensor) kept in checkpoint order.
    None,
    /// llama.cpp's Q/K permutation for LLaMA's rotary convention: within each of `n_head`
    /// heads of `d` rows, output row `2j + t` is input row `t·d/2 + j` (the two halves of
    /// the head, which Hugging Face rotates as pairs `(j, j + d/2)`, are interleaved so
    /// that GGML's normal-mode rope pairs adjacent rows `(2j, 2j + 1)`).
    RopePermute {
        /// Heads in the tensor.
        n_head: usize,
    },
    /// Rows kept in order, every value plus one (in f32): Gemma's RMSNorm multiplies by
    /// `1 + w`, which llama.cpp's converter stores as the weight.
    AddOne,
}

/// One tensor of the output.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    /// Name in the checkpoint.
    pub hf_name: String,
    /// Name in the GGUF.
    pub gguf_name: String,
    /// Shape the checkpoint must have (PyTorch order, outermost first).
    pub shape: Vec<usize>,
    /// Row reordering.
    pub transform: Transform,
    /// Written as F32 whatever the output type (llama.cpp's converter keeps BERT's position
    /// and token-type embeddings in F32).
    pub keep_f32: bool,
    /// The values of a tensor made from `config.json` rather than read from the checkpoint
    /// (Phi-3's LongRoPE factors), written as F32; `hf_name` then names the config key.
    pub values: Option<Vec<f32>>,
}

/// Metadata and tensors of one conversion.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// The GGUF architecture name (`general.architecture`).
    pub arch: &'static str,
    /// Architecture keys in the order they are written (`general.*`, `<arch>.*`, and the
    /// few `tokenizer.*` keys an architecture fixes).
    pub metadata: Vec<(String, Value)>,
    /// Output tensors in order.
    pub tensors: Vec<Planned>,
    /// Rows of the embedding table (the vocabulary the tokenizer is padded to).
    pub n_vocab: usize,
    /// Checkpoint tensors that are read by no output tensor and dropped on purpose.
    pub dropped: Vec<String>,
}

/// Whether a planned tensor must be in the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Req {
    /// Required: a missing one is an error.
    Need,
    /// Optional: taken when present.
    Maybe,
}

/// One tensor of a block (see [`LayoutBuilder::block`]): required or not, name under the
/// checkpoint's block prefix, name under the GGUF block prefix, shape, row transform.
pub(crate) type BlockPart<'s> = (Req, &'static str, &'static str, &'s [usize], Transform);

/// Collects an architecture's metadata and tensor list against a checkpoint: required
/// tensors must exist, optional ones are taken when present.
pub(crate) struct LayoutBuilder<'a> {
    ck: &'a Checkpoint,
    /// The checkpoint's directory (for the files besides `config.json`).
    dir: &'a std::path::Path,
    /// The GGUF architecture: the prefix of the architecture keys.
    arch: &'static str,
    metadata: Vec<(String, Value)>,
    tensors: Vec<Planned>,
    dropped: Vec<String>,
}

impl LayoutBuilder<'_> {
    /// `<arch>.<key>` = `v`.
    pub(crate) fn put(&mut self, key: &str, v: Value) {
        self.metadata.push((format!("{}.{key}", self.arch), v));
    }

    /// `key` = `v`, a key outside the architecture's prefix (`tokenizer.ggml.add_bos_token`).
    pub(crate) fn put_global(&mut self, key: &str, v: Value) {
        self.metadata.push((key.to_string(), v));
    }

    /// `<arch>.<key>` = `v` as a u32 for each `(key, config key, v)`, in order; the config
    /// key `v` was read from is named when it does not fit.
    pub(crate) fn u32s(&mut self, entries: &[(&str, &str, usize)]) -> Result<(), ConvertError> {
        for &(key, from, v) in entries {
            let v = u32::try_from(v).map_err(|_| ConvertError::Config {
                key: from.into(),
                detail: format!("{v} does not fit in a u32"),
            })?;
            self.put(key, Value::U32(v));
        }
        Ok(())
    }

    /// Plans checkpoint tensor `hf` as GGUF tensor `gguf`; a missing `Need` tensor is an
    /// error, a missing `Maybe` tensor is skipped.
    pub(crate) fn add(
        &mut self,
        req: Req,
        hf: String,
        gguf: String,
        shape: Vec<usize>,
        transform: Transform,
    ) -> Result<(), ConvertError> {
        if self.ck.get(&hf).is_none() {
            return match req {
                Req::Maybe => Ok(()),
                Req::Need => Err(ConvertError::MissingTensor {
                    name: hf,
                    gguf_name: gguf,
                    arch: self.arch.into(),
                }),
            };
        }
        self.tensors.push(Planned {
            hf_name: hf,
            gguf_name: gguf,
            shape,
            transform,
            keep_f32: false,
            values: None,
        });
        Ok(())
    }

    /// Plans GGUF tensor `gguf`, 1-D F32, with `values` made from the configuration key
    /// `from` (not read from the checkpoint).
    pub(crate) fn generated(&mut self, from: &str, gguf: &str, values: Vec<f32>) {
        self.tensors.push(Planned {
            hf_name: from.to_string(),
            gguf_name: gguf.to_string(),
            shape: vec![values.len()],
            transform: Transform::None,
            keep_f32: true,
            values: Some(values),
        });
    }

    /// [`LayoutBuilder::add`] of a required tensor.
    pub(crate) fn need(
        &mut self,
        hf: String,
        gguf: String,
        shape: Vec<usize>,
        transform: Transform,
    ) -> Result<(), ConvertError> {
        self.add(Req::Need, hf, gguf, shape, transform)
    }

    /// Plans the tensors of one block, in order: each part's names are taken under the
    /// checkpoint's block prefix `hf` and the GGUF block prefix `gguf`.
    pub(crate) fn block(
        &mut self,
        hf: &str,
        gguf: &str,
        parts: &[BlockPart],
    ) -> Result<(), ConvertError> {
        for (req, h, g, shape, transform) in parts {
            let (h, g) = (format!("{hf}.{h}"), format!("{gguf}.{g}"));
            self.add(*req, h, g, shape.to_vec(), *transform)?;
        }
        Ok(())
    }

    /// Checkpoint tensor `hf` is dropped on purpose (read by no output tensor).
    pub(crate) fn drop_tensor(&mut self, hf: String) {
        self.dropped.push(hf);
    }

    /// Every checkpoint tensor whose name `drop` accepts is dropped on purpose.
    pub(crate) fn drop_matching(&mut self, drop: impl Fn(&str) -> bool) {
        let names = self.ck.tensors.iter().map(|t| &t.name);
        self.dropped
            .extend(names.filter(|n| drop(n)).cloned().collect::<Vec<_>>());
    }

    /// The outermost dimension of checkpoint tensor `hf` (its rows), if it has one.
    pub(crate) fn rows(&self, hf: &str) -> Option<usize> {
        self.ck.get(hf).and_then(|t| t.shape.first().copied())
    }

    /// Whether the checkpoint has tensor `hf`.
    pub(crate) fn has(&self, hf: &str) -> bool {
        self.ck.get(hf).is_some()
    }

    /// The planned tensor `gguf` (if planned) is written as F32 whatever the output type.
    pub(crate) fn keep_f32(&mut self, gguf: &str) {
        for p in self.tensors.iter_mut().filter(|p| p.gguf_name == gguf) {
            p.keep_f32 = true;
        }
    }

    /// The checkpoint's directory.
    pub(crate) fn dir(&self) -> &std::path::Path {
        self.dir
    }
}

/// The metadata and tensor list of the architecture whose GGUF name is `a` for
/// `config.json` `cfg`, as its `plan` writes them (returning the embedding rows), checked
/// against the checkpoint's names (not yet its shapes: see [`check`]).
pub(crate) fn build(
    a: &'static str,
    plan: impl FnOnce(&Cfg<'_>, &mut LayoutBuilder<'_>) -> Result<usize, ConvertError>,
    cfg: &serde_json::Value,
    (ck, dir): (&Checkpoint, &std::path::Path),
    name: &str,
) -> Result<Layout, ConvertError> {
    let mut b = LayoutBuilder {
        ck,
        dir,
        arch: a,
        metadata: vec![
            ("general.architecture".into(), Value::String(a.into())),
            ("general.name".into(), Value::String(name.into())),
        ],
        tensors: Vec::new(),
        dropped: Vec::new(),
    };
    let n_vocab = plan(&Cfg(cfg), &mut b)?;
    Ok(Layout {
        arch: a,
        metadata: b.metadata,
        tensors: b.tensors,
        n_vocab,
        dropped: b.dropped,
    })
}

/// Checks that every planned tensor has its expected shape and a float type, and that the
/// checkpoint has no tensor the layout does not place (or drop on purpose).
pub(crate) fn check(layout: &Layout, ck: &Checkpoint) -> Result<(), ConvertError> {
    for p in layout.tensors.iter().filter(|p| p.values.is_none()) {
        // `build` only plans tensors the checkpoint has.
        let Some(t) = ck.get(&p.hf_name) else {
            return Err(ConvertError::MissingTensor {
                name: p.hf_name.clone(),
                gguf_name: p.gguf_name.clone(),
                arch: layout.arch.into(),
            });
        };
        if t.shape != p.shape {
            return Err(ConvertError::TensorShape {
                name: p.hf_name.clone(),
                found: t.shape.clone(),
                expected: p.shape.clone(),
            });
        }
        if !matches!(t.dtype, StDtype::Float(_)) {
            return Err(ConvertError::TensorDtype {
                name: p.hf_name.clone(),
                dtype: t.dtype.name(),
            });
        }
    }
    let placed: std::collections::HashSet<&str> = layout
        .tensors
        .iter()
        .filter(|p| p.values.is_none())
        .map(|p| p.hf_name.as_str())
        .chain(layout.dropped.iter().map(String::as_str))
        .collect();
    if let Some(t) = ck
        .tensors
        .iter()
        .find(|t| !placed.contains(t.name.as_str()))
    {
        return Err(ConvertError::UnexpectedTensor {
            name: t.name.clone(),
            arch: layout.arch.into(),
        });
    }
    Ok(())
}
