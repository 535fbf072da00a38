//! Q2_K: 256 values in 16 sub-blocks of 16, `x = d·sc·q − dmin·m` with 2-bit codes `q`, and
//! per sub-block a 4-bit scale `sc` and 4-bit minimum `m`.
//!
//! Layout (84 bytes): `scales[16]` (sub-block `j`: `sc` in the low nibble, `m` in the high),
//! `qs[64]`, `d`, `dmin` (f16). Values `128·h + 32·s + l` (h in 0..2, s in 0..4, l in 0..32)
//! sit in bits `2s..2s+2` of `qs[32·h + l]`; value `v` belongs to sub-block `v / 16`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_k::BlockQ8K;
use super::{make_qkx2_quants, make_qp_quants, nearest_int, sigma_weights, sum_x2, Qkx2, QK_K};
use crate::dtype::DType;
use crate::error::Result;
use crate::quants::{fp16, to_fp16, BlockQuant};

/// One Q2_K super-block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ2K {
    /// Per sub-block: scale in the low nibble, minimum in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// 2-bit codes, four per byte.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale of the sub-block scales.
    pub d: f16,
    /// Super-block scale of the sub-block minimums.
    pub dmin: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

impl BlockQuant for BlockQ2K {
    const DTYPE: DType = DType::Q2K;
    const BLOCK_SIZE: usize = QK_K;
    type VecDot = BlockQ8K;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        let min = fp16(self.dmin);
        let out = &mut out[..QK_K];
        for half in 0..QK_K / 128 {
            let q = &self.qs[32 * half..32 * half + 32];
            for s in 0..4 {
                let shift = 2 * s;
                for part in 0..2 {
                    let sc = self.scales[8 * half + 2 * s + part];
                    let dl = d * (sc & 0x0F) as f32;
                    let ml = min * (sc >> 4) as f32;
                    let base = 128 * half + 32 * s + 16 * part;
                    for l in 0..16 {
                        let code = (q[16 * part + l] >> shift) & 3;
                        out[base + l] = dl * code as f32 - ml;
                    }
                }
            }
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_K];
        const Q4SCALE: f32 = 15.0;
        let params = Qkx2 {
            nmax: 3,
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: true,
        };
        let mut l = [0u8; QK_K];
        let mut scales = [0f32; QK_K / 16];
        let mut mins = [0f32; QK_K / 16];
        let mut max_scale = 0.0f32;
        let mut max_min = 0.0f32;
        for j in 0..QK_K / 16 {
            let xs = &x[16 * j..16 * j + 16];
            let mut weights = [0f32; 16];
            for (w, &v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let (scale, min) = make_qkx2_quants(&params, xs, &weights, &mut l[16 * j..16 * j + 16]);
            scales[j] = scale;
            mins[j] = min;
            if scale > max_scale {
                max_scale = scale;
            }
            if min > max_min {
                max_min = min;
            }
        }

        let mut b = BlockQ2K::zeroed();
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for (s, &scale) in b.scales.iter_mut().zip(&scales) {
                *s = nearest_int(iscale * scale) as u8;
            }
            b.d = to_fp16(max_scale / Q4SCALE);
        } else {
            b.d = to_fp16(0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for (s, &min) in b.scales.iter_mut().zip(&mins) {
                *s |= (nearest_int(iscale * min) << 4) as u8;
            }
            b.dmin = to_fp16(max_min / Q4SCALE);
        } else {
            b.dmin = to_fp16(0.0);
        }

        finish(x, b, l)
    }

