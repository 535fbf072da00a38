//! Reading JSON that may still be growing: where each value of an object or array lies in a
//! text that can end inside it (a tool call being generated), and its compact form
//! ([`minify`]), which grows only at its end as the text does. The tool-call parsers use it
//! to stream a call's arguments in pieces whose concatenation is the whole call's arguments.

/// Where a JSON value lies in a text: `start..end`, and whether it is complete (the text
/// may end inside it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
    pub complete: bool,
}

impl Span {
    /// The span's text.
    pub fn text<'a>(&self, s: &'a str) -> &'a str {
        &s[self.start..self.end]
    }
}

/// The first index at or after `i` that is not JSON whitespace.
pub(crate) fn skip_ws(s: &str, mut i: usize) -> usize {
    let b = s.as_bytes();
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// The end of the string whose opening quote is at `i` (after its closing quote), or None
/// when the text ends inside it.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// The JSON value starting at `i` (after whitespace), as far as the text goes. A scalar
/// (number, `true`…) is complete once a delimiter follows it.
pub(crate) fn value(s: &str, i: usize) -> Span {
    let b = s.as_bytes();
    let start = skip_ws(s, i);
    let Some(&first) = b.get(start) else {
        return Span {
            start,
            end: start,
            complete: false,
        };
    };
    let done = |end| Span {
        start,
        end,
        complete: true,
    };
    let open = Span {
        start,
        end: b.len(),
        complete: false,
    };
    match first {
        b'"' => string_end(b, start).map_or(open, done),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = start;
            while j < b.len() {
                match b[j] {
                    b'"' => match string_end(b, j) {
                        Some(e) => {
                            j = e;
                            continue;
                        }
                        None => return open,
                    },
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return done(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            open
        }
        _ => {
            let mut j = start;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            if j < b.len() {
                done(j)
            } else {
                open
            }
        }
    }
}

/// One member of an object: its key (decoded) and its value's span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub key: String,
    pub value: Span,
}

/// The members of the object whose `{` is at `i`, as far as the text goes (a member whose
/// key is complete and whose `:` is written is listed, its value possibly empty or
/// incomplete), and the end of the object once it is closed. None when the text at `i` is
/// not an object's start or breaks JSON's syntax.
pub(crate) fn members(s: &str, i: usize) -> Option<(Vec<Member>, Option<usize>)> {
    let b = s.as_bytes();
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut out = Vec::new();
    let mut j = skip_ws(s, i + 1);
    if b.get(j) == Some(&b'}') {
        return Some((out, Some(j + 1)));
    }
    loop {
        match b.get(j) {
            None => return Some((out, None)),
            Some(b'"') => {}
            Some(_) => return None,
        }
        let Some(kend) = string_end(b, j) else {
            return Some((out, None));
        };
        let key: String = serde_json::from_str(&s[j..kend]).ok()?;
        j = skip_ws(s, kend);
        match b.get(j) {
            None => return Some((out, None)),
            Some(b':') => {}
            Some(_) => return None,
        }
        let v = value(s, j + 1);
        out.push(Member { key, value: v });
        if !v.complete {
            return Some((out, None));
        }
        j = skip_ws(s, v.end);
        match b.get(j) {
            None => return Some((out, None)),
            Some(b',') => j = skip_ws(s, j + 1),
            Some(b'}') => return Some((out, Some(j + 1))),
            Some(_) => return None,
        }
    }
}

/// The elements of the array whose `[` is at `i`, as far as the text goes, and the end of
/// the array once it is closed (None: not an array, or broken syntax).
pub(crate) fn elements(s: &str, i: usize) -> Option<(Vec<Span>, Option<usize>)> {
    let b = s.as_bytes();
    if b.get(i) != Some(&b'[') {
        return None;
    }
    let mut out = Vec::new();
    let mut j = skip_ws(s, i + 1);
    if b.get(j) == Some(&b']') {
        return Some((out, Some(j + 1)));
    }
    loop {
        if j >= b.len() {
            return Some((out, None));
        }
        let v = value(s, j);
        out.push(v);
        if !v.complete {
            return Some((out, None));
        }
        j = skip_ws(s, v.end);
        match b.get(j) {
            None => return Some((out, None)),
            Some(b',') => j = skip_ws(s, j + 1),
            Some(b']') => return Some((out, Some(j + 1))),
            Some(_) => return None,
        }
    }
}

/// `text` (JSON, possibly cut off) without the whitespace between its tokens. Each
/// character of the input maps to itself or to nothing, so the compact form of a longer
/// text starts with the compact form of a shorter one: a stream can send the difference.
pub(crate) fn minify(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_objects_are_read() {
        let s = r#"{"name": "add", "arguments": {"a": [1, "x}"], "b": 2}}"#;
        let (m, end) = members(s, 0).unwrap();
        assert_eq!(end, Some(s.len()));
        assert_eq!(m[0].key, "name");
        assert_eq!(m[0].value.text(s), "\"add\"");
        assert_eq!(m[1].value.text(s), r#"{"a": [1, "x}"], "b": 2}"#);
        // Every prefix: the members so far, never an error, the last value incomplete.
        for n in 0..s.len() {
            let p = &s[..n];
            let (m, end) = members(p, 0).unwrap_or((Vec::new(), None));
            assert!(end.is_none(), "{p}");
            if let Some(last) = m.last() {
                assert!(!last.value.complete || n < s.len());
            }
        }
        assert!(members("[1]", 0).is_none());
        assert!(members("{1: 2}", 0).is_none());
        let (e, end) = elements("[{\"a\": 1}, 2 ]", 0).unwrap();
        assert_eq!((e.len(), end), (2, Some(14)));
    }

    #[test]
    fn minify_grows_at_its_end() {
        let s = "{ \"a b\" : [1 , \"x \\\" y\" ],\n \"c\": true }";
        assert_eq!(minify(s), r#"{"a b":[1,"x \" y"],"c":true}"#);
        let whole = minify(s);
        for n in 0..=s.len() {
            assert!(whole.starts_with(&minify(&s[..n])));
        }
    }
}
