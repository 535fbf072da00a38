//! The recurrent layers' ops against plain loops of their recurrences written here, bit for
//! bit (same f32 arithmetic in the same order), on 1–3 threads, and their shape contracts:
//! - `ssm_conv`, the short causal convolution (LFM2, Mamba-2, the gated delta-net);
//! - `ssm_scan`, Mamba-2's selective scan;
//! - `gated_delta_net`, the delta rule of Qwen3.5, against the recurrence over a state
//!   matrix `S` (below 64 values per head ggml's dot products are plain in-order sums, so
//!   the loop gives the same bits), and decoding token by token equal to the whole prompt;
//! - `ssm_scan_in_place` and `gated_delta_net_in_place` (the states updated where they lie,
//!   in rows of a cache picked by ids) against the copying ops, bit for bit, the other rows
//!   untouched, and their refusals (repeated or out-of-range rows, overlapping operands);
//! - `sigmoid` and `softplus` against their formulas.

use crate::common;

use common::*;
use ggrs_core::{Context, DType, Executor, Graph, Result, Tensor};

/// Computes `out` on `threads` threads and reads it back.
fn compute(ctx: &mut Context, out: Tensor, threads: usize) -> Result<Vec<f32>> {
    let mut g = Graph::new();
    g.build_forward_expand(ctx, out)?;
    Executor::new(threads).compute(ctx, &g)?;
    ctx.to_f32_vec(out)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The convolution as a loop: `y[i, t, s] = Σ_k sx[t + k, i, s] · c[k, i]`, in order of k,
/// as GCC compiles ggml's loop for AVX-512 (products of whole groups of eight rounded, the
/// rest fused).
fn ssm_conv_ref(sx: &[f32], c: &[f32], d_conv: usize, d_inner: usize, n_t: usize) -> Vec<f32> {
    let ncs = d_conv - 1 + n_t;
    let n_s = sx.len() / (ncs * d_inner);
    let mut y = vec![0.0; d_inner * n_t * n_s];
    for s in 0..n_s {
        for t in 0..n_t {
            for i in 0..d_inner {
                let mut sum = 0.0f32;
                for k in 0..d_conv {
                    let (a, b) = (sx[(s * d_inner + i) * ncs + t + k], c[i * d_conv + k]);
                    sum = match k < d_conv / 8 * 8 {
                        true => sum + a * b,
                        false => a.mul_add(b, sum),
                    };
                }
                y[(s * n_t + t) * d_inner + i] = sum;
            }
        }
    }
    y
}

#[test]
fn ssm_conv_is_the_loop() {
    for (d_conv, d_inner, n_t, n_s) in [
        (4, 37, 9, 2),
        (3, 64, 1, 5),
        (4, 130, 17, 1),
        (6, 11, 3, 2),
        (11, 9, 4, 2),
        (2, 8, 0, 1),
    ] {
        let ncs = d_conv - 1 + n_t;
        let sx = values(1 + n_t as u64, ncs * d_inner * n_s);
        let c = values(99, d_conv * d_inner);
        let want = ssm_conv_ref(&sx, &c, d_conv, d_inner, n_t);
        for threads in [1, 2, 3] {
            let mut ctx = Context::with_mem_size(1 << 22);
            let (tx, _) = leaf(&mut ctx, DType::F32, [ncs, d_inner, n_s, 1], &sx).unwrap();
            let (tc, _) = leaf(&mut ctx, DType::F32, [d_conv, d_inner, 1, 1], &c).unwrap();
            let y = ctx.ssm_conv(tx, tc).unwrap();
            assert_eq!(ctx.meta(y).unwrap().ne, [d_inner, n_t, n_s, 1]);
            if n_t == 0 {
                continue;
            }
            let got = compute(&mut ctx, y, threads).unwrap();
            assert!(same_bits(&got, &want), "{d_conv} {d_inner} {n_t} {n_s}");
        }
    }
}

#[test]
fn ssm_conv_checks_shapes() {
    let mut ctx = Context::with_mem_size(1 << 20);
    let sx = ctx.new_tensor(DType::F32, &[6, 8, 2]).unwrap();
    let c = ctx.new_tensor(DType::F32, &[4, 9]).unwrap();
    assert!(ctx.ssm_conv(sx, c).is_err(), "channels differ");
    let short = ctx.new_tensor(DType::F32, &[2, 9]).unwrap();
    let c4 = ctx.new_tensor(DType::F32, &[4, 9]).unwrap();
    assert!(
        ctx.ssm_conv(short, c4).is_err(),
        "fewer columns than the state"
    );
    let f16 = ctx.new_tensor(DType::F16, &[4, 9]).unwrap();
    let sx9 = ctx.new_tensor(DType::F32, &[6, 9]).unwrap();
    assert!(ctx.ssm_conv(sx9, f16).is_err(), "f16 kernels");
    // A transposed input (strided rows) is refused: the caller makes it contiguous.
    let t = ctx.new_tensor(DType::F32, &[9, 6]).unwrap();
    let tt = ctx.transpose(t).unwrap();
    assert!(ctx.ssm_conv(tt, c4).is_err());
}

/// Mamba-2's scan as a plain loop over sequences, tokens, heads, channels and states:
/// returns `y` then the final states, ggml's layout and arithmetic (fused updates, softplus
/// `ln(1 + eˣ)` below 20; the sum over whole blocks of 64 states in 64 lanes added as the
/// AVX-512 build's four registers, the rest fused in order).
#[allow(clippy::too_many_arguments)]
fn ssm_scan_ref(
    s: &[f32],
    x: &[f32],
    dt: &[f32],
    a: &[f32],
    b: &[f32],
    c: &[f32],
    [d_state, head_dim, n_head, n_group, n_t, n_s]: [usize; 6],
) -> Vec<f32> {
    let mut st = s.to_vec();
    let mut y = vec![0.0; head_dim * n_head * n_t * n_s];
    for sq in 0..n_s {
        for t in 0..n_t {
            for h in 0..n_head {
                let g = h / (n_head / n_group);
                let raw = dt[(sq * n_t + t) * n_head + h];
                let sp = if raw > 20.0 {
                    raw
                } else {
                    (1.0 + raw.exp()).ln()
                };
                let da = (sp * a[h]).exp();
                for i in 0..head_dim {
                    let xdt = x[((sq * n_t + t) * n_head + h) * head_dim + i] * sp;
                    let np = d_state / 64 * 64;
                    let mut lanes = [0.0f32; 64];
                    let mut sum = 0.0f32;
                    for k in 0..d_state {
                        let si = ((sq * n_head + h) * head_dim + i) * d_state + k;
                        let bg = b[((sq * n_t + t) * n_group + g) * d_state + k];
                        let cg = c[((sq * n_t + t) * n_group + g) * d_state + k];
                        st[si] = st[si].mul_add(da, bg * xdt);
                        if k < np {
                            lanes[k % 64] = st[si].mul_add(cg, lanes[k % 64]);
                        } else {
                            if k == np && np > 0 {
                                sum = avx512_reduce(&lanes);
                            }
                            sum = st[si].mul_add(cg, sum);
                        }
                    }
                    if np == d_state {
                        sum = avx512_reduce(&lanes);
                    }
                    y[((sq * n_t + t) * n_head + h) * head_dim + i] = sum;
                }
            }
        }
    }
    y.extend(st);
    y
}

/// 64 lanes (four registers of 16) added as ggml's `GGML_F32_VEC_REDUCE` on AVX-512:
/// registers 0+2 and 1+3, then 0+1, then GCC's `_mm512_reduce_add_ps` (halves of 8, of 4,
/// then lanes (0+2) + (1+3)).
fn avx512_reduce(lanes: &[f32; 64]) -> f32 {
    let r: Vec<f32> = (0..16)
        .map(|l| (lanes[l] + lanes[l + 32]) + (lanes[l + 16] + lanes[l + 48]))
        .collect();
    let h8: Vec<f32> = (0..8).map(|i| r[i + 8] + r[i]).collect();
    let h4: Vec<f32> = (0..4).map(|i| h8[i + 4] + h8[i]).collect();
    (h4[0] + h4[2]) + (h4[1] + h4[3])
}

#[test]
fn ssm_scan_is_the_loop() {
    // (d_state, head_dim, n_head, n_group, n_t, n_s)
    for dims in [
        [128, 4, 4, 1, 5, 2],
        [80, 3, 2, 2, 3, 1],
        [16, 16, 8, 2, 7, 1],
        [16, 4, 6, 3, 1, 4],
        [8, 5, 4, 1, 3, 2],
    ] {
        let [d_state, head_dim, n_head, n_group, n_t, n_s] = dims;
        let s = values(1, d_state * head_dim * n_head * n_s);
        let x = values(2, head_dim * n_head * n_t * n_s);
        // dt from −3 to 30, so that the softplus takes both branches.
        let dt: Vec<f32> = values(3, n_head * n_t * n_s)
            .iter()
            .map(|v| 13.5 + 16.5 * v)
            .collect();
        let a: Vec<f32> = (0..n_head).map(|h| -1.0 - h as f32).collect();
        let b = values(5, d_state * n_group * n_t * n_s);
        let c = values(6, d_state * n_group * n_t * n_s);
        let want = ssm_scan_ref(&s, &x, &dt, &a, &b, &c, dims);
        for threads in [1, 2, 3] {
            let mut ctx = Context::with_mem_size(1 << 22);
            let (ts, _) = leaf(&mut ctx, DType::F32, [d_state, head_dim, n_head, n_s], &s).unwrap();
            let (tx, _) = leaf(&mut ctx, DType::F32, [head_dim, n_head, n_t, n_s], &x).unwrap();
            let (tdt, _) = leaf(&mut ctx, DType::F32, [n_head, n_t, n_s, 1], &dt).unwrap();
            let (ta, _) = leaf(&mut ctx, DType::F32, [1, n_head, 1, 1], &a).unwrap();
            let (tb, _) = leaf(&mut ctx, DType::F32, [d_state, n_group, n_t, n_s], &b).unwrap();
            let (tc, _) = leaf(&mut ctx, DType::F32, [d_state, n_group, n_t, n_s], &c).unwrap();
            let out = ctx.ssm_scan(ts, tx, tdt, ta, tb, tc).unwrap();
            let got = compute(&mut ctx, out, threads).unwrap();
            assert!(same_bits(&got, &want), "{dims:?} on {threads} threads");
        }
    }
}

#[test]
fn ssm_scan_checks_shapes() {
    let mut ctx = Context::with_mem_size(1 << 20);
    let s = ctx.new_tensor(DType::F32, &[16, 4, 6, 1]).unwrap();
    let x = ctx.new_tensor(DType::F32, &[4, 6, 2, 1]).unwrap();
    let dt = ctx.new_tensor(DType::F32, &[6, 2, 1]).unwrap();
    let a = ctx.new_tensor(DType::F32, &[1, 6]).unwrap();
    let b = ctx.new_tensor(DType::F32, &[16, 4, 2, 1]).unwrap();
    assert!(
        ctx.ssm_scan(s, x, dt, a, b, b).is_err(),
        "4 groups do not divide 6 heads"
    );
    let b3 = ctx.new_tensor(DType::F32, &[16, 3, 2, 1]).unwrap();
    assert!(ctx.ssm_scan(s, x, dt, a, b3, b3).is_ok());
    let a16 = ctx.new_tensor(DType::F32, &[16, 6]).unwrap();
    assert!(ctx.ssm_scan(s, x, dt, a16, b3, b3).is_err(), "Mamba-1's A");
}

/// The delta rule as a loop over `S[i][j]` (key index i, value index j): per token
/// `S ← e^g·S`, `δ_j = (v_j − Σ_i S[i][j]·k_i)·β`, `S[i][j] += k_i·δ_j` (fused),
/// `o_j = (Σ_i S[i][j]·q_i) / √S_v`; value head h uses key head `h % H_k`. Returns the
/// outputs then the states in ggml's layout (`state[h][j][i] = S[i][j]`).
#[allow(clippy::too_many_arguments)]
fn delta_rule_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: &[f32],
    [sv, h_k, h_v, n_t, n_s]: [usize; 5],
) -> Vec<f32> {
    let mut out = vec![0.0; sv * h_v * n_t * n_s];
    let mut st = state.to_vec();
    for s in 0..n_s {
        for h in 0..h_v {
            let hk = h % h_k;
            let base = (s * h_v + h) * sv * sv;
            let at = |i: usize, j: usize| base + j * sv + i; // S[i][j]
            for t in 0..n_t {
                let kq = |x: &[f32], i: usize| x[((s * n_t + t) * h_k + hk) * sv + i];
                let vv = |j: usize| v[((s * n_t + t) * h_v + h) * sv + j];
                let decay = g[(s * n_t + t) * h_v + h].exp();
                let b = beta[(s * n_t + t) * h_v + h];
                for x in &mut st[base..base + sv * sv] {
                    *x *= decay;
                }
                let mut delta = vec![0.0f32; sv];
                for (j, dj) in delta.iter_mut().enumerate() {
                    let mut sum = 0.0f32;
                    for i in 0..sv {
                        sum += st[at(i, j)] * kq(k, i);
                    }
                    *dj = (vv(j) - sum) * b;
                }
                for (j, dj) in delta.iter().enumerate() {
                    for i in 0..sv {
                        st[at(i, j)] = kq(k, i).mul_add(*dj, st[at(i, j)]);
                    }
                }
                for j in 0..sv {
                    let mut sum = 0.0f32;
                    for i in 0..sv {
                        sum += st[at(i, j)] * kq(q, i);
                    }
                    out[((s * n_t + t) * h_v + h) * sv + j] = sum * (1.0 / (sv as f32).sqrt());
                }
            }
        }
    }
    out.extend(st);
    out
}

