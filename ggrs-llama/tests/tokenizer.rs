//! Tokenizers against llama.cpp's outputs: its vocabulary test vectors (two in
//! `shared/reference` beside the repository, and all of llama.cpp's own, fetched by
//! `scripts/fetch-vocab-vectors.sh`), the prompt tokens of the reference runs, decode round
//! trips and the streaming decoder, and the speed of BPE on a 35 KB text.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use ggrs_llama::tokenizer::{TokenType, Tokenizer, TokenizerError, VocabKind};

/// `shared/reference/<rel>`: the first `shared/reference` going up from this crate (the
/// repository may be a worktree nested deeper than the main checkout).
fn reference(rel: &str) -> PathBuf {
    // `GGRS_REFERENCE_DIR`: for a checkout that is not beside `shared/` (a worktree).
    std::env::var_os("GGRS_REFERENCE_DIR")
        .map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference"),
            PathBuf::from,
        )
        .join(rel)
}

fn open(rel: &str) -> Tokenizer {
    let path = reference(rel);
    Tokenizer::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The test strings of `shared/reference/vocab`'s `.inp` file for `name` and the ids of its
/// `.out` file.
fn vectors(name: &str) -> Vec<(String, Vec<u32>)> {
    vectors_in(&reference("vocab"), name)
}

/// The test strings of `dir/ggml-vocab-<name>.gguf.inp` and the ids of its `.out` file.
fn vectors_in(dir: &Path, name: &str) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let path = dir.join(format!("ggml-vocab-{name}.gguf.{ext}"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let inp = read("inp");
    let out = read("out");
    let mut inputs: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    // Most files end with the separator: then the last piece is empty and no case (as
    // llama.cpp's test-tokenizer-0 reads them; gemma-4's file has no final separator).
    if inputs.last() == Some(&"") {
        inputs.pop();
    }
    let outputs: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{name}: .inp and .out disagree on the case count"
    );
    inputs.into_iter().map(str::to_owned).zip(outputs).collect()
}

/// Checks every vector of `shared/reference/vocab`, listing all mismatches.
fn check_vectors(tok: &Tokenizer, name: &str) -> Vec<(String, Vec<u32>)> {
    let cases = vectors(name);
    check_cases(tok, name, &cases);
    cases
}

/// Checks that `tok` gives llama.cpp's ids for every case, listing all mismatches.
fn check_cases(tok: &Tokenizer, name: &str, cases: &[(String, Vec<u32>)]) {
    let mut failures = Vec::new();
    for (text, expected) in cases {
        let got = tok.encode(text, false, false).unwrap();
        if &got != expected {
            failures.push(format!(
                "{text:?}\n   got      {got:?}\n   expected {expected:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} cases differ from llama.cpp:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Whether decoding with `clean_spaces` changes `text` (llama.cpp's
/// `clean_up_tokenization_spaces` drops a space before `?`, `!`, `.`, `,` and `'`).
fn spaces_to_clean(tok: &Tokenizer, text: &str) -> bool {
    tok.vocab().clean_spaces()
        && [" ?", " !", " .", " ,", " '"]
            .iter()
            .any(|p| text.contains(p))
}

/// `decode(encode(s)) == s` (unless the vocabulary cleans up spaces in `s`), and the
/// streaming decoder, which never cleans up, gives `s` one id at a time. Returns how many
/// cases held bytes back mid-stream (a character split across tokens).
fn check_round_trips(tok: &Tokenizer, cases: &[(String, Vec<u32>)]) -> usize {
    let mut split_chars = 0;
    for (text, ids) in cases {
        let clean = spaces_to_clean(tok, text);
        if !clean {
            assert_eq!(&tok.decode(ids).unwrap(), text, "decode of {ids:?}");
        }
        let mut dec = tok.decoder();
        let mut streamed = String::new();
        let mut held = false;
        for &id in ids {
            streamed.push_str(&dec.push(id).unwrap());
            held |= !dec.pending().is_empty();
        }
        streamed.push_str(&dec.finish());
        assert_eq!(&streamed, text, "streaming decode of {ids:?}");
        split_chars += usize::from(held);

        // With BOS added: decoding without the BOS gives the text back too.
        let with_bos = tok.encode(text, true, false).unwrap();
        if !clean {
            assert_eq!(&tok.decode_skip_bos(&with_bos).unwrap(), text);
        }
    }
    split_chars
}

#[test]
fn llama_spm_vectors_and_round_trips() {
    let tok = open("vocab/ggml-vocab-llama-spm.gguf");
    assert_eq!(tok.vocab().kind(), VocabKind::Spm);
    assert_eq!(tok.n_vocab(), 32000);
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(2)));
    assert!(tok.vocab().add_bos() && tok.vocab().add_space_prefix());
    let cases = check_vectors(&tok, "llama-spm");
    // The vectors include emoji and Khmer that SentencePiece spells as <0xNN> bytes.
    let split = check_round_trips(&tok, &cases);
    assert!(split > 0, "no case split a character across byte tokens");

    // BOS goes first with add_special, and a sequence starting with BOS decodes with the
    // space that the BOS piece did not take (llama.cpp's behaviour).
    let ids = tok.encode("Hello world", true, false).unwrap();
    assert_eq!(ids, vec![1, 15043, 3186]);
    assert_eq!(tok.decode(&ids).unwrap(), " Hello world");
    assert_eq!(tok.decode_with_special(&ids).unwrap(), "<s> Hello world");
    assert_eq!(tok.token_to_piece(15043).unwrap(), b" Hello");
    assert_eq!(tok.token_to_piece(13).unwrap(), b"\n"); // <0x0A>
    assert_eq!(tok.token_to_piece(1).unwrap(), b"<s>");
    assert_eq!(tok.token_to_text_piece(1).unwrap(), b"");
    assert!(tok.token_to_piece(32000).is_err());
}

#[test]
fn qwen2_vectors_and_round_trips() {
    let tok = open("vocab/ggml-vocab-qwen2.gguf");
    assert_eq!(tok.vocab().kind(), VocabKind::Bpe);
    assert_eq!(tok.vocab().pre_tokenizer().map(|p| p.name()), Some("qwen2"));
    let cases = check_vectors(&tok, "qwen2");
    let split = check_round_trips(&tok, &cases);
    assert!(split > 0, "no case split a character across tokens");
}

/// The directory of llama.cpp's vocabulary test vectors (`models/ggml-vocab-*` of the
/// llama-cpp-python 0.3.36 sdist): `$GGRS_VOCAB_DIR` or `~/.cache/ggrs/vocab`. When they
/// are missing, `scripts/fetch-vocab-vectors.sh` fetches them from PyPI (and the test fails
/// if that fails), unless `GGRS_SKIP_MODEL_TESTS=1` asks to skip such tests (`None`).
fn llama_cpp_vocab_dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var_os("GGRS_VOCAB_DIR").map_or_else(
            || {
                let home =
                    std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
                home.join(".cache/ggrs/vocab")
            },
            PathBuf::from,
        );
        if dir.join(".complete").exists() {
            return Some(dir);
        }
        if std::env::var("GGRS_SKIP_MODEL_TESTS").is_ok_and(|v| v == "1") {
            eprintln!(
                "SKIPPED: llama.cpp's vocabulary vectors are missing and GGRS_SKIP_MODEL_TESTS=1"
            );
            return None;
        }
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-vocab-vectors.sh");
        eprintln!(
            "{} is missing: fetching it with {}",
            dir.display(),
            script.display()
        );
        let status = std::process::Command::new("bash")
            .arg(&script)
            .env("GGRS_VOCAB_DIR", &dir)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run scripts/fetch-vocab-vectors.sh");
        assert!(
            status.success() && dir.join(".complete").exists(),
            "fetching llama.cpp's vocabulary vectors failed ({status}); set \
             GGRS_SKIP_MODEL_TESTS=1 to skip the tests that need them"
        );
        Some(dir)
    })
    .clone()
}

/// llama.cpp's vocabularies with test vectors that ggrs tokenizes (all but the two below).
const LLAMA_CPP_SUPPORTED: &[&str] = &[
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gemma-4",
    "gpt-2",
    "llama-bpe",
    "llama-spm",
    "mpt",
    "phi-3",
    "qwen2",
    "qwen35",
    "refact",
    "starcoder",
];

/// llama.cpp's vocabularies of tokenizer models ggrs does not implement, with the model.
const LLAMA_CPP_UNSUPPORTED: &[(&str, &str)] = &[("nomic-bert-moe", "t5")];

/// llama.cpp's WordPiece vocabularies (`bert`): its vectors are checked, not round trips
/// (WordPiece lower-cases and drops accents and spacing).
const LLAMA_CPP_WORDPIECE: &[&str] = &["bert-bge"];

/// llama.cpp's vocabularies without test vectors (they load; their round trips are tested).
const LLAMA_CPP_WITHOUT_VECTORS: &[&str] = &["aquila", "baichuan", "gpt-neox"];

#[test]
fn llama_cpp_vocab_vectors() {
    let Some(dir) = llama_cpp_vocab_dir() else {
        return;
    };
    // Every vocabulary of the sdist is in one of the lists, and every listed one is there.
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let stem = name.strip_prefix("ggml-vocab-")?.strip_suffix(".gguf")?;
            Some(stem.to_owned())
        })
        .collect();
    found.sort();
    let mut listed: Vec<String> = LLAMA_CPP_SUPPORTED
        .iter()
        .chain(LLAMA_CPP_WITHOUT_VECTORS)
        .chain(LLAMA_CPP_UNSUPPORTED.iter().map(|(n, _)| n))
        .chain(LLAMA_CPP_WORDPIECE)
        .map(|n| n.to_string())
        .collect();
    listed.sort();
    assert_eq!(found, listed);

    for name in LLAMA_CPP_WORDPIECE {
        let path = dir.join(format!("ggml-vocab-{name}.gguf"));
        let tok = Tokenizer::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(tok.vocab().kind(), VocabKind::Wpm);
        check_cases(&tok, name, &vectors_in(&dir, name));
    }
    let mut total = 0;
    for name in LLAMA_CPP_SUPPORTED {
        let path = dir.join(format!("ggml-vocab-{name}.gguf"));
        let tok = Tokenizer::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let cases = vectors_in(&dir, name);
        check_cases(&tok, name, &cases);
        check_round_trips(&tok, &cases);
        eprintln!(
            "{name}: {} cases equal to llama.cpp ({:?}, pre-tokenizer {:?})",
            cases.len(),
            tok.vocab().kind(),
            tok.vocab().pre_name()
        );
        total += cases.len();
    }
    assert!(total > 14 * 30, "{total} cases");

    // The pre-tokenizers this test is about.
    for (name, pre) in [
        ("deepseek-llm", "deepseek-llm"),
        ("deepseek-coder", "deepseek-coder"),
    ] {
        let tok = Tokenizer::open(dir.join(format!("ggml-vocab-{name}.gguf"))).unwrap();
        assert_eq!(tok.vocab().pre_tokenizer().map(|p| p.name()), Some(pre));
        // Neither cleans up spaces when decoding; both add BOS.
        assert!(!tok.vocab().clean_spaces() && tok.vocab().add_bos());
    }
}

