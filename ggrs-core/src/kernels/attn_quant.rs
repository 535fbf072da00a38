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
    add_sink, dot_f16_ggml, f16_to_f32, f2h, group_size, h2f, mad_f16, mask_value, scale_f16, Attn,
    HeadRows,
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

/// The plan of a node this kernel runs: rows of (query, head) in chunks (groups of heads
/// sharing a key/value head on the AVX2 path, see [`fast_path`]).
pub(crate) fn plan(q: &TensorMeta, k: &TensorMeta, v: &TensorMeta, nth: usize) -> TaskPlan {
    let rows = q.ne[1] * q.ne[2] * q.ne[3];
    let units = if fast_shapes(k.dtype, v.dtype, k.ne[0], v.ne[0]) {
        rows / group_size(q.ne, k.ne, v.ne).max(1)
    } else {
        rows
    };
    TaskPlan {
        n_chunks: units.min(nth * 4).max(1),
        scratch_f32: row_scratch(k.ne[0], v.ne[0]),
        ..TaskPlan::default()
    }
}

/// Whether keys of type `k` and values of type `v`, rows of `dk` and `dv` values, can run
/// the AVX2 group loop (`kernels::x86::attn_quant`) on this CPU.
fn fast_shapes(k: DType, v: DType, dk: usize, dv: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::x86::attn_quant::Block;
        crate::cpu::isa() >= crate::cpu::Isa::Avx2
            && dk == dv
            && FAST_DIMS.contains(&dk)
            && Block::of(k).is_some()
            && Block::of(v).is_some()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (k, v, dk, dv);
        false
    }
}

/// Head sizes of the AVX2 group loop.
const FAST_DIMS: [usize; 3] = [64, 128, 256];

/// The AVX2 group loop's setting for node `a`, if it runs it: the heads per key/value
/// head, the key and value block types, whether the query converts to Q8_1.
#[cfg(target_arch = "x86_64")]
struct Fast {
    gs: usize,
    kt: crate::kernels::x86::attn_quant::Block,
    vt: crate::kernels::x86::attn_quant::Block,
    q8_1: bool,
}

/// [`Fast`] when node `a` runs the AVX2 group loop: the CPU has AVX2, FMA and F16C
/// (`a.fast`), no soft-cap, equal key and value head sizes of [`FAST_DIMS`], block types
/// the loop decodes, one mask row for all heads.
#[cfg(target_arch = "x86_64")]
fn fast_path(a: &Attn) -> Option<Fast> {
    use crate::kernels::x86::attn_quant::Block;
    let ok = a.fast
        && a.softcap == 0.0
        && fast_shapes(a.k.dtype, a.v.dtype, a.k.ne[0], a.v.ne[0])
        && a.mask.is_none_or(|m| m.ne[2] == 1);
    ok.then(|| Fast {
        gs: group_size(a.q.ne, a.k.ne, a.v.ne).max(1),
        kt: Block::of(a.k.dtype).expect("fast_shapes checked the key type"),
        vt: Block::of(a.v.dtype).expect("fast_shapes checked the value type"),
        q8_1: traits(a.k.dtype).vec_dot_type == DType::Q8_1,
    })
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
    // SAFETY: forwarded (the plan's chunks, scratch of `row_scratch`).
    unsafe { run(&a, chunk, n_chunks, work.scratch) }
}