/// The inputs of a delta-rule case: q, k, v, g (log decays ≤ 0), β in (0, 1), state.
fn delta_inputs([sv, h_k, h_v, n_t, n_s]: [usize; 5]) -> [Vec<f32>; 6] {
    let q = values(21, sv * h_k * n_t * n_s);
    let k: Vec<f32> = values(22, sv * h_k * n_t * n_s)
        .iter()
        .map(|x| x * 0.5)
        .collect();
    let v = values(23, sv * h_v * n_t * n_s);
    let g: Vec<f32> = values(24, h_v * n_t * n_s)
        .iter()
        .map(|x| -0.5 - 0.5 * x)
        .collect();
    let beta: Vec<f32> = values(25, h_v * n_t * n_s)
        .iter()
        .map(|x| 0.5 + 0.4 * x)
        .collect();
    let state = values(26, sv * sv * h_v * n_s);
    [q, k, v, g, beta, state]
}

/// Builds the op on `inp` for `dims`, computes it on `threads` threads.
fn delta_rule_op(inp: &[Vec<f32>; 6], dims: [usize; 5], threads: usize) -> Vec<f32> {
    let [sv, h_k, h_v, n_t, n_s] = dims;
    let [q, k, v, g, beta, state] = inp;
    let mut ctx = Context::with_mem_size(1 << 22);
    let (tq, _) = leaf(&mut ctx, DType::F32, [sv, h_k, n_t, n_s], q).unwrap();
    let (tk, _) = leaf(&mut ctx, DType::F32, [sv, h_k, n_t, n_s], k).unwrap();
    let (tv, _) = leaf(&mut ctx, DType::F32, [sv, h_v, n_t, n_s], v).unwrap();
    let (tg, _) = leaf(&mut ctx, DType::F32, [1, h_v, n_t, n_s], g).unwrap();
    let (tb, _) = leaf(&mut ctx, DType::F32, [1, h_v, n_t, n_s], beta).unwrap();
    let (ts, _) = leaf(&mut ctx, DType::F32, [sv, sv, h_v, n_s], state).unwrap();
    let out = ctx.gated_delta_net(tq, tk, tv, tg, tb, ts).unwrap();
    compute(&mut ctx, out, threads).unwrap()
}

