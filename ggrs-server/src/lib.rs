//! An OpenAI-compatible HTTP server on the ggrs serving engine ([`ggrs_llama::engine`]):
//! the API of llama.cpp's `llama-server` (`/v1/chat/completions`, `/v1/completions`,
//! `/v1/models`, `/health`, `/metrics`, `/tokenize`, `/detokenize`, `/props`, `/slots`) and
//! a chat page at `/`; with [`ServerConfig::embeddings`] / [`ServerConfig::reranking`] also
//! `/v1/embeddings`, `/embedding(s)` and `/rerank`.
//!
//! The server binds its address first and loads the model in the background: `/health`
//! answers 503 until the model is ready, then 200. One engine thread owns the model; the
//! HTTP side runs on a small tokio runtime ([`ServerConfig::http_threads`]) and talks to the
//! engine through channels, so it does not compete with the compute threads.
//!
//! ```no_run
//! let mut config = ggrs_server::ServerConfig::new("model.gguf");
//! config.port = 0; // any free port
//! let server = ggrs_server::start(config)?;
//! println!("listening on http://{}", server.local_addr());
//! server.wait_ready()?; // the model is loaded
//! server.wait(); // serves until the process ends
//! # Ok::<(), ggrs_server::ServerError>(())
//! ```

mod anthropic;
mod api;
mod completions;
mod embed_inputs;
mod embed_service;
mod embeddings;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod handler;
mod info;
mod json_values;
mod limits;
mod logit_bias;
mod native;
mod origins;
mod params;
mod responses;
mod state;
mod structured;
mod tools;
mod translate;
mod write_timeout;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ggrs_llama::engine::EngineParams;
use ggrs_llama::ModelOptions;

pub use state::LoadError;

/// How to run the server (the flags of `ggrs serve`).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The GGUF model file.
    pub model_path: PathBuf,
    /// How to load it.
    pub model_options: ModelOptions,
    /// Slots, context, batch, threads and queue of the engine.
    pub engine: EngineParams,
    /// Address to listen on (`--host`), or several separated by commas
    /// (`127.0.0.1,::1`, as llama-server reads its `--host`): see [`ServerConfig::hosts`].
    pub host: String,
    /// Port (`--port`; 0: any free port, see [`Server::local_addr`]).
    pub port: u16,
    /// The model's names (`--alias`), separated by commas as llama-server reads them
    /// (`a,b`): `/v1/models` lists them as `aliases` and reports the first in sorted order
    /// as the model's `id` (default: the file name); see [`ServerConfig::aliases`].
    pub alias: Option<String>,
    /// Informational tags of the model (`--tags`), separated by commas: `/v1/models` lists
    /// them as `tags`.
    pub tags: Option<String>,
    /// The chat format: a llama.cpp built-in format name or a Jinja template's text
    /// (`--chat-template`; default: the model's).
    pub chat_template: Option<String>,
    /// Most tokens a request may generate (`-n`; `None`: until the slot's context is full).
    pub n_predict: Option<usize>,
    /// Keys a client must send (`Authorization: Bearer KEY`); empty: no key needed.
    pub api_keys: Vec<String>,
    /// Serve `/metrics` (`--metrics`).
    pub metrics: bool,
    /// Serve the chat page at `/` (`--no-webui` turns it off).
    pub webui: bool,
    /// A non-streaming request's time limit, and the longest pause a stream may have
    /// between two events (`--timeout`; `None`: no limit).
    pub timeout: Option<Duration>,
    /// Largest request body accepted (bigger ones get 413).
    pub max_body_bytes: usize,
    /// Worker threads of the HTTP runtime (at least 1).
    pub http_threads: usize,
    /// Most bytes of text one request may have tokenized or rendered (`--max-text-bytes`):
    /// a completion's prompts, a chat's messages, `/tokenize`'s content.
    pub max_text_bytes: usize,
    /// Connections served at once (`--max-connections`); more wait to be accepted.
    pub max_connections: usize,
    /// Time a client has to send a request's headers (`--header-timeout`; it also closes an
    /// idle keep-alive connection).
    pub header_read_timeout: Duration,
    /// Time a client has to send a request's whole body once its headers are in
    /// (`--body-timeout`): a body trickled slower than that gets 408 and the connection is
    /// closed, so no client holds a connection (and its place under
    /// [`ServerConfig::max_connections`]) forever.
    pub body_read_timeout: Duration,
    /// Longest time a write to a client may wait (`--write-timeout`): a client that stops
    /// reading an answer (a stream it no longer reads) has its connection closed after
    /// that, which cancels its request and frees its slot.
    pub write_timeout: Duration,
    /// Origins whose pages may call the API (`--cors`; `*`: any). Empty: none but the
    /// server's own page, and (on a loopback address) requests must name a loopback host.
    pub cors: Vec<String>,
    /// Serve `/v1/embeddings`, `/embedding`, `/embeddings` (`--embeddings`) beside
    /// generation. An embedding-only model (BERT) serves them with or without it (and
    /// `/rerank` when its file asks for `rank` pooling), and nothing else.
    pub embeddings: bool,
    /// Serve `/slots` (each slot's state: busy, cached and generated tokens; default on, as
    /// llama-server's; `--no-slots` turns it off).
    pub slots_endpoint: bool,
    /// Serve `/rerank` and `/v1/rerank` with a reranker model (`--reranking`: `rank`
    /// pooling).
    pub reranking: bool,
    /// The embeddings' pooling (`--pooling`; `None`: the model file's).
    pub pooling: Option<ggrs_llama::Pooling>,
    /// The samplers of a request that does not set them (`--temp`, `--top-k`, `--top-p`,
    /// `--min-p`, the penalties; default llama-server's). Its `seed` is not used: see `seed`.
    pub sampling: ggrs_llama::SamplingParams,
    /// The seed of a request that gives none (`--seed`); `None`: a random one per request.
    pub seed: Option<u64>,
    /// Most tokens the embedding worker evaluates in one step (`--embd-batch`; default
    /// 512, raised to the model's context so that any input fits). Inputs are packed whole
    /// (at most 64 per step). A larger step is not faster on a CPU: all-MiniLM-L6-v2 with 2
    /// threads served 1,000 sentences at 452 /s (f16) and 615 /s (q8_0) in steps of 512
    /// tokens against 338 and 538 /s in steps of 2048, its activations no longer fitting
    /// the caches. The generation engine's `n_batch` is separate.
    pub embd_batch: usize,
    /// Where `<think>` blocks go (`--reasoning-format`; default `deepseek`:
    /// `reasoning_content`).
    pub reasoning_format: ggrs_llama::chat::reply::ReasoningFormat,
    /// Whether a reasoning model thinks (`--reasoning`; default `auto`): `off` renders
    /// every request's template with `enable_thinking = false` unless the request's
    /// `chat_template_kwargs` says otherwise.
    pub reasoning: ggrs_llama::chat::reply::Reasoning,
}

