//! The tests of `ggml_arith`: the SIMD builds against the portable bodies, the quantizers
//! against their definitions, `v_expf` against the definition.

use half::f16;

use super::dots::*;
use super::exp::*;
use super::f16::*;
use super::lanes::*;
use super::quantize::*;
use crate::cpu::{isa, Isa};
use crate::dtype::DType;

fn vals(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 * 0.731 + seed as f32).sin() * 2.5) + 0.01 * (i % 5) as f32)
        .collect()
}

fn q8(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; x.len() / 32 * Q8_0_BYTES];
    quantize_row_q8_0_x86(x, &mut out);
    out
}

fn f16s(x: &[f32]) -> Vec<u8> {
    x.iter()
        .flat_map(|&v| f16::from_f32(v).to_le_bytes())
        .collect()
}

#[test]
fn vectorised_dots_equal_portable_ones() {
    if isa() < Isa::Avx2 {
        return;
    }
    for nb in [1usize, 2, 3, 7, 28, 152] {
        let n = nb * 32;
        let (x, y) = (vals(n, 1), vals(n, 2));
        let (qx, qy) = (q8(&x), q8(&y));
        assert_eq!(
            dot_q8_0_lanes(n, &qx, &qy).to_bits(),
            dot_q8_0_lanes_body(n, &qx, &qy).to_bits()
        );
        // Q4_0 bytes: any nibbles will do for the order check.
        let q4: Vec<u8> = (0..nb * Q4_0_BYTES).map(|i| (i * 37 % 251) as u8).collect();
        let mut q4 = q4;
        for blk in q4.chunks_exact_mut(Q4_0_BYTES) {
            blk[..2].copy_from_slice(&f16::from_f32(0.013).to_le_bytes());
        }
        assert_eq!(
            dot_q4_0_lanes(n, &q4, &qy).to_bits(),
            dot_q4_0_lanes_body(n, &q4, &qy).to_bits()
        );
        assert_eq!(
            dot_q4_0_chain(n, &q4, &qy).to_bits(),
            dot_q4_0_chain_body(n, &q4, &qy).to_bits()
        );
        // Q5_0 (any bytes, finite scales): the portable lanes equal the SIMD build, which
        // keeps ggml's lanes (`kernels::x86`).
        let mut q5: Vec<u8> = (0..nb * Q5_0_BYTES).map(|i| (i * 41 % 249) as u8).collect();
        for blk in q5.chunks_exact_mut(Q5_0_BYTES) {
            blk[..2].copy_from_slice(&f16::from_f32(-0.021).to_le_bytes());
        }
        let portable = dot_q5_0_lanes_body(n, &q5, &qy).to_bits();
        assert_eq!(dot_q5_0_lanes(n, &q5, &qy).to_bits(), portable);
        let simd = crate::quants::dispatch::active_variant_in(
            DType::Q5_0,
            crate::quants::dispatch::SumOrder::GgmlLanes,
        )
        .expect("an AVX2 Q5_0 build");
        assert_eq!((simd.dot)(n, &q5, &qy).to_bits(), portable, "nb={nb}");
        // IQ4_NL: the same bytes read as level indices.
        for (f, body) in [
            (
                dot_iq4_nl_lanes as fn(usize, &[u8], &[u8]) -> f32,
                dot_iq4_nl_lanes_body as fn(usize, &[u8], &[u8]) -> f32,
            ),
            (dot_iq4_nl_chain, dot_iq4_nl_chain_body),
            (dot_iq4_nl_pairs, dot_iq4_nl_pairs_body),
        ] {
            assert_eq!(
                f(n, &q4, &qy).to_bits(),
                body(n, &q4, &qy).to_bits(),
                "nb={nb}"
            );
        }
        // IQ4_XS against Q8_K: any index and scale bytes, finite scales.
        let nk = nb.div_ceil(8);
        let mut xs: Vec<u8> = (0..nk * IQ4XS_BYTES)
            .map(|i| (i * 53 % 253) as u8)
            .collect();
        let mut ys: Vec<u8> = (0..nk * Q8K_BYTES).map(|i| (i * 29 % 255) as u8).collect();
        for blk in xs.chunks_exact_mut(IQ4XS_BYTES) {
            blk[..2].copy_from_slice(&f16::from_f32(0.021).to_le_bytes());
        }
        for blk in ys.chunks_exact_mut(Q8K_BYTES) {
            blk[..4].copy_from_slice(&0.37f32.to_le_bytes());
        }
        assert_eq!(
            dot_iq4_xs_lanes(256 * nk, &xs, &ys).to_bits(),
            dot_iq4_xs_lanes_body(256 * nk, &xs, &ys).to_bits()
        );
        // Q4_1/Q5_1 against Q8_1: any codes, modest scales and minimums.
        let mut y1 = vec![0u8; nb * Q8_1_BYTES];
        quantize_row_q8_1_x86(&y, &mut y1);
        for (bytes, dot, body) in [
            (
                Q4_1_BYTES,
                dot_q4_1_lanes as fn(usize, &[u8], &[u8]) -> f32,
                dot_q4_1_lanes_body as fn(usize, &[u8], &[u8]) -> f32,
            ),
            (Q5_1_BYTES, dot_q5_1_lanes, dot_q5_1_lanes_body),
        ] {
            let mut w: Vec<u8> = (0..nb * bytes).map(|i| (i * 53 % 241) as u8).collect();
            for (b, blk) in w.chunks_exact_mut(bytes).enumerate() {
                blk[..2].copy_from_slice(&f16::from_f32(0.011 + 0.001 * b as f32).to_le_bytes());
                blk[2..4].copy_from_slice(&f16::from_f32(-0.2 + 0.03 * b as f32).to_le_bytes());
            }
            assert_eq!(dot(n, &w, &y1).to_bits(), body(n, &w, &y1).to_bits());
        }
    }
    for n in 0..=515 {
        let (x, y) = (vals(n, 3), vals(n, 4));
        let (hx, hy) = (f16s(&x), f16s(&y));
        assert_eq!(
            dot_f16_vec(n, &hx, &hy).to_bits(),
            dot_f16_vec_body(n, &hx, &hy).to_bits(),
            "n={n}"
        );
        let m = n / 16 * 16;
        assert_eq!(
            dot_f16_lanes16(m, &hx, &hy).to_bits(),
            dot_f16_lanes16_body(m, &hx, &hy).to_bits(),
            "n={m}"
        );
    }
}

