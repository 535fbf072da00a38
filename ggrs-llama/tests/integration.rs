//! The integration tests of this crate, one module per file beside this one, built as one
//! test binary (a binary per file cost a link and a copy of the generic code each: the
//! build took more CPU than the tests). Run one file's tests with
//! `cargo test -p ggrs-llama --test integration <file>::`.

mod chat;
mod chat_glm1;
mod chat_templates;
mod chatglm1;
mod chatglm_tokenizer;
mod common;
mod constraint;
mod context_shift;
mod embed_decoder;
mod embed_hybrids;
mod embed_models;
mod engine;
mod errors;
mod gemma3_270m;
mod gen_model;
mod imatrix_collect;
mod imatrix_quantize;
mod imatrix_quants;
mod kv_cache_types;
mod outputs;
mod perplexity;
mod quantize_files;
mod quantize_iq4_sha;
mod quantize_recipe;
mod quantize_sha;
mod qwen05b;
mod qwen05b_lowbit;
mod reliability;
mod speculative;
mod split_models;
mod tiny_bert;
mod tiny_chatglm;
mod tiny_families;
mod tiny_ffn_widths;
mod tiny_fused_qkv;
mod tiny_gemma2;
mod tiny_gemma4_moe;
mod tiny_hybrids;
mod tiny_llama;
mod tiny_llama3;
mod tiny_moe;
mod tiny_phi3;
mod tiny_qwen3;
mod tiny_rope_scaling;
mod tokenizer;
