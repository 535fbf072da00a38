//! Block-quantized types through the public API: layouts, bit-exactness against ggml,
//! hand-built blocks, round-trip and dot-product errors as ggml's `test-quantize-fns`
//! measures them, and `mul_mat` / `get_rows` with every block type through the executor.

use ggrs_core::quants::{
    self, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
    BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, BlockQuant,
};
use ggrs_core::{Context, DType, Executor, Graph};
use half::f16;

/// Every block type, in GGUF id order.
const BLOCK_TYPES: [DType; 12] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q8_1,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Q8K,
];

/// The weight types ggml pairs with an activation type, and that pairing.
const GGML_PAIRS: [(DType, DType); 10] = [
    (DType::Q4_0, DType::Q8_0),
    (DType::Q4_1, DType::Q8_1),
    (DType::Q5_0, DType::Q8_0),
    (DType::Q5_1, DType::Q8_1),
    (DType::Q8_0, DType::Q8_0),
    (DType::Q2K, DType::Q8K),
    (DType::Q3K, DType::Q8K),
    (DType::Q4K, DType::Q8K),
    (DType::Q5K, DType::Q8K),
    (DType::Q6K, DType::Q8K),
];

// ------------------------------------------------------------------------------------------
// Deterministic data (the same generators as the C program that produced the ggml vectors)
// ------------------------------------------------------------------------------------------

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn next32(&mut self) -> u32 {
        (self.next64() >> 32) as u32
    }

    /// Uniform in [0, 1), 24 bits (exact in f32).
    fn unif(&mut self) -> f32 {
        (self.next32() >> 8) as f32 * (1.0 / 16_777_216.0)
    }

    /// A finite, normal f16 of magnitude 2^-14 .. 2^6.
    fn f16(&mut self) -> f16 {
        let sign = self.next32() & 0x8000;
        let e = 1 + self.next32() % 20;
        let m = self.next32() & 0x3ff;
        f16::from_bits((sign | (e << 10) | m) as u16)
    }
}

/// Groups of 32 values of assorted shapes: zeros, constants, a lone spike, tiny values,
/// one-signed, huge, half-integers, and ordinary ones with occasional outliers.
fn gen_data(seed: u64, n: usize) -> Vec<f32> {
    let mut r = Rng(seed);
    let mut x = vec![0f32; n];
    for y in x.chunks_exact_mut(32) {
        let kind = r.next32() % 10;
        let s = (1 + r.next32() % 1000) as f32 * 0.001;
        for v in y.iter_mut() {
            let u = r.unif();
            *v = match kind {
                0 | 2 => 0.0,
                1 => s,
                3 => (u * 2.0 - 1.0) * 1e-20,
                4 => u * s,
                5 => -u * s - s,
                6 => (u * 2.0 - 1.0) * s * 1000.0,
                // Half-integers with an amax of 127 (set below): the 8-bit quantizers' scale
                // is exactly 1, so their rounding meets exact ties.
                9 => ((r.next32() % 255) as i32 - 127) as f32 * 0.5,
                _ => (u * 2.0 - 1.0) * s,
            };
        }
        if kind == 2 {
            y[(r.next32() % 32) as usize] = s * 100.0;
        }
        if kind == 9 {
            y[(r.next32() % 32) as usize] = 127.0;
        }
        // (`% 4 == 0` in the C generator.)
        if (kind == 7 || kind == 8) && r.next32() & 3 == 0 {
            y[(r.next32() % 32) as usize] *= 8.0;
        }
    }
    x
}

/// Byte offsets of the f16 fields of a block type.
fn f16_fields(t: DType) -> &'static [usize] {
    match t {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => &[0],
        DType::Q4_1 | DType::Q5_1 | DType::Q8_1 | DType::Q4K | DType::Q5K => &[0, 2],
        DType::Q2K => &[80, 82],
        DType::Q3K => &[108],
        DType::Q6K => &[208],
        _ => &[],
    }
}

/// `nb` blocks of random bytes whose scales are valid finite f16 (Q8_K: a small f32 scale and
/// consistent group sums): every code pattern a file may hold.
fn gen_blocks(t: DType, seed: u64, nb: usize) -> Vec<u8> {
    let mut r = Rng(seed);
    let ts = t.type_size();
    let mut out = vec![0u8; nb * ts];
    for p in out.chunks_exact_mut(ts) {
        for b in p.iter_mut() {
            *b = (r.next32() & 0xff) as u8;
        }
        for &off in f16_fields(t) {
            p[off..off + 2].copy_from_slice(&r.f16().to_le_bytes());
        }
        if t == DType::Q8K {
            let d = (r.unif() * 2.0 - 1.0) * 0.05;
            p[0..4].copy_from_slice(&d.to_le_bytes());
            for j in 0..16 {
                let s: i32 = (0..16).map(|i| p[4 + 16 * j + i] as i8 as i32).sum();
                p[260 + 2 * j..262 + 2 * j].copy_from_slice(&(s as i16).to_le_bytes());
            }
        }
    }
    out
}

/// FNV-1a, 64 bits.
fn fnv(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn quantize(t: DType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; t.row_size(x.len())];
    quants::quantize_row_dyn(t, x, &mut q).expect("whole blocks");
    q
}

fn dequantize(t: DType, q: &[u8]) -> Vec<f32> {
    let mut y = vec![0f32; q.len() / t.type_size() * t.block_size()];
    quants::dequantize_row_dyn(t, q, &mut y).expect("whole blocks");
    y
}

// ------------------------------------------------------------------------------------------
// Layout
// ------------------------------------------------------------------------------------------

