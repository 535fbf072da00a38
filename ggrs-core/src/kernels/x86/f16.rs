//! f16 and f32 kernels written with intrinsics: widening f16 rows, the F16 dot products in
//! ggml's orders (`ggml_vec_dot_f16`, tinyBLAS), `mul_mat`'s f16 tiles, and the horizontal
//! sums of sixteen registers in `_mm512_reduce_add_ps`'s tree.

use crate::kernels::ggml_arith::lanes::{half_at, reduce16};

use std::arch::x86_64::{
    __m128i, __m256, _mm256_cvtph_ps, _mm256_fmadd_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    _mm_loadu_si128,
};

/// Eight f16 values at `p` widened to f32.
///
/// # Safety
/// 16 bytes are readable at `p`; the CPU supports F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8(p: *const u8) -> __m256 {
    // SAFETY: forwarded; unaligned load.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
}

use std::arch::x86_64::{
    __m256i, __m512, _mm256_loadu_si256, _mm512_add_ps, _mm512_cvtph_ps, _mm512_fmadd_ps,
    _mm512_loadu_ps, _mm512_setzero_ps, _mm512_storeu_ps,
};

/// Sixteen f16 values at `p` widened to f32.
///
/// # Safety
/// 32 bytes are readable at `p`; the CPU supports AVX-512 F/BW/VL.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn load16(p: *const u8) -> __m512 {
    // SAFETY: forwarded; unaligned load.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
}

/// See `ggml_arith::widen_f16`.
///
/// # Safety
/// `2 · dst.len()` bytes are readable at `src`; the CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn widen_f16(src: *const u8, dst: &mut [f32]) {
    let n = dst.len();
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: values i..i + 8 lie in both (caller); unaligned load and store.
        unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(i), load8(src.add(2 * i))) };
        i += 8;
    }
    for (j, d) in dst.iter_mut().enumerate().skip(i) {
        // SAFETY: value j < n lies in `src` (caller).
        let h = unsafe { std::ptr::read_unaligned(src.add(2 * j) as *const u16) };
        *d = half::f16::from_bits(u16::from_le(h)).to_f32();
    }
}

/// The lanes of `v` reduced as [`reduce16`].
///
/// # Safety
/// The CPU supports AVX-512 F/BW/VL.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn reduce(v: __m512) -> f32 {
    let mut lanes = [0f32; 16];
    // SAFETY: `lanes` holds 16 f32; unaligned store.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), v) };
    reduce16(&lanes)
}

/// `ggml_arith::f16_lanes16_tile_f32`: one register of 16 FMA lanes per pair.
///
/// # Safety
/// The CPU supports AVX-512 F/BW/VL; `2n` bytes readable at every `a[r]`, `n` f32 at every
/// `b[c]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn f16_lanes16_tile_f32<const R: usize, const C: usize>(
    n: usize,
    a: [*const u8; R],
    b: [*const f32; C],
) -> [[f32; C]; R] {
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    for i in (0..n).step_by(16) {
        // SAFETY: i + 16 <= n: 32 bytes at offset 2·i of every weight row, 16 f32 at
        // offset i of every activation row.
        unsafe {
            let av: [__m512; R] = std::array::from_fn(|r| load16(a[r].add(2 * i)));
            for c in 0..C {
                let bv = _mm512_loadu_ps(b[c].add(i));
                for r in 0..R {
                    acc[r][c] = _mm512_fmadd_ps(av[r], bv, acc[r][c]);
                }
            }
        }
    }
    if R * C == 16 {
        // SAFETY: AVX-512 F (caller).
        let t = unsafe { reduce_x16(std::array::from_fn(|e| acc[e / C][e % C])) };
        return std::array::from_fn(|r| std::array::from_fn(|c| t[r * C + c]));
    }
    // SAFETY: AVX-512 F (caller).
    acc.map(|row| row.map(|v| unsafe { reduce(v) }))
}

