//! Constrained decoding on Qwen2's 151,936-token vocabulary (`vocab/ggml-vocab-qwen2.gguf`):
//! random walks through the masks of a randomized set of JSON schemas and of GBNF grammars
//! always give outputs that validate, and an end-of-generation token is allowed whenever
//! (and only when) the grammar accepts the text so far.

use crate::common;

use ggrs_llama::constraint::{Constraint, ConstraintError, GrammarSpec, LazyTrigger};
use ggrs_llama::sampling::Rng;
use ggrs_llama::tokenizer::Tokenizer;
use serde_json::{json, Value};

fn qwen() -> &'static Tokenizer {
    static TOK: std::sync::OnceLock<Tokenizer> = std::sync::OnceLock::new();
    TOK.get_or_init(|| {
        Tokenizer::open(common::reference_dir().join("vocab/ggml-vocab-qwen2.gguf"))
            .expect("the Qwen2 vocabulary")
    })
}

/// Tokens that tend to close things (quotes, brackets, commas, digits): a walk prefers them
/// so that it ends in a few dozen steps instead of wandering through long strings.
fn closers(tok: &Tokenizer) -> Vec<bool> {
    (0..tok.n_vocab() as u32)
        .map(|id| {
            let p = tok.token_to_piece(id).unwrap_or_default();
            p.len() == 1 && b"\"}],:0123456789\n".contains(&p[0])
        })
        .collect()
}

struct Walk {
    text: String,
    ended: bool,
}

/// Generates with random logits under `c`: at each step the mask is applied, the EOG tokens
/// are allowed exactly when the state accepts, and a token is drawn among the allowed ones
/// (closers and the end favoured).
fn walk(c: &Constraint, seed: u64, max_steps: usize) -> Walk {
    let tok = qwen();
    let closer = closers(tok);
    let eog: Vec<u32> = tok.vocab().eog_ids().to_vec();
    let mut rng = Rng::new(seed);
    let mut st = c.start();
    let mut ids = Vec::new();
    for _ in 0..max_steps {
        let mut logits: Vec<f32> = (0..tok.n_vocab())
            .map(|i| {
                let r = rng.next_f64() as f32 * 4.0;
                if closer[i] {
                    r + 6.0
                } else {
                    r
                }
            })
            .collect();
        for &e in &eog {
            logits[e as usize] += 12.0;
        }
        let accepting = st.is_accepting();
        st.mask(&mut logits)
            .unwrap_or_else(|e| panic!("{:?} after {:?}: {e}", c.spec(), tok.decode(&ids)));
        let eog_allowed = eog.iter().any(|&e| logits[e as usize].is_finite());
        assert_eq!(
            eog_allowed,
            accepting,
            "EOG allowed iff accepting, after {:?}",
            tok.decode(&ids)
        );
        // Half the time greedy among the allowed, else a uniform allowed token.
        let allowed: Vec<u32> = (0..logits.len() as u32)
            .filter(|&i| logits[i as usize].is_finite())
            .collect();
        assert!(!allowed.is_empty(), "no token allowed");
        let id = if rng.next_f64() < 0.7 {
            ggrs_llama::sampling::argmax(&logits)
        } else {
            allowed[(rng.next_u64() % allowed.len() as u64) as usize]
        };
        if eog.contains(&id) {
            return Walk {
                text: tok.decode(&ids).unwrap(),
                ended: true,
            };
        }
        st.accept(tok, id, &[])
            .expect("an allowed token is accepted");
        ids.push(id);
    }
    Walk {
        text: tok.decode(&ids).unwrap(),
        ended: false,
    }
}

/// A random schema of depth at most `depth`, from the keywords agents send.
fn random_schema(rng: &mut Rng, depth: u32, defs: &mut serde_json::Map<String, Value>) -> Value {
    let pick = |rng: &mut Rng, n: u64| (rng.next_u64() % n) as usize;
    let kinds = if depth == 0 { 6 } else { 10 };
    match pick(rng, kinds) {
        0 => json!({"type": "string", "maxLength": 1 + pick(rng, 8)}),
        1 => json!({"type": "integer", "minimum": -5, "maximum": 100}),
        2 => json!({"type": "boolean"}),
        3 => json!({"enum": ["red", "green", "blue", 3, null]}),
        4 => json!({"type": "string", "pattern": "^[a-z]{2,4}-[0-9]{1,3}$"}),
        5 => json!({"type": "number", "minimum": 0}),
        6 => {
            let n = 1 + pick(rng, 4);
            let mut props = serde_json::Map::new();
            let mut required = Vec::new();
            for k in 0..n {
                let name = format!("k{k}");
                props.insert(name.clone(), random_schema(rng, depth - 1, defs));
                if pick(rng, 2) == 0 {
                    required.push(name);
                }
            }
            json!({"type": "object", "properties": props, "required": required,
                   "additionalProperties": false})
        }
        7 => {
            let min = pick(rng, 3);
            json!({"type": "array", "items": random_schema(rng, depth - 1, defs),
                   "minItems": min, "maxItems": min + pick(rng, 3)})
        }
        8 => json!({"anyOf": [random_schema(rng, depth - 1, defs),
                              random_schema(rng, depth - 1, defs)]}),
        _ => {
            let name = format!("d{}", defs.len());
            defs.insert(name.clone(), json!({}));
            let s = random_schema(rng, depth - 1, defs);
            defs.insert(name.clone(), s);
            json!({"$ref": format!("#/$defs/{name}")})
        }
    }
}

