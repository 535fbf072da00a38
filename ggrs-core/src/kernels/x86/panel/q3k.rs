//! Panel kernels (`panel`: sixteen weight rows, one per 32-bit lane) for Q3_K weights
//! against fewer than eight Q8_K columns, in the order of ggml's AVX2
//! `ggml_vec_dot_q3_K_q8_K` (`k_quants::tiled::dot_q3_k_vec`, the oracle): per super-block
//! and row eight exact integer lanes, lane `l` summing `sc_j · code · y` over the values `p`
//! with `(p mod 32) / 4 = l` (`j = p / 16`, codes −4..=3, scales −32..=31), then
//! `lane = fma(d_y·d, lane, acc)`; at the end ggml's `hsum_float_8`. The AVX-512 VNNI build
//! and the AVX2 one give the same bits.
//!
//! # Layout
//!
//! One packed super-block of sixteen rows (1856 bytes: the file's 1760, the scales widened
//! to bytes, 32 bytes of padding so that every vector stays 64-byte aligned):
//!
//! ```text
//!   [ d: 16 × f16 ][ 32 bytes unused ]
//!   [ scale j: 16 × i8 ] × 16                 row r at byte r, the scale without its +32
//!   [ qs_q ][ hm_q ] for q = 0..8             lane r = qs bytes 4q..4q + 4, hmask bytes 4q..4q + 4
//!   [ qs_8+q ] × 8                            lane r = qs bytes 32 + 4q..32 + 4q + 4
//! ```
//!
//! That is the order the decoding kernel first reads them in (`qs_q` with `hm_q` for the
//! first half, the second half's codes after them), so that a panel streams front to back:
//! with the high bits at the end of the block it read slower (`docs/kernel-bench-notes.md`).
//!
//! Value `p = 128h + 32s + 4q + e` has its low two bits in bits `2s` of byte `e` of lane `r`
//! of `qs_8h+q` ([`qs_at`]) and its high bit in bit `4h + s` of byte `e` of `hm_q`
//! ([`hm_at`]): the quad of lane `q` in 32-value group `4h + s`, sub-block `8h + 2s + q / 4`.
//!
//! # Arithmetic
//!
//! A quad's unsigned code `u = code + 4` (0..=7: the low bits, plus 4 where the high bit is
//! set) against the broadcast activation quad. AVX2: `vpmaddubsw(u, y) − vpmaddubsw(4, y)`
//! gives the two pair sums of `code · y` exactly in 16 bits (at most 2·7·128 + 2·4·128 in
//! magnitude), and `vpmaddwd` by the scale in both halves adds them times the scale exactly
//! into the lane's 32 bits. VNNI: one `vpdpbusd` of `u` by the quad, seeded with `−4 · Σ y`
//! over the quad (computed once per block and column), gives `Σ code · y` (at most 4·4·128 in
//! magnitude, so its low 16 bits hold it), and `vpdpwssd` against the scale in the low half
//! (zero in the high half) adds it times the scale. Both sum the same integers into each lane.
//!
//! # Safety
//! The VNNI kernel needs a CPU with AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C), the AVX2 one
//! AVX2, FMA and F16C; the pointer contracts are those of [`super::gemm`].

use std::arch::x86_64::*;

use super::super::util::{read_f32, read_u32};
use super::{prefetch_block, ROWS};
use crate::quants::k_quants::q3_k_scale;

/// Bytes of a packed Q3_K super-block of sixteen rows.
pub(crate) const Q3K_PANEL_BYTES: usize = 1856;

/// Bytes of a Q3_K block in the file.
const Q3K_BYTES: usize = 110;
/// Bytes of a Q8_K block: f32 `d`, 256 codes, 16 i16 block sums.
const Q8K_BYTES: usize = 292;
/// Offset of the scales in a packed super-block.
const SC: usize = 64;
/// Offset of the first code vector in a packed super-block.
const CODES: usize = 320;

/// Offset in a packed super-block of `qs_v` (see the module docs).
#[inline(always)]
pub(super) const fn qs_at(v: usize) -> usize {
    if v < 8 {
        CODES + 128 * v
    } else {
        CODES + 1024 + 64 * (v - 8)
    }
}

/// Offset in a packed super-block of `hm_q` (see the module docs).
#[inline(always)]
pub(super) const fn hm_at(q: usize) -> usize {
    CODES + 128 * q + 64
}

