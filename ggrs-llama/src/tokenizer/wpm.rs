//! WordPiece (`tokenizer.ggml.model` = `bert`), as llama.cpp's WPM tokenizer.
//!
//! The text is split into words. With the normaliser's `strip_accents` (the default), every
//! code point is first replaced by the first code point of its canonical decomposition (NFD:
//! `é` → `e`, as llama.cpp's one-to-one table) and accent marks (`\p{M}`) are dropped; with
//! `lowercase` (the default) it is lower-cased. Whitespace ends a word; NUL, U+FFFD and
//! control/format/unassigned code points are dropped; punctuation, ASCII symbols and Han
//! characters are words of their own. Each word, prefixed with `▁` (the converter writes
//! word-initial pieces as `▁piece` and `##piece` continuations as `piece`), is cut greedily
//! into the longest tokens from left to right; a word with a part no token covers becomes
//! the unknown token.

use unicode_general_category::{get_general_category, GeneralCategory as Gc};
use unicode_normalization::char::decompose_canonical;

use super::error::TokenizerError;
use super::unicode::{class_of, is_han};
use super::vocab::{Normalizer, Vocab};

/// The words of `text` under `norm` (see the [module docs](self)).
pub(crate) fn words(text: &str, norm: Normalizer) -> Vec<String> {
    let mut words: Vec<String> = vec![String::new()];
    for c in text.chars() {
        let c = match norm.strip_accents {
            true => {
                let mut first = None;
                decompose_canonical(c, |d| {
                    first.get_or_insert(d);
                });
                first.unwrap_or(c)
            }
            false => c,
        };
        let class = class_of(c);
        if class.whitespace() {
            if !words.last().is_some_and(|w| w.is_empty()) {
                words.push(String::new());
            }
            continue;
        }
        if c == '\0' || c == '\u{FFFD}' || is_other_category(c) {
            continue;
        }
        if norm.strip_accents && class.mark() {
            continue;
        }
        // The first character of the lower case, as llama.cpp's one-to-one table.
        let lower = match norm.lowercase {
            true => c.to_lowercase().next().unwrap_or(c),
            false => c,
        };
        if class.punctuation() || (c.is_ascii() && class.symbol()) || is_chinese(c) {
            if !words.last().is_some_and(|w| w.is_empty()) {
                words.push(String::new());
            }
            if let Some(w) = words.last_mut() {
                w.push(lower);
            }
            words.push(String::new());
        } else if let Some(w) = words.last_mut() {
            w.push(lower);
        }
    }
    words.retain(|w| !w.is_empty());
    words
}

/// Unicode's "C" categories (control, format, surrogate, private use, unassigned), which
/// llama.cpp's tables flag as control characters.
fn is_other_category(c: char) -> bool {
    matches!(
        get_general_category(c),
        Gc::Control | Gc::Format | Gc::Surrogate | Gc::PrivateUse | Gc::Unassigned
    )
}

/// llama.cpp's `is_chinese_char` for WordPiece: the CJK ideograph blocks.
fn is_chinese(c: char) -> bool {
    is_han(c) || matches!(c as u32, 0x2b740..=0x2b81f | 0x2f800..=0x2fa1f)
}

/// Appends the tokens of `text` to `out`.
pub(crate) fn tokenize(
    vocab: &Vocab,
    text: &str,
    out: &mut Vec<u32>,
) -> Result<(), TokenizerError> {
    let unk = vocab
        .special
        .unk
        .ok_or(TokenizerError::MissingSpecialToken {
            which: "UNK",
            flag: "a WordPiece vocabulary",
            key: super::vocab::K_UNK,
        })?;
    let max_len = vocab.max_token_len;
    for word in words(text, vocab.normalizer) {
        let word = format!("▁{word}");
        let bytes = word.as_bytes();
        let n = bytes.len();
        let start = out.len();
        let mut i = 0;
        while i < n {
            let mut matched = None;
            let mut j = n.min(i + max_len + 1);
            while j > i {
                if let Ok(piece) = std::str::from_utf8(&bytes[i..j]) {
                    if let Some(&id) = vocab.token_to_id.get(piece) {
                        matched = Some((id, j));
                        break;
                    }
                }
                j -= 1;
            }
            match matched {
                Some((id, end)) => {
                    out.push(id);
                    i = end;
                }
                None => {
                    out.truncate(start);
                    break;
                }
            }
        }
        if out.len() == start {
            out.push(unk);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::words;
    use crate::tokenizer::vocab::Normalizer;

    #[test]
    fn words_split_as_bert() {
        let w = |t| words(t, Normalizer::default());
        assert_eq!(w("Héllo, WORLD!  x"), ["hello", ",", "world", "!", "x"]);
        assert_eq!(w("a$b 中文"), ["a", "$", "b", "中", "文"]);
        assert_eq!(w("tab\there\u{7}"), ["tab", "here"]);
        assert!(w("   ").is_empty());
        // Accent marks of any kind go with the accents (llama.cpp's `\p{M}`): a combining
        // acute after its letter, a Devanagari vowel sign (Mc).
        assert_eq!(w("e\u{301}te \u{915}\u{93e}"), ["ete", "\u{915}"]);
    }

    /// A cased vocabulary (`normalizer.lowercase` false, so `strip_accents` false unless
    /// the file says otherwise) keeps case and accents, as llama.cpp 0c1e570 does.
    #[test]
    fn cased_vocabularies_keep_case_and_accents() {
        let cased = Normalizer::from_keys(Some(false), None);
        assert_eq!(
            cased,
            Normalizer {
                lowercase: false,
                strip_accents: false
            }
        );
        assert_eq!(words("Héllo, WORLD", cased), ["Héllo", ",", "WORLD"]);
        let strip = Normalizer::from_keys(Some(false), Some(true));
        assert_eq!(words("Héllo", strip), ["Hello"]);
    }
}