/// The F16 tiles (this CPU's build, and the AVX2 build directly) give the one-element
/// kernels' bits.
#[test]
fn f16_tiles_equal_one_element_kernels() {
    if isa() < Isa::Avx2 {
        return;
    }
    for n in [0usize, 16, 48, 64, 80, 896, 1000, 1024] {
        let rows: Vec<Vec<u8>> = (0..8).map(|s| f16s(&vals(n, 10 + s))).collect();
        let a: [&[u8]; 4] = std::array::from_fn(|r| &rows[r][..]);
        let b: [&[u8]; 4] = std::array::from_fn(|c| &rows[4 + c][..]);
        if n % 16 == 0 {
            let wide: Vec<Vec<f32>> = b
                .iter()
                .map(|r| r.chunks_exact(2).map(|h| half_at(h, 0)).collect())
                .collect();
            let t4 = f16_lanes16_tile_f32::<4, 4>(n, a, [&wide[0], &wide[1], &wide[2], &wide[3]]);
            for r in 0..4 {
                for c in 0..4 {
                    let want = dot_f16_lanes16_body(n, a[r], b[c]).to_bits();
                    assert_eq!(t4[r][c].to_bits(), want, "n={n} ({r}, {c}), 4 × 4");
                }
            }
            let t2 = f16_lanes16_tile_f32::<4, 3>(n, a, [&wide[0], &wide[1], &wide[3]]);
            for r in 0..4 {
                for (c, bc) in [0, 1, 3].into_iter().enumerate() {
                    let want = dot_f16_lanes16_body(n, a[r], b[bc]).to_bits();
                    assert_eq!(t2[r][c].to_bits(), want, "n={n} ({r}, {bc})");
                }
            }
            // The AVX2 shape, through the dispatcher and the AVX2 build itself.
            let (a2, b3) = ([a[1], a[3]], [&wide[2][..], &wide[0], &wide[3]]);
            let via = f16_lanes16_tile_f32::<2, 3>(n, a2, b3);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: isa() >= Avx2 (checked above): AVX2, FMA and F16C; the rows hold 2n
            // bytes and the widened columns n values.
            let avx2 = unsafe {
                crate::kernels::x86::f16::f16_lanes16_tile_f32_avx2::<2, 3>(
                    n,
                    a2.map(|r| r.as_ptr()),
                    b3.map(|c| c.as_ptr()),
                )
            };
            for (r, ar) in a2.into_iter().enumerate() {
                for (c, bc) in [2, 0, 3].into_iter().enumerate() {
                    let want = dot_f16_lanes16_body(n, ar, b[bc]).to_bits();
                    assert_eq!(via[r][c].to_bits(), want, "n={n} ({r}, {bc}), 2 × 3");
                    #[cfg(target_arch = "x86_64")]
                    assert_eq!(avx2[r][c].to_bits(), want, "n={n} ({r}, {bc}), AVX2 build");
                }
            }
        }
    }
}

