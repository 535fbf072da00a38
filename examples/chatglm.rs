//! ChatGLM in ggrs: how its graph differs from LLaMA's, shown in code on a real file.
//!
//! ```text
//! cargo run --release --example chatglm                  # the tiny random-weight model
//! cargo run --release --example chatglm -- chatglm3-6b-q4_0.gguf "What is Rust?"
//! ```
//!
//! ChatGLM2/3 and GLM-4 (GGUF architecture `chatglm`) are LLaMA-shaped — RMSNorm,
//! rotary attention with grouped KV heads, a SwiGLU feed-forward block, residuals around
//! both — with three differences in how the weights are laid out and used:
//!
//! 1. **Fused QKV with bias.** One matrix `attn_qkv` `[n_embd, (n_head + 2·n_head_kv)·hd]`
//!    and one bias replace LLaMA's `attn_q`, `attn_k`, `attn_v`. Each output row of the
//!    product holds Q, then K, then V: the graph takes them as views, copying nothing.
//! 2. **Rotary on half of each head.** `rope.dimension_count` is `hd/2`: the first half of
//!    each head turns (adjacent pairs, ggml's normal mode), the second half does not.
//! 3. **Fused gate|up.** `ffn_up` is `[n_embd, 2·n_ff]`: the first `n_ff` outputs are the
//!    gate, the last `n_ff` the up projection; there is no `ffn_gate`.
//!
//! Parts 1–3 build each difference by hand with ggrs-core's public API and check it against
//! the LLaMA way of doing the same thing. Part 4 runs the whole model (the library's
//! `arch::chatglm` graph) in ChatGLM3's chat format.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use ggrs::core::{Context, DType, Executor, Graph, RopeMode, RopeParams, Tensor};
use ggrs::llama::arch::chatglm::{ChatGlmLayer, ChatGlmModel, GlmQkv};
use ggrs::llama::chat::{Chat, ChatTemplate, Message};
use ggrs::llama::loader::WeightId;
use ggrs::llama::model::WeightRef;
use ggrs::llama::{GenerateParams, Model, SamplingParams, Session, SessionParams};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The `chatglm` architecture's typed weights of the first block.
fn layer0(model: &Model) -> Res<&ChatGlmLayer> {
    let w = model
        .arch_weights::<ChatGlmModel>()
        .ok_or("this file's architecture is not chatglm")?;
    Ok(w.layers.first().ok_or("the model has no blocks")?)
}

/// Where weight `id` lies in the file.
fn wref(model: &Model, id: WeightId) -> Res<&WeightRef> {
    Ok(model.weight(id).ok_or("a weight handle of another model")?)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/reference/tiny/tiny-chatglm-f16.gguf")
    });
    let question = args.next().unwrap_or_else(|| "What is Rust?".into());
    let model = Arc::new(Model::load(&path)?);
    let hp = &model.hparams;
    println!(
        "{}: arch {}, {} layers, width {}, {} heads of {} ({} KV heads), n_ff {}, rotary dims {}\n",
        path.display(),
        hp.arch,
        hp.n_layer,
        hp.n_embd,
        hp.n_head,
        hp.head_dim,
        hp.n_head_kv,
        hp.n_ff,
        hp.n_rot
    );
    println!("block 0 as the file stores it (LLaMA would have attn_q/k/v and ffn_gate):");
    let l = layer0(&model)?;
    let qkv: Vec<WeightId> = match &l.qkv {
        GlmQkv::Fused { w, b } => [Some(*w), *b].into_iter().flatten().collect(),
        GlmQkv::Split { w, b } => w
            .iter()
            .copied()
            .chain(b.iter().flatten().copied())
            .collect(),
    };
    for id in [l.attn_norm]
        .into_iter()
        .chain(qkv)
        .chain([l.wo, l.ffn_norm, l.ffn_up, l.ffn_down])
    {
        let w = wref(&model, id)?;
        println!("  {:<28} {:>4} {:?}", w.name, w.dtype.name(), &w.ne[..2]);
    }

    // The first block's input for a short prompt: h = rms_norm(embeddings) · attn_norm.
    let tokens = model
        .tokenizer()
        .encode("The capital of France is", true, true)?;
    let n = tokens.len();
    let mut ctx = Context::with_mem_size(256 << 20);
    let ids = ctx.new_tensor_1d(DType::I32, n)?;
    let tok_embd = model
        .arch_weights::<ChatGlmModel>()
        .ok_or("not chatglm")?
        .tok_embd;
    let emb = model.import(&mut ctx, wref(&model, tok_embd)?)?;
    let x = ctx.get_rows(emb, ids)?; // [n_embd, n]
    let norm = model.import(&mut ctx, wref(&model, l.attn_norm)?)?;
    let h = ctx.rms_norm(x, hp.rms_eps)?;
    let h = ctx.mul(h, norm)?; // [n_embd, n]

    let mut graph = Graph::new();
    let checks = vec![
        part1_fused_qkv(&mut ctx, &model, h, n)?,
        part2_half_rotary(&mut ctx, &model, n)?,
        part3_fused_gate_up(&mut ctx, &model, h)?,
    ];
    for c in &checks {
        graph.build_forward_expand(&ctx, c.ours)?;
        graph.build_forward_expand(&ctx, c.reference)?;
    }
    let toks: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
    ctx.set_i32(ids, &toks)?;
    Executor::new(2).compute(&mut ctx, &graph)?;
    for c in &checks {
        let a = ctx.to_f32_vec(c.ours)?;
        let b = ctx.to_f32_vec(c.reference)?;
        let d = a
            .iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        println!(
            "\n{}\n  max |difference| = {d:.2e} over {} values",
            c.what,
            a.len()
        );
    }

    part4_whole_model(model, &question)
}

