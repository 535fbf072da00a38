//! ggml's x86 dot products of block rows in its summation orders (see the table in
//! `ggml_arith`): portable bodies, each also compiled for AVX2 + FMA + F16C, and the
//! explicit AVX2 kernels of the repacked k-quant orders.

use super::lanes::{
    dispatch_dot, half_at, hsum8, IQ4NL_BYTES, IQ4XS_BYTES, Q4_0_BYTES, Q4_1_BYTES, Q5_0_BYTES,
    Q5_1_BYTES, Q8K_BYTES, Q8_0_BYTES, Q8_1_BYTES,
};
use crate::quants::k_quants::repacked::{q2_k_gemm, q2_k_gemv, q4_k_gemm, q4_k_gemv};

/// Codes of a Q4_0 block in value order (`q − 8`).
#[inline(always)]
pub(super) fn q4_codes(blk: &[u8]) -> [i32; 32] {
    let mut v = [0i32; 32];
    for j in 0..16 {
        v[j] = (blk[2 + j] & 0x0F) as i32 - 8;
        v[j + 16] = (blk[2 + j] >> 4) as i32 - 8;
    }
    v
}

/// Levels of an IQ4_NL block in value order (`KVALUES_IQ4NL[index]`).
#[inline(always)]
pub(super) fn iq4_nl_codes(blk: &[u8]) -> [i32; 32] {
    iq4_levels(&blk[2..18])
}

/// The 32 levels of 16 index bytes in IQ4_NL's layout, in value order.
#[inline(always)]
pub(super) fn iq4_levels(qs: &[u8]) -> [i32; 32] {
    use crate::quants::iq4::KVALUES_IQ4NL;
    let mut v = [0i32; 32];
    for j in 0..16 {
        v[j] = KVALUES_IQ4NL[(qs[j] & 0x0F) as usize] as i32;
        v[j + 16] = KVALUES_IQ4NL[(qs[j] >> 4) as usize] as i32;
    }
    v
}

/// Eight exact lane sums of four products (lane `l`: values `4l..4l + 4`).
#[inline(always)]
pub(super) fn quad_sums(x: &[i32; 32], y: &[i32; 32]) -> [i32; 8] {
    std::array::from_fn(|l| {
        x[4 * l] * y[4 * l]
            + x[4 * l + 1] * y[4 * l + 1]
            + x[4 * l + 2] * y[4 * l + 2]
            + x[4 * l + 3] * y[4 * l + 3]
    })
}

#[inline(always)]
pub(super) fn q8_codes(blk: &[u8]) -> [i32; 32] {
    let mut v = [0i32; 32];
    for j in 0..32 {
        v[j] = blk[2 + j] as i8 as i32;
    }
    v
}

/// Eight lane sums of four products each, FMA-accumulated per block, then [`hsum8`].
#[inline(always)]
pub(super) fn lanes8(nb: usize, block: impl Fn(usize) -> (f32, [i32; 32], [i32; 32])) -> f32 {
    let mut acc = [0f32; 8];
    for i in 0..nb {
        let (d, x, y) = block(i);
        for l in 0..8 {
            let p = x[4 * l] * y[4 * l]
                + x[4 * l + 1] * y[4 * l + 1]
                + x[4 * l + 2] * y[4 * l + 2]
                + x[4 * l + 3] * y[4 * l + 3];
            acc[l] = d.mul_add(p as f32, acc[l]);
        }
    }
    hsum8(&acc)
}

/// The Q4_1/Q5_1 order: [`lanes8`] over the unsigned codes, the minimum terms in one
/// FMA chain `summs = fma(mx, sy, summs)` beside it, and `hsum8(lanes) + summs` at the end.
/// `block(i)` gives `(dx·dy, x codes, y codes, mx, sy)`.
#[inline(always)]
pub(super) fn lanes8_min(
    nb: usize,
    block: impl Fn(usize) -> (f32, [i32; 32], [i32; 32], f32, f32),
) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for i in 0..nb {
        let (d, x, y, m, s) = block(i);
        summs = m.mul_add(s, summs);
        for l in 0..8 {
            let p = x[4 * l] * y[4 * l]
                + x[4 * l + 1] * y[4 * l + 1]
                + x[4 * l + 2] * y[4 * l + 2]
                + x[4 * l + 3] * y[4 * l + 3];
            acc[l] = d.mul_add(p as f32, acc[l]);
        }
    }
    hsum8(&acc) + summs
}