/// The AVX-512 kernel that runs groups of 4 × 4 tiles and stores them itself gives, at
/// every output, the portable one-element kernel's bits (several groups, an output column
/// stride wider than the four rows, spare output untouched).
#[cfg(target_arch = "x86_64")]
#[test]
fn f16_tile_groups_equal_one_element_kernels() {
    if isa() < Isa::Avx512 {
        return;
    }
    for n in [16usize, 48, 384, 1536] {
        let rows: Vec<Vec<u8>> = (0..4).map(|s| f16s(&vals(n, 20 + s))).collect();
        let cols: Vec<Vec<u8>> = (0..12).map(|s| f16s(&vals(n, 40 + s))).collect();
        let wide: Vec<f32> = cols
            .iter()
            .flat_map(|r| r.chunks_exact(2).map(|h| half_at(h, 0)).collect::<Vec<_>>())
            .collect();
        let stride = 7;
        let mut out = vec![f32::NAN; 12 * stride];
        // SAFETY: AVX-512 (checked); n is a multiple of 16; each weight row holds 2n bytes,
        // `wide` 12 columns of n values; `out` holds 4 values at each of 12 columns
        // `stride` apart.
        unsafe {
            crate::kernels::x86::f16::f16_tiles_4x4_cols(
                n,
                std::array::from_fn(|r| rows[r].as_ptr()),
                wide.as_ptr(),
                n,
                3,
                out.as_mut_ptr(),
                stride,
            )
        };
        for (j, col) in cols.iter().enumerate() {
            for (r, row) in rows.iter().enumerate() {
                let want = dot_f16_lanes16_body(n, row, col).to_bits();
                assert_eq!(out[j * stride + r].to_bits(), want, "n={n} ({r}, {j})");
            }
            assert!(out[j * stride + 4..(j + 1) * stride]
                .iter()
                .all(|x| x.is_nan()));
        }
    }
}

#[test]
fn dots_are_close_to_exact_sums() {
    let n = 28 * 32;
    let (x, y) = (vals(n, 5), vals(n, 6));
    let (qx, qy) = (q8(&x), q8(&y));
    let deq = |q: &[u8]| -> Vec<f64> {
        q.chunks_exact(Q8_0_BYTES)
            .flat_map(|b| {
                let d = half_at(b, 0) as f64;
                (0..32).map(move |j| d * (b[2 + j] as i8) as f64)
            })
            .collect()
    };
    let want: f64 = deq(&qx).iter().zip(deq(&qy)).map(|(a, b)| a * b).sum();
    let got = dot_q8_0_lanes(n, &qx, &qy) as f64;
    assert!(
        (got - want).abs() <= 1e-5 * want.abs().max(1.0),
        "{got} vs {want}"
    );
    let (hx, hy) = (f16s(&x), f16s(&y));
    let want: f64 = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| f16::from_f32(a).to_f64() * f16::from_f32(b).to_f64())
        .sum();
    for got in [dot_f16_vec(n, &hx, &hy), dot_f16_lanes16(n, &hx, &hy)] {
        assert!((got as f64 - want).abs() <= 1e-5 * want.abs().max(1.0));
    }
}

