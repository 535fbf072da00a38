//! `LlamaForCausalLM` → llama.cpp's `llama`, and the LLaMA-style decoder layout that
//! [`super::qwen2`] shares: `model.embed_tokens`, blocks `model.layers.{i}` of RMSNorm,
//! Q/K/V/O projections (optional biases) and a SwiGLU MLP, `model.norm`, `lm_head`.
//!
//! LLaMA's Q/K rows (and biases) are permuted as llama.cpp's converter does
//! ([`Transform::RopePermute`]), and the file gets `rope.dimension_count` and `vocab_size`.

use ggrs_core::gguf::Value;
use serde_json::Value as Json;

use super::ArchConverter;
use crate::config::Cfg;
use crate::error::ConvertError;
use crate::layout::{BlockPart, LayoutBuilder, Req, Transform};

/// `LlamaForCausalLM`.
pub(crate) struct Llama;

/// What sets the LLaMA-style decoders apart.
pub(super) struct DecoderVariant {
    /// Whether the Q/K rows are permuted for GGML's normal-mode rope (LLaMA), or kept in
    /// checkpoint order (Qwen2, whose GGUF uses NEOX-style rope).
    pub permute_qk: bool,
    /// Whether the Q/K/V biases are required (Qwen2) or taken when present (LLaMA).
    pub qkv_bias: Req,
    /// Whether `rope.dimension_count` and `vocab_size` are written (llama.cpp writes them
    /// for `llama`, not for `qwen2`).
    pub rope_dims_and_vocab: bool,
    /// Whether `head_dim` is read (Granite's converter ignores it: heads are
    /// `hidden_size / num_attention_heads` wide).
    pub head_dim: bool,
}

impl DecoderVariant {
    /// LLaMA's layout: Q/K rows permuted, optional Q/K/V biases, `rope.dimension_count` and
    /// `vocab_size` written, `head_dim` read (also SmolLM3's and Ministral 3's).
    pub const LLAMA: DecoderVariant = DecoderVariant {
        permute_qk: true,
        qkv_bias: Req::Maybe,
        rope_dims_and_vocab: true,
        head_dim: true,
    };
}

impl ArchConverter for Llama {
    fn gguf_name(&self) -> &'static str {
        "llama"
    }

    fn source(&self) -> &'static str {
        "LlamaForCausalLM"
    }

    fn recognises(&self, name: &str, _cfg: &Json) -> bool {
        name == "LlamaForCausalLM"
    }

    fn plan(&self, cfg: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<usize, ConvertError> {
        plan_decoder(cfg, out, &DecoderVariant::LLAMA)
    }

    fn bpe_pre(&self) -> &'static str {
        "llama-bpe"
    }
}

/// Plans a LLaMA-style decoder (`variant` says which); returns the vocabulary size.
pub(super) fn plan_decoder(
    c: &Cfg<'_>,
    out: &mut LayoutBuilder<'_>,
    variant: &DecoderVariant,
) -> Result<usize, ConvertError> {
    use Req::{Maybe, Need};
    let n = Transform::None;
    let n_embd = c.positive(&["hidden_size"])?;
    let n_layer = c.positive(&["num_hidden_layers"])?;
    let n_head = c.positive(&["num_attention_heads"])?;
    let n_head_kv = c.opt_usize(&["num_key_value_heads"])?.unwrap_or(n_head);
    let n_ff = c.positive(&["intermediate_size"])?;
    let n_vocab = c.positive(&["vocab_size"])?;
    let head_dim_key = match variant.head_dim {
        true => c.opt_usize(&["head_dim"])?,
        false => None,
    };
    let head_dim = head_dim_key.unwrap_or(n_embd / n_head);
    if n_head_kv == 0 || n_head % n_head_kv != 0 || head_dim == 0 || head_dim % 2 != 0 {
        return Err(ConvertError::Config {
            key: "num_key_value_heads".into(),
            detail: format!(
                "{n_head_kv} KV heads, {n_head} heads and head size {head_dim} do not fit (KV \
                 heads must divide the heads, the head size must be even)"
            ),
        });
    }
    let eps = c.opt_f64(&["rms_norm_eps"])?.unwrap_or(1e-6);
    let ctx = c.opt_usize(&["max_position_embeddings"])?.unwrap_or(2048);
    // `rope_parameters` (transformers ≥ 4.56) holds what `rope_theta` and `rope_scaling`
    // held.
    let theta = match rope_params(c).and_then(|r| r.get("rope_theta")) {
        Some(t) => t.as_f64().ok_or_else(|| ConvertError::Config {
            key: "rope_parameters.rope_theta".into(),
            detail: format!("should be a number, found {t}"),
        })?,
        None => c.opt_f64(&["rope_theta"])?.unwrap_or(10000.0),
    };
    out.u32s(&[
        ("context_length", "max_position_embeddings", ctx),
        ("embedding_length", "hidden_size", n_embd),
        ("block_count", "num_hidden_layers", n_layer),
        ("feed_forward_length", "intermediate_size", n_ff),
        ("attention.head_count", "num_attention_heads", n_head),
        ("attention.head_count_kv", "num_key_value_heads", n_head_kv),
    ])?;
    out.put("attention.layer_norm_rms_epsilon", Value::F32(eps as f32));
    if let Some(hd) = head_dim_key {
        out.u32s(&[
            ("attention.key_length", "head_dim", hd),
            ("attention.value_length", "head_dim", hd),
        ])?;
    }
    out.put("rope.freq_base", Value::F32(theta as f32));
    if variant.rope_dims_and_vocab {
        out.u32s(&[
            ("rope.dimension_count", "head_dim", head_dim),
            ("vocab_size", "vocab_size", n_vocab),
        ])?;
    }
    rope_scaling(c, out)?;
    let (q, kv) = (n_head * head_dim, n_head_kv * head_dim);
    let (perm_q, perm_k) = if variant.permute_qk {
        (
            Transform::RopePermute { n_head },
            Transform::RopePermute { n_head: n_head_kv },
        )
    } else {
        (n, n)
    };
    let qkv_bias = variant.qkv_bias;
    out.need(
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
        out.block(&h, &format!("blk.{i}"), parts)?;
        out.drop_tensor(format!("{h}.self_attn.rotary_emb.inv_freq"));
    }
    out.need(
        "model.norm.weight".into(),
        "output_norm.weight".into(),
        vec![n_embd],
        n,
    )?;
    // Like llama.cpp: the output matrix is written when the checkpoint has it; when it does
    // not, the model must tie it to the embeddings.
    let tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    out.add(
        if tied { Maybe } else { Need },
        "lm_head.weight".into(),
        "output.weight".into(),
        vec![n_vocab, n_embd],
        n,
    )?;
    Ok(n_vocab)
}

