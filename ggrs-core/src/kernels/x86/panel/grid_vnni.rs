//! Panel kernels (`panel`: sixteen weight rows, one per 32-bit lane) of the grid i-quants
//! (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) against eight Q8_K columns or more,
//! in the order of ggml's tiled matmul (`k_quants::tiled::dot_tiled` with
//! `quants::iq_codes`' terms, the oracle), AVX-512 VNNI only.
//!
//! A grid block costs far more to decode than to multiply (table lookups per eight values),
//! and the tiled panels of `tiled_avx2` decode each row's block once per sixteen columns:
//! thirty-two times per block for a 512-token prompt. Here a panel is *decoded* when it is
//! packed, once per node and batch (`matmul::panels`: chunks of whole panels against every
//! column), into plain bytes the products read with one `vpdpbusd` per four values of
//! sixteen rows. The decoded form is about two and a half times the file's bytes, so it is
//! never kept: [`Kind::panel_bytes`] is one panel in the chunk's scratch, and these kinds are
//! not `select::panel_kind`'s (which `PackedWeight` packs ahead, for every column count).
//!
//! # Layout
//!
//! One super-block of sixteen rows, [`BLOCK_BYTES`] (4416) bytes, in the order the kernel
//! reads it:
//!
//! ```text
//!   [ d: 16 × f32 ]          the rows' d·FACTOR (the tiled order's block scale, IQ1: d/8)
//!   [ ls: 16 × 16 bytes ]    multiplier j (16 values each) of row r at byte 16j + r
//!   [ v_0 ] … [ v_63 ]       lane r of v_q: the weights w + 64 of values 4q..4q + 4 of row r
//! ```
//!
//! The weights `w` are `iquants::tiled_block`'s (here from `iq_decode512`, 64 values at a
//! time): `±magnitude` (IQ2/IQ3, at most 62 in magnitude) or `8·grid ± 1` (IQ1, at most 9),
//! so `w + 64` is an unsigned byte (2..=126).
//! `ls` are the odd multipliers `2s + 1` of the sixteen 16-value groups (at most 31).
//!
//! # Arithmetic
//!
//! Per super-block, row and column the exact `s1 = Σ_j ls_j·Σ_{v in j} w_v·y_v`: per
//! multiplier group `j` (16 values, or 32 for the types whose two halves of a sub-block share
//! the multiplier: `Q = 8` quads) `vpdpbusd` of the weight bytes with the column's activation
//! quads (broadcast) sums `Σ (w + 64)·y` from the group's seed `−64·Σ y`, which INIT writes
//! after the column ([`activation_aux`]: one i32 per group), so the sum is `Σ w·y`, exact (at
//! most 32·126·128 in magnitude on the way); then `vpmulld` by `ls` and a 32-bit add.
//!
//! Then `r = d·f32(s1)` and `acc = fma(r, d_y, acc)`: `tiled_avx2::accumulate8`'s steps, so
//! every element has the oracle's bits (and `tiled_avx2`'s and `iquants512`'s panels').
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C), except
//! [`pack_grid_portable`]; the kernels' pointer contracts are those of [`super::gemm`] (Q8_K
//! rows and [`activation_aux`]'s side data), the packer's those of [`super::pack`].

use std::arch::x86_64::*;

use super::super::iq_decode512::IqSimd512;
use super::super::util::{read_f32, read_u32};
use super::{prefetch, Ahead, Kind, ROWS};
use crate::dtype::DType;
use crate::quants::iq_codes::IqTiled;
use crate::quants::{
    BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS, BlockQuant,
};

/// Bytes of a Q8_K block: f32 `d`, 256 codes, 16 `i16` group sums.
const Q8_K_BYTES: usize = 292;
/// Offset of the codes in a Q8_K block.
const Q8_K_QS: usize = 4;

/// What the packed weight bytes exceed the signed weights by.
const OFFSET: i32 = 64;

/// Offset of the multiplier bytes in a packed super-block.
pub(super) const LS_AT: usize = 64;
/// Offset of the weight vectors.
pub(super) const V_AT: usize = LS_AT + 16 * ROWS;
/// Bytes of a packed super-block of sixteen rows (a multiple of 64).
pub(super) const BLOCK_BYTES: usize = V_AT + 64 * 64;