/// Codes of a Q8_1 block in value order.
#[inline(always)]
pub(super) fn q8_1_codes(blk: &[u8]) -> [i32; 32] {
    let mut v = [0i32; 32];
    for j in 0..32 {
        v[j] = blk[4 + j] as i8 as i32;
    }
    v
}

/// Codes of a Q4_1 block in value order (0..=15).
#[inline(always)]
pub(super) fn q4_1_codes(blk: &[u8]) -> [i32; 32] {
    let mut v = [0i32; 32];
    for j in 0..16 {
        v[j] = (blk[4 + j] & 0x0F) as i32;
        v[j + 16] = (blk[4 + j] >> 4) as i32;
    }
    v
}

/// Codes of a Q5_1 block in value order (0..=31): nibbles as Q4_1, bit `j` of `qh` as bit 4
/// of value `j`.
#[inline(always)]
pub(super) fn q5_1_codes(blk: &[u8]) -> [i32; 32] {
    let qh = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
    let mut v = [0i32; 32];
    for j in 0..16 {
        v[j] = (blk[8 + j] & 0x0F) as i32 | (((qh >> j) & 1) << 4) as i32;
        v[j + 16] = (blk[8 + j] >> 4) as i32 | (((qh >> (j + 16)) & 1) << 4) as i32;
    }
    v
}

#[inline(always)]
pub(super) fn dot_q4_1_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8_min(n / 32, |i| {
        let (x, y) = (&a[i * Q4_1_BYTES..], &b[i * Q8_1_BYTES..]);
        let d = half_at(x, 0) * half_at(y, 0);
        (
            d,
            q4_1_codes(x),
            q8_1_codes(y),
            half_at(x, 2),
            half_at(y, 2),
        )
    })
}

#[inline(always)]
pub(super) fn dot_q5_1_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8_min(n / 32, |i| {
        let (x, y) = (&a[i * Q5_1_BYTES..], &b[i * Q8_1_BYTES..]);
        let d = half_at(x, 0) * half_at(y, 0);
        (
            d,
            q5_1_codes(x),
            q8_1_codes(y),
            half_at(x, 2),
            half_at(y, 2),
        )
    })
}

#[inline(always)]
pub(super) fn dot_q8_0_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8(n / 32, |i| {
        let (x, y) = (&a[i * Q8_0_BYTES..], &b[i * Q8_0_BYTES..]);
        (half_at(x, 0) * half_at(y, 0), q8_codes(x), q8_codes(y))
    })
}

/// Codes of a Q5_0 block in value order (`(nibble | fifth_bit << 4) − 16`).
#[inline(always)]
pub(super) fn q5_0_codes(blk: &[u8]) -> [i32; 32] {
    let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
    std::array::from_fn(|j| {
        let byte = blk[6 + j % 16];
        let nib = if j < 16 { byte & 0x0F } else { byte >> 4 } as i32;
        (nib | (((qh >> j) & 1) as i32) << 4) - 16
    })
}

#[inline(always)]
pub(super) fn dot_q5_0_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8(n / 32, |i| {
        let (x, y) = (&a[i * Q5_0_BYTES..], &b[i * Q8_0_BYTES..]);
        (half_at(x, 0) * half_at(y, 0), q5_0_codes(x), q8_codes(y))
    })
}

#[inline(always)]
pub(super) fn dot_q4_0_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8(n / 32, |i| {
        let (x, y) = (&a[i * Q4_0_BYTES..], &b[i * Q8_0_BYTES..]);
        (half_at(x, 0) * half_at(y, 0), q4_codes(x), q8_codes(y))
    })
}

#[inline(always)]
pub(super) fn dot_q4_0_chain_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = 0f32;
    for i in 0..n / 32 {
        let (x, y) = (&a[i * Q4_0_BYTES..], &b[i * Q8_0_BYTES..]);
        let (qx, qy) = (q4_codes(x), q8_codes(y));
        let s: i32 = qx.iter().zip(&qy).map(|(p, q)| p * q).sum();
        acc = (s as f32).mul_add(half_at(x, 0) * half_at(y, 0), acc);
    }
    acc
}

#[inline(always)]
pub(super) fn dot_iq4_nl_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    lanes8(n / 32, |i| {
        let (x, y) = (&a[i * IQ4NL_BYTES..], &b[i * Q8_0_BYTES..]);
        (half_at(x, 0) * half_at(y, 0), iq4_nl_codes(x), q8_codes(y))
    })
}

