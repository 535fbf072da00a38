//! The 2026 families on their tiny random-weight models (`shared/reference/tiny/`, see
//! `README-2026.md` there) against llama.cpp's outputs: prompt top-10 logits within 0.01 (the
//! batch/single-token noise of llama.cpp's own kernels; in practice far closer), every
//! argmax and 16 greedy tokens equal, on 1 and 2 threads.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use ggrs_llama::arch::decoder::{Decoder, DecoderOptions, SwiGlu};
use ggrs_llama::Model;

fn tiny(name: &str) -> PathBuf {
    common::reference_dir().join(format!("tiny/{name}.gguf"))
}

/// Loads `tiny-<name>-f16.gguf` and compares it with its `.public.jsonl`.
fn check(name: &str, arch: &str) -> Arc<Model> {
    let _one = common::serial();
    let path = tiny(&format!("tiny-{name}-f16"));
    let model = Arc::new(Model::load(&path).expect("load"));
    assert_eq!(model.arch_name(), arch);
    let refs = common::read_jsonl(&path.with_extension("public.jsonl"));
    common::assert_matches_reference(name, &model, &refs, 0.01);
    model
}

fn options(m: &Model) -> DecoderOptions {
    m.arch_weights::<Decoder<SwiGlu>>()
        .expect("a LLaMA-layout decoder")
        .options
}

#[test]
fn smollm3_matches_llama_cpp() {
    let m = check("smollm3", "smollm3");
    // Layer 3 of 4 has no rotary.
    assert_eq!(options(&m).nope_period, Some(4));
}

#[test]
fn granite_matches_llama_cpp() {
    let m = check("granite", "granite");
    let o = options(&m);
    assert_eq!(
        (o.embd_scale, o.kq_scale, o.logit_scale, o.nope_period),
        (Some(12.0), Some(0.0625), Some(8.0), None)
    );
    assert!((o.residual_scale.expect("residual scale") - 0.22).abs() < 1e-6);
}

#[test]
fn gemma3_matches_llama_cpp() {
    use ggrs_llama::arch::gemma3::Gemma3Model;
    let m = check("gemma3", "gemma3");
    let c = m.arch_weights::<Gemma3Model>().expect("gemma3").consts;
    // Layers 0, 1, 3 local (window 4, base 1e4), layer 2 global (base 1e6, linear ÷ 8).
    let local: Vec<bool> = (0..4).map(|il| c.is_local(il)).collect();
    assert_eq!(local, [true, true, false, true]);
    assert_eq!((c.window, c.freq_base_swa), (4, 10000.0));
    assert_eq!(m.hparams.rope_freq_scale, 0.125);
}

/// Every prompt's logits to the printed digits (5 decimals: half a unit of the last is
/// 5e-6), on 1 and 2 threads (`compare` runs both).
fn to_the_printed_digits(name: &str, m: &Arc<Model>) {
    let refs =
        common::read_jsonl(&tiny(&format!("tiny-{name}-f16")).with_extension("public.jsonl"));
    for r in &refs {
        let rep = common::compare(m, std::slice::from_ref(r), 0.01, 2, 16);
        eprintln!("{name} {:?}: max |Δ| {:e}", r.prompt, rep.max_abs_diff);
        assert!(rep.max_abs_diff <= 4.8e-6, "{:?}: {rep:?}", r.prompt);
    }
}

