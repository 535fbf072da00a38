//! The Python package (`ggrs-py`): `scripts/test-python-package.sh` installs it with
//! `pip install ./ggrs-py` into a venv (`~/.cache/ggrs/venv-package`, maturin, numpy and
//! pytest from PyPI) and runs its pytest suite (`ggrs-py/tests`) against llama.cpp's
//! reference outputs and this build's `ggrs`. `GGRS_SKIP_PYTHON_TESTS=1` skips it (for a
//! machine without Python or network access).

use std::path::Path;
use std::process::Command;

#[test]
fn python_package_against_the_references_and_the_cli() {
    if std::env::var("GGRS_SKIP_PYTHON_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: GGRS_SKIP_PYTHON_TESTS=1");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new("bash")
        .arg(root.join("scripts/test-python-package.sh"))
        .env("GGRS_BIN", env!("CARGO_BIN_EXE_ggrs"))
        // `cargo test` holds the lock of the workspace's target directory while tests run:
        // the package is built in a directory of its own.
        .env("CARGO_TARGET_DIR", root.join("target/python"))
        .current_dir(&root)
        .status()
        .expect("run bash scripts/test-python-package.sh");
    assert!(
        status.success(),
        "the Python package tests failed ({status}); their output is above"
    );
}
