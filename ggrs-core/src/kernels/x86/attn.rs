//! Flash attention's kernels written with intrinsics (`kernels::attn` runs them): the f16
//! rows (`ggml_vec_scale_f16`, `ggml_vec_mad_f16`), the key loops of one row or a group of
//! heads sharing a key/value head with `dk = dv = D`, `D` one of [`HEAD_DIMS`] (AVX2 + FMA +
//! F16C for every `D`, and AVX-512 for `D = 64`), and the AVX-512 score and value tiles of
//! the tiled path.

use std::arch::x86_64::{
    __m128i, _mm256_add_ps, _mm256_castps256_ps128, _mm256_cvtph_ps, _mm256_cvtps_ph,
    _mm256_extractf128_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps,
    _mm256_setzero_ps, _mm256_storeu_ps, _mm_add_ps, _mm_cvtss_f32, _mm_loadu_si128, _mm_setr_ps,
    _mm_setzero_si128, _mm_storeu_ps, _mm_storeu_si128,
};

use crate::kernels::x86::exp::expf16;

/// The query rows of the score tiles [`scores_512`] and [`weighted_values_512`] take
/// (`kernels::attn::TILE_Q`, which checks that the two agree).
pub(crate) const TILE_Q: usize = 64;
/// The key columns of those tiles (`kernels::attn::TILE_KV`, checked the same way).
pub(crate) const TILE_KV: usize = 64;

/// # Safety
/// The CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn scale_f16(y: &mut [u16], v: f32) {
    let n = y.len();
    let mut i = 0;
    // SAFETY: plain register operation.
    let vv = _mm256_set1_ps(v);
    while i + 8 <= n {
        // SAFETY: i + 8 <= n: 8 u16 readable and writable at y[i]; rounding mode 0 is
        // round to nearest even, as `f2h`.
        unsafe {
            let p = y.as_mut_ptr().add(i) as *mut __m128i;
            let r = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(p)), vv);
            _mm_storeu_si128(p, _mm256_cvtps_ph::<0>(r));
        }
        i += 8;
    }
    for h in &mut y[i..] {
        *h = half::f16::from_f32(half::f16::from_bits(*h).to_f32() * v).to_bits();
    }
}

/// # Safety
/// The CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn mad_f16(y: &mut [u16], x: &[u16], v: f32) {
    let n = y.len().min(x.len());
    let mut i = 0;
    let vv = _mm256_set1_ps(v);
    while i + 8 <= n {
        // SAFETY: i + 8 <= n for both slices; rounding mode 0 is round to nearest even.
        unsafe {
            let p = y.as_mut_ptr().add(i) as *mut __m128i;
            let xs = _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().add(i) as *const __m128i));
            let r = _mm256_fmadd_ps(xs, vv, _mm256_cvtph_ps(_mm_loadu_si128(p)));
            _mm_storeu_si128(p, _mm256_cvtps_ph::<0>(r));
        }
        i += 8;
    }
    for j in i..n {
        y[j] = half::f16::from_f32(
            half::f16::from_bits(x[j])
                .to_f32()
                .mul_add(v, half::f16::from_bits(y[j]).to_f32()),
        )
        .to_bits();
    }
}

/// `dst = f32(f16(src))`, eight values at a time (round to nearest even, as `f2h`).
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn round_to_f16(src: &[f32], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n: 8 f32 readable at src[i] and writable at dst[i].
        unsafe {
            let h = _mm256_cvtps_ph::<0>(_mm256_loadu_ps(src.as_ptr().add(i)));
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for j in i..n {
        dst[j] = half::f16::from_f32(src[j]).to_f32();
    }
}

/// Head sizes of the specialised key loops ([`row_keys_d`], [`keys_group`]): multiples of
/// 64, so that ggml's dot product has no tail (its 64 lanes each chain `D / 64` FMAs).
pub(crate) const HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// Head size of the AVX-512 key loop ([`keys_block_512`]).
pub(crate) const D512: usize = 64;

/// The most heads [`group_keys_d`] runs in lockstep.
pub(crate) const MAX_GROUP: usize = 8;

/// The one-row key loop of `kernels::attn`'s `one_row_keys` for `dk = dv = D` (`N = D / 8`
/// vectors), with the query and the f16 accumulator held in registers: per key the same
/// operations in the same order (ggml's 64-lane dot product and its reduction tree, `scale`,
/// mask, `expf`, the f16 rescale and mad), without the scratch round trips and per-key calls.
/// Returns `(M, S)` and leaves the accumulator in `acc_out`.
///
/// # Safety
/// As [`keys_group`].
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn row_keys_d<const D: usize, const N: usize>(
    qh: &[f32; D],
    acc_out: &mut [u16; D],
    k0: *const u8,
    knb: usize,
    v0: *const u8,
    vnb: usize,
    mask: Option<(*const u8, usize, bool)>,
    start: usize,
    end: usize,
    scale: f32,
) -> (f32, f32) {
    let (mut q, mut acc) = ([*qh], [*acc_out]);
    let rows = KeyRows {
        k0,
        knb,
        v0,
        vnb,
        mask,
    };
    // SAFETY: forwarded.
    let [r] = unsafe { keys_group::<1, D, N>(&mut q, &mut acc, &rows, start..end, scale) };
    *acc_out = acc[0];
    r
}

/// The key and value rows of one key/value head and the mask row of one query: for every
/// key `ic`, `D` f16 values (the head size of the loop that reads them) at `k0 + ic·knb`
/// and at `v0 + ic·vnb`, and with a mask
/// `(p, nb0, f16)` one element (f16 if `f16`, else f32, aligned) at `p + ic·nb0`.
pub(crate) struct KeyRows {
    pub(crate) k0: *const u8,
    pub(crate) knb: usize,
    pub(crate) v0: *const u8,
    pub(crate) vnb: usize,
    pub(crate) mask: Option<(*const u8, usize, bool)>,
}

impl KeyRows {
    /// Key `ic`: its mask value and its key and value rows, or `None` if it is masked
    /// out (−∞).
    ///
    /// # Safety
    /// `ic` is a key the rows are valid for; the CPU supports F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn key(&self, ic: usize) -> Option<(f32, *const u8, *const u8)> {
        // SAFETY: forwarded.
        let mv = unsafe { self.mask_value(ic) };
        (mv != f32::NEG_INFINITY).then(|| {
            // SAFETY: forwarded.
            let (k, v) = unsafe { self.rows(ic) };
            (mv, k, v)
        })
    }

    /// The first bytes of key `ic`'s key row and value row.
    ///
    /// # Safety
    /// `ic` is a key the rows are valid for.
    #[inline]
    pub(super) unsafe fn rows(&self, ic: usize) -> (*const u8, *const u8) {
        // SAFETY: rows ic of keys and values lie in their tensors (caller).
        unsafe { (self.k0.add(ic * self.knb), self.v0.add(ic * self.vnb)) }
    }

    /// Asks for key `ic`'s key and value rows ([`D512`] f16 values each: 128 bytes, two
    /// cache lines when aligned) to be brought into the L2 cache.
    ///
    /// [`keys_block_512`] loads a block's rows in a burst and then computes for a while,
    /// and a block of key rows (a row per key, `nb[1]` apart) spans a 4 KiB page, which
    /// the hardware prefetchers do not cross: without this, decoding attention over a
    /// cache in L3 or memory waited on its rows. Asked for [`AHEAD`] keys ahead and into
    /// L2 (the `T2` hint; `T0` was slower), a layer's attention over a cache in L3 or in
    /// memory takes about a fifth less time (`docs/kernel-bench-notes.md`). The AVX2 loop
    /// ([`keys_group`]), which loads one key's rows at a time, gains nothing from it.
    ///
    /// # Safety
    /// `ic` is a key the rows are valid for.
    #[inline]
    unsafe fn prefetch(&self, ic: usize) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T2};
        // SAFETY: forwarded; a prefetch reads nothing and never faults.
        unsafe {
            let (k, v) = self.rows(ic);
            for p in [k, k.wrapping_add(64), v, v.wrapping_add(64)] {
                _mm_prefetch::<_MM_HINT_T2>(p as *const i8);
            }
        }
    }

    /// The mask value of key `ic` (0 without a mask).
    ///
    /// # Safety
    /// As [`KeyRows::key`].
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn mask_value(&self, ic: usize) -> f32 {
        match self.mask {
            None => 0.0,
            // SAFETY: the element lies in the mask row (caller); aligned; f16 → f32 is
            // exact.
            Some((p, nb0, f16m)) => unsafe {
                let e = p.add(ic * nb0);
                if f16m {
                    let h = std::arch::x86_64::_mm_cvtsi32_si128(*(e as *const u16) as i32);
                    _mm_cvtss_f32(std::arch::x86_64::_mm_cvtph_ps(h))
                } else {
                    *(e as *const f32)
                }
            },
        }
    }
}