/// Two tensors that must agree: the ChatGLM way and the LLaMA (or plain) way.
struct Check {
    what: String,
    ours: Tensor,
    reference: Tensor,
}

/// 1. One product with the fused matrix, bias added, K taken as a view of each row, against
///    LLaMA's separate K projection (the K rows of the fused matrix, its own bias).
fn part1_fused_qkv(ctx: &mut Context, model: &Model, h: Tensor, n: usize) -> Res<Check> {
    let hp = &model.hparams;
    let (wqkv_ref, bqkv_ref) = match layer0(model)?.qkv {
        GlmQkv::Fused { w, b: Some(b) } => (wref(model, w)?, wref(model, b)?),
        _ => return Err("this file has no fused attn_qkv weight and bias".into()),
    };
    let wqkv = model.import(ctx, wqkv_ref)?;
    let bqkv = model.import(ctx, bqkv_ref)?;
    let (e_q, e_kv) = (hp.n_head * hp.head_dim, hp.n_embd_kv());
    let f = DType::F32.type_size();

    // ChatGLM: qkv = Wqkv·h + b, one row [Q | K | V] per token; K is a strided view.
    let qkv = ctx.mul_mat(wqkv, h)?; // [e_q + 2·e_kv, n]
    let qkv = ctx.add(qkv, bqkv)?;
    let k_view = ctx.view_2d(qkv, e_kv, n, (e_q + 2 * e_kv) * f, e_q * f)?; // [e_kv, n]
    let ours = ctx.cont(k_view)?;

    // LLaMA: attn_k.weight is its own [n_embd, e_kv] matrix. Here it is rows e_q.. of the
    // fused one (rows of a matrix are contiguous, so this is a plain view of the weight).
    let w_row = wqkv_ref.dtype.row_size(hp.n_embd);
    let wk = ctx.view_2d(wqkv, hp.n_embd, e_kv, w_row, e_q * w_row)?;
    let bk = ctx.view_1d(bqkv, e_kv, e_q * f)?;
    let k = ctx.mul_mat(wk, h)?;
    let reference = ctx.add(k, bk)?;
    Ok(Check {
        what: format!(
            "1. fused QKV: K as a view of (Wqkv·h + b) [{e_q} Q | {e_kv} K | {e_kv} V values \
             per token] vs a separate K projection"
        ),
        ours,
        reference,
    })
}

