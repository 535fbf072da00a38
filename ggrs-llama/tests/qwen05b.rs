//! Qwen2.5-Coder-0.5B (f16, q8_0, q4_0 made by our quantizer) against llama.cpp's outputs.
//! Needs the fetched source model (scripts/fetch-model.sh); see `common::qwen05b`.

use crate::common;

use std::sync::Arc;

use ggrs_llama::Model;

fn check(kind: &str, tol: f32) {
    let _one_at_a_time = common::serial();
    let Some(path) = common::qwen05b(kind) else {
        return;
    };
    let model = Arc::new(Model::load(&path).expect("load qwen05b"));
    let refs =
        common::read_jsonl(&common::reference_dir().join(format!("qwen05b/{kind}.public.jsonl")));
    let rep = common::compare(&model, &refs, tol, 2, 8);
    eprintln!("qwen05b {kind}: {rep:?}");
    assert_eq!(
        rep.over_tol, 0,
        "reference top-10 logits beyond {tol}: {rep:?}"
    );
    let share = rep.argmax_equal as f64 / rep.argmax_checked.max(1) as f64;
    assert!(share >= 0.98, "argmax agreement {share:.4} < 0.98: {rep:?}");
    assert!(
        rep.greedy_prefix_ok >= 5,
        "first 8 greedy tokens equal on {} of 6 prompts",
        rep.greedy_prefix_ok
    );
}

#[test]
fn qwen05b_f16_matches_llama_cpp() {
    check("f16", 0.05);
}

#[test]
fn qwen05b_q8_0_matches_llama_cpp() {
    check("q8_0", 0.1);
}

#[test]
fn qwen05b_q4_0_matches_llama_cpp() {
    check("q4_0", 0.25);
}

/// The recipe files (made by `ggrs quantize` as llama.cpp's quantize tool makes them; see
/// `common::qwen05b`) whose every kernel keeps the order of the build that made the
/// reference: every reference top-10 logit, on the prompt and on all 24 greedy steps, equal
/// to the digits llama.cpp printed (5 decimals, so within 2e-5), and every greedy run equal.
/// Q5_0 and Q8_0 (the recipes' fallbacks), Q4_1 and Q5_1 (`ggml_vec_dot_q*_1_q8_1`'s order),
/// Q6_K, Q5_K and IQ4_XS (`ggml_vec_dot_*_q8_K`'s lanes below 8 columns, the tiled matmul's
/// order from 8 on), IQ4_NL (the Q4_0-style repacked block chain), Q2_K (with Q3_K in
/// `ggml_vec_dot_q3_K_q8_K`'s lanes below 8 columns), Q4_K (the repacked `q4_K_8x8` GEMM
/// and GEMV orders: the `ffn_down` weights of Q4_K_M and Q3_K_M; Q3_K_M has no Q3_K weight
/// in this model).
#[test]
fn qwen05b_recipes_equal_llama_cpp_digits() {
    for kind in [
        "q5_0", "q4_1", "q5_1", "q6_k", "q5_k_m", "iq4_nl", "iq4_xs", "q2_k", "q4_k_m", "q3_k_m",
    ] {
        let _one_at_a_time = common::serial();
        let Some(path) = common::qwen05b(kind) else {
            return;
        };
        let model = Arc::new(Model::load(&path).expect("load the recipe file"));
        let refs = common::read_jsonl(
            &common::reference_dir().join(format!("qwen05b/{kind}.public.jsonl")),
        );
        let rep = common::compare(&model, &refs, 2e-5, 2, 24);
        eprintln!("qwen05b {kind}: {rep:?}");
        assert_eq!(
            rep.over_tol, 0,
            "{kind}: top-10 logits beyond 2e-5: {rep:?}"
        );
        assert_eq!(
            rep.greedy_prefix_ok, 6,
            "{kind}: whole greedy runs equal on {} of 6 prompts",
            rep.greedy_prefix_ok
        );
    }
}

