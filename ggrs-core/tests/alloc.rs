//! Graph allocation: deferred contexts reuse intermediate memory and compute the same bits.

use ggrs_core::{Context, DType, Executor, Graph, Result, Tensor};

/// A chain of `layers` blocks, each `x = x + silu(W_l · x)`, over a [d, cols] input.
fn build(ctx: &mut Context, d: usize, cols: usize, layers: usize) -> Result<(Tensor, Vec<Tensor>)> {
    let x0 = ctx.new_tensor_2d(DType::F32, d, cols)?;
    let mut leaves = vec![x0];
    let mut x = x0;
    for _ in 0..layers {
        let w = ctx.new_tensor_2d(DType::F32, d, d)?;
        leaves.push(w);
        let h = ctx.mul_mat(w, x)?;
        let h = ctx.silu(h)?;
        let t = ctx.transpose(h)?;
        let t = ctx.cont(t)?;
        let t = ctx.transpose(t)?;
        x = ctx.add(x, t)?;
    }
    let s = ctx.soft_max(x)?;
    Ok((s, leaves))
}

fn fill(ctx: &mut Context, leaves: &[Tensor]) -> Result<()> {
    for (k, &t) in leaves.iter().enumerate() {
        let n = ctx.meta(t)?.nelements();
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 7 + k * 13) as f32 * 0.013).sin() * 0.2)
            .collect();
        ctx.set_f32(t, &v)?;
    }
    Ok(())
}

