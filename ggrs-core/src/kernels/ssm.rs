//! Kernels of the recurrent layers' ops (see `ops::ssm`).

use crate::error::{Error, Result};
use crate::kernels::ggml_arith::{dot_f32_vec, reduce16};
use crate::kernels::rows::check_id;
use crate::kernels::{split_range, RawTensor, Task, Work};
use crate::op::Op;

/// `ssm_conv`: chunk `chunk` of `n_chunks` over the channels (`d_inner`); every output is
/// its own in-order f32 sum, so the split does not change any bit.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; the builder checked the shapes and strides.
pub(crate) unsafe fn ssm_conv(task: &Task, chunk: usize, n_chunks: usize) {
    let (d, sx, c) = (&task.dst, task.s0(), task.s1());
    let (n_t, n_s) = (d.ne[1], d.ne[2]);
    for i in split_range(d.ne[0], n_chunks, chunk) {
        // SAFETY: i < d_inner = c.ne[1] = sx.ne[1]; the kernel row has nc values.
        let w = unsafe { c.row_f32(i, 0, 0) };
        for s in 0..n_s {
            // SAFETY: row (i, s) of sx holds d_conv − 1 + n_t values; (i, t, s) lies in dst
            // for t < n_t, n_t steps of nb[1] bytes apart, and channel i belongs to this
            // chunk only.
            unsafe {
                let x = sx.row_f32(i, s, 0);
                let out = d.data.add(d.offset(i, 0, s, 0)) as *mut f32;
                conv_channel(x, w, out, d.nb[1] / 4, n_t);
            }
        }
    }
}

/// One channel of `ssm_conv`: `out[t·stride] = Σ_k x[t + k]·w[k]` for `t < n_t`, eight
/// tokens at a time (each its own sum: lane `l` does token `t + l`'s scalar arithmetic).
/// ggml's loop as GCC builds it for the reference machine (AVX-512: a 16-wide body and an
/// 8-wide epilogue): the products of whole groups of eight are rounded and added in order,
/// the last `nc % 8` fused into the sum (FMA). Checked on the tiny models: d_conv 3 (LFM2)
/// and 4 (Granite 4.0-H) are wholly fused.
///
/// # Safety
/// `x` holds `n_t + w.len() − 1` values; `out + t·stride` is writable for `t < n_t`.
#[inline(always)]
unsafe fn conv_channel_body(x: &[f32], w: &[f32], out: *mut f32, stride: usize, n_t: usize) {
    let nc = w.len();
    let fused_from = nc - nc % 8;
    let mut t0 = 0;
    while t0 + 8 <= n_t {
        let mut sum = [0f32; 8];
        for (k, &wk) in w.iter().enumerate() {
            let xs = &x[t0 + k..t0 + k + 8];
            for (s, &xv) in sum.iter_mut().zip(xs) {
                *s = if k < fused_from {
                    *s + xv * wk
                } else {
                    xv.mul_add(wk, *s)
                };
            }
        }
        for (l, &v) in sum.iter().enumerate() {
            // SAFETY: t0 + l < n_t (the caller's contract).
            unsafe { *out.add((t0 + l) * stride) = v };
        }
        t0 += 8;
    }
    for t in t0..n_t {
        let mut sum = 0.0f32;
        for k in 0..fused_from {
            sum += x[t + k] * w[k];
        }
        for k in fused_from..nc {
            sum = x[t + k].mul_add(w[k], sum);
        }
        // SAFETY: t < n_t (the caller's contract).
        unsafe { *out.add(t * stride) = sum };
    }
}