impl ServerConfig {
    /// The defaults (llama-server's where it has them) for the model at `model_path`:
    /// 127.0.0.1:8080, 4 slots, a queue of 64, no key, timeout 600 s, bodies up to 16 MiB,
    /// 1 MiB of text to tokenize per request, 128 connections, 10 s to send the headers and
    /// 60 s for the body, 60 s for a write to a client that does not read, no cross-origin
    /// access.
    pub fn new(model_path: impl Into<PathBuf>) -> ServerConfig {
        ServerConfig {
            model_path: model_path.into(),
            model_options: ModelOptions::default(),
            engine: EngineParams::default(),
            host: "127.0.0.1".into(),
            port: 8080,
            alias: None,
            tags: None,
            chat_template: None,
            n_predict: None,
            api_keys: Vec::new(),
            metrics: false,
            webui: true,
            timeout: Some(Duration::from_secs(600)),
            max_body_bytes: 16 << 20,
            http_threads: 1,
            max_text_bytes: 1 << 20,
            max_connections: 128,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            cors: Vec::new(),
            embeddings: false,
            slots_endpoint: true,
            reranking: false,
            pooling: None,
            sampling: Default::default(),
            seed: None,
            embd_batch: 512,
            reasoning_format: Default::default(),
            reasoning: Default::default(),
        }
    }

    /// The addresses of [`ServerConfig::host`]: split at commas, trimmed, an IPv6 address's
    /// brackets removed (`[::1]` is `::1`), empty entries left out.
    pub fn hosts(&self) -> Vec<&str> {
        origins::host_list(&self.host)
    }

    /// The model's name in responses: the first of [`ServerConfig::aliases`], else the file
    /// name (of the first part, for a split model).
    pub fn model_id(&self) -> String {
        self.aliases().into_iter().next().unwrap_or_else(|| {
            self.model_path.file_name().map_or_else(
                || self.model_path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        })
    }

    /// The names of `--alias`, as llama-server keeps them: split at commas, trimmed, empty
    /// ones dropped, sorted and each once.
    pub fn aliases(&self) -> Vec<String> {
        comma_set(self.alias.as_deref())
    }

    /// The tags of `--tags`, read as [`ServerConfig::aliases`] reads names.
    pub fn tags(&self) -> Vec<String> {
        comma_set(self.tags.as_deref())
    }
}

/// Why the server could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address could not be bound (in use, not local, no permission).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The HTTP runtime could not be started or failed.
    #[error("the HTTP server failed: {0}")]
    Io(#[from] std::io::Error),
    /// The model could not be loaded or the engine not started.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// Serves `config` on `listener` until `shutdown` completes (then waits for the open
/// connections to finish: a graceful shutdown), loading the model on a background thread
/// meanwhile. For an embedder with its own tokio runtime; see [`start`] for a server on
/// its own threads. Requests get 503 until the model is ready.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let state = state::AppState::new(&config);
    state::spawn_loader(state.clone(), config)?;
    serve_state(vec![listener], state, shutdown).await
}

/// Accepts a connection on whichever of `listeners` (at least one) has one first.
async fn accept_any(
    listeners: &[tokio::net::TcpListener],
) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
    if let [one] = listeners {
        return one.accept().await;
    }
    let pending = listeners.iter().map(|l| Box::pin(l.accept()));
    futures_util::future::select_all(pending).await.0
}

