//! The server stays responsive (issue 32): `/health`, `/metrics` and the page answer
//! within 100 ms while the worst request of each kind runs — a runaway chat template, the
//! largest text `/tokenize` takes (one 1 MiB word, with pieces), a 1 MiB prompt, a body at
//! the 16 MiB limit, and a client that sends half a request line and waits.

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{chat_body, config, TestServer};
use serde_json::json;

/// A hostile request: its HTTP status when it ends (0: no answer expected).
type Hostile = Box<dyn FnOnce() -> u16 + Send>;

#[test]
fn health_metrics_and_page_answer_while_the_worst_requests_run() {
    let mut c = config(2);
    c.chat_template = Some(
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}".into(),
    );
    let s = TestServer::start(c);
    let base = s.base.clone();
    let addr = s.server.local_addr();
    let hostile: Vec<(&str, Hostile)> = vec![
        (
            "runaway template",
            Box::new({
                let base = base.clone();
                move || {
                    post(
                        &base,
                        "/v1/chat/completions",
                        &chat_body(json!([{"role": "user", "content": "hi"}]), 2).to_string(),
                    )
                }
            }),
        ),
        (
            "1 MiB word to /tokenize with pieces",
            Box::new({
                let base = base.clone();
                move || {
                    post(
                        &base,
                        "/tokenize",
                        &json!({"content": "a".repeat((1 << 20) - 16), "with_pieces": true})
                            .to_string(),
                    )
                }
            }),
        ),
        (
            "1 MiB prompt",
            Box::new({
                let base = base.clone();
                move || {
                    post(
                        &base,
                        "/v1/completions",
                        &json!({"prompt": "The cat sat. ".repeat(80_000), "max_tokens": 1})
                            .to_string(),
                    )
                }
            }),
        ),
        (
            "16 MiB body",
            Box::new({
                let base = base.clone();
                move || {
                    post(
                        &base,
                        "/tokenize",
                        &json!({"content": "b".repeat((16 << 20) - 64)}).to_string(),
                    )
                }
            }),
        ),
        (
            "half a request line",
            Box::new(move || {
                let mut t = TcpStream::connect(addr).unwrap();
                t.write_all(b"POST /v1/chat/compl").unwrap();
                std::thread::sleep(Duration::from_secs(3));
                0
            }),
        ),
    ];
    let t0 = Instant::now();
    let workers: Vec<_> = hostile
        .into_iter()
        .map(|(what, f)| std::thread::spawn(move || (what, f())))
        .collect();
    // Poll while they run (at least 3 s: the slow client's time).
    let mut lat: Vec<(Duration, &str)> = Vec::new();
    let agent = common::agent();
    while t0.elapsed() < Duration::from_secs(3) || workers.iter().any(|w| !w.is_finished()) {
        for path in ["/health", "/metrics", "/"] {
            let t = Instant::now();
            let r = agent.get(&format!("{base}{path}")).call().unwrap();
            assert_eq!(r.status().as_u16(), 200, "{path}");
            lat.push((t.elapsed(), path));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the hostile requests hang"
        );
    }
    for w in workers {
        let (what, status) = w.join().unwrap();
        assert!(
            status == 0 || (200..500).contains(&status),
            "{what}: {status}"
        );
    }
    lat.sort();
    let within = lat
        .iter()
        .filter(|(d, _)| *d <= Duration::from_millis(100))
        .count();
    let worst = lat.last().unwrap();
    eprintln!(
        "{} polls in {:.1} s; {} within 100 ms; median {:?}; worst {:?} ({})",
        lat.len(),
        t0.elapsed().as_secs_f64(),
        within,
        lat[lat.len() / 2].0,
        worst.0,
        worst.1
    );
    // On a shared machine a poll may wait for a core now and then: 95% within 100 ms, and
    // no stall (the old server blocked them for 10-14 s).
    assert!(within * 100 >= lat.len() * 95, "{within} of {}", lat.len());
    assert!(
        worst.0 < Duration::from_secs(1),
        "{:?} {}",
        worst.0,
        worst.1
    );
}

fn post(base: &str, path: &str, body: &str) -> u16 {
    common::agent()
        .post(&format!("{base}{path}"))
        .header("Content-Type", "application/json")
        .send(body.as_bytes())
        .unwrap()
        .status()
        .as_u16()
}
