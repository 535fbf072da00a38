//! Every `#[target_feature]` function for AArch64: the NEON (and `dotprod`) kernels of
//! `neon.rs` — Q4_0·Q8_0 and Q8_0·Q8_0 in ggml's x86 lane order and, for Q4_0, its
//! repacked order — and the Q8_0 activation quantizer. `kernels::dot_builds` wraps them;
//! they are built and tested for aarch64 by `scripts/check-neon.sh` (cross compiler and
//! qemu).

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
