//! The 2026 families on their tiny random-weight models (`shared/reference/tiny/`, see
//! `README-2026.md` there) against llama.cpp's outputs: prompt top-10 logits within 0.01 (the
//! batch/single-token noise of llama.cpp's own kernels; in practice far closer), every
//! argmax and 16 greedy tokens equal, on 1 and 2 threads.

mod common;

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
    // Every prompt to the printed digits (5 decimals: half a unit of the last is 5e-6).
    let refs = common::read_jsonl(&tiny("tiny-gpt-oss-f16").with_extension("public.jsonl"));
    for r in &refs {
        let rep = common::compare(&m, std::slice::from_ref(r), 0.01, 2, 16);
        eprintln!("gpt-oss {:?}: max |Δ| {:e}", r.prompt, rep.max_abs_diff);
        assert!(rep.max_abs_diff <= 4.8e-6, "{:?}: {rep:?}", r.prompt);
    }
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
