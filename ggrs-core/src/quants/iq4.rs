//! The 4-bit non-linear i-quants IQ4_NL and IQ4_XS: every value is a 4-bit index into the
//! fixed table [`KVALUES_IQ4NL`] of 16 signed levels (denser near zero than a uniform grid),
//! times a scale.
//!
//! - IQ4_NL (18 bytes per 32 values): `d` (f16), then 16 bytes where byte `j` holds the index
//!   of value `j` in its low nibble and of value `j + 16` in its high nibble;
//!   `x = d · KVALUES_IQ4NL[index]`. Its dot product pairs with Q8_0.
//! - IQ4_XS (136 bytes per 256 values): `d` (f16), `scales_h` (u16), `scales_l` (4 bytes),
//!   then eight 32-value sub-blocks of 16 index bytes laid out as in IQ4_NL. Sub-block `ib`
//!   has the 6-bit scale `ls = low | high << 4` (low nibble `ib % 2` of `scales_l[ib / 2]`,
//!   high bits `2·ib..2·ib + 2` of `scales_h`), and `x = d · (ls − 32) · KVALUES_IQ4NL[index]`.
//!   Its dot product pairs with Q8_K.
//!
//! The quantizers reproduce llama.cpp's quantize tool without an importance matrix
//! (`quantize_iq4_nl` / `quantize_iq4_xs`: a search over 15 candidate scales per 32 values,
//! weighted by `x²`), float operation for float operation, so they write its bytes.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::k_quants::{nearest_int, sigma_weights, sum_x2, QK_K};
use super::q8::BlockQ8_0;
use super::{fp16, to_fp16, BlockQ8K, BlockQuant};
use crate::dtype::DType;
use crate::error::Result;

/// Values per IQ4_NL block.
pub const QK4_NL: usize = 32;

/// The 16 levels an IQ4_NL / IQ4_XS index selects (ggml's `kvalues_iq4nl`), ascending.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Below this largest magnitude a 32-value group counts as all zeros (ggml's
/// `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Candidate scales tried on each side of the first guess by the quantize tool (`ntry`).
const NTRY_TOOL: i32 = 7;

/// [`KVALUES_IQ4NL`] as f32.
const LEVELS: [f32; 16] = {
    let mut v = [0f32; 16];
    let mut k = 0;
    while k < 16 {
        v[k] = KVALUES_IQ4NL[k] as f32;
        k += 1;
    }
    v
};

/// One IQ4_NL block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ4NL {
    /// Scale.
    pub d: f16,
    /// Indices into [`KVALUES_IQ4NL`]: value `j` in the low nibble of `qs[j]`, value `j + 16`
    /// in the high nibble.
    pub qs: [u8; QK4_NL / 2],
}

