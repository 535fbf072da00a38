//! The type llama.cpp's recipes give each tensor, on synthetic tensor lists. The expected
//! types are derived by hand from the rules of `llama_tensor_get_type` in llama.cpp's
//! `src/llama-quant.cpp` (commit 0c1e570), not from this crate's code: e.g. for Q4_K_M the
//! layers of a 32-layer model that "use more bits" are i < 4, i ≥ 28 and (i − 4) % 3 == 2.

use ggrs_core::gguf::TensorInfo;
use ggrs_core::DType;
use ggrs_llama::quantize::{
    choose_types, fallback, FileType, ModelFacts, QuantType, RecipeOptions, TensorTypeOverride,
};
use QuantType as Q;

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

/// A LLaMA-7B-like tensor list: `n_layer` layers of width `d`, FFN width `ff`, in the
/// order a converter writes them (not llama.cpp's sorted order, on purpose).
fn model(n_layer: usize, d: usize, ff: usize, tied: bool) -> Vec<TensorInfo> {
    let mut v = vec![info("token_embd.weight", [d, 32000, 1, 1], DType::F16)];
    for i in 0..n_layer {
        let p = |s: &str| format!("blk.{i}.{s}");
        v.push(info(&p("attn_norm.weight"), [d, 1, 1, 1], DType::F32));
        v.push(info(&p("attn_q.weight"), [d, d, 1, 1], DType::F16));
        v.push(info(&p("attn_k.weight"), [d, d, 1, 1], DType::F16));
        v.push(info(&p("attn_v.weight"), [d, d, 1, 1], DType::F16));
        v.push(info(&p("attn_output.weight"), [d, d, 1, 1], DType::F16));
        v.push(info(&p("ffn_norm.weight"), [d, 1, 1, 1], DType::F32));
        v.push(info(&p("ffn_gate.weight"), [d, ff, 1, 1], DType::F16));
        v.push(info(&p("ffn_up.weight"), [d, ff, 1, 1], DType::F16));
        v.push(info(&p("ffn_down.weight"), [ff, d, 1, 1], DType::F16));
    }
    v.push(info("output_norm.weight", [d, 1, 1, 1], DType::F32));
    if !tied {
        v.push(info("output.weight", [d, 32000, 1, 1], DType::F16));
    }
    v
}

fn facts(arch: &str, n_layer: i32, n_head: u32, n_head_kv: u32, n_expert: u32) -> ModelFacts {
    ModelFacts {
        arch: arch.to_string(),
        n_layer,
        n_head,
        n_head_kv,
        n_expert,
    }
}

