//! GGUF reader and writer tests.
//!
//! Hand-encoded files (a plain little-endian encoder written here, independent of
//! `GgufWriter`) check the reader field by field and every error path; the files of
//! `shared/reference/` (written by llama.cpp's tools) check it against real files; a
//! write → read round trip and a byte-for-byte comparison with the hand encoding check the
//! writer; tensors loaded into a context and computed by the executor are compared with
//! values converted from the file's bytes by hand.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ggrs_core::gguf::{GgufError, GgufFile, GgufWriter, Value};
use ggrs_core::{compute_graph, Context, DType, Graph};
use half::f16;

// ---------------------------------------------------------------------------------------------
// A plain GGUF encoder, with named marks at the fields the error tests patch.
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct Enc {
    buf: Vec<u8>,
    marks: Vec<(&'static str, usize)>,
}

impl Enc {
    fn mark(&mut self, name: &'static str) -> &mut Self {
        self.marks.push((name, self.buf.len()));
        self
    }
    fn at(&self, name: &str) -> usize {
        self.marks
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, p)| p)
            .unwrap_or_else(|| panic!("no mark {name}"))
    }
    fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).raw(s.as_bytes())
    }
    fn pad(&mut self, align: usize) -> &mut Self {
        self.buf.resize(self.buf.len().next_multiple_of(align), 0);
        self
    }
}

const T_U8: u32 = 0;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;

/// Data of tensor `a` (F32 [4, 2]) and `b` (Q8_0 [32]) in [`small_file`].
fn small_data() -> (Vec<u8>, Vec<u8>) {
    let a: Vec<u8> = (0..8)
        .flat_map(|i| (i as f32 * 0.5 - 1.0).to_le_bytes())
        .collect();
    let mut b = f16::from_f32(0.25).to_le_bytes().to_vec();
    b.extend((0..32).map(|i| (i as i8 - 16) as u8));
    (a, b)
}

/// A small valid v3 file: 3 metadata entries, tensors `a` (F32 [4, 2], offset 0) and
/// `b` (Q8_0 [32], offset 32), data padded to 32 bytes.
fn small_file() -> Enc {
    let (a, b) = small_data();
    let mut e = Enc::default();
    e.mark("magic").raw(b"GGUF").mark("version").u32(3);
    e.mark("n_tensors").u64(2).mark("n_kv").u64(3);
    e.mark("kv0").str("general.architecture");
    e.mark("kv0.type").u32(T_STRING).mark("kv0.len").str("test");
    e.mark("kv1").str("test.list").mark("kv1.type").u32(T_ARRAY);
    e.mark("kv1.elem").u32(T_I32).mark("kv1.count").u64(3);
    e.u32(7).u32(-8i32 as u32).u32(9);
    e.mark("kv2")
        .str("test.f")
        .u32(T_F32)
        .raw(&1.5f32.to_le_bytes());
    e.mark("t0").str("a").mark("t0.ndims").u32(2).u64(4).u64(2);
    e.mark("t0.type").u32(0).mark("t0.offset").u64(0);
    e.mark("t1").str("b").u32(1).mark("t1.ne0").u64(32);
    e.mark("t1.type").u32(8).mark("t1.offset").u64(32);
    e.mark("infos_end").pad(32).mark("data");
    e.raw(&a).pad(32).raw(&b).mark("data_end").pad(32);
    e
}

fn parse(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
    GgufFile::from_bytes(Arc::new(bytes))
}

fn patch_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn patch_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

// ---------------------------------------------------------------------------------------------
// The reader on hand-encoded files
// ---------------------------------------------------------------------------------------------

#[test]
fn reads_a_hand_encoded_file() {
    let e = small_file();
    let f = parse(e.buf.clone()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.data_offset(), e.at("data"));
    let keys: Vec<&str> = f.metadata().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["general.architecture", "test.list", "test.f"]);
    assert_eq!(
        f.get("general.architecture").and_then(Value::as_str),
        Some("test")
    );
    assert_eq!(
        f.get("test.list"),
        Some(&Value::Array(vec![
            Value::I32(7),
            Value::I32(-8),
            Value::I32(9)
        ]))
    );
    assert_eq!(f.get("test.f").and_then(Value::as_f32), Some(1.5));
    assert!(f.get("missing").is_none());

    let (a, b) = small_data();
    let ta = f.tensor("a").unwrap();
    assert_eq!(
        (ta.dtype, ta.ne, ta.n_dims, ta.offset, ta.size),
        (DType::F32, [4, 2, 1, 1], 2, 0, 32)
    );
    assert_eq!(f.tensor_data(ta), &a[..]);
    let tb = f.tensor("b").unwrap();
    assert_eq!(
        (tb.dtype, tb.ne, tb.n_dims, tb.offset, tb.size),
        (DType::Q8_0, [32, 1, 1, 1], 1, 32, 34)
    );
    assert_eq!(f.tensor_data(tb), &b[..]);
    assert_eq!(f.tensors()[0].name, "a");
    assert_eq!(f.tensors()[1].name, "b");
    assert!(f.tensor("c").is_none());
}

