//! Careless operators (issue 32): every mistake gets a message that says what is wrong and
//! exit status 1 (as the README says), never a hang, a clap "unknown flag" (status 2) or a
//! silently wrong setting.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tiny() -> String {
    common::reference("tiny/tiny-llama-f16.gguf")
}

/// Runs `ggrs args`, killed after `secs`: exit code (None: killed) and stderr.
fn ggrs(args: &[&str], secs: u64) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ggrs"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ggrs");
    let t0 = Instant::now();
    let code = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s.code();
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    (code, err)
}

#[test]
fn a_directory_or_a_device_as_model_says_what_it_is() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let (code, err) = ggrs(&["run", "-m", dir, "-p", "hi"], 30);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is a directory"), "{err}");
    let (code, err) = ggrs(&["run", "-m", "/dev/zero", "-p", "hi"], 30);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
}

#[test]
fn negative_numbers_are_values_not_flags() {
    let m = tiny();
    // -1 means random / greedy / no limit, as llama.cpp reads them.
    for args in [
        &["--seed", "-1", "-n", "2"][..],
        &["--temp", "-1", "-n", "2"][..],
        &["-n", "-1", "--seed", "1"][..],
    ] {
        let mut all = vec!["run", "-m", &m, "-p", "Hi"];
        all.extend_from_slice(args);
        let (code, err) = ggrs(&all, 60);
        assert_eq!(code, Some(0), "{args:?}: {err}");
    }
    for (args, words) in [
        (&["-n", "-5"][..], "-n must be"),
        (&["--seed", "-7"][..], "--seed must be"),
    ] {
        let mut all = vec!["run", "-m", &m, "-p", "Hi"];
        all.extend_from_slice(args);
        let (code, err) = ggrs(&all, 60);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err}");
    }
}

#[test]
fn serve_refuses_an_empty_key_and_an_unusable_template() {
    let m = tiny();
    let (code, err) = ggrs(&["serve", "-m", &m, "--port", "0", "--api-key", ""], 20);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--api-key"), "{err}");
    for t in ["/nonexistent", "{% if %}"] {
        let (code, err) = ggrs(
            &["serve", "-m", &m, "--port", "0", "--chat-template", t],
            30,
        );
        assert_eq!(code, Some(1), "{t}: {err}");
        assert!(err.contains("--chat-template"), "{t}: {err}");
    }
}

#[test]
fn run_chat_with_a_runaway_template_is_an_error() {
    let t = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
    let (code, err) = ggrs(
        &[
            "run",
            "-m",
            &tiny(),
            "--chat",
            "-p",
            "hi",
            "--chat-template",
            t,
        ],
        60,
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("budget"), "{err}");
}