/// One IQ4_XS super-block (256 values, eight sub-blocks of 32).
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ4XS {
    /// Super-block scale.
    pub d: f16,
    /// High 2 bits of the eight 6-bit sub-block scales: bits `2·ib..2·ib + 2` for sub-block
    /// `ib`.
    pub scales_h: u16,
    /// Low 4 bits of the sub-block scales: sub-block `ib` in nibble `ib % 2` of byte `ib / 2`.
    pub scales_l: [u8; QK_K / 64],
    /// Indices into [`KVALUES_IQ4NL`]: sub-block `ib` in bytes `16·ib..16·ib + 16`, value
    /// `j` in the low nibble and value `j + 16` in the high nibble.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIQ4NL>() == 18);
const _: () = assert!(std::mem::size_of::<BlockIQ4XS>() == 136);

impl BlockIQ4XS {
    /// The 6-bit scale of sub-block `ib` (0..8), in 0..=63 (the value scale is `ls − 32`).
    #[inline(always)]
    pub fn sub_scale(&self, ib: usize) -> i32 {
        let low = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
        let high = ((self.scales_h >> (2 * ib)) & 3) as u8;
        (low | (high << 4)) as i32
    }
}

/// The index of the level of `KVALUES_IQ4NL` nearest to `scale · x[j]`, for each of 32
/// values, as ggml's `best_index_int8` finds it: the ends clamp; otherwise a binary search
/// brackets the value as `val[mu − 1] ≤ v < val[mu]`, and `mu − 1` wins when
/// `v − val[mu − 1] < val[mu] − v` (a tie goes up).
///
/// Computed without the search's branches (whose outcomes the data makes unpredictable),
/// level by level over the whole group, a form the compiler vectorises: as the levels
/// ascend, `mu` is one more than the number of inner levels `val[1..15]` at or below the
/// value. The clamping needs no test of its own: below the first inner level `mu` is 1 and
/// the comparison picks 0, at or above the last level `mu` is 15 and it picks 15
/// (infinities included). A NaN compares false everywhere, which drives ggml's search to
/// `mu = 15` and its last comparison to the upper level: 15.
#[inline(always)]
fn best_indices(scale: f32, x: &[f32; 32]) -> [u8; 32] {
    let mut al = [0f32; 32];
    for j in 0..32 {
        al[j] = scale * x[j];
    }
    let mut mu = [1u32; 32];
    for &v in &LEVELS[1..15] {
        for j in 0..32 {
            mu[j] += (v <= al[j]) as u32;
        }
    }
    let mut l = [0u8; 32];
    for j in 0..32 {
        let m = mu[j] as usize;
        let down = al[j] - LEVELS[m - 1] < LEVELS[m] - al[j];
        l[j] = if al[j].is_nan() {
            15
        } else {
            (m - down as usize) as u8
        };
    }
    l
}

/// `Σ w·q·x` and `Σ w·q²` (weights `w`, see [`group_weights`]) of the 32 values `xb`
/// quantized with inverse scale `id`, each index written to `lb` when given; products
/// grouped as ggml's `(w·q)·x` and `(w·q)·q`, added in value order. (Indices and products
/// first, each loop free of the sums' dependency chain, so that they vectorise; the sums
/// alone stay sequential.)
#[inline(always)]
fn weighted_sums(xb: &[f32], w: &[f32; 32], id: f32, lb: Option<&mut [u8]>) -> (f32, f32) {
    let xb: &[f32; 32] = xb
        .try_into()
        .expect("groups are 32 values (callers' chunks)");
    let l = best_indices(id, xb);
    if let Some(lb) = lb {
        lb[..32].copy_from_slice(&l);
    }
    let mut pqx = [0f32; 32];
    let mut pq2 = [0f32; 32];
    for j in 0..32 {
        let q = LEVELS[l[j] as usize];
        pqx[j] = w[j] * q * xb[j];
        pq2[j] = w[j] * q * q;
    }
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for j in 0..32 {
        sumqx += pqx[j];
        sumq2 += pq2[j];
    }
    (sumqx, sumq2)
}

/// The scale of one 32-value group as ggml's `quantize_row_iq4_nl_impl` searches it without
/// an importance matrix, and the group's indices for the first guess in `lb`. `None` for a
/// group of zeros (largest magnitude below [`GROUP_MAX_EPS`]; `lb` untouched).
///
/// The first guess maps the value of largest magnitude to the end level −127 (to +113 when
/// `ntry` ≤ 0, i.e. the sign kept), fits the least-squares scale to the indices it gives,
/// then tries the inverse scales `(t − 127) / max` for t in `−ntry..=ntry` and keeps the
/// best fit.
fn group_scale(xb: &[f32], w: &[f32; 32], lb: &mut [u8], ntry: i32) -> Option<f32> {
    let (mut amax, mut max) = (0f32, 0f32);
    for &x in xb {
        let ax = x.abs();
        if ax > amax {
            amax = ax;
            max = x;
        }
    }
    if amax < GROUP_MAX_EPS {
        return None;
    }
    let v0 = KVALUES_IQ4NL[0] as f32;
    let d = if ntry > 0 { -max / v0 } else { max / v0 };
    let (sumqx, sumq2) = weighted_sums(xb, w, 1.0 / d, Some(lb));
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -ntry..=ntry {
        let id = (itry + KVALUES_IQ4NL[0] as i32) as f32 / max;
        let (sumqx, sumq2) = weighted_sums(xb, w, id, None);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    Some(d)
}

/// Packs 32 indices per 16 bytes: value `j` low nibble, value `j + 16` high nibble.
fn pack_indices(l: &[u8], q4: &mut [u8]) {
    for (lg, qg) in l.chunks_exact(32).zip(q4.chunks_exact_mut(16)) {
        for j in 0..16 {
            qg[j] = lg[j] | (lg[16 + j] << 4);
        }
    }
}

/// The weights of the scale search of the 32 values `xb` (ggml's `quantize_row_iq4_nl_impl`):
/// `x²` without importance weights, else `qw·√(σ² + x²)` with `σ² = 2·Σx²/n` over the `n`
/// values of the (super-)block, given as `sigma2`.
fn group_weights(xb: &[f32], qw: Option<(&[f32], f32)>) -> [f32; 32] {
    let mut w = [0f32; 32];
    match qw {
        Some((qw, sigma2)) => sigma_weights(qw, xb, sigma2, &mut w),
        None => {
            for (w, &x) in w.iter_mut().zip(xb) {
                *w = x * x;
            }
        }
    }
    w
}

/// One IQ4_NL block as ggml's quantizer writes it: `ntry` = 7 is the quantize tool's
/// `quantize_iq4_nl` (with importance weights `qw` when given), `ntry` = −1 the row
/// converter `quantize_row_iq4_nl_ref` (the first guess only, its indices kept).
fn quantize_iq4_nl_block(x: &[f32], qw: Option<&[f32]>, ntry: i32) -> BlockIQ4NL {
    let x = &x[..QK4_NL];
    let mut l = [0u8; QK4_NL];
    let sigma2 = sum_x2(x) * (2.0 / QK4_NL as f32);
    let w = group_weights(x, qw.map(|q| (q, sigma2)));
    let scale = group_scale(x, &w, &mut l, ntry).unwrap_or(0.0);
    if ntry > 0 {
        let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        l = best_indices(id, x.try_into().expect("32 values"));
    }
    let mut qs = [0u8; QK4_NL / 2];
    pack_indices(&l, &mut qs);
    BlockIQ4NL {
        d: to_fp16(scale),
        qs,
    }
}

impl BlockQuant for BlockIQ4NL {
    const DTYPE: DType = DType::IQ4NL;
    const BLOCK_SIZE: usize = QK4_NL;
    type VecDot = BlockQ8_0;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        let (lo, hi) = out[..QK4_NL].split_at_mut(QK4_NL / 2);
        for j in 0..QK4_NL / 2 {
            lo[j] = d * KVALUES_IQ4NL[(self.qs[j] & 0x0F) as usize] as f32;
            hi[j] = d * KVALUES_IQ4NL[(self.qs[j] >> 4) as usize] as f32;
        }
    }

    /// The quantize tool's encoding (`quantize_iq4_nl` without an importance matrix, which
    /// `llama-quantize` runs), not the shorter `quantize_row_iq4_nl_ref` (see
    /// [`quantize_row_iq4_nl_ref`]).
    fn quantize(x: &[f32]) -> Self {
        quantize_iq4_nl_block(x, None, NTRY_TOOL)
    }

    /// `quantize_iq4_nl` with importance weights (see [`group_weights`]).
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        for (i, b) in out.iter_mut().enumerate() {
            let r = QK4_NL * i..QK4_NL * (i + 1);
            *b = quantize_iq4_nl_block(&x[r.clone()], Some(&qw[r]), NTRY_TOOL);
        }
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8_0]) -> f32 {
        // ggml_vec_dot_iq4_nl_q8_0_generic: `sumf += d·(sumi1 + sumi2)` per block.
        let mut sumf = 0f32;
        for (x, y) in a.iter().zip(b) {
            let d = fp16(y.d) * fp16(x.d);
            let (mut sumi1, mut sumi2) = (0i32, 0i32);
            for j in 0..QK4_NL / 2 {
                sumi1 += y.qs[j] as i32 * KVALUES_IQ4NL[(x.qs[j] & 0x0F) as usize] as i32;
                sumi2 += y.qs[j + 16] as i32 * KVALUES_IQ4NL[(x.qs[j] >> 4) as usize] as i32;
            }
            sumf += d * (sumi1 + sumi2) as f32;
        }
        sumf
    }
}

