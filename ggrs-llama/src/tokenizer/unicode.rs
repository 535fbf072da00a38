//! Character classes as llama.cpp's pre-tokenizers see them, and GPT-2's byte↔character map.
//!
//! llama.cpp classifies every code point by its Unicode general category (`\p{L}` letters,
//! `\p{N}` numbers, `\p{P}` punctuation, `\p{S}` symbols, `\p{M}` marks…) and separately by
//! the `White_Space` property for `\s`. We do the same: categories come from the
//! `unicode-general-category` crate (Unicode 16), whitespace from [`char::is_whitespace`],
//! which is defined as that property. (C's `isspace` for ASCII, which llama.cpp's `std::regex`
//! fallback uses, agrees: tab, LF, VT, FF, CR and space.)

use unicode_general_category::{get_general_category, GeneralCategory as Gc};

/// The classes of one character that the pre-tokenizers test, as bits of one byte (the
/// scanners test them for every character).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CharClass(u8);

impl CharClass {
    const LETTER: u8 = 1;
    const NUMBER: u8 = 2;
    const WHITESPACE: u8 = 4;
    const PUNCTUATION: u8 = 8;
    const MARK: u8 = 16;
    const SYMBOL: u8 = 32;

    /// `\p{L}`: a letter of any kind.
    #[inline(always)]
    pub fn letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }

    /// `\p{N}`: a number of any kind (decimal digit, letter number, other number).
    #[inline(always)]
    pub fn number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }

    /// `\s`: the Unicode `White_Space` property.
    #[inline(always)]
    pub fn whitespace(self) -> bool {
        self.0 & Self::WHITESPACE != 0
    }

    /// `\p{P}`: punctuation of any kind.
    #[inline(always)]
    pub fn punctuation(self) -> bool {
        self.0 & Self::PUNCTUATION != 0
    }

    /// `\p{M}`: a combining mark of any kind.
    #[inline(always)]
    pub fn mark(self) -> bool {
        self.0 & Self::MARK != 0
    }

    /// `\p{S}`: a symbol of any kind (math, currency, modifier, other).
    #[inline(always)]
    pub fn symbol(self) -> bool {
        self.0 & Self::SYMBOL != 0
    }

    /// Neither whitespace, nor a letter, nor a number: `[^\s\p{L}\p{N}]`.
    #[inline(always)]
    pub fn is_other(self) -> bool {
        self.0 & (Self::WHITESPACE | Self::LETTER | Self::NUMBER) == 0
    }

    /// The class with each bit set as its flag says.
    const fn of(
        letter: bool,
        number: bool,
        whitespace: bool,
        punctuation: bool,
        mark: bool,
        symbol: bool,
    ) -> CharClass {
        const fn bit(on: bool, bit: u8) -> u8 {
            if on {
                bit
            } else {
                0
            }
        }
        CharClass(
            bit(letter, Self::LETTER)
                | bit(number, Self::NUMBER)
                | bit(whitespace, Self::WHITESPACE)
                | bit(punctuation, Self::PUNCTUATION)
                | bit(mark, Self::MARK)
                | bit(symbol, Self::SYMBOL),
        )
    }
}

/// Classes of the 128 ASCII characters, computed once (most text is mostly ASCII).
static ASCII: [CharClass; 128] = {
    let mut t = [CharClass(0); 128];
    let mut i = 0;
    while i < 128 {
        let c = i as u8;
        t[i] = CharClass::of(
            c.is_ascii_alphabetic(),
            c.is_ascii_digit(),
            // White_Space in ASCII: \t \n \v \f \r and space.
            matches!(c, 0x09..=0x0d | b' '),
            // Unicode categories Pc, Pd, Ps, Pe, Po in ASCII (not the symbols $ + < = > ^ ` | ~).
            matches!(
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
            ),
            false,
            // Unicode categories Sm, Sc, Sk in ASCII.
            matches!(
                c,
                b'$' | b'+' | b'<' | b'=' | b'>' | b'^' | b'`' | b'|' | b'~'
            ),
        );
        i += 1;
    }
    t
};

/// The classes of `c`.
#[inline(always)]
pub(crate) fn class_of(c: char) -> CharClass {
    // The scanners call this for every character: the ASCII case must stay a table lookup
    // inlined into them, with the category look-up out of line.
    if c.is_ascii() {
        ASCII[c as usize]
    } else {
        class_of_non_ascii(c)
    }
}

