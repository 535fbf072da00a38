//! The source architectures the converter reads, one file each, and the registry that
//! picks one from `config.json`.
//!
//! Each file implements [`ArchConverter`]: how to recognise its `config.json`, which
//! hyperparameters become which GGUF keys, where each checkpoint tensor goes (and how its
//! rows are reordered), and what its tokenizer needs. The shared machinery (reading the
//! checkpoint and the tokenizer, writing the GGUF) never names an architecture. Adding one
//! is its file plus one line in [`REGISTRY`].

mod bert;
mod chatglm;
mod chatglm1;
mod gemma3;
mod granite;
mod llama;
mod mistral3;
mod phi3;
mod qwen2;
mod smollm3;

use serde_json::Value as Json;

use crate::config::Cfg;
use crate::error::ConvertError;
use crate::layout::LayoutBuilder;
use crate::vocab::Vocab;

/// What a source architecture provides to the converter.
pub(crate) trait ArchConverter: Sync {
    /// The GGUF `general.architecture` it becomes (also the prefix of its `<arch>.*` keys).
    fn gguf_name(&self) -> &'static str;

    /// How messages name the checkpoints it reads: the `architectures` entries, and what
    /// tells it apart when another architecture shares them.
    fn source(&self) -> &'static str;

    /// Whether a `config.json` whose `architectures` lists `name` is this architecture
    /// (`cfg` is the whole file, for architectures that share a name).
    fn recognises(&self, name: &str, cfg: &Json) -> bool;

    /// Reads the hyperparameters from `cfg`, writes the `<arch>.*` keys and plans the
    /// tensors into `out`, in the order they are written. Returns the rows of the embedding
    /// table (the vocabulary size the tokenizer is padded to).
    fn plan(&self, cfg: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<usize, ConvertError>;

    /// `tokenizer.ggml.pre` of a vocabulary read from a SentencePiece model.
    fn sentencepiece_pre(&self) -> &'static str {
        "default"
    }

    /// `tokenizer.ggml.pre` of a vocabulary read from a BPE `tokenizer.json`.
    fn bpe_pre(&self) -> &'static str;

    /// Completes a vocabulary read from a SentencePiece model before it is padded to
    /// `n_vocab` entries (tokens the architecture keeps outside the model file). Nothing by
    /// default.
    fn complete_sentencepiece(&self, _vocab: &mut Vocab, _n_vocab: usize, _cfg: &Json) {}
}

/// The architectures the converter reads, in the order [`SourceArch::detect`] tries them.
static REGISTRY: &[&dyn ArchConverter] = &[
    &llama::Llama,
    &qwen2::Qwen2,
    &smollm3::SmolLm3,
    &granite::Granite,
    &mistral3::Mistral3,
    &gemma3::Gemma3,
    &phi3::Phi3,
    &chatglm::ChatGlm2,
    &chatglm1::ChatGlm1,
    &bert::Bert,
];

/// A source architecture the converter reads (one of [`SourceArch::all`]).
#[derive(Clone, Copy)]
pub struct SourceArch(&'static dyn ArchConverter);

impl SourceArch {
    /// Picks the architecture from `config.json`: the first entry of `architectures` that
    /// an architecture of the registry recognises (`ChatGLMModel` is ChatGLM-6B v1 when the
    /// configuration has `position_encoding_2d`, which only v1's has, else ChatGLM2/3).
    pub fn detect(cfg: &Json) -> Result<SourceArch, ConvertError> {
        let found: Vec<String> = cfg
            .get("architectures")
            .and_then(Json::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        for name in &found {
            if let Some(a) = REGISTRY.iter().find(|a| a.recognises(name, cfg)) {
                return Ok(SourceArch(*a));
            }
        }
        Err(ConvertError::UnsupportedArchitecture {
            found,
            supported: REGISTRY
                .iter()
                .map(|a| a.source())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Every architecture the converter reads, in detection order.
    pub fn all() -> impl Iterator<Item = SourceArch> {
        REGISTRY.iter().map(|a| SourceArch(*a))
    }

    /// The GGUF `general.architecture` it becomes.
    pub fn gguf_name(self) -> &'static str {
        self.0.gguf_name()
    }

    /// The checkpoints it reads, as messages name them (`LlamaForCausalLM`…).
    pub fn source(self) -> &'static str {
        self.0.source()
    }

    /// Its converter.
    pub(crate) fn converter(self) -> &'static dyn ArchConverter {
        self.0
    }
}

impl PartialEq for SourceArch {
    fn eq(&self, other: &SourceArch) -> bool {
        self.gguf_name() == other.gguf_name()
    }
}

impl Eq for SourceArch {}

impl std::fmt::Debug for SourceArch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SourceArch")
            .field(&self.gguf_name())
            .finish()
    }
}
