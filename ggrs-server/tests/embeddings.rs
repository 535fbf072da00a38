//! `ggrs serve --embeddings`: OpenAI's `/v1/embeddings` (strings, lists, token ids, base64,
//! `dimensions`), llama-server's `/embedding(s)`, concurrent requests against lone ones, and
//! bad input, on the tiny BERT (mean pooling) against the library's embedder.

use crate::common;

use std::sync::Arc;

use base64::Engine as _;
use common::TestServer;
use ggrs_llama::embed::{EmbedParams, Embedder};
use ggrs_llama::Model;
use serde_json::{json, Value};

fn bert() -> std::path::PathBuf {
    common::tiny("tiny-bert-f16.gguf")
}

fn server() -> TestServer {
    let mut c = common::config(1);
    c.model_path = bert();
    c.embeddings = true;
    TestServer::start(c)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn openai_embeddings_match_the_library() {
    let s = server();
    assert_eq!(s.get("/health").status, 200);
    let model = Arc::new(Model::load(bert()).unwrap());
    let mut emb = Embedder::new(model, EmbedParams::default()).unwrap();
    let texts = ["The capital of France is", "Once upon a time", "1, 2, 3"];
    let want = emb.embed(&texts).unwrap();

    let a = s.post("/v1/embeddings", &json!({"input": texts, "model": "x"}));
    assert_eq!(a.status, 200, "{:?}", a.body);
    assert_eq!(a.body["object"], "list");
    let data = a.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"], i);
        assert_eq!(floats(&d["embedding"]), want[i], "input {i}");
    }
    assert!(a.body["usage"]["prompt_tokens"].as_u64().unwrap() > 0);

    // One string; token ids; base64 (little-endian f32).
    let one = s.post("/v1/embeddings", &json!({"input": texts[0]}));
    assert_eq!(floats(&one.body["data"][0]["embedding"]), want[0]);
    let ids = emb.tokenize(texts[0]).unwrap();
    let by_ids = s.post("/v1/embeddings", &json!({"input": ids}));
    assert_eq!(floats(&by_ids.body["data"][0]["embedding"]), want[0]);
    let b64 = s.post(
        "/v1/embeddings",
        &json!({"input": [texts[1]], "encoding_format": "base64"}),
    );
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.body["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let got: Vec<f32> = bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(got, want[1]);
    // The model's own width is accepted; another is not.
    let same = s.post("/v1/embeddings", &json!({"input": "x", "dimensions": 64}));
    assert_eq!(same.status, 200);
    let bad = s.post("/v1/embeddings", &json!({"input": "x", "dimensions": 32}));
    assert_eq!(bad.status, 400);
    assert_eq!(bad.body["error"]["param"], "dimensions");

    // llama-server's shape: rows per input.
    let l = s.post("/embedding", &json!({"content": texts[2]}));
    assert_eq!(l.status, 200, "{:?}", l.body);
    assert_eq!(floats(&l.body[0]["embedding"][0]), want[2]);
}

#[test]
fn concurrent_requests_equal_lone_ones_and_bad_input_is_400() {
    let s = Arc::new(server());
    let texts: Vec<String> = (0..12)
        .map(|i| format!("sentence number {i} {}", "word ".repeat(i)))
        .collect();
    let lone: Vec<Value> = texts
        .iter()
        .map(|t| {
            s.post("/v1/embeddings", &json!({"input": t})).body["data"][0]["embedding"].clone()
        })
        .collect();
    let handles: Vec<_> = texts
        .iter()
        .cloned()
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                s.post("/v1/embeddings", &json!({"input": t})).body["data"][0]["embedding"].clone()
            })
        })
        .collect();
    for (h, want) in handles.into_iter().zip(&lone) {
        assert_eq!(&h.join().unwrap(), want);
    }
    // llama-server's input forms: an empty string is [CLS][SEP] on BERT; token ids and
    // strings mixed; `prompt_string` and text `content` parts, which equal the plain text.
    let one = |input: Value| {
        let a = s.post("/v1/embeddings", &json!({ "input": input }));
        assert_eq!(a.status, 200, "{input}: {:?}", a.body);
        a.body["data"][0]["embedding"].clone()
    };
    assert!(one(json!("")).as_array().is_some_and(|v| !v.is_empty()));
    let plain = one(json!("hello world"));
    assert_eq!(one(json!({"prompt_string": "hello world"})), plain);
    let parts =
        json!({"content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]});
    assert_eq!(one(parts), plain);
    let tok = ggrs_llama::Tokenizer::open(bert()).expect("tokenizer");
    let mut ids = tok.encode("hello world", true, true).expect("encode");
    ids.push(1012);
    assert_eq!(one(json!(["hello world", 1012])), one(json!(ids)));
    // A string after the first piece gets no special tokens.
    let mut ids = vec![1012];
    ids.extend(tok.encode("hello world", false, true).expect("encode"));
    assert_eq!(one(json!([1012, "hello world"])), one(json!(ids)));
    for body in [
        json!({"input": []}),
        json!({"input": {"content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}}),
        json!({"input": [[]]}),
        json!({"input": "word ".repeat(300)}),
        json!({"input": [999999]}),
        json!({"input": 3}),
        json!({"input": "x", "encoding_format": "hex"}),
        json!({}),
    ] {
        let a = s.post("/v1/embeddings", &body);
        assert_eq!(a.status, 400, "{body}: {:?}", a.body);
        assert!(a.body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    // Not a reranking server; not a generation model.
    assert_eq!(
        s.post("/v1/rerank", &json!({"query": "q", "documents": ["d"]}))
            .status,
        501
    );
    // An embedding model generates nothing: 501 naming the endpoints it serves.
    let c = s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 1}));
    assert_eq!(c.status, 501, "{:?}", c.body);
    let msg = c.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("embeddings only") && msg.contains("/v1/embeddings"),
        "{msg}"
    );
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});
    let c = s.post("/v1/chat/completions", &chat);
    assert_eq!(c.status, 501, "{:?}", c.body);
    assert_eq!(s.get("/v1/models").body["data"][0]["meta"]["n_embd"], 64);
}

