//! The operations a tensor can be the result of, with their parameters.

/// How `rope` pairs the dimensions it rotates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeMode {
    /// Adjacent pairs `(x[2i], x[2i+1])` (ggml mode 0; LLaMA as converted by llama.cpp).
    Normal,
    /// Halves: `x[i]` pairs with `x[i + n_dims/2]` (ggml mode 2; GPT-NeoX, Qwen2).
    Neox,
}

/// The op that produced a tensor, with its parameters (ggml's `op` + `op_params`).
///
/// Sources are stored on the tensor (`src[0]`, `src[1]`, …) in the order the builder
/// functions of [`Context`](crate::Context) take them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// A leaf: data set by the caller (inputs, weights).
    None,
    /// Contiguous copy of `src0` (same type).
    Dup,
    /// Copy of `src0` into `src1` (converting type); the result is a view of `src1`.
    Cpy,
    /// `src0 + src1`, `src1` broadcast.
    Add,
    /// `src0 - src1`, `src1` broadcast.
    Sub,
    /// `src0 * src1`, `src1` broadcast.
    Mul,
    /// `src0 / src1`, `src1` broadcast.
    Div,
    /// `src0 * s`.
    Scale {
        /// The factor.
        s: f32,
    },
    /// `x²`.
    Sqr,
    /// `√x`.
    Sqrt,
    /// `x·σ(x)`.
    Silu,
    /// GELU, tanh approximation.
    Gelu,
    /// `tanh(x)`.
    Tanh,
    /// `max(x, 0)`.
    Relu,
    /// Walsh–Hadamard transform of every run of `n` values along axis 0 (`n` a power of
    /// two dividing `ne[0]`): each run becomes `H·x / √n` with `H` the natural-order
    /// (Sylvester) Hadamard matrix, computed as ggml's CPU `fwht` does.
    Hadamard {
        /// Values per transform.
        n: usize,
    },
    /// `silu(a)·b`: halves of `src0`, or `src0` and `src1`.
    Swiglu,
    /// `gelu(a)·b` of `src0` and `src1`, GELU as ggml's CPU GeGLU computes it (see
    /// `Context::geglu_split`); without `src1`, `gelu(a)` (`Context::gelu_ggml`: b = 1).
    Geglu,
    /// gpt-oss's clamped SwiGLU of `src0` (gate) and `src1` (up):
    /// `x·σ(alpha·x)·(y + 1)` with `x = min(gate, limit)`, `y = clamp(up, −limit, limit)`
    /// (see `Context::swiglu_oai`).
    SwigluOai {
        /// Factor inside the sigmoid (1.702 for gpt-oss).
        alpha: f32,
        /// Clamp of the gate (from above) and of the up value (both sides).
        limit: f32,
    },
    /// `src0 + src1[:, src2[i1, i2]]`: each row of `src0` plus the row of `src1` its id in
    /// `src2` names (see `Context::add_id`).
    AddId,
    /// Sum of all elements.
    Sum,
    /// Sum of each row.
    SumRows,
    /// Mean of each row.
    Mean,
    /// Index of each row's largest value.
    Argmax,
    /// Indices of each row's `k` largest values, largest first.
    ArgsortTopK {
        /// How many indices per row.
        k: usize,
    },
    /// `src0` tiled to the shape of `src1`.
    Repeat,
    /// `src0` and `src1` joined along `dim`.
    Concat {
        /// The axis (0..4).
        dim: usize,
    },
    /// Layer normalisation of each row, without affine parameters.
    Norm {
        /// Added to the variance.
        eps: f32,
    },
    /// RMS normalisation of each row, without weight.
    RmsNorm {
        /// Added to the mean square.
        eps: f32,
    },
    /// RMS normalisation of each row of `src0`, times `src1` element-wise (fused).
    RmsNormMul {
        /// Added to the mean square.
        eps: f32,
    },
    /// Layer normalisation of each row of `src0`, times `src1` plus `src2` (if any),
    /// element-wise (fused; the bits of `Norm`, `Mul` and `Add` one after the other).
    NormMulAdd {
        /// Added to the variance.
        eps: f32,
    },
    /// Rows of `src0` picked by the indices in `src1`.
    GetRows,
    /// Rows of `src1` written into `src0` at the indices in `src2`; a view of `src0`.
    SetRows,
    /// Matrix product `src1 · src0ᵀ`.
    MulMat {
        /// Every column computed with a one-column product's arithmetic
        /// (`Context::set_per_column_products`).
        per_column: bool,
    },
    /// Matrix products with one of several stacked matrices `src0` per column of `src1`,
    /// chosen by the ids in `src2` (see `Context::mul_mat_id`).
    MulMatId,
    /// Entries above the causal diagonal set to −∞.
    DiagMaskInf {
        /// Positions already in the cache before the first row.
        n_past: usize,
    },
    /// `softmax(src0 · scale + src1)` along rows; `src1` (mask) optional; `src2` (optional):
    /// one sink logit per plane (head) that joins each row's denominator.
    SoftMax {
        /// Applied before the mask.
        scale: f32,
    },
    /// Fused attention `softmax(src1·src0 · scale + src3) · src2` (q, k, v, mask; `src4`:
    /// optional per-head sink logits joining the denominator), computed as ggml's CPU
    /// flash-attention kernel does (see `Context::flash_attn_ext`).
    FlashAttnExt {
        /// Applied to each key·query product before the mask.
        scale: f32,
        /// Soft-capping `c·tanh(s/c)` of the scaled products before the mask; 0: none.
        softcap: f32,
        /// Parts a single query's keys are split into when there are at least 512 of them
        /// (ggml's split-key decode path; 1: never split).
        kv_splits: usize,
    },
    /// Rotary position embedding with positions from `src1` and optional per-pair frequency
    /// factors from `src2` (see `Context::rope_ext_factors`).
    Rope {
        /// How many leading dimensions of each head are rotated.
        n_dims: usize,
        /// Pairing of rotated dimensions.
        mode: RopeMode,
        /// θ base (10000 for LLaMA).
        freq_base: f32,
        /// Position scale (1 for no scaling).
        freq_scale: f32,
    },
    /// Rotary embedding with YaRN's blend and a magnitude factor, positions from `src1`,
    /// optional per-pair frequency factors from `src2` (see `Context::rope_yarn`).
    RopeYarn {
        /// How many leading dimensions of each head are rotated.
        n_dims: usize,
        /// Pairing of rotated dimensions.
        mode: RopeMode,
        /// θ base.
        freq_base: f32,
        /// Position scale.
        freq_scale: f32,
        /// Share of the unscaled angle blended in over the correction range (0: none).
        ext_factor: f32,
        /// Factor of every cos and sin.
        attn_factor: f32,
        /// The correction range `[low, high]` in pairs.
        corr_dims: [f32; 2],
    },
    /// Rotary embedding of a section of each row, with positions from `src1` and the
    /// per-pair frequencies from `src2` (see `Context::rope_freqs`).
    RopeFreqs {
        /// First rotated dimension of each row.
        offset: usize,
        /// Pairing of rotated dimensions.
        mode: RopeMode,
    },
    /// The causal depthwise convolution of recurrent layers: `src0` the state and inputs
    /// `[d_conv − 1 + n_t, d_inner, n_s]`, `src1` the kernels `[d_conv, d_inner]` (see
    /// `Context::ssm_conv`).
    SsmConv,
    /// Mamba-2's selective scan: `src0` states, `src1` x, `src2` dt, `src3` A, `src4` B,
    /// `src5` C; the outputs followed by the new states (see `Context::ssm_scan`), or, with
    /// `in_place`, the outputs only, the new states written over the rows of `src0` that
    /// `src6` names (see `Context::ssm_scan_in_place`).
    SsmScan {
        /// Whether the states are updated where they lie (rows `src6` of `src0`).
        in_place: bool,
    },
    /// The gated delta rule of Qwen3.5 / Qwen3-Next: `src0` q, `src1` k, `src2` v, `src3`
    /// the log decays g, `src4` β, `src5` the states; the outputs followed by the new
    /// states (see `Context::gated_delta_net`), or, with `in_place`, the outputs only, the
    /// new states written over the rows of `src5` that `src6` names (see
    /// `Context::gated_delta_net_in_place`).
    GatedDeltaNet {
        /// Whether the states are updated where they lie (rows `src6` of `src5`).
        in_place: bool,
    },
    /// `1 / (1 + e^−x)` element-wise (the C library's `expf`).
    Sigmoid,
    /// `ln(1 + eˣ)` element-wise, `x` itself above 20 (ggml's softplus).
    Softplus,
    /// A view into `src0` at a byte offset (no data moved).
    View,
    /// `src0` with another shape (no data moved).
    Reshape,
    /// `src0` with its axes permuted (no data moved).
    Permute {
        /// `axes[i]` is where axis `i` of the source goes.
        axes: [usize; 4],
    },
    /// `src0` with axes 0 and 1 swapped (no data moved).
    Transpose,
}

