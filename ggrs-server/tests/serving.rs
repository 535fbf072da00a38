//! The server under load and in trouble: loading, cancellation by a client that goes away,
//! admission control, and a bounded load test whose answers equal the same requests run
//! one at a time.

use crate::common;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use common::{config, TestServer};
use serde_json::{json, Value};

/// A request that generates until a slot of 4096 cells is full (seconds on the tiny model),
/// unless cancelled.
fn endless(stream: bool) -> Value {
    json!({"prompt": "Once upon a time", "max_tokens": 100000, "ignore_eos": true,
           "temperature": 0, "stream": stream})
}

/// One slot of 4096 cells, a queue of `queue`.
fn one_long_slot(queue: usize) -> TestServer {
    let mut c = config(1);
    c.engine.n_ctx = 4096;
    c.engine.queue_capacity = queue;
    TestServer::start(c)
}

#[test]
fn health_is_503_while_the_model_loads_then_the_load_error() {
    let dir = std::env::temp_dir().join(format!("ggrs-server-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("model.gguf");
    let _ = std::fs::remove_file(&fifo);
    match std::process::Command::new("mkfifo").arg(&fifo).status() {
        Ok(s) if s.success() => {}
        _ => {
            eprintln!("SKIPPED: mkfifo is not available");
            return;
        }
    }
    // Opening a FIFO for reading blocks until a writer opens it: the model "loads" until
    // then.
    let mut c = config(1);
    c.model_path = fifo.clone();
    let server = ggrs_server::start(c).expect("start");
    let base = format!("http://{}", server.local_addr());
    let agent = common::agent();
    let get = |path: &str| {
        let mut r = agent.get(&format!("{base}{path}")).call().expect("GET");
        let status = r.status().as_u16();
        let body: Value = r.body_mut().read_json().expect("JSON");
        (status, body)
    };
    let (status, body) = get("/health");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], 503);
    let (status, _) = get("/props");
    assert_eq!(status, 503);
    let (status, models) = get("/v1/models");
    assert_eq!(
        (status, &models["data"][0]["id"]),
        (200, &json!("model.gguf"))
    );
    // Not a GGUF file: the load fails, and says so. (The reader may give up before the
    // write: a broken pipe is fine.)
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let _ = w.write_all(b"not a model");
    drop(w);
    let e = server.wait_ready().expect_err("a load error");
    assert!(e.to_string().contains("model.gguf"), "{e}");
    let (status, body) = get("/health");
    assert_eq!(status, 500, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("cannot load"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_that_goes_away_frees_its_slot() {
    let s = one_long_slot(4);
    // Streaming: read a few chunks, then drop the connection.
    let (status, mut events) = s.stream("/v1/completions", &endless(true));
    assert_eq!(status, 200);
    for _ in 0..3 {
        events.next_event().expect("a chunk");
    }
    assert_eq!(s.metric("ggrs_busy_slots"), 1.0);
    drop(events);
    s.wait_for("the streaming request cancelled", |s| {
        s.metric("ggrs_requests_cancelled_total") == 1.0
    });
    s.wait_for("the slot free", |s| {
        s.get("/slots").body[0]["is_processing"] == false
    });
    assert_eq!(s.metric("ggrs_requests_done_total"), 0.0);

    // Not streaming: the connection closes while the request runs.
    let mut tcp = std::net::TcpStream::connect(s.server.local_addr()).unwrap();
    let body = endless(false).to_string();
    write!(
        tcp,
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    s.wait_for("the request in its slot", |s| {
        s.metric("ggrs_busy_slots") == 1.0
    });
    drop(tcp);
    s.wait_for("the non-streaming request cancelled", |s| {
        s.metric("ggrs_requests_cancelled_total") == 2.0
    });
    s.wait_for("idle", TestServer::idle);
    assert_eq!(s.metric("ggrs_requests_done_total"), 0.0);
}

#[test]
fn a_full_queue_gets_503_with_retry_after() {
    let s = one_long_slot(1);
    let (status, mut a) = s.stream("/v1/completions", &endless(true));
    assert_eq!(status, 200);
    a.next_event().expect("a chunk");
    // The second waits (its answer's headers come at once), the third is refused.
    let (status, b) = s.stream("/v1/completions", &endless(true));
    assert_eq!(status, 200);
    s.wait_for("one request queued", |s| {
        s.metric("ggrs_queue_length") == 1.0
    });
    let c = s.post("/v1/completions", &endless(false));
    assert_eq!(c.status, 503, "{:?}", c.body);
    assert_eq!(c.retry_after.as_deref(), Some("1"));
    assert_eq!(c.body["error"]["type"], "unavailable_error");
    assert!(c.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("busy"));
    drop(a);
    drop(b);
    s.wait_for("idle", TestServer::idle);
    let m = s.get("/metrics").body;
    assert!(
        m.as_str()
            .unwrap()
            .contains("ggrs_http_requests_total{status=\"503\"} 1"),
        "{m}"
    );
}

/// What a load-test request's answer is compared by: text, finish reason, token count and
/// the log-probabilities as written (the same bits give the same digits).
fn outcome(a: &Value) -> (String, String, Value, Value) {
    let c = &a["choices"][0];
    (
        c["text"].as_str().expect("text").to_string(),
        c["finish_reason"].as_str().expect("finish").to_string(),
        a["usage"]["completion_tokens"].clone(),
        c["logprobs"]["token_logprobs"].clone(),
    )
}

#[test]
fn sixteen_clients_sixty_four_requests_equal_the_requests_alone() {
    let mut c = config(4);
    c.model_path = common::tiny_q8_0();
    c.engine.queue_capacity = 64;
    c.engine.n_threads = 2;
    let s = TestServer::start(c);
    const PROMPTS: [&str; 8] = [
        "Once upon a time",
        "The quick brown fox jumps over the lazy dog, and then",
        "In a hole in the ground there lived",
        "1, 2, 3, 4,",
        "It was the best of times, it was the worst of times, it was the age of wisdom",
        "Rust is a language that",
        "The sky",
        "Dear diary, today I",
    ];
    let requests: Vec<Value> = (0..64)
        .map(|i| {
            json!({
                "prompt": PROMPTS[i % PROMPTS.len()],
                "max_tokens": 4 + (i * 7) % 37,
                "temperature": 0.9,
                "seed": 1000 + i,
                "logprobs": 1,
            })
        })
        .collect();
    // Alone: one at a time.
    let alone: Vec<_> = requests
        .iter()
        .map(|r| {
            let a = s.post("/v1/completions", r);
            assert_eq!(a.status, 200, "{:?}", a.body);
            outcome(&a.body)
        })
        .collect();
    let (steps0, gen0) = (
        s.metric("ggrs_steps_total"),
        s.metric("ggrs_generated_tokens_total"),
    );
    // Together: 16 clients share the 64 requests.
    let next = AtomicUsize::new(0);
    let results = Mutex::new(vec![None; requests.len()]);
    std::thread::scope(|sc| {
        for _ in 0..16 {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests.len() {
                    break;
                }
                let a = s.post("/v1/completions", &requests[i]);
                assert_eq!(a.status, 200, "request {i}: {:?}", a.body);
                results.lock().unwrap()[i] = Some(outcome(&a.body));
            });
        }
    });
    let results = results.into_inner().unwrap();
    for (i, (r, a)) in results.iter().zip(&alone).enumerate() {
        assert_eq!(r.as_ref(), Some(a), "request {i} differs when batched");
    }
    // They did run side by side: steps carried several slots' tokens.
    let steps = s.metric("ggrs_steps_total") - steps0;
    let generated = s.metric("ggrs_generated_tokens_total") - gen0;
    eprintln!("batched: {steps} steps for {generated} generated tokens");
    assert!(
        steps < 0.75 * generated,
        "{steps} steps for {generated} tokens: hardly batched"
    );
    // Nothing left behind.
    s.wait_for("idle", TestServer::idle);
    assert_eq!(s.metric("ggrs_requests_done_total"), 128.0);
    assert_eq!(s.metric("ggrs_requests_cancelled_total"), 0.0);
    let slots = s.get("/slots").body;
    assert!(slots
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["is_processing"] == false));
}

#[test]
fn dropping_the_server_ends_open_streams_at_once() {
    let s = one_long_slot(1);
    let (status, mut events) = s.stream("/v1/completions", &endless(true));
    assert_eq!(status, 200);
    events.next_event().expect("a chunk");
    let t0 = std::time::Instant::now();
    drop(s);
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t0.elapsed()
    );
    // The stream ends (without [DONE]).
    let mut rest = 0;
    while let Some(e) = events.next_event() {
        assert_ne!(e, "[DONE]");
        rest += 1;
        assert!(rest < 5000, "the stream goes on");
    }
}
