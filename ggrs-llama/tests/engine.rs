//! The serving engine: each request's tokens and log-probabilities are the bits a lone
//! session gives (`ggrs run`), alone or beside others, on 1 and 2 threads; prompt cache,
//! cancellation and admission.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ggrs_llama::engine::{Completion, Engine, EngineParams, Event, Request, SubmitError};
use ggrs_llama::{GenerateParams, Model, SamplingParams, Session, SessionParams, StopReason};

/// Sampled (not greedy) generation, so the sampler's state per request is exercised too.
fn sampled(max_tokens: usize, seed: u64) -> GenerateParams {
    GenerateParams {
        max_tokens,
        sampling: SamplingParams {
            temperature: 0.9,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.02,
            repeat_penalty: 1.1,
            seed,
            ..Default::default()
        },
        top_logprobs: 3,
        ..Default::default()
    }
}

/// Tokens, log-probabilities and text of one generation.
type LoneRun = (Vec<u32>, Vec<(f32, Vec<(u32, f32)>)>, String);

/// What a lone session (as `ggrs run`) gives for `prompt`: tokens, log-probabilities.
fn lone(
    model: &Arc<Model>,
    n_ctx: usize,
    nth: usize,
    prompt: &[u32],
    p: &GenerateParams,
) -> LoneRun {
    let mut s = Session::new(
        model.clone(),
        SessionParams {
            n_ctx,
            n_threads: nth,
            ..Default::default()
        },
    )
    .expect("session");
    let g = s
        .generate_tokens(prompt, p, |_| std::ops::ControlFlow::Continue(()))
        .expect("generate");
    (g.tokens, g.logprobs, g.text)
}

/// Bit-level comparison of log-probabilities.
fn bits(lp: &[(f32, Vec<(u32, f32)>)]) -> Vec<(u32, Vec<(u32, u32)>)> {
    lp.iter()
        .map(|(l, top)| {
            (
                l.to_bits(),
                top.iter().map(|&(t, v)| (t, v.to_bits())).collect(),
            )
        })
        .collect()
}

/// Runs every request at once on `engine`, returns the completions in order and the text
/// each stream delivered (tokens' text plus the tail).
fn run_all(engine: &Engine, reqs: &[Request]) -> Vec<(Completion, String)> {
    let streams: Vec<_> = reqs
        .iter()
        .map(|r| engine.handle().submit_stream(r.clone()).expect("submit"))
        .collect();
    streams
        .into_iter()
        .map(|s| {
            let mut text = String::new();
            for e in s {
                match e {
                    Event::Token(t) => text.push_str(&t.text),
                    Event::Done(c) => {
                        text.push_str(&c.tail);
                        return (c, text);
                    }
                    Event::Error(e) => panic!("request failed: {e}"),
                }
            }
            panic!("stream ended without Done")
        })
        .collect()
}

