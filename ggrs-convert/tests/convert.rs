//! `convert_hf_dir` against independent references:
//! (a) the ChatGLM-6B v1 tiny checkpoint: every tensor equals the safetensors data (read here
//!     by a plain parser), keys as `docs/gguf-chatglm1.md` documents;
//! (b) round trips: HF-style checkpoints written here (by a small safetensors writer and a
//!     small SentencePiece protobuf writer) from the tiny llama.cpp GGUFs, with llama.cpp's
//!     Q/K permutation undone by hand, convert back to the original tensors byte for byte,
//!     and the models still match llama.cpp's outputs;
//! (c) bad input: each a typed error with a clear message;
//! (d) the registry of source architectures, and every architecture's output byte for byte
//!     against files recorded before the converter was split into one file per architecture.

/// The helpers ggrs-llama's tests share (reference files, comparing a model with llama.cpp's
/// outputs): the round trips load the converted models with ggrs-llama.
#[path = "../../ggrs-llama/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ggrs_convert::{
    convert_hf_dir, convert_hf_dir_with, ConvertError, ConvertEvent, ConvertOptions, OutType,
    SourceArch,
};
use ggrs_core::gguf::{GgufFile, Value};
use ggrs_core::DType;
use serde_json::json;

// ---------------------------------------------------------------------------------------
// Helpers written plainly for the tests.
// ---------------------------------------------------------------------------------------

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("convert-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn v1_dir() -> PathBuf {
    common::reference_dir().join("chatglm6b-v1/tiny_model")
}

fn opts(t: OutType) -> ConvertOptions {
    ConvertOptions {
        outtype: t,
        ..Default::default()
    }
}

/// One tensor of a safetensors file: name, dtype string, shape (outermost first), bytes.
struct StT {
    name: String,
    dtype: &'static str,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// Writes a safetensors file: u64 header length, JSON header, data.
fn write_safetensors(path: &Path, tensors: &[StT]) {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut off = 0usize;
    for t in tensors {
        header.insert(
            t.name.clone(),
            json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [off, off + t.data.len()]}),
        );
        off += t.data.len();
    }
    let mut h = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    for t in tensors {
        out.extend_from_slice(&t.data);
    }
    std::fs::write(path, out).unwrap();
}

/// Reads a safetensors file plainly: name → (dtype, shape, bytes).
fn read_safetensors(path: &Path) -> Vec<(String, String, Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut out = Vec::new();
    for (name, e) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        let shape = e["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let b = e["data_offsets"][0].as_u64().unwrap() as usize;
        let en = e["data_offsets"][1].as_u64().unwrap() as usize;
        out.push((
            name.clone(),
            e["dtype"].as_str().unwrap().to_string(),
            shape,
            data[b..en].to_vec(),
        ));
    }
    out
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Protobuf varint.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A length-delimited protobuf field.
fn pb_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    varint(out, field << 3 | 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A SentencePiece `ModelProto` with the given pieces and a trainer spec naming unk/bos/eos.
fn sentencepiece_model(tokens: &[String], scores: &[f32], types: &[i32]) -> Vec<u8> {
    let mut out = Vec::new();
    for ((t, &s), &ty) in tokens.iter().zip(scores).zip(types) {
        let mut p = Vec::new();
        pb_bytes(&mut p, 1, t.as_bytes());
        varint(&mut p, 2 << 3 | 5);
        p.extend_from_slice(&s.to_le_bytes());
        if ty != 1 {
            varint(&mut p, 3 << 3);
            varint(&mut p, ty as u64);
        }
        pb_bytes(&mut out, 1, &p);
    }
    let mut spec = Vec::new();
    varint(&mut spec, 3 << 3); // model_type = BPE
    varint(&mut spec, 2);
    for (field, id) in [(40u64, 0u64), (41, 1), (42, 2)] {
        varint(&mut spec, field << 3);
        varint(&mut spec, id);
    }
    varint(&mut spec, 43 << 3); // pad_id = -1, sign-extended
    varint(&mut spec, u64::MAX);
    pb_bytes(&mut out, 2, &spec);
    out
}

fn vocab_of(g: &GgufFile) -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let arr = |k: &str| g.get(k).unwrap().as_array().unwrap().to_vec();
    let tokens = arr("tokenizer.ggml.tokens")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let scores = arr("tokenizer.ggml.scores")
        .iter()
        .map(|v| v.as_f32().unwrap())
        .collect();
    let types = arr("tokenizer.ggml.token_type")
        .iter()
        .map(|v| v.as_i64().unwrap() as i32)
        .collect();
    (tokens, scores, types)
}

fn st_dtype(d: DType) -> &'static str {
    match d {
        DType::F32 => "F32",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        other => panic!("no safetensors dtype for {other:?}"),
    }
}

/// Undoes llama.cpp's Q/K permutation: HF row `h·d + t·d/2 + j` is GGUF row `h·d + 2j + t`.
fn unpermute_rows(data: &[u8], rows: usize, n_head: usize) -> Vec<u8> {
    let rb = data.len() / rows;
    let d = rows / n_head;
    let mut out = vec![0u8; data.len()];
    for h in 0..n_head {
        for t in 0..2 {
            for j in 0..d / 2 {
                let hf = h * d + t * (d / 2) + j;
                let gg = h * d + 2 * j + t;
                out[hf * rb..(hf + 1) * rb].copy_from_slice(&data[gg * rb..(gg + 1) * rb]);
            }
        }
    }
    out
}

/// Writes an HF directory from a GGUF: `names` maps GGUF → HF tensor names, `perm` gives
/// the heads of tensors whose rows llama.cpp permuted.
fn hf_from_gguf(
    g: &GgufFile,
    dir: &Path,
    config: serde_json::Value,
    names: &dyn Fn(&str) -> String,
    perm: &dyn Fn(&str) -> Option<usize>,
) {
    write_hf_tensors(g, dir, config, names, perm, Vec::new());
    let (tokens, scores, types) = vocab_of(g);
    std::fs::write(
        dir.join("tokenizer.model"),
        sentencepiece_model(&tokens, &scores, &types),
    )
    .unwrap();
}