#[test]
fn block_sizes_match_gguf() {
    use std::mem::size_of;
    let sizes = [
        (size_of::<BlockQ4_0>(), 18, DType::Q4_0),
        (size_of::<BlockQ4_1>(), 20, DType::Q4_1),
        (size_of::<BlockQ5_0>(), 22, DType::Q5_0),
        (size_of::<BlockQ5_1>(), 24, DType::Q5_1),
        (size_of::<BlockQ8_0>(), 34, DType::Q8_0),
        (size_of::<BlockQ8_1>(), 36, DType::Q8_1),
        (size_of::<BlockQ2K>(), 84, DType::Q2K),
        (size_of::<BlockQ3K>(), 110, DType::Q3K),
        (size_of::<BlockQ4K>(), 144, DType::Q4K),
        (size_of::<BlockQ5K>(), 176, DType::Q5K),
        (size_of::<BlockQ6K>(), 210, DType::Q6K),
        (size_of::<BlockQ8K>(), 292, DType::Q8K),
    ];
    for (got, want, t) in sizes {
        assert_eq!(got, want, "{t}");
        assert_eq!(t.type_size(), want, "{t}");
    }
    assert_eq!(BlockQ4_0::BLOCK_SIZE, 32);
    assert_eq!(BlockQ6K::BLOCK_SIZE, 256);
    assert_eq!(BlockQ4K::BYTES, 144);
    assert_eq!(std::mem::align_of::<BlockQ8K>(), 4);
    assert_eq!(std::mem::align_of::<BlockQ4_0>(), 2);
}

#[test]
fn vec_dot_pairings_follow_ggml() {
    for (w, a) in GGML_PAIRS {
        assert_eq!(quants::vec_dot_type(w), Some(a), "{w}");
        assert_eq!(ggrs_core::types::traits(w).vec_dot_type, a, "{w}");
        assert!(quants::vec_dot_kernel(w).is_some(), "{w}");
    }
    assert_eq!(quants::vec_dot_type(DType::F16), None);
    assert!(quants::vec_dot_kernel(DType::F32).is_none());
    for t in BLOCK_TYPES {
        let tr = ggrs_core::types::traits(t);
        assert!(tr.to_f32.is_some() && tr.from_f32.is_some(), "{t}");
    }
}

// ------------------------------------------------------------------------------------------
// Bit-exactness against ggml
// ------------------------------------------------------------------------------------------

/// FNV-1a hashes of ggml's results on the data above, from llama.cpp 0c1e570 (the sources
/// vendored in the PyPI sdist `llama-cpp-python==0.3.36`): `ggml-quants.c` and
/// `ggml-cpu/quants.c` compiled with `gcc -O3 -DNDEBUG` for baseline x86-64 (as ggml-base is
/// built: no FMA contraction), run on `gen_data(1234, 16384)`:
/// - `quant`: bytes of `quantize_row_<t>_ref` on the data;
/// - `dequant`: f32 bytes of `dequantize_row_<t>` on `gen_blocks(t, 99 + index, …)`
///   (ggml has no `dequantize_row_q8_1`);
/// - `dot`: the 16 f32 results of `ggml_vec_dot_<t>_<vec_dot_type>_generic` over rows of
///   1024 values: the `gen_blocks` weights against the data quantized to the partner type.
const GGML_DATA_HASH: u64 = 0x5b16_61f9_0d30_73d5;
const GGML_VECTORS: [(DType, u64, Option<u64>, Option<u64>); 12] = [
    (
        DType::Q4_0,
        0x3cd9_0fc1_9f47_faef,
        Some(0x93cd_8459_b3f1_3533),
        Some(0x5ef7_f2ca_eab2_8a1a),
    ),
    (
        DType::Q4_1,
        0x831d_ab19_3026_0929,
        Some(0x321e_01b0_0d7e_25e0),
        Some(0x8335_158d_e193_2f92),
    ),
    (
        DType::Q5_0,
        0xe26c_8c0c_c31e_8276,
        Some(0x5fe8_fc4f_5c2c_fea2),
        Some(0xe253_f1d0_f216_f19c),
    ),
    (
        DType::Q5_1,
        0xb238_5973_4325_09f9,
        Some(0xfef2_d480_56a2_6596),
        Some(0x13d4_4e2c_1990_63be),
    ),
    (
        DType::Q8_0,
        0xd201_a740_a3be_4404,
        Some(0xa337_5b8d_bc28_bf92),
        Some(0x43b8_980e_af6f_e33c),
    ),
    (DType::Q8_1, 0x145a_d374_0a3a_7d07, None, None),
    (
        DType::Q2K,
        0xf8ca_a52f_db4f_76ce,
        Some(0xd9e6_2940_bc9b_e171),
        Some(0x365f_86bf_71a0_f8a2),
    ),
    (
        DType::Q3K,
        0x02a9_13bc_cead_db71,
        Some(0x265a_f208_48c7_4fc1),
        Some(0x909a_41de_2d4b_ba14),
    ),
    (
        DType::Q4K,
        0x7e29_f2cf_9f16_f9b0,
        Some(0xa1e7_cae8_7b0b_ea16),
        Some(0x26bb_6e34_dd8c_efcd),
    ),
    (
        DType::Q5K,
        0x25d8_8b66_912c_e026,
        Some(0x9ec6_70e5_d8ba_3354),
        Some(0xed01_f527_e5b7_8a53),
    ),
    (
        DType::Q6K,
        0x5bdd_54e2_d4f5_a2c8,
        Some(0x5613_1e68_6721_8ce1),
        Some(0xd88f_1d22_c824_7ebd),
    ),
    (
        DType::Q8K,
        0xe18e_f6e5_8ec7_3355,
        Some(0x696b_e2ac_2a4b_4a48),
        None,
    ),
];

