//! SentencePiece (`tokenizer.ggml.model = "llama"`), as llama.cpp's `llm_tokenizer_spm`.
//!
//! The text (spaces already written as `▁`) starts as one symbol per character. Every pair
//! of neighbouring symbols whose concatenation is a token is a candidate; the candidate whose
//! token has the highest score is merged first (ties: the leftmost), new candidates with the
//! merged symbol's neighbours are added, and stale candidates (one side already merged) are
//! skipped. Each final symbol is a token, or — a single character outside the vocabulary —
//! becomes its UTF-8 bytes as `<0xNN>` tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::error::TokenizerError;
use super::vocab::Vocab;

/// A run of the text: `text[start..start + len]`, linked to its neighbours.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    start: usize,
    /// Length in bytes; 0 once merged into its left neighbour.
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of symbols `left` and its right neighbour `right`.
#[derive(Debug, Clone, Copy)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    /// Byte length of the merged text, to recognise stale candidates.
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bigram {
    /// The max-heap pops the highest score first, and among equal scores the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        // Scores are never NaN (the vocabulary refuses them), so `partial_cmp` is total here;
        // like C++'s `<`, it treats -0 and +0 as equal.
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Appends the tokens of `text` (spaces already escaped as `▁`) to `out`.
pub(crate) fn tokenize(
    vocab: &Vocab,
    text: &str,
    out: &mut Vec<u32>,
) -> Result<(), TokenizerError> {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        symbols.push(Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: Some(i + 1),
        });
    }
    let Some(last) = symbols.last_mut() else {
        return Ok(());
    };
    last.next = None;

    let mut queue = BinaryHeap::new();
    let try_add = |symbols: &[Symbol],
                   queue: &mut BinaryHeap<Bigram>,
                   left: Option<usize>,
                   right: Option<usize>| {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let start = symbols[left].start;
        let size = symbols[left].len + symbols[right].len;
        if let Some(id) = vocab.token_id(&text[start..start + size]) {
            queue.push(Bigram {
                score: vocab.tokens[id as usize].score,
                left,
                right,
                size,
            });
        }
    };
    for i in 1..symbols.len() {
        try_add(&symbols, &mut queue, Some(i - 1), Some(i));
    }

    while let Some(b) = queue.pop() {
        let (l, r) = (symbols[b.left], symbols[b.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue; // one side has been merged since
        }
        symbols[b.left].len += r.len;
        symbols[b.right].len = 0;
        symbols[b.left].next = r.next;
        if let Some(next) = r.next {
            symbols[next].prev = Some(b.left);
        }
        try_add(&symbols, &mut queue, l.prev, Some(b.left));
        try_add(&symbols, &mut queue, Some(b.left), r.next);
    }

    let mut at = Some(0);
    while let Some(i) = at {
        let s = symbols[i];
        let piece = &text[s.start..s.start + s.len];
        match vocab.token_id(piece) {
            Some(id) => out.push(id),
            // Only a single character can be missing: merged symbols are tokens.
            None => {
                for &byte in piece.as_bytes() {
                    out.push(byte_token(vocab, byte)?);
                }
            }
        }
        at = s.next;
    }
    Ok(())
}

/// The token for one byte: `<0xNN>`, else the byte itself as a one-character token (ASCII
/// only), else the unknown token.
pub(crate) fn byte_token(vocab: &Vocab, byte: u8) -> Result<u32, TokenizerError> {
    if let Some(id) = vocab.token_id(&format!("<0x{byte:02X}>")) {
        return Ok(id);
    }
    if byte.is_ascii() {
        if let Some(id) = vocab.token_id(char::from(byte).encode_utf8(&mut [0; 4])) {
            return Ok(id);
        }
    }
    vocab
        .special
        .unk
        .ok_or(TokenizerError::NoByteToken { byte })
}

#[cfg(test)]
mod tests {
    use super::super::vocab::VocabParts;
    use super::*;

    fn vocab(tokens: &[(&str, f32)]) -> Vocab {
        let mut parts = VocabParts {
            model: "llama".into(),
            tokens: vec!["<unk>".into(), "<s>".into(), "</s>".into()],
            scores: Some(vec![0.0; 3]),
            token_types: Some(vec![2, 3, 3]),
            ..VocabParts::default()
        };
        for b in 0..=255u8 {
            parts.tokens.push(format!("<0x{b:02X}>"));
            parts.scores.as_mut().unwrap().push(0.0);
            parts.token_types.as_mut().unwrap().push(6);
        }
        for (t, s) in tokens {
            parts.tokens.push((*t).into());
            parts.scores.as_mut().unwrap().push(*s);
            parts.token_types.as_mut().unwrap().push(1);
        }
        Vocab::from_parts(parts).unwrap()
    }

    fn ids(v: &Vocab, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        tokenize(v, text, &mut out).unwrap();
        out.iter()
            .map(|&id| v.tokens[id as usize].text.clone())
            .collect()
    }

    #[test]
    fn highest_score_merges_first() {
        // "abc": "ab" (score -1) and "bc" (score -2) compete; "ab" wins, then "abc" does
        // not exist, so the result is ab + c.
        let v = vocab(&[
            ("a", -5.0),
            ("b", -5.0),
            ("c", -5.0),
            ("ab", -1.0),
            ("bc", -2.0),
        ]);
        assert_eq!(ids(&v, "abc"), vec!["ab", "c"]);
        // With "bc" better, b + c merge first.
        let v = vocab(&[
            ("a", -5.0),
            ("b", -5.0),
            ("c", -5.0),
            ("ab", -3.0),
            ("bc", -2.0),
        ]);
        assert_eq!(ids(&v, "abc"), vec!["a", "bc"]);
        // Ties go to the leftmost pair: "aaa" → "aa" + "a".
        let v = vocab(&[("a", -5.0), ("aa", -1.0)]);
        assert_eq!(ids(&v, "aaa"), vec!["aa", "a"]);
        assert_eq!(ids(&v, "aaaa"), vec!["aa", "aa"]);
    }

    #[test]
    fn merges_need_intermediate_tokens() {
        // "abc" is a token but no pair inside it is, so it cannot form.
        let v = vocab(&[("a", -5.0), ("b", -5.0), ("c", -5.0), ("abc", 0.0)]);
        assert_eq!(ids(&v, "abc"), vec!["a", "b", "c"]);
        let v = vocab(&[
            ("a", -5.0),
            ("b", -5.0),
            ("c", -5.0),
            ("ab", -1.0),
            ("abc", 0.0),
        ]);
        assert_eq!(ids(&v, "abc"), vec!["abc"]);
    }

    #[test]
    fn byte_fallback() {
        let v = vocab(&[("▁", -1.0), ("x", -1.0)]);
        // 'é' is C3 A9 in UTF-8.
        assert_eq!(ids(&v, "▁éx"), vec!["▁", "<0xC3>", "<0xA9>", "x"]);
    }
}
