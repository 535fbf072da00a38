//! BPE pre-tokenizers: how text is cut into words before merges are applied.
//!
//! llama.cpp picks a list of regular expressions by the GGUF key `tokenizer.ggml.pre` and
//! applies them in turn: each one cuts every piece left by the previous one, and text between
//! two matches (a "gap") becomes a piece of its own. Its most used expressions have
//! hand-written scanners in its `unicode.cpp`, the others run through `std::regex` on text
//! whose non-ASCII characters are replaced by one stand-in per category. We implement each
//! expression as a small scanner over the characters of one piece, with the semantics of a
//! backtracking regex engine (leftmost match, alternatives tried in order), and with
//! llama.cpp's character classes (see [`super::unicode`]).
//!
//! To add a pre-tokenizer: add a variant to [`PreTokenizer`], give it its stages in
//! [`PreTokenizer::stages`] and its names in [`PRE_TOKENIZER_NAMES`].

use super::unicode::{class_of, CharClass};

/// A pre-tokenizer of a byte-level BPE vocabulary, named by `tokenizer.ggml.pre`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PreTokenizer {
    /// llama.cpp's `default`: runs of punctuation, then GPT-2's expression, then runs of
    /// numbers, then groups of three ASCII digits.
    Default,
    /// GPT-2's expression:
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
    Gpt2,
    /// LLaMA 3's expression (numbers in groups of up to three digits):
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
    ///  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
    Llama3,
    /// Qwen2's expression: LLaMA 3's with single digits (`\p{N}` instead of `\p{N}{1,3}`).
    Qwen2,
    /// Qwen3.5's expression: Qwen2's with combining marks counted as letters
    /// (`[\p{L}\p{M}]+` for words, `[^\s\p{L}\p{M}\p{N}]` for the others).
    Qwen35,
    /// StarCoder's: single numbers first (`\p{N}`), then GPT-2's expression.
    StarCoder,
    /// Falcon's: runs of punctuation and symbols (backquote included), then GPT-2's
    /// expression, then groups of three ASCII digits.
    Falcon,
}

/// How a `tokenizer.ggml.pre` name configures the BPE tokenizer, as llama.cpp does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PreConfig {
    /// The splitting rules.
    pub pre: PreTokenizer,
    /// A word that is already a token is emitted whole, without merges (LLaMA 3).
    pub ignore_merges: bool,
    /// The default of `add_bos_token` when the file does not set it.
    pub add_bos: bool,
    /// Detokenizing removes spaces before punctuation (`clean_up_tokenization_spaces`).
    pub clean_spaces: bool,
    /// The model has no BOS token unless the file names one (ChatGLM 4).
    pub no_default_bos: bool,
}

const fn cfg(
    pre: PreTokenizer,
    ignore_merges: bool,
    add_bos: bool,
    clean_spaces: bool,
) -> PreConfig {
    PreConfig {
        pre,
        ignore_merges,
        add_bos,
        clean_spaces,
        no_default_bos: false,
    }
}

