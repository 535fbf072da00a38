//! Neural-network ops: normalisation, embeddings, matrix products, attention pieces, rotary.

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::{Op, RopeMode};
use crate::ops::shape_err;
use crate::tensor::Tensor;

/// The block types [`Context::set_rows`] writes (llama.cpp's quantized KV-cache types).
pub const SET_ROWS_BLOCK_TYPES: [DType; 6] = [
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::IQ4NL,
];

/// The key and value types [`Context::flash_attn_ext`] reads: F16 and the block types of
/// [`SET_ROWS_BLOCK_TYPES`] (llama.cpp's CPU flash attention reads these and F32/BF16, which
/// take soft-max and two matrix products here).
pub const FLASH_ATTN_KV_TYPES: [DType; 7] = {
    let mut t = [DType::F16; 7];
    let mut i = 0;
    while i < SET_ROWS_BLOCK_TYPES.len() {
        t[i + 1] = SET_ROWS_BLOCK_TYPES[i];
        i += 1;
    }
    t
};

/// Parameters of [`Context::rope_ext`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeParams {
    /// Leading dimensions of each head that are rotated (even, ≤ head size); the rest pass
    /// through unchanged.
    pub n_dims: usize,
    /// How rotated dimensions pair up.
    pub mode: RopeMode,
    /// θ base: dimension pair `i` turns by `pos · base^(−2i/n_dims)`.
    pub freq_base: f32,
    /// Positions are multiplied by this (linear RoPE scaling; 1 for none).
    pub freq_scale: f32,
}

impl RopeParams {
    /// `n_dims` rotated dimensions in `mode`, base 10000, no scaling.
    pub fn new(n_dims: usize, mode: RopeMode) -> RopeParams {
        RopeParams {
            n_dims,
            mode,
            freq_base: 10000.0,
            freq_scale: 1.0,
        }
    }
}

impl Context {
    /// Layer normalisation of each row: `(x − mean) / √(var + eps)` (no affine parameters:
    /// multiply and add them after). a: `[n0, n1, n2, n3]` f32 → same.
    pub fn norm(&mut self, a: Tensor, eps: f32) -> Result<Tensor> {
        let ne = self.expect_type("NORM", "a", a, &[DType::F32])?.ne;
        self.new_tensor_with(DType::F32, ne, Op::Norm { eps }, [Some(a), None, None])
    }

    /// RMS normalisation of each row: `x / √(mean(x²) + eps)` (no weight: multiply it after).
    /// a: `[n0, n1, n2, n3]` f32 → same.
    pub fn rms_norm(&mut self, a: Tensor, eps: f32) -> Result<Tensor> {
        let ne = self.expect_type("RMS_NORM", "a", a, &[DType::F32])?.ne;
        self.new_tensor_with(DType::F32, ne, Op::RmsNorm { eps }, [Some(a), None, None])
    }

    /// Embedding lookup. a: `[n0, rows, n2, n3]` of any type with an f32 conversion (F32, F16,
    /// BF16, block types), rows dense; ids: `[n, n2, n3]` i32 with values in `0..rows` →
    /// `[n0, n, n2, n3]` f32, where `out[:, i, j, k] = a[:, ids[i, j, k], j, k]`.
    /// An id out of range is reported when the graph runs.
    pub fn get_rows(&mut self, a: Tensor, ids: Tensor) -> Result<Tensor> {
        let ma = self.meta(a)?;
        let (na, ta) = (ma.ne, ma.dtype);
        if crate::types::traits(ta).to_f32.is_none() {
            return Err(Error::UnsupportedType {
                op: "GET_ROWS",
                dtype: ta,
                detail: "a needs a conversion to f32".into(),
            });
        }
        if !ma.rows_contiguous() {
            return Err(Error::Layout {
                op: "GET_ROWS",
                name: self.display_name(a),
                required: "row-contiguous",
            });
        }
        let ni = self.expect_type("GET_ROWS", "ids", ids, &[DType::I32])?.ne;
        if ni[1] != na[2] || ni[2] != na[3] || ni[3] != 1 {
            return Err(shape_err(
                "GET_ROWS",
                na,
                ni,
                "ids must be [n, a.ne[2], a.ne[3]]",
            ));
        }
        self.new_tensor_with(
            DType::F32,
            [na[0], ni[0], ni[1], ni[2]],
            Op::GetRows,
            [Some(a), Some(ids), None],
        )
    }