/// For `model`: each request's result through the engine (8 at once on 4 slots, then one
/// at a time) equals the lone session's, bit for bit, on 1 and 2 threads. Unless
/// `expect_batched` (weights whose products depend on the column count, where a reused
/// prefix changes the bits), the one-at-a-time requests do not reuse the slots' caches.
fn check_invariance(model: &Arc<Model>, prompts: &[&str], max_tokens: usize, expect_batched: bool) {
    let reqs: Vec<Request> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Request::new(
                model.encode_prompt(p).expect("encode"),
                sampled(max_tokens, 1000 + i as u64),
            )
        })
        .collect();
    for nth in [1, 2] {
        let engine = Engine::start(
            model.clone(),
            EngineParams {
                n_slots: 4,
                n_ctx: 4 * 256,
                n_threads: nth,
                ..Default::default()
            },
        )
        .expect("engine");
        let n_ctx = engine.handle().n_ctx_slot();
        let want: Vec<_> = reqs
            .iter()
            .map(|r| lone(model, n_ctx, nth, &r.prompt, &r.params))
            .collect();
        let together = run_all(&engine, &reqs);
        // Again one at a time: the slots now hold the same prompts, reused where that is
        // exact (see `Request::cache_prompt`).
        let one_by_one: Vec<_> = reqs
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.cache_prompt = expect_batched;
                run_all(&engine, std::slice::from_ref(&r)).remove(0)
            })
            .collect();
        for (i, w) in want.iter().enumerate() {
            for (how, (c, streamed)) in [("together", &together[i]), ("alone", &one_by_one[i])] {
                assert_eq!(c.tokens, w.0, "request {i} {how}, {nth} threads: tokens");
                assert_eq!(
                    bits(&c.logprobs),
                    bits(&w.1),
                    "request {i} {how}, {nth} threads: log-probabilities"
                );
                assert_eq!(c.text, w.2, "request {i} {how}: text");
                assert_eq!(streamed, &c.text, "request {i} {how}: streamed text");
            }
        }
        let m = engine.handle().metrics();
        assert_eq!(m.requests_done as usize, 2 * reqs.len(), "{m:?}");
        if expect_batched {
            assert!(m.cache_hits >= reqs.len() as u64, "{m:?}");
        }
        assert_eq!(m.busy_slots, 0, "{m:?}");
        // The requests overlapped: fewer steps than tokens.
        let tokens: usize = together.iter().map(|(c, _)| c.tokens.len()).sum();
        eprintln!("{nth} threads: {m:?}, {tokens} tokens together");
    }
    let s = Session::new(
        model.clone(),
        SessionParams {
            n_ctx: 4 * 256,
            n_streams: 4,
            logits_all: true,
            ..Default::default()
        },
    )
    .expect("session");
    assert_eq!(s.batches_sequences(), expect_batched);
}

const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "Once upon a time",
    "fn main() {",
    "1, 2, 3, 4,",
    "The quick brown fox",
    "In a hole in the ground there lived",
    "def fibonacci(n):",
    "Rust is a language that",
];

fn tiny(name: &str) -> Arc<Model> {
    let path = common::reference_dir().join("tiny").join(name);
    Arc::new(Model::load(&path).expect("load tiny model"))
}

/// F16 weights (whose products depend on the column count, as llama.cpp's): the session
/// evaluates each sequence of a step on its own.
#[test]
fn tiny_f16_requests_equal_a_lone_session() {
    let model = tiny("tiny-llama-f16.gguf");
    check_invariance(&model, &PROMPTS, 24, false);
}

/// Sliding-window attention and soft-capping (Gemma 2), experts (mul_mat_id), gpt-oss's
/// sinks, alternating windows and biased experts, ChatGLM's own positions and mask, Gemma 3's
/// local/global bases and Gemma 4's shared caches and per-layer embeddings through the
/// engine's regions: still a lone session's bits. (The LLaMA decoder's variants of the 2026
/// families: see `llama_variants_through_the_engine_equal_a_lone_session`.)
#[test]
fn other_architectures_through_the_engine_equal_a_lone_session() {
    for name in [
        "tiny-gemma2-f16.gguf",
        "tiny-moe-f16.gguf",
        "tiny-gpt-oss-f16.gguf",
        "tiny-phi3-f16.gguf",
        "tiny-chatglm-f16.gguf",
        "tiny-gemma3-f16.gguf",
        "tiny-gemma4-f16.gguf",
    ] {
        eprintln!("{name}");
        check_invariance(&tiny(name), &PROMPTS[..4], 12, false);
    }
}