/// ggml's softplus: `x` above 20, else `ln(1 + eˣ)` (the C library's `logf` and `expf`).
#[inline]
pub(crate) fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// One channel's state update and output of the scan: `S[k] ← S[k]·dA + B[k]·x_dt` (fused,
/// `B[k]·x_dt` rounded) and `Σ_k S[k]·C[k]`, as ggml's Mamba-2 loop on the AVX-512 build:
/// the states in whole blocks of 64 summed in 64 FMA lanes (four registers of 16), the
/// registers added 0+2, 1+3, then 0+1, then `_mm512_reduce_add_ps`; the states after the
/// last block (all of them below 64: the tiny models' 16) fused into the sum in order of `k`
/// (ggml's scalar loop as GCC contracts it).
#[inline(always)]
fn scan_row_body(state: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32) -> f32 {
    let n = state.len();
    let np = n & !63;
    let mut sum = 0.0f32;
    if np > 0 {
        let mut lanes = [0f32; 64];
        for ((s, bv), cv) in state[..np]
            .chunks_exact_mut(64)
            .zip(b[..np].chunks_exact(64))
            .zip(c[..np].chunks_exact(64))
        {
            for t in 0..64 {
                let new = s[t].mul_add(da, bv[t] * x_dt);
                lanes[t] = new.mul_add(cv[t], lanes[t]);
                s[t] = new;
            }
        }
        sum = reduce_64_lanes(&lanes);
    }
    for ((s, &bv), &cv) in state[np..].iter_mut().zip(&b[np..]).zip(&c[np..]) {
        let new = s.mul_add(da, bv * x_dt);
        sum = new.mul_add(cv, sum);
        *s = new;
    }
    sum
}

/// ggml's `GGML_F32_VEC_REDUCE` on AVX-512 of four registers of 16 lanes (lanes `16·r + l`).
#[inline(always)]
fn reduce_64_lanes(lanes: &[f32; 64]) -> f32 {
    let mut r16 = [0f32; 16];
    for (l, r) in r16.iter_mut().enumerate() {
        *r = (lanes[l] + lanes[l + 32]) + (lanes[l + 16] + lanes[l + 48]);
    }
    reduce16(&r16)
}

/// `y[i] = fma(x[i], v, y[i])` (ggml's `ggml_vec_mad_f32`, fused lane by lane).
#[inline(always)]
fn mad_body(y: &mut [f32], x: &[f32], v: f32) {
    for (a, &b) in y.iter_mut().zip(x) {
        *a = b.mul_add(v, *a);
    }
}

/// `y[i] *= v` (ggml's `ggml_vec_scale_f32`: one rounded product per lane).
#[inline(always)]
fn scale_body(y: &mut [f32], v: f32) {
    for a in y.iter_mut() {
        *a *= v;
    }
}

/// The AVX2 + FMA builds of the bodies above (the same bits: an FMA rounds once either way,
/// and the portable build calls the C library's `fmaf`).
#[cfg(target_arch = "x86_64")]
mod fma {
    use super::*;

    crate::kernels::x86::target_features!("avx2,fma":
        pub(super) fn scan_row(state: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32) -> f32 = scan_row_body;
        pub(super) fn mad(y: &mut [f32], x: &[f32], v: f32) = mad_body;
        pub(super) fn scale_row(y: &mut [f32], v: f32) = scale_body;
        pub(super) fn conv_channel(x: &[f32], w: &[f32], out: *mut f32, stride: usize, n_t: usize) = conv_channel_body;
    );
}

/// [`scan_row_body`], built for AVX2 + FMA where the CPU has them.
#[inline]
fn scan_row(state: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::isa() >= crate::cpu::Isa::Avx2 {
        // SAFETY: `isa()` is AVX2 or better only when the CPU has AVX2 and FMA.
        return unsafe { fma::scan_row(state, b, c, da, x_dt) };
    }
    scan_row_body(state, b, c, da, x_dt)
}

/// [`mad_body`], built for AVX2 + FMA where the CPU has them.
#[inline]
fn mad(y: &mut [f32], x: &[f32], v: f32) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::isa() >= crate::cpu::Isa::Avx2 {
        // SAFETY: as in `scan_row`.
        return unsafe { fma::mad(y, x, v) };
    }
    mad_body(y, x, v)
}