#[test]
fn gemma4_matches_llama_cpp() {
    use ggrs_llama::arch::gemma4::{Gemma4LayerShape, Gemma4Model};
    use ggrs_llama::hparams::LayerCache;
    let m = check("gemma4", "gemma4");
    let g = m.arch_weights::<Gemma4Model>().expect("gemma4");
    let c = &g.consts;
    // Local (head 16, 2 KV heads) and global (head 32, 1 KV head, K = V) layers in turn;
    // layers 2 and 3 read the caches of layers 0 and 1.
    let shape = |local, head_dim, n_head_kv, kv_source| Gemma4LayerShape {
        local,
        head_dim,
        n_head_kv,
        kv_source,
    };
    assert_eq!(
        c.layers,
        [
            shape(true, 16, 2, 0),
            shape(false, 32, 1, 1),
            shape(true, 16, 2, 0),
            shape(false, 32, 1, 1)
        ]
    );
    assert!(g.layers[1].wv.is_none() && g.layers[0].wv.is_some());
    assert_eq!((c.window, c.n_rot_swa, c.n_ple), (4, 16, 4));
    assert_eq!(c.final_softcap, Some(30.0));
    // The cache holds two layers of 32-wide keys and values: 2 · 2 · 32 f16 values per cell
    // (plus the tensors' metadata), not four layers' worth.
    let kv = &m.hparams.kv_layers;
    assert!(matches!(kv[2], LayerCache::Shares(0)) && matches!(kv[3], LayerCache::Shares(1)));
    let bytes = ggrs_llama::kv_cache::KvCache::bytes(&m.hparams, 256, ggrs_core::DType::F16);
    let data = 2 * 2 * 32 * 2 * 256;
    assert!((data..data + 4096).contains(&bytes), "{bytes}");
    to_the_printed_digits("gemma4", &m);
}

#[test]
fn mistral3_matches_llama_cpp() {
    let m = check("mistral3", "mistral3");
    // YaRN ×16 from an original context of 16 with yarn_log_multiplier 1, and the attention
    // temperature 0.1: the prompts cross the original context, where the factor leaves 1.
    let t = options(&m).attn_temp.expect("attention temperature");
    assert_eq!((t.scale, t.floor, t.offset), (0.1, 16.0, 0.0));
    assert_eq!(t.factor(15), 1.0);
    assert!((t.factor(16) - (1.0 + 0.1 * 2f32.ln())).abs() < 1e-6);
    assert_eq!(m.hparams.rope_freq_scale, 1.0 / 16.0);
}

#[test]
fn gpt_oss_matches_llama_cpp() {
    use ggrs_llama::arch::gpt_oss::GptOssModel;
    let m = check("gpt-oss", "gpt-oss");
    let g = m.arch_weights::<GptOssModel>().expect("gpt-oss");
    // Window 8 on the even layers (llama.cpp's default pattern 2), the odd ones global;
    // YaRN ×32 from an original context of 64; top-2 of 8 experts.
    assert_eq!(g.consts.local, [true, false, true, false]);
    assert_eq!((g.consts.window, g.consts.freq_base_swa), (8, 150000.0));
    assert_eq!(m.hparams.rope_freq_scale, 1.0 / 32.0);
    assert_eq!(
        (g.layers[0].moe.base.n_used, g.layers[0].moe.base.n_expert),
        (2, 8)
    );
    to_the_printed_digits("gpt-oss", &m);
    let refs = common::read_jsonl(&tiny("tiny-gpt-oss-f16").with_extension("public.jsonl"));
    // An F32 cache attends through soft_max with the sinks instead of flash attention over
    // an F16 cache: not llama.cpp's arithmetic (keys and values are not rounded to f16,
    // which alone moves the logits of position 0 by 4.9e-3), but the same model: logits
    // within 0.1 and the same argmax wherever the reference's top two are 0.1 apart.
    let params = ggrs_llama::SessionParams {
        kv_type: ggrs_core::DType::F32,
        ..common::reference_session(2)
    };
    let mut s = ggrs_llama::Session::new(m.clone(), params).expect("session");
    let nv = m.hparams.n_vocab;
    let (mut worst, mut argmaxes) = (0f32, 0);
    for r in &refs {
        s.clear();
        s.eval(&r.tokens, true).expect("prompt");
        let all = s.all_logits();
        for (i, top) in r.prompt_topk.iter().enumerate() {
            let row = &all[i * nv..(i + 1) * nv];
            for &(id, l) in top {
                worst = worst.max((row[id as usize] - l).abs());
            }
            if top[0].1 - top[1].1 > 0.1 {
                let best = (0..nv).max_by(|&a, &b| row[a].total_cmp(&row[b]));
                assert_eq!(best, Some(top[0].0 as usize), "{:?} at {i}", r.prompt);
                argmaxes += 1;
            }
        }
    }
    eprintln!("gpt-oss, F32 cache (soft_max sinks): max |Δ| {worst:e}, {argmaxes} argmaxes equal");
    assert!(worst < 0.1 && argmaxes > 50, "{worst}, {argmaxes}");
}

