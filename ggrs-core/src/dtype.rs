//! Element types: the GGUF type ids, block sizes and byte sizes.
//!
//! A type stores `block_size()` values in `type_size()` bytes. Plain types (F32, F16, BF16,
//! I32…) have a block size of 1; block-quantized types group 32 or 256 values per block.
//! A row of `ne0` values takes `row_size(ne0)` bytes, and `ne0` must be a multiple of the
//! block size.

use std::fmt;

/// The one table of element types: per type, its doc line, variant, GGUF id, ggml name,
/// values per block and bytes per block (per value for plain types). Everything a type is
/// to the rest of the crate — [`DType`], [`DType::ALL`], [`DType::from_id`],
/// [`DType::block_size`], [`DType::type_size`], [`DType::name`] — comes from its row, so a
/// new type is one row here (and, for a block type, its row in `quants::with_block!`).
macro_rules! dtype_table {
    ($($(#[doc = $doc:expr])+ $v:ident = $id:literal, $name:literal, $block:literal, $bytes:literal;)+) => {
        /// A tensor element type, numbered as in GGUF (`ggml_type`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum DType {
            $($(#[doc = $doc])+ $v = $id,)+
        }

        impl DType {
            /// Every type this build knows, in id order.
            pub const ALL: [DType; [$(DType::$v),+].len()] = [$(DType::$v),+];

            /// Values per block (1 for plain types).
            pub fn block_size(self) -> usize {
                match self {
                    $(DType::$v => $block,)+
                }
            }

            /// Bytes per block (per element for plain types).
            pub fn type_size(self) -> usize {
                match self {
                    $(DType::$v => $bytes,)+
                }
            }

            /// The lower-case name used by GGUF tools (`f32`, `q4_0`, `q4_K`…).
            pub fn name(self) -> &'static str {
                match self {
                    $(DType::$v => $name,)+
                }
            }
        }
    };
}

dtype_table! {
    /// 32-bit IEEE float.
    F32 = 0, "f32", 1, 4;
    /// 16-bit IEEE float.
    F16 = 1, "f16", 1, 2;
    /// 4-bit quantization, 32 values per 18-byte block (scale f16 + 16 nibbles).
    Q4_0 = 2, "q4_0", 32, 18;
    /// 4-bit quantization with minimum, 32 values per 20-byte block.
    Q4_1 = 3, "q4_1", 32, 20;
    /// 5-bit quantization, 32 values per 22-byte block.
    Q5_0 = 6, "q5_0", 32, 22;
    /// 5-bit quantization with minimum, 32 values per 24-byte block.
    Q5_1 = 7, "q5_1", 32, 24;
    /// 8-bit quantization, 32 values per 34-byte block.
    Q8_0 = 8, "q8_0", 32, 34;
    /// 8-bit quantization with sum, 32 values per 36-byte block.
    Q8_1 = 9, "q8_1", 32, 36;
    /// 2-bit k-quant, 256 values per 84-byte super-block.
    Q2K = 10, "q2_K", 256, 84;
    /// 3-bit k-quant, 256 values per 110-byte super-block.
    Q3K = 11, "q3_K", 256, 110;
    /// 4-bit k-quant, 256 values per 144-byte super-block.
    Q4K = 12, "q4_K", 256, 144;
    /// 5-bit k-quant, 256 values per 176-byte super-block.
    Q5K = 13, "q5_K", 256, 176;
    /// 6-bit k-quant, 256 values per 210-byte super-block.
    Q6K = 14, "q6_K", 256, 210;
    /// 8-bit k-quant (dot-product partner of the k-quants), 256 values per 292-byte block.
    Q8K = 15, "q8_K", 256, 292;
    /// 2.06-bit grid i-quant: 256 values per 66-byte block (f16 scale, 8-value groups from a
    /// 256-entry grid, 7-bit sign indices, 4-bit scales per 32).
    IQ2XXS = 16, "iq2_xxs", 256, 66;
    /// 2.31-bit grid i-quant: 256 values per 74-byte block (512-entry grid, 4-bit scales
    /// per 16).
    IQ2XS = 17, "iq2_xs", 256, 74;
    /// 3.06-bit grid i-quant: 256 values per 98-byte block (4-value groups from a 256-entry
    /// grid).
    IQ3XXS = 18, "iq3_xxs", 256, 98;
    /// 1.56-bit grid i-quant: 256 values per 50-byte block (values −1, 0, 1 shifted by ±1/8,
    /// 2048-entry grid).
    IQ1S = 19, "iq1_s", 256, 50;
    /// 4-bit non-linear quantization: 32 values per 18-byte block (f16 scale + 16 bytes of
    /// 4-bit indices into a fixed table of 16 levels).
    IQ4NL = 20, "iq4_nl", 32, 18;
    /// 3.44-bit grid i-quant: 256 values per 110-byte block (512-entry grid, sign bits).
    IQ3S = 21, "iq3_s", 256, 110;
    /// 2.56-bit grid i-quant: 256 values per 82-byte block (1024-entry grid, sign bits).
    IQ2S = 22, "iq2_s", 256, 82;
    /// 4-bit non-linear quantization with 6-bit sub-block scales: 256 values per 136-byte
    /// super-block (f16 scale, 8 × 6-bit scales, 128 bytes of 4-bit indices).
    IQ4XS = 23, "iq4_xs", 256, 136;
    /// 8-bit signed integer.
    I8 = 24, "i8", 1, 1;
    /// 16-bit signed integer.
    I16 = 25, "i16", 1, 2;
    /// 32-bit signed integer (token ids, positions, row indices).
    I32 = 26, "i32", 1, 4;
    /// 64-bit signed integer.
    I64 = 27, "i64", 1, 8;
    /// 64-bit IEEE float.
    F64 = 28, "f64", 1, 8;
    /// 1.75-bit grid i-quant: 256 values per 56-byte block (IQ1_S's grid, 3-bit scales per
    /// 16, f16 scale spread over the scale words).
    IQ1M = 29, "iq1_m", 256, 56;
    /// bfloat16 (the upper half of an f32).
    BF16 = 30, "bf16", 1, 2;
    /// Ternary 1.69-bit: 256 values `d·t`, `t ∈ {−1, 0, 1}`, per 54-byte block (five trits
    /// per byte, f16 scale).
    TQ1_0 = 34, "tq1_0", 256, 54;
    /// Ternary 2-bit: 256 values `d·t`, `t ∈ {−1, 0, 1}`, per 66-byte block (2-bit codes,
    /// f16 scale).
    TQ2_0 = 35, "tq2_0", 256, 66;
    /// Microscaling 4-bit float: 32 E2M1 values per 17-byte block with an E8M0 exponent.
    MXFP4 = 39, "mxfp4", 32, 17;
    /// NVIDIA 4-bit float: 64 E2M1 values per 36-byte block, a UE4M3 scale per 16.
    NVFP4 = 40, "nvfp4", 64, 36;
    /// 1-bit: 128 values `±d` per 18-byte block (sign bits, f16 mean magnitude).
    Q1_0 = 41, "q1_0", 128, 18;
    /// 2-bit: 64 values `(c − 1)·d`, `c ∈ 0..4`, per 18-byte block (f16 scale).
    Q2_0 = 42, "q2_0", 64, 18;
}

/// ggml's names of the tensor types ggrs does not read, by id (llama.cpp's `ggml_type`):
/// none of ggml 0c1e570's types since the grid i-quants came in; a type ggml adds and ggrs
/// does not read yet goes here, so that its message names it.
const UNREAD_GGML_TYPES: [(u32, &str); 0] = [];

/// A tensor type id for a message: `type iq3_s (ggml type 21)` for a type ggrs reads,
/// `type NAME (ggml type N)` for a ggml type listed as unread, `retired type id 4` for
/// Q4_2/Q4_3's old ids, else `unknown type id N`.
pub fn describe_type_id(id: u32) -> String {
    if let Some(t) = DType::from_id(id) {
        return format!("type {} (ggml type {id})", t.name());
    }
    match UNREAD_GGML_TYPES.iter().find(|(i, _)| *i == id) {
        Some((_, name)) => format!("type {name} (ggml type {id})"),
        None if matches!(id, 4 | 5 | 31..=33 | 36..=38) => format!("retired type id {id}"),
        None => format!("unknown type id {id}"),
    }
}

/// The names of the tensor types ggrs reads, comma-separated (for messages).
pub fn supported_type_names() -> String {
    DType::ALL
        .iter()
        .filter(|t| !matches!(t, DType::Q8_1 | DType::Q8K))
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl DType {
    /// The type with GGUF id `id`, or `None` for an unknown or retired id.
    pub fn from_id(id: u32) -> Option<DType> {
        DType::ALL.iter().copied().find(|t| t.id() == id)
    }

    /// The GGUF type id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// True for the block-quantized types.
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// True for the floating-point types a kernel can read as values (F32, F16, BF16).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Bytes taken by a row of `ne0` values. `ne0` must be a multiple of [`block_size`].
    ///
    /// [`block_size`]: DType::block_size
    pub fn row_size(self, ne0: usize) -> usize {
        ne0 / self.block_size() * self.type_size()
    }

    /// Parses a type name, case-insensitively (`"Q4_0"`, `"q4_k"`, `"f16"`…).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for t in DType::ALL {
            assert_eq!(DType::from_id(t.id()), Some(t));
            assert_eq!(DType::from_name(t.name()), Some(t));
        }
        assert_eq!(DType::from_id(4), None);
        assert_eq!(DType::Q4_0.row_size(4864), 4864 / 32 * 18);
        assert_eq!(DType::from_id(20), Some(DType::IQ4NL));
        assert_eq!(DType::from_id(23), Some(DType::IQ4XS));
        assert_eq!(DType::from_name("IQ4_XS"), Some(DType::IQ4XS));
    }

    /// The table keeps id order, and a type it has is no longer in the unread list.
    #[test]
    fn table_in_id_order_and_apart_from_unread() {
        assert!(DType::ALL.windows(2).all(|w| w[0].id() < w[1].id()));
        for (id, name) in UNREAD_GGML_TYPES {
            assert_eq!(
                DType::from_id(id),
                None,
                "{name} is read now: drop it from the list"
            );
        }
    }
}
