//! Output files that never cost the user a file: written to a temporary file beside the
//! target, flushed and fsynced, and renamed over the target only once complete.
//!
//! [`OutputFile::create`] resolves the target first:
//!
//! - a symbolic link is followed (the file it names is replaced; the link stays);
//! - a directory, a block device or a dangling link is refused with an [`OutputError`];
//! - a character device or a FIFO (`/dev/null`, a pipe) is written through, in place: there
//!   is nothing to replace and it is never removed;
//! - an existing regular file, or a new name, gets a temporary file
//!   `.<name>.ggrs-tmp.<pid>.<n>` in the same directory (created exclusively, so nothing is
//!   ever overwritten by it). [`OutputFile::commit`] flushes, fsyncs and renames it over the
//!   target, then fsyncs the directory. Dropping an `OutputFile` that was not committed (an
//!   error, a panic) removes the temporary file, and only it. A killed process leaves the
//!   target as it was, plus the temporary file.
//!
//! Before anything is created, the target is compared with the files the caller protects
//! (the inputs it reads) by identity ([`FileId`]: device and inode after resolving links),
//! so no other spelling of an input (`./a/../a/in.gguf`, an absolute path, a symlink, a
//! hard link) can be chosen as the output.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why an output file could not be set up or completed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The output is one of the inputs (compared as files, not as strings).
    #[error(
        "{}: the output is the same file as the input {} (another name, a link or a hard \
         link of it): choose another output file",
        output.display(),
        input.display()
    )]
    SameAsInput {
        /// The output as given.
        output: PathBuf,
        /// The input it designates.
        input: PathBuf,
    },
    /// The output names a directory.
    #[error("{}: is a directory: give a file name for the output", path.display())]
    IsDirectory {
        /// The output as given.
        path: PathBuf,
    },
    /// The output is a kind of file ggrs will not write into (a block device, a socket).
    #[error(
        "{}: is a {kind}, not a regular file: ggrs writes models only to regular files, \
         character devices and pipes",
        path.display()
    )]
    NotWritable {
        /// The output as given.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// The output is a symbolic link to a file that does not exist.
    #[error("{}: is a symbolic link to a missing file", path.display())]
    DanglingLink {
        /// The output as given.
        path: PathBuf,
    },
    /// An I/O operation on the output (or its temporary file) failed.
    #[error("{}: {what}: {source}", path.display())]
    Io {
        /// The file the operation was on.
        path: PathBuf,
        /// The operation ("creating the temporary file", "renaming over the target", …).
        what: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

/// A file's identity: the device and inode number of what a path resolves to (links
/// followed), so that two spellings of one file compare equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The identity of the file at `path` (links followed); `None` when it does not exist
    /// or cannot be examined.
    pub fn of_path(path: impl AsRef<Path>) -> Option<FileId> {
        std::fs::metadata(path)
            .ok()
            .map(|m| FileId::of_metadata(&m))
    }

    /// The identity of an open file.
    pub fn of_file(file: &File) -> Option<FileId> {
        file.metadata().ok().map(|m| FileId::of_metadata(&m))
    }

    #[cfg(unix)]
    fn of_metadata(m: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }

    #[cfg(not(unix))]
    fn of_metadata(m: &std::fs::Metadata) -> FileId {
        // Without inode numbers, size and modification time are the best portable stand-in;
        // callers also compare canonical paths.
        let t = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as u64);
        FileId {
            dev: m.len(),
            ino: t,
        }
    }
}

/// An input to protect from being chosen as an output: its identity and a name for messages.
#[derive(Debug, Clone)]
pub struct Protected {
    /// The input's identity.
    pub id: FileId,
    /// How to name it in an error.
    pub path: PathBuf,
}

impl Protected {
    /// The file at `path`, if it exists.
    pub fn path(path: impl AsRef<Path>) -> Option<Protected> {
        let path = path.as_ref();
        FileId::of_path(path).map(|id| Protected {
            id,
            path: path.to_path_buf(),
        })
    }