/// The sliding-window layers of a session keep only their window plus a step's tokens (256
/// cells here, of a 1024-cell context): on a 300-token prompt evaluated in steps of 32 and
/// 12 decoding steps after it, every logit equals the one of a session that keeps every
/// cell (`swa_full`), bit for bit, also after the window cells filled up and the live ones
/// moved to the front; and the cache takes less memory, its sliding-window layers' part
/// fixed whatever the context.
#[test]
fn sliding_window_layers_keep_only_their_window() {
    use ggrs_core::DType;
    use ggrs_llama::kv_cache::KvCache;
    use ggrs_llama::{Session, SessionParams};
    let _one = common::serial();
    for name in ["gemma3", "gpt-oss", "gemma4"] {
        let m = Arc::new(Model::load(tiny(&format!("tiny-{name}-f16"))).expect("load"));
        let params = |swa_full| SessionParams {
            n_ctx: 1024,
            n_batch: 32,
            n_threads: 2,
            logits_all: true,
            swa_full,
            ..Default::default()
        };
        let mut full = Session::new(m.clone(), params(true)).expect("session");
        let mut trim = Session::new(m.clone(), params(false)).expect("session");
        assert_eq!(full.kv_cache().window_size(), None);
        assert_eq!(trim.kv_cache().window_size(), Some(256));
        let hp = &m.hparams;
        let bytes = |n_ctx, cells| KvCache::bytes_with_window_cells(hp, n_ctx, DType::F16, cells);
        let (b_full, b_trim) = (bytes(1024, None), bytes(1024, Some(256)));
        assert!(b_trim < b_full, "{name}: {b_trim} vs {b_full}");
        // Doubling the context adds only the global layers' cells (every layer with a cache
        // of its own is as wide here).
        use ggrs_llama::hparams::LayerCache;
        let own = |global_only: bool| {
            let own = hp.kv_layers.iter().filter(|l| match l {
                LayerCache::Own { window, .. } => !global_only || window.is_none(),
                LayerCache::Shares(_) => false,
            });
            own.count()
        };
        let growth_trim = bytes(2048, Some(256)) - b_trim;
        let growth_full = bytes(2048, None) - b_full;
        assert_eq!(growth_trim * own(false), growth_full * own(true), "{name}");
        assert!(trim.arena_bytes() < full.arena_bytes());
        eprintln!(
            "{name}: KV cache {b_full} → {b_trim} bytes, arena {} → {}",
            full.arena_bytes(),
            trim.arena_bytes()
        );

        let refs =
            common::read_jsonl(&tiny(&format!("tiny-{name}-f16")).with_extension("public.jsonl"));
        let mut toks = vec![refs[0].tokens[0]];
        for r in refs.iter().cycle() {
            if toks.len() >= 300 {
                break;
            }
            toks.extend_from_slice(&r.tokens[1..]);
        }
        toks.truncate(300);
        let nv = hp.n_vocab;
        full.eval(&toks, true).expect("prompt");
        trim.eval(&toks, true).expect("prompt");
        let (a, b) = (full.all_logits().to_vec(), trim.all_logits().to_vec());
        // Positions 0..256 sit in the same cells in both: the same bits.
        assert!(
            a[..256 * nv] == b[..256 * nv],
            "{name}: before the window cells wrap"
        );
        let mut worst = 0f32;
        // …and after them: the window cells wrapped round at position 256.
        for (x, y) in a.iter().zip(&b) {
            worst = worst.max((x - y).abs());
        }
        for step in 0..12 {
            let (ta, tb) = (common::argmax(full.logits()), common::argmax(trim.logits()));
            assert_eq!(ta, tb, "{name}: greedy step {step}");
            for (x, y) in full.logits().iter().zip(trim.logits()) {
                worst = worst.max((x - y).abs());
            }
            full.eval(&[ta], false).expect("decode");
            trim.eval(&[tb], false).expect("decode");
        }
        eprintln!("{name}: max |Δ logit| trimmed vs full cache: {worst:e}");
        assert_eq!(worst, 0.0, "{name}: the same bits");
    }
}
