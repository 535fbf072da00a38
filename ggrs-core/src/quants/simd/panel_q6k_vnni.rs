//! The AVX-512 VNNI build of the Q6_K lanes panel kernel ([`Kind::Q6KLanes`]: `panel`'s
//! layout, sixteen rows, one per 32-bit lane; `panel_avx2::q6_k_lanes` is the AVX2 build,
//! same bits): the order of ggml's AVX2 `ggml_vec_dot_q6_K_q8_K`
//! (`k_quants::tiled::dot_q6_k_vec`, the oracle), per super-block and row eight exact integer
//! lanes, lane `l` summing `sc_j · code · y` over the values `p` with `(p mod 32) / 4 = l`
//! (`j = p / 16`), then `lane = fma(d_y·d, lane, acc)`; at the end ggml's `hsum_float_8`.
//!
//! # Arithmetic
//!
//! Value `p = 128n + 32m + 4l + e` of a row (32-value group `k = 4n + m`) is the quad of lane
//! `l` of group `k`, in sub-block `j = 2k + l / 4`. Its unsigned code `u` (0..=63) has its low
//! nibble in `ql` vector `16n + 8(m mod 2) + l` (the high nibble for `m ≥ 2`) and its top two
//! bits at `2m` of `qh` vector `8n + l`. The kernel works lane by lane (`l` outermost), so one
//! integer accumulator per column is live at a time:
//!
//! - the accumulator starts at `−32 · (sc_2l · bsum_2l + sc_2l+1 · bsum_2l+1)` (one
//!   `vpmaddwd` of the scale pair, times −32, at most 4096 in magnitude, against the two Q8_K
//!   block sums as a broadcast `i16` pair): the code offset of 32, taken out exactly;
//! - each quad adds `vpmaddubsw(u, y)` (two pair sums, at most 2·63·128 in magnitude: exact
//!   in 16 bits) times the sub-block scale in both halves of the row's lane (`vpdpwssd`).
//!
//! The codes are merged with one `vpternlogd` per quad: the low nibble where the mask `0x0F`
//! has bits, the high bits from `qh` masked once per vector with `0x33` (`m` even) or `0xCC`
//! (`m` odd) and shifted, which leaves them clean in bits 4..8 of every byte.
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C); the
//! pointer contracts are those of [`super::panel::gemm`] (Q8_K rows, no side data).

use std::arch::x86_64::*;

use super::panel::Kind;
use super::x86::{read_f32, read_u32};

/// Bytes of a Q8_K block: f32 `d`, 256 codes, 16 i16 block sums.
const Q8K_BYTES: usize = 292;
/// Offset of the block sums in a Q8_K block.
const Q8K_BSUMS: usize = 260;

/// How many packed super-blocks ahead a pass prefetches.
const PREFETCH_BLOCKS: usize = 2;

/// Prefetches (into L2) packed super-block `i` of the panel, whole (its bytes need not start
/// on a cache line): the kernel reads a block in strides of 512 bytes, which the hardware
/// prefetcher alone streams at a fraction of the memory's rate (decoding `q6_k.gguf` on
/// Zen 4: the Q6_K products took about 2.3 times as long without it, and about 15% longer
/// with `prefetcht0` than with `prefetcht1`). Past the panel's end this fetches the next panel's first blocks (a
/// prefetch never faults; `wrapping_add` keeps the address arithmetic defined).
#[inline(always)]
fn prefetch_block(panel: *const u8, i: usize) {
    let bytes = Kind::Q6KLanes.panel_bytes(1);
    let at = panel.wrapping_add(i * bytes);
    let mut off = 0;
    while off < bytes + 63 {
        // SAFETY: a prefetch is a hint; it reads nothing and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(off).cast()) };
        off += 64;
    }
}

/// The `vpermw` indices that turn the words of two scales (scale `a` of rows 0..16, then
/// scale `a + 1`) into scale `a + half` of row `r` in both halves of lane `r`.
const DUP: [[i16; 32]; 2] = {
    let mut idx = [[0i16; 32]; 2];
    let mut i = 0;
    while i < 32 {
        idx[0][i] = (i / 2) as i16;
        idx[1][i] = (16 + i / 2) as i16;
        i += 1;
    }
    idx
};

/// The `vpermw` indices that turn the words of two scales into the pair `(sc_a, sc_a+1)` of
/// row `r` in lane `r`.
const PAIR: [i16; 32] = {
    let mut idx = [0i16; 32];
    let mut i = 0;
    while i < 32 {
        idx[i] = (16 * (i % 2) + i / 2) as i16;
        i += 1;
    }
    idx
};

