//! `ggrs split` and split models on the command line: splitting, merging back, the commands
//! that take a model reading the parts, and the errors (non-zero exit, a message naming the
//! file).

use crate::common;

use common::ggrs;
use std::path::PathBuf;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("ggrs-cli-split-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tiny() -> String {
    common::reference("tiny/tiny-llama-f16.gguf")
}

/// `ggrs run` greedy, as JSON: the generated token ids.
fn greedy_tokens(model: &str) -> Vec<u64> {
    let (ok, out, err) = ggrs(&[
        "run",
        "-m",
        model,
        "-p",
        "Once upon",
        "-n",
        "6",
        "--temp",
        "0",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

#[test]
fn split_run_inspect_quantize_and_merge() {
    let d = TempDir::new("cycle");
    let prefix = d.path("tiny");
    // 30 tensors, 12 a part: three parts.
    let (ok, out, err) = ggrs(&["split", "--split-max-tensors", "12", &tiny(), &prefix]);
    assert!(ok, "{err}");
    let parts: Vec<&str> = out.lines().collect();
    assert_eq!(
        parts,
        [1, 2, 3].map(|i| format!("{prefix}-0000{i}-of-00003.gguf")),
        "{out}"
    );
    assert!(err.contains("3 parts"), "{err}");
    let first = parts[0].to_owned();

    // The model commands read the parts as the single file.
    assert_eq!(greedy_tokens(&first), greedy_tokens(&tiny()));
    let (ok, out, err) = ggrs(&["inspect", &first]);
    assert!(ok, "{err}");
    assert!(out.contains("split model, 3 parts"), "{out}");
    assert!(out.contains("tiny-00003-of-00003.gguf"), "{out}");
    assert!(
        out.contains(" 30 tensors") || out.contains("30 tensors,"),
        "{out}"
    );
    let (ok, out, err) = ggrs(&["bench", "-m", &first, "-p", "8", "-n", "2", "-r", "1"]);
    assert!(ok, "{err}");
    assert!(out.contains("pp8") && out.contains("tg2"), "{out}");

    // Quantizing a split model writes one file, without the split keys.
    let q = d.path("q8.gguf");
    let (ok, _, err) = ggrs(&["quantize", &first, &q, "q8_0"]);
    assert!(ok, "{err}");
    let (ok, out, err) = ggrs(&["inspect", &q, "--no-tensors"]);
    assert!(ok, "{err}");
    assert!(!out.contains("split."), "{out}");
    assert_eq!(greedy_tokens(&q).len(), 6);
    // No part can be the output.
    let (ok, _, err) = ggrs(&["quantize", &first, parts[2], "q8_0"]);
    assert!(!ok);
    assert!(err.contains("same file as the input"), "{err}");

    // Merging gives back the original bytes.
    let merged = d.path("merged.gguf");
    let (ok, out, err) = ggrs(&["split", "--merge", &first, &merged]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), merged);
    assert!(
        std::fs::read(&merged).unwrap() == std::fs::read(tiny()).unwrap(),
        "the merged file differs from the original"
    );

    // Existing outputs are refused without --force, replaced with it.
    let (ok, _, err) = ggrs(&["split", "--merge", &first, &merged]);
    assert!(!ok);
    assert!(
        err.starts_with("error:") && err.contains("exists already") && err.contains(&merged),
        "{err}"
    );
    let (ok, _, err) = ggrs(&["split", "--split-max-tensors", "12", &tiny(), &prefix]);
    assert!(!ok);
    assert!(
        err.contains("tiny-00001-of-00003.gguf") && err.contains("--force"),
        "{err}"
    );
    let (ok, _, err) = ggrs(&[
        "split",
        "--split-max-tensors",
        "12",
        "--force",
        &tiny(),
        &prefix,
    ]);
    assert!(ok, "{err}");
    let (ok, _, err) = ggrs(&["split", "--merge", "--force", &first, &merged]);
    assert!(ok, "{err}");

    // A later part names the first.
    let (ok, _, err) = ggrs(&["run", "-m", parts[1], "-p", "hi", "-n", "1"]);
    assert!(!ok);
    assert!(err.contains("part 2 of 3") && err.contains(&first), "{err}");
    // A missing part is named.
    std::fs::remove_file(parts[2]).unwrap();
    let (ok, _, err) = ggrs(&["inspect", &first]);
    assert!(!ok);
    assert!(err.contains(parts[2]) && err.contains("missing"), "{err}");
}

#[test]
fn split_by_size_and_dry_run() {
    let d = TempDir::new("size");
    let prefix = d.path("m");
    let (ok, out, err) = ggrs(&[
        "split",
        "--split-max-size",
        "10M",
        "--dry-run",
        &tiny(),
        &prefix,
    ]);
    assert!(ok, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("2 parts"), "{err}");
    assert!(
        std::fs::read_dir(&d.0).unwrap().next().is_none(),
        "a dry run wrote files"
    );
    let (ok, out, err) = ggrs(&["split", "--split-max-size", "10M", &tiny(), &prefix]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    let first = out.lines().next().unwrap();
    assert_eq!(greedy_tokens(first), greedy_tokens(&tiny()));
}

#[test]
fn bad_split_arguments_are_errors() {
    let d = TempDir::new("bad");
    let prefix = d.path("m");
    for size in ["10K", "0M", "1.5G", "G"] {
        let (ok, _, err) = ggrs(&["split", "--split-max-size", size, &tiny(), &prefix]);
        assert!(!ok, "{size}");
        assert!(err.contains(&format!("--split-max-size {size}")), "{err}");
    }
    // The first tensor alone is larger than the limit.
    let (ok, _, err) = ggrs(&["split", "--split-max-size", "1M", &tiny(), &prefix]);
    assert!(!ok);
    assert!(
        err.contains("token_embd.weight") && err.contains("larger"),
        "{err}"
    );
    let (ok, _, err) = ggrs(&["split", "--split-max-tensors", "0", &tiny(), &prefix]);
    assert!(!ok);
    assert!(err.contains("at least 1"), "{err}");
    // Two limits, or a limit with --merge, are refused by the argument parser.
    let (ok, _, _) = ggrs(&[
        "split",
        "--split-max-size",
        "10M",
        "--split-max-tensors",
        "3",
        &tiny(),
        &prefix,
    ]);
    assert!(!ok);
    let (ok, _, _) = ggrs(&[
        "split",
        "--merge",
        "--split-max-tensors",
        "3",
        &tiny(),
        &prefix,
    ]);
    assert!(!ok);
    // Merging a file that is not split.
    let (ok, _, err) = ggrs(&["split", "--merge", &tiny(), &d.path("out.gguf")]);
    assert!(!ok);
    assert!(err.contains("not a split model"), "{err}");
    assert!(!d.0.join("out.gguf").exists());
}
