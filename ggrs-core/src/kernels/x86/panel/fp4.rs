//! Panel kernels (`panel`: sixteen weight rows per panel, one row per 32-bit lane) of MXFP4
//! in the order of ggml's repacked `mxfp4_8x8` GEMV and GEMM ([`Kind::MXFP4Chain`]): an
//! AVX-512 VNNI build and an AVX2 one, same layout, same bits.
//!
//! # Layout
//!
//! An MXFP4 block is an E8M0 exponent byte `e` and 16 bytes of 4-bit level indices (byte `j`:
//! value `j` in its low nibble, value `j + 16` in its high one), so its indices are laid out
//! as Q4_0's codes and the panel is Q4_0's (`panel`'s module docs: blocks in pairs, every
//! vector 64-byte aligned), with one change: the sixteen 16-bit scales of a block are the
//! scale `2^(e − 128)` (`mxfp4::e8m0_half`) as a bfloat16, which holds it exactly (normal
//! for `e ≥ 2`: bits `(e − 1) << 7`; the two subnormals `e = 0, 1`: bits `0x20 << e`), so a
//! kernel widens it to f32 with one shift. A decode streams 288 bytes per block of sixteen
//! rows against the file's 272.
//!
//! # Arithmetic
//!
//! The indices are looked up in the level table (`KVALUES_FP4`, the E2M1 values doubled,
//! −12..=12) plus [`OFFSET`] = 12, which makes every level an unsigned byte 0..=24, and
//! multiplied with the activation quads: `vpdpbusd` (VNNI), or `vpmaddubsw` (pairs at most
//! 2·24·128 = 6144 in magnitude, four of them summed in 16 bits) and `vpmaddwd` by ones
//! (AVX2). The seed `−12 · Σ y` of the block (`panel::activation_aux`) takes the offset back
//! out, so each lane holds the block's exact sum `s = Σ level·y`, for any activation bytes.
//! Then `acc = fma(f32(s), dx·dy, acc)` per block, as the portable
//! `quants::mxfp4::dot_mxfp4_chain`.
//!
//! ggml's kernels multiply through `vpsignb` (`mxfp4::sign_product`), which differs from
//! the exact product only for an activation code −128 against a negative level; the Q8_0
//! quantizers `mul_mat` runs never write −128, so on its activations the bits are the
//! portable order's.
//!
//! # Safety
//! The VNNI functions need a CPU with AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C), the AVX2
//! ones AVX2, FMA and F16C; the kernels' pointer contracts are those of [`super::gemm`].

use std::arch::x86_64::*;

use super::super::util::{read_f32, read_u32};
use super::avx2::stream_halves;
use super::{prefetch, q4_0_at, stream_ahead, Ahead, Kind, AUX_BYTES, Q4_0_PAIR, ROWS};
use crate::quants::mxfp4::{e8m0_half, KVALUES_FP4};

/// Bytes of a Q8_0 block (activations).
const Q8_0_BYTES: usize = 34;
/// Bytes of an MXFP4 block.
pub(super) const MXFP4_BYTES: usize = 17;

/// The offset that makes every level unsigned (the largest magnitude, 12).
pub(super) const OFFSET: i32 = 12;

/// The levels plus [`OFFSET`], as unsigned bytes.
const LEVELS_U8: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (KVALUES_FP4[i] as i32 + OFFSET) as u8;
        i += 1;
    }
    t
};

/// The block scale `2^(e − 128)` as the upper half of its f32 bits (a bfloat16, exact: the
/// lower half is zero for every `e`).
#[inline(always)]
pub(super) fn scale_bf16(e: u8) -> u16 {
    let bits = e8m0_half(e).to_bits();
    debug_assert_eq!(bits & 0xFFFF, 0);
    (bits >> 16) as u16
}

