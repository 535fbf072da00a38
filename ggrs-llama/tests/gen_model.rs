//! The random-model generator (`examples/gen_model.rs`) keeps working: for each architecture
//! it writes a narrow model (width 128, 2 layers; the hybrids 4), which must load with the shape asked for,
//! carry every tensor name of its tiny source file, and give finite, non-constant logits on a
//! prompt and a few greedy steps, in F16 and after `q4_0` quantization.

use crate::common;

#[path = "../examples/gen_model.rs"]
#[allow(dead_code)]
mod generator;

use std::path::Path;
use std::sync::Arc;

use ggrs_core::gguf::GgufFile;
use ggrs_core::quantize::QuantizeOptions;
use ggrs_core::DType;
use ggrs_llama::quantize::{quantize, FileType, RecipeOptions};
use ggrs_llama::{Model, Session, SessionParams};

/// A directory for this test's files, removed when dropped.
/// Evaluates a prompt and 3 greedy steps; every logit must be finite and the logits must
/// not all be equal. Returns the greedy tokens.
fn run_model(path: &Path) -> Vec<u32> {
    let model = Arc::new(Model::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    let params = SessionParams {
        n_ctx: 64,
        n_batch: 64,
        n_threads: 2,
        logits_all: true,
        ..Default::default()
    };
    let mut s = Session::new(model.clone(), params).expect("session");
    let prompt = model
        .tokenizer()
        .encode("The capital of France is", true, true)
        .expect("tokenize");
    assert!(prompt.len() > 2, "{prompt:?}");
    s.eval(&prompt, true).expect("prompt eval");
    let check = |logits: &[f32], what: &str| {
        assert!(!logits.is_empty(), "{what}: no logits");
        assert!(
            logits.iter().all(|v| v.is_finite()),
            "{what}: non-finite logits in {}",
            path.display()
        );
        let (lo, hi) = logits
            .iter()
            .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        assert!(hi - lo > 1e-3, "{what}: constant logits {lo}..{hi}");
    };
    check(s.all_logits(), "prompt");
    assert_eq!(s.n_outputs(), prompt.len());
    let mut greedy = Vec::new();
    for step in 0..3 {
        let logits = s.logits();
        let next = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32)
            .expect("non-empty logits");
        greedy.push(next);
        s.eval(&[next], false).expect("decode step");
        check(s.logits(), &format!("greedy step {step}"));
    }
    greedy
}

#[test]
fn narrow_models_of_every_architecture_run() {
    let tiny_dir = common::reference_dir().join("tiny");
    let dir = crate::common::ScratchDir::new("gen-model", "narrow");
    for (arch, _) in generator::ARCHS {
        // The hybrids repeat their tiny model's pattern of 4 recurrent and attention layers:
        // 4 layers are the whole pattern (2 would leave LFM2 without attention). Gemma 4's 4
        // layers are its tiny model's (local and global, with caches and sharing them).
        let hybrid = ["lfm2", "granitehybrid", "qwen35", "qwen35moe", "gemma4"].contains(&arch);
        let layers = if hybrid { 4 } else { 2 };
        // The 2026 families' heads of 128 to 512 are too wide for a width of 128 where
        // heads × head size must be the width, or where Gemma 4's global heads would be 4
        // times it: narrower heads.
        let head_dim = match arch {
            "smollm3" | "granite" | "phi3-longrope" => Some(32),
            "gemma4" => Some(64),
            _ => None,
        };
        let opts = generator::GenOptions {
            width: 128,
            layers,
            context: 256,
            head_dim,
            ..Default::default()
        };
        let tiny = generator::tiny_file(&tiny_dir, arch).expect("a known arch");
        let f16 = dir.0.join(format!("{arch}-f16.gguf"));
        let shape = generator::generate(&tiny, arch, &f16, &opts)
            .unwrap_or_else(|e| panic!("generate {arch}: {e}"));
        eprintln!("{arch}: {shape:?}");
        assert_eq!(shape.arch, generator::gguf_arch(arch));

        // The shape asked for, as the loader reads it.
        let model = Model::load(&f16).unwrap_or_else(|e| panic!("load {arch}: {e}"));
        let hp = &model.hparams;
        assert_eq!((hp.n_embd, hp.n_layer), (128, layers), "{arch}");
        assert_eq!(
            (hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff),
            (shape.n_head, shape.n_head_kv, shape.head_dim, shape.n_ff),
            "{arch}"
        );
        assert_eq!(
            Some(shape.head_dim),
            head_dim.or(Some(shape.head_dim).filter(|h| [64, 128, 256].contains(h))),
            "{shape:?}"
        );
        drop(model);

        // Every tensor of the tiny file's table, in each of the new layers (qwen2, derived from
        // qwen3, has Q/K/V biases instead of the Q/K norms).
        let src = GgufFile::open(&tiny).expect("open tiny");
        let out = GgufFile::open(&f16).expect("open generated");
        let derived = arch == "qwen2";
        if derived {
            for l in 0..2 {
                for m in ["q", "k", "v"] {
                    let b = format!("blk.{l}.attn_{m}.bias");
                    let w = format!("blk.{l}.attn_{m}.weight");
                    let (b, w) = (out.tensor(&b).expect(&b), out.tensor(&w).expect(&w));
                    assert_eq!((b.dtype, b.shape()), (DType::F32, &w.ne[1..2]), "{arch}");
                }
            }
        }
        for t in src.tensors() {
            if derived
                && (t.name.ends_with(".attn_q_norm.weight")
                    || t.name.ends_with(".attn_k_norm.weight"))
            {
                assert!(out.tensor(&t.name).is_none(), "{arch}: {}", t.name);
                continue;
            }
            let names: Vec<String> = match t.name.strip_prefix("blk.0.") {
                // A hybrid's layers are its tiny model's, name for name.
                _ if hybrid => vec![t.name.clone()],
                Some(role) => (0..2).map(|l| format!("blk.{l}.{role}")).collect(),
                None if t.name.starts_with("blk.") => continue,
                None => vec![t.name.clone()],
            };
            for n in names {
                let g = out
                    .tensor(&n)
                    .unwrap_or_else(|| panic!("{arch}: no tensor {n}"));
                assert_eq!((g.dtype, g.n_dims), (t.dtype, t.n_dims), "{arch} {n}");
            }
        }
        assert_eq!(out.tensors().len(), shape.n_tensors);
        drop(out);

        let greedy = run_model(&f16);
        eprintln!("{arch} f16 greedy: {greedy:?}");

        // The q4_0 file the benchmark uses.
        let q4 = dir.0.join(format!("{arch}-q4_0.gguf"));
        let recipe = RecipeOptions::new(FileType::from_name("q4_0").expect("q4_0"));
        let engine = QuantizeOptions {
            allow_requantize: false,
            n_threads: 2,
        };
        let input = GgufFile::open(&f16).expect("open generated");
        quantize(&input, &q4, &recipe, &engine, |_| {})
            .unwrap_or_else(|e| panic!("quantize {arch}: {e}"));
        drop(input);
        let greedy = run_model(&q4);
        eprintln!("{arch} q4_0 greedy: {greedy:?}");
        std::fs::remove_file(&f16).ok();
        std::fs::remove_file(&q4).ok();
    }
}