    /// Every entry of directory `dir` (links followed) and the directory itself: an output
    /// that is any of them is refused. A new file inside `dir` stays allowed.
    pub fn dir_entries(dir: impl AsRef<Path>) -> Vec<Protected> {
        let dir = dir.as_ref();
        let mut out: Vec<Protected> = Protected::path(dir).into_iter().collect();
        if let Ok(rd) = std::fs::read_dir(dir) {
            out.extend(rd.flatten().filter_map(|e| Protected::path(e.path())));
        }
        out
    }
}

enum Dest {
    /// A temporary file renamed over `target` on commit.
    Temp { tmp: PathBuf, target: PathBuf },
    /// A character device or pipe, written in place.
    Through,
}

/// A file being written: see the [module docs](self). Write to it through [`Write`], then
/// call [`OutputFile::commit`]; dropping it uncommitted removes the temporary file only.
pub struct OutputFile {
    file: Option<File>,
    dest: Dest,
    /// The output as the caller named it (for messages).
    given: PathBuf,
}

impl std::fmt::Debug for OutputFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("OutputFile");
        d.field("given", &self.given);
        match &self.dest {
            Dest::Temp { tmp, target } => d.field("tmp", tmp).field("target", target),
            Dest::Through => d.field("through", &true),
        };
        d.finish()
    }
}

static NEXT_TMP: AtomicU64 = AtomicU64::new(0);

/// Longest part of the target's name kept in a temporary file's name (names are limited to
/// 255 bytes on most file systems).
const MAX_NAME_PART: usize = 160;

