//! Which kernel a `mul_mat` node runs, and what its INIT writes for that kernel: decided in
//! one place, once per node, when the node is planned ([`select`]).
//!
//! A product's kernel and the form of its converted activations belong together: a Q8_0
//! panel kernel reads side data after the converted rows that a Q5_0 kernel's conversion
//! does not write, a Q4_1 kernel reads Q8_1 rows where a Q4_0 kernel reads Q8_0 ones. Weights
//! that read one input (Q, K and V of a layer; gate and up) may have different types in one
//! file. So [`select`] returns both as one [`MatMulKernel`]: the executor shares one INIT's
//! conversion between nodes only when their [`ActivationForm`]s are equal, INIT writes the
//! form the plan names, and COMPUTE runs the kernel the plan names (nothing is chosen again
//! while a graph runs, so a switch flipped meanwhile cannot split a node between two
//! choices).
//!
//! # The table
//!
//! The order of the arithmetic is part of the contract (llama.cpp's bits, see
//! `kernels::ggml_arith`): the weight's type and shape and the number of columns whose
//! arithmetic each column takes give the order (`quants::dispatch::ggml_sum_order_cols`), and
//! the CPU gives the fastest build that keeps it. Tried in this order:
//!
//! | weights | CPU | kernel ([`Compute`]) | activations ([`ActivationForm`]) |
//! |---|---|---|---|
//! | Q4_0 (rows % 8 = 0), Q8_0, ≥ 16 rows | AVX-512 VNNI, AVX2 | panels ([`Compute::Panel`]) | Q8_0 rows + offset seeds |
//! | Q5_0, ≥ 16 rows | AVX2 and up | panels | Q8_0 rows + offset seeds |
//! | Q4_1, Q5_1, ≥ 16 rows | AVX2 and up | panels | Q8_1 rows |
//! | Q6_K, Q3_K, ≥ 16 rows | AVX2 and up below 8 columns; AVX-512 VNNI from 8 on (its tiled-order twin kind, `first`) | panels | Q8_K rows |
//! | Q5_K, ≥ 16 rows, below 8 columns | AVX2 and up | panels in `ggml_vec_dot_q5_K_q8_K`'s lanes | Q8_K rows + pair sums |
//! | Q4_K, Q2_K repacked by llama.cpp (rows % 8 = 0), ≥ 16 rows | AVX2 and up | panels: the GEMM order's twin for the first 4·⌊m/4⌋ columns, the GEMV order for the rest | Q8_K rows (+ pair sums for Q4_K) |
//! | IQ4_NL (rows % 8 = 0), ≥ 16 rows | AVX2 and up | panels in the repacked `iq4_nl_8x8` order | Q8_0 rows + offset seeds |
//! | IQ4_XS, ≥ 16 rows | AVX2 and up (tiled order from 8 columns: AVX-512 VNNI) | panels, one packed layout for both orders | Q8_K rows |
//! | F16, ≥ 2 columns, k % 16 = 0, rows % 4 = 0 | AVX2, AVX-512 | tinyBLAS-order tiles over widened columns ([`Compute::F16Tiles`]) | F16 rows + the same rows as f32 |
//! | IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, ≥ 16 rows, ≥ 8 columns | AVX-512 VNNI | panels decoded once per node (`panel::grid_vnni`; not packed ahead) | Q8_K rows |
//! | Q2_K … Q6_K, IQ4_XS, the grid i-quants without a panel kind above, ≥ 8 columns | AVX2 and up | tiled-order panels ([`Compute::TiledPanel`]) | Q8_K rows |
//! | Q4_K, Q2_K repacked (rows % 8 = 0), no panels | any | GEMM order for the first 4·⌊m/4⌋ columns, GEMV for the rest ([`Element::Repacked`]) | Q8_K rows |
//! | other ggml-order types | with a build keeping the order | the build's tiles ([`Element::Tiles`]) | vec-dot-type rows |
//! | other ggml-order types | none (or `GGRS_FORCE_SCALAR`) | portable code in that order ([`Element::Dot`]) | vec-dot-type rows |
//! | F32 | any | tinyBLAS or `ggml_vec_dot_f32` order ([`Element::Dot`]) | none (f32 read in place) or f32 rows |
//! | the rest (BF16, Q8_1, Q8_K weights) | any | the fastest build ([`Element::Tiles`] / [`Element::Dot`]) | vec-dot-type rows |
//!
//! Panels also carry the kernel for the rows below a whole panel (`n % 16`), chosen as if
//! the weight had no panel kernel.

