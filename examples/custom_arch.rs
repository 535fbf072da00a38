//! Bringing an architecture ggrs does not ship, from outside the library.
//!
//! ```text
//! cargo run --release --example custom_arch                 # the tiny random-weight model
//! cargo run --release --example custom_arch -- tiny-llama-f16.gguf "Once upon a time"
//! ```
//!
//! `toyllama` is a made-up family: the LLaMA block, plus a logit divisor read from a key of
//! its own, `toyllama.logit_scale` (Granite models have such a scale; ggrs has no Granite).
//! This file is all it takes to run it:
//!
//! 1. [`ToyLlama`] implements [`Architecture`]: its name, and `load`, which reads its
//!    weights through the shared [`WeightLoader`] into a weight struct of its own
//!    ([`ToyModel`]: handles, not tensors) and parses its key once.
//! 2. [`ToyModel`] implements [`ArchModel`]: `build` writes the graph of one step with
//!    ggrs-core's ops and the library's KV-cache attention block. Positions, the causal mask,
//!    prompt encoding and token text keep their defaults.
//! 3. [`Model::load_arch`] loads a file with it (or [`Registry::register`] it next to
//!    ggrs's own and [`Model::load_from`] the registry); sessions, generation and chat then
//!    work as for any model.
//!
//! There is no `toyllama` file anywhere, so [`write_toy_file`] makes one from the tiny LLaMA
//! model: the same tensors, `general.architecture = "toyllama"`, its keys renamed and the
//! scale added. `tests/custom_arch.rs` runs this example's code and checks its logits against
//! the built-in `llama` architecture's on the original file.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ggrs::core::gguf::{GgufFile, GgufWriter, Value};
use ggrs::core::{Context, RopeMode, RopeParams};
use ggrs::llama::architecture::{ArchModel, Architecture, StepTensors};
use ggrs::llama::hparams::HParams;
use ggrs::llama::kv_cache::KvCache;
use ggrs::llama::loader::{ImportedWeights, WeightId, WeightLoader};
use ggrs::llama::step::{cached_attention, AttnDims, StepInputs, StepShape};
use ggrs::llama::{
    GenerateParams, LlamaError, Model, ModelOptions, Registry, SamplingParams, Session,
    SessionParams,
};

/// The `toyllama` architecture (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct ToyLlama;

/// The key of the logit divisor.
pub const LOGIT_SCALE_KEY: &str = "toyllama.logit_scale";

/// One block's weights: handles the loader gave out.
#[derive(Debug, Clone)]
pub struct ToyLayer {
    attn_norm: WeightId,
    wq: WeightId,
    wk: WeightId,
    wv: WeightId,
    wo: WeightId,
    ffn_norm: WeightId,
    ffn_gate: WeightId,
    ffn_up: WeightId,
    ffn_down: WeightId,
}

/// A loaded `toyllama` model: its weights and its logit scale.
#[derive(Debug, Clone)]
pub struct ToyModel {
    /// `toyllama.logit_scale`: logits are divided by it.
    pub logit_scale: f32,
    tok_embd: WeightId,
    output_norm: WeightId,
    output: WeightId,
    layers: Vec<ToyLayer>,
}

impl Architecture for ToyLlama {
    fn name(&self) -> &'static str {
        "toyllama"
    }

    // `hparams` keeps its default: the shared keys under `toyllama.`.

    fn load(
        &self,
        hp: &HParams,
        l: &mut WeightLoader<'_>,
    ) -> ggrs::llama::Result<Box<dyn ArchModel>> {
        // A key of the architecture's own, read and checked once, here.
        let logit_scale = match l.file().get(LOGIT_SCALE_KEY) {
            None => 1.0,
            Some(v) => v
                .as_f32()
                .filter(|s| s.is_finite() && *s > 0.0)
                .ok_or_else(|| LlamaError::BadKey {
                    key: LOGIT_SCALE_KEY.into(),
                    detail: "expected a positive number".into(),
                })?,
        };
        let (e, v, f) = (hp.n_embd, hp.n_vocab, hp.n_ff);
        let (q, kv) = (hp.n_head * hp.head_dim, hp.n_embd_kv());
        // Each call checks the name, the shape and the type, and names the tensor on error.
        let tok_embd = l.rows("token_embd.weight", &[e, v])?;
        let output_norm = l.f32("output_norm.weight", &[e])?;
        let output = match l.opt_matrix("output.weight", &[e, v])? {
            Some(o) => o,
            None => l.also_matrix(tok_embd)?, // tied embeddings
        };
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            layers.push(ToyLayer {
                attn_norm: l.f32(&n("attn_norm.weight"), &[e])?,
                wq: l.matrix(&n("attn_q.weight"), &[e, q])?,
                wk: l.matrix(&n("attn_k.weight"), &[e, kv])?,
                wv: l.matrix(&n("attn_v.weight"), &[e, kv])?,
                wo: l.matrix(&n("attn_output.weight"), &[q, e])?,
                ffn_norm: l.f32(&n("ffn_norm.weight"), &[e])?,
                ffn_gate: l.matrix(&n("ffn_gate.weight"), &[e, f])?,
                ffn_up: l.matrix(&n("ffn_up.weight"), &[e, f])?,
                ffn_down: l.matrix(&n("ffn_down.weight"), &[f, e])?,
            });
        }
        Ok(Box::new(ToyModel {
            logit_scale,
            tok_embd,
            output_norm,
            output,
            layers,
        }))
    }
}

