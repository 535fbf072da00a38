//! The tensor types and file types (llama.cpp's "ftype") the recipes speak of.

use std::fmt;

use ggrs_core::DType;

/// A tensor type a recipe can choose, numbered as ggml numbers it (`ggml_type`).
///
/// This is the recipes' own list rather than [`DType`], because a recipe may choose a type
/// that a build cannot write; [`QuantType::dtype`] says whether this one can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// bfloat16.
    BF16,
    /// 4-bit, 32 values per block, scale only.
    Q4_0,
    /// 4-bit, 32 values per block, scale and minimum.
    Q4_1,
    /// 5-bit, 32 values per block, scale only.
    Q5_0,
    /// 5-bit, 32 values per block, scale and minimum.
    Q5_1,
    /// 8-bit, 32 values per block.
    Q8_0,
    /// 2-bit k-quant (256 values per super-block).
    Q2K,
    /// 3-bit k-quant.
    Q3K,
    /// 4-bit k-quant.
    Q4K,
    /// 5-bit k-quant.
    Q5K,
    /// 6-bit k-quant.
    Q6K,
    /// 4-bit non-linear i-quant, 32 values per block.
    IQ4NL,
    /// 4-bit non-linear i-quant, 256 values per super-block.
    IQ4XS,
    /// Ternary, 1.69 bits per value (256 values per block).
    TQ1_0,
    /// Ternary, 2.06 bits per value (256 values per block).
    TQ2_0,
    /// Microscaling 4-bit float (32 values per block, E8M0 exponent).
    MXFP4,
    /// NVIDIA 4-bit float (64 values per block, UE4M3 scale per 16).
    NVFP4,
    /// 1-bit signs and a mean magnitude (128 values per block).
    Q1_0,
    /// 2-bit codes `−1, 0, 1, 2` times the largest magnitude (64 values per block).
    Q2_0,
    /// 2.06-bit grid i-quant (needs an importance matrix).
    IQ2XXS,
    /// 2.31-bit grid i-quant (needs an importance matrix).
    IQ2XS,
    /// 3.06-bit grid i-quant.
    IQ3XXS,
    /// 1.56-bit grid i-quant (needs an importance matrix).
    IQ1S,
    /// 3.44-bit grid i-quant.
    IQ3S,
    /// 2.5-bit grid i-quant.
    IQ2S,
    /// 1.75-bit grid i-quant (needs an importance matrix).
    IQ1M,
}

impl QuantType {
    /// Every type, in ggml id order.
    pub const ALL: [QuantType; 28] = [
        QuantType::F32,
        QuantType::F16,
        QuantType::Q4_0,
        QuantType::Q4_1,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::Q8_0,
        QuantType::Q2K,
        QuantType::Q3K,
        QuantType::Q4K,
        QuantType::Q5K,
        QuantType::Q6K,
        QuantType::IQ2XXS,
        QuantType::IQ2XS,
        QuantType::IQ3XXS,
        QuantType::IQ1S,
        QuantType::IQ4NL,
        QuantType::IQ3S,
        QuantType::IQ2S,
        QuantType::IQ4XS,
        QuantType::IQ1M,
        QuantType::BF16,
        QuantType::TQ1_0,
        QuantType::TQ2_0,
        QuantType::MXFP4,
        QuantType::NVFP4,
        QuantType::Q1_0,
        QuantType::Q2_0,
    ];

    /// The GGUF / ggml type id.
    pub fn id(self) -> u32 {
        match self {
            QuantType::F32 => 0,
            QuantType::F16 => 1,
            QuantType::Q4_0 => 2,
            QuantType::Q4_1 => 3,
            QuantType::Q5_0 => 6,
            QuantType::Q5_1 => 7,
            QuantType::Q8_0 => 8,
            QuantType::Q2K => 10,
            QuantType::Q3K => 11,
            QuantType::Q4K => 12,
            QuantType::Q5K => 13,
            QuantType::Q6K => 14,
            QuantType::IQ2XXS => 16,
            QuantType::IQ2XS => 17,
            QuantType::IQ3XXS => 18,
            QuantType::IQ1S => 19,
            QuantType::IQ4NL => 20,
            QuantType::IQ3S => 21,
            QuantType::IQ2S => 22,
            QuantType::IQ4XS => 23,
            QuantType::IQ1M => 29,
            QuantType::BF16 => 30,
            QuantType::TQ1_0 => 34,
            QuantType::TQ2_0 => 35,
            QuantType::MXFP4 => 39,
            QuantType::NVFP4 => 40,
            QuantType::Q1_0 => 41,
            QuantType::Q2_0 => 42,
        }
    }