/// `f16_lanes16_tile_f32::<4, 4>` over `groups` groups of four consecutive activation
/// columns, each tile's sixteen sums written straight to the output: the per-tile call, the
/// result array and the element-by-element stores of the caller's loop cost an eighth of
/// MiniLM's f16 products. Group `g`'s columns are `b.add((4g + c)·b_stride)` (`n` f32 each);
/// output element (row `r`, column `4g + c`) goes to `out.add(r + (4g + c)·out_stride)`.
/// Same FMA chains and the same [`sum_lanes_x16`] tree per pair as
/// [`f16_lanes16_tile_f32`] (the tree does not depend on a register's place among the
/// sixteen), so the same bits.
///
/// # Safety
/// The CPU supports AVX-512 F/BW/VL; `n` is a multiple of 16; `2n` bytes readable at every
/// `a[r]`; `n` f32 readable at each column; the four outputs of each column writable.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn f16_tiles_4x4_cols(
    n: usize,
    a: [*const u8; 4],
    b: *const f32,
    b_stride: usize,
    groups: usize,
    out: *mut f32,
    out_stride: usize,
) {
    use std::arch::x86_64::{_mm512_extractf32x4_ps, _mm_storeu_ps};
    for g in 0..groups {
        // SAFETY: columns 4g..4g + 4 lie in the caller's range.
        let bc: [*const f32; 4] = std::array::from_fn(|c| unsafe { b.add((4 * g + c) * b_stride) });
        // acc[c][r]: column-major, so that the reduced register holds each column's four
        // rows in one quarter.
        let mut acc = [[_mm512_setzero_ps(); 4]; 4];
        for i in (0..n).step_by(16) {
            // SAFETY: i + 16 <= n: 32 bytes at offset 2·i of every weight row, 16 f32 at
            // offset i of every column.
            unsafe {
                let av: [__m512; 4] = std::array::from_fn(|r| load16(a[r].add(2 * i)));
                for c in 0..4 {
                    let bv = _mm512_loadu_ps(bc[c].add(i));
                    for r in 0..4 {
                        acc[c][r] = _mm512_fmadd_ps(av[r], bv, acc[c][r]);
                    }
                }
            }
        }
        let regs: [__m512; 16] = std::array::from_fn(|e| acc[e / 4][e % 4]);
        let t = sum_lanes_x16(&regs);
        // SAFETY: the four outputs of each column are writable (caller); unaligned stores.
        unsafe {
            let o = out.add(4 * g * out_stride);
            _mm_storeu_ps(o, _mm512_extractf32x4_ps::<0>(t));
            _mm_storeu_ps(o.add(out_stride), _mm512_extractf32x4_ps::<1>(t));
            _mm_storeu_ps(o.add(2 * out_stride), _mm512_extractf32x4_ps::<2>(t));
            _mm_storeu_ps(o.add(3 * out_stride), _mm512_extractf32x4_ps::<3>(t));
        }
    }
}

/// `ggml_arith::f16_lanes16_tile_f32` on AVX2: each pair's sixteen FMA lanes in two
/// registers (lanes 0–7 and 8–15, as [`dot_f16_lanes16`]), the lower halves of a step for
/// the whole tile before the upper halves so that `2·R·C` accumulators, `R` weight
/// registers and one activation register are live; then [`reduce16`]'s tree per pair, in
/// registers.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `2n` bytes readable at every `a[r]`, `n` f32 at
/// every `b[c]`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_lanes16_tile_f32_avx2<const R: usize, const C: usize>(
    n: usize,
    a: [*const u8; R],
    b: [*const f32; C],
) -> [[f32; C]; R] {
    use std::arch::x86_64::{_mm256_add_ps, _mm256_loadu_ps};
    let mut lo = [[_mm256_setzero_ps(); C]; R];
    let mut hi = [[_mm256_setzero_ps(); C]; R];
    for i in (0..n).step_by(16) {
        // SAFETY: i + 16 <= n: 32 bytes at offset 2·i of every weight row, 16 f32 at
        // offset i of every activation row.
        unsafe {
            let av: [__m256; R] = std::array::from_fn(|r| load8(a[r].add(2 * i)));
            for c in 0..C {
                let bv = _mm256_loadu_ps(b[c].add(i));
                for r in 0..R {
                    lo[r][c] = _mm256_fmadd_ps(av[r], bv, lo[r][c]);
                }
            }
            let av: [__m256; R] = std::array::from_fn(|r| load8(a[r].add(2 * i + 16)));
            for c in 0..C {
                let bv = _mm256_loadu_ps(b[c].add(i + 8));
                for r in 0..R {
                    hi[r][c] = _mm256_fmadd_ps(av[r], bv, hi[r][c]);
                }
            }
        }
    }
    // Plain loops, not closures: a closure does not inherit this function's features, so
    // the accumulators it read would live in memory and be stored after every FMA.
    // `reduce16` of the sixteen lanes (lo, hi) in registers: its first level is `hi + lo`
    // lane by lane, the rest is `hsum256`'s tree.
    let mut out = [[0f32; C]; R];
    for r in 0..R {
        for c in 0..C {
            // SAFETY: the CPU supports AVX (caller); register-only operations.
            out[r][c] = unsafe { super::util::hsum256(_mm256_add_ps(hi[r][c], lo[r][c])) };
        }
    }
    out
}

