//! `llmroute chat`: one prompt to the cheapest provider with room; the answer on stdout.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::anyhow;
use clap::Args;
use router_sdk::{ChatRequest, Message, Priority, Router};

use crate::context::Context;
use crate::failure::Failure;
use crate::flags;
use crate::interrupt::{Signals, stopped_by, until_signal};

mod answer;
mod inputs;
mod report;

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
    /// Upper bound on completion tokens, from 1 to 4294967295
    #[arg(long, value_name = "N")]
    max_tokens: Option<u64>,
    /// Sampling temperature, from 0 to 2 (Anthropic models take at most 1)
    #[arg(long, value_name = "T")]
    temperature: Option<f64>,
    /// Tenant to account the request to (its tier's limits and budget apply)
    #[arg(long, value_name = "NAME")]
    tenant: Option<String>,
    /// `batch` requests may use only `priorities.batch_share` of each deployment's capacity and
    /// wait behind interactive ones
    #[arg(long, value_enum, default_value_t = PriorityArg::Interactive)]
    priority: PriorityArg,
    /// Give up after this many seconds, waits and retries included, at most 86400 (default:
    /// `retry.deadline_secs`)
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// Wait for the whole answer instead of streaming it
    #[arg(long)]
    no_stream: bool,
    /// Print one JSON object: provider, model, content, usage, cost_usd, attempts
    #[arg(long)]
    json: bool,
    /// Extra HTTP header sent to the provider, as NAME=VALUE (repeatable), e.g. a trace id
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    /// An image to send with the prompt (repeatable): a PNG, JPEG, GIF or WebP file, or an
    /// http(s) URL the provider fetches. Only models with the `vision` capability are asked
    #[arg(long = "image", value_name = "FILE|URL")]
    images: Vec<String>,
    /// Ask for JSON that matches the JSON Schema in FILE. The whole answer is checked to be
    /// JSON before it is printed (exit 4 if the provider returned something else); implies
    /// --no-stream
    #[arg(long, value_name = "FILE")]
    json_schema: Option<PathBuf>,
}

/// `--priority`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PriorityArg {
    Interactive,
    Batch,
}

/// The numeric flags of `chat`, checked.
#[derive(Debug, Clone, Copy)]
struct Numbers {
    /// `--timeout`.
    deadline: Option<Duration>,
    /// `--temperature`.
    temperature: Option<f64>,
    /// `--max-tokens`.
    max_tokens: Option<u64>,
}

impl ChatArgs {
    /// The numeric flags, each in its range, or a usage error naming the flag, the value and
    /// the range ([`flags`]).
    fn numbers(&self) -> Result<Numbers, Failure> {
        Ok(Numbers {
            deadline: self.timeout.map(flags::timeout).transpose()?,
            temperature: self.temperature.map(flags::temperature).transpose()?,
            max_tokens: self.max_tokens.map(flags::max_tokens).transpose()?,
        })
    }

