//! OpenAI-compatible `/chat/completions` (OpenAI, DeepSeek, Groq, Together, vLLM, Ollama, ...).

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use router_core::config::Api;
use router_core::ledger::Observation;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::classify::{ErrorBody, Failure, FailureClass};
use super::headers::{self, Pair, parse_duration_openai};
use super::{EventDecoder, Target, WireFormat, error, malformed, nullable, secret_header};
use crate::secret::ApiKey;
use crate::types::{
    ChatRequest, Completion, FinishReason, Image, Message, Part, ResponseFormat, StreamEvent, Tool,
    ToolCall, ToolCallDelta, ToolChoice, Usage,
};

/// The OpenAI-compatible wire format.
#[derive(Debug)]
pub(super) struct OpenAi;

/// `(remaining, reset)` header pairs: requests, then tokens.
const DIMS: [Pair; 2] = [
    (
        HeaderName::from_static("x-ratelimit-remaining-requests"),
        HeaderName::from_static("x-ratelimit-reset-requests"),
    ),
    (
        HeaderName::from_static("x-ratelimit-remaining-tokens"),
        HeaderName::from_static("x-ratelimit-reset-tokens"),
    ),
];

/// Resets are Go-style durations (`6m0s`, `17ms`).
fn reset(value: &str, _now: SystemTime) -> Option<Duration> {
    parse_duration_openai(value)
}

impl WireFormat for OpenAi {
    fn url(&self, base: &str, _model: &str, _stream: bool) -> String {
        format!("{base}/chat/completions")
    }

    fn auth(&self, key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
        secret_header("authorization", "Bearer ", key)
    }

    /// The list every OpenAI-compatible server has (not every one serves a model by id).
    fn model_url(&self, base: &str, _model: &str) -> (String, super::Lookup) {
        (format!("{base}/models"), super::Lookup::Listed)
    }

    fn body(&self, target: &Target<'_>, req: &ChatRequest, stream: bool) -> Value {
        // OpenAI's own API (and its regional hosts) takes `max_completion_tokens` for every
        // model, and its reasoning models nothing else; other servers may know only
        // `max_tokens`.
        let openai = target.endpoints[0]
            .host_str()
            .is_some_and(|h| h == "api.openai.com" || h.ends_with(".api.openai.com"));
        body(target.model, req, stream, openai)
    }

    fn parse_response(&self, _req: &ChatRequest, body: &[u8]) -> Result<Completion, String> {
        parse_response(body)
    }

    fn stream_decoder(&self, _req: &ChatRequest) -> Box<dyn EventDecoder> {
        Box::<Stream>::default()
    }

    fn error_body(&self, body: &[u8]) -> Option<ErrorBody> {
        error_body(body)
    }

    fn observation(&self, headers: &HeaderMap, now: SystemTime) -> Observation {
        Observation {
            requests: headers::dimension(headers, &DIMS[0], reset, now),
            tokens: headers::dimension(headers, &DIMS[1], reset, now),
            ..Observation::default()
        }
    }

    fn exhausted_reset(&self, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
        headers::exhausted_reset(headers, &DIMS, reset, now)
    }
}

/// A message's content: a string when it is one text part (what every server accepts), else
/// an array of text and `image_url` parts; `null` for an assistant turn of tool calls alone.
fn content(m: &Message) -> Value {
    match m.content.as_slice() {
        [] if !m.tool_calls.is_empty() => Value::Null,
        [Part::Text { text }] => text.as_str().into(),
        parts => parts
            .iter()
            .map(|p| match p {
                Part::Text { text } => json!({"type": "text", "text": text}),
                Part::Image { image, detail } => {
                    let mut url = json!({"url": image_url(image)});
                    if let Some(detail) = detail {
                        url["detail"] = detail.as_str().into();
                    }
                    json!({"type": "image_url", "image_url": url})
                }
            })
            .collect(),
    }
}

/// An image as OpenAI takes it: its URL, or a `data:` URL of its bytes.
fn image_url(image: &Image) -> String {
    match image {
        Image::Url { url } => url.clone(),
        Image::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
    }
}

