//! The Q5_K lanes panel kernel ([`Kind::Q5KLanes`]: `panel`'s scheme, sixteen weight rows,
//! one per 32-bit lane) in the order of ggml's AVX2 `ggml_vec_dot_q5_K_q8_K`, which llama.cpp
//! runs for Q5_K weights below eight columns (no repacked Q5_K kernel on x86;
//! `k_quants::tiled::dot_q5_k_vec` is the oracle): the layout, its packer and the AVX-512 VNNI
//! build; `panel::q5k_avx2` holds the AVX2 build (same layout, same bits).
//!
//! # Layout
//!
//! One packed super-block (256 values) of sixteen rows, 2816 bytes (as many as the file), every
//! part 64-byte aligned, in the order the kernels read it:
//!
//! ```text
//!   [ d: 16 × f16 ][ dmin: 16 × f16 ]
//!   [ s_t ] × 3    lane r = bytes 4t..4t + 4 of row r's 12 packed scale bytes
//!   8 × (for l in 0..8):
//!     [ h_l ]      lane r = bytes 4l..4l + 4 of row r's qh (fifth bits)
//!     [ v_8p+l ] × 4 (p in 0..4)
//!                  lane r = bytes 4q..4q + 4 of row r's qs (low nibbles), q = 8p + l
//! ```
//!
//! Value `32j + 4l + e` of a row (sub-block `j = 2p + n`, quad `l`) has its low four bits in
//! nibble `n` of `v_8p+l` (byte `e` of lane `r`) and its fifth bit at bit `j` of `h_l`. The
//! kernels take quad `l` of every sub-block together (one lane accumulator at a time), so
//! this order lets them read each super-block front to back: with the codes in the file's
//! order they read a block in strides of 512 bytes, which left the hardware prefetcher far
//! behind (`docs/kernel-bench-notes.md`). The VNNI
//! kernel also prefetches (into L2) an eighth of the super-block [`PREFETCH_BLOCKS`] ahead in
//! each of its eight lane passes (`panel::prefetch_block`).
//!
//! # Arithmetic
//!
//! Per super-block and row, the oracle's exact integers: eight lanes, lane `l` summing
//! `sc_j · code · y` over quad `l` of every sub-block `j`, and the minimum term
//! `Σ_j m_j · (bsum_2j + bsum_2j+1)`; the f32 work `lane_acc = fma(d·d_y, lane, lane_acc)`,
//! `summs = fma(−d_y·dmin, mins, summs)`, the result `hsum_float_8(lane_acc) + summs`.
//!
//! - The six-bit scales and minimums are unpacked from the file's 12 bytes in registers,
//!   sixteen rows at a time (as `get_scale_min_k4`).
//! - A quad's codes (0..=31) are its nibble with the fifth bit moved to bit 4; `vpmaddubsw`
//!   of the codes and the broadcast activation quad gives two pair sums (at most
//!   2·31·128 = 7936 in magnitude: exact in 16 bits), and `vpdpwssd` against the sub-block
//!   scale in both 16-bit halves of the row's lane adds both times the scale into the lane
//!   (at most 8·4·31·128·63 in magnitude: exact in 32 bits).
//! - The minimums go through `vpdpwssd` in pairs `(m_2c, m_2c+1)` against the activation's
//!   sums of sub-blocks `2c`, `2c + 1` (`panel_repacked::activation_aux_q4_k`, the side data
//!   this kind shares with Q4_K: for Q8_K rows the 16-bit sums are exact).
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C); the
//! pointer contracts are those of [`super::gemm`] (Q8_K rows and their side data).

use std::arch::x86_64::*;

use super::super::util::{read_f32, read_u32};
use super::lanes_vnni::fifth;
use super::repacked::{Q4K_AUX_BYTES, Q8K_BYTES};
use super::{prefetch_block, ROWS};

/// Bytes of a packed Q5_K super-block of sixteen rows.
pub(crate) const Q5K_PANEL_BYTES: usize = 2816;
/// How many packed super-blocks ahead the VNNI kernel prefetches (see the module docs).
const PREFETCH_BLOCKS: usize = 4;
/// Offsets in a packed super-block: minimum scales (`dmin`), packed scale bytes, the first
/// group of fifth bits and codes ([`h_at`], [`v_at`]; the scales `d` come first).
pub(super) const Q5K_DMIN: usize = 32;
/// See [`Q5K_DMIN`].
pub(super) const Q5K_SC: usize = 64;
/// See [`Q5K_DMIN`].
pub(super) const Q5K_QH: usize = 256;
/// Bytes of the group of quad `l`: its fifth bits and four code vectors.
const Q5K_GROUP: usize = 5 * 64;

