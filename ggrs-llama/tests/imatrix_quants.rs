//! Importance-weighted quantization (`llama-quantize --imatrix`) against llama.cpp's bytes:
//! six seeded rows of 512 values (ordinary, tiny, with outliers, with an all-zero stretch,
//! one-signed, two-valued) and 512 seeded weights (a few of them zero), quantized per type
//! with `ggrs_core::quants::quantize_row_weighted_dyn`. The expected sha256 are those of
//! `ggml_quantize_chunk(type, x, dst, 0, 6, 512, weights)` of llama.cpp 0c1e570's
//! libggml-base, fed the same numbers by a small C program (same generator).

use ggrs_core::quants::{quantize_row_dyn, quantize_row_weighted_dyn};
use ggrs_core::DType;
use sha2::{Digest, Sha256};

const N: usize = 512;
const NROW: usize = 6;

/// The C program's generator: a 32-bit LCG, 24 high bits as a fraction in [0, 1).
struct Lcg(u32);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (self.0 >> 8) as f32 / 16_777_216.0
    }
}

fn inputs() -> (Vec<f32>, Vec<f32>) {
    rows_and_weights(NROW)
}

/// `nrow` seeded rows (the kinds below by index) and then the weights, as the C programs
/// generate them.
fn rows_and_weights(nrow: usize) -> (Vec<f32>, Vec<f32>) {
    let mut g = Lcg(12345);
    let mut x = vec![0f32; N * nrow];
    for r in 0..nrow {
        for j in 0..N {
            let mut v = 2.0 * g.next() - 1.0;
            match r {
                1 => v *= 0.001,
                2 if j % 97 == 0 => v *= 40.0,
                3 if (256..320).contains(&j) => v = 0.0,
                4 => v = if v > 0.0 { v } else { 0.0 },
                5 => v = if j % 2 == 1 { 0.5 } else { -0.25 },
                6 if j < 256 => v = 0.0,
                7 => v *= 1.0e4,
                8 => v = if v < 0.0 { v } else { -v },
                9 => v *= 1.0e-9,
                _ => {}
            }
            x[r * N + j] = v;
        }
    }
    let w = (0..N)
        .map(|j| {
            let u = g.next();
            if j % 61 == 0 {
                0.0
            } else {
                u * u * 8.0 + 1e-4
            }
        })
        .collect();
    (x, w)
}

#[test]
fn weighted_quantizers_match_ggml() {
    let expected = [
        (
            DType::Q4_0,
            "7cb7fd0c28d14d7136db92aba3b3b696f9b9d7b2187f9d2a5849cddff017da2a",
        ),
        (
            DType::Q4_1,
            "91886ebf43030f01da086a332d33cade1784e7f9bda3a983860cc62d2f18e479",
        ),
        (
            DType::Q5_0,
            "cf8ab2142b179d151d0cb10ca7073648780c1a9c7b582750ac2e21e11f037a58",
        ),
        (
            DType::Q5_1,
            "31b1ca05f5a39eb3fb532bb97be25429c9003a0124c4f5fcab3db089424b5bf0",
        ),
        (
            DType::Q8_0,
            "a4cea822acc022c51e2728e595ad22e619a39f48e0cda87cd64da6e8a4be6170",
        ),
        (
            DType::Q2K,
            "dc314c5ff45582addc97839cd3e219007e67d8428141f65aa6277b7d3d0c3092",
        ),
        (
            DType::Q3K,
            "aa39b04a9505ab5f2dc7c71d72e567cfc8ff264b723a7b47f07bbf7762eb8c57",
        ),
        (
            DType::Q4K,
            "39b248b7ece35dd1cd5fdc6c5b2e5991b795762e248b168301095500a422d615",
        ),
        (
            DType::Q5K,
            "865064d310379ebc6278011243dfc992c651d2fccb5d23214c227b9db556c9ca",
        ),
        (
            DType::Q6K,
            "3d323328f78b3ed15bc52b5ac6b70cf2ad1f2257f45b59a99a776cd1a0f09ccb",
        ),
        (
            DType::IQ4NL,
            "5704bbe64e690223e6060475ae2647d6680d13cb7aafafa64da4163d2d67e1b0",
        ),
        (
            DType::IQ4XS,
            "51574b9b6133cf72923a60d498998352d6b5d14f20365b34f682e53ac961eb38",
        ),
    ];
    let (x, w) = inputs();
    assert_rows_hash(&expected, &x, &w);
}

