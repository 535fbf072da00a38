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
//! The 2026 families take their real models' proportions (see `family`): Gemma 3 (270M/1B:
//! 4 heads of 256 over one KV head, windows of 512, five local layers per global one),
//! Gemma 4 (E2B/E4B-like: local heads of 256, global ones of 512 with a quarter of their
//! pairs rotating, the tiny model's K=V globals and KV heads, per-layer embeddings of 256,
//! the second half of the layers sharing the first half's caches, in each half every fourth
//! layer and the last one global), gpt-oss (20B-like: heads of 64, 8 per KV head, sinks,
//! windows of 128 on every other layer, 32 experts of the width, 4 used, YaRN from 4096),
//! Ministral 3 (heads of 128, 4 per KV head, queries twice the width, YaRN and the attention
//! temperature), SmolLM3 (heads of 128, every fourth layer without rotary), Granite 3 (heads
//! of 64; the attention multiplier follows the head size) and Phi-4-mini's LongRoPE
//! (`phi3-longrope`: heads of 128, 3/4 of them rotating, the tiny factors resampled
//! geometrically, an original context of 1/32 of the context and the converter's attention
//! factor for that ratio).
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
//!   Q/K/V biases instead of Q/K norms), qwen3, gemma2, phi3, qwen3moe, chatglm, the
//!   hybrids lfm2, granitehybrid, qwen35, qwen35moe, and the 2026 families gemma3, gemma4,
//!   gpt-oss, mistral3, smollm3, granite, phi3-longrope.
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
pub const ARCHS: [(&str, &str); 18] = [
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
    ("gemma3", "tiny-gemma3-f16.gguf"),
    ("gemma4", "tiny-gemma4-f16.gguf"),
    ("gpt-oss", "tiny-gpt-oss-f16.gguf"),
    ("mistral3", "tiny-mistral3-f16.gguf"),
    ("smollm3", "tiny-smollm3-f16.gguf"),
    ("granite", "tiny-granite-f16.gguf"),
    ("phi3-longrope", "tiny-phi3-longrope-f16.gguf"),
];

/// The `general.architecture` of the model `name` makes: `name` itself, but for
/// `phi3-longrope` (a `phi3` with LongRoPE factors).
pub fn gguf_arch(name: &str) -> &str {
    match name {
        "phi3-longrope" => "phi3",
        other => other,
    }
}

/// A 2026 family's own proportions, where the tiny model's are test devices (its heads of
/// 16 or 32, its windows of 4 to 8 tokens, its 8 small experts).
#[derive(Debug, Clone, Copy)]
struct Family {
    /// Head size (`attention.key_length`; Gemma 4: its global layers', the local ones get
    /// the tiny model's share of it).
    head_dim: usize,
    /// Query width (heads × head size) over the width.
    q_ratio: f64,
    /// Query heads per KV head (`None`: the tiny model's).
    group: Option<usize>,
    /// `feed_forward_length` over the width (`None`: 2.75).
    ff_ratio: Option<f64>,
    /// `expert_count` and `expert_used_count` (`None`: the tiny model's).
    experts: Option<(usize, usize)>,
    /// `attention.sliding_window` (`None`: 4096, Gemma 2's).
    window: Option<usize>,
}

/// The family of the model `name` makes, if it is one of the 2026 set.
fn family(name: &str) -> Option<Family> {
    let f = Family {
        head_dim: 128,
        q_ratio: 1.0,
        group: None,
        ff_ratio: None,
        experts: None,
        window: None,
    };
    Some(match name {
        // Gemma 3 270M / 1B: 4 heads of 256 over one KV head; windows of 512.
        "gemma3" => Family {
            head_dim: 256,
            group: Some(4),
            window: Some(512),
            ..f
        },
        // Gemma 4 E2B/E4B: local heads of 256, global ones of 512 (4 of them: twice the width),
        // the tiny model's KV heads (2 local, 1 global); windows of 512.
        "gemma4" => Family {
            head_dim: 512,
            q_ratio: 2.0,
            window: Some(512),
            ..f
        },
        // gpt-oss 20B: heads of 64, 8 per KV head, 32 experts of the width, 4 used; windows of
        // 128 tokens.
        "gpt-oss" => Family {
            head_dim: 64,
            group: Some(8),
            ff_ratio: Some(1.0),
            experts: Some((32, 4)),
            window: Some(128),
            ..f
        },
        // Ministral 3: heads of 128, 4 per KV head, queries wider than the width (3B: 4096
        // over 3072; the tiny model's twice).
        "mistral3" => Family {
            q_ratio: 2.0,
            group: Some(4),
            ..f
        },
        // SmolLM3-3B: heads of 128, 4 per KV head.
        "smollm3" => Family {
            group: Some(4),
            ..f
        },
        // Granite 3.x: heads of 64, 4 per KV head.
        "granite" => Family {
            head_dim: 64,
            group: Some(4),
            ..f
        },
        // Phi-4-mini: heads of 128 (its 3 per KV head do not divide 8 heads: the tiny
        // model's 2).
        "phi3-longrope" => f,
        _ => return None,
    })
}

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
    /// Head dimension; `None`: the 2026 families' own (see [`family`]), else 128 for
    /// families with `attention.key_length` and 64 for the others.
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
    /// `expert_count` (0: no experts).
    pub n_expert: usize,
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

