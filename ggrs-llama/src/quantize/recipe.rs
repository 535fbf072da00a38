//! llama.cpp's per-tensor type choice (`llama_tensor_get_type` in `src/llama-quant.cpp`),
//! rule for rule, for the file types of [`FileType`].
//!
//! The rules, in the order llama.cpp applies them to one tensor:
//! 1. Tensors of one axis, not named `*weight`, norms, MoE routers and a few small tables
//!    keep their type ([`allows_quantization`]).
//! 2. `--token-embedding-type` / `--output-tensor-type` give `token_embd.weight` /
//!    `output.weight` their type outright.
//! 3. For a quantized file type: the first `--tensor-type` pattern found in the name gives
//!    the type; otherwise, unless `--pure`, the mixture's rule for the tensor's role
//!    ([`Role`]) and layer does. Then a type whose blocks do not divide the rows falls back
//!    (Q2_K/Q3_K → Q4_0, Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, IQ4_XS → IQ4_NL), and to F16
//!    when even that does not fit.
//!
//! The mixture rules read counters that advance once per `attn_v` / `ffn_down` tensor, in
//! llama.cpp's tensor order: by layer number, then by name (the order of its
//! `weights_map`), which is why [`choose_types`] walks the tensors in that order.

use ggrs_core::gguf::{GgufFile, TensorInfo};
use regex::Regex;

use super::types::{FileType, QuantType};
use super::QuantizeError;

/// What a tensor does, as far as the recipes care (llama.cpp's `tensor_category`, from
/// substrings of the name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `token_embd.weight` or `per_layer_token_embd.weight`.
    TokenEmbd,
    /// `*attn_q.weight`.
    AttnQ,
    /// `*attn_v.weight`.
    AttnV,
    /// `*attn_k.weight`.
    AttnK,
    /// `*attn_qkv.weight` (fused Q, K, V).
    AttnQkv,
    /// `*attn_kv_b.weight` (MLA).
    AttnKvB,
    /// `*attn_output.weight`.
    AttnOutput,
    /// Names containing `ffn_up`.
    FfnUp,
    /// Names containing `ffn_gate`.
    FfnGate,
    /// Names containing `ffn_down`.
    FfnDown,
    /// `output.weight`.
    Output,
    /// Anything else.
    Other,
}

impl Role {
    /// The role of tensor `name` (first match of llama.cpp's order of tests).
    pub fn of(name: &str) -> Role {
        if name == "output.weight" {
            Role::Output
        } else if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
            Role::TokenEmbd
        } else if name.contains("attn_qkv.weight") {
            Role::AttnQkv
        } else if name.contains("attn_kv_b.weight") {
            Role::AttnKvB
        } else if name.contains("attn_v.weight") {
            Role::AttnV
        } else if name.contains("attn_k.weight") {
            Role::AttnK
        } else if name.contains("attn_q.weight") {
            Role::AttnQ
        } else if name.contains("attn_output.weight") {
            Role::AttnOutput
        } else if name.contains("ffn_up") {
            Role::FfnUp
        } else if name.contains("ffn_gate") {
            Role::FfnGate
        } else if name.contains("ffn_down") {
            Role::FfnDown
        } else {
            Role::Other
        }
    }

    /// The roles that get more bits like `attn_v` (and share its counter).
    fn is_attn_v(self) -> bool {
        matches!(self, Role::AttnV | Role::AttnQkv | Role::AttnKvB)
    }
}

/// What the recipes read of a model's hyperparameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFacts {
    /// `general.architecture` (`"llama"`, `"qwen2"`, `"falcon"`, …).
    pub arch: String,
    /// `{arch}.block_count`: the layer count the `ffn_down` rules divide.
    pub n_layer: i32,
    /// Attention heads of layer 0 (`{arch}.attention.head_count`, 0 when absent).
    pub n_head: u32,
    /// Key/value heads of layer 0 (`{arch}.attention.head_count_kv`, else `n_head`).
    pub n_head_kv: u32,
    /// Experts per MoE layer (`{arch}.expert_count`, 0 when absent).
    pub n_expert: u32,
}