/// Packs `nb` MXFP4 blocks of the sixteen rows `src` into `dst` (the layout of the module
/// docs), in portable code.
pub(super) fn pack_mxfp4(nb: usize, src: &[&[u8]; ROWS], dst: &mut [u8]) {
    for i in 0..nb {
        let at = Kind::MXFP4Chain.block_at(i);
        for (r, row) in src.iter().enumerate() {
            let blk = &row[i * MXFP4_BYTES..(i + 1) * MXFP4_BYTES];
            dst[at.d + 2 * r..at.d + 2 * r + 2].copy_from_slice(&scale_bf16(blk[0]).to_le_bytes());
            for (g, q) in blk[1..].chunks_exact(4).enumerate() {
                let v = at.v + 64 * g + 4 * r;
                dst[v..v + 4].copy_from_slice(q);
            }
        }
    }
}

/// [`pack_mxfp4`] with AVX-512: each block's sixteen 16-byte index runs transposed into
/// four vectors by dword permutes (as `panel`'s Q4_0 packer does), `ahead` prefetched on the
/// way.
///
/// # Safety
/// AVX-512 F; `nb` whole MXFP4 blocks readable at every `rows[r]`;
/// `Kind::MXFP4Chain.panel_bytes(nb)` bytes writable at `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn pack_mxfp4_vnni(
    nb: usize,
    rows: &[*const u8; ROWS],
    out: *mut u8,
    ahead: Ahead,
) {
    // SAFETY: reads stay inside block i < nb of each row (bytes 1..17 of it), writes inside
    // packed block i.
    unsafe {
        // Level 1: from two vectors of four rows × four dwords (row-major), the dwords 0
        // and 1 (`lo`) or 2 and 3 (`hi`) of all eight rows, dword-major.
        let idx_lo = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
        let idx_hi = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
        for i in 0..nb {
            prefetch(ahead, i, nb);
            let (sc, vec) = q4_0_at(i);
            let mut d = [0u16; ROWS];
            for (r, d) in d.iter_mut().enumerate() {
                *d = scale_bf16(*rows[r].add(i * MXFP4_BYTES));
            }
            _mm256_storeu_si256(out.add(sc).cast(), _mm256_loadu_si256(d.as_ptr().cast()));
            let ld = |r: usize| _mm_loadu_si128(rows[r].add(i * MXFP4_BYTES + 1).cast());
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
            let dst = out.add(vec);
            for (g, vg) in v.iter().enumerate() {
                _mm512_storeu_si512(dst.add(64 * g).cast(), *vg);
            }
        }
    }
}

/// `C` columns against an MXFP4 panel in the chain order (AVX-512 VNNI).
///
/// # Safety
/// As [`super::gemm`] (Q8_0 columns with their side data for [`Kind::MXFP4Chain`]);
/// AVX-512 VNNI.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn mxfp4_chain_vnni<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: packed block i < nb of the panel, Q8_0 block i of each column and its side
    // data are readable (caller); unaligned loads.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let levels = _mm512_broadcast_i32x4(_mm_loadu_si128(LEVELS_U8.as_ptr().cast()));
        let quad = |p: *const u8| _mm512_set1_epi32(read_u32(p) as i32);
        let mut acc = [_mm512_setzero_ps(); C];
        for i in 0..nb {
            let (sc, vec) = q4_0_at(i);
            if i % 2 == 0 {
                stream_ahead(panel, sc, Q4_0_PAIR);
            }
            // The bfloat16 scales widened: exact.
            let dx16 = _mm512_cvtepu16_epi32(_mm256_loadu_si256(panel.add(sc).cast()));
            let dx = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(dx16));
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

