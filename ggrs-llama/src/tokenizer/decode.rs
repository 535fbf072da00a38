//! From token ids back to text: pieces, whole-sequence decoding, and a streaming decoder.

use super::error::TokenizerError;
use super::unicode::char_to_byte;
use super::vocab::{TokenType, Vocab, VocabKind};
use super::Tokenizer;

/// The bytes of token `id`, as llama.cpp's `llama_token_to_piece`:
/// - normal tokens: their text, with `▁` as a space (SentencePiece) or with GPT-2's byte
///   characters turned back into bytes (BPE; a character outside that map is written as
///   llama.cpp writes it, `[UNK_BYTE_0x…]`);
/// - byte tokens (SentencePiece `<0xNN>`): that byte;
/// - user-defined tokens: their text;
/// - control and unknown tokens: their text if `special`, else nothing;
/// - unused and undefined tokens: nothing.
///
/// With `lstrip`, one leading space is dropped.
pub(crate) fn piece(
    vocab: &Vocab,
    id: u32,
    special: bool,
    lstrip: bool,
) -> Result<Vec<u8>, TokenizerError> {
    let token = vocab.token(id).ok_or(TokenizerError::TokenOutOfRange {
        id,
        n_tokens: vocab.len(),
    })?;
    let text = token.text.as_str();
    let mut bytes = match (token.ty, vocab.kind) {
        (TokenType::Control | TokenType::Unknown, _) if !special => Vec::new(),
        (TokenType::Control | TokenType::Unknown | TokenType::UserDefined, _) => {
            text.as_bytes().to_vec()
        }
        (TokenType::Normal, VocabKind::Spm | VocabKind::Wpm) => text.replace('▁', " ").into_bytes(),
        (TokenType::Normal, VocabKind::Bpe) if vocab.escape_whitespaces => {
            text.replace('▁', " ").into_bytes()
        }
        (TokenType::Normal, VocabKind::Bpe) => {
            let mut out = Vec::with_capacity(text.len());
            for c in text.chars() {
                match char_to_byte(c) {
                    Some(b) => out.push(b),
                    None => {
                        // llama.cpp's marker for a character outside the byte map.
                        out.extend_from_slice(b"[UNK_BYTE_0x");
                        for b in c.encode_utf8(&mut [0; 4]).bytes() {
                            out.extend_from_slice(format!("{b:02x}").as_bytes());
                        }
                        out.extend_from_slice(text.as_bytes());
                        out.push(b']');
                    }
                }
            }
            out
        }
        // llama.cpp reads `<0xXX>` byte tokens the same way for both (Gemma 4's BPE has them).
        (TokenType::Byte, _) => match spm_byte_value(text) {
            Some(b) => vec![b],
            None => Vec::new(),
        },
        (TokenType::Unused | TokenType::Undefined, _) => Vec::new(),
    };
    if lstrip && bytes.first() == Some(&b' ') {
        bytes.remove(0);
    }
    Ok(bytes)
}

/// The byte of a SentencePiece byte token `<0xNN>`.
fn spm_byte_value(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}

/// llama.cpp's `clean_up_tokenization_spaces`: drops the space before `?`, `!`, `.`, `,`,
/// the spaces around a lone `'`, and the space before `'s`, `'m`, `'re`, `'ve`.
pub(crate) fn clean_spaces(text: Vec<u8>) -> Vec<u8> {
    if text.is_empty() {
        return text;
    }
    // Pass 1: " ?", " !", " .", " ,".
    let mut out = vec![text[0]];
    for i in 1..text.len() {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            out.pop();
        }
        out.push(x);
    }
    // Pass 2: " ' " becomes "'". The space after is dropped and no longer counts as the
    // character before the next one.
    let mut text = out;
    let mut out = vec![text[0]];
    let mut i = 1;
    while i < text.len() {
        let x = text[i];
        if x == b'\'' && i + 1 < text.len() && text[i - 1] == b' ' && text[i + 1] == b' ' {
            out.pop();
            text[i + 1] = 0;
            out.push(x);
            i += 2;
            continue;
        }
        out.push(x);
        i += 1;
    }
    // Pass 3: " 's", " 'm", " 're", " 've" lose their space (" 't", " 'd", " 'll" keep it).
    let text = out;
    let mut out = vec![text[0]];
    for i in 1..text.len() {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < text.len() {
            let x1 = text[i + 1];
            let drop = match x1 {
                b's' | b'm' => true,
                b't' | b'd' => false,
                _ => i + 2 < text.len() && matches!((x1, text[i + 2]), (b'r', b'e') | (b'v', b'e')),
            };
            if drop {
                out.pop();
            }
        }
        out.push(x);
    }
    out
}

