//! IQ1_M, ggml's 1.75-bit grid i-quant: 256 values per 56-byte block.
//!
//! Layout: `qs[32]` (the low 8 bits of an 11-bit `iq1s_grid` index per group of 8 values),
//! `qh[16]` (per 16 values, one nibble per group of 8: bits 0–2 are bits 8–10 of its index,
//! bit 3 the sign of its shift), `scales[8]` (four `u16`: bits 0–11 hold four 3-bit scales,
//! one per 16 values; the top nibbles together make the f16 block scale `d`). Value:
//! `d·(2s + 1)·(grid ± 1/8)` with grid values −1, 0, 1. Its dot product pairs with Q8_K.
//!
//! Writing it is ggml's `quantize_row_iq1_m_impl` ([`quantize_blocks`]), with importance
//! weights (`llama-quantize --imatrix`, which requires them for this type) or without.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::iq1_search::{ascending, fit_to_grid, search, split_levels, X_M, X_P};
use super::iq_codes::{
    byte_at, iq1_block, iq1_grid_sum, iq1_x86_lanes, wrap_neg, Iq1Block, Iq1Codes, SIGN_BYTES,
};
use super::iq_grids::IQ1S_GRID;
use super::iq_search::{sub_block_scales, sub_block_weights};
use super::k_quants::{sum_x2, QK_K};
use super::{c_max, to_fp16, BlockQ8K};
use crate::kernels::ggml_arith::lanes::hsum8;

/// One IQ1_M block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ1M {
    /// Low index bits, one byte per group of 8 values.
    pub qs: [u8; QK_K / 8],
    /// High index bits and shift signs, a nibble per group of 8 values.
    pub qh: [u8; QK_K / 16],
    /// 3-bit scales and the f16 block scale (see the module docs).
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIQ1M>() == 56);

impl BlockIQ1M {
    fn sc(&self, k: usize) -> u16 {
        u16::from_le_bytes([self.scales[2 * k], self.scales[2 * k + 1]])
    }

    /// The block scale: the top nibbles of the four scale words.
    pub fn d(&self) -> f32 {
        let bits = (self.sc(0) >> 12)
            | ((self.sc(1) >> 8) & 0x00f0)
            | ((self.sc(2) >> 4) & 0x0f00)
            | (self.sc(3) & 0xf000);
        f16::from_bits(bits).to_f32()
    }
}

impl Iq1Block for BlockIQ1M {
    fn codes(&self) -> Iq1Codes {
        let mut c = Iq1Codes {
            d: self.d(),
            ..Default::default()
        };
        for k in 0..QK_K / 8 {
            let h = (self.qh[k / 2] >> (4 * (k % 2))) & 15;
            c.grid[k] = IQ1S_GRID[self.qs[k] as usize | (((h & 7) as usize) << 8)];
            c.delta_neg[k] = SIGN_BYTES[if h & 8 != 0 { 255 } else { 0 }];
        }
        for (g, ls) in c.ls.iter_mut().enumerate() {
            let ib = g / 2;
            let s = (self.sc(ib / 2) >> (6 * (ib % 2) + 3 * (g % 2))) & 7;
            *ls = 2 * s as i16 + 1;
        }
        c
    }
}

/// `ggml_vec_dot_iq1_m_q8_K_generic`: per block `sumf = fma(d·d_y, sumi1 + 1/8·sumi2, sumf)`,
/// `sumi2` the exact `Σ ls·(±q)`.
fn dot_generic(a: &[BlockIQ1M], b: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in a.iter().zip(b) {
        let c = x.codes();
        let sumi2: i32 =
            y.qs.iter()
                .enumerate()
                .map(|(v, &q)| {
                    let s = if byte_at(&c.delta_neg, v) != 0 { -1 } else { 1 };
                    s * q as i32 * c.ls[v / 16] as i32
                })
                .sum();
        let t = iq1_grid_sum(&c, y) as f32 + 0.125 * sumi2 as f32;
        sumf = (c.d * y.d).mul_add(t, sumf);
    }
    sumf
}

iq1_block!(
    BlockIQ1M,
    IQ1M,
    dot_iq1_m_x86,
    dot_generic,
    quantize_blocks,
    false
);

/// Values per sub-block (ggml's `IQ1M_BLOCK_SIZE`).
const BS: usize = 16;

/// ggml's `GROUP_MAX_EPS_IQ1_M`: sub-blocks whose largest magnitude is below it stay zero.
const GROUP_MAX_EPS: f32 = 1e-7;

