//! Panel kernels (`panel`: sixteen weight rows, one per 32-bit lane) for Q4_K and Q2_K
//! weights in the orders of ggml's repacked `q4_K_8x8` / `q2_K_8x8` kernels
//! (`quants::k_quants::repacked`, whose portable bodies are the oracle): the layout, its
//! packers, the activation side data and the AVX-512 VNNI kernels; `panel::repacked_avx2`
//! holds the AVX2 builds (same layout, same bits).
//!
//! # Layout
//!
//! One packed super-block (256 values) of sixteen rows, every part 64-byte aligned:
//!
//! ```text
//! Q4_K (2368 bytes)                          Q2_K (1344 bytes, as many as the file)
//!   [ d: 16 × f16 ][ dmin: 16 × f16 ]          [ d: 16 × f16 ][ dmin: 16 × f16 ]
//!   [ scale j: 16 bytes ] × 8  (row r: byte r)  [ scale bytes 2u, 2u+1: 32 bytes ] × 8
//!   [ min pair c: 32 bytes ] × 4                  (row r: bytes 2r, 2r + 1)
//!     (row r: m_2c at 2r, m_2c+1 at 2r + 1)    [ v_q ] × 16  (lane r = qs bytes 4q..4q+4)
//!   [ v_8c+g ] × 32  (lane r = qs bytes
//!                     32c + 4g..32c + 4g + 4)
//! ```
//!
//! Q4_K's six-bit scales and minimums are unpacked at load (16 bytes per row instead of 12,
//! 2.8% more bytes per block) so that a kernel widens them with one instruction; Q2_K keeps
//! its scale bytes (scale in the low nibble, minimum in the high one) in pairs, which widen to
//! the 16-bit pairs `vpmaddwd` and `vpdpwssd` take. The codes keep the file's nibble and
//! crumb order, transposed by 4-byte quads as the other panel types' codes are.
//!
//! # Arithmetic
//!
//! Per super-block and row the kernels form the exact integers of the oracle: per chunk `c`
//! (64 values for Q4_K, 128 for Q2_K) `S_c = Σ_j sc_j · Σ code·y` over its sub-blocks and
//! `M_c = Σ_j m_j · bsum_j` (Q4_K: `bsum_j` the 16-bit wrapping sum of the two Q8_K block
//! sums of its 32 values, precomputed per activation block by [`activation_aux_q4_k`]). The
//! f32 work is the oracle's: `dd = d·d_y`, `dm = dmin·d_y`; GEMM order `acc = fma(S_c, dd,
//! acc)`, `accm = fma(M_c, dm, accm)` per chunk; GEMV order one of each per super-block on
//! `Σ_c S_c`, `Σ_c M_c`; the result `acc − accm`.
//!
//! Integer ranges (all exact): `vpdpbusd` of unsigned codes (at most 15) by signed Q8_K codes
//! (−128 included) sums into 32 bits; a Q4_K sub-block sum is at most 32·15·128 = 61 440 in
//! magnitude, times a scale of at most 63 by `vpmulld`; a Q2_K sub-block sum at most
//! 16·3·128 = 6144, which fits the 16-bit half of a `vpdpwssd` pair against its scale (at
//! most 15).
//!
//! # Memory
//!
//! Decoding streams each packed panel once from memory, front to back. The VNNI GEMV kernels
//! prefetch (into L2) an eighth of the super-block [`PREFETCH_BLOCKS`] ahead in each of their
//! eight passes through a block (`panel::prefetch_block`), which reads faster than the
//! hardware prefetcher alone. Whole blocks prefetched at their start (into L1 or L2, two to
//! twelve blocks ahead) had about halved the read rate instead. (Figures:
//! `docs/kernel-bench-notes.md`.)
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C); the
//! pointer contracts are those of [`super::gemm`].

use std::arch::x86_64::*;

use super::super::util::{read_f32, read_u32};
use super::{prefetch_block, ROWS};
use crate::quants::k_quants::get_scale_min_k4;

/// How many packed super-blocks ahead the VNNI GEMV kernels prefetch (see the module docs).
const PREFETCH_BLOCKS: usize = 4;

/// Bytes of a packed Q4_K super-block of sixteen rows.
pub(crate) const Q4K_PANEL_BYTES: usize = 2368;
/// Bytes of a packed Q2_K super-block of sixteen rows.
pub(crate) const Q2K_PANEL_BYTES: usize = 1344;
/// Bytes of side data per Q8_K activation block for Q4_K ([`activation_aux_q4_k`]).
pub(crate) const Q4K_AUX_BYTES: usize = 16;

