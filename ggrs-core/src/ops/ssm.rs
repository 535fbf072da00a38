//! Ops of recurrent (state-space and linear-attention) layers: the short causal convolution
//! of Mamba, LFM2 and the gated delta-net (`ssm_conv`) and Mamba-2's selective scan
//! (`ssm_scan`), the gated delta rule of Qwen3.5 / Qwen3-Next (`gated_delta_net`), and the
//! gates they use (`sigmoid`, `softplus`).

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::ops::shape_err;
use crate::tensor::Tensor;

impl Context {
    /// The causal depthwise convolution over time of recurrent layers (ggml's
    /// `ggml_ssm_conv`): each channel `i` of sequence `s` at token `t` is
    /// `Σ_{k<d_conv} sx[t + k, i, s] · c[k, i]`, summed in order of `k` in f32 as ggml's CPU
    /// kernel is compiled for the reference outputs (AVX-512: the products of whole groups of
    /// eight rounded, the last `d_conv % 8` fused into the sum), so the output at `t` sees
    /// the `d_conv − 1` columns before it and its own.
    ///
    /// - `sx`: `[d_conv − 1 + n_t, d_inner, n_s]` f32, dense rows with `nb[1] = ne[0]·4` (the
    ///   carried state — the last `d_conv − 1` inputs of the sequence — concatenated on
    ///   axis 0 with the `n_t` new inputs of each channel);
    /// - `c`: `[d_conv, d_inner]` f32, dense rows (one kernel per channel);
    /// - result: `[d_inner, n_t, n_s]` f32.
    pub fn ssm_conv(&mut self, sx: Tensor, c: Tensor) -> Result<Tensor> {
        let ms = self.expect_type("SSM_CONV", "sx", sx, &[DType::F32])?;
        let (ns, sb) = (ms.ne, ms.nb);
        let mc = self.expect_type("SSM_CONV", "c", c, &[DType::F32])?;
        let (nc, cb) = (mc.ne, mc.nb);
        if nc[2] != 1 || nc[3] != 1 || ns[3] != 1 || nc[0] == 0 || ns[1] != nc[1] {
            return Err(shape_err(
                "SSM_CONV",
                ns,
                nc,
                "sx must be [d_conv - 1 + n_t, d_inner, n_s] and c [d_conv, d_inner]",
            ));
        }
        if ns[0] < nc[0] - 1 {
            return Err(shape_err(
                "SSM_CONV",
                ns,
                nc,
                "sx must hold at least d_conv - 1 columns (the carried state)",
            ));
        }
        if sb[0] != 4 || (ns[1] > 1 && sb[1] != ns[0] * 4) || cb[0] != 4 {
            return Err(Error::InvalidArgument {
                op: "SSM_CONV",
                detail: "sx must have dense rows with nb[1] = ne[0]·4 and c dense rows".into(),
            });
        }
        let n_t = ns[0] + 1 - nc[0];
        self.new_tensor_with(
            DType::F32,
            [nc[1], n_t, ns[2], 1],
            Op::SsmConv,
            [Some(sx), Some(c)],
        )
    }

    /// Mamba-2's selective scan (ggml's `ggml_ssm_scan` with a scalar decay per head, one
    /// state per sequence): for each sequence, head `h` (using B/C group `h / (n_head /
    /// n_group)`, repeat-interleaved), channel `i` and token `t`, with
    /// `Δ = softplus(dt[h, t])` (`x` itself above 20) and `dA = exp(Δ·A[h])`:
    /// `S[:, i, h] ← S[:, i, h]·dA + B[:, g, t]·(x[i, h, t]·Δ)` and
    /// `y[i, h, t] = Σ_k S[k, i, h]·C[k, g, t]`, with ggml's CPU arithmetic (the state update
    /// and the sum fused multiply-adds, in order of `k`; `expf`/`logf` of the C library).
    ///
    /// - `s`: `[d_state, head_dim, n_head, n_s]` f32, each sequence's states contiguous
    ///   (`nb[3]` free): the states before the step;
    /// - `x`: `[head_dim, n_head, n_t, n_s]` f32, dense rows with `nb[1] = ne[0]·4`;
    /// - `dt`: `[n_head, n_t, n_s]` f32, contiguous (before the softplus, bias added);
    /// - `a`: `[1, n_head]` f32;
    /// - `b`, `c`: `[d_state, n_group, n_t, n_s]` f32, dense rows with `nb[1] = ne[0]·4`,
    ///   `n_group` dividing `n_head`;
    /// - result: `[head_dim·n_head·n_t·n_s + d_state·head_dim·n_head·n_s]` f32: `y`
    ///   (`[head_dim, n_head, n_t, n_s]`) followed by the states after the step (as `s`).
    pub fn ssm_scan(
        &mut self,
        s: Tensor,
        x: Tensor,
        dt: Tensor,
        a: Tensor,
        b: Tensor,
        c: Tensor,
    ) -> Result<Tensor> {
        let [head_dim, n_head, n_t, n_s] = self.check_ssm_scan(s, x, dt, a, b, c, None)?;
        let d_state = self.meta(s)?.ne[0];
        let len = head_dim * n_head * n_t * n_s + d_state * head_dim * n_head * n_s;
        self.new_tensor_with(
            DType::F32,
            [len, 1, 1, 1],
            Op::SsmScan { in_place: false },
            [Some(s), Some(x), Some(dt), Some(a), Some(b), Some(c)],
        )
    }

