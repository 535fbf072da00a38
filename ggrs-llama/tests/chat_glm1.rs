//! The chat API on ChatGLM-6B v1 (`chatglm1`): the tiny random checkpoint with a made-up
//! vocabulary (see `common/glm1_chat.rs`). Prompt ids are checked against the official
//! `chat()` rule and tokenizer written plainly in the test; every turn must re-evaluate the
//! whole prompt (the context before `[gMASK]` is bidirectional), which is checked by the
//! tokens evaluated (turn 3 shares a first round with turn 2's prompt) and by a fresh
//! session giving the same reply.

use crate::common;
#[path = "common/glm1_chat.rs"]
mod glm1_chat;

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use common::greedy;
use ggrs_llama::chat::{Chat, ChatError, ChatTemplate, Message};
use ggrs_llama::{Model, Session, SessionParams};
use glm1_chat::{official_ids, official_prompt, tiny_glm1_with_vocab, EOP};

fn gguf() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("chat-glm1-{}", std::process::id()));
        tiny_glm1_with_vocab(&dir)
    })
}

fn session() -> Session {
    let model = Arc::new(Model::load(gguf()).expect("the tiny v1 GGUF loads"));
    let params = SessionParams {
        n_ctx: 256,
        n_batch: 256,
        n_threads: 2,
        ..Default::default()
    };
    Session::new(model, params).expect("session")
}

fn go() -> impl FnMut(&ggrs_llama::TokenEvent) -> ControlFlow<()> {
    |_| ControlFlow::Continue(())
}

/// Two turns: the first prompt is the bare question, the second the official two-round
/// prompt with the first reply (as `process_response` keeps it), both encoded with the v1
/// conventions and `[gMASK] <sop>`; the second turn evaluates the whole prompt again, and
/// its reply equals a fresh session's on the same ids.
#[test]
fn two_turns_follow_the_official_prompt_and_re_prefill() {
    let mut chat = Chat::new(session()).expect("chatglm1 has a built-in format");
    assert_eq!(*chat.template(), ChatTemplate::ChatGlm1);
    assert!(
        chat.session().model().tokenizer().is_eog(EOP),
        "<eop> ends a reply"
    );
    let (q0, q1) = ("hi", "a\tb  c\nx 2");

    let g0 = chat.send(q0, &greedy(4), go()).unwrap();
    let want0 = official_ids(&official_prompt(&[], q0));
    assert_eq!(g0.prompt_tokens, want0, "turn 1: the bare question");
    assert_eq!(g0.timings.prompt_tokens, want0.len());
    // The tiny model's reply has no CJK and no `[[训练时间]]`: processing only trims it.
    let r0 = g0.text.trim().to_string();
    assert_eq!(
        chat.messages(),
        [Message::user(q0), Message::assistant(r0.clone())]
    );

    let before = chat.session().n_past();
    assert!(before >= want0.len(), "the cache held turn 1");
    let g1 = chat.send(q1, &greedy(4), go()).unwrap();
    let want1 = official_ids(&official_prompt(&[(q0, &r0)], q1));
    assert_eq!(g1.prompt_tokens, want1, "turn 2: rounds 0 and 1");
    assert_eq!(
        g1.timings.prompt_tokens,
        want1.len(),
        "turn 2 evaluates the whole prompt, reusing nothing"
    );
    assert_eq!(
        chat.session().n_past(),
        want1.len() + g1.tokens.len() - 1,
        "the cache holds only turn 2's prompt and reply"
    );

    // The same ids on a fresh session give the same reply: nothing of turn 1 leaked.
    let mut fresh = session();
    let g = fresh.generate_tokens(&want1, &greedy(4), go()).unwrap();
    assert_eq!(g.tokens, g1.tokens);

    // Turn 3 shares its first round with turn 2's prompt, yet nothing is reused either.
    let r1 = g1.text.trim().to_string();
    let q2 = "bad 3";
    let g2 = chat.send(q2, &greedy(3), go()).unwrap();
    let want2 = official_ids(&official_prompt(&[(q0, &r0), (q1, &r1)], q2));
    let shared = want1.iter().zip(&want2).take_while(|(a, b)| a == b).count();
    assert!(shared > 10, "rounds 0 are alike ({shared} tokens)");
    assert_eq!(g2.prompt_tokens, want2, "turn 3: rounds 0 to 2");
    assert_eq!(g2.timings.prompt_tokens, want2.len(), "turn 3 re-prefills");
    let mut fresh = session();
    let g = fresh.generate_tokens(&want2, &greedy(3), go()).unwrap();
    assert_eq!(g.tokens, g2.tokens);
    eprintln!("replies: {:?} {:?} {:?}", g0.text, g1.text, g2.text);
}

/// The v1 format takes user/assistant rounds ending with a question; anything else is a
/// typed error, and `reset` starts again from a bare question.
#[test]
fn v1_format_errors_and_reset() {
    let t = ChatTemplate::ChatGlm1;
    let e = t
        .render(&[Message::system("s"), Message::user("q")], true)
        .unwrap_err();
    assert!(matches!(e, ChatError::UnknownRole { ref role, .. } if role == "system"));
    let e = t
        .render(&[Message::user("q"), Message::user("q")], true)
        .unwrap_err();
    assert!(matches!(e, ChatError::Order { index: 1, .. }), "{e}");
    let e = t
        .render(&[Message::user("q"), Message::assistant("r")], true)
        .unwrap_err();
    assert!(matches!(e, ChatError::Order { .. }), "{e}");
    assert!(matches!(
        t.render(&[Message::user("q")], false),
        Err(ChatError::Order { .. })
    ));
    let two = [
        Message::user("q0"),
        Message::assistant("r0"),
        Message::user("q1"),
    ];
    assert_eq!(
        t.render(&two, true).unwrap(),
        "[Round 0]\n问：q0\n答：r0\n[Round 1]\n问：q1\n答："
    );

    let mut chat = Chat::new(session()).unwrap();
    chat.set_system(Some("no system role in v1".into()));
    assert!(chat.send("hi", &greedy(2), go()).is_err());
    assert!(chat.messages().is_empty(), "the failed turn is dropped");
    chat.set_system(None);
    chat.send("hi", &greedy(2), go()).unwrap();
    chat.reset();
    let g = chat.send("ab", &greedy(2), go()).unwrap();
    assert_eq!(
        g.prompt_tokens,
        official_ids("ab"),
        "after reset: a bare question"
    );
}
