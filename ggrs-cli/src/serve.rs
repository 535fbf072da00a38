//! `ggrs serve`: an OpenAI-compatible HTTP server (llama-server's API and flag names) on the
//! serving engine; the HTTP side is the `ggrs-server` crate.

use std::path::PathBuf;
use std::time::Duration;

use ggrs_llama::engine::EngineParams;
use ggrs_server::{ServerConfig, ServerError};

use ggrs_llama::chat::reply::Reasoning;

use crate::common::{checked_threads, model_path, reasoning_arg, template_arg, SamplingArgs};
use crate::CliResult;

/// Arguments of `ggrs serve` (llama-server's names).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// GGUF model file [default: the model made by scripts/fetch-model.sh]
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Address to listen on, or several separated by commas (127.0.0.1,::1).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// KV cache size in tokens, shared by the slots: each gets ctx-size / parallel, rounded
    /// down to a multiple of 256 (0: 4096 per slot, at most the model's training context).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    ctx_size: usize,
    /// KV cache type of the keys (`-ctk` works too): f16, q8_0, q4_0, q4_1, q5_0, q5_1,
    /// iq4_nl (flash attention), or f32/bf16 for both keys and values.
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value = "f16", value_parser = crate::common::cache_type_arg)]
    cache_type_k: ggrs_core::DType,
    /// KV cache type of the values (`-ctv` works too): as --cache-type-k.
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value = "f16", value_parser = crate::common::cache_type_arg)]
    cache_type_v: ggrs_core::DType,
    /// Slots: requests generating at once (`-np N` works too, as llama-server's).
    #[arg(long = "parallel", default_value_t = 4, value_name = "N")]
    parallel: usize,
    /// Speculative decoding in every slot by prompt lookup (n-gram drafts). `auto` (the
    /// default): on where it pays, i.e. for weights whose products verify a drafted token for
    /// about half a step (q4_0, q8_0, q4_1, q5_0, q5_1) on a model that takes exact steps
    /// without --swa-full, and each slot drafts only while its drafts are accepted; `ngram`:
    /// on for any model (implies --swa-full); `none`: off. The output of every request is
    /// that of plain decoding either way; a request turns it off with
    /// `"speculative": false`.
    #[arg(
        long = "spec",
        value_enum,
        default_value = "auto",
        value_name = "auto|ngram|none"
    )]
    spec: ServeSpec,
    /// With --spec: most tokens drafted per slot and step.
    #[arg(long = "draft-max", default_value_t = 16, value_name = "N")]
    draft_max: usize,
    /// With --spec: fewest drafted tokens worth a speculative step.
    #[arg(long = "draft-min", default_value_t = 1, value_name = "N")]
    draft_min: usize,
    /// Context shift, as llama-server's (default: off): a request that generates up to the
    /// end of its slot's context keeps its first `n_keep` tokens (request field, or --keep),
    /// drops half of the others (or the request's `n_discard`) and goes on. Off: generation
    /// stops when the slot is full.
    #[arg(long = "context-shift", overrides_with = "no_context_shift")]
    context_shift: bool,
    /// Turns --context-shift off (the default).
    #[arg(long = "no-context-shift")]
    no_context_shift: bool,
    /// Prompt tokens a context shift (or a request's `"truncate": true`) keeps when the
    /// request gives no `n_keep` (-1: the whole prompt), BOS not counted.
    #[arg(
        long = "keep",
        default_value_t = 0,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    keep: i32,
    /// Most prompt tokens evaluated in one step.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    batch_size: usize,
    /// Keep every cell of each slot for the sliding-window layers too (Gemma 2/3/4,
    /// gpt-oss), as llama-server's `--swa-full`; by default they keep only their window.
    #[arg(long = "swa-full")]
    swa_full: bool,
    /// Compute threads (0: one per physical core).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    /// Most tokens a request may generate (-1: until the slot's context is full); a
    /// request's max_tokens is capped by it.
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    /// Requests that may wait for a slot; more get 503 with Retry-After.
    #[arg(long = "queue", default_value_t = 64)]
    queue: usize,
    /// API key clients must send as `Authorization: Bearer KEY` (repeatable, or
    /// comma-separated). /health, /v1/models and the page stay open.
    #[arg(long = "api-key", value_delimiter = ',')]
    api_key: Vec<String>,
    /// Model names, separated by commas (as llama-server's --alias): /v1/models lists them
    /// all as `aliases`, and the first in sorted order is the `id` reported there and in
    /// answers [default: the file name].
    #[arg(long)]
    alias: Option<String>,
    /// Informational tags of the model, separated by commas: /v1/models lists them as
    /// `tags` (as llama-server's --tags).
    #[arg(long)]
    tags: Option<String>,
    /// The chat format instead of the model's: a file holding a Jinja template, a name of
    /// llama.cpp's built-in formats (llama3, gemma, phi3, chatml, command-r, gpt-oss, chatglm3, chatglm4), or a
    /// Jinja template's text.
    #[arg(long, value_name = "FILE|NAME|JINJA")]
    chat_template: Option<String>,
    /// Serve embeddings: POST /v1/embeddings (OpenAI), /embedding and /embeddings
    /// (llama-server's), batched across requests, beside generation. An embedding-only model
    /// (BERT) serves them without this flag, and nothing else.
    #[arg(long)]
    embeddings: bool,
    /// Serve POST /rerank and /v1/rerank with a reranker model (`rank` pooling).
    #[arg(long)]
    reranking: bool,
    /// Embedding pooling: none, mean, cls, last [default: the model file's].
    #[arg(long)]
    pooling: Option<String>,
    /// Most tokens the embedding worker evaluates in one step (raised to the model's
    /// context); separate from --batch-size, which is generation's.
    #[arg(long, default_value_t = 512, value_name = "N")]
    embd_batch: usize,
    /// Where a reasoning model's `<think>` blocks go: `deepseek` (or `auto`,
    /// `deepseek-legacy`) into `reasoning_content`, `none` left in the content (as
    /// llama-server's flag); `nothink` is `none` with thinking off (unless `--reasoning on`).
    #[arg(
        long,
        default_value = "deepseek",
        value_name = "none|deepseek|deepseek-legacy|auto|nothink"
    )]
    reasoning_format: String,
    /// Whether a reasoning model thinks (`-rea` works too, as llama-server's): `off`
    /// renders every prompt with the template variable `enable_thinking = false` (Qwen3,
    /// and the templates that read it, close the thinking block: the reply has no
    /// reasoning); `on` and `auto` keep thinking on. A request's
    /// `chat_template_kwargs.enable_thinking` or `reasoning_effort: "none"` still wins.
    #[arg(long, default_value = "auto", value_name = "on|off|auto", value_parser = reasoning_arg)]
    reasoning: Reasoning,
    /// Accepted for llama-server compatibility: Jinja templates are always used.
    #[arg(long = "jinja", hide = true)]
    _jinja: bool,
    /// Serve Prometheus metrics at /metrics.
    #[arg(long)]
    metrics: bool,
    /// Answer /slots with 501 (it shows each slot's state; on by default, as llama-server's).
    #[arg(long, overrides_with = "_slots")]
    no_slots: bool,
    #[arg(long = "slots", hide = true)]
    _slots: bool,
    /// Do not serve the chat page at /.
    #[arg(long)]
    no_webui: bool,
    /// Seconds a non-streaming request may take, and the longest pause in a stream (0: no
    /// limit).
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Web page origins allowed to call the API from a browser (comma-separated URLs such
    /// as http://localhost:3000; `localhost` for every page on a loopback origin, any port;
    /// or `*` for any, as llama-server allows). Default: none but the server's own page, and
    /// on a loopback address only requests for localhost.
    #[arg(
        long,
        alias = "cors-origins",
        value_delimiter = ',',
        value_name = "ORIGINS"
    )]
    cors: Vec<String>,
    /// Most bytes of text one request may have tokenized or rendered (prompts, messages,
    /// /tokenize content).
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    max_text_bytes: usize,
    /// Connections served at once; more wait to be accepted.
    #[arg(long, default_value_t = 128, value_name = "N")]
    max_connections: usize,
    /// Seconds a client has to send a request's headers (also closes idle keep-alive
    /// connections).
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    header_timeout: u64,
    /// Seconds a client has to send a request's whole body once its headers are in (a
    /// slower body gets 408 and the connection is closed).
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    body_timeout: u64,
    /// Seconds a write to a client may wait for the client to read (a client that stops
    /// reading a stream has its connection closed and its request cancelled).
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    write_timeout: u64,
    /// The samplers of requests that do not set them (as llama-server's command line).
    #[command(
        flatten,
        next_help_heading = "Sampling defaults (a request's own fields win)"
    )]
    sampling: SamplingArgs,
}

