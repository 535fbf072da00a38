//! Arguments shared by the commands that load a model.

use std::path::PathBuf;
use std::sync::Arc;

use ggrs_llama::{Model, ModelOptions, SamplingParams, Session, SessionParams};

/// File name of the default model in the model directory.
pub const DEFAULT_MODEL: &str = "derived/qwen05b-q4_0.gguf";

/// The model directory: `$GGRS_MODEL_DIR` or `~/.cache/ggrs/models`.
pub fn model_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GGRS_MODEL_DIR") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache/ggrs/models")
}

/// The model file for `-m`: `given`, or the default model (which must exist).
pub fn model_path(given: Option<&std::path::Path>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        // A directory or a device would fail later with the system's words ("No such
        // device") or as a file that "starts with []": say what it is.
        if let Ok(m) = std::fs::metadata(p) {
            if m.is_dir() {
                return Err(format!(
                    "{} is a directory, not a model file: give the .gguf file in it",
                    p.display()
                ));
            }
            if !m.is_file() {
                return Err(format!(
                    "{} is not a regular file (a device or a pipe?): give a .gguf model file",
                    p.display()
                ));
            }
        }
        return Ok(p.to_path_buf());
    }
    let p = model_dir().join(DEFAULT_MODEL);
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "no model given and the default model {} is missing: run scripts/fetch-model.sh \
             or pass -m FILE",
            p.display()
        ))
    }
}

/// Model and session options.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF model file [default: the model made by scripts/fetch-model.sh]
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Threads (0: one per physical core).
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
    /// Context size in tokens (0: the model's, at most 4096).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    pub ctx_size: usize,
    /// Most tokens evaluated in one graph.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    pub batch_size: usize,
    /// Keep every context cell for the sliding-window layers too (Gemma 2/3/4, gpt-oss),
    /// as llama.cpp's `--swa-full`; by default they keep only their window.
    #[arg(long = "swa-full")]
    pub swa_full: bool,
    /// Copy the matrix weights that are not repacked (F16, BF16, K-quants) onto huge pages
    /// at load time: a few percent faster decoding, for a slower start. `auto`: yes, except
    /// for `ggrs run` with fewer than 1024 tokens to generate, or when `GGRS_NO_COPY=1`.
    #[arg(long = "copy-weights", value_enum, default_value_t = CopyWeights::Auto)]
    pub copy_weights: CopyWeights,
    /// KV cache type of the keys (`-ctk` works too): f16, q8_0, q4_0, q4_1, q5_0, q5_1,
    /// iq4_nl (read by flash attention, which ggrs always uses; llama.cpp needs `-fa on`
    /// for a quantized V cache), or f32/bf16 for both keys and values.
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value = "f16", value_parser = cache_type_arg)]
    pub cache_type_k: ggrs_core::DType,
    /// KV cache type of the values (`-ctv` works too): as --cache-type-k.
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value = "f16", value_parser = cache_type_arg)]
    pub cache_type_v: ggrs_core::DType,
}

/// A `-ctk`/`-ctv` argument: one of llama.cpp's KV cache type names.
pub fn cache_type_arg(s: &str) -> Result<ggrs_core::DType, String> {
    ggrs_llama::kv_types::parse_cache_type(s).map_err(|e| e.to_string())
}

/// When to copy the weights that are not repacked ([`ModelArgs::copy_weights`]).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyWeights {
    /// As the command suits: long-running ones copy, short runs do not.
    Auto,
    /// Always copy.
    Yes,
    /// Never copy: read those weights from the file's map.
    No,
}

impl ModelArgs {
    /// The KV cache types of `-ctk`/`-ctv`, checked (a pair attention cannot read is an
    /// error naming the types it can).
    pub fn kv_types(&self) -> Result<ggrs_llama::kv_types::KvTypes, Box<dyn std::error::Error>> {
        Ok(ggrs_llama::kv_types::KvTypes::new(
            self.cache_type_k,
            self.cache_type_v,
        )?)
    }

    /// The model path: given, or the default one (which must exist).
    pub fn path(&self) -> Result<PathBuf, String> {
        model_path(self.model.as_deref())
    }

