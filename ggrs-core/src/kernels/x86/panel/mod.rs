//! Panel kernels for `mul_mat` on x86-64: Q4_0 and Q8_0 weights, sixteen rows at a time,
//! one weight row per 32-bit lane. This module holds the layout, its packers and the AVX-512
//! VNNI kernels; `avx2` the kernels for CPUs without AVX-512 VNNI (same layout, same bits),
//! with AVX-VNNI builds of the Q4_0, Q8_0 and Q5_0 ones (and `repacked_avx2`'s Q4_K; these
//! two with several columns only) for the CPUs whose best level is `cpu::Isa::Avx2Vnni`
//! ([`Build`]).
//! The same scheme serves Q4_1, Q5_0, Q5_1 (`lanes_vnni`, `avx2`) and Q6_K
//! (`q6k_vnni`, `avx2`; layouts in [`Kind::block_at`]), Q5_K (`q5k`,
//! `q5k_avx2`), the i-quants IQ4_NL and IQ4_XS (`iq4`, `iq4_avx2`), MXFP4 and NVFP4 (`fp4`). Each
//! kind's kernels
//! live in a submodule; this module is the hub they share (layout, packers, dispatch).
//!
//! # Layout
//!
//! A *panel* is sixteen consecutive weight rows, repacked block by block (the `nb` blocks of
//! 32 values of a row) into vectors whose 32-bit lane `r` belongs to row `r`:
//!
//! ```text
//! block i of a Q8_0 panel (576 bytes)
//!   [ dx: 16 × f32 ]                       the rows' scales, widened from f16
//!   [ v_0 ] … [ v_7 ]                      8 vectors of 64 bytes;
//!                                          lane r of v_g = bytes 4g..4g+4 of row r's codes
//!
//! blocks 2j and 2j + 1 of a Q4_0 panel (576 bytes; a lone last block: 320 bytes)
//!   [ dx_2j: 16 × f16 ][ dx_2j+1: 16 × f16 ]   the rows' scales as stored in the file
//!   [ v_0 ] … [ v_3 ]                      block 2j's 4 vectors, lanes as above
//!   [ v_0 ] … [ v_3 ]                      block 2j + 1's
//! ```
//!
//! Q4_0 keeps the scales in f16 (widened with `vcvtph2ps`, exactly) so that a decode
//! streams 288 bytes per block of sixteen rows, as many as the file, and pairs blocks so
//! that every vector stays 64-byte aligned.
//!
//! Q4_0 keeps its nibbles as stored (byte `j` of a block holds value `j` in its low nibble,
//! value `j + 16` in its high nibble, both offset by 8), so `v_g`'s low nibbles are values
//! `4g..4g+4` and its high nibbles values `16 + 4g..16 + 4g + 4`. Q8_0's codes are stored as
//! `x ^ 0x80 = x + 128`, unsigned, for the VNNI kernel, and as `x` where the AVX2 kernel
//! runs ([`flips_q8_0`]).
//!
//! # Arithmetic
//!
//! `vpdpbusd` with a vector of unsigned weight bytes and one activation quad broadcast to
//! every lane adds, in each lane, four products of *that lane's row*. The weight offset `o`
//! (8 or 128) comes back out through a seed: the accumulator starts at `−o · Σ y` over the
//! activation values involved, precomputed once per activation block ([`activation_aux`]).
//! So every lane holds an exact integer and the f32 work can follow ggml's orders bit for bit
//! (see `dispatch::SumOrder` and `kernels::ggml_arith`), sixteen rows per instruction:
//!
//! - Q4_0, [`SumOrder::GgmlBlockChain`](crate::quants::dispatch::SumOrder): the block's exact
//!   sum `s` (eight `vpdpbusd` over the 32 values), then `acc = fma(s, dx·dy, acc)`;
//! - Q8_0, [`SumOrder::GgmlLanes`](crate::quants::dispatch::SumOrder): eight accumulators,
//!   one per quad `g` of the block, `acc_g = fma(s_g, dx·dy, acc_g)`, and at the end
//!   `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`.
//!
//! A panel is packed once ([`pack`]) and then dotted with as many activation columns as the
//! caller has ([`gemm`]): for a prompt each weight block is unpacked once per up to eight
//! columns; for one column (decoding), the packing is a handful of shuffles per block.
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C), except
//! [`pack`] and [`gemm`], which need one on which [`available`] holds (they pick the build
//! the CPU runs); the pointer contracts are stated on each function.

mod avx2;
mod fp4;
mod grid_vnni;
mod iq4;
mod iq4_avx2;
mod lanes_vnni;
mod q3k;
mod q5k;
mod q5k_avx2;
mod q6k_vnni;
mod repacked;
mod repacked_avx2;
mod tiled_vnni;

use std::arch::x86_64::*;

use super::util::{read_f32, read_u16, read_u32};

/// Weight rows per panel.
pub(crate) const ROWS: usize = 16;

/// Bytes of one activation block's side data ([`activation_aux`]): `dy` (f32), the seed of
/// the whole block (i32) and the eight seeds of its quads (i32).
pub(crate) const AUX_BYTES: usize = 40;

/// Bytes of a Q8_0 block (activations).
const Q8_0_BYTES: usize = 34;
/// Bytes of a Q4_0 block.
const Q4_0_BYTES: usize = 18;
/// Bytes of two packed Q4_0 blocks of a panel: 64 bytes of f16 scales, 8 vectors.
pub(super) const Q4_0_PAIR: usize = 64 + 8 * 64;

/// Offsets in a packed Q4_0 panel of block `i`'s 16 f16 scales and of its first vector.
#[inline(always)]
pub(super) const fn q4_0_at(i: usize) -> (usize, usize) {
    let (pair, odd) = (i / 2 * Q4_0_PAIR, i % 2);
    (pair + 32 * odd, pair + 64 + 256 * odd)
}

/// A weight format and summation order the panel kernels implement.
///
/// Some kinds have *twins*: kinds of the same packed layout in another order, which the
/// products llama.cpp runs another kernel for take ([`Kind::split`]): the repacked GEMV kinds
/// their GEMM order for the first `4·⌊m/4⌋` columns, the Q3_K and Q6_K lanes (ggml's
/// `vec_dot`, below eight columns) their tiled order from eight columns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Q4_0 weights, one FMA per block ([`SumOrder::GgmlBlockChain`]).
    ///
    /// [`SumOrder::GgmlBlockChain`]: crate::quants::dispatch::SumOrder::GgmlBlockChain
    Q4_0Chain,
    /// Q8_0 weights, eight lanes per element ([`SumOrder::GgmlLanes`]).
    ///
    /// [`SumOrder::GgmlLanes`]: crate::quants::dispatch::SumOrder::GgmlLanes
    Q8_0Lanes,
    /// Q4_1 weights against Q8_1, eight lanes plus the minimum chain.
    Q4_1Lanes,
    /// Q5_0 weights, eight lanes.
    Q5_0Lanes,
    /// Q5_1 weights against Q8_1, eight lanes plus the minimum chain.
    Q5_1Lanes,
    /// Q6_K weights against Q8_K, eight lanes per super-block as ggml's AVX2
    /// `ggml_vec_dot_q6_K_q8_K` (`panel::q6k_vnni`, `panel::avx2`), below eight columns, where
    /// llama.cpp runs that kernel; from eight on its twin [`Kind::Q6KTiled`].
    Q6KLanes,
    /// IQ4_NL weights, one FMA per block ([`SumOrder::GgmlBlockChain`], ggml's repacked
    /// `iq4_nl_8x8` kernels); Q4_0's layout, the nibbles read as indices into the level
    /// table (`panel::iq4`).
    ///
    /// [`SumOrder::GgmlBlockChain`]: crate::quants::dispatch::SumOrder::GgmlBlockChain
    IQ4NLChain,
    /// IQ4_XS weights against Q8_K, eight lanes per super-block as ggml's
    /// `ggml_vec_dot_iq4_xs_q8_K` (below eight columns: [`Kind::takes_columns`]; layout in
    /// `panel::iq4`).
    IQ4XSLanes,
    /// IQ4_XS weights against Q8_K in ggml's tiled order (eight columns or more), on the
    /// packed layout of [`Kind::IQ4XSLanes`] (AVX-512 VNNI build only; elsewhere those
    /// columns take `tiled_avx2`'s kernels: [`Kind::split`]).
    IQ4XSTiled,
    /// Q6_K in ggml's tiled k-quant order (`panel::tiled_vnni`; VNNI build only: without
    /// it, `tiled_avx2` takes those products and [`Kind::takes_columns`] says so), same layout
    /// as [`Kind::Q6KLanes`].
    Q6KTiled,
    /// Q3_K weights against Q8_K, eight lanes per super-block as ggml's AVX2
    /// `ggml_vec_dot_q3_K_q8_K` (`panel::q3k`), below eight columns; from eight on its twin
    /// [`Kind::Q3KTiled`].
    Q3KLanes,
    /// Q3_K in ggml's tiled order, as [`Kind::Q6KTiled`], same layout as [`Kind::Q3KLanes`].
    Q3KTiled,
    /// Q4_K weights against Q8_K in the order of ggml's repacked `q4_K_8x8` GEMV kernel
    /// (`panel::repacked`): one FMA per super-block. Planned for every Q4_K weight llama.cpp
    /// repacks; the first `4·⌊m/4⌋` columns take its twin [`Kind::Q4KGemm`].
    Q4KGemv,
    /// Q4_K in the order of ggml's repacked GEMM kernel (one FMA per 64 values), same layout
    /// as [`Kind::Q4KGemv`].
    Q4KGemm,
    /// Q2_K weights against Q8_K in the order of ggml's repacked `q2_K_8x8` GEMV kernel.
    Q2KGemv,
    /// Q2_K in the order of ggml's repacked GEMM kernel (one FMA per 128 values), same layout
    /// as [`Kind::Q2KGemv`].
    Q2KGemm,
    /// Q5_K weights against Q8_K, eight lanes per super-block and the minimum chain as ggml's
    /// AVX2 `ggml_vec_dot_q5_K_q8_K` (`panel::q5k`, `panel::q5k_avx2`), below eight columns,
    /// where llama.cpp runs that kernel (from eight on, its tiled order: `tiled_avx2`).
    Q5KLanes,
    /// MXFP4 weights, one FMA per block ([`SumOrder::GgmlBlockChain`], ggml's repacked
    /// `mxfp4_8x8` kernels); Q4_0's layout with bfloat16 scales (`panel::fp4`).
    ///
    /// [`SumOrder::GgmlBlockChain`]: crate::quants::dispatch::SumOrder::GgmlBlockChain
    MXFP4Chain,
    /// NVFP4 weights (64 values per block, four UE4M3 sub-block scales) against Q8_0, eight
    /// lanes per element as ggml's `ggml_vec_dot_nvfp4_q8_0` (`panel::fp4`).
    NVFP4Lanes,
    /// IQ2_XXS weights against Q8_K in ggml's tiled order, decoded when packed
    /// (`panel::grid_vnni`; AVX-512 VNNI, eight columns or more, chosen by `select::select`
    /// only: never packed ahead).
    IQ2XXSTiled,
    /// IQ2_XS, as [`Kind::IQ2XXSTiled`].
    IQ2XSTiled,
    /// IQ2_S, as [`Kind::IQ2XXSTiled`].
    IQ2STiled,
    /// IQ3_XXS, as [`Kind::IQ2XXSTiled`].
    IQ3XXSTiled,
    /// IQ3_S, as [`Kind::IQ2XXSTiled`].
    IQ3STiled,
    /// IQ1_S, as [`Kind::IQ2XXSTiled`].
    IQ1STiled,
    /// IQ1_M, as [`Kind::IQ2XXSTiled`].
    IQ1MTiled,
}