#[test]
fn every_truncation_is_an_error_and_padding_after_the_data_is_optional() {
    let e = small_file();
    let needed = e.at("data_end");
    for len in 0..e.buf.len() {
        let r = parse(e.buf[..len].to_vec());
        if len < needed {
            assert!(r.is_err(), "a file cut to {len} bytes was accepted");
        } else {
            assert!(
                r.is_ok(),
                "a file cut to {len} bytes (after the data) was refused: {r:?}"
            );
        }
    }
    // A field cut short names the field and its offset.
    match parse(e.buf[..e.at("kv1.count") + 3].to_vec()) {
        Err(GgufError::Truncated {
            what,
            offset,
            needed: 8,
            available: 3,
        }) => {
            assert_eq!(offset as usize, e.at("kv1.count"));
            assert!(
                what.contains("array length") && what.contains("test.list"),
                "{what}"
            );
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut buf = small_file().buf;
    buf[..4].copy_from_slice(b"GGML");
    assert!(matches!(parse(buf), Err(GgufError::BadMagic { found }) if found == b"GGML"));
    assert!(matches!(
        parse(b"\x7fELF....".to_vec()),
        Err(GgufError::BadMagic { .. })
    ));
    assert!(parse(Vec::new()).is_err());

    let e = small_file();
    for (v, hint) in [(1u32, "version 1"), (4, ""), (0x0300_0000, "big-endian")] {
        let mut buf = e.buf.clone();
        patch_u32(&mut buf, e.at("version"), v);
        match parse(buf) {
            Err(err @ GgufError::UnsupportedVersion { version, .. }) => {
                assert_eq!(version, v);
                assert!(err.to_string().contains(hint), "{err}");
            }
            r => panic!("{r:?}"),
        }
    }
    // Version 2 has the same layout.
    let mut buf = e.buf.clone();
    patch_u32(&mut buf, e.at("version"), 2);
    assert_eq!(parse(buf).unwrap().version(), 2);
}

#[test]
fn unknown_value_type() {
    let e = small_file();
    for (mark, id) in [("kv0.type", 13u32), ("kv1.elem", 0xffff_ffff)] {
        let mut buf = e.buf.clone();
        patch_u32(&mut buf, e.at(mark), id);
        match parse(buf) {
            Err(GgufError::UnknownValueType {
                id: got, offset, ..
            }) => {
                assert_eq!((got, offset as usize), (id, e.at(mark)));
            }
            r => panic!("{r:?}"),
        }
    }
}

#[test]
fn unknown_tensor_type() {
    let e = small_file();
    for id in [4u32, 5, 31, 1000] {
        let mut buf = e.buf.clone();
        patch_u32(&mut buf, e.at("t1.type"), id);
        match parse(buf) {
            Err(GgufError::UnknownTensorType {
                name,
                id: got,
                offset,
            }) => {
                assert_eq!(
                    (name.as_str(), got, offset as usize),
                    ("b", id, e.at("t1.type"))
                );
            }
            r => panic!("{r:?}"),
        }
    }
}

/// A type id ggrs does not read (ggrs reads every type of ggml 0c1e570, so a retired or
/// unknown one) is named in the message, with what ggrs reads.
#[test]
fn unread_tensor_type_is_named() {
    let e = small_file();
    for (id, words) in [
        (4u32, "retired type id 4"),
        (37, "retired type id 37"),
        (1000, "unknown type id 1000"),
    ] {
        let mut buf = e.buf.clone();
        patch_u32(&mut buf, e.at("t1.type"), id);
        let msg = parse(buf).unwrap_err().to_string();
        assert!(msg.contains(words), "{msg}");
        assert!(msg.contains("it reads f32, f16, q4_0"), "{msg}");
        assert!(msg.contains("iq4_xs") && !msg.contains("q8_1"), "{msg}");
        assert!(msg.contains("iq1_m") && msg.contains("iq3_s"), "{msg}");
    }
}

#[test]
fn tensor_data_outside_the_file() {
    let e = small_file();
    // Offsets that are aligned but put the 34 bytes of `b` past the end, or overflow.
    for off in [64u64, 1 << 20, u64::MAX - 31] {
        let mut buf = e.buf.clone();
        patch_u64(&mut buf, e.at("t1.offset"), off);
        match parse(buf) {
            Err(GgufError::BadOffset {
                tensor,
                offset,
                size,
                ..
            }) => {
                assert_eq!((tensor.as_str(), offset, size), ("b", off, 34));
            }
            r => panic!("offset {off}: {r:?}"),
        }
    }
    // A shape too large for the data.
    let mut buf = e.buf.clone();
    patch_u64(&mut buf, e.at("t1.ne0"), 64);
    assert!(matches!(parse(buf), Err(GgufError::BadOffset { .. })));
}

#[test]
fn misaligned_tensor_offset() {
    let e = small_file();
    let mut buf = e.buf.clone();
    patch_u64(&mut buf, e.at("t1.offset"), 33);
    match parse(buf) {
        Err(GgufError::Misaligned {
            tensor,
            offset: 33,
            alignment: 32,
        }) => assert_eq!(tensor, "b"),
        r => panic!("{r:?}"),
    }
}

#[test]
fn bad_shapes() {
    let e = small_file();
    for n_dims in [0u32, 5, 1 << 31] {
        let mut buf = e.buf.clone();
        patch_u32(&mut buf, e.at("t0.ndims"), n_dims);
        assert!(
            matches!(parse(buf), Err(GgufError::BadShape { .. })),
            "n_dims {n_dims}"
        );
    }
    // Q8_0 needs ne[0] to be a multiple of 32.
    let mut buf = e.buf.clone();
    patch_u64(&mut buf, e.at("t1.ne0"), 33);
    assert!(matches!(parse(buf), Err(GgufError::BadShape { .. })));
    // A size that overflows 64 bits.
    let mut buf = e.buf.clone();
    patch_u64(&mut buf, e.at("t1.ne0"), u64::MAX - 31);
    assert!(matches!(parse(buf), Err(GgufError::BadShape { .. })));
}

#[test]
fn duplicates_utf8_and_alignment() {
    let e = small_file();
    // The same key twice.
    let mut d = Enc::default();
    d.raw(b"GGUF").u32(3).u64(0).u64(2);
    d.str("k")
        .u32(T_U8)
        .raw(&[1])
        .mark("dup")
        .str("k")
        .u32(T_U8)
        .raw(&[2]);
    match parse(d.buf.clone()) {
        Err(GgufError::DuplicateKey { key, offset }) => {
            assert_eq!((key.as_str(), offset as usize), ("k", d.at("dup")));
        }
        r => panic!("{r:?}"),
    }
    // Duplicate tensor names: rename `b` to `a`.
    let mut buf = e.buf.clone();
    buf[e.at("t1") + 8] = b'a';
    assert!(matches!(parse(buf), Err(GgufError::DuplicateTensor { name, .. }) if name == "a"));
    // Invalid UTF-8 in a string value.
    let mut buf = e.buf.clone();
    buf[e.at("kv0.len") + 8] = 0xff;
    match parse(buf) {
        Err(GgufError::InvalidUtf8 { offset, .. }) => {
            assert_eq!(offset as usize, e.at("kv0.len") + 8)
        }
        r => panic!("{r:?}"),
    }
    // Alignment: not a power of two, wrong type; and a valid 64 that moves the data.
    for (ty, val) in [(T_U32, 48u32), (T_U32, 0), (T_STRING, 0)] {
        let mut d = Enc::default();
        d.raw(b"GGUF")
            .u32(3)
            .u64(0)
            .u64(1)
            .str("general.alignment")
            .u32(ty);
        if ty == T_STRING {
            d.str("32");
        } else {
            d.u32(val);
        }
        assert!(
            matches!(parse(d.buf), Err(GgufError::BadAlignment { .. })),
            "{ty} {val}"
        );
    }
    let mut d = Enc::default();
    d.raw(b"GGUF")
        .u32(3)
        .u64(1)
        .u64(1)
        .str("general.alignment")
        .u32(T_U32)
        .u32(64);
    d.str("t")
        .u32(1)
        .u64(4)
        .u32(0)
        .u64(0)
        .pad(64)
        .mark("data")
        .u64(1)
        .u64(2);
    let f = parse(d.buf.clone()).unwrap();
    assert_eq!((f.alignment(), f.data_offset()), (64, d.at("data")));
    assert_eq!(f.tensor_data(&f.tensors()[0]), &d.buf[d.at("data")..]);
}

/// Parses `buf` and checks that it fails with `TooLarge` in well under a second: the count
/// was refused before anything was read or allocated (a 2^60-element allocation would abort
/// the test process, and reading element by element would take far longer).
fn expect_too_large(buf: Vec<u8>, count: u64) {
    let t = Instant::now();
    let r = parse(buf);
    let dt = t.elapsed();
    match r {
        Err(GgufError::TooLarge { count: c, .. }) => assert_eq!(c, count),
        r => panic!("{r:?}"),
    }
    assert!(dt < Duration::from_millis(100), "took {dt:?}");
}

#[test]
fn absurd_counts_fail_fast() {
    let e = small_file();
    let mut buf = e.buf.clone();
    patch_u64(&mut buf, e.at("n_tensors"), 1 << 60);
    expect_too_large(buf, 1 << 60);
    let mut buf = e.buf.clone();
    patch_u64(&mut buf, e.at("n_kv"), u64::MAX);
    expect_too_large(buf, u64::MAX);
    let mut buf = e.buf.clone();
    patch_u64(&mut buf, e.at("kv0.len"), 1 << 62);
    expect_too_large(buf, 1 << 62);
    let mut buf = e.buf.clone();
    patch_u64(&mut buf, e.at("kv0"), 1 << 62); // key length
    expect_too_large(buf, 1 << 62);
    let mut buf = e.buf.clone();
    patch_u64(&mut buf, e.at("kv1.count"), 1 << 62);
    expect_too_large(buf, 1 << 62);
    let mut buf = e.buf.clone();
    patch_u64(&mut buf, e.at("t0"), 1 << 62); // tensor name length
    expect_too_large(buf, 1 << 62);
    // An array count that the rest of the file could hold only at 1 byte per element, for
    // 4-byte elements: refused too.
    let mut buf = e.buf.clone();
    let left = (buf.len() - e.at("kv1.count") - 8) as u64;
    patch_u64(&mut buf, e.at("kv1.count"), left);
    expect_too_large(buf, left);
}

#[test]
fn deeply_nested_arrays_are_refused() {
    // 10,000 arrays, each holding the next: a recursive parser without a limit would
    // overflow the stack.
    let depth = 10_000;
    let mut d = Enc::default();
    d.raw(b"GGUF").u32(3).u64(0).u64(1).str("deep").u32(T_ARRAY);
    for _ in 0..depth {
        d.u32(T_ARRAY).u64(1);
    }
    d.u32(T_U8).u64(0);
    assert!(matches!(parse(d.buf), Err(GgufError::TooDeep { .. })));
    // Moderate nesting is fine.
    let mut d = Enc::default();
    d.raw(b"GGUF")
        .u32(3)
        .u64(0)
        .u64(1)
        .str("nested")
        .u32(T_ARRAY);
    d.u32(T_ARRAY)
        .u64(1)
        .u32(T_ARRAY)
        .u64(1)
        .u32(T_U8)
        .u64(2)
        .raw(&[5, 6]);
    let f = parse(d.buf).unwrap();
    let inner = Value::Array(vec![Value::U8(5), Value::U8(6)]);
    assert_eq!(
        f.get("nested"),
        Some(&Value::Array(vec![Value::Array(vec![inner])]))
    );
}

// ---------------------------------------------------------------------------------------------
// The writer
// ---------------------------------------------------------------------------------------------

#[test]
fn writer_output_equals_the_hand_encoding() {
    let (a, b) = small_data();
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "test").unwrap();
    w.add_kv("test.list", vec![7i32, -8, 9]).unwrap();
    w.add_kv("test.f", 1.5f32).unwrap();
    w.add_tensor_info("a", DType::F32, &[4, 2]).unwrap();
    w.add_tensor_info("b", DType::Q8_0, &[32]).unwrap();
    let bytes = w
        .to_bytes(|info, out| out.write_all(if info.name == "a" { &a } else { &b }))
        .unwrap();
    assert_eq!(bytes, small_file().buf);
}

#[test]
fn a_file_without_tensors_has_no_padding() {
    // Even with a huge alignment (a vocab-only file ends right after its metadata).
    let mut w = GgufWriter::new();
    w.set_alignment(1 << 30).unwrap();
    let bytes = w.to_bytes(|_, _| Ok(())).unwrap();
    let mut e = Enc::default();
    e.raw(b"GGUF").u32(3).u64(0).u64(1);
    e.str("general.alignment").u32(T_U32).u32(1 << 30);
    assert_eq!(bytes, e.buf);
    assert_eq!(parse(bytes).unwrap().alignment(), 1 << 30);
}

fn all_value_types() -> Vec<(String, Value)> {
    let v = |k: &str, v: Value| (k.to_string(), v);
    vec![
        v("u8", Value::U8(200)),
        v("i8", Value::I8(-5)),
        v("u16", Value::U16(60_000)),
        v("i16", Value::I16(-30_000)),
        v("u32", Value::U32(4_000_000_000)),
        v("i32", Value::I32(-2_000_000_000)),
        v("u64", Value::U64(1 << 40)),
        v("i64", Value::I64(-(1 << 40))),
        v("f32", Value::F32(1.5)),
        v("f64", Value::F64(-2.25e-300)),
        v("bool.t", Value::Bool(true)),
        v("bool.f", Value::Bool(false)),
        v("string", Value::String("héllo ✓".into())),
        v("string.empty", Value::String(String::new())),
        v("arr.u8", Value::Array(vec![Value::U8(1), Value::U8(255)])),
        v(
            "arr.str",
            Value::Array(vec!["a".into(), "".into(), "ü".into()]),
        ),
        v(
            "arr.bool",
            Value::Array(vec![Value::Bool(true), Value::Bool(false)]),
        ),
        v(
            "arr.f64",
            Value::Array(vec![Value::F64(0.1), Value::F64(1e100)]),
        ),
        v("arr.empty", Value::Array(vec![])),
        v(
            "arr.nested",
            Value::Array(vec![
                Value::Array(vec![Value::I32(1), Value::I32(2)]),
                Value::Array(vec![]),
                Value::Array(vec![Value::String("x".into())]),
                Value::Array(vec![Value::Array(vec![Value::U64(3)])]),
            ]),
        ),
    ]
}

/// Tensors of several types and shapes with their byte sizes, worked out by hand.
const ROUND_TRIP_TENSORS: [(&str, DType, &[usize], usize); 7] = [
    ("f32.1d", DType::F32, &[7], 28),
    ("f16.2d", DType::F16, &[5, 3], 30),
    ("q4_0.3d", DType::Q4_0, &[64, 2, 3], 2 * 18 * 6),
    ("q8_0.4d", DType::Q8_0, &[32, 1, 2, 2], 34 * 4),
    ("q4_k", DType::Q4K, &[256, 2], 144 * 2),
    ("q6_k", DType::Q6K, &[512], 210 * 2),
    ("i32", DType::I32, &[3], 12),
];

fn test_bytes(seed: u32, n: usize) -> Vec<u8> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (s >> 16) as u8
        })
        .collect()
}

