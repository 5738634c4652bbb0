//! Google Gemini `generateContent` / `streamGenerateContent?alt=sse`.

use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use router_core::config::Api;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::classify::{ErrorBody, Failure, FailureClass};
use super::headers::parse_duration_openai;
use super::{EventDecoder, Target, WireFormat, error, malformed, nullable, secret_header};
use crate::secret::ApiKey;
use crate::types::{
    ChatRequest, Completion, FinishReason, Image, Message, Part, ResponseFormat, Role, StreamEvent,
    ThinkingDelta, Thought, Tool, ToolCall, ToolCallDelta, ToolChoice, Usage,
};

/// The Gemini wire format. It sends no rate-limit headers: the trait's defaults read none.
#[derive(Debug)]
pub(super) struct Gemini;

impl WireFormat for Gemini {
    fn url(&self, base: &str, model: &str, stream: bool) -> String {
        url(base, model, stream)
    }

    /// The key is never in the URL (HTTP client errors print URLs): it goes in a header.
    fn auth(&self, key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
        secret_header("x-goog-api-key", "", key)
    }

    /// `models.get`.
    fn model_url(&self, base: &str, model: &str) -> (String, super::Lookup) {
        let model = model.strip_prefix("models/").unwrap_or(model);
        (format!("{base}/models/{model}"), super::Lookup::Itself)
    }

    fn body(&self, _target: &Target<'_>, req: &ChatRequest, _stream: bool) -> Value {
        body(req)
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
}

/// The model path; a `models/` prefix on the configured name is accepted.
fn url(base: &str, model: &str, stream: bool) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    if stream {
        format!("{base}/models/{model}:streamGenerateContent?alt=sse")
    } else {
        format!("{base}/models/{model}:generateContent")
    }
}

/// The request body. Every message becomes a `contents` turn except system messages, which go
/// to `systemInstruction`; consecutive tool results share one `user` turn.
///
/// Fields Gemini has no place for are left out: `user` and `metadata` (its API has no end-user
/// or tag field), `parallel_tool_calls` (no switch), and a tool's `strict` (no per-function
/// switch). `extra_body` is merged by [`super::build`].
fn body(req: &ChatRequest) -> Value {
    let (system, turns): (Vec<_>, Vec<_>) =
        req.messages.iter().partition(|m| m.role == Role::System);
    let mut body = Map::new();
    body.insert("contents".into(), contents(&turns).into());
    if !system.is_empty() {
        let parts: Vec<Value> = system.iter().map(|m| text_part(m)).collect();
        body.insert("systemInstruction".into(), json!({ "parts": parts }));
    }
    if !req.tools.is_empty() {
        let declarations: Vec<Value> = req.tools.iter().map(function_declaration).collect();
        body.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
    }
    if let Some(choice) = &req.tool_choice {
        body.insert(
            "toolConfig".into(),
            json!({ "functionCallingConfig": function_calling_config(choice) }),
        );
    }
    let config = generation_config(req);
    if !config.is_empty() {
        body.insert("generationConfig".into(), config.into());
    }
    Value::Object(body)
}

/// A system message as one text part: its text parts joined (its images are not sent).
fn text_part(m: &Message) -> Value {
    json!({ "text": m.text_content() })
}

/// The conversation as Gemini turns: `model` for the assistant, `user` for the user and for
/// tool results (as `functionResponse` parts, consecutive ones in one turn).
fn contents(turns: &[&Message]) -> Vec<Value> {
    let mut contents: Vec<Value> = Vec::new();
    let mut results: Vec<Value> = Vec::new();
    for (at, m) in turns.iter().enumerate() {
        if m.role == Role::Tool {
            results.push(function_response(m, &turns[..at]));
            continue;
        }
        if !results.is_empty() {
            let parts = std::mem::take(&mut results);
            contents.push(json!({ "role": "user", "parts": parts }));
        }
        let role = if m.role == Role::Assistant {
            "model"
        } else {
            "user"
        };
        let mut parts: Vec<Value> = m.content.iter().map(part).collect();
        let mut signatures = m
            .thinking
            .iter()
            .filter(|t| t.goes_to(Api::Gemini))
            .filter_map(|t| t.signature.as_deref());
        for (i, call) in m.tool_calls.iter().enumerate() {
            let signature = signatures
                .next()
                .or((i == 0).then_some(NO_THOUGHT_SIGNATURE));
            parts.push(function_call(call, signature));
        }
        // A message with no content and no call is one empty text part: a turn has parts.
        if parts.is_empty() {
            parts.push(json!({ "text": "" }));
        }
        contents.push(json!({ "role": role, "parts": parts }));
    }
    if !results.is_empty() {
        contents.push(json!({ "role": "user", "parts": results }));
    }
    contents
}