/// The level values of group `k` (0 or 1) of a sub-block with shift pattern `shift`
/// (0: +,+; 1: +,−; 2: −,+; 3: −,−).
fn shifted(shift: u8, k: usize) -> &'static [f32; 3] {
    let negative = if k == 0 { shift >= 2 } else { shift % 2 == 1 };
    if negative {
        &X_M
    } else {
        &X_P
    }
}

/// The best split of a sub-block of 16 values (`order` its ascending order) and its shift
/// pattern, as ggml searches it: prefix sums per half (each half of 8 may take either
/// shift), and since both shifts' level steps are 1, a split's sums collapse to
/// `T·v₂ − px[i1] − px[i2]` and `W·v₂² + pw[i1]·c₁ + pw[i2]·c₂`. Returns the split, the
/// pattern and the scale `Σ w·q·x / Σ w·q²` of the best `(Σ w·q·x)² / Σ w·q²`.
fn best_split(
    xb: &[f32],
    weight: &[f32],
    order: &[usize],
    max: f32,
) -> Option<((usize, usize), u8, f32)> {
    let mut px = [[0f32; BS + 1]; 2];
    let mut pw = [[0f32; BS + 1]; 2];
    for (j, &i) in order.iter().enumerate() {
        let h = usize::from(i >= BS / 2);
        px[h][j + 1] = px[h][j] + weight[i] * xb[i];
        px[1 - h][j + 1] = px[1 - h][j];
        pw[h][j + 1] = pw[h][j] + weight[i];
        pw[1 - h][j + 1] = pw[1 - h][j];
    }
    let txs = [px[0][BS], px[1][BS]];
    let tws = [pw[0][BS], pw[1][BS]];
    let (p2, m2) = (X_P[2], X_M[2]);
    let cp1 = X_P[0] * X_P[0] - X_P[1] * X_P[1];
    let cp2 = X_P[1] * X_P[1] - X_P[2] * X_P[2];
    let cm1 = X_M[0] * X_M[0] - X_M[1] * X_M[1];
    let cm2 = X_M[1] * X_M[1] - X_M[2] * X_M[2];
    let mut best_score = -f32::MAX;
    let mut scale = max;
    let mut best = None;
    for i1 in 0..=BS {
        for i2 in i1..=BS {
            let (mut qx_p, mut qx_m, mut q2_p, mut q2_m) =
                ([0f32; 2], [0f32; 2], [0f32; 2], [0f32; 2]);
            for h in 0..2 {
                let sx = px[h][i1] + px[h][i2];
                qx_p[h] = txs[h] * p2 - sx;
                qx_m[h] = txs[h] * m2 - sx;
                q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
            }
            let sumqx = [
                qx_p[0] + qx_p[1],
                qx_p[0] + qx_m[1],
                qx_m[0] + qx_p[1],
                qx_m[0] + qx_m[1],
            ];
            let sumq2 = [
                q2_p[0] + q2_p[1],
                q2_p[0] + q2_m[1],
                q2_m[0] + q2_p[1],
                q2_m[0] + q2_m[1],
            ];
            for k in 0..4 {
                if sumq2[k] > 0.0 && sumqx[k] * sumqx[k] > best_score * sumq2[k] {
                    scale = sumqx[k] / sumq2[k];
                    best_score = scale * sumqx[k];
                    best = Some(((i1, i2), k as u8));
                }
            }
        }
    }
    best.map(|(split, k)| (split, k, scale))
}

