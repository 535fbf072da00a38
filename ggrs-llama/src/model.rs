//! A loaded model: hyperparameters, weight locations in the memory-mapped file, tokenizer.
//!
//! The model is immutable once loaded and can be shared by many sessions and threads
//! (`Arc<Model>`): each session imports the weights into its own context as external
//! (read-only) tensors, without copying them.
//!
//! On x86-64, loading copies every matrix weight once into one buffer advised for
//! transparent huge pages ([`ggrs_core::kernels::PackedWeight`]): decoding streams the
//! weights once per token, and 2 MiB pages spare most of the page walks that the file map's
//! pages cost (those are huge only where the page cache happens to hold the file in 2 MiB
//! folios). Where the CPU has the `mul_mat` panel kernels (Q4_0/Q8_0 on AVX-512 VNNI), the
//! copy is repacked into the layout those kernels stream, which `mul_mat` then reads instead
//! of repacking the mapped rows on every product; other types are copied as they are
//! (unless [`ModelOptions::copy_weights`] is off: short runs start sooner without).
//! Results are the same, bit for bit. The mapped pages of a packed weight are released
//! (they come back from the file if another op, e.g. the embedding lookup, reads them), so
//! resident memory stays about one copy of the weights. [`ModelOptions::pack_weights`] (or
//! `GGRS_NO_PACK=1`) turns this off; the matrix weights then stay in the map, which loading
//! settles on huge pages where it can ([`ModelOptions::huge_pages`]).

use std::path::Path;
use std::sync::Arc;

use ggrs_core::gguf::{GgufFile, HugePageReport};
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
    /// Its bias, `[n_embd]` (LayerNorm models: ChatGLM v1).
    pub attn_norm_b: Option<WeightRef>,
    /// Query projection, `[n_embd, n_head·head_dim]` (absent when Q, K, V are fused).
    pub wq: Option<WeightRef>,
    /// Key projection, `[n_embd, n_head_kv·head_dim]` (absent when fused).
    pub wk: Option<WeightRef>,
    /// Value projection, `[n_embd, n_head_kv·head_dim]` (absent when fused).
    pub wv: Option<WeightRef>,
    /// Fused Q, K, V projection (ChatGLM), `[n_embd, (n_head + 2·n_head_kv)·head_dim]`:
    /// each output row holds Q, then K, then V.
    pub wqkv: Option<WeightRef>,
    /// Bias of the fused projection, `[(n_head + 2·n_head_kv)·head_dim]`.
    pub bqkv: Option<WeightRef>,
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
    /// Its bias, `[n_embd]` (LayerNorm models).
    pub ffn_norm_b: Option<WeightRef>,
    /// Up projection bias, `[n_ff]` (ChatGLM v1).
    pub ffn_up_b: Option<WeightRef>,
    /// Down projection bias, `[n_embd]` (ChatGLM v1).
    pub ffn_down_b: Option<WeightRef>,
    /// Gate projection, `[n_embd, n_ff]` (absent when fused into `ffn_up`).
    pub ffn_gate: Option<WeightRef>,
    /// Up projection, `[n_embd, n_ff]`; ChatGLM: gate and up fused, `[n_embd, 2·n_ff]`, the
    /// first `n_ff` outputs the gate, the last `n_ff` the up projection.
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
    /// Its bias, `[n_embd]` (LayerNorm models).
    pub output_norm_b: Option<WeightRef>,
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
    /// Packed copies of matrix weights (see the module docs); they register themselves
    /// with `mul_mat` and unregister when dropped (fields drop in order: before `file`).
    packed: Vec<ggrs_core::kernels::PackedWeight>,
    /// What settling the weights streamed from the map on huge pages found (see
    /// [`Model::huge_pages`]).
    huge_pages: Option<HugePageReport>,
    file: GgufFile,
}

