//! ChatGLM-6B v1 (`chatglm1`) end to end against `shared/reference/chatglm6b-v1`: the tiny
//! random checkpoint converted with `ggrs_convert` (f32 and f16), every prompt's
//! top-10 logits at every position, the 16 greedy steps with their top-10 logits, the
//! position streams and the bidirectional-context mask the session feeds, the refusal of a
//! chunked prefill, and the v1 text conventions.
//!
//! Tolerances (issue 7): f32 logits within 1e-3 (measured: see the printed max |Δ|), f16
//! within 2e-2. Argmax and greedy tokens are compared only where the reference's top two
//! are further apart than the tolerance (they are as close as 0.0024 at some steps).

use crate::common;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use common::argmax;
use ggrs_convert::{convert_hf_dir, ConvertOptions, OutType};
use ggrs_core::{Context, DType};
use ggrs_llama::arch::chatglm1::{self, Glm1Params, Glm1State};
use ggrs_llama::kv_cache::KvCache;
use ggrs_llama::{Batch, LlamaError, Model, Session, SessionParams, StopReason};
use serde_json::Value;

fn ref_dir() -> PathBuf {
    common::reference_dir().join("chatglm6b-v1")
}

/// One line of `reference.jsonl`.
struct RefPrompt {
    input_ids: Vec<u32>,
    /// `[positions, block positions]`.
    prompt_pos: [Vec<i32>; 2],
    context_length: i32,
    mask_position: i32,
    prompt_top10: Vec<Vec<(u32, f32)>>,
    greedy: Vec<u32>,
    greedy_top10: Vec<Vec<(u32, f32)>>,
    decode_pos: Vec<(i32, i32)>,
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_i64().expect("an integer"))
        .collect()
}

fn top10(v: &Value) -> Vec<Vec<(u32, f32)>> {
    v.as_array()
        .expect("positions")
        .iter()
        .map(|p| {
            p.as_array()
                .expect("pairs")
                .iter()
                .map(|e| (e[0].as_u64().unwrap() as u32, e[1].as_f64().unwrap() as f32))
                .collect()
        })
        .collect()
}

fn load_refs() -> Vec<RefPrompt> {
    let text = std::fs::read_to_string(ref_dir().join("reference.jsonl"))
        .expect("shared/reference/chatglm6b-v1/reference.jsonl is readable");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let o: Value = serde_json::from_str(l).expect("valid json");
            let pp = o["prompt_position_ids"].as_array().unwrap();
            RefPrompt {
                input_ids: ints(&o["input_ids"]).iter().map(|&x| x as u32).collect(),
                prompt_pos: [
                    ints(&pp[0]).iter().map(|&x| x as i32).collect(),
                    ints(&pp[1]).iter().map(|&x| x as i32).collect(),
                ],
                context_length: o["context_length"].as_i64().unwrap() as i32,
                mask_position: o["mask_position"].as_i64().unwrap() as i32,
                prompt_top10: top10(&o["prompt_logits_top10"]),
                greedy: ints(&o["greedy"]).iter().map(|&x| x as u32).collect(),
                greedy_top10: top10(&o["greedy_top10"]),
                decode_pos: o["decode_position_ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| (p[0].as_i64().unwrap() as i32, p[1].as_i64().unwrap() as i32))
                    .collect(),
            }
        })
        .collect()
}

/// The tiny checkpoint converted once per type (into the target directory's temp space,
/// `CARGO_TARGET_TMPDIR`).
fn gguf(outtype: OutType) -> &'static Path {
    static F32: OnceLock<PathBuf> = OnceLock::new();
    static F16: OnceLock<PathBuf> = OnceLock::new();
    let cell = match outtype {
        OutType::F32 => &F32,
        OutType::F16 => &F16,
        other => panic!("no cached conversion for {other:?}"),
    };
    cell.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("chatglm1-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join(format!("tiny-{}.gguf", outtype.name()));
        let opts = ConvertOptions {
            outtype,
            ..Default::default()
        };
        convert_hf_dir(&ref_dir().join("tiny_model"), &out, &opts)
            .unwrap_or_else(|e| panic!("converting the tiny checkpoint: {e}"));
        out
    })
}

fn model(outtype: OutType) -> Arc<Model> {
    Arc::new(Model::load(gguf(outtype)).expect("the converted GGUF loads"))
}