/// The online-softmax step of `G` heads with scores `s`: a new maximum gives
/// `ms = expf(M_old − M)`, `vs = 1`, else `ms = 1`, `vs = expf(s − M)`. Updates `max` and
/// returns, per head, that exponential and whether the maximum grew (the exponentials of
/// all heads at once: glibc's `expf`, bit for bit).
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn softmax_step<const G: usize>(
    s: &[f32; G],
    max: &mut [f32; G],
) -> ([f32; G], [bool; G]) {
    let (mut arg, mut grew) = ([0f32; G], [false; G]);
    for g in 0..G {
        if s[g] > max[g] {
            let old = max[g];
            max[g] = s[g];
            arg[g] = old - max[g];
            grew[g] = true;
        } else {
            arg[g] = s[g] - max[g];
        }
    }
    // SAFETY: the features are the caller's.
    (unsafe { exp_lanes(&arg) }, grew)
}

/// `expf` of `G ≤ 8` values, four lanes at a time (`kernels::expf`).
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_lanes<const G: usize>(x: &[f32; G]) -> [f32; G] {
    const { assert!(G <= 8) };
    let mut ys = [0f32; 8];
    let at = |i: usize| if i < G { x[i] } else { 0.0 };
    for c in 0..G.div_ceil(4) {
        // Lanes built in registers (a vector load of values just stored one by one
        // would wait for the stores to retire).
        let v = _mm_setr_ps(at(4 * c), at(4 * c + 1), at(4 * c + 2), at(4 * c + 3));
        // SAFETY: lanes 4c..4c + 4 lie in the array of 8 (G ≤ 8); the features are the
        // caller's.
        unsafe {
            let e = crate::kernels::x86::exp::expf4(v);
            _mm_storeu_ps(ys.as_mut_ptr().add(4 * c), e);
        }
    }
    std::array::from_fn(|g| ys[g])
}

/// Keys per block of [`keys_block_512`].
const BLOCK: usize = 16;

/// How many keys ahead [`keys_block_512`] prefetches rows ([`KeyRows::prefetch`]): two
/// blocks.
const AHEAD: usize = 2 * BLOCK;

/// Heads whose accumulators [`keys_block_512`] updates in one pass over a block.
const PASS: usize = 4;