/// Every `tokenizer.ggml.pre` name this crate knows, with its configuration (the same as
/// llama.cpp's for that name).
pub(crate) static PRE_TOKENIZER_NAMES: &[(&str, PreConfig)] = {
    use PreTokenizer::*;
    &[
        ("default", cfg(Default, false, false, true)),
        // GPT-2's expression.
        ("gpt-2", cfg(Gpt2, false, false, true)),
        ("phi-2", cfg(Gpt2, false, false, true)),
        ("jina-es", cfg(Gpt2, false, false, true)),
        ("jina-de", cfg(Gpt2, false, false, true)),
        ("gigachat", cfg(Gpt2, false, false, true)),
        ("jina-v2-es", cfg(Gpt2, false, false, true)),
        ("jina-v2-de", cfg(Gpt2, false, false, true)),
        ("a.x-4.0", cfg(Gpt2, false, false, true)),
        ("mellum", cfg(Gpt2, false, false, true)),
        ("mpt", cfg(Gpt2, false, false, true)),
        ("olmo", cfg(Gpt2, false, false, true)),
        ("jais", cfg(Gpt2, false, false, true)),
        ("exaone4", cfg(Gpt2, false, false, true)),
        ("trillion", cfg(Gpt2, false, false, false)),
        ("granite-docling", cfg(Gpt2, false, false, false)),
        // LLaMA 3's expression.
        ("llama3", cfg(Llama3, true, true, true)),
        ("llama-v3", cfg(Llama3, true, true, true)),
        ("llama-bpe", cfg(Llama3, true, true, true)),
        ("falcon3", cfg(Llama3, true, true, true)),
        ("falcon-h1", cfg(Llama3, true, true, true)),
        ("pixtral", cfg(Llama3, true, true, true)),
        ("midm-2.0", cfg(Llama3, true, true, true)),
        ("lfm2", cfg(Llama3, true, true, true)),
        ("dbrx", cfg(Llama3, false, false, true)),
        ("smaug-bpe", cfg(Llama3, false, false, true)),
        (
            "chatglm-bpe",
            PreConfig {
                no_default_bos: true,
                ..cfg(Llama3, false, false, true)
            },
        ),
        (
            "glm4",
            PreConfig {
                no_default_bos: true,
                ..cfg(Llama3, false, false, true)
            },
        ),
        // Qwen2's expression.
        ("qwen2", cfg(Qwen2, false, false, false)),
        ("deepseek-r1-qwen", cfg(Qwen2, false, false, false)),
        ("kormo", cfg(Qwen2, false, false, false)),
        ("megrez", cfg(Qwen2, false, false, true)),
        ("stablelm2", cfg(Qwen2, false, false, true)),
        ("hunyuan", cfg(Qwen2, false, false, false)),
        ("grok-2", cfg(Qwen2, false, false, false)),
        ("qwen35", cfg(Qwen35, false, false, false)),
        // Single numbers, then GPT-2's expression.
        ("starcoder", cfg(StarCoder, false, false, true)),
        ("refact", cfg(StarCoder, false, false, true)),
        ("command-r", cfg(StarCoder, false, false, false)),
        ("smollm", cfg(StarCoder, false, false, false)),
        ("codeshell", cfg(StarCoder, false, false, true)),
        ("exaone", cfg(StarCoder, false, false, true)),
        ("minerva-7b", cfg(StarCoder, false, false, true)),
        ("falcon", cfg(Falcon, false, false, true)),
    ]
};

/// The configuration for a `tokenizer.ggml.pre` name, if it is known.
pub(crate) fn pre_config(name: &str) -> Option<PreConfig> {
    PRE_TOKENIZER_NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, c)| *c)
}

/// One splitting rule: a regular expression of llama.cpp's lists.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// `[\p{P}\$\+<=>\^~\|]+`, with the backquote too when `backquote`.
    PunctuationRuns { backquote: bool },
    /// GPT-2's expression.
    Gpt2,
    /// LLaMA 3's expression, numbers in groups of at most `max_digits`, combining marks
    /// counted as letters if `marks`.
    Llama3 { max_digits: usize, marks: bool },
    /// `\p{N}+`.
    NumberRuns,
    /// `\p{N}`.
    SingleNumbers,
    /// `[0-9][0-9][0-9]`.
    AsciiDigitTriples,
}

