//! Rendering Hugging Face Jinja chat templates with `minijinja`, as llama.cpp's Jinja engine
//! renders them (its `common_chat_templates_apply` path):
//!
//! - the environment of Hugging Face's `apply_chat_template`: `trim_blocks`,
//!   `lstrip_blocks`, `raise_exception`, Python string methods (`.strip()`, `.split()`,
//!   `.startswith()`…);
//! - the variables llama.cpp passes: `messages`, `add_generation_prompt`, `bos_token`,
//!   `eos_token`, `enable_thinking` (Qwen3's `<think>` switch; true unless turned off) and the
//!   function `strftime_now`; for the Llama 3.x templates (those with an `ipython` header)
//!   `date_string`, today's date as `%d %b %Y`, and `tools_in_user_message = false`;
//! - a template that ignores a leading system message (Gemma's, which raises on it) gets
//!   the system text merged into the next message, `system + "\n" + content`, as llama.cpp
//!   does for templates without a system role.
//!
//! Dates are UTC (llama.cpp uses the local time zone).
//!
//! A template's work is bounded: minijinja's fuel ([`fuel`]) bounds its steps, and its
//! compiled instructions are rewritten ([`bounds`](super::bounds)) so that no value it makes
//! (by `~`, `+`, `*`, a filter, a method, a call or a capture) and no output it writes passes
//! the caller's byte limit ([`MAX_RENDERED_BYTES`] by default): `{% for %}{{ 'x' * 10**8 }}
//! {% endfor %}` and `{% set ns.s = ns.s ~ ns.s %}` in a loop end in an error instead of
//! filling the memory. The filters and string methods that can make a value far larger than
//! their inputs (`replace`, `join`, `indent`, `format`) check the size of what they would
//! make against the same limit first. minijinja caps a repeated string (`'x' * n`) at 100 MB
//! and `range` at 100,000 items itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::{machinery, Environment, Error, ErrorKind, State, Value};

use super::bounds;
use super::message::{ChatError, Message};

/// The values a template may read besides the conversation (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateVars {
    /// `enable_thinking`: false asks a thinking model (Qwen3) to answer without thinking
    /// (its template then writes an empty `<think>\n\n</think>\n\n` block).
    pub enable_thinking: bool,
    /// "Now", in seconds since 1970-01-01 UTC: the date `date_string` and `strftime_now` give.
    pub now_unix: i64,
}

impl Default for TemplateVars {
    /// Thinking on, the current time.
    fn default() -> TemplateVars {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        TemplateVars {
            enable_thinking: true,
            now_unix: now,
        }
    }
}

/// The header llama.cpp recognises the Llama 3.x templates by (they take `date_string`).
const LLAMA3_MARKER: &str = "<|start_header_id|>ipython<|end_header_id|>";

/// Text that marks the system message when probing whether a template shows it.
const SYSTEM_PROBE: &str = "<ggrs system probe>";

/// Most bytes a Jinja chat template may write for one conversation unless the caller sets
/// its own limit ([`ChatTemplate::render_limited`](super::ChatTemplate::render_limited)).
pub const MAX_RENDERED_BYTES: usize = 64 << 20;