/// The key loop of [`keys_group`] on AVX-512, sixteen keys at a time, with every head's
/// arithmetic unchanged:
///
/// 1. **Scores.** The block's key rows are widened once; per head, each key's 64 products
///    are folded as ggml does (`(L0 + L2) + (L1 + L3)` of the four 16-lane parts), and the
///    sixteen keys' horizontal sums are taken together by a transposing tree
///    ([`sum_lanes_x16`](crate::kernels::x86::f16::sum_lanes_x16)) that adds the same pairs as ggml's `_mm512_reduce_add_ps`, leaving
///    key `j`'s score in lane `j`; then `·scale`, `+mask`.
/// 2. **Softmax weights.** Key `j` sees the running maximum `M_{j−1}` = the largest of
///    the maximum so far and the block's earlier (unmasked, non-NaN) scores — a prefix
///    maximum across lanes. Where `s_j > M_{j−1}` the key sets a new maximum and its
///    factors are `ms = expf(M_{j−1} − s_j)`, `vs = 1`, else `ms = 1`,
///    `vs = expf(s_j − M_{j−1})`: exactly the one-key step's, all sixteen from one
///    [`expf16`](crate::kernels::x86::exp::expf16).
/// 3. **Accumulators**, key after key as before: `y = f16(y·ms)` on a new maximum,
///    `y = f16(fma(v, vs, y))`, `S = fma(S, ms, vs)`; masked keys are skipped.
///
/// # Safety
/// The CPU supports AVX-512 F/BW/VL, AVX2, FMA and F16C; `rows` valid for every key in
/// `keys`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn keys_block_512<const G: usize>(
    q: &[[f32; D512]; G],
    acc_out: &mut [[u16; D512]; G],
    rows: &KeyRows,
    keys: std::ops::Range<usize>,
    scale: f32,
) -> [(f32, f32); G] {
    use std::arch::x86_64::{
        __m256i, __m512, _mm256_loadu_si256, _mm256_setzero_si256, _mm256_storeu_si256,
        _mm512_add_ps, _mm512_alignr_epi32, _mm512_castps_si512, _mm512_castsi512_ps,
        _mm512_cmp_ps_mask, _mm512_cvtph_ps, _mm512_fmadd_ps, _mm512_loadu_ps,
        _mm512_mask_blend_ps, _mm512_max_ps, _mm512_mul_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps, _mm512_sub_ps, _CMP_GT_OQ, _CMP_ORD_Q,
    };
    const N: usize = D512 / 16;
    let zero = _mm512_setzero_ps();
    let (one, neg_inf) = (_mm512_set1_ps(1.0), _mm512_set1_ps(f32::NEG_INFINITY));
    let (scale_v, widen) = (_mm512_set1_ps(scale), |p: *const u8, i: usize| {
        // SAFETY: callers pass a row pointer with D512 f16 values; i < N.
        _mm512_cvtph_ps(unsafe { _mm256_loadu_si256((p as *const __m256i).add(i)) })
    });
    let mut acc = [[_mm256_setzero_si256(); N]; G];
    for (a, o) in acc.iter_mut().zip(acc_out.iter()) {
        for (i, y) in a.iter_mut().enumerate() {
            // SAFETY: 16 u16 readable at o[16i] (i < D512 / 16).
            *y = unsafe { _mm256_loadu_si256(o.as_ptr().add(16 * i) as *const __m256i) };
        }
    }
    let mut sum = [0f32; G]; // S
    let mut max = [f32::NEG_INFINITY; G]; // M
                                          // The block's key and value rows widened, each head's factors, new-maximum bits.
    let mut kw = [[zero; N]; BLOCK];
    let mut vw = [[zero; N]; BLOCK];
    let (mut ms, mut vs) = ([[0f32; BLOCK]; G], [[0f32; BLOCK]; G]);
    let mut grew = [0u16; G];
    let mut start = keys.start;
    while start < keys.end {
        let nb = (keys.end - start).min(BLOCK);
        let mut mv = [f32::NEG_INFINITY; BLOCK];
        let mut live = 0u16;
        for (j, m) in mv.iter_mut().enumerate().take(nb) {
            // SAFETY: start + j is one of the caller's keys.
            *m = unsafe { rows.mask_value(start + j) };
            live |= u16::from(*m != f32::NEG_INFINITY) << j;
        }
        if live != 0 {
            for j in 0..nb {
                // SAFETY: key start + j is one of the caller's.
                let (kp, vp) = unsafe { rows.rows(start + j) };
                for i in 0..N {
                    kw[j][i] = widen(kp, i);
                    vw[j][i] = widen(vp, i);
                }
                if start + j + AHEAD < keys.end {
                    // SAFETY: that key is one of the caller's too.
                    unsafe { rows.prefetch(start + j + AHEAD) };
                }
            }
            // SAFETY: 16 f32 readable.
            let mvv = unsafe { _mm512_loadu_ps(mv.as_ptr()) };
            let mut scores = [zero; G];
            for g in 0..G {
                // SAFETY: 16 f32 readable at q[g][16i] (i < D512 / 16).
                let qg: [__m512; N] =
                    std::array::from_fn(|i| unsafe { _mm512_loadu_ps(q[g].as_ptr().add(16 * i)) });
                let r: [__m512; BLOCK] = std::array::from_fn(|j| {
                    let l: [__m512; N] =
                        std::array::from_fn(|i| _mm512_fmadd_ps(kw[j][i], qg[i], zero));
                    _mm512_add_ps(_mm512_add_ps(l[0], l[2]), _mm512_add_ps(l[1], l[3]))
                });
                scores[g] = _mm512_add_ps(
                    _mm512_mul_ps(crate::kernels::x86::f16::sum_lanes_x16(&r), scale_v),
                    mvv,
                );
            }
            for (g, &s) in scores.iter().enumerate() {
                // The running maximum before each key: unmasked, ordered scores only
                // (a NaN score never becomes the maximum, as `s > M` is false).
                let counted = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(s, s) & live;
                let carry = _mm512_set1_ps(max[g]);
                let incl =
                    _mm512_max_ps(prefix_max(_mm512_mask_blend_ps(counted, neg_inf, s)), carry);
                let before = _mm512_castsi512_ps(_mm512_alignr_epi32::<15>(
                    _mm512_castps_si512(incl),
                    _mm512_castps_si512(carry),
                ));
                let up = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(s, before) & live;
                let arg =
                    _mm512_mask_blend_ps(up, _mm512_sub_ps(s, before), _mm512_sub_ps(before, s));
                // Masked lanes get 0 (their factors are never read).
                let e = expf16(_mm512_mask_blend_ps(live, zero, arg));
                // SAFETY: 16 f32 writable in each row.
                unsafe {
                    _mm512_storeu_ps(ms[g].as_mut_ptr(), _mm512_mask_blend_ps(up, one, e));
                    _mm512_storeu_ps(vs[g].as_mut_ptr(), _mm512_mask_blend_ps(up, e, one));
                }
                grew[g] = up;
                max[g] = last_lane(incl);
            }
            // PASS heads at a time, their accumulators in registers through the block.
            let mut g = 0;
            while g < G {
                let n = (G - g).min(PASS);
                let factors = Factors {
                    ms: &ms[g..],
                    vs: &vs[g..],
                    grew: &grew[g..],
                    values: &vw,
                    live,
                };
                let (a, s) = (&mut acc[g..g + n], &mut sum[g..g + n]);
                macro_rules! pass {
                    ($($h:literal)*) => {
                        match n {
                            $($h => {
                                // SAFETY: the features are this function's.
                                unsafe {
                                    accumulate::<$h>(
                                        a.try_into().expect("n heads"),
                                        s,
                                        &factors,
                                    )
                                }
                            })*
                            _ => unreachable!("passes hold 1 to {PASS} heads"),
                        }
                    };
                }
                pass!(1 2 3 4);
                g += n;
            }
        }
        start += nb;
    }
    for (a, o) in acc.iter().zip(acc_out.iter_mut()) {
        for (i, y) in a.iter().enumerate() {
            // SAFETY: 16 u16 writable at o[16i] (i < D512 / 16).
            unsafe { _mm256_storeu_si256(o.as_mut_ptr().add(16 * i) as *mut __m256i, *y) };
        }
    }
    std::array::from_fn(|g| (max[g], sum[g]))
}

