//! `llmroute embed`: texts to the cheapest embedding model with room; one line per vector on
//! stdout, or the whole answer as JSON.

use std::io::Write;
use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;
use router_sdk::{EmbedRequest, EmbedResponse};
use serde::Serialize;

use crate::commands::chat::{read_prompt, settle_pending};
use crate::context::Context;
use crate::failure::Failure;
use crate::flags;
use crate::interrupt::{Signals, stopped_by, until_signal};

/// How many of a vector's values the default output shows.
const SHOWN: usize = 4;

/// Options of `llmroute embed`.
#[derive(Debug, Args)]
pub(crate) struct EmbedArgs {
    /// File whose text (its last newline dropped) is one input, or `-` for standard input
    /// (repeatable; files first, then each --text)
    #[arg(short = 'p', long = "prompt", value_name = "FILE")]
    prompts: Vec<PathBuf>,
    /// A text to embed (repeatable)
    #[arg(long = "text", value_name = "TEXT")]
    texts: Vec<String>,
    /// Embedding model name or alias (default: `defaults.model` of the configuration)
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// The vectors' size, for models that can shorten theirs
    #[arg(long, value_name = "N")]
    dimensions: Option<u32>,
    /// Tenant to account the request to (its tier's limits and budget apply)
    #[arg(long, value_name = "NAME")]
    tenant: Option<String>,
    /// Give up after this many seconds, waits and retries included, at most 86400 (default:
    /// `retry.deadline_secs`)
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// Print one JSON object: provider, model, embeddings, usage, cost_usd, attempts
    #[arg(long)]
    json: bool,
}

impl EmbedArgs {
    /// The request: each file's text, then each `--text`, in order.
    fn request(&self) -> Result<EmbedRequest, Failure> {
        let deadline = self.timeout.map(flags::timeout).transpose()?;
        if self.prompts.is_empty() && self.texts.is_empty() {
            return Err(Failure::usage(anyhow!(
                "nothing to embed: pass -p FILE (`-` for standard input) or --text TEXT"
            )));
        }
        let mut input = Vec::with_capacity(self.prompts.len() + self.texts.len());
        for path in &self.prompts {
            input.push(without_final_newline(read_prompt(path, "embed")?).into());
        }
        input.extend(self.texts.iter().map(|t| t.as_str().into()));
        Ok(EmbedRequest {
            model: self.model.clone(),
            input,
            dimensions: self.dimensions,
            tenant: self.tenant.clone(),
            deadline,
            ..EmbedRequest::default()
        })
    }
}

/// `text` without its last line's newline (`\n` or `\r\n`): `echo text > file` embeds as
/// `text`.
fn without_final_newline(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    text
}

/// Runs the command until it ends or SIGINT / SIGTERM stops it, then waits for what the router
/// still has to settle, as `chat` does.
pub(crate) async fn run(
    ctx: &Context<'_>,
    args: &EmbedArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    args.timeout.map(flags::timeout).transpose()?;
    let loaded = ctx.load()?;
    let router = ctx.router(loaded).await?;
    let req = args.request()?;
    let mut signals = Signals::install()?;
    let ended = until_signal(router.embed(req), &mut signals).await;
    if until_signal(settle_pending(&router), &mut signals)
        .await
        .is_err()
    {
        tracing::warn!("a signal: exiting without waiting for pending settlements");
    }
    let answer = match ended {
        Ok(answer) => answer.map_err(Failure::router)?,
        Err(signal) => return Err(stopped_by(signal, "embed")),
    };
    if args.json {
        serde_json::to_writer(&mut *out, &JsonAnswer::from(&answer))
            .map_err(|e| Failure::output(e.into()))?;
        writeln!(out).map_err(Failure::output)
    } else {
        write_lines(out, &answer.embeddings).map_err(Failure::output)
    }
}

/// One line per vector: its place, its size, its first values.
/// `0  1536 dimensions  [0.0023064255, -0.009327292, 0.015797347, -0.0077073723, ...]`
fn write_lines(out: &mut dyn Write, vectors: &[Vec<f32>]) -> std::io::Result<()> {
    for (i, v) in vectors.iter().enumerate() {
        let first: Vec<String> = v.iter().take(SHOWN).map(f32::to_string).collect();
        let more = if v.len() > SHOWN { ", ..." } else { "" };
        let values = first.join(", ");
        writeln!(out, "{i}  {} dimensions  [{values}{more}]", v.len())?;
    }
    Ok(())
}

/// The `--json` answer.
#[derive(Serialize)]
struct JsonAnswer<'a> {
    provider: &'a str,
    model: &'a str,
    embeddings: &'a [Vec<f32>],
    usage: JsonUsage,
    cost_usd: f64,
    attempts: &'a [router_sdk::Attempt],
    waited_ms: u64,
}

#[derive(Serialize)]
struct JsonUsage {
    prompt_tokens: u64,
    total_tokens: u64,
}

impl<'a> From<&'a EmbedResponse> for JsonAnswer<'a> {
    fn from(a: &'a EmbedResponse) -> Self {
        let r = &a.receipt;
        JsonAnswer {
            provider: &r.provider,
            model: &r.model,
            embeddings: &a.embeddings,
            usage: JsonUsage {
                prompt_tokens: r.usage.prompt_tokens,
                total_tokens: r.usage.prompt_tokens,
            },
            cost_usd: r.cost_usd,
            attempts: &r.attempts,
            waited_ms: r.waited.as_millis() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_files_last_newline_is_dropped() {
        let cut = |s: &str| without_final_newline(s.to_owned());
        assert_eq!(cut("text\n"), "text");
        assert_eq!(cut("text\r\n"), "text");
        assert_eq!(cut("two\nlines\n\n"), "two\nlines\n");
        assert_eq!(cut("text"), "text");
    }

    #[test]
    fn each_vector_is_one_line_with_its_size_and_first_values() {
        let mut out = Vec::new();
        let vectors = [vec![0.5, -2.0, 0.25, 1.0, 3.0], vec![0.125]];
        write_lines(&mut out, &vectors).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "0  5 dimensions  [0.5, -2, 0.25, 1, ...]\n1  1 dimensions  [0.125]\n"
        );
    }
}