    /// Writes rows into a tensor at given indices (the KV-cache write). dst: `[n0, rows, n2,
    /// n3]` F32, F16, BF16 or one of the block types of [`SET_ROWS_BLOCK_TYPES`] (`n0` a
    /// multiple of the block size; each row is quantized as ggml's CPU `from_float` does:
    /// Q8_0 with its x86 rounding, the others with their reference quantizers) in the arena,
    /// rows dense; src: `[n0, n, n2, n3]` f32;
    /// ids: `[n]` or `[n, m2, m3]` i32 with `m2 | n2`, `m3 | n3` (broadcast) and values in
    /// `0..rows`. Sets `dst[:, ids[i, j % m2, k % m3], j, k] = src[:, i, j, k]` (converting)
    /// and returns a view of dst that depends on the write: expand it into the graph before
    /// the nodes that read dst.
    pub fn set_rows(&mut self, dst: Tensor, src: Tensor, ids: Tensor) -> Result<Tensor> {
        let allowed: Vec<DType> = [DType::F32, DType::F16, DType::BF16]
            .into_iter()
            .chain(SET_ROWS_BLOCK_TYPES)
            .collect();
        let md = self.expect_type("SET_ROWS", "dst", dst, &allowed)?;
        let (nd, nbd, dense) = (md.ne, md.nb, md.rows_contiguous());
        let block = md.dtype.block_size();
        if !nd[0].is_multiple_of(block) {
            return Err(shape_err(
                "SET_ROWS",
                nd,
                nd,
                "a block-quantized dst needs rows of a multiple of the block size",
            ));
        }
        if !dense {
            return Err(Error::Layout {
                op: "SET_ROWS",
                name: self.display_name(dst),
                required: "row-contiguous",
            });
        }
        let ns = self.expect_type("SET_ROWS", "src", src, &[DType::F32])?.ne;
        let ni = self.expect_type("SET_ROWS", "ids", ids, &[DType::I32])?.ne;
        if ns[0] != nd[0] || ns[2] != nd[2] || ns[3] != nd[3] {
            return Err(shape_err(
                "SET_ROWS",
                nd,
                ns,
                "src must be [dst.ne[0], n, dst.ne[2], dst.ne[3]]",
            ));
        }
        if ni[0] != ns[1] || ns[2] % ni[1] != 0 || ns[3] % ni[2] != 0 || ni[3] != 1 {
            return Err(shape_err(
                "SET_ROWS",
                ns,
                ni,
                "ids must be [src.ne[1], m2, m3] with m2 | src.ne[2] and m3 | src.ne[3]",
            ));
        }
        self.expect_writable("SET_ROWS", dst)?;
        for (what, t) in [("src", src), ("ids", ids)] {
            if self.shares_storage(dst, t)? {
                return Err(Error::Overlap {
                    op: "SET_ROWS",
                    a: self.display_name(dst),
                    b: format!("{what} {}", self.display_name(t)),
                });
            }
        }
        let t = self.new_view(dst, Op::SetRows, nd, nbd, 0)?;
        self.meta_mut(t)?.src = [Some(dst), Some(src), Some(ids), None, None, None, None];
        Ok(t)
    }