fn message(m: &Message) -> Value {
    let mut msg = Map::new();
    msg.insert("role".into(), m.role.as_str().into());
    msg.insert("content".into(), content(m));
    if !m.tool_calls.is_empty() {
        let calls = m.tool_calls.iter().map(|c| {
            json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
        });
        msg.insert("tool_calls".into(), calls.collect());
    }
    if let Some(id) = &m.tool_call_id {
        msg.insert("tool_call_id".into(), id.as_str().into());
    }
    Value::Object(msg)
}

fn tool(t: &Tool) -> Value {
    let mut function = Map::new();
    function.insert("name".into(), t.name.as_str().into());
    if let Some(d) = &t.description {
        function.insert("description".into(), d.as_str().into());
    }
    function.insert("parameters".into(), t.parameters.clone());
    if t.strict {
        function.insert("strict".into(), true.into());
    }
    json!({"type": "function", "function": function})
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => "auto".into(),
        ToolChoice::None => "none".into(),
        ToolChoice::Required => "required".into(),
        ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

fn response_format(format: &ResponseFormat) -> Value {
    match format {
        ResponseFormat::Text => json!({"type": "text"}),
        ResponseFormat::JsonObject => json!({"type": "json_object"}),
        ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        } => json!({
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": strict},
        }),
    }
}

/// The body for `req` to `model`; `completion_cap`: the output cap goes as
/// `max_completion_tokens` (OpenAI's own API), else as `max_tokens` (unless the request has
/// reasoning controls).
fn body(model: &str, req: &ChatRequest, stream: bool, completion_cap: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert(
        "messages".into(),
        req.messages.iter().map(message).collect(),
    );
    if let Some(max) = req.max_tokens {
        // OpenAI's reasoning models take only `max_completion_tokens` (reasoning counted in
        // it), and newer OpenAI-compatible servers take it too; others keep `max_tokens`.
        let name = if completion_cap || req.reasoning.is_some() {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body.insert(name.into(), max.into());
    }
    let numbers = [
        ("temperature", req.temperature),
        ("top_p", req.top_p),
        ("presence_penalty", req.presence_penalty),
        ("frequency_penalty", req.frequency_penalty),
    ];
    for (name, value) in numbers {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            body.insert(name.into(), v.into());
        }
    }
    if !req.stop.is_empty() {
        body.insert("stop".into(), req.stop.clone().into());
    }
    if let Some(seed) = req.seed {
        body.insert("seed".into(), seed.into());
    }
    if !req.tools.is_empty() {
        body.insert("tools".into(), req.tools.iter().map(tool).collect());
    }
    if let Some(choice) = &req.tool_choice {
        body.insert("tool_choice".into(), tool_choice(choice));
    }
    if let Some(parallel) = req.parallel_tool_calls {
        body.insert("parallel_tool_calls".into(), parallel.into());
    }
    if let Some(format) = &req.response_format {
        body.insert("response_format".into(), response_format(format));
    }
    if let Some(reasoning) = &req.reasoning {
        body.insert(
            "reasoning_effort".into(),
            reasoning.effort().as_str().into(),
        );
    }
    if let Some(user) = &req.user {
        body.insert("user".into(), user.as_str().into());
    }
    if !req.metadata.is_empty() {
        body.insert("metadata".into(), json!(req.metadata));
    }
    if stream {
        body.insert("stream".into(), true.into());
        let mut options = Map::new();
        options.insert("include_usage".into(), true.into());
        body.insert("stream_options".into(), options.into());
    }
    Value::Object(body)
}

#[derive(Deserialize)]
struct Response {
    id: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    choices: Vec<Choice>,
    usage: Option<UsageJson>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default, deserialize_with = "nullable")]
    index: u32,
    #[serde(default, deserialize_with = "nullable")]
    message: MessageJson,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct MessageJson {
    content: Option<String>,
    refusal: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    tool_calls: Vec<ToolCallJson>,
    /// The 2023 `functions` API's one call, whole or (in a stream) a piece.
    function_call: Option<FunctionJson>,
}

/// The id of a legacy `function_call`, which has none: it is the answer's one call, index 0,
/// and is named `call_0` as a Gemini call without an id is.
const LEGACY_CALL_ID: &str = "call_0";

/// A tool call, whole or (in a stream) a piece: every field but the index may be absent.
#[derive(Deserialize)]
struct ToolCallJson {
    #[serde(default, deserialize_with = "nullable")]
    index: u32,
    id: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    function: FunctionJson,
}

