//! `ggrs imatrix`'s collector and file formats: on the tiny LLaMA, the sums of squares of
//! layer 0's attention input (which depends on the tokens only: `rms_norm(embedding) ·
//! attn_norm`) against a naive computation, the counts, the entries of every layer; on the
//! tiny MoE, the per-expert counts; GGUF and legacy round trips; and llama-imatrix's own
//! matrix for Qwen2.5-Coder-0.5B read from both of its formats.

use crate::common;

use std::sync::Arc;

use ggrs_core::gguf::GgufFile;
use ggrs_llama::imatrix::{collect, CollectOptions, Imatrix, QuantWeights};
use ggrs_llama::model::Model;
use ggrs_llama::session::{Session, SessionParams};

fn tiny(name: &str) -> Arc<Model> {
    let path = common::reference_dir().join("tiny").join(name);
    Arc::new(Model::load(&path).expect("load the tiny model"))
}

fn run(model: &Arc<Model>, n_ctx: usize, n_tokens: usize) -> (Vec<u32>, Imatrix) {
    let params = SessionParams {
        n_ctx,
        n_batch: n_ctx,
        n_threads: 2,
        logits_all: true,
        ..Default::default()
    };
    let mut session = Session::new(model.clone(), params).expect("session");
    let nv = model.hparams.n_vocab as u32;
    let tokens: Vec<u32> = (0..n_tokens as u32).map(|i| (i * 7919 + 13) % nv).collect();
    let opts = CollectOptions {
        n_ctx,
        n_chunks: None,
        process_output: false,
        dataset: "synthetic".into(),
    };
    let mut seen = 0;
    let (m, ppl) = collect(&mut session, &tokens, &opts, |p, so_far| {
        seen += 1;
        assert_eq!(so_far().chunk_count as usize, p.chunks);
    })
    .expect("collect");
    assert_eq!(seen, n_tokens / n_ctx);
    assert!(ppl.ppl.is_finite() && ppl.ppl > 1.0, "{ppl:?}");
    (tokens, m)
}

/// f32 values of a tensor of the model file (F32 or F16).
fn floats(file: &GgufFile, name: &str) -> Vec<f32> {
    let t = file.tensor(name).expect("tensor");
    let d = file.tensor_data(t);
    match t.dtype {
        ggrs_core::DType::F32 => d
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        ggrs_core::DType::F16 => d
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        t => panic!("unexpected type {t}"),
    }
}

#[test]
fn tiny_llama_layer0_sums_match_a_naive_computation() {
    let model = tiny("tiny-llama-f16.gguf");
    let (n_ctx, n_tokens) = (32, 96);
    let (tokens, m) = run(&model, n_ctx, n_tokens);
    let hp = &model.hparams;
    // Every layer's seven matrices, one count each: every token of every chunk.
    assert_eq!(m.entries.len(), 7 * hp.n_layer, "{:?}", m.entries.keys());
    for (name, e) in &m.entries {
        assert!(name.starts_with("blk."), "{name}");
        assert_eq!(e.counts, vec![n_tokens as i64], "{name}");
        assert!(e.sums.iter().all(|v| v.is_finite() && *v >= 0.0), "{name}");
    }
    assert_eq!((m.chunk_count, m.chunk_size), (3, n_ctx as u32));

    // Naive: layer 0's attention input from the embeddings.
    let path = common::reference_dir().join("tiny/tiny-llama-f16.gguf");
    let file = GgufFile::open(&path).expect("open");
    let e = hp.n_embd;
    let embd = floats(&file, "token_embd.weight");
    let norm = floats(&file, "blk.0.attn_norm.weight");
    let mut want = vec![0f64; e];
    // Each chunk starts with BOS where the model adds one (llama-imatrix's protocol).
    let bos = model
        .tokenizer()
        .bos()
        .filter(|_| model.tokenizer().vocab().add_bos());
    let mut fed = tokens.clone();
    for c in fed.chunks_mut(n_ctx) {
        if let Some(b) = bos {
            c[0] = b;
        }
    }
    for &t in &fed {
        let x = &embd[t as usize * e..(t as usize + 1) * e];
        let ms = x.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / e as f64;
        let scale = 1.0 / (ms + hp.rms_eps as f64).sqrt();
        for j in 0..e {
            let h = x[j] as f64 * scale * norm[j] as f64;
            want[j] += h * h;
        }
    }
    for w in ["attn_q", "attn_k", "attn_v"] {
        let got = &m.entries[&format!("blk.0.{w}.weight")].sums;
        assert_eq!(got.len(), e);
        for j in 0..e {
            let rel = (got[j] as f64 - want[j]).abs() / want[j].max(1e-12);
            assert!(rel < 1e-4, "{w}[{j}]: {} vs naive {}", got[j], want[j]);
        }
    }
}

