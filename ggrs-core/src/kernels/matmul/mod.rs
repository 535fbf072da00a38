//! `mul_mat`: `dst[i, j] = Σ_k a[k, i] · b[k, j]`, a broadcast over axes 2 and 3.
//!
//! Planning picks the node's kernel and the form of its converted activations together, in
//! one place ([`select`]: the table of which kernel runs for which weight type, shape, column
//! count and CPU). INIT converts every row of `b` (f32, any strides) into that form in the
//! shared work buffer, rows split across threads (skipped when `b` already is dense f32 and
//! the weight pairs with f32). COMPUTE splits the output into chunks of weight rows ×
//! activation columns per batch and runs the planned kernel on them; each output element is
//! one dot product computed by one thread in a fixed order, so results do not depend on the
//! thread count. The kernels keep ggml's x86 summation orders where llama.cpp's bits are the
//! contract (see `kernels::ggml_arith`):
//! - panels ([`panels`]): chunks of whole 16-row panels against every column, each panel
//!   repacked once into one-row-per-lane vectors (`kernels::x86::panel`), or read from a copy
//!   packed at load ([`PackedWeight`]), INIT also writing each activation block's side data;
//! - F16 weights on AVX-512, prompts: chunks of ~64 rows against every column, sixteen
//!   columns at a time widened to f32 in INIT, 4 × 4 register tiles (tinyBLAS's order);
//! - k-quant and IQ4_XS weights against 8 columns or more (ggml's tiled order) on AVX2:
//!   panels of up to 16 rows × 16 columns, each weight block decoded once per panel
//!   (`kernels::x86::tiled_avx2`);
//! - everything else: 4 × 4, 4 × 1 and 1 × 4 tiles of a dot-product build, or one element
//!   at a time.
//!
//! `mul_mat_id` ([`experts`]) groups its columns by the matrix their ids choose and runs
//! each chosen matrix's columns through the kernels of a one-column product by it (panels
//! included: each column keeps its one-column bits).

pub(crate) mod experts;

pub(crate) use experts::{compute as compute_id, plan as plan_id};

use crate::dtype::DType;
use crate::kernels::packed::PackedWeight;
use crate::kernels::select;
use crate::kernels::{split_range, Task, TaskPlan, Work};
use crate::tensor::TensorMeta;
use crate::types::traits;
pub(crate) use select::ActivationForm;

/// A dot product of `n` values: a row of the weight type against a row of its
/// `vec_dot_type`, both as bytes.
pub use crate::quants::VecDotKernel as VecDotFn;

pub use select::supports;

/// `a` as [`select::select`] sees a weight.
fn weight(a: &TensorMeta) -> select::Weight {
    select::Weight {
        dtype: a.dtype,
        ne: a.ne,
    }
}

/// The layout of the activations `b` as [`select::select`] sees it.
fn activations(b: &TensorMeta) -> select::Activations {
    select::Activations {
        rows_contiguous: b.rows_contiguous(),
        contiguous: b.is_contiguous(),
    }
}

/// Whether every output column of a `mul_mat` with weights of type `dtype` and shape `ne`
/// has the same bits whatever the other columns are and however many there are (batch
/// invariance: a decode column in a server's batch keeps the arithmetic of a lone decode
/// step). True where one kernel serves every column count with one-column arithmetic (the
/// panel kernels on x86-64); false where the kernel, like llama.cpp's, changes order with
/// the column count (F16/F32 prompt tiles, the k-quants' tiled kernels, GEMM repacks) or
/// where this build cannot tell.
pub fn columns_independent(dtype: DType, ne: [usize; 4]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        select::panel_kind(dtype, ne)
            .is_some_and(|k| k.takes_columns(usize::MAX) && k.order_fixed())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, ne);
        false
    }
}

/// Rows of `dst` (weight rows) and columns (activation rows) per tile at most.
const TILE: usize = 16;

/// The place in memory order of chunk `rb` of `nrb` when consecutive chunks go to the
/// `regions` threads in turn: chunk `rb` is piece `rb / regions` of region
/// `rb % regions`, the regions lying one after the other; so a thread taking every
/// `regions`-th chunk streams through one contiguous range (a bijection of `0..nrb`).
fn interleaved_position(rb: usize, nrb: usize, regions: usize) -> usize {
    let regions = regions.clamp(1, nrb.max(1));
    let r = rb % regions;
    let before: usize = (0..r).map(|q| (nrb - q).div_ceil(regions)).sum();
    before + rb / regions
}

/// Row chunks of a quantized `mul_mat` with one tile of columns (decoding): the threads
/// take chunks in turn, so the last chunk of a node is what one thread may still be working
/// on while the others wait, and a few chunks of a vocabulary-sized output matmul are long
/// enough to leave the others idle; so up to `32·nth` chunks of at least 64 rows (ggml's
/// decoding chunk), and never fewer than [`grid`]'s `4·nth` (nor chunks under 16 rows).
fn decode_chunks(n: usize, nth: usize) -> usize {
    (n / 64)
        .min(nth * 32)
        .max(nth * 4)
        .min(n.div_ceil(TILE))
        .max(1)
}

fn grid(n: usize, m: usize, batches: usize, nth: usize) -> (usize, usize) {
    let ncb = m.div_ceil(TILE).max(1);
    let want = (nth * 4).div_ceil(ncb * batches).max(1);
    let nrb = want.min(n.div_ceil(TILE)).max(1);
    (nrb, ncb)
}

/// Plans a `mul_mat` (`a`: weights, `b`: activations, `dst`: the result) on `nth` threads:
/// its kernel and activation form ([`select::select`]), then the chunks and work buffers
/// that kernel needs.
pub(crate) fn plan(
    a: &TensorMeta,
    b: &TensorMeta,
    dst: &TensorMeta,
    nth: usize,
    per_column: bool,
) -> TaskPlan {
    let cols = select::arith_cols(per_column, b.ne[1]);
    let kernel = select::select(weight(a), activations(b), cols);
    #[cfg(target_arch = "x86_64")]
    if let select::Compute::Panel { kind, .. } = kernel.compute {
        return panels::plan(kind, kernel, a, b, dst, nth);
    }
    let k = a.ne[0];
    let conv = kernel.activation.is_some();
    let vdt = traits(a.dtype).vec_dot_type;
    let batches = dst.ne[2] * dst.ne[3];
    let (nrb, ncb) = if a.dtype == DType::F16 && dst.ne[1] >= 2 {
        // F16 prompts: chunks of about 64 weight rows against every column, so that each
        // weight row is read from memory once (see `tile`).
        let n = dst.ne[0];
        let nrb = n
            .div_ceil(64)
            .max((nth * 4).div_ceil(batches))
            .min(n.div_ceil(4))
            .max(1);
        (nrb, 1)
    } else if a.dtype.is_quantized() && dst.ne[1] <= TILE && batches == 1 {
        // Decoding (one tile of columns): more, smaller chunks of rows (see `decode_chunks`).
        (decode_chunks(dst.ne[0], nth), 1)
    } else {
        grid(dst.ne[0], dst.ne[1], batches, nth)
    };
    let widened = if kernel.activation == Some(ActivationForm::F16Widened) {
        4 * k * b.nrows()
    } else {
        0
    };
    TaskPlan {
        n_chunks: (batches * nrb * ncb).max(1),
        init: conv,
        finalize: false,
        work_shared: if conv {
            vdt.row_size(k) * b.nrows() + widened
        } else {
            0
        },
        scratch_f32: if conv { k + 16 } else { 0 },
        tiles: (nrb, ncb),
        n_threads: nth,
        matmul: Some(kernel),
    }
}

/// The widened f32 activation rows of an F16 `mul_mat` planned with them ([`f16_widens`]):
/// their byte offset in the shared buffer (after the `b.nrows()` f16 rows), if the plan
/// made room for them.
fn widened_offset(task: &Task) -> Option<usize> {
    let (a, b) = (task.s0(), task.s1());
    (task.plan.activation() == Some(ActivationForm::F16Widened))
        .then(|| DType::F16.row_size(a.ne[0]) * b.nrows())
}