use half::{bf16, f16};

use crate::dtype::DType;
use crate::kernels::vec;
use crate::quants::dispatch::{self, VecDotVariant};
use crate::quants::VecDotKernel as VecDotFn;
use crate::types::{traits, FromF32Fn};

#[cfg(target_arch = "x86_64")]
use crate::kernels::x86::panel::{self, Kind, ROWS};
#[cfg(target_arch = "x86_64")]
use crate::quants::dispatch::{active_variant_in, ggml_sum_order, Isa, SumOrder, TiledPanelFn};

/// What a `mul_mat`'s INIT writes into the shared work buffer for COMPUTE to read: the
/// activation rows converted to the type its kernel reads, and the side data that kernel
/// needs after them. The executor lets a node reuse another node's conversion only when
/// both plans name the same form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ActivationForm {
    /// Rows of this type (the weight type's vec-dot type), nothing after them.
    Rows(DType),
    /// F16 rows, then the same rows widened back to f32 (see [`f16_widens`]).
    F16Widened,
    /// Rows of the panel kernel's activation type (Q8_0, Q8_1 or Q8_K), then every block's
    /// side data for that kernel, if it has any (`kernels::x86::panel`).
    #[cfg(target_arch = "x86_64")]
    Panel(Kind),
}

impl ActivationForm {
    /// The type the activation rows are converted to.
    pub(crate) fn rows(self) -> DType {
        match self {
            ActivationForm::Rows(t) => t,
            ActivationForm::F16Widened => DType::F16,
            #[cfg(target_arch = "x86_64")]
            ActivationForm::Panel(kind) => kind.activation(),
        }
    }

    /// How an f32 row becomes one of [`Self::rows`]: for Q8_0 and Q8_1, ggml's x86 run-time
    /// quantizers (whose rounding differs from the file quantizers', see
    /// `kernels::ggml_arith`); for other block types the fastest quantizer, whose bytes are
    /// the reference quantizer's; else the type's conversion.
    pub(crate) fn quantizer(self) -> FromF32Fn {
        let t = self.rows();
        crate::kernels::ggml_arith::activation_quantizer(t)
            .or_else(|| dispatch::activation_quantizer(t))
            .or(traits(t).from_f32)
            .expect("select names only forms whose type converts from f32 (supports() holds)")
    }
}

/// How COMPUTE multiplies the weight rows with the activation columns.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Compute {
    /// Panels of sixteen weight rows (`kernels::x86::panel`), packed once per node and batch
    /// or read from a copy packed at load; `rest` computes the rows below a whole panel.
    #[cfg(target_arch = "x86_64")]
    Panel {
        /// The panel layout and kernel.
        kind: Kind,
        /// The twin kernel of the first columns of each batch and how many columns take it
        /// (`Kind::split`; `(kind, 0)`: none).
        first: (Kind, usize),
        /// The kernel of the last `n % 16` rows.
        rest: Element,
    },
    /// F16 prompts on AVX2 or AVX-512 in tinyBLAS's order: the columns sixteen at a time as
    /// f32 (widened once in INIT), register tiles (4 × 4 with AVX-512, 2 × 3 with AVX2);
    /// `rest` for the rows past a whole tile.
    #[cfg(target_arch = "x86_64")]
    F16Tiles {
        /// The one-element kernel, in the same order.
        rest: Element,
    },
    /// k-quants and IQ4_XS against eight columns or more, in ggml's tiled order: panels of
    /// up to 16 rows × 16 columns (`kernels::x86::tiled_avx2`).
    #[cfg(target_arch = "x86_64")]
    TiledPanel(TiledPanelFn),
    /// One output element at a time or in tiles (see [`Element`]).
    Element(Element),
}

