//! `ggrs._ggrs.NativeModel`: a loaded model and one session on it (KV cache, prompt cache,
//! compute threads), or for an embedding-only model (BERT) no session; embeddings and
//! rerank scores come from an embedder of its own ([`crate::embedding`]). The Python class
//! `ggrs.Model` wraps it with Python's conveniences.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ggrs_core::gguf::Value;
use ggrs_core::DType;
use ggrs_llama::chat::{ChatTemplate, Message, TemplateVars};
use ggrs_llama::constraint::{Constraint, GrammarSpec};
use ggrs_llama::embed::{Embedder, Pooling};
use ggrs_llama::perplexity::perplexity_while;
use ggrs_llama::{
    GenerateParams, LlamaError, Model, ModelOptions, PromptCache, SamplingParams, Session,
    SessionParams,
};
use numpy::ndarray::Array2;
use numpy::{PyArray1, PyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::embedding::{EmbedSettings, EmbedSlot, Input};
use crate::errors::{bad_argument, IntoPyResult};
use crate::generation::{generation_dict, start_generation, TokenStream};
use crate::state::{lock, State};
use crate::worker;

/// A model file loaded for inference, with one session (see `ggrs.Model`).
#[pyclass(frozen, module = "ggrs._ggrs")]
pub struct NativeModel {
    model: Arc<Model>,
    /// The generation session; `None` for a model that computes embeddings only.
    state: Option<Arc<Mutex<State>>>,
    /// The embedder, once made.
    embedder: EmbedSlot,
    /// What the embedder is made with.
    embed_settings: EmbedSettings,
    path: PathBuf,
}

impl Drop for NativeModel {
    fn drop(&mut self) {
        if crate::exiting() {
            // The process is ending: one more owner that is never dropped keeps the model
            // and its session from being freed (the operating system takes the memory back).
            std::mem::forget((
                self.model.clone(),
                self.state.clone(),
                self.embedder.clone(),
            ));
        }
    }
}

/// The cache type named `name` for the argument `arg` (`kv_type`, `type_k`, `type_v`).
fn kv_type(py: Python<'_>, arg: &str, name: &str) -> PyResult<DType> {
    ggrs_llama::kv_types::parse_cache_type(name)
        .map_err(|e| bad_argument(py, format!("{arg}: {e}")))
}

/// `ids` as vocabulary token ids, or the error naming the first one out of range.
pub fn token_ids(py: Python<'_>, ids: &[i64], n_vocab: usize) -> PyResult<Vec<u32>> {
    ids.iter()
        .map(|&id| {
            if id < 0 || id as u64 >= n_vocab as u64 {
                Err(LlamaError::TokenOutOfRange { id, n_vocab }).py_err(py)
            } else {
                Ok(id as u32)
            }
        })
        .collect()
}

/// A metadata value as a Python object (arrays are left out: they are the vocabulary).
fn meta_value(py: Python<'_>, v: &Value) -> Option<Py<PyAny>> {
    let o = match v {
        Value::U8(x) => x.into_pyobject(py).ok()?.into_any().unbind(),
        Value::I8(x) => x.into_pyobject(py).ok()?.into_any().unbind(),
        Value::U16(x) => x.into_pyobject(py).ok()?.into_any().unbind(),
        Value::I16(x) => x.into_pyobject(py).ok()?.into_any().unbind(),
        Value::U32(x) => x.into_pyobject(py).ok()?.into_any().unbind(),
        Value::I32(x) => x.into_pyobject(py).ok()?.into_any().unbind(),
        Value::U64(x) => x.into_pyobject(py).ok()?.into_any().unbind(),
        Value::I64(x) => x.into_pyobject(py).ok()?.into_any().unbind(),
        Value::F32(x) => x.into_pyobject(py).ok()?.into_any().unbind(),
        Value::F64(x) => x.into_pyobject(py).ok()?.into_any().unbind(),
        Value::Bool(x) => x.into_pyobject(py).ok()?.to_owned().into_any().unbind(),
        Value::String(x) => x.into_pyobject(py).ok()?.into_any().unbind(),
        _ => return None,
    };
    Some(o)
}

#[pymethods]
impl NativeModel {
    /// Loads `path` and makes a session (see `ggrs.Model` for the arguments).
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (path, n_ctx=0, n_batch=512, n_threads=0, logits_all=false, kv_type="f16", type_k=None, type_v=None, copy_weights=None, swa_full=false, speculative=None, draft_max=16, draft_min=1, context_shift=false, n_keep=0, draft_model=None, draft_p_min=0.75))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        n_ctx: usize,
        n_batch: usize,
        n_threads: usize,
        logits_all: bool,
        kv_type: &str,
        type_k: Option<&str>,
        type_v: Option<&str>,
        copy_weights: Option<bool>,
        swa_full: bool,
        speculative: Option<&str>,
        draft_max: usize,
        draft_min: usize,
        context_shift: bool,
        n_keep: i32,
        draft_model: Option<PathBuf>,
        draft_p_min: f32,
    ) -> PyResult<NativeModel> {
        if n_batch == 0 {
            return Err(bad_argument(py, "n_batch must be at least 1"));
        }
        // A draft model makes the drafter "draft" unless another is named.
        let kind = speculative.or(draft_model.as_ref().map(|_| "draft"));
        let spec = match kind {
            None => None,
            Some("ngram" | "draft") => Some(ggrs_llama::speculative::SpecParams {
                draft_max,
                draft_min,
                adaptive: true,
            }),
            Some(other) => {
                return Err(bad_argument(
                    py,
                    format!("speculative must be None, \"ngram\" or \"draft\", not {other:?}"),
                ))
            }
        };
        match (kind, &draft_model) {
            (Some("draft"), None) => {
                return Err(bad_argument(
                    py,
                    "speculative=\"draft\" needs draft_model: the path of a smaller model \
                     with the same vocabulary",
                ))
            }
            (Some("ngram"), Some(_)) => {
                return Err(bad_argument(
                    py,
                    "draft_model is for speculative=\"draft\" (or None), not \"ngram\"",
                ))
            }
            _ => {}
        }
        let base = self::kv_type(py, "kv_type", kv_type)?;
        let types = ggrs_llama::kv_types::KvTypes::new(
            type_k.map_or(Ok(base), |t| self::kv_type(py, "type_k", t))?,
            type_v.map_or(Ok(base), |t| self::kv_type(py, "type_v", t))?,
        )
        .map_err(|e| bad_argument(py, e.to_string()))?;
        let mut opts = ModelOptions::default();
        if let Some(c) = copy_weights {
            opts.copy_weights = c;
        }
        let file = path.clone();
        let mut embed_settings = EmbedSettings {
            n_ctx,
            n_batch,
            n_threads,
        };
        let slot = EmbedSlot::default();
        let embedder = slot.clone();
        type Loaded = (Arc<Model>, Option<Session>, EmbedSettings);
        let loaded = worker::run(py, move |_| -> Result<Loaded, LlamaError> {
            let model = Arc::new(Model::load_with(&file, opts)?);
            let params = SessionParams {
                n_ctx,
                n_batch,
                n_threads,
                logits_all,
                kv_type: types.k,
                kv_type_v: Some(types.v),
                // Speculative steps need every cell of the sliding-window layers.
                swa_full: swa_full || spec.is_some(),
                n_draft: spec.map_or(0, |s| s.draft_max),
                ..SessionParams::default()
            };
            match Session::new(model.clone(), params) {
                Ok(mut session) => {
                    if let Some(sp) = spec {
                        let drafter: Box<dyn ggrs_llama::speculative::Drafter> = match &draft_model
                        {
                            None => Box::new(ggrs_llama::speculative::NgramDrafter::default()),
                            Some(path) => {
                                let draft = Arc::new(Model::load_with(path, opts)?);
                                let params = SessionParams {
                                    n_ctx: session.params().n_ctx,
                                    n_batch,
                                    n_threads,
                                    swa_full: true,
                                    ..SessionParams::default()
                                };
                                let mut d = ggrs_llama::speculative::ModelDrafter::new(
                                    draft, params, &model,
                                )?;
                                d.p_min = draft_p_min;
                                Box::new(d)
                            }
                        };
                        session.set_speculation(Some(
                            ggrs_llama::speculative::Speculation::new(sp, drafter),
                        ))?;
                    }
                    if context_shift {
                        session.set_context_shift(Some(n_keep))?;
                    }
                    // Embedding inputs as long as the session's context (not a decoder's
                    // whole training context).
                    embed_settings.n_ctx = session.params().n_ctx;
                    Ok((model, Some(session), embed_settings))
                }
                // An embedding model (BERT): its embedder now, so that load errors show.
                Err(LlamaError::NotGenerative { .. }) => {
                    let mut g = embedder.lock().unwrap_or_else(|p| p.into_inner());
                    crate::embedding::embedder(&mut g, &model, embed_settings, None)?;
                    Ok((model, None, embed_settings))
                }
                Err(e) => Err(e),
            }
        })?;
        let (model, session, embed_settings) = loaded.py_err(py)?;
        Ok(NativeModel {
            model,
            state: session.map(|session| {
                Arc::new(Mutex::new(State {
                    session,
                    cache: PromptCache::new(),
                }))
            }),
            embedder: slot,
            embed_settings,
            path,
        })
    }

    /// The file the model was loaded from.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// `general.architecture` (e.g. "qwen2", "llama").
    #[getter]
    fn arch(&self) -> &'static str {
        self.model.arch_name()
    }

    /// Tokens in the vocabulary.
    #[getter]
    fn n_vocab(&self) -> usize {
        self.model.hparams.n_vocab
    }

    /// Context the model was trained with.
    #[getter]
    fn n_ctx_train(&self) -> usize {
        self.model.hparams.n_ctx_train
    }

    /// Context of the session (tokens its KV cache holds); for an embedding-only model, the
    /// most tokens of one input.
    #[getter]
    fn n_ctx(&self) -> usize {
        match &self.state {
            Some(s) => lock(s).session.params().n_ctx,
            None => self.with_embedder(|e| e.params().n_ctx),
        }
    }

    /// Most tokens evaluated in one step.
    #[getter]
    fn n_batch(&self) -> usize {
        match &self.state {
            Some(s) => lock(s).session.params().n_batch,
            None => self.with_embedder(|e| e.params().n_batch),
        }
    }

    /// Compute threads of the session.
    #[getter]
    fn n_threads(&self) -> usize {
        match &self.state {
            Some(s) => lock(s).session.n_threads(),
            None => self.with_embedder(Embedder::n_threads),
        }
    }

    /// Tokens the KV cache holds now (0 for an embedding-only model).
    #[getter]
    fn n_tokens(&self) -> usize {
        self.cached_tokens().len()
    }

    /// The tokens the KV cache holds now, in order.
    #[getter]
    fn cached_tokens(&self) -> Vec<u32> {
        match &self.state {
            Some(s) => lock(s).cache.tokens().to_vec(),
            None => Vec::new(),
        }
    }

    /// Width of the model's hidden states (of an embedding).
    #[getter]
    fn n_embd(&self) -> usize {
        self.model.hparams.n_embd
    }

    /// The pooling the model file names (`"mean"`, `"cls"`, `"last"`, `"rank"`, `"none"`),
    /// or `None` (a generation model: `embed` then needs one).
    #[getter]
    fn pooling(&self) -> Option<&'static str> {
        Pooling::of_model(&self.model).map(Pooling::name)
    }

    /// Whether the model generates text (an embedding-only model does not).
    #[getter]
    fn generative(&self) -> bool {
        self.state.is_some()
    }

    /// The embeddings of `inputs` (each a str or a list of token ids) with `pooling` (None:
    /// the file's) and llama.cpp's normalisation `normalize` (-1 none, 2 Euclidean…).
    /// Returns `(array, n_tokens)`: a float32 array `(len(inputs), n_embd)` (rank: scores),
    /// or with pooling "none" a list of `(n_tokens_i, n_embd)` arrays.
    #[pyo3(signature = (inputs, pooling=None, normalize=2))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Bound<'py, PyAny>>,
        pooling: Option<String>,
        normalize: i32,
    ) -> PyResult<(Bound<'py, PyAny>, usize)> {
        let pooling = match pooling {
            Some(p) => Some(p.parse::<Pooling>().py_err(py)?),
            None => None,
        };
        if inputs.is_empty() {
            return Err(bad_argument(py, "no inputs: give at least one text"));
        }
        let n_vocab = self.n_vocab();
        let inputs = inputs
            .iter()
            .map(|x| {
                if let Ok(t) = x.extract::<String>() {
                    Ok(Input::Text(t))
                } else if let Ok(ids) = x.extract::<Vec<i64>>() {
                    Ok(Input::Ids(token_ids(py, &ids, n_vocab)?))
                } else {
                    Err(bad_argument(
                        py,
                        "each input must be a str or a list of token ids",
                    ))
                }
            })
            .collect::<PyResult<Vec<_>>>()?;
        let (slot, model, settings) = (
            self.embedder.clone(),
            self.model.clone(),
            self.embed_settings,
        );
        let (rows, used, n_tokens) = worker::run(py, move |_| {
            crate::embedding::embed(&slot, &model, settings, pooling, inputs, normalize)
        })?
        .py_err(py)?;
        let e = self.model.hparams.n_embd;
        let to_2d = |rows: Vec<f32>, width: usize| -> PyResult<Bound<'py, PyAny>> {
            let n = rows.len() / width.max(1);
            let a = Array2::from_shape_vec((n, width), rows)
                .map_err(|err| bad_argument(py, err.to_string()))?;
            Ok(PyArray2::from_owned_array(py, a).into_any())
        };
        if used == Pooling::None {
            let list = rows
                .into_iter()
                .map(|r| to_2d(r, e))
                .collect::<PyResult<Vec<_>>>()?;
            return Ok((pyo3::types::PyList::new(py, list)?.into_any(), n_tokens));
        }
        let width = rows.first().map_or(e, Vec::len);
        Ok((to_2d(rows.concat(), width)?, n_tokens))
    }

    /// Relevance scores of `documents` for `query`, in the order of `documents` (a
    /// reranker: `rank` pooling).
    fn rerank(&self, py: Python<'_>, query: String, documents: Vec<String>) -> PyResult<Vec<f32>> {
        let (slot, model, settings) = (
            self.embedder.clone(),
            self.model.clone(),
            self.embed_settings,
        );
        worker::run(py, move |_| {
            crate::embedding::rerank(&slot, &model, settings, &query, &documents)
        })?
        .py_err(py)
    }

    /// Beginning-of-sequence token id, if the vocabulary has one.
    #[getter]
    fn bos_token_id(&self) -> Option<u32> {
        self.model.tokenizer().bos()
    }

    /// End-of-sequence token id, if the vocabulary has one.
    #[getter]
    fn eos_token_id(&self) -> Option<u32> {
        self.model.tokenizer().eos()
    }

    /// Whether the model adds a BOS token to a prompt.
    #[getter]
    fn add_bos(&self) -> bool {
        self.model.tokenizer().vocab().add_bos()
    }

    /// The file's Jinja chat template (`tokenizer.chat_template`), if it has one.
    #[getter]
    fn chat_template(&self) -> Option<String> {
        self.model
            .meta_str("tokenizer.chat_template")
            .map(str::to_string)
    }

    /// The file's scalar metadata (arrays, such as the vocabulary, are left out).
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.model.gguf().metadata() {
            if let Some(o) = meta_value(py, v) {
                d.set_item(k, o)?;
            }
        }
        Ok(d)
    }

    /// Token ids of `text` (str, or UTF-8 bytes).
    #[pyo3(signature = (text, add_bos=true, special=false))]
    fn tokenize(
        &self,
        py: Python<'_>,
        text: &Bound<'_, PyAny>,
        add_bos: bool,
        special: bool,
    ) -> PyResult<Vec<u32>> {
        let text: String = if let Ok(b) = text.cast::<PyBytes>() {
            String::from_utf8(b.as_bytes().to_vec())
                .map_err(|e| bad_argument(py, format!("the bytes are not UTF-8: {e}")))?
        } else {
            text.extract()?
        };
        let model = self.model.clone();
        py.detach(move || model.tokenizer().encode(&text, add_bos, special))
            .map_err(LlamaError::from)
            .py_err(py)
    }

    /// Tokens of `text` as a prompt of this model is encoded (BOS as the model adds it,
    /// special tokens parsed, the architecture's own conventions).
    fn encode_prompt(&self, py: Python<'_>, text: String) -> PyResult<Vec<u32>> {
        let model = self.model.clone();
        py.detach(move || model.encode_prompt(&text)).py_err(py)
    }

    /// Text of `ids`; with `special`, special tokens (such as `<|im_end|>`) are written too.
    #[pyo3(signature = (ids, special=false))]
    fn detokenize(&self, py: Python<'_>, ids: Vec<i64>, special: bool) -> PyResult<String> {
        let ids = token_ids(py, &ids, self.n_vocab())?;
        let tok = self.model.tokenizer();
        let text = if special {
            tok.decode_with_special(&ids)
        } else {
            tok.decode(&ids)
        };
        text.map_err(LlamaError::from).py_err(py)
    }

    /// The bytes of one token (a piece of a UTF-8 character for byte tokens).
    fn token_to_piece<'py>(&self, py: Python<'py>, id: i64) -> PyResult<Bound<'py, PyBytes>> {
        let id = token_ids(py, &[id], self.n_vocab())?[0];
        let bytes = self
            .model
            .tokenizer()
            .token_to_piece(id)
            .map_err(LlamaError::from)
            .py_err(py)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The prompt text of a conversation (`(role, content)` pairs) in the model's chat
    /// format, or in `template` (a llama.cpp format name or a Jinja template's text).
    #[pyo3(signature = (messages, add_generation_prompt=true, template=None, enable_thinking=true))]
    fn render_chat(
        &self,
        py: Python<'_>,
        messages: Vec<(String, String)>,
        add_generation_prompt: bool,
        template: Option<String>,
        enable_thinking: bool,
    ) -> PyResult<String> {
        let format = ChatTemplate::resolve(&self.model, template.as_deref())
            .map_err(LlamaError::from)
            .py_err(py)?;
        let msgs: Vec<Message> = messages
            .into_iter()
            .map(|(role, content)| Message::new(role, content))
            .collect();
        let vars = TemplateVars {
            enable_thinking,
            ..TemplateVars::default()
        };
        format
            .render_with(&msgs, add_generation_prompt, &vars)
            .map_err(LlamaError::from)
            .py_err(py)
    }

    /// A chat request made ready: `messages` (`(role, content, [(id, name, arguments)],
    /// tool_call_id, name, reasoning_content)`) rendered with `tools` (OpenAI's list as
    /// JSON text) in the model's format or `template`, the call grammar for `tool_choice`
    /// (`auto`, `none`, `required`, `function` with `tool_name`), and the reply's syntax
    /// (`reasoning`: split `<think>` reasoning off).
    #[pyo3(signature = (
        messages, add_generation_prompt=true, template=None, enable_thinking=true, tools=None,
        tool_choice="auto".to_string(), tool_name=None, parallel_tool_calls=false, reasoning=false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn chat_plan(
        &self,
        py: Python<'_>,
        messages: Vec<crate::chat::PyMessage>,
        add_generation_prompt: bool,
        template: Option<String>,
        enable_thinking: bool,
        tools: Option<String>,
        tool_choice: String,
        tool_name: Option<String>,
        parallel_tool_calls: bool,
        reasoning: bool,
    ) -> PyResult<crate::chat::ChatPlan> {
        let req = crate::chat::PlanRequest {
            add_generation_prompt,
            template,
            enable_thinking,
            tools,
            tool_choice,
            tool_name,
            parallel_tool_calls,
            reasoning,
        };
        crate::chat::chat_plan(py, &self.model, messages, req)
    }

    /// Tokens of a rendered chat prompt (special tokens parsed, BOS once).
    fn encode_chat(&self, py: Python<'_>, text: String) -> PyResult<Vec<u32>> {
        let model = self.model.clone();
        py.detach(move || model.encode_chat(&text)).py_err(py)
    }

    /// Generates after `prompt` (token ids), reusing the cached prefix (with `cache_prompt`;
    /// else from an empty cache, emptied under the same lock as the generation). Returns the
    /// result as a dict, or with `stream` a `TokenStream` of `Piece`s.
    #[pyo3(signature = (
        prompt, *, max_tokens=128, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
        repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, penalty_last_n=64,
        seed=0, stop=Vec::new(), top_logprobs=0, ignore_eos=false, logit_bias=Vec::new(),
        stream=false, cache_prompt=true, grammar=None, json_schema=None, chat_plan=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: Vec<i64>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        frequency_penalty: f32,
        presence_penalty: f32,
        penalty_last_n: usize,
        seed: u64,
        stop: Vec<String>,
        top_logprobs: usize,
        ignore_eos: bool,
        logit_bias: Vec<(i64, f32)>,
        stream: bool,
        cache_prompt: bool,
        grammar: Option<String>,
        json_schema: Option<String>,
        chat_plan: Option<PyRef<'_, crate::chat::ChatPlan>>,
    ) -> PyResult<Py<PyAny>> {
        let n_vocab = self.n_vocab();
        let spec = match (grammar, json_schema) {
            (Some(_), Some(_)) => {
                return Err(bad_argument(
                    py,
                    "give a grammar or a JSON schema, not both",
                ))
            }
            (Some(g), None) => Some(GrammarSpec::Gbnf(g)),
            (None, Some(s)) => Some(
                GrammarSpec::json_schema_text(&s).map_err(|e| bad_argument(py, e.to_string()))?,
            ),
            (None, None) => None,
        };
        // A chat request's tools bring their grammar (lazy under `tool_choice` auto).
        let (spec, lazy) = match &chat_plan {
            Some(plan) => plan.constraint(spec).map_err(|e| bad_argument(py, e))?,
            None => (spec, None),
        };
        // Compiling a grammar builds the vocabulary's token trie once per model: off the GIL.
        let model = self.model.clone();
        let constraint = match spec {
            Some(spec) => Some(
                py.detach(move || Constraint::compile_lazy(model.tokenizer(), spec, lazy))
                    .map_err(|e| bad_argument(py, e.to_string()))?,
            ),
            None => None,
        };
        let prompt = token_ids(py, &prompt, n_vocab)?;
        let bias_ids: Vec<i64> = logit_bias.iter().map(|b| b.0).collect();
        let bias_ids = token_ids(py, &bias_ids, n_vocab)?;
        let params = GenerateParams {
            max_tokens,
            sampling: SamplingParams {
                temperature,
                top_k,
                top_p,
                min_p,
                repeat_penalty,
                frequency_penalty,
                presence_penalty,
                penalty_last_n,
                seed,
                logit_bias: bias_ids
                    .into_iter()
                    .zip(logit_bias.iter().map(|b| b.1))
                    .collect(),
            },
            stop,
            ignore_eos,
            top_logprobs: top_logprobs.min(n_vocab),
            post_sampling_probs: false,
            constraint,
        };
        params
            .sampling
            .validate()
            .map_err(|m| bad_argument(py, m))?;
        let state = self.state(py)?.clone();
        let job = start_generation(py, state, prompt, params, stream, cache_prompt)?;
        if stream {
            return Ok(Py::new(py, TokenStream::new(job))?.into_any());
        }
        let mut job = job;
        loop {
            match job.recv(py)? {
                Some(crate::generation::Message::Token(_)) => {}
                Some(crate::generation::Message::Done(r)) => {
                    job.stop(py);
                    return Ok(generation_dict(py, &r.py_err(py)?)?.into_any().unbind());
                }
                None => return Err(worker::worker_died(py)),
            }
        }
    }

    /// Evaluates `ids` after the tokens the cache holds; the logits of the last one (or of
    /// every one, with `all_logits` on a model made with `logits_all=True`) are then
    /// available from `logits()`.
    #[pyo3(signature = (ids, all_logits=false))]
    fn eval(&self, py: Python<'_>, ids: Vec<i64>, all_logits: bool) -> PyResult<()> {
        let ids = token_ids(py, &ids, self.n_vocab())?;
        if ids.is_empty() {
            return Err(LlamaError::EmptyPrompt).py_err(py);
        }
        let state = self.state(py)?.clone();
        worker::run(py, move |_| {
            let mut g = lock(&state);
            let State { session, cache } = &mut *g;
            if all_logits && !session.params().logits_all {
                return Err(LlamaError::InvalidArgument(
                    "all_logits needs a model made with logits_all=True".into(),
                ));
            }
            cache.append(session, &ids, all_logits)
        })?
        .py_err(py)
    }

    /// Logits of the last evaluated token as a float32 array of `n_vocab`; with `all`, of
    /// every token the last `eval` asked logits for, `(n, n_vocab)`. A fresh array (the
    /// session's buffer is overwritten by the next step).
    #[pyo3(signature = (all=false))]
    fn logits<'py>(&self, py: Python<'py>, all: bool) -> PyResult<Bound<'py, PyAny>> {
        let g = lock(self.state(py)?);
        let nv = self.n_vocab();
        if all {
            let v = g.session.all_logits().to_vec();
            let rows = g.session.n_outputs();
            drop(g);
            // The session keeps rows × n_vocab values, so the shape always fits.
            let a = Array2::from_shape_vec((rows, nv), v)
                .map_err(|e| bad_argument(py, e.to_string()))?;
            Ok(PyArray2::from_owned_array(py, a).into_any())
        } else {
            let v = g.session.logits().to_vec();
            drop(g);
            if v.is_empty() {
                return Err(bad_argument(
                    py,
                    "no logits yet: evaluate some tokens first",
                ));
            }
            Ok(PyArray1::from_vec(py, v).into_any())
        }
    }

    /// Forgets every cached token.
    fn reset(&self) {
        if let Some(state) = &self.state {
            let mut g = lock(state);
            let State { session, cache } = &mut *g;
            cache.forget(session);
        }
    }

    /// Perplexity of `text` with llama.cpp's protocol in chunks of `chunk` tokens, on a
    /// session of its own. Returns `(ppl, ppl_err, tokens_scored, chunks)`.
    #[pyo3(signature = (text, chunk=512))]
    fn perplexity(
        &self,
        py: Python<'_>,
        text: String,
        chunk: usize,
    ) -> PyResult<(f64, f64, usize, usize)> {
        let model = self.model.clone();
        let (n_batch, n_threads) = {
            let g = lock(self.state(py)?);
            (g.session.params().n_batch, g.session.params().n_threads)
        };
        worker::run(py, move |cancel: &AtomicBool| {
            let tokens = model.tokenizer().encode(&text, true, false)?;
            let params = SessionParams {
                n_ctx: chunk,
                n_batch: n_batch.max(chunk),
                n_threads,
                logits_all: true,
                ..SessionParams::default()
            };
            if chunk < 4 {
                return Err(LlamaError::InvalidArgument(format!(
                    "chunk {chunk} is too small (at least 4 tokens)"
                )));
            }
            let mut session = Session::new(model, params)?;
            let r = perplexity_while(&mut session, &tokens, chunk, |_| {
                if cancel.load(Ordering::Relaxed) {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
            Ok((r.ppl, r.ppl_err, r.count, r.chunks))
        })?
        .py_err(py)
    }
}

impl NativeModel {
    /// The generation session, or the error for an embedding-only model.
    fn state(&self, py: Python<'_>) -> PyResult<&Arc<Mutex<State>>> {
        self.state.as_ref().ok_or_else(|| {
            crate::errors::ggrs_error(
                py,
                "ModelError",
                format!(
                    "this model ({}) computes embeddings only and cannot generate text: use \
                     embed(), rerank() or create_embedding()",
                    self.model.arch_name()
                ),
            )
        })
    }

    /// `f` of the embedder an embedding-only model made at load.
    fn with_embedder<T: Default>(&self, f: impl FnOnce(&Embedder) -> T) -> T {
        let g = self.embedder.lock().unwrap_or_else(|p| p.into_inner());
        g.as_ref().map(|(_, e)| f(e)).unwrap_or_default()
    }
}