/// A text part, or an image: `inlineData` for base64 bytes, `fileData` for a URL.
fn part(p: &Part) -> Value {
    match p {
        Part::Text { text } => json!({ "text": text }),
        Part::Image {
            image: Image::Base64 { media_type, data },
            ..
        } => json!({ "inlineData": { "mimeType": media_type, "data": data } }),
        Part::Image {
            image: Image::Url { url },
            ..
        } => {
            let mut file = Map::new();
            file.insert("fileUri".into(), url.as_str().into());
            if let Some(mime) = image_mime_type(url) {
                file.insert("mimeType".into(), mime.into());
            }
            json!({ "fileData": file })
        }
    }
}

/// The image type a URL's path names by its extension (`.png`, `.jpg` / `.jpeg`, `.gif`,
/// `.webp`, `.heic`, `.heif`; any case; query and fragment ignored). `None` for any other URL:
/// its `fileData` then goes without `mimeType`, which Gemini's schema makes optional.
fn image_mime_type(url: &str) -> Option<&'static str> {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let name = path.rsplit('/').next().unwrap_or(path);
    let (_, ext) = name.rsplit_once('.')?;
    let mime = match ext.to_ascii_lowercase().as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "heif" => "image/heif",
        _ => return None,
    };
    Some(mime)
}

/// The signature Gemini documents for function calls it did not produce in this exchange: a
/// turn another provider answered, or whose thinking was not given back, has no
/// `thoughtSignature`, and Gemini 3 refuses (400) a history whose function calls come back
/// without one.
const NO_THOUGHT_SIGNATURE: &str = "skip_thought_signature_validator";

/// An assistant's tool call as a `functionCall` part: its arguments parsed (`{}` if they are not
/// a JSON object, which request checks already refuse), its id, and its `thoughtSignature`: the
/// one Gemini gave the call, given back as the message's thinking (the turn's signatures in
/// order, one per call that had one), else [`NO_THOUGHT_SIGNATURE`] on the turn's first call.
fn function_call(call: &ToolCall, signature: Option<&str>) -> Value {
    let args = match serde_json::from_str::<Value>(&call.arguments) {
        Ok(args @ Value::Object(_)) => args,
        _ => Value::Object(Map::new()),
    };
    let mut part = Map::new();
    part.insert(
        "functionCall".into(),
        json!({ "id": call.id, "name": call.name, "args": args }),
    );
    if let Some(signature) = signature {
        part.insert("thoughtSignature".into(), signature.into());
    }
    Value::Object(part)
}

/// A tool result as a `functionResponse` part. Its `name` is that of the call it answers, found
/// by id among the earlier assistant messages (the latest such call); a result whose call is not
/// in the conversation goes under its call id as the name (Gemini requires one). Its `response`
/// is the result's text parsed as a JSON object when it is one, else `{"content": text}`.
fn function_response(m: &Message, earlier: &[&Message]) -> Value {
    let id = m.tool_call_id.as_deref().unwrap_or_default();
    let name = earlier
        .iter()
        .rev()
        .flat_map(|e| e.tool_calls.iter().rev())
        .find(|c| c.id == id)
        .map_or(id, |c| c.name.as_str());
    let text = m.text_content();
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(object @ Value::Object(_)) => object,
        _ => json!({ "content": text }),
    };
    json!({ "functionResponse": { "id": id, "name": name, "response": response } })
}