impl BlockQuant for BlockIQ4XS {
    const DTYPE: DType = DType::IQ4XS;
    const BLOCK_SIZE: usize = QK_K;
    type VecDot = BlockQ8K;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        for (ib, y) in out[..QK_K].chunks_exact_mut(32).enumerate() {
            let dl = d * (self.sub_scale(ib) - 32) as f32;
            let qs = &self.qs[16 * ib..16 * ib + 16];
            for j in 0..16 {
                y[j] = dl * KVALUES_IQ4NL[(qs[j] & 0x0F) as usize] as f32;
                y[j + 16] = dl * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
            }
        }
    }

    /// ggml's `quantize_iq4_xs` without an importance matrix (which is also its
    /// `quantize_row_iq4_xs_ref`): per sub-block the scale search of IQ4_NL, then the eight
    /// scales quantized to 6 bits against `d = −max_scale / 32` and every index chosen again
    /// for its rounded sub-block scale.
    fn quantize(x: &[f32]) -> Self {
        quantize_iq4_xs_block(x, None)
    }

    /// `quantize_iq4_xs` with importance weights (see [`group_weights`]).
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        for (i, b) in out.iter_mut().enumerate() {
            let r = QK_K * i..QK_K * (i + 1);
            *b = quantize_iq4_xs_block(&x[r.clone()], Some(&qw[r]));
        }
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8K]) -> f32 {
        // ggml_vec_dot_iq4_xs_q8_K_generic: `sumf += d4d8·(ls − 32)·Σ` per sub-block.
        let mut sumf = 0f32;
        for (x, y) in a.iter().zip(b) {
            let d4d8 = fp16(x.d) * y.d;
            for ib in 0..QK_K / 32 {
                let dl = d4d8 * (x.sub_scale(ib) - 32) as f32;
                let qs = &x.qs[16 * ib..16 * ib + 16];
                let q8 = &y.qs[32 * ib..32 * ib + 32];
                let (mut sumi1, mut sumi2) = (0i32, 0i32);
                for j in 0..16 {
                    sumi1 += q8[j] as i32 * KVALUES_IQ4NL[(qs[j] & 0x0F) as usize] as i32;
                    sumi2 += q8[j + 16] as i32 * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as i32;
                }
                sumf += dl * (sumi1 + sumi2) as f32;
            }
        }
        sumf
    }
}

