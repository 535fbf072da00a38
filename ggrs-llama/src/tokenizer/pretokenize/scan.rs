//! Hand-written scanners for the expressions llama.cpp's pre-tokenizers use most.
//!
//! llama.cpp runs a few expressions through hand-written code (its `unicode.cpp`
//! `unicode_regex_split_custom_*`) and the rest through `std::regex`. A scanner here does
//! what llama.cpp does for one expression string: for the strings llama.cpp has its own code
//! for, what that code does (which differs from the regular expression in corner cases); for
//! the others, what `std::regex` does (leftmost match, alternatives tried in order) with
//! llama.cpp's character classes. [`Scanner::for_expression`] recognises the strings.

use super::super::unicode::{class_of, is_han, CharClass};

/// A hand-written splitter for one expression of llama.cpp's lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scanner {
    /// `[\p{P}\$\+<=>\^~\|]+`, with the backquote too when `backquote`.
    PunctuationRuns { backquote: bool },
    /// GPT-2's expression (llama.cpp's own code for it).
    Gpt2,
    /// LLaMA 3's expression, numbers in groups of at most `max_digits`, combining marks
    /// counted as letters if `marks` (llama.cpp's own code for LLaMA 3, Qwen2 and Qwen3.5).
    Llama3 { max_digits: usize, marks: bool },
    /// `\p{N}+`.
    NumberRuns,
    /// `\p{N}`.
    SingleNumbers,
    /// `[0-9][0-9][0-9]`.
    AsciiDigitTriples,
    /// `[^\n]+|[\n]+` (llama.cpp's own code).
    NewlineRuns,
    /// `\p{AFMoE_digits}` and Tiny Aya's `\d{1,3}(?=(?:\d{3})*\b)`: llama.cpp's own code,
    /// which cuts each run of numbers into a group of one or two then groups of three, and
    /// leaves the text before a run in the run's first piece.
    AfmoeDigits,
    /// `\p{Han}+`: llama.cpp's own code for Kimi K2's whole expression (runs of Han
    /// characters, then LLaMA 3-like words without Han characters and with contractions as
    /// suffixes, numbers in groups of up to three, punctuation, whitespace).
    KimiK2,
    /// `(?=(\d{3})+(?!\d))` (SuperBPE): an empty match before every position followed by a
    /// multiple of three ASCII digits up to the end of the run, so the run is cut into groups
    /// of three counted from its end (the regex crate has no look-ahead).
    DigitTripleCuts,
}

/// The expressions with a scanner, as written in llama.cpp's lists, and their scanners.
const SCANNERS: &[(&str, Scanner)] = &[
    (
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        Scanner::Gpt2,
    ),
    (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        Scanner::Llama3 {
            max_digits: 3,
            marks: false,
        },
    ),
    (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        Scanner::Llama3 {
            max_digits: 3,
            marks: false,
        },
    ),
    (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        Scanner::Llama3 {
            max_digits: 1,
            marks: false,
        },
    ),
    (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        Scanner::Llama3 {
            max_digits: 1,
            marks: true,
        },
    ),
    (
        r"[\p{P}\$\+<=>\^~\|]+",
        Scanner::PunctuationRuns { backquote: false },
    ),
    (
        r"[\p{P}\$\+<=>\^~\|`]+",
        Scanner::PunctuationRuns { backquote: true },
    ),
    (r"\p{N}+", Scanner::NumberRuns),
    (r"\p{N}", Scanner::SingleNumbers),
    (r"[0-9][0-9][0-9]", Scanner::AsciiDigitTriples),
    (r"[^\n]+|[\n]+", Scanner::NewlineRuns),
    (r"\p{AFMoE_digits}", Scanner::AfmoeDigits),
    (r"\d{1,3}(?=(?:\d{3})*\b)", Scanner::AfmoeDigits),
    (r"\p{Han}+", Scanner::KimiK2),
    (r"(?=(\d{3})+(?!\d))", Scanner::DigitTripleCuts),
];

impl Scanner {
    /// The scanner for an expression written exactly as `expr`, if there is one.
    pub fn for_expression(expr: &str) -> Option<Scanner> {
        SCANNERS.iter().find(|(e, _)| *e == expr).map(|&(_, s)| s)
    }

