//! Speculative decoding gives the tokens and log-probabilities of plain decoding, bit for
//! bit, greedy and sampled with every sampler option, on the tiny model of every generation
//! architecture and on qwen05b; rejected drafts leave the cache as if they never ran.

use crate::common;

use std::ops::ControlFlow;
use std::sync::Arc;

use ggrs_llama::speculative::{Drafter, NgramDrafter, SpecParams, Speculation};
use ggrs_llama::{
    Batch, GenerateParams, Generation, Model, SamplingParams, Session, SessionParams,
};

/// Tiny generation models (every architecture of the main branch).
const TINY: &[&str] = &[
    "tiny-llama-f16",
    "tiny-llama3-f16",
    "tiny-llama-yarn-f16",
    "tiny-qwen3-f16",
    "tiny-phi3-f16",
    "tiny-phi3-longrope-f16",
    "tiny-moe-f16",
    "tiny-gemma2-f16",
    "tiny-gemma3-f16",
    "tiny-gemma4-f16",
    "tiny-gpt-oss-f16",
    "tiny-mistral3-f16",
    "tiny-smollm3-f16",
    "tiny-granite-f16",
    "tiny-chatglm-f16",
];

fn load(name: &str) -> Arc<Model> {
    let path = common::reference_dir().join(format!("tiny/{name}.gguf"));
    Arc::new(Model::load(&path).unwrap_or_else(|e| panic!("load {name}: {e}")))
}

fn session(model: &Arc<Model>, n_ctx: usize, n_draft: usize) -> Session {
    Session::new(
        model.clone(),
        SessionParams {
            n_ctx,
            // Results do not depend on the thread count: the plain runs take one thread,
            // the speculative ones two.
            n_threads: 1 + usize::from(n_draft > 0),
            n_draft,
            // Exact steps need every cell of the sliding-window layers.
            swa_full: true,
            ..SessionParams::default()
        },
    )
    .expect("session")
}

/// Greedy, and seeded sampling with every option at once.
fn samplers(n_vocab: usize) -> Vec<(&'static str, SamplingParams)> {
    vec![
        ("greedy", SamplingParams::greedy()),
        (
            "sampled",
            SamplingParams {
                temperature: 0.9,
                top_k: 40,
                top_p: 0.9,
                min_p: 0.02,
                repeat_penalty: 1.1,
                frequency_penalty: 0.1,
                presence_penalty: 0.05,
                penalty_last_n: 32,
                seed: 1234,
                logit_bias: vec![(5, 2.0), ((n_vocab - 1) as u32, f32::NEG_INFINITY)],
            },
        ),
        (
            "hot",
            SamplingParams {
                temperature: 1.5,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                seed: 7,
                ..SamplingParams::default()
            },
        ),
    ]
}

/// Tokens, log-probabilities (as bits, with the alternatives') and text.
type Fingerprint = (Vec<u32>, Vec<(u32, Vec<(u32, u32)>)>, String);

/// What the generations must share, bit for bit.
fn fingerprint(g: &Generation) -> Fingerprint {
    let lps = g
        .logprobs
        .iter()
        .map(|(lp, top)| {
            (
                lp.to_bits(),
                top.iter().map(|(t, l)| (*t, l.to_bits())).collect(),
            )
        })
        .collect();
    (g.tokens.clone(), lps, g.text.clone())
}

/// Drafts of up to `draft_max` tokens, always as many as the drafter gives (no back-off).
fn fixed(draft_max: usize) -> SpecParams {
    SpecParams {
        draft_max,
        draft_min: 1,
        adaptive: false,
    }
}

fn generate(s: &mut Session, prompt: &[u32], params: &GenerateParams) -> Generation {
    s.generate_tokens(prompt, params, |_| ControlFlow::Continue(()))
        .expect("generate")
}

/// Proposes the plain run's own continuation with every `every`-th token wrong: long
/// accepted runs, and rejections at known places.
struct Corrupted {
    plain: Vec<u32>,
    prompt_len: usize,
    every: usize,
    n_vocab: u32,
}

impl Drafter for Corrupted {
    fn draft(&mut self, history: &[u32], max: usize) -> ggrs_llama::Result<Vec<u32>> {
        let g = history.len() - self.prompt_len;
        Ok(self
            .plain
            .iter()
            .enumerate()
            .skip(g)
            .take(max)
            .map(|(i, &t)| match i % self.every == self.every - 1 {
                true => (t + 1) % self.n_vocab,
                false => t,
            })
            .collect())
    }
}