#[derive(Deserialize, Default)]
struct FunctionJson {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct UsageJson {
    #[serde(default, deserialize_with = "nullable")]
    prompt_tokens: u64,
    #[serde(default, deserialize_with = "nullable")]
    completion_tokens: u64,
    total_tokens: Option<u64>,
    #[serde(default, deserialize_with = "nullable")]
    prompt_tokens_details: PromptDetails,
    #[serde(default, deserialize_with = "nullable")]
    completion_tokens_details: CompletionDetails,
}

#[derive(Deserialize, Default)]
struct PromptDetails {
    #[serde(default, deserialize_with = "nullable")]
    cached_tokens: u64,
}

#[derive(Deserialize, Default)]
struct CompletionDetails {
    #[serde(default, deserialize_with = "nullable")]
    reasoning_tokens: u64,
}

/// Reasoning is billed as output. OpenAI, DeepSeek and Groq count it inside
/// `completion_tokens`; xAI counts it outside, and its `total_tokens` says so. The rule reads the
/// numbers, not the provider's name: reasoning is outside when `reasoning_tokens` > 0 and
/// `total_tokens` = prompt + completion + reasoning exactly; then the completion count is
/// completion + reasoning. Otherwise (no total, or any other total) it is inside, as reported.
/// Inside, the total is prompt + completion, which equals the sum above only for 0 reasoning.
impl From<UsageJson> for Usage {
    fn from(u: UsageJson) -> Self {
        let reasoning = u.completion_tokens_details.reasoning_tokens;
        let sum = (u.prompt_tokens.checked_add(u.completion_tokens))
            .and_then(|sum| sum.checked_add(reasoning));
        let outside = reasoning > 0 && sum.is_some() && sum == u.total_tokens;
        let completion = if outside {
            // No overflow: completion + reasoning is at most the total, a `u64`.
            u.completion_tokens.saturating_add(reasoning)
        } else {
            u.completion_tokens
        };
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: completion,
            cached_prompt_tokens: u.prompt_tokens_details.cached_tokens,
            reasoning_tokens: reasoning,
            // OpenAI-compatible servers bill no cache writes apart.
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
        }
    }
}

/// OpenAI's finish reasons are the neutral names.
fn finish_reason(reason: &str) -> FinishReason {
    FinishReason::from_name(reason)
}

fn parse_response(body: &[u8]) -> Result<Completion, String> {
    let response: Response = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let choice = response.choices.into_iter().min_by_key(|c| c.index);
    let Some(choice) = choice else {
        return Err("no choices in the answer".into());
    };
    let named = |f: &FunctionJson| f.name.as_deref().is_some_and(|n| !n.is_empty());
    let legacy = choice
        .message
        .function_call
        .filter(named)
        .map(|f| ToolCall {
            id: LEGACY_CALL_ID.to_owned(),
            name: f.name.unwrap_or_default(),
            arguments: f.arguments.unwrap_or_default(),
        });
    let tool_calls = choice.message.tool_calls.into_iter().map(|c| ToolCall {
        id: c.id.unwrap_or_default(),
        name: c.function.name.unwrap_or_default(),
        arguments: c.function.arguments.unwrap_or_default(),
    });
    let mut tool_calls: Vec<ToolCall> = tool_calls.collect();
    // A legacy call stands alone: an answer never carries both shapes.
    if tool_calls.is_empty() {
        tool_calls.extend(legacy);
    }
    Ok(Completion {
        id: response.id,
        content: choice.message.content.unwrap_or_default(),
        tool_calls,
        finish_reason: choice.finish_reason.as_deref().map(finish_reason),
        usage: response.usage.map(Usage::from),
        refusal: choice.message.refusal.filter(|r| !r.is_empty()),
        thinking: Vec::new(),
    })
}

#[derive(Deserialize)]
struct Chunk {
    id: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    choices: Vec<ChunkChoice>,
    usage: Option<UsageJson>,
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default, deserialize_with = "nullable")]
    index: u32,
    #[serde(default, deserialize_with = "nullable")]
    delta: MessageJson,
    finish_reason: Option<String>,
}

/// Stream state: whether `[DONE]` was seen (later events are ignored), whether the
/// response id was passed on, and whether a legacy `function_call` piece came (its first
/// piece carries the call's id).
#[derive(Debug, Default)]
struct Stream {
    done: bool,
    id_sent: bool,
    legacy_call: bool,
}

