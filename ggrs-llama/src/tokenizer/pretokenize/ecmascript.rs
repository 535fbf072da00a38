//! llama.cpp's `std::regex` expressions, run exactly through the `regex` crate.
//!
//! An expression of llama.cpp's lists without a hand-written scanner is run by llama.cpp
//! through `std::regex` (ECMAScript syntax, leftmost match, alternatives tried in order), on
//! one of two texts (its `unicode.cpp`, `unicode_regex_split`):
//! - **collapsed**, when the expression names a Unicode category (`\p{L}`, `\p{N}`, `\p{P}`,
//!   `\p{M}`, `\p{S}`, `\p{Lu}`…; `std::regex` has none): every character becomes one byte,
//!   ASCII itself and the others a stand-in for their category
//!   ([`category_stand_in`]), and each `\p{X}` in the expression becomes the stand-in
//!   plus the ASCII characters of that category (every `\p{L…}` means all letters);
//! - **wide**, otherwise: the text's code points as they are, except non-ASCII whitespace,
//!   which becomes a vertical tab (`\x0B`), since `std::wregex`'s `\s` only knows ASCII.
//!
//! We build the same text and the same expression, translate the expression into the regex
//! crate's syntax (Perl classes spelled out as the ASCII sets of the C locale), and iterate
//! matches as `std::regex_iterator` does: each match and each gap between matches is a piece.
//! The regex crate has the same leftmost-first semantics but no look-around; the look-aheads
//! llama.cpp's lists use are rewritten exactly:
//! - `(?=C)X` and `(?!C)X`, where `C` and `X` each match one character, become one class
//!   (`C` intersected with `X`, or `X` without `C`);
//! - a look-ahead that ends a top-level alternative is matched as ordinary text in a capture
//!   group and given back afterwards: the match ends where that group starts. `(?!C)` for a
//!   one-character `C` is "the end, or one character not in `C`" (`\s+(?!\S)` is
//!   `\s+(?:\z|(\s))`), `(?=X)` is `(X)`.
//!
//! Other look-arounds, back-references, word boundaries and expressions that can match the
//! empty string (whose iteration `std::regex_iterator` handles specially) are refused with a
//! reason, so a pre-tokenizer either runs exactly or not at all.

use super::super::unicode::category_stand_in;

/// The Unicode categories llama.cpp recognises in an expression, and what each becomes:
/// its stand-in byte and the ASCII characters of the category, as `std::regex` class items.
const CATEGORIES: &[(&str, u8, &str)] = &[
    (r"\p{N}", 0xd1, "0-9"),
    (r"\p{L}", 0xd2, "A-Za-z"),
    (r"\p{P}", 0xd3, r"!-#%-*,-/:-;?-@\[-\]_\{\}"),
    (r"\p{M}", 0xd4, ""),
    (r"\p{S}", 0xd5, r"\$\+<->^`\|\~"),
    (r"\p{Lu}", 0xd2, "A-Za-z"),
    (r"\p{Ll}", 0xd2, "A-Za-z"),
    (r"\p{Lt}", 0xd2, "A-Za-z"),
    (r"\p{Lm}", 0xd2, "A-Za-z"),
    (r"\p{Lo}", 0xd2, "A-Za-z"),
];

/// `\s` of `std::regex` in the C locale: tab, line feed, vertical tab, form feed, carriage
/// return, space.
const SPACE: &[(u32, u32)] = &[(0x09, 0x0d), (0x20, 0x20)];
/// `\d`.
const DIGIT: &[(u32, u32)] = &[(0x30, 0x39)];
/// `\w`: ASCII letters, digits and the underscore.
const WORD: &[(u32, u32)] = &[(0x30, 0x39), (0x41, 0x5a), (0x5f, 0x5f), (0x61, 0x7a)];

/// One compiled expression: the text it runs on and the regex crate's matcher.
#[derive(Debug, Clone)]
pub(super) struct RegexStage {
    matcher: Matcher,
    /// Capture groups standing for a look-ahead that ends an alternative: when one of them
    /// takes part in a match, the match ends where the group starts.
    give_back: Vec<usize>,
}

