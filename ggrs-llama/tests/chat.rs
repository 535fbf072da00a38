//! Chat formats: the built-in ChatGLM3 / GLM-4 strings, Jinja templates (a ChatML template
//! written here and, when the cached model is there, Qwen2.5's own), the choice of format
//! per model, and a multi-turn [`Chat`] that keeps its KV cache.

use crate::common;

use std::ops::ControlFlow;
use std::sync::Arc;

use common::argmax;
use ggrs_llama::chat::{encode_prompt, Chat, ChatError, ChatTemplate, Message};
use ggrs_llama::{LlamaError, Model, Session, SessionParams};

fn conversation() -> Vec<Message> {
    vec![
        Message::system("You are terse."),
        Message::user("Hi"),
        Message::assistant("Hello."),
        Message::user("2+2?"),
    ]
}

#[test]
fn chatglm3_string_is_exact() {
    let s = ChatTemplate::ChatGlm3
        .render(&conversation(), true)
        .unwrap();
    assert_eq!(
        s,
        "[gMASK]sop<|system|>\n You are terse.<|user|>\n Hi<|assistant|>\n Hello.<|user|>\n 2+2?<|assistant|>"
    );
    let s = ChatTemplate::ChatGlm3
        .render(&[Message::user("Hi")], false)
        .unwrap();
    assert_eq!(s, "[gMASK]sop<|user|>\n Hi");
}

#[test]
fn glm4_string_is_exact() {
    let s = ChatTemplate::Glm4
        .render(&[Message::system("S"), Message::user("Hi")], true)
        .unwrap();
    assert_eq!(s, "[gMASK]<sop><|system|>\nS<|user|>\nHi<|assistant|>\n");
}

/// A ChatML template in the style of Qwen2.5's (default system message when none is given),
/// written for this test.
const CHATML: &str = r#"{%- if messages[0].role != 'system' %}
{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\n' + message.content | trim + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

fn jinja(src: &str) -> ChatTemplate {
    ChatTemplate::Jinja {
        source: src.into(),
        bos_token: "<s>".into(),
        eos_token: "</s>".into(),
    }
}

#[test]
fn chatml_jinja_template() {
    let t = jinja(CHATML);
    let s = t.render(&[Message::user("  Hello ")], true).unwrap();
    assert_eq!(
        s,
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n\
         <|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    );
    let s = t.render(&conversation(), false).unwrap();
    assert_eq!(
        s,
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
    );
}

#[test]
fn jinja_hf_conventions() {
    // trim_blocks/lstrip_blocks, bos_token, Python string methods, raise_exception.
    let t = jinja(
        "{{ bos_token }}\n  {% for m in messages %}\n[{{ m.role.upper() }}]{{ m.content.strip() }}\n  {% endfor %}",
    );
    let s = t
        .render(&[Message::user(" a "), Message::assistant("b")], true)
        .unwrap();
    assert_eq!(s, "<s>\n[USER]a\n[ASSISTANT]b\n");
    let t =
        jinja("{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}ok");
    assert_eq!(t.render(&[Message::user("x")], true).unwrap(), "ok");
    let e = t.render(&conversation(), true).unwrap_err();
    assert!(
        matches!(&e, ChatError::Template { detail } if detail.contains("one message only")),
        "{e}"
    );
    let e = jinja("{% for %}")
        .render(&conversation(), true)
        .unwrap_err();
    assert!(matches!(e, ChatError::Template { .. }), "{e}");
}

#[test]
fn qwen05b_template_from_the_model_file() {
    // The real Qwen2.5 template, from the cached model (the test is skipped without it).
    let path = common::model_dir().join("derived/qwen05b-q4_0.gguf");
    if !path.exists() {
        eprintln!("SKIPPED: {} is not cached", path.display());
        return;
    }
    let model = Model::load(&path).expect("load qwen05b");
    let t = ChatTemplate::for_model(&model).expect("the model has a template");
    assert!(matches!(t, ChatTemplate::Jinja { .. }));
    let s = t.render(&[Message::user("Hello")], true).unwrap();
    assert_eq!(
        s,
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n\
         <|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    );
    let s = t.render(&conversation(), true).unwrap();
    assert_eq!(
        s,
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    // The special tokens of the rendered prompt are parsed: one id each.
    let ids = encode_prompt(model.tokenizer(), &s).unwrap();
    let im_start = model.tokenizer().vocab().token_id("<|im_start|>").unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == im_start).count(), 5);
}