#[test]
fn bit_exact_with_ggml() {
    const N: usize = 256 * 64;
    let x = gen_data(1234, N);
    assert_eq!(fnv(&f32_bytes(&x)), GGML_DATA_HASH, "data generator");
    let mut failures = Vec::new();
    for (i, &(t, hq, hd, hdot)) in GGML_VECTORS.iter().enumerate() {
        assert_eq!(t, BLOCK_TYPES[i]);
        let q = quantize(t, &x);
        if fnv(&q) != hq {
            failures.push(format!("quantize_row_{t}_ref"));
        }
        let blocks = gen_blocks(t, 99 + i as u64, N / t.block_size());
        if let Some(h) = hd {
            if fnv(&f32_bytes(&dequantize(t, &blocks))) != h {
                failures.push(format!("dequantize_row_{t}"));
            }
        }
        if let Some(h) = hdot {
            let vt = quants::vec_dot_type(t).expect("block type");
            let act = quantize(vt, &x);
            let k = N / 16;
            let (wr, ar) = (t.row_size(k), vt.row_size(k));
            let dots: Vec<f32> = (0..16)
                .map(|r| {
                    let a = &blocks[r * wr..(r + 1) * wr];
                    let b = &act[r * ar..(r + 1) * ar];
                    quants::vec_dot_row_dyn(t, k, a, b).expect("exact rows")
                })
                .collect();
            if fnv(&f32_bytes(&dots)) != h {
                failures.push(format!("vec_dot {t} x {vt}"));
            }
        }
    }
    assert!(failures.is_empty(), "differ from ggml: {failures:?}");
}

// ------------------------------------------------------------------------------------------
// Hand-built blocks, decoded from the format description
// ------------------------------------------------------------------------------------------

fn h(v: f32) -> f16 {
    f16::from_f32(v)
}

/// Checks the listed positions, and that every other position holds `rest`.
fn check_values(t: DType, got: &[f32], expect: &[(usize, f32)], rest: f32) {
    for (i, &g) in got.iter().enumerate() {
        let want = expect
            .iter()
            .find(|(p, _)| *p == i)
            .map_or(rest, |&(_, v)| v);
        assert_eq!(g, want, "{t} value {i}");
    }
}

fn decode<B: BlockQuant>(b: &B) -> Vec<f32> {
    let mut y = vec![0f32; B::BLOCK_SIZE];
    quants::dequantize_row::<B>(bytemuck::bytes_of(b), &mut y).expect("one block");
    y
}

#[test]
fn hand_built_legacy_blocks() {
    // Q4_0: x = d·(q − 8); byte j: value j low nibble, value j+16 high nibble.
    let mut b = BlockQ4_0 {
        d: h(0.5),
        qs: [0x88; 16],
    };
    b.qs[0] = 0x80; // value 0: q 0 → −4; value 16: q 8 → 0
    b.qs[1] = 0xF1; // value 1: q 1 → −3.5; value 17: q 15 → 3.5
    b.qs[15] = 0x9C; // value 15: q 12 → 2; value 31: q 9 → 0.5
    let y = decode(&b);
    check_values(
        DType::Q4_0,
        &y,
        &[(0, -4.0), (1, -3.5), (17, 3.5), (15, 2.0), (31, 0.5)],
        0.0,
    );

    // Q4_1: x = d·q + m.
    let mut b = BlockQ4_1 {
        d: h(0.25),
        m: h(-1.0),
        qs: [0x44; 16],
    };
    b.qs[0] = 0x3A; // value 0: 10·0.25 − 1 = 1.5; value 16: 3·0.25 − 1 = −0.25
    let y = decode(&b);
    check_values(DType::Q4_1, &y, &[(0, 1.5), (16, -0.25)], 0.0);

    // Q5_0: x = d·(q − 16), q = nibble | (bit j of qh) << 4.
    // Every fifth bit set except those of values 1 and 18.
    let mut b = BlockQ5_0 {
        d: h(1.0),
        qh: (!((1u32 << 1) | (1 << 18))).to_le_bytes(),
        qs: [0x00; 16],
    };
    b.qs[1] = 0x0F; // value 1: 15 | 0 → −1; value 17: 0 | 16 → 0
    b.qs[2] = 0x70; // value 2: 0 | 16 → 0; value 18: 7 | 0 → −9
    b.qs[3] = 0xF5; // value 3: 5 | 16 → 5; value 19: 15 | 16 → 15
    let y = decode(&b);
    check_values(
        DType::Q5_0,
        &y,
        &[(1, -1.0), (18, -9.0), (3, 5.0), (19, 15.0)],
        0.0,
    );

    // Q5_1: x = d·q + m.
    let b = BlockQ5_1 {
        d: h(0.5),
        m: h(2.0),
        qh: (1u32 << 31).to_le_bytes(),
        qs: [0x10; 16],
    };
    // Low nibble 0 (value j < 16: q 0 → 2), high nibble 1 (value ≥ 16: q 1 → 2.5), except
    // value 31 whose fifth bit is set: q 17 → 10.5.
    let y = decode(&b);
    let mut expect: Vec<(usize, f32)> = (16..31).map(|i| (i, 2.5)).collect();
    expect.push((31, 10.5));
    check_values(DType::Q5_1, &y, &expect, 2.0);

    // Q8_0 / Q8_1: x = d·q.
    let mut b = BlockQ8_0 {
        d: h(0.25),
        qs: [0; 32],
    };
    b.qs[3] = -128;
    b.qs[5] = 127;
    b.qs[31] = -3;
    let y = decode(&b);
    check_values(DType::Q8_0, &y, &[(3, -32.0), (5, 31.75), (31, -0.75)], 0.0);
    let mut b = BlockQ8_1 {
        d: h(-2.0),
        s: h(0.0),
        qs: [1; 32],
    };
    b.qs[7] = -5;
    check_values(DType::Q8_1, &decode(&b), &[(7, 10.0)], -2.0);
}

