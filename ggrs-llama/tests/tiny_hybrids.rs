//! The recurrent hybrids on their tiny random-weight models (`shared/reference/tiny/`, see
//! `README-2026.md` there) against llama.cpp's outputs: the prompt's top-10 logits to the
//! printed digits, every argmax and 16 greedy tokens equal, on 1 and 2 threads; and the
//! prompt evaluated in one batch, in pieces or token by token gives the same tokens.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use ggrs_llama::{Batch, Model, Session, SessionParams};

fn tiny(name: &str) -> PathBuf {
    common::reference_dir().join(format!("tiny/tiny-{name}-f16.gguf"))
}

fn load(name: &str) -> (Arc<Model>, Vec<common::RefPrompt>) {
    let path = tiny(name);
    let model = Arc::new(Model::load(&path).expect("load"));
    let refs = common::read_jsonl(&path.with_extension("public.jsonl"));
    (model, refs)
}

/// llama.cpp's outputs: the prompts tokenize to the reference ids, and on 1 and 2 threads
/// every prompt logit is within the printed digits (5 decimals: |Δ| ≤ 4.8e-6), every argmax
/// and every greedy run (16 tokens, one at a time) equal.
fn matches_llama_cpp(name: &str, arch: &str) -> Arc<Model> {
    let _one = common::serial();
    let (m, refs) = load(name);
    assert_eq!(m.arch_name(), arch);
    for r in &refs {
        let ours = m
            .tokenizer()
            .encode(&r.prompt, true, true)
            .expect("tokenize");
        assert_eq!(ours, r.tokens, "tokens of {:?}", r.prompt);
    }
    for nth in [1, 2] {
        let rep = common::compare(&m, &refs, 0.01, nth, 16);
        eprintln!("{name}, {nth} threads: {rep:?}");
        assert!(rep.max_abs_diff <= 4.8e-6, "{rep:?}");
        assert!(
            rep.argmax_checked > 100 && rep.argmax_equal == rep.argmax_checked,
            "{rep:?}"
        );
        assert_eq!(rep.greedy_prefix_ok, refs.len(), "{rep:?}");
        assert!(rep.greedy_failures.is_empty(), "{:?}", rep.greedy_failures);
    }
    m
}

/// Greedy tokens after feeding the prompt in pieces of `piece` tokens (0: one batch), then
/// 16 steps; and every prompt position's logits.
fn greedy_in_pieces(m: &Arc<Model>, tokens: &[u32], piece: usize) -> (Vec<u32>, Vec<f32>) {
    let params = SessionParams {
        n_ctx: 256,
        n_batch: 256,
        n_threads: 2,
        logits_all: true,
        ..Default::default()
    };
    let mut s = Session::new(m.clone(), params).expect("session");
    let step = if piece == 0 { tokens.len() } else { piece };
    let mut all = Vec::new();
    for c in tokens.chunks(step) {
        s.eval(c, true).expect("piece");
        all.extend_from_slice(s.all_logits());
    }
    let mut out = Vec::new();
    let mut tok = common::argmax(s.logits());
    for _ in 0..16 {
        out.push(tok);
        s.eval(&[tok], false).expect("step");
        tok = common::argmax(s.logits());
    }
    (out, all)
}

/// One batch, pieces of 1, 2, 3 and 5 tokens: the same 16 greedy tokens, and every prompt
/// position's logits within llama.cpp's own batch-vs-single-token noise (0.02).
fn pieces_agree(m: &Arc<Model>, refs: &[common::RefPrompt]) {
    for r in refs.iter().take(3) {
        let (want, base) = greedy_in_pieces(m, &r.tokens, 0);
        assert_eq!(want, r.greedy, "{:?}", r.prompt);
        for piece in [1, 2, 3, 5] {
            let (got, all) = greedy_in_pieces(m, &r.tokens, piece);
            assert_eq!(got, want, "{:?} in pieces of {piece}", r.prompt);
            let d = common::max_diff(&all, &base);
            assert!(d < 0.02, "{:?} in pieces of {piece}: {d}", r.prompt);
        }
    }
}

