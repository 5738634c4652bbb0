//! `llmroute chat`: one prompt to the cheapest provider with room; the answer on stdout.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::anyhow;
use clap::Args;
use futures_util::StreamExt;
use router_sdk::{
    AttemptOutcome, ChatChunk, ChatRequest, ChatResponse, Message, Priority, Router, StreamSummary,
};
use serde::Serialize;

use crate::failure::Failure;
use crate::interrupt::{Signals, stopped_by, until_signal};
use crate::logging::report;
use crate::pending::Pending;

/// Options of `llmroute chat`.
#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    /// File holding the prompt, or `-` to read it from standard input
    #[arg(short = 'p', long = "prompt", value_name = "FILE")]
    prompt: PathBuf,
    /// System message to send before the prompt
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// Model name or alias (default: `defaults.model` of the configuration)
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// Upper bound on completion tokens
    #[arg(long, value_name = "N")]
    max_tokens: Option<u64>,
    /// Sampling temperature
    #[arg(long, value_name = "T")]
    temperature: Option<f64>,
    /// Tenant to account the request to (its tier's limits and budget apply)
    #[arg(long, value_name = "NAME")]
    tenant: Option<String>,
    /// `batch` requests may use only `priorities.batch_share` of each deployment's capacity and
    /// wait behind interactive ones
    #[arg(long, value_enum, default_value_t = PriorityArg::Interactive)]
    priority: PriorityArg,
    /// Give up after this many seconds, waits and retries included (default: `retry.deadline_secs`)
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// Wait for the whole answer instead of streaming it
    #[arg(long)]
    no_stream: bool,
    /// Print one JSON object: provider, model, content, usage, cost_usd, attempts
    #[arg(long)]
    json: bool,
}

/// `--priority`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PriorityArg {
    Interactive,
    Batch,
}

impl ChatArgs {
    fn request(&self) -> Result<ChatRequest, Failure> {
        let prompt = read_prompt(&self.prompt)?;
        let deadline = match self.timeout {
            Some(secs) if secs.is_finite() && secs > 0.0 => Some(Duration::from_secs_f64(secs)),
            Some(secs) => {
                return Err(Failure::usage(anyhow!(
                    "--timeout: must be a positive number of seconds, got {secs}"
                )));
            }
            None => None,
        };
        let mut messages: Vec<Message> = self.system.iter().map(Message::system).collect();
        messages.push(Message::user(prompt));
        Ok(ChatRequest {
            model: self.model.clone(),
            messages,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            stop: Vec::new(),
            tenant: self.tenant.clone(),
            deadline,
            priority: match self.priority {
                PriorityArg::Interactive => Priority::Interactive,
                PriorityArg::Batch => Priority::Batch,
            },
        })
    }
}

fn read_prompt(path: &PathBuf) -> Result<String, Failure> {
    let mut text = String::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map(drop)
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    read.map_err(|e| {
        Failure::usage(anyhow!(
            "cannot read prompt file {}: {e}; pass an existing file, or - for standard input",
            path.display()
        ))
    })?;
    if text.trim().is_empty() {
        return Err(Failure::usage(anyhow!(
            "the prompt in {} is empty",
            path.display()
        )));
    }
    Ok(text)
}

/// Runs the command until it ends or SIGINT / SIGTERM stops it. A signal drops the request
/// mid-way (its guard settles the estimate and frees the slot), waits for what the router still
/// has to settle ([`settle_pending`]), and ends with exit status 130 / 143.
pub(crate) async fn run_until_signal(
    args: &ChatArgs,
    verbose: bool,
    router: &Router,
    pending: &Pending,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let mut signals = Signals::install()?;
    let signal = match until_signal(run(args, verbose, router, out), &mut signals).await {
        Ok(result) => return result,
        Err(signal) => signal,
    };
    if until_signal(settle_pending(router, pending), &mut signals)
        .await
        .is_err()
    {
        tracing::warn!("a second signal: exiting without waiting for pending settlements");
    }
    Err(stopped_by(signal, "chat"))
}

/// How long a stopped chat waits for its settlements before it exits anyway.
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// Waits (up to [`SETTLE_WAIT`]) for the settlements `router` handed to the background when a
/// request was dropped mid-way, so exiting does not cut them short. This is the place for
/// `router.drain().await`; until the router drains its own, the CLI's [`Pending`] count of
/// running settle / release calls stands in for it.
async fn settle_pending(_router: &Router, pending: &Pending) {
    if tokio::time::timeout(SETTLE_WAIT, pending.settled())
        .await
        .is_err()
    {
        tracing::warn!(
            "gave up waiting for settlements after {}s: their slots expire after the slot TTL",
            SETTLE_WAIT.as_secs()
        );
    }
}

