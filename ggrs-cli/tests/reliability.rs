//! `ggrs` never loses a user's file and ends bad input with `error: …` and exit status 1:
//! outputs that are the input under another name, files of a convert input directory,
//! device outputs, oversized sessions, bad numeric options.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::ggrs;

fn tiny() -> String {
    common::reference("tiny/tiny-llama-f16.gguf")
}

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-reliab-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs ggrs and checks it failed with exit status 1 and an `error:` line; returns stderr.
fn fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ggrs"))
        .args(args)
        .output()
        .expect("run ggrs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains("error: "), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    err
}

#[test]
fn quantize_refuses_its_input_under_any_name() {
    let d = scratch("same");
    let q = d.join("q");
    std::fs::create_dir_all(&q).unwrap();
    let input = q.join("in.gguf");
    std::fs::copy(tiny(), &input).unwrap();
    let original = std::fs::read(&input).unwrap();
    std::fs::hard_link(&input, q.join("hard.gguf")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("in.gguf", q.join("link.gguf")).unwrap();
    let abs = std::fs::canonicalize(&input).unwrap();
    let dotted = q.join("../q/./in.gguf");
    let mut outs = vec![abs, dotted, q.join("hard.gguf")];
    #[cfg(unix)]
    outs.push(q.join("link.gguf"));
    for out in &outs {
        let err = fails(&["quantize", s(&input), s(out), "q8_0"]);
        assert!(err.contains("same file as the input"), "{err}");
    }
    assert_eq!(std::fs::read(&input).unwrap(), original);
    // A different existing file is replaced whole.
    let other = q.join("other.gguf");
    std::fs::write(&other, b"old").unwrap();
    let (ok, _, err) = ggrs(&["quantize", s(&input), s(&other), "q8_0"]);
    assert!(ok, "{err}");
    assert!(std::fs::metadata(&other).unwrap().len() > 1000);
    assert_eq!(std::fs::read(&input).unwrap(), original);
    let mut names: Vec<String> = std::fs::read_dir(&q)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut expect = vec!["hard.gguf", "in.gguf", "other.gguf"];
    if cfg!(unix) {
        expect.insert(2, "link.gguf");
    }
    assert_eq!(names, expect);
}

#[test]
fn convert_refuses_outputs_that_are_files_of_its_input_directory() {
    let d = scratch("convert");
    let src = common::reference("chatglm6b-v1/tiny_model");
    let ck = d.join("ck");
    std::fs::create_dir_all(&ck).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(Path::new(&src).join(f), ck.join(f)).unwrap();
    }
    let before: Vec<Vec<u8>> = ["config.json", "model.safetensors"]
        .iter()
        .map(|f| std::fs::read(ck.join(f)).unwrap())
        .collect();
    for f in ["model.safetensors", "config.json", "./"] {
        let out = ck.join(f);
        let err = fails(&["convert", s(&ck), s(&out), "--outtype", "f32"]);
        assert!(
            err.contains("same file as the input") || err.contains("directory"),
            "{f}: {err}"
        );
    }
    // A new file in the directory is fine.
    let (ok, _, err) = ggrs(&["convert", s(&ck), s(&ck.join("new.gguf"))]);
    assert!(ok, "{err}");
    let after: Vec<Vec<u8>> = ["config.json", "model.safetensors"]
        .iter()
        .map(|f| std::fs::read(ck.join(f)).unwrap())
        .collect();
    assert!(before == after, "an input file changed");
}

