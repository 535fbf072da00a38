//! Bit-exactness of the IQ4_NL and IQ4_XS quantizers with llama.cpp's quantize tool: each
//! tensor of three layers that llama.cpp's IQ4_NL and IQ4_XS recipes (`shared/reference/README.md`)
//! stored as IQ4_NL or IQ4_XS, quantized here from the f16 file (`quants::quantize_row_dyn`, the row
//! encoder `ggrs quantize` runs), has the sha256 that `qwen05b/tensor-sha256.json` lists; and
//! the same for the TQ1_0 and TQ2_0 tensors of the ternary recipes
//! (`qwen05b/tensor-sha256-lowbit.json`).

use crate::common;

use std::collections::BTreeMap;

use ggrs_core::gguf::GgufFile;
use ggrs_core::quants::quantize_row_dyn;
use ggrs_core::types::traits;
use ggrs_core::DType;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// sha256 of `name` quantized to `to` from the f16 file.
fn quantized_sha(file: &GgufFile, name: &str, to: DType) -> String {
    let t = file
        .tensors()
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{name} is not in the f16 file"));
    let data = file.tensor_data(t);
    let ne0 = t.ne[0];
    let rows: usize = t.ne[1..].iter().product();
    let from = traits(t.dtype)
        .to_f32
        .expect("the f16 file's tensors read as f32");
    let in_row = t.dtype.row_size(ne0);
    let out_row = to.row_size(ne0);
    let mut out = vec![0u8; rows * out_row];
    // Rows split between two threads (each row's bytes depend on that row only).
    let half = rows.div_ceil(2) * out_row;
    let (o0, o1) = out.split_at_mut(half.min(rows * out_row));
    std::thread::scope(|s| {
        for (k, part) in [o0, o1].into_iter().enumerate() {
            let first = k * rows.div_ceil(2);
            s.spawn(move || {
                let mut vals = vec![0f32; ne0];
                for (r, dst) in part.chunks_exact_mut(out_row).enumerate() {
                    let i = first + r;
                    from(&data[i * in_row..(i + 1) * in_row], &mut vals);
                    quantize_row_dyn(to, &vals, dst).expect("whole rows of the block size");
                }
            });
        }
    });
    Sha256::digest(&out)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `qwen05b/tensor-sha256-lowbit.json`: llama.cpp's low-bit files, tensor by tensor.
fn lowbit_listing() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(common::reference_dir().join("qwen05b/tensor-sha256-lowbit.json"))
            .expect("read the low-bit listing"),
    )
    .expect("valid json")
}

