//! The k-quants: super-blocks of 256 values split into sub-blocks of 16 or 32, each with its
//! own small integer scale (and minimum), the scales themselves quantized against one or two
//! f16 super-block scales.
//!
//! | type | bytes | sub-blocks | value |
//! |------|-------|------------|-------|
//! | Q2_K | 84  | 16 × 16 | `d·sc·q − dmin·m`, q in 0..=3, sc and m 4-bit |
//! | Q3_K | 110 | 16 × 16 | `d·(sc−32)·(q−4)`, q in 0..=7, sc 6-bit |
//! | Q4_K | 144 | 8 × 32  | `d·sc·q − dmin·m`, q in 0..=15, sc and m 6-bit |
//! | Q5_K | 176 | 8 × 32  | `d·sc·q − dmin·m`, q in 0..=31, sc and m 6-bit |
//! | Q6_K | 210 | 16 × 16 | `d·sc·(q−32)`, q in 0..=63, sc i8 |
//! | Q8_K | 292 | 16 × 16 | `d·q`, q i8, f32 `d`, per-16 sums (the dot-product partner) |
//!
//! This module holds the helpers shared by their reference quantizers (ggml's
//! `nearest_int`, `make_qx_quants`, `make_q3_quants`, `make_qkx2_quants`), transcribed so
//! that every float operation happens in ggml's order.

pub mod q2_k;
pub mod q3_k;
pub mod q4_k;
pub mod q5_k;
pub mod q6_k;
pub mod q8_k;
pub(crate) mod repacked;
pub(crate) mod tiled;

/// Values per k-quant super-block.
pub const QK_K: usize = 256;
/// Bytes of packed 6-bit scales and minimums in Q4_K / Q5_K (and of Q3_K's scales).
pub const K_SCALE_SIZE: usize = 12;

/// ggml's `GROUP_MAX_EPS`: below this a group counts as all zeros.
const GROUP_MAX_EPS: f32 = 1e-15;

/// Rounds to the nearest integer, ties to even, as ggml's `nearest_int`: adding 1.5·2²³ puts
/// the integer in the low mantissa bits. Exact for |x| < 2²²; outside that range it returns
/// what ggml's function returns (no panic).
#[inline(always)]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    (val.to_bits() as i32 & 0x007F_FFFF) - 0x0040_0000
}

/// The 6-bit scale and minimum of sub-block `j` (0..8) from Q4_K/Q5_K's 12 packed bytes:
/// sub-blocks 0–3 keep theirs in the low 6 bits of bytes `j` and `j + 4`; sub-blocks 4–7 keep
/// the low 4 bits in byte `j + 4` (scale low nibble, minimum high nibble) and the top 2 bits
/// in the top bits of bytes `j − 4` (scale) and `j` (minimum).
#[inline(always)]
pub(crate) fn get_scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs eight 6-bit scales and minimums as [`get_scale_min_k4`] reads them (ggml's
/// Q4_K/Q5_K reference quantizers: `ls`, `lm` in 0..=63).
pub(crate) fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; K_SCALE_SIZE] {
    let mut s = [0u8; K_SCALE_SIZE];
    for j in 0..8 {
        if j < 4 {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (ls[j] & 0x0F) | ((lm[j] & 0x0F) << 4);
            s[j - 4] |= (ls[j] >> 4) << 6;
            s[j] |= (lm[j] >> 4) << 6;
        }
    }
    s
}

/// The signed 6-bit scale `j` (0..16) of Q3_K's 12 packed bytes, already minus 32: low 4 bits
/// in byte `j` (low nibble, j < 8) or `j − 8` (high nibble), high 2 bits in bits
/// `2·(j / 4)` of byte `8 + j % 4`.
#[inline(always)]
pub(crate) fn q3_k_scale(scales: &[u8; K_SCALE_SIZE], j: usize) -> i32 {
    let low = if j < 8 {
        scales[j] & 0x0F
    } else {
        scales[j - 8] >> 4
    };
    let high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    (low | (high << 4)) as i32 - 32
}

