//! The Q4_K and Q2_K dot products in the order of ggml's *repacked* x86 kernels
//! (`q4_K_8x8_q8_K` and `q2_K_8x8_q8_K` in `ggml-cpu/arch/x86/repack.cpp`), which llama.cpp
//! runs for 2-D weights of those types whose row count is a multiple of 8 (Q4_K on every
//! AVX2 machine, Q2_K with AVX-512), instead of `ggml_vec_dot_*_q8_K` or the tiled matmul.
//!
//! llama.cpp's `forward_mul_mat` (repack path) hands the first `4·⌊m/4⌋` activation columns
//! of each batch to the GEMM kernel (when `m > 3`) and each remaining column to the GEMV
//! kernel; weight rows are split between threads in whole groups of 8, which does not change
//! any element's arithmetic. The two kernels reduce the integer products to the same exact
//! integers but add them into f32 at different granularities. Per weight super-block `b`
//! (scales `d`, `dmin` widened from f16) against the Q8_K block of scale `d_y`:
//!
//! ```text
//! dd = d · d_y          dm = dmin · d_y                 (each rounded to f32)
//! for every chunk c of the super-block (see below):
//!     S_c = Σ_{sub-block j in c} sc_j · Σ_{i in j} code_i · y_i        (exact i32)
//!     M_c = Σ_{sub-block j in c} m_j · Σ_{i in j} y_i                  (exact i32, from bsums)
//! GEMV:  acc  = fma(f32(Σ_c S_c), dd, acc)    accm = fma(f32(Σ_c M_c), dm, accm)
//! GEMM:  for each c in order: acc = fma(f32(S_c), dd, acc); accm = fma(f32(M_c), dm, accm)
//! result = acc − accm
//! ```
//!
//! with `acc = accm = 0` at the start and the super-blocks taken in order. A GEMM chunk is
//! the 64 values (two 32-value sub-blocks) its Q4_K loop takes per step, or the 128 values
//! (eight 16-value sub-blocks) of its Q2_K loop. Every AVX-512 and AVX2 branch of
//! `ggml_gemm_q4_K_8x8_q8_K` / `ggml_gemm_q2_K_8x8_q8_K` (16-row or 8-row tiles, 16 or 4
//! columns) has this order; the GEMV kernels only have an AVX2 branch. The integer parts
//! cannot overflow their 16-bit intermediates (at most 16 products of a 4-bit code and an
//! 8-bit activation per 16-bit lane), so they are exact and their own order does not matter.
//!
//! The GEMM columns are quantized by `ggml_quantize_mat_q8_K_4x8` rather than
//! `quantize_row_q8_K`. Its scale has the same magnitude and the same codes up to sign: it
//! maps the largest magnitude to −127 when any value equals `+amax`, where
//! `quantize_row_q8_K` follows the sign of the first value of largest magnitude. When the two
//! disagree (the first such value is `−amax` and a later one `+amax`), `d_y`, the codes and
//! the block sums are all negated, which negates `S_c`, `M_c` and `d_y` together and leaves
//! every product above bit-identical. So one Q8_K row serves both kernels.
//!
//! The functions here are the portable bodies; `kernels::ggml_arith` runs the AVX2 builds of
//! `kernels::x86::repacked_k` where the CPU has them (same integer sums, the same
//! [`accumulate`], so the same bits).

use super::{get_scale_min_k4, K_SCALE_SIZE, QK_K};
use half::f16;

/// Bytes of a Q8_K block: f32 `d`, 256 codes, 16 i16 block sums.
pub(crate) const Q8K_BYTES: usize = 292;
/// Offset of the codes in a Q8_K block.
pub(crate) const Q8K_QS: usize = 4;
/// Offset of the block sums in a Q8_K block.
const Q8K_BSUMS: usize = 260;

/// A k-quant type with a repacked ggml kernel, as that kernel's integer part sees one
/// super-block.
pub(crate) trait RepackedK {
    /// Bytes of one super-block.
    const BYTES: usize;
    /// GEMM chunks per super-block (one f32 FMA each; at most 4).
    const CHUNKS: usize;
    /// The super-block's `(d, dmin)`, widened to f32.
    fn scales(x: &[u8]) -> (f32, f32);
    /// The sub-block scales (in 16-bit lanes, as the kernels multiply them) and the
    /// `M_c` of super-block `x` against the Q8_K block `y`.
    fn scales_and_mins(x: &[u8], y: &[u8]) -> ([i16; 16], [i32; 4]);
    /// The `S_c` of super-block `x` against `y`, given its sub-block scales (portable).
    fn sums(x: &[u8], y: &[u8], sc: &[i16; 16]) -> [i32; 4];
}