/// 2. Rotary on the first `n_rot = hd/2` dimensions of each head: the library's rope op with
///    `n_dims = n_rot`, against the rotation written out plainly on the host.
fn part2_half_rotary(ctx: &mut Context, model: &Model, n: usize) -> Res<Check> {
    let hp = &model.hparams;
    let (hd, nh) = (hp.head_dim, hp.n_head);
    // Any [hd, nh, n] tensor shows it: a fixed pseudo-random one.
    let src: Vec<f32> = (0..hd * nh * n)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let q = ctx.new_tensor_3d(DType::F32, hd, nh, n)?;
    ctx.set_f32(q, &src)?;
    let pos = ctx.new_tensor_1d(DType::I32, n)?;
    ctx.set_i32(pos, &(0..n as i32).collect::<Vec<_>>())?;
    let rope = RopeParams {
        n_dims: hp.n_rot,
        mode: RopeMode::Normal,
        freq_base: hp.rope_freq_base,
        freq_scale: hp.rope_freq_scale,
    };
    let ours = ctx.rope_ext(q, pos, rope)?;

    // The same rotation on the host: pair (2i, 2i+1), i < n_rot/2, turns by
    // p · base^(−2i/n_rot); dimensions n_rot.. of each head stay as they are.
    let mut want = src.clone();
    for t in 0..n {
        for head in 0..nh {
            let base = (t * nh + head) * hd;
            for i in 0..hp.n_rot / 2 {
                let theta = t as f64
                    * hp.rope_freq_scale as f64
                    * (hp.rope_freq_base as f64).powf(-2.0 * i as f64 / hp.n_rot as f64);
                let (c, s) = (theta.cos(), theta.sin());
                let (x0, x1) = (src[base + 2 * i] as f64, src[base + 2 * i + 1] as f64);
                want[base + 2 * i] = (x0 * c - x1 * s) as f32;
                want[base + 2 * i + 1] = (x0 * s + x1 * c) as f32;
            }
        }
    }
    let reference = ctx.new_tensor_3d(DType::F32, hd, nh, n)?;
    ctx.set_f32(reference, &want)?;
    Ok(Check {
        what: format!(
            "2. rotary on {} of {hd} dimensions per head (normal mode) vs the rotation written \
             out; dimensions {}..{hd} pass through",
            hp.n_rot, hp.n_rot
        ),
        ours,
        reference,
    })
}

/// 3. SwiGLU over the fused [gate | up] output, against LLaMA's two products (the halves of
///    `ffn_up` taken as separate gate and up matrices) and `silu(g)·u`.
fn part3_fused_gate_up(ctx: &mut Context, model: &Model, h: Tensor) -> Res<Check> {
    let hp = &model.hparams;
    let ffn_up = wref(model, layer0(model)?.ffn_up)?;
    let up = model.import(ctx, ffn_up)?; // [n_embd, 2·n_ff]
    let gu = ctx.mul_mat(up, h)?; // [2·n_ff, n]
    let ours = ctx.swiglu(gu)?; // [n_ff, n]

    let w_row = ffn_up.dtype.row_size(hp.n_embd);
    let w_gate = ctx.view_2d(up, hp.n_embd, hp.n_ff, w_row, 0)?;
    let w_up = ctx.view_2d(up, hp.n_embd, hp.n_ff, w_row, hp.n_ff * w_row)?;
    let g = ctx.mul_mat(w_gate, h)?;
    let u = ctx.mul_mat(w_up, h)?;
    let reference = ctx.swiglu_split(g, u)?;
    Ok(Check {
        what: format!(
            "3. fused gate|up: swiglu(W_up·h) over [{0} gate | {0} up] vs LLaMA's \
             silu(W_gate·h)·(W_up·h)",
            hp.n_ff
        ),
        ours,
        reference,
    })
}

/// 4. The whole model: a chat turn in ChatGLM3's format (the model has no Jinja template).
fn part4_whole_model(model: Arc<Model>, question: &str) -> Res<()> {
    let template = ChatTemplate::for_model(&model)?;
    let prompt = template.render(&[Message::user(question)], true)?;
    println!("\n4. the whole model, one chat turn; the prompt is {prompt:?}");
    let session = Session::new(
        model,
        SessionParams {
            n_ctx: 512,
            ..SessionParams::default()
        },
    )?;
    let mut chat = Chat::with_template(session, template);
    let params = GenerateParams {
        max_tokens: 24,
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        ..GenerateParams::default()
    };
    let mut out = std::io::stdout().lock();
    let g = chat.send(question, &params, |ev| {
        let _ = write!(out, "{}", ev.text);
        let _ = out.flush();
        ControlFlow::Continue(())
    })?;
    writeln!(out)?;
    println!(
        "({} prompt tokens, {} generated, {:.1} tokens/s; random weights make random text)",
        g.prompt_tokens.len(),
        g.tokens.len(),
        g.timings.gen_tps()
    );
    Ok(())
}