/// Converts b's rows to the vec-dot type.
///
/// # Safety
/// See [`crate::kernels::init`]; the shared buffer holds `b.nrows()` converted rows.
pub(crate) unsafe fn init(task: &Task, ith: usize, nth: usize, work: &mut Work) {
    let (a, b) = (task.s0(), task.s1());
    // The form the plan chose (every plan with INIT names one).
    let form = task
        .plan
        .activation()
        .expect("a mul_mat plan with INIT names its activation form");
    let vdt = form.rows();
    let from = form.quantizer();
    let rs = vdt.row_size(a.ne[0]);
    #[cfg(target_arch = "x86_64")]
    let panel = panels::planned(task);
    let widened = widened_offset(task);
    for r in split_range(b.nrows(), nth, ith) {
        let (j, i2, i3) = b.unravel_row(r);
        // SAFETY: r < b.nrows(); slot r of the shared buffer is written by this thread only
        // (rows are split by thread).
        unsafe {
            let x = b.load_row(j, i2, i3, work.scratch);
            let out = std::slice::from_raw_parts_mut(work.shared.add(r * rs), rs);
            from(x, out);
            if let Some(off) = widened {
                // SAFETY: the plan sized the shared buffer for b.nrows() widened rows of k
                // f32 after the converted rows (`widened_offset`); row r is this thread's.
                let k = a.ne[0];
                let wide =
                    std::slice::from_raw_parts_mut(work.shared.add(off + 4 * r * k) as *mut f32, k);
                crate::kernels::ggml_arith::widen_f16(out, wide);
            }
            #[cfg(target_arch = "x86_64")]
            if let Some(kind) = panel {
                // SAFETY: the panel plan sizes the shared buffer for the side data of
                // every row after the converted rows; slot r is this thread's.
                let aux = panels::aux_row(kind, work.shared, rs, b.nrows(), a.ne[0], r);
                crate::kernels::x86::panel::activation_aux(kind, out, aux);
            }
        }
    }
}

/// One tile of the output.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; INIT has run.
pub(crate) unsafe fn compute(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let _ = n_chunks;
    #[cfg(target_arch = "x86_64")]
    if let Some(kind) = panels::planned(task) {
        // SAFETY: forwarded; the plan was made by `panels::plan` for this node.
        return unsafe { panels::compute(kind, task, chunk, work) };
    }
    let d = &task.dst;
    let (n, m) = (d.ne[0], d.ne[1]);
    let (nrb, ncb) = task.plan.tiles;
    let cb = chunk % ncb;
    let rb = (chunk / ncb) % nrb;
    let batch = chunk / (ncb * nrb);
    let (i2, i3) = (batch % d.ne[2], batch / d.ne[2]);
    // (Unlike the panel path, row blocks stay in order: for F16 decoding, measured, the
    // threads reading neighbouring blocks in turn stream faster than each its own range.)
    // SAFETY: forwarded; the rows and columns lie inside dst.
    unsafe {
        tile(
            task,
            work,
            (i2, i3),
            split_range(n, nrb, rb),
            split_range(m, ncb, cb),
        )
    };
}

/// Output rows `rows` × columns `cols` of batch `(i2, i3)`, with the kernel the plan names
/// (for a panel plan: its kernel of the rows below a whole panel).
///
/// # Safety
/// As [`compute`]; no other chunk writes these elements.
unsafe fn tile(
    task: &Task,
    work: &mut Work,
    batch: (usize, usize),
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) {
    let kernel = task
        .plan
        .matmul
        .expect("a mul_mat task carries the kernel its plan chose");
    let view = Operands::new(task, work, batch);
    match kernel.compute {
        #[cfg(target_arch = "x86_64")]
        select::Compute::Panel { rest, .. } => view.elements(rest, rows, cols),
        #[cfg(target_arch = "x86_64")]
        select::Compute::F16Tiles { rest } => match widened_offset(task) {
            Some(off) => view.f16_tiles(off, rest, rows, cols),
            // (A plan without the widened rows names no F16Tiles; kept total.)
            None => view.elements(rest, rows, cols),
        },
        #[cfg(target_arch = "x86_64")]
        select::Compute::TiledPanel(panel) => view.tiled_panel(panel, rows, cols),
        select::Compute::Element(e) => view.elements(e, rows, cols),
    }
}

/// The operands of one batch of a `mul_mat` task, as the kernels read them: weight rows,
/// converted (or in-place f32) activation rows, output elements.
struct Operands<'t> {
    task: &'t Task,
    shared: *mut u8,
    /// The output batch `(i2, i3)`.
    batch: (usize, usize),
    /// The weight batch of that output batch (ggml's broadcast rule).
    a_batch: (usize, usize),
    /// Bytes of a weight row and of an activation row.
    rs_a: usize,
    rs_b: usize,
    /// For a `mul_mat_id`: the columns of one matrix, gathered (column `j` of the view is
    /// entry `j` of the list); `None` for a `mul_mat`'s batch.
    gathered: Option<experts::Gathered<'t>>,
}

impl<'t> Operands<'t> {
    fn new(task: &'t Task, work: &mut Work, (i2, i3): (usize, usize)) -> Self {
        let (a, b) = (task.s0(), task.s1());
        let k = a.ne[0];
        let rs_b = match task.plan.activation() {
            Some(form) => form.rows().row_size(k),
            None => DType::F32.row_size(k),
        };
        Operands {
            task,
            shared: work.shared,
            batch: (i2, i3),
            a_batch: (i2 / (b.ne[2] / a.ne[2]), i3 / (b.ne[3] / a.ne[3])),
            rs_a: a.dtype.row_size(k),
            rs_b,
            gathered: None,
        }
    }

    /// The operands of a `mul_mat_id` chunk: matrix `e` of the stack, against the columns
    /// `cols` chose it (their converted rows in INIT's slots).
    fn gathered(task: &'t Task, work: &mut Work, e: usize, cols: experts::Gathered<'t>) -> Self {
        let k = task.s0().ne[0];
        let rs_b = task
            .plan
            .activation()
            .map_or(DType::F32, |form| form.rows())
            .row_size(k);
        Operands {
            task,
            shared: work.shared,
            batch: (0, 0),
            a_batch: (e, 0),
            rs_a: task.s0().dtype.row_size(k),
            rs_b,
            gathered: Some(cols),
        }
    }

    fn k(&self) -> usize {
        self.task.s0().ne[0]
    }

