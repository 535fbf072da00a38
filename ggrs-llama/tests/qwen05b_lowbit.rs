//! Qwen2.5-Coder-0.5B files made by llama.cpp's `llama-quantize` with the importance matrix
//! (`../shared/reference/qwen05b/README-lowbit.md` gives each recipe) against llama.cpp's
//! outputs for them: every reference top-10 logit within 2e-5 of the digits llama.cpp
//! printed, on the prompts and on all 24 greedy steps, and every greedy run equal — with the
//! SIMD kernels and again in a child process with `GGRS_FORCE_SCALAR=1`.
//!
//! The files are llama-quantize's and are not made here (`ggrs quantize --imatrix` writes the
//! same bytes: `imatrix_quantize.rs`, README): a missing file skips its check with the
//! command that makes it, in `~/.cache/ggrs/models/derived/`.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use ggrs_llama::Model;

/// The low-bit file `qwen05b-<stem>.gguf`, or `None` (with a message) when it is missing.
/// `recipe` is what follows the importance matrix on llama-quantize's command line before
/// the file names (`TYPE`, or `--tensor-type` rules and a base type).
fn lowbit_file(stem: &str, recipe: &str) -> Option<PathBuf> {
    let path = common::model_dir().join(format!("derived/qwen05b-{stem}.gguf"));
    if path.exists() {
        return Some(path);
    }
    let (rules, ty) = recipe.rsplit_once(' ').unwrap_or(("", recipe));
    eprintln!(
        "SKIPPED: {} is missing; make it with `llama-quantize --imatrix \
         ../shared/reference/qwen05b/imatrix-gpl3.gguf {rules} qwen05b-f16.gguf {} {ty} 2` \
         (README-lowbit.md)",
        path.display(),
        path.display()
    );
    None
}

fn check(stem: &str, recipe: &str) {
    check_prompts(stem, recipe, usize::MAX);
}

/// [`check`] on the first `scalar_prompts` prompts only when `GGRS_FORCE_SCALAR=1` (the
/// portable grid i-quant kernels decode every block per column: seconds per prompt).
fn check_prompts(stem: &str, recipe: &str, scalar_prompts: usize) {
    let _one_at_a_time = common::serial();
    let Some(path) = lowbit_file(stem, recipe) else {
        return;
    };
    let started = std::time::Instant::now();
    let model = Arc::new(Model::load(&path).expect("load the low-bit file"));
    let mut refs =
        common::read_jsonl(&common::reference_dir().join(format!("qwen05b/{stem}.public.jsonl")));
    let scalar = std::env::var("GGRS_FORCE_SCALAR").is_ok_and(|v| v == "1");
    if scalar {
        refs.truncate(scalar_prompts);
    }
    let rep = common::compare(&model, &refs, 2e-5, 2, 24);
    eprintln!(
        "qwen05b {stem} (scalar: {scalar}, {} prompts, {:.1} s): {rep:?}",
        refs.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        rep.over_tol, 0,
        "{stem}: top-10 logits beyond 2e-5: {rep:?}"
    );
    assert_eq!(
        rep.greedy_prefix_ok,
        refs.len(),
        "{stem}: whole greedy runs equal on {} of {} prompts",
        rep.greedy_prefix_ok,
        refs.len()
    );
}

/// Runs `test` of this binary again in a child process with `GGRS_FORCE_SCALAR=1` (read once
/// per process, so it cannot be switched on here).
/// `GGRS_LOWBIT_SIMD_ONLY=1` skips it (the portable kernels take minutes per file).
fn again_scalar(test: &str) {
    if std::env::var("GGRS_FORCE_SCALAR").is_ok_and(|v| v == "1") {
        return;
    }
    if std::env::var("GGRS_LOWBIT_SIMD_ONLY").is_ok_and(|v| v == "1") {
        eprintln!("{test}: the GGRS_FORCE_SCALAR=1 run is skipped (GGRS_LOWBIT_SIMD_ONLY=1)");
        return;
    }
    common::again_with_env(module_path!(), test, "GGRS_FORCE_SCALAR", "1");
}

/// TQ2_0 (`ffn_down`; Q4_0, Q5_0 and Q8_0 elsewhere): ggml's AVX2 `ggml_vec_dot_tq2_0_q8_K`
/// order.
#[test]
fn qwen05b_tq2_0_equals_llama_cpp_digits() {
    check("tq2_0", "TQ2_0");
    again_scalar("qwen05b_tq2_0_equals_llama_cpp_digits");
}

/// TQ1_0: the same ternary values as TQ2_0 in another packing, `ggml_vec_dot_tq1_0_q8_K`.
#[test]
fn qwen05b_tq1_0_equals_llama_cpp_digits() {
    check("tq1_0", "TQ1_0");
    again_scalar("qwen05b_tq1_0_equals_llama_cpp_digits");
}

