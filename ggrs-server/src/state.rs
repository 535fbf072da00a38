//! What the handlers share: the configuration they read, the engine once the model is
//! loaded, and the HTTP layer's counters.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ggrs_llama::chat::TemplateVars;
use ggrs_llama::engine::{Engine, EngineHandle};
use ggrs_llama::{ChatTemplate, LlamaError, Model, Pooling};

use crate::ServerConfig;

/// Why the model could not be served.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    /// The model file could not be loaded.
    #[error("cannot load the model {path}: {message}")]
    Model {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The engine could not start (too large a context for the memory, bad parameters).
    #[error("cannot start the engine: {0}")]
    Engine(String),
    /// The chat template given (`--chat-template`) is not usable.
    #[error("--chat-template: {0}")]
    Template(String),
    /// The model computes embeddings only (a BERT encoder): it serves embeddings (with or
    /// without `--embeddings`) and answers the generation endpoints with 501.
    #[error("{0}")]
    EmbeddingOnly(String),
}

/// The model and its engine, once loaded.
pub(crate) struct Loaded {
    /// Keeps the engine thread alive (dropping it stops the thread).
    _engine: Engine,
    pub handle: EngineHandle,
    pub model: Arc<Model>,
    /// The chat format, or why there is none.
    pub template: Result<ChatTemplate, String>,
    /// Template variables fixed at start, so that a conversation's prompt does not change
    /// between turns (its cached prefix stays valid).
    pub vars: TemplateVars,
    /// Whether the template can think ([`ChatTemplate::supports_thinking`]): where it
    /// cannot, prompts are rendered with thinking off and `<think>` stays in the content,
    /// as llama-server does.
    pub thinks: bool,
}

enum Phase {
    Loading,
    Ready(Arc<Loaded>),
    Failed(LoadError),
}

/// Requests answered, by HTTP status.
#[derive(Default)]
pub(crate) struct Counters {
    pub by_status: BTreeMap<u16, u64>,
}

/// State shared by all handlers.
pub(crate) struct AppState {
    pub model_id: String,
    /// `--alias`'s names and `--tags`' tags, as `/v1/models` lists them.
    pub aliases: Vec<String>,
    pub tags: Vec<String>,
    pub model_path: String,
    pub api_keys: Vec<String>,
    pub metrics: bool,
    /// Whether `/slots` answers (`--no-slots` turns it off).
    pub slots_endpoint: bool,
    pub webui: bool,
    pub timeout: Option<Duration>,
    pub max_body_bytes: usize,
    /// What requests get for the fields they leave out (`-n`, `--temp`, …, `--seed`).
    pub defaults: crate::params::RequestDefaults,
    pub n_slots: usize,
    /// Most bytes of text tokenized or rendered per request.
    pub max_text_bytes: usize,
    /// Connections served at once.
    pub max_connections: usize,
    /// Time to send a request's headers.
    pub header_read_timeout: Duration,
    /// Time to send a request's body once the headers are in.
    pub body_read_timeout: Duration,
    /// `--write-timeout`.
    pub write_timeout: Duration,
    /// Who may call from a browser.
    pub origins: crate::origins::OriginPolicy,
    /// The pool that parses, renders and tokenizes.
    pub prep: crate::limits::Prep,
    /// Unix time of the start (the `created` of `/v1/models`).
    pub created: u64,
    phase: Mutex<Phase>,
    ready: Condvar,
    /// Whether `--embeddings` or `--reranking` was given.
    pub embed_enabled: bool,
    /// The embedding worker, once the model is loaded (with `embed_enabled`, or when the
    /// model computes embeddings only).
    pub embed: std::sync::OnceLock<Arc<crate::embed_service::EmbedService>>,
    pub counters: Mutex<Counters>,
    /// Where `<think>` blocks go (`--reasoning-format`).
    pub reasoning_format: ggrs_llama::chat::reply::ReasoningFormat,
}

