//! What the integration tests of ggrs-core share (one module, `common`, the name every crate's
//! tests use, for every test binary): seeded values and their encoding in any weight type
//! (here), and the op tests' harness, input layouts and reference arrays ([`cases`]).

#![allow(dead_code)] // each test binary uses its own part

mod cases;
#[allow(unused_imports)] // not every test binary runs op cases
pub use cases::*;

use ggrs_core::{quants, Context, DType, Executor, Graph};

/// `n` values in [-1, 1) from `seed` (xorshift; the same on every machine).
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0
        })
        .collect()
}

/// The generator of the C programs that wrote `data/ternary-ggml.txt` and
/// `data/lowbit-ggml.txt` (a 64-bit LCG; values in [−1, 1) from bits 40–63).
pub struct Lcg(pub u64);

impl Lcg {
    /// The next value, as the C `rnd()`.
    pub fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 40) & 0xFF_FFFF) as f32 / 16_777_216.0 * 2.0 - 1.0
    }
}

/// FNV-1a (64-bit) of `bytes`, as the C programs print it.
pub fn fnv(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The bytes of a hex string (two digits each).
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// splitmix64, for random bytes.
pub fn mix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Every form of build `v` — the 4 × 4 tile, four rows × one column, one row × four columns
/// and one element — gives `dot(n, w[r], y[c])`'s bits, given as `want[r][c]`.
pub fn assert_every_form(
    v: &quants::dispatch::VecDotVariant,
    n: usize,
    w: [&[u8]; 4],
    y: [&[u8]; 4],
    want: [[u32; 4]; 4],
    what: &str,
) {
    let tile = (v.tile)(n, w, y).map(|r| r.map(f32::to_bits));
    assert_eq!(tile, want, "{what} tile");
    let rows = (v.rows4)(n, w, y[1]).map(f32::to_bits);
    assert_eq!(rows, want.map(|r| r[1]), "{what} rows4");
    assert_eq!(
        (v.dot4)(n, w[2], y).map(f32::to_bits),
        want[2],
        "{what} dot4"
    );
    assert_eq!((v.dot)(n, w[3], y[0]).to_bits(), want[3][0], "{what} dot");
}

/// `x` stored as type `t` (converted for the float types, quantized for block types);
/// `x.len()` a whole number of `t`'s blocks.
pub fn encode(t: DType, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; t.row_size(x.len())];
    match t {
        DType::F32 => {
            for (o, v) in out.chunks_exact_mut(4).zip(x) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        DType::F16 => {
            for (o, v) in out.chunks_exact_mut(2).zip(x) {
                o.copy_from_slice(&half::f16::from_f32(*v).to_le_bytes());
            }
        }
        DType::BF16 => {
            for (o, v) in out.chunks_exact_mut(2).zip(x) {
                o.copy_from_slice(&half::bf16::from_f32(*v).to_le_bytes());
            }
        }
        _ => quants::quantize_row_dyn(t, x, &mut out).expect("whole blocks"),
    }
    out
}

/// `mul_mat(w, x)` for `w: [k, n]` of type `t` (bytes) and `x: [k, m]` f32, on `threads`
/// threads.
pub fn run_mul_mat(
    t: DType,
    w: &[u8],
    x: &[f32],
    k: usize,
    n: usize,
    m: usize,
    threads: usize,
) -> Vec<f32> {
    let mut ctx = Context::with_mem_size(16 << 20);
    let a = ctx.new_tensor(t, &[k, n]).expect("arena");
    let b = ctx.new_tensor(DType::F32, &[k, m]).expect("arena");
    ctx.set_bytes(a, w).expect("whole rows");
    ctx.set_f32(b, x).expect("k·m values");
    let out = ctx.mul_mat(a, b).expect("shapes agree");
    let g = Graph::build(&ctx, out).expect("one node");
    Executor::new(threads)
        .compute(&mut ctx, &g)
        .expect("computes");
    ctx.to_f32_vec(out).expect("f32 result")
}