#[test]
fn gated_delta_net_is_the_recurrence() {
    // (S_v, H_k, H_v, n_t, n_s): Qwen3.5's tiny shape, value heads tiling key heads, several
    // sequences, one token.
    for dims in [
        [16, 2, 4, 9, 1],
        [8, 1, 3, 4, 2],
        [48, 2, 2, 2, 1],
        [16, 2, 4, 1, 3],
    ] {
        let inp = delta_inputs(dims);
        let [q, k, v, g, beta, state] = &inp;
        let want = delta_rule_ref(q, k, v, g, beta, state, dims);
        for threads in [1, 2, 3] {
            let got = delta_rule_op(&inp, dims, threads);
            assert!(same_bits(&got, &want), "{dims:?} on {threads} threads");
        }
    }
}

/// A prompt in one step and token by token (the state carried between steps) give the same
/// outputs and final state, bit for bit, at the widths where ggml's sums go through SIMD
/// lanes (128 values per head) too.
#[test]
fn gated_delta_net_token_by_token_is_the_prompt() {
    let dims = [128, 1, 2, 5, 1];
    let [sv, h_k, h_v, n_t, _] = dims;
    let inp = delta_inputs(dims);
    let whole = delta_rule_op(&inp, dims, 2);
    let o_len = sv * h_v * n_t;
    let mut state = inp[5].clone();
    for t in 0..n_t {
        let piece = |x: &Vec<f32>, per: usize| x[t * per..(t + 1) * per].to_vec();
        let one = [
            piece(&inp[0], sv * h_k),
            piece(&inp[1], sv * h_k),
            piece(&inp[2], sv * h_v),
            piece(&inp[3], h_v),
            piece(&inp[4], h_v),
            state.clone(),
        ];
        let got = delta_rule_op(&one, [sv, h_k, h_v, 1, 1], 1);
        assert!(same_bits(
            &got[..sv * h_v],
            &whole[t * sv * h_v..(t + 1) * sv * h_v]
        ));
        state = got[sv * h_v..].to_vec();
    }
    assert!(same_bits(&state, &whole[o_len..]));
    // Against the loop (other sums): close.
    let [q, k, v, g, beta, st] = &inp;
    let want = delta_rule_ref(q, k, v, g, beta, st, dims);
    let d = want
        .iter()
        .zip(&whole)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(d < 1e-4, "{d}");
}

