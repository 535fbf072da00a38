//! ChatGLM2/3 (`ChatGLMModel` without `position_encoding_2d`) → llama.cpp's `chatglm`:
//! `transformer.embedding`, blocks `transformer.encoder.layers.{i}` of RMSNorm, a fused
//! QKV projection (multi-query groups), and a fused gate/up MLP, `transformer.output_layer`.
//!
//! The tokenizer's control tokens (`[MASK]`, `[gMASK]`… and ChatGLM3's role tokens) live
//! outside its SentencePiece model: they are appended after the pieces.

use ggrs_core::gguf::Value;
use serde_json::Value as Json;

use super::ArchConverter;
use crate::config::Cfg;
use crate::error::ConvertError;
use crate::layout::{BlockPart, LayoutBuilder, Req, Transform};
use crate::vocab::Vocab;

/// The `architectures` entries of both ChatGLM generations (v1 is told apart by its
/// `position_encoding_2d`: see [`super::chatglm1`]).
pub(super) const CHATGLM_NAMES: [&str; 2] = ["ChatGLMModel", "ChatGLMForConditionalGeneration"];

/// Special tokens the ChatGLM2 tokenizer appends after the SentencePiece pieces (ids from
/// the piece count on, in this order); ChatGLM3 appends the role tokens after them.
const CHATGLM2_SPECIAL: [&str; 5] = ["[MASK]", "[gMASK]", "[sMASK]", "sop", "eop"];
const CHATGLM3_ROLES: [&str; 4] = ["<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"];

/// ChatGLM2/3's `ChatGLMModel`.
pub(crate) struct ChatGlm2;

impl ArchConverter for ChatGlm2 {
    fn gguf_name(&self) -> &'static str {
        "chatglm"
    }

    fn source(&self) -> &'static str {
        "ChatGLMModel / ChatGLMForConditionalGeneration (ChatGLM2/3)"
    }

    fn recognises(&self, name: &str, cfg: &Json) -> bool {
        CHATGLM_NAMES.contains(&name) && cfg.get("position_encoding_2d").is_none()
    }

    fn plan(&self, c: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<usize, ConvertError> {
        use Req::{Maybe, Need};
        let n = Transform::None;
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
        let n_vocab = c.positive(&["padded_vocab_size", "vocab_size"])?;
        let ctx = c.opt_usize(&["seq_length"])?.unwrap_or(n_embd);
        let eps = c.opt_f64(&["layernorm_epsilon"])?.unwrap_or(1e-5);
        let rope_ratio = c.opt_f64(&["rope_ratio"])?.unwrap_or(1.0);
        if c.opt_bool("rmsnorm")? == Some(false) {
            return Err(ConvertError::Config {
                key: "rmsnorm".into(),
                detail: "is false; llama.cpp's chatglm layout assumes RMSNorm".into(),
            });
        }
        out.u32s(&[
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
        out.put("attention.layer_norm_rms_epsilon", Value::F32(eps as f32));
        // llama.cpp: half of each head is rotated (partial_rotary_factor 0.5).
        out.u32s(&[("rope.dimension_count", "hidden_size", n_embd / n_head / 2)])?;
        out.put("rope.freq_base", Value::F32((10000.0 * rope_ratio) as f32));
        out.put_global("tokenizer.ggml.add_bos_token", Value::Bool(false));
        let (qkv, n_qh) = ((n_head + 2 * n_head_kv) * head_dim, n_head * head_dim);
        let t = |s: &str| format!("transformer.{s}");
        out.need(
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
            out.block(&h, &format!("blk.{i}"), parts)?;
        }
        out.need(
            t("encoder.final_layernorm.weight"),
            "output_norm.weight".into(),
            vec![n_embd],
            n,
        )?;
        out.need(
            t("output_layer.weight"),
            "output.weight".into(),
            vec![n_vocab, n_embd],
            n,
        )?;
        out.drop_tensor(t("rotary_pos_emb.inv_freq"));
        Ok(n_vocab)
    }

    fn sentencepiece_pre(&self) -> &'static str {
        "chatglm-spm"
    }

    fn bpe_pre(&self) -> &'static str {
        "chatglm-bpe"
    }

    /// Appends the control tokens (and ChatGLM3's role tokens, when `_name_or_path` says
    /// chatglm3) after the pieces, unless the model file has them already or they do not
    /// fit in `n_vocab` (then a note says so).
    fn complete_sentencepiece(&self, v: &mut Vocab, n_vocab: usize, cfg: &Json) {
        let name = cfg
            .get("_name_or_path")
            .and_then(Json::as_str)
            .unwrap_or("");
        let roles: &[&str] = if name.contains("chatglm3") {
            &CHATGLM3_ROLES
        } else {
            &[]
        };
        let extra: Vec<&str> = CHATGLM2_SPECIAL.iter().chain(roles).copied().collect();
        if v.tokens.iter().any(|t| extra.contains(&t.as_str())) {
            // The model file has them already: nothing to add.
        } else if v.tokens.len() + extra.len() <= n_vocab {
            for t in extra {
                v.push_control(t);
            }
        } else {
            v.notes.push(format!(
                "the SentencePiece model fills all {n_vocab} ids: ChatGLM's control tokens \
                 ({}) are not added",
                extra.join(" ")
            ));
        }
    }
}
