//! An Anthropic Messages request body, read into a [`ChatRequest`].
//!
//! - `system` (a string or text blocks) becomes system messages; `messages` user and assistant
//!   messages. A user turn's `tool_result` blocks become tool messages, in order, and its other
//!   blocks one user message after them. An assistant turn's `thinking` and
//!   `redacted_thinking` blocks are carried as its thinking (Anthropic's own: only Anthropic is
//!   sent them back), its `tool_use` blocks as its tool calls.
//! - `cache_control` on a block marks the end of its message as a cache breakpoint.
//! - `thinking` (`enabled` with a budget, or `adaptive`) asks for reasoning, with
//!   `output_config.effort` as its effort; `disabled` asks for none.
//! - `tools` with an `input_schema` are function tools; tools Anthropic runs itself (`type`s
//!   such as `web_search_20250305` or `bash_20250124`) have no place elsewhere and are left
//!   out. `tool_choice` maps to the router's, `disable_parallel_tool_use` to
//!   `parallel_tool_calls: false`.
//! - `metadata.user_id` is the end user. `stop_sequences`, `temperature`, `top_p` and
//!   `max_tokens` are read as they are.
//! - What only Anthropic's own API knows (`top_k`, `context_management`, `container`,
//!   `mcp_servers`, `service_tier`, a tool's `defer_loading` or `cache_control`) is left out,
//!   so that any provider can serve the request.

use router_core::config::Api;
use router_sdk::{
    ChatRequest, Effort, Image, Message, Part, Reasoning, Role, Thought, Tool, ToolCall, ToolChoice,
};

use super::json::{
    Block, Body, InContent, InMessage, InRole, InThinking, InTool, InToolChoice, OutputConfig,
    ResultBlock, ResultContent, Source, System,
};
use crate::ingress::Read;

/// Reads `bytes` as a Messages body; `Err` names the field and what is wrong.
pub(crate) fn read(bytes: &[u8]) -> Result<Read, String> {
    let body: Body = crate::body::parse(bytes, "a Messages request")?;
    body.into_read()
}

impl Body {
    fn into_read(self) -> Result<Read, String> {
        let mut messages = system(self.system);
        for (i, m) in self.messages.into_iter().enumerate() {
            turn(i, m, &mut messages)?;
        }
        let (tool_choice, parallel) = tool_choice(self.tool_choice);
        let request = ChatRequest {
            model: Some(self.model),
            messages,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            stop: self.stop_sequences.unwrap_or_default(),
            tools: tools(self.tools.unwrap_or_default()),
            tool_choice,
            parallel_tool_calls: parallel,
            reasoning: self.thinking.and_then(|t| reasoning(t, self.output_config)),
            user: self.metadata.and_then(|m| m.user_id),
            ..ChatRequest::default()
        };
        Ok(Read {
            request,
            stream: self.stream.unwrap_or(false),
            include_usage: true,
            dropped: Vec::new(),
        })
    }
}

/// The system prompt as system messages, one per block (empty ones left out), each cached as
/// its block is: a breakpoint after a block that every session shares (Claude Code's own
/// prompt) keeps it cached across sessions.
fn system(system: Option<System>) -> Vec<Message> {
    let blocks = match system {
        None => Vec::new(),
        Some(System::Text(text)) => vec![(text, false)],
        Some(System::Blocks(blocks)) => blocks
            .into_iter()
            .map(|b| (b.text, b.cache_control.is_some()))
            .collect(),
    };
    blocks
        .into_iter()
        .filter(|(text, _)| !text.is_empty())
        .map(|(text, cache)| Message {
            cache,
            ..Message::system(text)
        })
        .collect()
}

/// Turn `i` as the router's messages, pushed onto `out`.
fn turn(i: usize, m: InMessage, out: &mut Vec<Message>) -> Result<(), String> {
    let blocks = match m.content {
        InContent::Text(text) => vec![Block::Text {
            text,
            cache_control: None,
        }],
        InContent::Blocks(blocks) => blocks,
    };
    let role = match m.role {
        InRole::User => Role::User,
        InRole::Assistant => Role::Assistant,
    };
    let mut message = Message {
        content: Vec::new(),
        ..Message::text(role, "")
    };
    for (j, block) in blocks.into_iter().enumerate() {
        add_block(block, &mut message, out)
            .map_err(|why| format!("`messages[{i}].content[{j}]`: {why}"))?;
    }
    let said = !message.content.is_empty() || !message.tool_calls.is_empty();
    if said || !message.thinking.is_empty() {
        out.push(message);
    }
    Ok(())
}