/// The rotary settings: `rope_parameters` (newer checkpoints) or `rope_scaling`.
pub(super) fn rope_params<'c>(c: &'c Cfg<'_>) -> Option<&'c serde_json::Map<String, Json>> {
    c.get("rope_parameters")
        .filter(|v| !v.is_null())
        .or_else(|| c.get("rope_scaling"))
        .and_then(Json::as_object)
}

/// `rope_scaling` / `rope_parameters` as llama.cpp's converter writes them: `linear` becomes
/// `rope.scaling.type`/`factor`; `yarn` also the original context and the betas and
/// attention factor the checkpoint gives; `default` or no type is nothing; any other type is
/// an error (the converter does not carry it over).
pub(super) fn rope_scaling(c: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<(), ConvertError> {
    let Some(rs) = rope_params(c) else {
        return Ok(());
    };
    let kind = rs
        .get("rope_type")
        .or_else(|| rs.get("type"))
        .and_then(Json::as_str);
    let factor = rs.get("factor").and_then(Json::as_f64);
    let num = |k: &str| rs.get(k).and_then(Json::as_f64);
    match (kind, factor) {
        (Some("linear"), Some(f)) => {
            out.put("rope.scaling.type", Value::String("linear".into()));
            out.put("rope.scaling.factor", Value::F32(f as f32));
            Ok(())
        }
        (Some("yarn"), Some(f)) => {
            out.put("rope.scaling.type", Value::String("yarn".into()));
            out.put("rope.scaling.factor", Value::F32(f as f32));
            let orig = rs
                .get("original_max_position_embeddings")
                .and_then(Json::as_u64)
                .ok_or_else(|| ConvertError::Config {
                    key: "rope_scaling.original_max_position_embeddings".into(),
                    detail: "is missing (YaRN needs it)".into(),
                })?;
            out.u32s(&[(
                "rope.scaling.original_context_length",
                "original_max_position_embeddings",
                orig as usize,
            )])?;
            for (hf, key) in [
                ("extrapolation_factor", "rope.scaling.yarn_ext_factor"),
                ("attention_factor", "rope.scaling.yarn_attn_factor"),
                ("beta_fast", "rope.scaling.yarn_beta_fast"),
                ("beta_slow", "rope.scaling.yarn_beta_slow"),
            ] {
                if let Some(v) = num(hf) {
                    out.put(key, Value::F32(v as f32));
                }
            }
            Ok(())
        }
        (Some("default") | None, _) => Ok(()),
        (Some(other), _) => Err(ConvertError::Config {
            key: "rope_scaling".into(),
            detail: format!(
                "has type `{other}`, which the converter does not carry over (`linear` and \
                 `yarn` are)"
            ),
        }),
    }
}
