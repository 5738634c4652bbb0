//! Neutral, provider-independent chat types. Wire adapters translate these to and from each
//! provider's JSON; nothing here knows about any provider's format.

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::thinking::{ThinkingDelta, Thought};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The caller.
    User,
    /// The model (its text, its tool calls, or both).
    Assistant,
    /// The result of one tool call, answering the call named by
    /// [`Message::tool_call_id`].
    Tool,
}

/// An image in a message: at a URL, or inline.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Image {
    /// An `https:` URL the provider fetches (Gemini: a `fileData` URI).
    Url {
        /// The URL.
        url: String,
    },
    /// Base64-encoded bytes.
    Base64 {
        /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
        media_type: String,
        /// The bytes, base64 (standard alphabet, padded).
        data: String,
    },
}

impl std::fmt::Debug for Image {
    /// The URL, or the media type and size of inline data (never megabytes of base64).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Image::Url { url } => f.debug_struct("Url").field("url", url).finish(),
            Image::Base64 { media_type, data } => f
                .debug_struct("Base64")
                .field("media_type", media_type)
                .field("base64_len", &data.len())
                .finish(),
        }
    }
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image (needs the `vision` capability).
    Image {
        /// Where the image is.
        image: Image,
        /// How closely the model looks at it, where the provider takes that (OpenAI's
        /// `detail`); none: the provider's default.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<ImageDetail>,
    },
}

/// How closely a model looks at an image (OpenAI's `detail`: `low` costs a fixed 85 tokens).
/// Anthropic and Gemini take no such setting; admission reserves for the largest image either
/// way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageDetail {
    /// The provider decides.
    Auto,
    /// A low-resolution look.
    Low,
    /// A high-resolution look.
    High,
}

impl ImageDetail {
    /// `auto`, `low` or `high`.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageDetail::Auto => "auto",
            ImageDetail::Low => "low",
            ImageDetail::High => "high",
        }
    }
}

/// A tool the model may call: a function with JSON Schema parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// The function's name (`^[a-zA-Z0-9_-]{1,64}$` on every provider).
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its parameters: a JSON Schema object.
    pub parameters: serde_json::Value,
    /// Ask the provider to hold the arguments to the schema exactly (OpenAI `strict`; ignored
    /// where the provider has no such switch).
    #[serde(default)]
    pub strict: bool,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool call.
    None,
    /// At least one tool call.
    Required,
    /// A call to this function.
    Function(String),
}

/// A call the model made to a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id of the call; a [`Role::Tool`] message answers it by this id.
    pub id: String,
    /// The function called.
    pub name: String,
    /// The arguments as JSON text, exactly as the model wrote them (check before use: a model
    /// may write invalid JSON).
    pub arguments: String,
}

/// A piece of a streamed tool call. The first piece of call `index` carries its id and name;
/// the `arguments` of all its pieces, joined in order, are the call's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    /// Which call of the answer (0, 1, ...), in the order the model made them.
    pub index: u32,
    /// The call's id, on its first piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The function's name, on its first piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// More argument text.
    pub arguments: String,
}

/// The shape the answer must have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text (the default).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON matching a schema (needs the `json_schema` capability).
    JsonSchema {
        /// A name for the schema (`^[a-zA-Z0-9_-]{1,64}$`).
        name: String,
        /// The JSON Schema.
        schema: serde_json::Value,
        /// Ask the provider to hold the answer to the schema exactly, where it can.
        #[serde(default)]
        strict: bool,
    },
}

/// How hard a reasoning model thinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    /// No thinking (OpenAI's `none`, which its newer reasoning models take; Anthropic: no
    /// `thinking`; Gemini: a budget of 0, which turns thinking off where a model allows it).
    None,
    /// The least thinking a model allows (OpenAI's `minimal`; Anthropic and Gemini: a 512-token
    /// budget, which Anthropic raises to its least, 1,024).
    Minimal,
    /// Little thinking (Anthropic and Gemini: a 1,024-token budget).
    Low,
    /// Some (4,096 tokens).
    Medium,
    /// Much (16,384 tokens).
    High,
    /// The most (OpenAI's `xhigh`; 24,576 tokens, the most Gemini 2.5 Flash takes).
    Xhigh,
}

