//! `Gemma3ForCausalLM` → llama.cpp's `gemma3`: `model.embed_tokens`, blocks of RMSNorms
//! before and after attention and the MLP, Q/K/V/O projections with per-head Q/K norms (rows
//! in checkpoint order: the GGUF uses NEOX rotary) and a GeGLU MLP, `model.norm`, tied
//! output. Every norm weight is stored plus one ([`Transform::AddOne`]), as llama.cpp's
//! converter stores Gemma's `1 + w`. Keys: the usual ones, `attention.key_length` /
//! `value_length` (`head_dim`), `attention.sliding_window`, the local layers' rotary base
//! (`rope_local_base_freq` → `rope.freq_base_swa`), `final_logit_softcapping` when set, the
//! rotary scaling of the global layers, and `attention.sliding_window_pattern` when the
//! configuration gives it as a number. A SentencePiece vocabulary gets
//! `tokenizer.ggml.add_space_prefix` false.

use ggrs_core::gguf::Value;
use serde_json::Value as Json;

use super::llama::rope_scaling;
use super::ArchConverter;
use crate::config::Cfg;
use crate::error::ConvertError;
use crate::layout::{BlockPart, LayoutBuilder, Req, Transform};

/// `Gemma3ForCausalLM`.
pub(crate) struct Gemma3;

impl ArchConverter for Gemma3 {
    fn gguf_name(&self) -> &'static str {
        "gemma3"
    }

    fn source(&self) -> &'static str {
        "Gemma3ForCausalLM"
    }

    fn recognises(&self, name: &str, _cfg: &Json) -> bool {
        name == "Gemma3ForCausalLM"
    }

    fn plan(&self, c: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<usize, ConvertError> {
        use Req::Need;
        let (n, one) = (Transform::None, Transform::AddOne);
        let n_embd = c.positive(&["hidden_size"])?;
        let n_layer = c.positive(&["num_hidden_layers"])?;
        let n_head = c.opt_usize(&["num_attention_heads"])?.unwrap_or(8);
        let n_head_kv = c.opt_usize(&["num_key_value_heads"])?.unwrap_or(4);
        let n_ff = c.positive(&["intermediate_size"])?;
        let n_vocab = c.positive(&["vocab_size"])?;
        let head_dim = c.opt_usize(&["head_dim"])?.unwrap_or(256);
        if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 || head_dim == 0 {
            return Err(ConvertError::Config {
                key: "num_key_value_heads".into(),
                detail: format!(
                    "{n_head_kv} KV heads, {n_head} heads and head size {head_dim} do not fit"
                ),
            });
        }
        let ctx = c.opt_usize(&["max_position_embeddings"])?.unwrap_or(131072);
        out.u32s(&[
            ("context_length", "max_position_embeddings", ctx),
            ("embedding_length", "hidden_size", n_embd),
            ("block_count", "num_hidden_layers", n_layer),
            ("feed_forward_length", "intermediate_size", n_ff),
            ("attention.head_count", "num_attention_heads", n_head),
            ("attention.head_count_kv", "num_key_value_heads", n_head_kv),
            ("attention.key_length", "head_dim", head_dim),
            ("attention.value_length", "head_dim", head_dim),
        ])?;
        let eps = c.opt_f64(&["rms_norm_eps"])?.unwrap_or(1e-6);
        out.put("attention.layer_norm_rms_epsilon", Value::F32(eps as f32));
        let theta = c.opt_f64(&["rope_theta"])?.unwrap_or(1_000_000.0);
        out.put("rope.freq_base", Value::F32(theta as f32));
        if let Some(local) = c.opt_f64(&["rope_local_base_freq"])? {
            out.put("rope.freq_base_swa", Value::F32(local as f32));
        }
        if let Some(cap) = c.opt_f64(&["final_logit_softcapping"])? {
            if cap != 0.0 {
                out.put("final_logit_softcapping", Value::F32(cap as f32));
            }
        }
        if c.opt_usize(&["sliding_window_pattern"])? != Some(1) {
            let w = c.positive(&["sliding_window"])?;
            out.u32s(&[("attention.sliding_window", "sliding_window", w)])?;
        }
        if let Some(p) = c.opt_usize(&["sliding_window_pattern"])? {
            out.u32s(&[(
                "attention.sliding_window_pattern",
                "sliding_window_pattern",
                p,
            )])?;
        }
        rope_scaling(c, out)?;
        let (q, kv) = (n_head * head_dim, n_head_kv * head_dim);
        out.need(
            "model.embed_tokens.weight".into(),
            "token_embd.weight".into(),
            vec![n_vocab, n_embd],
            n,
        )?;
        #[rustfmt::skip]
        let parts: &[BlockPart] = &[
            (Need, "input_layernorm.weight", "attn_norm.weight", &[n_embd], one),
            (Need, "self_attn.q_proj.weight", "attn_q.weight", &[q, n_embd], n),
            (Need, "self_attn.k_proj.weight", "attn_k.weight", &[kv, n_embd], n),
            (Need, "self_attn.v_proj.weight", "attn_v.weight", &[kv, n_embd], n),
            (Need, "self_attn.o_proj.weight", "attn_output.weight", &[n_embd, q], n),
            (Need, "self_attn.q_norm.weight", "attn_q_norm.weight", &[head_dim], one),
            (Need, "self_attn.k_norm.weight", "attn_k_norm.weight", &[head_dim], one),
            (Need, "post_attention_layernorm.weight", "post_attention_norm.weight", &[n_embd], one),
            (Need, "pre_feedforward_layernorm.weight", "ffn_norm.weight", &[n_embd], one),
            (Need, "mlp.gate_proj.weight", "ffn_gate.weight", &[n_ff, n_embd], n),
            (Need, "mlp.up_proj.weight", "ffn_up.weight", &[n_ff, n_embd], n),
            (Need, "mlp.down_proj.weight", "ffn_down.weight", &[n_embd, n_ff], n),
            (Need, "post_feedforward_layernorm.weight", "post_ffw_norm.weight", &[n_embd], one),
        ];
        for i in 0..n_layer {
            out.block(&format!("model.layers.{i}"), &format!("blk.{i}"), parts)?;
        }
        out.need(
            "model.norm.weight".into(),
            "output_norm.weight".into(),
            vec![n_embd],
            one,
        )?;
        // Gemma ties its output to the embeddings; a checkpoint's copy is not written.
        out.drop_tensor("lm_head.weight".into());
        if out.dir().join("tokenizer.model").is_file() {
            out.put_global("tokenizer.ggml.add_space_prefix", Value::Bool(false));
        }
        Ok(n_vocab)
    }

    fn bpe_pre(&self) -> &'static str {
        "default"
    }
}
