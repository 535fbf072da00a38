//! gpt-oss (`gpt-oss`, llama.cpp's `llama_model_openai_moe`): OpenAI's open-weight MoE
//! decoder. Pre-norm blocks whose attention has Q/K/V/O biases and per-head **attention
//! sinks**, alternating sliding-window ("local") and global layers, YaRN rotary (NEOX), and a
//! mixture of experts in every layer with biases everywhere and a clamped SwiGLU:
//!
//! ```text
//! x = token_embd[tokens]
//! for each layer l (local iff l mod pattern < pattern − 1; pattern 2: even layers local):
//!     h = rms_norm(x) · attn_norm
//!     q, k, v = Wq·h + bq, Wk·h + bk, Wv·h + bv       // heads × head_dim (key_length)
//!     q, k = rope_neox_yarn(q, k)                     // local: base freq_base_swa
//!     a = Σ_j e^(s_j − M)·v_j / (Σ_j e^(s_j − M) + e^(sink_h − M)),  s = K·q / √head_dim
//!                                                     // local: keys p − window + 1 … p
//!     x = x + Wo·a + bo
//!     h = rms_norm(x) · post_attention_norm
//!     x = x + moe(h)                                  // OaiMoe
//! logits = output · (rms_norm(x) · output_norm)
//! ```
//!
//! `attention.sliding_window` is required; `attention.sliding_window_pattern` (a number, or
//! one boolean per layer) defaults to 2, `rope.freq_base_swa` to `rope.freq_base`, as in
//! llama.cpp. The real models ship MXFP4 experts; any expert type the matrix products take
//! loads here.

use ggrs_core::gguf::{GgufFile, Value};
use ggrs_core::{Context, RopeMode, Tensor};

use super::decoder::Rotary;
use super::decoder::{attention_masked, blk, AttnMasking, AttnWeights, FeedForward, Head, QkvBias};
use super::gemma2::{output_logits, positive, sliding_window};
use super::qwen3moe::{count_key, sum_slots, MoeFfn};
use crate::architecture::{
    ArchModel, Architecture, SlidingWindowState, StepState, StepTensors, TextConventions,
};
use crate::error::{LlamaError, Result};
use crate::hparams::{get_usize, HParams};
use crate::kv_cache::KvCache;
use crate::loader::{ImportedWeights, WeightId, WeightLoader};
use crate::step::{StepInputs, StepShape};
use crate::tokenizer::{TokenType, Tokenizer};

/// The `gpt-oss` architecture.
#[derive(Debug, Clone, Copy, Default)]
pub struct GptOss;

/// gpt-oss's SwiGLU constants (llama.cpp hard-codes them): the sigmoid's factor and the
/// clamp.
pub const SWIGLU_ALPHA: f32 = 1.702;
/// See [`SWIGLU_ALPHA`].
pub const SWIGLU_LIMIT: f32 = 7.0;

/// gpt-oss's mixture of experts as llama.cpp's `build_moe_ffn` computes it with
/// `SOFTMAX_WEIGHT` gating and biases (`e` = `n_embd`, `f` = the experts' width, `x` =
/// `n_expert`):
///
/// ```text
/// l = gate_inp · h + gate_inp_b                   // [x, n]: router logits
/// ids = indices of the n_used largest l           // [n_used, n], largest first
/// w = softmax(l[ids])                             // over the chosen ones only
/// g_s = gate[ids_s]·h + gate_b[ids_s], u_s = up[ids_s]·h + up_b[ids_s]
/// y_s = down[ids_s] · swiglu_oai(g_s, u_s) + down_b[ids_s]      // [e, n_used, n]
/// out = w_0·y_0 + w_1·y_1 + …                     // summed in slot order
/// ```
///
/// with `swiglu_oai(g, u) = x·σ(1.702·x)·(y + 1)`, `x = min(g, 7)`, `y = clamp(u, −7, 7)`
/// ([`ggrs_core::Context::swiglu_oai`]).
#[derive(Debug, Clone)]
pub struct OaiMoe {
    /// Router and stacked experts (`[e, x]` f32, `[e, f, x]`, `[e, f, x]`, `[f, e, x]`) and
    /// the expert counts, as Qwen3-MoE has them.
    pub base: MoeFfn,
    /// Router bias, `[x]` f32.
    pub gate_inp_b: WeightId,
    /// The gate projections' biases, `[f, x]` f32.
    pub gate_b: WeightId,
    /// The up projections' biases, `[f, x]` f32.
    pub up_b: WeightId,
    /// The down projections' biases, `[e, x]` f32.
    pub down_b: WeightId,
}