/// Offset in a packed super-block of `h_l` (see the module docs).
#[inline(always)]
pub(super) const fn h_at(l: usize) -> usize {
    Q5K_QH + Q5K_GROUP * l
}

/// Offset in a packed super-block of `v_8p+l`, the low nibbles of quad `l` of sub-blocks `2p`
/// and `2p + 1` (see the module docs).
#[inline(always)]
pub(super) const fn v_at(p: usize, l: usize) -> usize {
    h_at(l) + 64 + 64 * p
}

/// Bytes of a Q5_K block in the file: f16 `d`, f16 `dmin`, 12 scale bytes, `qh[32]`, `qs[128]`.
const Q5K_BYTES: usize = 176;
/// Offset of the codes in a Q8_K block.
const Q8K_QS: usize = 4;

/// Packs `nb` Q5_K super-blocks of sixteen rows (file layout) into `dst` (see the module
/// docs).
pub(super) fn pack_q5_k(nb: usize, src: &[&[u8]; ROWS], dst: &mut [u8]) {
    for i in 0..nb {
        let out = &mut dst[i * Q5K_PANEL_BYTES..(i + 1) * Q5K_PANEL_BYTES];
        for (r, row) in src.iter().enumerate() {
            let blk = &row[i * Q5K_BYTES..(i + 1) * Q5K_BYTES];
            out[2 * r..2 * r + 2].copy_from_slice(&blk[0..2]);
            out[Q5K_DMIN + 2 * r..Q5K_DMIN + 2 * r + 2].copy_from_slice(&blk[2..4]);
            // Quad q of the scale bytes, qh and qs into lane r of that part's vector q.
            let mut put = |at: usize, from: usize| {
                out[at + 4 * r..at + 4 * r + 4].copy_from_slice(&blk[from..from + 4]);
            };
            for t in 0..3 {
                put(Q5K_SC + 64 * t, 4 + 4 * t);
            }
            for l in 0..8 {
                put(h_at(l), 16 + 4 * l);
                for p in 0..4 {
                    put(v_at(p, l), 48 + 4 * (8 * p + l));
                }
            }
        }
    }
}

/// The `vpshufb` control that puts byte `b` of every 32-bit lane, zero-extended, into both
/// 16-bit halves of the lane (`b + 4` or more: a zero word there).
pub(super) const fn dup_control(b0: u8, b1: u8) -> [u8; 64] {
    let mut c = [0u8; 64];
    let mut k = 0;
    while k < 16 {
        let base = 4 * (k % 4) as u8;
        c[4 * k] = base + b0;
        c[4 * k + 1] = 0x80;
        c[4 * k + 2] = base + b1;
        c[4 * k + 3] = 0x80;
        k += 1;
    }
    c
}

/// `vpshufb` controls: scale byte `b` in both halves ([`SCALE_DUP`]`[b]`), minimum bytes
/// `2c', 2c' + 1` as a word pair ([`MIN_PAIR`]`[c']`).
pub(super) const SCALE_DUP: [[u8; 64]; 4] = [
    dup_control(0, 0),
    dup_control(1, 1),
    dup_control(2, 2),
    dup_control(3, 3),
];
/// See [`SCALE_DUP`].
pub(super) const MIN_PAIR: [[u8; 64]; 2] = [dup_control(0, 1), dup_control(2, 3)];

/// The sixteen rows' scales of sub-blocks 0..4 (vector 0) and 4..8 (vector 1), and their
/// minimums, byte `j mod 4` of each row's lane, unpacked from the packed scale vectors at `s`
/// (`get_scale_min_k4`: `sc_j = b_j & 63`, `m_j = b_j+4 & 63` for `j < 4`;
/// `sc_j = (b_j+4 & 15) | (b_j−4 >> 6) << 4`, `m_j = (b_j+4 >> 4) | (b_j >> 6) << 4` above).
///
/// # Safety
/// 192 bytes readable at `s`; AVX-512 F.
#[inline(always)]
unsafe fn scales_mins(s: *const u8) -> ([__m512i; 2], [__m512i; 2]) {
    // SAFETY: forwarded from the caller; unaligned loads.
    unsafe {
        let (u0, u1, u2) = (
            _mm512_loadu_si512(s.cast()),
            _mm512_loadu_si512(s.add(64).cast()),
            _mm512_loadu_si512(s.add(128).cast()),
        );
        let m6 = _mm512_set1_epi8(0x3F);
        let low = _mm512_set1_epi8(0x0F);
        let top = _mm512_set1_epi8(0x30);
        // a | (b & c).
        let or_masked = |a, b, c| _mm512_ternarylogic_epi32::<0xF8>(a, b, c);
        let sc = [
            _mm512_and_si512(u0, m6),
            or_masked(_mm512_and_si512(u2, low), _mm512_srli_epi32::<2>(u0), top),
        ];
        let mn = [
            _mm512_and_si512(u1, m6),
            or_masked(
                _mm512_and_si512(_mm512_srli_epi32::<4>(u2), low),
                _mm512_srli_epi32::<2>(u1),
                top,
            ),
        ];
        (sc, mn)
    }
}