/// Bytes of a Q4_K block in the file.
const Q4K_BYTES: usize = 144;
/// Bytes of a Q2_K block in the file.
const Q2K_BYTES: usize = 84;
/// Bytes of a Q8_K block: f32 `d`, 256 codes, 16 i16 block sums.
pub(super) const Q8K_BYTES: usize = 292;
/// Offset of the codes in a Q8_K block.
pub(super) const Q8K_QS: usize = 4;
/// Offset of the block sums in a Q8_K block.
pub(super) const Q8K_BSUMS: usize = 260;

/// Offsets in a packed Q4_K super-block: scales, minimum pairs, codes.
pub(super) const Q4K_SC: usize = 64;
/// See [`Q4K_SC`].
pub(super) const Q4K_MIN: usize = 192;
/// See [`Q4K_SC`].
pub(super) const Q4K_QS: usize = 320;
/// Offsets in a packed Q2_K super-block: scale byte pairs, codes.
pub(super) const Q2K_SC: usize = 64;
/// See [`Q2K_SC`].
pub(super) const Q2K_QS: usize = 320;

/// Packs `nb` Q4_K super-blocks of sixteen rows (file layout) into `dst` (see the module
/// docs).
pub(super) fn pack_q4_k(nb: usize, src: &[&[u8]; ROWS], dst: &mut [u8]) {
    for i in 0..nb {
        let out = &mut dst[i * Q4K_PANEL_BYTES..(i + 1) * Q4K_PANEL_BYTES];
        for (r, row) in src.iter().enumerate() {
            let blk = &row[i * Q4K_BYTES..(i + 1) * Q4K_BYTES];
            out[2 * r..2 * r + 2].copy_from_slice(&blk[0..2]);
            out[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&blk[2..4]);
            let packed: &[u8; 12] = blk[4..16].try_into().expect("12 scale bytes");
            for j in 0..8 {
                let (sc, m) = get_scale_min_k4(j, packed);
                out[Q4K_SC + 16 * j + r] = sc;
                out[Q4K_MIN + 32 * (j / 2) + 2 * r + j % 2] = m;
            }
            for (q, quad) in blk[16..].chunks_exact(4).enumerate() {
                let v = Q4K_QS + 64 * q + 4 * r;
                out[v..v + 4].copy_from_slice(quad);
            }
        }
    }
}

/// Packs `nb` Q2_K super-blocks of sixteen rows (file layout) into `dst` (see the module
/// docs).
pub(super) fn pack_q2_k(nb: usize, src: &[&[u8]; ROWS], dst: &mut [u8]) {
    for i in 0..nb {
        let out = &mut dst[i * Q2K_PANEL_BYTES..(i + 1) * Q2K_PANEL_BYTES];
        for (r, row) in src.iter().enumerate() {
            let blk = &row[i * Q2K_BYTES..(i + 1) * Q2K_BYTES];
            out[2 * r..2 * r + 2].copy_from_slice(&blk[80..82]);
            out[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&blk[82..84]);
            for u in 0..8 {
                let at = Q2K_SC + 32 * u + 2 * r;
                out[at..at + 2].copy_from_slice(&blk[2 * u..2 * u + 2]);
            }
            for (q, quad) in blk[16..80].chunks_exact(4).enumerate() {
                let v = Q2K_QS + 64 * q + 4 * r;
                out[v..v + 4].copy_from_slice(quad);
            }
        }
    }
}

