//! Umbrella crate: re-exports [`ggrs_core`], [`ggrs_llama`] and [`ggrs_convert`].
pub use ggrs_convert as convert;
pub use ggrs_core as core;
pub use ggrs_llama as llama;