impl Effort {
    /// The thinking budget that stands for this effort on providers that take a budget.
    pub fn budget_tokens(self) -> u64 {
        match self {
            Effort::None => 0,
            Effort::Minimal => 512,
            Effort::Low => 1024,
            Effort::Medium => 4096,
            Effort::High => 16_384,
            Effort::Xhigh => 24_576,
        }
    }

    /// `none`, `minimal`, `low`, `medium`, `high` or `xhigh`, as OpenAI's `reasoning_effort`
    /// takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::None => "none",
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::Xhigh => "xhigh",
        }
    }

    /// The effort a budget stands for on providers that take an effort: the smallest of
    /// `low`, `medium` and `high` (the three every reasoning model takes) whose budget covers
    /// it.
    pub fn of_budget(tokens: u64) -> Self {
        [Effort::Low, Effort::Medium]
            .into_iter()
            .find(|e| tokens <= e.budget_tokens())
            .unwrap_or(Effort::High)
    }
}

/// Reasoning controls (need the `reasoning` capability): an effort, a token budget, or both.
/// OpenAI-compatible servers get `reasoning_effort` (the effort, else the one the budget stands
/// for); Anthropic gets `thinking` and Gemini `thinkingConfig` with the budget (else the one the
/// effort stands for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Reasoning {
    /// How hard to think.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Effort>,
    /// The most tokens to think with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u64>,
}

impl Reasoning {
    /// The effort to send to providers that take one.
    pub fn effort(&self) -> Effort {
        self.effort
            .unwrap_or_else(|| Effort::of_budget(self.budget_tokens.unwrap_or(0)))
    }

    /// Whether it asks for no thinking at all (effort `none`).
    pub fn is_off(&self) -> bool {
        self.effort == Some(Effort::None)
    }

    /// The budget to send to providers that take one: 0 for effort `none`, whatever budget
    /// is set with it.
    pub fn budget(&self) -> u64 {
        if self.is_off() {
            return 0;
        }
        self.budget_tokens
            .unwrap_or_else(|| self.effort.unwrap_or(Effort::Medium).budget_tokens())
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its content: text and images. Read from JSON as a list of parts, or as one string
    /// (one text part).
    #[serde(default, deserialize_with = "text_or_parts")]
    pub content: Vec<Part>,
    /// The tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The thinking of an assistant message, as its provider wrote it: sent back only to that
    /// provider's wire format (see [`Thought`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thinking: Vec<Thought>,
    /// The call a [`Role::Tool`] message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The prompt up to the end of this message is worth caching: Anthropic gets a
    /// `cache_control` breakpoint there (at most four per request: the last ones). Providers that
    /// cache on their own ignore it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cache: bool,
}

/// A message's content from JSON: a string is one text part, `null` none.
fn text_or_parts<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Part>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Content {
        Text(String),
        Parts(Vec<Part>),
    }
    Ok(match Option::<Content>::deserialize(d)? {
        None => Vec::new(),
        Some(Content::Text(text)) => vec![Part::Text { text }],
        Some(Content::Parts(parts)) => parts,
    })
}

impl Message {
    /// A message of `role` with one text part.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![Part::Text {
                text: content.into(),
            }],
            tool_calls: Vec::new(),
            tool_call_id: None,
            thinking: Vec::new(),
            cache: false,
        }
    }
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::text(Role::System, content)
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::text(Role::User, content)
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::text(Role::Assistant, content)
    }
    /// The assistant's turn that made `calls` (and said `text`, if not empty): send it back
    /// with the results.
    pub fn assistant_calls(text: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        let text: String = text.into();
        Self {
            role: Role::Assistant,
            content: if text.is_empty() {
                Vec::new()
            } else {
                vec![Part::Text { text }]
            },
            tool_calls: calls,
            tool_call_id: None,
            thinking: Vec::new(),
            cache: false,
        }
    }
    /// The result of tool call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            ..Self::text(Role::Tool, content)
        }
    }
    /// Adds an image after the content so far.
    #[must_use]
    pub fn with_image(mut self, image: Image) -> Self {
        self.content.push(Part::Image {
            image,
            detail: None,
        });
        self
    }
    /// The text parts, joined.
    pub fn text_content(&self) -> String {
        self.texts().collect()
    }
    /// The text parts, in order.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|p| match p {
            Part::Text { text } => Some(text.as_str()),
            Part::Image { .. } => None,
        })
    }
    /// The images, in order.
    pub fn images(&self) -> impl Iterator<Item = &Image> {
        self.content.iter().filter_map(|p| match p {
            Part::Image { image, .. } => Some(image),
            Part::Text { .. } => None,
        })
    }
}