fn session(model: &Arc<Model>, n_batch: usize) -> Session {
    session_kv(model, n_batch, DType::F32)
}

fn session_kv(model: &Arc<Model>, n_batch: usize, kv_type: DType) -> Session {
    Session::new(
        model.clone(),
        SessionParams {
            n_ctx: 128,
            n_batch,
            n_threads: 2,
            kv_type,
            logits_all: true,
            ..Default::default()
        },
    )
    .expect("session")
}

/// Compares one row of logits with a reference top-10; returns max |Δ| over the ten.
/// Also: no token outside the ten may beat the tenth by more than `tol`, and the argmax
/// must agree where the reference's top two are more than `tol` apart.
fn check_row(what: &str, got: &[f32], want: &[(u32, f32)], tol: f32) -> f32 {
    let mut max = 0f32;
    for &(id, l) in want {
        let d = (got[id as usize] - l).abs();
        assert!(
            d <= tol,
            "{what}: logit of token {id} is {} (reference {l}, |Δ| = {d} > {tol})",
            got[id as usize]
        );
        max = max.max(d);
    }
    let tenth = want.last().unwrap().1;
    for (id, &g) in got.iter().enumerate() {
        if !want.iter().any(|w| w.0 as usize == id) {
            assert!(
                g <= tenth + tol,
                "{what}: token {id} has logit {g}, above the reference's tenth ({tenth})"
            );
        }
    }
    if want[0].1 - want[1].1 > tol {
        assert_eq!(argmax(got), want[0].0, "{what}: argmax");
    }
    max
}

/// Runs every reference prompt through a session: one prefill with every position's
/// logits, then the 16 greedy steps fed with the reference's tokens (so each step's logits
/// stay comparable). Returns max |Δlogit| over prompts and over greedy steps.
fn check_model(outtype: OutType, kv_type: DType, tol: f32) -> (f32, f32) {
    let m = model(outtype);
    let nv = m.hparams.n_vocab;
    let (mut max_prompt, mut max_greedy) = (0f32, 0f32);
    for (pi, r) in load_refs().iter().enumerate() {
        let mut s = session_kv(&m, 64, kv_type);
        let n = r.input_ids.len();
        s.decode(&Batch::from_tokens(&r.input_ids, 0, 0, true))
            .unwrap_or_else(|e| panic!("prompt {pi}: {e}"));
        assert_eq!(s.n_outputs(), n);
        let all = s.all_logits().to_vec();
        for (t, want) in r.prompt_top10.iter().enumerate() {
            let what = format!("{outtype:?} prompt {pi} position {t}");
            let d = check_row(&what, &all[t * nv..(t + 1) * nv], want, tol);
            max_prompt = max_prompt.max(d);
        }
        // Greedy: step i's logits chose greedy[i]; greedy[i] is then fed at index n + i.
        let mut logits = all[(n - 1) * nv..n * nv].to_vec();
        let mut tokens_agree = true;
        for (i, want) in r.greedy_top10.iter().enumerate() {
            let what = format!("{outtype:?} prompt {pi} greedy step {i}");
            max_greedy = max_greedy.max(check_row(&what, &logits, want, tol));
            tokens_agree &= want[0].1 - want[1].1 > tol;
            if tokens_agree {
                assert_eq!(argmax(&logits), r.greedy[i], "{what}: greedy token");
            }
            if i + 1 < r.greedy.len() {
                s.eval(&[r.greedy[i]], false)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                logits = s.logits().to_vec();
            }
        }
    }
    (max_prompt, max_greedy)
}

#[test]
fn f32_gguf_matches_reference_logits_and_greedy_steps() {
    let (p, g) = check_model(OutType::F32, DType::F32, 1e-3);
    eprintln!("chatglm1 f32: max |Δlogit| prompt {p:.3e}, greedy steps {g:.3e} (bound 1e-3)");
    // Tighter than the bound: the two small bugs the reference's README lists move
    // the logits by ~1e-4 (erf GELU) and ~4e-5 (rotary frequencies not rounded to f16,
    // measured); the exact computation stays near 2e-6.
    assert!(p.max(g) < 1e-5, "f32 logits off by {} (> 1e-5)", p.max(g));
}

#[test]
fn f16_gguf_matches_reference_within_2e_2() {
    let (p, g) = check_model(OutType::F16, DType::F32, 2e-2);
    eprintln!("chatglm1 f16: max |Δlogit| prompt {p:.3e}, greedy steps {g:.3e} (bound 2e-2)");
}

