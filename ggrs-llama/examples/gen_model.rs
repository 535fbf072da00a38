//! Writes a random-weight GGUF model of realistic width for one of the architectures of the
//! tiny reference models (`shared/reference/tiny/`), for speed comparisons with llama.cpp.
//!
//! The tiny file gives everything but the numbers: its metadata (tokenizer and every key) is
//! copied with the shape keys scaled, and its tensor table (names, types, which tensors a
//! layer has) is repeated for every layer with new shapes. Values are seeded Gaussian noise
//! with the tiny tensor's statistics: norm weights and biases keep the tiny tensor's mean and
//! spread (Gemma's norms stay stored +1, the final norm stays ≈3), embeddings keep their
//! spread, and every other matrix has its spread scaled by √(tiny fan-in / new fan-in) so that
//! activations keep the tiny model's size and the logits stay finite. Llama-3.1's
//! `rope_freqs` follow the `llama3` recipe (factor 8, low/high frequency factors 1 and 4,
//! original context 8192).
//!
//! Shapes: `embedding_length` = width, `block_count` = layers, `feed_forward_length` ≈
//! 2.75·width (a multiple of 256; of 32 below 512), head_dim 64 (128 for the families that
//! state it with `attention.key_length`: qwen3, qwen3moe, gemma2), as many heads as keep the
//! tiny model's ratio of Q width to width and its heads per KV head (the nearest count that
//! divides the width, which ggrs requires), `expert_feed_forward_length` in the tiny model's
//! ratio to `feed_forward_length` (expert count and experts used as in the tiny model),
//! `context_length` 4096. Gemma 2's sliding window becomes its real 4096 (the tiny model's 8
//! is a test device); Phi-3's `rope.scaling.original_context_length` follows the context.
//!
//! Hybrids (LFM2, Granite-4.0-H, Qwen3.5 and its MoE) repeat the tiny model's pattern of
//! recurrent and attention layers (new layer `l` is tiny layer `l mod n`; per-layer keys
//! likewise). LFM2's short convolution keeps its kernel; Granite-H's Mamba-2 gets Granite's
//! proportions (inner 2·width, heads of 64, state 128, one group); Qwen3.5's delta-net heads
//! of 128 (value heads = width / 128, the tiny model's value heads per key head); its
//! `rope.dimension_sections` split the rotated pairs in three. An SSM's `A` is drawn negative.
//!
//! usage: cargo run --release -p ggrs-llama --example gen_model -- --arch ARCH --out FILE
//!        [--width 1024] [--layers 8] [--seed 1] [--head-dim N] [--context 4096]
//!        [--tiny FILE]
//!   ARCH: llama (Llama 3.1 rotary), qwen2 (from the tiny qwen3: its vocabulary and layout,
//!   Q/K/V biases instead of Q/K norms), qwen3, gemma2, phi3, qwen3moe, chatglm, and the
//!   hybrids lfm2, granitehybrid, qwen35, qwen35moe.
//!   The tiny file is found in `$GGRS_REFERENCE_DIR/tiny` or `shared/reference/tiny` above
//!   this crate unless `--tiny` names it. Quantize the result with
//!   `target/release/ggrs quantize FILE OUT q4_0`.

use std::f64::consts::PI;
use std::io::Write;
use std::path::{Path, PathBuf};

use ggrs_core::gguf::{GgufError, GgufFile, GgufWriter, TensorInfo, Value};
use ggrs_core::DType;

/// The architectures this generator makes, each with the tiny reference file it starts from
/// (qwen2 has none of its own: it is derived from the tiny Qwen3, see [`derive`]).
pub const ARCHS: [(&str, &str); 11] = [
    ("llama", "tiny-llama3-f16.gguf"),
    ("qwen2", "tiny-qwen3-f16.gguf"),
    ("qwen3", "tiny-qwen3-f16.gguf"),
    ("gemma2", "tiny-gemma2-f16.gguf"),
    ("phi3", "tiny-phi3-f16.gguf"),
    ("qwen3moe", "tiny-moe-f16.gguf"),
    ("chatglm", "tiny-chatglm-f16.gguf"),
    ("lfm2", "tiny-lfm2-f16.gguf"),
    ("granitehybrid", "tiny-granite-hybrid-f16.gguf"),
    ("qwen35", "tiny-qwen35-f16.gguf"),
    ("qwen35moe", "tiny-qwen35moe-f16.gguf"),
];

