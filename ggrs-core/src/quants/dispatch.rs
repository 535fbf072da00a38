//! Choosing a dot-product kernel per block type, once per process.
//!
//! Every block type has a scalar reference kernel (`vec_dot_scalar::<B>`), always compiled.
//! Faster kernels (see `kernels/x86/`: AVX2, AVX-512, AVX-512 VNNI; on aarch64 NEON and
//! NEON `dotprod`, for Q4_0 and Q8_0) plug in here: `detect` picks, per type, the best
//! build the CPU runs, on first use, and caches it, so `mul_mat` pays one table read per
//! node. `GGRS_FORCE_SCALAR=1` (read once, see [`crate::cpu::isa`]) keeps
//! every type on its scalar kernel;
//! [`force_scalar`] does the same from inside a process, for benchmarks.
//!
//! A SIMD kernel keeps the [`VecDotKernel`] contract (a row of the weight type and a row of
//! its `VecDot` type, `n` values each) and differs from the scalar one only in the order of
//! its f32 additions. Each also comes in tiles — [`VecDot4Kernel`] (one weight row against
//! four activation rows), [`VecDotRows4Kernel`] (four weight rows against one) and
//! [`VecDotTileKernel`] (four against four) — whose results are bit-identical to one-element
//! calls. [`vec_dot_variants`] lists every build this CPU runs, for tests and benchmarks.
//!
//! Summation orders: `mul_mat` must give llama.cpp's bits for Q4_0, Q8_0, Q4_1, Q5_1, IQ4_NL
//! and IQ4_XS weights (see `kernels::ggml_arith`), so those keep ggml's x86 order, which
//! [`ggml_sum_order`] names for a weight shape. The SIMD builds of Q4_0, Q5_0, Q8_0, Q4_1,
//! Q5_1, IQ4_NL and IQ4_XS keep [`SumOrder::GgmlLanes`]; Q4_0 and IQ4_NL also have builds in
//! [`SumOrder::GgmlBlockChain`] ([`vec_dot_variants_in`], [`active_variant_in`]); Q2_K,
//! Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS have AVX2 builds in [`SumOrder::GgmlTiled`]
//! (`kernels::x86::tiled_avx2`), which `mul_mat` runs as panels (`tiled_panel`).
//!
//! Activations are quantized to the vec-dot type by [`activation_quantizer`]: the reference
//! quantizer, or a SIMD one that writes exactly the same bytes (Q8_0, Q8_K; see
//! [`quantizer_variants`]). (`mul_mat` itself quantizes Q8_0 and Q8_1 activations as ggml's
//! x86 build does, with `kernels::ggml_arith`'s quantizers, whose rounding differs.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::FromF32Fn;
use crate::dtype::DType;
use crate::kernels::dot_builds as simd;
use crate::quants::{vec_dot_scalar, BlockQuant, VecDotKernel};

use super::with_block;

pub use super::{VecDot4Kernel, VecDotRows4Kernel, VecDotTileKernel};

/// The instruction set a dot-product kernel is written for (the crate's one ISA
/// vocabulary, [`crate::cpu::Isa`]).
pub use crate::cpu::Isa;

/// One build of a weight type's dot product.
#[derive(Clone, Copy)]
pub struct VecDotVariant {
    /// The instruction set it is written for.
    pub isa: Isa,
    /// One weight row · one activation row.
    pub dot: VecDotKernel,
    /// One weight row · four activation rows.
    pub dot4: VecDot4Kernel,
    /// Four weight rows · one activation row.
    pub rows4: VecDotRows4Kernel,
    /// Four weight rows · four activation rows.
    pub tile: VecDotTileKernel,
}

impl std::fmt::Debug for VecDotVariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VecDotVariant")
            .field("isa", &self.isa)
            .finish()
    }
}

/// The slot of `dtype` in the per-type tables below (indexed like [`DType::ALL`], so that a
/// new type needs no row here: its row in `quants::with_block!` is the table).
fn slot(dtype: DType) -> Option<usize> {
    DType::ALL.iter().position(|&t| t == dtype)
}

/// The scalar reference dot product of weight type `dtype` (`None` for non-block types).
pub fn vec_dot_scalar_kernel(dtype: DType) -> Option<VecDotKernel> {
    scalar_variant(dtype).map(|v| v.dot)
}

