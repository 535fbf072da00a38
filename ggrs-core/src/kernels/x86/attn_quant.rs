//! The decoding key loop of `kernels::attn_quant` (flash attention over quantized keys and
//! values) with AVX2 + FMA + F16C, for a group of query heads that share one key/value head.
//!
//! Every head gets the portable one-row kernel's operations in its order, so the bits are
//! the same (`kernels::attn_quant`'s tests compare them):
//! - the score is ggml's x86 dot product of the key row with the head's quantized query:
//!   per block of 32 the eight lane sums of four integer products (exact, whatever the
//!   grouping), `lane = fma(d_k·d_q, lane, lane)` over the blocks (Q4_1/Q5_1: the minimum
//!   terms in a chain `fma(m_k, s_q, summs)` beside them; IQ4_NL: even and odd blocks in two
//!   sets of lanes, added at the end), then `hsum_float_8`; `·scale`, `+mask`;
//! - the online softmax of [`softmax_step`](super::attn::softmax_step) (glibc's `expf`);
//! - the value row decoded as `to_float` does (`code·d`, or `code·d + m` unfused), the f32
//!   accumulator scaled by `ms` on a new maximum, then `acc = fma(v, vs, acc)`, and
//!   `S = fma(S, ms, vs)`.
//!
//! The key and value rows are decoded once per key for all the heads of the group (up to
//! [`MAX_GROUP`](super::attn::MAX_GROUP)), which is what makes it faster than one row at a
//! time: with grouped-query attention the portable kernel decodes each row once per head.

use std::arch::x86_64::{
    __m128i, __m256, __m256i, _mm256_add_ps, _mm256_castps256_ps128, _mm256_cvtepi32_ps,
    _mm256_cvtepi8_epi16, _mm256_cvtepi8_epi32, _mm256_extractf128_ps, _mm256_fmadd_ps,
    _mm256_hadd_epi32, _mm256_madd_epi16, _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps,
    _mm256_storeu_ps, _mm_add_ps, _mm_add_ss, _mm_and_si128, _mm_cmpeq_epi8, _mm_cvtph_ps,
    _mm_cvtsi32_si128, _mm_cvtss_f32, _mm_loadu_si128, _mm_movehl_ps, _mm_or_si128, _mm_set1_epi32,
    _mm_set1_epi64x, _mm_set1_epi8, _mm_setr_epi8, _mm_shuffle_epi8, _mm_shuffle_ps,
    _mm_srli_epi16, _mm_srli_si128, _mm_sub_epi8, _mm_unpackhi_epi64, _mm_unpacklo_epi64,
};

use crate::dtype::DType;
use crate::kernels::x86::attn::{softmax_step, KeyRows};

/// A block type the loop decodes (keys and values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Block {
    Q8_0,
    Q4_0,
    Q5_0,
    Q4_1,
    Q5_1,
    IQ4NL,
}

impl Block {
    /// The block type of `t`, if the loop reads it.
    pub(crate) fn of(t: DType) -> Option<Block> {
        Some(match t {
            DType::Q8_0 => Block::Q8_0,
            DType::Q4_0 => Block::Q4_0,
            DType::Q5_0 => Block::Q5_0,
            DType::Q4_1 => Block::Q4_1,
            DType::Q5_1 => Block::Q5_1,
            DType::IQ4NL => Block::IQ4NL,
            _ => return None,
        })
    }

    /// Bytes of one block of 32 values.
    fn bytes(self) -> usize {
        match self {
            Block::Q8_0 => 34,
            Block::Q4_0 | Block::IQ4NL => 18,
            Block::Q5_0 => 22,
            Block::Q4_1 => 20,
            Block::Q5_1 => 24,
        }
    }

    /// Whether the block has a minimum (`code·d + m`; its key dot pairs with Q8_1).
    fn has_min(self) -> bool {
        matches!(self, Block::Q4_1 | Block::Q5_1)
    }
}

/// The f32 value of the f16 at `p` (unaligned).
///
/// # Safety
/// Two bytes readable at `p`; the CPU supports F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half(p: *const u8) -> f32 {
    // SAFETY: two bytes readable (caller).
    let h = unsafe { (p as *const u16).read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// Bit `j` of `bits` (of the two bytes `sel` picks, eight lanes each) as 0x10 in byte `j`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth_bits(bits: __m128i, sel: __m128i) -> __m128i {
    let m = _mm_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let b = _mm_and_si128(_mm_shuffle_epi8(bits, sel), m);
    _mm_and_si128(_mm_cmpeq_epi8(b, m), _mm_set1_epi8(0x10))
}