fn tiny(name: &str) -> Arc<Model> {
    let p = common::reference_dir().join("tiny").join(name);
    Arc::new(Model::load(p).expect("load tiny model"))
}

#[test]
fn format_per_model() {
    // chatglm without a template: the built-in ChatGLM3 format.
    let glm = tiny("tiny-chatglm-f16.gguf");
    assert_eq!(
        ChatTemplate::for_model(&glm).unwrap(),
        ChatTemplate::ChatGlm3
    );
    // llama without a template: a clear error.
    let llama = tiny("tiny-llama-f16.gguf");
    let e = ChatTemplate::for_model(&llama).unwrap_err();
    assert!(matches!(e, ChatError::NoTemplate { arch: "llama" }));
    assert!(e.to_string().contains("no chat template"), "{e}");
    let s = Session::new(llama, SessionParams::default()).unwrap();
    assert!(matches!(
        Chat::new(s),
        Err(LlamaError::Chat(ChatError::NoTemplate { .. }))
    ));
}

#[test]
fn multi_turn_chat_reuses_the_cache() {
    let model = tiny("tiny-chatglm-f16.gguf");
    let params = SessionParams {
        n_ctx: 256,
        n_threads: 2,
        ..Default::default()
    };
    let mut chat = Chat::new(Session::new(model.clone(), params).unwrap()).unwrap();
    chat.set_system(Some("Be brief.".into()));
    let gen = common::greedy(6);
    let first = chat
        .send("Hello there", &gen, |_| ControlFlow::Continue(()))
        .unwrap();
    let whole1 = encode_prompt(
        model.tokenizer(),
        "[gMASK]sop<|system|>\n Be brief.<|user|>\n Hello there<|assistant|>",
    )
    .unwrap();
    assert_eq!(first.prompt_tokens, whole1, "first turn: the whole prompt");
    assert_eq!(chat.messages().len(), 2);
    let cached_after_first = chat.cached_tokens();
    assert_eq!(cached_after_first, whole1.len() + first.tokens.len() - 1);

    let mut streamed = String::new();
    let second = chat
        .send("And now?", &gen, |ev| {
            streamed.push_str(&ev.text);
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(streamed, second.text);
    // The second turn evaluates only what the cache does not hold.
    // (At least the first turn's prompt is reused; the reply is re-tokenized from its text,
    // so the cache may be reused only up to where its tokens differ.)
    assert!(chat.cached_tokens() > cached_after_first);

    // Independent check: a fresh session evaluating the whole second prompt at once makes
    // the same greedy tokens.
    let text2 = ChatTemplate::ChatGlm3
        .render(
            &[
                Message::system("Be brief."),
                Message::user("Hello there"),
                Message::assistant(first.text.clone()),
                Message::user("And now?"),
            ],
            true,
        )
        .unwrap();
    let whole2 = encode_prompt(model.tokenizer(), &text2).unwrap();
    assert_eq!(
        second.prompt_tokens, whole2,
        "the second turn's whole prompt"
    );
    let evaluated = second.prompt_tokens.len() - second.cached_tokens;
    assert!(
        second.cached_tokens >= whole1.len() && evaluated <= whole2.len() - whole1.len(),
        "{evaluated} new tokens of {} ({} kept)",
        whole2.len(),
        second.cached_tokens
    );
    let mut fresh = Session::new(model.clone(), params).unwrap();
    fresh.eval(&whole2, false).unwrap();
    let mut ours = Vec::new();
    for _ in 0..second.tokens.len() {
        let t = argmax(fresh.logits());
        ours.push(t);
        fresh.eval(&[t], false).unwrap();
    }
    assert_eq!(ours, second.tokens);

    chat.reset();
    assert_eq!(chat.cached_tokens(), 0);
    assert!(chat.messages().is_empty());
}
