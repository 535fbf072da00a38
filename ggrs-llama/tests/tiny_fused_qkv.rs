//! A fused `attn_qkv` in the LLaMA decoder's families (llama.cpp's `create_tensor_qkv`
//! accepts one for each of them): tiny files rewritten here with `attn_q/k/v` (and their
//! biases) concatenated into `attn_qkv` give the split file's logits bit for bit, on the
//! prompt and on greedy steps: SmolLM3 (a layer without rotary reads the fused product's
//! views directly), Qwen3 (per-head Q/K norms on them) and gpt-oss (fused biases, sinks,
//! sliding windows). llama.cpp 0c1e570 loads the same rewritten files
//! (`write_fused_tiny_files`) and gives, by `scripts/llamacpp-dump-logits.cpp`, the same
//! output as on the split files (gpt-oss: byte for byte; smollm3 and qwen3: every greedy run
//! of the references, prompt top-10s within 0.004 of them, this machine's AVX2 build).

use std::path::Path;
use std::sync::Arc;

use ggrs_core::gguf::GgufFile;
use ggrs_llama::{Model, Session, SessionParams};

use crate::common::{self, NewTensor};

/// Writes `src` to `out` with each layer's Q, K and V matrices (and biases) fused.
fn write_fused(src: &Path, out: &Path) {
    let file = GgufFile::open(src).expect("open the tiny file");
    let mut add = Vec::new();
    for i in 0.. {
        let parts = |kind: &str| -> Option<Vec<&ggrs_core::gguf::TensorInfo>> {
            ["q", "k", "v"]
                .iter()
                .map(|m| file.tensor(&format!("blk.{i}.attn_{m}.{kind}")))
                .collect()
        };
        let Some(w) = parts("weight") else { break };
        for (kind, ts) in [("weight", Some(w)), ("bias", parts("bias"))] {
            let Some(ts) = ts else { continue };
            let rows: usize = ts
                .iter()
                .map(|t| t.ne[if kind == "weight" { 1 } else { 0 }])
                .sum();
            let ne = match kind {
                "weight" => vec![ts[0].ne[0], rows],
                _ => vec![rows],
            };
            add.push(NewTensor {
                name: format!("blk.{i}.attn_qkv.{kind}"),
                dtype: ts[0].dtype,
                ne,
                bytes: ts
                    .iter()
                    .flat_map(|t| file.tensor_data(t).to_vec())
                    .collect(),
            });
        }
    }
    assert!(!add.is_empty(), "{}: no attn_q/k/v to fuse", src.display());
    let split = |name: &str| {
        ["q", "k", "v"].iter().any(|m| {
            name.ends_with(&format!(".attn_{m}.weight"))
                || name.ends_with(&format!(".attn_{m}.bias"))
        })
    };
    common::rewrite_gguf_with(
        src,
        out,
        |_, v| Some(v.clone()),
        |name, ne| (!split(name)).then(|| ne.to_vec()),
        Vec::new(),
        add,
    );
}

/// Every prompt logit and 6 greedy steps' logits of the two prompts, as bits.
fn logits(model: &Arc<Model>) -> Vec<u32> {
    let mut s = Session::new(
        model.clone(),
        SessionParams {
            n_ctx: 128,
            n_threads: 2,
            logits_all: true,
            ..Default::default()
        },
    )
    .expect("session");
    let mut bits = Vec::new();
    for prompt in ["The capital of France is", "fn main() { let x = 1;"] {
        s.clear();
        let tokens = model.encode_prompt(prompt).expect("encode");
        s.eval(&tokens, true).expect("prompt");
        bits.extend(s.all_logits().iter().map(|v| v.to_bits()));
        for _ in 0..6 {
            let next = common::argmax(s.logits());
            s.eval(&[next], false).expect("step");
            bits.extend(s.logits().iter().map(|v| v.to_bits()));
        }
    }
    bits
}

#[test]
fn a_fused_attn_qkv_gives_the_split_files_bits() {
    for name in ["smollm3", "qwen3", "gpt-oss"] {
        let src = common::reference_dir().join(format!("tiny/tiny-{name}-f16.gguf"));
        let out = common::ScratchFile::new("fused-qkv", &format!("{name}.gguf"));
        write_fused(&src, &out);
        let fused = GgufFile::open(&*out).expect("open the fused file");
        assert!(fused.tensor("blk.0.attn_qkv.weight").is_some());
        assert!(fused.tensor("blk.0.attn_q.weight").is_none());
        drop(fused);
        let split = Arc::new(Model::load(&src).expect("load the split file"));
        let joined = Arc::new(Model::load(&*out).expect("load the fused file"));
        let (a, b) = (logits(&split), logits(&joined));
        assert_eq!(a.len(), b.len(), "{name}");
        let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
        assert_eq!(differ, 0, "{name}: {differ} of {} logits differ", a.len());
    }
}

/// Separate Q/K/V biases beside a fused matrix (llama.cpp takes them; this graph adds one
/// fused bias) are refused by name rather than dropped.
#[test]
fn separate_biases_beside_a_fused_matrix_are_refused() {
    let src = common::reference_dir().join("tiny/tiny-gpt-oss-f16.gguf");
    let fused = common::ScratchFile::new("fused-qkv", "gpt-oss-for-biases.gguf");
    write_fused(&src, &fused);
    // Put layer 0's separate biases back beside its fused matrix (and drop the fused bias).
    let file = GgufFile::open(&src).expect("open");
    let add = ["q", "k", "v"]
        .iter()
        .map(|m| {
            let t = file
                .tensor(&format!("blk.0.attn_{m}.bias"))
                .expect("a bias");
            NewTensor {
                name: t.name.clone(),
                dtype: t.dtype,
                ne: t.shape().to_vec(),
                bytes: file.tensor_data(t).to_vec(),
            }
        })
        .collect();
    let out = common::ScratchFile::new("fused-qkv", "gpt-oss-split-biases.gguf");
    common::rewrite_gguf_with(
        &fused,
        &out,
        |_, v| Some(v.clone()),
        |name, ne| (name != "blk.0.attn_qkv.bias").then(|| ne.to_vec()),
        Vec::new(),
        add,
    );
    let err = Model::load(&*out).expect_err("separate biases beside attn_qkv");
    assert!(err.to_string().contains("blk.0.attn_q.bias"), "{err}");
}

/// Writes the fused copies of the three tiny files into `$GGRS_FUSED_QKV_DIR`, for checking
/// them with llama.cpp.
#[test]
#[ignore = "writes the fused tiny files for llama.cpp"]
fn write_fused_tiny_files() {
    let dir = std::env::var_os("GGRS_FUSED_QKV_DIR").expect("GGRS_FUSED_QKV_DIR=dir");
    for name in ["smollm3", "qwen3", "gpt-oss"] {
        let src = common::reference_dir().join(format!("tiny/tiny-{name}-f16.gguf"));
        write_fused(
            &src,
            &Path::new(&dir).join(format!("tiny-{name}-fused-f16.gguf")),
        );
    }
}