    /// ggml's name of the type (`"q4_K"`, `"iq4_nl"`, …).
    pub fn name(self) -> &'static str {
        match self {
            QuantType::F32 => "f32",
            QuantType::F16 => "f16",
            QuantType::BF16 => "bf16",
            QuantType::Q4_0 => "q4_0",
            QuantType::Q4_1 => "q4_1",
            QuantType::Q5_0 => "q5_0",
            QuantType::Q5_1 => "q5_1",
            QuantType::Q8_0 => "q8_0",
            QuantType::Q2K => "q2_K",
            QuantType::Q3K => "q3_K",
            QuantType::Q4K => "q4_K",
            QuantType::Q5K => "q5_K",
            QuantType::Q6K => "q6_K",
            QuantType::IQ4NL => "iq4_nl",
            QuantType::IQ4XS => "iq4_xs",
            QuantType::IQ2XXS => "iq2_xxs",
            QuantType::IQ2XS => "iq2_xs",
            QuantType::IQ3XXS => "iq3_xxs",
            QuantType::IQ1S => "iq1_s",
            QuantType::IQ3S => "iq3_s",
            QuantType::IQ2S => "iq2_s",
            QuantType::IQ1M => "iq1_m",
            QuantType::TQ1_0 => "tq1_0",
            QuantType::TQ2_0 => "tq2_0",
            QuantType::MXFP4 => "mxfp4",
            QuantType::NVFP4 => "nvfp4",
            QuantType::Q1_0 => "q1_0",
            QuantType::Q2_0 => "q2_0",
        }
    }

    /// Parses a type name case-insensitively (`"q8_0"`, `"Q4_K"`, `"iq4_xs"`), as
    /// llama-quantize's `--tensor-type` and `--output-tensor-type` do.
    pub fn from_name(name: &str) -> Option<QuantType> {
        QuantType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Values per block (1 for the float types).
    pub fn block_size(self) -> usize {
        match self {
            QuantType::F32 | QuantType::F16 | QuantType::BF16 => 1,
            QuantType::Q4_0
            | QuantType::Q4_1
            | QuantType::Q5_0
            | QuantType::Q5_1
            | QuantType::Q8_0
            | QuantType::IQ4NL
            | QuantType::MXFP4 => 32,
            QuantType::NVFP4 | QuantType::Q2_0 => 64,
            QuantType::Q1_0 => 128,
            QuantType::Q2K
            | QuantType::Q3K
            | QuantType::Q4K
            | QuantType::Q5K
            | QuantType::Q6K
            | QuantType::IQ4XS
            | QuantType::TQ1_0
            | QuantType::TQ2_0
            | QuantType::IQ2XXS
            | QuantType::IQ2XS
            | QuantType::IQ3XXS
            | QuantType::IQ1S
            | QuantType::IQ3S
            | QuantType::IQ2S
            | QuantType::IQ1M => 256,
        }
    }

    /// Whether the type is block-quantized (ggml's `ggml_is_quantized`).
    pub fn is_quantized(self) -> bool {
        !matches!(self, QuantType::F32 | QuantType::F16 | QuantType::BF16)
    }

    /// The element type of this build with the same id, if this build can write it (with
    /// importance weights where the type needs them): `None` for a type it reads but does
    /// not write yet.
    pub fn dtype(self) -> Option<DType> {
        DType::from_id(self.id())
            .filter(|&d| !self.is_quantized() || ggrs_core::quants::quantizes_weighted(d))
    }

    /// The recipe type of a build's element type, if recipes know it.
    pub fn from_dtype(t: DType) -> Option<QuantType> {
        QuantType::ALL.iter().copied().find(|q| q.id() == t.id())
    }
}