/// What went wrong while generating a model.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// Reading the tiny file or writing the output failed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The tiny file lacks something the generator needs.
    #[error("{path}: {detail}")]
    BadSource {
        /// The tiny file.
        path: PathBuf,
        /// What is missing or unexpected.
        detail: String,
    },
    /// The requested shape cannot be built for this architecture.
    #[error("bad shape: {0}")]
    BadShape(String),
}

/// The shape and seed of the model to generate.
#[derive(Debug, Clone)]
pub struct GenOptions {
    /// `embedding_length`.
    pub width: usize,
    /// `block_count`.
    pub layers: usize,
    /// Head dimension; `None`: 128 for families with `attention.key_length`, else 64.
    pub head_dim: Option<usize>,
    /// `context_length` (and Phi-3's `rope.scaling.original_context_length`).
    pub context: usize,
    /// Seed of the random values.
    pub seed: u64,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            width: 1024,
            layers: 8,
            head_dim: None,
            context: 4096,
            seed: 1,
        }
    }
}

/// The shape a generated model got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenShape {
    /// `general.architecture`.
    pub arch: String,
    /// Width.
    pub width: usize,
    /// Layers.
    pub layers: usize,
    /// Query heads.
    pub n_head: usize,
    /// KV heads.
    pub n_head_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// `feed_forward_length`.
    pub n_ff: usize,
    /// `expert_feed_forward_length` (MoE only).
    pub n_ff_exp: Option<usize>,
    /// Tensors written.
    pub n_tensors: usize,
}

/// The tiny file of `arch` in `dir`, if `arch` is one this generator knows.
pub fn tiny_file(dir: &Path, arch: &str) -> Option<PathBuf> {
    ARCHS
        .iter()
        .find(|(a, _)| *a == arch)
        .map(|(_, f)| dir.join(f))
}

/// `shared/reference/tiny`: under `$GGRS_REFERENCE_DIR` when set, else the first
/// `shared/reference` found going up from this crate.
pub fn default_tiny_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GGRS_REFERENCE_DIR") {
        return PathBuf::from(d).join("tiny");
    }
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .map(|d| d.join("shared/reference/tiny"))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| here.join("../../shared/reference/tiny"))
}

/// Rounds `x` to the nearest multiple of 256 (of 32 below 512), at least that multiple.
fn round_dim(x: f64) -> usize {
    let m = if x >= 512.0 { 256.0 } else { 32.0 };
    ((x / m).round().max(1.0) * m) as usize
}

/// A tiny tensor and its values' mean and standard deviation.
type SourceTensor = (TensorInfo, (f64, f64));

/// What the generator takes from a tiny file: its metadata, and its tensor table with each
/// tensor's mean and standard deviation.
struct Source {
    path: PathBuf,
    arch: String,
    metadata: Vec<(String, Value)>,
    tensors: Vec<SourceTensor>,
}

impl Source {
    fn read(path: &Path) -> Result<Source, GenError> {
        let file = GgufFile::open(path)?;
        let mut src = Source {
            path: path.to_path_buf(),
            arch: String::new(),
            metadata: file.metadata().to_vec(),
            tensors: Vec::with_capacity(file.tensors().len()),
        };
        src.arch = src
            .get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| src.bad("no general.architecture".into()))?
            .to_owned();
        for t in file.tensors() {
            let st = stats(&file, t).map_err(|d| src.bad(d))?;
            src.tensors.push((t.clone(), st));
        }
        Ok(src)
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn bad(&self, detail: String) -> GenError {
        GenError::BadSource {
            path: self.path.clone(),
            detail,
        }
    }
}