/// Seconds since 1970 now.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl AppState {
    pub fn new(config: &ServerConfig) -> Arc<AppState> {
        Arc::new(AppState {
            model_id: config.model_id(),
            aliases: config.aliases(),
            tags: config.tags(),
            model_path: config.model_path.display().to_string(),
            api_keys: config.api_keys.clone(),
            metrics: config.metrics,
            slots_endpoint: config.slots_endpoint,
            webui: config.webui,
            timeout: config.timeout,
            max_body_bytes: config.max_body_bytes,
            defaults: crate::params::RequestDefaults {
                n_predict: config.n_predict,
                sampling: config.sampling.clone(),
                seed: config.seed,
            },
            n_slots: config.engine.n_slots,
            max_text_bytes: config.max_text_bytes,
            max_connections: config.max_connections,
            header_read_timeout: config.header_read_timeout,
            body_read_timeout: config.body_read_timeout,
            write_timeout: config.write_timeout,
            origins: crate::origins::OriginPolicy::new(&config.cors, &config.host),
            prep: crate::limits::Prep::new(),
            created: unix_now(),
            phase: Mutex::new(Phase::Loading),
            ready: Condvar::new(),
            embed_enabled: config.embeddings || config.reranking,
            embed: std::sync::OnceLock::new(),
            counters: Mutex::new(Counters::default()),
            reasoning_format: config.reasoning_format,
        })
    }

    /// The engine, or why there is none yet: `Ok(None)` while loading.
    pub fn loaded(&self) -> Result<Option<Arc<Loaded>>, LoadError> {
        match &*self.phase.lock().unwrap_or_else(|p| p.into_inner()) {
            Phase::Loading => Ok(None),
            Phase::Ready(l) => Ok(Some(l.clone())),
            Phase::Failed(e) => Err(e.clone()),
        }
    }

    /// Blocks until the model is ready or failed.
    pub fn wait_ready(&self) -> Result<(), LoadError> {
        let mut phase = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match &*phase {
                Phase::Loading => {
                    phase = self.ready.wait(phase).unwrap_or_else(|p| p.into_inner());
                }
                Phase::Ready(_) => return Ok(()),
                // An embedding model serves embeddings only: no engine, yet ready.
                Phase::Failed(_) if self.embed.get().is_some() => return Ok(()),
                Phase::Failed(e) => return Err(e.clone()),
            }
        }
    }

    fn set_phase(&self, p: Phase) {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner()) = p;
        self.ready.notify_all();
    }

    /// Counts a response with `status`.
    pub fn count(&self, status: u16) {
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        *c.by_status.entry(status).or_default() += 1;
    }
}

/// Starts the embedding worker of `model` (`reranking`: `rank` pooling), with the server's
/// threads and queue and its own batch size.
fn start_embeddings(
    config: &ServerConfig,
    model: &Arc<Model>,
    reranking: bool,
) -> Result<Arc<crate::embed_service::EmbedService>, LoadError> {
    let e = &config.engine;
    crate::embed_service::EmbedService::start(
        model.clone(),
        config.pooling,
        reranking,
        [config.embd_batch, e.n_threads, e.queue_capacity],
    )
    .map(Arc::new)
    .map_err(LoadError::Engine)
}

fn load(config: &ServerConfig, state: &AppState) -> Result<Loaded, LoadError> {
    let model = Model::load_with(&config.model_path, config.model_options)
        .map(Arc::new)
        .map_err(|e: LlamaError| LoadError::Model {
            path: config.model_path.display().to_string(),
            message: e.to_string(),
        })?;
    if state.embed_enabled {
        let service = start_embeddings(config, &model, config.reranking)?;
        let _ = state.embed.set(service);
    }
    let template = ChatTemplate::resolve(&model, config.chat_template.as_deref());
    // A template the operator chose and that cannot work is a start-up error; the model's
    // own missing or broken one only refuses chat requests (completions still work).
    if let (Some(_), Err(e)) = (&config.chat_template, &template) {
        return Err(LoadError::Template(e.to_string()));
    }
    let template = template.map_err(|e| {
        format!("{e}; start the server with --chat-template NAME (or a Jinja template)")
    });
    let thinks = template.as_ref().is_ok_and(ChatTemplate::supports_thinking);
    let engine = match Engine::start(model.clone(), config.engine) {
        Ok(engine) => engine,
        Err(LlamaError::NotGenerative { arch }) => {
            // An embedding model can do nothing else: it serves embeddings (or reranks, when
            // its file asks for `rank` pooling) with or without the flags.
            let reranking = match state.embed.get() {
                Some(s) => s.reranking,
                None => {
                    let rank = config.pooling.or_else(|| Pooling::of_model(&model));
                    let reranking = rank == Some(Pooling::Rank);
                    let _ = state
                        .embed
                        .set(start_embeddings(config, &model, reranking)?);
                    reranking
                }
            };
            return Err(LoadError::EmbeddingOnly(format!(
                "the model ({arch}) computes embeddings only and cannot generate text: use {}",
                if reranking {
                    "/v1/rerank"
                } else {
                    "/v1/embeddings"
                }
            )));
        }
        Err(e) => return Err(LoadError::Engine(e.to_string())),
    };
    Ok(Loaded {
        handle: engine.handle(),
        _engine: engine,
        model,
        template,
        vars: TemplateVars {
            enable_thinking: config.reasoning.enable_thinking() && thinks,
            ..TemplateVars::default()
        },
        thinks,
    })
}

/// Loads the model and starts the engine on a thread of its own, then marks the state
/// ready (or failed).
pub(crate) fn spawn_loader(state: Arc<AppState>, config: ServerConfig) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("ggrs-load".into())
        .spawn(move || {
            let phase = match load(&config, &state) {
                Ok(l) => Phase::Ready(Arc::new(l)),
                Err(e) => Phase::Failed(e),
            };
            state.set_phase(phase);
        })
        .map(|_| ())
}
