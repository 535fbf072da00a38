//! Helpers shared by the `ggrs` command-line tests: running the binary built for the tests
//! and locating the reference data (`shared/reference`, beside the repository).
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `ggrs args` to completion: whether it exited successfully, its stdout, its stderr.
pub fn ggrs(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ggrs"))
        .args(args)
        .output()
        .expect("run ggrs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `ggrs args` with `input` written to its stdin (then closed) and waits for it.
pub fn ggrs_with_stdin(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ggrs"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ggrs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    child.wait_with_output().expect("wait")
}

/// The path of `shared/reference/<rel>`: the first `shared/reference` going up from this
/// crate (the repository may be a worktree nested deeper than the main checkout).
pub fn reference(rel: &str) -> String {
    // A checkout elsewhere than beside `shared/` (a worktree) names it explicitly.
    if let Some(d) = std::env::var_os("GGRS_REFERENCE_DIR") {
        return format!("{}/{rel}", d.to_string_lossy());
    }
    format!(
        "{}/../../shared/reference/{rel}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `POST path` of the JSON `body` on `addr`: the whole answer (head and body).
pub fn post(addr: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        tcp,
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send the request");
    let mut s = String::new();
    tcp.read_to_string(&mut s).expect("read");
    s
}

/// `GET path` on `addr`: the whole answer (head and body).
pub fn get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut s = String::new();
    tcp.read_to_string(&mut s).expect("read");
    s
}

/// The JSON body of an HTTP answer from [`post`] or [`get`] (after the blank line).
pub fn json_body(answer: &str) -> serde_json::Value {
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_else(|| panic!("no body in {answer:?}"));
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}"))
}

/// A running `ggrs serve` on a free port, killed when dropped.
pub struct Server {
    child: std::process::Child,
    /// `host:port` from the first line the server prints.
    pub addr: String,
    /// `GET /health` once the server answered it (200) or 20 s passed.
    pub health: String,
}

impl Server {
    /// Starts `ggrs serve --port 0 args…` and waits until `/health` says 200 (or 20 s).
    pub fn start(args: &[&str]) -> Server {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_ggrs"))
            .arg("serve")
            .args(["--port", "0"])
            .args(args)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start ggrs serve");
        let mut lines = std::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
        let first = lines.next().expect("a line").expect("text");
        let addr = first
            .split("http://")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_string();
        // Keep reading stderr so that the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let t0 = std::time::Instant::now();
        let health = loop {
            let h = get(&addr, "/health");
            if h.starts_with("HTTP/1.1 200") || t0.elapsed() > std::time::Duration::from_secs(20) {
                break h;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        Server {
            child,
            addr,
            health,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
