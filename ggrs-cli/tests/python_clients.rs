//! Real Python clients against this build's `ggrs serve`, run by `scripts/test-python.sh`
//! (`GGRS_SKIP_PYTHON_TESTS=1` skips them, for a machine without Python or network access):
//! the official `openai` and `anthropic` Python packages and the chat page in headless Chromium
//! (`tests/python/`; a venv in `~/.cache/ggrs/venv` from PyPI, and the Debian package
//! `chromium` when it is missing). The Python package's own suite is
//! `ggrs-py/tests/python_package.rs`.

use std::path::Path;
use std::process::Command;

#[test]
fn openai_client_and_chat_page_against_ggrs_serve() {
    if std::env::var("GGRS_SKIP_PYTHON_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: GGRS_SKIP_PYTHON_TESTS=1");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new("bash")
        .arg(root.join("scripts/test-python.sh"))
        .env("GGRS_BIN", env!("CARGO_BIN_EXE_ggrs"))
        .current_dir(&root)
        .status()
        .unwrap_or_else(|e| panic!("run bash scripts/test-python.sh: {e}"));
    assert!(
        status.success(),
        "the Python client tests failed ({status}); their output is above"
    );
}
