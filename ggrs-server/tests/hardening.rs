//! Hostile clients and careless operators (issue 32): no request stalls the server, exhausts
//! it or gets a misleading answer. Each test names the case of the issue it covers.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{chat_body, config, TestServer};
use serde_json::{json, Value};

fn assert_error(a: &common::Answer, status: u16, param: Option<&str>) {
    assert_eq!(a.status, status, "{:?}", a.body);
    assert_eq!(
        a.body["error"]["param"].as_str(),
        param,
        "param of {:?}",
        a.body
    );
}

/// A nested loop of 10^10 iterations: without a step budget it renders for hours.
const RUNAWAY: &str = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}\
                       {% endfor %}{{ messages[0].content }}";

/// 1 (memory): `/tokenize` of more text than the server's limit is refused at once (it took
/// 11 GB and 8 minutes with `with_pieces`), the limit naming the field; within the limit,
/// pieces are written.
#[test]
fn tokenize_is_bounded_by_the_text_limit() {
    let mut c = config(1);
    c.max_text_bytes = 64 << 10;
    let s = TestServer::start(c);
    let big = "a".repeat(3 << 20);
    let t0 = Instant::now();
    let a = s.post("/tokenize", &json!({"content": big, "with_pieces": true}));
    assert_error(&a, 400, Some("content"));
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let a = s.post(
        "/tokenize",
        &json!({"content": "Hello world", "with_pieces": true}),
    );
    assert_eq!(a.status, 200, "{:?}", a.body);
    let toks = a.body["tokens"].as_array().unwrap();
    assert!(toks
        .iter()
        .all(|t| t["id"].is_u64() && t["piece"].is_string()));
    let text: String = toks.iter().map(|t| t["piece"].as_str().unwrap()).collect();
    assert!(text.contains("Hello") && text.contains("world"), "{text}");
    // The same limit bounds completion prompts and chat messages.
    let a = s.post("/v1/completions", &json!({"prompt": "b".repeat(70 << 10)}));
    assert_error(&a, 400, Some("prompt"));
    let msgs = json!([{"role": "user", "content": "c".repeat(70 << 10)}]);
    assert_error(
        &s.post("/v1/chat/completions", &chat_body(msgs, 2)),
        400,
        Some("messages"),
    );
}

/// 2 (stalls): a runaway chat template ends in an error naming `messages` (minijinja's
/// step budget) instead of running for hours.
#[test]
fn a_runaway_template_is_an_error() {
    let mut c = config(1);
    c.chat_template = Some(RUNAWAY.into());
    let s = TestServer::start(c);
    let t0 = Instant::now();
    let a = s.post(
        "/v1/chat/completions",
        &chat_body(json!([{"role": "user", "content": "hi"}]), 2),
    );
    assert_error(&a, 400, Some("messages"));
    let msg = a.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("budget"), "{msg}");
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
}

/// 2 (stalls): "the work goes on after the client leaves" — requests whose clients left
/// while their preparation waited for the pool are dropped, not rendered: after eight
/// abandoned runaway chats (each renders until its step budget, time T), a `/tokenize`
/// waits at most for the two renders already running (~T), not for all eight (~4T).
#[test]
fn abandoned_requests_are_not_prepared() {
    let mut c = config(1);
    c.chat_template = Some(RUNAWAY.into());
    let s = TestServer::start(c);
    let body = chat_body(json!([{"role": "user", "content": "hi"}]), 2).to_string();
    let t0 = Instant::now();
    assert_eq!(
        s.post_raw("/v1/chat/completions", body.as_bytes()).status,
        400
    );
    let one = t0.elapsed();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let gone: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut t = TcpStream::connect(s.server.local_addr()).unwrap();
            t.write_all(request.as_bytes()).unwrap();
            t
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    drop(gone);
    let t0 = Instant::now();
    let a = s.post("/tokenize", &json!({"content": "hi"}));
    assert_eq!(a.status, 200, "{:?}", a.body);
    let waited = t0.elapsed();
    eprintln!("one runaway render {one:?}; /tokenize after 8 abandoned ones {waited:?}");
    assert!(
        waited < one * 5 / 2 + Duration::from_millis(500),
        "waited {waited:?} (one render: {one:?}): abandoned requests were prepared"
    );
}

