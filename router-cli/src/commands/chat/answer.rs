//! Sending the request and printing the answer: streamed, whole, or as one JSON object.

use std::io::Write;

use futures_util::StreamExt;
use router_sdk::{ChatChunk, ChatRequest, ChatResponse, Receipt, Router};
use serde::Serialize;

use super::ChatArgs;
use super::report::{report_attempts, report_candidates, routing_failed};
use crate::failure::Failure;

/// Sends `req` (the request of `args`) and prints the answer on `out`; `verbose` (the global
/// `-v`): report the routing on stderr.
pub(super) async fn answer(
    args: &ChatArgs,
    req: ChatRequest,
    verbose: bool,
    router: &Router,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    if verbose {
        report_candidates(router, &req)?;
    }
    if args.json || args.no_stream || args.json_schema.is_some() {
        let answer = router
            .chat(req)
            .await
            .map_err(|e| routing_failed(verbose, e))?;
        if verbose {
            report_attempts(&answer.receipt.attempts, answer.receipt.waited);
        }
        if args.json_schema.is_some() {
            super::inputs::check_json(&answer)?;
        }
        if args.json {
            serde_json::to_writer(&mut *out, &JsonAnswer::from(&answer))
                .map_err(|e| Failure::output(e.into()))?;
            writeln!(out).map_err(Failure::output)?;
        } else {
            write_text(out, &answer.content)?;
            declined(&answer.receipt);
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
) -> Result<Receipt, Failure> {
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
            // Tool calls are printed whole by `--json`; a stream shows text only, no thinking.
            Ok(
                ChatChunk::ToolCallDelta(_)
                | ChatChunk::ToolCalls(_)
                | ChatChunk::Thinking(_)
                | ChatChunk::Thoughts(_),
            ) => {}
            Ok(ChatChunk::Done(summary)) => {
                if !ends_with_newline {
                    writeln!(out).map_err(Failure::output)?;
                }
                declined(&summary);
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

/// A refusal goes to standard error: standard output has the answer's text only.
fn declined(receipt: &Receipt) {
    if let Some(refusal) = &receipt.refusal {
        eprintln!("llmroute: the model declined to answer: {refusal}");
    }
}

fn write_text(out: &mut dyn Write, content: &str) -> Result<(), Failure> {
    out.write_all(content.as_bytes()).map_err(Failure::output)?;
    if !content.ends_with('\n') {
        writeln!(out).map_err(Failure::output)?;
    }
    Ok(())
}

/// The `--json` answer.
#[derive(Serialize)]
struct JsonAnswer<'a> {
    provider: &'a str,
    model: &'a str,
    content: &'a str,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tool_calls: &'a [router_sdk::ToolCall],
    finish_reason: &'a Option<router_sdk::FinishReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a str>,
    usage: JsonUsage,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_id: Option<&'a str>,
    cost_usd: f64,
    attempts: &'a [router_sdk::Attempt],
    waited_ms: u64,
    /// How many stood before the request when it joined a line (absent: it never did).
    #[serde(skip_serializing_if = "Option::is_none")]
    queue_position: Option<u32>,
}

#[derive(Serialize)]
struct JsonUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    cached_prompt_tokens: u64,
    reasoning_tokens: u64,
}

impl<'a> From<&'a ChatResponse> for JsonAnswer<'a> {
    fn from(a: &'a ChatResponse) -> Self {
        JsonAnswer {
            provider: &a.receipt.provider,
            model: &a.receipt.model,
            content: &a.content,
            tool_calls: &a.tool_calls,
            finish_reason: &a.receipt.finish_reason,
            refusal: a.receipt.refusal.as_deref(),
            usage: JsonUsage {
                prompt_tokens: a.receipt.usage.prompt_tokens,
                completion_tokens: a.receipt.usage.completion_tokens,
                total_tokens: a.receipt.usage.total_tokens(),
                cached_prompt_tokens: a.receipt.usage.cached_prompt_tokens,
                reasoning_tokens: a.receipt.usage.reasoning_tokens,
            },
            response_id: a.receipt.response_id.as_deref(),
            cost_usd: a.receipt.cost_usd,
            attempts: &a.receipt.attempts,
            waited_ms: a.receipt.waited.as_millis() as u64,
            queue_position: a.receipt.queue_position,
        }
    }
}