#[test]
fn gated_delta_net_checks_shapes() {
    let mut ctx = Context::with_mem_size(1 << 20);
    let t = |ctx: &mut Context, ne: &[usize]| ctx.new_tensor(DType::F32, ne).unwrap();
    let q = t(&mut ctx, &[16, 3, 2, 1]);
    let v = t(&mut ctx, &[16, 4, 2, 1]);
    let g = t(&mut ctx, &[1, 4, 2, 1]);
    let s = t(&mut ctx, &[16, 16, 4, 1]);
    assert!(
        ctx.gated_delta_net(q, q, v, g, g, s).is_err(),
        "3 key heads, 4 value heads"
    );
    let q2 = t(&mut ctx, &[16, 2, 2, 1]);
    assert!(ctx.gated_delta_net(q2, q2, v, g, g, s).is_ok());
    let g16 = t(&mut ctx, &[16, 4, 2, 1]);
    assert!(
        ctx.gated_delta_net(q2, q2, v, g16, g, s).is_err(),
        "per-channel decays"
    );
}

/// A cache of `n_rows` rows of `pad + per_seq` values (`pad` standing for the conv values
/// before a layer's ssm values) with `states` (`per_seq` values per sequence) at rows
/// `ids`, and distinct values elsewhere.
fn cache_with(states: &[f32], per_seq: usize, pad: usize, n_rows: usize, ids: &[i32]) -> Vec<f32> {
    let width = pad + per_seq;
    let mut cache = values(77, width * n_rows);
    for (s, &id) in ids.iter().enumerate() {
        let at = id as usize * width + pad;
        cache[at..at + per_seq].copy_from_slice(&states[s * per_seq..(s + 1) * per_seq]);
    }
    cache
}

