//! Every crate of the workspace depends on its own modules one way: the `crate::`,
//! `super::` and `self::` paths in the code (not the comments or strings) of each `src/`
//! form no cycle between files. Test-only code (`#[cfg(test)]` modules and imports) is
//! left out: it is compiled with its file but may use any layer. In `ggrs-llama`, nothing but `lib.rs` goes through the crate
//! root's re-exports, and the architectures are named only by the registry (`arch/mod.rs`).
//!
//! A module naming its own submodules (`child::item`, `self::child::item`) is how a module
//! tree is built and does not count; a file reaching a parent, a sibling or another branch
//! (`super::`, `crate::`) does, and that is where cycles hide.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library crates and binaries of the workspace, each with a `src/` to check.
const CRATES: [&str; 6] = [
    "ggrs-core",
    "ggrs-llama",
    "ggrs-convert",
    "ggrs-server",
    "ggrs-cli",
    "ggrs-py",
];

/// Source files under `dir`, as paths relative to `src/`.
fn sources(src: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(src, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p.strip_prefix(src).unwrap().to_path_buf());
        }
    }
}

/// The module path a file defines: `a/b.rs` and `a/b/mod.rs` are `["a", "b"]`; the crate
/// roots (`lib.rs`, `main.rs`) are `[]`.
fn file_module(f: &Path) -> Vec<String> {
    let mut parts: Vec<String> = f
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") || parts == ["lib"] || parts == ["main"] {
        parts.pop();
    }
    parts
}

/// The file that defines module path `parts` (`["chat", "template"]`), as deep as files go.
fn module_file(src: &Path, parts: &[String]) -> Option<PathBuf> {
    for n in (0..=parts.len()).rev() {
        let base: PathBuf = parts[..n].iter().collect();
        let cands = if n == 0 {
            vec![PathBuf::from("lib.rs"), PathBuf::from("main.rs")]
        } else {
            vec![base.with_extension("rs"), base.join("mod.rs")]
        };
        for cand in cands {
            if src.join(&cand).is_file() {
                return Some(cand);
            }
        }
    }
    None
}

/// `text` with comments, string literals and char literals blanked (same length, so brace
/// depths and positions survive).
fn code_only(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2);
            blank(&mut out, i, end);
            i = end;
        } else if !ident_before && (b[i] == b'r' || b[i..].starts_with(b"br")) && {
            let s = if b[i] == b'b' { i + 2 } else { i + 1 };
            let hashes = b[s..].iter().take_while(|&&c| c == b'#').count();
            b.get(s + hashes) == Some(&b'"')
        } {
            let s = if b[i] == b'b' { i + 2 } else { i + 1 };
            let hashes = b[s..].iter().take_while(|&&c| c == b'#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = s + hashes + 1;
            let end = text[body..]
                .find(&close)
                .map_or(b.len(), |p| body + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, (j + 1).min(b.len()));
            i = j + 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{7f}'), or else a lifetime.
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|p| i + 2 + p + 1)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
            };
            match end {
                Some(e) => {
                    blank(&mut out, i, e);
                    i = e;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Splits `a::b::{c, d::e}` into full paths, each a list of segments.
fn expand_use_tree(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let mut head = prefix.to_vec();
        head.extend(segments(&tree[..open]));
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        // Split the group at top-level commas.
        let (mut depth, mut start) = (0, 0);
        for (k, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use_tree(&inner[start..k], &head, out);
                    start = k + 1;
                }
                _ => {}
            }
        }
        expand_use_tree(&inner[start..], &head, out);
    } else {
        let mut p = prefix.to_vec();
        let tree = tree.split(" as ").next().unwrap_or(tree);
        for s in segments(tree) {
            // `a::{self}` names `a`.
            if s != "self" || p.is_empty() {
                p.push(s);
            }
        }
        out.push(p);
    }
}

fn segments(p: &str) -> Vec<String> {
    p.split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "*")
        .map(str::to_string)
        .collect()
}

