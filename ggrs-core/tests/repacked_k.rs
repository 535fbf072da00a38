//! `mul_mat` with Q4_K and Q2_K weights that llama.cpp keeps repacked (2-D, row count a
//! multiple of 8) against an independent oracle written from the description of ggml's
//! repacked x86 kernels (`ggml_gemm_q4_K_8x8_q8_K`, `ggml_gemv_q4_K_8x8_q8_K` and the Q2_K
//! ones) and of its `forward_mul_mat`:
//!
//! - the first `4·⌊m/4⌋` of `m ≥ 4` activation columns go to the GEMM kernel, quantized by
//!   `ggml_quantize_mat_q8_K_4x8` (largest magnitude to −127 when any value equals `+amax`);
//!   the other columns to the GEMV kernel, quantized by `quantize_row_q8_K` (the sign of the
//!   first value of largest magnitude);
//! - per weight super-block the kernels form exact integer sums `S` (scaled code products)
//!   and `M` (minimums times activation sums) and accumulate `acc = fma(S, d·d_y, acc)` and
//!   `accm = fma(M, dmin·d_y, accm)`: the GEMV once per super-block, the GEMM once per
//!   64 values (Q4_K) or 128 values (Q2_K); the result is `acc − accm`.
//!
//! The oracle decodes every value from the block layout itself (no `bsums`: the minimum term
//! sums the activation codes directly) and quantizes the activations itself, so it shares
//! nothing with the code under test but the formats.

use ggrs_core::quants::dispatch::{self, SumOrder};
use ggrs_core::quants::{self, QK_K};
use ggrs_core::{Context, DType, Executor, Graph};
use half::f16;

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 8) as f32 / 8_388_608.0 - 1.0
    }
}

/// One activation block as the oracle quantized it.
struct Q8Block {
    d: f32,
    q: [i32; QK_K],
}

/// `quantize_row_q8_K` (GEMV columns): `iscale = −127/max` with `max` the first value of
/// largest magnitude; codes `min(127, round_half_even(iscale·x))`; `d = 1/iscale`.
fn q8k_row(x: &[f32]) -> Q8Block {
    let mut max = 0f32;
    for &v in x {
        if v.abs() > max.abs() {
            max = v;
        }
    }
    let mut b = Q8Block {
        d: 0.0,
        q: [0; QK_K],
    };
    if max == 0.0 {
        return b;
    }
    let iscale = -127.0 / max;
    for (q, &v) in b.q.iter_mut().zip(x) {
        *q = ((iscale * v).round_ties_even() as i32).min(127);
    }
    b.d = 1.0 / iscale;
    b
}

