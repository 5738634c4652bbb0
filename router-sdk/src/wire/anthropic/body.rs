//! The `/v1/messages` request body.
//!
//! What goes where:
//! - system messages, joined with blank lines, into `system`;
//! - user and assistant messages into `messages`: a message of one text part as a string, any
//!   other as an array of `text`, `image` and (assistant) `tool_use` blocks;
//! - tool results into `tool_result` blocks of one `user` message: consecutive results, and the
//!   user message right after them, make one turn (Anthropic takes the results only in the user
//!   turn that follows the `tool_use` turn, results first);
//! - `tools` as `{name, description, input_schema}`, `tool_choice` as `{"type": "auto" | "any" |
//!   "none" | "tool"}` with `disable_parallel_tool_use` when parallel calls are turned off;
//! - `reasoning` as `thinking` (see [`thinking`]), `user` as `metadata.user_id`;
//! - an assistant message's thinking that Anthropic wrote, signed, as `thinking` and
//!   `redacted_thinking` blocks before its other blocks; other providers' thinking is left out;
//! - a JSON answer (`response_format`) as a tool whose input is the answer (see [`AnswerTool`]).
//!
//! Anthropic has no place for `seed`, `presence_penalty`, `frequency_penalty` or the request's
//! `metadata` tags (its `metadata` takes only `user_id`): they are left out of the body.

use serde_json::{Map, Value, json};

use router_core::config::Api;

use crate::types::{
    ChatRequest, Image, Message, Part, ResponseFormat, Role, Thought, Tool, ToolChoice,
};

/// The name of the answer tool of a `JsonObject` request.
pub(super) const JSON_TOOL: &str = "json_answer";

/// A `cache_control` breakpoint.
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The most `cache_control` breakpoints Anthropic takes in one request.
const MAX_BREAKPOINTS: usize = 4;

/// The smallest thinking budget Anthropic takes.
const MIN_THINKING_BUDGET: u64 = 1024;

/// Anthropic has no JSON mode: a request for a JSON answer offers a tool whose input schema is
/// the answer's schema and asks the model to call it. Its input, as JSON text, is the answer's
/// content, whole and streamed, and it is never a tool call for the caller.
#[derive(Debug, Clone, Copy)]
pub(super) struct AnswerTool<'a> {
    /// The tool's name: the schema's name, or [`JSON_TOOL`] for `JsonObject`.
    pub(super) name: &'a str,
    /// The schema, `None` for any object.
    schema: Option<&'a Value>,
}

impl<'a> AnswerTool<'a> {
    /// The answer tool of `req`, if it asks for JSON.
    pub(super) fn of(req: &'a ChatRequest) -> Option<Self> {
        match &req.response_format {
            Some(ResponseFormat::JsonObject) => Some(Self {
                name: JSON_TOOL,
                schema: None,
            }),
            Some(ResponseFormat::JsonSchema { name, schema, .. }) => Some(Self {
                name,
                schema: Some(schema),
            }),
            Some(ResponseFormat::Text) | None => None,
        }
    }

    /// The tool's definition, as `tools` lists it.
    fn definition(&self) -> Value {
        let schema = self
            .schema
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        json!({
            "name": self.name,
            "description": "Give your final answer as this tool's input.",
            "input_schema": schema,
        })
    }
}

/// The thinking budget of `req` under a `max_tokens` of `cap`, if it asks for reasoning: its
/// budget, at least Anthropic's least (1,024 tokens), and below `cap`, since thinking counts
/// within `max_tokens` and `max_tokens` is what the ledger reserved. A cap that leaves no room
/// for the least budget sends no thinking.
fn thinking(req: &ChatRequest, cap: u64) -> Option<u64> {
    let room = cap
        .checked_sub(1)
        .filter(|&room| room >= MIN_THINKING_BUDGET)?;
    req.reasoning
        .filter(|r| !r.is_off())
        .map(|r| r.budget().clamp(MIN_THINKING_BUDGET, room))
}