/// 1 (memory) and 2 (stalls): a template that writes more than a request may render (10 MB
/// per message turn, a terabyte in all) is stopped at the limit with a 400 naming
/// `messages` and the cause, before it fills the memory.
#[test]
fn a_template_that_writes_too_much_is_an_error() {
    let mut c = config(1);
    c.max_text_bytes = 64 << 10;
    c.chat_template = Some(
        "{% for i in range(100000) %}{{ 'x' * 10000000 }}{% endfor %}{{ messages[0].content }}"
            .into(),
    );
    let s = TestServer::start(c);
    let t0 = Instant::now();
    let a = s.post(
        "/v1/chat/completions",
        &chat_body(json!([{"role": "user", "content": "hi"}]), 2),
    );
    assert_error(&a, 400, Some("messages"));
    let msg = a.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("more than the limit of 131072 bytes"), "{msg}");
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    // The server goes on serving.
    assert_eq!(s.get("/health").status, 200);
}

/// 2 (stalls): a client that sends part of a request line and stops is disconnected after
/// the header timeout.
#[test]
fn a_partial_request_is_closed_after_the_header_timeout() {
    let mut c = config(1);
    c.header_read_timeout = Duration::from_millis(500);
    let s = TestServer::start(c);
    let mut tcp = TcpStream::connect(s.server.local_addr()).unwrap();
    tcp.write_all(b"GET /hea").unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 512];
    // Closed: end of file, or an error answer then end of file; a timeout is a failure.
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the connection stayed open: {e} after {:?}", t0.elapsed()),
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// 2 (stalls): connections beyond the cap wait to be accepted, and are served once one
/// closes.
#[test]
fn connections_beyond_the_cap_wait() {
    let mut c = config(1);
    c.max_connections = 2;
    let s = TestServer::start(c);
    let addr = s.server.local_addr();
    let idle: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut t = TcpStream::connect(addr).unwrap();
            t.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
                .unwrap();
            t
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut third = TcpStream::connect(addr).unwrap();
    third
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 1024];
    assert!(third.read(&mut buf).is_err(), "served beyond the cap");
    drop(idle);
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let n = third
        .read(&mut buf)
        .expect("served after a connection closed");
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
}