#[test]
fn hand_built_k_quant_blocks() {
    // Q2_K: x = d·sc·q − dmin·m; sub-block j = values 16j..16j+16; value 128h + 32s + l in
    // bits 2s of qs[32h + l].
    let mut b = BlockQ2K {
        scales: [0; 16],
        qs: [0; 64],
        d: h(1.0),
        dmin: h(0.5),
    };
    b.scales[0] = 0x23; // sub-block 0: sc 3, m 2 → 3q − 1
    b.scales[2] = 0x15; // sub-block 2 (values 32..48): sc 5, m 1 → 5q − 0.5
    b.scales[4] = 0x01; // sub-block 4 (values 64..80): 1·q
    b.scales[6] = 0xF0; // sub-block 6 (values 96..112): sc 0, m 15 → −7.5
    b.scales[9] = 0x07; // sub-block 9 (values 144..160): 7·q
    b.qs[0] = 0b11_10_01_00; // values 0 (q 0), 32 (q 1), 64 (q 2), 96 (q 3)
    b.qs[48] = 0b00_00_00_10; // value 128 + 16 = 144: q 2
    let y = decode(&b);
    let mut expect: Vec<(usize, f32)> = vec![(32, 4.5), (64, 2.0), (144, 14.0)];
    expect.extend((0..16).map(|i| (i, -1.0)));
    expect.extend((33..48).map(|i| (i, -0.5)));
    expect.extend((96..112).map(|i| (i, -7.5)));
    check_values(DType::Q2K, &y, &expect, 0.0);

    // Q3_K: x = d·(sc − 32)·(q − 4); scale j: low nibble in scales[j] (j < 8) or the high
    // nibble of scales[j − 8], top 2 bits at bit 2·(j/4) of scales[8 + j%4]; code low bits as
    // Q2_K, high bit of value 128h + 32s + l at bit 4h + s of hmask[l].
    let mut b = BlockQ3K {
        hmask: [0xFF; 32],
        qs: [0; 64],
        scales: [0; 12],
        d: h(2.0),
    };
    // All scales 32 (→ 0) except: sub-block 0 → 33 (+1), 5 → 40 (+8), 10 → 20 (−12), 15 → 63.
    let sc6 = |j: usize| -> u8 {
        match j {
            0 => 33,
            5 => 40,
            10 => 20,
            15 => 63,
            _ => 32,
        }
    };
    for j in 0..16 {
        let v = sc6(j);
        if j < 8 {
            b.scales[j] |= v & 0x0F;
        } else {
            b.scales[j - 8] |= (v & 0x0F) << 4;
        }
        b.scales[8 + j % 4] |= (v >> 4) << (2 * (j / 4));
    }
    b.qs[0] = 0b00_00_00_11; // value 0: low bits 3, high bit set → code 3 → 2·1·3 = 6
    b.hmask[1] &= !1; // value 1: low bits 0, high bit clear → code −4 → 2·1·(−4) = −8
    b.qs[16 + 32] = 0b11 << 2; // value 128 + 32 + 16 = 176 (sub-block 11, scale 0) → 0
    b.qs[5 + 32] = 0b10 << 2; // value 128 + 32 + 5 = 165 (sub-block 10): low bits 2 …
    b.hmask[5] &= !(1 << 5); // … high bit (bit 4·1 + 1) clear → code −2 → 2·(−12)·(−2) = 48
    b.qs[31 + 32] = 0b01 << 6; // value 128 + 96 + 31 = 255 (sub-block 15): code 1 → 62
    let y = decode(&b);
    // Unset codes are 4 (low 0, high bit set) → q − 4 = 0.
    check_values(
        DType::Q3K,
        &y,
        &[(0, 6.0), (1, -8.0), (165, 48.0), (255, 62.0)],
        0.0,
    );
    // Sub-block 5 (values 80..96) scale 8: its zero codes stay 0; make one −4.
    b.hmask[80 % 32] &= !(1 << 2); // value 80 = 32·2 + 16 → s 2, l 16
    let y = decode(&b);
    assert_eq!(y[80], 2.0 * 8.0 * -4.0);

    // Q4_K: x = d·sc·q − dmin·m; sub-block 2c low nibbles, 2c + 1 high nibbles of
    // qs[32c..32c + 32]; 6-bit scales/mins packed (j < 4: bytes j, j + 4; j ≥ 4: nibbles of
    // byte j + 4, top bits in bytes j − 4 and j).
    let mut b = BlockQ4K {
        d: h(0.5),
        dmin: h(0.25),
        scales: [0; 12],
        qs: [0; 128],
    };
    b.scales[1] = 10; // sub-block 1: sc 10
    b.scales[5] = 4; // sub-block 1: m 4 → values 32..64: 5q − 1
    b.scales[9] = 0x3 | (0x2 << 4); // sub-block 5: sc low 3, m low 2
    b.scales[1] |= 1 << 6; // sub-block 5: sc high bits 1 → sc 19
    b.scales[5] |= 2 << 6; // sub-block 5: m high bits 2 → m 34
    b.qs[0] = 0xF0; // value 32 (sub-block 1, high nibble of qs[0]): q 15 → 74
    b.qs[64 + 7] = 0x90; // value 128 + 32 + 7 = 167 (sub-block 5): q 9 → 9.5·9 − 8.5
    let y = decode(&b);
    let mut expect: Vec<(usize, f32)> = (32..64).map(|i| (i, -1.0)).collect();
    expect.extend((160..192).map(|i| (i, -8.5)));
    expect.push((32, 74.0));
    expect.push((167, 0.5 * 19.0 * 9.0 - 8.5));
    let expect: Vec<(usize, f32)> = {
        // later entries win for duplicated positions
        let mut m = std::collections::BTreeMap::new();
        for (p, v) in expect {
            m.insert(p, v);
        }
        m.into_iter().collect()
    };
    check_values(DType::Q4K, &y, &expect, 0.0);

    // Q5_K: as Q4_K plus a fifth bit: value 64c + l at bit 2c of qh[l], 64c + 32 + l at
    // bit 2c + 1.
    let mut b = BlockQ5K {
        d: h(1.0),
        dmin: h(1.0),
        scales: [0; 12],
        qh: [0; 32],
        qs: [0; 128],
    };
    b.scales[0] = 1; // sub-block 0: sc 1, m 0
    b.scales[3] = 2; // sub-block 3 (values 96..128): sc 2
    b.scales[7] = 3; // sub-block 3: m 3
    b.qs[3] = 0x05; // value 3: q 5
    b.qh[3] = 0b1; // … + 16 → 21
    b.qs[32 + 4] = 0xA0; // value 64 + 32 + 4 = 100 (sub-block 3, high nibble): q 10
    b.qh[4] = 0b1000; // … bit 3 = 2·1 + 1 → + 16 → 26 → 2·26 − 3
    let y = decode(&b);
    let mut expect: Vec<(usize, f32)> =
        (96..128).filter(|&i| i != 100).map(|i| (i, -3.0)).collect();
    expect.push((3, 21.0));
    expect.push((100, 49.0));
    check_values(DType::Q5K, &y, &expect, 0.0);

    // Q6_K: x = d·sc·(q − 32); see the module docs for where the 6 bits of each value sit.
    let mut b = BlockQ6K {
        ql: [0; 128],
        qh: [0xAA; 64], // high bits 2 everywhere → q = 32 + low → (q − 32) = low nibble
        scales: [0; 16],
        d: h(0.5),
    };
    b.scales[0] = 2;
    b.scales[4] = -3; // values 64..80
    b.scales[10] = 7; // values 160..176
    b.ql[1] = 0x5 | (0x3 << 4); // value 1: 5 → 0.5·2·5 = 5; value 65: 3 → 0.5·−3·3 = −4.5
    b.ql[64 + 32 + 3] = 0x9; // half 1, value 128 + 32 + 3 = 163: low bits 9 …
    b.qh[32 + 3] = 0xA0; // … high bits (bits 2–3) 0: q 9 → 9 − 32 = −23 → 0.5·7·(−23);
                         // value 131 (bits 0–1, sub-block 8 of scale 0) stays 0
    let y = decode(&b);
    check_values(
        DType::Q6K,
        &y,
        &[(1, 5.0), (65, -4.5), (163, 0.5 * 7.0 * -23.0)],
        0.0,
    );

    // Q8_K: x = d·q with an f32 d.
    let mut b = BlockQ8K {
        d: 0.125,
        qs: [0; 256],
        bsums: [0; 16],
    };
    b.qs[200] = -100;
    b.qs[255] = 127;
    check_values(DType::Q8K, &decode(&b), &[(200, -12.5), (255, 15.875)], 0.0);
}

