//! Whole files equal to llama.cpp's: `ggrs quantize` (the library call the command makes) on
//! the tiny reference models of seven architectures (`shared/reference/tiny`), with every
//! file type and with `--pure`, `--tensor-type`, `--output-tensor-type`,
//! `--token-embedding-type` and `--leave-output-tensor`, writes files whose size and sha256
//! are those of the files llama.cpp's `llama-quantize` (commit 0c1e570) wrote with the same
//! options: `tests/data/llama-quantize-tiny.json` records them (metadata order, tensor order,
//! types and bytes all count). Where llama-quantize aborts (`"error": true`: an explicit type
//! whose blocks do not divide the rows), ggrs must return an error.

use crate::common;

use ggrs_core::gguf::GgufFile;
use ggrs_core::quantize::QuantizeOptions;
use ggrs_llama::quantize::{quantize, FileType, QuantType, RecipeOptions, TensorTypeOverride};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn recipe(case: &Value) -> RecipeOptions {
    let ty = |k: &str| {
        case[k]
            .as_str()
            .map(|s| QuantType::from_name(s).unwrap_or_else(|| panic!("type {s}")))
    };
    let mut r = RecipeOptions::new(
        FileType::from_name(case["type"].as_str().expect("type")).expect("file type"),
    );
    r.pure = case["pure"].as_bool().unwrap_or(false);
    r.leave_output = case["leave_output_tensor"].as_bool().unwrap_or(false);
    r.output_type = ty("output_tensor_type");
    r.token_embedding_type = ty("token_embedding_type");
    if let Some(list) = case["tensor_type"].as_array() {
        for spec in list {
            r.overrides
                .push(TensorTypeOverride::parse(spec.as_str().expect("spec")).expect("override"));
        }
    }
    r
}

#[test]
fn tiny_models_quantize_to_llama_cpps_files() {
    let here = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let data: Value = serde_json::from_str(
        &std::fs::read_to_string(here.join("tests/data/llama-quantize-tiny.json"))
            .expect("read the llama-quantize listing"),
    )
    .expect("valid json");
    let cases = data["cases"].as_array().expect("cases");
    assert!(cases.len() >= 133, "7 models × 19 file types at least");
    let dir = std::env::temp_dir().join(format!("ggrs-quantize-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out = dir.join("out.gguf");
    let opts = QuantizeOptions {
        allow_requantize: false,
        n_threads: 2,
    };
    let mut failures = Vec::new();
    for case in cases {
        let model = case["model"].as_str().expect("model");
        let src = common::reference_dir().join(format!("tiny/{model}-f16.gguf"));
        let input = GgufFile::open(&src).expect("open the tiny model");
        let what = format!("{model} {}", serde_json::to_string(case).expect("json"));
        let result = quantize(&input, &out, &recipe(case), &opts, |_| {});
        if case["error"].as_bool() == Some(true) {
            // llama-quantize aborts on these (an explicit type whose blocks do not divide the
            // rows); ggrs must refuse them with an error.
            if result.is_ok() {
                failures.push(format!("{what}: llama-quantize fails, ggrs wrote a file"));
            }
            continue;
        }
        if let Err(e) = result {
            failures.push(format!("{what}: {e}"));
            continue;
        }
        let bytes = std::fs::read(&out).expect("read the output");
        let hex: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if bytes.len() as u64 != case["size"].as_u64().expect("size")
            || hex != case["sha256"].as_str().expect("sha256")
        {
            failures.push(format!("{what}: {} bytes, sha256 {hex}", bytes.len()));
        }
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
    assert!(
        failures.is_empty(),
        "{} of {} files differ from llama-quantize's:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    eprintln!("all {} files equal llama-quantize's", cases.len());
}