/// Runs the command; `verbose` (the global `-v`): report the routing on stderr.
pub(crate) async fn run(
    args: &ChatArgs,
    verbose: bool,
    router: &Router,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let req = args.request()?;
    if verbose {
        report_candidates(router, &req)?;
    }
    if args.json || args.no_stream {
        let answer = router
            .chat(req)
            .await
            .map_err(|e| routing_failed(verbose, e))?;
        if verbose {
            report_attempts(&answer.attempts, answer.waited);
        }
        if args.json {
            serde_json::to_writer(&mut *out, &JsonAnswer::from(&answer))
                .map_err(|e| Failure::output(e.into()))?;
            writeln!(out).map_err(Failure::output)?;
        } else {
            write_text(out, &answer.content)?;
        }
        return Ok(());
    }
    let summary = stream(router, req, out, verbose).await?;
    if verbose {
        report_attempts(&summary.attempts, summary.waited);
    }
    Ok(())
}

async fn stream(
    router: &Router,
    req: ChatRequest,
    out: &mut dyn Write,
    verbose: bool,
) -> Result<StreamSummary, Failure> {
    let mut stream = router
        .chat_stream(req)
        .await
        .map_err(|e| routing_failed(verbose, e))?;
    let mut ends_with_newline = true;
    while let Some(item) = stream.next().await {
        match item {
            Ok(ChatChunk::Delta(text)) => {
                out.write_all(text.as_bytes())
                    .and_then(|()| out.flush())
                    .map_err(Failure::output)?;
                ends_with_newline = text.ends_with('\n');
            }
            Ok(ChatChunk::Done(summary)) => {
                if !ends_with_newline {
                    writeln!(out).map_err(Failure::output)?;
                }
                return Ok(summary);
            }
            Err(e) => {
                if !ends_with_newline {
                    let _ = writeln!(out);
                }
                return Err(routing_failed(verbose, e));
            }
        }
    }
    Err(Failure::router(router_sdk::Error::InvalidRequest(
        "the stream ended without an answer".into(),
    )))
}

fn write_text(out: &mut dyn Write, content: &str) -> Result<(), Failure> {
    out.write_all(content.as_bytes()).map_err(Failure::output)?;
    if !content.ends_with('\n') {
        writeln!(out).map_err(Failure::output)?;
    }
    Ok(())
}

fn routing_failed(verbose: bool, e: router_sdk::Error) -> Failure {
    if verbose {
        report_attempts(e.attempts(), Duration::ZERO);
    }
    Failure::router(e)
}

fn report_candidates(router: &Router, req: &ChatRequest) -> Result<(), Failure> {
    let preview = router.preview(req).map_err(Failure::router)?;
    report(format_args!(
        "estimate {} prompt + {} completion tokens; candidates, cheapest first:",
        preview.prompt_tokens, preview.completion_tokens
    ));
    for (provider, model, cost) in &preview.candidates {
        report(format_args!("  {provider}/{model}  ~${cost:.6}"));
    }
    Ok(())
}

fn report_attempts(attempts: &[router_sdk::Attempt], waited: Duration) {
    for (i, a) in attempts.iter().enumerate() {
        match &a.outcome {
            AttemptOutcome::Ok => report(format_args!(
                "attempt {}: {}/{} answered",
                i + 1,
                a.provider,
                a.model
            )),
            AttemptOutcome::Failed {
                kind,
                status,
                message,
                cooldown,
            } => {
                let status = status.map(|s| format!(" (HTTP {s})")).unwrap_or_default();
                let cooldown = cooldown
                    .map(|c| format!("; cooling it down {:.1}s", c.as_secs_f64()))
                    .unwrap_or_default();
                report(format_args!(
                    "attempt {}: {}/{} {kind}{status}: {message}{cooldown}",
                    i + 1,
                    a.provider,
                    a.model
                ));
            }
        }
    }
    if !waited.is_zero() {
        report(format_args!(
            "waited {:.1}s for capacity",
            waited.as_secs_f64()
        ));
    }
}

/// The `--json` answer.
#[derive(Serialize)]
struct JsonAnswer<'a> {
    provider: &'a str,
    model: &'a str,
    content: &'a str,
    finish_reason: &'a Option<router_sdk::FinishReason>,
    usage: JsonUsage,
    cost_usd: f64,
    attempts: &'a [router_sdk::Attempt],
    waited_ms: u64,
}

#[derive(Serialize)]
struct JsonUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

impl<'a> From<&'a ChatResponse> for JsonAnswer<'a> {
    fn from(a: &'a ChatResponse) -> Self {
        JsonAnswer {
            provider: &a.provider,
            model: &a.model,
            content: &a.content,
            finish_reason: &a.finish_reason,
            usage: JsonUsage {
                prompt_tokens: a.usage.prompt_tokens,
                completion_tokens: a.usage.completion_tokens,
                total_tokens: a.usage.total_tokens(),
            },
            cost_usd: a.cost_usd,
            attempts: &a.attempts,
            waited_ms: a.waited.as_millis() as u64,
        }
    }
}