/// The 2026 families that run the LLaMA decoder's graph with options of their own, and
/// Gemma 4's experts: SmolLM3's layers without rotary, Granite's four multipliers, Mistral 3's
/// YaRN and its attention temperature (queries scaled by position, so a slot's positions
/// must be its own), Phi-4-mini's LongRoPE (factors chosen by the slot's context, which the
/// lone session is given), Llama with YaRN, and Gemma 4's routed experts beside the shared
/// one: through the engine's regions, still a lone session's bits.
#[test]
fn llama_variants_through_the_engine_equal_a_lone_session() {
    for name in [
        "tiny-smollm3-f16.gguf",
        "tiny-granite-f16.gguf",
        "tiny-mistral3-f16.gguf",
        "tiny-phi3-longrope-f16.gguf",
        "tiny-llama-yarn-f16.gguf",
    ] {
        eprintln!("{name}");
        check_invariance(&tiny(name), &PROMPTS[..4], 12, false);
    }
    eprintln!("tiny Gemma 4 with experts");
    check_invariance(
        &crate::tiny_gemma4_moe::model_in("engine.gguf"),
        &PROMPTS[..4],
        12,
        false,
    );
}

/// The recurrent hybrids (short convolutions, Mamba-2, the gated delta-net, with experts):
/// a slot's recurrent state is its own, and steps that mix decoding slots and prompt pieces
/// give each request a lone session's bits.
#[test]
fn hybrids_through_the_engine_equal_a_lone_session() {
    for name in [
        "tiny-lfm2-f16.gguf",
        "tiny-granite-hybrid-f16.gguf",
        "tiny-qwen35-f16.gguf",
        "tiny-qwen35moe-f16.gguf",
    ] {
        eprintln!("{name}");
        check_invariance(&tiny(name), &PROMPTS[..4], 12, false);
    }
}

/// A slot of a recurrent model keeps its state at the end of each prompt: the next request
/// that shares that prompt but not the reply after it resumes there (counted in the
/// metrics: one lookup, one hit), evaluates only its new tokens, and generates what a lone
/// session does.
#[test]
fn hybrid_slots_resume_from_checkpoints() {
    let model = tiny("tiny-qwen35-f16.gguf");
    let engine = Engine::start(
        model.clone(),
        EngineParams {
            n_slots: 1,
            n_ctx: 256,
            n_threads: 2,
            ..Default::default()
        },
    )
    .expect("engine");
    let greedy = |max_tokens| GenerateParams {
        max_tokens,
        sampling: SamplingParams {
            temperature: 0.0,
            ..Default::default()
        },
        ..Default::default()
    };
    let p1 = model.encode_prompt(PROMPTS[0]).expect("encode");
    let mut r1 = Request::new(p1.clone(), greedy(6));
    r1.cache_prompt = true;
    let (c1, _) = run_all(&engine, &[r1]).remove(0);
    let mut p2 = p1.clone();
    p2.extend([13, 29902, 29901]);
    assert_ne!(p2[p1.len()], c1.tokens[0]);
    p2.extend(
        model
            .encode_prompt(PROMPTS[1])
            .expect("encode")
            .into_iter()
            .skip(1),
    );
    let mut r2 = Request::new(p2.clone(), greedy(8));
    r2.cache_prompt = true;
    let before = engine.handle().metrics();
    let (c2, _) = run_all(&engine, std::slice::from_ref(&r2)).remove(0);
    let m = engine.handle().metrics();
    assert_eq!((m.checkpoint_lookups, m.checkpoint_hits), (1, 1), "{m:?}");
    assert_eq!(
        m.cached_tokens - before.cached_tokens,
        p1.len() as u64,
        "{m:?}"
    );
    assert_eq!(
        m.prompt_tokens - before.prompt_tokens,
        (p2.len() - p1.len()) as u64,
        "{m:?}"
    );
    let n_ctx = engine.handle().n_ctx_slot();
    let want = lone(&model, n_ctx, 2, &p2, &r2.params);
    assert_eq!(c2.tokens, want.0);
}

/// The tiny LLaMA quantized to Q8_0 (`--pure`).
fn tiny_q8_0() -> Arc<Model> {
    Arc::new(Model::load(common::tiny_llama_q8_0()).expect("load q8_0"))
}

/// Whether every matrix of `model` keeps each column's bits (so steps are batched).
fn columns_independent(model: &Model) -> bool {
    model
        .weights()
        .iter()
        .filter(|w| w.ne[1] > 1)
        .all(|w| ggrs_core::mul_mat_columns_independent(w.dtype, w.ne))
}

