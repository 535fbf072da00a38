//! Character classes as llama.cpp's pre-tokenizers see them, and GPT-2's byte↔character map.
//!
//! llama.cpp classifies every code point by its Unicode general category (`\p{L}` letters,
//! `\p{N}` numbers, `\p{P}` punctuation, `\p{S}` symbols, `\p{M}` marks…) and separately by
//! the `White_Space` property for `\s`. We do the same: categories come from the
//! `unicode-general-category` crate (Unicode 16), whitespace from [`char::is_whitespace`],
//! which is defined as that property. (C's `isspace` for ASCII, which llama.cpp's `std::regex`
//! fallback uses, agrees: tab, LF, VT, FF, CR and space.)

use unicode_general_category::{get_general_category, GeneralCategory as Gc};

/// The classes of one character that the pre-tokenizers test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CharClass {
    /// `\p{L}`: a letter of any kind.
    pub letter: bool,
    /// `\p{N}`: a number of any kind (decimal digit, letter number, other number).
    pub number: bool,
    /// `\s`: the Unicode `White_Space` property.
    pub whitespace: bool,
    /// `\p{P}`: punctuation of any kind.
    pub punctuation: bool,
    /// `\p{M}`: a combining mark of any kind.
    pub mark: bool,
}

impl CharClass {
    /// Neither whitespace, nor a letter, nor a number: `[^\s\p{L}\p{N}]`.
    #[inline]
    pub fn is_other(self) -> bool {
        !(self.whitespace || self.letter || self.number)
    }
}

/// Classes of the 128 ASCII characters, computed once (most text is mostly ASCII).
static ASCII: [CharClass; 128] = {
    let mut t = [CharClass {
        letter: false,
        number: false,
        whitespace: false,
        punctuation: false,
        mark: false,
    }; 128];
    let mut i = 0;
    while i < 128 {
        let c = i as u8;
        t[i].letter = c.is_ascii_alphabetic();
        t[i].number = c.is_ascii_digit();
        // White_Space in ASCII: \t \n \v \f \r and space.
        t[i].whitespace = matches!(c, 0x09..=0x0d | b' ');
        // Unicode categories Pc, Pd, Ps, Pe, Po in ASCII (not the symbols $ + < = > ^ ` | ~).
        t[i].punctuation = matches!(
            c,
            b'!' | b'"'
                | b'#'
                | b'%'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b','
                | b'-'
                | b'.'
                | b'/'
                | b':'
                | b';'
                | b'?'
                | b'@'
                | b'['
                | b'\\'
                | b']'
                | b'_'
                | b'{'
                | b'}'
        );
        i += 1;
    }
    t
};

/// The classes of `c`.
#[inline]
pub(crate) fn class_of(c: char) -> CharClass {
    if c.is_ascii() {
        return ASCII[c as usize];
    }
    let cat = get_general_category(c);
    CharClass {
        letter: matches!(
            cat,
            Gc::UppercaseLetter
                | Gc::LowercaseLetter
                | Gc::TitlecaseLetter
                | Gc::ModifierLetter
                | Gc::OtherLetter
        ),
        number: matches!(cat, Gc::DecimalNumber | Gc::LetterNumber | Gc::OtherNumber),
        whitespace: c.is_whitespace(),
        punctuation: matches!(
            cat,
            Gc::ConnectorPunctuation
                | Gc::DashPunctuation
                | Gc::OpenPunctuation
                | Gc::ClosePunctuation
                | Gc::InitialPunctuation
                | Gc::FinalPunctuation
                | Gc::OtherPunctuation
        ),
        mark: matches!(
            cat,
            Gc::NonspacingMark | Gc::SpacingMark | Gc::EnclosingMark
        ),
    }
}

/// Whether GPT-2's byte map keeps byte `b` as the character of the same number.
const fn printable(b: u32) -> bool {
    matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff)
}

/// GPT-2's reversible map from bytes to printable characters: the printable Latin-1 bytes
/// (`!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`) map to themselves, the other 68 bytes, in increasing
/// order, to U+0100, U+0101, … U+0143.
pub(crate) static BYTE_TO_CHAR: [char; 256] = {
    let mut table = ['\0'; 256];
    let mut next_extra = 0x100u32;
    let mut b = 0u32;
    while b < 256 {
        let cp = if printable(b) {
            b
        } else {
            next_extra += 1;
            next_extra - 1
        };
        // Every value here is below U+0144, a valid scalar value.
        table[b as usize] = match char::from_u32(cp) {
            Some(c) => c,
            None => '\u{fffd}',
        };
        b += 1;
    }
    table
};

/// For U+0100 + n, the byte it stands for (the n-th non-printable byte).
static EXTRA_TO_BYTE: [u8; 68] = {
    let mut table = [0u8; 68];
    let mut n = 0;
    let mut b = 0u32;
    while b < 256 {
        if !printable(b) {
            table[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    table
};

/// The inverse of [`BYTE_TO_CHAR`]: the byte a character stands for, if any.
#[inline]
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if printable(cp) {
        Some(cp as u8)
    } else if (0x100..0x100 + 68).contains(&cp) {
        Some(EXTRA_TO_BYTE[(cp - 0x100) as usize])
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_gpt2s() {
        let t = &BYTE_TO_CHAR;
        // Well-known images: space → Ġ (U+0120), newline → Ċ (U+010A), tab → ĉ (U+0109),
        // NUL → Ā (U+0100), 0x7f → ġ (U+0121), 0xad (soft hyphen) → Ń (U+0143).
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'\t' as usize], 'ĉ');
        assert_eq!(t[0], 'Ā');
        assert_eq!(t[0x7f], 'ġ');
        assert_eq!(t[0xad], 'Ń');
        assert_eq!(t[b'a' as usize], 'a');
        assert_eq!(t[0xe9], 'é');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b));
        }
        assert_eq!(char_to_byte('Ġ'), Some(b' '));
        assert_eq!(char_to_byte('€'), None);
        assert_eq!(char_to_byte(' '), None);
    }

    #[test]
    fn classes() {
        assert!(class_of('a').letter && class_of('Ä').letter && class_of('我').letter);
        assert!(class_of('7').number && class_of('½').number && class_of('Ⅻ').number);
        assert!(class_of(' ').whitespace && class_of('\u{3000}').whitespace);
        assert!(class_of('\u{85}').whitespace && !class_of('\u{200b}').whitespace);
        assert!(class_of('\u{1c}').is_other());
        assert!(class_of('.').punctuation && class_of('，').punctuation);
        assert!(!class_of('$').punctuation && !class_of('`').punctuation);
        assert!(class_of('🦙').is_other() && class_of('\u{301}').is_other());
        assert!(class_of('\u{301}').mark && class_of('\u{17b7}').mark && !class_of('a').mark);
    }
}