    /// [`Context::ssm_scan`] on states kept where they lie (ggml's `ggml_ssm_scan` with its
    /// `ids`, and the write-back of the new states without a copy): sequence `j` reads the
    /// states of row `ids[j]` of `s` and the scan updates them there, as it goes. The same
    /// arithmetic, so the same bits, as [`Context::ssm_scan`] on those rows.
    ///
    /// - `s`: `[d_state, head_dim, n_head, n_rows]` f32 in the arena (writable), each row
    ///   dense (`nb[3]` free: rows of a cache);
    /// - `ids`: `[n_s]` i32, distinct, in `0..n_rows` (checked when the graph runs);
    /// - `x`, `dt`, `a`, `b`, `c`: as [`Context::ssm_scan`]'s, not sharing storage with `s`;
    /// - result: `y`, `[head_dim, n_head, n_t, n_s]` f32; rows `ids` of `s` hold the states
    ///   after the step once it ran (an error while running may leave them half updated).
    #[allow(clippy::too_many_arguments)]
    pub fn ssm_scan_in_place(
        &mut self,
        s: Tensor,
        ids: Tensor,
        x: Tensor,
        dt: Tensor,
        a: Tensor,
        b: Tensor,
        c: Tensor,
    ) -> Result<Tensor> {
        let ne = self.check_ssm_scan(s, x, dt, a, b, c, Some(ids))?;
        self.check_in_place_states("SSM_SCAN", s, ids, ne[3], &[x, dt, a, b, c])?;
        self.new_tensor_with(
            DType::F32,
            ne,
            Op::SsmScan { in_place: true },
            [
                Some(s),
                Some(x),
                Some(dt),
                Some(a),
                Some(b),
                Some(c),
                Some(ids),
            ],
        )
    }

    /// The operand checks of [`Context::ssm_scan`] (with `ids`: of
    /// [`Context::ssm_scan_in_place`], whose states may have any number of rows); returns
    /// `x`'s shape `[head_dim, n_head, n_t, n_s]`.
    #[allow(clippy::too_many_arguments)]
    fn check_ssm_scan(
        &self,
        s: Tensor,
        x: Tensor,
        dt: Tensor,
        a: Tensor,
        b: Tensor,
        c: Tensor,
        ids: Option<Tensor>,
    ) -> Result<[usize; 4]> {
        const OP: &str = "SSM_SCAN";
        let ms = self.expect_type(OP, "s", s, &[DType::F32])?;
        let (ns, sb) = (ms.ne, ms.nb);
        // One sequence's states dense (the sequences may lie apart: rows of a cache).
        let s_cont = sb[0] == 4 && sb[1] == 4 * ns[0] && sb[2] == 4 * ns[0] * ns[1];
        let mx = self.expect_type(OP, "x", x, &[DType::F32])?;
        let (nx, xb) = (mx.ne, mx.nb);
        let mdt = self.expect_type(OP, "dt", dt, &[DType::F32])?;
        let (ndt, dt_cont) = (mdt.ne, mdt.is_contiguous());
        let ma = self.expect_type(OP, "A", a, &[DType::F32])?;
        let (na, a_cont) = (ma.ne, ma.is_contiguous());
        let mb = self.expect_type(OP, "B", b, &[DType::F32])?;
        let (nbb, bb) = (mb.ne, mb.nb);
        let mc = self.expect_type(OP, "C", c, &[DType::F32])?;
        let (ncc, cb) = (mc.ne, mc.nb);
        let [head_dim, n_head, n_t, n_s] = nx;
        let d_state = ns[0];
        let n_group = nbb[1];
        // In place, the states are every row of a cache, the step's picked by `ids`.
        let s_rows = if ids.is_some() { ns[3] } else { n_s };
        let shapes_ok = ns == [d_state, head_dim, n_head, s_rows]
            && ndt == [n_head, n_t, n_s, 1]
            && na == [1, n_head, 1, 1]
            && nbb == [d_state, n_group, n_t, n_s]
            && ncc == nbb
            && n_group > 0
            && n_head.is_multiple_of(n_group);
        if !shapes_ok {
            let rows = if ids.is_some() { "n_rows" } else { "n_s" };
            return Err(shape_err(
                OP,
                nx,
                nbb,
                format!(
                    "x [head_dim, n_head, n_t, n_s] = {nx:?} needs s [d_state, head_dim, \
                     n_head, {rows}] (is {ns:?}), dt [n_head, n_t, n_s] (is {ndt:?}), A [1, \
                     n_head] (is {na:?}), B and C [d_state, n_group, n_t, n_s] with n_group \
                     dividing n_head (are {nbb:?}, {ncc:?})"
                ),
            ));
        }
        let dense =
            |ne: [usize; 4], nb: [usize; 4]| nb[0] == 4 && (ne[1] <= 1 || nb[1] == 4 * ne[0]);
        if !(s_cont && dt_cont && a_cont && dense(nx, xb) && dense(nbb, bb) && dense(ncc, cb)) {
            return Err(Error::InvalidArgument {
                op: OP,
                detail: "s must be dense within a sequence, dt and A contiguous; x, B and C need \
                         dense rows with nb[1] = ne[0]·4"
                    .into(),
            });
        }
        Ok(nx)
    }

