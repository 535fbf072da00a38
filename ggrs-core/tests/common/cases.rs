//! Helpers shared by the op tests (`ops*.rs`, `flash_attn.rs`, `context.rs`): deterministic random data, inputs in several
//! memory layouts together with their logical values, plain reference arrays, the NMSE
//! measure, and a harness that runs one case on 1, 2, 3 and 4 threads.
//!
//! Nothing here calls a library kernel to compute an expected value: references are built
//! from the same `Vec<f32>` the inputs were filled from, with index loops over logical
//! coordinates (`ne[0]` fastest, as ggml orders them).

use ggrs_core::{Context, DType, Error, Executor, Graph, Op, Result, Tensor};

/// Thread counts every case runs with; results must agree bit for bit.
pub const THREADS: [usize; 4] = [1, 2, 3, 4];

/// NMSE bound for paths that only involve f32 data.
pub const TOL_F32: f64 = 1e-7;

/// NMSE bound where f16 data is involved (inputs, outputs or mul_mat's f16 activations).
/// f16 keeps p = 11 significant bits. Rounding to nearest leaves an absolute error uniform
/// in ±½ ulp, so for mantissas spread over [1, 2) the relative error δ has
/// E[δ²] = 2^(2−2p)/12 · E[1/m²] = 2^(−2p)/6 ≈ 4e-8 per rounded operand; a sum of products
/// whose operands carry independent errors has an NMSE of about that too. 1e-5 leaves room
/// for several roundings in a row and still fails on any wrong index or formula (NMSE ≳ 1e-3).
pub const TOL_F16: f64 = 1e-5;

/// NMSE bound where bf16 data is involved. bf16 keeps p = 8 significant bits, so by the
/// same reasoning as [`TOL_F16`] one rounding costs E[δ²] = 2^(−16)/6 ≈ 2.5e-6 (up to
/// (2^-8)²/3 ≈ 5e-6 for mantissas near 1). mul_mat with a bf16 weight rounds its f32
/// activations to bf16, as ggml does, and the f32 reference does not: over this suite's
/// shapes that gives NMSEs up to 4.9e-6 (k = 257, only 15 outputs, so little averaging) —
/// too close to 1e-5 for a bound. 4e-5 is about 8× the worst measured figure and still four
/// orders of magnitude below what a wrong index, row or broadcast gives (NMSE ≳ 0.1).
pub const TOL_BF16: f64 = 4e-5;

/// Arena size of a test context unless a case asks for more.
pub const DEFAULT_MEM: usize = 8 << 20;

// -------------------------------------------------------------------------------------------
// Random numbers
// -------------------------------------------------------------------------------------------

/// SplitMix64: small, deterministic, good enough for test data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator seeded from a text (FNV-1a of its bytes), so each case has its own data.
    pub fn from_name(name: &str) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Rng(h)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    /// Uniform integer in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// A random permutation of `0..n` (Fisher–Yates).
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.below(i + 1);
            p.swap(i, j);
        }
        p
    }
}

// -------------------------------------------------------------------------------------------
// Reference arrays
// -------------------------------------------------------------------------------------------

