//! `mul_mat_id`: the experts of a mixture-of-experts layer, a matrix of a stack chosen per
//! column by the ids.
//!
//! llama.cpp multiplies every column of a `mul_mat_id` on its own, with the one-column
//! kernel of the chosen matrix (`ggml_compute_forward_mul_mat_id`; its repacked kernels run
//! their GEMV per column), so each column here has the bits of a one-column `mul_mat` by
//! that matrix as a 2-D tensor: the kernels of [`select::select_id`]. Like llama.cpp, the
//! columns are grouped by matrix first, so that each matrix is read once per step for all
//! the columns that chose it, through the panel kernels where its type has them (their
//! several-column passes keep every column's one-column bits):
//!
//! - INIT converts `b`'s rows as a `mul_mat`'s INIT does (same form, same slots), and one
//!   piece of it groups the (slot, token) columns by matrix ([`group`]) into the shared
//!   buffer after the converted rows: the start of each matrix's list, then the lists.
//! - COMPUTE chunks cover only the matrices some column chose: each chosen matrix's rows
//!   are split into blocks of 16 (one panel), each block weighs its matrix's column count
//!   plus [`BLOCK_COST`], and chunk `c` takes the blocks whose weight falls in its share of
//!   the total ([`compute`]). A decoding step's 2..8 experts and a prompt's columns spread
//!   over every expert both give every thread work.
//!
//! An id outside `0..n_mat` is found while grouping and reported by every chunk.

use super::*;
use crate::error::Result;

/// Rows of a block of work: one panel.
const BLOCK: usize = TILE;

/// What a block of rows costs beyond its columns' dot products, in columns: streaming the
/// block's weights (about what one column's products cost, packed) and starting on it.
const BLOCK_COST: u64 = 2;

/// Words before the lists in the grouping: a status (0: every id valid; 1: the next word is
/// the first invalid id, in (token, slot) order).
const HEAD_WORDS: usize = 2;

/// The columns of one matrix of a `mul_mat_id`, in the order [`group`] listed them: entry
/// `j` is column `slot + n_used·token` of the output.
#[derive(Clone, Copy)]
pub(super) struct Gathered<'t> {
    cols: &'t [u32],
    n_used: usize,
    n_b: usize,
}

impl Gathered<'_> {
    /// Output column `j` of the list as `(slot, token)`.
    #[inline]
    pub(super) fn column(&self, j: usize) -> (usize, usize) {
        let c = self.cols[j] as usize;
        (c % self.n_used, c / self.n_used)
    }

    /// The slot of INIT's buffer holding column `j`'s converted activations: row
    /// `(slot % n_b, token)` of `b`.
    #[inline]
    pub(super) fn slot(&self, j: usize) -> usize {
        let (slot, t) = self.column(j);
        slot % self.n_b + self.n_b * t
    }

    fn len(&self) -> usize {
        self.cols.len()
    }
}