/// A tiny tensor, its values' mean and standard deviation, and its values themselves when
/// it is a short F32 vector (rotary factors, which are resampled rather than drawn).
type SourceTensor = (TensorInfo, (f64, f64), Vec<f64>);

/// The longest vector whose values [`SourceTensor`] keeps.
const KEPT_VALUES: usize = 256;

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
            let vals = values(&file, t).map_err(|d| src.bad(d))?;
            let st = stats(&vals);
            let keep = t.dtype == DType::F32 && t.n_dims == 1 && vals.len() <= KEPT_VALUES;
            src.tensors
                .push((t.clone(), st, if keep { vals } else { Vec::new() }));
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
    for (t, st, vals) in tensors {
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
        src.tensors.push((t, st, vals));
        if let Some(b) = bias {
            src.tensors.push((b, (0.0, 0.02), Vec::new()));
        }
    }
    src.arch = arch.to_owned();
    Ok(())
}

/// The tiny file's hyperparameters and the new ones derived from them.
struct Plan {
    /// The generator's name of the model (`phi3-longrope`), `arch` its architecture.
    name: String,
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
    /// The 2026 family's proportions, if the model is one of them.
    family: Option<Family>,
    /// The tiny layer each new layer copies (its tensor table, its per-layer keys).
    templates: Vec<usize>,
    /// Head size and KV heads of each tiny layer's new copy (Gemma 4's local and global
    /// layers differ; the other models' are all `(head_dim, n_head_kv)`).
    attn: Vec<(usize, usize)>,
    /// Gemma 4's sizes (`None` for the other models).
    gemma4: Option<Gemma4Plan>,
}

/// Gemma 4's own sizes.
#[derive(Debug, Clone)]
struct Gemma4Plan {
    /// `attention.key_length_swa` (the local layers' head size).
    head_dim_swa: usize,
    /// `rope.dimension_count_swa`.
    rope_dim_swa: usize,
    /// `embedding_length_per_layer_input`: 256 as E2B and E4B (at most a quarter of the width).
    n_ple: usize,
    /// `attention.shared_kv_layers`: the second half of the layers.
    shared: usize,
}