/// Packs `nb` Q3_K super-blocks of sixteen rows (file layout: `hmask[32]`, `qs[64]`,
/// `scales[12]`, f16 `d`) into `dst` (see the module docs).
pub(super) fn pack_q3_k(nb: usize, src: &[&[u8]; ROWS], dst: &mut [u8]) {
    for i in 0..nb {
        let out = &mut dst[i * Q3K_PANEL_BYTES..(i + 1) * Q3K_PANEL_BYTES];
        out[32..64].fill(0);
        for (r, row) in src.iter().enumerate() {
            let blk = &row[i * Q3K_BYTES..(i + 1) * Q3K_BYTES];
            out[2 * r..2 * r + 2].copy_from_slice(&blk[108..110]);
            let scales: &[u8; 12] = blk[96..108].try_into().expect("12 scale bytes");
            for j in 0..16 {
                out[SC + 16 * j + r] = q3_k_scale(scales, j) as i8 as u8;
            }
            for (q, quad) in blk[32..96].chunks_exact(4).enumerate() {
                let v = qs_at(q) + 4 * r;
                out[v..v + 4].copy_from_slice(quad);
            }
            for (q, quad) in blk[..32].chunks_exact(4).enumerate() {
                let v = hm_at(q) + 4 * r;
                out[v..v + 4].copy_from_slice(quad);
            }
        }
    }
}

/// The shuffle that puts byte `row0 + 4L + i` (`L` the 128-bit lane, `i` the dword in it) in
/// the high byte of both 16-bit halves of dword `i`, zero below: an arithmetic shift by 8
/// then sign-extends it into both halves.
fn dup_ctrl(row0: usize) -> [i8; 64] {
    std::array::from_fn(|b| {
        let (lane128, i, byte) = (b / 16, (b % 16) / 4, b % 4);
        if byte % 2 == 1 {
            (row0 + 4 * lane128 + i) as i8
        } else {
            -1
        }
    })
}

/// Prefetches (into L1) packed super-block `i + 2` while the AVX2 decode works on block `i`
/// (a prefetch never faults; `wrapping_add` keeps the arithmetic defined).
#[inline(always)]
fn prefetch_ahead(panel: *const u8, i: usize) {
    let ahead = panel.wrapping_add((i + 2) * Q3K_PANEL_BYTES);
    for off in (0..Q3K_PANEL_BYTES).step_by(64) {
        // SAFETY: a prefetch is a hint; it reads nothing and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(off).cast()) };
    }
}

/// How many packed super-blocks ahead the VNNI decode prefetches, an eighth of a block per
/// pass (`panel::prefetch_block`).
const PREFETCH_BLOCKS: usize = 4;

/// One column against a Q3_K panel of `nb` super-blocks (see the module docs): lane `r` is
/// row `r` · the column.
///
/// # Safety
/// As [`super::gemm`] (one Q8_K row, no side data), on a CPU with AVX-512
/// F/BW/VL/VNNI.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q3_k_vnni(nb: usize, panel: *const u8, y: *const u8) -> __m512 {
    // SAFETY: packed super-block i < nb of the panel and Q8_K block i of the column are
    // readable (caller); unaligned loads; the stores write `seeds`.
    unsafe {
        let four = _mm512_set1_epi8(4);
        let three = _mm512_set1_epi8(3);
        let low16 = _mm512_set1_epi32(0xFFFF);
        let mut acc = [_mm512_setzero_ps(); 8];
        // −4 · Σ y over every activation quad of the block (quad `p / 4` of value `p`).
        let mut seeds = [0i32; 64];
        for i in 0..nb {
            let p = panel.add(i * Q3K_PANEL_BYTES);
            let yb = y.add(i * Q8K_BYTES);
            for t in 0..4 {
                let v = _mm512_loadu_si512(yb.add(4 + 64 * t).cast());
                let s4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), four, v);
                let neg = _mm512_sub_epi32(_mm512_setzero_si512(), s4);
                _mm512_storeu_si512(seeds.as_mut_ptr().add(16 * t).cast(), neg);
            }
            let mut lanes = [_mm512_setzero_si512(); 8];
            for h in 0..2 {
                for s in 0..4 {
                    prefetch_block(panel, Q3K_PANEL_BYTES, i + PREFETCH_BLOCKS, 4 * h + s, 8);
                    let j = 8 * h + 2 * s;
                    // Sub-block j's scale of row r in the low half of dword r, zero above.
                    let sc = |j: usize| {
                        let b = _mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(SC + 16 * j).cast()));
                        _mm512_and_si512(b, low16)
                    };
                    let sc = [sc(j), sc(j + 1)];
                    let lo = _mm_cvtsi32_si128(2 * s as i32);
                    // Bit 4h + s of every byte of `hm` to bit 2 (16-bit shifts: the bits that
                    // cross into a byte are masked off).
                    let k = (4 * h + s) as i32;
                    let hi = _mm_cvtsi32_si128((k - 2).abs());
                    for (q, lane) in lanes.iter_mut().enumerate() {
                        let qs = _mm512_loadu_si512(p.add(qs_at(8 * h + q)).cast());
                        let hm = _mm512_loadu_si512(p.add(hm_at(q)).cast());
                        let hm = if k >= 2 {
                            _mm512_srl_epi16(hm, hi)
                        } else {
                            _mm512_sll_epi16(hm, hi)
                        };
                        // (qs >> 2s) & 3 | (hm & 4)
                        let u = _mm512_ternarylogic_epi32::<0xEC>(
                            _mm512_srl_epi16(qs, lo),
                            _mm512_and_si512(hm, four),
                            three,
                        );
                        let yv = _mm512_set1_epi32(
                            read_u32(yb.add(4 + 128 * h + 32 * s + 4 * q)) as i32
                        );
                        // Σ code·y over the quad = Σ u·y − 4·Σ y: at most 4·4·128 in
                        // magnitude, so its low 16 bits hold it and `vpdpwssd` against the
                        // scale (high half zero) adds exactly scale · it.
                        let seed = _mm512_set1_epi32(seeds[32 * h + 8 * s + q]);
                        let dot = _mm512_dpbusd_epi32(seed, u, yv);
                        *lane = _mm512_dpwssd_epi32(*lane, dot, sc[q / 4]);
                    }
                }
            }
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()));
            let d = _mm512_mul_ps(_mm512_set1_ps(read_f32(yb)), dx);
            for (a, l) in acc.iter_mut().zip(lanes) {
                *a = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l), *a);
            }
        }
        _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
            _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])),
        )
    }
}