/// `model.safetensors` (the GGUF's tensors as [`hf_from_gguf`] names them, then `extra`)
/// and `config.json`.
fn write_hf_tensors(
    g: &GgufFile,
    dir: &Path,
    config: serde_json::Value,
    names: &dyn Fn(&str) -> String,
    perm: &dyn Fn(&str) -> Option<usize>,
    extra: Vec<StT>,
) {
    let mut ts = Vec::new();
    for t in g.tensors() {
        let shape: Vec<usize> = t.ne[..t.n_dims].iter().rev().copied().collect();
        let mut data = g.tensor_data(t).to_vec();
        if let Some(n_head) = perm(&t.name) {
            data = unpermute_rows(&data, shape[0], n_head);
        }
        ts.push(StT {
            name: names(&t.name),
            dtype: st_dtype(t.dtype),
            shape,
            data,
        });
    }
    ts.extend(extra);
    write_safetensors(&dir.join("model.safetensors"), &ts);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

/// GGUF → Hugging Face tensor names for [`hf_from_gguf`]: a whole-model tensor by its pair
/// `(gguf, hf)` in `whole`; block tensor `blk.{i}.{g}` as `{layers}.{i}.{h}` for the pair
/// `(g, h)` in `block`.
fn hf_names(
    whole: &'static [(&'static str, &'static str)],
    layers: &'static str,
    block: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> String {
    move |n| {
        if let Some((_, h)) = whole.iter().find(|(g, _)| *g == n) {
            return h.to_string();
        }
        let rest = n.strip_prefix("blk.").unwrap();
        let (i, rest) = rest.split_once('.').unwrap();
        let (_, m) = block
            .iter()
            .find(|(g, _)| *g == rest)
            .unwrap_or_else(|| panic!("unexpected {rest}"));
        format!("{layers}.{i}.{m}")
    }
}

/// Compares the converted model `out` with llama.cpp's outputs `tiny/<jsonl>` (logits within
/// 0.01, 2 threads, the first 16 greedy tokens).
fn compare_with_llama_cpp(out: &Path, jsonl: &str) -> common::Report {
    let model = Arc::new(ggrs_llama::Model::load(out).expect("load the converted model"));
    let refs = common::read_jsonl(&common::reference_dir().join("tiny").join(jsonl));
    common::compare(&model, &refs, 0.01, 2, 16)
}

/// Every tensor of `orig` is in `conv` with the same type, shape and bytes; every metadata
/// entry of `orig` is in `conv` with the same value.
fn assert_same(orig: &GgufFile, conv: &GgufFile) {
    assert_same_but(orig, conv, &[]);
}

/// As [`assert_same`], but for the metadata keys `except`.
fn assert_same_but(orig: &GgufFile, conv: &GgufFile, except: &[&str]) {
    assert_eq!(orig.tensors().len(), conv.tensors().len());
    for t in orig.tensors() {
        let c = conv
            .tensor(&t.name)
            .unwrap_or_else(|| panic!("converted file lacks {}", t.name));
        assert_eq!(
            (c.dtype, c.ne, c.n_dims),
            (t.dtype, t.ne, t.n_dims),
            "{}",
            t.name
        );
        assert!(
            orig.tensor_data(t) == conv.tensor_data(c),
            "tensor {} differs from the original",
            t.name
        );
    }
    for (k, v) in orig
        .metadata()
        .iter()
        .filter(|(k, _)| !except.contains(&k.as_str()))
    {
        assert_eq!(conv.get(k), Some(v), "metadata key {k}");
    }
}

// ---------------------------------------------------------------------------------------
// (a) ChatGLM-6B v1.
// ---------------------------------------------------------------------------------------

#[test]
fn chatglm1_tiny_model_f32_equals_the_checkpoint() {
    let out = scratch("v1-f32").join("tiny.gguf");
    let mut notes = Vec::new();
    let mut seen = 0;
    let rep = convert_hf_dir_with(&v1_dir(), &out, &opts(OutType::F32), |e| match e {
        ConvertEvent::Note(s) => notes.push(s.to_string()),
        ConvertEvent::Tensor(p) => {
            assert_eq!(p.index, seen);
            seen += 1;
        }
    })
    .unwrap();
    assert_eq!(rep.n_tensors, 40);
    assert_eq!(seen, 40);
    assert!(rep.tokenizer.is_none());
    assert!(
        notes.iter().any(|n| n.contains("no tokenizer")),
        "a note says there is no tokenizer: {notes:?}"
    );
    let g = GgufFile::open(&out).unwrap();

    // Keys as documented.
    let s = |k: &str| g.get(k).and_then(Value::as_str).map(str::to_string);
    let u = |k: &str| g.get(k).and_then(Value::as_u32);
    let f = |k: &str| match g.get(k) {
        Some(Value::F32(x)) => Some(*x),
        other => panic!("{k} should be an f32, is {other:?}"),
    };
    assert_eq!(s("general.architecture").as_deref(), Some("chatglm1"));
    assert_eq!(
        s("general.name").as_deref(),
        Some("tiny-random-chatglm-6b-v1")
    );
    assert_eq!(u("chatglm1.context_length"), Some(2048));
    assert_eq!(u("chatglm1.embedding_length"), Some(128));
    assert_eq!(u("chatglm1.feed_forward_length"), Some(512));
    assert_eq!(u("chatglm1.block_count"), Some(3));
    assert_eq!(u("chatglm1.attention.head_count"), Some(4));
    assert_eq!(f("chatglm1.attention.layer_norm_epsilon"), Some(1e-5));
    assert_eq!(f("chatglm1.rope.freq_base"), Some(10000.0));
    assert_eq!(u("chatglm1.rope.dimension_count"), Some(16));
    assert!((f("chatglm1.residual_scale").unwrap() - 7.483_315).abs() < 1e-6);
    assert_eq!(
        g.get("chatglm1.position_encoding_2d"),
        Some(&Value::Bool(true))
    );
    assert_eq!(u("general.file_type"), Some(0));
    assert_eq!(u("tokenizer.ggml.bos_token_id"), Some(991));
    assert_eq!(u("tokenizer.ggml.eos_token_id"), Some(992));
    assert_eq!(u("tokenizer.ggml.padding_token_id"), Some(994));
    assert_eq!(u("tokenizer.ggml.mask_token_id"), Some(993));
    assert_eq!(u("tokenizer.ggml.gmask_token_id"), Some(990));
    assert!(g.get("tokenizer.ggml.tokens").is_none());
    assert!(g.get("tokenizer.ggml.model").is_none());

    // Every tensor equals the checkpoint's data, under the documented name and shape.
    let map = |hf: &str| -> String {
        if hf == "transformer.word_embeddings.weight" {
            return "token_embd.weight".into();
        }
        if hf == "lm_head.weight" {
            return "output.weight".into();
        }
        if let Some(rest) = hf.strip_prefix("transformer.final_layernorm.") {
            return format!("output_norm.{rest}");
        }
        let rest = hf.strip_prefix("transformer.layers.").unwrap();
        let (n, rest) = rest.split_once('.').unwrap();
        let (module, kind) = rest.rsplit_once('.').unwrap();
        let g = match module {
            "input_layernorm" => "attn_norm",
            "post_attention_layernorm" => "ffn_norm",
            "attention.query_key_value" => "attn_qkv",
            "attention.dense" => "attn_output",
            "mlp.dense_h_to_4h" => "ffn_up",
            "mlp.dense_4h_to_h" => "ffn_down",
            other => panic!("unexpected {other}"),
        };
        format!("blk.{n}.{g}.{kind}")
    };
    let st = read_safetensors(&v1_dir().join("model.safetensors"));
    assert_eq!(st.len(), g.tensors().len());
    for (name, dtype, shape, data) in &st {
        assert_eq!(dtype, "F32");
        let t = g
            .tensor(&map(name))
            .unwrap_or_else(|| panic!("no {}", map(name)));
        let ne: Vec<usize> = shape.iter().rev().copied().collect();
        assert_eq!(&t.ne[..t.n_dims], &ne[..], "{name}");
        assert_eq!(t.dtype, DType::F32);
        assert!(g.tensor_data(t) == &data[..], "{name} differs");
    }
}

#[test]
fn chatglm1_f16_bf16_q8_0_values() {
    let st = read_safetensors(&v1_dir().join("model.safetensors"));
    let find = |n: &str| st.iter().find(|t| t.0 == n).unwrap();
    let dir = scratch("v1-types");
    for t in [OutType::F16, OutType::BF16, OutType::Q8_0, OutType::Q4_0] {
        let out = dir.join(format!("{}.gguf", t.name()));
        convert_hf_dir(&v1_dir(), &out, &opts(t)).unwrap();
        let g = GgufFile::open(&out).unwrap();
        assert_eq!(
            g.get("general.file_type").and_then(Value::as_u32),
            Some(t.file_type())
        );
        // 1-D stays f32, bit for bit.
        let b = g.tensor("blk.1.attn_qkv.bias").unwrap();
        assert_eq!(b.dtype, DType::F32);
        assert!(
            g.tensor_data(b) == &find("transformer.layers.1.attention.query_key_value.bias").3[..]
        );
        let w = g.tensor("blk.1.attn_qkv.weight").unwrap();
        assert_eq!(w.dtype, t.dtype());
        let src = f32s(&find("transformer.layers.1.attention.query_key_value.weight").3);
        let data = g.tensor_data(w);
        match t {
            OutType::F16 => {
                for (i, c) in data.chunks_exact(2).enumerate() {
                    let want = half::f16::from_f32(src[i]).to_bits();
                    assert_eq!(u16::from_le_bytes([c[0], c[1]]), want, "f16 element {i}");
                }
            }
            OutType::BF16 => {
                for (i, c) in data.chunks_exact(2).enumerate() {
                    let want = half::bf16::from_f32(src[i]).to_bits();
                    assert_eq!(u16::from_le_bytes([c[0], c[1]]), want, "bf16 element {i}");
                }
            }
            OutType::Q8_0 => {
                // Block: f16 scale d, 32 × i8; value = d·q. Each value within d/2 (+ rounding
                // of d itself) of the source.
                assert_eq!(data.len(), src.len() / 32 * 34);
                for (bi, blk) in data.chunks_exact(34).enumerate() {
                    let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                    let amax = src[bi * 32..bi * 32 + 32]
                        .iter()
                        .fold(0f32, |m, x| m.max(x.abs()));
                    // ggml: d = amax / 127 (stored as f16), q = round(x / d).
                    let d32 = amax / 127.0;
                    assert!((d - d32).abs() <= d32 * 1e-3 + 1e-12);
                    let bound = 0.5 * d32 + 127.0 * (d - d32).abs() + 1e-6;
                    for k in 0..32 {
                        let v = d * (blk[2 + k] as i8) as f32;
                        assert!(
                            (v - src[bi * 32 + k]).abs() <= bound,
                            "q8_0 block {bi} value {k}"
                        );
                    }
                }
            }
            OutType::Q4_0 => {
                // Block: f16 scale d, 16 bytes of nibbles (low nibbles: values 0..16, high:
                // 16..32); value = d·(q − 8).
                assert_eq!(data.len(), src.len() / 32 * 18);
                for (bi, blk) in data.chunks_exact(18).enumerate() {
                    // ggml: m = the value of largest magnitude, d = m / -8 (stored as f16),
                    // q = clamp(round(x / d) + 8, 0, 15): within d/2, except values near −m
                    // (x / d near 8), which the clamp moves by up to d.
                    let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                    let blk_src = &src[bi * 32..bi * 32 + 32];
                    let m = blk_src
                        .iter()
                        .fold(0f32, |m, &x| if x.abs() > m.abs() { x } else { m });
                    let d32 = m / -8.0;
                    for k in 0..32 {
                        let byte = blk[2 + k % 16];
                        let q = if k < 16 { byte & 15 } else { byte >> 4 };
                        let v = d * (q as f32 - 8.0);
                        let x = blk_src[k];
                        let step = if d32 != 0.0 && x / d32 > 7.5 {
                            1.0
                        } else {
                            0.5
                        };
                        let bound = step * d32.abs() + 8.0 * (d - d32).abs() + 1e-6;
                        assert!(
                            (v - x).abs() <= bound,
                            "q4_0 block {bi} value {k}: {v} vs {}",
                            src[bi * 32 + k]
                        );
                    }
                }
            }
            OutType::F32 => unreachable!(),
        }
    }
}

#[test]
fn chatglm1_tied_embeddings_drop_lm_head() {
    // Without `tie_word_embeddings` the official default (true) holds: no output.weight.
    let dir = scratch("v1-tied");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(v1_dir().join("config.json")).unwrap()).unwrap();
    cfg.as_object_mut().unwrap().remove("tie_word_embeddings");
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    std::os::unix::fs::symlink(
        v1_dir().join("model.safetensors"),
        dir.join("model.safetensors"),
    )
    .unwrap();
    let out = dir.join("tied.gguf");
    let rep = convert_hf_dir(&dir, &out, &opts(OutType::F32)).unwrap();
    assert_eq!(rep.n_tensors, 39);
    let g = GgufFile::open(&out).unwrap();
    assert!(g.tensor("output.weight").is_none());
    assert!(g.tensor("token_embd.weight").is_some());
}

// ---------------------------------------------------------------------------------------
// (b) Round trips through llama.cpp's layouts.
// ---------------------------------------------------------------------------------------

/// Writes the tiny LLaMA of `tiny/tiny-llama-f16.gguf` as a `LlamaForCausalLM` checkpoint
/// (rows of Q and K unpermuted, SentencePiece vocabulary) into `dir`; returns the GGUF.
fn llama_checkpoint(dir: &Path) -> GgufFile {
    let src = common::reference_dir().join("tiny/tiny-llama-f16.gguf");
    let g = GgufFile::open(&src).unwrap();
    let config = json!({
        "_name_or_path": "someone/tiny-llama-random",
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 352,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": 32000,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": false,
        "torch_dtype": "float16"
    });
    let names = hf_names(
        &[
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("output_norm.weight", "model.norm.weight"),
            ("output.weight", "lm_head.weight"),
        ],
        "model.layers",
        &[
            ("attn_norm.weight", "input_layernorm.weight"),
            ("attn_q.weight", "self_attn.q_proj.weight"),
            ("attn_k.weight", "self_attn.k_proj.weight"),
            ("attn_v.weight", "self_attn.v_proj.weight"),
            ("attn_output.weight", "self_attn.o_proj.weight"),
            ("ffn_norm.weight", "post_attention_layernorm.weight"),
            ("ffn_gate.weight", "mlp.gate_proj.weight"),
            ("ffn_up.weight", "mlp.up_proj.weight"),
            ("ffn_down.weight", "mlp.down_proj.weight"),
        ],
    );
    let perm = |n: &str| -> Option<usize> {
        if n.ends_with("attn_q.weight") {
            Some(4)
        } else if n.ends_with("attn_k.weight") {
            Some(2)
        } else {
            None
        }
    };
    hf_from_gguf(&g, dir, config, &names, &perm);
    g
}

/// `tokenizer_config.json` as the 2026 tiny files' tokenizers say: BOS added, EOS not.
fn bos_not_eos(dir: &Path) {
    let tc = json!({"add_bos_token": true, "add_eos_token": false});
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).unwrap();
}

