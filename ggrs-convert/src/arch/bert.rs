//! `BertModel` (and `BertForMaskedLM`, `BertForSequenceClassification`) → llama.cpp's
//! `bert`: the encoders of sentence-transformers (all-MiniLM-L6-v2, BGE, E5) and the BERT
//! cross-encoders.
//!
//! Tensors as llama.cpp's converter names them (a `bert.` prefix of the checkpoint's names
//! is dropped); the position and token-type embeddings stay F32. The masked-LM and
//! next-sentence heads and `embeddings.position_ids` are dropped. A sequence classifier
//! keeps its head as `cls` (the pooler, `tanh` after it, as Hugging Face computes it) and
//! `cls.output` (the classifier), with `rank` pooling; llama.cpp's converter drops BERT's
//! pooler instead. The pooling of an encoder comes from sentence-transformers' `modules.json`
//! and its pooling module's `config.json` (mean, [CLS] or last token); without them none is
//! written and the model needs `--pooling`. The vocabulary is WordPiece (see
//! `vocab/wordpiece.rs`).

use ggrs_core::gguf::Value;
use serde_json::Value as Json;

use super::ArchConverter;
use crate::config::Cfg;
use crate::error::ConvertError;
use crate::layout::{BlockPart, LayoutBuilder, Req, Transform};
use crate::safetensors::read_json;

/// `BertModel`, `BertForMaskedLM`, `BertForSequenceClassification`.
pub(crate) struct Bert;

/// llama.cpp's `pooling_type` numbers.
const MEAN: u32 = 1;
const CLS: u32 = 2;
const LAST: u32 = 3;
const RANK: u32 = 4;