fn scalar_x4<B: BlockQuant>(n: usize, a: &[u8], b: [&[u8]; 4]) -> [f32; 4] {
    b.map(|r| vec_dot_scalar::<B>(n, a, r))
}

fn scalar_rows4<B: BlockQuant>(n: usize, a: [&[u8]; 4], b: &[u8]) -> [f32; 4] {
    a.map(|r| vec_dot_scalar::<B>(n, r, b))
}

fn scalar_tile<B: BlockQuant>(n: usize, a: [&[u8]; 4], b: [&[u8]; 4]) -> [[f32; 4]; 4] {
    a.map(|r| b.map(|c| vec_dot_scalar::<B>(n, r, c)))
}

/// The scalar reference of weight type `dtype` as a variant.
fn scalar_variant(dtype: DType) -> Option<VecDotVariant> {
    fn k<B: BlockQuant>() -> Option<VecDotVariant> {
        Some(VecDotVariant {
            isa: Isa::Scalar,
            dot: vec_dot_scalar::<B>,
            dot4: scalar_x4::<B>,
            rows4: scalar_rows4::<B>,
            tile: scalar_tile::<B>,
        })
    }
    with_block!(dtype, B => k::<B>(), _ => None)
}

/// The SIMD instruction sets, best first.
#[cfg(not(target_arch = "aarch64"))]
const SIMD_ISAS: [Isa; 4] = [Isa::Avx512Vnni, Isa::Avx512, Isa::Avx2Vnni, Isa::Avx2];
/// The SIMD instruction sets, best first.
#[cfg(target_arch = "aarch64")]
const SIMD_ISAS: [Isa; 2] = [Isa::NeonDotprod, Isa::Neon];

/// Every build of weight type `dtype`'s dot product that this CPU runs, the scalar reference
/// first, then by instruction set (empty for non-block types). Not affected by
/// `GGRS_FORCE_SCALAR` or [`force_scalar`]: this is what tests compare and benchmarks time.
pub fn vec_dot_variants(dtype: DType) -> Vec<VecDotVariant> {
    let mut v: Vec<VecDotVariant> = scalar_variant(dtype).into_iter().collect();
    if !v.is_empty() {
        for isa in SIMD_ISAS.into_iter().rev() {
            if let Some((dot, dot4, rows4, tile)) = simd::kernels(dtype, isa, false) {
                v.push(VecDotVariant {
                    isa,
                    dot,
                    dot4,
                    rows4,
                    tile,
                });
            }
        }
    }
    v
}

/// The fastest build this CPU runs for `dtype`, if faster than the scalar one: the best of
/// [`SIMD_ISAS`] that [`crate::cpu::isa`] allows (`GGRS_FORCE_SCALAR` makes it `Scalar`).
fn detect(dtype: DType) -> Option<VecDotVariant> {
    SIMD_ISAS
        .into_iter()
        .filter(|&isa| allowed(isa))
        .find_map(|isa| {
            simd::kernels(dtype, isa, false).map(|(dot, dot4, rows4, tile)| VecDotVariant {
                isa,
                dot,
                dot4,
                rows4,
                tile,
            })
        })
}

/// The order in which a dot product adds its f32 terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SumOrder {
    /// The build's own order: builds of one type differ in rounding only.
    Any,
    /// ggml's x86 `ggml_vec_dot_q*_q8_0` / tinyBLAS order: eight f32 lanes of four products,
    /// `lane = fma(dx·dy, lane_sum, lane)` per block, lanes added as
    /// `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`. For Q4_1 and Q5_1
    /// (`ggml_vec_dot_q*_1_q8_1`) the lanes hold the unsigned codes' products, the minimum
    /// terms go into one chain `summs = fma(mx, sy, summs)` per block, and the result is
    /// `lanes_total + summs`. For a type whose file declares its x86 kernel's order
    /// (`BlockQuant::GGML_X86_DOT`, e.g. TQ2_0), that order.
    GgmlLanes,
    /// ggml's repacked-Q4_0 (`q4_0_8x8`) order: `acc = fma(block_sum, dx·dy, acc)` per block.
    GgmlBlockChain,
    /// ggml's tiled k-quant matmul (eight activation columns or more): per super-block two
    /// exact integer sums, then `r = d·s1` (`r = fma(−dmin, s2, r)` with minimums) and
    /// `acc = acc + r·dy` (see `quants::k_quants::tiled`).
    GgmlTiled,
    /// ggml's repacked Q4_K / Q2_K kernels (`q4_K_8x8`, `q2_K_8x8`): exact integer sums,
    /// `acc = fma(S, d·dy, acc)` and `accm = fma(M, dmin·dy, accm)` per super-block (GEMV)
    /// or per 64 / 128 values (GEMM, the first `4·⌊m/4⌋` of `m` columns), result
    /// `acc − accm` (see `quants::k_quants::repacked`).
    GgmlRepacked,
}