/// The grid i-quant kind of weight type `dtype` (ggml's tiled order, `panel::grid_vnni`), if
/// it is one.
pub(crate) const fn grid_kind(dtype: crate::dtype::DType) -> Option<Kind> {
    self::grid_vnni::grid_kind(dtype)
}

/// Where the parts of packed block `i` of a panel lie (byte offsets from the panel's start).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockAt {
    /// The sixteen scales (f16, or f32 for Q8_0).
    pub d: usize,
    /// The sixteen minimums (f16; Q4_1, Q5_1; Q4_K, Q2_K, Q5_K: their `dmin`).
    pub m: usize,
    /// The first 64-byte vector of codes (4 for nibbles, 8 for Q8_0).
    pub v: usize,
    /// The fifth bits (Q5_0, Q5_1): lane `r`, byte `t` holds, in bit `g`, the fifth bit of
    /// row `r`'s value `4g + t`. Q3_K: its 8 vectors of `hmask`. Q6_K: `v` (its codes are
    /// one run of `ql` and `qh` vectors, see [`q6_k_ql`] and [`q6_k_qh`]). Q5_K: its first
    /// vector of `qh`, the code vectors interleaved with them (`panel::q5k`).
    pub h: usize,
    /// Q6_K, Q3_K: the sixteen scales of each row, scale-major (16 bytes per scale: row `r`
    /// at byte `r`); Q4_K, Q2_K: see `panel::repacked`; Q5_K: the 12 packed scale bytes of
    /// each row, in 3 vectors (`panel::q5k`). IQ4_XS: the rows' `scales_l` (lane `r` = row
    /// `r`'s four bytes); its `scales_h` (16 × u16) are at `h`.
    pub s: usize,
}

impl Kind {
    /// The kind that owns this kind's packed layout (itself, or the twin it shares it with).
    pub(crate) const fn layout(self) -> Kind {
        match self {
            Kind::Q6KTiled => Kind::Q6KLanes,
            Kind::Q3KTiled => Kind::Q3KLanes,
            Kind::Q4KGemm => Kind::Q4KGemv,
            Kind::Q2KGemm => Kind::Q2KGemv,
            Kind::IQ4XSTiled => Kind::IQ4XSLanes,
            k => k,
        }
    }

    /// Bytes of a packed panel (sixteen rows) of `nb` blocks: a multiple of 64 for all but
    /// Q5_0 and Q6_K.
    pub(crate) const fn panel_bytes(self, nb: usize) -> usize {
        match self.layout() {
            Kind::Q4_0Chain | Kind::IQ4NLChain | Kind::MXFP4Chain => {
                nb / 2 * Q4_0_PAIR + nb % 2 * (64 + 4 * 64)
            }
            Kind::Q3KLanes => nb * self::q3k::Q3K_PANEL_BYTES,
            Kind::Q4KGemv => nb * self::repacked::Q4K_PANEL_BYTES,
            Kind::Q2KGemv => nb * self::repacked::Q2K_PANEL_BYTES,
            Kind::Q5KLanes => nb * self::q5k::Q5K_PANEL_BYTES,
            k if k.is_grid() => nb * self::grid_vnni::BLOCK_BYTES,
            k => nb * ROWS * k.src_block_bytes() + matches!(k, Kind::Q8_0Lanes) as usize * nb * 32,
        }
    }

    /// Values per block of the weight type (32, or 256 for the super-blocks of the k-quants and IQ4_XS).
    pub(crate) const fn block_values(self) -> usize {
        match self.layout() {
            Kind::Q6KLanes
            | Kind::Q3KLanes
            | Kind::Q4KGemv
            | Kind::Q2KGemv
            | Kind::IQ4XSLanes
            | Kind::Q5KLanes => 256,
            k if k.is_grid() => 256,
            Kind::NVFP4Lanes => 64,
            _ => 32,
        }
    }

    /// Whether this kind, with its twins ([`Kind::split`]), keeps llama.cpp's order for
    /// `n_cols` activation columns (per batch) on this CPU: all but the Q3_K, Q6_K and IQ4_XS lanes
    /// from eight columns on (`dispatch::GGML_TILED_MIN_COLS`, llama.cpp's tiled kernel) where
    /// their tiled twins have no build (no AVX-512 VNNI), and the Q5_K lanes, which have no
    /// tiled twin, from eight columns on everywhere.
    pub(crate) fn takes_columns(self, n_cols: usize) -> bool {
        if self.is_grid() {
            return n_cols >= crate::quants::k_quants::tiled::GGML_TILED_MIN_COLS && vnni();
        }
        if self == Kind::Q5KLanes {
            return n_cols < crate::quants::k_quants::tiled::GGML_TILED_MIN_COLS;
        }
        !matches!(self, Kind::Q6KLanes | Kind::Q3KLanes | Kind::IQ4XSLanes)
            || n_cols < crate::quants::k_quants::tiled::GGML_TILED_MIN_COLS
            || vnni()
    }

    /// Whether every column of a product gets the same arithmetic whatever the column count
    /// (all but the kinds with a twin, and the Q5_K lanes, whose products with eight columns
    /// or more take another kernel).
    pub(crate) const fn order_fixed(self) -> bool {
        !self.is_grid()
            && !matches!(
                self,
                Kind::Q4KGemv
                    | Kind::Q2KGemv
                    | Kind::Q6KLanes
                    | Kind::Q3KLanes
                    | Kind::IQ4XSLanes
                    | Kind::Q5KLanes
            )
    }

    /// The kernels of a product with `n_cols` columns per batch: `(first, count)` means the
    /// first `count` columns of each batch (at most; `usize::MAX`: all) take kind `first`,
    /// the rest this kind. The repacked GEMV kinds give their GEMM twin `4·⌊n_cols/4⌋`
    /// columns when `n_cols > 3` (llama.cpp's repacked `forward_mul_mat`); the Q3_K, Q6_K and
    /// IQ4_XS lanes give every column to their tiled twin from eight columns on (when
    /// [`Kind::takes_columns`] holds).
    pub(crate) fn split(self, n_cols: usize) -> (Kind, usize) {
        let tiled = n_cols >= crate::quants::k_quants::tiled::GGML_TILED_MIN_COLS;
        match self {
            Kind::Q4KGemv => (
                Kind::Q4KGemm,
                crate::quants::k_quants::repacked::gemm_columns(n_cols),
            ),
            Kind::Q2KGemv => (
                Kind::Q2KGemm,
                crate::quants::k_quants::repacked::gemm_columns(n_cols),
            ),
            Kind::Q6KLanes if tiled => (Kind::Q6KTiled, usize::MAX),
            Kind::Q3KLanes if tiled => (Kind::Q3KTiled, usize::MAX),
            Kind::IQ4XSLanes if tiled => (Kind::IQ4XSTiled, usize::MAX),
            k => (k, 0),
        }
    }

    /// Where block `i`'s parts lie in a packed panel.
    #[inline(always)]
    pub(crate) const fn block_at(self, i: usize) -> BlockAt {
        let kind = self.layout();
        let base = match kind {
            Kind::Q4_0Chain | Kind::IQ4NLChain | Kind::MXFP4Chain => 0,
            _ => i * kind.panel_bytes(1),
        };
        let (d, m, v, h, s) = match kind {
            Kind::Q4_0Chain | Kind::IQ4NLChain | Kind::MXFP4Chain => {
                let (d, v) = q4_0_at(i);
                (d, 0, v, 0, 0)
            }
            Kind::Q8_0Lanes => (base, 0, base + 64, 0, 0),
            Kind::Q4_1Lanes => (base, base + 32, base + 64, 0, 0),
            // d, then codes, then fifth bits: the order the kernels read them, so that the
            // hardware prefetcher sees one forward stream (d at the end ran slower).
            Kind::Q5_0Lanes => (base, 0, base + 32, base + 288, 0),
            Kind::Q5_1Lanes => (base, base + 32, base + 64, base + 320, 0),
            // d (32 bytes), scales (256 bytes), then ql (32 vectors) and qh (16) in the
            // order the lanes kernels read them (`q6_k_ql`, `q6_k_qh`): 3360 bytes, read
            // front to back.
            Kind::Q6KLanes => (base, 0, base + 288, base + 288, base + 32),
            // d (16 × f16), scales_h (16 × u16), scales_l (16 × u32), qs (32 vectors):
            // 2176 bytes, in the order the kernels read them (`panel::iq4`).
            Kind::IQ4XSLanes => (base, 0, base + 128, base + 32, base + 64),
            // See `panel::q3k` and `panel::repacked`.
            Kind::Q3KLanes => {
                use self::q3k::{hm_at, qs_at};
                (base, 0, base + qs_at(0), base + hm_at(0), base + 64)
            }
            Kind::Q4KGemv => {
                use self::repacked::{Q4K_QS, Q4K_SC};
                (base, base + 32, base + Q4K_QS, 0, base + Q4K_SC)
            }
            // The rows' UE4M3 scale bytes (a dword per lane), then the 8 vectors of `qs`.
            Kind::NVFP4Lanes => (base, 0, base + 64, 0, 0),
            Kind::Q5KLanes => {
                use self::q5k::{h_at, v_at, Q5K_DMIN, Q5K_SC};
                let (v, h) = (v_at(0, 0), h_at(0));
                (base, base + Q5K_DMIN, base + v, base + h, base + Q5K_SC)
            }
            k if k.is_grid() => {
                use self::grid_vnni::{LS_AT, V_AT};
                (base, 0, base + V_AT, 0, base + LS_AT)
            }
            _ => {
                use self::repacked::{Q2K_QS, Q2K_SC};
                (base, base + 32, base + Q2K_QS, 0, base + Q2K_SC)
            }
        };
        BlockAt { d, m, v, h, s }
    }

