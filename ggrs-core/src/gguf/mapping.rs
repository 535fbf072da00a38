//! Read-only maps of whole model files, placed so that the page cache's huge pages can back
//! them (the memory-map module: the `unsafe` of mapping and advising lives here).
//!
//! Decoding streams every weight once per token. Mapped through 4 KiB page-table entries,
//! that is one page walk per 4 KiB, which on a virtual machine costs a visible share of a
//! token. Linux can map a file with 2 MiB entries when three things hold: the page cache
//! holds the file in 2 MiB folios, the mapping is advised `MADV_HUGEPAGE`, and the mapping's
//! address and the file offset agree modulo 2 MiB. [`FileMap::open`] takes care of the last
//! (it maps the file at a 2 MiB boundary); [`FileMap::settle_huge_pages`] of the other two,
//! for the parts a caller is going to stream. The rest of the map keeps the default advice,
//! so that reading a few bytes there (an embedding row) does not read or map 2 MiB.
//!
//! On other systems (and if the placed mapping fails) a plain `memmap2` mapping is used.
//!
//! The parts of a split model ([`FileMap::open_parts`]) are mapped one after the other into
//! one reserved range of addresses, each at a 2 MiB boundary, so that the whole model is one
//! slice of bytes (the gaps between parts read as zeros) and a tensor is still an offset into
//! it. Where that placement is impossible the parts are read into one anonymous map instead
//! (a copy, the only case that is not zero-copy).

use std::fs::File;
use std::io;
use std::ops::Range;

/// The huge page size the placement aims at (x86-64 and 4 KiB-granule aarch64); the packed
/// weight store (`kernels::matmul`) aligns to it too.
pub(crate) const HUGE: usize = 2 << 20;
/// The base page size release and advice ranges are rounded to.
const PAGE: usize = 4096;

/// A whole file (or the parts of a split file, one after the other) mapped read-only and
/// private.
pub(crate) struct FileMap {
    inner: Inner,
    /// Kept open for page-cache advice ([`FileMap::settle_huge_pages`]): the file, or every
    /// part.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    files: Vec<File>,
    /// Where each file lies in the mapping (one range for a single file).
    parts: Vec<Range<usize>>,
}

enum Inner {
    /// Mapped at a 2 MiB boundary by us; unmapped on drop.
    #[cfg(target_os = "linux")]
    Placed {
        ptr: *const u8,
        len: usize,
    },
    Plain(memmap2::Mmap),
    /// The parts of a split file read into one anonymous map (placement failed): releasing
    /// its pages would lose their contents, so [`FileMap::release`] leaves them.
    Copied(memmap2::Mmap),
}

// SAFETY: the mapping is read-only (PROT_READ, private) and lives until the `FileMap` is
// dropped; sharing or sending a pointer to immutable memory between threads is sound.
unsafe impl Send for FileMap {}
// SAFETY: as for `Send`: nothing ever writes through the mapping.
unsafe impl Sync for FileMap {}

/// What settling a map on huge pages found and did
/// ([`crate::gguf::GgufFile::settle_huge_pages`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HugePageReport {
    /// Bytes of the 2 MiB units of the mapping that the asked ranges overlap: what huge pages
    /// can cover at most.
    pub coverable: usize,
    /// Bytes of the mapping mapped through 2 MiB entries after settling (at most
    /// `coverable` when nothing else of the file was read through this map).
    pub huge: usize,
    /// Whether the file's cached pages were dropped and read again to get huge folios.
    pub recached: bool,
}

impl FileMap {
    /// Maps all `len` bytes of `file` (`len > 0`) read-only: on Linux at a 2 MiB boundary,
    /// advised for transparent huge pages.
    pub(crate) fn open(file: File, len: usize) -> io::Result<FileMap> {
        #[cfg(target_os = "linux")]
        if let Some((ptr, len)) = place(&file, len) {
            return Ok(FileMap {
                inner: Inner::Placed { ptr, len },
                files: vec![file],
                parts: std::iter::once(0..len).collect(),
            });
        }
        // SAFETY: the mapping is read-only and private to this process; memmap2 keeps it
        // valid for the life of the `Mmap`, which the `FileMap` owns. What no code here can
        // rule out is another process truncating or rewriting the file meanwhile; like every
        // reader of mapped model files (llama.cpp included), the callers document that the
        // file must not change while it is open.
        let map = unsafe { memmap2::Mmap::map(&file) }?;
        Ok(FileMap {
            inner: Inner::Plain(map),
            files: vec![file],
            parts: std::iter::once(0..len).collect(),
        })
    }