/// A kernel that computes output elements one dot product each.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Element {
    /// A build of the weight type's dot product: 4 × 4, 4 × 1 and 1 × 4 tiles, then one
    /// element at a time, every element with the one-element kernel's bits.
    Tiles(VecDotVariant),
    /// One element at a time.
    Dot(VecDotFn),
    /// Q4_K / Q2_K weights llama.cpp repacks: the GEMM order for the first `gemm_cols`
    /// columns of each batch, the GEMV order for the rest.
    Repacked {
        /// Leading columns of each batch in the GEMM order.
        gemm_cols: usize,
        /// The GEMM-order dot product.
        gemm: VecDotFn,
        /// The GEMV-order dot product.
        gemv: VecDotFn,
    },
}

// Kernels are equal when they are the same functions (compared by address, which is what
// the plan records) on the same layouts: two plans are equal when they run the same code.
impl PartialEq for Compute {
    fn eq(&self, other: &Self) -> bool {
        // (Only `Element` outside x86-64, where the catch-all arm cannot be reached.)
        #[allow(unreachable_patterns)]
        match (self, other) {
            #[cfg(target_arch = "x86_64")]
            (
                Compute::Panel {
                    kind: k,
                    first: f,
                    rest: r,
                },
                Compute::Panel {
                    kind: k2,
                    first: f2,
                    rest: r2,
                },
            ) => k == k2 && f == f2 && r == r2,
            #[cfg(target_arch = "x86_64")]
            (Compute::F16Tiles { rest: r }, Compute::F16Tiles { rest: r2 }) => r == r2,
            #[cfg(target_arch = "x86_64")]
            (Compute::TiledPanel(p), Compute::TiledPanel(p2)) => std::ptr::fn_addr_eq(*p, *p2),
            (Compute::Element(e), Compute::Element(e2)) => e == e2,
            _ => false,
        }
    }
}

impl Eq for Compute {}

impl PartialEq for Element {
    fn eq(&self, other: &Self) -> bool {
        use std::ptr::fn_addr_eq;
        match (self, other) {
            (Element::Tiles(v), Element::Tiles(v2)) => {
                v.isa == v2.isa && fn_addr_eq(v.dot, v2.dot) && fn_addr_eq(v.tile, v2.tile)
            }
            (Element::Dot(d), Element::Dot(d2)) => fn_addr_eq(*d, *d2),
            (
                Element::Repacked {
                    gemm_cols: c,
                    gemm: g,
                    gemv: v,
                },
                Element::Repacked {
                    gemm_cols: c2,
                    gemm: g2,
                    gemv: v2,
                },
            ) => c == c2 && fn_addr_eq(*g, *g2) && fn_addr_eq(*v, *v2),
            _ => false,
        }
    }
}

impl Eq for Element {}

/// A `mul_mat` node's kernel and the activation form its INIT writes (`None`: no INIT; the
/// activations are dense f32 rows the kernel reads in place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MatMulKernel {
    /// What INIT writes.
    pub activation: Option<ActivationForm>,
    /// What COMPUTE runs.
    pub compute: Compute,
}

/// The weight operand of a `mul_mat` as [`select`] sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Weight {
    /// Its type.
    pub dtype: DType,
    /// Its shape (`[k, rows, planes, 1]`).
    pub ne: [usize; 4],
}

/// What [`select`] needs to know of a `mul_mat`'s activations: their layout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Activations {
    /// Every row is dense (f32 weights then read the rows in place).
    pub rows_contiguous: bool,
    /// The whole tensor is one contiguous block (`ggml_is_contiguous`, tinyBLAS's condition).
    pub contiguous: bool,
}

