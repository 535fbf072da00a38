//! The command line prints errors and exits non-zero on bad input.

use crate::common;

use common::ggrs;

fn tiny() -> String {
    common::reference("tiny/tiny-llama-f16.gguf")
}

/// `ggrs bench -m <tiny model>` followed by `args`.
fn bench(args: &[&str]) -> (bool, String, String) {
    let model = tiny();
    let mut all = vec!["bench", "-m", model.as_str()];
    all.extend_from_slice(args);
    ggrs(&all)
}

#[test]
fn missing_model_file_is_an_error() {
    let (ok, _, err) = ggrs(&["run", "-m", "/nonexistent/model.gguf", "-p", "hi"]);
    assert!(!ok);
    assert!(
        err.starts_with("error:") && err.contains("/nonexistent/model.gguf"),
        "{err}"
    );
}

#[test]
fn not_a_gguf_file_is_an_error() {
    let (ok, _, err) = ggrs(&["inspect", env!("CARGO_MANIFEST_DIR")]);
    assert!(!ok, "{err}");
    let p = std::env::temp_dir().join(format!("ggrs-cli-bad-{}.gguf", std::process::id()));
    std::fs::write(&p, b"GGML this is not gguf").unwrap();
    let (ok, _, err) = ggrs(&["inspect", p.to_str().unwrap()]);
    let _ = std::fs::remove_file(&p);
    assert!(!ok);
    assert!(err.contains("error:"), "{err}");
}

#[test]
fn unknown_quantize_type_is_an_error() {
    let (ok, _, err) = ggrs(&["quantize", &tiny(), "/tmp/x.gguf", "q9_9"]);
    assert!(!ok);
    assert!(err.contains("unknown type `q9_9`"), "{err}");
}

#[test]
fn tokenize_and_run_on_the_tiny_model() {
    let (ok, out, err) = ggrs(&[
        "tokenize",
        "-m",
        &tiny(),
        "-p",
        "The capital of France is",
        "--ids",
    ]);
    assert!(ok, "{err}");
    // The reference's token ids for this prompt (BOS added).
    assert_eq!(out.trim(), "[1, 450, 7483, 310, 3444, 338]");
    let (ok, out, err) = ggrs(&[
        "run",
        "-m",
        &tiny(),
        "-p",
        "The capital of France is",
        "-n",
        "5",
        "--temp",
        "0",
        "--json",
        "--top-logprobs",
        "3",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["prompt_tokens"].as_array().unwrap().len(), 6);
    assert_eq!(v["tokens"].as_array().unwrap().len(), 5);
    // Greedy: the reference's first generated tokens (tiny-llama-f16.public.jsonl).
    assert_eq!(v["tokens"][0], 18446);
    assert_eq!(v["tokens"][1], 7344);
    let lp = &v["logprobs"][0]["top_logprobs"];
    assert_eq!(lp.as_array().unwrap().len(), 3);
    // The reference's top three at the last prompt position, in order.
    let ids: Vec<u64> = lp
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["token"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [18446, 29500, 30494]);
}

/// `ggrs run --spec ngram` and `-md` print the tokens, log-probabilities and text of the
/// plain run (seeded sampling); a draft model with another vocabulary, or `--spec draft`
/// without one, is an error.
#[test]
fn run_with_speculation_prints_the_plain_output() {
    let prompt = "a b c d e f g a b c d e f g a b c d e f g a b c";
    let base = [
        "run",
        "-m",
        &tiny(),
        "-p",
        prompt,
        "-n",
        "20",
        "--temp",
        "0.9",
        "--seed",
        "5",
        "--ignore-eos",
        "--json",
        "--top-logprobs",
        "2",
        "-t",
        "1",
    ];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let (ok, out, err) = ggrs(&args);
        assert!(ok, "{extra:?}: {err}");
        serde_json::from_str::<serde_json::Value>(&out).expect("json")
    };
    let plain = run(&[]);
    let yarn = common::reference("tiny/tiny-llama-yarn-f16.gguf");
    for extra in [
        &["--spec", "ngram", "--draft-max", "4"][..],
        &[
            "-md",
            yarn.as_str(),
            "--draft-max",
            "3",
            "--draft-p-min",
            "0",
        ][..],
    ] {
        let spec = run(extra);
        for key in ["tokens", "logprobs", "text"] {
            assert_eq!(plain[key], spec[key], "{extra:?}: {key}");
        }
        assert_eq!(plain["timings"]["draft_n"], 0);
    }
    let qwen3 = common::reference("tiny/tiny-qwen3-f16.gguf");
    let (ok, _, err) = ggrs(&["run", "-m", &tiny(), "-p", "a", "-n", "2", "-md", &qwen3]);
    assert!(!ok && err.contains("vocabulary"), "{err}");
    let (ok, _, err) = ggrs(&[
        "run",
        "-m",
        &tiny(),
        "-p",
        "a",
        "-n",
        "2",
        "--spec",
        "draft",
    ]);
    assert!(!ok && err.contains("-md"), "{err}");
}