/// Turns `src` into a source of architecture `arch`: nothing to do if it is one already;
/// qwen2 from a qwen3 file (the same vocabulary and layout, less the explicit head size and
/// the Q/K norms, plus Q/K/V biases).
fn derive(src: &mut Source, arch: &str) -> Result<(), GenError> {
    if src.arch == arch {
        return Ok(());
    }
    if (src.arch.as_str(), arch) != ("qwen3", "qwen2") {
        return Err(src.bad(format!(
            "cannot make a `{arch}` model from a `{}` file",
            src.arch
        )));
    }
    let old = format!("{}.", src.arch);
    src.metadata.retain(|(k, _)| {
        !(k.ends_with(".attention.key_length") || k.ends_with(".attention.value_length"))
    });
    for (k, v) in &mut src.metadata {
        if let Some(rest) = k.strip_prefix(&old) {
            *k = format!("{arch}.{rest}");
        } else if k == "general.architecture" {
            *v = Value::String(arch.to_owned());
        }
    }
    let tensors = std::mem::take(&mut src.tensors);
    for (t, st) in tensors {
        if t.name.ends_with(".attn_q_norm.weight") || t.name.ends_with(".attn_k_norm.weight") {
            continue;
        }
        let bias = ["attn_q", "attn_k", "attn_v"]
            .iter()
            .find(|m| t.name.ends_with(&format!(".{m}.weight")))
            .map(|_| TensorInfo {
                name: t.name.replace(".weight", ".bias"),
                dtype: DType::F32,
                ne: [t.ne[1], 1, 1, 1],
                n_dims: 1,
                offset: 0,
                size: 0,
            });
        src.tensors.push((t, st));
        if let Some(b) = bias {
            src.tensors.push((b, (0.0, 0.02)));
        }
    }
    src.arch = arch.to_owned();
    Ok(())
}

/// The tiny file's hyperparameters and the new ones derived from them.
struct Plan {
    arch: String,
    tiny_width: usize,
    tiny_ff: usize,
    tiny_layers: usize,
    /// The tiny model's Q projection width (heads × head_dim).
    tiny_q: usize,
    /// The tiny model's head_dim.
    tiny_hd: usize,
    new: GenShape,
    rope_dim: usize,
    /// `expert_shared_feed_forward_length` (Qwen3.5-MoE's shared expert).
    n_ff_shexp: Option<usize>,
    /// The recurrent mixer's sizes (hybrids only).
    ssm: Option<Ssm>,
}

/// The `ssm.*` sizes of a hybrid: Mamba-2 (Granite-H) or gated delta-net (Qwen3.5).
#[derive(Debug, Clone, Copy)]
struct Ssm {
    /// `ssm.inner_size`.
    inner: usize,
    /// `ssm.state_size`.
    state: usize,
    /// `ssm.group_count` (B/C groups; delta-net key heads).
    groups: usize,
    /// `ssm.time_step_rank` (Mamba-2 heads; delta-net value heads).
    heads: usize,
}

/// The recurrent sizes at width `d`, in the real models' proportions: Granite-4.0-H's Mamba-2
/// (inner 2·width, heads of 64, state 128, one group); Qwen3.5's delta-net (key and value
/// heads of 128, inner = width, the tiny model's value heads per key head).
fn ssm_plan(src: &Source, arch: &str, d: usize) -> Result<Option<Ssm>, GenError> {
    let num = |k: &str| {
        src.get(&format!("{arch}.ssm.{k}"))
            .and_then(Value::as_u64)
            .map(|v| v as usize)
    };
    let (Some(groups0), Some(heads0)) = (num("group_count"), num("time_step_rank")) else {
        return Ok(None);
    };
    let ssm = match arch {
        "granitehybrid" => Ssm {
            inner: 2 * d,
            state: 128,
            groups: 1,
            heads: 2 * d / 64,
        },
        _ => {
            let per_group = (heads0 / groups0.max(1)).max(1);
            let heads = (d / 128).max(per_group);
            Ssm {
                inner: heads * 128,
                state: 128,
                groups: (heads / per_group).max(1),
                heads,
            }
        }
    };
    if !d.is_multiple_of(128) {
        return Err(GenError::BadShape(format!(
            "{arch}: width {d} must be a multiple of 128 (the recurrent heads' width)"
        )));
    }
    Ok(Some(ssm))
}

