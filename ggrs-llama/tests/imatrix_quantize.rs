//! `ggrs quantize --imatrix` against `llama-quantize --imatrix`: with llama.cpp's importance
//! matrix for Qwen2.5-Coder-0.5B (`qwen05b/imatrix-gpl3.gguf`), the recipes Q4_K_M, IQ4_XS
//! and Q2_K_S choose every tensor's type as llama.cpp did (`tensor-sha256-lowbit.json`:
//! `q4_k_m-imat`, `iq4_xs-imat`, `q2_k_s`), and layer 0's seven matrices and
//! layer 23's `ffn_down` come out byte-identical (sha256). The whole files are compared
//! by hand (README); this keeps the test to seconds. Skips without the f16 conversion.
//!
//! The i-quant recipes (IQ1_S … IQ3_M): every tensor's type for all ten; the bytes of the
//! sampled tensors for eight (IQ3_XS and IQ3_M repeat IQ3_S's tensors); README-lowbit.md's
//! `--tensor-type` mixture `mix-ud`; whole files against every tensor's sha256 in an
//! ignored test (`whole_iq_files_match_llama_quantize`, minutes).

use crate::common;

use std::sync::Arc;

use ggrs_core::gguf::GgufFile;
use ggrs_core::quants::{quantize_row_dyn, quantize_row_weighted_dyn};
use ggrs_llama::imatrix::QuantWeights;
use ggrs_llama::quantize::{
    choose_types, plan, FileType, ModelFacts, QuantType, QuantizeError, RecipeOptions,
    TensorTypeOverride,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn listing(kind: &str) -> serde_json::Map<String, Value> {
    let path = common::reference_dir().join("qwen05b/tensor-sha256-lowbit.json");
    let all: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json");
    all[kind].as_object().expect("listing").clone()
}

fn weights() -> Arc<QuantWeights> {
    let path = common::reference_dir().join("qwen05b/imatrix-gpl3.gguf");
    Arc::new(QuantWeights::load(&path, &[], &[]).expect("load the imatrix"))
}

/// Recipe `ft` with the importance matrix.
fn with_imatrix(ft: FileType) -> RecipeOptions {
    let mut recipe = RecipeOptions::new(ft);
    recipe.imatrix = Some(weights());
    recipe
}

/// Recipe `ft` with the importance matrix and the `--tensor-type` rules `rules`.
fn with_rules(ft: FileType, rules: &[&str]) -> RecipeOptions {
    let mut recipe = with_imatrix(ft);
    for rule in rules {
        let rule = TensorTypeOverride::parse(rule).expect("rule");
        recipe.overrides.push(rule);
    }
    recipe
}

/// [`check_sampled`] on layer 0 and `blk.23.ffn_down`.
fn check(kind: &str, ft: FileType) -> Vec<String> {
    check_sampled(kind, &with_imatrix(ft), |n| {
        n.starts_with("blk.0.") || n == "blk.23.ffn_down.weight"
    })
}

/// Every tensor's type under `recipe` against `kind`'s listing, and the bytes of the
/// converted tensors that `sample` names (rows quantized here, as `ggrs quantize` does).
fn check_sampled(kind: &str, recipe: &RecipeOptions, sample: impl Fn(&str) -> bool) -> Vec<String> {
    check_against(&listing(kind), kind, recipe, sample)
}

/// [`check_sampled`] against the listing `want` (`{name: {type, sha256}}`).
fn check_against(
    want: &serde_json::Map<String, Value>,
    kind: &str,
    recipe: &RecipeOptions,
    sample: impl Fn(&str) -> bool,
) -> Vec<String> {
    let Some(f16) = common::qwen05b("f16") else {
        return Vec::new();
    };
    let input = GgufFile::open(&f16).expect("open f16");
    let p = plan(&input, recipe).expect("plan");
    let mut bad = Vec::new();
    for (i, t) in input.tensors().iter().enumerate() {
        let w = &want[&t.name];
        let wt = w["type"].as_str().expect("type");
        if !wt.eq_ignore_ascii_case(p.types[i].name()) {
            bad.push(format!(
                "{kind}: {} is {}, llama.cpp's {wt}",
                t.name, p.types[i]
            ));
            continue;
        }
        if !sample(&t.name) || p.types[i] == t.dtype {
            continue;
        }
        let (ne0, to) = (t.ne[0], p.types[i]);
        let data = input.tensor_data(t);
        let row = to.row_size(ne0);
        let mut out = vec![0u8; row * (data.len() / (2 * ne0))];
        let mut x = vec![0f32; ne0];
        for (src, dst) in data.chunks_exact(2 * ne0).zip(out.chunks_exact_mut(row)) {
            for (v, c) in x.iter_mut().zip(src.chunks_exact(2)) {
                *v = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
            match &p.importance[i] {
                Some(qw) => quantize_row_weighted_dyn(to, &x, qw, dst),
                None => quantize_row_dyn(to, &x, dst),
            }
            .expect("quantize");
        }
        let hex = format!("{:x}", Sha256::digest(&out));
        if hex != w["sha256"].as_str().expect("sha") {
            bad.push(format!(
                "{kind}: {} ({to}) differs from llama.cpp's bytes",
                t.name
            ));
        }
    }
    bad
}

#[test]
fn q4_k_m_with_imatrix_matches_llama_quantize() {
    let bad = check("q4_k_m-imat", FileType::Q4KM);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn iq4_xs_with_imatrix_matches_llama_quantize() {
    let bad = check("iq4_xs-imat", FileType::IQ4XS);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn q2_k_s_with_imatrix_matches_llama_quantize() {
    let bad = check("q2_k_s", FileType::Q2KS);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn q2_k_s_without_imatrix_is_refused() {
    let Some(f16) = common::qwen05b("f16") else {
        return;
    };
    let input = GgufFile::open(&f16).expect("open f16");
    let err = plan(&input, &RecipeOptions::new(FileType::Q2KS)).unwrap_err();
    assert!(matches!(err, QuantizeError::NeedsImatrix { .. }), "{err}");
    // With the importance matrix but not for the tensors that need it.
    let path = common::reference_dir().join("qwen05b/imatrix-gpl3.gguf");
    let mut recipe = RecipeOptions::new(FileType::Q2KS);
    let w = QuantWeights::load(&path, &["attn".into()], &[]).expect("load");
    recipe.imatrix = Some(Arc::new(w));
    let err = plan(&input, &recipe).unwrap_err();
    assert!(
        matches!(err, QuantizeError::MissingImatrixEntry { .. }),
        "{err}"
    );
}

/// The i-quant recipes of `tensor-sha256-lowbit.json` (stem, file type).
const IQ_RECIPES: [(&str, FileType); 10] = [
    ("iq1_s", FileType::IQ1S),
    ("iq1_m", FileType::IQ1M),
    ("iq2_xxs", FileType::IQ2XXS),
    ("iq2_xs", FileType::IQ2XS),
    ("iq2_s", FileType::IQ2S),
    ("iq2_m", FileType::IQ2M),
    ("iq3_xxs", FileType::IQ3XXS),
    ("iq3_xs", FileType::IQ3XS),
    ("iq3_s", FileType::IQ3S),
    ("iq3_m", FileType::IQ3M),
];

/// Every tensor's type under the i-quant recipes with the importance matrix, as
/// llama-quantize chose it (whether or not this build writes the types).
#[test]
fn iq_recipes_choose_llama_quantize_types() {
    let Some(f16) = common::qwen05b("f16") else {
        return;
    };
    let input = GgufFile::open(&f16).expect("open f16");
    let facts = ModelFacts::from_gguf(&input).expect("facts");
    let mut bad = Vec::new();
    for (kind, ft) in IQ_RECIPES {
        let recipe = with_imatrix(ft);
        let choice = choose_types(input.tensors(), &facts, &recipe).expect("choose");
        let want = listing(kind);
        for (t, c) in input.tensors().iter().zip(&choice.types) {
            let ours = c.map_or(t.dtype.name(), QuantType::name);
            let wt = want[&t.name]["type"].as_str().expect("type");
            if !wt.eq_ignore_ascii_case(ours) {
                bad.push(format!("{kind}: {} is {ours}, llama.cpp's {wt}", t.name));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The i-quant recipes: types and sampled bytes (IQ2_XXS and IQ2_XS in `blk.23.ffn_down`,
/// Q2_K in `blk.0.ffn_down`, IQ3_XXS and IQ3_S in both, IQ4_NL and Q5_0 in layer 0); for
/// the recipes of IQ1_S, IQ1_M, IQ2_S and IQ2_M, whose other tensors repeat those types,
/// only `blk.23.ffn_down` (IQ1_S, IQ1_M, IQ2_XS, IQ2_S).
#[test]
fn iq_recipes_with_imatrix_match_llama_quantize() {
    let mut bad: Vec<String> = [
        ("iq2_xxs", FileType::IQ2XXS),
        ("iq2_xs", FileType::IQ2XS),
        ("iq3_xxs", FileType::IQ3XXS),
        ("iq3_s", FileType::IQ3S),
    ]
    .into_iter()
    .flat_map(|(k, ft)| check(k, ft))
    .collect();
    for (k, ft) in [
        ("iq1_s", FileType::IQ1S),
        ("iq1_m", FileType::IQ1M),
        ("iq2_s", FileType::IQ2S),
        ("iq2_m", FileType::IQ2M),
    ] {
        bad.extend(check_sampled(k, &with_imatrix(ft), |n| {
            n == "blk.23.ffn_down.weight"
        }));
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// README-lowbit.md's Unsloth-style mixture `mix-ud`: `--tensor-type` rules over the IQ2_M
/// recipe (on this model `ffn_down` IQ3_S, the other matrices IQ4_NL by the shape
/// fallback, `output.weight` Q8_0): every tensor's type, and the bytes of `blk.0.attn_v`
/// (IQ4_XS → IQ4_NL) and `blk.23.ffn_down`.
#[test]
fn mix_ud_rules_match_llama_quantize() {
    let recipe = with_rules(FileType::IQ2M, &MIX_UD);
    let bad = check_sampled("mix-ud", &recipe, |n| {
        n == "blk.0.attn_v.weight" || n == "blk.23.ffn_down.weight"
    });
    assert!(bad.is_empty(), "{bad:#?}");
}

/// A per-layer mixture in the style of Unsloth's "UD" files (README, "Mixtures per
/// tensor"): `ffn_down` IQ1_S, IQ2_XXS, IQ3_XXS and IQ3_S by layer over the Q4_K_M recipe,
/// `attn_q`/`attn_k` IQ3_XXS (IQ4_NL by the shape fallback), `output` Q6_K (Q8_0). The other
/// `ffn_down` take Q4_K or Q6_K by llama.cpp's layer counter, which the matched tensors do
/// not advance: layers 19 and 22 get Q6_K, 20, 21 and 23 Q4_K. `tests/data/qwen05b-mix-udk.json`
/// lists llama-quantize's file made with these rules (type and sha256 per tensor); the
/// bytes of `blk.5.ffn_down` (IQ1_S) and `blk.19.ffn_down` (Q6_K) are compared.
#[test]
fn per_layer_mixture_matches_llama_quantize() {
    let recipe = with_rules(FileType::Q4KM, &MIX_UDK);
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/qwen05b-mix-udk.json");
    let want = serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json");
    let bad = check_against(&want, "mix-udk", &recipe, |n| {
        n == "blk.5.ffn_down.weight" || n == "blk.19.ffn_down.weight"
    });
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The per-layer mixture's `--tensor-type` rules, in order (README).
const MIX_UDK: [&str; 6] = [
    r"blk\.[4-9]\.ffn_down=iq1_s",
    r"blk\.1[0-3]\.ffn_down=iq2_xxs",
    r"blk\.1[45]\.ffn_down=iq3_xxs",
    r"blk\.1[67]\.ffn_down=iq3_s",
    "attn_(q|k)=iq3_xxs",
    r"^output\.weight$=q6_k",
];

/// `mix-ud`'s `--tensor-type` rules (README-lowbit.md), in order.
const MIX_UD: [&str; 7] = [
    "ffn_down=iq3_s",
    "ffn_gate=iq2_xxs",
    "ffn_up=iq2_xxs",
    "attn_v=iq4_xs",
    "attn_q=iq3_xxs",
    "attn_k=iq3_xxs",
    r"^output\.weight$=q6_k",
];

/// Without an importance matrix, the 1- and 2-bit i-quant recipes are refused, while
/// IQ3_XXS changes its mixture as llama.cpp's does: `ffn_down` Q4_K in the first eighth of
/// the layers and Q3_K after, so no tensor needs the matrix.
#[test]
fn iq_recipes_without_imatrix() {
    let Some(f16) = common::qwen05b("f16") else {
        return;
    };
    let input = GgufFile::open(&f16).expect("open f16");
    for ft in [FileType::IQ2XXS, FileType::IQ2XS, FileType::IQ1S] {
        let err = plan(&input, &RecipeOptions::new(ft)).unwrap_err();
        assert!(matches!(err, QuantizeError::NeedsImatrix { .. }), "{err}");
    }
    let p = plan(&input, &RecipeOptions::new(FileType::IQ3XXS)).expect("IQ3_XXS plan");
    for (t, ty) in input.tensors().iter().zip(&p.types) {
        if t.name.contains("ffn_down") {
            let early = ["blk.0.", "blk.1.", "blk.2."]
                .iter()
                .any(|b| t.name.starts_with(b));
            let want = if early { "q4_K" } else { "q3_K" };
            assert_eq!(ty.name(), want, "{}", t.name);
        }
    }
}

/// Whole files: `ggrs quantize --imatrix` of the f16 conversion with each i-quant recipe,
/// every tensor against llama-quantize's sha256. Minutes per file (the
/// grid searches of ~400 M values): run by hand with `--ignored`.
#[test]
#[ignore = "minutes: quantizes the whole 0.5B model per recipe"]
fn whole_iq_files_match_llama_quantize() {
    use ggrs_core::quantize::QuantizeOptions;
    let Some(f16) = common::qwen05b("f16") else {
        return;
    };
    let input = GgufFile::open(&f16).expect("open f16");
    let dir = std::env::temp_dir().join(format!("ggrs-iq-whole-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut bad = Vec::new();
    for (kind, ft) in IQ_RECIPES {
        let recipe = with_imatrix(ft);
        let out = dir.join(format!("{kind}.gguf"));
        let opts = QuantizeOptions {
            allow_requantize: false,
            n_threads: 0,
        };
        let t0 = std::time::Instant::now();
        ggrs_llama::quantize::quantize(&input, &out, &recipe, &opts, |_| {}).expect("quantize");
        let secs = t0.elapsed().as_secs_f64();
        let file = GgufFile::open(&out).expect("open ours");
        let want = listing(kind);
        let mut n_bad = 0;
        for t in file.tensors() {
            let hex = format!("{:x}", Sha256::digest(file.tensor_data(t)));
            if hex != want[&t.name]["sha256"].as_str().expect("sha") {
                n_bad += 1;
                bad.push(format!("{kind}: {} ({}) differs", t.name, t.dtype));
            }
        }
        eprintln!(
            "{kind}: {}/{} tensors equal llama.cpp's, quantized in {secs:.1} s",
            file.tensors().len() - n_bad,
            file.tensors().len()
        );
        std::fs::remove_file(&out).ok();
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(bad.is_empty(), "{bad:#?}");
}
