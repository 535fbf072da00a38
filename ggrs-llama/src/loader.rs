//! The shared weight loader: what an [`Architecture`](crate::architecture::Architecture)
//! reads its typed weights through, and the table of tensors a session imports them as.
//!
//! An architecture asks the [`WeightLoader`] for each tensor it needs by llama.cpp's name
//! and shape, saying what it will do with it (multiply by it, read it as f32, look rows up
//! in it); the loader checks the name, shape and type against the file and hands out a
//! [`WeightId`], a small handle the architecture keeps in a weight struct of its own. A
//! missing tensor, a wrong shape or a type no kernel reads is a typed error naming the
//! tensor. The model keeps the table ([`crate::Model::weight`]); a session imports every
//! entry into its context once ([`ImportedWeights`]) and the graph builder looks its handles
//! up there, so one struct of handles serves both the model and every session.

use std::collections::HashMap;
use std::ops::Index;

use ggrs_core::gguf::GgufFile;
use ggrs_core::{DType, Tensor};

use crate::error::{LlamaError, Result};
use crate::hparams::HParams;

/// Where one weight lies in the mapped file.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightRef {
    /// Tensor name (llama.cpp's naming).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape (`ne`, unused axes 1).
    pub ne: [usize; 4],
    /// Byte offset from the start of the file.
    pub offset: usize,
}

impl WeightRef {
    /// Bytes of the weight's data.
    pub fn size(&self) -> usize {
        self.dtype.row_size(self.ne[0]) * self.ne[1] * self.ne[2] * self.ne[3]
    }
}

/// Handle of one weight of a model: an index into its weight table
/// ([`crate::Model::weight`]), and, in a session, into [`ImportedWeights`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WeightId(usize);

impl WeightId {
    /// The position of the weight in its model's table.
    pub fn index(self) -> usize {
        self.0
    }
}

/// What a [`WeightLoader`] read: the weight table, and which entries are matrices that
/// `mul_mat` multiplies by (the ones worth packing; see [`crate::model`]).
#[derive(Debug, Clone, Default)]
pub struct LoadedWeights {
    /// Every weight handed out, indexed by [`WeightId`].
    pub table: Vec<WeightRef>,
    /// The matrices among them, each once, in the order they were asked for.
    pub matrices: Vec<WeightId>,
}

/// Reads weights from a GGUF file by name and shape; see the [module docs](self).
#[derive(Debug)]
pub struct WeightLoader<'a> {
    file: &'a GgufFile,
    hp: &'a HParams,
    base: usize,
    by_name: HashMap<String, WeightId>,
    out: LoadedWeights,
}

/// How a weight will be used, which decides the types it may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// The first operand of `mul_mat`: a type with a matrix-product kernel.
    Matrix,
    /// Norm weights and biases, added or multiplied elementwise: f32.
    F32,
    /// Rows looked up (`get_rows`, the embedding table): any type.
    Rows,
}

