//! AVX2 builds of `quants::k_quants::repacked`'s Q4_K and Q2_K dot products (the orders of
//! ggml's repacked `q4_K_8x8` / `q2_K_8x8` GEMV and GEMM kernels), bit-identical to the
//! portable ones: the chunk sums `S_c` are exact integers (`vpmaddubsw` of a code of at most
//! four bits and any i8 activation, −128 included, cannot saturate: at most 2·15·128 per
//! 16-bit lane; `vpmaddwd` by a scale of at most 63 then sums exactly in 32 bits), the
//! scales and minimum terms are the portable code's, and the f32 work is the shared
//! [`accumulate`](crate::quants::k_quants::repacked::accumulate).

use std::arch::x86_64::*;

use crate::quants::k_quants::repacked::{
    accumulate, block_scales, blocks, RepackedK, Q2K, Q4K, Q8K_QS,
};

/// `[Σ v0, Σ v1, Σ v2, Σ v3]`, each the sum of the eight i32 lanes of its vector (wrapping,
/// exact for the sums here).
///
/// # Safety
/// The CPU supports AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn hsum4_i32(v: [__m256i; 4]) -> [i32; 4] {
    // Per 128-bit half: [v0 0+1, v0 2+3, v1 0+1, v1 2+3], then [v0 0..4, v1 0..4, v2, v3].
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
    let mut out = [0i32; 4];
    // SAFETY: `out` holds 16 writable bytes; unaligned store.
    unsafe { _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, s) };
    out
}

/// The four `S_c` and `M_c` of one Q4_K super-block `x` (144 bytes) against the Q8_K block
/// `y` (292).
///
/// # Safety
/// The CPU supports AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn q4_k_block(x: &[u8], y: &[u8]) -> ([i32; 4], [i32; 4]) {
    let (q, yq) = (&x[16..144], &y[Q8K_QS..Q8K_QS + 256]);
    // The twelve scale bytes as three words: six-bit scales 0–3 and minimums 0–3 in the low
    // bits of bytes 0–3 and 4–7, the low four bits of sub-blocks 4–7 in bytes 8–11 (scale
    // low nibble, minimum high) and their top two bits in the top bits of bytes 0–7.
    let w = |i: usize| u32::from_le_bytes([x[4 + 4 * i], x[5 + 4 * i], x[6 + 4 * i], x[7 + 4 * i]]);
    let (w0, w1, w2) = (w(0), w(1), w(2));
    const LOW6: u32 = 0x3F3F_3F3F;
    const LOW4: u32 = 0x0F0F_0F0F;
    const LOW2: u32 = 0x0303_0303;
    let scales = [w0 & LOW6, (w2 & LOW4) | (((w0 >> 6) & LOW2) << 4)];
    let mins = [w1 & LOW6, ((w2 >> 4) & LOW4) | (((w1 >> 6) & LOW2) << 4)];
    let sc = |j: usize| ((scales[j / 4] >> (8 * (j % 4))) & 0xFF) as i16;
    // M_c: the Q8_K block sums added in pairs in 16 bits, times the minimums, pairs of
    // products summed in 32 bits.
    // SAFETY: 32 bytes of block sums at 260 of `y` (292 bytes); unaligned loads.
    let (b_lo, b_hi) = unsafe {
        (
            _mm_loadu_si128(y.as_ptr().add(260) as *const __m128i),
            _mm_loadu_si128(y.as_ptr().add(276) as *const __m128i),
        )
    };
    let mn = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, mins[1] as i32, mins[0] as i32));
    let mv = _mm_madd_epi16(_mm_hadd_epi16(b_lo, b_hi), mn);
    let mut m = [0i32; 4];
    // SAFETY: `m` holds 16 writable bytes; unaligned store.
    unsafe { _mm_storeu_si128(m.as_mut_ptr() as *mut __m128i, mv) };
    let m4 = _mm256_set1_epi8(0x0F);
    let v: [__m256i; 4] = std::array::from_fn(|c| {
        // SAFETY: 32 bytes at 32c of `q` (128 bytes) and at 64c, 64c + 32 of `yq` (256
        // bytes) are in bounds (c < 4); unaligned loads.
        let (raw, ylo, yhi) = unsafe {
            (
                _mm256_loadu_si256(q.as_ptr().add(32 * c) as *const __m256i),
                _mm256_loadu_si256(yq.as_ptr().add(64 * c) as *const __m256i),
                _mm256_loadu_si256(yq.as_ptr().add(64 * c + 32) as *const __m256i),
            )
        };
        let lo = _mm256_maddubs_epi16(_mm256_and_si256(raw, m4), ylo);
        let hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16::<4>(raw), m4), yhi);
        _mm256_add_epi32(
            _mm256_madd_epi16(lo, _mm256_set1_epi16(sc(2 * c))),
            _mm256_madd_epi16(hi, _mm256_set1_epi16(sc(2 * c + 1))),
        )
    });
    // SAFETY: AVX2, the caller's guarantee.
    (unsafe { hsum4_i32(v) }, m)
}

