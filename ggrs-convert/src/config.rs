//! Typed access to `config.json`: each getter names the key at fault when a value is of the
//! wrong kind, and takes a list of keys where checkpoints spell one setting several ways.

use serde_json::Value as Json;

use crate::error::ConvertError;

/// `config.json`, read through typed getters.
pub(crate) struct Cfg<'a>(pub &'a Json);

impl Cfg<'_> {
    /// The first of `keys` present and not null, with its value.
    fn find<'k>(&self, keys: &[&'k str]) -> Option<(&'k str, &Json)> {
        keys.iter()
            .find_map(|k| self.0.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)))
    }

    /// The raw value of `key`, if present (null included).
    pub(crate) fn get(&self, key: &str) -> Option<&Json> {
        self.0.get(key)
    }

    /// A non-negative integer from the first of `keys` present, or `None`.
    pub(crate) fn opt_usize(&self, keys: &[&str]) -> Result<Option<usize>, ConvertError> {
        match self.find(keys) {
            None => Ok(None),
            Some((k, v)) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| ConvertError::Config {
                    key: k.to_string(),
                    detail: format!("should be a non-negative integer, found {v}"),
                }),
        }
    }

    /// A non-negative integer the architecture needs: missing is an error.
    pub(crate) fn usize(&self, keys: &[&str]) -> Result<usize, ConvertError> {
        self.opt_usize(keys)?.ok_or_else(|| ConvertError::Config {
            key: keys.join("|"),
            detail: "is missing (the architecture needs it)".into(),
        })
    }

    /// [`Cfg::usize`], and 0 is an error too.
    pub(crate) fn positive(&self, keys: &[&str]) -> Result<usize, ConvertError> {
        let v = self.usize(keys)?;
        if v == 0 {
            return Err(ConvertError::Config {
                key: keys[0].to_string(),
                detail: "is 0".into(),
            });
        }
        Ok(v)
    }

    /// A number from the first of `keys` present, or `None`.
    pub(crate) fn opt_f64(&self, keys: &[&str]) -> Result<Option<f64>, ConvertError> {
        match self.find(keys) {
            None => Ok(None),
            Some((k, v)) => v.as_f64().map(Some).ok_or_else(|| ConvertError::Config {
                key: k.to_string(),
                detail: format!("should be a number, found {v}"),
            }),
        }
    }

    /// A boolean `key`, or `None`.
    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>, ConvertError> {
        match self.find(&[key]) {
            None => Ok(None),
            Some((k, v)) => v.as_bool().map(Some).ok_or_else(|| ConvertError::Config {
                key: k.to_string(),
                detail: format!("should be true or false, found {v}"),
            }),
        }
    }

    /// A token id: an integer, or the first of a list (`eos_token_id: [2, 3]`).
    pub(crate) fn token_id(&self, key: &str) -> Result<Option<u32>, ConvertError> {
        let Some((k, v)) = self.find(&[key]) else {
            return Ok(None);
        };
        let v = match v.as_array() {
            Some(a) => match a.first() {
                Some(first) => first,
                None => return Ok(None),
            },
            None => v,
        };
        v.as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| ConvertError::Config {
                key: k.to_string(),
                detail: format!("should be a token id, found {v}"),
            })
    }
}