/// Renders `source` for `messages`, writing at most `max_bytes` (see the [module docs](self)).
pub(crate) fn render(
    source: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    [bos_token, eos_token]: [&str; 2],
    vars: &TemplateVars,
    max_bytes: usize,
    tools: Option<&serde_json::Value>,
) -> Result<String, ChatError> {
    let too_big = Arc::new(AtomicBool::new(false));
    let mut env = environment(vars.now_unix);
    bound_amplifiers(&mut env, max_bytes, too_big.clone());
    bounds::install(&mut env, max_bytes, too_big.clone());
    env.set_fuel(Some(fuel(messages.len())));
    let tmpl = env.template_from_str(source)?;
    let compiled = machinery::get_compiled_template(&tmpl);
    let code = bounds::bounded(&compiled.instructions, max_bytes);
    let blocks = bounds::bounded_blocks(&compiled.blocks, max_bytes);
    let run = |msgs: &[Message]| -> Result<String, Error> {
        let msgs: Vec<Value> = msgs.iter().map(message_value).collect();
        let mut ctx: Vec<(&str, Value)> = vec![
            ("messages", Value::from(msgs)),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("bos_token", Value::from(bos_token)),
            ("eos_token", Value::from(eos_token)),
            ("enable_thinking", Value::from(vars.enable_thinking)),
        ];
        if let Some(t) = tools {
            ctx.push(("tools", Value::from_serialize(t)));
        }
        // llama.cpp's extra context for every template (FireFunction's writes it).
        ctx.push(("datetime", Value::from(strftime(vars.now_unix, "%b %d %Y"))));
        if source.contains(LLAMA3_MARKER) {
            ctx.push((
                "date_string",
                Value::from(strftime(vars.now_unix, "%d %b %Y")),
            ));
            ctx.push(("tools_in_user_message", Value::from(false)));
        }
        let mut text = String::new();
        machinery::Vm::new(&env).eval(
            &code,
            Value::from_iter(ctx),
            &blocks,
            &mut machinery::make_string_output(&mut text),
            compiled.initial_auto_escape,
        )?;
        if text.len() > max_bytes {
            return Err(bounds::too_big_error(text.len(), max_bytes, &too_big));
        }
        Ok(text)
    };
    let first_is_system = messages.first().is_some_and(|m| m.role == "system");
    let out = if first_is_system && !shows_system(&run) {
        run(&merge_system(messages))
    } else {
        run(messages)
    };
    out.map_err(|e| {
        if too_big.load(Ordering::Relaxed) {
            ChatError::Template {
                detail: format!(
                    "the template wrote or built more than the limit of {max_bytes} bytes for \
                     {} messages (a runaway loop, or a huge repetition?)",
                    messages.len()
                ),
            }
        } else if e.kind() == ErrorKind::OutOfFuel {
            ChatError::Template {
                detail: format!(
                    "the template did not finish within its budget of {} steps for {} \
                     messages (a runaway loop?)",
                    fuel(messages.len()),
                    messages.len()
                ),
            }
        } else {
            e.into()
        }
    })
}