/// Adds `block` to `message`, its turn; a tool result goes to `out` as a tool message of its
/// own, before the turn's message. `Err`: the block has no place in a turn of this role.
fn add_block(block: Block, message: &mut Message, out: &mut Vec<Message>) -> Result<(), String> {
    let assistant = message.role == Role::Assistant;
    // A result's breakpoint is its own tool message's.
    if !matches!(block, Block::ToolResult { .. }) {
        message.cache |= block.cached();
    }
    match block {
        Block::Text { text, .. } => message.content.push(Part::Text { text }),
        Block::Image { source, .. } => message.content.push(Part::Image {
            image: image(source),
            detail: None,
        }),
        Block::ToolUse { .. } | Block::Thinking { .. } | Block::RedactedThinking { .. }
            if !assistant =>
        {
            return Err("only an assistant turn holds this block".to_owned());
        }
        Block::ToolUse {
            id, name, input, ..
        } => message.tool_calls.push(ToolCall {
            id,
            name,
            arguments: if input.is_null() {
                "{}".to_owned()
            } else {
                input.to_string()
            },
        }),
        Block::Thinking {
            thinking,
            signature,
        } => message.thinking.push(thought(thinking, signature, None)),
        Block::RedactedThinking { data } => {
            message
                .thinking
                .push(thought(String::new(), None, Some(data)));
        }
        Block::ToolResult { .. } if assistant => {
            return Err("only a user turn holds a `tool_result`".to_owned());
        }
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
            cache_control,
        } => {
            let mut result = tool_result(tool_use_id, content, is_error == Some(true));
            result.cache = cache_control.is_some();
            out.push(result);
        }
    }
    Ok(())
}

fn thought(text: String, signature: Option<String>, redacted: Option<String>) -> Thought {
    Thought {
        origin: Api::Anthropic,
        text,
        signature: signature.filter(|s| !s.is_empty()),
        redacted,
    }
}

/// A `tool_result` block as a tool message. A result marked `is_error` says so first, since
/// no other format has a place for the mark.
fn tool_result(id: String, content: Option<ResultContent>, is_error: bool) -> Message {
    let mut parts: Vec<Part> = match content {
        None => Vec::new(),
        Some(ResultContent::Text(text)) => vec![Part::Text { text }],
        Some(ResultContent::Blocks(blocks)) => blocks
            .into_iter()
            .map(|b| match b {
                ResultBlock::Text { text } => Part::Text { text },
                ResultBlock::Image { source } => Part::Image {
                    image: image(source),
                    detail: None,
                },
            })
            .collect(),
    };
    if is_error {
        parts.insert(
            0,
            Part::Text {
                text: "Error: ".to_owned(),
            },
        );
    }
    Message {
        content: parts,
        ..Message::tool_result(id, "")
    }
}

fn image(source: Source) -> Image {
    match source {
        Source::Base64 { media_type, data } => Image::Base64 { media_type, data },
        Source::Url { url } => Image::Url { url },
    }
}

/// The function tools; tools Anthropic runs itself are left out.
fn tools(tools: Vec<InTool>) -> Vec<Tool> {
    tools
        .into_iter()
        .filter(|t| t.kind.as_deref().is_none_or(|k| k == "custom"))
        .filter_map(|t| {
            Some(Tool {
                name: t.name,
                description: t.description,
                parameters: t.input_schema?,
                strict: false,
            })
        })
        .collect()
}

/// The router's tool choice, and `parallel_tool_calls: false` when parallel use is off.
fn tool_choice(choice: Option<InToolChoice>) -> (Option<ToolChoice>, Option<bool>) {
    let (choice, no_parallel) = match choice {
        None => return (None, None),
        Some(InToolChoice::Auto {
            disable_parallel_tool_use,
        }) => (ToolChoice::Auto, disable_parallel_tool_use),
        Some(InToolChoice::Any {
            disable_parallel_tool_use,
        }) => (ToolChoice::Required, disable_parallel_tool_use),
        Some(InToolChoice::Tool {
            name,
            disable_parallel_tool_use,
        }) => (ToolChoice::Function(name), disable_parallel_tool_use),
        Some(InToolChoice::None) => (ToolChoice::None, None),
    };
    (Some(choice), no_parallel.filter(|&off| off).map(|_| false))
}

/// The reasoning asked for, with `output_config.effort` (`low`, `medium`, `high`; `max` is the
/// router's `xhigh`) as its effort; none when thinking is disabled (a model without reasoning
/// can serve that).
fn reasoning(thinking: InThinking, config: Option<OutputConfig>) -> Option<Reasoning> {
    let effort = config
        .and_then(|c| c.effort)
        .and_then(|e| match e.as_str() {
            "low" => Some(Effort::Low),
            "medium" => Some(Effort::Medium),
            "high" => Some(Effort::High),
            "max" => Some(Effort::Xhigh),
            _ => None,
        });
    match thinking {
        InThinking::Enabled { budget_tokens } => Some(Reasoning {
            effort,
            budget_tokens,
        }),
        InThinking::Adaptive => Some(Reasoning {
            effort,
            budget_tokens: None,
        }),
        InThinking::Disabled => None,
    }
}