/// Q4_K (`block_q4_Kx8` in ggml's repacked layout).
pub(crate) struct Q4K;
/// Q2_K (`block_q2_Kx8` in ggml's repacked layout).
pub(crate) struct Q2K;

#[inline(always)]
fn half_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Block sum `j` of the Q8_K block `y`.
#[inline(always)]
fn bsum(y: &[u8], j: usize) -> i16 {
    i16::from_le_bytes([y[Q8K_BSUMS + 2 * j], y[Q8K_BSUMS + 2 * j + 1]])
}

impl RepackedK for Q4K {
    const BYTES: usize = 144;
    const CHUNKS: usize = 4;

    #[inline(always)]
    fn scales(x: &[u8]) -> (f32, f32) {
        (half_at(x, 0), half_at(x, 2))
    }

    /// Scales of the eight 32-value sub-blocks (entries 0..8), and per 64-value chunk `c`
    /// the minimums of sub-blocks `2c`, `2c + 1` times their activation sums, each the sum of
    /// two Q8_K block sums added in 16 bits (the kernels' `hadd_epi16`).
    #[inline(always)]
    fn scales_and_mins(x: &[u8], y: &[u8]) -> ([i16; 16], [i32; 4]) {
        let packed: &[u8; K_SCALE_SIZE] = x[4..16].try_into().expect("12 bytes");
        let (mut sc, mut mn) = ([0i16; 16], [0i32; 8]);
        for j in 0..8 {
            let (s, m) = get_scale_min_k4(j, packed);
            (sc[j], mn[j]) = (s as i16, m as i32);
        }
        let pair = |j: usize| bsum(y, 2 * j).wrapping_add(bsum(y, 2 * j + 1)) as i32;
        let m = std::array::from_fn(|c| mn[2 * c] * pair(2 * c) + mn[2 * c + 1] * pair(2 * c + 1));
        (sc, m)
    }

    #[inline(always)]
    fn sums(x: &[u8], y: &[u8], sc: &[i16; 16]) -> [i32; 4] {
        // Layout: d, dmin (f16), 12 bytes of packed scales, 128 bytes of nibbles. Byte
        // 32c + l holds value 64c + l (low nibble, sub-block 2c) and 64c + 32 + l (high
        // nibble, sub-block 2c + 1).
        std::array::from_fn(|c| {
            let q = &x[16 + 32 * c..16 + 32 * c + 32];
            let ylo = &y[Q8K_QS + 64 * c..Q8K_QS + 64 * c + 32];
            let yhi = &y[Q8K_QS + 64 * c + 32..Q8K_QS + 64 * c + 64];
            let (mut lo, mut hi) = (0i32, 0i32);
            for l in 0..32 {
                lo += (q[l] & 0x0F) as i32 * ylo[l] as i8 as i32;
                hi += (q[l] >> 4) as i32 * yhi[l] as i8 as i32;
            }
            sc[2 * c] as i32 * lo + sc[2 * c + 1] as i32 * hi
        })
    }
}

impl RepackedK for Q2K {
    const BYTES: usize = 84;
    const CHUNKS: usize = 2;

    #[inline(always)]
    fn scales(x: &[u8]) -> (f32, f32) {
        (half_at(x, 80), half_at(x, 82))
    }

    /// Scales of the sixteen 16-value sub-blocks, and per 128-value half `h` its eight
    /// sub-blocks' minimums times their Q8_K block sums.
    #[inline(always)]
    fn scales_and_mins(x: &[u8], y: &[u8]) -> ([i16; 16], [i32; 4]) {
        let sc = std::array::from_fn(|j| (x[j] & 0x0F) as i16);
        let mut m = [0i32; 4];
        for (j, &b) in x[..16].iter().enumerate() {
            m[j / 8] += (b >> 4) as i32 * bsum(y, j) as i32;
        }
        (sc, m)
    }

