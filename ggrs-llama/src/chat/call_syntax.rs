//! The tool-call syntaxes that are not JSON, read as llama.cpp's parsers read them:
//! - Qwen3-Coder's XML blocks (Qwen3-Coder, Qwen3.5, Nemotron Nano 3): after `<tool_call>`,
//!   `\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n…</function>\n</tool_call>`;
//!   a value is its text as written, a JSON value when it parses as one and its parameter is
//!   not a string (llama.cpp's `qwen3-coder` parser);
//! - LFM2's Python-style call lists: after `<|tool_call_start|>`,
//!   `[name(key="value", n=1), other()]<|tool_call_end|>`, values Python or JSON literals
//!   (`True`/`true`, `None`/`null`, quoted strings with escapes, lists, dicts).
//!
//! Each reads one call at a time and says whether the text ends inside it, so that a stream
//! can show a call's name before its arguments are complete.

use serde_json::Value;

use super::json_scan;

/// Qwen3-Coder's marks around a call.
pub(crate) const XML_OPEN: &str = "<tool_call>";
pub(crate) const XML_CLOSE: &str = "</tool_call>";
/// LFM2's marks around a call list.
pub(crate) const LFM2_OPEN: &str = "<|tool_call_start|>";
pub(crate) const LFM2_CLOSE: &str = "<|tool_call_end|>";

const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PARAMETER: &str = "<parameter=";
const PARAMETER_END: &str = "\n</parameter>";

/// One call read from the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The text is not a call of a known tool.
    NotACall,
    /// The text ends inside the call; its name once complete.
    Open(Option<String>),
    /// A whole call: its name, its arguments as compact JSON, and the bytes it used.
    Call(String, String, usize),
}

/// Whether `t` may still grow into `mark` (it is a prefix of it).
fn may_become(t: &str, mark: &str) -> bool {
    mark.starts_with(t)
}

/// The JSON text of a Qwen3-Coder parameter value: a string for string parameters (and
/// for text that is no JSON), else the JSON value as written, compact. `parameters`: the
/// function's parameter schema.
fn xml_value(parameters: &Value, key: &str, raw: &str) -> String {
    let ty = parameters
        .get("properties")
        .and_then(|p| p.get(key))
        .and_then(|s| s.get("type"));
    let only_string = match ty {
        Some(Value::String(s)) => s == "string",
        Some(Value::Array(a)) => a.iter().all(|t| t == "string"),
        _ => false,
    };
    if !only_string && serde_json::from_str::<Value>(raw.trim()).is_ok() {
        return json_scan::minify(raw.trim());
    }
    Value::String(raw.to_string()).to_string()
}

/// One Qwen3-Coder call in `text`, which follows `<tool_call>`; `schema_of` gives a known
/// function's parameter schema by its name.
pub(crate) fn xml_call<'a>(text: &str, schema_of: impl Fn(&str) -> Option<&'a Value>) -> Step {
    let t = text.trim_start();
    let Some(after) = t.strip_prefix(FUNCTION) else {
        return if may_become(t, FUNCTION) {
            Step::Open(None)
        } else {
            Step::NotACall
        };
    };
    let Some(gt) = after.find('>') else {
        return Step::Open(None);
    };
    let name = &after[..gt];
    let Some(tool) = schema_of(name) else {
        return Step::NotACall;
    };
    let open = || Step::Open(Some(name.to_string()));
    let mut rest = &after[gt + 1..];
    let mut args = Vec::new();
    loop {
        let r = rest.trim_start();
        if let Some(end) = r.strip_prefix(FUNCTION_END) {
            let tail = end.trim_start();
            let tail = tail.strip_prefix(XML_CLOSE).unwrap_or(tail);
            let used = text.len() - tail.len();
            let body = format!("{{{}}}", args.join(","));
            return Step::Call(name.to_string(), body, used);
        }
        let Some(p) = r.strip_prefix(PARAMETER) else {
            return if may_become(r, FUNCTION_END) || may_become(r, PARAMETER) {
                open()
            } else {
                Step::NotACall
            };
        };
        let Some(gt) = p.find('>') else {
            return open();
        };
        let key = &p[..gt];
        let v = &p[gt + 1..];
        let v = v.strip_prefix('\n').unwrap_or(v);
        // The value ends at the first `\n</parameter>` (a value written without the
        // newline ends at `</parameter>`).
        let (raw, next) = match v.find(PARAMETER_END) {
            Some(e) => (&v[..e], &v[e + PARAMETER_END.len()..]),
            None => match v.find(&PARAMETER_END[1..]) {
                Some(e) => (&v[..e], &v[e + PARAMETER_END.len() - 1..]),
                None => return open(),
            },
        };
        let key_json = Value::String(key.to_string()).to_string();
        args.push(format!("{key_json}:{}", xml_value(tool, key, raw)));
        rest = next;
    }
}