/// `ggml_quantize_mat_q8_K_4x8` (GEMM columns): `iscale = −127/amax` when some value equals
/// `+amax`, else `127/amax`; codes `round_half_even(x·iscale)` saturated to i8;
/// `d = 1/iscale`.
fn q8k_4x8(x: &[f32]) -> Q8Block {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let mut b = Q8Block {
        d: 0.0,
        q: [0; QK_K],
    };
    if amax == 0.0 {
        return b;
    }
    let iscale = if x.contains(&amax) {
        -127.0 / amax
    } else {
        127.0 / amax
    };
    for (q, &v) in b.q.iter_mut().zip(x) {
        *q = ((v * iscale).round_ties_even() as i32).clamp(-128, 127);
    }
    b.d = 1.0 / iscale;
    b
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// One decoded weight super-block: `d`, `dmin`, and per value its code, scale and minimum.
struct Decoded {
    d: f32,
    dmin: f32,
    code: [i32; QK_K],
    scale: [i32; QK_K],
    min: [i32; QK_K],
}

/// Q4_K (144 bytes): d, dmin (f16); 12 bytes holding eight 6-bit scales and minimums
/// (sub-blocks 0–3: low 6 bits of bytes j and j+4; 4–7: low nibbles in byte j+4, scale low and
/// minimum high, top two bits in the top bits of bytes j−4 and j); value p of the 256 is the
/// low (p mod 64 < 32) or high nibble of byte 16 + 32·⌊p/64⌋ + p mod 32; sub-blocks of 32.
fn decode_q4_k(x: &[u8]) -> Decoded {
    let s = &x[4..16];
    let six = |j: usize| -> (i32, i32) {
        if j < 4 {
            ((s[j] & 63) as i32, (s[j + 4] & 63) as i32)
        } else {
            let sc = (s[j + 4] & 15) as i32 | ((s[j - 4] >> 6) as i32) << 4;
            let mn = (s[j + 4] >> 4) as i32 | ((s[j] >> 6) as i32) << 4;
            (sc, mn)
        }
    };
    let mut out = Decoded {
        d: f16_at(x, 0),
        dmin: f16_at(x, 2),
        code: [0; QK_K],
        scale: [0; QK_K],
        min: [0; QK_K],
    };
    for p in 0..QK_K {
        let byte = x[16 + 32 * (p / 64) + p % 32];
        out.code[p] = if p % 64 < 32 { byte & 15 } else { byte >> 4 } as i32;
        (out.scale[p], out.min[p]) = six(p / 32);
    }
    out
}

/// Q2_K (84 bytes): 16 bytes of scales (sub-block j of 16 values: scale low nibble, minimum
/// high); 64 bytes of 2-bit codes, value 128h + 32s + 16t + l in bits 2s of byte
/// 16 + 32h + 16t + l; d, dmin (f16) at 80 and 82.
fn decode_q2_k(x: &[u8]) -> Decoded {
    let mut out = Decoded {
        d: f16_at(x, 80),
        dmin: f16_at(x, 82),
        code: [0; QK_K],
        scale: [0; QK_K],
        min: [0; QK_K],
    };
    for v in 0..QK_K {
        let (h, s, t, l) = (v / 128, (v % 128) / 32, (v % 32) / 16, v % 16);
        out.code[v] = ((x[16 + 32 * h + 16 * t + l] >> (2 * s)) & 3) as i32;
        out.scale[v] = (x[v / 16] & 15) as i32;
        out.min[v] = (x[v / 16] >> 4) as i32;
    }
    out
}

/// The oracle: one weight row (`nb` super-blocks of `t`) against one quantized column, with
/// one FMA per `group` values (256: GEMV; 64 or 128: GEMM).
fn oracle(t: DType, row: &[u8], col: &[Q8Block], group: usize) -> f32 {
    let (mut acc, mut accm) = (0f32, 0f32);
    for (x, y) in row.chunks_exact(t.type_size()).zip(col) {
        let w = match t {
            DType::Q4K => decode_q4_k(x),
            _ => decode_q2_k(x),
        };
        for g in (0..QK_K).step_by(group) {
            let (mut s, mut m) = (0i64, 0i64);
            for p in g..g + group {
                s += (w.scale[p] * w.code[p] * y.q[p]) as i64;
                m += (w.min[p] * y.q[p]) as i64;
            }
            acc = (s as f32).mul_add(w.d * y.d, acc);
            accm = (m as f32).mul_add(w.dmin * y.d, accm);
        }
    }
    acc - accm
}

/// `mul_mat(w, x)` for `w: [k, n]` of type `t` and `x: [k, m]` f32, on `threads` threads.
fn run_mul_mat(t: DType, w: &[u8], x: &[f32], k: usize, n: usize, m: usize, th: usize) -> Vec<f32> {
    let mut ctx = Context::with_mem_size(16 << 20);
    let a = ctx.new_tensor(t, &[k, n]).expect("arena");
    let b = ctx.new_tensor(DType::F32, &[k, m]).expect("arena");
    ctx.set_bytes(a, w).expect("whole rows");
    ctx.set_f32(b, x).expect("k·m values");
    let out = ctx.mul_mat(a, b).expect("shapes agree");
    let g = Graph::build(&ctx, out).expect("one node");
    Executor::new(th).compute(&mut ctx, &g).expect("computes");
    ctx.to_f32_vec(out).expect("f32 result")
}

/// Weight rows: half quantized from random values by the reference quantizer, half random
/// bytes (every scale, minimum and code pattern) with finite f16 scales.
fn weights(t: DType, r: &mut Rng, k: usize, n: usize) -> Vec<u8> {
    let rs = t.row_size(k);
    let mut w = vec![0u8; n * rs];
    for (i, row) in w.chunks_exact_mut(rs).enumerate() {
        if i % 2 == 0 {
            let x: Vec<f32> = (0..k).map(|_| r.unit() * 2.0).collect();
            quants::quantize_row_dyn(t, &x, row).expect("whole blocks");
        } else {
            row.iter_mut().for_each(|b| *b = r.next() as u8);
            let at = if t == DType::Q4K { [0, 2] } else { [80, 82] };
            for blk in row.chunks_exact_mut(t.type_size()) {
                for o in at {
                    let h = f16::from_f32(r.unit() * 0.05);
                    blk[o..o + 2].copy_from_slice(&h.to_le_bytes());
                }
            }
        }
    }
    w
}

/// Activation columns: random values of varied scale; in column 1 (a GEMM column once
/// `m ≥ 4`) every block's largest magnitude is reached first by a negative value and later by
/// a positive one, where the two quantizers pick opposite signs; an all-zero block in
/// column 2.
fn activations(r: &mut Rng, k: usize, m: usize) -> Vec<f32> {
    let mut x: Vec<f32> = (0..k * m).map(|i| r.unit() * (1 + i % 7) as f32).collect();
    if m > 1 {
        for blk in x[k..2 * k].chunks_exact_mut(QK_K) {
            let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs())) * 1.5;
            let (i, j) = (r.next() as usize % 100, 100 + r.next() as usize % 150);
            blk[i] = -amax;
            blk[j] = amax;
        }
    }
    if m > 2 {
        x[2 * k..2 * k + QK_K].fill(0.0);
    }
    x
}