/// `C` columns against an MXFP4 panel in the chain order (AVX2: two halves of eight rows,
/// the second re-reading the panel from cache); `out[c][r]` row `r` · column `c`.
///
/// # Safety
/// As [`super::gemm`] (Q8_0 columns with their side data for [`Kind::MXFP4Chain`]), on a
/// CPU with AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn mxfp4_chain_avx2<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: packed block i < nb of the panel, Q8_0 block i of each column and its side
    // data are readable (caller); unaligned loads; the stores write `out`'s arrays.
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(LEVELS_U8.as_ptr().cast()));
        let quad = |p: *const u8| _mm256_set1_epi32(read_u32(p) as i32);
        // Bytes per block, on average (blocks are packed in pairs).
        let block = Kind::MXFP4Chain.panel_bytes(2) / 2;
        for half in 0..2 {
            let mut acc = [_mm256_setzero_ps(); C];
            for i in 0..nb {
                stream_halves::<C>(
                    panel,
                    half,
                    i * block,
                    block,
                    Kind::MXFP4Chain.panel_bytes(nb),
                );
                let (sc, vec) = q4_0_at(i);
                let dx16 = _mm256_cvtepu16_epi32(_mm_loadu_si128(panel.add(sc + 16 * half).cast()));
                let dx = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(dx16));
                let p = panel.add(vec + 32 * half);
                let mut s = [_mm256_set1_epi32(0); C];
                for c in 0..C {
                    s[c] = _mm256_set1_epi32(read_u32(aux[c].add(i * AUX_BYTES + 4)) as i32);
                }
                // Two quad groups summed in 16 bits (four pairs, at most 4·6144 in
                // magnitude), then widened.
                for gg in 0..2 {
                    let mut s16 = [_mm256_setzero_si256(); C];
                    for g in 2 * gg..2 * gg + 2 {
                        let v = _mm256_loadu_si256(p.add(64 * g).cast());
                        let lo = _mm256_shuffle_epi8(levels, _mm256_and_si256(v, low));
                        let hi = _mm256_shuffle_epi8(
                            levels,
                            _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                        );
                        for (c, s16) in s16.iter_mut().enumerate() {
                            let yq = y[c].add(i * Q8_0_BYTES + 2 + 4 * g);
                            let m = _mm256_add_epi16(
                                _mm256_maddubs_epi16(lo, quad(yq)),
                                _mm256_maddubs_epi16(hi, quad(yq.add(16))),
                            );
                            *s16 = _mm256_add_epi16(*s16, m);
                        }
                    }
                    for (s, s16) in s.iter_mut().zip(&s16) {
                        *s = _mm256_add_epi32(*s, _mm256_madd_epi16(*s16, ones));
                    }
                }
                for (c, a) in acc.iter_mut().enumerate() {
                    let dy = read_f32(aux[c].add(i * AUX_BYTES));
                    let d = _mm256_mul_ps(dx, _mm256_set1_ps(dy));
                    *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), d, *a);
                }
            }
            for (o, a) in out.iter_mut().zip(&acc) {
                _mm256_storeu_ps(o.as_mut_ptr().add(8 * half), *a);
            }
        }
    }
}

/// Bytes of an NVFP4 block.
pub(super) const NVFP4_BYTES: usize = 36;

/// Packs `nb` NVFP4 blocks of the sixteen rows `src` into `dst` (the layout of
/// [`Kind::NVFP4Lanes`]: per block the rows' four UE4M3 bytes as one dword per lane, then
/// eight vectors, lane `r` of vector `q` bytes `4q..4q + 4` of row `r`'s `qs`), in portable
/// code.
pub(super) fn pack_nvfp4(nb: usize, src: &[&[u8]; ROWS], dst: &mut [u8]) {
    for i in 0..nb {
        let at = Kind::NVFP4Lanes.block_at(i);
        for (r, row) in src.iter().enumerate() {
            let blk = &row[i * NVFP4_BYTES..(i + 1) * NVFP4_BYTES];
            dst[at.d + 4 * r..at.d + 4 * r + 4].copy_from_slice(&blk[..4]);
            for (q, quad) in blk[4..].chunks_exact(4).enumerate() {
                let v = at.v + 64 * q + 4 * r;
                dst[v..v + 4].copy_from_slice(quad);
            }
        }
    }
}