#[test]
fn llama_cpp_vocabs_without_vectors_round_trip() {
    let Some(dir) = llama_cpp_vocab_dir() else {
        return;
    };
    // llama-bpe's test strings (the same for most vocabularies).
    let texts: Vec<String> = vectors_in(&dir, "llama-bpe")
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    for name in LLAMA_CPP_WITHOUT_VECTORS {
        let tok = Tokenizer::open(dir.join(format!("ggml-vocab-{name}.gguf")))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // aquila and gpt-neox are BPE files without `tokenizer.ggml.pre`: `default`.
        if tok.vocab().kind() == VocabKind::Bpe {
            assert_eq!(
                tok.vocab().pre_tokenizer().map(|p| p.name()),
                Some("default")
            );
        }
        let cases: Vec<(String, Vec<u32>)> = texts
            .iter()
            .map(|t| (t.clone(), tok.encode(t, false, false).unwrap()))
            .collect();
        check_round_trips(&tok, &cases);
    }
}

#[test]
fn llama_cpp_vocabs_of_unsupported_models_are_refused() {
    let Some(dir) = llama_cpp_vocab_dir() else {
        return;
    };
    for (name, model) in LLAMA_CPP_UNSUPPORTED {
        let e = Tokenizer::open(dir.join(format!("ggml-vocab-{name}.gguf"))).unwrap_err();
        match &e {
            TokenizerError::UnsupportedModel { model: m, .. } => assert_eq!(m, model, "{name}"),
            other => panic!("{name}: {other}"),
        }
        assert!(e.to_string().contains(&format!("`{model}`")), "{e}");
    }
}