impl<'a> WeightLoader<'a> {
    /// A loader over `file`, whose hyperparameters are `hp`.
    pub fn new(file: &'a GgufFile, hp: &'a HParams) -> WeightLoader<'a> {
        WeightLoader {
            file,
            hp,
            base: file.data().bytes().as_ptr() as usize,
            by_name: HashMap::new(),
            out: LoadedWeights::default(),
        }
    }

    /// The file (metadata keys an architecture reads beyond [`HParams`]).
    pub fn file(&self) -> &'a GgufFile {
        self.file
    }

    /// The model's hyperparameters.
    pub fn hparams(&self) -> &'a HParams {
        self.hp
    }

    /// Whether the file holds a tensor named `name` (to choose between layouts, e.g. a fused
    /// or separate Q/K/V projection).
    pub fn has(&self, name: &str) -> bool {
        self.file.tensor(name).is_some()
    }

    /// A matrix the graph multiplies by (`mul_mat`'s first operand), of shape `shape`
    /// (`ne`, innermost first): its type must have a matrix-product kernel in this build.
    pub fn matrix(&mut self, name: &str, shape: &[usize]) -> Result<WeightId> {
        self.get(name, shape, Use::Matrix)
    }

    /// As [`WeightLoader::matrix`], `None` when the file has no tensor `name`.
    pub fn opt_matrix(&mut self, name: &str, shape: &[usize]) -> Result<Option<WeightId>> {
        self.opt(name, shape, Use::Matrix)
    }

    /// A norm weight or bias, of shape `shape`: it must be f32.
    pub fn f32(&mut self, name: &str, shape: &[usize]) -> Result<WeightId> {
        self.get(name, shape, Use::F32)
    }

    /// As [`WeightLoader::f32`], `None` when the file has no tensor `name`.
    pub fn opt_f32(&mut self, name: &str, shape: &[usize]) -> Result<Option<WeightId>> {
        self.opt(name, shape, Use::F32)
    }

    /// A table the graph looks rows up in (`get_rows`: the token embeddings), of any type.
    pub fn rows(&mut self, name: &str, shape: &[usize]) -> Result<WeightId> {
        self.get(name, shape, Use::Rows)
    }

    /// A weight already loaded, now also multiplied by (tied embeddings: the output
    /// projection is the embedding table): checks that its type has a matrix-product kernel.
    pub fn also_matrix(&mut self, id: WeightId) -> Result<WeightId> {
        let w = &self.out.table[id.0];
        check_use(w, Use::Matrix)?;
        if !self.out.matrices.contains(&id) {
            self.out.matrices.push(id);
        }
        Ok(id)
    }

    /// The token embeddings (`token_embd.weight`, `[n_embd, n_vocab]`), the final norm weight
    /// (`output_norm.weight`, `[n_embd]`) and the output projection (`output.weight`, or the
    /// embeddings when the file ties them), as most decoders have them.
    pub fn embeddings_and_output(&mut self) -> Result<(WeightId, WeightId, WeightId)> {
        let (e, v) = (self.hp.n_embd, self.hp.n_vocab);
        let tok_embd = self.rows("token_embd.weight", &[e, v])?;
        let output_norm = self.f32("output_norm.weight", &[e])?;
        let output = match self.opt_matrix("output.weight", &[e, v])? {
            Some(o) => o,
            None => self.also_matrix(tok_embd)?,
        };
        Ok((tok_embd, output_norm, output))
    }

    /// The table and the list of matrices.
    pub fn finish(self) -> LoadedWeights {
        self.out
    }

    fn get(&mut self, name: &str, shape: &[usize], usage: Use) -> Result<WeightId> {
        self.opt(name, shape, usage)?
            .ok_or_else(|| LlamaError::MissingTensor(name.to_string()))
    }

    fn opt(&mut self, name: &str, shape: &[usize], usage: Use) -> Result<Option<WeightId>> {
        if let Some(&id) = self.by_name.get(name) {
            // Asked for twice (e.g. shared by two uses): the same handle, checked again.
            let w = &self.out.table[id.0];
            check_shape(w, shape)?;
            return match usage {
                Use::Matrix => self.also_matrix(id).map(Some),
                _ => check_use(w, usage).map(|()| Some(id)),
            };
        }
        let Some(info) = self.file.tensor(name) else {
            return Ok(None);
        };
        let data = self.file.tensor_data(info);
        let w = WeightRef {
            name: name.to_string(),
            dtype: info.dtype,
            ne: info.ne,
            offset: data.as_ptr() as usize - self.base,
        };
        check_shape(&w, shape)?;
        check_use(&w, usage)?;
        let id = WeightId(self.out.table.len());
        self.out.table.push(w);
        self.by_name.insert(name.to_string(), id);
        if usage == Use::Matrix {
            self.out.matrices.push(id);
        }
        Ok(Some(id))
    }
}

fn check_shape(w: &WeightRef, shape: &[usize]) -> Result<()> {
    let mut want = [1usize; 4];
    let fits = shape.len() <= 4;
    if fits {
        want[..shape.len()].copy_from_slice(shape);
    }
    if !fits || w.ne != want {
        return Err(LlamaError::BadShape {
            name: w.name.clone(),
            got: w.ne.to_vec(),
            expected: shape.to_vec(),
        });
    }
    Ok(())
}

fn check_use(w: &WeightRef, usage: Use) -> Result<()> {
    match usage {
        Use::Matrix if !ggrs_core::weights::supported(w.dtype) => Err(LlamaError::BadTensorType {
            name: w.name.clone(),
            dtype: w.dtype,
            detail: "has no matrix-product kernel in this build".into(),
        }),
        Use::F32 if w.dtype != DType::F32 => Err(LlamaError::BadTensorType {
            name: w.name.clone(),
            dtype: w.dtype,
            detail: "must be f32 (norm weights and biases are kept in f32)".into(),
        }),
        _ => Ok(()),
    }
}

/// A model's weights as tensors of one session's context (external tensors pointing into the
/// mapping, or into the model's packed copies), indexed by [`WeightId`].
#[derive(Debug, Clone)]
pub struct ImportedWeights {
    tensors: Vec<Tensor>,
}

impl ImportedWeights {
    /// The table of `tensors`, the i-th for the model's i-th weight.
    pub fn new(tensors: Vec<Tensor>) -> ImportedWeights {
        ImportedWeights { tensors }
    }

    /// The tensor of an optional weight.
    pub fn opt(&self, id: Option<WeightId>) -> Option<Tensor> {
        id.map(|id| self[id])
    }

    /// Number of weights.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

impl Index<WeightId> for ImportedWeights {
    type Output = Tensor;

    /// The tensor of weight `id` (a handle of the model these weights were imported from:
    /// the session imports the model's whole table, so its handles are all in range).
    fn index(&self, id: WeightId) -> &Tensor {
        &self.tensors[id.0]
    }
}