    /// Matrix product, ggml's convention: a: `[k, n, a2, a3]` (weights; any type with a dot
    /// product: F32, F16, BF16, block types; rows dense), b: `[k, m, b2, b3]` f32 (any strides)
    /// with `a2 | b2` and `a3 | b3` → `[n, m, b2, b3]` f32 with
    /// `out[i, j] = Σ_k a[k, i] · b[k, j]`, i.e. `b · aᵀ`, a broadcast over axes 2 and 3
    /// (so grouped-query attention needs no copies of K and V).
    pub fn mul_mat(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        let ma = self.meta(a)?;
        let (na, ta, dense) = (ma.ne, ma.dtype, ma.rows_contiguous());
        let tr = crate::types::traits(ta);
        if !crate::kernels::matmul::supports(ta) || tr.to_f32.is_none() {
            return Err(Error::UnsupportedType {
                op: "MUL_MAT",
                dtype: ta,
                detail: "a must be F32, F16, BF16 or a block type with a dot product".into(),
            });
        }
        if !dense {
            return Err(Error::Layout {
                op: "MUL_MAT",
                name: self.display_name(a),
                required: "row-contiguous (nb[0] = type size)",
            });
        }
        let nb = self.expect_type("MUL_MAT", "b", b, &[DType::F32])?.ne;
        if na[0] != nb[0] {
            return Err(shape_err(
                "MUL_MAT",
                na,
                nb,
                "a.ne[0] must equal b.ne[0] (the shared dimension k)",
            ));
        }
        if nb[2] % na[2] != 0 || nb[3] % na[3] != 0 {
            return Err(shape_err(
                "MUL_MAT",
                na,
                nb,
                "a.ne[2] must divide b.ne[2] and a.ne[3] must divide b.ne[3] (a is broadcast)",
            ));
        }
        self.new_tensor_with(
            DType::F32,
            [na[1], nb[1], nb[2], nb[3]],
            Op::MulMat {
                per_column: self.per_column_products(),
            },
            [Some(a), Some(b), None],
        )
    }

    /// Matrix products with a matrix chosen per column: ggml's `ggml_mul_mat_id`, the
    /// experts of a mixture-of-experts layer.
    ///
    /// - `a`: `[k, n, n_mat]`, `n_mat` stacked matrices of any type [`Context::mul_mat`]
    ///   takes (rows dense);
    /// - `b`: `[k, n_b, n_tok]` f32 (any strides), `n_b` dividing `n_used` (usually 1: one
    ///   activation column per token shared by its slots; or `n_used`: one per slot);
    /// - `ids`: `[n_used, n_tok]` i32, the matrix each slot of each token uses, in
    ///   `0..n_mat`
    ///
    /// → `[n, n_used, n_tok]` f32 with `out[:, e, t] = a[:, :, ids[e, t]] · b[:, e % n_b, t]`,
    /// i.e. `out[i, e, t] = Σ_j a[j, i, ids[e, t]] · b[j, e % n_b, t]`.
    ///
    /// Every column is the bits [`Context::mul_mat`] gives for that matrix (as a 2-D
    /// `[k, n]` tensor) times that one column: the same activation conversion and dot
    /// products, whatever the thread count. An id outside `0..n_mat` is reported when the
    /// graph runs ([`Error::IndexOutOfRange`]).
    pub fn mul_mat_id(&mut self, a: Tensor, b: Tensor, ids: Tensor) -> Result<Tensor> {
        let ma = self.meta(a)?;
        let (na, ta, dense) = (ma.ne, ma.dtype, ma.rows_contiguous());
        let tr = crate::types::traits(ta);
        if !crate::kernels::matmul::supports(ta) || tr.to_f32.is_none() {
            return Err(Error::UnsupportedType {
                op: "MUL_MAT_ID",
                dtype: ta,
                detail: "a must be F32, F16, BF16 or a block type with a dot product".into(),
            });
        }
        if !dense {
            return Err(Error::Layout {
                op: "MUL_MAT_ID",
                name: self.display_name(a),
                required: "row-contiguous (nb[0] = type size)",
            });
        }
        let nb = self.expect_type("MUL_MAT_ID", "b", b, &[DType::F32])?.ne;
        let ni = self
            .expect_type("MUL_MAT_ID", "ids", ids, &[DType::I32])?
            .ne;
        if na[3] != 1 {
            return Err(shape_err(
                "MUL_MAT_ID",
                na,
                nb,
                "a must be [k, n, n_mat] (3-D: the matrices stacked along axis 2)",
            ));
        }
        if na[0] != nb[0] {
            return Err(shape_err(
                "MUL_MAT_ID",
                na,
                nb,
                "a.ne[0] must equal b.ne[0] (the shared dimension k)",
            ));
        }
        if ni[2] != 1 || ni[3] != 1 || nb[3] != 1 {
            return Err(shape_err(
                "MUL_MAT_ID",
                nb,
                ni,
                "b must be [k, n_b, n_tok] and ids [n_used, n_tok] (no further axes)",
            ));
        }
        if ni[1] != nb[2] {
            return Err(shape_err(
                "MUL_MAT_ID",
                nb,
                ni,
                "ids.ne[1] must equal b.ne[2] (one row of ids per token)",
            ));
        }
        if nb[1] == 0 || ni[0] % nb[1] != 0 {
            return Err(shape_err(
                "MUL_MAT_ID",
                nb,
                ni,
                "b.ne[1] must divide ids.ne[0] (one column per token, or one per slot)",
            ));
        }
        self.new_tensor_with(
            DType::F32,
            [na[1], ni[0], nb[2], 1],
            Op::MulMatId,
            [Some(a), Some(b), Some(ids)],
        )
    }

