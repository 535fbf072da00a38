//! Element types: the GGUF type ids, block sizes and byte sizes.
//!
//! A type stores `block_size()` values in `type_size()` bytes. Plain types (F32, F16, BF16,
//! I32…) have a block size of 1; block-quantized types group 32 or 256 values per block.
//! A row of `ne0` values takes `row_size(ne0)` bytes, and `ne0` must be a multiple of the
//! block size.

use std::fmt;

/// A tensor element type, numbered as in GGUF (`ggml_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DType {
    /// 32-bit IEEE float.
    F32 = 0,
    /// 16-bit IEEE float.
    F16 = 1,
    /// 4-bit quantization, 32 values per 18-byte block (scale f16 + 16 nibbles).
    Q4_0 = 2,
    /// 4-bit quantization with minimum, 32 values per 20-byte block.
    Q4_1 = 3,
    /// 5-bit quantization, 32 values per 22-byte block.
    Q5_0 = 6,
    /// 5-bit quantization with minimum, 32 values per 24-byte block.
    Q5_1 = 7,
    /// 8-bit quantization, 32 values per 34-byte block.
    Q8_0 = 8,
    /// 8-bit quantization with sum, 32 values per 36-byte block.
    Q8_1 = 9,
    /// 2-bit k-quant, 256 values per 84-byte super-block.
    Q2K = 10,
    /// 3-bit k-quant, 256 values per 110-byte super-block.
    Q3K = 11,
    /// 4-bit k-quant, 256 values per 144-byte super-block.
    Q4K = 12,
    /// 5-bit k-quant, 256 values per 176-byte super-block.
    Q5K = 13,
    /// 6-bit k-quant, 256 values per 210-byte super-block.
    Q6K = 14,
    /// 8-bit k-quant (dot-product partner of the k-quants), 256 values per 292-byte block.
    Q8K = 15,
    /// 4-bit non-linear quantization: 32 values per 18-byte block (f16 scale + 16 bytes of
    /// 4-bit indices into a fixed table of 16 levels).
    IQ4NL = 20,
    /// 4-bit non-linear quantization with 6-bit sub-block scales: 256 values per 136-byte
    /// super-block (f16 scale, 8 × 6-bit scales, 128 bytes of 4-bit indices).
    IQ4XS = 23,
    /// 8-bit signed integer.
    I8 = 24,
    /// 16-bit signed integer.
    I16 = 25,
    /// 32-bit signed integer (token ids, positions, row indices).
    I32 = 26,
    /// 64-bit signed integer.
    I64 = 27,
    /// 64-bit IEEE float.
    F64 = 28,
    /// bfloat16 (the upper half of an f32).
    BF16 = 30,
}

/// ggml's names of the tensor types ggrs does not read, by id (llama.cpp's `ggml_type`).
const UNREAD_GGML_TYPES: [(u32, &str); 13] = [
    (16, "IQ2_XXS"),
    (17, "IQ2_XS"),
    (18, "IQ3_XXS"),
    (19, "IQ1_S"),
    (21, "IQ3_S"),
    (22, "IQ2_S"),
    (29, "IQ1_M"),
    (34, "TQ1_0"),
    (35, "TQ2_0"),
    (39, "MXFP4"),
    (40, "NVFP4"),
    (41, "Q1_0"),
    (42, "Q2_0"),
];

/// A tensor type id for a message: `type IQ3_S (ggml type 21)` for a ggml type ggrs does
/// not read, `retired type id 4` for Q4_2/Q4_3's old ids, else `unknown type id N`.
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
    /// Every type this build knows, in id order.
    pub const ALL: [DType; 22] = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::Q8K,
        DType::IQ4NL,
        DType::IQ4XS,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F64,
        DType::BF16,
    ];

    /// The type with GGUF id `id`, or `None` for an unknown or retired id.
    pub fn from_id(id: u32) -> Option<DType> {
        DType::ALL.iter().copied().find(|t| t.id() == id)
    }

    /// The GGUF type id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Values per block (1 for plain types).
    pub fn block_size(self) -> usize {
        use DType::*;
        match self {
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4NL => 32,
            Q2K | Q3K | Q4K | Q5K | Q6K | Q8K | IQ4XS => 256,
            _ => 1,
        }
    }

    /// Bytes per block (per element for plain types).
    pub fn type_size(self) -> usize {
        use DType::*;
        match self {
            F32 | I32 => 4,
            F16 | BF16 | I16 => 2,
            I8 => 1,
            I64 | F64 => 8,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2K => 84,
            Q3K => 110,
            Q4K => 144,
            Q5K => 176,
            Q6K => 210,
            Q8K => 292,
            IQ4NL => 18,
            IQ4XS => 136,
        }
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

    /// The lower-case name used by GGUF tools (`f32`, `q4_0`, `q4_K`…).
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            F32 => "f32",
            F16 => "f16",
            Q4_0 => "q4_0",
            Q4_1 => "q4_1",
            Q5_0 => "q5_0",
            Q5_1 => "q5_1",
            Q8_0 => "q8_0",
            Q8_1 => "q8_1",
            Q2K => "q2_K",
            Q3K => "q3_K",
            Q4K => "q4_K",
            Q5K => "q5_K",
            Q6K => "q6_K",
            Q8K => "q8_K",
            IQ4NL => "iq4_nl",
            IQ4XS => "iq4_xs",
            I8 => "i8",
            I16 => "i16",
            I32 => "i32",
            I64 => "i64",
            F64 => "f64",
            BF16 => "bf16",
        }
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
}