impl OutputFile {
    /// Sets up writing `path`, refusing it when it is one of `protected` (see the
    /// [module docs](self) for how each kind of target is treated).
    pub fn create(
        path: impl AsRef<Path>,
        protected: &[Protected],
    ) -> Result<OutputFile, OutputError> {
        let given = path.as_ref().to_path_buf();
        let io_err = |path: &Path, what: &'static str| {
            let path = path.to_path_buf();
            move |source| OutputError::Io { path, what, source }
        };
        let link = std::fs::symlink_metadata(&given);
        let existing = match std::fs::metadata(&given) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if link.is_ok() {
                    return Err(OutputError::DanglingLink { path: given });
                }
                None
            }
            Err(e) => return Err(io_err(&given, "examining the output")(e)),
        };
        if let Some(m) = &existing {
            let id = FileId::of_metadata(m);
            if let Some(p) = protected.iter().find(|p| p.id == id) {
                return Err(OutputError::SameAsInput {
                    output: given,
                    input: p.path.clone(),
                });
            }
            let ft = m.file_type();
            if ft.is_dir() {
                return Err(OutputError::IsDirectory { path: given });
            }
            if !ft.is_file() {
                return match special_kind(&ft) {
                    Special::WriteThrough => {
                        let file = OpenOptions::new()
                            .write(true)
                            .open(&given)
                            .map_err(io_err(&given, "opening for writing"))?;
                        Ok(OutputFile {
                            file: Some(file),
                            dest: Dest::Through,
                            given,
                        })
                    }
                    Special::Refuse(kind) => Err(OutputError::NotWritable { path: given, kind }),
                };
            }
        }
        // A regular file or a new name: the file that gets replaced is the one links lead
        // to, so a link keeps pointing at the new contents.
        let target =
            if existing.is_some() && link.as_ref().is_ok_and(|l| l.file_type().is_symlink()) {
                std::fs::canonicalize(&given).map_err(io_err(&given, "resolving the link"))?
            } else {
                given.clone()
            };
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target
            .file_name()
            .ok_or_else(|| OutputError::IsDirectory {
                path: given.clone(),
            })?
            .to_string_lossy()
            .into_owned();
        let short: String = name
            .char_indices()
            .take_while(|(i, c)| i + c.len_utf8() <= MAX_NAME_PART)
            .map(|(_, c)| c)
            .collect();
        if !dir.is_dir() {
            return Err(OutputError::Io {
                path: dir,
                what: "the output's directory",
                source: io::Error::new(
                    io::ErrorKind::NotFound,
                    "does not exist or is not a directory",
                ),
            });
        }
        let (tmp, file) = loop {
            let n = NEXT_TMP.fetch_add(1, Ordering::Relaxed);
            let tmp = dir.join(format!(".{short}.ggrs-tmp.{}.{n}", std::process::id()));
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(f) => break (tmp, f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(OutputError::Io {
                        path: tmp,
                        what: "creating the temporary output file",
                        source: e,
                    })
                }
            }
        };
        let out = OutputFile {
            file: Some(file),
            dest: Dest::Temp {
                tmp: tmp.clone(),
                target,
            },
            given,
        };
        // The replacement keeps the permissions of the file it replaces.
        if let Some(m) = &existing {
            if let Some(f) = &out.file {
                f.set_permissions(m.permissions())
                    .map_err(io_err(&tmp, "copying the target's permissions"))?;
            }
        }
        Ok(out)
    }

    /// The output as the caller named it.
    pub fn path(&self) -> &Path {
        &self.given
    }

    /// The temporary file being written, or `None` when the output is written through.
    pub fn temp_path(&self) -> Option<&Path> {
        match &self.dest {
            Dest::Temp { tmp, .. } => Some(tmp),
            Dest::Through => None,
        }
    }

    /// Flushes and fsyncs the data, then (for a regular file) renames the temporary file
    /// over the target and fsyncs its directory.
    pub fn commit(mut self) -> Result<(), OutputError> {
        let given = self.given.clone();
        let Some(mut file) = self.file.take() else {
            // Only `commit` and `drop` take the file, and `commit` consumes `self`.
            return Ok(());
        };
        let result = (|| {
            file.flush().map_err(|source| OutputError::Io {
                path: given.clone(),
                what: "flushing",
                source,
            })?;
            match &self.dest {
                Dest::Through => Ok(()),
                Dest::Temp { tmp, target } => {
                    file.sync_all().map_err(|source| OutputError::Io {
                        path: tmp.clone(),
                        what: "syncing the temporary output file to disk",
                        source,
                    })?;
                    drop(file);
                    std::fs::rename(tmp, target).map_err(|source| OutputError::Io {
                        path: target.clone(),
                        what: "renaming the finished temporary file over the output",
                        source,
                    })?;
                    // The rename is durable once the directory is synced; a file system
                    // that cannot sync directories still has the file in place.
                    if let Some(dir) = target.parent() {
                        let dir = if dir.as_os_str().is_empty() {
                            Path::new(".")
                        } else {
                            dir
                        };
                        if let Ok(d) = File::open(dir) {
                            let _ = d.sync_all();
                        }
                    }
                    Ok(())
                }
            }
        })();
        if result.is_ok() {
            // Renamed: there is no temporary file left to remove.
            self.dest = Dest::Through;
        }
        result
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(f) => f.write(buf),
            None => Err(io::Error::other("the output file is closed")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        drop(self.file.take());
        if let Dest::Temp { tmp, .. } = &self.dest {
            // The temporary file was created by this value (exclusively): removing it
            // removes nothing of the user's. A failed removal only leaves it behind.
            let _ = std::fs::remove_file(tmp);
        }
    }
}

enum Special {
    WriteThrough,
    Refuse(&'static str),
}

#[cfg(unix)]
fn special_kind(ft: &std::fs::FileType) -> Special {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_char_device() || ft.is_fifo() {
        Special::WriteThrough
    } else if ft.is_block_device() {
        Special::Refuse("block device")
    } else if ft.is_socket() {
        Special::Refuse("socket")
    } else {
        Special::Refuse("special file")
    }
}

#[cfg(not(unix))]
fn special_kind(_ft: &std::fs::FileType) -> Special {
    Special::Refuse("special file")
}