/// Two sequences decoded in one batch (one token each per step, a state each) give the
/// logits each gives alone, bit for bit, and a sequence's state is refused a position it
/// does not stand at.
fn sequences_keep_their_own_state(m: &Arc<Model>, refs: &[common::RefPrompt]) {
    let params = SessionParams {
        n_ctx: 512,
        n_batch: 64,
        n_threads: 2,
        n_streams: 2,
        logits_all: true,
        ..Default::default()
    };
    let nv = m.hparams.n_vocab;
    let (a, b) = (&refs[0].tokens, &refs[1].tokens);
    let mut alone = Vec::new();
    for t in [a, b] {
        let mut s = Session::new(m.clone(), params).expect("session");
        s.eval(t, false).expect("prompt");
        let mut tok = common::argmax(s.logits());
        let mut rows = vec![];
        for _ in 0..4 {
            s.eval(&[tok], false).expect("step");
            rows.push(s.logits().to_vec());
            tok = common::argmax(s.logits());
        }
        alone.push(rows);
    }
    let mut s = Session::new(m.clone(), params).expect("session");
    for (seq, t) in [a, b].iter().enumerate() {
        s.decode(&Batch::from_tokens(t, 0, seq as u32, false))
            .expect("prompt");
    }
    let mut next: Vec<u32> = vec![];
    for (seq, t) in [a, b].iter().enumerate() {
        let mut one = Session::new(m.clone(), params).expect("session");
        one.decode(&Batch::from_tokens(t, 0, seq as u32, false))
            .expect("prompt");
        next.push(common::argmax(one.logits()));
    }
    let mut pos = [a.len() as i32, b.len() as i32];
    // Step by step, the two sequences side by side (indices into both).
    #[allow(clippy::needless_range_loop)]
    for step in 0..4 {
        let mut batch = Batch::new();
        for seq in 0..2 {
            batch.push(next[seq], pos[seq], seq as u32, true);
        }
        s.decode(&batch).expect("two sequences");
        for seq in 0..2 {
            let row = &s.all_logits()[seq * nv..(seq + 1) * nv];
            let d = common::max_diff(row, &alone[seq][step]);
            assert_eq!(d, 0.0, "sequence {seq}, step {step}");
            next[seq] = common::argmax(row);
            pos[seq] += 1;
        }
    }
    // Position 3 of sequence 0 again: its state stands further on.
    let err = s.decode(&Batch::from_tokens(&[5], 3, 0, false));
    assert!(err.is_err());
}

/// A sequence's recurrent state saved after its prompt and restored after three more tokens
/// (their keys and values removed) continues exactly as the first time; without the restore
/// the session refuses to continue from the middle.
fn state_round_trip(m: &Arc<Model>, refs: &[common::RefPrompt]) {
    let mut s = Session::new(m.clone(), common::reference_session(2)).expect("session");
    let prompt = &refs[0].tokens;
    s.eval(prompt, false).expect("prompt");
    let saved = s.save_state(0).expect("save").expect("a recurrent model");
    assert_eq!(saved.next_pos as usize, prompt.len());
    let (mut fed, mut first) = (Vec::new(), Vec::new());
    let mut tok = common::argmax(s.logits());
    for _ in 0..3 {
        s.eval(&[tok], false).expect("step");
        fed.push(tok);
        first.push(s.logits().to_vec());
        tok = common::argmax(s.logits());
    }
    s.remove(0, prompt.len() as i32);
    assert!(
        s.eval(&[5], false).is_err(),
        "the state went on: no rewinding it"
    );
    s.restore_state(0, &saved).expect("restore");
    assert_eq!(s.reusable_prefix(0, prompt.len()), prompt.len());
    for (i, (&tok, want)) in fed.iter().zip(&first).enumerate() {
        s.eval(&[tok], false).expect("step again");
        assert_eq!(
            common::max_diff(s.logits(), want),
            0.0,
            "step {i} after the restore"
        );
    }
}

/// The prompt cache's checkpoints: a second turn that shares the first prompt but not the
/// reply evaluated after it (as a chat template re-rendering the reply) resumes from the
/// state at the end of the first prompt, evaluates only its new tokens and generates what
/// a fresh session generates for it.
fn second_turn_resumes_from_a_checkpoint(m: &Arc<Model>, refs: &[common::RefPrompt]) {
    use ggrs_llama::PromptCache;
    let go = |_: &ggrs_llama::TokenEvent| std::ops::ControlFlow::Continue(());
    let params = SessionParams {
        n_ctx: 256,
        n_threads: 2,
        ..Default::default()
    };
    let mut s = Session::new(m.clone(), params).expect("session");
    let mut cache = PromptCache::new();
    let p1 = refs[0].tokens.clone();
    let first = cache
        .generate(&mut s, &p1, &common::greedy(6), go)
        .expect("turn 1");
    assert_eq!(first.cached_tokens, 0);
    // The next prompt: the first, other tokens than the reply, then a new question.
    let mut p2 = p1.clone();
    p2.extend([13, 29902, 29901]);
    p2.extend_from_slice(&refs[1].tokens[1..]);
    assert_ne!(p2[p1.len()], first.tokens[0]);
    let second = cache
        .generate(&mut s, &p2, &common::greedy(8), go)
        .expect("turn 2");
    assert_eq!(
        second.cached_tokens,
        p1.len(),
        "resumed at the end of the first prompt"
    );
    assert_eq!(second.timings.prompt_tokens, p2.len() - p1.len());
    assert_eq!(cache.checkpoint_hits(), 1);
    let mut fresh = Session::new(m.clone(), params).expect("session");
    let want = fresh
        .generate_tokens(&p2, &common::greedy(8), go)
        .expect("fresh");
    assert_eq!(second.tokens, want.tokens);
    // The same prompt again: the record holds it, nothing to go back to.
    let third = cache
        .generate(&mut s, &p2, &common::greedy(2), go)
        .expect("turn 3");
    assert_eq!(
        third.cached_tokens,
        p1.len(),
        "the last checkpoint within p2[..len - 1]"
    );
}