impl ArchModel for ToyModel {
    /// The LLaMA block, then `logits / logit_scale`:
    ///
    /// ```text
    /// x = token_embd[tokens]                                  // [n_embd, n]
    /// per block: h = rms_norm(x)·attn_norm; q, k, v = Wq·h, Wk·h, Wv·h; rope(q, k)
    ///            x = x + Wo·attention(q, cache(k), cache(v))
    ///            x = x + W_down·(silu(W_gate·rms_norm(x)·ffn_norm) · W_up·…)
    /// logits = output·(rms_norm(x)·output_norm) / logit_scale // [n_vocab, n_outputs]
    /// ```
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> ggrs::llama::Result<StepTensors> {
        let n = shape.n_tokens;
        let dims = AttnDims {
            head_dim: hp.head_dim,
            n_head: hp.n_head,
            n_head_kv: hp.n_head_kv,
        };
        let rope = RopeParams {
            n_dims: hp.n_rot,
            mode: RopeMode::Normal,
            freq_base: hp.rope_freq_base,
            freq_scale: hp.rope_freq_scale,
        };
        // The leaves the session fills: tokens, positions, cache cells, mask, output rows.
        let inp = StepInputs::new(ctx, shape, 1, false)?;
        let mut x = ctx.get_rows(w[self.tok_embd], inp.tokens)?; // [n_embd, n]
        for (il, l) in self.layers.iter().enumerate() {
            let h = ctx.rms_norm_mul(x, w[l.attn_norm], hp.rms_eps)?;
            let q = ctx.mul_mat(w[l.wq], h)?; // [n_head·hd, n]
            let k = ctx.mul_mat(w[l.wk], h)?; // [n_head_kv·hd, n]
            let v = ctx.mul_mat(w[l.wv], h)?; // [n_head_kv·hd, n]
            let q = ctx.reshape_3d(q, hp.head_dim, hp.n_head, n)?;
            let q = ctx.rope_ext(q, inp.pos, rope)?;
            let k = ctx.reshape_3d(k, hp.head_dim, hp.n_head_kv, n)?;
            let k = ctx.rope_ext(k, inp.pos, rope)?;
            let k = ctx.reshape_2d(k, hp.n_embd_kv(), n)?;
            // Writes k and v into the cache at this step's cells, attends over the cache.
            let attn = cached_attention(ctx, kv, il, &inp, shape, dims, q, [k, v])?;
            let mut cur = ctx.mul_mat(w[l.wo], attn)?; // [n_embd, n]
            let mut residual = x;
            if il + 1 == self.layers.len() {
                // Only the rows whose logits are wanted go on.
                if let Some(ids) = inp.out_ids {
                    cur = ctx.get_rows(cur, ids)?;
                    residual = ctx.get_rows(residual, ids)?;
                }
            }
            let ffn_inp = ctx.add(cur, residual)?;
            let h = ctx.rms_norm_mul(ffn_inp, w[l.ffn_norm], hp.rms_eps)?;
            let gate = ctx.mul_mat(w[l.ffn_gate], h)?; // [n_ff, n]
            let up = ctx.mul_mat(w[l.ffn_up], h)?;
            let act = ctx.swiglu_split(gate, up)?;
            let down = ctx.mul_mat(w[l.ffn_down], act)?; // [n_embd, n]
            x = ctx.add(down, ffn_inp)?;
        }
        let h = ctx.rms_norm_mul(x, w[self.output_norm], hp.rms_eps)?;
        let logits = ctx.mul_mat(w[self.output], h)?; // [n_vocab, n_outputs]
        let logits = ctx.scale(logits, 1.0 / self.logit_scale)?;
        ctx.set_name(logits, "logits")?;
        ctx.set_output(logits)?;
        Ok(StepTensors {
            inputs: inp,
            logits,
        })
    }
}