    /// Maps the files `parts` (each with its length, every length `> 0`) one after the
    /// other, each starting at a multiple of 2 MiB from the start of the mapping (gaps read
    /// as zeros). On Linux this is one reservation with each file mapped into it (no copy);
    /// elsewhere, or if that fails, the files are read into an anonymous map. Returns the
    /// map; [`FileMap::part_ranges`] says where each file lies in it.
    pub(crate) fn open_parts(parts: Vec<(File, usize)>) -> io::Result<FileMap> {
        let mut ranges = Vec::with_capacity(parts.len());
        let mut at = 0usize;
        for (_, len) in &parts {
            let end = at.checked_add(*len).ok_or_else(too_large)?;
            ranges.push(at..end);
            at = end.checked_next_multiple_of(HUGE).ok_or_else(too_large)?;
        }
        let total = ranges.last().map_or(0, |r| r.end);
        let files: Vec<File> = parts.into_iter().map(|(f, _)| f).collect();
        #[cfg(target_os = "linux")]
        if let Some(ptr) = place_parts(&files, &ranges, total) {
            return Ok(FileMap {
                inner: Inner::Placed { ptr, len: total },
                files,
                parts: ranges,
            });
        }
        let mut map = memmap2::MmapMut::map_anon(total.max(1))?;
        for (mut file, r) in files.iter().zip(&ranges) {
            use std::io::{Read, Seek};
            file.seek(io::SeekFrom::Start(0))?;
            file.read_exact(&mut map[r.clone()])?;
        }
        Ok(FileMap {
            inner: Inner::Copied(map.make_read_only()?),
            files,
            parts: ranges,
        })
    }

    /// Where each file lies in the mapping, in the order given (one range for a single
    /// file).
    pub(crate) fn part_ranges(&self) -> &[Range<usize>] {
        &self.parts
    }

