//! AVX-VNNI builds (AVX2 with the VEX-encoded `vpdpbusd`: Intel's client CPUs since Alder
//! Lake, Sierra Forest) of the 32-value dot-product kernels of `avx2.rs`, chosen where
//! [`crate::cpu::isa`] is exactly [`crate::cpu::Isa::Avx2Vnni`].
//!
//! Each kernel is the shared loop of its AVX2 build (`avx2::blocks_lanes`,
//! `avx2::blocks_min`) with [`DpbusdVex`] for the integer part instead of `vpmaddubsw` then
//! `vpmaddwd` by ones: four products straight into each 32-bit lane, the offset's
//! correction as the seed. The lane sums are the same exact integers and the f32 work is
//! the AVX2 build's (ggml's x86 orders), so every build gives the same bits:
//!
//! - Q4_0, Q5_0 (ggml's lanes; Q4_0 also its repacked chain): the AVX2 builds' operands;
//! - Q8_0: the offset trick `Σ x·y = Σ x·(y + 128) − 128·Σ x` (or its activation-side
//!   twin), exact for any codes, −128 included, as the AVX-512 VNNI build does: no 16-bit
//!   widening, no `vpsignb`;
//! - Q4_1, Q5_1 × Q8_1: the unsigned codes against the signed activations, no correction;
//! - IQ4_NL: the levels plus 128 (unsigned, at most 241) against the activations, the
//!   correction `−128·Σ y` (or the weight-side form); the AVX2 build widens both to 16 bits.
//!
//! Every kernel has the form `k::<R, C>(nb, [x; R], [y; C]) -> [[f32; C]; R]` (see
//! `kernels/x86/mod.rs`).
//!
//! # Safety
//! Each kernel needs a CPU with AVX2, FMA, F16C and AVX-VNNI, and `nb` whole blocks
//! readable at every `x[r]` and every `y[c]`.

use std::arch::x86_64::*;

use super::avx2::{
    blocks_lanes, blocks_min, BiasedDot, BlockChain, IQ4NLBlock, Lanes8, Q4_0Block, Q4_1Block,
    Q5_0Block, Q5_1Block, Q8_0Block,
};

/// AVX-VNNI on 256 bits: `vpdpbusd` (VEX) takes the unsigned operand and the signed one
/// directly, seeded with the negated correction; exact for any codes.
pub(super) struct DpbusdVex;

impl BiasedDot for DpbusdVex {
    #[inline(always)]
    unsafe fn weight_prepare(xs: __m256i) -> __m256i {
        // SAFETY: only inlined into kernels built with (and run on CPUs with) AVX-VNNI.
        unsafe {
            let zero = _mm256_setzero_si256();
            _mm256_sub_epi32(
                zero,
                _mm256_dpbusd_avx_epi32(zero, _mm256_set1_epi8(-128), xs),
            )
        }
    }

    #[inline(always)]
    unsafe fn weight_lanes(prep: __m256i, xs: __m256i, v: __m256i) -> __m256i {
        // SAFETY: as `weight_prepare`.
        unsafe { _mm256_dpbusd_avx_epi32(prep, v, xs) }
    }

    #[inline(always)]
    unsafe fn act_prepare(off: __m256i, y: __m256i) -> __m256i {
        // SAFETY: as `weight_prepare`.
        unsafe {
            let zero = _mm256_setzero_si256();
            _mm256_sub_epi32(zero, _mm256_dpbusd_avx_epi32(zero, off, y))
        }
    }

    #[inline(always)]
    unsafe fn act_lanes(prep: __m256i, u: __m256i, y: __m256i) -> __m256i {
        // SAFETY: as `weight_prepare`.
        unsafe { _mm256_dpbusd_avx_epi32(prep, u, y) }
    }
}