#[test]
fn iq4_nl_and_iq4_xs_tensors_equal_llama_cpp() {
    let _g = common::serial();
    let Some(path) = common::qwen05b("f16") else {
        return;
    };
    let listing: Value = serde_json::from_str(
        &std::fs::read_to_string(common::reference_dir().join("qwen05b/tensor-sha256.json"))
            .unwrap(),
    )
    .unwrap();
    // (name, type) → sha256, over both recipes (they share their IQ4_NL tensors).
    let mut want: BTreeMap<(String, u32), String> = BTreeMap::new();
    for recipe in ["iq4_nl", "iq4_xs"] {
        for (name, v) in listing[recipe].as_object().expect("listing for the recipe") {
            let dtype = DType::from_name(v["type"].as_str().unwrap()).unwrap();
            if matches!(dtype, DType::IQ4NL | DType::IQ4XS) {
                let sha = v["sha256"].as_str().unwrap().to_string();
                let prev = want.insert((name.clone(), dtype.id()), sha.clone());
                assert!(
                    prev.is_none_or(|p| p == sha),
                    "{name}: two sha256 for {dtype}"
                );
            }
        }
    }
    let n_nl = want.keys().filter(|(_, t)| *t == DType::IQ4NL.id()).count();
    let n_xs = want.len() - n_nl;
    assert!(
        n_nl >= 100 && n_xs >= 20,
        "{n_nl} IQ4_NL and {n_xs} IQ4_XS tensors listed"
    );
    // Three layers whose `ffn_down` is IQ4_NL in one recipe and IQ4_XS in the other: every
    // tensor kind of both types, in seconds (the row quantizer is the same code for every
    // tensor; `tests/quantize_sha.rs` and `quantize_files.rs` check which type each gets).
    let layers = ["blk.3.", "blk.12.", "blk.23."];
    want.retain(|(name, _), _| layers.iter().any(|l| name.starts_with(l)));
    let kinds = |t: DType| {
        want.keys()
            .filter(|(_, id)| *id == t.id())
            .map(|(n, _)| n.rsplit('.').nth(1).unwrap_or_default().to_string())
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(kinds(DType::IQ4NL).len(), 6, "{:?}", kinds(DType::IQ4NL));
    assert_eq!(kinds(DType::IQ4XS).len(), 1, "{:?}", kinds(DType::IQ4XS));
    let file = GgufFile::open(&path).unwrap();
    let mut mismatches = Vec::new();
    for ((name, id), sha) in &want {
        let dtype = DType::from_id(*id).expect("an id taken from a DType");
        if quantized_sha(&file, name, dtype) != *sha {
            mismatches.push(format!("{name} ({dtype})"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} tensors differ from llama.cpp's: {:?}",
        mismatches.len(),
        want.len(),
        &mismatches[..mismatches.len().min(10)]
    );
    eprintln!(
        "the {} IQ4_NL/IQ4_XS tensors of layers {layers:?} match llama.cpp's sha256 \
         ({n_nl} IQ4_NL and {n_xs} IQ4_XS listed)",
        want.len()
    );
}

/// Every TQ1_0 / TQ2_0 tensor of llama.cpp's ternary files (its 24 `ffn_down` weights each),
/// quantized here from the f16 file, has llama.cpp's sha256.
#[test]
fn ternary_tensors_equal_llama_cpp() {
    let _g = common::serial();
    let Some(path) = common::qwen05b("f16") else {
        return;
    };
    let listing = lowbit_listing();
    let file = GgufFile::open(&path).unwrap();
    for (kind, dtype) in [("tq1_0", DType::TQ1_0), ("tq2_0", DType::TQ2_0)] {
        let mut n = 0;
        for (name, v) in listing[kind].as_object().expect("listing for the recipe") {
            if DType::from_name(v["type"].as_str().unwrap()) == Some(dtype) {
                assert_eq!(
                    quantized_sha(&file, name, dtype),
                    v["sha256"].as_str().unwrap(),
                    "{name} ({dtype})"
                );
                n += 1;
            }
        }
        assert_eq!(n, 24, "{kind}: one {dtype} tensor per layer");
    }
}

/// The MXFP4, NVFP4, Q1_0 and Q2_0 tensors of layers 0 and 23 of llama.cpp's `mxfp4-all`,
/// `nvfp4-all`, `q1_0` and `q2_0` files (`llama-quantize` ignores the importance matrix for
/// these types), quantized here from the f16 file, have llama.cpp's sha256. Two layers keep
/// it to seconds; the reference quantizers are the same code for every tensor.
#[test]
fn fp4_and_lowbit_tensors_equal_llama_cpp() {
    let _g = common::serial();
    let Some(path) = common::qwen05b("f16") else {
        return;
    };
    let listing = lowbit_listing();
    let file = GgufFile::open(&path).expect("open the f16 file");
    for (kind, dtype) in [
        ("mxfp4-all", DType::MXFP4),
        ("nvfp4-all", DType::NVFP4),
        ("q1_0", DType::Q1_0),
        ("q2_0", DType::Q2_0),
    ] {
        let mut n = 0;
        for (name, v) in listing[kind].as_object().expect("listing for the recipe") {
            let layer = name.starts_with("blk.0.") || name.starts_with("blk.23.");
            if layer && DType::from_name(v["type"].as_str().expect("type")) == Some(dtype) {
                assert_eq!(
                    quantized_sha(&file, name, dtype),
                    v["sha256"].as_str().expect("sha256"),
                    "{kind}: {name} ({dtype})"
                );
                n += 1;
            }
        }
        assert_eq!(
            n, 14,
            "{kind}: seven {dtype} matrices in each of the two layers"
        );
    }
}