#[derive(Debug, Clone)]
enum Matcher {
    /// On the collapsed text (one byte per character).
    Collapsed(regex::bytes::Regex),
    /// On the text's code points (non-ASCII whitespace as `\x0B`).
    Wide(regex::Regex),
}

/// The texts the expressions of one `split` run on, built on first use.
#[derive(Debug, Default)]
pub(super) struct Haystacks {
    collapsed: Option<Vec<u8>>,
    wide: Option<(String, Vec<usize>)>,
}

impl Haystacks {
    fn collapsed(&mut self, chars: &[char]) -> &[u8] {
        self.collapsed
            .get_or_insert_with(|| chars.iter().map(|&c| category_stand_in(c)).collect())
    }

    /// The wide text and the byte offset of each character in it (and of the end).
    fn wide(&mut self, chars: &[char]) -> (&str, &[usize]) {
        let (text, at) = self.wide.get_or_insert_with(|| {
            let mut text = String::with_capacity(chars.len());
            let mut at = Vec::with_capacity(chars.len() + 1);
            for &c in chars {
                at.push(text.len());
                let ws = !c.is_ascii() && c.is_whitespace();
                text.push(if ws { '\u{b}' } else { c });
            }
            at.push(text.len());
            (text, at)
        });
        (text, at)
    }
}

impl RegexStage {
    /// Compiles one of llama.cpp's expressions, or says why it cannot run exactly.
    pub fn compile(expr: &str) -> Result<RegexStage, String> {
        let collapsed = CATEGORIES.iter().any(|(name, ..)| expr.contains(name));
        let units: Vec<u32> = if collapsed {
            if !expr.is_ascii() {
                return Err(
                    "it names Unicode categories and has non-ASCII characters, which llama.cpp \
                     refuses"
                        .into(),
                );
            }
            collapse(expr.as_bytes())
                .into_iter()
                .map(u32::from)
                .collect()
        } else {
            expr.chars().map(u32::from).collect()
        };
        let mut parser = Parser {
            s: &units,
            i: 0,
            wide: !collapsed,
        };
        let node = parser.parse_alternation()?;
        if parser.i < units.len() {
            return Err("unbalanced `)`".into());
        }
        let node = give_back_trailing_lookaheads(fold_lookaheads(node)?)?;
        if contains_lookahead(&node) {
            return Err(
                "it has a look-ahead that is neither one character wide nor at the end \
                        of an alternative"
                    .into(),
            );
        }
        if nullable(&node) {
            return Err("it can match the empty string".into());
        }
        let mut emitter = Emitter {
            out: String::new(),
            wide: !collapsed,
            groups: 0,
            give_back: Vec::new(),
        };
        emitter.node(&node)?;
        let Emitter { out, give_back, .. } = emitter;
        let matcher = if collapsed {
            Matcher::Collapsed(
                regex::bytes::RegexBuilder::new(&out)
                    .unicode(false)
                    .build()
                    .map_err(|e| format!("the regex crate refuses its translation: {e}"))?,
            )
        } else {
            Matcher::Wide(
                regex::Regex::new(&out)
                    .map_err(|e| format!("the regex crate refuses its translation: {e}"))?,
            )
        };
        Ok(RegexStage { matcher, give_back })
    }

    /// The regex crate's pattern this expression runs as.
    #[cfg(test)]
    pub fn pattern(&self) -> &str {
        match &self.matcher {
            Matcher::Collapsed(r) => r.as_str(),
            Matcher::Wide(r) => r.as_str(),
        }
    }