/// Q8_0 weights: one graph per step for all sequences, still the lone session's bits, with
/// the prompt cache too.
#[test]
fn tiny_q8_0_requests_batched_equal_a_lone_session() {
    let model = tiny_q8_0();
    let batched = columns_independent(&model);
    check_invariance(&model, &PROMPTS, 24, batched);
}

/// The real model: `n` streams at once give the lone session's bits, in fewer steps than
/// tokens.
fn real_model_streams(path: &std::path::Path, n: usize, max_tokens: usize) {
    let _g = common::serial();
    let model = Arc::new(Model::load(path).expect("load"));
    let reqs: Vec<Request> = PROMPTS[..n]
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut params = sampled(max_tokens, 7 + i as u64);
            if i % 2 == 0 {
                params.sampling = SamplingParams::greedy();
            }
            Request::new(model.encode_prompt(p).expect("encode"), params)
        })
        .collect();
    let engine = Engine::start(
        model.clone(),
        EngineParams {
            n_slots: n,
            n_ctx: n * 256,
            n_threads: 2,
            ..Default::default()
        },
    )
    .expect("engine");
    let got = run_all(&engine, &reqs);
    for (i, (r, (c, _))) in reqs.iter().zip(&got).enumerate() {
        let w = lone(&model, 256, 2, &r.prompt, &r.params);
        assert_eq!(c.tokens, w.0, "request {i}: tokens");
        assert_eq!(
            bits(&c.logprobs),
            bits(&w.1),
            "request {i}: log-probabilities"
        );
    }
    let m = engine.handle().metrics();
    let tokens: u64 = got.iter().map(|(c, _)| c.tokens.len() as u64).sum();
    assert!(
        m.steps < tokens,
        "the streams were not batched: {} steps for {tokens} tokens",
        m.steps
    );
}

/// q4_0 (one graph per step): eight streams.
#[test]
fn qwen05b_q4_0_eight_streams_equal_a_lone_session() {
    let Some(path) = common::qwen05b("q4_0") else {
        return;
    };
    real_model_streams(&path, 8, 16);
}

/// The Q4_K_M file people download (Q5_0, Q6_K and Q8_0 weights; Q6_K's products depend on
/// the column count): decode tokens in per-column products, prompts on their own.
#[test]
fn qwen05b_source_q4_k_m_four_streams_equal_a_lone_session() {
    // (Fetches the source when it is missing; honours GGRS_SKIP_MODEL_TESTS.)
    if common::qwen05b("q4_0").is_none() {
        return;
    }
    let path = common::model_dir().join(common::SOURCE_MODEL);
    real_model_streams(&path, 4, 12);
}

/// A request that starts with a finished one's prompt and reply evaluates only the new
/// tokens, and with a short prompt and Q8_0 weights (the same kernels either way) still gives
/// the lone session's bits.
#[test]
fn prompt_cache_reuses_a_slot_and_keeps_the_bits() {
    let model = tiny_q8_0();
    if !columns_independent(&model) {
        eprintln!("SKIPPED: no column-independent Q8_0 kernel on this CPU");
        return;
    }
    let engine = Engine::start(
        model.clone(),
        EngineParams {
            n_slots: 2,
            n_ctx: 512,
            n_threads: 2,
            ..Default::default()
        },
    )
    .expect("engine");
    let first = model.encode_prompt("Once upon a time").expect("encode");
    let params = sampled(12, 5);
    let (c1, _) = run_all(&engine, &[Request::new(first.clone(), params.clone())]).remove(0);
    assert_eq!(c1.cached_tokens, 0);
    let mut second = first.clone();
    second.extend_from_slice(&c1.tokens);
    second.extend(
        model.encode_prompt(" and then").expect("encode")[1..]
            .iter()
            .copied(),
    );
    let (c2, _) = run_all(&engine, &[Request::new(second.clone(), params.clone())]).remove(0);
    // The reply's last token was sampled but never evaluated.
    assert_eq!(
        c2.cached_tokens,
        first.len() + c1.tokens.len() - 1,
        "{c2:?}"
    );
    assert_eq!(c2.timings.prompt_tokens, second.len() - c2.cached_tokens);
    let m = engine.handle().metrics();
    assert_eq!(m.cache_hits, 1, "{m:?}");
    let w = lone(&model, 256, 2, &second, &params);
    assert_eq!(c2.tokens, w.0);
    assert_eq!(bits(&c2.logprobs), bits(&w.1));
}