fn dot_f32(n: usize, a: &[u8], b: &[u8]) -> f32 {
    vec::dot_f32(&bytemuck::cast_slice(a)[..n], &bytemuck::cast_slice(b)[..n])
}

fn dot_f16(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let a: &[f16] = bytemuck::cast_slice(a);
    let b: &[f16] = bytemuck::cast_slice(b);
    vec::dot_f16(&a[..n], &b[..n])
}

fn dot_bf16(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let a: &[bf16] = bytemuck::cast_slice(a);
    let b: &[bf16] = bytemuck::cast_slice(b);
    vec::dot_bf16(&a[..n], &b[..n])
}

/// The dot product used when `dtype` is the weight type, if there is one (the fastest
/// build; [`select`] picks ggml's order where that is the contract).
pub fn vec_dot(dtype: DType) -> Option<VecDotFn> {
    match dtype {
        DType::F32 => Some(dot_f32),
        DType::F16 => Some(dot_f16),
        DType::BF16 => Some(dot_bf16),
        other => crate::quants::vec_dot(other),
    }
}

/// True when `mul_mat` accepts `dtype` as its weight operand.
pub fn supports(dtype: DType) -> bool {
    vec_dot(dtype).is_some() && traits(traits(dtype).vec_dot_type).from_f32.is_some()
}

/// Whether `mul_mat`'s panel kernels may run now: this CPU runs a panel build (AVX2 with
/// FMA and F16C, or AVX-512 VNNI), and neither `GGRS_FORCE_SCALAR`,
/// [`dispatch::force_scalar`] nor [`dispatch::force_no_panels`] switched them off.
#[cfg(target_arch = "x86_64")]
pub(crate) fn panels_run() -> bool {
    // `simd_allowed(Avx2)` holds only when `cpu::isa()` is AVX2 or better, which a CPU with
    // a panel build (`panel::available`) has.
    dispatch::panels_allowed() && dispatch::simd_allowed(Isa::Avx2) && panel::available()
}

/// The panel kernel for a weight of type `dtype` and shape `ne`, when it applies: the
/// ggml order of the shape has a panel kernel, the weight has at least one panel, the
/// panels run ([`panels_run`]) and the ggml-order build `mul_mat` would otherwise use is a
/// SIMD one (so `GGRS_FORCE_SCALAR` and `dispatch::force_scalar` switch this path off too).
/// Also what [`crate::kernels::PackedWeight`] packs for.
#[cfg(target_arch = "x86_64")]
pub(crate) fn panel_kind(dtype: DType, ne: [usize; 4]) -> Option<Kind> {
    let values = match dtype {
        DType::Q6K | DType::Q5K | DType::Q3K | DType::Q4K | DType::Q2K | DType::IQ4XS => {
            crate::quants::k_quants::QK_K
        }
        DType::NVFP4 => 64,
        _ => 32,
    };
    if ne[1] < ROWS || !ne[0].is_multiple_of(values) || !panels_run() {
        return None;
    }
    let order = ggml_sum_order(dtype, ne);
    let kind = match (dtype, order) {
        (DType::Q4_0, SumOrder::GgmlBlockChain) => Kind::Q4_0Chain,
        (DType::Q8_0, SumOrder::GgmlLanes) => Kind::Q8_0Lanes,
        (DType::Q4_1, SumOrder::GgmlLanes) => Kind::Q4_1Lanes,
        (DType::Q5_0, SumOrder::GgmlLanes) => Kind::Q5_0Lanes,
        (DType::Q5_1, SumOrder::GgmlLanes) => Kind::Q5_1Lanes,
        (DType::Q6K, SumOrder::GgmlLanes) => Kind::Q6KLanes,
        (DType::Q5K, SumOrder::GgmlLanes) => Kind::Q5KLanes,
        (DType::IQ4NL, SumOrder::GgmlBlockChain) => Kind::IQ4NLChain,
        (DType::MXFP4, SumOrder::GgmlBlockChain) => Kind::MXFP4Chain,
        (DType::NVFP4, SumOrder::GgmlLanes) => Kind::NVFP4Lanes,
        (DType::IQ4XS, SumOrder::GgmlLanes) => Kind::IQ4XSLanes,
        (DType::Q3K, SumOrder::GgmlLanes) => Kind::Q3KLanes,
        (DType::Q4K, SumOrder::GgmlRepacked) => Kind::Q4KGemv,
        (DType::Q2K, SumOrder::GgmlRepacked) => Kind::Q2KGemv,
        _ => return None,
    };
    // The repacked orders and Q3_K's lanes have no tile build in the dispatch table
    // (`mul_mat` runs `ggml_arith`'s one-element kernels for them): `panels_run` decided.
    let simd = match (dtype, order) {
        (_, SumOrder::GgmlRepacked) | (DType::Q3K, _) => true,
        _ => matches!(
            active_variant_in(dtype, order)?.isa,
            Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512 | Isa::Avx512Vnni
        ),
    };
    simd.then_some(kind)
}