    /// Cuts the piece of `len` characters at character `start` of `chars`, pushing the
    /// lengths of its pieces (matches and the gaps between them) to `out`.
    pub fn split(
        &self,
        chars: &[char],
        hay: &mut Haystacks,
        start: usize,
        len: usize,
        out: &mut Vec<usize>,
    ) {
        match &self.matcher {
            Matcher::Collapsed(re) => {
                let text = &hay.collapsed(chars)[start..start + len];
                let mut locs = (!self.give_back.is_empty()).then(|| re.capture_locations());
                // One byte per character: offsets are character counts.
                iterate(len, out, |at| match &mut locs {
                    None => re.find_at(text, at).map(|m| (m.start(), m.end())),
                    Some(locs) => {
                        re.captures_read_at(locs, text, at)?;
                        Some(self.real_span(|g| locs.get(g)))
                    }
                });
            }
            Matcher::Wide(re) => {
                let (text, at) = hay.wide(chars);
                let base = at[start];
                let text = &text[base..at[start + len]];
                let at = &at[start..=start + len];
                let mut locs = (!self.give_back.is_empty()).then(|| re.capture_locations());
                // Byte offsets in `text` ↔ character offsets in the piece.
                let char_of = |byte: usize| {
                    at.binary_search(&(base + byte))
                        .unwrap_or_else(|i| i.saturating_sub(1))
                };
                iterate(len, out, |pos| {
                    let (s, e) = match &mut locs {
                        None => re
                            .find_at(text, at[pos] - base)
                            .map(|m| (m.start(), m.end()))?,
                        Some(locs) => {
                            re.captures_read_at(locs, text, at[pos] - base)?;
                            self.real_span(|g| locs.get(g))
                        }
                    };
                    Some((char_of(s), char_of(e)))
                });
            }
        }
    }

    /// The span of a match (from the capture locations `get`) once a look-ahead group that
    /// took part is given back.
    fn real_span(&self, get: impl Fn(usize) -> Option<(usize, usize)>) -> (usize, usize) {
        // Group 0 always takes part in a match.
        let (s, mut e) = get(0).unwrap_or((0, 0));
        if let Some((gs, _)) = self.give_back.iter().find_map(|&g| get(g)) {
            e = gs;
        }
        (s, e)
    }
}

/// Walks the matches of a piece of `len` characters as `std::regex_iterator` does, pushing
/// the lengths of matches and of the gaps between them to `out`: `find(pos)` is the next
/// match (character span) starting at or after `pos`.
fn iterate(
    len: usize,
    out: &mut Vec<usize>,
    mut find: impl FnMut(usize) -> Option<(usize, usize)>,
) {
    let mut prev_end = 0;
    let mut pos = 0;
    while pos < len {
        let Some((s, e)) = find(pos) else { break };
        if e <= s {
            // Cannot happen: `compile` refuses expressions that match the empty string.
            pos = s + 1;
            continue;
        }
        if s > prev_end {
            out.push(s - prev_end);
        }
        out.push(e - s);
        prev_end = e;
        pos = e;
    }
    if prev_end < len {
        out.push(len - prev_end);
    }
}

/// llama.cpp's rewriting of an expression for the collapsed text: each `\p{X}` it knows
/// becomes `[` stand-in + ASCII members `]`, or just those items inside a bracket
/// expression. (Its bracket tracking is textual; so is ours.)
fn collapse(expr: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(expr.len() * 2);
    let mut inside = false;
    let mut i = 0;
    while i < expr.len() {
        let b = expr[i];
        if b == b'[' && (i == 0 || expr[i - 1] != b'\\') {
            out.push(b'[');
            inside = true;
            i += 1;
            continue;
        }
        if inside && b == b']' && expr[i - 1] != b'\\' {
            out.push(b']');
            inside = false;
            i += 1;
            continue;
        }
        if b == b'\\' && i + 3 < expr.len() && expr[i + 1] == b'p' && expr[i + 2] == b'{' {
            let close = expr[i + 3..]
                .iter()
                .position(|&c| c == b'}')
                .map(|p| p + i + 3);
            if let Some(close) = close.filter(|&c| c <= i + 10) {
                let name = &expr[i..=close];
                if let Some(&(_, stand_in, members)) =
                    CATEGORIES.iter().find(|(n, ..)| n.as_bytes() == name)
                {
                    if !inside {
                        out.push(b'[');
                    }
                    out.push(stand_in);
                    out.extend_from_slice(members.as_bytes());
                    if !inside {
                        out.push(b']');
                    }
                    i = close + 1;
                    continue;
                }
            }
        }
        out.push(b);
        i += 1;
    }
    out
}

/// A set of characters: ranges, nested sets and intersections, possibly negated.
#[derive(Debug, Clone, PartialEq)]
struct Class {
    negated: bool,
    items: Vec<Item>,
}

#[derive(Debug, Clone, PartialEq)]
enum Item {
    Range(u32, u32),
    Set(Class),
    Intersection(Class, Class),
}

