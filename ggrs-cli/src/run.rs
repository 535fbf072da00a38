//! `ggrs run`: generate text from a prompt, streaming it to stdout.

use std::io::Write;
use std::ops::ControlFlow;

use ggrs_llama::{GenerateParams, StopReason};
use serde_json::json;

use crate::common::{ModelArgs, PromptArgs, SamplingArgs};
use crate::CliResult;

/// Arguments of `ggrs run`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    prompt: PromptArgs,
    /// Most tokens to generate (-1: until the context is full).
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 128,
        allow_negative_numbers = true
    )]
    n_predict: i64,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    spec: crate::common::SpecArgs,
    #[command(flatten)]
    grammar: crate::grammar::GrammarArgs,
    /// Stop when the text contains this string (repeatable).
    #[arg(long = "stop")]
    stop: Vec<String>,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Print the prompt before the generated text.
    #[arg(long)]
    echo: bool,
    /// Treat the prompt as one user message of a chat: format it with the model's chat
    /// template (`tokenizer.chat_template`, or ChatGLM's built-in format; see
    /// --chat-template).
    #[arg(long)]
    chat: bool,
    /// With --chat: a system message before the user's.
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// With --chat: ask a thinking model to answer without thinking (its template gets
    /// `enable_thinking = false`).
    #[arg(long, requires = "chat")]
    no_think: bool,
    /// With --chat: whether a reasoning model thinks (`-rea` works too): `off` is
    /// --no-think; `on` and `auto` keep the template's default (thinking on).
    #[arg(long, requires = "chat", value_name = "on|off|auto", value_parser = crate::common::reasoning_arg)]
    reasoning: Option<ggrs_llama::chat::reply::Reasoning>,
    /// With --chat: the chat format instead of the model's: a name of llama.cpp's built-in
    /// formats (llama3, gemma, phi3, chatml, command-r, gpt-oss, chatglm3, chatglm4), a file holding a Jinja template,
    /// or a Jinja template's text.
    #[arg(long, requires = "chat", value_name = "FILE|NAME|JINJA")]
    chat_template: Option<String>,
    /// The prompt as token ids (comma-separated), used as given: no BOS or template added.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "IDS",
        conflicts_with = "chat"
    )]
    prompt_ids: Option<Vec<u32>>,
    #[command(flatten)]
    shift: crate::common::ShiftArgs,
    /// Print one JSON object (token ids, text, timings) instead of streaming text.
    #[arg(long)]
    json: bool,
    /// With --json: the K most likely tokens and their log-probabilities at each step.
    #[arg(long, value_name = "K", default_value_t = 0)]
    top_logprobs: usize,
}

fn piece(tok: &ggrs_llama::Tokenizer, id: u32) -> String {
    tok.token_to_piece(id)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Runs `ggrs run`.
pub fn run(a: Args) -> CliResult {
    // A short run does not win back copying the weights that are not repacked (about a
    // thousand F16 tokens on the development machine: see `ModelOptions::copy_weights`).
    let model = a
        .model
        .load(crate::common::n_predict(a.n_predict)? >= 1024)?;
    let (prompt, tokens) = if let Some(ids) = &a.prompt_ids {
        (String::new(), ids.clone())
    } else if a.chat {
        let prompt = a.prompt.text()?;
        let template = crate::common::resolve_template(&model, a.chat_template.as_deref())?;
        crate::chat::check_system(&template, a.system.as_deref())?;
        let no_think = a.no_think || a.reasoning.is_some_and(|r| !r.enable_thinking());
        let text =
            crate::chat::format_single_turn(&template, &prompt, a.system.as_deref(), no_think)?;
        let ids = model.encode_chat(&text)?;
        (text, ids)
    } else {
        let prompt = a.prompt.text()?;
        let ids = model.encode_prompt(&prompt)?;
        (prompt, ids)
    };
    let mut session = a.model.session_with_spec(model.clone(), &a.spec)?;
    a.shift.apply(&mut session)?;
    let params = GenerateParams {
        max_tokens: crate::common::n_predict(a.n_predict)?,
        sampling: a.sampling.params()?,
        stop: a.stop.clone(),
        ignore_eos: a.ignore_eos,
        top_logprobs: a.top_logprobs,
        post_sampling_probs: false,
        constraint: a.grammar.constraint(model.tokenizer())?,
    };
    let mut out = std::io::stdout().lock();
    if a.echo && !a.json {
        write!(out, "{prompt}")?;
        out.flush()?;
    }
    let json = a.json;
    let g = session.generate_tokens(&tokens, &params, |ev| {
        if !json {
            let _ = write!(out, "{}", ev.text);
            let _ = out.flush();
        }
        ControlFlow::Continue(())
    })?;
    let t = g.timings;
    let tok = model.tokenizer();
    if json {
        let logprobs: Vec<_> = g
            .tokens
            .iter()
            .zip(&g.logprobs)
            .map(|(&id, (lp, top))| {
                json!({
                    "token": id,
                    "text": piece(tok, id),
                    "logprob": lp,
                    "top_logprobs": top.iter().map(|&(t, l)| json!({"token": t, "text": piece(tok, t), "logprob": l})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let stop = match &g.stop {
            StopReason::EndOfGeneration(id) => json!({"type": "eog", "token": id}),
            StopReason::MaxTokens => json!({"type": "max_tokens"}),
            StopReason::StopString(s) => json!({"type": "stop_string", "stop": s}),
            StopReason::ContextFull => json!({"type": "context_full"}),
            StopReason::Callback => json!({"type": "cancelled"}),
        };
        let mut obj = json!({
            "model": a.model.path()?.display().to_string(),
            "prompt_tokens": g.prompt_tokens,
            "tokens": g.tokens,
            "text": g.text,
            "stop": stop,
            "seed": params.sampling.seed,
            "timings": {
                "prompt_n": t.prompt_tokens, "prompt_ms": t.prompt_secs * 1e3, "prompt_per_second": t.prompt_tps(),
                "predicted_n": t.gen_tokens, "predicted_ms": t.gen_secs * 1e3, "predicted_per_second": t.gen_tps(),
                "draft_n": t.drafted, "draft_n_accepted": t.accepted,
            },
        });
        if a.top_logprobs > 0 {
            obj["logprobs"] = json!(logprobs);
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&obj)?)?;
    } else {
        writeln!(out)?;
    }
    eprintln!(
        "\nprompt: {} tokens in {:.1} ms ({:.1} t/s) | generation: {} tokens in {:.1} ms ({:.1} t/s) | seed {} | stop: {:?}",
        t.prompt_tokens,
        t.prompt_secs * 1e3,
        t.prompt_tps(),
        t.gen_tokens,
        t.gen_secs * 1e3,
        t.gen_tps(),
        params.sampling.seed,
        g.stop
    );
    if session.speculation().is_some() {
        eprintln!(
            "speculative: {} tokens drafted, {} accepted ({:.1}%)",
            t.drafted,
            t.accepted,
            100.0 * t.accepted as f64 / t.drafted.max(1) as f64
        );
    }
    Ok(())
}