pub use router_core::flow::Priority;

/// A chat request, independent of provider. Its `Debug` shows the extra headers' names and
/// `extra_body`'s keys, never their values (a header may carry a credential for a proxy).
///
/// Fields a wire format has no place for are left out of that format's body, as the table of
/// `docs/chat-api.md` says (e.g. `seed` and the penalties for Anthropic); features that change
/// the answer (tools, images, JSON schema, reasoning) instead need a capability, and a request
/// goes only to models that have it.
#[derive(Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// Model name or alias; `None` uses `defaults.model` from the configuration.
    pub model: Option<String>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Upper bound on completion tokens.
    pub max_tokens: Option<u64>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Seed for sampling (OpenAI-compatible and Gemini).
    pub seed: Option<i64>,
    /// Presence penalty (OpenAI-compatible and Gemini).
    pub presence_penalty: Option<f64>,
    /// Frequency penalty (OpenAI-compatible and Gemini).
    pub frequency_penalty: Option<f64>,
    /// Tools the model may call (needs the `tools` capability).
    pub tools: Vec<Tool>,
    /// Whether and which tool to call; `None`: the provider's default (auto when tools are given).
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may make several calls in one turn (`None`: the provider's default).
    pub parallel_tool_calls: Option<bool>,
    /// The shape of the answer.
    pub response_format: Option<ResponseFormat>,
    /// Reasoning controls.
    pub reasoning: Option<Reasoning>,
    /// The end user, for the provider's abuse monitoring (OpenAI `user`, Anthropic
    /// `metadata.user_id`).
    pub user: Option<String>,
    /// Key-value tags (OpenAI-compatible `metadata`; kept in traces).
    pub metadata: std::collections::BTreeMap<String, String>,
    /// The caller's id for this request, in traces and the receipt; one is drawn when `None`.
    pub request_id: Option<String>,
    /// Fields merged into the top level of the provider's JSON body as given, after
    /// llmroute's own (they win): server options such as vLLM's `top_k` or DeepSeek's. Fields
    /// that decide the model, the prompt, the output cap or streaming (`messages`,
    /// `max_tokens`, `contents`, `generationConfig`, `stream`, ...) are refused: admission
    /// reserved for what llmroute writes there.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Only these providers (by their `name` in the configuration) may serve the request;
    /// empty: any.
    pub providers: Vec<String>,
    /// The tenant this request is accounted to.
    pub tenant: Option<String>,
    /// An identifier of the API key the request came with, kept in its usage record (the
    /// gateway sets the first 12 hex digits of the key's SHA-256). Never the key itself.
    pub key_id: Option<String>,
    /// The API key's own limits and budgets ([`TenantSpec::of_key`]), checked with the
    /// tenant's in the same atomic admission: the gateway sets them for a runtime key that has
    /// limits of its own.
    ///
    /// [`TenantSpec::of_key`]: router_core::ledger::TenantSpec::of_key
    pub key_account: Option<router_core::ledger::TenantSpec>,
    /// How long the whole request (waits, retries, the call) may take.
    pub deadline: Option<Duration>,
    /// How urgent it is.
    pub priority: Priority,
    /// Extra HTTP headers sent to the provider with every attempt of this request: tracing
    /// ids, provider features (e.g. `anthropic-beta`). Headers that carry the key or frame the
    /// body (`authorization`, `x-api-key`, `x-goog-api-key`, `content-type`, `content-length`,
    /// `host`, `transfer-encoding`) are refused with [`Error::InvalidRequest`](crate::Error).
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for ChatRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        let extra: Vec<&str> = self.extra_body.keys().map(String::as_str).collect();
        f.debug_struct("ChatRequest")
            .field("model", &self.model)
            .field("messages", &self.messages)
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .field("top_p", &self.top_p)
            .field("stop", &self.stop)
            .field("seed", &self.seed)
            .field("presence_penalty", &self.presence_penalty)
            .field("frequency_penalty", &self.frequency_penalty)
            .field("tools", &self.tools)
            .field("tool_choice", &self.tool_choice)
            .field("parallel_tool_calls", &self.parallel_tool_calls)
            .field("response_format", &self.response_format)
            .field("reasoning", &self.reasoning)
            .field("user", &self.user)
            .field("metadata", &self.metadata)
            .field("request_id", &self.request_id)
            .field("extra_body (values hidden)", &extra)
            .field("providers", &self.providers)
            .field("tenant", &self.tenant)
            .field("key_id", &self.key_id)
            .field("key_account", &self.key_account)
            .field("deadline", &self.deadline)
            .field("priority", &self.priority)
            .field("headers (values hidden)", &headers)
            .finish()
    }
}