#[test]
fn inputs_are_bounded_by_text_bytes_count_and_queue() {
    let mut c = common::config(1);
    c.model_path = bert();
    c.embeddings = true;
    c.max_text_bytes = 100;
    c.engine.queue_capacity = 1;
    let s = Arc::new(TestServer::start(c));
    // 100 bytes of text in all pass, 101 do not, in one string or spread over a list.
    let ok = s.post("/v1/embeddings", &json!({"input": "a ".repeat(50)}));
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    for body in [
        json!({"input": "a ".repeat(50) + "b"}),
        json!({"input": ["a ".repeat(25), "b ".repeat(25) + "c"]}),
    ] {
        let a = s.post("/v1/embeddings", &body);
        assert_eq!(a.status, 400, "{:?}", a.body);
        assert_eq!(a.body["error"]["param"], "input");
        let msg = a.body["error"]["message"].as_str().unwrap();
        assert!(msg.contains("--max-text-bytes"), "{msg}");
    }
    let a = s.post("/embedding", &json!({"content": "x".repeat(101)}));
    assert_eq!(a.status, 400, "{:?}", a.body);
    assert_eq!(a.body["error"]["param"], "content");
    // At most 2048 inputs (token ids carry no text).
    let many: Vec<Vec<u32>> = vec![vec![101, 1996, 102]; 2049];
    let a = s.post("/v1/embeddings", &json!({ "input": many }));
    assert_eq!(a.status, 400, "{:?}", a.body);
    assert!(a.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("at most 2048"));
    // A queue of one request: concurrent requests are answered or told to retry (503 with
    // Retry-After), never lost.
    let ids: Vec<Vec<u32>> = vec![(0..120).map(|i| 1000 + i).collect(); 64];
    let start = Arc::new(std::sync::Barrier::new(6));
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let (s, start, ids) = (s.clone(), start.clone(), ids.clone());
            std::thread::spawn(move || {
                start.wait();
                s.post("/v1/embeddings", &json!({ "input": ids }))
            })
        })
        .collect();
    let answers: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let busy = answers.iter().filter(|a| a.status == 503).count();
    assert!(answers.iter().any(|a| a.status == 200));
    assert!(busy >= 1, "six requests at once on a queue of one");
    for a in &answers {
        assert!(a.status == 200 || a.status == 503, "{:?}", a.body);
        if a.status == 503 {
            assert_eq!(a.retry_after.as_deref(), Some("1"));
            assert!(a.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("queue"));
        } else {
            assert_eq!(a.body["data"].as_array().unwrap().len(), 64);
        }
    }
}

#[test]
fn embeddings_need_the_flag() {
    let s = TestServer::start(common::config(1));
    let a = s.post("/v1/embeddings", &json!({"input": "x"}));
    assert_eq!(a.status, 501, "{:?}", a.body);
}