/// Every pre-tokenizer against llama.cpp itself: `scripts/check-pretokenizers-vs-llamacpp.sh`
/// writes llama.cpp's ids for its test strings (`cases.inp`) with each vocabulary file and
/// `tokenizer.ggml.pre` name (`out/<vocabulary>.<name>.out`) to `$GGRS_PRETOK_CHECK_DIR`, then
/// runs this test, which tokenizes the same strings with the same vocabulary and name.
#[test]
#[ignore = "needs llama.cpp's output: run scripts/check-pretokenizers-vs-llamacpp.sh"]
fn pretokenizers_match_llama_cpp() {
    use ggrs_core::gguf::GgufFile;
    use ggrs_llama::tokenizer::{Vocab, VocabParts};

    let dir = PathBuf::from(
        std::env::var_os("GGRS_PRETOK_CHECK_DIR").expect("GGRS_PRETOK_CHECK_DIR is not set"),
    );
    let vocab_dir = llama_cpp_vocab_dir().expect("llama.cpp's vocabulary files");
    let inp = std::fs::read_to_string(dir.join("cases.inp")).unwrap();
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    texts.pop();
    let mut results: Vec<PathBuf> = std::fs::read_dir(dir.join("out"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    results.sort();
    assert!(!results.is_empty(), "no results in {}", dir.display());
    let mut files = std::collections::HashMap::new();
    let mut failures = Vec::new();
    for path in &results {
        let file_name = path.file_name().unwrap().to_str().unwrap();
        let (base, name) = file_name
            .strip_suffix(".out")
            .and_then(|s| s.split_once('.'))
            .unwrap_or_else(|| panic!("{file_name}: not <vocabulary>.<name>.out"));
        let expected: Vec<Vec<u32>> = std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
            .collect();
        assert_eq!(
            expected.len(),
            texts.len(),
            "{file_name}: one line per string"
        );
        let file = files.entry(base.to_owned()).or_insert_with(|| {
            GgufFile::open(vocab_dir.join(format!("ggml-vocab-{base}.gguf"))).unwrap()
        });
        let mut parts = VocabParts::from_kv(|k| file.get(k)).unwrap();
        parts.pre = Some(name.to_owned());
        let tok =
            Tokenizer::new(Vocab::from_parts(parts).unwrap_or_else(|e| panic!("{name}: {e}")));
        let mut differ = 0;
        for (text, expected) in texts.iter().zip(&expected) {
            let got = tok.encode(text, false, false).unwrap();
            if &got != expected {
                if differ < 3 {
                    failures.push(format!(
                        "{base} {name}: {text:?}\n   got      {got:?}\n   expected {expected:?}"
                    ));
                }
                differ += 1;
            }
        }
        eprintln!("{base} {name}: {differ} of {} strings differ", texts.len());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!(
        "{} vocabulary and pre-tokenizer pairs, {} strings each: all equal to llama.cpp",
        results.len(),
        texts.len()
    );
}

/// The prompts of `prompts.txt` and their reference tokens in a `*.public.jsonl` file.
fn prompt_tokens(rel: &str) -> Vec<(String, Vec<u32>)> {
    let prompts_path = reference("prompts.txt");
    let prompts = std::fs::read_to_string(&prompts_path).unwrap();
    let path = reference(rel);
    let jsonl =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lines: Vec<&str> = prompts.lines().filter(|l| !l.is_empty()).collect();
    let records: Vec<serde_json::Value> = jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), records.len(), "{rel}: one record per prompt");
    lines
        .iter()
        .zip(records)
        .map(|(line, rec)| {
            let prompt = line.replace("\\n", "\n");
            // The record carries the prompt too: both spellings must agree.
            assert_eq!(rec["prompt"].as_str(), Some(prompt.as_str()));
            let tokens = rec["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect();
            (prompt, tokens)
        })
        .collect()
}

#[test]
fn tiny_llama_prompt_tokens() {
    let tok = open("tiny/tiny-llama-f16.gguf");
    for (prompt, expected) in prompt_tokens("tiny/tiny-llama-f16.public.jsonl") {
        assert_eq!(
            tok.encode(&prompt, true, true).unwrap(),
            expected,
            "{prompt:?}"
        );
        assert_eq!(tok.decode_skip_bos(&expected).unwrap(), prompt);
    }
}

#[test]
fn tiny_chatglm_prompt_tokens() {
    // The same vocabulary with add_bos_token = false.
    let tok = open("tiny/tiny-chatglm-f16.gguf");
    assert!(!tok.vocab().add_bos());
    for (prompt, expected) in prompt_tokens("tiny/tiny-chatglm-f16.public.jsonl") {
        assert_eq!(
            tok.encode(&prompt, true, true).unwrap(),
            expected,
            "{prompt:?}"
        );
        assert_eq!(tok.decode(&expected).unwrap(), prompt);
    }
}

#[test]
fn qwen05b_prompt_tokens() {
    // The real model's vocabulary is Qwen2's: the vocab-only file has the same tokens and
    // merges for everything below id 151646 and the same flags (no BOS added, `qwen2`
    // pre-tokenizer, <|im_start|>/<|im_end|> as control tokens).
    let tok = open("vocab/ggml-vocab-qwen2.gguf");
    assert!(!tok.vocab().add_bos() && !tok.vocab().add_eos());
    let v = tok.vocab();
    for (text, id) in [
        ("<|endoftext|>", 151643),
        ("<|im_start|>", 151644),
        ("<|im_end|>", 151645),
    ] {
        assert_eq!(v.token_id(text), Some(id));
        assert_eq!(v.token(id).unwrap().ty, TokenType::Control);
    }
    assert!(tok.is_eog(151643) && tok.is_eog(151645) && !tok.is_eog(151644));

    for (prompt, expected) in prompt_tokens("qwen05b/q4_0.public.jsonl") {
        assert_eq!(
            tok.encode(&prompt, true, true).unwrap(),
            expected,
            "{prompt:?}"
        );
        assert_eq!(tok.decode_with_special(&expected).unwrap(), prompt);
        // Without parsing specials, the chat markers are plain text.
        if prompt.contains("<|im_start|>") {
            let plain = tok.encode(&prompt, true, false).unwrap();
            assert!(!plain.contains(&151644));
            assert_eq!(tok.decode(&plain).unwrap(), prompt);
        }
    }
}

#[test]
fn qwen2_gpl3_speed_and_token_count() {
    let path = "/usr/share/common-licenses/GPL-3";
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("{path} not found: skipping the speed test");
        return;
    };
    let start = Instant::now();
    let tok = open("vocab/ggml-vocab-qwen2.gguf");
    eprintln!(
        "qwen2: read the vocabulary (151936 tokens, 151387 merges) in {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let start = Instant::now();
    let ids = tok.encode(&text, true, false).unwrap();
    let elapsed = start.elapsed();
    eprintln!(
        "qwen2: tokenized {} bytes of GPL-3 into {} tokens in {:.1} ms",
        text.len(),
        ids.len(),
        elapsed.as_secs_f64() * 1e3
    );
    // llama-perplexity -c 512 found 14 full chunks of 512 tokens in this text
    // (reference/README.md), so llama.cpp made between 14·512 and 15·512 - 1 tokens.
    assert!(
        (14 * 512..15 * 512).contains(&ids.len()),
        "{} tokens",
        ids.len()
    );
    assert_eq!(tok.decode(&ids).unwrap(), text);
    // Generous bound for a busy shared machine; a release build takes a few milliseconds.
    assert!(elapsed.as_secs_f64() < 1.0, "took {elapsed:?}");
}

/// The real Qwen2.5-Coder model, if `scripts/fetch-model.sh` has fetched it.
fn real_qwen_model() -> Option<PathBuf> {
    let dir = std::env::var_os("GGRS_MODEL_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/ggrs/models"))
        })?;
    let path = dir.join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    path.exists().then_some(path)
}

