//! A first tour of `ggrs-core`: build a graph, size its arena, compute it.
//!
//! Run with `cargo run --release --example simple_graph`.
//!
//! `ggrs-core` works the way ggml does, in three steps:
//!
//! 1. **Build.** Every tensor lives in a [`Context`], one fixed-size memory arena. Calling an
//!    op such as [`Context::mul_mat`] computes nothing: it checks the operands' shapes and
//!    returns a new tensor that remembers the op and its sources.
//! 2. **Graph.** [`Graph::build`] walks the source links back from an output tensor and lists
//!    every tensor it needs in an order where sources come first.
//! 3. **Compute.** An [`Executor`] (a pool of threads started once and reused) runs the nodes
//!    of the graph in that order, writing each result into the arena.
//!
//! Shapes follow ggml's axis order: `ne = [n0, n1, n2, n3]` with `n0` the innermost axis, the
//! one whose elements are adjacent in memory. A matrix of `rows` rows of `cols` values is
//! therefore `[cols, rows]`.

use ggrs_core::{Context, DType, Executor, Graph, Result, Tensor};

fn main() -> Result<()> {
    part1_polynomial()?;
    part2_mlp()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Part 1: f(x) = a·x² + b
// ---------------------------------------------------------------------------------------------

fn part1_polynomial() -> Result<()> {
    println!("## Part 1: f(x) = a·x² + b\n");

    // A context with a 1 MiB arena: far more than three scalars and three ops need (part 2
    // shows how to size an arena exactly).
    let mut ctx = Context::with_mem_size(1 << 20);

    // Leaves: tensors without an op, whose data we set. `new_f32` makes a 1-element f32
    // tensor holding a value. Names are optional; they show up when printing the graph.
    let x = ctx.new_f32(2.0)?;
    let a = ctx.new_f32(3.0)?;
    let b = ctx.new_f32(4.0)?;
    ctx.set_name(x, "x")?;
    ctx.set_name(a, "a")?;
    ctx.set_name(b, "b")?;

    // Nodes: each call records an op; nothing is computed yet.
    let x2 = ctx.mul(x, x)?; // x²
    let ax2 = ctx.mul(a, x2)?; // a·x²
    let f = ctx.add(ax2, b)?; // a·x² + b
    ctx.set_name(x2, "x2")?;
    ctx.set_name(ax2, "a_x2")?;
    ctx.set_name(f, "f")?;

    // The graph: 3 nodes (the ops) and 3 leaves (x, a, b), in topological order.
    let graph = Graph::build(&ctx, f)?;
    print!("{}", graph.display(&ctx));

    // Compute on the calling thread only.
    let mut exec = Executor::new(1);
    exec.compute(&mut ctx, &graph)?;
    println!("f(2) = {}   (3·2² + 4 = 16)", ctx.get_f32_scalar(f)?);

    // The graph is reusable: change an input and compute again.
    ctx.set_f32(x, &[-1.5])?;
    exec.compute(&mut ctx, &graph)?;
    println!(
        "f(-1.5) = {}   (3·2.25 + 4 = 10.75)",
        ctx.get_f32_scalar(f)?
    );

    // `to_dot` gives the same graph in Graphviz format; save it to a file and render it with
    // `dot -Tsvg graph.dot -o graph.svg`.
    println!("\nThe same graph as Graphviz DOT (Graph::to_dot):");
    print!("{}", graph.to_dot(&ctx));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Part 2: a small MLP, 4 → 8 (GELU) → 3 (softmax), on a batch of 5 rows
// ---------------------------------------------------------------------------------------------

const N_IN: usize = 4;
const N_HIDDEN: usize = 8;
const N_OUT: usize = 3;
const BATCH: usize = 5;

/// The tensors of the MLP that we set or read.
struct Mlp {
    input: Tensor, // [N_IN, BATCH]       one row of N_IN features per batch item
    w1: Tensor,    // [N_IN, N_HIDDEN]    row i holds the weights of hidden unit i
    b1: Tensor,    // [N_HIDDEN]
    w2: Tensor,    // [N_HIDDEN, N_OUT]   stored as f16
    b2: Tensor,    // [N_OUT]
    probs: Tensor, // [N_OUT, BATCH]      class probabilities per batch item
}

/// Builds the MLP's tensors and ops in `ctx`. Called twice: first in a measuring context
/// (to learn how much memory it needs), then in the real one.
fn build_mlp(ctx: &mut Context) -> Result<Mlp> {
    let input = ctx.new_tensor_2d(DType::F32, N_IN, BATCH)?;
    // Weights may be f32, f16, bf16 (or block-quantized types as they are added); the
    // activations they multiply are always f32.
    let w1 = ctx.new_tensor_2d(DType::F32, N_IN, N_HIDDEN)?;
    let b1 = ctx.new_tensor_1d(DType::F32, N_HIDDEN)?;
    let w2 = ctx.new_tensor_2d(DType::F16, N_HIDDEN, N_OUT)?;
    let b2 = ctx.new_tensor_1d(DType::F32, N_OUT)?;
    for (t, name) in [
        (input, "input"),
        (w1, "w1"),
        (b1, "b1"),
        (w2, "w2"),
        (b2, "b2"),
    ] {
        ctx.set_name(t, name)?;
    }
    ctx.set_input(input)?;

    // mul_mat(a, b): a is [k, n], b is [k, m], the result is [n, m] with
    // out[i, j] = Σ_k a[k, i]·b[k, j]: every row of b dotted with every row of a (b·aᵀ).
    // Here: w1 [4, 8] and input [4, 5] → [8, 5], one row of 8 hidden values per batch item.
    let h = ctx.mul_mat(w1, input)?;
    // add broadcasts its second operand: b1 [8] is added to each of the 5 rows.
    let h = ctx.add(h, b1)?;
    let h = ctx.gelu(h)?;
    ctx.set_name(h, "hidden")?;

    // w2 [8, 3] and hidden [8, 5] → [3, 5]
    let logits = ctx.mul_mat(w2, h)?;
    let logits = ctx.add(logits, b2)?;
    ctx.set_name(logits, "logits")?;
    // Softmax of each row (over ne[0], the 3 classes).
    let probs = ctx.soft_max(logits)?;
    ctx.set_name(probs, "probs")?;
    ctx.set_output(probs)?;

    Ok(Mlp {
        input,
        w1,
        b1,
        w2,
        b2,
        probs,
    })
}

/// A deterministic stand-in for trained weights: small values that vary with the index.
fn weight(seed: f32, i: usize) -> f32 {
    0.5 * (seed + 0.37 * i as f32).sin()
}

fn part2_mlp() -> Result<()> {
    println!("\n## Part 2: MLP {N_IN} → {N_HIDDEN} (GELU) → {N_OUT} (softmax), batch of {BATCH}\n");

    // Measure mode: a `Context::measure()` context allocates no data. It only counts the
    // bytes a real context would use for the same tensors, metadata and alignment included.
    let mut measure = Context::measure();
    build_mlp(&mut measure)?;
    let mem_size = measure.used_mem();
    println!("measured arena size: {mem_size} bytes");

    // The real context, exactly that size; building the same tensors in it fits with no byte
    // to spare (one tensor more would fail with Error::OutOfMemory, never a panic).
    let mut ctx = Context::with_mem_size(mem_size);
    let mlp = build_mlp(&mut ctx)?;
    println!(
        "real arena: {} of {} bytes used\n",
        ctx.used_mem(),
        ctx.capacity()
    );

    // Set the leaves. `set_f32` takes values in logical order (ne[0] fastest) and converts
    // them to the tensor's type (w2 is f16).
    let w1: Vec<f32> = (0..N_IN * N_HIDDEN).map(|i| weight(0.1, i)).collect();
    let b1: Vec<f32> = (0..N_HIDDEN).map(|i| weight(1.3, i) * 0.2).collect();
    let w2: Vec<f32> = (0..N_HIDDEN * N_OUT).map(|i| weight(2.9, i)).collect();
    let b2: Vec<f32> = (0..N_OUT).map(|i| weight(4.1, i) * 0.2).collect();
    let input: Vec<f32> = (0..N_IN * BATCH).map(|i| (i as f32 * 0.25) - 2.0).collect();
    ctx.set_f32(mlp.w1, &w1)?;
    ctx.set_f32(mlp.b1, &b1)?;
    ctx.set_f32(mlp.w2, &w2)?;
    ctx.set_f32(mlp.b2, &b2)?;
    ctx.set_f32(mlp.input, &input)?;

    let graph = Graph::build(&ctx, mlp.probs)?;
    print!("{}", graph.display(&ctx));

    // A persistent executor with 2 threads. Keep it around: its threads start once and are
    // reused by every compute call (starting threads per graph costs more than small graphs).
    // Results do not depend on the thread count: every output element is computed by one
    // thread, in a fixed order.
    let mut exec = Executor::new(2);
    exec.compute(&mut ctx, &graph)?;

    let probs = ctx.to_f32_vec(mlp.probs)?; // [N_OUT, BATCH]: row j = batch item j
    println!("\nclass probabilities (one row per batch item):");
    for (j, row) in probs.chunks(N_OUT).enumerate() {
        let cells: Vec<String> = row.iter().map(|p| format!("{p:.4}")).collect();
        println!("  item {j}: [{}]", cells.join(", "));
    }

    // The same computation written as plain loops, to make the layout concrete. w2 is f16,
    // and `mul_mat` with f16 weights (as in ggml) rounds the activations it multiplies to f16
    // too, so the reference rounds both.
    let round_f16 = |v: f32| half::f16::from_f32(v).to_f32();
    let w2_f16: Vec<f32> = w2.iter().map(|&v| round_f16(v)).collect();
    let mut max_diff = 0.0f32;
    for j in 0..BATCH {
        let x = &input[j * N_IN..(j + 1) * N_IN];
        let hidden: Vec<f32> = (0..N_HIDDEN)
            .map(|i| {
                let s: f32 = (0..N_IN).map(|k| w1[i * N_IN + k] * x[k]).sum();
                gelu(s + b1[i])
            })
            .collect();
        let logits: Vec<f32> = (0..N_OUT)
            .map(|i| {
                let s: f32 = (0..N_HIDDEN)
                    .map(|k| w2_f16[i * N_HIDDEN + k] * round_f16(hidden[k]))
                    .sum();
                s + b2[i]
            })
            .collect();
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
        let total: f32 = exps.iter().sum();
        for (i, e) in exps.iter().enumerate() {
            max_diff = max_diff.max((e / total - probs[j * N_OUT + i]).abs());
        }
    }
    println!("largest difference from a plain-loop reference: {max_diff:.2e}");
    Ok(())
}

/// GELU, tanh form (what `Context::gelu` computes).
fn gelu(x: f32) -> f32 {
    let c = (2.0 / std::f32::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}