/// The value `x` takes once stored as `dtype` (F32, F16, BF16), via the `half` crate.
pub fn round_to(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::F16 => half::f16::from_f32(x).to_f32(),
        DType::BF16 => half::bf16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// Number of elements of a shape.
pub fn nelem(ne: [usize; 4]) -> usize {
    ne.iter().product()
}

/// Position of logical index `i` in a dense array of shape `ne` (`ne[0]` fastest).
pub fn flat(ne: [usize; 4], i: [usize; 4]) -> usize {
    i[0] + ne[0] * (i[1] + ne[1] * (i[2] + ne[2] * i[3]))
}

/// Every logical index of shape `ne`, in order (`ne[0]` fastest).
pub fn indices(ne: [usize; 4]) -> impl Iterator<Item = [usize; 4]> {
    (0..nelem(ne)).map(move |k| {
        let i0 = k % ne[0];
        let i1 = (k / ne[0]) % ne[1];
        let i2 = (k / (ne[0] * ne[1])) % ne[2];
        let i3 = k / (ne[0] * ne[1] * ne[2]);
        [i0, i1, i2, i3]
    })
}

/// A dense array of f32 values with a shape, in logical order: the form of every expected
/// result and of every input's logical values.
#[derive(Debug, Clone, PartialEq)]
pub struct Arr {
    /// Shape (`ne[0]` innermost).
    pub ne: [usize; 4],
    /// Values, `ne[0]` fastest.
    pub v: Vec<f32>,
}

impl Arr {
    /// An array of zeros.
    pub fn zeros(ne: [usize; 4]) -> Arr {
        Arr {
            ne,
            v: vec![0.0; nelem(ne)],
        }
    }

    /// Wraps values (checks the length).
    pub fn from_vec(ne: [usize; 4], v: Vec<f32>) -> Arr {
        assert_eq!(v.len(), nelem(ne), "values do not fit shape {ne:?}");
        Arr { ne, v }
    }

    /// The value at logical index `i`.
    pub fn at(&self, i: [usize; 4]) -> f32 {
        for d in 0..4 {
            assert!(i[d] < self.ne[d], "index {i:?} outside {:?}", self.ne);
        }
        self.v[flat(self.ne, i)]
    }

    /// Sets the value at logical index `i`.
    pub fn set(&mut self, i: [usize; 4], x: f32) {
        for d in 0..4 {
            assert!(i[d] < self.ne[d], "index {i:?} outside {:?}", self.ne);
        }
        let k = flat(self.ne, i);
        self.v[k] = x;
    }

    /// An array of shape `ne` whose element `i` is `f(i)`.
    pub fn build(ne: [usize; 4], mut f: impl FnMut([usize; 4]) -> f32) -> Arr {
        Arr {
            ne,
            v: indices(ne).map(&mut f).collect(),
        }
    }
}

// -------------------------------------------------------------------------------------------
// Inputs in several layouts
// -------------------------------------------------------------------------------------------

/// How an input tensor is laid out in memory. Its logical shape is always the one asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A dense tensor.
    Contig,
    /// `permute(base, axes)` of a dense base of the permuted shape (a strided view).
    Permuted([usize; 4]),
    /// `transpose(base)` of a dense base with axes 0 and 1 swapped.
    Transposed,
    /// A strided view into a larger dense base: rows padded by 3 elements, one spare row
    /// before, and an offset of 2 elements into each row. Rows are dense, planes are not.
    Padded,
}

impl Layout {
    /// A short label for messages.
    pub fn label(self) -> String {
        match self {
            Layout::Contig => "contig".into(),
            Layout::Permuted(a) => format!("perm{a:?}"),
            Layout::Transposed => "transposed".into(),
            Layout::Padded => "padded".into(),
        }
    }
}

/// Makes a dense leaf of `dtype` and shape `ne`, fills it from `vals` (logical order) and
/// returns it with the values as stored (rounded to `dtype`).
pub fn leaf(
    ctx: &mut Context,
    dtype: DType,
    ne: [usize; 4],
    vals: &[f32],
) -> Result<(Tensor, Arr)> {
    let t = ctx.new_tensor(dtype, &ne)?;
    ctx.set_f32(t, vals)?;
    let stored: Vec<f32> = vals.iter().map(|&x| round_to(dtype, x)).collect();
    Ok((t, Arr::from_vec(ne, stored)))
}