/// A message as templates read it (OpenAI's shape): `role`, `content`, and where present
/// `tool_calls` (`[{id, type: "function", function: {name, arguments}}]`, the arguments
/// as a JSON object, as Hugging Face and llama.cpp pass them), `tool_call_id`, `name` and
/// `reasoning_content` (also as `thinking`, GPT-OSS's name for it).
fn message_value(m: &Message) -> Value {
    let mut fields: Vec<(&str, Value)> = vec![
        ("role", Value::from(m.role.as_str())),
        ("content", Value::from(m.content.as_str())),
    ];
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|c| {
                let args: serde_json::Value = serde_json::from_str(&c.arguments)
                    .unwrap_or_else(|_| serde_json::Value::String(c.arguments.clone()));
                let function = Value::from_iter([
                    ("name", Value::from(c.name.as_str())),
                    ("arguments", Value::from_serialize(&args)),
                ]);
                Value::from_iter([
                    ("id", Value::from(c.id.as_str())),
                    ("type", Value::from("function")),
                    ("function", function),
                ])
            })
            .collect();
        fields.push(("tool_calls", Value::from(calls)));
    }
    if let Some(id) = &m.tool_call_id {
        fields.push(("tool_call_id", Value::from(id.as_str())));
    }
    if let Some(n) = &m.name {
        fields.push(("name", Value::from(n.as_str())));
    }
    if let Some(r) = &m.reasoning_content {
        fields.push(("reasoning_content", Value::from(r.as_str())));
        // GPT-OSS's template reads earlier reasoning as `thinking` (llama.cpp copies it).
        fields.push(("thinking", Value::from(r.as_str())));
    }
    Value::from_iter(fields)
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent)`, as Hugging Face's
/// `tojson` filter writes it: `", "` and `": "` separators, keys in their order, no HTML
/// escaping (minijinja's own filter writes compact, HTML-safe JSON, which would change the
/// prompt the model was trained on).
fn tojson(value: Value, indent: Option<usize>) -> Result<String, Error> {
    let v: serde_json::Value = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    let mut out = String::new();
    write_json(&v, indent, 0, &mut out);
    Ok(out)
}

fn write_json(v: &serde_json::Value, indent: Option<usize>, depth: usize, out: &mut String) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(a) if !a.is_empty() => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                write_json(x, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(o) if !o.is_empty() => {
            out.push('{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                out.push_str(&J::String(k.clone()).to_string());
                out.push_str(": ");
                write_json(x, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Template instructions a conversation of `n` messages may take (minijinja's fuel; one
/// per instruction): real chat templates take a few hundred per message, so this is
/// generous, and a runaway template (nested loops over `range(100000)`) ends in an error
/// within a second instead of running for hours.
pub fn fuel(n: usize) -> u64 {
    const BASE: u64 = 1_000_000;
    const PER_MESSAGE: u64 = 5_000;
    const MAX: u64 = 50_000_000;
    BASE.saturating_add(PER_MESSAGE.saturating_mul(n as u64))
        .min(MAX)
}

/// Whether `source` compiles as a Jinja template (the error says where it does not).
pub fn check(source: &str) -> Result<(), ChatError> {
    environment(0).template_from_str(source)?;
    Ok(())
}

/// Whether the template writes a leading system message (llama.cpp's `supports_system_role`,
/// which asks whether the template reads the system message's content; here: whether the
/// content appears in the output of a system + user conversation that renders).
fn shows_system(run: &impl Fn(&[Message]) -> Result<String, Error>) -> bool {
    let probe = [Message::system(SYSTEM_PROBE), Message::user("User message")];
    run(&probe).is_ok_and(|text| text.contains(SYSTEM_PROBE))
}

/// The conversation without its leading system message, whose text starts the next message
/// (`system + "\n" + content`); a system message alone is dropped (llama.cpp's
/// `system_message_not_supported`).
fn merge_system(messages: &[Message]) -> Vec<Message> {
    let mut out = messages[1..].to_vec();
    if let Some(next) = out.first_mut() {
        next.content = format!("{}\n{}", messages[0].content, next.content);
    }
    out
}

/// An error (and `too_big` set) when a value of `bytes` would pass `max_bytes`.
fn check_size(bytes: usize, max_bytes: usize, too_big: &AtomicBool) -> Result<(), Error> {
    if bytes > max_bytes {
        too_big.store(true, Ordering::Relaxed);
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("a value of {bytes} bytes is over the template's limit of {max_bytes}"),
        ));
    }
    Ok(())
}

/// Bytes `s.replace(old, new)` makes.
fn replaced_len(s: &str, old: &str, new: &str) -> usize {
    let hits = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old).count()
    };
    s.len().saturating_add(hits.saturating_mul(new.len()))
}

/// Bytes joining `items` with `sep` makes (strings by their length, other values by the
/// text they write).
fn joined_len(items: &Value, sep: &str) -> Result<usize, Error> {
    let mut n = 0usize;
    let mut bytes = 0usize;
    for item in items.try_iter()? {
        n += 1;
        bytes = bytes.saturating_add(
            item.as_str()
                .map_or_else(|| item.to_string().len(), str::len),
        );
    }
    Ok(bytes.saturating_add(n.saturating_sub(1).saturating_mul(sep.len())))
}

/// The `replace` and `join` filters and string methods, checking the size of what they
/// would make against `max_bytes` first (`'x' * 1000` replaced by itself a few times is
/// exponential).
fn bound_amplifiers(env: &mut Environment<'_>, max_bytes: usize, too_big: Arc<AtomicBool>) {
    let flag = too_big.clone();
    env.add_filter(
        "replace",
        move |s: String, old: String, new: String| -> Result<String, Error> {
            check_size(replaced_len(&s, &old, &new), max_bytes, &flag)?;
            Ok(s.replace(&old, &new))
        },
    );
    let flag = too_big.clone();
    env.add_filter(
        "join",
        move |items: Value, sep: Option<String>| -> Result<String, Error> {
            let sep = sep.unwrap_or_default();
            check_size(joined_len(&items, &sep)?, max_bytes, &flag)?;
            let mut out = String::new();
            for (i, item) in items.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(&sep);
                }
                match item.as_str() {
                    Some(s) => out.push_str(s),
                    None => out.push_str(&item.to_string()),
                }
            }
            Ok(out)
        },
    );
    env.set_unknown_method_callback(
        move |state: &State, value: &Value, method: &str, args: &[Value]| {
            if let Some(s) = value.as_str() {
                let size = match (method, args) {
                    ("replace", [old, new, ..]) => {
                        Some(replaced_len(s, &old.to_string(), &new.to_string()))
                    }
                    ("join", [items]) => Some(joined_len(items, s)?),
                    _ => None,
                };
                if let Some(size) = size {
                    check_size(size, max_bytes, &too_big)?;
                }
            }
            minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
        },
    );
}

fn environment<'s>(now_unix: i64) -> Environment<'s> {
    let mut env = Environment::new();
    // Hugging Face renders chat templates with these two options on.
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    // `str.strip()`, `.startswith()`, `dict.items()`… as templates written for Python use.
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_filter("tojson", |v: Value, kwargs: minijinja::value::Kwargs| {
        let indent: Option<usize> = kwargs.get("indent")?;
        kwargs.assert_all_used()?;
        tojson(v, indent).map(Value::from_safe_string)
    });
    env.add_function("strftime_now", move |format: String| {
        strftime(now_unix, &format)
    });
    env
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// The (year, month 1–12, day 1–31) of day `days` since 1970-01-01 (proleptic Gregorian).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Eras of 400 years (146097 days) starting on 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of the era, 0..146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of the era
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the year from March 1
    let mp = (5 * doy + 2) / 153; // month from March, 0..11
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// C's `strftime` of the UTC time `unix` for the conversions templates use (`%d %b %B %m %Y
/// %y %e %H %M %S %a %A %j %%`); others are written as they are.
pub(crate) fn strftime(unix: i64, format: &str) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let month = MONTHS[(m - 1) as usize];
    // 1970-01-01 was a Thursday (index 3 from Monday).
    let weekday = WEEKDAYS[(days + 3).rem_euclid(7) as usize];
    let yday = days - days_from_year_start(y);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out += &format!("{d:02}"),
            Some('e') => out += &format!("{d:2}"),
            Some('m') => out += &format!("{m:02}"),
            Some('b') => out += &month[..3],
            Some('B') => out += month,
            Some('Y') => out += &y.to_string(),
            Some('y') => out += &format!("{:02}", y.rem_euclid(100)),
            Some('H') => out += &format!("{:02}", secs / 3600),
            Some('M') => out += &format!("{:02}", secs / 60 % 60),
            Some('S') => out += &format!("{:02}", secs % 60),
            Some('a') => out += &weekday[..3],
            Some('A') => out += weekday,
            Some('j') => out += &format!("{:03}", yday + 1),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days from 1970-01-01 to January 1 of `year`.
