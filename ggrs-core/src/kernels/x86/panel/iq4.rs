//! Panel kernels (`panel`: sixteen weight rows per panel, one row per 32-bit lane) of the
//! non-linear 4-bit i-quants on AVX-512 VNNI, and IQ4_XS's panel layout; `panel::iq4_avx2`
//! has the AVX2 builds of the same kinds (same layouts, same bits).
//!
//! # Layouts
//!
//! IQ4_NL ([`Kind::IQ4NLChain`]) has Q4_0's bytes (an f16 scale, then 16 bytes whose low
//! nibbles index values 0..16 and high nibbles values 16..32) and is packed as Q4_0 is
//! (`panel`'s module docs): the indices stay 4-bit in the panel, so a decode streams as many
//! bytes as the file holds, and are looked up in the level table in registers.
//!
//! An IQ4_XS super-block of sixteen rows ([`Kind::IQ4XSLanes`], read by
//! [`Kind::IQ4XSTiled`] too) is 2176 bytes, the file's size, every vector 64-byte aligned:
//!
//! ```text
//!   [ d: 16 × f16 ]
//!   [ scales_h: 16 × u16 ]
//!   [ scales_l: 16 × u32 ]    row r's four bytes in lane r
//!   [ v_0 ] … [ v_31 ]        lane r of v_q = bytes 4q..4q+4 of row r's qs: sub-block
//!                             ib = q / 4, values 4·(q % 4).. (low nibbles) and 16 + 4·(q % 4)..
//!                             (high nibbles) of it
//! ```
//!
//! That is the order the kernels read a block in, so that a panel streams front to back.
//!
//! # Arithmetic
//!
//! Every integer sum is exact, so only the f32 steps carry ggml's orders:
//!
//! - IQ4_NL chain: levels looked up as `level + 128` (unsigned, 1..=241) and multiplied with
//!   the activation quads by `vpdpbusd`, from the seed `−128 · Σ y` of the block
//!   (`panel::activation_aux`); then `acc = fma(s, dx·dy, acc)` per block.
//! - IQ4_XS lanes (`ggml_vec_dot_iq4_xs_q8_K`): `vpmaddubsw` of `|level|` (at most 127) with
//!   the activation quad carrying the level's sign (the activations come from the Q8_K
//!   quantizer, `|y| ≤ 127`, so the negation is exact), pairs at most 2·127·127 < 2¹⁵; then
//!   `vpdpwssd` with the sub-block's scale `ls − 32` in both 16-bit halves adds
//!   `(ls − 32)·(quad sum)` to the lane of the quad. Per super-block
//!   `lane = fma(dx·dy, lane_sum, lane)`, and ggml's `hsum_float_8` tree at the end.
//! - IQ4_XS tiled (`k_quants::tiled::dot_tiled`): per sub-block one exact sum of `level +
//!   128` times the activations by `vpdpbusd`, seeded with `−128 ·` the sub-block's two
//!   Q8_K group sums (`bsums`, which the quantizer writes as the sums of the codes), times
//!   `ls − 32` (`vpmulld`); `s1` the sum over the sub-blocks; then `r = d·f32(s1)` and
//!   `acc = fma(r, d_y, acc)`.
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C); the
//! kernels' pointer contracts are those of [`super::gemm`]. [`pack_iq4_xs`] is
//! portable.

use std::arch::x86_64::*;

use super::super::util::{read_f32, read_u16, read_u32};
use super::{prefetch, q4_0_at, stream_ahead, Ahead, Kind, AUX_BYTES, Q4_0_PAIR, ROWS};
use crate::quants::iq4::KVALUES_IQ4NL;

/// Bytes of a Q8_0 block (activations).
const Q8_0_BYTES: usize = 34;
/// Bytes of a Q8_K block: f32 `d`, 256 codes, 16 `i16` group sums.
const Q8_K_BYTES: usize = 292;
/// Offset of the codes in a Q8_K block.
const Q8_K_QS: usize = 4;
/// Offset of the group sums in a Q8_K block.
const Q8_K_BSUMS: usize = 260;
/// Bytes of an IQ4_XS super-block.
const IQ4_XS_BYTES: usize = 136;

/// The levels plus 128, as unsigned bytes.
pub(super) const LEVELS_U8: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (KVALUES_IQ4NL[i] as i16 + 128) as u8;
        i += 1;
    }
    t
};