/// An input of logical shape `ne` and type `dtype` in `layout`, filled with values uniform in
/// `[lo, hi)`. Returns the tensor (a view for every layout but `Contig`) and its logical
/// values, worked out here from the base tensor's values and the layout's index map.
pub fn input(
    ctx: &mut Context,
    rng: &mut Rng,
    dtype: DType,
    ne: [usize; 4],
    layout: Layout,
    lo: f32,
    hi: f32,
) -> Result<(Tensor, Arr)> {
    match layout {
        Layout::Contig => {
            let vals = rng.vec(nelem(ne), lo, hi);
            leaf(ctx, dtype, ne, &vals)
        }
        Layout::Permuted(axes) => {
            // permute moves axis i of the base to axis axes[i] of the view, so the base has
            // ne_base[i] = ne[axes[i]] and view index r reads base index b[i] = r[axes[i]].
            let ne_base = [ne[axes[0]], ne[axes[1]], ne[axes[2]], ne[axes[3]]];
            let vals = rng.vec(nelem(ne_base), lo, hi);
            let (base, b) = leaf(ctx, dtype, ne_base, &vals)?;
            let t = ctx.permute(base, axes)?;
            let want = Arr::build(ne, |r| {
                b.at([r[axes[0]], r[axes[1]], r[axes[2]], r[axes[3]]])
            });
            Ok((t, want))
        }
        Layout::Transposed => {
            let ne_base = [ne[1], ne[0], ne[2], ne[3]];
            let vals = rng.vec(nelem(ne_base), lo, hi);
            let (base, b) = leaf(ctx, dtype, ne_base, &vals)?;
            let t = ctx.transpose(base)?;
            let want = Arr::build(ne, |r| b.at([r[1], r[0], r[2], r[3]]));
            Ok((t, want))
        }
        Layout::Padded => {
            let ne_base = [ne[0] + 3, ne[1] + 1, ne[2], ne[3]];
            let vals = rng.vec(nelem(ne_base), lo, hi);
            let (base, b) = leaf(ctx, dtype, ne_base, &vals)?;
            let ts = dtype.type_size();
            let nb1 = ne_base[0] * ts;
            let nb2 = nb1 * ne_base[1];
            let nb3 = nb2 * ne_base[2];
            let t = ctx.view_4d(base, ne, nb1, nb2, nb3, nb1 + 2 * ts)?;
            let want = Arr::build(ne, |r| b.at([r[0] + 2, r[1] + 1, r[2], r[3]]));
            Ok((t, want))
        }
    }
}

/// An i32 leaf of shape `ne` holding `vals`.
pub fn ids_leaf(ctx: &mut Context, ne: [usize; 4], vals: &[i32]) -> Result<Tensor> {
    let t = ctx.new_tensor(DType::I32, &ne)?;
    ctx.set_i32(t, vals)?;
    Ok(t)
}

// -------------------------------------------------------------------------------------------
// Comparison
// -------------------------------------------------------------------------------------------

