//! The request forms llama-server accepts besides the plain ones: `logit_bias` keyed by
//! token text (as an object and as a list of pairs), `/completion` prompts of token ids,
//! of ids and strings mixed, and `{"prompt_string": …}` objects, and `post_sampling_probs`.
//! Each accepted form answers as the equivalent plain form; bad input is a 400 naming the
//! field.

use crate::common::{config, TestServer};
use serde_json::{json, Value};

/// Token ids of `text` by the server's `/tokenize`.
fn tokenize(s: &TestServer, text: &str, add_special: bool) -> Vec<u64> {
    let a = s.post(
        "/tokenize",
        &json!({"content": text, "add_special": add_special}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    a.body["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().expect("an id"))
        .collect()
}

/// A greedy `/completion` of `prompt` with `extra` fields: the answer's body.
fn complete(s: &TestServer, prompt: Value, extra: Value) -> Value {
    let mut b = json!({"prompt": prompt, "n_predict": 8, "temperature": 0,
                       "return_tokens": true, "cache_prompt": false});
    for (k, v) in extra.as_object().expect("an object") {
        b[k] = v.clone();
    }
    let a = s.post("/completion", &b);
    assert_eq!(a.status, 200, "{b}: {}", a.body);
    a.body
}

/// A 400 naming `param`, with a message.
fn assert_400(s: &TestServer, path: &str, body: &Value, param: &str) {
    let a = s.post(path, body);
    assert_eq!(a.status, 400, "{body}: {}", a.body);
    assert_eq!(a.body["error"]["param"], param, "{body}: {}", a.body);
    let msg = a.body["error"]["message"].as_str().unwrap_or_default();
    assert!(!msg.is_empty(), "{body}: {}", a.body);
}

/// A text key (object or pair) biases or bans the tokens the tokenizer makes of it, as the
/// ids would; `false` is a ban in every form; bad keys and biases are 400s.
#[test]
fn logit_bias_by_token_text() {
    let s = TestServer::start(config(1));
    let prompt = json!("Once upon a time");
    let word = " the";
    let ids = tokenize(&s, word, false);
    assert!(!ids.is_empty());
    let tokens = |v: &Value| -> Vec<u64> {
        v["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|t| t.as_u64().expect("an id"))
            .collect()
    };
    let by_ids = |bias: Value| {
        let map: serde_json::Map<String, Value> =
            ids.iter().map(|&t| (t.to_string(), bias.clone())).collect();
        complete(&s, prompt.clone(), json!({ "logit_bias": map }))
    };

    // A large bias: only the word's tokens are generated, whichever form names them.
    let boosted = by_ids(json!(100));
    let got = tokens(&boosted);
    assert!(
        !got.is_empty() && got.iter().all(|t| ids.contains(t)),
        "{ids:?}: {boosted}"
    );
    for form in [
        json!({ word: 100 }),
        json!([[word, 100]]),
        json!(ids.iter().map(|&t| json!([t, 100])).collect::<Vec<_>>()),
    ] {
        let got = complete(&s, prompt.clone(), json!({ "logit_bias": form }));
        assert_eq!(got["tokens"], boosted["tokens"], "{form}");
        assert_eq!(got["content"], boosted["content"], "{form}");
    }

    // `false` bans, over a bias given too: none of the word's tokens appear.
    let banned = by_ids(json!(false));
    assert!(tokens(&banned).iter().all(|t| !ids.contains(t)), "{banned}");
    for form in [
        json!({ word: false }),
        json!([[word, false]]),
        json!([[word, 100], [word, false]]),
        json!(ids.iter().map(|&t| json!([t, false])).collect::<Vec<_>>()),
    ] {
        let got = complete(&s, prompt.clone(), json!({ "logit_bias": form }));
        assert_eq!(got["tokens"], banned["tokens"], "{form}");
    }

    for bad in [
        json!({"999999": 1}),
        json!({"-1": 1}),
        json!({"": 1}),
        json!({"5": "strong"}),
        json!({"5": true}),
        json!([[5, 1, 2]]),
        json!([[null, 1]]),
        json!([[999999, 1]]),
        json!([["", 1]]),
        json!("5"),
    ] {
        let body = json!({"prompt": "hi", "n_predict": 2, "logit_bias": bad});
        assert_400(&s, "/completion", &body, "logit_bias");
        let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                          "logit_bias": body["logit_bias"]});
        assert_400(&s, "/v1/chat/completions", &chat, "logit_bias");
    }
}

/// Token ids, ids mixed with strings (BOS only before a leading string) and
/// `{"prompt_string": …}` objects answer as the same tokens given as ids; a list of them is
/// one answer each; out-of-range ids and media are 400s.
#[test]
fn completion_prompts_of_ids_mixed_and_objects() {
    let s = TestServer::start(config(2));
    let text = "Once upon a time";
    let ids = tokenize(&s, text, true);
    let by_ids = complete(&s, json!(ids), json!({}));
    let same = |got: &Value, what: &str| {
        assert_eq!(got["content"], by_ids["content"], "{what}");
        assert_eq!(
            got["tokens_evaluated"], by_ids["tokens_evaluated"],
            "{what}"
        );
    };
    same(&complete(&s, json!(text), json!({})), "a string");
    same(
        &complete(&s, json!({ "prompt_string": text }), json!({})),
        "prompt_string",
    );
    same(
        &complete(&s, json!({ "prompt_string": ids }), json!({})),
        "prompt_string of ids",
    );
    // Mixed: a leading string gets BOS, a later one does not.
    let head = tokenize(&s, "Once upon", true);
    let tail = tokenize(&s, " a time", false);
    let mut joined = head.clone();
    joined.extend(&tail);
    let mixed = complete(&s, json!(["Once upon", tail[0]]), json!({}));
    let mut want = head.clone();
    want.push(tail[0]);
    let plain = complete(&s, json!(want), json!({}));
    assert_eq!(mixed["content"], plain["content"]);
    assert_eq!(mixed["tokens_evaluated"], plain["tokens_evaluated"]);
    let later = complete(&s, json!([head[0], head[1], " a time"]), json!({}));
    let mut want = head[..2].to_vec();
    want.extend(&tail);
    let plain = complete(&s, json!(want), json!({}));
    assert_eq!(later["content"], plain["content"]);
    assert_eq!(later["tokens_evaluated"], plain["tokens_evaluated"]);

    // A list of prompts in different forms: one answer each, in order.
    let a = s.post(
        "/completion",
        &json!({"prompt": [ids, text, {"prompt_string": text}, ["Once upon", tail[0]]],
                "n_predict": 8, "temperature": 0, "cache_prompt": false}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let list = a.body.as_array().expect("a list");
    assert_eq!(list.len(), 4);
    for (i, one) in list.iter().take(3).enumerate() {
        assert_eq!(one["index"], i);
        same(one, "in a list");
    }
    assert_eq!(list[3]["content"], mixed["content"]);
    // The OpenAI endpoint reads the same forms.
    let oai = s.post(
        "/v1/completions",
        &json!({"prompt": {"prompt_string": text}, "max_tokens": 8, "temperature": 0}),
    );
    assert_eq!(oai.status, 200, "{}", oai.body);
    assert_eq!(oai.body["choices"][0]["text"], by_ids["content"]);

    let beyond = s.get("/v1/models").body["data"][0]["meta"]["n_vocab"]
        .as_u64()
        .expect("n_vocab");
    for bad in [
        json!([beyond]),
        json!([1, beyond]),
        json!(["hi", beyond]),
        json!([[1, 2], [beyond]]),
        json!([1, -1]),
        json!([1, 2.5]),
        json!({"prompt_string": text, "multimodal_data": ["AAAA"]}),
        json!({"other": text}),
        json!({"prompt_string": 3}),
        json!([]),
        json!([[]]),
        json!(true),
    ] {
        let body = json!({"prompt": bad, "n_predict": 2});
        assert_400(&s, "/completion", &body, "prompt");
        assert_400(&s, "/v1/completions", &body, "prompt");
    }
}

/// The probabilities of one `completion_probabilities` entry: its own and its alternatives'
/// (checked to be llama-server's post-sampling shape: `prob`, `top_probs`, no log fields).
fn post_probs(e: &Value) -> (f64, Vec<(u64, f64)>) {
    assert!(
        e.get("logprob").is_none() && e.get("top_logprobs").is_none(),
        "{e}"
    );
    assert!(e["token"].is_string() && e["bytes"].is_array(), "{e}");
    let p = e["prob"].as_f64().expect("prob");
    let top = e["top_probs"]
        .as_array()
        .expect("top_probs")
        .iter()
        .map(|t| {
            assert!(t["token"].is_string() && t["bytes"].is_array(), "{t}");
            (
                t["id"].as_u64().expect("id"),
                t["prob"].as_f64().expect("prob"),
            )
        })
        .collect();
    (p, top)
}

/// `post_sampling_probs`: the same tokens as without it; each token's probability is the
/// one the sampler drew it with (top-k 3: at most three alternatives, of probabilities above
/// 0 adding up to 1, the token among them); greedy: probability 1; streamed and chat too.
#[test]
fn post_sampling_probabilities() {
    let s = TestServer::start(config(1));
    let ask = json!({"prompt": "Once upon a time", "n_predict": 8, "temperature": 1.0,
                     "seed": 7, "top_k": 3, "top_p": 1.0, "min_p": 0.0, "n_probs": 5,
                     "return_tokens": true, "cache_prompt": false});
    let mut post = ask.clone();
    post["post_sampling_probs"] = json!(true);
    let plain = s.post("/completion", &ask).body;
    let a = s.post("/completion", &post);
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["tokens"], plain["tokens"], "sampling is unchanged");
    assert_eq!(a.body["generation_settings"]["post_sampling_probs"], true);
    assert_eq!(plain["generation_settings"]["post_sampling_probs"], false);
    let probs = a.body["completion_probabilities"]
        .as_array()
        .expect("probs");
    assert_eq!(probs.len(), 8);
    for (e, id) in probs.iter().zip(a.body["tokens"].as_array().unwrap()) {
        assert_eq!(&e["id"], id);
        let (p, top) = post_probs(e);
        assert!(p > 0.0 && p <= 1.0, "{e}");
        assert!(!top.is_empty() && top.len() <= 3, "{e}");
        assert!(top.iter().all(|&(_, q)| q > 0.0 && q <= 1.0), "{e}");
        assert!(
            top.windows(2).all(|w| w[0].1 >= w[1].1),
            "most likely first: {e}"
        );
        let total: f64 = top.iter().map(|t| t.1).sum();
        assert!((total - 1.0).abs() < 1e-4, "{e}");
        let own = top
            .iter()
            .find(|t| Some(t.0) == id.as_u64())
            .expect("the token");
        assert!((own.1 - p).abs() < 1e-6, "{e}");
    }
    // The model's own log-probabilities differ from the truncated distribution's.
    let model_lp = plain["completion_probabilities"][0]["logprob"]
        .as_f64()
        .expect("logprob");
    assert!((model_lp.exp() - probs[0]["prob"].as_f64().unwrap()).abs() > 1e-6);

    // Greedy: every token certain, the only alternative.
    let mut greedy = post.clone();
    greedy["temperature"] = json!(0);
    let g = s.post("/completion", &greedy).body;
    for e in g["completion_probabilities"].as_array().expect("probs") {
        let (p, top) = post_probs(e);
        assert_eq!(p, 1.0);
        assert_eq!(top, vec![(e["id"].as_u64().unwrap(), 1.0)]);
    }

    // Streamed: each token's event carries its entry, the same as the whole answer's.
    let mut stream = post.clone();
    stream["stream"] = json!(true);
    let (events, _) = s.stream_all("/completion", &stream);
    let streamed: Vec<&Value> = events
        .iter()
        .filter(|e| e["stop"] == false)
        .map(|e| &e["completion_probabilities"][0])
        .collect();
    assert_eq!(streamed.len(), 8);
    for (a, b) in streamed.iter().zip(probs) {
        assert_eq!(post_probs(a), post_probs(b));
    }

    // Chat: the same shape under `logprobs.content`.
    let chat = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 4,
                "temperature": 0, "logprobs": true, "top_logprobs": 2,
                "post_sampling_probs": true}),
    );
    assert_eq!(chat.status, 200, "{}", chat.body);
    let content = chat.body["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("content");
    assert!(!content.is_empty());
    for e in content {
        assert_eq!(post_probs(e).0, 1.0);
    }
    assert_400(
        &s,
        "/completion",
        &json!({"prompt": "hi", "n_probs": 2, "post_sampling_probs": "yes"}),
        "post_sampling_probs",
    );
}