#[test]
fn same_seed_same_file_other_seed_other_values() {
    let tiny_dir = common::reference_dir().join("tiny");
    let tiny = generator::tiny_file(&tiny_dir, "llama").expect("llama");
    let dir = crate::common::ScratchDir::new("gen-model", "seed");
    let opts = generator::GenOptions {
        width: 128,
        layers: 1,
        ..Default::default()
    };
    let write = |name: &str, seed: u64| {
        let p = dir.0.join(name);
        generator::generate(
            &tiny,
            "llama",
            &p,
            &generator::GenOptions {
                seed,
                ..opts.clone()
            },
        )
        .expect("generate");
        std::fs::read(p).expect("read back")
    };
    let (a, b, c) = (write("a", 7), write("b", 7), write("c", 8));
    assert_eq!(a, b, "the same seed must give the same bytes");
    assert_eq!(a.len(), c.len());
    assert_ne!(a, c, "another seed must give other values");
}

/// At the benchmark's shape (width 1024, 8 layers) the 2026 families get their own
/// proportions rather than the tiny models' test devices: Gemma's heads of 256 (Gemma 4's
/// global ones 512), gpt-oss's heads of 64 over 8 per KV head and its 32 experts of the
/// width, heads of 128 for Ministral 3, SmolLM3 and Phi-4-mini, Granite's of 64.
#[test]
fn the_2026_families_get_their_own_shapes_at_width_1024() {
    let tiny_dir = common::reference_dir().join("tiny");
    let opts = generator::GenOptions::default();
    // arch: (heads, KV heads, head size, feed-forward, experts, expert width)
    let want = [
        ("gemma3", (4, 1, 256, 2816, 0, None)),
        ("gemma4", (4, 2, 512, 2816, 0, None)),
        ("gpt-oss", (16, 2, 64, 1024, 32, Some(1024))),
        ("mistral3", (16, 4, 128, 2816, 0, None)),
        ("smollm3", (8, 2, 128, 2816, 0, None)),
        ("granite", (16, 4, 64, 2816, 0, None)),
        ("phi3-longrope", (8, 4, 128, 2816, 0, None)),
    ];
    for (arch, w) in want {
        let tiny = generator::tiny_file(&tiny_dir, arch).expect("a known arch");
        let s = generator::plan_shape(&tiny, arch, &opts).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!((s.width, s.layers), (1024, 8), "{arch}");
        let got = (
            s.n_head,
            s.n_head_kv,
            s.head_dim,
            s.n_ff,
            s.n_expert,
            s.n_ff_exp,
        );
        assert_eq!(got, w, "{arch}: {s:?}");
    }
}