/// The panel kind of a grid i-quant weight (IQ1_S … IQ3_S) of shape `ne` against `n_cols`
/// columns per batch, when its product takes ggml's tiled order (eight columns or more) and
/// the AVX-512 VNNI panels run (`panel::grid_vnni`: each panel decoded once per node and
/// batch instead of once per sixteen columns). Not a [`panel_kind`]: the decoded panels are
/// too large to keep ([`crate::kernels::PackedWeight`] does not pack these weights), and
/// products with fewer columns take the one-column kernels.
#[cfg(target_arch = "x86_64")]
fn grid_panel_kind(dtype: DType, ne: [usize; 4], n_cols: usize) -> Option<Kind> {
    let kind = panel::grid_kind(dtype)?;
    let fits = ne[1] >= ROWS && ne[0].is_multiple_of(kind.block_values());
    (fits
        && kind.takes_columns(n_cols)
        && panels_run()
        && dispatch::simd_allowed(Isa::Avx512Vnni)
        && dispatch::tiled_panel(dtype, ne, n_cols).is_some())
    .then_some(kind)
}

/// The column counts the panel kernel `kind` takes in one pass on this CPU, widest
/// first (one column at a time after them); each column's bits do not depend on it. With
/// AVX-512 there are 32 vector registers for the accumulators (one per column); AVX2 has
/// 16, two per column of 16 rows, so its groups are narrower.
#[cfg(target_arch = "x86_64")]
pub(crate) fn panel_column_groups(kind: Kind) -> &'static [usize] {
    let wide = crate::cpu::features().runs(Isa::Avx512Vnni) && kind.has_vnni_build();
    match (kind, wide) {
        // (With VNNI, Q4_0's and IQ4_NL's passes take every width up to eight:
        // `panel_even_width`, which the product asks first.)
        (Kind::Q4_0Chain | Kind::IQ4NLChain, true) => &[],
        (Kind::MXFP4Chain, true) => &[8, 4],
        (Kind::Q4_0Chain, false) => &[4, 3, 2],
        (Kind::IQ4NLChain | Kind::MXFP4Chain, false) => &[4],
        (Kind::Q8_0Lanes, true) => &[2],
        // AVX2 has 16 vector registers: two columns' sixteen accumulators plus the eight
        // weight quads spill, and how much they spill moves with unrelated code changes;
        // one column per pass keeps everything in registers and rereads the panel from L1.
        (Kind::Q8_0Lanes, false) => &[],
        (Kind::Q4_1Lanes | Kind::Q5_0Lanes | Kind::Q5_1Lanes, true) => &[2],
        (Kind::Q4_1Lanes | Kind::Q5_0Lanes | Kind::Q5_1Lanes, false) => &[4, 2],
        (Kind::Q6KLanes | Kind::NVFP4Lanes, true) => &[2],
        (Kind::Q6KLanes | Kind::Q3KLanes | Kind::IQ4XSLanes | Kind::Q5KLanes, _) => &[],
        (Kind::NVFP4Lanes, false) => &[],
        (Kind::Q6KTiled | Kind::Q3KTiled | Kind::IQ4XSTiled, _) => &[8, 4, 2],
        (Kind::Q4KGemv | Kind::Q2KGemv, _) => &[2],
        (Kind::Q4KGemm | Kind::Q2KGemm, true) => &[4, 2],
        (Kind::Q4KGemm | Kind::Q2KGemm, false) => &[2],
        // (Their passes take every width up to eight: `panel_even_width`.)
        (
            Kind::IQ2XXSTiled
            | Kind::IQ2XSTiled
            | Kind::IQ2STiled
            | Kind::IQ3XXSTiled
            | Kind::IQ3STiled
            | Kind::IQ1STiled
            | Kind::IQ1MTiled,
            _,
        ) => &[],
    }
}