/// The classes of a character outside ASCII, from its general category.
#[inline(never)]
fn class_of_non_ascii(c: char) -> CharClass {
    let cat = get_general_category(c);
    CharClass::of(
        matches!(
            cat,
            Gc::UppercaseLetter
                | Gc::LowercaseLetter
                | Gc::TitlecaseLetter
                | Gc::ModifierLetter
                | Gc::OtherLetter
        ),
        matches!(cat, Gc::DecimalNumber | Gc::LetterNumber | Gc::OtherNumber),
        c.is_whitespace(),
        matches!(
            cat,
            Gc::ConnectorPunctuation
                | Gc::DashPunctuation
                | Gc::OpenPunctuation
                | Gc::ClosePunctuation
                | Gc::InitialPunctuation
                | Gc::FinalPunctuation
                | Gc::OtherPunctuation
        ),
        matches!(
            cat,
            Gc::NonspacingMark | Gc::SpacingMark | Gc::EnclosingMark
        ),
        matches!(
            cat,
            Gc::MathSymbol | Gc::CurrencySymbol | Gc::ModifierSymbol | Gc::OtherSymbol
        ),
    )
}

/// The one byte that stands for `c` when llama.cpp runs an expression with Unicode
/// categories through `std::regex`: ASCII stays itself, other whitespace becomes a vertical
/// tab (`\x0B`, which `\s` matches), and every other character the byte of its category:
/// `0xD1` number, `0xD2` letter, `0xD3` punctuation, `0xD4` mark, `0xD5` symbol, `0xD0`
/// anything else (controls, format characters, unassigned code points…).
#[inline]
pub(crate) fn category_stand_in(c: char) -> u8 {
    if c.is_ascii() {
        return c as u8;
    }
    let class = class_of(c);
    if class.whitespace() {
        0x0b
    } else if class.number() {
        0xd1
    } else if class.letter() {
        0xd2
    } else if class.punctuation() {
        0xd3
    } else if class.mark() {
        0xd4
    } else if class.symbol() {
        0xd5
    } else {
        0xd0
    }
}

/// Whether `c` is a Han character as llama.cpp's `unicode_cpt_is_han` counts them: the CJK
/// Unified Ideographs, their extensions A to F, and the compatibility ideographs.
#[inline]
pub(crate) fn is_han(c: char) -> bool {
    matches!(
        c as u32,
        0x4e00..=0x9fff
            | 0x3400..=0x4dbf
            | 0x20000..=0x2a6df
            | 0x2a700..=0x2b73f
            | 0x2b740..=0x2b81f
            | 0x2b820..=0x2ceaf
            | 0x2ceb0..=0x2ebef
            | 0xf900..=0xfaff
            | 0x2f800..=0x2fa1f
    )
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
        assert!(class_of('a').letter() && class_of('Ä').letter() && class_of('我').letter());
        assert!(class_of('7').number() && class_of('½').number() && class_of('Ⅻ').number());
        assert!(class_of(' ').whitespace() && class_of('\u{3000}').whitespace());
        assert!(class_of('\u{85}').whitespace() && !class_of('\u{200b}').whitespace());
        assert!(class_of('\u{1c}').is_other());
        assert!(class_of('.').punctuation() && class_of('，').punctuation());
        assert!(!class_of('$').punctuation() && !class_of('`').punctuation());
        assert!(class_of('🦙').is_other() && class_of('\u{301}').is_other());
        assert!(class_of('\u{301}').mark() && class_of('\u{17b7}').mark() && !class_of('a').mark());
        assert!(class_of('$').symbol() && class_of('`').symbol() && class_of('€').symbol());
        assert!(class_of('🦙').symbol() && !class_of('.').symbol() && !class_of('a').symbol());
    }

    #[test]
    fn stand_ins() {
        let s = |c| category_stand_in(c);
        assert_eq!([s('a'), s(' '), s('\n'), s('~')], [b'a', b' ', b'\n', b'~']);
        assert_eq!(s('\u{3000}'), 0x0b); // ideographic space
        assert_eq!(s('\u{85}'), 0x0b); // next line: whitespace before its category (Cc)
        assert_eq!(s('½'), 0xd1);
        assert_eq!(s('我'), 0xd2);
        assert_eq!(s('，'), 0xd3);
        assert_eq!(s('\u{301}'), 0xd4);
        assert_eq!(s('€'), 0xd5);
        assert_eq!(s('\u{200b}'), 0xd0); // zero-width space: a format character
        assert_eq!(s('\u{378}'), 0xd0); // unassigned
        assert!(is_han('我') && is_han('\u{20000}') && !is_han('あ') && !is_han('a'));
    }
}