/// One block's softmax factors for some heads (from the first of them on) and its widened
/// value rows, as [`accumulate`] reads them.
struct Factors<'a> {
    ms: &'a [[f32; BLOCK]],
    vs: &'a [[f32; BLOCK]],
    grew: &'a [u16],
    values: &'a [[std::arch::x86_64::__m512; D512 / 16]; BLOCK],
    live: u16,
}

/// Step 3 of [`keys_block_512`] for `H` heads: over the block's unmasked keys in order,
/// `y = f16(y·ms)` where the key set a new maximum, `y = f16(fma(v, vs, y))` and
/// `S = fma(S, ms, vs)`, with the heads' accumulators held in registers.
///
/// This is about half of the decoding kernel's time, bound by the f16 round trip of the
/// accumulator (`vcvtps2ph` then `vcvtph2ps`), several times the cost of the FMA alone. An
/// exact rounding to f16 with integer and FP operations instead (the binade's quantum added
/// and subtracted, with sign, subnormal and overflow fix-ups) was slower still, and so were
/// two 256-bit round trips (`docs/kernel-bench-notes.md`).
///
/// # Safety
/// The CPU supports AVX-512 F/VL and F16C; `f` holds at least `H` heads.
#[inline(always)]
unsafe fn accumulate<const H: usize>(
    acc: &mut [[std::arch::x86_64::__m256i; D512 / 16]; H],
    sum: &mut [f32],
    f: &Factors,
) {
    use std::arch::x86_64::{
        _mm512_cvtph_ps, _mm512_cvtps_ph, _mm512_fmadd_ps, _mm512_mul_ps, _mm512_set1_ps,
    };
    let mut y = *acc;
    let mut s: [f32; H] = std::array::from_fn(|h| sum[h]);
    let mut bits = f.live;
    while bits != 0 {
        let j = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        for h in 0..H {
            let (ms, vs) = (f.ms[h][j], f.vs[h][j]);
            if f.grew[h] >> j & 1 != 0 {
                let m = _mm512_set1_ps(ms);
                for x in y[h].iter_mut() {
                    *x = _mm512_cvtps_ph::<0>(_mm512_mul_ps(_mm512_cvtph_ps(*x), m));
                }
            }
            let w = _mm512_set1_ps(vs);
            for (x, &v) in y[h].iter_mut().zip(&f.values[j]) {
                *x = _mm512_cvtps_ph::<0>(_mm512_fmadd_ps(v, w, _mm512_cvtph_ps(*x)));
            }
            s[h] = s[h].mul_add(ms, vs);
        }
    }
    *acc = y;
    sum[..H].copy_from_slice(&s);
}

/// The inclusive running maximum across lanes: lane `j` gets `max(x₀, …, x_j)` (no NaN
/// in `x`).
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn prefix_max(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::{
        _mm512_alignr_epi32, _mm512_castps_si512, _mm512_castsi512_ps, _mm512_max_ps,
        _mm512_set1_ps,
    };
    let fill = _mm512_castps_si512(_mm512_set1_ps(f32::NEG_INFINITY));
    let mut x = x;
    // Lanes shifted up by 1, 2, 4, 8 (−∞ shifted in).
    macro_rules! step {
        ($k:literal) => {
            x = _mm512_max_ps(
                x,
                _mm512_castsi512_ps(_mm512_alignr_epi32::<{ 16 - $k }>(
                    _mm512_castps_si512(x),
                    fill,
                )),
            );
        };
    }
    step!(1);
    step!(2);
    step!(4);
    step!(8);
    x
}

/// Lane 15.
///
/// # Safety
/// The CPU supports AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn last_lane(x: std::arch::x86_64::__m512) -> f32 {
    use std::arch::x86_64::{
        _mm512_castps512_ps128, _mm512_permutexvar_ps, _mm512_set1_epi32, _mm_cvtss_f32,
    };
    _mm_cvtss_f32(_mm512_castps512_ps128(_mm512_permutexvar_ps(
        _mm512_set1_epi32(15),
        x,
    )))
}