#[test]
fn real_qwen_model_tokenizer() {
    let Some(path) = real_qwen_model() else {
        eprintln!("the Qwen2.5-Coder model is not fetched (scripts/fetch-model.sh): skipping");
        return;
    };
    let tok = Tokenizer::open(&path).unwrap();
    let v = tok.vocab();
    // Its keys: EOS is <|im_end|>, no BOS added, the FIM tokens end generation too.
    assert_eq!((tok.bos(), tok.eos()), (Some(151643), Some(151645)));
    assert!(!v.add_bos());
    assert_eq!(v.special().eot, Some(151645));
    assert_eq!(v.special().fim_pre, v.token_id("<|fim_prefix|>"));
    for text in [
        "<|endoftext|>",
        "<|im_end|>",
        "<|fim_pad|>",
        "<|repo_name|>",
        "<|file_sep|>",
    ] {
        assert!(tok.is_eog(v.token_id(text).unwrap()), "{text}");
    }
    // The reference prompts tokenize the same as with the vocab-only file.
    for (prompt, expected) in prompt_tokens("qwen05b/q4_0.public.jsonl") {
        assert_eq!(
            tok.encode(&prompt, true, true).unwrap(),
            expected,
            "{prompt:?}"
        );
    }
    // <tool_call> is user-defined: matched even when special tokens are not parsed.
    let tool_call = v.token_id("<tool_call>").unwrap();
    assert_eq!(v.token(tool_call).unwrap().ty, TokenType::UserDefined);
    let ids = tok.encode("x<tool_call>y", false, false).unwrap();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[1], tool_call);
    assert_eq!(tok.decode(&ids).unwrap(), "x<tool_call>y");
}