    /// Bytes of one block of the weight type in its file layout.
    pub(crate) const fn src_block_bytes(self) -> usize {
        match self.layout() {
            Kind::Q4_0Chain => Q4_0_BYTES,
            Kind::Q8_0Lanes => Q8_0_BYTES,
            Kind::Q4_1Lanes => 20,
            Kind::Q5_0Lanes => 22,
            Kind::Q5_1Lanes => 24,
            Kind::Q6KLanes => 210,
            Kind::IQ4NLChain => 18,
            Kind::IQ4XSLanes => 136,
            Kind::Q3KLanes => 110,
            Kind::Q4KGemv => 144,
            Kind::Q5KLanes => 176,
            Kind::MXFP4Chain => self::fp4::MXFP4_BYTES,
            Kind::NVFP4Lanes => self::fp4::NVFP4_BYTES,
            k if k.is_grid() => self::grid_vnni::src_bytes(k),
            _ => 84,
        }
    }

    /// The type the activations are converted to: Q8_0, Q8_1 for the types with a minimum,
    /// Q8_K for the k-quants.
    pub(crate) const fn activation(self) -> crate::dtype::DType {
        match self.layout() {
            Kind::Q4_1Lanes | Kind::Q5_1Lanes => crate::dtype::DType::Q8_1,
            Kind::Q6KLanes
            | Kind::Q3KLanes
            | Kind::Q4KGemv
            | Kind::Q2KGemv
            | Kind::IQ4XSLanes
            | Kind::Q5KLanes => crate::dtype::DType::Q8K,
            k if k.is_grid() => crate::dtype::DType::Q8K,
            _ => crate::dtype::DType::Q8_0,
        }
    }

    /// Bytes of side data per activation block ([`activation_aux`]): [`AUX_BYTES`] for the
    /// Q8_0 types with a code offset, the pair sums of Q4_K's repacked kinds and Q5_K's lanes,
    /// the group seeds of the grid kinds (`panel::grid_vnni`), none for the others.
    pub(crate) const fn aux_bytes(self) -> usize {
        match self.layout() {
            Kind::Q4_0Chain
            | Kind::Q8_0Lanes
            | Kind::Q5_0Lanes
            | Kind::IQ4NLChain
            | Kind::MXFP4Chain => AUX_BYTES,
            // Two Q8_0 blocks per NVFP4 block.
            Kind::NVFP4Lanes => 2 * AUX_BYTES,
            Kind::Q4KGemv | Kind::Q5KLanes => self::repacked::Q4K_AUX_BYTES,
            k if k.is_grid() => self::grid_vnni::aux_bytes(k),
            _ => 0,
        }
    }

    /// The offset `o` of the unsigned weight codes (`u = x + o`) of the Q8_0 types with
    /// side data (0 for the others). IQ4_NL's VNNI kernel reads its levels as `level + 128`
    /// (its AVX2 kernel ignores the seeds).
    const fn offset(self) -> i32 {
        match self.layout() {
            Kind::Q4_0Chain => 8,
            Kind::Q8_0Lanes | Kind::IQ4NLChain => 128,
            Kind::Q5_0Lanes => 16,
            Kind::MXFP4Chain | Kind::NVFP4Lanes => self::fp4::OFFSET,
            _ => 0,
        }
    }

    /// Whether the AVX-512 VNNI build has this kind (all have; the tiled twins have only a
    /// VNNI build).
    pub(crate) const fn has_vnni_build(self) -> bool {
        true
    }

    /// Whether this kind has an AVX2 build (the tests run every build the CPU has).
    #[cfg(test)]
    const fn has_avx2_build(self) -> bool {
        !self.is_grid() && !matches!(self, Kind::Q6KTiled | Kind::Q3KTiled | Kind::IQ4XSTiled)
    }

    /// Whether this is one of the grid i-quant kinds (`panel::grid_vnni`).
    pub(crate) const fn is_grid(self) -> bool {
        self::grid_vnni::grid_type(self).is_some()
    }
}

/// The side data of one Q8_0 activation row for weights of `kind`: per block, `dy` as f32,
/// `−o · Σ y` over the block and `−o · Σ y` over each of its eight quads (`o` the weights'
/// code offset), little-endian, [`AUX_BYTES`] per block. `row` holds whole Q8_0 blocks and
/// `aux` room for as many.
pub(crate) fn activation_aux(kind: Kind, row: &[u8], aux: &mut [u8]) {
    if kind.aux_bytes() == 0 {
        return;
    }
    if matches!(kind.layout(), Kind::Q4KGemv | Kind::Q5KLanes) {
        return self::repacked::activation_aux_q4_k(row, aux);
    }
    if kind.is_grid() {
        return self::grid_vnni::activation_aux(kind, row, aux);
    }
    let o = kind.offset();
    for (blk, out) in row
        .chunks_exact(Q8_0_BYTES)
        .zip(aux.chunks_exact_mut(AUX_BYTES))
    {
        let dy = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
        out[0..4].copy_from_slice(&dy.to_le_bytes());
        let mut total = 0i32;
        for g in 0..8 {
            let s: i32 = blk[2 + 4 * g..6 + 4 * g]
                .iter()
                .map(|&b| b as i8 as i32)
                .sum();
            total += s;
            out[8 + 4 * g..12 + 4 * g].copy_from_slice(&(-o * s).to_le_bytes());
        }
        out[4..8].copy_from_slice(&(-o * total).to_le_bytes());
    }
}

/// The 16 f16 scales of block `i` of the rows, as stored.
///
/// # Safety
/// AVX; two bytes readable at `rows[r] + i · bytes`.
#[inline(always)]
unsafe fn scales_f16(rows: &[*const u8; ROWS], i: usize, bytes: usize) -> __m256i {
    let mut h = [0u16; ROWS];
    for (r, v) in h.iter_mut().enumerate() {
        // SAFETY: the block's first two bytes are its f16 scale (caller).
        *v = unsafe { read_u16(rows[r].add(i * bytes)) };
    }
    // SAFETY: `h` holds 32 bytes; unaligned load; AVX is the caller's guarantee.
    unsafe { _mm256_loadu_si256(h.as_ptr().cast()) }
}

/// The 16 f16 scales of block `i` of the rows, widened to f32.
///
/// # Safety
/// AVX-512 F and F16C; two bytes readable at `rows[r] + i · bytes`.
#[inline(always)]
unsafe fn scales(rows: &[*const u8; ROWS], i: usize, bytes: usize) -> __m512 {
    // SAFETY: forwarded from the caller.
    unsafe { _mm512_cvtph_ps(scales_f16(rows, i, bytes)) }
}

/// Packs `nb` blocks of sixteen Q4_0 rows (`rows[r]`, row `r`) into `out` (see the module
/// docs).
///
/// # Safety
/// The CPU features of the module; `nb` whole Q4_0 blocks readable at every `rows[r]`;
/// `Kind::Q4_0Chain.panel_bytes(nb)` bytes writable at `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn pack_q4_0(nb: usize, rows: &[*const u8; ROWS], out: *mut u8, ahead: Ahead) {
    // SAFETY: reads stay inside block i < nb of each row, writes inside packed block i.
    unsafe {
        // Level 1: from two vectors of four rows × four dwords (row-major), the dwords 0
        // and 1 (`lo`) or 2 and 3 (`hi`) of all eight rows, dword-major.
        let idx_lo = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
        let idx_hi = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
        for i in 0..nb {
            prefetch(ahead, i, nb);
            let (sc, vec) = q4_0_at(i);
            _mm256_storeu_si256(out.add(sc).cast(), scales_f16(rows, i, Q4_0_BYTES));
            let dst = out.add(vec);
            let ld = |r: usize| _mm_loadu_si128(rows[r].add(i * Q4_0_BYTES + 2).cast());
            let quad = |k: usize| {
                let z = _mm512_castsi128_si512(ld(4 * k));
                let z = _mm512_inserti32x4::<1>(z, ld(4 * k + 1));
                let z = _mm512_inserti32x4::<2>(z, ld(4 * k + 2));
                _mm512_inserti32x4::<3>(z, ld(4 * k + 3))
            };
            let (a0, a1, a2, a3) = (quad(0), quad(1), quad(2), quad(3));
            let b01_lo = _mm512_permutex2var_epi32(a0, idx_lo, a1);
            let b01_hi = _mm512_permutex2var_epi32(a0, idx_hi, a1);
            let b23_lo = _mm512_permutex2var_epi32(a2, idx_lo, a3);
            let b23_hi = _mm512_permutex2var_epi32(a2, idx_hi, a3);
            // Level 2: rows 0..8 of a dword next to rows 8..16 of it.
            let v = [
                _mm512_shuffle_i64x2::<0x44>(b01_lo, b23_lo),
                _mm512_shuffle_i64x2::<0xEE>(b01_lo, b23_lo),
                _mm512_shuffle_i64x2::<0x44>(b01_hi, b23_hi),
                _mm512_shuffle_i64x2::<0xEE>(b01_hi, b23_hi),
            ];
            for (g, vg) in v.iter().enumerate() {
                _mm512_storeu_si512(dst.add(64 * g).cast(), *vg);
            }
        }
    }
}