/// Writes to `dst` a `toyllama` file made from the `llama` file `src`: the same tensors,
/// `general.architecture = "toyllama"`, every `llama.*` key renamed `toyllama.*`, and
/// [`LOGIT_SCALE_KEY`] = `logit_scale`.
pub fn write_toy_file(src: &Path, dst: &Path, logit_scale: f32) -> ggrs::llama::Result<()> {
    let file = GgufFile::open(src)?;
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata() {
        let (k, v) = match (k.as_str(), k.strip_prefix("llama.")) {
            ("general.architecture", _) => (k.clone(), Value::String("toyllama".into())),
            (_, Some(rest)) => (format!("toyllama.{rest}"), v.clone()),
            _ => (k.clone(), v.clone()),
        };
        w.add_kv(k, v)?;
    }
    w.add_kv(LOGIT_SCALE_KEY, Value::F32(logit_scale))?;
    for t in file.tensors() {
        w.add_tensor_info(t.name.clone(), t.dtype, t.shape())?;
    }
    let mut tensors = file.tensors().iter();
    w.write_to_path(dst, |_, out| match tensors.next() {
        Some(t) => out.write_all(file.tensor_data(t)),
        None => Err(std::io::Error::other("more tensor infos than tensors")),
    })?;
    Ok(())
}

/// `shared/reference/tiny/tiny-llama-f16.gguf`, beside the repository (or under
/// `$GGRS_REFERENCE_DIR`).
pub fn tiny_llama_path() -> PathBuf {
    let reference = std::env::var_os("GGRS_REFERENCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            here.ancestors()
                .map(|d| d.join("shared/reference"))
                .find(|d| d.is_dir())
                .unwrap_or_else(|| here.join("../shared/reference"))
        });
    reference.join("tiny/tiny-llama-f16.gguf")
}

/// Loads `path` (a `toyllama` file) through a registry that knows `toyllama` besides ggrs's
/// own architectures.
pub fn load_toy(path: &Path) -> ggrs::llama::Result<Arc<Model>> {
    let mut registry = Registry::builtin();
    registry.register(ToyLlama);
    Ok(Arc::new(Model::load_from(
        &registry,
        path,
        ModelOptions::default(),
    )?))
}

#[allow(dead_code)] // `tests/custom_arch.rs` includes this file for the items above.
fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

#[allow(dead_code)]
fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let src = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(tiny_llama_path);
    let prompt = args
        .next()
        .unwrap_or_else(|| "The capital of France is".into());
    let dst = std::env::temp_dir().join(format!("toyllama-{}.gguf", std::process::id()));
    write_toy_file(&src, &dst, 2.0)?;
    println!("wrote {} (architecture toyllama)", dst.display());

    // ggrs's own registry does not know the name: a typed error, not LLaMA's graph.
    match Model::load(&dst) {
        Err(e @ LlamaError::UnsupportedArch { .. }) => println!("Model::load: {e}"),
        Err(e) => return Err(e.into()),
        Ok(_) => return Err("the built-in registry accepted toyllama".into()),
    }

    let model = load_toy(&dst)?;
    let toy = model
        .arch_weights::<ToyModel>()
        .ok_or("loaded by another architecture")?;
    println!(
        "loaded as {} ({} layers, logit scale {})",
        model.arch_name(),
        model.hparams.n_layer,
        toy.logit_scale
    );
    let mut session = Session::new(model.clone(), SessionParams::default())?;
    let params = GenerateParams {
        max_tokens: 16,
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        ..GenerateParams::default()
    };
    print!("{prompt}");
    let g = session.generate(&prompt, &params, |ev| {
        print!("{}", ev.text);
        ControlFlow::Continue(())
    })?;
    println!("\n[{} tokens, stop: {:?}]", g.tokens.len(), g.stop);
    std::fs::remove_file(&dst)?;
    Ok(())
}
