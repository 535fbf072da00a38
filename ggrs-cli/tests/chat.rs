//! `ggrs run --chat` and `ggrs chat` on the tiny ChatGLM model (which carries no template, so
//! the built-in ChatGLM3 format applies) and the error for a model without any format.

use std::io::Write;
use std::process::{Command, Stdio};

fn tiny(name: &str) -> String {
    format!(
        "{}/../../shared/reference/tiny/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn ggrs(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ggrs"))
        .args(args)
        .output()
        .expect("run ggrs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_ggrs"))
        .args([
            "chat",
            "-m",
            &tiny("tiny-chatglm-f16.gguf"),
            "--temp",
            "0",
            "-n",
            "5",
            "-t",
            "2",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ggrs chat");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"Hello there\n\n/reset\nHi\nAnd then?\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
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