/// The cells of sequence 0 in use, by position.
fn cells(s: &Session) -> Vec<Option<i32>> {
    s.kv_cache().cells.iter().map(|c| c.pos).collect()
}

/// Plain vs speculative with `drafter` on `prompt`: same tokens, log-probabilities, text and
/// cache cells; then one more generation on both (which reads every cached key and value).
/// Returns (drafted, accepted).
fn plain_vs_spec(
    model: &Arc<Model>,
    prompt: &[u32],
    params: &GenerateParams,
    drafter: impl FnOnce(&Generation) -> Box<dyn Drafter>,
    spec: SpecParams,
    what: &str,
) -> (usize, usize) {
    let n_ctx = 1024;
    let mut plain = session(model, n_ctx, 0);
    let a = generate(&mut plain, prompt, params);
    let mut fast = session(model, n_ctx, spec.draft_max);
    fast.set_speculation(Some(Speculation {
        params: spec,
        drafter: drafter(&a),
    }))
    .expect("speculation");
    let b = generate(&mut fast, prompt, params);
    assert_eq!(a.stop, b.stop, "{what}: stop");
    assert_eq!(fingerprint(&a), fingerprint(&b), "{what}: output");
    assert_eq!(cells(&plain), cells(&fast), "{what}: cache cells");
    assert_eq!(a.timings.drafted, 0);
    // Both caches then take a follow-up (plain) generation: its logits read every cell.
    fast.set_speculation(None).expect("plain");
    let more = [prompt[1], prompt[2]];
    let follow = GenerateParams {
        max_tokens: 4,
        top_logprobs: 2,
        ..params.clone()
    };
    let (c, d) = (
        generate(&mut plain, &more, &follow),
        generate(&mut fast, &more, &follow),
    );
    assert_eq!(fingerprint(&c), fingerprint(&d), "{what}: after the cache");
    (b.timings.drafted, b.timings.accepted)
}

fn words_prompt(model: &Model, min_tokens: usize) -> Vec<u32> {
    let text = "def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. ";
    let mut t = model.encode_prompt(text).expect("encode");
    while t.len() < min_tokens {
        let more = model.encode_prompt(text).expect("encode");
        t.extend(more);
    }
    t.truncate(min_tokens.max(8));
    t
}

/// Runs plain vs speculative on `model` with drafts that are right most of the time (so
/// that accepted runs and rejections both happen), for `prompt_len` prompt tokens and
/// `max_tokens` generated ones, with each of `samplers`.
fn corrupted_drafts(
    name: &str,
    model: &Arc<Model>,
    prompt_len: usize,
    max_tokens: usize,
    samplers: &[(&str, SamplingParams)],
) {
    let nv = model.hparams.n_vocab;
    let prompt = words_prompt(model, prompt_len);
    for (label, sampling) in samplers {
        let params = GenerateParams {
            max_tokens,
            sampling: sampling.clone(),
            ignore_eos: true,
            top_logprobs: 3,
            ..GenerateParams::default()
        };
        let what = format!("{name} {label} ({prompt_len} + {max_tokens})");
        let spec = fixed(6);
        let (drafted, accepted) = plain_vs_spec(
            model,
            &prompt,
            &params,
            |plain| {
                Box::new(Corrupted {
                    plain: plain.tokens.clone(),
                    prompt_len: prompt.len(),
                    every: 4,
                    n_vocab: nv as u32,
                })
            },
            spec,
            &what,
        );
        // The drafts were verified, most kept, some rejected.
        assert!(drafted >= max_tokens / 2, "{what}: drafted {drafted}");
        assert!(accepted > drafted / 2, "{what}: {accepted} of {drafted}");
        assert!(accepted < drafted, "{what}: {accepted} of {drafted}");
    }
}

/// Every tiny architecture, greedy and sampled with every option: the output and the cache
/// equal plain decoding's; and the n-gram drafter on a repetitive prompt.
#[test]
fn tiny_models_speculate_exactly() {
    for name in TINY {
        let model = load(name);
        let all = samplers(model.hparams.n_vocab);
        corrupted_drafts(name, &model, 40, 20, &all[..2]);
        let params = GenerateParams {
            max_tokens: 16,
            sampling: SamplingParams::greedy(),
            ignore_eos: true,
            ..GenerateParams::default()
        };
        plain_vs_spec(
            &model,
            &words_prompt(&model, 60),
            &params,
            |_| Box::new(NgramDrafter::default()),
            SpecParams::default(),
            &format!("{name} ngram"),
        );
    }
}

