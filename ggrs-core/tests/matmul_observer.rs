//! `Executor::set_matmul_observer`: after each `mul_mat`/`mul_mat_id`, the observer sees the
//! weight's name and shape and the input's rows and ids as they were used; removed, it
//! sees nothing, and the results are the same bits either way.

use std::sync::{Arc, Mutex};

use ggrs_core::{Context, DType, Executor, Graph, MatMulView};

/// What the observer recorded: weight name, indirect, input rows, ids of slot 0.
type Seen = Vec<(String, bool, Vec<Vec<f32>>, Vec<i32>)>;

fn record(v: &MatMulView<'_>) -> (String, bool, Vec<Vec<f32>>, Vec<i32>) {
    let mut rows = Vec::new();
    for i2 in 0..v.input_ne[2] {
        for i1 in 0..v.input_ne[1] {
            rows.push(v.input_row(i1, i2, 0).to_vec());
        }
    }
    let ids = (0..v.input_ne[2]).filter_map(|t| v.id(0, t)).collect();
    (v.weight.to_string(), v.indirect, rows, ids)
}

#[test]
fn observer_sees_inputs_of_products() {
    let (k, n, n_tok) = (8, 3, 4);
    let mut ctx = Context::with_mem_size(1 << 20);
    let w = ctx.new_tensor_2d(DType::F32, k, n).unwrap();
    ctx.set_name(w, "dense.weight").unwrap();
    ctx.set_f32(w, &(0..k * n).map(|i| i as f32 * 0.1).collect::<Vec<_>>())
        .unwrap();
    let x = ctx.new_tensor_2d(DType::F32, k, n_tok).unwrap();
    let xv: Vec<f32> = (0..k * n_tok).map(|i| (i as f32 - 7.0) * 0.25).collect();
    ctx.set_f32(x, &xv).unwrap();
    let y = ctx.mul_mat(w, x).unwrap();
    // Experts: 3 matrices, 1 slot per token.
    let e = ctx.new_tensor_3d(DType::F32, k, n, 3).unwrap();
    ctx.set_name(e, "experts.weight").unwrap();
    ctx.set_f32(
        e,
        &(0..k * n * 3).map(|i| (i % 5) as f32).collect::<Vec<_>>(),
    )
    .unwrap();
    let xe = ctx.new_tensor_3d(DType::F32, k, 1, n_tok).unwrap();
    ctx.set_f32(xe, &xv).unwrap();
    let ids = ctx.new_tensor_2d(DType::I32, 1, n_tok).unwrap();
    ctx.set_i32(ids, &[2, 0, 1, 2]).unwrap();
    let z = ctx.mul_mat_id(e, xe, ids).unwrap();
    let mut g = Graph::new();
    g.build_forward_expand(&ctx, y).unwrap();
    g.build_forward_expand(&ctx, z).unwrap();

    let mut exec = Executor::new(2);
    exec.compute(&mut ctx, &g).unwrap();
    let (y0, z0) = (ctx.to_f32_vec(y).unwrap(), ctx.to_f32_vec(z).unwrap());

    let seen: Arc<Mutex<Seen>> = Arc::default();
    let sink = Arc::clone(&seen);
    exec.set_matmul_observer(Some(Box::new(move |v: &MatMulView<'_>| {
        sink.lock().unwrap().push(record(v));
    })));
    exec.compute(&mut ctx, &g).unwrap();
    assert_eq!(ctx.to_f32_vec(y).unwrap(), y0);
    assert_eq!(ctx.to_f32_vec(z).unwrap(), z0);
    let mut s = seen.lock().unwrap().clone();
    s.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(s.len(), 2, "{s:?}");
    let rows: Vec<Vec<f32>> = xv.chunks(k).map(<[f32]>::to_vec).collect();
    assert_eq!(s[0], ("dense.weight".into(), false, rows.clone(), vec![]));
    assert_eq!(
        s[1],
        ("experts.weight".into(), true, rows, vec![2, 0, 1, 2])
    );

    // Removed: nothing more is seen.
    exec.set_matmul_observer(None);
    exec.compute(&mut ctx, &g).unwrap();
    assert_eq!(seen.lock().unwrap().len(), 2);
}