/// Perplexity (llama.cpp's protocol: each chunk from an empty cache, the second half
/// scored) runs over a recurrent model, chunks evaluated in one step or in steps of 8 tokens
/// scoring alike.
fn perplexity_runs(m: &Arc<Model>, refs: &[common::RefPrompt]) {
    let tokens: Vec<u32> = refs.iter().flat_map(|r| r.tokens.iter().copied()).collect();
    let ppl = |n_batch| {
        let params = SessionParams {
            n_ctx: 32,
            n_batch,
            n_threads: 2,
            logits_all: true,
            ..Default::default()
        };
        let mut s = Session::new(m.clone(), params).expect("session");
        ggrs_llama::perplexity::perplexity(&mut s, &tokens, 32, |_| {}).expect("perplexity")
    };
    let (whole, pieces) = (ppl(32), ppl(8));
    assert!(
        whole.chunks >= 4 && whole.ppl.is_finite() && whole.ppl > 1.0,
        "{whole:?}"
    );
    assert!(
        (whole.ppl - pieces.ppl).abs() < 1e-3 * whole.ppl,
        "{whole:?} {pieces:?}"
    );
}

#[test]
fn lfm2_matches_llama_cpp() {
    let m = matches_llama_cpp("lfm2", "lfm2");
    let rec: Vec<bool> = m.hparams.recurrent.iter().map(|l| l.is_some()).collect();
    assert_eq!(rec, [true, true, false, true]);
    let refs = common::read_jsonl(&tiny("lfm2").with_extension("public.jsonl"));
    let _one = common::serial();
    perplexity_runs(&m, &refs);
    pieces_agree(&m, &refs);
    sequences_keep_their_own_state(&m, &refs);
    state_round_trip(&m, &refs);
}

#[test]
fn granite_hybrid_matches_llama_cpp() {
    use ggrs_llama::arch::granite_hybrid::GraniteHybridModel;
    let m = matches_llama_cpp("granite-hybrid", "granitehybrid");
    let rec: Vec<bool> = m.hparams.recurrent.iter().map(|l| l.is_some()).collect();
    assert_eq!(rec, [true, true, false, true]);
    // Per sequence and Mamba-2 layer: 3 × 192 conv values and 16 × 128 SSM values.
    let l = m.hparams.recurrent[0].expect("a Mamba-2 layer");
    assert_eq!((l.conv, l.ssm), (3 * 192, 16 * 128));
    let g = m
        .arch_weights::<GraniteHybridModel>()
        .expect("granitehybrid");
    assert!(!g.rope);
    let refs = common::read_jsonl(&tiny("granite-hybrid").with_extension("public.jsonl"));
    let _one = common::serial();
    pieces_agree(&m, &refs);
    sequences_keep_their_own_state(&m, &refs);
    state_round_trip(&m, &refs);
}

#[test]
fn qwen35_matches_llama_cpp() {
    let m = matches_llama_cpp("qwen35", "qwen35");
    let rec: Vec<bool> = m.hparams.recurrent.iter().map(|l| l.is_some()).collect();
    assert_eq!(rec, [true, false, true, false]);
    // Per sequence and delta-net layer: 3 × 128 conv values and 16 × 16 × 4 state values.
    let l = m.hparams.recurrent[0].expect("a delta-net layer");
    assert_eq!((l.conv, l.ssm), (3 * 128, 16 * 16 * 4));
    let refs = common::read_jsonl(&tiny("qwen35").with_extension("public.jsonl"));
    let _one = common::serial();
    pieces_agree(&m, &refs);
    sequences_keep_their_own_state(&m, &refs);
    state_round_trip(&m, &refs);
    second_turn_resumes_from_a_checkpoint(&m, &refs);
}

#[test]
fn qwen35moe_matches_llama_cpp() {
    use ggrs_llama::arch::qwen35moe::Qwen35MoeModel;
    let m = matches_llama_cpp("qwen35moe", "qwen35moe");
    let g = m.arch_weights::<Qwen35MoeModel>().expect("qwen35moe");
    let moe = &g.layers[0].ffn.moe;
    assert_eq!((moe.n_used, moe.n_expert), (2, 4));
    let refs = common::read_jsonl(&tiny("qwen35moe").with_extension("public.jsonl"));
    let _one = common::serial();
    pieces_agree(&m, &refs);
}
