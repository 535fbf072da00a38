//! The official chat templates of Llama 3.x, Gemma 2, Phi-3 and Qwen3 (llama.cpp's copies in
//! `models/templates/`, stored under `tests/data/templates/`) rendered as llama.cpp's Jinja
//! engine renders them. The expected texts are written out by hand from each template's
//! logic for the same conversation: system, user, assistant, user, then the generation
//! prompt.

use std::path::PathBuf;

use ggrs_llama::chat::{ChatTemplate, Message, TemplateVars};

/// 2025-01-02 15:00:00 UTC.
const JAN_2_2025: i64 = 1_735_830_000;

fn template(file: &str, bos: &str, eos: &str) -> ChatTemplate {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/templates")
        .join(file);
    let source =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ChatTemplate::Jinja {
        source,
        bos_token: bos.into(),
        eos_token: eos.into(),
    }
}

fn conversation() -> Vec<Message> {
    vec![
        Message::system("You are terse."),
        Message::user("Hi"),
        Message::assistant("Hello."),
        Message::user("2+2?"),
    ]
}

fn vars(enable_thinking: bool) -> TemplateVars {
    TemplateVars {
        enable_thinking,
        now_unix: JAN_2_2025,
    }
}

fn render(t: &ChatTemplate, msgs: &[Message], add_generation_prompt: bool) -> String {
    t.render_with(msgs, add_generation_prompt, &vars(true))
        .expect("render")
}

