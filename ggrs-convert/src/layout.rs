//! What each supported architecture becomes in GGUF: the metadata keys from `config.json`
//! and the list of tensors (Hugging Face name → GGUF name, expected shape, row transform).

use ggrs_core::gguf::Value;
use serde_json::Value as Json;

use super::error::ConvertError;
use super::safetensors::Checkpoint;

/// The architectures the converter reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceArch {
    /// `LlamaForCausalLM` → llama.cpp's `llama`.
    Llama,
    /// `Qwen2ForCausalLM` → llama.cpp's `qwen2`.
    Qwen2,
    /// ChatGLM2/3 `ChatGLMModel` → llama.cpp's `chatglm`.
    ChatGlm2,
    /// ChatGLM-6B v1 `ChatGLMModel` (its config has `position_encoding_2d`) → our
    /// `chatglm1` (see `docs/gguf-chatglm1.md`).
    ChatGlm1,
}

impl SourceArch {
    /// Picks the architecture from `config.json`'s `architectures` (and, for `ChatGLMModel`,
    /// the presence of `position_encoding_2d`, which only the v1 configuration has).
    pub fn detect(cfg: &Json) -> Result<SourceArch, ConvertError> {
        let found: Vec<String> = cfg
            .get("architectures")
            .and_then(Json::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        for name in &found {
            match name.as_str() {
                "LlamaForCausalLM" => return Ok(SourceArch::Llama),
                "Qwen2ForCausalLM" => return Ok(SourceArch::Qwen2),
                "ChatGLMModel" | "ChatGLMForConditionalGeneration" => {
                    return Ok(if cfg.get("position_encoding_2d").is_some() {
                        SourceArch::ChatGlm1
                    } else {
                        SourceArch::ChatGlm2
                    })
                }
                _ => {}
            }
        }
        Err(ConvertError::UnsupportedArchitecture { found })
    }

    /// The GGUF `general.architecture` it becomes.
    pub fn gguf_name(self) -> &'static str {
        match self {
            SourceArch::Llama => "llama",
            SourceArch::Qwen2 => "qwen2",
            SourceArch::ChatGlm2 => "chatglm",
            SourceArch::ChatGlm1 => "chatglm1",
        }
    }
}

/// How a tensor's rows are reordered on the way to GGUF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    /// Rows (and elements of a 1-D tensor) kept in checkpoint order.
    None,
    /// llama.cpp's Q/K permutation for LLaMA's rotary convention: within each of `n_head`
    /// heads of `d` rows, output row `2j + t` is input row `t·d/2 + j` (the two halves of
    /// the head, which Hugging Face rotates as pairs `(j, j + d/2)`, are interleaved so
    /// that GGML's normal-mode rope pairs adjacent rows `(2j, 2j + 1)`).
    RopePermute {
        /// Heads in the tensor.
        n_head: usize,
    },
}

/// One tensor of the output.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Name in the checkpoint.
    pub hf_name: String,
    /// Name in the GGUF.
    pub gguf_name: String,
    /// Shape the checkpoint must have (PyTorch order, outermost first).
    pub shape: Vec<usize>,
    /// Row reordering.
    pub transform: Transform,
}

/// Metadata and tensors of one conversion.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Source architecture.
    pub arch: SourceArch,
    /// Architecture keys in the order they are written (`general.*` and `<arch>.*`).
    pub metadata: Vec<(String, Value)>,
    /// Output tensors in order.
    pub tensors: Vec<Planned>,
    /// Rows of the embedding table (the vocabulary the tokenizer is padded to).
    pub n_vocab: usize,
    /// Checkpoint tensors that are read by no output tensor and dropped on purpose.
    pub dropped: Vec<String>,
}

/// Typed access to `config.json`.
pub(crate) struct Cfg<'a>(pub &'a Json);

