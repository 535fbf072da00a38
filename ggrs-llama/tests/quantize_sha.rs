//! Bit-exactness with llama.cpp's quantize tool: the files our quantizer makes from the
//! Qwen2.5-Coder-0.5B source hold, tensor for tensor, the types, shapes and bytes (sha256)
//! that `qwen05b/tensor-sha256.json` lists for llama.cpp's files: f16 (by dequantizing),
//! q8_0 and q4_0 (`--pure` from the f16), and the default recipes q4_k_m, q5_k_m, q6_k,
//! q3_k_m, q2_k, iq4_xs, iq4_nl, q4_1, q5_1, q5_0 (`llama-quantize f16.gguf OUT TYPE`), as
//! `shared/reference/README.md` says they were made.

use crate::common;

use std::collections::BTreeMap;

use ggrs_core::gguf::GgufFile;
use ggrs_llama::quantize::{choose_types, FileType, ModelFacts, QuantType, RecipeOptions};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn listing(kind: &str) -> serde_json::Map<String, Value> {
    listing_in("tensor-sha256.json", kind)
}

/// The listing of `kind` in `qwen05b/<json>`.
fn listing_in(json: &str, kind: &str) -> serde_json::Map<String, Value> {
    let all: Value = serde_json::from_str(
        &std::fs::read_to_string(common::reference_dir().join("qwen05b").join(json))
            .expect("read the tensor listing"),
    )
    .expect("valid json");
    all[kind]
        .as_object()
        .unwrap_or_else(|| panic!("no listing for {kind}"))
        .clone()
}

fn ne_of(w: &Value) -> Vec<usize> {
    w["ne"]
        .as_array()
        .expect("ne array")
        .iter()
        .map(|x| x.as_u64().expect("ne entry") as usize)
        .collect()
}

/// Compares the file of `kind` with llama.cpp's listing; returns what differs.
fn check(kind: &str) -> Vec<String> {
    let Some(path) = common::qwen05b(kind) else {
        return Vec::new();
    };
    let want = listing(kind);
    let file = GgufFile::open(&path).expect("open the derived file");
    let mut problems = Vec::new();
    if file.tensors().len() != want.len() {
        problems.push(format!(
            "{kind}: {} tensors, llama.cpp's file has {}",
            file.tensors().len(),
            want.len()
        ));
    }
    // Mismatched bytes, counted per type.
    let mut differ: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in file.tensors() {
        let Some(w) = want.get(&t.name) else {
            problems.push(format!("{kind}: {} is not in llama.cpp's file", t.name));
            continue;
        };
        let wt = w["type"].as_str().expect("type");
        if !wt.eq_ignore_ascii_case(t.dtype.name()) {
            problems.push(format!(
                "{kind}: {} is {}, llama.cpp's is {wt}",
                t.name, t.dtype
            ));
            continue;
        }
        if ne_of(w) != t.shape() {
            problems.push(format!("{kind}: {} has shape {:?}", t.name, t.shape()));
            continue;
        }
        let digest = Sha256::digest(file.tensor_data(t));
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        if hex != w["sha256"].as_str().expect("sha256") {
            differ
                .entry(wt.to_string())
                .or_default()
                .push(t.name.clone());
        }
    }
    for (ty, names) in differ {
        problems.push(format!(
            "{kind}: {} {ty} tensors differ from llama.cpp's bytes, e.g. {:?}",
            names.len(),
            &names[..names.len().min(4)]
        ));
    }
    if problems.is_empty() {
        eprintln!(
            "{kind}: all {} tensors match llama.cpp's sha256",
            want.len()
        );
    }
    problems
}

/// Compares only the type and shape each tensor gets under recipe `kind` (for the recipes
/// whose types this build cannot write yet).
fn check_choice(kind: &str) -> Vec<String> {
    check_choice_in(listing(kind), kind)
}