impl fmt::Display for QuantType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A file type of llama.cpp's quantize tool (`llama_ftype`): the recipe that decides each
/// tensor's type, and the number written as `general.file_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// Everything F32.
    AllF32,
    /// Matrices F16.
    F16,
    /// Matrices BF16.
    BF16,
    /// Q4_0 (output projection Q6_K).
    Q4_0,
    /// Q4_1 (output projection Q6_K).
    Q4_1,
    /// Q5_0 (output projection Q6_K).
    Q5_0,
    /// Q5_1 (output projection Q6_K).
    Q5_1,
    /// Q8_0 everywhere.
    Q8_0,
    /// Q2_K mixture (attn_v, ffn_down and attn_output Q3_K/Q4_K).
    Q2K,
    /// Q2_K "small" mixture.
    Q2KS,
    /// Q3_K small mixture.
    Q3KS,
    /// Q3_K medium mixture.
    Q3KM,
    /// Q3_K large mixture.
    Q3KL,
    /// Q4_K small mixture.
    Q4KS,
    /// Q4_K medium mixture (the most common download).
    Q4KM,
    /// Q5_K small mixture.
    Q5KS,
    /// Q5_K medium mixture.
    Q5KM,
    /// Q6_K everywhere.
    Q6K,
    /// IQ4_NL mixture.
    IQ4NL,
    /// IQ4_XS mixture.
    IQ4XS,
    /// TQ1_0 ternary (token embedding Q4_K).
    TQ1_0,
    /// TQ2_0 ternary (token embedding Q4_K).
    TQ2_0,
    /// MXFP4 for MoE experts (3-D weights), Q8_0 for every other matrix.
    MXFP4Moe,
    /// Q1_0 everywhere (output Q8_0 through the shape fallback).
    Q1_0,
    /// Q2_0 (token embedding Q4_K).
    Q2_0,
    /// IQ2_XXS mixture (needs an importance matrix).
    IQ2XXS,
    /// IQ2_XS mixture (needs an importance matrix).
    IQ2XS,
    /// IQ2_S mixture (IQ2_XS weights, IQ3_S in places; needs an importance matrix).
    IQ2S,
    /// IQ2_M mixture (IQ2_S weights, IQ3_S in places; needs an importance matrix).
    IQ2M,
    /// IQ3_XXS mixture (needs an importance matrix).
    IQ3XXS,
    /// IQ3_XS mixture (IQ3_S and IQ3_XXS).
    IQ3XS,
    /// IQ3_S mixture.
    IQ3S,
    /// IQ3_M mixture (IQ3_S, Q4_K in places).
    IQ3M,
    /// IQ1_S mixture (needs an importance matrix).
    IQ1S,
    /// IQ1_M mixture (needs an importance matrix).
    IQ1M,
}

impl FileType {
    /// Every file type, with the names llama-quantize accepts (upper case).
    pub const ALL: [(FileType, &'static str); 35] = [
        (FileType::Q4_0, "Q4_0"),
        (FileType::Q4_1, "Q4_1"),
        (FileType::Q5_0, "Q5_0"),
        (FileType::Q5_1, "Q5_1"),
        (FileType::Q2K, "Q2_K"),
        (FileType::Q2KS, "Q2_K_S"),
        (FileType::IQ3XS, "IQ3_XS"),
        (FileType::IQ3XXS, "IQ3_XXS"),
        (FileType::IQ3S, "IQ3_S"),
        (FileType::IQ3M, "IQ3_M"),
        (FileType::IQ2XXS, "IQ2_XXS"),
        (FileType::IQ2XS, "IQ2_XS"),
        (FileType::IQ2S, "IQ2_S"),
        (FileType::IQ2M, "IQ2_M"),
        (FileType::IQ1S, "IQ1_S"),
        (FileType::IQ1M, "IQ1_M"),
        (FileType::Q3KS, "Q3_K_S"),
        (FileType::Q3KM, "Q3_K_M"),
        (FileType::Q3KL, "Q3_K_L"),
        (FileType::IQ4NL, "IQ4_NL"),
        (FileType::IQ4XS, "IQ4_XS"),
        (FileType::TQ1_0, "TQ1_0"),
        (FileType::TQ2_0, "TQ2_0"),
        (FileType::MXFP4Moe, "MXFP4_MOE"),
        (FileType::Q1_0, "Q1_0"),
        (FileType::Q2_0, "Q2_0"),
        (FileType::Q4KS, "Q4_K_S"),
        (FileType::Q4KM, "Q4_K_M"),
        (FileType::Q5KS, "Q5_K_S"),
        (FileType::Q5KM, "Q5_K_M"),
        (FileType::Q6K, "Q6_K"),
        (FileType::Q8_0, "Q8_0"),
        (FileType::F16, "F16"),
        (FileType::BF16, "BF16"),
        (FileType::AllF32, "F32"),
    ];

    /// Parses a file type name case-insensitively as llama-quantize does: the names of
    /// [`FileType::ALL`], plus its aliases `Q3_K`, `Q4_K`, `Q5_K` for the medium mixtures,
    /// or the number written as `general.file_type`.
    pub fn from_name(name: &str) -> Option<FileType> {
        let alias = match name.to_ascii_uppercase().as_str() {
            "Q3_K" => Some(FileType::Q3KM),
            "Q4_K" => Some(FileType::Q4KM),
            "Q5_K" => Some(FileType::Q5KM),
            _ => None,
        };
        alias
            .or_else(|| {
                FileType::ALL
                    .iter()
                    .find(|(_, n)| n.eq_ignore_ascii_case(name))
                    .map(|&(t, _)| t)
            })
            .or_else(|| {
                let id: u32 = name.parse().ok()?;
                FileType::ALL
                    .iter()
                    .find(|(t, _)| t.id() == id)
                    .map(|&(t, _)| t)
            })
    }

    /// The name llama-quantize gives it (`"Q4_K_M"`).
    pub fn name(self) -> &'static str {
        FileType::ALL
            .iter()
            .find(|(t, _)| *t == self)
            .map_or("?", |&(_, n)| n)
    }

