use super::ecmascript::{Haystacks, RegexStage};
use super::scan::{Scanner, Sink};
use super::*;

fn pre(name: &str) -> PreTokenizer {
    PreTokenizer::from_name(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn split<'a>(name: &str, s: &'a str) -> Vec<&'a str> {
    pre(name).split(s)
}

/// The pieces one expression cuts `s` into, through its scanner or through the regex crate.
fn pieces_by(s: &str, stage: &Stage) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut lens = Vec::new();
    match stage {
        Stage::Scan(scanner) => {
            let mut sink = Sink {
                out: &mut lens,
                prev_end: 0,
            };
            scanner.split(&chars, &mut sink);
            sink.emit(chars.len());
        }
        Stage::Regex(re) => re.split(&chars, &mut Haystacks::default(), 0, chars.len(), &mut lens),
    }
    let mut start = 0;
    lens.iter()
        .map(|&n| {
            start += n;
            chars[start - n..start].iter().collect()
        })
        .collect()
}

fn scanner(expr: &str) -> Stage {
    Stage::Scan(Scanner::for_expression(expr).expect("a scanner"))
}

/// Deterministic mixed text: ASCII of every class, contractions, runs of spaces and line
/// breaks, letters, marks, numbers and whitespace outside ASCII, Han, Hangul, emoji,
/// format and unassigned characters.
fn samples() -> Vec<String> {
    const POOL: &[&str] = &[
        "a", "Z", "q", "7", "0", " ", " ", " ", "  ", "\t", "\n", "\r\n", "\n\n", ".", ",", "!",
        "?", "$", "+", "<", "=", "^", "`", "|", "~", "(", "_", "-", "'", "'s", "'T", "'re", "'LL",
        "'ve", "'d", "é", "Ä", "ß", "\u{301}", "\u{17b7}", "½", "٣", "Ⅻ", "\u{3000}", "\u{a0}",
        "\u{85}", "\u{2028}", "我", "们", "한", "あ", "，", "。", "！", "—", "€", "🦙", "\u{200b}",
        "\u{378}", "Ω", "K", "ℌ", "ﬀ", "Ｚ", "x1", "123", "4567", "abc", "Hello",
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..400)
        .map(|_| {
            let n = 1 + (next() % 24) as usize;
            (0..n)
                .map(|_| POOL[(next() % POOL.len() as u64) as usize])
                .collect()
        })
        .collect()
}

#[test]
fn gpt2_words() {
    assert_eq!(
        split("gpt-2", "Hello, y'all! How's it  going?\n\n 123abc"),
        vec![
            "Hello", ",", " y", "'", "all", "!", " How", "'s", " it", " ", " going", "?", "\n\n",
            " 123", "abc"
        ]
    );
    assert_eq!(split("gpt-2", "a   "), vec!["a", "   "]);
    assert_eq!(split("gpt-2", ""), Vec::<&str>::new());
    assert_eq!(split("gpt-2", "'RE"), vec!["'", "RE"]);
}

#[test]
fn llama3_and_qwen2_words() {
    let s = "I'VE 12345 apples\r\n\n  and  ...\n x";
    assert_eq!(
        split("llama3", s),
        vec!["I", "'VE", " ", "123", "45", " apples", "\r\n\n", " ", " and", " ", " ...\n", " x"]
    );
    assert_eq!(
        split("qwen2", s),
        vec![
            "I", "'VE", " ", "1", "2", "3", "4", "5", " apples", "\r\n\n", " ", " and", " ",
            " ...\n", " x"
        ]
    );
    // A lone space at the end, and a tab before a letter.
    assert_eq!(split("qwen2", "a \tb "), vec!["a", " ", "\tb", " "]);
}

#[test]
fn qwen35_counts_marks_as_letters() {
    // U+0301 (combining acute) is a mark: Qwen2 cuts the word before it, Qwen3.5 keeps it.
    let s = "ke\u{301}x \u{301}\u{301}!";
    assert_eq!(
        split("qwen2", s),
        vec!["ke", "\u{301}x", " \u{301}\u{301}!"]
    );
    assert_eq!(
        split("qwen35", s),
        vec!["ke\u{301}x", " \u{301}\u{301}", "!"]
    );
}

#[test]
fn default_stages() {
    // Punctuation runs are cut first, so " ," cannot form; digits end in triples.
    assert_eq!(
        split("default", "x ,=y 1234567"),
        vec!["x", " ", ",=", "y", " ", "123", "456", "7"]
    );
}

#[test]
fn deepseek_llm_words() {
    // Line breaks alone; letters of the listed scripts with one optional space before;
    // ASCII and fullwidth punctuation likewise; trailing whitespace; CJK runs; numbers.
    assert_eq!(
        split("deepseek-llm", "Hello, World!\n  x 我们的123 ½ ok  "),
        vec![
            "Hello",
            ",",
            " World",
            "!",
            "\n",
            " ",
            " x",
            " ",
            "我们的",
            "123",
            " ",
            "½",
            " ok",
            "  "
        ]
    );
    // `\s?` takes a non-ASCII space too (llama.cpp turns it into a vertical tab).
    assert_eq!(
        split("deepseek-llm", "a\u{3000}b\u{3000}\u{3000}"),
        vec!["a", "\u{3000}b", "\u{3000}\u{3000}"]
    );
}

#[test]
fn deepseek_coder_words() {
    assert_eq!(
        split("deepseek-coder", "fn main() {\n    x += 42;\n}"),
        vec!["fn", " main", "()", " {", "\n", "   ", " x", " += ", "4", "2", ";", "\n", "}"]
    );
}