/// The key loop for `G` query heads `q` (rounded to f16) sharing `rows`, in lockstep: per
/// key, every head gets exactly the operations of the one-head loop (see
/// [`row_keys_d`]); the key and value rows are widened once for all of them. `D` (the head
/// size) is a multiple of 64 and `N = D / 8` (its vectors). Returns each head's `(M, S)`,
/// its accumulator in `acc_out`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `rows` valid for every key in `keys`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn keys_group<const G: usize, const D: usize, const N: usize>(
    q: &mut [[f32; D]; G],
    acc_out: &mut [[u16; D]; G],
    rows: &KeyRows,
    keys: std::ops::Range<usize>,
    scale: f32,
) -> [(f32, f32); G] {
    const { assert!(D == 8 * N && D.is_multiple_of(64)) };
    let zero = _mm256_setzero_ps();
    let mut acc = [[_mm_setzero_si128(); N]; G];
    for (a, o) in acc.iter_mut().zip(acc_out.iter()) {
        for (i, y) in a.iter_mut().enumerate() {
            // SAFETY: 8 u16 readable at o[8i] (i < N = D / 8).
            *y = unsafe { _mm_loadu_si128(o.as_ptr().add(8 * i) as *const __m128i) };
        }
    }
    let mut sum = [0f32; G]; // S
    let mut max = [f32::NEG_INFINITY; G]; // M
    for ic in keys {
        // SAFETY: ic is one of the caller's keys.
        let Some((mv, kp, vp)) = (unsafe { rows.key(ic) }) else {
            continue;
        };
        let (kp, vp) = (kp as *const __m128i, vp as *const __m128i);
        let mut kr = [zero; N];
        for (i, x) in kr.iter_mut().enumerate() {
            // SAFETY: 8 u16 readable at row offset 8i (i < N = D / 8).
            *x = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(kp.add(i)) });
        }
        let mut s = [0f32; G];
        for (g, sg) in s.iter_mut().enumerate() {
            // ggml's dot: lane t (of 64) = the FMA chain over t, t + 64, … from 0 (lane t
            // is vector t / 8 of each block of 64); lanes t + 32 then t + 16 folded in,
            // then `reduce16`.
            let mut l = [zero; 8];
            for b in 0..D / 64 {
                for (i, li) in l.iter_mut().enumerate() {
                    let v = 8 * b + i;
                    // SAFETY: 8 f32 readable at q[g][8v] (v < N = D / 8).
                    let qv = unsafe { _mm256_loadu_ps(q[g].as_ptr().add(8 * v)) };
                    *li = _mm256_fmadd_ps(kr[v], qv, *li);
                }
            }
            let r0 = _mm256_add_ps(_mm256_add_ps(l[0], l[4]), _mm256_add_ps(l[2], l[6]));
            let r1 = _mm256_add_ps(_mm256_add_ps(l[1], l[5]), _mm256_add_ps(l[3], l[7]));
            // reduce16: h8 = hi16 + lo16, h4 = hi8 + lo8, (h4₀ + h4₂) + (h4₁ + h4₃).
            let h8 = _mm256_add_ps(r1, r0);
            let h4 = _mm_add_ps(_mm256_extractf128_ps::<1>(h8), _mm256_castps256_ps128(h8));
            let mut h = [0f32; 4];
            // SAFETY: 4 f32 writable.
            unsafe { _mm_storeu_ps(h.as_mut_ptr(), h4) };
            let mut x = (h[0] + h[2]) + (h[1] + h[3]);
            x *= scale;
            x += mv;
            *sg = x;
        }
        // SAFETY: the CPU supports AVX2 and FMA (caller).
        let (e, grew) = unsafe { softmax_step(&s, &mut max) };
        let ms: [f32; G] = std::array::from_fn(|g| if grew[g] { e[g] } else { 1.0 });
        let vs: [f32; G] = std::array::from_fn(|g| if grew[g] { 1.0 } else { e[g] });
        let mut vr = [zero; N];
        for (i, x) in vr.iter_mut().enumerate() {
            // SAFETY: 8 u16 readable at row offset 8i (i < N = D / 8).
            *x = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(vp.add(i)) });
        }
        for g in 0..G {
            if grew[g] {
                let m = _mm256_set1_ps(ms[g]);
                for y in acc[g].iter_mut() {
                    *y = _mm256_cvtps_ph::<0>(_mm256_mul_ps(_mm256_cvtph_ps(*y), m));
                }
            }
            let w = _mm256_set1_ps(vs[g]);
            for (y, &x) in acc[g].iter_mut().zip(&vr) {
                *y = _mm256_cvtps_ph::<0>(_mm256_fmadd_ps(x, w, _mm256_cvtph_ps(*y)));
            }
            sum[g] = sum[g].mul_add(ms[g], vs[g]);
        }
    }
    for (a, o) in acc.iter().zip(acc_out.iter_mut()) {
        for (i, y) in a.iter().enumerate() {
            // SAFETY: 8 u16 writable at o[8i] (i < N = D / 8).
            unsafe { _mm_storeu_si128(o.as_mut_ptr().add(8 * i) as *mut __m128i, *y) };
        }
    }
    std::array::from_fn(|g| (max[g], sum[g]))
}

/// Head size of [`query_keys_d32_512`].
pub(crate) const D32: usize = 32;

/// Queries of one head that [`query_keys_d32_512`] runs together (one f64 lane each).
pub(crate) const QUERY_LANES: usize = 8;

/// Keys whose scores [`query_keys_d32_512`] computes together.
const SCORE_KEYS: usize = 8;