/// ggml's `quantize_row_iq1_m_impl` on the blocks of `x` (`out.len()` of them), with
/// importance weights `qw` (`w = qw·√(σ² + x²)`, `σ² = 2·Σx²/256`) or without (`w = x²`).
/// Sub-blocks of 16 values, each half with its own shift; the block scale is refitted to
/// the whole block at the end.
pub(crate) fn quantize_blocks(x: &[f32], qw: Option<&[f32]>, out: &mut [BlockIQ1M]) {
    let grid = search();
    for (ibl, y) in out.iter_mut().enumerate() {
        *y = BlockIQ1M::zeroed();
        let xbl = &x[QK_K * ibl..QK_K * (ibl + 1)];
        let qwb = |ib: usize| qw.map(|q| &q[QK_K * ibl + BS * ib..QK_K * ibl + BS * (ib + 1)]);
        let mut scales = [0f32; QK_K / BS];
        let mut shifts = [0u8; QK_K / BS];
        let mut max_scale = 0f32;
        let sigma2 = 2.0 * sum_x2(xbl) / QK_K as f32;
        for ib in 0..QK_K / BS {
            let xb = &xbl[BS * ib..BS * (ib + 1)];
            let mut weight = [0f32; BS];
            sub_block_weights(qwb(ib), xb, sigma2, &mut weight);
            let max = xb[1..].iter().fold(xb[0].abs(), |m, &v| c_max(m, v.abs()));
            if max < GROUP_MAX_EPS {
                continue;
            }
            let mut order = [0usize; BS];
            ascending(xb, &mut order);
            let Some((split, mut shift, scale)) = best_split(xb, &weight, &order, max) else {
                continue;
            };
            let mut l = [0i8; BS];
            let (scale, flipped) = split_levels(&order, split, scale, &mut l);
            if flipped {
                shift = 3 - shift;
            }
            let mut index = [0u16; BS / 8];
            let xx = |k| shifted(shift, k);
            let scale = fit_to_grid(xb, &weight, xx, scale, &mut l, &mut index);
            y.qs[2 * ib] = index[0] as u8;
            y.qs[2 * ib + 1] = index[1] as u8;
            y.qh[ib] = ((index[0] >> 8) | ((index[1] >> 8) << 4)) as u8;
            scales[ib] = scale;
            shifts[ib] = shift;
            max_scale = c_max(max_scale, scale);
        }
        let Some((mut d, ls)) = sub_block_scales(&scales, max_scale, 8) else {
            continue;
        };
        let mut sc = [0u16; 4];
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for (ib, l) in ls.into_iter().enumerate() {
            sc[ib / 4] |= (l as u16) << (3 * (ib % 4));
            // ggml's masks {0x00, 0x80, 0x08, 0x88}: the shift sign of each half.
            y.qh[ib] |= [0x00, 0x80, 0x08, 0x88][shifts[ib] as usize];
            // The refit reads the indices back from the block, as ggml does.
            let xb = &xbl[BS * ib..BS * (ib + 1)];
            let mut weight = [0f32; BS];
            sub_block_weights(qwb(ib), xb, sigma2, &mut weight);
            for k in 0..2 {
                let v = shifted(shifts[ib], k);
                let hi = ((y.qh[ib] as usize) << (8 - 4 * k)) & 0x700;
                let pg = grid.point(y.qs[2 * ib + k] as usize + hi);
                for (j, &p) in pg.iter().enumerate() {
                    let w = weight[8 * k + j];
                    let q = v[((p - 1) / 2) as usize] * (2 * l as i32 + 1) as f32;
                    sumqx += w * q * xb[8 * k + j];
                    sumq2 += w * q * q;
                }
            }
        }
        if sumq2 > 0.0 {
            d = sumqx / sumq2;
        }
        // ggml's fudge factor on the stored scale only.
        let s = to_fp16(d * 1.1125).to_bits();
        sc[0] |= (s & 0x000f) << 12;
        sc[1] |= (s & 0x00f0) << 8;
        sc[2] |= (s & 0x0f00) << 4;
        sc[3] |= s & 0xf000;
        for (b, w) in y.scales.chunks_exact_mut(2).zip(sc) {
            b.copy_from_slice(&w.to_le_bytes());
        }
    }
}

/// The eight i32 lanes of the shift part in ggml's AVX2 IQ1_M kernel for one block:
/// `vpsignb(q, ±1)` (−(−128) wraps) times the scale.
pub(crate) fn iq1m_shift_lanes(c: &Iq1Codes, y: &BlockQ8K) -> [i32; 8] {
    let mut l = [0i32; 8];
    for (v, &q) in y.qs.iter().enumerate() {
        l[(v % 32) / 4] += wrap_neg(q, byte_at(&c.delta_neg, v) != 0) * c.ls[v / 16] as i32;
    }
    l
}

/// IQ1_M · Q8_K in the order of ggml's AVX2 `ggml_vec_dot_iq1_m_q8_K` (portable; the AVX2
/// build in `kernels::x86::iquants` gives the same bits): grid and shift parts in two sets
/// of eight i32 lanes, each added per block as `fma(d, lane, acc)`, and at the end
/// `hsum_float_8(acc1) + 1/8·hsum_float_8(acc2)`.
pub(crate) fn dot_iq1_m_x86(n: usize, a: &[u8], b: &[u8]) -> f32 {
    let Some((xs, ys)) = super::row_blocks::<BlockIQ1M>(n, a, b) else {
        return 0.0;
    };
    let mut acc1 = [0f32; 8];
    let mut acc2 = [0f32; 8];
    for (x, y) in xs.iter().zip(ys.iter()) {
        let c = x.codes();
        let d = y.d * c.d;
        for (a, l) in acc1.iter_mut().zip(iq1_x86_lanes(&c, y)) {
            *a = d.mul_add(l as f32, *a);
        }
        for (a, l) in acc2.iter_mut().zip(iq1m_shift_lanes(&c, y)) {
            *a = d.mul_add(l as f32, *a);
        }
    }
    hsum8(&acc1) + 0.125 * hsum8(&acc2)
}