    /// Loads the model; `long_run` is what `--copy-weights auto` decides by (whether the
    /// command will decode for long enough to win back the copy).
    pub fn load(&self, long_run: bool) -> Result<Arc<Model>, Box<dyn std::error::Error>> {
        let mut opts = ModelOptions::default();
        opts.copy_weights = match self.copy_weights {
            // The environment (`GGRS_NO_COPY`) can only turn `auto` off.
            CopyWeights::Auto => opts.copy_weights && long_run,
            CopyWeights::Yes => true,
            CopyWeights::No => false,
        };
        Ok(Arc::new(Model::load_with(self.path()?, opts)?))
    }

    /// A session on `model`, after checking the numeric options: `-b` at least 1, `-t`
    /// clamped (with a note) to the machine's logical cores, a warning for a context above
    /// the model's training context. A session too large for the machine's memory is an
    /// error naming `-c` / `-b`.
    pub fn session(
        &self,
        model: Arc<Model>,
        logits_all: bool,
    ) -> Result<Session, Box<dyn std::error::Error>> {
        self.session_for(model, logits_all, "-c (--ctx-size) or -b (--batch-size)")
    }

    /// As [`ModelArgs::session`], speculative as `spec` asks (`--spec`, `-md`): the
    /// session verifies up to `--draft-max` drafted tokens a step and generates with the
    /// drafter (the output is that of plain decoding).
    pub fn session_with_spec(
        &self,
        model: Arc<Model>,
        spec: &SpecArgs,
    ) -> Result<Session, Box<dyn std::error::Error>> {
        let Some(kind) = spec.kind()? else {
            return self.session(model, false);
        };
        let n_draft = spec.draft_max;
        let mut session = self.session_params(model.clone(), false, "-c or -b", n_draft)?;
        let drafter: Box<dyn ggrs_llama::speculative::Drafter> = match kind {
            SpecKind::Ngram => Box::new(ggrs_llama::speculative::NgramDrafter::default()),
            SpecKind::Draft => {
                let path = spec.model_draft.as_deref().ok_or(
                    "--spec draft needs a draft model: -md FILE (--model-draft), a smaller \
                     model with the same vocabulary",
                )?;
                let path = model_path(Some(path))?;
                let draft =
                    Arc::new(Model::load(&path).map_err(|e| {
                        format!("cannot load the draft model {}: {e}", path.display())
                    })?);
                let params = SessionParams {
                    n_ctx: session.params().n_ctx,
                    n_batch: self.batch_size,
                    n_threads: checked_threads(self.threads),
                    swa_full: true,
                    ..SessionParams::default()
                };
                let mut d = ggrs_llama::speculative::ModelDrafter::new(draft, params, &model)?;
                d.p_min = spec.draft_p_min;
                Box::new(d)
            }
        };
        session
            .set_speculation(Some(ggrs_llama::speculative::Speculation {
                params: ggrs_llama::speculative::SpecParams {
                    draft_max: spec.draft_max,
                    draft_min: spec.draft_min,
                    adaptive: true,
                },
                drafter,
            }))
            .map_err(|e| format!("--spec: {e}"))?;
        Ok(session)
    }

    /// As [`ModelArgs::session`]; `flags` names the options that set the context and batch
    /// sizes (`--chunk` for perplexity, `-p`/`-n`/`-d` for bench) in a memory error.
    pub fn session_for(
        &self,
        model: Arc<Model>,
        logits_all: bool,
        flags: &str,
    ) -> Result<Session, Box<dyn std::error::Error>> {
        self.session_params(model, logits_all, flags, 0)
    }

    /// As [`ModelArgs::session_for`], with room to verify `n_draft` drafted tokens a step
    /// ([`SessionParams::n_draft`]).
    fn session_params(
        &self,
        model: Arc<Model>,
        logits_all: bool,
        flags: &str,
        n_draft: usize,
    ) -> Result<Session, Box<dyn std::error::Error>> {
        if self.batch_size == 0 {
            return Err("-b (--batch-size) must be at least 1".into());
        }
        let n_threads = checked_threads(self.threads);
        let kv = self.kv_types()?;
        let train = model.hparams.n_ctx_train;
        if self.ctx_size > train {
            eprintln!(
                "warning: the context size {} is larger than the {} tokens the model was \
                 trained with: expect its output to degrade past {train} tokens",
                self.ctx_size, train
            );
        }
        Session::new(
            model,
            SessionParams {
                n_ctx: self.ctx_size,
                n_batch: self.batch_size,
                n_threads,
                logits_all,
                kv_type: kv.k,
                kv_type_v: Some(kv.v),
                swa_full: self.swa_full || n_draft > 0,
                n_draft,
                ..SessionParams::default()
            },
        )
        .map_err(|e| match e {
            ggrs_llama::LlamaError::SessionTooLarge { .. } => e
                .to_string()
                .replace(
                    "use a smaller context size or batch size",
                    &format!("lower {flags}"),
                )
                .into(),
            e => e.into(),
        })
    }
}