/// [`pack_nvfp4`] with AVX-512: the sixteen rows' 36-byte blocks read as dwords (the
/// scales' dword and the eight of `qs`) and transposed by one gather per packed vector of
/// the block; `ahead` prefetched on the way.
///
/// # Safety
/// AVX-512 F; `nb` whole NVFP4 blocks readable at every `rows[r]`;
/// `Kind::NVFP4Lanes.panel_bytes(nb)` bytes writable at `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn pack_nvfp4_vnni(
    nb: usize,
    rows: &[*const u8; ROWS],
    out: *mut u8,
    ahead: Ahead,
) {
    // SAFETY: every dword read lies inside block i < nb of its row, writes inside packed
    // block i.
    unsafe {
        for i in 0..nb {
            prefetch(ahead, i, nb);
            let dst = out.add(i * Kind::NVFP4Lanes.panel_bytes(1));
            for q in 0..9 {
                let mut lanes = [0u32; ROWS];
                for (r, l) in lanes.iter_mut().enumerate() {
                    *l = read_u32(rows[r].add(i * NVFP4_BYTES + 4 * q));
                }
                _mm512_storeu_si512(
                    dst.add(64 * q).cast(),
                    _mm512_loadu_si512(lanes.as_ptr().cast()),
                );
            }
        }
    }
}

/// The four sub-block scales of sixteen NVFP4 rows (`ue4m3_half` of byte `s` of each lane of
/// `d`), computed: 0 for the byte `0x7F` (not `0xFF`: ggml tests the byte before it drops
/// the top bit); else with `t = byte & 0x7F`, `t · 2⁻¹⁰` for `t < 8` (the subnormals, zero
/// included) and otherwise the f32 with exponent `(t >> 3) + 119` and mantissa `t & 7` on
/// top, `t << 20` plus `119 << 23`. All exact.
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
unsafe fn ue4m3_scales_512(d: __m512i) -> [__m512; 4] {
    // SAFETY: register-only AVX-512 F operations.
    unsafe {
        // A loop, not `array::from_fn`: a closure here would not inherit the caller's
        // target features and its intrinsics would not inline.
        let mut out = [_mm512_setzero_ps(); 4];
        for (s, o) in out.iter_mut().enumerate() {
            let byte = _mm512_and_si512(
                _mm512_srlv_epi32(d, _mm512_set1_epi32(8 * s as i32)),
                _mm512_set1_epi32(0xFF),
            );
            let t = _mm512_and_si512(byte, _mm512_set1_epi32(0x7F));
            let normal = _mm512_castsi512_ps(_mm512_add_epi32(
                _mm512_slli_epi32::<20>(t),
                _mm512_set1_epi32(119 << 23),
            ));
            let sub = _mm512_mul_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(1.0 / 1024.0));
            let small = _mm512_cmplt_epi32_mask(t, _mm512_set1_epi32(8));
            let r = _mm512_mask_blend_ps(small, normal, sub);
            let nan = _mm512_cmpeq_epi32_mask(byte, _mm512_set1_epi32(0x7F));
            *o = _mm512_mask_mov_ps(r, nan, _mm512_setzero_ps());
        }
        out
    }
}

/// [`ue4m3_scales_512`] for eight rows (AVX2).
///
/// # Safety
/// AVX2.
#[inline(always)]
unsafe fn ue4m3_scales_256(d: __m256i) -> [__m256; 4] {
    // SAFETY: register-only AVX2 operations.
    unsafe {
        let mut out = [_mm256_setzero_ps(); 4];
        for (s, o) in out.iter_mut().enumerate() {
            let byte = _mm256_and_si256(
                _mm256_srlv_epi32(d, _mm256_set1_epi32(8 * s as i32)),
                _mm256_set1_epi32(0xFF),
            );
            let t = _mm256_and_si256(byte, _mm256_set1_epi32(0x7F));
            let normal = _mm256_castsi256_ps(_mm256_add_epi32(
                _mm256_slli_epi32::<20>(t),
                _mm256_set1_epi32(119 << 23),
            ));
            let sub = _mm256_mul_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(1.0 / 1024.0));
            let small = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), t));
            let r = _mm256_blendv_ps(normal, sub, small);
            let nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(byte, _mm256_set1_epi32(0x7F)));
            *o = _mm256_andnot_ps(nan, r);
        }
        out
    }
}