/// The codes of the block at `p` in value order (values 0..16, values 16..32, as i8),
/// its scale `d` and its minimum `m` (0 without one).
///
/// # Safety
/// A block of type `t` readable at `p`; the CPU supports AVX2 and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn codes(t: Block, p: *const u8) -> (__m128i, __m128i, f32, f32) {
    let low = _mm_set1_epi8(0x0F);
    let nibbles = |x: __m128i| {
        (
            _mm_and_si128(x, low),
            _mm_and_si128(_mm_srli_epi16::<4>(x), low),
        )
    };
    // SAFETY: every load below reads the block's bytes at p (caller): each 16-byte load
    // ends at or before the block's end.
    unsafe {
        let d = half(p);
        match t {
            Block::Q8_0 => (
                _mm_loadu_si128(p.add(2) as *const __m128i),
                _mm_loadu_si128(p.add(18) as *const __m128i),
                d,
                0.0,
            ),
            Block::Q4_0 => {
                let (a, b) = nibbles(_mm_loadu_si128(p.add(2) as *const __m128i));
                let eight = _mm_set1_epi8(8);
                (_mm_sub_epi8(a, eight), _mm_sub_epi8(b, eight), d, 0.0)
            }
            Block::Q4_1 => {
                let (a, b) = nibbles(_mm_loadu_si128(p.add(4) as *const __m128i));
                (a, b, d, half(p.add(2)))
            }
            Block::Q5_0 | Block::Q5_1 => {
                let (qh_at, qs_at, m) = if t == Block::Q5_0 {
                    (2, 6, 0.0)
                } else {
                    (4, 8, half(p.add(2)))
                };
                let qh = (p.add(qh_at) as *const i32).read_unaligned();
                let (a, b) = nibbles(_mm_loadu_si128(p.add(qs_at) as *const __m128i));
                let bits = _mm_set1_epi32(qh);
                let lo = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
                let hi = _mm_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
                let (a, b) = (
                    _mm_or_si128(a, fifth_bits(bits, lo)),
                    _mm_or_si128(b, fifth_bits(bits, hi)),
                );
                if t == Block::Q5_0 {
                    let sixteen = _mm_set1_epi8(16);
                    (_mm_sub_epi8(a, sixteen), _mm_sub_epi8(b, sixteen), d, m)
                } else {
                    (a, b, d, m)
                }
            }
            Block::IQ4NL => {
                let table =
                    _mm_loadu_si128(crate::quants::iq4::KVALUES_IQ4NL.as_ptr() as *const __m128i);
                let (a, b) = nibbles(_mm_loadu_si128(p.add(2) as *const __m128i));
                (
                    _mm_shuffle_epi8(table, a),
                    _mm_shuffle_epi8(table, b),
                    d,
                    0.0,
                )
            }
        }
    }
}

/// 32 codes (values 0..16 in `a`, 16..32 in `b`) widened to i16 in the order the dot
/// product wants them: values 0..8 and 16..24, then 8..16 and 24..32, so that
/// `hadd(madd(x₀, y₀), madd(x₁, y₁))` leaves the sum of values `4l..4l + 4` in lane `l`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen(a: __m128i, b: __m128i) -> [__m256i; 2] {
    [
        _mm256_cvtepi8_epi16(_mm_unpacklo_epi64(a, b)),
        _mm256_cvtepi8_epi16(_mm_unpackhi_epi64(a, b)),
    ]
}

/// ggml's `hsum_float_8`: `h = hi + lo`, then `(h₀ + h₂) + (h₁ + h₃)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum8(v: __m256) -> f32 {
    let h = _mm_add_ps(_mm256_extractf128_ps::<1>(v), _mm256_castps256_ps128(v));
    let t = _mm_add_ps(h, _mm_movehl_ps(h, h)); // [h0 + h2, h1 + h3, …]
    _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps::<0b01>(t, t)))
}

/// One query head's row converted for the key dot product: per block its codes
/// ([`widen`]), `d` and (Q8_1) `s`.
#[derive(Clone, Copy)]
pub(crate) struct QueryBlock {
    codes: [__m256i; 2],
    d: f32,
    s: f32,
}

/// The query row `q` (Q8_0 blocks, or Q8_1 when `q8_1`) of `nb` blocks as [`QueryBlock`]s.
///
/// # Safety
/// `q` holds `nb` blocks of that type; the CPU supports AVX2 and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn query_blocks<const NB: usize>(q: &[u8], q8_1: bool) -> [QueryBlock; NB] {
    let (bytes, at) = if q8_1 { (36, 4) } else { (34, 2) };
    assert!(q.len() >= NB * bytes);
    std::array::from_fn(|b| {
        let p = q[b * bytes..].as_ptr();
        // SAFETY: block b lies in q (checked above).
        unsafe {
            let (a, c) = (
                _mm_loadu_si128(p.add(at) as *const __m128i),
                _mm_loadu_si128(p.add(at + 16) as *const __m128i),
            );
            QueryBlock {
                codes: widen(a, c),
                d: half(p),
                s: if q8_1 { half(p.add(2)) } else { 0.0 },
            }
        }
    })
}