/// A `--reasoning` argument (llama-server's `on`, `off`, `auto`).
pub fn reasoning_arg(s: &str) -> Result<ggrs_llama::chat::reply::Reasoning, String> {
    ggrs_llama::chat::reply::Reasoning::parse(s).ok_or_else(|| "expected on, off or auto".into())
}

/// Which drafter `--spec` uses.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecKind {
    /// Prompt lookup: the continuation of the longest earlier match of the last tokens in
    /// the prompt and the output (no second model).
    Ngram,
    /// A draft model (-md FILE) with the same vocabulary.
    Draft,
}

/// Context shift options (llama.cpp's `--context-shift`, `--keep`).
#[derive(clap::Args, Debug, Clone)]
pub struct ShiftArgs {
    /// Go on generating past the end of the context: keep the first --keep prompt tokens,
    /// drop half of the tokens after them and move the rest down (their keys rotated
    /// again), as llama.cpp's --context-shift. Without it generation stops when the
    /// context is full. A prompt longer than the context is still an error.
    #[arg(long = "context-shift")]
    pub context_shift: bool,
    /// With --context-shift: prompt tokens kept at every shift (after BOS, which is always
    /// kept); -1: the whole prompt.
    #[arg(
        long = "keep",
        value_name = "N",
        default_value_t = 0,
        allow_hyphen_values = true,
        requires = "context_shift"
    )]
    pub keep: i32,
}

impl ShiftArgs {
    /// Sets the session's context shift as asked (a typed error where the model or the
    /// cache cannot move positions).
    pub fn apply(&self, session: &mut Session) -> Result<(), Box<dyn std::error::Error>> {
        if self.context_shift {
            session.set_context_shift(Some(self.keep))?;
        }
        Ok(())
    }
}

/// Speculative decoding options: faster, with the output of plain decoding (same tokens and
/// log-probabilities, greedy or seeded).
#[derive(clap::Args, Debug, Clone)]
pub struct SpecArgs {
    /// Speculative decoding: `ngram` (prompt lookup) or `draft` (a draft model, -md).
    /// The output is the same as without it, bit for bit.
    #[arg(long = "spec", value_enum, value_name = "ngram|draft")]
    pub spec: Option<SpecKind>,
    /// Draft model for --spec draft (implies it): a GGUF model with the target's
    /// vocabulary, usually much smaller. `-md` works too.
    #[arg(long = "model-draft", value_name = "FILE")]
    pub model_draft: Option<PathBuf>,
    /// Most tokens drafted per step (at most 63).
    #[arg(long = "draft-max", default_value_t = 16, value_name = "N")]
    pub draft_max: usize,
    /// Fewest drafted tokens worth a speculative step (a shorter draft is dropped).
    #[arg(long = "draft-min", default_value_t = 1, value_name = "N")]
    pub draft_min: usize,
    /// With a draft model: stop drafting at a token it gives less than this probability.
    #[arg(long = "draft-p-min", default_value_t = 0.75, value_name = "P")]
    pub draft_p_min: f32,
}

impl SpecArgs {
    /// The drafter asked for, if any (`-md` alone means `--spec draft`).
    pub fn kind(&self) -> Result<Option<SpecKind>, String> {
        match (self.spec, &self.model_draft) {
            (Some(SpecKind::Ngram), Some(_)) => {
                Err("-md (--model-draft) goes with --spec draft, not --spec ngram".into())
            }
            (None, Some(_)) => Ok(Some(SpecKind::Draft)),
            (k, _) => Ok(k),
        }
    }
}