impl ModelFacts {
    /// Reads the facts from a GGUF file's metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<ModelFacts, QuantizeError> {
        let arch = file
            .get("general.architecture")
            .and_then(|v| v.as_str())
            .ok_or_else(|| QuantizeError::MissingKey("general.architecture".into()))?
            .to_string();
        // A per-layer array counts by its first entry (llama.cpp's `n_head(0)`).
        let first = |key: String| -> Option<u64> {
            let v = file.get(&key)?;
            match v.as_array() {
                Some(a) => a.first()?.as_u64(),
                None => v.as_u64(),
            }
        };
        let block_key = format!("{arch}.block_count");
        let n_layer = first(block_key.clone())
            .filter(|&n| n > 0 && n <= 512)
            .ok_or(QuantizeError::MissingKey(block_key))? as i32;
        let n_head = first(format!("{arch}.attention.head_count")).unwrap_or(0) as u32;
        let n_head_kv =
            first(format!("{arch}.attention.head_count_kv")).map_or(n_head, |v| v as u32);
        let n_expert = first(format!("{arch}.expert_count")).unwrap_or(0) as u32;
        Ok(ModelFacts {
            arch,
            n_layer,
            n_head,
            n_head_kv,
            n_expert,
        })
    }

    /// Query heads per key/value head (0 without key/value heads).
    fn n_gqa(&self) -> u32 {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }

    fn is_falcon(&self) -> bool {
        self.arch == "falcon"
    }

    /// Whether llama.cpp classifies the model as "70B" (80 layers in the architectures that
    /// have that size; for `llama`, only with grouped-query attention).
    fn is_70b(&self) -> bool {
        match self.arch.as_str() {
            "llama" => self.n_layer == 80 && self.n_head != self.n_head_kv,
            "qwen2" | "olmo" | "deci" => self.n_layer == 80,
            "jais2" => self.n_layer == 68,
            _ => false,
        }
    }
}

/// A `--tensor-type NAME=TYPE` override: tensors whose name contains a match of the regular
/// expression `NAME` (lower-cased, as llama-quantize does) get `TYPE`.
#[derive(Debug, Clone)]
pub struct TensorTypeOverride {
    /// The pattern as given (lower case).
    pub pattern: String,
    /// The compiled pattern.
    regex: Regex,
    /// The type it gives.
    pub ty: QuantType,
}

impl TensorTypeOverride {
    /// Parses `NAME=TYPE` (`"attn_v=q8_0"`, `"blk\.[0-3]\.ffn_down=q6_k"`).
    pub fn parse(spec: &str) -> Result<TensorTypeOverride, QuantizeError> {
        let bad = |detail: &str| QuantizeError::BadOverride {
            spec: spec.to_string(),
            detail: detail.to_string(),
        };
        let (name, ty) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected NAME=TYPE"))?;
        if name.is_empty() {
            return Err(bad("the tensor name pattern is empty"));
        }
        let ty = QuantType::from_name(ty).ok_or_else(|| {
            bad(&format!(
                "unknown type `{ty}` (one of {})",
                QuantType::ALL.map(|t| t.name()).join(", ")
            ))
        })?;
        let pattern = name.to_lowercase();
        let regex = Regex::new(&pattern).map_err(|e| bad(&e.to_string()))?;
        Ok(TensorTypeOverride { pattern, regex, ty })
    }

    /// Whether the pattern occurs in `name`.
    pub fn matches(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }
}

/// How to choose the types: llama-quantize's options.
#[derive(Debug, Clone)]
pub struct RecipeOptions {
    /// The file type (recipe).
    pub file_type: FileType,
    /// `--pure`: no mixture rules (overrides and shape fallbacks still apply).
    pub pure: bool,
    /// `--tensor-type` overrides, first match wins.
    pub overrides: Vec<TensorTypeOverride>,
    /// `--output-tensor-type`.
    pub output_type: Option<QuantType>,
    /// `--token-embedding-type`.
    pub token_embedding_type: Option<QuantType>,
    /// `--leave-output-tensor`: `output.weight` keeps its type.
    pub leave_output: bool,
    /// `--imatrix`: the importance weights. With at least one entry (after
    /// `--include-weights`/`--exclude-weights`) this is llama.cpp's `qs.has_imatrix`, which
    /// changes a few `ffn_down` choices, and the converted tensors are weighted by it.
    pub imatrix: Option<std::sync::Arc<crate::imatrix::QuantWeights>>,
}

