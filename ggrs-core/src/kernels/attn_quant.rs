//! `flash_attn_ext` over quantized keys or values (llama.cpp's `-ctk`/`-ctv` caches), with
//! the arithmetic of ggml's CPU kernel (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`,
//! llama.cpp commit 0c1e570).
//!
//! ggml takes its tiled and split-key paths only when K and V are both F16 (or both F32);
//! with any other pair every (query, head) row runs the one-row kernel over all keys:
//! - the query is converted to K's dot-product type once per row: F16 keys round it to f16,
//!   Q8_0/Q4_0/Q5_0/IQ4_NL keys quantize it to Q8_0, Q4_1/Q5_1 keys to Q8_1, with ggml's
//!   x86 `quantize_row_q8_0`/`quantize_row_q8_1` (halves rounded to even);
//! - each unmasked key scores `s = vec_dot(k, q)·scale` (soft-capped, plus the mask), the
//!   dot product in the order of ggml's x86 `ggml_vec_dot_*` for one column;
//! - F16 values keep the f16 accumulator of the F16 kernel (`ggml_vec_scale_f16`,
//!   `ggml_vec_mad_f16`); other values are dequantized (`to_float`) and accumulated in f32:
//!   a new maximum scales the accumulator by `exp(M_old − M)`, then `acc = fma(v, w, acc)`;
//! - `S = fma(S, ms, vs)`; the sink (if any) after the keys; the output `acc · (1/S)`.
//!
//! Rows are independent and each is computed by one thread in this order, so results do not
//! depend on the thread count.

use crate::dtype::DType;
use crate::kernels::attn::{
    add_sink, dot_f16_ggml, f16_to_f32, f2h, h2f, mad_f16, mask_value, scale_f16, Attn, HeadRows,
};
use crate::kernels::ggml_arith::{activation_quantizer, mul_mat_dot};
use crate::kernels::{split_range, Task, TaskPlan, Work};
use crate::quants::VecDotKernel;
use crate::tensor::TensorMeta;
use crate::types::{traits, FromF32Fn, ToF32Fn};

/// True when a node with keys of type `k` and values of type `v` runs this kernel (any pair
/// but F16 and F16).
pub(crate) fn applies(k: DType, v: DType) -> bool {
    !(k == DType::F16 && v == DType::F16)
}

/// How queries meet keys of one type.
#[derive(Clone, Copy)]
enum KeyDot {
    /// F16 keys: q rounded to f16, ggml's `ggml_vec_dot_f16`.
    F16,
    /// Block keys: q quantized to the dot-product type by `quantize` (`row_bytes` bytes),
    /// then `dot(n, k_row, q_row)`.
    Block {
        quantize: FromF32Fn,
        row_bytes: usize,
        dot: VecDotKernel,
    },
}

impl KeyDot {
    /// The dot product of keys of type `k`, rows of `dk` values.
    fn new(k: DType, dk: usize) -> KeyDot {
        if k == DType::F16 {
            return KeyDot::F16;
        }
        let vdt = traits(k).vec_dot_type;
        KeyDot::Block {
            quantize: activation_quantizer(vdt)
                .or(traits(vdt).from_f32)
                .expect("the builder admits only key types whose dot type converts from f32"),
            row_bytes: vdt.row_size(dk),
            // One key row per column: ggml's `ggml_vec_dot_*` (never a repacked layout).
            dot: mul_mat_dot(k, [dk, 1, 1, 1], 1)
                .expect("the builder admits only key types with a ggml-order dot product"),
        }
    }
}

/// Scratch (f32 slots) of one row: the query (f32 values or quantized bytes), a converted
/// key row, the f32 accumulator, a dequantized value row, the f16 accumulator.
fn row_scratch(dk: usize, dv: usize) -> usize {
    // The largest dot-product row (Q8_1: 36 bytes per 32 values) fits in dk slots.
    dk + dk + dv + dv + dv.div_ceil(2) + 16
}

/// The plan of a node this kernel runs: rows of (query, head) in chunks.
pub(crate) fn plan(q: &TensorMeta, k: &TensorMeta, v: &TensorMeta, nth: usize) -> TaskPlan {
    let rows = q.ne[1] * q.ne[2] * q.ne[3];
    TaskPlan {
        n_chunks: rows.min(nth * 4).max(1),
        scratch_f32: row_scratch(k.ne[0], v.ne[0]),
        ..TaskPlan::default()
    }
}