/// Defines an AVX-VNNI kernel: the shared loop `$body` with [`DpbusdVex`].
macro_rules! vex_build {
    ($(#[$doc:meta])* $name:ident, $body:ident :: <$X:ty $(, $A:ty)?>) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// See the module docs.
        #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
        pub(crate) unsafe fn $name<const R: usize, const C: usize>(
            nb: usize,
            x: [*const u8; R],
            y: [*const u8; C],
        ) -> [[f32; C]; R] {
            // SAFETY: forwarded from the caller.
            unsafe { $body::<$X, DpbusdVex, $($A,)? R, C>(nb, x, y) }
        }
    };
}

vex_build!(
    /// Q4_0 × Q8_0 (AVX-VNNI), in ggml's lane order.
    q4_0_q8_0,
    blocks_lanes::<Q4_0Block, Lanes8>
);
vex_build!(
    /// Q4_0 × Q8_0 (AVX-VNNI), in ggml's repacked-Q4_0 order.
    q4_0_q8_0_chain,
    blocks_lanes::<Q4_0Block, BlockChain>
);
vex_build!(
    /// Q5_0 × Q8_0 (AVX-VNNI), in ggml's lane order.
    q5_0_q8_0,
    blocks_lanes::<Q5_0Block, Lanes8>
);
vex_build!(
    /// Q8_0 × Q8_0 (AVX-VNNI), in ggml's lane order.
    q8_0_q8_0,
    blocks_lanes::<Q8_0Block, Lanes8>
);
vex_build!(
    /// IQ4_NL × Q8_0 (AVX-VNNI), in the order of tinyBLAS and ggml's x86 lane kernels.
    iq4_nl_q8_0,
    blocks_lanes::<IQ4NLBlock, Lanes8>
);
vex_build!(
    /// IQ4_NL × Q8_0 (AVX-VNNI), in the order of ggml's repacked `iq4_nl_8x8` kernels.
    iq4_nl_q8_0_chain,
    blocks_lanes::<IQ4NLBlock, BlockChain>
);
vex_build!(
    /// Q4_1 × Q8_1 (AVX-VNNI), in ggml's x86 order.
    q4_1_q8_1,
    blocks_min::<Q4_1Block>
);
vex_build!(
    /// Q5_1 × Q8_1 (AVX-VNNI), in ggml's x86 order.
    q5_1_q8_1,
    blocks_min::<Q5_1Block>
);

#[cfg(test)]
mod tests {
    use crate::cpu::Isa;
    use crate::dtype::DType;
    use crate::quants::dispatch::{vec_dot_variants_in, SumOrder};

    use crate::kernels::test_rng as rng;

    /// Bytes before the codes of a block of `t` (its f16 scale, and minimum or sum).
    fn header(t: DType) -> usize {
        match t {
            DType::Q4_1 | DType::Q5_1 | DType::Q8_1 => 4,
            _ => 2,
        }
    }

    /// `nb` blocks of `t` with finite f16 scales (and minimums, sums) and codes by
    /// `pattern`: random bytes (0), every code byte `fill` (Some), or bytes drawn from the
    /// extreme ones (all bits clear or set, half-set bytes and their opposites).
    fn blocks(t: DType, nb: usize, fill: Option<u8>, extreme: bool, seed: &mut u64) -> Vec<u8> {
        let (bytes, hdr) = (t.type_size(), header(t));
        let mut out = vec![0u8; nb * bytes];
        for blk in out.chunks_exact_mut(bytes) {
            for b in blk[hdr..].iter_mut() {
                *b = match fill {
                    Some(f) => f,
                    None if extreme => [0x00, 0xFF, 0x80, 0x7F, 0x0F, 0xF0][rng(seed) as usize % 6],
                    None => rng(seed) as u8,
                };
            }
            for at in (0..hdr).step_by(2) {
                let h = half::f16::from_f32((rng(seed) % 2000) as f32 / 1000.0 - 1.0);
                blk[at..at + 2].copy_from_slice(&h.to_le_bytes());
            }
        }
        out
    }

    /// Every AVX-VNNI build of the 32-value dot products (where this CPU runs them) gives
    /// the bits of the portable ggml-order kernel it replaces and of the AVX2 build, in
    /// every form (one element, 1 × 4, 4 × 1, 4 × 4), on random blocks and on extreme ones:
    /// the largest codes, the smallest (Q8_0's −128 among them), all against activations
    /// −128 or 127, and random mixes of extreme bytes on both sides.
    #[test]
    fn avx_vnni_builds_are_bit_identical() {
        if !crate::cpu::features().runs(Isa::Avx2Vnni) {
            return;
        }
        let mut seed = 29u64;
        let cases = [
            (DType::Q4_0, SumOrder::GgmlLanes, 7),
            (DType::Q4_0, SumOrder::GgmlBlockChain, 8),
            (DType::Q5_0, SumOrder::GgmlLanes, 7),
            (DType::Q8_0, SumOrder::GgmlLanes, 7),
            (DType::Q4_1, SumOrder::GgmlLanes, 7),
            (DType::Q5_1, SumOrder::GgmlLanes, 7),
            (DType::IQ4NL, SumOrder::GgmlLanes, 7),
            (DType::IQ4NL, SumOrder::GgmlBlockChain, 8),
        ];
        for (t, order, rows) in cases {
            let builds = vec_dot_variants_in(t, order);
            let vnni = builds
                .iter()
                .find(|v| v.isa == Isa::Avx2Vnni)
                .unwrap_or_else(|| panic!("{t} {order:?}: no AVX-VNNI build"));
            let avx2 = builds
                .iter()
                .find(|v| v.isa == Isa::Avx2)
                .unwrap_or_else(|| panic!("{t} {order:?}: no AVX2 build"));
            let vt = crate::quants::vec_dot_type(t).expect("a block type");
            // Q8_0's extreme codes are −128 and 127; the nibble types' 0 and 15 (31).
            let (max, min) = if t == DType::Q8_0 {
                (0x7F, 0x80)
            } else {
                (0xFF, 0x00)
            };
            let patterns: [(Option<u8>, Option<u8>, bool); 6] = [
                (None, None, false),
                (Some(max), Some(0x80), false),
                (Some(min), Some(0x80), false),
                (Some(max), Some(0x7F), false),
                (Some(min), Some(0x7F), false),
                (None, None, true),
            ];
            for nb in [1usize, 2, 5, 9] {
                let k = nb * 32;
                let oracle = crate::kernels::ggml_arith::mul_mat_dot(t, [k, rows, 1, 1], 4)
                    .expect("a ggml-order kernel");
                for (wf, yf, extreme) in patterns {
                    let w = blocks(t, 4 * nb, wf, extreme, &mut seed);
                    let y = blocks(vt, 4 * nb, yf, extreme, &mut seed);
                    let (rs, ys) = (t.row_size(k), vt.row_size(k));
                    let wr: [&[u8]; 4] = std::array::from_fn(|r| &w[r * rs..(r + 1) * rs]);
                    let yr: [&[u8]; 4] = std::array::from_fn(|c| &y[c * ys..(c + 1) * ys]);
                    let tile = (vnni.tile)(k, wr, yr);
                    let tile2 = (avx2.tile)(k, wr, yr);
                    for r in 0..4 {
                        let four = (vnni.dot4)(k, wr[r], yr);
                        for c in 0..4 {
                            let want = oracle(k, wr[r], yr[c]).to_bits();
                            let what = format!("{t} {order:?} nb={nb} {wf:?}/{yf:?} ({r}, {c})");
                            assert_eq!(tile[r][c].to_bits(), want, "{what}: tile");
                            assert_eq!(tile2[r][c].to_bits(), want, "{what}: AVX2 tile");
                            assert_eq!(four[c].to_bits(), want, "{what}: 1 × 4");
                            let one = (vnni.dot)(k, wr[r], yr[c]);
                            assert_eq!(one.to_bits(), want, "{what}: one");
                        }
                    }
                    for (c, yc) in yr.iter().enumerate() {
                        let col = (vnni.rows4)(k, wr, yc);
                        for (r, got) in col.iter().enumerate() {
                            let want = oracle(k, wr[r], yc).to_bits();
                            assert_eq!(got.to_bits(), want, "{t} {order:?} 4 × 1 ({r}, {c})");
                        }
                    }
                }
            }
        }
    }
}