    /// `quantize_row_q2_K_impl`: each 16-value search weighted by `qw·√(σ² + x²)`
    /// (`σ² = Σx²/256`), then the sixteen scales and minimums quantized to 4 bits by
    /// `make_qp_quants` weighted by the sub-blocks' weight sums.
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        let params = Qkx2::imatrix(3);
        for (i, b) in out.iter_mut().enumerate() {
            let x = &x[QK_K * i..QK_K * (i + 1)];
            let qw = &qw[QK_K * i..QK_K * (i + 1)];
            let sigma2 = sum_x2(x) / QK_K as f32;
            let mut l = [0u8; QK_K];
            let mut scales = [0f32; QK_K / 16];
            let mut mins = [0f32; QK_K / 16];
            let mut sw = [0f32; QK_K / 16];
            for j in 0..QK_K / 16 {
                let r = 16 * j..16 * j + 16;
                let mut weight = [0f32; 16];
                sigma_weights(&qw[r.clone()], &x[r.clone()], sigma2, &mut weight);
                for &w in &weight {
                    sw[j] += w;
                }
                (scales[j], mins[j]) = make_qkx2_quants(&params, &x[r.clone()], &weight, &mut l[r]);
            }
            let mut ls = [0u8; QK_K / 16];
            let mut lm = [0u8; QK_K / 16];
            let dm = make_qp_quants(15, &scales, &mut ls, &sw);
            let mm = make_qp_quants(15, &mins, &mut lm, &sw);
            let mut blk = BlockQ2K::zeroed();
            blk.d = to_fp16(dm);
            blk.dmin = to_fp16(mm);
            for j in 0..QK_K / 16 {
                blk.scales[j] = ls[j] | (lm[j] << 4);
            }
            *b = finish(x, blk, l);
        }
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8K]) -> f32 {
        let mut sumf = 0.0f32;
        for (x, y) in a.iter().zip(b) {
            let sc = &x.scales;
            // Σ over sub-blocks of m · Σ q8: the minimum term, from Q8_K's per-16 sums.
            let mut summs = 0i32;
            for (&bsum, &s) in y.bsums.iter().zip(sc) {
                summs += bsum as i32 * (s >> 4) as i32;
            }
            let dall = y.d * fp16(x.d);
            let dmin = y.d * fp16(x.dmin);

            let mut isum = 0i32;
            let mut is = 0;
            let mut q8 = &y.qs[..];
            for half in 0..QK_K / 128 {
                let q2 = &x.qs[32 * half..32 * half + 32];
                for shift in [0, 2, 4, 6] {
                    for part in 0..2 {
                        let d = (sc[is] & 0x0F) as i32;
                        is += 1;
                        let mut isuml = 0i32;
                        for l in 16 * part..16 * part + 16 {
                            isuml += q8[l] as i32 * ((q2[l] >> shift) & 3) as i32;
                        }
                        isum += d * isuml;
                    }
                    q8 = &q8[32..];
                }
            }
            sumf += dall * isum as f32 - dmin * summs as f32;
        }
        sumf
    }
}

/// The common end of the Q2_K quantizers: every code recomputed against the rounded scales
/// and minimums of `b` (a sub-block whose scale rounded to zero keeps the codes `l` of the
/// search), then packed.
fn finish(x: &[f32], mut b: BlockQ2K, mut l: [u8; QK_K]) -> BlockQ2K {
    // Requantize against the rounded scales; a sub-block whose scale rounded to zero
    // keeps the codes of the search.
    for j in 0..QK_K / 16 {
        let d = fp16(b.d) * (b.scales[j] & 0x0F) as f32;
        if d == 0.0 {
            continue;
        }
        let dm = fp16(b.dmin) * (b.scales[j] >> 4) as f32;
        for ii in 0..16 {
            let q = nearest_int((x[16 * j + ii] + dm) / d);
            l[16 * j + ii] = q.clamp(0, 3) as u8;
        }
    }

    for j in (0..QK_K).step_by(128) {
        for k in 0..32 {
            b.qs[j / 4 + k] =
                l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6);
        }
    }
    b
}

/// Decodes a row of Q2_K super-blocks (ggml's `dequantize_row_q2_K`).
pub fn dequantize_row_q2_k(src: &[u8], dst: &mut [f32]) -> Result<()> {
    crate::quants::dequantize_row::<BlockQ2K>(src, dst)
}

/// Encodes a row as Q2_K super-blocks (ggml's `quantize_row_q2_K_ref`).
pub fn quantize_row_q2_k_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    crate::quants::quantize_row::<BlockQ2K>(src, dst)
}

/// Scalar dot product of a Q2_K row with a Q8_K row of `n` values
/// (ggml's `ggml_vec_dot_q2_K_q8_K_generic`).
pub fn vec_dot_q2_k_q8_k_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    crate::quants::vec_dot_scalar::<BlockQ2K>(n, a, b)
}
