//! Constrained decoding: outputs that follow a grammar or a JSON Schema by construction.
//!
//! A [`Constraint`] is compiled once per request from a [`GrammarSpec`] (llama.cpp's GBNF,
//! the engine's Lark-like syntax, a JSON Schema, "any JSON object", a regular expression).
//! While generating, a [`ConstraintState`] masks the logits of every token that cannot
//! continue a valid output (−∞) *before* the sampler sees them — before logit bias,
//! penalties, temperature, top-k, top-p and min-p — and then advances by the token chosen.
//! Greedy and seeded sampling therefore stay reproducible, and the serving engine stays
//! batch-invariant: the mask depends only on the request's own tokens. End-of-generation
//! tokens are allowed exactly when the grammar accepts the text so far, so a grammar that
//! accepts can always end.
//!
//! # The engine: llguidance
//!
//! The masks come from [llguidance](https://github.com/guidance-ai/llguidance), the Rust
//! engine behind llama.cpp's `LLAMA_LLGUIDANCE` build, mistral.rs, vLLM and SGLang. Judged
//! against the alternatives for this server:
//! - **Speed.** llguidance walks a token trie with a derivative-based lexer and an Earley
//!   parser, computing a mask in tens of microseconds on 128k–200k vocabularies with no
//!   per-schema precomputation; outlines-core (and Outlines' regex index) precomputes an
//!   automaton × vocabulary index per schema, seconds for nested schemas on a 150k
//!   vocabulary, paid per request; llama.cpp's own GBNF sampler checks candidates one by one
//!   and is the slow path it now offers llguidance to replace; XGrammar is C++.
//! - **Coverage.** llguidance compiles JSON Schema with `$ref`/`$defs`, `anyOf`/`oneOf`/
//!   `allOf`, `enum`/`const`, string `pattern`/`format`/lengths, array `minItems`/
//!   `maxItems`, numeric bounds and `additionalProperties`, and Lark-like context-free
//!   grammars with inline `%json` schemas and special tokens; llama.cpp's GBNF maps onto
//!   its grammar syntax almost one to one ([`gbnf`] does the rewrite). kbnf covers GBNF-like
//!   grammars but has no JSON Schema compiler and fewer users.
//!
//! The token trie and the lexer's token slices are built once per vocabulary (the first
//! constrained request on a model, cached in its [`Tokenizer`]), not per request; each
//! request deep-copies a compiled matcher.

pub mod gbnf;
mod vocab;

use std::sync::{Arc, Mutex};

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};

use crate::tokenizer::Tokenizer;

pub use gbnf::{gbnf_to_lark, GbnfError};

/// What a constrained output must follow.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// A llama.cpp GBNF grammar (`root ::= …`).
    Gbnf(String),
    /// A grammar in llguidance's Lark-like syntax (`start: …`).
    Lark(String),
    /// A JSON Schema: the output is one JSON value that validates.
    JsonSchema(serde_json::Value),
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// A regular expression (Rust `regex` syntax) matching the whole output.
    Regex(String),
}

impl GrammarSpec {
    /// A JSON Schema given as JSON text (for callers without a JSON parser of their own,
    /// such as the Python bindings).
    pub fn json_schema_text(text: &str) -> Result<GrammarSpec, ConstraintError> {
        serde_json::from_str(text)
            .map(GrammarSpec::JsonSchema)
            .map_err(|e| ConstraintError::Compile {
                what: "the JSON schema",
                message: format!("it is not valid JSON: {e}"),
            })
    }
}

/// Why a constraint could not be compiled or followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    /// A GBNF grammar that does not parse.
    #[error(transparent)]
    Gbnf(#[from] GbnfError),
    /// The grammar or schema does not compile (the engine's message says why).
    #[error("{what} does not compile: {message}")]
    Compile {
        /// "the grammar", "the JSON schema", "the regular expression".
        what: &'static str,
        /// The engine's explanation.
        message: String,
    },
    /// The model's vocabulary cannot be used for constrained decoding.
    #[error("constrained decoding is not available for this vocabulary: {0}")]
    Vocabulary(String),
    /// Generation reached a state the grammar cannot continue from (an engine limit).
    #[error("the grammar cannot continue: {0}")]
    Stuck(String),
}