    /// Weight row `i` of this batch.
    fn a_row(&self, i: usize) -> &'t [u8] {
        let a = self.task.s0();
        let (a2, a3) = self.a_batch;
        // SAFETY: i < a.ne[1] (callers pass rows of dst, which has a's row count) and
        // (a2, a3) within a's outer shape (ggml's broadcast rule, checked by the builder).
        unsafe { std::slice::from_raw_parts(a.row_ptr(i, a2, a3) as *const u8, self.rs_a) }
    }

    /// Activation column `j` of this batch: with INIT, row (j, i2, i3) of the shared buffer;
    /// without, b's dense f32 row.
    fn b_row(&self, j: usize) -> &'t [u8] {
        let (b, d) = (self.task.s1(), &self.task.dst);
        let (i2, i3) = self.batch;
        // SAFETY: j < m; with conversion, row (j, i2, i3) is slot r of the shared buffer,
        // written in INIT; without, b is dense f32 and the row lies in its span. Gathered
        // columns: `slot` names a converted row of INIT's buffer (a `mul_mat_id` always
        // converts).
        unsafe {
            if let Some(g) = &self.gathered {
                let r = g.slot(j);
                std::slice::from_raw_parts(self.shared.add(r * self.rs_b), self.rs_b)
            } else if self.task.plan.init {
                let r = j + d.ne[1] * (i2 + d.ne[2] * i3);
                std::slice::from_raw_parts(self.shared.add(r * self.rs_b), self.rs_b)
            } else {
                std::slice::from_raw_parts(b.row_ptr(j, i2, i3), self.rs_b)
            }
        }
    }

    /// Writes output element (i, j) of this batch.
    ///
    /// # Safety
    /// i < n, j < m, and the element belongs to the calling chunk (no other chunk writes it).
    unsafe fn put(&self, i: usize, j: usize, v: f32) {
        let d = &self.task.dst;
        let (i1, i2, i3) = match &self.gathered {
            Some(g) => {
                let (slot, t) = g.column(j);
                (slot, t, 0)
            }
            None => (j, self.batch.0, self.batch.1),
        };
        // SAFETY: the caller's guarantee: the offset lies inside dst, the element is ours.
        unsafe { *(d.data.add(d.offset(i, i1, i2, i3)) as *mut f32) = v };
    }

    /// Writes output elements `(i..i + R, j)` of this batch: `R` consecutive elements of
    /// one output column, its address computed once (a plain `mul_mat`'s output; a
    /// gathered one element by element).
    ///
    /// # Safety
    /// `i + R ≤ n`, `j < m`, and the elements belong to the calling chunk.
    #[inline(always)]
    unsafe fn put_col<const R: usize>(&self, i: usize, j: usize, vals: [f32; R]) {
        if self.gathered.is_some() {
            for (r, &v) in vals.iter().enumerate() {
                // SAFETY: forwarded.
                unsafe { self.put(i + r, j, v) };
            }
            return;
        }
        let d = &self.task.dst;
        let (i2, i3) = self.batch;
        // SAFETY: the caller's guarantee: elements i..i + R of column j lie inside dst
        // (`nb[0]` apart) and are this chunk's.
        unsafe {
            let p = d.data.add(d.offset(i, j, i2, i3));
            for (r, &v) in vals.iter().enumerate() {
                *(p.add(r * d.nb[0]) as *mut f32) = v;
            }
        }
    }

    /// Rows × columns with a one-element kernel, in tiles where it has them. The tile
    /// kernels give every element the bits of the one-element kernel of the same build, so
    /// results do not depend on the tiling (or on the thread count).
    ///
    /// # Safety
    /// As [`tile`].
    unsafe fn elements(
        &self,
        e: select::Element,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) {
        let k = self.k();
        let (dot, tiles, gemm) = match e {
            select::Element::Tiles(v) => (v.dot, Some(v), None),
            select::Element::Dot(d) => (d, None, None),
            select::Element::Repacked {
                gemm_cols,
                gemm,
                gemv,
            } => (gemv, None, Some((gemm_cols, gemm))),
        };
        // Q4_K / Q2_K weights llama.cpp repacks: its GEMM order for the first columns of
        // each batch, the GEMV order for the rest.
        let dot_at = |j: usize| -> VecDotFn {
            match gemm {
                Some((n, g)) if j < n => g,
                _ => dot,
            }
        };
        let mut i = rows.start;
        if let Some(v) = tiles {
            // 4 × 4 tiles of weight rows × activation columns (each weight block decoded
            // once per four columns, each activation block loaded once per four rows), then
            // 4 × 1 for the columns left.
            while i + 4 <= rows.end {
                let ar = [
                    self.a_row(i),
                    self.a_row(i + 1),
                    self.a_row(i + 2),
                    self.a_row(i + 3),
                ];
                let mut j = cols.start;
                while j + 4 <= cols.end {
                    let bc = [
                        self.b_row(j),
                        self.b_row(j + 1),
                        self.b_row(j + 2),
                        self.b_row(j + 3),
                    ];
                    let t = (v.tile)(k, ar, bc);
                    for (r, row) in t.iter().enumerate() {
                        for (c, &val) in row.iter().enumerate() {
                            // SAFETY: an element of this chunk's tile.
                            unsafe { self.put(i + r, j + c, val) };
                        }
                    }
                    j += 4;
                }
                for j in j..cols.end {
                    let r = (v.rows4)(k, ar, self.b_row(j));
                    for (t, &val) in r.iter().enumerate() {
                        // SAFETY: an element of this chunk's tile.
                        unsafe { self.put(i + t, j, val) };
                    }
                }
                i += 4;
            }
        }
        for i in i..rows.end {
            let arow = self.a_row(i);
            let mut j = cols.start;
            if let Some(v) = tiles {
                while j + 4 <= cols.end {
                    let bc = [
                        self.b_row(j),
                        self.b_row(j + 1),
                        self.b_row(j + 2),
                        self.b_row(j + 3),
                    ];
                    let r = (v.dot4)(k, arow, bc);
                    for (t, &val) in r.iter().enumerate() {
                        // SAFETY: an element of this chunk's tile.
                        unsafe { self.put(i, j + t, val) };
                    }
                    j += 4;
                }
            }
            for j in j..cols.end {
                // SAFETY: an element of this chunk's tile.
                unsafe { self.put(i, j, dot_at(j)(k, arow, self.b_row(j))) };
            }
        }
    }

    /// F16 weights, prompts (tinyBLAS's order): the chunk's columns sixteen at a time, as
    /// f32 (widened once in INIT, at byte `off` of the shared buffer), against all the
    /// chunk's rows (which stay in cache), in register tiles of the ISA's shape
    /// (`ggml_arith::F16_TILE_AVX512` / `F16_TILE_AVX2`); `rest` for the rows past a
    /// multiple of the tile's rows.
    ///
    /// # Safety
    /// As [`tile`]; the plan made room for the widened rows and INIT wrote them.
    #[cfg(target_arch = "x86_64")]
    unsafe fn f16_tiles(
        &self,
        off: usize,
        rest: select::Element,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) {
        use crate::kernels::ggml_arith::{F16_TILE_AVX2 as T2, F16_TILE_AVX512 as T5};
        // SAFETY: forwarded.
        unsafe {
            if crate::cpu::isa() >= crate::cpu::Isa::Avx512 {
                self.f16_tiles_of::<{ T5.0 }, { T5.1 }, TILE>(off, rest, rows, cols)
            } else {
                self.f16_tiles_of::<{ T2.0 }, { T2.1 }, { 2 * T2.1 }>(off, rest, rows, cols)
            }
        }
    }

    /// [`Self::f16_tiles`] in tiles of `R` rows × `C` columns (then `R` × 1).
    ///
    /// # Safety
    /// As [`Self::f16_tiles`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn f16_tiles_of<const R: usize, const C: usize, const B: usize>(
        &self,
        off: usize,
        rest: select::Element,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) {
        use crate::kernels::ggml_arith::f16_lanes16_tile_f32;
        let (b, d) = (self.task.s1(), &self.task.dst);
        let (k, m) = (self.k(), d.ne[1]);
        let (i2, i3) = self.batch;
        // SAFETY: INIT wrote b.nrows() widened rows of k f32 at `off` (4-byte aligned: the
        // shared buffer is 64-byte aligned and `off` is a multiple of 32 bytes, k being a
        // multiple of 16); nothing writes them during COMPUTE.
        let wide = unsafe {
            std::slice::from_raw_parts(self.shared.add(off) as *const f32, b.nrows() * k)
        };
        // Row (j, i2, i3) is slot j + m·(i2 + ne2·i3), as the f16 rows.
        let slot0 = m * (i2 + d.ne[2] * i3);
        let wr = |j: usize| &wide[(slot0 + j) * k..(slot0 + j + 1) * k];
        let full = rows.start + (rows.len() / R) * R;
        // AVX-512's 4 × 4 tiles of a plain product with dense output columns: whole groups
        // of four columns by one call that stores its results itself.
        let direct = R == 4
            && C == 4
            && self.gathered.is_none()
            && d.nb[0] == 4
            && crate::cpu::isa() >= crate::cpu::Isa::Avx512
            && k.is_multiple_of(16);
        // Columns per block: on the direct path as many as keep the block's widened
        // activations within about 24 KiB (L1), four to sixteen (measured on MiniLM's
        // k = 1536 products: 4 columns 231 GFLOP/s against 205 with 16).
        let bw = if direct {
            (6144 / k.max(1) / 4 * 4).clamp(4, B)
        } else {
            B
        };
        for cb in cols.clone().step_by(bw) {
            let cblk = cb..(cb + bw).min(cols.end);
            for i in (rows.start..full).step_by(R) {
                let ar: [&[u8]; R] = std::array::from_fn(|r| self.a_row(i + r));
                // SAFETY: elements i..i + R of column j are this chunk's tile's.
                let put = |j: usize, col: [f32; R]| unsafe { self.put_col(i, j, col) };
                let mut j = cb;
                if direct {
                    let groups = cblk.len() / 4;
                    let a4: [*const u8; 4] = std::array::from_fn(|r| ar[r % R].as_ptr());
                    // SAFETY: AVX-512 (checked); k is a multiple of 16 and each weight row
                    // holds 2k bytes; columns j..j + 4·groups < m are widened rows of k
                    // f32 in `wide`, consecutive slots k apart; output elements i..i + 4 of
                    // those columns lie in dst (nb[0] = 4, columns nb[1] apart, a multiple
                    // of 4 bytes) and are this chunk's.
                    unsafe {
                        crate::kernels::x86::f16::f16_tiles_4x4_cols(
                            k,
                            a4,
                            wr(j).as_ptr(),
                            k,
                            groups,
                            d.data.add(d.offset(i, j, i2, i3)) as *mut f32,
                            d.nb[1] / 4,
                        )
                    };
                    j += 4 * groups;
                }
                while j + C <= cblk.end {
                    let t = f16_lanes16_tile_f32::<R, C>(k, ar, std::array::from_fn(|c| wr(j + c)));
                    for c in 0..C {
                        put(j + c, t.map(|row| row[c]));
                    }
                    j += C;
                }
                for j in j..cblk.end {
                    let t = f16_lanes16_tile_f32::<R, 1>(k, ar, [wr(j)]);
                    put(j, t.map(|row| row[0]));
                }
            }
        }
        // SAFETY: the rows past the last whole tile, this chunk's.
        unsafe { self.elements(rest, full..rows.end, cols) };
    }

    /// K-quants in ggml's tiled order (from 8 columns on, AVX2): panels of up to 16 rows ×
    /// 16 columns, each weight block decoded once per panel (`kernels::x86::tiled_avx2`),
    /// with `dot_tiled`'s bits for every element.
    ///
    /// # Safety
    /// As [`tile`]; `panel` came from `dispatch::tiled_panel` for this weight.
    #[cfg(target_arch = "x86_64")]
    unsafe fn tiled_panel(
        &self,
        panel: crate::quants::dispatch::TiledPanelFn,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) {
        use crate::quants::dispatch::TILED_PANEL_COLS as PC;
        const PR: usize = 16;
        let nb = self.k() / crate::quants::QK_K;
        let mut buf = [0f32; PR * PC];
        for cb in cols.clone().step_by(PC) {
            let ce = (cb + PC).min(cols.end);
            let mut ys = [std::ptr::null::<u8>(); PC];
            for (p, j) in ys.iter_mut().zip(cb..ce) {
                *p = self.b_row(j).as_ptr();
            }
            for rb in rows.clone().step_by(PR) {
                let re = (rb + PR).min(rows.end);
                let mut xs = [std::ptr::null::<u8>(); PR];
                for (p, i) in xs.iter_mut().zip(rb..re) {
                    *p = self.a_row(i).as_ptr();
                }
                // SAFETY: `tiled_panel` hands the kernel out only when the CPU has AVX2, FMA
                // and F16C; each weight row holds k / 256 blocks of its type and each
                // converted column k / 256 Q8_K blocks; 1..=PC columns, 1..=PR rows, `buf`
                // holds PR·PC values.
                unsafe { panel(nb, &xs[..re - rb], &ys[..ce - cb], &mut buf) };
                for i in rb..re {
                    for j in cb..ce {
                        // SAFETY: an element of this chunk's tile.
                        unsafe { self.put(i, j, buf[(i - rb) * PC + (j - cb)]) };
                    }
                }
            }
        }
    }
}