impl Class {
    fn char(c: u32) -> Class {
        Class {
            negated: false,
            items: vec![Item::Range(c, c)],
        }
    }

    fn ranges(ranges: &[(u32, u32)], negated: bool) -> Class {
        Class {
            negated,
            items: ranges.iter().map(|&(a, b)| Item::Range(a, b)).collect(),
        }
    }

    fn complement(mut self) -> Class {
        self.negated = !self.negated;
        self
    }
}

/// An expression, parsed.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Empty,
    /// One character from a set.
    Class(Class),
    /// A group (capturing or not: captures are not used).
    Group(Box<Node>),
    Concat(Vec<Node>),
    Alternation(Vec<Node>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
        greedy: bool,
    },
    /// `^`: the start of the piece.
    Start,
    /// `$`: the end of the piece.
    End,
    /// `(?=…)` or `(?!…)`.
    Lookahead {
        negated: bool,
        node: Box<Node>,
    },
    /// A look-ahead matched as text and given back (see the module docs).
    GiveBack(Box<Node>),
}

/// A parser of the ECMAScript syntax `std::regex` reads, over the expression's characters
/// (bytes of the collapsed expression, or code points).
struct Parser<'a> {
    s: &'a [u32],
    i: usize,
    wide: bool,
}

fn is(c: Option<u32>, ch: char) -> bool {
    c == Some(u32::from(ch))
}