// ------------------------------------------------------------------------------------------
// Quantizers on simple inputs
// ------------------------------------------------------------------------------------------

#[test]
fn legacy_quantizers_on_known_values() {
    // Values on Q4_0's grid, the largest magnitude negative: d = −8 / −8 = 1, exact.
    let x: Vec<f32> = (0..32).map(|i| (i % 16) as f32 - 8.0).collect();
    let mut q = [0u8; 18];
    quants::q4_0::quantize_row_q4_0_ref(&x, &mut q).unwrap();
    assert_eq!(f16::from_le_bytes([q[0], q[1]]).to_f32(), 1.0);
    assert_eq!(q[2], 0x00, "values 0 and 16 are −8: code 0");
    assert_eq!(q[17], 0xFF, "values 15 and 31 are 7: code 15");
    let mut y = [0f32; 32];
    quants::q4_0::dequantize_row_q4_0(&q, &mut y).unwrap();
    assert_eq!(y.to_vec(), x);

    // Q8_0: amax 16 → d = 16/127; codes round(x·127/16), halves away from zero.
    let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
    let mut q = [0u8; 34];
    quants::q8::quantize_row_q8_0_ref(&x, &mut q).unwrap();
    assert_eq!(
        f16::from_le_bytes([q[0], q[1]]),
        f16::from_f32(16.0 / 127.0)
    );
    let id = 1.0 / (16.0f32 / 127.0);
    for (i, &v) in x.iter().enumerate() {
        let want = (v * id).round() as i8;
        assert_eq!(q[2 + i] as i8, want, "code {i}");
    }
    assert_eq!(q[2] as i8, -127);

    // Q4_1: min 0, max 15 → d = 1, codes = values.
    let x: Vec<f32> = (0..32).map(|i| (i % 16) as f32).collect();
    let mut q = [0u8; 20];
    quants::q4_1::quantize_row_q4_1_ref(&x, &mut q).unwrap();
    let mut y = [0f32; 32];
    quants::q4_1::dequantize_row_q4_1(&q, &mut y).unwrap();
    assert_eq!(y.to_vec(), x);

    // Q5_0: values −16..=15 → d = 1 (−16 is the largest magnitude).
    let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
    let mut q = [0u8; 22];
    quants::q5::quantize_row_q5_0_ref(&x, &mut q).unwrap();
    let mut y = [0f32; 32];
    quants::q5::dequantize_row_q5_0(&q, &mut y).unwrap();
    assert_eq!(y.to_vec(), x);

    // Q5_1: 0..=31 → d = 1, m = 0.
    let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let mut q = [0u8; 24];
    quants::q5::quantize_row_q5_1_ref(&x, &mut q).unwrap();
    let mut y = [0f32; 32];
    quants::q5::dequantize_row_q5_1(&q, &mut y).unwrap();
    assert_eq!(y.to_vec(), x);

    // Q8_1: s = d · Σ codes.
    let x: Vec<f32> = (0..32).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut q = [0u8; 36];
    quants::q8::quantize_row_q8_1_ref(&x, &mut q).unwrap();
    let d = f16::from_le_bytes([q[0], q[1]]).to_f32();
    let s = f16::from_le_bytes([q[2], q[3]]).to_f32();
    let sum: i32 = q[4..].iter().map(|&b| b as i8 as i32).sum();
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert_eq!(d, f16::from_f32(amax / 127.0).to_f32());
    assert_eq!(s, f16::from_f32(sum as f32 * (amax / 127.0)).to_f32());

    // All zeros: scale 0, codes at the zero point.
    let z = [0f32; 32];
    let mut q = [0xAAu8; 18];
    quants::q4_0::quantize_row_q4_0_ref(&z, &mut q).unwrap();
    // d = max / −8 with max = 0: −0 (f16 0x8000), as ggml stores it.
    assert_eq!(f16::from_le_bytes([q[0], q[1]]).to_bits(), 0x8000);
    assert!(q[2..].iter().all(|&b| b == 0x88));
}