impl ChatRequest {
    /// A request of one user message to the default model.
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            messages: vec![Message::user(prompt)],
            ..Self::default()
        }
    }

    /// The prompt's size as the router estimates it: the characters of every text part, tool
    /// call, tool definition (parameters as JSON) and response schema, and its images (each
    /// counted as [`IMAGE_TOKENS`](router_core::estimate::IMAGE_TOKENS)).
    pub fn prompt_size(&self) -> router_core::estimate::PromptSize {
        crate::request::prompt_size(self)
    }

    /// The hashes of the prompt's prefixes, by which admission finds what a provider holds in
    /// its prompt cache: `None` when no message is marked [`Message::cache`].
    pub fn prefix_hashes(&self) -> Option<router_core::prompt_cache::PrefixHashes> {
        crate::request::prefix_hashes(self)
    }

    /// What the request needs of a model, beyond text.
    pub fn features(&self) -> Features {
        let calls = self
            .messages
            .iter()
            .any(|m| m.role == Role::Tool || !m.tool_calls.is_empty());
        Features {
            tools: !self.tools.is_empty() || calls,
            images: self.messages.iter().any(|m| m.images().next().is_some()),
            json_schema: matches!(
                self.response_format,
                Some(ResponseFormat::JsonSchema { .. })
            ),
            reasoning: self.reasoning.is_some(),
        }
    }
}

pub use router_core::config::Features;

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end or a stop sequence.
    Stop,
    /// `max_tokens` was reached.
    Length,
    /// The provider filtered the content.
    ContentFilter,
    /// The model called tools: answer them with [`Role::Tool`] messages.
    ToolCalls,
    /// Anything else, as the provider named it.
    Other(String),
}

impl FinishReason {
    /// The reason's name: `stop`, `length`, `content_filter`, `tool_calls`, or the provider's
    /// own. These are also OpenAI's names.
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Other(other) => other,
        }
    }

    /// The reason named `name` ([`FinishReason::as_str`]'s names; OpenAI's legacy
    /// `function_call` is `tool_calls`), else [`FinishReason::Other`].
    pub fn from_name(name: &str) -> Self {
        match name {
            "stop" => FinishReason::Stop,
            "length" => FinishReason::Length,
            "content_filter" => FinishReason::ContentFilter,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            other => FinishReason::Other(other.to_owned()),
        }
    }
}

/// Token usage of one request, as the provider reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Completion tokens, reasoning / thinking tokens included.
    pub completion_tokens: u64,
    /// Of the prompt tokens, those read from the provider's prompt cache (billed at the
    /// model's `cached_input` price).
    #[serde(default)]
    pub cached_prompt_tokens: u64,
    /// Of the completion tokens, those spent reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Of the prompt tokens, those written to the provider's prompt cache (Anthropic's
    /// `cache_creation_input_tokens`), billed at the model's cache-write prices.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Of the cache writes, those kept for an hour (billed at `cache_write_1h`); the rest are
    /// kept five minutes.
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
}

impl Usage {
    /// `prompt` prompt and `completion` completion tokens, none cached or reasoning.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            ..Self::default()
        }
    }

    /// The cost in USD at `price`: each part of the prompt (plain, read from the cache,
    /// written to it) at its price, in the band the prompt's size falls in.
    pub fn cost(&self, price: &router_core::config::Price) -> f64 {
        let written_1h = self.cache_write_1h_tokens.min(self.cache_write_tokens);
        price.bill(&router_core::config::Billed {
            prompt: self.prompt_tokens,
            cached: self.cached_prompt_tokens,
            written: self.cache_write_tokens - written_1h,
            written_1h,
            output: self.completion_tokens,
        })
    }

    /// Prompt plus completion, saturating at `u64::MAX`.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// What an adapter makes of a complete (non-streaming) provider response.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The provider's id of the response.
    pub id: Option<String>,
    /// The answer text.
    pub content: String,
    /// The tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish_reason: Option<FinishReason>,
    /// Usage, if the provider reported it.
    pub usage: Option<Usage>,
    /// The model's refusal to answer (OpenAI's `message.refusal`), if it gave one.
    pub refusal: Option<String>,
    /// The model's thinking, where its provider sends it back signed.
    pub thinking: Vec<Thought>,
}