#[test]
fn x86_quantizer_build_equals_portable_body() {
    for nb in [1usize, 3, 28, 152] {
        let mut x = vals(nb * 32, 9);
        // Exact halves, zeros, a zero block and an infinity.
        x[1] = 0.5;
        x[2] = -2.5;
        x[nb * 32 - 1] = f32::INFINITY;
        for v in &mut x[32..64.min(nb * 32)] {
            *v = 0.0;
        }
        let (mut a, mut b) = (vec![0u8; nb * Q8_0_BYTES], vec![0u8; nb * Q8_0_BYTES]);
        quantize_row_q8_0_x86(&x, &mut a);
        quantize_row_q8_0_body(&x, &mut b);
        assert_eq!(a, b);
    }
}

/// Awkward groups of 32: ties, zeros, a zero block, tiny maxima (127/max overflows),
/// huge values, NaN and infinities in various lanes.
fn awkward(nb: usize, seed: u32) -> Vec<f32> {
    let mut x = vals(nb * 32, seed);
    for (b, g) in x.chunks_exact_mut(32).enumerate() {
        let at = (b * 7 + seed as usize) % 32;
        match (b + seed as usize) % 9 {
            0 => g.fill(0.0),
            1 => {
                for (j, v) in g.iter_mut().enumerate() {
                    *v = (j as f32 - 16.0) * 0.5;
                }
                g[at] = 127.0;
            }
            2 => g[at] = f32::NAN,
            3 => g[at] = f32::INFINITY,
            4 => g[at] = f32::NEG_INFINITY,
            5 => {
                for v in g.iter_mut() {
                    *v *= 1e-39;
                }
            }
            6 => {
                for v in g.iter_mut() {
                    *v *= 3e38;
                }
            }
            7 => g[0] = f32::NAN,
            _ => {}
        }
    }
    x
}

#[test]
fn x86_q8_1_quantizer_build_equals_portable_body() {
    for nb in [1usize, 2, 9, 28, 152] {
        for seed in 0..9 {
            let x = awkward(nb, seed);
            let (mut a, mut b) = (vec![0u8; nb * Q8_1_BYTES], vec![1u8; nb * Q8_1_BYTES]);
            quantize_row_q8_1_x86(&x, &mut a);
            quantize_row_q8_1_body(&x, &mut b);
            assert_eq!(a, b, "nb={nb} seed={seed}");
        }
    }
}

/// On finite inputs with normal maxima, Q8_1's `d` and codes are Q8_0's (the same
/// instructions in ggml), and `s` is `f16(d · Σ codes)` computed from the written codes.
#[test]
fn x86_q8_1_is_q8_0_plus_the_code_sum() {
    let nb = 40;
    let mut x = vals(nb * 32, 11);
    for (b, g) in x.chunks_exact_mut(32).enumerate() {
        if b % 5 == 0 {
            for (j, v) in g.iter_mut().enumerate() {
                *v = (j as f32 - 16.0) * 0.5;
            }
            g[b % 32] = -127.0;
        }
        if b % 7 == 3 {
            g.fill(0.0);
        }
    }
    let q0 = q8(&x);
    let mut q1 = vec![0u8; nb * Q8_1_BYTES];
    quantize_row_q8_1_x86(&x, &mut q1);
    let blocks = q0.chunks_exact(Q8_0_BYTES).zip(q1.chunks_exact(Q8_1_BYTES));
    for ((b0, b1), xs) in blocks.zip(x.chunks_exact(32)) {
        assert_eq!(b0[..2], b1[..2]);
        assert_eq!(b0[2..], b1[4..]);
        // The f32 scale, before its rounding to f16.
        let d = xs.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        let sum: i32 = b1[4..].iter().map(|&c| c as i8 as i32).sum();
        let s = f16::from_f32(d * sum as f32);
        assert_eq!(half_at(b1, 2).to_bits(), s.to_f32().to_bits());
    }
}

