//! Size bounds on what a Jinja chat template builds, not only on what it writes.
//!
//! minijinja evaluates `~`, `+` and `*`, filters, methods and `{% set %}…{% endset %}`
//! captures without a hook, so `{% set ns.s = ns.s ~ ns.s %}` in a loop of 64 doubles a
//! value to 2⁶⁴ bytes in 64 steps, far inside any step budget. Here the compiled template's
//! instructions are rewritten before they run (minijinja's `unstable_machinery`):
//!
//! - after every instruction that makes a value from others (`~`, `+`, `*`, a filter, a
//!   method, a function or macro call, the end of a capture, a list or map literal), and after a constant larger
//!   than the limit (minijinja folds `'x' * 10**8` at compile time), comes a call of [`CHECK`],
//!   which refuses a value whose text would be longer than the limit (the size of a list
//!   or map is the text it writes, measured lazily and stopped at the limit), so no value
//!   grows past twice the limit before the template fails;
//! - every piece of the template's literal text is emitted as a value, so that all output
//!   passes the environment's formatter, which counts it (captures included) and stops the
//!   rendering past [`EMIT_FACTOR`] times the limit;
//! - before every `+` comes a call of [`NULL_CONCAT`], which makes an undefined or none
//!   operand next to a string the empty string (llama.cpp's Jinja engine adds them so, and
//!   FireFunction v2's template adds the undefined `functions` to its system text);
//! - jump targets are moved to the rewritten positions.
//!
//! [`CHECK`] is not an identifier, so a template cannot define or shadow it. Filters that
//! take a size (`indent`'s width, a width in a `format` string) are checked before they
//! run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use minijinja::machinery::{Instruction, Instructions};
use minijinja::value::{Rest, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State, Value};

/// The function called after each value-making instruction (a name no template can write).
pub(super) const CHECK: &str = "ggrs size check";

/// The function called after each `+`: [`CHECK`], and a lazy concatenation of sequences
/// made a list. minijinja keeps `a + b` of two sequences lazy, so `{% set l = l + l %}` in a
/// loop builds a chain that each later walk goes down whole (measured: 30 s for one
/// rendering of 64 doublings under a 1 MiB limit); a list is what Jinja2 and llama.cpp's
/// engine make of it, and it keeps every walk linear.
pub(super) const CHECK_SUM: &str = "ggrs size check of a sum";

/// The function called before each `+`: its operands, an undefined or none one next to a
/// string made `""`, as a list that `UnpackList` puts back on the stack.
pub(super) const NULL_CONCAT: &str = "ggrs null concat";

/// Output (captures and macro bodies included, which are written more than once when a
/// macro's text is written again) a template may emit, in multiples of its limit.
pub(super) const EMIT_FACTOR: usize = 4;

/// The size `v` writes as text (`{{ v }}`), counted up to `limit + 1` at most: strings by
/// their bytes, lists and maps by their items plus the separators, others by their text.
pub(super) fn text_len(v: &Value, limit: usize) -> usize {
    let mut n = 0usize;
    measure(v, limit, &mut n, 0);
    n.min(limit.saturating_add(1))
}

fn measure(v: &Value, limit: usize, n: &mut usize, depth: usize) {
    if *n > limit {
        return;
    }
    match v.kind() {
        ValueKind::String => *n += v.as_str().map_or(0, str::len) + if depth > 0 { 2 } else { 0 },
        ValueKind::Bytes => *n += v.as_bytes().map_or(0, <[u8]>::len) * 4,
        ValueKind::Seq | ValueKind::Iterable | ValueKind::Map if depth < 64 => {
            *n += 2;
            let is_map = v.kind() == ValueKind::Map;
            if let Ok(items) = v.try_iter() {
                for item in items {
                    *n += 2;
                    measure(&item, limit, n, depth + 1);
                    if is_map {
                        if let Ok(value) = v.get_item(&item) {
                            *n += 2;
                            measure(&value, limit, n, depth + 1);
                        }
                    }
                    if *n > limit {
                        return;
                    }
                }
            }
        }
        ValueKind::Seq | ValueKind::Iterable | ValueKind::Map => *n += 2,
        _ => *n += v.to_string().len(),
    }
}