impl Parser<'_> {
    fn peek(&self) -> Option<u32> {
        self.s.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u32> {
        let c = self.peek();
        self.i += usize::from(c.is_some());
        c
    }

    fn eat(&mut self, ch: char) -> bool {
        let hit = is(self.peek(), ch);
        self.i += usize::from(hit);
        hit
    }

    fn parse_alternation(&mut self) -> Result<Node, String> {
        let mut alternatives = vec![self.parse_concat()?];
        while self.eat('|') {
            alternatives.push(self.parse_concat()?);
        }
        Ok(if alternatives.len() == 1 {
            alternatives.swap_remove(0)
        } else {
            Node::Alternation(alternatives)
        })
    }

    fn parse_concat(&mut self) -> Result<Node, String> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == u32::from('|') || c == u32::from(')') {
                break;
            }
            let atom = self.parse_atom()?;
            items.push(self.parse_quantifier(atom)?);
        }
        Ok(match items.len() {
            0 => Node::Empty,
            1 => items.swap_remove(0),
            _ => Node::Concat(items),
        })
    }

    fn parse_quantifier(&mut self, atom: Node) -> Result<Node, String> {
        let (min, max) = match self.peek().and_then(char::from_u32) {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') => {
                self.i += 1;
                let min = self.number().ok_or("a malformed `{…}` quantifier")?;
                let max = if self.eat(',') {
                    if is(self.peek(), '}') {
                        None
                    } else {
                        Some(self.number().ok_or("a malformed `{…}` quantifier")?)
                    }
                } else {
                    Some(min)
                };
                if !is(self.peek(), '}') || max.is_some_and(|m| m < min) {
                    return Err("a malformed `{…}` quantifier".into());
                }
                (min, max)
            }
            _ => return Ok(atom),
        };
        self.i += 1;
        if matches!(
            atom,
            Node::Start | Node::End | Node::Lookahead { .. } | Node::Empty
        ) {
            return Err("a quantifier after an assertion".into());
        }
        let greedy = !self.eat('?');
        if matches!(
            self.peek().and_then(char::from_u32),
            Some('*' | '+' | '?' | '{')
        ) {
            return Err("a quantifier after a quantifier".into());
        }
        Ok(Node::Repeat {
            node: Box::new(atom),
            min,
            max,
            greedy,
        })
    }

    fn number(&mut self) -> Option<u32> {
        let start = self.i;
        let mut n: u32 = 0;
        while let Some(d) = self
            .peek()
            .and_then(char::from_u32)
            .and_then(|c| c.to_digit(10))
        {
            n = n.checked_mul(10)?.checked_add(d)?;
            self.i += 1;
        }
        (self.i > start).then_some(n)
    }

    fn parse_atom(&mut self) -> Result<Node, String> {
        let Some(c) = self.next() else {
            return Err("an unexpected end".into());
        };
        Ok(match char::from_u32(c) {
            Some('(') => {
                let lookahead = if self.eat('?') {
                    match self.next().and_then(char::from_u32) {
                        Some(':') => None,
                        Some('=') => Some(false),
                        Some('!') => Some(true),
                        _ => return Err("a group kind other than `(?:`, `(?=` and `(?!`".into()),
                    }
                } else {
                    None
                };
                let inner = self.parse_alternation()?;
                if !self.eat(')') {
                    return Err("an unclosed `(`".into());
                }
                match lookahead {
                    Some(negated) => Node::Lookahead {
                        negated,
                        node: Box::new(inner),
                    },
                    None => Node::Group(Box::new(inner)),
                }
            }
            Some('[') => Node::Class(self.parse_bracket()?),
            Some('.') => {
                // Any character but a line terminator.
                let mut stop = vec![(0x0a, 0x0a), (0x0d, 0x0d)];
                if self.wide {
                    stop.push((0x2028, 0x2029));
                }
                Node::Class(Class::ranges(&stop, true))
            }
            Some('^') => Node::Start,
            Some('$') => Node::End,
            Some('\\') => Node::Class(self.parse_escape(false)?),
            Some('*' | '+' | '?' | '{') => return Err("a quantifier with nothing to repeat".into()),
            _ => Node::Class(Class::char(c)),
        })
    }

    /// After a backslash: the class or character it stands for.
    fn parse_escape(&mut self, in_bracket: bool) -> Result<Class, String> {
        let Some(c) = self.next() else {
            return Err("a trailing backslash".into());
        };
        let Some(ch) = char::from_u32(c).filter(char::is_ascii_alphanumeric) else {
            // An escaped punctuation character (or any non-alphanumeric one) is itself.
            return Ok(Class::char(c));
        };
        let char_of = |v: u32| Ok(Class::char(v));
        match ch {
            'd' => Ok(Class::ranges(DIGIT, false)),
            'D' => Ok(Class::ranges(DIGIT, true)),
            's' => Ok(Class::ranges(SPACE, false)),
            'S' => Ok(Class::ranges(SPACE, true)),
            'w' => Ok(Class::ranges(WORD, false)),
            'W' => Ok(Class::ranges(WORD, true)),
            't' => char_of(0x09),
            'n' => char_of(0x0a),
            'v' => char_of(0x0b),
            'f' => char_of(0x0c),
            'r' => char_of(0x0d),
            'b' if in_bracket => char_of(0x08),
            '0' if !self.peek().is_some_and(|d| (0x30..=0x39).contains(&d)) => char_of(0),
            'x' => char_of(self.hex(2)?),
            'u' => char_of(self.hex(4)?),
            'b' | 'B' => Err("word boundaries are not supported".into()),
            '1'..='9' => Err("back-references are not supported".into()),
            _ => Err(format!("the escape `\\{ch}` is not supported")),
        }
    }

    fn hex(&mut self, n: usize) -> Result<u32, String> {
        let mut v = 0;
        for _ in 0..n {
            let d = self
                .next()
                .and_then(char::from_u32)
                .and_then(|c| c.to_digit(16))
                .ok_or("a malformed hexadecimal escape")?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    /// After `[`: a bracket expression.
    fn parse_bracket(&mut self) -> Result<Class, String> {
        let negated = self.eat('^');
        if is(self.peek(), ']') {
            return Err("an empty bracket expression".into());
        }
        let mut items = Vec::new();
        loop {
            let Some(c) = self.next() else {
                return Err("an unclosed `[`".into());
            };
            if c == u32::from(']') {
                break;
            }
            let first = self.bracket_atom(c)?;
            let single = single_char(&first);
            let range_follows = is(self.peek(), '-')
                && self.s.get(self.i + 1).is_some_and(|&n| n != u32::from(']'));
            match (single, range_follows) {
                (Some(lo), true) => {
                    self.i += 1; // '-'
                    let Some(c) = self.next() else {
                        return Err("an unclosed `[`".into());
                    };
                    let hi = single_char(&self.bracket_atom(c)?)
                        .ok_or("a range that ends in a class")?;
                    if hi < lo {
                        return Err("a range out of order".into());
                    }
                    items.push(Item::Range(lo, hi));
                }
                (None, true) => return Err("a range that starts with a class".into()),
                (Some(c), false) => items.push(Item::Range(c, c)),
                (None, false) => items.push(Item::Set(first)),
            }
        }
        Ok(Class { negated, items })
    }

    fn bracket_atom(&mut self, c: u32) -> Result<Class, String> {
        if c == u32::from('\\') {
            self.parse_escape(true)
        } else {
            Ok(Class::char(c))
        }
    }
}

/// The one character a class holds, if it is a single character.
fn single_char(class: &Class) -> Option<u32> {
    match class.items.as_slice() {
        [Item::Range(a, b)] if a == b && !class.negated => Some(*a),
        _ => None,
    }
}

/// The class of a node that matches exactly one character.
fn one_char(node: &Node) -> Option<Class> {
    match node {
        Node::Class(c) => Some(c.clone()),
        Node::Group(inner) => one_char(inner),
        Node::Concat(items) if items.len() == 1 => one_char(&items[0]),
        _ => None,
    }
}

/// `(?=C)X` / `(?!C)X` with one-character `C` and `X`, anywhere: one class.
fn fold_lookaheads(node: Node) -> Result<Node, String> {
    let fold_box = |n: Box<Node>| fold_lookaheads(*n).map(Box::new);
    Ok(match node {
        Node::Group(inner) => Node::Group(fold_box(inner)?),
        Node::Alternation(v) => Node::Alternation(
            v.into_iter()
                .map(fold_lookaheads)
                .collect::<Result<_, _>>()?,
        ),
        Node::Repeat {
            node,
            min,
            max,
            greedy,
        } => Node::Repeat {
            node: fold_box(node)?,
            min,
            max,
            greedy,
        },
        Node::Lookahead { negated, node } => Node::Lookahead {
            negated,
            node: fold_box(node)?,
        },
        Node::Concat(items) => {
            let items: Vec<Node> = items
                .into_iter()
                .map(fold_lookaheads)
                .collect::<Result<_, _>>()?;
            let mut out = Vec::with_capacity(items.len());
            let mut it = items.into_iter().peekable();
            while let Some(item) = it.next() {
                let folded = match (&item, it.peek()) {
                    (Node::Lookahead { negated, node }, Some(next)) => {
                        match (one_char(node), one_char(next)) {
                            (Some(ahead), Some(here)) => {
                                let ahead = if *negated { ahead.complement() } else { ahead };
                                Some(Node::Class(Class {
                                    negated: false,
                                    items: vec![Item::Intersection(ahead, here)],
                                }))
                            }
                            _ => None,
                        }
                    }
                    _ => None,
                };
                match folded {
                    Some(class) => {
                        it.next();
                        out.push(class);
                    }
                    None => out.push(item),
                }
            }
            if out.len() == 1 {
                out.swap_remove(0)
            } else {
                Node::Concat(out)
            }
        }
        other => other,
    })
}

/// A look-ahead that ends a top-level alternative: matched as text and given back.
fn give_back_trailing_lookaheads(node: Node) -> Result<Node, String> {
    let rewrite = |alt: Node| -> Result<Node, String> {
        let (mut items, was_concat) = match alt {
            Node::Concat(items) => (items, true),
            other => (vec![other], false),
        };
        if let Some(Node::Lookahead { negated, node }) = pop_lookahead(&mut items) {
            items.push(if negated {
                let class = one_char(&node).ok_or(
                    "it has a negative look-ahead at the end of an alternative that is wider \
                     than one character",
                )?;
                Node::Group(Box::new(Node::Alternation(vec![
                    Node::End,
                    Node::GiveBack(Box::new(Node::Class(class.complement()))),
                ])))
            } else if contains_lookahead(&node) {
                return Err("it nests look-aheads".into());
            } else {
                Node::GiveBack(node)
            });
        }
        Ok(if was_concat {
            Node::Concat(items)
        } else {
            items.swap_remove(0)
        })
    };
    match node {
        Node::Alternation(v) => Ok(Node::Alternation(
            v.into_iter().map(rewrite).collect::<Result<_, _>>()?,
        )),
        other => rewrite(other),
    }
}

/// Removes and returns the last node if it is a look-ahead.
fn pop_lookahead(items: &mut Vec<Node>) -> Option<Node> {
    if matches!(items.last(), Some(Node::Lookahead { .. })) {
        items.pop()
    } else {
        None
    }
}

fn contains_lookahead(node: &Node) -> bool {
    match node {
        Node::Lookahead { .. } => true,
        Node::Group(n) | Node::GiveBack(n) | Node::Repeat { node: n, .. } => contains_lookahead(n),
        Node::Concat(v) | Node::Alternation(v) => v.iter().any(contains_lookahead),
        Node::Empty | Node::Class(_) | Node::Start | Node::End => false,
    }
}

/// Whether the node can match without consuming a character (a given-back group consumes
/// nothing in the end).
fn nullable(node: &Node) -> bool {
    match node {
        Node::Empty | Node::Start | Node::End | Node::Lookahead { .. } | Node::GiveBack(_) => true,
        Node::Class(_) => false,
        Node::Group(n) => nullable(n),
        Node::Repeat { node, min, .. } => *min == 0 || nullable(node),
        Node::Concat(v) => v.iter().all(nullable),
        Node::Alternation(v) => v.iter().any(nullable),
    }
}

/// Writes a node in the regex crate's syntax.
struct Emitter {
    out: String,
    /// Code points (`\x{…}`) rather than bytes (`\x..`).
    wide: bool,
    /// Capture groups written so far.
    groups: usize,
    give_back: Vec<usize>,
}

impl Emitter {
    fn node(&mut self, node: &Node) -> Result<(), String> {
        match node {
            Node::Empty => self.out.push_str("(?:)"),
            Node::Class(c) => match single_char(c) {
                Some(ch) => self.char(ch),
                None => self.class(c),
            },
            Node::Group(n) => {
                self.out.push_str("(?:");
                self.node(n)?;
                self.out.push(')');
            }
            Node::Concat(v) => {
                for n in v {
                    self.node(n)?;
                }
            }
            Node::Alternation(v) => {
                for (i, n) in v.iter().enumerate() {
                    if i > 0 {
                        self.out.push('|');
                    }
                    self.node(n)?;
                }
            }
            Node::Repeat {
                node,
                min,
                max,
                greedy,
            } => {
                self.out.push_str("(?:");
                self.node(node)?;
                self.out.push(')');
                match (min, max) {
                    (0, None) => self.out.push('*'),
                    (1, None) => self.out.push('+'),
                    (0, Some(1)) => self.out.push('?'),
                    (m, None) => self.out.push_str(&format!("{{{m},}}")),
                    (m, Some(n)) if m == n => self.out.push_str(&format!("{{{m}}}")),
                    (m, Some(n)) => self.out.push_str(&format!("{{{m},{n}}}")),
                }
                if !greedy {
                    self.out.push('?');
                }
            }
            Node::Start => self.out.push_str(r"\A"),
            Node::End => self.out.push_str(r"\z"),
            Node::Lookahead { .. } => return Err("a look-ahead the rewrites left".into()),
            Node::GiveBack(n) => {
                self.groups += 1;
                self.give_back.push(self.groups);
                self.out.push('(');
                self.node(n)?;
                self.out.push(')');
            }
        }
        Ok(())
    }

    fn char(&mut self, c: u32) {
        if self.wide {
            self.out.push_str(&format!(r"\x{{{c:X}}}"));
        } else {
            self.out.push_str(&format!(r"\x{c:02X}"));
        }
    }

    fn class(&mut self, class: &Class) {
        self.out.push('[');
        if class.negated {
            self.out.push('^');
        }
        for item in &class.items {
            match item {
                Item::Range(a, b) => {
                    self.char(*a);
                    if a != b {
                        self.out.push('-');
                        self.char(*b);
                    }
                }
                Item::Set(c) => self.class(c),
                Item::Intersection(x, y) => {
                    self.out.push('[');
                    self.class(x);
                    self.out.push_str("&&");
                    self.class(y);
                    self.out.push(']');
                }
            }
        }
        self.out.push(']');
    }
}
