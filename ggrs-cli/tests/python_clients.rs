//! Real clients against `ggrs serve`: the official `openai` Python package and the chat page
//! in headless Chromium (`tests/python/`, run by `scripts/test-python.sh` with this build's
//! `ggrs`). The script makes a venv in `~/.cache/ggrs/venv` (pip, from PyPI) and installs the
//! Debian package `chromium` when it is missing. `GGRS_SKIP_PYTHON_TESTS=1` skips it (for a
//! machine without Python or network access).

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
        .expect("run bash scripts/test-python.sh");
    assert!(
        status.success(),
        "the Python client tests failed ({status}); their output is above"
    );
}