/// The widest pass of a panel kernel that takes every column count from one to it in one
/// pass on this CPU (the AVX-512 VNNI Q4_0 and IQ4_NL chains: one accumulator per column,
/// eight at most), or `None` where only [`panel_column_groups`]' widths exist. Such a kernel
/// splits its columns into passes of near-equal width (nine columns: five and four, not
/// eight and one), each pass unpacking the panel's weights once for all its columns. On
/// qwen05b q4_0 (one thread, this EPYC, `ggrs-llama/examples/spec_step_cost`), a step of
/// five columns took 28.8 ms as four and one, 18.9 ms as one pass; nine 46.9 ms as eight
/// and one, 40 ms as five and four. Each column's bits do not depend on the split.
#[cfg(target_arch = "x86_64")]
pub(crate) fn panel_even_width(kind: Kind) -> Option<usize> {
    let wide = crate::cpu::features().runs(Isa::Avx512Vnni) && kind.has_vnni_build();
    match (kind, wide) {
        (Kind::Q4_0Chain | Kind::IQ4NLChain, true) => Some(8),
        (k, true) if k.is_grid() => Some(8),
        _ => None,
    }
}

/// The column count whose arithmetic a `mul_mat` with `n_cols` columns per batch takes: 1
/// for a per-column product ([`crate::Context::set_per_column_products`]), else `n_cols`.
pub(crate) fn arith_cols(per_column: bool, n_cols: usize) -> usize {
    if per_column {
        1
    } else {
        n_cols
    }
}

/// Whether the activations must be converted: every weight type reads its vec-dot type,
/// except f32 weights with dense f32 rows, which are read in place.
fn needs_conversion(a: DType, b: Activations) -> bool {
    !(traits(a).vec_dot_type == DType::F32 && b.rows_contiguous)
}

/// Whether an F16 `mul_mat` of weight shape `ne` and `m` columns takes the prompt tiles
/// (AVX2 or AVX-512, `f16_lanes16` order) with its activation rows widened back to f32 once, in
/// INIT, after the f16 rows in the shared buffer: every chunk then reads the columns as f32
/// instead of widening them again.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn f16_widens(dtype: DType, ne: [usize; 4], m: usize) -> bool {
    dtype == DType::F16
        && crate::kernels::ggml_arith::f16_uses_lanes16(ne, m)
        && crate::cpu::isa() >= crate::cpu::Isa::Avx2
}