/// The order `mul_mat` keeps for weight type `dtype` of shape `ne` so that its results are
/// llama.cpp's to the bit (see `kernels::ggml_arith`): Q8_0, Q4_1 and Q5_1 in
/// [`SumOrder::GgmlLanes`]; Q4_0
/// and IQ4_NL too, except 2-D weights whose row count is a multiple of 8, which llama.cpp
/// repacks ([`SumOrder::GgmlBlockChain`]); IQ4_XS in [`SumOrder::GgmlLanes`] over its
/// 256-value super-blocks (`ggml_vec_dot_iq4_xs_q8_K`: lane `l` holds the exact
/// `Σ_sub-block (ls − 32)·Σ x·y` over values `4l..4l + 4` of each sub-block, one FMA by
/// `d·d_y` per super-block); Q4_K and Q2_K weights llama.cpp repacks (2-D, row count a
/// multiple of 8) in [`SumOrder::GgmlRepacked`]; [`SumOrder::Any`] for the other types.
///
/// IQ4_NL weights llama.cpp does not repack take this order from tinyBLAS only for two
/// columns or more; for one, `kernels::ggml_arith` has the order of
/// `ggml_vec_dot_iq4_nl_q8_0` (two accumulators), which no SIMD build keeps.
pub fn ggml_sum_order(dtype: DType, ne: [usize; 4]) -> SumOrder {
    let repacked = ne[1] / 8 * 8 == ne[1] && ne[2] == 1 && ne[3] == 1;
    match dtype {
        // Q3_K, Q5_K, Q6_K: `ggml_vec_dot_q*_K_q8_K`'s lanes (the AVX2 builds of Q5_K and Q6_K
        // keep them, not Q6_K's AVX-512 ones; Q3_K's portable kernel only).
        DType::Q8_0
        | DType::Q5_0
        | DType::IQ4XS
        | DType::Q4_1
        | DType::Q5_1
        | DType::Q3K
        | DType::Q5K
        | DType::Q6K => SumOrder::GgmlLanes,
        DType::Q4_0 | DType::IQ4NL if repacked => SumOrder::GgmlBlockChain,
        DType::Q4K | DType::Q2K if ggml_repacks(dtype, ne) => SumOrder::GgmlRepacked,
        DType::Q4_0 | DType::IQ4NL => SumOrder::GgmlLanes,
        // A type whose file declares the order of ggml's repacked kernels
        // (`BlockQuant::GGML_X86_REPACKED_DOT`), for the weights llama.cpp repacks.
        _ if repacked && crate::quants::ggml_x86_repacked_dot(dtype).is_some() => {
            SumOrder::GgmlBlockChain
        }
        // A type whose file declares ggml's x86 order (`BlockQuant::GGML_X86_DOT`).
        _ if crate::quants::ggml_x86_dot(dtype).is_some() => SumOrder::GgmlLanes,
        _ => SumOrder::Any,
    }
}

/// Column counts from which llama.cpp's CPU backend multiplies a k-quant weight with its
/// tiled kernel ([`SumOrder::GgmlTiled`]) instead of one `ggml_vec_dot` per element.
pub use crate::quants::k_quants::tiled::GGML_TILED_MIN_COLS;