    fn request(&self) -> Result<ChatRequest, Failure> {
        let numbers = self.numbers()?;
        let prompt = read_prompt(&self.prompt, "chat")?;
        let mut messages: Vec<Message> = self.system.iter().map(Message::system).collect();
        let mut user = Message::user(prompt);
        for image in &self.images {
            user = user.with_image(inputs::image(image)?);
        }
        messages.push(user);
        let response_format = self
            .json_schema
            .as_deref()
            .map(inputs::json_schema)
            .transpose()?;
        let headers = self
            .headers
            .iter()
            .map(|h| match h.split_once('=') {
                Some((name, value)) if router_sdk::is_header_name(name.trim()) => {
                    Ok((name.trim().to_owned(), value.to_owned()))
                }
                _ => Err(Failure::usage(anyhow!("{}", malformed_header(h)))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ChatRequest {
            model: self.model.clone(),
            messages,
            max_tokens: numbers.max_tokens,
            temperature: numbers.temperature,
            tenant: self.tenant.clone(),
            deadline: numbers.deadline,
            priority: match self.priority {
                PriorityArg::Interactive => Priority::Interactive,
                PriorityArg::Batch => Priority::Batch,
            },
            headers,
            response_format,
            ..ChatRequest::default()
        })
    }
}

/// The prompt of `-p FILE` (`-p -`: standard input) of `llmroute COMMAND`: text, not blank.
/// Each error names the file (or standard input) and says what to do.
pub(crate) fn read_prompt(path: &Path, command: &str) -> Result<String, Failure> {
    let stdin = path.as_os_str() == "-";
    let mut bytes = Vec::new();
    let read = if stdin {
        std::io::stdin().read_to_end(&mut bytes).map(drop)
    } else {
        std::fs::read(path).map(|b| bytes = b)
    };
    read.map_err(|e| {
        Failure::usage(if stdin {
            anyhow!(
                "cannot read the prompt from standard input (-p -): {e}; pipe the prompt in, \
                 or pass a file with -p FILE"
            )
        } else {
            anyhow!(
                "cannot read prompt file {}: {e}; pass an existing file, or - for standard input",
                path.display()
            )
        })
    })?;
    let source = if stdin {
        "the prompt on standard input (-p -)".to_owned()
    } else {
        format!("prompt file {}", path.display())
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        Failure::usage(anyhow!(
            "{source} is not UTF-8 text (the first invalid byte is at offset {}): the prompt \
             must be text; convert it (e.g. iconv -f LATIN1 -t UTF-8), or extract the text \
             from a binary document first",
            e.utf8_error().valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        let what_to_do = if stdin {
            format!(
                "pipe the prompt in, e.g. echo 'Hello' | llmroute {command} -p -, or pass a \
                 file with -p FILE"
            )
        } else {
            "write the prompt into it, or pass another file".to_owned()
        };
        return Err(Failure::usage(anyhow!("{source} is empty; {what_to_do}")));
    }
    Ok(text)
}

/// Runs the command until it ends or SIGINT / SIGTERM stops it. Either way it waits for what the
/// router still has to settle ([`settle_pending`]: with Redis, settlements leave the request's
/// path) before it exits. A signal drops the request mid-way (its guard settles the estimate and
/// frees the slot) and ends with exit status 130 / 143.
pub(crate) async fn run(
    ctx: &Context<'_>,
    args: &ChatArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    // A bad flag is reported before the configuration is loaded or the ledger opened.
    args.numbers()?;
    let loaded = ctx.load()?;
    let router = ctx.router(loaded).await?;
    // The prompt (`-p -`: standard input, which may wait for the user) is read before the
    // signal handlers are installed: Ctrl-C while it waits ends the process as usual, with
    // nothing reserved yet.
    let req = args.request()?;
    let mut signals = Signals::install()?;
    let sent = answer::answer(args, req, ctx.verbose(), &router, out);
    let ended = until_signal(sent, &mut signals).await;
    if until_signal(settle_pending(&router), &mut signals)
        .await
        .is_err()
    {
        tracing::warn!("a signal: exiting without waiting for pending settlements");
    }
    match ended {
        Ok(result) => result,
        Err(signal) => Err(stopped_by(signal, "chat")),
    }
}

/// How long a stopped chat waits for its settlements before it exits anyway, beyond the usage
/// sink's own timeout.
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// Waits for the settlements `router` handed to the background and its usage record
/// ([`Router::drain`]), so exiting does not cut them short: up to [`SETTLE_WAIT`] and
/// `usage.timeout_ms` on top, since a record whose write hangs goes to the spill file only when
/// that timeout ends.
pub(crate) async fn settle_pending(router: &Router) {
    let usage = router.registry().usage.as_ref().map_or(
        Duration::from_millis(router_core::config::UsageSettings::TIMEOUT_MS),
        |u| u.timeout,
    );
    let wait = SETTLE_WAIT + usage;
    if tokio::time::timeout(wait, router.drain()).await.is_err() {
        tracing::warn!(
            "gave up waiting for settlements and the usage record after {:.1}s: the slots \
             expire after the slot TTL",
            wait.as_secs_f64()
        );
    }
}

/// What is wrong with a `--header` argument that is not `NAME=VALUE`, never showing the
/// argument past a header name: it may hold a key (`Authorization: Bearer sk-...`, as curl
/// takes it).
fn malformed_header(arg: &str) -> String {
    let name = arg.split_once(':').map(|(name, _)| name.trim());
    match name {
        Some(name) if router_sdk::is_header_name(name) => {
            format!(
                "--header `{name}: ...`: write it as {name}=VALUE, with `=` rather than `:` \
                 (the value is not shown here)"
            )
        }
        _ => "--header: an argument is not NAME=VALUE (it is not shown here, as it may hold a \
              key): write it as NAME=VALUE, e.g. --header x-trace-id=abc"
            .to_owned(),
    }
}