fn plan(src: &Source, o: &GenOptions) -> Result<Plan, GenError> {
    let bad = |detail: String| src.bad(detail);
    let arch = src.arch.clone();
    let num = |k: &str| {
        src.get(&format!("{arch}.{k}"))
            .and_then(Value::as_u64)
            .map(|v| v as usize)
    };
    let need = |k: &str| num(k).ok_or_else(|| bad(format!("no integer key {arch}.{k}")));
    // Hybrids give `head_count_kv` per layer (0 for a recurrent layer): the attention
    // layers' count.
    let kv_array = src
        .get(&format!("{arch}.attention.head_count_kv"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).max().unwrap_or(0) as usize);
    let (d0, ff0, h0, n0) = (
        need("embedding_length")?,
        need("feed_forward_length")?,
        need("attention.head_count")?,
        need("block_count")?,
    );
    let hkv0 = match kv_array {
        Some(n) => n,
        None => need("attention.head_count_kv")?,
    };
    if h0 == 0 || hkv0 == 0 || !h0.is_multiple_of(hkv0) || d0 == 0 || ff0 == 0 {
        return Err(bad(format!(
            "{h0} heads over {hkv0} KV heads, width {d0}, feed-forward {ff0}"
        )));
    }
    let explicit_hd = num("attention.key_length");
    let hd0 = explicit_hd.unwrap_or(d0 / h0);
    let d = o.width;
    let hd = o
        .head_dim
        .unwrap_or(if explicit_hd.is_some() { 128 } else { 64 });
    if d == 0 || hd == 0 || !d.is_multiple_of(32) || !hd.is_multiple_of(2) || o.layers == 0 {
        return Err(GenError::BadShape(format!(
            "width {d} (a multiple of 32), head_dim {hd} (even) and layers {} must be positive",
            o.layers
        )));
    }
    // Keep the tiny model's Q width / width and heads per KV head.
    let group = h0 / hkv0;
    let q_ratio = (h0 * hd0) as f64 / d0 as f64;
    let wanted = ((q_ratio * d as f64 / (hd * group) as f64).round() as usize).max(1);
    // ggrs takes only head counts that divide the width: the nearest such count of groups.
    let n_head = (0..wanted)
        .flat_map(|k| [wanted - k, wanted + k + 1])
        .map(|g| g * group)
        .find(|h| d.is_multiple_of(*h))
        .unwrap_or(group);
    if explicit_hd.is_none() && n_head * hd != d {
        return Err(GenError::BadShape(format!(
            "{arch} takes head_dim = width / heads: width {d} must be a multiple of \
             head_dim {hd} × {group} (the heads per KV head)"
        )));
    }
    let n_ff = round_dim(d as f64 * 2.75);
    let n_ff_exp =
        num("expert_feed_forward_length").map(|e0| round_dim(n_ff as f64 * e0 as f64 / ff0 as f64));
    let n_ff_shexp = num("expert_shared_feed_forward_length")
        .map(|e0| round_dim(n_ff as f64 * e0 as f64 / ff0 as f64));
    let ssm = ssm_plan(src, &arch, d)?;
    // A rotary part narrower than the head (ChatGLM: half of it) keeps its share.
    let rope_dim = num("rope.dimension_count").map_or(hd, |r0| r0 * hd / hd0);
    Ok(Plan {
        new: GenShape {
            arch: arch.clone(),
            width: d,
            layers: o.layers,
            n_head,
            n_head_kv: n_head / group,
            head_dim: hd,
            n_ff,
            n_ff_exp,
            n_tensors: 0,
        },
        arch,
        tiny_width: d0,
        tiny_ff: ff0,
        tiny_layers: n0,
        tiny_q: h0 * hd0,
        tiny_hd: hd0,
        rope_dim,
        n_ff_shexp,
        ssm,
    })
}