/// Rewrites llama-server's short flags of several letters, which the argument parser does
/// not have: `-np N` as `--parallel N` (`ggrs serve`), `-rea MODE` as `--reasoning MODE`
/// (`ggrs serve`, `chat` and `run`, as llama.cpp's tools share it).
pub fn rewrite_np(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let command = args.get(1).and_then(|a| a.to_str()).unwrap_or_default();
    let (np, rea) = (
        command == "serve",
        matches!(command, "serve" | "chat" | "run"),
    );
    args.into_iter()
        .map(|a| {
            if np && a == "-np" {
                "--parallel".into()
            } else if rea && a == "-rea" {
                "--reasoning".into()
            } else {
                a
            }
        })
        .collect()
}

/// The server's settings from the arguments.
fn config(a: &Args) -> Result<ServerConfig, String> {
    let model = model_path(a.model.as_deref())?;
    if !model.is_file() {
        return Err(format!("the model file {} does not exist", model.display()));
    }
    let chat_template = a.chat_template.as_deref().map(template_arg).transpose()?;
    if a.api_key.iter().any(|k| k.trim().is_empty()) {
        return Err(
            "--api-key is empty (an unset variable?): give the key, or leave the \
                    option out to serve without one"
                .into(),
        );
    }
    if a.max_connections == 0
        || a.max_text_bytes == 0
        || a.header_timeout == 0
        || a.body_timeout == 0
        || a.write_timeout == 0
    {
        return Err(
            "--max-connections, --max-text-bytes, --header-timeout, --body-timeout and \
                    --write-timeout must be at least 1"
                .into(),
        );
    }
    if a.parallel == 0 {
        return Err("--parallel must be at least 1".into());
    }
    if a.batch_size == 0 || a.queue == 0 || a.embd_batch == 0 {
        return Err("--batch-size, --embd-batch and --queue must be at least 1".into());
    }
    let kv = ggrs_llama::kv_types::KvTypes::new(a.cache_type_k, a.cache_type_v)
        .map_err(|e| e.to_string())?;
    let mut c = ServerConfig::new(model);
    c.engine = EngineParams {
        kv_type: kv.k,
        kv_type_v: Some(kv.v),
        n_slots: a.parallel,
        n_ctx: a.ctx_size,
        n_batch: a.batch_size,
        n_threads: checked_threads(a.threads),
        queue_capacity: a.queue,
        swa_full: a.swa_full || a.spec == ServeSpec::Ngram,
        context_shift: a.context_shift && !a.no_context_shift,
        n_keep: a.keep.max(-1),
        spec: (a.spec != ServeSpec::None).then_some(ggrs_llama::speculative::SpecParams {
            draft_max: a.draft_max,
            draft_min: a.draft_min,
            adaptive: true,
        }),
        spec_auto: a.spec == ServeSpec::Auto,
        ..EngineParams::default()
    };
    if a.spec != ServeSpec::None
        && (a.draft_max == 0 || a.draft_max > 63 || a.draft_min > a.draft_max)
    {
        return Err(format!(
            "--draft-max must be in 1..=63 and --draft-min at most --draft-max (got {} and {})",
            a.draft_max, a.draft_min
        ));
    }
    c.host = a.host.clone();
    c.port = a.port;
    c.alias = a.alias.clone();
    c.tags = a.tags.clone();
    c.chat_template = chat_template;
    c.n_predict = usize::try_from(a.n_predict).ok().filter(|&n| n > 0);
    c.sampling = a.sampling.params()?;
    // --seed N: the seed of every request that gives none; -1 or none: a random one each.
    c.seed = a.sampling.seed.and_then(|s| u64::try_from(s).ok());
    c.api_keys = a.api_key.clone();
    c.cors = a.cors.clone();
    c.max_text_bytes = a.max_text_bytes;
    c.max_connections = a.max_connections;
    c.header_read_timeout = Duration::from_secs(a.header_timeout);
    c.body_read_timeout = Duration::from_secs(a.body_timeout);
    c.write_timeout = Duration::from_secs(a.write_timeout);
    c.metrics = a.metrics;
    c.slots_endpoint = !a.no_slots;
    c.embeddings = a.embeddings;
    c.reranking = a.reranking;
    c.embd_batch = a.embd_batch;
    c.pooling = a
        .pooling
        .as_deref()
        .map(str::parse::<ggrs_llama::Pooling>)
        .transpose()
        .map_err(|e| e.to_string())?;
    use ggrs_llama::chat::reply::ReasoningFormat;
    c.reasoning_format = ReasoningFormat::parse(&a.reasoning_format).ok_or_else(|| {
        format!(
            "--reasoning-format {}: expected {}",
            a.reasoning_format,
            ReasoningFormat::NAMES
        )
    })?;
    c.reasoning = a.reasoning;
    if ReasoningFormat::turns_thinking_off(&a.reasoning_format) && a.reasoning == Reasoning::Auto {
        c.reasoning = Reasoning::Off;
    }
    c.webui = !a.no_webui;
    c.timeout = (a.timeout > 0).then(|| Duration::from_secs(a.timeout));
    Ok(c)
}

/// Runs `ggrs serve`.
pub fn run(a: Args) -> CliResult {
    let config = config(&a)?;
    let model = config.model_path.display().to_string();
    let webui = config.webui;
    let server = ggrs_server::start(config).map_err(|e| match e {
        ServerError::Bind { .. } => format!("{e} (choose another --port or --host)"),
        e => e.to_string(),
    })?;
    let addr = server.local_addr();
    eprintln!("ggrs serve: listening on http://{addr} (loading {model} ...)");
    let t0 = std::time::Instant::now();
    server.wait_ready()?;
    eprintln!(
        "ggrs serve: model loaded in {:.1} s; OpenAI API at http://{addr}/v1{}",
        t0.elapsed().as_secs_f64(),
        if webui {
            format!(", chat page at http://{addr}/")
        } else {
            String::new()
        }
    );
    server.wait()?;
    Ok(())
}

/// Drafters `ggrs serve --spec` offers.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeSpec {
    /// Prompt lookup where it pays (see `--spec`).
    Auto,
    /// Prompt lookup (no second model), for any model.
    Ngram,
    /// No speculation.
    None,
}