/// The grid type whose blocks a kind packs, if it is one of this module's.
pub(super) const fn grid_type(kind: Kind) -> Option<DType> {
    Some(match kind {
        Kind::IQ2XXSTiled => DType::IQ2XXS,
        Kind::IQ2XSTiled => DType::IQ2XS,
        Kind::IQ2STiled => DType::IQ2S,
        Kind::IQ3XXSTiled => DType::IQ3XXS,
        Kind::IQ3STiled => DType::IQ3S,
        Kind::IQ1STiled => DType::IQ1S,
        Kind::IQ1MTiled => DType::IQ1M,
        _ => return None,
    })
}

/// The kind of grid type `dtype`, if it is one.
pub(crate) const fn grid_kind(dtype: DType) -> Option<Kind> {
    Some(match dtype {
        DType::IQ2XXS => Kind::IQ2XXSTiled,
        DType::IQ2XS => Kind::IQ2XSTiled,
        DType::IQ2S => Kind::IQ2STiled,
        DType::IQ3XXS => Kind::IQ3XXSTiled,
        DType::IQ3S => Kind::IQ3STiled,
        DType::IQ1S => Kind::IQ1STiled,
        DType::IQ1M => Kind::IQ1MTiled,
        _ => return None,
    })
}

/// Quads (four values) per multiplier group of grid kind `kind`: 4 for the types with one
/// multiplier per 16 values (IQ2_XS, IQ2_S, IQ1_M), 8 for those whose multipliers come in
/// equal pairs (one per 32 values: IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S).
pub(super) const fn group_quads(kind: Kind) -> usize {
    match kind {
        Kind::IQ2XSTiled | Kind::IQ2STiled | Kind::IQ1MTiled => 4,
        _ => 8,
    }
}

/// Bytes of side data per Q8_K block of a column for grid kind `kind`: one i32 seed per
/// multiplier group.
pub(super) const fn aux_bytes(kind: Kind) -> usize {
    4 * 64 / group_quads(kind)
}

/// The side data of a Q8_K row for grid kind `kind` ([`aux_bytes`] per block): per block and
/// multiplier group, `−64 · Σ y` over the group's codes, little-endian i32.
pub(super) fn activation_aux(kind: Kind, row: &[u8], aux: &mut [u8]) {
    let values = 4 * group_quads(kind);
    for (blk, out) in row
        .chunks_exact(Q8_K_BYTES)
        .zip(aux.chunks_exact_mut(aux_bytes(kind)))
    {
        let codes = &blk[Q8_K_QS..Q8_K_QS + 256];
        for (g, o) in codes.chunks_exact(values).zip(out.chunks_exact_mut(4)) {
            let sum: i32 = g.iter().map(|&b| b as i8 as i32).sum();
            o.copy_from_slice(&(-OFFSET * sum).to_le_bytes());
        }
    }
}

/// Bytes of one block of the weight type of grid kind `kind` (0 for the other kinds).
pub(super) const fn src_bytes(kind: Kind) -> usize {
    match kind {
        Kind::IQ2XXSTiled => BlockIQ2XXS::BYTES,
        Kind::IQ2XSTiled => BlockIQ2XS::BYTES,
        Kind::IQ2STiled => BlockIQ2S::BYTES,
        Kind::IQ3XXSTiled => BlockIQ3XXS::BYTES,
        Kind::IQ3STiled => BlockIQ3S::BYTES,
        Kind::IQ1STiled => BlockIQ1S::BYTES,
        Kind::IQ1MTiled => BlockIQ1M::BYTES,
        _ => 0,
    }
}