impl OaiMoe {
    /// Reads block `i`'s router, stacked experts ([`MoeFfn::load`]) and their biases.
    pub fn load(hp: &HParams, l: &mut WeightLoader<'_>, i: usize) -> Result<OaiMoe> {
        let base = MoeFfn::load(hp, l, i)?;
        let (e, nx) = (hp.n_embd, base.n_expert);
        // Read and checked by MoeFfn::load.
        let f = count_key(hp, l, "expert_feed_forward_length", 1 << 31)?;
        let n = |s: &str| blk(i, s);
        Ok(OaiMoe {
            gate_inp_b: l.f32(&n("ffn_gate_inp.bias"), &[nx])?,
            gate_b: l.f32(&n("ffn_gate_exps.bias"), &[f, nx])?,
            up_b: l.f32(&n("ffn_up_exps.bias"), &[f, nx])?,
            down_b: l.f32(&n("ffn_down_exps.bias"), &[e, nx])?,
            base,
        })
    }
}

impl FeedForward for OaiMoe {
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        h: Tensor,
    ) -> Result<Tensor> {
        let (e, n) = (hp.n_embd, ctx.shape(h)?[1]);
        let m = &self.base;
        let nu = m.n_used;
        // Routing, as llama.cpp orders it: the top n_used of the biased logits, weighted by
        // a softmax over those alone.
        let logits = ctx.mul_mat(w[m.gate_inp], h)?; // [nx, n]
        let logits = ctx.add(logits, w[self.gate_inp_b])?;
        let nx = ctx.shape(logits)?[0];
        let ids = ctx.argsort_top_k(logits, nu)?; // [nu, n]
        let chosen = ctx.reshape_3d(logits, 1, nx, n)?;
        let weights = ctx.get_rows(chosen, ids)?; // [1, nu, n]
        let weights = ctx.reshape_2d(weights, nu, n)?;
        let weights = ctx.soft_max(weights)?;
        let weights = ctx.reshape_3d(weights, 1, nu, n)?;
        // The chosen experts, every slot reading the token's one column.
        let x = ctx.reshape_3d(h, e, 1, n)?;
        let up = ctx.mul_mat_id(w[m.up_exps], x, ids)?; // [f, nu, n]
        let up = ctx.add_id(up, w[self.up_b], ids)?;
        let gate = ctx.mul_mat_id(w[m.gate_exps], x, ids)?;
        let gate = ctx.add_id(gate, w[self.gate_b], ids)?;
        let act = ctx.swiglu_oai(gate, up, SWIGLU_ALPHA, SWIGLU_LIMIT)?;
        let experts = ctx.mul_mat_id(w[m.down_exps], act, ids)?; // [e, nu, n]
        let experts = ctx.add_id(experts, w[self.down_b], ids)?;
        let experts = ctx.mul(experts, weights)?;
        sum_slots(ctx, experts)
    }
}

/// One gpt-oss block.
#[derive(Debug, Clone)]
pub struct GptOssLayer {
    /// Norm, projections and their biases.
    pub attn: AttnWeights,
    /// Sink logit of each query head, `[n_head]` f32 (`attn_sinks.weight`).
    pub sinks: WeightId,
    /// RMSNorm weight before the experts, `[n_embd]` (`post_attention_norm.weight`).
    pub ffn_norm: WeightId,
    /// The mixture of experts.
    pub moe: OaiMoe,
}

/// gpt-oss's constants beyond [`HParams`].
#[derive(Debug, Clone, PartialEq)]
pub struct GptOssConsts {
    /// Positions a local layer's query sees, its own included (`attention.sliding_window`).
    pub window: u32,
    /// Whether each layer attends through the sliding window.
    pub local: Vec<bool>,
    /// Rotary base of the local layers (`rope.freq_base_swa`, default `rope.freq_base`).
    pub freq_base_swa: f32,
}

impl GptOssConsts {
    /// Reads the constants from `f` (keys under `hp.arch`), with llama.cpp's defaults.
    pub fn from_gguf(f: &GgufFile, hp: &HParams) -> Result<GptOssConsts> {
        let k = |s: &str| format!("{}.{s}", hp.arch);
        let window = sliding_window(f, &k("attention.sliding_window"), None)?;
        let local = swa_layers(f, &k("attention.sliding_window_pattern"), hp.n_layer, 2)?;
        let freq_base_swa = positive(f, &k("rope.freq_base_swa"), hp.rope_freq_base)?;
        let key = k("attention.value_length");
        if get_usize(f, &key)?.is_some_and(|v| v != hp.head_dim) {
            return Err(LlamaError::BadKey {
                key,
                detail: format!("values must be as wide as keys ({})", hp.head_dim),
            });
        }
        Ok(GptOssConsts {
            window,
            local,
            freq_base_swa,
        })
    }
}

/// Which of `n_layer` layers use the sliding window, as llama.cpp's `load_swa_pattern` reads
/// `key`: one boolean per layer, or a period `p` (absent: `default`) making layer `il` local
/// iff `il mod p < p − 1` (0: every layer local).
pub fn swa_layers(f: &GgufFile, key: &str, n_layer: usize, default: usize) -> Result<Vec<bool>> {
    if let Some(Value::Array(items)) = f.get(key) {
        let flags: Option<Vec<bool>> = items
            .iter()
            .map(|v| match v {
                Value::Bool(b) => Some(*b),
                _ => None,
            })
            .collect();
        return match flags {
            Some(flags) if flags.len() == n_layer => Ok(flags),
            _ => Err(LlamaError::BadKey {
                key: key.to_string(),
                detail: format!("expected {n_layer} booleans (one per layer) or a number"),
            }),
        };
    }
    let p = get_usize(f, key)?.unwrap_or(default);
    Ok((0..n_layer).map(|il| p == 0 || il % p < p - 1).collect())
}

