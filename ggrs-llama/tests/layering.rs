//! The crate's modules depend on each other one way: the `crate::` paths in the code (not
//! the comments) of `src/` form no cycle between files, nothing but `lib.rs` goes through
//! the crate root's re-exports, the architectures are named only by the registry
//! (`arch/mod.rs`), and `convert/` uses nothing else of the crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// The file that defines module path `parts` (`["chat", "template"]`), as deep as files go.
fn module_file(src: &Path, parts: &[&str]) -> Option<PathBuf> {
    for n in (1..=parts.len()).rev() {
        let base: PathBuf = parts[..n].iter().collect();
        for cand in [base.with_extension("rs"), base.join("mod.rs")] {
            if src.join(&cand).is_file() {
                return Some(cand);
            }
        }
    }
    None
}

/// Every `crate::a::b…` path in the code lines of `text` (comments left out), with each
/// item of a `use crate::{…}` group (over several lines too) as a path of its own.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let split = |p: &str| -> Vec<String> {
        p.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut out = Vec::new();
    let mut in_group = false;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut group_text = None;
        if in_group {
            group_text = Some(code);
        } else if let Some(at) = code.find("crate::{") {
            group_text = Some(&code[at + "crate::{".len()..]);
        }
        if let Some(g) = group_text {
            let end = g.find('}');
            in_group = end.is_none();
            for item in g[..end.unwrap_or(g.len())].split(',') {
                // Nested groups (`a::{b, c}`) count as their first module.
                let item = item.split('{').next().unwrap_or("");
                out.push(split(item));
            }
        }
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let tail = &rest[at + "crate::".len()..];
            let path: String = tail
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(split(&path));
            rest = tail;
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

#[test]
fn modules_form_no_cycle() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    assert!(files.len() > 20, "found only {} files", files.len());
    let mut deps: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for f in &files {
        let text = std::fs::read_to_string(src.join(f)).unwrap();
        let entry = deps.entry(f.clone()).or_default();
        for path in crate_paths(&text) {
            let parts: Vec<&str> = path.iter().map(String::as_str).collect();
            let Some(first) = parts.first() else { continue };
            if f != Path::new("lib.rs") {
                assert!(
                    first.chars().next().is_some_and(|c| c.is_lowercase()),
                    "{}: `crate::{}` goes through the crate root's re-exports; name the \
                     module that defines it",
                    f.display(),
                    path.join("::")
                );
            }
            if let Some(m) = module_file(&src, &parts) {
                if &m != f {
                    entry.insert(m);
                }
            }
        }
    }
    // Depth-first search for a cycle, reporting it.
    fn visit(
        f: &PathBuf,
        deps: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        stack: &mut Vec<PathBuf>,
        done: &mut BTreeSet<PathBuf>,
    ) {
        if done.contains(f) {
            return;
        }
        if let Some(i) = stack.iter().position(|s| s == f) {
            let cycle: Vec<String> = stack[i..].iter().map(|p| p.display().to_string()).collect();
            panic!("import cycle: {} → {}", cycle.join(" → "), f.display());
        }
        stack.push(f.clone());
        for d in deps.get(f).into_iter().flatten() {
            visit(d, deps, stack, done);
        }
        stack.pop();
        done.insert(f.clone());
    }
    let mut done = BTreeSet::new();
    for f in deps.keys().filter(|f| *f != Path::new("lib.rs")) {
        visit(f, &deps, &mut Vec::new(), &mut done);
    }

    // Only the registry names an architecture; the converter stands alone.
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
            if name.starts_with("convert/") {
                assert!(dep.starts_with("convert/"), "{name} uses {dep}");
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

/// The checker sees what it must: a `use crate::{…}` group, nested paths, code after a
/// string, and not comments.
#[test]
fn crate_paths_are_found() {
    let text = "use crate::{error::Result, batch};\nlet x = crate::model::Model::load(p); \
                // crate::session\n/// [`x`](crate::chat::Chat)\nuse crate::{\n    step,\n    \
                kv_cache::KvCache,\n};\n";
    let got = crate_paths(text);
    assert!(got.contains(&vec!["model".to_string(), "Model".into(), "load".into()]));
    assert!(got.contains(&vec!["error".to_string(), "Result".into()]));
    assert!(got.contains(&vec!["batch".to_string()]));
    assert!(got.contains(&vec!["step".to_string()]));
    assert!(got.contains(&vec!["kv_cache".to_string(), "KvCache".into()]));
    assert!(!got.iter().any(|p| p[0] == "session" || p[0] == "chat"));
}
