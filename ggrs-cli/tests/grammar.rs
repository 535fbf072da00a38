//! `ggrs run --grammar / --grammar-file / --json-schema`: the output follows it, and a
//! grammar that does not compile is an error naming the problem.

use crate::common;

use common::ggrs;

fn tiny() -> String {
    common::reference("tiny/tiny-llama-f16.gguf")
}

#[test]
fn run_follows_a_grammar_or_schema() {
    let model = tiny();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "-m",
            model.as_str(),
            "-p",
            "Hi",
            "-n",
            "40",
            "--temp",
            "0",
        ];
        args.extend_from_slice(extra);
        ggrs(&args)
    };
    let (ok, out, err) = run(&["--grammar", "root ::= [a-c]{2} \"!\""]);
    assert!(ok, "{err}");
    let t = out.trim_end();
    assert!(
        t.len() == 3 && t.ends_with('!') && t[..2].bytes().all(|b| (b'a'..=b'c').contains(&b)),
        "{out:?}"
    );
    let dir = std::env::temp_dir().join(format!("ggrs-grammar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("yn.gbnf");
    std::fs::write(&f, "# yes or no\nroot ::= \"yes\" | \"no\"\n").unwrap();
    let (ok, out, err) = run(&["--grammar-file", f.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(matches!(out.trim_end(), "yes" | "no"), "{out:?}");
    let (ok, out, err) = run(&[
        "--json-schema",
        r#"{"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 2}"#,
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim_end()).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(2), "{out:?}");
    let (ok, _, err) = run(&["--grammar", "root ::= missing"]);
    assert!(!ok);
    assert!(err.contains("error:") && err.contains("missing"), "{err}");
    let (ok, _, err) = run(&["--json-schema", "{not json"]);
    assert!(!ok);
    assert!(err.contains("--json-schema"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}