    /// The mapped bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        match &self.inner {
            #[cfg(target_os = "linux")]
            // SAFETY: `ptr` maps `len` readable bytes until `self` is dropped (see `place`).
            Inner::Placed { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            Inner::Plain(map) => map,
            Inner::Copied(map) => &map[..self.parts.last().map_or(0, |r| r.end)],
        }
    }

    /// Drops the mapped pages of bytes `range` of the mapping (rounded inwards to whole
    /// pages) from this process; they stay readable (a read faults the file's contents back
    /// in). Returns the bytes released.
    pub(crate) fn release(&self, range: Range<usize>) -> usize {
        let from = range.start.next_multiple_of(PAGE);
        let to = range.end.min(self.bytes().len()) / PAGE * PAGE;
        if to <= from {
            return 0;
        }
        let done = match &self.inner {
            #[cfg(target_os = "linux")]
            // SAFETY: MADV_DONTNEED on a read-only private file mapping that this process
            // never writes only drops clean pages: the range stays mapped and later reads
            // fault the same file contents back in, so every slice borrowed from the mapping
            // keeps seeing the same data. The range is page-aligned and inside the mapping.
            Inner::Placed { ptr, .. } => unsafe {
                libc::madvise(ptr.add(from) as *mut _, to - from, libc::MADV_DONTNEED) == 0
            },
            // SAFETY: as above, through memmap2 (the mapping starts on a page boundary).
            Inner::Plain(map) => unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, to - from)
                    .is_ok()
            },
            // Anonymous memory has no file to fault its contents back in from.
            Inner::Copied(_) => false,
        };
        if done {
            to - from
        } else {
            0
        }
    }

    /// Reads `ranges` (byte ranges of the mapping that the caller is going to stream) into
    /// memory and reports how much of the mapping is mapped with 2 MiB entries.
    ///
    /// If less than half of what could be is, and the system shows it keeps files in huge
    /// folios at all (some already are, here or in `/proc/meminfo`), the file was cached in
    /// small folios before it was mapped this way: its cached pages are dropped
    /// (`POSIX_FADV_DONTNEED`, clean pages only) and read again through this mapping, which
    /// reads ahead in 2 MiB folios. That costs one read of the ranges from disk, once; later
    /// opens of the file find the huge folios in the page cache. Elsewhere than Linux this
    /// only reads the ranges.
    pub fn settle_huge_pages(&self, ranges: &[Range<usize>]) -> HugePageReport {
        let len = self.bytes().len();
        let ranges: Vec<Range<usize>> = ranges
            .iter()
            .map(|r| r.start.min(len)..r.end.min(len))
            .filter(|r| r.start < r.end)
            .collect();
        let base = self.bytes().as_ptr() as usize;
        // The 2 MiB units of the mapping that the ranges overlap (a file's last partial unit
        // cannot be a huge page, nor can a unit across two parts of a split file).
        let whole = |u: usize| {
            self.parts
                .iter()
                .any(|p| u * HUGE >= base + p.start && (u + 1) * HUGE <= base + p.end)
        };
        let mut units: Vec<usize> = ranges
            .iter()
            .flat_map(|r| (base + r.start) / HUGE..(base + r.end).div_ceil(HUGE))
            .filter(|&u| whole(u))
            .collect();
        units.sort_unstable();
        units.dedup();
        let coverable = units.len() * HUGE;
        #[cfg(target_os = "linux")]
        if let Inner::Placed { ptr, .. } = &self.inner {
            for &u in &units {
                // SAFETY: unit `u` lies inside the mapping (filtered above); MADV_HUGEPAGE
                // is only advice about page sizes and never changes the bytes. Where it is
                // refused, the unit stays on 4 KiB entries.
                unsafe {
                    let at = ptr.add(u * HUGE - base);
                    libc::madvise(at as *mut _, HUGE, libc::MADV_HUGEPAGE);
                }
            }
        }
        self.touch(&ranges);
        let mut report = HugePageReport {
            coverable,
            huge: self.huge_mapped(),
            recached: false,
        };
        #[cfg(target_os = "linux")]
        if report.huge * 2 < coverable && (report.huge > 0 || system_has_file_huge_pages()) {
            if let Inner::Placed { ptr, len } = &self.inner {
                use std::os::fd::AsRawFd;
                // SAFETY: as in `release`: dropping clean pages of our read-only mapping
                // keeps every byte readable; then the file's unmapped clean cache pages are
                // dropped, which only costs reading them again.
                let ok = unsafe {
                    libc::madvise(*ptr as *mut _, *len, libc::MADV_DONTNEED) == 0
                        && self.files.iter().all(|f| {
                            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) == 0
                        })
                };
                if ok {
                    self.touch(&ranges);
                    report.huge = self.huge_mapped();
                    report.recached = true;
                }
            }
        }
        report
    }

    /// Reads one byte of every page of `ranges`, so that they are resident (and mapped).
    fn touch(&self, ranges: &[Range<usize>]) {
        let bytes = self.bytes();
        let mut sum = 0u8;
        for r in ranges {
            for at in r.clone().step_by(PAGE) {
                sum = sum.wrapping_add(bytes[at]);
            }
        }
        std::hint::black_box(sum);
    }

    /// Bytes of this mapping mapped through 2 MiB entries (the `FilePmdMapped` lines of its
    /// entries in `/proc/self/smaps`: advice on parts of it splits it into several); 0 where
    /// that cannot be read.
    fn huge_mapped(&self) -> usize {
        #[cfg(target_os = "linux")]
        {
            let lo = self.bytes().as_ptr() as usize;
            let hi = (lo + self.bytes().len()).next_multiple_of(PAGE);
            let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
                return 0;
            };
            // Entry headers read `start-end perms offset dev inode path`, in hex.
            let span = |l: &str| {
                let (a, b) = l.split_whitespace().next()?.split_once('-')?;
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            };
            let mut ours = false;
            let mut total = 0;
            for l in smaps.lines() {
                if let Some((a, b)) = span(l) {
                    ours = a >= lo && b <= hi;
                } else if let Some(v) = l.strip_prefix("FilePmdMapped:") {
                    if ours {
                        total += kib(v);
                    }
                }
            }
            total
        }
        #[cfg(not(target_os = "linux"))]
        {
            0
        }
    }
}

impl AsRef<[u8]> for FileMap {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Inner::Placed { ptr, len } = self.inner {
            // SAFETY: `ptr..ptr + len` is the mapping `place` made; nothing borrows it any
            // more (borrows of `bytes` end with `self`).
            unsafe { libc::munmap(ptr as *mut _, len) };
        }
    }
}

/// The value of a `/proc` line like `   1234 kB`, in bytes.
#[cfg(target_os = "linux")]
fn kib(v: &str) -> usize {
    v.trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<usize>()
        .map_or(0, |k| k * 1024)
}

/// Whether the page cache holds any file in huge pages right now (`FileHugePages` in
/// `/proc/meminfo`), i.e. whether this kernel and its file systems make huge folios.
#[cfg(target_os = "linux")]
fn system_has_file_huge_pages() -> bool {
    std::fs::read_to_string("/proc/meminfo").is_ok_and(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("FileHugePages:"))
            .is_some_and(|v| kib(v) > 0)
    })
}

fn too_large() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "the parts together are larger than the address space",
    )
}