/// 2 (stalls): a client that trickles its body (a byte every 100 ms, never finishing) gets
/// 408 naming `--body-timeout` and is disconnected, and the connection's place under
/// `--max-connections` goes to the next client; without a body deadline it held both forever.
#[test]
fn a_trickled_body_is_refused_after_the_body_timeout() {
    let mut c = config(1);
    c.max_connections = 1;
    c.body_read_timeout = Duration::from_millis(800);
    let s = TestServer::start(c);
    let addr = s.server.local_addr();
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(
        b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
          Content-Length: 1000\r\n\r\n{\"content\": \"",
    )
    .unwrap();
    let t0 = Instant::now();
    // Keeps sending (a byte per 100 ms, within any idle timeout) until the server answers.
    let trickle = {
        let mut w = slow.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..200 {
                if w.write_all(b"a").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    slow.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match slow.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no answer to a trickled body: {e} after {:?}", t0.elapsed()),
        }
    }
    let waited = t0.elapsed();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("--body-timeout"), "{text}");
    assert!(
        waited >= Duration::from_millis(700) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    // The only connection place is free again: another client is served.
    let a = s.get("/health");
    assert_eq!(a.status, 200, "{:?}", a.body);
    drop(slow);
    trickle.join().unwrap();
}

/// 3 (silent misconfiguration): a chat template that names no file and is no known name nor
/// Jinja, and one that does not parse, stop the server at start-up.
#[test]
fn unusable_chat_templates_are_start_up_errors() {
    for (t, words) in [
        ("/nonexistent", "not a file"),
        ("{% for m in messages %}{{ m.content }", "template"),
    ] {
        let mut c = config(1);
        c.chat_template = Some(t.into());
        let server = ggrs_server::start(c).expect("binds");
        let e = server.wait_ready().expect_err(t).to_string();
        assert!(
            e.contains("--chat-template") && e.contains(words),
            "{t}: {e}"
        );
    }
}

/// 4 (wrong answers) and 5 (messages): request validation names the field.
#[test]
fn request_validation_names_the_field() {
    let s = TestServer::start(config(1));
    let user = json!([{"role": "user", "content": "hi"}]);
    // `n` beyond the queue (16) can never be served: 400 naming n, no Retry-After.
    let mut b = chat_body(user.clone(), 2);
    b["n"] = json!(17);
    let a = s.post("/v1/chat/completions", &b);
    assert_error(&a, 400, Some("n"));
    assert!(a.retry_after.is_none());
    let a = s.post(
        "/v1/completions",
        &json!({"prompt": ["a", "b", "c", "d", "e"], "n": 4, "max_tokens": 1}),
    );
    assert_error(&a, 400, Some("prompt"));
    for (field, value) in [
        ("max_tokens", json!(-5)),
        ("max_completion_tokens", json!(-2)),
        ("top_p", json!(2)),
        ("min_p", json!(-0.5)),
        ("repeat_penalty", json!(0)),
        ("temperature", json!(1e39)),
        ("logit_bias", json!({"3": 1e39})),
    ] {
        let mut b = chat_body(user.clone(), 2);
        b.as_object_mut().unwrap().remove("max_tokens");
        b[field] = value;
        assert_error(&s.post("/v1/chat/completions", &b), 400, Some(field));
    }
    // A wrongly typed field is refused even when another token limit is given.
    for field in ["n_predict", "max_completion_tokens"] {
        let mut b = chat_body(user.clone(), 2);
        b[field] = json!("ten");
        assert_error(&s.post("/v1/chat/completions", &b), 400, Some(field));
    }
    // -1 still means no limit.
    let mut b = chat_body(user.clone(), 2);
    b["n_predict"] = json!(-1);
    b["max_tokens"] = Value::Null;
    b["max_completion_tokens"] = json!(3);
    assert_eq!(s.post("/v1/chat/completions", &b).status, 200);
    // Every token banned: 400 naming logit_bias, not a banned token.
    let n_vocab = s.get("/v1/models").body["data"][0]["meta"]["n_vocab"]
        .as_u64()
        .unwrap();
    let all: Vec<Value> = (0..n_vocab).map(|t| json!([t, false])).collect();
    let a = s.post(
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2, "logit_bias": all}),
    );
    assert_error(&a, 400, Some("logit_bias"));
}

/// 4: a tiny positive temperature is greedy (it overflowed to NaN probabilities and sampled
/// the least likely token).
#[test]
fn a_tiny_temperature_is_greedy() {
    let s = TestServer::start(config(1));
    let ask = |t: f64, seed: u64| {
        let a = s.post(
            "/v1/completions",
            &json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": t,
                    "seed": seed, "top_k": 0, "top_p": 1, "min_p": 0, "cache_prompt": false}),
        );
        assert_eq!(a.status, 200, "{:?}", a.body);
        a.body["choices"][0]["text"].as_str().unwrap().to_string()
    };
    let greedy = ask(0.0, 1);
    for seed in [1, 2, 3] {
        assert_eq!(ask(1e-40, seed), greedy, "seed {seed}");
        assert_eq!(ask(1e-30, seed), greedy, "seed {seed}");
    }
}