#[test]
fn q8_k_quantizer_fills_group_sums() {
    let x: Vec<f32> = (0..256)
        .map(|i| ((i * 7919) % 251) as f32 / 25.0 - 5.0)
        .collect();
    let mut q = vec![0u8; 292];
    quants::k_quants::q8_k::quantize_row_q8_k_ref(&x, &mut q).unwrap();
    let b: BlockQ8K = bytemuck::pod_read_unaligned(&q);
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!((b.d.abs() - amax / 127.0).abs() <= 1e-6 * amax);
    for j in 0..16 {
        let s: i32 = b.qs[16 * j..16 * j + 16].iter().map(|&v| v as i32).sum();
        assert_eq!(b.bsums[j] as i32, s, "group {j}");
    }
    for (i, &v) in x.iter().enumerate() {
        assert!(
            (b.d * b.qs[i] as f32 - v).abs() <= 0.5 * b.d.abs() * 1.0001,
            "value {i}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// ggml's test-quantize-fns measures
// ------------------------------------------------------------------------------------------

/// `0.1 + 2·cos(i + offset)`, as test-quantize-fns generates it.
fn cos_data(offset: f64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.1 + 2.0 * (i as f64 + offset).cos()) as f32)
        .collect()
}

fn bits(t: DType) -> u32 {
    match t {
        DType::Q2K => 2,
        DType::Q3K => 3,
        DType::Q4_0 | DType::Q4_1 | DType::Q4K => 4,
        DType::Q5_0 | DType::Q5_1 | DType::Q5K => 5,
        DType::Q6K => 6,
        _ => 8,
    }
}

#[test]
fn round_trip_error_as_test_quantize_fns() {
    let n = 32 * 128;
    let x = cos_data(0.0, n);
    for t in BLOCK_TYPES {
        let y = dequantize(t, &quantize(t, &x));
        // ggml's `array_rmse`: √(Σ d²) / n.
        let sum2: f64 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| ((a - b) as f64).powi(2))
            .sum();
        let err = sum2.sqrt() / n as f64;
        let max = match bits(t) {
            2 => 0.0075,
            3 => 0.004,
            _ => 0.002,
        };
        assert!(err <= max, "{t}: total error {err} > {max}");
        // And the plain RMS error against half a quantization step of the data's range
        // (about 4.2) for the type's bits: uniform rounding error has RMS step/√12 ≈ 0.29
        // step; allow up to 0.45 step (the k-quants' searched scales sit near 0.3).
        let rms = (sum2 / n as f64).sqrt();
        let step = 4.2 / ((1u32 << bits(t)) - 1) as f64;
        assert!(rms <= 0.45 * step, "{t}: rms {rms} vs step {step}");
    }
}

/// The dot product of the dequantized rows `a` (weight type `t`) and `b` (its vec-dot type)
/// in f64, and how far the fused f32 kernel may be from it: f32 accumulation over the blocks
/// (and 8 lanes), at most `(blocks + 8)·ε·Σ|a·b|`, plus, for Q4_1 and Q5_1, the f16 rounding
/// of Q8_1's sum field `s` (relative 2⁻¹¹), which their kernels multiply by the minimum.
fn dequantized_dot(t: DType, a: &[u8], b: &[u8]) -> (f64, f64) {
    let vt = quants::vec_dot_type(t).expect("block type");
    let (da, db) = (dequantize(t, a), dequantize(vt, b));
    let reference: f64 = da.iter().zip(&db).map(|(p, q)| *p as f64 * *q as f64).sum();
    let scale: f64 = da
        .iter()
        .zip(&db)
        .map(|(p, q)| (*p as f64 * *q as f64).abs())
        .sum();
    let nb = a.len() / t.type_size();
    let mut tol = (nb as f64 + 8.0) * f32::EPSILON as f64 * scale;
    if matches!(t, DType::Q4_1 | DType::Q5_1) {
        for (x, y) in a
            .chunks_exact(t.type_size())
            .zip(b.chunks_exact(vt.type_size()))
        {
            let m = f16::from_le_bytes([x[2], x[3]]).to_f32() as f64;
            let s = f16::from_le_bytes([y[2], y[3]]).to_f32() as f64;
            tol += (m * s).abs() * 2f64.powi(-10);
        }
    }
    (reference, tol)
}