/// The fetched source file itself (the Q4_K_M people download: Q5_0, Q8_0, Q6_K and Q4_K
/// weights, the Q4_K ones in llama.cpp's repacked GEMM/GEMV orders): every reference top-10
/// logit within 2e-5 of llama.cpp's printed digits, on the prompt and on all 24 greedy
/// steps, and every greedy run equal.
#[test]
fn qwen05b_source_equals_llama_cpp_digits() {
    let _one_at_a_time = common::serial();
    // Fetches the source when it is missing (or skips under GGRS_SKIP_MODEL_TESTS=1).
    if common::qwen05b("f16").is_none() {
        return;
    }
    let path = common::model_dir().join(common::SOURCE_MODEL);
    let model = Arc::new(Model::load(&path).expect("load the source model"));
    let refs =
        common::read_jsonl(&common::reference_dir().join("qwen05b/source-q4_k_m.public.jsonl"));
    let rep = common::compare(&model, &refs, 2e-5, 2, 24);
    eprintln!("qwen05b source: {rep:?}");
    assert_eq!(rep.over_tol, 0, "top-10 logits beyond 2e-5: {rep:?}");
    assert_eq!(
        rep.greedy_prefix_ok, 6,
        "whole greedy runs equal on {} of 6 prompts",
        rep.greedy_prefix_ok
    );
}

/// The downloaded file, the recipe files and q4_0 again on the AVX2 kernels, in child
/// processes with `GGRS_MAX_ISA=avx2`, where the CPU would otherwise run its AVX-512 ones:
/// every ISA's build of every kernel keeps the reference's order, and a CPU without AVX-512
/// runs these (a whole file catches what the kernel tests' panels do not: the packing, the
/// dispatch, the prefetching). Skipped where the CPU's best is AVX2 or less (the tests above
/// ran them already) and inside such a child.
#[test]
fn qwen05b_files_equal_llama_cpp_on_the_avx2_kernels() {
    use ggrs_core::cpu::{self, Isa};
    if std::env::var_os("GGRS_MAX_ISA").is_some() || cpu::isa() <= Isa::Avx2 {
        return;
    }
    for test in [
        "qwen05b_source_equals_llama_cpp_digits",
        "qwen05b_recipes_equal_llama_cpp_digits",
        "qwen05b_q4_0_matches_llama_cpp",
    ] {
        common::again_with_env(module_path!(), test, "GGRS_MAX_ISA", "avx2");
    }
}

/// The downloaded file, q4_0 and q8_0 again on the AVX-VNNI kernels (the AVX2 builds with
/// `vpdpbusd` / `vpdpwssd` in VEX form, which Intel's client CPUs without AVX-512 run), in
/// child processes with `GGRS_MAX_ISA=avx2vnni`: the downloaded file's logits to llama.cpp's
/// digits (its Q4_K and Q6_K panels, its Q5_0 and Q8_0 weights), q4_0 and q8_0 (the Q4_0
/// chain and Q8_0 lanes panels, every column count of the prompts and greedy steps) within
/// their tolerances. Three files only, to keep the run short (the kernel tests compare every
/// AVX-VNNI build bit for bit). Skipped where the CPU has no AVX-VNNI, where its best level
/// is AVX-VNNI already (the tests above ran them), and inside such a child.
#[test]
fn qwen05b_files_equal_llama_cpp_on_the_avx_vnni_kernels() {
    use ggrs_core::cpu::{self, Isa};
    if std::env::var_os("GGRS_MAX_ISA").is_some()
        || !cpu::features().runs(Isa::Avx2Vnni)
        || cpu::isa() == Isa::Avx2Vnni
    {
        return;
    }
    for test in [
        "qwen05b_source_equals_llama_cpp_digits",
        "qwen05b_q4_0_matches_llama_cpp",
        "qwen05b_q8_0_matches_llama_cpp",
    ] {
        common::again_with_env(module_path!(), test, "GGRS_MAX_ISA", "avx2vnni");
    }
}