/// The default session (F16 KV cache, flash attention as llama.cpp runs it) on the f32
/// GGUF: the f16 rounding of q, K and V costs a little precision, within the f16 bound.
#[test]
fn f16_kv_cache_with_flash_attention_within_2e_2() {
    let (p, g) = check_model(OutType::F32, DType::F16, 2e-2);
    eprintln!("chatglm1 f32 + f16 KV: max |Δlogit| prompt {p:.3e}, greedy {g:.3e} (bound 2e-2)");
}

/// Greedy generation through `Session::generate_tokens` gives the reference's tokens (up to
/// the first step whose top two are within 1e-3), and the placeholder tokenizer of a file
/// without vocabulary ends generation at `<eop>` and refuses text prompts.
#[test]
fn generation_through_the_session_api() {
    let m = model(OutType::F32);
    let gp = Glm1Params::from_gguf(m.gguf(), &m.hparams).unwrap();
    assert_eq!(
        (gp.bos, gp.eos, gp.gmask, gp.mask),
        (991, 992, Some(990), Some(993))
    );
    assert!((gp.residual_scale - 56f32.sqrt()).abs() < 1e-6);
    assert!(m.tokenizer().is_eog(992), "<eop> ends generation");
    assert!(!m.has_vocab());
    let e = m.encode_prompt("hello").unwrap_err();
    assert!(e.to_string().contains("--prompt-ids"), "{e}");
    for r in load_refs() {
        let mut s = session(&m, 64);
        let params = common::greedy(16);
        let g = s
            .generate_tokens(&r.input_ids, &params, |_| ControlFlow::Continue(()))
            .unwrap();
        let agree = r
            .greedy_top10
            .iter()
            .take_while(|t| t[0].1 - t[1].1 > 1e-3)
            .count();
        assert!(agree > 0);
        assert_eq!(g.tokens[..agree], r.greedy[..agree], "generated tokens");
        let eos_at = g.tokens.iter().position(|&t| t == 992);
        match eos_at {
            Some(i) => {
                assert_eq!(i + 1, g.tokens.len());
                assert_eq!(g.stop, StopReason::EndOfGeneration(992));
            }
            None => assert_eq!(g.stop, StopReason::MaxTokens),
        }
    }
}

/// The position streams and the mask the session feeds: positions as the reference gives
/// them (prompt and decode), and the official prompt mask (context bidirectional, the rest
/// causal), written here from its definition.
#[test]
fn positions_and_bidirectional_mask_follow_the_official_rules() {
    let m = model(OutType::F32);
    let gp = Glm1Params::from_gguf(m.gguf(), &m.hparams).unwrap();
    for r in load_refs() {
        let n = r.input_ids.len();
        let size = 64;
        let mut ctx = Context::with_mem_size(KvCache::bytes(&m.hparams, size, DType::F32) + 4096);
        let mut kv = KvCache::new(&mut ctx, &m.hparams, size, DType::F32).unwrap();
        let mut st = Glm1State::default();
        let b = Batch::from_tokens(&r.input_ids, 0, 0, true);
        let placed = kv.place(&b).unwrap();
        let (pos, mask) = st.step_inputs(&gp, &b, &kv, placed.n_kv).unwrap();
        assert_eq!(pos[..n], r.prompt_pos[0][..], "positions");
        assert_eq!(pos[n..], r.prompt_pos[1][..], "block positions");
        let a = st.anchor(0).unwrap();
        assert_eq!(
            (a.context_length, a.mask_position),
            (r.context_length, r.mask_position)
        );
        let c = r.context_length as usize;
        for i in 0..n {
            for j in 0..placed.n_kv {
                // Official get_masks: tril, plus every row sees columns < context length.
                let visible = j < n && (j <= i || j < c);
                let v = mask[i * placed.n_kv + j];
                assert_eq!(v == 0.0, visible, "mask row {i} column {j}: {v}");
                if !visible {
                    assert_eq!(v, f32::NEG_INFINITY);
                }
            }
        }
        // Decode steps: one token at a time after the prompt.
        for (j, &(p, bp)) in r.decode_pos.iter().enumerate() {
            let b = Batch::from_tokens(&[r.greedy[j]], (n + j) as i32, 0, true);
            let placed = kv.place(&b).unwrap();
            let (pos, mask) = st.step_inputs(&gp, &b, &kv, placed.n_kv).unwrap();
            assert_eq!((pos[0], pos[1]), (p, bp), "decode step {j}");
            let seen = mask.iter().filter(|&&v| v == 0.0).count();
            assert_eq!(seen, n + j + 1, "decode step {j} sees every cached token");
        }
        // Once the cache no longer holds the context, continuing is refused.
        kv.clear();
        let b = Batch::from_tokens(&[5], (n + 20) as i32, 0, true);
        let placed = kv.place(&b).unwrap();
        let e = st.step_inputs(&gp, &b, &kv, placed.n_kv).unwrap_err();
        assert!(e.to_string().contains("no evaluated context"), "{e}");
    }
}