/// The side data of one Q8_K activation row for the Q4_K kernels: per block, for each
/// 64-value chunk `c`, the little-endian u32 `p_2c | p_2c+1 << 16` with `p_j` the 16-bit
/// wrapping sum of block sums `2j` and `2j + 1` (the sum of sub-block `j`'s 32 codes, as the
/// ggml kernels add them with `hadd_epi16`). `row` holds whole Q8_K blocks and `aux` room
/// for [`Q4K_AUX_BYTES`] per block.
pub(crate) fn activation_aux_q4_k(row: &[u8], aux: &mut [u8]) {
    for (blk, out) in row
        .chunks_exact(Q8K_BYTES)
        .zip(aux.chunks_exact_mut(Q4K_AUX_BYTES))
    {
        let bsum =
            |j: usize| i16::from_le_bytes([blk[Q8K_BSUMS + 2 * j], blk[Q8K_BSUMS + 2 * j + 1]]);
        let pair = |j: usize| bsum(2 * j).wrapping_add(bsum(2 * j + 1)) as u16 as u32;
        for c in 0..4 {
            let v = pair(2 * c) | pair(2 * c + 1) << 16;
            out[4 * c..4 * c + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// The four bytes at `p` in every 32-bit lane.
///
/// # Safety
/// Four bytes readable at `p`; AVX-512 F.
#[inline(always)]
unsafe fn bcast(p: *const u8) -> __m512i {
    // SAFETY: forwarded from the caller.
    unsafe { _mm512_set1_epi32(read_u32(p) as i32) }
}

/// `C` columns against a Q4_K panel of `nb` super-blocks in the repacked GEMM (`GEMM`) or
/// GEMV order: lane `r` of result `c` is row `r` · column `c`.
///
/// # Safety
/// As [`super::gemm`]: Q8_K rows at `y[c]`, their [`activation_aux_q4_k`] at
/// `aux[c]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q4_k<const C: usize, const GEMM: bool>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: packed super-block i < nb of the panel, Q8_K block i of each column and its
    // side data are readable (caller); unaligned loads.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let mut acc = [_mm512_setzero_ps(); C];
        let mut accm = [_mm512_setzero_ps(); C];
        for i in 0..nb {
            let p = panel.add(i * Q4K_PANEL_BYTES);
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()));
            let mx = _mm512_cvtph_ps(_mm256_loadu_si256(p.add(32).cast()));
            let yb: [*const u8; C] = std::array::from_fn(|c| y[c].add(i * Q8K_BYTES));
            let ax: [*const u8; C] = std::array::from_fn(|c| aux[c].add(i * Q4K_AUX_BYTES));
            let mut st = [_mm512_setzero_si512(); C];
            let mut mt = [_mm512_setzero_si512(); C];
            for ch in 0..4 {
                let mut s = [_mm512_setzero_si512(); C];
                for h in 0..2 {
                    if !GEMM {
                        prefetch_block(panel, Q4K_PANEL_BYTES, i + PREFETCH_BLOCKS, 2 * ch + h, 8);
                    }
                    // Sub-block 2·ch + h: the low (h = 0) or high nibbles of quads 8·ch..8·ch + 8.
                    let j = 2 * ch + h;
                    let sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(p.add(Q4K_SC + 16 * j).cast()));
                    let w: [__m512i; 8] = std::array::from_fn(|g| {
                        let v = _mm512_loadu_si512(p.add(Q4K_QS + 64 * (8 * ch + g)).cast());
                        if h == 0 {
                            _mm512_and_si512(v, low)
                        } else {
                            _mm512_and_si512(_mm512_srli_epi16::<4>(v), low)
                        }
                    });
                    for c in 0..C {
                        let yq = yb[c].add(Q8K_QS + 64 * ch + 32 * h);
                        let mut a0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], bcast(yq));
                        let mut a1 =
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[1], bcast(yq.add(4)));
                        for g in (2..8).step_by(2) {
                            a0 = _mm512_dpbusd_epi32(a0, w[g], bcast(yq.add(4 * g)));
                            a1 = _mm512_dpbusd_epi32(a1, w[g + 1], bcast(yq.add(4 * g + 4)));
                        }
                        let a = _mm512_add_epi32(a0, a1);
                        s[c] = _mm512_add_epi32(s[c], _mm512_mullo_epi32(a, sc));
                    }
                }
                let mp = _mm512_cvtepu8_epi16(_mm256_loadu_si256(p.add(Q4K_MIN + 32 * ch).cast()));
                for c in 0..C {
                    let m = _mm512_madd_epi16(mp, bcast(ax[c].add(4 * ch)));
                    if GEMM {
                        let dy = _mm512_set1_ps(read_f32(yb[c]));
                        let (dd, dm) = (_mm512_mul_ps(dx, dy), _mm512_mul_ps(mx, dy));
                        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[c]), dd, acc[c]);
                        accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), dm, accm[c]);
                    } else {
                        st[c] = _mm512_add_epi32(st[c], s[c]);
                        mt[c] = _mm512_add_epi32(mt[c], m);
                    }
                }
            }
            if !GEMM {
                for c in 0..C {
                    let dy = _mm512_set1_ps(read_f32(yb[c]));
                    let (dd, dm) = (_mm512_mul_ps(dx, dy), _mm512_mul_ps(mx, dy));
                    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(st[c]), dd, acc[c]);
                    accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mt[c]), dm, accm[c]);
                }
            }
        }
        std::array::from_fn(|c| _mm512_sub_ps(acc[c], accm[c]))
    }
}