#[inline(always)]
pub(super) fn dot_iq4_nl_chain_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = 0f32;
    for i in 0..n / 32 {
        let (x, y) = (&a[i * IQ4NL_BYTES..], &b[i * Q8_0_BYTES..]);
        let (qx, qy) = (iq4_nl_codes(x), q8_codes(y));
        let s: i32 = qx.iter().zip(&qy).map(|(p, q)| p * q).sum();
        acc = (s as f32).mul_add(half_at(x, 0) * half_at(y, 0), acc);
    }
    acc
}

/// `ggml_vec_dot_iq4_nl_q8_0` (AVX2): blocks in pairs, the even ones into one set of eight
/// lanes and the odd ones into another (`lane = fma(dy·dx, lane_sum, lane)`), the sets added
/// lane by lane and reduced as `hsum_float_8`; an odd last block in C, `sumf += d·sumi`,
/// which GCC contracts to one FMA.
#[inline(always)]
pub(super) fn dot_iq4_nl_pairs_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let nb = n / 32;
    let block = |i: usize| {
        let (x, y) = (&a[i * IQ4NL_BYTES..], &b[i * Q8_0_BYTES..]);
        let d = half_at(y, 0) * half_at(x, 0);
        (d, quad_sums(&iq4_nl_codes(x), &q8_codes(y)))
    };
    let (mut acc1, mut acc2) = ([0f32; 8], [0f32; 8]);
    let mut ib = 0;
    while ib + 1 < nb {
        let (d1, l1) = block(ib);
        let (d2, l2) = block(ib + 1);
        for l in 0..8 {
            acc1[l] = d1.mul_add(l1[l] as f32, acc1[l]);
            acc2[l] = d2.mul_add(l2[l] as f32, acc2[l]);
        }
        ib += 2;
    }
    let both: [f32; 8] = std::array::from_fn(|l| acc1[l] + acc2[l]);
    let mut sumf = hsum8(&both);
    while ib < nb {
        let (d, l) = block(ib);
        let s: i32 = l.iter().sum();
        sumf = d.mul_add(s as f32, sumf);
        ib += 1;
    }
    sumf
}