/// How to load a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelOptions {
    /// Copy matrix weights once at load time onto huge pages, repacked for the `mul_mat`
    /// panel kernels when the CPU has them (see the module docs). Default: on, unless the environment variable
    /// `GGRS_NO_PACK` is set (to anything but `0`).
    pub pack_weights: bool,
    /// With [`pack_weights`](Self::pack_weights): also copy, as they are, the matrix weights
    /// that have no panel kernel here (F16, BF16, K-quants; every type without AVX-512
    /// VNNI), so that they too are read from huge pages. That makes decoding them a few
    /// percent faster (+3.6% for an F16 model on the development machine) but touches fresh
    /// memory for the whole model at load time, which a short run does not win back (there,
    /// 0.9–1.1 s more for a one-shot F16 run, paying off after roughly a thousand tokens).
    /// Off, those weights stay in the map (settled on huge pages where the system can,
    /// [`huge_pages`](Self::huge_pages)). Default: on, unless the environment variable
    /// `GGRS_NO_COPY` is set (to anything but `0`).
    pub copy_weights: bool,
    /// Read the matrix weights that stay in the file's map into memory at load time, on
    /// 2 MiB pages where the system can give them, dropping and re-reading the file's
    /// cached pages once if the page cache held them in small pages (see
    /// [`GgufFile::settle_huge_pages`]). Default: on, unless the environment variable
    /// `GGRS_NO_HUGE_PAGES` is set (to anything but `0`).
    pub huge_pages: bool,
}