/// [`ggml_sum_order`] for a `mul_mat` of weight type `dtype` and shape `ne` against `n_cols`
/// activation columns per batch: k-quant weights that llama.cpp does not repack take its
/// tiled kernel from [`GGML_TILED_MIN_COLS`] columns on.
pub fn ggml_sum_order_cols(dtype: DType, ne: [usize; 4], n_cols: usize) -> SumOrder {
    if n_cols >= GGML_TILED_MIN_COLS && ggml_tiled_type(dtype) && !ggml_repacks(dtype, ne) {
        return SumOrder::GgmlTiled;
    }
    ggml_sum_order(dtype, ne)
}

/// Whether llama.cpp's tiled matmul takes weights of type `dtype` (`ggml_tiled_supported`:
/// the k-quants, IQ4_XS and the grid i-quants).
pub(crate) fn ggml_tiled_type(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Q2K
            | DType::Q3K
            | DType::Q4K
            | DType::Q5K
            | DType::Q6K
            | DType::IQ4XS
            | DType::IQ2XXS
            | DType::IQ2XS
            | DType::IQ2S
            | DType::IQ3XXS
            | DType::IQ3S
            | DType::IQ1S
            | DType::IQ1M
    )
}

/// Whether llama.cpp keeps a weight of type `dtype` and shape `ne` in a repacked layout on
/// the x86 machine its reference outputs come from (AVX-512 VNNI): Q4_0, Q4_K and Q2_K 2-D
/// weights whose row count is a multiple of 8.
pub(crate) fn ggml_repacks(dtype: DType, ne: [usize; 4]) -> bool {
    matches!(dtype, DType::Q4_0 | DType::Q4K | DType::Q2K)
        && ne[1].is_multiple_of(8)
        && ne[2] == 1
        && ne[3] == 1
}

/// The builds of `dtype`'s dot product this CPU runs that keep `order`: for
/// [`SumOrder::Any`], [`vec_dot_variants`]; for the ggml orders, the SIMD builds that keep
/// them (the scalar reference does not: it sums as ggml's generic C code).
pub fn vec_dot_variants_in(dtype: DType, order: SumOrder) -> Vec<VecDotVariant> {
    let chain = match order {
        SumOrder::Any => return vec_dot_variants(dtype),
        SumOrder::GgmlLanes => {
            if !matches!(
                dtype,
                DType::Q4_0
                    | DType::Q5_0
                    | DType::Q8_0
                    | DType::IQ4NL
                    | DType::IQ4XS
                    | DType::Q4_1
                    | DType::Q5_1
                    | DType::Q5K
                    | DType::Q6K
            ) && crate::quants::ggml_x86_dot(dtype).is_none()
            {
                return Vec::new();
            }
            false
        }
        SumOrder::GgmlBlockChain => true,
        SumOrder::GgmlTiled => return tiled_variants(dtype),
        // No SIMD build keeps the repacked order as a tile: `mul_mat` runs its per-column
        // kernels (`kernels::ggml_arith::mul_mat_gemm`).
        SumOrder::GgmlRepacked => return Vec::new(),
    };
    SIMD_ISAS
        .into_iter()
        .rev()
        // Q6_K's AVX-512 builds sum in their own order: only its AVX2 build keeps ggml's lanes.
        .filter(|&isa| !(order == SumOrder::GgmlLanes && dtype == DType::Q6K && isa != Isa::Avx2))
        .filter_map(|isa| {
            simd::kernels(dtype, isa, chain).map(|(dot, dot4, rows4, tile)| VecDotVariant {
                isa,
                dot,
                dot4,
                rows4,
                tile,
            })
        })
        .collect()
}

/// The SIMD builds of `dtype`'s dot product in ggml's tiled k-quant order
/// ([`SumOrder::GgmlTiled`]) that this CPU runs (`kernels::x86::tiled_avx2`).
fn tiled_variants(dtype: DType) -> Vec<VecDotVariant> {
    SIMD_ISAS
        .into_iter()
        .rev()
        .filter_map(|isa| {
            simd::tiled_kernels(dtype, isa).map(|(dot, dot4, rows4, tile)| VecDotVariant {
                isa,
                dot,
                dot4,
                rows4,
                tile,
            })
        })
        .collect()
}

