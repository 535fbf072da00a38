//! Bit-exactness with llama.cpp's quantizer: the f16, q8_0 and q4_0 files our quantizer makes
//! from the Qwen2.5-Coder-0.5B source (f16 by dequantizing, the others `--pure` from the
//! f16, as `shared/reference/README.md` says llama.cpp's were made) hold, tensor for tensor,
//! the bytes whose sha256 `qwen05b/tensor-sha256.json` lists.

mod common;

use ggrs_core::gguf::GgufFile;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn check(kind: &str) {
    let Some(path) = common::qwen05b(kind) else {
        return;
    };
    let listing: Value = serde_json::from_str(
        &std::fs::read_to_string(common::reference_dir().join("qwen05b/tensor-sha256.json"))
            .unwrap(),
    )
    .unwrap();
    let want = listing[kind].as_object().expect("listing for the type");
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.tensors().len(), want.len(), "tensor count");
    let mut mismatches = Vec::new();
    for t in file.tensors() {
        let w = &want[&t.name];
        assert_eq!(
            w["type"].as_str().unwrap().to_lowercase(),
            t.dtype.name().to_lowercase(),
            "{}",
            t.name
        );
        let ne: Vec<usize> = w["ne"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(ne, t.shape(), "{}", t.name);
        let digest = Sha256::digest(file.tensor_data(t));
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        if hex != w["sha256"].as_str().unwrap() {
            mismatches.push(t.name.clone());
        }
    }
    assert!(
        mismatches.is_empty(),
        "{kind}: {} tensors differ: {:?}",
        mismatches.len(),
        &mismatches[..mismatches.len().min(10)]
    );
    eprintln!(
        "{kind}: all {} tensors match llama.cpp's sha256",
        want.len()
    );
}

#[test]
fn f16_q8_0_q4_0_files_equal_llama_cpp() {
    for kind in ["f16", "q8_0", "q4_0"] {
        check(kind);
    }
}