/// The LLaMA layout's Hugging Face names.
const LLAMA_WHOLE: &[(&str, &str)] = &[
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
];
const LLAMA_BLOCK: &[(&str, &str)] = &[
    ("attn_norm.weight", "input_layernorm.weight"),
    ("attn_q.weight", "self_attn.q_proj.weight"),
    ("attn_k.weight", "self_attn.k_proj.weight"),
    ("attn_v.weight", "self_attn.v_proj.weight"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
    ("ffn_norm.weight", "post_attention_layernorm.weight"),
    ("ffn_gate.weight", "mlp.gate_proj.weight"),
    ("ffn_up.weight", "mlp.up_proj.weight"),
    ("ffn_down.weight", "mlp.down_proj.weight"),
];

/// A 2026 family on the LLaMA layout: `tiny-<name>-f16.gguf` written as a Hugging Face
/// checkpoint with `config` (4 heads, 2 KV heads, tied embeddings; Q/K rows unpermuted)
/// converts back to the same tensors and keys, bit for bit, and the model still matches
/// llama.cpp's outputs.
fn llama_family_round_trip(name: &str, config: serde_json::Value) {
    llama_family_round_trip_as(name, config, None);
}

/// Two tensors of a vision tower and a projector, which a multimodal checkpoint holds beside
/// its language model.
fn vision_tensors() -> Vec<StT> {
    [
        "vision_tower.patch_conv.weight",
        "multi_modal_projector.linear_1.weight",
    ]
    .iter()
    .map(|n| StT {
        name: n.to_string(),
        dtype: "F32",
        shape: vec![2, 4],
        data: vec![0; 32],
    })
    .collect()
}

/// As [`llama_family_round_trip`]; with `multimodal` `Some((wrapper, prefix))`, the
/// checkpoint is the multimodal `wrapper`: `config` under `text_config`, the language
/// model's tensors under `prefix` (`model.` replaced) and [`vision_tensors`] beside them.
fn llama_family_round_trip_as(
    name: &str,
    config: serde_json::Value,
    multimodal: Option<(&str, &str)>,
) {
    let dir = scratch(&format!(
        "{name}-rt{}",
        if multimodal.is_some() { "-mm" } else { "" }
    ));
    let src = common::reference_dir().join(format!("tiny/tiny-{name}-f16.gguf"));
    let g = GgufFile::open(&src).unwrap();
    let names = hf_names(LLAMA_WHOLE, "model.layers", LLAMA_BLOCK);
    let perm = |n: &str| -> Option<usize> {
        match () {
            _ if n.ends_with("attn_q.weight") => Some(4),
            _ if n.ends_with("attn_k.weight") => Some(2),
            _ => None,
        }
    };
    match multimodal {
        None => hf_from_gguf(&g, &dir, config, &names, &perm),
        Some((wrapper, prefix)) => {
            let config = json!({
                "_name_or_path": config["_name_or_path"],
                "architectures": [wrapper],
                "model_type": "multimodal",
                "text_config": config,
                "vision_config": {"hidden_size": 4},
            });
            let names = |n: &str| {
                let h = names(n);
                match h.strip_prefix("model.") {
                    Some(rest) => format!("{prefix}{rest}"),
                    None => h,
                }
            };
            write_hf_tensors(&g, &dir, config, &names, &perm, vision_tensors());
            let (tokens, scores, types) = vocab_of(&g);
            std::fs::write(
                dir.join("tokenizer.model"),
                sentencepiece_model(&tokens, &scores, &types),
            )
            .unwrap();
        }
    }
    bos_not_eos(&dir);
    let out = dir.join("back.gguf");
    let rep = convert_hf_dir(&dir, &out, &opts(OutType::F16)).unwrap();
    assert_eq!(rep.tokenizer.as_deref(), Some("llama"));
    if multimodal.is_some() {
        assert!(
            rep.notes.iter().any(|n| n.contains("2 vision tensors")),
            "{:?}",
            rep.notes
        );
    }
    let conv = GgufFile::open(&out).unwrap();
    assert_same(&g, &conv);
    let rep = compare_with_llama_cpp(&out, &format!("tiny-{name}-f16.public.jsonl"));
    assert_eq!(rep.over_tol, 0, "{name}: logits beyond 0.01: {rep:?}");
    assert_eq!(rep.argmax_equal, rep.argmax_checked, "{name}: {rep:?}");
    assert!(
        rep.greedy_failures.is_empty(),
        "{name}: {:?}",
        rep.greedy_failures
    );
}

#[test]
fn smollm3_round_trip() {
    llama_family_round_trip(
        "smollm3",
        json!({
            "_name_or_path": "someone/tiny-smollm3-random",
            "architectures": ["SmolLM3ForCausalLM"],
            "model_type": "smollm3",
            "hidden_size": 64,
            "intermediate_size": 192,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
            "rms_norm_eps": 1e-6,
            "rope_theta": 5000000.0,
            "no_rope_layer_interval": 4,
            "vocab_size": 32000,
            "tie_word_embeddings": true
        }),
    );
}

#[test]
fn granite_round_trip() {
    llama_family_round_trip(
        "granite",
        json!({
            "_name_or_path": "someone/tiny-granite-random",
            "architectures": ["GraniteForCausalLM"],
            "model_type": "granite",
            "hidden_size": 64,
            "intermediate_size": 192,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "max_position_embeddings": 512,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "attention_multiplier": 0.0625,
            "embedding_multiplier": 12.0,
            "residual_multiplier": 0.22,
            "logits_scaling": 8.0,
            "vocab_size": 32000,
            "tie_word_embeddings": true
        }),
    );
}

#[test]
fn mistral3_round_trip() {
    llama_family_round_trip("mistral3", ministral3_config());
}

/// Ministral 3 as Mistral releases it, `Mistral3ForConditionalGeneration` with a vision
/// tower (names of transformers before 4.52: `language_model.model.…`): its text model
/// converts to the same `mistral3` file, bit for bit, and the vision tensors are left out.
#[test]
fn mistral3_multimodal_checkpoint_converts_its_text_model() {
    llama_family_round_trip_as(
        "mistral3",
        ministral3_config(),
        Some(("Mistral3ForConditionalGeneration", "language_model.model.")),
    );
}

/// The `config.json` of the tiny Ministral 3 (`Ministral3ForCausalLM`).
fn ministral3_config() -> serde_json::Value {
    json!({
            "_name_or_path": "someone/tiny-mistral3-random",
            "architectures": ["Ministral3ForCausalLM"],
            "model_type": "ministral3",
            "hidden_size": 64,
            "intermediate_size": 192,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-5,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 1000000.0,
                "factor": 16.0,
                "original_max_position_embeddings": 16,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale_all_dim": 1.0,
                "llama_4_scaling_beta": 0.1
            },
            "vocab_size": 32000,
            "tie_word_embeddings": true
    })
}

/// Gemma 3: `tiny-gemma3-f16.gguf` as a `Gemma3ForCausalLM` checkpoint (norm weights stored
/// minus one, as Hugging Face's Gemma keeps them; Q/K rows in checkpoint order) converts back
/// bit for bit (the +1 in f32 undoes the −1 exactly for these weights), and still matches
/// llama.cpp's outputs.
#[test]
fn gemma3_round_trip() {
    gemma3_round_trip_as(false);
}

/// Gemma 3 as the 4B–27B releases come, `Gemma3ForConditionalGeneration` (names of
/// transformers 4.52 on: `model.language_model.…`) with a vision tower: its text model
/// converts to the same `gemma3` file, bit for bit.
#[test]
fn gemma3_multimodal_checkpoint_converts_its_text_model() {
    gemma3_round_trip_as(true);
}

fn gemma3_round_trip_as(multimodal: bool) {
    let dir = scratch(if multimodal {
        "gemma3-rt-mm"
    } else {
        "gemma3-rt"
    });
    let src = common::reference_dir().join("tiny/tiny-gemma3-f16.gguf");
    let g = GgufFile::open(&src).unwrap();
    let names = hf_names(
        &[
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("output_norm.weight", "model.norm.weight"),
        ],
        "model.layers",
        &[
            ("attn_norm.weight", "input_layernorm.weight"),
            ("attn_q.weight", "self_attn.q_proj.weight"),
            ("attn_k.weight", "self_attn.k_proj.weight"),
            ("attn_v.weight", "self_attn.v_proj.weight"),
            ("attn_output.weight", "self_attn.o_proj.weight"),
            ("attn_q_norm.weight", "self_attn.q_norm.weight"),
            ("attn_k_norm.weight", "self_attn.k_norm.weight"),
            (
                "post_attention_norm.weight",
                "post_attention_layernorm.weight",
            ),
            ("ffn_norm.weight", "pre_feedforward_layernorm.weight"),
            ("ffn_gate.weight", "mlp.gate_proj.weight"),
            ("ffn_up.weight", "mlp.up_proj.weight"),
            ("ffn_down.weight", "mlp.down_proj.weight"),
            ("post_ffw_norm.weight", "post_feedforward_layernorm.weight"),
        ],
    );
    let mut ts = Vec::new();
    for t in g.tensors() {
        let shape: Vec<usize> = t.ne[..t.n_dims].iter().rev().copied().collect();
        let mut data = g.tensor_data(t).to_vec();
        if t.name.ends_with("norm.weight") {
            data = f32s(&data)
                .iter()
                .flat_map(|x| (x - 1.0).to_le_bytes())
                .collect();
        }
        let name = names(&t.name);
        let name = match name.strip_prefix("model.") {
            Some(rest) if multimodal => format!("model.language_model.{rest}"),
            _ => name,
        };
        ts.push(StT {
            name,
            dtype: st_dtype(t.dtype),
            shape,
            data,
        });
    }
    if multimodal {
        ts.extend(vision_tensors());
    }
    write_safetensors(&dir.join("model.safetensors"), &ts);
    let config = json!({
        "_name_or_path": "someone/tiny-gemma3-random",
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "intermediate_size": 192,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "sliding_window": 4,
        "sliding_window_pattern": 3,
        "query_pre_attn_scalar": 32,
        "vocab_size": 32000,
        "tie_word_embeddings": true
    });
    let config = if multimodal {
        json!({
            "architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3",
            "text_config": config,
            "vision_config": {"hidden_size": 4},
        })
    } else {
        config
    };
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let (tokens, scores, types) = vocab_of(&g);
    std::fs::write(
        dir.join("tokenizer.model"),
        sentencepiece_model(&tokens, &scores, &types),
    )
    .unwrap();
    bos_not_eos(&dir);
    let out = dir.join("back.gguf");
    let rep = convert_hf_dir(&dir, &out, &opts(OutType::F16)).unwrap();
    assert_eq!(rep.tokenizer.as_deref(), Some("llama"));
    let conv = GgufFile::open(&out).unwrap();
    assert_same(&g, &conv);
    assert_eq!(
        conv.get("tokenizer.ggml.add_space_prefix"),
        Some(&Value::Bool(false))
    );
    let rep = compare_with_llama_cpp(&out, "tiny-gemma3-f16.public.jsonl");
    assert_eq!(rep.over_tol, 0, "logits beyond 0.01: {rep:?}");
    assert_eq!(rep.argmax_equal, rep.argmax_checked, "{rep:?}");
    assert!(rep.greedy_failures.is_empty(), "{:?}", rep.greedy_failures);
}

