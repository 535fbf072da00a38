//! The type `ggrs quantize` gives each tensor: llama.cpp's `--pure` rule and its default
//! recipe for the output projection, with the shape fallbacks of its quantize tool.

use ggrs_core::gguf::TensorInfo;
use ggrs_core::quantize::target_type_for;
use ggrs_core::DType;

fn info(name: &str, ne: [usize; 4], dtype: DType) -> TensorInfo {
    let n_dims = (1..4).rev().find(|&i| ne[i] > 1).map_or(1, |i| i + 1);
    TensorInfo {
        name: name.to_string(),
        dtype,
        ne,
        n_dims,
        offset: 0,
        size: dtype.row_size(ne[0]) * ne[1] * ne[2] * ne[3],
    }
}

#[test]
fn pure_gives_every_matrix_the_target() {
    let out = info("output.weight", [896, 151936, 1, 1], DType::F16);
    let ffn = info("blk.0.ffn_up.weight", [896, 4864, 1, 1], DType::F16);
    let norm = info("blk.0.attn_norm.weight", [896, 1, 1, 1], DType::F32);
    let bias = info("blk.0.attn_q.bias", [896, 1, 1, 1], DType::F32);
    for t in [DType::Q4_0, DType::Q8_0, DType::Q5_0] {
        assert_eq!(target_type_for(&out, t, true, true), t);
        assert_eq!(target_type_for(&ffn, t, true, true), t);
        assert_eq!(target_type_for(&norm, t, true, true), DType::F32);
        assert_eq!(target_type_for(&bias, t, true, true), DType::F32);
    }
}

#[test]
fn default_recipe_keeps_more_bits_in_the_output() {
    // Rows of 896 = 3.5 blocks of 256: Q6_K does not fit, so llama.cpp uses Q8_0.
    let out896 = info("output.weight", [896, 1000, 1, 1], DType::F16);
    // Rows of 4096 fit Q6_K.
    let out4096 = info("output.weight", [4096, 1000, 1, 1], DType::F16);
    let ffn = info("blk.3.ffn_down.weight", [4096, 4096, 1, 1], DType::F16);
    assert_eq!(
        target_type_for(&out896, DType::Q4_0, false, true),
        DType::Q8_0
    );
    assert_eq!(
        target_type_for(&out4096, DType::Q4_0, false, true),
        DType::Q6K
    );
    assert_eq!(
        target_type_for(&out4096, DType::Q5_1, false, true),
        DType::Q6K
    );
    // A Q8_0 target keeps Q8_0 for the output too.
    assert_eq!(
        target_type_for(&out4096, DType::Q8_0, false, true),
        DType::Q8_0
    );
    // Plain float targets are not block types: no recipe.
    assert_eq!(
        target_type_for(&out4096, DType::F16, false, true),
        DType::F16
    );
    // Other matrices get the target.
    assert_eq!(target_type_for(&ffn, DType::Q4_0, false, true), DType::Q4_0);
    // With no output.weight the embedding table is the output and gets its treatment.
    let emb = info("token_embd.weight", [4096, 1000, 1, 1], DType::F16);
    assert_eq!(target_type_for(&emb, DType::Q4_0, false, false), DType::Q6K);
    assert_eq!(target_type_for(&emb, DType::Q4_0, false, true), DType::Q4_0);
}

#[test]
fn block_types_that_do_not_fit_fall_back() {
    let m = |ne0| info("blk.0.attn_q.weight", [ne0, 64, 1, 1], DType::F16);
    assert_eq!(
        target_type_for(&m(128), DType::Q6K, true, true),
        DType::Q8_0
    );
    assert_eq!(
        target_type_for(&m(128), DType::Q5K, true, true),
        DType::Q5_1
    );
    assert_eq!(
        target_type_for(&m(128), DType::Q4K, true, true),
        DType::Q5_0
    );
    assert_eq!(
        target_type_for(&m(128), DType::Q3K, true, true),
        DType::Q4_0
    );
    assert_eq!(
        target_type_for(&m(128), DType::Q2K, true, true),
        DType::Q4_0
    );
    // Rows of 48 fit no 32-block fallback either: F16.
    assert_eq!(target_type_for(&m(48), DType::Q6K, true, true), DType::F16);
    // A legacy type whose blocks do not fit has no fallback: kept (quantize_file reports it).
    assert_eq!(
        target_type_for(&m(48), DType::Q4_0, true, true),
        DType::Q4_0
    );
    // Rows that fit keep the k-quant.
    assert_eq!(target_type_for(&m(512), DType::Q4K, true, true), DType::Q4K);
}
