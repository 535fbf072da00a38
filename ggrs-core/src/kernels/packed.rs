//! Weights prepared ahead of any graph for the `mul_mat` kernels: [`PackedWeight`] (the
//! panel layout the panel kernels stream, or a plain copy; the panel kind of a weight is
//! `kernels::select`'s choice) and the huge-page store the copies live in (`store`).

use crate::dtype::DType;
#[cfg(target_arch = "x86_64")]
use crate::kernels::select::panel_kind;

/// A weight matrix copied once, ahead of any graph, into the layout `mul_mat` reads best,
/// 64-byte aligned, on transparent huge pages where the system has them, owned by whoever
/// loaded the weights (e.g. a model; clones share the copy). The layout is the panels the
/// `mul_mat` panel kernels stream (`kernels::x86::panel`: sixteen rows per panel, one row per
/// vector lane) when the CPU has one for the weight, else the rows as they are (any type:
/// then only the pages differ).
///
/// A copy is part of its tensor's data: [`crate::Context::set_packed`] gives it to the leaf
/// tensor whose data it was packed from, and every `mul_mat` with that tensor as its weight
/// operand then reads the copy (the panels instead of repacking the original rows chunk by
/// chunk, or the copied rows instead of the original ones), with the same bits (the same
/// kernels on the same values). Every other op (`get_rows`, conversions) keeps reading the
/// tensor's own bytes, so these must stay valid (readable) as long as the tensor is used.
///
/// ```
/// use ggrs_core::{kernels::PackedWeight, Context, DType, Executor, Graph};
/// # fn main() -> ggrs_core::Result<()> {
/// // 32 rows of 64 Q4_0 values (2 blocks of 18 bytes per row; zero bytes are zeros).
/// let rows = std::sync::Arc::new(vec![0u8; 32 * 36]);
/// let mut ctx = Context::with_mem_size(1 << 20);
/// let w = ctx.new_tensor_external(DType::Q4_0, &[64, 32], rows.clone(), 0)?;
/// if let Some(p) = PackedWeight::pack(DType::Q4_0, [64, 32, 1, 1], &rows[..]) {
///     ctx.set_packed(w, &p)?; // mul_mat reads the copy from now on
/// }
/// let x = ctx.new_tensor_2d(DType::F32, 64, 1)?;
/// ctx.set_f32(x, &[1.0; 64])?;
/// let y = ctx.mul_mat(w, x)?;
/// let mut g = Graph::new();
/// g.build_forward_expand(&ctx, y)?;
/// Executor::new(2).compute(&mut ctx, &g)?;
/// assert_eq!(ctx.to_f32_vec(y)?, vec![0.0; 32]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PackedWeight {
    #[cfg(target_arch = "x86_64")]
    pub(crate) entry: std::sync::Arc<store::Packed>,
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedWeight")
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl PackedWeight {
    /// Copies the 2-D weight whose `ne[1]` rows of `ne[0]` values of type `dtype` are `data`
    /// (dense, in file layout): into the panel layout when this CPU has the panel kernel for
    /// it (Q4_0 or Q8_0 on AVX-512 VNNI or AVX2, at least 16 rows, rows of whole blocks), else as it
    /// is. A stack of `ne[2]` such matrices (3-D, the experts `mul_mat_id` reads) is packed
    /// matrix by matrix when each has a panel kernel as a 2-D weight, and not at all
    /// otherwise. `None` on targets without packing (all but x86-64), for a 4-D weight or
    /// a stack without panels, one whose `data` is shorter than its rows, or if memory for
    /// the copy cannot be mapped. The copy belongs to the tensors whose data starts at
    /// `data`'s address ([`crate::Context::set_packed`]).
    pub fn pack(dtype: DType, ne: [usize; 4], data: &[u8]) -> Option<PackedWeight> {
        PackedWeight::pack_all(&[(dtype, ne, data)], |_| ())
            .pop()
            .flatten()
    }

    /// Whether [`PackedWeight::pack`] would lay a weight of type `dtype` and shape `ne` out
    /// in panels for this CPU's `mul_mat` panel kernels (`true`), rather than copy its rows
    /// as they are (`false`; also on targets without packing). Callers that only want the
    /// repacked weights (whose gain is large) and not the plain copies (whose gain is a
    /// few percent of decoding speed, for the cost of touching fresh memory at load time)
    /// pass only the weights for which this holds. Stacks of matrices (3-D) are packed only
    /// when this holds.
    pub fn repacks(dtype: DType, ne: [usize; 4]) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            ne[3] == 1 && panel_kind(dtype, [ne[0], ne[1], 1, 1]).is_some()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (dtype, ne);
            false
        }
    }

    /// Copies several weights, as [`PackedWeight::pack`] does each one, into one shared
    /// buffer: entry `i` of the result belongs to `weights[i]` (`None` where `pack` would
    /// give `None`, or for all of them if the buffer cannot be allocated). `done(i)` is called
    /// as soon as `weights[i]` has been packed and will not be read again here, e.g. to
    /// release a mapped source's pages before the next weight is read (so that resident
    /// memory never holds both copies of the whole model).
    ///
    /// On Linux the buffer starts on a 2 MiB boundary and is advised for transparent huge
    /// pages (`MADV_HUGEPAGE`, which `/sys/kernel/mm/transparent_hugepage/enabled` set to
    /// `madvise` or `always` honours). Decoding streams every weight once per token, and
    /// with 4 KiB pages a page walk every 4 KiB costs about a tenth of a Q4_0 token on a
    /// virtual machine; packing a model's weights in one call lets all of them share huge
    /// pages (the buffer's last huge page is the only one partly used).
    ///
    /// ```
    /// use ggrs_core::{kernels::PackedWeight, DType};
    /// // 32 rows of 64 Q4_0 values (2 blocks of 18 bytes per row), and a second weight.
    /// let (a, b) = (vec![0u8; 32 * 36], vec![0u8; 48 * 36]);
    /// let packed = PackedWeight::pack_all(&[
    ///     (DType::Q4_0, [64, 32, 1, 1], &a[..]),
    ///     (DType::Q4_0, [64, 48, 1, 1], &b[..]),
    /// ], |_| ());
    /// assert_eq!(packed.len(), 2);
    /// // Panels where this CPU has the panel kernels (AVX-512 VNNI or AVX2), else copies of the rows;
    /// // nothing on targets without packing.
    /// for p in packed.iter().flatten() {
    ///     assert!(p.bytes() > 0);
    /// }
    /// ```
    pub fn pack_all(
        weights: &[(DType, [usize; 4], &[u8])],
        done: impl FnMut(usize),
    ) -> Vec<Option<PackedWeight>> {
        #[cfg(target_arch = "x86_64")]
        {
            store::pack_all(weights, done)
                .into_iter()
                .map(|e| e.map(|entry| PackedWeight { entry }))
                .collect()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = done;
            weights.iter().map(|_| None).collect()
        }
    }

    /// Bytes of the copy (for panels, rows past the last whole panel are not packed).
    pub fn bytes(&self) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            self.entry.len
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            0
        }
    }

    /// Whether this is a copy of the `ne` weight of type `dtype` whose bytes start at
    /// address `source` (what [`crate::Context::set_packed`] checks).
    pub(crate) fn copies(&self, dtype: DType, ne: [usize; 4], source: *const u8) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let e = &self.entry;
            e.dtype == dtype && e.ne == ne && e.source == source as usize
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (dtype, ne, source);
            false
        }
    }
}

