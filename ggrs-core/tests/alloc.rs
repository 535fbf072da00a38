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