/// Chunk `chunk` of `n_chunks` of node `a`: groups of heads on the AVX2 path, else rows.
///
/// # Safety
/// As [`flash_attn_ext`]; `sc` holds [`row_scratch`] values.
unsafe fn run(a: &Attn, chunk: usize, n_chunks: usize, sc: &mut [f32]) {
    let (n_q, n_head, n3) = (a.q.ne[1], a.q.ne[2], a.q.ne[3]);
    let kd = KeyDot::new(a.k.dtype, a.k.ne[0]);
    #[cfg(target_arch = "x86_64")]
    if let Some(f) = fast_path(a) {
        let n_groups = n_head / f.gs;
        for u in split_range(n_q * n_groups * n3, n_chunks, chunk) {
            let (iq1, g, iq3) = (u % n_q, (u / n_q) % n_groups, u / (n_q * n_groups));
            let mut h = g * f.gs;
            while h < (g + 1) * f.gs {
                let n = ((g + 1) * f.gs - h).min(crate::kernels::x86::attn::MAX_GROUP);
                // SAFETY: indices in range; this chunk owns the group's rows; the CPU has
                // the features (`fast_path`).
                unsafe { group_rows(a, &f, kd, iq1, h..h + n, iq3) };
                h += n;
            }
        }
        return;
    }
    let to_f32 = traits(a.v.dtype).to_f32;
    for r in split_range(n_q * n_head * n3, n_chunks, chunk) {
        let (iq1, iq2, iq3) = (r % n_q, (r / n_q) % n_head, r / (n_q * n_head));
        // SAFETY: indices in range; this chunk owns the row; the scratch holds one row's
        // (plan).
        unsafe { one_row(a, kd, to_f32, iq1, iq2, iq3, sc) };
    }
}

/// The rows of query `iq1` for the heads `heads` (at most `MAX_GROUP`, sharing their key
/// and value head) through the AVX2 group loop, written to their output rows.
///
/// # Safety
/// Indices in range; only this thread writes these rows; [`fast_path`] gave `f`.
#[cfg(target_arch = "x86_64")]
unsafe fn group_rows(
    a: &Attn,
    f: &Fast,
    kd: KeyDot,
    iq1: usize,
    heads: std::ops::Range<usize>,
    iq3: usize,
) {
    macro_rules! run {
        ($($g:literal)*) => {
            match heads.len() {
                $($g => {
                    // SAFETY: forwarded.
                    unsafe { group_d::<$g>(a, f, kd, iq1, heads.start, iq3) }
                })*
                n => unreachable!("groups hold 1 to 8 heads, not {n}"),
            }
        };
    }
    run!(1 2 3 4 5 6 7 8)
}

/// [`group_rows`] for `G` heads from `h0`, by head size.
///
/// # Safety
/// As [`group_rows`].
#[cfg(target_arch = "x86_64")]
unsafe fn group_d<const G: usize>(
    a: &Attn,
    f: &Fast,
    kd: KeyDot,
    iq1: usize,
    h0: usize,
    iq3: usize,
) {
    match a.k.ne[0] {
        // SAFETY: forwarded.
        64 => unsafe { group_n::<G, 2, 8>(a, f, kd, iq1, h0, iq3) },
        // SAFETY: forwarded.
        128 => unsafe { group_n::<G, 4, 16>(a, f, kd, iq1, h0, iq3) },
        // SAFETY: forwarded.
        256 => unsafe { group_n::<G, 8, 32>(a, f, kd, iq1, h0, iq3) },
        d => unreachable!("head size {d} is not one of FAST_DIMS"),
    }
}

/// [`group_rows`] for `G` heads from `h0`, rows of `NB` blocks (`N = 4·NB` vectors).
///
/// # Safety
/// As [`group_rows`].
#[cfg(target_arch = "x86_64")]
unsafe fn group_n<const G: usize, const NB: usize, const N: usize>(
    a: &Attn,
    f: &Fast,
    kd: KeyDot,
    iq1: usize,
    h0: usize,
    iq3: usize,
) {
    use crate::kernels::x86::attn_quant as xq;
    let KeyDot::Block {
        quantize,
        row_bytes,
        ..
    } = kd
    else {
        unreachable!("fast_path admits block keys only")
    };
    let dv = a.v.ne[0];
    let mut bytes = [0u8; 36 * 8];
    let q: [[xq::QueryBlock; NB]; G] = std::array::from_fn(|j| {
        // SAFETY: head h0 + j in range (caller).
        let row = unsafe { a.q_row(iq1, h0 + j, iq3) };
        quantize(row, &mut bytes[..row_bytes]);
        // SAFETY: the CPU has AVX2 and F16C (`fast_path`); `bytes` holds the row's NB
        // blocks.
        unsafe { xq::query_blocks::<NB>(&bytes[..row_bytes], f.q8_1) }
    });
    // The heads share their key and value head (`group_size`).
    // SAFETY: head indices in range (caller); the mask's ne[2] is 1 (caller).
    let rows = unsafe { a.group_key_rows(iq1, h0, iq3) };
    let mut acc = [[0f32; 256]; G];
    // SAFETY: the CPU has AVX2, FMA and F16C (`fast_path`); rows 0..n_kv of this head's
    // keys and values (NB blocks each) and the mask row's elements lie in their tensors.
    let res = unsafe {
        xq::keys_group_q::<G, NB, N>(&q, &mut acc, &rows, f.kt, f.vt, 0..a.k.ne[1], a.scale)
    };
    for (j, (acc, (max, sum))) in acc.iter().zip(res).enumerate() {
        // SAFETY: indices in range; only this thread writes the row (caller).
        let out = unsafe { a.out_row(iq1, h0 + j, iq3) };
        out.copy_from_slice(&acc[..dv]);
        normalise(a, out, h0 + j, max, sum);
    }
}