/// A Python or JSON value at the start of `s`, as compact JSON, and the bytes it used.
/// `Err(true)`: the text ends inside it; `Err(false)`: no such value.
fn py_value(s: &str) -> Result<(String, usize), bool> {
    let t = s.trim_start();
    let lead = s.len() - t.len();
    let Some(c) = t.chars().next() else {
        return Err(true);
    };
    let (json, used) = match c {
        '"' | '\'' => {
            let mut out = String::new();
            let mut chars = t.char_indices().skip(1);
            let end = loop {
                let Some((i, ch)) = chars.next() else {
                    return Err(true);
                };
                match ch {
                    '\\' => {
                        let Some((_, e)) = chars.next() else {
                            return Err(true);
                        };
                        out.push(match e {
                            'n' => '\n',
                            't' => '\t',
                            'r' => '\r',
                            '0' => '\0',
                            other => other,
                        });
                    }
                    q if q == c => break i + 1,
                    other => out.push(other),
                }
            };
            (Value::String(out).to_string(), end)
        }
        '[' | '{' => {
            let close = if c == '[' { ']' } else { '}' };
            let mut out = String::from(c);
            let mut i = 1;
            let mut first = true;
            loop {
                let r = t[i..].trim_start();
                i = t.len() - r.len();
                if r.is_empty() {
                    return Err(true);
                }
                if r.starts_with(close) {
                    out.push(close);
                    i += 1;
                    break;
                }
                if !first {
                    let Some(a) = r.strip_prefix(',') else {
                        return Err(false);
                    };
                    out.push(',');
                    i = t.len() - a.len();
                }
                first = false;
                if c == '{' {
                    let (k, used) = py_value(&t[i..])?;
                    if !k.starts_with('"') {
                        return Err(false);
                    }
                    out += &k;
                    i += used;
                    let r = t[i..].trim_start();
                    let Some(a) = r.strip_prefix(':') else {
                        return Err(r.is_empty());
                    };
                    out.push(':');
                    i = t.len() - a.len();
                }
                let (v, used) = py_value(&t[i..])?;
                out += &v;
                i += used;
            }
            (out, i)
        }
        _ => {
            let end = t
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.')))
                .ok_or(true)?;
            let word = &t[..end];
            let json = match word {
                "True" | "true" => "true".to_string(),
                "False" | "false" => "false".to_string(),
                "None" | "null" => "null".to_string(),
                w if matches!(serde_json::from_str::<Value>(w), Ok(Value::Number(_))) => {
                    w.to_string()
                }
                _ => return Err(false),
            };
            (json, end)
        }
    };
    Ok((json, lead + used))
}