/// One column against a Q3_K panel of `nb` super-blocks (see the module docs), eight rows at
/// a time: `out[r]` is row `r` · the column.
///
/// # Safety
/// As [`super::gemm`] (one Q8_K row, no side data), on a CPU with AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q3_k_avx2(nb: usize, panel: *const u8, y: *const u8, out: &mut [f32; ROWS]) {
    // SAFETY: as `q3_k_vnni`; the stores write `out`'s 16 f32.
    unsafe {
        let four = _mm256_set1_epi8(4);
        let three = _mm256_set1_epi8(3);
        for half in 0..2 {
            let ctrl = _mm256_loadu_si256(dup_ctrl(8 * half).as_ptr().cast());
            let mut acc = [_mm256_setzero_ps(); 8];
            for i in 0..nb {
                let p = panel.add(i * Q3K_PANEL_BYTES);
                if half == 0 {
                    // The block `STREAM_AHEAD` further on, while this pass streams it.
                    super::stream_ahead(panel, i * Q3K_PANEL_BYTES, Q3K_PANEL_BYTES);
                }
                if half == 0 {
                    prefetch_ahead(panel, i);
                }
                let yb = y.add(i * Q8K_BYTES);
                let mut lanes = [_mm256_setzero_si256(); 8];
                for h in 0..2 {
                    for s in 0..4 {
                        let j = 8 * h + 2 * s;
                        let sc = |j: usize| {
                            let b = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                                p.add(SC + 16 * j).cast(),
                            ));
                            _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(b, ctrl))
                        };
                        let sc = [sc(j), sc(j + 1)];
                        let lo = _mm_cvtsi32_si128(2 * s as i32);
                        let k = (4 * h + s) as i32;
                        let hi = _mm_cvtsi32_si128((k - 2).abs());
                        for (q, lane) in lanes.iter_mut().enumerate() {
                            let qs = _mm256_loadu_si256(p.add(qs_at(8 * h + q) + 32 * half).cast());
                            let hm = _mm256_loadu_si256(p.add(hm_at(q) + 32 * half).cast());
                            let hm = if k >= 2 {
                                _mm256_srl_epi16(hm, hi)
                            } else {
                                _mm256_sll_epi16(hm, hi)
                            };
                            let u = _mm256_or_si256(
                                _mm256_and_si256(_mm256_srl_epi16(qs, lo), three),
                                _mm256_and_si256(hm, four),
                            );
                            let yv = _mm256_set1_epi32(read_u32(
                                yb.add(4 + 128 * h + 32 * s + 4 * q),
                            ) as i32);
                            let p16 = _mm256_sub_epi16(
                                _mm256_maddubs_epi16(u, yv),
                                _mm256_maddubs_epi16(four, yv),
                            );
                            *lane = _mm256_add_epi32(*lane, _mm256_madd_epi16(p16, sc[q / 4]));
                        }
                    }
                }
                let dx = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16 * half).cast()));
                let d = _mm256_mul_ps(_mm256_set1_ps(read_f32(yb)), dx);
                for (a, l) in acc.iter_mut().zip(lanes) {
                    *a = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(l), *a);
                }
            }
            let t = _mm256_add_ps(
                _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6])),
                _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7])),
            );
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * half), t);
        }
    }
}