/// The key loop for `G` query heads (their converted queries `q`) sharing the key and
/// value rows `rows` (keys of type `kt`, values of type `vt`, `D = 32·NB` values per row,
/// `N = D / 8`), over `keys`: returns each head's `(M, S)` and leaves its unnormalised
/// accumulator in `acc_out`. See the module docs for the arithmetic.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `rows` valid for every key in `keys` (rows of
/// `NB` blocks); `kt` is IQ4_NL only with `NB` even.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn keys_group_q<const G: usize, const NB: usize, const N: usize>(
    q: &[[QueryBlock; NB]; G],
    acc_out: &mut [[f32; 256]; G],
    rows: &KeyRows,
    kt: Block,
    vt: Block,
    keys: std::ops::Range<usize>,
    scale: f32,
) -> [(f32, f32); G] {
    const { assert!(N == 4 * NB && N <= 32) };
    assert!(kt != Block::IQ4NL || NB.is_multiple_of(2));
    let zero = _mm256_setzero_ps();
    let (kb, vb) = (kt.bytes(), vt.bytes());
    let mut acc = [[zero; N]; G];
    let mut sum = [0f32; G]; // S
    let mut max = [f32::NEG_INFINITY; G]; // M
    for ic in keys {
        // SAFETY: ic is one of the caller's keys.
        let mv = unsafe { rows.mask_value(ic) };
        if mv == f32::NEG_INFINITY {
            continue;
        }
        // SAFETY: as above.
        let (kp, vp) = unsafe { rows.rows(ic) };
        // The key row's blocks: widened codes, d, m.
        let mut kc = [[std::arch::x86_64::_mm256_setzero_si256(); 2]; NB];
        let (mut kd, mut km) = ([0f32; NB], [0f32; NB]);
        for b in 0..NB {
            // SAFETY: block b of the key row (NB blocks of kb bytes).
            let (x, y, d, m) = unsafe { codes(kt, kp.add(b * kb)) };
            kc[b] = widen(x, y);
            kd[b] = d;
            km[b] = m;
        }
        let mut s = [0f32; G];
        for (g, sg) in s.iter_mut().enumerate() {
            let quads = |b: usize| {
                let (x, y) = (&kc[b], &q[g][b].codes);
                _mm256_cvtepi32_ps(_mm256_hadd_epi32(
                    _mm256_madd_epi16(x[0], y[0]),
                    _mm256_madd_epi16(x[1], y[1]),
                ))
            };
            let mut dot = match kt {
                Block::IQ4NL => {
                    // Even blocks into one set of lanes, odd ones into another.
                    let (mut a1, mut a2) = (zero, zero);
                    for b in (0..NB).step_by(2) {
                        let d1 = _mm256_set1_ps(q[g][b].d * kd[b]);
                        let d2 = _mm256_set1_ps(q[g][b + 1].d * kd[b + 1]);
                        a1 = _mm256_fmadd_ps(d1, quads(b), a1);
                        a2 = _mm256_fmadd_ps(d2, quads(b + 1), a2);
                    }
                    hsum8(_mm256_add_ps(a1, a2))
                }
                _ => {
                    let mut a = zero;
                    let mut summs = 0f32;
                    for b in 0..NB {
                        let d = _mm256_set1_ps(kd[b] * q[g][b].d);
                        a = _mm256_fmadd_ps(d, quads(b), a);
                        summs = km[b].mul_add(q[g][b].s, summs);
                    }
                    if kt.has_min() {
                        hsum8(a) + summs
                    } else {
                        hsum8(a)
                    }
                }
            };
            dot *= scale;
            dot += mv;
            *sg = dot;
        }
        // SAFETY: the CPU supports AVX2 and FMA (caller).
        let (e, grew) = unsafe { softmax_step(&s, &mut max) };
        // The value row, decoded.
        let mut vr = [zero; N];
        for b in 0..NB {
            // SAFETY: block b of the value row (NB blocks of vb bytes).
            let (x, y, d, m) = unsafe { codes(vt, vp.add(b * vb)) };
            let (dv, mv) = (_mm256_set1_ps(d), _mm256_set1_ps(m));
            let parts = [x, _mm_srli_si128::<8>(x), y, _mm_srli_si128::<8>(y)];
            for (i, &c) in parts.iter().enumerate() {
                let v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), dv);
                vr[4 * b + i] = if vt.has_min() {
                    _mm256_add_ps(v, mv)
                } else {
                    v
                };
            }
        }
        for g in 0..G {
            let (ms, vs) = if grew[g] { (e[g], 1.0) } else { (1.0, e[g]) };
            if grew[g] {
                let m = _mm256_set1_ps(ms);
                for y in acc[g].iter_mut() {
                    *y = _mm256_mul_ps(*y, m);
                }
            }
            let w = _mm256_set1_ps(vs);
            for (y, &x) in acc[g].iter_mut().zip(&vr) {
                *y = _mm256_fmadd_ps(x, w, *y);
            }
            sum[g] = sum[g].mul_add(ms, vs);
        }
    }
    for (a, o) in acc.iter().zip(acc_out.iter_mut()) {
        for (i, y) in a.iter().enumerate() {
            // SAFETY: 8 f32 writable at o[8i] (i < N ≤ 32, o holds 256).
            unsafe { _mm256_storeu_ps(o.as_mut_ptr().add(8 * i), *y) };
        }
    }
    std::array::from_fn(|g| (max[g], sum[g]))
}