#[test]
fn random_schemas_give_valid_json() {
    let tok = qwen();
    let mut rng = Rng::new(2026);
    let mut ended = 0;
    let n_schemas = 24;
    for k in 0..n_schemas {
        let mut defs = serde_json::Map::new();
        let mut schema = random_schema(&mut rng, 3, &mut defs);
        if !defs.is_empty() {
            schema = json!({"allOf": [schema], "$defs": defs});
        }
        let c = Constraint::compile(tok, GrammarSpec::JsonSchema(schema.clone()))
            .unwrap_or_else(|e| panic!("schema {k} {schema}: {e}"));
        let validator = jsonschema::validator_for(&schema).expect("a valid schema");
        for seed in 0..2 {
            let w = walk(&c, k * 10 + seed, 300);
            if !w.ended {
                continue;
            }
            ended += 1;
            let v: Value = serde_json::from_str(&w.text)
                .unwrap_or_else(|e| panic!("schema {k} {schema}: {:?} is not JSON: {e}", w.text));
            assert!(
                validator.is_valid(&v),
                "schema {k} {schema}: {} does not validate",
                w.text
            );
        }
    }
    // The walks favour ending: most must end within the budget.
    assert!(ended >= n_schemas as usize, "only {ended} walks ended");
}

/// GBNF grammars in llama.cpp's style (json, a list, chess moves, arithmetic), their
/// outputs checked by what each grammar means.
#[test]
fn gbnf_grammars_constrain_and_end() {
    let tok = qwen();
    let json_gbnf = r#"# JSON, as llama.cpp's json.gbnf writes it
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws
array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws
string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [1-9] [0-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
"#;
    let c = Constraint::compile(tok, GrammarSpec::Gbnf(json_gbnf.into())).unwrap();
    let mut ended = 0;
    for seed in 0..4 {
        let w = walk(&c, seed, 300);
        if w.ended {
            ended += 1;
            let v: Value = serde_json::from_str(&w.text)
                .unwrap_or_else(|e| panic!("{:?} is not JSON: {e}", w.text));
            assert!(v.is_object(), "{}", w.text);
        }
    }
    assert!(ended >= 2, "only {ended} walks ended");

    let list = "root ::= item{1,3}\nitem ::= \"- \" [a-z ]{1,10} \"\\n\"\n";
    let c = Constraint::compile(tok, GrammarSpec::Gbnf(list.into())).unwrap();
    let re = regex::Regex::new(r"^(- [a-z ]{1,10}\n){1,3}$").unwrap();
    for seed in 0..4 {
        let w = walk(&c, seed, 100);
        assert!(w.ended, "{:?}", w.text);
        assert!(re.is_match(&w.text), "{:?}", w.text);
    }

    let arith = "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\n\
                 term ::= num | \"(\" expr \")\"\nnum ::= [0-9]{1,3}\n";
    let c = Constraint::compile(tok, GrammarSpec::Gbnf(arith.into())).unwrap();
    for seed in 0..4 {
        let w = walk(&c, seed, 200);
        if w.ended {
            let depth = w.text.chars().fold(0i32, |d, ch| match ch {
                '(' => d + 1,
                ')' => d - 1,
                _ => d,
            });
            assert_eq!(depth, 0, "{:?}", w.text);
            assert!(
                w.text.chars().all(|ch| "0123456789+-()".contains(ch)),
                "{:?}",
                w.text
            );
        }
    }
}

#[test]
fn bad_grammars_and_schemas_are_errors_that_say_why() {
    let tok = qwen();
    let e = Constraint::compile(tok, GrammarSpec::Gbnf("root ::= foo\n".into())).unwrap_err();
    assert!(matches!(e, ConstraintError::Gbnf(_)), "{e}");
    assert!(e.to_string().contains("foo"), "{e}");
    let e = Constraint::compile(
        tok,
        GrammarSpec::JsonSchema(json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}, "required": ["a"]})),
    )
    .unwrap_err();
    assert!(e.to_string().contains("JSON schema"), "{e}");
    // A schema no value satisfies.
    let e = Constraint::compile(
        tok,
        GrammarSpec::JsonSchema(
            json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}),
        ),
    )
    .unwrap_err();
    assert!(e.to_string().contains("JSON schema"), "{e}");
    let e = Constraint::compile(tok, GrammarSpec::JsonSchema(json!([1, 2]))).unwrap_err();
    assert!(e.to_string().contains("JSON object"), "{e}");
    let e = Constraint::compile(tok, GrammarSpec::Lark("start: (".into())).unwrap_err();
    assert!(matches!(e, ConstraintError::Compile { .. }), "{e}");
}