/// The panel kernel `mul_mat` runs for a weight of type `dtype` and shape `ne` against
/// `n_cols` columns per batch when that product takes ggml's tiled order
/// ([`ggml_sum_order_cols`] gives [`SumOrder::GgmlTiled`]) and this CPU runs the AVX2
/// build (`kernels::x86::tiled_avx2`: rows × up to [`TILED_PANEL_COLS`] columns, bits of
/// `k_quants::tiled::dot_tiled`); `None` otherwise, and under `GGRS_FORCE_SCALAR` /
/// [`force_scalar`].
#[cfg(target_arch = "x86_64")]
pub(crate) fn tiled_panel(dtype: DType, ne: [usize; 4], n_cols: usize) -> Option<TiledPanelFn> {
    if ggml_sum_order_cols(dtype, ne, n_cols) != SumOrder::GgmlTiled
        || FORCE_SCALAR.load(Ordering::Relaxed)
        || !allowed(Isa::Avx2)
        || !crate::cpu::features().runs(Isa::Avx2)
    {
        return None;
    }
    crate::kernels::x86::panel_kernel(dtype)
}

/// The panel kernels of ggml's tiled order (see [`tiled_panel`]).
#[cfg(target_arch = "x86_64")]
pub(crate) use crate::kernels::x86::tiled_avx2::{
    PanelFn as TiledPanelFn, PANEL_COLS as TILED_PANEL_COLS,
};

/// The fastest build of `dtype`'s dot product keeping `order`: [`active_variant`] for
/// [`SumOrder::Any`]; for a ggml order, the best SIMD build keeping it, or `None` (no such
/// build on this CPU, or SIMD switched off by `GGRS_FORCE_SCALAR` / [`force_scalar`]; the
/// caller then uses portable code in that order).
pub fn active_variant_in(dtype: DType, order: SumOrder) -> Option<VecDotVariant> {
    type Table = [Option<VecDotVariant>; DType::ALL.len()];
    static LANES: OnceLock<Table> = OnceLock::new();
    static CHAIN: OnceLock<Table> = OnceLock::new();
    static TILED: OnceLock<Table> = OnceLock::new();
    let table = match order {
        SumOrder::Any => return active_variant(dtype),
        SumOrder::GgmlLanes => &LANES,
        SumOrder::GgmlBlockChain => &CHAIN,
        SumOrder::GgmlTiled => &TILED,
        SumOrder::GgmlRepacked => return None,
    };
    let i = slot(dtype)?;
    if FORCE_SCALAR.load(Ordering::Relaxed) || simd_off() {
        return None;
    }
    let table = table.get_or_init(|| {
        DType::ALL.map(|t| {
            vec_dot_variants_in(t, order)
                .into_iter()
                .rev()
                .find(|v| allowed(v.isa))
        })
    });
    table[i]
}

/// True when SIMD kernels of `isa` may run now: neither `GGRS_FORCE_SCALAR` nor
/// [`force_scalar`] switched SIMD off, and [`crate::cpu::isa`] allows `isa` (the caller checks the
/// CPU's features). (Used by the x86-64 panel selection only.)
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn simd_allowed(isa: Isa) -> bool {
    !FORCE_SCALAR.load(Ordering::Relaxed) && !simd_off() && allowed(isa)
}

/// True when [`crate::cpu::isa`] lets kernels of `isa` run (`GGRS_FORCE_SCALAR` allows
/// none). On x86-64 the AVX-512 builds go together (VNNI is the caller's check, as NEON's
/// `dotprod` is on AArch64); the AVX-VNNI builds run only where `isa()` is exactly
/// [`Isa::Avx2Vnni`] (AVX-512 does not imply AVX-VNNI: see `cpu`).
fn allowed(isa: Isa) -> bool {
    match isa {
        Isa::Scalar => true,
        Isa::Avx2 => crate::cpu::isa() >= Isa::Avx2,
        Isa::Avx2Vnni => crate::cpu::isa() == Isa::Avx2Vnni,
        Isa::Avx512 | Isa::Avx512Vnni => crate::cpu::isa() >= Isa::Avx512,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::NeonDotprod => !simd_off(),
    }
}

/// True when `GGRS_FORCE_SCALAR` switched every SIMD kernel off (also when the CPU has no
/// SIMD kernels).
fn simd_off() -> bool {
    crate::cpu::isa() == Isa::Scalar
}