/// The context is bidirectional: the logits at position 0 change when a later context
/// token changes (a causal mask would leave them alone), and do not change when a token
/// after `<sop>` changes.
#[test]
fn context_attention_is_bidirectional() {
    let m = model(OutType::F32);
    let nv = m.hparams.n_vocab;
    let prompt: Vec<u32> = vec![5, 17, 300, 42, 990, 991, 7];
    let row0 = |p: &[u32]| {
        let mut s = session(&m, 64);
        s.decode(&Batch::from_tokens(p, 0, 0, true)).unwrap();
        s.all_logits()[..nv].to_vec()
    };
    let base = row0(&prompt);
    let mut later_context = prompt.clone();
    later_context[3] = 43;
    let mut after_sop = prompt.clone();
    after_sop[6] = 8;
    let diff = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    };
    assert!(
        diff(&base, &row0(&later_context)) > 1e-2,
        "position 0 must see the context token at index 3"
    );
    assert_eq!(
        diff(&base, &row0(&after_sop)),
        0.0,
        "position 0 must not see index 6"
    );
}

/// A prompt split over several steps (n_batch smaller than the prompt) is refused with a
/// clear error and leaves the cache empty; so are a prompt without `<sop>` or without
/// `[gMASK]`, and a step reaching back into an evaluated context. The same prompt in one
/// step works, and decoding continues after it.
#[test]
fn chunked_prefill_and_malformed_prompts_are_refused() {
    let m = model(OutType::F32);
    let r = &load_refs()[1];
    assert!(r.input_ids.len() > 4);
    let mut s = session(&m, 4);
    let e = s.eval(&r.input_ids, false).unwrap_err();
    assert!(matches!(e, LlamaError::InvalidArgument(_)), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("<sop>") && msg.contains("one step"), "{msg}");
    assert_eq!(
        s.kv_cache().used(),
        0,
        "the failed step left nothing in the cache"
    );

    let mut s = session(&m, 64);
    let e = s.eval(&[5, 6, 990], false).unwrap_err();
    assert!(e.to_string().contains("no <sop>"), "{e}");
    let e = s.eval(&[5, 6, 991], false).unwrap_err();
    assert!(e.to_string().contains("[gMASK]"), "{e}");
    assert_eq!(s.kv_cache().used(), 0);

    // One step: fine; then decoding goes on, and a step inside the context is refused.
    s.eval(&r.input_ids, false).unwrap();
    s.eval(&[r.greedy[0]], false).unwrap();
    let n = r.input_ids.len() as i32;
    let e = s
        .decode(&Batch::from_tokens(&[7], n - 2, 0, false))
        .unwrap_err();
    assert!(
        e.to_string().contains("inside its evaluated context"),
        "{e}"
    );
    // After clearing, the sequence starts again from its prompt.
    s.clear();
    s.eval(&r.input_ids, false).unwrap();
    assert_eq!(argmax(s.logits()), r.greedy[0]);
}

#[test]
fn text_conventions_of_the_official_tokenizer() {
    assert_eq!(chatglm1::preprocess_text("a\nb\tc"), "a<n>b<|tab|>c");
    assert_eq!(chatglm1::preprocess_text("x y  z"), "x y<|blank_2|>z");
    assert_eq!(chatglm1::preprocess_text("   "), "<|blank_3|>");
    let s85 = " ".repeat(85);
    assert_eq!(
        chatglm1::preprocess_text(&format!("a{s85}b")),
        "a<|blank_80|><|blank_5|>b"
    );
    let s161 = " ".repeat(161);
    assert_eq!(
        chatglm1::preprocess_text(&s161),
        "<|blank_80|><|blank_80|> "
    );
    assert_eq!(chatglm1::chat_prompt(&[], "你好"), "你好");
    let h = vec![("你好".to_string(), "你好！".to_string())];
    assert_eq!(
        chatglm1::chat_prompt(&h, "再见"),
        "[Round 0]\n问：你好\n答：你好！\n[Round 1]\n问：再见\n答："
    );
}

