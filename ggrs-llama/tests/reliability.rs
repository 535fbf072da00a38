//! Bad numbers in a model file or in a session's parameters are typed errors, never an abort
//! or a panic: header counts far beyond what the file holds, sessions larger than the
//! machine's memory, non-finite sampling parameters. A killed quantization leaves its output
//! as it was. And a deterministic mutation test: thousands of seeded byte mutations of the
//! tiny models through load, tokenize and one decode step.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ggrs_core::gguf::{GgufFile, Value};
use ggrs_llama::{
    Batch, GenerateParams, LlamaError, Model, SamplingParams, Session, SessionParams,
};

fn tiny(name: &str) -> PathBuf {
    common::reference_dir().join("tiny").join(name)
}

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("reliab-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The tiny llama model with metadata key `key` set to `value`, as bytes in memory.
fn with_key(key: &str, value: Value) -> Vec<u8> {
    common::gguf_with_key(&tiny("tiny-llama-f16.gguf"), key, value)
}

fn load_bytes(bytes: Vec<u8>) -> ggrs_llama::Result<Model> {
    Model::from_gguf(GgufFile::from_bytes(Arc::new(bytes))?)
}

#[test]
fn huge_header_counts_are_errors_not_aborts() {
    for n in [1u64 << 40, u64::MAX, 1 << 20] {
        let r = load_bytes(with_key("llama.block_count", Value::U64(n)));
        match r {
            Err(LlamaError::BadKey { key, detail }) => {
                assert_eq!(key, "llama.block_count");
                assert!(detail.contains("tensors"), "{detail}");
            }
            Err(e) => panic!("block_count {n}: unexpected error {e}"),
            Ok(_) => panic!("block_count {n} loaded"),
        }
    }
    for (key, n) in [
        ("llama.vocab_size", u64::MAX),
        ("llama.vocab_size", 1 << 40),
        ("llama.embedding_length", 1 << 40),
        ("llama.feed_forward_length", u64::MAX),
        ("llama.attention.key_length", 1 << 40),
        ("llama.context_length", u64::MAX),
    ] {
        let r = load_bytes(with_key(key, Value::U64(n)));
        // context_length only sets the default context: the model loads, and a session
        // defaults to at most 4096 cells.
        if key == "llama.context_length" {
            let m = Arc::new(r.unwrap());
            let s = Session::new(m, SessionParams::default()).unwrap();
            assert_eq!(s.params().n_ctx, 4096);
            continue;
        }
        let e = r.err().unwrap_or_else(|| panic!("{key} = {n} loaded"));
        assert!(
            matches!(e, LlamaError::BadKey { .. } | LlamaError::BadShape { .. }),
            "{key} = {n}: {e}"
        );
    }
}

#[test]
fn sessions_larger_than_memory_are_refused_with_the_bytes_needed() {
    let model = Arc::new(Model::load(tiny("tiny-llama-f16.gguf")).unwrap());
    let avail = ggrs_core::available_memory();
    for (n_ctx, n_batch) in [
        (1usize << 40, 512usize),
        (usize::MAX / 2, 512),
        (1 << 24, 1 << 24),
    ] {
        let t0 = Instant::now();
        let r = Session::new(
            model.clone(),
            SessionParams {
                n_ctx,
                n_batch,
                ..SessionParams::default()
            },
        );
        let e = r.expect_err("a session this large must be refused");
        match &e {
            LlamaError::SessionTooLarge {
                n_ctx: c,
                kv_bytes,
                available,
                ..
            } => {
                assert_eq!(*c, n_ctx);
                // An independent count: 2 (K and V) × layers × cells × width × 2 bytes (f16).
                let hp = &model.hparams;
                let expect =
                    2u128 * hp.n_layer as u128 * n_ctx as u128 * hp.n_embd_kv() as u128 * 2;
                if expect < u64::MAX as u128 {
                    assert_eq!(*kv_bytes as u128, expect);
                } else {
                    assert_eq!(*kv_bytes, u64::MAX);
                }
                if avail.is_some() {
                    assert!(available.is_some());
                }
            }
            e => panic!("n_ctx {n_ctx}: unexpected error {e}"),
        }
        assert!(e.to_string().contains("bytes"), "{e}");
        // Refused before anything large is touched.
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    }
}

#[test]
fn non_finite_sampling_parameters_are_refused() {
    let model = Arc::new(Model::load(tiny("tiny-llama-f16.gguf")).unwrap());
    let mut s = Session::new(model, SessionParams::default()).unwrap();
    let base = SamplingParams::default();
    let bad = [
        SamplingParams {
            frequency_penalty: f32::NEG_INFINITY,
            ..base.clone()
        },
        SamplingParams {
            presence_penalty: f32::NAN,
            ..base.clone()
        },
        SamplingParams {
            repeat_penalty: f32::INFINITY,
            ..base.clone()
        },
        SamplingParams {
            temperature: f32::NAN,
            ..base.clone()
        },
        SamplingParams {
            top_p: f32::NAN,
            ..base.clone()
        },
    ];
    for sampling in bad {
        let p = GenerateParams {
            max_tokens: 2,
            sampling: sampling.clone(),
            ..GenerateParams::default()
        };
        let r = s.generate_tokens(&[1, 450], &p, |_| std::ops::ControlFlow::Continue(()));
        assert!(
            matches!(r, Err(LlamaError::InvalidArgument(_))),
            "{sampling:?}: {r:?}"
        );
    }
}

/// The child side of [`a_killed_quantization_leaves_the_old_output`].
#[test]
fn killed_quantize_child() {
    let (Some(input), Some(out)) = (
        std::env::var_os("GGRS_KILL_QUANT_IN"),
        std::env::var_os("GGRS_KILL_QUANT_OUT"),
    ) else {
        return;
    };
    let input = GgufFile::open(input).unwrap();
    let mut recipe = ggrs_llama::quantize::RecipeOptions::new(ggrs_llama::quantize::FileType::Q8_0);
    recipe.pure = true;
    let engine = ggrs_core::quantize::QuantizeOptions {
        allow_requantize: true,
        n_threads: 1,
    };
    let _ = ggrs_llama::quantize::quantize(&input, Path::new(&out), &recipe, &engine, |_| {});
}

/// A real quantization (Qwen 0.5B f16 to q8_0) killed with SIGKILL half way leaves the file
/// it was replacing untouched.
#[cfg(unix)]
#[test]
fn a_killed_quantization_leaves_the_old_output() {
    let Some(f16) = common::qwen05b("f16") else {
        return;
    };
    let _g = common::serial();
    let d = scratch("killed");
    let out = d.join("out.gguf");
    std::fs::write(&out, b"previous model").unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &common::test_name(module_path!(), "killed_quantize_child"),
            "--test-threads=1",
        ])
        .env("GGRS_KILL_QUANT_IN", &f16)
        .env("GGRS_KILL_QUANT_OUT", &out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        let big = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .any(|p| p != out && std::fs::metadata(&p).is_ok_and(|m| m.len() > 16 << 20));
        if big {
            break;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("the quantization ended ({st}) before it could be killed");
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), b"previous model");
    let _ = std::fs::remove_dir_all(&d);
}