impl PreTokenizer {
    fn stages(self) -> &'static [Stage] {
        use Stage::*;
        match self {
            PreTokenizer::Default => &[
                PunctuationRuns { backquote: false },
                Gpt2,
                NumberRuns,
                AsciiDigitTriples,
            ],
            PreTokenizer::Gpt2 => &[Gpt2],
            PreTokenizer::Llama3 => &[Llama3 {
                max_digits: 3,
                marks: false,
            }],
            PreTokenizer::Qwen2 => &[Llama3 {
                max_digits: 1,
                marks: false,
            }],
            PreTokenizer::Qwen35 => &[Llama3 {
                max_digits: 1,
                marks: true,
            }],
            PreTokenizer::StarCoder => &[SingleNumbers, Gpt2],
            PreTokenizer::Falcon => &[PunctuationRuns { backquote: true }, Gpt2, AsciiDigitTriples],
        }
    }

    /// Cuts `text` into words. The words are consecutive, non-empty and together make up
    /// `text` exactly.
    pub fn split(self, text: &str) -> Vec<&str> {
        let chars: Vec<char> = text.chars().collect();
        // Byte offset of each character, and of the end.
        let mut byte_at: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        byte_at.push(text.len());

        // Lengths (in characters) of consecutive pieces, as in llama.cpp.
        let mut pieces = vec![chars.len()];
        if chars.is_empty() {
            pieces.clear();
        }
        for stage in self.stages() {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            let mut start = 0;
            for &len in &pieces {
                let seg = &chars[start..start + len];
                let mut sink = Sink {
                    out: &mut next,
                    prev_end: 0,
                };
                split_stage(*stage, seg, &mut sink);
                sink.emit(seg.len());
                start += len;
            }
            pieces = next;
        }

        let mut words = Vec::with_capacity(pieces.len());
        let mut start = 0;
        for len in pieces {
            words.push(&text[byte_at[start]..byte_at[start + len]]);
            start += len;
        }
        words
    }
}

/// Collects the lengths of the pieces of one segment.
struct Sink<'a> {
    out: &'a mut Vec<usize>,
    prev_end: usize,
}

impl Sink<'_> {
    /// Ends a piece at `end` (a no-op if nothing is pending).
    #[inline]
    fn emit(&mut self, end: usize) {
        if end > self.prev_end {
            self.out.push(end - self.prev_end);
        }
        self.prev_end = end;
    }
}

/// The classes of `seg[i]`, or `None` past the end of the segment (where no class matches:
/// expressions cannot look beyond the piece they cut).
#[inline]
fn class_at(seg: &[char], i: usize) -> Option<CharClass> {
    seg.get(i).map(|&c| class_of(c))
}

#[inline]
fn is_letter(seg: &[char], i: usize) -> bool {
    class_at(seg, i).is_some_and(|c| c.letter)
}

#[inline]
fn is_number(seg: &[char], i: usize) -> bool {
    class_at(seg, i).is_some_and(|c| c.number)
}

#[inline]
fn is_whitespace(seg: &[char], i: usize) -> bool {
    class_at(seg, i).is_some_and(|c| c.whitespace)
}

#[inline]
fn is_other(seg: &[char], i: usize) -> bool {
    class_at(seg, i).is_some_and(CharClass::is_other)
}

fn split_stage(stage: Stage, seg: &[char], sink: &mut Sink<'_>) {
    match stage {
        Stage::Gpt2 => split_gpt2(seg, sink),
        Stage::Llama3 { max_digits, marks } => split_llama3(seg, max_digits, marks, sink),
        Stage::PunctuationRuns { backquote } => split_matches(seg, sink, |seg, i| {
            let run = |c: char| {
                class_of(c).punctuation
                    || matches!(c, '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|')
                    || (backquote && c == '`')
            };
            if run(seg[i]) {
                let mut j = i + 1;
                while j < seg.len() && run(seg[j]) {
                    j += 1;
                }
                Some(j)
            } else {
                None
            }
        }),
        Stage::NumberRuns => split_matches(seg, sink, |seg, i| {
            if is_number(seg, i) {
                let mut j = i + 1;
                while is_number(seg, j) {
                    j += 1;
                }
                Some(j)
            } else {
                None
            }
        }),
        Stage::SingleNumbers => {
            split_matches(seg, sink, |seg, i| is_number(seg, i).then_some(i + 1))
        }
        Stage::AsciiDigitTriples => split_matches(seg, sink, |seg, i| {
            (i + 3 <= seg.len() && seg[i..i + 3].iter().all(char::is_ascii_digit)).then_some(i + 3)
        }),
    }
}