#[test]
fn dot_product_error_as_test_quantize_fns() {
    let n = 32 * 128;
    let x = cos_data(0.0, n);
    let y = cos_data(1.0, n);
    let exact: f64 = x.iter().zip(&y).map(|(a, b)| *a as f64 * *b as f64).sum();
    for (t, vt) in GGML_PAIRS {
        let qa = quantize(t, &x);
        let qb = quantize(vt, &y);
        let got = quants::vec_dot_row_dyn(t, n, &qa, &qb).unwrap();
        let err = (got as f64 - exact).abs() / n as f64;
        let max = if bits(t) < 4 { 0.04 } else { 0.02 };
        assert!(err <= max, "{t}: dot error {err} > {max}");

        // The fused kernel equals the dot product of the two dequantized rows, up to f32
        // rounding (and, with Q8_1, the f16 rounding of its sum field).
        let (reference, tol) = dequantized_dot(t, &qa, &qb);
        assert!(
            (got as f64 - reference).abs() <= tol,
            "{t}: kernel {got} vs dequantized dot {reference} (tolerance {tol})"
        );
    }
}

#[test]
fn fused_dot_matches_dequantized_dot_on_random_blocks() {
    // Random weight blocks (every code and scale pattern) against quantized activations.
    for (i, (t, vt)) in GGML_PAIRS.into_iter().enumerate() {
        let k = 1024;
        let rows = 8;
        let w = gen_blocks(t, 500 + i as u64, rows * k / t.block_size());
        let act = quantize(vt, &gen_data(77 + i as u64, rows * k));
        for r in 0..rows {
            let a = &w[r * t.row_size(k)..(r + 1) * t.row_size(k)];
            let b = &act[r * vt.row_size(k)..(r + 1) * vt.row_size(k)];
            let got = quants::vec_dot_row_dyn(t, k, a, b).unwrap() as f64;
            let (reference, tol) = dequantized_dot(t, a, b);
            assert!(
                (got - reference).abs() <= tol,
                "{t} row {r}: {got} vs {reference} (tolerance {tol})"
            );
        }
    }
}

// ------------------------------------------------------------------------------------------
// Robustness of the row API
// ------------------------------------------------------------------------------------------

#[test]
fn bad_lengths_are_errors() {
    let mut y = [0f32; 32];
    assert!(quants::q4_0::dequantize_row_q4_0(&[0u8; 17], &mut y).is_err());
    assert!(quants::q4_0::dequantize_row_q4_0(&[0u8; 36], &mut y).is_err());
    let mut y31 = [0f32; 31];
    assert!(quants::q4_0::dequantize_row_q4_0(&[0u8; 18], &mut y31).is_err());
    assert!(quants::q8::quantize_row_q8_0_ref(&[0f32; 33], &mut [0u8; 34]).is_err());
    assert!(quants::q8::quantize_row_q8_0_ref(&[0f32; 32], &mut [0u8; 35]).is_err());
    assert!(quants::vec_dot_row_dyn(DType::Q4_0, 32, &[0u8; 18], &[0u8; 18]).is_err());
    assert!(quants::vec_dot_row_dyn(DType::F32, 1, &[0u8; 4], &[0u8; 4]).is_err());
    assert!(quants::dequantize_row_dyn(DType::F16, &[0u8; 2], &mut [0f32; 1]).is_err());
    let e = quants::cast_blocks::<BlockQ4K>(&[0u8; 145]).unwrap_err();
    assert!(e.to_string().contains("144"), "{e}");
}

#[test]
fn misaligned_rows_decode_like_aligned_ones() {
    for (i, t) in BLOCK_TYPES.into_iter().enumerate() {
        let nb = 3;
        let blocks = gen_blocks(t, 900 + i as u64, nb);
        let mut shifted = vec![0u8; blocks.len() + 1];
        shifted[1..].copy_from_slice(&blocks);
        let a = dequantize(t, &blocks);
        let b = dequantize(t, &shifted[1..]);
        assert_eq!(f32_bytes(&a), f32_bytes(&b), "{t}");
        if let Some(vt) = quants::vec_dot_type(t) {
            let n = nb * t.block_size();
            let act = quantize(vt, &gen_data(5, n));
            let mut act_shifted = vec![0u8; act.len() + 1];
            act_shifted[1..].copy_from_slice(&act);
            let k = quants::vec_dot_kernel(t).unwrap();
            let d0 = k(n, &blocks, &act);
            let d1 = k(n, &shifted[1..], &act_shifted[1..]);
            assert_eq!(d0.to_bits(), d1.to_bits(), "{t}");
        }
    }
}

// ------------------------------------------------------------------------------------------
// Through the executor
// ------------------------------------------------------------------------------------------

fn nmse(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| (*g as f64 - w).powi(2))
        .sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    num / den.max(1e-300)
}

/// Weight bytes for `rows` rows of `k` values: quantized smooth data, or random blocks.
fn weight_bytes(t: DType, k: usize, rows: usize, random: bool, seed: u64) -> Vec<u8> {
    if random {
        gen_blocks(t, seed, rows * k / t.block_size())
    } else {
        let x: Vec<f32> = (0..rows * k)
            .map(|i| ((i as f64 * 0.731 + seed as f64).sin() * 1.5) as f32)
            .collect();
        quantize(t, &x)
    }
}

/// Q8_1 carries its block sum `s = d·Σq` rounded to f16, and ggml's Q4_1/Q5_1 kernels take
/// the minimum term `m·Σ y` from it. This is what that rounding adds to the exact dot product
/// of the dequantized rows: `Σ_blocks m · (s − Σ y)`.
fn q8_1_sum_correction(t: DType, w: &[u8], act: &[u8]) -> f64 {
    let mut c = 0.0;
    for (x, y) in w.chunks_exact(t.type_size()).zip(act.chunks_exact(36)) {
        let m = f16::from_le_bytes([x[2], x[3]]).to_f32() as f64;
        let d = f16::from_le_bytes([y[0], y[1]]).to_f32() as f64;
        let s = f16::from_le_bytes([y[2], y[3]]).to_f32() as f64;
        let sum: f64 = y[4..].iter().map(|&q| d * (q as i8) as f64).sum();
        c += m * (s - sum);
    }
    c
}