/// The tiny file's metadata with the shape keys set to the plan's.
fn metadata(src: &Source, p: &Plan, o: &GenOptions) -> Vec<(String, Value)> {
    let s = &p.new;
    let u32v = |n: usize| Value::U32(n as u32);
    let key = |k: &str| format!("{}.{k}", p.arch);
    let shaped: Vec<(String, Value)> = [
        ("context_length", u32v(o.context)),
        ("embedding_length", u32v(s.width)),
        ("block_count", u32v(s.layers)),
        ("feed_forward_length", u32v(s.n_ff)),
        ("attention.head_count", u32v(s.n_head)),
        ("attention.head_count_kv", u32v(s.n_head_kv)),
        ("attention.key_length", u32v(s.head_dim)),
        ("attention.value_length", u32v(s.head_dim)),
        ("rope.dimension_count", u32v(p.rope_dim)),
        ("expert_feed_forward_length", u32v(s.n_ff_exp.unwrap_or(0))),
        (
            "expert_shared_feed_forward_length",
            u32v(p.n_ff_shexp.unwrap_or(0)),
        ),
        ("ssm.inner_size", u32v(p.ssm.map_or(0, |m| m.inner))),
        ("ssm.state_size", u32v(p.ssm.map_or(0, |m| m.state))),
        ("ssm.group_count", u32v(p.ssm.map_or(0, |m| m.groups))),
        ("ssm.time_step_rank", u32v(p.ssm.map_or(0, |m| m.heads))),
        // IMROPE's sections: the rotated pairs split over three sections as evenly as
        // possible (Qwen3.5's own [11, 11, 10, 0] for 64 rotated dimensions).
        (
            "rope.dimension_sections",
            Value::Array(
                (0..4)
                    .map(|i| {
                        let pairs = p.rope_dim / 2;
                        let n = if i < 3 {
                            pairs / 3 + usize::from(i < pairs % 3)
                        } else {
                            0
                        };
                        Value::I32(n as i32)
                    })
                    .collect(),
            ),
        ),
        ("rope.scaling.original_context_length", u32v(o.context)),
        // The tiny Gemma 2's window of 8 tokens is a test device: Gemma 2's own is 4096.
        ("attention.sliding_window", u32v(4096)),
    ]
    .into_iter()
    .map(|(k, v)| (key(k), v))
    .collect();
    // Per-layer arrays (hybrids' `head_count_kv`, Qwen3.5's `recurrent_layers`) repeat the
    // tiny model's layer pattern, as the tensors do (see [`plan_tensors`]).
    let per_layer = |k: &str, v: &Value| -> Option<Value> {
        let a = v.as_array().filter(|a| a.len() == p.tiny_layers)?;
        let kv = k.ends_with(".attention.head_count_kv");
        if !kv && !k.ends_with(".attention.recurrent_layers") {
            return None;
        }
        Some(Value::Array(
            (0..s.layers)
                .map(|l| match &a[l % p.tiny_layers] {
                    x if kv && x.as_u64().is_some_and(|n| n > 0) => match x {
                        Value::I32(_) => Value::I32(s.n_head_kv as i32),
                        _ => u32v(s.n_head_kv),
                    },
                    x => x.clone(),
                })
                .collect(),
        ))
    };
    // Granite's attention multiplier is 1/head_dim-like: it keeps the logits' size.
    src.metadata
        .iter()
        .map(|(k, v)| {
            if let Some(a) = per_layer(k, v) {
                return (k.clone(), a);
            }
            if k == &key("attention.scale") {
                let scale = v.as_f32().unwrap_or(1.0) as f64 * p.tiny_hd as f64 / s.head_dim as f64;
                return (k.clone(), Value::F32(scale as f32));
            }
            let keep_window =
                k.ends_with(".attention.sliding_window") && v.as_u64().is_some_and(|w| w >= 1024);
            match shaped.iter().find(|(sk, _)| sk == k) {
                Some((_, nv)) if !keep_window => (k.clone(), nv.clone()),
                _ if k == "general.name" => (
                    k.clone(),
                    Value::String(format!(
                        "{}-w{}-l{}",
                        v.as_str().unwrap_or("gen"),
                        s.width,
                        s.layers
                    )),
                ),
                _ => (k.clone(), v.clone()),
            }
        })
        .collect()
}