/// Splits at the matches of an expression that is tried at each position in turn:
/// `match_at(seg, i)` is the end of the match starting at `i`, if there is one. Matches and
/// the gaps between them become pieces.
fn split_matches(
    seg: &[char],
    sink: &mut Sink<'_>,
    match_at: impl Fn(&[char], usize) -> Option<usize>,
) {
    let mut i = 0;
    while i < seg.len() {
        match match_at(seg, i) {
            Some(end) => {
                sink.emit(i); // the gap before the match, if any
                sink.emit(end);
                i = end;
            }
            None => i += 1,
        }
    }
}

/// `'s|'t|'re|'ve|'m|'ll|'d`, case-sensitive or not: the length of the contraction at `pos`.
fn contraction_len(seg: &[char], pos: usize, ignore_case: bool) -> Option<usize> {
    if seg[pos] != '\'' || pos + 1 >= seg.len() {
        return None;
    }
    let fold = |c: char| {
        if ignore_case {
            c.to_ascii_lowercase()
        } else {
            c
        }
    };
    let c1 = fold(seg[pos + 1]);
    if matches!(c1, 's' | 't' | 'm' | 'd') {
        return Some(2);
    }
    if pos + 2 < seg.len() {
        let c2 = fold(seg[pos + 2]);
        if matches!((c1, c2), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
            return Some(3);
        }
    }
    None
}

/// After a run of whitespace of length `n` at `pos`: the pieces `\s+(?!\S)|\s+` make.
/// A run followed by more text leaves its last character to the next word (as a space
/// that prefixes it); a run at the end of the segment is one piece.
fn whitespace_end(seg: &[char], pos: usize, n: usize) -> usize {
    if n > 1 && pos + n < seg.len() {
        pos + n - 1
    } else {
        pos + n
    }
}

/// GPT-2's expression.
fn split_gpt2(seg: &[char], sink: &mut Sink<'_>) {
    let mut pos = 0;
    while pos < seg.len() {
        let c = seg[pos];
        if let Some(n) = contraction_len(seg, pos, false) {
            pos += n;
            sink.emit(pos);
            continue;
        }
        // ` ?X+` for X in letters, numbers, others: the optional space is taken when the
        // character after it starts the run.
        let lead = usize::from(c == ' ');
        if is_letter(seg, pos + lead) {
            pos += lead;
            while is_letter(seg, pos) {
                pos += 1;
            }
            sink.emit(pos);
            continue;
        }
        if is_number(seg, pos + lead) {
            pos += lead;
            while is_number(seg, pos) {
                pos += 1;
            }
            sink.emit(pos);
            continue;
        }
        if is_other(seg, pos + lead) {
            pos += lead;
            while is_other(seg, pos) {
                pos += 1;
            }
            sink.emit(pos);
            continue;
        }
        let mut n = 0;
        while is_whitespace(seg, pos + n) {
            n += 1;
        }
        pos = if n > 0 {
            whitespace_end(seg, pos, n)
        } else {
            pos + 1
        };
        sink.emit(pos);
    }
}