/// Keeps the packed copy a `mul_mat` task points at ([`Task::packed`]) alive while its graph
/// runs.
pub(crate) struct PackedKeep {
    #[cfg(target_arch = "x86_64")]
    _entry: std::sync::Arc<crate::kernels::packed::store::Packed>,
}

/// Points `task` (a `mul_mat` or `mul_mat_id`) at `packed`, the packed copy its weight operand carries
/// ([`crate::Context::set_packed`]), once per graph run rather than per chunk: a panel plan
/// streams the copy's panels when they are in its kernel's layout, any other plan reads a
/// plain copy of the rows in place of the source. A copy in another layout than the plan
/// reads is not used. The result must outlive every use of the task.
pub(crate) fn attach_packed(task: &mut Task, packed: &PackedWeight) -> Option<PackedKeep> {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::x86::panel::Kind;
        let entry = &packed.entry;
        let a = task.s0();
        // (The matrices of a stack one after the other, as they were packed.)
        let dense = a.nb[0] == a.dtype.type_size()
            && a.nb[1] == a.dtype.row_size(a.ne[0])
            && (a.ne[2] <= 1 || a.nb[2] == a.nb[1] * a.ne[1]);
        if !(dense && entry.dtype == a.dtype && entry.ne == a.ne) {
            return None;
        }
        let kind = panels::planned(task);
        // One layout may serve several kernels (`Kind::layout`).
        if entry.kind.map(Kind::layout) != kind.map(Kind::layout) {
            return None;
        }
        if kind.is_some() {
            task.packed = entry.panel(0);
        } else {
            // A byte-for-byte copy with the same type, shape and (dense) strides: every path
            // reads it in place of the source. `mul_mat` never writes its weight operand, so
            // the read-only mapping behind the pointer is never written.
            task.src[0].as_mut()?.data = entry.start().cast_mut();
        }
        Some(PackedKeep {
            _entry: std::sync::Arc::clone(entry),
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (task, packed);
        None
    }
}

/// The panel path (x86-64, AVX-512 VNNI or AVX2): Q4_0 and Q8_0 weights in ggml's order, sixteen
/// weight rows packed at a time (`kernels::x86::panel`) and dotted with every activation
/// column while the packed panel sits in L1/L2. Chunks are ranges of whole panels, so each
/// panel is packed once per node and batch; the `n % 16` rows left over go through [`tile`]
/// in the last chunk. Each element is still one dot product in a fixed order: results do
/// not depend on the thread count (and equal the tile kernels' bits).
#[cfg(target_arch = "x86_64")]
mod panels {
    use super::*;
    use crate::kernels::x86::panel::{self, Kind, ROWS};

    /// The panel kernel of a node planned by [`plan`] (its activation form names it), so
    /// that INIT and COMPUTE follow the plan even if a switch changed since.
    pub(super) fn planned(task: &Task) -> Option<Kind> {
        match task.plan.matmul?.compute {
            select::Compute::Panel { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// The side data of converted row `r` in the shared buffer (after the `rows` converted
    /// rows of `rs` bytes).
    ///
    /// # Safety
    /// The shared buffer was sized by [`plan`]; `r < rows`; nobody else accesses the slot.
    pub(super) unsafe fn aux_row<'w>(
        kind: Kind,
        shared: *mut u8,
        rs: usize,
        rows: usize,
        k: usize,
        r: usize,
    ) -> &'w mut [u8] {
        let len = k / kind.block_values() * kind.aux_bytes();
        // SAFETY: the caller's guarantee; the slot lies inside the planned size.
        unsafe { std::slice::from_raw_parts_mut(shared.add(rs * rows + r * len), len) }
    }

    pub(super) fn plan(
        kind: Kind,
        kernel: select::MatMulKernel,
        a: &TensorMeta,
        b: &TensorMeta,
        dst: &TensorMeta,
        nth: usize,
    ) -> TaskPlan {
        let k = a.ne[0];
        let nb = k / kind.block_values();
        let np = dst.ne[0] / ROWS;
        let batches = dst.ne[2] * dst.ne[3];
        // Several chunks per thread so that threads finishing early pick up more; chunk
        // `rb` covers the panels of place `interleaved_position(rb, …)`, so that a thread
        // taking every `nth`-th chunk reads one contiguous range: a new stream for the
        // hardware prefetcher to pick up costs more than the few bytes per chunk.
        let nrb = (nth * 8).div_ceil(batches).clamp(1, np.max(1));
        let rs = kind.activation().row_size(k);
        TaskPlan {
            n_chunks: (batches * nrb).max(1),
            init: true,
            finalize: false,
            work_shared: (rs + nb * kind.aux_bytes()) * b.nrows(),
            scratch_f32: (k + 16).max(kind.panel_bytes(nb).div_ceil(4) + 16),
            tiles: (nrb, 0),
            n_threads: nth,
            matmul: Some(kernel),
        }
    }

    /// One chunk: a range of panels of one batch, against every column.
    ///
    /// # Safety
    /// As [`super::compute`], for a plan made by [`plan`].
    pub(super) unsafe fn compute(kind: Kind, task: &Task, chunk: usize, work: &mut Work) {
        let (a, b, d) = (task.s0(), task.s1(), &task.dst);
        let k = a.ne[0];
        let nb = k / kind.block_values();
        let (n, m) = (d.ne[0], d.ne[1]);
        let np = n / ROWS;
        let nrb = task.plan.tiles.0;
        let (rb, batch) = (chunk % nrb, chunk / nrb);
        let (i2, i3) = (batch % d.ne[2], batch / d.ne[2]);
        let (a2, a3) = (i2 / (b.ne[2] / a.ne[2]), i3 / (b.ne[3] / a.ne[3]));
        let rs = kind.activation().row_size(k);
        let aux_bytes = kind.aux_bytes();
        let slot = |j: usize| j + m * (i2 + d.ne[2] * i3);
        let y = |j: usize| -> *const u8 {
            // SAFETY: slot(j) < b.nrows(): converted row in the shared buffer.
            unsafe { work.shared.add(slot(j) * rs) }
        };
        let aux = |j: usize| -> *const u8 {
            // SAFETY: as `y`; the side data follow the converted rows (see `plan`).
            unsafe { work.shared.add(rs * b.nrows() + slot(j) * nb * aux_bytes) }
        };
        assert!(
            work.scratch.len() * 4 >= kind.panel_bytes(nb),
            "the panel plan sizes the scratch for one packed panel"
        );
        let buf = work.scratch.as_mut_ptr() as *mut u8;
        // A copy packed ahead (`PackedWeight`, attached by the executor): stream its panels
        // instead of packing.
        let panel_bytes = kind.panel_bytes(nb);
        // Chunks are taken in turn by the threads: lay them out so that each thread's
        // stream through the weight stays contiguous (see `interleaved_position`).
        let pos = interleaved_position(rb, nrb, task.plan.n_threads);
        let (first_kind, first_cols) = match task.plan.matmul.map(|k| k.compute) {
            Some(select::Compute::Panel { first, .. }) => first,
            _ => unreachable!("compute runs panels only for a panel plan"),
        };
        // The packed copy holds the panels of every matrix of a stack (3-D weights), one
        // matrix after the other.
        let plane = (a3 * a.ne[2] + a2) * np;
        let dense = d.nb[0] == 4;
        for p in split_range(np, nrb, pos) {
            let i0 = p * ROWS;
            let buf = match task.packed.is_null() {
                // Panel p < np of matrix (a2, a3) of the packed copy, which the executor
                // keeps alive.
                false => task.packed.wrapping_add((plane + p) * panel_bytes),
                true => {
                    // SAFETY: as below.
                    unsafe { pack_panel(kind, a, (a2, a3), p, np, buf) };
                    buf as *const u8
                }
            };
            // SAFETY: `buf` holds panel p (packed ahead or just now); INIT wrote the columns
            // and their side data; the panel's rows of every column are this chunk's.
            unsafe {
                columns(
                    kind,
                    (first_kind, first_cols),
                    nb,
                    buf,
                    m,
                    y,
                    aux,
                    |j, col| {
                        let at = d.data.add(d.offset(i0, j, i2, i3)) as *mut f32;
                        if dense {
                            // SAFETY: the panel's sixteen adjacent elements of column j,
                            // inside dst (rows i0..i0 + 16 < n).
                            std::ptr::copy_nonoverlapping(col.as_ptr(), at, ROWS);
                            return;
                        }
                        for (r, &v) in col.iter().enumerate() {
                            // SAFETY: an element of this chunk's panel, inside dst.
                            *(d.data.add(d.offset(i0 + r, j, i2, i3)) as *mut f32) = v;
                        }
                    },
                )
            };
        }
        if rb == nrb - 1 && np * ROWS < n {
            // SAFETY: the leftover rows, written by this chunk only.
            unsafe { tile(task, work, (i2, i3), np * ROWS..n, 0..m) };
        }
    }

    /// One packed panel (`nb` blocks of `kind`, at `buf`) against columns `0..m`, whose
    /// converted rows and side data are at `y(j)` and `aux(j)`: `put(j, values)` receives
    /// the panel's sixteen results of column `j`. The first `first.1` columns take kernel
    /// `first.0` (the kind's twin, `Kind::split`), the rest `kind`; every kernel takes
    /// several columns per pass where it has the registers for them (the grouping changes
    /// no column's bits).
    ///
    /// # Safety
    /// As `panel::gemm`: the CPU runs `kind`'s build, `buf` holds a packed panel of `nb`
    /// blocks, `y(j)` / `aux(j)` point at a converted row and its side data for every
    /// `j < m`; `put` may write its column's values (the caller owns those elements).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) unsafe fn columns(
        kind: Kind,
        first: (Kind, usize),
        nb: usize,
        buf: *const u8,
        m: usize,
        y: impl Fn(usize) -> *const u8,
        aux: impl Fn(usize) -> *const u8,
        mut put: impl FnMut(usize, &[f32; ROWS]),
    ) {
        let mut j = 0;
        for (kind, end) in [(first.0, first.1.min(m)), (kind, m)] {
            // One pass of `$c` columns from `j` on.
            macro_rules! one_pass {
                ($c:literal) => {{
                    let ys: [*const u8; $c] = std::array::from_fn(|c| y(j + c));
                    let xs: [*const u8; $c] = std::array::from_fn(|c| aux(j + c));
                    let mut out = [[0f32; ROWS]; $c];
                    // SAFETY: the caller's guarantees (j + $c ≤ end ≤ m). The first pass
                    // streams the panel from memory; the later ones find it in cache.
                    unsafe { panel::gemm::<$c>(kind, nb, buf, &ys, &xs, &mut out, j == 0) };
                    for (c, col) in out.iter().enumerate() {
                        put(j + c, col);
                    }
                    j += $c;
                }};
            }
            macro_rules! columns {
                ($c:literal) => {
                    while end - j >= $c {
                        one_pass!($c);
                    }
                };
            }
            if let Some(widest) = select::panel_even_width(kind) {
                // Passes of near-equal width, at most `widest` (the kernel takes them all).
                while j < end {
                    let width = (end - j).div_ceil((end - j).div_ceil(widest));
                    match width {
                        8 => one_pass!(8),
                        7 => one_pass!(7),
                        6 => one_pass!(6),
                        5 => one_pass!(5),
                        4 => one_pass!(4),
                        3 => one_pass!(3),
                        2 => one_pass!(2),
                        _ => one_pass!(1),
                    }
                }
                continue;
            }
            for &g in select::panel_column_groups(kind) {
                match g {
                    8 => columns!(8),
                    4 => columns!(4),
                    3 => columns!(3),
                    2 => columns!(2),
                    _ => {}
                }
            }
            columns!(1);
        }
    }

    /// Packs panel `p` (of `np`) of batch `(a2, a3)` of weight `a` into `buf`, prefetching
    /// the next panel when the rows are contiguous.
    ///
    /// # Safety
    /// As [`compute`]: the CPU has `kind`'s features, `p < np` panels of whole rows exist in
    /// that batch, `buf` has room for one packed panel.
    pub(super) unsafe fn pack_panel(
        kind: Kind,
        a: &crate::kernels::RawTensor,
        (a2, a3): (usize, usize),
        p: usize,
        np: usize,
        buf: *mut u8,
    ) {
        let nb = a.ne[0] / kind.block_values();
        let rs_a = a.dtype.row_size(a.ne[0]);
        let i0 = p * ROWS;
        // SAFETY: i0 + r < n rows of batch (a2, a3).
        let rows: [*const u8; ROWS] =
            std::array::from_fn(|r| unsafe { a.row_ptr(i0 + r, a2, a3) as *const u8 });
        // The next panel, while this one is packed, when the rows are contiguous.
        let ahead = if p + 1 < np && a.nb[1] == rs_a {
            panel::Ahead {
                start: rows[0].wrapping_add(ROWS * rs_a),
                len: ROWS * rs_a,
            }
        } else {
            panel::Ahead::NONE
        };
        // SAFETY: the caller's guarantees: each row holds nb blocks, `buf` one panel.
        unsafe { panel::pack(kind, nb, &rows, buf, ahead) };
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use std::sync::Arc;

    use crate::kernels::ggml_arith::{dot_q4_0_chain, dot_q8_0_lanes, quantize_row_q8_0_x86};
    use crate::kernels::packed::PackedWeight;
    use crate::{compute_graph, Context, ContextParams, DType, Graph};

    use crate::kernels::test_rng as rng;

    /// `n` rows of `k` values of `dtype` with random codes and f16 scales in [−1, 1).
    fn weights(dtype: DType, k: usize, n: usize, seed: &mut u64) -> Vec<u8> {
        let bs = dtype.type_size();
        let mut w = vec![0u8; dtype.row_size(k) * n];
        for blk in w.chunks_exact_mut(bs) {
            for b in blk.iter_mut() {
                *b = rng(seed) as u8;
            }
            let d = (rng(seed) % 2000) as f32 / 1000.0 - 1.0;
            blk[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        }
        w
    }

    /// `x` rounded to f16, as little-endian bytes.
    fn f16_bytes(x: &[f32]) -> Vec<u8> {
        x.iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect()
    }

    /// `mul_mat` of the external weight `w` (`[k, n]`) with the f32 columns `b` (`[k, m]`).
    fn product(
        dtype: DType,
        k: usize,
        n: usize,
        w: &Arc<Vec<u8>>,
        b: &[f32],
        nth: usize,
    ) -> Vec<f32> {
        product_with(dtype, k, n, w, b, nth, false, None)
    }

    /// [`product`], as a per-column product when `per_column`, the weight carrying `packed`.
    #[allow(clippy::too_many_arguments)]
    fn product_with(
        dtype: DType,
        k: usize,
        n: usize,
        w: &Arc<Vec<u8>>,
        b: &[f32],
        nth: usize,
        per_column: bool,
        packed: Option<&PackedWeight>,
    ) -> Vec<f32> {
        let m = b.len() / k;
        let mut ctx = Context::new(ContextParams {
            mem_size: 8 << 20,
            no_alloc: false,
        });
        ctx.set_per_column_products(per_column);
        let a = ctx
            .new_tensor_external(dtype, &[k, n], Arc::clone(w) as _, 0)
            .expect("the weight fits its buffer");
        if let Some(p) = packed {
            ctx.set_packed(a, p).expect("a copy of this weight");
        }
        let bt = ctx.new_tensor_2d(DType::F32, k, m).expect("arena room");
        ctx.set_f32(bt, b).expect("m columns of k values");
        let out = ctx.mul_mat(a, bt).expect("shapes agree");
        let g = Graph::build(&ctx, out).expect("one node");
        compute_graph(&mut ctx, &g, nth).expect("runs");
        ctx.to_f32_vec(out).expect("f32 output")
    }

    /// Chunk places are a permutation of the chunks, every thread's chunks (taken in turn)
    /// lie next to each other in memory order, in the order it takes them.
    #[test]
    fn interleaved_positions_are_a_permutation_of_contiguous_runs() {
        for nrb in 1..40 {
            for regions in 0..6 {
                let places: Vec<usize> = (0..nrb)
                    .map(|rb| super::interleaved_position(rb, nrb, regions))
                    .collect();
                let mut sorted = places.clone();
                sorted.sort_unstable();
                assert_eq!(
                    sorted,
                    (0..nrb).collect::<Vec<_>>(),
                    "{nrb} chunks, {regions}"
                );
                let r = regions.clamp(1, nrb);
                for t in 0..r {
                    let mine: Vec<usize> = places.iter().copied().skip(t).step_by(r).collect();
                    assert!(
                        mine.windows(2).all(|w| w[1] == w[0] + 1),
                        "thread {t} of {r}, {nrb} chunks: {mine:?}"
                    );
                }
            }
        }
    }

    /// F16 prompts whose columns are widened once in INIT ([`super::f16_widens`]) give the
    /// bits of ggml's f16 prompt order, element by element (more than one tile of columns,
    /// rows not a multiple of the chunk size, 1 and 2 threads).
    #[test]
    fn f16_prompts_with_widened_columns_keep_the_f16_order() {
        let (k, n, m) = (96, 28, 19);
        let mut seed = 9u64;
        let wv: Vec<f32> = (0..k * n)
            .map(|_| (rng(&mut seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let w: Vec<u8> = f16_bytes(&wv);
        let b: Vec<f32> = (0..k * m)
            .map(|_| (rng(&mut seed) % 20001) as f32 / 1000.0 - 10.0)
            .collect();
        let w = Arc::new(w);
        if crate::kernels::select::f16_widens(DType::F16, [k, n, 1, 1], m) {
            // The plan makes room for the widened rows after the f16 ones.
            let mut ctx = Context::with_mem_size(1 << 20);
            let a = ctx.new_tensor_2d(DType::F16, k, n).expect("room");
            let bt = ctx.new_tensor_2d(DType::F32, k, m).expect("room");
            let out = ctx.mul_mat(a, bt).expect("shapes agree");
            let (am, bm, dm) = (
                ctx.meta(a).expect("a").clone(),
                ctx.meta(bt).expect("b").clone(),
                ctx.meta(out).expect("out").clone(),
            );
            let p = super::plan(&am, &bm, &dm, 2, false);
            assert_eq!(p.work_shared, (2 + 4) * k * m, "f16 rows, then f32 rows");
        }
        for nth in [1, 2] {
            let got = product(DType::F16, k, n, &w, &b, nth);
            for j in 0..m {
                let col: Vec<u8> = f16_bytes(&b[j * k..(j + 1) * k]);
                for i in 0..n {
                    let row = &w[i * 2 * k..(i + 1) * 2 * k];
                    let want = crate::kernels::ggml_arith::dot_f16_lanes16_body(k, row, &col);
                    assert_eq!(
                        got[j * n + i].to_bits(),
                        want.to_bits(),
                        "({i}, {j}) on {nth} threads"
                    );
                }
            }
        }
    }

    /// Weights packed in one call share a buffer that starts on a huge-page boundary, and each
    /// `mul_mat` reads its own weight's copy there (panels, or the rows of a type without a
    /// panel kernel): with the sources zeroed after packing, the products (one column and
    /// two) keep the packed weights' bits, and lose them once the copies are dropped. A
    /// stack of matrices without panel kernels (3-D F16) gets `None`.
    #[test]
    fn weights_packed_together_keep_their_own_copies() {
        let mut seed = 11u64;
        let shapes = [
            (DType::Q4_0, 8 * 32, 32),
            (DType::F16, 64, 20),
            (DType::Q8_0, 4 * 32, 16),
            (DType::Q4_0, 2 * 32, 48),
        ];
        let mut ws: Vec<Arc<Vec<u8>>> = shapes
            .iter()
            .map(|&(d, k, n)| Arc::new(weights(d, k, n, &mut seed)))
            .collect();
        let cols: Vec<Vec<f32>> = shapes
            .iter()
            .map(|&(_, k, _)| {
                (0..2 * k)
                    .map(|_| (rng(&mut seed) % 20001) as f32 / 1000.0 - 10.0)
                    .collect()
            })
            .collect();
        // Weight i times its first column, then times both (the weight carrying `p`).
        let products = |ws: &[Arc<Vec<u8>>], i: usize, p: Option<&PackedWeight>| {
            let (d, k, n) = shapes[i];
            let mut out = product_with(d, k, n, &ws[i], &cols[i][..k], 2, false, p);
            out.extend(product_with(d, k, n, &ws[i], &cols[i], 2, false, p));
            out
        };
        let want: Vec<Vec<f32>> = (0..shapes.len()).map(|i| products(&ws, i, None)).collect();
        let batched = vec![0u8; DType::F16.row_size(64) * 4];
        let mut list: Vec<(DType, [usize; 4], &[u8])> = shapes
            .iter()
            .zip(&ws)
            .map(|(&(d, k, n), w)| (d, [k, n, 1, 1], &w[..]))
            .collect();
        list.push((DType::F16, [64, 2, 2, 1], &batched));
        let mut reported = Vec::new();
        let packed = PackedWeight::pack_all(&list, |i| reported.push(i));
        drop(list);
        assert_eq!(packed.len(), 5);
        assert!(
            packed[4].is_none(),
            "stacks without panels (3-D F16) are not packed"
        );
        let Some(first) = &packed[0] else {
            return; // no packing on this target: nothing to compare
        };
        #[cfg(target_arch = "x86_64")]
        assert_eq!(first.entry.start() as usize % (2 << 20), 0);
        assert!(packed[..4].iter().all(Option::is_some));
        assert_eq!(
            reported,
            [0, 1, 2, 3],
            "each packed weight reported once, in order"
        );
        // `repacks` tells which of them were laid out in panels rather than copied.
        #[cfg(target_arch = "x86_64")]
        for (&(d, k, n), p) in shapes.iter().zip(&packed) {
            let entry = &p.as_ref().expect("packed above").entry;
            assert_eq!(entry.kind.is_some(), PackedWeight::repacks(d, [k, n, 1, 1]));
        }
        assert!(!PackedWeight::repacks(DType::F16, [64, 20, 1, 1]));
        // A stack of matrices (the experts of a `mul_mat_id`) is repacked exactly when one
        // of its matrices would be; never a 4-D weight, nor a stack without panels.
        assert_eq!(
            PackedWeight::repacks(DType::Q4_0, [64, 16, 2, 1]),
            PackedWeight::repacks(DType::Q4_0, [64, 16, 1, 1])
        );
        assert!(!PackedWeight::repacks(DType::Q4_0, [64, 16, 2, 2]));
        assert!(!PackedWeight::repacks(DType::F16, [64, 2, 2, 1]));
        for w in &mut ws {
            Arc::get_mut(w).expect("no graph holds the weight").fill(0);
        }
        // The sources are zeros now: a weight carrying its copy reads the copy, one without
        // reads the zeros.
        for (i, want) in want.iter().enumerate() {
            let got = products(&ws, i, packed[i].as_ref());
            let same = got
                .iter()
                .zip(want)
                .all(|(g, w)| g.to_bits() == w.to_bits());
            assert!(same, "weight {i} ({:?}) read another copy", shapes[i]);
            assert!(want.iter().any(|&x| x != 0.0));
            assert!(
                products(&ws, i, None).iter().all(|&x| x == 0.0),
                "weight {i}"
            );
        }
        // A copy belongs to the tensor whose data it was made from, and to no other.
        let mut ctx = Context::with_mem_size(1 << 20);
        let (d, k, n) = shapes[0];
        let own = ctx
            .new_tensor_external(d, &[k, n], Arc::clone(&ws[0]) as _, 0)
            .unwrap();
        let p0 = packed[0].as_ref().expect("packed above");
        ctx.set_packed(own, p0).unwrap();
        // The same values at another address.
        let twin = Arc::new(ws[0].to_vec());
        let other = ctx.new_tensor_external(d, &[k, n], twin as _, 0).unwrap();
        let arena = ctx.new_tensor_2d(d, k, n).unwrap();
        let shape = ctx
            .new_tensor_external(d, &[k / 2, 2 * n], Arc::clone(&ws[0]) as _, 0)
            .unwrap();
        for (t, what) in [(other, "other bytes"), (arena, "arena"), (shape, "shape")] {
            let e = ctx.set_packed(t, p0).unwrap_err();
            assert!(e.to_string().contains("set_packed"), "{what}: {e}");
        }
    }

    /// F16 decoding (one column) gives the bits of `ggml_vec_dot_f16`, element by element,
    /// on 1 and 2 threads, for rows with and without a tail past the last 64 values, and for
    /// a batch of two columns against one weight.
    #[test]
    fn f16_decoding_keeps_the_vec_dot_order() {
        let mut seed = 17u64;
        for (k, n) in [(896usize, 40usize), (100, 33), (64, 5)] {
            let w = Arc::new(weights(DType::F16, k, n, &mut seed));
            let b: Vec<f32> = (0..k)
                .map(|_| (rng(&mut seed) % 20001) as f32 / 1000.0 - 10.0)
                .collect();
            let col: Vec<u8> = f16_bytes(&b);
            for nth in [1, 2] {
                let got = product(DType::F16, k, n, &w, &b, nth);
                for (i, g) in got.iter().enumerate() {
                    let row = &w[i * 2 * k..(i + 1) * 2 * k];
                    let want = crate::kernels::ggml_arith::dot_f16_vec_body(k, row, &col);
                    assert_eq!(
                        g.to_bits(),
                        want.to_bits(),
                        "k={k} row {i} on {nth} threads"
                    );
                }
            }
        }
        // Two batches of one column each against one weight (broadcast): each batch reads
        // its own converted column.
        let (k, n) = (128usize, 8usize);
        let w = weights(DType::F16, k, n, &mut seed);
        let b: Vec<f32> = (0..2 * k)
            .map(|_| (rng(&mut seed) % 2001) as f32 / 100.0 - 10.0)
            .collect();
        let mut ctx = Context::with_mem_size(1 << 20);
        let a = ctx.new_tensor_2d(DType::F16, k, n).expect("room");
        ctx.set_bytes(a, &w).expect("k × n f16");
        let bt = ctx.new_tensor(DType::F32, &[k, 1, 2]).expect("room");
        ctx.set_f32(bt, &b).expect("2 columns");
        let out = ctx.mul_mat(a, bt).expect("broadcast over axis 2");
        let g = Graph::build(&ctx, out).expect("one node");
        compute_graph(&mut ctx, &g, 2).expect("runs");
        let got = ctx.to_f32_vec(out).expect("f32");
        for batch in 0..2 {
            let col: Vec<u8> = f16_bytes(&b[batch * k..(batch + 1) * k]);
            for i in 0..n {
                let want = crate::kernels::ggml_arith::dot_f16_vec_body(
                    k,
                    &w[i * 2 * k..(i + 1) * 2 * k],
                    &col,
                );
                assert_eq!(
                    got[batch * n + i].to_bits(),
                    want.to_bits(),
                    "batch {batch} row {i}"
                );
            }
        }
    }

    /// Q4_0 per-column products whose columns the panel kernel takes several per pass (the
    /// groups of `select::panel_column_groups`: 4, 3, 2, then one at a time; with AVX-512
    /// VNNI, `select::panel_even_width`'s passes of one to eight) give every column the bits
    /// of a one-column product: odd block counts (the last block of a panel is a lone half
    /// of a packed pair), rows past the last whole panel, 1 to 17 columns (every mix of
    /// groups, up to three even passes), packed ahead or packed per chunk, on 1 and 2
    /// threads.
    #[test]
    fn q4_0_column_groups_keep_one_column_bits() {
        let mut seed = 91u64;
        for (k, n) in [(32 * 17, 40usize), (32 * 28, 35), (32 * 3, 16)] {
            let w = Arc::new(weights(DType::Q4_0, k, n, &mut seed));
            let packed = PackedWeight::pack(DType::Q4_0, [k, n, 1, 1], &w);
            let m = 17;
            let b: Vec<f32> = (0..k * m)
                .map(|_| (rng(&mut seed) % 20001) as f32 / 1000.0 - 10.0)
                .collect();
            let alone: Vec<Vec<f32>> = (0..m)
                .map(|j| product(DType::Q4_0, k, n, &w, &b[j * k..(j + 1) * k], 1))
                .collect();
            for cols in 1..=m {
                for nth in [1, 2] {
                    for pk in [packed.as_ref(), None] {
                        let got =
                            product_with(DType::Q4_0, k, n, &w, &b[..cols * k], nth, true, pk);
                        for j in 0..cols {
                            for i in 0..n {
                                assert_eq!(
                                    got[i + n * j].to_bits(),
                                    alone[j][i].to_bits(),
                                    "k {k}, n {n}: row {i} of column {j} of {cols} on {nth} \
                                     threads (packed ahead: {})",
                                    pk.is_some()
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Batch invariance. Per-column products (`Context::set_per_column_products`): for
    /// every weight type, each output column has the bits of a one-column product whatever
    /// the other columns are and however many there are. Plain products: the same for
    /// every type `columns_independent` vouches for. Packed or not, on 1 and 2 threads.
    #[test]
    fn columns_do_not_depend_on_their_neighbours() {
        let mut seed = 23u64;
        let (k, n) = (512usize, 48usize);
        let mut failures = Vec::new();
        let mut checked = Vec::new();
        let types = [
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q8_0,
            DType::Q2K,
            DType::Q3K,
            DType::Q4K,
            DType::Q5K,
            DType::Q6K,
            DType::IQ4NL,
            DType::IQ4XS,
        ];
        for dtype in types {
            let from = crate::types::traits(dtype)
                .from_f32
                .expect("every weight type quantizes from f32");
            let vals: Vec<f32> = (0..k * n)
                .map(|_| (rng(&mut seed) % 20001) as f32 / 10000.0 - 1.0)
                .collect();
            let mut wb = vec![0u8; dtype.row_size(k) * n];
            for (src, dst) in vals.chunks(k).zip(wb.chunks_mut(dtype.row_size(k))) {
                from(src, dst);
            }
            let w = Arc::new(wb);
            let independent = super::columns_independent(dtype, [k, n, 1, 1]);
            if independent {
                checked.push(dtype);
            }
            let packed = PackedWeight::pack(dtype, [k, n, 1, 1], &w);
            let m = 40;
            let b: Vec<f32> = (0..k * m)
                .map(|_| (rng(&mut seed) % 20001) as f32 / 1000.0 - 10.0)
                .collect();
            let alone: Vec<Vec<f32>> = (0..m)
                .map(|j| product(dtype, k, n, &w, &b[j * k..(j + 1) * k], 1))
                .collect();
            for per_column in [true, false] {
                if !per_column && !independent {
                    continue;
                }
                for cols in [2usize, 3, 4, 7, 8, 9, 16, 17, 40] {
                    for nth in [1, 2] {
                        // With the packed copy (where there is one) against the one-column
                        // products of the unpacked weight.
                        let got = product_with(
                            dtype,
                            k,
                            n,
                            &w,
                            &b[..cols * k],
                            nth,
                            per_column,
                            packed.as_ref(),
                        );
                        let differ = (0..cols)
                            .flat_map(|j| (0..n).map(move |i| (i, j)))
                            .filter(|&(i, j)| got[i + n * j].to_bits() != alone[j][i].to_bits())
                            .count();
                        if differ > 0 {
                            failures.push(format!(
                                "{dtype} ({}packed, per column: {per_column}): {differ} of {} \
                                 values differ with {cols} columns on {nth} threads",
                                if packed.is_some() { "" } else { "not " },
                                cols * n
                            ));
                        }
                    }
                }
            }
            drop(packed);
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        // Where the panels run, the legacy types are among the promised ones.
        if crate::kernels::select::panels_run() {
            for t in [
                DType::Q4_0,
                DType::Q8_0,
                DType::Q4_1,
                DType::Q5_0,
                DType::Q5_1,
            ] {
                assert!(
                    checked.contains(&t),
                    "{t} should be column-independent: {checked:?}"
                );
            }
        }
    }

    /// With a packed copy on the weight, `mul_mat` gives the bits it gives without one, and
    /// both equal ggml's one-element kernels on the quantized columns (rows past the last
    /// whole panel included), for one column (decoding) and several (prompts).
    #[test]
    fn packed_weights_give_the_unpacked_bits() {
        let mut seed = 5u64;
        let (k, n) = (8 * 32, 40);
        for dtype in [DType::Q4_0, DType::Q8_0] {
            let w = Arc::new(weights(dtype, k, n, &mut seed));
            for m in [1usize, 3, 9] {
                let b: Vec<f32> = (0..k * m)
                    .map(|_| (rng(&mut seed) % 20001) as f32 / 1000.0 - 10.0)
                    .collect();
                let plain = product(dtype, k, n, &w, &b, 2);
                let Some(packed) = PackedWeight::pack(dtype, [k, n, 1, 1], &w) else {
                    return; // no packing on this target: nothing to compare
                };
                let panel_bytes = if dtype == DType::Q4_0 { 288 } else { 576 };
                let bytes = if cfg!(target_arch = "x86_64")
                    && crate::kernels::select::panel_kind(dtype, [k, n, 1, 1]).is_some()
                {
                    n / 16 * k / 32 * panel_bytes
                } else {
                    dtype.row_size(k) * n
                };
                assert_eq!(packed.bytes(), bytes);
                let with1 = product_with(dtype, k, n, &w, &b, 1, false, Some(&packed));
                let with2 = product_with(dtype, k, n, &w, &b, 2, false, Some(&packed));
                drop(packed);
                let rs = dtype.row_size(k);
                for j in 0..m {
                    let mut q = vec![0u8; DType::Q8_0.row_size(k)];
                    quantize_row_q8_0_x86(&b[j * k..(j + 1) * k], &mut q);
                    for i in 0..n {
                        let row = &w[i * rs..(i + 1) * rs];
                        let want = match dtype {
                            DType::Q4_0 => dot_q4_0_chain(k, row, &q),
                            _ => dot_q8_0_lanes(k, row, &q),
                        };
                        let at = i + n * j;
                        for (what, got) in [
                            ("plain", &plain),
                            ("packed 1t", &with1),
                            ("packed 2t", &with2),
                        ] {
                            assert_eq!(
                                got[at].to_bits(),
                                want.to_bits(),
                                "{dtype} m={m} {what} ({i}, {j}): {} vs {want}",
                                got[at]
                            );
                        }
                    }
                }
            }
        }
    }

    /// Q6_K weights of short rows (four super-blocks, as the output matrices of the
    /// generated models) and a tall shape with rows past the last panel: every element of a
    /// product of 1 to 9 columns, packed at load or packed per chunk, on 1 and 2 threads,
    /// has the bits of the one-element kernel of llama.cpp's order for that column count
    /// (`ggml_vec_dot_q6_K_q8_K`'s lanes below eight columns, the tiled order from eight).
    #[test]
    fn q6_k_short_rows_match_the_one_element_kernels() {
        use crate::quants::k_quants::tiled::{dot_q6_k_vec, dot_tiled};
        let mut seed = 31u64;
        let dtype = DType::Q6K;
        let from = crate::types::traits(dtype)
            .from_f32
            .expect("Q6_K quantizes from f32");
        for (k, n) in [(1024usize, 16 * 37 + 5), (256, 16 * 3 + 15), (768, 16 * 64)] {
            let vals: Vec<f32> = (0..k * n)
                .map(|_| (rng(&mut seed) % 20001) as f32 / 10000.0 - 1.0)
                .collect();
            let rs = dtype.row_size(k);
            let mut wb = vec![0u8; rs * n];
            for (src, dst) in vals.chunks(k).zip(wb.chunks_mut(rs)) {
                from(src, dst);
            }
            let w = Arc::new(wb);
            let packed = PackedWeight::pack(dtype, [k, n, 1, 1], &w);
            for m in 1..=9usize {
                let b: Vec<f32> = (0..k * m)
                    .map(|_| (rng(&mut seed) % 20001) as f32 / 1000.0 - 10.0)
                    .collect();
                let cols: Vec<Vec<u8>> = b
                    .chunks(k)
                    .map(|x| {
                        let mut q = vec![0u8; DType::Q8K.row_size(k)];
                        crate::quants::k_quants::q8_k::quantize_row_q8_k_ref(x, &mut q)
                            .expect("whole Q8_K blocks");
                        q
                    })
                    .collect();
                for nth in [1, 2] {
                    for p in [None, packed.as_ref()] {
                        let got = product_with(dtype, k, n, &w, &b, nth, false, p);
                        for (j, col) in cols.iter().enumerate() {
                            for i in 0..n {
                                let row = &w[i * rs..(i + 1) * rs];
                                let want = if m < crate::quants::dispatch::GGML_TILED_MIN_COLS {
                                    dot_q6_k_vec(k, row, col)
                                } else {
                                    dot_tiled::<crate::quants::BlockQ6K>(k, row, col)
                                };
                                assert_eq!(
                                    got[i + n * j].to_bits(),
                                    want.to_bits(),
                                    "k={k} n={n} m={m} nth={nth} packed={}: row {i} column {j}",
                                    p.is_some()
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