    /// What an op that updates recurrent states in place needs of them: `states` writable
    /// and sharing storage with none of `inputs` nor `ids`, which is `[n_s]` i32, contiguous.
    fn check_in_place_states(
        &self,
        op: &'static str,
        states: Tensor,
        ids: Tensor,
        n_s: usize,
        inputs: &[Tensor],
    ) -> Result<()> {
        let mi = self.expect_type(op, "ids", ids, &[DType::I32])?;
        if mi.ne != [n_s, 1, 1, 1] || !mi.is_contiguous() {
            return Err(shape_err(
                op,
                mi.ne,
                [n_s, 1, 1, 1],
                "ids must be [n_s] i32, contiguous: one states row per sequence",
            ));
        }
        self.expect_writable(op, states)?;
        for &t in inputs.iter().chain([&ids]) {
            if self.shares_storage(states, t)? {
                return Err(Error::Overlap {
                    op,
                    a: self.display_name(states),
                    b: self.display_name(t),
                });
            }
        }
        Ok(())
    }

    /// `1 / (1 + e^−a)` element-wise (ggml's `ggml_sigmoid`, the C library's `expf`). Any
    /// shape f32 → same shape.
    pub fn sigmoid(&mut self, a: Tensor) -> Result<Tensor> {
        let ne = self.expect_type("SIGMOID", "a", a, &[DType::F32])?.ne;
        self.new_tensor_with(DType::F32, ne, Op::Sigmoid, [Some(a)])
    }

    /// `ln(1 + eᵃ)` element-wise, `a` itself above 20 (ggml's `ggml_softplus`). Any shape
    /// f32 → same shape.
    pub fn softplus(&mut self, a: Tensor) -> Result<Tensor> {
        let ne = self.expect_type("SOFTPLUS", "a", a, &[DType::F32])?.ne;
        self.new_tensor_with(DType::F32, ne, Op::Softplus, [Some(a)])
    }

    /// The gated delta rule (ggml's fused `ggml_gated_delta_net` with one state slot, what
    /// llama.cpp runs on the CPU for prompts and decoding alike). Per sequence and value head
    /// `h` (query/key head `h % H_k`, tiled), with the state `S` (`S_v × S_v`) and for each
    /// token: `S ← e^g·S`, `δ = (v − Sᵀk)·β`, `S ← S + k δᵀ`, `o = (Sᵀq) / √S_v` — q and k
    /// as given (normalised by the caller), ggml's CPU arithmetic (`ggml_vec_dot_f32` sums,
    /// fused updates).
    ///
    /// - `q`, `k`: `[S_v, H_k, n_t, n_s]` f32, dense rows (`H_k` dividing `H_v`);
    /// - `v`: `[S_v, H_v, n_t, n_s]` f32, dense rows;
    /// - `g`: `[1, H_v, n_t, n_s]` f32, contiguous: the log decay of each head and token;
    /// - `beta`: `[1, H_v, n_t, n_s]` f32, contiguous;
    /// - `state`: `[S_v, S_v, H_v, n_s]` f32, dense within a sequence (`nb[3]` free), stored
    ///   as ggml stores it (row `j` of head `h` is column `j` of `S`);
    /// - result: `[S_v·H_v·n_t·n_s + S_v·S_v·H_v·n_s]` f32: the outputs `[S_v, H_v, n_t,
    ///   n_s]`, then the states after the step (as `state`).
    pub fn gated_delta_net(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        g: Tensor,
        beta: Tensor,
        state: Tensor,
    ) -> Result<Tensor> {
        let [s_v, h_v, n_t, n_s] = self.check_gated_delta_net([q, k, v, g, beta, state], false)?;
        let len = s_v * h_v * n_t * n_s + s_v * s_v * h_v * n_s;
        self.new_tensor_with(
            DType::F32,
            [len, 1, 1, 1],
            Op::GatedDeltaNet { in_place: false },
            [Some(q), Some(k), Some(v), Some(g), Some(beta), Some(state)],
        )
    }