/// The i-quant writers' rows (`tests/data/iq-writers-ggml.c`, same generator): the six rows
/// above, then a row whose first block is all zeros, one of large values (×10⁴), one
/// all-negative, and one of values below the i-quants' zero thresholds (×10⁻⁹).
const IQ_ROWS: usize = 10;

fn iq_inputs() -> (Vec<f32>, Vec<f32>) {
    rows_and_weights(IQ_ROWS)
}

/// The grid i-quants' writers (ggml's `quantize_row_iq*_impl` searches) against the bytes
/// of `ggml_quantize_chunk` in llama.cpp 0c1e570's libggml-base, one row at a time with the
/// same weights (`tests/data/iq-writers-ggml.c` prints them).
#[test]
fn iquant_writers_match_ggml() {
    let expected = [
        (
            DType::IQ2XXS,
            "73067c30faee3c2d47ce4c2b12e6e668dec4eb43bbb03acc5d67db2ddeb3bc76",
        ),
        (
            DType::IQ3XXS,
            "4189c35c8e3b18ecba300470fbb87f0d3abb7e35a6a553e32355400a12f68073",
        ),
        (
            DType::IQ3S,
            "9b7b9de33c7f6957c51a792ebad63aa1c3a6030f73c3ce039188e6ca00e82bce",
        ),
        (
            DType::IQ2XS,
            "26799c01e51b9401920fabdda32d45cd58d19b4cfb7783d7ceb725a61e81472d",
        ),
        (
            DType::IQ2S,
            "d7e9fbce717ff1b4b3a3fc82d8df9c78dbf43f41eee49d6e949451a077125447",
        ),
        (
            DType::IQ1S,
            "ad443a7fc1e375dc097d6064b04eff7a37d4c1b0d022912852efb479b66b4a9c",
        ),
        (
            DType::IQ1M,
            "719642189a1b90b1c55874555c31e8f95285ac8aa51a12c7edd46135c0d1e5dc",
        ),
    ];
    let (x, w) = iq_inputs();
    assert_rows_hash(&expected, &x, &w);
}

/// The same rows without weights, for the grid i-quants ggml writes without an importance
/// matrix (`quantize_row_iq*_ref`, `ggml_quantize_chunk(…, NULL)`: the C program's
/// `NAME-noimat.bin`).
#[test]
fn iquant_writers_without_weights_match_ggml() {
    let expected = [
        (
            DType::IQ2S,
            "e03a91e978aca07839216cfdb051932e8561c6d01c7f4f7fa1e257a51dd19c53",
        ),
        (
            DType::IQ1M,
            "20e85d041e303b061e5a0f8f42c30e0ad90d163377b334c1f8ac792081f37ff0",
        ),
        (
            DType::IQ3XXS,
            "e11b4f7bdff7694e78ddaad7b255bc8a4a620196786fe71d21686585563a2194",
        ),
        (
            DType::IQ3S,
            "29742ab4554780cc50c8b6739ed0e548e2e58bb1285e9fa80e3c7a70f1e68783",
        ),
    ];
    let (x, _) = iq_inputs();
    assert_rows_hash_with(&expected, &x, None);
}

/// Each type's rows of `x` quantized with the weights `w`, one row at a time, hash to the
/// expected sha256 (the types that do not are listed in the failure).
fn assert_rows_hash(expected: &[(DType, &str)], x: &[f32], w: &[f32]) {
    assert_rows_hash_with(expected, x, Some(w))
}

/// [`assert_rows_hash`] with optional weights (`None`: the unweighted writers).
fn assert_rows_hash_with(expected: &[(DType, &str)], x: &[f32], w: Option<&[f32]>) {
    let mut bad = Vec::new();
    for &(t, sha) in expected {
        let row = t.row_size(N);
        let mut out = vec![0u8; row * (x.len() / N)];
        for (xr, o) in x.chunks(N).zip(out.chunks_mut(row)) {
            match w {
                Some(w) => quantize_row_weighted_dyn(t, xr, w, o),
                None => quantize_row_dyn(t, xr, o),
            }
            .expect("quantize");
        }
        let got = format!("{:x}", Sha256::digest(&out));
        if got != sha {
            bad.push(format!("{t}: {got}"));
        }
    }
    assert!(bad.is_empty(), "differ from llama.cpp: {bad:?}");
}

#[test]
fn weights_of_the_wrong_length_are_refused() {
    let x = vec![0.5f32; 64];
    let mut out = vec![0u8; DType::Q4_0.row_size(64)];
    let err = quantize_row_weighted_dyn(DType::Q4_0, &x, &[1.0; 32], &mut out).unwrap_err();
    assert!(err.to_string().contains("32 importance weights"), "{err}");
}