/// [`conv_channel_body`], built for AVX2 + FMA where the CPU has them (the portable build's
/// `mul_add` calls the C library's `fmaf`, one call per product).
///
/// # Safety
/// As [`conv_channel_body`].
#[inline]
unsafe fn conv_channel(x: &[f32], w: &[f32], out: *mut f32, stride: usize, n_t: usize) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::isa() >= crate::cpu::Isa::Avx2 {
        // SAFETY: as in `scan_row`; the rest is the caller's contract.
        return unsafe { fma::conv_channel(x, w, out, stride, n_t) };
    }
    // SAFETY: the caller's contract.
    unsafe { conv_channel_body(x, w, out, stride, n_t) }
}

/// [`scale_body`], built for AVX2 where the CPU has it.
#[inline]
fn scale_row(y: &mut [f32], v: f32) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::isa() >= crate::cpu::Isa::Avx2 {
        // SAFETY: as in `scan_row`.
        return unsafe { fma::scale_row(y, v) };
    }
    scale_body(y, v)
}

/// Row `(i1, i2, i3)` of a tensor with dense rows of f32, as a slice.
///
/// # Safety
/// The row lies within the tensor, which nobody writes meanwhile.
#[inline]
unsafe fn row<'a>(t: &RawTensor, i1: usize, i2: usize, i3: usize) -> &'a [f32] {
    // SAFETY: forwarded from the caller; rows are dense f32 (checked by the builders).
    unsafe {
        std::slice::from_raw_parts(t.data.add(t.offset(0, i1, i2, i3)) as *const f32, t.ne[0])
    }
}

/// One f32 element of `t`.
///
/// # Safety
/// The element lies within the tensor, which nobody writes meanwhile.
#[inline]
unsafe fn at(t: &RawTensor, i0: usize, i1: usize, i2: usize, i3: usize) -> f32 {
    // SAFETY: forwarded from the caller.
    unsafe { *(t.data.add(t.offset(i0, i1, i2, i3)) as *const f32) }
}

/// The states rows of an in-place recurrent op (`src[6]`, `[n_s]` i32), each checked to be
/// in `0..n_rows` and unlike the others: one thread may then update a row while another
/// updates another.
///
/// # Safety
/// `ids` is the op's ids source as the builder checked it (`[n_s]` i32, contiguous).
unsafe fn state_rows(op: &'static str, ids: &RawTensor, n_rows: usize) -> Result<Vec<usize>> {
    let n_s = ids.ne[0];
    // SAFETY: `n_s` contiguous i32 (the caller's contract); nobody writes them meanwhile.
    let raw = unsafe { std::slice::from_raw_parts(ids.data as *const i32, n_s) };
    let mut rows = Vec::with_capacity(n_s);
    for &id in raw {
        let row = check_id(op, id, n_rows)?;
        if rows.contains(&row) {
            return Err(Error::InvalidArgument {
                op,
                detail: format!("two sequences of the step update the same states row {row}"),
            });
        }
        rows.push(row);
    }
    Ok(rows)
}

/// `len` f32 at element `(0, 0, i2, i3)` of `t` (a dense run of its states), writable.
///
/// # Safety
/// The run lies within `t`, and no other thread touches it meanwhile.
#[inline]
unsafe fn states_mut<'a>(t: &RawTensor, i2: usize, i3: usize, len: usize) -> &'a mut [f32] {
    // SAFETY: forwarded from the caller.
    unsafe { std::slice::from_raw_parts_mut(t.data.add(t.offset(0, 0, i2, i3)) as *mut f32, len) }
}