/// Packs `nb` blocks of sixteen Q8_0 rows into `out` (see the module docs).
///
/// # Safety
/// As [`pack_q4_0`], for Q8_0 blocks and `Kind::Q8_0Lanes.panel_bytes(nb)`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn pack_q8_0(nb: usize, rows: &[*const u8; ROWS], out: *mut u8, ahead: Ahead) {
    // SAFETY: reads stay inside block i < nb of each row, writes inside packed block i.
    unsafe {
        // Level 1: from two vectors of two rows × eight dwords, dwords 0..4 (`lo`) or 4..8
        // (`hi`) of the four rows, one 128-bit lane per dword.
        let idx_lo = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
        let idx_hi = _mm512_setr_epi32(4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31);
        let flip = _mm512_set1_epi8(-128);
        let bb = Kind::Q8_0Lanes.panel_bytes(1);
        for i in 0..nb {
            prefetch(ahead, i, nb);
            let dst = out.add(i * bb);
            _mm512_storeu_ps(dst.cast(), scales(rows, i, Q8_0_BYTES));
            let ld = |r: usize| _mm256_loadu_si256(rows[r].add(i * Q8_0_BYTES + 2).cast());
            let pair = |k: usize| {
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(ld(2 * k)), ld(2 * k + 1))
            };
            let mut c_lo = [_mm512_setzero_si512(); 4];
            let mut c_hi = [_mm512_setzero_si512(); 4];
            for p in 0..4 {
                let (x, y) = (pair(2 * p), pair(2 * p + 1));
                c_lo[p] = _mm512_permutex2var_epi32(x, idx_lo, y);
                c_hi[p] = _mm512_permutex2var_epi32(x, idx_hi, y);
            }
            // Level 2: per half panel q (rows 8q..8q+8), pairs of dwords:
            // [d rows 0..4, d+1 rows 0..4, d rows 4..8, d+1 rows 4..8].
            let mut d = [[_mm512_setzero_si512(); 4]; 2];
            for q in 0..2 {
                d[q][0] = _mm512_shuffle_i64x2::<0x44>(c_lo[2 * q], c_lo[2 * q + 1]);
                d[q][1] = _mm512_shuffle_i64x2::<0xEE>(c_lo[2 * q], c_lo[2 * q + 1]);
                d[q][2] = _mm512_shuffle_i64x2::<0x44>(c_hi[2 * q], c_hi[2 * q + 1]);
                d[q][3] = _mm512_shuffle_i64x2::<0xEE>(c_hi[2 * q], c_hi[2 * q + 1]);
            }
            // Level 3: one dword of all sixteen rows, made unsigned.
            for (s, (lo, hi)) in d[0].iter().zip(&d[1]).enumerate() {
                let even = _mm512_shuffle_i64x2::<0x88>(*lo, *hi);
                let odd = _mm512_shuffle_i64x2::<0xDD>(*lo, *hi);
                let at = dst.add(64 + 128 * s);
                _mm512_storeu_si512(at.cast(), _mm512_xor_si512(even, flip));
                _mm512_storeu_si512(at.add(64).cast(), _mm512_xor_si512(odd, flip));
            }
        }
    }
}

/// A memory range to prefetch a share at a time: while packing, the next panel's rows (when
/// they are contiguous), spread evenly over the blocks of the pack; while decoding, a packed
/// block a few ahead, spread over the passes through the current one ([`prefetch_block`]).
/// Prefetches never fault; packers pass ranges inside the weight tensor, decoding kernels
/// blocks that may lie past the panel's end (the next panel's, or nothing).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ahead {
    /// First byte.
    pub start: *const u8,
    /// Bytes (0: nothing to prefetch).
    pub len: usize,
}

impl Ahead {
    /// Nothing to prefetch.
    pub(crate) const NONE: Ahead = Ahead {
        start: std::ptr::null(),
        len: 0,
    };
}

/// Prefetches (into L2) share `part` of `parts` of packed block `block` (of `bytes` bytes)
/// of `panel`. A decoding kernel that passes through a block in `parts` steps calls it once
/// per step for a block a few ahead, so that the requests spread over the block instead of
/// queueing up at its start or being left to the hardware prefetcher, which streamed the
/// multi-line K-quant blocks markedly slower (`examples/kquant_decode_rate`; figures in
/// `docs/kernel-bench-notes.md`).
#[inline(always)]
pub(super) fn prefetch_block(
    panel: *const u8,
    bytes: usize,
    block: usize,
    part: usize,
    parts: usize,
) {
    let start = panel.wrapping_add(block * bytes);
    prefetch(Ahead { start, len: bytes }, part, parts);
}

/// How far ahead of the bytes they read (in bytes) the kernels streaming a packed copy
/// prefetch ([`stream_ahead`]).
const STREAM_AHEAD: usize = 16 << 10;

/// Prefetches (into L1) the `len` bytes at `panel + at + STREAM_AHEAD`, one per 64-byte line:
/// a kernel reading a packed copy ([`crate::kernels::PackedWeight`]), whose panels lie one
/// after the other, calls it as it reaches the bytes at `at`, so the lines it will read a
/// few panels on are in flight while it computes. The hardware prefetcher alone, which
/// restarts at every 4 KiB page, left the products of several columns at the sum of their
/// memory and arithmetic times and one column below the memory's rate (figures in
/// `docs/kernel-bench-notes.md`).
/// Past the copy's end this touches whatever follows (a prefetch never faults;
/// `wrapping_add` keeps the address arithmetic defined).
#[inline(always)]
pub(super) fn stream_ahead(panel: *const u8, at: usize, len: usize) {
    fetch_lines(panel, at + STREAM_AHEAD, len);
}

/// Prefetches (into L1) the `len` bytes at `panel + at`, one per 64-byte line (past the
/// copy's end whatever follows: a prefetch never faults, `wrapping_add` keeps the address
/// arithmetic defined).
#[inline(always)]
pub(super) fn fetch_lines(panel: *const u8, at: usize, len: usize) {
    let from = panel.wrapping_add(at);
    let mut off = 0;
    while off < len {
        // SAFETY: a prefetch is a hint; it reads nothing and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(from.wrapping_add(off).cast()) };
        off += 64;
    }
}

/// Prefetches (into L2) the `i`-th of `nb` even shares of `ahead`, one per 64-byte line.
#[inline(always)]
pub(super) fn prefetch(ahead: Ahead, i: usize, nb: usize) {
    if ahead.len == 0 {
        return;
    }
    let (from, to) = (ahead.len * i / nb, ahead.len * (i + 1) / nb);
    let mut off = from & !63;
    while off < to {
        // SAFETY: a prefetch is a hint that never faults; the address lies in the caller's
        // range (`wrapping_add` keeps the pointer arithmetic defined regardless).
        unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.start.wrapping_add(off).cast()) };
        off += 64;
    }
}

/// Packs `nb` blocks of the sixteen weight rows `rows` (file layout of `kind`'s type) into
/// `out` ([`Kind::panel_bytes`]), prefetching `ahead` on the way.
///
/// # Safety
/// [`available`] holds; `nb` whole blocks readable at every `rows[r]`;
/// `kind.panel_bytes(nb)` bytes writable at `out`.
pub(crate) unsafe fn pack(
    kind: Kind,
    nb: usize,
    rows: &[*const u8; ROWS],
    out: *mut u8,
    ahead: Ahead,
) {
    // SAFETY: forwarded from the caller (`vnni()` checked the CPU for the VNNI packers).
    unsafe {
        match (kind, vnni()) {
            // IQ4_NL blocks have Q4_0's bytes (f16 scale, 16 bytes of nibbles).
            (Kind::Q4_0Chain | Kind::IQ4NLChain, true) => pack_q4_0(nb, rows, out, ahead),
            (Kind::IQ4XSLanes | Kind::IQ4XSTiled, true) => {
                self::iq4::pack_iq4_xs_vnni(nb, rows, out, ahead)
            }
            (Kind::Q8_0Lanes, true) => pack_q8_0(nb, rows, out, ahead),
            (Kind::MXFP4Chain, true) => self::fp4::pack_mxfp4_vnni(nb, rows, out, ahead),
            (Kind::NVFP4Lanes, true) => self::fp4::pack_nvfp4_vnni(nb, rows, out, ahead),
            (k, true) if k.is_grid() => self::grid_vnni::pack_grid_vnni(k, nb, rows, out, ahead),
            _ => pack_portable(kind, nb, rows, out),
        }
    }
}

/// Whether packed Q8_0 codes are stored as `x + 128` (for the VNNI kernels' unsigned
/// operand) rather than as `x` (for the AVX2 kernel's sign trick): the layout follows the
/// build this CPU runs ([`build`]), so that neither kernel converts codes per use.
pub(crate) fn flips_q8_0() -> bool {
    build() != Build::Avx2
}

/// Whether this CPU runs the AVX-512 VNNI builds (else the AVX2 ones, `panel::avx2`, or
/// their AVX-VNNI builds: [`build`]).
#[inline]
pub(super) fn vnni() -> bool {
    crate::cpu::features().runs(crate::cpu::Isa::Avx512Vnni)
}

/// A build of the panel kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Build {
    /// AVX2 (`panel::avx2` and the other `*_avx2` modules).
    Avx2,
    /// AVX2 with AVX-VNNI: `panel::avx2`'s `*_vnni` builds where a kind has one, the AVX2
    /// kernels for the others.
    AvxVnni,
    /// AVX-512 VNNI.
    Avx512Vnni,
}

/// The panel build this CPU runs: AVX-512 VNNI where it has it; AVX-VNNI where the CPU's
/// best level is `Isa::Avx2Vnni` (no AVX-512: the AVX-VNNI builds are chosen by `==`, never
/// on an AVX-512 CPU without VNNI, see `cpu`); else AVX2 (before
/// `dispatch::force_scalar` and the other switches, which the caller applies).
#[inline]
pub(crate) fn build() -> Build {
    let f = crate::cpu::features();
    if vnni() {
        Build::Avx512Vnni
    } else if !f.avx512() && f.runs(crate::cpu::Isa::Avx2Vnni) {
        Build::AvxVnni
    } else {
        Build::Avx2
    }
}