/// With a grammar (tokens masked before sampling, the grammar's state advanced by every kept
/// token), greedy and sampled: the output of plain decoding.
#[test]
fn grammar_constrained_speculation_is_exact() {
    use ggrs_llama::constraint::{Constraint, GrammarSpec};
    let model = load("tiny-llama-f16");
    let nv = model.hparams.n_vocab;
    let gbnf = "root ::= item{2,4}\nitem ::= \"- \" [a-z ]{1,12} \"\\n\"\n";
    let c = Constraint::compile(model.tokenizer(), GrammarSpec::Gbnf(gbnf.into())).unwrap();
    let prompt = words_prompt(&model, 40);
    for (label, sampling) in samplers(nv).into_iter().take(2) {
        let params = GenerateParams {
            max_tokens: 12,
            sampling,
            top_logprobs: 2,
            constraint: Some(c.clone()),
            ..GenerateParams::default()
        };
        let (drafted, _) = plain_vs_spec(
            &model,
            &prompt,
            &params,
            |plain| {
                Box::new(Corrupted {
                    plain: plain.tokens.clone(),
                    prompt_len: prompt.len(),
                    every: 3,
                    n_vocab: nv as u32,
                })
            },
            fixed(4),
            &format!("grammar {label}"),
        );
        assert!(drafted > 0, "{label}");
    }
}

/// Generation from 500 to past 520 cached cells (where the padded cell count grows and
/// flash attention splits a one-token step's keys), on a plain decoder, sliding windows and
/// attention sinks; and across 256 cells.
#[test]
fn speculation_is_exact_past_512_cells() {
    for name in ["tiny-llama-f16", "tiny-gemma2-f16", "tiny-gpt-oss-f16"] {
        let model = load(name);
        let all = samplers(model.hparams.n_vocab);
        corrupted_drafts(name, &model, 500, 24, &all[1..]);
    }
    // Across 256 cells: the drafted columns read 512 cells where the one-token steps of
    // the first ones read 256 (flash attention's one-row kernel skips the masked cells).
    let model = load("tiny-llama-f16");
    let all = samplers(model.hparams.n_vocab);
    corrupted_drafts("tiny-llama-f16", &model, 240, 24, &all[..2]);
}