/// SplitMix64, for reproducible mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutation of `bytes` (a GGUF file whose header, metadata and tensor infos end at
/// `data_start`): a flipped bit, an interesting integer written over 1, 4 or 8 bytes, a
/// truncation, or a deleted or duplicated run. Positions favour the header region, where
/// every byte is structure.
fn mutate(rng: &mut Rng, bytes: &[u8], data_start: usize) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let pos = match rng.below(10) {
        0..=3 => rng.below(512.min(data_start)),
        4..=6 => rng.below(data_start),
        7..=8 => data_start.saturating_sub(1 + rng.below(4096.min(data_start))),
        _ => rng.below(b.len()),
    };
    const INTERESTING: [u64; 10] = [
        0,
        1,
        2,
        0x7f,
        0xff,
        0xffff_ffff,
        1 << 31,
        1 << 40,
        u64::MAX,
        u64::MAX / 2,
    ];
    match rng.below(6) {
        0 => b[pos] ^= 1 << rng.below(8),
        1 => b[pos] = rng.next() as u8,
        2 => {
            let v = INTERESTING[rng.below(INTERESTING.len())];
            let w = [1, 4, 8][rng.below(3)];
            let end = (pos + w).min(b.len());
            let n = end - pos;
            b[pos..end].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        3 => b.truncate(pos),
        4 => {
            let n = 1 + rng.below(16);
            let end = (pos + n).min(b.len());
            b.drain(pos..end);
        }
        _ => {
            let n = 1 + rng.below(16);
            let end = (pos + n).min(b.len());
            let run = b[pos..end].to_vec();
            b.splice(pos..pos, run);
        }
    }
    b
}