/// LLaMA 3's expression, with numbers in groups of at most `max_digits`, and combining marks
/// counted as letters when `marks` (Qwen3.5).
fn split_llama3(seg: &[char], max_digits: usize, marks: bool, sink: &mut Sink<'_>) {
    // `[\p{L}]` or `[\p{L}\p{M}]`, and `[^\s\p{L}\p{N}]` or `[^\s\p{L}\p{M}\p{N}]`.
    let wordish = |i: usize| class_at(seg, i).is_some_and(|c| c.letter || (marks && c.mark));
    let other = |i: usize| class_at(seg, i).is_some_and(|c| c.is_other() && !(marks && c.mark));
    let mut pos = 0;
    while pos < seg.len() {
        let c = seg[pos];
        let class = class_of(c);
        if let Some(n) = contraction_len(seg, pos, true) {
            pos += n;
            sink.emit(pos);
            continue;
        }
        // `[^\r\n\p{L}\p{N}]?\p{L}+`
        if !(c == '\r' || c == '\n' || class.number) && (wordish(pos) || wordish(pos + 1)) {
            pos += 1;
            while wordish(pos) {
                pos += 1;
            }
            sink.emit(pos);
            continue;
        }
        // `\p{N}{1,max}`
        if class.number {
            let mut start = pos;
            while is_number(seg, pos) {
                pos += 1;
                if pos - start >= max_digits {
                    sink.emit(pos);
                    start = pos;
                }
            }
            sink.emit(pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        let lead = usize::from(c == ' ');
        if other(pos + lead) {
            pos += lead;
            while other(pos) {
                pos += 1;
            }
            while pos < seg.len() && matches!(seg[pos], '\r' | '\n') {
                pos += 1;
            }
            sink.emit(pos);
            continue;
        }
        // `\s*[\r\n]+`: the whitespace run up to its last line break.
        let mut n = 0;
        let mut last_break = None;
        while is_whitespace(seg, pos + n) {
            if matches!(seg[pos + n], '\r' | '\n') {
                last_break = Some(pos + n + 1);
            }
            n += 1;
        }
        pos = match last_break {
            Some(end) => end,
            None if n > 0 => whitespace_end(seg, pos, n),
            None => pos + 1,
        };
        sink.emit(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pre: PreTokenizer, s: &str) -> Vec<&str> {
        pre.split(s)
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(
            split(
                PreTokenizer::Gpt2,
                "Hello, y'all! How's it  going?\n\n 123abc"
            ),
            vec![
                "Hello", ",", " y", "'", "all", "!", " How", "'s", " it", " ", " going", "?",
                "\n\n", " 123", "abc"
            ]
        );
        assert_eq!(split(PreTokenizer::Gpt2, "a   "), vec!["a", "   "]);
        assert_eq!(split(PreTokenizer::Gpt2, ""), Vec::<&str>::new());
        assert_eq!(split(PreTokenizer::Gpt2, "'RE"), vec!["'", "RE"]);
    }

    #[test]
    fn llama3_and_qwen2_words() {
        let s = "I'VE 12345 apples\r\n\n  and  ...\n x";
        assert_eq!(
            split(PreTokenizer::Llama3, s),
            vec![
                "I", "'VE", " ", "123", "45", " apples", "\r\n\n", " ", " and", " ", " ...\n", " x"
            ]
        );
        assert_eq!(
            split(PreTokenizer::Qwen2, s),
            vec![
                "I", "'VE", " ", "1", "2", "3", "4", "5", " apples", "\r\n\n", " ", " and", " ",
                " ...\n", " x"
            ]
        );
        // A lone space at the end, and a tab before a letter.
        assert_eq!(
            split(PreTokenizer::Qwen2, "a \tb "),
            vec!["a", " ", "\tb", " "]
        );
    }

    #[test]
    fn qwen35_counts_marks_as_letters() {
        // U+0301 (combining acute) is a mark: Qwen2 cuts the word before it, Qwen3.5 keeps it.
        let s = "ke\u{301}x \u{301}\u{301}!";
        assert_eq!(
            split(PreTokenizer::Qwen2, s),
            vec!["ke", "\u{301}x", " \u{301}\u{301}!"]
        );
        assert_eq!(
            split(PreTokenizer::Qwen35, s),
            vec!["ke\u{301}x", " \u{301}\u{301}", "!"]
        );
    }

    #[test]
    fn default_stages() {
        // Punctuation runs are cut first, so " ," cannot form; digits end in triples.
        assert_eq!(
            split(PreTokenizer::Default, "x ,=y 1234567"),
            vec!["x", " ", ",=", "y", " ", "123", "456", "7"]
        );
    }

    #[test]
    fn words_cover_text() {
        let s = "Ünïcödé — ½ 🦙🦙 \u{3000}x\u{85}y 'll 'LL\t\n";
        for pre in [
            PreTokenizer::Default,
            PreTokenizer::Gpt2,
            PreTokenizer::Llama3,
            PreTokenizer::Qwen2,
            PreTokenizer::Qwen35,
            PreTokenizer::StarCoder,
            PreTokenizer::Falcon,
        ] {
            let words = split(pre, s);
            assert_eq!(words.concat(), s, "{pre:?}");
            assert!(words.iter().all(|w| !w.is_empty()));
        }
    }
}
