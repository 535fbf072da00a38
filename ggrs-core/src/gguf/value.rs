//! Metadata values: the thirteen GGUF value types and typed accessors.

/// A metadata value type and its GGUF id (`gguf_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    /// `GGUF_TYPE_UINT8`
    U8 = 0,
    /// `GGUF_TYPE_INT8`
    I8 = 1,
    /// `GGUF_TYPE_UINT16`
    U16 = 2,
    /// `GGUF_TYPE_INT16`
    I16 = 3,
    /// `GGUF_TYPE_UINT32`
    U32 = 4,
    /// `GGUF_TYPE_INT32`
    I32 = 5,
    /// `GGUF_TYPE_FLOAT32`
    F32 = 6,
    /// `GGUF_TYPE_BOOL` (one byte)
    Bool = 7,
    /// `GGUF_TYPE_STRING` (u64 length, then that many UTF-8 bytes)
    String = 8,
    /// `GGUF_TYPE_ARRAY` (element type u32, count u64, then the elements)
    Array = 9,
    /// `GGUF_TYPE_UINT64`
    U64 = 10,
    /// `GGUF_TYPE_INT64`
    I64 = 11,
    /// `GGUF_TYPE_FLOAT64`
    F64 = 12,
}

impl ValueType {
    /// The type with GGUF id `id`, or `None` outside `0..=12`.
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The GGUF id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The fewest bytes one value of this type takes in a file: its fixed size, the length
    /// field of a string, the type and count fields of an array. A count of `n` values that
    /// needs more than the bytes left in the file is rejected before anything is allocated.
    pub fn min_encoded_size(self) -> usize {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    /// Lower-case name (`u8`, `f32`, `string`, `array`…).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value.
///
/// Arrays may nest (an array of arrays); in a file all elements of one array have the same
/// type, and [`GgufWriter`](super::GgufWriter) refuses an array that mixes types.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Unsigned 8-bit integer.
    U8(u8),
    /// Signed 8-bit integer.
    I8(i8),
    /// Unsigned 16-bit integer.
    U16(u16),
    /// Signed 16-bit integer.
    I16(i16),
    /// Unsigned 32-bit integer.
    U32(u32),
    /// Signed 32-bit integer.
    I32(i32),
    /// Unsigned 64-bit integer.
    U64(u64),
    /// Signed 64-bit integer.
    I64(i64),
    /// 32-bit float.
    F32(f32),
    /// 64-bit float.
    F64(f64),
    /// Boolean.
    Bool(bool),
    /// UTF-8 string.
    String(String),
    /// Array of values of one type.
    Array(Vec<Value>),
}

impl Value {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
        }
    }

    /// The type's name (`u32`, `string`, `array`…), for messages.
    pub fn type_name(&self) -> &'static str {
        self.value_type().name()
    }

    /// The string, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The value as an i128 if it is an integer of any type (not a bool or a float).
    fn as_int(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The value as a u64 if it is an integer of any type and not negative.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_int().and_then(|v| u64::try_from(v).ok())
    }

    /// The value as an i64 if it is an integer of any type that fits.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_int().and_then(|v| i64::try_from(v).ok())
    }

    /// The value as a u32 if it is an integer of any type within `0..=u32::MAX`.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_int().and_then(|v| u32::try_from(v).ok())
    }

    /// The value as an f32 if it is a float (an F64 is rounded) or an integer (converted,
    /// rounded to the nearest f32 if it is large).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => self.as_int().map(|v| v as f32),
        }
    }

    /// The boolean, if this is a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::$v(v)
            }
        })*
    };
}

value_from!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String,
);

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.to_owned())
    }
}

impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Value {
        Value::Array(v.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors() {
        assert_eq!(Value::I8(-1).as_u64(), None);
        assert_eq!(Value::I8(-1).as_i64(), Some(-1));
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::U64(u64::MAX).as_u64(), Some(u64::MAX));
        assert_eq!(Value::U64(1 << 32).as_u32(), None);
        assert_eq!(Value::I32(7).as_u32(), Some(7));
        assert_eq!(Value::I32(7).as_f32(), Some(7.0));
        assert_eq!(Value::F64(0.5).as_f32(), Some(0.5));
        assert_eq!(Value::F32(0.5).as_u64(), None);
        assert_eq!(Value::Bool(true).as_u64(), None);
        assert_eq!(Value::Bool(true).as_bool(), Some(true));
        assert_eq!(Value::from("x").as_str(), Some("x"));
        assert_eq!(
            Value::from(vec![1u8, 2]).as_array().map(<[Value]>::len),
            Some(2)
        );
        for id in 0..=12 {
            assert_eq!(ValueType::from_id(id).map(ValueType::id), Some(id));
        }
        assert_eq!(ValueType::from_id(13), None);
    }
}