/// Whether this CPU runs a panel kernel: AVX-512 VNNI, or AVX2 with FMA and F16C (before
/// [`crate::quants::dispatch::force_scalar`] and the other switches, which the caller applies).
pub(crate) fn available() -> bool {
    vnni() || crate::cpu::features().runs(crate::cpu::Isa::Avx2)
}

/// [`pack`] in portable code (the layout of the module docs, byte by byte): for CPUs
/// without AVX-512, where packing happens once, when a model is loaded.
///
/// # Safety
/// `nb` whole blocks of `kind`'s type readable at every `rows[r]`; `kind.panel_bytes(nb)`
/// bytes writable at `out`, not overlapping the rows.
unsafe fn pack_portable(kind: Kind, nb: usize, rows: &[*const u8; ROWS], out: *mut u8) {
    let bytes = kind.src_block_bytes();
    // SAFETY: the caller's guarantees, as slices.
    let (src, dst) = unsafe {
        (
            rows.map(|r| std::slice::from_raw_parts(r, nb * bytes)),
            std::slice::from_raw_parts_mut(out, kind.panel_bytes(nb)),
        )
    };
    match kind.layout() {
        Kind::Q6KLanes => return pack_q6_k(nb, &src, dst),
        Kind::Q3KLanes => return self::q3k::pack_q3_k(nb, &src, dst),
        Kind::Q4KGemv => return self::repacked::pack_q4_k(nb, &src, dst),
        Kind::Q2KGemv => return self::repacked::pack_q2_k(nb, &src, dst),
        Kind::Q5KLanes => return self::q5k::pack_q5_k(nb, &src, dst),
        Kind::IQ4XSLanes => return self::iq4::pack_iq4_xs(nb, &src, dst),
        Kind::MXFP4Chain => return self::fp4::pack_mxfp4(nb, &src, dst),
        Kind::NVFP4Lanes => return self::fp4::pack_nvfp4(nb, &src, dst),
        k if k.is_grid() => return self::grid_vnni::pack_grid_portable(k, nb, &src, dst),
        _ => {}
    }
    // File layout: f16 d, then f16 m (Q4_1, Q5_1), then the u32 fifth bits (Q5_0, Q5_1),
    // then the codes.
    let (m_at, h_at, q_at) = match kind {
        Kind::Q4_0Chain | Kind::Q8_0Lanes | Kind::IQ4NLChain => (None, None, 2),
        Kind::Q4_1Lanes => (Some(2), None, 4),
        Kind::Q5_0Lanes => (None, Some(2), 6),
        Kind::Q5_1Lanes => (Some(2), Some(4), 8),
        _ => unreachable!("the k-quants, IQ4_XS and the FP4 types have their own packers above"),
    };
    let flip = if kind == Kind::Q8_0Lanes && flips_q8_0() {
        0x80
    } else {
        0
    };
    for i in 0..nb {
        let at = kind.block_at(i);
        for (r, row) in src.iter().enumerate() {
            let blk = &row[i * bytes..(i + 1) * bytes];
            if kind == Kind::Q8_0Lanes {
                let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                dst[at.d + 4 * r..at.d + 4 * r + 4].copy_from_slice(&d.to_le_bytes());
            } else {
                dst[at.d + 2 * r..at.d + 2 * r + 2].copy_from_slice(&blk[..2]);
            }
            if let Some(m) = m_at {
                dst[at.m + 2 * r..at.m + 2 * r + 2].copy_from_slice(&blk[m..m + 2]);
            }
            if let Some(h) = h_at {
                let qh = u32::from_le_bytes([blk[h], blk[h + 1], blk[h + 2], blk[h + 3]]);
                for t in 0..4 {
                    dst[at.h + 4 * r + t] =
                        (0..8).fold(0u8, |b, g| b | (((qh >> (4 * g + t)) & 1) as u8) << g);
                }
            }
            for (g, q) in blk[q_at..].chunks_exact(4).enumerate() {
                let v = at.v + 64 * g + 4 * r;
                for (o, &b) in dst[v..v + 4].iter_mut().zip(q) {
                    *o = b ^ flip;
                }
            }
        }
    }
}

/// Where `ql` vector `q` (0..32; lane `r` = bytes `4q..4q + 4` of row `r`'s `ql`) of a packed
/// Q6_K super-block lies, in bytes from its codes ([`BlockAt::v`]). The lanes kernels take
/// lane `l` of the 32-value groups at a time (`q = 16n + 8m' + l`, with `qh` vector
/// `8n + l` holding the top bits of groups `4n + m'` and `4n + m' + 2`): the codes lie in
/// that order, for lane `l` `qh_l`, `ql_l`, `ql_8+l`, `qh_8+l`, `ql_16+l`, `ql_24+l`, so that
/// a pass through a super-block reads it front to back (which the hardware prefetchers
/// follow, where a jump between six streams per lane stalled on memory).
#[inline(always)]
pub(crate) const fn q6_k_ql(q: usize) -> usize {
    let (n, m2, l) = (q / 16, q / 8 % 2, q % 8);
    64 * (6 * l + 3 * n + 1 + m2)
}

/// Where `qh` vector `h` (0..16; lane `r` = bytes `4h..4h + 4` of row `r`'s `qh`) of a packed
/// Q6_K super-block lies, in bytes from its codes ([`BlockAt::v`]; see [`q6_k_ql`]).
#[inline(always)]
pub(crate) const fn q6_k_qh(h: usize) -> usize {
    let (n, l) = (h / 8, h % 8);
    64 * (6 * l + 3 * n)
}

/// [`pack_portable`] for Q6_K (file layout: `ql[128]`, `qh[64]`, `scales[16]`, f16 `d`):
/// `ql` and `qh` transposed by 4-byte quads like the other types' codes, the scales
/// scale-major, the sixteen `d` together ([`Kind::block_at`]).
fn pack_q6_k(nb: usize, src: &[&[u8]; ROWS], dst: &mut [u8]) {
    let bytes = Kind::Q6KLanes.src_block_bytes();
    for i in 0..nb {
        let at = Kind::Q6KLanes.block_at(i);
        for (r, row) in src.iter().enumerate() {
            let blk = &row[i * bytes..(i + 1) * bytes];
            for (q, quad) in blk[..192].chunks_exact(4).enumerate() {
                // ql's 32 quads, then qh's 16, each one vector of 64 bytes.
                let v = at.v + if q < 32 { q6_k_ql(q) } else { q6_k_qh(q - 32) } + 4 * r;
                dst[v..v + 4].copy_from_slice(quad);
            }
            for j in 0..16 {
                dst[at.s + 16 * j + r] = blk[192 + j];
            }
            dst[at.d + 2 * r..at.d + 2 * r + 2].copy_from_slice(&blk[208..210]);
        }
    }
}

/// `C` columns against a Q4_0 panel in the chain order.
///
/// # Safety
/// As [`gemm`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_0_chain<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: packed block i < nb of the panel, Q8_0 block i of each column and its side
    // data are readable (caller); unaligned loads.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let high = _mm512_set1_epi8(0xF0u8 as i8);
        let mut acc = [_mm512_setzero_ps(); C];
        for i in 0..nb {
            let (sc, vec) = q4_0_at(i);
            if i % 2 == 0 {
                // The pair's bytes, `STREAM_AHEAD` further on.
                stream_ahead(panel, sc, Q4_0_PAIR);
            }
            // Exact: every f16 is an f32.
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(panel.add(sc).cast()));
            let p = panel.add(vec);
            let mut lo = [_mm512_setzero_si512(); 4];
            let mut hi = [_mm512_setzero_si512(); 4];
            for g in 0..4 {
                let v = _mm512_loadu_si512(p.add(64 * g).cast());
                lo[g] = _mm512_and_si512(v, low);
                // The high nibbles in place: 16 times their value.
                hi[g] = _mm512_and_si512(v, high);
            }
            for c in 0..C {
                let yq = y[c].add(i * Q8_0_BYTES + 2);
                let ax = aux[c].add(i * AUX_BYTES);
                // Integer chains (values 0..16 and 16..32, the latter scaled by 16), added
                // exactly: every product of the high chain is a multiple of 16, so is their
                // sum (|sum| < 2^20), and the shift divides it exactly.
                // One column (decoding): four chains, to shorten the dependency chains;
                // several: two, so that the accumulators of eight columns stay in registers.
                let mut s0 = _mm512_set1_epi32(read_u32(ax.add(4)) as i32);
                let mut s1 = _mm512_setzero_si512();
                if C == 1 {
                    let mut s2 = _mm512_setzero_si512();
                    let mut s3 = _mm512_setzero_si512();
                    for g in 0..2 {
                        let y0 = _mm512_set1_epi32(read_u32(yq.add(4 * g)) as i32);
                        let y1 = _mm512_set1_epi32(read_u32(yq.add(16 + 4 * g)) as i32);
                        let y2 = _mm512_set1_epi32(read_u32(yq.add(8 + 4 * g)) as i32);
                        let y3 = _mm512_set1_epi32(read_u32(yq.add(24 + 4 * g)) as i32);
                        s0 = _mm512_dpbusd_epi32(s0, lo[g], y0);
                        s1 = _mm512_dpbusd_epi32(s1, hi[g], y1);
                        s2 = _mm512_dpbusd_epi32(s2, lo[g + 2], y2);
                        s3 = _mm512_dpbusd_epi32(s3, hi[g + 2], y3);
                    }
                    s0 = _mm512_add_epi32(s0, s2);
                    s1 = _mm512_add_epi32(s1, s3);
                } else {
                    for g in 0..4 {
                        let y0 = _mm512_set1_epi32(read_u32(yq.add(4 * g)) as i32);
                        let y1 = _mm512_set1_epi32(read_u32(yq.add(16 + 4 * g)) as i32);
                        s0 = _mm512_dpbusd_epi32(s0, lo[g], y0);
                        s1 = _mm512_dpbusd_epi32(s1, hi[g], y1);
                    }
                }
                let hs = _mm512_srai_epi32::<4>(s1);
                let s = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, hs));
                let d = _mm512_mul_ps(dx, _mm512_set1_ps(read_f32(ax)));
                acc[c] = _mm512_fmadd_ps(s, d, acc[c]);
            }
        }
        acc
    }
}