/// `ssm_scan` (and, `in_place`, `ssm_scan_in_place`): chunk `chunk` of `n_chunks` over the
/// heads (each head's scan is independent of the others', so the split does not change any
/// bit). The states of a head are updated in `dst` after the outputs, from a copy of `src0`'s,
/// or, in place, where they lie in row `ids[s]` of `src0`.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; the builder checked shapes and strides, and that
/// in place the states share no storage with the other operands.
pub(crate) unsafe fn ssm_scan(
    task: &Task,
    in_place: bool,
    chunk: usize,
    n_chunks: usize,
) -> Result<()> {
    let d = &task.dst;
    let src = |i: usize| task.src[i].as_ref().expect("ssm_scan has its sources");
    let (s_in, x, dt, a, b, c) = (src(0), src(1), src(2), src(3), src(4), src(5));
    let [head_dim, n_head, n_t, n_s] = x.ne;
    let (d_state, n_group) = (s_in.ne[0], b.ne[1]);
    let per_group = n_head / n_group;
    let y_len = head_dim * n_head * n_t * n_s;
    let out = d.data as *mut f32;
    let rows = match in_place {
        // SAFETY: in place, src6 is the ids the builder checked.
        true => Some(unsafe { state_rows("SSM_SCAN", src(6), s_in.ne[3])? }),
        false => None,
    };
    for h in split_range(n_head, n_chunks, chunk) {
        let g = h / per_group;
        // SAFETY: indices within the shapes the builder checked; inputs are not written.
        let a_h = unsafe { at(a, 0, h, 0, 0) };
        for s in 0..n_s {
            let state: &mut [f32] = match &rows {
                // SAFETY: head h of row rows[s] is dense (checked by the builder), in src0;
                // the rows are distinct and head h belongs to this chunk only.
                Some(rows) => unsafe { states_mut(s_in, h, rows[s], head_dim * d_state) },
                None => {
                    let state0 = y_len + (s * n_head + h) * head_dim * d_state;
                    // SAFETY: this head's states of sequence s lie in dst (the builder sized
                    // it) and belong to this chunk only; the input states are another tensor.
                    let state = unsafe {
                        std::slice::from_raw_parts_mut(out.add(state0), head_dim * d_state)
                    };
                    for (i1, st) in state.chunks_exact_mut(d_state).enumerate() {
                        // SAFETY: indices within the shapes the builder checked; inputs are
                        // not written.
                        st.copy_from_slice(unsafe { row(s_in, i1, h, s) });
                    }
                    state
                }
            };
            for t in 0..n_t {
                // SAFETY: indices within the shapes the builder checked; inputs are not written.
                let dt_sp = softplus(unsafe { at(dt, h, t, s, 0) });
                let da = (dt_sp * a_h).exp();
                // SAFETY: indices within the shapes the builder checked; inputs are not written.
                let (bg, cg) = unsafe { (row(b, g, t, s), row(c, g, t, s)) };
                for (i1, st) in state.chunks_exact_mut(d_state).enumerate() {
                    // SAFETY: indices within the shapes the builder checked; inputs are not written.
                    let x_dt = unsafe { at(x, i1, h, t, s) } * dt_sp;
                    let sum = scan_row(st, bg, cg, da, x_dt);
                    let yi = ((s * n_t + t) * n_head + h) * head_dim + i1;
                    // SAFETY: y element of this head: in dst, this chunk's only.
                    unsafe { *out.add(yi) = sum };
                }
            }
        }
    }
    Ok(())
}

/// `sigmoid` and `softplus` rows (ggml's scalar loops over the C library's `expf`/`logf`).
///
/// # Safety
/// See [`crate::kernels::compute_chunk`].
pub(crate) unsafe fn unary(task: &Task, chunk: usize, n_chunks: usize, work: &mut Work) {
    let (d, a) = (&task.dst, task.s0());
    for r in split_range(d.nrows(), n_chunks, chunk) {
        let (i1, i2, i3) = d.unravel_row(r);
        // SAFETY: row (i1, i2, i3) exists in dst and a (same shape); this thread owns it in dst.
        unsafe {
            let out = d.row_f32_mut(i1, i2, i3);
            let x = a.load_row(i1, i2, i3, work.scratch);
            for (o, &v) in out.iter_mut().zip(x) {
                *o = match task.op {
                    Op::Sigmoid => 1.0 / (1.0 + (-v).exp()),
                    _ => softplus(v),
                };
            }
        }
    }
}

/// `ggml_vec_dot_f32` of two f32 slices (the reference build's order).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_f32_vec(a.len(), bytemuck::cast_slice(a), bytemuck::cast_slice(b))
}