    #[inline(always)]
    fn sums(x: &[u8], y: &[u8], sc: &[i16; 16]) -> [i32; 4] {
        // Layout: 16 bytes of scales (sub-block j: scale low nibble, minimum high), 64 bytes
        // of 2-bit codes, d, dmin (f16). Value 128h + 32s + 16p + l sits in bits 2s of byte
        // 32h + 16p + l and belongs to sub-block 8h + 2s + p.
        let mut out = [0i32; 4];
        for (h, o) in out.iter_mut().take(2).enumerate() {
            let q = &x[16 + 32 * h..16 + 32 * h + 32];
            for sh in 0..4 {
                for p in 0..2 {
                    let yv = &y[Q8K_QS + 128 * h + 32 * sh + 16 * p..][..16];
                    let qv = &q[16 * p..16 * p + 16];
                    let mut t = 0i32;
                    for l in 0..16 {
                        t += ((qv[l] >> (2 * sh)) & 3) as i32 * yv[l] as i8 as i32;
                    }
                    *o += sc[8 * h + 2 * sh + p] as i32 * t;
                }
            }
        }
        out
    }
}

/// The super-blocks of a weight row and its Q8_K row: whole blocks only, at most `n / 256`.
#[inline(always)]
pub(crate) fn blocks<'a, K: RepackedK>(
    n: usize,
    a: &'a [u8],
    b: &'a [u8],
) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
    a.chunks_exact(K::BYTES)
        .zip(b.chunks_exact(Q8K_BYTES))
        .take(n / QK_K)
}

/// The f32 work of one super-block, shared by every build: its chunks' exact sums `s` (the
/// `S_c`) and `m` (the `M_c`), `dd = d·d_y` and `dm = dmin·d_y`, into the accumulators
/// `acc = (acc, accm)`: one FMA each on the block totals (GEMV), or one per chunk in order
/// (GEMM).
#[inline(always)]
pub(crate) fn accumulate(acc: &mut (f32, f32), dd: f32, dm: f32, s: &[i32], m: &[i32], gemm: bool) {
    if gemm {
        for (&sc, &mc) in s.iter().zip(m) {
            acc.0 = (sc as f32).mul_add(dd, acc.0);
            acc.1 = (mc as f32).mul_add(dm, acc.1);
        }
    } else {
        let (st, mt): (i32, i32) = (s.iter().sum(), m.iter().sum());
        acc.0 = (st as f32).mul_add(dd, acc.0);
        acc.1 = (mt as f32).mul_add(dm, acc.1);
    }
}

/// `(dd, dm) = (d·d_y, dmin·d_y)` of super-block `x` against the Q8_K block `y`.
#[inline(always)]
pub(crate) fn block_scales<K: RepackedK>(x: &[u8], y: &[u8]) -> (f32, f32) {
    let (d, dmin) = K::scales(x);
    let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
    (d * dy, dmin * dy)
}

/// One row of `K` (`n` values) · one Q8_K row, portable: the GEMM order if `gemm`, else the
/// GEMV one (see the module docs).
#[inline(always)]
fn dot_portable<K: RepackedK>(n: usize, a: &[u8], b: &[u8], gemm: bool) -> f32 {
    let mut acc = (0f32, 0f32);
    for (x, y) in blocks::<K>(n, a, b) {
        let (dd, dm) = block_scales::<K>(x, y);
        let (sc, m) = K::scales_and_mins(x, y);
        let s = K::sums(x, y, &sc);
        accumulate(&mut acc, dd, dm, &s[..K::CHUNKS], &m[..K::CHUNKS], gemm);
    }
    acc.0 - acc.1
}

/// One row of `K` (`n` values) · one Q8_K row in the order of ggml's repacked GEMV kernel
/// (one FMA per super-block; see the module docs).
#[inline(always)]
pub(crate) fn dot_gemv<K: RepackedK>(n: usize, a: &[u8], b: &[u8]) -> f32 {
    dot_portable::<K>(n, a, b, false)
}

/// One row of `K` (`n` values) · one Q8_K row in the order of ggml's repacked GEMM kernel
/// (one FMA per chunk of 64 (Q4_K) or 128 (Q2_K) values; see the module docs).
#[inline(always)]
pub(crate) fn dot_gemm<K: RepackedK>(n: usize, a: &[u8], b: &[u8]) -> f32 {
    dot_portable::<K>(n, a, b, true)
}