/// Values `64p .. 64p + 64` of the block at `xb` as packed weight bytes `w + 64` (see the
/// module docs), from `iq_decode512`'s pair decoder: IQ2/IQ3 `64 ± magnitude` by the sign
/// mask; IQ1 `64 + 8·grid ± 1` by the shift's sign mask (`iquants::tiled_block`'s weights).
///
/// # Safety
/// One block readable at `xb`; `p < 4`; the module's CPU features.
#[inline(always)]
unsafe fn weight_bytes<B: IqSimd512>(xb: *const u8, p: usize) -> __m512i {
    // SAFETY: forwarded to the decoder (caller); register operations otherwise.
    unsafe {
        let offset = _mm512_set1_epi8(OFFSET as i8);
        let (g, neg) = B::pair(xb, p);
        if B::GRID1 {
            // 8·grid as a byte (grid −1, 0, 1), then ±1.
            let g8 = _mm512_and_si512(_mm512_slli_epi16::<3>(g), _mm512_set1_epi8(-8));
            let pm1 = _mm512_mask_blend_epi8(neg, _mm512_set1_epi8(1), _mm512_set1_epi8(-1));
            _mm512_add_epi8(_mm512_add_epi8(g8, pm1), offset)
        } else {
            // 64 + mag, or 64 − mag under the mask.
            _mm512_mask_sub_epi8(_mm512_add_epi8(g, offset), neg, offset, g)
        }
    }
}

/// Packs `nb` super-blocks of the sixteen rows `rows` of grid type `B` into `out`, decoding
/// them (see the module docs).
///
/// # Safety
/// The module's CPU features; `nb` whole blocks readable at every `rows[r]`;
/// `nb · BLOCK_BYTES` bytes writable at `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn pack_grid<B: IqSimd512>(nb: usize, rows: &[*const u8; ROWS], out: *mut u8, ahead: Ahead) {
    // Row r's decoded weight bytes at 256·r.
    #[repr(C, align(64))]
    struct Rows([u8; 256 * ROWS]);
    let mut tmp = Rows([0; 256 * ROWS]);
    // SAFETY: reads stay inside block i < nb of each row (caller), writes inside `tmp` and
    // packed block i; unaligned accesses; the gathers read `tmp` (offsets below 256·16).
    unsafe {
        let gather = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(256),
        );
        for i in 0..nb {
            prefetch(ahead, i, nb);
            let dst = out.add(i * BLOCK_BYTES);
            let mut d = [0f32; ROWS];
            let mut ls = [[0u8; 16]; ROWS];
            for r in 0..ROWS {
                let xb = rows[r].add(i * B::BYTES);
                for p in 0..4 {
                    let at = tmp.0.as_mut_ptr().add(256 * r + 64 * p);
                    _mm512_store_si512(at.cast(), weight_bytes::<B>(xb, p));
                }
                _mm_storeu_si128(ls[r].as_mut_ptr().cast(), B::ls_bytes(xb));
                d[r] = B::d(xb) * B::FACTOR;
            }
            _mm512_storeu_ps(dst.cast(), _mm512_loadu_ps(d.as_ptr()));
            write_scales(&ls, dst);
            for q in 0..64 {
                let idx = _mm512_add_epi32(gather, _mm512_set1_epi32(4 * q as i32));
                let v = _mm512_i32gather_epi32::<1>(idx, tmp.0.as_ptr().cast());
                _mm512_storeu_si512(dst.add(V_AT + 64 * q).cast(), v);
            }
        }
    }
}

/// The multiplier bytes of a packed super-block at `dst` from the rows' multipliers
/// `ls[r][j]`.
///
/// # Safety
/// [`BLOCK_BYTES`] writable at `dst`.
#[inline(always)]
unsafe fn write_scales(ls: &[[u8; 16]; ROWS], dst: *mut u8) {
    for (r, lr) in ls.iter().enumerate() {
        for (j, &l) in lr.iter().enumerate() {
            // SAFETY: byte r of multiplier j lies inside the packed block (caller).
            unsafe { *dst.add(LS_AT + 16 * j + r) = l };
        }
    }
}