impl Stream {
    /// A piece of a legacy `function_call`: a piece of call 0 (nothing if it has no name and
    /// no arguments).
    fn legacy_piece(&mut self, piece: FunctionJson) -> Option<StreamEvent> {
        let arguments = piece.arguments.unwrap_or_default();
        if piece.name.is_none() && arguments.is_empty() {
            return None;
        }
        let first = !std::mem::replace(&mut self.legacy_call, true);
        Some(StreamEvent::ToolCall(ToolCallDelta {
            index: 0,
            id: first.then(|| LEGACY_CALL_ID.to_owned()),
            name: piece.name,
            arguments,
        }))
    }
}

impl EventDecoder for Stream {
    fn event(&mut self, _event_name: &str, data: &str) -> Result<Vec<StreamEvent>, Failure> {
        if self.done {
            return Ok(Vec::new());
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(vec![StreamEvent::Done]);
        }
        let chunk: Chunk =
            serde_json::from_str(data).map_err(|e| malformed(Api::OpenAi, data, &e))?;
        if chunk.error.is_some() {
            let data = data.as_bytes();
            return Err(error::stream_failure(error_body(data), data));
        }
        let mut events = Vec::new();
        if let Some(id) = chunk.id.filter(|id| !self.id_sent && !id.is_empty()) {
            self.id_sent = true;
            events.push(StreamEvent::Id(id));
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(text) = choice.delta.content.filter(|t| !t.is_empty()) {
                events.push(StreamEvent::Delta(text));
            }
            if let Some(text) = choice.delta.refusal.filter(|t| !t.is_empty()) {
                events.push(StreamEvent::Refusal(text));
            }
            for call in choice.delta.tool_calls {
                events.push(StreamEvent::ToolCall(ToolCallDelta {
                    index: call.index,
                    id: call.id,
                    name: call.function.name,
                    arguments: call.function.arguments.unwrap_or_default(),
                }));
            }
            let legacy = choice.delta.function_call;
            events.extend(legacy.and_then(|piece| self.legacy_piece(piece)));
            if let Some(reason) = choice.finish_reason {
                events.push(StreamEvent::Finish(finish_reason(&reason)));
            }
        }
        if let Some(usage) = chunk.usage {
            events.push(StreamEvent::Usage(usage.into()));
        }
        Ok(events)
    }
}

/// `{"error": {...}}`, `{"error": "text"}`, or a flat `{"message", "type", "code"}` (vLLM).
#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorShape {
    Wrapped { error: ErrorField },
    Flat(ErrorJson),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorField {
    Object(ErrorJson),
    Text(String),
}

#[derive(Deserialize)]
struct ErrorJson {
    message: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    code: Option<Value>,
}

fn error_body(body: &[u8]) -> Option<ErrorBody> {
    let error = match serde_json::from_slice::<ErrorShape>(body).ok()? {
        ErrorShape::Wrapped {
            error: ErrorField::Object(e),
        }
        | ErrorShape::Flat(e) => e,
        ErrorShape::Wrapped {
            error: ErrorField::Text(message),
        } => {
            return Some(ErrorBody {
                message,
                ..ErrorBody::default()
            });
        }
    };
    let numeric = error
        .code
        .as_ref()
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok());
    let code = match error.code {
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => error.kind.clone(),
    };
    let says = |word: &str| code.as_deref() == Some(word) || error.kind.as_deref() == Some(word);
    let billing = says("insufficient_quota") || says("billing_hard_limit_reached");
    let status = if says("rate_limit_exceeded") {
        Some(429)
    } else {
        numeric
            .filter(|s| (100..600).contains(s))
            .or_else(|| status_of(error.kind.as_deref()?, code.as_deref()))
    };
    Some(ErrorBody {
        message: error.message,
        code,
        status,
        class: billing.then_some(FailureClass::Billing),
        retry_delay: None,
    })
}

/// The status an error's `type` stands for, for an error with none (inside a 200 or a stream):
/// a request the server calls invalid is returned, not retried elsewhere.
fn status_of(kind: &str, code: Option<&str>) -> Option<u16> {
    Some(match kind {
        "invalid_request_error" if code == Some("invalid_api_key") => 401,
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "rate_limit_error" => 429,
        "server_error" => 500,
        _ => return None,
    })
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