/// [`dot_gemv`] for Q4_K (`ggml_gemv_q4_K_8x8_q8_K`).
#[inline(always)]
pub(crate) fn q4_k_gemv(n: usize, a: &[u8], b: &[u8]) -> f32 {
    dot_gemv::<Q4K>(n, a, b)
}

/// [`dot_gemm`] for Q4_K (`ggml_gemm_q4_K_8x8_q8_K`).
#[inline(always)]
pub(crate) fn q4_k_gemm(n: usize, a: &[u8], b: &[u8]) -> f32 {
    dot_gemm::<Q4K>(n, a, b)
}

/// [`dot_gemv`] for Q2_K (`ggml_gemv_q2_K_8x8_q8_K`).
#[inline(always)]
pub(crate) fn q2_k_gemv(n: usize, a: &[u8], b: &[u8]) -> f32 {
    dot_gemv::<Q2K>(n, a, b)
}

/// [`dot_gemm`] for Q2_K (`ggml_gemm_q2_K_8x8_q8_K`).
#[inline(always)]
pub(crate) fn q2_k_gemm(n: usize, a: &[u8], b: &[u8]) -> f32 {
    dot_gemm::<Q2K>(n, a, b)
}

/// The number of leading activation columns (of `n_cols` per batch) that llama.cpp's
/// repacked `forward_mul_mat` gives to the GEMM kernel: `4·⌊n_cols/4⌋` when `n_cols > 3`,
/// else none. The rest go to the GEMV kernel one by one.
pub(crate) fn gemm_columns(n_cols: usize) -> usize {
    if n_cols > 3 {
        n_cols - n_cols % 4
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::ggml_arith;

    /// Random bytes: `nb` blocks of `bytes`, with a finite f16 at each offset of `halves` (or
    /// a finite f32 at 0 for Q8_K).
    fn blocks(seed: &mut u64, nb: usize, bytes: usize, halves: &[usize], q8k: bool) -> Vec<u8> {
        let mut next = || {
            *seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (*seed >> 33) as u32
        };
        let mut v: Vec<u8> = (0..nb * bytes).map(|_| next() as u8).collect();
        for blk in v.chunks_exact_mut(bytes) {
            let val = (next() % 2000) as f32 / 1000.0 - 1.0;
            if q8k {
                blk[..4].copy_from_slice(&(val * 0.01).to_le_bytes());
            }
            for &o in halves {
                blk[o..o + 2].copy_from_slice(&f16::from_f32(val * 0.1).to_le_bytes());
            }
        }
        v
    }

    /// The builds `mul_mat` runs (compiled with AVX2 + FMA where the CPU has them) give the
    /// portable bodies' bits, on random bytes (every scale, code and block-sum pattern).
    #[test]
    fn vectorised_builds_equal_portable_ones() {
        type Pair = (VecDot, VecDot);
        type VecDot = fn(usize, &[u8], &[u8]) -> f32;
        let cases: [(usize, [usize; 2], Pair, Pair); 2] = [
            (
                Q4K::BYTES,
                [0, 2],
                (ggml_arith::dot_q4_k_gemv, q4_k_gemv),
                (ggml_arith::dot_q4_k_gemm, q4_k_gemm),
            ),
            (
                Q2K::BYTES,
                [80, 82],
                (ggml_arith::dot_q2_k_gemv, q2_k_gemv),
                (ggml_arith::dot_q2_k_gemm, q2_k_gemm),
            ),
        ];
        let mut seed = 5u64;
        let mut differ = 0;
        for (bytes, halves, gemv, gemm) in cases {
            for nb in [0usize, 1, 2, 5, 19] {
                let n = nb * QK_K;
                let a = blocks(&mut seed, nb, bytes, &halves, false);
                let b = blocks(&mut seed, nb, Q8K_BYTES, &[], true);
                for (fast, portable) in [gemv, gemm] {
                    assert_eq!(fast(n, &a, &b).to_bits(), portable(n, &a, &b).to_bits());
                }
                differ += (gemv.1(n, &a, &b) != gemm.1(n, &a, &b)) as usize;
            }
        }
        // The two orders are different functions of the same data.
        assert!(differ > 0);
    }

    #[test]
    fn gemm_takes_whole_groups_of_four_from_four_columns() {
        let got: Vec<usize> = (0..10).map(gemm_columns).collect();
        assert_eq!(got, [0, 0, 0, 0, 4, 4, 4, 4, 8, 8]);
    }
}