/// Bytes INIT writes for the activations of a `mul_mat_id` planned with `kernel` (`k`
/// values per row, `rows` rows): the converted rows, then a panel kernel's side data.
fn activation_bytes(kernel: &select::MatMulKernel, k: usize, rows: usize) -> usize {
    let form = kernel
        .activation
        .unwrap_or(ActivationForm::Rows(DType::F32));
    #[cfg(target_arch = "x86_64")]
    let aux = match form {
        ActivationForm::Panel(kind) => k / kind.block_values() * kind.aux_bytes(),
        _ => 0,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let aux = 0;
    (form.rows().row_size(k) + aux) * rows
}

/// Where the grouping starts in the shared buffer (8-byte aligned, after the activations).
fn groups_at(task: &Task) -> usize {
    let kernel = task
        .plan
        .matmul
        .expect("a mul_mat_id task carries the kernel its plan chose");
    activation_bytes(&kernel, task.s0().ne[0], task.s1().nrows()).next_multiple_of(8)
}

/// Plans a `mul_mat_id` (`a`: `[k, n, n_mat]`, `b`: `[k, n_b, n_tok]`, `dst`:
/// `[n, n_used, n_tok]`) on `nth` threads: the kernels of a one-column product by one
/// matrix ([`select::select_id`]), room for the converted rows and the grouping, and a
/// fixed number of chunks that [`compute`] maps onto the matrices chosen when it runs.
pub(crate) fn plan(a: &TensorMeta, b: &TensorMeta, dst: &TensorMeta, nth: usize) -> TaskPlan {
    let k = a.ne[0];
    let n_mat = a.ne[2].max(1);
    let entries = dst.ne[1] * dst.ne[2];
    // Each column is a one-column product by one matrix of `a`, as a 2-D tensor.
    let mat = TensorMeta {
        ne: [k, a.ne[1], 1, 1],
        ..a.clone()
    };
    let kernel = select::select_id(weight(&mat), activations(b));
    let groups = activation_bytes(&kernel, k, b.nrows()).next_multiple_of(8);
    // Room to pack one panel where the weight was not packed ahead.
    #[cfg(target_arch = "x86_64")]
    let scratch = match kernel.compute {
        select::Compute::Panel { kind, .. } => {
            (k + 16).max(kind.panel_bytes(k / kind.block_values()).div_ceil(4) + 16)
        }
        _ => k + 16,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let scratch = k + 16;
    // Several chunks per thread, so that threads finishing early take more; more for
    // prompts, whose blocks weigh more and less evenly.
    let n_chunks = if entries <= TILE { nth * 8 } else { nth * 16 }.max(1);
    TaskPlan {
        n_chunks,
        init: true,
        finalize: false,
        work_shared: groups + 4 * (HEAD_WORDS + n_mat + 1 + entries),
        scratch_f32: scratch,
        tiles: (n_chunks, 1),
        n_threads: nth,
        matmul: Some(kernel),
    }
}

/// The grouping words of a `mul_mat_id` task in the shared buffer: the head, the start of
/// each matrix's list (`n_mat + 1`), the lists (`n_used · n_tok`).
///
/// # Safety
/// The shared buffer was sized by [`plan`] for this task; nobody writes the words while the
/// slice lives, unless through it.
unsafe fn words<'w>(task: &Task, shared: *mut u8) -> &'w mut [u32] {
    let ids = task.src[2]
        .as_ref()
        .expect("builder gives mul_mat_id its ids as src2");
    let len = HEAD_WORDS + task.s0().ne[2] + 1 + ids.ne[0] * ids.ne[1];
    // SAFETY: the caller's guarantee; the shared buffer is 64-byte aligned and
    // `groups_at` a multiple of 8, so the words are aligned.
    unsafe { std::slice::from_raw_parts_mut(shared.add(groups_at(task)) as *mut u32, len) }
}

/// Groups the (slot, token) columns of a `mul_mat_id` by the matrix their id names, into
/// the shared buffer after the converted rows (a counting sort: each matrix's columns in
/// (token, slot) order). Records the first invalid id instead.
///
/// # Safety
/// As [`crate::kernels::init`]; one INIT piece of the node runs this (the others do not
/// touch the words).
pub(crate) unsafe fn group(task: &Task, work: &mut Work) {
    let ids = task.src[2]
        .as_ref()
        .expect("builder gives mul_mat_id its ids as src2");
    let n_mat = task.s0().ne[2];
    let (n_used, n_tok) = (ids.ne[0], ids.ne[1]);
    // SAFETY: planned for this task; only this piece touches the words during INIT.
    let words = unsafe { words(task, work.shared) };
    let (head, rest) = words.split_at_mut(HEAD_WORDS);
    let (starts, cols) = rest.split_at_mut(n_mat + 1);
    let id_at = |slot: usize, t: usize| {
        // SAFETY: (slot, t) lies within ids ([n_used, n_tok] i32, 4-byte aligned).
        unsafe { *(ids.data.add(ids.offset(slot, t, 0, 0)) as *const i32) }
    };
    head[0] = 0;
    starts.fill(0);
    for t in 0..n_tok {
        for slot in 0..n_used {
            let id = id_at(slot, t);
            if id < 0 || id as usize >= n_mat {
                (head[0], head[1]) = (1, id as u32);
                return;
            }
            starts[id as usize + 1] += 1;
        }
    }
    for e in 0..n_mat {
        starts[e + 1] += starts[e];
    }
    // Each list filled from its start; afterwards `starts[e]` is the end of list e.
    for t in 0..n_tok {
        for slot in 0..n_used {
            let e = id_at(slot, t) as usize;
            cols[starts[e] as usize] = (slot + n_used * t) as u32;
            starts[e] += 1;
        }
    }
    starts.copy_within(0..n_mat, 1);
    starts[0] = 0;
}

/// One chunk of a `mul_mat_id` planned by [`plan`]: its share of the blocks of rows of the
/// chosen matrices (see the module docs), each block against every column that chose its
/// matrix. Fails on an id outside `0..n_mat`.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; INIT has run (the grouping is in the shared
/// buffer).
pub(crate) unsafe fn compute(
    task: &Task,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) -> Result<()> {
    let (a, b) = (task.s0(), task.s1());
    let ids = task.src[2]
        .as_ref()
        .expect("builder gives mul_mat_id its ids as src2");
    let n_mat = a.ne[2];
    // SAFETY: planned for this task; INIT wrote the words and nothing writes them during
    // COMPUTE.
    let words: &[u32] = unsafe { words(task, work.shared) };
    if words[0] != 0 {
        return crate::kernels::rows::check_id("MUL_MAT_ID", words[1] as i32, n_mat).map(|_| ());
    }
    let starts = &words[HEAD_WORDS..HEAD_WORDS + n_mat + 1];
    let cols = &words[HEAD_WORDS + n_mat + 1..];
    let blocks = a.ne[1].div_ceil(BLOCK) as u64;
    let weight = |e: usize| (starts[e + 1] - starts[e]) as u64 + BLOCK_COST;
    let total: u64 = (0..n_mat)
        .filter(|&e| starts[e + 1] > starts[e])
        .map(|e| blocks * weight(e))
        .sum();
    // Chunks are taken in turn by the threads: each thread's chunks lie next to each other
    // (see `interleaved_position`).
    let pos = interleaved_position(chunk, n_chunks, task.plan.n_threads) as u64;
    let n_chunks = n_chunks as u64;
    // This chunk's share of the weight: the blocks starting inside [lo, hi).
    let (lo, hi) = (total * pos / n_chunks, total * (pos + 1) / n_chunks);
    let mut at = 0u64;
    for e in 0..n_mat {
        let (s, t) = (starts[e] as usize, starts[e + 1] as usize);
        if s == t {
            continue;
        }
        if at >= hi {
            break;
        }
        let w = weight(e);
        let first = lo.saturating_sub(at).div_ceil(w).min(blocks) as usize;
        let last = hi.saturating_sub(at).div_ceil(w).min(blocks) as usize;
        at += blocks * w;
        if first < last {
            let g = Gathered {
                cols: &cols[s..t],
                n_used: ids.ne[0],
                n_b: b.ne[1],
            };
            // SAFETY: blocks first..last of matrix e are this chunk's only (the shares
            // partition the blocks); every column of `g` chose e.
            unsafe { matrix(task, work, e, g, first * BLOCK..(last * BLOCK).min(a.ne[1])) };
        }
    }
    Ok(())
}

/// Rows `rows` of matrix `e` against the columns `g` that chose it, with the planned
/// kernel.
///
/// # Safety
/// As [`compute`]; no other chunk writes these rows of these columns.
unsafe fn matrix(
    task: &Task,
    work: &mut Work,
    e: usize,
    g: Gathered<'_>,
    rows: std::ops::Range<usize>,
) {
    let kernel = task
        .plan
        .matmul
        .expect("a mul_mat_id task carries the kernel its plan chose");
    match kernel.compute {
        #[cfg(target_arch = "x86_64")]
        select::Compute::Panel { kind, first, rest } => {
            // SAFETY: forwarded.
            unsafe { panel_rows(task, work, kind, first, e, g, rows.clone()) };
            let whole = task.s0().ne[1] / BLOCK * BLOCK;
            if rows.end > whole {
                let view = Operands::gathered(task, work, e, g);
                // SAFETY: the rows below the last whole panel, this chunk's.
                unsafe { view.elements(rest, rows.start.max(whole)..rows.end, 0..g.len()) };
            }
        }
        select::Compute::Element(el) => {
            let view = Operands::gathered(task, work, e, g);
            // SAFETY: forwarded.
            unsafe { view.elements(el, rows, 0..g.len()) };
        }
        #[cfg(target_arch = "x86_64")]
        select::Compute::F16Tiles { rest } => {
            // (`select_id` plans one-column kernels, which never are F16 tiles.)
            let view = Operands::gathered(task, work, e, g);
            // SAFETY: forwarded.
            unsafe { view.elements(rest, rows, 0..g.len()) };
        }
        #[cfg(target_arch = "x86_64")]
        select::Compute::TiledPanel(_) => {
            unreachable!("select_id plans one-column kernels, and no tiled panel takes one column")
        }
    }
}

/// The whole panels among rows `rows` of matrix `e` (rows a multiple of 16 apart from the
/// end), each against every column of `g`, packed ahead or packed here.
///
/// # Safety
/// As [`matrix`], for a panel plan.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn panel_rows(
    task: &Task,
    work: &mut Work,
    kind: crate::kernels::x86::panel::Kind,
    first: (crate::kernels::x86::panel::Kind, usize),
    e: usize,
    g: Gathered<'_>,
    rows: std::ops::Range<usize>,
) {
    use crate::kernels::x86::panel::ROWS;
    const _: () = assert!(ROWS == BLOCK, "a block of work is one panel");
    let (a, b, d) = (task.s0(), task.s1(), &task.dst);
    let k = a.ne[0];
    let nb = k / kind.block_values();
    let np = a.ne[1] / ROWS;
    let rs = kind.activation().row_size(k);
    let side = rs * b.nrows();
    let aux_bytes = nb * kind.aux_bytes();
    let shared = work.shared;
    let y = |j: usize| -> *const u8 {
        // SAFETY: g.slot(j) < b.nrows(): a converted row of INIT's buffer.
        unsafe { shared.add(g.slot(j) * rs) }
    };
    let aux = |j: usize| -> *const u8 {
        // SAFETY: as `y`; the side data follow the converted rows.
        unsafe { shared.add(side + g.slot(j) * aux_bytes) }
    };
    let panel_bytes = kind.panel_bytes(nb);
    assert!(
        work.scratch.len() * 4 >= panel_bytes,
        "the plan sizes the scratch for one packed panel"
    );
    let buf = work.scratch.as_mut_ptr() as *mut u8;
    for p in rows.start / ROWS..rows.end.min(np * ROWS) / ROWS {
        let panel = if task.packed.is_null() {
            // SAFETY: the CPU runs `kind` (the plan chose it), p < np whole panels of
            // matrix e, the scratch holds one panel.
            unsafe { panels::pack_panel(kind, a, (e, 0), p, np, buf) };
            buf as *const u8
        } else {
            // Panel p of matrix e of the copy packed ahead (matrix after matrix), which
            // the executor keeps alive.
            task.packed.wrapping_add((e * np + p) * panel_bytes)
        };
        let i0 = p * ROWS;
        // SAFETY: `panel` holds panel p; INIT wrote every column's converted row and side
        // data; rows i0..i0 + 16 of these columns are this chunk's.
        unsafe {
            panels::columns(kind, first, nb, panel, g.len(), y, aux, |j, col| {
                let (slot, t) = g.column(j);
                for (r, &v) in col.iter().enumerate() {
                    // SAFETY: element (i0 + r, slot, t) of dst, this chunk's.
                    *(d.data.add(d.offset(i0 + r, slot, t, 0)) as *mut f32) = v;
                }
            })
        };
    }
}
