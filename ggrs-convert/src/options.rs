//! What the caller chooses: the output type of the matrices, threads, the model's name.

use ggrs_core::DType;

use crate::error::ConvertError;

/// The type matrices are written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutType {
    /// 32-bit float (exact for every source type).
    F32,
    /// 16-bit float (llama.cpp's default).
    #[default]
    F16,
    /// bfloat16.
    BF16,
    /// 8-bit blocks of 32 (llama.cpp's Q8_0).
    Q8_0,
    /// 4-bit blocks of 32 (llama.cpp's Q4_0).
    Q4_0,
}

impl OutType {
    /// The GGUF tensor type of the matrices.
    pub fn dtype(self) -> DType {
        match self {
            OutType::F32 => DType::F32,
            OutType::F16 => DType::F16,
            OutType::BF16 => DType::BF16,
            OutType::Q8_0 => DType::Q8_0,
            OutType::Q4_0 => DType::Q4_0,
        }
    }

    /// The name `--outtype` takes (`f32`, `f16`, `bf16`, `q8_0`, `q4_0`).
    pub fn name(self) -> &'static str {
        match self {
            OutType::F32 => "f32",
            OutType::F16 => "f16",
            OutType::BF16 => "bf16",
            OutType::Q8_0 => "q8_0",
            OutType::Q4_0 => "q4_0",
        }
    }

    /// llama.cpp's `general.file_type` for a file whose matrices are of this type.
    pub fn file_type(self) -> u32 {
        match self {
            OutType::F32 => 0,
            OutType::F16 => 1,
            OutType::Q4_0 => 2,
            OutType::Q8_0 => 7,
            OutType::BF16 => 32,
        }
    }
}

impl std::str::FromStr for OutType {
    type Err = ConvertError;

    fn from_str(s: &str) -> Result<OutType, ConvertError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "f32" => OutType::F32,
            "f16" => OutType::F16,
            "bf16" => OutType::BF16,
            "q8_0" => OutType::Q8_0,
            "q4_0" => OutType::Q4_0,
            _ => return Err(ConvertError::OutType(s.to_string())),
        })
    }
}

/// How to convert.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// Type of the matrices.
    pub outtype: OutType,
    /// Threads converting rows (0: all available).
    pub n_threads: usize,
    /// `general.name`; by default the last part of `_name_or_path` in `config.json`, else
    /// the directory's name.
    pub name: Option<String>,
}