/// Normalised mean squared error `Σ(out − ref)² / Σ ref²`, in f64. Infinite reference
/// values must be matched exactly (same sign) and are left out of the sums; any NaN, or an
/// infinity where the reference is finite, gives +∞. An all-zero reference gives the plain
/// squared error.
pub fn nmse(out: &[f32], want: &[f32]) -> f64 {
    assert_eq!(out.len(), want.len(), "length mismatch");
    let (mut num, mut den) = (0f64, 0f64);
    for (&o, &w) in out.iter().zip(want) {
        if w.is_infinite() {
            if o != w {
                return f64::INFINITY;
            }
            continue;
        }
        if !o.is_finite() || w.is_nan() {
            return f64::INFINITY;
        }
        let d = o as f64 - w as f64;
        num += d * d;
        den += w as f64 * w as f64;
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Fails with a readable message unless `nmse(out, want) ≤ tol`; shows the worst element.
pub fn assert_nmse(name: &str, out: &[f32], want: &Arr, tol: f64) {
    let e = nmse(out, &want.v);
    if e <= tol {
        return;
    }
    let mut worst = (0usize, -1f64);
    for (k, (&o, &w)) in out.iter().zip(&want.v).enumerate() {
        let d = if o == w {
            0.0
        } else if o.is_finite() && w.is_finite() {
            (o as f64 - w as f64).abs()
        } else {
            f64::INFINITY
        };
        if d > worst.1 {
            worst = (k, d);
        }
    }
    let idx = indices(want.ne).nth(worst.0).unwrap_or([0; 4]);
    panic!(
        "{name}: NMSE {e:e} > {tol:e}; worst element {idx:?}: got {}, want {} (shape {:?})",
        out[worst.0], want.v[worst.0], want.ne
    );
}

// -------------------------------------------------------------------------------------------
// The harness
// -------------------------------------------------------------------------------------------

/// What a case's builder returns.
pub struct Built {
    /// Tensors to expand into the graph, in order.
    pub expand: Vec<Tensor>,
    /// The tensor read after the computation.
    pub read: Tensor,
    /// Its expected logical values.
    pub want: Arr,
}

impl Built {
    /// The usual case: compute `out`, compare it with `want`.
    pub fn new(out: Tensor, want: Arr) -> Built {
        Built {
            expand: vec![out],
            read: out,
            want,
        }
    }
}

/// Runs one case on 1, 2, 3 and 4 threads and checks it.
///
/// For each thread count, `build` makes its inputs and graph in a fresh context of `mem`
/// bytes, with a generator seeded from `name` (so every run sees the same data). Every node
/// output that owns its data is filled with NaN bytes before the computation, so an element
/// that no thread writes cannot pass. The result read back must have the expected shape,
/// be within `tol` NMSE of the reference on one thread, and be bit-identical on every other
/// thread count. Returns the one-thread values. With `GGRS_TEST_VERBOSE` set, prints each
/// case's NMSE (run with `--nocapture`).
pub fn run_case_mem(
    name: &str,
    tol: f64,
    mem: usize,
    build: impl Fn(&mut Context, &mut Rng) -> Result<Built>,
) -> Vec<f32> {
    let mut first: Option<Vec<f32>> = None;
    for n in THREADS {
        let mut ctx = Context::with_mem_size(mem);
        let mut rng = Rng::from_name(name);
        let b = build(&mut ctx, &mut rng).unwrap_or_else(|e| panic!("{name}: build failed: {e}"));
        let mut g = Graph::new();
        for &t in &b.expand {
            g.build_forward_expand(&ctx, t)
                .unwrap_or_else(|e| panic!("{name}: graph: {e}"));
        }
        poison_outputs(&mut ctx, &g);
        Executor::new(n)
            .compute(&mut ctx, &g)
            .unwrap_or_else(|e| panic!("{name} ({n} threads): compute failed: {e}"));
        let shape = ctx
            .shape(b.read)
            .expect("the read tensor is in the context");
        assert_eq!(shape, b.want.ne, "{name}: result shape");
        let got = ctx
            .to_f32_vec(b.read)
            .unwrap_or_else(|e| panic!("{name}: read: {e}"));
        match &first {
            None => {
                if std::env::var_os("GGRS_TEST_VERBOSE").is_some() {
                    eprintln!("{name}: NMSE {:e} (bound {tol:e})", nmse(&got, &b.want.v));
                }
                assert_nmse(&format!("{name} (1 thread)"), &got, &b.want, tol);
                first = Some(got);
            }
            Some(f) => assert_same_bits(name, n, f, &got),
        }
    }
    first.expect("THREADS is not empty")
}

/// [`run_case_mem`] with the default arena size.
pub fn run_case(
    name: &str,
    tol: f64,
    build: impl Fn(&mut Context, &mut Rng) -> Result<Built>,
) -> Vec<f32> {
    run_case_mem(name, tol, DEFAULT_MEM, build)
}

/// Fails unless `got` (computed on `n` threads) has the bits of `first` (one thread).
pub fn assert_same_bits(name: &str, n: usize, first: &[f32], got: &[f32]) {
    assert_eq!(
        first.len(),
        got.len(),
        "{name}: length differs on {n} threads"
    );
    if let Some(k) = (0..got.len()).find(|&k| got[k].to_bits() != first[k].to_bits()) {
        panic!(
            "{name}: element {k} differs between 1 thread ({}) and {n} threads ({})",
            first[k], got[k]
        );
    }
}

/// Fills the data of every graph node that owns its data (not views, not `cpy`/`set_rows`,
/// which write into their destination) with 0xFF bytes: NaN for floats, −1 for i32.
pub fn poison_outputs(ctx: &mut Context, g: &Graph) {
    for &t in g.nodes() {
        let m = ctx.meta(t).expect("graph tensors are valid");
        if m.view_src.is_none() && m.op != Op::None {
            if let Ok(bytes) = ctx.data_mut(t) {
                bytes.fill(0xFF);
            }
        }
    }
}

/// Unwraps an error out of a result that must have failed.
pub fn expect_err<T: std::fmt::Debug>(what: &str, r: Result<T>) -> Error {
    match r {
        Ok(v) => panic!("{what}: expected an error, got {v:?}"),
        Err(e) => e,
    }
}