/// The two `S_h` and `M_h` of one Q2_K super-block `x` (84 bytes) against the Q8_K block
/// `y` (292) (entries 2 and 3 are 0).
///
/// # Safety
/// The CPU supports AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn q2_k_block(x: &[u8], y: &[u8]) -> ([i32; 4], [i32; 4]) {
    let (sc, m) = Q2K::scales_and_mins(x, y);
    let (q, yq) = (&x[16..80], &y[Q8K_QS..Q8K_QS + 256]);
    let m3 = _mm256_set1_epi8(3);
    let half = |h: usize| {
        // SAFETY: 32 bytes at 32h of `q` (64 bytes) are in bounds (h < 2); unaligned load.
        let raw = unsafe { _mm256_loadu_si256(q.as_ptr().add(32 * h) as *const __m256i) };
        let mut v = _mm256_setzero_si256();
        for sft in 0..4 {
            // Bytes 0..16 hold sub-block 8h + 2·sft, bytes 16..32 sub-block 8h + 2·sft + 1,
            // against the 32 activations from 128h + 32·sft.
            let j = 8 * h + 2 * sft;
            let shift = _mm_cvtsi32_si128(2 * sft as i32);
            let codes = _mm256_and_si256(_mm256_srl_epi16(raw, shift), m3);
            // SAFETY: 32 bytes at 128h + 32·sft of `yq` (256 bytes) are in bounds.
            let yv = unsafe {
                _mm256_loadu_si256(yq.as_ptr().add(128 * h + 32 * sft) as *const __m256i)
            };
            let scales = _mm256_set_m128i(_mm_set1_epi16(sc[j + 1]), _mm_set1_epi16(sc[j]));
            let p = _mm256_maddubs_epi16(codes, yv);
            v = _mm256_add_epi32(v, _mm256_madd_epi16(p, scales));
        }
        v
    };
    let zero = _mm256_setzero_si256();
    // SAFETY: AVX2, the caller's guarantee.
    (unsafe { hsum4_i32([half(0), half(1), zero, zero]) }, m)
}

/// One row of `K` (`n` values) · one Q8_K row in the repacked GEMM (`gemm`) or GEMV order,
/// each block's `(S_c, M_c)` by `block`.
#[inline(always)]
fn dot<K: RepackedK>(
    n: usize,
    a: &[u8],
    b: &[u8],
    gemm: bool,
    block: impl Fn(&[u8], &[u8]) -> ([i32; 4], [i32; 4]),
) -> f32 {
    let mut acc = (0f32, 0f32);
    for (x, y) in blocks::<K>(n, a, b) {
        let (dd, dm) = block_scales::<K>(x, y);
        let (s, m) = block(x, y);
        accumulate(&mut acc, dd, dm, &s[..K::CHUNKS], &m[..K::CHUNKS], gemm);
    }
    acc.0 - acc.1
}

/// Q4_K · Q8_K (`n` values) in the repacked GEMM (`gemm`) or GEMV order.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_k(n: usize, a: &[u8], b: &[u8], gemm: bool) -> f32 {
    // SAFETY: AVX2, the caller's guarantee; `x`, `y` are whole blocks.
    dot::<Q4K>(n, a, b, gemm, |x, y| unsafe { q4_k_block(x, y) })
}

/// Q2_K · Q8_K (`n` values) in the repacked GEMM (`gemm`) or GEMV order.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q2_k(n: usize, a: &[u8], b: &[u8], gemm: bool) -> f32 {
    // SAFETY: AVX2, the caller's guarantee; `x`, `y` are whole blocks.
    dot::<Q2K>(n, a, b, gemm, |x, y| unsafe { q2_k_block(x, y) })
}
