//! The element types of a KV cache's keys and values (llama.cpp's `-ctk` / `-ctv`).

use ggrs_core::{DType, FLASH_ATTN_KV_TYPES};

use crate::error::{LlamaError, Result};
use crate::hparams::{HParams, LayerCache};

/// Key and value types of a KV cache.
///
/// Keys and values each take one of llama.cpp's cache types that flash attention reads —
/// f16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl — in any pair; or both are f32, or both bf16
/// (attention then runs as soft-max and two matrix products, llama.cpp's path without flash
/// attention). ggrs always uses flash attention for the former, which llama.cpp requires for
/// a quantized V cache (`-fa on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvTypes {
    /// Type of the keys.
    pub k: DType,
    /// Type of the values.
    pub v: DType,
}

impl Default for KvTypes {
    fn default() -> Self {
        KvTypes::from(DType::F16)
    }
}

impl From<DType> for KvTypes {
    /// The same type for keys and values.
    fn from(t: DType) -> KvTypes {
        KvTypes { k: t, v: t }
    }
}

/// The names `-ctk`/`-ctv` accept, as llama.cpp spells them.
pub fn cache_type_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = vec!["f32", "bf16"];
    names.extend(FLASH_ATTN_KV_TYPES.iter().map(|t| t.name()));
    names
}

/// Parses a cache type name (`f16`, `q8_0`, …: see [`cache_type_names`]; case-insensitive).
pub fn parse_cache_type(name: &str) -> Result<DType> {
    DType::from_name(name)
        .filter(|t| cache_type_names().contains(&t.name()))
        .ok_or_else(|| {
            LlamaError::InvalidArgument(format!(
                "unknown KV cache type {name:?}: use one of {}",
                cache_type_names().join(", ")
            ))
        })
}

impl KvTypes {
    /// Keys of type `k`, values of type `v`, checked ([`KvTypes::check`]).
    pub fn new(k: DType, v: DType) -> Result<KvTypes> {
        let t = KvTypes { k, v };
        t.check()?;
        Ok(t)
    }

    /// True when attention reads this cache with flash attention (every pair of
    /// [`FLASH_ATTN_KV_TYPES`]); false for f32 or bf16 caches.
    pub fn flash_attn(&self) -> bool {
        FLASH_ATTN_KV_TYPES.contains(&self.k) && FLASH_ATTN_KV_TYPES.contains(&self.v)
    }

    /// True when a type is a block-quantized one.
    pub fn quantized(&self) -> bool {
        self.k.is_quantized() || self.v.is_quantized()
    }

    /// Fails unless attention can read keys and values of these types.
    pub fn check(&self) -> Result<()> {
        let same_float = self.k == self.v && matches!(self.k, DType::F32 | DType::BF16);
        if self.flash_attn() || same_float {
            return Ok(());
        }
        let fa: Vec<&str> = FLASH_ATTN_KV_TYPES.iter().map(|t| t.name()).collect();
        Err(LlamaError::InvalidArgument(format!(
            "KV cache types K {} and V {} are not supported: keys and values each take one of \
             {} (read by flash attention), or both f32, or both bf16",
            self.k,
            self.v,
            fa.join(", ")
        )))
    }

    /// The Walsh–Hadamard rotation llama.cpp applies to queries and keys before a quantized
    /// key cache (`attn_rot_k`, its outliers spread over the run): `Some(n)`, the largest
    /// power of two from 64 up that divides `head_dim`, when the keys are quantized and
    /// `head_dim` is a multiple of 64; `None` otherwise.
    pub fn rot_k(&self, head_dim: usize) -> Option<usize> {
        if !self.k.is_quantized() || !head_dim.is_multiple_of(64) {
            return None;
        }
        let mut n = 64;
        while head_dim.is_multiple_of(2 * n) {
            n *= 2;
        }
        Some(n)
    }

    /// The rotation llama.cpp applies to values before a quantized value cache and to the
    /// attention output after it (`attn_rot_v`): `Some(64)` when the values are quantized
    /// and `head_dim` is a multiple of 64.
    pub fn rot_v(&self, head_dim: usize) -> Option<usize> {
        (self.v.is_quantized() && head_dim.is_multiple_of(64)).then_some(64)
    }

    /// Bytes of keys and values one cell holds in a layer whose cache rows have `width`
    /// values.
    pub fn cell_bytes(&self, width: usize) -> usize {
        self.k.row_size(width) + self.v.row_size(width)
    }

    /// Bytes of keys and values one token takes in a cache of `hp`'s model: every layer
    /// with a cache of its own (a layer sharing another's adds nothing; a sliding-window
    /// layer counts as in a full cache).
    pub fn bytes_per_token(&self, hp: &HParams) -> usize {
        hp.kv_layers
            .iter()
            .map(|l| match l {
                LayerCache::Own { width, .. } => self.cell_bytes(*width),
                LayerCache::Shares(_) => 0,
            })
            .sum()
    }
}

impl std::fmt::Display for KvTypes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.k == self.v {
            write!(f, "{}", self.k)
        } else {
            write!(f, "K {} / V {}", self.k, self.v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_bad_pairs_are_refused() {
        assert_eq!(parse_cache_type("Q8_0").unwrap(), DType::Q8_0);
        assert_eq!(parse_cache_type("iq4_nl").unwrap(), DType::IQ4NL);
        let e = parse_cache_type("q4_K").unwrap_err().to_string();
        assert!(e.contains("q5_1") && e.contains("bf16"), "{e}");
        assert!(KvTypes::new(DType::Q4_0, DType::F16).unwrap().flash_attn());
        assert!(KvTypes::new(DType::F32, DType::F32).is_ok());
        let e = KvTypes::new(DType::F32, DType::Q8_0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("iq4_nl") && e.contains("both f32"), "{e}");
    }
}
