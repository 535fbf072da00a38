//! Helpers shared by the `ggrs` command-line tests: running the binary built for the tests
//! and locating the reference data (`shared/reference`, beside the repository).
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `ggrs args` to completion: whether it exited successfully, its stdout, its stderr.
pub fn ggrs(args: &[&str]) -> (bool, String, String) {
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

/// Runs `ggrs args` with `input` written to its stdin (then closed) and waits for it.
pub fn ggrs_with_stdin(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ggrs"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ggrs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    child.wait_with_output().expect("wait")
}

/// The path of `shared/reference/<rel>`: the first `shared/reference` going up from this
/// crate (the repository may be a worktree nested deeper than the main checkout).
pub fn reference(rel: &str) -> String {
    // A checkout elsewhere than beside `shared/` (a worktree) names it explicitly.
    if let Some(d) = std::env::var_os("GGRS_REFERENCE_DIR") {
        return format!("{}/{rel}", d.to_string_lossy());
    }
    format!(
        "{}/../../shared/reference/{rel}",
        env!("CARGO_MANIFEST_DIR")
    )
}