/// The body for `req` to `model`, whose output cap is `output_cap`.
///
/// `max_tokens` is the request's, else the model's output cap: exactly what admission reserved
/// against OTPM, never more. Thinking counts within it (as OpenAI counts reasoning within
/// `max_completion_tokens`), so the budget is cut to fit below it. Thinking also rules out
/// `temperature` (left out) and a `top_p` below 0.95 (left out), and forced tool use (a JSON
/// answer's tool is then offered with `auto`). Anthropic's newer models refuse `temperature` and
/// `top_p` together: with both set, `temperature` is sent.
pub(super) fn body(model: &str, req: &ChatRequest, output_cap: u64, stream: bool) -> Value {
    let (system, turns): (Vec<_>, Vec<_>) =
        req.messages.iter().partition(|m| m.role == Role::System);
    let max_tokens = req.max_tokens.unwrap_or(output_cap);
    let budget = thinking(req, max_tokens).filter(|_| thinking_allowed(&turns));
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert("max_tokens".into(), max_tokens.into());
    let (system, system_breakpoints) = system_prompt(&system);
    if let Some(system) = system {
        body.insert("system".into(), system);
    }
    let mut messages = messages(&turns);
    keep_breakpoints(&mut messages, MAX_BREAKPOINTS - system_breakpoints);
    body.insert("messages".into(), messages.into());
    let temperature = req
        .temperature
        .filter(|t| t.is_finite() && budget.is_none());
    let top_p = req
        .top_p
        .filter(|p| p.is_finite() && (budget.is_none() || *p >= 0.95));
    match (temperature, top_p) {
        (Some(t), _) => body.insert("temperature".into(), t.into()),
        (None, Some(p)) => body.insert("top_p".into(), p.into()),
        (None, None) => None,
    };
    if !req.stop.is_empty() {
        body.insert("stop_sequences".into(), req.stop.clone().into());
    }
    let answer = AnswerTool::of(req);
    let mut tools: Vec<Value> = req.tools.iter().map(tool).collect();
    tools.extend(answer.map(|a| a.definition()));
    let withdrawn = withdrawn_tools(req);
    let offers_none = tools.is_empty();
    tools.extend(withdrawn.iter().map(|name| withdrawn_tool(name)));
    if !tools.is_empty() {
        body.insert("tools".into(), tools.into());
    }
    let choice = tool_choice(req, answer, budget.is_some());
    // Tools defined only because the history calls them may not be called again.
    let choice =
        choice.or_else(|| (offers_none && !withdrawn.is_empty()).then(|| json!({"type": "none"})));
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
    if let Some(budget) = budget {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    if let Some(user) = &req.user {
        body.insert("metadata".into(), json!({"user_id": user}));
    }
    if stream {
        body.insert("stream".into(), true.into());
    }
    Value::Object(body)
}

/// A message's content on the wire: a string, or content blocks.
enum Content {
    /// One text part, as a string.
    Text(String),
    /// Text, image, `tool_use` and `tool_result` blocks.
    Blocks(Vec<Value>),
}

impl Content {
    /// As blocks (a string becomes one text block, an empty one none).
    fn into_blocks(self) -> Vec<Value> {
        match self {
            Content::Text(text) if text.is_empty() => Vec::new(),
            Content::Text(text) => vec![json!({"type": "text", "text": text})],
            Content::Blocks(blocks) => blocks,
        }
    }
}

/// The conversation, system messages aside. Tool results open a user turn that the next results
/// and the next user message join; any other message closes it.
fn messages(turns: &[&Message]) -> Vec<Value> {
    let mut out: Vec<(&'static str, Content)> = Vec::new();
    let mut results_open = false;
    for m in turns {
        match m.role {
            Role::Tool => {
                let mut result = tool_result(m);
                if m.cache {
                    result["cache_control"] = ephemeral();
                }
                match out.last_mut() {
                    Some((_, Content::Blocks(blocks))) if results_open => blocks.push(result),
                    _ => out.push(("user", Content::Blocks(vec![result]))),
                }
                results_open = true;
            }
            Role::User if results_open => {
                if let Some((_, Content::Blocks(blocks))) = out.last_mut() {
                    blocks.extend(content(m).into_blocks());
                }
                results_open = false;
            }
            Role::User | Role::System => {
                out.push(("user", content(m)));
                results_open = false;
            }
            Role::Assistant => {
                out.push(("assistant", content(m)));
                results_open = false;
            }
        }
    }
    out.into_iter()
        .map(|(role, content)| {
            let content = match content {
                Content::Text(text) => Value::String(text),
                Content::Blocks(blocks) => Value::Array(blocks),
            };
            json!({"role": role, "content": content})
        })
        .collect()
}

/// A user or assistant message, its last block a cache breakpoint when the message is one.
fn content(m: &Message) -> Content {
    let content = unmarked(m);
    if !m.cache {
        return content;
    }
    let mut blocks = content.into_blocks();
    if let Some(last) = blocks.last_mut() {
        last["cache_control"] = ephemeral();
    }
    Content::Blocks(blocks)
}

/// The `system` field of `system` messages, and the cache breakpoints it holds: their texts
/// joined with blank lines; with a message marked for caching, one text block per message, each
/// marked one a breakpoint (at most [`MAX_BREAKPOINTS`], the last ones).
fn system_prompt(system: &[&Message]) -> (Option<Value>, usize) {
    if system.is_empty() {
        return (None, 0);
    }
    if !system.iter().any(|m| m.cache) {
        let joined: Vec<String> = system.iter().map(|m| m.text_content()).collect();
        return (Some(joined.join("\n\n").into()), 0);
    }
    let mut blocks: Vec<Value> = system
        .iter()
        .map(|m| {
            let mut block = json!({"type": "text", "text": m.text_content()});
            if m.cache {
                block["cache_control"] = ephemeral();
            }
            block
        })
        .collect();
    let marked = system.iter().filter(|m| m.cache).count();
    let mut extra = marked.saturating_sub(MAX_BREAKPOINTS);
    for block in blocks.iter_mut().filter_map(Value::as_object_mut) {
        if extra > 0 && block.remove("cache_control").is_some() {
            extra -= 1;
        }
    }
    (Some(Value::Array(blocks)), marked.min(MAX_BREAKPOINTS))
}

/// Leaves the last `most` cache breakpoints of `messages`, removing the earlier ones.
fn keep_breakpoints(messages: &mut [Value], most: usize) {
    let mut marked: Vec<&mut serde_json::Map<String, Value>> = messages
        .iter_mut()
        .filter_map(|m| m.get_mut("content").and_then(Value::as_array_mut))
        .flatten()
        .filter_map(Value::as_object_mut)
        .filter(|block| block.contains_key("cache_control"))
        .collect();
    let extra = marked.len().saturating_sub(most);
    for block in marked.iter_mut().take(extra) {
        block.remove("cache_control");
    }
}

/// A user or assistant message: a string when it is one text part and makes no calls and no
/// thinking of Anthropic's, else its thinking (Anthropic's own, signed, first, as Anthropic
/// requires), non-empty text parts, images and tool calls as blocks, in that order.
fn unmarked(m: &Message) -> Content {
    let thoughts: Vec<Value> = own_thoughts(m).map(thought_block).collect();
    if let ([Part::Text { text }], [], []) = (
        m.content.as_slice(),
        m.tool_calls.as_slice(),
        thoughts.as_slice(),
    ) {
        return Content::Text(text.clone());
    }
    let mut blocks = thoughts;
    blocks.extend(parts(&m.content));
    blocks.extend(m.tool_calls.iter().map(|c| {
        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": arguments(&c.arguments)})
    }));
    Content::Blocks(blocks)
}

/// The thoughts of `m` that Anthropic wrote and can check.
fn own_thoughts(m: &Message) -> impl Iterator<Item = &Thought> {
    m.thinking.iter().filter(|t| t.goes_to(Api::Anthropic))
}

/// A thought as Anthropic wrote it: a signed `thinking` block, or a `redacted_thinking` one.
fn thought_block(t: &Thought) -> Value {
    match (&t.redacted, &t.signature) {
        (Some(data), _) => json!({"type": "redacted_thinking", "data": data}),
        (None, signature) => {
            json!({"type": "thinking", "thinking": t.text, "signature": signature})
        }
    }
}

/// Whether thinking may be asked for in a conversation of `turns`: Anthropic refuses thinking
/// when the last assistant turn made tool calls without its own thinking before them (a turn
/// another provider answered, or one whose thinking was not given back). Thinking is then left
/// out of this request, which Anthropic documents as the way to continue such a conversation.
fn thinking_allowed(turns: &[&Message]) -> bool {
    let last = turns.iter().rev().find(|m| m.role == Role::Assistant);
    last.is_none_or(|m| m.tool_calls.is_empty() || own_thoughts(m).next().is_some())
}

/// Text (non-empty: Anthropic refuses empty text blocks) and image blocks.
fn parts(content: &[Part]) -> Vec<Value> {
    content
        .iter()
        .filter_map(|p| match p {
            Part::Text { text } if text.is_empty() => None,
            Part::Text { text } => Some(json!({"type": "text", "text": text})),
            Part::Image { image, .. } => Some(image_block(image)),
        })
        .collect()
}

/// An image block: a `base64` or `url` source.
fn image_block(image: &Image) -> Value {
    let source = match image {
        Image::Url { url } => json!({"type": "url", "url": url}),
        Image::Base64 { media_type, data } => {
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
    };
    json!({"type": "image", "source": source})
}

/// A call's arguments as the `input` object (checked to be one before translation; `{}` if
/// not).
fn arguments(text: &str) -> Value {
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}))
}

