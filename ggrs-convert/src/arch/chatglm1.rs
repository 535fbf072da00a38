//! ChatGLM-6B v1 (`ChatGLMModel` whose configuration has `position_encoding_2d`) → our
//! `chatglm1` (see `docs/gguf-chatglm1.md`): `transformer.word_embeddings`, blocks
//! `transformer.layers.{i}` of LayerNorms with biases, a fused QKV projection and a GELU
//! MLP, each with biases, `transformer.final_layernorm`, and `lm_head` unless tied.

use ggrs_core::gguf::Value;
use serde_json::Value as Json;

use super::chatglm::CHATGLM_NAMES;
use super::ArchConverter;
use crate::config::Cfg;
use crate::error::ConvertError;
use crate::layout::{LayoutBuilder, Transform};

/// ChatGLM-6B v1's `ChatGLMModel`.
pub(crate) struct ChatGlm1;

impl ArchConverter for ChatGlm1 {
    fn gguf_name(&self) -> &'static str {
        "chatglm1"
    }

    fn source(&self) -> &'static str {
        "ChatGLMModel / ChatGLMForConditionalGeneration with position_encoding_2d \
         (ChatGLM-6B v1)"
    }

    fn recognises(&self, name: &str, cfg: &Json) -> bool {
        CHATGLM_NAMES.contains(&name) && cfg.get("position_encoding_2d").is_some()
    }

    fn plan(&self, c: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<usize, ConvertError> {
        let n = Transform::None;
        let n_embd = c.positive(&["hidden_size"])?;
        let n_layer = c.positive(&["num_layers"])?;
        let n_head = c.positive(&["num_attention_heads"])?;
        let n_ff = c.opt_usize(&["inner_hidden_size"])?.unwrap_or(4 * n_embd);
        let n_vocab = c.positive(&["vocab_size"])?;
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
        out.u32s(&[
            ("context_length", "max_sequence_length", ctx),
            ("embedding_length", "hidden_size", n_embd),
            ("feed_forward_length", "inner_hidden_size", n_ff),
            ("block_count", "num_layers", n_layer),
            ("attention.head_count", "num_attention_heads", n_head),
        ])?;
        out.put("attention.layer_norm_epsilon", Value::F32(eps as f32));
        out.put("rope.freq_base", Value::F32(10000.0));
        out.u32s(&[("rope.dimension_count", "hidden_size", head_dim / 2)])?;
        // The official GLMBlock never receives num_layers: its default 28 gives
        // alpha = sqrt(2 * 28) for every model size.
        out.put("residual_scale", Value::F32(56f32.sqrt()));
        out.put("position_encoding_2d", Value::Bool(pe2d));
        out.need(
            "transformer.word_embeddings.weight".into(),
            "token_embd.weight".into(),
            vec![n_vocab, n_embd],
            n,
        )?;
        for i in 0..n_layer {
            let h = |s: &str| format!("transformer.layers.{i}.{s}");
            let g = |s: &str| format!("blk.{i}.{s}");
            // (HF prefix, GGUF prefix, rows, columns; columns 0 for a LayerNorm), each with a
            // weight and a bias, in the order of the block's computation.
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
                out.need(
                    h(&format!("{hs}.weight")),
                    g(&format!("{gs}.weight")),
                    wshape,
                    n,
                )?;
                out.need(
                    h(&format!("{hs}.bias")),
                    g(&format!("{gs}.bias")),
                    vec![rows],
                    n,
                )?;
            }
            out.drop_tensor(h("attention.rotary_emb.inv_freq"));
        }
        out.need(
            "transformer.final_layernorm.weight".into(),
            "output_norm.weight".into(),
            vec![n_embd],
            n,
        )?;
        out.need(
            "transformer.final_layernorm.bias".into(),
            "output_norm.bias".into(),
            vec![n_embd],
            n,
        )?;
        // Hugging Face ties lm_head to the embeddings unless the config says otherwise
        // (reference README item 12): then the GGUF has no output.weight.
        if c.opt_bool("tie_word_embeddings")?.unwrap_or(true) {
            out.drop_tensor("lm_head.weight".into());
        } else {
            out.need(
                "lm_head.weight".into(),
                "output.weight".into(),
                vec![n_vocab, n_embd],
                n,
            )?;
        }
        Ok(n_vocab)
    }

    fn bpe_pre(&self) -> &'static str {
        "chatglm-bpe"
    }
}