/// `ggml_vec_dot_iq4_xs_q8_K` (AVX2): see the module table.
#[inline(always)]
pub(super) fn dot_iq4_xs_lanes_body(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for i in 0..n / 256 {
        let (x, y) = (&a[i * IQ4XS_BYTES..], &b[i * Q8K_BYTES..]);
        let sh = u16::from_le_bytes([x[2], x[3]]);
        let mut lanes = [0i32; 8];
        for ib in 0..8 {
            let low = (x[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
            let high = ((sh >> (2 * ib)) & 3) as u8;
            let ls = (low | (high << 4)) as i32 - 32;
            let qx = iq4_levels(&x[8 + 16 * ib..8 + 16 * ib + 16]);
            let qy: [i32; 32] = std::array::from_fn(|j| y[4 + 32 * ib + j] as i8 as i32);
            for (lane, q) in lanes.iter_mut().zip(quad_sums(&qx, &qy)) {
                *lane += ls * q;
            }
        }
        let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let d = half_at(x, 0) * dy;
        for l in 0..8 {
            acc[l] = d.mul_add(lanes[l] as f32, acc[l]);
        }
    }
    hsum8(&acc)
}

/// The AVX2 + FMA + F16C builds of the bodies above, and the explicit AVX2 kernels of the
/// repacked Q4_K / Q2_K orders (`kernels::x86::repacked_k`).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;

    crate::kernels::x86::target_features!("avx2,fma,f16c":
        pub(super) fn dot_q8_0_lanes(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_q8_0_lanes_body;
        pub(super) fn dot_q4_0_lanes(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_q4_0_lanes_body;
        pub(super) fn dot_q5_0_lanes(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_q5_0_lanes_body;
        pub(super) fn dot_q4_0_chain(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_q4_0_chain_body;
        pub(super) fn dot_iq4_nl_lanes(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_iq4_nl_lanes_body;
        pub(super) fn dot_iq4_nl_chain(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_iq4_nl_chain_body;
        pub(super) fn dot_iq4_nl_pairs(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_iq4_nl_pairs_body;
        pub(super) fn dot_iq4_xs_lanes(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_iq4_xs_lanes_body;
        pub(super) fn dot_q4_1_lanes(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_q4_1_lanes_body;
        pub(super) fn dot_q5_1_lanes(n: usize, a: &[u8], b: &[u8]) -> f32 = dot_q5_1_lanes_body;
    );

    macro_rules! repacked_k {
        ($($name:ident => $kernel:ident, $gemm:literal),* $(,)?) => {$(
            /// # Safety
            /// The CPU supports AVX2, FMA and F16C.
            pub(super) unsafe fn $name(n: usize, a: &[u8], b: &[u8]) -> f32 {
                // SAFETY: the CPU features are the caller's guarantee.
                unsafe { crate::kernels::x86::repacked_k::$kernel(n, a, b, $gemm) }
            }
        )*};
    }
    repacked_k!(
        dot_q4_k_gemv => dot_q4_k, false,
        dot_q4_k_gemm => dot_q4_k, true,
        dot_q2_k_gemv => dot_q2_k, false,
        dot_q2_k_gemm => dot_q2_k, true,
    );
}

dispatch_dot!(
    /// Q8_0 · Q8_0 in ggml's x86 lane order (see the module table).
    dot_q8_0_lanes,
    dot_q8_0_lanes_body,
    avx2::dot_q8_0_lanes
);
dispatch_dot!(
    /// Q4_0 · Q8_0 in ggml's x86 lane order (unpacked weights).
    dot_q4_0_lanes,
    dot_q4_0_lanes_body,
    avx2::dot_q4_0_lanes
);
dispatch_dot!(
    /// Q5_0 · Q8_0 in ggml's x86 lane order (`ggml_vec_dot_q5_0_q8_0`, tinyBLAS).
    dot_q5_0_lanes,
    dot_q5_0_lanes_body,
    avx2::dot_q5_0_lanes
);
dispatch_dot!(
    /// Q4_0 · Q8_0 as the repacked `q4_0_8x8` kernels: one FMA per block.
    dot_q4_0_chain,
    dot_q4_0_chain_body,
    avx2::dot_q4_0_chain
);
dispatch_dot!(
    /// Q4_K · Q8_K as the repacked `ggml_gemv_q4_K_8x8_q8_K` (one FMA per super-block).
    dot_q4_k_gemv,
    q4_k_gemv,
    avx2::dot_q4_k_gemv
);
dispatch_dot!(
    /// Q4_K · Q8_K as the repacked `ggml_gemm_q4_K_8x8_q8_K` (one FMA per 64 values).
    dot_q4_k_gemm,
    q4_k_gemm,
    avx2::dot_q4_k_gemm
);
dispatch_dot!(
    /// Q2_K · Q8_K as the repacked `ggml_gemv_q2_K_8x8_q8_K` (one FMA per super-block).
    dot_q2_k_gemv,
    q2_k_gemv,
    avx2::dot_q2_k_gemv
);
dispatch_dot!(
    /// Q2_K · Q8_K as the repacked `ggml_gemm_q2_K_8x8_q8_K` (one FMA per 128 values).
    dot_q2_k_gemm,
    q2_k_gemm,
    avx2::dot_q2_k_gemm
);
dispatch_dot!(
    /// IQ4_NL · Q8_0 in tinyBLAS's lane order (unpacked weights, two columns or more).
    dot_iq4_nl_lanes,
    dot_iq4_nl_lanes_body,
    avx2::dot_iq4_nl_lanes
);
dispatch_dot!(
    /// IQ4_NL · Q8_0 as the repacked `iq4_nl_8x8` kernels: one FMA per block.
    dot_iq4_nl_chain,
    dot_iq4_nl_chain_body,
    avx2::dot_iq4_nl_chain
);
dispatch_dot!(
    /// IQ4_NL · Q8_0 as `ggml_vec_dot_iq4_nl_q8_0` (unpacked weights, one column).
    dot_iq4_nl_pairs,
    dot_iq4_nl_pairs_body,
    avx2::dot_iq4_nl_pairs
);
dispatch_dot!(
    /// IQ4_XS · Q8_K as `ggml_vec_dot_iq4_xs_q8_K`.
    dot_iq4_xs_lanes,
    dot_iq4_xs_lanes_body,
    avx2::dot_iq4_xs_lanes
);
dispatch_dot!(
    /// Q4_1 · Q8_1 as `ggml_vec_dot_q4_1_q8_1` on x86 (see the module table).
    dot_q4_1_lanes,
    dot_q4_1_lanes_body,
    avx2::dot_q4_1_lanes
);
dispatch_dot!(
    /// Q5_1 · Q8_1 as `ggml_vec_dot_q5_1_q8_1` on x86 (see the module table).
    dot_q5_1_lanes,
    dot_q5_1_lanes_body,
    avx2::dot_q5_1_lanes
);