/// What an adapter makes of one streamed event.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Text to pass to the caller.
    Delta(String),
    /// A piece of a tool call.
    ToolCall(ToolCallDelta),
    /// A piece of the model's refusal to answer (OpenAI's `delta.refusal`).
    Refusal(String),
    /// A piece of the model's thinking.
    Thinking(ThinkingDelta),
    /// The provider's id of the response.
    Id(String),
    /// The finish reason arrived.
    Finish(FinishReason),
    /// Usage so far (cumulative: replaces any earlier value).
    Usage(Usage),
    /// The stream is complete.
    Done,
    /// Nothing for the caller (pings, block starts).
    Ignore,
}

impl StreamEvent {
    /// Whether it is part of the answer (text, a tool call, a finish): once one came, the
    /// caller may have output and the request is never retried.
    pub(crate) fn says_something(&self) -> bool {
        matches!(
            self,
            StreamEvent::Delta(_)
                | StreamEvent::ToolCall(_)
                | StreamEvent::Refusal(_)
                | StreamEvent::Thinking(_)
                | StreamEvent::Finish(_)
        )
    }
}

/// How one provider call ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The provider answered.
    Ok,
    /// The call failed; the router failed over or gave up.
    Failed {
        /// What kind of failure (`rate_limited`, `overloaded`, `server_error`, `billing`, `auth`,
        /// `invalid`, `decode`, `timeout`, `connect`).
        kind: String,
        /// HTTP status, when the provider answered.
        status: Option<u16>,
        /// The provider's message, or the transport's.
        message: String,
        /// The cooldown put on the deployment, if any.
        #[serde(skip_serializing_if = "Option::is_none", with = "opt_ms")]
        cooldown: Option<Duration>,
        /// The provider's stated wait, when it was longer than `retry.max_cooldown_secs` and the
        /// cooldown was clamped to that.
        #[serde(skip_serializing_if = "Option::is_none", with = "opt_ms")]
        clamped_from: Option<Duration>,
    },
}

/// One provider call made for a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attempt {
    /// Provider name.
    pub provider: String,
    /// Model name.
    pub model: String,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: AttemptOutcome,
}

/// A completed chat: the answer and its receipt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatResponse {
    /// The answer's text.
    pub content: String,
    /// The tool calls the model made, in order (`finish_reason` is then `tool_calls`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The model's thinking, where its provider sends it back signed: give it back in the
    /// assistant message of the next turn ([`Message::thinking`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub thinking: Vec<Thought>,
    /// Who answered, why the model stopped, usage, cost, attempts and waits.
    #[serde(flatten)]
    pub receipt: Receipt,
}

/// How a request was served, whole or streamed: the last word of every answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Receipt {
    /// The request's id: the caller's, else the one llmroute drew.
    pub request_id: String,
    /// The provider's id of the response, when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// Why the model stopped.
    pub finish_reason: Option<FinishReason>,
    /// The model's refusal to answer, when it declined (OpenAI's `refusal`, say for a
    /// structured answer it will not give): the text is then empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Provider that answered.
    pub provider: String,
    /// Model that answered.
    pub model: String,
    /// Tokens used, as the provider reported them (the estimate if it reported none).
    pub usage: Usage,
    /// Cost of this answer in USD, at the configured prices.
    pub cost_usd: f64,
    /// Every provider call made, failed ones first, the one that answered last.
    pub attempts: Vec<Attempt>,
    /// Time spent waiting for capacity.
    #[serde(with = "ms")]
    pub waited: Duration,
    /// Time spent in provider calls, failed ones included: until each answered in full, or for
    /// a stream until it opened. The rest of a request's time is the router's (waits included).
    #[serde(with = "ms")]
    pub upstream: Duration,
    /// The tenant's window (requests and tokens of the last 60 s) as the admission of the call
    /// that answered left it: what rate-limit headers report. `None` without a tenant, or when
    /// that admission counted nothing there. Not part of the JSON receipt.
    #[serde(skip)]
    pub tenant_window: Option<router_core::ledger::WindowUse>,
}