async fn serve_state(
    listeners: Vec<tokio::net::TcpListener>,
    state: Arc<state::AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let app = api::router(state.clone());
    let connections = Arc::new(tokio::sync::Semaphore::new(state.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // At the cap, wait for a connection to close before accepting another (the kernel's
        // backlog holds the rest).
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => p,
            _ = &mut shutdown => break,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            a = accept_any(&listeners) => a,
            _ = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, or a connection reset before it was accepted:
                // wait a little rather than spin, and go on serving.
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
                ) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut http = hyper::server::conn::http1::Builder::new();
        // Header names go out as `Content-Type`, not `content-type`: HTTP says case does not
        // matter, but clients that copy headers into a plain dictionary (llama.cpp's own
        // server tests among them) look them up as llama-server writes them.
        http.timer(TokioTimer::new())
            .header_read_timeout(state.header_read_timeout)
            .title_case_headers(true);
        let io = write_timeout::WriteTimeout::new(TokioIo::new(stream), state.write_timeout);
        let conn = graceful.watch(http.serve_connection(io, service));
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    graceful.shutdown().await;
    Ok(())
}

/// A server running on its own threads (see [`start`]); dropping it stops it at once
/// (open connections are closed and their requests cancelled).
pub struct Server {
    /// The bound addresses, in the order of [`ServerConfig::hosts`] (at least one).
    addrs: Vec<SocketAddr>,
    state: Arc<state::AppState>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), ServerError>>>,
}

impl Server {
    /// The address it listens on (with the port chosen when [`ServerConfig::port`] is 0);
    /// the first one when it listens on several.
    pub fn local_addr(&self) -> SocketAddr {
        // `start` binds at least one address before it makes a `Server`.
        self.addrs[0]
    }

    /// Every address it listens on, in the order of [`ServerConfig::hosts`].
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Blocks until the model is loaded and the engine runs, or returns why it failed.
    pub fn wait_ready(&self) -> Result<(), ServerError> {
        Ok(self.state.wait_ready()?)
    }

    /// Blocks while the server runs (until it fails, or forever).
    pub fn wait(mut self) -> Result<(), ServerError> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(ServerError::Io(std::io::Error::other(
                "the HTTP server thread panicked",
            ))),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Binds the addresses at once (so a port in use is an error here), then serves on a thread
/// of its own with a small tokio runtime while the model loads in the background. With
/// several hosts and port 0, the first host's free port is the port of all.
pub fn start(config: ServerConfig) -> Result<Server, ServerError> {
    let hosts = config.hosts();
    if hosts.is_empty() {
        return Err(ServerError::Bind {
            addr: config.host.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address given"),
        });
    }
    let mut port = config.port;
    let mut std_listeners = Vec::with_capacity(hosts.len());
    for host in hosts {
        let addr = match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        };
        let bind_err = |source| ServerError::Bind {
            addr: addr.clone(),
            source,
        };
        let l = std::net::TcpListener::bind((host, port)).map_err(bind_err)?;
        l.set_nonblocking(true).map_err(bind_err)?;
        port = l.local_addr().map_err(bind_err)?.port();
        std_listeners.push(l);
    }
    let addrs = std_listeners
        .iter()
        .map(std::net::TcpListener::local_addr)
        .collect::<Result<Vec<_>, _>>()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.http_threads.max(1))
        .thread_name("ggrs-http")
        .enable_all()
        .build()?;
    let state = state::AppState::new(&config);
    state::spawn_loader(state.clone(), config)?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let serve_state_ = state.clone();
    let thread = std::thread::Builder::new()
        .name("ggrs-http-main".into())
        .spawn(move || {
            // On shutdown the serving future is dropped at once (no wait for open streams),
            // then the runtime with it: open connections close, which cancels their
            // requests.
            runtime.block_on(async move {
                let listeners = std_listeners
                    .into_iter()
                    .map(tokio::net::TcpListener::from_std)
                    .collect::<Result<Vec<_>, _>>()?;
                tokio::select! {
                    r = serve_state(listeners, serve_state_, std::future::pending()) => r,
                    _ = rx => Ok(()),
                }
            })
        })?;
    Ok(Server {
        addrs,
        state,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

/// [`start`], then waits for the model and serves until the process ends.
pub fn run(config: ServerConfig) -> Result<(), ServerError> {
    let server = start(config)?;
    server.wait_ready()?;
    server.wait()
}

/// The distinct non-empty trimmed items of a comma-separated list, sorted (llama-server keeps
/// `--alias` and `--tags` in a `std::set`).
fn comma_set(list: Option<&str>) -> Vec<String> {
    let set: std::collections::BTreeSet<String> = list
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    set.into_iter().collect()
}