/// The one-row kernel of `kernels::attn` for up to [`QUERY_LANES`] queries of one head with
/// `dk = dv = 32` (no soft-cap), on AVX-512: the queries share the key and value rows, and
/// each query `g` (lane `g` of every vector) gets exactly the operations of the one-query
/// key loop (`one_row_keys`), in the same order:
///
/// - **Score**: ggml's `ggml_vec_dot_f16` below 64 values adds each product `k·q`, rounded to
///   f32, to an f64 sum in order. The query and key values are f16 values (the query rounded
///   on entry), so each product is exact in f32 (11 + 11 significant bits, exponents far
///   inside f32's range) and `fma(k, q, s)` in f64 gives the same sum step by step: each
///   (query, key) pair is one chain of 32 f64 FMAs, eight queries per vector, eight keys'
///   chains interleaved so their latencies overlap. Then `f32(s)·scale + mask`.
/// - **Softmax and values**, key after key: the lanes whose mask value is not −∞ (and below
///   `live`) take the online-softmax step of `attn::one_row_keys` (a new maximum gives
///   `ms = expf(M_old − M)`, `vs = 1`, else `ms = 1`, `vs = expf(s − M)`, one
///   [`expf16`] for the eight lanes), `y = f16(y·ms)` on a new maximum, then
///   `y = f16(fma(v, vs, y))` and `S = fma(S, ms, vs)`; a lane whose mask is −∞ skips the
///   key.
///
/// `q[g]` holds query `g`'s values rounded to f16; `masks[g]` its mask row (`(p, nb0, f16)`,
/// element `ic` at `p + ic·nb0`) or `None` (no mask: 0); keys `0..n_kv` at `k0 + ic·knb` and
/// values at `v0 + ic·vnb`, 32 f16 each. Lanes `live..` are ignored. Returns each query's
/// `(M, S)` and leaves its unnormalised f16 accumulator in `acc_out[g]`.
///
/// # Safety
/// The CPU supports AVX-512 F/BW/VL, AVX2, FMA and F16C; the rows and mask rows hold every key
/// of `0..n_kv`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn query_keys_d32_512(
    q: &[[f32; D32]; QUERY_LANES],
    live: usize,
    masks: &[Option<(*const u8, usize, bool)>; QUERY_LANES],
    (k0, knb, v0, vnb): (*const u8, usize, *const u8, usize),
    n_kv: usize,
    scale: f32,
    acc_out: &mut [[u16; D32]; QUERY_LANES],
) -> [(f32, f32); QUERY_LANES] {
    use std::arch::x86_64::{
        __m256, __m256i, __m512d, _mm256_add_ps, _mm256_cmp_ps_mask, _mm256_loadu_ps,
        _mm256_mask_blend_ps, _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_si256,
        _mm256_storeu_ps, _mm256_storeu_si256, _mm256_sub_ps, _mm512_castps512_ps256,
        _mm512_cvtpd_ps, _mm512_cvtph_ps, _mm512_cvtps_pd, _mm512_cvtps_ph, _mm512_fmadd_pd,
        _mm512_fmadd_ps, _mm512_loadu_pd, _mm512_mul_ps, _mm512_set1_pd, _mm512_set1_ps,
        _mm512_setzero_pd, _mm512_storeu_pd, _mm512_zextps256_ps512, _CMP_GT_OQ,
    };
    const G: usize = QUERY_LANES;
    let all: u8 = if live >= G { 0xff } else { (1u8 << live) - 1 };
    // The queries as f64, transposed: lane g of row i is value i of query g.
    let mut qt = [[0f64; G]; D32];
    for (g, qg) in q.iter().enumerate() {
        for (i, &x) in qg.iter().enumerate() {
            qt[i][g] = x as f64;
        }
    }
    let mut acc = [[_mm256_setzero_si256(); 2]; G];
    let (one, zero) = (_mm256_set1_ps(1.0), _mm256_set1_ps(0.0));
    let scale_v = _mm256_set1_ps(scale);
    let mut max = _mm256_set1_ps(f32::NEG_INFINITY); // M, lane g
    let mut sum = _mm256_set1_ps(0.0); // S, lane g
    let mut kd = [[0f64; D32]; SCORE_KEYS];
    let mut mv = [[0f32; G]; SCORE_KEYS];
    let mut lanes = [0u8; SCORE_KEYS];
    let mut start = 0;
    while start < n_kv {
        let nb = (n_kv - start).min(SCORE_KEYS);
        let mut any = 0u8;
        for j in 0..nb {
            let mut bits = 0u8;
            for (g, m) in masks.iter().enumerate() {
                let x = match *m {
                    None => 0.0,
                    // SAFETY: key start + j < n_kv lies in the mask row (caller); aligned;
                    // f16 → f32 is exact.
                    Some((p, nb0, f16m)) => unsafe {
                        let e = p.add((start + j) * nb0);
                        if f16m {
                            half::f16::from_bits(*(e as *const u16)).to_f32()
                        } else {
                            *(e as *const f32)
                        }
                    },
                };
                mv[j][g] = x;
                bits |= u8::from(x != f32::NEG_INFINITY) << g;
            }
            lanes[j] = bits & all;
            any |= lanes[j];
        }
        if any == 0 {
            start += nb;
            continue;
        }
        // The block's key rows widened to f64 (exact).
        for (j, row) in kd.iter_mut().enumerate().take(nb) {
            // SAFETY: key start + j < n_kv: 32 f16 (64 bytes) at its row (caller).
            unsafe {
                let kp = k0.add((start + j) * knb) as *const __m256i;
                for h in 0..2 {
                    let w = _mm512_cvtph_ps(std::arch::x86_64::_mm256_loadu_si256(kp.add(h)));
                    let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(w));
                    let hi = _mm512_cvtps_pd(std::arch::x86_64::_mm256_castpd_ps(
                        std::arch::x86_64::_mm512_extractf64x4_pd::<1>(
                            std::arch::x86_64::_mm512_castps_pd(w),
                        ),
                    ));
                    _mm512_storeu_pd(row.as_mut_ptr().add(16 * h), lo);
                    _mm512_storeu_pd(row.as_mut_ptr().add(16 * h + 8), hi);
                }
            }
        }
        // Scores: SCORE_KEYS chains of 32 f64 FMAs, eight queries per lane vector.
        let mut dots: [__m512d; SCORE_KEYS] = [_mm512_setzero_pd(); SCORE_KEYS];
        for (i, qi) in qt.iter().enumerate() {
            // SAFETY: 8 f64 readable.
            let qv = unsafe { _mm512_loadu_pd(qi.as_ptr()) };
            for j in 0..SCORE_KEYS {
                dots[j] = _mm512_fmadd_pd(qv, _mm512_set1_pd(kd[j][i]), dots[j]);
            }
        }
        for j in 0..nb {
            let lv = lanes[j];
            if lv == 0 {
                continue;
            }
            // SAFETY: 8 f32 readable.
            let m = unsafe { _mm256_loadu_ps(mv[j].as_ptr()) };
            let s: __m256 = _mm256_add_ps(_mm256_mul_ps(_mm512_cvtpd_ps(dots[j]), scale_v), m);
            let up = _mm256_cmp_ps_mask::<_CMP_GT_OQ>(s, max) & lv;
            let arg = _mm256_mask_blend_ps(up, _mm256_sub_ps(s, max), _mm256_sub_ps(max, s));
            // Lanes that skip the key get 0 (their factors are never used).
            let arg = _mm256_mask_blend_ps(lv, zero, arg);
            let e = _mm512_castps512_ps256(expf16(_mm512_zextps256_ps512(arg)));
            let ms = _mm256_mask_blend_ps(up, one, e);
            let vs = _mm256_mask_blend_ps(up, e, one);
            max = _mm256_mask_blend_ps(up, max, s);
            sum = _mm256_mask_blend_ps(lv, sum, std::arch::x86_64::_mm256_fmadd_ps(sum, ms, vs));
            let (mut msa, mut vsa) = ([0f32; G], [0f32; G]);
            // SAFETY: 8 f32 writable in each.
            unsafe {
                _mm256_storeu_ps(msa.as_mut_ptr(), ms);
                _mm256_storeu_ps(vsa.as_mut_ptr(), vs);
            }
            // SAFETY: key start + j < n_kv: 32 f16 (64 bytes) at its value row (caller).
            let vw = unsafe {
                let vp = v0.add((start + j) * vnb) as *const __m256i;
                [
                    _mm512_cvtph_ps(std::arch::x86_64::_mm256_loadu_si256(vp)),
                    _mm512_cvtph_ps(std::arch::x86_64::_mm256_loadu_si256(vp.add(1))),
                ]
            };
            for (g, y) in acc.iter_mut().enumerate() {
                if lv >> g & 1 == 0 {
                    continue;
                }
                if up >> g & 1 != 0 {
                    let f = _mm512_set1_ps(msa[g]);
                    for x in y.iter_mut() {
                        *x = _mm512_cvtps_ph::<0>(_mm512_mul_ps(_mm512_cvtph_ps(*x), f));
                    }
                }
                let w = _mm512_set1_ps(vsa[g]);
                for (x, &v) in y.iter_mut().zip(&vw) {
                    *x = _mm512_cvtps_ph::<0>(_mm512_fmadd_ps(v, w, _mm512_cvtph_ps(*x)));
                }
            }
        }
        start += nb;
    }
    for (a, o) in acc.iter().zip(acc_out.iter_mut()) {
        for (h, y) in a.iter().enumerate() {
            // SAFETY: 16 u16 writable at o[16h] (h < 2).
            unsafe { _mm256_storeu_si256(o.as_mut_ptr().add(16 * h) as *mut __m256i, *y) };
        }
    }
    let (mut ma, mut sa) = ([0f32; G], [0f32; G]);
    // SAFETY: 8 f32 writable in each.
    unsafe {
        _mm256_storeu_ps(ma.as_mut_ptr(), max);
        _mm256_storeu_ps(sa.as_mut_ptr(), sum);
    }
    std::array::from_fn(|g| (ma[g], sa[g]))
}