/// The levels' magnitudes (at most 127).
pub(super) const LEVELS_ABS: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (KVALUES_IQ4NL[i] as i16).unsigned_abs() as u8;
        i += 1;
    }
    t
};

/// Packs `nb` IQ4_XS super-blocks of the sixteen rows `src` into `dst` (the layout of the
/// module docs).
pub(super) fn pack_iq4_xs(nb: usize, src: &[&[u8]; ROWS], dst: &mut [u8]) {
    for i in 0..nb {
        let at = Kind::IQ4XSLanes.block_at(i);
        for (r, row) in src.iter().enumerate() {
            let blk = &row[i * IQ4_XS_BYTES..(i + 1) * IQ4_XS_BYTES];
            dst[at.d + 2 * r..at.d + 2 * r + 2].copy_from_slice(&blk[0..2]);
            dst[at.h + 2 * r..at.h + 2 * r + 2].copy_from_slice(&blk[2..4]);
            dst[at.s + 4 * r..at.s + 4 * r + 4].copy_from_slice(&blk[4..8]);
            for (q, quad) in blk[8..].chunks_exact(4).enumerate() {
                let v = at.v + 64 * q + 4 * r;
                dst[v..v + 4].copy_from_slice(quad);
            }
        }
    }
}

/// [`pack_iq4_xs`] with AVX-512: each 32-byte quarter of the sixteen rows' `qs` (eight
/// quads per row) transposed into eight vectors by dword permutes, as `panel`'s Q8_0 packer
/// does with its codes; the scales copied lane by lane; `ahead` prefetched on the way.
///
/// # Safety
/// AVX-512 F; `nb` whole IQ4_XS super-blocks readable at every `rows[r]`;
/// `Kind::IQ4XSLanes.panel_bytes(nb)` bytes writable at `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn pack_iq4_xs_vnni(
    nb: usize,
    rows: &[*const u8; ROWS],
    out: *mut u8,
    ahead: Ahead,
) {
    // SAFETY: reads stay inside super-block i < nb of each row, writes inside packed
    // super-block i.
    unsafe {
        // Level 1: from two vectors of two rows × eight dwords, dwords 0..4 (`lo`) or 4..8
        // (`hi`) of the four rows, one 128-bit lane per dword.
        let idx_lo = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
        let idx_hi = _mm512_setr_epi32(4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31);
        for i in 0..nb {
            prefetch(ahead, i, nb);
            let at = Kind::IQ4XSLanes.block_at(i);
            let blk = |r: usize| rows[r].add(i * IQ4_XS_BYTES);
            let (mut d, mut sh, mut sl) = ([0u16; ROWS], [0u16; ROWS], [0u32; ROWS]);
            for r in 0..ROWS {
                d[r] = read_u16(blk(r));
                sh[r] = read_u16(blk(r).add(2));
                sl[r] = read_u32(blk(r).add(4));
            }
            _mm256_storeu_si256(out.add(at.d).cast(), _mm256_loadu_si256(d.as_ptr().cast()));
            _mm256_storeu_si256(out.add(at.h).cast(), _mm256_loadu_si256(sh.as_ptr().cast()));
            _mm512_storeu_si512(out.add(at.s).cast(), _mm512_loadu_si512(sl.as_ptr().cast()));
            for quarter in 0..4 {
                let ld = |r: usize| _mm256_loadu_si256(blk(r).add(8 + 32 * quarter).cast());
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
                let mut h = [[_mm512_setzero_si512(); 4]; 2];
                for q in 0..2 {
                    h[q][0] = _mm512_shuffle_i64x2::<0x44>(c_lo[2 * q], c_lo[2 * q + 1]);
                    h[q][1] = _mm512_shuffle_i64x2::<0xEE>(c_lo[2 * q], c_lo[2 * q + 1]);
                    h[q][2] = _mm512_shuffle_i64x2::<0x44>(c_hi[2 * q], c_hi[2 * q + 1]);
                    h[q][3] = _mm512_shuffle_i64x2::<0xEE>(c_hi[2 * q], c_hi[2 * q + 1]);
                }
                // Level 3: dword 2s and 2s + 1 of all sixteen rows: vectors 8·quarter + 2s
                // and + 1.
                for (s, (lo, hi)) in h[0].iter().zip(&h[1]).enumerate() {
                    let v = out.add(at.v + 64 * (8 * quarter + 2 * s));
                    _mm512_storeu_si512(v.cast(), _mm512_shuffle_i64x2::<0x88>(*lo, *hi));
                    _mm512_storeu_si512(v.add(64).cast(), _mm512_shuffle_i64x2::<0xDD>(*lo, *hi));
                }
            }
        }
    }
}

