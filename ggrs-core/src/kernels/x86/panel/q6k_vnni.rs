//! The AVX-512 VNNI build of the Q6_K lanes panel kernel ([`Kind::Q6KLanes`]: `panel`'s
//! layout, sixteen rows, one per 32-bit lane; `panel::avx2::q6_k_lanes` is the AVX2 build,
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
//! bits at `2m` of `qh` vector `8n + l` (vectors numbered as in the file's bytes; where they
//! lie in the packed block: `panel::q6_k_ql`, `panel::q6_k_qh`). The kernel works lane by lane (`l` outermost), so one
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
//! # Memory
//!
//! Decoding streams the packed weight once per token, and a Q6_K row carries 6.6 bits per
//! value, so this kernel must keep up with the memory. The packed super-block holds its
//! vectors in the order the lane passes read them (`panel::q6_k_ql`, `panel::q6_k_qh`), and
//! each pass prefetches its eighth of the super-block two ahead (`panel::prefetch_block`). The
//! block body stays out of line ([`block`]). Together these halved the time of a decoding
//! product against six streams of vectors per pass, every block's lines prefetched at its
//! start and the block loop unrolled four times by LLVM (`examples/decode_stream.rs`;
//! figures in `docs/kernel-bench-notes.md`).
//!
//! # Safety
//! Every `unsafe fn` here needs a CPU with AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C); the
//! pointer contracts are those of [`super::gemm`] (Q8_K rows, no side data).

use std::arch::x86_64::*;

use super::super::util::{read_f32, read_u32};
use super::{prefetch_block, q6_k_qh, q6_k_ql, Kind};

/// Bytes of a Q8_K block: f32 `d`, 256 codes, 16 i16 block sums.
const Q8K_BYTES: usize = 292;
/// Offset of the block sums in a Q8_K block.
const Q8K_BSUMS: usize = 260;

/// How far ahead of the bytes it reads a pass prefetches, in packed super-blocks.
const PREFETCH_BLOCKS: usize = 2;

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

/// Constants of a pass.
#[derive(Clone, Copy)]
struct Consts {
    dup: [__m512i; 2],
    pair: __m512i,
    low: __m512i,
    even: __m512i,
    odd: __m512i,
}

/// Lane `l`'s exact integer sums of one packed super-block (codes at `v`, scales at `s`)
/// against `C` Q8_K blocks (`yb[c]`), for the sixteen rows: `−32 · Σ bsum · sc` over the
/// lane's two sub-blocks, plus `sc · code · y` over its 32 values (see the module docs).
/// `sc[k]` is the lane half's scale of group `k` in both words of every row's lane.
///
/// # Safety
/// As [`q6_k_lanes`]; `l < 8`.
#[inline(always)]
unsafe fn lane_sums<const C: usize>(
    k: &Consts,
    v: *const u8,
    s: *const u8,
    sc: &[__m512i; 8],
    yb: &[*const u8; C],
    l: usize,
) -> [__m512i; C] {
    // SAFETY: as the caller's; register operations otherwise.
    unsafe {
        let pl = _mm512_sub_epi16(
            _mm512_setzero_si512(),
            _mm512_slli_epi16::<5>(_mm512_permutexvar_epi16(k.pair, scale_words(s, l))),
        );
        let mut lane: [__m512i; C] = std::array::from_fn(|c| {
            let b = read_u32(yb[c].add(Q8K_BSUMS + 4 * l)) as i32;
            _mm512_madd_epi16(pl, _mm512_set1_epi32(b))
        });
        for n in 0..2 {
            let qh = _mm512_loadu_si512(v.add(q6_k_qh(8 * n + l)).cast());
            let (h02, h13) = (_mm512_and_si512(qh, k.even), _mm512_and_si512(qh, k.odd));
            // The top bits of group m in bits 4 and 5, bits 6 and 7 clear.
            let hi = [
                _mm512_slli_epi16::<4>(h02),
                _mm512_slli_epi16::<2>(h13),
                h02,
                _mm512_srli_epi16::<2>(h13),
            ];
            for m2 in 0..2 {
                let ql = _mm512_loadu_si512(v.add(q6_k_ql(16 * n + 8 * m2 + l)).cast());
                for nib in 0..2 {
                    let m = 2 * nib + m2;
                    let lo = if nib == 0 {
                        ql
                    } else {
                        _mm512_srli_epi16::<4>(ql)
                    };
                    // low ? lo : hi, bit by bit.
                    let u = _mm512_ternarylogic_epi32::<0xE4>(lo, hi[m], k.low);
                    let g = 4 * n + m;
                    for (c, lc) in lane.iter_mut().enumerate() {
                        let q = read_u32(yb[c].add(4 + 32 * g + 4 * l)) as i32;
                        let p = _mm512_maddubs_epi16(u, _mm512_set1_epi32(q));
                        *lc = _mm512_dpwssd_epi32(*lc, p, sc[g]);
                    }
                }
            }
        }
        lane
    }
}