/// `ggrs run` on the tiny gpt-oss (sinks, alternating windows, biased experts): llama.cpp's
/// greedy tokens (`tiny-gpt-oss-f16.public.jsonl`).
#[test]
fn run_on_the_tiny_gpt_oss() {
    let model = common::reference("tiny/tiny-gpt-oss-f16.gguf");
    let prompt = "The capital of France is";
    let args = [
        "run", "-m", &model, "-p", prompt, "-n", "5", "--temp", "0", "--json",
    ];
    let (ok, out, err) = ggrs(&args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let tokens: Vec<u64> = v["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().expect("token id"))
        .collect();
    assert_eq!(tokens, [20628, 30399, 26399, 23755, 30191]);
}

#[test]
fn prompt_longer_than_context_is_an_error() {
    let long = "word ".repeat(100);
    let (ok, _, err) = ggrs(&["run", "-m", &tiny(), "-c", "32", "-p", &long]);
    assert!(!ok);
    assert!(err.contains("do not fit in the context"), "{err}");
}

#[test]
fn bench_prints_a_row_per_test_and_thread_count() {
    let (ok, out, err) = bench(&["-p", "16", "-n", "4", "-r", "2", "--threads-list", "1,2"]);
    assert!(ok, "{err}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("| pp16 |") || l.contains("| tg4 |"))
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    // The model column names the file's type from `general.file_type` (1: F16), as
    // llama-quantize names it.
    assert!(
        rows.iter().all(|r| r.starts_with("| llama 0.0B F16 |")),
        "{out}"
    );
    let (ok, out, err) = bench(&["-p", "8", "-n", "0", "-r", "1", "--json", "-d", "4"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(v["test"], "pp8 @ d4");
    assert!(v["tps_median"].as_f64().unwrap() > 0.0);
}

#[test]
fn bench_runs_each_test_at_every_depth_of_a_list() {
    let (ok, out, err) = bench(&["-p", "0", "-n", "3", "-r", "3", "--json", "-d", "0,6"]);
    assert!(ok, "{err}");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(rows[0]["test"], "tg3");
    assert_eq!(rows[0]["depth"], 0);
    assert!(rows[0]["vs_first_depth"].is_null(), "{out}");
    assert_eq!(rows[1]["test"], "tg3 @ d6");
    assert_eq!(rows[1]["depth"], 6);
    // The relative speed is the median of the per-rep ratios of the two depths' samples.
    let samples = |r: &serde_json::Value| -> Vec<f64> {
        r["samples"]
            .as_array()
            .expect("samples")
            .iter()
            .map(|x| x.as_f64().expect("a speed"))
            .collect()
    };
    let (s0, s1) = (samples(&rows[0]), samples(&rows[1]));
    assert_eq!((s0.len(), s1.len()), (3, 3));
    let mut ratios: Vec<f64> = s1.iter().zip(&s0).map(|(a, b)| a / b).collect();
    ratios.sort_by(f64::total_cmp);
    let got = rows[1]["vs_first_depth"].as_f64().expect("a ratio");
    assert!((got - ratios[1]).abs() < 1e-12, "{got} vs {ratios:?}");
    // The table marks it too.
    let (ok, out, err) = bench(&["-p", "0", "-n", "2", "-r", "1", "-d", "0,4"]);
    assert!(ok, "{err}");
    assert!(
        out.lines()
            .any(|l| l.contains("| tg2 @ d4 |") && l.contains("% vs d0)")),
        "{out}"
    );
}

#[test]
fn bench_mem_bw_reports_the_weight_rate_against_a_plain_read() {
    let (ok, out, err) = bench(&["-p", "0", "-n", "2", "-r", "2", "--json", "--mem-bw"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let reads = v["read_samples"]
        .as_array()
        .expect("plain reads, one before and one after every rep");
    assert_eq!(reads.len(), 4, "{out}");
    let read = v["read_gbps"].as_f64().expect("read rate");
    assert!(read > 0.1, "{out}");
    // Weight bytes per token × tokens per second.
    let w = v["weight_gbps"].as_f64().expect("weight rate");
    let per_token = w * 1e9 / v["tps_median"].as_f64().unwrap();
    let file = std::fs::metadata(tiny()).unwrap().len() as f64;
    assert!(per_token > 0.0 && per_token < file, "{per_token} of {file}");
    // Without the flag: no probe.
    let (ok, out, _) = bench(&["-p", "0", "-n", "2", "-r", "1", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert!(
        v["read_gbps"].is_null() && v["weight_gbps"].is_null(),
        "{out}"
    );
}

#[test]
fn quantize_with_a_recipe_and_overrides() {
    let out = std::env::temp_dir().join(format!("ggrs-cli-q-{}.gguf", std::process::id()));
    let out_s = out.to_str().unwrap();
    let (ok, _, err) = ggrs(&[
        "quantize",
        &tiny(),
        out_s,
        "Q4_K_M",
        "--tensor-type",
        "attn_v=q8_0",
        "--output-tensor-type",
        "f16",
        "-t",
        "2",
    ]);
    assert!(ok, "{err}");
    let (ok, table, err) = ggrs(&["inspect", out_s]);
    assert!(ok, "{err}");
    let _ = std::fs::remove_file(&out);
    // llama-quantize's general.file_type for Q4_K_M is 15.
    assert!(
        table
            .lines()
            .any(|l| l.contains("general.file_type") && l.trim_end().ends_with("15")),
        "{table}"
    );
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("{name} not in\n{table}"))
            .to_string()
    };
    assert!(row("blk.0.attn_v.weight").contains("q8_0"));
    assert!(row("output.weight").contains("f16"));
    // A malformed override is an error, not a panic.
    let (ok, _, err) = ggrs(&[
        "quantize",
        &tiny(),
        out_s,
        "q4_k_m",
        "--tensor-type",
        "attn_v",
    ]);
    assert!(!ok);
    assert!(err.contains("bad tensor type override `attn_v`"), "{err}");
}

#[test]
fn imatrix_collect_show_and_quantize_with_it() {
    let dir = std::env::temp_dir();
    let pid = std::process::id();
    let im = dir.join(format!("ggrs-cli-im-{pid}.gguf"));
    let out = dir.join(format!("ggrs-cli-imq-{pid}.gguf"));
    let (im_s, out_s) = (im.to_str().unwrap(), out.to_str().unwrap());
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    let model = tiny();
    let (ok, stdout, err) = ggrs(&[
        "imatrix",
        "-m",
        &model,
        "-p",
        &text,
        "-c",
        "32",
        "--chunks",
        "2",
        "-t",
        "2",
        "-o",
        im_s,
        "--save-frequency",
        "1",
    ]);
    assert!(ok, "{err}");
    // --save-frequency 1: a snapshot after each chunk, as llama-imatrix names them; the
    // last one holds what the output holds.
    let at = |n: usize| std::path::PathBuf::from(format!("{im_s}.at_{n}"));
    assert!(at(1).is_file() && at(2).is_file() && !at(3).exists());
    assert_eq!(std::fs::read(at(2)).unwrap(), std::fs::read(&im).unwrap());
    assert_ne!(std::fs::read(at(1)).unwrap(), std::fs::read(&im).unwrap());
    assert!(
        stdout.contains("[2]") && stdout.contains("Final estimate"),
        "{stdout}"
    );
    let (ok, shown, err) = ggrs(&["imatrix", "--show", im_s]);
    assert!(ok, "{err}");
    assert!(
        shown.contains("GGUF format") && shown.contains("2 chunks of 32"),
        "{shown}"
    );
    assert!(shown.contains("blk.0.attn_q.weight"), "{shown}");
    let (ok, _, err) = ggrs(&[
        "quantize",
        "--imatrix",
        im_s,
        &model,
        out_s,
        "q4_k_m",
        "-t",
        "2",
    ]);
    assert!(ok, "{err}");
    let (ok, table, err) = ggrs(&["inspect", out_s]);
    assert!(ok, "{err}");
    assert!(table.contains("quantize.imatrix.entries_count"), "{table}");
    // (Q2_K_S without one is refused on qwen05b: `ggrs-llama/tests/imatrix_quantize.rs`; the
    // tiny model's rows fall back to Q4_0, which needs none.)
    // A file that is not an importance matrix is an error.
    let (ok, _, err) = ggrs(&["quantize", "--imatrix", &model, &model, out_s, "q4_0"]);
    assert!(!ok);
    assert!(err.contains("error:"), "{err}");
    let _ = std::fs::remove_file(&im);
    let _ = std::fs::remove_file(&out);
    for n in [1, 2] {
        let _ = std::fs::remove_file(at(n));
    }
}

/// `-ctk`/`-ctv`: a quantized cache runs (and `ggrs bench` reports its bytes per token); a
/// type attention cannot read is an error naming the types it can.
#[test]
fn cache_types_run_and_bad_ones_are_errors() {
    let base = [
        "run",
        "-m",
        &tiny(),
        "-p",
        "a b c",
        "-n",
        "3",
        "--temp",
        "0",
    ];
    let run = |extra: &[&str]| ggrs(&[&base[..], extra].concat());
    let (ok, _, err) = run(&["-ctk", "q8_0", "-ctv", "q4_0"]);
    assert!(ok, "{err}");
    let (ok, _, err) = run(&["-ctk", "q4_K"]);
    assert!(
        !ok && err.contains("q5_1") && err.contains("iq4_nl"),
        "{err}"
    );
    let (ok, _, err) = run(&["-ctk", "f32", "-ctv", "q8_0"]);
    assert!(!ok && err.contains("both f32"), "{err}");
    let (ok, out, err) = ggrs(&[
        "bench",
        "-m",
        &tiny(),
        "-p",
        "0",
        "-n",
        "4",
        "-r",
        "1",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("type_k") && out.contains("bytes per token"),
        "{out}"
    );
}

/// `--context-shift --keep N` lets `ggrs run` generate past the end of the context (llama.cpp's
/// flags); without it generation stops there; a model that cannot move positions (a recurrent
/// hybrid) is an error naming the flag.
#[test]
fn context_shift_runs_past_the_context_and_refuses_what_cannot_shift() {
    let base = [
        "run",
        "-m",
        &tiny(),
        "-p",
        "Rust is a language",
        "-n",
        "150",
        "--temp",
        "0",
        "-c",
        "64",
        "--ignore-eos",
        "--json",
    ];
    let run = |extra: &[&str]| ggrs(&[&base[..], extra].concat());
    let json = |out: &str| -> serde_json::Value { serde_json::from_str(out).unwrap() };
    let (ok, out, err) = run(&["--context-shift", "--keep", "4"]);
    assert!(ok, "{err}");
    let shifted = json(&out);
    assert_eq!(shifted["tokens"].as_array().unwrap().len(), 150, "{out}");
    let (ok, out, err) = run(&[]);
    assert!(ok, "{err}");
    let plain = json(&out);
    assert_eq!(plain["stop"]["type"], "context_full", "{out}");
    let n = plain["tokens"].as_array().unwrap().len();
    // The same tokens until the context is full, where llama-completion stops: prompt and
    // output hold the 64 cells (the last token is never evaluated).
    assert_eq!(
        plain["prompt_tokens"].as_array().unwrap().len() + n,
        64,
        "{out}"
    );
    assert_eq!(
        plain["tokens"].as_array().unwrap()[..],
        shifted["tokens"].as_array().unwrap()[..n]
    );
    let (ok, _, err) = ggrs(&[
        "run",
        "-m",
        &common::reference("tiny/tiny-granite-hybrid-f16.gguf"),
        "-p",
        "a b",
        "-n",
        "2",
        "--context-shift",
    ]);
    assert!(
        !ok && err.contains("context shift is not supported"),
        "{err}"
    );
    let (ok, _, err) = run(&["--keep", "4"]);
    assert!(!ok && err.contains("--context-shift"), "{err}");
}
