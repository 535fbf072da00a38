//! `ggrs serve`: its flags, its errors, and a real start on the tiny model.

use crate::common;

use common::{get, ggrs, post};

#[test]
fn help_lists_llama_servers_flags() {
    let (ok, out, err) = ggrs(&["help", "serve"]);
    assert!(ok, "{err}");
    for flag in [
        "--model",
        "--host",
        "--port",
        "--ctx-size",
        "--parallel",
        "-np",
        "--batch-size",
        "--threads",
        "--n-predict",
        "--api-key",
        "--alias",
        "--chat-template",
        "--metrics",
        "--no-webui",
        "--timeout",
        "--queue",
        "--reasoning",
        "--context-shift",
        "--keep",
        "--spec",
        "--temp",
        "--seed",
        "--top-k",
    ] {
        assert!(out.contains(flag), "{flag} missing from\n{out}");
    }
}

/// `--context-shift` on a model whose positions cannot move (a recurrent hybrid) stops the
/// server with the reason.
#[test]
fn context_shift_on_a_model_that_cannot_shift_is_an_error() {
    let model = common::reference("tiny/tiny-granite-hybrid-f16.gguf");
    let (ok, _, err) = ggrs(&[
        "serve",
        "-m",
        &model,
        "--port",
        "0",
        "-t",
        "1",
        "--context-shift",
    ]);
    assert!(!ok && err.contains("context shift"), "{err}");
}

#[test]
fn a_missing_model_or_a_port_in_use_is_an_error() {
    let (ok, _, err) = ggrs(&["serve", "-m", "/nonexistent/model.gguf"]);
    assert!(!ok);
    assert!(
        err.starts_with("error:") && err.contains("/nonexistent/model.gguf"),
        "{err}"
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let model = common::reference("tiny/tiny-llama-f16.gguf");
    let (ok, _, err) = ggrs(&["serve", "-m", &model, "--port", &port]);
    assert!(!ok);
    assert!(
        err.contains("cannot listen") && err.contains(&port) && err.contains("--port"),
        "{err}"
    );
}

/// `--reasoning` takes llama-server's on, off and auto; another value is an error naming
/// the flag (before anything is loaded).
#[test]
fn a_bad_reasoning_mode_is_an_error() {
    let model = common::reference("tiny/tiny-llama-f16.gguf");
    for flag in ["--reasoning", "-rea"] {
        let (ok, _, err) = ggrs(&["serve", "-m", &model, flag, "sometimes"]);
        assert!(!ok);
        assert!(
            err.contains("'sometimes'")
                && err.contains("--reasoning")
                && err.contains("on, off or auto"),
            "{err}"
        );
    }
}

/// `--reasoning-format` takes every name llama-server 0c1e570 takes (and `nothink`); another
/// value is an error listing them.
#[test]
fn a_bad_reasoning_format_is_an_error_listing_the_names() {
    let model = common::reference("tiny/tiny-llama-f16.gguf");
    let (ok, _, err) = ggrs(&["serve", "-m", &model, "--reasoning-format", "sometimes"]);
    assert!(!ok);
    for name in ["none", "deepseek", "deepseek-legacy", "auto", "nothink"] {
        assert!(
            err.contains(name) && err.contains("--reasoning-format"),
            "{err}"
        );
    }
}

#[test]
fn serve_prints_its_address_and_answers() {
    let model = common::reference("tiny/tiny-llama-f16.gguf");
    // --chat-template FILE: the file's Jinja template.
    let template = std::env::temp_dir().join(format!("ggrs-serve-{}.jinja", std::process::id()));
    std::fs::write(
        &template,
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] \
         {% if not enable_thinking %}[no thinking]{% endif %}",
    )
    .unwrap();
    let tpl = template.display().to_string();
    let server = common::Server::start(&[
        "-m",
        &model,
        "-np",
        "2",
        "-t",
        "1",
        "--alias",
        "tiny",
        "-c",
        "1024",
        "-rea",
        "off",
        "--chat-template",
        &tpl,
        // Sampling defaults for requests that leave them out, as llama-server's flags.
        "--temp",
        "1.5",
        "--top-k",
        "0",
        "--min-p",
        "0",
        "--seed",
        "42",
    ]);
    let (addr, health) = (server.addr.clone(), server.health.clone());
    let models = get(&addr, "/v1/models");
    let props = get(&addr, "/props");
    // No seed in the requests: the server's --seed makes both draw the same tokens (at a
    // temperature where the tiny random model's draws spread).
    let sample = || {
        common::json_body(&post(
            &addr,
            "/v1/completions",
            r#"{"prompt": "Once upon", "max_tokens": 12}"#,
        ))["choices"][0]["text"]
            .as_str()
            .map(str::to_owned)
    };
    let (first, second) = (sample(), sample());
    let seeded_elsewhere = common::json_body(&post(
        &addr,
        "/v1/completions",
        r#"{"prompt": "Once upon", "max_tokens": 12, "seed": 7}"#,
    ))["choices"][0]["text"]
        .as_str()
        .map(str::to_owned);
    let rendered = post(
        &addr,
        "/apply-template",
        r#"{"messages": [{"role": "user", "content": "hi"}]}"#,
    );
    drop(server);
    let _ = std::fs::remove_file(&template);
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(models.contains("\"id\":\"tiny\""), "{models}");
    assert!(props.contains("\"total_slots\":2"), "{props}");
    let p = &common::json_body(&props)["default_generation_settings"]["params"];
    assert_eq!(
        (
            p["temperature"].as_f64(),
            p["top_k"].as_u64(),
            p["seed"].as_i64()
        ),
        (Some(1.5), Some(0), Some(42)),
        "{props}"
    );
    assert!(first.is_some() && first == second, "{first:?} {second:?}");
    assert_ne!(first, seeded_elsewhere, "a request's own seed wins");
    assert!(props.contains("[assistant] "), "{props}");
    // -rea off: the template sees enable_thinking = false.
    assert!(
        rendered.ends_with("[assistant] [no thinking]\"}"),
        "{rendered}"
    );
}
