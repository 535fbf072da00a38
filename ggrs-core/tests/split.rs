//! Split GGUF models (llama-gguf-split's parts): writing them, reading them as one file,
//! merging them back, the bytes llama.cpp's own tool writes, and every way a set of parts
//! can be wrong.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ggrs_core::gguf::{
    plan_split, split_path, write_merged, write_split, GgufError, GgufFile, GgufWriter, SplitLimit,
    Value, SPLIT_COUNT_KEY, SPLIT_NO_KEY, SPLIT_TENSORS_KEY,
};
use ggrs_core::DType;

fn reference(rel: &str) -> PathBuf {
    std::env::var_os("GGRS_REFERENCE_DIR")
        .map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference"),
            PathBuf::from,
        )
        .join(rel)
}

/// The tiny llama model, or `None` (test skipped) where the reference files are absent.
fn tiny() -> Option<PathBuf> {
    let p = reference("tiny/tiny-llama-f16.gguf");
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipped: {} is absent", p.display());
        None
    }
}

/// llama.cpp's split tool: `LLAMA_GGUF_SPLIT`, else the build beside this checkout.
fn llama_gguf_split() -> Option<PathBuf> {
    let p = std::env::var_os("LLAMA_GGUF_SPLIT").map_or_else(
        || {
            PathBuf::from(
                "/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-gguf-split",
            )
        },
        PathBuf::from,
    );
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "skipped the llama-gguf-split comparison: {} is absent",
            p.display()
        );
        None
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("ggrs-split-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Asserts that `split` reads as `orig`: the same metadata (plus the split keys), the same
/// tensors in the same order with the same bytes.
fn assert_same_model(orig: &GgufFile, split: &GgufFile) {
    let meta: Vec<_> = split
        .metadata()
        .iter()
        .filter(|(k, _)| !k.starts_with("split."))
        .cloned()
        .collect();
    assert_eq!(meta, orig.metadata());
    assert_eq!(split.tensors().len(), orig.tensors().len());
    for (a, b) in orig.tensors().iter().zip(split.tensors()) {
        assert_eq!((&a.name, a.dtype, a.ne), (&b.name, b.dtype, b.ne));
        assert_eq!(orig.tensor_data(a), split.tensor_data(b), "{}", a.name);
        assert!(!split.tensor_data(b).is_empty());
        assert_eq!(split.tensor(&a.name), Some(b));
    }
}

#[test]
fn split_by_tensor_count_reads_as_the_original() {
    let Some(src) = tiny() else { return };
    let d = TempDir::new("count");
    let orig = GgufFile::open(&src).unwrap();
    let n = orig.tensors().len();
    let per = n.div_ceil(3);
    let plan = plan_split(&orig, SplitLimit::Tensors(per)).unwrap();
    assert_eq!(plan.len(), 3);
    let prefix = d.0.join("tiny");
    let mut last = 0;
    let paths = write_split(&orig, &plan, &prefix, |p| last = p.tensors_done).unwrap();
    assert_eq!(last, n);
    assert_eq!(paths[0], d.0.join("tiny-00001-of-00003.gguf"));
    assert_eq!(paths[2], d.0.join("tiny-00003-of-00003.gguf"));

    let split = GgufFile::open(&paths[0]).unwrap();
    assert_same_model(&orig, &split);
    assert_eq!(split.parts().len(), 3);
    for (i, part) in split.parts().iter().enumerate() {
        assert_eq!(part.path, paths[i]);
        assert_eq!(part.n_tensors, plan[i].len());
        assert_eq!(part.size, std::fs::metadata(&paths[i]).unwrap().len());
        // Each part, read alone, has the tensors the split table says, at the same offsets.
        let alone = GgufFile::from_bytes(Arc::new(std::fs::read(&paths[i]).unwrap())).unwrap();
        assert_eq!(alone.get(SPLIT_NO_KEY), Some(&Value::U16(i as u16)));
        assert_eq!(alone.get(SPLIT_COUNT_KEY), Some(&Value::U16(3)));
        assert_eq!(alone.get(SPLIT_TENSORS_KEY), Some(&Value::I32(n as i32)));
        if i > 0 {
            assert_eq!(
                alone.metadata().len(),
                3,
                "later parts hold only the split keys"
            );
        }
        for t in alone.tensors() {
            assert_eq!(split.tensor_part(&t.name), Some((i, t.offset)));
            assert_eq!(
                alone.tensor_data(t),
                split.tensor_data(split.tensor(&t.name).unwrap())
            );
        }
    }
    // Every file is protected from being an output.
    assert_eq!(split.sources().count(), 3);
    // The parts are mapped from their files, not copied: a mapped page can be released (and
    // read back from the file).
    let embd = split.tensor("token_embd.weight").unwrap();
    let before = split.tensor_data(embd).to_vec();
    if cfg!(target_os = "linux") {
        assert!(split.release_pages(split.tensor_data(embd)) > 0);
    }
    assert!(split.tensor_data(embd) == &before[..]);
    let last = split.tensors().last().unwrap();
    assert!(split.release_pages(split.tensor_data(last)) <= last.size);
}

#[test]
fn split_by_size_cuts_before_the_tensor_that_overflows() {
    let Some(src) = tiny() else { return };
    let d = TempDir::new("size");
    let orig = GgufFile::open(&src).unwrap();
    let total: u64 = orig
        .tensors()
        .iter()
        .map(|t| (t.size as u64).next_multiple_of(32))
        .sum();
    let max = total / 2 + 1;
    let plan = plan_split(&orig, SplitLimit::Bytes(max)).unwrap();
    assert!(plan.len() >= 2, "{plan:?}");
    for r in &plan {
        let bytes: u64 = orig.tensors()[r.clone()]
            .iter()
            .map(|t| (t.size as u64).next_multiple_of(32))
            .sum();
        assert!(bytes <= max || r.len() == 1, "{r:?}: {bytes} > {max}");
    }
    let paths = write_split(&orig, &plan, &d.0.join("m"), |_| {}).unwrap();
    assert_same_model(&orig, &GgufFile::open(&paths[0]).unwrap());

    let biggest = orig.tensors().iter().map(|t| t.size).max().unwrap() as u64;
    if orig.tensors()[0].size as u64 == biggest {
        let e = plan_split(&orig, SplitLimit::Bytes(biggest - 1)).unwrap_err();
        assert!(matches!(e, GgufError::SplitPlan { .. }), "{e}");
    }
    assert!(plan_split(&orig, SplitLimit::Tensors(0)).is_err());
    assert!(plan_split(&orig, SplitLimit::Bytes(0)).is_err());
}

#[test]
fn merge_gives_back_the_original_bytes() {
    let Some(src) = tiny() else { return };
    let d = TempDir::new("merge");
    let orig = GgufFile::open(&src).unwrap();
    let plan = plan_split(&orig, SplitLimit::Tensors(7)).unwrap();
    let paths = write_split(&orig, &plan, &d.0.join("m"), |_| {}).unwrap();
    let split = GgufFile::open(&paths[0]).unwrap();
    let out = d.0.join("merged.gguf");
    write_merged(&split, &out, |_| {}).unwrap();
    assert!(
        std::fs::read(&out).unwrap() == std::fs::read(&src).unwrap(),
        "the merged file differs from {}",
        src.display()
    );
    // A part as the output is refused before anything is written.
    let e = write_merged(&split, &paths[1], |_| {}).unwrap_err();
    assert!(e.to_string().contains("same file as the input"), "{e}");
    // A single file is not a split model.
    let e = write_merged(&orig, &d.0.join("x.gguf"), |_| {}).unwrap_err();
    assert!(e.to_string().contains("not a split model"), "{e}");
}

/// llama-gguf-split and ggrs write the same bytes for the same arguments.
#[test]
fn parts_are_the_bytes_llama_gguf_split_writes() {
    let (Some(src), Some(tool)) = (tiny(), llama_gguf_split()) else {
        return;
    };
    let d = TempDir::new("llama");
    let orig = GgufFile::open(&src).unwrap();
    for (args, limit) in [
        (["--split-max-tensors", "5"], SplitLimit::Tensors(5)),
        (["--split-max-size", "10M"], SplitLimit::Bytes(10_000_000)),
    ] {
        let theirs = d.0.join("theirs");
        let st = std::process::Command::new(&tool)
            .args(args)
            .arg(&src)
            .arg(&theirs)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        let plan = plan_split(&orig, limit).unwrap();
        let ours = write_split(&orig, &plan, &d.0.join("ours"), |_| {}).unwrap();
        for (i, p) in ours.iter().enumerate() {
            let t = split_path(&theirs, i as u32, ours.len() as u32);
            assert!(
                std::fs::read(p).unwrap() == std::fs::read(&t).unwrap(),
                "{args:?}: {} differs from {}",
                p.display(),
                t.display()
            );
        }
        let beyond = split_path(&theirs, ours.len() as u32, ours.len() as u32 + 1);
        assert!(!beyond.exists());
        // llama.cpp's parts open as the original too.
        let first = split_path(&theirs, 0, ours.len() as u32);
        assert_same_model(&orig, &GgufFile::open(&first).unwrap());
        // And its merge (which keeps the split keys, split.count 0) reads as one file.
        let merged = d.0.join("merged-by-llama.gguf");
        let st = std::process::Command::new(&tool)
            .arg("--merge")
            .arg(&first)
            .arg(&merged)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        let m = GgufFile::open(&merged).unwrap();
        assert!(m.parts().is_empty());
        assert_eq!(m.get(SPLIT_COUNT_KEY), Some(&Value::U16(0)));
        for f in std::fs::read_dir(&d.0).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
    }
    // A first part without tensors (llama-gguf-split --no-tensor-first-split) reads too.
    let prefix = d.0.join("empty-first");
    let st = std::process::Command::new(&tool)
        .args(["--no-tensor-first-split", "--split-max-tensors", "15"])
        .arg(&src)
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let f = GgufFile::open(split_path(&prefix, 0, 3)).unwrap();
    assert_eq!(f.parts()[0].n_tensors, 0);
    assert_same_model(&orig, &f);
}

/// Writes one part by hand: `split.no`, `split.count`, `split.tensors.count` as given, one
/// 4-element f32 tensor per name.
fn write_part(path: &Path, no: u16, count: u16, total: i32, names: &[&str]) {
    let mut w = GgufWriter::new();
    if no == 0 {
        w.add_kv("general.architecture", "llama").unwrap();
    }
    w.add_kv(SPLIT_NO_KEY, Value::U16(no)).unwrap();
    w.add_kv(SPLIT_COUNT_KEY, Value::U16(count)).unwrap();
    w.add_kv(SPLIT_TENSORS_KEY, Value::I32(total)).unwrap();
    for n in names {
        w.add_tensor_info(*n, DType::F32, &[4]).unwrap();
    }
    w.write_to_path(path, |info, out| {
        let v = info.name.len() as f32;
        for _ in 0..4 {
            out.write_all(&v.to_le_bytes())?;
        }
        Ok(())
    })
    .unwrap();
}

fn open_err(path: &Path) -> GgufError {
    GgufFile::open(path).expect_err("the parts should be refused")
}

#[test]
fn hand_made_parts_read_as_one_file() {
    let d = TempDir::new("hand");
    let p = |i| split_path(&d.0.join("m"), i, 3);
    write_part(&p(0), 0, 3, 4, &["a"]);
    write_part(&p(1), 1, 3, 4, &["bb", "ccc"]);
    write_part(&p(2), 2, 3, 4, &["dddd"]);
    let f = GgufFile::open(p(0)).unwrap();
    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "bb", "ccc", "dddd"]);
    for t in f.tensors() {
        let v = t.name.len() as f32;
        let want: Vec<u8> = (0..4).flat_map(|_| v.to_le_bytes()).collect();
        assert_eq!(f.tensor_data(t), &want[..], "{}", t.name);
        // Zero-copy: the bytes are in the one mapping the file hands out.
        let base = f.data().bytes().as_ptr() as usize;
        let at = f.tensor_data(t).as_ptr() as usize - base;
        assert_eq!(at, f.data_offset() + t.offset as usize);
    }
    assert_eq!(f.tensor_part("ccc"), Some((1, 32)));
    let mut ctx = ggrs_core::Context::with_mem_size(ggrs_core::Context::mem_size_for(4, 0));
    let t = f.load_tensor(&mut ctx, "dddd").unwrap();
    assert_eq!(ctx.to_f32_vec(t).unwrap(), vec![4.0; 4]);
}

