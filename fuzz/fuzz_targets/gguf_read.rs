//! Fuzzes the GGUF reader: any bytes must parse to a file or to an error, never to a panic,
//! an out-of-bounds read or a huge allocation. A file that parses is then walked (every
//! value, every tensor's bytes), loaded into a context, and written again with `GgufWriter`;
//! the rewritten file must parse to the same metadata, tensor shapes and tensor bytes.

#![no_main]

use std::sync::Arc;

use ggrs_core::gguf::{GgufFile, GgufWriter, Value};
use ggrs_core::Context;
use libfuzzer_sys::fuzz_target;

/// Visits every value (so that nothing parsed is left untouched) and folds it into `acc`.
fn touch(v: &Value, acc: &mut u64) {
    *acc = acc.wrapping_add(v.type_name().len() as u64);
    match v {
        Value::String(s) => *acc = acc.wrapping_add(s.len() as u64),
        Value::Array(items) => items.iter().for_each(|i| touch(i, acc)),
        other => {
            *acc ^= other.as_u64().unwrap_or(0) ^ other.as_f32().map_or(0, f32::to_bits) as u64;
        }
    }
}

/// Value equality with floats compared bit for bit (NaN is a value like any other here).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::F32(x), Value::F32(y)) => x.to_bits() == y.to_bits(),
        (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        _ => a == b,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(Arc::new(data.to_vec())) else {
        return;
    };
    let mut acc = 0u64;
    for (k, v) in file.metadata() {
        assert!(file.get(k).is_some());
        touch(v, &mut acc);
    }
    for t in file.tensors() {
        let bytes = file.tensor_data(t);
        assert_eq!(bytes.len(), t.size);
        assert_eq!(file.tensor(&t.name), Some(t));
        assert_eq!(t.offset % file.alignment() as u64, 0);
        acc ^= bytes.iter().fold(0u64, |a, &b| a.rotate_left(5) ^ b as u64);
    }
    std::hint::black_box(acc);

    // Loading may fail (data misaligned in memory for its type), but must not panic.
    let n = file.tensors().len().min(16);
    let mut ctx = Context::with_mem_size(Context::mem_size_for(n, 0));
    for t in &file.tensors()[..n] {
        let _ = file.load_tensor(&mut ctx, &t.name);
    }

    // Write it again and read it back.
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata() {
        // The reader accepts any integer type for `general.alignment`; the writer wants u32.
        if w.add_kv(k.clone(), v.clone()).is_err() {
            return;
        }
    }
    for t in file.tensors() {
        w.add_tensor_info(t.name.clone(), t.dtype, t.shape())
            .expect("a shape the reader accepted");
    }
    let bytes = w
        .to_bytes(|info, out| {
            let src = file.tensor(&info.name).expect("same names");
            out.write_all(file.tensor_data(src))
        })
        .expect("writing to memory");
    let again = GgufFile::from_bytes(Arc::new(bytes)).expect("the writer's output parses");
    assert_eq!(again.metadata().len(), file.metadata().len());
    for ((ka, va), (kb, vb)) in again.metadata().iter().zip(file.metadata()) {
        assert_eq!(ka, kb);
        assert!(same(va, vb), "{ka}: {va:?} != {vb:?}");
    }
    assert_eq!(again.tensors().len(), file.tensors().len());
    for (a, b) in again.tensors().iter().zip(file.tensors()) {
        assert_eq!(
            (&a.name, a.dtype, a.ne, a.n_dims, a.size),
            (&b.name, b.dtype, b.ne, b.n_dims, b.size)
        );
        assert_eq!(again.tensor_data(a), file.tensor_data(b));
    }
});