/// [`check_choice`] against the listing `want`.
fn check_choice_in(want: serde_json::Map<String, Value>, kind: &str) -> Vec<String> {
    let Some(f16) = common::qwen05b("f16") else {
        return Vec::new();
    };
    let file = GgufFile::open(&f16).expect("open the f16 file");
    let facts = ModelFacts::from_gguf(&file).expect("model facts");
    let recipe = RecipeOptions::new(FileType::from_name(kind).expect("known file type"));
    let choice = choose_types(file.tensors(), &facts, &recipe).expect("choose types");
    let mut problems = Vec::new();
    for (t, c) in file.tensors().iter().zip(&choice.types) {
        let w = &want[&t.name];
        let ours = c.map_or(t.dtype.name(), QuantType::name);
        let wt = w["type"].as_str().expect("type");
        if !wt.eq_ignore_ascii_case(ours) {
            problems.push(format!(
                "{kind}: {} would be {ours}, llama.cpp's is {wt}",
                t.name
            ));
        }
        if ne_of(w) != t.shape() {
            problems.push(format!("{kind}: {} has shape {:?}", t.name, t.shape()));
        }
    }
    if problems.is_empty() {
        eprintln!(
            "{kind}: the types of all {} tensors match llama.cpp's (bytes not checked here)",
            want.len()
        );
    }
    problems
}

fn assert_none(problems: Vec<String>) {
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn f16_q8_0_q4_0_files_equal_llama_cpp() {
    let _g = common::serial();
    assert_none(
        ["f16", "q8_0", "q4_0"]
            .into_iter()
            .flat_map(check)
            .collect(),
    );
}

#[test]
fn k_quant_recipes_equal_llama_cpp() {
    let _g = common::serial();
    assert_none(
        ["q4_k_m", "q5_k_m", "q6_k", "q3_k_m", "q2_k"]
            .into_iter()
            .flat_map(check)
            .collect(),
    );
}

#[test]
fn legacy_recipes_equal_llama_cpp() {
    let _g = common::serial();
    assert_none(
        ["q4_1", "q5_1", "q5_0"]
            .into_iter()
            .flat_map(check)
            .collect(),
    );
}

#[test]
fn iq4_recipes_equal_llama_cpp() {
    let _g = common::serial();
    let writable = QuantType::IQ4NL.dtype().is_some() && QuantType::IQ4XS.dtype().is_some();
    assert_none(
        ["iq4_nl", "iq4_xs"]
            .into_iter()
            .flat_map(|k| if writable { check(k) } else { check_choice(k) })
            .collect(),
    );
}

/// The ternary recipes (`llama-quantize … TQ1_0` / `TQ2_0`, made with the importance matrix,
/// which they ignore) give every tensor llama.cpp's type: TQ for `ffn_down`, the Q4_0 shape
/// fallback for the 896-wide matrices, Q4_K → Q5_0 for the token embedding, Q8_0 for the
/// output (`qwen05b/tensor-sha256-lowbit.json`). The TQ tensors' bytes are checked in
/// `quantize_iq4_sha.rs`; the Q4_0 ones are not comparable (llama.cpp's used the matrix).
#[test]
fn ternary_recipes_choose_llama_cpp_types() {
    let _g = common::serial();
    for kind in ["tq1_0", "tq2_0"] {
        assert_none(check_choice_in(
            listing_in("tensor-sha256-lowbit.json", kind),
            kind,
        ));
    }
}

/// The recipes of the new low-bit file types choose llama.cpp's type for every tensor
/// (`llama-quantize … Q1_0`, `Q2_0`, `MXFP4_MOE`; `qwen05b/tensor-sha256-lowbit.json`):
/// Q1_0 everywhere but the output (Q6_K → Q8_0 by the shape fallback), Q2_0 with the token
/// embedding Q4_K → Q5_0, and MXFP4_MOE's Q8_0 for a model without experts. The bytes of
/// their Q1_0 / Q2_0 tensors are checked in `quantize_iq4_sha.rs`.
#[test]
fn lowbit_recipes_choose_llama_cpp_types() {
    let _g = common::serial();
    for kind in ["q1_0", "q2_0", "mxfp4_moe"] {
        assert_none(check_choice_in(
            listing_in("tensor-sha256-lowbit.json", kind),
            kind,
        ));
    }
}
