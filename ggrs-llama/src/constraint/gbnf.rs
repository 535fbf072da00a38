//! llama.cpp's GBNF grammars, read and rewritten in the Lark-like syntax of the constraint
//! engine ([`super`]).
//!
//! GBNF (llama.cpp `grammars/README.md`): rules `name ::= alternatives`, a rule ending at the
//! end of its line unless inside parentheses; elements are `"literals"`, character classes
//! `[a-z\n]` / `[^"]`, `.` (any character), rule names, groups `( … )`, and the repetitions
//! `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`; `#` starts a comment; `root` is where a text
//! starts. Escapes: `\n \r \t \\ \" \[ \] \-` and `\xHH`, `\uHHHH`, `\UHHHHHHHH`.
//!
//! The rewrite keeps the structure and makes every rule that only spells characters (no
//! recursion, only references to other such rules) a lexer terminal: the engine then matches
//! it with one regular expression instead of one grammar step per character, which is what
//! keeps the per-token mask cheap.

use std::collections::HashMap;
use std::fmt::Write;

/// A GBNF grammar that does not parse, with where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("GBNF grammar, line {line}: {message}")]
pub struct GbnfError {
    /// 1-based line of the problem.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

#[derive(Debug, Clone)]
enum Node {
    Literal(String),
    /// A character class: negated, and its inclusive ranges.
    Class(bool, Vec<(char, char)>),
    Any,
    Ref(String, usize),
    /// A model token written `<name>` or `<[id]>` (kept as the engine spells it).
    Token(String),
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    Repeat(Box<Node>, u32, Option<u32>),
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, message: impl Into<String>) -> GbnfError {
        GbnfError {
            line: self.src[..self.pos.min(self.src.len())]
                .matches('\n')
                .count()
                + 1,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Skips spaces, tabs and comments, and newlines too when `newlines`.
    fn space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => {
                    while !matches!(self.peek(), None | Some('\n')) {
                        self.bump();
                    }
                }
                _ => break,
            }
        }
    }

    fn is_word(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '-' || c == '_'
    }

    fn name(&mut self) -> Result<String, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(Self::is_word) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err(format!(
                "expected a rule name, found {}",
                self.peek()
                    .map_or("the end of the grammar".to_string(), |c| format!("{c:?}"))
            )));
        }
        Ok(self.src[start..self.pos].to_string())
    }

    fn hex(&mut self, digits: usize) -> Result<char, GbnfError> {
        let start = self.pos;
        for _ in 0..digits {
            match self.bump() {
                Some(c) if c.is_ascii_hexdigit() => {}
                _ => return Err(self.err(format!("expected {digits} hexadecimal digits"))),
            }
        }
        let v = u32::from_str_radix(&self.src[start..self.pos], 16)
            .map_err(|e| self.err(e.to_string()))?;
        char::from_u32(v).ok_or_else(|| self.err(format!("U+{v:X} is not a character")))
    }

    /// One character of a literal or class, escapes resolved.
    fn char(&mut self) -> Result<char, GbnfError> {
        match self.bump() {
            None => Err(self.err("unexpected end of the grammar inside a literal or class")),
            Some('\\') => match self.bump() {
                Some('n') => Ok('\n'),
                Some('r') => Ok('\r'),
                Some('t') => Ok('\t'),
                Some('x') => self.hex(2),
                Some('u') => self.hex(4),
                Some('U') => self.hex(8),
                Some(c @ ('\\' | '"' | '[' | ']' | '-' | '^' | '/' | '\'')) => Ok(c),
                Some(c) => Err(self.err(format!("unknown escape \\{c}"))),
                None => Err(self.err("unexpected end of the grammar after \\")),
            },
            Some(c) => Ok(c),
        }
    }

    fn literal(&mut self) -> Result<Node, GbnfError> {
        self.pos += 1; // "
        let mut s = String::new();
        loop {
            if self.peek() == Some('"') {
                self.pos += 1;
                return Ok(Node::Literal(s));
            }
            if matches!(self.peek(), Some('\n') | None) {
                return Err(self.err("unterminated string literal"));
            }
            s.push(self.char()?);
        }
    }

    fn class(&mut self) -> Result<Node, GbnfError> {
        self.pos += 1; // [
        let negated = if self.peek() == Some('^') {
            self.pos += 1;
            true
        } else {
            false
        };
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                Some(']') => {
                    self.pos += 1;
                    return Ok(Node::Class(negated, ranges));
                }
                None => return Err(self.err("unterminated character class")),
                _ => {}
            }
            let lo = self.char()?;
            let hi = if self.peek() == Some('-') && !self.src[self.pos + 1..].starts_with(']') {
                self.pos += 1;
                self.char()?
            } else {
                lo
            };
            if hi < lo {
                return Err(self.err(format!("empty range {lo:?}-{hi:?} in a character class")));
            }
            ranges.push((lo, hi));
        }
    }

    fn number(&mut self) -> Result<u32, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        self.src[start..self.pos]
            .parse()
            .map_err(|_| self.err("expected a number in a repetition {m,n}"))
    }

    fn repetition(&mut self, node: Node, nested: bool) -> Result<Node, GbnfError> {
        let (min, max) = match self.peek() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') => {
                self.pos += 1;
                self.space(true);
                let min = self.number()?;
                self.space(true);
                let max = match self.bump() {
                    Some('}') => Some(min),
                    Some(',') => {
                        self.space(true);
                        let max = if self.peek() == Some('}') {
                            None
                        } else {
                            Some(self.number()?)
                        };
                        self.space(true);
                        if self.bump() != Some('}') {
                            return Err(self.err("expected } closing a repetition"));
                        }
                        max
                    }
                    _ => return Err(self.err("expected , or } in a repetition")),
                };
                if max.is_some_and(|m| m < min) {
                    return Err(self.err(format!("repetition {{{min},{max:?}}}: max below min")));
                }
                self.space(nested);
                return self.repetition(Node::Repeat(Box::new(node), min, max), nested);
            }
            _ => return Ok(node),
        };
        self.pos += 1;
        self.space(nested);
        self.repetition(Node::Repeat(Box::new(node), min, max), nested)
    }

    fn sequence(&mut self, nested: bool) -> Result<Node, GbnfError> {
        let mut items = Vec::new();
        loop {
            let node = match self.peek() {
                Some('"') => self.literal()?,
                Some('[') => self.class()?,
                Some('.') => {
                    self.pos += 1;
                    Node::Any
                }
                Some('(') => {
                    self.pos += 1;
                    self.space(true);
                    let inner = self.alternatives(true)?;
                    if self.bump() != Some(')') {
                        return Err(self.err("expected ) closing a group"));
                    }
                    inner
                }
                Some('<') => {
                    let start = self.pos;
                    while !matches!(self.peek(), Some('>') | Some('\n') | None) {
                        self.pos += 1;
                    }
                    if self.bump() != Some('>') {
                        return Err(self.err("unterminated token reference <…>"));
                    }
                    Node::Token(self.src[start..self.pos].to_string())
                }
                Some(c) if Self::is_word(c) => {
                    // A name followed by ::= starts the next rule.
                    let save = self.pos;
                    self.name()?;
                    self.space(false);
                    if self.src[self.pos..].starts_with("::=") {
                        self.pos = save;
                        break;
                    }
                    self.pos = save;
                    let name = self.name()?;
                    Node::Ref(name, self.pos)
                }
                _ => break,
            };
            self.space(nested);
            items.push(self.repetition(node, nested)?);
        }
        Ok(if items.len() == 1 {
            items.pop().expect("one item")
        } else {
            Node::Seq(items)
        })
    }

    fn alternatives(&mut self, nested: bool) -> Result<Node, GbnfError> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().expect("one alternative")
        } else {
            Node::Alt(alts)
        })
    }
}