/// One IQ4_XS super-block as ggml's `quantize_iq4_xs` writes it (which is also its
/// `quantize_row_iq4_xs_ref` without weights): per sub-block the scale search of IQ4_NL,
/// then the eight scales quantized to 6 bits against `d = −max_scale / 32` and every index
/// chosen again for its rounded sub-block scale.
fn quantize_iq4_xs_block(x: &[f32], qw: Option<&[f32]>) -> BlockIQ4XS {
    let x = &x[..QK_K];
    let sigma2 = sum_x2(x) * (2.0 / QK_K as f32);
    let mut l = [0u8; QK_K];

    let mut scales = [0f32; QK_K / 32];
    let (mut max_scale, mut amax_scale) = (0f32, 0f32);
    for (ib, (xb, lb)) in x.chunks_exact(32).zip(l.chunks_exact_mut(32)).enumerate() {
        let w = group_weights(xb, qw.map(|q| (&q[32 * ib..32 * ib + 32], sigma2)));
        let Some(d) = group_scale(xb, &w, lb, NTRY_TOOL) else {
            scales[ib] = 0.0;
            continue;
        };
        scales[ib] = d;
        if d.abs() > amax_scale {
            amax_scale = d.abs();
            max_scale = d;
        }
    }
    let d = -max_scale / 32.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut scales_h = 0u16;
    let mut scales_l = [0u8; QK_K / 64];
    for (ib, (xb, lb)) in x.chunks_exact(32).zip(l.chunks_exact_mut(32)).enumerate() {
        let ls = nearest_int(id * scales[ib]).clamp(-32, 31);
        let dl = d * ls as f32;
        let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
        lb.copy_from_slice(&best_indices(idl, xb.try_into().expect("32 values")));
        let ls = (ls + 32) as u8;
        scales_l[ib / 2] |= (ls & 0x0F) << (4 * (ib % 2));
        scales_h |= ((ls >> 4) as u16) << (2 * ib);
    }
    let mut qs = [0u8; QK_K / 2];
    pack_indices(&l, &mut qs);
    BlockIQ4XS {
        d: to_fp16(d),
        scales_h,
        scales_l,
        qs,
    }
}

/// Decodes a row of IQ4_NL blocks (ggml's `dequantize_row_iq4_nl`).
pub fn dequantize_row_iq4_nl(src: &[u8], dst: &mut [f32]) -> Result<()> {
    super::dequantize_row::<BlockIQ4NL>(src, dst)
}

/// Encodes a row as IQ4_NL blocks as llama.cpp's quantize tool does (`quantize_iq4_nl`
/// without an importance matrix; what [`BlockQuant::quantize`] does).
pub fn quantize_row_iq4_nl(src: &[f32], dst: &mut [u8]) -> Result<()> {
    super::quantize_row::<BlockIQ4NL>(src, dst)
}