/// The horizontal sums of sixteen registers, `out[j] = Σ r[j]`, each added in the tree of
/// `_mm512_reduce_add_ps` ([`reduce16`]): lanes `i + 8` onto `i`, then
/// `i + 4` onto `i`, then `(h₀ + h₂) + (h₁ + h₃)`. Each level adds the same pairs for
/// several registers at once; the inputs are paired so that the last level leaves the
/// sums in order.
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn sum_lanes_x16(r: &[__m512; 16]) -> __m512 {
    use std::arch::x86_64::{_mm512_shuffle_f32x4, _mm512_shuffle_ps};
    // The sum of two shuffles of (p, q): one with each register's lower parts, one with
    // the upper parts they are added to.
    macro_rules! fold {
        ($shuffle:ident, $lower:literal, $upper:literal) => {
            |p, q| _mm512_add_ps($shuffle::<$lower>(p, q), $shuffle::<$upper>(p, q))
        };
    }
    // Quarters (128 bits) 0 + 2 and 1 + 3 of p and of q: [p's 8 sums, q's 8 sums].
    let l1 = fold!(_mm512_shuffle_f32x4, 0x44, 0xEE);
    // Of [a, b] and [c, d] (8 sums each): halves 0 + 1 of each → [a, b, c, d] (4 each).
    let l2 = fold!(_mm512_shuffle_f32x4, 0x88, 0xDD);
    // Within each quarter: [x₀ + x₂, x₁ + x₃] of p's and of q's four.
    let l3 = fold!(_mm512_shuffle_ps, 0x44, 0xEE);
    // Within each quarter: [p₀ + p₁, p₂ + p₃, q₀ + q₁, q₂ + q₃].
    let l4 = fold!(_mm512_shuffle_ps, 0x88, 0xDD);
    // Quarter lanes after l2: [0, 4, 8, 12], [1, 5, 9, 13], [2, 6, ...], [3, 7, ...];
    // l3 of the first two puts registers (0, 1), (4, 5), (8, 9), (12, 13) in the quarters, l4
    // then lays out 0..16 in order.
    let q0 = l2(l1(r[0], r[4]), l1(r[8], r[12]));
    let q1 = l2(l1(r[1], r[5]), l1(r[9], r[13]));
    let q2 = l2(l1(r[2], r[6]), l1(r[10], r[14]));
    let q3 = l2(l1(r[3], r[7]), l1(r[11], r[15]));
    l4(l3(q0, q1), l3(q2, q3))
}

/// [`sum_lanes_x16`] as an array.
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn reduce_x16(v: [__m512; 16]) -> [f32; 16] {
    let mut out = [0f32; 16];
    // SAFETY: `out` holds 16 f32; unaligned store; the features are this function's.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), sum_lanes_x16(&v)) };
    out
}

/// `ggml_arith::dot_f16_lanes16_body` with F16C conversions: lanes 0–7 and 8–15 in two
/// registers, one FMA each per 16 values, then the same reduction.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f16_lanes16(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let m = n / 16 * 16;
    let (a, b) = (&a[..2 * m], &b[..2 * m]);
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for i in (0..m).step_by(16) {
        // SAFETY: i + 16 <= m and both slices hold 2·m bytes.
        unsafe {
            let (pa, pb) = (a.as_ptr().add(2 * i), b.as_ptr().add(2 * i));
            lo = _mm256_fmadd_ps(load8(pa), load8(pb), lo);
            hi = _mm256_fmadd_ps(load8(pa.add(16)), load8(pb.add(16)), hi);
        }
    }
    let mut lanes = [0f32; 16];
    // SAFETY: `lanes` holds 16 f32; unaligned stores.
    unsafe {
        _mm256_storeu_ps(lanes.as_mut_ptr(), lo);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), hi);
    }
    reduce16(&lanes)
}

