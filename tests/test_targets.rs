//! Crates that build their integration tests as one binary (`autotests = false` and a
//! `tests/integration.rs` declaring one module per file) do not compile a file that nobody
//! declares: cargo no longer finds `tests/*.rs` by itself there. This test fails when a file
//! of such a `tests/` folder is neither a module of `integration.rs` nor a `[[test]]` of its
//! own, so that a new test file cannot be silently left out of the run.

use std::path::Path;

/// The `path = "..."` values of the `[[test]]` tables of a manifest.
fn declared_test_paths(manifest: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut in_test = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_test = line == "[[test]]";
        } else if in_test {
            if let Some(v) = line.strip_prefix("path") {
                let v = v.trim_start().trim_start_matches('=').trim();
                paths.push(v.trim_matches('"').to_string());
            }
        }
    }
    paths
}

/// The `mod name;` lines of a file (one per line, as `integration.rs` writes them).
fn declared_modules(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn every_test_file_is_built() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for entry in std::fs::read_dir(root).expect("read the workspace root") {
        let dir = entry.expect("a directory entry").path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        if !manifest.lines().any(|l| l.trim() == "autotests = false") {
            continue;
        }
        let tests = dir.join("tests");
        let targets = declared_test_paths(&manifest);
        let modules = std::fs::read_to_string(tests.join("integration.rs"))
            .map(|t| declared_modules(&t))
            .unwrap_or_default();
        for f in std::fs::read_dir(&tests).expect("read a tests folder") {
            let p = f.expect("a directory entry").path();
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let stem = p.file_stem().unwrap().to_string_lossy().to_string();
            let as_target = format!("tests/{stem}.rs");
            assert!(
                modules.contains(&stem) || targets.contains(&as_target),
                "{}: neither a module of tests/integration.rs nor a [[test]] in {}",
                p.display(),
                dir.join("Cargo.toml").display()
            );
            checked += 1;
        }
    }
    // ggrs-core, ggrs-llama, ggrs-server and ggrs-cli have dozens of test files between them.
    assert!(checked > 50, "only {checked} test files found");
}

#[test]
fn manifests_and_modules_are_read() {
    let m = "[package]\nname = \"x\"\n\n[[test]]\nname = \"a\"\npath = \"tests/a.rs\"\n[[bench]]\npath = \"benches/b.rs\"\n";
    assert_eq!(declared_test_paths(m), ["tests/a.rs"]);
    assert_eq!(
        declared_modules("//! doc\nmod common;\npub mod b;\nuse x;\n"),
        ["common", "b"]
    );
}
