//! The tiny random-weight Qwen3-MoE (4 experts, 2 used per token, Qwen3's per-head Q/K
//! norms, f16) against llama.cpp's outputs, and a prompt evaluated in one batch against the
//! same tokens one at a time (each token's experts are its own).

use crate::common;

use std::sync::Arc;

use ggrs_core::{Context, DType, Executor, Graph};
use ggrs_llama::arch::decoder::FeedForward;
use ggrs_llama::arch::qwen3moe::{MoeFfn, Qwen3MoeModel};
use ggrs_llama::loader::WeightId;
use ggrs_llama::{Model, Session, SessionParams};

fn load() -> Arc<Model> {
    let path = common::reference_dir().join("tiny/tiny-moe-f16.gguf");
    Arc::new(Model::load(path).expect("load tiny moe"))
}

#[test]
fn hyperparameters_and_experts() {
    let m = load();
    let hp = &m.hparams;
    assert_eq!(m.arch_name(), "qwen3moe");
    assert_eq!((hp.n_embd, hp.n_layer), (128, 2));
    assert_eq!((hp.n_head, hp.n_head_kv, hp.head_dim), (4, 2, 32));
    let mm = m.arch_weights::<Qwen3MoeModel>().expect("a qwen3moe model");
    for l in &mm.layers {
        assert_eq!((l.ffn.n_expert, l.ffn.n_used), (4, 2));
        let ne = |id| m.weight(id).expect("weight of this model").ne;
        assert_eq!(ne(l.ffn.gate_inp)[..2], [128, 4]);
        assert_eq!(ne(l.ffn.gate_exps)[..3], [128, 96, 4]);
        assert_eq!(ne(l.ffn.up_exps)[..3], [128, 96, 4]);
        assert_eq!(ne(l.ffn.down_exps)[..3], [96, 128, 4]);
        assert!(l.attn.q_norm.is_some() && l.attn.k_norm.is_some());
    }
}

/// Stacked experts are never copied as they are when the model copies its matrices (only
/// repacked for `mul_mat_id`'s panel kernels, which f16 has none of): a plain copy would
/// only double their memory.
#[test]
fn stacked_experts_stay_in_the_map() {
    use ggrs_llama::ModelOptions;
    let path = common::reference_dir().join("tiny/tiny-moe-f16.gguf");
    let opts = ModelOptions {
        pack_weights: true,
        copy_weights: true,
        huge_pages: false,
    };
    let m = Model::load_with(path, opts).expect("load tiny moe");
    // Every 2-D matrix is copied (on x86-64), none of the 3-D expert stacks.
    let two_d: usize = m
        .weights()
        .iter()
        .filter(|w| w.ne[2] == 1 && !w.name.contains("norm") && !w.name.contains("gate_inp"))
        .map(|w| w.size())
        .sum();
    if cfg!(target_arch = "x86_64") {
        assert!(m.packed_bytes() > 0, "no matrix was copied");
    }
    assert!(
        m.packed_bytes() <= two_d + 64 * m.weights().len(),
        "{} bytes copied, the 2-D matrices hold {two_d}",
        m.packed_bytes()
    );
}

#[test]
fn tiny_moe_matches_llama_cpp() {
    let model = load();
    let refs = common::read_jsonl(&common::reference_dir().join("tiny/tiny-moe-f16.public.jsonl"));
    common::assert_matches_reference("tiny-moe", &model, &refs, 0.01);
}

/// Every prompt's logits from one batch equal those of the same tokens evaluated one per
/// step, up to the different summation orders of the projections' kernels for one and for
/// several columns (the dense tiny Qwen3 differs by up to 7·10⁻³ between the two, over the
/// whole vocabulary): a token routed with another token's experts or weights would be off
/// by far more. The feed-forward alone is checked bit for bit below.
#[test]
fn a_batched_prompt_equals_token_by_token() {
    let model = load();
    let refs = common::read_jsonl(&common::reference_dir().join("tiny/tiny-moe-f16.public.jsonl"));
    let nv = model.hparams.n_vocab;
    for nth in [1, 2] {
        let params = SessionParams {
            n_ctx: 256,
            n_batch: 256,
            n_threads: nth,
            logits_all: true,
            ..Default::default()
        };
        let mut s = Session::new(model.clone(), params).expect("session");
        let mut max_diff = 0f32;
        for r in refs.iter().filter(|r| r.tokens.len() >= 4) {
            s.clear();
            s.eval(&r.tokens, true).expect("prompt in one batch");
            let batched = s.all_logits().to_vec();
            s.clear();
            for (i, &t) in r.tokens.iter().enumerate() {
                s.eval(&[t], false).expect("one token");
                let one = s.logits();
                let row = &batched[i * nv..(i + 1) * nv];
                for (a, b) in row.iter().zip(one) {
                    max_diff = max_diff.max((a - b).abs());
                }
                assert_eq!(
                    common::argmax(row),
                    common::argmax(one),
                    "prompt {:?}, position {i}",
                    r.prompt
                );
            }
        }
        eprintln!("tiny-moe, {nth} threads: batched vs one by one, max diff {max_diff:e}");
        assert!(max_diff < 0.02, "max diff {max_diff}");
    }
}

fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
        })
        .collect()
}

/// Layer 0's mixture-of-experts feed-forward on the `n` columns of `h`, in a graph of its
/// own.
fn run_ffn(model: &Model, ffn: &MoeFfn, h: &[f32], n: usize, threads: usize) -> Vec<f32> {
    let e = model.hparams.n_embd;
    let mut ctx = Context::with_mem_size(16 << 20);
    let w = model.import_weights(&mut ctx).expect("import");
    let x = ctx.new_tensor_2d(DType::F32, e, n).unwrap();
    ctx.set_f32(x, h).unwrap();
    let y = ffn.build(&mut ctx, &model.hparams, &w, x).expect("build");
    assert_eq!(ctx.shape(y).unwrap(), [e, n, 1, 1]);
    let mut g = Graph::new();
    g.build_forward_expand(&ctx, y).unwrap();
    Executor::new(threads).compute(&mut ctx, &g).unwrap();
    ctx.to_f32_vec(y).unwrap()
}

/// A weight's values as f64 (F32 or F16).
fn weight_f64(model: &Model, id: WeightId) -> Vec<f64> {
    let r = model.weight(id).expect("weight of this model");
    let info = model.gguf().tensor(&r.name).expect("in the file");
    let bytes = model.gguf().tensor_data(info);
    match r.dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect(),
        t => panic!("{}: unexpected type {t:?}", r.name),
    }
}

/// The feed-forward of one column `h` in f64, from the definition: softmax router, the top
/// `n_used` experts with weights renormalised to 1, SwiGLU experts. Also returns the chosen
/// experts and the gap between the last chosen and the first left-out router logit.
fn ffn_f64(model: &Model, ffn: &MoeFfn, h: &[f32]) -> (Vec<f64>, Vec<usize>, f64) {
    let e = model.hparams.n_embd;
    let (nx, nu) = (ffn.n_expert, ffn.n_used);
    let router = weight_f64(model, ffn.gate_inp);
    let (gate, up, down) = (
        weight_f64(model, ffn.gate_exps),
        weight_f64(model, ffn.up_exps),
        weight_f64(model, ffn.down_exps),
    );
    let f = gate.len() / (e * nx);
    let logits: Vec<f64> = (0..nx)
        .map(|x| (0..e).map(|j| router[j + e * x] * h[j] as f64).sum())
        .collect();
    let mut order: Vec<usize> = (0..nx).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let gap = logits[order[nu - 1]] - logits[order[nu]];
    let max = logits[order[0]];
    let p: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let chosen = order[..nu].to_vec();
    let total: f64 = chosen.iter().map(|&x| p[x]).sum();
    let mut out = vec![0f64; e];
    for &x in &chosen {
        let act: Vec<f64> = (0..f)
            .map(|i| {
                let dot = |w: &[f64]| {
                    (0..e)
                        .map(|j| w[j + e * (i + f * x)] * h[j] as f64)
                        .sum::<f64>()
                };
                let g = dot(&gate);
                g / (1.0 + (-g).exp()) * dot(&up)
            })
            .collect();
        for (k, o) in out.iter_mut().enumerate() {
            let y: f64 = (0..f).map(|i| down[i + f * (k + e * x)] * act[i]).sum();
            *o += p[x] / total * y;
        }
    }
    (out, chosen, gap)
}

/// The feed-forward of a batch of columns gives each column what it gives in a batch of two
/// with another partner, bit for bit, on 1 and 2 threads (no column is routed or weighted
/// with another's values); alone (one column, where the f32 router takes ggml's one-column
/// dot product instead of tinyBLAS's, as llama.cpp does) within 10⁻⁵ of it; and it agrees
/// with an f64 evaluation of the definition (to the f16 rounding of the activations the f16
/// experts multiply).
#[test]
fn moe_ffn_of_a_batch_is_per_column_and_the_definition() {
    let model = load();
    let e = model.hparams.n_embd;
    let mm = model
        .arch_weights::<Qwen3MoeModel>()
        .expect("a qwen3moe model");
    let n = 9;
    for (il, layer) in mm.layers.iter().enumerate() {
        let ffn = &layer.ffn;
        let h = values(11 + il as u64, e * n);
        let mut pairs = std::collections::BTreeSet::new();
        let mut max_rel = 0f64;
        for threads in [1, 2] {
            let batched = run_ffn(&model, ffn, &h, n, threads);
            for t in 0..n {
                let col = &h[t * e..(t + 1) * e];
                let got = &batched[t * e..(t + 1) * e];
                let partner = (t + 4) % n;
                let two = [col, &h[partner * e..(partner + 1) * e]].concat();
                let pair = run_ffn(&model, ffn, &two, 2, threads);
                assert!(
                    got.iter()
                        .zip(&pair[..e])
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "layer {il}, column {t}, {threads} threads: the batch of {n} differs from a \
                     batch of two"
                );
                let alone = run_ffn(&model, ffn, col, 1, threads);
                let scale = got.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = got
                    .iter()
                    .zip(&alone)
                    .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                assert!(
                    d <= 1e-5 * scale,
                    "layer {il}, column {t}: alone differs by {d} (max |out| {scale})"
                );
                let (want, chosen, gap) = ffn_f64(&model, ffn, col);
                let mut set = chosen;
                set.sort();
                pairs.insert(set);
                if gap < 1e-3 {
                    continue; // a near-tie: f32 routing may choose either way
                }
                let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
                for (a, b) in got.iter().zip(&want) {
                    max_rel = max_rel.max((*a as f64 - b).abs() / scale);
                }
            }
        }
        eprintln!("layer {il}: expert pairs {pairs:?}, max diff / max |out| {max_rel:e}");
        assert!(
            pairs.len() >= 3,
            "the columns should use several expert pairs: {pairs:?}"
        );
        assert!(max_rel < 5e-3, "layer {il}: {max_rel}");
    }
}