/// Phi-3 with LongRoPE (`tiny-phi3-longrope-f16.gguf`): fused Q/K/V and gate/up, the rotary
/// factors in `config.json` (`rope_scaling.long_factor` / `short_factor`, made into F32
/// tensors again) and the attention factor computed from the contexts (512 / 16 → 1.5):
/// bit for bit back, and still llama.cpp's outputs.
#[test]
fn phi3_longrope_round_trip() {
    let dir = scratch("phi3-rt");
    let src = common::reference_dir().join("tiny/tiny-phi3-longrope-f16.gguf");
    let g = GgufFile::open(&src).unwrap();
    let factors = |name: &str| f32s(g.tensor_data(g.tensor(name).unwrap()));
    let (long, short) = (
        factors("rope_factors_long.weight"),
        factors("rope_factors_short.weight"),
    );
    let names = hf_names(
        &[
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("output_norm.weight", "model.norm.weight"),
        ],
        "model.layers",
        &[
            ("attn_norm.weight", "input_layernorm.weight"),
            ("attn_qkv.weight", "self_attn.qkv_proj.weight"),
            ("attn_output.weight", "self_attn.o_proj.weight"),
            ("ffn_norm.weight", "post_attention_layernorm.weight"),
            ("ffn_up.weight", "mlp.gate_up_proj.weight"),
            ("ffn_down.weight", "mlp.down_proj.weight"),
        ],
    );
    let mut ts = Vec::new();
    for t in g
        .tensors()
        .iter()
        .filter(|t| !t.name.starts_with("rope_factors"))
    {
        ts.push(StT {
            name: names(&t.name),
            dtype: st_dtype(t.dtype),
            shape: t.ne[..t.n_dims].iter().rev().copied().collect(),
            data: g.tensor_data(t).to_vec(),
        });
    }
    write_safetensors(&dir.join("model.safetensors"), &ts);
    let config = json!({
        "_name_or_path": "someone/tiny-phi-longrope-random",
        "architectures": ["Phi3ForCausalLM"],
        "model_type": "phi3",
        "hidden_size": 64,
        "intermediate_size": 192,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "original_max_position_embeddings": 16,
        "partial_rotary_factor": 0.75,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "longrope", "long_factor": long, "short_factor": short},
        "sliding_window": null,
        "vocab_size": 32000,
        "tie_word_embeddings": true
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let (tokens, scores, types) = vocab_of(&g);
    std::fs::write(
        dir.join("tokenizer.model"),
        sentencepiece_model(&tokens, &scores, &types),
    )
    .unwrap();
    bos_not_eos(&dir);
    let out = dir.join("back.gguf");
    convert_hf_dir(&dir, &out, &opts(OutType::F16)).unwrap();
    let conv = GgufFile::open(&out).unwrap();
    assert_same(&g, &conv);
    let rep = compare_with_llama_cpp(&out, "tiny-phi3-longrope-f16.public.jsonl");
    assert_eq!(rep.over_tol, 0, "logits beyond 0.01: {rep:?}");
    assert_eq!(rep.argmax_equal, rep.argmax_checked, "{rep:?}");
    assert!(rep.greedy_failures.is_empty(), "{:?}", rep.greedy_failures);
}

#[test]
fn llama_round_trip() {
    let dir = scratch("llama-rt");
    let g = llama_checkpoint(&dir);
    let out = dir.join("back.gguf");
    let rep = convert_hf_dir(&dir, &out, &opts(OutType::F16)).unwrap();
    assert_eq!(rep.tokenizer.as_deref(), Some("llama"));
    let conv = GgufFile::open(&out).unwrap();
    assert_same(&g, &conv);

    // The converted model still matches llama.cpp's outputs.
    let rep = compare_with_llama_cpp(&out, "tiny-llama-f16.public.jsonl");
    assert_eq!(rep.over_tol, 0, "logits beyond 0.01: {rep:?}");
    assert_eq!(rep.argmax_equal, rep.argmax_checked, "{rep:?}");
    assert!(rep.greedy_failures.is_empty(), "{:?}", rep.greedy_failures);
}

/// Writes the tiny ChatGLM2 of `tiny/tiny-chatglm-f16.gguf` as a `ChatGLMModel` checkpoint
/// (SentencePiece vocabulary) into `dir`; returns the GGUF.
fn chatglm2_checkpoint(dir: &Path) -> GgufFile {
    let src = common::reference_dir().join("tiny/tiny-chatglm-f16.gguf");
    let g = GgufFile::open(&src).unwrap();
    let config = json!({
        "_name_or_path": "tiny-chatglm-random",
        "architectures": ["ChatGLMModel"],
        "model_type": "chatglm",
        "hidden_size": 128,
        "ffn_hidden_size": 320,
        "kv_channels": 32,
        "num_layers": 3,
        "num_attention_heads": 4,
        "multi_query_attention": true,
        "multi_query_group_num": 2,
        "seq_length": 512,
        "layernorm_epsilon": 1e-5,
        "rmsnorm": true,
        "add_qkv_bias": true,
        "add_bias_linear": false,
        "padded_vocab_size": 32000,
        "tie_word_embeddings": false,
        "torch_dtype": "float16"
    });
    let names = hf_names(
        &[
            (
                "token_embd.weight",
                "transformer.embedding.word_embeddings.weight",
            ),
            (
                "output_norm.weight",
                "transformer.encoder.final_layernorm.weight",
            ),
            ("output.weight", "transformer.output_layer.weight"),
        ],
        "transformer.encoder.layers",
        &[
            ("attn_norm.weight", "input_layernorm.weight"),
            ("attn_qkv.weight", "self_attention.query_key_value.weight"),
            ("attn_qkv.bias", "self_attention.query_key_value.bias"),
            ("attn_output.weight", "self_attention.dense.weight"),
            ("ffn_norm.weight", "post_attention_layernorm.weight"),
            ("ffn_up.weight", "mlp.dense_h_to_4h.weight"),
            ("ffn_down.weight", "mlp.dense_4h_to_h.weight"),
        ],
    );
    hf_from_gguf(&g, dir, config, &names, &|_| None);
    g
}

#[test]
fn chatglm2_round_trip() {
    let dir = scratch("chatglm2-rt");
    let g = chatglm2_checkpoint(&dir);
    let out = dir.join("back.gguf");
    let rep = convert_hf_dir(&dir, &out, &opts(OutType::F16)).unwrap();
    // The tiny model's SentencePiece vocabulary fills every id: ChatGLM's control tokens
    // cannot be appended, and a note says so.
    assert!(
        rep.notes
            .iter()
            .any(|n| n.contains("[gMASK]") && n.contains("not added")),
        "{:?}",
        rep.notes
    );
    let conv = GgufFile::open(&out).unwrap();
    assert_same(&g, &conv);

    // The chatglm graph exists in this tree: the converted model matches llama.cpp too.
    let rep = compare_with_llama_cpp(&out, "tiny-chatglm-f16.public.jsonl");
    assert_eq!(rep.over_tol, 0, "logits beyond 0.01: {rep:?}");
    assert!(rep.greedy_failures.is_empty(), "{:?}", rep.greedy_failures);
}

#[test]
fn sharded_checkpoint_reads_like_a_single_file() {
    // The v1 tiny checkpoint split in two shards with an index converts to the same file.
    let st = read_safetensors(&v1_dir().join("model.safetensors"));
    let dir = scratch("sharded");
    std::fs::copy(v1_dir().join("config.json"), dir.join("config.json")).unwrap();
    let (a, b): (Vec<_>, Vec<_>) = st.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let mut map = serde_json::Map::new();
    for (file, part) in [
        ("model-00001-of-00002.safetensors", a),
        ("model-00002-of-00002.safetensors", b),
    ] {
        let ts: Vec<StT> = part
            .iter()
            .map(|(_, (n, _, s, d))| {
                map.insert(n.clone(), json!(file));
                StT {
                    name: n.clone(),
                    dtype: "F32",
                    shape: s.clone(),
                    data: d.clone(),
                }
            })
            .collect();
        write_safetensors(&dir.join(file), &ts);
    }
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        json!({"metadata": {}, "weight_map": map}).to_string(),
    )
    .unwrap();
    let out1 = dir.join("sharded.gguf");
    let out2 = dir.join("single.gguf");
    convert_hf_dir(&dir, &out1, &opts(OutType::F32)).unwrap();
    convert_hf_dir(&v1_dir(), &out2, &opts(OutType::F32)).unwrap();
    let (g1, g2) = (
        GgufFile::open(&out1).unwrap(),
        GgufFile::open(&out2).unwrap(),
    );
    assert_same(&g2, &g1);
}