/// A tool as a function declaration. Its parameters go as `parametersJsonSchema`, which takes
/// JSON Schema as it is (`parameters` takes only an OpenAPI subset, and the neutral tool carries
/// a full JSON Schema).
fn function_declaration(t: &Tool) -> Value {
    let mut declaration = Map::new();
    declaration.insert("name".into(), t.name.as_str().into());
    if let Some(d) = &t.description {
        declaration.insert("description".into(), d.as_str().into());
    }
    declaration.insert("parametersJsonSchema".into(), t.parameters.clone());
    Value::Object(declaration)
}

/// `AUTO`, `NONE`, `ANY` (required), or `ANY` limited to one function by `allowedFunctionNames`.
fn function_calling_config(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!({ "mode": "AUTO" }),
        ToolChoice::None => json!({ "mode": "NONE" }),
        ToolChoice::Required => json!({ "mode": "ANY" }),
        ToolChoice::Function(name) => json!({ "mode": "ANY", "allowedFunctionNames": [name] }),
    }
}

/// Sampling, length, stop sequences, the answer's shape and the thinking budget.
///
/// A JSON-object answer sets `responseMimeType: application/json`; a JSON-schema answer also
/// sends its schema as `responseJsonSchema`, which takes JSON Schema as it is (`responseSchema`
/// takes only an OpenAPI subset). The schema's name and `strict` have no place in Gemini's API.
fn generation_config(req: &ChatRequest) -> Map<String, Value> {
    let mut config = Map::new();
    if let Some(max) = req.max_tokens {
        config.insert("maxOutputTokens".into(), max.into());
    }
    let numbers = [
        ("temperature", req.temperature),
        ("topP", req.top_p),
        ("presencePenalty", req.presence_penalty),
        ("frequencyPenalty", req.frequency_penalty),
    ];
    for (name, value) in numbers {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            config.insert(name.into(), v.into());
        }
    }
    if !req.stop.is_empty() {
        config.insert("stopSequences".into(), req.stop.clone().into());
    }
    if let Some(seed) = req.seed {
        config.insert("seed".into(), seed.into());
    }
    match &req.response_format {
        Some(ResponseFormat::JsonObject) => {
            config.insert("responseMimeType".into(), "application/json".into());
        }
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            config.insert("responseMimeType".into(), "application/json".into());
            config.insert("responseJsonSchema".into(), schema.clone());
        }
        Some(ResponseFormat::Text) | None => {}
    }
    if let Some(reasoning) = &req.reasoning {
        config.insert(
            "thinkingConfig".into(),
            json!({ "thinkingBudget": reasoning.budget() }),
        );
    }
    config
}

/// A response, or one streamed partial response.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default, deserialize_with = "nullable")]
    candidates: Vec<Candidate>,
    usage_metadata: Option<UsageJson>,
    prompt_feedback: Option<PromptFeedback>,
    response_id: Option<String>,
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default, deserialize_with = "nullable")]
    content: Content,
    finish_reason: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    index: u32,
}

#[derive(Deserialize, Default)]
struct Content {
    #[serde(default, deserialize_with = "nullable")]
    parts: Vec<PartJson>,
}

/// One part of an answer: text (a thought, or not), a function call, or something else
/// (ignored).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartJson {
    text: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    thought: bool,
    function_call: Option<FunctionCallJson>,
    thought_signature: Option<String>,
}