/// `C` columns against a Q2_K panel of `nb` super-blocks in the repacked GEMM (`GEMM`) or
/// GEMV order: lane `r` of result `c` is row `r` · column `c`.
///
/// # Safety
/// As [`super::gemm`]: Q8_K rows at `y[c]` (no side data).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q2_k<const C: usize, const GEMM: bool>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: packed super-block i < nb of the panel and Q8_K block i of each column are
    // readable (caller); unaligned loads.
    unsafe {
        let three = _mm512_set1_epi8(3);
        let nib = _mm512_set1_epi16(0x0F);
        let mut acc = [_mm512_setzero_ps(); C];
        let mut accm = [_mm512_setzero_ps(); C];
        for i in 0..nb {
            let p = panel.add(i * Q2K_PANEL_BYTES);
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()));
            let mx = _mm512_cvtph_ps(_mm256_loadu_si256(p.add(32).cast()));
            let yb: [*const u8; C] = std::array::from_fn(|c| y[c].add(i * Q8K_BYTES));
            let mut st = [_mm512_setzero_si512(); C];
            let mut mt = [_mm512_setzero_si512(); C];
            for h in 0..2 {
                let mut s = [_mm512_setzero_si512(); C];
                let mut m = [_mm512_setzero_si512(); C];
                let raw: [__m512i; 8] = std::array::from_fn(|q| {
                    _mm512_loadu_si512(p.add(Q2K_QS + 64 * (8 * h + q)).cast())
                });
                for sft in 0..4 {
                    // Sub-blocks 8h + 2·sft (quads 0..4) and 8h + 2·sft + 1 (quads 4..8),
                    // against the 32 activations from 128h + 32·sft; u = 4h + sft.
                    let u = 4 * h + sft;
                    if !GEMM {
                        prefetch_block(panel, Q2K_PANEL_BYTES, i + PREFETCH_BLOCKS, u, 8);
                    }
                    let pair =
                        _mm512_cvtepu8_epi16(_mm256_loadu_si256(p.add(Q2K_SC + 32 * u).cast()));
                    let scw = _mm512_and_si512(pair, nib);
                    let mw = _mm512_srli_epi16::<4>(pair);
                    let shift = _mm_cvtsi32_si128(2 * sft as i32);
                    let w: [__m512i; 8] = std::array::from_fn(|q| {
                        _mm512_and_si512(_mm512_srl_epi16(raw[q], shift), three)
                    });
                    for c in 0..C {
                        let yq = yb[c].add(Q8K_QS + 128 * h + 32 * sft);
                        let mut a0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], bcast(yq));
                        let mut a1 =
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[4], bcast(yq.add(16)));
                        for q in 1..4 {
                            a0 = _mm512_dpbusd_epi32(a0, w[q], bcast(yq.add(4 * q)));
                            a1 = _mm512_dpbusd_epi32(a1, w[q + 4], bcast(yq.add(16 + 4 * q)));
                        }
                        // (a0, a1) as the 16-bit halves of each lane, against (sc0, sc1).
                        let packed =
                            _mm512_mask_blend_epi16(0xAAAA_AAAA, a0, _mm512_slli_epi32::<16>(a1));
                        s[c] = _mm512_dpwssd_epi32(s[c], packed, scw);
                        let bs = bcast(yb[c].add(Q8K_BSUMS + 4 * u));
                        m[c] = _mm512_dpwssd_epi32(m[c], mw, bs);
                    }
                }
                for c in 0..C {
                    if GEMM {
                        let dy = _mm512_set1_ps(read_f32(yb[c]));
                        let (dd, dm) = (_mm512_mul_ps(dx, dy), _mm512_mul_ps(mx, dy));
                        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[c]), dd, acc[c]);
                        accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m[c]), dm, accm[c]);
                    } else {
                        st[c] = _mm512_add_epi32(st[c], s[c]);
                        mt[c] = _mm512_add_epi32(mt[c], m[c]);
                    }
                }
            }
            if !GEMM {
                for c in 0..C {
                    let dy = _mm512_set1_ps(read_f32(yb[c]));
                    let (dd, dm) = (_mm512_mul_ps(dx, dy), _mm512_mul_ps(mx, dy));
                    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(st[c]), dd, acc[c]);
                    accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mt[c]), dm, accm[c]);
                }
            }
        }
        std::array::from_fn(|c| _mm512_sub_ps(acc[c], accm[c]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::x86::panel::{self, Kind};
    use crate::quants::k_quants::repacked;

    use crate::kernels::test_rng as rng;

    /// `ROWS` rows of `nb` blocks of `bytes`: random bytes (every code, scale and minimum
    /// pattern) with finite f16 `d` and `dmin` at `halves`; some blocks at the extremes (all
    /// codes and scales at their largest, `d` and `dmin` at ±1).
    fn weights(nb: usize, bytes: usize, halves: [usize; 2], seed: &mut u64) -> Vec<u8> {
        let mut w: Vec<u8> = (0..ROWS * nb * bytes).map(|_| rng(seed) as u8).collect();
        for (b, blk) in w.chunks_exact_mut(bytes).enumerate() {
            if b % 7 == 3 {
                blk.fill(0xFF);
            }
            for o in halves {
                let v = match b % 7 {
                    3 => [-1.0, 1.0][o % 2],
                    _ => (rng(seed) % 2000) as f32 / 1000.0 - 1.0,
                };
                blk[o..o + 2].copy_from_slice(&half::f16::from_f32(v * 0.1).to_le_bytes());
            }
        }
        w
    }

    /// A Q8_K row of `nb` blocks: quantized from random values (the quantizer's bytes), or,
    /// when `raw`, random bytes with a finite scale (block sums unrelated to the codes, which
    /// the kernels must take as they are, wrapping pair sums included).
    fn column(nb: usize, raw: bool, seed: &mut u64) -> Vec<u8> {
        let mut q = vec![0u8; nb * Q8K_BYTES];
        if raw {
            q.iter_mut().for_each(|b| *b = rng(seed) as u8);
            for blk in q.chunks_exact_mut(Q8K_BYTES) {
                let d = (rng(seed) % 2000) as f32 / 1e5 - 0.01;
                blk[..4].copy_from_slice(&d.to_le_bytes());
            }
        } else {
            let x: Vec<f32> = (0..nb * 256)
                .map(|i| match i % 97 {
                    0 => -10.0,
                    _ => (rng(seed) % 20001) as f32 / 1000.0 - 10.0,
                })
                .collect();
            crate::quants::k_quants::q8_k::quantize_row_q8_k_ref(&x, &mut q)
                .expect("whole Q8_K blocks");
        }
        q
    }

    /// The builds this CPU runs: (VNNI, AVX2).
    fn builds() -> (bool, bool) {
        let f = crate::cpu::features();
        (
            f.runs(crate::quants::dispatch::Isa::Avx512Vnni),
            f.avx2_fma_f16c(),
        )
    }

    /// `C` columns against a packed panel by the build `vnni` (else AVX2), `kind` picking
    /// the type and order.
    fn gemm<const C: usize>(
        kind: Kind,
        vnni: bool,
        nb: usize,
        packed: &[u8],
        cols: &[Vec<u8>],
        auxs: &[Vec<u8>],
    ) -> [[f32; ROWS]; C] {
        let y: [*const u8; C] = std::array::from_fn(|c| cols[c].as_ptr());
        let ax: [*const u8; C] = std::array::from_fn(|c| auxs[c].as_ptr());
        let mut out = [[0f32; ROWS]; C];
        let p = packed.as_ptr();
        // SAFETY: the caller checked the CPU for the build; the panel holds nb packed
        // super-blocks, every column nb Q8_K blocks and their side data.
        unsafe {
            if vnni {
                let acc = match kind {
                    Kind::Q4KGemv => q4_k::<C, false>(nb, p, &y, &ax),
                    Kind::Q4KGemm => q4_k::<C, true>(nb, p, &y, &ax),
                    Kind::Q2KGemv => q2_k::<C, false>(nb, p, &y),
                    _ => q2_k::<C, true>(nb, p, &y),
                };
                for (o, a) in out.iter_mut().zip(acc) {
                    _mm512_storeu_ps(o.as_mut_ptr(), a);
                }
            } else {
                use super::super::repacked_avx2 as r;
                match kind {
                    Kind::Q4KGemv => r::q4_k::<C, false>(nb, p, &y, &ax, &mut out),
                    Kind::Q4KGemm => r::q4_k::<C, true>(nb, p, &y, &ax, &mut out),
                    Kind::Q2KGemv => r::q2_k::<C, false>(nb, p, &y, &mut out),
                    _ => r::q2_k::<C, true>(nb, p, &y, &mut out),
                }
            }
        }
        out
    }

    fn check<const C: usize>(kind: Kind, nb: usize, seed: &mut u64) {
        let (has_vnni, has_avx2) = builds();
        let q4 = matches!(kind, Kind::Q4KGemv | Kind::Q4KGemm);
        let (bytes, halves) = if q4 { (144, [0, 2]) } else { (84, [80, 82]) };
        let w = weights(nb, bytes, halves, seed);
        let rs = nb * bytes;
        let rows: [&[u8]; ROWS] = std::array::from_fn(|r| &w[r * rs..(r + 1) * rs]);
        let mut packed = vec![0u8; kind.panel_bytes(nb)];
        if q4 {
            pack_q4_k(nb, &rows, &mut packed);
        } else {
            pack_q2_k(nb, &rows, &mut packed);
        }
        let cols: Vec<Vec<u8>> = (0..C).map(|c| column(nb, c % 2 == 1, seed)).collect();
        let auxs: Vec<Vec<u8>> = cols
            .iter()
            .map(|q| {
                let mut a = vec![0u8; nb * kind.aux_bytes()];
                panel::activation_aux(kind, q, &mut a);
                a
            })
            .collect();
        let k = nb * 256;
        let want = |r: usize, c: usize| match kind {
            Kind::Q4KGemv => repacked::q4_k_gemv(k, rows[r], &cols[c]),
            Kind::Q4KGemm => repacked::q4_k_gemm(k, rows[r], &cols[c]),
            Kind::Q2KGemv => repacked::q2_k_gemv(k, rows[r], &cols[c]),
            _ => repacked::q2_k_gemm(k, rows[r], &cols[c]),
        };
        for (vnni, runs) in [(true, has_vnni), (false, has_avx2)] {
            if !runs {
                continue;
            }
            let got = gemm::<C>(kind, vnni, nb, &packed, &cols, &auxs);
            for (c, col) in got.iter().enumerate() {
                for (r, &v) in col.iter().enumerate() {
                    let want = want(r, c);
                    assert_eq!(
                        v.to_bits(),
                        want.to_bits(),
                        "{kind:?} vnni={vnni} nb={nb} C={C} row {r} col {c}: {v} vs {want}",
                    );
                }
            }
        }
    }

    /// Every element of both builds' panel products has the bits of the portable repacked
    /// bodies (the oracle of `tests/repacked_k.rs`), for both orders and types, odd block
    /// counts, quantized and raw activation blocks, extreme weight blocks, and every column
    /// count the kernels are instantiated with.
    #[test]
    fn repacked_panels_match_the_portable_bodies() {
        let mut seed = 41u64;
        for kind in [Kind::Q4KGemv, Kind::Q4KGemm, Kind::Q2KGemv, Kind::Q2KGemm] {
            for nb in [1usize, 2, 3, 7, 19] {
                check::<1>(kind, nb, &mut seed);
                check::<2>(kind, nb, &mut seed);
                check::<3>(kind, nb, &mut seed);
                check::<4>(kind, nb, &mut seed);
            }
        }
    }

    /// The two orders differ on these data (so the tests above tell them apart), and the
    /// raw activation blocks reach a wrapping pair sum.
    #[test]
    fn orders_and_wrapping_sums_are_exercised() {
        let mut seed = 43u64;
        let (nb, mut differ) = (3, 0);
        for _ in 0..4 {
            let w = weights(nb, 144, [0, 2], &mut seed);
            let y = column(nb, false, &mut seed);
            let k = nb * 256;
            differ += (repacked::q4_k_gemv(k, &w[..nb * 144], &y)
                != repacked::q4_k_gemm(k, &w[..nb * 144], &y)) as usize;
        }
        assert!(differ > 0);
        let mut wrapped = false;
        for _ in 0..50 {
            let y = column(1, true, &mut seed);
            let b = |j: usize| i16::from_le_bytes([y[Q8K_BSUMS + 2 * j], y[Q8K_BSUMS + 2 * j + 1]]);
            wrapped |= (0..8).any(|j| b(2 * j).checked_add(b(2 * j + 1)).is_none());
        }
        assert!(wrapped);
    }
}