/// The in-place scan on rows `ids` of a cache against `ssm_scan` on those states: the same
/// outputs, the same new states where they lay, every other value of the cache unchanged.
#[test]
fn ssm_scan_in_place_is_ssm_scan() {
    // (d_state, head_dim, n_head, n_group, n_t, n_s), ids, cache rows, conv values per row.
    for (dims, ids, n_rows, pad) in [
        ([128, 4, 4, 1, 1, 1], vec![2], 3, 12),
        ([16, 4, 6, 3, 3, 2], vec![3, 0], 5, 5),
        ([80, 3, 2, 2, 1, 3], vec![1, 4, 2], 6, 0),
    ] {
        let [d_state, head_dim, n_head, n_group, n_t, n_s] = dims;
        let per_seq = d_state * head_dim * n_head;
        let s = values(1, per_seq * n_s);
        let x = values(2, head_dim * n_head * n_t * n_s);
        let dt: Vec<f32> = values(3, n_head * n_t * n_s)
            .iter()
            .map(|v| 13.5 + 16.5 * v)
            .collect();
        let a: Vec<f32> = (0..n_head).map(|h| -1.0 - h as f32).collect();
        let b = values(5, d_state * n_group * n_t * n_s);
        let c = values(6, d_state * n_group * n_t * n_s);
        let want = ssm_scan_ref(&s, &x, &dt, &a, &b, &c, dims);
        let y_len = head_dim * n_head * n_t * n_s;
        let cache0 = cache_with(&s, per_seq, pad, n_rows, &ids);
        let mut cache_want = cache0.clone();
        for (j, &id) in ids.iter().enumerate() {
            let at = id as usize * (pad + per_seq) + pad;
            let new = &want[y_len + j * per_seq..y_len + (j + 1) * per_seq];
            cache_want[at..at + per_seq].copy_from_slice(new);
        }
        for threads in [1, 2, 3] {
            let mut ctx = Context::with_mem_size(1 << 22);
            let width = pad + per_seq;
            let (cache, _) = leaf(&mut ctx, DType::F32, [width, n_rows, 1, 1], &cache0).unwrap();
            let ts = ctx
                .view_4d(
                    cache,
                    [d_state, head_dim, n_head, n_rows],
                    4 * d_state,
                    4 * d_state * head_dim,
                    4 * width,
                    4 * pad,
                )
                .unwrap();
            let tids = ctx.new_tensor_1d(DType::I32, n_s).unwrap();
            ctx.set_i32(tids, &ids).unwrap();
            let (tx, _) = leaf(&mut ctx, DType::F32, [head_dim, n_head, n_t, n_s], &x).unwrap();
            let (tdt, _) = leaf(&mut ctx, DType::F32, [n_head, n_t, n_s, 1], &dt).unwrap();
            let (ta, _) = leaf(&mut ctx, DType::F32, [1, n_head, 1, 1], &a).unwrap();
            let (tb, _) = leaf(&mut ctx, DType::F32, [d_state, n_group, n_t, n_s], &b).unwrap();
            let (tc, _) = leaf(&mut ctx, DType::F32, [d_state, n_group, n_t, n_s], &c).unwrap();
            let y = ctx
                .ssm_scan_in_place(ts, tids, tx, tdt, ta, tb, tc)
                .unwrap();
            assert_eq!(ctx.meta(y).unwrap().ne, [head_dim, n_head, n_t, n_s]);
            let got = compute(&mut ctx, y, threads).unwrap();
            assert!(
                same_bits(&got, &want[..y_len]),
                "{dims:?} on {threads} threads"
            );
            let after = ctx.to_f32_vec(cache).unwrap();
            assert!(
                same_bits(&after, &cache_want),
                "{dims:?}: the cache after the step"
            );
        }
    }
}