/// The f32 GGUF with a small SentencePiece vocabulary added (`tokenizer.ggml.*`): token i is
/// `▁t{i}` except the ChatGLM specials (990–994), the conventional tokens `<n>` (63),
/// `<|blank_3|>` (499) and `<|tab|>` (302) — the first three greedy tokens of reference
/// prompt 1 — and a few pieces to spell `a` and `b`.
fn gguf_with_vocab() -> PathBuf {
    use ggrs_core::gguf::{GgufFile, GgufWriter, Value};
    let src = GgufFile::open(gguf(OutType::F32)).unwrap();
    let out = gguf(OutType::F32).with_file_name("tiny-f32-vocab.gguf");
    let mut tokens: Vec<String> = (0..1000).map(|i| format!("▁t{i}")).collect();
    let mut types = vec![1i32; 1000];
    for (id, text, ty) in [
        (0, "<unk>", 2),
        (10, "▁", 1),
        (11, "a", 1),
        (12, "b", 1),
        (13, "▁a", 1),
        (14, "▁b", 1),
        (63, "<n>", 4),
        (302, "<|tab|>", 4),
        (499, "<|blank_3|>", 4),
        (990, "[gMASK]", 3),
        (991, "<sop>", 3),
        (992, "<eop>", 3),
        (993, "[MASK]", 3),
        (994, "<pad>", 3),
    ] {
        tokens[id] = text.to_string();
        types[id] = ty;
    }
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.add_kv(k.clone(), v.clone()).unwrap();
    }
    w.add_kv("tokenizer.ggml.model", "llama").unwrap();
    w.add_kv(
        "tokenizer.ggml.tokens",
        Value::Array(tokens.into_iter().map(Value::String).collect()),
    )
    .unwrap();
    w.add_kv(
        "tokenizer.ggml.token_type",
        Value::Array(types.into_iter().map(Value::I32).collect()),
    )
    .unwrap();
    w.add_kv(
        "tokenizer.ggml.scores",
        Value::Array((0..1000).map(|_| Value::F32(0.0)).collect()),
    )
    .unwrap();
    w.add_kv("tokenizer.ggml.add_bos_token", false).unwrap();
    copy_tensors(&src, w, &out, |name| Some(name));
    out
}

/// Writes `w` (metadata set) to `out` with the tensors of `src`: tensor `name` of the output
/// takes the data of `src`'s tensor `pick(name)`, and is left out when that is `None`.
fn copy_tensors(
    src: &ggrs_core::gguf::GgufFile,
    mut w: ggrs_core::gguf::GgufWriter,
    out: &Path,
    pick: impl Fn(&str) -> Option<&str>,
) {
    for t in src.tensors() {
        if let Some(from) = pick(&t.name) {
            let f = src.tensors().iter().find(|s| s.name == from).unwrap();
            assert_eq!(f.ne, t.ne, "{} from {from}", t.name);
            w.add_tensor_info(t.name.clone(), f.dtype, &t.ne[..t.n_dims])
                .unwrap();
        }
    }
    w.write_to_path(out, |info, o| {
        let from = pick(&info.name).unwrap();
        let t = src.tensors().iter().find(|t| t.name == from).unwrap();
        o.write_all(src.tensor_data(t))
    })
    .unwrap();
}

