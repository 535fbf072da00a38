//! Compares a model's logits with a llama.cpp reference file (`*.public.jsonl`, see
//! `shared/reference/README.md`): prompt logits in one batch, then the reference's greedy
//! tokens fed one per step. Prints, per prompt, whether our argmax followed the reference's
//! greedy run at every step, the largest |Δ logit| over the reference's top-10 entries and
//! the largest difference of the top-10 *gaps* (logit − top-1 logit), which a common
//! offset does not change.
//!
//! usage: cargo run --release -p ggrs-llama --example refcheck -- MODEL.gguf REF.jsonl [THREADS]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use ggrs_llama::{Model, Session, SessionParams};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: refcheck MODEL.gguf REF.jsonl [THREADS]");
        std::process::exit(2);
    }
    let threads = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(2);
    let model = Arc::new(Model::load(&args[1]).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1)
    }));
    let refs = common::read_jsonl(std::path::Path::new(&args[2]));
    let params = SessionParams {
        n_ctx: 256,
        n_batch: 256,
        n_threads: threads,
        logits_all: true,
        ..Default::default()
    };
    let mut s = Session::new(model.clone(), params).expect("session");
    let nv = model.hparams.n_vocab;
    let (mut all_equal, mut worst_abs, mut worst_gap) = (0, 0f32, 0f32);
    for r in &refs {
        s.clear();
        s.eval(&r.tokens, true).expect("prompt eval");
        let mut rows: Vec<Vec<f32>> = (0..r.tokens.len())
            .map(|i| s.all_logits()[i * nv..(i + 1) * nv].to_vec())
            .collect();
        let mut tops = r.prompt_topk.clone();
        let mut follows = true;
        for (j, &tok) in r.greedy.iter().enumerate() {
            let last = rows.last().expect("a row per position");
            if common::argmax(last) != tok {
                if follows {
                    println!(
                        "  {:?}: step {j}: ours {} vs {}",
                        r.prompt,
                        common::argmax(last),
                        tok
                    );
                }
                follows = false;
            }
            if j + 1 < r.greedy.len() {
                s.eval(&[tok], false).expect("decode");
                rows.push(s.logits().to_vec());
            }
        }
        tops.extend(r.greedy_topk.iter().cloned());
        let (mut pa, mut pg) = (0f32, 0f32);
        // prompt_topk has one entry per prompt position; greedy_topk[j] is the row before
        // greedy token j, i.e. the last prompt row again for j = 0.
        let n_p = r.prompt_topk.len();
        for (i, top) in tops.iter().enumerate() {
            let row = if i < n_p {
                &rows[i]
            } else {
                &rows[n_p - 1 + (i - n_p)]
            };
            let (id0, l0) = top[0];
            for &(id, l) in top {
                pa = pa.max((row[id as usize] - l).abs());
                pg = pg.max(((row[id as usize] - row[id0 as usize]) - (l - l0)).abs());
            }
        }
        println!(
            "{:<40} greedy {} max|Δ| {:.2e} max gap Δ {:.2e}",
            format!("{:?}", r.prompt.chars().take(38).collect::<String>()),
            if follows { "equal" } else { "DIFF " },
            pa,
            pg
        );
        all_equal += follows as usize;
        worst_abs = worst_abs.max(pa);
        worst_gap = worst_gap.max(pg);
    }
    println!(
        "SUMMARY greedy equal {all_equal}/{} worst |Δ| {worst_abs:.2e} worst gap Δ {worst_gap:.2e}",
        refs.len()
    );
}