/// Decodes token ids one at a time, yielding only complete UTF-8 text.
///
/// A character split across tokens (SentencePiece byte fallback, or a BPE token ending
/// inside a multi-byte character) is held back until its last byte arrives. Invalid bytes
/// become U+FFFD exactly as [`String::from_utf8_lossy`] would replace them in the whole
/// byte stream, so the concatenated output equals [`Tokenizer::decode`]'s for the same ids
/// (except that the streaming decoder does not apply BPE `clean_spaces`, which needs the
/// whole text; the SentencePiece and Qwen2 vocabularies do not use it).
///
/// Made by [`Tokenizer::decoder`] (start of a sequence) or [`Tokenizer::continuation_decoder`]
/// (text that follows earlier tokens, such as generated tokens after a prompt).
#[derive(Debug, Clone)]
pub struct Decoder<'t> {
    tokenizer: &'t Tokenizer,
    state: DecodeState,
}

impl<'t> Decoder<'t> {
    pub(crate) fn new(tokenizer: &'t Tokenizer, strip_space: bool, special: bool) -> Decoder<'t> {
        Decoder {
            tokenizer,
            state: DecodeState::new(strip_space, special),
        }
    }

    /// Adds token `id` and returns the text completed by it (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.state.push(self.tokenizer, id)
    }

    /// Bytes held back, waiting for the rest of a character.
    pub fn pending(&self) -> &[u8] {
        self.state.pending()
    }

    /// Ends the stream: returns the held-back bytes, an incomplete character becoming U+FFFD.
    pub fn finish(self) -> String {
        self.state.finish()
    }

    /// The decoder's state without the tokenizer borrow, for a stream that outlives it (see
    /// [`DecodeState`]).
    pub fn into_state(self) -> DecodeState {
        self.state
    }
}

/// What a [`Decoder`] keeps between tokens, without the tokenizer: for streams that live
/// longer than a borrow of it (a server's slots, which outlive each step). Each call takes
/// the tokenizer the state was made for.
#[derive(Debug, Clone, Default)]
pub struct DecodeState {
    pending: Vec<u8>,
    strip_space: bool,
    special: bool,
}

impl DecodeState {
    fn new(strip_space: bool, special: bool) -> DecodeState {
        DecodeState {
            pending: Vec::new(),
            strip_space,
            special,
        }
    }

    /// Adds token `id` (of `tokenizer`, the one the state was made for) and returns the text
    /// completed by it (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String, TokenizerError> {
        let bytes = piece(tokenizer.vocab(), id, self.special, self.strip_space)?;
        self.strip_space = false;
        self.pending.extend_from_slice(&bytes);
        Ok(self.take_complete())
    }

    /// Bytes held back, waiting for the rest of a character.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Ends the stream: returns the held-back bytes, an incomplete character becoming U+FFFD.
    pub fn finish(mut self) -> String {
        let rest = std::mem::take(&mut self.pending);
        String::from_utf8_lossy(&rest).into_owned()
    }

    /// Removes and returns the longest prefix of `pending` that is complete: valid text, with
    /// invalid sequences replaced, stopping before a sequence that could still be completed.
    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut consumed = 0;
        loop {
            let rest = &self.pending[consumed..];
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    consumed = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // `rest[..valid]` is valid UTF-8 by the definition of `valid_up_to`.
                    out.push_str(&String::from_utf8_lossy(&rest[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            consumed += valid + bad;
                        }
                        None => {
                            // An incomplete character at the end: wait for more bytes.
                            consumed += valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..consumed);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_spaces_passes() {
        let c = |s: &str| String::from_utf8(clean_spaces(s.as_bytes().to_vec())).unwrap();
        assert_eq!(c("Hello , world !"), "Hello, world!");
        assert_eq!(c("a ' b"), "a'b");
        assert_eq!(
            c("it 's I 'm we 're you 've don 't I 'd we 'll"),
            "it's I'm we're you've don 't I 'd we 'll"
        );
        assert_eq!(c(""), "");
        assert_eq!(c(" ."), ".");
    }

    #[test]
    fn spm_byte_values() {
        assert_eq!(spm_byte_value("<0x0A>"), Some(10));
        assert_eq!(spm_byte_value("<0xE2>"), Some(0xe2));
        assert_eq!(spm_byte_value("<0x>"), None);
    }
}