/// COMPUTE: chunk `chunk` of `n_chunks` (a range of rows `(iq1, iq2, iq3)` in ggml's order).
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; the builder checked the shape contract and the
/// types ([`crate::FLASH_ATTN_KV_TYPES`]).
pub(crate) unsafe fn flash_attn_ext(
    task: &Task,
    scale: f32,
    softcap: f32,
    chunk: usize,
    n_chunks: usize,
    work: &mut Work,
) {
    let a = Attn::new(task, scale, softcap);
    let (n_q, n_head, n3) = (a.q.ne[1], a.q.ne[2], a.q.ne[3]);
    let kd = KeyDot::new(a.k.dtype, a.k.ne[0]);
    let to_f32 = traits(a.v.dtype).to_f32;
    for r in split_range(n_q * n_head * n3, n_chunks, chunk) {
        let (iq1, iq2, iq3) = (r % n_q, (r / n_q) % n_head, r / (n_q * n_head));
        // SAFETY: indices in range; this chunk owns the row; the scratch holds one row's
        // (plan).
        unsafe { one_row(&a, kd, to_f32, iq1, iq2, iq3, work.scratch) };
    }
}

/// The one-row kernel for query `iq1` of head `iq2` (outer index `iq3`), written to its
/// output row.
///
/// # Safety
/// Indices in range; `sc` holds [`row_scratch`] values; only this thread writes the row.
#[allow(clippy::too_many_arguments)]
unsafe fn one_row(
    a: &Attn,
    kd: KeyDot,
    to_f32: Option<ToF32Fn>,
    iq1: usize,
    iq2: usize,
    iq3: usize,
    sc: &mut [f32],
) {
    let (dk, dv, n_kv) = (a.k.ne[0], a.v.ne[0], a.k.ne[1]);
    let (qs, rest) = sc.split_at_mut(dk);
    let (kr, rest) = rest.split_at_mut(dk);
    let (acc, rest) = rest.split_at_mut(dv);
    let (v32, rest) = rest.split_at_mut(dv);
    let acc16: &mut [u16] = &mut bytemuck::cast_slice_mut(&mut rest[..dv.div_ceil(2)])[..dv];
    // SAFETY: indices in range (caller).
    let q = unsafe { a.q_row(iq1, iq2, iq3) };
    match kd {
        KeyDot::F16 => {
            for (h, &x) in qs.iter_mut().zip(q) {
                *h = h2f(f2h(x));
            }
        }
        KeyDot::Block {
            quantize,
            row_bytes,
            ..
        } => quantize(q, &mut bytemuck::cast_slice_mut::<f32, u8>(qs)[..row_bytes]),
    }
    let qs: &[f32] = qs;
    let v_f16 = a.v.dtype == DType::F16;
    acc.fill(0.0);
    acc16.fill(0);
    // SAFETY: indices in range (caller).
    let HeadRows {
        k0,
        v0,
        knb,
        vnb,
        mask,
    } = unsafe { a.head_rows(iq1, iq2, iq3) };
    let (k_bytes, v_bytes) = (a.k.dtype.row_size(dk), a.v.dtype.row_size(dv));
    let mut sum = 0f32; // S
    let mut max = f32::NEG_INFINITY; // M
    for ic in 0..n_kv {
        // SAFETY: ic < n_kv.
        let mv = unsafe { mask_value(mask, ic) };
        if mv == f32::NEG_INFINITY {
            continue;
        }
        // SAFETY: ic < n_kv: rows ic of this head's keys and values lie in their tensors
        // (dense rows of k_bytes / v_bytes bytes).
        let (k_row, v_row) = unsafe {
            (
                std::slice::from_raw_parts(k0.add(ic * knb), k_bytes),
                std::slice::from_raw_parts(v0.add(ic * vnb), v_bytes),
            )
        };
        let mut s = match kd {
            KeyDot::F16 => {
                f16_to_f32(bytemuck::cast_slice(k_row), kr, a.fast);
                dot_f16_ggml(kr, qs, a.fast)
            }
            KeyDot::Block { dot, row_bytes, .. } => {
                dot(dk, k_row, &bytemuck::cast_slice::<f32, u8>(qs)[..row_bytes])
            }
        };
        s *= a.scale;
        if a.softcap != 0.0 {
            s = a.softcap * s.tanh();
        }
        s += mv;
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        let new_max = s > max;
        if new_max {
            ms = (max - s).exp();
            max = s;
        } else {
            vs = (s - max).exp();
        }
        if v_f16 {
            if new_max {
                scale_f16(acc16, ms, a.fast);
            }
            mad_f16(acc16, bytemuck::cast_slice(v_row), vs, a.fast);
        } else {
            if new_max {
                for y in acc.iter_mut() {
                    *y *= ms;
                }
            }
            let deq = to_f32.expect("the builder admits only value types with to_float");
            deq(v_row, v32);
            for (y, &x) in acc.iter_mut().zip(v32.iter()) {
                *y = x.mul_add(vs, *y);
            }
        }
        sum = sum.mul_add(ms, vs);
    }
    // SAFETY: indices in range; only this thread writes the row (caller).
    let out = unsafe { a.out_row(iq1, iq2, iq3) };
    if v_f16 {
        f16_to_f32(acc16, out, a.fast);
    } else {
        out.copy_from_slice(acc);
    }
    if let Some(s) = a.sink(iq2) {
        sum = add_sink(s, max, sum, out).1;
    }
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    for o in out.iter_mut() {
        *o *= inv;
    }
}