static FORCE_SCALAR: AtomicBool = AtomicBool::new(false);
static NO_PANELS: AtomicBool = AtomicBool::new(false);

/// Switches `mul_mat`'s panel kernels (AVX-512 VNNI, Q4_0 and Q8_0 weights with sixteen
/// rows or more; see `kernels::x86::panel`) off (`true`) or back on (`false`) for the whole
/// process, from the next plan on: the tile kernels run instead, with the same bits. For
/// benchmarks and A/B comparisons; like [`force_scalar`], do not flip it while graphs run.
pub fn force_no_panels(on: bool) {
    NO_PANELS.store(on, Ordering::Relaxed);
}

/// True unless [`force_no_panels`] switched the panel kernels off.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn panels_allowed() -> bool {
    !NO_PANELS.load(Ordering::Relaxed)
}

/// Makes [`vec_dot_kernel`], [`active_variant`] and [`activation_quantizer`] return the
/// scalar reference (`true`) or the detected build again (`false`), for the whole process,
/// from the next `mul_mat` node on. Meant for benchmarks and A/B comparisons inside one process (`GGRS_FORCE_SCALAR` is
/// read once, at first use); do not flip it while graphs run on other threads if their
/// results must be reproducible bit for bit.
pub fn force_scalar(on: bool) {
    FORCE_SCALAR.store(on, Ordering::Relaxed);
}

/// The build `mul_mat` uses for weight type `dtype`: the best one for this CPU, chosen on
/// first use, or the scalar one under [`force_scalar`] (`None` for non-block types).
pub fn active_variant(dtype: DType) -> Option<VecDotVariant> {
    static TABLE: OnceLock<[Option<VecDotVariant>; DType::ALL.len()]> = OnceLock::new();
    let i = slot(dtype)?;
    if FORCE_SCALAR.load(Ordering::Relaxed) {
        return scalar_variant(dtype);
    }
    let table = TABLE.get_or_init(|| DType::ALL.map(|t| detect(t).or_else(|| scalar_variant(t))));
    table[i]
}

/// The dot-product kernel `mul_mat` uses for weight type `dtype` (see [`active_variant`]).
pub fn vec_dot_kernel(dtype: DType) -> Option<VecDotKernel> {
    active_variant(dtype).map(|v| v.dot)
}

/// Every quantizer into block type `dtype` this CPU runs, the reference
/// (`quants::quantize_row`) first. All write the same bytes; the SIMD ones exist for
/// `mul_mat`'s INIT. Not affected by `GGRS_FORCE_SCALAR` or [`force_scalar`].
pub fn quantizer_variants(dtype: DType) -> Vec<(Isa, FromF32Fn)> {
    let Some(reference) = crate::quants::traits(dtype).and_then(|t| t.from_f32) else {
        return Vec::new();
    };
    let mut v = vec![(Isa::Scalar, reference)];
    for isa in SIMD_ISAS.into_iter().rev() {
        if let Some(q) = simd::quantizer(dtype, isa) {
            v.push((isa, q));
        }
    }
    v
}

/// The quantizer `mul_mat` uses to convert activations to block type `dtype`: the fastest
/// this CPU runs (bytes identical to the reference), or the reference under
/// `GGRS_FORCE_SCALAR` / [`force_scalar`]. `None` for non-block types.
pub fn activation_quantizer(dtype: DType) -> Option<FromF32Fn> {
    static TABLE: OnceLock<[Option<FromF32Fn>; DType::ALL.len()]> = OnceLock::new();
    let i = slot(dtype)?;
    let reference = crate::quants::traits(dtype).and_then(|t| t.from_f32);
    if FORCE_SCALAR.load(Ordering::Relaxed) || simd_off() {
        return reference;
    }
    let table = TABLE.get_or_init(|| {
        DType::ALL.map(|t| {
            let best = quantizer_variants(t)
                .into_iter()
                .rev()
                .find(|(isa, _)| *isa != Isa::Scalar);
            best.map(|(_, q)| q)
                .or_else(|| crate::quants::traits(t).and_then(|tr| tr.from_f32))
        })
    });
    table[i]
}