impl RecipeOptions {
    /// Whether an importance matrix with at least one entry is given.
    pub fn has_imatrix(&self) -> bool {
        self.imatrix.as_ref().is_some_and(|m| !m.weights.is_empty())
    }

    /// The default recipe of `file_type`, without overrides.
    pub fn new(file_type: FileType) -> RecipeOptions {
        RecipeOptions {
            file_type,
            pure: false,
            overrides: Vec::new(),
            output_type: None,
            token_embedding_type: None,
            leave_output: false,
            imatrix: None,
        }
    }
}

/// ggml's `ggml_n_dims`: the index of the last axis longer than 1, plus one.
fn n_dims(ne: &[usize; 4]) -> usize {
    (1..4).rev().find(|&i| ne[i] > 1).map_or(1, |i| i + 1)
}

/// Whether llama.cpp's quantize tool converts tensor `name` of shape `ne` at all (its
/// `tensor_allows_quantization`, without the architecture-specific exclusions of models
/// ggrs does not run).
pub fn allows_quantization(name: &str, ne: &[usize; 4], leave_output: bool) -> bool {
    if n_dims(ne) < 2 || !name.ends_with("weight") {
        return false;
    }
    if leave_output && name == "output.weight" {
        return false;
    }
    const KEEP: [&str; 30] = [
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        ".patch_embd",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ];
    const KEEP_MORE: [&str; 5] = [
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_merger",
    ];
    if KEEP
        .iter()
        .chain(KEEP_MORE.iter())
        .any(|s| name.contains(s))
    {
        return false;
    }
    name != "position_embd.weight" && name != "token_types.weight"
}

/// llama.cpp's `tensor_type_fallback`: a type whose blocks do not divide rows of `ncols`
/// values is replaced by one with 32-value blocks, and by F16 if that does not fit either.
/// Returns the type and whether it fell back.
pub fn fallback(ncols: usize, ty: QuantType) -> (QuantType, bool) {
    if ncols.is_multiple_of(ty.block_size()) {
        return (ty, false);
    }
    let f = match ty {
        QuantType::IQ4XS
        | QuantType::IQ1S
        | QuantType::IQ1M
        | QuantType::IQ2XXS
        | QuantType::IQ2XS
        | QuantType::IQ2S
        | QuantType::IQ3XXS
        | QuantType::IQ3S => QuantType::IQ4NL,
        QuantType::Q2_0 | QuantType::Q2K | QuantType::Q3K | QuantType::TQ1_0 | QuantType::TQ2_0 => {
            QuantType::Q4_0
        }
        QuantType::Q4K => QuantType::Q5_0,
        QuantType::Q5K => QuantType::Q5_1,
        QuantType::Q6K => QuantType::Q8_0,
        // A 32-value type has nothing smaller to fall back to: F16 below.
        other => other,
    };
    if ncols.is_multiple_of(f.block_size()) {
        (f, true)
    } else {
        (QuantType::F16, true)
    }
}

/// The layer of a tensor named `blk.N.…` (`None` for other names), as `sscanf("blk.%d.")`.
fn layer_of(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("blk.")?;
    let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
    rest[..digits].parse().ok()
}

/// The counters and facts the mixture rules read while walking the tensors.
struct State<'a> {
    facts: &'a ModelFacts,
    opts: &'a RecipeOptions,
    has_tied_embeddings: bool,
    n_attention_wv: i32,
    i_attention_wv: i32,
    i_ffn_down: i32,
    i_ffn_gate: i32,
    i_ffn_up: i32,
    n_fallback: usize,
}

fn use_more_bits(i_layer: i32, n_layers: i32) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

