//! # ggrs-llama
//!
//! LLaMA-family and ChatGLM inference on top of `ggrs-core` (in progress).