/// The chosen type of tensor `name` (`None`: keeps its own).
fn type_of(tensors: &[TensorInfo], types: &[Option<QuantType>], name: &str) -> Option<QuantType> {
    let i = tensors
        .iter()
        .position(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    types[i]
}

fn run(tensors: &[TensorInfo], f: &ModelFacts, recipe: &RecipeOptions) -> Vec<Option<QuantType>> {
    choose_types(tensors, f, recipe).expect("choose").types
}

/// Expected types of one layer: (attn_q, attn_k, attn_v, attn_output, gate, up, down).
type Layer = [QuantType; 7];

fn check_layers(
    ft: FileType,
    tensors: &[TensorInfo],
    f: &ModelFacts,
    want: impl Fn(usize) -> Layer,
    embd: QuantType,
    output: Option<QuantType>,
) {
    let types = run(tensors, f, &RecipeOptions::new(ft));
    for i in 0..f.n_layer as usize {
        let names = [
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        ];
        for (n, w) in names.iter().zip(want(i)) {
            let name = format!("blk.{i}.{n}.weight");
            assert_eq!(type_of(tensors, &types, &name), Some(w), "{ft}: {name}");
        }
        let norm = format!("blk.{i}.attn_norm.weight");
        assert_eq!(
            type_of(tensors, &types, &norm),
            None,
            "{ft}: norms keep F32"
        );
    }
    assert_eq!(
        type_of(tensors, &types, "token_embd.weight"),
        Some(embd),
        "{ft}: token_embd"
    );
    if let Some(o) = output {
        assert_eq!(
            type_of(tensors, &types, "output.weight"),
            Some(o),
            "{ft}: output"
        );
    }
}

/// Layers of a 32-layer model that `use_more_bits`: i < 4, i ≥ 28, (i − 4) % 3 == 2.
const MORE_BITS_32: [usize; 16] = [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31];

#[test]
fn k_quant_medium_mixtures_of_a_32_layer_model() {
    let m = model(32, 4096, 11008, false);
    let f = facts("llama", 32, 32, 32, 0);
    for (ft, base) in [(FileType::Q4KM, Q::Q4K), (FileType::Q5KM, Q::Q5K)] {
        check_layers(
            ft,
            &m,
            &f,
            |i| {
                let more = if MORE_BITS_32.contains(&i) {
                    Q::Q6K
                } else {
                    base
                };
                [base, base, more, base, base, base, more]
            },
            base,
            Some(Q::Q6K),
        );
    }
    // Q3_K_M: attn_v Q5_K in the first two attn_v tensors then Q4_K, ffn_down Q5_K below
    // 32/16 = 2 then Q4_K, attn_output Q4_K.
    check_layers(
        FileType::Q3KM,
        &m,
        &f,
        |i| {
            let v = if i < 2 { Q::Q5K } else { Q::Q4K };
            [Q::Q3K, Q::Q3K, v, Q::Q4K, Q::Q3K, Q::Q3K, v]
        },
        Q::Q3K,
        Some(Q::Q6K),
    );
}

#[test]
fn k_quant_small_and_large_mixtures() {
    let m = model(32, 4096, 11008, false);
    let f = facts("llama", 32, 32, 32, 0);
    // Q4_K_S: attn_v Q5_K in the first 4, ffn_down Q5_K below 32/8 = 4.
    check_layers(
        FileType::Q4KS,
        &m,
        &f,
        |i| {
            let v = if i < 4 { Q::Q5K } else { Q::Q4K };
            [Q::Q4K, Q::Q4K, v, Q::Q4K, Q::Q4K, Q::Q4K, v]
        },
        Q::Q4K,
        Some(Q::Q6K),
    );
    check_layers(
        FileType::Q5KS,
        &m,
        &f,
        |_| [Q::Q5K; 7],
        Q::Q5K,
        Some(Q::Q6K),
    );
    check_layers(
        FileType::Q3KS,
        &m,
        &f,
        |_| [Q::Q3K; 7],
        Q::Q3K,
        Some(Q::Q6K),
    );
    check_layers(
        FileType::Q3KL,
        &m,
        &f,
        |_| [Q::Q3K, Q::Q3K, Q::Q5K, Q::Q5K, Q::Q3K, Q::Q3K, Q::Q5K],
        Q::Q3K,
        Some(Q::Q6K),
    );
    check_layers(FileType::Q6K, &m, &f, |_| [Q::Q6K; 7], Q::Q6K, Some(Q::Q6K));
}

#[test]
fn q2_k_depends_on_grouped_query_attention() {
    let m = model(32, 4096, 11008, false);
    for (n_head_kv, v) in [(32, Q::Q3K), (8, Q::Q4K)] {
        let f = facts("llama", 32, 32, n_head_kv, 0);
        check_layers(
            FileType::Q2K,
            &m,
            &f,
            |_| [Q::Q2K, Q::Q2K, v, Q::Q3K, Q::Q2K, Q::Q2K, Q::Q3K],
            Q::Q2K,
            Some(Q::Q6K),
        );
    }
    // Q2_K_S: attn_v Q4_K only with GQA ≥ 4; ffn_down Q4_K below n/8.
    let f = facts("llama", 32, 32, 8, 0);
    check_layers(
        FileType::Q2KS,
        &m,
        &f,
        |i| {
            let d = if i < 4 { Q::Q4K } else { Q::Q2K };
            [Q::Q2K, Q::Q2K, Q::Q4K, Q::Q2K, Q::Q2K, Q::Q2K, d]
        },
        Q::Q2K,
        Some(Q::Q6K),
    );
}

#[test]
fn iq4_mixtures() {
    let m = model(32, 4096, 11008, false);
    for (ft, base) in [(FileType::IQ4XS, Q::IQ4XS), (FileType::IQ4NL, Q::IQ4NL)] {
        for (n_head_kv, v) in [(32, base), (8, Q::Q5K)] {
            let f = facts("llama", 32, 32, n_head_kv, 0);
            check_layers(
                ft,
                &m,
                &f,
                |i| {
                    let d = if i < 4 { Q::Q5K } else { base };
                    [base, base, v, base, base, base, d]
                },
                base,
                Some(Q::Q6K),
            );
        }
    }
}

#[test]
fn legacy_file_types_give_the_output_q6_k_but_q8_0() {
    let m = model(4, 4096, 11008, false);
    let f = facts("llama", 4, 32, 32, 0);
    for (ft, t) in [
        (FileType::Q4_0, Q::Q4_0),
        (FileType::Q4_1, Q::Q4_1),
        (FileType::Q5_0, Q::Q5_0),
        (FileType::Q5_1, Q::Q5_1),
    ] {
        check_layers(ft, &m, &f, |_| [t; 7], t, Some(Q::Q6K));
    }
    check_layers(
        FileType::Q8_0,
        &m,
        &f,
        |_| [Q::Q8_0; 7],
        Q::Q8_0,
        Some(Q::Q8_0),
    );
    // Float file types: every matrix, output included, without recipe.
    check_layers(FileType::F16, &m, &f, |_| [Q::F16; 7], Q::F16, Some(Q::F16));
    check_layers(
        FileType::BF16,
        &m,
        &f,
        |_| [Q::BF16; 7],
        Q::BF16,
        Some(Q::BF16),
    );
}

#[test]
fn tied_embeddings_follow_the_output_rule() {
    let m = model(4, 4096, 11008, true);
    let f = facts("llama", 4, 32, 32, 0);
    let types = run(&m, &f, &RecipeOptions::new(FileType::Q4_0));
    assert_eq!(type_of(&m, &types, "token_embd.weight"), Some(Q::Q6K));
    // Rows not a multiple of 256: Q8_0.
    let m = model(4, 896, 4864, true);
    let types = run(&m, &f, &RecipeOptions::new(FileType::Q4KM));
    assert_eq!(type_of(&m, &types, "token_embd.weight"), Some(Q::Q8_0));
}

#[test]
fn rows_not_a_multiple_of_256_fall_back() {
    // Qwen2.5-0.5B's shapes: 896-wide rows, 4864-wide ffn_down rows (19 · 256), 24 layers.
    let m = model(24, 896, 4864, false);
    let f = facts("qwen2", 24, 14, 2, 0);
    // use_more_bits(i, 24): i < 3, i ≥ 21, (i − 3) % 3 == 2.
    let more = [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23];
    check_layers(
        FileType::Q4KM,
        &m,
        &f,
        |i| {
            let (v, d) = if more.contains(&i) {
                (Q::Q8_0, Q::Q6K) // Q6_K falls back to Q8_0 on 896-wide rows
            } else {
                (Q::Q5_0, Q::Q4K) // Q4_K falls back to Q5_0
            };
            [Q::Q5_0, Q::Q5_0, v, Q::Q5_0, Q::Q5_0, Q::Q5_0, d]
        },
        Q::Q5_0,
        Some(Q::Q8_0),
    );
    // GQA 7 ≥ 4: IQ4_XS gives attn_v Q5_K → Q5_1; ffn_down Q5_K below 24/8 = 3 (4864 fits).
    check_layers(
        FileType::IQ4XS,
        &m,
        &f,
        |i| {
            let d = if i < 3 { Q::Q5K } else { Q::IQ4XS };
            [Q::IQ4NL, Q::IQ4NL, Q::Q5_1, Q::IQ4NL, Q::IQ4NL, Q::IQ4NL, d]
        },
        Q::IQ4NL,
        Some(Q::Q8_0),
    );
    let c = choose_types(&m, &f, &RecipeOptions::new(FileType::Q3KM)).expect("choose");
    // Q3_K falls back to Q4_0 everywhere but ffn_down (Q4_K/Q5_K there fit 4864).
    assert_eq!(type_of(&m, &c.types, "blk.5.attn_q.weight"), Some(Q::Q4_0));
    assert_eq!(type_of(&m, &c.types, "blk.0.attn_v.weight"), Some(Q::Q5_1));
    assert_eq!(type_of(&m, &c.types, "blk.0.ffn_down.weight"), Some(Q::Q5K));
    assert_eq!(type_of(&m, &c.types, "blk.1.ffn_down.weight"), Some(Q::Q4K));
    assert_eq!(
        type_of(&m, &c.types, "blk.3.attn_output.weight"),
        Some(Q::Q5_0)
    );
    // 6 matrices of 24 layers fall back (not ffn_down), and token_embd (Q3_K → Q4_0); the
    // output does not (its own rule chose Q8_0).
    assert_eq!(c.n_fallback, 24 * 6 + 1);
}

#[test]
fn fallback_table() {
    assert_eq!(fallback(4096, Q::Q4K), (Q::Q4K, false));
    assert_eq!(fallback(896, Q::Q6K), (Q::Q8_0, true));
    assert_eq!(fallback(896, Q::Q5K), (Q::Q5_1, true));
    assert_eq!(fallback(896, Q::Q4K), (Q::Q5_0, true));
    assert_eq!(fallback(896, Q::Q3K), (Q::Q4_0, true));
    assert_eq!(fallback(896, Q::Q2K), (Q::Q4_0, true));
    assert_eq!(fallback(896, Q::IQ4XS), (Q::IQ4NL, true));
    // Not even 32 fits: F16, for 256- and 32-value types alike.
    assert_eq!(fallback(48, Q::Q6K), (Q::F16, true));
    assert_eq!(fallback(48, Q::Q4_0), (Q::F16, true));
    assert_eq!(fallback(48, Q::F16), (Q::F16, false));
}

#[test]
fn counters_follow_llama_cpp_layer_order() {
    // 16 layers written in a scrambled order: the attn_v counter must still count layers in
    // numeric order (blk.2 before blk.10), as llama.cpp's weights_map orders them.
    let mut m = model(16, 4096, 11008, false);
    m.reverse();
    m.swap(3, 40);
    let f = facts("llama", 16, 32, 32, 0);
    // Q3_K_M: only the first two attn_v tensors (layers 0 and 1) get Q5_K.
    let types = run(&m, &f, &RecipeOptions::new(FileType::Q3KM));
    for i in 0..16 {
        let want = if i < 2 { Q::Q5K } else { Q::Q4K };
        let name = format!("blk.{i}.attn_v.weight");
        assert_eq!(type_of(&m, &types, &name), Some(want), "{name}");
    }
}

#[test]
fn overrides_and_output_options() {
    let m = model(8, 4096, 11008, false);
    let f = facts("llama", 8, 32, 32, 0);
    let mut r = RecipeOptions::new(FileType::Q4KM);
    r.overrides = vec![
        TensorTypeOverride::parse(r"blk\.[0-3]\.FFN_DOWN=q8_0").expect("parse"),
        TensorTypeOverride::parse("ffn_down=q4_0").expect("parse"),
        TensorTypeOverride::parse("attn_q=q5_k").expect("parse"),
    ];
    r.output_type = Some(Q::F16);
    r.token_embedding_type = Some(Q::Q8_0);
    let types = run(&m, &f, &r);
    // First matching pattern wins (the name is lower-cased, as llama-quantize does).
    assert_eq!(type_of(&m, &types, "blk.2.ffn_down.weight"), Some(Q::Q8_0));
    assert_eq!(type_of(&m, &types, "blk.5.ffn_down.weight"), Some(Q::Q4_0));
    assert_eq!(type_of(&m, &types, "blk.5.attn_q.weight"), Some(Q::Q5K));
    assert_eq!(type_of(&m, &types, "output.weight"), Some(Q::F16));
    assert_eq!(type_of(&m, &types, "token_embd.weight"), Some(Q::Q8_0));
    // Overridden ffn_down tensors do not advance the counter, the others keep the recipe:
    // attn_v of layer 0 (use_more_bits(0, 8)) is Q6_K, of layer 3 ((3 − 1) % 3 == 2) too.
    assert_eq!(type_of(&m, &types, "blk.0.attn_v.weight"), Some(Q::Q6K));
    assert_eq!(type_of(&m, &types, "blk.1.attn_v.weight"), Some(Q::Q4K));
    assert_eq!(type_of(&m, &types, "blk.3.attn_v.weight"), Some(Q::Q6K));
    // An override that does not fit the rows falls back like the recipe's own types.
    let m2 = model(2, 896, 4864, false);
    let mut r = RecipeOptions::new(FileType::Q8_0);
    r.overrides = vec![TensorTypeOverride::parse("attn_k=q6_k").expect("parse")];
    let types = run(&m2, &f, &r);
    assert_eq!(type_of(&m2, &types, "blk.1.attn_k.weight"), Some(Q::Q8_0));
    // --pure: no mixture, but the output override still applies.
    let mut r = RecipeOptions::new(FileType::Q4KM);
    r.pure = true;
    r.output_type = Some(Q::Q8_0);
    let types = run(&m, &f, &r);
    assert_eq!(type_of(&m, &types, "blk.0.attn_v.weight"), Some(Q::Q4K));
    assert_eq!(type_of(&m, &types, "output.weight"), Some(Q::Q8_0));
    assert_eq!(type_of(&m, &types, "token_embd.weight"), Some(Q::Q4K));
    // --leave-output-tensor.
    let mut r = RecipeOptions::new(FileType::Q4KM);
    r.leave_output = true;
    assert_eq!(type_of(&m, &run(&m, &f, &r), "output.weight"), None);
    // Malformed overrides are errors.
    assert!(TensorTypeOverride::parse("attn_v").is_err());
    assert!(TensorTypeOverride::parse("=q8_0").is_err());
    assert!(TensorTypeOverride::parse("attn_v=q9_9").is_err());
    assert!(TensorTypeOverride::parse("attn_v(=q8_0").is_err());
}

#[test]
fn seventy_b_and_eight_expert_rules() {
    // LLaMA-2-70B: 80 layers, 64 heads, 8 KV heads. Q4_K_S: attn_v Q5_K in the first 4 and
    // otherwise Q4_K, which the 70B rule raises to Q5_K.
    let m = model(80, 8192, 28672, false);
    let f = facts("llama", 80, 64, 8, 0);
    let types = run(&m, &f, &RecipeOptions::new(FileType::Q4KS));
    assert_eq!(type_of(&m, &types, "blk.40.attn_v.weight"), Some(Q::Q5K));
    assert_eq!(type_of(&m, &types, "blk.40.attn_q.weight"), Some(Q::Q4K));
    // 80 layers without GQA is LLaMA-65B: no raise.
    let f65 = facts("llama", 80, 64, 64, 0);
    let types = run(&m, &f65, &RecipeOptions::new(FileType::Q4KS));
    assert_eq!(type_of(&m, &types, "blk.40.attn_v.weight"), Some(Q::Q4K));
    // Eight experts: attn_v and attn_k Q8_0, attn_output Q5_K (Q4_K_M).
    let m = model(4, 4096, 14336, false);
    let f = facts("llama", 4, 32, 8, 8);
    let types = run(&m, &f, &RecipeOptions::new(FileType::Q4KM));
    assert_eq!(type_of(&m, &types, "blk.1.attn_v.weight"), Some(Q::Q8_0));
    assert_eq!(type_of(&m, &types, "blk.1.attn_k.weight"), Some(Q::Q8_0));
    assert_eq!(
        type_of(&m, &types, "blk.1.attn_output.weight"),
        Some(Q::Q5K)
    );
}

#[test]
fn file_type_numbers_and_names_are_llama_cpps() {
    // llama.h's llama_ftype values.
    for (name, id) in [
        ("F32", 0),
        ("F16", 1),
        ("Q4_0", 2),
        ("Q4_1", 3),
        ("Q8_0", 7),
        ("Q5_0", 8),
        ("Q5_1", 9),
        ("Q2_K", 10),
        ("Q3_K_S", 11),
        ("Q3_K_M", 12),
        ("Q3_K_L", 13),
        ("Q4_K_S", 14),
        ("Q4_K_M", 15),
        ("Q5_K_S", 16),
        ("Q5_K_M", 17),
        ("Q6_K", 18),
        ("Q2_K_S", 21),
        ("IQ4_NL", 25),
        ("IQ4_XS", 30),
        ("BF16", 32),
        // llama-quantize's aliases.
        ("q4_k", 15),
        ("Q5_K", 17),
        ("q3_k", 12),
    ] {
        let ft = FileType::from_name(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(ft.id(), id, "{name}");
        assert_eq!(FileType::from_name(&id.to_string()), Some(ft), "{id}");
    }
    assert_eq!(FileType::from_name("q4_k_x"), None);
    // ggml's type ids.
    for (t, id) in [
        (Q::Q5_0, 6),
        (Q::Q8_0, 8),
        (Q::Q6K, 14),
        (Q::IQ4NL, 20),
        (Q::IQ4XS, 23),
    ] {
        assert_eq!(t.id(), id, "{t}");
    }
}

/// A small llama file in memory (F32 matrices of pseudo-random values), tensors in a
/// converter's order.
fn small_file() -> ggrs_core::gguf::GgufFile {
    use ggrs_core::gguf::{GgufFile, GgufWriter, Value};
    let tensors = model(2, 256, 512, false);
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", Value::String("llama".into()))
        .expect("kv");
    w.add_kv("llama.block_count", Value::U32(2)).expect("kv");
    w.add_kv("llama.attention.head_count", Value::U32(4))
        .expect("kv");
    w.add_kv("general.file_type", Value::U32(0)).expect("kv");
    w.add_kv("general.name", Value::String("small".into()))
        .expect("kv");
    for t in &tensors {
        let ne = &t.ne[..t.n_dims];
        let ne: Vec<usize> = ne
            .iter()
            .map(|&n| if n == 32000 { 300 } else { n })
            .collect();
        w.add_tensor_info(t.name.clone(), DType::F32, &ne)
            .expect("tensor");
    }
    let mut seed = 0x2545_f491u32;
    let bytes = w
        .to_bytes(|info, out| {
            let n = info.size / 4;
            let mut v = Vec::with_capacity(info.size);
            for _ in 0..n {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let x = (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
                v.extend_from_slice(&x.to_le_bytes());
            }
            std::io::Write::write_all(out, &v)
        })
        .expect("gguf bytes");
    GgufFile::from_bytes(std::sync::Arc::new(bytes)).expect("parse")
}

#[test]
fn plan_and_file_follow_llama_quantize() {
    use ggrs_core::gguf::{GgufFile, Value};
    use ggrs_core::quantize::QuantizeOptions;
    use ggrs_llama::quantize::{plan, quantize, QuantizeError};
    let file = small_file();
    let p = plan(&file, &RecipeOptions::new(FileType::Q4KM)).expect("plan");
    assert_eq!(
        p.metadata,
        vec![("general.file_type".to_string(), Value::U32(15))]
    );
    // llama.cpp's order: names outside the layers first (sorted), then each layer's names.
    let names: Vec<&str> = p
        .order
        .iter()
        .map(|&i| file.tensors()[i].name.as_str())
        .collect();
    assert_eq!(
        &names[..6],
        [
            "output.weight",
            "output_norm.weight",
            "token_embd.weight",
            "blk.0.attn_k.weight",
            "blk.0.attn_norm.weight",
            "blk.0.attn_output.weight"
        ]
    );
    assert_eq!(names[12], "blk.1.attn_k.weight");
    // The file: types, order, file type after the quantization version (moved to the end).
    let dir = std::env::temp_dir().join(format!("ggrs-recipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out = dir.join("small-q4_k_m.gguf");
    let opts = QuantizeOptions {
        allow_requantize: false,
        n_threads: 2,
    };
    quantize(
        &file,
        &out,
        &RecipeOptions::new(FileType::Q4KM),
        &opts,
        |_| {},
    )
    .expect("quantize");
    let q = GgufFile::open(&out).expect("open");
    let written: Vec<&str> = q.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(written, names);
    let keys: Vec<&str> = q.metadata().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        &keys[keys.len() - 2..],
        ["general.quantization_version", "general.file_type"]
    );
    assert_eq!(
        q.get("general.file_type").and_then(|v| v.as_u32()),
        Some(15)
    );
    let ty = |n: &str| q.tensor(n).expect("tensor").dtype;
    // use_more_bits(i, 2): 2/8 = 0 and 7·2/8 = 1, so only layer 1 (i ≥ 1) gets Q6_K.
    assert_eq!(ty("blk.0.attn_v.weight"), DType::Q4K);
    assert_eq!(ty("blk.1.attn_v.weight"), DType::Q6K);
    assert_eq!(ty("blk.0.ffn_down.weight"), DType::Q4K);
    assert_eq!(ty("blk.1.ffn_down.weight"), DType::Q6K);
    assert_eq!(ty("blk.1.attn_q.weight"), DType::Q4K);
    assert_eq!(ty("output.weight"), DType::Q6K);
    assert_eq!(ty("blk.1.ffn_norm.weight"), DType::F32);
    std::fs::remove_dir_all(&dir).expect("clean up");
    // Q2_K_S needs an importance matrix in llama.cpp: refused.
    assert!(matches!(
        plan(&file, &RecipeOptions::new(FileType::Q2KS)),
        Err(QuantizeError::NeedsImatrix { .. })
    ));
    // A type this build cannot write is a typed error, not a panic.
    let iq4 = plan(&file, &RecipeOptions::new(FileType::IQ4XS));
    if QuantType::IQ4XS.dtype().is_none() {
        assert!(matches!(iq4, Err(QuantizeError::UnsupportedType { .. })));
    } else {
        assert!(iq4.is_ok());
    }
}