impl ArchConverter for Bert {
    fn gguf_name(&self) -> &'static str {
        "bert"
    }

    fn source(&self) -> &'static str {
        "BertModel (BertForMaskedLM, BertForSequenceClassification)"
    }

    fn recognises(&self, name: &str, _cfg: &Json) -> bool {
        matches!(
            name,
            "BertModel" | "BertForMaskedLM" | "BertForSequenceClassification"
        )
    }

    fn plan(&self, c: &Cfg<'_>, out: &mut LayoutBuilder<'_>) -> Result<usize, ConvertError> {
        use Req::{Maybe, Need};
        let n = Transform::None;
        let e = c.positive(&["hidden_size"])?;
        let n_layer = c.positive(&["num_hidden_layers"])?;
        let n_head = c.positive(&["num_attention_heads"])?;
        let f = c.positive(&["intermediate_size"])?;
        let n_vocab = c.positive(&["vocab_size"])?;
        let ctx = c.opt_usize(&["max_position_embeddings"])?.unwrap_or(512);
        let n_types = c.opt_usize(&["type_vocab_size"])?.unwrap_or(2);
        let eps = c.opt_f64(&["layer_norm_eps"])?.unwrap_or(1e-12);
        if e % n_head != 0 {
            return Err(ConvertError::Config {
                key: "num_attention_heads".into(),
                detail: format!("{n_head} heads do not divide the hidden size {e}"),
            });
        }
        let classifier = c
            .get("architectures")
            .and_then(Json::as_array)
            .is_some_and(|a| {
                a.iter()
                    .any(|v| v.as_str() == Some("BertForSequenceClassification"))
            });
        out.u32s(&[
            ("context_length", "max_position_embeddings", ctx),
            ("embedding_length", "hidden_size", e),
            ("feed_forward_length", "intermediate_size", f),
            ("attention.head_count", "num_attention_heads", n_head),
            ("block_count", "num_hidden_layers", n_layer),
        ])?;
        out.put("attention.layer_norm_epsilon", Value::F32(eps as f32));
        out.put("attention.causal", Value::Bool(false));
        let pooling = if classifier {
            Some(RANK)
        } else {
            sentence_transformers_pooling(out.dir())?
        };
        if let Some(p) = pooling {
            out.put("pooling_type", Value::U32(p));
        }
        let types = u32::try_from(n_types).map_err(|_| ConvertError::Config {
            key: "type_vocab_size".into(),
            detail: format!("{n_types} does not fit in a u32"),
        })?;
        out.put_global("tokenizer.ggml.token_type_count", Value::U32(types));

        let p = if out.has("bert.embeddings.word_embeddings.weight") {
            "bert."
        } else {
            ""
        };
        let whole = [
            (
                "embeddings.word_embeddings.weight",
                "token_embd.weight",
                vec![n_vocab, e],
            ),
            (
                "embeddings.token_type_embeddings.weight",
                "token_types.weight",
                vec![n_types, e],
            ),
            (
                "embeddings.position_embeddings.weight",
                "position_embd.weight",
                vec![ctx, e],
            ),
            (
                "embeddings.LayerNorm.weight",
                "token_embd_norm.weight",
                vec![e],
            ),
            ("embeddings.LayerNorm.bias", "token_embd_norm.bias", vec![e]),
        ];
        for (hf, gguf, shape) in whole {
            let req = if gguf == "token_types.weight" {
                Maybe
            } else {
                Need
            };
            out.add(req, format!("{p}{hf}"), gguf.into(), shape, n)?;
        }
        out.keep_f32("token_types.weight");
        out.keep_f32("position_embd.weight");
        #[rustfmt::skip]
        let parts: &[BlockPart] = &[
            (Need, "attention.self.query.weight", "attn_q.weight", &[e, e], n),
            (Need, "attention.self.key.weight", "attn_k.weight", &[e, e], n),
            (Need, "attention.self.value.weight", "attn_v.weight", &[e, e], n),
            (Need, "attention.output.dense.weight", "attn_output.weight", &[e, e], n),
            (Maybe, "attention.self.query.bias", "attn_q.bias", &[e], n),
            (Maybe, "attention.self.key.bias", "attn_k.bias", &[e], n),
            (Maybe, "attention.self.value.bias", "attn_v.bias", &[e], n),
            (Maybe, "attention.output.dense.bias", "attn_output.bias", &[e], n),
            (Need, "attention.output.LayerNorm.weight", "attn_output_norm.weight", &[e], n),
            (Need, "attention.output.LayerNorm.bias", "attn_output_norm.bias", &[e], n),
            (Need, "intermediate.dense.weight", "ffn_up.weight", &[f, e], n),
            (Maybe, "intermediate.dense.bias", "ffn_up.bias", &[f], n),
            (Need, "output.dense.weight", "ffn_down.weight", &[e, f], n),
            (Maybe, "output.dense.bias", "ffn_down.bias", &[e], n),
            (Need, "output.LayerNorm.weight", "layer_output_norm.weight", &[e], n),
            (Need, "output.LayerNorm.bias", "layer_output_norm.bias", &[e], n),
        ];
        for i in 0..n_layer {
            out.block(&format!("{p}encoder.layer.{i}"), &format!("blk.{i}"), parts)?;
        }
        if classifier {
            // As many scores as the classifier has rows (`num_labels`).
            let n_out = out.rows("classifier.weight").unwrap_or(1);
            out.need(
                format!("{p}pooler.dense.weight"),
                "cls.weight".into(),
                vec![e, e],
                n,
            )?;
            out.add(
                Maybe,
                format!("{p}pooler.dense.bias"),
                "cls.bias".into(),
                vec![e],
                n,
            )?;
            out.need(
                "classifier.weight".into(),
                "cls.output.weight".into(),
                vec![n_out, e],
                n,
            )?;
            out.add(
                Maybe,
                "classifier.bias".into(),
                "cls.output.bias".into(),
                vec![n_out],
                n,
            )?;
        }
        // What an embedding model does not use: the position ids buffer, the pooler of an
        // encoder, the pre-training heads.
        out.drop_matching(|name| {
            let name = name.strip_prefix("bert.").unwrap_or(name);
            name == "embeddings.position_ids"
                || (!classifier && name.starts_with("pooler."))
                || name.starts_with("cls.predictions.")
                || name.starts_with("cls.seq_relationship.")
        });
        Ok(n_vocab)
    }

    fn bpe_pre(&self) -> &'static str {
        "default"
    }
}

/// The pooling of a sentence-transformers model in `dir`: the `Pooling` module of
/// `modules.json` and its `config.json` (mean, [CLS] or last token). `None` when the
/// directory has no such module, or a pooling llama.cpp has no number for (max).
fn sentence_transformers_pooling(dir: &std::path::Path) -> Result<Option<u32>, ConvertError> {
    let modules = dir.join("modules.json");
    if !modules.is_file() {
        return Ok(None);
    }
    let m = read_json(&modules)?;
    let Some(path) = m.as_array().into_iter().flatten().find_map(|module| {
        let ty = module.get("type")?.as_str()?;
        ty.ends_with(".Pooling")
            .then(|| module.get("path")?.as_str().map(str::to_string))?
    }) else {
        return Ok(None);
    };
    let cfg = dir.join(path).join("config.json");
    if !cfg.is_file() {
        return Ok(None);
    }
    let p = read_json(&cfg)?;
    let on = |k: &str| p.get(k).and_then(Json::as_bool) == Some(true);
    Ok(if on("pooling_mode_mean_tokens") {
        Some(MEAN)
    } else if on("pooling_mode_cls_token") {
        Some(CLS)
    } else if on("pooling_mode_lasttoken") {
        Some(LAST)
    } else {
        None
    })
}
