//! Aggregate generation speed of the serving engine without HTTP: `N` concurrent requests
//! of `T` generated tokens each, against one request alone, in the same run.
//!
//! ```text
//! cargo run --release -p ggrs-llama --example engine_throughput -- MODEL.gguf [N=8] [T=128] [THREADS=2] [ROUNDS=3]
//! ```
//!
//! Prints, per round, the 1-stream and N-stream generated tokens/s, and the medians.

use std::sync::Arc;
use std::time::Instant;

use ggrs_llama::engine::{Engine, EngineParams, Request};
use ggrs_llama::{GenerateParams, Model, SamplingParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .ok_or("usage: engine_throughput MODEL [N] [T] [THREADS] [ROUNDS]")?;
    let arg = |i: usize, d: usize| -> Result<usize, Box<dyn std::error::Error>> {
        Ok(args.get(i).map(|s| s.parse()).transpose()?.unwrap_or(d))
    };
    let (n, t, threads, rounds) = (arg(1, 8)?, arg(2, 128)?, arg(3, 2)?, arg(4, 3)?);
    let model = Arc::new(Model::load(path)?);
    let engine = Engine::start(
        model.clone(),
        EngineParams {
            n_slots: n,
            n_ctx: n * 512,
            n_threads: threads,
            ..Default::default()
        },
    )?;
    let prompts = [
        "Write a story about a robot who learns to paint.",
        "fn quicksort<T: Ord>(v: &mut [T]) {",
        "The history of the Roman Empire",
        "List ten fruits:",
    ];
    let request = |i: usize| -> Result<Request, Box<dyn std::error::Error>> {
        let prompt = model.encode_prompt(prompts[i % prompts.len()])?;
        let params = GenerateParams {
            max_tokens: t,
            ignore_eos: true,
            sampling: SamplingParams {
                temperature: 0.8,
                seed: i as u64,
                ..Default::default()
            },
            ..Default::default()
        };
        let mut r = Request::new(prompt, params);
        r.cache_prompt = false;
        Ok(r)
    };
    // Generated tokens per second of `k` requests at once, counting from each request's
    // first token (prompt time excluded, as llama-bench's tg).
    let run = |k: usize| -> Result<f64, Box<dyn std::error::Error>> {
        let streams = (0..k)
            .map(|i| Ok(engine.handle().submit_stream(request(i)?)?))
            .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
        let t0 = Instant::now();
        let mut gen = 0usize;
        let mut prompt_secs = 0f64;
        for s in streams {
            let c = s.wait()?;
            gen += c.tokens.len();
            prompt_secs = prompt_secs.max(c.timings.prompt_secs + c.queue_secs);
        }
        let secs = t0.elapsed().as_secs_f64() - prompt_secs;
        Ok(gen as f64 / secs)
    };
    let (mut one, mut many) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let a = run(1)?;
        let b = run(n)?;
        println!(
            "round {r}: 1 stream {a:.1} t/s, {n} streams {b:.1} t/s ({:.2}x)",
            b / a
        );
        one.push(a);
        many.push(b);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (a, b) = (median(&mut one), median(&mut many));
    println!(
        "median: 1 stream {a:.1} t/s, {n} streams {b:.1} t/s ({:.2}x)",
        b / a
    );
    println!("{:?}", engine.handle().metrics());
    Ok(())
}
