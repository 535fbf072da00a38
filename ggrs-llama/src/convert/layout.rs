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

/// Builds the output tensor list against a checkpoint: required tensors must exist,
/// optional ones are taken when present.
struct Plan<'a> {
    ck: &'a Checkpoint,
    arch: &'static str,
    tensors: Vec<Planned>,
}

impl Plan<'_> {
    fn need(
        &mut self,
        hf: String,
        gguf: String,
        shape: Vec<usize>,
        transform: Transform,
    ) -> Result<(), ConvertError> {
        if self.ck.get(&hf).is_none() {
            return Err(ConvertError::MissingTensor {
                name: hf,
                gguf_name: gguf,
                arch: self.arch.into(),
            });
        }
        self.tensors.push(Planned {
            hf_name: hf,
            gguf_name: gguf,
            shape,
            transform,
        });
        Ok(())
    }

    fn maybe(&mut self, hf: String, gguf: String, shape: Vec<usize>, transform: Transform) {
        if self.ck.get(&hf).is_some() {
            self.tensors.push(Planned {
                hf_name: hf,
                gguf_name: gguf,
                shape,
                transform,
            });
        }
    }
}

fn put(md: &mut Vec<(String, Value)>, arch: &str, key: &str, v: Value) {
    md.push((format!("{arch}.{key}"), v));
}

fn u32v(key: &str, v: usize) -> Result<Value, ConvertError> {
    u32::try_from(v)
        .map(Value::U32)
        .map_err(|_| ConvertError::Config {
            key: key.into(),
            detail: format!("{v} does not fit in a u32"),
        })
}