impl Cfg<'_> {
    fn find<'k>(&self, keys: &[&'k str]) -> Option<(&'k str, &Json)> {
        keys.iter()
            .find_map(|k| self.0.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)))
    }

    pub(crate) fn opt_usize(&self, keys: &[&str]) -> Result<Option<usize>, ConvertError> {
        match self.find(keys) {
            None => Ok(None),
            Some((k, v)) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| ConvertError::Config {
                    key: k.to_string(),
                    detail: format!("should be a non-negative integer, found {v}"),
                }),
        }
    }

    pub(crate) fn usize(&self, keys: &[&str]) -> Result<usize, ConvertError> {
        self.opt_usize(keys)?.ok_or_else(|| ConvertError::Config {
            key: keys.join("|"),
            detail: "is missing (the architecture needs it)".into(),
        })
    }

    fn positive(&self, keys: &[&str]) -> Result<usize, ConvertError> {
        let v = self.usize(keys)?;
        if v == 0 {
            return Err(ConvertError::Config {
                key: keys[0].to_string(),
                detail: "is 0".into(),
            });
        }
        Ok(v)
    }

    fn opt_f64(&self, keys: &[&str]) -> Result<Option<f64>, ConvertError> {
        match self.find(keys) {
            None => Ok(None),
            Some((k, v)) => v.as_f64().map(Some).ok_or_else(|| ConvertError::Config {
                key: k.to_string(),
                detail: format!("should be a number, found {v}"),
            }),
        }
    }

    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>, ConvertError> {
        match self.find(&[key]) {
            None => Ok(None),
            Some((k, v)) => v.as_bool().map(Some).ok_or_else(|| ConvertError::Config {
                key: k.to_string(),
                detail: format!("should be true or false, found {v}"),
            }),
        }
    }

    /// A token id: an integer, or the first of a list (`eos_token_id: [2, 3]`).
    pub(crate) fn token_id(&self, key: &str) -> Result<Option<u32>, ConvertError> {
        let Some((k, v)) = self.find(&[key]) else {
            return Ok(None);
        };
        let v = match v.as_array() {
            Some(a) => match a.first() {
                Some(first) => first,
                None => return Ok(None),
            },
            None => v,
        };
        v.as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| ConvertError::Config {
                key: k.to_string(),
                detail: format!("should be a token id, found {v}"),
            })
    }
}

/// Whether a planned tensor must be in the checkpoint.
#[derive(Clone, Copy)]
enum Req {
    /// Required: a missing one is an error.
    Need,
    /// Optional: taken when present.
    Maybe,
}

/// One tensor of a block (see [`Plan::block`]).
type BlockPart<'s> = (Req, &'static str, &'static str, &'s [usize], Transform);

/// Builds the output tensor list against a checkpoint: required tensors must exist,
/// optional ones are taken when present.
struct Plan<'a> {
    ck: &'a Checkpoint,
    arch: &'static str,
    tensors: Vec<Planned>,
}

impl Plan<'_> {
    fn add(
        &mut self,
        req: Req,
        hf: String,
        gguf: String,
        shape: Vec<usize>,
        transform: Transform,
    ) -> Result<(), ConvertError> {
        if self.ck.get(&hf).is_none() {
            return match req {
                Req::Maybe => Ok(()),
                Req::Need => Err(ConvertError::MissingTensor {
                    name: hf,
                    gguf_name: gguf,
                    arch: self.arch.into(),
                }),
            };
        }
        self.tensors.push(Planned {
            hf_name: hf,
            gguf_name: gguf,
            shape,
            transform,
        });
        Ok(())
    }

    fn need(
        &mut self,
        hf: String,
        gguf: String,
        shape: Vec<usize>,
        transform: Transform,
    ) -> Result<(), ConvertError> {
        self.add(Req::Need, hf, gguf, shape, transform)
    }

    /// Plans the tensors of one block, in order: each part is (required or not, name under
    /// the checkpoint's block prefix `hf`, name under the GGUF block prefix `gguf`, shape,
    /// row transform).
    fn block(&mut self, hf: &str, gguf: &str, parts: &[BlockPart]) -> Result<(), ConvertError> {
        for (req, h, g, shape, transform) in parts {
            let (h, g) = (format!("{hf}.{h}"), format!("{gguf}.{g}"));
            self.add(*req, h, g, shape.to_vec(), *transform)?;
        }
        Ok(())
    }
}

/// The metadata of one conversion, in the order it is written.
struct Meta {
    /// The GGUF architecture: the prefix of the architecture keys.
    arch: &'static str,
    kv: Vec<(String, Value)>,
}

impl Meta {
    /// `<arch>.<key>` = `v`.
    fn put(&mut self, key: &str, v: Value) {
        self.kv.push((format!("{}.{key}", self.arch), v));
    }