#[test]
fn rerank_orders_documents_by_relevance_score() {
    let path = common::llama::tiny_reranker();
    let mut c = common::config(1);
    c.model_path = path.clone();
    c.reranking = true;
    let s = TestServer::start(c);
    let model = Arc::new(Model::load(&path).unwrap());
    let mut emb = Embedder::new(model, EmbedParams::default()).unwrap();
    let docs = [
        "Paris is the capital of France.",
        "Bananas are yellow.",
        "1, 2, 3",
    ];
    let want = emb.rerank("The capital of France", &docs).unwrap();
    let a = s.post(
        "/v1/rerank",
        &json!({"query": "The capital of France", "documents": docs, "top_n": 2}),
    );
    assert_eq!(a.status, 200, "{:?}", a.body);
    let results = a.body["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "top_n");
    let mut order: Vec<usize> = (0..3).collect();
    order.sort_by(|&i, &j| want[j].total_cmp(&want[i]));
    for (r, &i) in results.iter().zip(&order) {
        assert_eq!(r["index"], i);
        assert_eq!(r["relevance_score"].as_f64().unwrap() as f32, want[i]);
    }
    let bad = s.post("/rerank", &json!({"query": "q", "documents": []}));
    assert_eq!(bad.status, 400);
    let huge = vec!["word"; 2049];
    let bad = s.post("/rerank", &json!({"query": "q", "documents": huge}));
    assert_eq!(bad.status, 400);
    assert_eq!(bad.body["error"]["param"], "documents");
    assert_eq!(s.post("/v1/embeddings", &json!({"input": "x"})).status, 501);
    drop(s);

    // The file asks for `rank` pooling: served without a flag, the model reranks.
    let mut c = common::config(1);
    c.model_path = path.clone();
    let s = TestServer::start(c);
    let a = s.post(
        "/v1/rerank",
        &json!({"query": "The capital of France", "documents": docs}),
    );
    assert_eq!(a.status, 200, "{:?}", a.body);
    for r in a.body["results"].as_array().unwrap() {
        let i = r["index"].as_u64().unwrap() as usize;
        assert_eq!(r["relevance_score"].as_f64().unwrap() as f32, want[i]);
    }
    let c = s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 1}));
    assert_eq!(c.status, 501, "{:?}", c.body);
    let msg = c.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("/v1/rerank"), "{msg}");
    let _ = std::fs::remove_file(path);
}

/// Pooling `none` answers one vector per token: a request's tokens × `n_embd` numbers are
/// capped (4 Mi), a 400 naming `content` beyond, before the model runs; below, it answers.
#[test]
fn per_token_embeddings_are_bounded() {
    let mut c = common::config(1);
    c.model_path = bert();
    c.embeddings = true;
    c.pooling = Some(ggrs_llama::Pooling::None);
    let s = TestServer::start(c);
    // 1040 inputs of 64 tokens, 64 numbers each: 4,259,840 > 4,194,304.
    let ids: Vec<u32> = (0..64).map(|i| 1000 + i).collect();
    let a = s.post("/embedding", &json!({ "content": vec![ids.clone(); 1040] }));
    assert_eq!(a.status, 400, "{:?}", a.body);
    assert_eq!(a.body["error"]["param"], "content");
    assert!(a.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("pooling 'none'"));
    let a = s.post("/embedding", &json!({ "content": [ids[..8].to_vec()] }));
    assert_eq!(a.status, 200, "{:?}", a.body);
    assert_eq!(a.body[0]["embedding"].as_array().unwrap().len(), 8);
}

/// An embedding-only model served without `--embeddings` serves embeddings anyway (it can do
/// nothing else), generation is a 501 naming the endpoint to use, and `/tokenize` and
/// `/detokenize` work (the vocabulary is there). A smaller `embd_batch` than the model's
/// context is raised to it: the answers are the same bits.
#[test]
fn an_embedding_model_serves_without_the_flag_and_tokenizes() {
    let mut c = common::config(1);
    c.model_path = bert();
    c.embd_batch = 1;
    let s = TestServer::start(c);
    assert_eq!(s.get("/health").status, 200);
    let model = Arc::new(Model::load(bert()).unwrap());
    let mut emb = Embedder::new(model, EmbedParams::default()).unwrap();
    let texts = [
        "The capital of France is",
        "Once upon a time there was a",
        "1, 2",
    ];
    let want = emb.embed(&texts).unwrap();
    let a = s.post("/v1/embeddings", &json!({ "input": texts }));
    assert_eq!(a.status, 200, "{:?}", a.body);
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&floats(&a.body["data"][i]["embedding"]), w, "input {i}");
    }
    let c = s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 1}));
    assert_eq!(c.status, 501, "{:?}", c.body);
    let msg = c.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("/v1/embeddings"), "{msg}");
    // Not a reranker: /rerank says how to get one.
    let r = s.post("/rerank", &json!({"query": "q", "documents": ["d"]}));
    assert_eq!(r.status, 501, "{:?}", r.body);

    // llama.cpp's WordPiece ids (tiny/README-2026.md), with and without [CLS]/[SEP].
    let t = s.post(
        "/tokenize",
        &json!({"content": "The capital of France is", "add_special": true}),
    );
    assert_eq!(t.status, 200, "{:?}", t.body);
    assert_eq!(
        t.body["tokens"],
        json!([101, 1996, 3007, 1997, 2605, 2003, 102])
    );
    let t = s.post("/tokenize", &json!({"content": "The capital"}));
    assert_eq!(t.body["tokens"], json!([1996, 3007]));
    let d = s.post("/detokenize", &json!({"tokens": [1996, 3007, 1997, 2605]}));
    assert_eq!(d.status, 200, "{:?}", d.body);
    // WordPiece's word starts are spaces (llama-server answers the same).
    assert_eq!(d.body["content"], " the capital of france");
}