/// `gated_delta_net` (and, `in_place`, `gated_delta_net_in_place`): chunk `chunk` of
/// `n_chunks` over the (value head, sequence) pairs, each a scan of its own (the split does
/// not change any bit). ggml's CPU arithmetic: the state `M` (row `j` = column `j` of S)
/// scaled by `expf(g)`, `δ_j = (v_j − M_j·k)·β` with `ggml_vec_dot_f32`, `M_j += k·δ_j`
/// fused, `o_j = (M_j·q)·scale`. The states are updated in `dst` after the outputs, from a
/// copy of `src5`'s, or, in place, where they lie in row `ids[s]` of `src5`.
///
/// # Safety
/// See [`crate::kernels::compute_chunk`]; the builder checked shapes and strides, and that
/// in place the states share no storage with the other operands.
pub(crate) unsafe fn gated_delta_net(
    task: &Task,
    in_place: bool,
    chunk: usize,
    n_chunks: usize,
) -> Result<()> {
    let d = &task.dst;
    let src = |i: usize| {
        task.src[i]
            .as_ref()
            .expect("gated_delta_net has its sources")
    };
    let (q, k, v, g, beta, s_in) = (src(0), src(1), src(2), src(3), src(4), src(5));
    let [sv, h_v, n_t, n_s] = v.ne;
    let (h_q, h_k) = (q.ne[1], k.ne[1]);
    let (rq3, rk3) = (n_s / q.ne[3], n_s / k.ne[3]);
    let scale = 1.0 / (sv as f32).sqrt();
    let out = d.data as *mut f32;
    let o_len = sv * h_v * n_t * n_s;
    let rows = match in_place {
        // SAFETY: in place, src6 is the ids the builder checked.
        true => Some(unsafe { state_rows("GATED_DELTA_NET", src(6), s_in.ne[3])? }),
        false => None,
    };
    for ir in split_range(h_v * n_s, n_chunks, chunk) {
        let (iv1, iv3) = (ir % h_v, ir / h_v);
        let (iq1, ik1) = (iv1 % h_q, iv1 % h_k);
        let (iq3, ik3) = (iv3 / rq3, iv3 / rk3);
        let m: &mut [f32] = match &rows {
            // SAFETY: head iv1 of row rows[iv3] is dense (checked by the builder), in src5;
            // the rows are distinct and the pair (iv1, iv3) belongs to this chunk only.
            Some(rows) => unsafe { states_mut(s_in, iv1, rows[iv3], sv * sv) },
            None => {
                // SAFETY: this pair's states lie in dst after the outputs (the builder sized
                // it) and belong to this chunk only.
                let m = unsafe {
                    std::slice::from_raw_parts_mut(
                        out.add(o_len + (iv3 * h_v + iv1) * sv * sv),
                        sv * sv,
                    )
                };
                for j in 0..sv {
                    // SAFETY: indices within the shapes the builder checked; inputs are not
                    // written.
                    m[j * sv..(j + 1) * sv].copy_from_slice(unsafe { row(s_in, j, iv1, iv3) });
                }
                m
            }
        };
        for t in 0..n_t {
            // SAFETY: indices within the shapes the builder checked; inputs are not written.
            let (qd, kd, vd) = unsafe {
                (
                    row(q, iq1, t, iq3),
                    row(k, ik1, t, ik3),
                    row(v, iv1, t, iv3),
                )
            };
            // SAFETY: indices within the shapes the builder checked; inputs are not written.
            let b = unsafe { at(beta, 0, iv1, t, iv3) };
            // SAFETY: indices within the shapes the builder checked; inputs are not written.
            let decay = unsafe { at(g, 0, iv1, t, iv3) }.exp();
            let o0 = ((iv3 * n_t + t) * h_v + iv1) * sv;
            // Row j of M depends on nothing but itself, k, q, v_j and β: ggml's four passes
            // over the whole state (scale, δ, update, output) are done row by row while the
            // row is in L1, each element seeing the same operations in the same order.
            for (j, mj) in m.chunks_exact_mut(sv).enumerate() {
                scale_row(mj, decay);
                let dj = (vd[j] - dot(mj, kd)) * b;
                mad(mj, kd, dj);
                let o = dot(mj, qd) * scale;
                // SAFETY: output element of this pair: in dst, this chunk's only.
                unsafe { *out.add(o0 + j) = o };
            }
        }
    }
    Ok(())
}