    /// `<arch>.<key>` = `v` as a u32 for each `(key, config key, v)`, in order; the config
    /// key `v` was read from is named when it does not fit.
    fn u32s(&mut self, entries: &[(&str, &str, usize)]) -> Result<(), ConvertError> {
        for &(key, from, v) in entries {
            let v = u32::try_from(v).map_err(|_| ConvertError::Config {
                key: from.into(),
                detail: format!("{v} does not fit in a u32"),
            })?;
            self.put(key, Value::U32(v));
        }
        Ok(())
    }
}

/// The metadata and tensor list for `arch`, checked against the checkpoint's names (not
/// yet its shapes: see [`check`]).
pub fn build(
    arch: SourceArch,
    cfg: &Json,
    ck: &Checkpoint,
    name: &str,
) -> Result<Layout, ConvertError> {
    use Req::{Maybe, Need};
    let c = Cfg(cfg);
    let a = arch.gguf_name();
    let mut md = Meta {
        arch: a,
        kv: vec![
            ("general.architecture".into(), Value::String(a.into())),
            ("general.name".into(), Value::String(name.into())),
        ],
    };
    let mut plan = Plan {
        ck,
        arch: a,
        tensors: Vec::new(),
    };
    let mut dropped = Vec::new();
    let n_vocab;
    let n = Transform::None;
    match arch {
        SourceArch::Llama | SourceArch::Qwen2 => {
            let n_embd = c.positive(&["hidden_size"])?;
            let n_layer = c.positive(&["num_hidden_layers"])?;
            let n_head = c.positive(&["num_attention_heads"])?;
            let n_head_kv = c.opt_usize(&["num_key_value_heads"])?.unwrap_or(n_head);
            let n_ff = c.positive(&["intermediate_size"])?;
            n_vocab = c.positive(&["vocab_size"])?;
            let head_dim_key = c.opt_usize(&["head_dim"])?;
            let head_dim = head_dim_key.unwrap_or(n_embd / n_head);
            if n_head_kv == 0 || n_head % n_head_kv != 0 || head_dim == 0 || head_dim % 2 != 0 {
                return Err(ConvertError::Config {
                    key: "num_key_value_heads".into(),
                    detail: format!(
                        "{n_head_kv} KV heads, {n_head} heads and head size {head_dim} do not \
                         fit (KV heads must divide the heads, the head size must be even)"
                    ),
                });
            }
            let eps = c.opt_f64(&["rms_norm_eps"])?.unwrap_or(1e-6);
            let ctx = c.opt_usize(&["max_position_embeddings"])?.unwrap_or(2048);
            let theta = c.opt_f64(&["rope_theta"])?.unwrap_or(10000.0);
            md.u32s(&[
                ("context_length", "max_position_embeddings", ctx),
                ("embedding_length", "hidden_size", n_embd),
                ("block_count", "num_hidden_layers", n_layer),
                ("feed_forward_length", "intermediate_size", n_ff),
                ("attention.head_count", "num_attention_heads", n_head),
                ("attention.head_count_kv", "num_key_value_heads", n_head_kv),
            ])?;
            md.put("attention.layer_norm_rms_epsilon", Value::F32(eps as f32));
            if let Some(hd) = head_dim_key {
                md.u32s(&[
                    ("attention.key_length", "head_dim", hd),
                    ("attention.value_length", "head_dim", hd),
                ])?;
            }
            md.put("rope.freq_base", Value::F32(theta as f32));
            if arch == SourceArch::Llama {
                md.u32s(&[
                    ("rope.dimension_count", "head_dim", head_dim),
                    ("vocab_size", "vocab_size", n_vocab),
                ])?;
            }
            if let Some(rs) = cfg.get("rope_scaling").and_then(Json::as_object) {
                let kind = rs
                    .get("rope_type")
                    .or_else(|| rs.get("type"))
                    .and_then(Json::as_str);
                let factor = rs.get("factor").and_then(Json::as_f64);
                match (kind, factor) {
                    (Some("linear"), Some(f)) => {
                        md.put("rope.scaling.type", Value::String("linear".into()));
                        md.put("rope.scaling.factor", Value::F32(f as f32));
                    }
                    (Some("default") | None, _) => {}
                    (Some(other), _) => {
                        return Err(ConvertError::Config {
                            key: "rope_scaling".into(),
                            detail: format!(
                                "has type `{other}`, which the converter does not carry over \
                                 (only `linear` is)"
                            ),
                        })
                    }
                }
            }
            let (q, kv) = (n_head * head_dim, n_head_kv * head_dim);
            let (perm_q, perm_k) = if arch == SourceArch::Llama {
                (
                    Transform::RopePermute { n_head },
                    Transform::RopePermute { n_head: n_head_kv },
                )
            } else {
                (n, n)
            };
            // Qwen2 always has Q/K/V biases; LLaMA variants may (then permuted like the rows).
            let qkv_bias = if arch == SourceArch::Qwen2 {
                Need
            } else {
                Maybe
            };
            plan.need(
                "model.embed_tokens.weight".into(),
                "token_embd.weight".into(),
                vec![n_vocab, n_embd],
                n,
            )?;
            #[rustfmt::skip]
            let parts: &[BlockPart] = &[
                (Need, "input_layernorm.weight", "attn_norm.weight", &[n_embd], n),
                (Need, "self_attn.q_proj.weight", "attn_q.weight", &[q, n_embd], perm_q),
                (Need, "self_attn.k_proj.weight", "attn_k.weight", &[kv, n_embd], perm_k),
                (Need, "self_attn.v_proj.weight", "attn_v.weight", &[kv, n_embd], n),
                (qkv_bias, "self_attn.q_proj.bias", "attn_q.bias", &[q], perm_q),
                (qkv_bias, "self_attn.k_proj.bias", "attn_k.bias", &[kv], perm_k),
                (qkv_bias, "self_attn.v_proj.bias", "attn_v.bias", &[kv], n),
                (Need, "self_attn.o_proj.weight", "attn_output.weight", &[n_embd, q], n),
                (Maybe, "self_attn.o_proj.bias", "attn_output.bias", &[n_embd], n),
                (Need, "post_attention_layernorm.weight", "ffn_norm.weight", &[n_embd], n),
                (Need, "mlp.gate_proj.weight", "ffn_gate.weight", &[n_ff, n_embd], n),
                (Need, "mlp.up_proj.weight", "ffn_up.weight", &[n_ff, n_embd], n),
                (Need, "mlp.down_proj.weight", "ffn_down.weight", &[n_embd, n_ff], n),
                (Maybe, "mlp.gate_proj.bias", "ffn_gate.bias", &[n_ff], n),
                (Maybe, "mlp.up_proj.bias", "ffn_up.bias", &[n_ff], n),
                (Maybe, "mlp.down_proj.bias", "ffn_down.bias", &[n_embd], n),
            ];
            for i in 0..n_layer {
                let h = format!("model.layers.{i}");
                plan.block(&h, &format!("blk.{i}"), parts)?;
                dropped.push(format!("{h}.self_attn.rotary_emb.inv_freq"));
            }
            plan.need(
                "model.norm.weight".into(),
                "output_norm.weight".into(),
                vec![n_embd],
                n,
            )?;
            // Like llama.cpp: the output matrix is written when the checkpoint has it; when it
            // does not, the model must tie it to the embeddings.
            let tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(false);
            plan.add(
                if tied { Maybe } else { Need },
                "lm_head.weight".into(),
                "output.weight".into(),
                vec![n_vocab, n_embd],
                n,
            )?;
        }
        SourceArch::ChatGlm2 => {
            let n_embd = c.positive(&["hidden_size"])?;
            let n_layer = c.positive(&["num_layers", "num_hidden_layers"])?;
            let n_head = c.positive(&["num_attention_heads"])?;
            let mqa = c.opt_bool("multi_query_attention")?.unwrap_or(false);
            let n_head_kv = if mqa {
                c.positive(&["multi_query_group_num"])?
            } else {
                n_head
            };
            let head_dim = c.opt_usize(&["kv_channels"])?.unwrap_or(n_embd / n_head);
            let n_ff = c.positive(&["ffn_hidden_size"])?;
            n_vocab = c.positive(&["padded_vocab_size", "vocab_size"])?;
            let ctx = c.opt_usize(&["seq_length"])?.unwrap_or(n_embd);
            let eps = c.opt_f64(&["layernorm_epsilon"])?.unwrap_or(1e-5);
            let rope_ratio = c.opt_f64(&["rope_ratio"])?.unwrap_or(1.0);
            if c.opt_bool("rmsnorm")? == Some(false) {
                return Err(ConvertError::Config {
                    key: "rmsnorm".into(),
                    detail: "is false; llama.cpp's chatglm layout assumes RMSNorm".into(),
                });
            }
            md.u32s(&[
                ("context_length", "seq_length", ctx),
                ("embedding_length", "hidden_size", n_embd),
                ("feed_forward_length", "ffn_hidden_size", n_ff),
                ("block_count", "num_layers", n_layer),
                ("attention.head_count", "num_attention_heads", n_head),
                (
                    "attention.head_count_kv",
                    "multi_query_group_num",
                    n_head_kv,
                ),
            ])?;
            md.put("attention.layer_norm_rms_epsilon", Value::F32(eps as f32));
            // llama.cpp: half of each head is rotated (partial_rotary_factor 0.5).
            md.u32s(&[("rope.dimension_count", "hidden_size", n_embd / n_head / 2)])?;
            md.put("rope.freq_base", Value::F32((10000.0 * rope_ratio) as f32));
            md.kv
                .push(("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)));
            let (qkv, n_qh) = ((n_head + 2 * n_head_kv) * head_dim, n_head * head_dim);
            let t = |s: &str| format!("transformer.{s}");
            plan.need(
                t("embedding.word_embeddings.weight"),
                "token_embd.weight".into(),
                vec![n_vocab, n_embd],
                n,
            )?;
            #[rustfmt::skip]
            let parts: &[BlockPart] = &[
                (Need, "input_layernorm.weight", "attn_norm.weight", &[n_embd], n),
                (Need, "self_attention.query_key_value.weight", "attn_qkv.weight",
                    &[qkv, n_embd], n),
                (Maybe, "self_attention.query_key_value.bias", "attn_qkv.bias", &[qkv], n),
                (Need, "self_attention.dense.weight", "attn_output.weight", &[n_embd, n_qh], n),
                (Need, "post_attention_layernorm.weight", "ffn_norm.weight", &[n_embd], n),
                (Need, "mlp.dense_h_to_4h.weight", "ffn_up.weight", &[2 * n_ff, n_embd], n),
                (Need, "mlp.dense_4h_to_h.weight", "ffn_down.weight", &[n_embd, n_ff], n),
            ];
            for i in 0..n_layer {
                let h = format!("transformer.encoder.layers.{i}");
                plan.block(&h, &format!("blk.{i}"), parts)?;
            }
            plan.need(
                t("encoder.final_layernorm.weight"),
                "output_norm.weight".into(),
                vec![n_embd],
                n,
            )?;
            plan.need(
                t("output_layer.weight"),
                "output.weight".into(),
                vec![n_vocab, n_embd],
                n,
            )?;
            dropped.push(t("rotary_pos_emb.inv_freq"));
        }
        SourceArch::ChatGlm1 => {
            let n_embd = c.positive(&["hidden_size"])?;
            let n_layer = c.positive(&["num_layers"])?;
            let n_head = c.positive(&["num_attention_heads"])?;
            let n_ff = c.opt_usize(&["inner_hidden_size"])?.unwrap_or(4 * n_embd);
            n_vocab = c.positive(&["vocab_size"])?;
            let ctx = c.opt_usize(&["max_sequence_length"])?.unwrap_or(2048);
            let eps = c.opt_f64(&["layernorm_epsilon"])?.unwrap_or(1e-5);
            let pe2d = c.opt_bool("position_encoding_2d")?.unwrap_or(true);
            if n_embd % n_head != 0 || (n_embd / n_head) % 4 != 0 {
                return Err(ConvertError::Config {
                    key: "num_attention_heads".into(),
                    detail: format!(
                        "{n_head} heads do not split width {n_embd} into heads whose size is a \
                         multiple of 4 (two rotated halves of even size)"
                    ),
                });
            }
            let head_dim = n_embd / n_head;
            md.u32s(&[
                ("context_length", "max_sequence_length", ctx),
                ("embedding_length", "hidden_size", n_embd),
                ("feed_forward_length", "inner_hidden_size", n_ff),
                ("block_count", "num_layers", n_layer),
                ("attention.head_count", "num_attention_heads", n_head),
            ])?;
            md.put("attention.layer_norm_epsilon", Value::F32(eps as f32));
            md.put("rope.freq_base", Value::F32(10000.0));
            md.u32s(&[("rope.dimension_count", "hidden_size", head_dim / 2)])?;
            // The official GLMBlock never receives num_layers: its default 28 gives
            // alpha = sqrt(2 * 28) for every model size.
            md.put("residual_scale", Value::F32(56f32.sqrt()));
            md.put("position_encoding_2d", Value::Bool(pe2d));
            plan.need(
                "transformer.word_embeddings.weight".into(),
                "token_embd.weight".into(),
                vec![n_vocab, n_embd],
                n,
            )?;
            for i in 0..n_layer {
                let h = |s: &str| format!("transformer.layers.{i}.{s}");
                let g = |s: &str| format!("blk.{i}.{s}");
                // (HF prefix, GGUF prefix, rows, columns; columns 0 for a LayerNorm), each
                // with a weight and a bias, in the order of the block's computation.
                let parts = [
                    ("input_layernorm", "attn_norm", n_embd, 0),
                    ("attention.query_key_value", "attn_qkv", 3 * n_embd, n_embd),
                    ("attention.dense", "attn_output", n_embd, n_embd),
                    ("post_attention_layernorm", "ffn_norm", n_embd, 0),
                    ("mlp.dense_h_to_4h", "ffn_up", n_ff, n_embd),
                    ("mlp.dense_4h_to_h", "ffn_down", n_embd, n_ff),
                ];
                for (hs, gs, rows, cols) in parts {
                    let wshape = if cols == 0 {
                        vec![rows]
                    } else {
                        vec![rows, cols]
                    };
                    plan.need(
                        h(&format!("{hs}.weight")),
                        g(&format!("{gs}.weight")),
                        wshape,
                        n,
                    )?;
                    plan.need(
                        h(&format!("{hs}.bias")),
                        g(&format!("{gs}.bias")),
                        vec![rows],
                        n,
                    )?;
                }
                dropped.push(h("attention.rotary_emb.inv_freq"));
            }
            plan.need(
                "transformer.final_layernorm.weight".into(),
                "output_norm.weight".into(),
                vec![n_embd],
                n,
            )?;
            plan.need(
                "transformer.final_layernorm.bias".into(),
                "output_norm.bias".into(),
                vec![n_embd],
                n,
            )?;
            // Hugging Face ties lm_head to the embeddings unless the config says otherwise
            // (reference README item 12): then the GGUF has no output.weight.
            if c.opt_bool("tie_word_embeddings")?.unwrap_or(true) {
                dropped.push("lm_head.weight".into());
            } else {
                plan.need(
                    "lm_head.weight".into(),
                    "output.weight".into(),
                    vec![n_vocab, n_embd],
                    n,
                )?;
            }
        }
    }
    Ok(Layout {
        arch,
        metadata: md.kv,
        tensors: plan.tensors,
        n_vocab,
        dropped,
    })
}

/// Checks that every planned tensor has its expected shape and a float type, and that the
/// checkpoint has no tensor the layout does not place (or drop on purpose).
pub fn check(layout: &Layout, ck: &Checkpoint) -> Result<(), ConvertError> {
    use super::safetensors::StDtype;
    for p in &layout.tensors {
        // `build` only plans tensors the checkpoint has.
        let Some(t) = ck.get(&p.hf_name) else {
            return Err(ConvertError::MissingTensor {
                name: p.hf_name.clone(),
                gguf_name: p.gguf_name.clone(),
                arch: layout.arch.gguf_name().into(),
            });
        };
        if t.shape != p.shape {
            return Err(ConvertError::TensorShape {
                name: p.hf_name.clone(),
                found: t.shape.clone(),
                expected: p.shape.clone(),
            });
        }
        if !matches!(t.dtype, StDtype::Float(_)) {
            return Err(ConvertError::TensorDtype {
                name: p.hf_name.clone(),
                dtype: t.dtype.name(),
            });
        }
    }
    let placed: std::collections::HashSet<&str> = layout
        .tensors
        .iter()
        .map(|p| p.hf_name.as_str())
        .chain(layout.dropped.iter().map(String::as_str))
        .collect();
    if let Some(t) = ck
        .tensors
        .iter()
        .find(|t| !placed.contains(t.name.as_str()))
    {
        return Err(ConvertError::UnexpectedTensor {
            name: t.name.clone(),
            arch: layout.arch.gguf_name().into(),
        });
    }
    Ok(())
}