/// The new shape of a tiny tensor (`role`: its name without `blk.N.`).
fn new_shape(p: &Plan, role: &str, t: &TensorInfo) -> Result<Vec<usize>, String> {
    let s = &p.new;
    let (d, hd) = (s.width, s.head_dim);
    let (q, kv) = (s.n_head * hd, s.n_head_kv * hd);
    let fused_ff = |ne1: usize| ne1 / p.tiny_ff * s.n_ff;
    let expert_ff = s.n_ff_exp.unwrap_or(0);
    let n_expert = t.ne[2];
    if let Some(shape) = hybrid_shape(p, role, t) {
        return Ok(shape);
    }
    Ok(match role {
        "token_embd.weight" | "output.weight" => vec![d, t.ne[1]],
        "rope_freqs.weight" => vec![p.rope_dim / 2],
        "attn_q_norm.weight" | "attn_k_norm.weight" => vec![hd],
        r if r.ends_with("norm.weight") && t.ne[0] == p.tiny_width => vec![d],
        // Qwen3.5's full attention projects Q and its output gate together.
        "attn_q.weight" if p.arch.starts_with("qwen35") && t.ne[1] == 2 * p.tiny_q => {
            vec![d, 2 * q]
        }
        "attn_q.weight" => vec![d, q],
        "attn_k.weight" | "attn_v.weight" => vec![d, kv],
        "attn_q.bias" => vec![q],
        "attn_k.bias" | "attn_v.bias" => vec![kv],
        "attn_qkv.weight" => vec![d, q + 2 * kv],
        "attn_qkv.bias" => vec![q + 2 * kv],
        "attn_output.weight" => vec![q, d],
        // Phi-3 and ChatGLM fuse gate and up into one `ffn_up` twice as wide.
        "ffn_gate.weight" | "ffn_up.weight" if t.ne[1].is_multiple_of(p.tiny_ff) => {
            vec![d, fused_ff(t.ne[1])]
        }
        "ffn_down.weight" => vec![s.n_ff, d],
        "ffn_gate_inp.weight" => vec![d, t.ne[1]],
        "ffn_gate_exps.weight" | "ffn_up_exps.weight" => vec![d, expert_ff, n_expert],
        "ffn_down_exps.weight" => vec![expert_ff, d, n_expert],
        _ => return Err(format!("no rule for tensor `{}` ({:?})", t.name, t.shape())),
    })
}

/// The new shape of a hybrid's own tensors (`None`: not one of them): LFM2's short
/// convolution, Granite-H's Mamba-2, Qwen3.5's delta-net and Qwen3.5-MoE's shared expert.
fn hybrid_shape(p: &Plan, role: &str, t: &TensorInfo) -> Option<Vec<usize>> {
    let d = p.new.width;
    if let Some(sh) = p.n_ff_shexp {
        match role {
            "ffn_gate_inp_shexp.weight" => return Some(vec![d]),
            "ffn_gate_shexp.weight" | "ffn_up_shexp.weight" => return Some(vec![d, sh]),
            "ffn_down_shexp.weight" => return Some(vec![sh, d]),
            _ => {}
        }
    }
    let k = t.ne[0];
    if p.arch == "lfm2" {
        return match role {
            "shortconv.conv.weight" => Some(vec![k, d]),
            "shortconv.in_proj.weight" => Some(vec![d, 3 * d]),
            "shortconv.out_proj.weight" => Some(vec![d, d]),
            _ => None,
        };
    }
    let m = p.ssm?;
    let gs = 2 * m.groups * m.state;
    Some(match (p.arch.as_str(), role) {
        ("granitehybrid", "ssm_in.weight") => vec![d, 2 * m.inner + gs + m.heads],
        ("granitehybrid", "ssm_conv1d.weight") => vec![k, m.inner + gs],
        ("granitehybrid", "ssm_conv1d.bias") => vec![m.inner + gs],
        ("granitehybrid", "ssm_a" | "ssm_d") => vec![1, m.heads],
        ("granitehybrid", "ssm_norm.weight") => vec![m.inner / m.groups, m.groups],
        (_, "attn_qkv.weight") => vec![d, gs + m.inner],
        (_, "attn_gate.weight") => vec![d, m.inner],
        (_, "ssm_conv1d.weight") => vec![k, gs + m.inner],
        (_, "ssm_a") => vec![m.heads],
        (_, "ssm_beta.weight" | "ssm_alpha.weight") => vec![d, m.heads],
        (_, "ssm_norm.weight") => vec![m.inner / m.heads],
        (_, "ssm_dt.bias") => vec![m.heads],
        (_, "ssm_out.weight") => vec![m.inner, d],
        _ => return None,
    })
}

/// A tensor to write: its name, type, shape and how its values are drawn.
struct Planned {
    name: String,
    dtype: DType,
    ne: Vec<usize>,
    fill: Fill,
}

/// How a tensor's values are made.
#[derive(Clone, Copy)]
enum Fill {
    /// Gaussian noise with this mean and standard deviation.
    Normal { mean: f64, std: f64 },
    /// Minus the magnitude of such noise: an SSM's decay `A` (= −exp(A_log)) must stay
    /// negative, or the state grows without bound.
    NegativeNormal { mean: f64, std: f64 },
    /// Llama 3.1's rotary frequency factors.
    Llama3RopeFactors { base: f64 },
}

