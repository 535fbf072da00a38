//! A loaded model: hyperparameters, weight locations in the memory-mapped file, tokenizer.
//!
//! The model is immutable once loaded and can be shared by many sessions and threads
//! (`Arc<Model>`): weights are never copied out of the mapping; each session imports them
//! into its own context as external (read-only) tensors.

use std::path::Path;
use std::sync::Arc;

use ggrs_core::gguf::GgufFile;
use ggrs_core::{Context, DType, Tensor};

use crate::error::{LlamaError, Result};
use crate::hparams::{Arch, HParams};
use crate::tokenizer::Tokenizer;

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

/// The weights of one transformer block.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// RMSNorm weight before attention, `[n_embd]`.
    pub attn_norm: WeightRef,
    /// Query projection, `[n_embd, n_head·head_dim]`.
    pub wq: WeightRef,
    /// Key projection, `[n_embd, n_head_kv·head_dim]`.
    pub wk: WeightRef,
    /// Value projection, `[n_embd, n_head_kv·head_dim]`.
    pub wv: WeightRef,
    /// Output projection, `[n_head·head_dim, n_embd]`.
    pub wo: WeightRef,
    /// Optional biases of q, k, v and o.
    pub bq: Option<WeightRef>,
    /// Key bias.
    pub bk: Option<WeightRef>,
    /// Value bias.
    pub bv: Option<WeightRef>,
    /// Output bias.
    pub bo: Option<WeightRef>,
    /// RMSNorm weight before the feed-forward block, `[n_embd]`.
    pub ffn_norm: WeightRef,
    /// Gate projection, `[n_embd, n_ff]`.
    pub ffn_gate: WeightRef,
    /// Up projection, `[n_embd, n_ff]`.
    pub ffn_up: WeightRef,
    /// Down projection, `[n_ff, n_embd]`.
    pub ffn_down: WeightRef,
}

/// Every weight of the model.
#[derive(Debug, Clone)]
pub struct Weights {
    /// Token embeddings, `[n_embd, n_vocab]`.
    pub tok_embd: WeightRef,
    /// Final RMSNorm weight, `[n_embd]`.
    pub output_norm: WeightRef,
    /// Output projection, `[n_embd, n_vocab]` (the embeddings when tied).
    pub output: WeightRef,
    /// Transformer blocks.
    pub layers: Vec<LayerWeights>,
}

/// A model ready to run. See the [module docs](self).
pub struct Model {
    /// Hyperparameters.
    pub hparams: HParams,
    /// Weight locations.
    pub weights: Weights,
    tokenizer: Tokenizer,
    file: GgufFile,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("hparams", &self.hparams)
            .finish()
    }
}

struct Loader<'a> {
    file: &'a GgufFile,
    base: usize,
}

impl Loader<'_> {
    fn find(&self, name: &str) -> Option<WeightRef> {
        let info = self.file.tensor(name)?;
        let data = self.file.tensor_data(info);
        Some(WeightRef {
            name: name.to_string(),
            dtype: info.dtype,
            ne: info.ne,
            offset: data.as_ptr() as usize - self.base,
        })
    }

    fn get(&self, name: &str, shape: &[usize]) -> Result<WeightRef> {
        let w = self
            .find(name)
            .ok_or_else(|| LlamaError::MissingTensor(name.to_string()))?;
        check_shape(&w, shape)?;
        Ok(w)
    }

    fn opt(&self, name: &str, shape: &[usize]) -> Result<Option<WeightRef>> {
        match self.find(name) {
            None => Ok(None),
            Some(w) => {
                check_shape(&w, shape)?;
                Ok(Some(w))
            }
        }
    }
}

fn check_shape(w: &WeightRef, shape: &[usize]) -> Result<()> {
    let mut want = [1usize; 4];
    want[..shape.len()].copy_from_slice(shape);
    if w.ne != want {
        return Err(LlamaError::BadShape {
            name: w.name.clone(),
            got: w.ne.to_vec(),
            expected: shape.to_vec(),
        });
    }
    Ok(())
}

fn check_matrix_type(w: &WeightRef) -> Result<()> {
    if !ggrs_core::kernels::mul_mat_supports(w.dtype) {
        return Err(LlamaError::BadTensorType {
            name: w.name.clone(),
            dtype: w.dtype,
            detail: "has no matrix-product kernel in this build".into(),
        });
    }
    Ok(())
}

