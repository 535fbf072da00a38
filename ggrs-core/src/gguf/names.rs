//! The names and keys of a split model's parts (llama.cpp's `llama_split_path` and
//! `llama_split_prefix`), shared by the reader and the split writer.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Metadata key: the part's number, from 0 (u16).
pub const SPLIT_NO_KEY: &str = "split.no";
/// Metadata key: how many parts the model has (u16).
pub const SPLIT_COUNT_KEY: &str = "split.count";
/// Metadata key: how many tensors all parts hold together (i32).
pub const SPLIT_TENSORS_KEY: &str = "split.tensors.count";

/// The name of part `no` (from 0) of `count`: `PREFIX-%05d-of-%05d.gguf` with the part
/// numbered from 1, as llama.cpp's `llama_split_path`.
pub fn split_path(prefix: &Path, no: u32, count: u32) -> PathBuf {
    let mut s = OsString::from(prefix.as_os_str());
    s.push(format!("-{:05}-of-{count:05}.gguf", no + 1));
    PathBuf::from(s)
}

/// The prefix of `path` if it is named as part `no` (from 0) of `count`
/// (`PREFIX-%05d-of-%05d.gguf`), as llama.cpp's `llama_split_prefix`; `None` otherwise.
pub fn split_prefix(path: &Path, no: u32, count: u32) -> Option<PathBuf> {
    let suffix = format!("-{:05}-of-{count:05}.gguf", no + 1);
    let bytes = path.as_os_str().as_encoded_bytes();
    let cut = bytes.len().checked_sub(suffix.len()).filter(|&c| c > 0)?;
    if &bytes[cut..] != suffix.as_bytes() {
        return None;
    }
    // The suffix is ASCII, so the cut is a boundary of the encoding.
    #[cfg(unix)]
    let prefix = {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(&bytes[..cut]).to_owned()
    };
    #[cfg(not(unix))]
    let prefix = OsString::from(path.as_os_str().to_str()?.get(..cut)?);
    Some(PathBuf::from(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_llama_cpp() {
        let p = split_path(Path::new("/m/model"), 1, 3);
        assert_eq!(p, PathBuf::from("/m/model-00002-of-00003.gguf"));
        assert_eq!(split_prefix(&p, 1, 3), Some(PathBuf::from("/m/model")));
        assert_eq!(split_prefix(&p, 0, 3), None);
        assert_eq!(split_prefix(&p, 1, 4), None);
        assert_eq!(split_prefix(Path::new("-00001-of-00002.gguf"), 0, 2), None);
        assert_eq!(split_prefix(Path::new("model.gguf"), 0, 2), None);
    }
}