/// A 16-byte table in every 128-bit lane.
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
unsafe fn table(t: &[u8; 16]) -> __m512i {
    // SAFETY: `t` holds 16 bytes; unaligned load.
    unsafe { _mm512_broadcast_i32x4(_mm_loadu_si128(t.as_ptr().cast())) }
}

/// The activation quad at `p` in every 32-bit lane.
///
/// # Safety
/// Four bytes readable at `p`; AVX-512 F.
#[inline(always)]
unsafe fn quad(p: *const u8) -> __m512i {
    // SAFETY: forwarded from the caller.
    unsafe { _mm512_set1_epi32(read_u32(p) as i32) }
}

/// `C` columns against an IQ4_NL panel in the chain order.
///
/// # Safety
/// As [`super::gemm`] (Q8_0 columns with their side data for
/// [`Kind::IQ4NLChain`]); AVX-512 VNNI.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn iq4_nl_chain<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: packed block i < nb of the panel, Q8_0 block i of each column and its side
    // data are readable (caller); unaligned loads.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let levels = table(&LEVELS_U8);
        let mut acc = [_mm512_setzero_ps(); C];
        for i in 0..nb {
            let (sc, vec) = q4_0_at(i);
            if i % 2 == 0 {
                stream_ahead(panel, sc, Q4_0_PAIR);
            }
            // Exact: every f16 is an f32.
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(panel.add(sc).cast()));
            let p = panel.add(vec);
            let mut lo = [_mm512_setzero_si512(); 4];
            let mut hi = [_mm512_setzero_si512(); 4];
            for g in 0..4 {
                let v = _mm512_loadu_si512(p.add(64 * g).cast());
                lo[g] = _mm512_shuffle_epi8(levels, _mm512_and_si512(v, low));
                hi[g] =
                    _mm512_shuffle_epi8(levels, _mm512_and_si512(_mm512_srli_epi16::<4>(v), low));
            }
            for c in 0..C {
                let yq = y[c].add(i * Q8_0_BYTES + 2);
                let ax = aux[c].add(i * AUX_BYTES);
                // The block's exact sum, in two chains (four for one column, to shorten the
                // dependency chains while the weights stream).
                let mut s0 = _mm512_set1_epi32(read_u32(ax.add(4)) as i32);
                let mut s1 = _mm512_setzero_si512();
                if C == 1 {
                    let mut s2 = _mm512_setzero_si512();
                    let mut s3 = _mm512_setzero_si512();
                    for g in 0..2 {
                        s0 = _mm512_dpbusd_epi32(s0, lo[g], quad(yq.add(4 * g)));
                        s1 = _mm512_dpbusd_epi32(s1, hi[g], quad(yq.add(16 + 4 * g)));
                        s2 = _mm512_dpbusd_epi32(s2, lo[g + 2], quad(yq.add(8 + 4 * g)));
                        s3 = _mm512_dpbusd_epi32(s3, hi[g + 2], quad(yq.add(24 + 4 * g)));
                    }
                    s0 = _mm512_add_epi32(s0, s2);
                    s1 = _mm512_add_epi32(s1, s3);
                } else {
                    for g in 0..4 {
                        s0 = _mm512_dpbusd_epi32(s0, lo[g], quad(yq.add(4 * g)));
                        s1 = _mm512_dpbusd_epi32(s1, hi[g], quad(yq.add(16 + 4 * g)));
                    }
                }
                let s = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
                let d = _mm512_mul_ps(dx, _mm512_set1_ps(read_f32(ax)));
                acc[c] = _mm512_fmadd_ps(s, d, acc[c]);
            }
        }
        acc
    }
}

/// The scale bits of one packed IQ4_XS super-block, one 32-bit lane per row: `scales_l`,
/// and `scales_h` shifted so that sub-block `ib`'s two high bits sit at bits `4 + 2·ib`.
#[derive(Clone, Copy)]
struct Scales {
    low: __m512i,
    high: __m512i,
}