/// Every path of `text` that starts with `crate::`, `super::` or `self::` (a `use` group
/// expanded into one path per item), resolved to an absolute module path given that the
/// file defines module `here`. Paths inside inline modules (`mod x86 { use super::*; }`)
/// resolve from the inline module.
fn module_paths(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let code = code_only(text);
    let s = String::from_utf8_lossy(&code).into_owned();
    let b = s.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    // Inline modules open at this brace depth.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        let at_word = i == 0 || !is_ident(b[i - 1]);
        let here_now: Vec<String> = here
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        if at_word && s[i..].starts_with("#[cfg(") {
            // Test-only code (`#[cfg(test)] mod tests { … }`, `#[cfg(test)] use …;`) is
            // compiled with the crate but is not part of its module order: skip it.
            let attr_end = s[i..].find(']').map_or(b.len(), |p| i + p + 1);
            let attr = &s[i..attr_end];
            let after = s[attr_end..].trim_start();
            if attr.contains("test") && !attr.contains("not(test") {
                let block = match (after.find('{'), after.find(';')) {
                    (Some(open), Some(semi)) => open < semi,
                    (open, _) => open.is_some(),
                };
                let item_end = if after.starts_with("mod ") && block {
                    let open = attr_end + s[attr_end..].find('{').unwrap();
                    matching_brace(b, open)
                } else if after.starts_with("use ") {
                    s[attr_end..]
                        .find(';')
                        .map_or(b.len(), |p| attr_end + p + 1)
                } else {
                    attr_end
                };
                i = item_end;
                continue;
            }
            i = attr_end;
        } else if b[i] == b'{' {
            depth += 1;
            i += 1;
        } else if b[i] == b'}' {
            depth = depth.saturating_sub(1);
            if inline.last().is_some_and(|&(_, d)| d == depth) {
                inline.pop();
            }
            i += 1;
        } else if at_word && s[i..].starts_with("mod ") {
            let rest = &s[i + 4..];
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|&c| is_ident(c as u8))
                .collect();
            let after = rest.trim_start()[name.len()..].trim_start();
            if after.starts_with('{') {
                inline.push((name, depth));
            }
            i += 4;
        } else if at_word && s[i..].starts_with("use ") {
            let end = s[i..].find(';').map_or(b.len(), |p| i + p);
            let tree = &s[i + 4..end];
            let mut paths = Vec::new();
            expand_use_tree(tree, &[], &mut paths);
            for p in paths {
                if let Some(abs) = absolute(&p, &here_now) {
                    out.push(abs);
                }
            }
            i = end;
        } else if at_word
            && (s[i..].starts_with("crate::")
                || s[i..].starts_with("super::")
                || s[i..].starts_with("self::"))
            && (i == 0 || b[i - 1] != b'$' || s[i..].starts_with("crate::"))
        {
            let path: String = s[i..]
                .chars()
                .take_while(|&c| is_ident(c as u8) || c == ':')
                .collect();
            if let Some(abs) = absolute(&segments(&path), &here_now) {
                out.push(abs);
            }
            i += path.len().max(1);
        } else {
            i += 1;
        }
    }
    out
}

/// The position just after the `}` that closes the `{` at `open` in blanked code.
fn matching_brace(b: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    b.len()
}