/// Writes the tiny BERT of `tiny/tiny-bert-f16.gguf` as a sentence-transformers `BertModel`
/// directory into `dir`: its tensors (and the position ids and pooler a real checkpoint
/// has), a WordPiece `tokenizer.json` made by undoing llama.cpp's phantom-space tokens
/// (`▁x` ← `x`, `x` ← `##x`, control tokens as they are), `tokenizer_config.json`, and
/// mean pooling in `modules.json` / `1_Pooling/config.json`. Returns the GGUF.
fn bert_checkpoint(dir: &Path) -> GgufFile {
    let src = common::reference_dir().join("tiny/tiny-bert-f16.gguf");
    let g = GgufFile::open(&src).unwrap();
    let config = json!({
        "_name_or_path": "someone/tiny-minilm-random",
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": 64,
        "intermediate_size": 256,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "max_position_embeddings": 128,
        "layer_norm_eps": 1e-12,
        "type_vocab_size": 2,
        "vocab_size": 30522,
        "pad_token_id": 0
    });
    let names = hf_names(
        &[
            ("token_embd.weight", "embeddings.word_embeddings.weight"),
            (
                "token_types.weight",
                "embeddings.token_type_embeddings.weight",
            ),
            (
                "position_embd.weight",
                "embeddings.position_embeddings.weight",
            ),
            ("token_embd_norm.weight", "embeddings.LayerNorm.weight"),
            ("token_embd_norm.bias", "embeddings.LayerNorm.bias"),
        ],
        "encoder.layer",
        &[
            ("attn_q.weight", "attention.self.query.weight"),
            ("attn_k.weight", "attention.self.key.weight"),
            ("attn_v.weight", "attention.self.value.weight"),
            ("attn_q.bias", "attention.self.query.bias"),
            ("attn_k.bias", "attention.self.key.bias"),
            ("attn_v.bias", "attention.self.value.bias"),
            ("attn_output.weight", "attention.output.dense.weight"),
            ("attn_output.bias", "attention.output.dense.bias"),
            (
                "attn_output_norm.weight",
                "attention.output.LayerNorm.weight",
            ),
            ("attn_output_norm.bias", "attention.output.LayerNorm.bias"),
            ("ffn_up.weight", "intermediate.dense.weight"),
            ("ffn_up.bias", "intermediate.dense.bias"),
            ("ffn_down.weight", "output.dense.weight"),
            ("ffn_down.bias", "output.dense.bias"),
            ("layer_output_norm.weight", "output.LayerNorm.weight"),
            ("layer_output_norm.bias", "output.LayerNorm.bias"),
        ],
    );
    let ids: Vec<u8> = (0..128i64).flat_map(|i| i.to_le_bytes()).collect();
    let extra = vec![
        StT {
            name: "embeddings.position_ids".into(),
            dtype: "I64",
            shape: vec![1, 128],
            data: ids,
        },
        StT {
            name: "pooler.dense.weight".into(),
            dtype: "F32",
            shape: vec![64, 64],
            data: vec![0; 64 * 64 * 4],
        },
        StT {
            name: "pooler.dense.bias".into(),
            dtype: "F32",
            shape: vec![64],
            data: vec![0; 64 * 4],
        },
    ];
    write_hf_tensors(&g, dir, config, &names, &|_| None, extra);
    let arr = |k: &str| g.get(k).unwrap().as_array().unwrap().to_vec();
    let tokens: Vec<String> = arr("tokenizer.ggml.tokens")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let types: Vec<i64> = arr("tokenizer.ggml.token_type")
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let mut vocab = serde_json::Map::new();
    let mut added = Vec::new();
    for (id, (t, &ty)) in tokens.iter().zip(&types).enumerate() {
        let hf = if ty == 3 {
            added.push(json!({"id": id, "content": t, "special": true}));
            t.clone()
        } else if let Some(rest) = t.strip_prefix('\u{2581}') {
            rest.to_string()
        } else {
            format!("##{t}")
        };
        vocab.insert(hf, json!(id));
    }
    let tokenizer = json!({
        "added_tokens": added,
        "model": {"type": "WordPiece", "unk_token": "[UNK]",
                  "continuing_subword_prefix": "##", "vocab": vocab},
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let specials = json!({"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                          "cls_token": "[CLS]", "mask_token": "[MASK]", "do_lower_case": true});
    std::fs::write(dir.join("tokenizer_config.json"), specials.to_string()).unwrap();
    let modules = json!([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
    ]);
    std::fs::write(dir.join("modules.json"), modules.to_string()).unwrap();
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    let pooling = json!({"word_embedding_dimension": 64, "pooling_mode_cls_token": false,
                         "pooling_mode_mean_tokens": true});
    std::fs::write(dir.join("1_Pooling/config.json"), pooling.to_string()).unwrap();
    g
}

#[test]
fn bert_round_trip() {
    let dir = scratch("bert-rt");
    let g = bert_checkpoint(&dir);
    let out = dir.join("back.gguf");
    let rep = convert_hf_dir(&dir, &out, &opts(OutType::F16)).unwrap();
    assert_eq!(rep.tokenizer.as_deref(), Some("bert"));
    let conv = GgufFile::open(&out).unwrap();
    // Every tensor (position and token-type embeddings kept F32) and every key of the file
    // llama.cpp's tools made: architecture keys, pooling, WordPiece tokens and types, and the
    // special ids ([UNK], [SEP], [PAD], [MASK]) — but two keys, written as
    // `convert_hf_to_gguf.py` writes them (the tiny file was made by other means): the
    // pre-tokenizer name (`jina-v2-en`, whose hash test wins over `bert-bge`'s) and [CLS],
    // which that converter writes as the BOS id (with [SEP] as EOS), not as `cls_token_id`.
    assert_same_but(
        &g,
        &conv,
        &["tokenizer.ggml.pre", "tokenizer.ggml.cls_token_id"],
    );
    assert_eq!(
        conv.get("tokenizer.ggml.pre").and_then(Value::as_str),
        Some("jina-v2-en")
    );
    let id = |k: &str| conv.get(k).and_then(Value::as_u32);
    assert_eq!(
        id("tokenizer.ggml.bos_token_id"),
        g.get("tokenizer.ggml.cls_token_id").and_then(Value::as_u32)
    );
    assert_eq!(
        id("tokenizer.ggml.eos_token_id"),
        id("tokenizer.ggml.seperator_token_id")
    );
    assert!(conv.tensor("pooler.dense.weight").is_none());

    // The same embeddings as the original file, bit for bit.
    let embed = |path: &Path| {
        let model = Arc::new(ggrs_llama::Model::load(path).unwrap());
        let mut e = ggrs_llama::embed::Embedder::new(model, Default::default()).unwrap();
        e.embed(&["The capital of France is", "El gato está durmiendo en"])
            .unwrap()
    };
    assert_eq!(
        embed(&out),
        embed(&common::reference_dir().join("tiny/tiny-bert-f16.gguf"))
    );

    // vocab.txt instead of tokenizer.json: the same vocabulary.
    let txt = scratch("bert-vocab-txt");
    bert_checkpoint(&txt);
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(txt.join("tokenizer.json")).unwrap())
            .unwrap();
    let mut by_id = vec![String::new(); 30522];
    for (t, id) in j["model"]["vocab"].as_object().unwrap() {
        by_id[id.as_u64().unwrap() as usize] = t.clone();
    }
    std::fs::remove_file(txt.join("tokenizer.json")).unwrap();
    std::fs::write(txt.join("vocab.txt"), by_id.join("\n") + "\n").unwrap();
    let out2 = txt.join("back.gguf");
    convert_hf_dir(&txt, &out2, &opts(OutType::F16)).unwrap();
    let conv2 = GgufFile::open(&out2).unwrap();
    for k in [
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.token_type",
        "bert.pooling_type",
    ] {
        assert_eq!(conv2.get(k), g.get(k), "{k}");
    }
}

#[test]
fn bert_sequence_classifier_keeps_its_head_with_rank_pooling() {
    let dir = scratch("bert-cls");
    bert_checkpoint(&dir);
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    cfg["architectures"] = json!(["BertForSequenceClassification"]);
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    // The same tensors under `bert.`, and a one-score classifier.
    let st = read_safetensors(&dir.join("model.safetensors"));
    let mut ts: Vec<StT> = st
        .into_iter()
        .map(|(name, dtype, shape, data)| StT {
            name: format!("bert.{name}"),
            dtype: if dtype == "F16" {
                "F16"
            } else if dtype == "I64" {
                "I64"
            } else {
                "F32"
            },
            shape,
            data,
        })
        .collect();
    ts.push(StT {
        name: "classifier.weight".into(),
        dtype: "F32",
        shape: vec![1, 64],
        data: (0..64)
            .flat_map(|i| (i as f32 / 64.0).to_le_bytes())
            .collect(),
    });
    ts.push(StT {
        name: "classifier.bias".into(),
        dtype: "F32",
        shape: vec![1],
        data: 0.5f32.to_le_bytes().to_vec(),
    });
    write_safetensors(&dir.join("model.safetensors"), &ts);
    let out = dir.join("rank.gguf");
    convert_hf_dir(&dir, &out, &opts(OutType::F32)).unwrap();
    let g = GgufFile::open(&out).unwrap();
    assert_eq!(g.get("bert.pooling_type"), Some(&Value::U32(4)));
    assert_eq!(g.tensor("cls.weight").unwrap().ne[..2], [64, 64]);
    assert_eq!(g.tensor("cls.output.weight").unwrap().ne[..2], [64, 1]);
    let model = Arc::new(ggrs_llama::Model::load(&out).unwrap());
    let mut r = ggrs_llama::embed::Embedder::new(model, Default::default()).unwrap();
    let scores = r
        .rerank("The capital of France", &["Paris", "Bananas"])
        .unwrap();
    // A zero pooler: tanh(0 + 0) = 0, so every score is the classifier's bias.
    assert_eq!(scores, [0.5, 0.5]);
}

// ---------------------------------------------------------------------------------------
// (c) Bad input.
// ---------------------------------------------------------------------------------------

/// A tiny synthetic v1 checkpoint (width 8, 2 heads, 1 layer, MLP 16, vocab 10), with the
/// tensor `bad` given shape `bad_shape` instead of its own.
fn small_v1(dir: &Path, bad: Option<(&str, Vec<usize>)>) {
    let cfg = json!({
        "architectures": ["ChatGLMModel"], "hidden_size": 8, "num_attention_heads": 2,
        "num_layers": 1, "inner_hidden_size": 16, "vocab_size": 10, "layernorm_epsilon": 1e-5,
        "max_sequence_length": 64, "position_encoding_2d": true, "tie_word_embeddings": true,
        "bos_token_id": 5, "eos_token_id": 6, "pad_token_id": 3, "mask_token_id": 4,
        "gmask_token_id": 7
    });
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("transformer.word_embeddings.weight".into(), vec![10, 8]),
        ("transformer.final_layernorm.weight".into(), vec![8]),
        ("transformer.final_layernorm.bias".into(), vec![8]),
    ];
    let l = |s: &str| format!("transformer.layers.0.{s}");
    for (m, r, c) in [
        ("input_layernorm", 8, 0),
        ("post_attention_layernorm", 8, 0),
        ("attention.query_key_value", 24, 8),
        ("attention.dense", 8, 8),
        ("mlp.dense_h_to_4h", 16, 8),
        ("mlp.dense_4h_to_h", 8, 16),
    ] {
        shapes.push((
            l(&format!("{m}.weight")),
            if c == 0 { vec![r] } else { vec![r, c] },
        ));
        shapes.push((l(&format!("{m}.bias")), vec![r]));
    }
    let ts: Vec<StT> = shapes
        .into_iter()
        .map(|(name, mut shape)| {
            if let Some((b, s)) = &bad {
                if *b == name {
                    shape = s.clone();
                }
            }
            let n: usize = shape.iter().product();
            StT {
                name,
                dtype: "F32",
                shape,
                data: (0..n)
                    .flat_map(|i| (i as f32 * 0.01).to_le_bytes())
                    .collect(),
            }
        })
        .collect();
    write_safetensors(&dir.join("model.safetensors"), &ts);
}

fn convert_err(dir: &Path) -> (ConvertError, bool) {
    let out = dir.join("out.gguf");
    let e = convert_hf_dir(dir, &out, &opts(OutType::F16)).expect_err("conversion should fail");
    (e, out.exists())
}

#[test]
fn small_v1_converts() {
    // The synthetic checkpoint the error tests spoil is itself valid.
    let dir = scratch("small-ok");
    small_v1(&dir, None);
    let out = dir.join("ok.gguf");
    let rep = convert_hf_dir(&dir, &out, &opts(OutType::Q8_0)).unwrap();
    // Tied: 1 + 12 + 2 tensors; rows of 8 or 16 values are not q8_0 blocks → f16, noted.
    assert_eq!(rep.n_tensors, 15);
    assert!(
        rep.notes.iter().any(|n| n.contains("f16 instead of q8_0")),
        "{:?}",
        rep.notes
    );
    let g = GgufFile::open(&out).unwrap();
    assert_eq!(g.tensor("blk.0.attn_qkv.weight").unwrap().dtype, DType::F16);
    assert_eq!(
        g.get("chatglm1.rope.dimension_count")
            .and_then(Value::as_u32),
        Some(2)
    );
    assert_eq!(
        g.get("tokenizer.ggml.gmask_token_id")
            .and_then(Value::as_u32),
        Some(7)
    );
}

#[test]
fn directory_without_config_is_an_error() {
    let dir = scratch("no-config");
    small_v1(&dir, None);
    std::fs::remove_file(dir.join("config.json")).unwrap();
    let (e, written) = convert_err(&dir);
    assert!(matches!(e, ConvertError::NoConfig { .. }), "{e:?}");
    assert!(e.to_string().contains("config.json"), "{e}");
    assert!(!written);
    let missing = Path::new("/nonexistent/hf-dir");
    let e = convert_hf_dir(missing, &dir.join("x.gguf"), &opts(OutType::F16)).unwrap_err();
    assert!(matches!(e, ConvertError::NoConfig { .. }), "{e:?}");
}

#[test]
fn unknown_architecture_is_an_error() {
    let dir = scratch("unknown-arch");
    small_v1(&dir, None);
    let cfg = json!({"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 8});
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let (e, written) = convert_err(&dir);
    match &e {
        ConvertError::UnsupportedArchitecture { found, .. } => {
            assert_eq!(found, &["GPTNeoXForCausalLM".to_string()])
        }
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("GPTNeoXForCausalLM") && msg.contains("LlamaForCausalLM"),
        "{msg}"
    );
    assert!(!written);
}

#[test]
fn missing_shard_is_an_error() {
    let dir = scratch("missing-shard");
    small_v1(&dir, None);
    std::fs::rename(
        dir.join("model.safetensors"),
        dir.join("model-00001-of-00002.safetensors"),
    )
    .unwrap();
    let st = read_safetensors(&dir.join("model-00001-of-00002.safetensors"));
    let mut map = serde_json::Map::new();
    for (n, ..) in &st {
        map.insert(n.clone(), json!("model-00001-of-00002.safetensors"));
    }
    map.insert(
        "transformer.final_layernorm.bias".into(),
        json!("model-00002-of-00002.safetensors"),
    );
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        json!({"weight_map": map}).to_string(),
    )
    .unwrap();
    let (e, written) = convert_err(&dir);
    assert!(matches!(e, ConvertError::MissingShard { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("model-00002-of-00002.safetensors") && msg.contains("missing"),
        "{msg}"
    );
    assert!(!written);
}

#[test]
fn wrong_shape_is_an_error() {
    let dir = scratch("wrong-shape");
    small_v1(
        &dir,
        Some((
            "transformer.layers.0.attention.query_key_value.weight",
            vec![16, 8],
        )),
    );
    let (e, written) = convert_err(&dir);
    match &e {
        ConvertError::TensorShape {
            name,
            found,
            expected,
        } => {
            assert_eq!(
                name,
                "transformer.layers.0.attention.query_key_value.weight"
            );
            assert_eq!(
                (found.clone(), expected.clone()),
                (vec![16, 8], vec![24, 8])
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("[16, 8]"), "{e}");
    assert!(!written);
}

#[test]
fn missing_and_unexpected_tensors_are_errors() {
    let dir = scratch("missing-tensor");
    small_v1(&dir, None);
    let mut st = read_safetensors(&dir.join("model.safetensors"));
    st.retain(|t| t.0 != "transformer.layers.0.mlp.dense_4h_to_h.bias");
    let to_st = |st: &[(String, String, Vec<usize>, Vec<u8>)]| -> Vec<StT> {
        st.iter()
            .map(|(n, _, s, d)| StT {
                name: n.clone(),
                dtype: "F32",
                shape: s.clone(),
                data: d.clone(),
            })
            .collect()
    };
    write_safetensors(&dir.join("model.safetensors"), &to_st(&st));
    let (e, _) = convert_err(&dir);
    assert!(
        matches!(&e, ConvertError::MissingTensor { name, gguf_name, .. }
            if name == "transformer.layers.0.mlp.dense_4h_to_h.bias" && gguf_name == "blk.0.ffn_down.bias"),
        "{e:?}"
    );
    st.push((
        "transformer.extra.weight".into(),
        "F32".into(),
        vec![2],
        vec![0; 8],
    ));
    st.push((
        "transformer.layers.0.mlp.dense_4h_to_h.bias".into(),
        "F32".into(),
        vec![8],
        vec![0; 32],
    ));
    write_safetensors(&dir.join("model.safetensors"), &to_st(&st));
    let (e, _) = convert_err(&dir);
    assert!(
        matches!(&e, ConvertError::UnexpectedTensor { name, .. } if name == "transformer.extra.weight"),
        "{e:?}"
    );
}

#[test]
fn truncated_safetensors_is_an_error() {
    let dir = scratch("truncated");
    small_v1(&dir, None);
    let p = dir.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    // Cut in the data section, then in the header, then before the header length.
    for cut in [bytes.len() - 10, 40, 5] {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let (e, written) = convert_err(&dir);
        assert!(
            matches!(e, ConvertError::Safetensors { .. }),
            "cut at {cut}: {e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("truncated") && msg.contains("model.safetensors"),
            "{msg}"
        );
        assert!(!written);
    }
}

#[test]
fn unknown_outtype_is_an_error() {
    let e = "q5_k".parse::<OutType>().unwrap_err();
    assert!(matches!(e, ConvertError::OutType(_)));
    assert!(e.to_string().contains("q8_0"), "{e}");
    assert_eq!("Q8_0".parse::<OutType>().unwrap(), OutType::Q8_0);
}

// ---------------------------------------------------------------------------------------
// Qwen2 with a tokenizer.json (byte-level BPE) and BF16 weights.
// ---------------------------------------------------------------------------------------

/// Writes a one-layer `Qwen2ForCausalLM` checkpoint into `dir`: the vocabulary of llama.cpp's
/// Qwen2 vocab file as tokenizer.json + tokenizer_config.json, BF16 matrices and F32 vectors.
/// Returns the vocab file and the tensors written.
fn qwen2_checkpoint(dir: &Path) -> (GgufFile, Vec<StT>) {
    let vg = GgufFile::open(common::reference_dir().join("vocab/ggml-vocab-qwen2.gguf")).unwrap();
    let arr = |k: &str| vg.get(k).unwrap().as_array().unwrap().to_vec();
    let tokens: Vec<String> = arr("tokenizer.ggml.tokens")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let types: Vec<i64> = arr("tokenizer.ggml.token_type")
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let merges: Vec<String> = arr("tokenizer.ggml.merges")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let mut vocab = serde_json::Map::new();
    let mut added = Vec::new();
    for (i, (t, &ty)) in tokens.iter().zip(&types).enumerate() {
        match ty {
            1 => {
                vocab.insert(t.clone(), json!(i));
            }
            3 | 4 => added.push(json!({"id": i, "content": t, "special": ty == 3})),
            5 => {} // padding entries: absent from tokenizer.json
            other => panic!("unexpected token type {other}"),
        }
    }
    let n_vocab = tokens.len();
    std::fs::write(
        dir.join("tokenizer.json"),
        json!({"version": "1.0", "added_tokens": added,
               "model": {"type": "BPE", "vocab": vocab, "merges": merges}})
        .to_string(),
    )
    .unwrap();
    let template = vg.get("tokenizer.chat_template").unwrap().as_str().unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        json!({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "bos_token": null,
               "chat_template": template})
        .to_string(),
    )
    .unwrap();
    let cfg = json!({
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "vocab_size": n_vocab, "bos_token_id": 151643, "eos_token_id": 151643,
        "tie_word_embeddings": true
    });
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    // Weights in BF16 (1-D in F32): values k/64 are exact in both.
    let bf = |shape: Vec<usize>| -> (Vec<usize>, Vec<u8>) {
        let n: usize = shape.iter().product();
        let data = (0..n)
            .flat_map(|k| half::bf16::from_f32((k % 97) as f32 / 64.0 - 0.75).to_le_bytes())
            .collect();
        (shape, data)
    };
    let mut ts = Vec::new();
    let mut push = |name: &str, shape: Vec<usize>| {
        let (dtype, (shape, data)) = if shape.len() == 1 {
            let n = shape[0];
            (
                "F32",
                (
                    shape,
                    (0..n).flat_map(|k| (k as f32).to_le_bytes()).collect(),
                ),
            )
        } else {
            ("BF16", bf(shape))
        };
        ts.push(StT {
            name: name.into(),
            dtype,
            shape,
            data,
        });
    };
    push("model.embed_tokens.weight", vec![n_vocab, 8]);
    push("model.norm.weight", vec![8]);
    let l = |s: &str| format!("model.layers.0.{s}");
    push(&l("input_layernorm.weight"), vec![8]);
    push(&l("self_attn.q_proj.weight"), vec![8, 8]);
    push(&l("self_attn.q_proj.bias"), vec![8]);
    push(&l("self_attn.k_proj.weight"), vec![4, 8]);
    push(&l("self_attn.k_proj.bias"), vec![4]);
    push(&l("self_attn.v_proj.weight"), vec![4, 8]);
    push(&l("self_attn.v_proj.bias"), vec![4]);
    push(&l("self_attn.o_proj.weight"), vec![8, 8]);
    push(&l("post_attention_layernorm.weight"), vec![8]);
    push(&l("mlp.gate_proj.weight"), vec![16, 8]);
    push(&l("mlp.up_proj.weight"), vec![16, 8]);
    push(&l("mlp.down_proj.weight"), vec![8, 16]);
    write_safetensors(&dir.join("model.safetensors"), &ts);
    (vg, ts)
}

#[test]
fn qwen2_tokenizer_json_and_bf16_weights() {
    // The vocabulary of llama.cpp's Qwen2 vocab file, written back as tokenizer.json +
    // tokenizer_config.json, must come out as the same tokenizer.ggml.* entries.
    let dir = scratch("qwen2");
    let (vg, ts) = qwen2_checkpoint(&dir);
    let out = dir.join("qwen2.gguf");
    let rep = convert_hf_dir(&dir, &out, &opts(OutType::F32)).unwrap();
    assert_eq!(rep.tokenizer.as_deref(), Some("gpt2"));
    let g = GgufFile::open(&out).unwrap();
    for k in [
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.chat_template",
        "qwen2.context_length",
        "qwen2.attention.layer_norm_rms_epsilon",
        "qwen2.rope.freq_base",
    ] {
        assert_eq!(g.get(k), vg.get(k), "{k}");
    }
    // Tied: no output.weight; every tensor's values equal the BF16 source widened to f32,
    // rows unpermuted (qwen2 uses NEOX rotary: no permutation).
    assert!(g.tensor("output.weight").is_none());
    assert_eq!(g.tensors().len(), ts.len());
    for t in &ts {
        let gname = match t.name.as_str() {
            "model.embed_tokens.weight" => "token_embd.weight".to_string(),
            "model.norm.weight" => "output_norm.weight".to_string(),
            n => {
                let m = n.strip_prefix("model.layers.0.").unwrap();
                let (module, kind) = m.rsplit_once('.').unwrap();
                let gm = match module {
                    "input_layernorm" => "attn_norm",
                    "self_attn.q_proj" => "attn_q",
                    "self_attn.k_proj" => "attn_k",
                    "self_attn.v_proj" => "attn_v",
                    "self_attn.o_proj" => "attn_output",
                    "post_attention_layernorm" => "ffn_norm",
                    "mlp.gate_proj" => "ffn_gate",
                    "mlp.up_proj" => "ffn_up",
                    "mlp.down_proj" => "ffn_down",
                    other => panic!("{other}"),
                };
                format!("blk.0.{gm}.{kind}")
            }
        };
        let gt = g.tensor(&gname).unwrap_or_else(|| panic!("no {gname}"));
        assert_eq!(gt.dtype, DType::F32);
        let want: Vec<f32> = if t.dtype == "BF16" {
            t.data
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect()
        } else {
            f32s(&t.data)
        };
        assert_eq!(f32s(g.tensor_data(gt)), want, "{gname}");
    }
}

// ---------------------------------------------------------------------------------------
// ChatGLM2/3 vocabulary: control tokens after the SentencePiece pieces; a bad model file.
// ---------------------------------------------------------------------------------------

/// A small ChatGLM3-style checkpoint (width 8, 2 heads, 1 KV group, vocab 32) with a
/// 20-piece SentencePiece model.
fn small_chatglm3(dir: &Path) {
    let cfg = json!({
        "_name_or_path": "THUDM/chatglm3-6b", "architectures": ["ChatGLMModel"],
        "hidden_size": 8, "ffn_hidden_size": 16, "kv_channels": 4, "num_layers": 1,
        "num_attention_heads": 2, "multi_query_attention": true, "multi_query_group_num": 1,
        "seq_length": 128, "layernorm_epsilon": 1e-5, "rmsnorm": true, "add_qkv_bias": true,
        "padded_vocab_size": 32, "eos_token_id": 2, "pad_token_id": 0
    });
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let mut ts = Vec::new();
    let l = |s: &str| format!("transformer.encoder.layers.0.{s}");
    for (name, shape) in [
        (
            "transformer.embedding.word_embeddings.weight".to_string(),
            vec![32, 8],
        ),
        (l("input_layernorm.weight"), vec![8]),
        (l("self_attention.query_key_value.weight"), vec![16, 8]),
        (l("self_attention.query_key_value.bias"), vec![16]),
        (l("self_attention.dense.weight"), vec![8, 8]),
        (l("post_attention_layernorm.weight"), vec![8]),
        (l("mlp.dense_h_to_4h.weight"), vec![32, 8]),
        (l("mlp.dense_4h_to_h.weight"), vec![8, 16]),
        (
            "transformer.encoder.final_layernorm.weight".to_string(),
            vec![8],
        ),
        ("transformer.output_layer.weight".to_string(), vec![32, 8]),
        ("transformer.rotary_pos_emb.inv_freq".to_string(), vec![2]),
    ] {
        let n: usize = shape.iter().product();
        ts.push(StT {
            name,
            dtype: "F32",
            shape,
            data: vec![0; 4 * n],
        });
    }
    write_safetensors(&dir.join("model.safetensors"), &ts);
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    tokens.extend((3..20).map(|i| format!("▁p{i}")));
    let scores: Vec<f32> = (0..20).map(|i| -(i as f32)).collect();
    let mut types = vec![2, 3, 3];
    types.extend([1; 17]);
    std::fs::write(
        dir.join("tokenizer.model"),
        sentencepiece_model(&tokens, &scores, &types),
    )
    .unwrap();
}

#[test]
fn chatglm3_control_tokens_follow_the_pieces() {
    let dir = scratch("chatglm3-vocab");
    small_chatglm3(&dir);
    let out = dir.join("glm3.gguf");
    convert_hf_dir(&dir, &out, &opts(OutType::F32)).unwrap();
    let g = GgufFile::open(&out).unwrap();
    let (tokens, scores, types) = vocab_of(&g);
    assert_eq!(tokens.len(), 32);
    assert_eq!(
        &tokens[20..29],
        &common::GLM3_SPECIALS.map(String::from)[..]
    );
    assert!(types[20..29].iter().all(|&t| t == 3));
    assert_eq!((tokens[29].as_str(), types[29]), ("[PAD29]", 5));
    assert_eq!(&tokens[..3], &["<unk>", "<s>", "</s>"]);
    assert_eq!(&types[..4], &[2, 3, 3, 1]);
    assert_eq!(scores[7], -7.0);
    assert_eq!(
        g.get("tokenizer.ggml.pre").and_then(Value::as_str),
        Some("chatglm-spm")
    );
    assert_eq!(
        g.get("tokenizer.ggml.eos_token_id").and_then(Value::as_u32),
        Some(2)
    );
    assert_eq!(
        g.get("tokenizer.ggml.padding_token_id")
            .and_then(Value::as_u32),
        Some(0)
    );
    assert_eq!(
        g.get("chatglm.attention.head_count_kv")
            .and_then(Value::as_u32),
        Some(1)
    );
    assert_eq!(g.tensor("blk.0.attn_qkv.weight").unwrap().ne[1], 16);
}

#[test]
fn malformed_sentencepiece_model_is_an_error() {
    let dir = scratch("bad-spm");
    small_chatglm3(&dir);
    let p = dir.join("tokenizer.model");
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    let (e, written) = convert_err(&dir);
    assert!(matches!(e, ConvertError::Tokenizer { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("tokenizer.model") && msg.contains("not a valid SentencePiece model"),
        "{msg}"
    );
    assert!(!written);
}

// ---------------------------------------------------------------------------------------
// The registry, and what the architectures write, byte for byte.
// ---------------------------------------------------------------------------------------

#[test]
fn registry_detects_each_architecture_from_config_json() {
    let names: Vec<&str> = SourceArch::all().map(SourceArch::gguf_name).collect();
    assert_eq!(
        names,
        [
            "llama", "qwen2", "smollm3", "granite", "mistral3", "gemma3", "phi3", "chatglm",
            "chatglm1", "bert"
        ]
    );
    let detect = |cfg: serde_json::Value| SourceArch::detect(&cfg).map(SourceArch::gguf_name);
    let cases = [
        (json!({"architectures": ["LlamaForCausalLM"]}), "llama"),
        (json!({"architectures": ["Qwen2ForCausalLM"]}), "qwen2"),
        (json!({"architectures": ["SmolLM3ForCausalLM"]}), "smollm3"),
        (json!({"architectures": ["GraniteForCausalLM"]}), "granite"),
        (
            json!({"architectures": ["Ministral3ForCausalLM"]}),
            "mistral3",
        ),
        (json!({"architectures": ["Gemma3ForCausalLM"]}), "gemma3"),
        (json!({"architectures": ["Phi3ForCausalLM"]}), "phi3"),
        (json!({"architectures": ["ChatGLMModel"]}), "chatglm"),
        (
            json!({"architectures": ["ChatGLMForConditionalGeneration"]}),
            "chatglm",
        ),
        (
            json!({"architectures": ["ChatGLMModel"], "position_encoding_2d": true}),
            "chatglm1",
        ),
        (
            json!({"architectures": ["ChatGLMForConditionalGeneration"],
                   "position_encoding_2d": false}),
            "chatglm1",
        ),
        (json!({"architectures": ["BertModel"]}), "bert"),
        (
            json!({"architectures": ["BertForSequenceClassification"]}),
            "bert",
        ),
        // The first entry an architecture recognises wins.
        (
            json!({"architectures": ["MyWrapper", "Qwen2ForCausalLM", "LlamaForCausalLM"]}),
            "qwen2",
        ),
    ];
    for (cfg, want) in cases {
        assert_eq!(detect(cfg.clone()).ok(), Some(want), "{cfg}");
    }
    for cfg in [
        json!({}),
        json!({"architectures": []}),
        json!({"model_type": "llama"}),
    ] {
        match SourceArch::detect(&cfg) {
            Err(ConvertError::UnsupportedArchitecture { found, .. }) => {
                assert!(found.is_empty(), "{cfg}: {found:?}")
            }
            other => panic!("{cfg}: {other:?}"),
        }
    }
}

#[test]
fn unknown_architecture_lists_every_registered_one() {
    let e = SourceArch::detect(&json!({"architectures": ["MistralForCausalLM"]})).unwrap_err();
    let msg = e.to_string();
    for a in SourceArch::all() {
        assert!(msg.contains(a.source()), "{msg} lacks {}", a.source());
    }
    assert!(msg.contains("MistralForCausalLM"), "{msg}");
    assert!(msg.contains("position_encoding_2d"), "{msg}");
}

/// sha256 of the files ggrs-llama's `convert` module wrote (commit ab5a2b2, before the
/// converter became this crate with one file per architecture), by checkpoint and output
/// type: a change to any byte a conversion writes shows here. A deliberate change updates
/// the table.
const RECORDED_SHA256: &[(&str, &str, &str)] = &[
    (
        "chatglm1",
        "f32",
        "c8cc02d9660130c6fd2e94a3a04e694c4416240daf8d2fd9eb8570919ea08f5c",
    ),
    (
        "chatglm1",
        "f16",
        "04f51dc6ad1ea8bdce06e029b37ec0d0cc1c3bb3c94148ab22ecbbeaf0507988",
    ),
    (
        "chatglm1",
        "bf16",
        "23c6251934cdc799baddc959a4e021107758c2aa92efbe076bf9dd41d4dbdf5f",
    ),
    (
        "chatglm1",
        "q8_0",
        "f7b6e018857baeb2069994ee8c6b9ac24d38983e5e58c098c17d91f07b7b7da9",
    ),
    (
        "chatglm1",
        "q4_0",
        "df562fb2bc95b6f3d386538d795e406b8615eb5b86c77a36aaeccef4dca3e701",
    ),
    (
        "llama",
        "f32",
        "ec4b1503d008378c92111db695dfb794b5d57b731565f7770f6d432b85fe77c5",
    ),
    (
        "llama",
        "f16",
        "d2db733c675ad7adedf8fa31d6e64eb531ed3db0e2273a09cad05c027d59cc5f",
    ),
    (
        "llama",
        "bf16",
        "7c7fb2cece4f91f52ad6e08d299d85f50b6b1fb4c320680cbaae5fc4f58d352e",
    ),
    (
        "llama",
        "q8_0",
        "d35ec24f6c9554a6cd7d3c4d035ba84dbc1c3e439e2bece7f539385a9120e1bf",
    ),
    (
        "llama",
        "q4_0",
        "d3ac7ab53f120b9d5cc987949bbfdd0ea61257e1d0cdcabebe5d895a2ae36643",
    ),
    (
        "qwen2",
        "f32",
        "163410c15d35d6c729a36d9079f4bb6f267f11acce9c62b80a44e890e987d3d1",
    ),
    (
        "qwen2",
        "f16",
        "80ed5a2b2fbd44ddba5d5eba8aaecb76838204f65d32980c70261f98f96f559b",
    ),
    (
        "qwen2",
        "bf16",
        "e71fe4abc0bd5646440724d9125f1bc938f24da03a7b0455abf318a9ec2853ee",
    ),
    (
        "qwen2",
        "q8_0",
        "1a75bd0e7e9f1e0627809c399e7c3c7dea19f5682f5aee9bed6a7d6c3fa14de7",
    ),
    (
        "qwen2",
        "q4_0",
        "d8c048124362466ff0ddff997b7c90ff6650792e1d788f3e46bc0560eab984e8",
    ),
    (
        "chatglm2",
        "f32",
        "21bb363f8bb54fa23400a64b050ee4ec31d2d87948c4a75a28fe052133dce11f",
    ),
    (
        "chatglm2",
        "f16",
        "6cac2f420b9adab0d6b461a64a5ab5585fb4420d68d56a02a60c8ee436461cf9",
    ),
    (
        "chatglm2",
        "bf16",
        "cb710354d56cb826df2de59a62f8eb50b4483ca29751f0b8f6f6aaff5c5e685e",
    ),
    (
        "chatglm2",
        "q8_0",
        "ca76c85dde393a5754294dee8d70864080236301e20913a5fe4390019d922a00",
    ),
    (
        "chatglm2",
        "q4_0",
        "4ca7e213f42b03e060b34e281e3403527c6f8c97ae354235cc81934220da8308",
    ),
    (
        "chatglm3",
        "f32",
        "e6015a728c026bc8e25e3e7171ab11bf0cba8953ac8040261bd3869bb1303fb3",
    ),
    (
        "chatglm3",
        "f16",
        "9c9b0496b980ae2855f781f406c436b622b5130ed7d13ee304711ea02fcfb856",
    ),
    (
        "chatglm3",
        "bf16",
        "bae04ee76a5c3a05cc80e502ed82634928c15dd580ee8952c1f6bd1ad78213d8",
    ),
    (
        "chatglm3",
        "q8_0",
        "c405b24b52563c260a7a3f8bd8308c559a616369d3f6623b73cd2d7c928e366e",
    ),
    (
        "chatglm3",
        "q4_0",
        "946e6e4aa214f95a28b330b9c65952184cffdc1b7e039fe8fa397c48857e50db",
    ),
];

#[test]
fn outputs_equal_the_recorded_files() {
    use sha2::{Digest, Sha256};
    let root = scratch("recorded");
    let mk = |name: &str| {
        let d = root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let llama = mk("llama");
    llama_checkpoint(&llama);
    let chatglm2 = mk("chatglm2");
    chatglm2_checkpoint(&chatglm2);
    let chatglm3 = mk("chatglm3");
    small_chatglm3(&chatglm3);
    // Named after the directory it was recorded from (its config.json has no
    // `_name_or_path`).
    let qwen2 = mk("qwen2");
    qwen2_checkpoint(&qwen2);
    let out = root.join("out.gguf");
    for &(ck, outtype, want) in RECORDED_SHA256 {
        let (dir, name) = match ck {
            "chatglm1" => (v1_dir(), None),
            "llama" => (llama.clone(), None),
            "chatglm2" => (chatglm2.clone(), None),
            "chatglm3" => (chatglm3.clone(), None),
            "qwen2" => (qwen2.clone(), Some("convert-qwen2".to_string())),
            other => panic!("{other}"),
        };
        let opts = ConvertOptions {
            outtype: outtype.parse().unwrap(),
            n_threads: 2,
            name,
        };
        convert_hf_dir(&dir, &out, &opts).unwrap();
        let got: String = Sha256::digest(std::fs::read(&out).unwrap())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(got, want, "{ck} as {outtype}");
    }
    std::fs::remove_file(&out).unwrap();
}

/// sentence-transformers/all-MiniLM-L6-v2 (`scripts/fetch-embed-model.sh`), when it is cached
/// (else skipped with a message): converted to F16 by ggrs,
/// - every tensor equals, byte for byte, the one llama.cpp's `convert_hf_to_gguf.py` writes
///   (name, type, shape and sha256 of the data recorded in
///   `tests/data/minilm-f16.llama-convert.json`);
/// - its embeddings of the six reference prompts are `llama-embedding`'s on this same file
///   (`tests/data/minilm-f16.llama-embedding.jsonl`, printed `%1.7f`) to llama.cpp's own
///   noise: the reference is this machine's AVX2 build, whose sums run 8 lanes at a time where
///   ggrs follows ggml's AVX-512 orders, so activations rounded to f16 before a product now and
///   then round the other way. Measured: max |Δ| per prompt 4.4e-4, 2.8e-4, 3.2e-4, 2.7e-4,
///   2.8e-4, 3.7e-4 (normalised at most 8.6e-5, cosine ≥ 0.99999982); llama.cpp's own
///   difference between a prompt alone and in a batch of six is 2.8e-4 to 4.2e-4. Bound 6e-4;
/// - they are sentence-transformers' own (PyTorch on the CPU, normalised:
///   `tests/data/minilm.sentence-transformers.jsonl`) to a cosine of at least 0.9999
///   (measured: ≥ 0.9999987).
///
/// `scripts/make-minilm-references.py` writes the three reference files.
#[test]
fn all_minilm_l6_v2_converts_as_llama_cpp_and_embeds_as_it() {
    use sha2::{Digest, Sha256};
    let dir = common::model_dir().join("all-minilm-l6-v2");
    if !dir.join(".complete").is_file() {
        eprintln!(
            "SKIPPED: {} is not there (scripts/fetch-embed-model.sh fetches it)",
            dir.display()
        );
        return;
    }
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let out = scratch("minilm").join("minilm-f16.gguf");
    let opts = ConvertOptions {
        outtype: OutType::F16,
        n_threads: 2,
        name: None,
    };
    convert_hf_dir(&dir, &out, &opts).unwrap();
    let g = GgufFile::open(&out).unwrap();
    let want: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(data.join("minilm-f16.llama-convert.json")).unwrap(),
    )
    .unwrap();
    let names: Vec<&str> = g.tensors().iter().map(|t| t.name.as_str()).collect();
    let mut want_names: Vec<&str> = want.keys().map(String::as_str).collect();
    let mut got_names = names.clone();
    want_names.sort_unstable();
    got_names.sort_unstable();
    assert_eq!(got_names, want_names, "the tensors llama.cpp writes");
    for t in g.tensors() {
        let w = &want[&t.name];
        let sha: String = Sha256::digest(g.tensor_data(t))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let ty = format!("{:?}", t.dtype).to_uppercase();
        assert_eq!(ty, w["type"], "{}", t.name);
        let ne: Vec<u64> = t.shape().iter().map(|&x| x as u64).collect();
        assert_eq!(json!(ne), w["ne"], "{}", t.name);
        assert_eq!(
            sha, w["sha256"],
            "{}: data differs from llama.cpp's",
            t.name
        );
    }

    // The tokenizer keys llama.cpp's converter writes, arrays by the sha256 of their items.
    let want: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(data.join("minilm-f16.llama-convert-tokenizer.json")).unwrap(),
    )
    .unwrap();
    let got_keys: Vec<&str> = g
        .metadata()
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| k.starts_with("tokenizer."))
        .collect();
    let mut want_keys: Vec<&str> = want.keys().map(String::as_str).collect();
    let mut sorted = got_keys.clone();
    sorted.sort_unstable();
    want_keys.sort_unstable();
    assert_eq!(sorted, want_keys, "the tokenizer keys llama.cpp writes");
    for k in got_keys {
        let v = g.get(k).unwrap();
        let got = match v {
            Value::Array(items) => {
                let lines: Vec<String> = items
                    .iter()
                    .map(|x| match x {
                        Value::String(s) => s.clone(),
                        other => other.as_i64().map(|n| n.to_string()).unwrap_or_default(),
                    })
                    .collect();
                let sha: String = Sha256::digest(lines.join("\n").as_bytes())
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                json!({"len": items.len(), "sha256_lines": sha})
            }
            Value::String(s) => json!(s),
            Value::Bool(b) => json!(b),
            other => json!(other.as_i64()),
        };
        assert_eq!(got, want[k], "{k}");
    }

    let model = Arc::new(ggrs_llama::Model::load(&out).unwrap());
    drop(g);
    let refs = common::json_lines(&data.join("minilm-f16.llama-embedding.jsonl"));
    assert_eq!(refs.len(), 6);
    let worst = common::assert_embeddings_match("all-MiniLM-L6-v2", &model, &refs, 6e-4);
    eprintln!("all-MiniLM-L6-v2 vs llama-embedding: max |diff| {worst:.2e}");
    let st = common::json_lines(&data.join("minilm.sentence-transformers.jsonl"));
    let prompts: Vec<&str> = st.iter().map(|r| r["prompt"].as_str().unwrap()).collect();
    let got = common::embedder(&model, None, 2).embed(&prompts).unwrap();
    for (r, v) in st.iter().zip(&got) {
        let want = common::floats(&r["embedding"]);
        let cos = ggrs_llama::embed::cosine(v, &want);
        let d = common::max_diff(v, &want);
        eprintln!("vs sentence-transformers: cosine {cos:.9}, max |diff| {d:.2e}");
        assert!(cos >= 0.9999, "{:?}: cosine {cos}", r["prompt"]);
    }
    let _ = std::fs::remove_file(&out);
}