/// Where lane `k` (0..8) of Q8_0 block `h` of an NVFP4 block reads its four levels: the
/// packed vector (`q` of [`pack_nvfp4`]) and whether they are its high nibbles. Lane `k`
/// holds values `32h + 4k..32h + 4k + 4`, of sub-block `s = 2h + k/4`: the low nibbles of
/// `qs[8s + 4(k % 4)..]` for `k % 4 < 2`, else the high nibbles of `qs[8s + 4(k % 4 − 2)..]`.
#[inline(always)]
const fn nvfp4_lane(h: usize, k: usize) -> (usize, bool) {
    let s = 2 * h + k / 4;
    (2 * s + k % 2, k % 4 >= 2)
}

/// `C` columns against an NVFP4 panel in the lane order of ggml's `ggml_vec_dot_nvfp4_q8_0`
/// (AVX-512 VNNI): per Q8_0 block `h` of an NVFP4 block, lane `k`'s exact sum (`vpdpbusd`
/// of the levels plus 12 from the seed `−12 ·` the quad's sum), `acc_k = fma(ue·dy,
/// f32(lane), acc_k)` with the scale of the lane's sub-block; ggml's `hsum_float_8` tree at
/// the end.
///
/// # Safety
/// As [`super::gemm`] (Q8_0 columns with their side data for [`Kind::NVFP4Lanes`]);
/// AVX-512 VNNI.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn nvfp4_lanes_vnni<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: packed block i < nb of the panel, Q8_0 blocks 2i, 2i + 1 of each column and
    // their side data are readable (caller); unaligned loads.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        let levels = _mm512_broadcast_i32x4(_mm_loadu_si128(LEVELS_U8.as_ptr().cast()));
        let quad = |p: *const u8| _mm512_set1_epi32(read_u32(p) as i32);
        let bb = Kind::NVFP4Lanes.panel_bytes(1);
        let mut acc = [[_mm512_setzero_ps(); 8]; C];
        for i in 0..nb {
            stream_ahead(panel, i * bb, bb);
            let p = panel.add(i * bb);
            let ue = ue4m3_scales_512(_mm512_loadu_si512(p.cast()));
            for h in 0..2 {
                // The levels (plus 12) of sub-blocks 2h and 2h + 1: lanes 0..8's operands.
                let mut nib = [_mm512_setzero_si512(); 8];
                for (k, n) in nib.iter_mut().enumerate() {
                    let (q, high) = nvfp4_lane(h, k);
                    let v = _mm512_loadu_si512(p.add(64 + 64 * q).cast());
                    let v = if high { _mm512_srli_epi16::<4>(v) } else { v };
                    *n = _mm512_shuffle_epi8(levels, _mm512_and_si512(v, low));
                }
                for (c, acc_c) in acc.iter_mut().enumerate() {
                    let yq = y[c].add((2 * i + h) * Q8_0_BYTES + 2);
                    let ax = aux[c].add((2 * i + h) * AUX_BYTES);
                    let dy = _mm512_set1_ps(read_f32(ax));
                    let sc = [
                        _mm512_mul_ps(ue[2 * h], dy),
                        _mm512_mul_ps(ue[2 * h + 1], dy),
                    ];
                    for (k, a) in acc_c.iter_mut().enumerate() {
                        let seed = _mm512_set1_epi32(read_u32(ax.add(8 + 4 * k)) as i32);
                        let s = _mm512_dpbusd_epi32(seed, nib[k], quad(yq.add(4 * k)));
                        *a = _mm512_fmadd_ps(sc[k / 4], _mm512_cvtepi32_ps(s), *a);
                    }
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

/// [`nvfp4_lanes_vnni`] for CPUs with AVX2 (two halves of eight rows; `vpmaddubsw` of the
/// levels plus 12 with the quad, pairs at most 2·24·128 in magnitude, `vpmaddwd` by ones,
/// plus the seed): the same exact lane sums and f32 steps, so the same bits.
///
/// # Safety
/// As [`super::gemm`] (Q8_0 columns with their side data for [`Kind::NVFP4Lanes`]), on a
/// CPU with AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nvfp4_lanes_avx2<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
    out: &mut [[f32; ROWS]; C],
) {
    // SAFETY: as `nvfp4_lanes_vnni`; the stores write `out`'s arrays.
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(LEVELS_U8.as_ptr().cast()));
        let quad = |p: *const u8| _mm256_set1_epi32(read_u32(p) as i32);
        let bb = Kind::NVFP4Lanes.panel_bytes(1);
        for half in 0..2 {
            let mut acc = [[_mm256_setzero_ps(); 8]; C];
            for i in 0..nb {
                stream_halves::<C>(panel, half, i * bb, bb, Kind::NVFP4Lanes.panel_bytes(nb));
                let p = panel.add(i * bb);
                let ue = ue4m3_scales_256(_mm256_loadu_si256(p.add(32 * half).cast()));
                for h in 0..2 {
                    for (c, acc_c) in acc.iter_mut().enumerate() {
                        let yq = y[c].add((2 * i + h) * Q8_0_BYTES + 2);
                        let ax = aux[c].add((2 * i + h) * AUX_BYTES);
                        let dy = _mm256_set1_ps(read_f32(ax));
                        let sc = [
                            _mm256_mul_ps(ue[2 * h], dy),
                            _mm256_mul_ps(ue[2 * h + 1], dy),
                        ];
                        for (k, a) in acc_c.iter_mut().enumerate() {
                            let (q, high) = nvfp4_lane(h, k);
                            let v = _mm256_loadu_si256(p.add(64 + 64 * q + 32 * half).cast());
                            let v = if high { _mm256_srli_epi16::<4>(v) } else { v };
                            let x = _mm256_shuffle_epi8(levels, _mm256_and_si256(v, low));
                            let seed = _mm256_set1_epi32(read_u32(ax.add(8 + 4 * k)) as i32);
                            let m = _mm256_madd_epi16(
                                _mm256_maddubs_epi16(x, quad(yq.add(4 * k))),
                                ones,
                            );
                            let s = _mm256_add_epi32(m, seed);
                            *a = _mm256_fmadd_ps(sc[k / 4], _mm256_cvtepi32_ps(s), *a);
                        }
                    }
                }
            }
            for (o, a) in out.iter_mut().zip(&acc) {
                _mm256_storeu_ps(o.as_mut_ptr().add(8 * half), super::avx2::lanes_total(a));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{activation_aux, available, gemm_in, pack, pack_portable, vnni, Build};
    use super::*;
    use crate::quants::mxfp4::dot_mxfp4_chain;
    use crate::quants::nvfp4::dot_nvfp4_x86;

    use crate::kernels::test_rng as rng;

    /// Sixteen rows of `nb` blocks of `kind`'s type: any bytes, MXFP4's exponents 0..=200
    /// (both subnormal scales included; the sums stay finite). NVFP4's scale bytes take all
    /// 256 values (the unused `0x7F`, the subnormals, the top bit set).
    fn weights(kind: Kind, nb: usize, seed: &mut u64) -> Vec<u8> {
        let bytes = kind.src_block_bytes();
        let mut w: Vec<u8> = (0..ROWS * nb * bytes).map(|_| rng(seed) as u8).collect();
        if kind == Kind::MXFP4Chain {
            for blk in w.chunks_exact_mut(bytes) {
                blk[0] = (rng(seed) % 201) as u8;
            }
        }
        w
    }

    /// A Q8_0 row of `n` values: codes from `lo..=127`, scales of both signs.
    fn column(n: usize, lo: i32, seed: &mut u64) -> Vec<u8> {
        let mut q = vec![0u8; n / 32 * Q8_0_BYTES];
        for blk in q.chunks_exact_mut(Q8_0_BYTES) {
            let d = (rng(seed) % 2001) as f32 / 1000.0 - 1.0;
            blk[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
            for b in &mut blk[2..] {
                *b = (lo + (rng(seed) % (128 - lo) as u32) as i32) as i8 as u8;
            }
        }
        q
    }

    /// The builds this CPU runs (true: VNNI).
    fn builds() -> Vec<Build> {
        let mut b = Vec::new();
        if vnni() {
            b.push(Build::Avx512Vnni);
        }
        if crate::cpu::features().avx2_fma_f16c() {
            b.push(Build::Avx2);
        }
        b
    }

    /// Packs (checking the packers agree), and runs `C` columns through every build:
    /// `[build][c][r]`.
    fn products<const C: usize>(
        kind: Kind,
        nb: usize,
        w: &[u8],
        cols: &[Vec<u8>],
    ) -> Vec<[[f32; ROWS]; C]> {
        let rs = nb * kind.src_block_bytes();
        let rows: [*const u8; ROWS] = std::array::from_fn(|r| w[r * rs..].as_ptr());
        let mut panel = vec![0u8; kind.panel_bytes(nb)];
        let mut portable = vec![0u8; kind.panel_bytes(nb)];
        // SAFETY: `available` was checked by the caller; the rows hold nb blocks each, the
        // buffers one panel.
        unsafe {
            pack(kind, nb, &rows, panel.as_mut_ptr(), Ahead::NONE);
            pack_portable(kind, nb, &rows, portable.as_mut_ptr());
        }
        assert!(panel == portable, "{kind:?} nb={nb}: the packers differ");
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
        builds()
            .into_iter()
            .map(|b| {
                let mut out = [[0f32; ROWS]; C];
                // SAFETY: the CPU runs build `b`; the buffers hold nb blocks each.
                unsafe { gemm_in::<C>(b, kind, nb, panel.as_ptr(), &y, &aux, &mut out, true) };
                out
            })
            .collect()
    }

    /// `C` columns from the quantizers' range (|y| ≤ 127): every build has the bits of the
    /// portable order of `kind`.
    fn check<const C: usize>(kind: Kind, nb: usize, seed: &mut u64) {
        let n = nb * kind.block_values();
        let w = weights(kind, nb, seed);
        let cols: Vec<Vec<u8>> = (0..C).map(|_| column(n, -127, seed)).collect();
        let rs = nb * kind.src_block_bytes();
        for (b, out) in products::<C>(kind, nb, &w, &cols).iter().enumerate() {
            for (c, col) in cols.iter().enumerate() {
                for r in 0..ROWS {
                    let row = &w[r * rs..(r + 1) * rs];
                    let want = match kind {
                        Kind::MXFP4Chain => dot_mxfp4_chain(n, row, col),
                        _ => dot_nvfp4_x86(n, row, col),
                    };
                    assert_eq!(
                        out[c][r].to_bits(),
                        want.to_bits(),
                        "{kind:?} build {b} nb={nb} C={C} row {r} col {c}: {} vs {want}",
                        out[c][r]
                    );
                }
            }
        }
    }

    /// Any weight bytes, short and longer rows, every column count a pass may take (1–8):
    /// the portable order's bits, in both builds, and the packers agree.
    #[test]
    fn fp4_panels_are_the_portable_orders() {
        if !available() {
            return;
        }
        let mut seed = 41u64;
        for kind in [Kind::MXFP4Chain, Kind::NVFP4Lanes] {
            for nb in [1usize, 2, 3, 4, 7, 14] {
                check::<1>(kind, nb, &mut seed);
                check::<2>(kind, nb, &mut seed);
                check::<3>(kind, nb, &mut seed);
                check::<4>(kind, nb, &mut seed);
                check::<5>(kind, nb, &mut seed);
                check::<6>(kind, nb, &mut seed);
                check::<7>(kind, nb, &mut seed);
                check::<8>(kind, nb, &mut seed);
            }
        }
    }

    /// With −128 activation codes too, both builds give the same bits (the exact sums).
    #[test]
    fn fp4_panel_builds_agree_on_any_activations() {
        if !available() {
            return;
        }
        let mut seed = 43u64;
        for kind in [Kind::MXFP4Chain, Kind::NVFP4Lanes] {
            for nb in [1usize, 3, 6] {
                let w = weights(kind, nb, &mut seed);
                let n = nb * kind.block_values();
                let cols: Vec<Vec<u8>> = (0..4).map(|_| column(n, -128, &mut seed)).collect();
                let outs = products::<4>(kind, nb, &w, &cols);
                for o in &outs[1..] {
                    let bits = |a: &[[f32; ROWS]; 4]| a.map(|c| c.map(f32::to_bits));
                    assert_eq!(bits(o), bits(&outs[0]), "{kind:?} nb={nb}");
                }
            }
        }
    }

    /// MXFP4's scale of every exponent byte survives the bfloat16 round trip, and the
    /// computed NVFP4 scales are `ue4m3_half`'s for every byte, in both builds.
    #[test]
    fn fp4_scales_are_exact() {
        for e in 0..=255u8 {
            let back = f32::from_bits((scale_bf16(e) as u32) << 16);
            assert_eq!(back.to_bits(), e8m0_half(e).to_bits(), "e = {e}");
        }
        if !available() {
            return;
        }
        use crate::quants::nvfp4::ue4m3_half;
        for base in (0..=255u32).step_by(16) {
            // Lane r holds bytes base + r in its four bytes, rotated per sub-block.
            let lanes: [u32; 16] = std::array::from_fn(|r| {
                let b = |s: u32| (base + (r as u32 + 5 * s) % 16) << (8 * s);
                b(0) | b(1) | b(2) | b(3)
            });
            let want = |r: usize, s: usize| ue4m3_half((lanes[r] >> (8 * s)) as u8).to_bits();
            if vnni() {
                // SAFETY: the CPU runs AVX-512 (checked).
                let got = unsafe { scales_512(&lanes) };
                for (s, g) in got.iter().enumerate() {
                    for (r, v) in g.iter().enumerate() {
                        assert_eq!(v.to_bits(), want(r, s), "vnni lane {r} sub {s}");
                    }
                }
            }
            // SAFETY: `available` implies AVX2.
            let got = unsafe { scales_256(&lanes) };
            for (s, g) in got.iter().enumerate() {
                for (r, v) in g.iter().enumerate() {
                    assert_eq!(v.to_bits(), want(r, s), "avx2 lane {r} sub {s}");
                }
            }
        }
    }

    /// [`ue4m3_scales_512`] of sixteen lanes, as arrays (`[sub-block][lane]`).
    ///
    /// # Safety
    /// AVX-512 F.
    #[target_feature(enable = "avx512f")]
    unsafe fn scales_512(lanes: &[u32; 16]) -> [[f32; 16]; 4] {
        // SAFETY: the caller's CPU; `lanes` and the arrays hold 64 bytes each.
        unsafe {
            let v = ue4m3_scales_512(_mm512_loadu_si512(lanes.as_ptr().cast()));
            let mut got = [[0f32; 16]; 4];
            for (s, g) in got.iter_mut().enumerate() {
                _mm512_storeu_ps(g.as_mut_ptr(), v[s]);
            }
            got
        }
    }

    /// [`ue4m3_scales_256`] of sixteen lanes, eight at a time.
    ///
    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn scales_256(lanes: &[u32; 16]) -> [[f32; 16]; 4] {
        // SAFETY: the caller's CPU; each half holds 32 bytes.
        unsafe {
            let mut got = [[0f32; 16]; 4];
            for h in 0..2 {
                let v = ue4m3_scales_256(_mm256_loadu_si256(lanes[8 * h..].as_ptr().cast()));
                for (s, g) in got.iter_mut().enumerate() {
                    _mm256_storeu_ps(g[8 * h..].as_mut_ptr(), v[s]);
                }
            }
            got
        }
    }
}