/// [`super::pack`] of grid kind `kind` on a CPU with AVX-512 VNNI.
///
/// # Safety
/// As [`pack_grid`], for `kind`'s type; `kind` is a grid kind.
pub(super) unsafe fn pack_grid_vnni(
    kind: Kind,
    nb: usize,
    rows: &[*const u8; ROWS],
    out: *mut u8,
    ahead: Ahead,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match kind {
            Kind::IQ2XXSTiled => pack_grid::<BlockIQ2XXS>(nb, rows, out, ahead),
            Kind::IQ2XSTiled => pack_grid::<BlockIQ2XS>(nb, rows, out, ahead),
            Kind::IQ2STiled => pack_grid::<BlockIQ2S>(nb, rows, out, ahead),
            Kind::IQ3XXSTiled => pack_grid::<BlockIQ3XXS>(nb, rows, out, ahead),
            Kind::IQ3STiled => pack_grid::<BlockIQ3S>(nb, rows, out, ahead),
            Kind::IQ1STiled => pack_grid::<BlockIQ1S>(nb, rows, out, ahead),
            Kind::IQ1MTiled => pack_grid::<BlockIQ1M>(nb, rows, out, ahead),
            _ => unreachable!("pack_grid_vnni packs the grid kinds only"),
        }
    }
}

/// [`pack_grid_vnni`]'s bytes in portable code, from `quants::iq_codes`' tiled codes (the
/// oracle's decoding): for tests, and for a CPU without AVX-512 VNNI, where these kinds
/// never run (`Kind::takes_columns`).
pub(super) fn pack_grid_portable(kind: Kind, nb: usize, src: &[&[u8]; ROWS], dst: &mut [u8]) {
    fn rows<B: IqTiled>(grid1: bool, nb: usize, src: &[&[u8]; ROWS], dst: &mut [u8]) {
        for i in 0..nb {
            let out = &mut dst[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            let mut ls = [[0u8; 16]; ROWS];
            for (r, row) in src.iter().enumerate() {
                let x: B = bytemuck::pod_read_unaligned(&row[i * B::BYTES..(i + 1) * B::BYTES]);
                let c = x.tiled_codes();
                out[4 * r..4 * r + 4].copy_from_slice(&c.d.to_le_bytes());
                for (l, &s) in ls[r].iter_mut().zip(&c.ls) {
                    *l = s as u8;
                }
                for v in 0..256 {
                    out[V_AT + 64 * (v / 4) + 4 * r + v % 4] = (c.w(v, grid1) + OFFSET) as u8;
                }
            }
            // SAFETY: `out` holds one packed block.
            unsafe { write_scales(&ls, out.as_mut_ptr()) };
        }
    }
    match kind {
        Kind::IQ2XXSTiled => rows::<BlockIQ2XXS>(false, nb, src, dst),
        Kind::IQ2XSTiled => rows::<BlockIQ2XS>(false, nb, src, dst),
        Kind::IQ2STiled => rows::<BlockIQ2S>(false, nb, src, dst),
        Kind::IQ3XXSTiled => rows::<BlockIQ3XXS>(false, nb, src, dst),
        Kind::IQ3STiled => rows::<BlockIQ3S>(false, nb, src, dst),
        Kind::IQ1STiled => rows::<BlockIQ1S>(true, nb, src, dst),
        Kind::IQ1MTiled => rows::<BlockIQ1M>(true, nb, src, dst),
        _ => unreachable!("pack_grid_portable packs the grid kinds only"),
    }
}

/// `C` columns against a packed grid panel of `nb` super-blocks in the tiled order (see the
/// module docs): lane `r` of result `c` is row `r` · column `c`. `Q` is the kind's
/// [`group_quads`].
///
/// # Safety
/// See the module docs.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn grid_tiled<const Q: usize, const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: packed super-block i < nb of the panel, Q8_K block i of each column and its
    // side data are readable (caller); unaligned loads.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); C];
        for i in 0..nb {
            let p = panel.add(i * BLOCK_BYTES);
            let yb: [*const u8; C] = std::array::from_fn(|c| y[c].add(i * Q8_K_BYTES));
            let seeds: [*const u8; C] = std::array::from_fn(|c| aux[c].add(i * 4 * 64 / Q));
            let mut s1 = [_mm512_setzero_si512(); C];
            for g in 0..64 / Q {
                let ls = _mm_loadu_si128(p.add(LS_AT + 16 * (g * Q / 4)).cast());
                let ls = _mm512_cvtepu8_epi32(ls);
                let w: [__m512i; Q] = std::array::from_fn(|e| {
                    _mm512_loadu_si512(p.add(V_AT + 64 * (Q * g + e)).cast())
                });
                for c in 0..C {
                    let yq = yb[c].add(Q8_K_QS + 4 * Q * g);
                    let mut a = _mm512_set1_epi32(read_u32(seeds[c].add(4 * g)) as i32);
                    for (e, we) in w.iter().enumerate() {
                        let q = _mm512_set1_epi32(read_u32(yq.add(4 * e)) as i32);
                        a = _mm512_dpbusd_epi32(a, *we, q);
                    }
                    s1[c] = _mm512_add_epi32(s1[c], _mm512_mullo_epi32(a, ls));
                }
            }
            let d = _mm512_loadu_ps(p.cast());
            for c in 0..C {
                let r = _mm512_mul_ps(d, _mm512_cvtepi32_ps(s1[c]));
                let dy = _mm512_set1_ps(read_f32(yb[c]));
                acc[c] = _mm512_fmadd_ps(r, dy, acc[c]);
            }
        }
        acc
    }
}