/// Scales `2t` and `2t + 1` of the sixteen rows of a packed super-block (scale-major bytes at
/// `s`, row `r` at byte `r`) as 32 sign-extended words.
///
/// # Safety
/// 32 bytes readable at `s + 32t`; AVX-512 BW.
#[inline(always)]
unsafe fn scale_words(s: *const u8, t: usize) -> __m512i {
    // SAFETY: forwarded from the caller; unaligned load.
    unsafe { _mm512_cvtepi8_epi16(_mm256_loadu_si256(s.add(32 * t).cast())) }
}

/// `C` columns against a Q6_K panel of `nb` super-blocks in the lane order (see the module
/// docs): lane `r` of result `c` is row `r` · column `c`.
///
/// # Safety
/// See the module docs.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q6_k_lanes<const C: usize>(
    nb: usize,
    panel: *const u8,
    y: &[*const u8; C],
) -> [__m512; C] {
    // SAFETY: packed super-block i < nb of the panel and Q8_K block i of each column are
    // readable (caller); unaligned loads; the index arrays hold 64 bytes each.
    unsafe {
        let dup = DUP.map(|d| _mm512_loadu_si512(d.as_ptr().cast()));
        let pair = _mm512_loadu_si512(PAIR.as_ptr().cast());
        let minus32 = _mm512_set1_epi16(-32);
        let low = _mm512_set1_epi8(0x0F);
        let even = _mm512_set1_epi8(0x33);
        let odd = _mm512_set1_epi8(0xCCu8 as i8);
        // acc[l][c]: lane l of column c.
        let mut acc = [[_mm512_setzero_ps(); C]; 8];
        for i in 0..nb {
            prefetch_block(panel, i + PREFETCH_BLOCKS);
            let at = Kind::Q6KLanes.block_at(i);
            let yb: [*const u8; C] = std::array::from_fn(|c| y[c].add(i * Q8K_BYTES));
            let dx = _mm512_cvtph_ps(_mm256_loadu_si256(panel.add(at.d).cast()));
            let d: [__m512; C] =
                std::array::from_fn(|c| _mm512_mul_ps(dx, _mm512_set1_ps(read_f32(yb[c]))));
            for (half, &dup_h) in dup.iter().enumerate() {
                // Lanes 4·half..4·half + 4 take scale 2k + half of group k.
                let sc: [__m512i; 8] = std::array::from_fn(|k| {
                    _mm512_permutexvar_epi16(dup_h, scale_words(panel.add(at.s), k))
                });
                for (l, acc_l) in acc.iter_mut().enumerate().skip(4 * half).take(4) {
                    let pl = _mm512_mullo_epi16(
                        _mm512_permutexvar_epi16(pair, scale_words(panel.add(at.s), l)),
                        minus32,
                    );
                    let mut lane: [__m512i; C] = std::array::from_fn(|c| {
                        let b = read_u32(yb[c].add(Q8K_BSUMS + 4 * l)) as i32;
                        _mm512_madd_epi16(pl, _mm512_set1_epi32(b))
                    });
                    for n in 0..2 {
                        let qh = _mm512_loadu_si512(panel.add(at.h + 64 * (8 * n + l)).cast());
                        let (h02, h13) = (_mm512_and_si512(qh, even), _mm512_and_si512(qh, odd));
                        // The top bits of group m in bits 4 and 5, bits 6 and 7 clear.
                        let hi = [
                            _mm512_slli_epi16::<4>(h02),
                            _mm512_slli_epi16::<2>(h13),
                            h02,
                            _mm512_srli_epi16::<2>(h13),
                        ];
                        for m2 in 0..2 {
                            let ql = _mm512_loadu_si512(
                                panel.add(at.v + 64 * (16 * n + 8 * m2 + l)).cast(),
                            );
                            for nib in 0..2 {
                                let m = 2 * nib + m2;
                                let lo = if nib == 0 {
                                    ql
                                } else {
                                    _mm512_srli_epi16::<4>(ql)
                                };
                                // low ? lo : hi, bit by bit.
                                let u = _mm512_ternarylogic_epi32::<0xE4>(lo, hi[m], low);
                                let k = 4 * n + m;
                                for (c, lc) in lane.iter_mut().enumerate() {
                                    let q = read_u32(yb[c].add(4 + 32 * k + 4 * l)) as i32;
                                    let p = _mm512_maddubs_epi16(u, _mm512_set1_epi32(q));
                                    *lc = _mm512_dpwssd_epi32(*lc, p, sc[k]);
                                }
                            }
                        }
                    }
                    for ((a, &dc), &lc) in acc_l.iter_mut().zip(&d).zip(&lane) {
                        *a = _mm512_fmadd_ps(dc, _mm512_cvtepi32_ps(lc), *a);
                    }
                }
            }
        }
        std::array::from_fn(|c| {
            let a: [__m512; 8] = std::array::from_fn(|l| acc[l][c]);
            _mm512_add_ps(
                _mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])),
            )
        })
    }
}