/// The tiny Qwen3-MoE quantized to q4_0: its stacked experts are repacked at load for
/// `mul_mat_id`'s panel kernels (where this CPU runs them), and the logits of a batched
/// prompt and of single decoding steps, on 1 and 2 threads, are the bits of the same model
/// read from the file's map.
#[test]
fn q4_0_experts_packed_give_the_mapped_bits() {
    use ggrs_core::gguf::GgufFile;
    use ggrs_core::kernels::PackedWeight;
    use ggrs_core::quantize::QuantizeOptions;
    use ggrs_llama::quantize::{quantize, FileType, RecipeOptions};
    use ggrs_llama::ModelOptions;

    let dir = std::env::temp_dir().join(format!("ggrs-tiny-moe-q4-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let q4 = dir.join("tiny-moe-q4_0.gguf");
    let input = GgufFile::open(common::reference_dir().join("tiny/tiny-moe-f16.gguf"))
        .expect("open tiny moe");
    let recipe = RecipeOptions::new(FileType::from_name("q4_0").expect("q4_0"));
    let engine = QuantizeOptions {
        allow_requantize: false,
        n_threads: 2,
    };
    quantize(&input, &q4, &recipe, &engine, |_| {}).expect("quantize");
    drop(input);
    let load = |pack_weights: bool| {
        let opts = ModelOptions {
            pack_weights,
            copy_weights: false,
            huge_pages: false,
        };
        Arc::new(Model::load_with(&q4, opts).expect("load q4_0 tiny moe"))
    };
    let (packed, mapped) = (load(true), load(false));
    assert_eq!(mapped.packed_bytes(), 0);
    // Packed: exactly the weights the panel kernels read, the stacks among them (matrix by
    // matrix), each as packing it alone gives (tied weights once).
    let mut seen = std::collections::HashSet::new();
    let (mut all, mut stacks) = (0, 0);
    for w in packed.weights() {
        let info = packed.gguf().tensor(&w.name).expect("in the file");
        let data = packed.gguf().tensor_data(info);
        if !PackedWeight::repacks(w.dtype, w.ne) || !seen.insert(data.as_ptr()) {
            continue;
        }
        let bytes = PackedWeight::pack(w.dtype, w.ne, data).map_or(0, |p| p.bytes());
        all += bytes;
        if w.ne[2] > 1 {
            stacks += bytes;
        }
    }
    assert_eq!(packed.packed_bytes(), all);
    if PackedWeight::repacks(DType::Q4_0, [128, 96, 4, 1]) {
        assert!(stacks > 0, "no expert stack was repacked");
    }
    let prompt = packed
        .tokenizer()
        .encode("The quick brown fox jumps over", true, true)
        .expect("tokenize");
    for threads in [1, 2] {
        let run = |model: &Arc<Model>| {
            let params = SessionParams {
                n_ctx: 64,
                n_batch: 64,
                n_threads: threads,
                logits_all: true,
                ..Default::default()
            };
            let mut s = Session::new(model.clone(), params).expect("session");
            s.eval(&prompt, true).expect("prompt in one batch");
            let mut out = s.all_logits().to_vec();
            for step in 0..3 {
                let next = common::argmax(s.logits());
                s.eval(&[next], false)
                    .unwrap_or_else(|e| panic!("step {step}: {e}"));
                out.extend_from_slice(s.logits());
            }
            out
        };
        let (a, b) = (run(&packed), run(&mapped));
        assert_eq!(a.len(), b.len());
        let differ = a
            .iter()
            .zip(&b)
            .filter(|(x, y)| x.to_bits() != y.to_bits())
            .count();
        assert_eq!(differ, 0, "{threads} threads: {differ} logits differ");
    }
    drop((packed, mapped));
    let _ = std::fs::remove_dir_all(&dir);
}