/// 5: the scheme of `Authorization: Bearer` is case-insensitive.
#[test]
fn lowercase_bearer_is_accepted() {
    let mut c = config(1);
    c.api_keys = vec!["k1".into()];
    let s = TestServer::start(c);
    let agent = common::agent();
    for (h, status) in [
        ("bearer k1", 200),
        ("BEARER k1", 200),
        ("Bearer  k1 ", 200),
        ("bearer k2", 401),
        ("Basic k1", 401),
    ] {
        let r = agent
            .get(&s.url("/props"))
            .header("Authorization", h)
            .call()
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{h}");
    }
}

/// Cross-origin safety: no `Access-Control-Allow-Origin: *`, pages of other origins and
/// rebound host names refused; `--cors` lets listed origins in.
#[test]
fn other_origins_are_refused_unless_allowed() {
    let s = TestServer::start(config(1));
    let agent = common::agent();
    let get = |origin: Option<&str>, host: Option<&str>| {
        let mut r = agent.get(&s.url("/health"));
        if let Some(o) = origin {
            r = r.header("Origin", o);
        }
        if let Some(h) = host {
            r = r.header("Host", h);
        }
        r.call().unwrap()
    };
    let r = get(None, None);
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    assert_eq!(
        get(Some("https://evil.example"), None).status().as_u16(),
        403
    );
    assert_eq!(
        get(None, Some("rebound.example:8080")).status().as_u16(),
        403
    );
    let own = format!("http://{}", s.server.local_addr());
    assert_eq!(get(Some(&own), None).status().as_u16(), 200);
    drop(s);

    let mut c = config(1);
    c.cors = vec!["https://app.example".into()];
    let s = TestServer::start(c);
    let r = agent
        .get(&s.url("/health"))
        .header("Origin", "https://app.example")
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .and_then(|v| v.to_str().ok()),
        Some("https://app.example")
    );
}

/// 1 (memory), for the output side: `/detokenize` of more ids than the text limit is refused
/// naming `tokens` (16 MiB of ids wrote some 100 MB of text), and so are fewer ids whose
/// pieces make more text than the limit (a long control token repeated); within the limit
/// it decodes. The work runs on the preparation pool (`/health` answers meanwhile).
#[test]
fn detokenize_is_bounded_by_the_text_limit() {
    let mut c = config(1);
    c.max_text_bytes = 64 << 10;
    let s = TestServer::start(c);
    let hello = s.post("/tokenize", &json!({"content": "Hello world"}));
    let ids = hello.body["tokens"].clone();
    let a = s.post("/detokenize", &json!({ "tokens": ids }));
    assert_eq!(a.status, 200, "{:?}", a.body);
    assert!(a.body["content"].as_str().unwrap().contains("Hello world"));
    // Too many ids: more than the text limit.
    let many = vec![ids[0].clone(); (64 << 10) + 1];
    let t0 = Instant::now();
    let a = s.post("/detokenize", &json!({ "tokens": many }));
    assert_error(&a, 400, Some("tokens"));
    assert!(a.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-text-bytes"));
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    // Fewer ids than the limit, but long pieces: the written text would pass the limit
    // (64 KiB + 64 KiB of template overhead).
    let words = s.post(
        "/tokenize",
        &json!({"content": " internationalization responsibilities understanding", "with_pieces": true}),
    );
    let (id, len) = words.body["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_u64().unwrap(),
                t["piece"].as_str().unwrap().len(),
            )
        })
        .max_by_key(|&(_, len)| len)
        .unwrap();
    let n = (128 << 10) / len + 100;
    assert!(n <= 64 << 10, "piece of {len} bytes");
    let a = s.post("/detokenize", &json!({ "tokens": vec![id; n] }));
    assert_error(&a, 400, Some("tokens"));
    // Just within the limit: it decodes.
    let a = s.post(
        "/detokenize",
        &json!({ "tokens": vec![id; (120 << 10) / len] }),
    );
    assert_eq!(a.status, 200, "{:?}", a.body);
    // An id outside the vocabulary names the field too.
    assert_error(
        &s.post("/detokenize", &json!({"tokens": [1u64 << 31]})),
        400,
        Some("tokens"),
    );
    assert_eq!(s.get("/health").status, 200);
}

