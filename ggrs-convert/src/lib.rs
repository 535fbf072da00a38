//! Converting a Hugging Face checkpoint directory to a GGUF model file (`ggrs convert`).
//!
//! The directory holds `config.json` and the weights as `model.safetensors` or as shards
//! listed by `model.safetensors.index.json`, and optionally a tokenizer (`tokenizer.model`,
//! `tokenizer.json`, `tokenizer_config.json`). The architecture comes from `config.json`:
//!
//! | `architectures` | GGUF layout |
//! |---|---|
//! | `LlamaForCausalLM` | llama.cpp's `llama`, Q/K rows permuted as llama.cpp's converter does |
//! | `Qwen2ForCausalLM` | llama.cpp's `qwen2` |
//! | `ChatGLMModel` without `position_encoding_2d` (ChatGLM2/3) | llama.cpp's `chatglm` |
//! | `ChatGLMModel` with `position_encoding_2d` (ChatGLM-6B v1) | `chatglm1`, documented in `docs/gguf-chatglm1.md` |
//!
//! Tensors are streamed: the checkpoint is memory-mapped, and each tensor is converted in
//! pieces of a few MB straight into the output, so memory stays bounded by the vocabulary
//! and one piece, not the model. 1-D tensors (norms, biases) are always written as F32;
//! matrices get the output type (for q8_0/q4_0 a matrix whose rows are not a whole number of
//! 32-value blocks falls back to F16, as llama.cpp's converter does).
//!
//! ```no_run
//! use ggrs_convert::{convert_hf_dir, ConvertOptions, OutType};
//! # fn main() -> Result<(), ggrs_convert::ConvertError> {
//! let opts = ConvertOptions { outtype: OutType::F32, ..Default::default() };
//! let report = convert_hf_dir("chatglm6b-v1/tiny_model".as_ref(), "tiny.gguf".as_ref(), &opts)?;
//! eprintln!("{} tensors as {}", report.n_tensors, report.arch.gguf_name());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod error;
mod layout;
pub mod safetensors;
mod vocab;

use std::io::Write;
use std::path::Path;

use ggrs_core::gguf::{GgufWriter, Value};
use ggrs_core::types::traits;
use ggrs_core::DType;

pub use error::ConvertError;
use layout::Planned;
pub use layout::{SourceArch, Transform};
use safetensors::{Checkpoint, StDtype};

/// The type matrices are written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutType {
    /// 32-bit float (exact for every source type).
    F32,
    /// 16-bit float (llama.cpp's default).
    #[default]
    F16,
    /// bfloat16.
    BF16,
    /// 8-bit blocks of 32 (llama.cpp's Q8_0).
    Q8_0,
    /// 4-bit blocks of 32 (llama.cpp's Q4_0).
    Q4_0,
}

impl OutType {
    /// The GGUF tensor type of the matrices.
    pub fn dtype(self) -> DType {
        match self {
            OutType::F32 => DType::F32,
            OutType::F16 => DType::F16,
            OutType::BF16 => DType::BF16,
            OutType::Q8_0 => DType::Q8_0,
            OutType::Q4_0 => DType::Q4_0,
        }
    }

    /// The name `--outtype` takes (`f32`, `f16`, `bf16`, `q8_0`, `q4_0`).
    pub fn name(self) -> &'static str {
        match self {
            OutType::F32 => "f32",
            OutType::F16 => "f16",
            OutType::BF16 => "bf16",
            OutType::Q8_0 => "q8_0",
            OutType::Q4_0 => "q4_0",
        }
    }

    /// llama.cpp's `general.file_type` for a file whose matrices are of this type.
    pub fn file_type(self) -> u32 {
        match self {
            OutType::F32 => 0,
            OutType::F16 => 1,
            OutType::Q4_0 => 2,
            OutType::Q8_0 => 7,
            OutType::BF16 => 32,
        }
    }
}

impl std::str::FromStr for OutType {
    type Err = ConvertError;