    /// Causal mask: a: `[n_kv, n_q, n2, n3]` f32 → same, with `out[i, j] = −∞` where
    /// `i > n_past + j` (query row j sees keys 0..=n_past + j), else `a[i, j]`.
    pub fn diag_mask_inf(&mut self, a: Tensor, n_past: usize) -> Result<Tensor> {
        let ne = self.expect_type("DIAG_MASK_INF", "a", a, &[DType::F32])?.ne;
        self.new_tensor_with(
            DType::F32,
            ne,
            Op::DiagMaskInf { n_past },
            [Some(a), None, None],
        )
    }

    /// Softmax of each row of `a · scale + mask`. a: `[n0, n1, n2, n3]` f32; mask (optional):
    /// `[n0, m1, m2, m3]` F32 or F16 with `m1 ≥ n1`, `m2 | n2`, `m3 | n3` (row j of a uses
    /// mask row j; broadcast over axes 2, 3) → same shape as a, f32. Rows that are all −∞
    /// give zeros.
    pub fn soft_max_ext(&mut self, a: Tensor, mask: Option<Tensor>, scale: f32) -> Result<Tensor> {
        let na = self.expect_type("SOFT_MAX", "a", a, &[DType::F32])?.ne;
        if let Some(mk) = mask {
            let nm = self
                .expect_type("SOFT_MAX", "mask", mk, &[DType::F32, DType::F16])?
                .ne;
            if nm[0] != na[0] || nm[1] < na[1] || na[2] % nm[2] != 0 || na[3] % nm[3] != 0 {
                return Err(shape_err(
                    "SOFT_MAX",
                    na,
                    nm,
                    "mask must be [a.ne[0], ≥ a.ne[1], m2 | a.ne[2], m3 | a.ne[3]]",
                ));
            }
            if !self.meta(mk)?.rows_contiguous() {
                return Err(Error::Layout {
                    op: "SOFT_MAX",
                    name: self.display_name(mk),
                    required: "row-contiguous",
                });
            }
        }
        self.new_tensor_with(DType::F32, na, Op::SoftMax { scale }, [Some(a), mask, None])
    }

    /// Fused attention, ggml's `flash_attn_ext`: for each query row, head and outer index,
    /// `softmax(K·q · scale + mask) · V` without materialising the score matrix.
    ///
    /// Shapes (ggml's contract):
    /// - q: `[d_k, n_q, n_head, n3]` f32, rows dense (a permuted view is fine);
    /// - k: `[d_k, n_kv, n_head_kv, k3]` of a type in [`FLASH_ATTN_KV_TYPES`], rows dense,
    ///   `n_head_kv | n_head`, `k3 | n3` (grouped-query attention by broadcast: head h reads
    ///   key head `h / (n_head/n_head_kv)`);
    /// - v: `[d_v, n_kv, n_head_v, v3]` of a type in [`FLASH_ATTN_KV_TYPES`] (K's or
    ///   another), rows dense, `n_head_v | n_head`, `v3 | n3`;
    /// - mask (optional): `[n_kv, m1 ≥ n_q, m2 | n_head, m3 | n3]` F16 or F32, rows dense,
    ///   added to the scaled scores (−∞ hides a key; query row i uses mask row i);
    /// - result: `[d_v, n_head, n_q, n3]` f32, contiguous — already in the
    ///   `[d_v·n_head, n_q]` order an output projection wants (reshape it).
    ///
    /// A query that sees no key gives zeros. The arithmetic is that of ggml's CPU kernel on
    /// x86-64 (so results match llama.cpp's to the bit, not only to rounding): fewer than 64
    /// queries run the one-row kernel (q rounded to f16, scores by an f16 dot product, online
    /// softmax with the value accumulator kept in f16); 64 or more run the tiled kernel
    /// (64 × 64 tiles, f32 accumulators, ggml's vectorised `exp`). See `kernels::attn`.
    /// When K or V is not F16, every query runs ggml's one-row kernel over all keys (no
    /// tiles, no key splits, as ggml): q is converted to K's dot-product type (Q8_0 or Q8_1
    /// with ggml's x86 rounding, F16 for F16 keys) and scored with K's dot product in
    /// ggml's order; quantized values are dequantized and accumulated in f32 (F16 values
    /// in the f16 accumulator). See `kernels::attn_quant`.
    pub fn flash_attn_ext(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Option<Tensor>,
        scale: f32,
    ) -> Result<Tensor> {
        self.flash_attn_ext_split(q, k, v, mask, scale, 1)
    }