/// Query rows per register block of [`scores_512`] and [`weighted_values_512`].
const RB: usize = 4;

/// The tiled kernel's scores before scaling: for rows `r < rows` of the query tile
/// (`qt`: rows of `dk`) and the `TILE_KV` columns of the transposed key tile (`kt`:
/// `dk` rows of `TILE_KV`), `kq[r·TILE_KV + c]` = the FMA chain over `d` in order,
/// `s = fma(q[r][d], k[d][c], s)` from 0 — the portable loop's chains, four rows by
/// sixty-four columns held in registers.
///
/// # Safety
/// The CPU supports AVX-512 F; `qt` holds `TILE_Q · dk` values, `kt` `dk · TILE_KV`,
/// `kq` `TILE_Q · TILE_KV`; `rows ≤ TILE_Q`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn scores_512(qt: &[f32], kt: &[f32], kq: &mut [f32], rows: usize, dk: usize) {
    use std::arch::x86_64::{
        __m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps,
    };
    const W: usize = TILE_KV / 16;
    assert!(qt.len() >= TILE_Q * dk && kt.len() >= dk * TILE_KV);
    assert!(kq.len() >= TILE_Q * TILE_KV && rows <= TILE_Q);
    for r0 in (0..rows).step_by(RB) {
        // Rows past `rows` (still inside the tile) are computed and dropped.
        let mut s = [[_mm512_setzero_ps(); W]; RB];
        for d in 0..dk {
            // SAFETY: d < dk: row d of the key tile has TILE_KV = 16·W values.
            let k: [__m512; W] = std::array::from_fn(|j| unsafe {
                _mm512_loadu_ps(kt.as_ptr().add(d * TILE_KV + 16 * j))
            });
            for (i, si) in s.iter_mut().enumerate() {
                // r0 + i < TILE_Q (r0 is a multiple of RB below rows ≤ TILE_Q).
                let q = _mm512_set1_ps(qt[(r0 + i) * dk + d]);
                for (x, &kj) in si.iter_mut().zip(&k) {
                    *x = _mm512_fmadd_ps(q, kj, *x);
                }
            }
        }
        for (i, si) in s.iter().enumerate().take(rows - r0) {
            for (j, &x) in si.iter().enumerate() {
                let o = (r0 + i) * TILE_KV + 16 * j;
                // SAFETY: o + 16 ≤ TILE_Q · TILE_KV ≤ kq.len().
                unsafe { _mm512_storeu_ps(kq.as_mut_ptr().add(o), x) };
            }
        }
    }
}

/// The tiled kernel's value step for the query rows `active`: `acc[r·dv + e]` gets the
/// FMA chain over the tile's keys in order, `y = fma(w[r][c], v[c][e], y)` — the portable
/// loop's chains, four rows by sixty-four values held in registers.
///
/// # Safety
/// The CPU supports AVX-512 F; `dv` is a multiple of 64; `kq` holds `TILE_Q · TILE_KV`
/// values, `vt` `TILE_KV · dv`, `acc` `TILE_Q · dv`; every row in `active` is below
/// `TILE_Q`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn weighted_values_512(
    kq: &[f32],
    vt: &[f32],
    acc: &mut [f32],
    active: &[usize],
    dv: usize,
) {
    use std::arch::x86_64::{
        __m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps,
    };
    const W: usize = 4;
    const KV: usize = TILE_KV;
    assert!(dv.is_multiple_of(16 * W) && kq.len() >= TILE_Q * KV);
    assert!(vt.len() >= KV * dv && acc.len() >= TILE_Q * dv);
    assert!(active.iter().all(|&r| r < TILE_Q));
    for rows in active.chunks(RB) {
        // A short block repeats its first row in the spare lanes (computed, not stored).
        let row: [usize; RB] = std::array::from_fn(|i| rows.get(i).copied().unwrap_or(rows[0]));
        for e0 in (0..dv).step_by(16 * W) {
            // SAFETY (all loads and stores below): rows < TILE_Q, e0 + 16·W ≤ dv, c < KV.
            let mut y: [[__m512; W]; RB] = std::array::from_fn(|i| {
                std::array::from_fn(|j| {
                    // SAFETY: row[i] < TILE_Q and e0 + 16·(j + 1) ≤ dv, inside `acc`.
                    unsafe { _mm512_loadu_ps(acc.as_ptr().add(row[i] * dv + e0 + 16 * j)) }
                })
            });
            for c in 0..KV {
                let v: [__m512; W] = std::array::from_fn(|j| {
                    // SAFETY: c < KV and e0 + 16·(j + 1) ≤ dv, inside `vt`.
                    unsafe { _mm512_loadu_ps(vt.as_ptr().add(c * dv + e0 + 16 * j)) }
                });
                for (i, yi) in y.iter_mut().enumerate() {
                    let w = _mm512_set1_ps(kq[row[i] * KV + c]);
                    for (x, &vj) in yi.iter_mut().zip(&v) {
                        *x = _mm512_fmadd_ps(w, vj, *x);
                    }
                }
            }
            for (i, yi) in y.iter().enumerate().take(rows.len()) {
                for (j, &x) in yi.iter().enumerate() {
                    // SAFETY: as the loads (row[i] < TILE_Q, e0 + 16·W ≤ dv).
                    unsafe { _mm512_storeu_ps(acc.as_mut_ptr().add(row[i] * dv + e0 + 16 * j), x) };
                }
            }
        }
    }
}