impl Model {
    /// Opens and maps a GGUF model file, reads its hyperparameters, tokenizer and the
    /// location of every weight, checking names, shapes and types.
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        let file = GgufFile::open(path.as_ref())?;
        Model::from_gguf(file)
    }

    /// Builds a model from an opened GGUF file.
    pub fn from_gguf(file: GgufFile) -> Result<Model> {
        let hp = HParams::from_gguf(&file)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let base = file.data().bytes().as_ptr() as usize;
        let l = Loader { file: &file, base };
        let (e, v, f) = (hp.n_embd, hp.n_vocab, hp.n_ff);
        let (q, kv) = (hp.n_head * hp.head_dim, hp.n_embd_kv());
        let tok_embd = l.get("token_embd.weight", &[e, v])?;
        let output_norm = l.get("output_norm.weight", &[e])?;
        let output = l
            .opt("output.weight", &[e, v])?
            .unwrap_or_else(|| tok_embd.clone());
        check_matrix_type(&output)?;
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            let lw = LayerWeights {
                attn_norm: l.get(&n("attn_norm.weight"), &[e])?,
                wq: l.get(&n("attn_q.weight"), &[e, q])?,
                wk: l.get(&n("attn_k.weight"), &[e, kv])?,
                wv: l.get(&n("attn_v.weight"), &[e, kv])?,
                wo: l.get(&n("attn_output.weight"), &[q, e])?,
                bq: l.opt(&n("attn_q.bias"), &[q])?,
                bk: l.opt(&n("attn_k.bias"), &[kv])?,
                bv: l.opt(&n("attn_v.bias"), &[kv])?,
                bo: l.opt(&n("attn_output.bias"), &[e])?,
                ffn_norm: l.get(&n("ffn_norm.weight"), &[e])?,
                ffn_gate: l.get(&n("ffn_gate.weight"), &[e, f])?,
                ffn_up: l.get(&n("ffn_up.weight"), &[e, f])?,
                ffn_down: l.get(&n("ffn_down.weight"), &[f, e])?,
            };
            for w in [
                &lw.wq,
                &lw.wk,
                &lw.wv,
                &lw.wo,
                &lw.ffn_gate,
                &lw.ffn_up,
                &lw.ffn_down,
            ] {
                check_matrix_type(w)?;
            }
            for w in [
                Some(&lw.attn_norm),
                Some(&lw.ffn_norm),
                lw.bq.as_ref(),
                lw.bk.as_ref(),
                lw.bv.as_ref(),
                lw.bo.as_ref(),
            ]
            .into_iter()
            .flatten()
            {
                if w.dtype != DType::F32 {
                    return Err(LlamaError::BadTensorType {
                        name: w.name.clone(),
                        dtype: w.dtype,
                        detail: "must be f32 (norm weights and biases are kept in f32)".into(),
                    });
                }
            }
            layers.push(lw);
        }
        if hp.arch == Arch::Qwen2 && layers.iter().any(|l| l.bq.is_none()) {
            return Err(LlamaError::MissingTensor(
                "blk.0.attn_q.bias (qwen2 has Q/K/V biases)".into(),
            ));
        }
        Ok(Model {
            hparams: hp,
            weights: Weights {
                tok_embd,
                output_norm,
                output,
                layers,
            },
            tokenizer,
            file,
        })
    }

    /// The tokenizer read from the file.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The opened file (metadata, tensor table).
    pub fn gguf(&self) -> &GgufFile {
        &self.file
    }

    /// Metadata string `key`, if present.
    pub fn meta_str(&self, key: &str) -> Option<&str> {
        self.file.get(key).and_then(|v| v.as_str())
    }

    /// Creates, in `ctx`, an external tensor for weight `w` that points into the mapping.
    pub fn import(&self, ctx: &mut Context, w: &WeightRef) -> Result<Tensor> {
        let t = ctx.new_tensor_external(w.dtype, &w.ne, self.file.data(), w.offset)?;
        ctx.set_name(t, w.name.clone())?;
        ctx.set_param(t)?;
        Ok(t)
    }

    /// Bytes of weight data (what one decoding step reads, the embedding table aside).
    pub fn weight_bytes(&self) -> usize {
        self.file.tensors().iter().map(|t| t.size).sum()
    }
}

/// Shared handle to a model.
pub type SharedModel = Arc<Model>;