#[test]
fn jais2_whitespace_cascade() {
    // `\s{4}(?!\S)` and `\s{1,2}(?!\S)` take runs of whitespace in blocks that end before
    // the last space, which goes with the next word.
    let s = format!("a{}b", " ".repeat(8));
    assert_eq!(split("jais-2", &s), vec!["a", "    ", "  ", " ", " b"]);
}

#[test]
fn tekken_splits_at_case_changes() {
    // Upper case letters then lower case ones make a word (the upper case run is greedy);
    // upper case letters alone make a word too.
    assert_eq!(
        split("tekken", "HTTPServer getURL 42"),
        vec!["HTTPServer", " get", "URL", " ", "4", "2"]
    );
}

#[test]
fn digit_groupings() {
    // SuperBPE: number runs, cut in threes from their ends.
    assert_eq!(
        split("superbpe", "x1234567 89"),
        vec!["x", "1", "234", "567", " ", "89"]
    );
    // AFMoE (llama.cpp's own code): the same groups, but the text before a run stays with
    // the run's first group.
    let afmoe = Stage::Scan(Scanner::AfmoeDigits);
    assert_eq!(pieces_by("ab1234 x12", &afmoe), vec!["ab1", "234", " x12"]);
    assert_eq!(pieces_by("ab123cd", &afmoe), vec!["ab123", "cd"]);
}

#[test]
fn kimi_k2_words() {
    assert_eq!(
        split("kimi-k2", "我们HELLO's world1234\n\n x"),
        vec!["我们", "HELLO's", " world", "123", "4", "\n\n", " x"]
    );
}

#[test]
fn newline_runs() {
    assert_eq!(split("laguna", "a b\n\nc"), vec!["a", " b", "\n\n", "c"]);
}

#[test]
fn words_cover_text() {
    for name in PreTokenizer::names() {
        let pre = self::pre(name);
        for s in samples() {
            let words = pre.split(&s);
            assert_eq!(words.concat(), s, "{name}");
            assert!(words.iter().all(|w| !w.is_empty()), "{name}: {s:?}");
        }
    }
}

#[test]
fn every_listed_expression_compiles() {
    for (name, config) in PRE_TOKENIZERS {
        for expr in config.exprs.list {
            if let Err(e) = compile(expr) {
                panic!("{name}: {e}");
            }
        }
        let p = PreTokenizer::from_name(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.name(), *name);
        assert_eq!(p.expressions(), config.exprs.list);
    }
    // Names are unique.
    let mut names: Vec<&str> = PreTokenizer::names().collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), PRE_TOKENIZERS.len());
    assert!(matches!(
        PreTokenizer::from_name("no-such-pre"),
        Err(TokenizerError::UnknownPreTokenizer { .. })
    ));
}

/// The scanners of expressions llama.cpp runs through `std::regex` must cut exactly as the
/// translated expression does; so must llama.cpp's own code for GPT-2, LLaMA 3, Qwen2 and
/// Qwen3.5, which agrees with its expression on every text (every character is matched by
/// some alternative, so no two unmatched characters merge into one gap).
#[test]
fn scanners_agree_with_the_regex_engine() {
    let mut checked = 0;
    for expr in Scanner::expressions() {
        let Ok(re) = RegexStage::compile(expr) else {
            // Look-aheads the rewrites do not cover, `\p{Han}`, `\p{AFMoE_digits}`.
            continue;
        };
        let (scan, re) = (scanner(expr), Stage::Regex(re));
        for s in samples() {
            assert_eq!(pieces_by(&s, &scan), pieces_by(&s, &re), "{expr} on {s:?}");
        }
        checked += 1;
    }
    assert_eq!(checked, 10, "expressions checked");
}

#[test]
fn translations() {
    let pattern = |e: &str| RegexStage::compile(e).unwrap().pattern().to_owned();
    // Collapsed text: `\p{N}` is its stand-in byte and the ASCII digits.
    assert_eq!(pattern(r"\p{N}{1,3}"), r"(?:[\xD1\x30-\x39]){1,3}");
    // Look-ahead at the end of an alternative: given back.
    assert_eq!(
        pattern(r"\p{L}+|\s+(?!\S)|\s+"),
        r"(?:[\xD2\x41-\x5A\x61-\x7A])+|(?:[\x09-\x0D\x20])+(?:\z|([\x09-\x0D\x20]))|(?:[\x09-\x0D\x20])+"
    );
    // One-character look-ahead before one character: an intersection.
    assert_eq!(
        pattern(r"((?=[\p{L}])([^a-z]))+"),
        r"(?:(?:[[[\xD2\x41-\x5A\x61-\x7A]&&[^\x61-\x7A]]]))+"
    );
    // Wide text: code points.
    assert_eq!(pattern("[\r\n]"), r"[\x{D}\x{A}]");
    assert_eq!(pattern(r"\s+$"), r"(?:[\x{9}-\x{D}\x{20}])+\z");

    let refused = |e: &str| RegexStage::compile(e).unwrap_err();
    assert!(refused(r"a\b").contains("word boundaries"));
    assert!(refused(r"(a)\1").contains("back-references"));
    assert!(refused(r"a*").contains("empty string"));
    assert!(refused(r"(?=(\d{3})+(?!\d))").contains("look-ahead"));
    assert!(refused(r"a(?!bc)").contains("wider than one character"));
    assert!(refused(r"(?<=a)b").contains("group kind"));
    assert!(refused(r"[z-a]").contains("out of order"));
    assert!(refused(r"a(").contains("unclosed"));
    assert!(refused("\\p{L}é").contains("non-ASCII"));
}