/// A tool message as a `tool_result` block: its text, or its text and image blocks when it has
/// images.
fn tool_result(m: &Message) -> Value {
    let content = if m.images().next().is_some() {
        Value::Array(parts(&m.content))
    } else {
        m.text_content().into()
    };
    json!({
        "type": "tool_result",
        "tool_use_id": m.tool_call_id.as_deref().unwrap_or_default(),
        "content": content,
    })
}

/// The tools the conversation called that the request no longer offers, in the order first
/// called. Anthropic refuses `tool_use` and `tool_result` blocks in a request that does not
/// define their tools (an agent's summary turn sends its history with `tools: []`).
fn withdrawn_tools(req: &ChatRequest) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    let calls = req.messages.iter().flat_map(|m| &m.tool_calls);
    for call in calls {
        let offered = req.tools.iter().any(|t| t.name == call.name);
        if !offered && !names.contains(&call.name.as_str()) {
            names.push(&call.name);
        }
    }
    names
}

/// The definition of a tool the history calls and the request no longer offers.
fn withdrawn_tool(name: &str) -> Value {
    json!({
        "name": name,
        "description": "Called earlier in this conversation; no longer offered.",
        "input_schema": {"type": "object"},
    })
}

/// A tool definition. `strict` has no place in Anthropic's tools and is left out.
fn tool(t: &Tool) -> Value {
    let mut tool = Map::new();
    tool.insert("name".into(), t.name.as_str().into());
    if let Some(d) = &t.description {
        tool.insert("description".into(), d.as_str().into());
    }
    tool.insert("input_schema".into(), t.parameters.clone());
    Value::Object(tool)
}