/// One item of a chat stream.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatChunk {
    /// More text.
    Delta(String),
    /// A piece of a tool call, as it arrives.
    ToolCallDelta(ToolCallDelta),
    /// The answer's tool calls, assembled: sent once, before [`ChatChunk::Done`], when the
    /// model made any.
    ToolCalls(Vec<ToolCall>),
    /// A piece of the model's thinking, as it arrives.
    Thinking(ThinkingDelta),
    /// The answer's thinking, assembled: sent once, before the tool calls and
    /// [`ChatChunk::Done`], when the model thought.
    Thoughts(Vec<Thought>),
    /// The stream is complete: always the last item of a successful stream.
    Done(Receipt),
}

mod ms {
    use std::time::Duration;

    pub(super) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
}

mod opt_ms {
    use std::time::Duration;

    pub(super) fn serialize<S: serde::Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }
}

/// Assembles streamed tool-call pieces into whole calls: per index, the first id and name, the
/// arguments joined in the order they came.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCallAssembly {
    calls: Vec<(u32, ToolCall)>,
}

impl ToolCallAssembly {
    /// Adds one piece.
    pub fn push(&mut self, delta: &ToolCallDelta) {
        let at = match self.calls.iter().position(|(i, _)| *i == delta.index) {
            Some(at) => at,
            None => {
                let empty = ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                };
                self.calls.push((delta.index, empty));
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[at].1;
        if let Some(id) = delta.id.as_ref().filter(|_| call.id.is_empty()) {
            call.id.clone_from(id);
        }
        if let Some(name) = delta.name.as_ref().filter(|_| call.name.is_empty()) {
            call.name.clone_from(name);
        }
        call.arguments.push_str(&delta.arguments);
    }

    /// Whether no piece arrived.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The calls, by index.
    pub fn finish(mut self) -> Vec<ToolCall> {
        self.calls.sort_by_key(|(i, _)| *i);
        self.calls.into_iter().map(|(_, c)| c).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn message_content_reads_a_string_or_parts() {
        let text: Message = serde_json::from_str(r#"{"role": "user", "content": "Hi"}"#).unwrap();
        assert_eq!(text, Message::user("Hi"));
        let parts: Message = serde_json::from_str(
            r#"{"role": "user", "content": [{"type": "text", "text": "Hi"},
                {"type": "image", "image": {"type": "url", "url": "https://x.test/a.png"}}]}"#,
        )
        .unwrap();
        assert_eq!(parts.texts().collect::<Vec<_>>(), ["Hi"]);
        assert_eq!(parts.images().count(), 1);
        let none: Message =
            serde_json::from_str(r#"{"role": "assistant", "content": null}"#).unwrap();
        assert!(none.content.is_empty());
        let round = serde_json::to_string(&parts).unwrap();
        assert_eq!(serde_json::from_str::<Message>(&round).unwrap(), parts);
    }

    #[test]
    fn tool_call_pieces_assemble_per_index_in_order() {
        let piece = |index, id: Option<&str>, name: Option<&str>, arguments: &str| ToolCallDelta {
            index,
            id: id.map(Into::into),
            name: name.map(Into::into),
            arguments: arguments.into(),
        };
        let mut assembly = ToolCallAssembly::default();
        for d in [
            piece(1, Some("b"), Some("g"), "{\"y\""),
            piece(0, Some("a"), Some("f"), "{}"),
            piece(1, None, None, ":2}"),
        ] {
            assembly.push(&d);
        }
        let calls = assembly.finish();
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].arguments.as_str()),
            ("a", "{}")
        );
        assert_eq!(
            (calls[1].name.as_str(), calls[1].arguments.as_str()),
            ("g", "{\"y\":2}")
        );
    }

    #[test]
    fn cached_prompt_tokens_cost_the_cached_price() {
        let price = router_core::config::Price::flat(router_core::config::Rates {
            cached_input_per_mtok: Some(0.5),
            ..router_core::config::Rates::new(2.0, 8.0)
        });
        let usage = Usage {
            cached_prompt_tokens: 600,
            ..Usage::new(1000, 100)
        };
        let want = (400.0 * 2.0 + 600.0 * 0.5 + 100.0 * 8.0) / 1e6;
        assert!((usage.cost(&price) - want).abs() < 1e-15);
        // Without a cached price, cached tokens cost the input price.
        let plain = router_core::config::Price::new(2.0, 8.0);
        assert!((usage.cost(&plain) - (1000.0 * 2.0 + 100.0 * 8.0) / 1e6).abs() < 1e-15);
    }
}
