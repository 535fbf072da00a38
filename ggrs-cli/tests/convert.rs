//! `ggrs convert`: converts the ChatGLM-6B v1 tiny checkpoint with progress and a note
//! about the missing tokenizer, and fails cleanly on bad input.

use crate::common;

use std::path::PathBuf;

use common::ggrs;
use ggrs_core::gguf::GgufFile;
use ggrs_core::DType;

fn tiny_v1() -> String {
    common::reference("chatglm6b-v1/tiny_model")
}

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-convert-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn converts_the_chatglm1_tiny_model() {
    let dir = scratch("ok");
    for (t, dtype) in [("f32", DType::F32), ("f16", DType::F16)] {
        let out = dir.join(format!("tiny-{t}.gguf"));
        let (ok, _, err) = ggrs(&["convert", &tiny_v1(), out.to_str().unwrap(), "--outtype", t]);
        assert!(ok, "{err}");
        assert!(
            err.contains("note:") && err.contains("no tokenizer"),
            "{err}"
        );
        assert!(
            err.contains("40/40") && err.contains("100.0%"),
            "progress: {err}"
        );
        assert!(err.contains("wrote") && err.contains("chatglm1"), "{err}");
        let g = GgufFile::open(&out).unwrap();
        assert_eq!(
            g.get("general.architecture").and_then(|v| v.as_str()),
            Some("chatglm1")
        );
        assert_eq!(g.tensors().len(), 40);
        assert_eq!(g.tensor("blk.2.ffn_up.weight").unwrap().dtype, dtype);
        assert_eq!(g.tensor("blk.2.ffn_up.bias").unwrap().dtype, DType::F32);
        assert_eq!(
            g.get("tokenizer.ggml.gmask_token_id")
                .and_then(|v| v.as_u32()),
            Some(990)
        );
    }
}

#[test]
fn bad_input_fails_with_a_message() {
    let dir = scratch("bad");
    let out = dir.join("x.gguf");
    let out = out.to_str().unwrap();
    // No config.json.
    let (ok, _, err) = ggrs(&["convert", dir.to_str().unwrap(), out]);
    assert!(!ok);
    assert!(
        err.starts_with("error:") && err.contains("config.json"),
        "{err}"
    );
    // Unknown output type.
    let (ok, _, err) = ggrs(&["convert", &tiny_v1(), out, "--outtype", "q5_k"]);
    assert!(!ok);
    assert!(err.contains("unknown output type `q5_k`"), "{err}");
    // Unsupported architecture.
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures": ["T5ForConditionalGeneration"]}"#,
    )
    .unwrap();
    let (ok, _, err) = ggrs(&["convert", dir.to_str().unwrap(), out]);
    assert!(!ok);
    assert!(
        err.contains("unsupported architecture") && err.contains("T5ForConditionalGeneration"),
        "{err}"
    );
    assert!(!std::path::Path::new(out).exists());
}