impl State<'_> {
    /// The layer a per-layer rule uses: the counter, or for MoE models the number in the
    /// name (their expert tensors need not come in layer order).
    fn layer_info(&self, counter: i32, name: &str) -> Result<(i32, i32), QuantizeError> {
        let n_layer = self.facts.n_layer;
        if self.facts.n_expert > 1 {
            let il = layer_of(name).ok_or_else(|| QuantizeError::NoLayer(name.to_string()))?;
            if il >= n_layer {
                return Err(QuantizeError::NoLayer(name.to_string()));
            }
            return Ok((il, n_layer));
        }
        Ok((counter, n_layer))
    }

    /// llama.cpp's `llama_tensor_get_type_impl` for the file types ggrs knows.
    fn mixture(
        &mut self,
        mut new: QuantType,
        t: &TensorInfo,
        role: Role,
    ) -> Result<QuantType, QuantizeError> {
        use FileType as F;
        use QuantType as Q;
        let ft = self.opts.file_type;
        let facts = self.facts;
        let falcon = facts.is_falcon();
        let n_expert = facts.n_expert;
        if role == Role::Output || (self.has_tied_embeddings && role == Role::TokenEmbd) {
            if let Some(o) = self.opts.output_type {
                new = o;
            } else if ft == F::MXFP4Moe || falcon || !t.ne[0].is_multiple_of(new.block_size()) {
                new = Q::Q8_0;
            } else if matches!(
                ft,
                F::IQ2XXS | F::IQ2XS | F::IQ3XXS | F::IQ1S | F::IQ2S | F::IQ2M | F::IQ1M
            ) {
                new = Q::Q5K;
            } else if new != Q::Q8_0 {
                new = Q::Q6K;
            }
        } else if ft == F::MXFP4Moe {
            // MoE experts (3-D weights) MXFP4, every other matrix Q8_0.
            new = if t.ne[2] > 1 { Q::MXFP4 } else { Q::Q8_0 };
        } else if role == Role::TokenEmbd {
            if let Some(e) = self.opts.token_embedding_type {
                new = e;
            } else if matches!(ft, F::IQ2XXS | F::IQ2XS | F::IQ1S | F::IQ1M) {
                new = Q::Q2K;
            } else if matches!(ft, F::IQ2S | F::IQ2M | F::IQ3XXS) {
                new = Q::IQ3S;
            } else if matches!(ft, F::TQ1_0 | F::TQ2_0 | F::Q2_0) {
                new = Q::Q4K;
            }
        } else if matches!(
            ft,
            F::IQ2XXS | F::IQ2XS | F::IQ1S | F::IQ2S | F::IQ2M | F::IQ1M
        ) {
            // The 1- and 2-bit i-quant mixtures: their own rules for these roles only.
            let iq2sm = matches!(ft, F::IQ2S | F::IQ2M);
            if role.is_attn_v() {
                new = if facts.n_gqa() >= 4 || n_expert >= 4 {
                    Q::Q4K
                } else if iq2sm {
                    Q::IQ3S
                } else {
                    Q::Q2K
                };
                self.i_attention_wv += 1;
            } else if n_expert == 8 && role == Role::AttnK {
                new = Q::Q4K;
            } else if role == Role::FfnDown {
                if self.i_ffn_down < facts.n_layer / 8 {
                    new = if iq2sm { Q::IQ3S } else { Q::Q2K };
                }
                self.i_ffn_down += 1;
            } else if role == Role::AttnOutput {
                if n_expert == 8 {
                    new = Q::Q5K;
                } else if matches!(ft, F::IQ1S | F::IQ1M) {
                    new = Q::IQ2XXS;
                } else if iq2sm {
                    new = Q::IQ3S;
                }
            }
        } else if role.is_attn_v() {
            let gqa4 = facts.n_gqa() >= 4;
            let (i, n) = (self.i_attention_wv, self.n_attention_wv);
            match ft {
                F::Q2K => new = if gqa4 { Q::Q4K } else { Q::Q3K },
                F::Q2KS if gqa4 => new = Q::Q4K,
                F::IQ3XXS => {
                    new = if gqa4 {
                        Q::Q4K
                    } else if !self.opts.has_imatrix() {
                        Q::IQ3S
                    } else {
                        Q::IQ3XXS
                    }
                }
                F::IQ3XS | F::IQ3S if gqa4 => new = Q::Q4K,
                F::IQ3M => new = Q::Q4K,
                F::Q3KM => new = if i < 2 { Q::Q5K } else { Q::Q4K },
                F::Q3KL => new = Q::Q5K,
                F::IQ4NL | F::IQ4XS if gqa4 => new = Q::Q5K,
                F::Q4KM | F::Q5KM if use_more_bits(i, n) => new = Q::Q6K,
                F::Q4KS if i < 4 => new = Q::Q5K,
                _ => {}
            }
            if facts.is_70b() && (new == Q::Q3K || new == Q::Q4K) {
                new = Q::Q5K;
            }
            if n_expert == 8 {
                new = Q::Q8_0;
            }
            self.i_attention_wv += 1;
        } else if role == Role::AttnK {
            if n_expert == 8 {
                new = Q::Q8_0;
            } else if ft == F::IQ3XS {
                new = Q::IQ3XXS;
            } else if ft == F::IQ3XXS {
                new = Q::IQ2S;
            }
        } else if role == Role::AttnQ {
            if ft == F::IQ3XS {
                new = Q::IQ3XXS;
            } else if ft == F::IQ3XXS {
                new = Q::IQ2S;
            }
        } else if role == Role::FfnDown {
            let (il, nl) = self.layer_info(self.i_ffn_down, &t.name)?;
            let more = use_more_bits(il, nl);
            match ft {
                F::Q2K => new = Q::Q3K,
                F::Q2KS if il < nl / 8 => new = Q::Q4K,
                F::IQ3XXS if !self.opts.has_imatrix() => {
                    new = if il < nl / 8 { Q::Q4K } else { Q::Q3K }
                }
                F::Q3KM => {
                    new = if il < nl / 16 {
                        Q::Q5K
                    } else if !falcon || more {
                        Q::Q4K
                    } else {
                        Q::Q3K
                    }
                }
                F::IQ3M if il < nl / 8 || (n_expert == 8 && more) => new = Q::Q4K,
                F::Q3KL => new = if falcon { Q::Q4K } else { Q::Q5K },
                F::Q4KM => {
                    if falcon {
                        new = if il < nl / 16 {
                            Q::Q6K
                        } else if more {
                            Q::Q5K
                        } else {
                            Q::Q4K
                        };
                    } else if more {
                        new = Q::Q6K;
                    }
                }
                F::IQ4NL | F::IQ4XS if il < nl / 8 && !self.opts.has_imatrix() => new = Q::Q5K,
                F::Q5KM if more => new = Q::Q6K,
                F::Q4KS if !falcon && il < nl / 8 => new = Q::Q5K,
                // Guarding the first ffn_down layers, only with an importance matrix.
                F::Q4_0 if self.opts.has_imatrix() && il < nl / 8 => new = Q::Q4_1,
                F::Q5_0 if self.opts.has_imatrix() && il < nl / 8 => new = Q::Q5_1,
                _ => {}
            }
            self.i_ffn_down += 1;
        } else if role == Role::AttnOutput {
            if !falcon {
                if n_expert == 8 {
                    if matches!(
                        ft,
                        F::Q2K
                            | F::IQ3XS
                            | F::IQ3XXS
                            | F::Q3KS
                            | F::Q3KM
                            | F::IQ4NL
                            | F::Q4KS
                            | F::Q4KM
                            | F::IQ3S
                            | F::IQ3M
                            | F::IQ4XS
                    ) {
                        new = Q::Q5K;
                    }
                } else {
                    match ft {
                        F::Q2K => new = Q::Q3K,
                        F::IQ3XXS => new = Q::IQ3S,
                        F::Q3KM => new = Q::Q4K,
                        F::Q3KL => new = Q::Q5K,
                        F::IQ3M => new = Q::Q4K,
                        _ => {}
                    }
                }
            } else if ft == F::Q3KL {
                new = Q::Q4K;
            }
        } else if role == Role::AttnQkv {
            match ft {
                F::Q3KM | F::Q3KL | F::IQ3M => new = Q::Q4K,
                F::Q4KM => new = Q::Q5K,
                F::Q5KM => new = Q::Q6K,
                _ => {}
            }
        } else if role == Role::FfnGate || role == Role::FfnUp {
            // Only the IQ3_XS mixture changes gate and up (the middle three quarters of the
            // layers IQ3_XXS); the layer is resolved whatever the mixture, as llama.cpp does,
            // so that a MoE name without a layer is an error.
            let counter = if role == Role::FfnGate {
                &mut self.i_ffn_gate
            } else {
                &mut self.i_ffn_up
            };
            let c = *counter;
            *counter += 1;
            let (il, nl) = self.layer_info(c, &t.name)?;
            if ft == F::IQ3XS && il >= nl / 8 && il < 7 * nl / 8 {
                new = Q::IQ3XXS;
            }
        }
        Ok(new)
    }

    /// llama.cpp's `llama_tensor_get_type` for a tensor that may be quantized.
    fn tensor_type(&mut self, t: &TensorInfo, role: Role) -> Result<QuantType, QuantizeError> {
        let opts = self.opts;
        if let Some(e) = opts.token_embedding_type {
            if role == Role::TokenEmbd {
                // A pattern naming the per-layer table takes precedence over this option.
                let named = t.name == "per_layer_token_embd.weight"
                    && opts.overrides.iter().any(|o| o.matches(&t.name));
                if !named {
                    return Ok(e);
                }
            }
        }
        if let Some(o) = opts.output_type {
            if role == Role::Output {
                return Ok(o);
            }
        }
        let mut new = opts.file_type.default_type();
        if new.is_quantized() {
            let manual = opts.overrides.iter().find(|o| o.matches(&t.name));
            if let Some(o) = manual {
                new = o.ty;
            } else if !opts.pure {
                new = self.mixture(new, t, role)?;
            }
            let (f, fell) = fallback(t.ne[0], new);
            self.n_fallback += usize::from(fell);
            new = f;
        }
        Ok(new)
    }
}