#[derive(Deserialize)]
struct FunctionCallJson {
    id: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    name: String,
    args: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageJson {
    #[serde(default, deserialize_with = "nullable")]
    prompt_token_count: u64,
    #[serde(default, deserialize_with = "nullable")]
    candidates_token_count: u64,
    #[serde(default, deserialize_with = "nullable")]
    thoughts_token_count: u64,
    #[serde(default, deserialize_with = "nullable")]
    cached_content_token_count: u64,
}

/// Thoughts are billed as output; cached content is part of the prompt count.
impl From<UsageJson> for Usage {
    fn from(u: UsageJson) -> Self {
        Usage {
            prompt_tokens: u.prompt_token_count,
            // Saturating: a sum past `u64` is far above the plausibility bound checked next.
            completion_tokens: u
                .candidates_token_count
                .saturating_add(u.thoughts_token_count),
            cached_prompt_tokens: u.cached_content_token_count,
            reasoning_tokens: u.thoughts_token_count,
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    block_reason: Option<String>,
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            FinishReason::ContentFilter
        }
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Gemini ends a turn of function calls with `STOP`: that is a [`FinishReason::ToolCalls`].
fn with_calls(reason: FinishReason, calls: bool) -> FinishReason {
    match reason {
        FinishReason::Stop if calls => FinishReason::ToolCalls,
        other => other,
    }
}

/// A function call as the neutral tool call: the id Gemini gave it, else `call_<n>` with `n` its
/// place among the answer's calls (0, 1, ...); its arguments as JSON text (`{}` when absent).
fn tool_call(call: FunctionCallJson, n: u32) -> ToolCall {
    ToolCall {
        id: call
            .id
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("call_{n}")),
        name: call.name,
        arguments: call
            .args
            .filter(|a| !a.is_null())
            .map_or_else(|| "{}".to_owned(), |a| a.to_string()),
    }
}

/// What the first candidate says: its text (thought parts left out), its function calls, the
/// signatures of those calls (Gemini's, for the next turn), and its finish reason as Gemini
/// named it.
struct First {
    text: String,
    calls: Vec<FunctionCallJson>,
    signatures: Vec<String>,
    finish: Option<FinishReason>,
}

impl Response {
    /// The first candidate; a prompt that was blocked before any candidate is a content-filter
    /// finish. `None`: no candidate and no block reason, nothing at all.
    fn first(&mut self) -> Option<First> {
        let blocked = self
            .prompt_feedback
            .as_ref()
            .and_then(|f| f.block_reason.as_ref());
        let Some(c) = self.candidates.iter_mut().min_by_key(|c| c.index) else {
            return blocked.map(|_| First {
                text: String::new(),
                calls: Vec::new(),
                signatures: Vec::new(),
                finish: Some(FinishReason::ContentFilter),
            });
        };
        let (mut text, mut calls, mut signatures) = (String::new(), Vec::new(), Vec::new());
        for p in std::mem::take(&mut c.content.parts) {
            if let Some(call) = p.function_call {
                calls.push(call);
                signatures.extend(p.thought_signature.filter(|s| !s.is_empty()));
            } else if let Some(t) = p.text.filter(|_| !p.thought) {
                text.push_str(&t);
            }
        }
        let finish = c.finish_reason.as_deref().map(finish_reason);
        Some(First {
            text,
            calls,
            signatures,
            finish,
        })
    }
}

/// A function call's signature as a thought of Gemini's, to give back on the next turn.
fn signed(signature: String) -> Thought {
    Thought {
        origin: Api::Gemini,
        text: String::new(),
        signature: Some(signature),
        redacted: None,
    }
}

/// What an answer with no candidate and no block reason lacks.
const NO_CANDIDATES: &str = "no candidates (and no promptFeedback.blockReason)";

fn parse_response(body: &[u8]) -> Result<Completion, String> {
    let mut response: Response = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let first = response.first().ok_or(NO_CANDIDATES)?;
    let tool_calls: Vec<ToolCall> = (0..)
        .zip(first.calls)
        .map(|(n, call)| tool_call(call, n))
        .collect();
    let calls = !tool_calls.is_empty();
    let thinking = first.signatures.into_iter().map(signed).collect();
    Ok(Completion {
        id: response.response_id.filter(|id| !id.is_empty()),
        content: first.text,
        tool_calls,
        finish_reason: first.finish.map(|r| with_calls(r, calls)),
        usage: response.usage_metadata.map(Usage::from),
        refusal: None,
        thinking,
    })
}

/// Stream state: whether text or a call arrived, whether a finish reason arrived (then the end
/// of the stream is `Done`), whether the response id was passed on, and how many function calls
/// came so far (each arrives whole, in one part).
///
/// Every chunk's `usageMetadata` is a running count; only the last is final. Usage is reported
/// once the candidate has finished: from the chunk with the `finishReason`, and from any chunk
/// after it (a usage-only chunk). A stream that breaks before its finish reports none, so the
/// estimate is settled, as for the other formats; a running count would undercount the output.
#[derive(Debug, Default)]
struct Stream {
    delivered: bool,
    finished: bool,
    done: bool,
    id_sent: bool,
    calls: u32,
}

impl EventDecoder for Stream {
    fn event(&mut self, _event_name: &str, data: &str) -> Result<Vec<StreamEvent>, Failure> {
        let mut chunk: Response =
            serde_json::from_str(data).map_err(|e| malformed(Api::Gemini, data, &e))?;
        if chunk.error.is_some() {
            let data = data.as_bytes();
            return Err(error::stream_failure(error_body(data), data));
        }
        let mut events = Vec::new();
        // A chunk with no candidate is malformed unless something came before (a trailing
        // chunk may carry usage alone).
        let first = match chunk.first() {
            Some(first) => first,
            None if self.delivered => First {
                text: String::new(),
                calls: Vec::new(),
                signatures: Vec::new(),
                finish: None,
            },
            None => {
                return Err(Failure::decode(format!(
                    "malformed gemini stream: {NO_CANDIDATES}"
                )));
            }
        };
        if let Some(id) = chunk
            .response_id
            .filter(|id| !self.id_sent && !id.is_empty())
        {
            self.id_sent = true;
            events.push(StreamEvent::Id(id));
        }
        if !first.text.is_empty() {
            self.delivered = true;
            events.push(StreamEvent::Delta(first.text));
        }
        for signature in first.signatures {
            events.push(StreamEvent::Thinking(ThinkingDelta::Signature(signature)));
        }
        for call in first.calls {
            let call = tool_call(call, self.calls);
            events.push(StreamEvent::ToolCall(ToolCallDelta {
                index: self.calls,
                id: Some(call.id),
                name: Some(call.name),
                arguments: call.arguments,
            }));
            self.calls = self.calls.saturating_add(1);
            self.delivered = true;
        }
        if let Some(reason) = first.finish {
            (self.delivered, self.finished) = (true, true);
            events.push(StreamEvent::Finish(with_calls(reason, self.calls > 0)));
        }
        if let Some(usage) = chunk.usage_metadata.filter(|_| self.finished) {
            events.push(StreamEvent::Usage(usage.into()));
        }
        Ok(events)
    }