/// What one mutant went through: parse, load, tokenize, one decode step.
#[derive(Default, Debug)]
struct Tally {
    tried: usize,
    parse_err: usize,
    load_err: usize,
    loaded: usize,
    decoded: usize,
    decode_err: usize,
}

fn run_mutant(bytes: Vec<u8>, t: &mut Tally, decode: bool) {
    t.tried += 1;
    let file = match GgufFile::from_bytes(Arc::new(bytes)) {
        Ok(f) => f,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            t.parse_err += 1;
            return;
        }
    };
    let model = match Model::from_gguf(file) {
        Ok(m) => Arc::new(m),
        Err(e) => {
            assert!(!e.to_string().is_empty());
            t.load_err += 1;
            return;
        }
    };
    t.loaded += 1;
    let ids = model.tokenizer().encode("Hello, wörld! 123", true, false);
    let Ok(ids) = ids else { return };
    for &id in &ids {
        assert!(
            (id as usize) < model.hparams.n_vocab,
            "token id {id} out of range"
        );
    }
    let _ = model.tokenizer().decode(&ids);
    if !decode || ids.is_empty() {
        return;
    }
    let sp = SessionParams {
        n_ctx: 64,
        n_batch: 32,
        n_threads: 1,
        ..SessionParams::default()
    };
    let Ok(mut s) = Session::new(model.clone(), sp) else {
        t.decode_err += 1;
        return;
    };
    let n = ids.len().min(8);
    let batch = Batch::from_tokens(&ids[..n], 0, 0, false);
    match s.decode(&batch) {
        Ok(()) => {
            t.decoded += 1;
            assert_eq!(s.logits().len(), model.hparams.n_vocab);
        }
        Err(_) => t.decode_err += 1,
    }
}

/// Thousands of seeded mutations of the tiny models: each ends in a typed error or a
/// result, never a panic or an abort (the test binary would die). The seeds are fixed, so a
/// failure is reproducible by its seed.
#[test]
fn seeded_mutations_of_the_tiny_models_never_panic() {
    let t0 = Instant::now();
    let mut total = Tally::default();
    for (name, n, decode_every) in [
        ("tiny-llama-f16.gguf", 1000usize, 12usize),
        ("tiny-qwen3-f16.gguf", 300, 12),
        ("tiny-moe-f16.gguf", 200, 12),
        ("tiny-gemma2-f16.gguf", 200, 12),
        ("tiny-chatglm-f16.gguf", 200, 12),
    ] {
        let bytes = std::fs::read(tiny(name)).unwrap();
        let data_start = GgufFile::from_bytes(Arc::new(bytes.clone()))
            .unwrap()
            .data_offset();
        let mut rng = Rng(0x5eed ^ name.len() as u64);
        for i in 0..n {
            let m = mutate(&mut rng, &bytes, data_start);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_mutant(m, &mut total, i % decode_every == 0)
            }));
            assert!(r.is_ok(), "{name}: mutant {i} panicked");
        }
    }
    eprintln!(
        "{} mutants in {:.1} s: {:?}",
        total.tried,
        t0.elapsed().as_secs_f64(),
        total
    );
    assert_eq!(total.tried, 1900);
    // The mutations reach past the parser: some mutants load and decode.
    assert!(total.loaded > 100 && total.decoded > 5, "{total:?}");
}
