//! Q4_K: 256 values in 8 sub-blocks of 32, `x = d·sc·q − dmin·m` with 4-bit codes `q` and a
//! 6-bit scale `sc` and minimum `m` per sub-block.
//!
//! Layout (144 bytes): `d`, `dmin` (f16), `scales[12]` (eight 6-bit scales and minimums:
//! sub-blocks 0–3 in the low 6 bits of bytes `j` and `j + 4`; sub-blocks 4–7 with their low 4
//! bits in byte `j + 4`, scale low nibble and minimum high, and their top 2 bits in the top
//! bits of bytes `j − 4` and `j`), `qs[128]`. Values `64·c + l` (c in 0..4, l in 0..32) are the low
//! nibbles of `qs[32·c + l]` (sub-block `2c`), values `64·c + 32 + l` the high nibbles
//! (sub-block `2c + 1`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_k::BlockQ8K;
use super::{
    get_scale_min_k4, lane_sums, make_qkx2_quants, make_qp_quants, nearest_int, pack_scale_min_k4,
    sigma_weights, sum_x2, Qkx2, K_SCALE_SIZE, QK_K,
};
use crate::dtype::DType;
use crate::error::Result;
use crate::quants::{fp16, to_fp16, BlockQuant};

/// One Q4_K super-block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    /// Super-block scale of the sub-block scales.
    pub d: f16,
    /// Super-block scale of the sub-block minimums.
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit minimums, packed.
    pub scales: [u8; K_SCALE_SIZE],
    /// 4-bit codes.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

/// Shared by Q4_K and Q5_K: the ggml reference quantizer's two passes. Returns the packed
/// scales, `d`, `dmin` and the codes (0..=nmax) in value order.
pub(crate) fn quantize_scales_mins(x: &[f32], params: &Qkx2) -> ScalesMins {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; QK_K / 32];
    let mut mins = [0f32; QK_K / 32];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..QK_K / 32 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut weights = [0f32; 32];
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (scale, min) = make_qkx2_quants(params, xs, &weights, &mut l[32 * j..32 * j + 32]);
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }

    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..QK_K / 32 {
        // ggml stores nearest_int's result in a uint8_t (modulo 256), then clamps.
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    let d = to_fp16(max_scale / 63.0);
    let dmin = to_fp16(max_min / 63.0);
    requantize(x, &ls, &lm, d, dmin, params.nmax, l)
}

/// Shared by Q4_K and Q5_K: `quantize_row_q{4,5}_K_impl` with importance weights `qw`: each
/// sub-block's search weighted by `qw·√(σ² + x²)` (`σ² = 2·Σx²/256`), the eight scales and
/// minimums quantized to 6 bits by `make_qp_quants` weighted by the sub-blocks' weight sums.
/// Returns what [`quantize_scales_mins`] returns.
pub(crate) fn quantize_scales_mins_weighted(x: &[f32], qw: &[f32], nmax: i32) -> ScalesMins {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; QK_K / 32];
    let mut mins = [0f32; QK_K / 32];
    let mut sw = [0f32; QK_K / 32];
    let sigma2 = 2.0 * sum_x2(&x[..QK_K]) / QK_K as f32;
    let params = Qkx2::imatrix(nmax);
    for j in 0..QK_K / 32 {
        let r = 32 * j..32 * j + 32;
        let mut weights = [0f32; 32];
        sigma_weights(&qw[r.clone()], &x[r.clone()], sigma2, &mut weights);
        let mut sumw = 0.0f32;
        for &w in &weights {
            sumw += w;
        }
        sw[j] = sumw;
        (scales[j], mins[j]) = make_qkx2_quants(&params, &x[r.clone()], &weights, &mut l[r]);
    }
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    let d_block = make_qp_quants(63, &scales, &mut ls, &sw);
    let m_block = make_qp_quants(63, &mins, &mut lm, &sw);
    // Q5_K's impl clamps to 63; make_qp_quants's codes are at most 63 already.
    requantize(x, &ls, &lm, to_fp16(d_block), to_fp16(m_block), nmax, l)
}

/// What [`quantize_scales_mins`] returns: packed scales, `d`, `dmin`, codes.
pub(crate) type ScalesMins = ([u8; K_SCALE_SIZE], f16, f16, [u8; QK_K]);

/// Shared by Q4_K and Q5_K: each 256 values of `x` encoded by
/// [`quantize_scales_mins_weighted`] with codes up to `nmax`, the block made by `make`.
pub(crate) fn weighted_rows<B>(
    x: &[f32],
    qw: &[f32],
    out: &mut [B],
    nmax: i32,
    make: fn(ScalesMins) -> B,
) {
    for (i, b) in out.iter_mut().enumerate() {
        let r = QK_K * i..QK_K * (i + 1);
        *b = make(quantize_scales_mins_weighted(&x[r.clone()], &qw[r], nmax));
    }
}

/// The common end of the Q4_K/Q5_K quantizers: packs the 6-bit scales `ls` and minimums
/// `lm`, then recomputes every code against the rounded scales (a sub-block whose scale
/// rounded to zero keeps the codes of the search).
fn requantize(
    x: &[f32],
    ls: &[u8; 8],
    lm: &[u8; 8],
    d: f16,
    dmin: f16,
    nmax: i32,
    mut l: [u8; QK_K],
) -> ScalesMins {
    let packed = pack_scale_min_k4(ls, lm);
    for j in 0..QK_K / 32 {
        let (sc, m) = get_scale_min_k4(j, &packed);
        let dj = fp16(d) * sc as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = fp16(dmin) * m as f32;
        for ii in 0..32 {
            let q = nearest_int((x[32 * j + ii] + dm) / dj);
            l[32 * j + ii] = q.clamp(0, nmax) as u8;
        }
    }
    (packed, d, dmin, l)
}