#[test]
fn mul_mat_with_every_block_type() {
    for (ti, t) in BLOCK_TYPES.into_iter().enumerate() {
        let vt = quants::vec_dot_type(t).expect("block type");
        let bs = t.block_size();
        // (blocks per row, n, m, a2, b2, b3): a broadcast over b's batches; then one column
        // (a decoding step) of an odd number of blocks against rows enough for the panel
        // kernels.
        let shapes = [(5, 7, 5, 2, 4, 3), (19, 40, 1, 1, 1, 1)];
        for (blocks, n, m, a2, b2, b3) in shapes {
            let k = blocks * if bs == 32 { 32 } else { 256 };
            mul_mat_case(t, ti, vt, k, [n, m], [a2, b2, b3]);
        }
    }
}

/// One shape of [`mul_mat_with_every_block_type`]: against the f64 reference, with the same
/// bits on 1 to 4 threads.
fn mul_mat_case(
    t: DType,
    ti: usize,
    vt: DType,
    k: usize,
    [n, m]: [usize; 2],
    [a2, b2, b3]: [usize; 3],
) {
    for random in [false, true] {
        let w = weight_bytes(t, k, n * a2, random, 40 + ti as u64);
        let xb: Vec<f32> = (0..k * m * b2 * b3)
            .map(|i| ((i as f64 * 0.377).cos() * 0.8 + 0.05) as f32)
            .collect();

        // Reference: dequantized weights · (activations through the vec-dot type), f64.
        let wf = dequantize(t, &w);
        let mut want = vec![0f64; n * m * b2 * b3];
        for i3 in 0..b3 {
            for i2 in 0..b2 {
                let wa = i2 / (b2 / a2);
                for j in 0..m {
                    let off = ((i3 * b2 + i2) * m + j) * k;
                    let colq = quantize(vt, &xb[off..off + k]);
                    let col = dequantize(vt, &colq);
                    for i in 0..n {
                        let wr = wa * n + i;
                        let row = &wf[wr * k..(wr + 1) * k];
                        let mut s: f64 = row
                            .iter()
                            .zip(&col)
                            .map(|(p, q)| *p as f64 * *q as f64)
                            .sum();
                        if matches!(t, DType::Q4_1 | DType::Q5_1) {
                            let rs = t.row_size(k);
                            s += q8_1_sum_correction(t, &w[wr * rs..(wr + 1) * rs], &colq);
                        }
                        want[((i3 * b2 + i2) * m + j) * n + i] = s;
                    }
                }
            }
        }

        let mut first: Option<Vec<f32>> = None;
        for threads in [1, 2, 3, 4] {
            let mut ctx = Context::with_mem_size(16 << 20);
            let a = ctx.new_tensor(t, &[k, n, a2, 1]).unwrap();
            let b = ctx.new_tensor(DType::F32, &[k, m, b2, b3]).unwrap();
            ctx.set_bytes(a, &w).unwrap();
            ctx.set_f32(b, &xb).unwrap();
            let out = ctx.mul_mat(a, b).unwrap();
            assert_eq!(ctx.shape(out).unwrap(), [n, m, b2, b3]);
            let g = Graph::build(&ctx, out).unwrap();
            Executor::new(threads).compute(&mut ctx, &g).unwrap();
            let got = ctx.to_f32_vec(out).unwrap();
            let e = nmse(&got, &want);
            assert!(
                e <= 1e-9,
                "{t} [{k}, {n}] × [{k}, {m}] (random {random}) {threads} threads: nmse {e}"
            );
            match &first {
                None => first = Some(got),
                Some(f) => assert_eq!(
                    f32_bytes(f),
                    f32_bytes(&got),
                    "{t} [{k}, {n}] × [{k}, {m}]: result depends on the thread count"
                ),
            }
        }
    }
}

#[test]
fn get_rows_dequantizes_every_block_type() {
    for (ti, t) in BLOCK_TYPES.into_iter().enumerate() {
        let k = 2 * t.block_size();
        let rows = 6;
        for random in [false, true] {
            let w = weight_bytes(t, k, rows, random, 70 + ti as u64);
            let ids = [5i32, 0, 3, 3, 1];
            let mut ctx = Context::with_mem_size(4 << 20);
            let a = ctx.new_tensor(t, &[k, rows]).unwrap();
            let idt = ctx.new_tensor(DType::I32, &[ids.len()]).unwrap();
            ctx.set_bytes(a, &w).unwrap();
            ctx.set_i32(idt, &ids).unwrap();
            let out = ctx.get_rows(a, idt).unwrap();
            let g = Graph::build(&ctx, out).unwrap();
            Executor::new(2).compute(&mut ctx, &g).unwrap();
            let got = ctx.to_f32_vec(out).unwrap();
            let rs = t.row_size(k);
            for (r, &id) in ids.iter().enumerate() {
                let id = id as usize;
                let want = dequantize(t, &w[id * rs..(id + 1) * rs]);
                assert_eq!(
                    f32_bytes(&got[r * k..(r + 1) * k]),
                    f32_bytes(&want),
                    "{t} row {r} (id {id})"
                );
            }
            // Reading the tensor back goes through the same conversion.
            let all = ctx.to_f32_vec(a).unwrap();
            assert_eq!(f32_bytes(&all), f32_bytes(&dequantize(t, &w)), "{t}");
        }
    }
}

#[test]
fn set_f32_quantizes_like_the_reference() {
    for t in BLOCK_TYPES {
        let k = t.block_size() * 2;
        let x = gen_data(3, k * 3);
        let mut ctx = Context::with_mem_size(1 << 20);
        let a = ctx.new_tensor(t, &[k, 3]).unwrap();
        ctx.set_f32(a, &x).unwrap();
        assert_eq!(ctx.data(a).unwrap(), &quantize(t, &x)[..], "{t}");
    }
}