/// The verification step is what makes it exact: past 512 cells, the drafted columns of one
/// ordinary multi-token step do not all have the bits of one-token steps (flash attention
/// does not split one query's keys there, and the products may change with the column
/// count), while `decode_exact` gives them all.
#[test]
fn exact_steps_equal_one_token_steps() {
    let model = load("tiny-llama-f16");
    let nv = model.hparams.n_vocab;
    let prompt = words_prompt(&model, 520);
    let extra: Vec<u32> = (0..8).map(|i| (7 + 13 * i) as u32 % nv as u32).collect();
    let mut one = session(&model, 1024, 8);
    one.eval(&prompt, false).unwrap();
    let mut rows = Vec::new();
    for &t in &extra {
        one.eval(&[t], false).unwrap();
        rows.extend_from_slice(one.logits());
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut exact = session(&model, 1024, 8);
    exact.eval(&prompt, false).unwrap();
    exact
        .decode_exact(&Batch::from_tokens(&extra, prompt.len() as i32, 0, true))
        .unwrap();
    assert_eq!(bits(exact.all_logits()), bits(&rows), "exact step");
    let mut batched = Session::new(
        model.clone(),
        SessionParams {
            n_ctx: 1024,
            n_threads: 2,
            logits_all: true,
            ..SessionParams::default()
        },
    )
    .unwrap();
    batched.eval(&prompt, false).unwrap();
    batched
        .decode(&Batch::from_tokens(&extra, prompt.len() as i32, 0, true))
        .unwrap();
    assert_ne!(
        bits(batched.all_logits()),
        bits(&rows),
        "an ordinary step of 8 tokens past 512 cells (the test would not see a mistake)"
    );
}

/// A trimmed sliding-window cache cannot verify drafts: a clear error, not wrong output.
#[test]
fn trimmed_window_cache_refuses_speculation() {
    let model = load("tiny-gemma2-f16");
    let mut s = Session::new(
        model,
        SessionParams {
            n_ctx: 1024,
            n_draft: 4,
            ..SessionParams::default()
        },
    )
    .unwrap();
    let err = s
        .set_speculation(Some(Speculation {
            params: SpecParams::default(),
            drafter: Box::new(NgramDrafter::default()),
        }))
        .unwrap_err();
    assert!(err.to_string().contains("swa"), "{err}");
}

/// A recurrent hybrid's state is overwritten by each step, so rejected drafts could not be
/// taken back: speculation is refused with an error naming the reason.
#[test]
fn recurrent_state_refuses_speculation() {
    for name in ["tiny-lfm2-f16", "tiny-qwen35-f16"] {
        let mut s = Session::new(
            load(name),
            SessionParams {
                n_ctx: 256,
                n_draft: 4,
                ..SessionParams::default()
            },
        )
        .unwrap();
        let err = s
            .set_speculation(Some(Speculation {
                params: SpecParams::default(),
                drafter: Box::new(NgramDrafter::default()),
            }))
            .unwrap_err();
        assert!(err.to_string().contains("recurrent state"), "{name}: {err}");
    }
}

/// qwen05b (q4_0): a code edit with the n-gram drafter, greedy and sampled: the same tokens
/// and log-probabilities, and most drafts accepted.
#[test]
fn qwen05b_code_edit_speculates_exactly() {
    let Some(path) = common::qwen05b("q4_0") else {
        return;
    };
    let _one = common::serial();
    let model = Arc::new(Model::load(&path).expect("load qwen05b"));
    let prompt = "<|im_start|>user\nRename the variable `total` to `sum` in this function and \
                  output the whole function:\n\ndef mean(values):\n    total = 0\n    for v in \
                  values:\n        total += v\n    return total / len(values)\n<|im_end|>\n\
                  <|im_start|>assistant\n";
    let tokens = model.encode_prompt(prompt).unwrap();
    for (label, sampling) in samplers(model.hparams.n_vocab).into_iter().take(2) {
        let params = GenerateParams {
            max_tokens: 24,
            sampling,
            top_logprobs: 2,
            ..GenerateParams::default()
        };
        let (drafted, accepted) = plain_vs_spec(
            &model,
            &tokens,
            &params,
            |_| Box::new(NgramDrafter::default()),
            SpecParams {
                adaptive: false,
                ..SpecParams::default()
            },
            &format!("qwen05b {label}"),
        );
        eprintln!("qwen05b {label}: {accepted} of {drafted} drafted tokens accepted");
        assert!(drafted > 0 && accepted > 0, "{label}: {accepted}/{drafted}");
    }
}

/// Proposes, for a history whose first token names a request, that request's plain
/// continuation with every 4th token wrong (see [`Corrupted`]).
struct ByRequest(Vec<Corrupted>);

impl Drafter for ByRequest {
    fn draft(&mut self, history: &[u32], max: usize) -> ggrs_llama::Result<Vec<u32>> {
        let i = history[0] as usize - 10;
        self.0[i].draft(history, max)
    }
}

/// The engine, 3 slots speculating beside each other (4 requests, one with
/// `speculative: false`), gives each request the tokens and log-probabilities of a lone
/// plain session, and counts drafts in its metrics.
#[test]
fn engine_speculates_exactly_beside_other_slots() {
    use ggrs_llama::engine::{Engine, EngineParams, Event, Request};
    let model = load("tiny-llama-f16");
    let nv = model.hparams.n_vocab;
    let all = samplers(nv);
    let reqs: Vec<Request> = [40, 70, 55, 30]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            // The first token tells the drafter which request it drafts for.
            let mut prompt = vec![10 + i as u32];
            prompt.extend(words_prompt(&model, n));
            let mut r = Request::new(
                prompt,
                GenerateParams {
                    max_tokens: 24,
                    sampling: all[i % 2].1.clone(),
                    ignore_eos: true,
                    top_logprobs: 2,
                    ..GenerateParams::default()
                },
            );
            r.speculative = i != 3;
            r
        })
        .collect();
    let plain: Vec<Generation> = reqs
        .iter()
        .map(|r| generate(&mut session(&model, 256, 0), &r.prompt, &r.params))
        .collect();
    let drafter = ByRequest(
        reqs.iter()
            .zip(&plain)
            .map(|(r, g)| Corrupted {
                plain: g.tokens.clone(),
                prompt_len: r.prompt.len(),
                every: 4,
                n_vocab: nv as u32,
            })
            .collect(),
    );
    let engine = Engine::start_with_drafter(
        model.clone(),
        EngineParams {
            n_slots: 3,
            n_ctx: 3 * 256,
            n_threads: 1,
            swa_full: true,
            spec: Some(fixed(6)),
            ..EngineParams::default()
        },
        Box::new(drafter),
    )
    .expect("engine");
    let streams: Vec<_> = reqs
        .iter()
        .map(|r| engine.handle().submit_stream(r.clone()).expect("submit"))
        .collect();
    let mut drafted = 0;
    for (i, s) in streams.into_iter().enumerate() {
        let c = s
            .into_iter()
            .find_map(|e| match e {
                Event::Done(c) => Some(c),
                Event::Error(e) => panic!("request {i} failed: {e}"),
                Event::Token(_) => None,
            })
            .expect("done");
        let g = &plain[i];
        assert_eq!(g.tokens, c.tokens, "request {i}: tokens");
        let spec = Generation {
            logprobs: c.logprobs.clone(),
            text: c.text.clone(),
            ..g.clone()
        };
        assert_eq!(fingerprint(g), fingerprint(&spec), "request {i}");
        match i {
            3 => assert_eq!(c.timings.drafted, 0, "speculative: false"),
            _ => assert!(
                c.timings.accepted > 0 && c.timings.accepted < c.timings.drafted,
                "request {i}: {} of {} accepted",
                c.timings.accepted,
                c.timings.drafted
            ),
        }
        drafted += c.timings.drafted;
    }
    let m = engine.handle().metrics();
    assert_eq!(m.draft_tokens as usize, drafted);
    assert!(m.draft_accepted < m.draft_tokens);
}