/// The end-of-turn tokens of the 2026 families end generation as in llama.cpp (Gemma 4's
/// `<turn|>`, `<eos>` and `<|tool_response>`, Granite's `<|end_of_text|>`, SmolLM3's
/// `<|im_end|>`, Phi's `<|end|>`, Kimi's `[EOT]`…), except harmony's `<|end|>` when the
/// vocabulary also has `<|return|>` and `<|call|>` (GPT-OSS: it only ends a message).
#[test]
fn family_turn_ends_end_generation() {
    use ggrs_llama::tokenizer::{Vocab, VocabParts};
    let vocab = |extra: &[&str]| {
        let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
        let mut types = vec![2i64, 3, 3];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
        for t in extra {
            tokens.push(t.to_string());
            types.push(3);
        }
        tokens.push("<|turn>".into());
        types.push(3);
        let n = tokens.len();
        let parts = VocabParts {
            model: "llama".into(),
            tokens,
            scores: Some(vec![0.0; n]),
            token_types: Some(types),
            ..VocabParts::default()
        };
        Tokenizer::new(Vocab::from_parts(parts).expect("valid vocabulary"))
    };
    let id = |t: &Tokenizer, s: &str| t.vocab().token_id(s).expect("token");
    let ends = [
        "<turn|>",
        "<eos>",
        "<|tool_response>",
        "<|end_of_text|>",
        "<|im_end|>",
        "<|end|>",
        "[EOT]",
    ];
    let t = vocab(&ends);
    for s in ends {
        assert!(t.is_eog(id(&t, s)), "{s} ends generation");
    }
    assert!(!t.is_eog(id(&t, "<|turn>")), "a turn start does not");
    let harmony = vocab(&["<|end|>", "<|return|>", "<|call|>", "<|start|>"]);
    assert!(
        !harmony.is_eog(id(&harmony, "<|end|>")),
        "harmony's <|end|>"
    );
    for s in ["<|return|>", "<|call|>"] {
        assert!(harmony.is_eog(id(&harmony, s)), "{s} ends generation");
    }
}