/// A lazy constraint leaves the text free until its trigger, then constrains what follows.
#[test]
fn lazy_constraint_engages_at_the_trigger() {
    let tok = qwen();
    let c = Constraint::compile_lazy(
        tok,
        GrammarSpec::Lark("start: \"\\n\" /[0-9]{3}/ \"</x>\"".into()),
        Some(LazyTrigger {
            words: vec!["<x>".into()],
        }),
    )
    .unwrap();
    let mut st = c.start();
    let free: Vec<u32> = tok.encode("Hello there <x>", false, false).unwrap();
    for &id in &free {
        assert!(!st.engaged());
        let mut l = vec![0.0f32; tok.n_vocab()];
        st.mask(&mut l).unwrap();
        assert!(
            l.iter().all(|x| x.is_finite()),
            "nothing masked before the trigger"
        );
        st.accept(tok, id, &tok.token_to_piece(id).unwrap())
            .unwrap();
    }
    assert!(st.engaged());
    let mut l = vec![0.0f32; tok.n_vocab()];
    st.mask(&mut l).unwrap();
    let allowed: Vec<u32> = (0..l.len() as u32)
        .filter(|&i| l[i as usize].is_finite())
        .collect();
    for id in allowed {
        let p = tok.token_to_piece(id).unwrap();
        assert!(
            p.first() == Some(&b'\n'),
            "{:?}",
            String::from_utf8_lossy(&p)
        );
    }
}

/// The mask's cost on the 151,936-token vocabulary, printed (`--nocapture`) for a quick look;
/// `scripts/bench-grammar.sh` measures it against real decoding.
#[test]
fn mask_cost_is_small() {
    let tok = qwen();
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
        "inner": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
        "required": ["name", "tags", "inner"]});
    let c = Constraint::compile(tok, GrammarSpec::JsonSchema(schema)).unwrap();
    let text = r#"{"name": "a quick brown fox", "tags": ["a", "b", "a"], "inner": {"x": 12345}}"#;
    let ids = tok.encode(text, false, false).unwrap();
    let mut st = c.start();
    let mut l = vec![0.0f32; tok.n_vocab()];
    let mut times = Vec::new();
    for &id in &ids {
        let t = std::time::Instant::now();
        st.mask(&mut l).unwrap();
        st.accept(tok, id, &[]).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    eprintln!(
        "mask + advance on {} tokens: median {:.0} µs, max {:.0} µs",
        times.len(),
        times[times.len() / 2],
        times[times.len() - 1]
    );
    assert!(st.is_accepting());
}

/// Every `*.gbnf` in `$GGRS_GBNF_DIR` (e.g. llama.cpp's `grammars/`) compiles and a walk
/// through it runs without getting stuck (skipped, with a note, without the variable).
#[test]
fn gbnf_files_compile() {
    let Some(dir) = std::env::var_os("GGRS_GBNF_DIR") else {
        eprintln!("GGRS_GBNF_DIR not set: skipping the GBNF files");
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gbnf"))
        .collect();
    files.sort();
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap();
        let c = Constraint::compile(qwen(), GrammarSpec::Gbnf(src))
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let w = walk(&c, 1, 60);
        eprintln!(
            "{}: ok ({} walk: {:?})",
            f.display(),
            if w.ended { "ended" } else { "open" },
            w.text
        );
    }
}