/// Query rows per register block of [`scores_avx2`] and [`weighted_values_avx2`].
const RB2: usize = 2;
/// Eight-lane registers per row of those blocks (32 columns or values).
const W2: usize = 4;

/// [`scores_512`] for AVX2 + FMA: the same FMA chains (each score `s = fma(q[r][d], k[d][c],
/// s)` over `d` in order from 0), two rows by thirty-two columns held in registers.
///
/// # Safety
/// The CPU supports AVX2 and FMA; `qt` holds `TILE_Q · dk` values, `kt` `dk · TILE_KV`,
/// `kq` `TILE_Q · TILE_KV`; `rows ≤ TILE_Q`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn scores_avx2(qt: &[f32], kt: &[f32], kq: &mut [f32], rows: usize, dk: usize) {
    use std::arch::x86_64::__m256;
    const COLS: usize = 8 * W2;
    const _: () = assert!(TILE_KV.is_multiple_of(COLS) && TILE_Q.is_multiple_of(RB2));
    assert!(qt.len() >= TILE_Q * dk && kt.len() >= dk * TILE_KV);
    assert!(kq.len() >= TILE_Q * TILE_KV && rows <= TILE_Q);
    for r0 in (0..rows).step_by(RB2) {
        for c0 in (0..TILE_KV).step_by(COLS) {
            // Rows past `rows` (still inside the tile) are computed and dropped.
            let mut s = [[_mm256_setzero_ps(); W2]; RB2];
            for d in 0..dk {
                // SAFETY: d < dk, c0 + COLS ≤ TILE_KV: inside row d of the key tile.
                let k: [__m256; W2] = std::array::from_fn(|j| unsafe {
                    _mm256_loadu_ps(kt.as_ptr().add(d * TILE_KV + c0 + 8 * j))
                });
                for (i, si) in s.iter_mut().enumerate() {
                    // r0 + i < TILE_Q (r0 is a multiple of RB2 below rows ≤ TILE_Q).
                    let q = _mm256_set1_ps(qt[(r0 + i) * dk + d]);
                    for (x, &kj) in si.iter_mut().zip(&k) {
                        *x = _mm256_fmadd_ps(q, kj, *x);
                    }
                }
            }
            for (i, si) in s.iter().enumerate().take(rows - r0) {
                for (j, &x) in si.iter().enumerate() {
                    let o = (r0 + i) * TILE_KV + c0 + 8 * j;
                    // SAFETY: o + 8 ≤ TILE_Q · TILE_KV ≤ kq.len().
                    unsafe { _mm256_storeu_ps(kq.as_mut_ptr().add(o), x) };
                }
            }
        }
    }
}

/// [`weighted_values_512`] for AVX2 + FMA: the same FMA chains (`y = fma(w[r][c], v[c][e],
/// y)` over the tile's keys in order), two rows by thirty-two values held in registers.
///
/// # Safety
/// The CPU supports AVX2 and FMA; `dv` is a multiple of 32; `kq` holds `TILE_Q · TILE_KV`
/// values, `vt` `TILE_KV · dv`, `acc` `TILE_Q · dv`; every row in `active` is below
/// `TILE_Q`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn weighted_values_avx2(
    kq: &[f32],
    vt: &[f32],
    acc: &mut [f32],
    active: &[usize],
    dv: usize,
) {
    use std::arch::x86_64::__m256;
    const KV: usize = TILE_KV;
    assert!(dv.is_multiple_of(8 * W2) && kq.len() >= TILE_Q * KV);
    assert!(vt.len() >= KV * dv && acc.len() >= TILE_Q * dv);
    assert!(active.iter().all(|&r| r < TILE_Q));
    for rows in active.chunks(RB2) {
        // A short block repeats its first row in the spare lanes (computed, not stored).
        let row: [usize; RB2] = std::array::from_fn(|i| rows.get(i).copied().unwrap_or(rows[0]));
        for e0 in (0..dv).step_by(8 * W2) {
            let mut y: [[__m256; W2]; RB2] = std::array::from_fn(|i| {
                std::array::from_fn(|j| {
                    // SAFETY: row[i] < TILE_Q and e0 + 8·(j + 1) ≤ dv, inside `acc`.
                    unsafe { _mm256_loadu_ps(acc.as_ptr().add(row[i] * dv + e0 + 8 * j)) }
                })
            });
            for c in 0..KV {
                let v: [__m256; W2] = std::array::from_fn(|j| {
                    // SAFETY: c < KV and e0 + 8·(j + 1) ≤ dv, inside `vt`.
                    unsafe { _mm256_loadu_ps(vt.as_ptr().add(c * dv + e0 + 8 * j)) }
                });
                for (i, yi) in y.iter_mut().enumerate() {
                    let w = _mm256_set1_ps(kq[row[i] * KV + c]);
                    for (x, &vj) in yi.iter_mut().zip(&v) {
                        *x = _mm256_fmadd_ps(w, vj, *x);
                    }
                }
            }
            for (i, yi) in y.iter().enumerate().take(rows.len()) {
                for (j, &x) in yi.iter().enumerate() {
                    // SAFETY: as the loads (row[i] < TILE_Q, e0 + 8·W2 ≤ dv).
                    unsafe { _mm256_storeu_ps(acc.as_mut_ptr().add(row[i] * dv + e0 + 8 * j), x) };
                }
            }
        }
    }
}