#[test]
fn repacked_shapes_take_the_repacked_order() {
    for t in [DType::Q4K, DType::Q2K] {
        assert_eq!(
            dispatch::ggml_sum_order(t, [512, 16, 1, 1]),
            SumOrder::GgmlRepacked
        );
        for m in [1, 4, 8, 64] {
            assert_eq!(
                dispatch::ggml_sum_order_cols(t, [512, 896, 1, 1], m),
                SumOrder::GgmlRepacked
            );
        }
        // Rows not a multiple of 8, or a 3-D weight: not repacked.
        assert_ne!(
            dispatch::ggml_sum_order(t, [512, 12, 1, 1]),
            SumOrder::GgmlRepacked
        );
        assert_ne!(
            dispatch::ggml_sum_order(t, [512, 16, 2, 1]),
            SumOrder::GgmlRepacked
        );
        assert_eq!(
            dispatch::ggml_sum_order_cols(t, [512, 12, 1, 1], 8),
            SumOrder::GgmlTiled
        );
    }
}

/// Every output element of `mul_mat` equals the oracle bit for bit: GEMM order and 4×8
/// quantizer for the first `4·⌊m/4⌋` columns, GEMV order and row quantizer for the rest,
/// for any thread count. Also checks that the cases tell the orders apart: some GEMM
/// elements differ from the GEMV order, and some GEMM columns are quantized with the other
/// sign than `quantize_row_q8_K` would give them.
#[test]
fn mul_mat_equals_the_repacked_kernels_oracle() {
    let mut r = Rng(2024);
    let (mut orders_differ, mut signs_differ) = (0usize, 0usize);
    for (t, group) in [(DType::Q4K, 64), (DType::Q2K, 128)] {
        let (k, n) = (3 * QK_K, 24);
        let w = weights(t, &mut r, k, n);
        let rs = t.row_size(k);
        for m in [1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17] {
            let x = activations(&mut r, k, m);
            let gemm_cols = if m > 3 { m - m % 4 } else { 0 };
            let cols: Vec<(Vec<Q8Block>, Vec<Q8Block>)> = x
                .chunks_exact(k)
                .map(|c| {
                    let row = c.chunks_exact(QK_K).map(q8k_row).collect();
                    let mat = c.chunks_exact(QK_K).map(q8k_4x8).collect();
                    (row, mat)
                })
                .collect();
            for threads in [1, 2, 3] {
                let got = run_mul_mat(t, &w, &x, k, n, m, threads);
                for (j, (row_q, mat_q)) in cols.iter().enumerate() {
                    for i in 0..n {
                        let wr = &w[i * rs..(i + 1) * rs];
                        let want = if j < gemm_cols {
                            let want = oracle(t, wr, mat_q, group);
                            if threads == 1 {
                                orders_differ += (want.to_bits()
                                    != oracle(t, wr, mat_q, QK_K).to_bits())
                                    as usize;
                                signs_differ += (i == 0
                                    && row_q.iter().zip(mat_q).any(|(a, b)| a.d == -b.d))
                                    as usize;
                            }
                            want
                        } else {
                            oracle(t, wr, row_q, QK_K)
                        };
                        assert_eq!(
                            got[j * n + i].to_bits(),
                            want.to_bits(),
                            "{t} m={m} threads={threads} out[{i}, {j}]: {} vs {want}",
                            got[j * n + i]
                        );
                    }
                }
            }
        }
    }
    assert!(orders_differ > 0, "no element tells GEMM from GEMV order");
    assert!(
        signs_differ > 0,
        "no GEMM column quantized with the other sign"
    );
}