#[test]
fn round_trip_all_value_types_and_tensors() {
    for align in [32usize, 64] {
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", "rt").unwrap();
        if align != 32 {
            w.set_alignment(align).unwrap();
        }
        for (k, v) in all_value_types() {
            w.add_kv(k, v).unwrap();
        }
        let data: Vec<Vec<u8>> = ROUND_TRIP_TENSORS
            .iter()
            .enumerate()
            .map(|(i, t)| test_bytes(i as u32, t.3))
            .collect();
        for (name, dtype, ne, _) in ROUND_TRIP_TENSORS {
            w.add_tensor_info(name, dtype, ne).unwrap();
        }
        // Stream through a path, tensor by tensor.
        let dir = std::env::temp_dir().join(format!("ggrs-gguf-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("rt-{align}.gguf"));
        let mut asked = Vec::new();
        w.write_to_path(&path, |info, out| {
            asked.push(info.name.clone());
            let i = ROUND_TRIP_TENSORS
                .iter()
                .position(|t| t.0 == info.name)
                .unwrap();
            // Write in two pieces to exercise streaming.
            let (x, y) = data[i].split_at(data[i].len() / 2);
            out.write_all(x)?;
            out.write_all(y)
        })
        .unwrap();
        let names: Vec<&str> = ROUND_TRIP_TENSORS.iter().map(|t| t.0).collect();
        assert_eq!(asked, names);

        let f = GgufFile::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        // Empty now; the other alignment's pass makes it again.
        let _ = std::fs::remove_dir(&dir);
        assert_eq!(f.version(), 3);
        assert_eq!(f.alignment(), align);
        assert_eq!(f.data_offset() % align, 0);
        let mut expected = vec![("general.architecture".to_string(), Value::from("rt"))];
        if align != 32 {
            expected.push(("general.alignment".into(), Value::U32(align as u32)));
        }
        expected.extend(all_value_types());
        assert_eq!(f.metadata(), &expected[..]);
        assert_eq!(f.tensors().len(), ROUND_TRIP_TENSORS.len());
        let mut end = 0;
        for (i, (info, (name, dtype, ne, size))) in
            f.tensors().iter().zip(ROUND_TRIP_TENSORS).enumerate()
        {
            assert_eq!(info.name, name);
            assert_eq!(info.dtype, dtype);
            assert_eq!(info.shape(), ne);
            assert_eq!(info.n_dims, ne.len());
            assert_eq!(info.size, size);
            assert_eq!(info.offset % align as u64, 0);
            assert!(info.offset >= end, "tensors overlap");
            end = info.offset + size as u64;
            assert_eq!(f.tensor_data(info), &data[i][..], "{name}");
        }
        assert_eq!(
            f.data().bytes().len() as u64,
            f.data_offset() as u64 + end.next_multiple_of(align as u64)
        );
    }
}

#[test]
fn writer_refuses_bad_input() {
    let mut w = GgufWriter::new();
    w.add_kv("k", 1u32).unwrap();
    assert!(matches!(
        w.add_kv("k", 2u32),
        Err(GgufError::DuplicateKey { .. })
    ));
    w.set_kv("k", 3u32).unwrap();
    assert_eq!(w.get("k"), Some(&Value::U32(3)));
    let mixed = Value::Array(vec![Value::U8(1), Value::I8(1)]);
    assert!(matches!(
        w.add_kv("mixed", mixed),
        Err(GgufError::InvalidValue { .. })
    ));
    let nested_mixed = Value::Array(vec![Value::Array(vec![Value::U8(1), Value::Bool(true)])]);
    assert!(matches!(
        w.add_kv("nm", nested_mixed),
        Err(GgufError::InvalidValue { .. })
    ));
    assert!(matches!(
        w.set_alignment(48),
        Err(GgufError::BadAlignment { .. })
    ));
    assert!(matches!(
        w.add_kv("general.alignment", 64u64),
        Err(GgufError::BadAlignment { .. })
    ));
    assert_eq!(w.alignment(), 32);

    w.add_tensor_info("t", DType::F32, &[3]).unwrap();
    assert!(matches!(
        w.add_tensor_info("t", DType::F32, &[3]),
        Err(GgufError::DuplicateTensor { .. })
    ));
    assert!(matches!(
        w.add_tensor_info("q", DType::Q4_0, &[31]),
        Err(GgufError::BadShape { .. })
    ));
    assert!(matches!(
        w.add_tensor_info("z", DType::F32, &[]),
        Err(GgufError::BadShape { .. })
    ));
    assert!(matches!(
        w.add_tensor_info("5d", DType::F32, &[1; 5]),
        Err(GgufError::BadShape { .. })
    ));
    w.add_tensor_info("u", DType::F16, &[2]).unwrap();
    // Offsets follow the alignment, and move when it changes.
    assert_eq!(w.tensors()[1].offset, 32);
    w.set_alignment(128).unwrap();
    assert_eq!(w.tensors()[1].offset, 128);
    assert_eq!(w.data_size(), 256);

    // Wrong data sizes and missing tensors.
    let mut out = w.write_header(Vec::new()).unwrap();
    assert!(matches!(
        out.write_tensor(&[0; 11]),
        Err(GgufError::TensorData { .. })
    ));
    let mut out = w.write_header(Vec::new()).unwrap();
    assert!(matches!(
        out.write_tensor(&[0; 13]),
        Err(GgufError::TensorData { .. })
    ));
    let mut out = w.write_header(Vec::new()).unwrap();
    out.write_tensor(&[0; 12]).unwrap();
    assert_eq!(out.next_tensor().map(|t| t.name.as_str()), Some("u"));
    assert!(matches!(out.finish(), Err(GgufError::TensorData { tensor, .. }) if tensor == "u"));
    let mut out = w.write_header(Vec::new()).unwrap();
    out.write_tensor(&[1; 12]).unwrap();
    out.write_tensor(&[2; 4]).unwrap();
    assert!(matches!(
        out.write_tensor(&[]),
        Err(GgufError::TensorData { .. })
    ));
    let bytes = out.finish().unwrap();
    let f = parse(bytes).unwrap();
    assert_eq!(f.tensor_data(f.tensor("u").unwrap()), &[2; 4]);
    assert_eq!(f.tensor("u").unwrap().offset, 128);

    // A failed write leaves no file behind.
    let path = std::env::temp_dir().join(format!("ggrs-gguf-fail-{}.gguf", std::process::id()));
    let r = w.write_to_path(&path, |_, out| out.write_all(&[0; 3]));
    assert!(matches!(r, Err(GgufError::TensorData { .. })));
    assert!(!path.exists());
}

#[test]
fn open_reports_the_path() {
    let path = Path::new("/nonexistent/dir/model.gguf");
    match GgufFile::open(path) {
        Err(e @ GgufError::Io { .. }) => {
            assert!(e.to_string().contains("/nonexistent/dir/model.gguf"))
        }
        r => panic!("{r:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Reference files
// ---------------------------------------------------------------------------------------------

/// `shared/reference/<rel>`: the first `shared/reference` going up from this crate (the
/// repository may be a worktree nested deeper than the main checkout).
fn reference(rel: &str) -> PathBuf {
    // `GGRS_REFERENCE_DIR`: for a checkout that is not beside `shared/` (a worktree).
    std::env::var_os("GGRS_REFERENCE_DIR")
        .map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference"),
            PathBuf::from,
        )
        .join(rel)
}

#[test]
fn vocab_only_files() {
    let f = GgufFile::open(reference("vocab/ggml-vocab-llama-spm.gguf")).unwrap();
    assert_eq!(f.version(), 3);
    assert!(f.tensors().is_empty());
    assert_eq!(f.metadata().len(), 22);
    assert_eq!(
        f.get("general.architecture").and_then(Value::as_str),
        Some("llama")
    );
    assert_eq!(
        f.get("tokenizer.ggml.model").and_then(Value::as_str),
        Some("llama")
    );
    let tokens = f
        .get("tokenizer.ggml.tokens")
        .and_then(Value::as_array)
        .unwrap();
    assert_eq!(tokens.len(), 32000);
    assert_eq!(tokens[1].as_str(), Some("<s>"));
    assert_eq!(
        f.get("tokenizer.ggml.scores")
            .and_then(Value::as_array)
            .map(<[_]>::len),
        Some(32000)
    );
    assert_eq!(
        f.get("llama.vocab_size").and_then(Value::as_u32),
        Some(32000)
    );
    assert_eq!(
        f.get("tokenizer.ggml.bos_token_id").and_then(Value::as_u32),
        Some(1)
    );
    assert_eq!(
        f.get("tokenizer.ggml.add_bos_token")
            .and_then(Value::as_bool),
        Some(true)
    );
    let eps = f
        .get("llama.attention.layer_norm_rms_epsilon")
        .and_then(Value::as_f32)
        .unwrap();
    assert!((eps - 1e-5).abs() < 1e-10);

    let f = GgufFile::open(reference("vocab/ggml-vocab-qwen2.gguf")).unwrap();
    assert_eq!(
        f.get("general.architecture").and_then(Value::as_str),
        Some("qwen2")
    );
    assert_eq!(
        f.get("tokenizer.ggml.model").and_then(Value::as_str),
        Some("gpt2")
    );
    assert_eq!(
        f.get("tokenizer.ggml.pre").and_then(Value::as_str),
        Some("qwen2")
    );
    let tokens = f
        .get("tokenizer.ggml.tokens")
        .and_then(Value::as_array)
        .unwrap();
    assert_eq!(tokens.len(), 151_936);
    assert_eq!(tokens[0].as_str(), Some("!"));
    let merges = f
        .get("tokenizer.ggml.merges")
        .and_then(Value::as_array)
        .unwrap();
    assert_eq!(merges.len(), 151_387);
    assert_eq!(merges[0].as_str(), Some("Ġ Ġ"));
    assert!(f
        .get("tokenizer.chat_template")
        .and_then(Value::as_str)
        .is_some());
}

#[test]
fn tiny_models() {
    let f = GgufFile::open(reference("tiny/tiny-llama-f16.gguf")).unwrap();
    assert_eq!(
        f.get("general.architecture").and_then(Value::as_str),
        Some("llama")
    );
    assert_eq!(f.get("llama.block_count").and_then(Value::as_u32), Some(3));
    assert_eq!(
        f.get("llama.embedding_length").and_then(Value::as_u32),
        Some(128)
    );
    assert_eq!(
        f.get("llama.feed_forward_length").and_then(Value::as_u32),
        Some(352)
    );
    assert_eq!(
        f.get("llama.attention.head_count_kv")
            .and_then(Value::as_u32),
        Some(2)
    );
    assert_eq!(f.tensors().len(), 30);
    let shape = |name: &str| f.tensor(name).map(|t| (t.dtype, t.shape().to_vec()));
    assert_eq!(
        shape("token_embd.weight"),
        Some((DType::F16, vec![128, 32000]))
    );
    assert_eq!(shape("output_norm.weight"), Some((DType::F32, vec![128])));
    assert_eq!(
        shape("blk.0.attn_k.weight"),
        Some((DType::F16, vec![128, 64]))
    );
    assert_eq!(
        shape("blk.2.ffn_down.weight"),
        Some((DType::F16, vec![352, 128]))
    );
    // The tensors tile the data section in file order, as llama.cpp lays them out.
    let mut next = 0u64;
    for t in f.tensors() {
        assert_eq!(t.offset, next, "{}", t.name);
        next = (t.offset + t.size as u64).next_multiple_of(32);
    }
    assert_eq!(
        f.data_offset() as u64 + next,
        std::fs::metadata(reference("tiny/tiny-llama-f16.gguf"))
            .unwrap()
            .len()
    );

    let f = GgufFile::open(reference("tiny/tiny-chatglm-f16.gguf")).unwrap();
    assert_eq!(
        f.get("general.architecture").and_then(Value::as_str),
        Some("chatglm")
    );
    assert_eq!(
        f.get("tokenizer.ggml.add_bos_token")
            .and_then(Value::as_bool),
        Some(false)
    );
    assert_eq!(
        f.get("chatglm.rope.dimension_count")
            .and_then(Value::as_u32),
        Some(16)
    );
    let shape = |name: &str| f.tensor(name).map(|t| (t.dtype, t.shape().to_vec()));
    assert_eq!(
        shape("blk.0.attn_qkv.weight"),
        Some((DType::F16, vec![128, 256]))
    );
    assert_eq!(shape("blk.0.attn_qkv.bias"), Some((DType::F32, vec![256])));
    assert_eq!(
        shape("blk.0.ffn_up.weight"),
        Some((DType::F16, vec![128, 640]))
    );
}

fn f16_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

fn nmse(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let err: f64 = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    err / norm
}

#[test]
fn loaded_tensors_compute_like_hand_converted_bytes() {
    let f = GgufFile::open(reference("tiny/tiny-llama-f16.gguf")).unwrap();
    let mut ctx = Context::with_mem_size(Context::mem_size_for(16, 1 << 20));
    let embd = f.load_tensor(&mut ctx, "token_embd.weight").unwrap();
    assert_eq!(ctx.get_tensor("token_embd.weight"), Some(embd));
    assert_eq!(ctx.shape(embd).unwrap(), [128, 32000, 1, 1]);
    assert!(ctx.meta(embd).unwrap().is_external());
    // The tensor's data is the mapping itself, not a copy.
    let info = f.tensor("token_embd.weight").unwrap();
    assert_eq!(
        ctx.data(embd).unwrap().as_ptr(),
        f.tensor_data(info).as_ptr()
    );

    // get_rows against rows converted from the file's bytes by hand.
    let table = f16_values(f.tensor_data(info));
    let ids = [0i32, 1, 12_345, 31_999, 1];
    let idt = ctx.new_tensor_1d(DType::I32, ids.len()).unwrap();
    ctx.set_i32(idt, &ids).unwrap();
    let rows = ctx.get_rows(embd, idt).unwrap();

    // mul_mat: y = x · Wqᵀ with Wq [128, 128] (F16) and x [128, 3].
    let wq = f.load_tensor(&mut ctx, "blk.0.attn_q.weight").unwrap();
    let w = f16_values(f.tensor_data(f.tensor("blk.0.attn_q.weight").unwrap()));
    let x: Vec<f32> = (0..128 * 3)
        .map(|i| ((i * 7 % 23) as f32 - 11.0) * 0.1)
        .collect();
    let xt = ctx.new_tensor_2d(DType::F32, 128, 3).unwrap();
    ctx.set_f32(xt, &x).unwrap();
    let y = ctx.mul_mat(wq, xt).unwrap();

    let mut g = Graph::build(&ctx, rows).unwrap();
    g.build_forward_expand(&ctx, y).unwrap();
    compute_graph(&mut ctx, &g, 2).unwrap();

    let got = ctx.to_f32_vec(rows).unwrap();
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&r| table[r as usize * 128..][..128].to_vec())
        .collect();
    assert_eq!(got, want);

    let mut want = vec![0f64; 128 * 3];
    for j in 0..3 {
        for i in 0..128 {
            want[j * 128 + i] = (0..128)
                .map(|k| w[i * 128 + k] as f64 * x[j * 128 + k] as f64)
                .sum();
        }
    }
    let got = ctx.to_f32_vec(y).unwrap();
    // Activations may be rounded to f16 for the dot products: ~1e-7 expected; a wrong
    // offset or layout gives ~1.
    let e = nmse(&got, &want);
    assert!(e < 1e-5, "nmse {e}");

    assert!(matches!(
        f.load_tensor(&mut ctx, "nope"),
        Err(GgufError::TensorNotFound { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// The real model, if `scripts/fetch-model.sh` has fetched it
// ---------------------------------------------------------------------------------------------

fn model_path() -> PathBuf {
    let dir = std::env::var_os("GGRS_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cache/ggrs/models")
        });
    dir.join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
}

/// Extracts `"field": value` pairs of one tensor from the reference JSON (flat enough to
/// need no JSON parser): returns (type, ne, sha256) per tensor name.
fn reference_tensors(file: &str) -> Vec<(String, String, Vec<usize>, String)> {
    let text = std::fs::read_to_string(reference("qwen05b/tensor-sha256.json")).unwrap();
    let start = text.find(&format!("\"{file}\"")).unwrap();
    let body = &text[start..];
    let body = &body[body.find('{').unwrap() + 1..];
    let mut out = Vec::new();
    let mut rest = body;
    // Each entry: "name": {"type": "F16", "ne": [a, b], "sha256": "..."}
    while let Some(q) = rest.find('"') {
        let close = rest[q + 1..].find('"').unwrap() + q + 1;
        let name = rest[q + 1..close].to_string();
        let obj_end = rest[close..].find('}').unwrap() + close;
        let obj = &rest[close..obj_end];
        let field = |key: &str| {
            let k = obj.find(&format!("\"{key}\"")).unwrap() + key.len() + 2;
            obj[k..].trim_start_matches([':', ' '])
        };
        let ty = field("type").trim_start_matches('"');
        let ty = ty[..ty.find('"').unwrap()].to_string();
        let ne = field("ne");
        let ne: Vec<usize> = ne[1..ne.find(']').unwrap()]
            .split(',')
            .map(|s| s.trim().parse().unwrap())
            .collect();
        let sha = field("sha256").trim_start_matches('"');
        let sha = sha[..sha.find('"').unwrap()].to_string();
        out.push((name, ty, ne, sha));
        rest = &rest[obj_end + 1..];
        if rest.trim_start().starts_with('}') {
            break;
        }
    }
    out
}

#[test]
fn qwen_source_model_if_present() {
    let path = model_path();
    if !path.exists() {
        println!(
            "skipped: {} not found (run scripts/fetch-model.sh)",
            path.display()
        );
        return;
    }
    let t = Instant::now();
    let f = GgufFile::open(&path).unwrap();
    println!("GgufFile::open({}) took {:?}", path.display(), t.elapsed());
    assert_eq!(
        f.get("general.architecture").and_then(Value::as_str),
        Some("qwen2")
    );
    assert_eq!(f.get("qwen2.block_count").and_then(Value::as_u32), Some(24));
    assert_eq!(
        f.get("qwen2.embedding_length").and_then(Value::as_u32),
        Some(896)
    );
    assert_eq!(
        f.get("qwen2.attention.head_count").and_then(Value::as_u32),
        Some(14)
    );
    assert_eq!(
        f.get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .map(<[_]>::len),
        Some(151_936)
    );

    // Shapes agree with the listing of the derived files; F32 tensors (norms and biases,
    // which requantizing copies) have the same bytes.
    let listing = reference_tensors("f16");
    assert_eq!(f.tensors().len(), listing.len());
    let mut f32_checked = 0;
    for (name, ty, ne, sha) in &listing {
        let info = f.tensor(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(info.shape(), &ne[..], "{name}");
        if ty == "F32" {
            assert_eq!(info.dtype, DType::F32, "{name}");
            assert_eq!(sha256_hex(f.tensor_data(info)), *sha, "{name}");
            f32_checked += 1;
        }
    }
    assert_eq!(f32_checked, 121);
    let types: std::collections::BTreeSet<&str> =
        f.tensors().iter().map(|t| t.dtype.name()).collect();
    assert_eq!(
        types.into_iter().collect::<Vec<_>>(),
        ["f32", "q4_K", "q5_0", "q6_K", "q8_0"]
    );
    let t = f.tensor("token_embd.weight").unwrap();
    assert_eq!((t.dtype, t.shape()), (DType::Q5_0, &[896, 151_936][..]));
    let t = f.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!((t.dtype, t.shape()), (DType::Q5_0, &[896, 896][..]));

    // A Q8_0 matrix through get_rows, against blocks dequantized by hand (d · q).
    if ggrs_core::types::traits(DType::Q8_0).to_f32.is_none() {
        println!("note: Q8_0 has no f32 conversion in this build yet; get_rows check skipped");
        return;
    }
    let name = "blk.0.attn_v.weight";
    let info = f.tensor(name).unwrap();
    assert_eq!((info.dtype, info.shape()), (DType::Q8_0, &[896, 128][..]));
    let bytes = f.tensor_data(info);
    let row = |r: usize| -> Vec<f32> {
        bytes[r * 28 * 34..][..28 * 34]
            .chunks_exact(34)
            .flat_map(|b| {
                let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
                b[2..].iter().map(move |&q| d * q as i8 as f32)
            })
            .collect()
    };
    let mut ctx = Context::with_mem_size(Context::mem_size_for(4, 1 << 16));
    let w = f.load_tensor(&mut ctx, name).unwrap();
    let ids = [0i32, 127, 64];
    let idt = ctx.new_tensor_1d(DType::I32, 3).unwrap();
    ctx.set_i32(idt, &ids).unwrap();
    let rows = ctx.get_rows(w, idt).unwrap();
    let g = Graph::build(&ctx, rows).unwrap();
    compute_graph(&mut ctx, &g, 2).unwrap();
    let want: Vec<f32> = ids.iter().flat_map(|&r| row(r as usize)).collect();
    assert_eq!(ctx.to_f32_vec(rows).unwrap(), want);
}

/// SHA-256 (FIPS 180-4), written plainly for the reference hashes.
fn sha256_hex(data: &[u8]) -> String {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([
                block[4 * i],
                block[4 * i + 1],
                block[4 * i + 2],
                block[4 * i + 3],
            ]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    h.iter().map(|x| format!("{x:08x}")).collect()
}

#[test]
fn sha256_known_answers() {
    assert_eq!(
        sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        sha256_hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    let long = vec![b'a'; 1000];
    assert_eq!(
        sha256_hex(&long),
        "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"
    );
}