/// Rewrites a GBNF grammar in the engine's Lark-like syntax (start rule `start`, from
/// `root`). Errors name the line and the problem: a syntax error, an undefined rule, a rule
/// defined twice, no `root`.
pub fn gbnf_to_lark(src: &str) -> Result<String, GbnfError> {
    let mut p = Parser { src, pos: 0 };
    let mut rules: Vec<(String, Node, usize)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    p.space(true);
    while p.peek().is_some() {
        let at = p.pos;
        let name = p.name()?;
        p.space(false);
        if !p.src[p.pos..].starts_with("::=") {
            return Err(p.err(format!("expected ::= after the rule name {name}")));
        }
        p.pos += 3;
        p.space(true);
        let body = p.alternatives(false)?;
        p.space(false);
        match p.peek() {
            None | Some('\n') | Some('\r') => {}
            Some(c) => return Err(p.err(format!("unexpected {c:?}"))),
        }
        if index.insert(name.clone(), rules.len()).is_some() {
            p.pos = at;
            return Err(p.err(format!("rule {name} is defined twice")));
        }
        rules.push((name, body, at));
        p.space(true);
    }
    let Some(&root) = index.get("root") else {
        return Err(GbnfError {
            line: 1,
            message: "the grammar has no root rule (root ::= …)".into(),
        });
    };
    // Undefined references.
    for (_, body, _) in &rules {
        let mut missing = None;
        visit(body, &mut |n| {
            if let Node::Ref(name, at) = n {
                if !index.contains_key(name) && missing.is_none() {
                    missing = Some((name.clone(), *at));
                }
            }
        });
        if let Some((name, at)) = missing {
            p.pos = at;
            return Err(p.err(format!("rule {name} is used but not defined")));
        }
    }
    // Rules that only spell characters become terminals (a fixed point: a rule qualifies
    // once every rule it names does, so a recursive rule never does).
    let mut terminal = vec![false; rules.len()];
    loop {
        let mut changed = false;
        for (i, (_, body, _)) in rules.iter().enumerate() {
            if i == root || terminal[i] {
                continue;
            }
            let mut ok = true;
            visit(body, &mut |n| match n {
                Node::Ref(name, _) => ok &= terminal[index[name]],
                Node::Token(_) => ok = false,
                _ => {}
            });
            if ok {
                terminal[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let names: Vec<String> = rules
        .iter()
        .enumerate()
        .map(|(i, (name, _, _))| {
            let clean: String = name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            if i == root {
                "start".to_string()
            } else if terminal[i] {
                format!("T{i}_{}", clean.to_ascii_uppercase())
            } else {
                format!("r{i}_{}", clean.to_ascii_lowercase())
            }
        })
        .collect();
    let mut out = String::from("%llguidance {}\n");
    for (i, (_, body, _)) in rules.iter().enumerate() {
        let mut line = String::new();
        emit(body, &names, &index, &mut line);
        let _ = writeln!(out, "{}: {}", names[i], line);
    }
    Ok(out)
}

fn visit(node: &Node, f: &mut impl FnMut(&Node)) {
    f(node);
    match node {
        Node::Seq(v) | Node::Alt(v) => v.iter().for_each(|n| visit(n, f)),
        Node::Repeat(n, _, _) => visit(n, f),
        _ => {}
    }
}

/// `s` as a JSON string literal (the engine's string syntax), with every control
/// character and DEL escaped.
fn quote(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn class_char(c: char, out: &mut String) {
    if c.is_ascii_alphanumeric() {
        out.push(c);
    } else {
        let _ = write!(out, "\\x{{{:x}}}", c as u32);
    }
}

fn emit(node: &Node, names: &[String], index: &HashMap<String, usize>, out: &mut String) {
    match node {
        Node::Literal(s) => quote(s, out),
        Node::Class(negated, ranges) => {
            out.push_str("/[");
            if *negated {
                out.push('^');
            }
            for &(lo, hi) in ranges {
                class_char(lo, out);
                if hi != lo {
                    out.push('-');
                    class_char(hi, out);
                }
            }
            out.push_str("]/");
        }
        Node::Any => out.push_str("/[\\x{0}-\\x{10ffff}]/"),
        Node::Ref(name, _) => out.push_str(&names[index[name]]),
        Node::Token(t) => out.push_str(t),
        Node::Seq(items) if items.is_empty() => out.push_str("\"\""),
        Node::Seq(items) => {
            for (i, n) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                emit(n, names, index, out);
            }
        }
        Node::Alt(alts) => {
            out.push('(');
            for (i, n) in alts.iter().enumerate() {
                if i > 0 {
                    out.push_str(" | ");
                }
                emit(n, names, index, out);
            }
            out.push(')');
        }
        Node::Repeat(n, min, max) => {
            out.push('(');
            emit(n, names, index, out);
            out.push(')');
            match (min, max) {
                (0, None) => out.push('*'),
                (1, None) => out.push('+'),
                (0, Some(1)) => out.push('?'),
                (m, None) => {
                    let _ = write!(out, "{{{m},}}");
                }
                (m, Some(n)) if m == n => {
                    let _ = write!(out, "{{{m}}}");
                }
                (m, Some(n)) => {
                    let _ = write!(out, "{{{m},{n}}}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_rules_terminals_and_repetitions() {
        let g = "root ::= greeting (\" \" name)? \"!\"{1,3}\n\
                 greeting ::= \"hi\" | \"hello\"  # a comment\n\
                 name ::= [A-Z] [a-z\\-]*\n";
        let lark = gbnf_to_lark(g).unwrap();
        assert!(
            lark.contains("start: T1_GREETING (\" \" T2_NAME)? (\"!\"){1,3}"),
            "{lark}"
        );
        assert!(lark.contains("T1_GREETING: (\"hi\" | \"hello\")"), "{lark}");
        assert!(
            lark.contains("T2_NAME: /[A-Z]/ (/[a-z\\x{2d}]/)*"),
            "{lark}"
        );
    }

    #[test]
    fn recursive_rules_stay_rules() {
        let g = "root ::= list\nlist ::= \"(\" (list | [a-z])* \")\"\n";
        let lark = gbnf_to_lark(g).unwrap();
        assert!(lark.contains("r1_list: \"(\""), "{lark}");
    }

    #[test]
    fn errors_name_the_line() {
        let e = gbnf_to_lark("root ::= a\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("rule a is used but not defined"), "{e}");
        let e = gbnf_to_lark("x ::= \"a\"\n").unwrap_err();
        assert!(e.message.contains("no root rule"), "{e}");
        let e = gbnf_to_lark("root ::= \"a\n").unwrap_err();
        assert!(e.message.contains("unterminated"), "{e}");
        let e = gbnf_to_lark("root ::= \"a\"\n\nroot ::= \"b\"\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        let e = gbnf_to_lark("root ::= [z-a]\n").unwrap_err();
        assert!(e.message.contains("empty range"), "{e}");
    }
}
