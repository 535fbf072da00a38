//! Umbrella crate: re-exports [`ggrs_core`] and [`ggrs_llama`].
pub use ggrs_core as core;
pub use ggrs_llama as llama;