/// `C` columns against a Q8_0 panel in the lane order.
///
/// # Safety
/// As [`gemm`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q8_0_lanes<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: as `q4_0_chain`.
    unsafe {
        let bb = Kind::Q8_0Lanes.panel_bytes(1);
        let mut acc = [[_mm512_setzero_ps(); 8]; C];
        for i in 0..nb {
            stream_ahead(panel, i * bb, bb);
            let p = panel.add(i * bb);
            let dx = _mm512_loadu_ps(p.cast());
            for (c, acc_c) in acc.iter_mut().enumerate() {
                let yq = y[c].add(i * Q8_0_BYTES + 2);
                let ax = aux[c].add(i * AUX_BYTES);
                let d = _mm512_mul_ps(dx, _mm512_set1_ps(read_f32(ax)));
                for (g, lane) in acc_c.iter_mut().enumerate() {
                    let seed = _mm512_set1_epi32(read_u32(ax.add(8 + 4 * g)) as i32);
                    let w = _mm512_loadu_si512(p.add(64 + 64 * g).cast());
                    let yv = _mm512_set1_epi32(read_u32(yq.add(4 * g)) as i32);
                    let s = _mm512_dpbusd_epi32(seed, w, yv);
                    *lane = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, *lane);
                }
            }
        }
        acc.map(|a| {
            _mm512_add_ps(
                _mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])),
            )
        })
    }
}

/// Dot products of a packed panel (`nb` blocks, sixteen rows) with `C` activation rows
/// `y[c]` (of [`Kind::activation`]'s type) and their side data `aux[c]` ([`activation_aux`]
/// for the same `kind`): `out[c][r]` is row `r` · column `c`, with the bits of ggml's order
/// for `kind` (see the module docs).
///
/// `stream` says whether this is the first pass over the panel, where the kernels stream it
/// ahead from memory; on later passes (the next columns of a prompt) the AVX2 Q8_0 kernels
/// skip their prefetches, which only cost there (the other kernels stream regardless).
///
/// # Safety
/// [`available`] holds; a packed panel of `nb` blocks readable at `panel`, `nb` activation
/// blocks at every `y[c]` and `nb · kind.aux_bytes()` bytes at every `aux[c]`.
pub(crate) unsafe fn gemm<const C: usize>(
    kind: Kind,
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
    stream: bool,
) {
    // SAFETY: forwarded from the caller (`build()` is the build this CPU runs).
    unsafe { gemm_in(build(), kind, nb, panel, y, aux, out, stream) }
}

/// [`gemm`] by the build `build` (the AVX-512 VNNI build, which every kind has, the AVX-VNNI
/// builds where `kind` has one, else the AVX2 build).
///
/// # Safety
/// As [`gemm`], on a CPU that runs `build`; for Q8_0 the panel was packed with the codes
/// flipped for the VNNI builds and not for the AVX2 one ([`flips_q8_0`]).
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_in<const C: usize>(
    build: Build,
    kind: Kind,
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
    stream: bool,
) {
    // SAFETY: forwarded from the caller; the stores write `out`'s arrays of 16 f32.
    unsafe {
        if build != Build::Avx512Vnni {
            use self::avx2 as k;
            use self::repacked_avx2 as r;
            let vex = build == Build::AvxVnni;
            match kind {
                Kind::Q4_0Chain if vex => k::q4_0_chain_vnni::<C>(nb, panel, y, aux, out),
                Kind::Q4_0Chain => k::q4_0_chain::<C>(nb, panel, y, aux, out),
                Kind::Q8_0Lanes if vex => k::q8_0_lanes_vnni::<C>(nb, panel, y, aux, out, stream),
                Kind::Q8_0Lanes => k::q8_0_lanes::<C>(nb, panel, y, aux, out, stream),
                Kind::Q4_1Lanes => k::lanes::<k::Q4_1, C>(nb, panel, y, aux, out),
                // Q4_1's and Q5_1's AVX-VNNI builds measured no faster than their AVX2 ones,
                // Q5_0's only with several columns (`docs/kernel-bench-notes.md`).
                Kind::Q5_0Lanes if vex && C > 1 => {
                    k::lanes_vnni::<k::Q5_0, C>(nb, panel, y, aux, out)
                }
                Kind::Q5_0Lanes => k::lanes::<k::Q5_0, C>(nb, panel, y, aux, out),
                Kind::Q5_1Lanes => k::lanes::<k::Q5_1, C>(nb, panel, y, aux, out),
                Kind::Q6KLanes => k::q6_k_lanes::<C>(nb, panel, y, out),
                Kind::Q3KLanes => {
                    for (o, &yc) in out.iter_mut().zip(y) {
                        self::q3k::q3_k_avx2(nb, panel, yc, o);
                    }
                }
                Kind::IQ4NLChain => self::iq4_avx2::iq4_nl_chain::<C>(nb, panel, y, aux, out),
                Kind::IQ4XSLanes => self::iq4_avx2::iq4_xs_lanes::<C>(nb, panel, y, out),
                Kind::Q6KTiled | Kind::Q3KTiled | Kind::IQ4XSTiled => {
                    unreachable!("the tiled twins are only split off where VNNI runs (Kind::split)")
                }
                Kind::IQ2XXSTiled
                | Kind::IQ2XSTiled
                | Kind::IQ2STiled
                | Kind::IQ3XXSTiled
                | Kind::IQ3STiled
                | Kind::IQ1STiled
                | Kind::IQ1MTiled => {
                    unreachable!("the grid kinds are only planned where VNNI runs (takes_columns)")
                }
                // (Q4_K's AVX-VNNI build, like Q5_0's, only with several columns.)
                Kind::Q4KGemv if vex && C > 1 => r::q4_k_vnni::<C, false>(nb, panel, y, aux, out),
                Kind::Q4KGemv => r::q4_k::<C, false>(nb, panel, y, aux, out),
                Kind::Q4KGemm if vex && C > 1 => r::q4_k_vnni::<C, true>(nb, panel, y, aux, out),
                Kind::Q4KGemm => r::q4_k::<C, true>(nb, panel, y, aux, out),
                Kind::Q2KGemv => r::q2_k::<C, false>(nb, panel, y, out),
                Kind::Q2KGemm => r::q2_k::<C, true>(nb, panel, y, out),
                Kind::Q5KLanes => self::q5k_avx2::q5_k_lanes::<C>(nb, panel, y, aux, out),
                Kind::MXFP4Chain => self::fp4::mxfp4_chain_avx2::<C>(nb, panel, y, aux, out),
                Kind::NVFP4Lanes => self::fp4::nvfp4_lanes_avx2::<C>(nb, panel, y, aux, out),
            }
            return;
        }
        use self::avx2 as k;
        use self::iq4;
        use self::lanes_vnni as l;
        use self::repacked as v;
        use self::tiled_vnni as t;
        let acc = match kind {
            Kind::Q4_0Chain => q4_0_chain::<C>(nb, panel, y, aux),
            Kind::Q8_0Lanes => q8_0_lanes::<C>(nb, panel, y, aux),
            Kind::Q4_1Lanes => l::lanes::<k::Q4_1, C>(nb, panel, y, aux),
            Kind::Q5_0Lanes => l::lanes::<k::Q5_0, C>(nb, panel, y, aux),
            Kind::Q5_1Lanes => l::lanes::<k::Q5_1, C>(nb, panel, y, aux),
            Kind::Q3KLanes => y.map(|yc| self::q3k::q3_k_vnni(nb, panel, yc)),
            Kind::Q4KGemv => v::q4_k::<C, false>(nb, panel, y, aux),
            Kind::Q4KGemm => v::q4_k::<C, true>(nb, panel, y, aux),
            Kind::Q2KGemv => v::q2_k::<C, false>(nb, panel, y),
            Kind::Q2KGemm => v::q2_k::<C, true>(nb, panel, y),
            Kind::Q6KTiled => t::tiled::<t::Q6K, C>(nb, panel, y),
            Kind::Q3KTiled => t::tiled::<t::Q3K, C>(nb, panel, y),
            Kind::IQ4NLChain => iq4::iq4_nl_chain::<C>(nb, panel, y, aux),
            Kind::IQ4XSLanes => iq4::iq4_xs_lanes::<C>(nb, panel, y),
            Kind::IQ4XSTiled => iq4::iq4_xs_tiled::<C>(nb, panel, y),
            Kind::Q6KLanes => self::q6k_vnni::q6_k_lanes::<C>(nb, panel, y),
            Kind::Q5KLanes => self::q5k::q5_k_lanes::<C>(nb, panel, y, aux),
            Kind::MXFP4Chain => self::fp4::mxfp4_chain_vnni::<C>(nb, panel, y, aux),
            Kind::NVFP4Lanes => self::fp4::nvfp4_lanes_vnni::<C>(nb, panel, y, aux),
            Kind::IQ2XXSTiled
            | Kind::IQ2XSTiled
            | Kind::IQ2STiled
            | Kind::IQ3XXSTiled
            | Kind::IQ3STiled
            | Kind::IQ1STiled
            | Kind::IQ1MTiled => self::grid_vnni::grid_tiled_vnni::<C>(kind, nb, panel, y, aux),
        };
        for (o, a) in out.iter_mut().zip(acc) {
            store(o, a);
        }
    }
}