/// The lane sums and minimum term shared by the Q4_K and Q5_K dot products: `codes` are the
/// block's codes in value order.
pub(crate) fn dot_scales_mins(
    packed: &[u8; K_SCALE_SIZE],
    codes: &[i8; QK_K],
    y: &BlockQ8K,
) -> ([i32; 8], i32) {
    let mut scales = [0i32; 8];
    let mut mins = [0i32; 8];
    for j in 0..8 {
        let (sc, m) = get_scale_min_k4(j, packed);
        scales[j] = sc as i32;
        mins[j] = m as i32;
    }
    // Σ over sub-blocks of m · Σ q8, from Q8_K's per-16 sums (two per sub-block).
    let mut sumi = 0i32;
    for j in 0..QK_K / 16 {
        sumi += y.bsums[j] as i32 * mins[j / 2];
    }
    (lane_sums(codes, &y.qs, &scales, 32), sumi)
}

/// ggml's portable `vec_dot` of a block type with packed 6-bit scales and mins (Q4_K, Q5_K):
/// `parts` gives a block's packed scales, codes in value order, `d` and `dmin`.
pub(crate) fn vec_dot_scales_mins<B>(
    a: &[B],
    b: &[BlockQ8K],
    parts: impl Fn(&B) -> (&[u8; K_SCALE_SIZE], [i8; QK_K], f16, f16),
) -> f32 {
    let mut sums = [0f32; 8];
    let mut sumf = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        let (scales, codes, xd, xdmin) = parts(x);
        let (aux32, sumi) = dot_scales_mins(scales, &codes, y);
        let d = fp16(xd) * y.d;
        for (s, &v) in sums.iter_mut().zip(&aux32) {
            *s += d * v as f32;
        }
        let dmin = fp16(xdmin) * y.d;
        sumf -= dmin * sumi as f32;
    }
    for s in sums {
        sumf += s;
    }
    sumf
}

impl BlockQ4K {
    /// The codes (0..=15) of the super-block, in value order.
    pub(crate) fn codes(&self) -> [i8; QK_K] {
        let mut a = [0i8; QK_K];
        for c in 0..QK_K / 64 {
            for l in 0..32 {
                let q = self.qs[32 * c + l];
                a[64 * c + l] = (q & 0x0F) as i8;
                a[64 * c + 32 + l] = (q >> 4) as i8;
            }
        }
        a
    }
}

impl BlockQuant for BlockQ4K {
    const DTYPE: DType = DType::Q4K;
    const BLOCK_SIZE: usize = QK_K;
    type VecDot = BlockQ8K;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        let min = fp16(self.dmin);
        let out = &mut out[..QK_K];
        for c in 0..QK_K / 64 {
            let q = &self.qs[32 * c..32 * c + 32];
            let (sc, m) = get_scale_min_k4(2 * c, &self.scales);
            let d1 = d * sc as f32;
            let m1 = min * m as f32;
            let (sc, m) = get_scale_min_k4(2 * c + 1, &self.scales);
            let d2 = d * sc as f32;
            let m2 = min * m as f32;
            for l in 0..32 {
                out[64 * c + l] = d1 * (q[l] & 0x0F) as f32 - m1;
            }
            for l in 0..32 {
                out[64 * c + 32 + l] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }

    fn quantize(x: &[f32]) -> Self {
        let params = Qkx2 {
            nmax: 15,
            rmin: -1.0,
            rdelta: 0.1,
            nstep: 20,
            use_mad: false,
        };
        BlockQ4K::from_codes(quantize_scales_mins(&x[..QK_K], &params))
    }

    /// `quantize_row_q4_K_impl` (see [`quantize_scales_mins_weighted`]).
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        weighted_rows(x, qw, out, 15, BlockQ4K::from_codes);
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8K]) -> f32 {
        vec_dot_scales_mins(a, b, |x| (&x.scales, x.codes(), x.d, x.dmin))
    }
}

impl BlockQ4K {
    /// The block of packed scales, `d`, `dmin` and codes (0..=15, value order).
    fn from_codes((scales, d, dmin, l): ScalesMins) -> BlockQ4K {
        let mut qs = [0u8; QK_K / 2];
        for c in 0..QK_K / 64 {
            for k in 0..32 {
                qs[32 * c + k] = l[64 * c + k] | (l[64 * c + 32 + k] << 4);
            }
        }
        BlockQ4K {
            d,
            dmin,
            scales,
            qs,
        }
    }
}

/// Decodes a row of Q4_K super-blocks (ggml's `dequantize_row_q4_K`).
pub fn dequantize_row_q4_k(src: &[u8], dst: &mut [f32]) -> Result<()> {
    crate::quants::dequantize_row::<BlockQ4K>(src, dst)
}

/// Encodes a row as Q4_K super-blocks (ggml's `quantize_row_q4_K_ref`).
pub fn quantize_row_q4_k_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    crate::quants::quantize_row::<BlockQ4K>(src, dst)
}

/// Scalar dot product of a Q4_K row with a Q8_K row of `n` values
/// (ggml's `ggml_vec_dot_q4_K_q8_K_generic`).
pub fn vec_dot_q4_k_q8_k_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    crate::quants::vec_dot_scalar::<BlockQ4K>(n, a, b)
}
