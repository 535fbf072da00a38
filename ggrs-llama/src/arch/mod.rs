//! The architectures ggrs ships, one file each, and the [`Registry`] that maps a file's
//! `general.architecture` to one of them.
//!
//! Each file implements [`Architecture`] (and the traits of
//! [`crate::architecture`] it needs) with ggrs-core's public API and the shared
//! infrastructure ([`crate::loader`], [`crate::step`], [`crate::kv_cache`]); nothing else in
//! the crate names them. Adding one is its file plus one line in [`Registry::builtin`].

/// Implements [`crate::architecture::ArchModel`] for a model type (optionally generic:
/// `Type<F> where F: Bound`) whose inherent `forward(ctx, (hp, w, kv, shape), hidden)` builds
/// the step graph: the logits (`hidden` false, [`ArchModel::build`]) or the final hidden
/// states of every token ([`ArchModel::build_embeddings`]).
///
/// [`ArchModel::build`]: crate::architecture::ArchModel::build
/// [`ArchModel::build_embeddings`]: crate::architecture::ArchModel::build_embeddings
macro_rules! arch_model_with_forward {
    ($ty:ty $(where $g:ident: $b:path)?) => {
        impl$(<$g: $b>)? crate::architecture::ArchModel for $ty {
            fn build(
                &self,
                ctx: &mut ggrs_core::Context,
                hp: &crate::hparams::HParams,
                w: &crate::loader::ImportedWeights,
                kv: &crate::kv_cache::KvCache,
                shape: crate::step::StepShape,
            ) -> crate::error::Result<crate::architecture::StepTensors> {
                self.forward(ctx, (hp, w, kv, shape), false)
            }

            /// Each input's hidden states from a zero recurrent state (the embedder gives
            /// every input of a model with recurrent layers its own step and an empty state).
            fn build_embeddings(
                &self,
                ctx: &mut ggrs_core::Context,
                hp: &crate::hparams::HParams,
                w: &crate::loader::ImportedWeights,
                kv: &crate::kv_cache::KvCache,
                shape: crate::step::StepShape,
            ) -> crate::error::Result<Option<crate::architecture::StepTensors>> {
                self.forward(ctx, (hp, w, kv, shape), true).map(Some)
            }
        }
    };
}

pub mod bert;
pub mod chatglm;
pub mod chatglm1;
pub mod decoder;
pub mod fused;
pub mod gemma2;
pub mod gemma3;
pub mod gemma4;
pub mod gemma4_moe;
pub mod gemma_embedding;
pub mod gpt_oss;
pub mod granite;
pub mod granite_hybrid;
pub mod lfm2;
pub mod llama;
pub mod mistral3;
pub mod phi3;
pub mod qwen3;
pub mod qwen35;
pub mod qwen35moe;
pub mod qwen3moe;
pub mod smollm3;

use ggrs_core::gguf::GgufFile;

use crate::architecture::{Architecture, PlainText, TextConventions};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;

/// Architectures by name. [`Registry::builtin`] holds ggrs's own; [`Registry::register`] adds
/// (or replaces) one from outside the crate:
///
/// ```no_run
/// # use ggrs_llama::arch::Registry;
/// # use ggrs_llama::{Model, ModelOptions};
/// # fn main() -> ggrs_llama::Result<()> {
/// let mut reg = Registry::builtin();
/// // reg.register(MyArchitecture);   // any `impl Architecture`
/// let model = Model::load_from(&reg, "model.gguf", ModelOptions::default())?;
/// # Ok(()) }
/// ```
pub struct Registry {
    archs: Vec<Box<dyn Architecture>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("names", &self.names())
            .finish()
    }
}

impl Registry {
    /// A registry that knows no architecture.
    pub fn empty() -> Registry {
        Registry { archs: Vec::new() }
    }

    /// The architectures ggrs ships: `llama`, `qwen2`, `qwen3`, `qwen3moe`, `chatglm`,
    /// `chatglm1`, `phi3`, `gemma2`, `smollm3`, `granite`, `gemma3`, `gemma4`, `mistral3`,
    /// `gpt-oss`, `lfm2`, `granitehybrid`, `qwen35`, `qwen35moe`, `bert`, `nomic-bert`, `gemma-embedding` (embedding models).
    pub fn builtin() -> Registry {
        let mut r = Registry::empty();
        r.register(llama::LLAMA);
        r.register(llama::QWEN2);
        r.register(qwen3::Qwen3);
        r.register(qwen3moe::Qwen3Moe);
        r.register(chatglm::ChatGlm);
        r.register(chatglm1::ChatGlm1);
        r.register(phi3::Phi3);
        r.register(gemma2::Gemma2);
        r.register(smollm3::SmolLm3);
        r.register(granite::Granite);
        r.register(gemma3::Gemma3);
        r.register(gemma4::Gemma4);
        r.register(mistral3::Mistral3);
        r.register(gpt_oss::GptOss);
        r.register(bert::BERT);
        r.register(bert::NOMIC_BERT);
        r.register(gemma_embedding::GemmaEmbedding);
        r.register(lfm2::Lfm2);
        r.register(granite_hybrid::GraniteHybrid);
        r.register(qwen35::Qwen35);
        r.register(qwen35moe::Qwen35Moe);
        r
    }

    /// Adds `arch` under its [`Architecture::name`], replacing any architecture of that name.
    pub fn register(&mut self, arch: impl Architecture + 'static) -> &mut Registry {
        self.archs.retain(|a| a.name() != arch.name());
        self.archs.push(Box::new(arch));
        self
    }

    /// The names known, in registration order.
    pub fn names(&self) -> Vec<&'static str> {
        self.archs.iter().map(|a| a.name()).collect()
    }

    /// The architecture named `name`, or [`LlamaError::UnsupportedArch`].
    pub fn get(&self, name: &str) -> Result<&dyn Architecture> {
        self.archs
            .iter()
            .find(|a| a.name() == name)
            .map(|a| a.as_ref())
            .ok_or_else(|| LlamaError::UnsupportedArch {
                name: name.to_string(),
                supported: self.names().join(", "),
            })
    }

    /// The architecture `file` names in `general.architecture`.
    pub fn for_file(&self, file: &GgufFile) -> Result<&dyn Architecture> {
        self.get(HParams::arch_name(file)?)
    }

    /// The text conventions of `file`'s architecture, to encode text without loading the
    /// weights (`ggrs tokenize`). An architecture the registry does not know gets the plain
    /// conventions ([`PlainText`]): tokenizing needs the vocabulary, not the graph.
    pub fn text_conventions(&self, file: &GgufFile) -> Result<Box<dyn TextConventions>> {
        match self.for_file(file) {
            Ok(arch) => arch.text(file),
            Err(LlamaError::UnsupportedArch { .. }) => Ok(Box::new(PlainText)),
            Err(e) => Err(e),
        }
    }
}

impl Default for Registry {
    /// [`Registry::builtin`].
    fn default() -> Registry {
        Registry::builtin()
    }
}