#[test]
fn deferred_allocation_reuses_memory_and_matches() -> Result<()> {
    let (d, cols, layers) = (64, 5, 12);
    // Reference: every tensor gets its own memory.
    let mut plain = Context::with_mem_size(16 << 20);
    let (out_p, leaves_p) = build(&mut plain, d, cols, layers)?;
    fill(&mut plain, &leaves_p)?;
    let g = Graph::build(&plain, out_p)?;
    Executor::new(2).compute(&mut plain, &g)?;
    let want = plain.to_f32_vec(out_p)?;

    // Measure the deferred graph, then build it in a context of exactly that size.
    let mut m = Context::measure();
    m.set_deferred_alloc(true);
    let (out_m, _) = build(&mut m, d, cols, layers)?;
    let gm = Graph::build(&m, out_m)?;
    let peak = m.alloc_graph(&gm)?;
    let need = m.used_mem();
    assert!(need < plain.used_mem(), "{need} >= {}", plain.used_mem());
    // One intermediate of [d, cols] f32 is 1280 bytes (1344 aligned); the peak holds a few,
    // far fewer than the 5 per layer the plain context keeps.
    let one = (d * cols * 4).div_ceil(64) * 64;
    assert!(peak <= 4 * one, "peak {peak} for blocks of {one}");

    let mut ctx = Context::with_mem_size(need);
    ctx.set_deferred_alloc(true);
    let (out, leaves) = build(&mut ctx, d, cols, layers)?;
    fill(&mut ctx, &leaves)?;
    let g = Graph::build(&ctx, out)?;
    assert_eq!(ctx.alloc_graph(&g)?, peak);
    for nth in [1, 3] {
        Executor::new(nth).compute(&mut ctx, &g)?;
        let got = ctx.to_f32_vec(out)?;
        assert!(want
            .iter()
            .zip(&got)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    // One line less and the graph does not fit.
    let mut small = Context::with_mem_size(need - 64);
    small.set_deferred_alloc(true);
    let (out, _) = build(&mut small, d, cols, layers)?;
    let g = Graph::build(&small, out)?;
    assert!(matches!(
        small.alloc_graph(&g),
        Err(ggrs_core::Error::OutOfMemory { .. })
    ));
    Ok(())
}

#[test]
fn computing_an_unallocated_graph_is_an_error() -> Result<()> {
    let mut ctx = Context::with_mem_size(1 << 20);
    ctx.set_deferred_alloc(true);
    let a = ctx.new_tensor_1d(DType::F32, 8)?;
    ctx.set_f32(a, &[1.0; 8])?;
    let b = ctx.sqr(a)?;
    let g = Graph::build(&ctx, b)?;
    let err = Executor::new(1).compute(&mut ctx, &g).unwrap_err();
    assert!(matches!(err, ggrs_core::Error::NoData { .. }), "{err}");
    Ok(())
}

/// Two graphs kept in one deferred context, the second built after a checkpoint taken
/// after the first (as a session keeps its one-token step below a wider one), computed in
/// turn by one executor: each keeps its results (the executor keeps what it resolved for
/// both); a rewind below the first and a different graph built in its place is computed
/// as itself, never with what was resolved for the graph it replaced.
#[test]
fn an_executor_keeps_two_graphs_and_drops_replaced_ones() -> Result<()> {
    let mut ctx = Context::with_mem_size(1 << 20);
    ctx.set_deferred_alloc(true);
    let x = ctx.new_tensor_1d(DType::F32, 64)?;
    let base = ctx.checkpoint();
    let graph_of = |ctx: &mut Context, s: f32| -> Result<(Tensor, Graph)> {
        let y = ctx.scale(x, s)?;
        let y = ctx.add(y, x)?;
        let g = Graph::build(ctx, y)?;
        ctx.alloc_graph(&g)?;
        Ok((y, g))
    };
    let (ya, ga) = graph_of(&mut ctx, 2.0)?;
    let above_a = ctx.checkpoint();
    let (yb, gb) = graph_of(&mut ctx, 5.0)?;
    let mut exec = Executor::new(2);
    let v: Vec<f32> = (0..64).map(|i| i as f32 - 20.0).collect();
    let times = |s: f32| v.iter().map(|a| a * s + a).collect::<Vec<f32>>();
    for round in 0..3 {
        ctx.set_f32(x, &v)?;
        exec.compute(&mut ctx, &ga)?;
        assert_eq!(
            ctx.to_f32_vec(ya)?,
            times(2.0),
            "round {round}, first graph"
        );
        exec.compute(&mut ctx, &gb)?;
        assert_eq!(
            ctx.to_f32_vec(yb)?,
            times(5.0),
            "round {round}, second graph"
        );
        // The second graph replaced by another above the same checkpoint: the first stays.
        ctx.rewind(above_a)?;
        let (yc, gc) = graph_of(&mut ctx, -3.0)?;
        exec.compute(&mut ctx, &gc)?;
        assert_eq!(
            ctx.to_f32_vec(yc)?,
            times(-3.0),
            "round {round}, replacement"
        );
        exec.compute(&mut ctx, &ga)?;
        assert_eq!(
            ctx.to_f32_vec(ya)?,
            times(2.0),
            "round {round}, first graph kept"
        );
        ctx.rewind(above_a)?;
        let (yb2, gb2) = graph_of(&mut ctx, 5.0)?;
        exec.compute(&mut ctx, &gb2)?;
        assert_eq!(ctx.to_f32_vec(yb2)?, times(5.0));
    }
    // Everything rewound below the first graph (just computed, so resolved and kept) and
    // made again with another op: the first graph's handles now name the new tensors (the
    // same indices), and computing it runs what those tensors are now, not what was
    // resolved for the old ones.
    exec.compute(&mut ctx, &ga)?;
    ctx.rewind(base)?;
    let (yd, gd) = graph_of(&mut ctx, 7.0)?;
    assert_eq!((yd, ga.nodes().last()), (ya, Some(&ya)));
    ctx.set_f32(x, &v)?;
    exec.compute(&mut ctx, &ga)?;
    assert_eq!(ctx.to_f32_vec(ya)?, times(7.0));
    exec.compute(&mut ctx, &gd)?;
    assert_eq!(ctx.to_f32_vec(yd)?, times(7.0));
    Ok(())
}
