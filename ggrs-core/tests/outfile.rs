//! Output files never cost the user a file: a failed, panicking or killed write leaves the
//! target as it was, inputs are recognised under any name, special files are written
//! through or refused and never removed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ggrs_core::gguf::{GgufError, GgufFile, GgufWriter};
use ggrs_core::outfile::{OutputError, OutputFile, Protected};
use ggrs_core::DType;

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("outfile-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A writer for one f32 tensor of `n` values.
fn writer(n: usize) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "test").unwrap();
    w.add_tensor_info("x", DType::F32, &[n]).unwrap();
    w
}

fn values(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

#[test]
fn a_failed_write_leaves_the_old_file_and_no_temporary() {
    let d = scratch("failed");
    let out = d.join("model.gguf");
    std::fs::write(&out, b"the user's only copy").unwrap();
    let w = writer(1000);
    let r = w.write_to_path(&out, |_, sink| {
        sink.write_all(&[0; 100])?;
        Err(std::io::Error::other("disk on fire"))
    });
    assert!(r.is_err());
    assert_eq!(std::fs::read(&out).unwrap(), b"the user's only copy");
    assert_eq!(listing(&d), ["model.gguf"]);
    // A successful write replaces it, keeps its permissions and leaves nothing else.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).unwrap();
    }
    let data = values(1000);
    w.write_to_path(&out, |_, sink| sink.write_all(&data))
        .unwrap();
    let g = GgufFile::open(&out).unwrap();
    assert_eq!(g.tensor_data(g.tensor("x").unwrap()), &data[..]);
    assert_eq!(listing(&d), ["model.gguf"]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&out).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }
}

#[test]
fn a_panicking_writer_leaves_the_old_file() {
    let d = scratch("panic");
    let out = d.join("m.gguf");
    std::fs::write(&out, b"old").unwrap();
    let w = writer(10);
    let r = std::panic::catch_unwind(|| {
        let _ = w.write_to_path(&out, |_, _| panic!("writer bug"));
    });
    assert!(r.is_err());
    assert_eq!(std::fs::read(&out).unwrap(), b"old");
    assert_eq!(listing(&d), ["m.gguf"]);
}

/// Every spelling of an input is refused, and the input keeps its bytes.
#[test]
fn the_input_under_any_name_is_refused() {
    let d = scratch("same");
    let sub = d.join("q");
    std::fs::create_dir_all(&sub).unwrap();
    let input = sub.join("in.gguf");
    let data = values(16);
    writer(16)
        .write_to_path(&input, |_, s| s.write_all(&data))
        .unwrap();
    let before = std::fs::read(&input).unwrap();
    let mut names = vec![
        input.clone(),
        sub.join("../q/in.gguf"),
        sub.join(".").join("in.gguf"),
    ];
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink("in.gguf", sub.join("link.gguf")).unwrap();
        names.push(sub.join("link.gguf"));
    }
    std::fs::hard_link(&input, sub.join("hard.gguf")).unwrap();
    names.push(sub.join("hard.gguf"));
    let file = GgufFile::open(&input).unwrap();
    for name in &names {
        let mut w = writer(16);
        w.protect(file.source().cloned());
        let r = w.write_to_path(name, |_, s| s.write_all(&data));
        assert!(
            matches!(r, Err(GgufError::Output(OutputError::SameAsInput { .. }))),
            "{}: {r:?}",
            name.display()
        );
        assert!(r
            .unwrap_err()
            .to_string()
            .contains("same file as the input"));
    }
    assert_eq!(std::fs::read(&input).unwrap(), before);
    // A file of an input directory is refused too, a new name beside them is not.
    let prot = Protected::dir_entries(&sub);
    assert!(matches!(
        OutputFile::create(sub.join("hard.gguf"), &prot),
        Err(OutputError::SameAsInput { .. })
    ));
    assert!(OutputFile::create(sub.join("new.gguf"), &prot).is_ok());
}