/// Packed super-block `i` of the panel against block `i` of the `C` columns: each lane's
/// exact integer sums, then its FMA into `acc[l][c]` (lane `l`, column `c`). Kept out of
/// line: the block loop then stays one block long, where an unrolled copy of four blocks
/// took about twice the time per block when decoding.
///
/// # Safety
/// As [`q6_k_lanes`], for block `i < nb`.
#[inline(never)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn block<const C: usize>(
    k: &Consts,
    acc: &mut [[__m512; C]; 8],
    panel: *const u8,
    i: usize,
    y: &[*const u8; C],
) {
    // SAFETY: as the caller's.
    unsafe {
        let at = Kind::Q6KLanes.block_at(i);
        let (v, s) = (panel.add(at.v), panel.add(at.s));
        let yb: [*const u8; C] = std::array::from_fn(|c| y[c].add(i * Q8K_BYTES));
        let dx = _mm512_cvtph_ps(_mm256_loadu_si256(panel.add(at.d).cast()));
        let d: [__m512; C] =
            std::array::from_fn(|c| _mm512_mul_ps(dx, _mm512_set1_ps(read_f32(yb[c]))));
        // One lane at a time, its integer sums then its FMA; `l` a constant in each copy,
        // so that the accumulators stay in registers.
        macro_rules! pass {
            ($sc:expr, $l:literal) => {{
                prefetch_block(
                    panel,
                    Kind::Q6KLanes.panel_bytes(1),
                    i + PREFETCH_BLOCKS,
                    $l,
                    8,
                );
                let lane = lane_sums::<C>(k, v, s, $sc, &yb, $l);
                for ((a, &dc), &lc) in acc[$l].iter_mut().zip(&d).zip(&lane) {
                    *a = _mm512_fmadd_ps(dc, _mm512_cvtepi32_ps(lc), *a);
                }
            }};
        }
        // Lanes 4·half..4·half + 4 take scale 2g + half of group g.
        let sc: [__m512i; 8] =
            std::array::from_fn(|g| _mm512_permutexvar_epi16(k.dup[0], scale_words(s, g)));
        pass!(&sc, 0);
        pass!(&sc, 1);
        pass!(&sc, 2);
        pass!(&sc, 3);
        let sc: [__m512i; 8] =
            std::array::from_fn(|g| _mm512_permutexvar_epi16(k.dup[1], scale_words(s, g)));
        pass!(&sc, 4);
        pass!(&sc, 5);
        pass!(&sc, 6);
        pass!(&sc, 7);
    }
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
        let k = Consts {
            dup: DUP.map(|d| _mm512_loadu_si512(d.as_ptr().cast())),
            pair: _mm512_loadu_si512(PAIR.as_ptr().cast()),
            low: _mm512_set1_epi8(0x0F),
            even: _mm512_set1_epi8(0x33),
            odd: _mm512_set1_epi8(0xCCu8 as i8),
        };
        // acc[l][c]: lane l of column c.
        let mut acc = [[_mm512_setzero_ps(); C]; 8];
        for i in 0..nb {
            block::<C>(&k, &mut acc, panel, i, y);
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