fn days_from_year_start(year: i64) -> i64 {
    // 365 days a year, plus the leap days of the years before `year` since 1970.
    let y = year - 1;
    let leaps = |y: i64| y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400);
    365 * (year - 1970) + leaps(y) - leaps(1969)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetime_is_llama_cpps() {
        let vars = TemplateVars {
            enable_thinking: true,
            now_unix: 86_400 * 31,
        };
        let out = render(
            "{{ datetime }}|{{ messages[0].thinking }}",
            &[Message {
                reasoning_content: Some("r".into()),
                ..Message::assistant("x")
            }],
            false,
            ["", ""],
            &vars,
            MAX_RENDERED_BYTES,
            None,
        )
        .unwrap();
        assert_eq!(out, "Feb 01 1970|r");
    }

    #[test]
    fn a_sum_of_lists_is_a_list() {
        // minijinja keeps `a + b` lazy; the bounds make it a list, as Jinja2 and llama.cpp's
        // engine do: indexable from the end, and doubling it stays linear.
        let out = render(
            "{% set ns = namespace(l=[1]) %}{% for i in range(16) %}\
             {% set ns.l = ns.l + ns.l %}{% endfor %}\
             {{ ns.l|length }} {{ (ns.l + [7])[-1] }} {{ ([1, 2] + [3])[1:] }} \
             {{ (ns.l + ns.l) is sequence }}",
            &[Message::user("x")],
            false,
            ["", ""],
            &TemplateVars::default(),
            MAX_RENDERED_BYTES,
            None,
        )
        .unwrap();
        assert_eq!(out, "65536 7 [2, 3] True");
    }

    #[test]
    fn messages_carry_their_reasoning_to_templates() {
        let mut m = Message::assistant("done");
        m.reasoning_content = Some("think first".into());
        let v = message_value(&m);
        assert_eq!(
            v.get_attr("reasoning_content").unwrap().as_str(),
            Some("think first")
        );
        // Absent, not empty, when there is none (templates test `is defined`).
        let v = message_value(&Message::assistant("x"));
        assert!(v.get_attr("reasoning_content").unwrap().is_undefined());
    }

    #[test]
    fn dates_as_strftime_writes_them() {
        assert_eq!(
            strftime(0, "%d %b %Y %H:%M:%S %A %j"),
            "01 Jan 1970 00:00:00 Thursday 001"
        );
        // 2024-07-26 12:34:56 UTC, a Friday, day 208 of a leap year.
        assert_eq!(
            strftime(1_721_997_296, "%d %b %Y, %B %e %a %m/%y %j %%"),
            "26 Jul 2024, July 26 Fri 07/24 208 %"
        );
        // 2000-02-29 and 2100-03-01 (2100 is not a leap year).
        assert_eq!(strftime(951_782_400, "%Y-%m-%d %j"), "2000-02-29 060");
        assert_eq!(strftime(4_107_542_400, "%Y-%m-%d %A"), "2100-03-01 Monday");
        // Before 1970.
        assert_eq!(strftime(-86_400, "%Y-%m-%d %a"), "1969-12-31 Wed");
    }
}