/// The outcome of [`choose_types`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// Per tensor (in the order given): the type llama.cpp's quantize tool gives it, or
    /// `None` when it keeps its own type (1-D tensors, norms, …).
    pub types: Vec<Option<QuantType>>,
    /// Tensors whose rows did not fit their type's blocks and fell back to another.
    pub n_fallback: usize,
    /// llama.cpp's tensor order (see [`tensor_order`]), in which its quantize tool also
    /// writes them.
    pub order: Vec<usize>,
}

/// llama.cpp's tensor order (its `weights_map`): by layer number (tensors outside the
/// layers first), then by name. Returns indices into `tensors`.
pub fn tensor_order(tensors: &[TensorInfo]) -> Vec<usize> {
    let key = |i: usize| (layer_of(&tensors[i].name).unwrap_or(-1), &tensors[i].name);
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| key(a).cmp(&key(b)));
    order
}

/// Chooses every tensor's type as llama.cpp's quantize tool does for a model with
/// hyperparameters `facts` (see the [module docs](self)).
pub fn choose_types(
    tensors: &[TensorInfo],
    facts: &ModelFacts,
    opts: &RecipeOptions,
) -> Result<Choice, QuantizeError> {
    let roles: Vec<Role> = tensors.iter().map(|t| Role::of(&t.name)).collect();
    let mut state = State {
        facts,
        opts,
        has_tied_embeddings: !roles.contains(&Role::Output),
        n_attention_wv: roles.iter().filter(|r| r.is_attn_v()).count() as i32,
        i_attention_wv: 0,
        i_ffn_down: 0,
        i_ffn_gate: 0,
        i_ffn_up: 0,
        n_fallback: 0,
    };
    let order = tensor_order(tensors);
    let mut types = vec![None; tensors.len()];
    for &i in &order {
        let t = &tensors[i];
        if allows_quantization(&t.name, &t.ne, opts.leave_output) {
            types[i] = Some(state.tensor_type(t, roles[i])?);
        }
    }
    Ok(Choice {
        types,
        n_fallback: state.n_fallback,
        order,
    })
}
