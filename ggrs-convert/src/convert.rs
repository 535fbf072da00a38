//! [`convert_hf_dir`]: reads `config.json`, picks the source architecture, plans the layout,
//! reads the tokenizer, and streams the tensors into the GGUF writer, reporting progress.

use std::path::Path;

use ggrs_core::gguf::{GgufWriter, Value};
use ggrs_core::DType;

use crate::arch::SourceArch;
use crate::error::ConvertError;
use crate::options::ConvertOptions;
use crate::safetensors::{self, Checkpoint, StDtype};
use crate::tensor_data::{out_dtype, write_tensor};
use crate::{layout, multimodal, vocab};

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
    let text_cfg = multimodal::text_config(&cfg)?;
    let is_multimodal = text_cfg.is_some();
    let cfg = text_cfg.unwrap_or(cfg);
    let arch = SourceArch::detect(&cfg)?;
    let mut ck = Checkpoint::open_dir(dir)?;
    let vision_tensors = if is_multimodal {
        ck.retain_renamed(multimodal::text_tensor_name)?
    } else {
        0
    };
    let name = opts.name.clone().unwrap_or_else(|| default_name(dir, &cfg));
    let conv = arch.converter();
    let layout = layout::build(
        arch.gguf_name(),
        |c, b| conv.plan(c, b),
        &cfg,
        (&ck, dir),
        &name,
    )?;
    layout::check(&layout, &ck)?;
    let mut notes = Vec::new();
    let mut note = |s: String, events: &mut dyn FnMut(ConvertEvent<'_>)| {
        events(ConvertEvent::Note(&s));
        notes.push(s);
    };
    if is_multimodal {
        note(
            format!(
                "a multimodal checkpoint: its text model is converted as {} and its \
                 {vision_tensors} vision tensors are left out (ggrs reads text only)",
                arch.source()
            ),
            &mut events,
        );
    }

    let rules = vocab::VocabRules {
        sentencepiece_pre: conv.sentencepiece_pre(),
        bpe_pre: conv.bpe_pre(),
        complete_sentencepiece: &|v, n, c| conv.complete_sentencepiece(v, n, c),
    };
    let vocab = vocab::load(dir, &rules, layout.n_vocab, &cfg)?;
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
        if p.shape.len() >= 2 && !p.keep_f32 && dtype != opts.outtype.dtype() {
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
        if let Some(values) = &p.values {
            let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
            sink.write_all(&bytes)?;
            done += info.size as u64;
            index += 1;
            return Ok(());
        }
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

/// The chat template: `chat_template` of `tokenizer_config.json` when it is a string, else
/// the `chat_template.jinja` file that newer Hugging Face releases keep beside it, else
/// `chat_template` of `chat_template.json` (a multimodal processor's).
fn chat_template(dir: &Path) -> Result<Option<String>, ConvertError> {
    let string_at = |file: &str| -> Result<Option<String>, ConvertError> {
        let p = dir.join(file);
        if !p.is_file() {
            return Ok(None);
        }
        Ok(safetensors::read_json(&p)?
            .get("chat_template")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string))
    };
    if let Some(t) = string_at("tokenizer_config.json")? {
        return Ok(Some(t));
    }
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja)
            .map(Some)
            .map_err(|e| ConvertError::Io {
                path: jinja,
                source: e,
            });
    }
    string_at("chat_template.json")
}