/// Mean and standard deviation of a tiny tensor's values.
fn stats(src: &GgufFile, t: &TensorInfo) -> Result<(f64, f64), String> {
    let bytes = src.tensor_data(t);
    let vals: Vec<f64> = match t.dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        other => return Err(format!("tensor `{}` is {other:?}, not F16/F32", t.name)),
    };
    let n = vals.len().max(1) as f64;
    let mean = vals.iter().sum::<f64>() / n;
    let var = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    Ok((mean, var.sqrt()))
}

fn plan_tensors(src: &Source, p: &Plan) -> Result<Vec<Planned>, GenError> {
    let bad = |detail: String| src.bad(detail);
    let base = src
        .get(&format!("{}.rope.freq_base", p.arch))
        .and_then(Value::as_f32)
        .unwrap_or(10000.0) as f64;
    let one = |role: &str, name: String, tensor: &SourceTensor| {
        let (t, (mean, std)) = (&tensor.0, tensor.1);
        let ne = new_shape(p, role, t).map_err(bad)?;
        let fill = if role == "rope_freqs.weight" {
            Fill::Llama3RopeFactors { base }
        } else if role == "ssm_a" {
            Fill::NegativeNormal { mean, std }
        } else if t.n_dims == 1
            || role == "ssm_d"
            || role.ends_with("norm.weight")
            || role.ends_with(".bias")
        {
            Fill::Normal { mean, std }
        } else if role == "token_embd.weight" || role == "output.weight" {
            Fill::Normal { mean: 0.0, std }
        } else {
            let scale = (t.ne[0] as f64 / ne[0] as f64).sqrt();
            Fill::Normal {
                mean: 0.0,
                std: std * scale,
            }
        };
        Ok::<_, GenError>(Planned {
            name,
            dtype: t.dtype,
            ne,
            fill,
        })
    };
    // The tiny model's layers, as (role, tensor) lists. Where they differ (the hybrids mix
    // recurrent and attention layers) new layer `l` copies tiny layer `l mod n`; where they
    // are alike every layer copies layer 0 (whose statistics the older models were made from).
    let layers: Vec<Vec<(&str, &SourceTensor)>> = (0..p.tiny_layers)
        .map(|il| {
            let prefix = format!("blk.{il}.");
            src.tensors
                .iter()
                .filter_map(|t| t.0.name.strip_prefix(prefix.as_str()).map(|role| (role, t)))
                .collect()
        })
        .collect();
    if layers.iter().any(Vec::is_empty) || p.tiny_layers == 0 {
        return Err(bad("a layer without tensors".into()));
    }
    let uniform = layers
        .iter()
        .all(|l| l.iter().map(|x| x.0).eq(layers[0].iter().map(|x| x.0)));
    let mut out = Vec::new();
    let mut layers_done = false;
    for t in &src.tensors {
        let name = &t.0.name;
        if !name.starts_with("blk.") {
            out.push(one(name, name.clone(), t)?);
        } else if !layers_done {
            layers_done = true;
            for l in 0..p.new.layers {
                let template = if uniform { 0 } else { l % p.tiny_layers };
                for (role, t0) in &layers[template] {
                    out.push(one(role, format!("blk.{l}.{role}"), t0)?);
                }
            }
        }
    }
    Ok(out)
}

/// SplitMix64: a small, seedable generator (statistical quality is all this needs).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Two independent standard normal values (Box–Muller).
    fn normal_pair(&mut self) -> (f64, f64) {
        let r = (-2.0 * self.uniform().ln()).sqrt();
        let a = 2.0 * PI * self.uniform();
        (r * a.cos(), r * a.sin())
    }
}