/// A slow reader: a client that sends a streaming request and then reads nothing fills the
/// socket's buffers; after `--write-timeout` (1 s here) the server closes the connection,
/// which cancels the request and frees the slot. Without the timeout the engine generated
/// every choice to its end while the connection stayed open for good.
#[test]
fn a_client_that_stops_reading_a_stream_frees_its_slot() {
    let mut c = config(1);
    c.write_timeout = Duration::from_secs(1);
    let s = TestServer::start(c);
    // 16 choices of 500 tokens, each event with 20 alternatives (some 2 KB): megabytes of
    // events, far more than the sockets buffer, and seconds of generation.
    let body = json!({
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": 500, "n": 16, "ignore_eos": true, "stream": true,
        "logprobs": true, "top_logprobs": 20,
    })
    .to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // A small receive buffer, so that the server's writes wait soon.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&s.server.local_addr().into()).unwrap();
    let mut t: TcpStream = sock.into();
    t.write_all(request.as_bytes()).unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        let (c, d) = (
            s.metric("ggrs_requests_cancelled_total"),
            s.metric("ggrs_requests_done_total"),
        );
        if c + d >= 16.0 || (c > 0.0 && s.idle()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let cancelled = s.metric("ggrs_requests_cancelled_total");
    let done = s.metric("ggrs_requests_done_total");
    eprintln!(
        "after {:?}: {done} choices done, {cancelled} cancelled",
        t0.elapsed()
    );
    assert!(
        cancelled > 0.0,
        "the client read nothing, yet all {done} choices were generated"
    );
    s.wait_for("the slot to be free", TestServer::idle);
    // The server closed the connection: what the client reads ends.
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut sink = Vec::new();
    let r = t.read_to_end(&mut sink);
    assert!(
        r.is_ok()
            || r.as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "{r:?}"
    );
    assert!(!String::from_utf8_lossy(&sink).contains("[DONE]"));
    assert_eq!(s.get("/health").status, 200);
}

/// 1 (memory): templates that grow a value without writing it (`~`, `+` on lists, a
/// `{% set %}` capture, each doubling 64 times: 2⁶⁴ bytes) are a 400 naming `messages` and
/// the limit, not an out-of-memory end of the server; `/health` answers meanwhile and the
/// server goes on serving.
#[test]
fn a_template_that_grows_a_value_is_an_error() {
    for grow in [
        "{% set ns.s = ns.s ~ ns.s %}",
        "{% set ns.l = ns.l + ns.l %}",
        "{% set ns.s %}{{ ns.s }}{{ ns.s }}{% endset %}",
    ] {
        let mut c = config(1);
        c.chat_template = Some(format!(
            "{{% set ns = namespace(s='x', l=[1]) %}}{{% for i in range(64) %}}{grow}\
             {{% endfor %}}{{{{ ns.l|length }}}}{{{{ messages[0].content }}}}"
        ));
        let s = std::sync::Arc::new(TestServer::start(c));
        let s2 = s.clone();
        let hostile = std::thread::spawn(move || {
            s2.post(
                "/v1/chat/completions",
                &chat_body(json!([{"role": "user", "content": "hi"}]), 2),
            )
        });
        for _ in 0..5 {
            let t0 = Instant::now();
            assert_eq!(s.get("/health").status, 200);
            assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        }
        let a = hostile.join().unwrap();
        assert_error(&a, 400, Some("messages"));
        let msg = a.body["error"]["message"].as_str().unwrap();
        assert!(msg.contains("more than the limit"), "{grow}: {msg}");
        let ok = s.post("/tokenize", &json!({"content": "still here"}));
        assert_eq!(ok.status, 200, "{grow}");
    }
}
