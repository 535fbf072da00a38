//! The tokenizers of the ChatGLM family: SentencePiece with pre `chatglm-spm` (ChatGLM3) and
//! byte-level BPE with pre `chatglm-bpe` (GLM-4); their special tokens (`[gMASK]`, `sop`,
//! `<|user|>`…) parsed from text, and stopping on `<|user|>` / `<|observation|>`.
//! The vocabularies are small ones built here; the expected ids are worked out by hand.

use crate::common;

use common::GLM3_SPECIALS;
use ggrs_llama::tokenizer::{Tokenizer, Vocab, VocabParts};

/// A ChatGLM3-like SentencePiece vocabulary: <unk> <s> </s>, the byte tokens, a few pieces
/// and the ChatGLM3 control tokens, as llama.cpp's converter writes them.
fn glm3(pre: Option<&str>) -> Tokenizer {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2i64, 3, 3];
    let mut scores = vec![0f32; 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (t, s) in [
        ("▁", -1.0),
        ("h", -2.0),
        ("i", -2.0),
        ("▁h", -1.5),
        ("▁hi", -0.5),
    ] {
        tokens.push(t.into());
        types.push(1);
        scores.push(s);
    }
    for t in GLM3_SPECIALS {
        tokens.push(t.into());
        types.push(3);
        scores.push(0.0);
    }
    let parts = VocabParts {
        model: "llama".into(),
        pre: pre.map(Into::into),
        tokens,
        scores: Some(scores),
        token_types: Some(types),
        add_bos: Some(false),
        ..VocabParts::default()
    };
    Tokenizer::new(Vocab::from_parts(parts).expect("valid vocabulary"))
}

fn id(t: &Tokenizer, s: &str) -> u32 {
    t.vocab()
        .token_id(s)
        .unwrap_or_else(|| panic!("no token {s:?}"))
}

#[test]
fn chatglm_spm_special_tokens_are_parsed() {
    let t = glm3(Some("chatglm-spm"));
    assert_eq!(t.vocab().pre_name(), Some("chatglm-spm"));
    let text = "[gMASK]sop<|user|>\n hi<|assistant|>";
    // Specials cut out; the text after `<|user|>` gets SentencePiece's space prefix:
    // "▁\n▁hi" → ▁, <0x0A> (no piece for a newline), ▁hi.
    let want = vec![
        id(&t, "[gMASK]"),
        id(&t, "sop"),
        id(&t, "<|user|>"),
        id(&t, "▁"),
        3 + 0x0A,
        id(&t, "▁hi"),
        id(&t, "<|assistant|>"),
    ];
    assert_eq!(t.encode(text, true, true).unwrap(), want, "no BOS is added");
    // Without parse_special the control texts are plain text.
    let plain = t.encode(text, false, false).unwrap();
    for s in GLM3_SPECIALS {
        assert!(
            !plain.contains(&id(&t, s)),
            "{s} parsed without parse_special"
        );
    }
    // Decoding shows the control tokens only when asked.
    // (The first token, `[gMASK]`, takes the one-space strip and shows nothing.)
    assert_eq!(t.decode(&want).unwrap(), " \n hi");
    assert_eq!(
        t.decode_with_special(&want).unwrap(),
        "[gMASK]sop<|user|> \n hi<|assistant|>"
    );
}

#[test]
fn chatglm_pre_types_stop_on_user_and_observation() {
    let t = glm3(Some("chatglm-spm"));
    for s in ["<|user|>", "<|observation|>", "</s>"] {
        assert!(t.is_eog(id(&t, s)), "{s} ends generation");
    }
    for s in ["<|assistant|>", "<|system|>", "[gMASK]", "sop"] {
        assert!(!t.is_eog(id(&t, s)), "{s} does not end generation");
    }
    // Other vocabularies with such texts keep llama.cpp's end-of-generation set.
    let other = glm3(None);
    assert!(!other.is_eog(id(&other, "<|user|>")));
}

/// GPT-2's byte map: printable bytes stand for themselves, the others take the code points
/// from U+0100 on, in byte order.
fn byte_char(b: u8) -> char {
    let printable = |x: u8| matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return b as char;
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + n).expect("U+0100 + n < U+0200 is a valid code point")
}

/// A GLM-4-like byte-level BPE vocabulary: the 256 byte characters, a few merges, and the
/// GLM-4 control tokens; EOS `<|endoftext|>`, no BOS given.
fn glm4(pre: &str) -> Tokenizer {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let mut types = vec![1i64; 256];
    for t in ["12", "123", "45", "hi"] {
        tokens.push(t.into());
        types.push(1);
    }
    let specials = [
        "<|endoftext|>",
        "[MASK]",
        "[gMASK]",
        "[sMASK]",
        "<sop>",
        "<eop>",
        "<|system|>",
        "<|user|>",
        "<|assistant|>",
        "<|observation|>",
    ];
    for t in specials {
        tokens.push(t.into());
        types.push(3);
    }
    let eos = 256 + 4;
    let mut parts = VocabParts {
        model: "gpt2".into(),
        pre: Some(pre.into()),
        tokens,
        token_types: Some(types),
        merges: vec!["1 2".into(), "12 3".into(), "4 5".into(), "h i".into()],
        ..VocabParts::default()
    };
    parts.special.eos = Some(eos);
    Tokenizer::new(Vocab::from_parts(parts).expect("valid vocabulary"))
}

#[test]
fn chatglm_bpe_pre_tokenizer() {
    for pre in ["chatglm-bpe", "glm4"] {
        let t = glm4(pre);
        // No BOS by default (llama.cpp clears it for these names) and none added.
        assert_eq!(t.bos(), None, "{pre}");
        assert!(!t.vocab().add_bos());
        assert_eq!(t.eos(), Some(id(&t, "<|endoftext|>")));
        // LLaMA 3's split: numbers in groups of up to three digits, so "12345" is
        // "123" + "45" (single digits, as Qwen2 splits, would give five tokens).
        assert_eq!(
            t.encode("12345", true, false).unwrap(),
            vec![id(&t, "123"), id(&t, "45")]
        );
        // The GLM-4 prompt prefix; "\nhi" splits into "\n" (Ċ) and "hi".
        let ids = t.encode("[gMASK]<sop><|user|>\nhi", true, true).unwrap();
        assert_eq!(
            ids,
            vec![
                id(&t, "[gMASK]"),
                id(&t, "<sop>"),
                id(&t, "<|user|>"),
                id(&t, "\u{10a}"),
                id(&t, "hi"),
            ]
        );
        for s in ["<|user|>", "<|observation|>", "<|endoftext|>"] {
            assert!(t.is_eog(id(&t, s)), "{pre}: {s} ends generation");
        }
        assert!(!t.is_eog(id(&t, "<|assistant|>")));
    }
}