/// llama.cpp's two-letter options as their long forms (clap's short options are one
/// letter): `-md FILE` as `--model-draft FILE`, `-ctk`/`-ctv TYPE` as
/// `--cache-type-k`/`--cache-type-v TYPE`.
pub fn rewrite_md(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    args.into_iter()
        .map(|a| match a.to_str() {
            Some("-md") => "--model-draft".into(),
            Some("-ctk") => "--cache-type-k".into(),
            Some("-ctv") => "--cache-type-v".into(),
            _ => a,
        })
        .collect()
}

/// A `--chat-template` argument: the text of the file it names, or the argument itself (a
/// built-in format's name or a Jinja template, which the library checks).
pub fn template_arg(t: &str) -> Result<String, String> {
    if std::path::Path::new(t).is_file() {
        std::fs::read_to_string(t).map_err(|e| format!("cannot read the chat template {t}: {e}"))
    } else {
        Ok(t.to_string())
    }
}

/// The chat format for `--chat-template ARG` on `model` ([`template_arg`], then
/// [`ChatTemplate::resolve`](ggrs_llama::ChatTemplate::resolve)).
pub fn resolve_template(
    model: &ggrs_llama::Model,
    arg: Option<&str>,
) -> Result<ggrs_llama::ChatTemplate, Box<dyn std::error::Error>> {
    let text = arg.map(template_arg).transpose()?;
    Ok(ggrs_llama::ChatTemplate::resolve(model, text.as_deref())?)
}

/// `-n N` (`--n-predict`): tokens to generate, -1 for no limit (until the context is full),
/// as llama.cpp reads it; other negative values are an error.
pub fn n_predict(n: i64) -> Result<usize, String> {
    match n {
        -1 => Ok(usize::MAX),
        n if n >= 0 => Ok(n as usize),
        n => Err(format!(
            "-n must be a number of tokens, or -1 for no limit, not {n}"
        )),
    }
}

/// The thread count to use for `-t N`: N, or the machine's logical cores (with a note) when
/// N is more than that; 0 stays 0 (one per physical core).
pub fn checked_threads(n: usize) -> usize {
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n > logical {
        eprintln!(
            "note: -t {n} is more than the {logical} logical cores of this machine: using {logical}"
        );
        logical
    } else {
        n
    }
}

/// Sampling options (llama.cpp's names and defaults).
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 or less: greedy).
    #[arg(long = "temp", default_value_t = 0.8, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Top-k (0: off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (1: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the penalties look back over.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Frequency penalty (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Presence penalty (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Random seed (-1: from the clock, as by default; printed with the timings).
    #[arg(short = 's', long, allow_negative_numbers = true)]
    pub seed: Option<i64>,
}

impl SamplingArgs {
    /// The sampling parameters (resolving the seed), or an error naming the option that is
    /// not finite or out of its range.
    pub fn params(&self) -> Result<SamplingParams, String> {
        let finite = |name: &str, v: f32| -> Result<(), String> {
            if v.is_finite() {
                Ok(())
            } else {
                Err(format!("{name} must be a finite number, not {v}"))
            }
        };
        finite("--temp", self.temperature)?;
        finite("--frequency-penalty", self.frequency_penalty)?;
        finite("--presence-penalty", self.presence_penalty)?;
        for (name, v) in [("--top-p", self.top_p), ("--min-p", self.min_p)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} must be in 0..=1, not {v}"));
            }
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return Err(format!(
                "--repeat-penalty must be a finite number > 0, not {}",
                self.repeat_penalty
            ));
        }
        let seed = match self.seed {
            Some(s) if s >= 0 => s as u64,
            Some(-1) | None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            Some(s) => {
                return Err(format!(
                    "--seed must be at least 0 (or -1: random), not {s}"
                ))
            }
        };
        Ok(SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            penalty_last_n: self.repeat_last_n,
            seed,
            logit_bias: Vec::new(),
        })
    }
}

/// The prompt: `-p TEXT` or `-f FILE`.
#[derive(clap::Args, Debug, Clone)]
pub struct PromptArgs {
    /// Prompt text.
    #[arg(short = 'p', long, conflicts_with = "file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
}

impl PromptArgs {
    /// The prompt text.
    pub fn text(&self) -> Result<String, String> {
        match (&self.prompt, &self.file) {
            (Some(p), _) => Ok(p.clone()),
            (None, Some(f)) => {
                std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))
            }
            (None, None) => Err("give a prompt with -p TEXT or -f FILE".into()),
        }
    }
}