    fn from_str(s: &str) -> Result<OutType, ConvertError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "f32" => OutType::F32,
            "f16" => OutType::F16,
            "bf16" => OutType::BF16,
            "q8_0" => OutType::Q8_0,
            "q4_0" => OutType::Q4_0,
            _ => return Err(ConvertError::OutType(s.to_string())),
        })
    }
}

/// How to convert.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// Type of the matrices.
    pub outtype: OutType,
    /// Threads converting rows (0: all available).
    pub n_threads: usize,
    /// `general.name`; by default the last part of `_name_or_path` in `config.json`, else
    /// the directory's name.
    pub name: Option<String>,
}

/// Progress of one written tensor.
#[derive(Debug, Clone)]
pub struct TensorProgress<'a> {
    /// 0-based index of the tensor just written.
    pub index: usize,
    /// Tensors in the output.
    pub total: usize,
    /// Its checkpoint name.
    pub hf_name: &'a str,
    /// Its GGUF name.
    pub gguf_name: &'a str,
    /// Type it was written as.
    pub dtype: DType,
    /// Bytes of tensor data written so far.
    pub bytes_done: u64,
    /// Bytes of tensor data in the output.
    pub bytes_total: u64,
}

/// What the converter reports while it runs.
#[derive(Debug, Clone)]
pub enum ConvertEvent<'a> {
    /// Something the user should know (no tokenizer, a type fallback…).
    Note(&'a str),
    /// A tensor was written.
    Tensor(TensorProgress<'a>),
}

/// Summary of a conversion.
#[derive(Debug, Clone)]
pub struct ConvertReport {
    /// The architecture converted.
    pub arch: SourceArch,
    /// Tensors written.
    pub n_tensors: usize,
    /// Bytes of tensor data written.
    pub bytes_written: u64,
    /// `tokenizer.ggml.model` written (`llama`, `gpt2`), or `None` without a tokenizer.
    pub tokenizer: Option<String>,
    /// The notes also sent as [`ConvertEvent::Note`].
    pub notes: Vec<String>,
}

/// Converts the Hugging Face checkpoint in `dir` to a GGUF file at `out`.
pub fn convert_hf_dir(
    dir: &Path,
    out: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport, ConvertError> {
    convert_hf_dir_with(dir, out, opts, |_| {})
}

/// [`convert_hf_dir`], calling `events` with notes and after each tensor.
pub fn convert_hf_dir_with(
    dir: &Path,
    out: &Path,
    opts: &ConvertOptions,
    mut events: impl FnMut(ConvertEvent<'_>),
) -> Result<ConvertReport, ConvertError> {
    let cfg_path = dir.join("config.json");
    if !cfg_path.is_file() {
        return Err(ConvertError::NoConfig {
            dir: dir.to_path_buf(),
        });
    }
    let cfg = safetensors::read_json(&cfg_path)?;
    let arch = SourceArch::detect(&cfg)?;
    let ck = Checkpoint::open_dir(dir)?;
    let name = opts.name.clone().unwrap_or_else(|| default_name(dir, &cfg));
    let layout = layout::build(arch, &cfg, &ck, &name)?;
    layout::check(&layout, &ck)?;
    let mut notes = Vec::new();
    let mut note = |s: String, events: &mut dyn FnMut(ConvertEvent<'_>)| {
        events(ConvertEvent::Note(&s));
        notes.push(s);
    };

    let vocab = vocab::load(dir, arch, layout.n_vocab, &cfg)?;
    for n in vocab.iter().flat_map(|v| v.notes.clone()) {
        note(n, &mut events);
    }
    if vocab.is_none() {
        note(
            format!(
                "{} has no tokenizer (tokenizer.model or tokenizer.json): the GGUF has no \
                 tokenizer.ggml vocabulary (only the special token ids config.json gives)",
                dir.display()
            ),
            &mut events,
        );
    }
    let specials = vocab::specials(dir, &cfg, vocab.as_ref())?;

    let mut w = GgufWriter::new();
    for (k, v) in layout
        .metadata
        .iter()
        .filter(|(k, _)| !k.starts_with("tokenizer."))
    {
        w.add_kv(k.clone(), v.clone())?;
    }
    w.add_kv("general.file_type", Value::U32(opts.outtype.file_type()))?;
    if opts.outtype.dtype().is_quantized() {
        w.add_kv("general.quantization_version", Value::U32(2))?;
    }
    for (k, v) in layout
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
    {
        w.add_kv(k.clone(), v.clone())?;
    }
    if let Some(v) = &vocab {
        for (k, val) in vocab::vocab_metadata(v) {
            w.add_kv(k, val)?;
        }
    }
    for (k, val) in vocab::special_metadata(&specials) {
        w.set_kv(k, val)?;
    }
    if let Some(t) = chat_template(dir)? {
        w.add_kv("tokenizer.chat_template", Value::String(t))?;
    }

    // Tensor infos: GGUF shapes are the checkpoint's reversed (innermost first).
    let mut fallbacks = Vec::new();
    for p in &layout.tensors {
        let ne: Vec<usize> = p.shape.iter().rev().copied().collect();
        let dtype = out_dtype(p, opts.outtype);
        if p.shape.len() >= 2 && dtype != opts.outtype.dtype() {
            fallbacks.push(p.gguf_name.clone());
        }
        w.add_tensor_info(p.gguf_name.clone(), dtype, &ne)?;
    }
    if !fallbacks.is_empty() {
        note(
            format!(
                "{} matrices have rows that are not whole {}-value blocks and are written as \
                 f16 instead of {}: {}",
                fallbacks.len(),
                opts.outtype.dtype().block_size(),
                opts.outtype.name(),
                fallbacks.join(", ")
            ),
            &mut events,
        );
    }

    let n_threads = match opts.n_threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let total: u64 = w.tensors().iter().map(|t| t.size as u64).sum();
    let n_tensors = layout.tensors.len();
    let mut done = 0u64;
    let mut index = 0usize;
    // Every file of the checkpoint directory is an input: the output may be a new file in
    // it, never one of them.
    w.protect(ggrs_core::outfile::Protected::dir_entries(dir));
    w.write_to_path(out, |info, sink| {
        let p = &layout.tensors[index];
        // `check` made sure every planned tensor exists with a float type and its shape.
        let t = ck.get(&p.hf_name).ok_or_else(|| {
            std::io::Error::other(format!(
                "tensor `{}` vanished from the checkpoint",
                p.hf_name
            ))
        })?;
        let StDtype::Float(src_dtype) = t.dtype else {
            return Err(std::io::Error::other(format!(
                "tensor `{}` is not a float tensor",
                p.hf_name
            )));
        };
        write_tensor(
            ck.data(t),
            src_dtype,
            &p.shape,
            p.transform,
            info.dtype,
            n_threads,
            sink,
        )?;
        done += info.size as u64;
        events(ConvertEvent::Tensor(TensorProgress {
            index,
            total: n_tensors,
            hf_name: &p.hf_name,
            gguf_name: &p.gguf_name,
            dtype: info.dtype,
            bytes_done: done,
            bytes_total: total,
        }));
        index += 1;
        Ok(())
    })?;
    Ok(ConvertReport {
        arch,
        n_tensors,
        bytes_written: total,
        tokenizer: vocab.map(|v| v.model),
        notes,
    })
}

/// `general.name`: the last part of `_name_or_path`, else the directory's name.
fn default_name(dir: &Path, cfg: &serde_json::Value) -> String {
    let from_cfg = cfg
        .get("_name_or_path")
        .and_then(serde_json::Value::as_str)
        .map(|s| s.trim_end_matches('/'))
        .and_then(|s| s.rsplit('/').next())
        .filter(|s| !s.is_empty());
    if let Some(n) = from_cfg {
        return n.to_string();
    }
    let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    canon
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

/// `chat_template` of `tokenizer_config.json`, when it is a string.
fn chat_template(dir: &Path) -> Result<Option<String>, ConvertError> {
    let p = dir.join("tokenizer_config.json");
    if !p.is_file() {
        return Ok(None);
    }
    let tc = safetensors::read_json(&p)?;
    Ok(tc
        .get("chat_template")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string))
}

/// The type tensor `p` is written as: F32 for 1-D tensors, else the output type, or F16
/// when its rows are not whole blocks of a block type.
fn out_dtype(p: &Planned, outtype: OutType) -> DType {
    if p.shape.len() < 2 {
        return DType::F32;
    }
    let to = outtype.dtype();
    let ne0 = p.shape.last().copied().unwrap_or(0);
    if ne0 % to.block_size() != 0 {
        DType::F16
    } else {
        to
    }
}

/// The checkpoint row that output row `r` comes from.
fn source_row(r: usize, rows: usize, transform: Transform) -> usize {
    match transform {
        Transform::None => r,
        Transform::RopePermute { n_head } => {
            let d = rows / n_head;
            let (h, w) = (r / d, r % d);
            h * d + (w % 2) * (d / 2) + w / 2
        }
    }
}

/// Writes one tensor: rows of `src` (type `from`, checkpoint shape `shape`), reordered by
/// `transform` and converted to `to`, in pieces of a few MB spread over `n_threads`.
fn write_tensor(
    src: &[u8],
    from: DType,
    shape: &[usize],
    transform: Transform,
    to: DType,
    n_threads: usize,
    sink: &mut dyn Write,
) -> std::io::Result<()> {
    let numel: usize = shape.iter().product();
    // A 1-D tensor under a row permutation (a Q/K bias) is a column of one-value rows.
    let ne0 = match (shape.len(), transform) {
        (1, Transform::RopePermute { .. }) => 1,
        _ => shape.last().copied().unwrap_or(1),
    };
    let rows = numel.checked_div(ne0).unwrap_or(0);
    if from == to && transform == Transform::None {
        return sink.write_all(src);
    }
    if let Transform::RopePermute { n_head } = transform {
        if n_head == 0 || rows % (2 * n_head) != 0 {
            return Err(std::io::Error::other(format!(
                "{rows} rows do not split into {n_head} heads of an even number of rows"
            )));
        }
    }
    let in_row = from.row_size(ne0);
    let out_row = to.row_size(ne0);
    let (Some(to_f32), Some(from_f32)) = (traits(from).to_f32, traits(to).from_f32) else {
        return Err(std::io::Error::other(format!(
            "no conversion from {} to {}",
            from.name(),
            to.name()
        )));
    };
    let rows_per_piece = ((4 << 20) / out_row.max(1)).clamp(1, rows.max(1));
    let mut out = vec![0u8; rows_per_piece * out_row];
    let mut r0 = 0;
    while r0 < rows {
        let n = rows_per_piece.min(rows - r0);
        let piece = &mut out[..n * out_row];
        let per_thread = n.div_ceil(n_threads.max(1));
        let fill = |first: usize, dst: &mut [u8]| {
            let mut tmp = vec![0f32; ne0];
            for (k, d) in dst.chunks_mut(out_row).enumerate() {
                let s = source_row(first + k, rows, transform);
                let row = &src[s * in_row..(s + 1) * in_row];
                if from == to {
                    d.copy_from_slice(row);
                } else {
                    to_f32(row, &mut tmp);
                    from_f32(&tmp, d);
                }
            }
        };
        if n_threads <= 1 || n * ne0 < (1 << 16) {
            fill(r0, piece);
        } else {
            std::thread::scope(|s| {
                for (i, dst) in piece.chunks_mut(per_thread * out_row).enumerate() {
                    let fill = &fill;
                    s.spawn(move || fill(r0 + i * per_thread, dst));
                }
            });
        }
        sink.write_all(piece)?;
        r0 += n;
    }
    Ok(())
}