impl Scales {
    /// The scale bits of the packed super-block at `at`.
    ///
    /// # Safety
    /// AVX-512 F; the packed super-block is readable.
    #[inline(always)]
    unsafe fn load(panel: *const u8, at: super::BlockAt) -> Scales {
        // SAFETY: the scale bytes lie inside the packed super-block (caller).
        unsafe {
            let h16 = _mm256_loadu_si256(panel.add(at.h).cast());
            Scales {
                low: _mm512_loadu_si512(panel.add(at.s).cast()),
                high: _mm512_slli_epi32::<4>(_mm512_cvtepu16_epi32(h16)),
            }
        }
    }

    /// Sub-block `ib`'s scale, unbiased (`ls − 32`), per row.
    ///
    /// # Safety
    /// AVX-512 F.
    #[inline(always)]
    unsafe fn get(self, ib: usize) -> __m512i {
        // SAFETY: register-only AVX-512 F operations.
        unsafe {
            let l = _mm512_srl_epi32(self.low, _mm_cvtsi32_si128(4 * ib as i32));
            let h = _mm512_srl_epi32(self.high, _mm_cvtsi32_si128(2 * ib as i32));
            let ls = _mm512_or_si512(
                _mm512_and_si512(l, _mm512_set1_epi32(0x0F)),
                _mm512_and_si512(h, _mm512_set1_epi32(0x30)),
            );
            _mm512_sub_epi32(ls, _mm512_set1_epi32(32))
        }
    }

    /// [`Scales::get`] as the same i16 in both halves of each lane (for `vpdpwssd`).
    ///
    /// # Safety
    /// AVX-512 F.
    #[inline(always)]
    unsafe fn pair(self, ib: usize) -> __m512i {
        // SAFETY: register-only AVX-512 F operations.
        unsafe {
            let s = self.get(ib);
            let low16 = _mm512_and_si512(s, _mm512_set1_epi32(0xFFFF));
            _mm512_or_si512(low16, _mm512_slli_epi32::<16>(s))
        }
    }
}

/// `C` columns (fewer than eight) against an IQ4_XS panel in `ggml_vec_dot_iq4_xs_q8_K`'s
/// lane order (see the module docs).
///
/// # Safety
/// As [`super::gemm`] (Q8_K columns from the Q8_K quantizer, no side data); AVX-512
/// VNNI.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn iq4_xs_lanes<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: packed super-block i < nb of the panel and Q8_K block i of each column are
    // readable (caller); unaligned loads.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let magnitudes = table(&LEVELS_ABS);
        // Index bit 3 clear: a negative level (the table ascends through zero at index 8).
        let bit3 = _mm512_set1_epi8(0x08);
        let zero = _mm512_setzero_si512();
        let mut acc = [[_mm512_setzero_ps(); 8]; C];
        let bb = Kind::IQ4XSLanes.panel_bytes(1);
        for i in 0..nb {
            stream_ahead(panel, i * bb, bb);
            let at = Kind::IQ4XSLanes.block_at(i);
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(panel.add(at.d).cast()));
            let scales = Scales::load(panel, at);
            // Quad g of every sub-block into lane g (low nibbles) and lane g + 4 (high),
            // sub-block by sub-block, so that the panel streams in order.
            let mut lanes = [[zero; 8]; C];
            for ib in 0..8 {
                let pair = scales.pair(ib);
                for g in 0..4 {
                    let v = _mm512_loadu_si512(panel.add(at.v + 64 * (4 * ib + g)).cast());
                    let i_lo = _mm512_and_si512(v, low);
                    let i_hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
                    let a_lo = _mm512_shuffle_epi8(magnitudes, i_lo);
                    let a_hi = _mm512_shuffle_epi8(magnitudes, i_hi);
                    // (Both from the indices: a test of the packed byte's bit 7 would compile
                    // to `vpmovb2m`, whose inverse costs a blend per column.)
                    let n_lo = _mm512_testn_epi8_mask(i_lo, bit3);
                    let n_hi = _mm512_testn_epi8_mask(i_hi, bit3);
                    for (c, l) in lanes.iter_mut().enumerate() {
                        let yq = y[c].add(i * Q8_K_BYTES + Q8_K_QS + 32 * ib);
                        let y_lo = quad(yq.add(4 * g));
                        let y_hi = quad(yq.add(16 + 4 * g));
                        let y_lo = _mm512_mask_sub_epi8(y_lo, n_lo, zero, y_lo);
                        let y_hi = _mm512_mask_sub_epi8(y_hi, n_hi, zero, y_hi);
                        let p_lo = _mm512_maddubs_epi16(a_lo, y_lo);
                        let p_hi = _mm512_maddubs_epi16(a_hi, y_hi);
                        l[g] = _mm512_dpwssd_epi32(l[g], p_lo, pair);
                        l[g + 4] = _mm512_dpwssd_epi32(l[g + 4], p_hi, pair);
                    }
                }
            }
            for (c, l) in lanes.iter().enumerate() {
                let dy = read_f32(y[c].add(i * Q8_K_BYTES));
                let d = _mm512_mul_ps(dx, _mm512_set1_ps(dy));
                for (a, &lane) in acc[c].iter_mut().zip(l) {
                    *a = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lane), *a);
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

