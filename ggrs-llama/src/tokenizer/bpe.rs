//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`), as llama.cpp's `llm_tokenizer_bpe`.
//!
//! The pre-tokenizer cuts the text into words; each word's bytes are written with GPT-2's
//! byte map (a space becomes `Ġ`…) and start as one symbol per character. (SentencePiece-style
//! BPE, Gemma 4's `tokenizer.ggml.model = "gemma4"`, writes spaces as `▁` before the cut and
//! keeps the words' UTF-8 as it is; what has no token becomes `<0xXX>` byte tokens.) The neighbouring
//! pair with the lowest merge rank is merged first (ties: the leftmost), until no pair has a
//! rule. Each final symbol is a token; one that is not (it can only happen with a vocabulary
//! that lacks some byte characters) is emitted byte by byte where those exist, and dropped
//! otherwise, as llama.cpp does.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::pretokenize::PreTokenizer;
use super::unicode::BYTE_TO_CHAR;
use super::vocab::Vocab;

/// A run of the word: `word[start..start + len]`, linked to its neighbours.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    start: usize,
    /// Length in bytes; 0 once merged into its left neighbour.
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of symbols `left` and `right` (its right neighbour).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bigram {
    rank: u32,
    left: usize,
    right: usize,
    /// Byte length of the merged text, to recognise stale candidates.
    size: usize,
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bigram {
    /// The max-heap pops the lowest rank first, and among equal ranks the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Appends the tokens of `text`, cut into words by `pre`, to `out`.
pub(crate) fn tokenize(vocab: &Vocab, pre: PreTokenizer, text: &str, out: &mut Vec<u32>) {
    // SentencePiece-style BPE (Gemma 4) writes spaces as `▁` before cutting words.
    let escaped;
    let text = if vocab.escape_whitespaces {
        escaped = text.replace(' ', "\u{2581}");
        escaped.as_str()
    } else {
        text
    };
    let mut word = String::new();
    let mut symbols: Vec<Symbol> = Vec::new();
    let mut queue: BinaryHeap<Bigram> = BinaryHeap::new();
    for raw in pre.split(text) {
        word.clear();
        if vocab.byte_encode {
            word.extend(raw.bytes().map(|b| BYTE_TO_CHAR[b as usize]));
        } else {
            word.push_str(raw);
        }
        let whole =
            vocab.ignore_merges || (vocab.newline_words_whole && raw.bytes().all(|b| b == b'\n'));
        if whole {
            if let Some(id) = vocab.token_id(&word) {
                out.push(id);
                continue;
            }
        }
        symbols.clear();
        for (i, (start, c)) in word.char_indices().enumerate() {
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: Some(i + 1),
            });
        }
        if let Some(last) = symbols.last_mut() {
            last.next = None;
        }

        let try_add = |symbols: &[Symbol],
                       queue: &mut BinaryHeap<Bigram>,
                       left: Option<usize>,
                       right: Option<usize>| {
            let (Some(left), Some(right)) = (left, right) else {
                return;
            };
            let (l, r) = (symbols[left], symbols[right]);
            let left_text = &word[l.start..l.start + l.len];
            let right_text = &word[r.start..r.start + r.len];
            if let Some(rank) = vocab.merge_rank(left_text, right_text) {
                queue.push(Bigram {
                    rank,
                    left,
                    right,
                    size: l.len + r.len,
                });
            }
        };
        queue.clear();
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

        for s in symbols.iter().filter(|s| s.len > 0) {
            let piece = &word[s.start..s.start + s.len];
            match vocab.token_id(piece) {
                Some(id) => out.push(id),
                None if vocab.byte_encode => {
                    // llama.cpp looks each byte up as a one-byte string: only ASCII bytes can
                    // be tokens that way.
                    for b in piece.bytes().filter(u8::is_ascii) {
                        if let Some(id) = vocab.token_id(char::from(b).encode_utf8(&mut [0; 4])) {
                            out.push(id);
                        }
                    }
                }
                None => {
                    // Raw UTF-8: each byte as its `<0xXX>` token, where there is one.
                    for b in piece.bytes() {
                        if let Some(id) = vocab.token_id(&format!("<0x{b:02X}>")) {
                            out.push(id);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::vocab::VocabParts;
    use super::*;

    /// A vocabulary with every byte character, plus `extra` tokens and `merges`.
    fn vocab(extra: &[&str], merges: &[&str], pre: &str) -> Vocab {
        let mut tokens: Vec<String> = BYTE_TO_CHAR.iter().map(|c| c.to_string()).collect();
        tokens.extend(extra.iter().map(|s| s.to_string()));
        Vocab::from_parts(VocabParts {
            model: "gpt2".into(),
            pre: Some(pre.into()),
            tokens,
            merges: merges.iter().map(|s| s.to_string()).collect(),
            ..VocabParts::default()
        })
        .unwrap()
    }

    fn texts(v: &Vocab, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let pre = v
            .pre_tokenizer()
            .expect("a BPE vocabulary has a pre-tokenizer");
        tokenize(v, pre, text, &mut out);
        out.iter()
            .map(|&id| v.tokens[id as usize].text.clone())
            .collect()
    }

    #[test]
    fn lowest_rank_merges_first() {
        let v = vocab(&["ab", "bc", "abc"], &["b c", "a b", "a bc"], "qwen2");
        // "b c" has rank 0: b+c first, then "a bc" → abc.
        assert_eq!(texts(&v, "abc"), vec!["abc"]);
        let v = vocab(&["ab", "bc", "abc"], &["a b", "b c", "a bc"], "qwen2");
        // "a b" first; then no rule for "ab c".
        assert_eq!(texts(&v, "abc"), vec!["ab", "c"]);
    }

    #[test]
    fn bytes_are_mapped_and_words_split() {
        let v = vocab(&["Ġw", "Ġwo"], &["Ġ w", "Ġw o"], "qwen2");
        // " wo" is one word; "é" is two bytes, each its own character.
        assert_eq!(texts(&v, "é wo"), vec!["Ã", "©", "Ġwo"]);
    }

    #[test]
    fn ignore_merges_takes_whole_words() {
        // With llama3's flags, a word that is a token is taken whole even without rules.
        let v = vocab(&["Ġhello"], &[], "llama-bpe");
        assert_eq!(texts(&v, " hello"), vec!["Ġhello"]);
        let v = vocab(&["Ġhello"], &[], "qwen2");
        assert_eq!(texts(&v, " hello"), vec!["Ġ", "h", "e", "l", "l", "o"]);
    }
}