/// Packed copies: one shared huge-page buffer per [`PackedWeight::pack_all`] call.
#[cfg(target_arch = "x86_64")]
pub(crate) mod store {
    use std::sync::Arc;

    use crate::dtype::DType;
    use crate::kernels::select::panel_kind;
    use crate::kernels::x86::panel::{self, Kind, ROWS};

    // Where the shared buffers of packed weights start: a multiple of the huge page (the
    // size the file maps are placed at), so that every full 2 MiB of a buffer can be one.
    use crate::gguf::HUGE_PAGE;

    /// The buffer several packed copies share (read-only once they are packed).
    struct Store {
        map: memmap2::Mmap,
        /// Offset of the first packed copy in `map` (the first huge-page boundary).
        start: usize,
    }

    /// A packed copy and what it was made from.
    pub(crate) struct Packed {
        /// The panel kernel's layout, or `None` for a copy of the rows as they are.
        pub kind: Option<Kind>,
        pub dtype: DType,
        pub ne: [usize; 4],
        /// The address of the bytes it was packed from: the data of the tensors that may
        /// carry it (`Context::set_packed`).
        pub source: usize,
        /// The buffer holding the copy from byte `at` of the store's packed region on, `len`
        /// bytes: `ne[1] / 16` panels of `ne[0] / 32` packed blocks each, or the `ne[1]` rows.
        store: Arc<Store>,
        at: usize,
        pub len: usize,
    }

    impl Packed {
        /// The first byte of the copy.
        pub fn start(&self) -> *const u8 {
            self.store.map[self.store.start + self.at..].as_ptr()
        }

        /// The first byte of panel `p`.
        pub fn panel(&self, p: usize) -> *const u8 {
            let bytes = self
                .kind
                .map_or(0, |k| k.panel_bytes(self.ne[0] / k.block_values()));
            debug_assert!(self.kind.is_some() && p < self.ne[1] / ROWS);
            self.start().wrapping_add(p * bytes)
        }
    }

