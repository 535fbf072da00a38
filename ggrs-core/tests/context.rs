//! The context, graph and executor around the ops: arena limits and measuring, checkpoints,
//! handle validation, every class of bad input (each must be a typed error, never a
//! panic), external data, abort, profiling, and graph construction.

use crate::common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use ggrs_core::{Context, ContextParams, DType, Error, Executor, Graph, Result, Tensor};

const MB: usize = 1 << 20;

/// Computes `out` on `n` threads.
fn compute(ctx: &mut Context, out: Tensor, n: usize) -> Result<()> {
    let g = Graph::build(ctx, out)?;
    Executor::new(n).compute(ctx, &g)
}

// -------------------------------------------------------------------------------------------
// Arena size: exhaustion, measuring
// -------------------------------------------------------------------------------------------

#[test]
fn arena_exhaustion_reports_needed_and_available() {
    let mut ctx = Context::with_mem_size(64 * 1024);
    let a = ctx.new_tensor_2d(DType::F32, 17, 3).unwrap();
    let before = ctx.used_mem();
    let cap = ctx.capacity();
    assert_eq!(cap, 64 * 1024);

    // 4 MiB of data cannot fit in 64 KiB.
    let e = expect_err(
        "1024×1024 f32 in 64 KiB",
        ctx.new_tensor_2d(DType::F32, 1024, 1024),
    );
    match &e {
        Error::OutOfMemory {
            needed,
            available,
            capacity,
            ..
        } => {
            assert!(*needed >= 4 * MB, "needed {needed}");
            assert!(*available < *needed);
            assert!(*available <= cap - before, "available {available}");
            assert_eq!(*capacity, cap);
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("needed") && msg.contains("available"), "{msg}");

    // A failed allocation takes nothing, and the context stays usable.
    assert_eq!(ctx.used_mem(), before);
    let b = ctx.new_tensor_2d(DType::F32, 17, 3).unwrap();
    let c = ctx.add(a, b).unwrap();
    ctx.set_f32(a, &[1.0; 51]).unwrap();
    ctx.set_f32(b, &[2.0; 51]).unwrap();
    compute(&mut ctx, c, 2).unwrap();
    assert_eq!(ctx.to_f32_vec(c).unwrap(), vec![3.0; 51]);

    // Fill the arena: large tensors, then one-element ones, until not even those fit.
    for len in [1000, 1] {
        let mut made = 0;
        loop {
            match ctx.new_tensor_1d(DType::F32, len) {
                Ok(_) => made += 1,
                Err(Error::OutOfMemory { .. }) => break,
                Err(other) => panic!("expected OutOfMemory, got {other:?}"),
            }
            assert!(made < 100_000, "the arena never filled");
        }
    }
    // Op builders that need data now fail the same way, without side effects.
    let used = ctx.used_mem();
    let n_tensors = ctx.n_tensors();
    for r in [
        ctx.add(a, b),
        ctx.mul_mat(a, b),
        ctx.soft_max(a),
        ctx.cast(a, DType::F16),
    ] {
        match r {
            Err(Error::OutOfMemory {
                needed, available, ..
            }) => assert!(needed > available),
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
        assert_eq!(ctx.used_mem(), used);
        assert_eq!(ctx.n_tensors(), n_tensors);
    }
    // Views take metadata only; they run out too, with an error rather than a panic.
    let mut made = 0;
    let e = loop {
        match ctx.transpose(a) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(made < 100_000, "views never ran out");
    };
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");
    assert!(ctx.used_mem() <= ctx.capacity());
    // Data already in the arena is untouched by all this.
    assert_eq!(ctx.to_f32_vec(c).unwrap(), vec![3.0; 51]);
}

/// Builds a small graph touching several op kinds. Sets no data (it also runs in a measure
/// context); returns (x, w, emb, ids, out).
fn build_model(ctx: &mut Context) -> Result<[Tensor; 5]> {
    let x = ctx.new_tensor_2d(DType::F32, 17, 5)?;
    let w = ctx.new_tensor_2d(DType::F16, 17, 9)?;
    let emb = ctx.new_tensor_2d(DType::F32, 17, 11)?;
    let ids = ctx.new_tensor_1d(DType::I32, 3)?;
    let g = ctx.get_rows(emb, ids)?; // [17, 3]
    let x2 = ctx.concat(x, g, 1)?; // [17, 8]
    let n = ctx.rms_norm(x2, 1e-6)?;
    let y = ctx.mul_mat(w, n)?; // [9, 8]
    let t = ctx.transpose(y)?; // [8, 9]
    let c = ctx.cont(t)?;
    let s = ctx.soft_max(c)?; // each of the 9 rows sums to 1
    let out = ctx.sum(s)?;
    Ok([x, w, emb, ids, out])
}

#[test]
fn measure_mode_gives_the_exact_size() {
    let mut m = Context::measure();
    assert!(m.is_no_alloc());
    build_model(&mut m).unwrap();
    let need = m.used_mem();
    assert!(need > 0);
    // Tensors of a measure context have no data.
    let t = m.tensors().next().unwrap();
    assert!(matches!(m.data(t), Err(Error::NoData { .. })));

    // Exactly that size builds and computes the same graph.
    let mut ctx = Context::with_mem_size(need);
    let [x, w, emb, ids, out] = build_model(&mut ctx).unwrap();
    assert_eq!(ctx.used_mem(), need);
    let mut rng = Rng::new(7);
    ctx.set_f32(x, &rng.vec(85, -1.0, 1.0)).unwrap();
    ctx.set_f32(w, &rng.vec(153, -1.0, 1.0)).unwrap();
    ctx.set_f32(emb, &rng.vec(187, -1.0, 1.0)).unwrap();
    ctx.set_i32(ids, &[10, 0, 4]).unwrap();
    compute(&mut ctx, out, 3).unwrap();
    let s = ctx.get_f32_scalar(out).unwrap();
    assert!((s - 9.0).abs() < 1e-4, "sum of 9 softmax rows = {s}");

    // 64 bytes less does not.
    let mut small = Context::with_mem_size(need - 64);
    let e = expect_err("64 bytes short", build_model(&mut small));
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");

    // A no_alloc context with a limit measures and fails the same way.
    let mut lim = Context::new(ContextParams {
        mem_size: need - 64,
        no_alloc: true,
    });
    assert!(matches!(
        build_model(&mut lim),
        Err(Error::OutOfMemory { .. })
    ));
}

// -------------------------------------------------------------------------------------------
// Handles: checkpoints, rewinds, other contexts
// -------------------------------------------------------------------------------------------

#[test]
fn checkpoint_rewind_frees_memory_and_invalidates_handles() {
    // Room for the weights and about one step's graph, not for two steps.
    let mut ctx = Context::with_mem_size(64 * 1024);
    let w = ctx.new_tensor_2d(DType::F32, 17, 9).unwrap();
    ctx.set_name(w, "w").unwrap();
    let wv: Vec<f32> = (0..153).map(|i| (i as f32 * 0.1).sin()).collect();
    ctx.set_f32(w, &wv).unwrap();
    let cp = ctx.checkpoint();
    let (used0, n0) = (ctx.used_mem(), ctx.n_tensors());

    let mut step_used = None;
    for step in 0..50 {
        let x = ctx.new_tensor_2d(DType::F32, 17, 4).unwrap();
        let big = ctx.new_tensor_1d(DType::F32, 12000).unwrap(); // 48 KB: two do not fit
        let y = ctx.mul_mat(w, x).unwrap();
        let xv: Vec<f32> = (0..68).map(|i| (i + step) as f32 * 0.01).collect();
        ctx.set_f32(x, &xv).unwrap();
        compute(&mut ctx, y, 2).unwrap();
        let got = ctx.to_f32_vec(y).unwrap();
        for j in 0..4 {
            for i in 0..9 {
                let want: f64 = (0..17)
                    .map(|k| wv[k + 17 * i] as f64 * xv[k + 17 * j] as f64)
                    .sum();
                assert!((got[i + 9 * j] as f64 - want).abs() < 1e-5);
            }
        }
        // The same step takes the same memory every time: the rewind freed it.
        let used = ctx.used_mem();
        assert_eq!(*step_used.get_or_insert(used), used, "step {step}");
        assert!(used > used0);

        ctx.rewind(cp).unwrap();
        assert_eq!(ctx.used_mem(), used0);
        assert_eq!(ctx.n_tensors(), n0);
        // Handles made after the checkpoint are invalid now…
        for t in [x, big, y] {
            assert!(matches!(ctx.meta(t), Err(Error::InvalidTensor { .. })));
        }
        assert!(matches!(ctx.add(y, y), Err(Error::InvalidTensor { .. })));
        assert!(matches!(
            ctx.mul_mat(w, x),
            Err(Error::InvalidTensor { .. })
        ));
        assert!(matches!(
            ctx.to_f32_vec(y),
            Err(Error::InvalidTensor { .. })
        ));
        assert!(matches!(
            ctx.set_f32(x, &xv),
            Err(Error::InvalidTensor { .. })
        ));
        assert!(matches!(
            Graph::build(&ctx, y),
            Err(Error::InvalidTensor { .. })
        ));
        // …while the weights are intact.
        assert_eq!(ctx.to_f32_vec(w).unwrap(), wv);
        assert_eq!(ctx.get_tensor("w"), Some(w));
    }

    // A checkpoint of another context, or one already rewound past, is refused.
    let other = Context::with_mem_size(4096);
    assert!(matches!(
        ctx.rewind(other.checkpoint()),
        Err(Error::InvalidArgument { .. })
    ));
    let x = ctx.new_tensor_1d(DType::F32, 3).unwrap();
    let late = ctx.checkpoint();
    ctx.rewind(cp).unwrap();
    assert!(matches!(
        ctx.rewind(late),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(ctx.meta(x), Err(Error::InvalidTensor { .. })));
}

#[test]
fn a_handle_from_another_context_is_rejected() {
    let mut c1 = Context::with_mem_size(MB);
    let mut c2 = Context::with_mem_size(MB);
    let a1 = c1.new_tensor_2d(DType::F32, 4, 3).unwrap();
    let a2 = c2.new_tensor_2d(DType::F32, 4, 3).unwrap();
    // Both are tensor #0 of their context: the index alone does not tell them apart.
    assert_eq!(a1.index(), a2.index());
    let is_foreign = |r: Result<Tensor>| matches!(r, Err(Error::InvalidTensor { .. }));
    assert!(is_foreign(c2.add(a2, a1)));
    assert!(is_foreign(c2.add(a1, a2)));
    assert!(is_foreign(c2.mul_mat(a1, a2)));
    assert!(is_foreign(c2.transpose(a1)));
    assert!(is_foreign(c2.cpy(a2, a1)));
    assert!(matches!(c2.meta(a1), Err(Error::InvalidTensor { .. })));
    assert!(matches!(
        c2.to_f32_vec(a1),
        Err(Error::InvalidTensor { .. })
    ));
    assert!(matches!(
        Graph::build(&c2, a1),
        Err(Error::InvalidTensor { .. })
    ));
    // A graph built in one context cannot be computed in another.
    let s = c1.scale(a1, 2.0).unwrap();
    let g = Graph::build(&c1, s).unwrap();
    let e = expect_err("foreign graph", Executor::new(2).compute(&mut c2, &g));
    assert!(matches!(e, Error::InvalidTensor { .. }), "{e:?}");
}

// -------------------------------------------------------------------------------------------
// Bad shapes, views and layouts
// -------------------------------------------------------------------------------------------

fn is_shape_mismatch<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(Error::ShapeMismatch { .. }))
}

#[test]
fn shape_mismatches_are_reported() {
    let mut ctx = Context::with_mem_size(MB);
    let f32 = DType::F32;
    let a = ctx.new_tensor(f32, &[17, 3, 2]).unwrap();
    // Binary ops: b must tile a.
    for nb in [[4usize, 3, 2], [17, 2, 2], [17, 3, 4], [34, 3, 2]] {
        let b = ctx.new_tensor(f32, &nb).unwrap();
        assert!(is_shape_mismatch(ctx.add(a, b)), "add {nb:?}");
        assert!(is_shape_mismatch(ctx.sub(a, b)), "sub {nb:?}");
        assert!(is_shape_mismatch(ctx.mul(a, b)), "mul {nb:?}");
        assert!(is_shape_mismatch(ctx.div(a, b)), "div {nb:?}");
    }
    let e = expect_err("add", {
        let b = ctx.new_tensor(f32, &[4, 3]).unwrap();
        ctx.add(a, b)
    });
    assert!(e.to_string().contains("ADD"), "{e}");

    // mul_mat: the shared dimension k, and the batch broadcast.
    let w = ctx.new_tensor_2d(f32, 17, 5).unwrap();
    let x = ctx.new_tensor_2d(f32, 16, 3).unwrap();
    assert!(is_shape_mismatch(ctx.mul_mat(w, x)));
    let w4 = ctx.new_tensor(f32, &[8, 5, 4]).unwrap();
    let x6 = ctx.new_tensor(f32, &[8, 3, 6]).unwrap();
    assert!(is_shape_mismatch(ctx.mul_mat(w4, x6)));

    // concat: every axis but `dim` must agree.
    let c1 = ctx.new_tensor(f32, &[5, 3, 2]).unwrap();
    let c2 = ctx.new_tensor(f32, &[5, 4, 2]).unwrap();
    assert!(is_shape_mismatch(ctx.concat(c1, c2, 0)));
    assert!(is_shape_mismatch(ctx.concat(c1, c2, 2)));
    assert!(ctx.concat(c1, c2, 1).is_ok());
    assert!(matches!(
        ctx.concat(c1, c2, 4),
        Err(Error::InvalidArgument { .. })
    ));

    // get_rows: ids must be [n, a.ne[2], a.ne[3]].
    let emb = ctx.new_tensor(f32, &[17, 10, 2]).unwrap();
    let ids1 = ctx.new_tensor(DType::I32, &[3]).unwrap();
    let ids3 = ctx.new_tensor(DType::I32, &[3, 3]).unwrap();
    let ids4 = ctx.new_tensor(DType::I32, &[3, 2, 1, 2]).unwrap();
    assert!(is_shape_mismatch(ctx.get_rows(emb, ids1)));
    assert!(is_shape_mismatch(ctx.get_rows(emb, ids3)));
    assert!(is_shape_mismatch(ctx.get_rows(emb, ids4)));
    let fids = ctx.new_tensor(f32, &[3, 2]).unwrap();
    assert!(matches!(
        ctx.get_rows(emb, fids),
        Err(Error::UnsupportedType { .. })
    ));

    // set_rows: src rows must match dst rows; ids must match src.
    let dst = ctx.new_tensor(DType::F16, &[17, 10]).unwrap();
    let src_bad = ctx.new_tensor(f32, &[16, 2]).unwrap();
    let src = ctx.new_tensor(f32, &[17, 2]).unwrap();
    let ids2 = ctx.new_tensor(DType::I32, &[2]).unwrap();
    assert!(is_shape_mismatch(ctx.set_rows(dst, src_bad, ids2)));
    assert!(is_shape_mismatch(ctx.set_rows(dst, src, ids1)));

    // Other contracts.
    let odd = ctx.new_tensor(f32, &[17, 2]).unwrap();
    assert!(is_shape_mismatch(ctx.swiglu(odd)));
    let g = ctx.new_tensor(f32, &[8, 2]).unwrap();
    assert!(is_shape_mismatch(ctx.swiglu_split(g, odd)));
    let s = ctx.new_tensor(f32, &[17, 4]).unwrap();
    let short_mask = ctx.new_tensor(f32, &[17, 3]).unwrap();
    assert!(is_shape_mismatch(ctx.soft_max_ext(
        s,
        Some(short_mask),
        1.0
    )));
    let q = ctx.new_tensor(f32, &[8, 2, 5]).unwrap();
    let pos = ctx.new_tensor(DType::I32, &[4]).unwrap();
    assert!(is_shape_mismatch(ctx.rope(
        q,
        pos,
        8,
        ggrs_core::RopeMode::Neox
    )));
    let pos5 = ctx.new_tensor(DType::I32, &[5]).unwrap();
    assert!(matches!(
        ctx.rope(q, pos5, 10, ggrs_core::RopeMode::Neox),
        Err(Error::InvalidArgument { .. })
    ));
    let big = ctx.new_tensor(f32, &[4, 4]).unwrap();
    assert!(is_shape_mismatch(ctx.repeat(big, odd)));
    // A target too large to address: an error, not an overflow.
    let one = ctx.new_tensor(f32, &[1]).unwrap();
    assert!(matches!(
        ctx.repeat_to(one, [usize::MAX / 2, 3, 1, 1]),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(is_shape_mismatch(ctx.cpy(odd, big)));
}

#[test]
fn invalid_views_are_reported() {
    let mut ctx = Context::with_mem_size(MB);
    let a = ctx.new_tensor(DType::F32, &[17, 3, 2]).unwrap(); // 102 values
    let is_view_err = |r: Result<Tensor>| matches!(r, Err(Error::InvalidView { .. }));

    // Out of bounds.
    assert!(is_view_err(ctx.view_1d(a, 103, 0)));
    assert!(is_view_err(ctx.view_1d(a, 10, 93 * 4)));
    assert!(ctx.view_1d(a, 10, 92 * 4).is_ok());
    assert!(is_view_err(ctx.view_2d(a, 17, 7, 17 * 4, 0)));
    assert!(is_view_err(ctx.view_3d(a, 17, 3, 2, 17 * 4, 52 * 4, 0)));
    assert!(is_view_err(ctx.view_4d(a, [17, 3, 2, 2], 68, 204, 408, 0)));
    // A view of a view is checked against the tensor that owns the data.
    let half = ctx.view_1d(a, 51, 51 * 4).unwrap();
    assert!(is_view_err(ctx.view_1d(half, 2, 50 * 4)));
    assert!(ctx.view_1d(half, 1, 50 * 4).is_ok());
    // Misaligned for the type.
    assert!(is_view_err(ctx.view_1d(a, 4, 2)));

    // Absurd sizes, strides and offsets: errors, never an arithmetic overflow.
    let huge = usize::MAX;
    assert!(is_view_err(ctx.view_1d(a, 1, huge - 3)));
    assert!(is_view_err(ctx.view_1d(a, huge / 2, 0)));
    assert!(is_view_err(ctx.view_2d(a, 2, huge / 8, 8, 0)));
    assert!(is_view_err(ctx.view_3d(a, 2, 2, huge / 8, 8, 16, 0)));
    // A span that wraps around to a small number must not pass the bounds check.
    assert!(is_view_err(ctx.view_4d(a, [1, 2, 1, 1], huge - 3, 0, 0, 0)));
    assert!(is_view_err(ctx.view(
        a,
        [2, 1, 1, 1],
        [huge - 3, 0, 0, 0],
        0
    )));
    assert!(is_view_err(ctx.reshape_2d(a, huge / 2 + 1, 2)));
    assert!(is_view_err(ctx.reshape_4d(a, huge, huge, 1, 1)));

    // Bad permutations.
    for axes in [[0, 0, 1, 2], [0, 1, 2, 4], [3, 2, 1, 1]] {
        assert!(is_view_err(ctx.permute(a, axes)), "{axes:?}");
    }

    // Reshape: wrong element count; non-contiguous source.
    assert!(is_view_err(ctx.reshape_2d(a, 17, 5)));
    assert!(is_view_err(ctx.reshape(a, &[])));
    let t = ctx.transpose(a).unwrap();
    assert!(matches!(ctx.reshape_1d(t, 102), Err(Error::Layout { .. })));
    let c = ctx.cont(t).unwrap();
    assert!(ctx.reshape_1d(c, 102).is_ok());

    // Layout demands of ops: mul_mat's src0 rows, set_rows' destination rows.
    let x = ctx.new_tensor(DType::F32, &[3, 4]).unwrap();
    let e = expect_err("mul_mat transposed src0", ctx.mul_mat(t, x));
    assert!(matches!(e, Error::Layout { .. }), "{e:?}");
    assert!(e.to_string().contains("cont"), "{e}");
    let dst = ctx.new_tensor(DType::F32, &[3, 17]).unwrap();
    let dt = ctx.transpose(dst).unwrap(); // [17, 3], rows strided
    let src = ctx.new_tensor(DType::F32, &[17, 1]).unwrap();
    let ids = ctx.new_tensor(DType::I32, &[1]).unwrap();
    assert!(matches!(
        ctx.set_rows(dt, src, ids),
        Err(Error::Layout { .. })
    ));
}

// -------------------------------------------------------------------------------------------
// Errors at compute time
// -------------------------------------------------------------------------------------------

#[test]
fn out_of_range_ids_fail_at_compute_time() {
    for n in THREADS {
        for bad in [10, -1, i32::MAX, i32::MIN] {
            // get_rows
            let mut ctx = Context::with_mem_size(MB);
            let emb = ctx.new_tensor_2d(DType::F16, 17, 10).unwrap();
            ctx.set_f32(emb, &[0.5; 170]).unwrap();
            let ids = ids_leaf(&mut ctx, [5, 1, 1, 1], &[0, 9, bad, 3, 1]).unwrap();
            let out = ctx.get_rows(emb, ids).unwrap();
            let e = expect_err("get_rows", compute(&mut ctx, out, n));
            assert_eq!(
                e,
                Error::IndexOutOfRange {
                    op: "GET_ROWS",
                    index: bad as i64,
                    limit: 10
                },
                "{n} threads"
            );
            // set_rows
            let dst = ctx.new_tensor_2d(DType::F32, 17, 7).unwrap();
            let src = ctx.new_tensor_2d(DType::F32, 17, 3).unwrap();
            ctx.set_f32(src, &[1.0; 51]).unwrap();
            let bad7 = if bad == 10 { 7 } else { bad };
            let ids = ids_leaf(&mut ctx, [3, 1, 1, 1], &[2, bad7, 0]).unwrap();
            let w = ctx.set_rows(dst, src, ids).unwrap();
            let e = expect_err("set_rows", compute(&mut ctx, w, n));
            assert_eq!(
                e,
                Error::IndexOutOfRange {
                    op: "SET_ROWS",
                    index: bad7 as i64,
                    limit: 7
                },
                "{n} threads"
            );
        }
    }
}

#[test]
fn writes_into_external_data_are_refused() {
    let buf: Arc<Vec<u8>> = Arc::new(vec![0u8; 4096 + 64]);
    let base = buf.as_ptr() as usize;
    let off = (64 - base % 64) % 64; // 64-byte aligned within the buffer
    let mut ctx = Context::with_mem_size(MB);
    let ext = ctx
        .new_tensor_external(DType::F32, &[16, 8], buf.clone(), off)
        .unwrap();
    ctx.set_name(ext, "weights").unwrap();
    let a = ctx.new_tensor_2d(DType::F32, 16, 8).unwrap();
    let e = expect_err("cpy into external", ctx.cpy(a, ext));
    assert!(matches!(e, Error::ReadOnly { .. }), "{e:?}");
    assert!(e.to_string().contains("weights"), "{e}");
    // Through a view of it as well.
    let v = ctx.view_2d(ext, 16, 2, 64, 64).unwrap();
    let b = ctx.new_tensor_2d(DType::F32, 16, 2).unwrap();
    assert!(matches!(ctx.cpy(b, v), Err(Error::ReadOnly { .. })));
    let ids = ctx.new_tensor_1d(DType::I32, 2).unwrap();
    assert!(matches!(
        ctx.set_rows(ext, b, ids),
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(ctx.data_mut(ext), Err(Error::ReadOnly { .. })));
    assert!(matches!(
        ctx.set_f32(ext, &[0.0; 128]),
        Err(Error::ReadOnly { .. })
    ));
}

#[test]
fn copies_onto_themselves_are_refused() {
    let mut ctx = Context::with_mem_size(MB);
    let a = ctx.new_tensor_2d(DType::F32, 16, 8).unwrap();
    let e = expect_err("cpy a a", ctx.cpy(a, a));
    assert!(matches!(e, Error::Overlap { .. }), "{e:?}");
    let t = ctx.transpose(a).unwrap();
    assert!(matches!(ctx.cpy(t, a), Err(Error::Overlap { .. })));
    let v1 = ctx.view_1d(a, 16, 0).unwrap();
    let v2 = ctx.view_1d(a, 16, 64).unwrap();
    assert!(matches!(ctx.cpy(v1, v2), Err(Error::Overlap { .. })));
    // set_rows whose source is a view of its destination.
    let src = ctx.view_2d(a, 16, 2, 64, 0).unwrap();
    let ids = ctx.new_tensor_1d(DType::I32, 2).unwrap();
    assert!(matches!(
        ctx.set_rows(a, src, ids),
        Err(Error::Overlap { .. })
    ));
}

// -------------------------------------------------------------------------------------------
// External data as op inputs
// -------------------------------------------------------------------------------------------

/// Little-endian bytes of `vals` stored as `dtype`.
fn bytes_of(dtype: DType, vals: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    for &v in vals {
        match dtype {
            DType::F16 => out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            _ => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
    out
}

#[test]
fn external_tensors_feed_mul_mat_and_get_rows() {
    let (k, n, m, rows) = (17usize, 9usize, 4usize, 11usize);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let mut rng = Rng::new(dtype.id() as u64);
        let wv = rng.vec(k * n, -1.0, 1.0);
        let ev = rng.vec(k * rows, -1.0, 1.0);
        // One buffer, two tensors in it at aligned offsets after a 3-byte header.
        let wb = bytes_of(dtype, &wv);
        let eb = bytes_of(dtype, &ev);
        let mut raw = vec![0xAAu8; 64 + wb.len() + 64 + eb.len() + 64];
        let base = raw.as_ptr() as usize;
        let w_off = 3 + (64 - (base + 3) % 64) % 64;
        let e_off = w_off + wb.len() + (64 - (wb.len() % 64)) % 64;
        raw[w_off..w_off + wb.len()].copy_from_slice(&wb);
        raw[e_off..e_off + eb.len()].copy_from_slice(&eb);
        // Moving the Vec into the Arc keeps its heap buffer (and the offsets) in place.
        let buf: Arc<Vec<u8>> = Arc::new(raw);
        assert_eq!(buf.as_ptr() as usize, base);
        let tol = match dtype {
            DType::F32 => TOL_F32,
            DType::F16 => TOL_F16,
            _ => TOL_BF16,
        };
        for nth in THREADS {
            let mut ctx = Context::with_mem_size(MB);
            let w = ctx
                .new_tensor_external(dtype, &[k, n], buf.clone(), w_off)
                .unwrap();
            let emb = ctx
                .new_tensor_external(dtype, &[k, rows], buf.clone(), e_off)
                .unwrap();
            assert!(ctx.meta(w).unwrap().is_external());
            let xv = rng.vec(k * m, -1.0, 1.0);
            let (x, _) = leaf(&mut ctx, DType::F32, [k, m, 1, 1], &xv).unwrap();
            let y = ctx.mul_mat(w, x).unwrap();
            let ids = ids_leaf(&mut ctx, [3, 1, 1, 1], &[10, 0, 7]).unwrap();
            let g = ctx.get_rows(emb, ids).unwrap();
            let mut graph = Graph::new();
            graph.build_forward_expand(&ctx, y).unwrap();
            graph.build_forward_expand(&ctx, g).unwrap();
            Executor::new(nth).compute(&mut ctx, &graph).unwrap();

            let wr: Vec<f32> = wv.iter().map(|&v| round_to(dtype, v)).collect();
            let want_y = Arr::build([n, m, 1, 1], |i| {
                (0..k)
                    .map(|kk| wr[kk + k * i[0]] as f64 * xv[kk + k * i[1]] as f64)
                    .sum::<f64>() as f32
            });
            assert_nmse(
                "external mul_mat",
                &ctx.to_f32_vec(y).unwrap(),
                &want_y,
                tol,
            );
            let want_g = Arr::build([k, 3, 1, 1], |i| {
                round_to(dtype, ev[i[0] + k * [10, 0, 7][i[1]]])
            });
            assert_nmse(
                "external get_rows",
                &ctx.to_f32_vec(g).unwrap(),
                &want_g,
                0.0,
            );
            // The tensor reads its bytes where they are: no copy.
            assert_eq!(ctx.data(w).unwrap().as_ptr() as usize, base + w_off);
        }
    }
}

#[test]
fn misaligned_or_out_of_bounds_external_data_is_rejected() {
    let buf: Arc<Vec<u8>> = Arc::new(vec![0u8; 1024]);
    let base = buf.as_ptr() as usize;
    let aligned = (64 - base % 64) % 64;
    let mut ctx = Context::with_mem_size(MB);
    let bad_arg = |r: Result<Tensor>| matches!(r, Err(Error::InvalidArgument { .. }));
    // Misaligned for f32 (4), f16 and bf16 (2).
    assert!(bad_arg(ctx.new_tensor_external(
        DType::F32,
        &[8],
        buf.clone(),
        aligned + 1
    )));
    assert!(bad_arg(ctx.new_tensor_external(
        DType::F32,
        &[8],
        buf.clone(),
        aligned + 2
    )));
    assert!(bad_arg(ctx.new_tensor_external(
        DType::F16,
        &[8],
        buf.clone(),
        aligned + 1
    )));
    assert!(bad_arg(ctx.new_tensor_external(
        DType::BF16,
        &[8],
        buf.clone(),
        aligned + 3
    )));
    assert!(ctx
        .new_tensor_external(DType::F16, &[8], buf.clone(), aligned + 2)
        .is_ok());
    // Out of bounds: past the end, at the very end, offsets that overflow.
    assert!(bad_arg(ctx.new_tensor_external(
        DType::F32,
        &[257],
        buf.clone(),
        0
    )));
    assert!(bad_arg(ctx.new_tensor_external(
        DType::F32,
        &[16, 16],
        buf.clone(),
        aligned + 4
    )));
    // Exactly up to the end is fine (if the end is 4-aligned, which malloc's 16 bytes give).
    if (base + 1024) & 3 == 0 {
        assert!(ctx
            .new_tensor_external(DType::F32, &[64], buf.clone(), 1024 - 256)
            .is_ok());
    }
    assert!(bad_arg(ctx.new_tensor_external(
        DType::F32,
        &[1],
        buf.clone(),
        1024
    )));
    assert!(bad_arg(ctx.new_tensor_external(
        DType::F32,
        &[1],
        buf.clone(),
        usize::MAX - 1
    )));
    assert!(bad_arg(ctx.new_tensor_external(
        DType::F32,
        &[usize::MAX / 2, 4],
        buf.clone(),
        0
    )));
}

// -------------------------------------------------------------------------------------------
// Abort and profiling
// -------------------------------------------------------------------------------------------

/// x (all ones) → six `scale(·, 2)` in a chain; returns x and the six nodes.
fn chain(ctx: &mut Context) -> (Tensor, Vec<Tensor>) {
    let x = ctx.new_tensor_2d(DType::F32, 100, 17).unwrap();
    ctx.set_f32(x, &vec![1.0; 1700]).unwrap();
    let mut nodes = Vec::new();
    let mut cur = x;
    for _ in 0..6 {
        cur = ctx.scale(cur, 2.0).unwrap();
        nodes.push(cur);
    }
    (x, nodes)
}

#[test]
fn abort_callback_stops_between_nodes() {
    for n in THREADS {
        let mut ctx = Context::with_mem_size(MB);
        let (_, nodes) = chain(&mut ctx);
        let last = *nodes.last().unwrap();
        let g = Graph::build(&ctx, last).unwrap();
        poison_outputs(&mut ctx, &g);
        let calls = Arc::new(AtomicUsize::new(0));
        let mut ex = Executor::new(n);
        let c = calls.clone();
        ex.set_abort_callback(move || c.fetch_add(1, Ordering::SeqCst) + 1 >= 2);
        let e = expect_err("aborted compute", ex.compute(&mut ctx, &g));
        assert_eq!(
            e,
            Error::Aborted {
                completed: 2,
                total: 6
            },
            "{n} threads"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{n} threads");
        // Nodes 0 and 1 ran; 2..6 did not (still NaN).
        assert_eq!(ctx.to_f32_vec(nodes[1]).unwrap(), vec![4.0; 1700]);
        for &t in &nodes[2..] {
            assert!(ctx.to_f32_vec(t).unwrap().iter().all(|v| v.is_nan()));
        }
        // Without the callback the same executor finishes the graph.
        ex.clear_abort_callback();
        ex.compute(&mut ctx, &g).unwrap();
        assert_eq!(ctx.to_f32_vec(last).unwrap(), vec![64.0; 1700]);
    }
}

#[test]
fn profiling_times_every_data_moving_node() {
    let mut ctx = Context::with_mem_size(MB);
    let x = ctx.new_tensor_2d(DType::F32, 17, 6).unwrap();
    ctx.set_f32(x, &[0.25; 102]).unwrap();
    let r = ctx.reshape_3d(x, 17, 3, 2).unwrap(); // view
    let p = ctx.permute(r, [0, 2, 1, 3]).unwrap(); // view
    let s = ctx.scale(p, 2.0).unwrap(); // data
    let t = ctx.transpose(s).unwrap(); // view
    let c = ctx.cont(t).unwrap(); // data
    let a = ctx.add(c, c).unwrap(); // data
    let v = ctx.view_1d(a, 5, 0).unwrap(); // view
    let out = ctx.sum(v).unwrap(); // data
    let g = Graph::build(&ctx, out).unwrap();
    assert_eq!(g.nodes().len(), 8);
    for n in [1, 3] {
        let mut ex = Executor::new(n);
        ex.set_profiling(true);
        ex.compute(&mut ctx, &g).unwrap();
        let prof = ex.profile();
        let data_nodes: Vec<(usize, Tensor)> = g
            .nodes()
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, t)| !ctx.meta(*t).unwrap().op.is_view())
            .collect();
        assert_eq!(data_nodes.len(), 4);
        assert_eq!(prof.len(), data_nodes.len(), "{n} threads: {prof:?}");
        for (timing, &(i, t)) in prof.iter().zip(&data_nodes) {
            let m = ctx.meta(t).unwrap();
            assert_eq!(timing.node, i);
            assert_eq!(timing.op, m.op.name());
            assert_eq!(timing.ne, m.ne);
        }
        assert_eq!(ctx.get_f32_scalar(out).unwrap(), 5.0);
    }
}

// -------------------------------------------------------------------------------------------
// Graph construction
// -------------------------------------------------------------------------------------------

/// Every tensor reachable from `roots`, found with a plain recursive walk.
fn reachable(ctx: &Context, roots: &[Tensor]) -> HashSet<Tensor> {
    fn walk(ctx: &Context, t: Tensor, seen: &mut HashSet<Tensor>) {
        if !seen.insert(t) {
            return;
        }
        for s in ctx.meta(t).unwrap().src.iter().flatten() {
            walk(ctx, *s, seen);
        }
    }
    let mut seen = HashSet::new();
    for &r in roots {
        walk(ctx, r, &mut seen);
    }
    seen
}

/// Checks the graph invariants: each tensor once, leaves have no op and nodes do, every
/// node after its sources, and exactly the tensors reachable from `roots`.
fn check_graph(ctx: &Context, g: &Graph, roots: &[Tensor]) {
    let nodes: Vec<Tensor> = g.nodes().to_vec();
    let leafs: Vec<Tensor> = g.leafs().to_vec();
    let node_set: HashSet<Tensor> = nodes.iter().copied().collect();
    let leaf_set: HashSet<Tensor> = leafs.iter().copied().collect();
    assert_eq!(node_set.len(), nodes.len(), "a node appears twice");
    assert_eq!(leaf_set.len(), leafs.len(), "a leaf appears twice");
    assert!(node_set.is_disjoint(&leaf_set));
    for &l in &leafs {
        assert_eq!(ctx.meta(l).unwrap().op, ggrs_core::Op::None);
    }
    for (i, &t) in nodes.iter().enumerate() {
        let m = ctx.meta(t).unwrap();
        assert_ne!(m.op, ggrs_core::Op::None);
        for s in m.src.iter().flatten() {
            if node_set.contains(s) {
                let j = nodes.iter().position(|x| x == s).unwrap();
                assert!(j < i, "node {i} comes before its source {j}");
            } else {
                assert!(leaf_set.contains(s), "source of node {i} missing");
            }
        }
    }
    let all: HashSet<Tensor> = node_set.union(&leaf_set).copied().collect();
    assert_eq!(all, reachable(ctx, roots));
}

#[test]
fn build_forward_expand_shares_subgraphs_in_topological_order() {
    let mut ctx = Context::with_mem_size(MB);
    let a = ctx.new_tensor_2d(DType::F32, 17, 3).unwrap();
    let b = ctx.new_tensor_2d(DType::F32, 17, 3).unwrap();
    ctx.set_f32(a, &[1.5; 51]).unwrap();
    ctx.set_f32(b, &[0.5; 51]).unwrap();
    let c = ctx.add(a, b).unwrap(); // shared by d and e
    let d = ctx.mul(c, a).unwrap();
    let t = ctx.transpose(c).unwrap();
    let e = ctx.sqr(t).unwrap();
    let f = ctx.cont(t).unwrap(); // shares the view t with e
    let mut g = Graph::new();
    g.build_forward_expand(&ctx, d).unwrap();
    g.build_forward_expand(&ctx, e).unwrap();
    g.build_forward_expand(&ctx, f).unwrap();
    g.build_forward_expand(&ctx, d).unwrap(); // again: nothing new
    check_graph(&ctx, &g, &[d, e, f]);
    assert_eq!(g.nodes(), &[c, d, t, e, f]);
    assert_eq!(g.leafs(), &[a, b]);
    assert_eq!(g.output(), Some(f));
    Executor::new(2).compute(&mut ctx, &g).unwrap();
    assert_eq!(ctx.to_f32_vec(d).unwrap(), vec![3.0; 51]);
    assert_eq!(ctx.to_f32_vec(e).unwrap(), vec![4.0; 51]);

    // A cache write expanded before its reader runs first.
    let cache = ctx.new_tensor_2d(DType::F32, 17, 4).unwrap();
    ctx.set_f32(cache, &[0.0; 68]).unwrap();
    let row = ctx.view_2d(cache, 17, 1, 68, 2 * 68).unwrap();
    let src = ctx.view_2d(d, 17, 1, 68, 0).unwrap();
    let write = ctx.cpy(src, row).unwrap();
    let read = ctx.sum_rows(cache).unwrap();
    let mut g2 = Graph::new();
    g2.build_forward_expand(&ctx, write).unwrap();
    g2.build_forward_expand(&ctx, read).unwrap();
    check_graph(&ctx, &g2, &[write, read]);
    let pos = |t: Tensor| g2.nodes().iter().position(|&x| x == t).unwrap();
    assert!(pos(write) < pos(read));
    Executor::new(3).compute(&mut ctx, &g2).unwrap();
    assert_eq!(
        ctx.to_f32_vec(read).unwrap(),
        vec![0.0, 0.0, 17.0 * 3.0, 0.0]
    );

    // A graph with a node limit refuses to grow past it.
    let mut small = Graph::with_capacity(2);
    let e = expect_err("graph too large", small.build_forward_expand(&ctx, f));
    assert_eq!(e, Error::GraphTooLarge { limit: 2 });
}

#[test]
fn a_deep_shared_graph_is_built_once_per_tensor() {
    // A ladder where every node reads the two before it: exponential paths, linear nodes.
    let mut ctx = Context::with_mem_size(4 * MB);
    let x0 = ctx.new_tensor_1d(DType::F32, 3).unwrap();
    let x1 = ctx.new_tensor_1d(DType::F32, 3).unwrap();
    ctx.set_f32(x0, &[1.0, 0.0, -1.0]).unwrap();
    ctx.set_f32(x1, &[1.0, 1.0, 0.5]).unwrap();
    let (mut p, mut q) = (x0, x1);
    for _ in 0..60 {
        let r = ctx.add(p, q).unwrap();
        let r = ctx.scale(r, 0.5).unwrap();
        p = q;
        q = r;
    }
    let mut g = Graph::new();
    g.build_forward_expand(&ctx, q).unwrap();
    g.build_forward_expand(&ctx, p).unwrap();
    assert_eq!(g.nodes().len(), 120);
    assert_eq!(g.leafs().len(), 2);
    check_graph(&ctx, &g, &[q, p]);
    // Fixed point of averaging: x0/3 + 2·x1/3.
    Executor::new(2).compute(&mut ctx, &g).unwrap();
    let got = ctx.to_f32_vec(q).unwrap();
    let want = [1.0, 2.0 / 3.0, 0.0];
    for (gv, wv) in got.iter().zip(want) {
        assert!((gv - wv).abs() < 1e-5, "{got:?}");
    }
}

#[test]
fn to_dot_mentions_every_node_and_edge() {
    let mut ctx = Context::with_mem_size(MB);
    let a = ctx.new_tensor_2d(DType::F32, 17, 3).unwrap();
    ctx.set_name(a, "input \"a\"").unwrap();
    let w = ctx.new_tensor_2d(DType::F16, 17, 5).unwrap();
    ctx.set_name(w, "weight").unwrap();
    let y = ctx.mul_mat(w, a).unwrap();
    ctx.set_name(y, "logits").unwrap();
    let t = ctx.transpose(y).unwrap();
    let s = ctx.soft_max_ext(t, None, 0.5).unwrap();
    let g = Graph::build(&ctx, s).unwrap();
    let dot = g.to_dot(&ctx);
    assert!(dot.starts_with("digraph"));
    assert!(dot.trim_end().ends_with('}'));
    for &t in g.nodes().iter().chain(g.leafs()) {
        let decl = format!("t{} [", t.index());
        assert_eq!(dot.matches(&decl).count(), 1, "{decl} in\n{dot}");
        for src in ctx.meta(t).unwrap().src.iter().flatten() {
            let edge = format!("t{} -> t{};", src.index(), t.index());
            assert!(dot.contains(&edge), "{edge} in\n{dot}");
        }
    }
    for name in [
        "weight",
        "logits",
        "MUL_MAT",
        "TRANSPOSE",
        "SOFT_MAX",
        "input \\\"a\\\"",
    ] {
        assert!(dot.contains(name), "{name} in\n{dot}");
    }
    let text = g.display(&ctx);
    assert!(
        text.contains("MUL_MAT") && text.contains("logits"),
        "{text}"
    );
}