/// `ggml_arith::dot_f16_vec_body` with F16C conversions: 64 lanes in eight registers.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f16_vec(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let np = n & !63;
    let (a, b) = (&a[..2 * n], &b[..2 * n]);
    let mut acc = [_mm256_setzero_ps(); 8];
    for blk in (0..np).step_by(64) {
        for (r, reg) in acc.iter_mut().enumerate() {
            // SAFETY: blk + 8·r + 8 <= np <= n, and both slices hold 2·n bytes.
            unsafe {
                let off = 2 * (blk + 8 * r);
                *reg =
                    _mm256_fmadd_ps(load8(a.as_ptr().add(off)), load8(b.as_ptr().add(off)), *reg);
            }
        }
    }
    let mut lanes = [0f32; 64];
    for (r, reg) in acc.iter().enumerate() {
        // SAFETY: `lanes` holds 64 f32; each store writes 8 of them.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr().add(8 * r), *reg) };
    }
    let mut r32 = [0f32; 32];
    for t in 0..32 {
        r32[t] = lanes[t] + lanes[t + 32];
    }
    let mut r16 = [0f32; 16];
    for t in 0..16 {
        r16[t] = r32[t] + r32[t + 16];
    }
    let mut sum = reduce16(&r16) as f64;
    for i in np..n {
        sum += (half_at(a, 2 * i) * half_at(b, 2 * i)) as f64;
    }
    sum as f32
}

/// Converts f16 values with the F16C instruction `vcvtph2ps`, 8 at a time (the rest one by
/// one, exactly): `min(src.len(), dst.len())` of them. Also the attention kernels' widening.
///
/// # Safety
/// The CPU supports AVX and F16C.
#[inline]
#[target_feature(enable = "avx,f16c")]
pub(crate) unsafe fn f16_to_f32_block_f16c(src: &[half::f16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, so 8 f16 (16 bytes) are readable at src[i] and 8 f32 writable at
        // dst[i]; both intrinsics accept unaligned addresses.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for j in i..n {
        dst[j] = src[j].to_f32();
    }
}

/// ggml's table GeGLU (`elementwise::geglu_ggml`) eight values at a time: `out[i] = 0` for
/// `g[i] ≤ −10`, `g[i]·u[i]` for `g[i] ≥ 10`, otherwise `table[f16(g[i])]·u[i]` (the entry
/// widened to f32); the same bits as the scalar function (one f16 rounding, one lookup, one
/// product per value). Returns how many values it wrote (the whole groups of eight); the
/// caller does the rest.
///
/// # Safety
/// The CPU supports AVX2 and F16C; `table` holds 65,536 entries.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn geglu_table(out: &mut [f32], g: &[f32], u: &[f32], table: &[u16]) -> usize {
    use std::arch::x86_64::{
        _mm256_blendv_ps, _mm256_cmp_ps, _mm256_cvtps_ph, _mm256_loadu_ps, _mm256_mul_ps,
        _mm256_set1_ps, _mm_loadu_si128, _mm_storeu_si128, _CMP_GE_OQ, _CMP_LE_OQ,
        _MM_FROUND_TO_NEAREST_INT,
    };
    assert!(table.len() == 1 << 16, "geglu_table: one entry per f16");
    let n = out.len().min(g.len()).min(u.len());
    let mut i = 0;
    let (lo, hi) = (_mm256_set1_ps(-10.0), _mm256_set1_ps(10.0));
    while i + 8 <= n {
        // SAFETY: i + 8 <= n: eight values of each slice; unaligned loads and stores; the
        // table index is a u16, below its 65,536 entries.
        unsafe {
            let gv = _mm256_loadu_ps(g.as_ptr().add(i));
            let uv = _mm256_loadu_ps(u.as_ptr().add(i));
            let mut h = [0u16; 8];
            _mm_storeu_si128(
                h.as_mut_ptr() as *mut __m128i,
                _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(gv),
            );
            let t = h.map(|b| *table.get_unchecked(b as usize));
            let tv = _mm256_cvtph_ps(_mm_loadu_si128(t.as_ptr() as *const __m128i));
            let looked = _mm256_mul_ps(tv, uv);
            let big = _mm256_cmp_ps::<_CMP_GE_OQ>(gv, hi);
            let r = _mm256_blendv_ps(looked, _mm256_mul_ps(gv, uv), big);
            let low = _mm256_cmp_ps::<_CMP_LE_OQ>(gv, lo);
            let r = _mm256_blendv_ps(r, _mm256_setzero_ps(), low);
            _mm256_storeu_ps(out.as_mut_ptr().add(i), r);
        }
        i += 8;
    }
    i
}