/// Tied embeddings (`tie_word_embeddings`, the real checkpoint's default): a file without
/// `output.weight` projects with `token_embd.weight`, giving exactly the logits of a file
/// whose `output.weight` is a copy of the embeddings.
#[test]
fn tied_output_uses_the_embeddings() {
    use ggrs_core::gguf::{GgufFile, GgufWriter};
    let src = GgufFile::open(gguf(OutType::F32)).unwrap();
    let mut paths = Vec::new();
    for (name, tied) in [("tiny-tied.gguf", true), ("tiny-copied.gguf", false)] {
        let out = gguf(OutType::F32).with_file_name(name);
        let mut w = GgufWriter::new();
        for (k, v) in src.metadata() {
            w.add_kv(k.clone(), v.clone()).unwrap();
        }
        copy_tensors(&src, w, &out, |n| match n {
            "output.weight" if tied => None,
            "output.weight" => Some("token_embd.weight"),
            other => Some(other),
        });
        paths.push(out);
    }
    let ids = &load_refs()[2].input_ids;
    let logits = |p: &Path| {
        let m = Arc::new(Model::load(p).unwrap());
        let mut s = session(&m, 64);
        s.decode(&Batch::from_tokens(ids, 0, 0, true)).unwrap();
        s.all_logits().to_vec()
    };
    let (tied, copied) = (logits(&paths[0]), logits(&paths[1]));
    assert_eq!(tied, copied, "tied = explicit copy of the embeddings");
    let untied = logits(gguf(OutType::F32));
    assert!(
        tied.iter().zip(&untied).any(|(a, b)| (a - b).abs() > 0.1),
        "the tiny model's own lm_head differs from its embeddings"
    );
}

/// With a vocabulary: text prompts get the official form (conventions applied, no BOS,
/// `[gMASK] <sop>` appended) and generated `<n>`, `<|blank_N|>`, `<|tab|>` come out as a
/// newline, N spaces and a tab.
#[test]
fn text_prompts_and_conventional_tokens_with_a_vocabulary() {
    let m = Arc::new(Model::load(gguf_with_vocab()).unwrap());
    assert!(m.has_vocab());
    let ids = m.encode_prompt("a\nb").unwrap();
    assert_eq!(ids[0], 13, "▁a first, no BOS: {ids:?}");
    assert_eq!(ids[1], 63, "<n> as one token: {ids:?}");
    // `b` without the leading space: the official tokenizer adds `▁` once, at the start.
    assert_eq!(ids[2], 12, "then b: {ids:?}");
    assert_eq!(ids[3..], [990, 991], "[gMASK] <sop> last: {ids:?}");

    let r = &load_refs()[1];
    assert_eq!(r.greedy[..3], [63, 499, 302]);
    let params = common::greedy(3);
    let mut s = session(&m, 64);
    let g = s
        .generate_tokens(&r.input_ids, &params, |_| ControlFlow::Continue(()))
        .unwrap();
    assert_eq!(g.tokens, [63, 499, 302]);
    assert_eq!(g.text, "\n   \t");
    // Text in: the session encodes it the official way.
    let mut s = session(&m, 64);
    let g = s
        .generate("a\nb", &params, |_| ControlFlow::Continue(()))
        .unwrap();
    assert_eq!(g.prompt_tokens, ids);
    assert_eq!(g.tokens.len(), 3);
}

/// Files the `chatglm1` loader refuses, each with an error naming the problem: a missing
/// bias, 1-D position encoding, a rotary width that is not half a head, no `[gMASK]` id.
#[test]
fn malformed_chatglm1_files_are_refused() {
    use ggrs_core::gguf::{GgufFile, GgufWriter, Value};
    let src = GgufFile::open(gguf(OutType::F32)).unwrap();
    type Case = (
        &'static str,
        Option<(&'static str, Value)>,
        Option<&'static str>,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "no-bias",
            None,
            Some("blk.1.ffn_norm.bias"),
            "blk.1.ffn_norm.bias",
        ),
        (
            "pe1d",
            Some(("chatglm1.position_encoding_2d", Value::Bool(false))),
            None,
            "1-D position encoding",
        ),
        (
            "rope",
            Some(("chatglm1.rope.dimension_count", Value::U32(8))),
            None,
            "rope.dimension_count",
        ),
        (
            "no-gmask",
            Some(("tokenizer.ggml.gmask_token_id", Value::U32(5000))),
            None,
            "gmask_token_id",
        ),
    ];
    for (name, set, drop, want) in cases {
        let out = gguf(OutType::F32).with_file_name(format!("bad-{name}.gguf"));
        let mut w = GgufWriter::new();
        for (k, v) in src.metadata() {
            w.add_kv(k.clone(), v.clone()).unwrap();
        }
        if let Some((k, v)) = set {
            w.set_kv(k, v).unwrap();
        }
        copy_tensors(&src, w, &out, |n| (Some(n) != drop).then_some(n));
        let e = Model::load(&out).unwrap_err();
        assert!(e.to_string().contains(want), "{name}: {e}");
    }
}