/// The grammar engine's view of `tok`'s vocabulary (token trie, lexer slices), built once
/// per tokenizer and kept in its [`Tokenizer::grammar_vocab`] cell.
fn factory(tok: &Tokenizer) -> Result<Arc<ParserFactory>, ConstraintError> {
    type Built = Result<Arc<ParserFactory>, String>;
    let built: Option<&Built> = tok
        .grammar_vocab()
        .get_or_init(|| vocab::factory(tok).map(Arc::new));
    match built {
        Some(r) => r.clone().map_err(ConstraintError::Vocabulary),
        None => Err(ConstraintError::Vocabulary(
            "the tokenizer's grammar cell holds another type".into(),
        )),
    }
}

/// Starts the constraint only once the output contains one of these strings (llama.cpp's
/// lazy grammars): the text up to and including the trigger is free, the rest must follow
/// the grammar.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LazyTrigger {
    /// Trigger strings (e.g. `<tool_call>`).
    pub words: Vec<String>,
}

/// A compiled constraint, ready to start in any number of generations.
#[derive(Clone)]
pub struct Constraint {
    spec: GrammarSpec,
    lazy: Option<LazyTrigger>,
    /// The matcher in its start state; each generation deep-copies it.
    start: Arc<Mutex<Matcher>>,
    eog: Arc<Vec<u32>>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("spec", &self.spec)
            .field("lazy", &self.lazy)
            .finish()
    }
}

impl PartialEq for Constraint {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec && self.lazy == other.lazy
    }
}

/// Options llguidance reads from a JSON schema's `x-guidance` key: compact separators as
/// Python's `json.dumps` writes them and no free whitespace (a small model left free to
/// add whitespace can loop on newlines); unknown keywords are ignored rather than refused.
fn json_options() -> serde_json::Value {
    serde_json::json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        "lenient": true,
    })
}

/// A schema with our compile options (unless it brings its own `x-guidance`): compact
/// separators, no free whitespace; its integers and numbers bounded ([`bound_schema`]).
pub fn with_json_options(schema: &serde_json::Value) -> serde_json::Value {
    let mut schema = match schema {
        // `true` / `{}`: any JSON value.
        serde_json::Value::Bool(true) => serde_json::json!({}),
        s => s.clone(),
    };
    bound_schema(&mut schema);
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance").or_insert_with(json_options);
    }
    schema
}

/// The largest integer a JSON number holds exactly (2^53 − 1, 16 digits): the bound of
/// an integer or number a schema leaves unbounded, as llama.cpp's json-schema-to-grammar
/// allows at most 16 integer digits (unbounded digits let a small model write digits
/// until `max_tokens`).
pub const MAX_SCHEMA_INTEGER: i64 = (1 << 53) - 1;

/// The most fraction digits a `number` without a `multipleOf` may have. llama.cpp's
/// json-schema-to-grammar allows 16 (`decimal-part ::= [0-9]{1,16}`); the bound here is a
/// `multipleOf` of 1e-8, the finest llguidance's number matcher takes without overflowing
/// its `u32` arithmetic (derivre's remainder automaton; 1e-9 overflows it on a digit ≥ 5
/// in a build with overflow checks), and it also leaves out exponents. Unbounded, a small
/// model may write fraction digits until `max_tokens`.
pub const MAX_SCHEMA_FRACTION_DIGITS: i32 = 8;