/// ggml's `make_qx_quants` with `rmse_type = 1`: symmetric codes `L` in `0..2·nmax` (stored
/// with `+nmax`) and the scale that minimises the weighted error over 19 candidate inverse
/// scales. The weights are `qw` (an importance matrix's, `x.len()` of them) or, without,
/// `x²`. Returns the scale.
pub(crate) fn make_qx_quants_rmse1(
    nmax: i32,
    x: &[f32],
    l_out: &mut [i8],
    qw: Option<&[f32]>,
) -> f32 {
    let weight = |i: usize| qw.map_or(x[i] * x[i], |q| q[i]);
    let n = x.len();
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = -nmaxf / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = (l + nmax) as i8;
        let w = weight(i);
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for (i, &xi) in x.iter().enumerate() {
            let l = nearest_int(iscale * xi).clamp(-nmax, nmax - 1);
            let w = weight(i);
            let lf = l as f32;
            sumlx += w * xi * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = nearest_int(iscale * x[i]);
                l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_q3_quants` with `do_rmse = true`: symmetric codes (stored with `+nmax`),
/// refined one value at a time (at most 5 passes) while the weighted (`x²`) error drops.
/// Returns the scale.
pub(crate) fn make_q3_quants_rmse(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let n = x.len();
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    // Codes without the offset while refining (i32: the C code keeps them in int8_t).
    let mut l = [0i32; QK_K];
    let l = &mut l[..n];
    for i in 0..n {
        let li = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l[i] = li;
        let w = x[i] * x[i];
        sumlx += w * x[i] * li as f32;
        suml2 += w * li as f32 * li as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = x[i] * x[i];
            let li = l[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l[i] {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for i in 0..n {
        l_out[i] = (l[i] + nmax) as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Parameters of ggml's `make_qkx2_quants` scale search.
pub(crate) struct Qkx2 {
    /// Largest code.
    pub nmax: i32,
    /// First candidate offset added to `nmax`.
    pub rmin: f32,
    /// Step between candidates.
    pub rdelta: f32,
    /// Candidates after the first (`nstep + 1` in all).
    pub nstep: i32,
    /// Absolute (true) or squared (false) error.
    pub use_mad: bool,
}

/// ggml's `make_qkx2_quants`: codes `L` in `0..=nmax` for `x ≈ scale·L − the_min` (the
/// minimum is at most 0), searching candidate inverse scales and refitting scale and minimum
/// by weighted least squares for each. Returns `(scale, the_min)` with `the_min ≥ 0` the
/// amount subtracted.
pub(crate) fn make_qkx2_quants(
    p: &Qkx2,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
) -> (f32, f32) {
    let n = x.len();
    let nmax = p.nmax;
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        let diff = if p.use_mad { diff.abs() } else { diff * diff };
        best_error += weights[i] * diff;
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    let laux = &mut laux[..n];
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax as f32) / (max - min);
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                let diff = if p.use_mad { diff.abs() } else { diff * diff };
                cur_error += weights[i] * diff;
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(laux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

impl Qkx2 {
    /// The search of ggml's `make_qkx3_quants` as the importance-matrix quantizers call it
    /// (`rmin = −0.9`, `rdelta = 0.05`, 37 candidates, squared error). With weights given,
    /// `make_qkx3_quants` is `make_qkx2_quants` (its `max <= min` test equals `max == min`,
    /// NaN included), so [`make_qkx2_quants`] runs it.
    pub(crate) fn imatrix(nmax: i32) -> Qkx2 {
        Qkx2 {
            nmax,
            rmin: -0.9,
            rdelta: 0.05,
            nstep: 36,
            use_mad: false,
        }
    }
}

/// The importance quantizers' weights (`quantize_row_*_impl` with `quant_weights`):
/// `w[i] = qw[i] · √(σ² + x[i]²)`.
#[inline(always)]
pub(crate) fn sigma_weights(qw: &[f32], x: &[f32], sigma2: f32, w: &mut [f32]) {
    for ((w, &q), &v) in w.iter_mut().zip(qw).zip(x) {
        *w = q * (sigma2 + v * v).sqrt();
    }
}

/// `Σ x²` in value order (the `sum_x2` of ggml's quantizers).
#[inline(always)]
pub(crate) fn sum_x2(x: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for &v in x {
        s += v * v;
    }
    s
}

/// ggml's `make_qp_quants`: codes `L` in `0..=nmax` for non-negative `x ≈ scale·L` (the
/// k-quants' sub-block scales and minimums), the inverse scale chosen among 9 candidates by
/// weighted squared error, then refined one code at a time (at most 5 passes). Returns the
/// least-squares scale.
pub(crate) fn make_qp_quants(nmax: i32, x: &[f32], l_out: &mut [u8], qw: &[f32]) -> f32 {
    let n = x.len();
    let mut max = 0.0f32;
    for &v in x {
        max = super::c_max(max, v);
    }
    if max < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / max;
    // ggml keeps the first guess in a uint8_t without clamping.
    let mut l = [0i32; QK_K];
    let l = &mut l[..n];
    for i in 0..n {
        l[i] = nearest_int(iscale * x[i]) as u8 as i32;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for i in 0..n {
        let diff = x[i] - scale * l[i] as f32;
        best_mse += qw[i] * diff * diff;
    }
    for is in -4..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1 * is as f32 + nmaxf) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for i in 0..n {
            let li = nearest_int(iscale_is * x[i]).min(nmax);
            let diff = x[i] - scale_is * li as f32;
            mse += qw[i] * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..n {
        let li = nearest_int(iscale * x[i]).min(nmax);
        l[i] = li as u8 as i32;
        let w = qw[i];
        sumlx += w * x[i] * li as f32;
        suml2 += w * li as f32 * li as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = qw[i];
            let li = l[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax);
                if new_l != l[i] {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as u8 as i32;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for i in 0..n {
        l_out[i] = l[i] as u8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The integer part of ggml's generic k-quant dot products: eight `i32` lanes, lane `l`
/// summing `scale[p / group] · q8[p] · a[p]` over the positions `p ≡ l (mod 8)` of one
/// super-block (`a` the decoded codes, `group` the sub-block length). The generic C code
/// accumulates in exactly these lanes and then scales each lane in f32, which fixes the
/// rounding of the result; integer sums are exact, so only the lane split matters here.
#[inline(always)]
pub(crate) fn lane_sums(a: &[i8; QK_K], q8: &[i8; QK_K], scales: &[i32], group: usize) -> [i32; 8] {
    let mut aux32 = [0i32; 8];
    for (p, (&ai, &qi)) in a.iter().zip(q8).enumerate() {
        aux32[p % 8] += scales[p / group] * (qi as i32 * ai as i32);
    }
    aux32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-3.7), -4);
        assert_eq!(nearest_int(126.6), 127);
    }

    #[test]
    fn scale_min_k4_round_trips() {
        let ls = [0, 1, 62, 63, 17, 33, 48, 63];
        let lm = [63, 5, 0, 9, 63, 31, 2, 44];
        let packed = pack_scale_min_k4(&ls, &lm);
        for j in 0..8 {
            assert_eq!(
                get_scale_min_k4(j, &packed),
                (ls[j], lm[j]),
                "sub-block {j}"
            );
        }
    }
}