/// A seed for one tensor: the run's seed mixed with the tensor's name (FNV-1a).
fn tensor_seed(seed: u64, name: &str) -> u64 {
    name.bytes().fold(seed ^ 0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// Llama 3.1's `rope_freqs`: one divisor of each rotary pair's frequency.
fn llama3_rope_factor(i: usize, n_pairs: usize, base: f64) -> f32 {
    let (factor, low, high, original) = (8.0, 1.0, 4.0, 8192.0);
    let freq = base.powf(-(i as f64) / n_pairs as f64);
    let wavelen = 2.0 * PI / freq;
    if wavelen < original / high {
        1.0
    } else if wavelen > original / low {
        factor as f32
    } else {
        let smooth = (original / wavelen - low) / (high - low);
        (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
    }
}

/// Writes `n` values of `fill` as `dtype` to `out`, in chunks.
fn write_values(
    out: &mut dyn Write,
    dtype: DType,
    n: usize,
    fill: Fill,
    rng: &mut Rng,
) -> std::io::Result<()> {
    const CHUNK: usize = 1 << 16;
    let mut vals = Vec::with_capacity(CHUNK);
    let mut bytes = Vec::with_capacity(CHUNK * 4);
    let mut done = 0;
    while done < n {
        let k = CHUNK.min(n - done);
        vals.clear();
        match fill {
            Fill::Normal { mean, std } => {
                while vals.len() < k {
                    let (a, b) = rng.normal_pair();
                    vals.push((mean + std * a) as f32);
                    vals.push((mean + std * b) as f32);
                }
                vals.truncate(k);
            }
            Fill::NegativeNormal { mean, std } => {
                while vals.len() < k {
                    let (a, b) = rng.normal_pair();
                    vals.push(-(mean + std * a).abs() as f32);
                    vals.push(-(mean + std * b).abs() as f32);
                }
                vals.truncate(k);
            }
            Fill::Llama3RopeFactors { base } => {
                vals.extend((done..done + k).map(|i| llama3_rope_factor(i, n, base)));
            }
        }
        bytes.clear();
        match dtype {
            DType::F16 => {
                for v in &vals {
                    bytes.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes());
                }
            }
            _ => {
                for v in &vals {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        out.write_all(&bytes)?;
        done += k;
    }
    Ok(())
}

/// Generates a model of architecture `arch` and `opts`' shape from the tiny file `tiny` (of
/// that architecture, or one it derives from: see [`ARCHS`]) and writes it to `out`.
pub fn generate(
    tiny: &Path,
    arch: &str,
    out: &Path,
    opts: &GenOptions,
) -> Result<GenShape, GenError> {
    let mut src = Source::read(tiny)?;
    derive(&mut src, arch)?;
    let p = plan(&src, opts)?;
    let tensors = plan_tensors(&src, &p)?;
    let mut w = GgufWriter::new();
    for (k, v) in metadata(&src, &p, opts) {
        w.add_kv(k, v)?;
    }
    for t in &tensors {
        w.add_tensor_info(t.name.clone(), t.dtype, &t.ne)?;
    }
    let mut next = tensors.iter();
    w.write_to_path(out, |info, sink| {
        let Some(t) = next.next() else {
            return Err(std::io::Error::other("more tensor infos than planned"));
        };
        let mut rng = Rng(tensor_seed(opts.seed, &t.name));
        write_values(sink, t.dtype, info.nelements(), t.fill, &mut rng)
    })?;
    Ok(GenShape {
        n_tensors: tensors.len(),
        ..p.new
    })
}

/// Parses the command line, generates the model and prints its shape.
fn run(args: &[String]) -> Result<(), String> {
    let mut arch = None;
    let mut out = None;
    let mut tiny = None;
    let mut o = GenOptions::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: `{v}` is not a number"))
        };
        match flag.as_str() {
            "--arch" => arch = Some(value()?),
            "--out" => out = Some(PathBuf::from(value()?)),
            "--tiny" => tiny = Some(PathBuf::from(value()?)),
            "--width" => o.width = number(value()?)? as usize,
            "--layers" => o.layers = number(value()?)? as usize,
            "--head-dim" => o.head_dim = Some(number(value()?)? as usize),
            "--context" => o.context = number(value()?)? as usize,
            "--seed" => o.seed = number(value()?)?,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let names: Vec<&str> = ARCHS.iter().map(|(a, _)| *a).collect();
    let arch = arch.ok_or_else(|| format!("--arch is required: one of {names:?}"))?;
    let out = out.ok_or("--out FILE is required")?;
    let tiny = match tiny {
        Some(t) => t,
        None => tiny_file(&default_tiny_dir(), &arch)
            .ok_or_else(|| format!("unknown arch `{arch}`: one of {names:?}"))?,
    };
    let shape = generate(&tiny, &arch, &out, &o).map_err(|e| e.to_string())?;
    println!("{}: {shape:?}", out.display());
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("gen_model: {e}");
        eprintln!(
            "usage: gen_model --arch ARCH --out FILE [--width 1024] [--layers 8] [--seed 1] \
             [--head-dim N] [--context 4096] [--tiny FILE]"
        );
        std::process::exit(2);
    }
}