/// The kernel and activation form of a `mul_mat` with weights `a` and activations `b`, whose
/// columns take the arithmetic of `cols` columns per batch ([`arith_cols`]): the table of
/// the module docs.
pub(crate) fn select(a: Weight, b: Activations, cols: usize) -> MatMulKernel {
    let rows = |k: Option<ActivationForm>| {
        needs_conversion(a.dtype, b).then(|| k.unwrap_or(ActivationForm::Rows(vdt(a.dtype))))
    };
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(kind) = panel_kind(a.dtype, a.ne).filter(|k| k.takes_columns(cols)) {
            return MatMulKernel {
                activation: Some(ActivationForm::Panel(kind)),
                compute: Compute::Panel {
                    kind,
                    first: kind.split(cols),
                    rest: element(a, b, cols),
                },
            };
        }
        if f16_widens(a.dtype, a.ne, cols) {
            return MatMulKernel {
                activation: rows(Some(ActivationForm::F16Widened)),
                compute: Compute::F16Tiles {
                    rest: element(a, b, cols),
                },
            };
        }
        if let Some(kind) = grid_panel_kind(a.dtype, a.ne, cols) {
            return MatMulKernel {
                activation: Some(ActivationForm::Panel(kind)),
                compute: Compute::Panel {
                    kind,
                    first: kind.split(cols),
                    rest: element(a, b, cols),
                },
            };
        }
        if let Some(panel) = dispatch::tiled_panel(a.dtype, a.ne, cols) {
            return MatMulKernel {
                activation: rows(None),
                compute: Compute::TiledPanel(panel),
            };
        }
    }
    MatMulKernel {
        activation: rows(None),
        compute: Compute::Element(element(a, b, cols)),
    }
}

/// [`select`] for the columns of a `mul_mat_id` that chose matrix `a` (one matrix of the
/// stack, as a 2-D tensor): the kernels of a one-column `mul_mat` by it, since llama.cpp
/// multiplies each column of a `mul_mat_id` on its own (`ggml_compute_forward_mul_mat_id`,
/// the repacked kernels' GEMV). Panels where a one-column product takes them (their
/// several-column passes keep every column's one-column bits), else the element kernels;
/// the activations are always converted (INIT also groups the columns).
pub(crate) fn select_id(a: Weight, b: Activations) -> MatMulKernel {
    let one = select(a, b, 1);
    MatMulKernel {
        activation: one.activation.or(Some(ActivationForm::Rows(vdt(a.dtype)))),
        compute: one.compute,
    }
}

fn vdt(dtype: DType) -> DType {
    traits(dtype).vec_dot_type
}

/// The one-element (or tile) kernel of weights `a` against `cols` arithmetic columns: ggml's
/// order where llama.cpp's bits are the contract (the best SIMD build keeping it, else the
/// portable body in that order), else the fastest build.
fn element(a: Weight, b: Activations, cols: usize) -> Element {
    use crate::kernels::ggml_arith;
    let ggml = match a.dtype {
        DType::F32 => ggml_arith::mul_mat_dot_f32(a.ne, cols, b.contiguous),
        _ => ggml_arith::mul_mat_dot(a.dtype, a.ne, cols),
    };
    let Some(portable) = ggml else {
        // No ggml-order contract for this type: the fastest build (its tiles for block
        // types), or the generic dot product.
        let build = if a.dtype.is_quantized() {
            dispatch::active_variant(a.dtype)
        } else {
            None
        };
        return match build {
            Some(v) => Element::Tiles(v),
            None => Element::Dot(vec_dot(a.dtype).expect("supports() checked")),
        };
    };
    if let Some((gemm_cols, gemm)) = ggml_arith::mul_mat_gemm(a.dtype, a.ne, cols) {
        return Element::Repacked {
            gemm_cols,
            gemm,
            gemv: portable,
        };
    }
    let order = dispatch::ggml_sum_order_cols(a.dtype, a.ne, cols);
    let simd = ggml_arith::simd_order_holds(a.dtype, a.ne, cols)
        .then(|| dispatch::active_variant_in(a.dtype, order))
        .flatten();
    match simd {
        Some(v) if a.dtype.is_quantized() => Element::Tiles(v),
        _ => Element::Dot(portable),
    }
}