#[cfg(unix)]
#[test]
fn a_link_output_replaces_the_file_it_names_and_stays_a_link() {
    let d = scratch("link");
    std::fs::write(d.join("real.gguf"), b"old").unwrap();
    std::os::unix::fs::symlink("real.gguf", d.join("link.gguf")).unwrap();
    let data = values(4);
    writer(4)
        .write_to_path(d.join("link.gguf"), |_, s| s.write_all(&data))
        .unwrap();
    assert!(std::fs::symlink_metadata(d.join("link.gguf"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(GgufFile::open(d.join("real.gguf")).is_ok());
    assert_eq!(listing(&d), ["link.gguf", "real.gguf"]);
    // A link to nothing is refused and left alone.
    std::os::unix::fs::symlink("missing.gguf", d.join("dangling")).unwrap();
    assert!(matches!(
        OutputFile::create(d.join("dangling"), &[]),
        Err(OutputError::DanglingLink { .. })
    ));
    assert!(std::fs::symlink_metadata(d.join("dangling")).is_ok());
}

#[test]
fn a_directory_output_is_refused() {
    let d = scratch("dir");
    let r = writer(1).write_to_path(&d, |_, s| s.write_all(&[0; 4]));
    assert!(
        matches!(r, Err(GgufError::Output(OutputError::IsDirectory { .. }))),
        "{r:?}"
    );
    assert!(d.is_dir());
    assert!(listing(&d).is_empty());
}

/// Character devices are written through and never removed, even when writing fails;
/// block devices are refused.
#[cfg(target_os = "linux")]
#[test]
fn device_outputs_are_written_through_or_refused_never_removed() {
    use std::os::unix::fs::FileTypeExt;
    let data = values(64);
    // /dev/null takes everything.
    writer(64)
        .write_to_path("/dev/null", |_, s| s.write_all(&data))
        .unwrap();
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    // A node of our own (needs the right to make device nodes: root): /dev/full's numbers,
    // where every write fails, and a block device.
    let d = scratch("dev");
    let node = |name: &str, kind: &str, major: u32, minor: u32| -> Option<PathBuf> {
        let p = d.join(name);
        let ok = Command::new("mknod")
            .arg(&p)
            .arg(kind)
            .arg(major.to_string())
            .arg(minor.to_string())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(p)
    };
    if let Some(full) = node("full", "c", 1, 7) {
        let r = writer(64).write_to_path(&full, |_, s| s.write_all(&data));
        assert!(r.is_err(), "writing to a full device must fail");
        assert!(std::fs::metadata(&full)
            .unwrap()
            .file_type()
            .is_char_device());
        let null = node("null", "c", 1, 3).unwrap();
        writer(64)
            .write_to_path(&null, |_, s| s.write_all(&data))
            .unwrap();
        assert!(std::fs::metadata(&null)
            .unwrap()
            .file_type()
            .is_char_device());
    } else {
        eprintln!("skipped the device-node part: mknod is not permitted here");
    }
    if let Some(blk) = node("blk", "b", 7, 200) {
        let r = writer(64).write_to_path(&blk, |_, s| s.write_all(&data));
        assert!(
            matches!(r, Err(GgufError::Output(OutputError::NotWritable { .. }))),
            "{r:?}"
        );
        assert!(std::fs::metadata(&blk)
            .unwrap()
            .file_type()
            .is_block_device());
    }
}

/// The child side of [`a_killed_writer_leaves_the_old_file`]: writes half a file to the
/// path in `GGRS_OUTFILE_KILL_TARGET`, then waits to be killed.
#[test]
fn killed_writer_child() {
    let Some(target) = std::env::var_os("GGRS_OUTFILE_KILL_TARGET") else {
        return;
    };
    let w = writer(1 << 20);
    let _ = w.write_to_path(&target, |_, s| {
        s.write_all(&vec![7u8; 2 << 20])?;
        s.flush()?;
        std::thread::sleep(Duration::from_secs(120));
        Ok(())
    });
}

#[cfg(unix)]
#[test]
fn a_killed_writer_leaves_the_old_file() {
    let d = scratch("killed");
    let out = d.join("model.gguf");
    std::fs::write(&out, b"the user's only copy").unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "outfile::killed_writer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GGRS_OUTFILE_KILL_TARGET", &out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the child has written 2 MiB of its temporary file.
    let t0 = Instant::now();
    let tmp = loop {
        let found = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p != &out && std::fs::metadata(p).is_ok_and(|m| m.len() >= 2 << 20));
        if let Some(t) = found {
            break t;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the child wrote nothing"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), b"the user's only copy");
    let name = tmp.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(".model.gguf.ggrs-tmp."),
        "temporary file {name}"
    );
}