/// `path` as seen from module `here`, made absolute; `None` when it names something outside
/// the crate (an external crate or a plain relative path).
fn absolute(path: &[String], here: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "self" => here.to_vec(),
        "super" => here.to_vec(),
        _ => return None,
    };
    let mut rest = &path[1..];
    if first == "super" {
        base.pop();
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The file-level dependencies of one crate's `src/`: file -> the files its paths name.
fn crate_deps(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    sources(src, src, &mut files);
    let mut deps: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for f in &files {
        let text = std::fs::read_to_string(src.join(f)).unwrap();
        let entry = deps.entry(f.clone()).or_default();
        let here = file_module(f);
        for path in module_paths(&text, &here) {
            if let Some(m) = module_file(src, &path) {
                // A module naming its own submodules is the tree being built, not a
                // dependency: only paths that leave a file's own subtree count.
                if !file_module(&m).starts_with(&here) {
                    entry.insert(m);
                }
            }
        }
    }
    deps
}

/// The groups of files that reach each other through their paths (the strongly connected
/// components of more than one file), each sorted; empty when the files form no cycle. The
/// crate roots (`lib.rs`, `main.rs`) declare the modules and re-export them, so they are
/// left out of the order.
fn cycles(deps: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    let roots = [Path::new("lib.rs"), Path::new("main.rs")];
    let reach = |from: &PathBuf| -> BTreeSet<PathBuf> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(f) = todo.pop() {
            for d in deps.get(&f).into_iter().flatten() {
                if !roots.contains(&d.as_path()) && seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&PathBuf, BTreeSet<PathBuf>> = deps
        .keys()
        .filter(|f| !roots.contains(&f.as_path()))
        .map(|f| (f, reach(f)))
        .collect();
    let mut out: Vec<Vec<PathBuf>> = Vec::new();
    for (f, r) in &reached {
        if !r.contains(*f) || out.iter().any(|c| c.contains(f)) {
            continue;
        }
        let group: Vec<PathBuf> = r
            .iter()
            .filter(|g| reached.get(g).is_some_and(|rg| rg.contains(*f)))
            .cloned()
            .collect();
        out.push(group);
    }
    out
}

#[test]
fn no_crate_has_an_import_cycle() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for krate in CRATES {
        let src = root.join(krate).join("src");
        let deps = crate_deps(&src);
        assert!(!deps.is_empty(), "{krate}: no sources found");
        for c in cycles(&deps) {
            let names: Vec<String> = c.iter().map(|p| p.display().to_string()).collect();
            found.push(format!("{krate}: {}", names.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "files that import each other (each line one cycle):\n{}",
        found.join("\n")
    );
}

#[test]
fn llama_layers() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ggrs-llama/src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    assert!(files.len() > 20, "found only {} files", files.len());
    for f in files.iter().filter(|f| *f != Path::new("lib.rs")) {
        let text = std::fs::read_to_string(src.join(f)).unwrap();
        for path in module_paths(&text, &file_module(f)) {
            let Some(first) = path.first() else { continue };
            assert!(
                first.chars().next().is_some_and(|c| c.is_lowercase()),
                "{}: `crate::{}` goes through the crate root's re-exports; name the \
                 module that defines it",
                f.display(),
                path.join("::")
            );
        }
    }
    let deps = crate_deps(&src);
    // Only the registry names an architecture.
    for (f, ds) in &deps {
        let name = f.to_string_lossy();
        for d in ds {
            let dep = d.to_string_lossy();
            if dep.starts_with("arch/") && !name.starts_with("arch/") {
                assert_eq!(
                    dep, "arch/mod.rs",
                    "{name} names an architecture ({dep}); go through the traits"
                );
            }
        }
    }
    // The session, generation, chat and perplexity use the traits, not the registry.
    for f in ["session.rs", "generate.rs", "chat/mod.rs", "perplexity.rs"] {
        let ds = &deps[Path::new(f)];
        assert!(
            !ds.iter().any(|d| d.starts_with("arch")),
            "{f} names the architectures: {ds:?}"
        );
    }
}

/// The checker sees what it must: `use` groups (nested, over several lines), `super::` and
/// `self::` paths, paths inside inline modules, code after a string, and not comments or
/// strings.
#[test]
fn module_paths_are_found() {
    let text = "use crate::{error::Result, batch};\nlet x = crate::model::Model::load(p); \
                // crate::session\n/// [`x`](crate::chat::Chat)\nuse crate::{\n    step,\n    \
                kv_cache::{KvCache, self},\n};\nlet s = \"crate::sampling\"; use super::a::B;\n\
                fn f() { self::c::d(); }\nmod inner {\n    use super::*;\n    use super::super::up;\n}\n\
                #[cfg(test)]\nmod tests {\n    use crate::sampling::X;\n}\n";
    let here = vec!["chat".to_string(), "template".to_string()];
    let got = module_paths(text, &here);
    let v = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for want in [
        v(&["model", "Model", "load"]),
        v(&["error", "Result"]),
        v(&["batch"]),
        v(&["step"]),
        v(&["kv_cache", "KvCache"]),
        v(&["kv_cache"]),
        v(&["chat", "a", "B"]),
        v(&["chat", "template", "c", "d"]),
        v(&["chat", "template"]),
        v(&["chat", "up"]),
    ] {
        assert!(got.contains(&want), "{want:?} missing from {got:?}");
    }
    assert!(
        !got.iter().any(|p| p[0] == "session" || p[0] == "sampling"),
        "{got:?}"
    );
}