    /// [`Context::gated_delta_net`] on states kept where they lie: sequence `j` reads the
    /// state of row `ids[j]` of `state` and the rule updates it there, token by token. The
    /// same arithmetic, so the same bits, as [`Context::gated_delta_net`] on those rows.
    ///
    /// - `state`: `[S_v, S_v, H_v, n_rows]` f32 in the arena (writable), each row dense
    ///   (`nb[3]` free: rows of a cache);
    /// - `ids`: `[n_s]` i32, distinct, in `0..n_rows` (checked when the graph runs);
    /// - `q`, `k`, `v`, `g`, `beta`: as [`Context::gated_delta_net`]'s, not sharing storage
    ///   with `state`;
    /// - result: the outputs `[S_v, H_v, n_t, n_s]` f32; rows `ids` of `state` hold the
    ///   states after the step once it ran (an error while running may leave them half
    ///   updated).
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net_in_place(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        g: Tensor,
        beta: Tensor,
        state: Tensor,
        ids: Tensor,
    ) -> Result<Tensor> {
        let ne = self.check_gated_delta_net([q, k, v, g, beta, state], true)?;
        self.check_in_place_states("GATED_DELTA_NET", state, ids, ne[3], &[q, k, v, g, beta])?;
        self.new_tensor_with(
            DType::F32,
            ne,
            Op::GatedDeltaNet { in_place: true },
            [
                Some(q),
                Some(k),
                Some(v),
                Some(g),
                Some(beta),
                Some(state),
                Some(ids),
            ],
        )
    }

    /// The operand checks of [`Context::gated_delta_net`] (`in_place`: of
    /// [`Context::gated_delta_net_in_place`], whose states may have any number of rows);
    /// returns `v`'s shape `[S_v, H_v, n_t, n_s]`.
    fn check_gated_delta_net(&self, operands: [Tensor; 6], in_place: bool) -> Result<[usize; 4]> {
        const OP: &str = "GATED_DELTA_NET";
        let mut metas = Vec::with_capacity(6);
        for (what, t) in ["q", "k", "v", "g", "beta", "state"]
            .into_iter()
            .zip(operands)
        {
            let m = self.expect_type(OP, what, t, &[DType::F32])?;
            metas.push((m.ne, m.nb));
        }
        let [(nq, qb), (nk, kb), (nv, vb), (ng, gb), (nbt, bb), (ns, sb)] = metas[..] else {
            unreachable!("six operands were read above")
        };
        let [s_v, h_v, n_t, n_s] = nv;
        let h_k = nq[1];
        let s_rows = if in_place { ns[3] } else { n_s };
        let shapes_ok = nq == [s_v, h_k, n_t, n_s]
            && nk == nq
            && h_k > 0
            && h_v.is_multiple_of(h_k)
            && ng == [1, h_v, n_t, n_s]
            && nbt == ng
            && ns == [s_v, s_v, h_v, s_rows];
        if !shapes_ok {
            let rows = if in_place { "n_rows" } else { "n_s" };
            return Err(shape_err(
                OP,
                nv,
                nq,
                format!(
                    "v [S_v, H_v, n_t, n_s] = {nv:?} needs q and k [S_v, H_k, n_t, n_s] with \
                     H_k dividing H_v (are {nq:?}, {nk:?}), g and beta [1, H_v, n_t, n_s] \
                     (are {ng:?}, {nbt:?}; per-channel decays are not supported), state \
                     [S_v, S_v, H_v, {rows}] (is {ns:?})"
                ),
            ));
        }
        let contiguous =
            |ne: [usize; 4], nb: [usize; 4]| crate::tensor::is_contiguous(DType::F32, &ne, &nb);
        let rows_ok = qb[0] == 4 && kb[0] == 4 && vb[0] == 4;
        let state_ok = sb[0] == 4 && sb[1] == 4 * s_v && sb[2] == 4 * s_v * s_v;
        if !(rows_ok && state_ok && contiguous(ng, gb) && contiguous(nbt, bb)) {
            return Err(Error::InvalidArgument {
                op: OP,
                detail: "q, k and v need dense rows, g and beta must be contiguous, the \
                         state dense within a sequence"
                    .into(),
            });
        }
        Ok(nv)
    }
}