/// Constrained generation on a real (tiny) model: greedy and seeded outputs validate, repeat
/// exactly, and the serving engine gives a lone session's tokens with other requests beside.
#[test]
fn constrained_generation_is_valid_reproducible_and_batch_invariant() {
    use ggrs_llama::engine::{Engine, EngineParams, Event, Request};
    use ggrs_llama::{GenerateParams, Model, SamplingParams, Session, SessionParams};
    use std::sync::Arc;
    let model = Arc::new(Model::load(common::tiny_llama_q8_0()).unwrap());
    let schema = json!({"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 1, "maxItems": 3}},
        "required": ["id", "tags"], "additionalProperties": false});
    let c =
        Constraint::compile(model.tokenizer(), GrammarSpec::JsonSchema(schema.clone())).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let params = |temperature: f32, seed: u64| GenerateParams {
        max_tokens: 48,
        sampling: SamplingParams {
            temperature,
            seed,
            ..Default::default()
        },
        constraint: Some(c.clone()),
        ..Default::default()
    };
    let prompt = model.encode_prompt("The record:").unwrap();
    let lone = |p: &GenerateParams| {
        let mut s = Session::new(
            model.clone(),
            SessionParams {
                n_ctx: 256,
                ..Default::default()
            },
        )
        .unwrap();
        s.generate_tokens(&prompt, p, |_| std::ops::ControlFlow::Continue(()))
            .unwrap()
    };
    let cases = [params(0.0, 0), params(0.9, 7), params(1.2, 8)];
    let alone: Vec<_> = cases.iter().map(lone).collect();
    for (g, p) in alone.iter().zip(&cases) {
        if matches!(g.stop, ggrs_llama::StopReason::EndOfGeneration(_)) {
            let v: Value =
                serde_json::from_str(&g.text).unwrap_or_else(|e| panic!("{:?}: {e}", g.text));
            assert!(validator.is_valid(&v), "{}", g.text);
        }
        assert_eq!(lone(p).tokens, g.tokens, "same seed, same tokens");
    }
    let engine = Engine::start(
        model.clone(),
        EngineParams {
            n_slots: 3,
            n_ctx: 768,
            ..Default::default()
        },
    )
    .unwrap();
    let streams: Vec<_> = cases
        .iter()
        .map(|p| {
            let mut r = Request::new(prompt.clone(), p.clone());
            r.cache_prompt = false;
            engine.handle().submit_stream(r).unwrap()
        })
        .collect();
    for (s, g) in streams.into_iter().zip(&alone) {
        let done = s
            .into_iter()
            .find_map(|e| match e {
                Event::Done(d) => Some(d),
                Event::Error(e) => panic!("{e}"),
                Event::Token(_) => None,
            })
            .unwrap();
        assert_eq!(done.tokens, g.tokens, "engine beside others = lone session");
    }
}

/// Integers and numbers have at most 16 integer digits, as llama.cpp's grammars allow
/// (unbounded, a small model may write digits until `max_tokens`), and numbers at most 8
/// fraction digits; draft 4's tuple `items`
/// (`{"items": [{"type": "integer"}]}`) is a one-item array, as llama.cpp reads it.
#[test]
fn numbers_are_bounded_and_tuple_items_are_arrays() {
    let tok = qwen();
    let one = tok.encode("1", false, false).unwrap();
    assert_eq!(one.len(), 1);
    let one = one[0];
    // A number's fraction digits are bounded too (llama.cpp: `decimal-part ::=
    // [0-9]{1,16}`), in an object and in a list; a schema's own `multipleOf` still rules.
    // (schema, text before the digits, the most `1`s the mask lets through)
    let obj = |t: &str| json!({"type": "object", "properties": {"n": {"type": t}}});
    for (schema, prefix, most) in [
        (json!({"type": "integer"}), "", 16),
        (json!({"type": "number"}), "", 16),
        (json!({"type": "integer", "minimum": 0}), "", 16),
        (obj("integer"), "{\"n\": ", 16),
        (json!({"type": "number"}), "0.", 8),
        (obj("number"), "{\"n\": -3.", 8),
        (
            json!({"type": "array", "items": {"type": "number"}}),
            "[1, 2.",
            8,
        ),
        (json!({"type": "number", "multipleOf": 0.01}), "7.", 2),
    ] {
        let c = Constraint::compile(tok, GrammarSpec::JsonSchema(schema.clone())).unwrap();
        let mut st = c.start();
        for id in tok.encode(prefix, false, false).unwrap() {
            st.accept(tok, id, &[]).unwrap();
        }
        let mut digits = 0;
        loop {
            let mut logits = vec![0.0f32; tok.n_vocab()];
            st.mask(&mut logits).unwrap();
            if !logits[one as usize].is_finite() {
                break;
            }
            st.accept(tok, one, &[]).unwrap();
            digits += 1;
            assert!(
                digits <= most,
                "{schema} after {prefix:?}: more than {most} digits"
            );
        }
        assert_eq!(digits, most, "{schema} after {prefix:?}");
    }
    let schema = json!({"items": [{"type": "integer"}]});
    let c = Constraint::compile(tok, GrammarSpec::JsonSchema(schema.clone())).unwrap();
    let mut seen = 0;
    for seed in 0..4 {
        let w = walk(&c, seed, 60);
        if !w.ended {
            continue;
        }
        seen += 1;
        let v: Value = serde_json::from_str(&w.text).unwrap();
        let a = v.as_array().unwrap_or_else(|| panic!("{schema}: {v}"));
        // An integer as JSON Schema counts them (llguidance may write `-0.0`).
        let int = a.len() == 1 && a[0].as_f64().is_some_and(|x| x.fract() == 0.0);
        assert!(int, "{v}");
    }
    assert!(seen > 0);
}