/// Rewrites `schema` in place, in every subschema, for llama.cpp's reading of it:
/// - an `integer` or `number` without a bound on a side gets ±[`MAX_SCHEMA_INTEGER`]
///   there;
/// - a `number` without `multipleOf` gets at most [`MAX_SCHEMA_FRACTION_DIGITS`]
///   fraction digits;
/// - `items` given as a list (draft 4's tuples, which llama.cpp reads as exactly those
///   items) becomes `prefixItems` with no further items (or `additionalItems`' schema),
///   and the schema an `array`.
pub fn bound_schema(schema: &mut serde_json::Value) {
    use serde_json::Value;
    match schema {
        Value::Array(a) => a.iter_mut().for_each(bound_schema),
        Value::Object(o) => {
            if let Some(Value::Array(items)) = o.get("items") {
                let n = items.len();
                let items = Value::Array(items.clone());
                let rest = o.remove("additionalItems").unwrap_or(Value::Bool(true));
                o.entry("minItems").or_insert_with(|| n.into());
                let rest = if rest == Value::Bool(true) {
                    Value::Bool(false)
                } else {
                    rest
                };
                o.insert("prefixItems".into(), items);
                o.insert("items".into(), rest);
                o.entry("type").or_insert_with(|| "array".into());
            }
            if matches!(
                o.get("type").and_then(Value::as_str),
                Some("integer" | "number")
            ) {
                let max = MAX_SCHEMA_INTEGER as f64;
                let low = ["minimum", "exclusiveMinimum"]
                    .iter()
                    .filter_map(|k| o.get(*k).and_then(Value::as_f64))
                    .fold(f64::NEG_INFINITY, f64::max);
                let high = ["maximum", "exclusiveMaximum"]
                    .iter()
                    .filter_map(|k| o.get(*k).and_then(Value::as_f64))
                    .fold(f64::INFINITY, f64::min);
                if low == f64::NEG_INFINITY && high > -max {
                    o.insert("minimum".into(), (-MAX_SCHEMA_INTEGER).into());
                }
                if high == f64::INFINITY && low < max {
                    o.insert("maximum".into(), MAX_SCHEMA_INTEGER.into());
                }
                if o.get("type").and_then(Value::as_str) == Some("number") {
                    let step = 10f64.powi(-MAX_SCHEMA_FRACTION_DIGITS);
                    o.entry("multipleOf").or_insert_with(|| step.into());
                }
            }
            for (k, v) in o.iter_mut() {
                // Values that are data, not schemas.
                if !matches!(
                    k.as_str(),
                    "enum" | "const" | "default" | "examples" | "x-guidance"
                ) {
                    bound_schema(v);
                }
            }
        }
        _ => {}
    }
}

impl Constraint {
    /// Compiles `spec` for the vocabulary of `tok`. Errors say what does not compile and
    /// why (a GBNF syntax error with its line, an unsupported or contradictory schema).
    pub fn compile(tok: &Tokenizer, spec: GrammarSpec) -> Result<Constraint, ConstraintError> {
        Self::compile_lazy(tok, spec, None)
    }

    /// As [`Constraint::compile`], starting only after one of `lazy`'s trigger words.
    pub fn compile_lazy(
        tok: &Tokenizer,
        spec: GrammarSpec,
        lazy: Option<LazyTrigger>,
    ) -> Result<Constraint, ConstraintError> {
        let (what, grammar) = match &spec {
            GrammarSpec::Gbnf(g) => ("the grammar", TopLevelGrammar::from_lark(gbnf_to_lark(g)?)),
            GrammarSpec::Lark(g) => ("the grammar", TopLevelGrammar::from_lark(g.clone())),
            GrammarSpec::JsonSchema(s) => {
                if !(s.is_object() || s.is_boolean()) {
                    return Err(ConstraintError::Compile {
                        what: "the JSON schema",
                        message: "a schema is a JSON object (or true)".into(),
                    });
                }
                (
                    "the JSON schema",
                    TopLevelGrammar::from_json_schema(with_json_options(s)),
                )
            }
            GrammarSpec::JsonObject => (
                "the JSON schema",
                TopLevelGrammar::from_json_schema(with_json_options(
                    &serde_json::json!({"type": "object"}),
                )),
            ),
            GrammarSpec::Regex(r) => ("the regular expression", TopLevelGrammar::from_regex(r)),
        };
        let factory = factory(tok)?;
        let parser = factory
            .create_parser(grammar)
            .map_err(|e| ConstraintError::Compile {
                what,
                message: e.to_string(),
            })?;
        let mut matcher = Matcher::new(Ok(parser));
        // The first mask: an output must be able to start (an unsatisfiable schema, a
        // grammar that matches nothing, are refused here rather than stuck later). It also
        // builds the lexer states every generation's copy then shares.
        let first = matcher.compute_mask_or_eos();
        if let Some(e) = matcher.get_error() {
            return Err(ConstraintError::Compile { what, message: e });
        }
        match first {
            Ok(m) if !m.is_zero() => {}
            Ok(_) => {
                return Err(ConstraintError::Compile {
                    what,
                    message: "no output can satisfy it".into(),
                })
            }
            Err(e) => {
                return Err(ConstraintError::Compile {
                    what,
                    message: e.to_string(),
                })
            }
        }
        let eog = tok.vocab().eog_ids().to_vec();
        Ok(Constraint {
            spec,
            lazy: lazy.filter(|l| !l.words.is_empty()),
            start: Arc::new(Mutex::new(matcher)),
            eog: Arc::new(eog),
        })
    }

    /// What it was compiled from.
    pub fn spec(&self) -> &GrammarSpec {
        &self.spec
    }

    /// The lazy trigger, if any.
    pub fn lazy(&self) -> Option<&LazyTrigger> {
        self.lazy.as_ref()
    }

