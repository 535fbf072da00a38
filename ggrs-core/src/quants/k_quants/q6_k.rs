//! Q6_K: 256 values in 16 sub-blocks of 16, `x = d·sc·(q − 32)` with 6-bit codes `q` and a
//! signed 8-bit scale `sc` per sub-block.
//!
//! Layout (210 bytes): `ql[128]` (low 4 bits), `qh[64]` (high 2 bits), `scales[16]` (i8),
//! `d` (f16). For half `h` (values `128·h ..`), with `ql = ql[64h..]`, `qh = qh[32h..]` and
//! `l` in 0..32: value `128h + l` is `ql[l]` low nibble + bits 0–1 of `qh[l]`; `+32` is
//! `ql[l + 32]` low + bits 2–3; `+64` is `ql[l]` high + bits 4–5; `+96` is `ql[l + 32]` high
//! + bits 6–7.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_k::BlockQ8K;
use super::{lane_sums, make_qx_quants_rmse1, nearest_int, QK_K};
use crate::dtype::DType;
use crate::error::Result;
use crate::quants::{fp16, to_fp16, BlockQuant};

/// One Q6_K super-block.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    /// Low 4 bits of each code.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of each code.
    pub qh: [u8; QK_K / 4],
    /// Per sub-block scales.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale.
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

impl BlockQ6K {
    /// The signed codes (−32..=31) of the super-block, in value order.
    pub(crate) fn codes(&self) -> [i8; QK_K] {
        let mut a = [0i8; QK_K];
        for h in 0..QK_K / 128 {
            let ql = &self.ql[64 * h..64 * h + 64];
            let qh = &self.qh[32 * h..32 * h + 32];
            let a = &mut a[128 * h..128 * h + 128];
            for l in 0..32 {
                a[l] = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i8 - 32;
                a[l + 32] = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                a[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                a[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        a
    }
}

impl BlockQuant for BlockQ6K {
    const DTYPE: DType = DType::Q6K;
    const BLOCK_SIZE: usize = QK_K;
    type VecDot = BlockQ8K;

    fn dequantize(&self, out: &mut [f32]) {
        let d = fp16(self.d);
        let out = &mut out[..QK_K];
        let codes = self.codes();
        for (j, (y, q)) in out
            .chunks_exact_mut(16)
            .zip(codes.chunks_exact(16))
            .enumerate()
        {
            // ggml: d * sc * q, i.e. (d · sc) · q.
            let ds = d * self.scales[j] as f32;
            for (v, &c) in y.iter_mut().zip(q) {
                *v = ds * c as f32;
            }
        }
    }

    fn quantize(x: &[f32]) -> Self {
        quantize_block(x, None)
    }

    /// `quantize_row_q6_K_impl`: each 16-value scale search weighted by the importance
    /// weights themselves (no σ² term).
    fn quantize_row_weighted(x: &[f32], qw: &[f32], out: &mut [Self]) {
        for (i, b) in out.iter_mut().enumerate() {
            let r = QK_K * i..QK_K * (i + 1);
            *b = quantize_block(&x[r.clone()], Some(&qw[r]));
        }
    }

    fn vec_dot(a: &[Self], b: &[BlockQ8K]) -> f32 {
        let mut sums = [0f32; 8];
        for (x, y) in a.iter().zip(b) {
            let mut scales = [0i32; 16];
            for (s, &v) in scales.iter_mut().zip(&x.scales) {
                *s = v as i32;
            }
            let aux32 = lane_sums(&x.codes(), &y.qs, &scales, 16);
            let d = fp16(x.d) * y.d;
            for (s, &v) in sums.iter_mut().zip(&aux32) {
                *s += d * v as f32;
            }
        }
        let mut sumf = 0.0f32;
        for s in sums {
            sumf += s;
        }
        sumf
    }
}

/// One Q6_K block as ggml writes it: `quantize_row_q6_K_ref` without weights, the
/// importance quantizer's block with them.
fn quantize_block(x: &[f32], qw: Option<&[f32]>) -> BlockQ6K {
    let x = &x[..QK_K];
    let mut l = [0i8; QK_K];

    let mut scales = [0f32; QK_K / 16];
    let mut max_scale = 0.0f32;
    let mut max_abs_scale = 0.0f32;
    for (ib, s) in scales.iter_mut().enumerate() {
        let r = 16 * ib..16 * ib + 16;
        let scale = make_qx_quants_rmse1(32, &x[r.clone()], &mut l[r.clone()], qw.map(|q| &q[r]));
        *s = scale;
        let abs_scale = scale.abs();
        if abs_scale > max_abs_scale {
            max_abs_scale = abs_scale;
            max_scale = scale;
        }
    }

    let mut b = BlockQ6K::zeroed();
    if max_abs_scale < super::GROUP_MAX_EPS {
        // ggml zeroes the whole block (d = 0).
        return b;
    }

    let iscale = -128.0 / max_scale;
    b.d = to_fp16(1.0 / iscale);
    for (s, &scale) in b.scales.iter_mut().zip(&scales) {
        *s = nearest_int(iscale * scale).min(127) as i8;
    }

    for j in 0..QK_K / 16 {
        let d = fp16(b.d) * b.scales[j] as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let q = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
            l[16 * j + ii] = (q + 32) as i8;
        }
    }

    for h in 0..QK_K / 128 {
        let j = 128 * h;
        for k in 0..32 {
            let c = |o: usize| l[j + k + o] as u8;
            b.ql[64 * h + k] = (c(0) & 0x0F) | ((c(64) & 0x0F) << 4);
            b.ql[64 * h + k + 32] = (c(32) & 0x0F) | ((c(96) & 0x0F) << 4);
            b.qh[32 * h + k] =
                (c(0) >> 4) | ((c(32) >> 4) << 2) | ((c(64) >> 4) << 4) | ((c(96) >> 4) << 6);
        }
    }
    b
}

/// Decodes a row of Q6_K super-blocks (ggml's `dequantize_row_q6_K`).
pub fn dequantize_row_q6_k(src: &[u8], dst: &mut [f32]) -> Result<()> {
    crate::quants::dequantize_row::<BlockQ6K>(src, dst)
}

/// Encodes a row as Q6_K super-blocks (ggml's `quantize_row_q6_K_ref`).
pub fn quantize_row_q6_k_ref(src: &[f32], dst: &mut [u8]) -> Result<()> {
    crate::quants::quantize_row::<BlockQ6K>(src, dst)
}

/// Scalar dot product of a Q6_K row with a Q8_K row of `n` values
/// (ggml's `ggml_vec_dot_q6_K_q8_K_generic`).
pub fn vec_dot_q6_k_q8_k_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    crate::quants::vec_dot_scalar::<BlockQ6K>(n, a, b)
}