    /// Every expression string that has a scanner.
    #[cfg(test)]
    pub fn expressions() -> impl Iterator<Item = &'static str> {
        SCANNERS.iter().map(|&(e, _)| e)
    }

    /// Cuts one piece `seg` into pieces, reporting their ends to `sink` (the caller ends the
    /// last one at `seg.len()`).
    pub fn split(self, seg: &[char], sink: &mut Sink<'_>) {
        match self {
            Scanner::Gpt2 => split_gpt2(seg, sink),
            Scanner::Llama3 { max_digits, marks } => split_llama3(seg, max_digits, marks, sink),
            Scanner::PunctuationRuns { backquote } => split_matches(seg, sink, |seg, i| {
                let run = |c: char| {
                    class_of(c).punctuation()
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
            Scanner::NumberRuns => split_matches(seg, sink, |seg, i| {
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
            Scanner::SingleNumbers => {
                split_matches(seg, sink, |seg, i| is_number(seg, i).then_some(i + 1))
            }
            Scanner::AsciiDigitTriples => split_matches(seg, sink, |seg, i| {
                (i + 3 <= seg.len() && seg[i..i + 3].iter().all(char::is_ascii_digit))
                    .then_some(i + 3)
            }),
            Scanner::NewlineRuns => {
                for i in 1..seg.len() {
                    if (seg[i] == '\n') != (seg[i - 1] == '\n') {
                        sink.emit(i);
                    }
                }
            }
            Scanner::AfmoeDigits => split_afmoe_digits(seg, sink),
            Scanner::KimiK2 => split_kimi_k2(seg, sink),
            Scanner::DigitTripleCuts => split_digit_triple_cuts(seg, sink),
        }
    }
}

/// Collects the lengths of the pieces of one segment.
pub(super) struct Sink<'a> {
    /// Where the lengths go.
    pub out: &'a mut Vec<usize>,
    /// End of the last piece emitted (or skipped).
    pub prev_end: usize,
}

impl Sink<'_> {
    /// Ends a piece at `end` (a no-op if nothing is pending).
    #[inline]
    pub fn emit(&mut self, end: usize) {
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

/// The end of the run of `class` characters starting at `i`, if `seg[i]` is one.
#[inline(always)]
fn run_of(seg: &[char], i: usize, class: impl Fn(&[char], usize) -> bool) -> Option<usize> {
    if !class(seg, i) {
        return None;
    }
    let mut end = i + 1;
    while class(seg, end) {
        end += 1;
    }
    Some(end)
}

#[inline]
fn is_letter(seg: &[char], i: usize) -> bool {
    class_at(seg, i).is_some_and(|c| c.letter())
}

#[inline]
fn is_number(seg: &[char], i: usize) -> bool {
    class_at(seg, i).is_some_and(|c| c.number())
}

#[inline]
fn is_whitespace(seg: &[char], i: usize) -> bool {
    class_at(seg, i).is_some_and(|c| c.whitespace())
}

#[inline]
fn is_other(seg: &[char], i: usize) -> bool {
    class_at(seg, i).is_some_and(CharClass::is_other)
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
#[inline(always)]
fn contraction_len(seg: &[char], pos: usize, ignore_case: bool) -> Option<usize> {
    if seg.get(pos) != Some(&'\'') || pos + 1 >= seg.len() {
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
#[inline(always)]
fn whitespace_end(seg: &[char], pos: usize, n: usize) -> usize {
    if n > 1 && pos + n < seg.len() {
        pos + n - 1
    } else {
        pos + n
    }
}

/// GPT-2's expression.
// Out of line (as is `split_llama3`): compiled on its own, the hot loop is faster than inside
// `Scanner::split`'s match (measured on the qwen2 speed test's text).
#[inline(never)]
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
        let run = run_of(seg, pos + lead, is_letter)
            .or_else(|| run_of(seg, pos + lead, is_number))
            .or_else(|| run_of(seg, pos + lead, is_other));
        if let Some(end) = run {
            pos = end;
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
#[inline(never)]
fn split_llama3(seg: &[char], max_digits: usize, marks: bool, sink: &mut Sink<'_>) {
    // `[\p{L}]` or `[\p{L}\p{M}]`, and `[^\s\p{L}\p{N}]` or `[^\s\p{L}\p{M}\p{N}]`.
    let wordish = |i: usize| class_at(seg, i).is_some_and(|c| c.letter() || (marks && c.mark()));
    let other = |i: usize| class_at(seg, i).is_some_and(|c| c.is_other() && !(marks && c.mark()));
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
        if !(c == '\r' || c == '\n' || class.number()) && (wordish(pos) || wordish(pos + 1)) {
            pos += 1;
            while wordish(pos) {
                pos += 1;
            }
            sink.emit(pos);
            continue;
        }
        // `\p{N}{1,max}`
        if class.number() {
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
        pos = whitespace_run_end(seg, pos);
        sink.emit(pos);
    }
}

/// The end of the piece `\s*[\r\n]+|\s+(?!\S)|\s+` makes at `pos` (the whitespace run up
/// to its last line break, or as [`whitespace_end`] says), or `pos + 1` where no whitespace
/// starts (a character no alternative matched, which llama.cpp makes a piece of its own).
#[inline(always)]
fn whitespace_run_end(seg: &[char], pos: usize) -> usize {
    let mut n = 0;
    let mut last_break = None;
    while is_whitespace(seg, pos + n) {
        if matches!(seg[pos + n], '\r' | '\n') {
            last_break = Some(pos + n + 1);
        }
        n += 1;
    }
    match last_break {
        Some(end) => end,
        None if n > 0 => whitespace_end(seg, pos, n),
        None => pos + 1,
    }
}

/// llama.cpp's code for AFMoE's digits: each run of numbers becomes a group of its first
/// `len % 3` numbers (if any) and then groups of three; the text before a run is not cut
/// off but stays in the run's first group, and the text after the last run is one piece.
fn split_afmoe_digits(seg: &[char], sink: &mut Sink<'_>) {
    let mut pos = 0;
    while pos < seg.len() {
        if !is_number(seg, pos) {
            pos += 1;
            continue;
        }
        let start = pos;
        while is_number(seg, pos) {
            pos += 1;
        }
        let mut cut = start + (pos - start) % 3;
        if cut > start {
            sink.emit(cut);
        }
        while cut < pos {
            cut += 3;
            sink.emit(cut);
        }
    }
}

/// `(?=(\d{3})+(?!\d))` as `std::regex` iterates it: an empty match at each position from
/// which the run of ASCII digits has a length that is a positive multiple of three. The
/// empty matches leave empty words, which give no tokens; the text is cut there.
fn split_digit_triple_cuts(seg: &[char], sink: &mut Sink<'_>) {
    let mut pos = 0;
    while pos < seg.len() {
        if !seg[pos].is_ascii_digit() {
            pos += 1;
            continue;
        }
        let start = pos;
        while pos < seg.len() && seg[pos].is_ascii_digit() {
            pos += 1;
        }
        let mut cut = start + (pos - start) % 3;
        while cut + 3 <= pos {
            sink.emit(cut);
            cut += 3;
        }
    }
}

/// llama.cpp's code for Kimi K2's expression
/// `[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|…|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
/// which treats both word alternatives as "letters other than Han".
fn split_kimi_k2(seg: &[char], sink: &mut Sink<'_>) {
    let word = |i: usize| {
        seg.get(i)
            .is_some_and(|&c| class_of(c).letter() && !is_han(c))
    };
    let mut pos = 0;
    while pos < seg.len() {
        let c = seg[pos];
        let class = class_of(c);
        // `[\p{Han}]+`
        if is_han(c) {
            while pos < seg.len() && is_han(seg[pos]) {
                pos += 1;
            }
            sink.emit(pos);
            continue;
        }
        // An optional leading character that is not a line break, letter or number, then
        // letters other than Han, then an optional contraction (any case).
        let lead = !(c == '\r' || c == '\n' || class.letter() || class.number());
        if word(pos) || (lead && word(pos + 1)) {
            pos += usize::from(lead);
            while word(pos) {
                pos += 1;
            }
            if let Some(n) = contraction_len(seg, pos, true) {
                pos += n;
            }
            sink.emit(pos);
            continue;
        }
        // `\p{N}{1,3}`
        if class.number() {
            let mut start = pos;
            while is_number(seg, pos) {
                pos += 1;
                if pos - start >= 3 {
                    sink.emit(pos);
                    start = pos;
                }
            }
            sink.emit(pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        let space = usize::from(c == ' ');
        if is_other(seg, pos + space) {
            pos += space;
            while is_other(seg, pos) {
                pos += 1;
            }
            while pos < seg.len() && matches!(seg[pos], '\r' | '\n') {
                pos += 1;
            }
            sink.emit(pos);
            continue;
        }
        pos = whitespace_run_end(seg, pos);
        sink.emit(pos);
    }
}