/// The in-place delta rule on rows `ids` of a cache against `gated_delta_net` on those
/// states, at Qwen3.5's head width (128: ggml's sums through SIMD lanes) and a small one.
#[test]
fn gated_delta_net_in_place_is_gated_delta_net() {
    for (dims, ids, n_rows, pad) in [
        ([128, 1, 2, 1, 1], vec![1], 2, 24),
        ([16, 2, 4, 3, 2], vec![2, 0], 4, 7),
        ([8, 1, 3, 1, 3], vec![4, 1, 3], 5, 0),
    ] {
        let [sv, h_k, h_v, n_t, n_s] = dims;
        let inp = delta_inputs(dims);
        let want = delta_rule_op(&inp, dims, 2);
        let per_seq = sv * sv * h_v;
        let o_len = sv * h_v * n_t * n_s;
        let cache0 = cache_with(&inp[5], per_seq, pad, n_rows, &ids);
        let mut cache_want = cache0.clone();
        for (j, &id) in ids.iter().enumerate() {
            let at = id as usize * (pad + per_seq) + pad;
            let new = &want[o_len + j * per_seq..o_len + (j + 1) * per_seq];
            cache_want[at..at + per_seq].copy_from_slice(new);
        }
        for threads in [1, 2, 3] {
            let [q, k, v, g, beta, _] = &inp;
            let mut ctx = Context::with_mem_size(1 << 22);
            let width = pad + per_seq;
            let (cache, _) = leaf(&mut ctx, DType::F32, [width, n_rows, 1, 1], &cache0).unwrap();
            let ts = ctx
                .view_4d(
                    cache,
                    [sv, sv, h_v, n_rows],
                    4 * sv,
                    4 * sv * sv,
                    4 * width,
                    4 * pad,
                )
                .unwrap();
            let tids = ctx.new_tensor_1d(DType::I32, n_s).unwrap();
            ctx.set_i32(tids, &ids).unwrap();
            let (tq, _) = leaf(&mut ctx, DType::F32, [sv, h_k, n_t, n_s], q).unwrap();
            let (tk, _) = leaf(&mut ctx, DType::F32, [sv, h_k, n_t, n_s], k).unwrap();
            let (tv, _) = leaf(&mut ctx, DType::F32, [sv, h_v, n_t, n_s], v).unwrap();
            let (tg, _) = leaf(&mut ctx, DType::F32, [1, h_v, n_t, n_s], g).unwrap();
            let (tb, _) = leaf(&mut ctx, DType::F32, [1, h_v, n_t, n_s], beta).unwrap();
            let o = ctx
                .gated_delta_net_in_place(tq, tk, tv, tg, tb, ts, tids)
                .unwrap();
            assert_eq!(ctx.meta(o).unwrap().ne, [sv, h_v, n_t, n_s]);
            let got = compute(&mut ctx, o, threads).unwrap();
            assert!(
                same_bits(&got, &want[..o_len]),
                "{dims:?} on {threads} threads"
            );
            let after = ctx.to_f32_vec(cache).unwrap();
            assert!(
                same_bits(&after, &cache_want),
                "{dims:?}: the cache after the step"
            );
        }
    }
}