/// A draft model (another tiny model with the same vocabulary) drafts; the output is the
/// target's plain output.
#[test]
fn draft_model_speculates_exactly() {
    use ggrs_llama::speculative::ModelDrafter;
    let target = load("tiny-llama-f16");
    let draft = load("tiny-llama-yarn-f16");
    let prompt = words_prompt(&target, 40);
    for (label, sampling) in samplers(target.hparams.n_vocab).into_iter().take(2) {
        let params = GenerateParams {
            max_tokens: 24,
            sampling,
            ignore_eos: true,
            top_logprobs: 2,
            ..GenerateParams::default()
        };
        let (drafted, _) = plain_vs_spec(
            &target,
            &prompt,
            &params,
            |_| {
                let mut d = ModelDrafter::new(
                    draft.clone(),
                    SessionParams {
                        n_ctx: 1024,
                        n_threads: 1,
                        ..SessionParams::default()
                    },
                    &target,
                )
                .expect("draft model");
                // Random weights are never confident: draft whatever it likes most.
                d.p_min = 0.0;
                Box::new(d)
            },
            fixed(4),
            &format!("draft model {label}"),
        );
        assert!(drafted > 0, "{label}: nothing drafted");
    }
    // A model with another vocabulary is refused.
    let other = load("tiny-qwen3-f16");
    let err = ModelDrafter::new(other, SessionParams::default(), &target).unwrap_err();
    assert!(err.to_string().contains("vocabulary"), "{err}");
}

/// `EngineParams::spec_auto` (`ggrs serve`'s default `--spec auto`): speculation stays on
/// where a verified column is cheap (Q8_0 weights, whose many-column products read each
/// weight once) and is dropped where it would cost about a step per column (F16 weights).
#[test]
fn spec_auto_speculates_only_where_it_pays() {
    use ggrs_llama::engine::{Engine, EngineParams};
    let sp = SpecParams::default();
    let params = EngineParams {
        n_slots: 1,
        n_ctx: 256,
        n_threads: 1,
        spec: Some(sp),
        spec_auto: true,
        ..Default::default()
    };
    let spec_of =
        |m: Arc<Model>, p: EngineParams| Engine::start(m, p).unwrap().handle().params().spec;
    let q8 = Arc::new(Model::load(common::tiny_llama_q8_0()).unwrap());
    assert_eq!(spec_of(q8.clone(), params), Some(sp));
    assert_eq!(spec_of(load("tiny-llama-f16"), params), None);
    // Without spec_auto the engine speculates wherever it can.
    let forced = EngineParams {
        spec_auto: false,
        ..params
    };
    assert_eq!(spec_of(load("tiny-llama-f16"), forced), Some(sp));
}
