//! `examples/custom_arch.rs`: an architecture from outside the library, `toyllama` (the
//! LLaMA block written in the example, logits divided by a key of its own), loaded by
//! registering it, on a copy of the tiny LLaMA model. Its logits must be the built-in
//! `llama` architecture's on the original file divided by the scale — bit for bit, as the
//! scale is a power of two and the graph does the same arithmetic — and it must generate the
//! same greedy tokens; ggrs's own registry must refuse the file by name.

#[allow(dead_code)]
#[path = "../examples/custom_arch.rs"]
mod custom_arch;

use std::ops::ControlFlow;
use std::sync::Arc;

use custom_arch::{load_toy, tiny_llama_path, write_toy_file, ToyLlama, ToyModel};
use ggrs::llama::{
    Batch, GenerateParams, LlamaError, Model, ModelOptions, SamplingParams, Session, SessionParams,
};

/// Every prompt position's logits (`n_tokens × n_vocab`).
fn prompt_logits(model: &Arc<Model>, tokens: &[u32]) -> Vec<f32> {
    let mut s = Session::new(
        model.clone(),
        SessionParams {
            n_ctx: 64,
            n_threads: 2,
            logits_all: true,
            ..SessionParams::default()
        },
    )
    .unwrap();
    s.decode(&Batch::from_tokens(tokens, 0, 0, true)).unwrap();
    assert_eq!(s.n_outputs(), tokens.len());
    s.all_logits().to_vec()
}

fn greedy(model: &Arc<Model>, prompt: &str) -> Vec<u32> {
    let mut s = Session::new(model.clone(), SessionParams::default()).unwrap();
    let params = GenerateParams {
        max_tokens: 12,
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        ignore_eos: true,
        ..GenerateParams::default()
    };
    s.generate(prompt, &params, |_| ControlFlow::Continue(()))
        .unwrap()
        .tokens
}

#[test]
fn a_registered_architecture_runs_and_matches_llama() {
    let src = tiny_llama_path();
    let dir = std::env::temp_dir().join(format!("ggrs-custom-arch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dst = dir.join("toyllama.gguf");
    let scale = 2.0;
    write_toy_file(&src, &dst, scale).unwrap();

    // The built-in registry names the file's architecture instead of guessing.
    match Model::load(&dst) {
        Err(LlamaError::UnsupportedArch { name, supported }) => {
            assert_eq!(name, "toyllama");
            assert!(supported.contains("llama"), "{supported}");
        }
        other => panic!("expected UnsupportedArch, got {other:?}"),
    }

    let toy = load_toy(&dst).unwrap();
    assert_eq!(toy.arch_name(), "toyllama");
    assert_eq!(toy.hparams.arch, "toyllama");
    assert_eq!(toy.arch_weights::<ToyModel>().unwrap().logit_scale, scale);
    // Loading with the architecture given directly gives the same model.
    let direct = Arc::new(Model::load_arch(&dst, &ToyLlama, ModelOptions::default()).unwrap());
    assert_eq!(direct.arch_name(), "toyllama");

    let llama = Arc::new(Model::load(&src).unwrap());
    assert_eq!(llama.arch_name(), "llama");
    assert_eq!(toy.hparams.n_vocab, llama.hparams.n_vocab);
    for prompt in [
        "The capital of France is",
        "Once upon a time, in a land far away",
    ] {
        let tokens = llama.tokenizer().encode(prompt, true, true).unwrap();
        assert_eq!(toy.encode_prompt(prompt).unwrap(), tokens);
        let want = prompt_logits(&llama, &tokens);
        for m in [&toy, &direct] {
            let got = prompt_logits(m, &tokens);
            assert_eq!(got.len(), want.len());
            let off = got
                .iter()
                .zip(&want)
                .filter(|(g, w)| **g * scale != **w)
                .count();
            assert_eq!(
                off, 0,
                "{prompt:?}: {off} logits differ from llama's / {scale}"
            );
        }
        assert_eq!(greedy(&toy, prompt), greedy(&llama, prompt), "{prompt:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
