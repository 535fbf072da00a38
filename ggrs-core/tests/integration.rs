//! The integration tests of ggrs-core, one module per file beside this one, built as one
//! test binary (a binary per file cost a link and a copy of the generic code each). Run one
//! file's tests with `cargo test -p ggrs-core --test integration <file>::`.
//! Binaries of their own: `quants_neon.rs` (`scripts/check-neon.sh` cross-builds it) and the
//! files whose tests switch the process-wide `dispatch::force_scalar` while graphs run
//! (each was written for a process where it is the only test that does; see Cargo.toml).

mod alloc;
mod common;
mod context;
mod f32_matmul_order;
mod flash_attn;
mod flash_attn_quant;
mod for_each_mut;
mod gguf;
mod gpt_oss_ops;
mod matmul_observer;
mod mul_mat_id;
mod ops;
mod ops_fused;
mod ops_glm;
mod outfile;
mod quantize_importance;
mod quants;
mod quants_iq4;
mod repacked_k;
mod rope_yarn;
mod softcap_geglu;
mod split;
mod ssm_ops;
