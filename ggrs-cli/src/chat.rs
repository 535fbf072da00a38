//! `ggrs chat`: an interactive conversation (one line per user message, the reply streamed),
//! and the prompt formatting behind `ggrs run --chat`.

use std::io::{BufRead, Write};
use std::ops::ControlFlow;

use ggrs_llama::chat::{Chat, ChatTemplate, Message, TemplateVars};
use ggrs_llama::GenerateParams;

use crate::common::{ModelArgs, SamplingArgs};
use crate::CliResult;

/// Arguments of `ggrs chat`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    spec: crate::common::SpecArgs,
    #[command(flatten)]
    shift: crate::common::ShiftArgs,
    #[command(flatten)]
    grammar: crate::grammar::GrammarArgs,
    /// A system message that opens the conversation.
    #[arg(long)]
    system: Option<String>,
    /// Ask a thinking model to answer without thinking: its template gets
    /// `enable_thinking = false` (Qwen3 then starts each reply with an empty `<think>` block).
    #[arg(long)]
    no_think: bool,
    /// Whether a reasoning model thinks (`-rea` works too, as llama.cpp's): `off` is
    /// --no-think; `on` and `auto` keep the template's default (thinking on).
    #[arg(long, default_value = "auto", value_name = "on|off|auto", value_parser = crate::common::reasoning_arg)]
    reasoning: ggrs_llama::chat::reply::Reasoning,
    /// The chat format instead of the model's: a name of llama.cpp's built-in formats
    /// (llama3, gemma, phi3, chatml, command-r, gpt-oss, chatglm3, chatglm4), a file holding a Jinja template, or a
    /// Jinja template's text.
    #[arg(long, value_name = "FILE|NAME|JINJA")]
    chat_template: Option<String>,
    /// Most tokens per reply (-1: until the context is full).
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 512,
        allow_negative_numbers = true
    )]
    n_predict: i64,
    /// Stop a reply when its text contains this string (repeatable).
    #[arg(long = "stop")]
    stop: Vec<String>,
}

/// The prompt text of a one-message conversation (`ggrs run --chat`): the optional system
/// message, then `user`, formatted by `template`. `no_think`: the template gets
/// `enable_thinking = false`.
pub fn format_single_turn(
    template: &ChatTemplate,
    user: &str,
    system: Option<&str>,
    no_think: bool,
) -> Result<String, ggrs_llama::chat::ChatError> {
    let mut msgs: Vec<Message> = system.map(Message::system).into_iter().collect();
    msgs.push(Message::user(user));
    template.render_with(&msgs, true, &template_vars(no_think))
}

/// The template variables of `--no-think` (or its absence).
pub fn template_vars(no_think: bool) -> TemplateVars {
    TemplateVars {
        enable_thinking: !no_think,
        ..TemplateVars::default()
    }
}

/// Refuses `--system` for a format without a system role (ChatGLM-6B v1's).
pub fn check_system(template: &ChatTemplate, system: Option<&str>) -> CliResult {
    if system.is_some() && !template.has_system_role() {
        return Err(
            "this model's chat format has no system message (question/answer rounds only): \
             drop --system, or put the instruction into the prompt"
                .into(),
        );
    }
    Ok(())
}

/// Runs `ggrs chat`.
pub fn run(a: Args) -> CliResult {
    let path = a.model.path()?;
    let model = a.model.load(true)?;
    let mut session = a.model.session_with_spec(model, &a.spec)?;
    a.shift.apply(&mut session)?;
    let template = crate::common::resolve_template(session.model(), a.chat_template.as_deref())?;
    let mut chat = Chat::with_template(session, template);
    check_system(chat.template(), a.system.as_deref())?;
    chat.set_system(a.system.clone());
    chat.set_template_vars(template_vars(a.no_think || !a.reasoning.enable_thinking()));
    let params = GenerateParams {
        max_tokens: crate::common::n_predict(a.n_predict)?,
        sampling: a.sampling.params()?,
        stop: a.stop.clone(),
        constraint: a.grammar.constraint(chat.session().model().tokenizer())?,
        ..GenerateParams::default()
    };
    eprintln!(
        "ggrs chat with {} (seed {}). One message per line; /reset starts over; \
         /quit or end of input ends.",
        path.display(),
        params.sampling.seed
    );
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout().lock();
    let mut line = String::new();
    loop {
        eprint!("> ");
        std::io::stderr().flush()?;
        line.clear();
        if input.read_line(&mut line)? == 0 {
            eprintln!();
            break;
        }
        let msg = line.trim_end_matches(['\n', '\r']);
        match msg.trim() {
            "" => continue,
            "/quit" | "/exit" => break,
            "/reset" => {
                chat.reset();
                eprintln!("(conversation cleared)");
                continue;
            }
            _ => {}
        }
        let result = chat.send(msg, &params, |ev| {
            let _ = write!(out, "{}", ev.text);
            let _ = out.flush();
            ControlFlow::Continue(())
        });
        writeln!(out)?;
        match result {
            Ok(g) => {
                let t = g.timings;
                eprintln!(
                    "[prompt: {} new tokens, {:.1} t/s | reply: {} tokens, {:.1} t/s | \
                     context: {} tokens | stop: {:?}]",
                    t.prompt_tokens,
                    t.prompt_tps(),
                    t.gen_tokens,
                    t.gen_tps(),
                    chat.cached_tokens(),
                    g.stop
                );
                if t.drafted > 0 {
                    eprintln!(
                        "[speculative: {} drafted, {} accepted]",
                        t.drafted, t.accepted
                    );
                }
            }
            Err(e) => {
                // The turn is dropped; the conversation before it is kept.
                eprintln!(
                    "error: {} (the message was dropped; /reset starts a new conversation)",
                    crate::report(&e)
                );
            }
        }
    }
    Ok(())
}