/// The metadata and tensor list for `arch`, checked against the checkpoint's names (not
/// yet its shapes: see [`check_shapes`]).
pub fn build(
    arch: SourceArch,
    cfg: &Json,
    ck: &Checkpoint,
    name: &str,
) -> Result<Layout, ConvertError> {
    let c = Cfg(cfg);
    let a = arch.gguf_name();
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        ("general.name".into(), Value::String(name.into())),
    ];
    let mut plan = Plan {
        ck,
        arch: a,
        tensors: Vec::new(),
    };
    let mut dropped = Vec::new();
    let n_vocab;
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
            put(
                &mut md,
                a,
                "context_length",
                u32v("max_position_embeddings", ctx)?,
            );
            put(&mut md, a, "embedding_length", u32v("hidden_size", n_embd)?);
            put(
                &mut md,
                a,
                "block_count",
                u32v("num_hidden_layers", n_layer)?,
            );
            put(
                &mut md,
                a,
                "feed_forward_length",
                u32v("intermediate_size", n_ff)?,
            );
            put(
                &mut md,
                a,
                "attention.head_count",
                u32v("num_attention_heads", n_head)?,
            );
            put(
                &mut md,
                a,
                "attention.head_count_kv",
                u32v("num_key_value_heads", n_head_kv)?,
            );
            put(
                &mut md,
                a,
                "attention.layer_norm_rms_epsilon",
                Value::F32(eps as f32),
            );
            if let Some(hd) = head_dim_key {
                put(&mut md, a, "attention.key_length", u32v("head_dim", hd)?);
                put(&mut md, a, "attention.value_length", u32v("head_dim", hd)?);
            }
            put(&mut md, a, "rope.freq_base", Value::F32(theta as f32));
            if arch == SourceArch::Llama {
                put(
                    &mut md,
                    a,
                    "rope.dimension_count",
                    u32v("head_dim", head_dim)?,
                );
                put(&mut md, a, "vocab_size", u32v("vocab_size", n_vocab)?);
            }
            if let Some(rs) = cfg.get("rope_scaling").and_then(Json::as_object) {
                let kind = rs
                    .get("rope_type")
                    .or_else(|| rs.get("type"))
                    .and_then(Json::as_str);
                let factor = rs.get("factor").and_then(Json::as_f64);
                match (kind, factor) {
                    (Some("linear"), Some(f)) => {
                        put(
                            &mut md,
                            a,
                            "rope.scaling.type",
                            Value::String("linear".into()),
                        );
                        put(&mut md, a, "rope.scaling.factor", Value::F32(f as f32));
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
                (Transform::None, Transform::None)
            };
            plan.need(
                "model.embed_tokens.weight".into(),
                "token_embd.weight".into(),
                vec![n_vocab, n_embd],
                Transform::None,
            )?;
            for i in 0..n_layer {
                let h = |s: &str| format!("model.layers.{i}.{s}");
                let g = |s: &str| format!("blk.{i}.{s}");
                let n = Transform::None;
                plan.need(
                    h("input_layernorm.weight"),
                    g("attn_norm.weight"),
                    vec![n_embd],
                    n,
                )?;
                plan.need(
                    h("self_attn.q_proj.weight"),
                    g("attn_q.weight"),
                    vec![q, n_embd],
                    perm_q,
                )?;
                plan.need(
                    h("self_attn.k_proj.weight"),
                    g("attn_k.weight"),
                    vec![kv, n_embd],
                    perm_k,
                )?;
                plan.need(
                    h("self_attn.v_proj.weight"),
                    g("attn_v.weight"),
                    vec![kv, n_embd],
                    n,
                )?;
                if arch == SourceArch::Qwen2 {
                    plan.need(h("self_attn.q_proj.bias"), g("attn_q.bias"), vec![q], n)?;
                    plan.need(h("self_attn.k_proj.bias"), g("attn_k.bias"), vec![kv], n)?;
                    plan.need(h("self_attn.v_proj.bias"), g("attn_v.bias"), vec![kv], n)?;
                } else {
                    plan.maybe(
                        h("self_attn.q_proj.bias"),
                        g("attn_q.bias"),
                        vec![q],
                        perm_q,
                    );
                    plan.maybe(
                        h("self_attn.k_proj.bias"),
                        g("attn_k.bias"),
                        vec![kv],
                        perm_k,
                    );
                    plan.maybe(h("self_attn.v_proj.bias"), g("attn_v.bias"), vec![kv], n);
                }
                plan.need(
                    h("self_attn.o_proj.weight"),
                    g("attn_output.weight"),
                    vec![n_embd, q],
                    n,
                )?;
                plan.maybe(
                    h("self_attn.o_proj.bias"),
                    g("attn_output.bias"),
                    vec![n_embd],
                    n,
                );
                plan.need(
                    h("post_attention_layernorm.weight"),
                    g("ffn_norm.weight"),
                    vec![n_embd],
                    n,
                )?;
                plan.need(
                    h("mlp.gate_proj.weight"),
                    g("ffn_gate.weight"),
                    vec![n_ff, n_embd],
                    n,
                )?;
                plan.need(
                    h("mlp.up_proj.weight"),
                    g("ffn_up.weight"),
                    vec![n_ff, n_embd],
                    n,
                )?;
                plan.need(
                    h("mlp.down_proj.weight"),
                    g("ffn_down.weight"),
                    vec![n_embd, n_ff],
                    n,
                )?;
                plan.maybe(h("mlp.gate_proj.bias"), g("ffn_gate.bias"), vec![n_ff], n);
                plan.maybe(h("mlp.up_proj.bias"), g("ffn_up.bias"), vec![n_ff], n);
                plan.maybe(h("mlp.down_proj.bias"), g("ffn_down.bias"), vec![n_embd], n);
                dropped.push(h("self_attn.rotary_emb.inv_freq"));
            }
            plan.need(
                "model.norm.weight".into(),
                "output_norm.weight".into(),
                vec![n_embd],
                Transform::None,
            )?;
            // Like llama.cpp: the output matrix is written when the checkpoint has it; when it
            // does not, the model must tie it to the embeddings.
            let tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(false);
            let out = ("lm_head.weight".to_string(), "output.weight".to_string());
            if tied {
                plan.maybe(out.0, out.1, vec![n_vocab, n_embd], Transform::None);
            } else {
                plan.need(out.0, out.1, vec![n_vocab, n_embd], Transform::None)?;
            }
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
            put(&mut md, a, "context_length", u32v("seq_length", ctx)?);
            put(&mut md, a, "embedding_length", u32v("hidden_size", n_embd)?);
            put(
                &mut md,
                a,
                "feed_forward_length",
                u32v("ffn_hidden_size", n_ff)?,
            );
            put(&mut md, a, "block_count", u32v("num_layers", n_layer)?);
            put(
                &mut md,
                a,
                "attention.head_count",
                u32v("num_attention_heads", n_head)?,
            );
            put(
                &mut md,
                a,
                "attention.head_count_kv",
                u32v("multi_query_group_num", n_head_kv)?,
            );
            put(
                &mut md,
                a,
                "attention.layer_norm_rms_epsilon",
                Value::F32(eps as f32),
            );
            // llama.cpp: half of each head is rotated (partial_rotary_factor 0.5).
            put(
                &mut md,
                a,
                "rope.dimension_count",
                u32v("hidden_size", n_embd / n_head / 2)?,
            );
            put(
                &mut md,
                a,
                "rope.freq_base",
                Value::F32((10000.0 * rope_ratio) as f32),
            );
            md.push(("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)));
            let qkv = (n_head + 2 * n_head_kv) * head_dim;
            let n = Transform::None;
            let t = |s: &str| format!("transformer.{s}");
            plan.need(
                t("embedding.word_embeddings.weight"),
                "token_embd.weight".into(),
                vec![n_vocab, n_embd],
                n,
            )?;
            for i in 0..n_layer {
                let h = |s: &str| format!("transformer.encoder.layers.{i}.{s}");
                let g = |s: &str| format!("blk.{i}.{s}");
                plan.need(
                    h("input_layernorm.weight"),
                    g("attn_norm.weight"),
                    vec![n_embd],
                    n,
                )?;
                plan.need(
                    h("self_attention.query_key_value.weight"),
                    g("attn_qkv.weight"),
                    vec![qkv, n_embd],
                    n,
                )?;
                plan.maybe(
                    h("self_attention.query_key_value.bias"),
                    g("attn_qkv.bias"),
                    vec![qkv],
                    n,
                );
                plan.need(
                    h("self_attention.dense.weight"),
                    g("attn_output.weight"),
                    vec![n_embd, n_head * head_dim],
                    n,
                )?;
                plan.need(
                    h("post_attention_layernorm.weight"),
                    g("ffn_norm.weight"),
                    vec![n_embd],
                    n,
                )?;
                plan.need(
                    h("mlp.dense_h_to_4h.weight"),
                    g("ffn_up.weight"),
                    vec![2 * n_ff, n_embd],
                    n,
                )?;
                plan.need(
                    h("mlp.dense_4h_to_h.weight"),
                    g("ffn_down.weight"),
                    vec![n_embd, n_ff],
                    n,
                )?;
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
            put(
                &mut md,
                a,
                "context_length",
                u32v("max_sequence_length", ctx)?,
            );
            put(&mut md, a, "embedding_length", u32v("hidden_size", n_embd)?);
            put(
                &mut md,
                a,
                "feed_forward_length",
                u32v("inner_hidden_size", n_ff)?,
            );
            put(&mut md, a, "block_count", u32v("num_layers", n_layer)?);
            put(
                &mut md,
                a,
                "attention.head_count",
                u32v("num_attention_heads", n_head)?,
            );
            put(
                &mut md,
                a,
                "attention.layer_norm_epsilon",
                Value::F32(eps as f32),
            );
            put(&mut md, a, "rope.freq_base", Value::F32(10000.0));
            put(
                &mut md,
                a,
                "rope.dimension_count",
                u32v("hidden_size", head_dim / 2)?,
            );
            // The official GLMBlock never receives num_layers: its default 28 gives
            // alpha = sqrt(2 * 28) for every model size.
            put(&mut md, a, "residual_scale", Value::F32(56f32.sqrt()));
            put(&mut md, a, "position_encoding_2d", Value::Bool(pe2d));
            let n = Transform::None;
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
    let tensors = plan.tensors;
    Ok(Layout {
        arch,
        metadata: md,
        tensors,
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