impl Default for ModelOptions {
    fn default() -> ModelOptions {
        let off = |var: &str| std::env::var_os(var).is_some_and(|v| v != "0");
        ModelOptions {
            pack_weights: !off("GGRS_NO_PACK"),
            copy_weights: !off("GGRS_NO_COPY"),
            huge_pages: !off("GGRS_NO_HUGE_PAGES"),
        }
    }
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
        Model::load_with(path, ModelOptions::default())
    }

    /// As [`Model::load`], with options.
    pub fn load_with(path: impl AsRef<Path>, opts: ModelOptions) -> Result<Model> {
        let file = GgufFile::open(path.as_ref())?;
        Model::from_gguf_with(file, opts)
    }

    /// Builds a model from an opened GGUF file (default [`ModelOptions`]).
    pub fn from_gguf(file: GgufFile) -> Result<Model> {
        Model::from_gguf_with(file, ModelOptions::default())
    }

    /// Builds a model from an opened GGUF file, with options.
    pub fn from_gguf_with(file: GgufFile, opts: ModelOptions) -> Result<Model> {
        let hp = HParams::from_gguf(&file)?;
        if file.tensor("token_embd.weight").is_none() {
            // Checked before the placeholder vocabulary below is sized by `n_vocab`.
            return Err(LlamaError::MissingTensor("token_embd.weight".into()));
        }
        let tokenizer = if file.get("tokenizer.ggml.model").is_none() {
            // A file converted without a tokenizer: ids only (see `placeholder_tokenizer`).
            placeholder_tokenizer(&file, &hp)?
        } else {
            Tokenizer::from_gguf(&file)?
        };
        let glm1 = hp.arch == Arch::ChatGlm1;
        if glm1 {
            crate::arch::chatglm1::Glm1Params::from_gguf(&file, &hp)?;
        }
        let base = file.data().bytes().as_ptr() as usize;
        let l = Loader { file: &file, base };
        let (e, v, f) = (hp.n_embd, hp.n_vocab, hp.n_ff);
        let (q, kv) = (hp.n_head * hp.head_dim, hp.n_embd_kv());
        let tok_embd = l.get("token_embd.weight", &[e, v])?;
        let output_norm = l.get("output_norm.weight", &[e])?;
        // Norm and FFN biases: required by ChatGLM v1, read when present otherwise.
        let bias = |name: &str, len: usize| match glm1 {
            true => l.get(name, &[len]).map(Some),
            false => l.opt(name, &[len]),
        };
        let output_norm_b = bias("output_norm.bias", e)?;
        let output = l
            .opt("output.weight", &[e, v])?
            .unwrap_or_else(|| tok_embd.clone());
        check_matrix_type(&output)?;
        // `HParams::from_gguf` bounded `n_layer` by the file's tensor count.
        let mut layers = Vec::with_capacity(hp.n_layer);
        // ChatGLM (as llama.cpp loads it): Q, K, V fused when `attn_qkv` exists (separate
        // projections otherwise), and the FFN gate fused into `ffn_up`.
        let chatglm = hp.arch == Arch::ChatGlm;
        let qkv = q + 2 * kv;
        for i in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            let wqkv = if glm1 {
                Some(l.get(&n("attn_qkv.weight"), &[e, qkv])?)
            } else if chatglm {
                l.opt(&n("attn_qkv.weight"), &[e, qkv])?
            } else {
                None
            };
            let split = |s: &str, rows: usize| match wqkv {
                Some(_) => Ok(None),
                None => l.get(&n(s), &[e, rows]).map(Some),
            };
            let (wq, wk, wv) = (
                split("attn_q.weight", q)?,
                split("attn_k.weight", kv)?,
                split("attn_v.weight", kv)?,
            );
            let lw = LayerWeights {
                attn_norm: l.get(&n("attn_norm.weight"), &[e])?,
                attn_norm_b: bias(&n("attn_norm.bias"), e)?,
                ffn_norm_b: bias(&n("ffn_norm.bias"), e)?,
                ffn_up_b: bias(&n("ffn_up.bias"), f)?,
                ffn_down_b: bias(&n("ffn_down.bias"), e)?,
                bqkv: match wqkv {
                    Some(_) if glm1 => Some(l.get(&n("attn_qkv.bias"), &[qkv])?),
                    Some(_) => l.opt(&n("attn_qkv.bias"), &[qkv])?,
                    None => None,
                },
                wqkv,
                wq,
                wk,
                wv,
                wo: l.get(&n("attn_output.weight"), &[q, e])?,
                bq: l.opt(&n("attn_q.bias"), &[q])?,
                bk: l.opt(&n("attn_k.bias"), &[kv])?,
                bv: l.opt(&n("attn_v.bias"), &[kv])?,
                bo: l.opt(&n("attn_output.bias"), &[e])?,
                ffn_norm: l.get(&n("ffn_norm.weight"), &[e])?,
                ffn_gate: if chatglm || glm1 {
                    None
                } else {
                    Some(l.get(&n("ffn_gate.weight"), &[e, f])?)
                },
                ffn_up: l.get(&n("ffn_up.weight"), &[e, if chatglm { 2 * f } else { f }])?,
                ffn_down: l.get(&n("ffn_down.weight"), &[f, e])?,
            };
            for w in [
                lw.wq.as_ref(),
                lw.wk.as_ref(),
                lw.wv.as_ref(),
                lw.wqkv.as_ref(),
                Some(&lw.wo),
                lw.ffn_gate.as_ref(),
                Some(&lw.ffn_up),
                Some(&lw.ffn_down),
            ]
            .into_iter()
            .flatten()
            {
                check_matrix_type(w)?;
            }
            for w in [
                Some(&lw.attn_norm),
                Some(&lw.ffn_norm),
                lw.bq.as_ref(),
                lw.bk.as_ref(),
                lw.bv.as_ref(),
                lw.bqkv.as_ref(),
                lw.bo.as_ref(),
                lw.attn_norm_b.as_ref(),
                lw.ffn_norm_b.as_ref(),
                lw.ffn_up_b.as_ref(),
                lw.ffn_down_b.as_ref(),
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
        let mut model = Model {
            hparams: hp,
            weights: Weights {
                tok_embd,
                output_norm,
                output_norm_b,
                output,
                layers,
            },
            tokenizer,
            file,
            packed: Vec::new(),
            huge_pages: None,
        };
        model.place_weights(opts);
        Ok(model)
    }

    /// Packs every matrix weight (once per distinct weight: tied embeddings are packed once),
    /// if `opts.pack_weights` (only those the panel kernels read, unless
    /// `opts.copy_weights`), and releases the mapped pages it was packed from; then, if
    /// `opts.huge_pages`, settles the matrix weights left in the map on huge pages.
    fn place_weights(&mut self, opts: ModelOptions) {
        let w = &self.weights;
        let mut mats: Vec<&WeightRef> = vec![&w.output];
        for l in &w.layers {
            mats.extend(
                [&l.wq, &l.wk, &l.wv, &l.wqkv, &l.ffn_gate]
                    .into_iter()
                    .flatten(),
            );
            mats.extend([&l.wo, &l.ffn_up, &l.ffn_down]);
        }
        let mut done = std::collections::HashSet::new();
        let bytes = self.file.data();
        let bytes = bytes.bytes();
        let mut sources: Vec<(DType, [usize; 4], &[u8])> = Vec::new();
        for m in mats {
            if !done.insert(m.offset) {
                continue;
            }
            let size = m.dtype.row_size(m.ne[0]) * m.ne[1] * m.ne[2] * m.ne[3];
            if let Some(data) = bytes.get(m.offset..m.offset + size) {
                sources.push((m.dtype, m.ne, data));
            }
        }
        // The weights to copy: all of them, or only those laid out anew for the panel
        // kernels (`copy_weights` off); the others stay in the map.
        let (picked, mut left): (Vec<_>, Vec<_>) =
            sources.into_iter().partition(|&(dtype, ne, _)| {
                opts.pack_weights
                    && (opts.copy_weights || ggrs_core::kernels::PackedWeight::repacks(dtype, ne))
            });
        // One call, so that all packed weights share one huge-page-backed buffer; each
        // source's mapped pages are released as soon as it is packed.
        let file = &self.file;
        let packed = ggrs_core::kernels::PackedWeight::pack_all(&picked, |j| {
            file.release_pages(picked[j].2);
        });
        // Those packing gave nothing for (all of them if no buffer could be mapped) stay in
        // the map too.
        left.extend(
            picked
                .iter()
                .zip(&packed)
                .filter(|(_, p)| p.is_none())
                .map(|(&src, _)| src),
        );
        let base = bytes.as_ptr() as usize;
        let streamed: Vec<std::ops::Range<usize>> = left
            .iter()
            .map(|&(_, _, data)| {
                let at = data.as_ptr() as usize - base;
                at..at + data.len()
            })
            .collect();
        self.packed.extend(packed.into_iter().flatten());
        if opts.huge_pages && !streamed.is_empty() {
            self.huge_pages = self.file.settle_huge_pages(&streamed);
        }
    }

    /// For the matrix weights `mul_mat` reads from the file's map (those not packed), what
    /// loading found and did about huge pages ([`ModelOptions::huge_pages`]); `None` when
    /// every matrix weight was packed, the option was off, or the model was not loaded from
    /// a file.
    pub fn huge_pages(&self) -> Option<HugePageReport> {
        self.huge_pages
    }

    /// Bytes of weight copies packed at load time (0 when packing is off or does not apply).
    pub fn packed_bytes(&self) -> usize {
        self.packed.iter().map(|p| p.bytes()).sum()
    }

    /// The tokenizer read from the file.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// True when the file carries a vocabulary (`tokenizer.ggml.model`); without one the
    /// tokenizer only names ids (`<id>`) and text prompts are refused.
    pub fn has_vocab(&self) -> bool {
        self.file.get("tokenizer.ggml.model").is_some()
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

/// The tokenizer of a model file that carries no vocabulary (`ggrs convert` of a checkpoint
/// without tokenizer files): one placeholder token `<id>` per embedding row and the special
/// ids the file gives. It decodes ids to `<id>` text and must not be used to encode text
/// (callers check `tokenizer.ggml.model` first: see [`Model::has_vocab`]).
fn placeholder_tokenizer(file: &GgufFile, hp: &HParams) -> Result<Tokenizer> {
    let id = |key: &str| {
        file.get(key)
            .and_then(|v| v.as_u64())
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| (v as usize) < hp.n_vocab)
    };
    let parts = crate::tokenizer::VocabParts {
        model: "llama".into(),
        tokens: (0..hp.n_vocab).map(|i| format!("<{i}>")).collect(),
        special: crate::tokenizer::SpecialTokens {
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            pad: id("tokenizer.ggml.padding_token_id"),
            mask: id("tokenizer.ggml.mask_token_id"),
            ..Default::default()
        },
        add_bos: Some(false),
        add_eos: Some(false),
        ..Default::default()
    };
    Ok(Tokenizer::new(crate::tokenizer::Vocab::from_parts(parts)?))
}
