//! The Python package's pytest suite (`ggrs-py/tests/*.py`) on the extension module that this
//! `cargo test` build compiled (`lib_ggrs.so` beside this test's executable: the crate is an
//! rlib as well as a cdylib so that cargo builds it for this test), with `ggrs-py/python/ggrs`
//! as the package around it: `scripts/test-python-package.sh` with `GGRS_PY_EXTENSION` set.
//! It runs the tiny models of every architecture and the real q4_0 model against llama.cpp's
//! reference outputs and compares with the `ggrs` command of the same build.
//!
//! Without `GGRS_PY_EXTENSION` the script installs the package as users do
//! (`pip install ./ggrs-py`, a release build of its own): run it by hand before a release.
//! `GGRS_SKIP_PYTHON_TESTS=1` skips this test (a machine without Python or PyPI access).

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn python_package_against_the_references_and_the_cli() {
    if std::env::var("GGRS_SKIP_PYTHON_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: GGRS_SKIP_PYTHON_TESTS=1");
        return;
    }
    let exe = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/python_package-<hash>: the extension is in deps/, `ggrs` one up.
    let deps = exe.parent().expect("the test executable is in a directory");
    let extension = deps.join(format!("lib_ggrs{}", std::env::consts::DLL_SUFFIX));
    assert!(
        extension.is_file(),
        "{} is missing: cargo builds it with this test (ggrs-py is an rlib and a cdylib)",
        extension.display()
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("scripts/test-python-package.sh"))
        .env("GGRS_PY_EXTENSION", &extension)
        .current_dir(&root);
    // The `ggrs` command of this build (`cargo test --workspace` builds it for ggrs-cli's
    // tests); otherwise the suite looks for one itself.
    let ggrs: Option<PathBuf> = deps
        .parent()
        .map(|d| d.join(format!("ggrs{}", std::env::consts::EXE_SUFFIX)))
        .filter(|p| p.is_file());
    if let Some(ggrs) = &ggrs {
        cmd.env("GGRS_BIN", ggrs);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("run bash scripts/test-python-package.sh: {e}"));
    assert!(
        status.success(),
        "the Python package tests failed ({status}); their output is above"
    );
}