/// Llama 3.1 / 3.3: the system block with the knowledge cutoff and today's date (llama.cpp
/// passes `date_string` to these templates), then one header per message; no tools.
#[test]
fn llama3_official_template() {
    let t = template(
        "meta-llama-Llama-3.3-70B-Instruct.jinja",
        "<|begin_of_text|>",
        "<|eot_id|>",
    );
    assert_eq!(
        render(&t, &conversation(), true),
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n\
         Cutting Knowledge Date: December 2023\nToday Date: 02 Jan 2025\n\n\
         You are terse.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    // Without a system message the block is still there, empty after the date.
    assert_eq!(
        render(&t, &[Message::user(" Hi ")], false),
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n\
         Cutting Knowledge Date: December 2023\nToday Date: 02 Jan 2025\n\n<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    );
}

/// Gemma 2 raises on a system message: as llama.cpp does for a template without a system
/// role, the system text starts the first user message (joined by a newline).
#[test]
fn gemma2_official_template_merges_the_system_message() {
    let t = template("google-gemma-2-2b-it.jinja", "<bos>", "<eos>");
    assert_eq!(
        render(&t, &conversation(), true),
        "<bos><start_of_turn>user\nYou are terse.\nHi<end_of_turn>\n\
         <start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\n2+2?<end_of_turn>\n\
         <start_of_turn>model\n"
    );
    // The template's own checks still hold: roles must alternate.
    let bad = [Message::user("a"), Message::user("b")];
    assert!(t.render_with(&bad, true, &vars(true)).is_err());
}

/// Phi-3 (3.5-mini's template): `<|role|>\n` + content + `<|end|>\n`; EOS only without the
/// generation prompt.
#[test]
fn phi3_official_template() {
    let t = template(
        "microsoft-Phi-3.5-mini-instruct.jinja",
        "<s>",
        "<|endoftext|>",
    );
    assert_eq!(
        render(&t, &conversation(), true),
        "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n\
         <|assistant|>\nHello.<|end|>\n<|user|>\n2+2?<|end|>\n<|assistant|>\n"
    );
    assert_eq!(
        render(&t, &[Message::user("Hi")], false),
        "<|user|>\nHi<|end|>\n<|endoftext|>"
    );
}

/// Qwen3: ChatML; `enable_thinking = false` adds an empty think block to the generation
/// prompt; the reasoning of answers before the last question is dropped, that of the last
/// answer kept.
#[test]
fn qwen3_official_template_and_thinking() {
    let t = template("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>");
    let chatml = "<|im_start|>system\nYou are terse.<|im_end|>\n\
                  <|im_start|>user\nHi<|im_end|>\n\
                  <|im_start|>assistant\nHello.<|im_end|>\n\
                  <|im_start|>user\n2+2?<|im_end|>\n\
                  <|im_start|>assistant\n";
    assert_eq!(render(&t, &conversation(), true), chatml);
    let no_think = t
        .render_with(&conversation(), true, &vars(false))
        .expect("render");
    assert_eq!(no_think, format!("{chatml}<think>\n\n</think>\n\n"));

    let thought = "<think>\nLet me see.\n</think>\n\nHello.";
    let earlier = [
        Message::user("Hi"),
        Message::assistant(thought),
        Message::user("2+2?"),
    ];
    assert_eq!(
        render(&t, &earlier, true),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n\
         <|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    );
    let last = [Message::user("Hi"), Message::assistant(thought)];
    assert_eq!(
        render(&t, &last, false),
        "<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\n<think>\nLet me see.\n</think>\n\nHello.<|im_end|>\n"
    );
}

/// `date_string` goes to the Llama 3.x templates only (as llama.cpp passes it);
/// `strftime_now` to every template; `enable_thinking` is true by default.
#[test]
fn template_variables() {
    let t = ChatTemplate::Jinja {
        source: "{% if date_string is defined %}D{% else %}U{% endif %} \
                 {{ strftime_now('%d %B %Y') }} {% if enable_thinking %}think{% endif %}"
            .into(),
        bos_token: String::new(),
        eos_token: String::new(),
    };
    assert_eq!(
        render(&t, &[Message::user("x")], true),
        "U 02 January 2025 think"
    );
    let plain = t.render(&[Message::user("x")], true).expect("render");
    assert!(plain.ends_with(" think"), "{plain}");
}

/// llama.cpp's built-in formats by name (`llama_chat_apply_template`), written out for the
/// same conversation.
#[test]
fn named_formats() {
    let named = |name: &str| ChatTemplate::named(name).expect("a known name");
    let conv = conversation();
    assert_eq!(
        render(&named("llama3"), &conv, true),
        "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    // Gemma has no system turn: its text opens the first user turn, then a blank line.
    assert_eq!(
        render(&named("gemma"), &conv, true),
        "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n\
         <start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n"
    );
    assert_eq!(
        render(&named("phi3"), &conv, true),
        "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n\
         <|assistant|>\nHello.<|end|>\n<|user|>\n2+2?<|end|>\n<|assistant|>\n"
    );
    assert_eq!(
        render(&named("chatml"), &conv, false),
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
    );
    // llama.cpp's own expected outputs (its server test of /apply-template, its
    // `llm_chat_apply_template` for gpt-oss).
    assert_eq!(
        render(
            &named("command-r"),
            &[
                Message::system("You are a test."),
                Message::user("Hi there")
            ],
            true
        ),
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>\
         <|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>\
         <|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    );
    assert_eq!(
        render(&named("gpt-oss"), &conv[1..3], true),
        "<|start|>user<|message|>Hi<|end|><|start|>assistant<|message|>Hello.<|return|>\
         <|start|>assistant"
    );
    assert_eq!(named("chatglm3"), ChatTemplate::ChatGlm3);
    assert_eq!(named("chatglm4"), ChatTemplate::Glm4);
    assert_eq!(ChatTemplate::named("llama-3"), None);
    // llama3 and gemma trim the content (C whitespace), phi3 and chatml keep it.
    let spaced = [Message::user(" \tHi\n")];
    assert_eq!(
        render(&named("llama3"), &spaced, false),
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    );
    assert_eq!(
        render(&named("gemma"), &spaced, false),
        "<start_of_turn>user\nHi<end_of_turn>\n"
    );
    assert_eq!(
        render(&named("phi3"), &spaced, false),
        "<|user|>\n \tHi\n<|end|>\n"
    );
}

/// A template cannot fill the memory within its step budget: what it writes, and the
/// values `replace` and `join` would make, stop at the caller's limit with an error saying
/// so (issue 32). Without the limit each of these writes or builds gigabytes or more.
/// The error of rendering `source` (then the user's message) within `limit` bytes, which
/// must fail within 20 s.
fn hostile_error(source: &str, limit: usize) -> String {
    let t = ChatTemplate::Jinja {
        source: format!("{source}{{{{ messages[0].content }}}}"),
        bos_token: String::new(),
        eos_token: String::new(),
    };
    let t0 = std::time::Instant::now();
    let e = t
        .render_limited(&[Message::user("hi")], true, &vars(true), None, limit)
        .expect_err(source);
    assert!(t0.elapsed().as_secs() < 20, "{source}: {:?}", t0.elapsed());
    e.to_string()
}

#[test]
fn templates_cannot_write_or_build_past_the_limit() {
    const LIMIT: usize = 1 << 20;
    let huge = [
        // One write of 100 MB (minijinja's own cap on a repeated string).
        "{{ 'x' * 100000000 }}",
        // 10 MB per iteration, 10^5 iterations.
        "{% for i in range(100000) %}{{ 'x' * 10000000 }}{% endfor %}",
        // A string concatenated in a loop and written each time (quadratic).
        "{% set ns = namespace(s='') %}{% for i in range(100000) %}\
         {% set ns.s = ns.s ~ 'xxxxxxxxxx' %}{{ ns.s }}{% endfor %}",
        // Range lists written over and over.
        "{% for i in range(1000) %}{{ range(100000)|list }}{% endfor %}",
        // Replacement that multiplies the size (10^9 bytes at the second step).
        "{% set s = 'x' * 1000 %}{{ s|replace('x', s)|replace('x', s) }}",
        "{% set s = 'x' * 1000 %}{% set t = s.replace('x', s).replace('x', s) %}.",
        // Joins with a huge separator, as a filter and as Python's method.
        "{{ range(100000)|join('y' * 100000) }}",
        "{% set t = ('y' * 100000).join(range(100000)) %}.",
    ];
    for source in huge {
        let text = hostile_error(source, LIMIT);
        assert!(
            text.contains("more than the limit of 1048576 bytes"),
            "{source}: {text}"
        );
    }
    // The bounded filters and methods give what minijinja's own give (`none` written as
    // minijinja writes it, `None`).
    let t = ChatTemplate::Jinja {
        source: "{{ ['a', 1, none, [2]]|join(', ') }}|{{ 'abc'|join }}|{{ 'a-b-c'|replace('-', '+') }}|\
                 {{ ', '.join(['x', 'y']) }}|{{ 'a-b-c'.replace('-', '') }}|{{ 'aaa'.replace('a', 'b', 2) }}|\
                 {{ messages[0].content.strip().upper() }}"
            .into(),
        bos_token: String::new(),
        eos_token: String::new(),
    };
    assert_eq!(
        t.render_limited(&[Message::user(" hi ")], true, &vars(true), None, LIMIT)
            .unwrap(),
        "a, 1, None, [2]|abc|a+b+c|x, y|abc|bba|HI"
    );
    // A real template within a small limit renders as without one.
    let qwen3 = template("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>");
    assert_eq!(
        qwen3
            .render_limited(&conversation(), true, &vars(true), None, 4096)
            .unwrap(),
        render(&qwen3, &conversation(), true)
    );
}

/// Templates that grow a value without writing it (issue 32): doubling a string with `~`,
/// `+` or a `{% set %}` capture, doubling a list, a recursive macro, `format` and
/// `str.format`, a huge `indent`, a list joined after growing, and many captures each
/// within the limit: each ends in an error naming the limit within seconds, not an OOM.
#[test]
fn templates_cannot_grow_values_past_the_limit() {
    const LIMIT: usize = 1 << 20;
    let ns = "{% set ns = namespace(s='x', l=[1]) %}";
    let grow = [
        "{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
        "{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}",
        "{% for i in range(64) %}{% set ns.s %}{{ ns.s }}{{ ns.s }}{% endset %}{% endfor %}",
        "{% macro d(s, n) %}{% if n > 0 %}{{ d(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ d('x', 64) }}",
        "{% for i in range(64) %}{% set ns.s = '%s%s'|format(ns.s, ns.s) %}{% endfor %}",
        "{% for i in range(64) %}{% set ns.s = '{}{}'.format(ns.s, ns.s) %}{% endfor %}",
        "{% for i in range(64) %}{% set ns.s = [ns.s, ns.s]|join %}{% endfor %}",
        "{% set t = ('a\\n' * 1000)|indent(1000000000) %}",
        "{% set l = range(100000)|list %}{% set t = (l + l + l + l + l + l + l + l)|join('-') %}",
        "{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{% set t %}{{ s }}{% endset %}{% endfor %}",
        "{% set s = 'x' * 100000000 %}",
    ];
    let msgs = [Message::user("hi")];
    let render_one = |source: &str| hostile_error(&format!("{ns}{source}"), LIMIT);
    for source in grow {
        let text = render_one(source);
        assert!(
            text.contains("more than the limit of 1048576 bytes"),
            "{source}: {text}"
        );
    }
    // minijinja refuses these itself.
    for source in [
        "{% set l = range(1000000000)|list %}",
        "{% set s = 'x' * 1000000000 %}",
    ] {
        render_one(source);
    }
    // Growing within the limit is fine, and gives what it gave.
    let t = ChatTemplate::Jinja {
        source: format!(
            "{ns}{{% for i in range(10) %}}{{% set ns.s = ns.s ~ ns.s %}}{{% set ns.l = ns.l + ns.l %}}\
             {{% endfor %}}{{{{ ns.s|length }}}} {{{{ ns.l|length }}}} {{{{ '%s-%s'|format(1, 'a') }}}} \
             {{{{ '{{}}+{{}}'.format(2, 'b') }}}} {{{{ 'a\\nb'|indent(2) }}}}"
        ),
        bos_token: String::new(),
        eos_token: String::new(),
    };
    assert_eq!(
        t.render_limited(&msgs, true, &vars(true), None, LIMIT)
            .unwrap(),
        "1024 1024 1-a 2+b a\n  b"
    );
}

/// 2026-11-29 12:00:00 UTC, the day llama-server rendered `llama-server-renderings.json`.
const NOV_29_2026: i64 = 1_795_953_600;

/// The official templates of the 2026 families (llama.cpp's copies of SmolLM3, Granite 3.3
/// and 4.0, Ministral 3, Gemma 4, and of the hybrids Qwen3.5, LFM2 and LFM2.5 — Granite
/// 4.0-H uses Granite 4.0's; Gemma 3's and Phi-4-mini's from their Hugging Face
/// `tokenizer_config.json`) render as llama-server renders them
/// (`POST /apply-template` with `--jinja --chat-template-file`, its answers stored in
/// `tests/data/templates/llama-server-renderings.json`): with and without a system message,
/// with and without the generation prompt, and for the hybrids' templates a tool call in the
/// history (Qwen3.5's XML parameters, LFM2's `<|tool_response_start|>`) with the tools offered. llama.cpp drops a leading BOS text from the
/// rendering (the tokenizer adds the BOS token), as ggrs's `encode_rendered` does; the
/// comparison does the same.
#[test]
fn new_families_render_as_llama_server() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/templates/llama-server-renderings.json");
    let text = std::fs::read_to_string(&path).expect("renderings");
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    let renderings = json["renderings"].as_object().expect("renderings");
    assert_eq!(renderings.len(), 10);
    let with_system = conversation();
    let without = [Message::user("Hi")];
    let call = ggrs_llama::chat::tools::ToolCall {
        id: "call_1".into(),
        name: "get_weather".into(),
        arguments: r#"{"city": "Paris", "days": 2}"#.into(),
    };
    let with_call = [
        Message::user("Weather in Paris?"),
        Message::assistant_calls("", vec![call]),
        Message::tool_result("sunny", Some("call_1".into()), None),
    ];
    let tools = serde_json::json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather of a city", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}}]);
    let vars = TemplateVars {
        enable_thinking: true,
        now_unix: NOV_29_2026,
    };
    let mut checked = 0;
    for (file, cases) in renderings {
        let t = template(file, "<s>", "</s>");
        for (key, want) in cases.as_object().expect("cases") {
            let (conv, agp) = key
                .split_once('/')
                .expect("conversation/add_generation_prompt");
            let (msgs, tools): (&[Message], _) = match conv {
                "basic" => (&with_system, None),
                "tools" => (&with_call, Some(&tools)),
                _ => (&without, None),
            };
            let got = t
                .render_tools(msgs, agp == "True", &vars, tools)
                .expect("render");
            let got = got.strip_prefix("<s>").unwrap_or(&got);
            assert_eq!(Some(got), want.as_str(), "{file} {key}");
            checked += 1;
        }
    }
    assert_eq!(checked, 48);
}

/// `+` with an undefined or none operand next to a string adds the empty string, as
/// llama.cpp's Jinja engine does (FireFunction v2's template adds the undefined `functions`
/// to its system text); other sums stay minijinja's, inside loops and branches too.
#[test]
fn plus_takes_undefined_next_to_a_string_as_empty() {
    let render = |source: &str| {
        ChatTemplate::Jinja {
            source: source.into(),
            bos_token: String::new(),
            eos_token: String::new(),
        }
        .render(&[Message::user("x")], true)
    };
    assert_eq!(
        render(
            "{{ 'a' + nothing + 'b' }}|{{ none + 'c' }}|{{ 1 + 2 }}|{{ 1.5 + 1 }}|\
             {{ ([1] + [2]) | length }}|{% set ns = namespace(s='') %}{% for m in messages %}\
             {% if m.role == 'user' %}{% set ns.s = ns.s + m.content + m.missing %}{% endif %}\
             {% endfor %}{{ ns.s }}"
        )
        .expect("render"),
        "ab|c|3|2.5|2|x"
    );
    assert!(render("{{ 1 + nothing }}").is_err());
    assert!(render("{{ [1] + 'a' }}").is_err());
}