    /// [`Context::flash_attn_ext`], with ggml's split-key path for decoding: when there is a
    /// single query per head (`n_q = 1`, `n3 = 1`) and at least 512 keys, ggml splits the
    /// keys into as many contiguous parts as it runs threads (`⌈n_kv / parts⌉` keys each),
    /// runs the one-row kernel on each and merges the parts (running maxima and sums
    /// rescaled, in part order). `kv_splits` is that part count: 2 reproduces a llama.cpp run
    /// on 2 threads bit for bit; 1 never splits. The result depends on `kv_splits` only,
    /// never on the thread count of the executor. Same shape contract; `kv_splits ≥ 1`.
    pub fn flash_attn_ext_split(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Option<Tensor>,
        scale: f32,
        kv_splits: usize,
    ) -> Result<Tensor> {
        self.flash_attn_ext_softcap(q, k, v, mask, scale, 0.0, kv_splits)
    }

    /// [`Context::flash_attn_ext_split`] with ggml's `logit_softcap`: each scaled key·query
    /// product `s` becomes `softcap · tanh(s / softcap)` before the mask is added (Gemma 2's
    /// attention soft-capping), computed as ggml's CPU kernel does (`scale / softcap` applied
    /// to the product, then `tanh`, then `· softcap`). `softcap` = 0: none; otherwise finite
    /// and positive.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_ext_softcap(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Option<Tensor>,
        scale: f32,
        softcap: f32,
        kv_splits: usize,
    ) -> Result<Tensor> {
        self.flash_attn_ext_sinks(q, k, v, mask, None, scale, softcap, kv_splits)
    }

    /// [`Context::flash_attn_ext_softcap`] with attention sinks (ggml's
    /// `flash_attn_ext_add_sinks`, gpt-oss): `sinks` (`[n_head]` f32, `n_head = q.ne[2]`) holds
    /// one logit per query head that joins the softmax's denominator and has no value, so
    /// each output row is `Σ_j e^(s_j − M)·v_j / (Σ_j e^(s_j − M) + e^(sink − M))` with `M`
    /// the largest of the scores and the sink. Computed as ggml's CPU kernel does: after the
    /// keys (on the split-key path, in the first part only), a sink above the running
    /// maximum rescales the accumulator and the sum by `exp(M − sink)` and adds 1 to the sum,
    /// otherwise `exp(sink − M)` is added to it. A query that sees no key gives zeros.
    /// `sinks` = `None` is [`Context::flash_attn_ext_softcap`].
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_ext_sinks(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Option<Tensor>,
        sinks: Option<Tensor>,
        scale: f32,
        softcap: f32,
        kv_splits: usize,
    ) -> Result<Tensor> {
        const OP: &str = "FLASH_ATTN_EXT";
        if !(softcap == 0.0 || softcap.is_finite() && softcap > 0.0) {
            return Err(Error::InvalidArgument {
                op: OP,
                detail: format!("softcap = {softcap} must be 0 (none) or finite and positive"),
            });
        }
        if kv_splits == 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                detail: "kv_splits must be at least 1 (1: never split the keys)".into(),
            });
        }
        let mq = self.expect_type(OP, "q", q, &[DType::F32])?;
        let (nq, q_dense) = (mq.ne, mq.rows_contiguous());
        let mk = self.expect_type(OP, "k", k, &FLASH_ATTN_KV_TYPES)?;
        let (nk, k_dense) = (mk.ne, mk.rows_contiguous());
        let mv = self.expect_type(OP, "v", v, &FLASH_ATTN_KV_TYPES)?;
        let (nv, v_dense) = (mv.ne, mv.rows_contiguous());
        for (t, dense) in [(q, q_dense), (k, k_dense), (v, v_dense)] {
            if !dense {
                return Err(Error::Layout {
                    op: OP,
                    name: self.display_name(t),
                    required: "row-contiguous",
                });
            }
        }
        if nk[0] != nq[0] || nk[2] == 0 || nq[2] % nk[2] != 0 || nk[3] == 0 || nq[3] % nk[3] != 0 {
            return Err(shape_err(
                OP,
                nq,
                nk,
                "k must be [q.ne[0], n_kv, h | q.ne[2], k3 | q.ne[3]]",
            ));
        }
        if nv[1] != nk[1] || nv[2] == 0 || nq[2] % nv[2] != 0 || nv[3] == 0 || nq[3] % nv[3] != 0 {
            return Err(shape_err(
                OP,
                nk,
                nv,
                "v must be [d_v, k.ne[1], h | q.ne[2], v3 | q.ne[3]]",
            ));
        }
        if !scale.is_finite() {
            return Err(Error::InvalidArgument {
                op: OP,
                detail: format!("scale = {scale} must be finite"),
            });
        }
        if let Some(mk) = mask {
            let m = self.expect_type(OP, "mask", mk, &[DType::F16, DType::F32])?;
            let (nm, m_dense) = (m.ne, m.rows_contiguous());
            if nm[0] != nk[1]
                || nm[1] < nq[1]
                || nm[2] == 0
                || nq[2] % nm[2] != 0
                || nm[3] == 0
                || nq[3] % nm[3] != 0
            {
                return Err(shape_err(
                    OP,
                    nq,
                    nm,
                    "mask must be [k.ne[1], ≥ q.ne[1], m2 | q.ne[2], m3 | q.ne[3]]",
                ));
            }
            if !m_dense {
                return Err(Error::Layout {
                    op: OP,
                    name: self.display_name(mk),
                    required: "row-contiguous",
                });
            }
        }
        if let Some(s) = sinks {
            self.check_sinks(OP, s, nq[2])?;
        }
        self.new_tensor_with(
            DType::F32,
            [nv[0], nq[2], nq[1], nq[3]],
            Op::FlashAttnExt {
                scale,
                softcap,
                kv_splits,
            },
            [Some(q), Some(k), Some(v), mask, sinks],
        )
    }

    /// Checks attention sinks for `n_head` heads: F32, `[n_head]`.
    fn check_sinks(&self, op: &'static str, sinks: Tensor, n_head: usize) -> Result<()> {
        let ns = self.expect_type(op, "sinks", sinks, &[DType::F32])?.ne;
        if ns != [n_head, 1, 1, 1] {
            return Err(shape_err(
                op,
                [n_head, 1, 1, 1],
                ns,
                "sinks must be [n_head]: one logit per head (axis 2 of the scores)",
            ));
        }
        Ok(())
    }

    /// [`Context::soft_max_ext`] with attention sinks (ggml's `soft_max_add_sinks`): `sinks`
    /// (`[a.ne[2]]` f32) holds one logit per plane (head) of `a` that joins the denominator
    /// of every row of that plane, as ggml's CPU kernel computes it: the row maximum is
    /// `max(max_j x_j, sink)`, the sum (in f64) gets `exp(sink − max)` after the row's
    /// terms. The rows then sum to less than 1.
    pub fn soft_max_ext_sinks(
        &mut self,
        a: Tensor,
        mask: Option<Tensor>,
        sinks: Tensor,
        scale: f32,
    ) -> Result<Tensor> {
        let na = self.expect_type("SOFT_MAX", "a", a, &[DType::F32])?.ne;
        self.check_sinks("SOFT_MAX", sinks, na[2])?;
        let t = self.soft_max_ext(a, mask, scale)?;
        self.meta_mut(t)?.src[2] = Some(sinks);
        Ok(t)
    }

    /// Plain softmax of each row (see [`Context::soft_max_ext`]).
    pub fn soft_max(&mut self, a: Tensor) -> Result<Tensor> {
        self.soft_max_ext(a, None, 1.0)
    }

    /// Rotary position embedding with base 10000 and no scaling; see [`Context::rope_ext`].
    pub fn rope(
        &mut self,
        a: Tensor,
        pos: Tensor,
        n_dims: usize,
        mode: RopeMode,
    ) -> Result<Tensor> {
        self.rope_ext(a, pos, RopeParams::new(n_dims, mode))
    }

    /// Rotary position embedding. a: `[head_dim, n_head, n_tokens, n3]` f32; pos:
    /// `[n_tokens]` i32 → same shape as a, f32. For token t at position p, dimension pair i
    /// (`i < n_dims/2`) turns by `θ = p · freq_scale · base^(−2i/n_dims)`:
    /// `(x0, x1) → (x0·cos θ − x1·sin θ, x0·sin θ + x1·cos θ)`, where `(x0, x1)` is
    /// `(x[2i], x[2i+1])` in [`RopeMode::Normal`] and `(x[i], x[i + n_dims/2])` in
    /// [`RopeMode::Neox`]. Dimensions from `n_dims` on are copied.
    pub fn rope_ext(&mut self, a: Tensor, pos: Tensor, p: RopeParams) -> Result<Tensor> {
        self.rope_ext_factors(a, pos, None, p)
    }

    /// [`Context::rope_ext`] with optional per-pair frequency factors (ggml's `rope_ext`
    /// with its `c` input; Llama 3.1's `rope_freqs.weight`): pair i turns by
    /// `θ = freq_scale · (p · base^(−2i/n_dims) / factors[i])` instead. `factors`:
    /// `[n_dims / 2]` f32, dense. `None` is [`Context::rope_ext`].
    pub fn rope_ext_factors(
        &mut self,
        a: Tensor,
        pos: Tensor,
        factors: Option<Tensor>,
        p: RopeParams,
    ) -> Result<Tensor> {
        let na = self.check_rope_operands(a, pos, factors, p)?;
        self.new_tensor_with(
            DType::F32,
            na,
            Op::Rope {
                n_dims: p.n_dims,
                mode: p.mode,
                freq_base: p.freq_base,
                freq_scale: p.freq_scale,
            },
            [Some(a), Some(pos), factors],
        )
    }

    /// Checks the operands of a rotary embedding ([`Context::rope_ext_factors`] and
    /// [`Context::rope_yarn`]) and returns the shape of `a`.
    pub(crate) fn check_rope_operands(
        &self,
        a: Tensor,
        pos: Tensor,
        factors: Option<Tensor>,
        p: RopeParams,
    ) -> Result<[usize; 4]> {
        let na = self.expect_type("ROPE", "a", a, &[DType::F32])?.ne;
        let np = self.expect_type("ROPE", "pos", pos, &[DType::I32])?.ne;
        if np[0] != na[2] || np[1] * np[2] * np[3] != 1 {
            return Err(shape_err(
                "ROPE",
                na,
                np,
                "pos must be [a.ne[2]] (one position per token)",
            ));
        }
        if p.n_dims == 0 || !p.n_dims.is_multiple_of(2) || p.n_dims > na[0] {
            return Err(Error::InvalidArgument {
                op: "ROPE",
                detail: format!(
                    "n_dims = {} must be even, positive and at most the head size {}",
                    p.n_dims, na[0]
                ),
            });
        }
        if p.freq_base.is_nan() || p.freq_base <= 0.0 || !p.freq_scale.is_finite() {
            return Err(Error::InvalidArgument {
                op: "ROPE",
                detail: format!(
                    "freq_base = {} must be > 0 and freq_scale = {} finite",
                    p.freq_base, p.freq_scale
                ),
            });
        }
        if let Some(f) = factors {
            let mf = self.expect_type("ROPE", "factors", f, &[DType::F32])?;
            let (nf, dense) = (mf.ne, mf.rows_contiguous());
            if nf != [p.n_dims / 2, 1, 1, 1] {
                return Err(shape_err(
                    "ROPE",
                    na,
                    nf,
                    "factors must be [n_dims / 2], one frequency factor per rotated pair",
                ));
            }
            if !dense {
                return Err(Error::Layout {
                    op: "ROPE",
                    name: self.display_name(f),
                    required: "contiguous",
                });
            }
        }
        Ok(na)
    }
}