#[test]
fn x86_quantizer_rounds_half_to_even_with_id_127_over_max() {
    // amax = 127 makes id = 1 exactly: 0.5 → 0, 1.5 → 2, 2.5 → 2, −2.5 → −2.
    let mut x = [0f32; 32];
    x[0] = 127.0;
    x[1] = 0.5;
    x[2] = 1.5;
    x[3] = 2.5;
    x[4] = -2.5;
    let q = q8(&x);
    assert_eq!(half_at(&q, 0), 1.0);
    let codes: Vec<i8> = q[2..7].iter().map(|&b| b as i8).collect();
    assert_eq!(codes, [127, 0, 2, 2, -2]);
}

#[test]
fn v_expf16_and_swiglu_variants_agree_with_v_expf() {
    // Through the normal range, the results that round to subnormals (n < −126) and
    // the saturated ends; both the dispatched variant (AVX-512 `scalef` where the CPU
    // has it) and the portable body.
    let xs: Vec<f32> = (0..8000).map(|i| (i as f32 - 4000.0) * 0.0371).collect();
    for c in xs.chunks_exact(16) {
        let a: [f32; 16] = c.try_into().unwrap();
        for (name, got) in [("v_expf16", v_expf16(&a)), ("body", v_expf16_body(&a))] {
            for l in 0..16 {
                assert_eq!(
                    got[l].to_bits(),
                    v_expf(a[l]).to_bits(),
                    "{name}: x = {}",
                    a[l]
                );
            }
        }
    }
    // Groups mixing ordinary lanes with saturating ones (−∞, as masked scores give, and
    // far out of range), lanes between the ranges (|n| in 126..192) and NaN.
    let special = [
        f32::NEG_INFINITY,
        f32::INFINITY,
        f32::NAN,
        -200.0,
        200.0,
        -100.0,
        100.0,
        -87.9,
        88.5,
        -0.0,
        1e-30,
    ];
    for (t, &sp) in special.iter().enumerate() {
        for every in [1usize, 2, 5, 16] {
            let a: [f32; 16] = std::array::from_fn(|l| {
                if (l + t) % every == 0 {
                    sp
                } else {
                    (l as f32 - 8.0) * 3.7
                }
            });
            for got in [v_expf16(&a), v_expf16_body(&a)] {
                for l in 0..16 {
                    let want = v_expf(a[l]);
                    assert!(
                        got[l].to_bits() == want.to_bits() || (got[l].is_nan() && want.is_nan()),
                        "x = {} in a group with {sp}: {} vs {want}",
                        a[l],
                        got[l]
                    );
                }
            }
        }
    }
    let g: Vec<f32> = (0..531).map(|i| ((i as f32) * 0.37).sin() * 9.0).collect();
    let u: Vec<f32> = (0..531).map(|i| ((i as f32) * 0.11).cos()).collect();
    let (mut a, mut b) = (vec![0f32; 531], vec![0f32; 531]);
    swiglu_row(&mut a, &g, Some(&u));
    swiglu_row_body(&mut b, &g, Some(&u));
    assert_eq!(a, b);
    for i in 0..531 {
        let e = if i < 528 {
            v_expf(-g[i])
        } else {
            (-g[i]).exp()
        };
        assert_eq!(
            a[i].to_bits(),
            (g[i] / (1.0 + e) * u[i]).to_bits(),
            "i = {i}"
        );
    }
}

#[test]
fn v_expf_is_within_two_ulp_and_saturates() {
    let mut x = -103.0f32;
    while x < 88.0 {
        let got = v_expf(x) as f64;
        let want = (x as f64).exp();
        let ulp = (f32::EPSILON as f64 * want).max(1.5e-45);
        assert!(
            (got - want).abs() <= 2.0 * ulp,
            "v_expf({x}) = {got}, exp = {want}"
        );
        x += 0.0137;
    }
    assert_eq!(v_expf(f32::NEG_INFINITY), 0.0);
    assert_eq!(v_expf(-200.0), 0.0);
    assert_eq!(v_expf(200.0), f32::INFINITY);
    assert_eq!(v_expf(0.0), 1.0);
}