/// Encodes a row as IQ4_NL blocks as ggml's `quantize_row_iq4_nl_ref` does (the row converter
/// behind `ggml_cpu`'s `from_float`): the first guess of the scale search only. `src` is a
/// multiple of 32 values and `dst` exactly its row size.
pub fn quantize_row_iq4_nl_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    super::check_row::<BlockIQ4NL>("quants::quantize_row_iq4_nl_ref", src.len(), dst.len())?;
    for (x, out) in src.chunks_exact(QK4_NL).zip(dst.chunks_exact_mut(18)) {
        out.copy_from_slice(bytemuck::bytes_of(&quantize_iq4_nl_block(x, None, -1)));
    }
    Ok(())
}

/// Decodes a row of IQ4_XS super-blocks (ggml's `dequantize_row_iq4_xs`).
pub fn dequantize_row_iq4_xs(src: &[u8], dst: &mut [f32]) -> Result<()> {
    super::dequantize_row::<BlockIQ4XS>(src, dst)
}

/// Encodes a row as IQ4_XS super-blocks (ggml's `quantize_iq4_xs` without an importance
/// matrix).
pub fn quantize_row_iq4_xs(src: &[f32], dst: &mut [u8]) -> Result<()> {
    super::quantize_row::<BlockIQ4XS>(src, dst)
}

/// Scalar dot product of an IQ4_NL row with a Q8_0 row of `n` values
/// (ggml's `ggml_vec_dot_iq4_nl_q8_0_generic`).
pub fn vec_dot_iq4_nl_q8_0_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    super::vec_dot_scalar::<BlockIQ4NL>(n, a, b)
}

/// Scalar dot product of an IQ4_XS row with a Q8_K row of `n` values
/// (ggml's `ggml_vec_dot_iq4_xs_q8_K_generic`).
pub fn vec_dot_iq4_xs_q8_k_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    super::vec_dot_scalar::<BlockIQ4XS>(n, a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn searched_index_is_nearest_level_ties_up() {
        // A plain search over the table: the nearest level, the upper one on a tie.
        for i in -1400..=1400 {
            let x = i as f32 * 0.1;
            let mut best = 0usize;
            for (k, &v) in KVALUES_IQ4NL.iter().enumerate().skip(1) {
                let dk = (v as f32 - x).abs();
                let db = (KVALUES_IQ4NL[best] as f32 - x).abs();
                if dk <= db {
                    best = k;
                }
            }
            assert_eq!(best_index_searched(x) as usize, best, "x = {x}");
        }
    }

    /// ggml's `best_index_int8` as it is written: the branch-free form gives its answers.
    fn best_index_searched(x: f32) -> u8 {
        let val = KVALUES_IQ4NL.map(|v| v as f32);
        if x <= val[0] {
            return 0;
        }
        if x >= val[15] {
            return 15;
        }
        let (mut ml, mut mu) = (0usize, 15usize);
        while mu - ml > 1 {
            let mav = (ml + mu) / 2;
            if x < val[mav] {
                mu = mav;
            } else {
                ml = mav;
            }
        }
        if x - val[mu - 1] < val[mu] - x {
            (mu - 1) as u8
        } else {
            mu as u8
        }
    }

    #[test]
    fn best_index_equals_ggml_search() {
        let mut specials = vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0];
        for k in 0..16 {
            let v = KVALUES_IQ4NL[k] as f32;
            specials.extend([v, v.next_up(), v.next_down()]);
            if k < 15 {
                let mid = (v + KVALUES_IQ4NL[k + 1] as f32) / 2.0;
                specials.extend([mid, mid.next_up(), mid.next_down()]);
            }
        }
        let grid = (-140_000..=140_000).map(|i| i as f32 * 0.001);
        let mut all: Vec<f32> = specials.into_iter().chain(grid).collect();
        all.resize(all.len().div_ceil(32) * 32, 0.5);
        for g in all.chunks_exact(32) {
            let g: &[f32; 32] = g.try_into().unwrap();
            for scale in [1.0, -0.5, 3.0] {
                let want: [u8; 32] = std::array::from_fn(|j| best_index_searched(scale * g[j]));
                assert_eq!(best_indices(scale, g), want, "{g:?} × {scale}");
            }
        }
    }

    #[test]
    fn sub_scales_round_trip() {
        let mut b = BlockIQ4XS::zeroed();
        let want = [0, 63, 17, 32, 5, 48, 33, 31];
        for (ib, &ls) in want.iter().enumerate() {
            b.scales_l[ib / 2] |= (ls & 0x0F) << (4 * (ib % 2));
            b.scales_h |= ((ls >> 4) as u16) << (2 * ib);
        }
        for (ib, &ls) in want.iter().enumerate() {
            assert_eq!(b.sub_scale(ib), ls as i32);
        }
    }
}