    /// A fresh state for one generation.
    pub fn start(&self) -> ConstraintState {
        // A poisoned lock means a panic while deep-copying; the start state is only ever
        // read, so it is still whole.
        let matcher = match self.start.lock() {
            Ok(m) => m.deep_clone(),
            Err(p) => p.into_inner().deep_clone(),
        };
        ConstraintState {
            matcher,
            engaged: self.lazy.is_none(),
            triggers: self
                .lazy
                .as_ref()
                .map(|l| l.words.iter().map(|w| w.as_bytes().to_vec()).collect())
                .unwrap_or_default(),
            seen: Vec::new(),
            eog: self.eog.clone(),
        }
    }
}

/// A constraint following one generation.
pub struct ConstraintState {
    matcher: Matcher,
    /// Whether the grammar applies yet (a lazy constraint waits for a trigger).
    engaged: bool,
    triggers: Vec<Vec<u8>>,
    /// The bytes generated while waiting for a trigger.
    seen: Vec<u8>,
    eog: Arc<Vec<u32>>,
}

impl std::fmt::Debug for ConstraintState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintState")
            .field("engaged", &self.engaged)
            .finish()
    }
}

impl Clone for ConstraintState {
    fn clone(&self) -> Self {
        ConstraintState {
            matcher: self.matcher.deep_clone(),
            engaged: self.engaged,
            triggers: self.triggers.clone(),
            seen: self.seen.clone(),
            eog: self.eog.clone(),
        }
    }
}

impl ConstraintState {
    /// Whether the grammar applies now (false while a lazy constraint waits).
    pub fn engaged(&self) -> bool {
        self.engaged
    }

    /// Whether the text so far is a complete output of the grammar.
    pub fn is_accepting(&mut self) -> bool {
        !self.engaged
            || (self.matcher.is_stopped() && !self.matcher.is_error())
            || self.matcher.is_accepting().unwrap_or(false)
    }

    /// Sets to −∞ the logits of the tokens that cannot come next (ids past the vocabulary
    /// included). End-of-generation tokens stay allowed exactly when the grammar accepts.
    /// Nothing changes while a lazy constraint waits for its trigger.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), ConstraintError> {
        if !self.engaged {
            return Ok(());
        }
        // A grammar that cannot grow any more (complete) allows the end only.
        let allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| ConstraintError::Stuck(e.to_string()))?;
        let words = allowed.as_slice();
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            let bits = words.get(w).copied().unwrap_or(0);
            if bits == u32::MAX && chunk.len() == 32 {
                continue;
            }
            for (b, x) in chunk.iter_mut().enumerate() {
                if bits & (1 << b) == 0 {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
        if allowed.is_zero() {
            return Err(ConstraintError::Stuck(
                self.matcher
                    .get_error()
                    .unwrap_or_else(|| "no token can continue the output".into()),
            ));
        }
        Ok(())
    }

    /// Advances by the chosen token `id` (whose bytes, for a lazy constraint still waiting,
    /// are `piece`). An end-of-generation token ends the output and changes nothing.
    pub fn accept(
        &mut self,
        tok: &Tokenizer,
        id: u32,
        piece: &[u8],
    ) -> Result<(), ConstraintError> {
        if self.eog.contains(&id) {
            return Ok(());
        }
        if self.engaged {
            return self
                .matcher
                .consume_token(id)
                .map_err(|e| ConstraintError::Stuck(e.to_string()));
        }
        self.seen.extend_from_slice(piece);
        let hit = self
            .triggers
            .iter()
            .filter_map(|t| {
                self.seen
                    .windows(t.len().max(1))
                    .position(|w| w == t.as_slice())
                    .map(|p| p + t.len())
            })
            .min();
        if let Some(end) = hit {
            self.engaged = true;
            // What the token brought after the trigger is already part of the output.
            let rest = self.seen.split_off(end);
            if !rest.is_empty() {
                let text = String::from_utf8_lossy(&rest);
                let ids = tok
                    .encode(&text, false, false)
                    .map_err(|e| ConstraintError::Stuck(e.to_string()))?;
                self.matcher
                    .consume_tokens(&ids)
                    .map_err(|e| ConstraintError::Stuck(e.to_string()))?;
            }
        } else {
            let keep = self.triggers.iter().map(|t| t.len()).max().unwrap_or(0);
            if self.seen.len() > keep * 4 + 64 {
                self.seen.drain(..self.seen.len() - keep);
            }
        }
        Ok(())
    }
}