#[test]
fn tiny_moe_counts_each_expert() {
    let model = tiny("tiny-moe-f16.gguf");
    let (n_ctx, n_tokens) = (32, 64);
    let (_, m) = run(&model, n_ctx, n_tokens);
    let file =
        GgufFile::open(common::reference_dir().join("tiny/tiny-moe-f16.gguf")).expect("open");
    let key = |k: &str| file.get(k).and_then(|v| v.as_u64()).expect(k) as usize;
    let (n_expert, n_used) = (
        key("qwen3moe.expert_count"),
        key("qwen3moe.expert_used_count"),
    );
    let exps: Vec<_> = m
        .entries
        .iter()
        .filter(|(n, _)| n.contains("_exps"))
        .collect();
    assert!(
        !exps.is_empty(),
        "no expert entries: {:?}",
        m.entries.keys()
    );
    for (name, e) in exps {
        assert_eq!(e.counts.len(), n_expert, "{name}");
        // Each token goes to n_used experts.
        let total: i64 = e.counts.iter().sum();
        assert_eq!(total, (n_tokens * n_used) as i64, "{name}");
        assert_eq!(e.sums.len() % n_expert, 0);
    }
}

#[test]
fn files_round_trip() {
    let model = tiny("tiny-llama-f16.gguf");
    let (_, m) = run(&model, 32, 64);
    let dir = std::env::temp_dir().join(format!("ggrs-imatrix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let gguf = dir.join("m.gguf");
    m.save_gguf(&gguf).expect("save gguf");
    let back = Imatrix::load(&gguf).expect("load gguf");
    assert_eq!(back, m);
    let dat = dir.join("m.dat");
    m.save_dat(&dat).expect("save dat");
    let legacy = Imatrix::load(&dat).expect("load dat");
    assert!(legacy.is_legacy);
    assert_eq!(legacy.datasets, m.datasets);
    let (a, b) = (m.quant_weights(), legacy.quant_weights());
    assert_eq!(a.len(), b.len());
    for (name, w) in &a {
        for (x, y) in w.iter().zip(&b[name]) {
            assert!(
                (x - y).abs() <= 1e-5 * x.abs().max(1e-6),
                "{name}: {x} vs {y}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn llama_imatrix_files_read_alike() {
    let dir = common::reference_dir().join("qwen05b");
    let g = Imatrix::load(dir.join("imatrix-gpl3.gguf")).expect("gguf");
    let d = Imatrix::load(dir.join("imatrix-gpl3.dat")).expect("dat");
    assert!(!g.is_legacy && g.has_metadata && d.is_legacy);
    assert_eq!(
        (g.entries.len(), g.chunk_count, g.chunk_size),
        (168, 14, 512)
    );
    assert_eq!((d.entries.len(), d.chunk_count), (168, 14));
    assert_eq!(g.datasets, ["/usr/share/common-licenses/GPL-3"]);
    assert_eq!(d.datasets, g.datasets);
    let e = &g.entries["blk.0.attn_q.weight"];
    assert_eq!((e.sums.len(), e.counts.as_slice()), (896, &[7168i64][..]));
    let (wg, wd) = (g.quant_weights(), d.quant_weights());
    for (name, w) in &wg {
        for (x, y) in w.iter().zip(&wd[name]) {
            assert!(
                (x - y).abs() <= 1e-5 * x.abs().max(1e-6),
                "{name}: {x} vs {y}"
            );
        }
    }
    // Written as .dat, the GGUF matrix is llama-imatrix's own conversion, byte for byte.
    let out = std::env::temp_dir().join(format!("ggrs-imatrix-dat-{}.dat", std::process::id()));
    g.save_dat(&out).expect("save dat");
    let same = std::fs::read(&out).expect("read")
        == std::fs::read(dir.join("imatrix-gpl3.dat")).expect("read");
    let _ = std::fs::remove_file(&out);
    assert!(same, "the .dat written differs from llama-imatrix's");
    // --include-weights / --exclude-weights select by substring.
    let path = dir.join("imatrix-gpl3.gguf");
    let inc = QuantWeights::load(&path, &["ffn_down".into()], &[]).expect("load");
    assert_eq!(inc.weights.len(), 24);
    let exc = QuantWeights::load(&path, &[], &["blk.1".into()]).expect("load");
    assert_eq!(exc.weights.len(), 168 - 7 * 11); // blk.1 and blk.10 … blk.19
    assert_eq!(exc.chunk_count, 14);
}
