//! Helpers of the server tests: tiny models, a server on a free loopback port, and a small
//! HTTP client (ureq) that reads JSON answers and server-sent events.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ggrs_llama::engine::EngineParams;
use ggrs_server::{Server, ServerConfig};
use serde_json::{json, Value};

/// The helpers ggrs-llama's tests share (reference files, the Q8_0 tiny model).
#[path = "../../../ggrs-llama/tests/common/mod.rs"]
pub mod llama;

pub use llama::reference_dir;

/// A tiny model of `shared/reference/tiny`.
pub fn tiny(name: &str) -> PathBuf {
    reference_dir().join("tiny").join(name)
}

/// The tiny LLaMA quantized to Q8_0 (`--pure`), made once per test process: its batched
/// steps and cached prefixes keep a lone request's bits.
pub fn tiny_q8_0() -> PathBuf {
    llama::tiny_llama_q8_0()
}

/// A test configuration: the tiny LLaMA (chatml format), a free port, `n_slots` slots of
/// 512 cells, 1 compute thread, metrics on.
pub fn config(n_slots: usize) -> ServerConfig {
    let mut c = ServerConfig::new(tiny("tiny-llama-f16.gguf"));
    c.port = 0;
    c.chat_template = Some("chatml".into());
    c.metrics = true;
    c.engine = EngineParams {
        n_slots,
        n_ctx: 512 * n_slots,
        n_threads: 1,
        queue_capacity: 16,
        ..EngineParams::default()
    };
    c.timeout = Some(Duration::from_secs(60));
    c
}

/// A running server and a client for it.
pub struct TestServer {
    pub server: Server,
    pub base: String,
    agent: ureq::Agent,
    pub key: Option<String>,
}

/// An answer: status, `Retry-After`, body (JSON when it parses, else a string).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: Value,
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

fn answer(mut r: ureq::http::Response<ureq::Body>) -> Answer {
    let status = r.status().as_u16();
    let retry_after = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let text = r
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()
        .expect("read body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Answer {
        status,
        retry_after,
        body,
    }
}

impl TestServer {
    /// Starts a server with `config` and waits for its model.
    pub fn start(config: ServerConfig) -> TestServer {
        let key = config.api_keys.first().cloned();
        let server = ggrs_server::start(config).expect("start the server");
        server.wait_ready().expect("model ready");
        let base = format!("http://{}", server.local_addr());
        TestServer {
            server,
            base,
            agent: agent(),
            key,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn auth<B>(&self, r: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.key {
            Some(k) => r.header("Authorization", &format!("Bearer {k}")),
            None => r,
        }
    }

    pub fn get(&self, path: &str) -> Answer {
        answer(
            self.auth(self.agent.get(&self.url(path)))
                .call()
                .expect("GET"),
        )
    }

    pub fn post(&self, path: &str, body: &Value) -> Answer {
        self.post_raw(path, body.to_string().as_bytes())
    }

    pub fn post_raw(&self, path: &str, body: &[u8]) -> Answer {
        let r = self
            .auth(self.agent.post(&self.url(path)))
            .header("Content-Type", "application/json")
            .send(body)
            .expect("POST");
        answer(r)
    }

    /// Posts a streaming request; returns the status and a reader of its events.
    pub fn stream(&self, path: &str, body: &Value) -> (u16, Events) {
        let r = self
            .auth(self.agent.post(&self.url(path)))
            .header("Content-Type", "application/json")
            .send(body.to_string().as_bytes())
            .expect("POST");
        let status = r.status().as_u16();
        (
            status,
            Events(BufReader::new(Box::new(r.into_body().into_reader()))),
        )
    }

    /// Posts a streaming request and reads all its events (the JSON ones, then whether
    /// `[DONE]` ended it).
    pub fn stream_all(&self, path: &str, body: &Value) -> (Vec<Value>, bool) {
        let (status, mut ev) = self.stream(path, body);
        assert_eq!(status, 200);
        let mut out = Vec::new();
        while let Some(e) = ev.next_event() {
            if e == "[DONE]" {
                assert!(ev.next_event().is_none(), "events after [DONE]");
                return (out, true);
            }
            out.push(serde_json::from_str(&e).expect("event JSON"));
        }
        (out, false)
    }

    /// The value of the Prometheus metric `name` (without labels).
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.get("/metrics").body;
        let text = text.as_str().expect("metrics text");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
    }

    /// Waits until `f` holds (20 s at most).
    pub fn wait_for(&self, what: &str, mut f: impl FnMut(&TestServer) -> bool) {
        let t0 = Instant::now();
        while !f(self) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "timed out waiting: {what}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether no slot is busy and nothing waits.
    pub fn idle(&self) -> bool {
        self.metric("ggrs_busy_slots") == 0.0 && self.metric("ggrs_queue_length") == 0.0
    }
}

/// The `data:` payloads of a server-sent event stream.
pub struct Events(BufReader<Box<dyn std::io::Read + Send>>);

impl Events {
    /// The next event's data, or `None` at the end of the stream.
    pub fn next_event(&mut self) -> Option<String> {
        let mut data = String::new();
        loop {
            let mut line = String::new();
            if self.0.read_line(&mut line).ok()? == 0 {
                return (!data.is_empty()).then_some(data);
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if !data.is_empty() {
                    return Some(data);
                }
                continue;
            }
            if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            }
        }
    }
}

/// The text of streamed chunks, per choice index (chat deltas or completion texts).
pub fn streamed_texts(events: &[Value], n: usize) -> Vec<String> {
    let mut t = vec![String::new(); n];
    for e in events {
        for c in e["choices"].as_array().expect("choices") {
            let i = c["index"].as_u64().expect("index") as usize;
            let piece = c["delta"]["content"].as_str().or(c["text"].as_str());
            t[i].push_str(piece.unwrap_or(""));
        }
    }
    t
}

/// A greedy chat request.
pub fn chat_body(messages: Value, max_tokens: usize) -> Value {
    json!({"messages": messages, "max_tokens": max_tokens, "temperature": 0})
}
