//! A loaded model: hyperparameters, weight locations in the memory-mapped file, tokenizer.
//!
//! The model is immutable once loaded and can be shared by many sessions and threads
//! (`Arc<Model>`): each session imports the weights into its own context as external
//! (read-only) tensors, without copying them.
//!
//! On x86-64, loading copies every matrix weight once into one buffer advised for
//! transparent huge pages ([`ggrs_core::weights::prepare`]): decoding streams the
//! weights once per token, and 2 MiB pages spare most of the page walks that the file map's
//! pages cost (those are huge only where the page cache happens to hold the file in 2 MiB
//! folios). Where the CPU has the `mul_mat` panel kernels (Q4_0/Q8_0 on AVX-512 VNNI), the
//! copy is repacked into the layout those kernels stream, which `mul_mat` then reads instead
//! of repacking the mapped rows on every product (stacked experts too, matrix by matrix,
//! for `mul_mat_id`); other types are copied as they are (unless
//! [`ModelOptions::copy_weights`] is off: short runs start sooner without; stacked experts
//! never).
//! Results are the same, bit for bit. The mapped pages of a packed weight are released
//! (they come back from the file if another op, e.g. the embedding lookup, reads them), so
//! resident memory stays about one copy of the weights. [`ModelOptions::pack_weights`] (or
//! `GGRS_NO_PACK=1`) turns this off; the matrix weights then stay in the map, which loading
//! settles on huge pages where it can ([`ModelOptions::huge_pages`]).

use std::path::Path;
use std::sync::Arc;

use ggrs_core::gguf::{GgufFile, HugePageReport};
use ggrs_core::{Context, DType, Tensor};

use crate::arch::Registry;
use crate::architecture::{ArchModel, Architecture, TextConventions};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::loader::{ImportedWeights, LoadedWeights, WeightId, WeightLoader};
use crate::tokenizer::Tokenizer;

pub use crate::loader::WeightRef;

/// A model ready to run. See the [module docs](self).
pub struct Model {
    /// Hyperparameters.
    pub hparams: HParams,
    /// The name of the architecture that loaded it ([`Architecture::name`]).
    arch_name: &'static str,
    /// The architecture's typed weights, constants and graph builder.
    arch: Box<dyn ArchModel>,
    /// The architecture's text conventions.
    text: Box<dyn TextConventions>,
    /// Every weight the architecture read (its handles index `weights.table`).
    weights: LoadedWeights,
    tokenizer: Tokenizer,
    /// Packed copies of matrix weights (see the module docs) by the file offset of the
    /// weight they copy: part of that weight's data in every session's context
    /// ([`Model::import`] gives them to its tensors).
    packed: std::collections::HashMap<usize, ggrs_core::weights::PreparedWeight>,
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
            .field("arch", &self.arch_name)
            .field("hparams", &self.hparams)
            .finish()
    }
}