/// Maps each of `files` read-only and private at its range of `ranges` (offsets from a 2 MiB
/// boundary; each range starts on one) inside one reservation of `total` bytes, whose gaps
/// stay mapped as anonymous zeros; `None` if any step fails (nothing stays mapped).
#[cfg(target_os = "linux")]
fn place_parts(files: &[File], ranges: &[Range<usize>], total: usize) -> Option<*const u8> {
    use std::os::fd::AsRawFd;
    let span = total.checked_add(HUGE)?;
    // SAFETY: an anonymous reservation at an address of the kernel's choice touches no
    // existing mapping. It is readable (zero pages) so that the whole range, gaps between
    // parts included, is memory a slice may cover.
    let res = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if res == libc::MAP_FAILED {
        return None;
    }
    let lo = res as usize;
    let at = lo.next_multiple_of(HUGE);
    for (file, r) in files.iter().zip(ranges) {
        // SAFETY: `at + r.start .. at + r.end` lies inside our own reservation (`at - lo <
        // HUGE`, `r.end <= total`), so MAP_FIXED replaces only memory this function
        // reserved; the file is mapped read-only and private.
        let map = unsafe {
            libc::mmap(
                (at + r.start) as *mut _,
                r.len(),
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            // SAFETY: releases the whole reservation, file mappings made in it included;
            // nothing borrows any of it yet.
            unsafe { libc::munmap(res, span) };
            return None;
        }
    }
    let end = (at + total).next_multiple_of(PAGE);
    // SAFETY: both unmaps release the parts of our reservation before `at` and after the last
    // file mapping's last page; nothing else lives there.
    unsafe {
        if at > lo {
            libc::munmap(res, at - lo);
        }
        if lo + span > end {
            libc::munmap(end as *mut _, lo + span - end);
        }
    }
    Some(at as *const u8)
}

/// Maps `len` bytes of `file` read-only and private at a 2 MiB boundary; `None` if any step
/// of the placement fails (nothing stays mapped). A split model's placement with one part.
#[cfg(target_os = "linux")]
fn place(file: &File, len: usize) -> Option<(*const u8, usize)> {
    place_parts(
        std::slice::from_ref(file),
        std::slice::from_ref(&(0..len)),
        len,
    )
    .map(|p| (p, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file of `len` bytes of a fixed pattern in the temp dir, removed on drop.
    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn new(tag: &str, len: usize) -> (TempFile, Vec<u8>) {
            let path = std::env::temp_dir().join(format!("ggrs-map-{tag}-{}", std::process::id()));
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut f = File::create(&path).expect("temp dir writable");
            // Small writes, as a download would leave the page cache.
            for chunk in data.chunks(4096) {
                f.write_all(chunk).expect("temp dir writable");
            }
            (TempFile(path), data)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn open(t: &TempFile, len: usize) -> FileMap {
        FileMap::open(File::open(&t.0).expect("just written"), len).expect("mappable")
    }

    /// The map shows the file's bytes from a 2 MiB boundary (Linux), and still does after
    /// pages were released and after settling on huge pages, whether or not that dropped and
    /// re-read the file's cached pages; `coverable` counts the 2 MiB units the ranges touch.
    #[test]
    fn maps_keep_the_file_bytes_through_release_and_settling() {
        let len = 5 * HUGE + 12345;
        let (t, data) = TempFile::new("settle", len);
        let map = open(&t, len);
        assert_eq!(map.bytes(), &data[..]);
        if cfg!(target_os = "linux") {
            assert_eq!(map.bytes().as_ptr() as usize % HUGE, 0);
        }
        assert_eq!(map.release(100..3 * PAGE + 5), 2 * PAGE);
        assert_eq!(map.release(0..len + 1), len / PAGE * PAGE);
        assert_eq!(map.release(10..20), 0);
        assert_eq!(map.bytes(), &data[..]);
        let report = map.settle_huge_pages(&[HUGE + 1..HUGE + 2, 3 * HUGE - 1..3 * HUGE + 1]);
        if cfg!(target_os = "linux") {
            // Units 1, 2 and 3; the file's last, partial unit never counts.
            assert_eq!(report.coverable, 3 * HUGE);
        }
        let all = map.settle_huge_pages(std::slice::from_ref(&(0..len + 99)));
        assert!(all.coverable <= 5 * HUGE && all.coverable >= 4 * HUGE);
        assert_eq!(map.bytes(), &data[..]);
    }

    /// A file smaller than a huge page has nothing to settle, and is never re-read.
    #[test]
    fn small_files_are_never_recached() {
        let (t, data) = TempFile::new("small", 10_000);
        let map = open(&t, data.len());
        let report = map.settle_huge_pages(std::slice::from_ref(&(0..data.len())));
        assert_eq!(report.coverable, 0);
        assert!(!report.recached);
        assert_eq!(map.bytes(), &data[..]);
    }
}