#[test]
fn a_missing_part_is_named() {
    let d = TempDir::new("missing");
    let p = |i| split_path(&d.0.join("m"), i, 3);
    write_part(&p(0), 0, 3, 3, &["a"]);
    write_part(&p(2), 2, 3, 3, &["c"]);
    let e = open_err(&p(0));
    assert!(
        matches!(
            e,
            GgufError::SplitMissing {
                no: 2,
                count: 3,
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains("m-00002-of-00003.gguf"), "{msg}");
    assert!(msg.contains("missing"), "{msg}");
}

#[test]
fn a_later_part_names_the_first() {
    let d = TempDir::new("later");
    let p = |i| split_path(&d.0.join("m"), i, 2);
    write_part(&p(0), 0, 2, 2, &["a"]);
    write_part(&p(1), 1, 2, 2, &["b"]);
    let e = open_err(&p(1));
    assert!(
        matches!(
            e,
            GgufError::SplitNotFirst {
                no: 2,
                count: 2,
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains("part 2 of 2"), "{msg}");
    assert!(msg.contains(&p(0).display().to_string()), "{msg}");
}

#[test]
fn a_part_numbered_wrong_is_refused() {
    let d = TempDir::new("number");
    let p = |i| split_path(&d.0.join("m"), i, 3);
    write_part(&p(0), 0, 3, 3, &["a"]);
    // The second file says it is the third.
    write_part(&p(1), 2, 3, 3, &["b"]);
    write_part(&p(2), 2, 3, 3, &["c"]);
    let e = open_err(&p(0));
    assert!(matches!(e, GgufError::SplitMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("m-00002-of-00003.gguf"), "{msg}");
    assert!(msg.contains("split.no = 2"), "{msg}");
}

#[test]
fn a_part_of_another_count_is_refused() {
    let d = TempDir::new("count-mismatch");
    let p = |i| split_path(&d.0.join("m"), i, 2);
    write_part(&p(0), 0, 2, 2, &["a"]);
    write_part(&p(1), 1, 4, 2, &["b"]);
    let e = open_err(&p(0));
    assert!(matches!(e, GgufError::SplitMismatch { .. }), "{e:?}");
    assert!(e.to_string().contains("split.count = 4"), "{e}");
}

#[test]
fn a_wrong_tensor_total_is_refused() {
    let d = TempDir::new("total");
    let p = |i| split_path(&d.0.join("m"), i, 2);
    write_part(&p(0), 0, 2, 5, &["a"]);
    write_part(&p(1), 1, 2, 5, &["b", "c"]);
    let e = open_err(&p(0));
    assert!(matches!(e, GgufError::SplitMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("split.tensors.count = 5"), "{msg}");
    assert!(msg.contains("hold 3 tensors"), "{msg}");
}

#[test]
fn a_tensor_in_two_parts_is_refused() {
    let d = TempDir::new("dup");
    let p = |i| split_path(&d.0.join("m"), i, 2);
    write_part(&p(0), 0, 2, 2, &["a"]);
    write_part(&p(1), 1, 2, 2, &["a"]);
    let e = open_err(&p(0));
    assert!(matches!(e, GgufError::SplitDuplicateTensor { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("`a`"), "{msg}");
    assert!(msg.contains("m-00001-of-00002.gguf") && msg.contains("m-00002-of-00002.gguf"));
}

#[test]
fn a_renamed_first_part_is_refused() {
    let d = TempDir::new("renamed");
    let first = d.0.join("model.gguf");
    write_part(&first, 0, 2, 2, &["a"]);
    let e = open_err(&first);
    assert!(matches!(e, GgufError::SplitName { count: 2, .. }), "{e:?}");
    assert!(e.to_string().contains("-00001-of-00002.gguf"), "{e}");
}

#[test]
fn a_damaged_part_is_named() {
    let d = TempDir::new("damaged");
    let p = |i| split_path(&d.0.join("m"), i, 2);
    write_part(&p(0), 0, 2, 2, &["a"]);
    std::fs::write(p(1), b"GGUF\x03\x00\x00\x00").unwrap();
    let e = open_err(&p(0));
    assert!(matches!(e, GgufError::InPart { .. }), "{e:?}");
    assert!(e.to_string().contains("m-00002-of-00002.gguf"), "{e}");
    std::fs::write(p(1), b"").unwrap();
    let e = open_err(&p(0));
    assert!(e.to_string().contains("not a GGUF file"), "{e}");
}

#[test]
fn one_part_or_a_merged_file_is_a_single_file() {
    let d = TempDir::new("single");
    // split.count 1: nothing else to look for, whatever the name.
    let one = d.0.join("one.gguf");
    write_part(&one, 0, 1, 1, &["a"]);
    let f = GgufFile::open(&one).unwrap();
    assert!(f.parts().is_empty());
    assert_eq!(f.tensor_part("a"), Some((0, 0)));
}