/// Instructions after which [`CHECK`] runs: each leaves one new value on the stack.
fn makes_a_value(i: &Instruction<'_>) -> bool {
    matches!(
        i,
        Instruction::StringConcat
            | Instruction::Add
            | Instruction::Mul
            | Instruction::ApplyFilter(..)
            | Instruction::CallMethod(..)
            | Instruction::CallFunction(..)
            | Instruction::CallObject(..)
            | Instruction::EndCapture
            | Instruction::BuildList(_)
            | Instruction::BuildMap(_)
    )
}

/// Whether `i` loads a constant larger than `max_bytes` (minijinja folds `'x' * 10**8` into
/// one at compile time): checked when it runs.
fn loads_too_much(i: &Instruction<'_>, max_bytes: usize) -> bool {
    matches!(i, Instruction::LoadConst(v) if text_len(v, max_bytes) > max_bytes)
}

/// How many instructions `i` becomes.
fn width(i: &Instruction<'_>, max_bytes: usize) -> u32 {
    if matches!(i, Instruction::Add) {
        4
    } else if matches!(i, Instruction::EmitRaw(_))
        || makes_a_value(i)
        || loads_too_much(i, max_bytes)
    {
        2
    } else {
        1
    }
}

/// `code` rewritten as the [module docs](self) say, for values of at most `max_bytes`.
pub(super) fn bounded<'s>(code: &Instructions<'s>, max_bytes: usize) -> Instructions<'s> {
    let n = code.len() as u32;
    let mut at = Vec::with_capacity(code.len() + 1);
    let mut next = 0u32;
    for i in 0..n {
        at.push(next);
        next += code.get(i).map_or(1, |x| width(x, max_bytes));
    }
    at.push(next);
    let to = |x: u32| at.get(x as usize).copied().unwrap_or(next);
    let mut out = Instructions::new(code.name(), code.source());
    for i in 0..n {
        let Some(ins) = code.get(i) else { break };
        let span = code.get_span(i);
        let line = code.get_line(i);
        let mut push = |x: Instruction<'s>| {
            match (span, line) {
                (Some(s), _) => out.add_with_span(x, s),
                (None, Some(l)) => out.add_with_line(x, u16::try_from(l).unwrap_or(u16::MAX)),
                (None, None) => out.add(x),
            };
        };
        match ins.clone() {
            Instruction::EmitRaw(s) => {
                push(Instruction::LoadConst(Value::from_safe_string(
                    s.to_string(),
                )));
                push(Instruction::Emit);
            }
            Instruction::Add => {
                push(Instruction::CallFunction(NULL_CONCAT, Some(2)));
                push(Instruction::UnpackList(2));
                push(Instruction::Add);
                push(Instruction::CallFunction(CHECK_SUM, Some(1)));
            }
            Instruction::Jump(x) => push(Instruction::Jump(to(x))),
            Instruction::JumpIfFalse(x) => push(Instruction::JumpIfFalse(to(x))),
            Instruction::JumpIfFalseOrPop(x) => push(Instruction::JumpIfFalseOrPop(to(x))),
            Instruction::JumpIfTrueOrPop(x) => push(Instruction::JumpIfTrueOrPop(to(x))),
            Instruction::Iterate(x) => push(Instruction::Iterate(to(x))),
            Instruction::BuildMacro(name, x, flags) => {
                push(Instruction::BuildMacro(name, to(x), flags))
            }
            other if makes_a_value(&other) || loads_too_much(&other, max_bytes) => {
                push(other);
                push(Instruction::CallFunction(CHECK, Some(1)));
            }
            other => push(other),
        }
    }
    out
}

/// The blocks of a compiled template, rewritten.
pub(super) fn bounded_blocks<'s>(
    blocks: &BTreeMap<&'s str, Instructions<'s>>,
    max_bytes: usize,
) -> BTreeMap<&'s str, Instructions<'s>> {
    blocks
        .iter()
        .map(|(k, v)| (*k, bounded(v, max_bytes)))
        .collect()
}

/// The error (and `too_big` set) for a value of `bytes` past `max_bytes`.
pub(super) fn too_big_error(bytes: usize, max_bytes: usize, too_big: &AtomicBool) -> Error {
    too_big.store(true, Ordering::Relaxed);
    Error::new(
        ErrorKind::InvalidOperation,
        format!("a value of more than {max_bytes} bytes is over the template's limit ({bytes})"),
    )
}

