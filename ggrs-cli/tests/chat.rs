//! `ggrs run --chat` and `ggrs chat` on the tiny ChatGLM model (which carries no template, so
//! the built-in ChatGLM3 format applies) and the error for a model without any format; `ggrs
//! chat` and `ggrs tokenize` on a ChatGLM-6B v1 (`chatglm1`) file, checked against the
//! official prompt rule and tokenizer written plainly in `glm1_chat.rs`; `--no-think` on a
//! copy of the tiny Llama 3 model carrying Qwen3's template.

use crate::common;
#[path = "../../ggrs-llama/tests/common/glm1_chat.rs"]
mod glm1_chat;
use crate::llama_common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::{ggrs, ggrs_with_stdin};

fn tiny(name: &str) -> String {
    common::reference(&format!("tiny/{name}"))
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("array of ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn run_chat_formats_the_prompt() {
    let glm = tiny("tiny-chatglm-f16.gguf");
    let (ok, out, err) = ggrs(&[
        "run",
        "-m",
        &glm,
        "-p",
        "Hello",
        "--system",
        "Be brief.",
        "--chat",
        "--temp",
        "0",
        "-n",
        "4",
        "--json",
        "-t",
        "2",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json output");
    // The prompt is the ChatGLM3 string, tokenized with special tokens parsed (this tiny
    // vocabulary has none of ChatGLM's, so they are plain text here) and no BOS.
    let tok = ggrs_llama::Tokenizer::open(&glm).unwrap();
    let want = tok
        .encode(
            "[gMASK]sop<|system|>\n Be brief.<|user|>\n Hello<|assistant|>",
            false,
            true,
        )
        .unwrap();
    assert_eq!(ids(&v["prompt_tokens"]), want);
    assert_eq!(ids(&v["tokens"]).len(), 4);

    // Without --chat the prompt is used as it is.
    let (ok, out, err) = ggrs(&[
        "run", "-m", &glm, "-p", "Hello", "--temp", "0", "-n", "1", "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        ids(&v["prompt_tokens"]),
        tok.encode("Hello", true, true).unwrap()
    );

    // --system needs --chat.
    let (ok, _, err) = ggrs(&["run", "-m", &glm, "-p", "x", "--system", "s"]);
    assert!(!ok && err.contains("--chat"), "{err}");
}

#[test]
fn run_chat_without_a_format_is_an_error() {
    let (ok, _, err) = ggrs(&[
        "run",
        "-m",
        &tiny("tiny-llama-f16.gguf"),
        "-p",
        "Hello",
        "--chat",
    ]);
    assert!(!ok);
    assert!(
        err.starts_with("error:") && err.contains("no chat template"),
        "{err}"
    );
}

#[test]
fn chat_repl_keeps_the_context() {
    let out = ggrs_with_stdin(
        &[
            "chat",
            "-m",
            &tiny("tiny-chatglm-f16.gguf"),
            "--temp",
            "0",
            "-n",
            "5",
            "-t",
            "2",
        ],
        "Hello there\n\n/reset\nHi\nAnd then?\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Three turns (the empty line is skipped), one status line each.
    let turns: Vec<&str> = err.lines().filter(|l| l.contains("[prompt:")).collect();
    assert_eq!(turns.len(), 3, "{err}");
    assert!(err.contains("(conversation cleared)"), "{err}");
    let number = |l: &str, key: &str| -> usize {
        let i = l.find(key).expect("key") + key.len();
        l[i..]
            .split_whitespace()
            .next()
            .and_then(|w| w.parse().ok())
            .expect("a number")
    };
    // After /reset the whole prompt is evaluated; the next turn only its new part.
    let first_after_reset = number(turns[1], "[prompt: ");
    let context_after_reset = number(turns[1], "context: ");
    let next = number(turns[2], "[prompt: ");
    assert!(context_after_reset >= first_after_reset);
    assert!(
        number(turns[2], "context: ") > context_after_reset,
        "context grows: {err}"
    );
    assert!(next > 0);
}

/// The tiny ChatGLM-6B v1 checkpoint, converted once, with its made-up vocabulary.
fn glm1_file() -> String {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    let p = FILE.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cli-chat-glm1-{}", std::process::id()));
        glm1_chat::tiny_glm1_with_vocab(&dir)
    });
    p.display().to_string()
}

/// The greedy reply of the tiny v1 model to `ids` (at most `n` tokens), from the library.
fn glm1_reply(path: &str, ids: &[u32], n: usize) -> String {
    use std::ops::ControlFlow;
    use std::sync::Arc;
    let model = Arc::new(ggrs_llama::Model::load(path).unwrap());
    let mut s = ggrs_llama::Session::new(model, ggrs_llama::SessionParams::default()).unwrap();
    let params = ggrs_llama::GenerateParams {
        max_tokens: n,
        sampling: ggrs_llama::SamplingParams::greedy(),
        ..Default::default()
    };
    s.generate_tokens(ids, &params, |_| ControlFlow::Continue(()))
        .unwrap()
        .text
}

/// `ggrs chat` on a chatglm1 file: each turn's prompt is the official one (the bare
/// question, then `[Round i]` blocks with the earlier reply), evaluated whole every turn.
#[test]
fn chat_repl_on_chatglm1_uses_the_official_rounds() {
    let path = glm1_file();
    let (q0, q1) = ("hi", "a\tb  c 2");
    let input = format!("{q0}\n{q1}\n/quit\n");
    let out = ggrs_with_stdin(
        &["chat", "-m", &path, "--temp", "0", "-n", "4", "-t", "2"],
        &input,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{err}");
    let turns: Vec<&str> = err.lines().filter(|l| l.contains("[prompt:")).collect();
    assert_eq!(turns.len(), 2, "{err}");
    let new_tokens = |l: &str| -> usize {
        let i = l.find("[prompt: ").expect("key") + "[prompt: ".len();
        l[i..].split_whitespace().next().unwrap().parse().unwrap()
    };
    let ids0 = glm1_chat::official_ids(&glm1_chat::official_prompt(&[], q0));
    let r0 = glm1_reply(&path, &ids0, 4);
    let first = format!("{r0}\n");
    assert!(stdout.starts_with(&first), "{stdout:?} vs {r0:?}");
    let ids1 = glm1_chat::official_ids(&glm1_chat::official_prompt(&[(q0, r0.trim())], q1));
    assert_eq!(new_tokens(turns[0]), ids0.len(), "{err}");
    assert_eq!(
        new_tokens(turns[1]),
        ids1.len(),
        "turn 2 evaluates the whole two-round prompt: {err}"
    );
    let r1 = glm1_reply(&path, &ids1, 4);
    assert_eq!(stdout, format!("{r0}\n{r1}\n"));

    // No system role in the v1 format.
    let (ok, _, err) = ggrs(&["chat", "-m", &path, "--system", "s"]);
    assert!(!ok && err.contains("no system message"), "{err}");
}

/// `ggrs tokenize` on a chatglm1 file applies the v1 conventions and appends
/// `[gMASK] <sop>` (left out with --no-bos).
#[test]
fn tokenize_chatglm1_applies_the_v1_conventions() {
    let path = glm1_file();
    let text = "ab\n  c\tx 12";
    let want = glm1_chat::official_ids(text);
    let (ok, out, err) = ggrs(&["tokenize", "-m", &path, "-p", text, "--ids"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("{want:?}"));
    let (ok, out, err) = ggrs(&["tokenize", "-m", &path, "-p", text, "--ids", "--no-bos"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("{:?}", &want[..want.len() - 2]));
}

/// `ggrs run --chat --no-think` renders the template with `enable_thinking = false` (Qwen3's
/// then opens the reply with an empty think block), as `--reasoning off` does; without it
/// the block is absent.
#[test]
fn run_chat_no_think_turns_thinking_off() {
    let src = tiny("tiny-llama3-f16.gguf");
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let template = std::fs::read_to_string(
        manifest.join("../ggrs-llama/tests/data/templates/Qwen-Qwen3-0.6B.jinja"),
    )
    .expect("read the Qwen3 template");
    let path = std::env::temp_dir().join(format!("ggrs-cli-no-think-{}.gguf", std::process::id()));
    llama_common::rewrite_gguf_adding(
        src.as_ref(),
        &path,
        |_, v| Some(v.clone()),
        |_, ne| Some(ne.to_vec()),
        vec![(
            "tokenizer.chat_template".to_string(),
            ggrs_core::gguf::Value::String(template),
        )],
        Vec::new(),
    );
    let file = path.to_str().expect("utf-8 temp path").to_string();
    let prompt_tokens = |extra: &[&str]| {
        let mut args = vec![
            "run", "-m", &file, "-p", "Hello", "--chat", "--temp", "0", "-n", "1", "--json", "-t",
            "2",
        ];
        args.extend_from_slice(extra);
        let (ok, out, err) = ggrs(&args);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("json output");
        ids(&v["prompt_tokens"])
    };
    let tok = ggrs_llama::Tokenizer::open(&file).expect("tokenizer");
    let plain = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n";
    let encode = |text: &str| tok.encode(text, true, true).expect("encode");
    let closed = encode(&format!("{plain}<think>\n\n</think>\n\n"));
    assert_eq!(prompt_tokens(&[]), encode(plain));
    assert_eq!(prompt_tokens(&["--no-think"]), closed);
    // llama.cpp's `--reasoning off` (`-rea off`) is --no-think; `on` keeps thinking.
    assert_eq!(prompt_tokens(&["-rea", "off"]), closed);
    assert_eq!(prompt_tokens(&["--reasoning", "on"]), encode(plain));
    let _ = std::fs::remove_file(&path);
}

/// `--chat-template NAME` picks one of llama.cpp's built-in formats for a model without a
/// template (`phi3` on the tiny Phi-3 model); an unknown name is taken as Jinja text.
#[test]
fn run_chat_with_a_named_format() {
    let phi3 = tiny("tiny-phi3-f16.gguf");
    let prompt_tokens = |template: &str| {
        let (ok, out, err) = ggrs(&[
            "run",
            "-m",
            &phi3,
            "-p",
            "Hi",
            "--system",
            "Be brief.",
            "--chat",
            "--chat-template",
            template,
            "--temp",
            "0",
            "-n",
            "1",
            "--json",
            "-t",
            "2",
        ]);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("json output");
        ids(&v["prompt_tokens"])
    };
    let tok = ggrs_llama::Tokenizer::open(&phi3).expect("tokenizer");
    let encode = |text: &str| tok.encode(text, true, true).expect("encode");
    assert_eq!(
        prompt_tokens("phi3"),
        encode("<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n")
    );
    assert_eq!(
        prompt_tokens("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"),
        encode("[system]Be brief.[user]Hi")
    );
}

/// `ggrs run --chat` on the 2026 families, each with its official template
/// and the recurrent hybrids Qwen3.5, LFM2 and Granite 4.0-H with theirs
/// (`--chat-template FILE`, the files of `ggrs-llama/tests/data/templates/`): the prompt
/// tokens are those of llama-server's rendering of the same conversation
/// (`llama-server-renderings.json`), encoded with special tokens parsed and the model's BOS,
/// and the model answers. (Granite 3.3's template writes today's date, so Granite 4.0's is
/// the one checked on the tiny Granite model.)
#[test]
fn run_chat_renders_the_2026_families_as_llama_server() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ggrs-llama/tests/data/templates");
    let renderings: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data.join("llama-server-renderings.json")).expect("renderings"),
    )
    .expect("json");
    let cases = [
        ("tiny-gemma3-f16.gguf", "google-gemma-3-it.jinja"),
        ("tiny-gemma4-f16.gguf", "google-gemma-4-31B-it.jinja"),
        ("tiny-smollm3-f16.gguf", "HuggingFaceTB-SmolLM3-3B.jinja"),
        ("tiny-granite-f16.gguf", "ibm-granite-granite-4.0.jinja"),
        (
            "tiny-mistral3-f16.gguf",
            "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
        ),
        (
            "tiny-phi3-longrope-f16.gguf",
            "microsoft-Phi-4-mini-instruct.jinja",
        ),
        // The recurrent hybrids with their families' templates.
        ("tiny-qwen35-f16.gguf", "Qwen-Qwen3.5-4B.jinja"),
        ("tiny-lfm2-f16.gguf", "LiquidAI-LFM2-8B-A1B.jinja"),
        (
            "tiny-granite-hybrid-f16.gguf",
            "ibm-granite-granite-4.0.jinja",
        ),
    ];
    for (model, template) in cases {
        let path = tiny(model);
        let template_path = data.join(template);
        let (ok, out, err) = ggrs(&[
            "run",
            "-m",
            &path,
            "-p",
            "Hi",
            "--chat",
            "--chat-template",
            template_path.to_str().expect("utf-8 path"),
            "--temp",
            "0",
            "-n",
            "2",
            "--json",
            "-t",
            "1",
        ]);
        assert!(ok, "{model}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("json output");
        let want_text = renderings["renderings"][template]["nosys/True"]
            .as_str()
            .expect("rendering");
        let tok = ggrs_llama::Tokenizer::open(&path).expect("tokenizer");
        let want = tok.encode(want_text, true, true).expect("encode");
        assert_eq!(ids(&v["prompt_tokens"]), want, "{model} with {template}");
        assert_eq!(ids(&v["tokens"]).len(), 2, "{model}");
    }
}
