//! Small readers of request JSON values shared by the request parsers: a value's JSON type
//! for error messages, the 400 for a field of the wrong type, and integers written as floats.

use serde_json::Value;

use crate::error::ApiError;

/// The JSON type of `v`, for error messages ("a string", "an object", …).
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// 400: `field` has the wrong type.
pub(crate) fn wrong_type(field: &str, expected: &str, v: &Value) -> ApiError {
    ApiError::invalid(
        field,
        format!("'{field}' must be {expected}, not {}", type_name(v)),
    )
}

/// An integer (a float with no fraction counts, as JSON writers may write `3.0`).
pub(crate) fn as_int(v: &Value) -> Option<i64> {
    if let Some(i) = v.as_i64() {
        return Some(i);
    }
    if let Some(u) = v.as_u64() {
        return Some(u.min(i64::MAX as u64) as i64);
    }
    v.as_f64()
        .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
        .map(|f| f as i64)
}
