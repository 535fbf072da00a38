//! Tokenizers against llama.cpp's outputs (`shared/reference`, beside the repository):
//! its vocabulary test vectors, the prompt tokens of the reference runs, decode round trips
//! and the streaming decoder, and the speed of BPE on a 35 KB text.

use std::path::PathBuf;
use std::time::Instant;

use ggrs_llama::tokenizer::{PreTokenizer, TokenType, Tokenizer, VocabKind};

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

/// The test strings of a `.inp` file and the ids of its `.out` file.
fn vectors(name: &str) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let path = reference(&format!("vocab/ggml-vocab-{name}.gguf.{ext}"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let inp = read("inp");
    let out = read("out");
    let mut inputs: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    // The file ends with the separator: the last piece is empty and no case.
    assert_eq!(inputs.pop(), Some(""));
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

/// Checks every vector, listing all mismatches.
fn check_vectors(tok: &Tokenizer, name: &str) -> Vec<(String, Vec<u32>)> {
    let cases = vectors(name);
    let mut failures = Vec::new();
    for (text, expected) in &cases {
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
    cases
}

/// `decode(encode(s)) == s`, and the streaming decoder gives the same text one id at a time.
/// Returns how many cases held bytes back mid-stream (a character split across tokens).
fn check_round_trips(tok: &Tokenizer, cases: &[(String, Vec<u32>)]) -> usize {
    let mut split_chars = 0;
    for (text, ids) in cases {
        assert_eq!(&tok.decode(ids).unwrap(), text, "decode of {ids:?}");
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
        assert_eq!(&tok.decode_skip_bos(&with_bos).unwrap(), text);
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
    assert_eq!(tok.vocab().pre_tokenizer(), Some(PreTokenizer::Qwen2));
    let cases = check_vectors(&tok, "qwen2");
    let split = check_round_trips(&tok, &cases);
    assert!(split > 0, "no case split a character across tokens");
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
