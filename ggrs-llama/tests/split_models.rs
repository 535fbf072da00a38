//! Models split into parts (llama-gguf-split's `NAME-00001-of-0000N.gguf`, by ggrs and by
//! llama.cpp's tool) load from their first part and compute what the single file computes,
//! bit for bit.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ggrs_core::gguf::{plan_split, split_path, write_split, GgufFile, SplitLimit};
use ggrs_llama::{Model, ModelOptions, Session, SessionParams};

/// Splits `src` into `parts` parts (by tensor count) with ggrs; returns the first part.
fn split_with_ggrs(src: &Path, parts: usize, prefix: &Path) -> PathBuf {
    let file = GgufFile::open(src).unwrap();
    let per = file.tensors().len().div_ceil(parts);
    let plan = plan_split(&file, SplitLimit::Tensors(per)).unwrap();
    assert_eq!(plan.len(), parts);
    write_split(&file, &plan, prefix, |_| {}).unwrap().remove(0)
}

/// Logits of a prompt and of three steps after it, then 8 greedy tokens, with 2 threads.
fn run(path: &Path, prompt: &[u32]) -> (Vec<f32>, Vec<u32>) {
    run_with(path, prompt, ModelOptions::default())
}

/// [`run`] with loading options.
fn run_with(path: &Path, prompt: &[u32], opts: ModelOptions) -> (Vec<f32>, Vec<u32>) {
    let model = Arc::new(Model::load_with(path, opts).expect("load"));
    let params = SessionParams {
        n_ctx: 128,
        n_threads: 2,
        ..SessionParams::default()
    };
    let mut s = Session::new(model, params).expect("session");
    let mut logits = Vec::new();
    s.eval(prompt, false).expect("prompt");
    logits.extend_from_slice(s.logits());
    for t in [7u32, 42, 5] {
        s.eval(&[t], false).expect("step");
        logits.extend_from_slice(s.logits());
    }
    let mut tokens = Vec::new();
    for _ in 0..8 {
        let l = s.logits();
        let best = (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u32;
        tokens.push(best);
        s.eval(&[best], false).expect("greedy step");
    }
    (logits, tokens)
}

fn assert_same(a: &(Vec<f32>, Vec<u32>), b: &(Vec<f32>, Vec<u32>), what: &str) {
    assert!(!a.0.is_empty());
    assert_eq!(a.0.len(), b.0.len(), "{what}");
    let differ =
        a.0.iter()
            .zip(&b.0)
            .filter(|(x, y)| x.to_bits() != y.to_bits())
            .count();
    assert_eq!(differ, 0, "{what}: {differ} of {} logits differ", a.0.len());
    assert_eq!(a.1, b.1, "{what}: greedy tokens");
}

#[test]
fn tiny_llama_split_in_three_computes_the_same_bits() {
    let src = common::reference_dir().join("tiny/tiny-llama-f16.gguf");
    let d = crate::common::ScratchDir::new("llama-split", "tiny");
    let prompt = [1u32, 15, 27, 3, 99];
    let whole = run(&src, &prompt);
    let first = split_with_ggrs(&src, 3, &d.0.join("ggrs"));
    let model = Model::load(&first).unwrap();
    assert_eq!(model.gguf().parts().len(), 3);
    drop(model);
    assert_same(&whole, &run(&first, &prompt), "split by ggrs");
    // Every weight read in place from the parts' mapping (none copied), settled on huge
    // pages across the three files.
    let in_place = ModelOptions {
        pack_weights: false,
        copy_weights: false,
        huge_pages: true,
    };
    let mapped = Model::load_with(&first, in_place).unwrap();
    assert_eq!(mapped.packed_bytes(), 0);
    assert!(
        mapped.huge_pages().is_some(),
        "the mapped weights were not settled"
    );
    drop(mapped);
    assert_same(
        &run_with(&src, &prompt, in_place),
        &run_with(&first, &prompt, in_place),
        "split by ggrs, weights read in place",
    );

    // Parts written by llama.cpp's own tool, where it is built.
    let tool = PathBuf::from(std::env::var_os("LLAMA_GGUF_SPLIT").unwrap_or_else(|| {
        "/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-gguf-split".into()
    }));
    if !tool.exists() {
        eprintln!(
            "skipped the llama-gguf-split parts: {} is absent",
            tool.display()
        );
        return;
    }
    let prefix = d.0.join("llama");
    let st = std::process::Command::new(&tool)
        .args(["--split-max-size", "9M"])
        .arg(&src)
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let n = (1..=9)
        .find(|&n| split_path(&prefix, 0, n).exists())
        .expect("llama-gguf-split wrote no first part");
    assert!(n >= 2, "one part only");
    assert_same(
        &whole,
        &run(&split_path(&prefix, 0, n), &prompt),
        "split by llama.cpp",
    );
}

/// The default model in three parts generates the same greedy tokens (and logits) as the
/// single file.
#[test]
fn qwen05b_q4_0_split_in_three_generates_the_same_tokens() {
    let Some(src) = common::qwen05b("q4_0") else {
        return;
    };
    let d = crate::common::ScratchDir::new("llama-split", "qwen05b");
    let model = Model::load(&src).unwrap();
    let prompt = model.encode_prompt("The capital of France is").unwrap();
    drop(model);
    let whole = run(&src, &prompt);
    let first = split_with_ggrs(&src, 3, &d.0.join("qwen05b-q4_0"));
    let split = run(&first, &prompt);
    eprintln!("qwen05b-q4_0 greedy tokens: {:?}", split.1);
    assert_same(&whole, &split, "qwen05b-q4_0 in three parts");
}