    /// `Done` once, if the stream delivered a finish reason; nothing if it was cut short.
    fn finish(&mut self) -> Vec<StreamEvent> {
        if self.finished && !self.done {
            self.done = true;
            vec![StreamEvent::Done]
        } else {
            Vec::new()
        }
    }
}

/// Error bodies come as an object, or (from some streaming endpoints) a one-element array.
#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorShape {
    One(ErrorEnvelope),
    Many([ErrorEnvelope; 1]),
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorJson,
}

#[derive(Deserialize)]
struct ErrorJson {
    code: Option<u16>,
    #[serde(default, deserialize_with = "nullable")]
    message: String,
    status: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    details: Vec<Detail>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Detail {
    #[serde(default, deserialize_with = "nullable")]
    violations: Vec<Violation>,
    retry_delay: Option<String>,
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Violation {
    #[serde(default, deserialize_with = "nullable")]
    quota_id: String,
}

/// A `PerDay` quota id is billing (it clears at the daily reset, not after `retryDelay`); an
/// `API_KEY_INVALID` reason is auth (Gemini sends it as 400).
fn error_body(body: &[u8]) -> Option<ErrorBody> {
    let error = match serde_json::from_slice::<ErrorShape>(body).ok()? {
        ErrorShape::One(e) | ErrorShape::Many([e]) => e.error,
    };
    let details = &error.details;
    let quota_ids = details
        .iter()
        .flat_map(|d| &d.violations)
        .map(|v| v.quota_id.as_str());
    let class = if quota_ids.clone().any(|id| id.contains("PerDay")) {
        Some(FailureClass::Billing)
    } else if details
        .iter()
        .any(|d| d.reason.as_deref() == Some("API_KEY_INVALID"))
    {
        Some(FailureClass::Auth)
    } else {
        None
    };
    let retry_delay: Option<Duration> = details
        .iter()
        .filter_map(|d| d.retry_delay.as_deref())
        .find_map(parse_duration_openai);
    Some(ErrorBody {
        message: error.message,
        code: error.status,
        status: error.code,
        class,
        retry_delay,
    })
}

#[cfg(test)]
#[path = "gemini_tests.rs"]
mod tests;