/// Long prompts (the tiled attention kernel, keys split past 256 cells): a request equals the
/// lone session without the prompt cache, and with it reuses the long shared prefix.
#[test]
fn long_prompts_equal_a_lone_session_and_reuse_the_cache() {
    let model = tiny_q8_0();
    let engine = Engine::start(
        model.clone(),
        EngineParams {
            n_slots: 2,
            n_ctx: 2 * 1024,
            n_threads: 2,
            ..Default::default()
        },
    )
    .expect("engine");
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    let first = model.encode_prompt(&text).expect("encode");
    assert!(first.len() > 300, "{} tokens", first.len());
    let params = sampled(8, 3);
    let (c, _) = run_all(&engine, &[Request::new(first.clone(), params.clone())]).remove(0);
    let w = lone(&model, 1024, 2, &first, &params);
    assert_eq!(c.tokens, w.0);
    assert_eq!(bits(&c.logprobs), bits(&w.1));
    let mut next = first[..first.len() - 1].to_vec();
    next.extend(
        model.encode_prompt(" and").expect("encode")[1..]
            .iter()
            .copied(),
    );
    let mut exact = Request::new(next.clone(), params.clone());
    exact.cache_prompt = false;
    let (c, _) = run_all(&engine, &[exact]).remove(0);
    assert_eq!(c.cached_tokens, 0);
    let w = lone(&model, 1024, 2, &next, &params);
    assert_eq!(c.tokens, w.0);
    assert_eq!(bits(&c.logprobs), bits(&w.1));
    let (c, _) = run_all(&engine, &[Request::new(next.clone(), params.clone())]).remove(0);
    assert_eq!(c.cached_tokens, next.len() - 1, "{c:?}");
    assert_eq!(c.tokens.len(), 8);
    // While another slot generates, the long prompt goes in parts of 128 tokens (so the
    // other stream keeps going), with the same bits.
    let h = engine.handle();
    let mut busy = GenerateParams {
        max_tokens: 100_000,
        ignore_eos: true,
        ..sampled(0, 1)
    };
    busy.top_logprobs = 0;
    let mut other = h
        .submit_stream(Request::new(
            model.encode_prompt("Once").expect("encode"),
            busy,
        ))
        .expect("submit");
    assert!(matches!(other.next(), Some(Event::Token(_))));
    let steps0 = h.metrics().steps;
    let mut exact = Request::new(first.clone(), params.clone());
    exact.cache_prompt = false;
    let (c, _) = run_all(&engine, &[exact]).remove(0);
    let w = lone(&model, 1024, 2, &first, &params);
    assert_eq!(c.tokens, w.0, "prompt in parts beside a running stream");
    assert_eq!(bits(&c.logprobs), bits(&w.1));
    let steps = h.metrics().steps - steps0;
    // ⌈first / 128⌉ parts (the last one up to 191 tokens) and 8 tokens, at least.
    assert!(
        steps as usize >= first.len() / 128 + 7,
        "{steps} steps for a {}-token prompt and 8 tokens",
        first.len()
    );
    drop(other);
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Dropping a stream cancels its request: the slot is free at once, and the queue is
/// bounded.
#[test]
fn cancellation_frees_the_slot_and_the_queue_is_bounded() {
    let model = tiny("tiny-llama-f16.gguf");
    let engine = Engine::start(
        model.clone(),
        EngineParams {
            n_slots: 1,
            n_ctx: 1024,
            n_threads: 1,
            queue_capacity: 1,
            ..Default::default()
        },
    )
    .expect("engine");
    let h = engine.handle();
    let prompt = model.encode_prompt("Once upon a time").expect("encode");
    let long = GenerateParams {
        max_tokens: 100_000,
        ignore_eos: true,
        ..sampled(0, 1)
    };
    let mut s1 = h
        .submit_stream(Request::new(prompt.clone(), long.clone()))
        .expect("first");
    assert!(matches!(s1.next(), Some(Event::Token(_))));
    wait_for("the first request in its slot", || {
        h.metrics().busy_slots == 1
    });
    // One waits, the next is refused.
    let s2 = h
        .submit_stream(Request::new(prompt.clone(), long.clone()))
        .expect("second waits");
    match h.submit_stream(Request::new(prompt.clone(), long.clone())) {
        Err(SubmitError::QueueFull { capacity: 1, .. }) => {}
        other => panic!("expected QueueFull, got {:?}", other.map(|_| ())),
    }
    // Cancelling the first lets the second in.
    drop(s1);
    wait_for("the second request in the slot", || {
        h.slots()[0].request == Some(s2.ticket().id)
    });
    s2.ticket().cancel();
    let end = s2.wait().expect("a cancelled request still ends with Done");
    assert_eq!(end.stop, StopReason::Callback);
    wait_for("the slot is free", || h.metrics().busy_slots == 0);
    let m = h.metrics();
    assert_eq!(m.requests_cancelled, 2, "{m:?}");
    assert_eq!(m.queued, 0, "{m:?}");
    // Too long a prompt is refused with the numbers.
    let too_long = vec![prompt[0]; h.n_ctx_slot() + 1];
    match h.submit_stream(Request::new(too_long, long)) {
        Err(SubmitError::PromptTooLong {
            n_prompt,
            n_ctx_slot,
        }) => {
            assert_eq!((n_prompt, n_ctx_slot), (1025, 1024));
        }
        other => panic!("expected PromptTooLong, got {:?}", other.map(|_| ())),
    }
}

/// A slot costs its KV cache and little else: the arena of a session set up as the engine
/// sets it up for eight slots is the one-slot arena plus seven slots' keys and values, plus
/// the step's growth by one token per slot (its logits row and activations: at most two
/// vocabulary rows per slot here).
#[test]
fn each_extra_slot_costs_its_kv_cache() {
    let model = tiny("tiny-llama-f16.gguf");
    let per = 256;
    let arena = |slots: usize| {
        let s = Session::new(
            model.clone(),
            SessionParams {
                n_ctx: slots * per,
                // As `Engine::start`: a prompt piece and one token per slot.
                n_batch: per + slots,
                n_streams: slots,
                logits_all: true,
                n_threads: 1,
                ..Default::default()
            },
        )
        .expect("session");
        let hp = &model.hparams;
        let kv = 2 * hp.n_layer * slots * per * 2 * hp.n_embd_kv();
        (s.arena_bytes(), kv)
    };
    let (a1, kv1) = arena(1);
    let (a8, kv8) = arena(8);
    let extra = a8 as i64 - a1 as i64 - (kv8 - kv1) as i64;
    eprintln!(
        "arena: 1 slot {a1} B, 8 slots {a8} B; KV {kv1} -> {kv8} B; beyond the KV: {extra} B"
    );
    let allowance = 7 * 2 * 4 * model.hparams.n_vocab;
    assert!(
        extra <= allowance as i64,
        "seven more slots cost {extra} B beyond their {} B of KV cache (allowed {allowance})",
        kv8 - kv1
    );
}

/// A sequence in a cache region gives a lone session's logits, bit for bit, at every step,
/// also past 256 and 512 cells (where attention splits a lone query's keys).
#[test]
fn a_region_gives_a_lone_sessions_logits_at_every_length() {
    for model in [tiny("tiny-llama-f16.gguf"), tiny_q8_0()] {
        region_equals_lone(model);
    }
}

fn region_equals_lone(model: Arc<Model>) {
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    let prompt = model.encode_prompt(&text).expect("encode");
    let mk = |streams: usize| {
        Session::new(
            model.clone(),
            SessionParams {
                n_ctx: 1024 * streams,
                n_streams: streams,
                logits_all: true,
                n_threads: 2,
                ..Default::default()
            },
        )
        .expect("session")
    };
    let (mut lone, mut region) = (mk(1), mk(2));
    use ggrs_llama::Batch;
    let mut pos = 0i32;
    let mut next = prompt.clone();
    for step in 0..300 {
        let b = Batch::from_tokens(&next, pos, 0, false);
        lone.decode(&b).expect("lone");
        let mut rb = Batch::from_tokens(&next, pos, 1, false);
        rb.seq.iter_mut().for_each(|s| *s = 1);
        region.decode(&rb).expect("region");
        let (a, r) = (lone.logits(), region.logits());
        let differ = a
            .iter()
            .zip(r)
            .filter(|(x, y)| x.to_bits() != y.to_bits())
            .count();
        assert_eq!(
            differ, 0,
            "step {step} at position {pos}: {differ} logits differ"
        );
        pos += next.len() as i32;
        let id = ggrs_llama::sampling::argmax(a);
        next = vec![id];
    }
}

/// Sliding-window layers keep only their window in each slot (the engine's sessions trim
/// them unless `swa_full`): prompts of 300 tokens, far past the 256 window cells of each
/// slot, give the greedy tokens of a lone session that keeps every cell, together and again
/// one at a time with the prompt cache on (where the window behind the shared prefix is
/// gone, so the prompt is evaluated again rather than reused).
#[test]
fn sliding_window_slots_keep_only_their_window() {
    for name in ["tiny-gemma3-f16.gguf", "tiny-gpt-oss-f16.gguf"] {
        let model = tiny(name);
        let prompts: Vec<Vec<u32>> = [
            "The capital of France is Paris, and",
            "Once upon a time, in a land far away,",
        ]
        .iter()
        .map(|p| {
            let one = model.encode_prompt(p).expect("encode");
            let mut t = one.clone();
            while t.len() < 300 {
                t.extend_from_slice(&one[1..]);
            }
            t.truncate(300);
            t
        })
        .collect();
        let want: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| {
                let mut s = Session::new(
                    model.clone(),
                    SessionParams {
                        n_ctx: 1024,
                        n_batch: 32,
                        n_threads: 2,
                        swa_full: true,
                        ..Default::default()
                    },
                )
                .expect("session");
                assert_eq!(s.kv_cache().window_size(), None);
                let g = s
                    .generate_tokens(p, &common::greedy(12), |_| {
                        std::ops::ControlFlow::Continue(())
                    })
                    .expect("generate");
                g.tokens
            })
            .collect();
        let engine = Engine::start(
            model.clone(),
            EngineParams {
                n_slots: 2,
                n_ctx: 2 * 1024,
                n_batch: 32,
                n_threads: 2,
                ..Default::default()
            },
        )
        .expect("engine");
        let reqs: Vec<Request> = prompts
            .iter()
            .map(|p| Request::new(p.clone(), common::greedy(12)))
            .collect();
        let together = run_all(&engine, &reqs);
        let again: Vec<_> = reqs
            .iter()
            .map(|r| run_all(&engine, std::slice::from_ref(r)).remove(0))
            .collect();
        for (i, w) in want.iter().enumerate() {
            assert_eq!(&together[i].0.tokens, w, "{name}: request {i} together");
            assert_eq!(&again[i].0.tokens, w, "{name}: request {i} again");
        }
        let m = engine.handle().metrics();
        assert_eq!(
            m.cache_hits, 0,
            "{name}: the window behind the prefix is gone: {m:?}"
        );
    }
}