impl Model {
    /// Opens and maps a GGUF model file, reads its hyperparameters, tokenizer and the
    /// location of every weight, checking names, shapes and types. The file's
    /// `general.architecture` picks the architecture from [`Registry::builtin`].
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Model::load_with(path, ModelOptions::default())
    }

    /// As [`Model::load`], with options.
    pub fn load_with(path: impl AsRef<Path>, opts: ModelOptions) -> Result<Model> {
        let file = GgufFile::open(path.as_ref())?;
        Model::from_gguf_with(file, opts)
    }

    /// As [`Model::load_with`], the architecture looked up in `registry` (ggrs's own plus
    /// those registered from outside the crate).
    pub fn load_from(
        registry: &Registry,
        path: impl AsRef<Path>,
        opts: ModelOptions,
    ) -> Result<Model> {
        let file = GgufFile::open(path.as_ref())?;
        let arch = registry.for_file(&file)?;
        Model::from_gguf_arch(file, arch, opts)
    }

    /// As [`Model::load_with`], read by `arch` whatever the file's `general.architecture`
    /// (the prefix of its keys) says: an architecture brought from outside the crate.
    pub fn load_arch(
        path: impl AsRef<Path>,
        arch: &dyn Architecture,
        opts: ModelOptions,
    ) -> Result<Model> {
        let file = GgufFile::open(path.as_ref())?;
        Model::from_gguf_arch(file, arch, opts)
    }

    /// Builds a model from an opened GGUF file (default [`ModelOptions`]).
    pub fn from_gguf(file: GgufFile) -> Result<Model> {
        Model::from_gguf_with(file, ModelOptions::default())
    }

    /// Builds a model from an opened GGUF file, with options.
    pub fn from_gguf_with(file: GgufFile, opts: ModelOptions) -> Result<Model> {
        let registry = Registry::builtin();
        let arch = registry.for_file(&file)?;
        Model::from_gguf_arch(file, arch, opts)
    }

    /// Builds a model from an opened GGUF file with architecture `arch`, with options.
    pub fn from_gguf_arch(
        file: GgufFile,
        arch: &dyn Architecture,
        opts: ModelOptions,
    ) -> Result<Model> {
        let hp = arch.hparams(&file)?;
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
        let text = arch.text(&file)?;
        let mut loader = WeightLoader::new(&file, &hp);
        let arch_model = arch.load(&hp, &mut loader)?;
        let weights = loader.finish();
        let mut model = Model {
            hparams: hp,
            arch_name: arch.name(),
            arch: arch_model,
            text,
            weights,
            tokenizer,
            file,
            packed: std::collections::HashMap::new(),
            huge_pages: None,
        };
        model.place_weights(opts);
        Ok(model)
    }

    /// The name of the architecture that loaded the model ([`Architecture::name`]).
    pub fn arch_name(&self) -> &'static str {
        self.arch_name
    }

    /// The architecture's part of the model: its weights, constants and graph builder.
    pub fn arch(&self) -> &dyn ArchModel {
        self.arch.as_ref()
    }

    /// The architecture's own weight struct, if it is a `T` (e.g.
    /// [`crate::arch::chatglm::ChatGlmModel`]); its handles name entries of
    /// [`Model::weight`].
    pub fn arch_weights<T: ArchModel>(&self) -> Option<&T> {
        let any: &dyn std::any::Any = self.arch.as_ref();
        any.downcast_ref::<T>()
    }

    /// The architecture's text conventions.
    pub fn text(&self) -> &dyn TextConventions {
        self.text.as_ref()
    }

    /// Where weight `id` lies (`None` for a handle of another model).
    pub fn weight(&self, id: WeightId) -> Option<&WeightRef> {
        self.weights.table.get(id.index())
    }

    /// Every weight the architecture read, in the order it read them.
    pub fn weights(&self) -> &[WeightRef] {
        &self.weights.table
    }

    /// Token ids of a generation prompt, as the architecture encodes one: BOS where the
    /// model adds it, special-token text parsed (ChatGLM-6B v1: its text conventions and
    /// `[gMASK] <sop>`).
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        self.text.encode(&self.tokenizer, text, true, true)
    }

    /// The weights the architecture multiplies (`mul_mat`, `mul_mat_id`), each once: what
    /// loading prepares for the kernels, and what decides whether a step's products keep each
    /// column's bits ([`ggrs_core::weights::columns_independent`]).
    pub fn matrix_weights(&self) -> impl Iterator<Item = &WeightRef> + '_ {
        self.weights
            .matrices
            .iter()
            .map(|id| &self.weights.table[id.index()])
    }

    /// Token ids of a rendered chat prompt, as the architecture encodes one.
    pub fn encode_chat(&self, text: &str) -> Result<Vec<u32>> {
        self.text.encode_chat(&self.tokenizer, text)
    }

    /// Packs every matrix weight (once per distinct weight: tied embeddings are packed once),
    /// if `opts.pack_weights` (only those the panel kernels read, unless
    /// `opts.copy_weights`), and releases the mapped pages it was packed from; then, if
    /// `opts.huge_pages`, settles the matrix weights left in the map on huge pages.
    fn place_weights(&mut self, opts: ModelOptions) {
        let mut done = std::collections::HashSet::new();
        let bytes = self.file.data();
        let bytes = bytes.bytes();
        let mut sources: Vec<(DType, [usize; 4], &[u8])> = Vec::new();
        for &id in &self.weights.matrices {
            let m = &self.weights.table[id.index()];
            if !done.insert(m.offset) {
                continue;
            }
            if let Some(data) = bytes.get(m.offset..m.offset + m.size()) {
                sources.push((m.dtype, m.ne, data));
            }
        }
        // The weights to copy: all of them, or only those laid out anew for the panel
        // kernels (`copy_weights` off); the others stay in the map. Stacked experts only
        // when laid out anew (matrix by matrix, for `mul_mat_id`'s panel kernels): a plain
        // copy of a stack would only double its memory. One call, so that all prepared
        // weights share one huge-page-backed buffer; each source's mapped pages are
        // released as soon as it is copied.
        let file = &self.file;
        let prepared = if opts.pack_weights {
            ggrs_core::weights::prepare(&sources, opts.copy_weights, |j| {
                file.release_pages(sources[j].2);
            })
        } else {
            vec![None; sources.len()]
        };
        let at = |data: &[u8]| data.as_ptr() as usize - bytes.as_ptr() as usize;
        // Those not prepared (all of them if no buffer could be mapped) stay in the map.
        let mut left = Vec::new();
        for (&src, p) in sources.iter().zip(prepared) {
            match p {
                Some(p) => {
                    self.packed.insert(at(src.2), p);
                }
                None => left.push(src),
            }
        }
        let base = bytes.as_ptr() as usize;
        let streamed: Vec<std::ops::Range<usize>> = left
            .iter()
            .map(|&(_, _, data)| {
                let at = data.as_ptr() as usize - base;
                at..at + data.len()
            })
            .collect();
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
        self.packed.values().map(|p| p.bytes()).sum()
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

    /// Creates, in `ctx`, an external tensor for weight `w` that points into the mapping,
    /// carrying the weight's packed copy if loading made one.
    pub fn import(&self, ctx: &mut Context, w: &WeightRef) -> Result<Tensor> {
        let t = ctx.new_tensor_external(w.dtype, &w.ne, self.file.data(), w.offset)?;
        ctx.set_name(t, w.name.clone())?;
        ctx.set_param(t)?;
        if let Some(p) = self.packed.get(&w.offset) {
            // `t` was just made as an external leaf at the copy's source address, so the
            // only refusal left is a copy of another type or shape (a weight the
            // architecture reads twice with two shapes): that tensor keeps reading the map.
            let _ = ctx.set_packed(t, p);
        }
        Ok(t)
    }

    /// Imports every weight into `ctx` (metadata only; the data stays where it is), as the
    /// table the architecture's graph builder reads.
    pub fn import_weights(&self, ctx: &mut Context) -> Result<ImportedWeights> {
        let tensors = self
            .weights
            .table
            .iter()
            .map(|w| self.import(ctx, w))
            .collect::<Result<Vec<_>>>()?;
        Ok(ImportedWeights::new(tensors))
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