    /// llama.cpp's `llama_ftype` number, written as `general.file_type`.
    pub fn id(self) -> u32 {
        match self {
            FileType::AllF32 => 0,
            FileType::F16 => 1,
            FileType::Q4_0 => 2,
            FileType::Q4_1 => 3,
            FileType::Q8_0 => 7,
            FileType::Q5_0 => 8,
            FileType::Q5_1 => 9,
            FileType::Q2K => 10,
            FileType::Q3KS => 11,
            FileType::Q3KM => 12,
            FileType::Q3KL => 13,
            FileType::Q4KS => 14,
            FileType::Q4KM => 15,
            FileType::Q5KS => 16,
            FileType::Q5KM => 17,
            FileType::Q6K => 18,
            FileType::IQ2XXS => 19,
            FileType::IQ2XS => 20,
            FileType::Q2KS => 21,
            FileType::IQ3XS => 22,
            FileType::IQ3XXS => 23,
            FileType::IQ1S => 24,
            FileType::IQ4NL => 25,
            FileType::IQ3S => 26,
            FileType::IQ3M => 27,
            FileType::IQ2S => 28,
            FileType::IQ2M => 29,
            FileType::IQ1M => 31,
            FileType::IQ4XS => 30,
            FileType::BF16 => 32,
            FileType::TQ1_0 => 36,
            FileType::TQ2_0 => 37,
            FileType::MXFP4Moe => 38,
            FileType::Q1_0 => 40,
            FileType::Q2_0 => 41,
        }
    }

    /// The type most weights get (llama.cpp's `llama_ftype_get_default_type`).
    pub fn default_type(self) -> QuantType {
        match self {
            FileType::AllF32 => QuantType::F32,
            FileType::F16 => QuantType::F16,
            FileType::BF16 => QuantType::BF16,
            FileType::Q4_0 => QuantType::Q4_0,
            FileType::Q4_1 => QuantType::Q4_1,
            FileType::Q5_0 => QuantType::Q5_0,
            FileType::Q5_1 => QuantType::Q5_1,
            FileType::Q8_0 => QuantType::Q8_0,
            FileType::Q2K | FileType::Q2KS => QuantType::Q2K,
            FileType::Q3KS | FileType::Q3KM | FileType::Q3KL => QuantType::Q3K,
            FileType::Q4KS | FileType::Q4KM => QuantType::Q4K,
            FileType::Q5KS | FileType::Q5KM => QuantType::Q5K,
            FileType::Q6K => QuantType::Q6K,
            FileType::IQ4NL => QuantType::IQ4NL,
            FileType::IQ4XS => QuantType::IQ4XS,
            FileType::TQ1_0 => QuantType::TQ1_0,
            FileType::TQ2_0 => QuantType::TQ2_0,
            FileType::MXFP4Moe => QuantType::MXFP4,
            FileType::Q1_0 => QuantType::Q1_0,
            FileType::Q2_0 => QuantType::Q2_0,
            FileType::IQ2XXS => QuantType::IQ2XXS,
            FileType::IQ2XS | FileType::IQ2S => QuantType::IQ2XS,
            FileType::IQ2M => QuantType::IQ2S,
            FileType::IQ3XXS => QuantType::IQ3XXS,
            FileType::IQ3XS | FileType::IQ3S | FileType::IQ3M => QuantType::IQ3S,
            FileType::IQ1S => QuantType::IQ1S,
            FileType::IQ1M => QuantType::IQ1M,
        }
    }
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