/// `C` columns against a Q5_K panel of `nb` super-blocks in the lane order (see the module
/// docs): lane `r` of result `c` is row `r` · column `c`.
///
/// # Safety
/// See the module docs.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q5_k_lanes<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
    aux: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: packed super-block i < nb of the panel, Q8_K block i of each column and its
    // side data are readable (caller); unaligned loads; the control arrays hold 64 bytes.
    unsafe {
        let dup = SCALE_DUP.map(|c| _mm512_loadu_si512(c.as_ptr().cast()));
        let pair = MIN_PAIR.map(|c| _mm512_loadu_si512(c.as_ptr().cast()));
        let low = _mm512_set1_epi8(0x0F);
        // acc[l][c]: lane l of column c.
        let mut acc = [[_mm512_setzero_ps(); C]; 8];
        let mut summs = [_mm512_setzero_ps(); C];
        for i in 0..nb {
            let p = panel.add(i * Q5K_PANEL_BYTES);
            let yb: [*const u8; C] = std::array::from_fn(|c| y[c].add(i * Q8K_BYTES));
            let ax: [*const u8; C] = std::array::from_fn(|c| aux[c].add(i * Q4K_AUX_BYTES));
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()));
            let mx = _mm512_cvtph_ps(_mm256_loadu_si256(p.add(Q5K_DMIN).cast()));
            let (scv, mnv) = scales_mins(p.add(Q5K_SC));
            for c in 0..C {
                let mut mins = _mm512_setzero_si512();
                for (ch, &ctl) in [pair[0], pair[1], pair[0], pair[1]].iter().enumerate() {
                    let m = _mm512_shuffle_epi8(mnv[ch / 2], ctl);
                    let sums = _mm512_set1_epi32(read_u32(ax[c].add(4 * ch)) as i32);
                    mins = _mm512_dpwssd_epi32(mins, m, sums);
                }
                let dy = read_f32(yb[c]);
                let dmin = _mm512_mul_ps(mx, _mm512_set1_ps(-dy));
                summs[c] = _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(mins), summs[c]);
            }
            let d: [__m512; C] =
                std::array::from_fn(|c| _mm512_mul_ps(dx, _mm512_set1_ps(read_f32(yb[c]))));
            // Sub-block j's scale in both halves of each row's lane.
            let sc: [__m512i; 8] =
                std::array::from_fn(|j| _mm512_shuffle_epi8(scv[j / 4], dup[j % 4]));
            for (l, acc_l) in acc.iter_mut().enumerate() {
                prefetch_block(panel, Q5K_PANEL_BYTES, i + PREFETCH_BLOCKS, l, 8);
                let h = _mm512_loadu_si512(p.add(h_at(l)).cast());
                let mut lane = [_mm512_setzero_si512(); C];
                for pp in 0..4 {
                    let v = _mm512_loadu_si512(p.add(v_at(pp, l)).cast());
                    for n in 0..2 {
                        let j = 2 * pp + n;
                        let nib = if n == 0 { v } else { _mm512_srli_epi16::<4>(v) };
                        // low ? nibble : fifth bit, bit by bit.
                        let u = _mm512_ternarylogic_epi32::<0xE4>(nib, fifth(h, j), low);
                        for (c, lc) in lane.iter_mut().enumerate() {
                            let q = read_u32(yb[c].add(Q8K_QS + 32 * j + 4 * l)) as i32;
                            let pr = _mm512_maddubs_epi16(u, _mm512_set1_epi32(q));
                            *lc = _mm512_dpwssd_epi32(*lc, pr, sc[j]);
                        }
                    }
                }
                for ((a, &dc), &lc) in acc_l.iter_mut().zip(&d).zip(&lane) {
                    *a = _mm512_fmadd_ps(dc, _mm512_cvtepi32_ps(lc), *a);
                }
            }
        }
        std::array::from_fn(|c| {
            let a: [__m512; 8] = std::array::from_fn(|l| acc[l][c]);
            let lanes = _mm512_add_ps(
                _mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])),
            );
            _mm512_add_ps(lanes, summs[c])
        })
    }
}