/// MXFP4 in every 2-D weight (`--tensor-type 'weight$=mxfp4'` over Q8_0): all of them
/// repacked by llama.cpp (row counts multiples of 8), so the `mxfp4_8x8` GEMV/GEMM order;
/// the token embedding read by `get_rows`.
#[test]
fn qwen05b_mxfp4_all_equals_llama_cpp_digits() {
    check("mxfp4-all", "--tensor-type 'weight$=mxfp4' Q8_0");
    again_scalar("qwen05b_mxfp4_all_equals_llama_cpp_digits");
}

/// NVFP4 in every 2-D weight (`--tensor-type 'weight$=nvfp4'` over Q8_0; llama-quantize has
/// no NVFP4 file type): `ggml_vec_dot_nvfp4_q8_0`'s AVX2 order.
#[test]
fn qwen05b_nvfp4_all_equals_llama_cpp_digits() {
    check("nvfp4-all", "--tensor-type 'weight$=nvfp4' Q8_0");
    again_scalar("qwen05b_nvfp4_all_equals_llama_cpp_digits");
}

/// Q1_0 (every matrix but `output`, Q8_0): `ggml_vec_dot_q1_0_q8_0`'s AVX2 order.
#[test]
fn qwen05b_q1_0_equals_llama_cpp_digits() {
    check("q1_0", "Q1_0");
    again_scalar("qwen05b_q1_0_equals_llama_cpp_digits");
}

/// Q2_0 (every matrix but `token_embd` Q5_0 and `output` Q8_0): the generic C order, which
/// llama.cpp's x86 build runs.
#[test]
fn qwen05b_q2_0_equals_llama_cpp_digits() {
    check("q2_0", "Q2_0");
    again_scalar("qwen05b_q2_0_equals_llama_cpp_digits");
}

/// The importance-matrix recipes of the grid i-quants and Q2_K_S (README-lowbit.md's table
/// gives each file's types): `ffn_down` in IQ1_S … IQ3_S (and Q2_K, Q4_K, IQ3_S in the first
/// three layers of some), IQ4_NL/Q5_0/Q4_0/Q8_0 elsewhere; ggml's AVX2 `ggml_vec_dot_iq*_q8_K`
/// orders. With `GGRS_FORCE_SCALAR=1` the first prompt only.
macro_rules! iq_recipes {
    ($($name:ident: $stem:literal, $ty:literal;)+) => {
        $(
            #[test]
            fn $name() {
                check_prompts($stem, $ty, 1);
                again_scalar(stringify!($name));
            }
        )+
    };
}

iq_recipes! {
    qwen05b_iq1_s_equals_llama_cpp_digits: "iq1_s", "IQ1_S";
    qwen05b_iq1_m_equals_llama_cpp_digits: "iq1_m", "IQ1_M";
    qwen05b_iq2_xxs_equals_llama_cpp_digits: "iq2_xxs", "IQ2_XXS";
    qwen05b_iq2_xs_equals_llama_cpp_digits: "iq2_xs", "IQ2_XS";
    qwen05b_iq2_s_equals_llama_cpp_digits: "iq2_s", "IQ2_S";
    qwen05b_iq2_m_equals_llama_cpp_digits: "iq2_m", "IQ2_M";
    qwen05b_iq3_xxs_equals_llama_cpp_digits: "iq3_xxs", "IQ3_XXS";
    qwen05b_iq3_xs_equals_llama_cpp_digits: "iq3_xs", "IQ3_XS";
    qwen05b_iq3_s_equals_llama_cpp_digits: "iq3_s", "IQ3_S";
    qwen05b_iq3_m_equals_llama_cpp_digits: "iq3_m", "IQ3_M";
    qwen05b_q2_k_s_equals_llama_cpp_digits: "q2_k_s", "Q2_K_S";
}

/// README-lowbit.md's Unsloth-style mixture `mix-ud` (`--tensor-type` rules over IQ2_M): on
/// this model `ffn_down` IQ3_S, the other matrices IQ4_NL (the shape fallback), `output`
/// Q8_0. With `GGRS_FORCE_SCALAR=1` the first prompt only.
#[test]
fn qwen05b_mix_ud_equals_llama_cpp_digits() {
    check_prompts(
        "mix-ud",
        "--tensor-type ffn_down=iq3_s --tensor-type ffn_gate=iq2_xxs --tensor-type \
         ffn_up=iq2_xxs --tensor-type attn_v=iq4_xs --tensor-type attn_q=iq3_xxs \
         --tensor-type attn_k=iq3_xxs --tensor-type '^output\\.weight$=q6_k' IQ2_M",
        1,
    );
    again_scalar("qwen05b_mix_ud_equals_llama_cpp_digits");
}