impl Op {
    /// The op's name, as printed in graphs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Op::None => "NONE",
            Op::Dup => "DUP",
            Op::Cpy => "CPY",
            Op::Add => "ADD",
            Op::Sub => "SUB",
            Op::Mul => "MUL",
            Op::Div => "DIV",
            Op::Scale { .. } => "SCALE",
            Op::Sqr => "SQR",
            Op::Sqrt => "SQRT",
            Op::Silu => "SILU",
            Op::Gelu => "GELU",
            Op::Tanh => "TANH",
            Op::Relu => "RELU",
            Op::Hadamard { .. } => "HADAMARD",
            Op::Swiglu => "SWIGLU",
            Op::Geglu => "GEGLU",
            Op::SwigluOai { .. } => "SWIGLU_OAI",
            Op::AddId => "ADD_ID",
            Op::Sum => "SUM",
            Op::SumRows => "SUM_ROWS",
            Op::Mean => "MEAN",
            Op::Argmax => "ARGMAX",
            Op::ArgsortTopK { .. } => "ARGSORT_TOP_K",
            Op::Repeat => "REPEAT",
            Op::Concat { .. } => "CONCAT",
            Op::Norm { .. } => "NORM",
            Op::RmsNorm { .. } => "RMS_NORM",
            Op::RmsNormMul { .. } => "RMS_NORM_MUL",
            Op::NormMulAdd { .. } => "NORM_MUL_ADD",
            Op::GetRows => "GET_ROWS",
            Op::SetRows => "SET_ROWS",
            Op::MulMat { .. } => "MUL_MAT",
            Op::MulMatId => "MUL_MAT_ID",
            Op::DiagMaskInf { .. } => "DIAG_MASK_INF",
            Op::SoftMax { .. } => "SOFT_MAX",
            Op::FlashAttnExt { .. } => "FLASH_ATTN_EXT",
            Op::Rope { .. } => "ROPE",
            Op::RopeYarn { .. } => "ROPE_YARN",
            Op::RopeFreqs { .. } => "ROPE_FREQS",
            Op::SsmConv => "SSM_CONV",
            Op::SsmScan { .. } => "SSM_SCAN",
            Op::GatedDeltaNet { .. } => "GATED_DELTA_NET",
            Op::Sigmoid => "SIGMOID",
            Op::Softplus => "SOFTPLUS",
            Op::View => "VIEW",
            Op::Reshape => "RESHAPE",
            Op::Permute { .. } => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
        }
    }

    /// True for ops that only reinterpret their source's data (views): they cost nothing at
    /// compute time and need no barrier.
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose
        )
    }

    /// The parameters as `key=value` text, empty when the op has none.
    pub fn params_string(&self) -> String {
        match self {
            Op::Scale { s } => format!("s={s}"),
            Op::Hadamard { n } => format!("n={n}"),
            Op::Concat { dim } => format!("dim={dim}"),
            Op::ArgsortTopK { k } => format!("k={k}"),
            Op::Norm { eps }
            | Op::RmsNorm { eps }
            | Op::RmsNormMul { eps }
            | Op::NormMulAdd { eps } => {
                format!("eps={eps:e}")
            }
            Op::SwigluOai { alpha, limit } => format!("alpha={alpha} limit={limit}"),
            Op::DiagMaskInf { n_past } => format!("n_past={n_past}"),
            Op::SoftMax { scale } => format!("scale={scale}"),
            Op::FlashAttnExt {
                scale,
                softcap,
                kv_splits,
            } => format!("scale={scale} softcap={softcap} kv_splits={kv_splits}"),
            Op::Rope {
                n_dims,
                mode,
                freq_base,
                freq_scale,
            } => format!("n_dims={n_dims} mode={mode:?} base={freq_base} scale={freq_scale}"),
            Op::RopeYarn {
                n_dims,
                mode,
                freq_base,
                freq_scale,
                ext_factor,
                attn_factor,
                corr_dims,
            } => format!(
                "n_dims={n_dims} mode={mode:?} base={freq_base} scale={freq_scale} \
                 ext={ext_factor} attn={attn_factor} corr={corr_dims:?}"
            ),
            Op::RopeFreqs { offset, mode } => format!("offset={offset} mode={mode:?}"),
            Op::Permute { axes } => format!("axes={axes:?}"),
            _ => String::new(),
        }
    }
}