/// `tool_choice`, or `None` for Anthropic's default (`auto` when tools are given).
///
/// With an answer tool: the model must call it (`tool`); when the request has tools of its own
/// and lets the model call them (`auto`, `required` or unset), it must call one of them or the
/// answer tool (`any`); `Function(name)` forces that function; with thinking, which refuses
/// forced tool use, the choice is `auto`. `disable_parallel_tool_use` is set when
/// `parallel_tool_calls` is `Some(false)` (not with `none`, which takes no options).
fn tool_choice(req: &ChatRequest, answer: Option<AnswerTool<'_>>, thinking: bool) -> Option<Value> {
    let forced = |name: &str| json!({"type": "tool", "name": name});
    let mut choice = match (answer, &req.tool_choice) {
        (Some(_), _) if thinking => json!({"type": "auto"}),
        (Some(_), Some(ToolChoice::Function(name))) => forced(name),
        (Some(answer), Some(ToolChoice::None)) => forced(answer.name),
        (Some(answer), _) if req.tools.is_empty() => forced(answer.name),
        (Some(_), _) => json!({"type": "any"}),
        (None, Some(ToolChoice::Auto)) => json!({"type": "auto"}),
        (None, Some(ToolChoice::None)) => json!({"type": "none"}),
        (None, Some(ToolChoice::Required)) => json!({"type": "any"}),
        (None, Some(ToolChoice::Function(name))) => forced(name),
        (None, None) if req.parallel_tool_calls == Some(false) && !req.tools.is_empty() => {
            json!({"type": "auto"})
        }
        (None, None) => return None,
    };
    let takes_options = choice.get("type").and_then(Value::as_str) != Some("none");
    if req.parallel_tool_calls == Some(false)
        && takes_options
        && let Some(fields) = choice.as_object_mut()
    {
        fields.insert("disable_parallel_tool_use".into(), true.into());
    }
    Some(choice)
}
