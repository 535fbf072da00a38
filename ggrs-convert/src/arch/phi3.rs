//! `Phi3ForCausalLM` (Phi-3, Phi-3.5-mini, Phi-4-mini) → llama.cpp's `phi3`:
//! `model.embed_tokens`, blocks of RMSNorm, a fused `qkv_proj` (rows in checkpoint order:
//! the GGUF uses NEOX rotary), `o_proj`, RMSNorm and a fused `gate_up_proj` / `down_proj`
//! MLP, `model.norm`, `lm_head` unless tied. As llama.cpp's converter: the rotary covers
//! `partial_rotary_factor · hidden_size / num_attention_heads` dimensions, the original
//! context and `attention.sliding_window` (0 when unset) are written, and LongRoPE's
//! `long_factor` / `short_factor` become the F32 tensors `rope_factors_long` /
//! `rope_factors_short` with `rope.scaling.attn_factor` =
//! √(1 + ln(max / original) / ln(original)).

use ggrs_core::gguf::Value;
use serde_json::Value as Json;

use super::llama::rope_params;
use super::ArchConverter;
use crate::config::Cfg;
use crate::error::ConvertError;
use crate::layout::{BlockPart, LayoutBuilder, Req, Transform};

/// `Phi3ForCausalLM`.
pub(crate) struct Phi3;