/// [`super::gemm`] of grid kind `kind` on a CPU with AVX-512 VNNI.
///
/// # Safety
/// As [`super::gemm`]; `kind` is a grid kind.
pub(super) unsafe fn grid_tiled_vnni<const C: usize>(
    kind: Kind,
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: forwarded from the caller.
    unsafe {
        match group_quads(kind) {
            4 => grid_tiled::<4, C>(nb, panel, y, aux),
            _ => grid_tiled::<8, C>(nb, panel, y, aux),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{activation_aux, gemm, pack, vnni};
    use super::*;
    use crate::quants::k_quants::tiled::dot_tiled;

    /// Offset of the group sums in a Q8_K block.
    const Q8_K_BSUMS: usize = 260;

    const KINDS: [Kind; 7] = [
        Kind::IQ2XXSTiled,
        Kind::IQ2XSTiled,
        Kind::IQ2STiled,
        Kind::IQ3XXSTiled,
        Kind::IQ3STiled,
        Kind::IQ1STiled,
        Kind::IQ1MTiled,
    ];

    use crate::kernels::test_rng as rng;

    /// Sixteen rows of `nb` blocks: any bytes (every grid entry, sign and multiplier), or
    /// all 0x00 / all 0xFF blocks now and then, with finite f16 scales.
    fn rows(t: DType, nb: usize, seed: &mut u64) -> Vec<u8> {
        let bytes = t.type_size();
        let mut w = vec![0u8; ROWS * nb * bytes];
        for blk in w.chunks_exact_mut(bytes) {
            let fill = rng(seed) % 8;
            for b in blk.iter_mut() {
                *b = match fill {
                    0 => 0x00,
                    1 => 0xFF,
                    _ => rng(seed) as u8,
                };
            }
            let d = half::f16::from_f32((rng(seed) % 2000) as f32 / 1000.0 - 1.0).to_bits();
            if t == DType::IQ1M {
                for k in 0..4 {
                    let b = &mut blk[48 + 2 * k + 1];
                    *b = (*b & 0x0F) | ((((d >> (4 * k)) & 15) as u8) << 4);
                }
            } else {
                blk[..2].copy_from_slice(&d.to_le_bytes());
            }
        }
        w
    }

    /// A Q8_K row of `nb` blocks: any codes (−128 included; all −128 or all 127 now and
    /// then) with their group sums and a finite scale.
    fn column(nb: usize, seed: &mut u64) -> Vec<u8> {
        let mut q = vec![0u8; nb * Q8_K_BYTES];
        for blk in q.chunks_exact_mut(Q8_K_BYTES) {
            let fill = rng(seed) % 6;
            for b in &mut blk[Q8_K_QS..Q8_K_BSUMS] {
                *b = match fill {
                    0 => 0x80,
                    1 => 0x7F,
                    _ => rng(seed) as u8,
                };
            }
            let d = (rng(seed) % 2000) as f32 / 1e5 - 0.01;
            blk[..4].copy_from_slice(&d.to_le_bytes());
            for j in 0..16 {
                let s: i16 = blk[Q8_K_QS + 16 * j..Q8_K_QS + 16 * j + 16]
                    .iter()
                    .map(|&b| b as i8 as i16)
                    .sum();
                blk[Q8_K_BSUMS + 2 * j..Q8_K_BSUMS + 2 * j + 2].copy_from_slice(&s.to_le_bytes());
            }
        }
        q
    }

    fn oracle(t: DType, k: usize, row: &[u8], col: &[u8]) -> f32 {
        use crate::quants as q;
        match t {
            DType::IQ2XXS => dot_tiled::<q::BlockIQ2XXS>(k, row, col),
            DType::IQ2XS => dot_tiled::<q::BlockIQ2XS>(k, row, col),
            DType::IQ2S => dot_tiled::<q::BlockIQ2S>(k, row, col),
            DType::IQ3XXS => dot_tiled::<q::BlockIQ3XXS>(k, row, col),
            DType::IQ3S => dot_tiled::<q::BlockIQ3S>(k, row, col),
            DType::IQ1S => dot_tiled::<q::BlockIQ1S>(k, row, col),
            _ => dot_tiled::<q::BlockIQ1M>(k, row, col),
        }
    }

    fn check<const C: usize>(kind: Kind, nb: usize, seed: &mut u64) {
        let t = grid_type(kind).expect("a grid kind");
        let (k, rs) = (nb * 256, t.row_size(nb * 256));
        let w = rows(t, nb, seed);
        let src: [&[u8]; ROWS] = std::array::from_fn(|r| &w[r * rs..(r + 1) * rs]);
        let ptrs: [*const u8; ROWS] = src.map(|s| s.as_ptr());
        let mut panel = vec![0u8; kind.panel_bytes(nb)];
        // SAFETY: the caller checked the CPU; every row holds nb blocks, `panel` one panel.
        unsafe { pack(kind, nb, &ptrs, panel.as_mut_ptr(), Ahead::NONE) };
        let mut portable = vec![0u8; kind.panel_bytes(nb)];
        pack_grid_portable(kind, nb, &src, &mut portable);
        assert!(panel == portable, "{kind:?} nb={nb}: the packers differ");
        let cols: Vec<Vec<u8>> = (0..C).map(|_| column(nb, seed)).collect();
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
        let mut out = [[0f32; ROWS]; C];
        // SAFETY: as above; Q8_K columns of nb blocks and their side data.
        unsafe { gemm::<C>(kind, nb, panel.as_ptr(), &y, &aux, &mut out, true) };
        for (c, col) in cols.iter().enumerate() {
            for (r, row) in src.iter().enumerate() {
                let want = oracle(t, k, row, col);
                assert_eq!(
                    out[c][r].to_bits(),
                    want.to_bits(),
                    "{kind:?} nb={nb} C={C} row {r} col {c}: {} vs {want}",
                    out[c][r]
                );
            }
        }
    }

    /// Every grid kind: the SIMD packer writes the portable packer's bytes, and every
    /// element of a product with 1..=8 columns per pass has `dot_tiled`'s bits, on any
    /// bytes, extreme blocks and −128 activations included.
    #[test]
    fn grid_panels_equal_dot_tiled() {
        if !vnni() {
            return;
        }
        let mut seed = 29u64;
        for kind in KINDS {
            assert_eq!(grid_kind(grid_type(kind).unwrap()), Some(kind));
            for nb in [1usize, 2, 3] {
                check::<1>(kind, nb, &mut seed);
                check::<2>(kind, nb, &mut seed);
                check::<3>(kind, nb, &mut seed);
                check::<5>(kind, nb, &mut seed);
                check::<8>(kind, nb, &mut seed);
            }
            check::<4>(kind, 2, &mut seed);
            check::<6>(kind, 1, &mut seed);
            check::<7>(kind, 1, &mut seed);
        }
    }
}