/// The largest decimal number written in `s` (a width in a format string), or 0.
fn largest_number(s: &str) -> usize {
    s.split(|c: char| !c.is_ascii_digit())
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().unwrap_or(usize::MAX))
        .max()
        .unwrap_or(0)
}

/// An upper bound of what formatting `fmt` with `args` makes: each placeholder (a `marker`
/// character) may write the largest argument padded to the largest width in `fmt`.
pub(super) fn formatted_len(fmt: &str, marker: char, args: &[Value], limit: usize) -> usize {
    let widest = args.iter().map(|a| text_len(a, limit)).max().unwrap_or(0);
    let slots = fmt.matches(marker).count();
    fmt.len()
        .saturating_add(slots.saturating_mul(widest.saturating_add(largest_number(fmt))))
}

/// Installs [`CHECK`], the counting formatter and the checked `indent` and `format` filters
/// on `env`, for a limit of `max_bytes` (`too_big` is set when one of them refuses).
pub(super) fn install(env: &mut Environment<'_>, max_bytes: usize, too_big: Arc<AtomicBool>) {
    let flag = too_big.clone();
    env.add_function(CHECK, move |v: Value| -> Result<Value, Error> {
        let n = text_len(&v, max_bytes);
        if n > max_bytes {
            return Err(too_big_error(n, max_bytes, &flag));
        }
        Ok(v)
    });
    let flag = too_big.clone();
    env.add_function(CHECK_SUM, move |v: Value| -> Result<Value, Error> {
        let n = text_len(&v, max_bytes);
        if n > max_bytes {
            return Err(too_big_error(n, max_bytes, &flag));
        }
        if v.kind() == ValueKind::Iterable {
            if let Ok(items) = v.try_iter() {
                return Ok(Value::from(items.collect::<Vec<Value>>()));
            }
        }
        Ok(v)
    });
    env.add_function(NULL_CONCAT, |a: Value, b: Value| -> Value {
        let empty = |v: &Value| v.is_undefined() || v.is_none();
        let (a, b) = match (a.kind(), b.kind()) {
            (ValueKind::String, _) if empty(&b) => (a, Value::from("")),
            (_, ValueKind::String) if empty(&a) => (Value::from(""), b),
            _ => (a, b),
        };
        // `UnpackList` leaves the first item on top, where `+` takes its right operand.
        Value::from(vec![b, a])
    });
    let flag = too_big.clone();
    let emitted = AtomicUsize::new(0);
    let budget = max_bytes.saturating_mul(EMIT_FACTOR);
    env.set_formatter(move |out, state, v| {
        let n = text_len(v, budget);
        let total = emitted.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        if total > budget {
            return Err(too_big_error(total, budget, &flag));
        }
        minijinja::escape_formatter(out, state, v)
    });
    env.add_filter("ggrs indent", minijinja::filters::indent);
    let flag = too_big.clone();
    env.add_filter(
        "indent",
        move |state: &State, args: Rest<Value>| -> Result<Value, Error> {
            let text = args.first().map_or(0, |v| text_len(v, max_bytes));
            let lines = args
                .first()
                .and_then(Value::as_str)
                .map_or(1, |s| s.matches('\n').count() + 1);
            let width = args
                .get(1..)
                .unwrap_or_default()
                .iter()
                .flat_map(|a| match a.kind() {
                    ValueKind::Map => a
                        .try_iter()
                        .into_iter()
                        .flatten()
                        .filter_map(|k| a.get_item(&k).ok())
                        .collect(),
                    _ => vec![a.clone()],
                })
                .filter_map(|a| a.as_usize())
                .max()
                .unwrap_or(4);
            let n = text.saturating_add(lines.saturating_mul(width));
            if n > max_bytes {
                return Err(too_big_error(n, max_bytes, &flag));
            }
            state.apply_filter("ggrs indent", &args)
        },
    );
    env.add_filter("ggrs format", minijinja::filters::format);
    env.add_filter(
        "format",
        move |state: &State, args: Rest<Value>| -> Result<Value, Error> {
            let fmt = args.first().and_then(Value::as_str).unwrap_or_default();
            let n = formatted_len(fmt, '%', args.get(1..).unwrap_or_default(), max_bytes);
            if n > max_bytes {
                return Err(too_big_error(n, max_bytes, &too_big));
            }
            state.apply_filter("ggrs format", &args)
        },
    );
}