/// Stores 16 lanes.
///
/// # Safety
/// AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn store(o: &mut [f32; ROWS], a: __m512) {
    // SAFETY: `o` holds 16 f32; unaligned store.
    unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::ggml_arith::{
        dot_q4_0_chain, dot_q4_1_lanes, dot_q5_0_lanes, dot_q5_1_lanes, dot_q8_0_lanes,
        quantize_row_q8_0_x86, quantize_row_q8_1_x86,
    };
    use crate::quants::k_quants::repacked;

    /// Every kind.
    const KINDS: [Kind; 19] = [
        Kind::Q4_0Chain,
        Kind::Q8_0Lanes,
        Kind::Q4_1Lanes,
        Kind::Q5_0Lanes,
        Kind::Q5_1Lanes,
        Kind::Q6KLanes,
        Kind::Q6KTiled,
        Kind::Q3KLanes,
        Kind::Q3KTiled,
        Kind::Q4KGemv,
        Kind::Q4KGemm,
        Kind::Q2KGemv,
        Kind::Q2KGemm,
        Kind::IQ4NLChain,
        Kind::IQ4XSLanes,
        Kind::IQ4XSTiled,
        Kind::Q5KLanes,
        Kind::MXFP4Chain,
        Kind::NVFP4Lanes,
    ];

    /// Whether a panel build runs here (the tests then check the one this CPU picks).
    fn cpu_ok() -> bool {
        available()
    }

    use crate::kernels::test_rng as rng;

    /// `rows` weight rows of `nb` blocks with random codes (all 256 byte values for Q8_0,
    /// −128 included) and random f16 scales.
    fn weights(kind: Kind, rows: usize, nb: usize, seed: &mut u64) -> Vec<u8> {
        weights_in(kind, rows, nb, seed, false)
    }

    /// Bytes of extreme blocks: all bits clear or set (the largest and smallest codes and
    /// scales), half-set bytes and their opposites.
    const EXTREME_BYTES: [u8; 6] = [0x00, 0xFF, 0x80, 0x7F, 0x0F, 0xF0];

    /// [`weights`], with bytes from [`EXTREME_BYTES`] only where `extreme`.
    fn weights_in(kind: Kind, rows: usize, nb: usize, seed: &mut u64, extreme: bool) -> Vec<u8> {
        let bytes = kind.src_block_bytes();
        let mut w = vec![0u8; rows * nb * bytes];
        for blk in w.chunks_exact_mut(bytes) {
            for b in blk.iter_mut() {
                *b = if extreme {
                    EXTREME_BYTES[rng(seed) as usize % EXTREME_BYTES.len()]
                } else {
                    rng(seed) as u8
                };
            }
            // Q6_K keeps its f16 scale last, Q2_K its scale and minimum; Q4_K has both first.
            let at: &[usize] = match kind.layout() {
                Kind::Q6KLanes => &[208],
                Kind::Q3KLanes => &[108],
                Kind::Q4KGemv | Kind::Q5KLanes => &[0, 2],
                Kind::Q2KGemv => &[80, 82],
                _ => &[0],
            };
            if kind == Kind::MXFP4Chain {
                // An E8M0 exponent byte: moderate scales (the products stay finite), and
                // the two subnormal ones now and then.
                blk[0] = match rng(seed) % 8 {
                    0 => rng(seed) as u8 % 3,
                    _ => 100 + (rng(seed) % 50) as u8,
                };
                continue;
            }
            for &at in at {
                let d = (rng(seed) % 2000) as f32 / 1000.0 - 1.0;
                blk[at..at + 2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
            }
        }
        w
    }

    fn run<const C: usize>(kind: Kind, nb: usize, seed: &mut u64) {
        run_in::<C>(kind, nb, seed, false);
    }

    /// [`run`]; where `extreme`, the weights have extreme bytes ([`weights_in`]) and the odd
    /// columns codes −128 and 127 only (raw Q8_K, Q8_1 and Q8_0 blocks; the AVX2 Q8_0 build,
    /// whose sign trick needs the quantizer's |y| ≤ 127, then sits out). Returns the builds
    /// it checked.
    fn run_in<const C: usize>(kind: Kind, nb: usize, seed: &mut u64, extreme: bool) -> Vec<Build> {
        let k = nb * kind.block_values();
        let rs = nb * kind.src_block_bytes();
        let w = weights_in(kind, ROWS, nb, seed, extreme);
        let rows: [*const u8; ROWS] = std::array::from_fn(|r| w[r * rs..].as_ptr());
        let mut panel = vec![0u8; kind.panel_bytes(nb)];
        let cols: Vec<Vec<u8>> = (0..C)
            .map(|c| {
                let x: Vec<f32> = (0..k)
                    .map(|_| (rng(seed) % 20001) as f32 / 1000.0 - 10.0)
                    .collect();
                let mut q = vec![0u8; kind.activation().row_size(k)];
                match kind.activation() {
                    crate::dtype::DType::Q8_1 if !(extreme && c % 2 == 1) => {
                        quantize_row_q8_1_x86(&x, &mut q)
                    }
                    // Odd columns: random codes (−128 included) with a finite scale and their
                    // block sums (which the k-quant kernels rely on).
                    // (IQ4_XS: −127 at least, as Q8_K's quantizer writes; ggml's sign trick
                    // wraps −128 where the portable code does not.)
                    crate::dtype::DType::Q8K if c % 2 == 1 => {
                        let floor = if kind.layout() == Kind::IQ4XSLanes {
                            -127
                        } else {
                            -128
                        };
                        q.iter_mut().for_each(|b| {
                            let v = if extreme {
                                [-128i8, 127][rng(seed) as usize % 2]
                            } else {
                                rng(seed) as u8 as i8
                            };
                            *b = v.max(floor) as u8
                        });
                        for blk in q.chunks_exact_mut(292) {
                            let d = (rng(seed) % 2000) as f32 / 1e5 - 0.01;
                            blk[..4].copy_from_slice(&d.to_le_bytes());
                            for j in 0..16 {
                                let s: i16 = blk[4 + 16 * j..20 + 16 * j]
                                    .iter()
                                    .map(|&b| b as i8 as i16)
                                    .sum();
                                blk[260 + 2 * j..262 + 2 * j].copy_from_slice(&s.to_le_bytes());
                            }
                        }
                    }
                    crate::dtype::DType::Q8K => {
                        crate::quants::k_quants::q8_k::quantize_row_q8_k_ref(&x, &mut q)
                            .expect("whole Q8_K blocks")
                    }
                    // Extreme odd Q8_0 / Q8_1 columns: codes −128 and 127, finite scales
                    // (and sums: any finite value is a valid operand).
                    t if extreme && c % 2 == 1 => {
                        let (bytes, hdr) = if t == crate::dtype::DType::Q8_1 {
                            (36, 4)
                        } else {
                            (Q8_0_BYTES, 2)
                        };
                        for blk in q.chunks_exact_mut(bytes) {
                            for b in blk[hdr..].iter_mut() {
                                *b = [0x80u8, 0x7F][rng(seed) as usize % 2];
                            }
                            for at in (0..hdr).step_by(2) {
                                let d = (rng(seed) % 2000) as f32 / 1000.0 - 1.0;
                                blk[at..at + 2]
                                    .copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
                            }
                        }
                    }
                    crate::dtype::DType::Q8_1 => unreachable!("the first arm's columns"),
                    _ => quantize_row_q8_0_x86(&x, &mut q),
                }
                q
            })
            .collect();
        let auxs: Vec<Vec<u8>> = cols
            .iter()
            .map(|q| {
                let mut a = vec![0u8; nb * kind.aux_bytes()];
                activation_aux(kind, q, &mut a);
                a
            })
            .collect();
        let y: [*const u8; C] = std::array::from_fn(|c| cols[c].as_ptr());
        let aux: [*const u8; C] = std::array::from_fn(|c| auxs[c].as_ptr());
        // SAFETY: the CPU was checked; the buffers hold nb blocks each.
        unsafe { pack(kind, nb, &rows, panel.as_mut_ptr(), Ahead::NONE) };
        // Every build of the kind this CPU runs (Q8_0's layout depends on the build: the
        // VNNI builds read flipped codes, the AVX2 one signed codes).
        let f = crate::cpu::features();
        let mut builds = Vec::new();
        if vnni() && kind.has_vnni_build() {
            builds.push(Build::Avx512Vnni);
        }
        if f.runs(crate::cpu::Isa::Avx2Vnni) && kind.has_avx2_build() {
            builds.push(Build::AvxVnni);
        }
        let avx2_reads = kind != Kind::Q8_0Lanes || !flips_q8_0();
        if f.avx2_fma_f16c() && kind.has_avx2_build() && avx2_reads {
            builds.push(Build::Avx2);
        }
        if kind == Kind::Q8_0Lanes && !flips_q8_0() {
            builds.retain(|&b| b == Build::Avx2);
        }
        if kind == Kind::Q8_0Lanes && extreme && C > 1 {
            builds.retain(|&b| b != Build::Avx2);
        }
        for &build in &builds {
            let mut out = [[0f32; ROWS]; C];
            // SAFETY: the CPU runs `build` (checked above); the buffers hold nb blocks each.
            unsafe { gemm_in::<C>(build, kind, nb, panel.as_ptr(), &y, &aux, &mut out, true) };
            for c in 0..C {
                for r in 0..ROWS {
                    let row = &w[r * rs..(r + 1) * rs];
                    let want = match kind {
                        Kind::Q4_0Chain => dot_q4_0_chain(k, row, &cols[c]),
                        Kind::Q8_0Lanes => dot_q8_0_lanes(k, row, &cols[c]),
                        Kind::Q4_1Lanes => dot_q4_1_lanes(k, row, &cols[c]),
                        Kind::Q5_0Lanes => dot_q5_0_lanes(k, row, &cols[c]),
                        Kind::Q5_1Lanes => dot_q5_1_lanes(k, row, &cols[c]),
                        Kind::Q6KLanes => {
                            crate::quants::k_quants::tiled::dot_q6_k_vec(k, row, &cols[c])
                        }
                        Kind::Q3KLanes => {
                            crate::quants::k_quants::tiled::dot_q3_k_vec(k, row, &cols[c])
                        }
                        Kind::Q6KTiled => {
                            use crate::quants::k_quants::tiled::dot_tiled;
                            dot_tiled::<crate::quants::BlockQ6K>(k, row, &cols[c])
                        }
                        Kind::Q3KTiled => {
                            use crate::quants::k_quants::tiled::dot_tiled;
                            dot_tiled::<crate::quants::BlockQ3K>(k, row, &cols[c])
                        }
                        Kind::Q4KGemv => repacked::q4_k_gemv(k, row, &cols[c]),
                        Kind::Q5KLanes => {
                            crate::quants::k_quants::tiled::dot_q5_k_vec(k, row, &cols[c])
                        }
                        Kind::Q4KGemm => repacked::q4_k_gemm(k, row, &cols[c]),
                        Kind::Q2KGemv => repacked::q2_k_gemv(k, row, &cols[c]),
                        Kind::Q2KGemm => repacked::q2_k_gemm(k, row, &cols[c]),
                        Kind::IQ4NLChain => {
                            crate::kernels::ggml_arith::dot_iq4_nl_chain(k, row, &cols[c])
                        }
                        Kind::IQ4XSLanes => {
                            crate::kernels::ggml_arith::dot_iq4_xs_lanes(k, row, &cols[c])
                        }
                        Kind::IQ4XSTiled => {
                            use crate::quants::k_quants::tiled::dot_tiled;
                            dot_tiled::<crate::quants::BlockIQ4XS>(k, row, &cols[c])
                        }
                        Kind::MXFP4Chain => crate::quants::mxfp4::dot_mxfp4_chain(k, row, &cols[c]),
                        Kind::NVFP4Lanes => crate::quants::nvfp4::dot_nvfp4_x86(k, row, &cols[c]),
                        k => unreachable!("{k:?}: tested in panel::grid_vnni"),
                    };
                    assert_eq!(
                        out[c][r].to_bits(),
                        want.to_bits(),
                        "{kind:?} {build:?} nb={nb} C={C} row {r} col {c}: {} vs {want}",
                        out[c][r]
                    );
                }
            }
        }
        builds
    }

    /// The AVX-VNNI panel builds (Q4_0 chain, Q8_0 and Q5_0 lanes, Q4_K's repacked GEMV and
    /// GEMM; the Q4_1, Q5_1 and Q6_K lanes, which run their AVX2 builds there, beside them) for column counts 1 to 8, on random and on extreme
    /// blocks (the largest and smallest codes and scales; activations −128 and 127):
    /// every element has the bits of the portable ggml-order kernel, as the AVX2 and AVX-512
    /// VNNI builds do. Fails if the AVX-VNNI build did not run where the CPU has it.
    #[test]
    fn avx_vnni_panels_are_bit_identical() {
        if !cpu_ok() {
            return;
        }
        let runs = crate::cpu::features().runs(crate::cpu::Isa::Avx2Vnni);
        let mut seed = 31u64;
        for extreme in [false, true] {
            for kind in [
                Kind::Q4_0Chain,
                Kind::Q8_0Lanes,
                Kind::Q4_1Lanes,
                Kind::Q5_0Lanes,
                Kind::Q5_1Lanes,
                Kind::Q6KLanes,
                Kind::Q4KGemv,
                Kind::Q4KGemm,
            ] {
                for nb in [1usize, 2, 3, 9] {
                    let mut ran = Vec::new();
                    ran.extend(run_in::<1>(kind, nb, &mut seed, extreme));
                    ran.extend(run_in::<2>(kind, nb, &mut seed, extreme));
                    ran.extend(run_in::<3>(kind, nb, &mut seed, extreme));
                    ran.extend(run_in::<4>(kind, nb, &mut seed, extreme));
                    ran.extend(run_in::<5>(kind, nb, &mut seed, extreme));
                    if !matches!(kind, Kind::Q6KLanes) {
                        ran.extend(run_in::<8>(kind, nb, &mut seed, extreme));
                    }
                    // (Q8_0's AVX-VNNI build reads the flipped codes only.)
                    let want = runs && (kind != Kind::Q8_0Lanes || flips_q8_0());
                    assert_eq!(ran.contains(&Build::AvxVnni), want, "{kind:?}: {ran:?}");
                }
            }
        }
    }

    /// Every element of a panel product has the bits of ggml_arith's one-element kernel in
    /// the same order (itself checked against the portable ggml-order code).
    #[test]
    fn panel_products_match_ggml_order_kernels() {
        if !cpu_ok() {
            return;
        }
        let mut seed = 11u64;
        for kind in KINDS {
            for nb in [1usize, 2, 3, 28, 152] {
                run::<1>(kind, nb, &mut seed);
                run::<2>(kind, nb, &mut seed);
                run::<3>(kind, nb, &mut seed);
                run::<8>(kind, nb, &mut seed);
            }
        }
    }

    /// The Q6_K, Q5_K and Q3_K lanes kernels (every build this CPU runs) for every column
    /// count they take (1..8; the products with more columns take another order), on random
    /// and on extreme blocks (Q6_K codes 0 and 63, scales −128 and 127; Q5_K codes 0 and 31,
    /// scales and minimums 0 and 63; Q3_K codes −4 and 3, scales −32 and 31; activations −128
    /// and 127).
    #[test]
    fn k_lanes_every_column_count_and_extreme_blocks() {
        if !cpu_ok() {
            return;
        }
        let mut seed = 17u64;
        for (extreme, kind) in [false, true].into_iter().flat_map(|e| {
            [
                (e, Kind::Q6KLanes),
                (e, Kind::Q5KLanes),
                (e, Kind::Q3KLanes),
            ]
        }) {
            for nb in [1usize, 2, 4, 5, 19] {
                run_in::<1>(kind, nb, &mut seed, extreme);
                run_in::<2>(kind, nb, &mut seed, extreme);
                run_in::<3>(kind, nb, &mut seed, extreme);
                run_in::<4>(kind, nb, &mut seed, extreme);
                run_in::<5>(kind, nb, &mut seed, extreme);
                run_in::<6>(kind, nb, &mut seed, extreme);
                run_in::<7>(kind, nb, &mut seed, extreme);
            }
        }
    }

    /// The packed vectors hold, in lane r, bytes 4g..4g+4 of row r's codes (Q8_0 flipped).
    #[test]
    fn packing_transposes_quads() {
        if !cpu_ok() {
            return;
        }
        let mut seed = 3u64;
        for kind in [Kind::Q4_0Chain, Kind::Q8_0Lanes, Kind::IQ4NLChain] {
            let nb = 5;
            let bytes = kind.src_block_bytes();
            let w = weights(kind, ROWS, nb, &mut seed);
            let rows: [*const u8; ROWS] = std::array::from_fn(|r| w[r * nb * bytes..].as_ptr());
            let mut panel = vec![0u8; kind.panel_bytes(nb)];
            // SAFETY: the CPU was checked; the buffers hold nb blocks each.
            unsafe { pack(kind, nb, &rows, panel.as_mut_ptr(), Ahead::NONE) };
            // The portable packer (the one CPUs without VNNI use) writes the same bytes.
            let mut portable = vec![0u8; kind.panel_bytes(nb)];
            // SAFETY: as above; the portable packer needs no CPU feature.
            unsafe { pack_portable(kind, nb, &rows, portable.as_mut_ptr()) };
            assert!(portable == panel, "{kind:?}: the portable packer differs");
            let groups = (bytes - 2) / 4;
            let flip = if kind == Kind::Q8_0Lanes && flips_q8_0() {
                0x80
            } else {
                0
            };
            for i in 0..nb {
                // Offsets of block i's scales and vectors, written out per layout.
                let (sc, vec) = match kind {
                    Kind::Q4_0Chain | Kind::IQ4NLChain => (
                        576 * (i / 2) + 32 * (i % 2),
                        576 * (i / 2) + 64 + 256 * (i % 2),
                    ),
                    Kind::Q8_0Lanes => (576 * i, 576 * i + 64),
                    _ => unreachable!("this test packs Q4_0, Q8_0 and IQ4_NL only"),
                };
                for r in 0..ROWS {
                    let src = &w[(r * nb + i) * bytes..];
                    let d = half::f16::from_le_bytes([src[0], src[1]]).to_f32();
                    let got = match kind {
                        Kind::Q4_0Chain | Kind::IQ4NLChain => {
                            half::f16::from_le_bytes([panel[sc + 2 * r], panel[sc + 2 * r + 1]])
                                .to_f32()
                        }
                        Kind::Q8_0Lanes => f32::from_le_bytes(
                            panel[sc + 4 * r..sc + 4 * r + 4].try_into().unwrap(),
                        ),
                        _ => unreachable!("this test packs Q4_0 and Q8_0 only"),
                    };
                    assert_eq!(got.to_bits(), d.to_bits());
                    for g in 0..groups {
                        for t in 0..4 {
                            assert_eq!(panel[vec + 64 * g + 4 * r + t], src[2 + 4 * g + t] ^ flip);
                        }
                    }
                }
            }
        }
    }

    /// The nibble types' packed blocks hold each row's scale, minimum, code quads and fifth
    /// bits where [`Kind::block_at`] says.
    #[test]
    fn packing_places_minimums_and_fifth_bits() {
        let mut seed = 5u64;
        for kind in [Kind::Q4_1Lanes, Kind::Q5_0Lanes, Kind::Q5_1Lanes] {
            let nb = 3;
            let bytes = kind.src_block_bytes();
            let w = weights(kind, ROWS, nb, &mut seed);
            let rows: [*const u8; ROWS] = std::array::from_fn(|r| w[r * nb * bytes..].as_ptr());
            let mut panel = vec![0u8; kind.panel_bytes(nb)];
            // SAFETY: the buffers hold nb blocks each; these kinds pack in portable code.
            unsafe { pack_portable(kind, nb, &rows, panel.as_mut_ptr()) };
            let (min, fifth) = (kind != Kind::Q5_0Lanes, kind != Kind::Q4_1Lanes);
            let q_at = 2 + 2 * min as usize + 4 * fifth as usize;
            for i in 0..nb {
                let at = kind.block_at(i);
                for r in 0..ROWS {
                    let src = &w[(r * nb + i) * bytes..(r * nb + i + 1) * bytes];
                    assert_eq!(&panel[at.d + 2 * r..at.d + 2 * r + 2], &src[..2]);
                    if min {
                        assert_eq!(&panel[at.m + 2 * r..at.m + 2 * r + 2], &src[2..4]);
                    }
                    for v in 0..32 {
                        let (g, t) = (v / 4, v % 4);
                        let byte = panel[at.v + 64 * (g % 4) + 4 * r + t];
                        let nib = if g < 4 { byte & 0x0F } else { byte >> 4 };
                        let q = src[q_at + v % 16];
                        assert_eq!(nib, if v < 16 { q & 0x0F } else { q >> 4 });
                        if fifth {
                            let hb = 2 + 2 * min as usize;
                            let qh = u32::from_le_bytes(src[hb..hb + 4].try_into().unwrap());
                            let packed = (panel[at.h + 4 * r + t] >> g) & 1;
                            assert_eq!(packed as u32, (qh >> v) & 1, "{kind:?} row {r} value {v}");
                        }
                    }
                }
            }
        }
    }
}
