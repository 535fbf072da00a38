//! Quantized KV caches (llama.cpp's `-ctk q8_0 -ctv q8_0`) on Qwen2.5-Coder-0.5B Q8_0,
//! against `llama-perplexity` at the same settings (`data/kv-cache-types.llama-perplexity.json`).
//!
//! The reference is the AVX2 build of llama.cpp 0c1e570 on this project's machines, whose
//! summation orders differ from the AVX-512 build ggrs reproduces: its f16-cache figures and
//! ggrs's already differ by up to 0.3% over these 252 scored tokens. The q8_0 cache is held
//! to 1%: without llama.cpp's Walsh–Hadamard rotation of queries and keys around a
//! quantized key cache the figure is 6.8% off (7.2906), so the test tells the arithmetic
//! apart, not only that a quantized cache runs.

use crate::common;

use std::sync::Arc;

use ggrs_core::DType;
use ggrs_llama::perplexity::perplexity;
use ggrs_llama::{Model, Session, SessionParams};

const GPL3: &str = "/usr/share/common-licenses/GPL-3";

#[test]
fn q8_0_cache_perplexity_is_llama_cpps() {
    let _one_at_a_time = common::serial();
    let Some(path) = common::qwen05b("q8_0") else {
        return;
    };
    let refs: serde_json::Value =
        serde_json::from_str(include_str!("data/kv-cache-types.llama-perplexity.json")).unwrap();
    let text = std::fs::read_to_string(GPL3).expect("Debian's GPL-3 text (package base-files)");
    let text = &text[..refs["text_bytes"].as_u64().unwrap() as usize];
    let model = Arc::new(Model::load(&path).unwrap());
    let tokens = model.tokenizer().encode(text, true, false).unwrap();
    let want = refs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ctk"] == "q8_0" && r["ctv"] == "q8_0")
        .unwrap()["ppl"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect::<Vec<_>>();
    let mut s = Session::new(
        model,
        SessionParams {
            n_ctx: 128,
            n_batch: 128,
            n_threads: 2,
            logits_all: true,
            kv_type: DType::Q8_0,
            kv_type_v: Some(DType::Q8_0),
            ..SessionParams::default()
        },
    )
    .unwrap();
    let mut got = Vec::new();
    let t0 = std::time::Instant::now();
    perplexity(&mut s, &tokens, 128, |p| got.push(p.ppl)).unwrap();
    eprintln!(
        "q8_0 cache: {got:.4?} in {:.1} s; llama.cpp {want:?}",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(got.len(), want.len());
    let (g, w) = (got[got.len() - 1], want[want.len() - 1]);
    assert!(
        (g - w).abs() / w <= 0.01,
        "PPL {g:.4} is {:.2}% from llama.cpp's {w}",
        100.0 * (g - w).abs() / w
    );
}