/// `C` columns (of eight or more per batch) against an IQ4_XS panel in ggml's tiled order
/// (see the module docs).
///
/// # Safety
/// As [`super::gemm`] (Q8_K columns whose group sums are the sums of their codes, no
/// side data); AVX-512 VNNI.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn iq4_xs_tiled<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: as `iq4_xs_lanes`.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let levels = table(&LEVELS_U8);
        let mut acc = [_mm512_setzero_ps(); C];
        for i in 0..nb {
            let at = Kind::IQ4XSLanes.block_at(i);
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(panel.add(at.d).cast()));
            let scales = Scales::load(panel, at);
            let mut s1 = [_mm512_setzero_si512(); C];
            for ib in 0..8 {
                let mut u = [_mm512_setzero_si512(); 8];
                for g in 0..4 {
                    let v = _mm512_loadu_si512(panel.add(at.v + 64 * (4 * ib + g)).cast());
                    u[g] = _mm512_shuffle_epi8(levels, _mm512_and_si512(v, low));
                    u[g + 4] = _mm512_shuffle_epi8(
                        levels,
                        _mm512_and_si512(_mm512_srli_epi16::<4>(v), low),
                    );
                }
                for c in 0..C {
                    let yb = y[c].add(i * Q8_K_BYTES);
                    let bsums = yb.add(Q8_K_BSUMS + 4 * ib);
                    let sum_y =
                        read_u16(bsums) as i16 as i32 + read_u16(bsums.add(2)) as i16 as i32;
                    let yq = yb.add(Q8_K_QS + 32 * ib);
                    let mut s = _mm512_set1_epi32(-128 * sum_y);
                    let mut t = _mm512_setzero_si512();
                    for g in 0..4 {
                        s = _mm512_dpbusd_epi32(s, u[g], quad(yq.add(4 * g)));
                        t = _mm512_dpbusd_epi32(t, u[g + 4], quad(yq.add(16 + 4 * g)));
                    }
                    let sub = _mm512_add_epi32(s, t);
                    s1[c] = _mm512_add_epi32(s1[c], _mm512_mullo_epi32(sub, scales.get(ib)));
                }
            }
            for c in 0..C {
                let dy = read_f32(y[c].add(i * Q8_K_BYTES));
                let r = _mm512_mul_ps(dx, _mm512_cvtepi32_ps(s1[c]));
                acc[c] = _mm512_fmadd_ps(r, _mm512_set1_ps(dy), acc[c]);
            }
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::super::iq4_avx2 as avx2;
    use super::super::{activation_aux, pack};
    use super::*;
    use crate::dtype::DType;
    use crate::kernels::ggml_arith::{dot_iq4_nl_chain, dot_iq4_xs_lanes, quantize_row_q8_0_x86};
    use crate::quants::dispatch::Isa;
    use crate::quants::k_quants::q8_k::quantize_row_q8_k_ref;
    use crate::quants::k_quants::tiled::dot_tiled;
    use crate::quants::BlockIQ4XS;

    use crate::kernels::test_rng as rng;

    /// The builds this CPU runs.
    fn builds() -> Vec<Isa> {
        let f = crate::cpu::features();
        [Isa::Avx2, Isa::Avx512Vnni]
            .into_iter()
            .filter(|&isa| match isa {
                Isa::Avx2 => f.avx2_fma_f16c(),
                _ => f.runs(isa),
            })
            .collect()
    }

    /// Sixteen rows of `nb` blocks of `kind`'s type. Pattern 0: random bytes; 1: every index
    /// 0 (level −127) and every IQ4_XS scale 0 (`ls − 32 = −32`); 2: every byte 0xFF (level
    /// 113, scale 31); 3: indices alternating 0 and 15 (levels −127 and 113), scales random.
    /// Random finite f16 scales `d`.
    fn weights(kind: Kind, nb: usize, pattern: u32, seed: &mut u64) -> Vec<u8> {
        let bytes = kind.src_block_bytes();
        let mut w = vec![0u8; ROWS * nb * bytes];
        for blk in w.chunks_exact_mut(bytes) {
            for b in blk.iter_mut() {
                *b = match pattern {
                    0 | 3 => rng(seed) as u8,
                    1 => 0,
                    _ => 0xFF,
                };
            }
            if pattern == 3 {
                let first = if bytes == IQ4_XS_BYTES { 8 } else { 2 };
                for (j, b) in blk[first..].iter_mut().enumerate() {
                    *b = if j % 2 == 0 { 0xF0 } else { 0x0F };
                }
            }
            let d = (rng(seed) % 2000) as f32 / 1000.0 - 1.0;
            blk[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        }
        w
    }

    /// One activation row of `k` values of `kind`'s activation type. Pattern 0: random; 1:
    /// all codes 127; 2: all −127; 3: ±127 alternating.
    fn column(kind: Kind, k: usize, pattern: u32, seed: &mut u64) -> Vec<u8> {
        let x: Vec<f32> = (0..k)
            .map(|j| match pattern {
                0 => (rng(seed) % 20001) as f32 / 1000.0 - 10.0,
                1 => 3.0,
                2 => -3.0,
                _ => {
                    if j % 3 == 0 {
                        2.5
                    } else {
                        -2.5
                    }
                }
            })
            .collect();
        let mut q = vec![0u8; kind.activation().row_size(k)];
        match kind.activation() {
            DType::Q8K => quantize_row_q8_k_ref(&x, &mut q).expect("whole Q8_K blocks"),
            _ => quantize_row_q8_0_x86(&x, &mut q),
        }
        q
    }

    /// The panel product of `kind`'s `isa` build against `C` columns, checked element by
    /// element against ggml_arith's one-element kernel of the same order.
    fn check<const C: usize>(kind: Kind, isa: Isa, nb: usize, pattern: u32, seed: &mut u64) {
        let k = nb * kind.block_values();
        let rs = nb * kind.src_block_bytes();
        let w = weights(kind, nb, pattern, seed);
        let rows: [*const u8; ROWS] = std::array::from_fn(|r| w[r * rs..].as_ptr());
        let mut panel = vec![0u8; kind.panel_bytes(nb)];
        let cols: Vec<Vec<u8>> = (0..C)
            .map(|c| column(kind, k, if c == 0 { pattern } else { 0 }, seed))
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
        let mut out = [[0f32; ROWS]; C];
        // SAFETY: `builds` checked the CPU for `isa`; the buffers hold nb blocks each.
        unsafe {
            pack(kind, nb, &rows, panel.as_mut_ptr(), Ahead::NONE);
            let p = panel.as_ptr();
            if isa == Isa::Avx2 {
                match kind {
                    Kind::IQ4NLChain => avx2::iq4_nl_chain::<C>(nb, p, &y, &aux, &mut out),
                    _ => avx2::iq4_xs_lanes::<C>(nb, p, &y, &mut out),
                }
            } else {
                let acc = match kind {
                    Kind::IQ4NLChain => iq4_nl_chain::<C>(nb, p, &y, &aux),
                    Kind::IQ4XSLanes => iq4_xs_lanes::<C>(nb, p, &y),
                    _ => iq4_xs_tiled::<C>(nb, p, &y),
                };
                for (o, a) in out.iter_mut().zip(acc) {
                    _mm512_storeu_ps(o.as_mut_ptr(), a);
                }
            }
        }
        for (c, col) in cols.iter().enumerate() {
            for r in 0..ROWS {
                let row = &w[r * rs..(r + 1) * rs];
                let want = match kind {
                    Kind::IQ4NLChain => dot_iq4_nl_chain(k, row, col),
                    Kind::IQ4XSLanes => dot_iq4_xs_lanes(k, row, col),
                    _ => dot_tiled::<BlockIQ4XS>(k, row, col),
                };
                assert_eq!(
                    out[c][r].to_bits(),
                    want.to_bits(),
                    "{kind:?} {isa:?} nb={nb} pattern {pattern} C={C} row {r} col {c}: {} vs {want}",
                    out[c][r]
                );
            }
        }
    }

    /// Every element of every build's panel product has the bits of ggml_arith's
    /// one-element kernel in the same order: odd and even block counts, 1 to 8 columns,
    /// random and extreme blocks (levels −127 and 113 throughout, IQ4_XS scales −32 and 31,
    /// activation codes ±127).
    #[test]
    fn iq4_panels_match_ggml_order_kernels() {
        let mut seed = 29u64;
        for isa in builds() {
            for pattern in 0..4 {
                for nb in [1usize, 2, 3, 7, 28] {
                    let kind = Kind::IQ4NLChain;
                    check::<1>(kind, isa, nb, pattern, &mut seed);
                    check::<2>(kind, isa, nb, pattern, &mut seed);
                    check::<3>(kind, isa, nb, pattern, &mut seed);
                    check::<4>(kind, isa, nb, pattern, &mut seed);
                    check::<8>(kind, isa, nb, pattern, &mut seed);
                }
                for nb in [1usize, 2, 3, 19] {
                    let kind = Kind::IQ4XSLanes;
                    check::<1>(kind, isa, nb, pattern, &mut seed);
                    check::<2>(kind, isa, nb, pattern, &mut seed);
                    check::<3>(kind, isa, nb, pattern, &mut seed);
                    if isa == Isa::Avx512Vnni {
                        let kind = Kind::IQ4XSTiled;
                        check::<1>(kind, isa, nb, pattern, &mut seed);
                        check::<2>(kind, isa, nb, pattern, &mut seed);
                        check::<4>(kind, isa, nb, pattern, &mut seed);
                        check::<8>(kind, isa, nb, pattern, &mut seed);
                    }
                }
            }
        }
    }

    /// A packed IQ4_XS super-block holds each row's scale, scale bits and index quads where
    /// the module docs say, whichever packer wrote it.
    #[test]
    fn iq4_xs_packing_places_every_byte() {
        let mut seed = 31u64;
        let nb = 3;
        let w = weights(Kind::IQ4XSLanes, nb, 0, &mut seed);
        let rs = nb * IQ4_XS_BYTES;
        let src: [&[u8]; ROWS] = std::array::from_fn(|r| &w[r * rs..(r + 1) * rs]);
        let mut panel = vec![0u8; Kind::IQ4XSLanes.panel_bytes(nb)];
        pack_iq4_xs(nb, &src, &mut panel);
        assert_eq!(panel.len(), nb * 2176);
        if builds().contains(&Isa::Avx512Vnni) {
            let mut fast = vec![0u8; panel.len()];
            let rows = src.map(|r| r.as_ptr());
            // SAFETY: the CPU runs AVX-512 VNNI; the rows hold nb super-blocks, `fast` a
            // packed panel of them.
            unsafe { pack_iq4_xs_vnni(nb, &rows, fast.as_mut_ptr(), Ahead::NONE) };
            assert!(
                fast == panel,
                "the AVX-512 packer writes the portable packer's bytes"
            );
        }
        for i in 0..nb {
            let base = 2176 * i;
            for (r, row) in src.iter().enumerate() {
                let blk = &row[i * IQ4_XS_BYTES..(i + 1) * IQ4_XS_BYTES];
                assert_eq!(&panel[base + 2 * r..base + 2 + 2 * r], &blk[0..2]);
                assert_eq!(&panel[base + 32 + 2 * r..base + 34 + 2 * r], &blk[2..4]);
                assert_eq!(&panel[base + 64 + 4 * r..base + 68 + 4 * r], &blk[4..8]);
                for ib in 0..8 {
                    for j in 0..16 {
                        let (q, t) = (4 * ib + j / 4, j % 4);
                        assert_eq!(panel[base + 128 + 64 * q + 4 * r + t], blk[8 + 16 * ib + j]);
                    }
                }
            }
        }
    }
}