/// Gemma 4's layers at `n` layers, from the tiny model's: the first `n − n/2` have caches of
/// their own, the others share them (`attention.shared_kv_layers`, as E2B shares 20 of 35);
/// in each half every fourth layer and the last are global, the others local (E2B has 4
/// local layers per global one; a shared layer reads the last cache of its kind, so the last
/// layer with a cache must be global and the one before it local). Returns the plan and the
/// tiny layer each new layer copies (the first tiny layer of the same kind, local or global,
/// with or without a cache of its own).
fn gemma4_plan(
    src: &Source,
    n: usize,
    hd: usize,
    hd0: usize,
    width: usize,
) -> Result<(Gemma4Plan, Vec<usize>), GenError> {
    let key = |k: &str| src.get(&format!("gemma4.{k}"));
    let num = |k: &str| key(k).and_then(Value::as_u64).map(|v| v as usize);
    let flags: Vec<bool> = key("attention.sliding_window_pattern")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| matches!(v, Value::Bool(true))).collect())
        .unwrap_or_default();
    let n0 = flags.len();
    let shared0 = num("attention.shared_kv_layers").unwrap_or(0);
    let (Some(hd_swa0), Some(rot_swa0)) = (
        num("attention.key_length_swa"),
        num("rope.dimension_count_swa"),
    ) else {
        return Err(src.bad("no key_length_swa / rope.dimension_count_swa".into()));
    };
    if n < 4 {
        return Err(GenError::BadShape(format!(
            "gemma4 needs at least 4 layers (local and global, with and without caches), not {n}"
        )));
    }
    let shared = n / 2;
    let part = |i: usize, len: usize| i + 1 != len && i % 4 != 3;
    let local: Vec<bool> = (0..n)
        .map(|l| match l < n - shared {
            true => part(l, n - shared),
            false => part(l - (n - shared), shared),
        })
        .collect();
    let templates = (0..n)
        .map(|l| {
            let kind = (local[l], l >= n - shared);
            (0..n0)
                .find(|&t| (flags[t], t >= n0 - shared0) == kind)
                .ok_or_else(|| {
                    src.bad(format!(
                        "no tiny layer is {} and {}",
                        if kind.0 { "local" } else { "global" },
                        if kind.1 { "shared" } else { "unshared" }
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let plan = Gemma4Plan {
        head_dim_swa: hd_swa0 * hd / hd0,
        rope_dim_swa: rot_swa0 * hd / hd0,
        n_ple: 256.min(width / 4),
        shared,
    };
    Ok((plan, templates))
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

/// The roles (names without `blk.N.`) of tiny layer `il`'s tensors, in the file's order.
fn layer_roles(src: &Source, il: usize) -> Vec<&str> {
    let prefix = format!("blk.{il}.");
    src.tensors
        .iter()
        .filter_map(|t| t.0.name.strip_prefix(prefix.as_str()))
        .collect()
}

fn plan(src: &Source, name: &str, o: &GenOptions) -> Result<Plan, GenError> {
    let bad = |detail: String| src.bad(detail);
    let arch = src.arch.clone();
    let fam = family(name);
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
    let hd = o.head_dim.unwrap_or(match (fam, explicit_hd) {
        (Some(f), _) => f.head_dim,
        (None, Some(_)) => 128,
        (None, None) => 64,
    });
    if d == 0 || hd == 0 || !d.is_multiple_of(32) || !hd.is_multiple_of(2) || o.layers == 0 {
        return Err(GenError::BadShape(format!(
            "width {d} (a multiple of 32), head_dim {hd} (even) and layers {} must be positive",
            o.layers
        )));
    }
    // Keep the tiny model's Q width / width and heads per KV head (or the family's).
    let group = fam.and_then(|f| f.group).unwrap_or(h0 / hkv0);
    let q_ratio = fam.map_or((h0 * hd0) as f64 / d0 as f64, |f| f.q_ratio);
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
    let n_ff = round_dim(d as f64 * fam.and_then(|f| f.ff_ratio).unwrap_or(2.75));
    let n_ff_exp =
        num("expert_feed_forward_length").map(|e0| round_dim(n_ff as f64 * e0 as f64 / ff0 as f64));
    let n_ff_shexp = num("expert_shared_feed_forward_length")
        .map(|e0| round_dim(n_ff as f64 * e0 as f64 / ff0 as f64));
    let ssm = ssm_plan(src, &arch, d)?;
    // A rotary part narrower than the head (ChatGLM: half of it) keeps its share.
    let rope_dim = num("rope.dimension_count").map_or(hd, |r0| r0 * hd / hd0);
    let n_expert = match fam.and_then(|f| f.experts) {
        Some((n, _)) => n,
        None => num("expert_count").unwrap_or(0),
    };
    let n_head_kv = n_head / group;
    // New layer `l` copies tiny layer `l mod n` where the tiny layers differ (the hybrids),
    // layer 0 where they are alike (whose statistics the older models were made from),
    // Gemma 4's of its kind.
    let uniform = (1..n0).all(|il| layer_roles(src, il) == layer_roles(src, 0));
    let (gemma4, templates) = if arch == "gemma4" {
        let (g, t) = gemma4_plan(src, o.layers, hd, hd0, d)?;
        (Some(g), t)
    } else {
        let t = (0..o.layers)
            .map(|l| if uniform { 0 } else { l % n0 })
            .collect();
        (None, t)
    };
    // Each tiny layer's head size and KV heads, in its new copy.
    let kv_per_layer = src
        .get(&format!("{arch}.attention.head_count_kv"))
        .and_then(Value::as_array)
        .filter(|a| a.len() == n0);
    let attn = (0..n0)
        .map(|il| {
            // A layer without KV heads (a hybrid's recurrent one) keeps none.
            let kv = kv_per_layer
                .and_then(|a| a[il].as_u64())
                .map_or(n_head_kv, |k| match k as usize {
                    0 => 0,
                    k => (k * n_head / h0).max(1),
                });
            match &gemma4 {
                Some(g)
                    if !matches!(
                        src.get("gemma4.attention.sliding_window_pattern")
                            .and_then(Value::as_array)
                            .and_then(|a| a.get(il)),
                        Some(Value::Bool(false))
                    ) =>
                {
                    (g.head_dim_swa, kv)
                }
                _ => (hd, kv),
            }
        })
        .collect();
    Ok(Plan {
        name: name.to_owned(),
        family: fam,
        templates,
        attn,
        gemma4,
        new: GenShape {
            arch: arch.clone(),
            width: d,
            layers: o.layers,
            n_head,
            n_head_kv,
            head_dim: hd,
            n_ff,
            n_ff_exp,
            n_expert,
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
    // Phi-4-mini's LongRoPE stretches an original context of 1/32 of its own; the
    // converter's attention factor follows from that ratio.
    let longrope = p.name == "phi3-longrope";
    let n_ctx_orig = if longrope {
        (o.context / 32).max(1)
    } else {
        o.context
    };
    let g4 = p.gemma4.as_ref();
    let fam = p.family;
    let mut shaped: Vec<(&str, Value)> = vec![
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
        ("rope.scaling.original_context_length", u32v(n_ctx_orig)),
        // The tiny models' windows of 4 to 8 tokens are test devices: Gemma 2's own is 4096,
        // the 2026 families' their own.
        (
            "attention.sliding_window",
            u32v(fam.and_then(|f| f.window).unwrap_or(4096)),
        ),
        (
            "attention.key_length_swa",
            u32v(g4.map_or(0, |g| g.head_dim_swa)),
        ),
        (
            "attention.value_length_swa",
            u32v(g4.map_or(0, |g| g.head_dim_swa)),
        ),
        (
            "rope.dimension_count_swa",
            u32v(g4.map_or(0, |g| g.rope_dim_swa)),
        ),
        (
            "embedding_length_per_layer_input",
            u32v(g4.map_or(0, |g| g.n_ple)),
        ),
        (
            "attention.shared_kv_layers",
            u32v(g4.map_or(0, |g| g.shared)),
        ),
    ];
    if let Some((n, used)) = fam.and_then(|f| f.experts) {
        shaped.push(("expert_count", u32v(n)));
        shaped.push(("expert_used_count", u32v(used)));
    }
    if p.name == "gemma3" {
        // Gemma 3's five local layers per global one (the tiny model's 2 are a test device).
        shaped.push(("attention.sliding_window_pattern", u32v(6)));
    }
    if longrope {
        let ratio = o.context as f64 / n_ctx_orig as f64;
        let factor = (1.0 + ratio.ln() / (n_ctx_orig as f64).ln()).sqrt();
        shaped.push(("rope.scaling.attn_factor", Value::F32(factor as f32)));
    }
    let shaped: Vec<(String, Value)> = shaped.into_iter().map(|(k, v)| (key(k), v)).collect();
    // Per-layer arrays (hybrids' `head_count_kv`, Qwen3.5's `recurrent_layers`, Gemma 4's
    // `sliding_window_pattern`) follow the layers' templates, as the tensors do (see
    // [`Plan::templates`]).
    let per_layer = |k: &str, v: &Value| -> Option<Value> {
        let a = v.as_array().filter(|a| a.len() == p.tiny_layers)?;
        let kv = k.ends_with(".attention.head_count_kv");
        let known = [
            ".attention.recurrent_layers",
            ".attention.sliding_window_pattern",
        ];
        if !kv && !known.iter().any(|e| k.ends_with(e)) {
            return None;
        }
        Some(Value::Array(
            p.templates
                .iter()
                .map(|&t| match &a[t] {
                    x if kv && x.as_u64().is_some_and(|n| n > 0) => match x {
                        Value::I32(_) => Value::I32(p.attn[t].1 as i32),
                        _ => u32v(p.attn[t].1),
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

/// The new shape of a tiny tensor (`role`: its name without `blk.N.`; `(hd, n_kv)`: the
/// head size and KV heads of its layer).
fn new_shape(
    p: &Plan,
    role: &str,
    t: &TensorInfo,
    (hd, n_kv): (usize, usize),
) -> Result<Vec<usize>, String> {
    let s = &p.new;
    let d = s.width;
    let (q, kv) = (s.n_head * hd, n_kv * hd);
    let fused_ff = |ne1: usize| ne1 / p.tiny_ff * s.n_ff;
    let expert_ff = s.n_ff_exp.unwrap_or(0);
    let n_expert = s.n_expert;
    if let Some(shape) = hybrid_shape(p, role, t) {
        return Ok(shape);
    }
    // Gemma 4's per-layer embeddings: `n_ple` values per layer and token.
    let ple = p.gemma4.as_ref().map_or(0, |g| g.n_ple);
    Ok(match role {
        "token_embd.weight" | "output.weight" => vec![d, t.ne[1]],
        "per_layer_token_embd.weight" => vec![ple * s.layers, t.ne[1]],
        "per_layer_model_proj.weight" => vec![d, ple * s.layers],
        "per_layer_proj_norm.weight" => vec![ple],
        "inp_gate.weight" => vec![d, ple],
        "proj.weight" => vec![ple, d],
        "layer_output_scale.weight" => vec![1],
        "rope_freqs.weight" | "rope_factors_long.weight" | "rope_factors_short.weight" => {
            vec![p.rope_dim / 2]
        }
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
        "attn_output.bias" => vec![d],
        "attn_sinks.weight" => vec![s.n_head],
        // Phi-3 and ChatGLM fuse gate and up into one `ffn_up` twice as wide.
        "ffn_gate.weight" | "ffn_up.weight" if t.ne[1].is_multiple_of(p.tiny_ff) => {
            vec![d, fused_ff(t.ne[1])]
        }
        "ffn_down.weight" => vec![s.n_ff, d],
        "ffn_gate_inp.weight" => vec![d, n_expert],
        "ffn_gate_inp.bias" => vec![n_expert],
        "ffn_gate_exps.weight" | "ffn_up_exps.weight" => vec![d, expert_ff, n_expert],
        "ffn_down_exps.weight" => vec![expert_ff, d, n_expert],
        "ffn_gate_exps.bias" | "ffn_up_exps.bias" => vec![expert_ff, n_expert],
        "ffn_down_exps.bias" => vec![d, n_expert],
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
#[derive(Clone)]
enum Fill {
    /// Gaussian noise with this mean and standard deviation.
    Normal { mean: f64, std: f64 },
    /// Minus the magnitude of such noise: an SSM's decay `A` (= −exp(A_log)) must stay
    /// negative, or the state grows without bound.
    NegativeNormal { mean: f64, std: f64 },
    /// Llama 3.1's rotary frequency factors.
    Llama3RopeFactors { base: f64 },
    /// These values (a tiny vector resampled: see [`resample`]).
    Values(Vec<f32>),
}

/// The tiny vector `v` stretched to `n` values: Gemma 4's `rope_freqs` (1 for the rotated
/// pairs, 1e30 for the others) by nearest index, so the same share of pairs rotates;
/// LongRoPE's factors (increasing, positive) interpolated geometrically, so they keep their
/// ends and their curve.
fn resample(v: &[f64], n: usize, geometric: bool) -> Vec<f32> {
    let m = v.len();
    (0..n)
        .map(|i| {
            if !geometric || m < 2 || n < 2 {
                return v[(i * m / n.max(1)).min(m - 1)] as f32;
            }
            let x = i as f64 * (m - 1) as f64 / (n - 1) as f64;
            let j = (x.floor() as usize).min(m - 2);
            let f = x - j as f64;
            (v[j].ln() * (1.0 - f) + v[j + 1].ln() * f).exp() as f32
        })
        .collect()
}

/// A tiny tensor's values.
fn values(src: &GgufFile, t: &TensorInfo) -> Result<Vec<f64>, String> {
    let bytes = src.tensor_data(t);
    Ok(match t.dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        other => return Err(format!("tensor `{}` is {other:?}, not F16/F32", t.name)),
    })
}

/// Mean and standard deviation of `vals`.
fn stats(vals: &[f64]) -> (f64, f64) {
    let n = vals.len().max(1) as f64;
    let mean = vals.iter().sum::<f64>() / n;
    let var = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

fn plan_tensors(src: &Source, p: &Plan) -> Result<Vec<Planned>, GenError> {
    let bad = |detail: String| src.bad(detail);
    let base = src
        .get(&format!("{}.rope.freq_base", p.arch))
        .and_then(Value::as_f32)
        .unwrap_or(10000.0) as f64;
    let tied = !src.tensors.iter().any(|t| t.0.name == "output.weight");
    let one = |role: &str, name: String, tensor: &SourceTensor, attn: (usize, usize)| {
        let (t, (mean, std), vals) = (&tensor.0, tensor.1, &tensor.2);
        let ne = new_shape(p, role, t, attn).map_err(bad)?;
        let factors = role.starts_with("rope_factors_");
        let fill = if role == "rope_freqs.weight" && p.arch == "llama" {
            Fill::Llama3RopeFactors { base }
        } else if (role == "rope_freqs.weight" || factors) && !vals.is_empty() {
            let geometric = factors && vals.iter().all(|v| *v > 0.0);
            Fill::Values(resample(vals, ne[0], geometric))
        } else if role == "ssm_a" {
            Fill::NegativeNormal { mean, std }
        } else if t.n_dims == 1
            || role == "ssm_d"
            || role.ends_with("norm.weight")
            || role.ends_with(".bias")
        {
            Fill::Normal { mean, std }
        } else if [
            "token_embd.weight",
            "output.weight",
            "per_layer_token_embd.weight",
        ]
        .contains(&role)
        {
            // Embeddings keep their spread (the tiny model's activations' size), but for
            // Gemma 3/4's tied embeddings: their input is scaled by √width, so at width 1024
            // a token's own embedding dominates the last hidden state and every position
            // predicts its input token again (the tied output's product with it grows with
            // the width, with a random row only as its square root). √(tiny width / width)
            // keeps the tiny model's balance.
            let own_echo = p.family.is_some() && p.arch.starts_with("gemma") && tied;
            let std = match own_echo && role == "token_embd.weight" {
                true => std * (p.tiny_width as f64 / p.new.width as f64).sqrt(),
                false => std,
            };
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
    // The tiny model's layers, as (role, tensor) lists; new layer `l` copies tiny layer
    // `p.templates[l]`.
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
    let model_wide = (p.new.head_dim, p.new.n_head_kv);
    let mut out = Vec::new();
    let mut layers_done = false;
    for t in &src.tensors {
        let name = &t.0.name;
        if !name.starts_with("blk.") {
            out.push(one(name, name.clone(), t, model_wide)?);
        } else if !layers_done {
            layers_done = true;
            for (l, &template) in p.templates.iter().enumerate() {
                for (role, t0) in &layers[template] {
                    let name = format!("blk.{l}.{role}");
                    out.push(one(role, name, t0, p.attn[template])?);
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
    fill: &Fill,
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
            &Fill::Normal { mean, std } => {
                while vals.len() < k {
                    let (a, b) = rng.normal_pair();
                    vals.push((mean + std * a) as f32);
                    vals.push((mean + std * b) as f32);
                }
                vals.truncate(k);
            }
            &Fill::NegativeNormal { mean, std } => {
                while vals.len() < k {
                    let (a, b) = rng.normal_pair();
                    vals.push(-(mean + std * a).abs() as f32);
                    vals.push(-(mean + std * b).abs() as f32);
                }
                vals.truncate(k);
            }
            &Fill::Llama3RopeFactors { base } => {
                vals.extend((done..done + k).map(|i| llama3_rope_factor(i, n, base)));
            }
            Fill::Values(v) => vals.extend_from_slice(&v[done..done + k]),
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

/// The shape [`generate`] gives the model `arch` (a name of [`ARCHS`]) from `tiny`, without
/// writing it.
pub fn plan_shape(tiny: &Path, arch: &str, opts: &GenOptions) -> Result<GenShape, GenError> {
    let mut src = Source::read(tiny)?;
    derive(&mut src, gguf_arch(arch))?;
    let p = plan(&src, arch, opts)?;
    let n_tensors = plan_tensors(&src, &p)?.len();
    Ok(GenShape { n_tensors, ..p.new })
}

/// Generates the model `arch` (a name of [`ARCHS`]) of `opts`' shape from the tiny file `tiny`
/// (of that architecture, or one it derives from) and writes it to `out`.
pub fn generate(
    tiny: &Path,
    arch: &str,
    out: &Path,
    opts: &GenOptions,
) -> Result<GenShape, GenError> {
    let mut src = Source::read(tiny)?;
    derive(&mut src, gguf_arch(arch))?;
    let p = plan(&src, arch, opts)?;
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
        write_values(sink, t.dtype, info.nelements(), &t.fill, &mut rng)
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
