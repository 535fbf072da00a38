//! Qwen2.5-Coder-0.5B files made by llama.cpp's `llama-quantize` with the importance matrix
//! (`../shared/reference/qwen05b/README-lowbit.md` gives each recipe) against llama.cpp's
//! outputs for them: every reference top-10 logit within 2e-5 of the digits llama.cpp
//! printed, on the prompts and on all 24 greedy steps, and every greedy run equal — with the
//! SIMD kernels and again in a child process with `GGRS_FORCE_SCALAR=1`.
//!
//! The files are not made here (ggrs does not quantize with an importance matrix yet, and
//! the recipes' Q4_0 fallbacks use it): a missing file skips its check with the command that
//! makes it, in `~/.cache/ggrs/models/derived/`.

mod common;

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
    let _one_at_a_time = common::serial();
    let Some(path) = lowbit_file(stem, recipe) else {
        return;
    };
    let model = Arc::new(Model::load(&path).expect("load the low-bit file"));
    let refs =
        common::read_jsonl(&common::reference_dir().join(format!("qwen05b/{stem}.public.jsonl")));
    let rep = common::compare(&model, &refs, 2e-5, 2, 24);
    let scalar = std::env::var("GGRS_FORCE_SCALAR").is_ok_and(|v| v == "1");
    eprintln!("qwen05b {stem} (scalar: {scalar}): {rep:?}");
    assert_eq!(
        rep.over_tol, 0,
        "{stem}: top-10 logits beyond 2e-5: {rep:?}"
    );
    assert_eq!(
        rep.greedy_prefix_ok, 6,
        "{stem}: whole greedy runs equal on {} of 6 prompts",
        rep.greedy_prefix_ok
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
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("GGRS_FORCE_SCALAR", "1")
        .output()
        .expect("run the test binary");
    let text = String::from_utf8_lossy(&out.stderr);
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "GGRS_FORCE_SCALAR=1 run failed:\n{text}"
    );
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