/// Two sequences may not update one row (their threads would race), a row must exist, and
/// the states may not share storage with an input.
#[test]
fn in_place_states_refuse_bad_rows_and_overlaps() {
    let (sv, h_v, n_s) = (8, 2, 2);
    let mut ctx = Context::with_mem_size(1 << 20);
    let t = |ctx: &mut Context, ne: &[usize]| {
        let t = ctx.new_tensor(DType::F32, ne).unwrap();
        ctx.set_f32(t, &values(9, ne.iter().product())).unwrap();
        t
    };
    let q = t(&mut ctx, &[sv, 1, 1, n_s]);
    let v = t(&mut ctx, &[sv, h_v, 1, n_s]);
    let g = t(&mut ctx, &[1, h_v, 1, n_s]);
    let s = t(&mut ctx, &[sv, sv, h_v, 3]);
    let ids = ctx.new_tensor_1d(DType::I32, n_s).unwrap();
    for (rows, what) in [([1, 1], "a repeated row"), ([0, 3], "a row past the cache")] {
        ctx.set_i32(ids, &rows).unwrap();
        let o = ctx.gated_delta_net_in_place(q, q, v, g, g, s, ids).unwrap();
        let mut graph = Graph::new();
        graph.build_forward_expand(&ctx, o).unwrap();
        let run = Executor::new(2).compute(&mut ctx, &graph);
        assert!(run.is_err(), "{what}");
    }
    ctx.set_i32(ids, &[2, 0]).unwrap();
    let o = ctx.gated_delta_net_in_place(q, q, v, g, g, s, ids).unwrap();
    assert!(compute(&mut ctx, o, 2).is_ok());
    // v read out of the states themselves.
    let sv_view = ctx.view_4d(s, [sv, h_v, 1, n_s], 4 * sv, 4 * sv * h_v, 4 * sv * h_v, 0);
    let sv_view = sv_view.unwrap();
    assert!(ctx
        .gated_delta_net_in_place(q, q, sv_view, g, g, s, ids)
        .is_err());
    // The scan: ids must be one i32 per sequence.
    let x = t(&mut ctx, &[4, 2, 1, n_s]);
    let dt = t(&mut ctx, &[2, 1, n_s, 1]);
    let a = t(&mut ctx, &[1, 2]);
    let b = t(&mut ctx, &[16, 1, 1, n_s]);
    let ss = t(&mut ctx, &[16, 4, 2, 5]);
    assert!(ctx.ssm_scan_in_place(ss, ids, x, dt, a, b, b).is_ok());
    let ids3 = ctx.new_tensor_1d(DType::I32, 3).unwrap();
    assert!(ctx.ssm_scan_in_place(ss, ids3, x, dt, a, b, b).is_err());
    let fids = ctx.new_tensor_1d(DType::F32, n_s).unwrap();
    assert!(ctx.ssm_scan_in_place(ss, fids, x, dt, a, b, b).is_err());
}

#[test]
fn sigmoid_and_softplus_follow_ggml() {
    let x: Vec<f32> = values(31, 300).iter().map(|v| v * 30.0).collect();
    let mut ctx = Context::with_mem_size(1 << 20);
    let (tx, _) = leaf(&mut ctx, DType::F32, [100, 3, 1, 1], &x).unwrap();
    let sg = ctx.sigmoid(tx).unwrap();
    let sp = ctx.softplus(tx).unwrap();
    let got_sg = compute(&mut ctx, sg, 2).unwrap();
    let got_sp = compute(&mut ctx, sp, 2).unwrap();
    for (i, &v) in x.iter().enumerate() {
        assert_eq!(got_sg[i].to_bits(), (1.0 / (1.0 + (-v).exp())).to_bits());
        let want = if v > 20.0 { v } else { (1.0 + v.exp()).ln() };
        assert_eq!(got_sp[i].to_bits(), want.to_bits());
    }
    assert!(x.iter().any(|&v| v > 20.0));
}