/// One LFM2 call at the start of `text` (inside the list: `name(key=value, …)`), and the
/// bytes it used up to its `)`.
pub(crate) fn lfm2_call(text: &str, knows: impl Fn(&str) -> bool) -> Step {
    let t = text.trim_start();
    let Some(paren) = t.find('(') else {
        let name_like = t
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        return if name_like {
            Step::Open(None)
        } else {
            Step::NotACall
        };
    };
    let name = &t[..paren];
    if !knows(name) {
        return Step::NotACall;
    }
    let open = || Step::Open(Some(name.to_string()));
    let mut i = paren + 1;
    let mut args = Vec::new();
    loop {
        let r = t[i..].trim_start();
        i = t.len() - r.len();
        if r.is_empty() {
            return open();
        }
        if r.starts_with(')') {
            let used = text.len() - t.len() + i + 1;
            return Step::Call(name.to_string(), format!("{{{}}}", args.join(",")), used);
        }
        if !args.is_empty() {
            let Some(a) = r.strip_prefix(',') else {
                return Step::NotACall;
            };
            i = t.len() - a.trim_start().len();
        }
        let r = &t[i..];
        let Some(eq) = r.find('=') else {
            return open();
        };
        let key = r[..eq].trim();
        if key.is_empty() || !key.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return Step::NotACall;
        }
        match py_value(&r[eq + 1..]) {
            Ok((v, used)) => {
                args.push(format!("{}:{v}", Value::String(key.to_string())));
                i += eq + 1 + used;
            }
            Err(true) => return open(),
            Err(false) => return Step::NotACall,
        }
    }
}

/// The calls of an LFM2 list in `text`, which follows `<|tool_call_start|>`: the calls read
/// (the last one open when the text ends inside it), the bytes used (through
/// `<|tool_call_end|>`), and whether the list is closed. None: not a list of calls of known
/// tools.
pub(crate) fn lfm2_list(
    text: &str,
    knows: impl Fn(&str) -> bool,
) -> Option<(Vec<Step>, usize, bool)> {
    let t = text.trim_start();
    if t.is_empty() {
        return Some((Vec::new(), text.len(), false));
    }
    let body = t.strip_prefix('[')?;
    let mut i = text.len() - body.len();
    let mut steps = Vec::new();
    loop {
        let r = text[i..].trim_start();
        i = text.len() - r.len();
        if r.is_empty() {
            return Some((steps, i, false));
        }
        if let Some(after) = r.strip_prefix(']') {
            let tail = after.trim_start();
            let tail = tail.strip_prefix(LFM2_CLOSE).unwrap_or(tail);
            return Some((steps, text.len() - tail.len(), true));
        }
        if !steps.is_empty() {
            i = text.len() - r.strip_prefix(',')?.len();
        }
        match lfm2_call(&text[i..], &knows) {
            Step::NotACall => return None,
            s @ Step::Open(_) => {
                steps.push(s);
                return Some((steps, text.len(), false));
            }
            Step::Call(name, args, used) => {
                steps.push(Step::Call(name, args, 0));
                i += used;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn xml_values_follow_their_schema() {
        let t = json!({"type": "object",
            "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}});
        let find = |n: &str| (n == "f").then_some(&t);
        let text = "\n<function=f>\n<parameter=n>\n12\n</parameter>\n<parameter=s>\n12\n</parameter>\n</function>\n</tool_call>";
        assert_eq!(
            xml_call(text, find),
            Step::Call("f".into(), r#"{"n":12,"s":"12"}"#.into(), text.len())
        );
        assert_eq!(
            xml_call("\n<function=f>\n<parameter=n>\n1", find),
            Step::Open(Some("f".into()))
        );
        assert_eq!(xml_call("\n<functi", find), Step::Open(None));
        assert_eq!(xml_call("\n<function=g>\n", find), Step::NotACall);
    }

    #[test]
    fn python_values_become_json() {
        assert_eq!(
            py_value(r#""a\n\"b\"" x"#),
            Ok((r#""a\n\"b\"""#.into(), 10))
        );
        assert_eq!(
            py_value("{'a': True, \"b\": [1, None, 2.5]}"),
            Ok((r#"{"a":true,"b":[1,null,2.5]}"#.into(), 32))
        );
        assert_eq!(py_value("[1, "), Err(true));
        assert_eq!(py_value("(1)"), Err(false));
    }
}
