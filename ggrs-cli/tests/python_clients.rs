//! Python against this build, each suite run by its script with this build's `ggrs`
//! (`GGRS_SKIP_PYTHON_TESTS=1` skips them, for a machine without Python or network access):
//! - real clients against `ggrs serve`: the official `openai` Python package and the chat page
//!   in headless Chromium (`tests/python/`, `scripts/test-python.sh`; a venv in
//!   `~/.cache/ggrs/venv` from PyPI, and the Debian package `chromium` when it is missing);
//! - the Python package: `scripts/test-python-package.sh` installs `ggrs-py` with
//!   `pip install ./ggrs-py` into `~/.cache/ggrs/venv-package` (maturin, numpy and pytest
//!   from PyPI) and runs its pytest suite (`ggrs-py/tests`) against llama.cpp's reference
//!   outputs and this `ggrs`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The suites run one after the other (they time servers and pages; a package build beside
/// them would slow them down).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `scripts/<script>` with `GGRS_BIN` set and `env`; false when skipped.
fn run_script(script: &str, what: &str, env: &[(&str, PathBuf)]) -> bool {
    if std::env::var("GGRS_SKIP_PYTHON_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: GGRS_SKIP_PYTHON_TESTS=1");
        return false;
    }
    // A suite that failed poisons the lock; the next one still runs.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let root = root();
    let status = Command::new("bash")
        .arg(root.join("scripts").join(script))
        .env("GGRS_BIN", env!("CARGO_BIN_EXE_ggrs"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .current_dir(&root)
        .status()
        .unwrap_or_else(|e| panic!("run bash scripts/{script}: {e}"));
    assert!(
        status.success(),
        "the {what} failed ({status}); their output is above"
    );
    true
}

#[test]
fn openai_client_and_chat_page_against_ggrs_serve() {
    run_script("test-python.sh", "Python client tests", &[]);
}

#[test]
fn python_package_against_the_references_and_the_cli() {
    // `cargo test` holds the lock of the workspace's target directory while tests run: the
    // package is built in a directory of its own.
    let target = root().join("target/python");
    run_script(
        "test-python-package.sh",
        "Python package tests",
        &[("CARGO_TARGET_DIR", target)],
    );
}