/// The end of a row: the sink of head `iq2` joined (if any) to the unnormalised output
/// `out` with its running maximum and sum, then `out · (1/S)`.
fn normalise(a: &Attn, out: &mut [f32], iq2: usize, max: f32, mut sum: f32) {
    if let Some(s) = a.sink(iq2) {
        sum = add_sink(s, max, sum, out).1;
    }
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    for o in out.iter_mut() {
        *o *= inv;
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
    normalise(a, out, iq2, max, sum);
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::kernels::RawTensor;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        /// Uniform in [−1, 1).
        fn f(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }
    }

    fn raw(data: &mut [u8], dtype: DType, ne: [usize; 4], nb: [usize; 4]) -> RawTensor {
        RawTensor {
            data: data.as_mut_ptr(),
            dtype,
            ne,
            nb,
        }
    }

    /// A cache of `n_kv` cells of `hkv` heads of `d` values of type `t`: random bytes (every
    /// code, every fifth bit) with sane f16 scales and minima at their places.
    fn cache(t: DType, d: usize, n_kv: usize, hkv: usize, rng: &mut Rng) -> Vec<u8> {
        let bb = t.row_size(32);
        let mut b: Vec<u8> = (0..t.row_size(d) * hkv * n_kv)
            .map(|_| rng.next() as u8)
            .collect();
        let halves = if matches!(t, DType::Q4_1 | DType::Q5_1) {
            2
        } else {
            1
        };
        for (i, blk) in b.chunks_exact_mut(bb).enumerate() {
            for h in 0..halves {
                // Block 5 of every 11: a zero scale.
                let x = if i % 11 == 5 && h == 0 {
                    0.0
                } else {
                    rng.f() * 0.05
                };
                blk[2 * h..2 * h + 2].copy_from_slice(&half::f16::from_f32(x).to_le_bytes());
            }
        }
        b
    }

    /// The AVX2 group loop gives the portable one-row kernel's bits for every key and value
    /// type it reads, head sizes 64 and 128, groups of 1, 3 and 9 heads (8 + 1), with and
    /// without a mask (f16 and f32, fully masked rows too) and sinks, in several chunks.
    #[test]
    fn group_loop_equals_the_one_row_kernel() {
        if crate::cpu::isa() < crate::cpu::Isa::Avx2 {
            return;
        }
        let types = [
            DType::Q8_0,
            DType::Q4_0,
            DType::Q5_0,
            DType::Q4_1,
            DType::Q5_1,
            DType::IQ4NL,
        ];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut case = 0usize;
        for &kt in &types {
            for &vt in &types {
                case += 1;
                let d = if case.is_multiple_of(3) { 128 } else { 64 };
                let gs = [1, 3, 9][case % 3];
                let (hkv, n_q, n_kv) = (2, 2, 37 + case % 5);
                let h = gs * hkv;
                let mut qv: Vec<u8> = (0..d * n_q * h)
                    .flat_map(|_| (rng.f() * 2.0).to_le_bytes())
                    .collect();
                let mut kb = cache(kt, d, n_kv, hkv, &mut rng);
                let mut vb = cache(vt, d, n_kv, hkv, &mut rng);
                let mask_kind = case % 4; // none, f16, f32, f16 with a fully masked row
                let mv: Vec<f32> = (0..n_kv * n_q)
                    .map(|i| {
                        let (c, r) = (i % n_kv, i / n_kv);
                        if (c * 7 + r) % 5 == 2 || (mask_kind == 3 && r == 1) {
                            f32::NEG_INFINITY
                        } else {
                            rng.f()
                        }
                    })
                    .collect();
                let mut mb: Vec<u8> = if mask_kind == 2 {
                    mv.iter().flat_map(|x| x.to_le_bytes()).collect()
                } else {
                    mv.iter()
                        .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                        .collect()
                };
                let mut sinks: Vec<u8> =
                    (0..h).flat_map(|_| (rng.f() * 3.0).to_le_bytes()).collect();
                let q = raw(
                    &mut qv,
                    DType::F32,
                    [d, n_q, h, 1],
                    [4, 4 * d, 4 * d * n_q, 4 * d * n_q * h],
                );
                let (krow, vrow) = (kt.row_size(d), vt.row_size(d));
                let k = raw(
                    &mut kb,
                    kt,
                    [d, n_kv, hkv, 1],
                    [kt.type_size(), krow * hkv, krow, krow * hkv * n_kv],
                );
                let v = raw(
                    &mut vb,
                    vt,
                    [d, n_kv, hkv, 1],
                    [vt.type_size(), vrow * hkv, vrow, vrow * hkv * n_kv],
                );
                let me = if mask_kind == 2 { 4 } else { 2 };
                let mdt = if mask_kind == 2 {
                    DType::F32
                } else {
                    DType::F16
                };
                let mask = raw(
                    &mut mb,
                    mdt,
                    [n_kv, n_q, 1, 1],
                    [me, me * n_kv, me * n_kv * n_q, me * n_kv * n_q],
                );
                let sk = raw(
                    &mut sinks,
                    DType::F32,
                    [h, 1, 1, 1],
                    [4, 4 * h, 4 * h, 4 * h],
                );
                let with_sinks = case % 2 == 1;
                let mut outs = Vec::new();
                for (fast, n_chunks) in [(false, 1), (true, 1), (true, 3)] {
                    let mut ob = vec![0u8; 4 * d * h * n_q];
                    let dst = raw(
                        &mut ob,
                        DType::F32,
                        [d, h, n_q, 1],
                        [4, 4 * d, 4 * d * h, 4 * d * h * n_q],
                    );
                    let a = Attn {
                        q: &q,
                        k: &k,
                        v: &v,
                        mask: (mask_kind != 0).then_some(&mask),
                        sinks: with_sinks.then_some(&sk),
                        dst: &dst,
                        scale: 0.125,
                        softcap: 0.0,
                        fast,
                    };
                    assert_eq!(fast_path(&a).is_some(), fast);
                    let mut sc = vec![0f32; row_scratch(d, d)];
                    for chunk in 0..n_chunks {
                        // SAFETY: the tensors above hold every row the node reads and
                        // writes; one thread.
                        unsafe { run(&a, chunk, n_chunks, &mut sc) };
                    }
                    outs.push(ob);
                }
                let what = format!(
                    "K {kt} V {vt} d {d} heads {gs}×{hkv} mask {mask_kind} sinks {with_sinks}"
                );
                let want: &[f32] = bytemuck::cast_slice(&outs[0]);
                assert!(want.iter().any(|&x| x != 0.0), "{what}: all zero");
                for got in &outs[1..] {
                    let got: &[f32] = bytemuck::cast_slice(got);
                    for (i, (x, y)) in got.iter().zip(want).enumerate() {
                        assert!(
                            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                            "{what}: value {i}: {x} vs portable {y}"
                        );
                    }
                }
            }
        }
    }
}