/// A loaded gpt-oss model.
#[derive(Debug, Clone)]
pub struct GptOssModel {
    /// Embeddings and output head.
    pub head: Head,
    /// Transformer blocks.
    pub layers: Vec<GptOssLayer>,
    /// Window, local layers, local rotary base.
    pub consts: GptOssConsts,
}

impl Architecture for GptOss {
    fn name(&self) -> &'static str {
        "gpt-oss"
    }

    fn hparams(&self, file: &GgufFile) -> Result<HParams> {
        let mut hp = HParams::from_gguf(file)?;
        let c = GptOssConsts::from_gguf(file, &hp)?;
        hp.set_windows(|il| c.local[il].then_some(c.window));
        Ok(hp)
    }

    fn load(&self, hp: &HParams, l: &mut WeightLoader<'_>) -> Result<Box<dyn ArchModel>> {
        let consts = GptOssConsts::from_gguf(l.file(), hp)?;
        let head = Head::load(hp, l)?;
        // `HParams::from_gguf` bounded `n_layer` by the file's tensor count.
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            layers.push(GptOssLayer {
                attn: AttnWeights::load(hp, l, i, QkvBias::Required, false)?,
                sinks: l.f32(&blk(i, "attn_sinks.weight"), &[hp.n_head])?,
                ffn_norm: l.f32(&blk(i, "post_attention_norm.weight"), &[hp.n_embd])?,
                moe: OaiMoe::load(hp, l, i)?,
            });
        }
        Ok(Box::new(GptOssModel {
            head,
            layers,
            consts,
        }))
    }

    fn text(&self, _file: &GgufFile) -> Result<Box<dyn TextConventions>> {
        Ok(Box::new(HarmonyText))
    }
}

/// gpt-oss's text conventions: the harmony marks of a reply
/// ([`MARKS`](crate::chat::harmony::MARKS): `<|channel|>`, `<|message|>`, …), control
/// tokens of its vocabulary, are written in the generated text (other control tokens are
/// not), so that a chat reply's channels — reasoning, answer, tool calls — can be read.
#[derive(Debug, Clone, Copy, Default)]
pub struct HarmonyText;

impl TextConventions for HarmonyText {
    fn token_text(&self, tok: &Tokenizer, id: u32) -> Option<String> {
        let t = tok.vocab().token(id)?;
        (t.ty == TokenType::Control && crate::chat::harmony::MARKS.contains(&t.text.as_str()))
            .then(|| t.text.clone())
    }
}

impl ArchModel for GptOssModel {
    fn build(
        &self,
        ctx: &mut Context,
        hp: &HParams,
        w: &ImportedWeights,
        kv: &KvCache,
        shape: StepShape,
    ) -> Result<StepTensors> {
        let c = &self.consts;
        let mut inp = StepInputs::new(ctx, shape, 1, false)?;
        let mask_swa = inp.add_swa_mask(ctx, shape)?;
        let freqs = w.opt(self.head.rope_freqs);
        let global = Rotary::new(hp, RopeMode::Neox, freqs);
        let base_scale = (c.freq_base_swa, hp.rope_freq_scale);
        let local = Rotary::neox_with(hp, hp.n_rot, base_scale, freqs);
        let kq_scale = 1.0 / (hp.head_dim as f32).sqrt();

        let mut x = ctx.get_rows(w[self.head.tok_embd], inp.tokens)?; // [n_embd, n]
        for (il, l) in self.layers.iter().enumerate() {
            let is_local = c.local[il];
            let how = AttnMasking {
                kq_scale,
                at: match is_local {
                    true => inp.window_layer(mask_swa, shape),
                    false => inp.global_layer(shape),
                },
                sinks: Some(w[l.sinks]),
            };
            let rope = if is_local { local } else { global };
            let mut cur =
                attention_masked(ctx, hp, w, kv, &inp, shape, il, &l.attn, Some(rope), x, how)?;
            let mut inp_sa = x;
            if il + 1 == self.layers.len() {
                if let Some(ids) = inp.out_ids {
                    cur = ctx.get_rows(cur, ids)?;
                    inp_sa = ctx.get_rows(inp_sa, ids)?;
                }
            }
            let ffn_inp = ctx.add(cur, inp_sa)?;
            let h = ctx.rms_norm_mul(ffn_inp, w[l.ffn_norm], hp.rms_eps)?;
            let out = l.moe.build(ctx, hp, w, h)?;
            x = ctx.add(out, ffn_inp)?;
        }
        let norm_out = [self.head.output_norm, self.head.output];
        output_logits(ctx, (hp, w), inp, x, norm_out, None)
    }

    fn new_state(&self) -> Box<dyn StepState> {
        Box::new(SlidingWindowState {
            window: self.consts.window,
        })
    }
}