    /// Anonymous memory of at least `len` bytes starting at a huge-page boundary, advised for
    /// transparent huge pages where the system has them; the boundary's offset with it.
    fn huge_buffer(len: usize) -> Option<(memmap2::MmapMut, usize)> {
        let map = memmap2::MmapMut::map_anon(len.checked_add(HUGE_PAGE)?).ok()?;
        let start = (map.as_ptr() as usize).next_multiple_of(HUGE_PAGE) - map.as_ptr() as usize;
        #[cfg(target_os = "linux")]
        {
            // Only advice: where the kernel refuses it, the pages stay 4 KiB ones.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        Some((map, start))
    }

    /// Writes a zero into every 4 KiB of `region` (fresh anonymous memory, all zeros
    /// already), on as many threads as the CPU has, so that the page faults that allocate
    /// and clear it run in parallel. On a virtual machine those faults also make the host
    /// back the memory, and take most of the time packing a model takes.
    fn fault_in(region: &mut [u8]) {
        let touch = |chunk: &mut [u8]| chunk.iter_mut().step_by(4096).for_each(|b| *b = 0);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let part = region.len().div_ceil(threads).next_multiple_of(HUGE_PAGE);
        if threads == 1 || region.len() <= part {
            return touch(region);
        }
        std::thread::scope(|s| {
            for chunk in region.chunks_mut(part) {
                s.spawn(move || touch(chunk));
            }
        });
    }

    pub(super) fn pack_all(
        weights: &[(DType, [usize; 4], &[u8])],
        mut done: impl FnMut(usize),
    ) -> Vec<Option<Arc<Packed>>> {
        // Where each weight goes in the shared buffer, each copy starting 64-byte aligned
        // (panels are multiples of 64 bytes, `Kind::panel_bytes`; row copies are rounded up).
        let mut total = 0usize;
        let places: Vec<Option<(Option<Kind>, usize, usize)>> = weights
            .iter()
            .map(|&(dtype, ne, data)| {
                let planes = ne[2];
                let rows_bytes = dtype.row_size(ne[0]) * ne[1] * planes;
                if ne[3] != 1 || rows_bytes == 0 || data.len() < rows_bytes {
                    return None;
                }
                // A stack of matrices (the experts `mul_mat_id` reads) is packed matrix by
                // matrix, each in the panels of its kernel as a 2-D weight, and only then.
                let kind = panel_kind(dtype, [ne[0], ne[1], 1, 1]);
                let len = match kind {
                    Some(kind) => {
                        planes * (ne[1] / ROWS) * kind.panel_bytes(ne[0] / kind.block_values())
                    }
                    None if planes == 1 => rows_bytes,
                    None => return None,
                };
                let at = total;
                total += len.next_multiple_of(64);
                Some((kind, at, len))
            })
            .collect();
        if total == 0 {
            return weights.iter().map(|_| None).collect();
        }
        let Some((mut map, start)) = huge_buffer(total) else {
            return weights.iter().map(|_| None).collect();
        };
        let region = &mut map[start..start + total];
        for (i, (&(dtype, ne, data), place)) in weights.iter().zip(&places).enumerate() {
            let Some((kind, at, len)) = *place else {
                continue;
            };
            // Weight by weight, so that resident memory holds the copies made so far and
            // one source, never every source and every copy.
            fault_in(&mut region[at..at + len]);
            let Some(kind) = kind else {
                region[at..at + len].copy_from_slice(&data[..len]);
                done(i);
                continue;
            };
            let (rs, nb) = (dtype.row_size(ne[0]), ne[0] / kind.block_values());
            let panel_bytes = kind.panel_bytes(nb);
            let out = region[at..at + len].as_mut_ptr();
            // Panel p is panel p % np of matrix p / np, whose rows follow the previous
            // matrix's.
            let np = ne[1] / ROWS;
            for p in 0..len / panel_bytes {
                let first = (p / np) * ne[1] + (p % np) * ROWS;
                let rows: [*const u8; ROWS] =
                    std::array::from_fn(|r| data[(first + r) * rs..].as_ptr());
                // SAFETY: `panels::kind` checked the CPU features; each row holds nb whole
                // blocks inside `data` (length checked above); panel p's bytes lie inside
                // this weight's `len` bytes of `region`.
                unsafe {
                    panel::pack(
                        kind,
                        nb,
                        &rows,
                        out.add(p * panel_bytes),
                        panel::Ahead::NONE,
                    )
                };
            }
            done(i);
        }
        let Ok(map) = map.make_read_only() else {
            return weights.iter().map(|_| None).collect();
        };
        let store = Arc::new(Store { map, start });
        weights
            .iter()
            .zip(places)
            .map(|(&(dtype, ne, data), place)| {
                let (kind, at, len) = place?;
                Some(Arc::new(Packed {
                    kind,
                    dtype,
                    ne,
                    source: data.as_ptr() as usize,
                    store: Arc::clone(&store),
                    at,
                    len,
                }))
            })
            .collect()
    }
}