impl ArchConverter for Phi3 {
    fn gguf_name(&self) -> &'static str {
        "phi3"
    }

    fn source(&self) -> &'static str {
        "Phi3ForCausalLM"
    }

    fn recognises(&self, name: &str, _cfg: &Json) -> bool {
        name == "Phi3ForCausalLM"
    }

    fn plan(&self, c: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<usize, ConvertError> {
        use Req::{Maybe, Need};
        let n = Transform::None;
        let n_embd = c.positive(&["hidden_size"])?;
        let n_layer = c.positive(&["num_hidden_layers"])?;
        let n_head = c.positive(&["num_attention_heads"])?;
        let n_head_kv = c.opt_usize(&["num_key_value_heads"])?.unwrap_or(n_head);
        let n_ff = c.positive(&["intermediate_size"])?;
        let n_vocab = c.positive(&["vocab_size"])?;
        if n_head_kv == 0 || n_head % n_head_kv != 0 || n_embd % n_head != 0 {
            return Err(ConvertError::Config {
                key: "num_key_value_heads".into(),
                detail: format!("{n_head_kv} KV heads, {n_head} heads, width {n_embd}"),
            });
        }
        let head_dim = n_embd / n_head;
        let ctx = c.positive(&["max_position_embeddings", "n_positions"])?;
        let rp = rope_params(c);
        let num = |k: &str| rp.and_then(|r| r.get(k)).and_then(Json::as_f64);
        let orig = rp
            .and_then(|r| r.get("original_max_position_embeddings"))
            .and_then(Json::as_u64)
            .map(|v| v as usize)
            .or(c.opt_usize(&["original_max_position_embeddings"])?)
            .unwrap_or(ctx);
        let rot = num("partial_rotary_factor")
            .or(c.opt_f64(&["partial_rotary_factor"])?)
            .unwrap_or(1.0);
        let rope_dims = (rot * n_embd as f64) as usize / n_head;
        let eps = c.opt_f64(&["rms_norm_eps"])?.unwrap_or(1e-5);
        let theta = num("rope_theta")
            .or(c.opt_f64(&["rope_theta"])?)
            .unwrap_or(10000.0);
        let window = c.opt_usize(&["sliding_window"])?.unwrap_or(0);
        out.u32s(&[
            ("context_length", "max_position_embeddings", ctx),
            (
                "rope.scaling.original_context_length",
                "original_max_position_embeddings",
                orig,
            ),
            ("embedding_length", "hidden_size", n_embd),
            ("feed_forward_length", "intermediate_size", n_ff),
            ("block_count", "num_hidden_layers", n_layer),
            ("attention.head_count", "num_attention_heads", n_head),
            ("attention.head_count_kv", "num_key_value_heads", n_head_kv),
        ])?;
        out.put("attention.layer_norm_rms_epsilon", Value::F32(eps as f32));
        out.u32s(&[("rope.dimension_count", "partial_rotary_factor", rope_dims)])?;
        out.put("rope.freq_base", Value::F32(theta as f32));
        out.u32s(&[("attention.sliding_window", "sliding_window", window)])?;

        let factors = |k: &str| -> Result<Option<Vec<f32>>, ConvertError> {
            match rp.and_then(|r| r.get(k)) {
                None | Some(Json::Null) => Ok(None),
                Some(Json::Array(a)) => a
                    .iter()
                    .map(|v| v.as_f64().map(|x| x as f32))
                    .collect::<Option<Vec<f32>>>()
                    .map(Some)
                    .ok_or_else(|| ConvertError::Config {
                        key: format!("rope_scaling.{k}"),
                        detail: "should be a list of numbers".into(),
                    }),
                Some(v) => Err(ConvertError::Config {
                    key: format!("rope_scaling.{k}"),
                    detail: format!("should be a list of numbers, found {v}"),
                }),
            }
        };
        let (long, short) = (factors("long_factor")?, factors("short_factor")?);
        out.need(
            "model.embed_tokens.weight".into(),
            "token_embd.weight".into(),
            vec![n_vocab, n_embd],
            n,
        )?;
        out.need(
            "model.norm.weight".into(),
            "output_norm.weight".into(),
            vec![n_embd],
            n,
        )?;
        if let Some(long) = long {
            let kind = rp
                .and_then(|r| r.get("rope_type").or_else(|| r.get("type")))
                .and_then(Json::as_str)
                .map(str::to_lowercase);
            let scale = ctx as f64 / orig as f64;
            let attn_factor = match kind.as_deref() {
                Some("su" | "longrope") if scale > 1.0 => {
                    (1.0 + scale.ln() / (orig as f64).ln()).sqrt()
                }
                Some("yarn") if scale > 1.0 => 0.1 * scale.ln() + 1.0,
                Some("su" | "longrope" | "yarn") => 1.0,
                other => {
                    return Err(ConvertError::Config {
                        key: "rope_scaling.type".into(),
                        detail: format!(
                            "{other:?}: factor lists need `longrope` (or `su`, `yarn`)"
                        ),
                    })
                }
            };
            out.put("rope.scaling.attn_factor", Value::F32(attn_factor as f32));
            let short = short.ok_or_else(|| ConvertError::Config {
                key: "rope_scaling.short_factor".into(),
                detail: "is missing (long_factor is given)".into(),
            })?;
            if long.len() != rope_dims / 2 || short.len() != rope_dims / 2 {
                return Err(ConvertError::Config {
                    key: "rope_scaling.long_factor".into(),
                    detail: format!(
                        "{} long and {} short factors; the rotary of {rope_dims} dimensions \
                         needs {} of each",
                        long.len(),
                        short.len(),
                        rope_dims / 2
                    ),
                });
            }
            out.generated("rope_scaling.long_factor", "rope_factors_long.weight", long);
            out.generated(
                "rope_scaling.short_factor",
                "rope_factors_short.weight",
                short,
            );
        }
        let qkv = (n_head + 2 * n_head_kv) * head_dim;
        #[rustfmt::skip]
        let parts: &[BlockPart] = &[
            (Need, "input_layernorm.weight", "attn_norm.weight", &[n_embd], n),
            (Need, "self_attn.qkv_proj.weight", "attn_qkv.weight", &[qkv, n_embd], n),
            (Need, "self_attn.o_proj.weight", "attn_output.weight", &[n_embd, n_embd], n),
            (Need, "post_attention_layernorm.weight", "ffn_norm.weight", &[n_embd], n),
            (Need, "mlp.gate_up_proj.weight", "ffn_up.weight", &[2 * n_ff, n_embd], n),
            (Need, "mlp.down_proj.weight", "ffn_down.weight", &[n_embd, n_ff], n),
        ];
        for i in 0..n_layer {
            out.block(&format!("model.layers.{i}"), &format!("blk.{i}"), parts)?;
        }
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

    fn bpe_pre(&self) -> &'static str {
        "gpt-4o"
    }
}