#[cfg(target_os = "linux")]
#[test]
fn device_outputs_are_written_through_never_deleted() {
    use std::os::unix::fs::FileTypeExt;
    let (ok, _, err) = ggrs(&["quantize", &tiny(), "/dev/null", "q8_0"]);
    assert!(ok, "{err}");
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    let d = scratch("dev");
    let node = d.join("n");
    // The issue's case: `mknod n c 1 3` (a /dev/null), and /dev/full's numbers where every
    // write fails. Making nodes needs root: without it this part is skipped.
    for (minor, should_work) in [(3, true), (7, false)] {
        let _ = std::fs::remove_file(&node);
        let made = Command::new("mknod")
            .args([s(&node), "c", "1", &minor.to_string()])
            .status()
            .is_ok_and(|st| st.success());
        if !made {
            eprintln!("skipped: mknod is not permitted here");
            return;
        }
        if should_work {
            let (ok, _, err) = ggrs(&["quantize", &tiny(), s(&node), "q8_0"]);
            assert!(ok, "{err}");
        } else {
            fails(&["quantize", &tiny(), s(&node), "q8_0"]);
        }
        assert!(std::fs::metadata(&node)
            .unwrap()
            .file_type()
            .is_char_device());
    }
}

#[test]
fn sessions_too_large_for_memory_name_the_option() {
    let m = tiny();
    let big = "100000000000";
    let err = fails(&["run", "-m", &m, "-p", "hi", "-n", "1", "-c", big]);
    assert!(
        err.contains("-c (--ctx-size)") && err.contains("bytes"),
        "{err}"
    );
    let err = fails(&["run", "-m", &m, "-p", "hi", "-n", "1", "-c", big, "-b", big]);
    assert!(err.contains("-b (--batch-size)"), "{err}");
    let text = scratch("ppl").join("t.txt");
    std::fs::write(
        &text,
        "one two three four five six seven eight nine ten ".repeat(20),
    )
    .unwrap();
    let err = fails(&["perplexity", "-m", &m, "-f", s(&text), "--chunk", big]);
    assert!(err.contains("--chunk"), "{err}");
    let err = fails(&["bench", "-m", &m, "-p", big, "-n", "0", "-r", "1"]);
    assert!(err.contains("-p (--n-prompt)"), "{err}");
}

#[test]
fn bad_numeric_options_are_errors_naming_the_option() {
    let m = tiny();
    let text = scratch("num").join("t.txt");
    std::fs::write(
        &text,
        "one two three four five six seven eight nine ten ".repeat(20),
    )
    .unwrap();
    for chunk in ["0", "3"] {
        let err = fails(&["perplexity", "-m", &m, "-f", s(&text), "--chunk", chunk]);
        assert!(err.contains("--chunk"), "{err}");
    }
    for (opt, v) in [
        ("--frequency-penalty", "-inf"),
        ("--presence-penalty", "nan"),
        ("--temp", "inf"),
        ("--repeat-penalty", "inf"),
        ("--top-p", "nan"),
        ("--min-p", "2"),
    ] {
        let arg = format!("{opt}={v}");
        let err = fails(&["run", "-m", &m, "-p", "hi", "-n", "2", &arg]);
        assert!(err.contains(opt), "{opt}: {err}");
    }
    let err = fails(&["run", "-m", &m, "-p", "hi", "-n", "2", "-b", "0"]);
    assert!(err.contains("-b"), "{err}");
}

#[test]
fn too_many_threads_are_clamped_and_a_long_context_warned() {
    let m = tiny();
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (ok, _, err) = ggrs(&[
        "run", "-m", &m, "-p", "hi", "-n", "2", "-t", "5000", "-s", "1",
    ]);
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!("-t 5000 is more than the {logical} logical cores")),
        "{err}"
    );
    // The tiny model's training context, read independently from its file.
    let g = ggrs_core::gguf::GgufFile::open(&m).unwrap();
    let train = g
        .get("llama.context_length")
        .and_then(|v| v.as_u64())
        .unwrap();
    let c = (train + 1).to_string();
    let (ok, _, err) = ggrs(&["run", "-m", &m, "-p", "hi", "-n", "2", "-c", &c, "-s", "1"]);
    assert!(ok, "{err}");
    assert!(
        err.contains("warning:") && err.contains(&format!("{train} tokens the model was trained")),
        "{err}"
    );
    let c = train.to_string();
    let (ok, _, err) = ggrs(&["run", "-m", &m, "-p", "hi", "-n", "2", "-c", &c, "-s", "1"]);
    assert!(ok, "{err}");
    assert!(!err.contains("warning:"), "{err}");
}
