//! Test support shared by `ggrs-llama/tests/chat_glm1.rs` and `ggrs-cli/tests/chat.rs`
//! (included with `#[path]`): the tiny ChatGLM-6B v1 checkpoint of
//! `shared/reference/chatglm6b-v1` converted with `ggrs_convert`, given a made-up
//! SentencePiece vocabulary that can spell the official chat prompt, and the official
//! tokenizer's rule for that vocabulary written plainly.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use ggrs_convert::{convert_hf_dir, ConvertOptions, OutType};
use ggrs_core::gguf::{GgufFile, GgufWriter, Value};

/// `[gMASK]`, `<sop>`, `<eop>` of the tiny vocabulary.
pub const GMASK: u32 = 990;
/// `<sop>`.
pub const SOP: u32 = 991;
/// `<eop>`.
pub const EOP: u32 = 992;

/// The user-defined tokens of the made-up vocabulary (matched before anything else).
pub const USER_DEFINED: [(u32, &str); 4] = [
    (63, "<n>"),
    (302, "<|tab|>"),
    (498, "<|blank_2|>"),
    (499, "<|blank_3|>"),
];

/// Ordinary pieces of the made-up vocabulary, from id 100 on: the characters the chat
/// prompt, the test's questions and the tiny model's replies (`▁t123`) need, and three
/// two-character pieces (`▁[`, `问：`, `答：`) that SentencePiece merges. No other
/// concatenation of two pieces is a piece, so the merged result is the longest match.
pub const PIECES: [&str; 31] = [
    "▁", "[", "]", "R", "o", "u", "n", "d", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "问",
    "答", "：", "h", "i", "a", "b", "c", "t", "x", "▁[", "问：", "答：",
];

/// First id of [`PIECES`].
pub const PIECE_BASE: u32 = 100;

/// `shared/reference/chatglm6b-v1`, found going up from the crate (the repository may be a
/// worktree nested deeper than the main checkout).
fn ref_dir() -> PathBuf {
    // `GGRS_REFERENCE_DIR`: for a checkout that is not beside `shared/` (a worktree).
    std::env::var_os("GGRS_REFERENCE_DIR")
        .map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference"),
            PathBuf::from,
        )
        .join("chatglm6b-v1")
}

/// Converts the tiny checkpoint into `dir` and writes `dir/tiny-glm1-chat.gguf`: the same
/// metadata and tensors plus the made-up vocabulary (`▁t{i}` for every other id, the
/// ChatGLM specials 990–994 as control tokens). Returns its path.
pub fn tiny_glm1_with_vocab(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let plain = dir.join("tiny-glm1-f32.gguf");
    let opts = ConvertOptions {
        outtype: OutType::F32,
        ..Default::default()
    };
    convert_hf_dir(&ref_dir().join("tiny_model"), &plain, &opts)
        .unwrap_or_else(|e| panic!("converting the tiny v1 checkpoint: {e}"));
    let src = GgufFile::open(&plain).unwrap();

    let mut texts: Vec<String> = (0..1000).map(|i| format!("▁t{i}")).collect();
    let mut kinds = vec![1i32; 1000];
    texts[0] = "<unk>".into();
    kinds[0] = 2;
    for (id, t) in USER_DEFINED {
        texts[id as usize] = t.into();
        kinds[id as usize] = 4;
    }
    for (k, p) in PIECES.iter().enumerate() {
        texts[PIECE_BASE as usize + k] = (*p).into();
    }
    let specials = ["[gMASK]", "<sop>", "<eop>", "[MASK]", "<pad>"];
    for (k, t) in specials.iter().enumerate() {
        texts[990 + k] = (*t).into();
        kinds[990 + k] = 3;
    }

    let mut w = GgufWriter::new();
    for (key, v) in src.metadata() {
        w.add_kv(key.clone(), v.clone()).unwrap();
    }
    let strings = texts.into_iter().map(Value::String).collect();
    w.add_kv("tokenizer.ggml.model", "llama").unwrap();
    w.add_kv("tokenizer.ggml.tokens", Value::Array(strings))
        .unwrap();
    let kinds = kinds.into_iter().map(Value::I32).collect();
    w.add_kv("tokenizer.ggml.token_type", Value::Array(kinds))
        .unwrap();
    let zeros = vec![Value::F32(0.0); 1000];
    w.add_kv("tokenizer.ggml.scores", Value::Array(zeros))
        .unwrap();
    w.add_kv("tokenizer.ggml.add_bos_token", false).unwrap();
    for t in src.tensors() {
        w.add_tensor_info(t.name.clone(), t.dtype, &t.ne[..t.n_dims])
            .unwrap();
    }
    let out = dir.join("tiny-glm1-chat.gguf");
    w.write_to_path(&out, |info, o| {
        let same = src.tensors().iter().find(|t| t.name == info.name);
        // Every tensor written was declared from `src` above.
        o.write_all(src.tensor_data(same.expect("declared from src")))
    })
    .unwrap();
    out
}

/// The official ChatGLM-6B `chat()` prompt, spelled out: the question alone without
/// history, else one `[Round i]` block per past turn and one for the question.
pub fn official_prompt(history: &[(&str, &str)], query: &str) -> String {
    if history.is_empty() {
        return query.to_string();
    }
    let mut p = String::new();
    let mut round = 0;
    for (q, r) in history {
        p.push_str(&format!("[Round {round}]\n问：{q}\n答：{r}\n"));
        round += 1;
    }
    p + &format!("[Round {round}]\n问：{query}\n答：")
}

/// The official tokenizer on the made-up vocabulary: newline → `<n>`, tab → `<|tab|>`, a
/// run of 2 or 3 spaces → `<|blank_N|>`, then SentencePiece (one `▁` before the whole text,
/// spaces as `▁`, user-defined tokens matched as they are, the longest piece otherwise),
/// then `[gMASK] <sop>`. Panics on a character the vocabulary cannot spell.
pub fn official_ids(text: &str) -> Vec<u32> {
    // The official `_preprocess`.
    let mut pre = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == ' ' {
            let run = chars[i..].iter().take_while(|&&x| x == ' ').count();
            assert!(run <= 3, "the made-up vocabulary has blanks up to 3");
            if run == 1 {
                pre.push(' ');
            } else {
                pre.push_str(&format!("<|blank_{run}|>"));
            }
            i += run;
            continue;
        }
        match c {
            '\n' => pre.push_str("<n>"),
            '\t' => pre.push_str("<|tab|>"),
            _ => pre.push(c),
        }
        i += 1;
    }
    // SentencePiece: the dummy prefix, spaces as ▁.
    let norm = format!("▁{}", pre.replace(' ', "▁"));
    let mut ids = Vec::new();
    let mut rest = norm.as_str();
    'outer: while !rest.is_empty() {
        for (id, t) in USER_DEFINED {
            if let Some(r) = rest.strip_prefix(t) {
                ids.push(id);
                rest = r;
                continue 'outer;
            }
        }
        let best = PIECES
            .iter()
            .enumerate()
            .filter(|(_, p)| rest.starts_with(**p))
            .max_by_key(|(_, p)| p.len());
        let (k, p) = best.unwrap_or_else(|| panic!("no piece for {rest:?}"));
        ids.push(PIECE_BASE + k as u32);
        rest = &rest[p.len()..];
    }
    ids.extend([GMASK, SOP]);
    ids
}
